/* node.c - graph nodes for Python: _C.NodeBase, a handle on one library node (ca_node),
 * and the trampolines of node hooks.
 *
 * A NodeBase holds a strong reference to its node. cagrad.autograd.graph builds the
 * Python-facing objects on it: one subclass per node name (MulBackward0, ...), and one
 * object per node while it is alive, so `y.grad_fn is y.grad_fn`. A hook's callable is the
 * library's ctx (a strong reference, dropped by glue_ctx_decref); it is called with tuples
 * of Tensors (None where a gradient is undefined) and returns None or a sequence of the
 * same length (the Python wrapper in graph.py checks it with PyTorch's messages).
 */
#include "glue.h"

typedef struct {
    PyObject ob_base;
    ca_node *n; /* owned */
    PyObject *weakrefs;
} glue_node;

static PyTypeObject glue_node_type;

static ca_node *N(PyObject *self) {
    return ((glue_node *)self)->n;
}

/* A new NodeBase of type cls holding a new reference to n. */
static PyObject *node_wrap(PyTypeObject *cls, ca_node *n) {
    glue_node *o = (glue_node *)cls->tp_alloc(cls, 0);
    if (!o)
        return NULL;
    GLUE_CALL_QUICK(o->n = ca_node_retain(n));
    return (PyObject *)o;
}

/* NodeBase(src): another handle on src's node (how a subclass instance is made). */
static PyObject *node_new(PyTypeObject *cls, PyObject *args, PyObject *kwargs) {
    PyObject *src;
    if (!PyArg_ParseTuple(args, "O!:NodeBase", &glue_node_type, &src))
        return NULL;
    return node_wrap(cls, N(src));
}

static void node_dealloc(PyObject *self) {
    glue_node *o = (glue_node *)self;
    if (o->weakrefs)
        PyObject_ClearWeakRefs(self);
    if (o->n)
        GLUE_CALL_QUICK(ca_node_release(o->n));
    Py_TYPE(self)->tp_free(self);
}

static PyObject *node_get_addr(PyObject *self, void *unused) {
    return PyLong_FromVoidPtr(N(self));
}

static PyObject *node_get_name(PyObject *self, void *unused) {
    const char *name;
    GLUE_CALL_QUICK(name = ca_node_name(N(self)));
    return PyUnicode_FromString(name);
}

static PyObject *node_get_n_outputs(PyObject *self, void *unused) {
    int n;
    GLUE_CALL_QUICK(n = ca_node_n_outputs(N(self)));
    return PyLong_FromLong(n);
}

static PyObject *node_get_variable(PyObject *self, void *unused) {
    ca_tensor *t;
    GLUE_CALL_QUICK(t = ca_tensor_retain(ca_node_variable(N(self))));
    if (!t)
        Py_RETURN_NONE;
    return glue_wrap(t);
}

/* next edges: a tuple of (NodeBase or None, input_nr) */
static PyObject *node_get_next(PyObject *self, void *unused) {
    int n;
    GLUE_CALL_QUICK(n = ca_node_n_next(N(self)));
    PyObject *tuple = PyTuple_New(n);
    for (int i = 0; tuple && i < n; i++) {
        int nr;
        ca_node *c;
        GLUE_CALL_QUICK(c = ca_node_next(N(self), i, &nr));
        PyObject *node = c ? node_wrap(&glue_node_type, c) : Py_NewRef(Py_None);
        PyObject *pair = node ? Py_BuildValue("(Ni)", node, nr) : NULL;
        if (!pair)
            Py_CLEAR(tuple);
        else
            PyTuple_SET_ITEM(tuple, i, pair);
    }
    return tuple;
}

/* The names of a built-in node's saved values (grad_fn._saved_<name>). */
static PyObject *node_get_saved_names(PyObject *self, void *unused) {
    int n;
    GLUE_CALL_QUICK(n = ca_node_n_saved(N(self)));
    PyObject *tuple = PyTuple_New(n);
    for (int i = 0; tuple && i < n; i++) {
        const char *name;
        GLUE_CALL_QUICK(name = ca_node_saved_name(N(self), i));
        PyObject *s = PyUnicode_FromString(name);
        if (!s)
            Py_CLEAR(tuple);
        else
            PyTuple_SET_ITEM(tuple, i, s);
    }
    return tuple;
}

/* _saved(name): a Tensor (None for an optional input not given), an int, a float, or a
 * tuple of ints (dims, sizes). */
static PyObject *node_saved(PyObject *self, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    ca_saved_value v;
    ca_status st;
    GLUE_CALL(st = ca_node_saved(N(self), name, &v)); /* an unpack hook may run Python */
    if (st != CA_OK)
        return glue_raise(st);
    switch (v.kind) {
    case CA_SAVED_TENSOR: return v.tensor ? glue_wrap(v.tensor) : Py_NewRef(Py_None);
    case CA_SAVED_INT: return PyLong_FromLongLong(v.i);
    case CA_SAVED_DOUBLE: return PyFloat_FromDouble(v.d);
    case CA_SAVED_INTS: break;
    }
    PyObject *tuple = PyTuple_New(v.n_ints);
    for (int i = 0; tuple && i < v.n_ints; i++) {
        PyObject *d = PyLong_FromLongLong(v.ints[i]);
        if (!d)
            Py_CLEAR(tuple);
        else
            PyTuple_SET_ITEM(tuple, i, d);
    }
    return tuple;
}

static PyObject *tensors_tuple(int n, ca_tensor *const *ts);

/* _output_tensor(k): the edge (this node, output k) as a tensor grad() takes. */
static PyObject *node_output_tensor(PyObject *self, PyObject *arg) {
    long k = PyLong_AsLong(arg);
    if (k == -1 && PyErr_Occurred())
        return NULL;
    ca_tensor *t = NULL;
    ca_status st;
    GLUE_CALL_QUICK(st = ca_node_output_tensor(N(self), (int)k, &t));
    return st == CA_OK ? glue_wrap(t) : glue_raise(st);
}

/* _call(grad): the node's rule on grad: a tuple of a Tensor or None per input. */
static PyObject *node_call(PyObject *self, PyObject *arg) {
    if (!glue_tensor_check(arg))
        return PyErr_Format(PyExc_TypeError, "a node is called with a Tensor, not a %.100s",
                            Py_TYPE(arg)->tp_name);
    int n;
    GLUE_CALL_QUICK(n = ca_node_n_next(N(self)));
    ca_tensor **gin = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof(ca_tensor *));
    if (!gin)
        return PyErr_NoMemory();
    ca_status st;
    GLUE_CALL(st = ca_node_call(N(self), glue_tensor_unwrap(arg), gin));
    PyObject *res = st == CA_OK ? tensors_tuple(n, gin) : glue_raise(st);
    for (int i = 0; i < n; i++)
        ca_tensor_release(gin[i]);
    PyMem_Free(gin);
    return res;
}

/* ---------------------------------------------------------------------------------------
 * Hooks
 */
static PyObject *tensors_tuple(int n, ca_tensor *const *ts) {
    PyObject *t = PyTuple_New(n);
    for (int k = 0; t && k < n; k++) {
        PyObject *g = ts[k] ? glue_wrap(ca_tensor_retain(ts[k])) : Py_NewRef(Py_None);
        if (!g)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, k, g);
    }
    return t;
}

/* res: None (keep) or a sequence of n Tensors / Nones, which replace grads. */
static int replace_from(PyObject *res, int n, ca_tensor **grads) {
    if (res == Py_None)
        return 0;
    PyObject *seq = PySequence_Fast(res, "a node hook must return None or a tuple of Tensors");
    if (!seq)
        return -1;
    int rc = 0;
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_Format(PyExc_RuntimeError, "a node hook returned %zd values, expected %d",
                     PySequence_Fast_GET_SIZE(seq), n);
        rc = -1;
    }
    for (int k = 0; k < n && rc == 0; k++) {
        PyObject *g = PySequence_Fast_GET_ITEM(seq, k);
        if (g != Py_None && !glue_tensor_check(g)) {
            PyErr_Format(PyExc_TypeError, "a node hook returned a %.100s, not a Tensor or None",
                         Py_TYPE(g)->tp_name);
            rc = -1;
        }
    }
    for (int k = 0; k < n && rc == 0; k++) {
        PyObject *g = PySequence_Fast_GET_ITEM(seq, k);
        ca_tensor_release(grads[k]); /* the library's references */
        grads[k] = g == Py_None ? NULL : ca_tensor_retain(glue_tensor_unwrap(g));
    }
    Py_DECREF(seq);
    return rc;
}

static ca_status pre_trampoline(int n_out, ca_tensor **grads, void *ctx) {
    if (!glue_python_alive())
        return glue_python_gone();
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *arg = tensors_tuple(n_out, grads);
    PyObject *res = arg ? PyObject_CallOneArg((PyObject *)ctx, arg) : NULL;
    Py_XDECREF(arg);
    if (res)
        replace_from(res, n_out, grads);
    Py_XDECREF(res);
    ca_status st = PyErr_Occurred() ? glue_hook_store() : CA_OK;
    PyGILState_Release(gil);
    return st;
}

static ca_status post_trampoline(int n_in, ca_tensor **gin, int n_out, ca_tensor *const *gout,
                                 void *ctx) {
    if (!glue_python_alive())
        return glue_python_gone();
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *a = tensors_tuple(n_in, gin), *b = a ? tensors_tuple(n_out, gout) : NULL;
    PyObject *res = b ? PyObject_CallFunctionObjArgs((PyObject *)ctx, a, b, NULL) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    if (res)
        replace_from(res, n_in, gin);
    Py_XDECREF(res);
    ca_status st = PyErr_Occurred() ? glue_hook_store() : CA_OK;
    PyGILState_Release(gil);
    return st;
}

static PyObject *node_register(PyObject *self, PyObject *fn, bool pre) {
    if (!PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "a node hook must be callable, not %.100s",
                     Py_TYPE(fn)->tp_name);
        return NULL;
    }
    Py_INCREF(fn);
    ca_hook_handle h = 0;
    ca_status st;
    if (pre)
        GLUE_CALL_QUICK(
            st = ca_node_register_pre_hook(N(self), pre_trampoline, fn, glue_ctx_decref, &h));
    else
        GLUE_CALL_QUICK(
            st = ca_node_register_post_hook(N(self), post_trampoline, fn, glue_ctx_decref, &h));
    if (st) {
        Py_DECREF(fn);
        return glue_raise(st);
    }
    return PyLong_FromUnsignedLongLong(h);
}

static PyObject *node_register_pre(PyObject *self, PyObject *fn) {
    return node_register(self, fn, true);
}

static PyObject *node_register_post(PyObject *self, PyObject *fn) {
    return node_register(self, fn, false);
}

static PyObject *node_remove_hook(PyObject *self, PyObject *arg) {
    unsigned long long h = PyLong_AsUnsignedLongLong(arg);
    if (h == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    ca_status st;
    GLUE_CALL_QUICK(st = ca_node_remove_hook(N(self), h));
    if (st)
        return glue_raise(st);
    Py_RETURN_NONE;
}

static PyObject *node_get_ctx(PyObject *self, void *unused) {
    const ca_custom_function *fn;
    GLUE_CALL_QUICK(fn = ca_node_custom(N(self)));
    return glue_custom_ctx(fn);
}

/* metadata: a dict kept on the library node, so every object of the node sees it */
static PyObject *node_get_metadata(PyObject *self, void *unused) {
    PyObject *d;
    GLUE_CALL_QUICK(d = ca_node_user_data(N(self)));
    if (d)
        return Py_NewRef(d);
    if (!(d = PyDict_New()))
        return NULL;
    GLUE_CALL_QUICK(ca_node_set_user_data(N(self), Py_NewRef(d), glue_ctx_decref));
    return d;
}

static PyGetSetDef node_getset[] = {
    {"metadata", node_get_metadata, NULL, "a dict kept with the node", NULL},
    {"_addr", node_get_addr, NULL, "the node's address: its identity while alive", NULL},
    {"_name", node_get_name, NULL, "the node's name (MulBackward0)", NULL},
    {"_next", node_get_next, NULL, "((NodeBase or None, input_nr), ...)", NULL},
    {"_n_outputs", node_get_n_outputs, NULL, "number of outputs", NULL},
    {"_variable", node_get_variable, NULL, "AccumulateGrad: its leaf; else None", NULL},
    {"_ctx", node_get_ctx, NULL, "a custom Function's ctx, or None", NULL},
    {"_saved_names", node_get_saved_names, NULL, "names of the saved values", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef node_methods[] = {
    {"_register_pre_hook", node_register_pre, METH_O, "fn(grad_outputs) -> handle"},
    {"_register_post_hook", node_register_post, METH_O, "fn(grad_inputs, grad_outputs) -> handle"},
    {"_remove_hook", node_remove_hook, METH_O, "remove a node hook by handle"},
    {"_output_tensor", node_output_tensor, METH_O, "the edge (node, output k) as a tensor"},
    {"_call", node_call, METH_O, "run the node's rule on its output's gradient"},
    {"_saved", node_saved, METH_O, "a saved value by name (grad_fn._saved_<name>)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject glue_node_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cagrad._C.NodeBase",
    .tp_basicsize = sizeof(glue_node),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A handle on one autograd graph node (cagrad.autograd.graph.Node wraps it)",
    .tp_new = node_new,
    .tp_dealloc = node_dealloc,
    .tp_weaklistoffset = offsetof(glue_node, weakrefs),
    .tp_getset = node_getset,
    .tp_methods = node_methods,
};

/* ---------------------------------------------------------------------------------------
 * Module functions
 */
/* grad_fn_node(t) -> NodeBase or None */
static PyObject *py_grad_fn_node(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames) {
    glue_args p;
    if (glue_parse("grad_fn_node", "t:t", args, nargs, kwnames, &p) < 0)
        return NULL;
    ca_node *n;
    GLUE_CALL_QUICK(n = ca_tensor_grad_fn(p.a[0].t));
    if (!n)
        Py_RETURN_NONE;
    return node_wrap(&glue_node_type, n);
}

/* grad_accumulator(t) -> NodeBase: a leaf's AccumulateGrad node */
static PyObject *py_grad_accumulator(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames) {
    glue_args p;
    if (glue_parse("grad_accumulator", "t:t", args, nargs, kwnames, &p) < 0)
        return NULL;
    ca_node *n = NULL;
    ca_status st;
    GLUE_CALL_QUICK(st = ca_tensor_grad_accumulator(p.a[0].t, &n));
    if (st)
        return glue_raise(st);
    PyObject *o = node_wrap(&glue_node_type, n);
    GLUE_CALL_QUICK(ca_node_release(n));
    return o;
}

/* ---------------------------------------------------------------------------------------
 * Saved-tensor hooks: ctx is the tuple (pack, unpack); packed values are Python objects.
 */
static ca_status pack_trampoline(ca_tensor *t, void **packed, void *ctx) {
    if (!glue_python_alive())
        return glue_python_gone();
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *arg = glue_wrap(ca_tensor_retain(t));
    PyObject *res = arg ? PyObject_CallOneArg(PyTuple_GET_ITEM((PyObject *)ctx, 0), arg) : NULL;
    Py_XDECREF(arg);
    *packed = res; /* the node owns it now (free_packed drops it) */
    ca_status st = PyErr_Occurred() ? glue_hook_store() : CA_OK;
    PyGILState_Release(gil);
    return st;
}

static ca_status unpack_trampoline(void *packed, ca_tensor **out, void *ctx) {
    if (!glue_python_alive())
        return glue_python_gone();
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *res = PyObject_CallOneArg(PyTuple_GET_ITEM((PyObject *)ctx, 1), (PyObject *)packed);
    if (res && !glue_tensor_check(res))
        PyErr_Format(PyExc_TypeError, "an unpack hook must return a Tensor, not %.100s",
                     Py_TYPE(res)->tp_name);
    else if (res)
        *out = ca_tensor_retain(glue_tensor_unwrap(res));
    Py_XDECREF(res);
    ca_status st = PyErr_Occurred() ? glue_hook_store() : CA_OK;
    PyGILState_Release(gil);
    return st;
}

/* saved_tensors_hooks_push(pack, unpack) / saved_tensors_hooks_pop() */
static PyObject *py_saved_tensors_hooks_push(PyObject *module, PyObject *const *args,
                                             Py_ssize_t nargs, PyObject *kwnames) {
    glue_args p;
    if (glue_parse("saved_tensors_hooks_push", "pack:o unpack:o", args, nargs, kwnames, &p) < 0)
        return NULL;
    if (!PyCallable_Check(p.a[0].o) || !PyCallable_Check(p.a[1].o)) {
        PyErr_SetString(PyExc_TypeError, "saved_tensors_hooks: pack_hook and unpack_hook must "
                                         "be callable");
        return NULL;
    }
    PyObject *ctx = PyTuple_Pack(2, p.a[0].o, p.a[1].o);
    if (!ctx)
        return NULL;
    ca_status st;
    GLUE_CALL_QUICK(st = ca_saved_tensors_hooks_push(pack_trampoline, unpack_trampoline,
                                                     glue_ctx_decref, ctx, glue_ctx_decref));
    if (st) {
        Py_DECREF(ctx);
        return glue_raise(st);
    }
    Py_RETURN_NONE;
}

static PyObject *py_saved_tensors_hooks_pop(PyObject *module, PyObject *const *args,
                                            Py_ssize_t nargs, PyObject *kwnames) {
    ca_status st;
    GLUE_CALL_QUICK(st = ca_saved_tensors_hooks_pop());
    if (st)
        return glue_raise(st);
    Py_RETURN_NONE;
}

#define FASTCALL(name, doc)                                                                        \
    { #name, (PyCFunction)(void (*)(void))py_##name, METH_FASTCALL | METH_KEYWORDS, doc }

PyMethodDef glue_node_methods[] = {
    FASTCALL(grad_fn_node, "grad_fn_node(t) -> NodeBase or None"),
    FASTCALL(grad_accumulator, "grad_accumulator(t) -> NodeBase (leaves that require grad)"),
    FASTCALL(saved_tensors_hooks_push, "saved_tensors_hooks_push(pack, unpack)"),
    FASTCALL(saved_tensors_hooks_pop, "saved_tensors_hooks_pop()"),
    {NULL, NULL, 0, NULL},
};

int glue_add_node_type(PyObject *module) {
    if (PyType_Ready(&glue_node_type) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "NodeBase", (PyObject *)&glue_node_type);
}
