"""torch._foreach_* : one op applied to every tensor of a list (torch's multi-tensor API).

EMA and optimizer code written for PyTorch calls these directly (timm's ModelEmaV3 and
torch.optim.swa_utils use torch._foreach_lerp_, diffusers' EMAModel _foreach_sub_, many
hand-written optimizers _foreach_mul_ / _foreach_add_ / _foreach_addcmul_). cagrad has no
fused multi-tensor kernels, so each op runs the ordinary per-tensor op on every element:
the results, dtype promotion, in-place checks and gradients are those of the per-tensor
ops (torch gives foreach ops the same derivatives), and compiled autograd captures them
like any other op. The argument checks and their messages follow torch 2.13: lists of the
same length, at least one tensor, scalar lists as long as the tensor list, a tensor
`other` only when 0-dim, and addcmul / addcdiv's `value` as a 1-D tensor of one scalar
per tensor. As in torch, an in-place form returns the very list it was given and an
out-of-place form a tuple.
"""

from numbers import Number

from ._tensor import Tensor

# unary ops that have a torch._foreach_<name> and _foreach_<name>_ form
UNARY = ("abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1",
         "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal",
         "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc")


def _tensor_list(name, arg, what="self"):
    if isinstance(arg, Tensor) or not isinstance(arg, (list, tuple)):
        raise TypeError(f"{name}(): argument '{what}' must be tuple of Tensors, not "
                        f"{type(arg).__name__}")
    arg = list(arg)
    for i, t in enumerate(arg):
        if not isinstance(t, Tensor):
            raise TypeError(f"expected Tensor as element {i} in argument {what}, but got "
                            f"{type(t).__name__}")
    return arg


def _check(name, tensors, *others):
    """self and every other tensor list: lists of tensors of one length, not empty."""
    tensors = _tensor_list(name, tensors)
    if not tensors:
        raise RuntimeError("Tensor list must have at least one tensor.")
    out = []
    for k, other in enumerate(others, 1):
        other = _tensor_list(name, other, f"other{k}" if len(others) > 1 else "other")
        if len(other) != len(tensors):
            raise RuntimeError(f"Tensor lists must have the same number of tensors, got "
                               f"{len(tensors)} and {len(other)}")
        out.append(other)
    return tensors, out


def _per_tensor(name, tensors, other):
    """other spread over the list: one per tensor (a list), or the same for every one (a
    Number or a 0-dim tensor)."""
    if isinstance(other, Tensor):
        if other.dim() != 0:
            raise RuntimeError(f"scalar tensor expected to be 0 dim but it has {other.dim()} "
                               f"dimensions and {other.numel()} elements.")
        return [other] * len(tensors)
    if isinstance(other, Number):
        return [other] * len(tensors)
    if isinstance(other, (list, tuple)):
        if other and all(isinstance(o, Tensor) for o in other):
            return _check(name, tensors, other)[1][0]
        if len(other) != len(tensors):
            raise RuntimeError("Tensor list must have same number of elements as scalar list.")
        if not all(isinstance(o, Number) for o in other):
            raise TypeError(f"{name}(): expected a list of all Tensors or all Numbers")
        return list(other)
    raise TypeError(f"{name}(): argument 'other' must be a Number, Tensor, tuple of Numbers "
                    f"or tuple of Tensors, not {type(other).__name__}")


def _binary(op, with_alpha):
    """torch._foreach_<op> and _foreach_<op>_ for add, sub (with alpha), mul, div, ..."""

    def apply(t, o, alpha, inplace):
        kw = {"alpha": alpha} if alpha != 1 else {}
        if op in ("maximum", "minimum"):  # a Number means clamp_min / clamp_max
            if isinstance(o, Tensor):
                r = getattr(t, op)(o)
                return t.copy_(r) if inplace else r
            op2 = "clamp_min" if op == "maximum" else "clamp_max"
            return getattr(t, op2 + ("_" if inplace else ""))(o)
        return getattr(t, op + ("_" if inplace else ""))(o, **kw)

    def make(inplace):
        name = f"_foreach_{op}{'_' if inplace else ''}"

        def fn(self, other, *, alpha=1):
            if alpha != 1 and not with_alpha:
                raise TypeError(f"{name}() got an unexpected keyword argument 'alpha'")
            if op == "sub" and alpha != 1 and isinstance(other, Tensor):
                # torch reads a lone 0-dim tensor as a Scalar, and sub has no alpha then
                raise TypeError(f"{name}(): argument 'other' (position 2) must be tuple of "
                                f"Tensors, not Tensor")
            tensors = _check(name, self)[0]
            others = _per_tensor(name, tensors, other)
            if alpha != 1 and not isinstance(others[0], Tensor):
                raise TypeError(f"{name}() received an invalid combination of arguments: "
                                f"alpha goes only with a Tensor or a list of Tensors")
            out = [apply(t, o, alpha, inplace) for t, o in zip(tensors, others)]
            return self if inplace else tuple(out)

        fn.__name__ = name
        return fn

    return make(False), make(True)


def _unary(op):
    def make(inplace):
        name = f"_foreach_{op}{'_' if inplace else ''}"

        def fn(self):
            tensors = _check(name, self)[0]
            out = [getattr(t, op + ("_" if inplace else ""))() for t in tensors]
            return self if inplace else tuple(out)

        fn.__name__ = name
        return fn

    return make(False), make(True)


def _keyword_fits(key, value):
    """torch's keyword names by kind: weight / value a Number (weight also a list of
    Numbers), weights a list of tensors, scalars a list of Numbers or a packed tensor."""
    if key in ("value", "weight") and isinstance(value, Number):
        return True
    if key in ("weight", "scalars") and isinstance(value, (list, tuple)):
        return all(isinstance(v, Number) for v in value)
    if key == "weights" and isinstance(value, (list, tuple)):
        return all(isinstance(v, Tensor) for v in value)
    return key == "scalars" and isinstance(value, Tensor)


def _ternary(op, params):
    """lerp(self, tensors1, weight), addcmul / addcdiv(self, tensor1, tensor2, value)."""
    n_lists = 1 if op == "lerp" else 2

    def make(inplace):
        name = f"_foreach_{op}{'_' if inplace else ''}"

        def fn(self, *args, **kwargs):
            lists, rest = args[:n_lists], list(args[n_lists:])
            for key in params:
                if key in kwargs:
                    value = kwargs.pop(key)
                    if not _keyword_fits(key, value):
                        raise TypeError(f"{name}() received an invalid combination of "
                                        f"arguments: {key}={type(value).__name__}")
                    rest.append(value)
            if kwargs:
                raise TypeError(f"{name}() got an unexpected keyword argument "
                                f"'{next(iter(kwargs))}'")
            if len(lists) != n_lists or len(rest) > 1 or (op == "lerp" and not rest):
                raise TypeError(f"{name}() takes self, {n_lists} tensor list(s) and "
                                f"{params[0]}")
            tensors, others = _check(name, self, *lists)
            scalars = (_packed(tensors, rest[0]) if op != "lerp" and rest
                       and isinstance(rest[0], Tensor)
                       else _per_tensor(name, tensors, rest[0] if rest else 1))
            method = op + ("_" if inplace else "")
            out = []
            for i, t in enumerate(tensors):
                pos = [o[i] for o in others]
                w = scalars[i]
                out.append(getattr(t, method)(*pos, w) if op == "lerp"
                           else getattr(t, method)(*pos, value=w))
            return self if inplace else tuple(out)

        fn.__name__ = name
        return fn

    return make(False), make(True)


def _packed(tensors, value):
    """addcmul / addcdiv's Tensor value: a 1-D tensor of one scalar per tensor."""
    if value.dim() != 1:
        raise RuntimeError(f"Expected packed scalar Tensor to be of dimension 1. Got "
                           f"{value.dim()} instead.")
    if value.numel() != len(tensors):
        raise RuntimeError(f"Expected length of scalars to match input of length "
                           f"{len(tensors)} but got {value.numel()} instead.")
    return value.tolist()


def _foreach_zero_(self):
    for t in _check("_foreach_zero_", self)[0]:
        t.zero_()
    return self


def _foreach_copy_(self, src, non_blocking=False):
    tensors, (srcs,) = _check("_foreach_copy_", self, src)
    for t, s in zip(tensors, srcs):
        t.copy_(s)
    return self


def _foreach_clone(self):
    return tuple(t.clone() for t in _check("_foreach_clone", self)[0])


def _foreach_norm(self, ord=2, dtype=None):
    from .linalg import vector_norm

    tensors = _check("_foreach_norm", self)[0]
    return tuple(vector_norm(t, ord, dtype=dtype) for t in tensors)


def _foreach_max(self):
    return tuple(t.max() for t in _check("_foreach_max", self)[0])


def _foreach_pow(self, exponent):
    if isinstance(self, Number):  # a scalar base, a list of exponents
        from ._functions import pow as _pow

        return tuple(_pow(self, e) for e in _check("_foreach_pow", exponent)[0])
    tensors = _check("_foreach_pow", self)[0]
    exps = _per_tensor("_foreach_pow", tensors, exponent)
    return tuple(t.pow(e) for t, e in zip(tensors, exps))


def _foreach_pow_(self, exponent):
    tensors = _check("_foreach_pow_", self)[0]
    for t, e in zip(tensors, _per_tensor("_foreach_pow_", tensors, exponent)):
        t.pow_(e)
    return self


def namespace():
    """Every torch._foreach_* name this module defines, for cagrad's top level."""
    ns = {"_foreach_zero_": _foreach_zero_, "_foreach_copy_": _foreach_copy_,
          "_foreach_clone": _foreach_clone, "_foreach_norm": _foreach_norm,
          "_foreach_max": _foreach_max, "_foreach_pow": _foreach_pow,
          "_foreach_pow_": _foreach_pow_}
    for op in ("add", "sub"):
        ns[f"_foreach_{op}"], ns[f"_foreach_{op}_"] = _binary(op, True)
    for op in ("mul", "div", "maximum", "minimum", "clamp_min", "clamp_max"):
        ns[f"_foreach_{op}"], ns[f"_foreach_{op}_"] = _binary(op, False)
    for op in UNARY:
        ns[f"_foreach_{op}"], ns[f"_foreach_{op}_"] = _unary(op)
    ns["_foreach_lerp"], ns["_foreach_lerp_"] = _ternary("lerp", ("weight", "weights"))
    for op in ("addcmul", "addcdiv"):
        ns[f"_foreach_{op}"], ns[f"_foreach_{op}_"] = _ternary(op, ("value", "scalars"))
    return ns
