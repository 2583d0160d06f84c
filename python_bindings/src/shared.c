/* shared.c - _C's shared-memory functions (cagrad.h: ca_tensor_share_memory_ and the
 * descriptor pair), for Tensor.share_memory_() and cagrad.multiprocessing's reducer. */
#include "glue.h"

static PyObject *py_share_memory_(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
    glue_args p;
    if (glue_parse("share_memory_", "t:t", args, nargs, kwnames, &p) < 0)
        return NULL;
    ca_status st;
    GLUE_CALL(st = ca_tensor_share_memory_(p.a[0].t));
    if (st)
        return glue_raise(st);
    Py_RETURN_NONE;
}

static PyObject *py_is_shared(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames) {
    glue_args p;
    if (glue_parse("is_shared", "t:t", args, nargs, kwnames, &p) < 0)
        return NULL;
    return PyBool_FromLong(ca_tensor_is_shared(p.a[0].t));
}

/* shared_fd(t) -> (fd, map_bytes, elem0_offset), or None for memory that is not shared.
 * The descriptor stays the tensor's memory's: dup it to keep it. */
static PyObject *py_shared_fd(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames) {
    glue_args p;
    if (glue_parse("shared_fd", "t:t", args, nargs, kwnames, &p) < 0)
        return NULL;
    size_t bytes = 0, off = 0;
    int fd = ca_tensor_shared_fd(p.a[0].t, &bytes, &off);
    if (fd < 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(inn)", fd, (Py_ssize_t)bytes, (Py_ssize_t)off);
}

/* from_shared_fd(fd, map_bytes, elem0_offset, dtype, shape, strides) -> Tensor over that
 * shared memory (fd is duplicated: the caller still owns it). */
static PyObject *py_from_shared_fd(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
    glue_args p;
    if (glue_parse("from_shared_fd", "fd:i map_bytes:i offset:i dtype:i shape:s strides:s", args,
                   nargs, kwnames, &p) < 0)
        return NULL;
    if (p.a[0].i < 0 || p.a[0].i > INT32_MAX || p.a[1].i < 0 || p.a[2].i < 0 ||
        p.a[4].ints.n != p.a[5].ints.n) {
        PyErr_SetString(PyExc_ValueError, "from_shared_fd: a negative descriptor, size or "
                                          "offset, or strides not one per dim");
        return NULL;
    }
    ca_tensor *t = NULL;
    ca_status st;
    GLUE_CALL(st = ca_tensor_from_shared_fd((int)p.a[0].i, (size_t)p.a[1].i, (size_t)p.a[2].i,
                                            (ca_dtype)p.a[3].i, p.a[4].ints.n, p.a[4].ints.v,
                                            p.a[5].ints.v, &t));
    if (st)
        return glue_raise(st);
    return glue_wrap(t);
}

#define FASTCALL(name, doc)                                                                        \
    { #name, (PyCFunction)(void (*)(void))py_##name, METH_FASTCALL | METH_KEYWORDS, doc }

PyMethodDef glue_shared_methods[] = {
    FASTCALL(share_memory_, "share_memory_(t): move t's memory to memory shared across processes"),
    FASTCALL(is_shared, "is_shared(t) -> whether t's memory is shared"),
    FASTCALL(shared_fd, "shared_fd(t) -> (fd, map_bytes, elem0_offset) or None"),
    FASTCALL(from_shared_fd, "from_shared_fd(fd, map_bytes, offset, dtype, shape, strides)"),
    {NULL, NULL, 0, NULL},
};
