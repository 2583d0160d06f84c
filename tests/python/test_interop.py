"""Zero-copy interop: NumPy (from_numpy, numpy(), np.asarray / buffer protocol) and DLPack
(torch.from_dlpack(cagrad_tensor), cagrad.from_dlpack(torch_tensor), np.from_dlpack):
shared memory both ways, lifetimes, strides, dtypes and the errors."""

import gc
import weakref

import numpy as np
import pytest
import torch

from helpers import STANDIN, ca, needs_cagrad, to_np

DT = [np.float32, np.float64, np.int64]


def churn(n, nbytes):
    """Allocate and fill many same-size blocks: if freed memory were still read through a
    stale pointer, it would now hold 7s."""
    keep = [np.full(nbytes // 8 + 1, 7, dtype=np.int64) for _ in range(n)]
    keep += [ca.full((nbytes // 8 + 1,), 7.0, dtype=ca.float64) for _ in range(n)]
    return keep


# ---------------------------------------------------------------------------------------
# NumPy
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", DT)
def test_from_numpy_shares_memory_both_ways(dt):
    a = np.arange(12).reshape(3, 4).astype(dt)
    t = ca.from_numpy(a)
    assert t.dtype == {np.float32: ca.float32, np.float64: ca.float64, np.int64: ca.int64}[dt]
    assert tuple(t.shape) == (3, 4)
    a[1, 2] = 42
    assert to_np(t)[1, 2] == 42, "write through numpy not seen by the tensor"
    t.zero_()
    assert (a == 0).all(), "write through the tensor not seen by numpy"


def test_from_numpy_keeps_array_alive_then_releases_it():
    a = np.arange(1000, dtype=np.float64)
    wa = weakref.ref(a)
    t = ca.from_numpy(a)
    del a
    gc.collect()
    assert wa() is not None
    _ = churn(20, 8000)
    np.testing.assert_array_equal(to_np(t), np.arange(1000, dtype=np.float64))
    r = t.reshape(10, 100)  # a view shares the storage (and the array)
    del t
    gc.collect()
    assert wa() is not None
    del r
    gc.collect()
    assert wa() is None, "the numpy array leaked after the last tensor view died"


def test_numpy_is_zero_copy_and_keeps_tensor_alive():
    t = ca.arange(0.0, 1000.0, 1.0, dtype=ca.float64)
    n = t.numpy()
    n[3] = -1.0
    assert to_np(t)[3] == -1.0, "numpy() must be a view"
    t.fill_(2.0)
    assert (n == 2.0).all()
    wt = weakref.ref(t)
    del t
    gc.collect()
    _ = churn(20, 8000)
    assert (n == 2.0).all(), "the numpy view must keep the tensor's memory alive"
    del n
    gc.collect()
    assert wt() is None, "the tensor leaked after its numpy view died"


def test_np_asarray_zero_copy():
    t = ca.zeros(4, 5)
    a = np.asarray(t)
    assert a.shape == (4, 5) and a.dtype == np.float32
    a[2, 3] = 9.0
    assert to_np(t)[2, 3] == 9.0
    assert np.shares_memory(a, t.numpy())


def test_np_asarray_of_non_contiguous_view():
    base = ca.tensor(np.arange(12.0).reshape(3, 4))
    v = base.t()
    a = np.asarray(v)
    np.testing.assert_array_equal(a, np.arange(12.0).reshape(3, 4).T)
    assert a.strides == (8, 32), a.strides
    a[0, 1] = 100.0  # element (1, 0) of base
    assert to_np(base)[1, 0] == 100.0


def test_memoryview_buffer_protocol():
    if STANDIN:
        pytest.skip("torch tensors do not export the buffer protocol")
    t = ca.tensor(np.arange(6.0).reshape(2, 3))
    m = memoryview(t)
    assert m.format in ("d", "<d", "=d") and m.shape == (2, 3) and m.strides == (24, 8)
    assert not m.readonly
    m2 = memoryview(ca.tensor(np.arange(3, dtype=np.int64)))
    assert m2.format in ("q", "l", "<q", "=q")


def test_from_numpy_strided_view_zero_copy():
    a = np.arange(24.0).reshape(4, 6)
    v = a[:, ::2]
    t = ca.from_numpy(v)
    assert not t.is_contiguous()
    np.testing.assert_array_equal(to_np(t), v)
    v[1, 1] = -5.0
    assert to_np(t)[1, 1] == -5.0
    # ops on the strided tensor read the right elements
    np.testing.assert_array_equal(to_np(t * 2.0), v * 2.0)


def test_from_numpy_transposed():
    a = np.arange(6.0).reshape(2, 3).T
    t = ca.from_numpy(a)
    np.testing.assert_array_equal(to_np(t.contiguous()), a)
    np.testing.assert_array_equal(to_np(t.sum(0)), a.sum(0))


@pytest.mark.parametrize("make", [lambda: np.arange(6.0)[::-1],
                                  lambda: np.arange(12.0).reshape(3, 4)[:, ::-1]],
                         ids=["1d", "2d"])
def test_negative_strides_value_error(make):
    with pytest.raises(ValueError):
        ca.from_numpy(make())


def test_tensor_from_numpy_copies():
    a = np.arange(4.0)
    t = ca.tensor(a)
    a[0] = 10.0
    assert to_np(t)[0] == 0.0, "cagrad.tensor(ndarray) must copy"


def test_numpy_roundtrip_dtypes_and_scalars():
    for dt, cdt in ((np.float32, ca.float32), (np.float64, ca.float64), (np.int64, ca.int64)):
        a = np.array([[1, 2], [3, 4]], dtype=dt)
        t = ca.from_numpy(a)
        assert t.dtype == cdt and t.numpy().dtype == dt
    z = ca.tensor(np.float64(3.5))
    assert tuple(z.shape) == () and z.item() == 3.5


def test_tolist_and_item():
    t = ca.tensor(np.arange(6.0).reshape(2, 3))
    assert t.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    i = ca.tensor(np.array([1, 2], dtype=np.int64))
    assert i.tolist() == [1, 2] and all(type(v) is int for v in i.tolist())
    assert type(ca.tensor([2.5]).item()) is float
    assert type(ca.tensor([3]).item()) is int


# ---------------------------------------------------------------------------------------
# DLPack
# ---------------------------------------------------------------------------------------
def test_dlpack_device():
    assert tuple(ca.zeros(2).__dlpack_device__()) == (1, 0)


@pytest.mark.parametrize("dt", ["float32", "float64", "int64"])
def test_torch_from_dlpack_of_cagrad_shares_memory(dt):
    c = ca.tensor(np.arange(12).reshape(3, 4).astype(dt))
    t = torch.from_dlpack(c)
    assert str(t.dtype) == f"torch.{dt}" and tuple(t.shape) == (3, 4)
    np.testing.assert_array_equal(t.numpy(), np.arange(12).reshape(3, 4))
    t[1, 1] = 99  # write through torch
    assert to_np(c)[1, 1] == 99
    c.fill_(5)  # write through cagrad
    assert (t == 5).all()


@pytest.mark.parametrize("dt", ["float32", "float64", "int64"])
def test_cagrad_from_dlpack_of_torch_shares_memory(dt):
    t = torch.arange(12).reshape(3, 4).to(getattr(torch, dt))
    c = ca.from_dlpack(t)
    assert c.dtype == getattr(ca, dt) and tuple(c.shape) == (3, 4)
    np.testing.assert_array_equal(to_np(c), np.arange(12).reshape(3, 4))
    t[0, 3] = -7
    assert to_np(c)[0, 3] == -7
    c.zero_()
    assert (t == 0).all()


def test_cagrad_from_dlpack_capsule_directly():
    t = torch.arange(5.0)
    c = ca.from_dlpack(t.__dlpack__())
    np.testing.assert_array_equal(to_np(c), np.arange(5.0, dtype=np.float32))


def test_dlpack_consumer_outlives_cagrad_producer():
    c = ca.tensor(np.arange(4096.0))
    t = torch.from_dlpack(c)
    del c
    gc.collect()
    _ = churn(20, 4096 * 8)
    np.testing.assert_array_equal(t.numpy(), np.arange(4096.0))
    del t
    gc.collect()


def test_dlpack_consumer_outlives_torch_producer():
    t = torch.arange(4096.0, dtype=torch.float64)
    c = ca.from_dlpack(t)
    del t
    gc.collect()
    _ = [torch.full((4096,), 7.0, dtype=torch.float64) for _ in range(20)]
    np.testing.assert_array_equal(to_np(c), np.arange(4096.0))
    # ops and autograd on the borrowed memory
    c2 = c * 2.0
    np.testing.assert_array_equal(to_np(c2), 2 * np.arange(4096.0))
    del c, c2
    gc.collect()


def test_dlpack_producer_released_when_consumer_dies():
    """numpy's DLPack export holds the ndarray: the array lives exactly as long as the
    cagrad tensor made from it (the producer's deleter runs when the consumer dies)."""
    a = np.arange(10.0)
    wa = weakref.ref(a)
    c = ca.from_dlpack(a)
    del a
    gc.collect()
    assert wa() is not None, "the consumer must keep the producer alive"
    v = c[2:5]  # a view keeps the same storage
    del c
    gc.collect()
    assert wa() is not None, "a view of the consumer must keep the producer alive"
    np.testing.assert_array_equal(to_np(v), [2.0, 3.0, 4.0])
    del v
    gc.collect()
    assert wa() is None, "the DLPack deleter never ran: the producer leaked"


def test_dlpack_non_contiguous_export():
    base = ca.tensor(np.arange(12.0).reshape(3, 4))
    v = base.t()
    t = torch.from_dlpack(v)
    assert tuple(t.shape) == (4, 3) and t.stride() == (1, 4)
    np.testing.assert_array_equal(t.numpy(), np.arange(12.0).reshape(3, 4).T)
    t[2, 0] = -1.0  # base[0, 2]
    assert to_np(base)[0, 2] == -1.0
    s = base[:, 1::2]
    ts = torch.from_dlpack(s)
    assert ts.stride() == (4, 2)
    np.testing.assert_array_equal(ts.numpy(), np.arange(12.0).reshape(3, 4)[:, 1::2])


def test_dlpack_non_contiguous_import():
    t = torch.arange(12.0).reshape(3, 4)
    c = ca.from_dlpack(t.t())
    assert tuple(c.shape) == (4, 3) and not c.is_contiguous()
    np.testing.assert_array_equal(to_np(c), np.arange(12.0, dtype=np.float32).reshape(3, 4).T)
    np.testing.assert_allclose(to_np(c.sum(1)), t.t().sum(1).numpy())


def test_dlpack_to_numpy():
    c = ca.tensor(np.arange(6.0).reshape(2, 3))
    n = np.from_dlpack(c)
    np.testing.assert_array_equal(n, np.arange(6.0).reshape(2, 3))
    n[0, 0] = 5.0  # numpy's from_dlpack views are writable when the producer allows it
    assert to_np(c)[0, 0] == 5.0


def test_dlpack_from_numpy_to_cagrad():
    a = np.arange(6.0).reshape(2, 3)
    c = ca.from_dlpack(a)
    np.testing.assert_array_equal(to_np(c), a)
    a[1, 2] = 50.0
    assert to_np(c)[1, 2] == 50.0


def test_dlpack_versioned_capsule():
    if STANDIN:
        pytest.skip("cagrad's capsule names")
    c = ca.zeros(3)
    cap = c.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" in repr(cap)
    cap0 = c.__dlpack__()
    assert '"dltensor"' in repr(cap0)
    # both capsules can be consumed
    n = ca.from_dlpack(cap)
    n.fill_(3.0)
    assert (to_np(c) == 3.0).all()
    ca.from_dlpack(cap0)


def test_dlpack_capsule_cannot_be_consumed_twice():
    c = ca.zeros(3)
    cap = c.__dlpack__()
    torch.from_dlpack(cap)
    with pytest.raises((ValueError, RuntimeError, BufferError)):
        ca.from_dlpack(cap)


def test_dlpack_requires_grad_export_is_detached():
    c = ca.ones(3, requires_grad=True)
    t = torch.from_dlpack(c.detach())
    assert not t.requires_grad
    np.testing.assert_array_equal(t.numpy(), np.ones(3, np.float32))


@needs_cagrad
def test_dlpack_unsupported_dtype_is_error():
    t = torch.arange(4, dtype=torch.int32)
    with pytest.raises((ValueError, BufferError, TypeError)):
        ca.from_dlpack(t)
