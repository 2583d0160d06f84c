"""Op-by-op parity with PyTorch 2.13: forward values and the gradient of every input, on
float32 and float64, with broadcasting and with non-contiguous inputs, eagerly and under
cagrad.compiled_autograd.enable().

Each case is one function ``fn(L, *inputs)`` written with PyTorch's API; ``L`` is the
library (cagrad or torch). The same numpy data feeds both. The backward runs through a
random upstream gradient: ``(out * g).sum().backward()``.

Input layouts (``layout`` parameter), applied to float inputs:
  contig  - a contiguous leaf;
  T       - leaf holds the transposed data, the op gets ``leaf.transpose(-1, -2)``
            (a non-contiguous view; ndim >= 2 inputs only);
  step    - leaf has twice the last dim, the op gets ``leaf[..., ::2]`` (ndim >= 1);
  npT     - the leaf itself is non-contiguous: ``from_numpy`` of a transposed numpy array,
            then ``requires_grad_()`` (ndim >= 2 inputs only).
"""

import math

import numpy as np
import pytest
import torch

from helpers import (
    NP_DTYPES,
    TOL,
    TOL_SUM,
    assert_close,
    backward_checked,
    ca,
    to_both,
    to_np,
)

DTYPES = ["float32", "float64"]


# ---------------------------------------------------------------------------------------
# Input specs and data
# ---------------------------------------------------------------------------------------
class F:
    """A float input that requires grad."""

    grad = True

    def __init__(self, *shape, dom="n"):
        self.shape, self.dom = tuple(shape), dom


class C(F):
    """A float input that does not require grad."""

    grad = False


class Idx:
    """An int64 index input with values in [low, high)."""

    def __init__(self, shape, high, low=0):
        self.shape, self.high, self.low = tuple(shape), high, low


class Tgt:
    """int64 class targets in [0, n_classes), with ``n_ignore`` entries set to ``ignore``."""

    def __init__(self, shape, n_classes, n_ignore=0, ignore=-100):
        self.shape, self.n_classes, self.n_ignore, self.ignore = (
            tuple(shape), n_classes, n_ignore, ignore)


def gen_float(rng, shape, dom, dtype):
    if dom == "n":
        a = rng.standard_normal(shape)
    elif dom == "pos":
        a = rng.uniform(0.5, 2.0, shape)
    elif dom == "away0":
        a = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    elif dom == "disc":
        a = rng.integers(-1, 2, shape).astype(np.float64)
    elif dom == "wide":
        a = rng.standard_normal(shape) * 3.0
    elif dom == "ln":  # layer_norm input: rows with a clear variance
        a = rng.standard_normal(shape) * 2.0 + 0.5
    elif dom == "unit":  # (-0.9, 0.9): away from clamp bounds +-1 etc.
        a = rng.uniform(-0.9, 0.9, shape)
    else:
        raise ValueError(dom)
    return np.asarray(a, dtype=NP_DTYPES[dtype])


def gen_arrays(rng, specs, dtype):
    out = []
    for s in specs:
        if isinstance(s, F):
            out.append(gen_float(rng, s.shape, s.dom, dtype))
        elif isinstance(s, Tgt):
            t = rng.integers(0, s.n_classes, s.shape).astype(np.int64)
            flat = t.reshape(-1)
            if s.n_ignore:
                pos = rng.choice(flat.size, s.n_ignore, replace=False)
                flat[pos] = s.ignore
                # at least one counted target remains (else mean is 0/0 = nan in both)
                assert (flat != s.ignore).any()
            out.append(flat.reshape(s.shape))
        elif isinstance(s, Idx):
            out.append(rng.integers(s.low, s.high, s.shape).astype(np.int64))
        else:
            raise TypeError(s)
    return out


def layout_applies(spec, layout):
    if not isinstance(spec, F) or layout == "contig":
        return False
    # size-1 dims make any stride contiguous: require the permuted dims to be > 1
    sh = spec.shape
    if layout in ("T", "npT"):
        return len(sh) >= 2 and sh[-1] > 1 and sh[-2] > 1
    return len(sh) >= 1 and sh[-1] > 1


def make_input(L, arr, spec, layout, rng_extra):
    """Return (leaf, op_input) for library L."""
    if not isinstance(spec, F):
        return None, L.tensor(arr.copy())
    rg = spec.grad
    if not layout_applies(spec, layout):
        leaf = L.tensor(arr.copy(), requires_grad=rg)
        return leaf, leaf
    if layout == "T":
        leaf = L.tensor(np.ascontiguousarray(np.swapaxes(arr, -1, -2)), requires_grad=rg)
        return leaf, leaf.transpose(-1, -2)
    if layout == "step":
        base = np.empty(arr.shape[:-1] + (2 * arr.shape[-1],), arr.dtype)
        base[..., ::2] = arr
        base[..., 1::2] = rng_extra  # values the op must never see
        leaf = L.tensor(base, requires_grad=rg)
        return leaf, leaf[..., ::2]
    if layout == "npT":
        nparr = np.swapaxes(np.ascontiguousarray(np.swapaxes(arr, -1, -2)), -1, -2)
        assert not nparr.flags.c_contiguous
        leaf = L.from_numpy(nparr)
        assert not leaf.is_contiguous(), "from_numpy of a transposed array should be a strided view"
        if rg:
            leaf.requires_grad_(True)
        return leaf, leaf
    raise ValueError(layout)


# ---------------------------------------------------------------------------------------
# The op table
# ---------------------------------------------------------------------------------------
class Case:
    def __init__(self, id, fn, inputs, tol="pw", grad=True, noncontig=True, cmp=False,
                 dtypes=DTYPES):
        self.id, self.fn, self.inputs, self.tol = id, fn, inputs, tol
        self.grad, self.noncontig, self.cmp, self.dtypes = grad, noncontig, cmp, dtypes

    def layouts(self):
        out = ["contig"]
        if self.noncontig:
            for lay in ("T", "step", "npT"):
                if any(layout_applies(s, lay) for s in self.inputs):
                    out.append(lay)
        return out


CASES = []


def case(*a, **k):
    CASES.append(Case(*a, **k))


def fn_F(L):
    return L.nn.functional


# --- pointwise binary, with broadcasting --------------------------------------------------
BIN_SHAPES = {
    "same": ((3, 4), (3, 4)),
    "row": ((2, 3, 4), (4,)),
    "outer": ((3, 1), (1, 4)),
    "3d": ((2, 1, 4), (3, 1)),
    "0d": ((3, 4), ()),
    "left0d": ((), (2, 3)),
}
BINARY = {
    "add": (lambda L, a, b: L.add(a, b), "n", "n"),
    "add_op": (lambda L, a, b: a + b, "n", "n"),
    "add_method": (lambda L, a, b: a.add(b), "n", "n"),
    "sub": (lambda L, a, b: L.sub(a, b), "n", "n"),
    "sub_op": (lambda L, a, b: a - b, "n", "n"),
    "mul": (lambda L, a, b: L.mul(a, b), "n", "n"),
    "mul_op": (lambda L, a, b: a * b, "n", "n"),
    "mul_method": (lambda L, a, b: a.mul(b), "n", "n"),
    "div": (lambda L, a, b: L.div(a, b), "n", "away0"),
    "div_op": (lambda L, a, b: a / b, "n", "away0"),
    "pow": (lambda L, a, b: L.pow(a, b), "pos", "n"),
    "pow_op": (lambda L, a, b: a ** b, "pos", "n"),
    "maximum": (lambda L, a, b: L.maximum(a, b), "n", "n"),
    "minimum": (lambda L, a, b: L.minimum(a, b), "n", "n"),
}
for name, (fn, da, db) in BINARY.items():
    for sname, (sa, sb) in BIN_SHAPES.items():
        case(f"{name}[{sname}]", fn, [F(*sa, dom=da), F(*sb, dom=db)])
# one input constant (only the other gets a gradient)
case("mul[const_b]", lambda L, a, b: a * b, [F(3, 4), C(4)])
case("div[const_a]", lambda L, a, b: a / b, [C(3, 4), F(3, 4, dom="away0")])

# --- scalar forms and reflected ---------------------------------------------------------
SCALAR = {
    "add_s": (lambda L, a: a + 2.5, "n"),
    "radd_s": (lambda L, a: 2.5 + a, "n"),
    "add_int": (lambda L, a: a + 1, "n"),
    "add_method_s": (lambda L, a: a.add(2.0), "n"),
    "add_fn_s": (lambda L, a: L.add(a, -0.75), "n"),
    "sub_s": (lambda L, a: a - 1.5, "n"),
    "rsub_s": (lambda L, a: 1.5 - a, "n"),
    "sub_fn_s": (lambda L, a: L.sub(a, 3.0), "n"),
    "mul_s": (lambda L, a: a * -3.0, "n"),
    "rmul_int": (lambda L, a: 3 * a, "n"),
    "mul_fn_s": (lambda L, a: L.mul(a, 0.5), "n"),
    "div_s": (lambda L, a: a / 4.0, "n"),
    "div_method_s": (lambda L, a: a.div(3.0), "n"),
    "rdiv_s": (lambda L, a: 2.0 / a, "away0"),
    "pow_2": (lambda L, a: a ** 2, "n"),
    "pow_3_int": (lambda L, a: a ** 3, "n"),
    "pow_half": (lambda L, a: a ** 0.5, "pos"),
    "pow_neg": (lambda L, a: a ** -1.5, "pos"),
    "pow_fn_s": (lambda L, a: L.pow(a, 3.0), "n"),
    "pow_method_s": (lambda L, a: a.pow(2.0), "n"),
    "rpow_s": (lambda L, a: 2.0 ** a, "n"),
    "rpow_fn": (lambda L, a: L.pow(1.5, a), "n"),
    "neg_op": (lambda L, a: -a, "n"),
}
for name, (fn, dom) in SCALAR.items():
    case(name, fn, [F(3, 4, dom=dom)])

# --- unary ------------------------------------------------------------------------------
UNARY = {
    "neg": (lambda L, a: L.neg(a), "n"),
    "neg_method": (lambda L, a: a.neg(), "n"),
    "exp": (lambda L, a: L.exp(a), "n"),
    "exp_method": (lambda L, a: a.exp(), "n"),
    "log": (lambda L, a: L.log(a), "pos"),
    "log_method": (lambda L, a: a.log(), "pos"),
    "sqrt": (lambda L, a: L.sqrt(a), "pos"),
    "sqrt_method": (lambda L, a: a.sqrt(), "pos"),
    "rsqrt": (lambda L, a: L.rsqrt(a), "pos"),
    "rsqrt_method": (lambda L, a: a.rsqrt(), "pos"),
    "abs": (lambda L, a: L.abs(a), "away0"),
    "abs_method": (lambda L, a: a.abs(), "away0"),
    "sin": (lambda L, a: L.sin(a), "wide"),
    "cos": (lambda L, a: L.cos(a), "wide"),
    "tanh": (lambda L, a: L.tanh(a), "n"),
    "tanh_method": (lambda L, a: a.tanh(), "n"),
    "sigmoid": (lambda L, a: L.sigmoid(a), "wide"),
    "sigmoid_method": (lambda L, a: a.sigmoid(), "n"),
    "relu": (lambda L, a: L.relu(a), "away0"),
    "relu_method": (lambda L, a: a.relu(), "away0"),
    "F.relu": (lambda L, a: fn_F(L).relu(a), "away0"),
    "F.silu": (lambda L, a: fn_F(L).silu(a), "wide"),
    "F.leaky_relu_default": (lambda L, a: fn_F(L).leaky_relu(a), "away0"),
    "F.leaky_relu_0.2": (lambda L, a: fn_F(L).leaky_relu(a, 0.2), "away0"),
    "F.leaky_relu_kw": (lambda L, a: fn_F(L).leaky_relu(a, negative_slope=0.05), "away0"),
    "F.gelu": (lambda L, a: fn_F(L).gelu(a), "wide"),
    "F.gelu_none": (lambda L, a: fn_F(L).gelu(a, approximate="none"), "wide"),
    "F.gelu_tanh": (lambda L, a: fn_F(L).gelu(a, approximate="tanh"), "wide"),
    "F.softplus": (lambda L, a: fn_F(L).softplus(a), "wide"),
    # beta*x crosses threshold both ways with 'wide' data: the linear branch is tested
    "F.softplus_beta_thr": (lambda L, a: fn_F(L).softplus(a, beta=2.0, threshold=1.0), "wide"),
    "clamp_both": (lambda L, a: L.clamp(a, -0.5, 0.5), "n"),
    "clamp_kw": (lambda L, a: L.clamp(a, min=-1.0, max=1.0), "n"),
    "clamp_min": (lambda L, a: a.clamp(min=0.1), "n"),
    "clamp_max": (lambda L, a: a.clamp(max=-0.2), "n"),
    "clamp_int_bounds": (lambda L, a: a.clamp(-1, 1), "n"),
}
# gelu(approximate="tanh")'s derivative is 0.5(1+t) + 0.5 x (1-t^2) k (1+3c x^2) with
# t = tanh(k(x + c x^3)). For x << 0, 1+t cancels: its float32 absolute error is ~ulp(1)/2
# = 6e-8 (in torch too), and (1-t^2) = (1-t)(1+t) carries it multiplied by
# 0.5|x| k (1+3c x^2) <= ~43 for |x| <= 9 (the 'wide' domain): ~3e-6 per library. So the
# float32 atol for this op is 1e-5 (measured: torch and cagrad both differ from the exact
# value by up to ~5e-7 at x=-5, and give 0 vs 1.8e-6 at some x < -5). float64 is unaffected.
GELU_TANH_TOL = {"float32": dict(rtol=1e-5, atol=1e-5), "float64": TOL["float64"]}

for name, (fn, dom) in UNARY.items():
    tol = GELU_TANH_TOL if name == "F.gelu_tanh" else "pw"
    case(name, fn, [F(3, 4, dom=dom)], tol=tol)
    if name in ("exp", "tanh", "F.gelu_tanh", "sigmoid", "clamp_both"):
        case(name + "[3d]", fn, [F(2, 3, 4, dom=dom)], tol=tol)
        case(name + "[0d]", fn, [F(dom=dom)], tol=tol)

# dtype conversion (gradient converts back)
case("double", lambda L, a: a.double() * 3.0, [F(3, 4)])
case("float", lambda L, a: a.float() * 3.0, [F(3, 4)])
case("to_f64", lambda L, a: a.to(L.float64) * 3.0, [F(3, 4)])
case("to_f32", lambda L, a: a.to(L.float32) * 3.0, [F(3, 4)])

# --- where / masked_fill ----------------------------------------------------------------
case("where", lambda L, c, a, b: L.where(c > 0, a, b), [C(3, 4), F(3, 4), F(3, 4)])
case("where_bcast", lambda L, c, a, b: L.where(c > 0, a, b), [C(4), F(3, 4), F(1, 4)])
case("where_bcast_cond", lambda L, c, a, b: L.where(c > 0, a, b), [C(2, 3, 1), F(3, 4), F(4)])
case("where_scalar", lambda L, c, a: L.where(c > 0, a, 0.5), [C(3, 4), F(3, 4)])
case("where_method_cmp", lambda L, a, b: L.where(a < b, a * 2.0, b), [F(3, 4), F(3, 4)])
case("masked_fill", lambda L, a, m: a.masked_fill(m > 0, -2.0), [F(3, 4), C(3, 4)])
case("masked_fill_bcast", lambda L, a, m: a.masked_fill(m > 0, 0.0), [F(2, 3, 4), C(3, 4)])
case("masked_fill_fn", lambda L, a, m: L.masked_fill(a, m < 0, 1.5), [F(3, 4), C(4)])

# --- comparisons (values only; cagrad gives 0/1 in the input dtype) ---------------------
CMPS = {
    "lt": lambda L, a, b: L.lt(a, b),
    "le": lambda L, a, b: L.le(a, b),
    "gt": lambda L, a, b: L.gt(a, b),
    "ge": lambda L, a, b: L.ge(a, b),
    "eq": lambda L, a, b: L.eq(a, b),
    "ne": lambda L, a, b: L.ne(a, b),
    "lt_op": lambda L, a, b: a < b,
    "le_op": lambda L, a, b: a <= b,
    "gt_op": lambda L, a, b: a > b,
    "ge_op": lambda L, a, b: a >= b,
    "eq_op": lambda L, a, b: a == b,
    "ne_op": lambda L, a, b: a != b,
    "lt_method": lambda L, a, b: a.lt(b),
    "ge_method": lambda L, a, b: a.ge(b),
}
for name, fn in CMPS.items():
    case(f"{name}[same]", fn, [C(3, 4, dom="disc"), C(3, 4, dom="disc")], grad=False, cmp=True)
    case(f"{name}[bcast]", fn, [C(3, 1, dom="disc"), C(4, dom="disc")], grad=False, cmp=True)
CMP_SCALARS = {
    "lt_s": lambda L, a: a < 0.0,
    "le_s": lambda L, a: a <= 0.0,
    "gt_s": lambda L, a: a > 0.0,
    "ge_s": lambda L, a: a >= 1.0,
    "eq_s": lambda L, a: a == 1.0,
    "ne_s": lambda L, a: a != 0.0,
    "eq_int_s": lambda L, a: a == 1,
    "r_lt_s": lambda L, a: 0.0 < a,  # reflected: a.__gt__(0.0)
    "r_ge_s": lambda L, a: 0.0 >= a,
    "r_eq_s": lambda L, a: 1.0 == a,
    "gt_fn_s": lambda L, a: L.gt(a, 0.0),
    "le_method_s": lambda L, a: a.le(-1.0),
}
for name, fn in CMP_SCALARS.items():
    case(name, fn, [C(3, 4, dom="disc")], grad=False, cmp=True)

# --- reductions ---------------------------------------------------------------------------
RED = {
    "sum_all": lambda L, a: a.sum(),
    "sum_fn_all": lambda L, a: L.sum(a),
    "sum_d1": lambda L, a: a.sum(1),
    "sum_dneg_keep": lambda L, a: a.sum(-1, keepdim=True),
    "sum_d02": lambda L, a: a.sum((0, 2)),
    "sum_list_keep": lambda L, a: L.sum(a, dim=[0, 1], keepdim=True),
    "mean_all": lambda L, a: a.mean(),
    "mean_d0": lambda L, a: L.mean(a, 0),
    "mean_dneg_keep": lambda L, a: a.mean(dim=-1, keepdim=True),
    "mean_d12": lambda L, a: a.mean((1, 2)),
    "max_all": lambda L, a: a.max(),
    "max_fn_all": lambda L, a: L.max(a),
    "min_all": lambda L, a: a.min(),
    "max_d1": lambda L, a: a.max(1),
    "max_dneg_keep": lambda L, a: a.max(dim=-1, keepdim=True),
    "max_fn_d0": lambda L, a: L.max(a, 0),
    "min_d1": lambda L, a: a.min(1),
    "min_fn_d2_keep": lambda L, a: L.min(a, 2, keepdim=True),
    "max_values": lambda L, a: a.max(dim=1).values,
    "min_indices_dep": lambda L, a: a.min(dim=0)[0] * 2.0,
    "amax_d02": lambda L, a: L.amax(a, dim=(0, 2)),
    "amin_d1_keep": lambda L, a: a.amin(1, keepdim=True),
    "logsumexp_d1": lambda L, a: L.logsumexp(a, 1),
    "logsumexp_dneg_keep": lambda L, a: a.logsumexp(-1, keepdim=True),
    "logsumexp_d02": lambda L, a: L.logsumexp(a, dim=(0, 2)),
}
for name, fn in RED.items():
    case(name, fn, [F(3, 4, 5)], tol="sum")
case("sum_2d_d0", lambda L, a: a.sum(0), [F(4, 6)], tol="sum")
case("max_2d_d0", lambda L, a: a.max(0), [F(4, 6)], tol="sum")
case("logsumexp_big", lambda L, a: L.logsumexp(a * 30.0, 1), [F(4, 6)], tol="sum")

# --- shape ops --------------------------------------------------------------------------
SHAPE = {
    "reshape": (lambda L, a: a.reshape(12, 5), (3, 4, 5), True),
    "reshape_flat": (lambda L, a: a.reshape(-1), (3, 4, 5), True),
    "reshape_fn": (lambda L, a: L.reshape(a, (5, -1)), (3, 4, 5), True),
    "reshape_tuple": (lambda L, a: a.reshape((3, 20)), (3, 4, 5), True),
    "view": (lambda L, a: a.view(12, 5), (3, 4, 5), False),
    "view_neg": (lambda L, a: a.view(-1, 5), (3, 4, 5), False),
    "view_tuple": (lambda L, a: a.view((2, 30)), (3, 4, 5), False),
    "permute": (lambda L, a: a.permute(2, 0, 1), (3, 4, 5), True),
    "permute_fn": (lambda L, a: L.permute(a, (1, 2, 0)), (3, 4, 5), True),
    "transpose": (lambda L, a: a.transpose(0, 2), (3, 4, 5), True),
    "transpose_fn_neg": (lambda L, a: L.transpose(a, 1, -1), (3, 4, 5), True),
    "t": (lambda L, a: a.t(), (3, 4), True),
    "T": (lambda L, a: a.T, (3, 4), True),
    "expand": (lambda L, a: a.expand(3, 4, 5), (3, 1, 5), True),
    "expand_new_dim": (lambda L, a: a.expand(2, 3, 4, 5), (3, 1, 5), True),
    "expand_keep": (lambda L, a: a.expand(-1, 4, -1), (3, 1, 5), True),
    "expand_tuple": (lambda L, a: a.expand((2, 3, 5)), (3, 1), True),
    "squeeze_all": (lambda L, a: a.squeeze(), (3, 1, 5, 1), True),
    "squeeze_1": (lambda L, a: a.squeeze(1), (3, 1, 5, 1), True),
    "squeeze_neg": (lambda L, a: a.squeeze(-1), (3, 1, 5, 1), True),
    "squeeze_noop": (lambda L, a: a.squeeze(0), (3, 1, 5, 1), True),
    "squeeze_tuple": (lambda L, a: L.squeeze(a, (1, 3)), (3, 1, 5, 1), True),
    "unsqueeze0": (lambda L, a: a.unsqueeze(0), (3, 4), True),
    "unsqueeze_neg": (lambda L, a: a.unsqueeze(-1), (3, 4), True),
    "unsqueeze_fn": (lambda L, a: L.unsqueeze(a, 1), (3, 4), True),
    "flatten": (lambda L, a: a.flatten(), (3, 4, 5), True),
    "flatten1": (lambda L, a: a.flatten(1), (3, 4, 5), True),
    "flatten01": (lambda L, a: a.flatten(0, 1), (3, 4, 5), True),
    "flatten_fn": (lambda L, a: L.flatten(a, 1, -1), (2, 3, 4, 5), True),
    "narrow": (lambda L, a: a.narrow(1, 1, 2), (3, 4, 5), True),
    "narrow_fn_neg": (lambda L, a: L.narrow(a, -1, 0, 3), (3, 4, 5), True),
    "select": (lambda L, a: a.select(1, 2), (3, 4, 5), True),
    "select_neg": (lambda L, a: a.select(-1, 0), (3, 4, 5), True),
    "select_fn": (lambda L, a: L.select(a, 0, -1), (3, 4, 5), True),
    "contiguous": (lambda L, a: a.contiguous() * 2.0, (3, 4, 5), True),
}
for name, (fn, shape, nc) in SHAPE.items():
    case(name, fn, [F(*shape)], noncontig=nc)
# a view's output used twice: grads of both uses meet in the leaf
case("view_twice", lambda L, a: a.reshape(4, 3) * a.reshape(4, 3).exp(), [F(3, 4)])
case("slice_then_transpose", lambda L, a: a[:, 1:].transpose(0, 1) * 2.0, [F(3, 4)])

case("cat_d1", lambda L, a, b: L.cat([a, b], 1), [F(3, 4, 5), F(3, 2, 5)])
case("cat3_d0", lambda L, a, b, c: L.cat([a, b, c], 0), [F(1, 4), F(2, 4), F(3, 4)])
case("cat_tuple_dneg", lambda L, a, b: L.cat((a, b), dim=-1), [F(3, 4, 5), F(3, 4, 2)])
case("cat_const", lambda L, a, b: L.cat([a, b], 0), [F(2, 3), C(2, 3)])
case("stack", lambda L, a, b: L.stack([a, b]), [F(3, 4), F(3, 4)])
case("stack_d1", lambda L, a, b: L.stack([a, b], dim=1), [F(3, 4), F(3, 4)])
case("stack3_dneg", lambda L, a, b, c: L.stack((a, b, c), -1), [F(3, 4), F(3, 4), F(3, 4)])

# --- indexing ops ---------------------------------------------------------------------------
case("index_select_d0", lambda L, a, i: L.index_select(a, 0, i), [F(3, 4), Idx((6,), 3)])
case("index_select_d1", lambda L, a, i: a.index_select(1, i), [F(3, 4, 5), Idx((7,), 4)])
case("index_select_dneg", lambda L, a, i: a.index_select(-1, i), [F(3, 4, 5), Idx((2,), 5)])
case("embedding", lambda L, i, w: fn_F(L).embedding(i, w), [Idx((2, 5), 6), F(6, 4)])
case("embedding_1d", lambda L, i, w: fn_F(L).embedding(i, w), [Idx((9,), 3), F(3, 4)])
case("gather_d1", lambda L, a, i: L.gather(a, 1, i), [F(3, 4), Idx((3, 6), 4)])
case("gather_d0", lambda L, a, i: a.gather(0, i), [F(3, 4), Idx((2, 4), 3)])
case("gather_3d", lambda L, a, i: a.gather(-1, i), [F(2, 3, 4), Idx((2, 3, 2), 4)])

# --- linear algebra -----------------------------------------------------------------------
MATMUL_SHAPES = [
    ((4,), (4,)),
    ((4,), (4, 3)),
    ((3, 4), (4,)),
    ((3, 4), (4, 5)),
    ((2, 3, 4), (4, 5)),
    ((3, 4), (2, 4, 5)),
    ((4,), (2, 4, 3)),
    ((2, 3, 4), (4,)),
    ((2, 3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((2, 2, 3, 4), (2, 2, 4, 3)),
]
for sa, sb in MATMUL_SHAPES:
    sid = "x".join(map(str, sa)) + "@" + "x".join(map(str, sb))
    case(f"matmul_op[{sid}]", lambda L, a, b: a @ b, [F(*sa), F(*sb)], tol="sum")
    case(f"matmul_fn[{sid}]", lambda L, a, b: L.matmul(a, b), [F(*sa), F(*sb)], tol="sum")
case("matmul_method", lambda L, a, b: a.matmul(b), [F(3, 4), F(4, 2)], tol="sum")
case("matmul_const_b", lambda L, a, b: a @ b, [F(3, 4), C(4, 2)], tol="sum")
case("mm", lambda L, a, b: L.mm(a, b), [F(3, 4), F(4, 5)], tol="sum")
case("mm_method", lambda L, a, b: a.mm(b), [F(5, 4), F(4, 3)], tol="sum")
case("mm_self", lambda L, a: a.mm(a.t()), [F(3, 4)], tol="sum")
case("bmm", lambda L, a, b: L.bmm(a, b), [F(2, 3, 4), F(2, 4, 5)], tol="sum")
case("bmm_method", lambda L, a, b: a.bmm(b), [F(3, 2, 4), F(3, 4, 2)], tol="sum")
case("linear", lambda L, x, w, b: fn_F(L).linear(x, w, b), [F(3, 4), F(5, 4), F(5)], tol="sum")
case("linear_nobias", lambda L, x, w: fn_F(L).linear(x, w), [F(3, 4), F(5, 4)], tol="sum")
case("linear_3d", lambda L, x, w, b: fn_F(L).linear(x, w, b), [F(2, 3, 4), F(5, 4), F(5)],
     tol="sum")
case("linear_1d", lambda L, x, w, b: fn_F(L).linear(x, w, b), [F(4), F(5, 4), F(5)], tol="sum")

# --- neural-network ops -------------------------------------------------------------------
for d in (0, 1, -1):
    case(f"F.softmax[d{d}]", lambda L, a, d=d: fn_F(L).softmax(a, dim=d), [F(3, 4, 5)],
         tol="sum")
    case(f"F.log_softmax[d{d}]", lambda L, a, d=d: fn_F(L).log_softmax(a, dim=d), [F(3, 4, 5)],
         tol="sum")
case("softmax_fn", lambda L, a: L.softmax(a, -1), [F(3, 4)], tol="sum")
case("softmax_method", lambda L, a: a.softmax(0), [F(3, 4)], tol="sum")
case("log_softmax_method", lambda L, a: a.log_softmax(dim=1), [F(3, 4)], tol="sum")
case("softmax_wide", lambda L, a: fn_F(L).softmax(a * 20.0, dim=1), [F(3, 4)], tol="sum")

for red in ("mean", "sum", "none"):
    case(f"F.cross_entropy[{red}]",
         lambda L, x, t, red=red: fn_F(L).cross_entropy(x, t, reduction=red),
         [F(6, 5), Tgt((6,), 5)], tol="sum")
    case(f"F.cross_entropy_ignore[{red}]",
         lambda L, x, t, red=red: fn_F(L).cross_entropy(x, t, reduction=red),
         [F(6, 5), Tgt((6,), 5, n_ignore=2)], tol="sum")
    case(f"F.cross_entropy_ignore2[{red}]",
         lambda L, x, t, red=red: fn_F(L).cross_entropy(x, t, ignore_index=2, reduction=red),
         [F(6, 5), Tgt((6,), 5, n_ignore=2, ignore=2)], tol="sum")
    case(f"F.cross_entropy_Nd[{red}]",
         lambda L, x, t, red=red: fn_F(L).cross_entropy(x, t, reduction=red),
         [F(4, 5, 3), Tgt((4, 3), 5, n_ignore=1)], tol="sum")
    case(f"F.nll_loss[{red}]",
         lambda L, x, t, red=red: fn_F(L).nll_loss(x, t, reduction=red),
         [F(6, 5), Tgt((6,), 5)], tol="sum")
    case(f"F.nll_loss_ignore[{red}]",
         lambda L, x, t, red=red: fn_F(L).nll_loss(x, t, ignore_index=1, reduction=red),
         [F(6, 5), Tgt((6,), 5, n_ignore=2, ignore=1)], tol="sum")
    case(f"F.nll_of_log_softmax[{red}]",
         lambda L, x, t, red=red: fn_F(L).nll_loss(fn_F(L).log_softmax(x, 1), t, reduction=red),
         [F(6, 5), Tgt((6,), 5, n_ignore=1)], tol="sum")
    case(f"F.mse_loss[{red}]",
         lambda L, a, b, red=red: fn_F(L).mse_loss(a, b, reduction=red),
         [F(3, 4), F(3, 4)], tol="sum")
case("F.cross_entropy_default", lambda L, x, t: fn_F(L).cross_entropy(x, t),
     [F(6, 5), Tgt((6,), 5, n_ignore=1)], tol="sum")
case("F.cross_entropy_1d", lambda L, x, t: fn_F(L).cross_entropy(x, t),
     [F(5), Tgt((), 5)], tol="sum")
case("F.mse_loss_default", lambda L, a, b: fn_F(L).mse_loss(a, b), [F(2, 3, 4), C(2, 3, 4)],
     tol="sum")

case("F.layer_norm", lambda L, x: fn_F(L).layer_norm(x, (5,)), [F(3, 4, 5, dom="ln")], tol="sum")
case("F.layer_norm_2d_affine", lambda L, x, w, b: fn_F(L).layer_norm(x, (4, 5), w, b),
     [F(3, 4, 5, dom="ln"), F(4, 5), F(4, 5)], tol="sum")
case("F.layer_norm_affine_eps", lambda L, x, w, b: fn_F(L).layer_norm(x, [5], w, b, eps=1e-3),
     [F(3, 4, 5, dom="ln"), F(5), F(5)], tol="sum")
case("F.layer_norm_kw", lambda L, x, w, b: fn_F(L).layer_norm(x, (5,), weight=w, bias=b),
     [F(6, 5, dom="ln"), F(5), F(5)], tol="sum")
case("F.layer_norm_weight_only", lambda L, x, w: fn_F(L).layer_norm(x, (5,), w),
     [F(6, 5, dom="ln"), F(5)], tol="sum")

case("F.dropout_p0", lambda L, a: fn_F(L).dropout(a, p=0.0, training=True), [F(3, 4)])
case("F.dropout_eval", lambda L, a: fn_F(L).dropout(a, 0.5, training=False), [F(3, 4)])
case("F.dropout_eval_p1", lambda L, a: fn_F(L).dropout(a, p=1.0, training=False), [F(3, 4)])

# --- edge sizes ---------------------------------------------------------------------------
case("edge_add_1elem", lambda L, a, b: a + b, [F(1, 1), F(3, 4)])
case("edge_sum_empty_d0", lambda L, a: a.sum(0), [F(0, 4)], tol="sum", noncontig=False)
case("edge_mul_empty", lambda L, a, b: a * b, [F(0, 4), F(4)], noncontig=False)
case("edge_mm_k1", lambda L, a, b: a @ b, [F(3, 1), F(1, 4)], tol="sum")

_ids = [c.id for c in CASES]
assert len(_ids) == len(set(_ids)), "duplicate case ids"


def _params():
    for c in CASES:
        for dt in c.dtypes:
            for lay in c.layouts():
                yield pytest.param(c, dt, lay, id=f"{c.id}-{dt}-{lay}")


# ---------------------------------------------------------------------------------------
# The runner
# ---------------------------------------------------------------------------------------
def _outputs(out):
    """(list of outputs, index of the differentiable one)."""
    if isinstance(out, tuple):
        return list(out), 0
    return [out], 0


def run_case(c, dtype, layout, compiled, rng):
    arrays = gen_arrays(rng, c.inputs, dtype)
    extras = [gen_float(rng, a.shape, "n", dtype) if isinstance(s, F) else None
              for a, s in zip(arrays, c.inputs)]
    res = {}
    for name, L in (("cagrad", ca), ("torch", torch)):
        leaves, ins = [], []
        for arr, spec, ex in zip(arrays, c.inputs, extras):
            leaf, inp = make_input(L, arr, spec, layout, ex)
            leaves.append(leaf)
            ins.append(inp)
        out = c.fn(L, *ins)
        res[name] = (leaves, out)

    if isinstance(c.tol, dict):
        tol = c.tol[dtype]
    else:
        tol = (TOL_SUM if c.tol == "sum" else TOL)[dtype]
    c_outs, k = _outputs(res["cagrad"][1])
    t_outs, _ = _outputs(res["torch"][1])
    assert len(c_outs) == len(t_outs), f"number of outputs: {len(c_outs)} vs {len(t_outs)}"
    for j, (co, to) in enumerate(zip(c_outs, t_outs)):
        if c.cmp:  # bool results, as torch's
            assert_close(co, to, rtol=0, atol=0, msg=f"{c.id} out{j}")
        else:
            assert_close(co, to, **tol, msg=f"{c.id} forward out{j}")
    if not c.grad:
        return
    shape = tuple(t_outs[k].shape)
    g = rng.standard_normal(shape).astype(NP_DTYPES[str(to_np(t_outs[k]).dtype)])
    for name, L in (("cagrad", ca), ("torch", torch)):
        out = _outputs(res[name][1])[0][k]
        loss = (out * L.tensor(g.copy())).sum()
        if name == "cagrad":
            backward_checked(loss, compiled)
        else:
            loss.backward()
    n_checked = 0
    for j, (spec, cl, tl) in enumerate(zip(c.inputs, res["cagrad"][0], res["torch"][0])):
        if isinstance(spec, F) and spec.grad:
            assert tl.grad is not None  # the reference has a gradient for every F input
            assert cl.grad is not None, f"{c.id}: input {j} got no gradient"
            assert tuple(cl.grad.shape) == tuple(cl.shape), "grad shape != leaf shape"
            assert_close(cl.grad, tl.grad, **tol, msg=f"{c.id} grad of input {j}")
            n_checked += 1
    assert n_checked >= 1


@pytest.mark.parametrize("c, dtype, layout", list(_params()))
def test_op_parity(c, dtype, layout, compiled, rng):
    run_case(c, dtype, layout, compiled, rng)


# ---------------------------------------------------------------------------------------
# Indexing with Python subscripts
# ---------------------------------------------------------------------------------------
INDEX = {
    "int": lambda x: x[1],
    "neg_int": lambda x: x[-1],
    "int_int": lambda x: x[1, 2],
    "slice": lambda x: x[1:3],
    "slice_step": lambda x: x[::2],
    "slice_step_start": lambda x: x[1::2, ::3],
    "slice_neg_bounds": lambda x: x[-2:, :-1],
    "slice_clamped": lambda x: x[1:100, -100:2],
    "none": lambda x: x[None],
    "none_mid": lambda x: x[:, None, 1],
    "ellipsis": lambda x: x[..., 1],
    "ellipsis_slice": lambda x: x[1, ..., ::2],
    "ellipsis_none": lambda x: x[..., None],
    "int_slice_none": lambda x: x[2, 1:3, None],
    "full": lambda x: x[:],
    "empty_slice": lambda x: x[2:2],
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(INDEX))
def test_indexing_parity(name, dtype, compiled, rng):
    arr = gen_float(rng, (4, 5, 6), "n", dtype)
    outs, leaves = [], []
    for L in (ca, torch):
        x = L.tensor(arr.copy(), requires_grad=True)
        leaves.append(x)
        outs.append(INDEX[name](x))
    assert_close(outs[0], outs[1], rtol=0, atol=0, msg=f"{name} forward")
    g = rng.standard_normal(tuple(outs[1].shape)).astype(NP_DTYPES[dtype])
    backward_checked((outs[0] * ca.tensor(g.copy())).sum(), compiled)
    (outs[1] * torch.tensor(g.copy())).sum().backward()
    assert_close(leaves[0].grad, leaves[1].grad, rtol=0, atol=0, msg=f"{name} grad")


INDEX_L = {
    "list": lambda L, x: x[[0, 2, 2]],
    "list_neg": lambda L, x: x[[-1, 0]],
    "list_then_slice": lambda L, x: x[[3, 0], 1:3],
    "np_int_array": lambda L, x: x[np.array([2, 0, 2])],
    "np_int64_scalar": lambda L, x: x[np.int64(1)],
    "int64_0d_tensor": lambda L, x: x[L.tensor(1)],
    "tensor_then_step": lambda L, x: x[L.tensor([2, 0]), ::2],
    "slice_then_tensor": lambda L, x: x[:, L.tensor([3, 0, 3])],
    "mask_on_dim1": lambda L, x: x[:, x.sum(0) > 0],
    "ellipsis_tensor": lambda L, x: x[..., L.tensor([1, 1])],
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(INDEX_L))
def test_indexing_lists_arrays_tensors_parity(name, dtype, compiled, rng):
    arr = gen_float(rng, (5, 4, 3), "n", dtype)
    outs, leaves = [], []
    for L in (ca, torch):
        x = L.tensor(arr.copy(), requires_grad=True)
        leaves.append(x)
        outs.append(INDEX_L[name](L, x))
    assert_close(outs[0], outs[1], rtol=0, atol=0, msg=f"{name} forward")
    g = rng.standard_normal(tuple(outs[1].shape)).astype(NP_DTYPES[dtype])
    backward_checked((outs[0] * ca.tensor(g.copy())).sum(), compiled)
    (outs[1] * torch.tensor(g.copy())).sum().backward()
    assert_close(leaves[0].grad, leaves[1].grad, msg=f"{name} grad")


SETITEM = {
    "slice_scalar": lambda L, x: x.__setitem__(slice(1, 3), 5.0),
    "int_tensor_row": lambda L, x: x.__setitem__(0, L.tensor([1.0, 2.0, 3.0, 4.0])),
    "mask_scalar": lambda L, x: x.__setitem__(x > 5, 0.0),
    "ellipsis_col": lambda L, x: x.__setitem__((Ellipsis, 1), -1.0),
    "step_bcast_row": lambda L, x: x.__setitem__((slice(None, None, 2),), L.tensor([9.0, 8.0, 7.0, 6.0])),
}


@pytest.mark.parametrize("name", list(SETITEM))
def test_setitem_values_and_version(name):
    got = []
    for L in (ca, torch):
        x = L.tensor(np.arange(12.0).reshape(3, 4))
        v0 = x._version
        SETITEM[name](L, x)
        got.append((x, x._version - v0))
    assert_close(got[0][0], got[1][0], rtol=0, atol=0, msg=name)
    assert got[0][1] == got[1][1] == 1, (got[0][1], got[1][1])


def test_negative_step_is_value_error():
    with pytest.raises(ValueError):
        ca.ones(4)[::-1]


def _index_with(L, x, kind, arr_mask, idx):
    if kind == "np_bool":
        return x[arr_mask]
    if kind == "cmp_mask":
        return x[x > 0.2]
    if kind == "cmp_mask_rows":
        return x[x.sum(1) > 0]
    if kind == "int64_tensor":
        return x[L.tensor(idx)]
    if kind == "int64_tensor_2d":
        return x[L.tensor(idx.reshape(2, 2))]
    raise ValueError(kind)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["np_bool", "cmp_mask", "cmp_mask_rows", "int64_tensor",
                                  "int64_tensor_2d"])
def test_advanced_indexing_parity(kind, dtype, compiled, rng):
    arr = gen_float(rng, (5, 4), "n", dtype)
    mask = rng.random((5, 4)) > 0.5
    mask[0, 0] = True
    idx = np.array([3, 0, 3, 1], dtype=np.int64)  # repeated index: grads accumulate
    outs, leaves = [], []
    for L in (ca, torch):
        x = L.tensor(arr.copy(), requires_grad=True)
        leaves.append(x)
        outs.append(_index_with(L, x, kind, mask, idx))
    assert_close(outs[0], outs[1], rtol=0, atol=0, msg=f"{kind} forward")
    g = rng.standard_normal(tuple(outs[1].shape)).astype(NP_DTYPES[dtype])
    backward_checked((outs[0] * ca.tensor(g.copy())).sum(), compiled)
    (outs[1] * torch.tensor(g.copy())).sum().backward()
    assert_close(leaves[0].grad, leaves[1].grad, msg=f"{kind} grad")


# ---------------------------------------------------------------------------------------
# Dropout with p > 0 (random: statistics, not parity)
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_mask_statistics_and_grad(p, dtype, compiled, rng):
    n = 40000
    x = ca.tensor(gen_float(rng, (200, 200), "pos", dtype), requires_grad=True)
    y = ca.nn.functional.dropout(x, p=p, training=True)
    yv, xv = to_np(y), to_np(x)
    kept = yv != 0
    # the kept fraction is Binomial(n, 1-p)/n: 5 standard deviations
    sd = math.sqrt(p * (1 - p) / n)
    assert abs(kept.mean() - (1 - p)) < 5 * sd, f"kept fraction {kept.mean()} for p={p}"
    scale = 1.0 / (1.0 - p)
    tol = TOL[dtype]
    np.testing.assert_allclose(yv[kept], xv[kept] * scale, **tol)
    g = rng.standard_normal((200, 200)).astype(NP_DTYPES[dtype])
    backward_checked((y * ca.tensor(g.copy())).sum(), compiled)
    np.testing.assert_allclose(to_np(x.grad), np.where(kept, g * scale, 0.0), **tol)


def test_dropout_masks_differ_between_calls():
    x = ca.ones(100, 100)
    a = to_np(ca.nn.functional.dropout(x, p=0.5, training=True))
    b = to_np(ca.nn.functional.dropout(x, p=0.5, training=True))
    assert (a != b).any()


def test_dropout_module_train_eval(rng):
    d = ca.nn.Dropout(p=0.5)
    x = ca.tensor(gen_float(rng, (50, 50), "pos", "float32"))
    d.eval()
    np.testing.assert_array_equal(to_np(d(x)), to_np(x))
    d.train()
    y = to_np(d(x))
    assert (y == 0).any() and (y != 0).any()


def test_dropout_manual_seed_reproducible():
    x = ca.ones(30, 30)
    ca.manual_seed(123)
    a = to_np(ca.nn.functional.dropout(x, p=0.5, training=True))
    ca.manual_seed(123)
    b = to_np(ca.nn.functional.dropout(x, p=0.5, training=True))
    np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------
# Ties: PyTorch's rules for maximum/minimum/clamp at equal values
# ---------------------------------------------------------------------------------------
TIES = {
    # maximum/minimum split the gradient equally between equal inputs
    "maximum_tie": (lambda L, a, b: L.maximum(a, b), True),
    "minimum_tie": (lambda L, a, b: L.minimum(a, b), True),
    # relu'(0) = 0, abs'(0) = 0 (sign(0) = 0)
    "relu_at_0": (lambda L, a, b: L.relu(a - a.detach()) * b, True),
    "abs_at_0": (lambda L, a, b: L.abs(a - a.detach()) * b, True),
    # clamp passes the gradient at the bounds themselves (min <= x <= max)
    "clamp_at_bounds": (lambda L, a, b: L.clamp(a, min=0.5, max=2.0) * b, True),
}


@pytest.mark.parametrize("name", list(TIES))
def test_tie_rules(name, compiled):
    fn, _ = TIES[name]
    arr = np.array([[1.0, 2.0, 3.0], [0.5, 0.5, -1.0]])
    brr = np.array([[1.0, 0.0, 3.0], [0.5, 2.0, -1.0]])
    res = []
    a_both, b_both = to_both(arr, True), to_both(brr, True)
    for j, L in enumerate((ca, torch)):
        a, b = a_both[j], b_both[j]
        out = fn(L, a, b)
        loss = (out * 1.0).sum()
        if L is ca:
            backward_checked(loss, compiled)
        else:
            loss.backward()
        res.append((out, a.grad, b.grad))
    assert_close(res[0][0], res[1][0], msg="forward")
    assert_close(res[0][1], res[1][1], msg="grad a")
    assert_close(res[0][2], res[1][2], msg="grad b")


# ---------------------------------------------------------------------------------------
# In-place ops and the version counter
# ---------------------------------------------------------------------------------------
INPLACE = {
    "add_": lambda L, x, o: x.add_(o),
    "add_alpha": lambda L, x, o: x.add_(o, alpha=-0.5),
    "add_bcast": lambda L, x, o: x.add_(o[0]),
    "add_scalar": lambda L, x, o: x.add_(2.0),
    "mul_": lambda L, x, o: x.mul_(o),
    "mul_scalar": lambda L, x, o: x.mul_(3.0),
    "zero_": lambda L, x, o: x.zero_(),
    "copy_": lambda L, x, o: x.copy_(o),
    "copy_bcast": lambda L, x, o: x.copy_(o[1]),
    "fill_": lambda L, x, o: x.fill_(1.25),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(INPLACE))
def test_inplace_ops_values_and_version(name, dtype, rng):
    arr = gen_float(rng, (3, 4), "n", dtype)
    orr = gen_float(rng, (3, 4), "n", dtype)
    got = []
    for L in (ca, torch):
        x, o = L.tensor(arr.copy()), L.tensor(orr.copy())
        v0 = x._version
        r = INPLACE[name](L, x, o)
        assert r is x, f"{name} should return self"
        got.append((x, x._version - v0))
    assert_close(got[0][0], got[1][0], msg=name)
    assert got[0][1] == got[1][1] == 1, f"version bumps: cagrad {got[0][1]}, torch {got[1][1]}"


def test_inplace_on_view_bumps_base_version_and_writes_base(rng):
    for L in (ca, torch):
        base = L.zeros(3, 4)
        v = base[1]
        b0, v0 = base._version, v._version
        v.add_(L.ones(4))
        assert base._version == b0 + 1 and v._version == v0 + 1, L.__name__
        np.testing.assert_array_equal(to_np(base)[1], np.ones(4, np.float32))
        np.testing.assert_array_equal(to_np(base)[0], np.zeros(4, np.float32))


def test_inplace_version_counts_accumulate():
    for L in (ca, torch):
        x = L.zeros(4)
        v0 = x._version
        x.add_(L.ones(4))
        x.mul_(2.0)
        x.zero_()
        x.copy_(L.ones(4))
        assert x._version - v0 == 4, L.__name__


def test_inplace_under_no_grad_on_param_like_leaf(rng):
    arr = gen_float(rng, (3,), "n", "float32")
    res = []
    for L in (ca, torch):
        w = L.tensor(arr.copy(), requires_grad=True)
        with L.no_grad():
            w.mul_(2.0)
            w.add_(L.ones(3), alpha=0.5)
        assert w.requires_grad and w.is_leaf
        res.append(w)
    assert_close(res[0], res[1])


def test_inplace_on_leaf_requiring_grad_is_error():
    for L in (ca, torch):
        w = L.ones(3, requires_grad=True)
        with pytest.raises(RuntimeError):
            w.add_(L.ones(3))
