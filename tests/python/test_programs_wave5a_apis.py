"""The API the wave-5 (A) programs (test_programs_wave5a.py) and their PyTorch relatives
needed that cagrad lacked, against real torch: torch._foreach_* (the multi-tensor ops that
EMA code such as timm's ModelEmaV3 and diffusers' EMAModel, and hand-written optimizers,
call directly): values, dtypes, gradients (float32 and float64, eager and compiled), what
they return, and their errors."""

import numpy as np
import pytest
import torch
from helpers import assert_close, backward_checked, ca, compiled_ctx, error_of

DTYPES = ["float32", "float64"]
SHAPES = [(3,), (2, 4), ()]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "clamp_min", "clamp_max"]
UNARY = ["abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1",
         "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal",
         "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc"]


def arrays(seed, lo=0.1, hi=0.9):
    rng = np.random.default_rng(seed)
    return [rng.uniform(lo, hi, s) for s in SHAPES]


def tensors(L, arrs, dtype, requires_grad=False):
    return [L.tensor(a, dtype=getattr(L, dtype), requires_grad=requires_grad) for a in arrs]


def others(L, kind, dtype):
    """The kinds of `other` torch's binary foreach ops take."""
    if kind == "scalar":
        return 0.75
    if kind == "scalars":
        return [0.5, 2.0, -1.5]
    if kind == "tensor":
        return L.tensor(0.3, dtype=getattr(L, dtype))
    return tensors(L, arrays(7), dtype)


def assert_all_close(c, t, msg=""):
    assert type(c) is type(t) and len(c) == len(t), msg
    for a, b in zip(c, t):
        assert_close(a, b, msg=msg)


# ----------------------------------------------------------------------------- values
@pytest.mark.parametrize("kind", ["scalar", "scalars", "tensor", "tensors"])
@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("dtype", DTYPES)
def test_binary_ops_equal_torch_in_and_out_of_place(dtype, op, kind):
    out = {}
    for L in (ca, torch):
        xs = tensors(L, arrays(1), dtype)
        res = getattr(L, f"_foreach_{op}")(xs, others(L, kind, dtype))
        ret = getattr(L, f"_foreach_{op}_")(xs, others(L, kind, dtype))
        assert ret is xs  # in place: the very list given back
        out[L] = (res, xs)
    assert_all_close(out[ca][0], out[torch][0], f"{op} {kind}")
    assert_all_close(out[ca][1], out[torch][1], f"{op}_ {kind}")


@pytest.mark.parametrize("op, kind", [("add", "tensor"), ("add", "tensors"), ("sub", "tensors")])
def test_alpha_scales_a_tensor_other(op, kind):
    res = {L: getattr(L, f"_foreach_{op}")(tensors(L, arrays(1), "float64"),
                                           others(L, kind, "float64"), alpha=-2.5)
           for L in (ca, torch)}
    assert_all_close(res[ca], res[torch])


@pytest.mark.parametrize("op", UNARY)
@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_ops_equal_torch(dtype, op):
    out = {}
    for L in (ca, torch):
        xs = tensors(L, arrays(2), dtype)
        res = getattr(L, f"_foreach_{op}")(xs)
        getattr(L, f"_foreach_{op}_")(xs)
        out[L] = (res, xs)
    assert_all_close(out[ca][0], out[torch][0], op)
    assert_all_close(out[ca][1], out[torch][1], op + "_")


@pytest.mark.parametrize("weight", ["scalar", "tensor", "tensors", "scalars"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_lerp_equals_torch(dtype, weight):
    def w(L):
        return {"scalar": 0.2, "tensor": L.tensor(0.7, dtype=getattr(L, dtype)),
                "scalars": [0.1, 0.5, 0.9],
                "tensors": tensors(L, arrays(4), dtype)}[weight]

    out = {}
    for L in (ca, torch):
        xs, ends = tensors(L, arrays(1), dtype), tensors(L, arrays(3), dtype)
        res = L._foreach_lerp(xs, ends, w(L))
        key = "weights" if weight == "tensors" else "weight"
        if weight == "tensor":  # no keyword takes a 0-dim tensor: positional only
            assert L._foreach_lerp_(xs, ends, w(L)) is xs
        else:
            assert L._foreach_lerp_(xs, ends, **{key: w(L)}) is xs
        out[L] = (res, xs)
    assert_all_close(out[ca][0], out[torch][0])
    assert_all_close(out[ca][1], out[torch][1])


@pytest.mark.parametrize("value", ["default", "scalar", "scalars", "packed"])
@pytest.mark.parametrize("op", ["addcmul", "addcdiv"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_addcmul_and_addcdiv_equal_torch(dtype, op, value):
    def v(L):
        return {"scalar": {"value": -0.5}, "scalars": {"scalars": [0.5, 2.0, 3.0]},
                "packed": {"scalars": L.tensor([0.5, -2.0, 3.0], dtype=getattr(L, dtype))},
                "default": {}}[value]

    out = {}
    for L in (ca, torch):
        xs, a, b = (tensors(L, arrays(s), dtype) for s in (1, 3, 5))
        res = getattr(L, f"_foreach_{op}")(xs, a, b, *v(L).values())  # positional
        getattr(L, f"_foreach_{op}_")(xs, a, b, **v(L))
        out[L] = (res, xs)
    assert_all_close(out[ca][0], out[torch][0])
    assert_all_close(out[ca][1], out[torch][1])


@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_max_pow_clone_copy_and_zero_equal_torch(dtype):
    out = {}
    for L in (ca, torch):
        xs = tensors(L, arrays(1, -2, 2), dtype)
        ys = tensors(L, arrays(3), dtype)
        res = [L._foreach_norm(xs), L._foreach_norm(xs, 1), L._foreach_norm(xs, float("inf")),
               L._foreach_max(xs), L._foreach_pow(xs, 2), L._foreach_pow(xs, [1, 2, 3]),
               L._foreach_pow(2.0, ys), L._foreach_pow(ys, tensors(L, arrays(4), dtype)),
               L._foreach_clone(xs)]
        assert L._foreach_pow_(ys, 0.5) is ys
        res.append(tuple(ys))
        assert L._foreach_copy_(ys, xs) is ys
        res.append(tuple(ys))
        assert L._foreach_zero_(xs) is xs
        res.append(tuple(xs))
        out[L] = res
    for c, t in zip(out[ca], out[torch]):
        assert_all_close(c, t)


def test_integer_lists_promote_like_torch():
    out = {L: (L._foreach_add([L.tensor([1, 2])], 0.5), L._foreach_mul([L.tensor([1, 2])], 3),
               L._foreach_div([L.tensor([1, 2])], 2), L._foreach_abs([L.tensor([-1, 2])]))
           for L in (ca, torch)}
    for c, t in zip(out[ca], out[torch]):
        assert_all_close(c, t)


# -------------------------------------------------------------------------- gradients
def loss_of(L, op, xs, dtype):
    """A scalar from an out-of-place foreach op over xs (and a second list that needs
    gradients too), weighted so every element's gradient differs."""
    ys = tensors(L, arrays(3), dtype, requires_grad=True)
    if op == "lerp":
        outs = L._foreach_lerp(xs, ys, 0.3)
    elif op in ("addcmul", "addcdiv"):
        outs = getattr(L, f"_foreach_{op}")(xs, ys, tensors(L, arrays(5), dtype), value=0.7)
    elif op in UNARY:
        outs = getattr(L, f"_foreach_{op}")(xs)
    elif op == "norm":
        outs = L._foreach_norm(xs)
    else:
        outs = getattr(L, f"_foreach_{op}")(xs, ys)
    loss = sum(((o * (k + 1.5)) ** 2).sum() for k, o in enumerate(outs))
    return loss, ys


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "lerp", "addcmul",
                                "addcdiv", "sqrt", "exp", "sigmoid", "norm"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gradients_equal_torch(dtype, op, compiled):
    got = {}
    for L in (ca, torch):
        xs = tensors(L, arrays(1), dtype, requires_grad=True)
        loss, ys = loss_of(L, op, xs, dtype)
        if L is ca:
            with compiled_ctx(compiled):
                backward_checked(loss, compiled)
        else:
            loss.backward()
        got[L] = (loss, [x.grad for x in xs], [y.grad for y in ys])
    assert_close(got[ca][0], got[torch][0])
    for c, t in zip(got[ca][1] + got[ca][2], got[torch][1] + got[torch][2]):
        assert_close(c, t)


@pytest.mark.parametrize("op", ["add", "mul", "lerp", "sqrt"])
def test_gradcheck_in_float64(op):
    arrs = [a + 0.5 for a in arrays(1)]

    def f(*xs):
        return loss_of(ca, op, list(xs), "float64")[0]

    assert ca.autograd.gradcheck(f, tuple(tensors(ca, arrs, "float64", requires_grad=True)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_ema_update_with_foreach_lerp_equals_torch(dtype):
    """timm's ModelEmaV3 step: ema params lerp toward the model's under no_grad."""
    out = {}
    for L in (ca, torch):
        L.manual_seed(0)
        model = L.nn.Linear(3, 2).to(getattr(L, dtype))
        with L.no_grad():
            for p, a in zip(model.parameters(), (np.ones((2, 3)) * 0.3, np.arange(2.0))):
                p.copy_(L.tensor(a))
        ema = [p.detach().clone() * 0.5 for p in model.parameters()]
        with L.no_grad():
            for _ in range(3):
                L._foreach_lerp_(ema, list(model.parameters()), 1.0 - 0.9)
        out[L] = ema
    for c, t in zip(out[ca], out[torch]):
        assert_close(c, t)
        assert not c.requires_grad


# ----------------------------------------------------------------------------- errors
ERRORS = {
    "empty": lambda L: L._foreach_add_([], []),
    "lengths": lambda L: L._foreach_add_([L.ones(2), L.ones(3)], [L.ones(2)]),
    "scalar_list": lambda L: L._foreach_mul_([L.ones(2), L.ones(3)], [1.0]),
    "not_0_dim": lambda L: L._foreach_add_([L.ones(2)], L.ones(2)),
    "shapes": lambda L: L._foreach_add([L.ones(2)], [L.ones(3)]),
    "packed_dim": lambda L: L._foreach_addcmul([L.ones(2)], [L.ones(2)], [L.ones(2)],
                                               L.tensor(0.5)),
    "packed_len": lambda L: L._foreach_addcdiv([L.ones(2)], [L.ones(2)], [L.ones(2)],
                                               L.tensor([1.0, 2.0])),
    "leaf_in_place": lambda L: L._foreach_mul_([L.ones(2, requires_grad=True)], 2.0),
    "lerp_lengths": lambda L: L._foreach_lerp_([L.ones(2)], [L.ones(2), L.ones(2)], 0.5),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_match_torch(case):
    c, t = error_of(ca, ERRORS[case]), error_of(torch, ERRORS[case])
    assert t[0] is not None and c[0] is t[0], (c, t)
    if case not in ("leaf_in_place", "shapes"):  # the per-tensor ops' own messages
        assert c[1] == t[1], (c, t)


@pytest.mark.parametrize("call", [lambda L: L._foreach_add(L.ones(2), 1.0),
                                  lambda L: L._foreach_add([L.ones(2)], 1.0, alpha=2),
                                  lambda L: L._foreach_sub([L.ones(2)], L.tensor(1.0), alpha=2),
                                  lambda L: L._foreach_mul([L.ones(2)], [L.ones(2)], alpha=2)])
def test_bad_combinations_are_type_errors_like_torch(call):
    assert error_of(ca, call)[0] is error_of(torch, call)[0] is TypeError


@pytest.mark.parametrize("call", [lambda L: L._foreach_lerp([L.ones(2)], [L.ones(2)], value=0.5),
                                  lambda L: L._foreach_addcmul([L.ones(2)], [L.ones(2)],
                                                               [L.ones(2)], value=[1.0]),
                                  lambda L: L._foreach_lerp([L.ones(2)], [L.ones(2)],
                                                            weight=[L.ones(2)])])
def test_keywords_take_what_torch_takes(call):
    assert error_of(ca, call)[0] is error_of(torch, call)[0] is TypeError


@pytest.mark.parametrize("dtype", DTYPES)
def test_lgamma_of_a_0_dim_tensor_equals_torch(dtype):
    """lgamma of a 0-dim tensor failed ('float' object has no attribute 'astype')."""
    got = {}
    for L in (ca, torch):
        x = L.tensor(2.5, dtype=getattr(L, dtype), requires_grad=True)
        y = L.lgamma(x)
        y.backward()
        got[L] = (y, x.grad, x.detach().lgamma(), x.detach().clone().lgamma_())
    for c, t in zip(got[ca], got[torch]):
        assert_close(c, t)


def test_foreach_ops_cagrad_lacks_point_to_the_docs():
    with pytest.raises(AttributeError, match="docs/python-api.md"):
        ca._foreach_mm  # noqa: B018


# --------------------------------------------------------------- TanhTransform (SAC, flows)
def squashed(L, dtype, loc, scale, cache_size=1):
    D = L.distributions
    base = D.Normal(L.tensor(loc, dtype=dtype, requires_grad=True),
                    L.tensor(scale, dtype=dtype, requires_grad=True))
    return D.TransformedDistribution(base, [D.transforms.TanhTransform(cache_size)]), base


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_tanh_squashed_normal_log_prob_and_gradients_equal_torch(dtype, compiled):
    """SAC's squashed Gaussian policy: log_prob of actions in (-1, 1), summed over the
    action dimensions, and its gradients to the policy's loc and scale."""
    loc, scale = [[0.3, -1.2, 2.0], [0.0, 0.5, -0.4]], [[0.5, 1.5, 0.8], [1.0, 0.2, 2.0]]
    actions = [[0.2, -0.9, 0.99], [-0.5, 0.1, 0.0]]
    got = {}
    for L in (ca, torch):
        dist, base = squashed(L, getattr(L, dtype), loc, scale)
        lp = dist.log_prob(L.tensor(actions, dtype=getattr(L, dtype))).sum(-1)
        loss = (lp * L.tensor([1.0, -2.0], dtype=getattr(L, dtype))).sum()
        if L is ca:
            with compiled_ctx(compiled):
                backward_checked(loss, compiled)
        else:
            loss.backward()
        got[L] = (lp, base.loc.grad, base.scale.grad)  # loc and scale are the leaves
    for c, t in zip(got[ca], got[torch]):
        assert_close(c, t)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tanh_transform_forward_inverse_and_jacobian_equal_torch(dtype):
    x = np.array([-30.0, -3.0, -0.5, 0.0, 0.7, 4.0, 30.0])  # +-30: tanh rounds to +-1
    got = {}
    for L in (ca, torch):
        T = L.distributions.transforms
        t = T.TanhTransform()
        xt = L.tensor(x, dtype=getattr(L, dtype), requires_grad=True)
        y = t(xt)
        ladj = t.log_abs_det_jacobian(xt, y)
        ladj.sum().backward()
        inner = L.tensor(x[1:-1], dtype=getattr(L, dtype))
        composed = T.ComposeTransform([T.AffineTransform(0.5, 2.0), T.TanhTransform()])
        cy = composed(inner)
        got[L] = (y, ladj, xt.grad, t.inv(t(inner)), composed.log_abs_det_jacobian(inner, cy),
                  composed.inv(cy))
    for c, t in zip(got[ca], got[torch]):
        assert_close(c, t)
    assert np.all(np.isfinite(got[ca][1].detach().numpy()))  # no log(0) at +-30


def test_tanh_transform_cache_and_attributes_match_torch():
    for L in (ca, torch):
        T = L.distributions.transforms
        t = T.TanhTransform(cache_size=1)
        x = L.tensor([30.0, -0.3])
        y = t(x)
        assert t.inv(y) is x  # cached: atanh(1.0) would be inf
        assert T.TanhTransform() == T.TanhTransform() and T.TanhTransform() != T.ExpTransform()
        assert t.bijective and t.sign == 1 and t.event_dim == 0
        assert isinstance(T.TanhTransform().with_cache(1), T.TanhTransform)
        assert L.distributions.TanhTransform is T.TanhTransform
        assert L.distributions.SigmoidTransform is T.SigmoidTransform
        inside = t.codomain.check(L.tensor([-1.0, 0.0, 0.9, 1.0, 1.5])).tolist()
        assert inside == [True, True, True, True, False]
        assert not L.isfinite(T.TanhTransform().inv(L.tensor([1.0]))).item()  # no clamping


def test_tanh_squashed_log_prob_gradcheck():
    def f(loc, scale):
        base = ca.distributions.Normal(loc, scale)
        dist = ca.distributions.TransformedDistribution(
            base, [ca.distributions.transforms.TanhTransform()])
        return dist.log_prob(ca.tensor([0.3, -0.8, 0.95], dtype=ca.float64))

    loc = ca.tensor([0.1, -0.5, 1.0], dtype=ca.float64, requires_grad=True)
    scale = ca.tensor([0.7, 1.3, 0.4], dtype=ca.float64, requires_grad=True)
    assert ca.autograd.gradcheck(f, (loc, scale))


# -------------------------------------------- broadcast_tensors hands back unexpanded inputs
def test_broadcast_tensors_returns_inputs_already_of_the_shape_like_torch():
    for L in (ca, torch):
        a, b = L.zeros(2, 3, requires_grad=True), L.ones(3)
        ra, rb = L.broadcast_tensors(a, b)
        assert ra is a and rb is not b and tuple(rb.shape) == (2, 3)
        (ra * rb).sum().backward()
        assert a.grad is not None


@pytest.mark.parametrize("make", [lambda L, x, s: L.distributions.Normal(x, s),
                                  lambda L, x, s: L.distributions.Normal(x, 1.0),
                                  lambda L, x, s: L.distributions.Uniform(x - 1, s + 2)])
def test_distribution_parameters_are_the_tensors_given_like_torch(make):
    """Normal(loc, scale).loc is loc (a leaf whose .grad fills), as in torch."""
    got = {}
    for L in (ca, torch):
        x = L.tensor([0.3, -0.2], dtype=L.float64, requires_grad=True)
        s = L.tensor([0.5, 1.5], dtype=L.float64, requires_grad=True)
        d = make(L, x, s)
        params = [getattr(d, k) for k in ("loc", "scale", "low", "high") if hasattr(d, k)]
        d.log_prob(L.tensor([0.1, 0.4], dtype=L.float64)).sum().backward()
        got[L] = ([p is x or p is s for p in params], [p.is_leaf for p in params], x.grad)
    assert got[ca][0] == got[torch][0] and got[ca][1] == got[torch][1]
    assert_close(got[ca][2], got[torch][2])
