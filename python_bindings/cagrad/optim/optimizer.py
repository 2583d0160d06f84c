"""optim.Optimizer: parameter groups, per-parameter state, zero_grad, step and state_dict,
with torch.optim.Optimizer's rules.

Subclasses give their defaults and _update(param, grad, group), the math for one
parameter. step() runs it under no_grad for every parameter that has a .grad, so updates
are in place (add_, mul_, copy_): parameters keep their identity and their version
counters move, as in PyTorch.
"""

import copy
import warnings
from collections import defaultdict

from .. import _C
from .._functions import clone
from .._grad_mode import enable_grad, no_grad, zero_grads
from ._step_hooks import (StepHooks, register_optimizer_step_post_hook,  # noqa: F401
                          register_optimizer_step_pre_hook)


class _RequiredParameter:
    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()  # a default that every param group must set itself


def _typename(obj):
    return type(obj).__name__


class Optimizer(StepHooks):  # StepHooks: register_step_pre_hook / _post_hook (_step_hooks.py)
    def __init__(self, params, defaults):
        if isinstance(params, _C.TensorBase):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            f"Tensors or dicts, but got {_typename(params)}")
        self.defaults = defaults
        self.state = defaultdict(dict)  # parameter -> its state (momentum buffers, ...)
        self.param_groups = []
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, param_group):
        """Add a dict with "params" (and optional hyperparameters; the rest come from the
        defaults). params may be (name, tensor) pairs, as from named_parameters()."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {_typename(param_group)}")
        params = param_group["params"]
        if isinstance(params, _C.TensorBase):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        param_group["params"] = _split_names(param_group, list(params))
        for param in param_group["params"]:
            if not isinstance(param, _C.TensorBase):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is "
                                + _typename(param))
            if not (param.is_leaf or param._retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError("parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            param_group.setdefault(name, default)
        self._check_disjoint(param_group)
        self.param_groups.append(param_group)

    def _check_disjoint(self, param_group):
        ids = [id(p) for p in param_group["params"]]
        if len(ids) != len(set(ids)):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; "
                          "in future, this will cause an error; see "
                          "github.com/pytorch/pytorch/issues/40967 for more information",
                          stacklevel=4)
        for group in self.param_groups:
            if ("param_names" in param_group) != ("param_names" in group):
                kind = "with names" if "param_names" in param_group else "without names"
                raise ValueError("all optimizer param groups should be with/without names. "
                                 f"cannot add param group {kind} to the optimizer")
            if not set(ids).isdisjoint(id(p) for p in group["params"]):
                raise ValueError("some parameters appear in more than one parameter group")

    def zero_grad(self, set_to_none=True):
        """Reset every parameter's .grad: to None (the default), or to zeros in place."""
        zero_grads((p for group in self.param_groups for p in group["params"]), set_to_none)

    def step(self, closure=None):
        """One update of every parameter that has a .grad. closure, if given, recomputes
        the loss (with grad mode on) before the update; step returns its result."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            for group in self.param_groups:
                for param in group["params"]:
                    if param.grad is not None:
                        self._update(param, param.grad, group)
        return loss

    def _update(self, param, grad, group):
        raise NotImplementedError(f"{type(self).__name__} does not implement _update()")

    # --- state_dict ----------------------------------------------------------------------

    def state_dict(self):
        """{"state": {index: state}, "param_groups": [group with params as indices]}; the
        indices number the parameters in group order, as in PyTorch. Tensors are shared."""
        index = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = [index.setdefault(id(p), len(index)) for p in group["params"]]
            groups.append(packed)
        state = {index[id(p)]: s for p, s in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restore hyperparameters and state saved by state_dict(); state tensors are
        copied and converted to their parameter's dtype."""
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"])
               for g, s in zip(self.param_groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match "
                             "the size of optimizer's group")
        params = {i: p for g, s in zip(self.param_groups, saved_groups)
                  for i, p in zip(s["params"], g["params"])}
        self.state = defaultdict(dict)
        for i, saved in state_dict["state"].items():
            self.state[params[i]] = {k: _copied_state(v, params[i]) for k, v in saved.items()}
        self.param_groups = [{**copy.deepcopy({k: v for k, v in s.items() if k != "params"}),
                              "params": g["params"]}
                             for g, s in zip(self.param_groups, saved_groups)]

    def __repr__(self):
        text = type(self).__name__ + " ("
        for i, group in enumerate(self.param_groups):
            text += f"\nParameter Group {i}\n"
            for key in sorted(group):
                if key != "params":
                    text += f"    {key}: {group[key]}\n"
        return text + ")"


def _check_single_tensor(**flags):
    """cagrad has one implementation, PyTorch's single-tensor one (foreach= is accepted and
    changes nothing); differentiable, fused and capturable updates do not exist."""
    for name, value in flags.items():
        if value:
            raise NotImplementedError(f"cagrad's optimizers do not support {name}=True "
                                      "(see docs/python-api.md)")


def _split_names(param_group, params):
    """The tensors of params; (name, tensor) pairs also set param_group["param_names"]."""
    names = [p[0] for p in params if isinstance(p, tuple)]
    if not names:
        return params
    if len(names) != len(params):
        raise ValueError("all optimizer params should be with/without names. Some param "
                         "names are missing")
    param_group["param_names"] = names
    return [p[1] for p in params]


def _copied_state(value, param):
    if not isinstance(value, _C.TensorBase):
        return copy.deepcopy(value)
    with no_grad():
        return value.to(param.dtype) if value.dtype is not param.dtype else clone(value)

