"""cagrad.autograd.gradcheck and gradgradcheck against torch 2.13's: the same verdict on
the same functions (ops and compositions in float64, custom Functions with a correct, a
wrong and a once-differentiable backward), the same error types and messages, and the
same module layout. cagrad runs every case eagerly and under compiled autograd."""

import re
import warnings

import numpy as np
import pytest
import torch

import cagrad
from cagrad.autograd.gradcheck import GradcheckError
from helpers import compiled_ctx, counters, needs_cagrad

pytestmark = needs_cagrad

RNG = np.random.default_rng(16)
A34, B43, C4 = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 3)), RNG.standard_normal(4)
IMG, KER = RNG.standard_normal((1, 2, 5, 5)), RNG.standard_normal((3, 2, 3, 3))
W1, B1, W2 = RNG.standard_normal((5, 4)), RNG.standard_normal(5), RNG.standard_normal((2, 5))


def leaf(L, a, requires_grad=True):
    return L.tensor(a, dtype=L.float64, requires_grad=requires_grad)


# ---------------------------------------------------------------------------------------
# Functions that pass: (inputs maker, function), each written once against torch's API
# ---------------------------------------------------------------------------------------
def mlp(L):
    F = L.nn.functional
    return ((leaf(L, A34), leaf(L, W1), leaf(L, B1), leaf(L, W2)),
            lambda x, w1, b1, w2: F.linear(L.tanh(F.linear(x, w1, b1)), w2))


def conv(L):
    return ((leaf(L, IMG), leaf(L, KER)),
            lambda x, k: L.nn.functional.conv2d(x, k, padding=1, stride=2))


def layer_norm(L):
    return ((leaf(L, A34), leaf(L, C4), leaf(L, C4 * 0.5)),
            lambda x, w, b: L.nn.functional.layer_norm(x, (4,), w, b))


def softmax(L):
    return (leaf(L, A34),), lambda x: L.softmax(x * 1.5, dim=1)


def matmul(L):
    return (leaf(L, A34), leaf(L, B43)), lambda a, b: a @ b


def cube_function(L, double_backward_right=True):
    """x^3 as a custom Function; its backward is differentiable unless asked not to be (a
    detached x: the first derivative is right, the second is not)."""
    class Cube(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            x = x if double_backward_right else x.detach()
            return g * 3 * x * x

    return Cube


def custom(L):
    cube = cube_function(L)
    return (leaf(L, A34),), lambda x: cube.apply(x) * 2


def several_outputs_and_mixed_inputs(L):
    # a float passed through, an input without requires_grad, an input the second output
    # does not use (a zero block of the Jacobian), two outputs
    return ((leaf(L, A34), 0.5, leaf(L, B43, requires_grad=False), leaf(L, C4)),
            lambda x, s, c, v: ((x @ c).sin() * s, L.exp(x * v).sum(0)))


PASSING = [mlp, conv, layer_norm, softmax, matmul, custom, several_outputs_and_mixed_inputs]


def verdicts(check, case, compiled, **kw):
    out = []
    for L in (cagrad, torch):
        inputs, fn = case(L)
        with compiled_ctx(compiled and L is cagrad):
            out.append(getattr(L.autograd, check)(fn, inputs, **kw))
    return out


@pytest.mark.parametrize("fast", [False, True], ids=["slow", "fast"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("check", ["gradcheck", "gradgradcheck"])
@pytest.mark.parametrize("case", PASSING, ids=lambda c: c.__name__)
def test_correct_gradients_pass(case, check, compiled, fast):
    before = counters()
    assert verdicts(check, case, compiled, fast_mode=fast) == [True, True]
    ran = {k: v - before[k] for k, v in counters().items()}
    # compiled: the vjps went through compiled graphs (at least the first-order ones;
    # gradgradcheck's create_graph backwards may also run eagerly, as eager_fallbacks)
    assert (ran["captures"] + ran["cache_hits"] > 0) == compiled, ran


# ---------------------------------------------------------------------------------------
# Functions that fail
# ---------------------------------------------------------------------------------------
def wrong_backward(L, output=0):
    """y = (2 x, x * w) whose backward gets d y[output] / d w wrong: 0.5 diag(x) instead
    of 0 for output 0, 1.5 diag(x) instead of diag(x) for output 1."""
    class Pair(L.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return x * 2, x * w

        @staticmethod
        def backward(ctx, g0, g1):
            x, w = ctx.saved_tensors
            bad = 1.5 if output == 1 else 1.0
            gw = g1 * x * bad + (g0 * x * 0.5 if output == 0 else 0)
            return g0 * 2 + g1 * w, gw

    return (leaf(L, C4), leaf(L, C4 * 0.3)), lambda x, w: Pair.apply(x, w)


def failure(L, check, case, compiled=False, **kw):
    inputs, fn = case(L)
    with compiled_ctx(compiled and L is cagrad):
        try:
            return getattr(L.autograd, check)(fn, inputs, **kw)
        except Exception as e:  # noqa: BLE001 - compared with torch's
            return e


@pytest.mark.parametrize("fast", [False, True], ids=["slow", "fast"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("output", [0, 1])
def test_a_wrong_backward_names_the_output_and_input(output, compiled, fast):
    def case(L):
        return wrong_backward(L, output)

    got, want = (failure(L, "gradcheck", case, compiled, fast_mode=fast)
                 for L in (cagrad, torch))
    assert type(want).__name__ == "GradcheckError"
    assert isinstance(got, GradcheckError)
    assert isinstance(got, RuntimeError)
    assert str(got).splitlines()[0] == str(want).splitlines()[0]
    assert str(got).splitlines()[0] == (f"Jacobian mismatch for output {output} with respect "
                                        "to input 1,")
    for part in ("\nnumerical:tensor(", "\nanalytical:tensor("):  # fast mode: floats
        assert (part in str(got)) == (part in str(want))
    for L in (cagrad, torch):
        assert failure(L, "gradcheck", case, compiled, raise_exception=False,
                       fast_mode=fast) is False


def test_fast_mode_failure_shows_the_pairs_full_jacobians():
    text = str(failure(cagrad, "gradcheck", lambda L: wrong_backward(L, 1), fast_mode=True))
    head, slow = text.split("\nNumerical:\n")
    assert re.match(r"Jacobian mismatch for output 1 with respect to input 1,\n"
                    r"numerical:-?[0-9.e+-]+\n", head)  # the fast-mode scalar v^T J u, as torch
    numerical, analytical = slow.split("\nAnalytical:\n")
    for block, want in ((numerical, np.diag(C4)), (analytical.split("\n\n")[0],
                                                   1.5 * np.diag(C4))):
        values = [float(v) for v in re.findall(r"-?\d+\.\d*(?:e[+-]?\d+)?", block)]
        np.testing.assert_allclose(np.reshape(values, (4, 4)), want, rtol=1e-3, atol=1e-4)
    assert "max per-element difference (slow mode)" in text


def test_the_failure_message_shows_both_jacobians():
    text = str(failure(cagrad, "gradcheck", lambda L: wrong_backward(L, 1)))
    numerical = text.split("numerical:")[1].split("analytical:")[0]
    analytical = text.split("analytical:")[1]
    # d (x * w) / d w is diag(x), laid out (input numel, output numel); the backward gives
    # 1.5 diag(x)
    for block, want in ((numerical, np.diag(C4)), (analytical, 1.5 * np.diag(C4))):
        values = [float(v) for v in re.findall(r"-?\d+\.\d*(?:e[+-]?\d+)?", block)]
        np.testing.assert_allclose(np.reshape(values, (4, 4)), want, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("fast", [False, True], ids=["slow", "fast"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_backward_that_is_not_twice_differentiable_fails_gradgradcheck(compiled, fast):
    def case(L):
        cube = cube_function(L, double_backward_right=False)
        return (leaf(L, C4),), lambda x: cube.apply(x)

    assert verdicts("gradcheck", case, compiled, fast_mode=fast) == [True, True]
    got, want = (failure(L, "gradgradcheck", case, compiled, fast_mode=fast)
                 for L in (cagrad, torch))
    assert type(got).__name__ == type(want).__name__ == "GradcheckError"
    assert str(got).splitlines()[0] == str(want).splitlines()[0]
    assert [failure(L, "gradgradcheck", case, compiled, raise_exception=False,
                    fast_mode=fast) for L in (cagrad, torch)] == [False, False]


def zero_grad_gives_one(L):
    """2 x, whose backward is right for a nonzero grad_output only."""
    class Leaky(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2 + (1.0 if float(g.abs().sum()) == 0 else 0.0)

    return (leaf(L, C4),), lambda x: Leaky.apply(x)


def noisy_backward(L):
    """2 x, whose backward adds a little noise: right to 1e-9, but not reentrant."""
    class Noisy(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * (2 + L.rand(g.shape, dtype=g.dtype) * 1e-9)

    return (leaf(L, C4),), lambda x: Noisy.apply(x)


def undefined_grad_not_handled(L):
    """Two outputs; the backward turns off materialized gradients and then needs both."""
    class Two(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g0, g1):
            return g0 * 2 + g1 * 3

    return (leaf(L, C4),), lambda x: Two.apply(x)


def undefined_grad_leaks(L):
    """Two outputs; the backward handles one undefined (None) gradient, but gives a nonzero
    gradient when the other output's gradient is zero: only the undefined-grad check sees
    it (each output left undefined in turn, the others zero)."""
    class Two(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g0, g1):
            if g0 is None and g1 is None:
                return None
            if g0 is None:
                return g1 * 3 + (1.0 if float(g1.abs().sum()) == 0 else 0.0)
            if g1 is None:
                return g0 * 2
            return g0 * 2 + g1 * 3

    return (leaf(L, C4),), lambda x: Two.apply(x)


def no_differentiable_output(L):
    return (leaf(L, C4),), lambda x: x.detach() * 2


def constant_output(L):
    return (leaf(L, C4),), lambda x: L.zeros(4, dtype=L.float64)


@pytest.mark.parametrize("case", [zero_grad_gives_one, noisy_backward,
                                  undefined_grad_not_handled, undefined_grad_leaks,
                                  no_differentiable_output,
                                  constant_output], ids=lambda c: c.__name__)
@pytest.mark.parametrize("fast", [False, True], ids=["slow", "fast"])
def test_the_other_checks_match_torch(case, fast):
    results, warned = [], []
    for L in (cagrad, torch):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results.append(failure(L, "gradcheck", case, fast_mode=fast))
        warned.append([str(w.message) for w in caught])
    assert warned[0] == warned[1]  # the undefined-grad check's warning, when it fails
    got, want = results
    if want is True:
        assert got is True
    else:
        assert type(got).__name__ == type(want).__name__, (got, want)
        assert str(got).split("\n")[0] == str(want).split("\n")[0]


def test_nondet_tol_accepts_a_little_noise():
    for L in (cagrad, torch):
        assert failure(L, "gradcheck", noisy_backward, nondet_tol=1e-6) is True


def test_check_undefined_grad_false_skips_that_check():
    for L in (cagrad, torch):
        with pytest.warns(UserWarning, match="check_undefined_grad=False"):
            assert isinstance(failure(L, "gradcheck", undefined_grad_leaks), RuntimeError)
        assert failure(L, "gradcheck", undefined_grad_leaks, check_undefined_grad=False)


# ---------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------
def test_float32_inputs_warn_like_torch():
    msgs = []
    for L in (cagrad, torch):
        x = L.tensor(A34, dtype=L.float32, requires_grad=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            L.autograd.gradcheck(lambda a: a * 2, (x,), eps=1e-2, atol=1e-2,
                                 raise_exception=False)
        msgs.append([str(w.message) for w in caught if w.category is UserWarning])
    assert msgs[0] == msgs[1] and msgs[0][0].startswith("Input #0 requires gradient and is "
                                                        "not a double precision")


def test_float32_gives_the_same_verdict_as_torch():
    # eps=1e-6 on float32 values is below their resolution: both fail, as documented
    got = []
    for L in (cagrad, torch):
        x = L.tensor(A34, dtype=L.float32, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got.append(L.autograd.gradcheck(lambda a: a.tanh(), x, raise_exception=False))
            got.append(L.autograd.gradcheck(lambda a: a.tanh(), x, eps=1e-2, atol=1e-2,
                                            rtol=1e-2))
    assert got[:2] == got[2:] == [False, True]


@pytest.mark.parametrize("kw", [dict(check_backward_ad=False),
                                dict(check_batched_forward_grad=True)],
                         ids=["no-ad-checked", "batched-forward-without-forward"])
def test_contradictory_options_assert_like_torch(kw):
    errs = [failure(L, "gradcheck", matmul, **kw) for L in (cagrad, torch)]
    assert type(errs[0]) is type(errs[1]) is AssertionError
    assert str(errs[0]) == str(errs[1])


def test_no_input_requiring_grad_is_a_value_error():
    errs = [failure(L, "gradcheck", lambda L: ((leaf(L, C4, False),), lambda x: x * 2))
            for L in (cagrad, torch)]
    assert type(errs[0]) is type(errs[1]) is ValueError and str(errs[0]) == str(errs[1])


@pytest.mark.parametrize("check,kw", [
    ("gradcheck", dict(check_forward_ad=True)),
    ("gradcheck", dict(check_batched_grad=True)),
    ("gradgradcheck", dict(check_fwd_over_rev=True)),
], ids=["forward-ad", "batched-grad", "fwd-over-rev"])
def test_what_needs_forward_ad_or_vmap_is_an_honest_refusal(check, kw):
    err = failure(cagrad, check, matmul, **kw)
    assert isinstance(err, NotImplementedError)
    assert next(iter(kw)) in str(err) and "docs/python-api.md" in str(err)
    assert failure(torch, check, matmul, **kw) is True  # torch has them


def test_gradgradcheck_with_given_and_noncontiguous_grad_outputs():
    for L in (cagrad, torch):
        inputs, fn = matmul(L)
        go = L.tensor(RNG.standard_normal((3, 3)), dtype=L.float64, requires_grad=True)
        assert L.autograd.gradgradcheck(fn, inputs, go)
        assert L.autograd.gradgradcheck(lambda a, b: (a @ b).tanh(), inputs,
                                        gen_non_contig_grad_outputs=True)


def test_the_callers_tensors_are_left_as_they_were():
    x = leaf(cagrad, A34)
    y = (x * x).sum()  # a graph that saved x: gradcheck must not bump x's version
    assert cagrad.autograd.gradcheck(lambda a: a.exp(), x)
    y.backward()
    np.testing.assert_array_equal(x.detach().numpy(), A34)
    np.testing.assert_allclose(x.grad.numpy(), 2 * A34, rtol=1e-15)


def test_module_layout_is_torchs():
    import cagrad.autograd.gradcheck as imported  # noqa: F401 - torch gives the function
    from cagrad.autograd.gradcheck import gradcheck, gradgradcheck

    assert callable(cagrad.autograd.gradcheck) and cagrad.autograd.gradcheck is gradcheck
    assert cagrad.autograd.gradgradcheck is gradgradcheck
    assert issubclass(GradcheckError, RuntimeError)
    import importlib

    for L in (cagrad, torch):
        # the attribute is the function (so .gradcheck.gradcheck is an AttributeError in
        # torch too); the module is reached by import
        assert not hasattr(L.autograd.gradcheck, "gradcheck")
        assert not hasattr(L.autograd, "GradcheckError")  # only in the module
        module = importlib.import_module(f"{L.__name__}.autograd.gradcheck")
        assert module.gradcheck is L.autograd.gradcheck
        assert module.GradcheckError.__name__ == "GradcheckError"
