/* simplify.c - algebraic simplification of a traced graph: transposes into GEMM flags,
 * expand followed by sum into a multiply, identities dropped and chains of views folded.
 *
 * Also a transpose of a product read nowhere else becomes the product, transposed.
 *
 * One pass in node order. A node's inputs are first followed to their replacements, then
 * the rules run on it until none applies. A rule either replaces the node by an equal
 * value (the node is marked dead with alias set, as CSE does, and the readers follow the
 * alias) or rewrites the node in place into an op that makes the same dtype and shape
 * (re-inferred and checked, undone when it does not match). A rule that needs new nodes
 * appends them with cai_graph_add; each new node is anchored to the node being rewritten, and
 * a final stable reorder places it just before its anchor, so values still come before
 * their readers and the printed graph keeps its NodeCall comments in order.
 *
 * Every rule keeps the value exactly, except expand-then-sum, which multiplies instead of
 * adding N copies (a rounding difference far below the compiled-vs-eager tolerance).
 */
#include "graph/internal.h"

#include <math.h>
#include <string.h>

#define MAX_ROUNDS 16 /* rules applied to one node before moving on (each one shrinks it) */

typedef struct {
    graph *g;
    int n_orig;       /* nodes before the pass */
    int cap;          /* nodes the scratch holds: the pass appends no more than this */
    int32_t *anchor;  /* per node: the original node whose place it takes in the order */
    int32_t cur;      /* the anchor of the node being rewritten */
    graph_node *copy; /* the reorder's scratch */
    int32_t *map;     /* old id -> new id */
    int32_t *order;   /* new id -> old id */
    int32_t *first;   /* per original node: the first new node anchored to it, or -1 */
    int32_t *link;    /* per new node: the next one with the same anchor, or -1 */
    int32_t *reads;   /* per node: how many inputs read it (counted at the start, kept
                         up to date by the rules that need it) */
    int changes;
} simp;

/* ---------------------------------------------------------------------------------------
 * Small facts
 */
static const graph_node *node(const simp *s, graph_val v) {
    return cai_graph_node_at(s->g, v);
}

static const graph_node *input(const simp *s, const graph_node *x, int k) {
    return cai_graph_node_at(s->g, x->a.in[k]);
}

static bool same_type(const graph_node *a, const graph_node *b) {
    return a->dtype == b->dtype && cai_graph_same_shape(a->ndim, a->shape, b->ndim, b->shape);
}

/* The shapes differ only by leading 1s (a reshape or unsqueeze that moves nothing). */
static bool ones_only(const graph *g, int na, const graph_sx *a, int nb, const graph_sx *b) {
    int ia = 0, ib = 0;
    while (ia < na && cai_graph_sx_is(g, a[ia], 1))
        ia++;
    while (ib < nb && cai_graph_sx_is(g, b[ib], 1))
        ib++;
    return cai_graph_same_shape(na - ia, a + ia, nb - ib, b + ib);
}

static bool leading_ones_only(const graph *g, const graph_node *a, const graph_node *b) {
    return ones_only(g, a->ndim, a->shape, b->ndim, b->shape);
}

static bool is_identity_perm(const graph_node *x) {
    for (int d = 0; d < x->a.n_perm; d++)
        if (x->a.perm[d] != d)
            return false;
    return true;
}

/* A permute that swaps the last two dims and keeps the others. */
static bool is_last_two_swap(const graph_node *x) {
    int n = x->a.n_perm;
    if (x->a.op != GOP_PERMUTE || n < 2 || x->a.perm[n - 2] != n - 1 || x->a.perm[n - 1] != n - 2)
        return false;
    for (int d = 0; d < n - 2; d++)
        if (x->a.perm[d] != d)
            return false;
    return true;
}

/* Ops whose value the runner always writes to a contiguous buffer. */
static bool makes_contiguous(graph_op op) {
    switch (op) {
    case GOP_PW:
    case GOP_SUM:
    case GOP_SUM_TO:
    case GOP_SLICE_BACKWARD:
    case GOP_CONTIGUOUS:
    case GOP_ZEROS:
    case GOP_MATMUL:
    case GOP_INDEX_ADD:
    case GOP_SCATTER_ADD:
    case GOP_INDEX_SELECT:
    case GOP_GATHER:
    case GOP_CAST:
    case GOP_SCALE_SIZE:
    case GOP_INDEX_FILL:
    case GOP_CUMSUM:
    case GOP_TRI:
    case GOP_CUMPROD:
    case GOP_CUMPROD_BW:
    case GOP_IM2COL:
    case GOP_COL2IM:
    case GOP_CONV2D:
    case GOP_CONV2D_WEIGHT_GRAD:
    case GOP_NLL_BW: return true;
    default: return false;
    }
}

/* x is fill(_, c): every element is c. */
static bool is_fill(const graph_node *x, double c) {
    return x && x->a.op == GOP_PW && x->a.i[0] == KPW_FILL && x->a.p[0] == c;
}

/* Views that keep every element of their input (or repeat it): zero in, zero out. */
static bool is_plain_view(graph_op op) {
    switch (op) {
    case GOP_EXPAND:
    case GOP_RESHAPE:
    case GOP_PERMUTE:
    case GOP_UNSQUEEZE:
    case GOP_SLICE:
    case GOP_NARROW:
    case GOP_CONTIGUOUS: return true;
    default: return false;
    }
}

/* v is a symbolic zero: zeros, fill(_, 0), or a view of one. */
static bool is_zero(const simp *s, graph_val v) {
    const graph_node *x = node(s, v);
    while (is_plain_view(x->a.op))
        x = input(s, x, 0);
    return x->a.op == GOP_ZEROS || is_fill(x, 0.0);
}

/* ---------------------------------------------------------------------------------------
 * Edits
 */
/* v's readers use r from now on (r makes the same dtype and shape). */
static bool replace(simp *s, graph_val v, graph_val r) {
    graph_node *x = cai_graph_node_mut(s->g, v);
    if (r < 0 || r == v || !same_type(x, node(s, r)))
        return false;
    x->alias = r;
    x->dead = true;
    s->changes++;
    return true;
}

/* Rewrite v's args in place; undone unless the node still infers and makes the same
 * dtype and shape. */
static bool mutate(simp *s, graph_val v, const graph_op_args *a) {
    graph_node *x = cai_graph_node_mut(s->g, v);
    graph_node old = *x;
    x->a = *a;
    if (cai_graph_infer(s->g, x) != 0 || !same_type(x, &old)) {
        *x = old;
        return false;
    }
    s->changes++;
    return true;
}

/* A new node in v's place in the order, with v's origin; -1 when it cannot be made. */
static graph_val append(simp *s, const graph_op_args *a, graph_origin o) {
    if (cai_graph_count(s->g) >= s->cap)
        return -1;
    graph_val r = cai_graph_add(s->g, a, o);
    if (r >= 0)
        s->anchor[r] = s->cur;
    return r;
}

/* ---------------------------------------------------------------------------------------
 * Identities
 */
static bool pw_identity(simp *s, graph_val v, const graph_node *x) {
    const graph_node *a = input(s, x, 0), *b = x->a.n_in > 1 ? input(s, x, 1) : NULL;
    double p = x->a.p[0];
    switch ((kern_pw_op)x->a.i[0]) {
    case KPW_COPY: return replace(s, v, x->a.in[0]);
    case KPW_MUL_S:
    case KPW_DIV_S: return p == 1.0 && replace(s, v, x->a.in[0]);
    case KPW_ADD_S:
    case KPW_SUB_S: return p == 0.0 && replace(s, v, x->a.in[0]);
    case KPW_ADD: /* a + p*0 is a while p is finite; 0 + 1*b is b */
        if (is_zero(s, x->a.in[1]) && isfinite(p) && replace(s, v, x->a.in[0]))
            return true;
        return is_zero(s, x->a.in[0]) && p == 1.0 && replace(s, v, x->a.in[1]);
    case KPW_SUB: return is_zero(s, x->a.in[1]) && isfinite(p) && replace(s, v, x->a.in[0]);
    case KPW_MUL:
        if (is_fill(b, 1.0) && replace(s, v, x->a.in[0]))
            return true;
        return is_fill(a, 1.0) && replace(s, v, x->a.in[1]);
    default: return false;
    }
}

/* sum / sum_to whose reduced dims all have size 1: the value, or a reshape of it. */
static bool sum_of_ones(simp *s, graph_val v, const graph_node *x, uint32_t mask) {
    const graph_node *in = input(s, x, 0);
    for (int d = 0; d < in->ndim; d++)
        if (((mask >> d) & 1) && !cai_graph_sx_is(s->g, in->shape[d], 1))
            return false;
    if (replace(s, v, x->a.in[0]))
        return true;
    graph_op_args a = {.op = GOP_RESHAPE, .n_in = 1, .in = {x->a.in[0]}, .n_shape = x->ndim};
    memcpy(a.shape, x->shape, sizeof(graph_sx) * (size_t)x->ndim);
    return mutate(s, v, &a);
}

/* The dims sum_to reduces: the leading extra ones and those where the target is 1. */
static uint32_t sum_to_mask(const simp *s, const graph_node *x, const graph_node *in) {
    int lead = in->ndim - x->ndim;
    uint32_t mask = 0;
    for (int d = 0; d < in->ndim; d++)
        if (d < lead || (cai_graph_sx_is(s->g, x->shape[d - lead], 1) &&
                         !cai_graph_sx_is(s->g, in->shape[d], 1)))
            mask |= 1u << d;
    return mask;
}

/* ---------------------------------------------------------------------------------------
 * Symbolic zeros
 *
 * A rule's gradient can be zero by construction: the derivative of relu's, leaky_relu's or
 * clamp's own derivative, of floor or round. The rules make it as fill(x, 0); through a
 * double backward it then reaches GEMMs and whole layers of a forward (a gradient
 * penalty's critic). Every op that is linear in such a value gives zeros, so it becomes a
 * zeros node and its inputs are left to dead-code elimination. Exact wherever the other
 * factors are finite: where eager multiplies the zero by an inf or a NaN it gets NaN, and
 * compiled keeps 0 (docs/compiled-autograd.md).
 */
/* Whether op x gives zeros when the inputs that are symbolic zeros are zero. */
static bool zero_result(const simp *s, const graph_node *x) {
    const graph_val *in = x->a.in;
    switch (x->a.op) {
    case GOP_PW: {
        kern_pw_op k = (kern_pw_op)x->a.i[0];
        if (cai_kern_pw_zero_passes(k) && is_zero(s, in[0]))
            return true;
        switch (k) {
        case KPW_MUL: return is_zero(s, in[1]);
        case KPW_ADD:
        case KPW_SUB: return is_zero(s, in[0]) && is_zero(s, in[1]);
        case KPW_WHERE: return is_zero(s, in[1]) && is_zero(s, in[2]);
        case KPW_MASKED_FILL: return x->a.p[0] == 0.0 && is_zero(s, in[0]);
        default: return false;
        }
    }
    case GOP_MATMUL:
    case GOP_CONV2D:
    case GOP_CONV2D_WEIGHT_GRAD: return is_zero(s, in[0]) || is_zero(s, in[1]);
    case GOP_SUM:
    case GOP_SUM_TO:
    case GOP_SLICE_BACKWARD:
    case GOP_INDEX_SELECT:
    case GOP_GATHER:
    case GOP_CAST:
    case GOP_CUMSUM:
    case GOP_TRI:
    case GOP_SCALE_SIZE:
    case GOP_IM2COL:
    case GOP_COL2IM:
    case GOP_NLL_BW: return is_zero(s, in[0]);
    case GOP_INDEX_ADD:
    case GOP_SCATTER_ADD: return is_zero(s, in[1]);
    case GOP_INDEX_FILL: return x->a.p[0] == 0.0 && is_zero(s, in[0]);
    case GOP_CUMPROD_BW: return is_zero(s, in[2]);
    default: return false;
    }
}

/* v, whose value is all zeros, becomes a zeros node of its dtype and shape. */
static bool to_zeros(simp *s, graph_val v, const graph_node *x) {
    if (x->a.op == GOP_ZEROS || !zero_result(s, x))
        return false;
    graph_op_args a = {.op = GOP_ZEROS, .dtype = x->dtype, .n_shape = x->ndim};
    memcpy(a.shape, x->shape, sizeof(graph_sx) * (size_t)x->ndim);
    graph_val in[GRAPH_MAX_IN];
    int n_in = x->a.n_in;
    memcpy(in, x->a.in, sizeof in);
    if (!mutate(s, v, &a))
        return false;
    for (int k = 0; k < n_in; k++)
        if (in[k] >= 0)
            s->reads[in[k]]--;
    return true;
}

/* ---------------------------------------------------------------------------------------
 * Expand followed by sum
 */

/* y * n: mul_s for a constant, scale_size (multiplying) for a symbol. */
static graph_val scale_by(simp *s, graph_val y, graph_sx n, graph_origin o) {
    int64_t c;
    if (cai_graph_sx_const_value(s->g, n, &c)) {
        if (c == 1)
            return y;
        graph_op_args a = {.op = GOP_PW, .n_in = 1, .in = {y}, .i = {KPW_MUL_S}, .p = {(double)c}};
        return append(s, &a, o);
    }
    graph_op_args a = {
        .op = GOP_SCALE_SIZE, .n_in = 1, .in = {y}, .i = {1}, .p = {1.0}, .n_shape = 1};
    a.shape[0] = n;
    return append(s, &a, o);
}

/* A one-input shape op on y (reshape or expand to shape), or y when it has that shape. */
static graph_val shape_to(simp *s, graph_op op, graph_val y, int nd, const graph_sx *shape,
                          graph_origin o) {
    const graph_node *yn = node(s, y);
    if (cai_graph_same_shape(yn->ndim, yn->shape, nd, shape))
        return y;
    graph_op_args a = {.op = op, .n_in = 1, .in = {y}, .n_shape = nd};
    memcpy(a.shape, shape, sizeof(graph_sx) * (size_t)nd);
    return append(s, &a, o);
}

/* x = sum over `mask` (keepdim or not; sum_to drops the leading `lead` dims and keeps
 * the others) of e = expand(y). When every reduced dim of size other than 1 is one the
 * expand broadcast, x = expand(reshape(y * N)), N the product of those sizes. */
static bool expand_sum(simp *s, graph_val v, const graph_node *x, uint32_t mask, bool keep,
                       int lead) {
    const graph_node *e = input(s, x, 0), *y = input(s, e, 0);
    graph *g = s->g;
    int off = e->ndim - y->ndim, nr = 0;
    graph_sx n = cai_graph_sx_const(g, 1), r[KERN_MAX_DIMS];
    graph_sx one = n;
    if (n < 0)
        return false;
    for (int d = 0; d < e->ndim; d++) {
        bool bcast = d < off || y->shape[d - off] != e->shape[d];
        bool reduced = (mask >> d) & 1;
        if (reduced && !bcast && !cai_graph_sx_is(g, e->shape[d], 1))
            return false; /* a real sum remains */
        if (reduced && bcast && (n = cai_graph_sx_op(g, GSX_MUL, n, e->shape[d])) < 0)
            return false;
        if (!reduced && d >= lead)
            r[nr++] = d < off ? one : y->shape[d - off];
        else if (reduced && keep && d >= lead)
            r[nr++] = one;
    }
    int64_t c;
    if (cai_graph_sx_const_value(g, n, &c) && c <= 0)
        return false; /* an empty sum is 0, y * 0 is not (NaN, inf) */
    if (nr != x->ndim)
        return false;
    graph_origin o = x->origin;
    /* an expand adds leading 1s itself: no reshape just for them */
    bool reshape = cai_graph_same_shape(nr, r, x->ndim, x->shape) || nr < y->ndim ||
                   !ones_only(g, nr, r, y->ndim, y->shape);
    graph_val t = scale_by(s, e->a.in[0], n, o);
    if (t >= 0 && reshape)
        t = shape_to(s, GOP_RESHAPE, t, nr, r, o);
    if (t >= 0)
        t = shape_to(s, GOP_EXPAND, t, node(s, v)->ndim, node(s, v)->shape, o);
    return t >= 0 && replace(s, v, t);
}

/* ---------------------------------------------------------------------------------------
 * Per op
 */
static bool rule_sum(simp *s, graph_val v, const graph_node *x) {
    const graph_node *in = input(s, x, 0);
    uint32_t mask = (uint32_t)x->a.i[0];
    if (sum_of_ones(s, v, x, mask))
        return true;
    return in->a.op == GOP_EXPAND && expand_sum(s, v, x, mask, x->a.i[1] != 0, 0);
}

static bool rule_sum_to(simp *s, graph_val v, const graph_node *x) {
    const graph_node *in = input(s, x, 0);
    uint32_t mask = sum_to_mask(s, x, in);
    if (sum_of_ones(s, v, x, mask))
        return true;
    return in->a.op == GOP_EXPAND && expand_sum(s, v, x, mask, true, in->ndim - x->ndim);
}

static bool rule_expand(simp *s, graph_val v, const graph_node *x) {
    const graph_node *in = input(s, x, 0);
    if (replace(s, v, x->a.in[0]))
        return true;
    graph_op_args a = x->a;
    bool leading = in->a.op == GOP_UNSQUEEZE || in->a.op == GOP_RESHAPE;
    if (in->a.op == GOP_EXPAND || (leading && leading_ones_only(s->g, in, input(s, in, 0)))) {
        a.in[0] = in->a.in[0]; /* expand adds leading dims itself */
        return mutate(s, v, &a);
    }
    return false;
}

static bool rule_reshape(simp *s, graph_val v, const graph_node *x) {
    const graph_node *in = input(s, x, 0);
    if (replace(s, v, x->a.in[0]))
        return true;
    graph_op_args a = x->a;
    if (in->a.op == GOP_RESHAPE || in->a.op == GOP_UNSQUEEZE || in->a.op == GOP_CONTIGUOUS) {
        a.in[0] = in->a.in[0]; /* a reshape sees values, not layouts */
        return mutate(s, v, &a);
    }
    return false;
}

/* (op(A) @ op(B))^T = op(B)^T @ op(A)^T: the transpose of a product that nothing else
 * reads is the product with its operands swapped and their flags flipped. No copy, and a
 * .grad accumulation can then fold the GEMM (linear's weight gradient through TBackward0). */
static bool rule_permute_matmul(simp *s, graph_val v, const graph_node *x) {
    graph_val m = x->a.in[0];
    const graph_node *in = node(s, m);
    if (in->a.op != GOP_MATMUL || !is_last_two_swap(x) || s->reads[m] != 1)
        return false;
    graph_op_args a = in->a;
    a.in[0] = in->a.in[1];
    a.in[1] = in->a.in[0];
    a.i[0] = !in->a.i[1];
    a.i[1] = !in->a.i[0];
    if (!mutate(s, v, &a))
        return false;
    s->reads[m]--;
    s->reads[a.in[0]]++;
    s->reads[a.in[1]]++;
    return true;
}

static bool rule_permute(simp *s, graph_val v, const graph_node *x) {
    const graph_node *in = input(s, x, 0);
    if (is_identity_perm(x))
        return replace(s, v, x->a.in[0]);
    if (rule_permute_matmul(s, v, x))
        return true;
    if (in->a.op != GOP_PERMUTE)
        return false;
    graph_op_args a = x->a; /* out[i] = in[perm[i]] = src[in_perm[perm[i]]] */
    a.in[0] = in->a.in[0];
    for (int d = 0; d < a.n_perm; d++)
        a.perm[d] = in->a.perm[x->a.perm[d]];
    return mutate(s, v, &a);
}

/* One matmul operand, looked through: a transpose becomes the flag; a view that changes
 * only leading or batch dims, and a contiguous copy, go (the matmul broadcasts batch dims
 * and copies an operand it cannot use as it is), when the matmul's shape stays. */
static bool rule_matmul_operand(simp *s, graph_val v, const graph_node *x, int k) {
    const graph_node *in = input(s, x, k);
    graph_op_args a = x->a;
    a.in[k] = in->a.in[0];
    switch (in->a.op) {
    case GOP_PERMUTE:
        if (!is_last_two_swap(in))
            return false;
        a.i[k] = !a.i[k];
        return mutate(s, v, &a);
    case GOP_RESHAPE:
    case GOP_UNSQUEEZE: return leading_ones_only(s->g, in, input(s, in, 0)) && mutate(s, v, &a);
    case GOP_EXPAND:
    case GOP_CONTIGUOUS: return mutate(s, v, &a);
    default: return false;
    }
}

static bool rule_matmul(simp *s, graph_val v, const graph_node *x) {
    return rule_matmul_operand(s, v, x, 0) ||
           rule_matmul_operand(s, v, cai_graph_node_at(s->g, v), 1);
}

/* One rewrite of v, if any applies. */
static bool rewrite(simp *s, graph_val v) {
    const graph_node *x = node(s, v);
    if (to_zeros(s, v, x))
        return true;
    switch (x->a.op) {
    case GOP_PW: return pw_identity(s, v, x);
    case GOP_SUM: return rule_sum(s, v, x);
    case GOP_SUM_TO: return rule_sum_to(s, v, x);
    case GOP_EXPAND: return rule_expand(s, v, x);
    case GOP_RESHAPE: return rule_reshape(s, v, x);
    case GOP_PERMUTE: return rule_permute(s, v, x);
    case GOP_MATMUL: return rule_matmul(s, v, x);
    case GOP_CONTIGUOUS: return makes_contiguous(input(s, x, 0)->a.op) && replace(s, v, x->a.in[0]);
    case GOP_CAST: return replace(s, v, x->a.in[0]); /* only when the dtype is the same */
    default: return false;
    }
}

/* ---------------------------------------------------------------------------------------
 * The order
 */
static void emit(simp *s, graph_val v, int *next) {
    if (s->map[v] >= 0)
        return;
    s->map[v] = -2; /* on the way: inputs precede their readers, so no cycle comes back */
    const graph_node *x = node(s, v);
    for (int k = 0; k < x->a.n_in; k++)
        if (x->a.in[k] >= 0 && s->map[x->a.in[k]] == -1)
            emit(s, x->a.in[k], next);
    s->order[*next] = v;
    s->map[v] = (*next)++;
}

/* New nodes go just before their anchor (in the order they were made), then everything is
 * renumbered: ids, inputs and aliases. */
static void reorder(simp *s) {
    int n = cai_graph_count(s->g), next = 0;
    for (int v = 0; v < n; v++)
        s->map[v] = s->first[v] = s->link[v] = -1;
    for (int v = n - 1; v >= s->n_orig; v--) { /* lists in id order */
        s->link[v] = s->first[s->anchor[v]];
        s->first[s->anchor[v]] = v;
    }
    for (int p = 0; p < s->n_orig; p++) {
        for (int32_t v = s->first[p]; v >= 0; v = s->link[v])
            emit(s, v, &next);
        emit(s, p, &next);
    }
    for (int i = 0; i < n; i++) {
        graph_node *c = &s->copy[i];
        *c = *node(s, s->order[i]);
        for (int k = 0; k < c->a.n_in; k++)
            if (c->a.in[k] >= 0)
                c->a.in[k] = s->map[c->a.in[k]];
        if (c->alias >= 0)
            c->alias = s->map[c->alias];
    }
    for (int i = 0; i < n; i++)
        *cai_graph_node_mut(s->g, i) = s->copy[i];
}

/* ---------------------------------------------------------------------------------------
 * The pass
 */
static bool simp_alloc(simp *s, graph *g) {
    int n = cai_graph_count(g);
    s->g = g;
    s->n_orig = n;
    s->cap = 2 * n + 16;
    size_t cap = (size_t)s->cap;
    s->anchor = cai_graph_mem_alloc(sizeof(int32_t) * cap);
    s->map = cai_graph_mem_alloc(sizeof(int32_t) * cap);
    s->order = cai_graph_mem_alloc(sizeof(int32_t) * cap);
    s->first = cai_graph_mem_alloc(sizeof(int32_t) * cap);
    s->link = cai_graph_mem_alloc(sizeof(int32_t) * cap);
    s->copy = cai_graph_mem_alloc(sizeof(graph_node) * cap);
    s->reads = cai_graph_mem_alloc(sizeof(int32_t) * cap);
    if (!s->anchor || !s->map || !s->order || !s->first || !s->link || !s->copy || !s->reads)
        return false;
    memset(s->reads, 0, sizeof(int32_t) * cap);
    for (graph_val v = 0; v < n; v++) {
        const graph_node *x = cai_graph_node_at(g, v);
        for (int k = 0; !x->dead && k < x->a.n_in; k++)
            if (x->a.in[k] >= 0)
                s->reads[cai_graph_resolve(g, x->a.in[k])]++;
    }
    return true;
}

static void simp_free(simp *s) {
    cai_graph_mem_free(s->anchor);
    cai_graph_mem_free(s->map);
    cai_graph_mem_free(s->order);
    cai_graph_mem_free(s->first);
    cai_graph_mem_free(s->link);
    cai_graph_mem_free(s->copy);
    cai_graph_mem_free(s->reads);
}

int cai_graph_simplify(graph *g) {
    if (!g)
        return -1;
    simp s = {0};
    if (!simp_alloc(&s, g)) {
        simp_free(&s);
        return cai_graph_fail_nomem(g, "simplifying the graph");
    }
    for (int v = 0; v < s.n_orig; v++)
        s.anchor[v] = v;
    for (graph_val v = 0; v < cai_graph_count(g); v++) { /* new nodes are visited too */
        graph_node *x = cai_graph_node_mut(g, v);
        for (int k = 0; k < x->a.n_in; k++)
            x->a.in[k] = cai_graph_resolve(g, x->a.in[k]);
        if (x->dead || x->a.op == GOP_INPUT || cai_graph_op_is_side_effect(x->a.op))
            continue;
        s.cur = s.anchor[v];
        for (int round = 0; round < MAX_ROUNDS && !node(&s, v)->dead && rewrite(&s, v); round++)
            ;
    }
    for (graph_val v = 0; v < cai_graph_count(g); v++) { /* readers of later replacements */
        graph_node *x = cai_graph_node_mut(g, v);
        for (int k = 0; k < x->a.n_in; k++)
            x->a.in[k] = cai_graph_resolve(g, x->a.in[k]);
    }
    if (cai_graph_count(g) > s.n_orig)
        reorder(&s);
    simp_free(&s);
    return s.changes;
}
