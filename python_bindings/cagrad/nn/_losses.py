"""Losses and distances of nn.functional written as compositions of differentiable ops.

Each function builds its result from cagrad's recorded ops (log, abs, where, sum, ...), so
autograd and the compiled backward differentiate it with no dedicated C kernel. Formulas
are PyTorch's (same clamps, same numerically stable forms); argument checks raise
PyTorch's exception types and messages.
"""

import math
import warnings

from .. import _C, _bool_ops, _functions
from .._ops import FUNCTIONS as _REGISTRY
from .._grad_mode import no_grad

__all__ = [
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "l1_loss", "smooth_l1_loss",
    "huber_loss", "kl_div", "soft_margin_loss", "cosine_similarity", "pairwise_distance",
    "normalize",
]

_logsigmoid = _REGISTRY["logsigmoid"]
_LOG_FLOOR = -100.0  # PyTorch clamps the logs of binary_cross_entropy to >= -100


def _tensor(fn, name, value):
    if not isinstance(value, _C.TensorBase):
        raise TypeError(f"{fn}(): argument '{name}' must be Tensor, not {type(value).__name__}")
    return value


def _constant(fn, name, value):
    """A weight PyTorch does not differentiate: requiring its gradient is PyTorch's error."""
    _tensor(fn, name, value)
    if value.requires_grad and _C.is_grad_enabled():
        raise RuntimeError(f"The function '{fn}' is not differentiable with respect to "
                           f"argument '{name}'. This input cannot have requires_grad True.")
    return value


def _reduction(size_average, reduce, reduction, extra=()):
    """The reduction to apply: the legacy flags win (with PyTorch's warning); an unknown
    name is PyTorch's ValueError."""
    if size_average is not None or reduce is not None:
        from .functional import _legacy_reduction  # shared with the C-backed losses
        reduction = _legacy_reduction(size_average, reduce)
    if reduction not in ("none", "mean", "sum", *extra):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _reduce(loss, reduction):
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.mean()


def _warn_size_mismatch(input, target):
    # broadcasting a target of another shape is legal but usually a bug: PyTorch warns
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn(f"Using a target size ({target.size()}) that is different to the input "
                      f"size ({input.size()}). This will likely lead to incorrect results due "
                      f"to broadcasting. Please ensure they have the same size.", stacklevel=3)


def _safe_log(x, where_positive):
    """log(x) where x > 0 (else 0), with no inf/nan entering the backward at x == 0."""
    return _functions.where(where_positive, x, 1.0).log()


def _clamped_log(x):
    # log(x) floored at -100 as PyTorch; x == 0 gives -100 and a zero gradient
    positive = _C.gt_scalar(x, 0.0)
    return _functions.where(positive, _functions.clamp(_safe_log(x, positive), min=_LOG_FLOOR),
                            _LOG_FLOOR)


def _check_probabilities(input):
    with no_grad():
        inside = _C.mul(_C.ge_scalar(input, 0.0), _C.le_scalar(input, 1.0))
        # _item(), not float(): the check only raises, the graph does not depend on the
        # value, so it is no graph break (PyTorch checks inside its kernel)
        ok = input.numel() == 0 or inside.min()._item() == 1.0
    if not ok:
        raise RuntimeError("all elements of input should be between 0 and 1")


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """-w * (t * log(x) + (1 - t) * log(1 - x)), each log floored at -100."""
    fn = "binary_cross_entropy"
    reduction = _reduction(size_average, reduce, reduction)
    _tensor(fn, "input", input)
    _tensor(fn, "target", target)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Using a target size ({target.size()}) that is different to the "
                         f"input size ({input.size()}) is deprecated. Please ensure they have "
                         f"the same size.")
    _same_dtype(target, input)
    _check_probabilities(input)
    loss = -(target * _clamped_log(input) + (1 - target) * _clamped_log(1 - input))
    if weight is not None:
        loss = loss * _constant(fn, "weight", weight)
    return _reduce(loss, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction="mean", pos_weight=None):
    """(1 - t) * x - (1 + (pos_weight - 1) * t) * logsigmoid(x): the stable form, with no
    exp of a large positive number."""
    fn = "binary_cross_entropy_with_logits"
    reduction = _reduction(size_average, reduce, reduction)
    _tensor(fn, "input", input)
    _tensor(fn, "target", target)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Target size ({target.size()}) must be the same as input size "
                         f"({input.size()})")
    # torch computes in place into (1 - target): each step in the promoted dtype, stored in
    # target's (and log_sigmoid in input's); the casts are no-ops when the dtypes agree
    log_sigmoid = _logsigmoid(input)
    if pos_weight is not None:
        log_weight = (_constant(fn, "pos_weight", pos_weight) - 1) * target + 1
        log_sigmoid = _as_dtype_of(log_sigmoid * log_weight, input)
    loss = _as_dtype_of((1 - target) * input, target)
    loss = _as_dtype_of(loss - log_sigmoid, target)
    if weight is not None:
        loss = _as_dtype_of(loss * _constant(fn, "weight", weight), target)
    return _reduce(loss, reduction)


def _as_dtype_of(x, like):
    return _bool_ops.as_code(x, like._dtype)


def _same_dtype(target, input):
    """torch's error for a target whose dtype is not the input's (the losses whose kernels
    take one dtype)."""
    if target._dtype != input._dtype:
        raise RuntimeError(f"Found dtype {_bool_ops.TYPE_NAME[target._dtype]} but expected "
                           f"{_bool_ops.TYPE_NAME[input._dtype]}")


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    fn = "l1_loss"
    _tensor(fn, "input", input)
    _tensor(fn, "target", target)
    _warn_size_mismatch(input, target)
    reduction = _reduction(size_average, reduce, reduction)
    loss = (input - target).abs()
    if weight is None:
        return _reduce(loss, reduction)
    _check_weight(weight, input)
    loss = loss * weight
    # PyTorch's weighted mean divides by the weights' sum, not the element count
    return loss.sum() / weight.sum() if reduction == "mean" else _reduce(loss, reduction)


def _check_weight(weight, input):
    _tensor("loss", "weight", weight)
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean",
                   beta=1.0):
    """0.5 * d^2 / beta where |d| < beta, else |d| - 0.5 * beta (d = input - target);
    beta=0 is the L1 loss."""
    fn = "smooth_l1_loss"
    _tensor(fn, "input", input)
    _tensor(fn, "target", target)
    _warn_size_mismatch(input, target)
    reduction = _reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    diff = input - target
    distance = diff.abs()
    if beta == 0:
        return _reduce(distance, reduction)
    inside = _C.lt_scalar(distance, float(beta))
    loss = _functions.where(inside, diff * diff * (0.5 / beta), distance - 0.5 * beta)
    return _reduce(loss, reduction)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """0.5 * d^2 where |d| < delta, else delta * (|d| - 0.5 * delta)."""
    fn = "huber_loss"
    _tensor(fn, "input", input)
    _tensor(fn, "target", target)
    _warn_size_mismatch(input, target)
    reduction = _reduction(None, None, reduction)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    diff = input - target
    distance = diff.abs()
    inside = _C.lt_scalar(distance, float(delta))
    loss = _functions.where(inside, diff * diff * 0.5, (distance - 0.5 * delta) * delta)
    loss = _in_input_dtype(loss, input, target)
    if weight is None:
        return _reduce(loss, reduction)
    _check_weight(weight, input)
    return _reduce(loss * weight, reduction)  # a plain mean here, as PyTorch


def _in_input_dtype(loss, input, target):
    """huber_loss's elementwise loss, which torch writes into a tensor of input's dtype; its
    backward kernel takes one dtype only, so a gradient through a target of another dtype
    raises torch's error when backward reaches it."""
    if target._dtype == input._dtype:
        return loss
    loss = _as_dtype_of(loss, input)
    if loss.requires_grad:
        def refuse(grad):
            _same_dtype(target, input)
        loss.register_hook(refuse)
    return loss


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """Pointwise KL divergence of target from input (input holds log-probabilities):
    t * (log t - x), 0 where t == 0; with log_target, exp(t) * (t - x)."""
    fn = "kl_div"
    _tensor(fn, "input", input)
    _tensor(fn, "target", target)
    if size_average is not None or reduce is not None:
        reduction = _reduction(size_average, reduce, reduction)
    else:
        reduction = _reduction(None, None, reduction, extra=("batchmean",))
        if reduction == "mean":
            warnings.warn("reduction: 'mean' divides the total loss by both the batch size "
                          "and the support size.'batchmean' divides only by the batch size, "
                          "and aligns with the KL div math definition.'mean' will be changed "
                          "to behave the same as 'batchmean' in the next major release.",
                          stacklevel=2)
    if log_target:
        loss = target.exp() * (target - input)
    else:
        zero = _C.eq_scalar(target, 0.0)
        # x log x -> 0 at x = 0 (xlogy); a negative target gives nan, as in PyTorch
        target_log_target = _functions.where(
            zero, 0.0, target * _functions.where(zero, 1.0, target).log())
        loss = target_log_target - target * input
    if reduction == "batchmean":
        total = loss.sum()
        return total / input.shape[0] if input.ndim != 0 else total
    return _reduce(loss, reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """log(1 + exp(-y * x)), computed as -logsigmoid(y * x) (no overflow)."""
    fn = "soft_margin_loss"
    _tensor(fn, "input", input)
    _constant(fn, "target", target)
    reduction = _reduction(size_average, reduce, reduction)
    # torch multiplies into a tensor of input's dtype: the product is stored in it
    return _reduce(-_logsigmoid(_as_dtype_of(target * input, input)), reduction)


def _vector_norm(x, p, dim, keepdim):
    """The p-norm over dim (an int), PyTorch's torch.norm for p in {0, inf, -inf, other}."""
    if p == 2:
        return (x * x).sum(dim, keepdim=keepdim).sqrt()
    if p == 1:
        return x.abs().sum(dim, keepdim=keepdim)
    if p == math.inf:
        return x.abs().amax(dim, keepdim=keepdim)
    if p == -math.inf:
        return x.abs().amin(dim, keepdim=keepdim)
    if p == 0:  # the count of nonzeros: piecewise constant, no gradient
        return _C.to_dtype(_C.ne_scalar(x, 0.0), x._dtype).sum(dim, keepdim=keepdim)
    return x.abs().pow(float(p)).sum(dim, keepdim=keepdim).pow(1.0 / p)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum(x1/|x1| * x2/|x2|) over dim; each norm is floored at eps without autograd
    seeing the floor (as PyTorch, which clamps the norms under no_grad)."""
    fn = "cosine_similarity"
    _tensor(fn, "x1", x1)
    _tensor(fn, "x2", x2)
    x1, x2 = _broadcast(x1, x2)  # the norms are over the broadcast dims, as PyTorch's
    norm1 = _floored_norm(x1, dim, eps)
    norm2 = _floored_norm(x2, dim, eps)
    return ((x1 / norm1) * (x2 / norm2)).sum(dim)


def _broadcast(a, b):
    """a and b expanded to their common broadcast shape."""
    ndim = max(a.ndim, b.ndim)
    sa = (1,) * (ndim - a.ndim) + tuple(a.shape)
    sb = (1,) * (ndim - b.ndim) + tuple(b.shape)
    shape = []
    for m, n in zip(sa, sb):
        if m != n and 1 not in (m, n):
            raise RuntimeError(f"The size of tensor a ({m}) must match the size of tensor b "
                               f"({n}) at non-singleton dimension {len(shape)}")
        shape.append(max(m, n))
    return a.expand(*shape), b.expand(*shape)


def _floored_norm(x, dim, eps):
    norm = _vector_norm(x, 2, dim, True)
    # the floored value in the forward, the plain norm's gradient in the backward
    return norm + (_functions.clamp(norm.detach(), min=eps) - norm.detach())


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """The p-norm of x1 - x2 + eps over the last dim of their broadcast shape."""
    fn = "pairwise_distance"
    _tensor(fn, "x1", x1)
    _tensor(fn, "x2", x2)
    last = max(x1.ndim, x2.ndim) - 1
    return _vector_norm(x1 - x2 + eps, p, last, keepdim)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """input divided by its p-norm over dim, the norm floored at eps."""
    if out is not None:
        raise NotImplementedError("cagrad's normalize() does not support out=; use the "
                                  "returned tensor")
    _tensor("normalize", "input", input)
    norm = _functions.clamp(_vector_norm(input, p, dim, True), min=eps)
    return input / norm
