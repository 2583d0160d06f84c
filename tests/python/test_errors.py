"""Error behaviour: PyTorch's exception types with useful messages; exceptions raised in
hooks come out of backward() as the same object; nothing leaks (weakrefs, refcounts); the
next backward works. Eagerly and under compiled autograd."""

import gc
import re
import sys
import weakref

import numpy as np
import pytest
import torch

from helpers import STANDIN, ca, names_shape, needs_cagrad, to_np

# ---------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------
SHAPE_ERRORS = {
    "add_broadcast": (lambda L: L.ones(3, 4) + L.ones(5), (3, 4), (5,)),
    "mul_broadcast": (lambda L: L.ones(2, 3) * L.ones(4, 3), (2, 3), (4, 3)),
    "mm": (lambda L: L.mm(L.ones(3, 4), L.ones(3, 4)), (3, 4), (3, 4)),
    "matmul": (lambda L: L.ones(2, 3, 4) @ L.ones(5, 6), (2, 3, 4), (5, 6)),
    "bmm": (lambda L: L.bmm(L.ones(2, 3, 4), L.ones(3, 4, 5)), (2, 3, 4), (3, 4, 5)),
    "cat": (lambda L: L.cat([L.ones(2, 3), L.ones(2, 4)], 0), (2, 3), (2, 4)),
    "mse_loss": (lambda L: L.nn.functional.mse_loss(L.ones(2, 3), L.ones(3, 2)), (2, 3), (3, 2)),
    "linear": (lambda L: L.nn.functional.linear(L.ones(2, 3), L.ones(4, 5)), (2, 3), (4, 5)),
}


@pytest.mark.parametrize("name", list(SHAPE_ERRORS))
def test_shape_mismatch_runtime_error_names_both_shapes(name):
    fn, sa, sb = SHAPE_ERRORS[name]
    with pytest.raises(RuntimeError) as ei:
        fn(ca)
    msg = str(ei.value)
    if not STANDIN:  # torch's messages do not always name both shapes; cagrad's must
        assert names_shape(msg, sa) and names_shape(msg, sb), msg


def test_reshape_view_expand_bad_shapes():
    x = ca.ones(3, 4)
    for f in (lambda: x.reshape(5, 5), lambda: x.view(5, -1), lambda: x.expand(2, 3)):
        with pytest.raises(RuntimeError):
            f()


def test_view_of_non_contiguous_is_error():
    x = ca.ones(3, 4).t()
    with pytest.raises(RuntimeError):
        x.view(12)


# ---------------------------------------------------------------------------------------
# Autograd errors
# ---------------------------------------------------------------------------------------
def test_backward_twice_mentions_retain_graph(compiled):
    x = ca.ones(3, requires_grad=True)
    loss = (x.exp() * x).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="retain_graph"):
        loss.backward()


def test_inplace_modification_of_saved_tensor(compiled):
    x = ca.ones(3, requires_grad=True)
    w = ca.tensor([1.0, 2.0, 3.0])
    y = x * w  # saves w
    w.mul_(2.0)  # w does not require grad: allowed, bumps its version
    with pytest.raises(RuntimeError) as ei:
        y.sum().backward()
    assert re.search(r"in-?place|version", str(ei.value), re.I), str(ei.value)


def test_inplace_modification_of_saved_output(compiled):
    x = ca.ones(3, requires_grad=True)
    y = x.exp()  # saves its result
    with ca.no_grad():
        y.mul_(2.0)
    with pytest.raises(RuntimeError) as ei:
        y.sum().backward()
    assert re.search(r"in-?place|version", str(ei.value), re.I), str(ei.value)


def test_backward_non_scalar_without_gradient():
    x = ca.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError):
        (x * 2.0).backward()


def test_backward_without_grad_fn():
    with pytest.raises(RuntimeError):
        ca.ones(3).sum().backward()


def test_requires_grad_on_int_tensor():
    with pytest.raises(RuntimeError):
        ca.tensor([1, 2, 3]).requires_grad_()


def test_requires_grad_false_on_non_leaf():
    x = ca.ones(3, requires_grad=True)
    y = x * 2.0
    with pytest.raises(RuntimeError):
        y.requires_grad_(False)


def test_grad_setter_wrong_shape():
    x = ca.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError):
        x.grad = ca.ones(4)


def test_autograd_grad_unused_input_without_allow_unused():
    x = ca.ones(3, requires_grad=True)
    z = ca.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError):
        ca.autograd.grad((x * 2.0).sum(), [x, z])


# ---------------------------------------------------------------------------------------
# Dims, indices, argument kinds and values
# ---------------------------------------------------------------------------------------
DIM_ERRORS = {
    "sum": lambda x: x.sum(5),
    "mean_neg": lambda x: x.mean(-3),
    "softmax": lambda x: ca.nn.functional.softmax(x, dim=3),
    "transpose": lambda x: x.transpose(0, 7),
    "unsqueeze": lambda x: x.unsqueeze(9),
    "cat": lambda x: ca.cat([x, x], 4),
    "squeeze": lambda x: x.squeeze(4),
    "max": lambda x: x.max(2),
    "select": lambda x: x.select(2, 0),
    "flatten": lambda x: x.flatten(0, 5),
}


@pytest.mark.parametrize("name", list(DIM_ERRORS))
def test_dim_out_of_range_is_index_error(name):
    with pytest.raises(IndexError):
        DIM_ERRORS[name](ca.ones(3, 4))


INDEX_ERRORS = {
    "getitem": lambda x: x[5],
    "getitem_neg": lambda x: x[-4],
    "select": lambda x: x.select(0, 10),
    "index_select": lambda x: x.index_select(0, ca.tensor([7])),
    "embedding": lambda x: ca.nn.functional.embedding(ca.tensor([9]), x),
    "cross_entropy_target": lambda x: ca.nn.functional.cross_entropy(x, ca.tensor([0, 1, 7])),
}


@pytest.mark.parametrize("name", list(INDEX_ERRORS))
def test_index_out_of_range_is_index_error(name):
    with pytest.raises(IndexError):
        INDEX_ERRORS[name](ca.ones(3, 4))


TYPE_ERRORS = {
    "sum_str": lambda x: x.sum("a"),
    "zeros_str": lambda x: ca.zeros("a"),
    "add_str": lambda x: x + "s",
    "radd_str": lambda x: "s" + x,
    "mul_list_of_str": lambda x: x * ["a"],
    "reshape_str": lambda x: x.reshape("a"),
    "softmax_dim_str": lambda x: ca.nn.functional.softmax(x, dim="x"),
    "transpose_float": lambda x: x.transpose(0.5, 1),
    "cat_not_tensors": lambda x: ca.cat([x, 3], 0),
    "mm_ndarray_kind": lambda x: ca.mm(x, "nope"),
}


@pytest.mark.parametrize("name", list(TYPE_ERRORS))
def test_wrong_argument_kinds_type_error(name):
    with pytest.raises(TypeError):
        TYPE_ERRORS[name](ca.ones(3, 4))


VALUE_ERRORS = {
    "dropout_p2": lambda x: ca.nn.functional.dropout(x, p=2.0),
    "dropout_neg": lambda x: ca.nn.functional.dropout(x, p=-0.1),
    "Dropout_module": lambda x: ca.nn.Dropout(p=1.5),
    "mse_reduction": lambda x: ca.nn.functional.mse_loss(x, x, reduction="foo"),
    "ce_reduction": lambda x: ca.nn.functional.cross_entropy(x, ca.tensor([0, 1, 2]),
                                                             reduction="bar"),
    "nll_reduction": lambda x: ca.nn.functional.nll_loss(x, ca.tensor([0, 1, 2]),
                                                         reduction="bar"),
}


@pytest.mark.parametrize("name", list(VALUE_ERRORS))
def test_bad_values_value_error(name):
    with pytest.raises(ValueError):
        VALUE_ERRORS[name](ca.ones(3, 4))


@pytest.mark.parametrize("expr", ["mul", "add", "rmul", "div"])
def test_int_tensor_with_float_scalar_promotes_as_torch(expr):
    """int64 tensor with a Python float: the default float dtype, torch's values."""
    def run(L):
        t = L.tensor([1, 2, 3])
        r = {"mul": lambda: t * 0.5, "add": lambda: t + 0.5, "rmul": lambda: 0.5 * t,
             "div": lambda: t / 2.0}[expr]()
        return r.tolist(), str(r.dtype).split(".")[-1]

    assert run(ca) == run(torch)


@needs_cagrad
def test_binary_dtype_mismatch_is_runtime_error():
    # elementwise ops promote float32 beside float64 (test_float_promotion.py); matmul
    # refuses, as torch does
    with pytest.raises(RuntimeError):
        ca.ones(3) @ ca.ones(3, dtype=ca.float64)


def test_numpy_on_requires_grad():
    x = ca.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError) as ei:
        x.numpy()
    assert "detach" in str(ei.value)


def test_item_on_many_elements():
    with pytest.raises(RuntimeError):
        ca.ones(3).item()


# ---------------------------------------------------------------------------------------
# Hook exceptions
# ---------------------------------------------------------------------------------------
class HookError(Exception):
    pass


def _graph_with_raising_hook(err, seen, kind):
    """x (leaf) -> y = x * 2 (hooked) -> loss; the hook records weakrefs and raises."""
    x = ca.tensor(np.arange(4.0), requires_grad=True)
    y = x * 2.0

    def hook(g):
        seen.append(weakref.ref(g))
        raise err

    if kind == "tensor":
        handle = y.register_hook(hook)
    elif kind == "leaf":
        handle = x.register_hook(hook)
    else:
        handle = x.register_post_accumulate_grad_hook(lambda t: hook(t.grad))
    loss = (y * y).sum()
    return x, y, loss, handle


@pytest.mark.parametrize("kind", ["tensor", "leaf", "post_accumulate"])
def test_hook_exception_is_the_same_object_and_nothing_leaks(kind, compiled):
    err = HookError("boom")
    err_refs = sys.getrefcount(err)
    seen = []
    x, y, loss, handle = _graph_with_raising_hook(err, seen, kind)
    wx, wy, wl = weakref.ref(x), weakref.ref(y), weakref.ref(loss)
    rx = sys.getrefcount(x)
    caught = None
    try:
        loss.backward()
    except HookError as e:
        caught = e
    assert caught is err, f"backward raised {caught!r}, not the hook's exception object"
    assert len(seen) == 1
    # drop the traceback (it holds the hook's frame) and every local reference
    caught.__traceback__ = None
    caught = None
    gc.collect()
    assert sys.getrefcount(x) == rx, "the failing backward kept a reference to the leaf"
    del x, y, loss, handle
    gc.collect()
    assert wx() is None, "leaf leaked after a failing backward"
    assert wy() is None, "intermediate leaked after a failing backward"
    assert wl() is None, "loss leaked after a failing backward"
    assert seen[0]() is None, "the gradient passed to the hook leaked"
    assert sys.getrefcount(err) == err_refs, "the library kept a reference to the exception"


@pytest.mark.parametrize("kind", ["tensor", "leaf"])
def test_next_backward_works_after_hook_exception(kind, compiled):
    err = HookError("boom")
    x, y, loss, handle = _graph_with_raising_hook(err, [], kind)
    with pytest.raises(HookError):
        loss.backward()
    handle.remove()
    x.grad = None
    # a fresh forward on the same leaf, no hook: correct gradient
    loss2 = ((x * 2.0) * (x * 2.0)).sum()
    loss2.backward()
    np.testing.assert_allclose(to_np(x.grad), 8.0 * np.arange(4.0))


def test_hook_exception_then_compiled_cache_still_usable():
    """A failing hook under compiled autograd does not poison the cache: the same graph
    structure afterwards gives correct gradients."""
    seen = []
    for fail in (True, False, False):
        x = ca.tensor(np.arange(4.0), requires_grad=True)
        y = x * 2.0

        def hook(g, fail=fail):
            seen.append(fail)
            if fail:
                raise HookError("boom")

        y.register_hook(hook)
        with ca.compiled_autograd.enable():
            if fail:
                with pytest.raises(HookError):
                    (y * y).sum().backward()
            else:
                (y * y).sum().backward()
                np.testing.assert_allclose(to_np(x.grad), 8.0 * np.arange(4.0))
    assert seen == [True, False, False]


def test_refcount_of_leaf_unchanged_by_backward(compiled):
    x = ca.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    w = ca.tensor(np.ones((3, 2)), requires_grad=True)
    (x @ w).sum().backward()  # warm up: creates .grad (and its cached wrapper)
    gc.collect()
    rx, rw = sys.getrefcount(x), sys.getrefcount(w)
    for _ in range(3):
        (x @ w).exp().sum().backward()
    gc.collect()
    assert sys.getrefcount(x) == rx and sys.getrefcount(w) == rw


def test_intermediates_die_after_backward(compiled):
    x = ca.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    h = x.exp()
    y = h * x
    loss = y.sum()
    refs = [weakref.ref(t) for t in (h, y, loss)]
    loss.backward()
    del h, y, loss
    gc.collect()
    assert all(r() is None for r in refs)
    g = x.grad
    wg = weakref.ref(g)
    del g
    x.grad = None
    gc.collect()
    assert wg() is None, ".grad wrapper leaked after .grad = None"


def test_graph_alive_while_output_alive_then_freed():
    x = ca.ones(3, requires_grad=True)
    y = x * 2.0
    wy = weakref.ref(y)
    z = y.exp()
    del y
    gc.collect()
    # y's Python wrapper may die (the graph keeps the C tensor), but z's backward works
    z.sum().backward()
    np.testing.assert_allclose(to_np(x.grad), 2.0 * np.exp(2.0) * np.ones(3), rtol=1e-6)
    del z
    gc.collect()
    assert wy() is None


def test_hook_closure_freed_with_tensor(compiled):
    class Marker:
        pass

    m = Marker()
    wm = weakref.ref(m)
    x = ca.ones(3, requires_grad=True)
    y = x * 2.0
    y.register_hook(lambda g, m=m: None)
    del m
    y.sum().backward()
    del y
    gc.collect()
    assert wm() is None, "hook closure leaked"


@pytest.mark.parametrize("bad", ["shape", "dtype"])
def test_hook_returning_wrong_tensor(bad, compiled):
    x = ca.ones(3, requires_grad=True)
    y = x * 2.0
    if bad == "shape":
        y.register_hook(lambda g: ca.ones(4))
    else:
        y.register_hook(lambda g: ca.ones(3, dtype=ca.float64))
    with pytest.raises(RuntimeError):
        y.sum().backward()


@pytest.mark.parametrize("ret", [5, "grad", [1.0, 2.0, 3.0]])
def test_hook_returning_non_tensor_is_type_error(ret, compiled):
    x = ca.ones(3, requires_grad=True)
    y = x * 2.0
    y.register_hook(lambda g: ret)
    with pytest.raises(TypeError):
        y.sum().backward()


# ---------------------------------------------------------------------------------------
# The C core's advice, spelled for Python
# ---------------------------------------------------------------------------------------
PYTHON_SPELLING = {
    "dtype": (lambda: ca.ones(2, 2, dtype=ca.int64) @ ca.ones(2, 2, dtype=ca.int64),
              "Tensor.to(dtype)"),
    "non_scalar_backward": (
        lambda: (ca.ones(2, 3, requires_grad=True) * 2).backward(),
        "backward(gradient=...)",
    ),
}


@needs_cagrad
@pytest.mark.parametrize("name", list(PYTHON_SPELLING))
def test_messages_name_python_calls_not_the_c_api(name):
    fn, spelling = PYTHON_SPELLING[name]
    with pytest.raises(RuntimeError) as info:
        fn()
    message = str(info.value)
    assert spelling in message
    assert not re.search(r"\bca_[a-z]", message), message


@pytest.mark.parametrize("call", [
    lambda L: L.nn.functional.mse_loss(L.ones(2), L.ones(2), reduction="foo"),
    lambda L: L.nn.functional.cross_entropy(L.ones(2, 3), L.tensor([0, 1]), reduction="foo"),
    lambda L: L.nn.functional.nll_loss(L.ones(2, 3), L.tensor([0, 1]), reduction="foo"),
    lambda L: L.nn.functional.l1_loss(L.ones(2), L.ones(2), reduction="foo"),
])
def test_a_bad_reduction_starts_with_pytorchs_words(call):
    import torch

    with pytest.raises(ValueError) as want:
        call(torch)
    with pytest.raises(ValueError) as got:
        call(ca)
    assert str(got.value).startswith(str(want.value))  # "foo is not a valid value ..."
