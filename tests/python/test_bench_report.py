"""The benchmark report's arithmetic (benchmarks/report.py), on hand-made figures."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import report  # noqa: E402


def compile_figures(diffs_median, mad, n, miss_median=500.0, torch_median=1e6):
    return {"compile_us": {
        "cagrad": {"median": diffs_median, "mad": mad, "n": n},
        "cagrad_miss_backward": {"median": miss_median},
        "torch": {"median": torch_median},
    }}


def test_a_compile_time_above_the_noise_is_the_figure():
    ratio, exact = report.compile_ratio(compile_figures(100.0, 1.0, 25))
    assert exact and ratio == pytest.approx(1e6 / 100.0)


def test_a_compile_time_in_the_noise_is_an_upper_bound():
    se = 1.2533 * 1.4826 * 40.0 / 5.0
    ratio, exact = report.compile_ratio(compile_figures(10.0, 40.0, 25))
    assert not exact and ratio == pytest.approx(1e6 / (10.0 + 2 * se))


def test_one_sample_at_zero_falls_back_to_the_whole_miss_backward():
    # quick mode's single w6 pair can give a difference <= 0 with no spread: the bound
    # must come from the miss backward, not be zero (a division by zero before)
    ratio, exact = report.compile_ratio(compile_figures(-3.0, 0.0, 1, miss_median=250.0))
    assert not exact and ratio == pytest.approx(1e6 / 250.0)
