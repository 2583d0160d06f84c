"""Parity at sizes that reach the vectorised, tiled and BLAS code paths (the small shapes of
test_parity_ops.py mostly run scalar tails), and random op graphs that exercise the
compiled backward's fusion: cagrad eager, cagrad compiled (miss, then hit) and torch must
agree.

Tolerances for ops that sum n terms (derivation): the rounding error of a sum of n terms
is at most ~n*u*sum|x_i|; with O(1) terms the typical error is ~u*n^(1/2)..n, so
atol = 4*n*u (both libraries contribute; terms here are O(1) normals) with the default
rtol. u = 6e-8 (float32), 1.1e-16 (float64). Pointwise ops keep the default tolerances.
"""

import math
import random

import numpy as np
import pytest
import torch

from helpers import (
    NP_DTYPES,
    STANDIN,
    TOL,
    assert_close,
    backward_checked,
    ca,
    compiled_ctx,
    counters,
    to_np,
)
from test_parity_ops import GELU_TANH_TOL, C, Case, F, Idx, Tgt, run_case

U = {"float32": 6e-8, "float64": 1.1e-16}
DTYPES = ["float32", "float64"]


def tol_n(n):
    """Tolerances for ops whose outputs or gradients sum n O(1) terms."""
    return {dt: dict(rtol=TOL[dt]["rtol"], atol=max(TOL[dt]["atol"], 4 * n * U[dt]))
            for dt in DTYPES}


def fF(L):
    return L.nn.functional


R, Cn = 33, 67  # odd sizes: vector bodies plus remainders; 2211 elements
N1 = 1031  # a prime above the tile sizes

LARGE = []


def big(id, fn, inputs, tol=None, layouts=("contig", "T")):
    c = Case(id, fn, inputs, tol=tol if tol is not None else "pw")
    c.large_layouts = layouts
    LARGE.append(c)


UNARY = {
    "exp": (lambda L, a: a.exp(), "n"),
    "log": (lambda L, a: a.log(), "pos"),
    "sqrt": (lambda L, a: a.sqrt(), "pos"),
    "rsqrt": (lambda L, a: a.rsqrt(), "pos"),
    "tanh": (lambda L, a: a.tanh(), "n"),
    "sigmoid": (lambda L, a: a.sigmoid(), "wide"),
    "sin": (lambda L, a: L.sin(a), "wide"),
    "cos": (lambda L, a: L.cos(a), "wide"),
    "abs": (lambda L, a: a.abs(), "away0"),
    "relu": (lambda L, a: L.relu(a), "away0"),
    "gelu": (lambda L, a: fF(L).gelu(a), "wide"),
    "gelu_tanh": (lambda L, a: fF(L).gelu(a, approximate="tanh"), "wide"),
    "silu": (lambda L, a: fF(L).silu(a), "wide"),
    "softplus": (lambda L, a: fF(L).softplus(a, beta=1.5, threshold=3.0), "wide"),
    "leaky_relu": (lambda L, a: fF(L).leaky_relu(a, 0.1), "away0"),
    "clamp": (lambda L, a: a.clamp(-0.7, 0.9), "n"),
    "pow_s": (lambda L, a: a ** 1.7, "pos"),
    "rpow_s": (lambda L, a: 1.3 ** a, "n"),
    "rdiv_s": (lambda L, a: 1.0 / a, "away0"),
    "neg": (lambda L, a: -a, "n"),
}
for name, (fn, dom) in UNARY.items():
    tol = GELU_TANH_TOL if name == "gelu_tanh" else None  # see test_parity_ops.py
    big(f"{name}[{R}x{Cn}]", fn, [F(R, Cn, dom=dom)], tol=tol)
    big(f"{name}[{N1}]", fn, [F(N1, dom=dom)], tol=tol, layouts=("contig", "step"))

BINARY = {
    "add": (lambda L, a, b: a + b, "n", "n"),
    "sub": (lambda L, a, b: a - b, "n", "n"),
    "mul": (lambda L, a, b: a * b, "n", "n"),
    "div": (lambda L, a, b: a / b, "n", "away0"),
    "pow": (lambda L, a, b: a ** b, "pos", "n"),
    "maximum": (lambda L, a, b: L.maximum(a, b), "n", "n"),
    "minimum": (lambda L, a, b: L.minimum(a, b), "n", "n"),
}
for name, (fn, da, db) in BINARY.items():
    big(f"{name}[same]", fn, [F(R, Cn, dom=da), F(R, Cn, dom=db)])
    # broadcast gradients reduce over R rows (b) or Cn columns (b2)
    big(f"{name}[row]", fn, [F(R, Cn, dom=da), F(Cn, dom=db)], tol=tol_n(R))
    big(f"{name}[col]", fn, [F(R, Cn, dom=da), F(R, 1, dom=db)], tol=tol_n(Cn))
    big(f"{name}[outer]", fn, [F(R, 1, dom=da), F(1, Cn, dom=db)], tol=tol_n(max(R, Cn)))

big("where", lambda L, c, a, b: L.where(c > 0, a, b), [C(R, Cn), F(R, Cn), F(Cn)],
    tol=tol_n(R))
big("masked_fill", lambda L, a, m: a.masked_fill(m > 0, -1.0), [F(R, Cn), C(R, Cn)])

for d in (0, 1):
    n = R if d == 0 else Cn
    big(f"sum[d{d}]", lambda L, a, d=d: a.sum(d), [F(R, Cn)], tol=tol_n(n))
    big(f"mean[d{d}]", lambda L, a, d=d: a.mean(d, keepdim=True), [F(R, Cn)], tol=tol_n(n))
    big(f"max[d{d}]", lambda L, a, d=d: a.max(d), [F(R, Cn)], tol=tol_n(n))
    big(f"min[d{d}]", lambda L, a, d=d: a.min(d), [F(R, Cn)], tol=tol_n(n))
    big(f"logsumexp[d{d}]", lambda L, a, d=d: L.logsumexp(a, d), [F(R, Cn)], tol=tol_n(n))
    big(f"softmax[d{d}]", lambda L, a, d=d: fF(L).softmax(a, dim=d), [F(R, Cn)], tol=tol_n(n))
    big(f"log_softmax[d{d}]", lambda L, a, d=d: fF(L).log_softmax(a, dim=d), [F(R, Cn)],
        tol=tol_n(n))
big("sum_all", lambda L, a: a.sum(), [F(R, Cn)], tol=tol_n(R * Cn))
big("mean_all", lambda L, a: a.mean(), [F(N1)], tol=tol_n(N1), layouts=("contig", "step"))
big("max_all", lambda L, a: a.max(), [F(N1)], tol=tol_n(N1), layouts=("contig", "step"))
big("layer_norm", lambda L, x, w, b: fF(L).layer_norm(x, (Cn,), w, b),
    [F(R, Cn, dom="ln"), F(Cn), F(Cn)], tol=tol_n(Cn))
big("cross_entropy", lambda L, x, t: fF(L).cross_entropy(x, t),
    [F(64, 37), Tgt((64,), 37, n_ignore=3)], tol=tol_n(64))
big("cross_entropy_sum", lambda L, x, t: fF(L).cross_entropy(x, t, reduction="sum"),
    [F(64, 37), Tgt((64,), 37)], tol=tol_n(64))
big("mse_loss", lambda L, a, b: fF(L).mse_loss(a, b), [F(R, Cn), F(R, Cn)], tol=tol_n(R * Cn))
big("mm", lambda L, a, b: a @ b, [F(65, 130), F(130, 33)], tol=tol_n(130))
big("bmm", lambda L, a, b: L.bmm(a, b), [F(4, 33, 65), F(4, 65, 17)], tol=tol_n(65))
big("matmul_bcast", lambda L, a, b: a @ b, [F(3, 40, 50), F(50, 21)], tol=tol_n(120))
big("linear", lambda L, x, w, b: fF(L).linear(x, w, b), [F(70, 130), F(33, 130), F(33)],
    tol=tol_n(130))
big("embedding", lambda L, i, w: fF(L).embedding(i, w), [Idx((20, 30), 50), F(50, 64)],
    tol=tol_n(600))
big("index_select", lambda L, a, i: a.index_select(0, i), [F(50, 70), Idx((300,), 50)],
    tol=tol_n(300))
big("gather", lambda L, a, i: a.gather(1, i), [F(40, 70), Idx((40, 90), 70)], tol=tol_n(90))
big("transpose_chain", lambda L, a: (a.t() * 2.0).exp().t().sum(0), [F(R, Cn)], tol=tol_n(R))
big("cat_stack", lambda L, a, b: L.stack([L.cat([a, b], 1), L.cat([b, a], 1)]).tanh(),
    [F(R, Cn), F(R, Cn)])
big("dropout_eval", lambda L, a: fF(L).dropout(a, 0.3, training=False), [F(R, Cn)])


def _large_params():
    for c in LARGE:
        for dt in DTYPES:
            for lay in c.large_layouts:
                if lay == "contig" or any(
                        isinstance(s, F) and len(s.shape) >= (2 if lay == "T" else 1)
                        and min(s.shape[-2:]) > 1 for s in c.inputs):
                    yield pytest.param(c, dt, lay, id=f"{c.id}-{dt}-{lay}")


@pytest.mark.parametrize("c, dtype, layout", list(_large_params()))
def test_large_parity(c, dtype, layout, compiled, rng):
    run_case(c, dtype, layout, compiled, rng)


# ---------------------------------------------------------------------------------------
# Random graphs: many pointwise ops with fan-out and broadcasting, a few row/column
# reductions in between, so the compiled backward fuses long chains.
# ---------------------------------------------------------------------------------------
UN_OPS = {
    "tanh": lambda L, x: x.tanh(),
    "sigmoid": lambda L, x: x.sigmoid(),
    "sin": lambda L, x: x.sin(),
    "cos": lambda L, x: L.cos(x),
    "relu": lambda L, x: L.relu(x),
    "gelu": lambda L, x: fF(L).gelu(x),
    "gelu_tanh": lambda L, x: fF(L).gelu(x, approximate="tanh"),
    "silu": lambda L, x: fF(L).silu(x),
    "softplus": lambda L, x: fF(L).softplus(x),
    "leaky": lambda L, x: fF(L).leaky_relu(x, 0.1),
    "neg": lambda L, x: -x,
    "scale": lambda L, x: x * 1.7,
    "shift": lambda L, x: x + 0.3,
    "rsub": lambda L, x: 1.0 - x,
    "square": lambda L, x: x * x,
    "exp_tanh": lambda L, x: x.tanh().exp(),
    "sqrt1p": lambda L, x: (x * x + 1.0).sqrt(),
    "rsqrt1p": lambda L, x: (x * x + 1.0).rsqrt(),
    "log1p2": lambda L, x: (x * x + 1.0).log(),
    "clamp": lambda L, x: x.clamp(-0.5, 0.7),
    "cube": lambda L, x: (x.tanh() ** 3) * 2.0,
    "rdiv": lambda L, x: 1.0 / (x * x + 1.0),
}
BIN_OPS = {
    "add": lambda L, a, b: a + b,
    "sub": lambda L, a, b: a - b,
    "mul": lambda L, a, b: a * b,
    "maximum": lambda L, a, b: L.maximum(a, b),
    "minimum": lambda L, a, b: L.minimum(a, b),
    "div": lambda L, a, b: a / (b * b + 1.0),
    "where": lambda L, a, b: L.where(a > b, a, b * 0.5),
    "pow": lambda L, a, b: (a * a + 0.5) ** b.tanh(),
}
RED_OPS = {
    "center_rows": lambda L, x: x - x.mean(-1, keepdim=True),
    "scale_cols": lambda L, x: x * (x.sum(0, keepdim=True) * 0.05),
    "softmax": lambda L, x: fF(L).softmax(x, dim=-1),
    "log_softmax0": lambda L, x: fF(L).log_softmax(x, dim=0),
    "lse": lambda L, x: x - L.logsumexp(x, -1, keepdim=True),
    "max_rows": lambda L, x: x * 0.5 + x.max(-1, keepdim=True)[0],
    "layer_norm": lambda L, x: fF(L).layer_norm(x, (x.shape[-1],)),
    # structure: GEMMs, views and cat inside the fused pointwise chains
    "gram": lambda L, x: (x @ (x.t() @ x)) * (1.0 / (x.shape[0] * x.shape[1])),
    "transpose_view": lambda L, x: (x.t() * 0.5).exp().t(),
    "roll": lambda L, x: L.cat([x[:, 1:], x[:, :1]], 1),
    "stack_sum": lambda L, x: L.stack([x, x.tanh()], 0).sum(0),
    "reshape_rt": lambda L, x: x.reshape(-1).sigmoid().reshape(x.shape),
}


# leaves a, b, c: [m, n]; v: [n]. Odd sizes reach vector bodies and tails; m = 1 makes
# reductions over dim 0 trivial and broadcasting ambiguous-looking.
GRAPH_SHAPES = [(17, 33), (4, 129), (64, 16), (3, 1031), (1, 7), (9, 8)]


def random_program(seed, n_ops=16):
    """A random program over nodes 0..3 = leaves a, b, c ([m, n]) and v ([n]); each op
    appends a node. Reductions and structure ops take [m, n] nodes only."""
    r = random.Random(seed)
    prog = []
    is_vec = [False, False, False, True]
    for _ in range(n_ops):
        kind = r.choices(["un", "bin", "red"], weights=[5, 4, 2])[0]
        mats = [k for k, v in enumerate(is_vec) if not v]
        if kind == "un":
            i = r.randrange(len(is_vec))
            prog.append(("un", r.choice(sorted(UN_OPS)), [i]))
            is_vec.append(is_vec[i])
        elif kind == "bin":
            i, j = r.randrange(len(is_vec)), r.randrange(len(is_vec))
            if is_vec[i] and not is_vec[j]:
                i, j = j, i  # the [m, n] operand first (either order broadcasts the same)
            prog.append(("bin", r.choice(sorted(BIN_OPS)), [i, j]))
            is_vec.append(is_vec[i] and is_vec[j])
        else:
            prog.append(("red", r.choice(sorted(RED_OPS)), [r.choice(mats)]))
            is_vec.append(False)
    outs = sorted(r.sample(range(4, len(is_vec)), 3))
    return prog, outs


def run_program(L, prog, outs, leaves_np, g_np):
    leaves = [L.tensor(a.copy(), requires_grad=True) for a in leaves_np]
    nodes = list(leaves)
    for kind, name, args in prog:
        if kind == "un":
            nodes.append(UN_OPS[name](L, nodes[args[0]]))
        elif kind == "bin":
            nodes.append(BIN_OPS[name](L, nodes[args[0]], nodes[args[1]]))
        else:
            nodes.append(RED_OPS[name](L, nodes[args[0]]))
    loss = None
    for k, o in enumerate(outs):
        term = (nodes[o] * L.tensor(g_np[k][..., :nodes[o].shape[-1]].copy())).sum()
        loss = term if loss is None else loss + term
    return leaves, nodes, loss


# float64: depth-16 compositions with reductions of up to 33 terms on values up to ~100:
# error ~ 16 ops * 33 * u * 100, x10 for derivative amplification -> ~1e-11 relative.
GRAPH_TOL64 = dict(rtol=1e-9, atol=1e-10)
# float32: a random graph can be ill-conditioned (values reach ~100, pow/exp amplify), so a
# fixed tolerance is either loose or wrong. Instead: cagrad's float32 result must be about as
# accurate as torch's float32 result, both measured against torch in float64 on the same
# (float32-rounded) data: ||ca - ref||inf <= 4 ||torch32 - ref||inf + floor. Torch's error
# is only a sample of the rounding noise (it may be lucky on the one element that matters),
# so the floor is the noise of an accurate sum: measured over 300 random float32 sums of
# 561..100000 terms, both libraries' error stays below 8.2 u ||x||_2 (mean ~1.5). Hence
#  - scalar loss (a sum of the N = 3mn loss terms x_i): floor = 16 u ||x||_2;
#  - gradients: one element can gather all N loss terms (e.g. through a max), each O(|ref|):
#    floor = 16 u sqrt(N) ||ref||inf.
GRAPH_FACTOR = 4.0


def assert_as_accurate(c, t32, ref, msg, n_terms, floor=None):
    c, t32, ref = to_np(c).astype(np.float64), to_np(t32).astype(np.float64), to_np(ref)
    scale = np.abs(ref).max() if ref.size else 0.0
    err_c = np.abs(c - ref).max() if ref.size else 0.0
    err_t = np.abs(t32 - ref).max() if ref.size else 0.0
    if floor is None:
        floor = 16 * U["float32"] * math.sqrt(n_terms) * scale
    bound = GRAPH_FACTOR * err_t + floor
    assert err_c <= bound, (f"{msg}: cagrad float32 error {err_c:.3g} vs torch float32 error "
                            f"{err_t:.3g} (bound {bound:.3g}, |ref| max {scale:.3g})")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(80))
def test_random_graph_eager_compiled_torch(seed, dtype):
    prog, outs = random_program(seed)
    r = np.random.default_rng(seed)
    ndt = NP_DTYPES[dtype]
    m, n = GRAPH_SHAPES[seed % len(GRAPH_SHAPES)]
    shapes = [(m, n), (m, n), (m, n), (n,)]

    def data():
        lv = [r.standard_normal(s).astype(ndt) for s in shapes]
        gs = [r.standard_normal((m, n)).astype(ndt) for _ in outs]
        return lv, gs

    for run in range(2):  # run 0 captures, run 1 must hit the cache with new data
        lv, gs = data()
        t_leaves, _, t_loss = run_program(torch, prog, outs, lv, gs)
        t_loss.backward()
        e_leaves, _, e_loss = run_program(ca, prog, outs, lv, gs)
        e_loss.backward()
        c_leaves, _, c_loss = run_program(ca, prog, outs, lv, gs)
        with ca.compiled_autograd.enable():
            backward_checked(c_loss, True)
        if dtype == "float32":
            r_leaves, r_nodes, r_loss = run_program(
                torch, prog, outs, [a.astype(np.float64) for a in lv],
                [g.astype(np.float64) for g in gs])
            r_loss.backward()
            terms = np.concatenate([
                (to_np(r_nodes[o]) * gs[k][..., :r_nodes[o].shape[-1]]).ravel()
                for k, o in enumerate(outs)])
            loss_floor = 16 * U["float32"] * np.linalg.norm(terms)

            def check(a, t, ref, what):
                floor = loss_floor if what == "loss" else None
                assert_as_accurate(a, t, ref, f"seed {seed} run {run}: {what}", terms.size,
                                   floor)
        else:
            r_leaves, r_loss = t_leaves, t_loss

            def check(a, t, ref, what):
                assert_close(a, t, **GRAPH_TOL64, msg=f"seed {seed} run {run}: {what}")

        check(e_loss, t_loss, r_loss, "loss")
        for k, (e, c, t, ref) in enumerate(zip(e_leaves, c_leaves, t_leaves, r_leaves)):
            if t.grad is None:
                assert e.grad is None and c.grad is None
                continue
            check(e.grad, t.grad, ref.grad, f"eager grad {k}")
            check(c.grad, t.grad, ref.grad, f"compiled grad {k}")
    if not STANDIN:
        cnt = counters()
        assert cnt["captures"] == 1 and cnt["cache_hits"] == 1, cnt


# ---------------------------------------------------------------------------------------
# Thread count and determinism
# ---------------------------------------------------------------------------------------
THREAD_CASES = ["sum[d0]", "softmax[d1]", "layer_norm", "mm", "gelu[1031]", "cross_entropy",
                "add[outer]", "logsumexp[d1]"]


@pytest.fixture
def restore_threads():
    n = ca.get_num_threads()
    yield
    ca.set_num_threads(n)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", THREAD_CASES)
def test_large_parity_thread_counts(name, threads, restore_threads, rng):
    ca.set_num_threads(threads)
    if not STANDIN:
        assert ca.get_num_threads() == threads
    c = next(c for c in LARGE if c.id == name or c.id.startswith(name + "["))
    for compiled in (False, True):
        with compiled_ctx(compiled):
            run_case(c, "float32", "contig", compiled, rng)



@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_bitwise_deterministic(compiled):
    """The same inputs give bit-identical values and gradients run after run."""
    r = np.random.default_rng(0)
    arrs = [r.standard_normal(s).astype(np.float32) for s in [(64, 130), (130, 70), (70,)]]
    tgt = r.integers(0, 70, 64).astype(np.int64)
    results = []
    for _ in range(3):
        x, w, b = [ca.tensor(a, requires_grad=True) for a in arrs]
        h = fF(ca).layer_norm(fF(ca).gelu(x @ w + b), (70,))
        loss = fF(ca).cross_entropy(h * 3.0, ca.tensor(tgt)) + h.exp().mean()
        with compiled_ctx(compiled):
            loss.backward()
        results.append([to_np(loss)] + [to_np(t.grad) for t in (x, w, b)])
    for run in results[1:]:
        for a, b in zip(results[0], run):
            np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------
# Random chains of view and shape ops (permute, transpose, strided slices, narrow, select,
# (un)squeeze, expand, flatten, reshape, contiguous, index_select) on a float64 leaf,
# then a pointwise use and a reduction: values and the leaf's gradient match torch,
# eagerly and compiled.
# ---------------------------------------------------------------------------------------
def _rand_view_op(shape, r):
    nd = len(shape)
    ops = ["contiguous"]
    if nd >= 2:
        ops += ["permute", "transpose", "select"]
    if nd >= 1:
        ops += ["slice", "narrow", "flatten", "reshape", "index"]
    if nd < 4:
        ops += ["unsqueeze"]
        if 1 in shape:
            ops += ["expand"]
    if 1 in shape:
        ops += ["squeeze"]
    op = r.choice(ops)
    if op == "permute":
        p = list(range(nd))
        r.shuffle(p)
        return (op, p)
    if op == "transpose":
        return (op, r.randrange(-nd, nd), r.randrange(-nd, nd))
    if op == "slice":
        d = r.randrange(nd)
        a = r.randrange(0, shape[d])
        return (op, d, a, r.randrange(a + 1, shape[d] + 2), r.choice([1, 2, 3]))
    if op == "narrow":
        d = r.randrange(nd)
        st = r.randrange(shape[d])
        return (op, d, st, r.randrange(1, shape[d] - st + 1))
    if op == "select":
        d = r.randrange(nd)
        return (op, d, r.randrange(-shape[d], shape[d]))
    if op == "unsqueeze":
        return (op, r.randrange(-nd - 1, nd + 1))
    if op == "squeeze":
        return (op, r.choice([i for i, s in enumerate(shape) if s == 1]))
    if op == "expand":
        i = r.choice([i for i, s in enumerate(shape) if s == 1])
        new = list(shape)
        new[i] = r.choice([2, 3])
        return (op, new)
    if op == "flatten":
        s = r.randrange(nd)
        return (op, s, r.randrange(s, nd))
    if op == "reshape":
        n, dims = int(np.prod(shape)), []
        for _ in range(r.randrange(0, 3)):
            d = r.choice([d for d in range(1, n + 1) if n % d == 0])
            dims.append(d)
            n //= d
        dims.append(n)
        r.shuffle(dims)
        return (op, dims)
    if op == "index":
        d = r.randrange(nd)
        return (op, d, [r.randrange(shape[d]) for _ in range(r.randrange(1, 4))])
    return (op,)


def _apply_view_op(L, x, op):
    k = op[0]
    if k == "permute":
        return x.permute(*op[1])
    if k == "transpose":
        return x.transpose(op[1], op[2])
    if k == "slice":
        _, d, a, b, st = op
        sl = [slice(None)] * x.ndim
        sl[d] = slice(a, b, st)
        return x[tuple(sl)]
    if k == "narrow":
        return x.narrow(op[1], op[2], op[3])
    if k == "select":
        return x.select(op[1], op[2])
    if k == "unsqueeze":
        return x.unsqueeze(op[1])
    if k == "squeeze":
        return x.squeeze(op[1])
    if k == "expand":
        return x.expand(*op[1])
    if k == "flatten":
        return x.flatten(op[1], op[2])
    if k == "reshape":
        return x.reshape(*op[1])
    if k == "index":
        return x.index_select(op[1], L.tensor(op[2]))
    return x.contiguous()


def _view_program(seed):
    r = random.Random(seed)
    shape = [r.randint(1, 4) for _ in range(r.randint(1, 4))]
    prog, probe = [], torch.zeros(shape)
    for _ in range(r.randint(2, 7)):
        op = _rand_view_op(list(probe.shape), r)
        if probe.ndim == 0 or 0 in probe.shape:
            break
        probe = _apply_view_op(torch, probe, op)
        prog.append(op)
    return shape, prog


@pytest.mark.parametrize("seed", range(150))
def test_random_view_chains(seed):
    shape, prog = _view_program(seed)
    arr = np.random.default_rng(seed).standard_normal(shape)
    res = {}
    for name, L in (("torch", torch), ("eager", ca), ("compiled", ca)):
        x = L.tensor(arr.copy(), requires_grad=True)
        y = x
        for op in prog:
            y = _apply_view_op(L, y, op)
        z = y * y.sum() + y.exp() * 0.5
        g = np.random.default_rng(seed + 1).standard_normal(tuple(z.shape))
        loss = (z * L.tensor(g)).sum()
        if name == "compiled":
            with ca.compiled_autograd.enable():
                backward_checked(loss, True)
        else:
            loss.backward()
        res[name] = (z, x.grad)
    for name in ("eager", "compiled"):
        msg = f"seed {seed} {name}: {shape} {prog}"
        assert_close(res[name][0], res["torch"][0], msg=msg + " forward")
        assert_close(res[name][1], res["torch"][1], msg=msg + " grad")


# ---------------------------------------------------------------------------------------
# Random graphs with Python hooks (replacing or observing gradients), retain_grad and a
# post-accumulate hook: eager, compiled (capture) and compiled (cache hit) match torch.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(60))
def test_random_graph_with_hooks(seed):
    prog, outs = random_program(seed, n_ops=10)
    r = random.Random(seed)
    m, n = GRAPH_SHAPES[seed % len(GRAPH_SHAPES)]
    rng = np.random.default_rng(seed)
    lv = [rng.standard_normal(s) for s in [(m, n)] * 3 + [(n,)]]
    gs = [rng.standard_normal((m, n)) for _ in outs]
    n_nodes = 4 + len(prog)
    hooked = {k: r.choice(["double", "observe", "neg", "add1"]) for k in r.sample(range(n_nodes), 4)}
    retained = r.sample(range(4, n_nodes), 2)
    post_leaf = r.randrange(4)
    res = {}
    for name, L in (("torch", torch), ("eager", ca), ("capture", ca), ("hit", ca)):
        observed, post = {}, []  # node -> gradients seen (the order across nodes is free)
        hooks = {"double": lambda k: lambda g: g * 2.0,
                 "observe": lambda k: lambda g: observed.setdefault(k, []).append(to_np(g)),
                 "neg": lambda k: lambda g: -g,
                 "add1": lambda k: lambda g: g + 1.0}
        leaves = [L.tensor(a.copy(), requires_grad=True) for a in lv]
        nodes = list(leaves)
        for kind, op, args in prog:
            table = {"un": UN_OPS, "bin": BIN_OPS, "red": RED_OPS}[kind]
            nodes.append(table[op](L, *[nodes[a] for a in args]))
        for k, h in hooked.items():
            nodes[k].register_hook(hooks[h](k))
        for k in retained:
            nodes[k].retain_grad()
        leaves[post_leaf].register_post_accumulate_grad_hook(
            lambda t: post.append(to_np(t.grad)))
        loss = None
        for k, o in enumerate(outs):
            term = (nodes[o] * L.tensor(gs[k][..., :nodes[o].shape[-1]].copy())).sum()
            loss = term if loss is None else loss + term
        if name in ("capture", "hit"):
            with ca.compiled_autograd.enable():
                backward_checked(loss, True)
        else:
            loss.backward()
        res[name] = ([leaf.grad for leaf in leaves], [nodes[k].grad for k in retained], observed, post)
    tol = GRAPH_TOL64
    for name in ("eager", "capture", "hit"):
        got, ref = res[name], res["torch"]
        for k, (a, b) in enumerate(zip(got[0], ref[0])):
            assert_close(a, b, **tol, msg=f"{name}: leaf {k} grad")
        for k, (a, b) in enumerate(zip(got[1], ref[1])):
            assert_close(a, b, **tol, msg=f"{name}: retained grad of node {retained[k]}")
        assert {k: len(v) for k, v in got[2].items()} == {k: len(v) for k, v in ref[2].items()}
        for k in ref[2]:
            for a, b in zip(got[2][k], ref[2][k]):
                np.testing.assert_allclose(a, b, **tol, err_msg=f"{name}: observed at {k}")
        # once if the leaf is reached, else never
        assert len(got[3]) == len(ref[3]) == (ref[0][post_leaf] is not None), (
            f"{name}: post-accumulate hook calls")
        for a, b in zip(got[3], ref[3]):
            np.testing.assert_allclose(a, b, **tol, err_msg=f"{name}: post hook")
    if not STANDIN:
        c = counters()
        assert c["captures"] == 1 and c["cache_hits"] == 1, c
