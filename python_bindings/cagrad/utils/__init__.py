"""cagrad.utils: checkpoint (torch.utils.checkpoint), data (torch.utils.data) and
tensorboard (torch.utils.tensorboard's SummaryWriter)."""

from . import checkpoint, data, tensorboard

__all__ = ["checkpoint", "data", "tensorboard"]
