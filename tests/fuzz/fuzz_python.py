"""An atheris target over the Python API, differential against PyTorch.

    PYTHONPATH=build/python .venv/bin/python tests/fuzz/fuzz_python.py -max_total_time=60 \\
        build-fuzz/pycorpus tests/fuzz/pycorpus
    make fuzz-py FUZZ_SECONDS=60

The input bytes decode to a program (leaves of random shapes, then up to 12 ops with their
arguments), which runs in cagrad and in torch, float64. Each op must do the same in both:
succeed with the same values, or fail in both with torch's exception type; an honest
NotImplementedError from cagrad, or its documented 8-dim limit, drops the op from both. Then the loss
sum(v * w) of the last value that needs grad is differentiated in torch, and in cagrad
eagerly and under compiled_autograd.enable(): every gradient must match torch's (1e-9 of
its scale). A mismatch raises, and atheris keeps the input; the ones in
tests/fuzz/pycorpus are replayed by tests/python/test_fuzz_corpus.py.
"""
import sys

import numpy as np

MAX_OPS = 12


def decode(data):
    """The program in the bytes: (leaf shapes, seed, [(op, args)...]); 0 once they run out."""
    it = iter(data)

    def nxt():
        return next(it, 0)

    n_leaves = 1 + nxt() % 3
    shapes = [tuple(1 + nxt() % 4 for _ in range(1 + nxt() % 3)) for _ in range(n_leaves)]
    seed = nxt()
    ops = []
    for _ in range(MAX_OPS):
        ops.append((nxt() % len(OPS), tuple(nxt() for _ in range(4))))
    return shapes, seed, ops


def _dim(t, a):
    return a % (2 * t.dim() + 2) - t.dim() - 1 if t.dim() else a % 2 - 1


def _pick(vals, a):
    return vals[a % len(vals)]


OPS = [
    lambda L, v, a: _pick(v, a[0]).tanh(),
    lambda L, v, a: L.sigmoid(_pick(v, a[0])),
    lambda L, v, a: L.relu(_pick(v, a[0])),
    lambda L, v, a: _pick(v, a[0]) * ((a[1] % 9 - 4) * 0.5),
    lambda L, v, a: _pick(v, a[0]) + _pick(v, a[1]),
    lambda L, v, a: _pick(v, a[0]) * _pick(v, a[1]),
    lambda L, v, a: _pick(v, a[0]) - _pick(v, a[1]),
    lambda L, v, a: _pick(v, a[0]).sum(_dim(_pick(v, a[0]), a[1]), keepdim=bool(a[2] & 1)),
    lambda L, v, a: L.softmax(_pick(v, a[0]), _dim(_pick(v, a[0]), a[1])),
    lambda L, v, a: _pick(v, a[0]).transpose(_dim(_pick(v, a[0]), a[1]),
                                             _dim(_pick(v, a[0]), a[2])),
    lambda L, v, a: _pick(v, a[0]).reshape(-1),
    lambda L, v, a: _pick(v, a[0]).unsqueeze(_dim(_pick(v, a[0]), a[1])),
    lambda L, v, a: _pick(v, a[0])[..., a[1] % 5 - 2:a[2] % 7 - 3:1 + a[3] % 2],
    lambda L, v, a: L.cat([_pick(v, a[0]), _pick(v, a[1])], _dim(_pick(v, a[0]), a[2])),
    lambda L, v, a: L.matmul(_pick(v, a[0]), _pick(v, a[1])),
    lambda L, v, a: _pick(v, a[0]).mean(_dim(_pick(v, a[0]), a[1])),
    lambda L, v, a: _pick(v, a[0]).amax(_dim(_pick(v, a[0]), a[1])),
    lambda L, v, a: L.nn.functional.layer_norm(_pick(v, a[0]), _pick(v, a[0]).shape[-1:]),
    lambda L, v, a: _pick(v, a[0])[a[1] % 5 - 2],
    lambda L, v, a: L.stack([_pick(v, a[0]), _pick(v, a[1])], _dim(_pick(v, a[0]), a[2])),
    lambda L, v, a: _pick(v, a[0]).exp().log1p(),
    lambda L, v, a: L.where(_pick(v, a[0]) > 0, _pick(v, a[0]), _pick(v, a[1])),
    lambda L, v, a: _pick(v, a[0]).clamp(-0.5, 0.5 + a[1] % 3),
    lambda L, v, a: _pick(v, a[0]).cumsum(_dim(_pick(v, a[0]), a[1])),
]


class Mismatch(AssertionError):
    pass


def leaves(L, shapes, seed):
    rng = np.random.default_rng(seed)
    return [L.tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]


def run(ca, torch, data):
    shapes, seed, ops = decode(data)
    tv, cv = leaves(torch, shapes, seed), leaves(ca, shapes, seed)
    tl, cl = list(tv), list(cv)
    for k, (op, args) in enumerate(ops):
        t_err = c_err = None
        try:
            t = OPS[op](torch, tv, args)
        except Exception as e:  # noqa: BLE001 - any torch error: cagrad must fail too
            t_err = e
        try:
            c = OPS[op](ca, cv, args)
        except NotImplementedError:
            continue  # an honest "not supported": drop the op from both
        except Exception as e:  # noqa: BLE001
            if "the most cagrad supports" in str(e) and t_err is None:
                continue  # a documented limit (8 dims): dropped from both too
            c_err = e
        if t_err is not None or c_err is not None:
            if (t_err is None) != (c_err is None):
                raise Mismatch(f"op {k} ({op}): torch {t_err!r}, cagrad {c_err!r}")
            if not isinstance(c_err, type(t_err)):
                raise Mismatch(f"op {k} ({op}): torch raised {type(t_err).__name__}, cagrad "
                               f"{type(c_err).__name__}: {c_err}")
            continue
        same(f"op {k} ({op}) value", c.detach().numpy(), t.detach().numpy())
        tv.append(t)
        cv.append(c)
    gradients(ca, torch, tl, cl, tv, cv)


def gradients(ca, torch, tl, cl, tv, cv):
    for i in range(len(tv) - 1, -1, -1):
        if tv[i].requires_grad:
            break
    else:
        return
    w = np.arange(1, tv[i].numel() + 1, dtype=np.float64).reshape(tuple(tv[i].shape))
    t_loss = (tv[i] * torch.tensor(w)).sum()
    tg = torch.autograd.grad(t_loss, tl, allow_unused=True)
    for compiled in (False, True, True):  # eager, a capture, a cache hit
        c_loss = (cv[i] * ca.tensor(w)).sum()
        if compiled:
            with ca.compiled_autograd.enable():
                cg = ca.autograd.grad(c_loss, cl, allow_unused=True, retain_graph=True)
        else:
            cg = ca.autograd.grad(c_loss, cl, allow_unused=True, retain_graph=True)
        for j, (c, t) in enumerate(zip(cg, tg)):
            if (c is None) != (t is None):
                raise Mismatch(f"leaf {j}: torch gradient {t is not None}, cagrad {c is not None}")
            if c is not None:
                same(f"leaf {j} gradient ({'compiled' if compiled else 'eager'})",
                     c.numpy(), t.numpy())


def same(what, c, t):
    if c.shape != t.shape:
        raise Mismatch(f"{what}: shape {c.shape}, torch {t.shape}")
    finite = np.isfinite(t)
    scale = max(1.0, float(np.abs(t[finite]).max())) if finite.any() else 1.0
    ok = np.where(finite, np.abs(c - t) <= 1e-9 * scale, (c == t) | (np.isnan(c) & np.isnan(t)))
    if not ok.all():
        raise Mismatch(f"{what}: cagrad {c[~ok][:4]}, torch {t[~ok][:4]}")


def main():
    import atheris

    with atheris.instrument_imports():
        import cagrad as ca
    import torch

    torch.set_num_threads(1)
    ca.set_num_threads(1)
    atheris.Setup(sys.argv, lambda data: run(ca, torch, data))
    atheris.Fuzz()


if __name__ == "__main__":
    main()
