"""A few training steps of a program's models, for comparing libraries
(test_programs_more.py).

    python more_probe.py PROGRAM LIB DTYPE WEIGHTS.npz OUT.npz [--compiled] [--steps N]

PROGRAM is one of ADAPTERS (a program, or a variant of one); LIB is torch or cagrad (imported as torch through
cagrad.as_torch; --compiled runs every backward under cagrad.compiled_autograd.enable()).
The models are built in DTYPE with dropout off. If WEIGHTS.npz exists their state is
loaded from it, else written to it, so the first process to run sets the weights for all.

The steps call the program's own step functions on fixed batches made with numpy (or
sampled with Python's random, seeded the same in every library). Where a
program draws noise inside a step (torch.randn, torch.randn_like), the probe replaces those
two functions with draws from one numpy stream, so every library sees the same noise.
OUT.npz gets the losses of every step and, for each optimizer, the gradients of its
parameters as they stood at its first step (for LBFGS: after the first closure); where the
program updates its parameters by hand, the gradients left after the first step.
"""

import os
import random
import sys
import warnings

import numpy as np

STEPS = 3


def batches(make, n, dtype, torch):
    data = make(n, 5)
    data = data if isinstance(data, tuple) else (data,)
    return [t.to(dtype) if t.is_floating_point() else t for t in data]


def vae(mod, torch, dtype, steps):
    model = mod.VAE()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, _ = batches(mod.blob_images, 8 * steps, dtype, torch)
    run = [lambda i=i: mod.train_step(model, opt, x[8 * i:8 * i + 8]) for i in range(steps)]
    return {"vae": model}, [opt], run


def dcgan(mod, torch, dtype, steps):
    netG, netD = mod.Generator(0, 8, 8, 1), mod.Discriminator(0, 8, 1)
    netG.apply(mod.weights_init)
    netD.apply(mod.weights_init)
    betas = (0.5, 0.999)
    optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=betas)
    optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=betas)
    (x,) = batches(mod.stripes, 6 * steps, dtype, torch)
    crit = torch.nn.BCELoss()

    def step(i):
        errD, errG, *_ = mod.train_step(netG, netD, optG, optD, crit, x[6 * i:6 * i + 6], 8,
                                        torch.device("cpu"))
        return errD + errG

    return {"G": netG, "D": netD}, [optD, optG], [lambda i=i: step(i) for i in range(steps)]


def time_sequence(mod, torch, dtype, steps):
    seq = mod.Sequence().double()
    opt = torch.optim.LBFGS(seq.parameters(), lr=0.8, max_iter=4)
    inp, target, _, _ = mod.split_data(mod.sine_waves(n=6, length=12))
    crit = torch.nn.MSELoss()
    log = []
    run = [lambda: mod.train_step(seq, crit, opt, inp, target, log) for _ in range(steps)]
    return {"seq": seq}, [opt], run


def resnet(mod, torch, dtype, steps, arch="resnet_basic"):
    model = getattr(mod, arch)()
    crit = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), 0.05, momentum=0.9, weight_decay=1e-4)
    x, y = batches(mod.squares, 6 * steps, dtype, torch)

    def step(i):
        return mod.train_step(model, crit, opt, x[6 * i:6 * i + 6], y[6 * i:6 * i + 6])[1].item()

    return {"net": model}, [opt], [lambda i=i: step(i) for i in range(steps)]


def vit(mod, torch, dtype, steps, patchify="conv"):
    model = mod.ViT(depth=2, patchify=patchify)
    crit = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    opt = torch.optim.AdamW(mod.param_groups(model, 0.05), lr=3e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, mod.warmup_cosine(2, 10))
    x, y = batches(mod.quadrants, 6 * steps, dtype, torch)

    def step(i):
        return mod.train_step(model, crit, opt, sched, x[6 * i:6 * i + 6], y[6 * i:6 * i + 6])[0]

    return {"vit": model}, [opt], [lambda i=i: step(i) for i in range(steps)]


def char_rnn(mod, torch, dtype, steps, asgd=False):
    corpus = mod.Corpus(mod.TEXT)
    model = mod.RNNModel(len(corpus.chars), 16, 32, 2)
    data = mod.batchify(corpus.train, 4)
    crit = torch.nn.NLLLoss()
    opt = torch.optim.ASGD(model.parameters(), lr=2.0, t0=0, lambd=0.0,
                           weight_decay=1.2e-6) if asgd else None
    state = {"hidden": None}

    def step(i):
        if state["hidden"] is None:
            state["hidden"] = model.init_hidden(4)
        x, y = mod.get_batch(data, 8 * i, 8)
        loss, state["hidden"] = mod.train_window(model, crit, x, y, state["hidden"], 2.0, 0.25,
                                                 opt)
        return loss

    return {"rnn": model}, [opt] if asgd else [], [lambda i=i: step(i) for i in range(steps)]


def text_classification(mod, torch, dtype, steps, mode="mean"):
    model = mod.TextClassificationModel(mod.VOCAB, 16, mod.NUM_CLASS, mode=mode)
    crit = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=5.0)
    news = mod.synthetic_news(8 * steps, 3)
    batches = [mod.collate_batch(news[8 * i:8 * i + 8]) for i in range(steps)]

    def step(i):
        return mod.train_step(model, crit, opt, *batches[i])[1].item()

    return {"text": model}, [opt], [lambda i=i: step(i) for i in range(steps)]


def regression(mod, torch, dtype, steps):
    fc = torch.nn.Linear(mod.POLY_DEGREE, 1)
    rng = np.random.default_rng(4)
    xs = [mod.make_features(torch.from_numpy(rng.uniform(-1, 1, 16)).to(dtype))
          for _ in range(steps)]
    w, b = mod.W_target.to(dtype), mod.b_target.item()
    run = [lambda x=x: mod.step(fc, x, x.mm(w) + b, 0.5, 0.2) for x in xs]
    return {"fc": fc}, [], run


def siamese(mod, torch, dtype, steps, head="cat"):
    model = mod.SiameseNetwork(head)
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    crit = torch.nn.BCELoss() if head == "cat" else \
        torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(1.5))
    ds = mod.PairDataset(6 * steps, 2)
    items = [ds[i] for i in range(len(ds))]
    batches = [[torch.stack([it[k] for it in items[6 * i:6 * i + 6]]).to(dtype)
                for k in range(3)] for i in range(steps)]
    run = [lambda b=b: mod.train_step(model, crit, opt, *b) for b in batches]
    return {"siam": model}, [opt], run


def dqn(mod, torch, dtype, steps):
    random.seed(5)  # the replay memory samples with Python's random, the same in both
    policy, target = mod.DQN(4, 2), mod.DQN(4, 2)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3, amsgrad=True)
    memory = mod.ReplayMemory(100)
    rng = np.random.default_rng(6)
    for i in range(40):
        state = torch.from_numpy(rng.normal(size=(1, 4))).to(dtype)
        after = None if i % 4 == 3 else torch.from_numpy(rng.normal(size=(1, 4))).to(dtype)
        memory.push(state, torch.tensor([[int(rng.integers(2))]]), after,
                    torch.tensor([float(rng.normal())], dtype=dtype))

    def step():
        loss = mod.optimize_model(policy, target, opt, memory, 16)
        mod.soft_update(policy, target, 0.05)
        return loss

    return {"policy": policy, "target": target}, [opt], [step] * steps


def forward_forward(mod, torch, dtype, steps):
    net = mod.Net([784, 32, 32], threshold=0.5, lr=0.01)
    x, y = batches(mod.bars, 16, dtype, torch)
    perm = np.random.default_rng(7).permutation(16)
    x_pos, x_neg = mod.overlay_y_on_x(x, y), mod.overlay_y_on_x(x, y[torch.from_numpy(perm)])

    def step():
        h_pos, h_neg, total = x_pos, x_neg, 0.0
        for layer in net.layers:  # each layer learns from the detached outputs before it
            total += layer.train_step(h_pos, h_neg)
            h_pos, h_neg = layer(h_pos).detach(), layer(h_neg).detach()
        return total

    return {"ff": net}, [layer.opt for layer in net.layers], [step] * steps


ADAPTERS = {
    "vae_style": vae,
    "dcgan_style": dcgan,
    "time_sequence_style": time_sequence,
    "resnet_style": resnet,
    "resnet_bottleneck": lambda m, t, d, s: resnet(m, t, d, s, "resnet_bottleneck"),
    "vit_style": vit,
    "vit_unfold": lambda m, t, d, s: vit(m, t, d, s, "unfold"),
    "char_rnn_style": char_rnn,
    "char_rnn_ntasgd": lambda m, t, d, s: char_rnn(m, t, d, s, asgd=True),
    "text_classification_style": text_classification,
    "text_classification_max": lambda m, t, d, s: text_classification(m, t, d, s, "max"),
    "regression_style": regression,
    "siamese_style": siamese,
    "siamese_cosine": lambda m, t, d, s: siamese(m, t, d, s, "cosine"),
    "dqn_style": dqn,
    "forward_forward_style": forward_forward,
}
MODULE = {"resnet_bottleneck": "resnet_style", "vit_unfold": "vit_style",
          "char_rnn_ntasgd": "char_rnn_style", "siamese_cosine": "siamese_style",
          "text_classification_max": "text_classification_style"}  # variant -> its program


def sync_state(models, torch, dtype, path):
    """Load every model's state from path, or write it there if it is not there yet."""
    if not os.path.exists(path):
        np.savez(path, **{f"{p}.{k}": v.detach().numpy() for p, m in models.items()
                          for k, v in m.state_dict().items()})
    saved = np.load(path)
    for p, m in models.items():
        state = {}
        for k in m.state_dict():
            a = saved[f"{p}.{k}"]
            t = torch.from_numpy(a)
            state[k] = t.to(dtype) if a.dtype.kind == "f" else t
        m.load_state_dict(state)


def same_noise(torch):
    """torch.randn / torch.randn_like drawing from one numpy stream in every library."""
    rng = np.random.default_rng(11)

    def randn(*size, dtype=None, device=None, **kw):
        if len(size) == 1 and isinstance(size[0], (tuple, list)):
            size = tuple(size[0])
        dtype = dtype or torch.get_default_dtype()
        return torch.from_numpy(rng.standard_normal(tuple(size))).to(dtype)

    def randn_like(t, dtype=None, **kw):
        return torch.from_numpy(rng.standard_normal(tuple(t.shape))).to(dtype or t.dtype)

    torch.randn, torch.randn_like = randn, randn_like


def record_first_step(models, optimizers, out):
    """Wrap each optimizer's step to copy its parameters' gradients the first time."""
    names = {id(p): f"{pre}.{n}" for pre, m in models.items() for n, p in m.named_parameters()}

    def snapshot(opt):
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is not None and names[id(p)] not in out:
                    out[names[id(p)]] = p.grad.detach().numpy().copy()

    for opt in optimizers:
        inner, seen = opt.step, []

        def step(closure=None, opt=opt, inner=inner, seen=seen):
            if closure is None:
                if not seen:
                    snapshot(opt)
                seen.append(1)
                return inner()

            def wrapped():
                loss = closure()
                if not seen:
                    snapshot(opt)
                seen.append(1)
                return loss

            return inner(wrapped)

        opt.step = step


def main():
    program, lib, dtype_name, weights, out = sys.argv[1:6]
    rest = sys.argv[6:]
    compiled = "--compiled" in rest
    steps = int(rest[rest.index("--steps") + 1]) if "--steps" in rest else STEPS
    if lib == "cagrad":
        import cagrad.as_torch

        cagrad.as_torch.install()
    import torch

    torch.set_num_threads(1)
    # the step wrapper below comes after the program's scheduler wrapped the step
    warnings.filterwarnings("ignore", message=".*optimizer.step\\(\\)` has been overridden")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    dtype = getattr(torch, dtype_name)
    torch.set_default_dtype(dtype)  # before the import: module-level tensors in DTYPE too
    mod = __import__(MODULE.get(program, program))
    torch.manual_seed(0)
    models, optimizers, run = ADAPTERS[program](mod, torch, dtype, steps)
    for m in models.values():
        m.to(dtype)
    sync_state(models, torch, dtype, weights)
    same_noise(torch)
    grads = {}
    record_first_step(models, optimizers, grads)
    if compiled:
        torch.compiled_autograd.enable().__enter__()  # every backward from here compiled
    losses = [float(f()) for f in run[:1]]
    if not optimizers:  # a hand-written update: the first step's gradients are still there
        names = [(f"{pre}.{n}", p) for pre, m in models.items() for n, p in m.named_parameters()]
        grads.update({n: p.grad.detach().numpy().copy() for n, p in names})
    losses += [float(f()) for f in run[1:]]
    np.savez(out, losses=np.array(losses), **grads)


if __name__ == "__main__":
    main()
