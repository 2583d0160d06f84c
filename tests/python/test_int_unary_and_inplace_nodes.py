"""Integer and bool tensors through float math ops, as torch promotes them (to the default
float dtype), relu keeping int64, in-place float ops refusing an int64 self, and the node an
in-place op leaves as grad_fn (the op's own, as torch's, not a copy node over it)."""

import pytest
import torch

from helpers import assert_close, ca

_PROMOTED = "sqrt rsqrt exp log sin cos tanh sigmoid".split()


@pytest.mark.parametrize("name", _PROMOTED)
@pytest.mark.parametrize("kind", ["int64", "bool"])
def test_float_math_promotes_integer_inputs(name, kind):
    values = [4, 1, 9] if kind == "int64" else [True, False, True]
    for L in (ca, torch):
        x = L.tensor(values)
        r = getattr(L, name)(x)
        m = getattr(x, name)()
        assert str(r.dtype).split(".")[-1] == "float32" == str(m.dtype).split(".")[-1]
    assert_close(getattr(ca, name)(ca.tensor(values)), getattr(torch, name)(torch.tensor(values)))


def test_promotion_follows_the_default_dtype():
    for L in (ca, torch):
        L.set_default_dtype(L.float64)
        try:
            assert L.sqrt(L.tensor([4])).dtype == L.float64
        finally:
            L.set_default_dtype(L.float32)


def test_relu_keeps_int64():
    for L in (ca, torch):
        x = L.tensor([4, -1, 0])
        for r in (L.relu(x), x.relu(), L.nn.functional.relu(x)):
            assert r.dtype == L.int64 and r.tolist() == [4, 0, 0]


@pytest.mark.parametrize("name", ["sqrt_", "exp_", "sin_"])
def test_inplace_float_op_refuses_int64_self(name):
    for L in (ca, torch):
        x = L.tensor([4, 1])
        with pytest.raises(RuntimeError, match="result type Float can't be cast to the "
                                               "desired output type Long"):
            getattr(x, name)()
        assert x.tolist() == [4, 1]


_INPLACE = {
    "sqrt_": lambda L, y, x: y.sqrt_(),
    "exp_": lambda L, y, x: y.exp_(),
    "clamp_": lambda L, y, x: y.clamp_(0, 1.5),
    "masked_fill_": lambda L, y, x: y.masked_fill_(L.tensor([True, False, False]), 0.0),
}


@pytest.mark.parametrize("name", list(_INPLACE))
@pytest.mark.parametrize("compiled", [False, True])
def test_inplace_op_node_is_the_ops_own(name, compiled):
    out = {}
    for L in (ca, torch):
        x = L.tensor([4.0, 1.0, -2.0], requires_grad=True)
        y = x * 1
        _INPLACE[name](L, y, x)
        node = y.grad_fn
        nxt = node.next_functions[0][0]
        if L is ca and compiled:
            with ca.compiled_autograd.enable():
                y.sum().backward()
        else:
            y.sum().backward()
        out[L.__name__] = (node.name(), nxt.name(), x.grad)
    assert out["cagrad"][:2] == out["torch"][:2]
    assert_close(out["cagrad"][2], out["torch"][2], msg=name)


@pytest.mark.parametrize("compiled", [False, True])
def test_composite_inplace_op_whose_inner_op_saved_self(compiled):
    # clamp_ with tensor bounds is maximum then minimum here: maximum saves self, so self
    # must not take the result in place before a copy is made (ca_tensor_rebase_since_)
    out = {}
    for L in (ca, torch):
        x = L.tensor([4.0, 1.0, -2.0, 0.5], requires_grad=True)
        y = x * 3
        y.clamp_(L.tensor([0.0, 0.0, -7.0, 2.0]), L.tensor(5.0))
        if L is ca and compiled:
            with ca.compiled_autograd.enable():
                (y * y).sum().backward()
        else:
            (y * y).sum().backward()
        out[L.__name__] = (y.detach(), x.grad)
    assert_close(out["cagrad"][0], out["torch"][0])
    assert_close(out["cagrad"][1], out["torch"][1])
