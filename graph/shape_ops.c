/* shape_ops.c - shape inference for the graph ops of indexing, scatter, nll_loss's
 * derivative, the scans' derivatives and convolution (im2col, col2im, conv2d and its
 * weight gradient), with shape.c's helpers (cai_shape_*), which call them.
 */
#include "graph/internal.h"
#include "graph/shape_rules.h"

#include <string.h>

static int need_index(graph *g, const char *op, const char *what, const graph_node *x) {
    if (x->dtype == KERN_I64)
        return 0;
    return cai_graph_fail(g, "%s: %s must be i64, got %s", op, what,
                          cai_shape_dtype_name(x->dtype));
}

/* index_add and scatter_add: (index, src) into zeros of the shape attribute. */
typedef int (*scatter_rule)(const cai_sizes *z, kern_dtype idx_dt, int ni, const int64_t *idx,
                            int ns, const int64_t *src, int nf, const int64_t *full, int64_t *dim,
                            cai_rule_error *e);

static int infer_scatter(graph *g, graph_node *n, scatter_rule rule) {
    const graph_node *idx = cai_shape_in(g, n, 0), *src = cai_shape_in(g, n, 1);
    graph_op_args *a = &n->a;
    if (cai_shape_check_attr(g, a, false))
        return -1;
    int64_t i64[KERN_MAX_DIMS], s64[KERN_MAX_DIMS], f64[KERN_MAX_DIMS];
    cai_shape_to64(idx->ndim, idx->shape, i64);
    cai_shape_to64(src->ndim, src->shape, s64);
    cai_shape_to64(a->n_shape, a->shape, f64);
    cai_sizes z = cai_shape_sizes(g);
    cai_rule_error e;
    if (rule(&z, idx->dtype, idx->ndim, i64, src->ndim, s64, a->n_shape, f64, &a->i[0], &e))
        return cai_shape_rule_fail(g, &e);
    cai_shape_set_out(n, src->dtype, a->n_shape, a->shape);
    return 0;
}

int cai_shape_infer_index_add(graph *g, graph_node *n) {
    return infer_scatter(g, n, cai_rule_index_add);
}

int cai_shape_infer_scatter_add(graph *g, graph_node *n) {
    return infer_scatter(g, n, cai_rule_scatter_add);
}

/* The index operand of index_select and gather: int64. */
static int check_index(graph *g, const char *op, const graph_node *idx) {
    if (idx->dtype != KERN_I64)
        return cai_graph_fail(g, "%s: the index must be int64, got %s", op,
                              cai_shape_dtype_name(idx->dtype));
    return 0;
}

/* x's shape with dim i[0] as long as the (0-D or 1-D) index. */
int cai_shape_infer_index_select(graph *g, graph_node *n) {
    const graph_node *x = cai_shape_in(g, n, 0), *idx = cai_shape_in(g, n, 1);
    if (check_index(g, "index_select", idx))
        return -1;
    if (idx->ndim > 1 || x->ndim == 0)
        return cai_graph_fail(g,
                              "index_select: expects an input of at least 1 dim and a 0-D or "
                              "1-D index, got %d and %d dims",
                              x->ndim, idx->ndim);
    cai_rule_error e;
    if (cai_rule_dim(&n->a.i[0], x->ndim, "index_select", &e))
        return cai_shape_rule_fail(g, &e);
    graph_sx shape[KERN_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[n->a.i[0]] = idx->ndim ? idx->shape[0] : cai_graph_sx_const(g, 1);
    cai_shape_set_out(n, x->dtype, x->ndim, shape);
    return 0;
}

/* The index's shape (as many dims as x; no larger than x but along dim, checked here where
 * sizes are numbers and by the kernel's index check at run time). */
int cai_shape_infer_gather(graph *g, graph_node *n) {
    const graph_node *x = cai_shape_in(g, n, 0), *idx = cai_shape_in(g, n, 1);
    if (check_index(g, "gather", idx))
        return -1;
    if (idx->ndim != x->ndim || x->ndim == 0)
        return cai_graph_fail(g,
                              "gather: the index must have as many dims as the input (at "
                              "least 1), got %d and %d",
                              idx->ndim, x->ndim);
    cai_rule_error e;
    if (cai_rule_dim(&n->a.i[0], x->ndim, "gather", &e))
        return cai_shape_rule_fail(g, &e);
    for (int d = 0; d < x->ndim; d++) {
        int64_t a, b;
        if (d != n->a.i[0] && cai_graph_sx_const_value(g, idx->shape[d], &a) &&
            cai_graph_sx_const_value(g, x->shape[d], &b) && a > b)
            return cai_graph_fail(g, "gather: the index is larger than the input at dim %d", d);
    }
    cai_shape_set_out(n, x->dtype, idx->ndim, idx->shape);
    return 0;
}

static int nll_check_target(graph *g, const graph_op_args *a, const graph_node *t) {
    int64_t x64[KERN_MAX_DIMS], t64[KERN_MAX_DIMS];
    cai_shape_to64(a->n_shape, a->shape, x64);
    cai_shape_to64(t->ndim, t->shape, t64);
    cai_sizes z = cai_shape_sizes(g);
    cai_rule_error e;
    return cai_rule_nll_target(&z, "nll_bw", a->n_shape, x64, t->ndim, t64, &e)
               ? cai_shape_rule_fail(g, &e)
               : 0;
}

int cai_shape_infer_scale_size(graph *g, graph_node *n) {
    const graph_node *x = cai_shape_in(g, n, 0);
    if (n->a.n_shape != 1)
        return cai_graph_fail(g, "scale_size: needs exactly one size expression (N), got %d",
                              n->a.n_shape);
    if (x->dtype == KERN_I64)
        return cai_graph_fail(g, "scale_size: needs a float input, got int64");
    n->a.i[0] = n->a.i[0] != 0; /* 1: multiply by N instead of dividing */
    cai_shape_set_out(n, x->dtype, x->ndim, x->shape);
    return 0;
}

int cai_shape_infer_nll_bw(graph *g, graph_node *n) {
    const graph_node *gr = cai_shape_in(g, n, 0), *t = cai_shape_in(g, n, 1),
                     *tw = cai_shape_in(g, n, 2);
    graph_op_args *a = &n->a;
    char s1[GRAPH_SHAPE_STR], s2[GRAPH_SHAPE_STR];
    if (gr->dtype == KERN_I64)
        return cai_graph_fail(g, "nll_bw: the gradient must be f32 or f64, got i64");
    if (a->i[0] < GRAPH_REDUCTION_NONE || a->i[0] > GRAPH_REDUCTION_SUM)
        return cai_graph_fail(g, "nll_bw: reduction %lld is not none (0), mean (1) or sum (2)",
                              (long long)a->i[0]);
    if (cai_shape_check_attr(g, a, false) || need_index(g, "nll_bw", "the target", t))
        return -1;
    if (a->n_shape < 1)
        return cai_graph_fail(g, "nll_bw: the input shape must have 1 to %d dims, got 0",
                              KERN_MAX_DIMS);
    if (nll_check_target(g, a, t))
        return -1;
    if (tw->dtype != gr->dtype)
        return cai_graph_fail(g, "nll_bw: total_weight is %s but the gradient is %s",
                              cai_shape_dtype_name(tw->dtype), cai_shape_dtype_name(gr->dtype));
    bool per_elem = a->i[0] == GRAPH_REDUCTION_NONE;
    bool fits = per_elem ? gr->ndim == t->ndim : gr->ndim == 0;
    for (int d = 0; per_elem && fits && d < gr->ndim; d++)
        fits = cai_graph_sx_same(g, gr->shape[d], t->shape[d]);
    if (!fits)
        return cai_graph_fail(g, "nll_bw: gradient %s does not fit target %s for reduction %lld",
                              cai_shape_str(g, gr, s1), cai_shape_str(g, t, s2),
                              (long long)a->i[0]);
    cai_shape_set_out(n, gr->dtype, a->n_shape, a->shape);
    return 0;
}

/* index_fill(x, index): x with value p[0] at the index along dim i[0] */
int cai_shape_infer_index_fill(graph *g, graph_node *n) {
    const graph_node *x = cai_shape_in(g, n, 0), *idx = cai_shape_in(g, n, 1);
    cai_sizes z = cai_shape_sizes(g);
    cai_rule_error e;
    if (cai_rule_index_fill(&z, idx->dtype, idx->ndim, x->ndim, &n->a.i[0], &e))
        return cai_shape_rule_fail(g, &e);
    cai_shape_copy_out(n, x);
    return 0;
}

/* cumsum(x) along i[0]: x's dtype and shape */
int cai_shape_infer_tri(graph *g, graph_node *n) {
    const graph_node *x = cai_shape_in(g, n, 0);
    if (x->ndim < 2)
        return cai_graph_fail(g, "tri: input tensor must have at least 2 dimensions");
    n->a.i[1] = n->a.i[1] != 0;
    cai_shape_copy_out(n, x);
    return 0;
}

int cai_shape_infer_cumprod(graph *g, graph_node *n) {
    const graph_node *x = cai_shape_in(g, n, 0);
    cai_rule_error e;
    if (cai_rule_dim(&n->a.i[0], x->ndim, "cumprod", &e))
        return cai_shape_rule_fail(g, &e);
    cai_shape_copy_out(n, x);
    return 0;
}

int cai_shape_infer_cumsum(graph *g, graph_node *n) {
    const graph_node *x = cai_shape_in(g, n, 0);
    cai_rule_error e;
    if (cai_rule_dim(&n->a.i[0], x->ndim, "cumsum", &e))
        return cai_shape_rule_fail(g, &e);
    n->a.i[1] = n->a.i[1] != 0;
    cai_shape_copy_out(n, x);
    return 0;
}

/* cumprod_backward(x, y, g) along i[0]: three values of one dtype and shape */
int cai_shape_infer_cumprod_bw(graph *g, graph_node *n) {
    const graph_node *x = cai_shape_in(g, n, 0);
    cai_sizes z = cai_shape_sizes(g);
    char s1[GRAPH_SHAPE_STR], s2[GRAPH_SHAPE_STR];
    for (int k = 1; k < 3; k++) {
        const graph_node *o = cai_shape_in(g, n, k);
        bool same = o->dtype == x->dtype && o->ndim == x->ndim;
        for (int d = 0; same && d < x->ndim; d++)
            same =
                o->shape[d] == x->shape[d] || (z.same && z.same(z.ctx, o->shape[d], x->shape[d]));
        if (!same)
            return cai_graph_fail(g, "cumprod_backward: input %d %s does not match the input %s", k,
                                  cai_shape_str(g, o, s1), cai_shape_str(g, x, s2));
    }
    cai_rule_error e;
    if (cai_rule_dim(&n->a.i[0], x->ndim, "cumprod_backward", &e))
        return cai_shape_rule_fail(g, &e);
    cai_shape_copy_out(n, x);
    return 0;
}

_Static_assert(GRAPH_CONV_NPARAMS == CAI_CONV_NPARAMS, "conv2d's parameter counts differ");

/* im2col(x) and col2im(cols) into the shape attribute: conv2d's unfold and fold */
int cai_shape_infer_conv(graph *g, graph_node *n) {
    const graph_node *x = cai_shape_in(g, n, 0);
    graph_op_args *a = &n->a;
    int64_t p[CAI_CONV_NPARAMS], x64[KERN_MAX_DIMS], f64[KERN_MAX_DIMS], out[4];
    const char *op = cai_graph_op_name(a->op);
    if (x->dtype == KERN_I64)
        return cai_graph_fail(g, "%s: needs a float input, got i64", op);
    cai_graph_conv_unpack(a->i, p);
    cai_shape_to64(x->ndim, x->shape, x64);
    cai_sizes z = cai_shape_sizes(g);
    cai_rule_error e;
    graph_sx o[4];
    if (a->op == GOP_IM2COL) {
        if (cai_rule_im2col(&z, op, x->ndim, x64, p, a->i[3], out, NULL, &e))
            return cai_shape_rule_fail(g, &e);
        cai_conv_cols_shape(cai_graph_conv_layout(a->i), out);
        cai_shape_to_sx(4, out, o);
        cai_shape_set_out(n, x->dtype, 4, o);
        return 0;
    }
    if (cai_shape_check_attr(g, a, false))
        return -1;
    cai_shape_to64(a->n_shape, a->shape, f64);
    if (cai_rule_col2im(&z, x->ndim, x64, a->n_shape, f64, p, a->i[3], &e))
        return cai_shape_rule_fail(g, &e);
    cai_shape_set_out(n, x->dtype, a->n_shape, a->shape);
    return 0;
}

/* conv2d(x, w): [N, O, OH, OW], OH and OW by im2col's rule. conv2d_weight_grad(g, x): its
 * shape attribute, the weight's, for which x must be a valid input. (The op-table rows
 * check the channel counts on concrete sizes; here they may be symbolic.) */
int cai_shape_infer_conv2d(graph *g, graph_node *n) {
    bool fwd = n->a.op == GOP_CONV2D;
    const graph_node *x = cai_shape_in(g, n, fwd ? 0 : 1), *other = cai_shape_in(g, n, fwd ? 1 : 0);
    graph_op_args *a = &n->a;
    const char *op = cai_graph_op_name(a->op);
    if (x->dtype == KERN_I64 || other->dtype != x->dtype || x->ndim != 4 || other->ndim != 4)
        return cai_graph_fail(g, "%s: needs 4-D float operands of one dtype", op);
    if (cai_graph_conv_layout(a->i) & ~(int64_t)CAI_CONV_COLS_FLIP)
        return cai_graph_fail(g, "%s: unknown tap order %lld", op,
                              (long long)cai_graph_conv_layout(a->i));
    int64_t p[CAI_CONV_NPARAMS], x64[4], cols[4], ohw[2];
    cai_graph_conv_unpack(a->i, p);
    cai_shape_to64(4, x->shape, x64);
    cai_sizes z = cai_shape_sizes(g);
    cai_rule_error e;
    if (cai_rule_im2col(&z, op, 4, x64, p, a->i[3], cols, ohw, &e))
        return cai_shape_rule_fail(g, &e);
    if (!fwd) {
        if (cai_shape_check_attr(g, a, false))
            return -1;
        cai_shape_set_out(n, x->dtype, a->n_shape, a->shape);
        return 0;
    }
    int64_t out[4] = {x64[0], 0, ohw[0], ohw[1]};
    graph_sx o[4];
    cai_shape_to_sx(4, out, o);
    o[1] = other->shape[0];
    cai_shape_set_out(n, x->dtype, 4, o);
    return 0;
}
