"""Tensor.fill_diagonal_(fill_value, wrap=False) and torch.fliplr / flipud (also as Tensor
methods), as torch 2.13.

fill_diagonal_ works out the main diagonal's positions with numpy and writes them with
masked_fill_; fliplr / flipud are flips of dimension 1 / 0. So gradients and
compiled-autograd capture come from masked_fill_ and flip. Argument checks and their
messages follow torch.
"""

import numpy as np

from ._grad_mode import is_grad_enabled

__all__ = ["fill_diagonal_", "fliplr", "flipud"]


def _diagonal_mask(shape, wrap):
    """A boolean array of shape: True on positions (i, i, ..., i). For a tall matrix with
    wrap, the diagonal starts again every columns + 1 rows (torch steps through memory)."""
    mask = np.zeros(shape, dtype=bool)
    if len(shape) == 2 and wrap:
        rows, cols = shape
        flat = mask.reshape(-1)
        flat[::cols + 1] = True
        return mask
    n = min(shape)
    mask[(np.arange(n),) * len(shape)] = True
    return mask


def fill_diagonal_(self, fill_value, wrap=False):
    if self.dim() < 2:
        raise RuntimeError("dimensions must larger than 1")
    if self.dim() > 2 and len(set(self.shape)) != 1:
        raise RuntimeError("all dimensions of input must be of equal length")
    if is_grad_enabled() and self.requires_grad and self.is_leaf:
        # torch writes through a diagonal view of self, hence "a view of"
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an "
                           "in-place operation.")
    if hasattr(fill_value, "item"):
        fill_value = fill_value.item()
    from ._creation import from_numpy
    mask = from_numpy(_diagonal_mask(tuple(self.shape), wrap))
    return self.masked_fill_(mask, fill_value)


def fliplr(input):
    """Reverse the columns (dimension 1) of a tensor of two or more dimensions."""
    if input.dim() < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return input.flip(1)


def flipud(input):
    """Reverse the rows (dimension 0) of a tensor of one or more dimensions."""
    if input.dim() < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return input.flip(0)
