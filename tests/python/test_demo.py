"""The README's `make demo` (examples/digits_mlp.py), run for one epoch in a child process:
cagrad eager, cagrad compiled and PyTorch eager train the same model from the same weights
on the same data, and the demo prints their backward times side by side."""

import os
import re
import subprocess
import sys

import cagrad
from helpers import needs_cagrad

pytestmark = needs_cagrad

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_demo_prints_cagrad_and_torch_side_by_side(tmp_path):
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(cagrad.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_root] + [p for p in sys.path if p])
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "digits_mlp.py"),
                        "--epochs", "1", "--svg", str(tmp_path / "g.svg")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for label in ("cagrad eager", "cagrad compiled", "torch eager"):
        assert re.search(rf"^  {label} +[0-9.]+ us", out, re.M), out
    accs = re.search(r"test accuracy: cagrad eager ([0-9.]+)%, compiled ([0-9.]+)%, "
                     r"torch eager ([0-9.]+)%", out)
    assert accs, out
    # same weights, data and optimizer: the three runs agree to within a test image or two
    values = [float(v) for v in accs.groups()]
    assert max(values) - min(values) < 1.0, values
    assert "eager_fallbacks  0" in out
