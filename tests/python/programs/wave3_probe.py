"""A few training steps of the wave-3 programs' models, for comparing libraries
(test_programs_wave3.py). The same command line and output as more_probe.py, whose
machinery (shared weights through WEIGHTS.npz, first-step gradients, --compiled) it uses:

    python wave3_probe.py PROGRAM LIB DTYPE WEIGHTS.npz OUT.npz [--compiled] [--steps N]

Dropout is off. Data come from numpy; where a program samples (Categorical.sample in
reinforce_style), the probe records fixed actions through the program's own functions.
"""

import numpy as np

import more_probe


def gcn(mod, torch, dtype, steps):
    features, labels, adj = mod.load_graph()
    features, adj = features.to(dtype), adj.to(dtype)
    _, _, idx_train = mod.splits(len(labels))
    model = mod.GCN(features.shape[1], 16, 4, use_bias=True, dropout_p=0.0)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    crit = torch.nn.NLLLoss()
    run = [lambda: mod.train_step(model, opt, crit, features, adj, labels, idx_train)[0]] * steps
    return {"gcn": model}, [opt], run


def word_lm(mod, torch, dtype, steps, kind="LSTM"):
    corpus = mod.Corpus()
    ntokens = len(corpus.dictionary)
    if kind == "Transformer":
        model = mod.TransformerModel(ntokens, 16, 2, 16, 2, dropout=0.0)
    else:
        model = mod.RNNModel(kind, ntokens, 16, 16, 2, dropout=0.0, tie_weights=kind == "GRU")
    data = mod.batchify(corpus.train, 4)
    crit = torch.nn.NLLLoss()
    state = {"hidden": None if kind == "Transformer" else model.init_hidden(4)}

    def step(i):
        x, y = mod.get_batch(data, 8 * i, 8)
        loss, state["hidden"] = mod.train_window(model, crit, x, y, state["hidden"], 2.0, 0.25)
        return loss

    return {"lm": model}, [], [lambda i=i: step(i) for i in range(steps)]


def super_resolution(mod, torch, dtype, steps):
    model = mod.Net(upscale_factor=2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    ds = mod.PairDataset(4 * steps, 16, 2, seed=1)
    crit = torch.nn.MSELoss()
    xs = [torch.from_numpy(ds.inputs[4 * i:4 * i + 4]).to(dtype) for i in range(steps)]
    ys = [torch.from_numpy(ds.targets[4 * i:4 * i + 4]).to(dtype) for i in range(steps)]
    run = [lambda i=i: mod.train_step(model, crit, opt, xs[i], ys[i]) for i in range(steps)]
    return {"sr": model}, [opt], run


def fast_neural_style(mod, torch, dtype, steps):
    transformer, vgg = mod.TransformerNet(), mod.FeatureNet(requires_grad=False)
    opt = torch.optim.Adam(transformer.parameters(), 1e-2)
    images = torch.from_numpy(mod.content_images(2 * steps)).to(dtype)
    style = torch.from_numpy(mod.style_image()).to(dtype).repeat(2, 1, 1, 1)
    grams = {}

    def step(i):
        if not grams:  # after the probe loaded the shared weights into vgg
            grams["g"] = [mod.gram_matrix(y) for y in vgg(mod.normalize_batch(style.clone()))]
        c, s = mod.train_step(transformer, vgg, opt, images[2 * i:2 * i + 2], grams["g"],
                              1.0, 1e3)
        return c + s

    # Two steps at most: the conv biases before InstanceNorm have a gradient that is zero
    # in exact arithmetic, which Adam scales up into steps of lr in the direction of the
    # rounding noise; from the third step on the float32 losses of any two libraries
    # (PyTorch's float32 and float64 runs too) drift apart chaotically
    return {"tn": transformer, "vgg": vgg}, [opt], [lambda i=i: step(i)
                                                    for i in range(min(steps, 2))]


def reinforce(mod, torch, dtype, steps, algo="reinforce", entropy_coef=0.0):
    model = mod.Policy(dropout=0.0) if algo == "reinforce" else mod.ActorCritic()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(9)
    episodes = [(rng.normal(0, 0.05, (12, 4)), rng.integers(2, size=12)) for _ in range(steps)]

    def step(states, actions):
        for s, a in zip(states, actions):  # the program's select_action, with fixed actions
            if algo == "reinforce":
                m = mod.Categorical(model(torch.from_numpy(s).to(dtype).unsqueeze(0)))
                mod.record(model, m, None, torch.tensor([int(a)]))
            else:
                probs, value = model(torch.from_numpy(s).to(dtype))
                mod.record(model, mod.Categorical(probs), value, torch.tensor(int(a)))
            model.rewards.append(1.0 if abs(s[2]) < 0.05 else 0.5)
        return mod.finish_episode(model, opt, 0.99, entropy_coef)

    return {"pg": model}, [opt], [lambda e=e: step(*e) for e in episodes]


ADAPTERS = {
    "gcn_style": gcn,
    "word_language_model_style": word_lm,
    "word_language_model_gru": lambda m, t, d, s: word_lm(m, t, d, s, "GRU"),
    "word_language_model_transformer": lambda m, t, d, s: word_lm(m, t, d, s, "Transformer"),
    "super_resolution_style": super_resolution,
    "fast_neural_style_style": fast_neural_style,
    "reinforce_style": reinforce,
    "actor_critic": lambda m, t, d, s: reinforce(m, t, d, s, "actor_critic", 0.01),
}
MODULE = {"word_language_model_gru": "word_language_model_style",
          "word_language_model_transformer": "word_language_model_style",
          "actor_critic": "reinforce_style"}

if __name__ == "__main__":
    more_probe.ADAPTERS, more_probe.MODULE = ADAPTERS, MODULE
    more_probe.main()
