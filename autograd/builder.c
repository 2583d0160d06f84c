/* builder.c - the bx_ helpers: each fills in the attributes of one op-table row and hands
 * it to the builder's apply. They hold no logic of their own, so any builder (eager or
 * tracing) gets every helper for free.
 */
#include "autograd/builder.h"

#include <stdio.h>
#include <string.h>

ca_bval bx_apply(ca_builder *b, int op, int n, const ca_bval *in, const ca_attrs *a) {
    CA_ASSERT(op >= 0 && op < CA_OP__COUNT && n >= 0 && (n == 0 || in));
    if (b->status != CA_OK)
        return NULL;
    for (int i = 0; i < n; i++)
        if (!in[i]) {
            if (b->status == CA_OK)
                b->status = err_set(CA_STATUS_INTERNAL,
                                    "derivative rule passed a missing value "
                                    "to op %d",
                                    op);
            return NULL;
        }
    return b->vt->apply(b, op, n, in, a);
}

ca_bval bx_saved(ca_builder *b, const ca_node *n, int k) {
    CA_ASSERT(n && k >= 0 && k < n->n_saved); /* a rule reads only what its row saves */
    return b->status == CA_OK ? b->vt->saved(b, n, k) : NULL;
}

const ca_meta *bx_meta(ca_builder *b, ca_bval v) {
    return v ? b->vt->meta(b, v) : NULL;
}

ca_bval bx_fail(ca_builder *b, ca_status st, const char *fmt, ...) {
    if (b->status != CA_OK)
        return NULL;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    b->status = err_set(st, "%s", msg);
    return NULL;
}

/* ---- pointwise ---- */
ca_bval bx_pw(ca_builder *b, kern_pw_op op, ca_bval x, ca_bval y, ca_bval z, double p0, double p1) {
    ca_attrs a = {.s = {p0, p1}, .i = {op}};
    ca_bval in[3] = {x, y, z};
    int arity = kern_pw_arity(op);
    if (arity < 1 || arity > 3)
        return bx_fail(b, CA_STATUS_INTERNAL, "pointwise op %d has no arity", (int)op);
    return bx_apply(b, CA_OP_PW, arity, in, &a);
}

ca_bval bx_add(ca_builder *b, ca_bval x, ca_bval y) {
    return bx_pw(b, KPW_ADD, x, y, NULL, 1, 0);
}
ca_bval bx_sub(ca_builder *b, ca_bval x, ca_bval y) {
    return bx_pw(b, KPW_SUB, x, y, NULL, 1, 0);
}
ca_bval bx_mul(ca_builder *b, ca_bval x, ca_bval y) {
    return bx_pw(b, KPW_MUL, x, y, NULL, 0, 0);
}
ca_bval bx_div(ca_builder *b, ca_bval x, ca_bval y) {
    return bx_pw(b, KPW_DIV, x, y, NULL, 0, 0);
}
ca_bval bx_neg(ca_builder *b, ca_bval x) {
    return bx_pw(b, KPW_NEG, x, NULL, NULL, 0, 0);
}
ca_bval bx_exp(ca_builder *b, ca_bval x) {
    return bx_pw(b, KPW_EXP, x, NULL, NULL, 0, 0);
}
ca_bval bx_log(ca_builder *b, ca_bval x) {
    return bx_pw(b, KPW_LOG, x, NULL, NULL, 0, 0);
}
ca_bval bx_mul_s(ca_builder *b, ca_bval x, double s) {
    return bx_pw(b, KPW_MUL_S, x, NULL, NULL, s, 0);
}
ca_bval bx_add_s(ca_builder *b, ca_bval x, double s) {
    return bx_pw(b, KPW_ADD_S, x, NULL, NULL, s, 0);
}
ca_bval bx_where(ca_builder *b, ca_bval cond, ca_bval x, ca_bval y) {
    return bx_pw(b, KPW_WHERE, cond, x, y, 0, 0);
}
ca_bval bx_zeros_like(ca_builder *b, ca_bval x) {
    return bx_pw(b, KPW_FILL, x, NULL, NULL, 0, 0);
}

/* ---- reductions and broadcasting ---- */
static ca_ints ints_of(int n, const int64_t *v) {
    ca_ints r = {.n = n};
    if (n > 0)
        memcpy(r.v, v, sizeof(int64_t) * (size_t)n);
    return r;
}

ca_bval bx_sum(ca_builder *b, ca_bval x, int n_dims, const int64_t *dims, bool keepdim) {
    ca_attrs a = {.dims = ints_of(n_dims, dims), .i = {keepdim}};
    return bx_apply(b, CA_OP_SUM, 1, &x, &a);
}

static bool same_shape(ca_builder *b, ca_bval x, const ca_meta *to) {
    const ca_meta *m = bx_meta(b, x);
    return m && meta_same_shape(m, to);
}

ca_bval bx_sum_to(ca_builder *b, ca_bval x, const ca_meta *to) {
    if (same_shape(b, x, to))
        return x;
    ca_attrs a = {.shape = ints_of(to->ndim, to->shape)};
    return bx_apply(b, CA_OP_SUM_TO, 1, &x, &a);
}

ca_bval bx_expand(ca_builder *b, ca_bval x, const ca_meta *to) {
    if (same_shape(b, x, to))
        return x;
    ca_attrs a = {.shape = ints_of(to->ndim, to->shape)};
    return bx_apply(b, CA_OP_EXPAND, 1, &x, &a);
}

ca_bval bx_scale_inv_numel(ca_builder *b, ca_bval x, const ca_meta *m, uint32_t dim_mask) {
    return b->status == CA_OK && x ? b->vt->scale_inv_numel(b, x, m, dim_mask) : NULL;
}

/* ---- shape ---- */
ca_bval bx_reshape(ca_builder *b, ca_bval x, const ca_meta *to) {
    if (same_shape(b, x, to))
        return x;
    ca_ints s = ints_of(to->ndim, to->shape);
    return bx_reshape_ints(b, x, &s);
}

ca_bval bx_reshape_ints(ca_builder *b, ca_bval x, const ca_ints *shape) {
    ca_attrs a = {.shape = *shape};
    return bx_apply(b, CA_OP_RESHAPE, 1, &x, &a);
}

ca_bval bx_permute(ca_builder *b, ca_bval x, const ca_ints *perm) {
    ca_attrs a = {.dims = *perm};
    return bx_apply(b, CA_OP_PERMUTE, 1, &x, &a);
}

ca_bval bx_transpose(ca_builder *b, ca_bval x, int d0, int d1) {
    const ca_meta *m = bx_meta(b, x);
    if (!m)
        return NULL;
    ca_ints perm = {.n = m->ndim};
    for (int d = 0; d < m->ndim; d++)
        perm.v[d] = d == d0 ? d1 : d == d1 ? d0 : d;
    return bx_permute(b, x, &perm);
}

ca_bval bx_unsqueeze(ca_builder *b, ca_bval x, int dim) {
    ca_attrs a = {.i = {dim}};
    return bx_apply(b, CA_OP_UNSQUEEZE, 1, &x, &a);
}

ca_bval bx_slice(ca_builder *b, ca_bval x, int dim, int64_t start, int64_t end, int64_t step) {
    ca_attrs a = {.i = {dim, start, end, step}};
    return bx_apply(b, CA_OP_SLICE, 1, &x, &a);
}

ca_bval bx_slice_backward(ca_builder *b, ca_bval x, const ca_meta *full, int dim, int64_t start,
                          int64_t end, int64_t step) {
    ca_attrs a = {.i = {dim, start, end, step}, .shape = ints_of(full->ndim, full->shape)};
    return bx_apply(b, CA_OP_SLICE_BACKWARD, 1, &x, &a);
}

ca_bval bx_contiguous(ca_builder *b, ca_bval x) {
    return bx_apply(b, CA_OP_CONTIGUOUS, 1, &x, NULL);
}

/* ---- indexing ---- */
static ca_bval index_scatter(ca_builder *b, int op, const ca_meta *full, int dim, ca_bval index,
                             ca_bval src) {
    ca_attrs a = {.i = {dim}, .shape = ints_of(full->ndim, full->shape)};
    ca_bval in[2] = {index, src};
    return bx_apply(b, op, 2, in, &a);
}

ca_bval bx_index_add(ca_builder *b, const ca_meta *full, int dim, ca_bval index, ca_bval src) {
    return index_scatter(b, CA_OP_INDEX_ADD, full, dim, index, src);
}

ca_bval bx_scatter_add(ca_builder *b, const ca_meta *full, int dim, ca_bval index, ca_bval src) {
    return index_scatter(b, CA_OP_SCATTER_ADD, full, dim, index, src);
}

/* ---- linear algebra ---- */
ca_bval bx_matmul(ca_builder *b, ca_bval x, ca_bval y, bool tx, bool ty) {
    ca_attrs a = {.i = {tx, ty}};
    ca_bval in[2] = {x, y};
    return bx_apply(b, CA_OP_MATMUL, 2, in, &a);
}
