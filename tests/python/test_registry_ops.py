"""Every op of cagrad's op registry (cagrad._C.ops) against PyTorch 2.13, generically.

The registry is where the C library lists its ops with PyTorch-style schemas; the Python
functions torch.X, Tensor.X and nn.functional.X are built from it (cagrad/_ops.py). These
tests iterate over the registry, so an op added to it is covered without an edit here:
- it exists in exactly the namespaces where PyTorch has it, with PyTorch's parameter names
  and defaults (and inplace= where PyTorch's functional form has one);
- its values and gradients match PyTorch's in float32 and float64, eagerly and under
  compiled autograd, at its default arguments and at other ones;
- its float64 gradient matches central finite differences (gradcheck), eager and compiled;
- its derivative fuses with its pointwise neighbours in the compiled backward.
"""

import inspect

import numpy as np
import pytest
import torch

from helpers import (STANDIN, assert_close, backward_checked, ca, compiled_ctx, counters,
                     numeric_gradient, torch_gradient)

pytestmark = pytest.mark.skipif(STANDIN, reason="the registry is cagrad's own")

if STANDIN:
    POSITIVE = PY_INPLACE = PY_NN = PY_OUT = PY_TENSOR = PY_TORCH = 0
    UNIT = ABOVE_1 = ABOVE_M1 = PROB = 0
else:
    from cagrad._ops import (ABOVE_1, ABOVE_M1, POSITIVE, PROB, PY_INPLACE, PY_NN, PY_OUT,
                             PY_TENSOR, PY_TORCH, UNIT)
OPS = {} if STANDIN else dict(ca._C.ops)
NAMES = sorted(OPS)
def params(name):
    """[(kind, name, default value or inspect.Parameter.empty, choices)] of op's schema, as
    cagrad's own schema reader (_ops._params) splits it, with the defaults evaluated."""
    from cagrad._ops import _params

    return [(kind, pname, inspect.Parameter.empty if default is None else eval(default),  # noqa
             choices) for kind, pname, default, choices in _params(OPS[name][1])]


def unary(name):
    """Ops with one Tensor, first, and defaults for the rest: callable as f(x, *args)."""
    ps = params(name)
    return (ps[0][0] == "Tensor" and all(p[0] != "Tensor" for p in ps[1:]) and
            all(p[2] is not inspect.Parameter.empty for p in ps[1:]))


UNARY = [n for n in NAMES if unary(n)]


def torch_signature(fn):
    """[(name, default)] of a torch function; builtins are read from their docstring's
    first line, e.g. 'softplus(input, beta=1, threshold=20) -> Tensor'."""
    try:
        sig = inspect.signature(fn)
        return [(p.name, p.default) for p in sig.parameters.values()]
    except (TypeError, ValueError):
        line = fn.__doc__.strip().splitlines()[0]
        inner = line[line.index("(") + 1:line.index(")")]
        out, keyword_only = [], False
        for part in filter(None, (p.strip() for p in inner.split(","))):
            if part == "*":
                keyword_only = True
                continue
            pname, _, default = part.partition("=")
            pname = pname.split(":")[0].strip()  # "out: Optional[Tensor]"
            if default:
                value = eval(default.strip())  # noqa: S307
            else:  # the docs leave out the None default of optional keywords
                value = None if keyword_only else inspect.Parameter.empty
            out.append((pname, value))
        return out


# ------------------------------------------------------------------------------ namespaces
NAMESPACES = [(PY_TORCH, "torch", lambda L: L), (PY_TENSOR, "Tensor", lambda L: L.Tensor),
              (PY_NN, "nn.functional", lambda L: L.nn.functional)]


@pytest.mark.parametrize("name", NAMES)
def test_namespaces_are_pytorchs(name):
    flags = OPS[name][2]
    for flag, where, ns in NAMESPACES:
        in_torch = hasattr(ns(torch), name)
        assert bool(flags & flag) == in_torch, f"{where}.{name}: PyTorch has it: {in_torch}"
        assert hasattr(ns(ca), name) == in_torch, f"cagrad's {where}.{name}"
    fns = {getattr(ns(ca), name) for flag, _, ns in NAMESPACES if flags & flag}
    assert len(fns) == 1, f"{name}: one function serves every namespace"


@pytest.mark.parametrize("name", NAMES)
def test_signature_is_pytorchs(name):
    """The functional form's where PyTorch has one, else torch.<name>'s."""
    ns = (lambda L: L.nn.functional) if OPS[name][2] & PY_NN else (lambda L: L)
    ours = [(p.name, p.default) for p in inspect.signature(
        getattr(ns(ca), name)).parameters.values()]
    theirs = torch_signature(getattr(ns(torch), name))
    assert [n for n, _ in ours] == [n for n, _ in theirs]
    for (pname, mine), (_, ref) in zip(ours, theirs):
        assert mine == ref, f"{name}({pname}=): default {mine!r}, PyTorch's {ref!r}"


# ------------------------------------------------------------------------------ parity
# Ops PyTorch builds from other ops, so its grad_fn is the last of those: cagrad runs one
# kernel and records one node of its own (docs/python-api.md lists them).
DECOMPOSED_BY_TORCH = {"softsign": ("SoftsignBackward0", "DivBackward0")}

def arg_sets(name):
    """The defaults, then each choice of a choice parameter, then the floats at 3/4 of their
    defaults (their ratios, e.g. min_val <= max_val, stay as they are)."""
    ps = params(name)[1:]
    base = {p[1]: p[2] for p in ps}
    sets = [dict(base)]
    for _, pname, _, choices in ps:
        for c in choices or []:
            if c != base[pname]:
                sets.append({**base, pname: c})
    floats = {p[1]: p[2] * 0.75 for p in ps if p[0] == "float" and p[2] != 0}
    if floats:
        sets.append({**base, **floats})
    return sets


def inputs(rng, dtype, name=None):
    x = rng.standard_normal((5, 7)) * 2.5
    x[0, :4] = [-3.5, -0.25, 0.125, 3.75]  # on both sides of the usual kinks, off them
    flags = OPS[name][2] if name else 0
    if flags & POSITIVE:  # log, sqrt, ...: inside their domain
        x = np.abs(x) + 0.125
    if flags & ABOVE_1:  # acosh
        x = np.abs(x) + 1.125
    if flags & ABOVE_M1:  # log1p
        x = np.abs(x) - 0.875
    if flags & UNIT:  # asin, atanh, erfinv: (-1, 1), away from the ends' steep slopes
        x = np.tanh(x / 4) * 0.875
    if flags & PROB:  # logit: (0, 1)
        x = 0.5 + np.tanh(x / 4) * 0.4375
    return x.astype(dtype), rng.standard_normal((5, 7)).astype(dtype)


def call(L, name, x, kwargs):
    return getattr(L.nn.functional if OPS[name][2] & PY_NN else L, name)(x, **kwargs)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", UNARY)
def test_values_and_gradients_match_torch(name, dtype, compiled, rng):
    x, g = inputs(rng, dtype, name)
    for kwargs in arg_sets(name):
        cx = ca.tensor(x, requires_grad=True)
        tx = torch.tensor(x, requires_grad=True)
        cy, ty = call(ca, name, cx, kwargs), call(torch, name, tx, kwargs)
        assert_close(cy, ty, msg=f"{name}({kwargs}) values")
        ours, theirs = DECOMPOSED_BY_TORCH.get(name, (ty.grad_fn.name(),) * 2)
        assert (cy.grad_fn.name(), ty.grad_fn.name()) == (ours, theirs)
        with compiled_ctx(compiled):
            backward_checked((cy * ca.tensor(g)).sum(), compiled)
        (ty * torch.tensor(g)).sum().backward()
        assert_close(cx.grad, torch_gradient(name, tx.grad), msg=f"{name}({kwargs}) gradient")


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", UNARY)
def test_gradcheck_float64(name, compiled, rng):
    x, g = inputs(rng, "float64", name)
    if name == "round":  # it jumps at the halves, as at inputs()' -3.5: measure beside them
        x = x + 1 / 64
    for kwargs in arg_sets(name):
        def loss(a):
            return float((call(ca, name, ca.tensor(a), kwargs) * ca.tensor(g)).sum())

        cx = ca.tensor(x, requires_grad=True)
        with compiled_ctx(compiled):
            backward_checked((call(ca, name, cx, kwargs) * ca.tensor(g)).sum(), compiled)
        np.testing.assert_allclose(cx.grad.numpy(), numeric_gradient(loss, x), rtol=1e-3,
                                   atol=1e-5, err_msg=f"{name}({kwargs})")


PIECEWISE_CONSTANT = {"ceil", "floor", "round", "sgn", "sign", "trunc"}


@pytest.mark.parametrize("name", UNARY)
def test_derivative_fuses_with_its_neighbours(name, rng):
    x, _ = inputs(rng, "float32", name)
    cx = ca.tensor(x, requires_grad=True)
    y = call(ca, name, cx * 2.0, {}) * 3.0
    before = counters()["fused_kernels"]
    with ca.compiled_autograd.enable():
        backward_checked(y.sum(), True)
    if name in PIECEWISE_CONSTANT:
        # the derivative is zero by construction, a symbolic zero in the graph: the
        # backward is a zeros node, with nothing to compute or fuse
        assert not np.any(cx.grad.numpy())
        assert counters()["fused_kernels"] == before, f"{name}'s zero derivative was computed"
        return
    assert counters()["fused_kernels"] > before, f"{name}'s derivative was not fused"


@pytest.mark.parametrize("name", [n for n in NAMES if OPS[n][2] & PY_INPLACE])
def test_inplace_true_writes_into_the_input(name):
    """inplace=True: the out-of-place value, written into the input and returned (in the
    autograd graph it is recorded: test_inplace_autograd.py)."""
    x = ca.tensor([-1.5, 0.25, 2.0])
    want = getattr(ca.nn.functional, name)(x.clone())
    got = getattr(ca.nn.functional, name)(x, inplace=True)
    assert got is x and x._version == 1
    assert x.tolist() == want.tolist()


@pytest.mark.parametrize("name", [n for n in NAMES if OPS[n][2] & PY_OUT])
def test_out_is_refused_by_name(name):
    tensors = [ca.ones(3) for p in params(name) if p[0] == "Tensor"]  # atan2's two, ...
    with pytest.raises(NotImplementedError, match=f"{name}.*out="):
        getattr(ca, name)(*tensors, out=ca.ones(3))


@pytest.mark.parametrize("name", UNARY)
def test_wrong_argument_kinds_are_type_errors(name):
    fn = getattr(ca.nn.functional if OPS[name][2] & PY_NN else ca, name)
    with pytest.raises(TypeError, match=f"{name}.*input"):
        fn(3)
    for kind, pname, _, _ in params(name)[1:]:
        if kind in ("float", "int"):
            with pytest.raises(TypeError, match=f"{name}.*'{pname}'"):
                fn(ca.ones(3), **{pname: "x"})
        if kind == "str":
            with pytest.raises(RuntimeError, match=f"{pname}"):
                fn(ca.ones(3), **{pname: "no such choice"})


def test_torch_hardsigmoid_float64_error_is_undone_not_copied():
    """torch's float64 hardsigmoid gradient is g * float32(1/6) (the error that
    helpers.TORCH_GRADIENT_FIXES undoes); cagrad's is g / 6 to float64 precision."""
    tx = torch.tensor([0.5], dtype=torch.float64, requires_grad=True)
    torch.nn.functional.hardsigmoid(tx).sum().backward()
    assert tx.grad.item() == float(np.float32(1 / 6)) != 1 / 6
    cx = ca.tensor([0.5], dtype=ca.float64, requires_grad=True)
    ca.nn.functional.hardsigmoid(cx).sum().backward()
    assert cx.grad.item() == 1 / 6


# Arguments an op refuses: the same exception type as PyTorch, and a message that says why.
BAD_ARGUMENTS = [
    ("celu", {"alpha": 0.0}, "alpha cannot be 0"),
    ("hardtanh", {"min_val": 2.0, "max_val": 1.0}, "min_val cannot be greater than max_val"),
]


@pytest.mark.parametrize("name,kwargs,needle", BAD_ARGUMENTS, ids=[b[0] for b in BAD_ARGUMENTS])
def test_bad_arguments_fail_like_torch(name, kwargs, needle):
    x = np.linspace(-2, 2, 5).astype(np.float32)
    with pytest.raises(Exception) as theirs:
        getattr(torch.nn.functional, name)(torch.tensor(x), **kwargs)
    with pytest.raises(theirs.type, match=needle):
        getattr(ca.nn.functional, name)(ca.tensor(x), **kwargs)
