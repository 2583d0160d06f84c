"""optim.SGD: stochastic gradient descent with momentum, dampening, Nesterov momentum and
weight decay, in the order of operations of torch.optim.SGD's single-tensor path."""

from .._functions import clone
from .optimizer import Optimizer, _check_single_tensor


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False, foreach=None, differentiable=False,
                 fused=None):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        _check_single_tensor(differentiable=differentiable, fused=fused)
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
                        foreach=foreach, differentiable=False, fused=None)
        super().__init__(params, defaults)

    def _update(self, param, grad, group):
        if group["maximize"]:
            grad = -grad
        if group["weight_decay"] != 0:
            grad = grad + param * group["weight_decay"]
        momentum = group["momentum"]
        if momentum != 0:
            state = self.state[param]  # only momentum SGD has state, as in PyTorch
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = clone(grad)
            else:
                buf.mul_(momentum)
                buf.add_(grad, alpha=1 - group["dampening"])
            grad = grad + buf * momentum if group["nesterov"] else buf
        param.add_(grad, alpha=-group["lr"])

