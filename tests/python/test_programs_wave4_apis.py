"""The APIs the wave-4 programs (test_programs_wave4.py) and their PyTorch relatives needed
that cagrad lacked, each against real torch: torch.GradScaler (the torch.amp.GradScaler
class), torch.is_autocast_enabled / torch.get_autocast_dtype with autocast blocks that set
and restore the dtype, and nn.Module.to(memory_format=...)."""

import numpy as np
import pytest
import torch
from helpers import assert_close, backward_checked, ca, compiled_ctx, error_of

DEVICES = ["cpu", "cuda", "cuda:0", "xpu", "hpu", "xla", "ipu", "mps", "mtia", "privateuseone"]


def name(dtype):
    return str(dtype).rpartition(".")[2]


# --------------------------------------------------------------------------- GradScaler
def test_top_level_grad_scaler_is_the_amp_class():
    assert ca.GradScaler is ca.amp.GradScaler
    assert torch.GradScaler is torch.amp.GradScaler


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_disabled_grad_scaler_step_equals_torch(dtype, compiled):
    """A whole disabled-scaler step (scale, backward, unscale_, clip, step, update)."""
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    out = {}
    for L in (ca, torch):
        lin = L.nn.Linear(4, 3, bias=False).to(getattr(L, dtype))
        with L.no_grad():
            lin.weight.copy_(L.tensor(w, dtype=getattr(L, dtype)))
        opt = L.optim.SGD(lin.parameters(), lr=0.1)
        scaler = L.GradScaler("cpu", enabled=False)
        with L.autocast("cpu", enabled=False):
            loss = lin(L.tensor(x, dtype=getattr(L, dtype))).tanh().pow(2).sum()
        scaled = scaler.scale(loss)
        if L is ca:
            with compiled_ctx(compiled):
                backward_checked(scaled, compiled)
        else:
            scaled.backward()
        grad = lin.weight.grad.clone()
        scaler.unscale_(opt)
        L.nn.utils.clip_grad_norm_(lin.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        out[L] = (loss, grad, lin.weight, scaler.get_scale(), scaler.state_dict())
    c, t = out[ca], out[torch]
    for a, b in zip(c[:3], t[:3]):
        assert_close(a, b)
    assert c[3] == t[3] == 1.0 and c[4] == t[4] == {}


# ----------------------------------------------------------------- autocast state queries
@pytest.mark.parametrize("device", DEVICES)
def test_autocast_dtype_and_enabled_defaults_match_torch(device):
    assert name(ca.get_autocast_dtype(device)) == name(torch.get_autocast_dtype(device))
    assert ca.is_autocast_enabled(device) is torch.is_autocast_enabled(device) is False
    assert ca.is_autocast_enabled() is torch.is_autocast_enabled() is False


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_autocast_block_sets_and_restores_the_dtype(device):
    def trace(L):
        seen = [name(L.get_autocast_dtype(device))]
        with L.autocast(device, dtype=L.float16 if device == "cpu" else L.bfloat16,
                        enabled=False):
            seen.append(name(L.get_autocast_dtype(device)))
            seen.append(L.is_autocast_enabled(device))
            with L.autocast(device, dtype=L.bfloat16 if device == "cpu" else L.float16,
                            enabled=False):
                seen.append(name(L.get_autocast_dtype(device)))
            seen.append(name(L.get_autocast_dtype(device)))
        seen.append(name(L.get_autocast_dtype(device)))
        try:  # an exception leaving the block restores it too
            with L.autocast(device, dtype=L.float16, enabled=False):
                raise KeyError("x")
        except KeyError:
            pass
        seen.append(name(L.get_autocast_dtype(device)))
        return seen

    assert trace(ca) == trace(torch)


def test_autocast_decorator_sets_the_dtype_inside():
    def inside(L):
        @L.autocast("cpu", dtype=L.float16, enabled=False)
        def f():
            return name(L.get_autocast_dtype("cpu"))

        return f(), name(L.get_autocast_dtype("cpu"))

    assert inside(ca) == inside(torch) == ("float16", "bfloat16")


@pytest.mark.parametrize("fname", ["is_autocast_enabled", "get_autocast_dtype"])
@pytest.mark.parametrize("arg", [3, "foo", "meta", "hip", "lazy", "maia"])
def test_autocast_queries_answer_or_reject_as_torch(fname, arg):
    c, t = (error_of(L, lambda L: getattr(L, fname)(arg)) for L in (ca, torch))
    assert c[0] is t[0]
    if c[0] is None:
        got = [getattr(L, fname)(arg) for L in (ca, torch)]
        assert got[0] == got[1] if fname == "is_autocast_enabled" else \
            name(got[0]) == name(got[1])
    else:
        assert c[1].replace("cagrad", "torch") == t[1]


def test_get_autocast_dtype_needs_its_device_type():
    for L in (ca, torch):
        with pytest.raises(TypeError):
            L.get_autocast_dtype()


# ------------------------------------------------------------ Module.to(memory_format=...)
def conv_pair(dtype):
    rng = np.random.default_rng(1)
    w, b = rng.standard_normal((3, 2, 3, 3)), rng.standard_normal(3)
    mods = []
    for L in (ca, torch):
        m = L.nn.Sequential(L.nn.Conv2d(2, 3, 3), L.nn.BatchNorm2d(3))
        with L.no_grad():
            m[0].weight.copy_(L.tensor(w, dtype=L.float32))
            m[0].bias.copy_(L.tensor(b, dtype=L.float32))
        mods.append(m)
    return mods


@pytest.mark.parametrize("fmt", ["contiguous_format", "preserve_format"])
@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_module_to_row_major_formats_keep_the_module(fmt, dtype, compiled):
    x = np.random.default_rng(2).standard_normal((2, 2, 5, 5))
    res = {}
    for L, m in zip((ca, torch), conv_pair(dtype)):
        same = m.to(getattr(L, dtype), memory_format=getattr(L, fmt))
        assert same is m and m[0].weight.dtype == getattr(L, dtype)
        assert m.to(memory_format=getattr(L, fmt)) is m
        xt = L.tensor(x, dtype=getattr(L, dtype), requires_grad=True)
        loss = m(xt).sin().sum()
        if L is ca:
            with compiled_ctx(compiled):
                backward_checked(loss, compiled)
        else:
            loss.backward()
        res[L] = (loss, xt.grad, m[0].weight.grad, m[0].bias.grad, m[1].weight.grad)
    for a, b in zip(res[ca], res[torch]):
        assert_close(a, b)


def test_module_to_channels_last_on_a_module_without_4d_tensors_is_a_no_op():
    for L in (ca, torch):
        lin = L.nn.Linear(2, 3)
        w = lin.weight.detach().clone()
        assert lin.to(memory_format=L.channels_last) is lin
        assert L.equal(lin.weight, w)


def test_module_to_channels_last_on_convs_says_cagrad_is_row_major():
    m = conv_pair("float32")[0]
    with pytest.raises(NotImplementedError, match="channels_last.*always contiguous"):
        m.to(memory_format=ca.channels_last)


@pytest.mark.parametrize("fmt", ["channels_last_3d", "float32"])
def test_module_to_memory_format_errors_match_torch(fmt):
    c, t = (error_of(L, lambda L: L.nn.Conv2d(2, 3, 3).to(memory_format=getattr(L, fmt)))
            for L in (ca, torch))
    assert c[0] is t[0]
    if fmt == "channels_last_3d":
        assert c[1] == t[1] == "required rank 5 tensor to use channels_last_3d format"
