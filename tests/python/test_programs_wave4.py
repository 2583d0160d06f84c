"""A fourth wave of PyTorch training programs run unchanged on cagrad (issue 15): seq2seq
translation with attention over packed bidirectional GRUs, MAML with functional_call and
autograd.grad(create_graph=True) or torch.func.grad + vmap, a decoder-only language model
with nn.TransformerDecoder, OneCycleLR, gradient accumulation and a disabled GradScaler /
autocast, and a U-Net denoiser with ConvTranspose2d, bilinear interpolation and BatchNorm.

As in test_programs_wave3.py, each test runs a program with real torch and, without a line
changed, with `python -m cagrad.as_torch` (eager, and with `--compiled`), and checks that
it trains and exercises its surface with the same structure of results; wave4_probe.py then
runs a few steps from the same weights and numpy data: the first step's gradients and the
losses equal PyTorch's in float64 (1e-10; losses after optimizer steps 1e-8), in float32
within a small multiple of PyTorch's own float32 error, and compiled equals eager.
"""

import os

import numpy as np
import pytest

from test_programs_more import MODES, falls, prog, run
from test_programs_wave3 import assert_probe_parity, summary_matches

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "programs")


# ----------------------------------------------------------------------------- whole runs
@pytest.mark.parametrize("compiled", MODES)
def test_seq2seq_style_trains_with_packed_sequences_and_attention(compiled):
    args = [prog("seq2seq_style")]
    res, ref = run(args, compiled=compiled), run(args, cagrad=False)
    summary_matches(res, ref)
    falls(res["losses"])
    assert res["forced"] == ref["forced"]  # Python's random, seeded the same
    assert res["padded_shape"] == ref["padded_shape"] == [16, 7]
    assert res["attn_shape"] == ref["attn_shape"] == [16, 7, 7]
    np.testing.assert_allclose(res["attn_row_sums"], 1.0, atol=1e-6)
    assert res["attn_on_pad"] == 0.0  # masked_fill(-inf) before the softmax
    assert max(res["accs"]) > 0.2


@pytest.mark.parametrize("mode", ["second", "first", "vmap"])
@pytest.mark.parametrize("compiled", MODES)
def test_maml_style_meta_learns_sine_tasks(compiled, mode):
    extra = {"second": [], "first": ["--first-order"], "vmap": ["--vmap"]}[mode]
    args = [prog("maml_style"), "--iterations", "30"] + extra
    res, ref = run(args, compiled=compiled), run(args, cagrad=False)
    summary_matches(res, ref)
    falls(res["losses"])
    assert res["n_params"] == ref["n_params"] == 1153
    assert res["grads_on_leaves"]
    assert res["after"] < res["before"]  # a few inner steps help on new tasks


@pytest.mark.parametrize("compiled", MODES)
def test_lm_decoder_style_trains_checkpoints_and_resumes(tmp_path, compiled):
    path = str(tmp_path / "ckpt.pt")
    lm = [prog("lm_decoder_style"), "--dropout", "0"]  # resumes in two libraries agree
    full = run(lm, cagrad=False)
    res = run(lm + ["--steps", "8", "--save", path], compiled=compiled)
    summary_matches(res, dict(full, losses=[0] * 8, lrs=[0] * 8, norms=[0] * 8))
    np.testing.assert_allclose(res["lrs"], full["lrs"][:8], rtol=1e-9)  # OneCycleLR
    assert res["scaler_enabled"] is False and res["scale"] == 1.0
    assert res["sample"].startswith("the ") and res["sample_shape"] == [1, 12]
    assert res["n_params"] == full["n_params"]
    again = run(lm + ["--resume", path], compiled=compiled)
    assert again["start"] == 8 and len(again["losses"]) == 8
    np.testing.assert_allclose(again["lrs"], full["lrs"][8:], rtol=1e-9)
    assert again["momentum"] == pytest.approx(full["momentum"])  # cycled beta1 restored
    falls(res["losses"] + again["losses"])
    # cagrad's checkpoint resumes under real torch too
    in_torch = run(lm + ["--resume", path], cagrad=False)
    np.testing.assert_allclose(in_torch["losses"], again["losses"], rtol=1e-4)
    np.testing.assert_allclose(in_torch["lrs"], again["lrs"], rtol=1e-9)


@pytest.mark.parametrize("compiled", MODES)
def test_unet_style_trains_and_evaluates_on_running_stats(compiled):
    args = [prog("unet_style")]
    res, ref = run(args, compiled=compiled), run(args, cagrad=False)
    summary_matches(res, ref)
    falls(res["losses"])
    assert res["out_shape"] == ref["out_shape"] == [4, 1, 12, 12]
    assert res["eval_deterministic"]
    assert res["lr"] == pytest.approx(ref["lr"]) == pytest.approx(0.01 * 0.5 ** 3)
    assert res["batches_tracked"] == ref["batches_tracked"] == 24  # eval does not count
    assert res["running_var_moved"] > 0.01
    assert res["n_params"] == ref["n_params"]
    assert len(res["evals"]) == 6 and np.all(np.isfinite(res["evals"]))
    # the same test images: the noisy inputs' own error is PyTorch's
    np.testing.assert_allclose([e[1] for e in res["evals"]], [e[1] for e in ref["evals"]],
                               rtol=1e-6)


# ----------------------------------------------------------------------- gradient parity
PARITY = ["seq2seq_style", "maml_style", "maml_first_order", "maml_vmap", "lm_decoder_style",
          "unet_style"]


@pytest.mark.parametrize("program", PARITY)
def test_first_step_gradients_and_losses_match_torch(tmp_path, program):
    assert_probe_parity(tmp_path, program, "wave4_probe.py")
