/* autograd.c - backward, autograd.grad, Python hooks, grad mode, graph breaks, the op
 * observer and compiled autograd.
 *
 * Python callables run from inside libcagrad calls (hooks during a backward, the observer
 * after each op). Their trampolines run on the calling thread, which holds the library
 * lock and has released the GIL, so they take the GIL with PyGILState_Ensure. A hook's
 * exception cannot cross the C library: the trampoline stores it (glue_hook_store) and
 * fails the backward with CA_STATUS_HOOK, and the binding re-raises the stored object once
 * the backward has returned and freed what it held.
 */
#include "glue.h"

#include <limits.h>

static PyObject *return_none_or_raise(ca_status st) {
    if (st)
        return glue_raise(st);
    Py_RETURN_NONE;
}

/* After a backward or grad: the hook's own exception if one was raised, else the status's.
 * Returns 0 when the call succeeded and no hook raised. */
static int backward_outcome(ca_status st) {
    if (glue_hook_reraise())
        return -1;
    if (st) {
        glue_raise(st);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Hooks. The ctx of a hook is the callable itself, holding a strong reference.
 */
ca_status glue_python_gone(void) {
    return ca_error_set(CA_STATUS_HOOK, "a Python hook cannot run while Python shuts down");
}

/* tensor hook: fn(grad) -> None (keep grad) or a Tensor (use it instead) */
static ca_status hook_tensor_trampoline(ca_tensor *grad, ca_tensor **replacement, void *ctx) {
    if (!glue_python_alive())
        return glue_python_gone();
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *arg = glue_wrap(ca_tensor_retain(grad));
    PyObject *res = arg ? PyObject_CallOneArg((PyObject *)ctx, arg) : NULL;
    Py_XDECREF(arg);
    if (res && res != Py_None) {
        if (glue_tensor_check(res))
            *replacement = ca_tensor_retain(glue_tensor_unwrap(res));
        else
            PyErr_Format(PyExc_TypeError, "a tensor hook must return None or a Tensor, not %.100s",
                         Py_TYPE(res)->tp_name);
    }
    Py_XDECREF(res);
    ca_status st = PyErr_Occurred() ? glue_hook_store() : CA_OK;
    PyGILState_Release(gil);
    return st;
}

/* post-accumulate-grad hook: fn(leaf) -> None, with a new wrapper of the leaf */
static ca_status hook_post_trampoline(ca_tensor *leaf, void *ctx) {
    if (!glue_python_alive())
        return glue_python_gone();
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *arg = glue_wrap(ca_tensor_retain(leaf));
    PyObject *res = arg ? PyObject_CallOneArg((PyObject *)ctx, arg) : NULL;
    Py_XDECREF(arg);
    if (res && res != Py_None)
        PyErr_Format(PyExc_TypeError, "a post-accumulate-grad hook must return None, not %.100s",
                     Py_TYPE(res)->tp_name);
    Py_XDECREF(res);
    ca_status st = PyErr_Occurred() ? glue_hook_store() : CA_OK;
    PyGILState_Release(gil);
    return st;
}

/* Called by the library when a hook is removed or its tensor/node is freed, with or
 * without the GIL. At shutdown the callable is leaked rather than touched. */
void glue_ctx_decref(void *ctx) {
    if (!glue_python_alive())
        return;
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF((PyObject *)ctx);
    PyGILState_Release(gil);
}

/* Parse (t, fn); *fn receives a new reference, which the library owns once registration
 * succeeded (it releases it through glue_ctx_decref). */
static int hook_args(const char *name, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                     ca_tensor **t, PyObject **fn) {
    glue_args p;
    if (glue_parse(name, "t:t fn:o", args, nargs, kwnames, &p) < 0)
        return -1;
    if (!PyCallable_Check(p.a[1].o)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument 'fn' (position 2) must be callable, not %.100s", name,
                     Py_TYPE(p.a[1].o)->tp_name);
        return -1;
    }
    *t = p.a[0].t;
    *fn = Py_NewRef(p.a[1].o);
    return 0;
}

static PyObject *hook_registered(ca_status st, PyObject *fn, ca_hook_handle handle) {
    if (st) {
        Py_DECREF(fn); /* on failure the library did not keep ctx */
        return glue_raise(st);
    }
    return PyLong_FromUnsignedLongLong(handle);
}

static PyObject *py_register_hook(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
    ca_tensor *t;
    PyObject *fn;
    if (hook_args("register_hook", args, nargs, kwnames, &t, &fn) < 0)
        return NULL;
    ca_hook_handle handle = 0;
    ca_status st;
    GLUE_CALL_QUICK(
        st = ca_tensor_register_hook(t, hook_tensor_trampoline, fn, glue_ctx_decref, &handle));
    return hook_registered(st, fn, handle);
}

static PyObject *py_register_post_accumulate_grad_hook(PyObject *module, PyObject *const *args,
                                                       Py_ssize_t nargs, PyObject *kwnames) {
    ca_tensor *t;
    PyObject *fn;
    if (hook_args("register_post_accumulate_grad_hook", args, nargs, kwnames, &t, &fn) < 0)
        return NULL;
    ca_hook_handle handle = 0;
    ca_status st;
    GLUE_CALL_QUICK(st = ca_tensor_register_post_accumulate_grad_hook(t, hook_post_trampoline, fn,
                                                                      glue_ctx_decref, &handle));
    return hook_registered(st, fn, handle);
}

static PyObject *py_remove_hook(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
    glue_args p;
    if (glue_parse("remove_hook", "t:t handle:h", args, nargs, kwnames, &p) < 0)
        return NULL;
    ca_status st;
    GLUE_CALL(st = ca_tensor_remove_hook(p.a[0].t, p.a[1].h));
    return return_none_or_raise(st);
}

/* ---------------------------------------------------------------------------------------
 * backward and grad
 */
static PyObject *py_backward(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames) {
    glue_args p;
    if (glue_parse("backward", "root:t gradient:T retain_graph:b |inputs:l create_graph:b", args,
                   nargs, kwnames, &p) < 0)
        return NULL;
    /* an omitted inputs= is an empty list: every leaf */
    ca_backward_options options = {.gradient = p.a[1].t,
                                   .retain_graph = p.a[2].b,
                                   .n_inputs = p.a[3].list.n,
                                   .inputs = p.a[3].list.v,
                                   .create_graph = p.a[4].b};
    ca_status st;
    glue_hook_clear();
    GLUE_CALL(st = ca_backward_ex(p.a[0].t, &options));
    glue_args_done(&p);
    if (backward_outcome(st) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* A list of n wrapped gradients (None for NULL). Takes every reference, even on failure. */
static PyObject *wrap_grads(ca_tensor **grads, int n) {
    PyObject *list = PyList_New(n);
    int i = 0;
    while (list && i < n) {
        PyObject *item = grads[i] ? glue_wrap(grads[i]) : Py_NewRef(Py_None);
        i++; /* glue_wrap took grads[i] even if it failed */
        if (!item)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i - 1, item);
    }
    for (; i < n; i++)
        glue_release(grads[i]);
    return list;
}

static PyObject *grad_run(glue_args *p) {
    glue_tensors outputs = p->a[0].list, inputs = p->a[1].list, seeds = p->a[2].list;
    if (seeds.v && seeds.n != outputs.n) {
        PyErr_Format(PyExc_ValueError,
                     "grad(): grad_outputs has %d entries but outputs has %d; give one gradient "
                     "(or None) per output",
                     seeds.n, outputs.n);
        return NULL;
    }
    ca_tensor **grads = PyMem_Calloc((size_t)(inputs.n ? inputs.n : 1), sizeof(ca_tensor *));
    if (!grads)
        return PyErr_NoMemory();
    ca_grad_options options = {.grad_outputs = seeds.v,
                               .retain_graph = p->a[3].b,
                               .allow_unused = p->a[4].b,
                               .create_graph = p->a[5].b};
    ca_status st;
    glue_hook_clear();
    GLUE_CALL(st = ca_grad(outputs.n, outputs.v, inputs.n, inputs.v, &options, grads));
    PyObject *result = NULL;
    if (backward_outcome(st) == 0) {
        result = wrap_grads(grads, inputs.n);
    } else {
        for (int i = 0; i < inputs.n; i++)
            glue_release(grads[i]);
    }
    PyMem_Free(grads);
    return result;
}

static PyObject *py_grad(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames) {
    glue_args p;
    if (glue_parse(
            "grad",
            "outputs:l inputs:l grad_outputs:m retain_graph:b allow_unused:b |create_graph:b", args,
            nargs, kwnames, &p) < 0)
        return NULL;
    PyObject *result = grad_run(&p);
    glue_args_done(&p);
    return result;
}

/* ---------------------------------------------------------------------------------------
 * Grad mode (a per-thread flag: no lock)
 */
static PyObject *py_is_grad_enabled(PyObject *module, PyObject *unused) {
    return PyBool_FromLong(ca_is_grad_enabled());
}

static PyObject *py_set_grad_enabled(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames) {
    glue_args p;
    if (glue_parse("set_grad_enabled", "enabled:b", args, nargs, kwnames, &p) < 0)
        return NULL;
    return PyBool_FromLong(ca_set_grad_enabled(p.a[0].b));
}

/* ---------------------------------------------------------------------------------------
 * Graph breaks and the op observer
 */
static PyObject *py_graph_break(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
    glue_args p;
    if (glue_parse("graph_break", "|reason:o", args, nargs, kwnames, &p) < 0)
        return NULL;
    PyObject *reason = p.a[0].o;
    const char *text = NULL;
    if (reason && reason != Py_None) {
        if (!PyUnicode_Check(reason)) {
            PyErr_Format(PyExc_TypeError,
                         "graph_break(): argument 'reason' (position 1) must be str or None, "
                         "not %.100s",
                         Py_TYPE(reason)->tp_name);
            return NULL;
        }
        if (!(text = PyUnicode_AsUTF8(reason)))
            return NULL;
    }
    ca_status st;
    GLUE_CALL(st = ca_graph_break(text));
    return return_none_or_raise(st);
}

static PyObject *py_forward_graph_id(PyObject *module, PyObject *unused) {
    return PyLong_FromLong(ca_forward_graph_id());
}

/* This thread's observer; the library holds it as the observer's ctx. */
static _Thread_local PyObject *observer_fn;

/* Set while this thread's observer runs: ops it calls itself are not observed, which would
 * recurse without end. */
static _Thread_local bool observer_running;

/* Runs after each op, usually without the GIL. An op cannot fail because
 * its observer did, so the observer's exceptions are reported as unraisable. */
static void observer_trampoline(const char *op, int forward_graph, void *ctx) {
    if (observer_running || !glue_python_alive())
        return;
    observer_running = true;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *res = PyObject_CallFunction((PyObject *)ctx, "si", op, forward_graph);
    if (res)
        Py_DECREF(res);
    else
        PyErr_WriteUnraisable((PyObject *)ctx);
    PyGILState_Release(gil);
    observer_running = false;
}

static PyObject *py_set_op_observer(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames) {
    glue_args p;
    if (glue_parse("set_op_observer", "fn:o", args, nargs, kwnames, &p) < 0)
        return NULL;
    PyObject *fn = p.a[0].o == Py_None ? NULL : p.a[0].o;
    if (fn && !PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError,
                     "set_op_observer(): argument 'fn' (position 1) must be callable or None, "
                     "not %.100s",
                     Py_TYPE(fn)->tp_name);
        return NULL;
    }
    /* Per thread and never called concurrently with this thread's ops: no lock. */
    ca_set_op_observer(fn ? observer_trampoline : NULL, fn);
    Py_XINCREF(fn);
    Py_XSETREF(observer_fn, fn);
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------------------------
 * Compiled autograd
 */
static PyObject *py_compiled_autograd_enable(PyObject *module, PyObject *const *args,
                                             Py_ssize_t nargs, PyObject *kwnames) {
    glue_args p;
    if (glue_parse("compiled_autograd_enable", "dynamic:b cache_size_limit:i off:b", args, nargs,
                   kwnames, &p) < 0)
        return NULL;
    if (p.a[1].i < 0 || p.a[1].i > INT_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "compiled_autograd_enable(): cache_size_limit must be 0 (the default, 8) "
                     "or a positive int, not %lld",
                     (long long)p.a[1].i);
        return NULL;
    }
    ca_compiled_options options = {
        .dynamic = p.a[0].b, .cache_size_limit = (int)p.a[1].i, .off = p.a[2].b};
    ca_status st;
    GLUE_CALL(st = ca_compiled_autograd_enable(&options));
    return return_none_or_raise(st);
}

static PyObject *py_compiled_autograd_disable(PyObject *module, PyObject *unused) {
    ca_status st;
    GLUE_CALL(st = ca_compiled_autograd_disable());
    return return_none_or_raise(st);
}

/* Compiled autograd's state is behind its lock, which a thread compiling a backward holds
 * while it traces a custom Function's Python backward (taking the GIL): so these calls
 * wait for it without the GIL (GLUE_CALL), never holding it. */
static PyObject *py_compiled_autograd_enabled(PyObject *module, PyObject *unused) {
    bool on;
    GLUE_CALL(on = ca_compiled_autograd_enabled());
    return PyBool_FromLong(on);
}

static PyObject *py_compiled_autograd_depth(PyObject *module, PyObject *unused) {
    int depth;
    GLUE_CALL(depth = ca_compiled_autograd_depth());
    return PyLong_FromLong(depth);
}

static PyObject *py_compiled_autograd_reset(PyObject *module, PyObject *unused) {
    GLUE_CALL(ca_compiled_autograd_reset());
    Py_RETURN_NONE;
}

static int dict_set_int(PyObject *dict, const char *key, int64_t value) {
    PyObject *v = PyLong_FromLongLong(value);
    int rc = v ? PyDict_SetItemString(dict, key, v) : -1;
    Py_XDECREF(v);
    return rc;
}

static PyObject *py_compiled_autograd_counters(PyObject *module, PyObject *unused) {
    ca_compiled_counters c;
    GLUE_CALL(ca_compiled_autograd_counters(&c));
    PyObject *d = PyDict_New();
    if (!d || dict_set_int(d, "captures", c.captures) < 0 ||
        dict_set_int(d, "cache_hits", c.cache_hits) < 0 ||
        dict_set_int(d, "cache_misses", c.cache_misses) < 0 ||
        dict_set_int(d, "graphs", c.graphs) < 0 ||
        dict_set_int(d, "fused_kernels", c.fused_kernels) < 0 ||
        dict_set_int(d, "eager_fallbacks", c.eager_fallbacks) < 0 ||
        dict_set_int(d, "custom_traced", c.custom_traced) < 0 ||
        dict_set_int(d, "custom_callouts", c.custom_callouts) < 0 ||
        dict_set_int(d, "side_by_side_runs", c.side_by_side_runs) < 0)
        Py_CLEAR(d);
    return d;
}

static PyObject *py_compiled_autograd_compile_seconds(PyObject *module, PyObject *unused) {
    ca_compiled_counters c;
    GLUE_CALL(ca_compiled_autograd_counters(&c));
    return PyFloat_FromDouble((double)c.compile_ns * 1e-9);
}

static PyObject *py_compiled_autograd_set_profiling(PyObject *module, PyObject *const *args,
                                                    Py_ssize_t nargs, PyObject *kwnames) {
    glue_args p;
    if (glue_parse("compiled_autograd_set_profiling", "on:b", args, nargs, kwnames, &p) < 0)
        return NULL;
    GLUE_CALL(ca_compiled_autograd_set_profiling(p.a[0].b));
    Py_RETURN_NONE;
}

/* compiled_autograd_last_profile() -> (work_seconds, span_seconds, steps, top), top a list
 * of (node, op, seconds), the costliest steps first */
static PyObject *py_compiled_autograd_last_profile(PyObject *module, PyObject *unused) {
    ca_compiled_profile prof;
    ca_status st;
    GLUE_CALL(st = ca_compiled_autograd_last_profile(&prof));
    if (st)
        return glue_raise(st);
    PyObject *top = PyList_New(prof.n_top);
    for (int i = 0; top && i < prof.n_top; i++) {
        PyObject *item =
            Py_BuildValue("(ssd)", prof.top[i].node, prof.top[i].op, (double)prof.top[i].ns * 1e-9);
        if (!item)
            Py_CLEAR(top);
        else
            PyList_SET_ITEM(top, i, item);
    }
    if (!top)
        return NULL;
    return Py_BuildValue("(ddiN)", (double)prof.work_ns * 1e-9, (double)prof.span_ns * 1e-9,
                         prof.steps, top);
}

/* graph_write_dot(path): path is a str, bytes or os.PathLike ("-" for stdout). */
static PyObject *py_graph_write_dot(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames) {
    glue_args p;
    if (glue_parse("graph_write_dot", "path:o", args, nargs, kwnames, &p) < 0)
        return NULL;
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(p.a[0].o, &bytes))
        return NULL;
    ca_status st;
    GLUE_CALL(st = ca_graph_write_dot(PyBytes_AS_STRING(bytes)));
    Py_DECREF(bytes);
    return return_none_or_raise(st);
}

/* mark_multi_output_view(t, function, output_nr): t is output output_nr of unbind/split. */
static PyObject *py_mark_multi_output_view(PyObject *module, PyObject *const *args,
                                           Py_ssize_t nargs, PyObject *kwnames) {
    glue_args p;
    if (glue_parse("mark_multi_output_view", "t:t function:o output_nr:i", args, nargs, kwnames,
                   &p) < 0)
        return NULL;
    const char *function = PyUnicode_AsUTF8(p.a[1].o);
    if (!function)
        return NULL;
    return return_none_or_raise(
        ca_tensor_mark_multi_output_view(p.a[0].t, function, (int)p.a[2].i));
}

#define FASTCALL(name, doc)                                                                        \
    { #name, (PyCFunction)(void (*)(void))py_##name, METH_FASTCALL | METH_KEYWORDS, doc }
#define NOARGS(name, doc)                                                                          \
    { #name, py_##name, METH_NOARGS, doc }

PyMethodDef glue_autograd_methods[] = {
    FASTCALL(backward, "backward(root, gradient_or_None, retain_graph, inputs=(), "
                       "create_graph=False) -> None"),
    FASTCALL(grad, "grad(outputs, inputs, grad_outputs_or_None, retain_graph, allow_unused, "
                   "create_graph=False) "
                   "-> list of Tensor or None"),
    FASTCALL(register_hook, "register_hook(t, fn) -> handle; fn(grad) -> None or Tensor"),
    FASTCALL(register_post_accumulate_grad_hook,
             "register_post_accumulate_grad_hook(t, fn) -> handle; fn(tensor) -> None"),
    FASTCALL(remove_hook, "remove_hook(t, handle) -> None"),
    FASTCALL(mark_multi_output_view, "mark_multi_output_view(t, function, output_nr): t is "
                                     "an output of unbind/split (in-place ops refuse it)"),
    NOARGS(is_grad_enabled, "is_grad_enabled() -> bool (this thread)"),
    FASTCALL(set_grad_enabled, "set_grad_enabled(enabled) -> the previous setting"),
    FASTCALL(graph_break, "graph_break(reason=None) -> None: start the next forward graph"),
    NOARGS(forward_graph_id, "forward_graph_id() -> int"),
    FASTCALL(set_op_observer, "set_op_observer(fn_or_None): fn(op_name, forward_graph) after "
                              "every op on this thread"),
    FASTCALL(compiled_autograd_enable, "compiled_autograd_enable(dynamic, cache_size_limit, off)"),
    NOARGS(compiled_autograd_disable, "compiled_autograd_disable() -> None"),
    NOARGS(compiled_autograd_enabled, "compiled_autograd_enabled() -> bool"),
    NOARGS(compiled_autograd_depth, "compiled_autograd_depth() -> int: enables not yet disabled"),
    NOARGS(compiled_autograd_reset, "compiled_autograd_reset(): drop graphs, zero counters"),
    NOARGS(compiled_autograd_counters, "compiled_autograd_counters() -> dict"),
    NOARGS(compiled_autograd_compile_seconds,
           "compiled_autograd_compile_seconds() -> float: time spent compiling on misses"),
    FASTCALL(graph_write_dot, "graph_write_dot(path): latest compiled backward as Graphviz DOT"),
    FASTCALL(compiled_autograd_set_profiling,
             "compiled_autograd_set_profiling(on): time each step of compiled backwards"),
    NOARGS(compiled_autograd_last_profile,
           "compiled_autograd_last_profile() -> (work_seconds, span_seconds, steps, top)"),
    {NULL, NULL, 0, NULL},
};
