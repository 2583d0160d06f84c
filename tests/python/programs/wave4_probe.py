"""A few training steps of the wave-4 programs' models, for comparing libraries
(test_programs_wave4.py). The same command line and output as more_probe.py, whose
machinery (shared weights through WEIGHTS.npz, first-step gradients, --compiled) it uses:

    python wave4_probe.py PROGRAM LIB DTYPE WEIGHTS.npz OUT.npz [--compiled] [--steps N]

Dropout is off. Data come from numpy; teacher forcing in seq2seq_style alternates on and
off by step instead of being drawn; unet_style steps with SGD (see unet below).
"""

import argparse

import numpy as np

import more_probe


def unet(mod, torch, dtype, steps):
    model = mod.UNet()
    # SGD, not the program's Adam: 368 of the bottleneck conv's weight gradients are exactly
    # zero (inputs behind dead ReLUs); cagrad's float32 conv2d weight gradient leaves ~1e-9
    # there, which Adam's first step turns into steps of lr (a float32 rounding difference,
    # reported with a reproducer in docs/python-api.md "Wave 4 programs")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    noisy, clean = (torch.from_numpy(a).to(dtype) for a in mod.noisy_images(4 * steps, 8, 3))
    run = [lambda i=i: mod.train_step(model, opt, noisy[4 * i:4 * i + 4], clean[4 * i:4 * i + 4])
           for i in range(steps)]
    return {"unet": model}, [opt], run


def lm_decoder(mod, torch, dtype, steps):
    vocab = mod.Vocab(mod.TEXT)
    data = torch.tensor(vocab.encode(mod.TEXT), dtype=torch.long)
    model = mod.DecoderLM(len(vocab.chars), dropout=0.0)
    args = argparse.Namespace(lr=0.01, total_steps=10)
    opt, sched, scaler = mod.make_training(model, args)
    crit = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    rng = np.random.default_rng(5)
    micro = [[mod.windows(data, model.block, rng.integers(0, 100, 3).tolist()) for _ in range(2)]
             for _ in range(steps)]
    run = [lambda m=m: mod.train_step(model, opt, sched, scaler, crit, m)[0] for m in micro]
    return {"lm": model}, [opt], run


def maml(mod, torch, dtype, steps, how="second"):
    model = mod.make_model(hidden=8)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    rng = np.random.default_rng(4)
    tasks = [[t.to(dtype) for t in mod.sine_tasks(rng, 3, 4)] for _ in range(steps)]
    if how == "vmap":
        run = [lambda t=t: mod.vmap_meta_step(model, opt, t, 0.1, 2) for t in tasks]
    else:
        run = [lambda t=t: mod.meta_step(model, opt, t, 0.1, 2, how == "first")
               for t in tasks]
    return {"maml": model}, [opt], run


def seq2seq(mod, torch, dtype, steps):
    enc, dec = mod.EncoderRNN(mod.N_WORDS, 8, 0.0), mod.AttnDecoderRNN(8, mod.N_WORDS, 0.0)
    enc_opt = torch.optim.Adam(enc.parameters(), lr=0.01)
    dec_opt = torch.optim.Adam(dec.parameters(), lr=0.01)
    crit = torch.nn.NLLLoss(ignore_index=mod.PAD)
    pairs = mod.make_pairs(4 * steps, seed=1)
    batches = [mod.collate(pairs[4 * i:4 * i + 4]) for i in range(steps)]
    run = [lambda i=i: mod.train_step(enc, dec, enc_opt, dec_opt, crit, batches[i], i % 2 == 0)
           for i in range(steps)]
    return {"enc": enc, "dec": dec}, [enc_opt, dec_opt], run


ADAPTERS = {
    "unet_style": unet,
    "lm_decoder_style": lm_decoder,
    "maml_style": maml,
    "maml_first_order": lambda m, t, d, s: maml(m, t, d, s, "first"),
    "maml_vmap": lambda m, t, d, s: maml(m, t, d, s, "vmap"),
    "seq2seq_style": seq2seq,
}
MODULE = {"maml_first_order": "maml_style", "maml_vmap": "maml_style"}

if __name__ == "__main__":
    more_probe.ADAPTERS, more_probe.MODULE = ADAPTERS, MODULE
    more_probe.main()
