/* plan.c - the memory plan of a graph and the runner that executes it.
 *
 * Planning (once per graph) decides, per node, where its value lives:
 *  - INPUT: the caller's view;
 *  - views (expand, permute, unsqueeze, slice): a view of their input, no memory;
 *  - reshape and contiguous: a view when the input's strides allow, else a copy. Input
 *    strides can differ between runs, so this is decided at run time; the plan gives
 *    them a buffer that is used only when a copy is needed;
 *  - call-outs: no memory (a hook's value is its replacement or its input);
 *  - everything else: a buffer in the arena.
 * Liveness runs over the node order (a view keeps its base alive), and a freed buffer is
 * reused by a later value of provably no larger size. Sizes are symbolic, so a buffer's
 * size is (constant bytes) x (a product of size expressions): reuse needs the same
 * symbolic factors, and the constant grows to the largest user.
 *
 * Running evaluates every size expression in one pass, lays the buffers out (prefix sums,
 * 64-byte aligned), then walks the nodes computing views and calling kernels and the
 * caller's callbacks. Every scratch array the run needs is allocated by graph_plan_new,
 * so a run allocates nothing.
 */
#include "codegen/cast.h"
#include "graph/graph.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The reduction codes of nll_loss (cagrad.h's ca_reduction; graph cannot include it). */
enum { RED_NONE = 0, RED_MEAN = 1 };

enum { PK_SKIP, PK_INPUT, PK_VIEW, PK_MAYBE_VIEW, PK_BUFFER, PK_HOOK, PK_CALL };

#define N_TMP 3   /* temporaries per node: operand copies, scatter_add's block */
#define ALIGN 64u /* buffer alignment in the arena */

typedef struct {
    int8_t kind;
    int32_t buf;        /* the value's buffer, or -1 */
    int32_t tmp[N_TMP]; /* temporaries, or -1 */
} plan_node;

/* A buffer's size: cbytes times the product of the symbolic factors (sorted ids). */
typedef struct {
    int64_t cbytes;
    int nsym;
    graph_sx sym[KERN_MAX_DIMS];
} plan_buf;

/* One size expression, for the evaluation pass. */
typedef struct {
    int8_t kind;
    int32_t a, b; /* operand ids */
    int64_t c;    /* constant value or slot number */
} sx_step;

struct graph_plan {
    const graph *g;
    int n_nodes, n_sx, n_bufs;
    plan_node *nodes;
    plan_buf *bufs;
    sx_step *prog;
    int64_t *val;      /* run scratch: every expression's value */
    int64_t *offset;   /* run scratch: each buffer's byte offset */
    graph_view *views; /* run scratch: each node's value */
    char err[256];
};

/* ---------------------------------------------------------------------------------------
 * Planning
 */
static int8_t kind_of(const graph_node *x) {
    if (x->dead)
        return PK_SKIP;
    switch (x->a.op) {
    case GOP_INPUT: return PK_INPUT;
    case GOP_EXPAND:
    case GOP_PERMUTE:
    case GOP_UNSQUEEZE:
    case GOP_SLICE: return PK_VIEW;
    case GOP_RESHAPE:
    case GOP_CONTIGUOUS: return PK_MAYBE_VIEW;
    case GOP_HOOK: return PK_HOOK;
    case GOP_RETAIN:
    case GOP_ACCUMULATE:
    case GOP_POST_HOOK:
    case GOP_OUTPUT: return PK_CALL;
    default: return PK_BUFFER;
    }
}

/* Whether v's layout is unknown until run time (so a kernel that wants contiguous data
 * may need a copy). Buffers and contiguous' result are always contiguous. */
static bool maybe_strided(const graph *g, const plan_node *pn, graph_val v) {
    int8_t k = pn[v].kind;
    return k == PK_INPUT || k == PK_VIEW || k == PK_HOOK ||
           (k == PK_MAYBE_VIEW && graph_node_at(g, v)->a.op == GOP_RESHAPE);
}

static void key_of(const graph *g, int nd, const graph_sx *shape, kern_dtype dt, plan_buf *k) {
    k->cbytes = (int64_t)kern_dtype_size(dt);
    k->nsym = 0;
    for (int d = 0; d < nd; d++) {
        int64_t c;
        if (graph_sx_const_value(g, shape[d], &c)) {
            k->cbytes *= c;
            continue;
        }
        int j = k->nsym++;
        for (; j > 0 && k->sym[j - 1] > shape[d]; j--) /* insertion keeps them sorted */
            k->sym[j] = k->sym[j - 1];
        k->sym[j] = shape[d];
    }
}

static bool same_syms(const plan_buf *a, const plan_buf *b) {
    return a->nsym == b->nsym && memcmp(a->sym, b->sym, sizeof(graph_sx) * (size_t)a->nsym) == 0;
}

typedef struct {
    plan_node *nodes;
    int32_t *last;  /* last node that may read each value (n_nodes: the end of the run) */
    int32_t *head;  /* per node: the first owner whose value dies there */
    int32_t *next;  /* per owner: the next in its list */
    plan_buf *bufs; /* at most N_TMP + 1 per node */
    bool *busy;
    int n_bufs;
} planner;

/* A free buffer with the same symbolic factors (the smallest big enough, else the
 * largest, grown), or a new one. */
static int32_t take_buf(planner *pl, const plan_buf *key) {
    int best = -1;
    for (int b = 0; b < pl->n_bufs; b++) {
        const plan_buf *c = &pl->bufs[b];
        if (pl->busy[b] || !same_syms(c, key))
            continue;
        if (best < 0) {
            best = b;
            continue;
        }
        int64_t have = pl->bufs[best].cbytes;
        bool fits = c->cbytes >= key->cbytes, best_fits = have >= key->cbytes;
        if ((fits && (!best_fits || c->cbytes < have)) || (!fits && !best_fits && c->cbytes > have))
            best = b;
    }
    if (best < 0) {
        best = pl->n_bufs++;
        pl->bufs[best] = *key;
    } else if (pl->bufs[best].cbytes < key->cbytes) {
        pl->bufs[best].cbytes = key->cbytes;
    }
    pl->busy[best] = true;
    return best;
}

static void val_key(const graph *g, graph_val v, plan_buf *k) {
    const graph_node *x = graph_node_at(g, v);
    key_of(g, x->ndim, x->shape, x->dtype, k);
}

/* scatter_add needs a block when the index is smaller than the output in a kept dim. */
static bool scatter_block_key(const graph *g, const graph_node *x, plan_buf *k) {
    const graph_node *idx = graph_node_at(g, x->a.in[0]);
    graph_sx bm[KERN_MAX_DIMS];
    bool differs = false;
    for (int d = 0; d < x->ndim; d++) {
        bm[d] = d == x->a.i[0] ? x->shape[d] : idx->shape[d];
        differs = differs || bm[d] != x->shape[d];
    }
    key_of(g, x->ndim, bm, x->dtype, k);
    return differs;
}

static void take_temps(planner *pl, const graph *g, graph_val v) {
    const graph_node *x = graph_node_at(g, v);
    plan_node *pn = &pl->nodes[v];
    plan_buf k;
    bool copies = x->a.op == GOP_MATMUL || x->a.op == GOP_INDEX_ADD || x->a.op == GOP_SCATTER_ADD;
    for (int i = 0; copies && i < 2; i++) {
        if (!maybe_strided(g, pl->nodes, x->a.in[i]))
            continue;
        val_key(g, x->a.in[i], &k);
        pn->tmp[i] = take_buf(pl, &k);
    }
    if (x->a.op == GOP_SCATTER_ADD && scatter_block_key(g, x, &k))
        pn->tmp[2] = take_buf(pl, &k);
}

/* v is read at step `use`: it, and the bases of the views it may be, stay alive. */
static void mark_use(planner *pl, const graph *g, graph_val v, int32_t use) {
    while (v >= 0) {
        if (pl->last[v] < use)
            pl->last[v] = use;
        int8_t k = pl->nodes[v].kind;
        if (k != PK_VIEW && k != PK_MAYBE_VIEW && k != PK_HOOK)
            break;
        v = graph_node_at(g, v)->a.in[0];
    }
}

static void liveness(planner *pl, const graph *g, int n) {
    for (int v = 0; v < n; v++)
        pl->last[v] = v;
    for (int v = 0; v < n; v++) {
        const graph_node *x = graph_node_at(g, v);
        if (pl->nodes[v].kind == PK_SKIP || x->a.op == GOP_POST_HOOK)
            continue;
        /* outputs stay readable after the run, until the arena is reused */
        int32_t use = x->a.op == GOP_OUTPUT ? n : v;
        for (int k = 0; k < x->a.n_in; k++)
            mark_use(pl, g, x->a.in[k], use);
    }
    for (int t = 0; t <= n; t++)
        pl->head[t] = -1;
    for (int v = 0; v < n; v++) {
        int8_t k = pl->nodes[v].kind;
        if (k == PK_BUFFER || k == PK_MAYBE_VIEW) {
            pl->next[v] = pl->head[pl->last[v]];
            pl->head[pl->last[v]] = v;
        }
    }
}

/* Greedy assignment in node order: a node's temporaries and value take buffers before it
 * runs; its temporaries and the values whose last reader it is free them after. */
static void assign(planner *pl, const graph *g, int n) {
    for (int v = 0; v < n; v++) {
        plan_node *pn = &pl->nodes[v];
        if (pn->kind == PK_SKIP)
            continue;
        take_temps(pl, g, v);
        if (pn->kind == PK_BUFFER || pn->kind == PK_MAYBE_VIEW) {
            plan_buf k;
            val_key(g, v, &k);
            pn->buf = take_buf(pl, &k);
        }
        for (int i = 0; i < N_TMP; i++)
            if (pn->tmp[i] >= 0)
                pl->busy[pn->tmp[i]] = false;
        for (int32_t o = pl->head[v]; o >= 0; o = pl->next[o])
            pl->busy[pl->nodes[o].buf] = false;
    }
}

static size_t round16(size_t n) {
    return (n + 15) & ~(size_t)15;
}

/* The plan and all its run scratch in one block. */
static graph_plan *plan_alloc(const graph *g, int n, int n_sx, int n_bufs) {
    size_t s_plan = round16(sizeof(graph_plan)), s_nodes = round16(sizeof(plan_node) * (size_t)n);
    size_t s_bufs = round16(sizeof(plan_buf) * (size_t)n_bufs);
    size_t s_prog = round16(sizeof(sx_step) * (size_t)n_sx);
    size_t s_val = round16(sizeof(int64_t) * (size_t)n_sx);
    size_t s_off = round16(sizeof(int64_t) * (size_t)n_bufs);
    size_t s_views = round16(sizeof(graph_view) * (size_t)n);
    char *m = graph_mem_alloc(s_plan + s_nodes + s_bufs + s_prog + s_val + s_off + s_views);
    if (!m)
        return NULL;
    graph_plan *p = (graph_plan *)m;
    memset(p, 0, sizeof *p);
    p->g = g;
    p->n_nodes = n;
    p->n_sx = n_sx;
    p->n_bufs = n_bufs;
    m += s_plan;
    p->nodes = (plan_node *)m;
    m += s_nodes;
    p->bufs = (plan_buf *)m;
    m += s_bufs;
    p->prog = (sx_step *)m;
    m += s_prog;
    p->val = (int64_t *)m;
    m += s_val;
    p->offset = (int64_t *)m;
    m += s_off;
    p->views = (graph_view *)m;
    return p;
}

static void compile_sx(graph_plan *p) {
    for (int s = 0; s < p->n_sx; s++) {
        int64_t a, b;
        graph_sx_kind k = graph_sx_get(p->g, s, &a, &b);
        p->prog[s] = (sx_step){.kind = (int8_t)k, .a = (int32_t)a, .b = (int32_t)b, .c = a};
    }
}

graph_plan *graph_plan_new(const graph *g) {
    if (!g)
        return NULL;
    int n = graph_count(g), max_bufs = (N_TMP + 1) * n;
    size_t s_nodes = round16(sizeof(plan_node) * (size_t)n);
    size_t s_idx = round16(sizeof(int32_t) * (size_t)(n + 1));
    size_t s_bufs = round16(sizeof(plan_buf) * (size_t)max_bufs);
    char *scratch = graph_mem_alloc(s_nodes + 3 * s_idx + s_bufs + (size_t)max_bufs + 16);
    if (!scratch)
        return NULL;
    planner pl = {.nodes = (plan_node *)scratch};
    pl.last = (int32_t *)(scratch + s_nodes);
    pl.head = (int32_t *)(scratch + s_nodes + s_idx);
    pl.next = (int32_t *)(scratch + s_nodes + 2 * s_idx);
    pl.bufs = (plan_buf *)(scratch + s_nodes + 3 * s_idx);
    pl.busy = (bool *)(scratch + s_nodes + 3 * s_idx + s_bufs);
    memset(pl.busy, 0, (size_t)max_bufs);
    for (int v = 0; v < n; v++)
        pl.nodes[v] = (plan_node){kind_of(graph_node_at(g, v)), -1, {-1, -1, -1}};
    liveness(&pl, g, n);
    assign(&pl, g, n);
    graph_plan *p = plan_alloc(g, n, graph_sx_count(g), pl.n_bufs);
    if (p) {
        if (n > 0)
            memcpy(p->nodes, pl.nodes, sizeof(plan_node) * (size_t)n);
        if (pl.n_bufs > 0)
            memcpy(p->bufs, pl.bufs, sizeof(plan_buf) * (size_t)pl.n_bufs);
        compile_sx(p);
    }
    graph_mem_free(scratch);
    return p;
}

void graph_plan_free(graph_plan *p) {
    graph_mem_free(p);
}

const char *graph_plan_error(const graph_plan *p) {
    return p ? p->err : "plan is NULL";
}

/* ---------------------------------------------------------------------------------------
 * Sizes and layout
 */
static size_t align_up(int64_t n) {
    return n <= 0 ? 0 : ((size_t)n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

/* vals: every expression's value (the run's pass), or NULL to evaluate each factor. */
static int64_t buf_bytes(const graph_plan *p, const plan_buf *b, const int64_t *vals,
                         const int64_t *slots) {
    int64_t n = b->cbytes;
    for (int i = 0; i < b->nsym; i++)
        n *= vals ? vals[b->sym[i]] : graph_sx_eval(p->g, b->sym[i], slots);
    return n;
}

size_t graph_plan_arena_bytes(const graph_plan *p, const int64_t *slots) {
    size_t total = 0;
    for (int b = 0; p && b < p->n_bufs; b++)
        total += align_up(buf_bytes(p, &p->bufs[b], NULL, slots));
    return total;
}

/* Operands precede users in the table, so one pass in id order evaluates everything. */
static void eval_sizes(graph_plan *p, const int64_t *slots) {
    int64_t *v = p->val;
    for (int s = 0; s < p->n_sx; s++) {
        const sx_step *e = &p->prog[s];
        switch (e->kind) {
        case GSX_CONST: v[s] = e->c; break;
        case GSX_SLOT: v[s] = slots ? slots[e->c] : 0; break;
        case GSX_ADD: v[s] = v[e->a] + v[e->b]; break;
        case GSX_SUB: v[s] = v[e->a] - v[e->b]; break;
        case GSX_MUL: v[s] = v[e->a] * v[e->b]; break;
        default: v[s] = v[e->b] != 0 ? v[e->a] / v[e->b] : 0; break;
        }
    }
    int64_t off = 0;
    for (int b = 0; b < p->n_bufs; b++) {
        p->offset[b] = off;
        off += (int64_t)align_up(buf_bytes(p, &p->bufs[b], v, slots));
    }
}

/* ---------------------------------------------------------------------------------------
 * Views
 */
typedef struct {
    graph_plan *p;
    char *arena;
    const graph_callbacks *cb;
} run_ctx;

static int fail(graph_plan *p, graph_val v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Record "value v (op): message" for graph_plan_error; returns -1. */
static int fail(graph_plan *p, graph_val v, const char *fmt, ...) {
    const graph_node *x = graph_node_at(p->g, v);
    int n = snprintf(p->err, sizeof p->err, "value %d (%s): ", v, graph_op_name(x->a.op));
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof p->err)
        vsnprintf(p->err + n, sizeof p->err - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static int kern_fail(graph_plan *p, graph_val v, int rc, const char *what) {
    if (rc == -2)
        return fail(p, v, "%s: out of memory for kernel scratch", what);
    return fail(p, v, "%s: the kernel failed (%d); dtype or arguments unsupported", what, rc);
}

static void contig_strides(int nd, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    if (nd <= 0 || nd > KERN_MAX_DIMS)
        return;
    for (int d = nd - 1; d >= 0; d--) {
        strides[d] = s;
        s *= shape[d] > 1 ? shape[d] : 1;
    }
}

static int64_t numel(const graph_view *v) {
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++)
        n *= v->shape[d];
    return n;
}

static bool is_contig(const graph_view *v) {
    int64_t want = 1;
    for (int d = v->ndim - 1; d >= 0; d--) {
        if (v->shape[d] != 1 && v->strides[d] != want)
            return false;
        want *= v->shape[d];
    }
    return true;
}

static size_t esize(const graph_view *v) {
    return kern_dtype_size(v->dtype);
}

/* The node's output over `data`, contiguous, with its evaluated shape. */
static void node_view(const graph_plan *p, const graph_node *x, void *data, graph_view *out) {
    out->data = data;
    out->dtype = x->dtype;
    out->ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++)
        out->shape[d] = p->val[x->shape[d]];
    contig_strides(out->ndim, out->shape, out->strides);
}

static void *buf_ptr(const run_ctx *r, int32_t b) {
    return b >= 0 ? r->arena + r->p->offset[b] : NULL;
}

static const graph_view *in_view(const run_ctx *r, const graph_node *x, int k) {
    return &r->p->views[x->a.in[k]];
}

static int copy_strided(void *dst, const int64_t *dst_strides, const graph_view *src) {
    kern_src s = {.data = src->data};
    memcpy(s.strides, src->strides, sizeof s.strides);
    return kern_pointwise(KPW_COPY, src->dtype, src->dtype, src->ndim, src->shape, dst, dst_strides,
                          &s, 0, 0);
}

/* A contiguous copy of src into dst; *out becomes that copy. */
static int copy_contig(void *dst, const graph_view *src, graph_view *out) {
    graph_view c = *src;
    c.data = dst;
    contig_strides(c.ndim, c.shape, c.strides);
    int rc = copy_strided(dst, c.strides, src);
    *out = c;
    return rc;
}

static int fill_zero(const graph_view *out) {
    kern_src none = {.data = NULL};
    return kern_pointwise(KPW_FILL, out->dtype, out->dtype, out->ndim, out->shape, out->data,
                          out->strides, &none, 0, 0);
}

/* src's strides per dim of `out` when broadcast to it (0 where it broadcasts). */
static void bcast_src(const graph_view *in, const graph_view *out, kern_src *s) {
    int lead = out->ndim - in->ndim;
    s->data = in->data;
    for (int i = 0; i < out->ndim; i++) {
        int d = i - lead;
        s->strides[i] = d < 0 || in->shape[d] != out->shape[i] ? 0 : in->strides[d];
    }
}

/* Strides that read (on, oshape, ostr) as nshape without copying, if they exist. Old dims
 * form runs that are contiguous among themselves; each run must be covered exactly by
 * consecutive new dims, which step through it row-major from the run's inner stride. */
static bool reshape_strides(const graph_view *in, graph_view *out) {
    int on = in->ndim, nn = out->ndim;
    const int64_t *oshape = in->shape, *ostr = in->strides;
    if (numel(in) <= 1) {
        contig_strides(nn, out->shape, out->strides);
        return true;
    }
    int nd = nn - 1;
    int64_t run = 1, covered = 1, base = ostr[on - 1];
    for (int od = on - 1; od >= 0; od--) {
        run *= oshape[od];
        if (od > 0 && (oshape[od - 1] == 1 || ostr[od - 1] == run * base))
            continue; /* the run goes on */
        while (nd >= 0 && (covered < run || out->shape[nd] == 1)) {
            out->strides[nd] = covered * base;
            covered *= out->shape[nd];
            nd--;
        }
        if (covered != run)
            return false;
        if (od > 0) {
            base = ostr[od - 1];
            run = covered = 1;
        }
    }
    return nd < 0;
}

/* ---------------------------------------------------------------------------------------
 * Nodes without kernels
 */
/* "f32[2, 3]" into buf (size >= 96). */
static const char *view_str(kern_dtype dt, int nd, const int64_t *shape, char *buf) {
    static const char *const names[] = {"f32", "f64", "i64"};
    size_t size = 96;
    int len = snprintf(buf, size, "%s[", (unsigned)dt <= KERN_I64 ? names[dt] : "?");
    for (int d = 0; d < nd && len > 0 && (size_t)len < size; d++)
        len +=
            snprintf(buf + len, size - (size_t)len, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (len > 0 && (size_t)len < size)
        snprintf(buf + len, size - (size_t)len, "]");
    return buf;
}

static bool view_matches(const graph_view *v, kern_dtype dt, int nd, const int64_t *shape) {
    if (v->dtype != dt || v->ndim != nd)
        return false;
    for (int d = 0; d < nd; d++)
        if (v->shape[d] != shape[d])
            return false;
    return true;
}

static int bind_input(run_ctx *r, graph_val v, const graph_view *inputs) {
    const graph_node *x = graph_node_at(r->p->g, v);
    graph_view want;
    node_view(r->p, x, NULL, &want);
    if (!inputs)
        return fail(r->p, v, "input %lld is missing (inputs is NULL)", (long long)x->a.i[0]);
    const graph_view *in = &inputs[x->a.i[0]];
    char b1[96], b2[96];
    if (!view_matches(in, want.dtype, want.ndim, want.shape))
        return fail(r->p, v, "input %lld is %s but the graph expects %s for these sizes",
                    (long long)x->a.i[0], view_str(in->dtype, in->ndim, in->shape, b1),
                    view_str(want.dtype, want.ndim, want.shape, b2));
    r->p->views[v] = *in;
    return 0;
}

static int run_view(run_ctx *r, graph_val v) {
    const graph_node *x = graph_node_at(r->p->g, v);
    const graph_view *in = in_view(r, x, 0);
    graph_view *out = &r->p->views[v];
    node_view(r->p, x, in->data, out);
    int lead = out->ndim - in->ndim, d = (int)x->a.i[0];
    switch (x->a.op) {
    case GOP_EXPAND:
        for (int i = 0; i < out->ndim; i++)
            out->strides[i] =
                i < lead || in->shape[i - lead] != out->shape[i] ? 0 : in->strides[i - lead];
        break;
    case GOP_PERMUTE:
        for (int i = 0; i < out->ndim; i++)
            out->strides[i] = in->strides[x->a.perm[i]];
        break;
    case GOP_UNSQUEEZE:
        for (int i = 0, j = 0; i < out->ndim; i++)
            out->strides[i] =
                i == d ? (d < in->ndim ? in->shape[d] * in->strides[d] : 1) : in->strides[j++];
        break;
    default: /* GOP_SLICE */
        if (x->a.i[2] > in->shape[d])
            return fail(r->p, v, "slice end %lld is past the end of dim %d (size %lld)",
                        (long long)x->a.i[2], d, (long long)in->shape[d]);
        memcpy(out->strides, in->strides, sizeof out->strides);
        out->strides[d] *= x->a.i[3];
        out->data = (char *)in->data + x->a.i[1] * in->strides[d] * (int64_t)esize(in);
        break;
    }
    return 0;
}

/* reshape and contiguous: a view when the strides allow, else a copy into the buffer. */
static int run_maybe_view(run_ctx *r, graph_val v) {
    const graph_node *x = graph_node_at(r->p->g, v);
    const graph_view *in = in_view(r, x, 0);
    graph_view *out = &r->p->views[v];
    node_view(r->p, x, in->data, out);
    if (x->a.op == GOP_RESHAPE && numel(in) != numel(out))
        return fail(r->p, v,
                    "reshape: %lld elements cannot be viewed as %lld (the sizes this "
                    "graph was compiled for no longer hold)",
                    (long long)numel(in), (long long)numel(out));
    bool ok = x->a.op == GOP_RESHAPE ? reshape_strides(in, out) : is_contig(in);
    if (ok)
        return 0;
    graph_view c;
    int rc = copy_contig(buf_ptr(r, r->p->nodes[v].buf), in, &c);
    if (rc)
        return kern_fail(r->p, v, rc, "copy");
    node_view(r->p, x, c.data, out);
    return 0;
}

static int run_hook(run_ctx *r, graph_val v) {
    const graph_node *x = graph_node_at(r->p->g, v);
    const graph_view *in = in_view(r, x, 0);
    graph_view repl;
    memset(&repl, 0, sizeof repl);
    int rc = r->cb->call ? r->cb->call(r->cb->ctx, x, in, &repl) : 0;
    if (rc)
        return rc;
    if (!repl.data) {
        r->p->views[v] = *in;
        return 0;
    }
    char b1[96], b2[96];
    if (!view_matches(&repl, in->dtype, in->ndim, in->shape))
        return fail(r->p, v,
                    "hook %lld returned a gradient %s for a gradient %s; a hook must keep the "
                    "dtype and shape",
                    (long long)x->a.i[0], view_str(repl.dtype, repl.ndim, repl.shape, b1),
                    view_str(in->dtype, in->ndim, in->shape, b2));
    r->p->views[v] = repl;
    return 0;
}

static int run_call(run_ctx *r, graph_val v) {
    const graph_node *x = graph_node_at(r->p->g, v);
    if (!r->cb->call)
        return 0;
    const graph_view *in = x->a.op == GOP_POST_HOOK ? NULL : in_view(r, x, 0);
    return r->cb->call(r->cb->ctx, x, in, NULL);
}

/* ---------------------------------------------------------------------------------------
 * Kernels: pointwise, reductions, copies
 */
static int run_pw(run_ctx *r, const graph_node *x, const graph_view *out) {
    kern_pw_op k = (kern_pw_op)x->a.i[0];
    kern_src src[GRAPH_MAX_IN];
    memset(src, 0, sizeof src);
    for (int i = 0; i < x->a.n_in; i++)
        bcast_src(in_view(r, x, i), out, &src[i]);
    int cond = k == KPW_WHERE ? 0 : k == KPW_MASKED_FILL ? 1 : -1;
    kern_dtype cond_dt = cond >= 0 ? in_view(r, x, cond)->dtype : out->dtype;
    return kern_pointwise(k, out->dtype, cond_dt, out->ndim, out->shape, out->data, out->strides,
                          src, x->a.p[0], x->a.p[1]);
}

/* x * (p / N): N is evaluated for this run, so one graph serves every size. */
static int run_scale_size(run_ctx *r, const graph_node *x, const graph_view *out) {
    kern_src src;
    bcast_src(in_view(r, x, 0), out, &src);
    double n = (double)r->p->val[x->a.shape[0]];
    return kern_pointwise(KPW_MUL_S, out->dtype, out->dtype, out->ndim, out->shape, out->data,
                          out->strides, &src, x->a.p[0] / n, 0);
}

static int run_sum(run_ctx *r, const graph_node *x, const graph_view *out) {
    const graph_view *in = in_view(r, x, 0);
    return kern_reduce(KRED_SUM, in->dtype, in->ndim, in->shape, in->data, in->strides,
                       (uint32_t)x->a.i[0], out->data, NULL);
}

/* Sum the leading extra dims and the dims where the target is 1 but the input is not. */
static int run_sum_to(run_ctx *r, const graph_node *x, const graph_view *out) {
    const graph_view *in = in_view(r, x, 0);
    int lead = in->ndim - out->ndim;
    uint32_t mask = 0;
    for (int d = 0; d < in->ndim; d++)
        if (d < lead || (out->shape[d - lead] == 1 && in->shape[d] != 1))
            mask |= 1u << d;
    return kern_reduce(KRED_SUM, in->dtype, in->ndim, in->shape, in->data, in->strides, mask,
                       out->data, NULL);
}

static int run_slice_backward(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out) {
    int d = (int)x->a.i[0];
    if (x->a.i[2] > out->shape[d])
        return fail(r->p, v, "slice end %lld is past the end of dim %d (size %lld)",
                    (long long)x->a.i[2], d, (long long)out->shape[d]);
    int rc = fill_zero(out);
    if (rc)
        return rc;
    int64_t strides[KERN_MAX_DIMS];
    memcpy(strides, out->strides, sizeof strides);
    strides[d] *= x->a.i[3];
    char *dst = (char *)out->data + x->a.i[1] * out->strides[d] * (int64_t)esize(out);
    return copy_strided(dst, strides, in_view(r, x, 0));
}

static int run_cast(run_ctx *r, const graph_node *x, const graph_view *out) {
    const graph_view *in = in_view(r, x, 0);
    if (numel(in) == 0)
        return 0;
    kern_src s = {.data = in->data};
    memcpy(s.strides, in->strides, sizeof s.strides);
    kern_cast(out->dtype, in->dtype, out->ndim, out->shape, out->data, out->strides, &s);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * matmul
 */

/* Whether cblas can take a rows x cols matrix with these strides as it is (kern_gemm's
 * rule); if not, kern_gemm would pack it with scratch memory, so the runner copies it into
 * a planned buffer instead. */
static bool gemm_direct(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
    if ((cs == 1 || cols == 1) && (rows == 1 || rs >= cols) && rs <= INT_MAX)
        return true;
    return (rs == 1 || rows == 1) && (cols == 1 || cs >= rows) && cs <= INT_MAX;
}

typedef struct {
    const char *data;
    int64_t rs, cs;
    int64_t bs[KERN_MAX_DIMS]; /* per output batch dim; 0 where it broadcasts */
} gemm_opnd;

static int gemm_prep(run_ctx *r, graph_val v, const graph_view *in, int32_t tmp, int nb,
                     const int64_t *bshape, gemm_opnd *o) {
    graph_view w = *in;
    int nd = w.ndim;
    memset(o, 0, sizeof *o);
    if (!gemm_direct(w.shape[nd - 2], w.shape[nd - 1], w.strides[nd - 2], w.strides[nd - 1])) {
        if (tmp < 0)
            return fail(r->p, v, "an operand needs a copy but the plan has no buffer for it");
        int rc = copy_contig(buf_ptr(r, tmp), in, &w);
        if (rc)
            return kern_fail(r->p, v, rc, "matmul operand copy");
    }
    o->data = w.data;
    o->rs = w.strides[nd - 2];
    o->cs = w.strides[nd - 1];
    for (int i = 0; i < nb; i++) {
        int d = i - (nb - (nd - 2));
        o->bs[i] = d < 0 || (w.shape[d] == 1 && bshape[i] != 1) ? 0 : w.strides[d];
    }
    return 0;
}

/* Batch dims without size-1 dims, neighbours merged where all three operands step
 * through them uniformly. */
typedef struct {
    int n;
    int64_t size[KERN_MAX_DIMS], sa[KERN_MAX_DIMS], sb[KERN_MAX_DIMS], sc[KERN_MAX_DIMS];
} batch_dims;

static void batch_collapse(int nb, const int64_t *bshape, const gemm_opnd *A, const gemm_opnd *B,
                           int64_t mn, batch_dims *bd) {
    int64_t sc[KERN_MAX_DIMS], s = mn;
    for (int i = nb - 1; i >= 0; i--) {
        sc[i] = s;
        s *= bshape[i];
    }
    bd->n = 0;
    for (int i = 0; i < nb; i++) {
        if (bshape[i] == 1)
            continue;
        int k = bd->n - 1;
        bool merge = k >= 0 && bd->sa[k] == A->bs[i] * bshape[i] &&
                     bd->sb[k] == B->bs[i] * bshape[i] && bd->sc[k] == sc[i] * bshape[i];
        if (!merge)
            k = bd->n++;
        bd->size[k] = merge ? bd->size[k] * bshape[i] : bshape[i];
        bd->sa[k] = A->bs[i];
        bd->sb[k] = B->bs[i];
        bd->sc[k] = sc[i];
    }
}

/* The innermost collapsed batch dim is kern_gemm's batch; the others an outer loop. */
static int gemm_loop(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out,
                     const gemm_opnd *A, const gemm_opnd *B, const batch_dims *bd, int64_t K) {
    int nd = out->ndim;
    int64_t M = out->shape[nd - 2], N = out->shape[nd - 1], es = (int64_t)esize(out);
    int64_t batch = 1, bsa = 0, bsb = 0, bsc = M * N, outer = 1;
    if (bd->n > 0) {
        batch = bd->size[bd->n - 1];
        bsa = bd->sa[bd->n - 1];
        bsb = bd->sb[bd->n - 1];
        bsc = bd->sc[bd->n - 1];
        for (int k = 0; k < bd->n - 1; k++)
            outer *= bd->size[k];
    }
    for (int64_t o = 0; o < outer; o++) {
        int64_t oa = 0, ob = 0, oc = 0, rem = o;
        for (int k = bd->n - 2; k >= 0; k--) {
            int64_t i = rem % bd->size[k];
            rem /= bd->size[k];
            oa += i * bd->sa[k];
            ob += i * bd->sb[k];
            oc += i * bd->sc[k];
        }
        kern_mat ma = {A->data + oa * es, A->rs, A->cs, bsa};
        kern_mat mb = {B->data + ob * es, B->rs, B->cs, bsb};
        int rc = kern_gemm(out->dtype, batch, M, N, K, 1.0, ma, x->a.i[0] != 0, mb, x->a.i[1] != 0,
                           0.0, (char *)out->data + oc * es, N, bsc);
        if (rc)
            return kern_fail(r->p, v, rc, "matmul");
    }
    return 0;
}

static int run_matmul(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out) {
    const graph_view *a = in_view(r, x, 0), *b = in_view(r, x, 1);
    int nb = out->ndim - 2;
    int64_t K = a->shape[a->ndim - (x->a.i[0] ? 2 : 1)];
    if (numel(out) == 0)
        return 0;
    if (K == 0) /* an empty sum */
        return fill_zero(out);
    const plan_node *pn = &r->p->nodes[v];
    gemm_opnd A, B;
    if (gemm_prep(r, v, a, pn->tmp[0], nb, out->shape, &A) ||
        gemm_prep(r, v, b, pn->tmp[1], nb, out->shape, &B))
        return -1;
    batch_dims bd;
    batch_collapse(nb, out->shape, &A, &B, out->shape[nb] * out->shape[nb + 1], &bd);
    return gemm_loop(r, v, x, out, &A, &B, &bd, K);
}

/* ---------------------------------------------------------------------------------------
 * index_add, scatter_add, nll backward
 */

/* in, or a contiguous copy of it in the temporary buffer tmp. */
static int contiguous_input(run_ctx *r, graph_val v, const graph_view *in, int32_t tmp,
                            graph_view *out) {
    *out = *in;
    if (is_contig(in))
        return 0;
    if (tmp < 0)
        return fail(r->p, v, "an input needs a copy but the plan has no buffer for it");
    int rc = copy_contig(buf_ptr(r, tmp), in, out);
    return rc ? kern_fail(r->p, v, rc, "input copy") : 0;
}

/* [outer, n, inner] around dim; a 0-d shape is [1, 1, 1]. */
static void split_dim(int nd, const int64_t *shape, int dim, int64_t *outer, int64_t *n,
                      int64_t *inner) {
    *outer = *inner = 1;
    *n = nd > 0 ? shape[dim] : 1;
    for (int d = 0; d < nd; d++) {
        if (d < dim)
            *outer *= shape[d];
        else if (d > dim)
            *inner *= shape[d];
    }
}

static int index_fail(run_ctx *r, graph_val v, const char *op, int64_t pos, int64_t val, int dim,
                      int64_t size) {
    return fail(r->p, v,
                "%s: index %lld at position %lld is out of range for dim %d of size %lld; valid "
                "indices are in [0, %lld)",
                op, (long long)val, (long long)pos, dim, (long long)size, (long long)size);
}

static int run_index_add(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out) {
    const plan_node *pn = &r->p->nodes[v];
    graph_view idx, src;
    int d = (int)x->a.i[0], rc = fill_zero(out);
    if (rc)
        return kern_fail(r->p, v, rc, "fill");
    if (contiguous_input(r, v, in_view(r, x, 0), pn->tmp[0], &idx) ||
        contiguous_input(r, v, in_view(r, x, 1), pn->tmp[1], &src))
        return -1;
    if (numel(&src) == 0)
        return 0;
    int64_t outer, n, inner, bad_pos = -1, bad_val = 0;
    split_dim(out->ndim, out->shape, d, &outer, &n, &inner);
    rc = kern_index_add(out->dtype, outer, n, inner, out->data, idx.data, numel(&idx), src.data,
                        &bad_pos, &bad_val);
    if (rc == -1 && bad_pos >= 0)
        return index_fail(r, v, "index_add", bad_pos, bad_val, d, n);
    return rc ? kern_fail(r->p, v, rc, "index_add") : 0;
}

/* The index covers only a corner of the output in the kept dims: scatter into a block of
 * the index's size, then place the block. */
static int scatter_corner(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out,
                          const graph_view *idx, graph_view *blk) {
    int d = (int)x->a.i[0];
    *blk = *out;
    bool corner = false;
    for (int k = 0; k < out->ndim; k++) {
        if (k == d)
            continue;
        if (idx->shape[k] > out->shape[k])
            return fail(r->p, v,
                        "scatter_add: the index is larger than the output at dim %d "
                        "(%lld > %lld)",
                        k, (long long)idx->shape[k], (long long)out->shape[k]);
        blk->shape[k] = idx->shape[k];
        corner = corner || idx->shape[k] != out->shape[k];
    }
    if (!corner)
        return 0;
    int32_t tmp = r->p->nodes[v].tmp[2];
    if (tmp < 0)
        return fail(r->p, v, "scatter_add needs a block but the plan has none");
    blk->data = buf_ptr(r, tmp);
    contig_strides(blk->ndim, blk->shape, blk->strides);
    return fill_zero(blk);
}

static int run_scatter_add(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out) {
    const plan_node *pn = &r->p->nodes[v];
    graph_view idx, src, blk;
    int d = (int)x->a.i[0], rc = fill_zero(out);
    if (rc)
        return kern_fail(r->p, v, rc, "fill");
    if (contiguous_input(r, v, in_view(r, x, 0), pn->tmp[0], &idx) ||
        contiguous_input(r, v, in_view(r, x, 1), pn->tmp[1], &src) ||
        scatter_corner(r, v, x, out, &idx, &blk))
        return -1;
    if (numel(&src) == 0)
        return 0;
    int64_t outer, n, inner, bad_pos = -1, bad_val = 0;
    split_dim(blk.ndim, blk.shape, d, &outer, &n, &inner);
    rc = kern_scatter_add(out->dtype, outer, n, inner, blk.data, idx.data,
                          idx.ndim > 0 ? idx.shape[d] : 1, src.data, &bad_pos, &bad_val);
    if (rc == -1 && bad_pos >= 0)
        return index_fail(r, v, "scatter_add", bad_pos, bad_val, d, n);
    if (rc)
        return kern_fail(r->p, v, rc, "scatter_add");
    if (blk.data != out->data && (rc = copy_strided(out->data, out->strides, &blk)) != 0)
        return kern_fail(r->p, v, rc, "scatter_add block copy");
    return 0;
}

static double load(const graph_view *v, int64_t off) {
    if (v->dtype == KERN_F32)
        return ((const float *)v->data)[off];
    if (v->dtype == KERN_F64)
        return ((const double *)v->data)[off];
    return (double)((const int64_t *)v->data)[off];
}

static void store(const graph_view *v, int64_t off, double x) {
    if (v->dtype == KERN_F32)
        ((float *)v->data)[off] = (float)x;
    else
        ((double *)v->data)[off] = x;
}

/* The element offset of row-major index i of view v. */
static int64_t offset_of(const graph_view *v, int64_t i) {
    int64_t off = 0;
    for (int d = v->ndim - 1; d >= 0; d--) {
        off += (i % v->shape[d]) * v->strides[d];
        i /= v->shape[d];
    }
    return off;
}

/* Zeros with -g (/ total_weight for mean; per element for reduction none) at each
 * target class; ignored targets stay 0. */
static int run_nll_bw(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out) {
    const graph_view *g = in_view(r, x, 0), *t = in_view(r, x, 1), *tw = in_view(r, x, 2);
    int rc = fill_zero(out);
    if (rc)
        return kern_fail(r->p, v, rc, "fill");
    int64_t nd = out->ndim, N = nd >= 2 ? out->shape[0] : 1, C = out->shape[nd >= 2 ? 1 : 0];
    int64_t inner = 1, red = x->a.i[0], ignore = x->a.i[1];
    for (int d = 2; d < nd; d++)
        inner *= out->shape[d];
    double scale = red == RED_MEAN ? 1.0 / load(tw, 0) : 1.0;
    for (int64_t i = 0; i < N * inner; i++) {
        int64_t k = ((const int64_t *)t->data)[offset_of(t, i)];
        if (k == ignore)
            continue;
        if (k < 0 || k >= C)
            return fail(r->p, v,
                        "nll_loss backward: target %lld at position %lld is out of range for "
                        "%lld classes",
                        (long long)k, (long long)i, (long long)C);
        double gv = load(g, red == RED_NONE ? offset_of(g, i) : 0);
        store(out, ((i / inner) * C + k) * inner + i % inner, -gv * scale);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * The run
 */
static int run_buffer(run_ctx *r, graph_val v) {
    const graph_node *x = graph_node_at(r->p->g, v);
    graph_view *out = &r->p->views[v];
    node_view(r->p, x, buf_ptr(r, r->p->nodes[v].buf), out);
    int rc;
    switch (x->a.op) {
    case GOP_PW: rc = run_pw(r, x, out); break;
    case GOP_SUM: rc = run_sum(r, x, out); break;
    case GOP_SUM_TO: rc = run_sum_to(r, x, out); break;
    case GOP_SLICE_BACKWARD: rc = run_slice_backward(r, v, x, out); break;
    case GOP_CAST: rc = run_cast(r, x, out); break;
    case GOP_SCALE_SIZE: rc = run_scale_size(r, x, out); break;
    case GOP_MATMUL: return run_matmul(r, v, x, out);
    case GOP_INDEX_ADD: return run_index_add(r, v, x, out);
    case GOP_SCATTER_ADD: return run_scatter_add(r, v, x, out);
    case GOP_NLL_BW: return run_nll_bw(r, v, x, out);
    default: return fail(r->p, v, "no kernel for this op");
    }
    if (rc == -1 && r->p->err[0])
        return -1; /* already described */
    return rc ? kern_fail(r->p, v, rc, x->a.op == GOP_PW ? "pointwise" : "kernel") : 0;
}

int graph_plan_run(graph_plan *p, const int64_t *slots, const graph_view *inputs, void *arena,
                   graph_callbacks cb) {
    if (!p)
        return -1;
    p->err[0] = '\0';
    eval_sizes(p, slots);
    run_ctx r = {p, arena, &cb};
    for (graph_val v = 0; v < p->n_nodes; v++) {
        int rc = 0;
        switch (p->nodes[v].kind) {
        case PK_SKIP: break;
        case PK_INPUT: rc = bind_input(&r, v, inputs); break;
        case PK_VIEW: rc = run_view(&r, v); break;
        case PK_MAYBE_VIEW: rc = run_maybe_view(&r, v); break;
        case PK_HOOK: rc = run_hook(&r, v); break;
        case PK_CALL: rc = run_call(&r, v); break;
        default: rc = run_buffer(&r, v); break;
        }
        if (rc)
            return rc;
    }
    return 0;
}
