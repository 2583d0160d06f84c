/* tensor_type.c - _C.TensorBase: one ca_tensor in a Python object.
 *
 * cagrad.Tensor subclasses it in Python. Everything here reads the C tensor's metadata or
 * forwards to one libcagrad call; the Python class adds PyTorch's names and semantics.
 * The only state beyond the ca_tensor is the cached .grad wrapper, so that `t.grad is
 * t.grad` holds while the C gradient is the same tensor.
 */
#include "glue.h"

PyTypeObject *glue_tensor_class = &glue_tensor_type;

static ca_tensor *T(PyObject *self) {
    return glue_tensor_unwrap(self);
}

/* ---------------------------------------------------------------------------------------
 * Life cycle
 */
/* TensorBase.__new__(cls, source): a detached alias of source (nn.Parameter uses it). */
static PyObject *tensor_new(PyTypeObject *cls, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"source", NULL};
    PyObject *source;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!:TensorBase", kwlist, &glue_tensor_type,
                                     &source))
        return NULL;
    ca_tensor *alias = NULL;
    ca_status st;
    GLUE_CALL_QUICK(st = ca_tensor_detach(T(source), &alias));
    return st ? glue_raise(st) : glue_wrap_as(cls, alias);
}

/* Besides .grad, the ctx of a custom Function whose node only this tensor holds (as
 * PyTorch's tensors do): a ctx that keeps the Function's output (ctx.out = y) is then a
 * cycle the collector finds, rather than a leak. */
static int tensor_traverse(PyObject *self, visitproc visit, void *arg) {
    glue_tensor *t = (glue_tensor *)self;
    Py_VISIT(t->grad);
    if (t->t)
        Py_VISIT(glue_custom_gc_ctx(t->t));
    return 0;
}

static int tensor_clear(PyObject *self) {
    Py_CLEAR(((glue_tensor *)self)->grad);
    return 0;
}

static void tensor_dealloc(PyObject *self) {
    glue_tensor *t = (glue_tensor *)self;
    if (t->t && ca_tensor_binding(t->t) == self) /* first: nothing may hand it out now */
        ca_tensor_set_binding(t->t, NULL);
    PyObject_GC_UnTrack(self);
    if (t->weakrefs)
        PyObject_ClearWeakRefs(self);
    tensor_clear(self);
    glue_release(t->t);
    t->t = NULL;
    Py_TYPE(self)->tp_free(self);
}

static PyObject *tensor_repr(PyObject *self) {
    char buf[256];
    return PyUnicode_FromFormat("<%s %s>", Py_TYPE(self)->tp_name,
                                ca_tensor_describe(T(self), buf, sizeof buf));
}

/* ---------------------------------------------------------------------------------------
 * Attributes. Metadata getters read fields a tensor never changes after creation, or that
 * only a locked call changes; none runs a kernel or touches a refcount, so no lock.
 */
static PyObject *ints_tuple(const int64_t *v, int n) {
    PyObject *tuple = PyTuple_New(n);
    for (int i = 0; tuple && i < n; i++) {
        PyObject *item = PyLong_FromLongLong(v[i]);
        if (!item) {
            Py_CLEAR(tuple);
            break;
        }
        PyTuple_SET_ITEM(tuple, i, item);
    }
    return tuple;
}

static PyObject *tensor_get_shape(PyObject *self, void *unused) {
    return ints_tuple(ca_tensor_shape(T(self)), ca_tensor_ndim(T(self)));
}

static PyObject *tensor_get_strides(PyObject *self, void *unused) {
    return ints_tuple(ca_tensor_strides(T(self)), ca_tensor_ndim(T(self)));
}

static PyObject *tensor_get_dtype(PyObject *self, void *unused) {
    return PyLong_FromLong(ca_tensor_dtype(T(self)));
}

static PyObject *tensor_get_ndim(PyObject *self, void *unused) {
    return PyLong_FromLong(ca_tensor_ndim(T(self)));
}

static PyObject *tensor_get_requires_grad(PyObject *self, void *unused) {
    return PyBool_FromLong(ca_tensor_requires_grad(T(self)));
}

static int tensor_set_requires_grad(PyObject *self, PyObject *value, void *unused) {
    if (!value || !PyBool_Check(value)) {
        PyErr_Format(PyExc_TypeError, "requires_grad must be a bool, not %.100s",
                     value ? Py_TYPE(value)->tp_name : "deletion");
        return -1;
    }
    if (value == Py_True && ca_tensor_dtype(T(self)) == CA_BOOL) { /* torch's words */
        PyErr_SetString(PyExc_RuntimeError,
                        "only Tensors of floating point dtype can require gradients");
        return -1;
    }
    ca_status st;
    GLUE_CALL_QUICK(st = ca_tensor_set_requires_grad(T(self), value == Py_True));
    return st ? (glue_raise(st), -1) : 0;
}

static PyObject *tensor_get_is_leaf(PyObject *self, void *unused) {
    return PyBool_FromLong(ca_tensor_is_leaf(T(self)));
}

/* A new reference to t's gradient, or NULL. */
static ca_tensor *grad_retained(ca_tensor *t) {
    ca_tensor *grad = ca_tensor_grad(t);
    return grad ? ca_tensor_retain(grad) : NULL;
}

/* The same wrapper while ca_tensor_grad(t) is the same tensor; a new one when it changed. */
static PyObject *tensor_get_grad(PyObject *self, void *unused) {
    glue_tensor *t = (glue_tensor *)self;
    ca_tensor *grad = ca_tensor_grad(t->t);
    if (t->grad && glue_tensor_unwrap(t->grad) == grad)
        return Py_NewRef(t->grad);
    /* Re-read: a backward on another thread may have replaced it meanwhile. */
    GLUE_CALL_QUICK(grad = grad_retained(t->t));
    PyObject *wrapper = grad ? glue_wrap(grad) : NULL; /* NULL and an exception on failure */
    /* XSETREF, and our own reference first: dropping the old wrapper may run Python code. */
    Py_XSETREF(t->grad, Py_XNewRef(wrapper));
    if (!grad)
        Py_RETURN_NONE;
    return wrapper;
}

static int tensor_set_grad(PyObject *self, PyObject *value, void *unused) {
    glue_tensor *t = (glue_tensor *)self;
    if (value == Py_None)
        value = NULL; /* `t.grad = None` and `del t.grad` both clear it */
    if (value && !glue_tensor_check(value)) {
        PyErr_Format(PyExc_TypeError, "assigned grad must be a Tensor or None, not %.100s",
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    ca_status st;
    GLUE_CALL_QUICK(st = ca_tensor_set_grad(t->t, value ? T(value) : NULL));
    if (st) {
        glue_raise(st);
        return -1;
    }
    Py_XINCREF(value);
    Py_XSETREF(t->grad, value);
    return 0;
}

static PyObject *tensor_get_grad_fn_name(PyObject *self, void *unused) {
    const char *name = ca_tensor_grad_fn_name(T(self));
    if (!name)
        Py_RETURN_NONE;
    return PyUnicode_FromString(name);
}

/* The view's base (one Python object per tensor: `v._base is x`), or None. */
static PyObject *tensor_get_base(PyObject *self, void *unused) {
    ca_tensor *base = ca_tensor_view_base(T(self));
    if (!base)
        Py_RETURN_NONE;
    return glue_wrap(ca_tensor_retain(base));
}

static PyObject *tensor_get_version(PyObject *self, void *unused) {
    return PyLong_FromUnsignedLongLong(ca_tensor_version(T(self)));
}

static PyObject *tensor_get_forward_graph(PyObject *self, void *unused) {
    return PyLong_FromLong(ca_tensor_forward_graph_id(T(self)));
}

static PyObject *tensor_get_data_ptr(PyObject *self, void *unused) {
    return PyLong_FromVoidPtr(ca_tensor_data(T(self)));
}

static PyObject *tensor_get_retains_grad(PyObject *self, void *unused) {
    return PyBool_FromLong(ca_tensor_retains_grad(T(self)));
}

static PyGetSetDef tensor_getset[] = {
    {"_shape", tensor_get_shape, NULL, "shape as a tuple of ints", NULL},
    {"_strides", tensor_get_strides, NULL, "strides in elements", NULL},
    {"_dtype", tensor_get_dtype, NULL, "dtype code: 0 float32, 1 float64, 2 int64", NULL},
    {"ndim", tensor_get_ndim, NULL, "number of dims", NULL},
    {"requires_grad", tensor_get_requires_grad, tensor_set_requires_grad,
     "whether autograd records ops on this tensor", NULL},
    {"is_leaf", tensor_get_is_leaf, NULL, "True unless an op that recorded a graph made it", NULL},
    {"grad", tensor_get_grad, tensor_set_grad, "accumulated gradient, or None", NULL},
    {"_grad_fn_name", tensor_get_grad_fn_name, NULL, "name of grad_fn's node, or None", NULL},
    {"_base", tensor_get_base, NULL, "the tensor this view's memory belongs to, or None", NULL},
    {"_version", tensor_get_version, NULL, "in-place version counter of the storage", NULL},
    {"_forward_graph", tensor_get_forward_graph, NULL, "forward graph of grad_fn, -1 for leaves",
     NULL},
    {"_data_ptr", tensor_get_data_ptr, NULL, "address of element (0, ..., 0)", NULL},
    {"_retains_grad", tensor_get_retains_grad, NULL, "whether retain_grad() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---------------------------------------------------------------------------------------
 * Methods
 */
static PyObject *tensor_numel(PyObject *self, PyObject *unused) {
    return PyLong_FromLongLong(ca_tensor_numel(T(self)));
}

static PyObject *tensor_is_contiguous(PyObject *self, PyObject *unused) {
    return PyBool_FromLong(ca_tensor_is_contiguous(T(self)));
}

/* The value of a one-element tensor: int for int64 (read exactly, not through a double,
 * which would round past 2**53), bool for bool, float otherwise. No graph break: Python makes that.
 */
static ca_status item_read(ca_tensor *t, double *value, int64_t *exact) {
    ca_status st = ca_tensor_item(t, value);
    if (!st && ca_tensor_dtype(t) == CA_INT64)
        *exact = *(const int64_t *)ca_tensor_data(t);
    return st;
}

static PyObject *tensor_item(PyObject *self, PyObject *unused) {
    double value = 0;
    int64_t exact = 0;
    ca_status st;
    GLUE_CALL_QUICK(st = item_read(T(self), &value, &exact));
    if (st)
        return glue_raise(st);
    if (ca_tensor_dtype(T(self)) == CA_INT64)
        return PyLong_FromLongLong(exact);
    if (ca_tensor_dtype(T(self)) == CA_BOOL)
        return PyBool_FromLong(value != 0);
    return PyFloat_FromDouble(value);
}

/* self._rebase_(result, mark=None) -> bool: an in-place op on a tensor in the autograd
 * graph, given its out-of-place result (ca_tensor_rebase_; with the ca_graph_mark taken
 * before computing it, ca_tensor_rebase_since_); False when it must be computed again from
 * a copy of self. */
static PyObject *tensor_rebase(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2)
        return PyErr_Format(PyExc_TypeError, "_rebase_() takes 1 or 2 arguments (%zd given)",
                            nargs);
    PyObject *result = args[0];
    if (!glue_tensor_check(result))
        return PyErr_Format(PyExc_TypeError, "_rebase_(): expected a Tensor, got %s",
                            Py_TYPE(result)->tp_name);
    uint64_t mark = UINT64_MAX;
    if (nargs == 2 && args[1] != Py_None) {
        mark = PyLong_AsUnsignedLongLong(args[1]);
        if (PyErr_Occurred())
            return NULL;
    }
    bool done = false;
    ca_status st;
    GLUE_CALL(st = ca_tensor_rebase_since_(T(self), T(result), mark, &done));
    if (st)
        return glue_raise(st);
    return PyBool_FromLong(done);
}

static PyObject *tensor_describe(PyObject *self, PyObject *unused) {
    char buf[256];
    return PyUnicode_FromString(ca_tensor_describe(T(self), buf, sizeof buf));
}

static PyMethodDef tensor_methods[] = {
    {"numel", tensor_numel, METH_NOARGS, "numel() -> number of elements"},
    {"is_contiguous", tensor_is_contiguous, METH_NOARGS, "is_contiguous() -> bool (row-major)"},
    {"_item", tensor_item, METH_NOARGS, "_item() -> int or float of a one-element tensor"},
    {"_describe", tensor_describe, METH_NOARGS, "_describe() -> 'float32[2, 3]'"},
    {"_rebase_", (PyCFunction)(void (*)(void))tensor_rebase, METH_FASTCALL,
     "_rebase_(result, mark=None) -> bool: take an in-place op's out-of-place result and its "
     "history"},
    {"__dlpack__", (PyCFunction)(void (*)(void))glue_tensor_dlpack, METH_FASTCALL | METH_KEYWORDS,
     "__dlpack__(stream=None, max_version=None, dl_device=None, copy=None) -> PyCapsule"},
    {"__dlpack_device__", glue_tensor_dlpack_device, METH_NOARGS,
     "__dlpack_device__() -> (1, 0): kDLCPU, device 0"},
    {NULL, NULL, 0, NULL},
};

/* ---------------------------------------------------------------------------------------
 * Buffer protocol: writable, strides in bytes, the tensor kept alive through view->obj.
 * view->internal holds the shape and strides arrays, freed on release.
 */
static const char *buffer_format(ca_dtype dtype) {
    return dtype == CA_FLOAT32 ? "f" : dtype == CA_FLOAT64 ? "d" : dtype == CA_BOOL ? "?" : "q";
}

/* The contiguity the consumer asked for, or NULL if the view has it. */
static const char *buffer_missing_order(const Py_buffer *view, int flags) {
    if ((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS && !PyBuffer_IsContiguous(view, 'C'))
        return "C-contiguous";
    if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && !PyBuffer_IsContiguous(view, 'F'))
        return "Fortran-contiguous";
    if ((flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS && !PyBuffer_IsContiguous(view, 'A'))
        return "contiguous";
    /* Without strides, the consumer reads the memory as one C-ordered block. */
    if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES && !PyBuffer_IsContiguous(view, 'C'))
        return "C-contiguous";
    return NULL;
}

static int tensor_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    ca_tensor *t = T(self);
    int ndim = ca_tensor_ndim(t);
    Py_ssize_t itemsize = (Py_ssize_t)ca_dtype_size(ca_tensor_dtype(t));
    Py_ssize_t *dims = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(2 * ndim + 1));
    if (!dims) {
        PyErr_NoMemory();
        return -1;
    }
    static char zero_size_data; /* a zero-size tensor may have no storage */
    void *data = ca_tensor_data(t);
    *view = (Py_buffer){
        .buf = data ? data : &zero_size_data,
        .len = (Py_ssize_t)ca_tensor_numel(t) * itemsize,
        .itemsize = itemsize,
        .ndim = ndim,
        .format = (char *)buffer_format(ca_tensor_dtype(t)),
        .shape = dims,
        .strides = dims + ndim,
        .internal = dims,
    };
    for (int i = 0; i < ndim; i++) {
        dims[i] = (Py_ssize_t)ca_tensor_shape(t)[i];
        dims[ndim + i] = (Py_ssize_t)ca_tensor_strides(t)[i] * itemsize;
    }
    const char *order = buffer_missing_order(view, flags);
    if (order) {
        PyMem_Free(dims);
        view->obj = NULL;
        PyErr_Format(PyExc_BufferError,
                     "the consumer asked for a %s buffer but this tensor is not; call "
                     ".contiguous() on it first",
                     order);
        return -1;
    }
    if (!(flags & PyBUF_FORMAT))
        view->format = NULL;
    if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES)
        view->strides = NULL;
    if ((flags & PyBUF_ND) != PyBUF_ND) {
        view->shape = NULL;
        view->ndim = 1; /* a plain block of len bytes, as PyBuffer_FillInfo gives */
    }
    view->obj = Py_NewRef(self);
    return 0;
}

static void tensor_releasebuffer(PyObject *self, Py_buffer *view) {
    PyMem_Free(view->internal);
}

static PyBufferProcs tensor_as_buffer = {
    .bf_getbuffer = tensor_getbuffer,
    .bf_releasebuffer = tensor_releasebuffer,
};

/* ---------------------------------------------------------------------------------------
 * The type
 */
/* The head macro brings its own comma, which clang-format cannot see. */
/* clang-format off */
PyTypeObject glue_tensor_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cagrad._C.TensorBase",
    /* clang-format on */
    .tp_basicsize = sizeof(glue_tensor),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "TensorBase(source): a detached alias of source sharing its storage.\n\n"
              "The C type behind cagrad.Tensor: one libcagrad tensor and a cached .grad.",
    .tp_new = tensor_new,
    .tp_dealloc = tensor_dealloc,
    .tp_traverse = tensor_traverse,
    .tp_clear = tensor_clear,
    .tp_repr = tensor_repr,
    .tp_weaklistoffset = offsetof(glue_tensor, weakrefs),
    .tp_getset = tensor_getset,
    .tp_methods = tensor_methods,
    .tp_as_buffer = &tensor_as_buffer,
};
