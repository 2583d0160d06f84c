"""cagrad.nn.modules.module, as torch.nn.modules.module: Module and the global hooks."""

from .._hooks import (RemovableHandle, register_module_backward_hook,
                      register_module_forward_hook, register_module_forward_pre_hook,
                      register_module_full_backward_hook,
                      register_module_full_backward_pre_hook)
from ..module import Module

__all__ = ["Module", "RemovableHandle", "register_module_forward_pre_hook",
           "register_module_forward_hook", "register_module_full_backward_pre_hook",
           "register_module_full_backward_hook", "register_module_backward_hook"]
