/* glue.c - releasing the GIL around library calls, error mapping, hook-exception storage
 * and tensor wrapping shared by every binding. See glue.h for the threading rules.
 */
#include "glue.h"

#include <ctype.h>
#include <pthread.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Library calls: no lock (glue.h)
 */
PyThreadState *glue_enter(void) {
    return PyEval_SaveThread();
}

void glue_leave(PyThreadState *saved) {
    if (saved)
        PyEval_RestoreThread(saved);
}

bool glue_python_alive(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsInitialized() && !Py_IsFinalizing();
#else
    return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

/* Any thread, with or without the GIL: refcounts are atomic. A storage whose last view
 * dies here may run a deleter, which takes the GIL itself when it needs Python. */
void glue_release(ca_tensor *t) {
    ca_tensor_release(t);
}

/* ---------------------------------------------------------------------------------------
 * Errors
 */
/* The C core's advice names C calls ("convert with ca_to_dtype"); a Python user needs
 * the Python spelling. Longer names first, so a prefix never shadows a whole name. */
static const char *const glue_c_to_python[][2] = {
    {"ca_backward_ex with options.gradient", "backward(gradient=...)"},
    {"ca_set_grad_enabled(false)", "with cagrad.no_grad()"},
    {"ca_compiled_autograd_disable", "compiled_autograd.enable() exit"},
    {"ca_tensor_detach()", "Tensor.detach()"},
    {"ca_to_dtype", "Tensor.to(dtype)"},
    {"ca_backward", "backward()"},
    {"ca_contiguous", "Tensor.contiguous()"},
    {"ca_reshape", "Tensor.reshape()"},
    {"ca_stack", "cagrad.stack()"},
    {"ca_sum", "Tensor.sum()"},
};

static const char *glue_match(const char *at, size_t *c_len) {
    for (size_t k = 0; k < sizeof glue_c_to_python / sizeof glue_c_to_python[0]; k++) {
        size_t n = strlen(glue_c_to_python[k][0]);
        bool word_end = !(isalnum((unsigned char)at[n]) || at[n] == '_');
        if (strncmp(at, glue_c_to_python[k][0], n) == 0 && word_end) {
            *c_len = n;
            return glue_c_to_python[k][1];
        }
    }
    return NULL;
}

/* Rewrites msg into out: table names get their Python spelling; any other "ca_name"
 * (the C function a message starts with) loses its prefix. */
static void glue_python_message(const char *msg, char *out, size_t size) {
    size_t o = 0;
    for (const char *p = msg; *p && o + 1 < size;) {
        bool word_start = p == msg || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        size_t c_len = 0;
        const char *py = word_start && strncmp(p, "ca_", 3) == 0 ? glue_match(p, &c_len) : NULL;
        if (py) {
            o += (size_t)snprintf(out + o, size - o, "%s", py);
            p += c_len;
        } else if (word_start && strncmp(p, "ca_", 3) == 0) {
            p += 3;
        } else {
            out[o++] = *p++;
        }
        o = o < size ? o : size - 1;
    }
    out[o] = '\0';
}

PyObject *glue_raise(ca_status status) {
    /* a Python callback (a saved-tensor pack hook during an op) failed: its own exception */
    if (status == CA_STATUS_HOOK && glue_hook_reraise())
        return NULL;
    PyObject *type = PyExc_RuntimeError;
    if (status == CA_STATUS_DIM || status == CA_STATUS_INDEX)
        type = PyExc_IndexError;
    else if (status == CA_STATUS_NOMEM)
        type = PyExc_MemoryError;
    else if (status == CA_STATUS_VALUE)
        type = PyExc_ValueError;
    const char *msg = ca_last_error();
    char text[1024];
    glue_python_message(msg[0] ? msg : ca_status_name(status), text, sizeof text);
    PyErr_SetString(type, text);
    return NULL;
}

/* The exception a hook raised on this thread, waiting for its C call to return. */
static _Thread_local PyObject *glue_hook_exc;

/* The pending exception as one object (its traceback attached). */
static PyObject *glue_fetch_exception(void) {
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value && tb)
        PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
#endif
}

/* str(o), or `fallback` if that fails; *owner keeps the text alive. */
static const char *text_of(PyObject *o, PyObject **owner, const char *fallback) {
    *owner = o ? PyObject_Str(o) : NULL;
    const char *text = *owner ? PyUnicode_AsUTF8(*owner) : NULL;
    if (!text)
        PyErr_Clear();
    return text ? text : fallback;
}

/* The library's error for exception exc: "hook raised <Type>: <message>". */
static ca_status hook_status(PyObject *exc) {
    PyObject *name_owner, *msg_owner;
    PyObject *type_name = exc ? PyType_GetName(Py_TYPE(exc)) : NULL;
    const char *name = text_of(type_name, &name_owner, "an exception");
    const char *msg = text_of(exc, &msg_owner, "<unprintable>");
    ca_status st = ca_error_set(CA_STATUS_HOOK, "hook raised %s: %s", name, msg);
    Py_XDECREF(type_name);
    Py_XDECREF(name_owner);
    Py_XDECREF(msg_owner);
    return st;
}

ca_status glue_hook_status_only(void) {
    PyObject *exc = glue_fetch_exception();
    ca_status st = hook_status(exc);
    Py_XDECREF(exc);
    return st;
}

ca_status glue_hook_store(void) {
    PyObject *exc = glue_fetch_exception();
    ca_status st = hook_status(exc);
    /* Keep the first: a later one is a consequence, the first is what the user must see. */
    if (glue_hook_exc)
        Py_XDECREF(exc);
    else
        glue_hook_exc = exc;
    return st;
}

void glue_hook_clear(void) {
    Py_CLEAR(glue_hook_exc);
}

bool glue_hook_reraise(void) {
    PyObject *exc = glue_hook_exc;
    if (!exc)
        return false;
    glue_hook_exc = NULL;
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyErr_Restore(Py_NewRef(Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
#endif
    return true;
}

/* ---------------------------------------------------------------------------------------
 * Wrapping
 */
PyObject *glue_wrap(ca_tensor *t) {
    return glue_wrap_as(glue_tensor_class, t);
}

PyObject *glue_wrap_as(PyTypeObject *cls, ca_tensor *t) {
    if (!t) {
        PyErr_SetString(PyExc_SystemError, "libcagrad reported success but returned no tensor");
        return NULL;
    }
    /* The tensor's live wrapper, if it has one of this class: one object per tensor, as
     * PyTorch (x.contiguous() is x; AccumulateGrad.variable is the leaf). A wrapper being
     * deallocated (no references left) is not handed out again. */
    PyObject *live = ca_tensor_binding(t);
    if (live && Py_REFCNT(live) > 0 && PyObject_TypeCheck(live, cls)) {
        glue_release(t); /* the wrapper holds its own reference */
        return Py_NewRef(live);
    }
    glue_tensor *self = (glue_tensor *)cls->tp_alloc(cls, 0);
    if (!self) {
        glue_release(t);
        return NULL;
    }
    self->t = t;
    ca_tensor_set_binding(t, self);
    return (PyObject *)self;
}
