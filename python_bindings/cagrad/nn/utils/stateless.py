"""torch.nn.utils.stateless: functional_call, PyTorch's deprecated alias of
cagrad.func.functional_call (it warns as PyTorch does)."""

import warnings

__all__ = ["functional_call"]


def functional_call(module, parameters_and_buffers, args=None, kwargs=None, *,
                    tie_weights=True, strict=False):
    """module's forward with the given tensors as its parameters and buffers; deprecated
    in PyTorch 2.0 in favour of torch.func.functional_call (which this calls)."""
    warnings.warn(
        "`torch.nn.utils.stateless.functional_call` is deprecated as of PyTorch 2.0 and will "
        "be removed in a future version of PyTorch. Please use `torch.func.functional_call` "
        "instead which is a drop-in replacement.", FutureWarning, stacklevel=2)
    from ... import func
    return func.functional_call(module, parameters_and_buffers, args, kwargs,
                                tie_weights=tie_weights, strict=strict)
