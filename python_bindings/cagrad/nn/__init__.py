"""cagrad.nn: Module, Parameter and a set of layers, with torch.nn's names and behaviour."""

from . import activation, functional, init
from .activation import *  # noqa: F403 (every activation module: activation.__all__)
from .container import ModuleList, Sequential
from .layers import Conv2d, Dropout, Embedding, Flatten, Identity, LayerNorm, Linear
from .loss import CrossEntropyLoss, MSELoss, NLLLoss
from .module import Module
from .parameter import Parameter
from .pooling import AdaptiveAvgPool2d, AvgPool1d, AvgPool2d, MaxPool1d, MaxPool2d

__all__ = [
    "functional", "init", "Module", "Parameter", "Sequential", "ModuleList", "Identity",
    "Linear", "Conv2d", "LayerNorm", "Embedding", "Dropout", "Flatten", "CrossEntropyLoss",
    "NLLLoss", "MSELoss", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "MaxPool1d",
    "AvgPool1d", *activation.__all__,
]
