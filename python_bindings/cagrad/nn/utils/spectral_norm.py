"""cagrad.nn.utils.spectral_norm / remove_spectral_norm: weight / sigma(weight), sigma the
largest singular value estimated by power iteration (PyTorch's hook-era API).

The parameter <name> becomes <name>_orig, with buffers <name>_u and <name>_v (PyTorch's
names and state_dict keys). Before each forward call (PyTorch: a forward pre-hook), in
training mode, n_power_iterations steps update u and v in place without a gradient; then
module.<name> = W / (u . W v), differentiable in W. cagrad's Module has no hooks, so the
module gets a class of its own (same name) whose __call__ refreshes the weight first.
"""

from ..._grad_mode import no_grad
from ..._creation import randn
from ..functional import normalize
from ..parameter import Parameter

__all__ = ["spectral_norm", "remove_spectral_norm"]

_TRANSPOSED = ("ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d")


class _SpectralNorm:
    def __init__(self, name, n_power_iterations, dim, eps):
        if n_power_iterations <= 0:
            raise ValueError(f"Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.name = name
        self.n_power_iterations = n_power_iterations
        self.dim = dim
        self.eps = eps

    def matrix(self, weight):
        """weight as [size of dim, everything else]."""
        if self.dim != 0:
            order = (self.dim,) + tuple(d for d in range(weight.dim()) if d != self.dim)
            weight = weight.permute(*order)
        return weight.reshape(weight.shape[0], -1)

    def compute_weight(self, module, do_power_iteration):
        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        matrix = self.matrix(weight)
        if do_power_iteration:
            with no_grad():
                for _ in range(self.n_power_iterations):
                    v.copy_(normalize(matrix.t().matmul(u), dim=0, eps=self.eps))
                    u.copy_(normalize(matrix.matmul(v), dim=0, eps=self.eps))
            u, v = u.clone(), v.clone()  # the graph keeps these, not the updated buffers
        sigma = (u * matrix.matmul(v)).sum()
        return weight / sigma


def _refreshing_class(module):
    """A subclass of the module's class (same name) whose __call__ recomputes every
    spectral-normed weight first."""
    cls = type(module)
    if getattr(cls, "_cagrad_spectral_norm_base", None) is not None:
        return cls

    def __call__(self, *args, **kwargs):
        for fn in self._cagrad_spectral_norms.values():
            object.__setattr__(self, fn.name, fn.compute_weight(self, self.training))
        return cls.__call__(self, *args, **kwargs)

    new_cls = type(cls.__name__, (cls,), {"__call__": __call__,
                                          "_cagrad_spectral_norm_base": cls})
    new_cls.__qualname__ = cls.__qualname__
    return new_cls


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    norms = module.__dict__.setdefault("_cagrad_spectral_norms", {})
    if name in norms:
        raise RuntimeError(f"Cannot register two spectral_norm hooks on the same parameter "
                           f"{name}")
    if dim is None:
        dim = 1 if type(module).__name__ in _TRANSPOSED else 0
    fn = _SpectralNorm(name, n_power_iterations, dim, eps)
    weight = module._parameters[name]
    with no_grad():
        rows, cols = fn.matrix(weight).shape
        u = normalize(randn(rows, dtype=weight.dtype), dim=0, eps=eps)
        v = normalize(randn(cols, dtype=weight.dtype), dim=0, eps=eps)
    del module._parameters[name]
    module.register_parameter(name + "_orig", weight)
    object.__setattr__(module, name, weight.detach())
    module.register_buffer(name + "_u", u)
    module.register_buffer(name + "_v", v)
    module.__class__ = _refreshing_class(module)
    norms[name] = fn
    return module


def remove_spectral_norm(module, name="weight"):
    norms = module.__dict__.get("_cagrad_spectral_norms", {})
    if name not in norms:
        raise ValueError(f"spectral_norm of '{name}' not found in {module}")
    fn = norms.pop(name)
    with no_grad():
        weight = fn.compute_weight(module, do_power_iteration=False).detach()
    module.__dict__.pop(name, None)
    del module._parameters[name + "_orig"]
    del module._buffers[name + "_u"]
    del module._buffers[name + "_v"]
    module.register_parameter(name, Parameter(weight))
    if not norms:
        module.__class__ = type(module)._cagrad_spectral_norm_base
    return module
