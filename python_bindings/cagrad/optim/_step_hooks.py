"""Optimizer step hooks, as torch.optim's: register_step_pre_hook / register_step_post_hook
on one optimizer, and register_optimizer_step_pre_hook / _post_hook for every optimizer
(torch.optim.optimizer's module functions).

A pre-hook is called as hook(optimizer, args, kwargs) before step() and may return
(new_args, new_kwargs) to replace step's arguments; a post-hook is called the same way
after it. As in torch, the hooks' args start with the optimizer itself (so new_args must
too), global pre-hooks run before the optimizer's own and global post-hooks after them.
Every step() is wrapped (the base class's and each subclass's own), and a step that calls
its parent's step() runs the hooks once, not twice.
"""

import functools
from collections import OrderedDict

_global_pre_hooks = OrderedDict()
_global_post_hooks = OrderedDict()


def _handle(hooks):
    from ..nn._hooks import RemovableHandle  # nn imports late: no cycle at import time

    return RemovableHandle(hooks)


def _add(hooks, hook):
    handle = _handle(hooks)
    hooks[handle.id] = hook
    return handle


def register_optimizer_step_pre_hook(hook):
    """hook(optimizer, args, kwargs) before every optimizer's step; a RemovableHandle."""
    return _add(_global_pre_hooks, hook)


def register_optimizer_step_post_hook(hook):
    """hook(optimizer, args, kwargs) after every optimizer's step; a RemovableHandle."""
    return _add(_global_post_hooks, hook)


def with_step_hooks(step_fn):
    """step_fn wrapped to run the pre- and post-hooks around it (once per outer call)."""
    if getattr(step_fn, "_runs_step_hooks", False):
        return step_fn

    @functools.wraps(step_fn)
    def step(*args, **kwargs):
        self = args[0]  # as in torch, the hooks' args include the optimizer itself
        if self.__dict__.get("_in_hooked_step"):
            return step_fn(*args, **kwargs)
        for hook in (*_global_pre_hooks.values(), *self._step_hooks("pre").values()):
            result = hook(self, args, kwargs)
            if result is None:
                continue
            if not (isinstance(result, tuple) and len(result) == 2):
                raise RuntimeError(f"{hook} must return None or a tuple of (new_args, "
                                   f"new_kwargs), but got {result}.")
            args, kwargs = result
        self._in_hooked_step = True
        try:
            out = step_fn(*args, **kwargs)
        finally:
            self._in_hooked_step = False
        for hook in (*self._step_hooks("post").values(), *_global_post_hooks.values()):
            hook(self, args, kwargs)
        return out

    step._runs_step_hooks = True
    return step


class StepHooks:
    """The hook registry of one optimizer (a base of Optimizer)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "step" in cls.__dict__:
            cls.step = with_step_hooks(cls.__dict__["step"])

    def _step_hooks(self, kind):
        return self.__dict__.setdefault(f"_optimizer_step_{kind}_hooks", OrderedDict())

    def register_step_pre_hook(self, hook):
        """hook(optimizer, args, kwargs) -> None or (new_args, new_kwargs), before each
        step(); returns a RemovableHandle."""
        return _add(self._step_hooks("pre"), hook)

    def register_step_post_hook(self, hook):
        """hook(optimizer, args, kwargs) after each step(); returns a RemovableHandle."""
        return _add(self._step_hooks("post"), hook)
