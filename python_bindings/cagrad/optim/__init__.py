"""cagrad.optim: SGD, Adam and AdamW with torch.optim's hyperparameters and update math."""

from .adam import Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW"]
