/* ops_order.c - ops whose result depends on element positions: tril and triu (keep one side
 * of a diagonal of the last two dims), cumsum and cumprod (running sums and products along
 * a dim).
 *
 * tril and triu save the kept/zeroed pattern of one matrix as a mask (aux output 0, of the
 * last two dims only), so their derivative is a pointwise where(mask, g, 0) that the
 * compiled backward fuses with its neighbours. cumsum's derivative is the running sum of
 * the gradient taken from the end (attrs.i[1] = 1), the same row run backwards, which the
 * compiled graph runs as its CUMSUM op.
 */
#include "autograd/builder.h"
#include "autograd/internal.h"

#include <string.h>

/* Hand r to *out on success, release it otherwise. */
static ca_status finish(ca_status st, ca_tensor *r, ca_tensor **out) {
    if (st != CA_OK) {
        ca_tensor_release(r);
        return st;
    }
    *out = r;
    return CA_OK;
}

/* ---------------------------------------------------------------------------------------
 * tril(x, diagonal) / triu(x, diagonal): attrs.i[0] = diagonal
 */
static bool tri_upper(const ca_op_def *row) {
    return row->id == CA_OP_TRIU;
}

static ca_status tri_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                           ca_meta *out) {
    if (in[0].ndim < 2)
        return err_set(CA_STATUS_SHAPE, "%s: input tensor must have at least 2 dimensions",
                       row->name);
    *out = in[0];
    return CA_OK;
}

/* out = tri(x) over contiguous data, into a new tensor of meta m */
static ca_status tri_apply(const ca_op_def *row, ca_tensor *x, int64_t diag, const ca_meta *m,
                           ca_tensor **out) {
    ca_tensor *xc = NULL, *r = NULL;
    int64_t rows = m->shape[m->ndim - 2], cols = m->shape[m->ndim - 1];
    int64_t numel = cai_meta_numel(m), batch = rows * cols > 0 ? numel / (rows * cols) : 0;
    ca_status st = cai_tensor_contiguous(x, &xc);
    if (st == CA_OK)
        st = cai_tensor_new(m, &r);
    if (st == CA_OK)
        st = cai_op_kern_status(cai_kern_tri(kdt(m->dtype), batch, rows, cols, diag, tri_upper(row),
                                             cai_tensor_ptr(xc), cai_tensor_ptr(r)),
                                row->name);
    ca_tensor_release(xc);
    return finish(st, r, out);
}

/* The result, and the mask [rows, cols] (1 where kept) the derivative reads. */
static ca_status tri_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                             const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                             ca_tensor **aux) {
    ca_meta mm = {.dtype = m->dtype, .ndim = 2};
    mm.shape[0] = m->shape[m->ndim - 2];
    mm.shape[1] = m->shape[m->ndim - 1];
    ca_tensor *ones = NULL;
    CA_CHECK(tri_apply(row, in[0], a->i[0], m, out));
    ca_status st = cai_tensor_full(&mm, 1.0, &ones);
    if (st == CA_OK)
        st = tri_apply(row, ones, a->i[0], &mm, &aux[0]);
    ca_tensor_release(ones);
    if (st != CA_OK) {
        ca_tensor_release(*out);
        *out = NULL;
    }
    return st;
}

/* g where the mask kept x, 0 elsewhere: exact, and pointwise, so it fuses */
static void tri_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    gin[0] = bx_where(b, bx_saved(b, n, 0), g, bx_zeros_like(b, g));
}

ca_status ca_tril(ca_tensor *x, int64_t diagonal, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_tril");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_tril");
    ca_attrs a = {.i = {diagonal}};
    return cai_op_call1(CA_OP_TRIL, x, &a, out);
}

ca_status ca_triu(ca_tensor *x, int64_t diagonal, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_triu");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_triu");
    ca_attrs a = {.i = {diagonal}};
    return cai_op_call1(CA_OP_TRIU, x, &a, out);
}

/* ---------------------------------------------------------------------------------------
 * cumsum(x, dim): attrs.i[0] = dim, i[1] = 1 for the sums taken from the end (internal:
 * the derivative)
 */
static ca_status cumsum_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                              ca_meta *out) {
    CA_CHECK(cai_dim_normalize(&a->i[0], in[0].ndim, "cumsum"));
    a->i[1] = a->i[1] != 0;
    *out = in[0];
    return CA_OK;
}

/* cumsum's and cumprod's forward (the row says which): the running sums or products along
 * dim, of the input made contiguous. */
static ca_status scan_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                              const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                              ca_tensor **aux) {
    ca_tensor *xc = NULL, *r = NULL;
    int64_t outer, n, inner;
    cai_kern_split_dim(m->ndim, m->shape, (int)a->i[0], &outer, &n, &inner);
    ca_status st = cai_tensor_contiguous(in[0], &xc);
    if (st == CA_OK)
        st = cai_tensor_new(m, &r);
    if (st == CA_OK) {
        const void *x = cai_tensor_ptr(xc);
        void *y = cai_tensor_ptr(r);
        int rc = row->id == CA_OP_CUMSUM
                     ? cai_kern_cumsum(kdt(m->dtype), outer, n, inner, x, y, a->i[1] != 0)
                     : cai_kern_cumprod(kdt(m->dtype), outer, n, inner, x, y);
        st = cai_op_kern_status(rc, row->name);
    }
    ca_tensor_release(xc);
    return finish(st, r, out);
}

/* the running sums of g taken from the other end */
static void cumsum_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    ca_attrs a = {.i = {n->attrs.i[0], !n->attrs.i[1]}};
    gin[0] = bx_apply(b, CA_OP_CUMSUM, 1, &g, &a);
}

ca_status ca_cumsum(ca_tensor *x, int64_t dim, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_cumsum");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_cumsum");
    ca_attrs a = {.i = {dim, 0}};
    return cai_op_call1(CA_OP_CUMSUM, x, &a, out);
}

/* ---------------------------------------------------------------------------------------
 * cumprod(x, dim): attrs.i[0] = dim. Its derivative is an internal row of its own,
 * cumprod_backward(x, result, g), exact where x has zeros; a double backward builds it from
 * differentiable ops instead (cumprod_backward_graph).
 */
static ca_bval tri(ca_builder *b, int op, ca_bval x, int64_t diagonal) {
    ca_attrs a = {.i = {diagonal}};
    return bx_apply(b, op, 1, &x, &a);
}

static ca_bval cumprod_along(ca_builder *b, ca_bval x, int dim) {
    ca_attrs a = {.i = {dim}};
    return bx_apply(b, CA_OP_CUMPROD, 1, &x, &a);
}

/* The derivative as differentiable ops, O(n^2) in the size n of dim (double backward only;
 * exact where x has zeros, as the kernel). With dim moved last, the [n, n] matrices
 *   C[j, i] = prod_{j<k<=i} x_k for i >= j, else 0;   L[j, i] = x_i for i < j, else 1
 * give dx_j = E_j sum_i C[j, i] g_i, where E_j = prod_{k<j} x_k is L's row product (its
 * cumprod's last column). */
static ca_bval cumprod_backward_graph(ca_builder *b, const ca_node *n, ca_bval x, ca_bval g) {
    int nd = n->in_meta[0].ndim, dim = (int)n->attrs.i[0];
    if (nd == 0) /* a 0-d cumprod is the identity */
        return g;
    x = bx_transpose(b, x, dim, nd - 1);
    g = bx_transpose(b, g, dim, nd - 1);
    const ca_meta *xm = bx_meta(b, x);
    if (!xm)
        return NULL;
    ca_meta last = *xm, sq = *xm;
    int64_t len = last.shape[nd - 1];
    sq.ndim = nd + 1;
    sq.shape[nd - 1] = sq.shape[nd] = len;
    ca_bval rows = bx_expand(b, bx_unsqueeze(b, x, nd - 1), &sq); /* rows[j, i] = x_i */
    ca_bval ones = bx_add_s(b, bx_zeros_like(b, rows), 1.0);
    ca_bval above = tri(b, CA_OP_TRIU, ones, 1), below = tri(b, CA_OP_TRIL, ones, -1);
    ca_bval c = tri(b, CA_OP_TRIU, cumprod_along(b, bx_where(b, above, rows, ones), nd), 0);
    ca_bval l = cumprod_along(b, bx_where(b, below, rows, ones), nd);
    ca_bval e = bx_slice(b, l, nd, len - 1, len, 1); /* [.., n, 1] */
    ca_bval s = bx_matmul(b, c, bx_unsqueeze(b, g, nd), false, false);
    ca_bval d = bx_reshape(b, bx_mul(b, e, s), &last);
    return bx_transpose(b, d, dim, nd - 1);
}

static void cumprod_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (b->create_graph) {
        gin[0] = cumprod_backward_graph(b, n, bx_saved(b, n, 0), g);
        return;
    }
    ca_attrs a = {.i = {n->attrs.i[0]}};
    ca_bval in[3] = {bx_saved(b, n, 0), bx_saved(b, n, 1), g};
    gin[0] = bx_apply(b, CA_OP_CUMPROD_BACKWARD, 3, in, &a);
}

/* cumprod_backward is not differentiated again: under create_graph cumprod's rule builds
 * its derivative from differentiable ops instead, so only a direct call records this row.
 * Reached, it names itself, as PyTorch's "the derivative for 'X' is not implemented". */
static void cumprod_bw_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    (void)n, (void)g, (void)gin;
    cai_bx_fail(b, CA_STATUS_AUTOGRAD,
                "the derivative for 'cumprod_backward' is not implemented: cagrad cannot "
                "differentiate it again (double backward differentiates cumprod through other "
                "ops; see docs/python-api.md)");
}

static ca_status cumprod_bw_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                                  ca_meta *out) {
    char b1[META_STR_SIZE], b2[META_STR_SIZE];
    for (int k = 1; k < 3; k++)
        if (in[k].dtype != in[0].dtype || !cai_meta_same_shape(&in[k], &in[0]))
            return err_set(CA_STATUS_SHAPE,
                           "cumprod_backward: input %d is %s %s, expected %s %s like the input", k,
                           ca_dtype_name(in[k].dtype), cai_meta_str(&in[k], b1, sizeof b1),
                           ca_dtype_name(in[0].dtype), cai_meta_str(&in[0], b2, sizeof b2));
    CA_CHECK(cai_dim_normalize(&a->i[0], in[0].ndim, "cumprod_backward"));
    *out = in[0];
    return CA_OK;
}

static ca_status cumprod_bw_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                    const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                    ca_tensor **aux) {
    ca_tensor *c[3] = {0}, *r = NULL;
    int64_t outer, n, inner;
    cai_kern_split_dim(m->ndim, m->shape, (int)a->i[0], &outer, &n, &inner);
    ca_status st = CA_OK;
    for (int k = 0; k < 3 && st == CA_OK; k++)
        st = cai_tensor_contiguous(in[k], &c[k]);
    if (st == CA_OK)
        st = cai_tensor_new(m, &r);
    if (st == CA_OK)
        st = cai_op_kern_status(cai_kern_cumprod_backward(
                                    kdt(m->dtype), outer, n, inner, cai_tensor_ptr(c[0]),
                                    cai_tensor_ptr(c[1]), cai_tensor_ptr(c[2]), cai_tensor_ptr(r)),
                                "cumprod_backward");
    cai_op_release_all(c, 3);
    return finish(st, r, out);
}

ca_status ca_cumprod(ca_tensor *x, int64_t dim, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_cumprod");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_cumprod");
    ca_attrs a = {.i = {dim}};
    return cai_op_call1(CA_OP_CUMPROD, x, &a, out);
}

/* ---------------------------------------------------------------------------------------
 * The rows
 */
#define TRI_ROW(ID, NAME, NODE, SCHEMA)                                                            \
    {                                                                                              \
        .id = (ID), .name = (NAME), .node_name = (NODE), .fusion = CA_FUSE_OPAQUE, .n_in_min = 1,  \
        .n_in_max = 1, .n_fields = 2,                                                              \
        .fields = {{"mask", FIELD_TENSOR, FROM_AUX, 0}, F_INT("diagonal", 0)}, .shape = tri_shape, \
        .forward = tri_forward, .backward = tri_backward, .schema = (SCHEMA),                      \
        .py = CA_OP_PY_TORCH | CA_OP_PY_TENSOR | CA_OP_PY_OUT                                      \
    }

static const ca_op_def rows[] = {
    TRI_ROW(CA_OP_TRIL, "tril", "TrilBackward0", "tril(Tensor input, int diagonal=0)"),
    TRI_ROW(CA_OP_TRIU, "triu", "TriuBackward0", "triu(Tensor input, int diagonal=0)"),
    {.id = CA_OP_CUMSUM,
     .name = "cumsum",
     .node_name = "CumsumBackward0",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 2,
     .fields = {F_INT("dim", 0), F_INT("reverse", 1)},
     .shape = cumsum_shape,
     .forward = scan_forward,
     .backward = cumsum_backward},
    {.id = CA_OP_CUMPROD,
     .name = "cumprod",
     .node_name = "CumprodBackward0",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 3,
     .fields = {F_IN("self", 0), F_RESULT, F_INT("dim", 0)},
     .shape = cumsum_shape,
     .forward = scan_forward,
     .backward = cumprod_backward},
    {.id = CA_OP_CUMPROD_BACKWARD,
     .name = "cumprod_backward",
     .node_name = "CumprodBackwardBackward0",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 3,
     .n_in_max = 3,
     .shape = cumprod_bw_shape,
     .forward = cumprod_bw_forward,
     .backward = cumprod_bw_backward},
};

const ca_op_group cai_ops_order = {rows, sizeof rows / sizeof rows[0]};
