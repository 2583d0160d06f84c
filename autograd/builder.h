/* builder.h - the one interface every derivative rule is written against.
 *
 * A rule never calls kernels. It asks a builder for values: bx_mul(b, g, x),
 * bx_sum_to(b, g, &meta), bx_matmul(b, g, w, false, true), ... Two builders implement it:
 *  - the eager builder (builder_eager.c) runs each op at once; values are tensors;
 *  - the tracing builder (compiled autograd) appends IR nodes; values are IR values.
 * So eager and compiled backward run the same rule and cannot drift apart.
 *
 * Every op a rule can ask for is a row of the op table (internal.h), applied through one
 * entry, vt->apply. The bx_ helpers below only fill in ca_attrs.
 *
 * Errors are sticky: the first failing call records its status in b->status and every
 * later call returns NULL at once, so a rule is straight-line code with no checks. Every
 * helper accepts NULL inputs (and returns NULL). The engine checks b->status after the
 * rule returns.
 *
 * Sizes: a rule passes sizes through (from node->in_meta, node->out_meta, attrs) but does
 * no arithmetic on them; arithmetic that involves sizes goes through a builder call
 * (bx_scale_inv_numel, bx_size_add), so a tracing builder can keep sizes symbolic.
 */
#ifndef CAGRAD_BUILDER_H
#define CAGRAD_BUILDER_H

#include "autograd/internal.h"

#include <string.h>

typedef struct {
    /* apply op `op` (a row of the op table) to n inputs */
    ca_bval (*apply)(ca_builder *b, int op, int n, const ca_bval *in, const ca_attrs *a);
    /* the k-th saved tensor of node n; fails if it was freed or changed in place */
    ca_bval (*saved)(ca_builder *b, const ca_node *n, int k);
    /* dtype and shape of a value (NULL for a NULL value) */
    const ca_meta *(*meta)(ca_builder *b, ca_bval v);
    /* x * (1 / prod of m's sizes at the dims set in dim_mask) */
    ca_bval (*scale_inv_numel)(ca_builder *b, ca_bval x, const ca_meta *m, uint32_t dim_mask);
    /* x + y for two sizes (numbers, or a trace's handles of symbolic sizes) */
    int64_t (*size_add)(ca_builder *b, int64_t x, int64_t y);
    /* x * y for two sizes, likewise */
    int64_t (*size_mul)(ca_builder *b, int64_t x, int64_t y);
} ca_builder_vtbl;

struct ca_builder {
    const ca_builder_vtbl *vt;
    ca_status status; /* CA_OK until the first failure */
    /* The eager builder of a double backward (create_graph): the values are recorded and
     * differentiated again. A rule whose usual ops are differentiable once only
     * (cumprod_backward) then builds its result from differentiable ops instead. */
    bool create_graph;
};

/* ---- generic ---- */
/* Record a failure from inside a rule (e.g. an unsupported case). Returns NULL. */
ca_bval cai_bx_fail(ca_builder *b, ca_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* apply op `op` (a row of the op table) to n inputs; the k-th saved tensor of node n; a
 * value's dtype and shape; x * (1 / prod of m's sizes at the dims set in dim_mask) */
static inline ca_bval bx_apply(ca_builder *b, int op, int n, const ca_bval *in, const ca_attrs *a) {
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

/* Whether a size from a node's metas is a number a rule may compare (to choose between
 * two ways of computing the same values), not a tracing builder's handle for a dynamic
 * size (builder_trace.h's SIZE_HANDLE_BASE + id, at least this limit). */
#define BX_SIZE_NUMBER_LIMIT ((int64_t)1 << 51)
static inline bool bx_size_is_number(int64_t size) {
    return size < BX_SIZE_NUMBER_LIMIT;
}

/* x + y for two sizes from metas or attrs (a position a rule computes from sizes, as
 * cat's offsets): a number in the eager builder, a symbolic size's handle in a trace. */
static inline int64_t bx_size_add(ca_builder *b, int64_t x, int64_t y) {
    return b->vt->size_add(b, x, y);
}

/* x * y for two sizes (a flattened dim's size, as max_pool2d's planes' h * w), likewise */
static inline int64_t bx_size_mul(ca_builder *b, int64_t x, int64_t y) {
    return b->vt->size_mul(b, x, y);
}

static inline ca_bval bx_saved(ca_builder *b, const ca_node *n, int k) {
    CA_ASSERT(n && k >= 0 && k < n->n_saved); /* a rule reads only what its row saves */
    return b->status == CA_OK ? b->vt->saved(b, n, k) : NULL;
}

static inline const ca_meta *bx_meta(ca_builder *b, ca_bval v) {
    return v ? b->vt->meta(b, v) : NULL;
}

static inline ca_bval bx_scale_inv_numel(ca_builder *b, ca_bval x, const ca_meta *m,
                                         uint32_t dim_mask) {
    return b->status == CA_OK && x ? b->vt->scale_inv_numel(b, x, m, dim_mask) : NULL;
}

/* ---- the helpers: each fills in one op-table row's attributes and applies it ----
 * Inline: they hold no logic of their own, and rules call them on every node. */
/* ---- pointwise ---- */
/* pointwise, broadcasting; every kern_pw_op is reachable */
static inline ca_bval bx_pw(ca_builder *b, kern_pw_op op, ca_bval x, ca_bval y, ca_bval z,
                            double p0, double p1) {
    ca_attrs a = {.s = {p0, p1}, .i = {op}};
    ca_bval in[3] = {x, y, z};
    int arity = cai_kern_pw_arity(op);
    if (arity < 1 || arity > 3)
        return cai_bx_fail(b, CA_STATUS_INTERNAL, "pointwise op %d has no arity", (int)op);
    return bx_apply(b, CA_OP_PW, arity, in, &a);
}

static inline ca_bval bx_add(ca_builder *b, ca_bval x, ca_bval y) {
    return bx_pw(b, KPW_ADD, x, y, NULL, 1, 0);
}
static inline ca_bval bx_sub(ca_builder *b, ca_bval x, ca_bval y) {
    return bx_pw(b, KPW_SUB, x, y, NULL, 1, 0);
}
static inline ca_bval bx_mul(ca_builder *b, ca_bval x, ca_bval y) {
    return bx_pw(b, KPW_MUL, x, y, NULL, 0, 0);
}
static inline ca_bval bx_div(ca_builder *b, ca_bval x, ca_bval y) {
    return bx_pw(b, KPW_DIV, x, y, NULL, 0, 0);
}
static inline ca_bval bx_neg(ca_builder *b, ca_bval x) {
    return bx_pw(b, KPW_NEG, x, NULL, NULL, 0, 0);
}
static inline ca_bval bx_exp(ca_builder *b, ca_bval x) {
    return bx_pw(b, KPW_EXP, x, NULL, NULL, 0, 0);
}
static inline ca_bval bx_log(ca_builder *b, ca_bval x) {
    return bx_pw(b, KPW_LOG, x, NULL, NULL, 0, 0);
}
static inline ca_bval bx_mul_s(ca_builder *b, ca_bval x, double s) {
    return bx_pw(b, KPW_MUL_S, x, NULL, NULL, s, 0);
}
static inline ca_bval bx_add_s(ca_builder *b, ca_bval x, double s) {
    return bx_pw(b, KPW_ADD_S, x, NULL, NULL, s, 0);
}
static inline ca_bval bx_where(ca_builder *b, ca_bval cond, ca_bval x, ca_bval y) {
    return bx_pw(b, KPW_WHERE, cond, x, y, 0, 0);
}
static inline ca_bval bx_zeros_like(ca_builder *b, ca_bval x) {
    return bx_pw(b, KPW_FILL, x, NULL, NULL, 0, 0);
}

/* ---- reductions and broadcasting ---- */
static inline ca_ints bx_ints_of(int n, const int64_t *v) {
    ca_ints r = {.n = n};
    if (n > 0)
        memcpy(r.v, v, sizeof(int64_t) * (size_t)n);
    return r;
}

/* sum over the dims in `dims` (n_dims == 0: all) */
static inline ca_bval bx_sum(ca_builder *b, ca_bval x, int n_dims, const int64_t *dims,
                             bool keepdim) {
    ca_attrs a = {.dims = bx_ints_of(n_dims, dims), .i = {keepdim}};
    return bx_apply(b, CA_OP_SUM, 1, &x, &a);
}

static inline bool bx_same_shape(ca_builder *b, ca_bval x, const ca_meta *to) {
    const ca_meta *m = bx_meta(b, x);
    return m && cai_meta_same_shape(m, to);
}

/* sum a broadcast value back down to `to`'s shape (identity when shapes are equal) */
static inline ca_bval bx_sum_to(ca_builder *b, ca_bval x, const ca_meta *to) {
    if (bx_same_shape(b, x, to))
        return x;
    ca_attrs a = {.shape = bx_ints_of(to->ndim, to->shape)};
    return bx_apply(b, CA_OP_SUM_TO, 1, &x, &a);
}

/* broadcast x to `to`'s shape */
static inline ca_bval bx_expand(ca_builder *b, ca_bval x, const ca_meta *to) {
    if (bx_same_shape(b, x, to))
        return x;
    ca_attrs a = {.shape = bx_ints_of(to->ndim, to->shape)};
    return bx_apply(b, CA_OP_EXPAND, 1, &x, &a);
}

/* ---- shape ---- */
static inline ca_bval bx_reshape_ints(ca_builder *b, ca_bval x, const ca_ints *shape) {
    ca_attrs a = {.shape = *shape};
    return bx_apply(b, CA_OP_RESHAPE, 1, &x, &a);
}

static inline ca_bval bx_reshape(ca_builder *b, ca_bval x, const ca_meta *to) {
    if (bx_same_shape(b, x, to))
        return x;
    ca_ints s = bx_ints_of(to->ndim, to->shape);
    return bx_reshape_ints(b, x, &s);
}

static inline ca_bval bx_permute(ca_builder *b, ca_bval x, const ca_ints *perm) {
    ca_attrs a = {.dims = *perm};
    return bx_apply(b, CA_OP_PERMUTE, 1, &x, &a);
}

static inline ca_bval bx_transpose(ca_builder *b, ca_bval x, int d0, int d1) {
    const ca_meta *m = bx_meta(b, x);
    if (!m)
        return NULL;
    ca_ints perm = {.n = m->ndim};
    for (int d = 0; d < m->ndim; d++)
        perm.v[d] = d == d0 ? d1 : d == d1 ? d0 : d;
    return bx_permute(b, x, &perm);
}

static inline ca_bval bx_unsqueeze(ca_builder *b, ca_bval x, int dim) {
    ca_attrs a = {.i = {dim}};
    return bx_apply(b, CA_OP_UNSQUEEZE, 1, &x, &a);
}

static inline ca_bval bx_slice(ca_builder *b, ca_bval x, int dim, int64_t start, int64_t end,
                               int64_t step) {
    ca_attrs a = {.i = {dim, start, end, step}};
    return bx_apply(b, CA_OP_SLICE, 1, &x, &a);
}

/* zeros of `full`'s shape with x placed at [start:end:step] along dim */
static inline ca_bval bx_slice_backward(ca_builder *b, ca_bval x, const ca_meta *full, int dim,
                                        int64_t start, int64_t end, int64_t step) {
    ca_attrs a = {.i = {dim, start, end, step}, .shape = bx_ints_of(full->ndim, full->shape)};
    return bx_apply(b, CA_OP_SLICE_BACKWARD, 1, &x, &a);
}

static inline ca_bval bx_contiguous(ca_builder *b, ca_bval x) {
    return bx_apply(b, CA_OP_CONTIGUOUS, 1, &x, NULL);
}

/* ---- indexing ---- */
static inline ca_bval bx_index_scatter(ca_builder *b, int op, const ca_meta *full, int dim,
                                       ca_bval index, ca_bval src) {
    ca_attrs a = {.i = {dim}, .shape = bx_ints_of(full->ndim, full->shape)};
    ca_bval in[2] = {index, src};
    return bx_apply(b, op, 2, in, &a);
}

/* zeros(full).index_add_(dim, index, src) */
static inline ca_bval bx_index_add(ca_builder *b, const ca_meta *full, int dim, ca_bval index,
                                   ca_bval src) {
    return bx_index_scatter(b, CA_OP_INDEX_ADD, full, dim, index, src);
}

/* zeros(full).scatter_add_(dim, index, src) */
static inline ca_bval bx_scatter_add(ca_builder *b, const ca_meta *full, int dim, ca_bval index,
                                     ca_bval src) {
    return bx_index_scatter(b, CA_OP_SCATTER_ADD, full, dim, index, src);
}

/* x.index_select(dim, index) */
static inline ca_bval bx_index_select(ca_builder *b, ca_bval x, int dim, ca_bval index) {
    ca_attrs a = {.i = {dim}};
    ca_bval in[2] = {x, index};
    return bx_apply(b, CA_OP_INDEX_SELECT, 2, in, &a);
}

/* x.index_fill(dim, index, value) */
static inline ca_bval bx_index_fill(ca_builder *b, ca_bval x, int dim, ca_bval index,
                                    double value) {
    ca_attrs a = {.i = {dim}, .s = {value}};
    ca_bval in[2] = {x, index};
    return bx_apply(b, CA_OP_INDEX_FILL, 2, in, &a);
}

/* ---- linear algebra ---- */
/* op(x) @ op(y) with batch broadcasting, op = transpose of the last two dims when set */
static inline ca_bval bx_matmul(ca_builder *b, ca_bval x, ca_bval y, bool tx, bool ty) {
    ca_attrs a = {.i = {tx, ty}};
    ca_bval in[2] = {x, y};
    return bx_apply(b, CA_OP_MATMUL, 2, in, &a);
}

/* ---- the eager builder (builder_eager.c) ---- */
typedef struct {
    ca_builder base;   /* base.create_graph: saved values come back connected to the graph */
    ca_tensor **temps; /* every value made in this scope, released by cai_eager_scope_end */
    int n_temps, cap_temps;
    ca_meta metas[16]; /* ring of answers to meta(): each is valid for 16 more calls */
    int next_meta;
} ca_eager_builder;

void cai_eager_builder_init(ca_eager_builder *eb);
/* Release every value made since init. A caller that keeps a value retains it first. */
void cai_eager_scope_end(ca_eager_builder *eb);
/* Saved values under create_graph (builder_eager.c; the compiled double backward uses them
 * too). cai_saved_reconnect: node n's saved tensor k as a new reference joined to its
 * history, as PyTorch's SavedVariable unpacks it (a saved input to the input's grad_fn or
 * leaf, a saved output to n itself; a constant as it is). cai_saved_aux_recomputed: whether
 * saved k is an aux value that the row recomputes from its inputs (row->aux_again), because
 * an input carries a history. */
ca_status cai_saved_reconnect(const ca_node *n, int k, ca_tensor **out);
bool cai_saved_aux_recomputed(const ca_node *n, int k);

static inline ca_tensor *bv_tensor(ca_bval v) {
    return (ca_tensor *)v;
}
static inline ca_bval bv_of(ca_tensor *t) {
    return (ca_bval)t;
}

#endif /* CAGRAD_BUILDER_H */
