"""Creation and conversion arguments: pin_memory, layout, memory_format, device,
non_blocking, copy and requires_grad.

The values PyTorch treats as no-ops on the CPU (pin_memory=False, layout=strided,
memory_format=contiguous_format, preserve_format where the result is contiguous anyway,
non_blocking=True) are accepted and give what PyTorch gives. Anything else raises, naming
the argument, instead of being dropped silently: a result that ignored it would differ
from PyTorch's without a word."""

import numpy as np
import pytest
import torch

from helpers import assert_close, ca, needs_cagrad

# Each maker builds a float tensor with library L and extra keyword arguments.
CREATE = {
    "tensor": lambda L, **kw: L.tensor([[1.0, 2.0], [3.0, 4.0]], **kw),
    "zeros": lambda L, **kw: L.zeros(2, 3, **kw),
    "ones": lambda L, **kw: L.ones(2, 3, **kw),
    "empty": lambda L, **kw: L.empty(2, 3, **kw),
    "full": lambda L, **kw: L.full((2, 3), 1.5, **kw),
    "randn": lambda L, **kw: L.randn(2, 3, **kw),
    "rand": lambda L, **kw: L.rand(2, 3, **kw),
    "arange": lambda L, **kw: L.arange(6.0, **kw),
    "new_zeros": lambda L, **kw: L.ones(2).new_zeros(2, 3, **kw),
    "new_ones": lambda L, **kw: L.ones(2).new_ones(2, 3, **kw),
    "new_empty": lambda L, **kw: L.ones(2).new_empty(2, 3, **kw),
    "new_full": lambda L, **kw: L.ones(2).new_full((2, 3), 1.5, **kw),
}
LIKE = {
    "zeros_like": lambda L, x, **kw: L.zeros_like(x, **kw),
    "ones_like": lambda L, x, **kw: L.ones_like(x, **kw),
    "empty_like": lambda L, x, **kw: L.empty_like(x, **kw),
    "full_like": lambda L, x, **kw: L.full_like(x, 1.5, **kw),
    "randn_like": lambda L, x, **kw: L.randn_like(x, **kw),
    "rand_like": lambda L, x, **kw: L.rand_like(x, **kw),
}
ALL = {**CREATE, **{n: (lambda f: lambda L, **kw: f(L, L.ones(2, 3), **kw))(f)
                    for n, f in LIKE.items()}}
NO_LAYOUT = {"tensor"}  # PyTorch has no layout= there either
RANDOM = {"empty", "randn", "rand", "new_empty", "empty_like", "randn_like", "rand_like"}


def same_result(c, t, name):
    """Shape, dtype and strides as PyTorch's, and its values where they are defined."""
    assert tuple(c.shape) == tuple(t.shape) and c.stride() == t.stride(), name
    assert str(c.dtype).split(".")[1] == str(t.dtype).split(".")[1], name
    if name not in RANDOM:
        assert_close(c, t, msg=name)


# ------------------------------------------------------------------------------ pin_memory
@pytest.mark.parametrize("name", list(ALL))
def test_pin_memory_false_is_accepted_as_in_torch(name):
    same_result(ALL[name](ca, pin_memory=False), ALL[name](torch, pin_memory=False), name)


@needs_cagrad
@pytest.mark.parametrize("name", list(ALL))
def test_pin_memory_true_raises_naming_it(name):
    with pytest.raises(NotImplementedError, match=rf"cagrad's {name}\(\).*pin_memory=True"):
        ALL[name](ca, pin_memory=True)


# ------------------------------------------------------------------------------ layout
@pytest.mark.parametrize("name", [n for n in ALL if n not in NO_LAYOUT])
def test_layout_strided_is_accepted_as_in_torch(name):
    same_result(ALL[name](ca, layout=ca.strided), ALL[name](torch, layout=torch.strided), name)


@needs_cagrad
@pytest.mark.parametrize("name", [n for n in ALL if n not in NO_LAYOUT])
def test_other_layouts_raise_naming_them(name):
    with pytest.raises(NotImplementedError, match=r"layout=torch\.sparse_coo"):
        ALL[name](ca, layout=torch.sparse_coo)


# ------------------------------------------------------------------------------ device
@needs_cagrad
@pytest.mark.parametrize("name", list(ALL))
def test_device_other_than_cpu_raises(name):
    ALL[name](ca, device="cpu")
    ALL[name](ca, device=ca.device("cpu"))
    with pytest.raises(RuntimeError, match="CPU only.*'cuda'"):
        ALL[name](ca, device="cuda")


# ------------------------------------------------------------------------------ memory_format
# Inputs whose layout preserve_format keeps, in dtype dt: PyTorch's result is contiguous for
# the first three (dims in row-major order), strided like the input for the last two.
ROW_MAJOR = {
    "contiguous": lambda L, dt: L.arange(24.0, dtype=dt).reshape(2, 3, 4),
    "sliced": lambda L, dt: L.arange(24.0, dtype=dt).reshape(4, 6)[:, ::2],
    "expanded": lambda L, dt: L.arange(3.0, dtype=dt).reshape(1, 3, 1, 1).expand(2, 3, 4, 5),
}
PERMUTED = {
    "transposed": lambda L, dt: L.arange(6.0, dtype=dt).reshape(2, 3).t(),
    "sliced_transposed": lambda L, dt: L.arange(24.0, dtype=dt).reshape(4, 6)[:, ::2].t(),
}
# Ops that take memory_format: the input's dtype, and the call on input x.
FORMAT_OPS = {
    **{name: ("float32", f) for name, f in LIKE.items()},
    "clone": ("float32", lambda L, x, **kw: L.clone(x, **kw)),
    "Tensor.clone": ("float32", lambda L, x, **kw: x.clone(**kw)),
    "to": ("float32", lambda L, x, **kw: x.to(L.float64, **kw)),
    "float": ("float64", lambda L, x, **kw: x.float(**kw)),
    "double": ("float32", lambda L, x, **kw: x.double(**kw)),
    "long": ("float32", lambda L, x, **kw: x.long(**kw)),
}


def format_op(L, name, make, **kw):
    dt, fn = FORMAT_OPS[name]
    return fn(L, make(L, getattr(L, dt)), **kw)


@pytest.mark.parametrize("layout", list(ROW_MAJOR) + list(PERMUTED))
@pytest.mark.parametrize("name", list(FORMAT_OPS))
def test_contiguous_format_is_accepted_as_in_torch(name, layout):
    make = {**ROW_MAJOR, **PERMUTED}[layout]
    c = format_op(ca, name, make, memory_format=ca.contiguous_format)
    t = format_op(torch, name, make, memory_format=torch.contiguous_format)
    same_result(c, t, name.split(".")[-1])


@pytest.mark.parametrize("layout", list(ROW_MAJOR))
@pytest.mark.parametrize("name", list(FORMAT_OPS))
def test_preserve_format_is_accepted_where_the_result_is_contiguous(name, layout):
    c = format_op(ca, name, ROW_MAJOR[layout], memory_format=ca.preserve_format)
    t = format_op(torch, name, ROW_MAJOR[layout], memory_format=torch.preserve_format)
    assert t.is_contiguous()
    same_result(c, t, name.split(".")[-1])


@needs_cagrad
@pytest.mark.parametrize("layout", list(PERMUTED))
@pytest.mark.parametrize("name", list(FORMAT_OPS))
def test_preserve_format_of_a_permuted_input_raises(name, layout):
    # PyTorch keeps the input's strides here; cagrad's result would be contiguous
    t = format_op(torch, name, PERMUTED[layout], memory_format=torch.preserve_format)
    assert not t.is_contiguous()
    with pytest.raises(NotImplementedError, match=r"memory_format=cagrad\.preserve_format"):
        format_op(ca, name, PERMUTED[layout], memory_format=ca.preserve_format)


@needs_cagrad
@pytest.mark.parametrize("fmt", ["channels_last", "channels_last_3d"])
@pytest.mark.parametrize("name", list(FORMAT_OPS) + ["contiguous", "empty", "cpu"])
def test_channels_last_raises_naming_it(name, fmt):
    x = ca.ones(2, 3, 4, 5) if fmt == "channels_last" else ca.ones(2, 3, 4, 5, 6)
    ops = {**{name: f for name, (_, f) in FORMAT_OPS.items()},
           "contiguous": lambda L, x, **kw: x.contiguous(**kw),
           "empty": lambda L, x, **kw: L.empty(*x.shape, **kw),
           "cpu": lambda L, x, **kw: x.cpu(**kw)}
    with pytest.raises(NotImplementedError, match=rf"memory_format=cagrad\.{fmt}\b"):
        ops[name](ca, x, memory_format=getattr(ca, fmt))


def test_memory_formats_and_layouts_have_torch_names():
    for name in ("contiguous_format", "preserve_format", "channels_last", "channels_last_3d"):
        assert isinstance(getattr(ca, name), ca.memory_format)
        assert repr(getattr(ca, name)).endswith("." + name)
    assert isinstance(ca.strided, ca.layout) and repr(ca.strided).endswith(".strided")


def test_contiguous_and_empty_refuse_preserve_format_as_torch_does():
    for L in (ca, torch):
        assert L.empty(2, memory_format=L.contiguous_format).shape == (2,)
        assert L.ones(2, 3).t().contiguous(memory_format=L.contiguous_format).is_contiguous()
        assert L.ones(2, 3).contiguous(memory_format=L.preserve_format).is_contiguous()
        with pytest.raises(RuntimeError, match="preserve"):
            L.ones(2, 3).t().contiguous(memory_format=L.preserve_format)
        with pytest.raises(RuntimeError):
            L.empty(2, memory_format=L.preserve_format)


def test_to_contiguous_format_copies_what_torch_copies():
    for L in (ca, torch):
        nhwc = L.arange(60.0).reshape(1, 4, 5, 3).permute(0, 3, 1, 2)  # channels-last
        out = nhwc.to(memory_format=L.contiguous_format)
        assert out is not nhwc and out.is_contiguous()
        np.testing.assert_array_equal(np.asarray(out), np.asarray(nhwc))
        tr = L.ones(2, 3).t()  # not channels-last: to() returns it as it is
        assert tr.to(memory_format=L.contiguous_format) is tr
        assert tr.cpu(memory_format=L.contiguous_format) is tr


def test_memory_format_must_be_a_memory_format():
    with pytest.raises(TypeError, match="memory_format"):
        ca.zeros_like(ca.ones(2), memory_format="contiguous")


# ------------------------------------------------------------------------------ to()
@pytest.mark.parametrize("args, kwargs", [
    ((), dict(copy=True)),
    (("float32", False, True), {}),      # to(dtype, non_blocking, copy)
    (("cpu", "float32", True, True), {}),
    (("other", False, True), {}),
    (("float32",), dict(non_blocking=True, copy=True)),
])
def test_to_copy_positional_or_keyword(args, kwargs):
    for L in (ca, torch):
        x = L.ones(2, 3)
        other = L.zeros(1)
        resolved = [getattr(L, a) if a == "float32" else other if a == "other" else a
                    for a in args]
        y = x.to(*resolved, **kwargs)
        assert y is not x and y.data_ptr() != x.data_ptr(), L.__name__


@pytest.mark.parametrize("args, kwargs", [
    (("float32", True), {}),             # to(dtype, non_blocking): a no-op on the CPU
    (("float32",), dict(non_blocking=True)),
    ((), dict(memory_format="preserve")),
])
def test_to_without_a_change_returns_self(args, kwargs):
    for L in (ca, torch):
        x = L.ones(2, 3).t()
        kw = {k: (L.preserve_format if v == "preserve" else v) for k, v in kwargs.items()}
        assert x.to(*[getattr(L, a) if a == "float32" else a for a in args], **kw) is x


@needs_cagrad
def test_to_takes_at_most_two_flags():
    with pytest.raises(TypeError, match="non_blocking, copy"):
        ca.ones(2).to(ca.float32, False, False, False)


def test_non_blocking_copy_is_a_no_op_on_the_cpu():
    for L in (ca, torch):
        x = L.zeros(2)
        x.copy_(L.ones(2), non_blocking=True)
        assert x.tolist() == [1.0, 1.0]


# ------------------------------------------------------------------------------ requires_grad
@pytest.mark.parametrize("make", [
    lambda L: L.zeros(2, dtype=L.int64, requires_grad=True),
    lambda L: L.tensor([1, 2], requires_grad=True),
    lambda L: L.arange(3, requires_grad=True),
    lambda L: L.full((2,), 1, requires_grad=True),
    lambda L: L.ones_like(L.arange(3), requires_grad=True),
    lambda L: L.ones(2).new_tensor([1, 2], dtype=L.int64, requires_grad=True),
])
def test_requires_grad_on_int64_is_a_runtime_error_as_in_torch(make):
    for L in (ca, torch):
        with pytest.raises(RuntimeError, match="(?i)only.*float.*grad"):
            make(L)


@pytest.mark.parametrize("value", [2**60 + 1, -(2**60) - 1, 2**53 + 1, 2**63 - 1])
def test_full_keeps_every_bit_of_a_big_int64(value):
    # a C double would round these; PyTorch keeps them
    for make in (lambda L: L.full((2, 3), value, dtype=L.int64),
                 lambda L: L.full((2,), value),
                 lambda L: L.full_like(L.zeros(3, dtype=L.int64), value)):
        got, want = make(ca), make(torch)
        assert got.dtype == ca.int64 and got.tolist() == want.tolist()


@pytest.mark.parametrize("data", [
    [np.float64(1.0)], [np.float32(1.0)], [1.0, np.float64(2.0)], [[np.float64(1.0)], [2.0]],
    [np.float64(1.0), np.float32(2.0)], [1, np.float32(2.0)], [1.0, 2.0], (np.float64(1.0),),
    [np.int64(1), 2], [True, np.bool_(False)]], ids=repr)
def test_tensor_of_numpy_scalars_takes_torchs_dtype(data):
    """torch.tensor reads a numpy float64 scalar inside a list as float64 (rewards from a
    numpy environment), where a Python float gives the default float32."""
    assert str(ca.tensor(data).dtype).split(".")[-1] == str(torch.tensor(data).dtype).split(".")[-1]
