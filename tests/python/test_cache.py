"""cagrad.memory: freed tensor data is reused for the next tensor of its size, within the
limit, and empty_cache() gives it back (the C side is tested in tests/c/test_alloc_cache.c).
"""

import os
import subprocess
import sys

import pytest

from helpers import ca, needs_cagrad

pytestmark = needs_cagrad


@pytest.fixture(autouse=True)
def _default_limit():
    limit = ca.memory.cache_info()["limit"]
    ca.memory.empty_cache()
    yield
    ca.memory.set_cache_limit(limit)


def test_a_freed_tensors_memory_serves_the_next_tensor_of_its_size():
    a = ca.ones(4096)
    ptr = a.data_ptr()
    del a
    info = ca.memory.cache_info()
    assert info["cached_blocks"] == 1 and info["cached_bytes"] >= 4096 * 4
    b = ca.zeros(4096)
    assert b.data_ptr() == ptr
    assert ca.memory.cache_info()["hits"] == info["hits"] + 1
    assert float(b.sum()) == 0.0  # zeros() filled the reused block


def test_limit_zero_turns_caching_off():
    ca.memory.set_cache_limit(0)
    a = ca.ones(4096)
    del a
    assert ca.memory.cache_info()["cached_bytes"] == 0
    assert ca.memory.cache_info()["limit"] == 0


def test_empty_cache_gives_everything_back():
    xs = [ca.ones(n) for n in (1000, 2000, 3000)]
    del xs
    assert ca.memory.cache_info()["cached_blocks"] == 3
    ca.memory.empty_cache()
    info = ca.memory.cache_info()
    assert info["cached_blocks"] == 0 and info["cached_bytes"] == 0


def test_a_training_step_reuses_the_previous_steps_memory():
    model = ca.nn.Linear(256, 256)
    x = ca.randn(64, 256)

    def step():
        model.zero_grad(set_to_none=True)
        model(x).pow(2).sum().backward()

    step()
    step()
    before = ca.memory.cache_info()
    step()
    after = ca.memory.cache_info()
    assert after["misses"] == before["misses"], "a steady step allocates nothing new"
    assert after["hits"] > before["hits"]


def test_a_negative_limit_is_refused():
    with pytest.raises(ValueError, match="must be >= 0"):
        ca.memory.set_cache_limit(-1)


CHILD = """
import cagrad
a = cagrad.ones(4096)
del a
info = cagrad.memory.cache_info()
print(info["limit"], info["cached_blocks"])
"""


@pytest.mark.parametrize("value, limit, blocks", [("3", 3 << 20, 1), ("0", 0, 0)])
def test_the_limit_comes_from_cagrad_cache_limit_mb(value, limit, blocks):
    env = dict(os.environ, CAGRAD_CACHE_LIMIT_MB=value)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(ca.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_root] + [p for p in sys.path if p])
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(limit), str(blocks)]
