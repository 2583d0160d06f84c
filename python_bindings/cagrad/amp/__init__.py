"""cagrad.amp: PyTorch's automatic-mixed-precision names (GradScaler, autocast). cagrad
computes in float32/float64; see grad_scaler.py and autocast_mode.py for what each does."""

from .autocast_mode import autocast, is_autocast_available
from .grad_scaler import GradScaler

__all__ = ["autocast", "is_autocast_available", "GradScaler"]
