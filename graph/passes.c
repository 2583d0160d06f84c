/* passes.c - the clean-up passes over a traced graph: dead-code elimination and common
 * subexpression elimination.
 *
 * Side-effect nodes (hooks, retain_grad, accumulate_grad, post hooks, outputs) are the
 * roots: they are never removed, never merged and keep their order. Everything else is
 * pure, so a node no root reaches is dead, and two nodes with the same op, args and
 * inputs compute the same value.
 */
#include "graph/internal.h"

#include <string.h>

/* ---------------------------------------------------------------------------------------
 * DCE
 */

/* One backward sweep: a consumer always comes after its producers, so by the time node v
 * is visited every node that could keep it alive has been, and the dead flags double as
 * the marks (no scratch memory). */
void cai_graph_dce(graph *g) {
    int n = cai_graph_count(g);
    for (int v = 0; v < n; v++) {
        graph_node *x = cai_graph_node_mut(g, v);
        if (!cai_graph_op_is_side_effect(x->a.op))
            x->dead = true;
    }
    for (int v = n - 1; v >= 0; v--) {
        const graph_node *x = cai_graph_node_at(g, v);
        if (x->dead)
            continue;
        for (int k = 0; k < x->a.n_in; k++) {
            graph_node *in = cai_graph_node_mut(g, x->a.in[k]);
            if (in->alias < 0) /* a node CSE replaced stays dead */
                in->dead = false;
        }
    }
}

static bool droppable_output(const graph_node *x, int64_t first) {
    return !x->dead && x->a.op == GOP_OUTPUT && x->a.i[0] >= first;
}

/* Whether a live node other than a droppable output reads v. */
static bool read_elsewhere(const graph *g, graph_val v, int64_t first) {
    for (int u = 0; u < cai_graph_count(g); u++) {
        const graph_node *y = cai_graph_node_at(g, u);
        if (y->dead || droppable_output(y, first))
            continue;
        for (int k = 0; k < y->a.n_in; k++)
            if (y->a.in[k] == v)
                return true;
    }
    return false;
}

void cai_graph_drop_lone_outputs(graph *g, int64_t first) {
    for (int v = 0; v < cai_graph_count(g); v++) {
        graph_node *x = cai_graph_node_mut(g, v);
        if (droppable_output(x, first) && !read_elsewhere(g, x->a.in[0], first))
            x->dead = true;
    }
}

/* ---------------------------------------------------------------------------------------
 * CSE
 */
static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h;
}

static uint64_t bits_of(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* Over the canonical args (cai_graph_add zeroed unused fields) and the output dtype. */
static uint64_t node_hash(const graph_node *x) {
    const graph_op_args *a = &x->a;
    uint64_t h = mix((uint64_t)a->op, (uint64_t)x->dtype);
    for (int k = 0; k < a->n_in; k++)
        h = mix(h, (uint64_t)a->in[k]);
    for (int k = 0; k < 4; k++)
        h = mix(h, (uint64_t)a->i[k]);
    h = mix(h, bits_of(a->p[0]));
    h = mix(h, bits_of(a->p[1]));
    for (int d = 0; d < a->n_shape; d++)
        h = mix(h, (uint64_t)a->shape[d]);
    for (int d = 0; d < a->n_perm; d++)
        h = mix(h, (uint64_t)a->perm[d]);
    return mix(h, (uint64_t)a->dtype);
}

/* Parameters compare by bits, so two NaN bounds with the same payload are the same op. */
static bool node_same(const graph_node *x, const graph_node *y) {
    const graph_op_args *a = &x->a, *b = &y->a;
    if (a->op != b->op || x->dtype != y->dtype || a->dtype != b->dtype || a->n_in != b->n_in ||
        a->n_shape != b->n_shape || a->n_perm != b->n_perm)
        return false;
    if (bits_of(a->p[0]) != bits_of(b->p[0]) || bits_of(a->p[1]) != bits_of(b->p[1]))
        return false;
    return memcmp(a->in, b->in, sizeof a->in) == 0 && memcmp(a->i, b->i, sizeof a->i) == 0 &&
           memcmp(a->shape, b->shape, sizeof(graph_sx) * (size_t)a->n_shape) == 0 &&
           memcmp(a->perm, b->perm, (size_t)a->n_perm) == 0;
}

/* In node order: rewrite inputs to their replacements, then look the node up; a match
 * replaces it. Replacements always come first, so one pass settles chains. */
void cai_graph_cse(graph *g) {
    int n = cai_graph_count(g);
    size_t cap = 16;
    while (cap < 2 * (size_t)n)
        cap *= 2;
    int32_t *tab = cai_graph_mem_alloc(sizeof(int32_t) * cap);
    if (!tab)
        return;
    memset(tab, 0xff, sizeof(int32_t) * cap);
    for (int v = 0; v < n; v++) {
        graph_node *x = cai_graph_node_mut(g, v);
        for (int k = 0; k < x->a.n_in; k++)
            x->a.in[k] = cai_graph_resolve(g, x->a.in[k]);
        if (x->dead || x->a.op == GOP_INPUT || cai_graph_op_is_side_effect(x->a.op))
            continue;
        size_t j = node_hash(x) & (cap - 1);
        for (; tab[j] >= 0; j = (j + 1) & (cap - 1))
            if (node_same(cai_graph_node_at(g, tab[j]), x))
                break;
        if (tab[j] < 0) {
            tab[j] = v;
        } else {
            x->alias = tab[j];
            x->dead = true;
        }
    }
    cai_graph_mem_free(tab);
}
