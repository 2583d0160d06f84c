"""amp.GradScaler: loss scaling for mixed precision, with torch.amp.GradScaler's rules.

cagrad has no CUDA, so GradScaler('cuda') (the default, as in PyTorch) warns and disables
itself exactly as PyTorch does on a machine without CUDA: scale() returns its input, step()
calls optimizer.step(), the rest are no-ops. GradScaler('cpu') scales for real, as PyTorch's
CPU scaler does: the scale is a float32 value, grads are unscaled by its float32 inverse,
steps with inf/NaN grads are skipped, and update() backs off or grows the scale.
"""

import warnings
from collections import abc

import numpy as np

from .._C import TensorBase as _TensorBase

_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"
_NO_SCALE_FIX = ("This may indicate your script did not use scaler.scale(loss or outputs) "
                 "earlier in the iteration.")


def _fresh_optimizer_state():
    return {"stage": _READY, "found_inf": None}


class GradScaler:
    """Scales the loss so that small gradients survive low precision; see the module doc."""

    def __init__(self, device="cuda", init_scale=2.0**16, growth_factor=2.0,
                 backoff_factor=0.5, growth_interval=2000, enabled=True):
        self._device = device
        self._enabled = enabled
        if device == "cuda" and enabled:
            warnings.warn("cagrad.cuda.amp.GradScaler is enabled, but CUDA is not available.  "
                          "Disabling.", UserWarning, stacklevel=2)
            self._enabled = False
        elif device != "cpu" and enabled:
            raise RuntimeError(f"GradScaler: cagrad runs on the CPU only; device {device!r} is "
                               f"not available (use 'cpu', or enabled=False)")
        if self._enabled:
            if growth_factor <= 1.0:
                raise AssertionError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise AssertionError("The backoff factor must be < 1.0.")
            self._init_scale = init_scale
            self._scale = None  # a np.float32, set on the first scale() as in PyTorch
            self._growth_factor = growth_factor
            self._backoff_factor = backoff_factor
            self._growth_interval = growth_interval
            self._init_growth_tracker = 0
            self._growth_tracker = None
            self._per_optimizer_states = {}

    def is_enabled(self):
        return self._enabled

    # ---------------------------------------------------------------- scaling
    def scale(self, outputs):
        """outputs (a tensor, or nested lists/tuples/iterables of them) times the scale."""
        if not self._enabled:
            return outputs
        if self._scale is None:
            self._scale = np.float32(self._init_scale)
            self._growth_tracker = self._init_growth_tracker
        factor = float(self._scale)

        def apply(value):
            if isinstance(value, _TensorBase):
                return value * factor
            if isinstance(value, abc.Iterable):
                scaled = map(apply, value)
                return type(value)(scaled) if isinstance(value, (list, tuple)) else scaled
            raise ValueError("outputs must be a Tensor or an iterable of Tensors")

        return apply(outputs)

    def _check_scale(self, funcname):
        if self._scale is None:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  {_NO_SCALE_FIX}")

    def _state_of(self, optimizer):
        return self._per_optimizer_states.setdefault(id(optimizer), _fresh_optimizer_state())

    def unscale_(self, optimizer):
        """Divide optimizer's grads by the scale (in place) and note whether any is inf/NaN."""
        if not self._enabled:
            return
        self._check_scale("unscale_")
        state = self._state_of(optimizer)
        if state["stage"] is _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the "
                               "last update().")
        if state["stage"] is _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        # PyTorch inverts the float32 scale in float64, then rounds the inverse to float32
        inverse = float(np.float32(1.0 / np.float64(self._scale)))
        found_inf = None
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                finite = bool(np.isfinite(np.asarray(param.grad)).all())
                found_inf = bool(found_inf) or not finite
                param.grad.mul_(inverse)
        state["found_inf"] = found_inf
        state["stage"] = _UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """Unscale (unless unscale_ was called) and run optimizer.step() unless a grad is
        inf/NaN; returns what optimizer.step() returned (None when skipped)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is "
                               "enabled.")
        self._check_scale("step")
        state = self._state_of(optimizer)
        if state["stage"] is _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is _READY:
            self.unscale_(optimizer)
        if state["found_inf"] is None:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        result = None if state["found_inf"] else optimizer.step(*args, **kwargs)
        state["stage"] = _STEPPED
        return result

    def update(self, new_scale=None):
        """Back off the scale after a skipped step, grow it after growth_interval good ones;
        or set it to new_scale (a float or a one-element tensor)."""
        if not self._enabled:
            return
        self._check_scale("update")
        if new_scale is not None:
            self._scale = np.float32(self._checked_new_scale(new_scale))
        else:
            found = [s["found_inf"] for s in self._per_optimizer_states.values()
                     if s["found_inf"] is not None]
            if not found:
                raise AssertionError("No inf checks were recorded prior to update.")
            self._update_scale(any(found))
        self._per_optimizer_states = {}

    def _checked_new_scale(self, new_scale):
        if isinstance(new_scale, float):
            return new_scale
        if (not isinstance(new_scale, _TensorBase) or new_scale.numel() != 1
                or new_scale.requires_grad):
            raise AssertionError("new_scale should be a float or a 1-element tensor with "
                                 "requires_grad=False.")
        return new_scale.item()

    def _update_scale(self, found_inf):
        # PyTorch's _amp_update_scale_, in float32 like its scale tensor
        if found_inf:
            self._scale = self._scale * np.float32(self._backoff_factor)
            self._growth_tracker = 0
            return
        successful = self._growth_tracker + 1
        if successful == self._growth_interval:
            grown = self._scale * np.float32(self._growth_factor)
            if np.isfinite(grown):
                self._scale = grown
            successful = 0
        self._growth_tracker = successful

    # ---------------------------------------------------------------- settings, state
    def get_scale(self):
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale)

    def get_growth_factor(self):
        return self._growth_factor

    def set_growth_factor(self, new_factor):
        self._growth_factor = new_factor

    def get_backoff_factor(self):
        return self._backoff_factor

    def set_backoff_factor(self, new_factor):
        self._backoff_factor = new_factor

    def get_growth_interval(self):
        return self._growth_interval

    def set_growth_interval(self, new_interval):
        self._growth_interval = new_interval

    def _get_growth_tracker(self):
        if not self._enabled:
            return 0
        tracker = self._growth_tracker
        return self._init_growth_tracker if tracker is None else tracker

    def state_dict(self):
        """The scale and its settings ({} when disabled), as PyTorch's state_dict."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict):
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._init_scale = state_dict["scale"]
        if self._scale is not None:
            self._scale = np.float32(state_dict["scale"])
        self._growth_factor = state_dict["growth_factor"]
        self._backoff_factor = state_dict["backoff_factor"]
        self._growth_interval = state_dict["growth_interval"]
        self._init_growth_tracker = state_dict["_growth_tracker"]
        if self._growth_tracker is not None:
            self._growth_tracker = state_dict["_growth_tracker"]
