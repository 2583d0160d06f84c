"""More top-level torch names from the dir(torch) census: tensor predicates, creation
helpers, torch.<op> spellings of nn.functional ops (torch's own positional signatures and
integer reductions), the legacy linalg names, torch.sym_* on plain numbers and settings.

The functional and linalg names forward to existing cagrad ops, so values, gradients and
compiled capture are theirs.
"""

import builtins
import math
import warnings

from ._tensor import Tensor
from ._creation import get_default_dtype, tensor
from ._dtype import float32, float64


_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _ca():
    import cagrad
    return cagrad


def _F():
    from .nn import functional
    return functional


# ------------------------------------------------------------------ predicates
def get_device(input):
    return -1  # CPU


def typename(obj):
    if isinstance(obj, Tensor):
        return obj.type()
    module = getattr(obj, "__module__", "") or ""
    qualname = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    if module in ("", "builtins"):
        return qualname
    return f"{module}.{qualname}"


# real tensors: conj and friends are the identity, imag has no meaning
def conj_physical(input):
    return input.clone()


def conj_physical_(input):
    return input


def real(input):
    return input


def imag(input):
    raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")


def _complex_unsupported(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"torch.{name}: cagrad has no complex dtypes (see "
                                  "docs/python-api.md, 'More torch functions')")
    fn.__name__ = name
    return fn


polar = _complex_unsupported("polar")
complex = _complex_unsupported("complex")  # noqa: A001 - torch's name
view_as_real = _complex_unsupported("view_as_real")
view_as_complex = _complex_unsupported("view_as_complex")
stft = _complex_unsupported("stft")
istft = _complex_unsupported("istft")


# ------------------------------------------------------------------ creation
def scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory=None,
                  requires_grad=False):
    """A 0-d tensor of the default float dtype unless dtype says otherwise (even for ints)."""
    return tensor(s, dtype=get_default_dtype() if dtype is None else dtype,
                  requires_grad=requires_grad)


def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=None):
    """obj as a tensor. A tensor is returned itself unless copy=True or a dtype change needs
    a new one (then detached, as torch); requires_grad is set on the result in place and,
    left unspecified, follows obj's (with torch 2.13's warning when that is True)."""
    if not isinstance(obj, Tensor):
        out = _ca().as_tensor(obj, dtype=dtype)
        return out.requires_grad_(True) if requires_grad else out
    if requires_grad is None:
        requires_grad = obj.requires_grad
        if requires_grad:
            warnings.warn("torch.asarray: unspecified requires_grad now defaults to "
                          "obj.requires_grad instead of False. Pass requires_grad=False "
                          "explicitly to get the old behavior and silence this warning.",
                          UserWarning, stacklevel=2)
    converts = dtype is not None and dtype != obj.dtype
    if copy is False and converts:
        raise ValueError(f"can't alias tensor with dtype '{_type_name(obj.dtype)}' into dtype "
                         f"'{_type_name(dtype)}'.")
    if not converts and not copy:
        if obj.requires_grad != requires_grad:
            obj.requires_grad_(requires_grad)
        return obj
    out = obj.detach().to(dtype) if converts else obj.detach().clone()
    return out.requires_grad_(True) if requires_grad else out


def _type_name(dtype):
    return {float32: "Float", float64: "Double"}.get(dtype, str(dtype).split(".")[-1]
                                                         .capitalize())


def range(start=0, end=None, step=1, *, dtype=None, layout=None, device=None,  # noqa: A001
          pin_memory=False, requires_grad=False):
    """Deprecated torch.range: end inclusive, default float dtype."""
    warnings.warn("torch.range is deprecated and will be removed in a future release because "
                  "its behavior is inconsistent with Python's range builtin. Instead, use "
                  "torch.arange, which produces values in [start, end).", UserWarning,
                  stacklevel=2)
    if end is None:
        start, end = 0, start
    if step == 0:
        raise RuntimeError("step must be nonzero")
    count = int(math.floor((end - start) / step)) + 1
    dtype = get_default_dtype() if dtype is None else dtype
    values = [start + i * step for i in builtins.range(builtins.max(count, 0))]
    return tensor(values, dtype=dtype, requires_grad=requires_grad)


def randint_like(input, low=0, high=None, *, dtype=None, layout=None, device=None,
                 requires_grad=False, memory_format=None):
    if high is None:
        low, high = 0, low
    return _ca().randint(low, high, tuple(input.shape),
                         dtype=input.dtype if dtype is None else dtype)


def fill(input, value):
    """A new tensor of input's shape and dtype filled with value (torch.fill is out of place)."""
    return _ca().full_like(input, value.item() if isinstance(value, Tensor) else value)


def zero_(input):
    return input.zero_()


def empty_strided(size, stride, *, dtype=None, layout=None, device=None, requires_grad=False,
                  pin_memory=False):
    """An uninitialised tensor of size; cagrad tensors are contiguous, stride is ignored."""
    return _ca().empty(tuple(size), dtype=dtype, requires_grad=requires_grad)


def empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None,
                   requires_grad=False, pin_memory=False):
    return _ca().empty(tuple(size), dtype=dtype, requires_grad=requires_grad)


# ------------------------------------------------------------------ torch.<nn.functional op>
# torch 2.13's Python bindings of these torch.<loss> functions default reduction to 0 ("none"),
# although the aten schemas say 1 ("mean"): measured, and followed here
def _reduction(value):
    if isinstance(value, str):
        return value
    if value not in _REDUCTIONS:
        raise ValueError(f"{value} is not a valid value for reduction")
    return _REDUCTIONS[value]


def dropout(input, p, train):
    return _F().dropout(input, p, train)


def dropout_(input, p, train):
    return _F().dropout(input, p, train, inplace=True)


def alpha_dropout(input, p, train):
    return _F().alpha_dropout(input, p, train)


def alpha_dropout_(input, p, train):
    return _F().alpha_dropout(input, p, train, inplace=True)


def feature_alpha_dropout(input, p, train):
    return _F().feature_alpha_dropout(input, p, train)


def feature_alpha_dropout_(input, p, train):
    return _F().feature_alpha_dropout(input, p, train, inplace=True)


def batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps,
               cudnn_enabled):
    return _F().batch_norm(input, running_mean, running_var, weight, bias, training,
                           momentum, eps)


def instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum,
                  eps, cudnn_enabled):
    return _F().instance_norm(input, running_mean, running_var, weight, bias,
                              use_input_stats, momentum, eps)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-05, cudnn_enable=True):
    return _F().layer_norm(input, normalized_shape, weight, bias, eps)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-05, cudnn_enabled=True):
    return _F().group_norm(input, num_groups, weight, bias, eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    return _F().rms_norm(input, normalized_shape, weight, eps)


def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """torch.embedding takes the weight first; padding_idx=-1 means none."""
    return _F().embedding(indices, weight, None if padding_idx == -1 else padding_idx,
                          scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)


def _pool(name):
    def pool(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        return getattr(_F(), name)(input, kernel_size, stride if stride else None, padding,
                                   dilation, ceil_mode)
    pool.__name__ = name
    return pool


max_pool1d, max_pool2d, max_pool3d = (_pool(f"max_pool{k}d") for k in (1, 2, 3))


def max_pool1d_with_indices(input, kernel_size, stride=(), padding=0, dilation=1,
                            ceil_mode=False):
    return _F().max_pool1d(input, kernel_size, stride if stride else None, padding, dilation,
                           ceil_mode, return_indices=True)


def avg_pool1d(input, kernel_size, stride=(), padding=0, ceil_mode=False,
               count_include_pad=True):
    return _F().avg_pool1d(input, kernel_size, stride if stride else None, padding, ceil_mode,
                           count_include_pad)


def adaptive_avg_pool1d(input, output_size):
    """Through adaptive_avg_pool2d on a height-1 view (the same windows along the length)."""
    if isinstance(output_size, (tuple, list)):
        output_size = output_size[0]
    if input.dim() not in (2, 3):
        raise RuntimeError(f"adaptive_avg_pool1d(): Expected 2D or 3D tensor, but got "
                           f"{list(input.shape)}")
    out = _F().adaptive_avg_pool2d(input.unsqueeze(-2), (1, output_size))
    return out.squeeze(-2)


def adaptive_max_pool1d(input, output_size):
    """torch.adaptive_max_pool1d returns (values, indices)."""
    return _F().adaptive_max_pool1d(input, output_size, return_indices=True)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _F().conv3d(input, weight, bias, stride, padding, dilation, groups)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    return _F().conv_transpose3d(input, weight, bias, stride, padding, output_padding, groups,
                                 dilation)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    return _F().rrelu(input, lower, upper, training)


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    return _F().rrelu(input, lower, upper, training, inplace=True)


def threshold(input, threshold, value):
    return _F().threshold(input, threshold, value)


def threshold_(input, threshold, value):
    return _F().threshold(input, threshold, value, inplace=True)


def relu_(input):
    return input.relu_()


def selu_(input):
    return _F().selu(input, inplace=True)


def celu_(input, alpha=1.0):
    return _F().celu(input, alpha, inplace=True)


def bilinear(input1, input2, weight, bias=None):
    return _F().bilinear(input1, input2, weight, bias)


def cosine_similarity(x1, x2, dim=1, eps=1e-08):
    return _F().cosine_similarity(x1, x2, dim, eps)


def pairwise_distance(x1, x2, p=2.0, eps=1e-06, keepdim=False):
    return _F().pairwise_distance(x1, x2, p, eps, keepdim)


def channel_shuffle(input, groups):
    return _F().channel_shuffle(input, groups)


def kl_div(input, target, reduction=0, log_target=False):
    return _F().kl_div(input, target, reduction=_reduction(reduction), log_target=log_target)


def poisson_nll_loss(input, target, log_input, full, eps, reduction):
    return _F().poisson_nll_loss(input, target, log_input, full, eps=eps,
                                 reduction=_reduction(reduction))


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-06, swap=False,
                        reduction=0):
    return _F().triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap,
                                    reduction=_reduction(reduction))


def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None,
                                     reduction=0):
    return _F().binary_cross_entropy_with_logits(input, target, weight,
                                                 reduction=_reduction(reduction),
                                                 pos_weight=pos_weight)


def cosine_embedding_loss(input1, input2, target, margin=0.0, reduction=0):
    return _F().cosine_embedding_loss(input1, input2, target, margin,
                                      reduction=_reduction(reduction))


def hinge_embedding_loss(input, target, margin=1.0, reduction=0):
    return _F().hinge_embedding_loss(input, target, margin, reduction=_reduction(reduction))


def margin_ranking_loss(input1, input2, target, margin=0.0, reduction=0):
    return _F().margin_ranking_loss(input1, input2, target, margin,
                                    reduction=_reduction(reduction))


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=0,
             zero_infinity=False):
    return _F().ctc_loss(log_probs, targets, input_lengths, target_lengths, blank,
                         _reduction(reduction), zero_infinity)


# ------------------------------------------------------------------ legacy linalg names
def matrix_rank(*args, **kwargs):
    raise RuntimeError("This function was deprecated since version 1.9 and is now removed.\n"
                       "Please use the `torch.linalg.matrix_rank` function instead. The "
                       "parameter 'symmetric' was renamed in `torch.linalg.matrix_rank()` to "
                       "'hermitian'.")



def _warn_jit_only(name, replacement):
    warnings.warn(f"at::{name} is deprecated and it is just left for JIT compatibility. It "
                  f"will be removed in a future PyTorch release. Please use `{replacement}` "
                  "instead", UserWarning, stacklevel=3)


def frobenius_norm(input, dim, keepdim=False):
    _warn_jit_only("frobenius_norm", "linalg.vector_norm(A, 2., dim, keepdim)")
    return _ca().linalg.vector_norm(input, 2, dim=dim, keepdim=keepdim)


def nuclear_norm(input, dim=None, keepdim=False):
    _warn_jit_only("nuclear_norm", "linalg.matrix_norm(A, 'nuc', dim, keepdim)")
    dim = (-2, -1) if dim is None else dim
    return _ca().linalg.matrix_norm(input, "nuc", dim=dim, keepdim=keepdim)


# ------------------------------------------------------------------ torch.sym_* on numbers
class SymInt:
    """Symbolic ints exist only under torch.compile's tracer; cagrad never makes one, so
    isinstance(x, torch.SymInt) is False for every value, as in eager torch."""


class SymFloat:
    """See SymInt."""


class SymBool:
    """See SymInt."""


def sym_int(a):
    return a if isinstance(a, int) and not isinstance(a, bool) else int(math.trunc(a))


def sym_float(a):
    return float(a)


def _promote(a, b, pick):
    out = pick(a, b)
    return float(out) if isinstance(a, float) or isinstance(b, float) else out


def sym_max(a, b):
    return _promote(a, b, builtins.max)


def sym_min(a, b):
    return _promote(a, b, builtins.min)


def sym_not(a):
    return not a


def sym_ite(b, t, f):
    return t if b else f


def sym_sum(args):
    return builtins.sum(args)


def sym_sqrt(a):
    return math.sqrt(a)


# ------------------------------------------------------------------ settings
_state = {"warn_always": False, "interop_threads": 1, "default_device": None}


def set_warn_always(b):
    _state["warn_always"] = bool(b)


def is_warn_always_enabled():
    return _state["warn_always"]


def get_num_interop_threads():
    """cagrad runs no inter-op thread pool; the value is kept for programs that read it."""
    return _state["interop_threads"]


def set_num_interop_threads(n):
    if n <= 0:
        raise RuntimeError("Expected positive number of threads")
    _state["interop_threads"] = int(n)


def init_num_threads():
    return None


def compiled_with_cxx11_abi():
    return True


def set_flush_denormal(mode):
    """False: cagrad does not switch the CPU to flush-to-zero (torch returns False where it
    cannot, so programs already handle it)."""
    return False


def _device_name(device):
    return None if device is None else str(device)


def set_default_device(device):
    name = _device_name(device)
    if name not in (None, "cpu", "cpu:0"):
        raise RuntimeError(f"set_default_device({name!r}): cagrad runs on the CPU only "
                           "(see docs/python-api.md)")
    _state["default_device"] = name


def get_default_device():
    return _ca().device("cpu")


def set_anomaly_enabled(mode, check_nan=True):
    _ca().autograd.set_detect_anomaly(mode, check_nan)


_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def set_deterministic_debug_mode(debug_mode):
    if isinstance(debug_mode, str):
        if debug_mode not in _DEBUG_MODES:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, "
                               f"`warn`, `error`, but got {debug_mode}")
        debug_mode = _DEBUG_MODES[debug_mode]
    if debug_mode not in (0, 1, 2):
        raise RuntimeError("invalid value of debug_mode, expected 0, 1, or 2, but got "
                           f"{debug_mode}")
    ca = _ca()
    ca.use_deterministic_algorithms(debug_mode != 0, warn_only=debug_mode == 1)


def get_deterministic_debug_mode():
    ca = _ca()
    if not ca.are_deterministic_algorithms_enabled():
        return 0
    return 1 if ca.is_deterministic_algorithms_warn_only_enabled() else 2


_TENSOR_TYPES = {"torch.FloatTensor": float32, "torch.DoubleTensor": float64}


def set_default_tensor_type(t):
    warnings.warn("torch.set_default_tensor_type() is deprecated as of PyTorch 2.1, please "
                  "use torch.set_default_dtype() and torch.set_default_device() as "
                  "alternatives.", UserWarning, stacklevel=2)
    name = t if isinstance(t, str) else getattr(t, "__module__", "") + "." + \
        getattr(t, "__name__", "")
    name = name.replace("cagrad.", "torch.")
    if isinstance(t, type) and getattr(t, "__name__", "") in ("FloatTensor", "DoubleTensor"):
        name = "torch." + t.__name__
    if name not in _TENSOR_TYPES:
        raise TypeError(f"invalid type: '{name}' (cagrad supports torch.FloatTensor and "
                        "torch.DoubleTensor; see docs/python-api.md)")
    _ca().set_default_dtype(_TENSOR_TYPES[name])


# ------------------------------------------------------------------ torch.abs_(x) and kin
def inplace_functions(tensor_cls, names):
    """torch.<op>_(input, ...): the function form of Tensor.<op>_ for each name the Tensor
    class has; returns {name: function}."""
    out = {}
    for name in names:
        method = getattr(tensor_cls, name, None)
        if method is None:
            continue

        def fn(input, *args, _m=name, **kwargs):
            return getattr(input, _m)(*args, **kwargs)
        fn.__name__ = name
        out[name] = fn
    return out


INPLACE_NAMES = ("abs_", "acos_", "acosh_", "arccos_", "arccosh_", "arcsin_", "arcsinh_",
                 "arctan_", "arctanh_", "asin_", "asinh_", "atan_", "atanh_", "ceil_",
                 "clamp_", "clamp_max_", "clamp_min_", "clip_", "cos_", "cosh_", "deg2rad_",
                 "erf_", "erfc_", "exp2_", "exp_", "expm1_", "fill_", "fix_", "floor_",
                 "frac_", "i0_", "log10_", "log1p_", "log2_", "log_", "logit_",
                 "nan_to_num_", "neg_", "negative_", "rad2deg_", "reciprocal_", "round_",
                 "rsqrt_", "sigmoid_", "sin_", "sinc_", "sinh_", "sqrt_", "square_", "tan_",
                 "tanh_", "trunc_", "xlogy_", "index_put_", "resize_as_", "detach_", "gcd_",
                 "lcm_", "ldexp_")

METHODS = ("get_device", "conj_physical", "conj_physical_")

_SKIP = {"Tensor", "builtins", "math", "warnings", "inplace_functions", "copy_functions", "namespace",
         "install", "INPLACE_NAMES", "METHODS"}


def namespace(tensor_cls, modules):
    """The torch.* names the census modules add: public functions and classes of modules,
    plus the torch.<op>_ function forms of Tensor's in-place methods."""
    out = {}
    for module in modules:
        for name, value in vars(module).items():
            if name.startswith("_") or name in _SKIP or not callable(value):
                continue
            if getattr(value, "__module__", module.__name__) == module.__name__:
                out[name] = value
    out.update(inplace_functions(tensor_cls, INPLACE_NAMES))
    out.update(copy_functions(tensor_cls))
    return out


_COPY_VIEWS = ("detach", "diagonal", "expand", "permute", "select", "split", "squeeze", "t",
               "transpose", "unbind", "unfold", "unsqueeze", "view")


def copy_functions(tensor_cls):
    """torch.<view>_copy: the view op's result as a new tensor (cagrad's clone, so the
    gradient flows as through the view)."""
    out = {}
    for name in _COPY_VIEWS:
        if getattr(tensor_cls, name, None) is None:
            continue

        def fn(input, *args, _m=name, **kwargs):
            result = getattr(input, _m)(*args, **kwargs)
            if isinstance(result, (tuple, list)):
                return tuple(r.clone() for r in result)
            return result.clone()
        fn.__name__ = f"{name}_copy"
        out[fn.__name__] = fn
    return out


def install(tensor_cls):
    """Tensor.get_device / conj_physical(_) and Tensor.imag (real is _tensor_more's)."""
    for name in METHODS:
        if not hasattr(tensor_cls, name):
            setattr(tensor_cls, name, globals()[name])
    if not hasattr(tensor_cls, "imag"):
        tensor_cls.imag = property(imag)
