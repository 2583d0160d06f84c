"""The weight-norm reparametrisation shared by nn.utils.weight_norm (the hook-era API)
and nn.utils.parametrizations.weight_norm: weight = g * v / ||v||."""


def norm_except_dim(v, dim):
    """The 2-norm of v over every dim but `dim` (kept as size-1 dims); dim -1 is the norm
    of the whole tensor, as PyTorch reads it (weight_norm's dim=None)."""
    if dim == -1:
        return (v * v).sum().sqrt()
    dim = dim % v.dim()
    others = tuple(d for d in range(v.dim()) if d != dim)
    if not others:
        return v.abs()
    return (v * v).sum(others, keepdim=True).sqrt()


def weight_norm_value(v, g, dim):
    return v * (g / norm_except_dim(v, dim))


def normalized_dim(dim):
    return -1 if dim is None else dim
