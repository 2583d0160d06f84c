"""cagrad.utils.checkpoint: activation checkpointing, as torch.utils.checkpoint.

checkpoint(fn, *args, use_reentrant=False) runs fn without recording its graph or keeping
its intermediates, and runs it again during backward (with the random generator restored,
so dropout draws the same mask) to get the gradients. It is one custom Function node, so
under compiled autograd the block is one call-out step of the compiled graph: the
recomputation and its backward run inside it.

Both use_reentrant=True and False take this path. As with PyTorch's reentrant variant,
parameters the block uses get their gradient accumulated into .grad during the backward
directly, so autograd.grad() with respect to a parameter used only inside the block does
not see it (RuntimeError).
"""

import warnings

from .. import _C
from .._creation import get_rng_state, set_rng_state
from .._grad_mode import enable_grad, is_grad_enabled
from ..autograd import backward as _backward
from ..autograd.function import Function

__all__ = ["checkpoint", "checkpoint_sequential"]


def _is_tensor(x):
    return isinstance(x, _C.TensorBase)


class CheckpointFunction(Function):
    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, kwargs, *args):
        ctx.run_function = run_function
        ctx.kwargs = kwargs
        ctx.rng_state = get_rng_state() if preserve_rng_state else None
        ctx.arg_is_tensor = [_is_tensor(a) for a in args]
        ctx.plain_args = [None if t else a for a, t in zip(args, ctx.arg_is_tensor)]
        ctx.save_for_backward(*[a for a in args if _is_tensor(a)])
        return run_function(*args, **kwargs)

    @staticmethod
    def backward(ctx, *grads):
        tensors = iter(ctx.saved_tensors)
        args = []
        for is_tensor, plain in zip(ctx.arg_is_tensor, ctx.plain_args):
            if not is_tensor:
                args.append(plain)
                continue
            t = next(tensors)
            d = t.detach()
            d.requires_grad = t.requires_grad
            args.append(d)
        outputs = _recompute(ctx, args)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grads)
                 if _is_tensor(o) and o.requires_grad and g is not None]
        if not pairs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is "
                               "not necessary")
        _backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None, None) + tuple(a.grad if t else None
                                          for a, t in zip(args, ctx.arg_is_tensor))


def _recompute(ctx, args):
    """Run the block again with grad mode on and the generator where forward found it."""
    saved = get_rng_state() if ctx.rng_state is not None else None
    if saved is not None:
        set_rng_state(ctx.rng_state)
    try:
        with enable_grad():
            return ctx.run_function(*args, **ctx.kwargs)
    finally:
        if saved is not None:
            set_rng_state(saved)


def checkpoint(function, *args, use_reentrant=None, context_fn=None, determinism_check="default",
               debug=False, early_stop=True, preserve_rng_state=True, **kwargs):
    """Run function(*args, **kwargs) without keeping its intermediates; recompute them in
    backward (torch.utils.checkpoint.checkpoint)."""
    if use_reentrant is None:
        warnings.warn("torch.utils.checkpoint: the use_reentrant parameter should be passed "
                      "explicitly. use_reentrant=False is recommended.", stacklevel=2)
    if context_fn is not None:
        raise NotImplementedError("cagrad's checkpoint() does not take context_fn")
    if determinism_check not in ("default", "none"):
        raise ValueError(f"determinism_check should be one of ['default', 'none'], but got "
                         f"{determinism_check}")
    if use_reentrant and kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if not is_grad_enabled() or not any(_is_tensor(a) and a.requires_grad for a in args):
        # Nothing to recompute for: run it as it is (parameters inside still get their
        # gradients, as with PyTorch's non-reentrant variant).
        if use_reentrant and is_grad_enabled():
            warnings.warn("None of the inputs have requires_grad=True. Gradients will be None",
                          stacklevel=2)
        return function(*args, **kwargs)
    return CheckpointFunction.apply(function, bool(preserve_rng_state), kwargs, *args)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """Checkpoint a sequence of modules in `segments` chunks (the last runs normally)."""
    if isinstance(functions, _C.TensorBase) or not hasattr(functions, "__iter__"):
        raise TypeError("checkpoint_sequential() takes a sequence of functions or modules")
    functions = list(functions.children()) if hasattr(functions, "children") else list(functions)
    size = len(functions) // segments

    def run(start, end):
        def forward(x):
            for f in functions[start:end + 1]:
                x = f(x)
            return x
        return forward

    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run(start, end), input, use_reentrant=use_reentrant, **kwargs)
    return run(end + 1, len(functions) - 1)(input)
