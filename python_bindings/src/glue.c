/* glue.c - the library lock, error mapping, hook-exception storage and tensor wrapping
 * shared by every binding. See glue.h for the threading rule these helpers keep.
 */
#include "glue.h"

#include <pthread.h>

/* ---------------------------------------------------------------------------------------
 * Library lock
 */
static pthread_mutex_t glue_lock;
static pthread_once_t glue_lock_once = PTHREAD_ONCE_INIT;

/* Recursive: a hook runs Python code on the thread that holds the lock for a backward,
 * and that code calls ops again. */
static void glue_lock_create(void) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&glue_lock, &attr);
    pthread_mutexattr_destroy(&attr);
}

void glue_lock_init(void) {
    pthread_once(&glue_lock_once, glue_lock_create);
}

PyThreadState *glue_enter(void) {
    PyThreadState *saved = PyEval_SaveThread();
    pthread_mutex_lock(&glue_lock);
    return saved;
}

PyThreadState *glue_enter_quick(void) {
    if (pthread_mutex_trylock(&glue_lock) == 0)
        return NULL;
    return glue_enter();
}

void glue_leave(PyThreadState *saved) {
    pthread_mutex_unlock(&glue_lock);
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

void glue_release(ca_tensor *t) {
    if (!t)
        return;
    if (pthread_mutex_trylock(&glue_lock) == 0) {
        ca_tensor_release(t);
        pthread_mutex_unlock(&glue_lock);
        return;
    }
    /* During shutdown the holder may be a daemon thread that Python froze for good when it
     * asked for the GIL: waiting would hang the exit, leaking one tensor does not. */
    if (!glue_python_alive())
        return;
    GLUE_CALL(ca_tensor_release(t));
}

/* DLPack deleters run wherever the consumer drops its tensor: on a Python thread holding
 * the GIL, or on a thread of another runtime that has never seen Python. */
void glue_release_any_thread(ca_tensor *t) {
    if (PyGILState_Check()) {
        glue_release(t);
        return;
    }
    pthread_mutex_lock(&glue_lock);
    ca_tensor_release(t);
    pthread_mutex_unlock(&glue_lock);
}

/* ---------------------------------------------------------------------------------------
 * Errors
 */
PyObject *glue_raise(ca_status status) {
    PyObject *type = PyExc_RuntimeError;
    if (status == CA_STATUS_DIM || status == CA_STATUS_INDEX)
        type = PyExc_IndexError;
    else if (status == CA_STATUS_NOMEM)
        type = PyExc_MemoryError;
    const char *msg = ca_last_error();
    PyErr_SetString(type, msg[0] ? msg : ca_status_name(status));
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

ca_status glue_hook_store(void) {
    PyObject *exc = glue_fetch_exception();
    PyObject *name_owner, *msg_owner;
    PyObject *type_name = exc ? PyType_GetName(Py_TYPE(exc)) : NULL;
    const char *name = text_of(type_name, &name_owner, "an exception");
    const char *msg = text_of(exc, &msg_owner, "<unprintable>");
    ca_status st = ca_error_set(CA_STATUS_HOOK, "hook raised %s: %s", name, msg);
    Py_XDECREF(type_name);
    Py_XDECREF(name_owner);
    Py_XDECREF(msg_owner);
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
    if (!t) {
        PyErr_SetString(PyExc_SystemError, "libcagrad reported success but returned no tensor");
        return NULL;
    }
    PyTypeObject *cls = glue_tensor_class;
    glue_tensor *self = (glue_tensor *)cls->tp_alloc(cls, 0);
    if (!self) {
        glue_release(t);
        return NULL;
    }
    self->t = t;
    return (PyObject *)self;
}
