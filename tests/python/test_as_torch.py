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


def test_a_bare_sys_modules_alias_shares_cagrads_submodules(tmp_path):
    # what a program (or a harness) does by hand, without cagrad.as_torch: its
    # `import torch.nn` must find cagrad.nn itself, not run a second copy whose dtypes
    # and classes are not cagrad's
    script = tmp_path / "alias.py"
    script.write_text(textwrap.dedent("""
        import sys
        import cagrad
        sys.modules["torch"] = cagrad
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        from torch.utils.data import DataLoader, TensorDataset
        assert nn is cagrad.nn and F is cagrad.nn.functional
        assert DataLoader is cagrad.utils.data.DataLoader
        x = torch.empty(3).normal_(0, 1)  # the dtype check sees cagrad's own dtypes
        assert x.dtype is cagrad.float32 and torch.zeros(2).new_zeros((3,)).shape == (3,)
        layer = nn.Linear(2, 2)
        assert isinstance(layer.weight, cagrad.nn.Parameter)
        y = F.relu(layer(torch.ones(1, 2))).sum()
        y.backward()
        assert layer.weight.grad is not None
        print("ok")
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_the_finder_is_silent_while_torch_is_not_cagrad():
    import cagrad
    from cagrad import as_torch

    assert sys.modules.get("torch") is not cagrad
    assert as_torch._finder.find_spec("torch.nn") is None
