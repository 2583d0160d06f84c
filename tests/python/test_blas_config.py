"""cagrad.show_config() and the BLAS it reports; the one-time warning when OpenBLAS's
kernels are below what the CPU supports (faked with OPENBLAS_CORETYPE, which cagrad reads
but never changes)."""
import os
import subprocess
import sys

import cagrad

ISA_RANK = {"scalar": 0, "avx2": 1, "avx512": 2}


def run_child(code, **env_changes):
    env = dict(os.environ)
    for k, v in env_changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)


def test_show_config_names_the_blas():
    text = cagrad.show_config()
    info = cagrad._C.blas_info()
    assert isinstance(text, str)
    assert f"cagrad {cagrad.__version__}" in text
    assert f"OpenBLAS {info['version']} from {info['name']}" in text
    assert info["corename"] in text and info["threading"] in text
    assert f"threads: {cagrad.get_num_threads()}" in text


def test_python_build_uses_a_current_scipy_openblas():
    # the package builds against the scipy-openblas32 wheel, 0.3.27 or later, whose
    # threads callback hands OpenBLAS's threading to cagrad's pool
    info = cagrad._C.blas_info()
    assert info["name"] == "scipy-openblas32", info
    version = tuple(int(x) for x in info["version"].split("."))
    assert version >= (0, 3, 27), info
    assert "callback" in info["threading"]


def test_warning_matches_the_core():
    info = cagrad._C.blas_info()
    below = ISA_RANK[info["core_isa"]] < ISA_RANK[info["cpu_isa"]]
    assert (info["warning"] is not None) == below, info


def test_old_core_warns_once_at_import_and_keeps_the_setting():
    code = ("import os, warnings\n"
            "warnings.simplefilter('always')\n"
            "import cagrad\n"
            "import importlib; importlib.import_module('cagrad')\n"
            "print('CORETYPE', os.environ.get('OPENBLAS_CORETYPE'))\n"
            "print('CORE', cagrad._C.blas_info()['corename'])\n")
    r = run_child(code, OPENBLAS_CORETYPE="Prescott")
    assert r.returncode == 0, r.stderr
    assert "CORETYPE Prescott" in r.stdout  # never overridden
    if ISA_RANK[cagrad._C.blas_info()["cpu_isa"]] == 0:
        return  # a CPU without AVX2: Prescott kernels are not below it
    assert r.stderr.count("RuntimeWarning") == 1, r.stderr
    assert "OPENBLAS_CORETYPE=Prescott" in r.stderr and "unset it" in r.stderr
    assert "this CPU supports" in r.stderr


def test_old_core_warning_is_a_runtime_warning():
    if ISA_RANK[cagrad._C.blas_info()["cpu_isa"]] == 0:
        return
    r = run_child("import cagrad", OPENBLAS_CORETYPE="Prescott",
                  PYTHONWARNINGS="error::RuntimeWarning")
    assert r.returncode != 0 and "RuntimeWarning" in r.stderr


def test_no_warning_when_openblas_picks_its_core():
    r = run_child("import cagrad; print(cagrad._C.blas_info()['warning'])",
                  OPENBLAS_CORETYPE=None)
    assert r.returncode == 0, r.stderr
    warned = "RuntimeWarning" in r.stderr
    assert warned == (r.stdout.strip() != "None"), (r.stdout, r.stderr)
