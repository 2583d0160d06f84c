"""nn.functional's glu, tanhshrink, threshold, channel_shuffle, local_response_norm,
multi_margin_loss and gumbel_softmax, composed of existing differentiable ops (so their
gradients, eager and compiled, come from those ops), and embedding's max_norm renorm."""

import warnings

from .. import _creation, _dtype, _functions, _ops
from .._creation import arange, full, tensor, zeros_like
from .._grad_mode import is_grad_enabled, no_grad

__all__ = ["glu", "tanhshrink", "threshold", "threshold_", "channel_shuffle",
           "local_response_norm", "multi_margin_loss", "gumbel_softmax", "softshrink",
           "hardshrink", "softmin", "rrelu", "rrelu_"]


def _functional():
    from . import functional  # (functional imports this module)
    return functional


def glu(input, dim=-1):
    """First half of input along dim times the sigmoid of the second half."""
    F = _functional()
    F._tensor("glu", "input", input)
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    d = dim % input.ndim if -input.ndim <= dim < input.ndim else dim
    size = input.shape[d] if isinstance(d, int) and 0 <= d < input.ndim else None
    if size is None:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-input.ndim}, {input.ndim - 1}], but got {dim})")
    if size % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {size}")
    half = size // 2
    return input.narrow(d, 0, half) * input.narrow(d, half, half).sigmoid()


def tanhshrink(input):
    _functional()._tensor("tanhshrink", "input", input)
    return input - input.tanh()


def softshrink(input, lambd=0.5):
    """x - lambd above lambd, x + lambd below -lambd, 0 between (gradient 1 outside)."""
    _functional()._tensor("softshrink", "input", input)
    if lambd < 0:
        name = "Double" if input.dtype == _dtype.float64 else "Float"
        top = "1.79769e+308" if name == "Double" else "3.40282e+38"
        raise RuntimeError(f"lambda must be in range [0, {top}] for input dtype {name}, but "
                           f"found {lambd:g}")
    zero = full((), 0.0, dtype=input.dtype)
    return _functions.where(input > lambd, input - lambd,
                            _functions.where(input < -lambd, input + lambd, zero))


def hardshrink(input, lambd=0.5):
    """x where |x| > lambd, else 0."""
    _functional()._tensor("hardshrink", "input", input)
    return _functions.where(input.abs() > lambd, input, full((), 0.0, dtype=input.dtype))


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """softmax of -input along dim (torch's implicit dim, with its warning, when None)."""
    F = _functional()
    if dim is None:
        warnings.warn("Implicit dimension choice for softmin has been deprecated. Change the "
                      "call to include dim=X as an argument.", UserWarning, stacklevel=2)
        dim = 0 if input.dim() in (0, 1, 3) else 1
    x = -input if dtype is None else (-input).to(dtype)
    return F.softmax(x, dim)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Randomized leaky ReLU: in training each negative element's slope is drawn from
    U(lower, upper) (cagrad's generator), in eval it is (lower + upper) / 2."""
    F = _functional()
    F._tensor("rrelu", "input", input)
    if lower > upper:
        raise RuntimeError("Lower bound should be less than or equal to the upper bound")

    def compute(x):
        if not training:
            return F.leaky_relu(x, (lower + upper) / 2)
        with no_grad():
            slope = _creation.empty(tuple(x.shape), dtype=x.dtype).uniform_(lower, upper)
        return _functions.where(x > 0, x, x * slope)

    return _ops.inplace_assign(input, compute) if inplace else compute(input)


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    return rrelu(input, lower, upper, training, True)


def threshold(input, threshold, value, inplace=False):
    """input where input > threshold, else value (the gradient is 0 there). inplace=True
    writes the result into input (recorded in the autograd graph, as torch)."""
    F = _functional()
    F._tensor("threshold", "input", input)

    def compute(x):
        return _functions.where(x > threshold, x, full((), value, dtype=x.dtype))

    return _ops.inplace_assign(input, compute) if inplace else compute(input)


def threshold_(input, threshold, value):
    return globals()["threshold"](input, threshold, value, True)


def channel_shuffle(input, groups):
    """[N, C, *] with its channels regrouped: [g, C/g] read as [C/g, g]."""
    F = _functional()
    F._tensor("channel_shuffle", "input", input)
    if input.ndim < 3:
        raise RuntimeError(f"channel_shuffle expects input with > 2 dims, but got input with "
                           f"sizes {list(input.shape)}")
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value "
                           f"of groups:{groups}")
    n, c, *rest = input.shape
    if c % groups:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels "
                           f"and {groups} groups.")
    grouped = input.reshape(n, groups, c // groups, *rest)
    return grouped.transpose(1, 2).reshape(n, c, *rest)


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """input / (k + alpha * mean of input^2 over `size` neighbouring channels)^beta, the
    window zero-padded by size // 2 before and (size - 1) // 2 after, as torch."""
    F = _functional()
    F._tensor("local_response_norm", "input", input)
    if input.ndim < 3:
        # (torch's message, with its run of spaces)
        raise ValueError(f"Expected 3D or higher dimensionality{' ' * 26}input (got "
                         f"{input.ndim} dimensions)")
    if input.numel() == 0:
        return input
    squares = input * input
    channels = input.shape[1]
    pad = [0, 0] * (input.ndim - 2) + [size // 2, (size - 1) // 2]
    padded = F.pad(squares, pad)
    total = padded.narrow(1, 0, channels)
    for offset in range(1, size):
        total = total + padded.narrow(1, offset, channels)
    return input / (total / size * alpha + k) ** beta


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None,
                      reduce=None, reduction="mean"):
    """Per sample: sum over classes i != y of max(0, margin - x[y] + x[i])^p (times
    weight[y]), divided by the number of classes."""
    F = _functional()
    code = F._reduction_code("multi_margin_loss", size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and weight.ndim != 1:
        raise ValueError("weight must be one-dimensional")
    if weight is not None and weight.requires_grad and is_grad_enabled():
        raise RuntimeError("The function 'multi_margin_loss' is not differentiable with "
                           "respect to argument 'weight'. This input cannot have "
                           "requires_grad True.")
    F._tensor("multi_margin_loss", "input", input)
    batched = input.ndim == 2
    x = input if batched else input.reshape(1, -1)
    y = target.reshape(-1, 1)
    if x.ndim != 2 or y.shape[0] != x.shape[0]:
        raise RuntimeError(f"inconsistent target size: {list(target.shape)} for input of size: "
                           f"{list(input.shape)}")
    classes = x.shape[1]
    terms = (x - x.gather(1, y) + margin).clamp(min=0)
    if p == 2:
        terms = terms * terms
    if weight is not None:
        terms = terms * weight.gather(0, y.reshape(-1)).reshape(-1, 1)
    others = (arange(classes).reshape(1, -1) != y).to(x.dtype)
    loss = (terms * others).sum(1) / classes
    if not batched and target.ndim == 0:
        loss = loss.reshape(())
    if code == 0:
        return loss
    return loss.mean() if code == 1 else loss.sum()


def gumbel_softmax(logits, tau=1, hard=False, eps=1e-10, dim=-1):
    """softmax((logits + Gumbel noise) / tau); hard=True: the one-hot of its argmax in the
    forward pass with the soft sample's gradient (straight-through)."""
    if eps != 1e-10:
        warnings.warn("`eps` parameter is deprecated and has no effect.", stacklevel=2)
    _functional()._tensor("gumbel_softmax", "logits", logits)
    with no_grad():
        gumbels = -zeros_like(logits).exponential_().log()
    y_soft = ((logits + gumbels) / tau).softmax(dim)
    if not hard:
        return y_soft
    index = y_soft.max(dim, keepdim=True)[1]
    y_hard = zeros_like(logits).scatter(dim, index, 1.0)
    return y_hard - y_soft.detach() + y_soft


def embedding_renorm_(weight, input, max_norm, norm_type):
    """In place, without recording: each row of weight that input looks up whose
    norm_type-norm exceeds max_norm is scaled to max_norm / (norm + 1e-7) of itself."""
    rows = sorted({int(i) for i in input.reshape(-1).tolist()})
    if not rows:
        return
    with no_grad():
        index = tensor(rows)
        picked = weight.index_select(0, index)
        norms = picked.norm(norm_type, dim=1)
        scale = _functions.where(norms > max_norm, max_norm / (norms + 1e-7),
                         full((), 1.0, dtype=weight.dtype))
        factors = full((weight.shape[0],), 1.0, dtype=weight.dtype).scatter(0, index, scale)
        weight.mul_(factors.reshape(-1, 1))
