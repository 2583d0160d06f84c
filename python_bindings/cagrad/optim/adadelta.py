"""optim.Adadelta, in the order of operations of torch.optim.Adadelta's single-tensor path."""

from .._creation import zeros_like
from ._update_math import check_non_negative, decay_square_avg_, l2_penalty
from .optimizer import Optimizer, _check_single_tensor


class Adadelta(Optimizer):
    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *,
                 capturable=False, maximize=False, differentiable=False):
        check_non_negative(lr=lr)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        check_non_negative(eps=eps, weight_decay=weight_decay)
        _check_single_tensor(capturable=capturable, differentiable=differentiable)
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
                        capturable=False, foreach=foreach, differentiable=False)
        super().__init__(params, defaults)

    def _update(self, param, grad, group):
        state = self.state[param]
        if not state:
            state["step"] = 0.0
            state["square_avg"] = zeros_like(param)
            state["acc_delta"] = zeros_like(param)
        state["step"] += 1
        if group["maximize"]:
            grad = -grad
        grad = l2_penalty(param, grad, group["weight_decay"])
        rho, eps = group["rho"], group["eps"]
        square_avg, acc_delta = state["square_avg"], state["acc_delta"]
        decay_square_avg_(square_avg, grad, rho)
        std = (square_avg + eps).sqrt()
        # The step is RMS(previous updates) / RMS(gradients) * grad.
        delta = (acc_delta + eps).sqrt() / std * grad
        decay_square_avg_(acc_delta, delta, rho)
        param.add_(delta, alpha=-group["lr"])
