"""torch's type promotion between float32 and float64 (and int64 or bool beside a float), as
torch 2.13 gives it: the result dtype of the binary ops (a tensor with dims outranks a 0-d
tensor of the same category, a higher category always wins), their values, and each input's
gradient in its own dtype, eager and under compiled autograd; in-place ops that cast the
promoted result into self (and torch's error where they may not); the losses with a target
of the other float dtype; cagrad.result_type / promote_types / can_cast; the unary ops torch
refuses on bool tensors; and the matrix products, which refuse mixed dtypes."""

import itertools

import re

import numpy as np
import pytest
import torch

from helpers import TOL_SUM, assert_close, backward_checked, ca, compiled_ctx, outcome
from helpers import same_outcome

RNG = np.random.default_rng(18)
LEFT = RNG.uniform(0.5, 1.5, (2, 3))
RIGHT = RNG.uniform(0.5, 1.5, (2, 3))
# shape pairs: dims beside dims, dims beside 0-d (both ways), 0-d beside 0-d, broadcasting
SHAPES = [((2, 3), (2, 3)), ((2, 3), ()), ((), (2, 3)), ((), ()), ((2, 1), (3,))]
FLOAT_PAIRS = [("float32", "float64"), ("float64", "float32")]


def name(dtype):
    return str(dtype).split(".")[-1]


def operand(L, values, shape, dtype, requires_grad=False):
    data = values.reshape(-1)[:int(np.prod(shape))].reshape(shape)
    if dtype == "int64":
        data = np.round(data * 3)
    elif dtype == "bool":
        data = data > 1.0
    return L.tensor(data, dtype=getattr(L, dtype), requires_grad=requires_grad)


# name -> f(L, a, b): every entry point of a binary op with two tensors
BINARY = {
    "add": lambda L, a, b: a + b,
    "radd": lambda L, a, b: a.__radd__(b),
    "sub": lambda L, a, b: a - b,
    "rsub": lambda L, a, b: a.__rsub__(b),
    "sub_alpha": lambda L, a, b: L.sub(a, b, alpha=2),
    "mul": lambda L, a, b: a * b,
    "rmul": lambda L, a, b: a.__rmul__(b),
    "div": lambda L, a, b: a / b,
    "true_divide": lambda L, a, b: L.true_divide(a, b),
    "pow": lambda L, a, b: a ** b,
    "rpow": lambda L, a, b: a.__rpow__(b),
    "torch_pow": lambda L, a, b: L.pow(a, b),
    "maximum": lambda L, a, b: L.maximum(a, b),
    "minimum": lambda L, a, b: L.minimum(a, b),
    "max_other": lambda L, a, b: L.max(a, b),
    "min_other": lambda L, a, b: a.min(b),
    "atan2": lambda L, a, b: L.atan2(a, b),
    "hypot": lambda L, a, b: L.hypot(a, b),
    "fmod": lambda L, a, b: L.fmod(a, b),
    "remainder": lambda L, a, b: a % b,
    "copysign": lambda L, a, b: L.copysign(a, -b),
    "logaddexp": lambda L, a, b: L.logaddexp(a, b),
    "logaddexp2": lambda L, a, b: L.logaddexp2(a, b),
    "xlogy": lambda L, a, b: L.xlogy(a, b),
    "where": lambda L, a, b: L.where(a > 1.0, a, b),
    "clamp_min": lambda L, a, b: L.clamp(a, min=b),
    "clamp_max": lambda L, a, b: a.clamp(max=b),
    "addcmul": lambda L, a, b: L.addcmul(a, b, b, value=0.5),
    "addcdiv": lambda L, a, b: L.addcdiv(a, a, b),
}
# ops torch gives no gradient (or a zero one): values and dtypes only
NO_GRAD = {
    "floor_divide": lambda L, a, b: a // b,
    "div_floor": lambda L, a, b: L.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda L, a, b: L.div(a, b, rounding_mode="trunc"),
}


def run_binary(L, f, dtypes, shapes, compiled=False, promote_first=False):
    """(result, a.grad, b.grad) of f on two operands of the given dtypes and shapes;
    promote_first: both converted to their result dtype by a differentiable .to() first."""
    a = operand(L, LEFT, shapes[0], dtypes[0], requires_grad=True)
    b = operand(L, RIGHT, shapes[1], dtypes[1], requires_grad=True)
    if promote_first:
        common = L.result_type(a, b)
        out = f(L, a.to(common), b.to(common))
    else:
        out = f(L, a, b)
    weights = L.tensor(np.arange(1.0, 1.0 + out.numel()).reshape(out.shape), dtype=out.dtype)
    with compiled_ctx(compiled):
        backward_checked((out * weights).sum(), compiled)
    return out, a.grad, b.grad


def check(got, want, precision=None):
    """Same dtype, and values within TOL_SUM of `precision` (the dtype the values were
    computed in; default: their own); int64 and bool exactly."""
    if want is None:  # no gradient (an input that does not require one)
        assert got is None
        return
    assert name(got.dtype) == name(want.dtype)
    tolerance = TOL_SUM.get(precision or name(want.dtype), dict(rtol=0, atol=0))
    assert_close(got, want, **tolerance)


def coarser(*dtypes):
    return "float32" if "float32" in dtypes else "float64"


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtypes", FLOAT_PAIRS, ids="-".join)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_ops_promote_float32_beside_float64(op, shapes, dtypes, compiled):
    got = run_binary(ca, BINARY[op], dtypes, shapes, compiled)
    # torch's own mixed call: the result dtype, and each gradient in its input's dtype.
    # Its backward formulas multiply the saved float32 operand in float32 (div's other *
    # other, atan2's self * self, addcdiv's value / tensor2), so its gradients are only
    # float32-accurate, even those of the float64 operand: compared at float32's tolerance.
    mixed = run_binary(torch, BINARY[op], dtypes, shapes)
    check(got[0], mixed[0])
    for g, w, dtype in zip(got[1:], mixed[1:], dtypes):
        assert name(w.dtype) == dtype
        check(g, w, "float32")
    # the exact reference: torch on operands promoted first (what cagrad computes), each
    # gradient as accurate as the coarser of its own dtype and the result's
    exact = run_binary(torch, BINARY[op], dtypes, shapes, promote_first=True)
    result = name(exact[0].dtype)
    check(got[0], exact[0])
    for g, w, dtype in zip(got[1:], exact[1:], dtypes):
        check(g, w, coarser(dtype, result))


def run_values(L, f, dtypes, shapes):
    with torch.no_grad():
        return f(L, operand(L, LEFT, shapes[0], dtypes[0]), operand(L, RIGHT, shapes[1],
                                                                        dtypes[1]))


# int64 or bool beside a float: the float's dtype, whichever has dims
MIXED = [("int64", "float64"), ("int64", "float32"), ("float64", "int64"),
         ("bool", "float64"), ("float32", "bool")]


@pytest.mark.parametrize("dtypes", FLOAT_PAIRS + MIXED, ids="-".join)
@pytest.mark.parametrize("shapes", SHAPES[:4], ids=str)
@pytest.mark.parametrize("op", sorted(set(BINARY) | set(NO_GRAD)))
def test_result_dtype_and_values_like_torch(op, shapes, dtypes):
    f = BINARY.get(op) or NO_GRAD[op]
    c, t = outcome(lambda: run_values(ca, f, dtypes, shapes)), outcome(
        lambda: run_values(torch, f, dtypes, shapes))
    if t[0] != "ok" or c[0] != "ok":  # bools in a subtraction: torch's error
        assert c == t
        return
    check(run_values(ca, f, dtypes, shapes), run_values(torch, f, dtypes, shapes))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("op", ["div_floor", "div_trunc"])
def test_rounded_division_gives_zero_gradients_in_each_dtype(op, compiled):
    grads = {}
    for L in (ca, torch):
        a = operand(L, LEFT, (2, 3), "float32", requires_grad=True)
        b = operand(L, RIGHT, (2, 3), "float64", requires_grad=True)
        with compiled_ctx(compiled and L is ca):
            NO_GRAD[op](L, a, b).sum().backward()
        grads[L] = (a.grad, b.grad)
    for g, w in zip(grads[ca], grads[torch]):
        check(g, w)


INPUTS = np.random.default_rng(7).uniform(size=(4, 3))
TARGETS = np.random.default_rng(8).uniform(-1, 1, (4, 2))  # numpy's float64


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_float32_model_output_against_a_numpy_float64_target(compiled):
    """The case that motivates the promotion: from_numpy makes float64 targets."""
    results = {}
    for L in (ca, torch):
        layer = L.nn.Linear(3, 2)
        with L.no_grad():
            layer.weight.copy_(L.tensor(LEFT))
            layer.bias.fill_(0.25)
        out = layer(L.tensor(INPUTS, dtype=L.float32))
        loss = ((out - L.from_numpy(TARGETS)) ** 2).mean()
        with compiled_ctx(compiled and L is ca):
            loss.backward()
        results[L] = (loss, layer.weight.grad, layer.bias.grad)
    assert name(results[ca][0].dtype) == "float64"
    for g, w in zip(results[ca], results[torch]):
        check(g, w, "float32")  # the layer's output is float32: so is the loss's accuracy


@pytest.mark.parametrize("make", [
    lambda L, x: x + np.asarray(RIGHT),  # numpy's float64 array: a tensor with dims
    lambda L, x: x * np.float64(0.5),  # a numpy scalar: a Python number
    lambda L, x: x - np.asarray(RIGHT, dtype=np.float32),
    lambda L, x: x.double() / np.asarray(0.5, dtype=np.float32),  # a 0-d array: a number
], ids=["array64", "scalar64", "array32", "0d_array32"])
def test_numpy_operands_promote_like_torch(make):
    # values and dtypes only: torch turns a tensor that requires grad into an array here
    check(make(ca, ca.tensor(LEFT, dtype=ca.float32)),
          make(torch, torch.tensor(LEFT, dtype=torch.float32)))


# ---------------------------------------------------------------------------- in place
INPLACE = {
    "add_": lambda a, b: a.add_(b),
    "add_alpha": lambda a, b: a.add_(b, alpha=-0.5),
    "sub_": lambda a, b: a.sub_(b),
    "mul_": lambda a, b: a.mul_(b),
    "div_": lambda a, b: a.div_(b),
    "iadd": lambda a, b: a.__iadd__(b),
    "isub": lambda a, b: a.__isub__(b),
    "sub_alpha": lambda a, b: a.sub_(b, alpha=2),
    "imul": lambda a, b: a.__imul__(b),
    "itruediv": lambda a, b: a.__itruediv__(b),
    "imod": lambda a, b: a.__imod__(b),
    "copy_": lambda a, b: a.copy_(b),
    "atan2_": lambda a, b: a.atan2_(b),
    "fmod_": lambda a, b: a.fmod_(b),
    "hypot_": lambda a, b: a.hypot_(b),
    "xlogy_": lambda a, b: a.xlogy_(b),
    "clamp_": lambda a, b: a.clamp_(min=b),
    "lerp_": lambda a, b: a.lerp_(a.clone(), b.sum()),
    "addcmul_": lambda a, b: a.addcmul_(b, b),
    "addcdiv_": lambda a, b: a.addcdiv_(b, b),
    "masked_fill_": lambda a, b: a.masked_fill_(a > 1.0, b.sum()),
}
INPLACE_DTYPES = FLOAT_PAIRS + [("int64", "float32"), ("int64", "float64"),
                                ("bool", "float32"), ("float32", "int64"),
                                ("float64", "bool")]


def run_inplace(L, f, dtypes, other_shape):
    a = operand(L, LEFT, (2, 3), dtypes[0])
    b = operand(L, RIGHT, other_shape, dtypes[1])
    result = f(a, b)
    assert result is a
    return a


@pytest.mark.parametrize("other_shape", [(2, 3), ()], ids=str)
@pytest.mark.parametrize("dtypes", INPLACE_DTYPES, ids="-".join)
@pytest.mark.parametrize("op", sorted(INPLACE))
def test_inplace_ops_cast_the_promoted_result_into_self(op, dtypes, other_shape):
    c = outcome(lambda: run_inplace(ca, INPLACE[op], dtypes, other_shape))
    t = outcome(lambda: run_inplace(torch, INPLACE[op], dtypes, other_shape))
    if t[0] != "ok":  # a float result into int64 or bool: torch's error, same message
        assert c == t
        return
    got = run_inplace(ca, INPLACE[op], dtypes, other_shape)
    want = run_inplace(torch, INPLACE[op], dtypes, other_shape)
    assert name(got.dtype) == dtypes[0]
    check(got, want)


def test_inplace_refusal_message_is_torchs():
    same_outcome(lambda L: L.tensor([1, 2]).add_(L.tensor([0.5, 0.5])))
    with pytest.raises(RuntimeError, match="result type Double can't be cast to the desired "
                                           "output type Long"):
        ca.tensor([1, 2]).mul_(ca.tensor(0.5, dtype=ca.float64))


# ---------------------------------------------------------------------------- losses
LOSSES = {
    "mse_loss": lambda F, x, y: F.mse_loss(x, y),
    "mse_none": lambda F, x, y: F.mse_loss(x, y, reduction="none"),
    "l1_loss": lambda F, x, y: F.l1_loss(x, y, reduction="sum"),
    "smooth_l1_loss": lambda F, x, y: F.smooth_l1_loss(x, y, beta=0.3),
    "kl_div": lambda F, x, y: F.kl_div(x, y, reduction="batchmean"),
    "kl_div_log_target": lambda F, x, y: F.kl_div(x, y, reduction="sum", log_target=True),
    "bce_with_logits": lambda F, x, y: F.binary_cross_entropy_with_logits(x, y),
    "bce_with_logits_none": lambda F, x, y: F.binary_cross_entropy_with_logits(
        x, y, reduction="none"),
    "cosine_similarity": lambda F, x, y: F.cosine_similarity(x, y, dim=-1),
    "pairwise_distance": lambda F, x, y: F.pairwise_distance(x, y),
}


def run_loss(L, loss, dtypes, compiled=False, target_grad=True, promote_first=False):
    x = operand(L, LEFT, (2, 3), dtypes[0], requires_grad=True)
    y = operand(L, RIGHT / 2, (2, 3), dtypes[1], requires_grad=target_grad)
    if promote_first:
        common = L.result_type(x, y)
        out = loss(L.nn.functional, x.to(common), y.to(common))
    else:
        out = loss(L.nn.functional, x, y)
    with compiled_ctx(compiled):
        backward_checked(out.sum(), compiled)
    return out, x.grad, y.grad


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtypes", FLOAT_PAIRS, ids="-".join)
@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_losses_with_a_target_of_the_other_float_dtype(loss, dtypes, compiled):
    got = run_loss(ca, LOSSES[loss], dtypes, compiled)
    # torch's mixed call: dtypes, and values as accurate as its float32 operand allows
    # (its backward formulas compute with the float32 operand in float32)
    mixed = run_loss(torch, LOSSES[loss], dtypes)
    for g, w in zip(got, mixed):
        check(g, w, "float32")
    if loss.startswith(("bce", "cosine", "kl_div")):
        # torch computes these in parts: the target's terms (xlogy(t, t), exp(t)) and each
        # norm in its own dtype, bce's result in the target's; cagrad does the same
        return
    exact = run_loss(torch, LOSSES[loss], dtypes, promote_first=True)
    result = name(exact[0].dtype)
    check(got[0], exact[0])
    for g, w, dtype in zip(got[1:], exact[1:], dtypes):
        check(g, w, coarser(dtype, result))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtypes", FLOAT_PAIRS, ids="-".join)
def test_soft_margin_loss_stays_in_the_input_dtype(dtypes, compiled):
    def loss(F, x, y):
        return F.soft_margin_loss(x, y * 2 - 1)
    got = run_loss(ca, loss, dtypes, compiled, target_grad=False)
    want = run_loss(torch, loss, dtypes, target_grad=False)
    assert name(got[0].dtype) == dtypes[0]
    for g, w in zip(got, want):
        check(g, w, "float32")  # the product is rounded to float32 for one of the pairs


@pytest.mark.parametrize("dtypes", FLOAT_PAIRS, ids="-".join)
def test_binary_cross_entropy_refuses_a_target_of_another_dtype(dtypes):
    same_outcome(lambda L: L.nn.functional.binary_cross_entropy(
        operand(L, LEFT / 2, (2, 3), dtypes[0]), operand(L, RIGHT / 2, (2, 3), dtypes[1])))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtypes", FLOAT_PAIRS, ids="-".join)
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted"])
def test_huber_loss_computes_in_the_input_dtype_and_refuses_its_backward(dtypes, compiled,
                                                                          weighted):
    results = {}
    for L in (ca, torch):
        x = operand(L, LEFT, (2, 3), dtypes[0], requires_grad=True)
        y = operand(L, RIGHT, (2, 3), dtypes[1])
        weight = L.full((2, 3), 1.5, dtype=getattr(L, dtypes[0])) if weighted else None
        out = L.nn.functional.huber_loss(x, y, delta=0.4, weight=weight)  # no error yet
        with compiled_ctx(compiled and L is ca):
            results[L] = (out, outcome(out.backward))
    check(results[ca][0], results[torch][0])
    assert results[ca][1] == results[torch][1]
    assert results[ca][1][0] == "RuntimeError"


# ---------------------------------------------------------------------------- lerp, isclose
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3), ()), ((), (), ()), ((2, 3), (), ())],
                         ids=str)
@pytest.mark.parametrize("dtypes", [("float32", "float32", "float64"),
                                    ("float64", "float64", "float32"),
                                    ("bool", "bool", "float64")], ids="-".join)
def test_lerp_promotes_a_0d_weight(shapes, dtypes):
    def make(L):
        a, b, w = (operand(L, v, s, d) for v, s, d in zip((LEFT, RIGHT, RIGHT / 2), shapes,
                                                           dtypes))
        return L.lerp(a, b, w)
    check(make(ca), make(torch))


@pytest.mark.parametrize("dtypes,shapes", [
    (("float32", "float64", "float32"), ((2, 3), (2, 3), ())),
    (("float64", "float32", "float64"), ((), (), ())),
    (("int64", "float32", "int64"), ((2, 3), (), ())),
    (("float32", "float32", "float64"), ((2, 3), (2, 3), (2, 3))),
    (("float32", "float32", "float64"), ((), (), (3,))),
], ids=str)
def test_lerp_errors_like_torch(dtypes, shapes):
    same_outcome(lambda L: L.lerp(*(operand(L, LEFT, s, d) for s, d in zip(shapes, dtypes))))


@pytest.mark.parametrize("dtypes", FLOAT_PAIRS + [("int64", "float32"), ("bool", "float64")],
                         ids="-".join)
def test_isclose_refuses_two_dtypes_like_torch(dtypes):
    same_outcome(lambda L: L.isclose(operand(L, LEFT, (3,), dtypes[0]),
                                     operand(L, LEFT, (3,), dtypes[1])))
    same_outcome(lambda L: L.allclose(operand(L, LEFT, (3,), dtypes[0]),
                                      operand(L, LEFT, (3,), dtypes[1])))


# ---------------------------------------------------------------------------- result_type
DTYPES = ["bool", "int64", "float32", "float64"]


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((3,), ()), ((), (3,)), ((), ())], ids=str)
@pytest.mark.parametrize("dtypes", list(itertools.product(DTYPES, DTYPES)), ids="-".join)
def test_result_type_of_two_tensors(dtypes, shapes):
    def make(L):
        return L.result_type(*(operand(L, LEFT, s, d) for s, d in zip(shapes, dtypes)))
    assert name(make(ca)) == name(make(torch))


@pytest.mark.parametrize("number", [True, 3, 2.5])
@pytest.mark.parametrize("shape", [(3,), ()], ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_result_type_with_a_python_number(dtype, shape, number):
    for L in (ca, torch):
        assert name(L.result_type(operand(L, LEFT, shape, dtype), number)) == name(
            torch.result_type(operand(torch, LEFT, shape, dtype), number))
        assert name(L.result_type(number, operand(L, LEFT, shape, dtype))) == name(
            torch.result_type(number, operand(torch, LEFT, shape, dtype)))


@pytest.mark.parametrize("numbers", list(itertools.product([True, 3, 2.5], repeat=2)), ids=str)
def test_result_type_of_two_numbers(numbers):
    assert name(ca.result_type(*numbers)) == name(torch.result_type(*numbers))


def test_result_type_follows_the_default_dtype():
    ca.set_default_dtype(ca.float64)
    try:
        assert ca.result_type(ca.tensor([1, 2]), 0.5) is ca.float64
        assert ca.result_type(ca.tensor([True]), 1.5) is ca.float64
    finally:
        ca.set_default_dtype(ca.float32)


def test_result_type_refuses_what_is_no_tensor_or_number():
    with pytest.raises(TypeError, match="complex"):
        ca.result_type(ca.ones(2), 1j)
    with pytest.raises(TypeError):
        ca.result_type(ca.ones(2), "x")


@pytest.mark.parametrize("dtypes", list(itertools.product(DTYPES, DTYPES)), ids="-".join)
def test_promote_types_and_can_cast(dtypes):
    d1, d2 = dtypes
    got = ca.promote_types(getattr(ca, d1), getattr(ca, d2))
    assert name(got) == name(torch.promote_types(getattr(torch, d1), getattr(torch, d2)))
    assert ca.can_cast(getattr(ca, d1), getattr(ca, d2)) == torch.can_cast(
        getattr(torch, d1), getattr(torch, d2))


def test_promote_types_refuses_what_is_no_dtype():
    with pytest.raises(TypeError):
        ca.promote_types(ca.float32, "float64")


# ---------------------------------------------------------------------------- bool unary
TORCH_UNARY = ["abs", "absolute", "frac", "floor", "ceil", "round", "trunc", "fix", "neg",
               "negative", "relu", "celu", "selu"]
NN_UNARY = ["elu", "gelu", "silu", "softplus", "leaky_relu", "logsigmoid", "mish",
            "hardswish", "hardsigmoid", "softsign", "hardtanh", "relu6", "relu"]


@pytest.mark.parametrize("op", TORCH_UNARY)
def test_unary_ops_refuse_bools_like_torch(op):
    same_outcome(lambda L: getattr(L, op)(L.tensor([True, False])))
    same_outcome(lambda L: getattr(L.tensor([True, False]), op)())


@pytest.mark.parametrize("op", NN_UNARY)
def test_nn_functional_activations_refuse_bools_like_torch(op):
    same_outcome(lambda L: getattr(L.nn.functional, op)(L.tensor([True, False])))


@pytest.mark.parametrize("make", [
    lambda L: abs(L.tensor([True, False])),
    lambda L: +L.tensor([True, False]),
    lambda L: L.tensor([True, False]).abs_(),
    lambda L: L.norm(L.tensor([True, False])),
    lambda L: L.norm(L.tensor([1, 2])),
], ids=["abs()", "pos", "abs_", "norm_bool", "norm_int64"])
def test_more_bool_refusals_like_torch(make):
    same_outcome(make)


@pytest.mark.parametrize("op", ["isinf", "isfinite", "isnan"])
@pytest.mark.parametrize("dtype", ["bool", "int64"])
def test_inf_checks_of_bool_and_int64_tensors(op, dtype):
    def make(L):
        return getattr(L, op)(operand(L, LEFT, (2, 3), dtype))
    check(make(ca), make(torch))


# ---------------------------------------------------------------------------- matrix products
MATRIX = {
    "matmul": lambda L, f, d: L.matmul(L.ones(2, 3, dtype=f), L.ones(3, 2, dtype=d)),
    "mm": lambda L, f, d: L.mm(L.ones(2, 3, dtype=f), L.ones(3, 2, dtype=d)),
    "bmm": lambda L, f, d: L.bmm(L.ones(1, 2, 3, dtype=f), L.ones(1, 3, 2, dtype=d)),
    "matvec": lambda L, f, d: L.ones(2, 3, dtype=f) @ L.ones(3, dtype=d),
    "linear": lambda L, f, d: L.nn.functional.linear(L.ones(2, 3, dtype=f),
                                                     L.ones(4, 3, dtype=d)),
    "linear_bias": lambda L, f, d: L.nn.functional.linear(
        L.ones(2, 3, dtype=f), L.ones(4, 3, dtype=f), L.ones(4, dtype=d)),
    "conv2d": lambda L, f, d: L.nn.functional.conv2d(L.ones(1, 1, 4, 4, dtype=f),
                                                     L.ones(1, 1, 2, 2, dtype=d)),
    "conv2d_bias": lambda L, f, d: L.nn.functional.conv2d(
        L.ones(1, 1, 4, 4, dtype=f), L.ones(1, 1, 2, 2, dtype=f), L.ones(1, dtype=d)),
}


@pytest.mark.parametrize("dtypes", FLOAT_PAIRS, ids="-".join)
@pytest.mark.parametrize("op", sorted(MATRIX))
def test_matrix_products_refuse_mixed_float_dtypes(op, dtypes):
    def make(L):
        return MATRIX[op](L, getattr(L, dtypes[0]), getattr(L, dtypes[1]))
    want = outcome(lambda: make(torch))
    assert want[0] == "RuntimeError"
    kind, message = outcome(lambda: make(ca))
    assert kind == "RuntimeError"
    if op in ("matmul", "mm", "linear"):  # torch's own words
        assert message == want[1]
    else:  # both dtypes named, in torch's C spelling or cagrad's
        assert re.search(r"float32|\bfloat\b", message) and re.search(r"float64|double", message)

