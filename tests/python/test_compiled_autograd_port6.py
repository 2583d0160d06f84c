"""A port of PyTorch's TestCompiledAutograd to cagrad, part 6: node hooks on the root
(pre-hooks and post-hooks that return tuples), cagrad.compile around forwards and
backwards, custom Functions whose ctx state changes the cache key step by step, saved
scalars and tensors beside ctx attributes, queue_callback with a graph break in a
backward, reentrant checkpointing, metadata (dtype, views) of custom Function outputs,
and what the verbose log names.

Run like part 1 (compiled_port_helpers.check: torch, cagrad eager, cagrad compiled).
"""

import os
import subprocess
import sys

import pytest

import cagrad
from compiled_port_helpers import check
from helpers import counters, needs_cagrad, this_python_env

pytestmark = needs_cagrad


def _linear_relu(d, width=4):
    nn = d.L.nn
    return d.init(nn.Sequential(nn.Linear(width, width), nn.ReLU()))


# --- node hooks on the root ---------------------------------------------------------------


def test_root_prehook_returning_a_tuple():
    # test_tensor_grad_hook2: a pre-hook on the loss's node changes the seed gradient
    def fn(d):
        for _ in range(3):
            model = _linear_relu(d)
            result = model(d.randn(1, 4)).sum()
            result.grad_fn.register_prehook(lambda grads: (grads[0] + 1,))
            result.backward()
            yield model[0].weight.grad
            yield model[0].bias.grad
    check(fn, captures=1, hits=2)


def test_root_posthook_returning_a_tuple():
    # test_tensor_grad_hook3: a post-hook on the loss's node rewrites its input gradient
    def fn(d):
        L = d.L
        for _ in range(3):
            model = _linear_relu(d)
            result = model(d.randn(1, 4)).sum()
            result.grad_fn.register_hook(lambda gI, gO: (L.sin(gI[0]) + gO[0],))
            result.backward()
            yield model[0].weight.grad
            yield model[0].bias.grad
    check(fn, captures=1, hits=2)


def test_tensor_hook_on_a_weight_each_new_model():
    # test_tensor_grad_hook1: a module-level hook function on fresh weights, three models
    def double(grad):
        return grad * 2

    def fn(d):
        for _ in range(3):
            model = _linear_relu(d)
            model[0].weight.register_hook(double)
            model(d.randn(2, 4)).sum().backward()
            yield model[0].weight.grad
            yield model[0].bias.grad
    check(fn, captures=1, hits=2)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_prehook_and_posthook_on_the_same_root(dtype):
    def fn(d):
        L = d.L
        for _ in range(2):
            w = d.randn(3, requires_grad=True)
            loss = (L.tanh(w) * w).sum()
            loss.grad_fn.register_prehook(lambda grads: (grads[0] * 3,))
            loss.grad_fn.register_hook(lambda gI, gO: (gI[0] - gO[0],))
            loss.backward()
            yield w.grad
    check(fn, dtype=dtype, captures=1, hits=1)


# --- cagrad.compile around forwards and backwards ---------------------------------------


def test_compiled_backward_only_call():
    # test_torch_compile_only_backward_call: compile(lambda: loss.backward()) under enable
    def fn(d):
        L = d.L
        model = d.init(L.nn.Sequential(L.nn.Linear(4, 4), L.nn.Sigmoid()))
        result = model(d.randn(1, 4)).sum()
        L.compile(lambda: result.backward())()
        yield model[0].weight.grad
        yield model[0].bias.grad
    check(fn, captures=1)


def test_compile_without_enable_captures_nothing():
    # test_multiple_torch_compile: only the backward inside enable() is captured
    cagrad.compiled_autograd.reset()
    model = cagrad.nn.Sequential(cagrad.nn.Linear(4, 4), cagrad.nn.Sigmoid())
    model2 = cagrad.nn.Linear(4, 4)
    x = cagrad.randn(1, 4)

    def step(m):
        m(x).sum().backward()

    cagrad.compile(step)(model)
    assert counters()["captures"] == 0
    with cagrad.compiled_autograd.enable():
        cagrad.compile(step)(model2)
    assert counters()["captures"] == 1
    cagrad.compile(step)(model)
    assert counters()["captures"] == 1
    assert model2.weight.grad is not None


def test_compiled_custom_fn_forward_with_graph_break():
    # test_custom_fn_compiled_fw_graph_break: compile(MySin.apply) whose forward prints
    def fn(d):
        L = d.L

        class MySin(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                print("graph break")
                ctx.save_for_backward(x)
                return L.sin(x)

            @staticmethod
            def backward(ctx, gO):
                (x,) = ctx.saved_tensors
                return gO * L.cos(x)

        opt = L.compile(MySin.apply) if L is cagrad else MySin.apply
        for n in (10, 100, 10, 15, 20, 25):
            x = d.arange(n, requires_grad=True)
            opt(x).sum().backward()
            yield x.grad
    check(fn, captures=2, hits=4)


def test_compiled_fn_dynamic_shape_add():
    # test_mismatch_fake_tensor_mode_dynamic_shape: compile(f) with every size dynamic
    def fn(d):
        L = d.L
        for b in (8, 8, 5):
            x = d.rand(b, 16)
            y = d.rand(b, 16, requires_grad=True)

            def f():
                out = x + y
                out.sum().backward()
                return out, y.grad
            yield from (L.compile(f) if L is cagrad else f)()
    check(fn, dynamic=True, captures=1, hits=2)


# --- custom Functions: ctx state step by step -------------------------------------------


def test_custom_fn_ctx_state_changes_each_step():
    # test_autograd_cpp_node_data_dependent, in Python: step 1 adds a ctx attribute
    # (recompile), step 2 turns off materialize_grads (recompile), step 3 is step 2 again
    def fn(d):
        L = d.L
        step = [0]

        class Pair(L.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                ctx.save_for_backward(x, y)
                ctx.flag = True
                if step[0] == 1:
                    ctx.extra = "recompile"
                elif step[0] >= 2:
                    ctx.set_materialize_grads(False)
                step[0] += 1
                return x * 1, y * 1

            @staticmethod
            def backward(ctx, g1, g2):
                x, y = ctx.saved_tensors
                return g1 * (x + y + 1), None

        for _ in range(4):
            x = d.randn(5, 5, requires_grad=True)
            y = d.randn(5, 5)
            out1, out2 = Pair.apply(x, y)
            (out1 + out2).sum().backward()
            yield x.grad
    check(fn, captures=3, hits=1)


def test_custom_fn_saved_scalar_tensor_and_ctx_number():
    # test_cudagraphs_cpu_scalar_used_in_python_custom_op, on the CPU: a saved 0-d tensor and
    # a plain number on ctx both scale the gradient of a sum
    def fn(d):
        L = d.L

        class ScaledSum(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                scalar = L.tensor(5.0, dtype=x.dtype)
                ctx.save_for_backward(x, scalar)
                ctx.factor = 5
                return x.sum()

            @staticmethod
            def backward(ctx, gO):
                x, scalar = ctx.saved_tensors
                return gO * L.ones_like(x) * scalar * ctx.factor

        for _ in range(2):
            x = d.randn(10, requires_grad=True)
            ScaledSum.apply(x).backward()
            yield x.grad
    check(fn, captures=1, hits=1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_custom_fn_output_metadata_of_a_view(dtype):
    # test_custom_fn_output_metadata: an identity Function over a view keeps dtype and
    # shape; the leaf's gradient has the leaf's dtype and shape
    def fn(d):
        L = d.L

        class Id(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x

            @staticmethod
            def backward(ctx, gO):
                return gO

        x = d.arange(9, requires_grad=True)
        out = Id.apply(x.view(3, 3))
        yield out.dtype == d.lib_dtype
        yield tuple(out.shape) == (3, 3)
        (out * d.randn(3, 3)).sum().backward()
        yield x.grad
    check(fn, dtype=dtype, captures=1)


def test_custom_fn_two_classes_alternating_then_reused():
    # test_autograd_cpp_node_id, in Python: one graph per class, reused when it comes back
    def fn(d):
        L = d.L

        def make():
            class Id(L.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    return x * 1

                @staticmethod
                def backward(ctx, gO):
                    return gO

            return Id

        first, second = make(), make()
        for cls in (first, first, second, first, second):
            x = L.ones(4, 4, dtype=d.lib_dtype, requires_grad=True)
            cls.apply(x).sum().backward()
            yield x.grad
    check(fn, captures=2, hits=3)


def test_custom_fn_saved_int_and_float_arguments():
    # test_autograd_cpp_node_saved_int / _float: numbers given to apply() and kept on ctx
    def fn(d):
        L = d.L

        class AddNumbers(L.autograd.Function):
            @staticmethod
            def forward(ctx, x, i, f):
                ctx.save_for_backward(x)
                ctx.i = i
                ctx.f = f
                return x * 1

            @staticmethod
            def backward(ctx, gO):
                (x,) = ctx.saved_tensors
                return gO * (x + ctx.i + ctx.f), None, None

        for i, f in ((1, 1.5), (2, 1.5), (3, 2.5), (1, 1.5)):
            x = L.ones(4, 4, dtype=d.lib_dtype, requires_grad=True)
            AddNumbers.apply(x, i, f).sum().backward()
            yield x.grad
    # the int becomes a size slot on its first change (one recompile); a float keys the
    # trace by value (a recompile per new value, the last step a hit). PyTorch: 1 capture.
    check(fn, captures=3, hits=1)


# --- callbacks, reentrant checkpoint, graph breaks in a backward --------------------------


@pytest.mark.parametrize("with_break", [True, False])
def test_queue_callback_and_graph_break_in_a_backward(with_break):
    # test_callback_graph_break_throws_error: PyTorch refuses this without fullgraph; cagrad
    # calls the backward out (its graph_break has no Dynamo to break; a queued callback
    # must run in every backward, not only at capture) and runs the callback once per
    # backward
    def fn(d):
        L = d.L
        called = [0]

        class MyFunc(L.autograd.Function):
            @staticmethod
            def forward(ctx, inp):
                return inp

            @staticmethod
            @L.autograd.function.once_differentiable
            def backward(ctx, grad):
                L.autograd.Variable._execution_engine.queue_callback(
                    lambda: called.__setitem__(0, called[0] + 1))
                if L is cagrad and with_break:
                    L.graph_break()
                return grad * 2

        for _ in range(2):
            a = d.rand(3, 3, requires_grad=True)
            MyFunc.apply(a).sum().backward()
            yield a.grad
        yield called[0]
    check(fn, captures=1, hits=1)


def test_reentrant_checkpointing_backward():
    # test_reentrant_checkpointing: a use_reentrant=True checkpoint, backward compiled
    def fn(d):
        L = d.L

        def block(x):
            y = x.sin()
            z = y.cos()
            return (y * z).sum()

        for _ in range(2):
            inp = d.rand(10, 10, requires_grad=True)
            out = L.utils.checkpoint.checkpoint(block, inp, use_reentrant=True)
            out.backward()
            yield out
            yield inp.grad
    c = check(fn)
    assert c["captures"] + c["cache_hits"] >= 2


def test_sdpa_causal_with_checkpoint_grads_of_every_input():
    # test_trace_run_with_rng_state: sdpa beside a checkpointed sdpa, product, matmul
    def fn(d):
        L = d.L
        F = L.nn.functional

        def sdpa(q, k):
            return F.scaled_dot_product_attention(q, k, k, is_causal=True)

        qs = [d.randn(1, 1, 2, 2, requires_grad=True) for _ in range(2)]
        ks = [d.randn(1, 1, 4, 2, requires_grad=True) for _ in range(2)]
        y1 = sdpa(qs[0], ks[0])
        y2 = L.utils.checkpoint.checkpoint(sdpa, qs[1], ks[1], use_reentrant=False)
        y = L.mul(y1, y2)
        z = L.matmul(y, y)
        z.sum().backward()
        yield z
        yield from (t.grad for t in qs + ks)
    c = check(fn)
    assert c["captures"] >= 1


def test_backward_in_disabled_inner_function():
    # test_torch_compile_graph_break2: the backward happens in a helper called from the
    # compiled step; it is still the one captured backward
    def fn(d):
        L = d.L
        model = d.init(L.nn.Sequential(L.nn.Linear(4, 4), L.nn.Sigmoid()))
        x = d.randn(1, 4)

        def inner(loss):
            loss.backward()

        def step():
            inner(model(x).sum())

        (L.compile(step) if L is cagrad else step)()
        yield model[0].weight.grad
        yield model[0].bias.grad
    check(fn, captures=1)


def test_reentrant_checkpoint_of_transposed_blocks_training_steps():
    # test_issue106555, small and on the CPU: two residual blocks (one over a transposed
    # input) inside a use_reentrant=True checkpoint, an L1 loss, ten steps
    def fn(d):
        L = d.L
        nn = L.nn
        width = 8

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear_1 = nn.Linear(width, width, bias=True)
                self.linear_2 = nn.Linear(width, width, bias=False)
                self.linear_2_bias = nn.Parameter(L.zeros(width))

            def forward(self, x):
                x2 = L.sigmoid(self.linear_2(x) + self.linear_2_bias)
                return self.linear_1(x) * x2

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.block_1 = Block()
                self.block_2 = Block()

            def forward(self, x):
                return L.utils.checkpoint.checkpoint(self._forward, x, use_reentrant=True)

            def _forward(self, x):
                x = x + self.block_1(x)
                return x + self.block_2(x.transpose(-2, -3)).transpose(-2, -3)

        model = d.init(Model())
        inp = d.randn(1, 3, 4, width, requires_grad=True)
        target = d.randn(1, 3, 4, width)
        for _ in range(3):
            for p in model.parameters():
                p.grad = None
            loss = L.mean(L.abs(target - model(inp.clone())))
            loss.backward()
            yield loss
            yield from (p.grad for p in model.parameters())
    check(fn, captures=1, hits=2)


def test_runs_after_reset_are_captured_again():
    # test_dynamo_flaky_segfault: the same backward, with a reset between two runs
    def fn(d):
        L = d.L
        for step in range(2):
            x = d.randn(10, 30)
            w = d.randn(10, 30, requires_grad=True)
            L.nn.functional.linear(x, w).sum().backward()
            yield w.grad
            if step == 0 and L is cagrad and cagrad._C.compiled_autograd_depth() > 0:
                cagrad.compiled_autograd.reset()
    c = check(fn, captures=1)  # counters restart at the reset: the second run's capture
    assert c["cache_hits"] == 0


def test_enable_accepts_a_compiler_fn_and_ignores_it():
    # test_reentrant_checkpointing passes torch.compile as the compiler: cagrad takes any
    # compiler_fn and compiles the graph itself
    cagrad.compiled_autograd.reset()
    inp = cagrad.rand(10, 10, requires_grad=True)
    with cagrad.compiled_autograd.enable(cagrad.compile):
        (inp.sin() * inp.cos()).sum().backward()
    assert counters()["captures"] == 1
    expected = (inp.detach().cos() ** 2 - inp.detach().sin() ** 2).numpy()
    assert abs(inp.grad.numpy() - expected).max() < 1e-5


# --- the verbose log --------------------------------------------------------------------

_GRAPH_LOG_SCRIPT = """
import os
import cagrad as torch
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(),
                            torch.nn.Linear(4, 4), torch.nn.ReLU())
x = torch.randn(2, 4)
if os.environ.get("LATE"):
    with torch.compiled_autograd.enable():
        os.environ["CAGRAD_LOGS"] = "compiled_autograd_verbose"
        model(x).sum().backward()
else:
    with torch.compiled_autograd.enable():
        model(x).sum().backward()
print(dict(torch.compiled_autograd.counters))
"""


def _run_log_script(env):
    done = subprocess.run([sys.executable, "-c", _GRAPH_LOG_SCRIPT], capture_output=True,
                          text=True, env=env, timeout=120, cwd=os.getcwd())
    assert done.returncode == 0, done.stderr
    assert "'captures': 1" in done.stdout
    return done.stderr


def test_verbose_logs_name_every_node_of_the_graph():
    # test_verbose_logs_graph: the log names each node PyTorch's does, by NodeCall
    env = this_python_env()
    env["CAGRAD_LOGS"] = "compiled_autograd_verbose"
    log = _run_log_script(env)
    for name in ("SumBackward0", "ReluBackward0", "AddmmBackward0", "AccumulateGrad"):
        assert f"{name} (NodeCall" in log, log
    assert "Cache miss due to new autograd node: GraphRoot (NodeCall 0)" in log


def test_verbose_logs_snapshot_at_enable():
    # test_verbose_logs_snapshot: turning the log on inside enable() changes nothing
    env = this_python_env()
    env.pop("CAGRAD_LOGS", None)
    env["LATE"] = "1"
    log = _run_log_script(env)
    assert "Cache miss due to new autograd node" not in log, log
