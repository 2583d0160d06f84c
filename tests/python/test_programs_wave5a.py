"""A fifth wave of PyTorch training programs run unchanged on cagrad (issue 15), part A: a
DDPM diffusion model with sinusoidal timestep embeddings, GroupNorm + SiLU, a cumprod
noise schedule, gathered coefficients, an EMA copy (lerp_, mul_/add_, torch._foreach_lerp_
or swa_utils.AveragedModel) and a no-grad sampling loop; a RealNVP flow with buffer masks,
tanh scales, log-determinants and a MultivariateNormal or Normal base, Adam with
weight_decay and clip_grad_norm_; a BiLSTM-CRF tagger with the forward algorithm
(logsumexp), gold-path scores by gather and indexing and Viterbi decoding; and PPO with a
Categorical (or, --continuous, Normal with a log-std parameter) actor-critic, GAE by a
reversed loop, randperm minibatches and the clipped objective.

As in test_programs_wave4.py, each test runs a program with real torch and, without a line
changed, with `python -m cagrad.as_torch` (eager, and with `--compiled`), and checks that
it trains and exercises its surface with the same structure of results; wave5a_probe.py
then runs a few steps from the same weights and numpy data: the first step's gradients,
the losses and the no-grad results after them equal PyTorch's in float64 (1e-10; after
optimizer steps 1e-8), in float32 within a small multiple of PyTorch's own float32 error,
and compiled equals eager.
"""

import numpy as np
import pytest

from test_programs_more import MODES, falls, prog, run
from test_programs_wave3 import assert_probe_parity, summary_matches


# ----------------------------------------------------------------------------- whole runs
@pytest.mark.parametrize("style", ["lerp", "averaged"])
@pytest.mark.parametrize("compiled", MODES)
def test_ddpm_style_trains_keeps_an_ema_and_samples(compiled, style):
    args = [prog("ddpm_style"), "--ema-style", style]
    res, ref = run(args, compiled=compiled), run(args, cagrad=False)
    summary_matches(res, ref)
    falls(res["losses"])
    # the schedule: cumprod of 1 - linspace, and the posterior variances from it
    betas = np.linspace(1e-4, 0.2, 10)
    np.testing.assert_allclose(res["alphas_cumprod"], np.cumprod(1 - betas), rtol=1e-6)
    np.testing.assert_allclose(res["alphas_cumprod"], ref["alphas_cumprod"], rtol=1e-6)
    np.testing.assert_allclose(res["posterior_var"], ref["posterior_var"], rtol=1e-5)
    assert res["posterior_var"][0] == 0.0
    assert res["emb_shape"] == [2, 16]  # sin then cos halves; t = 0 gives [0]*8 + [1]*8
    np.testing.assert_allclose(res["emb"], ref["emb"], atol=1e-6)
    assert res["emb"][0] == [0.0] * 8 + [1.0] * 8
    assert res["sample_shape"] == [4, 1, 8, 8]
    assert -1.0 <= res["sample_range"][0] <= res["sample_range"][1] <= 1.0
    assert res["ema_requires_grad"] is False and all(res["ema_grads"])
    assert 0 < res["ema_distance"] < 100
    assert res["n_params"] == ref["n_params"]


@pytest.mark.parametrize("base", ["mvn", "normal"])
@pytest.mark.parametrize("compiled", MODES)
def test_realnvp_style_fits_two_moons_and_samples(compiled, base):
    args = [prog("realnvp_style"), "--base", base]
    res, ref = run(args, compiled=compiled), run(args, cagrad=False)
    summary_matches(res, ref)
    falls(res["losses"])
    assert res["test_nll"] < res["losses"][0]
    assert np.all(np.isfinite(res["norms"]))
    assert res["inverse_error"] < 1e-5  # a coupling layer's inverse undoes it
    assert res["z_shape"] == [8, 2] and res["sample_shape"] == [256, 2]
    assert all(0.3 < s < 3 for s in res["sample_std"])
    assert res["buffers"] == ref["buffers"]  # masks and the base's loc and covariance
    assert res["n_params"] == ref["n_params"]


@pytest.mark.parametrize("compiled", MODES)
def test_bilstm_crf_style_learns_tags_and_decodes(compiled):
    args = [prog("bilstm_crf_style")]
    res, ref = run(args, compiled=compiled), run(args, cagrad=False)
    summary_matches(res, ref)
    falls(res["losses"])
    assert res["accs"][-1] > 0.8 and ref["accs"][-1] > 0.8
    assert res["path_lengths"] == res["lengths"] == ref["lengths"]
    # Viterbi's best score is the score of the path it returns, and below log Z
    assert res["viterbi_is_path_score"] < 1e-4 and res["below_partition"]
    assert res["pad_row"] == [0.0] * 8  # padding_idx's row gets no gradient
    assert res["n_params"] == ref["n_params"]


@pytest.mark.parametrize("continuous", [False, True], ids=["categorical", "gaussian"])
@pytest.mark.parametrize("compiled", MODES)
def test_ppo_style_learns_to_walk_right(compiled, continuous):
    args = [prog("ppo_style")] + (["--continuous"] if continuous else [])
    res, ref = run(args, compiled=compiled), run(args, cagrad=False)
    summary_matches(res, ref)
    assert len(res["losses"]) == 12 * 4 * 4  # updates x epochs x minibatches
    assert np.all(np.isfinite(res["losses"])) and np.all(np.isfinite(res["kls"]))
    assert all(0.0 <= c <= 1.0 for c in res["clipfracs"]) and max(res["clipfracs"]) > 0
    assert np.mean(res["rewards"][-3:]) > np.mean(res["rewards"][:3])
    assert res["right_prob"] > 0.5
    if continuous:  # the log-std parameter trained: the policy narrowed
        assert len(res["std"]) == 1 and 0.1 < res["std"][0] < 1.0
    else:
        np.testing.assert_allclose(res["probs_sum"], 1.0, atol=1e-6)
    np.testing.assert_allclose(res["lrs"], ref["lrs"], rtol=1e-12)  # annealed by hand
    assert res["n_params"] == ref["n_params"]


# ----------------------------------------------------------------------- gradient parity
PARITY = ["ddpm_style", "ddpm_mul_add", "ddpm_foreach", "ddpm_averaged", "realnvp_style",
          "realnvp_normal", "bilstm_crf_style", "ppo_style", "ppo_continuous"]


@pytest.mark.parametrize("program", PARITY)
def test_first_step_gradients_and_losses_match_torch(tmp_path, program):
    assert_probe_parity(tmp_path, program, "wave5a_probe.py")
