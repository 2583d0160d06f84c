"""In-place building blocks of the optimizers' updates, each evaluating its torch kernel's
expression in the same order (so float results agree bit for bit where the kernels do),
and the hyperparameter checks."""

from .. import _C


def lerp_(current, end, weight):
    """current.lerp_(end, weight): torch evaluates current + w * (end - current) for
    |w| < 0.5 and end - (end - current) * (1 - w) otherwise, to keep rounding small."""
    if abs(weight) < 0.5:
        current.add_((end - current) * weight)
    else:
        current.copy_(end - (end - current) * (1 - weight))


def decay_square_avg_(square_avg, grad, decay):
    """square_avg.mul_(decay).addcmul_(grad, grad, value=1 - decay)."""
    square_avg.mul_(decay)
    square_avg.add_(grad * (1 - decay) * grad)


def addcdiv_(param, numerator, denominator, value):
    """param.addcdiv_(numerator, denominator, value=value): param + value * num / den."""
    param.add_(numerator * value / denominator)


def l2_penalty(param, grad, weight_decay):
    """grad.add(param, alpha=weight_decay): the L2 term added to the gradient."""
    return grad if weight_decay == 0 else grad + param * weight_decay


def check_non_negative(**values):
    """torch's "Invalid <name> value: <v>" ValueErrors for hyperparameters that must be >= 0.
    A name of "lr" or "eps" uses torch's spelling of those two messages."""
    spelled = {"lr": "learning rate", "eps": "epsilon value"}
    if isinstance(values.get("lr"), _C.TensorBase):
        raise NotImplementedError("cagrad's optimizers take lr as a Python number, not a "
                                  "Tensor (see docs/python-api.md)")
    for name, value in values.items():
        if not 0.0 <= value:
            raise ValueError(f"Invalid {spelled.get(name, name + ' value')}: {value}")


def check_betas(betas):
    for i, beta in enumerate(betas[:2]):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
