/* interop.c - memory in and out of cagrad without copies: from_buffer (NumPy and any
 * buffer exporter), copy_from_buffer, and DLPack both ways (PyTorch, JAX, NumPy).
 *
 * Imports wrap the foreign memory with ca_tensor_from_blob. Its deleter runs when the
 * storage's last view dies, on whatever thread dropped that view
 * (with or without the GIL): it gives the memory back to its owner, taking the GIL itself
 * when the owner is a Python object. Exports hand out a reference to the tensor that the
 * consumer drops through the DLPack deleter, again on any thread.
 */
#include "dlpack.h"
#include "glue.h"

#include <stdlib.h>
#include <string.h>

/* The layout of foreign memory, checked and ready for ca_tensor_from_blob. */
typedef struct {
    ca_dtype dtype;
    int ndim;
    int64_t shape[CA_MAX_DIMS];
    int64_t strides[CA_MAX_DIMS]; /* elements */
    void *data;
    int64_t numel;
} blob_layout;

static void layout_contiguous_strides(blob_layout *l) {
    int64_t step = 1;
    for (int i = l->ndim - 1; i >= 0; i--) {
        l->strides[i] = step;
        step *= l->shape[i] > 1 ? l->shape[i] : 1;
    }
}

/* Strides of dims of size 1, and every stride of an empty tensor, never address memory,
 * and exporters put anything there (NumPy: whatever the view had, even negative). Give
 * them the contiguous values so that the library sees a tidy layout. Then check what is
 * left: -1 with exc raised for a negative stride. */
static int layout_tidy_strides(blob_layout *l, PyObject *exc, const char *fname, const char *fix) {
    int64_t step = 1;
    for (int i = l->ndim - 1; i >= 0; i--) {
        if (l->shape[i] <= 1 || l->numel == 0)
            l->strides[i] = step;
        if (l->strides[i] < 0) {
            PyErr_Format(exc,
                         "%s(): dim %d has a negative stride (%lld elements), as a reversed "
                         "view has; cagrad needs non-negative strides: %s",
                         fname, i, (long long)l->strides[i], fix);
            return -1;
        }
        step *= l->shape[i] > 1 ? l->shape[i] : 1;
    }
    return 0;
}

/* Set numel; -1 with exc raised if a dim is negative or there are too many dims. */
static int layout_count(blob_layout *l, PyObject *exc, const char *fname) {
    if (l->ndim < 0 || l->ndim > CA_MAX_DIMS) {
        PyErr_Format(exc, "%s(): %d dims; cagrad tensors have at most %d", fname, l->ndim,
                     CA_MAX_DIMS);
        return -1;
    }
    l->numel = 1;
    for (int i = 0; i < l->ndim; i++) {
        if (l->shape[i] < 0) {
            PyErr_Format(exc, "%s(): dim %d has negative size %lld", fname, i,
                         (long long)l->shape[i]);
            return -1;
        }
        l->numel *= l->shape[i];
    }
    return 0;
}

/* An empty tensor's data is never read, but may be NULL or unaligned at the source, and
 * ca_tensor_from_blob wants an aligned pointer. */
static int64_t empty_blob_data;

static int layout_check_data(blob_layout *l, PyObject *exc, const char *fname, const char *fix) {
    if (l->numel == 0)
        l->data = &empty_blob_data;
    size_t itemsize = ca_dtype_size(l->dtype);
    if ((uintptr_t)l->data % itemsize != 0) {
        PyErr_Format(exc, "%s(): the data at %p is not aligned to its %zu-byte elements; %s", fname,
                     l->data, itemsize, fix);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Buffer protocol imports
 */
/* The dtype of a buffer's format: f, d, q or l (64-bit) and ? (bool), with an optional native or
 * little-endian prefix (the struct module's spelling; x86-64 is little-endian). */
static int buffer_dtype(const Py_buffer *view, const char *fname, ca_dtype *out) {
    const char *format = view->format ? view->format : "B";
    const char *f = format;
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    bool one = f[0] && !f[1];
    if (one && *f == 'f' && view->itemsize == 4) {
        *out = CA_FLOAT32;
    } else if (one && *f == 'd' && view->itemsize == 8) {
        *out = CA_FLOAT64;
    } else if (one && (*f == 'q' || *f == 'l') && view->itemsize == 8) {
        *out = CA_INT64;
    } else if (one && *f == '?' && view->itemsize == 1) {
        *out = CA_BOOL;
    } else {
        PyErr_Format(PyExc_ValueError,
                     "%s(): cannot take a buffer of format '%s' (%zd-byte items); cagrad has "
                     "float32 ('f'), float64 ('d'), int64 ('q') and bool ('?'), in native "
                     "byte order: "
                     "convert first, e.g. np.asarray(x, dtype=np.float32)",
                     fname, format, view->itemsize);
        return -1;
    }
    return 0;
}

/* Byte strides to element strides; -1 with ValueError for one cagrad cannot express. */
static int buffer_strides(const Py_buffer *view, const char *fname, blob_layout *l) {
    if (!view->strides) { /* C-contiguous, by the protocol's rules */
        layout_contiguous_strides(l);
        return 0;
    }
    for (int i = 0; i < l->ndim; i++) {
        Py_ssize_t step = view->strides[i];
        if (l->shape[i] > 1 && l->numel > 0 && step % view->itemsize != 0) {
            PyErr_Format(PyExc_ValueError,
                         "%s(): dim %d has a stride of %zd bytes, not a multiple of the "
                         "%zd-byte element (a view into a structured array?); call "
                         "np.ascontiguousarray(x) first",
                         fname, i, step, view->itemsize);
            return -1;
        }
        l->strides[i] = step / view->itemsize;
    }
    return layout_tidy_strides(l, PyExc_ValueError, fname, "call np.ascontiguousarray(x) first");
}

/* Dtype and shape of a buffer; for zero-copy also its strides and data. */
static int buffer_layout(const Py_buffer *view, const char *fname, bool zero_copy, blob_layout *l) {
    if (buffer_dtype(view, fname, &l->dtype) < 0)
        return -1;
    if (view->suboffsets) {
        PyErr_Format(PyExc_ValueError,
                     "%s(): indirect (PIL-style) buffers are not supported; copy it into a "
                     "NumPy array first",
                     fname);
        return -1;
    }
    l->ndim = view->ndim;
    for (int i = 0; i < l->ndim && i < CA_MAX_DIMS; i++)
        l->shape[i] = view->shape[i];
    if (layout_count(l, PyExc_ValueError, fname) < 0)
        return -1;
    l->data = view->buf;
    if (!zero_copy)
        return 0;
    if (buffer_strides(view, fname, l) < 0)
        return -1;
    return layout_check_data(l, PyExc_ValueError, fname,
                             "copy it first: np.array(x), or copy_from_buffer(x)");
}

static int warn_read_only(const char *fname) {
    return PyErr_WarnFormat(PyExc_UserWarning, 1,
                            "%s(): the memory is read-only, but cagrad tensors are writable: "
                            "writing to this tensor is undefined behaviour. Copy it first "
                            "(np.array(x), or copy_from_buffer(x)) if you will write to it",
                            fname);
}

/* Deleter of a from_buffer tensor: release the exporter's buffer (this needs the GIL). */
static void buffer_free(void *ctx) {
    Py_buffer *view = ctx;
    if (!glue_python_alive())
        return; /* at shutdown, leak it rather than touch Python */
    PyGILState_STATE gil = PyGILState_Ensure();
    PyBuffer_Release(view);
    PyGILState_Release(gil);
    PyMem_RawFree(view);
}

/* A tensor over view's memory. Takes view: on success the tensor owns it (released by
 * buffer_free with the storage, even if wrapping fails); on failure it is released here. */
static PyObject *from_buffer_view(Py_buffer *view) {
    blob_layout l;
    ca_tensor *t = NULL;
    ca_status st = CA_OK;
    if (buffer_layout(view, "from_buffer", true, &l) < 0)
        goto fail;
    if (view->readonly && warn_read_only("from_buffer") < 0)
        goto fail;
    GLUE_CALL(st = ca_tensor_from_blob(l.dtype, l.ndim, l.shape, l.strides, l.data, buffer_free,
                                       view, &t));
    if (st) {
        glue_raise(st);
        goto fail;
    }
    return glue_wrap(t);
fail:
    PyBuffer_Release(view);
    PyMem_RawFree(view);
    return NULL;
}

/* from_buffer(obj): a tensor over obj's memory, zero-copy; obj stays exported (alive, and
 * for NumPy unresizable) until the last view of the storage dies. */
static PyObject *py_from_buffer(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
    glue_args p;
    if (glue_parse("from_buffer", "obj:o", args, nargs, kwnames, &p) < 0)
        return NULL;
    Py_buffer *view = PyMem_RawMalloc(sizeof *view);
    if (!view)
        return PyErr_NoMemory();
    if (PyObject_GetBuffer(p.a[0].o, view, PyBUF_RECORDS_RO) < 0) {
        PyMem_RawFree(view);
        return NULL;
    }
    return from_buffer_view(view);
}

/* Copy a buffer, in any layout, into t's contiguous memory. A fresh tensor no one else
 * sees: no lock. A contiguous buffer is one memcpy, done without the GIL. */
static int buffer_copy_into(const Py_buffer *view, ca_tensor *t) {
    void *dst = ca_tensor_data(t);
    if (view->len == 0)
        return 0;
    if (!PyBuffer_IsContiguous(view, 'C'))
        return PyBuffer_ToContiguous(dst, view, view->len, 'C');
    PyThreadState *saved = PyEval_SaveThread();
    memcpy(dst, view->buf, (size_t)view->len);
    PyEval_RestoreThread(saved);
    return 0;
}

static PyObject *copy_view(const Py_buffer *view) {
    blob_layout l;
    if (buffer_layout(view, "copy_from_buffer", false, &l) < 0)
        return NULL;
    ca_tensor *t = NULL;
    ca_status st;
    GLUE_CALL(st = ca_empty(l.dtype, l.ndim, l.shape, &t));
    if (st)
        return glue_raise(st);
    if (buffer_copy_into(view, t) < 0) {
        glue_release(t);
        return NULL;
    }
    return glue_wrap(t);
}

/* copy_from_buffer(obj): a new cagrad-owned tensor with a copy of obj's elements. */
static PyObject *py_copy_from_buffer(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames) {
    glue_args p;
    if (glue_parse("copy_from_buffer", "obj:o", args, nargs, kwnames, &p) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(p.a[0].o, &view, PyBUF_RECORDS_RO) < 0)
        return NULL;
    PyObject *result = copy_view(&view);
    PyBuffer_Release(&view);
    return result;
}

/* ---------------------------------------------------------------------------------------
 * DLPack export: __dlpack__ and __dlpack_device__
 */
/* What an exported capsule owns, in one allocation: the managed struct (either kind, at
 * offset 0, so a deleter can find the rest), the shape and strides it points to, and a
 * reference to the tensor in manager_ctx. */
typedef struct {
    union {
        DLManagedTensor legacy;
        DLManagedTensorVersioned versioned;
    } m;
    int64_t shape[CA_MAX_DIMS];
    int64_t strides[CA_MAX_DIMS];
} dl_export;

/* The consumer may drop the tensor on any thread, with or without the GIL. */
static void dl_export_delete_legacy(DLManagedTensor *m) {
    glue_release(m->manager_ctx);
    free(m);
}

static void dl_export_delete_versioned(DLManagedTensorVersioned *m) {
    glue_release(m->manager_ctx);
    free(m);
}

static const char DL_LEGACY[] = "dltensor";
static const char DL_VERSIONED[] = "dltensor_versioned";
static const char DL_LEGACY_USED[] = "used_dltensor";
static const char DL_VERSIONED_USED[] = "used_dltensor_versioned";

/* A capsule destroyed under its original name was never consumed: free what it holds. */
static void dl_capsule_destructor(PyObject *capsule) {
    if (PyCapsule_IsValid(capsule, DL_LEGACY)) {
        DLManagedTensor *m = PyCapsule_GetPointer(capsule, DL_LEGACY);
        m->deleter(m);
    } else if (PyCapsule_IsValid(capsule, DL_VERSIONED)) {
        DLManagedTensorVersioned *m = PyCapsule_GetPointer(capsule, DL_VERSIONED);
        m->deleter(m);
    }
}

static void dl_fill(DLTensor *dl, dl_export *e, ca_tensor *t) {
    static const DLDataType types[] = {
        [CA_FLOAT32] = {kDLFloat, 32, 1},
        [CA_FLOAT64] = {kDLFloat, 64, 1},
        [CA_INT64] = {kDLInt, 64, 1},
        [CA_BOOL] = {kDLBool, 8, 1},
    };
    int ndim = ca_tensor_ndim(t);
    memcpy(e->shape, ca_tensor_shape(t), sizeof(int64_t) * (size_t)ndim);
    memcpy(e->strides, ca_tensor_strides(t), sizeof(int64_t) * (size_t)ndim);
    *dl = (DLTensor){
        .data = ca_tensor_data(t),
        .device = {kDLCPU, 0},
        .ndim = ndim,
        .dtype = types[ca_tensor_dtype(t)],
        .shape = e->shape,
        .strides = e->strides,
        .byte_offset = 0,
    };
}

/* A capsule owning t (takes the reference, even on failure). */
static PyObject *dl_capsule(ca_tensor *t, bool versioned, bool copied) {
    dl_export *e = calloc(1, sizeof *e);
    if (!e) {
        glue_release(t);
        return PyErr_NoMemory();
    }
    if (versioned) {
        DLManagedTensorVersioned *m = &e->m.versioned;
        m->version = (DLPackVersion){DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
        m->manager_ctx = t;
        m->deleter = dl_export_delete_versioned;
        m->flags = copied ? DLPACK_FLAG_BITMASK_IS_COPIED : 0;
        dl_fill(&m->dl_tensor, e, t);
    } else {
        DLManagedTensor *m = &e->m.legacy;
        m->manager_ctx = t;
        m->deleter = dl_export_delete_legacy;
        dl_fill(&m->dl_tensor, e, t);
    }
    PyObject *capsule =
        PyCapsule_New(e, versioned ? DL_VERSIONED : DL_LEGACY, dl_capsule_destructor);
    if (!capsule) {
        if (versioned)
            dl_export_delete_versioned(&e->m.versioned);
        else
            dl_export_delete_legacy(&e->m.legacy);
    }
    return capsule;
}

/* Parse a (major, minor) or (device_type, device_id) pair of ints. */
static int int_pair(PyObject *o, long *first, long *second) {
    if (!PySequence_Check(o) || PySequence_Size(o) != 2) {
        PyErr_Clear();
        return -1;
    }
    long v[2];
    for (Py_ssize_t i = 0; i < 2; i++) {
        PyObject *item = PySequence_GetItem(o, i);
        v[i] = item ? PyLong_AsLong(item) : -1;
        Py_XDECREF(item);
        if (v[i] == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
    }
    *first = v[0];
    *second = v[1];
    return 0;
}

/* The __dlpack__ keywords: *versioned from max_version, *copy from copy; -1 on a wrong one.
 * stream is ignored, as for every CPU producer. */
static int dl_export_options(PyObject *const *opt, bool *versioned, bool *copy) {
    PyObject *stream = opt[0], *max_version = opt[1], *dl_device = opt[2], *copy_arg = opt[3];
    long a, b;
    if (stream && stream != Py_None && !PyLong_Check(stream)) {
        PyErr_Format(PyExc_TypeError, "__dlpack__(): stream must be an int or None, not %.100s",
                     Py_TYPE(stream)->tp_name);
        return -1;
    }
    *versioned = false;
    if (max_version && max_version != Py_None) {
        if (int_pair(max_version, &a, &b) < 0) {
            PyErr_SetString(PyExc_TypeError,
                            "__dlpack__(): max_version must be a (major, minor) tuple or None");
            return -1;
        }
        *versioned = a >= 1;
    }
    if (dl_device && dl_device != Py_None) {
        if (int_pair(dl_device, &a, &b) < 0) {
            PyErr_SetString(PyExc_TypeError, "__dlpack__(): dl_device must be a (device_type, "
                                             "device_id) tuple or None");
            return -1;
        }
        if (a != kDLCPU || b != 0) {
            PyErr_Format(PyExc_BufferError,
                         "__dlpack__(): cannot export to DLPack device (%ld, %ld): cagrad "
                         "tensors live on the CPU, (%d, 0)",
                         a, b, kDLCPU);
            return -1;
        }
    }
    int c = copy_arg && copy_arg != Py_None ? PyObject_IsTrue(copy_arg) : 0;
    *copy = c > 0;
    return c < 0 ? -1 : 0;
}

/* A contiguous copy of t outside the graph (for copy=True). */
static ca_status dl_copy(ca_tensor *t, ca_tensor **out) {
    ca_status st = ca_empty(ca_tensor_dtype(t), ca_tensor_ndim(t), ca_tensor_shape(t), out);
    if (!st && (st = ca_copy_(*out, t)) != CA_OK) {
        ca_tensor_release(*out);
        *out = NULL;
    }
    return st;
}

PyObject *glue_tensor_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames) {
    glue_args p;
    if (glue_parse("__dlpack__", "|stream:o max_version:o dl_device:o copy:o", args, nargs, kwnames,
                   &p) < 0)
        return NULL;
    PyObject *opt[4] = {p.a[0].o, p.a[1].o, p.a[2].o, p.a[3].o};
    bool versioned, copy;
    if (dl_export_options(opt, &versioned, &copy) < 0)
        return NULL;
    ca_tensor *t = glue_tensor_unwrap(self);
    /* As PyTorch: a consumer would silently lose the autograd graph. */
    if (ca_tensor_requires_grad(t)) {
        PyErr_SetString(PyExc_BufferError, "cannot export a tensor that requires grad through "
                                           "DLPack; export t.detach() instead");
        return NULL;
    }
    ca_tensor *exported = NULL;
    ca_status st = CA_OK;
    if (copy)
        GLUE_CALL(st = dl_copy(t, &exported));
    else
        GLUE_CALL_QUICK(exported = ca_tensor_retain(t));
    if (st)
        return glue_raise(st);
    return dl_capsule(exported, versioned, copy);
}

PyObject *glue_tensor_dlpack_device(PyObject *self, PyObject *unused) {
    return Py_BuildValue("(ii)", kDLCPU, 0);
}

/* ---------------------------------------------------------------------------------------
 * DLPack import: from_dlpack(capsule)
 */
/* ca_tensor_from_blob deleters: hand the memory back to its producer. */
static void dl_import_free_legacy(void *ctx) {
    DLManagedTensor *m = ctx;
    if (m->deleter)
        m->deleter(m);
}

static void dl_import_free_versioned(void *ctx) {
    DLManagedTensorVersioned *m = ctx;
    if (m->deleter)
        m->deleter(m);
}

static int dl_dtype(DLDataType t, ca_dtype *out) {
    if (t.lanes == 1 && t.code == kDLFloat && t.bits == 32)
        *out = CA_FLOAT32;
    else if (t.lanes == 1 && t.code == kDLFloat && t.bits == 64)
        *out = CA_FLOAT64;
    else if (t.lanes == 1 && t.code == kDLInt && t.bits == 64)
        *out = CA_INT64;
    else if (t.lanes == 1 && t.code == kDLBool && t.bits == 8)
        *out = CA_BOOL;
    else
        return -1;
    return 0;
}

/* The layout of a DLTensor; -1 with BufferError for one cagrad cannot wrap. */
static int dl_layout(const DLTensor *dl, blob_layout *l) {
    const char *fname = "from_dlpack";
    if (dl->device.device_type != kDLCPU) {
        PyErr_Format(PyExc_BufferError,
                     "%s(): the tensor is on DLPack device (%d, %d), but cagrad reads CPU "
                     "memory (kDLCPU = %d) only; move it to the CPU first, e.g. x.cpu()",
                     fname, (int)dl->device.device_type, dl->device.device_id, kDLCPU);
        return -1;
    }
    if (dl_dtype(dl->dtype, &l->dtype) < 0) {
        PyErr_Format(PyExc_BufferError,
                     "%s(): DLPack dtype (code %u, bits %u, lanes %u) is not supported; cagrad "
                     "has float32, float64, int64 and bool: convert first, e.g. x.float()",
                     fname, dl->dtype.code, dl->dtype.bits, dl->dtype.lanes);
        return -1;
    }
    l->ndim = dl->ndim;
    for (int i = 0; i < l->ndim && i < CA_MAX_DIMS; i++)
        l->shape[i] = dl->shape[i];
    if (layout_count(l, PyExc_BufferError, fname) < 0)
        return -1;
    if (dl->strides)
        memcpy(l->strides, dl->strides, sizeof(int64_t) * (size_t)l->ndim);
    else
        layout_contiguous_strides(l);
    if (layout_tidy_strides(l, PyExc_BufferError, fname, "make it contiguous first") < 0)
        return -1;
    l->data = (char *)dl->data + dl->byte_offset;
    return layout_check_data(l, PyExc_BufferError, fname, "make a copy first");
}

/* What a capsule of either kind gives the import. */
typedef struct {
    const DLTensor *dl;
    void (*free_fn)(void *ctx);
    void *ctx;
    const char *used_name, *name;
    bool read_only;
} dl_import;

/* Recognise a DLPack capsule; -1 with TypeError/BufferError for anything else. */
static int dl_import_open(PyObject *capsule, dl_import *in) {
    if (PyCapsule_IsValid(capsule, DL_VERSIONED)) {
        DLManagedTensorVersioned *m = PyCapsule_GetPointer(capsule, DL_VERSIONED);
        if (m->version.major != DLPACK_MAJOR_VERSION) {
            PyErr_Format(PyExc_BufferError,
                         "from_dlpack(): the capsule holds DLPack %u.%u, but cagrad reads "
                         "DLPack %d.x; ask the producer for max_version=(%d, %d)",
                         m->version.major, m->version.minor, DLPACK_MAJOR_VERSION,
                         DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
            return -1;
        }
        *in = (dl_import){.dl = &m->dl_tensor,
                          .free_fn = dl_import_free_versioned,
                          .ctx = m,
                          .used_name = DL_VERSIONED_USED,
                          .name = DL_VERSIONED,
                          .read_only = (m->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0};
        return 0;
    }
    if (PyCapsule_IsValid(capsule, DL_LEGACY)) {
        DLManagedTensor *m = PyCapsule_GetPointer(capsule, DL_LEGACY);
        *in = (dl_import){.dl = &m->dl_tensor,
                          .free_fn = dl_import_free_legacy,
                          .ctx = m,
                          .used_name = DL_LEGACY_USED,
                          .name = DL_LEGACY};
        return 0;
    }
    if (PyCapsule_IsValid(capsule, DL_LEGACY_USED) ||
        PyCapsule_IsValid(capsule, DL_VERSIONED_USED)) {
        PyErr_SetString(PyExc_BufferError, "from_dlpack(): this DLPack capsule was already "
                                           "consumed; a capsule can be imported only once");
        return -1;
    }
    PyErr_Format(PyExc_TypeError,
                 "from_dlpack(): argument 'capsule' must be a DLPack capsule (\"dltensor\" or "
                 "\"dltensor_versioned\"), not %.100s; for an object with __dlpack__, pass "
                 "x.__dlpack__()",
                 Py_TYPE(capsule)->tp_name);
    return -1;
}

/* from_dlpack(capsule): consume the capsule and wrap its memory, zero-copy. The capsule is
 * renamed before the GIL is released, so that no other thread can consume it too, and
 * renamed back if wrapping fails (its destructor then frees it as usual). */
static PyObject *py_from_dlpack(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
    glue_args p;
    if (glue_parse("from_dlpack", "capsule:o", args, nargs, kwnames, &p) < 0)
        return NULL;
    PyObject *capsule = p.a[0].o;
    dl_import in;
    blob_layout l;
    if (dl_import_open(capsule, &in) < 0 || dl_layout(in.dl, &l) < 0)
        return NULL;
    if (in.read_only && warn_read_only("from_dlpack") < 0)
        return NULL;
    if (PyCapsule_SetName(capsule, in.used_name) < 0)
        return NULL;
    ca_tensor *t = NULL;
    ca_status st;
    GLUE_CALL(st = ca_tensor_from_blob(l.dtype, l.ndim, l.shape, l.strides, l.data, in.free_fn,
                                       in.ctx, &t));
    if (st) {
        PyCapsule_SetName(capsule, in.name);
        return glue_raise(st);
    }
    return glue_wrap(t);
}

#define FASTCALL(name, doc)                                                                        \
    { #name, (PyCFunction)(void (*)(void))py_##name, METH_FASTCALL | METH_KEYWORDS, doc }

PyMethodDef glue_interop_methods[] = {
    FASTCALL(from_buffer, "from_buffer(obj) -> Tensor over obj's memory (zero-copy)"),
    FASTCALL(copy_from_buffer, "copy_from_buffer(obj) -> Tensor with a copy of obj's elements"),
    FASTCALL(from_dlpack, "from_dlpack(capsule) -> Tensor sharing the producer's memory"),
    {NULL, NULL, 0, NULL},
};
