"""optim.RMSprop (centered, momentum), in the order of operations of torch.optim.RMSprop's
single-tensor path."""

from .._creation import zeros_like
from ._update_math import addcdiv_, check_non_negative, decay_square_avg_, l2_penalty, lerp_
from .optimizer import Optimizer, _check_single_tensor


class RMSprop(Optimizer):
    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, capturable=False, foreach=None, maximize=False,
                 differentiable=False):
        check_non_negative(lr=lr, eps=eps, momentum=momentum, weight_decay=weight_decay,
                           alpha=alpha)
        _check_single_tensor(capturable=capturable, differentiable=differentiable)
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, capturable=False, foreach=foreach,
                        maximize=maximize, differentiable=False)
        super().__init__(params, defaults)

    def _state_of(self, param, group):
        state = self.state[param]
        if not state:
            state["step"] = 0.0
            state["square_avg"] = zeros_like(param)
            if group["momentum"] > 0:
                state["momentum_buffer"] = zeros_like(param)
            if group["centered"]:
                state["grad_avg"] = zeros_like(param)
        return state

    def _update(self, param, grad, group):
        state = self._state_of(param, group)
        if group["maximize"]:
            grad = -grad
        state["step"] += 1
        grad = l2_penalty(param, grad, group["weight_decay"])
        alpha = group["alpha"]
        square_avg = state["square_avg"]
        decay_square_avg_(square_avg, grad, alpha)
        if group["centered"]:  # normalize by the variance, not the raw second moment
            grad_avg = state["grad_avg"]
            lerp_(grad_avg, grad, 1 - alpha)
            avg = (square_avg + grad_avg * -1 * grad_avg).sqrt()
        else:
            avg = square_avg.sqrt()
        avg = avg + group["eps"]
        if group["momentum"] > 0:
            buf = state["momentum_buffer"]
            buf.mul_(group["momentum"])
            addcdiv_(buf, grad, avg, 1)
            param.add_(buf, alpha=-group["lr"])
        else:
            addcdiv_(param, grad, avg, -group["lr"])
