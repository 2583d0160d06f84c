"""ctc_loss (Connectionist Temporal Classification) as a composite, for nn.functional.

The loss of one sample is -log of the total probability of every alignment of its target
with its input frames. The forward ("alpha") recursion runs in log space over the
extended label sequence blank, l1, blank, l2, ..., blank: a Python loop over time whose
step is one logsumexp over (stay, advance one, skip a blank), vectorised over batch and
positions. Autograd differentiates the recursion, eager and compiled.

Unreachable states hold a large finite negative number instead of -inf (log_probs of
-inf are clamped to it), so every logsumexp stays finite and its gradient has no
0 * inf. A sample has no alignment when T < S + its repeated neighbours, or when its
loss reaches that stand-in (every path crosses a log_prob of -inf); its loss is inf (or
0 with zero_infinity), as torch's.

torch's gradient with respect to log_probs is not the plain derivative of the loss: its
kernel adds exp(log_probs) * grad_output at the sample's valid frames (a term that
cancels when log_probs come from log_softmax, the normal use), and gives NaN at an
infinite loss's frames and at log_probs of -inf. cagrad adds the same terms with
zero-valued expressions, so gradients equal torch's in these cases too.
"""

import operator

import numpy as np

from .. import _C, _functions
from .._creation import full, tensor
from . import functional as F

__all__ = ["ctc_loss"]

_CHECKING = " (while checking arguments for ctc_loss_allocate_outputs)"
_FLOAT_CODES = {"float32", "float64"}


def _dtype_name(x):
    return str(x.dtype).rsplit(".", 1)[-1]


def _lengths(name, value):
    """A 1-D int64 numpy array of lengths from a tensor or a sequence of ints."""
    if isinstance(value, _C.TensorBase):
        if _dtype_name(value) not in ("int64", "int32", "int16", "int8", "uint8"):
            raise RuntimeError(f"{name} must be integral")
        return np.asarray(value.detach().numpy(), dtype=np.int64).reshape(-1)
    # ints, numpy ints or 0-d int tensors (anything with __index__), as torch's int lists
    if isinstance(value, (list, tuple)) and all(hasattr(v, "__index__") for v in value):
        return np.array([operator.index(v) for v in value], dtype=np.int64).reshape(-1)
    raise TypeError(f"ctc_loss(): argument '{name}' must be a Tensor or a tuple of ints, not "
                    f"{type(value).__name__}")


def _check_lengths(input_lengths, target_lengths, batch, T):
    if (isinstance(input_lengths, _C.TensorBase) != isinstance(target_lengths, _C.TensorBase)):
        raise TypeError("ctc_loss(): input_lengths and target_lengths must both be Tensors or "
                        "both tuples of ints")
    ins = _lengths("input_lengths", input_lengths)
    outs = _lengths("target_lengths", target_lengths)
    if ins.size != batch:
        raise RuntimeError("input_lengths must be of size batch_size")
    if outs.size != batch:
        raise RuntimeError("target_lengths must be of size batch_size")
    for name, values, top in (("input_lengths", ins, T), ("target_lengths", outs, None)):
        if values.size and values.min() < 0:
            raise RuntimeError(f"Expected {name} to have value at least 0, but got value "
                               f"{values.min()}{_CHECKING}")
        if top is not None and values.size and values.max() > top:
            raise RuntimeError(f"Expected {name} to have value at most {top}, but got value "
                               f"{values.max()}{_CHECKING}")
    return ins, outs


def _padded_targets(targets, lengths):
    """[N, max length] int64 numpy targets from the padded 2-D or concatenated 1-D form
    (an unbatched input takes either, as a batch of one)."""
    values = np.asarray(targets.detach().numpy()).astype(np.int64)
    longest = int(lengths.max()) if lengths.size else 0
    if values.ndim == 2:
        if values.shape[1] < longest:
            raise RuntimeError(f"Expected tensor to have size at least {longest} at dimension "
                               f"1, but got size {values.shape[1]} for argument #2 'targets'"
                               f"{_CHECKING}")
        if values.shape[0] != lengths.size:
            raise RuntimeError(f"Expected tensor to have size {lengths.size} at dimension 0, "
                               f"but got size {values.shape[0]} for argument #2 'targets'"
                               f"{_CHECKING}")
        return values[:, :longest]
    if values.ndim != 1:
        raise RuntimeError(f"Expected 1 to 2 dimensions, but got {values.ndim}-dimensional "
                           f"tensor for argument #2 'targets'{_CHECKING}")
    total = int(lengths.sum())
    if values.shape[0] != total:
        raise RuntimeError(f"Expected tensor to have size {total} at dimension 0, but got "
                           f"size {values.shape[0]} for argument #2 'targets'{_CHECKING}")
    padded = np.zeros((lengths.size, longest), dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    for n, (start, length) in enumerate(zip(starts, lengths)):
        padded[n, :length] = values[start:start + length]
    return padded


def _extended(padded, lengths, blank, classes):
    """The extended label rows [N, 2S+1] (blank between and around the labels, blank past
    each sample's end), where a state may skip the blank before it, and whether each
    sample has any alignment: T >= S + the number of equal neighbours in its target."""
    n, longest = padded.shape
    valid = np.arange(longest)[None, :] < lengths[:, None]
    labels = np.where(valid, padded, blank)
    bad = labels[valid]
    if bad.size and (bad.min() < 0 or bad.max() >= classes):
        raise RuntimeError(f"ctc_loss(): target value {int(bad[(bad < 0) | (bad >= classes)][0])}"
                           f" is outside the {classes} classes of log_probs (torch reads out "
                           f"of bounds here; cagrad refuses)")
    ext = np.full((n, 2 * longest + 1), blank, dtype=np.int64)
    ext[:, 1::2] = labels
    skip = np.zeros(ext.shape, dtype=bool)
    skip[:, 3::2] = labels[:, 1:] != labels[:, :-1]
    repeats = ((labels[:, 1:] == labels[:, :-1]) & valid[:, 1:]).sum(1) if longest else 0
    return ext, skip, lengths + repeats


def _alpha(lp_ext, skip, input_lengths, neg):
    """The forward variables after each sample's last frame, [N, L]."""
    T, N, L = lp_ext.shape
    dtype = lp_ext.dtype
    first = np.zeros((N, L), dtype=bool)
    first[:, :2] = True
    first &= (input_lengths > 0)[:, None]
    floor = full((N, L), neg, dtype=dtype)
    left = full((N, 2), neg, dtype=dtype)
    skip = tensor(skip)
    alpha = _functions.where(tensor(first), lp_ext[0], floor)
    for t in range(1, int(input_lengths.max(initial=0))):
        shifted = _functions.cat([left, alpha], 1)
        moves = _functions.stack([alpha, shifted.narrow(1, 1, L),
                                  _functions.where(skip, shifted.narrow(1, 0, L), floor)], 0)
        step = moves.logsumexp(0) + lp_ext[t]
        running = input_lengths > t
        # a sample past its last frame keeps its alpha
        alpha = step if running.all() else _functions.where(
            tensor(running[:, None]), step, alpha)
    return alpha


def _zero_valued(lp, frames):
    """Per-sample sums of exp(lp) - exp(lp).detach() over the masked frames: zero, with
    the gradient exp(lp) there (torch's kernel's extra term)."""
    e = lp.exp()
    return ((e - e.detach()) * tensor(frames[:, :, None].astype(_dtype_np(lp)))).sum((0, 2))


def _nan_gradient(lp, mask):
    """Per-sample zeros whose gradient is NaN where mask [T, N, C] is set (torch's
    gradient at an infinite loss's frames and at log_probs of -inf): sqrt(u) - sqrt(u)
    at u = 0, whose derivative is 0 * inf. u is lp - lp.detach() (0, slope 1) where lp is
    finite and exp(lp) (0, slope 0) where it is -inf; elsewhere sqrt is taken at 1."""
    finite = tensor(np.isfinite(np.asarray(lp.detach().numpy())))
    u = _functions.where(finite, lp - lp.detach(), lp.exp())
    root = (u + tensor((~mask).astype(_dtype_np(lp)))).sqrt()
    return (root - root).sum((0, 2))


def _dtype_np(x):
    return np.float32 if _dtype_name(x) == "float32" else np.float64


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean",
             zero_infinity=False):
    """The CTC loss of log_probs [T, N, C] (or [T, C]) against padded [N, S] or
    concatenated 1-D targets; reduction 'mean' divides each loss by its target length
    before averaging over the batch, as torch."""
    F._tensor("ctc_loss", "log_probs", log_probs)
    F._tensor("ctc_loss", "targets", targets)
    code = {"none": 0, "mean": 1, "sum": 2}.get(reduction) if isinstance(reduction, str) else None
    if code is None:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if _dtype_name(log_probs) not in _FLOAT_CODES:
        name = {"int64": "Long", "bool": "Bool"}.get(_dtype_name(log_probs),
                                                      _dtype_name(log_probs))
        raise NotImplementedError(f"\"ctc_loss_cpu\" not implemented for '{name}'")
    batched = log_probs.ndim == 3
    if log_probs.ndim not in (2, 3):
        raise RuntimeError(f"Expected 3-dimensional tensor, but got {log_probs.ndim}-dimensional"
                           f" tensor for argument #1 'log_probs'{_CHECKING}")
    lp = log_probs if batched else log_probs.unsqueeze(1)
    T, N, C = lp.shape
    ins, outs = _check_lengths(input_lengths, target_lengths, N, T)
    if not 0 <= blank < C:
        raise RuntimeError("blank must be in label range")
    padded = _padded_targets(targets, outs)
    ext, skip, needed = _extended(padded, outs, blank, C)
    # a large finite stand-in for log(0): exp of it minus anything reachable is 0
    neg = -1e30 if _dtype_name(lp) == "float32" else -1e300
    index = tensor(np.ascontiguousarray(np.broadcast_to(ext, (T,) + ext.shape)))
    # (a log_prob of -inf joins the unreachable states: clamped to the stand-in)
    alpha = _alpha(lp.gather(2, index).clamp(min=neg), skip, ins, neg)
    # the last blank and the last label: both may end a path (a label only if S > 0)
    ends_at = np.stack([2 * outs, np.maximum(2 * outs - 1, 0)], 1)
    ends = _functions.where(tensor(np.stack([outs >= 0, outs > 0], 1)),
                            alpha.gather(1, tensor(ends_at)), full((N, 2), neg, dtype=lp.dtype))
    loss = -ends.logsumexp(1)
    # no frames and an empty target: the empty product, log 1
    empty = (ins == 0) & (outs == 0)
    if empty.any():
        loss = _functions.where(tensor(empty), full((N,), 0.0, dtype=lp.dtype), loss)
    # no alignment: too few frames, or every alignment crosses a log_prob of -inf
    feasible = (ins >= needed) & (np.asarray(loss.detach().numpy()) < -neg / 2)
    if not feasible.all():
        loss = _functions.where(tensor(feasible), loss, full(
            (N,), 0.0 if zero_infinity else float("inf"), dtype=lp.dtype))
    if lp.requires_grad:
        loss = loss + _torch_gradient_terms(lp, ins, feasible, zero_infinity)
    if code == 1:  # mean: per target length, then over the batch
        scale = tensor(np.maximum(outs, 1).astype(_dtype_np(lp)))
        return (loss / scale).mean()
    if code == 2:
        return loss.sum()
    return loss if batched else loss.squeeze(0)


def _torch_gradient_terms(lp, input_lengths, feasible, zero_infinity):
    """Per-sample zeros that carry torch's extra gradient (module docstring): exp(lp) at
    each kept sample's valid frames, NaN there for an infinite loss and at log_probs of
    -inf. A loss zeroed by zero_infinity gets no gradient at all, as torch."""
    T = lp.shape[0]
    frames = np.arange(T)[:, None] < input_lengths[None, :]  # [T, N]
    keep = (feasible | (not zero_infinity))[None, :] & frames
    terms = _zero_valued(lp, keep)
    nan = (np.asarray(lp.detach().numpy()) == -np.inf) | ~feasible[None, :, None]
    nan &= keep[:, :, None]
    if nan.any():
        terms = terms + _nan_gradient(lp, nan)
    return terms
