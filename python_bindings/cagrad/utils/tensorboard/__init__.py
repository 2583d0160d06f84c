"""cagrad.utils.tensorboard (torch.utils.tensorboard): SummaryWriter, writing TensorBoard
event files without the tensorboard package (see writer.py and docs/python-api.md)."""

from ._records import read_records
from .writer import FileWriter, SummaryWriter

__all__ = ["FileWriter", "SummaryWriter", "read_records"]
