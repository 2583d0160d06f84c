"""optim.ASGD (averaged SGD) and optim.Rprop, in the order of operations of torch.optim's
single-tensor paths. ASGD keeps torch's state names ("step", "eta", "mu", "ax"): programs
such as AWD-LSTM's NT-ASGD read optimizer.state[p]["ax"] to evaluate with the averaged
weights. As in torch, eta and mu are 0-d tensors of the scalar dtype (float32, or float64
when that is the default dtype), and the update reads them back with .item()."""

from .._creation import full_like, get_default_dtype, tensor, zeros_like
from .._dtype import float32, float64
from .._functions import clone
from ._update_math import check_non_negative
from .optimizer import Optimizer, _check_single_tensor


def _scalar_dtype():
    return float64 if get_default_dtype() is float64 else float32


class ASGD(Optimizer):
    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0,
                 foreach=None, maximize=False, differentiable=False, capturable=False):
        check_non_negative(lr=lr)
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        _check_single_tensor(differentiable=differentiable, capturable=capturable)
        defaults = dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                        foreach=foreach, maximize=maximize, differentiable=False,
                        capturable=False)
        super().__init__(params, defaults)

    def _update(self, param, grad, group):
        state = self.state[param]
        if not state:
            state["step"] = 0.0
            state["eta"] = tensor(group["lr"], dtype=_scalar_dtype())
            state["mu"] = tensor(1.0, dtype=_scalar_dtype())
            state["ax"] = zeros_like(param)
        if group["maximize"]:
            grad = -grad
        state["step"] += 1
        if group["weight_decay"] != 0:
            grad = grad + param * group["weight_decay"]
        lr, lambd, eta = group["lr"], group["lambd"], state["eta"].item()
        param.mul_(1 - lambd * eta)  # the decay term
        param.add_(grad, alpha=-eta)
        mu, ax = state["mu"].item(), state["ax"]
        if mu != 1:
            ax.add_((param - ax) * mu)  # the running average of the iterates
        else:
            ax.copy_(param)
        step = state["step"]
        # torch makes each new value a tensor of the default dtype (as_tensor of a float),
        # then copies it into the state's: rounded to float32 even after a load_state_dict
        # has turned the state float64
        state["eta"].copy_(tensor(lr / ((1 + lambd * lr * step) ** group["alpha"])))
        state["mu"].copy_(tensor(1 / max(1, step - group["t0"])))


class Rprop(Optimizer):
    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        check_non_negative(lr=lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        _check_single_tensor(differentiable=differentiable, capturable=capturable)
        defaults = dict(lr=lr, etas=etas, step_sizes=step_sizes, foreach=foreach,
                        maximize=maximize, differentiable=False, capturable=False)
        super().__init__(params, defaults)

    def _update(self, param, grad, group):
        state = self.state[param]
        if not state:
            state["step"] = 0.0
            state["prev"] = zeros_like(param)
            state["step_size"] = full_like(grad, group["lr"])
        if group["maximize"]:
            grad = -grad
        state["step"] += 1
        etaminus, etaplus = group["etas"]
        step_size_min, step_size_max = group["step_sizes"]
        sign = (grad * state["prev"]).sign()
        # the sign of grad * prev picks the step size's factor: grow, shrink, or keep
        factor = clone(sign)  # in the parameter's dtype, so etas round as torch's do
        factor.masked_fill_(sign.gt(0), etaplus)
        factor.masked_fill_(sign.lt(0), etaminus)
        factor.masked_fill_(sign.eq(0), 1)
        step_size = state["step_size"]
        step_size.mul_(factor).clamp_(step_size_min, step_size_max)
        grad = clone(grad)
        grad.masked_fill_(factor.eq(etaminus), 0)  # after a sign change, no step this time
        param.add_(grad.sign() * step_size * -1)
        state["prev"].copy_(grad)
