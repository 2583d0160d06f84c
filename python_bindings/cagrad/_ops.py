"""Functions built from the C library's op registry: torch.X, Tensor.X and nn.functional.X.

Every op of the registry (_C.ops: name -> (builtin, schema, flags)) becomes one Python
function with PyTorch's signature, read from its schema:

    elu(Tensor input, float alpha=1.0)  ->  def elu(input, alpha=1.0, inplace=False)

The same function object is installed wherever PyTorch has the op (the flags say where), so
torch.relu, nn.functional.relu and Tensor.relu run the same code. The function converts
only what the C builtin cannot take: a str{...} choice becomes its index, and inplace=True
(for ops whose functional form has it) and out= (for torch.<name> that has it) raise
NotImplementedError. The builtin checks the argument types and names the parameter in its
TypeError.
"""

import functools
import re

from . import _C, _bool_ops, _dtype, _int_ops

_BOOL = _bool_ops.BOOL

# The registry's flags (cagrad.h's CA_OP_PY_* and the input domains, read from _C).
PY_TORCH, PY_TENSOR, PY_NN = _C.OP_PY_TORCH, _C.OP_PY_TENSOR, _C.OP_PY_NN
PY_INPLACE, PY_OUT, POSITIVE = _C.OP_PY_INPLACE, _C.OP_PY_OUT, _C.OP_POSITIVE
UNIT, ABOVE_1, ABOVE_M1, PROB = _C.OP_UNIT, _C.OP_ABOVE_1, _C.OP_ABOVE_M1, _C.OP_PROB

_PARAM = re.compile(r"^(Tensor|float\??|int|bool|str\{([^}]*)\}) (\w+)(?:=(.*))?$")


def in_graph(self, args=(), kwargs=None):
    """Whether an in-place op on self must be recorded: grad mode on and self, or a tensor
    operand, requires grad."""
    if not _C.is_grad_enabled():
        return False
    if getattr(self, "requires_grad", False):
        return True
    operands = list(args) + list((kwargs or {}).values())
    return any(getattr(a, "requires_grad", False) for a in operands)


def _fit_in_place(self, result):
    """result as self's in-place value: self's dtype (torch's cast rules), self's shape."""
    if result._dtype != self._dtype:
        _bool_ops.check_cast(result._dtype, self._dtype)
        result = result.to(self.dtype)
    if tuple(result.shape) != tuple(self.shape):
        raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast "
                           f"shape {list(result.shape)}")
    return result


def graph_inplace(self, compute):
    """self <- compute(self) for a tensor in the autograd graph, as PyTorch's in-place ops:
    self takes the out-of-place result's values and history (Tensor._rebase_); when the
    result's node saved self (its backward needs self's old values), compute runs again on
    a differentiable copy of self."""
    mark = _C.graph_mark()  # a composite may save self in any of its ops, not only its last
    if not self._rebase_(_fit_in_place(self, compute(self)), mark):
        self._rebase_(_fit_in_place(self, compute(self * 1)))
    return self


def inplace_assign(self, compute, args=(), kwargs=None):
    """self <- compute(self), args and kwargs being the op's other operands: recorded in
    the graph when self or one of them is in it, else written in place with copy_ (which
    bumps the version counter and refuses leaves that require grad, as PyTorch does). An
    int64 self refuses a float result (log1p_), float64 into float32 casts."""
    if in_graph(self, args, kwargs):
        return graph_inplace(self, compute)
    result = compute(self)
    _bool_ops.check_cast(result._dtype, self._dtype)
    return self.copy_(result)


def _no_out(name):
    raise NotImplementedError(f"cagrad's {name}() does not support out=; use the returned "
                              f"tensor")


def _bad_choice(fname, param, value, choices):
    names = " or ".join(choices)
    return RuntimeError(f"{fname}(): {param} argument must be either {names}, got {value!r}")


def _params(schema):
    """[(type, name, default source or None, choices or None)] of a schema."""
    inner = schema[schema.index("(") + 1:schema.rindex(")")]
    out = []
    for part in filter(None, (p.strip() for p in inner.split(","))):
        m = _PARAM.match(part)
        if not m:
            raise ImportError(f"cagrad: op schema {schema!r} has a parameter {part!r} that "
                              f"the Python package cannot read")
        kind, choices, name, default = m.groups()
        out.append((kind.split("{")[0], name, default,
                    tuple(choices.split("|")) if choices else None))
    return out


def _source(name, schema, flags, env):
    """The source of the Python function for one registry op: its signature, defaults and
    keyword names are PyTorch's, and a call costs one extra frame. Names it needs go into
    env, prefixed by the op's name."""
    sig, args, body = [], [], []
    for kind, pname, default, choices in _params(schema):
        sig.append(pname if default is None else f"{pname}={default}")
        if kind == "float?":  # None is passed to C as NaN
            body.append(f"    if {pname} is None:\n        {pname} = _NAN\n")
        if choices is None:
            args.append(pname)
            continue
        table = f"_choices_{name}_{pname}"
        env[table] = {c: i for i, c in enumerate(choices)}
        body.append(f"    {pname}_index = {table}.get({pname}) if type({pname}) is str "
                    f"else None\n"
                    f"    if {pname}_index is None:\n"
                    f"        raise _bad_choice({name!r}, {pname!r}, {pname}, "
                    f"{choices!r})\n")
        args.append(f"{pname}_index")
    if flags & PY_INPLACE:  # out of place, then into the input (recorded in the graph)
        sig.append("inplace=False")
        rest = "".join(f", {a}" for a in args[1:])
        body.append(f"    if inplace:\n        return _inplace_assign({args[0]}, "
                    f"lambda _x: _op_{name}(_x{rest}))\n")
    if flags & PY_OUT:
        sig += ["*", "out=None"]
        body.append(f"    if out is not None:\n        _no_out({name!r})\n")
    return (f"def {name}({', '.join(sig)}):\n" + "".join(body) +
            f"    return _op_{name}({', '.join(args)})\n")


def _build_all(ops):
    """{name: function} for every registry op, compiled as one generated module."""
    env = {"_inplace_assign": inplace_assign, "_no_out": _no_out, "_bad_choice": _bad_choice,
           "_NAN": float("nan")}
    sources = []
    for name, (builtin, schema, flags) in sorted(ops.items()):
        env[f"_op_{name}"] = builtin
        sources.append(_source(name, schema, flags, env))
    exec(compile("\n".join(sources), "<cagrad op registry>", "exec"), env)  # noqa: S102
    functions = {}
    for name, (_, schema, _) in sorted(ops.items()):
        fn = functions[name] = env[name]
        fn.__doc__ = f"{schema}\n\nFrom cagrad's op registry; see docs/python-api.md."
        fn.__module__ = "cagrad"
    return functions


# Binary registry ops whose torch.<name> also takes a Python number for one operand (for
# xlogy, either): the number becomes a 0-d tensor of the other operand's dtype, which
# broadcasts. PyTorch records a node of another name then (FmodBackward0, ...).
_NUMBER_OPERANDS = {"fmod": (1,), "remainder": (1,), "copysign": (1,), "floor_divide": (1,),
                    "xlogy": (0, 1)}


def _number_as_tensor(value, like):
    from ._creation import full  # _creation imports the tensor class, which imports this

    return full((), value, dtype=like.dtype)


def _taking_numbers(fn, positions):
    def wrapper(input, other, *, out=None):
        if 1 in positions and isinstance(other, (int, float)) and not isinstance(other, bool):
            other = _number_as_tensor(other, input)
        elif 0 in positions and isinstance(input, (int, float)) and not isinstance(input, bool):
            input = _number_as_tensor(input, other)
        return fn(input, other, out=out)

    functools.update_wrapper(wrapper, fn)
    return wrapper


# Math ops that PyTorch computes in floating point for int64 and bool tensors (the C kernels
# are float only): an int64 or bool operand becomes the other operand's float dtype, or the default
# dtype (float32) when there is none, as PyTorch's type promotion does.
_INT_TO_FLOAT_UNARY = ("log1p expm1 log2 log10 exp2 erf erfc erfinv sinh cosh tan asin acos "
                       "atan asinh acosh atanh sinc logit deg2rad rad2deg reciprocal").split()
_INT_TO_FLOAT_BINARY = ("atan2", "copysign", "xlogy")


def _as_float(t, like=None):
    from . import _creation  # _creation imports the tensor class, which imports this

    if getattr(t, "dtype", None) not in (_dtype.int64, _dtype.bool):
        return t
    if like is not None and getattr(like, "dtype", None) in (_dtype.float32, _dtype.float64):
        return t.to(like.dtype)
    return t.to(_creation.get_default_dtype())


_INTEGRAL_CODES = (_dtype.int64._code, _dtype.bool._code)


def _integral_to_float(fn):
    """fn, with an int64 or bool tensor input first made float (_as_float); a dtype-code
    test, since tanh, exp, sigmoid... are hot."""
    def wrapper(input, *args, **kwargs):
        if getattr(input, "_dtype", None) in _INTEGRAL_CODES:
            input = _as_float(input)
        return fn(input, *args, **kwargs)

    functools.update_wrapper(wrapper, fn)
    return wrapper


def _binary_int_to_float(fn):
    def wrapper(input, other, *, out=None):
        return fn(_as_float(input, other), _as_float(other, input), out=out)

    functools.update_wrapper(wrapper, fn)
    return wrapper


_INT64_CODE = _dtype.int64._code


def _int_relu(fn):
    """relu of an int64 tensor stays int64, as in torch (the C kernel is float only)."""
    def wrapper(input, *args, **kwargs):
        if getattr(input, "_dtype", None) == _INT64_CODE:
            return input.clamp(min=0)
        return fn(input, *args, **kwargs)

    functools.update_wrapper(wrapper, fn)
    return wrapper


def _promoting(fn):
    """A binary registry op that takes two tensors of different dtypes, as torch: both
    converted (differentiably) to their result_type first (_bool_ops.py)."""
    def wrapper(input, other, *, out=None):
        input, other = _bool_ops.promoted_pair(input, other)
        return fn(input, other, out=out)

    functools.update_wrapper(wrapper, fn)
    return wrapper


FUNCTIONS = _build_all(_C.ops)
_BINARY = ("atan2", "copysign", "floor_divide", "fmod", "hypot", "logaddexp", "logaddexp2",
           "remainder", "xlogy")
for _name in _BINARY:  # innermost: after the wrappers below have made numbers tensors
    FUNCTIONS[_name] = _promoting(FUNCTIONS[_name])
for _name, _positions in _NUMBER_OPERANDS.items():
    FUNCTIONS[_name] = _taking_numbers(FUNCTIONS[_name], _positions)
for _name in _INT_TO_FLOAT_UNARY:
    FUNCTIONS[_name] = _integral_to_float(FUNCTIONS[_name])
for _name in _INT_TO_FLOAT_BINARY:
    FUNCTIONS[_name] = _binary_int_to_float(FUNCTIONS[_name])
FUNCTIONS["relu"] = _int_relu(FUNCTIONS["relu"])
for _name in ("remainder", "fmod", "floor_divide"):  # outermost: sees the caller's operands
    FUNCTIONS[_name] = _int_ops.exact_on_integers(_name, FUNCTIONS[_name])
del _name, _positions


def _refusing_bool(name, fn):
    """The unary op `name` with torch's error for a bool input (neg, abs, floor, ...)."""
    kind, message = _bool_ops.UNARY_REFUSALS[name]

    def refusing(input, *args, **kwargs):
        if getattr(input, "_dtype", None) == _BOOL:
            raise kind(message)
        return fn(input, *args, **kwargs)

    functools.update_wrapper(refusing, fn)
    return refusing


for _name in _bool_ops.UNARY_REFUSALS:
    FUNCTIONS[_name] = _refusing_bool(_name, FUNCTIONS[_name])

# The float math the bool refusals above leave: PyTorch computes it for int64 and bool
# tensors in the default float dtype.
_INT_TO_FLOAT_FAST = "exp log sqrt rsqrt sin cos tanh sigmoid".split()
for _name in _INT_TO_FLOAT_FAST:
    FUNCTIONS[_name] = _integral_to_float(FUNCTIONS[_name])
del _name
FLAGS = {name: flags for name, (_, _, flags) in _C.ops.items()}


def namespace(flag):
    """{name: function} of the ops PyTorch has in one namespace (PY_TORCH, PY_TENSOR or
    PY_NN)."""
    return {name: fn for name, fn in FUNCTIONS.items() if FLAGS[name] & flag}


# PyTorch's other names for registry ops: torch.<alias> and Tensor.<alias>.
ALIASES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh",
           "arccosh": "acosh", "arctanh": "atanh", "fix": "trunc", "arctan2": "atan2"}

# Registry ops (and aliases) whose in-place method Tensor.<name>_ PyTorch has.
_INPLACE = (
    "log1p expm1 log2 log10 exp2 erf erfc erfinv sinh cosh tan asin acos atan asinh acosh "
    "atanh sinc deg2rad rad2deg square reciprocal floor ceil trunc round frac sgn neg abs sin "
    "cos log exp sqrt rsqrt tanh sigmoid relu arcsin arccos arctan arcsinh arccosh arctanh fix atan2 "
    "arctan2 hypot fmod remainder copysign xlogy floor_divide logit"
).split()


# PyTorch's names of the dtypes in its casting errors
_SCALAR_TYPE = {_dtype.float32: "Float", _dtype.float64: "Double", _dtype.int64: "Long",
                _dtype.bool: "Bool"}


def _inplace_method(name, fn):
    """Tensor.<name>_: fn out of place, then into self (inplace_assign)."""
    def method(self, *args, **kwargs):
        return inplace_assign(self, lambda x: fn(x, *args, **kwargs), args, kwargs)

    method.__name__ = method.__qualname__ = f"{name}_"
    return method


def aliases():
    """{alias: function} of ALIASES, for torch.<alias>."""
    return {alias: FUNCTIONS[name] for alias, name in ALIASES.items()}


def _operator(name, reflected=False):
    """x % y and x // y (remainder and floor_divide, as PyTorch); reflected: 7 % x."""
    fn = FUNCTIONS[name]

    def op(self, other):
        if not isinstance(other, (int, float)) or isinstance(other, bool):
            return fn(self, other) if not reflected else NotImplemented
        return fn(_number_as_tensor(other, self), self) if reflected else fn(self, other)

    return op


def _inplace_operator(name):
    method = _inplace_method(name, FUNCTIONS[name])

    def op(self, other):
        return method(self, other)

    return op


def tensor_extras():
    """{name: method} of the aliases, the in-place forms and the % and // operators, for
    Tensor."""
    methods = aliases()
    for name in _INPLACE:
        methods[f"{name}_"] = _inplace_method(name, FUNCTIONS[ALIASES.get(name, name)])
    for symbol, name in (("mod", "remainder"), ("floordiv", "floor_divide")):
        methods[f"__{symbol}__"] = _operator(name)
        methods[f"__r{symbol}__"] = _operator(name, reflected=True)
        methods[f"__i{symbol}__"] = _inplace_operator(name)
    return methods
