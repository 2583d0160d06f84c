/* module.c - the cagrad._C module: init, the tensor class registry, seeds and threads.
 *
 * The bindings themselves live by concern: ops.c (one per op), autograd.c, interop.c and
 * tensor_type.c (TensorBase). This file joins their method tables, and exports the
 * linked library's version as VERSION (cagrad.__version__).
 */
#include "glue.h"

#include <limits.h>

/* _set_tensor_class(cls): ops return instances of cls, a subclass of TensorBase. */
static PyObject *py_set_tensor_class(PyObject *module, PyObject *cls) {
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &glue_tensor_type)) {
        PyErr_Format(PyExc_TypeError,
                     "_set_tensor_class(): argument must be a subclass of TensorBase, not %R", cls);
        return NULL;
    }
    PyTypeObject *old = glue_tensor_class;
    glue_tensor_class = (PyTypeObject *)Py_NewRef(cls);
    Py_DECREF(old);
    Py_RETURN_NONE;
}

/* manual_seed(seed): any int in [-2**63, 2**64); negative ones wrap modulo 2**64, as in
 * PyTorch. */
static PyObject *py_rng_get_state(PyObject *module, PyObject *unused) {
    uint64_t seed, offset;
    GLUE_CALL_QUICK(ca_rng_get_state(&seed, &offset));
    return Py_BuildValue("(KK)", (unsigned long long)seed, (unsigned long long)offset);
}

static PyObject *py_rng_set_state(PyObject *module, PyObject *args) {
    unsigned long long seed, offset;
    if (!PyArg_ParseTuple(args, "KK:rng_set_state", &seed, &offset))
        return NULL;
    GLUE_CALL_QUICK(ca_rng_set_state(seed, offset));
    Py_RETURN_NONE;
}

static PyObject *py_manual_seed(PyObject *module, PyObject *arg) {
    PyObject *index = PyNumber_Index(arg);
    if (!index)
        return NULL;
    long long value = PyLong_AsLongLong(index);
    uint64_t seed = (uint64_t)value;
    if (value == -1 && PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_OverflowError)) {
        PyErr_Clear(); /* in [2**63, 2**64)? */
        seed = PyLong_AsUnsignedLongLong(index);
    }
    Py_DECREF(index);
    if (PyErr_Occurred())
        return NULL;
    GLUE_CALL_QUICK(ca_manual_seed(seed));
    Py_RETURN_NONE;
}

static PyObject *py_set_num_threads(PyObject *module, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 1 || n > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "set_num_threads(): n must be >= 1, not %ld", n);
        return NULL;
    }
    /* The pool waits for a running job before it stops its threads (kern_pool.c). */
    GLUE_CALL(ca_set_num_threads((int)n));
    Py_RETURN_NONE;
}

static PyObject *py_get_num_threads(PyObject *module, PyObject *unused) {
    return PyLong_FromLong(ca_get_num_threads());
}

static PyObject *py_blas_info(PyObject *module, PyObject *unused) {
    ca_blas_info b;
    ca_get_blas_info(&b);
    return Py_BuildValue("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:z}", "name", b.name, "version",
                         b.version, "config", b.config, "corename", b.core, "threading",
                         b.threading, "core_isa", b.core_isa, "cpu_isa", b.cpu_isa, "kernel_isa",
                         ca_kernel_isa(), "warning", b.warning);
}

static PyObject *py_show_config(PyObject *module, PyObject *unused) {
    size_t need = ca_show_config(NULL, 0);
    char *buf = PyMem_Malloc(need + 1);
    if (!buf)
        return PyErr_NoMemory();
    ca_show_config(buf, need + 1);
    PyObject *text = PyUnicode_FromString(buf);
    PyMem_Free(buf);
    return text;
}

static PyObject *py_empty_cache(PyObject *module, PyObject *unused) {
    GLUE_CALL_QUICK(ca_empty_cache());
    Py_RETURN_NONE;
}

static PyObject *py_set_cache_limit(PyObject *module, PyObject *arg) {
    Py_ssize_t bytes = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (bytes == -1 && PyErr_Occurred())
        return NULL;
    if (bytes < 0) {
        PyErr_Format(PyExc_ValueError, "set_cache_limit: limit must be >= 0 bytes, got %zd", bytes);
        return NULL;
    }
    GLUE_CALL_QUICK(ca_set_cache_limit((size_t)bytes));
    Py_RETURN_NONE;
}

static PyObject *py_cache_info(PyObject *module, PyObject *unused) {
    ca_cache_info ci;
    GLUE_CALL_QUICK(ca_get_cache_info(&ci));
    return Py_BuildValue("{s:n,s:n,s:n,s:K,s:K}", "limit", (Py_ssize_t)ci.limit, "cached_bytes",
                         (Py_ssize_t)ci.cached_bytes, "cached_blocks", (Py_ssize_t)ci.cached_blocks,
                         "hits", (unsigned long long)ci.hits, "misses",
                         (unsigned long long)ci.misses);
}

static PyMethodDef module_methods[] = {
    {"_set_tensor_class", py_set_tensor_class, METH_O,
     "_set_tensor_class(cls): the class (a TensorBase subclass) that ops return"},
    {"manual_seed", py_manual_seed, METH_O, "manual_seed(seed): seed randn, rand and dropout"},
    {"rng_get_state", py_rng_get_state, METH_NOARGS, "rng_get_state() -> (seed, offset)"},
    {"rng_set_state", py_rng_set_state, METH_VARARGS, "rng_set_state(seed, offset)"},
    {"set_num_threads", py_set_num_threads, METH_O, "set_num_threads(n): threads for kernels"},
    {"get_num_threads", py_get_num_threads, METH_NOARGS, "get_num_threads() -> int"},
    {"blas_info", py_blas_info, METH_NOARGS,
     "blas_info() -> {'name', 'version', 'config', 'corename', 'threading', 'core_isa', "
     "'cpu_isa', 'kernel_isa', 'warning'}"},
    {"show_config", py_show_config, METH_NOARGS, "show_config() -> str"},
    {"empty_cache", py_empty_cache, METH_NOARGS,
     "empty_cache(): give every cached data block back to the allocator"},
    {"set_cache_limit", py_set_cache_limit, METH_O,
     "set_cache_limit(bytes): most bytes the data cache holds (0 turns it off)"},
    {"cache_info", py_cache_info, METH_NOARGS,
     "cache_info() -> {'limit', 'cached_bytes', 'cached_blocks', 'hits', 'misses'}"},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(module_doc,
             "cagrad._C: the CPython glue over libcagrad (include/cagrad.h).\n\n"
             "Dtype codes: 0 float32, 1 float64, 2 int64. Reductions: 0 none, 1 mean, 2 sum.\n"
             "gelu approx: 0 none, 1 tanh. A missing clamp bound is float('nan').\n"
             "Each op's docstring lists its parameters as name:kind, with kinds\n"
             "t Tensor, T Tensor or None, f float, i int, b bool, y dtype code,\n"
             "s shape (sequence of ints), d dims (int or sequence of ints),\n"
             "l sequence of Tensors, m None or a sequence of Tensors and Nones.");

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,       .m_name = "cagrad._C",
    .m_doc = module_doc,         .m_size = -1, /* process-global, like the library: see glue.h */
    .m_methods = module_methods,
};

static int module_add_functions(PyObject *m) {
    PyMethodDef *tables[] = {glue_ops_methods,    glue_autograd_methods, glue_interop_methods,
                             glue_custom_methods, glue_node_methods,     glue_dist_methods,
                             glue_shared_methods};
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        if (PyModule_AddFunctions(m, tables[i]) < 0)
            return -1;
    return 0;
}

PyMODINIT_FUNC PyInit__C(void) {
    ca_status st = ca_init();
    if (st) {
        PyErr_Format(PyExc_ImportError, "cagrad._C: libcagrad failed to start: %s",
                     ca_last_error());
        return NULL;
    }
    if (PyType_Ready(&glue_tensor_type) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    Py_INCREF(glue_tensor_class); /* the registry holds a reference, as after a set */
    if (module_add_functions(m) < 0 || glue_add_registry(m) < 0 || glue_add_node_type(m) < 0 ||
        PyModule_AddObjectRef(m, "TensorBase", (PyObject *)&glue_tensor_type) < 0 ||
        PyModule_AddIntConstant(m, "MAX_DIMS", CA_MAX_DIMS) < 0 ||
        PyModule_AddStringConstant(m, "VERSION", ca_version()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
