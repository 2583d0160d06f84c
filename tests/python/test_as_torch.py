"""python -m cagrad.as_torch: `import torch` answered by cagrad (cagrad/as_torch.py)."""

import os
import subprocess
import sys
import textwrap


def run_script(tmp_path, body, *flags):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(body))
    return subprocess.run([sys.executable, "-m", "cagrad.as_torch", *flags, str(script), "a1"],
                          capture_output=True, text=True, timeout=120)


def test_torch_and_its_submodules_are_cagrads(tmp_path):
    r = run_script(tmp_path, """
        import sys
        import torch
        import torch.nn.functional as F
        import torch.utils.data
        from torch.optim.lr_scheduler import StepLR
        import cagrad
        assert torch is cagrad and F is cagrad.nn.functional
        assert torch.utils.data is cagrad.utils.data
        assert StepLR is cagrad.optim.lr_scheduler.StepLR
        print(sys.argv[1:], __name__)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['a1'] __main__"


def test_a_missing_submodule_names_itself_and_the_docs(tmp_path):
    r = run_script(tmp_path, "import torch.fx\n")
    assert r.returncode != 0
    assert "ModuleNotFoundError: No module named 'torch.fx'" in r.stderr
    assert "cagrad.fx" in r.stderr and "docs/python-api.md" in r.stderr


def test_compiled_flag_compiles_every_backward(tmp_path):
    body = """
        import torch
        w = torch.randn(3, requires_grad=True)
        for _ in range(3):
            (w * w).sum().backward()
        print(torch.compiled_autograd.counters["captures"],
              torch.compiled_autograd.counters["cache_hits"])
    """
    eager = run_script(tmp_path, body)
    compiled = run_script(tmp_path, body, "--compiled")
    assert eager.returncode == 0 and compiled.returncode == 0, eager.stderr + compiled.stderr
    assert eager.stdout.split() == ["0", "0"]
    assert compiled.stdout.split() == ["1", "2"]  # one capture, then hits


def test_install_refuses_when_the_real_torch_is_loaded():
    code = ("import torch, cagrad.as_torch\n"
            "try:\n    cagrad.as_torch.install()\n"
            "except RuntimeError as e:\n    print('refused:', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("refused:") and "before the program's first" in r.stdout


def test_usage_without_a_script():
    r = subprocess.run([sys.executable, "-m", "cagrad.as_torch"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "usage: python -m cagrad.as_torch" in r.stderr
