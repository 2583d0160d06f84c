"""APIs that the programs of test_programs_wave3.py needed and cagrad lacked or got wrong,
each compared with torch 2.13 (the sparse COO surface itself is in test_sparse.py):

- torch.tensor of any Python sequence (the reinforce example's deque of returns, a range)
  takes torch's default dtypes like a list does: float32 for Python floats, not numpy's
  float64; values and the gradients that flow through such a tensor as a constant, eager
  and compiled;
- the legacy tensor types torch.FloatTensor / DoubleTensor / LongTensor / BoolTensor (the
  gcn example's torch.FloatTensor(array) and torch.LongTensor(labels)): construction from
  data, numpy arrays (int32 too) and sizes, isinstance, t.type(torch.DoubleTensor), and
  torch's errors;
- Tensor.layout (torch.strided) and Tensor.is_sparse (False) of dense tensors.
"""

from collections import deque

import numpy as np
import pytest
import torch

from helpers import assert_close, backward_checked, ca, compiled_ctx

MODES = [pytest.param(False, id="eager"), pytest.param(True, id="compiled")]


# ------------------------------------------------------------ torch.tensor of sequences
@pytest.mark.parametrize("make", [
    lambda: deque([1.0, 2.5, -3.0]),
    lambda: deque([1, 2, 3]),
    lambda: deque([True, False]),
    lambda: range(4),
    lambda: deque([[1.0, 2.0], [3.0, 4.0]]),
], ids=["deque-float", "deque-int", "deque-bool", "range", "deque-nested"])
def test_tensor_of_a_python_sequence_takes_torchs_default_dtypes(make):
    c, t = ca.tensor(make()), torch.tensor(make())
    assert str(c.dtype).split(".")[1] == str(t.dtype).split(".")[1]
    assert_close(c, t)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("compiled", MODES)
def test_normalised_returns_from_a_deque(dtype, compiled):
    """The reinforce example's (returns - mean) / (std + eps) times log-probabilities."""
    rewards = [1.0, 1.0, 0.5, 1.0, 0.25]
    eps = np.finfo(np.float32).eps.item()
    grads, outs = [], []
    for L in (ca, torch):
        default = L.get_default_dtype()
        L.set_default_dtype(getattr(L, dtype))
        try:
            R, returns = 0, deque()
            for r in rewards[::-1]:
                R = r + 0.99 * R
                returns.appendleft(R)
            returns = L.tensor(returns)
            returns = (returns - returns.mean()) / (returns.std() + eps)
            logits = L.tensor(np.random.default_rng(0).standard_normal((5, 2)),
                              dtype=getattr(L, dtype), requires_grad=True)
            logp = logits.log_softmax(1)[:, 0]
            loss = L.cat([(-lp * ret).reshape(1) for lp, ret in zip(logp, returns)]).sum()
            assert loss.dtype == getattr(L, dtype)
            with compiled_ctx(compiled and L is ca):
                if L is ca:
                    backward_checked(loss, compiled)
                else:
                    loss.backward()
        finally:
            L.set_default_dtype(default)
        outs.append(loss)
        grads.append(logits.grad)
    assert_close(outs[0], outs[1])
    assert_close(grads[0], grads[1])


# ------------------------------------------------------------------ legacy tensor types
LEGACY = ["FloatTensor", "DoubleTensor", "LongTensor", "BoolTensor"]


@pytest.mark.parametrize("name", LEGACY)
def test_legacy_types_make_tensors_like_torch(name):
    data = [[1, 0], [3, 4]]
    for make in (lambda L: getattr(L, name)(data),
                 lambda L: getattr(L, name)(np.array(data, dtype=np.int32)),
                 lambda L: getattr(L, name)(np.array(data, dtype=np.int64))):
        c, t = make(ca), make(torch)
        assert str(c.dtype).split(".")[1] == str(t.dtype).split(".")[1]
        assert_close(c, t, check_dtype=False)
    for args in ((2, 3), (ca.Size([4]),), ()):
        targs = tuple(torch.Size(a) if isinstance(a, ca.Size) else a for a in args)
        c, t = getattr(ca, name)(*args), getattr(torch, name)(*targs)
        assert tuple(c.shape) == tuple(t.shape)
        assert str(c.dtype).split(".")[1] == str(t.dtype).split(".")[1]
    assert repr(getattr(ca, name)) == repr(getattr(torch, name))


def test_legacy_types_isinstance_and_type_conversion():
    x = ca.ones(2, 3)
    assert isinstance(x, ca.FloatTensor) and not isinstance(x, ca.DoubleTensor)
    assert isinstance(ca.tensor([1]), ca.LongTensor) and not isinstance(3, ca.LongTensor)
    y = x.type(ca.DoubleTensor)
    assert y.dtype == ca.float64 and y.type() == x.double().type() == "torch.DoubleTensor"
    assert x.type(ca.FloatTensor) is x
    # from a tensor of the same dtype: the same data, not a copy (as in torch)
    z = ca.FloatTensor(x)
    z[0, 0] = 5.0
    assert x[0, 0].item() == 5.0 and not z.requires_grad


def test_legacy_type_errors_match_torchs_types():
    for make in (lambda L: L.LongTensor(L.ones(2)), lambda L: L.FloatTensor(2.5),
                 lambda L: L.FloatTensor(np.array([1.5]), 1)):
        with pytest.raises(TypeError):
            make(torch)
        with pytest.raises(TypeError):
            make(ca)
    with pytest.raises(TypeError, match="data must be a sequence"):
        ca.FloatTensor(2.5)


# ----------------------------------------------------------------------- dense layout
def test_dense_tensors_are_strided_and_not_sparse():
    for L in (ca, torch):
        x = L.ones(2, 2)
        assert x.layout is L.strided and x.is_sparse is False
        assert x.t().layout is L.strided
