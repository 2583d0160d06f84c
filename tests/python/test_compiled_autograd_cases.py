"""Cases in the style of PyTorch's compiled-autograd tests (TestCompiledAutograd), written
for cagrad: each runs a training-like function eagerly and then under
compiled_autograd.enable(), compares every yielded gradient, and checks the capture count
(new models with new parameters and new hooks on the same graph hit the cache)."""

import numpy as np
import pytest

import cagrad as torch
from helpers import needs_cagrad

pytestmark = needs_cagrad


def hook1(grad):
    return grad * 2


def hook2(grads):
    return (grads[0] + 1,)


def hook3(gI, gO):
    return (torch.sin(gI[0]) + gO[0],)


def check(fn, captures=1):
    torch.manual_seed(123)
    expected = [np.array(g.numpy()) for g in fn()]
    torch.compiled_autograd.reset()
    torch.manual_seed(123)
    with torch.compiled_autograd.enable():
        actual = [np.array(g.numpy()) for g in fn()]
    assert len(expected) == len(actual)
    for e, a in zip(expected, actual):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
    c = torch.compiled_autograd.counters
    assert c["captures"] == captures, dict(c)
    assert c["eager_fallbacks"] == 0, dict(c)


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4),
                               torch.nn.ReLU())


def test_basic_and_cache_hit():
    def fn():
        for _ in range(3):
            model = mlp()
            model(torch.randn([2, 4])).sum().backward()
            yield from (model[0].weight.grad, model[0].bias.grad, model[2].weight.grad,
                        model[2].bias.grad)
    check(fn)


@pytest.mark.parametrize("which", ["tensor_hook", "node_prehook", "node_posthook"])
def test_hooks(which):
    def fn():
        for _ in range(3):
            model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
            x = torch.randn([1, 4])
            if which == "tensor_hook":
                model[0].weight.register_hook(hook1)
            result = model(x).sum()
            if which == "node_prehook":
                result.grad_fn.register_prehook(hook2)
            if which == "node_posthook":
                result.grad_fn.register_hook(hook3)
            result.backward()
            yield model[0].weight.grad
            yield model[0].bias.grad
    check(fn)


def test_reorder_acc_grad_conv():
    def fn():
        model = torch.nn.Sequential(torch.nn.Conv2d(4, 4, 3, bias=True),
                                    torch.nn.Conv2d(4, 4, 3, bias=True))
        x = torch.randn([1, 4, 12, 12])
        model(x).sum().backward()
        yield from (p.grad for p in model.parameters())
    check(fn)


def test_accumulate_grad_post_hook_divides_grad():
    def fn():
        fc1 = torch.nn.Linear(16, 16, bias=False)
        fc2 = torch.nn.Linear(16, 16, bias=False)
        accs, handles = [], []
        for p in (fc1.weight, fc2.weight):
            acc = p.expand_as(p).grad_fn.next_functions[0][0]

            def after(*unused, p=p):
                p.grad = p.grad / 4.0
            accs.append(acc)
            handles.append(acc.register_hook(after))
        fc2(fc1(torch.randn([8, 16]))).sum().backward()
        yield fc1.weight.grad
        yield fc2.weight.grad
    check(fn)


def test_node_posthooks_on_two_nodes():
    def fn():
        x = torch.randn([1, 4, 8, 8], requires_grad=True)
        y = torch.sigmoid(x)
        z = torch.tanh(y)
        assert isinstance(z.grad_fn, torch.autograd.graph.Node)
        z.grad_fn.register_hook(lambda gI, gO: (gO[0] * 2,))
        y.grad_fn.register_hook(lambda gI, gO: (gI[0] * 2,))
        z.sum().backward(retain_graph=True)
        yield x.grad
    check(fn)


def test_conv_posthook_doubles_weight_grad():
    def fn():
        conv = torch.nn.Conv2d(4, 4, 3, bias=False)
        x = torch.randn([1, 4, 10, 10], requires_grad=True)
        y = conv(x)
        y.grad_fn.register_hook(lambda gI, gO: (gI[0], gI[1] * 2, gI[2]))
        y.sum().backward(retain_graph=True)
        yield x.grad
        yield conv.weight.grad
    check(fn)


def test_all_backward_hooks_in_order():
    def fn():
        calls = []
        w = torch.nn.Parameter(torch.randn(10, 10))
        x = torch.randn(10, 10)

        def tensor_hook(grad):
            calls.append("tensor")
            return grad.sub(2.0)

        def acc_pre(grad_out):
            calls.append("acc_pre")
            return (grad_out[0].div(5.0),)

        def post_acc(t):
            calls.append("post_acc")
            with torch.no_grad():
                t.grad.add_(3.0)

        w.register_hook(tensor_hook)
        acc = w.expand_as(w).grad_fn.next_functions[0][0]
        acc.register_prehook(acc_pre)
        w.register_post_accumulate_grad_hook(post_acc)
        (x @ w).sum().backward()
        assert calls == ["tensor", "acc_pre", "post_acc"], calls
        yield w.grad
    check(fn)
