"""cagrad.nn: Module, Parameter and a set of layers, with torch.nn's names and behaviour."""

from . import functional, init
from .activation import GELU, LeakyReLU, LogSoftmax, ReLU, Sigmoid, SiLU, Softmax, Softplus, Tanh
from .container import ModuleList, Sequential
from .layers import Dropout, Embedding, Flatten, Identity, LayerNorm, Linear
from .loss import CrossEntropyLoss, MSELoss, NLLLoss
from .module import Module
from .parameter import Parameter

__all__ = [
    "functional", "init", "Module", "Parameter", "Sequential", "ModuleList", "Identity",
    "Linear", "LayerNorm", "Embedding", "Dropout", "Flatten", "ReLU", "GELU", "SiLU",
    "LeakyReLU", "Softplus", "Tanh", "Sigmoid", "Softmax", "LogSoftmax", "CrossEntropyLoss",
    "NLLLoss", "MSELoss",
]
