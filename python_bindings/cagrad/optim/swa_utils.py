"""cagrad.optim.swa_utils: stochastic weight averaging and EMA, as torch.optim.swa_utils
AveragedModel, SWALR, update_bn and the avg-fn factories.

The averages are updated in place under no_grad with cagrad's tensor ops (lerp_ for float
tensors, as PyTorch's foreach path does), so the values equal PyTorch's up to rounding.
"""

import copy
import itertools
import math

from .. import _C
from .._creation import get_default_dtype, tensor
from .._dtype import float64
from .._grad_mode import no_grad
from ..nn.module import Module
from ..nn.normalization import _BatchNorm
from ._lr_base import LRScheduler, per_group, warn_get_lr_outside_step

__all__ = ["AveragedModel", "SWALR", "update_bn", "get_ema_multi_avg_fn",
           "get_swa_multi_avg_fn", "get_ema_avg_fn", "get_swa_avg_fn"]


def _check_decay(decay):
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in "
                         f"[0,1] range.")


def _count(num_averaged):
    return int(num_averaged) if isinstance(num_averaged, _C.TensorBase) else num_averaged


def get_ema_multi_avg_fn(decay=0.999):
    """multi_avg_fn for an exponential moving average: ema = lerp(ema, current, 1 - decay)."""
    _check_decay(decay)

    def ema_update(ema_param_list, current_param_list, _):
        with no_grad():
            for ema, current in zip(ema_param_list, current_param_list, strict=True):
                if ema.is_floating_point():
                    ema.lerp_(current, 1 - decay)
                else:
                    ema.copy_(ema * decay + current * (1 - decay))
    return ema_update


def get_swa_multi_avg_fn():
    """multi_avg_fn for the running mean: avg += (current - avg) / (n + 1)."""
    def swa_update(averaged_param_list, current_param_list, num_averaged):
        n = _count(num_averaged)
        weight = 1 / (n + 1)
        if isinstance(num_averaged, _C.TensorBase):
            # PyTorch's 1 / (count tensor + 1) is a default-dtype tensor: round like it
            weight = float(_C.to_dtype(tensor(weight, dtype=float64),
                                       get_default_dtype()._code).item())
        with no_grad():
            for avg, current in zip(averaged_param_list, current_param_list, strict=True):
                if avg.is_floating_point():
                    avg.lerp_(current, weight)
                else:
                    avg.copy_(avg + (current - avg) / (n + 1))
    return swa_update


def get_ema_avg_fn(decay=0.999):
    """avg_fn (one tensor at a time) for an exponential moving average."""
    _check_decay(decay)

    def ema_update(ema_param, current_param, num_averaged):
        with no_grad():
            return decay * ema_param + (1 - decay) * current_param
    return ema_update


def get_swa_avg_fn():
    """avg_fn (one tensor at a time) for the running mean."""
    def swa_update(averaged_param, current_param, num_averaged):
        with no_grad():
            return averaged_param + (current_param - averaged_param) / (_count(num_averaged) + 1)
    return swa_update


class AveragedModel(Module):
    """A deep copy of model whose parameters (and buffers, with use_buffers=True) hold an
    average of the values passed to update_parameters(): the running mean by default, or
    what avg_fn (per tensor) / multi_avg_fn (per list) computes. forward() runs the copy."""

    def __init__(self, model, device=None, avg_fn=None, multi_avg_fn=None, use_buffers=False):
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = copy.deepcopy(model)
        self.register_buffer("n_averaged", tensor(0))
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _pairs(self, model):
        if self.use_buffers:
            mine = itertools.chain(self.module.parameters(), self.module.buffers())
            theirs = itertools.chain(model.parameters(), model.buffers())
        else:
            mine, theirs = self.parameters(), model.parameters()
        return [(a.detach(), b.detach()) for a, b in zip(mine, theirs)]

    def update_parameters(self, model):
        """Fold model's current values into the average (the first call copies them)."""
        pairs = self._pairs(model)
        n = int(self.n_averaged)
        with no_grad():
            if n == 0:
                for averaged, current in pairs:
                    averaged.copy_(current)
            elif self.multi_avg_fn is not None:
                _by_dtype(pairs, lambda a, c: self.multi_avg_fn(a, c, self.n_averaged))
            else:
                # the running mean by default, one tensor at a time as PyTorch's CPU path
                avg_fn = self.avg_fn or get_swa_avg_fn()
                for averaged, current in pairs:
                    averaged.copy_(avg_fn(averaged, current, self.n_averaged))
            if not self.use_buffers:  # buffers follow the source model
                for mine, theirs in zip(self.module.buffers(), model.buffers(), strict=True):
                    mine.detach().copy_(theirs.detach())
            self.n_averaged.add_(1)


def _by_dtype(pairs, update):
    """update(averaged list, current list) once per dtype (PyTorch groups them so)."""
    groups = {}
    for averaged, current in pairs:
        groups.setdefault(averaged.dtype, ([], []))
        groups[averaged.dtype][0].append(averaged)
        groups[averaged.dtype][1].append(current)
    for averaged, current in groups.values():
        update(averaged, current)


def update_bn(loader, model, device=None):
    """Recompute the running statistics of model's batch-norm layers with one pass over
    loader (each batch a tensor, or a list/tuple whose first item is the input), as
    cumulative averages (momentum None) in training mode."""
    momenta = {}
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None
    with no_grad():
        for batch in loader:
            if isinstance(batch, (list, tuple)):
                batch = batch[0]
            model(batch)
    for module, momentum in momenta.items():
        module.momentum = momentum
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneals each group's lr to swa_lr over anneal_epochs steps (cosine or linear), then
    holds it there."""

    def __init__(self, optimizer, swa_lr, anneal_epochs=10, anneal_strategy="cos",
                 last_epoch=-1):
        for value, group in zip(per_group("swa_lr", optimizer, swa_lr),
                                optimizer.param_groups, strict=True):
            group["swa_lr"] = value
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")
        self._set_anneal_func(anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got "
                             f"{anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t):
        return t

    @staticmethod
    def _cosine_anneal(t):
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        # the lr the annealing started from, recovered from the current one
        return swa_lr if alpha == 1 else (lr - alpha * swa_lr) / (1 - alpha)

    def _fraction(self, step):
        return max(0, min(1, step / max(1, self.anneal_epochs)))

    def get_lr(self):
        warn_get_lr_outside_step(self)
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_alpha = self.anneal_func(self._fraction(step - 1))
        alpha = self.anneal_func(self._fraction(step))
        out = []
        for group in self.optimizer.param_groups:
            start = self._get_initial_lr(group["lr"], group["swa_lr"], prev_alpha)
            out.append(group["swa_lr"] * alpha + start * (1 - alpha))
        return out

    def _set_anneal_func(self, anneal_strategy):
        self._anneal_strategy = anneal_strategy
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" else \
            self._linear_anneal

    def state_dict(self):
        return {key: value for key, value in self.__dict__.items()
                if key not in ("optimizer", "anneal_func")}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)
        self._set_anneal_func(self._anneal_strategy)
