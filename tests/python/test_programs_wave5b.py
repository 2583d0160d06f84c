"""A fifth wave (B) of PyTorch training programs run unchanged on cagrad (issue 15): SimCLR
contrastive learning (torch.flip views, F.normalize, a bool-eye-masked similarity matrix,
NT-Xent by cross_entropy or by boolean indexing off the diagonal, SequentialLR of a LambdaLR warmup and CosineAnnealingLR), Gatys
style transfer (a frozen feature net, the input image optimised by LBFGS with a closure or
by Adam, gram matrices by bmm, forward hooks, a total-variation loss), a temporal
convolutional network (dilated causal Conv1d by Chomp1d or F.pad, both weight-norm APIs
and their removal, clip_grad_norm_), knowledge distillation (KLDivLoss batchmean, log_target False and True)
and a graph attention network (dense -inf masking, scatter_reduce / index_add over an edge
list, or torch.sparse.mm of a sparse_coo_tensor of edge weights).

As in test_programs_wave4.py, each test runs a program with real torch and, without a line
changed, with `python -m cagrad.as_torch` (eager, and with `--compiled`), and checks that it
trains and exercises its surface with the same structure of results; wave5b_probe.py then
runs a few steps from the same weights and numpy data: the first step's gradients and the
losses equal PyTorch's in float64 (1e-10; losses after optimizer steps 1e-8), in float32
within a small multiple of PyTorch's own float32 error, and compiled equals eager.
"""

import numpy as np
import pytest

from test_programs_more import MODES, falls, prog, run
from test_programs_wave3 import assert_probe_parity, summary_matches


# ----------------------------------------------------------------------------- whole runs
@pytest.mark.parametrize("loss", ["nt_xent", "info_nce"])
@pytest.mark.parametrize("compiled", MODES)
def test_simclr_style_learns_to_pick_the_partner_view(compiled, loss):
    args = [prog("simclr_style"), "--loss", loss]
    res, ref = run(args, compiled=compiled), run(args, cagrad=False)
    summary_matches(res, ref)
    falls(res["losses"])
    # SequentialLR: LambdaLR's linear warmup, then CosineAnnealingLR down to eta_min
    np.testing.assert_allclose(res["lrs"], ref["lrs"], rtol=1e-9)
    assert res["lrs"][:4] == pytest.approx([0.025, 0.05, 0.075, 0.1])
    assert res["final_lr"] == pytest.approx(ref["final_lr"]) == pytest.approx(1e-3)
    assert res["sim_shape"] == [8, 8] and res["sim_vs_cosine"] < 1e-5
    assert res["sim_diag"] == pytest.approx(1.0, abs=1e-5)  # unit vectors
    assert res["losses_agree"] < 1e-5  # masked_fill(-inf) and boolean indexing, one loss
    assert res["n_params"] == ref["n_params"]
    assert res["after_acc"] > res["before_acc"]


@pytest.mark.parametrize("optimizer", ["lbfgs", "adam"])
@pytest.mark.parametrize("compiled", MODES)
def test_style_transfer_style_optimises_the_image(compiled, optimizer):
    args = [prog("style_transfer_style"), "--optimizer", optimizer]
    res, ref = run(args, compiled=compiled), run(args, cagrad=False)
    summary_matches(res, ref)
    falls(res["losses"])
    falls(res["style_losses"])
    # LBFGS re-evaluates the closure (max_iter=5 a step); Adam evaluates once a step
    assert res["evaluations"] == ref["evaluations"] == (30 if optimizer == "lbfgs" else 6)
    lo, hi = res["image_range"]
    assert 0.0 <= lo <= hi <= 1.0 and res["moved"] > 0.05  # clamped, and changed
    assert all(res["net_grads"])  # the frozen network has no gradients at all
    assert res["gram_shapes"] == ref["gram_shapes"] == [[1, 8, 8], [1, 8, 8], [1, 16, 16],
                                                        [1, 16, 16]]
    assert res["layers"] == ref["layers"] and "content_loss_3" in res["layers"]
    assert res["hooks_left"] == 0


@pytest.mark.parametrize("variant", [("chomp", "old"), ("pad", "param")], ids="-".join)
@pytest.mark.parametrize("compiled", MODES)
def test_tcn_style_learns_the_adding_problem(compiled, variant):
    causal, wn = variant
    args = [prog("tcn_style"), "--causal", causal, "--weight-norm", wn]
    res, ref = run(args, compiled=compiled), run(args, cagrad=False)
    summary_matches(res, ref)
    falls(res["losses"])
    assert res["tests"][-1] < 0.6 * res["tests"][0]
    assert res["causal"] is True  # no output looks at a later step
    assert res["out_shape"] == [2, 8, 24]
    assert res["param_names"] == ref["param_names"]  # weight_g / _v, or parametrizations
    assert res["state_keys"] == ref["state_keys"]
    assert res["n_params"] == ref["n_params"] == 1137
    assert max(res["norms"]) > 0.5  # clip_grad_norm_ returns the norm before clipping
    # the weight norms folded back into plain, still trainable, weights: the same outputs
    assert res["folded_change"] < 1e-6
    assert res["folded_names"] == ref["folded_names"]
    assert res["folded_trainable"] == ref["folded_trainable"] == [True] * 16
    assert res["folded_count"] == ref["folded_count"] == 1089  # one norm per output channel


@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.parametrize("compiled", MODES)
def test_distill_style_trains_teacher_then_student(compiled, log_target):
    args = [prog("distill_style")] + (["--log-target"] if log_target else [])
    res, ref = run(args, compiled=compiled), run(args, cagrad=False)
    summary_matches(res, ref)
    for key in ("teacher_losses", "losses", "base_losses"):
        falls(res[key])
    assert res["teacher_acc"] > 0.85 and res["student_acc"] > 0.5
    assert res["sizes"] == ref["sizes"] == [1412, 70]
    # batchmean KL from probabilities, from log-probabilities, and by hand
    np.testing.assert_allclose(res["kl"], res["kl"][0], rtol=1e-5)


@pytest.mark.parametrize("attention", ["dense", "edges", "sparse"])
@pytest.mark.parametrize("compiled", MODES)
def test_gat_style_trains_on_a_train_mask(compiled, attention):
    args = [prog("gat_style"), "--attention", attention]
    res, ref = run(args, compiled=compiled), run(args, cagrad=False)
    summary_matches(res, ref)
    falls(res["losses"])
    assert (res["n_edges"], res["n_train"]) == (ref["n_edges"], ref["n_train"]) == (198, 20)
    np.testing.assert_allclose(res["att_row_sums"], 1.0, atol=1e-6)
    assert res["att_off_graph"] == 0.0  # masked_fill(-inf) before the softmax
    assert res["out_shape"] == [40, 3]
    np.testing.assert_allclose(res["prob_sums"], 1.0, atol=1e-6)
    assert res["test"][1] >= 0.7  # 20 test nodes, 3 classes


# ----------------------------------------------------------------------- gradient parity
PARITY = ["simclr_style", "simclr_info_nce", "style_transfer_style", "style_transfer_adam", "tcn_style",
          "tcn_pad_param", "distill_style", "distill_log_target", "gat_style", "gat_edges", "gat_sparse"]


@pytest.mark.parametrize("program", PARITY)
def test_first_step_gradients_and_losses_match_torch(tmp_path, program):
    assert_probe_parity(tmp_path, program, "wave5b_probe.py")
