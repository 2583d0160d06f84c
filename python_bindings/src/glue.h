/* glue.h - what every file of the cagrad._C extension shares.
 *
 * The extension is glue only: it converts Python arguments, wraps ca_tensor pointers in
 * TensorBase objects, maps ca_status to exceptions, and keeps the threading rules below.
 * No numeric or autograd logic lives here; that is the C library's job.
 *
 * Threading, as in PyTorch. libcagrad's refcounts are atomic, a leaf's .grad accumulates
 * under the leaf's lock, and each backward keeps its state in its own walk, so threads may
 * share tensors and run forwards and backwards at once (docs/c-api.md, "Threads"). There
 * is no library lock: GLUE_CALL releases the GIL around a call that may run kernels, so
 * Python threads overlap in C; cheap calls (refcounts, metadata) keep the GIL. A callback
 * from the library into Python (hooks, custom Functions, deleters, the op observer) takes
 * the GIL with PyGILState_Ensure on whatever thread it runs. Concurrent in-place writes to
 * one tensor (or setting .grad while another thread's backward accumulates into it) are
 * the user's race, as in PyTorch.
 *
 * Module state is process-global on purpose: the library it wraps is (one allocator, one
 * compiled-autograd cache), so the module uses single-phase init and
 * static types, and is not meant for subinterpreters.
 */
#ifndef CAGRAD_GLUE_H
#define CAGRAD_GLUE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stdint.h>

#include <cagrad.h>

/* ---------------------------------------------------------------------------------------
 * Library calls
 */
/* Release the GIL (the caller holds it). Returns the saved state. */
PyThreadState *glue_enter(void);
/* Re-take the GIL if `saved` says it was released. */
void glue_leave(PyThreadState *saved);

/* Run `stmt` (a libcagrad call that may run kernels or a backward) with the GIL released. */
#define GLUE_CALL(stmt)                                                                            \
    do {                                                                                           \
        PyThreadState *glue_saved_ = glue_enter();                                                 \
        stmt;                                                                                      \
        glue_leave(glue_saved_);                                                                   \
    } while (0)

/* A cheap call (refcounts, metadata): run with the GIL kept. Only for calls that take no
 * lock a thread waiting for the GIL may hold: compiled autograd's (held while a custom
 * Function's Python backward is traced) is taken through GLUE_CALL. The .grad locks, the
 * data cache's and the generator's are never held across a call into Python. */
#define GLUE_CALL_QUICK(stmt)                                                                      \
    do {                                                                                           \
        stmt;                                                                                      \
    } while (0)

/* True when Python code may run on this thread: the interpreter is up and not shutting
 * down. Callbacks from the library check it before PyGILState_Ensure, which would end a
 * non-main thread during finalization in the middle of a library call. */
bool glue_python_alive(void);

/* ---------------------------------------------------------------------------------------
 * Errors
 */
/* Raise the exception for a failed libcagrad call (IndexError for DIM/INDEX, MemoryError
 * for NOMEM, else RuntimeError) with ca_last_error()'s message. Returns NULL. */
PyObject *glue_raise(ca_status status);

/* Hook exceptions. A hook trampoline that caught a Python exception stores it for this
 * thread (glue_hook_store) and fails the C call with CA_STATUS_HOOK; the binding that made
 * the call then re-raises that same object (glue_hook_reraise). */
ca_status glue_hook_store(void); /* GIL held, an exception set; clears it */
void glue_hook_clear(void);      /* GIL held; drops a stale stored exception */
/* GIL held, an exception set: clears it into the library's error message only, for a
 * callback whose failure the library handles itself (a custom backward being traced). */
ca_status glue_hook_status_only(void);
bool glue_hook_reraise(void); /* GIL held; raises the stored exception, if any */

/* Callbacks into Python (autograd.c): the error a callback returns once Python is shutting
 * down, and a ctx_free that drops the library's reference to a Python object (the ctx),
 * taking the GIL (or leaking it at shutdown). */
ca_status glue_python_gone(void);
void glue_ctx_decref(void *ctx);

/* ---------------------------------------------------------------------------------------
 * TensorBase
 */
typedef struct {
    PyObject ob_base; /* PyObject_HEAD */
    ca_tensor *t;     /* owned; set once at creation, never changed */
    PyObject *grad;   /* the wrapper last handed out for ca_tensor_grad(t), or NULL */
    PyObject *weakrefs;
} glue_tensor;

extern PyTypeObject glue_tensor_type;
/* The class ops return (set by _set_tensor_class; TensorBase until then). Strong ref. */
extern PyTypeObject *glue_tensor_class;

static inline bool glue_tensor_check(PyObject *o) {
    return PyObject_TypeCheck(o, &glue_tensor_type);
}

static inline ca_tensor *glue_tensor_unwrap(PyObject *o) {
    return ((glue_tensor *)o)->t;
}

/* A new instance of glue_tensor_class owning t (steals the reference). On failure t is
 * released and NULL returned with an exception set. */
PyObject *glue_wrap(ca_tensor *t);
/* The same as an instance of cls (a TensorBase subclass): TensorBase.__new__. */
PyObject *glue_wrap_as(PyTypeObject *cls, ca_tensor *t);
/* Release a reference, on any thread, with or without the GIL (DLPack deleters). NULL is a
 * no-op. */
void glue_release(ca_tensor *t);

/* ---------------------------------------------------------------------------------------
 * Argument conversion
 *
 * A spec lists a function's parameters as "name:kind" words in order, optional ones after
 * a "|": "x:t dims:d keepdim:b". Kinds:
 *   t Tensor            T Tensor or None (NULL)     o any object (borrowed; NULL if omitted)
 *   f float             i int (int64)               b bool         h hook handle (uint64)
 *   y dtype code 0..2   s shape: a sequence of ints d dims: an int or a sequence of ints
 *   l sequence of Tensors                           m None, or a sequence of Tensor/None
 * Arguments may be given by position or by name; wrong kinds raise TypeError naming the
 * function and the parameter.
 */
#define GLUE_MAX_ARGS 8

typedef struct {
    int n;
    int64_t v[CA_MAX_DIMS];
} glue_ints;

typedef struct {
    int n;
    ca_tensor **v; /* NULL for kind m given None */
} glue_tensors;

typedef union {
    ca_tensor *t;
    double f;
    int64_t i;
    uint64_t h;
    bool b;
    PyObject *o;
    glue_ints ints;
    glue_tensors list;
} glue_arg;

typedef struct {
    glue_arg a[GLUE_MAX_ARGS];
    PyObject *keep[GLUE_MAX_ARGS]; /* tuples that own the tensors a list borrows */
} glue_args;

/* Parse a METH_FASTCALL | METH_KEYWORDS call. Returns 0, or -1 with TypeError/ValueError
 * set. A successful parse of a spec with a list (kinds l, m) needs glue_args_done, once the
 * call that uses the lists has returned; for other specs it is a no-op. */
int glue_parse(const char *fname, const char *spec, PyObject *const *args, Py_ssize_t nargs,
               PyObject *kwnames, glue_args *out);
void glue_args_done(glue_args *p);

/* ---------------------------------------------------------------------------------------
 * Method tables of the module's files, joined by module.c
 */
extern PyMethodDef glue_ops_methods[];
extern PyMethodDef glue_autograd_methods[];
extern PyMethodDef glue_interop_methods[];
extern PyMethodDef glue_custom_methods[];
extern PyMethodDef glue_node_methods[];
extern PyMethodDef glue_dist_methods[];   /* dist.c */
extern PyMethodDef glue_shared_methods[]; /* shared.c */

/* _C.NodeBase (node.c). 0, or -1 with an exception set. */
int glue_add_node_type(PyObject *module);
/* The Python ctx of a custom Function's node (custom.c), or None; new reference. */
struct ca_custom_function_s;
PyObject *glue_custom_ctx(const struct ca_custom_function_s *fn);
/* The Python ctx of t's grad_fn when only t holds that custom node and only its wrapper
 * holds t (borrowed; for the wrapper's tp_traverse), else NULL. */
PyObject *glue_custom_gc_ctx(const ca_tensor *t);

/* _C.ops: a builtin per op of the library's registry (registry.c). 0, or -1 with an
 * exception set. */
int glue_add_registry(PyObject *module);

/* TensorBase.__dlpack__ and __dlpack_device__ (interop.c). */
PyObject *glue_tensor_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames);
PyObject *glue_tensor_dlpack_device(PyObject *self, PyObject *unused);

#endif /* CAGRAD_GLUE_H */
