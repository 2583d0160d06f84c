/* ops.c - one binding per libcagrad op, generated from the tables below.
 *
 * A row is X(name, spec, call): the Python name, its parameters (glue.h lists the kinds),
 * and the libcagrad call over the parsed arguments a[k]. Each row becomes a thunk that
 * makes the call and a METH_FASTCALL function that parses, calls the thunk with the GIL
 * released, and wraps the result. Adding an op to cagrad.h means
 * adding one row here.
 */
#include "glue.h"

#include <limits.h>

/* Argument k of a row's call, by kind (see the spec). */
#define T(k)  (a[k].t)
#define F(k)  (a[k].f)
#define I(k)  (a[k].i)
#define B(k)  (a[k].b)
#define Y(k)  ((ca_dtype)a[k].i)
#define N(k)  (a[k].ints.n)
#define V(k)  (a[k].ints.v)
#define LN(k) (a[k].list.n)
#define LV(k) (a[k].list.v)
/* An enum code; out-of-range values become -1 so that the library rejects them instead of
 * seeing a truncated, valid-looking value. */
#define E(k) (a[k].i < INT_MIN || a[k].i > INT_MAX ? -1 : (int)a[k].i)

/* conv2d's stride, padding (at the start and at the end) and dilation are (height, width)
 * pairs; cagrad.nn.functional expands a single int. */
static ca_status conv2d_call(ca_tensor *x, ca_tensor *w, ca_tensor *b, const glue_ints *stride,
                             const glue_ints *padding, const glue_ints *padding_end,
                             const glue_ints *dilation, int64_t groups, ca_tensor **out) {
    if (stride->n != 2 || padding->n != 2 || padding_end->n != 2 || dilation->n != 2)
        return ca_error_set(CA_STATUS_INVALID,
                            "conv2d: stride, padding, padding_end and dilation must each have 2 "
                            "values, got %d, %d, %d and %d",
                            stride->n, padding->n, padding_end->n, dilation->n);
    return ca_conv2d_padded(x, w, b, stride->v, padding->v, padding_end->v, dilation->v, groups,
                            out);
}

/* Pooling's kernel, stride, padding and dilation are (height, width) pairs;
 * cagrad.nn.functional expands a single int. */
/* torch.as_strided(x, size, stride, storage_offset): one length for both lists. */
static ca_status as_strided_call(ca_tensor *x, const glue_ints *size, const glue_ints *stride,
                                 int64_t offset, ca_tensor **out) {
    if (size->n != stride->n)
        return ca_error_set(CA_STATUS_SHAPE, "mismatch in length of strides and shape");
    return ca_as_strided(x, size->n, size->v, stride->v, offset, out);
}

static ca_status pool_pairs(const char *op, const glue_ints *const *pairs, int n) {
    for (int k = 0; k < n; k++)
        if (pairs[k]->n != 2)
            return ca_error_set(CA_STATUS_INVALID,
                                "%s: kernel_size, stride, padding and dilation must each have 2 "
                                "values, got %d",
                                op, pairs[k]->n);
    return CA_OK;
}

static ca_status max_pool2d_call(ca_tensor *x, const glue_ints *k, const glue_ints *s,
                                 const glue_ints *p, const glue_ints *d, bool ceil_mode,
                                 ca_tensor **out, ca_tensor **indices) {
    ca_status st = pool_pairs("max_pool2d", (const glue_ints *const[]){k, s, p, d}, 4);
    return st ? st : ca_max_pool2d(x, k->v, s->v, p->v, d->v, ceil_mode, out, indices);
}

static ca_status avg_pool2d_call(ca_tensor *x, const glue_ints *k, const glue_ints *s,
                                 const glue_ints *p, bool ceil_mode, bool count_include_pad,
                                 int64_t divisor_override, ca_tensor **out) {
    ca_status st = pool_pairs("avg_pool2d", (const glue_ints *const[]){k, s, p}, 3);
    return st ? st
              : ca_avg_pool2d(x, k->v, s->v, p->v, ceil_mode, count_include_pad, divisor_override,
                              out);
}

/* The tables are laid out by hand, one op per row: clang-format would reflow them. */
/* clang-format off */
#define BINARY(X, op)  X(op, "a:t b:t", ca_##op(T(0), T(1), out))
#define SCALAR(X, op)  X(op, "a:t s:f", ca_##op(T(0), F(1), out))
#define UNARY(X, op)   X(op, "x:t", ca_##op(T(0), out))
#define CREATE(X, op)  X(op, "dtype:y shape:s", ca_##op(Y(0), N(1), V(1), out))
#define REDUCE(X, op)  X(op, "x:t dims:d keepdim:b", ca_##op(T(0), N(1), V(1), B(2), out))
#define RESHAPE(X, op) X(op, "x:t shape:s", ca_##op(T(0), N(1), V(1), out))

/* Ops that return one tensor. */
#define OPS_TENSOR(X)                                                                           \
    /* creation */                                                                              \
    CREATE(X, empty) CREATE(X, zeros) CREATE(X, ones) CREATE(X, randn) CREATE(X, rand)          \
    X(full, "dtype:y shape:s value:f", ca_full(Y(0), N(1), V(1), F(2), out))                    \
    X(arange, "start:f end:f step:f dtype:y", ca_arange(F(0), F(1), F(2), Y(3), out))           \
    /* pointwise binary, and the scalar forms a OP s (r...: s OP a) */                          \
    BINARY(X, add) BINARY(X, sub) BINARY(X, mul) BINARY(X, div) BINARY(X, pow)                  \
    BINARY(X, maximum) BINARY(X, minimum)                                                       \
    BINARY(X, lt) BINARY(X, le) BINARY(X, gt) BINARY(X, ge) BINARY(X, eq) BINARY(X, ne)         \
    SCALAR(X, add_scalar) SCALAR(X, sub_scalar) SCALAR(X, rsub_scalar)                          \
    SCALAR(X, mul_scalar) SCALAR(X, div_scalar) SCALAR(X, rdiv_scalar)                          \
    SCALAR(X, pow_scalar) SCALAR(X, rpow_scalar)                                                \
    SCALAR(X, maximum_scalar) SCALAR(X, minimum_scalar)                                         \
    SCALAR(X, lt_scalar) SCALAR(X, le_scalar) SCALAR(X, gt_scalar)                              \
    SCALAR(X, ge_scalar) SCALAR(X, eq_scalar) SCALAR(X, ne_scalar)                              \
    X(where, "cond:t a:t b:t", ca_where(T(0), T(1), T(2), out))                                 \
    X(where_scalar, "cond:t a:t s:f", ca_where_scalar(T(0), T(1), F(2), out))                   \
    /* pointwise unary */                                                                       \
    X(clamp, "x:t min:f max:f", ca_clamp(T(0), F(1), F(2), out))                                \
    X(to_dtype, "x:t dtype:y", ca_to_dtype(T(0), Y(1), out))                                    \
    X(clone, "x:t", ca_clone(T(0), out))                                                        \
    /* reductions (dims=() means every dim) */                                                  \
    REDUCE(X, sum) REDUCE(X, mean) REDUCE(X, logsumexp)                                         \
    /* shape */                                                                                 \
    RESHAPE(X, reshape) RESHAPE(X, view) RESHAPE(X, expand)                                     \
    X(permute, "x:t perm:s", ca_permute(T(0), N(1), V(1), out))                                 \
    X(transpose, "x:t d0:i d1:i", ca_transpose(T(0), I(1), I(2), out))                          \
    X(t, "x:t", ca_t(T(0), out))                                                                \
    X(squeeze, "x:t dims:d", ca_squeeze(T(0), N(1), V(1), out))                                 \
    X(unsqueeze, "x:t d:i", ca_unsqueeze(T(0), I(1), out))                                      \
    X(flatten, "x:t s:i e:i", ca_flatten(T(0), I(1), I(2), out))                                \
    X(narrow, "x:t d:i start:i length:i", ca_narrow(T(0), I(1), I(2), I(3), out))               \
    X(slice, "x:t d:i start:i end:i step:i", ca_slice(T(0), I(1), I(2), I(3), I(4), out))       \
    X(select, "x:t d:i i:i", ca_select(T(0), I(1), I(2), out))                                  \
    X(as_strided, "x:t size:s stride:s offset:i",                                               \
      as_strided_call(T(0), &a[1].ints, &a[2].ints, I(3), out))                                 \
    X(cat, "seq:l d:i", ca_cat(LN(0), LV(0), I(1), out))                                        \
    X(stack, "seq:l d:i", ca_stack(LN(0), LV(0), I(1), out))                                    \
    UNARY(X, contiguous)                                                                        \
    X(masked_fill, "x:t mask:t value:f", ca_masked_fill(T(0), T(1), F(2), out))                 \
    /* indexing */                                                                              \
    X(index_select, "x:t d:i idx:t", ca_index_select(T(0), I(1), T(2), out))                    \
    X(embedding, "w:t idx:t", ca_embedding(T(0), T(1), out))                                    \
    X(gather, "x:t d:i idx:t", ca_gather(T(0), I(1), T(2), out))                                \
    X(scatter_add_zeros, "shape:s d:i idx:t src:t",                                             \
      ca_scatter_add_zeros(N(0), V(0), I(1), T(2), T(3), out))                                  \
    X(index_add_zeros, "shape:s d:i idx:t src:t",                                               \
      ca_index_add_zeros(N(0), V(0), I(1), T(2), T(3), out))                                    \
    X(index_fill, "x:t d:i idx:t value:f", ca_index_fill(T(0), I(1), T(2), F(3), out))           \
    X(index_fill_tensor, "x:t d:i idx:t value:t",                                               \
      ca_index_fill_tensor(T(0), I(1), T(2), T(3), out))                                        \
    /* position and order */                                                                    \
    X(cumsum, "x:t dim:i", ca_cumsum(T(0), I(1), out))                                          \
    X(cumprod, "x:t dim:i", ca_cumprod(T(0), I(1), out))                                        \
    /* linear algebra */                                                                        \
    BINARY(X, matmul) BINARY(X, mm) BINARY(X, bmm)                                              \
    X(linear, "x:t w:t b:T", ca_linear(T(0), T(1), T(2), out))                                  \
    X(conv2d, "x:t w:t b:T stride:s padding:s padding_end:s dilation:s groups:i",               \
      conv2d_call(T(0), T(1), T(2), &a[3].ints, &a[4].ints, &a[5].ints, &a[6].ints, I(7), out)) \
    /* neural-network ops */                                                                    \
    X(adaptive_avg_pool2d, "x:t out_h:i out_w:i",                                              \
      ca_adaptive_avg_pool2d(T(0), I(1), I(2), out))                                            \
    X(avg_pool2d, "x:t kernel:s stride:s padding:s ceil_mode:b count_include_pad:b divisor:i",  \
      avg_pool2d_call(T(0), &a[1].ints, &a[2].ints, &a[3].ints, B(4), B(5), I(6), out))         \
    X(softmax, "x:t d:i", ca_softmax(T(0), I(1), out))                                          \
    X(log_softmax, "x:t d:i", ca_log_softmax(T(0), I(1), out))                                  \
    X(cross_entropy, "x:t t:t red:i ignore_index:i",                                            \
      ca_cross_entropy(T(0), T(1), (ca_reduction)E(2), I(3), out))                              \
    X(nll_loss, "x:t t:t red:i ignore_index:i",                                                 \
      ca_nll_loss(T(0), T(1), (ca_reduction)E(2), I(3), out))                                   \
    X(mse_loss, "x:t t:t red:i", ca_mse_loss(T(0), T(1), (ca_reduction)E(2), out))              \
    X(layer_norm, "x:t normalized_shape:d w:T b:T eps:f",                                       \
      ca_layer_norm(T(0), N(1), V(1), T(2), T(3), F(4), out))                                   \
    X(dropout, "x:t p:f training:b", ca_dropout(T(0), F(1), B(2), out))                         \
    /* autograd */                                                                              \
    X(detach, "t:t", ca_tensor_detach(T(0), out))

/* Ops that return (values, indices). */
#define OPS_PAIR(X)                                                                             \
    X(max, "x:t dims:d keepdim:b", ca_max(T(0), N(1), V(1), B(2), out, out2))                   \
    X(min, "x:t dims:d keepdim:b", ca_min(T(0), N(1), V(1), B(2), out, out2))                   \
    X(max_pool2d, "x:t kernel:s stride:s padding:s dilation:s ceil_mode:b",                    \
      max_pool2d_call(T(0), &a[1].ints, &a[2].ints, &a[3].ints, &a[4].ints, B(5), out, out2))   \
    X(sort, "x:t dim:i descending:b stable:b", ca_sort(T(0), I(1), B(2), B(3), out, out2))       \
    X(topk, "x:t k:i dim:i largest:b sorted:b",                                                 \
      ca_topk(T(0), I(1), I(2), B(3), B(4), out, out2))

/* Ops that return three tensors: batch_norm's (out, batch mean, batch biased variance). */
#define OPS_TRIPLE(X)                                                                           \
    X(batch_norm, "x:t w:T b:T eps:f", ca_batch_norm(T(0), T(1), T(2), F(3), out, out2, out3))

/* Ops that return None: in-place ops and autograd flags. */
#define OPS_NONE(X)                                                                             \
    X(add_, "self:t other:t alpha:f", ca_add_(T(0), T(1), F(2)))                                \
    X(mul_, "self:t other:t", ca_mul_(T(0), T(1)))                                              \
    X(mul_scalar_, "self:t s:f", ca_mul_scalar_(T(0), F(1)))                                    \
    X(zero_, "self:t", ca_zero_(T(0)))                                                          \
    X(fill_, "self:t v:f", ca_fill_(T(0), F(1)))                                                \
    X(copy_, "self:t src:t", ca_copy_(T(0), T(1)))                                              \
    X(retain_grad, "t:t", ca_tensor_retain_grad(T(0)))                                       \
    X(detach_, "t:t", ca_tensor_detach_(T(0)))
/* clang-format on */

/* ---------------------------------------------------------------------------------------
 * Runners: parse, call without the GIL, convert the result. The thunks only make the call.
 */
typedef ca_status (*tensor_thunk)(const glue_arg *a, ca_tensor **out);
typedef ca_status (*pair_thunk)(const glue_arg *a, ca_tensor **out, ca_tensor **out2);
typedef ca_status (*triple_thunk)(const glue_arg *a, ca_tensor **out, ca_tensor **out2,
                                  ca_tensor **out3);
typedef ca_status (*none_thunk)(const glue_arg *a);

/* The result is made before glue_args_done, whose decrefs may run Python code (a __del__)
 * that calls cagrad again and replaces this thread's ca_last_error(). */
static PyObject *run_tensor(const char *name, const char *spec, tensor_thunk call,
                            PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    glue_args p;
    if (glue_parse(name, spec, args, nargs, kwnames, &p) < 0)
        return NULL;
    ca_tensor *out = NULL;
    ca_status st;
    GLUE_CALL(st = call(p.a, &out));
    PyObject *result = st ? glue_raise(st) : glue_wrap(out);
    glue_args_done(&p);
    return result;
}

static PyObject *wrap_pair(ca_tensor *first, ca_tensor *second) {
    PyObject *a = glue_wrap(first);
    if (!a) {
        glue_release(second);
        return NULL;
    }
    PyObject *b = glue_wrap(second);
    PyObject *pair = b ? PyTuple_Pack(2, a, b) : NULL;
    Py_DECREF(a);
    Py_XDECREF(b);
    return pair;
}

static PyObject *run_pair(const char *name, const char *spec, pair_thunk call,
                          PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    glue_args p;
    if (glue_parse(name, spec, args, nargs, kwnames, &p) < 0)
        return NULL;
    ca_tensor *out = NULL, *out2 = NULL;
    ca_status st;
    GLUE_CALL(st = call(p.a, &out, &out2));
    PyObject *result = st ? glue_raise(st) : wrap_pair(out, out2);
    glue_args_done(&p);
    return result;
}

/* A tuple of the three results; each is released if wrapping an earlier one fails. */
static PyObject *wrap_triple(ca_tensor *first, ca_tensor *second, ca_tensor *third) {
    PyObject *a = glue_wrap(first);
    if (!a) {
        glue_release(second);
        glue_release(third);
        return NULL;
    }
    PyObject *rest = wrap_pair(second, third);
    PyObject *triple =
        rest ? PyTuple_Pack(3, a, PyTuple_GET_ITEM(rest, 0), PyTuple_GET_ITEM(rest, 1)) : NULL;
    Py_DECREF(a);
    Py_XDECREF(rest);
    return triple;
}

static PyObject *run_triple(const char *name, const char *spec, triple_thunk call,
                            PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    glue_args p;
    if (glue_parse(name, spec, args, nargs, kwnames, &p) < 0)
        return NULL;
    ca_tensor *out = NULL, *out2 = NULL, *out3 = NULL;
    ca_status st;
    GLUE_CALL(st = call(p.a, &out, &out2, &out3));
    PyObject *result = st ? glue_raise(st) : wrap_triple(out, out2, out3);
    glue_args_done(&p);
    return result;
}

static PyObject *run_none(const char *name, const char *spec, none_thunk call,
                          PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    glue_args p;
    if (glue_parse(name, spec, args, nargs, kwnames, &p) < 0)
        return NULL;
    ca_status st;
    GLUE_CALL(st = call(p.a));
    PyObject *result = st ? glue_raise(st) : Py_NewRef(Py_None);
    glue_args_done(&p);
    return result;
}

/* ---------------------------------------------------------------------------------------
 * The generated bindings
 */
#define BINDING_SIGNATURE(name)                                                                    \
    static PyObject *py_##name(PyObject *module, PyObject *const *args, Py_ssize_t nargs,          \
                               PyObject *kwnames)

#define DEFINE_TENSOR(name, spec, call)                                                            \
    static ca_status thunk_##name(const glue_arg *a, ca_tensor **out) {                            \
        return call;                                                                               \
    }                                                                                              \
    BINDING_SIGNATURE(name) {                                                                      \
        return run_tensor(#name, spec, thunk_##name, args, nargs, kwnames);                        \
    }

#define DEFINE_PAIR(name, spec, call)                                                              \
    static ca_status thunk_##name(const glue_arg *a, ca_tensor **out, ca_tensor **out2) {          \
        return call;                                                                               \
    }                                                                                              \
    BINDING_SIGNATURE(name) {                                                                      \
        return run_pair(#name, spec, thunk_##name, args, nargs, kwnames);                          \
    }

#define DEFINE_TRIPLE(name, spec, call)                                                            \
    static ca_status thunk_##name(const glue_arg *a, ca_tensor **out, ca_tensor **out2,            \
                                  ca_tensor **out3) {                                              \
        return call;                                                                               \
    }                                                                                              \
    BINDING_SIGNATURE(name) {                                                                      \
        return run_triple(#name, spec, thunk_##name, args, nargs, kwnames);                        \
    }

#define DEFINE_NONE(name, spec, call)                                                              \
    static ca_status thunk_##name(const glue_arg *a) {                                             \
        return call;                                                                               \
    }                                                                                              \
    BINDING_SIGNATURE(name) {                                                                      \
        return run_none(#name, spec, thunk_##name, args, nargs, kwnames);                          \
    }

/* clang-format off */
OPS_TENSOR(DEFINE_TENSOR)
OPS_PAIR(DEFINE_PAIR)
OPS_TRIPLE(DEFINE_TRIPLE)
OPS_NONE(DEFINE_NONE)
/* clang-format on */

#define METHOD(name, spec, call, result)                                                           \
    {#name, (PyCFunction)(void (*)(void))py_##name, METH_FASTCALL | METH_KEYWORDS,                 \
     #name "(" spec ") -> " result},
#define METHOD_TENSOR(name, spec, call) METHOD(name, spec, call, "Tensor")
#define METHOD_PAIR(name, spec, call)   METHOD(name, spec, call, "(values, indices)")
#define METHOD_TRIPLE(name, spec, call) METHOD(name, spec, call, "(out, mean, var)")
#define METHOD_NONE(name, spec, call)   METHOD(name, spec, call, "None")

/* clang-format off */
PyMethodDef glue_ops_methods[] = {
    OPS_TENSOR(METHOD_TENSOR)
    OPS_PAIR(METHOD_PAIR)
    OPS_TRIPLE(METHOD_TRIPLE)
    OPS_NONE(METHOD_NONE)
    {NULL, NULL, 0, NULL},
};
/* clang-format on */
