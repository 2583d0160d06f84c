"""cagrad.utils: checkpoint (torch.utils.checkpoint) and data (torch.utils.data)."""

from . import checkpoint, data

__all__ = ["checkpoint", "data"]
