"""optim.Adamax (Adam with the infinity norm), in the order of operations of
torch.optim.Adamax's single-tensor path."""

from .._creation import zeros_like
from ._update_math import addcdiv_, check_betas, check_non_negative, l2_penalty, lerp_
from .optimizer import Optimizer, _check_single_tensor


class Adamax(Optimizer):
    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 foreach=None, *, maximize=False, differentiable=False, capturable=False):
        check_non_negative(lr=lr, eps=eps)
        check_betas(betas)
        check_non_negative(weight_decay=weight_decay)
        _check_single_tensor(differentiable=differentiable, capturable=capturable)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        foreach=foreach, maximize=maximize, differentiable=False,
                        capturable=False)
        super().__init__(params, defaults)

    def _update(self, param, grad, group):
        state = self.state[param]
        if not state:
            state["step"] = 0.0
            state["exp_avg"] = zeros_like(param)
            state["exp_inf"] = zeros_like(param)
        if group["maximize"]:
            grad = -grad
        state["step"] += 1
        grad = l2_penalty(param, grad, group["weight_decay"])
        beta1, beta2 = group["betas"]
        exp_avg, exp_inf = state["exp_avg"], state["exp_inf"]
        lerp_(exp_avg, grad, 1 - beta1)
        exp_inf.mul_(beta2)
        exp_inf.copy_(exp_inf.maximum(grad.abs() + group["eps"]))  # the decayed max norm
        clr = group["lr"] / (1 - beta1 ** state["step"])
        addcdiv_(param, exp_avg, exp_inf, -clr)
