/* dist.c - cagrad._C's distributed functions: thin glue over ca_dist_* (include/cagrad.h).
 * cagrad/distributed/__init__.py gives them PyTorch's names and arguments.
 *
 * Collectives run under GLUE_CALL: the GIL is released while MPI works or a wait polls, so
 * other Python threads run meanwhile. An async collective returns a capsule holding its
 * ca_dist_work; the capsule's destructor frees it (waiting first if it still runs).
 */
#include "glue.h"

#define WORK_CAPSULE "cagrad._C.dist_work"

static void work_capsule_free(PyObject *cap) {
    ca_dist_work *w = PyCapsule_GetPointer(cap, WORK_CAPSULE);
    if (w)
        GLUE_CALL(ca_dist_work_free(w));
}

static ca_dist_work *work_of(PyObject *cap) {
    return PyCapsule_GetPointer(cap, WORK_CAPSULE); /* NULL with TypeError/ValueError set */
}

/* None, or an exception for a failed call. */
static PyObject *done(ca_status st) {
    if (st != CA_OK)
        return glue_raise(st);
    Py_RETURN_NONE;
}

/* A started collective: a capsule owning w (async), or None once it finished. */
static PyObject *started(ca_status st, ca_dist_work *w, int async_op) {
    if (st != CA_OK)
        return glue_raise(st);
    if (!async_op)
        Py_RETURN_NONE;
    PyObject *cap = PyCapsule_New(w, WORK_CAPSULE, work_capsule_free);
    if (!cap)
        GLUE_CALL(ca_dist_work_free(w));
    return cap;
}

static int tensor_arg(PyObject *o, void *out) {
    if (!glue_tensor_check(o)) {
        PyErr_Format(PyExc_TypeError, "expected a Tensor, got %.100s", Py_TYPE(o)->tp_name);
        return 0;
    }
    *(ca_tensor **)out = glue_tensor_unwrap(o);
    return 1;
}

static PyObject *py_dist_is_available(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    return PyBool_FromLong(ca_dist_is_available());
}

static PyObject *py_dist_is_initialized(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    return PyBool_FromLong(ca_dist_is_initialized());
}

static PyObject *py_dist_init(PyObject *m, PyObject *args) {
    (void)m;
    double timeout = 0;
    if (!PyArg_ParseTuple(args, "d:dist_init", &timeout))
        return NULL;
    ca_status st;
    GLUE_CALL(st = ca_dist_init(timeout));
    return done(st);
}

static PyObject *py_dist_destroy(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    ca_status st;
    GLUE_CALL(st = ca_dist_destroy());
    return done(st);
}

static PyObject *py_dist_finalize(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    ca_status st;
    GLUE_CALL(st = ca_dist_finalize());
    return done(st);
}

/* (rank, world_size, timeout seconds) */
static PyObject *py_dist_info(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    int rank = 0, size = 0;
    double timeout = 0;
    ca_status st = ca_dist_rank(&rank);
    if (st == CA_OK)
        st = ca_dist_world_size(&size);
    if (st == CA_OK)
        st = ca_dist_get_timeout(&timeout);
    if (st != CA_OK)
        return glue_raise(st);
    return Py_BuildValue("iid", rank, size, timeout);
}

static PyObject *py_dist_set_timeout(PyObject *m, PyObject *args) {
    (void)m;
    double seconds = 0;
    if (!PyArg_ParseTuple(args, "d:dist_set_timeout", &seconds))
        return NULL;
    return done(ca_dist_set_timeout(seconds));
}

static PyObject *py_dist_all_reduce(PyObject *m, PyObject *args) {
    (void)m;
    ca_tensor *t = NULL;
    int op = 0, async_op = 0;
    if (!PyArg_ParseTuple(args, "O&ip:dist_all_reduce", tensor_arg, &t, &op, &async_op))
        return NULL;
    ca_dist_work *w = NULL;
    ca_status st;
    GLUE_CALL(st = ca_dist_all_reduce(t, (ca_dist_op)op, async_op ? &w : NULL));
    return started(st, w, async_op);
}

static PyObject *py_dist_broadcast(PyObject *m, PyObject *args) {
    (void)m;
    ca_tensor *t = NULL;
    int src = 0, async_op = 0;
    if (!PyArg_ParseTuple(args, "O&ip:dist_broadcast", tensor_arg, &t, &src, &async_op))
        return NULL;
    ca_dist_work *w = NULL;
    ca_status st;
    GLUE_CALL(st = ca_dist_broadcast(t, src, async_op ? &w : NULL));
    return started(st, w, async_op);
}

static PyObject *py_dist_all_gather(PyObject *m, PyObject *args) {
    (void)m;
    ca_tensor *in = NULL, *out = NULL;
    int async_op = 0;
    if (!PyArg_ParseTuple(args, "O&O&p:dist_all_gather", tensor_arg, &in, tensor_arg, &out,
                          &async_op))
        return NULL;
    ca_dist_work *w = NULL;
    ca_status st;
    GLUE_CALL(st = ca_dist_all_gather(in, out, async_op ? &w : NULL));
    return started(st, w, async_op);
}

static PyObject *py_dist_barrier(PyObject *m, PyObject *args) {
    (void)m;
    int async_op = 0;
    if (!PyArg_ParseTuple(args, "p:dist_barrier", &async_op))
        return NULL;
    ca_dist_work *w = NULL;
    ca_status st;
    GLUE_CALL(st = ca_dist_barrier(async_op ? &w : NULL));
    return started(st, w, async_op);
}

static PyObject *py_dist_work_wait(PyObject *m, PyObject *cap) {
    (void)m;
    ca_dist_work *w = work_of(cap);
    if (!w)
        return NULL;
    ca_status st;
    GLUE_CALL(st = ca_dist_work_wait(w));
    return done(st);
}

static PyObject *py_dist_work_is_completed(PyObject *m, PyObject *cap) {
    (void)m;
    ca_dist_work *w = work_of(cap);
    if (!w)
        return NULL;
    bool finished = false;
    ca_status st;
    GLUE_CALL(st = ca_dist_work_is_completed(w, &finished)); /* may wait for the dist lock */
    if (st != CA_OK)
        return glue_raise(st);
    return PyBool_FromLong(finished);
}

PyMethodDef glue_dist_methods[] = {
    {"dist_is_available", py_dist_is_available, METH_NOARGS, "dist_is_available() -> bool"},
    {"dist_is_initialized", py_dist_is_initialized, METH_NOARGS, "dist_is_initialized() -> bool"},
    {"dist_init", py_dist_init, METH_VARARGS, "dist_init(timeout_s): join the MPI group"},
    {"dist_destroy", py_dist_destroy, METH_NOARGS, "dist_destroy(): leave the group"},
    {"dist_finalize", py_dist_finalize, METH_NOARGS, "dist_finalize(): MPI_Finalize"},
    {"dist_info", py_dist_info, METH_NOARGS, "dist_info() -> (rank, world_size, timeout_s)"},
    {"dist_set_timeout", py_dist_set_timeout, METH_VARARGS, "dist_set_timeout(seconds)"},
    {"dist_all_reduce", py_dist_all_reduce, METH_VARARGS,
     "dist_all_reduce(t, op, async_op) -> work capsule or None; op: sum avg prod min max"},
    {"dist_broadcast", py_dist_broadcast, METH_VARARGS,
     "dist_broadcast(t, src, async_op) -> work capsule or None"},
    {"dist_all_gather", py_dist_all_gather, METH_VARARGS,
     "dist_all_gather(t, out, async_op) -> work capsule or None; out holds every rank's t"},
    {"dist_barrier", py_dist_barrier, METH_VARARGS, "dist_barrier(async_op) -> work or None"},
    {"dist_work_wait", py_dist_work_wait, METH_O, "dist_work_wait(work)"},
    {"dist_work_is_completed", py_dist_work_is_completed, METH_O,
     "dist_work_is_completed(work) -> bool"},
    {NULL, NULL, 0, NULL},
};
