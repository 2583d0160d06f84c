"""cagrad.nn.modules: the home of torch.nn.modules.module's global hook functions."""

from . import module
from .module import Module

__all__ = ["module", "Module"]
