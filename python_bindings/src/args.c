/* args.c - converts the arguments of a METH_FASTCALL | METH_KEYWORDS call per a spec
 * string ("x:t dims:d keepdim:b"; glue.h lists the kinds).
 *
 * Every binding goes through here, so every one accepts keywords by the brief's parameter
 * names and reports a wrong argument the same way:
 *     sum(): argument 'dims' (position 2) must be an int or a sequence of ints, not float
 */
#include "glue.h"

#include <limits.h>
#include <string.h>

typedef struct {
    char name[24]; /* NUL-terminated: PyErr_Format has no "%.*s" */
    char kind;
    bool optional;
} param;

/* Where a conversion happens, for messages. */
typedef struct {
    const char *fname;
    const param *p;
    int pos; /* 1-based */
} arg_site;

/* Split a spec into params; returns the count or -1 (a malformed spec is a bug here). */
static int spec_split(const char *spec, param *ps) {
    int n = 0;
    bool optional = false;
    for (const char *s = spec; *s;) {
        if (*s == ' ') {
            s++;
            continue;
        }
        if (*s == '|') {
            optional = true;
            s++;
            continue;
        }
        const char *colon = strchr(s, ':');
        size_t len = colon ? (size_t)(colon - s) : 0;
        if (!colon || !colon[1] || n == GLUE_MAX_ARGS || len >= sizeof ps[n].name)
            return -1;
        ps[n] = (param){.kind = colon[1], .optional = optional};
        memcpy(ps[n++].name, s, len);
        s = colon + 2;
    }
    return n;
}

static const char *kind_text(char kind) {
    switch (kind) {
    case 't': return "a Tensor";
    case 'T': return "a Tensor or None";
    case 'f': return "a number";
    case 'i': return "an int";
    case 'h': return "an int (a hook handle)";
    case 'b': return "a bool";
    case 'y': return "an int dtype code";
    case 's': return "a sequence of ints";
    case 'd': return "an int or a sequence of ints";
    case 'l': return "a sequence of Tensors";
    case 'm': return "None or a sequence of Tensors and Nones";
    default: return "something else";
    }
}

static int arg_type_error(const arg_site *at, PyObject *o) {
    PyErr_Format(PyExc_TypeError, "%s(): argument '%s' (position %d) must be %s, not %.100s",
                 at->fname, at->p->name, at->pos, kind_text(at->p->kind), Py_TYPE(o)->tp_name);
    return -1;
}

static int element_type_error(const arg_site *at, Py_ssize_t i, PyObject *item) {
    PyErr_Format(
        PyExc_TypeError, "%s(): argument '%s' (position %d) must be %s, but element %zd is %.100s",
        at->fname, at->p->name, at->pos, kind_text(at->p->kind), i, Py_TYPE(item)->tp_name);
    return -1;
}

/* The scalar converters return 0, or -1 with no exception set for "wrong kind" (the
 * caller words the TypeError) or with one set for a right kind but a bad value
 * (OverflowError). A Tensor is never taken as a number: that would read its value, a
 * hidden graph break the Python layer must make explicitly. */
static int wrong_kind(void) {
    if (PyErr_ExceptionMatches(PyExc_TypeError))
        PyErr_Clear();
    return -1;
}

static int conv_int(PyObject *o, int64_t *out) {
    if (glue_tensor_check(o))
        return -1;
    PyObject *index = PyNumber_Index(o);
    if (!index)
        return wrong_kind();
    long long v = PyLong_AsLongLong(index);
    Py_DECREF(index);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

static int conv_handle(PyObject *o, uint64_t *out) {
    if (glue_tensor_check(o))
        return -1;
    PyObject *index = PyNumber_Index(o);
    if (!index)
        return wrong_kind();
    unsigned long long v = PyLong_AsUnsignedLongLong(index);
    Py_DECREF(index);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

static int conv_float(PyObject *o, double *out) {
    if (glue_tensor_check(o))
        return -1;
    double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred())
        return wrong_kind();
    *out = v;
    return 0;
}

static int conv_bool(PyObject *o, bool *out) {
    if (glue_tensor_check(o))
        return -1;
    int v = PyObject_IsTrue(o);
    if (v < 0)
        return -1;
    *out = v;
    return 0;
}

static int conv_dtype(const arg_site *at, PyObject *o, int64_t *out) {
    if (conv_int(o, out) < 0)
        return -1;
    if (*out < CA_FLOAT32 || *out > CA_BOOL) {
        PyErr_Format(PyExc_ValueError,
                     "%s(): argument '%s' must be a dtype code, 0 (float32), 1 (float64), 2 "
                     "(int64) or 3 (bool), not %lld",
                     at->fname, at->p->name, (long long)*out);
        return -1;
    }
    return 0;
}

/* A shape or a list of dims. Strings are sequences too, but never of ints. */
static int conv_ints(const arg_site *at, PyObject *o, bool single_ok, glue_ints *out) {
    if (single_ok && !glue_tensor_check(o) && PyIndex_Check(o)) {
        out->n = 1;
        return conv_int(o, &out->v[0]);
    }
    if (glue_tensor_check(o) || !PySequence_Check(o) || PyUnicode_Check(o) || PyBytes_Check(o))
        return -1;
    PyObject *seq = PySequence_Fast(o, "");
    if (!seq)
        return wrong_kind();
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > CA_MAX_DIMS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError,
                     "%s(): argument '%s' has %zd entries; cagrad tensors have at most %d dims",
                     at->fname, at->p->name, n, CA_MAX_DIMS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (conv_int(item, &out->v[i]) < 0) {
            Py_DECREF(seq);
            return PyErr_Occurred() ? -1 : element_type_error(at, i, item);
        }
    }
    out->n = (int)n;
    Py_DECREF(seq);
    return 0;
}

/* A sequence of tensors. The list borrows the tensors from a tuple kept in *keep until
 * glue_args_done: a list argument could be changed by another thread while the call runs
 * without the GIL, a private tuple cannot. */
static int conv_tensors(const arg_site *at, PyObject *o, bool nones_ok, glue_tensors *out,
                        PyObject **keep) {
    if (nones_ok && o == Py_None)
        return 0;
    if (glue_tensor_check(o) || !PySequence_Check(o))
        return -1;
    PyObject *tuple = PySequence_Tuple(o);
    if (!tuple)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    ca_tensor **v = n < INT_MAX ? PyMem_Malloc((size_t)(n ? n : 1) * sizeof(ca_tensor *)) : NULL;
    if (!v) {
        Py_DECREF(tuple);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, i);
        if (nones_ok && item == Py_None) {
            v[i] = NULL;
        } else if (glue_tensor_check(item)) {
            v[i] = glue_tensor_unwrap(item);
        } else {
            PyMem_Free(v);
            Py_DECREF(tuple);
            return element_type_error(at, i, item);
        }
    }
    out->n = (int)n;
    out->v = v;
    *keep = tuple;
    return 0;
}

static int convert(const arg_site *at, PyObject *o, glue_arg *a, PyObject **keep) {
    switch (at->p->kind) {
    case 't':
    case 'T':
        if (at->p->kind == 'T' && o == Py_None) {
            a->t = NULL;
            return 0;
        }
        if (!glue_tensor_check(o))
            return -1;
        a->t = glue_tensor_unwrap(o);
        return 0;
    case 'o': a->o = o; return 0;
    case 'f': return conv_float(o, &a->f);
    case 'i': return conv_int(o, &a->i);
    case 'h': return conv_handle(o, &a->h);
    case 'b': return conv_bool(o, &a->b);
    case 'y': return conv_dtype(at, o, &a->i);
    case 's': return conv_ints(at, o, false, &a->ints);
    case 'd': return conv_ints(at, o, true, &a->ints);
    case 'l': return conv_tensors(at, o, false, &a->list, keep);
    case 'm': return conv_tensors(at, o, true, &a->list, keep);
    default:
        PyErr_Format(PyExc_SystemError, "%s(): bad argument kind '%c' in the binding's spec",
                     at->fname, at->p->kind);
        return -1;
    }
}

static int find_param(const param *ps, int n, PyObject *key) {
    Py_ssize_t len;
    const char *s = PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, &len) : NULL;
    if (!s) {
        PyErr_Clear();
        return -1;
    }
    for (int j = 0; j < n; j++)
        if (strlen(ps[j].name) == (size_t)len && memcmp(ps[j].name, s, (size_t)len) == 0)
            return j;
    return -1;
}

/* Put each argument in its parameter's slot. */
static int place_args(const char *fname, const param *ps, int n, PyObject *const *args,
                      Py_ssize_t nargs, PyObject *kwnames, PyObject **vals) {
    if (nargs > n) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d argument%s (%zd given)", fname, n,
                     n == 1 ? "" : "s", nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        vals[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int j = find_param(ps, n, key);
        if (j < 0) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%S'", fname,
                         key);
            return -1;
        }
        if (vals[j]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname,
                         ps[j].name);
            return -1;
        }
        vals[j] = args[nargs + k];
    }
    for (int j = 0; j < n; j++) {
        if (!vals[j] && !ps[j].optional) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (position %d)",
                         fname, ps[j].name, j + 1);
            return -1;
        }
    }
    return 0;
}

int glue_parse(const char *fname, const char *spec, PyObject *const *args, Py_ssize_t nargs,
               PyObject *kwnames, glue_args *out) {
    memset(out, 0, sizeof *out);
    param ps[GLUE_MAX_ARGS];
    int n = spec_split(spec, ps);
    if (n < 0) {
        PyErr_Format(PyExc_SystemError, "%s(): malformed argument spec \"%s\"", fname, spec);
        return -1;
    }
    PyObject *vals[GLUE_MAX_ARGS] = {NULL};
    if (place_args(fname, ps, n, args, nargs, kwnames, vals) < 0)
        return -1;
    for (int j = 0; j < n; j++) {
        if (!vals[j])
            continue; /* an omitted optional argument stays zero (NULL for kind o) */
        arg_site at = {fname, &ps[j], j + 1};
        if (convert(&at, vals[j], &out->a[j], &out->keep[j]) < 0) {
            if (!PyErr_Occurred())
                arg_type_error(&at, vals[j]);
            glue_args_done(out);
            return -1;
        }
    }
    return 0;
}

void glue_args_done(glue_args *p) {
    for (int j = 0; j < GLUE_MAX_ARGS; j++) {
        if (p->keep[j]) {
            PyMem_Free(p->a[j].list.v);
            Py_CLEAR(p->keep[j]);
        }
    }
}
