"""A few training steps of the wave-5 (B) programs' models, for comparing libraries
(test_programs_wave5b.py). The same command line and output as more_probe.py, whose
machinery (shared weights through WEIGHTS.npz, first-step gradients, --compiled) it uses:

    python wave5b_probe.py PROGRAM LIB DTYPE WEIGHTS.npz OUT.npz [--compiled] [--steps N]

Dropout is off. Data come from numpy: simclr_style's flips and noise too. style_transfer's
optimised image is held as a Parameter of a small module so that its gradient is recorded
by name; its frozen feature network's weights are shared like any model's, and the losses'
targets are taken from them at the first step (after the weights are loaded).
"""

import numpy as np

import more_probe


def simclr(mod, torch, dtype, steps, loss="nt_xent"):
    model = mod.SimCLR()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    sched = mod.make_scheduler(opt, 2, 6)
    rng = np.random.default_rng(8)
    images = torch.from_numpy(mod.make_images(6 * steps, 8, seed=2)).to(dtype)

    def views(i):
        x = images[6 * i:6 * i + 6]
        return [mod.augment(x, torch.from_numpy(rng.uniform(size=6) < 0.5),
                            torch.from_numpy(rng.standard_normal(tuple(x.shape))).to(dtype))
                for _ in range(2)]

    batches = [views(i) for i in range(steps)]
    loss_fn = getattr(mod, loss)
    run = [lambda b=b: mod.train_step(model, opt, sched, *b, 0.2, loss_fn) for b in batches]
    return {"simclr": model}, [opt], run


def style_transfer(mod, torch, dtype, steps, optimizer="lbfgs"):
    cnn, norm, content_img, style_img = mod.setup(size=8)
    image = torch.nn.Module()
    image.img = torch.nn.Parameter(content_img.clone().to(dtype))
    weights = (1e5, 1.0, 0.1)
    if optimizer == "lbfgs":
        opt, step = torch.optim.LBFGS([image.img], max_iter=3), mod.lbfgs_step
    else:
        opt, step = torch.optim.Adam([image.img], lr=0.05), mod.adam_step
    built = []

    def run_step():
        if not built:  # the losses' targets come from the loaded weights
            built.append(mod.build_model(cnn, norm, style_img.to(dtype), content_img.to(dtype)))
        model, contents, hooks = built[0]
        return step(model, opt, image.img, contents, hooks, weights, [])

    return {"image": image, "net": cnn}, [opt], [run_step] * steps


def tcn(mod, torch, dtype, steps, causal="chomp", weight_norm="old"):
    model = mod.TCN(dropout=0.0, causal=causal, weight_norm=weight_norm)
    opt = torch.optim.Adam(model.parameters(), lr=4e-3)
    x, y = (torch.from_numpy(a).to(dtype) for a in mod.adding_problem(8 * steps, 24, seed=2))
    run = [lambda i=i: mod.train_step(model, opt, x[8 * i:8 * i + 8], y[8 * i:8 * i + 8], 0.5)[0]
           for i in range(steps)]
    return {"tcn": model}, [opt], run


def distill(mod, torch, dtype, steps, log_target=False):
    teacher, student = mod.teacher_net(dropout=0.0), mod.student_net()
    opt = torch.optim.Adam(student.parameters(), lr=1e-2)
    kl = torch.nn.KLDivLoss(reduction="batchmean", log_target=log_target)
    x, y = mod.clusters(16 * steps, seed=1)
    x, y = torch.from_numpy(x).to(dtype), torch.from_numpy(y)
    run = [lambda i=i: mod.distill_step(student, teacher, opt, kl, x[16 * i:16 * i + 16],
                                        y[16 * i:16 * i + 16], 4.0, 0.7, log_target)
           for i in range(steps)]
    return {"teacher": teacher, "student": student}, [opt], run


def gat(mod, torch, dtype, steps, attention="dense"):
    x, y, adj, edges, mask = mod.load_graph()
    x, adj = x.to(dtype), adj.to(dtype)
    model = mod.GAT(x.shape[1], 4, int(y.max()) + 1, 0.0, 0.2, 2, attention)
    opt = torch.optim.Adam(model.parameters(), lr=0.02, weight_decay=5e-4)
    run = [lambda: mod.train_step(model, opt, x, adj, edges, y, mask)] * steps
    return {"gat": model}, [opt], run


ADAPTERS = {
    "simclr_style": simclr,
    "simclr_info_nce": lambda m, t, d, s: simclr(m, t, d, s, "info_nce"),
    "style_transfer_style": style_transfer,
    "style_transfer_adam": lambda m, t, d, s: style_transfer(m, t, d, s, "adam"),
    "tcn_style": tcn,
    "tcn_pad_param": lambda m, t, d, s: tcn(m, t, d, s, "pad", "param"),
    "distill_style": distill,
    "distill_log_target": lambda m, t, d, s: distill(m, t, d, s, True),
    "gat_style": gat,
    "gat_edges": lambda m, t, d, s: gat(m, t, d, s, "edges"),
    "gat_sparse": lambda m, t, d, s: gat(m, t, d, s, "sparse"),
}
MODULE = {"simclr_info_nce": "simclr_style", "style_transfer_adam": "style_transfer_style",
          "tcn_pad_param": "tcn_style",
          "distill_log_target": "distill_style", "gat_edges": "gat_style",
          "gat_sparse": "gat_style"}

if __name__ == "__main__":
    more_probe.ADAPTERS, more_probe.MODULE = ADAPTERS, MODULE
    more_probe.main()
