/* ir.c - the graph's storage: the layer's allocator, the hash-consed table of size
 * expressions (folding, evaluation, printing) and the node list with its accessors.
 *
 * Size expressions are interned: (kind, a, b) maps to one id, so "provably equal" is
 * "same id". Folding runs before interning, so constants never appear as unevaluated
 * arithmetic and x*1, x+0, x/1 are x itself. Operands are always interned before their
 * users, so the table is in topological order and one pass in id order evaluates it.
 *
 * Shape inference is in shape.c, the passes in passes.c, printing in print.c, the memory
 * plan in plan.c, plan_fused.c and plan_eval.c, and its runner in plan_run.c.
 */
#include "graph/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Allocator
 */
/* codegen's default (64-byte aligned) until the library wires in its hook. */
static kern_allocator g_alloc = {cai_kern_default_alloc, free};

void cai_graph_set_allocator(kern_allocator a) {
    g_alloc = a.alloc && a.free ? a : cai_kern_default_allocator();
}

void *cai_graph_mem_alloc(size_t nbytes) {
    return g_alloc.alloc(nbytes ? nbytes : 1);
}

void cai_graph_mem_free(void *p) {
    if (p)
        g_alloc.free(p);
}

/* Grow *arr (of *cap elements of `elem` bytes, `used` of them in use) to hold `need`.
 * The allocator has no realloc, so this copies. Returns false when out of memory. */
static bool grow(void **arr, int *cap, int used, int need, size_t elem) {
    if (need <= *cap)
        return true;
    int ncap = *cap > 0 ? *cap : 16;
    while (ncap < need)
        ncap *= 2;
    void *p = cai_graph_mem_alloc((size_t)ncap * elem);
    if (!p)
        return false;
    if (*arr && used > 0)
        memcpy(p, *arr, (size_t)used * elem);
    cai_graph_mem_free(*arr);
    *arr = p;
    *cap = ncap;
    return true;
}

/* ---------------------------------------------------------------------------------------
 * The graph
 */
typedef struct {
    graph_sx_kind kind;
    int64_t a, b;
} sx_entry;

struct graph {
    graph_node *nodes;
    int n_nodes, cap_nodes;
    sx_entry *sx;
    int n_sx, cap_sx;
    int32_t *hash; /* open addressing over sx ids, -1 = empty; power-of-two size */
    int hash_cap;
    int n_slots;
    /* cai_graph_unify: each slot's value at capture, and a union-find over the slots that
     * shape inference found must be equal (NULL: sizes are equal only by id) */
    int64_t *hint;
    int32_t *uf;
    int n_uf;
    bool oom; /* the last failure was an allocation, not a bad graph */
    char err[512];
};

graph *cai_graph_new(void) {
    graph *g = cai_graph_mem_alloc(sizeof *g);
    if (!g)
        return NULL;
    memset(g, 0, sizeof *g);
    g->cap_nodes = 64;
    g->cap_sx = 64;
    g->hash_cap = 128;
    g->nodes = cai_graph_mem_alloc(sizeof(graph_node) * (size_t)g->cap_nodes);
    g->sx = cai_graph_mem_alloc(sizeof(sx_entry) * (size_t)g->cap_sx);
    g->hash = cai_graph_mem_alloc(sizeof(int32_t) * (size_t)g->hash_cap);
    if (!g->nodes || !g->sx || !g->hash) {
        cai_graph_free(g);
        return NULL;
    }
    memset(g->hash, 0xff, sizeof(int32_t) * (size_t)g->hash_cap);
    return g;
}

void cai_graph_free(graph *g) {
    if (!g)
        return;
    cai_graph_mem_free(g->nodes);
    cai_graph_mem_free(g->sx);
    cai_graph_mem_free(g->hash);
    cai_graph_mem_free(g->hint);
    cai_graph_mem_free(g->uf);
    cai_graph_mem_free(g);
}

/* ---------------------------------------------------------------------------------------
 * Unification (cai_graph_unify)
 */
int cai_graph_unify(graph *g, int n, const int64_t *values) {
    cai_graph_mem_free(g->hint);
    cai_graph_mem_free(g->uf);
    g->hint = cai_graph_mem_alloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    g->uf = cai_graph_mem_alloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    g->n_uf = n;
    if (!g->hint || !g->uf) {
        cai_graph_mem_free(g->hint);
        cai_graph_mem_free(g->uf);
        g->hint = NULL;
        g->uf = NULL;
        return cai_graph_fail_nomem(g, "for size unification");
    }
    for (int i = 0; i < n; i++) {
        g->hint[i] = values[i];
        g->uf[i] = i;
    }
    return 0;
}

int cai_graph_unify_find(const graph *g, int slot) {
    if (!g->uf || slot < 0 || slot >= g->n_uf)
        return slot;
    while (g->uf[slot] != slot)
        slot = g->uf[slot];
    return slot;
}

bool cai_graph_sx_same(graph *g, graph_sx a, graph_sx b) {
    if (a == b)
        return true;
    if (!g->uf || a < 0 || b < 0 || a >= g->n_sx || b >= g->n_sx)
        return false;
    const sx_entry *x = &g->sx[a], *y = &g->sx[b];
    if (x->kind != y->kind || x->kind == GSX_CONST)
        return false;
    if (x->kind != GSX_SLOT) /* the same operator over operands that are the same */
        return cai_graph_sx_same(g, (graph_sx)x->a, (graph_sx)y->a) &&
               cai_graph_sx_same(g, (graph_sx)x->b, (graph_sx)y->b);
    int ra = cai_graph_unify_find(g, (int)x->a), rb = cai_graph_unify_find(g, (int)y->a);
    if (ra == rb)
        return true;
    if (ra < 0 || rb < 0 || ra >= g->n_uf || rb >= g->n_uf || g->hint[ra] != g->hint[rb])
        return false;
    g->uf[ra > rb ? ra : rb] = ra < rb ? ra : rb; /* the lower slot is the class's name */
    return true;
}

int cai_graph_fail_nomem(graph *g, const char *what) {
    cai_graph_fail(g, "out of memory %s", what);
    g->oom = true;
    return -1;
}

bool cai_graph_out_of_memory(const graph *g) {
    return g && g->oom;
}

int cai_graph_fail(graph *g, const char *fmt, ...) {
    g->oom = false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err, sizeof g->err, fmt, ap);
    va_end(ap);
    return -1;
}

const char *cai_graph_error(const graph *g) {
    return g ? g->err : "graph is NULL";
}

void cai_graph_clear_error(graph *g) {
    if (g) {
        g->err[0] = '\0';
        g->oom = false;
    }
}

/* ---------------------------------------------------------------------------------------
 * Size expressions: interning
 */
static uint64_t sx_hash(graph_sx_kind k, int64_t a, int64_t b) {
    uint64_t h = (uint64_t)k * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)a + 0x7F4A7C159E3779B9ull + (h << 6) + (h >> 2);
    h ^= (uint64_t)b + 0x94D049BB133111EBull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    return h * 0xBF58476D1CE4E5B9ull;
}

static bool rehash(graph *g, int ncap) {
    int32_t *t = cai_graph_mem_alloc(sizeof(int32_t) * (size_t)ncap);
    if (!t)
        return false;
    memset(t, 0xff, sizeof(int32_t) * (size_t)ncap);
    for (int i = 0; i < g->n_sx; i++) {
        const sx_entry *e = &g->sx[i];
        size_t j = sx_hash(e->kind, e->a, e->b) & (size_t)(ncap - 1);
        while (t[j] >= 0)
            j = (j + 1) & (size_t)(ncap - 1);
        t[j] = i;
    }
    cai_graph_mem_free(g->hash);
    g->hash = t;
    g->hash_cap = ncap;
    return true;
}

static graph_sx intern(graph *g, graph_sx_kind k, int64_t a, int64_t b) {
    size_t mask = (size_t)(g->hash_cap - 1);
    size_t j = sx_hash(k, a, b) & mask;
    for (; g->hash[j] >= 0; j = (j + 1) & mask) {
        const sx_entry *e = &g->sx[g->hash[j]];
        if (e->kind == k && e->a == a && e->b == b)
            return g->hash[j];
    }
    if (2 * (g->n_sx + 1) > g->hash_cap) { /* keep the load under one half */
        if (!rehash(g, g->hash_cap * 2))
            return cai_graph_fail_nomem(g, "growing the size-expression table");
        return intern(g, k, a, b);
    }
    if (!grow((void **)&g->sx, &g->cap_sx, g->n_sx, g->n_sx + 1, sizeof(sx_entry)))
        return cai_graph_fail_nomem(g, "growing the size-expression table");
    g->sx[g->n_sx] = (sx_entry){k, a, b};
    g->hash[j] = g->n_sx;
    return g->n_sx++;
}

static bool sx_valid(const graph *g, graph_sx s) {
    return s >= 0 && s < g->n_sx;
}

graph_sx cai_graph_sx_const(graph *g, int64_t v) {
    return intern(g, GSX_CONST, v, 0);
}

graph_sx cai_graph_sx_slot(graph *g, int slot) {
    if (slot < 0)
        return cai_graph_fail(g, "size slot %d is negative", slot);
    graph_sx s = intern(g, GSX_SLOT, slot, 0);
    if (s >= 0 && slot + 1 > g->n_slots)
        g->n_slots = slot + 1;
    return s;
}

bool cai_graph_sx_const_value(const graph *g, graph_sx s, int64_t *v) {
    if (!sx_valid(g, s) || g->sx[s].kind != GSX_CONST)
        return false;
    if (v)
        *v = g->sx[s].a;
    return true;
}

bool cai_graph_sx_is(const graph *g, graph_sx s, int64_t v) {
    int64_t c;
    return cai_graph_sx_const_value(g, s, &c) && c == v;
}

/* ---------------------------------------------------------------------------------------
 * Size expressions: folding
 */
static graph_sx fold_consts(graph *g, graph_sx_kind k, int64_t a, int64_t b) {
    switch (k) {
    case GSX_ADD: return cai_graph_sx_const(g, a + b);
    case GSX_SUB: return cai_graph_sx_const(g, a - b);
    case GSX_MUL: return cai_graph_sx_const(g, a * b);
    default:
        if (b == 0)
            return cai_graph_fail(g, "size expression divides %lld by zero", (long long)a);
        return cai_graph_sx_const(g, a / b);
    }
}

/* (x op c1) op c2 -> x op (c1 op c2) for op in {+, *}, so constants gather in one place. */
static graph_sx fold_assoc(graph *g, graph_sx_kind k, graph_sx a, int64_t cb) {
    const sx_entry *e = &g->sx[a];
    int64_t c1;
    if (e->kind != k || !cai_graph_sx_const_value(g, (graph_sx)e->b, &c1))
        return -2;
    graph_sx c = cai_graph_sx_const(g, k == GSX_ADD ? c1 + cb : c1 * cb);
    return c < 0 ? c : cai_graph_sx_op(g, k, (graph_sx)e->a, c);
}

/* (x*y)/y -> x, (x*y)/x -> y, (x*c1)/c2 -> x*(c1/c2) when c2 divides c1. */
static graph_sx fold_div(graph *g, graph_sx a, graph_sx b) {
    const sx_entry *e = &g->sx[a];
    if (e->kind != GSX_MUL)
        return -2;
    if (e->b == b)
        return (graph_sx)e->a;
    if (e->a == b)
        return (graph_sx)e->b;
    int64_t c1, c2;
    if (cai_graph_sx_const_value(g, (graph_sx)e->b, &c1) && cai_graph_sx_const_value(g, b, &c2) &&
        c2 != 0 && c1 % c2 == 0) {
        graph_sx c = cai_graph_sx_const(g, c1 / c2);
        return c < 0 ? c : cai_graph_sx_op(g, GSX_MUL, (graph_sx)e->a, c);
    }
    return -2;
}

/* An existing id for a op b, or -2 when nothing folds. */
static graph_sx fold(graph *g, graph_sx_kind k, graph_sx a, graph_sx b) {
    int64_t cb;
    bool bconst = cai_graph_sx_const_value(g, b, &cb);
    switch (k) {
    case GSX_ADD:
        if (bconst && cb == 0)
            return a;
        return bconst ? fold_assoc(g, k, a, cb) : -2;
    case GSX_SUB:
        if (bconst && cb == 0)
            return a;
        if (a == b)
            return cai_graph_sx_const(g, 0);
        if (g->sx[a].kind == GSX_ADD && (g->sx[a].a == b || g->sx[a].b == b))
            return (graph_sx)(g->sx[a].a == b ? g->sx[a].b : g->sx[a].a); /* (x + y) - x */
        return -2;
    case GSX_MUL:
        if (bconst && cb == 1)
            return a;
        if (bconst && cb == 0)
            return b;
        return bconst ? fold_assoc(g, k, a, cb) : -2;
    default:
        if (bconst && cb == 0)
            return cai_graph_fail(g, "size expression divides by zero");
        if (bconst && cb == 1)
            return a;
        if (a == b) /* symbols are nonzero (the cache guards them >= 1) */
            return cai_graph_sx_const(g, 1);
        return fold_div(g, a, b);
    }
}

graph_sx cai_graph_sx_op(graph *g, graph_sx_kind k, graph_sx a, graph_sx b) {
    if (k < GSX_ADD || k > GSX_DIV)
        return cai_graph_fail(g, "size expression kind %d is not an operator", (int)k);
    if (!sx_valid(g, a) || !sx_valid(g, b))
        return cai_graph_fail(g, "size expression operands %d and %d: not in the table", a, b);
    int64_t va, vb;
    bool ca = cai_graph_sx_const_value(g, a, &va), cb = cai_graph_sx_const_value(g, b, &vb);
    if (ca && cb)
        return fold_consts(g, k, va, vb);
    /* Commutative ops get one spelling: the constant second, else the lower id first. */
    if ((k == GSX_ADD || k == GSX_MUL) && (ca || (!cb && a > b))) {
        graph_sx t = a;
        a = b;
        b = t;
    }
    graph_sx f = fold(g, k, a, b);
    if (f != -2)
        return f;
    return intern(g, k, a, b);
}

/* ---------------------------------------------------------------------------------------
 * Size expressions: evaluation and printing
 */
int64_t cai_graph_sx_eval(const graph *g, graph_sx s, const int64_t *slots) {
    if (!sx_valid(g, s))
        return 0;
    const sx_entry *e = &g->sx[s];
    if (e->kind == GSX_CONST)
        return e->a;
    if (e->kind == GSX_SLOT)
        return slots ? slots[e->a] : 0;
    int64_t a = cai_graph_sx_eval(g, (graph_sx)e->a, slots);
    int64_t b = cai_graph_sx_eval(g, (graph_sx)e->b, slots);
    switch (e->kind) {
    case GSX_ADD: return a + b;
    case GSX_SUB: return a - b;
    case GSX_MUL: return a * b;
    default: return b != 0 ? a / b : 0;
    }
}

int cai_graph_sx_count(const graph *g) {
    return g->n_sx;
}

graph_sx_kind cai_graph_sx_get(const graph *g, graph_sx s, int64_t *a, int64_t *b) {
    const sx_entry *e = &g->sx[s];
    *a = e->a;
    *b = e->b;
    return e->kind;
}

typedef struct {
    char *buf;
    size_t size, len;
} strout;

static void out_str(strout *o, const char *s) {
    for (; *s && o->len + 1 < o->size; s++)
        o->buf[o->len++] = *s;
    o->buf[o->len] = '\0';
}

static int sx_prec(const sx_entry *e) {
    return e->kind == GSX_ADD || e->kind == GSX_SUB ? 1 : e->kind == GSX_CONST ? 3 : 2;
}

/* Print s; parenthesise when its precedence is below `need`. */
static void sx_print(const graph *g, graph_sx s, int need, strout *o) {
    static const char *const ops[] = {"", "", "+", "-", "*", "//"};
    if (!sx_valid(g, s)) {
        out_str(o, "?");
        return;
    }
    const sx_entry *e = &g->sx[s];
    char tmp[32];
    if (e->kind == GSX_CONST || e->kind == GSX_SLOT) {
        snprintf(tmp, sizeof tmp, e->kind == GSX_SLOT ? "s%lld" : "%lld", (long long)e->a);
        out_str(o, tmp);
        return;
    }
    int p = sx_prec(e);
    if (p < need)
        out_str(o, "(");
    /* The right operand of - and // binds tighter: a-(b+c), a//(b*c). */
    int right = e->kind == GSX_SUB || e->kind == GSX_DIV ? p + 1 : p;
    sx_print(g, (graph_sx)e->a, p, o);
    out_str(o, ops[e->kind]);
    sx_print(g, (graph_sx)e->b, right, o);
    if (p < need)
        out_str(o, ")");
}

const char *cai_graph_sx_str(const graph *g, graph_sx s, char *buf, size_t size) {
    if (!buf || size == 0)
        return buf;
    strout o = {buf, size, 0};
    buf[0] = '\0';
    sx_print(g, s, 0, &o);
    return buf;
}

const char *cai_graph_shape_str(const graph *g, int n, const graph_sx *shape, char *buf,
                                size_t size) {
    if (!buf || size == 0)
        return buf;
    strout o = {buf, size, 0};
    buf[0] = '\0';
    out_str(&o, "[");
    for (int d = 0; d < n; d++) {
        if (d > 0)
            out_str(&o, ", ");
        sx_print(g, shape[d], 0, &o);
    }
    out_str(&o, "]");
    return buf;
}

/* ---------------------------------------------------------------------------------------
 * Nodes
 */
graph_val cai_graph_add(graph *g, const graph_op_args *a, graph_origin origin) {
    if (!g)
        return -1;
    if (!a)
        return cai_graph_fail(g, "cai_graph_add: args are NULL");
    if (!grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes, g->n_nodes + 1, sizeof(graph_node)))
        return cai_graph_fail_nomem(g, "growing the node list");
    graph_node n;
    memset(&n, 0, sizeof n);
    n.a = *a;
    n.origin = origin;
    n.alias = -1;
    if (cai_graph_infer(g, &n) != 0)
        return -1;
    g->nodes[g->n_nodes] = n;
    return g->n_nodes++;
}

int cai_graph_count(const graph *g) {
    return g ? g->n_nodes : 0;
}

const graph_node *cai_graph_node_at(const graph *g, graph_val v) {
    return g && v >= 0 && v < g->n_nodes ? &g->nodes[v] : NULL;
}

graph_node *cai_graph_node_mut(graph *g, graph_val v) {
    return g && v >= 0 && v < g->n_nodes ? &g->nodes[v] : NULL;
}

graph_val cai_graph_resolve(const graph *g, graph_val v) {
    const graph_node *x = cai_graph_node_at(g, v);
    while (x && x->alias >= 0) {
        v = x->alias;
        x = cai_graph_node_at(g, v);
    }
    return v;
}

void cai_graph_eval_shape(const graph *g, graph_val v, const int64_t *slots, int64_t *shape) {
    const graph_node *n = cai_graph_node_at(g, v);
    if (!n || !shape)
        return;
    for (int d = 0; d < n->ndim; d++)
        shape[d] = cai_graph_sx_eval(g, n->shape[d], slots);
}

int cai_graph_n_slots(const graph *g) {
    return g ? g->n_slots : 0;
}

/* ---------------------------------------------------------------------------------------
 * Op facts
 */
static const struct {
    const char *name;
    int8_t n_in, n_ints;
    uint8_t flags;
} graph_op_info[GOP__COUNT] = {
#define GRAPH_OP_INFO(NAME, PRINTED, N_IN, N_INTS, FL) [GOP_##NAME] = {PRINTED, N_IN, N_INTS, FL},
    GRAPH_OPS(GRAPH_OP_INFO)
#undef GRAPH_OP_INFO
};

const char *cai_graph_op_name(graph_op op) {
    return (unsigned)op < GOP__COUNT ? graph_op_info[op].name : "?";
}

int cai_graph_op_n_in(graph_op op) {
    return (unsigned)op < GOP__COUNT ? graph_op_info[op].n_in : 0;
}

int cai_graph_op_n_ints(graph_op op) {
    return (unsigned)op < GOP__COUNT ? graph_op_info[op].n_ints : 0;
}

bool cai_graph_op_uses_shape(graph_op op) {
    return (unsigned)op < GOP__COUNT && (graph_op_info[op].flags & GOPF_SHAPE);
}

bool cai_graph_op_is_side_effect(graph_op op) {
    return (unsigned)op < GOP__COUNT && (graph_op_info[op].flags & GOPF_SIDE);
}

bool cai_graph_op_has_value(graph_op op) {
    return (unsigned)op < GOP__COUNT && !(graph_op_info[op].flags & GOPF_NOVALUE);
}
