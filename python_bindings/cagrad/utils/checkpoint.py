"""cagrad.utils.checkpoint: activation checkpointing, as torch.utils.checkpoint.

checkpoint(fn, *args, use_reentrant=...) runs fn without keeping its intermediates and
runs it again during backward (with the random generator restored, so dropout draws the
same mask). Two variants, as in PyTorch:

- use_reentrant=False (recommended): fn's ops record their nodes as usual, but every
  tensor they save goes through saved-tensor hooks that keep only its place in the
  order. The first backward that needs one runs fn again on detached inputs and hands
  out the tensors it saved. The graph is the ordinary one, so autograd.grad() reaches
  the parameters inside, and compiled autograd captures and fuses the block's backward
  like any other part of the graph.
- use_reentrant=True (the default when it is not given, with PyTorch's warning): the
  block is one custom Function node; its backward recomputes the block and runs a
  backward through it. Under compiled autograd it is one call-out step. Parameters the
  block uses get their gradient accumulated into .grad directly, so, as in PyTorch, a
  backward with inputs (autograd.grad(), backward(inputs=...)) that reaches the block
  raises RuntimeError. A block none of whose tensor arguments requires grad runs under
  no_grad (PyTorch's warning), so its output does not require grad either.
"""

import warnings

from .. import _C
from .._creation import get_rng_state, set_rng_state
from .._grad_mode import enable_grad, is_grad_enabled, no_grad
from ..autograd import backward as _backward
from ..autograd.function import Function
from ..autograd.graph import saved_tensors_hooks

__all__ = ["checkpoint", "checkpoint_sequential", "CheckpointError"]


class CheckpointError(RuntimeError):
    """The recomputation saved other tensors than the original forward (torch's name)."""


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
        if not _checkpoint_valid():
            raise RuntimeError(
                "When use_reentrant=True, torch.utils.checkpoint is incompatible with .grad() "
                "or passing an `inputs` parameter to .backward(). To resolve this error, you "
                "can either set use_reentrant=False, or call .backward() without passing the "
                "`inputs` argument.")
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


def _checkpoint_valid():
    """False in a backward given `inputs` (autograd.grad(), backward(inputs=...)), as
    torch.autograd._is_checkpoint_valid: the block's backward writes .grad of whatever
    requires grad inside it, which such a backward must not do."""
    from ..autograd.variable import _running
    return not _running or _running[-1].inputs is None


def _recompute(ctx, args):
    """Run the block again with grad mode on and the generator where forward found it."""

    def run():
        with enable_grad():
            return ctx.run_function(*args, **ctx.kwargs)

    return _rng_restored(ctx.rng_state, run)


def _rng_restored(rng_state, run):
    """run() with the generator where the forward found it, then put back."""
    saved = get_rng_state() if rng_state is not None else None
    if saved is not None:
        set_rng_state(rng_state)
    try:
        return run()
    finally:
        if saved is not None:
            set_rng_state(saved)


class _Frame:
    """One non-reentrant checkpointed call: how to run it again, and the metadata of the
    tensors its ops saved. A backward's first unpack recomputes them all; each unpack then
    hands one out and lets go of it, so the next backward (retain_graph) recomputes."""

    def __init__(self, function, args, kwargs, rng_state):
        self.function, self.args, self.kwargs, self.rng_state = function, args, kwargs, rng_state
        self.versions = [a._version if _is_tensor(a) else None for a in args]
        self.metas = []
        self.recomputed = {}

    def pack(self, t):
        self.metas.append((t._dtype, tuple(t._shape)))
        return self, len(self.metas) - 1

    def _inputs(self):
        out = []
        for i, (a, version) in enumerate(zip(self.args, self.versions)):
            if not _is_tensor(a):
                out.append(a)
                continue
            if a._version != version:
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified "
                    f"by an inplace operation: input {i} of a checkpointed function is at "
                    f"version {a._version}; expected version {version} instead")
            d = a.detach()
            d.requires_grad = a.requires_grad
            out.append(d)
        return out

    def recompute(self):
        got = []
        args = self._inputs()

        def run():
            with enable_grad(), saved_tensors_hooks(lambda t: got.append(t) or t, lambda t: t):
                self.function(*args, **self.kwargs)

        _rng_restored(self.rng_state, run)
        if len(got) < len(self.metas):  # more is fine: PyTorch stops early and never sees it
            raise CheckpointError(
                f"torch.utils.checkpoint: A different number of tensors was saved during the "
                f"original forward and recomputation.\nNumber of tensors saved during forward: "
                f"{len(self.metas)}\nNumber of tensors saved during recomputation: {len(got)}")
        for i, (t, meta) in enumerate(zip(got, self.metas)):
            if (t._dtype, tuple(t._shape)) != meta:
                raise CheckpointError(
                    f"torch.utils.checkpoint: Recomputed values for the following tensors have "
                    f"different metadata than during the forward pass.\ntensor at position {i}:"
                    f"\nsaved metadata: {meta}\nrecomputed metadata: "
                    f"{(t._dtype, tuple(t._shape))}")
            self.recomputed[i] = t


def _unpack(packed):
    frame, i = packed
    if i not in frame.recomputed:
        frame.recompute()
    return frame.recomputed.pop(i)


def _checkpoint_without_reentrant(function, preserve_rng_state, args, kwargs):
    frame = _Frame(function, args, kwargs, get_rng_state() if preserve_rng_state else None)
    with saved_tensors_hooks(frame.pack, _unpack):
        return function(*args, **kwargs)


def checkpoint(function, *args, use_reentrant=None, context_fn=None, determinism_check="default",
               debug=False, early_stop=True, preserve_rng_state=True, **kwargs):
    """Run function(*args, **kwargs) without keeping its intermediates; recompute them in
    backward (torch.utils.checkpoint.checkpoint)."""
    if use_reentrant is None:
        warnings.warn("torch.utils.checkpoint: the use_reentrant parameter should be passed "
                      "explicitly. use_reentrant=False is recommended.", stacklevel=2)
    if context_fn is not None:
        raise NotImplementedError("checkpoint(): context_fn (selective activation "
                                  "checkpointing) is not supported by cagrad; see "
                                  "docs/python-api.md, 'Where cagrad differs from PyTorch'")
    if determinism_check not in ("default", "none"):
        raise ValueError(f"determinism_check should be one of ['default', 'none'], but got "
                         f"{determinism_check}")
    if use_reentrant is None:
        use_reentrant = True  # PyTorch 2.13's default when it is not given
    if use_reentrant and kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if not is_grad_enabled():
        return function(*args, **kwargs)
    if not use_reentrant:
        return _checkpoint_without_reentrant(function, preserve_rng_state, args, kwargs)
    if not any(_is_tensor(a) and a.requires_grad for a in args):
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None",
                      stacklevel=2)
        with no_grad():  # as PyTorch's CheckpointFunction.forward: no history at all
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
