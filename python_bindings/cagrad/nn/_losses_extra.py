"""Cross-entropy options (class weights, label smoothing, class-probability targets), the
weighted nll_loss, and the margin / embedding / likelihood losses of nn.functional.

Everything is composed of recorded differentiable ops (log_softmax, nll_loss, gather,
where, sums), so autograd and the compiled backward trace it like any other graph with no
eager fallback. Formulas and argument checks follow PyTorch 2.13.
"""

import math

from .. import _C, _functions
from .._grad_mode import no_grad
from ._losses import _logsigmoid, _reduce, _reduction, _tensor, pairwise_distance

__all__ = [
    "margin_ranking_loss", "triplet_margin_loss", "triplet_margin_with_distance_loss",
    "cosine_embedding_loss", "gaussian_nll_loss", "poisson_nll_loss", "hinge_embedding_loss",
    "multilabel_soft_margin_loss",
]

# --- class weights, label smoothing, probability targets ---------------------------------

def _class_dim(input):
    return 0 if input.dim() == 1 else 1


def _check_class_weight(weight, n_classes, prefix=""):
    if weight.dim() != 1 or weight.numel() != n_classes:
        raise RuntimeError(f"{prefix}weight tensor should be defined either for all {n_classes} "
                           f"classes or no classes but got weight tensor of shape: "
                           f"{list(weight.shape)}")


def _no_weight_grad(weight):
    # torch's nll_loss kernel does not differentiate its class weights
    if weight.requires_grad and _C.is_grad_enabled():
        raise RuntimeError("The function 'nll_loss_forward' is not differentiable with respect "
                           "to argument 'weight'. This input cannot have requires_grad True.")


def _target_weights(target, weight, ignore_index):
    """weight[target] at each target position, 0 where the target is ignore_index."""
    kept = _C.ne_scalar(target, float(ignore_index))
    safe = target.masked_fill(_C.eq_scalar(target, float(ignore_index)), 0)
    picked = weight.index_select(0, safe.reshape(-1)).reshape(tuple(target.shape))
    return _functions.where(kept, picked, 0.0)


def weighted_nll_loss(input, target, weight, reduction_code, ignore_index):
    """-weight[t] * input[t] per sample; 'mean' divides by the summed weights of the kept
    targets (PyTorch's weighted mean: nan when every target is ignored)."""
    _check_class_weight(weight, input.shape[_class_dim(input)])
    _no_weight_grad(weight)
    # the C kernel checks the targets and gives -input[t] (0 where ignored)
    picked = _C.nll_loss(input, target, 0, ignore_index)
    target_weight = _target_weights(target, weight, ignore_index)
    loss = picked * target_weight
    if reduction_code == 0:
        return loss
    if reduction_code == 2:
        return loss.sum()
    return loss.sum() / target_weight.sum()


def _class_broadcast(weight, input):
    """weight viewed so it broadcasts along the class dim of input."""
    shape = [1] * input.dim()
    shape[_class_dim(input)] = weight.numel()
    return weight.reshape(tuple(shape))


def _check_smoothing(label_smoothing):
    if label_smoothing > 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: "
                           f"{label_smoothing}")


def cross_entropy_with_options(input, target, weight, reduction_code, ignore_index,
                               label_smoothing):
    """F.cross_entropy once any of weight, label smoothing or probability targets is used."""
    _check_smoothing(label_smoothing)
    if target.is_floating_point() and tuple(target.shape) == tuple(input.shape):
        return _probability_targets(input, target, weight, reduction_code, ignore_index,
                                    label_smoothing)
    log_p = input.log_softmax(_class_dim(input))
    if weight is None:
        nll = _C.nll_loss(log_p, target, reduction_code, ignore_index)
    else:
        nll = weighted_nll_loss(log_p, target, weight, reduction_code, ignore_index)
    if label_smoothing <= 0.0:
        return nll
    smooth = _smoothing_term(log_p, target, weight, reduction_code, ignore_index)
    n_classes = input.shape[_class_dim(input)]
    return (1 - label_smoothing) * nll + smooth * (label_smoothing / n_classes)


def _smoothing_term(log_p, target, weight, reduction_code, ignore_index):
    """-sum over classes of (weighted) log-probabilities, ignored targets zeroed, reduced
    as torch does (the weighted mean divides by the kept targets' weights)."""
    class_dim = _class_dim(log_p)
    scaled = log_p if weight is None else log_p * _class_broadcast(weight, log_p)
    kept = _C.ne_scalar(target, float(ignore_index))
    smooth = _functions.where(kept, -scaled.sum(class_dim), 0.0)
    if reduction_code == 0:
        return smooth
    if reduction_code == 2:
        return smooth.sum()
    if weight is None:
        return smooth.sum() / kept.sum()
    return smooth.sum() / _target_weights(target, weight, ignore_index).sum()


def _probability_targets(input, target, weight, reduction_code, ignore_index, label_smoothing):
    """-sum_c w_c * p_c * log_softmax(x)_c; 'mean' divides by the number of samples."""
    if ignore_index != -100:
        raise RuntimeError("ignore_index is not supported for floating point target")
    class_dim = _class_dim(input)
    n_classes = input.shape[class_dim]
    if weight is not None:
        _check_class_weight(weight, n_classes, "cross_entropy: ")
    if label_smoothing > 0.0:
        target = target * (1 - label_smoothing) + label_smoothing / n_classes
    terms = input.log_softmax(class_dim) * target
    if weight is not None:
        terms = terms * _class_broadcast(weight, input)
    if reduction_code == 0:
        return -terms.sum(class_dim)
    if reduction_code == 2:
        return -terms.sum()
    if input.numel() == 0:
        return -terms.sum() * math.nan
    return -terms.sum() / (input.numel() // n_classes)


# --- margin and embedding losses ----------------------------------------------------------

def _legacy(size_average, reduce, reduction):
    return _reduction(size_average, reduce, reduction)


def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                        reduction="mean"):
    """max(0, -target * (input1 - input2) + margin)."""
    reduction = _legacy(size_average, reduce, reduction)
    for name, value in (("input1", input1), ("input2", input2), ("target", target)):
        _tensor("margin_ranking_loss", name, value)
    if input1.dim() != input2.dim() or input1.dim() != target.dim():
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same dimension "
                           f"but got sizes: input1: {input1.size()}, input2: {input2.size()}, "
                           f"target: {target.size()} ")
    loss = _functions.clamp(-target * (input1 - input2) + margin, min=0)
    return _reduce(loss, reduction)


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,
                         reduction="mean"):
    """input where target == 1, max(0, margin - input) where target == -1 (both terms are
    kept for other target values, as torch's formula does)."""
    reduction = _legacy(size_average, reduce, reduction)
    _tensor("hinge_embedding_loss", "input", input)
    _tensor("hinge_embedding_loss", "target", target)
    margin_part = _functions.where(_C.ne_scalar(target, 1.0),
                                   _functions.clamp(margin - input, min=0), 0.0)
    self_part = _functions.where(_C.ne_scalar(target, -1.0), input, 0.0)
    return _reduce(margin_part + self_part, reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction="mean"):
    """Per sample, the mean over classes of -(t log sigmoid(x) + (1 - t) log sigmoid(-x))."""
    if size_average is not None or reduce is not None:
        reduction = _legacy(size_average, reduce, reduction)
    _tensor("multilabel_soft_margin_loss", "input", input)
    _tensor("multilabel_soft_margin_loss", "target", target)
    loss = -(target * _logsigmoid(input) + (1 - target) * _logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    class_dim = input.dim() - 1
    loss = loss.sum(class_dim) / input.size(class_dim)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not valid")
    return _reduce(loss, reduction)


def _check_cosine_embedding_dims(input1, input2, target):
    target_dim = target.dim()
    if input1.dim() != input2.dim():
        raise RuntimeError(f"cosine_embedding_loss : All input tensors should have same "
                           f"dimension but got sizes: input1: {input1.size()}, input2: "
                           f"{input2.size()}, target: {target.size()} ")
    if target_dim == 1 and input1.dim() != 2:
        raise RuntimeError(f"1D target tensor expects 2D input tensors, but found inputs with "
                           f"sizes {list(input1.shape)} and {list(input2.shape)}.")
    if target_dim == 0 and input1.dim() != 1:
        raise RuntimeError(f"0D target tensor expects 1D input tensors, but found inputs with "
                           f"sizes {list(input1.shape)} and {list(input2.shape)}.")
    if target_dim > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")


def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None,
                          reduction="mean"):
    """1 - cos(x1, x2) where target == 1, max(0, cos(x1, x2) - margin) where target == -1."""
    reduction = _legacy(size_average, reduce, reduction)
    for name, value in (("input1", input1), ("input2", input2), ("target", target)):
        _tensor("cosine_embedding_loss", name, value)
    _check_cosine_embedding_dims(input1, input2, target)
    dim = input1.dim() - 1
    eps = 1e-12  # torch's constant: keeps the denominator off zero
    dot = (input1 * input2).sum(dim)
    cos = dot / ((input1 * input1).sum(dim) + eps).mul((input2 * input2).sum(dim) + eps).sqrt()
    positive = _functions.where(_C.eq_scalar(target, 1.0), 1 - cos, 0.0)
    negative = _functions.where(_C.eq_scalar(target, -1.0),
                                _functions.clamp(cos - margin, min=0), 0.0)
    return _reduce(positive + negative, reduction)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    """max(0, margin + d(anchor, positive) - d(anchor, negative)), d the p-norm distance;
    swap uses min(d(a, n), d(p, n)) as the negative distance."""
    reduction = _legacy(size_average, reduce, reduction)
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    dims = (anchor.dim(), positive.dim(), negative.dim())
    if len(set(dims)) != 1:
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have "
                           f"the same number of dimensions, but got: anchor {dims[0]}D, "
                           f"positive {dims[1]}D, and negative {dims[2]}D inputs")
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = _functions.minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce(_functions.clamp(margin + d_pos - d_neg, min=0), reduction)


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin=1.0, swap=False, reduction="mean"):
    """triplet_margin_loss with any distance function (pairwise_distance by default)."""
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    reduction = _legacy(None, None, reduction)
    distance = pairwise_distance if distance_function is None else distance_function
    d_pos = distance(anchor, positive)
    d_neg = distance(anchor, negative)
    if swap:
        d_neg = _functions.minimum(d_neg, distance(positive, negative))
    return _reduce(_functions.clamp(margin + d_pos - d_neg, min=0.0), reduction)


# --- likelihood losses ----------------------------------------------------------------------

def _gaussian_var(var, input):
    """var as a tensor broadcastable to input, PyTorch's checks and shapes."""
    if isinstance(var, float):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        return var  # a constant: broadcasts like torch's var * ones_like(input)
    with no_grad():
        negative = var.numel() > 0 and var.min()._item() < 0
    if negative:
        raise ValueError("var has negative entry/entries")
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape)[:-1] == tuple(var.shape):
            var = var.unsqueeze(-1)
        elif input.dim() == var.dim() and sum(
                v for i, v in zip(input.shape, var.shape) if i != v) == 1:
            pass
        else:
            raise ValueError("var is of incorrect size")
    return var


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """0.5 * (log(max(var, eps)) + (input - target)^2 / max(var, eps)) [+ 0.5 log(2 pi)];
    the clamp at eps passes the gradient through unchanged, as torch's no_grad clamp_."""
    var = _gaussian_var(var, input)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not valid")
    if isinstance(var, float):
        var = max(var, eps)
        loss = 0.5 * (math.log(var) + (input - target) ** 2 / var)
    else:
        with no_grad():
            lift = _functions.clamp(var, min=eps) - var  # added without a gradient
        var = var + lift
        loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8,
                     reduce=None, reduction="mean"):
    """exp(input) - target * input (log_input), else input - target * log(input + eps);
    full adds Stirling's term target * log(target) - target + 0.5 log(2 pi target) where
    target > 1."""
    reduction = _legacy(size_average, reduce, reduction)
    _tensor("poisson_nll_loss", "input", input)
    _tensor("poisson_nll_loss", "target", target)
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        above_one = _C.gt_scalar(target, 1.0)
        safe = _functions.where(above_one, target, 2.0)  # keeps log away from t <= 0
        stirling = safe * safe.log() - safe + 0.5 * (2 * math.pi * safe).log()
        loss = loss + _functions.where(above_one, stirling, 0.0)
    return _reduce(loss, reduction)
