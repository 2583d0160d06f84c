/* ops_index.c - the indexing op group: index_select, embedding, gather, and the internal
 * index_add and scatter_add that their derivatives use.
 *
 * The kernels see every tensor as a contiguous [outer, n, inner] block around the indexed
 * dim, so the forwards make their inputs contiguous first. Index values are checked here,
 * before any kernel runs, so every op reports a bad index the same way: the value, its
 * position in the index tensor and the valid range. Negative indices are rejected, as by
 * PyTorch's index_select and gather.
 */
#include "autograd/builder.h"
#include "autograd/internal.h"

#include <string.h>

static ca_attrs attrs_dim(int64_t dim) {
    ca_attrs a;
    memset(&a, 0, sizeof a);
    a.i[0] = dim;
    return a;
}

/* Hand r to *out on success, release it otherwise. */
static ca_status finish(ca_status st, ca_tensor *r, ca_tensor **out) {
    if (st != CA_OK) {
        ca_tensor_release(r);
        return st;
    }
    *out = r;
    return CA_OK;
}

static int64_t dim_size(const ca_meta *m, int dim) {
    return m->ndim > 0 ? m->shape[dim] : 1;
}

static ca_status check_index_dtype(const char *op, const ca_meta *idx) {
    if (idx->dtype == CA_INT64)
        return CA_OK;
    return err_set(CA_STATUS_DTYPE,
                   "%s: the index tensor must be int64, got %s; convert it with "
                   "ca_to_dtype(index, CA_INT64, ...)",
                   op, ca_dtype_name(idx->dtype));
}

/* Every value of the contiguous int64 tensor idx must be in [0, size). */
static ca_status check_index_values(const char *op, const ca_tensor *idx, int64_t size, int dim) {
    const int64_t *v = cai_tensor_ptr(idx);
    ca_meta m;
    cai_tensor_meta(idx, &m);
    int64_t n = cai_meta_numel(&m);
    for (int64_t i = 0; i < n; i++) {
        if (v[i] >= 0 && v[i] < size)
            continue;
        return err_set(CA_STATUS_INDEX,
                       "%s: index %lld at position %lld is out of range for dim %d of size "
                       "%lld; valid indices are in [0, %lld)%s",
                       op, (long long)v[i], (long long)i, dim, (long long)size, (long long)size,
                       v[i] < 0 ? " (negative indices are not supported)" : "");
    }
    return CA_OK;
}

/* Contiguous copy (or new ref) of an index tensor, with its values checked. */
static ca_status index_ready(const char *op, ca_tensor *idx, int64_t size, int dim,
                             ca_tensor **out) {
    CA_CHECK(cai_tensor_contiguous(idx, out));
    ca_status st = check_index_values(op, *out, size, dim);
    if (st != CA_OK) {
        ca_tensor_release(*out);
        *out = NULL;
    }
    return st;
}

/* A full shape given in attrs.shape, as a meta of dtype dt. */
static ca_status full_meta(const char *op, const ca_attrs *a, ca_dtype dt, ca_meta *m) {
    if (a->shape.n < 0 || a->shape.n > CA_MAX_DIMS)
        return err_set(CA_STATUS_SHAPE, "%s: the output shape has %d dims; cagrad supports 0 to %d",
                       op, a->shape.n, CA_MAX_DIMS);
    m->dtype = dt;
    m->ndim = a->shape.n;
    memcpy(m->shape, a->shape.v, sizeof(int64_t) * (size_t)a->shape.n);
    for (int d = 0; d < m->ndim; d++)
        if (m->shape[d] < 0)
            return err_set(CA_STATUS_SHAPE, "%s: size %lld at dim %d of the output is negative", op,
                           (long long)m->shape[d], d);
    return CA_OK;
}

/* ---------------------------------------------------------------------------------------
 * index_select(x, dim, index): out[..., j, ...] = x[..., index[j], ...]
 */
static ca_status index_select_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                                    ca_meta *out) {
    const ca_meta *x = &in[0], *idx = &in[1];
    char b1[META_STR_SIZE];
    CA_CHECK(check_index_dtype("index_select", idx));
    if (idx->ndim > 1)
        return err_set(CA_STATUS_SHAPE,
                       "index_select: the index must be 0-D or 1-D, got shape %s; "
                       "flatten it with ca_reshape",
                       cai_meta_str(idx, b1, sizeof b1));
    CA_CHECK(cai_dim_normalize(&a->i[0], x->ndim, "index_select"));
    int64_t n_index = cai_meta_numel(idx);
    *out = *x;
    if (x->ndim > 0)
        out->shape[a->i[0]] = n_index;
    else if (n_index != 1)
        return err_set(CA_STATUS_SHAPE,
                       "index_select: an index into a 0-dim tensor must have "
                       "exactly 1 value, got %lld",
                       (long long)n_index);
    return CA_OK;
}

static ca_status index_select_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                      const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                      ca_tensor **aux) {
    ca_tensor *x = in[0], *ic = NULL, *xc = NULL, *r = NULL;
    int d = (int)a->i[0];
    int64_t outer, n, inner;
    cai_kern_split_dim(x->ndim, x->shape, d, &outer, &n, &inner);
    ca_status st = index_ready("index_select", in[1], n, d, &ic);
    if (st == CA_OK)
        st = cai_tensor_contiguous(x, &xc);
    if (st == CA_OK)
        st = cai_tensor_new(m, &r);
    if (st == CA_OK && cai_meta_numel(m) > 0)
        st = cai_op_kern_status(cai_kern_index_select(kdt(x->dtype), outer, n, inner,
                                                      cai_tensor_ptr(xc), cai_tensor_ptr(ic),
                                                      ca_tensor_numel(ic), cai_tensor_ptr(r), NULL,
                                                      NULL),
                                "index_select");
    ca_tensor_release(ic);
    ca_tensor_release(xc);
    return finish(st, r, out);
}

static void index_select_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    gin[0] = bx_index_add(b, &n->in_meta[0], (int)n->attrs.i[0], bx_saved(b, n, 0), g);
}

ca_status ca_index_select(ca_tensor *x, int64_t dim, ca_tensor *index, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_index_select");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_index_select");
    CA_ARG_NOT_NULL(index, "ca_index_select");
    ca_attrs a = attrs_dim(dim);
    return cai_op_call2(CA_OP_INDEX_SELECT, x, index, &a, out);
}

/* ---------------------------------------------------------------------------------------
 * embedding(weight [V, D], indices [...]) -> [..., D]: rows of weight
 */
static ca_status embedding_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                                 ca_meta *out) {
    const ca_meta *w = &in[0], *idx = &in[1];
    char b1[META_STR_SIZE];
    CA_CHECK(check_index_dtype("embedding", idx));
    if (w->ndim != 2)
        return err_set(CA_STATUS_SHAPE,
                       "embedding: the weight must be 2-D [num_embeddings, "
                       "embedding_dim], got shape %s",
                       cai_meta_str(w, b1, sizeof b1));
    if (idx->ndim >= CA_MAX_DIMS)
        return err_set(CA_STATUS_SHAPE,
                       "embedding: indices of shape %s leave no room for the "
                       "embedding dim (at most %d dims); reshape them",
                       cai_meta_str(idx, b1, sizeof b1), CA_MAX_DIMS - 1);
    *out = *idx;
    out->dtype = w->dtype;
    out->shape[out->ndim++] = w->shape[1];
    return CA_OK;
}

static ca_status embedding_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                   const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                   ca_tensor **aux) {
    ca_tensor *w = in[0], *ic = NULL, *wc = NULL, *r = NULL;
    ca_status st = index_ready("embedding", in[1], w->shape[0], 0, &ic);
    if (st == CA_OK)
        st = cai_tensor_contiguous(w, &wc);
    if (st == CA_OK)
        st = cai_tensor_new(m, &r);
    if (st == CA_OK && cai_meta_numel(m) > 0)
        st = cai_op_kern_status(cai_kern_index_select(kdt(w->dtype), 1, w->shape[0], w->shape[1],
                                                      cai_tensor_ptr(wc), cai_tensor_ptr(ic),
                                                      ca_tensor_numel(ic), cai_tensor_ptr(r), NULL,
                                                      NULL),
                                "embedding");
    ca_tensor_release(ic);
    ca_tensor_release(wc);
    return finish(st, r, out);
}

/* Scatter-add the gradient's rows into zeros [V, D] at the (flattened) indices. */
static void embedding_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    ca_ints flat = {.n = 1, .v = {-1}};
    ca_ints rows2d = {.n = 2, .v = {-1, n->in_meta[0].shape[1]}};
    ca_bval idx = bx_reshape_ints(b, bx_saved(b, n, 0), &flat);
    gin[0] = bx_index_add(b, &n->in_meta[0], 0, idx, bx_reshape_ints(b, g, &rows2d));
}

ca_status ca_embedding(ca_tensor *weight, ca_tensor *indices, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_embedding");
    *out = NULL;
    CA_ARG_NOT_NULL(weight, "ca_embedding");
    CA_ARG_NOT_NULL(indices, "ca_embedding");
    return cai_op_call2(CA_OP_EMBEDDING, weight, indices, NULL, out);
}

/* ---------------------------------------------------------------------------------------
 * gather(x, dim, index): out[i][j][k] = x[i][index[i][j][k]][k] (for dim 1)
 */
static ca_status gather_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                              ca_meta *out) {
    const ca_meta *x = &in[0], *idx = &in[1];
    char b1[META_STR_SIZE], b2[META_STR_SIZE];
    CA_CHECK(check_index_dtype("gather", idx));
    if (idx->ndim != x->ndim)
        return err_set(CA_STATUS_SHAPE,
                       "gather: the index must have as many dims as the input, "
                       "but index has shape %s and input has shape %s",
                       cai_meta_str(idx, b1, sizeof b1), cai_meta_str(x, b2, sizeof b2));
    CA_CHECK(cai_dim_normalize(&a->i[0], x->ndim, "gather"));
    int dim = (int)a->i[0];
    for (int d = 0; d < x->ndim; d++)
        if (d != dim && idx->shape[d] > x->shape[d])
            return err_set(CA_STATUS_SHAPE,
                           "gather: index shape %s is larger than input shape %s "
                           "at dim %d; index sizes must be <= input sizes on "
                           "every dim except %d",
                           cai_meta_str(idx, b1, sizeof b1), cai_meta_str(x, b2, sizeof b2), d,
                           dim);
    *out = *idx;
    out->dtype = x->dtype;
    return CA_OK;
}

static ca_status gather_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                ca_tensor **aux) {
    ca_tensor *x = in[0], *index = in[1], *ic = NULL, *xv = NULL, *xc = NULL, *r = NULL;
    int d = (int)a->i[0];
    ca_meta xm;
    cai_tensor_meta(x, &xm);
    int64_t outer, n_out, inner, n = dim_size(&xm, d);
    cai_kern_split_dim(index->ndim, index->shape, d, &outer, &n_out, &inner);
    /* the kernel reads x as [outer, n, inner] of the index's outer and inner sizes: view x
     * cut down to the index's sizes on the other dims */
    int64_t vshape[CA_MAX_DIMS];
    memcpy(vshape, index->shape, sizeof vshape);
    if (x->ndim > 0)
        vshape[d] = n;
    ca_status st = index_ready("gather", index, n, d, &ic);
    if (st == CA_OK)
        st = cai_tensor_alias(x, x->ndim, vshape, x->strides, x->offset, &xv);
    if (st == CA_OK)
        st = cai_tensor_contiguous(xv, &xc);
    if (st == CA_OK)
        st = cai_tensor_new(m, &r);
    if (st == CA_OK && cai_meta_numel(m) > 0)
        st = cai_op_kern_status(cai_kern_gather(kdt(x->dtype), outer, n, inner, cai_tensor_ptr(xc),
                                                cai_tensor_ptr(ic), n_out, cai_tensor_ptr(r), NULL,
                                                NULL),
                                "gather");
    ca_tensor_release(ic);
    ca_tensor_release(xv);
    ca_tensor_release(xc);
    return finish(st, r, out);
}

static void gather_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    gin[0] = bx_scatter_add(b, &n->in_meta[0], (int)n->attrs.i[0], bx_saved(b, n, 0), g);
}

ca_status ca_gather(ca_tensor *x, int64_t dim, ca_tensor *index, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_gather");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_gather");
    CA_ARG_NOT_NULL(index, "ca_gather");
    ca_attrs a = attrs_dim(dim);
    return cai_op_call2(CA_OP_GATHER, x, index, &a, out);
}

/* ---------------------------------------------------------------------------------------
 * index_add (internal): zeros(attrs.shape).index_add_(dim, index, src); inputs (index, src)
 */

/* The public form of index_add and scatter_add below: the rows' zeros(shape) base is the
 * shape argument (PyTorch's x.scatter_add(...) is x + this). */
static ca_status into_zeros(int op, const char *name, int ndim, const int64_t *shape, int64_t dim,
                            ca_tensor *index, ca_tensor *src, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, name);
    *out = NULL;
    CA_ARG_NOT_NULL(index, name);
    CA_ARG_NOT_NULL(src, name);
    if (ndim < 0 || ndim > CA_MAX_DIMS || (ndim > 0 && !shape))
        return err_set(CA_STATUS_INVALID, "%s: a shape of %d dims (at most %d, and not NULL)", name,
                       ndim, CA_MAX_DIMS);
    ca_attrs a = attrs_dim(dim);
    a.shape.n = ndim;
    if (ndim > 0)
        memcpy(a.shape.v, shape, sizeof(int64_t) * (size_t)ndim);
    return cai_op_call2(op, index, src, &a, out);
}

ca_status ca_index_add_zeros(int ndim, const int64_t *shape, int64_t dim, ca_tensor *index,
                             ca_tensor *src, ca_tensor **out) {
    return into_zeros(CA_OP_INDEX_ADD, "ca_index_add_zeros", ndim, shape, dim, index, src, out);
}

ca_status ca_scatter_add_zeros(int ndim, const int64_t *shape, int64_t dim, ca_tensor *index,
                               ca_tensor *src, ca_tensor **out) {
    return into_zeros(CA_OP_SCATTER_ADD, "ca_scatter_add_zeros", ndim, shape, dim, index, src, out);
}
static ca_status index_add_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                                 ca_meta *out) {
    const ca_meta *idx = &in[0], *src = &in[1];
    ca_meta full = {.ndim = 0};
    CA_CHECK(full_meta("index_add", a, src->dtype, &full));
    cai_rule_error e;
    if (cai_rule_index_add(&cai_sizes_concrete, kdt(idx->dtype), idx->ndim, idx->shape, src->ndim,
                           src->shape, full.ndim, full.shape, &a->i[0], &e))
        return cai_rule_raise(&e);
    *out = full;
    return CA_OK;
}

static ca_status index_add_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                   const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                   ca_tensor **aux) {
    ca_tensor *src = in[1], *ic = NULL, *sc = NULL, *r = NULL;
    int d = (int)a->i[0];
    int64_t outer, n, inner;
    cai_kern_split_dim(m->ndim, m->shape, d, &outer, &n, &inner);
    ca_status st = index_ready("index_add", in[0], n, d, &ic);
    if (st == CA_OK)
        st = cai_tensor_contiguous(src, &sc);
    if (st == CA_OK)
        st = cai_tensor_full(m, 0.0, &r);
    if (st == CA_OK && ca_tensor_numel(sc) > 0)
        st =
            cai_op_kern_status(cai_kern_index_add(kdt(m->dtype), outer, n, inner, cai_tensor_ptr(r),
                                                  cai_tensor_ptr(ic), ca_tensor_numel(ic),
                                                  cai_tensor_ptr(sc), NULL, NULL),
                               "index_add");
    ca_tensor_release(ic);
    ca_tensor_release(sc);
    return finish(st, r, out);
}

/* index_add and scatter_add: src's gradient is g read back at the index with `pick`
 * (index_select or gather), along the same dim. */
static void pick_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin, int pick) {
    ca_attrs a = attrs_dim(n->attrs.i[0]);
    if (!node_needs_grad(n, 1))
        return;
    ca_bval args[2] = {g, bx_saved(b, n, 0)};
    gin[1] = bx_apply(b, pick, 2, args, &a);
}

static void index_add_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    pick_backward(b, n, g, gin, CA_OP_INDEX_SELECT);
}

/* ---------------------------------------------------------------------------------------
 * scatter_add (internal): zeros(attrs.shape).scatter_add_(dim, index, src); inputs
 * (index, src) with src of the index's shape
 */
static ca_status scatter_add_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                                   ca_meta *out) {
    const ca_meta *idx = &in[0], *src = &in[1];
    ca_meta full = {.ndim = 0};
    CA_CHECK(full_meta("scatter_add", a, src->dtype, &full));
    cai_rule_error e;
    if (cai_rule_scatter_add(&cai_sizes_concrete, kdt(idx->dtype), idx->ndim, idx->shape, src->ndim,
                             src->shape, full.ndim, full.shape, &a->i[0], &e))
        return cai_rule_raise(&e);
    *out = full;
    return CA_OK;
}

/* Scatter into a zero block of the index's outer and inner sizes (what the kernel
 * addresses), then place that block at the corner of the full output when they differ. */
static ca_status scatter_add_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                     const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                     ca_tensor **aux) {
    ca_tensor *index = in[0], *ic = NULL, *sc = NULL, *blk = NULL, *r = NULL;
    int d = (int)a->i[0];
    ca_meta bm = *m;
    for (int k = 0; k < bm.ndim; k++)
        bm.shape[k] = k == d ? m->shape[d] : index->shape[k];
    int64_t outer, n, inner, n_src = m->ndim > 0 ? index->shape[d] : 1;
    cai_kern_split_dim(bm.ndim, bm.shape, d, &outer, &n, &inner);
    bool corner = !cai_meta_same_shape(&bm, m);
    ca_status st = index_ready("scatter_add", index, n, d, &ic);
    if (st == CA_OK)
        st = cai_tensor_contiguous(in[1], &sc);
    if (st == CA_OK)
        st = cai_tensor_full(m, 0.0, &r);
    if (st == CA_OK && corner)
        st = cai_tensor_full(&bm, 0.0, &blk);
    if (st == CA_OK && ca_tensor_numel(sc) > 0)
        st = cai_op_kern_status(
            cai_kern_scatter_add(kdt(m->dtype), outer, n, inner, cai_tensor_ptr(corner ? blk : r),
                                 cai_tensor_ptr(ic), n_src, cai_tensor_ptr(sc), NULL, NULL),
            "scatter_add");
    if (st == CA_OK && corner)
        st = cai_op_copy_into(cai_tensor_ptr(r), r->strides, blk, "scatter_add");
    ca_tensor_release(ic);
    ca_tensor_release(sc);
    ca_tensor_release(blk);
    return finish(st, r, out);
}

static void scatter_add_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    pick_backward(b, n, g, gin, CA_OP_GATHER);
}

/* ---------------------------------------------------------------------------------------
 * index_fill(x, dim, index, value): x with value at the index along dim. Inputs (x, index)
 * with the value in attrs.s[0], or (x, index, value) with a 0-d value tensor.
 */
static ca_status index_fill_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                                  ca_meta *out) {
    const ca_meta *x = &in[0], *idx = &in[1];
    char b1[META_STR_SIZE];
    if (idx->dtype != CA_INT64)
        return err_set(CA_STATUS_INDEX,
                       "index_fill(): Expected dtype int64 for index, got %s; convert it with "
                       "ca_to_dtype(index, CA_INT64, ...)",
                       ca_dtype_name(idx->dtype));
    if (n_in == 3 && in[2].ndim != 0)
        return err_set(CA_STATUS_SHAPE,
                       "index_fill_ only supports a 0-dimensional value tensor, but got tensor "
                       "with %d dimension(s) (shape %s)",
                       in[2].ndim, cai_meta_str(&in[2], b1, sizeof b1));
    cai_rule_error e;
    if (cai_rule_index_fill(&cai_sizes_concrete, kdt(idx->dtype), idx->ndim, x->ndim, &a->i[0], &e))
        return cai_rule_raise(&e);
    *out = *x;
    return CA_OK;
}

static ca_status index_fill_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                    const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                    ca_tensor **aux) {
    ca_tensor *x = in[0], *ic = NULL, *r = NULL;
    int d = (int)a->i[0];
    double value = a->s[0];
    if (n_in == 3)
        value = kern_load(kdt(in[2]->dtype), cai_tensor_ptr(in[2]), 0);
    int64_t outer, n, inner, bad_pos = -1, bad_val = 0;
    cai_kern_split_dim(m->ndim, m->shape, d, &outer, &n, &inner);
    ca_status st = cai_tensor_contiguous(in[1], &ic);
    if (st == CA_OK)
        st = cai_tensor_new(m, &r);
    if (st == CA_OK)
        st = cai_op_copy_into(cai_tensor_ptr(r), r->strides, x, "index_fill");
    if (st == CA_OK &&
        cai_kern_index_fill(kdt(m->dtype), outer, n, inner, cai_tensor_ptr(r), cai_tensor_ptr(ic),
                            ca_tensor_numel(ic), value, &bad_pos, &bad_val) != 0)
        st = bad_pos >= 0 ? err_set(CA_STATUS_INDEX,
                                    "index_fill: index %lld is out of bounds for dimension %d "
                                    "with size %lld",
                                    (long long)bad_val, d, (long long)n)
                          : err_set(CA_STATUS_INTERNAL, "index_fill: the kernel failed");
    ca_tensor_release(ic);
    return finish(st, r, out);
}

/* self: the gradient with the filled positions zeroed; value (a tensor): the sum of the
 * gradient at the filled positions, each counted once however often the index names it. */
static void index_fill_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    int dim = (int)n->attrs.i[0];
    ca_bval idx = bx_saved(b, n, 0);
    if (node_needs_grad(n, 0))
        gin[0] = bx_index_fill(b, g, dim, idx, 0.0);
    if (n->n_in < 3 || !node_needs_grad(n, 2))
        return;
    ca_bval zeros = bx_zeros_like(b, g);
    ca_bval picked = bx_where(b, bx_index_fill(b, zeros, dim, idx, 1.0), g, zeros);
    ca_bval total = bx_sum(b, picked, 0, NULL, false);
    const ca_meta *tm = bx_meta(b, total);
    if (tm && tm->dtype != n->in_meta[2].dtype) {
        ca_attrs a = {.i = {n->in_meta[2].dtype}};
        total = bx_apply(b, CA_OP_TO_DTYPE, 1, &total, &a);
    }
    gin[2] = total;
}

ca_status ca_index_fill(ca_tensor *x, int64_t dim, ca_tensor *index, double value,
                        ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_index_fill");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_index_fill");
    CA_ARG_NOT_NULL(index, "ca_index_fill");
    ca_attrs a = attrs_dim(dim);
    a.s[0] = value;
    return cai_op_call2(CA_OP_INDEX_FILL, x, index, &a, out);
}

ca_status ca_index_fill_tensor(ca_tensor *x, int64_t dim, ca_tensor *index, ca_tensor *value,
                               ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_index_fill_tensor");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_index_fill_tensor");
    CA_ARG_NOT_NULL(index, "ca_index_fill_tensor");
    CA_ARG_NOT_NULL(value, "ca_index_fill_tensor");
    ca_attrs a = attrs_dim(dim);
    ca_tensor *in[3] = {x, index, value};
    return cai_op_call(CA_OP_INDEX_FILL_T, 3, in, &a, out, NULL);
}

/* ---------------------------------------------------------------------------------------
 * The rows
 */
#define INDEX_ROW_COMMON .fusion = CA_FUSE_OPAQUE, .n_in_min = 2, .n_in_max = 2

static const ca_op_def rows[] = {
    {.id = CA_OP_INDEX_SELECT,
     .name = "index_select",
     .node_name = "IndexSelectBackward0",
     INDEX_ROW_COMMON,
     .nondiff_inputs = 1u << 1,
     .n_fields = 2,
     .fields = {{"index", FIELD_TENSOR, FROM_INPUT, 1}, {"dim", FIELD_INT, FROM_ATTR, 0}},
     .shape = index_select_shape,
     .forward = index_select_forward,
     .backward = index_select_backward},
    {.id = CA_OP_EMBEDDING,
     .name = "embedding",
     .node_name = "EmbeddingBackward0",
     INDEX_ROW_COMMON,
     .nondiff_inputs = 1u << 1,
     .n_fields = 1,
     .fields = {{"indices", FIELD_TENSOR, FROM_INPUT, 1}},
     .shape = embedding_shape,
     .forward = embedding_forward,
     .backward = embedding_backward},
    {.id = CA_OP_GATHER,
     .name = "gather",
     .node_name = "GatherBackward0",
     INDEX_ROW_COMMON,
     .nondiff_inputs = 1u << 1,
     .n_fields = 2,
     .fields = {{"index", FIELD_TENSOR, FROM_INPUT, 1}, {"dim", FIELD_INT, FROM_ATTR, 0}},
     .shape = gather_shape,
     .forward = gather_forward,
     .backward = gather_backward},
    {.id = CA_OP_INDEX_ADD,
     .name = "index_add",
     .node_name = "IndexAddBackward0",
     INDEX_ROW_COMMON,
     .nondiff_inputs = 1u << 0,
     .n_fields = 2,
     .fields = {{"index", FIELD_TENSOR, FROM_INPUT, 0}, {"dim", FIELD_INT, FROM_ATTR, 0}},
     .shape = index_add_shape,
     .forward = index_add_forward,
     .backward = index_add_backward},
    {.id = CA_OP_SCATTER_ADD,
     .name = "scatter_add",
     .node_name = "ScatterAddBackward0",
     INDEX_ROW_COMMON,
     .nondiff_inputs = 1u << 0,
     .n_fields = 2,
     .fields = {{"index", FIELD_TENSOR, FROM_INPUT, 0}, {"dim", FIELD_INT, FROM_ATTR, 0}},
     .shape = scatter_add_shape,
     .forward = scatter_add_forward,
     .backward = scatter_add_backward},
    {.id = CA_OP_INDEX_FILL,
     .name = "index_fill",
     .node_name = "IndexFillBackward0",
     INDEX_ROW_COMMON,
     .nondiff_inputs = 1u << 1,
     .n_fields = 2,
     .fields = {{"index", FIELD_TENSOR, FROM_INPUT, 1}, {"dim", FIELD_INT, FROM_ATTR, 0}},
     .shape = index_fill_shape,
     .forward = index_fill_forward,
     .backward = index_fill_backward},
    {.id = CA_OP_INDEX_FILL_T,
     .name = "index_fill",
     .node_name = "IndexFillBackward1",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 3,
     .n_in_max = 3,
     .nondiff_inputs = 1u << 1,
     .n_fields = 2,
     .fields = {{"index", FIELD_TENSOR, FROM_INPUT, 1}, {"dim", FIELD_INT, FROM_ATTR, 0}},
     .shape = index_fill_shape,
     .forward = index_fill_forward,
     .backward = index_fill_backward},
};

const ca_op_group cai_ops_index = {rows, sizeof rows / sizeof rows[0]};
