"""optim.Adagrad, in the order of operations of torch.optim.Adagrad's single-tensor path."""

from .._creation import full_like
from ._update_math import addcdiv_, check_non_negative, l2_penalty
from .optimizer import Optimizer, _check_single_tensor


class Adagrad(Optimizer):
    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0,
                 initial_accumulator_value=0, eps=1e-10, foreach=None, *, maximize=False,
                 differentiable=False, fused=None):
        check_non_negative(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                           initial_accumulator_value=initial_accumulator_value, eps=eps)
        _check_single_tensor(differentiable=differentiable, fused=fused)
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach,
                        maximize=maximize, differentiable=False, fused=None)
        super().__init__(params, defaults)
        # Unlike the other optimizers, torch creates Adagrad's state at construction.
        for group in self.param_groups:
            for param in group["params"]:
                self._state_of(param)

    def _state_of(self, param):
        """param's state; groups added later get theirs at their first update (as in torch,
        from the constructor's initial_accumulator_value)."""
        state = self.state[param]
        if not state:
            state["step"] = 0.0
            state["sum"] = full_like(param, self.defaults["initial_accumulator_value"])
        return state

    def _update(self, param, grad, group):
        state = self._state_of(param)
        state["step"] += 1
        if group["maximize"]:
            grad = -grad
        grad = l2_penalty(param, grad, group["weight_decay"])
        clr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        state_sum = state["sum"]
        state_sum.add_(grad * 1 * grad)  # addcmul_(grad, grad, value=1)
        std = state_sum.sqrt() + group["eps"]
        addcdiv_(param, grad, std, -clr)
