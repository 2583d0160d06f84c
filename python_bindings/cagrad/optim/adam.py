"""optim.Adam and optim.AdamW, in the order of operations of torch.optim.Adam's
single-tensor path (foreach=False, capturable=False), so trajectories match PyTorch's."""

from .._creation import zeros_like
from .optimizer import Optimizer, _check_single_tensor


class Adam(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None, decoupled_weight_decay=False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        _check_single_tensor(differentiable=differentiable, fused=fused, capturable=capturable)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad, maximize=maximize, foreach=foreach,
                        capturable=False, differentiable=False, fused=None,
                        decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)

    def _update(self, param, grad, group):
        state = self._state_of(param, group["amsgrad"])
        if group["maximize"]:
            grad = -grad
        state["step"] += 1
        grad = _weight_decay(param, grad, group)
        second_moment = _update_moments(state, grad, group)
        beta1, beta2 = group["betas"]
        step_size = group["lr"] / (1 - beta1 ** state["step"])
        bias_correction2_sqrt = (1 - beta2 ** state["step"]) ** 0.5
        denom = second_moment.sqrt() / bias_correction2_sqrt + group["eps"]
        # param.addcdiv_(exp_avg, denom, value=-step_size) evaluates (value * exp_avg) / denom
        param.add_(state["exp_avg"] * -step_size / denom)

    def _state_of(self, param, amsgrad):
        """The state of param, created on its first update. step is a Python float
        (PyTorch keeps a one-element tensor) so reading it costs no graph break."""
        state = self.state[param]
        if not state:
            state["step"] = 0.0
            state["exp_avg"] = zeros_like(param)
            state["exp_avg_sq"] = zeros_like(param)
            if amsgrad:
                state["max_exp_avg_sq"] = zeros_like(param)
        return state


def _weight_decay(param, grad, group):
    """L2 decay through the gradient (Adam), or decay of the weights themselves (AdamW)."""
    weight_decay = group["weight_decay"]
    if weight_decay == 0:
        return grad
    if group["decoupled_weight_decay"]:
        param.mul_(1 - group["lr"] * weight_decay)
        return grad
    return grad + param * weight_decay


def _update_moments(state, grad, group):
    """Update the moment estimates in place; returns the second moment to normalize by."""
    beta1, beta2 = group["betas"]
    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
    # exp_avg.lerp_(grad, 1 - beta1), which is exp_avg + (1 - beta1) * (grad - exp_avg)
    exp_avg.add_(grad - exp_avg, alpha=1 - beta1)
    # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2), in addcmul's order
    exp_avg_sq.mul_(beta2)
    exp_avg_sq.add_(grad * (1 - beta2) * grad)
    if not group["amsgrad"]:
        return exp_avg_sq
    max_exp_avg_sq = state["max_exp_avg_sq"]  # AMSGrad: the running maximum
    max_exp_avg_sq.copy_(max_exp_avg_sq.maximum(exp_avg_sq))
    return max_exp_avg_sq


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): the weights shrink by
    lr * weight_decay each step, outside the moment estimates."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)
