"""The names of what a CPU library lacks (cuda, accelerator, backends, amp, autocast,
half-precision dtypes, compile, distributed, nn.parallel), compared with what torch 2.13
does on this machine, which has no CUDA either."""

import logging
import warnings

import numpy as np
import pytest
import torch

from helpers import assert_close, ca, to_np

assert not torch.cuda.is_available(), "these tests compare with torch on a CPU-only machine"


def _warnings_of(fn):
    """(result, [(category, message)]) of fn()."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, [(w.category, str(w.message)) for w in caught]


# ---------------------------------------------------------------------------- cuda
@pytest.mark.parametrize("name", ["is_available", "device_count", "is_initialized", "seed",
                                  "seed_all", "empty_cache", "is_bf16_supported"])
def test_cuda_queries_match_torch(name):
    assert getattr(ca.cuda, name)() == getattr(torch.cuda, name)()


@pytest.mark.parametrize("name", ["manual_seed", "manual_seed_all"])
def test_cuda_seeding_is_a_no_op_like_torch(name):
    ca.manual_seed(0)
    expected = ca.rand(3).tolist()
    ca.manual_seed(0)
    assert getattr(ca.cuda, name)(123) is getattr(torch.cuda, name)(123) is None
    assert ca.rand(3).tolist() == expected  # the CPU stream is untouched


@pytest.mark.parametrize("name", ["synchronize", "current_device"])
def test_cuda_device_functions_raise_like_torch(name):
    for lib in (torch, ca):
        with pytest.raises(AssertionError, match="not compiled with CUDA enabled"):
            getattr(lib.cuda, name)()


def test_accelerator_matches_torch():
    for name in ("is_available", "current_accelerator", "device_count"):
        assert getattr(ca.accelerator, name)() == getattr(torch.accelerator, name)()


def test_cpu_module_matches_torch():
    for name in ("is_available", "device_count", "current_device", "synchronize"):
        assert getattr(ca.cpu, name)() == getattr(torch.cpu, name)()


# ------------------------------------------------------------------------ backends
FLAGS = ["cuda.matmul.allow_tf32", "cuda.matmul.allow_fp16_reduced_precision_reduction",
         "cuda.matmul.allow_bf16_reduced_precision_reduction", "cudnn.allow_tf32",
         "cudnn.benchmark", "cudnn.deterministic", "cudnn.enabled", "mkldnn.enabled"]


def _resolve(root, dotted):
    *path, last = dotted.split(".")
    for part in path:
        root = getattr(root, part)
    return root, last


@pytest.mark.parametrize("flag", FLAGS)
def test_backend_flags_have_torch_defaults_and_are_settable(flag):
    owner, name = _resolve(ca.backends, flag)
    default = getattr(owner, name)
    assert default == getattr(*_resolve(torch.backends, flag))
    setattr(owner, name, not default)
    try:
        assert getattr(owner, name) is (not default)
    finally:
        setattr(owner, name, default)


@pytest.mark.parametrize("query", ["cuda.is_built", "cudnn.is_available", "cudnn.version",
                                   "mps.is_available", "mps.is_built"])
def test_backend_queries_match_torch(query):
    assert getattr(*_resolve(ca.backends, query))() == getattr(*_resolve(torch.backends,
                                                                         query))()


def test_backends_cagrad_does_not_link():
    # torch here is built with oneDNN, OpenMP and MKL; cagrad uses none of them
    import cagrad.backends.cudnn as cudnn  # importable as a submodule, as in torch
    assert cudnn is ca.backends.cudnn
    assert not ca.backends.mkldnn.is_available()
    assert not ca.backends.openmp.is_available()
    assert not ca.backends.mkl.is_available()


# -------------------------------------------------------------------------- dtypes
@pytest.mark.parametrize("name", ["float16", "bfloat16", "half", "float", "double", "long"])
def test_dtype_objects_match_torch(name):
    c, t = getattr(ca, name), getattr(torch, name)
    assert isinstance(c, ca.dtype)
    assert c.itemsize == t.itemsize
    assert c.is_floating_point == t.is_floating_point
    assert c.is_complex == t.is_complex and c.is_signed == t.is_signed
    assert repr(c) == repr(t).replace("torch.", "cagrad.")


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
@pytest.mark.parametrize("make", [
    lambda L, d: L.zeros(2, dtype=d), lambda L, d: L.ones(2, 3, dtype=d),
    lambda L, d: L.full((2,), 1.5, dtype=d), lambda L, d: L.tensor([1.0], dtype=d),
    lambda L, d: L.randn(2, dtype=d), lambda L, d: L.arange(3, dtype=d),
    lambda L, d: L.ones(2).to(d), lambda L, d: L.ones(2).to(dtype=d),
    lambda L, d: L.zeros_like(L.ones(2), dtype=d), lambda L, d: L.set_default_dtype(d),
])
def test_half_precision_dtypes_raise_naming_themselves(name, make):
    with pytest.raises(TypeError, match=rf"cagrad\.{name}.*float32.*float64.*int64"):
        make(ca, getattr(ca, name))
    assert ca.get_default_dtype() is ca.float32


@pytest.mark.parametrize("method,name", [("half", "float16"), ("bfloat16", "bfloat16")])
def test_half_precision_methods_raise_like_to(method, name):
    assert callable(getattr(torch.ones(2), method))  # torch has the method too
    with pytest.raises(TypeError, match=rf"cagrad\.{name}.*float32.*float64.*int64"):
        getattr(ca.ones(2), method)()


# ---------------------------------------------------------------------- GradScaler
def _scaler_run(lib, scaler, steps=5, poison_step=3):
    """A small training run through scaler; on poison_step one grad is made inf."""
    lib.manual_seed(0)
    model = lib.nn.Linear(3, 2)
    with lib.no_grad():
        model.weight.copy_(lib.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)))
        model.bias.copy_(lib.tensor([0.5, -0.25]))
    opt = lib.optim.SGD(model.parameters(), lr=0.1)
    x = lib.tensor(np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3))
    scales = []
    for step in range(steps):
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        scaled = scaler.scale(loss)
        scaled.backward()
        if step == poison_step:
            with lib.no_grad():
                model.bias.grad[0] = float("inf")
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    return model, scales, scaler.state_dict()


def test_cpu_grad_scaler_follows_torch():
    kwargs = dict(init_scale=2.0**10, growth_factor=3.0, backoff_factor=0.25,
                  growth_interval=2)
    cmodel, cscales, cstate = _scaler_run(ca, ca.amp.GradScaler("cpu", **kwargs))
    tmodel, tscales, tstate = _scaler_run(torch, torch.amp.GradScaler("cpu", **kwargs))
    assert cscales == tscales
    assert cstate == tstate
    for cp, tp in zip(cmodel.parameters(), tmodel.parameters()):
        assert_close(cp, tp, rtol=1e-6, atol=1e-7)


def test_cpu_grad_scaler_scales_and_unscales_like_torch():
    results = []
    for lib in (ca, torch):
        scaler = lib.amp.GradScaler("cpu", init_scale=1000.0)
        w = lib.tensor([1.5, -2.0], dtype=lib.float64, requires_grad=True)
        opt = lib.optim.SGD([w], lr=1.0)
        out = scaler.scale([w * 3.0, (w.sum(),)])
        out[0].sum().backward()
        scaler.unscale_(opt)
        results.append((out[0], out[1][0], w.grad))
    for c, t in zip(*results):
        assert_close(c, t)


@pytest.mark.parametrize("misuse", ["unscale_twice", "step_twice", "unscale_after_step",
                                    "update_without_scale", "step_without_scale",
                                    "update_without_step", "closure"])
def test_cpu_grad_scaler_misuse_raises_like_torch(misuse):
    errors = []
    for lib in (ca, torch):
        scaler = lib.amp.GradScaler("cpu")
        w = lib.ones(2, requires_grad=True)
        opt = lib.optim.SGD([w], lr=0.1)
        if misuse not in ("update_without_scale", "step_without_scale"):
            scaler.scale(w.sum()).backward()
        calls = {
            "unscale_twice": [scaler.unscale_, scaler.unscale_],
            "step_twice": [scaler.step, scaler.step],
            "unscale_after_step": [scaler.step, scaler.unscale_],
            "update_without_scale": [lambda _: scaler.update()],
            "step_without_scale": [scaler.step],
            "update_without_step": [lambda _: scaler.update()],
            "closure": [lambda o: scaler.step(o, closure=lambda: None)],
        }[misuse]
        with pytest.raises((RuntimeError, AssertionError)) as info:
            for call in calls:
                call(opt)
        errors.append((type(info.value), str(info.value)))
    assert errors[0] == errors[1]


def test_cpu_grad_scaler_state_dict_loads_like_torch():
    state = torch.amp.GradScaler("cpu", init_scale=8.0, growth_interval=7).state_dict()
    scaler = ca.amp.GradScaler("cpu")
    scaler.load_state_dict(state)
    assert scaler.state_dict() == state
    for lib in (ca, torch):
        with pytest.raises(RuntimeError, match="source state dict is empty"):
            lib.amp.GradScaler("cpu").load_state_dict({})


@pytest.mark.parametrize("make", [
    lambda L: L.amp.GradScaler(), lambda L: L.amp.GradScaler("cuda"),
    lambda L: L.cuda.amp.GradScaler(), lambda L: L.amp.GradScaler("cpu", enabled=False),
])
def test_disabled_grad_scaler_is_a_no_op_like_torch(make):
    (cs, cwarn), (ts, twarn) = _warnings_of(lambda: make(ca)), _warnings_of(lambda: make(torch))
    assert [c for c, _ in cwarn] == [c for c, _ in twarn]
    assert [m.replace("cagrad", "torch") for _, m in cwarn] == [m for _, m in twarn]
    cmodel, cscales, cstate = _scaler_run(ca, cs, poison_step=None)
    tmodel, tscales, tstate = _scaler_run(torch, ts, poison_step=None)
    assert cscales == tscales == [1.0] * 5 and cstate == tstate == {}
    assert not cs.is_enabled()
    loss = ca.ones(2)
    assert cs.scale(loss) is loss
    cs.load_state_dict({})  # a no-op, as in torch
    assert cs.unscale_(None) is ts.unscale_(None) is None  # never looks at the optimizer
    assert cs.update() is ts.update() is None
    for cp, tp in zip(cmodel.parameters(), tmodel.parameters()):
        assert_close(cp, tp, rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------------ autocast
def test_disabled_autocast_is_a_no_op_context_and_decorator():
    assert ca.autocast is ca.amp.autocast

    @ca.autocast("cpu", enabled=False)
    def double(x):
        return x * 2

    with ca.amp.autocast("cpu", enabled=False):
        y = ca.ones(2) @ ca.ones(2)
    assert y.dtype is ca.float32 and double(ca.ones(2)).tolist() == [2.0, 2.0]


@pytest.mark.parametrize("make", [
    lambda L: L.autocast("cuda"), lambda L: L.amp.autocast("cuda", dtype=L.bfloat16),
    lambda L: L.autocast("cpu", dtype=L.float32), lambda L: L.autocast("cpu", dtype=L.float64),
    lambda L: L.cuda.amp.autocast(), lambda L: L.cpu.amp.autocast(enabled=False),
])
def test_autocast_that_torch_disables_warns_like_torch(make):
    (_, cwarn), (_, twarn) = _warnings_of(lambda: make(ca)), _warnings_of(lambda: make(torch))
    assert [c for c, _ in cwarn] == [c for c, _ in twarn]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with make(ca):
            assert (ca.ones(2) * 2).dtype is ca.float32


@pytest.mark.parametrize("make", [
    lambda L: L.autocast("cpu"), lambda L: L.autocast("cpu", dtype=L.float16),
    lambda L: L.cpu.amp.autocast(),
])
def test_cpu_half_precision_autocast_raises(make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        with pytest.raises(NotImplementedError, match="autocast.*float32 and float64"):
            make(ca)


@pytest.mark.parametrize("device_type, error", [(5, ValueError), ("foo", RuntimeError)])
def test_autocast_bad_device_type_raises_like_torch(device_type, error):
    for lib in (torch, ca):
        with pytest.raises(error):
            lib.autocast(device_type)


# ------------------------------------------------------------------------- compile
def test_compile_returns_the_model_and_logs_once(caplog):
    import cagrad._compile as compile_module
    compile_module._logged = False
    model = ca.nn.Linear(3, 2)
    x = ca.ones(4, 3)
    with caplog.at_level(logging.INFO, logger="cagrad"):
        compiled = ca.compile(model, mode="max-autotune")
        decorated = ca.compile(fullgraph=True, dynamic=False)(lambda t: t * 2)
    assert compiled is model
    assert_close(compiled(x), model(x))
    assert to_np(decorated(x)).tolist() == (to_np(x) * 2).tolist()
    messages = [r.getMessage() for r in caplog.records if r.name == "cagrad"]
    assert len(messages) == 1 and "compiled_autograd.enable()" in messages[0]


@pytest.mark.parametrize("kwargs, error", [
    (dict(mode="default", options={}), RuntimeError), (dict(mode="fastest"), RuntimeError),
])
def test_compile_bad_options_raise_like_torch(kwargs, error):
    for lib in (torch, ca):
        with pytest.raises(error):
            lib.compile(lib.nn.Linear(1, 1), **kwargs)


def test_compile_non_callable_raises_like_torch():
    for lib in (torch, ca):
        with pytest.raises(AssertionError, match="callable"):
            lib.compile(5)


# --------------------------------------------------------------------- distributed
def test_distributed_names():
    import cagrad.distributed as dist
    assert dist.is_available() is ca._C.dist_is_available()  # Open MPI (test_distributed.py)
    assert dist.is_initialized() is torch.distributed.is_initialized() is False
    with pytest.raises(RuntimeError, match="backend 'gloo' is not available"):
        dist.init_process_group("gloo")
    for name in ("get_rank", "get_world_size"):
        for lib_dist in (torch.distributed, dist):
            with pytest.raises(ValueError, match="process group has not been initialized"):
                getattr(lib_dist, name)()


def test_data_parallel_wraps_and_runs_like_torch():
    results = []
    for lib in (ca, torch):
        lib.manual_seed(0)
        inner = lib.nn.Linear(3, 2)
        with lib.no_grad():
            inner.weight.copy_(lib.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 7))
            inner.bias.zero_()
        wrapped = lib.nn.DataParallel(inner, device_ids=[0])
        assert wrapped.module is inner and wrapped.device_ids == []
        assert lib.nn.parallel.DataParallel is lib.nn.DataParallel
        x = lib.tensor(np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3))
        out = wrapped(x)
        out.sum().backward()
        results.append((list(wrapped.state_dict()), out, inner.weight.grad))
    assert results[0][0] == results[1][0] == ["module.weight", "module.bias"]
    assert_close(results[0][1], results[1][1])
    assert_close(results[0][2], results[1][2])


def test_distributed_data_parallel_raises():
    with pytest.raises(ValueError, match="process group has not been initialized"):
        ca.nn.parallel.DistributedDataParallel(ca.nn.Linear(1, 1))
