"""Tensor.share_memory_() / Module.share_memory() and cagrad.multiprocessing's descriptor
passing, as Hogwild training uses them: values survive the move, a forked child and a
spawned one write the parent's memory, Parameter and requires_grad cross over, tensors that
are not shared still cross as copies, and torch's refusal for a non-leaf that requires
grad. Compared with torch 2.13 where the result is deterministic."""
import multiprocessing as mp

import numpy as np
import pytest
import torch
from helpers import assert_close, ca

import cagrad.multiprocessing as cmp


def _add_one(t):
    t.add_(1)


def _scale_in_child(t, q):
    with ca.no_grad():
        t.mul_(10)
    q.put((type(t).__name__, t.requires_grad, t.is_shared()))


def test_share_memory_keeps_values_and_views():
    for L in (ca, torch):
        t = L.arange(6.0).reshape(2, 3)
        v = t[:, 1]
        assert not t.is_shared()
        assert t.share_memory_() is t
        assert t.is_shared() and v.is_shared()
        assert t.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
        v.mul_(2)
        assert t.tolist() == [[0.0, 2.0, 2.0], [3.0, 8.0, 5.0]]


def test_forked_child_writes_parent_memory():
    t = ca.zeros(4)
    t.share_memory_()
    p = mp.get_context("fork").Process(target=_add_one, args=(t[1:3],))
    p.start()
    p.join()
    assert p.exitcode == 0
    assert t.tolist() == [0.0, 1.0, 1.0, 0.0]


def test_spawned_child_maps_the_same_memory():
    w = ca.nn.Parameter(ca.ones(2, 3))
    w.share_memory_()
    ctx = cmp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_scale_in_child, args=(w, q))
    p.start()
    kind = q.get(timeout=120)
    p.join()
    assert p.exitcode == 0
    assert kind == ("Parameter", True, True)
    assert w.tolist() == [[10.0] * 3] * 2


def test_unshared_tensor_crosses_as_a_copy():
    t = ca.zeros(3)
    ctx = cmp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_scale_in_child, args=(t + 1, q))
    p.start()
    assert q.get(timeout=120)[2] is False
    p.join()
    assert t.tolist() == [0.0, 0.0, 0.0]


def test_non_leaf_requiring_grad_refuses_to_cross():
    from multiprocessing.reduction import ForkingPickler
    x = ca.ones(3, requires_grad=True)
    y = (x * 2).share_memory_()
    with pytest.raises(RuntimeError, match="Cowardly refusing to serialize non-leaf tensor"):
        ForkingPickler.dumps(y)


def _hogwild_worker(model, steps, seed):
    rng = np.random.default_rng(seed)
    opt = ca.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        x = ca.tensor(rng.standard_normal((8, 4)), dtype=ca.float32)
        opt.zero_grad()
        ((model(x) - 1.0) ** 2).mean().backward()
        opt.step()


def test_hogwild_processes_train_one_model():
    """Two processes, one after the other, train a shared model: the parent sees the same
    weights as the same steps taken in-process (sequential, so deterministic)."""
    ca.manual_seed(0)
    model = ca.nn.Linear(4, 2)
    reference = ca.nn.Linear(4, 2)
    reference.load_state_dict(model.state_dict())
    model.share_memory()
    before = model.weight.detach().clone()
    for seed in (1, 2):
        p = mp.get_context("fork").Process(target=_hogwild_worker, args=(model, 3, seed))
        p.start()
        p.join()
        assert p.exitcode == 0
        _hogwild_worker(reference, 3, seed)
    for a, b in zip(model.parameters(), reference.parameters()):
        assert_close(a.detach(), b.detach())
    assert not ca.equal(model.weight.detach(), before)  # the children's steps landed
