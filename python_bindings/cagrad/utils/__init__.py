"""cagrad.utils: checkpoint (torch.utils.checkpoint)."""

from . import checkpoint

__all__ = ["checkpoint"]
