"""A port of PyTorch's TestCompiledAutograd to cagrad, part 3: training loops with nn
modules and optimizers, double backward, no_grad / detach / views / in-place ops,
torch.utils.checkpoint, saved-tensor hooks, graph breaks in the forward and the verbose
log's cache-miss lines.

Run like part 1 (compiled_port_helpers.check: torch, cagrad eager, cagrad compiled).
"""

import os
import re
import subprocess
import sys

import pytest

import cagrad
from compiled_port_helpers import check
from helpers import needs_cagrad, this_python_env

pytestmark = needs_cagrad

DTYPES = ["float32", "float64"]


def grads_of(model):
    return [p.grad for p in model.parameters()]


# --- nn modules and optimizers ----------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_batchnorm_relu_training_steps(dtype):
    def fn(d):
        nn = d.L.nn
        model = d.init(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4),
                                     nn.ReLU(), nn.Conv2d(4, 2, 3)))
        for _ in range(3):
            model(d.randn(2, 3, 6, 6)).pow(2).mean().backward()
            yield from grads_of(model)
            yield model[1].running_mean
            model.zero_grad()
    check(fn, dtype=dtype, captures=1, hits=2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layernorm_gelu_linear(dtype):
    def fn(d):
        nn = d.L.nn
        model = d.init(nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.GELU(),
                                     nn.Linear(8, 3)))
        for b in (4, 4, 7):
            model(d.randn(b, 6)).sum().backward()
            yield from grads_of(model)
            model.zero_grad(set_to_none=True)
    check(fn, dtype=dtype, captures=2, hits=1)


def test_embedding_with_cross_entropy():
    def fn(d):
        L = d.L
        emb = d.init(L.nn.Embedding(10, 5))
        head = d.init(L.nn.Linear(5, 10))
        for _ in range(3):
            idx = d.randint(10, 2, 6)
            logits = head(emb(idx)).reshape(-1, 10)
            loss = L.nn.functional.cross_entropy(logits, d.randint(10, 12))
            loss.backward()
            yield loss
            yield emb.weight.grad
            yield head.weight.grad
            emb.zero_grad()
            head.zero_grad()
    check(fn, captures=1, hits=2)


def test_lstm_sequence_loss():
    def fn(d):
        L = d.L
        lstm = d.init(L.nn.LSTM(3, 4, batch_first=True))
        for _ in range(2):
            out, (h, c) = lstm(d.randn(2, 5, 3))
            (out.pow(2).sum() + h.sum() + c.sum()).backward()
            yield from grads_of(lstm)
            lstm.zero_grad()
    check(fn, captures=1, hits=1)


def test_gru_then_linear_dtype64():
    def fn(d):
        L = d.L
        gru = d.init(L.nn.GRU(3, 4))
        head = d.init(L.nn.Linear(4, 1))
        out, h = gru(d.randn(4, 2, 3))
        head(out).sum().backward()
        yield from grads_of(gru)
        yield from grads_of(head)
    check(fn, dtype="float64")


@pytest.mark.parametrize("opt_name", ["SGD", "Adam", "AdamW"])
def test_optimizer_steps_in_a_loop(opt_name):
    def fn(d):
        L = d.L
        model = d.mlp(width=5)
        kwargs = {"lr": 0.05, "momentum": 0.9} if opt_name == "SGD" else {"lr": 0.01}
        opt = getattr(L.optim, opt_name)(model.parameters(), **kwargs)
        for _ in range(5):
            opt.zero_grad()
            loss = (model(d.randn(6, 5)) - d.randn(6, 5)).pow(2).mean()
            loss.backward()
            opt.step()
            yield loss
        yield from (p.detach() for p in model.parameters())
    check(fn, captures=1, hits=4)


def test_clip_grad_norm_between_backward_and_step():
    def fn(d):
        L = d.L
        model = d.mlp()
        opt = L.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            (model(d.randn(3, 4)) * 10).pow(2).sum().backward()
            yield L.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        yield from (p.detach() for p in model.parameters())
    check(fn, captures=1, hits=2)


def test_module_full_backward_hook():
    def fn(d):
        L = d.L
        lin = d.init(L.nn.Linear(4, 3))
        seen = []

        def hook(module, grad_input, grad_output):
            seen.append(grad_output[0].clone())
            return (grad_input[0] * 2,)

        lin.register_full_backward_hook(hook)
        x = d.randn(2, 4, requires_grad=True)
        L.tanh(lin(x)).sum().backward()
        yield x.grad
        yield lin.weight.grad
        yield from seen
    check(fn)


# --- double backward --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_double_backward_gradient_penalty(dtype):
    def fn(d):
        L = d.L
        model = d.init(L.nn.Sequential(L.nn.Linear(3, 8), L.nn.Tanh(), L.nn.Linear(8, 1)))
        for _ in range(3):
            x = d.randn(5, 3, requires_grad=True)
            out = model(x).sum()
            (gx,) = L.autograd.grad(out, x, create_graph=True)
            penalty = (gx.norm(2, dim=1) - 1).pow(2).mean()
            (out + penalty).backward()
            yield penalty
            yield from grads_of(model)
            model.zero_grad()
    # each step: the create_graph grad and the backward through it, two graphs in all
    check(fn, dtype=dtype, captures=2, hits=4)


def test_hessian_vector_product():
    def fn(d):
        L = d.L
        w = d.randn(4, requires_grad=True)
        for _ in range(2):
            v = d.randn(4)
            loss = (L.sin(w) * w.pow(3)).sum()
            (g,) = L.autograd.grad(loss, w, create_graph=True)
            (hv,) = L.autograd.grad(g, w, grad_outputs=v)
            yield g
            yield hv
    check(fn, dtype="float64", captures=2, hits=2)


def test_backward_create_graph_grad_is_differentiable():
    def fn(d):
        x = d.randn(3, requires_grad=True)
        (x ** 3).sum().backward(create_graph=True)
        yield x.grad.requires_grad
        g = x.grad
        x.grad = None
        g.sum().backward()
        yield x.grad
    check(fn, dtype="float64", captures=2)


# --- grad mode, detach, views, in-place -------------------------------------------------


def test_no_grad_inside_forward():
    def fn(d):
        L = d.L
        model = d.mlp()
        for _ in range(2):
            x = d.randn(3, 4)
            with L.no_grad():
                scale = model[0](x).abs().mean()
            (model(x) * scale).sum().backward()
            yield scale
            yield from grads_of(model)
            model.zero_grad()
    check(fn, captures=1, hits=1)


def test_detach_cuts_the_graph():
    def fn(d):
        w = d.randn(4, 4, requires_grad=True)
        for _ in range(2):
            h = d.randn(2, 4) @ w
            target = h.detach() * 2
            ((h - target) ** 2).sum().backward()
            yield w.grad
            w.grad = None
    check(fn, captures=1, hits=1)


def test_views_transpose_slice_expand():
    def fn(d):
        x = d.randn(4, 6, requires_grad=True)
        for _ in range(2):
            a = x.t()[1:5].reshape(2, 2, 4)
            b = x[:, :1].expand(4, 6)
            (a.sum(0).pow(2).sum() + (b * x).sum() + x.view(-1)[::3].sum()).backward()
            yield x.grad
            x.grad = None
    check(fn, captures=1, hits=1)


def test_inplace_ops_on_intermediates():
    def fn(d):
        L = d.L
        x = d.randn(5, requires_grad=True)
        for _ in range(2):
            y = x * 2
            y.mul_(x)
            y.add_(1.0).relu_()
            z = L.sigmoid(y) + 0.0  # sigmoid saves its result: change a copy
            z.sub_(0.5)
            z.sum().backward()
            yield x.grad
            x.grad = None
    check(fn, captures=1, hits=1)


def test_slice_assignment_on_non_leaf():
    def fn(d):
        x = d.randn(4, 4, requires_grad=True)
        v = d.randn(2, 4, requires_grad=True)
        for _ in range(2):
            y = x * 1.5
            y[:, 0] = 0.0
            y[1:3] = v * 2
            y.exp().sum().backward()
            yield x.grad
            yield v.grad
            x.grad = v.grad = None
    check(fn, captures=1, hits=1)


def test_inplace_on_view_of_non_leaf():
    def fn(d):
        x = d.randn(4, 4, requires_grad=True)
        for _ in range(2):
            y = x.clone()
            y[1:3].mul_(3.0)
            y.exp().sum().backward()
            yield x.grad
            x.grad = None
    check(fn, captures=1, hits=1)


def test_setitem_with_mask():
    def fn(d):
        x = d.randn(6, requires_grad=True)
        y = x * 2
        mask = y > 0
        y[mask] = 0.0
        (y * y).sum().backward()
        yield x.grad
    check(fn)


def test_modified_saved_tensor_raises_in_compiled_too():
    x = cagrad.randn(3, requires_grad=True)
    y = x.exp()
    z = y * y
    y.add_(1.0)
    with cagrad.compiled_autograd.enable():
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            z.sum().backward()


# --- checkpointing, saved-tensor hooks, random numbers ----------------------------------


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpointing_simple(use_reentrant):
    def fn(d):
        L = d.L
        from_lib = __import__(L.__name__ + ".utils.checkpoint", fromlist=["checkpoint"])
        model = d.init(L.nn.Sequential(L.nn.Linear(4, 8), L.nn.ReLU(), L.nn.Linear(8, 4)))
        for _ in range(3):
            x = d.randn(3, 4, requires_grad=True)
            out = from_lib.checkpoint(model, x, use_reentrant=use_reentrant)
            out.pow(2).sum().backward()
            yield x.grad
            yield from grads_of(model)
            model.zero_grad()
    c = check(fn, captures=1, hits=2)
    if use_reentrant:
        assert c["custom_callouts"] == 1  # the block is one custom-Function call-out


def test_checkpoint_with_dropout_replays_rng():
    # test_trace_run_with_rng_state's idea on CPU: a checkpointed block with random draws
    # is recomputed with the same draws. torch and cagrad draw different masks, so
    # the case compares compiled with eager cagrad only.
    def fn(d):
        L = d.L
        L.manual_seed(7)
        lin = d.init(L.nn.Linear(6, 6))
        drop = L.nn.Dropout(0.5)
        x = d.randn(4, 6, requires_grad=True)
        out = L.utils.checkpoint.checkpoint(lambda t: drop(lin(t)), x, use_reentrant=False)
        out.sum().backward()
        yield out
        yield x.grad
        yield lin.weight.grad
    check(fn, reference=False)


def test_sdpa_with_checkpoint():
    def fn(d):
        L = d.L
        F = L.nn.functional

        def sdpa(q, k):
            return F.scaled_dot_product_attention(q, k, k, is_causal=True)

        qs = [d.randn(1, 1, 2, 2, requires_grad=True) for _ in range(2)]
        ks = [d.randn(1, 1, 2, 2, requires_grad=True) for _ in range(2)]
        y1 = sdpa(qs[0], ks[0])
        y2 = L.utils.checkpoint.checkpoint(sdpa, qs[1], ks[1], use_reentrant=False)
        z = L.matmul(y1 * y2, y1 * y2)
        z.sum().backward()
        yield z
        yield from (t.grad for t in qs + ks)
    check(fn)


def test_saved_tensors_hooks_pack_unpack():
    def fn(d):
        L = d.L
        counts = {"pack": 0, "unpack": 0}

        def pack(t):
            counts["pack"] += 1
            return t * 1.0

        def unpack(t):
            counts["unpack"] += 1
            return t

        x = d.randn(4, requires_grad=True)
        for _ in range(2):
            with L.autograd.graph.saved_tensors_hooks(pack, unpack):
                y = L.sin(x) * x
            y.sum().backward()
            yield x.grad
            x.grad = None
        yield counts["pack"]
        yield counts["unpack"]
    check(fn, captures=1, hits=1)


def test_dropout_in_training_loop_compiled_matches_eager():
    def fn(d):
        L = d.L
        L.manual_seed(3)
        model = d.init(L.nn.Sequential(L.nn.Linear(5, 5), L.nn.Dropout(0.3),
                                       L.nn.Linear(5, 1)))
        for _ in range(3):
            model(d.randn(4, 5)).sum().backward()
            yield from grads_of(model)
            model.zero_grad()
    check(fn, reference=False, captures=1, hits=2)


# --- graph breaks in the forward --------------------------------------------------------


def test_graph_breaks_in_forward():
    # A forward broken by graph_break() / .item(): the backward is still one capture.
    def fn(d):
        L = d.L
        model = d.mlp(depth=3)
        for _ in range(3):
            h = model[:2](d.randn(3, 4))
            if L is cagrad:
                L.graph_break()
            scale = 1.0 + float(h.abs().max().item() > 100.0)
            model[2:](h * scale).sum().backward()
            yield from grads_of(model)
            model.zero_grad()
    check(fn, captures=1, hits=2)


def test_data_dependent_python_branch_recompiles_per_path():
    def fn(d):
        L = d.L
        w = d.randn(3, requires_grad=True)
        for step in range(4):
            y = w * 2
            y = L.sin(y) if step % 2 == 0 else L.cos(y)
            y.sum().backward()
            yield w.grad
            w.grad = None
    check(fn, captures=2, hits=2)


# --- logs -------------------------------------------------------------------------------


_LOG_SCRIPT = """
import cagrad as torch
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(),
                            torch.nn.Linear(4, 4), torch.nn.ReLU())
with torch.compiled_autograd.enable():
    for b in (10, 11, 12):
        model.zero_grad()
        model(torch.randn(b, 4)).sum().backward()
print(dict(torch.compiled_autograd.counters))
"""


def test_verbose_logs_cache_miss_reasons():
    # test_verbose_logs_cpp: the first miss names a new node, the second the changed size.
    env = this_python_env()
    env["CAGRAD_LOGS"] = "compiled_autograd_verbose"
    done = subprocess.run([sys.executable, "-c", _LOG_SCRIPT], capture_output=True, text=True,
                          env=env, timeout=120, cwd=os.getcwd())
    assert done.returncode == 0, done.stderr
    log = done.stderr
    # the lines of PyTorch's current compiled-autograd log
    assert "Cache miss due to new autograd node: GraphRoot (NodeCall 0)" in log
    assert re.search(r"Cache miss due to \d+ changed tensor shapes \(total of \d+\): "
                     r"sizes\[\d+\]", log), log
    assert "'captures': 2" in done.stdout
