"""optim.NAdam (Adam with Nesterov momentum) and optim.RAdam (rectified Adam), in the
order of operations of torch's single-tensor paths."""

import numpy as np

from .._creation import get_default_dtype, zeros_like
from .._dtype import float64
from ._update_math import (
    addcdiv_,
    check_betas,
    check_non_negative,
    decay_square_avg_,
    l2_penalty,
    lerp_,
)
from .optimizer import Optimizer, _check_single_tensor


def _mu_product(product, factor):
    """product * factor as torch computes it: mu_product is a 0-d tensor of the default
    dtype, so with float32 both operands and the result are rounded to float32."""
    if get_default_dtype() is float64:
        return product * factor
    return float(np.float32(product) * np.float32(factor))


def _decay_weights(param, grad, group):
    """L2 decay through the gradient, or decoupled (AdamW-style) decay of the weights."""
    weight_decay = group["weight_decay"]
    if weight_decay != 0 and group["decoupled_weight_decay"]:
        param.mul_(1 - group["lr"] * weight_decay)
        return grad
    return l2_penalty(param, grad, weight_decay)


def _adam_moments_state(state, param):
    if "step" not in state:
        state["step"] = 0.0
    state.setdefault("exp_avg", zeros_like(param))
    state.setdefault("exp_avg_sq", zeros_like(param))


class NAdam(Optimizer):
    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, *, foreach=None,
                 maximize=False, capturable=False, differentiable=False):
        check_non_negative(lr=lr, eps=eps)
        check_betas(betas)
        check_non_negative(weight_decay=weight_decay, momentum_decay=momentum_decay)
        _check_single_tensor(capturable=capturable, differentiable=differentiable)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        momentum_decay=momentum_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
                        foreach=foreach, capturable=False, differentiable=False)
        super().__init__(params, defaults)

    def _update(self, param, grad, group):
        state = self.state[param]
        if not state:
            state["step"] = 0.0
            state["mu_product"] = 1.0
            _adam_moments_state(state, param)
        if group["maximize"]:
            grad = -grad
        state["step"] += 1
        step, lr = state["step"], group["lr"]
        beta1, beta2 = group["betas"]
        bias_correction2 = 1 - beta2 ** step
        grad = _decay_weights(param, grad, group)
        # The momentum schedule: mu_t = beta1 (1 - 0.5 * 0.96^(t * momentum_decay)).
        mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * group["momentum_decay"]))
        mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * group["momentum_decay"]))
        state["mu_product"] = _mu_product(state["mu_product"], mu)
        mu_product = state["mu_product"]
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        lerp_(exp_avg, grad, 1 - beta1)
        decay_square_avg_(exp_avg_sq, grad, beta2)
        denom = (exp_avg_sq / bias_correction2).sqrt() + group["eps"]
        mu_product_next = mu_product * mu_next
        addcdiv_(param, grad, denom, -lr * (1.0 - mu) / (1.0 - mu_product))
        addcdiv_(param, exp_avg, denom, -lr * mu_next / (1.0 - mu_product_next))


class RAdam(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False,
                 capturable=False, differentiable=False):
        check_non_negative(lr=lr, eps=eps)
        check_betas(betas)
        check_non_negative(weight_decay=weight_decay)
        _check_single_tensor(capturable=capturable, differentiable=differentiable)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        maximize=maximize, foreach=foreach, capturable=False,
                        decoupled_weight_decay=decoupled_weight_decay, differentiable=False)
        super().__init__(params, defaults)

    def _update(self, param, grad, group):
        state = self.state[param]
        if not state:
            _adam_moments_state(state, param)
        if group["maximize"]:
            grad = -grad
        state["step"] += 1
        step, lr = state["step"], group["lr"]
        beta1, beta2 = group["betas"]
        grad = _decay_weights(param, grad, group)
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        lerp_(exp_avg, grad, 1 - beta1)
        decay_square_avg_(exp_avg_sq, grad, beta2)
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        corrected_exp_avg = exp_avg / bias_correction1
        # rho: the length of the approximated simple moving average; the variance of the
        # adaptive lr is tractable (and the update rectified) only when rho_t > 5.
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * beta2 ** step / bias_correction2
        if rho_t > 5.0:
            rect = ((rho_t - 4) * (rho_t - 2) * rho_inf
                    / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
            adaptive_lr = bias_correction2 ** 0.5 / (exp_avg_sq.sqrt() + group["eps"])
            param.add_(corrected_exp_avg * lr * adaptive_lr * rect, alpha=-1.0)
        else:
            param.add_(corrected_exp_avg * lr, alpha=-1.0)
