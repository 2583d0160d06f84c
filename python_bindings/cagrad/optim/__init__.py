"""cagrad.optim: SGD, Adam, AdamW, Adadelta, Adagrad, Adamax, NAdam, RAdam, RMSprop, ASGD,
Rprop and LBFGS with torch.optim's hyperparameters and update math, and the lr_scheduler
module."""

from . import lr_scheduler
from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .adamax import Adamax
from .asgd import ASGD, Rprop
from .lbfgs import LBFGS
from .nadam import NAdam, RAdam
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Adadelta", "Adagrad", "Adamax", "NAdam",
           "RAdam", "RMSprop", "ASGD", "Rprop", "LBFGS", "lr_scheduler"]
