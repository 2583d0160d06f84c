"""cagrad.nn: Module, Parameter and a set of layers, with torch.nn's names and behaviour."""

from . import activation, functional, init
from .activation import *  # noqa: F403 (every activation module: activation.__all__)
from .container import ModuleList, Sequential
from .layers import Conv2d, Dropout, Embedding, Flatten, Identity, LayerNorm, Linear
from .loss import CrossEntropyLoss, MSELoss, NLLLoss
from .module import Module
from .parameter import Parameter

__all__ = [
    "functional", "init", "Module", "Parameter", "Sequential", "ModuleList", "Identity",
    "Linear", "Conv2d", "LayerNorm", "Embedding", "Dropout", "Flatten", "CrossEntropyLoss",
    "NLLLoss", "MSELoss", *activation.__all__,
]
