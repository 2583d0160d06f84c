"""cagrad.testing (assert_close, make_tensor, assert_allclose) and the inference-mode
names, against torch 2.13: the same inputs give the same outcome, error type and message
(torch's message with "torch." read as "cagrad.")."""

import collections
import threading
import warnings

import numpy as np
import pytest
import torch

import cagrad as ca

NAN, INF = float("nan"), float("inf")


def _outcome(call):
    """(error type name, message) of call(), or None if it passed."""
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the type is what is compared
        return type(error).__name__, str(error)
    return None


# dtypes that cagrad has no name for are spelled as NumPy's (a NumPy array's own dtype)
_NUMPY_SPELLINGS = {"cagrad.int32": "numpy.int32"}


def _as_cagrad_text(text):
    text = text.replace("torch.", "cagrad.")
    for torch_name, cagrad_name in _NUMPY_SPELLINGS.items():
        text = text.replace(torch_name, cagrad_name)
    return text


def _same_outcome(build, **kwargs):
    """build(L) -> (actual, expected): assert_close of both libraries ends the same way."""
    expected = _outcome(lambda: torch.testing.assert_close(*build(torch), **kwargs))
    got = _outcome(lambda: ca.testing.assert_close(*build(ca), **kwargs))
    if expected is not None:
        expected = (expected[0], _as_cagrad_text(expected[1]))
    assert got == expected
    return got


# (name, build(L) -> (actual, expected), keyword arguments)
CASES = [
    ("equal f32", lambda L: (L.tensor([1.0, 2.0]), L.tensor([1.0, 2.0])), {}),
    ("within f32 tolerance", lambda L: (L.tensor([1.0, 100.0]), L.tensor([1.000001, 100.0001])),
     {}),
    ("beyond f32 tolerance", lambda L: (L.tensor([1.0, 2.0, 3.0]), L.tensor([1.0, 2.0, 3.1])),
     {}),
    ("within f64 tolerance",
     lambda L: (L.tensor([1.0, 2.0], dtype=L.float64), L.tensor([1.00000005, 2.0],
                                                                dtype=L.float64)), {}),
    ("beyond f64 tolerance",
     lambda L: (L.tensor([1.0, 2.0], dtype=L.float64), L.tensor([1.000001, 2.0],
                                                                dtype=L.float64)), {}),
    ("f32 limit that f64 refuses",
     lambda L: (L.tensor([1.0], dtype=L.float64), L.tensor([1.000001], dtype=L.float64)),
     dict(rtol=1.3e-6, atol=1e-5)),
    ("int64 exact", lambda L: (L.tensor([1, 2, 3]), L.tensor([1, 5, 0])), {}),
    ("int64 with tolerance", lambda L: (L.tensor([10, 20]), L.tensor([11, 20])),
     dict(rtol=0.1, atol=0)),
    ("bool", lambda L: (L.tensor([True, False]), L.tensor([False, False])), {}),
    ("bool with tolerance", lambda L: (L.tensor([True, False]), L.tensor([True, True])),
     dict(rtol=1, atol=1)),
    ("int64 beyond float32", lambda L: (L.tensor([2**40 + 1]), L.tensor([2**40])),
     dict(rtol=0, atol=0.5)),
    ("int64 beyond float32 exact", lambda L: (L.tensor([2**40 + 1]), L.tensor([2**40])), {}),
    ("2-d index", lambda L: (L.tensor([[1.0, 2.0], [3.0, 4.0]]), L.tensor([[1.0, 2.0],
                                                                            [3.0, 9.0]])), {}),
    ("ties take the first", lambda L: (L.tensor([1.0, 2, 3, 4]), L.tensor([2.0, 3, 4, 5])), {}),
    ("nan unequal", lambda L: (L.tensor([1.0, NAN]), L.tensor([1.0, NAN])), {}),
    ("nan equal", lambda L: (L.tensor([1.0, NAN]), L.tensor([1.0, NAN])), dict(equal_nan=True)),
    ("nan against number", lambda L: (L.tensor([[1.0, NAN], [3, 4]]), L.tensor([[1.0, 2],
                                                                                [0, 0]])), {}),
    ("inf equal", lambda L: (L.tensor([1.0, INF, -INF]), L.tensor([1.0, INF, -INF])), {}),
    ("inf sign", lambda L: (L.tensor([1.0, INF]), L.tensor([1.0, -INF])), {}),
    ("inf against big", lambda L: (L.tensor([INF]), L.tensor([3e38])), dict(rtol=1.0, atol=1.0)),
    ("zero-dim", lambda L: (L.tensor(1.5), L.tensor(1.0)), {}),
    ("zero-dim int", lambda L: (L.tensor(3), L.tensor(0)), {}),
    ("shape", lambda L: (L.ones(3), L.ones(2)), {}),
    ("dtype", lambda L: (L.ones(2), L.ones(2, dtype=L.float64)), {}),
    ("dtype unchecked", lambda L: (L.ones(2), L.ones(2, dtype=L.float64)),
     dict(check_dtype=False)),
    ("f32 against f64 takes the looser tolerance",
     lambda L: (L.tensor([1.0, 2.0]), L.tensor([1.000001, 2.0], dtype=L.float64)),
     dict(check_dtype=False)),
    ("non-contiguous",
     lambda L: (L.arange(6.0).reshape(2, 3).t(), L.tensor([[0.0, 3], [1, 4], [2, 7]])), {}),
    ("empty", lambda L: (L.ones(0, 3), L.zeros(0, 3)), {}),
    ("bool against int unchecked", lambda L: (L.tensor([True, False]), L.tensor([1, 1])),
     dict(check_dtype=False)),
    ("int against float unchecked", lambda L: (L.tensor([1, 2]), L.tensor([1.0, 2.5])),
     dict(check_dtype=False)),
    ("stride", lambda L: (L.ones(2, 3).t(), L.ones(3, 2)), dict(check_stride=True)),
    ("stride unchecked", lambda L: (L.ones(2, 3).t(), L.ones(3, 2)), {}),
    ("only rtol", lambda L: (L.ones(2), L.ones(2)), dict(rtol=1e-3)),
    ("only atol", lambda L: (1.0, 1.0), dict(atol=1e-3)),
    ("tolerance zero", lambda L: (L.tensor([1.0, 2.0]), L.tensor([1.0, 2.0001])),
     dict(rtol=0, atol=0)),
    ("msg string", lambda L: (L.tensor([1.0]), L.tensor([2.0])), dict(msg="Argh!")),
    ("msg callable", lambda L: (L.tensor([1.0, 2.0, 3.0]), L.tensor([1.0, 4.0, 5.0])),
     dict(msg=lambda m: f"Header\n\n{m}\n\nFooter")),
    ("msg not for pairing", lambda L: ([1, 2], [1]), dict(msg="ignored")),
    ("requires grad", lambda L: (L.ones(2, requires_grad=True) * 2, L.full((2,), 2.0)), {}),
    ("parameter", lambda L: (L.nn.Parameter(L.ones(2)), L.ones(2)), {}),
    ("parameter strict", lambda L: (L.nn.Parameter(L.ones(2)), L.ones(2)),
     dict(allow_subclasses=False)),
    ("tensor and number", lambda L: (L.ones(1), 1.0), {}),
    ("numpy and tensor", lambda L: (np.ones(2, np.float32), L.ones(2)), {}),
    ("numpy arrays", lambda L: (np.array([1.0, 2.0]), np.array([1.0, 2.5])), {}),
    ("numpy float16 arrays", lambda L: (np.array([1.0, 2.0], np.float16),
                                        np.array([1.0, 2.002], np.float16)), {}),
    ("numpy float16 beyond", lambda L: (np.array([1.0, 2.0], np.float16),
                                        np.array([1.0, 2.01], np.float16)), {}),
    ("numpy int32 against int64", lambda L: (np.array([1, 2], np.int32), np.array([1, 2])), {}),
    ("numpy int32 against float32 unchecked",
     lambda L: (np.array([1, 2], np.int32), np.array([1.0, 2.5], np.float32)),
     dict(check_dtype=False)),
    ("numpy uint8", lambda L: (np.array([[1, 200]], np.uint8), np.array([[1, 3]], np.uint8)), {}),
    ("numpy complex", lambda L: (np.array([1 + 1j, 2]), np.array([1 + 1j, 2 + 1e-3j])), {}),
    ("numpy strings", lambda L: (np.array(["a"]), np.array(["a"])), {}),
    ("numpy zero-dim", lambda L: (np.array(2.0), np.array(2.5)), {}),
    ("numpy scalar and float", lambda L: (np.float32(1.0), 1.0), {}),
    ("strings", lambda L: ("a", "a"), {}),
    ("None", lambda L: (None, None), dict(rtol=1.0)),
    ("None against number", lambda L: (None, 1), {}),
    ("bools", lambda L: (True, False), {}),
    ("numpy bool", lambda L: (np.bool_(True), True), {}),
    ("ints", lambda L: (1, 2), {}),
    ("int and float", lambda L: (1, 1.0), {}),
    ("int and float unchecked", lambda L: (1, 1.0), dict(check_dtype=False)),
    ("floats close", lambda L: (1.0, 1.0 + 1e-8), {}),
    ("floats far", lambda L: (1e-9, 1e-10), dict(rtol=0, atol=0)),
    ("float nan", lambda L: (NAN, NAN), {}),
    ("float nan equal", lambda L: (NAN, NAN), dict(equal_nan=True)),
    ("float inf", lambda L: (INF, INF), {}),
    ("complex", lambda L: (1 + 2j, 1 + 2.5j), {}),
    ("lists", lambda L: ([L.ones(2), 2.0], (L.ones(2), 2.0)), {}),
    ("list lengths", lambda L: ([1, 2], [1]), {}),
    ("nested failure", lambda L: ({"a": [L.ones(2), {"b": 3}]}, {"a": [L.ones(2), {"b": 4}]}),
     {}),
    ("mapping keys", lambda L: ({"a": 1, "c": 2}, {"b": 1, "c": 2}), {}),
    ("ordered mapping", lambda L: (collections.OrderedDict(x=L.ones(1), y=2.0),
                                   {"y": 2.0, "x": L.ones(1)}), {}),
    ("pairing before values", lambda L: ([L.zeros(1), L.ones(1)], [L.ones(1), 1.0]), {}),
]


@pytest.mark.parametrize("build, kwargs", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_assert_close_as_torch(build, kwargs):
    _same_outcome(build, **kwargs)


def test_cases_cover_passes_and_each_error_type():
    outcomes = [_same_outcome(build, **kwargs) for _, build, kwargs in CASES]
    kinds = {None if o is None else o[0] for o in outcomes}
    assert kinds == {None, "AssertionError", "TypeError", "ValueError"}


def test_bool_beside_number_is_refused_as_torch():
    # torch fails inside its number pair with a RuntimeError; so does cagrad (own text)
    for lib in (torch, ca):
        with pytest.raises(RuntimeError):
            lib.testing.assert_close(True, 1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gradients_compare_as_torch(dtype):
    """A typical use: a gradient against a reference within the dtype's default
    tolerances, a perturbed one outside them."""
    results = []
    for lib in (torch, ca):
        x = lib.tensor([0.5, -1.5, 2.0], dtype=getattr(lib, dtype), requires_grad=True)
        (x.sin() * x).sum().backward()
        reference = (x.cos() * x + x.sin()).detach()
        lib.testing.assert_close(x.grad, reference)
        results.append(_outcome(lambda: lib.testing.assert_close(x.grad, reference * 1.001)))
    assert results[1] == (results[0][0], results[0][1].replace("torch.", "cagrad."))


# ------------------------------------------------------------------ assert_allclose
ALLCLOSE_CASES = [
    ((1.0, 1.00001), {}),
    (([1.0, 2.0], [1.0, 2.1]), {}),
    (([NAN], [NAN]), {}),
    (([NAN], [NAN]), dict(equal_nan=False)),
    (([1, 2], [1, 3]), {}),
    (([1.0], [1.5]), dict(rtol=0.5, atol=0.0)),
    (([1.0], [1.5]), dict(msg="mine")),
]


@pytest.mark.parametrize("args, kwargs", ALLCLOSE_CASES)
def test_assert_allclose_deprecated_as_torch(args, kwargs):
    outcomes = []
    for lib in (torch, ca):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outcome = _outcome(lambda: lib.testing.assert_allclose(*args, **kwargs))
        assert [w.category for w in caught] == [FutureWarning]
        outcomes.append((outcome, str(caught[0].message).replace("torch.", "cagrad.")))
    assert outcomes[1] == outcomes[0]


def test_assert_allclose_tensor_tolerances_as_torch():
    outcomes = []
    for lib in (torch, ca):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            outcomes.append(_outcome(lambda: lib.testing.assert_allclose(
                lib.tensor([1.0, 2.0]), lib.tensor([1.0001, 2.0]))))
    assert outcomes[1] == outcomes[0]


# ------------------------------------------------------------------ make_tensor
@pytest.mark.parametrize("dtype, low, high", [
    ("float32", -9, 9), ("float64", -9, 9), ("int64", -9, 9), ("bool", 0, 1)])
def test_make_tensor_default_range_dtype_and_shape(dtype, low, high):
    t = ca.testing.make_tensor(40, 50, dtype=getattr(ca, dtype), device="cpu")
    values = t.numpy()
    assert t.dtype == getattr(ca, dtype) and tuple(t.shape) == (40, 50)
    assert values.min() >= low and values.max() <= high
    assert values.min() < low + 2 and values.max() > high - 2  # the range is used
    assert not t.requires_grad and t.is_contiguous()


@pytest.mark.parametrize("shape", [(3,), ((2, 3),), ([4, 1, 2],), ()])
def test_make_tensor_shape_spellings_as_torch(shape):
    t = ca.testing.make_tensor(*shape, dtype=ca.float32, device="cpu")
    assert tuple(t.shape) == tuple(torch.testing.make_tensor(*shape, dtype=torch.float32,
                                                             device="cpu").shape)


def test_make_tensor_bounds_clamped_and_rounded():
    t = ca.testing.make_tensor(1000, dtype=ca.float64, device="cpu", low=0.25, high=0.5)
    assert 0.25 <= t.numpy().min() and t.numpy().max() < 0.5
    i = ca.testing.make_tensor(1000, dtype=ca.int64, device="cpu", low=0.5, high=2.5)
    assert set(i.numpy().tolist()) <= {1, 2}  # low and high rounded up, high exclusive
    huge = ca.testing.make_tensor(1000, dtype=ca.float32, device="cpu", low=-1e39, high=1e39)
    assert np.isfinite(huge.numpy()).all() and np.abs(huge.numpy()).max() > 1e37
    b = ca.testing.make_tensor(100, dtype=ca.bool, device="cpu", low=1, high=2)
    assert b.numpy().all()


def test_make_tensor_requires_grad_noncontiguous_exclude_zero():
    t = ca.testing.make_tensor(3, 4, dtype=ca.float64, device="cpu", requires_grad=True,
                               noncontiguous=True)
    assert t.requires_grad and t.is_leaf and not t.is_contiguous() and tuple(t.shape) == (3, 4)
    one = ca.testing.make_tensor(1, dtype=ca.float32, device="cpu", noncontiguous=True)
    assert one.is_contiguous()  # fewer than two elements: noncontiguous is ignored, as torch
    z = ca.testing.make_tensor(2000, dtype=ca.int64, device="cpu", low=-1, high=1,
                               exclude_zero=True)
    assert set(z.numpy().tolist()) == {-1, 1}
    f = ca.testing.make_tensor(200, dtype=ca.float32, device="cpu", low=0, high=1e-44,
                               exclude_zero=True)
    assert (f.numpy() != 0).all()
    assert (f.numpy() == np.float32(np.finfo(np.float32).tiny)).any()


@pytest.mark.parametrize("kwargs", [
    dict(dtype="int64", requires_grad=True), dict(dtype="bool", requires_grad=True),
    dict(dtype="float32", low=2, high=1), dict(dtype="float32", low=NAN),
    dict(dtype="int64", low=1, high=1), dict(dtype="bool", low=3, high=5),
    dict(dtype="float32", noncontiguous=True, memory_format="contiguous_format"),
])
def test_make_tensor_errors_as_torch(kwargs):
    outcomes = []
    for lib in (torch, ca):
        args = dict(kwargs, dtype=getattr(lib, kwargs["dtype"]))
        if "memory_format" in args:
            args["memory_format"] = getattr(lib, args["memory_format"])
        outcomes.append(_outcome(lambda: lib.testing.make_tensor(3, device="cpu", **args)))
    assert outcomes[0] is not None
    assert outcomes[1] == (outcomes[0][0], outcomes[0][1].replace("torch.", "cagrad."))


def test_make_tensor_low_equals_high_warns_as_torch():
    messages = []
    for lib in (torch, ca):
        with pytest.warns(FutureWarning) as caught:
            t = lib.testing.make_tensor(4, dtype=lib.float32, device="cpu", low=2, high=2)
        assert t.tolist() == [2.0] * 4
        messages.append(str(caught[0].message).replace("torch.", "cagrad."))
    assert messages[1] == messages[0]


def test_make_tensor_half_precision_is_refused_honestly():
    with pytest.raises(TypeError, match="docs/python-api.md"):
        ca.testing.make_tensor(2, dtype=ca.float16, device="cpu")


def test_testing_lacks_other_names_honestly():
    with pytest.raises(AttributeError, match="docs/python-api.md"):
        ca.testing.FileCheck  # noqa: B018


# ------------------------------------------------------------------ inference mode
def _inference_trace(lib):
    seen = [lib.is_inference_mode_enabled()]
    with lib.inference_mode():
        seen += [lib.is_inference_mode_enabled(), lib.is_grad_enabled()]
        with lib.inference_mode(False):
            seen += [lib.is_inference_mode_enabled(), lib.is_grad_enabled()]
        with lib.no_grad():
            seen.append(lib.is_inference_mode_enabled())
        other = []
        worker = threading.Thread(target=lambda: other.append(lib.is_inference_mode_enabled()))
        worker.start()
        worker.join()
        seen += other
    with lib.no_grad():
        seen.append(lib.is_inference_mode_enabled())
        with lib.inference_mode(False):
            seen += [lib.is_inference_mode_enabled(), lib.is_grad_enabled()]
    seen += [lib.is_inference_mode_enabled(), lib.is_grad_enabled()]
    return seen


def test_is_inference_mode_enabled_as_torch():
    assert _inference_trace(ca) == _inference_trace(torch)


def test_inference_mode_as_decorator_as_torch():
    def decorated(lib):
        @lib.inference_mode
        def bare(x):
            return x, lib.is_inference_mode_enabled(), lib.is_grad_enabled()

        @lib.inference_mode()
        def called(x):
            return x, lib.is_inference_mode_enabled(), lib.is_grad_enabled()

        @lib.inference_mode(False)
        def off():
            return lib.is_inference_mode_enabled(), lib.is_grad_enabled()

        y = lib.ones(2, requires_grad=True)
        with lib.inference_mode():
            inside_off = off()
        return (bare(1), called(2), off(), inside_off, (y * 2).requires_grad, bare.__name__,
                lib.is_inference_mode_enabled())

    assert decorated(ca) == decorated(torch)


def test_inference_mode_restores_after_an_error():
    for lib in (torch, ca):
        with pytest.raises(ValueError), lib.inference_mode():
            raise ValueError
        assert not lib.is_inference_mode_enabled() and lib.is_grad_enabled()


def test_integers_compare_in_the_default_dtype_as_torch():
    """With tolerances, torch.isclose converts integers to the default float dtype."""
    outcomes = []
    for lib in (torch, ca):
        lib.set_default_dtype(lib.float64)
        try:
            outcomes.append(_outcome(lambda: lib.testing.assert_close(
                lib.tensor([2**40 + 1, 7]), lib.tensor([2**40, 9]), rtol=0, atol=0.5)))
        finally:
            lib.set_default_dtype(lib.float32)
    assert outcomes[0] is not None and outcomes[1] == outcomes[0]
