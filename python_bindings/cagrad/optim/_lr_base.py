"""LRScheduler, the base of cagrad.optim.lr_scheduler, with torch's protocol: construction
records "initial_lr" in every param group and takes an initial step (last_epoch -1 -> 0);
step() increments last_epoch and writes get_lr()'s values into the groups' "lr"."""

import warnings
from functools import wraps
from weakref import ref

from .optimizer import Optimizer

EPOCH_DEPRECATION_WARNING = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated "
    "where possible. Please use `scheduler.step()` to step the scheduler. During the "
    "deprecation, if epoch is different from None, the closed form is used instead of the "
    "new chainable form, where available. Please open an issue if you are unable to "
    "replicate your use case: https://github.com/pytorch/pytorch/issues/new/choose."
)

_STEP_ORDER_WARNING = (
    "Detected call of `lr_scheduler.step()` before `optimizer.step()`. In PyTorch 1.1.0 and "
    "later, you should call them in the opposite order: `optimizer.step()` before "
    "`lr_scheduler.step()`.  Failure to do this will result in PyTorch skipping the first "
    "value of the learning rate schedule. See more details at "
    "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate"
)

_STEP_OVERRIDDEN_WARNING = (
    "Seems like `optimizer.step()` has been overridden after learning rate scheduler "
    "initialization. Please, make sure to call `optimizer.step()` before "
    "`lr_scheduler.step()`. See more details at "
    "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate"
)


def check_optimizer(optimizer):
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")


def group_values(optimizer, key):
    """[group[key] for every param group] (a fresh list: later writes do not alias it)."""
    return [group[key] for group in optimizer.param_groups]


def per_group(name, optimizer, value):
    """value repeated for every param group, or a list/tuple with one value per group."""
    if isinstance(value, (list, tuple)):
        if len(value) != len(optimizer.param_groups):
            raise ValueError(f"{name} must have the same length as optimizer.param_groups. "
                             f"{name} has {len(value)} values, param_groups has "
                             f"{len(optimizer.param_groups)}.")
        return list(value)
    return [value] * len(optimizer.param_groups)


def set_momentum(group, use_beta1, momentum):
    """Write a cycled momentum: into betas[0] (Adam-like) or "momentum" (SGD-like)."""
    if use_beta1:
        group["betas"] = (momentum, *group["betas"][1:])
    else:
        group["momentum"] = momentum


def _track_optimizer_steps(optimizer):
    """Wrap optimizer.step (once) so that a call sets optimizer._opt_called, which the
    first scheduler.step() checks to warn about the wrong call order."""
    if hasattr(optimizer.step, "_wrapped_by_lr_sched"):
        return
    step_fn = optimizer.step.__func__
    optimizer_ref = ref(optimizer)  # no reference cycle through the wrapper

    @wraps(step_fn)
    def step(*args, **kwargs):
        owner = optimizer_ref()
        owner._opt_called = True
        return step_fn(owner, *args, **kwargs)

    step._wrapped_by_lr_sched = True
    optimizer.step = step


class _Flag:
    """Sets scheduler.<name> to True inside a with block (get_lr reads these flags)."""

    def __init__(self, scheduler, name):
        self.scheduler, self.name = scheduler, name

    def __enter__(self):
        setattr(self.scheduler, self.name, True)

    def __exit__(self, *exc):
        setattr(self.scheduler, self.name, False)


class LRScheduler:
    """Base class: subclasses define get_lr() (the chainable form: from the groups' current
    lr) and optionally _get_closed_form_lr() (from base_lrs, used by step(epoch))."""

    _get_lr_called_within_step = False
    _is_initial = False

    def __init__(self, optimizer, last_epoch=-1):
        check_optimizer(optimizer)
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(_missing_initial_lr(i))
        self.base_lrs = group_values(optimizer, "initial_lr")
        self.last_epoch = last_epoch
        _track_optimizer_steps(optimizer)
        self._initial_step()

    def _initial_step(self):
        self._step_count = 0
        with _Flag(self, "_is_initial"):
            self.step()

    def state_dict(self):
        """Every attribute but the optimizer (torch's layout, so the keys match)."""
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)

    def get_last_lr(self):
        return self._last_lr

    def get_lr(self):
        raise NotImplementedError

    def step(self, epoch=None):
        if self._step_count == 1:
            self._warn_if_step_order_is_wrong()
        self._step_count += 1
        if epoch is not None:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _warn_if_step_order_is_wrong(self):
        if not hasattr(self.optimizer.step, "_wrapped_by_lr_sched"):
            warnings.warn(_STEP_OVERRIDDEN_WARNING, UserWarning, stacklevel=3)
        elif not getattr(self.optimizer, "_opt_called", False):
            warnings.warn(_STEP_ORDER_WARNING, UserWarning, stacklevel=3)

    def _update_lr(self, epoch=None):
        with _Flag(self, "_get_lr_called_within_step"):
            if epoch is None:
                self.last_epoch += 1
                values = self.get_lr()
            else:
                self.last_epoch = epoch
                closed_form = getattr(self, "_get_closed_form_lr", self.get_lr)
                values = closed_form()
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
        self._last_lr = group_values(self.optimizer, "lr")


def warn_get_lr_outside_step(scheduler):
    if not scheduler._get_lr_called_within_step:
        warnings.warn("To get the last learning rate computed by the scheduler, please use "
                      "`get_last_lr()`.", UserWarning, stacklevel=3)


def _missing_initial_lr(index):
    return (f"param 'initial_lr' is not specified in param_groups[{index}] when resuming "
            "scheduler with last_epoch >= 0.\nThis typically happens when:\n1. You're trying "
            "to resume training from a checkpoint but haven't properly loaded the optimizer "
            "state\n2. You're using last_epoch >= 0 for a fresh training run (not recommended)")


class _LRScheduler(LRScheduler):
    """The old name of LRScheduler, kept by torch for compatibility."""
