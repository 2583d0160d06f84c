"""Harness of the compiled-autograd port (test_compiled_autograd_port*.py).

A case is a generator function `fn(d)` where `d` is a `Data`: `d.L` is the library
(cagrad or torch) and `d.randn(...)` / `d.init(module)` give the same numbers to both. The
case builds a small training step with `d.L`, runs its backwards and yields what PyTorch's
TestCompiledAutograd compares (gradients, losses, flags). `check` runs it three times:

1. with real torch, eagerly (the reference values);
2. with cagrad, eagerly;
3. with cagrad under `cagrad.compiled_autograd.enable()`,

compares every yielded value of 2 with 1 and of 3 with 2, and asserts the capture count
(and, where given, cache hits and eager fallbacks) of run 3.
"""

import numpy as np
import torch

from helpers import ca, counters, to_np

# compiled vs eager cagrad: the compiled graph fuses and reorders pointwise work, so sums
# may round differently by a few ulps; cagrad vs torch: different kernels (GEMM blocking,
# reduction order) over at most a few hundred terms.
_TOL_COMPILED = {"float32": (1e-5, 1e-6), "float64": (1e-10, 1e-12)}
_TOL_TORCH = {"float32": (1e-4, 1e-5), "float64": (1e-9, 1e-11)}


class Data:
    """Deterministic inputs of one run: the same seed gives cagrad and torch the same
    numbers, whatever their own random generators do."""

    def __init__(self, L, dtype="float32", seed=123):
        self.L = L
        self.dtype = dtype
        self.rng = np.random.default_rng(seed)

    @property
    def lib_dtype(self):
        return getattr(self.L, self.dtype)

    def randn(self, *shape, requires_grad=False):
        return self.L.tensor(self.rng.standard_normal(shape).astype(self.dtype),
                             requires_grad=requires_grad)

    def rand(self, *shape, requires_grad=False):
        return self.L.tensor(self.rng.uniform(0.0, 1.0, shape).astype(self.dtype),
                             requires_grad=requires_grad)

    def arange(self, n, requires_grad=False):
        return self.L.arange(0.0, n, dtype=self.lib_dtype, requires_grad=requires_grad)

    def randint(self, high, *shape):
        return self.L.tensor(self.rng.integers(0, high, shape).astype(np.int64))

    def init(self, module):
        """Cast module to this run's dtype and overwrite its parameters with seeded values
        (in named_parameters order, which cagrad and torch share)."""
        if self.dtype == "float64":
            module = module.double()
        with self.L.no_grad():
            for p in module.parameters():
                values = self.rng.uniform(-0.5, 0.5, tuple(p.shape)).astype(self.dtype)
                p.copy_(self.L.tensor(values))
        return module

    def mlp(self, width=4, depth=2, act=None):
        """Linear(width, width) + activation, depth times (test_basic's model)."""
        nn = self.L.nn
        layers = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), (act or nn.ReLU)()]
        return self.init(nn.Sequential(*layers))


def collect(fn, L, dtype):
    return [to_np(v) for v in fn(Data(L, dtype))]


def compare(actual, expected, tol, what):
    rtol, atol = tol
    assert len(actual) == len(expected), f"{what}: {len(actual)} values vs {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if a is None or e is None:
            assert a is None and e is None, f"{what}: value {i}: {a!r} vs {e!r}"
            continue
        assert a.shape == e.shape, f"{what}: value {i}: shape {a.shape} vs {e.shape}"
        np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=rtol,
                                   atol=atol, err_msg=f"{what}: value {i}")


def run_compiled(fn, dtype="float32", dynamic=False):
    ca.compiled_autograd.reset()
    with ca.compiled_autograd.enable(dynamic=dynamic):
        return collect(fn, ca, dtype)


def check(fn, captures=1, *, dtype="float32", dynamic=False, hits=None, fallbacks=0,
          reference=True):
    """Run fn with torch, cagrad eager and cagrad compiled (see the module doc); return
    the counters of the compiled run."""
    eager = collect(fn, ca, dtype)
    if reference:
        compare(eager, collect(fn, torch, dtype), _TOL_TORCH[dtype], "cagrad eager vs torch")
    compiled = run_compiled(fn, dtype, dynamic)
    c = counters()
    compare(compiled, eager, _TOL_COMPILED[dtype], "compiled vs eager")
    assert c["captures"] == captures, c
    assert c["eager_fallbacks"] == fallbacks, c
    if hits is not None:
        assert c["cache_hits"] == hits, c
    return c
