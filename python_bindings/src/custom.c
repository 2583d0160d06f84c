/* custom.c - custom autograd Functions: the glue between cagrad.autograd.Function and the
 * library's ca_custom_apply.
 *
 * The Python ctx object (the node's BackwardCFunction instance) is the library node's ctx,
 * holding a strong reference that ctx_free drops. In a backward the library calls the
 * trampoline, which calls ctx._run_backward(grads) with the GIL; that Python method does
 * the argument bookkeeping (materialising None gradients, checking the count) and returns
 * one Tensor or None per tensor input. Its exception is stored like a hook's and re-raised
 * by the backward binding.
 */
#include "glue.h"

/* grads: a tuple of Tensors (None where no gradient reached that output). */
static PyObject *grads_tuple(int n, ca_tensor *const *grads) {
    PyObject *t = PyTuple_New(n);
    for (int k = 0; t && k < n; k++) {
        PyObject *g = grads[k] ? glue_wrap(ca_tensor_retain(grads[k])) : Py_NewRef(Py_None);
        if (!g)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, k, g);
    }
    return t;
}

/* Take the gradients ctx._run_backward returned: a sequence of n Tensors or Nones. */
static int take_grads(PyObject *res, int n, ca_tensor **gin) {
    PyObject *seq = PySequence_Fast(res, "Function._run_backward must return a sequence");
    if (!seq)
        return -1;
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_Format(PyExc_RuntimeError, "custom Function: %zd gradients for %d tensor inputs",
                     PySequence_Fast_GET_SIZE(seq), n);
        Py_DECREF(seq);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        PyObject *g = PySequence_Fast_GET_ITEM(seq, i);
        if (g != Py_None && !glue_tensor_check(g)) {
            PyErr_Format(PyExc_TypeError, "custom Function: gradient %d is a %.100s, not a Tensor",
                         i, Py_TYPE(g)->tp_name);
            Py_DECREF(seq);
            return -1;
        }
        gin[i] = g == Py_None ? NULL : ca_tensor_retain(glue_tensor_unwrap(g));
    }
    Py_DECREF(seq);
    return 0;
}

static ca_status backward_trampoline(void *ctx, int n_out, ca_tensor *const *grad_outputs, int n_in,
                                     ca_tensor **grad_inputs) {
    if (!glue_python_alive())
        return glue_python_gone();
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *grads = grads_tuple(n_out, grad_outputs);
    PyObject *res =
        grads ? PyObject_CallMethod((PyObject *)ctx, "_run_backward", "(O)", grads) : NULL;
    Py_XDECREF(grads);
    if (res && take_grads(res, n_in, grad_inputs) < 0)
        for (int i = 0; i < n_in; i++) {
            glue_release(grad_inputs[i]);
            grad_inputs[i] = NULL;
        }
    Py_XDECREF(res);
    /* being traced: the library makes a call-out instead, which raises for real */
    ca_status st = !PyErr_Occurred()     ? CA_OK
                   : ca_custom_tracing() ? glue_hook_status_only()
                                         : glue_hook_store();
    PyGILState_Release(gil);
    return st;
}

/* ctx._trace_state() -> (state, saved tensors, sizes, why): see ca_custom_trace_info. The
 * tensors are borrowed: ctx keeps them until its _release. */
static int take_saved(PyObject *saved, ca_custom_trace_info *info) {
    Py_ssize_t n = PyTuple_GET_SIZE(saved);
    if (n > CA_CUSTOM_MAX_SAVED) {
        info->state = 0;
        snprintf(info->why, sizeof info->why, "it saves %zd tensors; at most %d can be traced", n,
                 CA_CUSTOM_MAX_SAVED);
        return 0;
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *t = PyTuple_GET_ITEM(saved, j);
        if (t != Py_None && !glue_tensor_check(t)) {
            PyErr_Format(PyExc_TypeError, "_trace_state: saved tensor %zd is a %.100s", j,
                         Py_TYPE(t)->tp_name);
            return -1;
        }
        info->saved[j] = t == Py_None ? NULL : glue_tensor_unwrap(t);
    }
    info->n_saved = (int)n;
    return 0;
}

static int take_sizes(PyObject *sizes, ca_custom_trace_info *info) {
    Py_ssize_t n = PyTuple_GET_SIZE(sizes);
    if (n > CA_CUSTOM_MAX_SIZES) {
        PyErr_Format(PyExc_ValueError, "_trace_state: %zd sizes; at most %d", n,
                     CA_CUSTOM_MAX_SIZES);
        return -1;
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(sizes, j));
        if (v == -1 && PyErr_Occurred())
            return -1;
        info->sizes[j] = v;
    }
    info->n_sizes = (int)n;
    return 0;
}

static int take_trace_state(PyObject *res, ca_custom_trace_info *info) {
    PyObject *st_obj, *saved, *sizes, *why;
    if (!PyArg_ParseTuple(res, "OO!O!U", &st_obj, &PyTuple_Type, &saved, &PyTuple_Type, &sizes,
                          &why))
        return -1;
    info->state = PyLong_AsUnsignedLongLong(st_obj);
    if (info->state == (uint64_t)-1 && PyErr_Occurred())
        return -1;
    const char *text = PyUnicode_AsUTF8(why);
    if (!text)
        return -1;
    snprintf(info->why, sizeof info->why, "%s", text);
    if (take_sizes(sizes, info) < 0 || take_saved(saved, info) < 0)
        return -1;
    return 0;
}

static ca_status trace_state_trampoline(void *ctx, ca_custom_trace_info *info) {
    if (!glue_python_alive())
        return glue_python_gone();
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *res = PyObject_CallMethod((PyObject *)ctx, "_trace_state", NULL);
    if (res && take_trace_state(res, info) < 0)
        memset(info, 0, sizeof *info);
    Py_XDECREF(res);
    ca_status st = PyErr_Occurred() ? glue_hook_store() : CA_OK;
    PyGILState_Release(gil);
    return st;
}

/* Whether the pending error is an AttributeError because ctx's class no longer has
 * _release at all (the collector cleared it), not one raised inside _release. */
static bool class_torn_down(PyObject *ctx) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError))
        return false;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    bool gone = !PyObject_HasAttrString((PyObject *)Py_TYPE(ctx), "_release");
    PyErr_Restore(type, value, tb);
    return gone;
}

/* After a backward without retain_graph: ctx._release() frees the saved tensors. The node
 * can also go when a failed call frees its temporaries, with that call's error pending:
 * the error is set aside, so that _release runs clean and the caller still raises it. */
static void release_trampoline(void *ctx) {
    if (!glue_python_alive())
        return;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *res = PyObject_CallMethod((PyObject *)ctx, "_release", NULL);
    if (res)
        Py_DECREF(res);
    else if (class_torn_down((PyObject *)ctx))
        /* The collector is freeing a cycle that holds ctx's own class (a Function defined
         * in a function, whose output it keeps), and cleared the class first: ctx has no
         * _release left, and what _release would drop goes with the cycle. */
        PyErr_Clear();
    else
        PyErr_WriteUnraisable((PyObject *)ctx);
    PyErr_Restore(type, value, tb);
    PyGILState_Release(gil);
}

static bool is_python_ctx(const ca_custom_function *fn) {
    return fn && fn->backward == backward_trampoline;
}

PyObject *glue_custom_gc_ctx(const ca_tensor *t) {
    const ca_custom_function *fn = ca_tensor_sole_custom_fn(t);
    return is_python_ctx(fn) ? (PyObject *)fn->ctx : NULL;
}

/* The output flags: a sequence of ints, one per output. */
static int parse_flags(PyObject *obj, int n, unsigned *flags) {
    PyObject *seq = PySequence_Fast(obj, "custom_apply(): flags must be a sequence of ints");
    if (!seq)
        return -1;
    int rc = 0;
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_Format(PyExc_ValueError, "custom_apply(): %zd flags for %d outputs",
                     PySequence_Fast_GET_SIZE(seq), n);
        rc = -1;
    }
    for (int k = 0; k < n && rc == 0; k++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, k));
        if (v == -1 && PyErr_Occurred())
            rc = -1;
        flags[k] = (unsigned)v;
    }
    Py_DECREF(seq);
    return rc;
}

/* The results as Tensors: where a result is the output itself (made the node's output in
 * place), the caller's own object, so `y = Fn.apply(x)` keeps identities forward() made. */
static PyObject *wrap_results(ca_tensor **res, const glue_tensors *outs, PyObject *out_objs) {
    int n = outs->n;
    PyObject *list = PyList_New(n);
    for (int k = 0; k < n; k++) {
        PyObject *item = NULL;
        if (list && res[k] == outs->v[k]) {
            item = Py_NewRef(PyTuple_GET_ITEM(out_objs, k));
            glue_release(res[k]);
        } else if (list) {
            item = glue_wrap(res[k]);
        }
        if (!list)
            glue_release(res[k]);
        else if (!item)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, k, item);
    }
    return list;
}

/* custom_apply(ctx, inputs, outputs, flags, name, key) -> list of output tensors */
static PyObject *py_custom_apply(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames) {
    glue_args p;
    if (glue_parse("custom_apply", "ctx:o inputs:l outputs:l flags:o name:o key:i", args, nargs,
                   kwnames, &p) < 0)
        return NULL;
    PyObject *result = NULL;
    glue_tensors in = p.a[1].list, out = p.a[2].list;
    const char *name = PyUnicode_Check(p.a[4].o) ? PyUnicode_AsUTF8(p.a[4].o) : NULL;
    unsigned *flags = PyMem_Calloc((size_t)out.n + 1, sizeof(unsigned));
    ca_tensor **res = PyMem_Calloc((size_t)out.n + 1, sizeof(ca_tensor *));
    if (!flags || !res)
        PyErr_NoMemory();
    else if (!name && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "custom_apply(): name must be a str");
    if (!PyErr_Occurred() && parse_flags(p.a[3].o, out.n, flags) == 0) {
        ca_custom_function fn = {.name = name,
                                 .key = (uint64_t)p.a[5].i,
                                 .backward = backward_trampoline,
                                 .release = release_trampoline,
                                 .ctx = Py_NewRef(p.a[0].o),
                                 .ctx_free = glue_ctx_decref,
                                 .trace_state = trace_state_trampoline};
        ca_status st;
        GLUE_CALL(st = ca_custom_apply(&fn, in.n, in.v, out.n, out.v, flags, res));
        result = st ? glue_raise(st) : wrap_results(res, &out, p.keep[2]);
    }
    PyMem_Free(flags);
    PyMem_Free(res);
    glue_args_done(&p);
    return result;
}

PyObject *glue_custom_ctx(const ca_custom_function *fn) {
    if (!is_python_ctx(fn))
        Py_RETURN_NONE;
    return Py_NewRef((PyObject *)fn->ctx);
}

/* grad_fn_ctx(t) -> the Function ctx of t's grad_fn, or None for other nodes and leaves */
static PyObject *py_grad_fn_ctx(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
    glue_args p;
    if (glue_parse("grad_fn_ctx", "t:t", args, nargs, kwnames, &p) < 0)
        return NULL;
    const ca_custom_function *fn;
    GLUE_CALL_QUICK(fn = ca_tensor_grad_fn_custom(p.a[0].t));
    return glue_custom_ctx(fn);
}

/* output_nr(t) -> which output of its grad_fn t is */
static PyObject *py_output_nr(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames) {
    glue_args p;
    if (glue_parse("output_nr", "t:t", args, nargs, kwnames, &p) < 0)
        return NULL;
    int nr;
    GLUE_CALL_QUICK(nr = ca_tensor_output_nr(p.a[0].t));
    return PyLong_FromLong(nr);
}

/* saved_output(t, k) -> a saved output k as a custom backward reads it: with the running
 * node's output k as its history under create_graph (ca_custom_saved_output) */
static PyObject *py_saved_output(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames) {
    glue_args p;
    if (glue_parse("saved_output", "t:t k:i", args, nargs, kwnames, &p) < 0)
        return NULL;
    ca_tensor *out = NULL;
    ca_status st;
    GLUE_CALL_QUICK(st = ca_custom_saved_output(p.a[0].t, (int)p.a[1].i, &out));
    glue_args_done(&p);
    if (st != CA_OK)
        return glue_raise(st);
    return glue_wrap(out);
}

/* graph_mark() -> int: ca_graph_mark, for Tensor._rebase_(result, mark) */
static PyObject *py_graph_mark(PyObject *module, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(ca_graph_mark());
}

/* custom_tracing() -> whether a custom backward is being recorded on this thread */
static PyObject *py_custom_tracing(PyObject *module, PyObject *unused) {
    return PyBool_FromLong(ca_custom_tracing());
}

/* custom_refuse_tracing(why): the backward being recorded runs as a call-out instead */
static PyObject *py_custom_refuse_tracing(PyObject *module, PyObject *why) {
    const char *s = PyUnicode_AsUTF8(why);
    if (!s)
        return NULL;
    ca_custom_refuse_tracing(s);
    Py_RETURN_NONE;
}

#define FASTCALL(name, doc)                                                                        \
    { #name, (PyCFunction)(void (*)(void))py_##name, METH_FASTCALL | METH_KEYWORDS, doc }

PyMethodDef glue_custom_methods[] = {
    FASTCALL(custom_apply, "custom_apply(ctx, inputs, outputs, flags, name, key) -> list: record "
                           "a custom Function's node; ctx._run_backward(grads) is its backward"),
    FASTCALL(grad_fn_ctx, "grad_fn_ctx(t) -> the Function ctx that is t's grad_fn, or None"),
    FASTCALL(output_nr, "output_nr(t) -> int"),
    FASTCALL(saved_output, "saved_output(t, k) -> t with output k of the running custom "
                           "backward's node as its history under create_graph"),
    {"graph_mark", py_graph_mark, METH_NOARGS,
     "graph_mark() -> int: the nodes recorded after it are since it (Tensor._rebase_)"},
    {"custom_tracing", py_custom_tracing, METH_NOARGS,
     "custom_tracing() -> bool: a custom backward is being recorded on this thread"},
    {"custom_refuse_tracing", py_custom_refuse_tracing, METH_O,
     "custom_refuse_tracing(why): the backward being recorded runs as a call-out instead"},
    {NULL, NULL, 0, NULL},
};
