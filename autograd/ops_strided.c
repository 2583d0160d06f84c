/* ops_strided.c - as_strided: a view of its input's memory with any sizes, strides and
 * storage offset (torch.as_strided), the general view that sliding windows (unfold) and
 * hand-written convolutions are made of.
 *
 * Its gradient, as PyTorch's, works over memory positions: each output element's gradient
 * goes to the position it reads (summing where windows overlap), and each input element
 * takes its position's gradient, split evenly among the input's elements that share the
 * position (an expanded input); gradient at a position no input element has is dropped.
 * The forward works out the positions once (the row's aux, saved), and the derivative
 * rule is an index_add, a weighting and an index_select: ops the engine already
 * differentiates and compiles, so double backward and the compiled graph follow.
 */
#include "autograd/builder.h"
#include "autograd/internal.h"
#include "autograd/ops_shape.h"

#include <stdlib.h>
#include <string.h>

/* attrs: shape = sizes, dims = strides (elements), i[0] = storage offset (absolute) */
static ca_status strided_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                               ca_meta *out) {
    (void)row;
    (void)n_in;
    const ca_ints *size = &a->shape, *stride = &a->dims;
    if (size->n != stride->n)
        return err_set(CA_STATUS_SHAPE,
                       "as_strided: mismatch in length of strides and shape (%d sizes, %d "
                       "strides)",
                       size->n, stride->n);
    for (int d = 0; d < size->n; d++) {
        if (size->v[d] < 0)
            return err_set(CA_STATUS_SHAPE, "as_strided: size %lld at dim %d is negative",
                           (long long)size->v[d], d);
        if (stride->v[d] < 0) {
            char s[96];
            return err_set(CA_STATUS_SHAPE,
                           "as_strided: Negative strides are not supported at the moment, got "
                           "strides: %s",
                           cai_err_shape_str(stride->n, stride->v, s, sizeof s));
        }
    }
    if (a->i[0] < 0)
        return err_set(CA_STATUS_SHAPE, "Tensor: invalid storage offset %lld", (long long)a->i[0]);
    *out = (ca_meta){.dtype = in[0].dtype, .ndim = size->n};
    memcpy(out->shape, size->v, sizeof(int64_t) * (size_t)size->n);
    return CA_OK;
}

/* The last element's position, plus one: the memory a view of this geometry spans. */
static int64_t span_end(int ndim, const int64_t *shape, const int64_t *strides, int64_t off) {
    int64_t end = off;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 0)
            return off;
        end += (shape[d] - 1) * strides[d];
    }
    return end + 1;
}

/* Row-major element k of a geometry: its memory position. */
static int64_t position(int ndim, const int64_t *shape, const int64_t *strides, int64_t off,
                        int64_t k) {
    int64_t p = off;
    for (int d = ndim - 1; d >= 0; d--) {
        p += (k % shape[d]) * strides[d];
        k /= shape[d];
    }
    return p;
}

static int cmp_pos(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* id of position p among the sorted unique positions u[0..n_u) */
static int64_t pos_id(const int64_t *u, int64_t n_u, int64_t p) {
    int64_t lo = 0, hi = n_u;
    while (hi - lo > 1) {
        int64_t mid = (lo + hi) / 2;
        if (u[mid] <= p)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* The maps the derivative rule reads, over the memory positions x's and r's elements
 * touch, numbered 0..U in order: r_id (which position each element of the view r reads),
 * x_id (x's element's position) and weight [U] (1 / the number of x's elements at a
 * position; 0 where none is, so that gradient is dropped, as PyTorch drops it). */
static ca_status strided_maps(const ca_tensor *x, const ca_tensor *r, ca_tensor **aux) {
    int64_t nx = 1, nr = 1;
    for (int d = 0; d < x->ndim; d++)
        nx *= x->shape[d];
    for (int d = 0; d < r->ndim; d++)
        nr *= r->shape[d];
    int64_t *pos = cai_mem_alloc(sizeof(int64_t) * (size_t)(2 * (nx + nr) + 1));
    if (!pos)
        return err_nomem("as_strided's position maps");
    int64_t *u = pos + nx + nr, n_u = 0;
    for (int64_t k = 0; k < nx; k++)
        pos[k] = position(x->ndim, x->shape, x->strides, x->offset, k);
    for (int64_t k = 0; k < nr; k++)
        pos[nx + k] = position(r->ndim, r->shape, r->strides, r->offset, k);
    memcpy(u, pos, sizeof(int64_t) * (size_t)(nx + nr));
    qsort(u, (size_t)(nx + nr), sizeof(int64_t), cmp_pos);
    for (int64_t k = 0; k < nx + nr; k++)
        if (n_u == 0 || u[k] != u[n_u - 1])
            u[n_u++] = u[k];
    ca_meta mr = {.dtype = CA_INT64, .ndim = 1, .shape = {nr}};
    ca_meta mx = {.dtype = CA_INT64, .ndim = 1, .shape = {nx}};
    ca_meta mw = {.dtype = x->dtype, .ndim = 1, .shape = {n_u}};
    ca_status st = cai_tensor_new(&mr, &aux[0]);
    if (st == CA_OK)
        st = cai_tensor_new(&mx, &aux[1]);
    if (st == CA_OK)
        st = cai_tensor_full(&mw, 0.0, &aux[2]);
    if (st == CA_OK) {
        int64_t *r_id = cai_tensor_ptr(aux[0]), *x_id = cai_tensor_ptr(aux[1]);
        double *count = cai_mem_calloc((size_t)(n_u ? n_u : 1), sizeof(double));
        st = count ? CA_OK : err_nomem("as_strided's position counts");
        for (int64_t k = 0; st == CA_OK && k < nx; k++)
            count[x_id[k] = pos_id(u, n_u, pos[k])] += 1;
        for (int64_t k = 0; st == CA_OK && k < nr; k++)
            r_id[k] = pos_id(u, n_u, pos[nx + k]);
        for (int64_t k = 0; st == CA_OK && k < n_u; k++) {
            double w = count[k] > 0 ? 1.0 / count[k] : 0.0;
            if (x->dtype == CA_FLOAT32)
                ((float *)cai_tensor_ptr(aux[2]))[k] = (float)w;
            else
                ((double *)cai_tensor_ptr(aux[2]))[k] = w;
        }
        cai_mem_free(count);
    }
    cai_mem_free(pos);
    if (st != CA_OK)
        for (int k = 0; k < 3; k++) {
            ca_tensor_release(aux[k]);
            aux[k] = NULL;
        }
    return st;
}

static ca_status strided_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                 const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                 ca_tensor **aux) {
    (void)row;
    (void)n_in;
    ca_tensor *x = in[0];
    size_t elt = ca_dtype_size(x->dtype);
    int64_t end = span_end(m->ndim, m->shape, a->dims.v, a->i[0]);
    int64_t have = (int64_t)(x->storage->nbytes / elt);
    if (end > have) {
        char s1[96], s2[96];
        return err_set(CA_STATUS_SHAPE,
                       "setStorage: sizes %s, strides %s, storage offset %lld, and itemsize %zu "
                       "requiring a storage size of %lld are out of bounds for storage of size "
                       "%zu",
                       cai_err_shape_str(m->ndim, m->shape, s1, sizeof s1),
                       cai_err_shape_str(m->ndim, a->dims.v, s2, sizeof s2), (long long)a->i[0],
                       elt, (long long)(end * (int64_t)elt), x->storage->nbytes);
    }
    CA_CHECK(cai_tensor_alias(x, m->ndim, m->shape, a->dims.v, a->i[0], out));
    /* the maps the derivative rule reads, whenever the view may join the graph: now, or
     * later through an in-place op (view_inplace.c replays the view from its step) */
    if (!cai_grad_mode_enabled() || (x->dtype != CA_FLOAT32 && x->dtype != CA_FLOAT64))
        return CA_OK;
    ca_status st = strided_maps(x, *out, aux);
    if (st != CA_OK) {
        ca_tensor_release(*out);
        *out = NULL;
    }
    return st;
}

/* zeros over the touched positions, index_add of the flat gradient at the view's
 * positions, weighted (x's elements that share a position split its gradient), read back
 * at x's elements' positions, in x's shape */
static void strided_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (n->n_saved < 3 || (!n->saved[0].t && !n->saved[0].packed)) {
        cai_bx_fail(b, CA_STATUS_AUTOGRAD,
                    "as_strided: the view was made without its position maps (grad mode was "
                    "off); make it with grad mode on");
        return;
    }
    ca_bval weight = bx_saved(b, n, 2);
    const ca_meta *wm = bx_meta(b, weight);
    if (!wm)
        return;
    ca_ints all = {.n = 1, .v = {-1}};
    ca_bval at_pos = bx_index_add(b, wm, 0, bx_saved(b, n, 0), bx_reshape_ints(b, g, &all));
    ca_bval picked = bx_index_select(b, bx_mul(b, at_pos, weight), 0, bx_saved(b, n, 1));
    gin[0] = bx_reshape(b, picked, &n->in_meta[0]);
}

ca_status ca_as_strided(ca_tensor *x, int ndim, const int64_t *size, const int64_t *stride,
                        int64_t storage_offset, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_as_strided");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_as_strided");
    if (ndim < 0 || ndim > CA_MAX_DIMS || (ndim > 0 && (!size || !stride)))
        return err_set(CA_STATUS_SHAPE,
                       "ca_as_strided: %d dims with sizes %s and strides %s; pass 0 to %d of "
                       "each",
                       ndim, size ? "given" : "NULL", stride ? "given" : "NULL", CA_MAX_DIMS);
    ca_attrs a = attrs_none();
    a.shape.n = a.dims.n = ndim;
    if (ndim > 0) {
        memcpy(a.shape.v, size, sizeof(int64_t) * (size_t)ndim);
        memcpy(a.dims.v, stride, sizeof(int64_t) * (size_t)ndim);
    }
    a.i[0] = storage_offset == -1 ? x->offset : storage_offset;
    return cai_op_call1(CA_OP_AS_STRIDED, x, &a, out);
}

static const ca_op_def rows[] = {
    {.id = CA_OP_AS_STRIDED,
     .name = "as_strided",
     .node_name = "AsStridedBackward0",
     .fusion = CA_FUSE_VIEW,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 4,
     .fields = {{"storage_offset", FIELD_INT, FROM_ATTR, 0},
                {"view_positions", FIELD_TENSOR, FROM_AUX, 0},
                {"input_positions", FIELD_TENSOR, FROM_AUX, 1},
                {"position_weights", FIELD_TENSOR, FROM_AUX, 2}},
     .shape = strided_shape,
     .forward = strided_forward,
     .backward = strided_backward},
};

const ca_op_group cai_ops_strided = {rows, (int)(sizeof rows / sizeof rows[0])};
