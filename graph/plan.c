/* plan.c - the memory plan of a graph: where each node's value lives, and which values
 * share a buffer.
 *
 * Planning (once per graph) decides, per node, where its value lives:
 *  - INPUT: the caller's view;
 *  - views (expand, permute, unsqueeze, slice): a view of their input, no memory;
 *  - reshape and contiguous: a view when the input's strides allow, else a copy. Input
 *    strides can differ between runs, so this is decided at run time; the plan gives
 *    them a buffer that is used only when a copy is needed;
 *  - call-outs: no memory (a hook's value is its replacement or its input);
 *  - members of a fused group (cai_graph_fuse, plan_fused.c): all computed by one fused loop
 *    where the group runs (its last member, or the reduction it ends in); only values read
 *    outside the group get buffers, and the loops' scratch is one region at the end of the
 *    arena;
 *  - everything else: a buffer in the arena.
 * Liveness runs over the node order (a view keeps its base alive), and a freed buffer is
 * reused by a later value of provably no larger size. Sizes are symbolic, so a buffer's
 * size is (constant bytes) x (a product of size expressions): reuse needs the same
 * symbolic factors, and the constant grows to the largest user.
 *
 * The plan and every scratch array a run needs are one block (plan_alloc), so a run
 * allocates nothing. Sizes are evaluated per run by plan_eval.c; plan_run.c runs it.
 */
#include "graph/internal.h"

#include <stdint.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Buffer kinds and keys
 */
static int8_t kind_of(const graph_node *x) {
    if (x->dead)
        return PK_SKIP;
    switch (x->a.op) {
    case GOP_INPUT: return PK_INPUT;
    case GOP_EXPAND:
    case GOP_PERMUTE:
    case GOP_UNSQUEEZE:
    case GOP_SLICE:
    case GOP_NARROW: return PK_VIEW;
    case GOP_RESHAPE:
    case GOP_CONTIGUOUS: return PK_MAYBE_VIEW;
    case GOP_HOOK: return PK_HOOK;
    case GOP_RETAIN:
    case GOP_ACCUMULATE:
    case GOP_POST_HOOK:
    case GOP_OUTPUT:
    case GOP_CALLOUT_ARG:
    case GOP_CALLOUT: return PK_CALL;
    case GOP_CALLOUT_RESULT: return PK_RESULT;
    default: return PK_BUFFER;
    }
}

/* Whether v's layout is unknown until run time (so a kernel that wants contiguous data
 * may need a copy). Buffers and contiguous' result are always contiguous. */
static bool maybe_strided(const graph *g, const plan_node *pn, graph_val v) {
    int8_t k = pn[v].kind;
    return k == PK_INPUT || k == PK_VIEW || k == PK_HOOK || k == PK_RESULT ||
           (k == PK_MAYBE_VIEW && cai_graph_node_at(g, v)->a.op == GOP_RESHAPE);
}

static void key_of(const graph *g, int nd, const graph_sx *shape, kern_dtype dt, plan_buf *k) {
    k->temp = false;
    k->cbytes = (int64_t)cai_kern_dtype_size(dt);
    k->nsym = 0;
    for (int d = 0; d < nd; d++) {
        int64_t c;
        if (cai_graph_sx_const_value(g, shape[d], &c)) {
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
    return a->temp == b->temp && a->nsym == b->nsym &&
           memcmp(a->sym, b->sym, sizeof(graph_sx) * (size_t)a->nsym) == 0;
}

/* ---------------------------------------------------------------------------------------
 * Liveness and buffer assignment
 */
typedef struct {
    plan_node *nodes;
    plan_group *groups;
    int n_groups;
    int32_t *last;  /* last node that may read each value (n_nodes: the end of the run) */
    int32_t *head;  /* per node: the first owner whose value dies there */
    int32_t *next;  /* per owner: the next in its list */
    plan_buf *bufs; /* at most max_bufs: PLAN_N_TMP + 1 per node */
    bool *busy;
    int n_bufs, max_bufs;
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
        CA_ASSERT(pl->n_bufs < pl->max_bufs);
        best = pl->n_bufs++;
        pl->bufs[best] = *key;
    } else if (pl->bufs[best].cbytes < key->cbytes) {
        pl->bufs[best].cbytes = key->cbytes;
    }
    pl->busy[best] = true;
    return best;
}

static void val_key(const graph *g, graph_val v, plan_buf *k) {
    const graph_node *x = cai_graph_node_at(g, v);
    key_of(g, x->ndim, x->shape, x->dtype, k);
}

/* scatter_add needs a block when the index is smaller than the output in a kept dim. */
static bool scatter_block_key(const graph *g, const graph_node *x, plan_buf *k) {
    const graph_node *idx = cai_graph_node_at(g, x->a.in[0]);
    graph_sx bm[KERN_MAX_DIMS];
    bool differs = false;
    for (int d = 0; d < x->ndim; d++) {
        bm[d] = d == x->a.i[0] ? x->shape[d] : idx->shape[d];
        differs = differs || bm[d] != x->shape[d];
    }
    key_of(g, x->ndim, bm, x->dtype, k);
    return differs;
}

/* Temporaries reuse temporaries only, so that no value's buffer is ever written as a
 * scratch copy: steps run side by side (plan_dag.c) then need no order for them. */
static int32_t take_temp(planner *pl, plan_buf *k) {
    k->temp = true;
    return take_buf(pl, k);
}

static void take_temps(planner *pl, const graph *g, graph_val v) {
    const graph_node *x = cai_graph_node_at(g, v);
    plan_node *pn = &pl->nodes[v];
    plan_buf k;
    bool copies = x->a.op == GOP_MATMUL || x->a.op == GOP_INDEX_ADD || x->a.op == GOP_SCATTER_ADD ||
                  x->a.op == GOP_INDEX_SELECT || x->a.op == GOP_GATHER;
    for (int i = 0; copies && i < 2; i++) {
        /* gather reads its input cut down to the index's sizes: a copy even when contiguous */
        bool cut = x->a.op == GOP_GATHER && i == 0;
        if (!cut && !maybe_strided(g, pl->nodes, x->a.in[i]))
            continue;
        val_key(g, x->a.in[i], &k);
        pn->tmp[i] = take_temp(pl, &k);
    }
    /* conv2d's kernels read the image through its strides, the weight and the gradient
     * only contiguous */
    int conv_dense = x->a.op == GOP_CONV2D ? 1 : x->a.op == GOP_CONV2D_WEIGHT_GRAD ? 0 : -1;
    if (conv_dense >= 0 && maybe_strided(g, pl->nodes, x->a.in[conv_dense])) {
        val_key(g, x->a.in[conv_dense], &k);
        pn->tmp[conv_dense] = take_temp(pl, &k);
    }
    if (x->a.op == GOP_CUMPROD && maybe_strided(g, pl->nodes, x->a.in[0])) {
        val_key(g, x->a.in[0], &k);
        pn->tmp[0] = take_temp(pl, &k);
    }
    for (int i = 0; x->a.op == GOP_CUMPROD_BW && i < 3; i++) {
        if (!maybe_strided(g, pl->nodes, x->a.in[i]))
            continue;
        val_key(g, x->a.in[i], &k);
        pn->tmp[i] = take_temp(pl, &k);
    }
    if (x->a.op == GOP_INDEX_FILL && maybe_strided(g, pl->nodes, x->a.in[1])) {
        val_key(g, x->a.in[1], &k);
        pn->tmp[1] = take_temp(pl, &k);
    }
    if (x->a.op == GOP_SCATTER_ADD && scatter_block_key(g, x, &k))
        pn->tmp[2] = take_temp(pl, &k);
}

/* v is read at step `use`: it, and the bases of the views it may be, stay alive. */
static void mark_use(planner *pl, const graph *g, graph_val v, int32_t use) {
    while (v >= 0) {
        if (pl->last[v] < use)
            pl->last[v] = use;
        int8_t k = pl->nodes[v].kind;
        if (k != PK_VIEW && k != PK_MAYBE_VIEW && k != PK_HOOK)
            break;
        v = cai_graph_node_at(g, v)->a.in[0];
    }
}

/* The step at which v is computed: its group's anchor for a fused member. */
static int32_t step_of(const planner *pl, graph_val v) {
    int32_t k = pl->nodes[v].grp;
    CA_ASSERT(k < pl->n_groups);
    return k >= 0 ? pl->groups[k].anchor : v;
}

static bool owns_buffer(int8_t kind) {
    return kind == PK_BUFFER || kind == PK_MAYBE_VIEW || kind == PK_FUSED_OUT ||
           kind == PK_FUSED_RUN;
}

static void liveness(planner *pl, const graph *g, int n) {
    for (int v = 0; v < n; v++)
        pl->last[v] = step_of(pl, v);
    for (int v = 0; v < n; v++) {
        const graph_node *x = cai_graph_node_at(g, v);
        if (pl->nodes[v].kind == PK_SKIP || x->a.op == GOP_POST_HOOK)
            continue;
        /* outputs stay readable after the run, until the arena is reused */
        int32_t use = x->a.op == GOP_OUTPUT ? n : step_of(pl, v);
        for (int k = 0; k < x->a.n_in; k++)
            mark_use(pl, g, x->a.in[k], use);
    }
    for (int t = 0; t <= n; t++)
        pl->head[t] = -1;
    for (int v = 0; v < n; v++) {
        if (owns_buffer(pl->nodes[v].kind)) {
            CA_ASSERT(pl->last[v] >= v && pl->last[v] <= n); /* a step of this run, or its end */
            pl->next[v] = pl->head[pl->last[v]];
            pl->head[pl->last[v]] = v;
        }
    }
}

/* A fused group's outputs (and its reduction's result) take buffers where it runs. */
static void take_group_bufs(planner *pl, const graph *g, const plan_group *G) {
    plan_buf k;
    for (int i = 0; i < G->n_out; i++) {
        val_key(g, G->out[i], &k);
        pl->nodes[G->out[i]].buf = take_buf(pl, &k);
    }
    if (G->reduce >= 0) {
        val_key(g, G->reduce, &k);
        pl->nodes[G->reduce].buf = take_buf(pl, &k);
    }
}

/* Nodes that run user code (which could read .grad) or can fail on the data (an index
 * out of range), so the run stops with the eager engine's .grad state. */
static bool fold_barrier(graph_op op) {
    return op == GOP_HOOK || op == GOP_POST_HOOK || op == GOP_CALLOUT || op == GOP_INDEX_ADD ||
           op == GOP_SCATTER_ADD || op == GOP_INDEX_SELECT || op == GOP_GATHER ||
           op == GOP_NLL_BW || op == GOP_SLICE || op == GOP_NARROW || op == GOP_SLICE_BACKWARD ||
           op == GOP_INDEX_FILL || op == GOP_COL2IM;
}

/* A matmul whose one reader is an ACCUMULATE node may write the leaf's .grad itself
 * (graph_callbacks.accumulate_target), with beta = 1 when a gradient is there: no copy,
 * no add. That write happens at the matmul's step, before the ACCUMULATE's, so only when
 * no barrier runs in between. The matmul keeps its buffer for runs where the target is
 * declined. last and head are scratch here (liveness fills them next). */
static void find_folds(planner *pl, const graph *g, int n) {
    int32_t *readers = pl->last, *hooks = pl->head; /* hooks[v]: barriers before node v */
    hooks[0] = 0;
    for (int v = 0; v < n; v++) {
        pl->nodes[v].fold = -1;
        pl->nodes[v].folded = false;
        readers[v] = 0;
    }
    for (int v = 0; v < n; v++) {
        const graph_node *x = cai_graph_node_at(g, v);
        bool live = pl->nodes[v].kind != PK_SKIP;
        hooks[v + 1] = hooks[v] + (live && fold_barrier(x->a.op));
        for (int k = 0; live && k < x->a.n_in; k++) {
            CA_ASSERT(x->a.in[k] >= 0 && x->a.in[k] < v); /* the run's order is the nodes' */
            readers[x->a.in[k]]++;
        }
    }
    for (int a = 0; a < n; a++) {
        const graph_node *x = cai_graph_node_at(g, a);
        if (pl->nodes[a].kind == PK_SKIP || x->a.op != GOP_ACCUMULATE)
            continue;
        graph_val m = x->a.in[0];
        if (cai_graph_node_at(g, m)->a.op == GOP_MATMUL && pl->nodes[m].kind == PK_BUFFER &&
            readers[m] == 1 && hooks[a] == hooks[m + 1]) {
            pl->nodes[m].fold = a;
            pl->nodes[a].fold = m;
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
        } else if (pn->kind == PK_FUSED_RUN) {
            take_group_bufs(pl, g, &pl->groups[pn->grp]);
        }
        for (int i = 0; i < PLAN_N_TMP; i++) {
            CA_ASSERT(pn->tmp[i] < pl->n_bufs);
            if (pn->tmp[i] >= 0)
                pl->busy[pn->tmp[i]] = false;
        }
        for (int32_t o = pl->head[v]; o >= 0; o = pl->next[o]) {
            CA_ASSERT(pl->nodes[o].buf >= 0 && pl->nodes[o].buf < pl->n_bufs);
            pl->busy[pl->nodes[o].buf] = false;
        }
    }
}

/* ---------------------------------------------------------------------------------------
 * The plan's one block
 */
static size_t round16(size_t n) {
    return (n + 15) & ~(size_t)15;
}

/* Bytes between the groups' fused-loop memos. */
static size_t memo_stride(void) {
    return round16(cai_kern_fused_memo_bytes());
}

/* The next `bytes` of the block at *m. */
static char *carve(char **m, size_t bytes) {
    char *p = *m;
    *m += bytes;
    return p;
}

/* The plan and all its run scratch in one block. */
static graph_plan *plan_alloc(const graph *g, int n, int n_sx, int n_bufs, int n_groups) {
    size_t s_plan = round16(sizeof(graph_plan)), s_nodes = round16(sizeof(plan_node) * (size_t)n);
    size_t s_bufs = round16(sizeof(plan_buf) * (size_t)n_bufs);
    size_t s_groups = round16(sizeof(plan_group) * (size_t)n_groups);
    size_t s_prog = round16(sizeof(sx_step) * (size_t)n_sx);
    size_t s_val = round16(sizeof(int64_t) * (size_t)n_sx);
    size_t s_off = round16(sizeof(int64_t) * (size_t)n_bufs);
    size_t s_views = round16(sizeof(graph_view) * (size_t)n);
    int n_slots = cai_graph_n_slots(g);
    size_t s_slots = round16(sizeof(int64_t) * (size_t)n_slots);
    size_t s_memo = memo_stride() * (size_t)n_groups;
    char *m = cai_graph_mem_alloc(s_plan + s_nodes + s_bufs + s_groups + s_prog + s_val + s_off +
                                  s_views + s_slots + s_memo);
    if (!m)
        return NULL;
    graph_plan *p = (graph_plan *)carve(&m, s_plan);
    *p = (graph_plan){.g = g,
                      .n_nodes = n,
                      .n_sx = n_sx,
                      .n_bufs = n_bufs,
                      .n_groups = n_groups,
                      .tune_pick = -1};
    p->nodes = (plan_node *)carve(&m, s_nodes);
    p->bufs = (plan_buf *)carve(&m, s_bufs);
    p->groups = (plan_group *)carve(&m, s_groups);
    p->prog = (sx_step *)carve(&m, s_prog);
    p->val = (int64_t *)carve(&m, s_val);
    p->offset = (int64_t *)carve(&m, s_off);
    p->views = (graph_view *)carve(&m, s_views);
    p->n_slots = n_slots;
    p->memo_slots = (int64_t *)carve(&m, s_slots);
    p->memos = m;
    memset(m, 0, s_memo); /* empty memos; plan_fill points each group at its own */
    return p;
}

/* The planner's arrays, in one scratch block (pl->nodes; free it with cai_graph_mem_free),
 * every node of its kind and with no buffer yet. False when out of memory. */
static bool planner_init(planner *pl, const graph *g, int n, int n_groups) {
    int max_bufs = (PLAN_N_TMP + 1) * n;
    size_t s_nodes = round16(sizeof(plan_node) * (size_t)n);
    size_t s_idx = round16(sizeof(int32_t) * (size_t)(n + 1));
    size_t s_bufs = round16(sizeof(plan_buf) * (size_t)max_bufs);
    size_t s_groups = round16(sizeof(plan_group) * (size_t)n_groups);
    char *m = cai_graph_mem_alloc(s_nodes + 3 * s_idx + s_bufs + s_groups + (size_t)max_bufs + 16);
    if (!m)
        return false;
    *pl = (planner){
        .nodes = (plan_node *)carve(&m, s_nodes), .n_groups = n_groups, .max_bufs = max_bufs};
    pl->last = (int32_t *)carve(&m, s_idx);
    pl->head = (int32_t *)carve(&m, s_idx);
    pl->next = (int32_t *)carve(&m, s_idx);
    pl->bufs = (plan_buf *)carve(&m, s_bufs);
    pl->groups = (plan_group *)carve(&m, s_groups);
    pl->busy = (bool *)m;
    memset(pl->busy, 0, (size_t)max_bufs);
    for (int v = 0; v < n; v++)
        pl->nodes[v] =
            (plan_node){kind_of(cai_graph_node_at(g, v)), -1, {-1, -1, -1}, -1, -1, false};
    return true;
}

/* Copy what the planner decided into the plan p. */
static void plan_fill(graph_plan *p, const planner *pl) {
    if (p->n_nodes > 0)
        memcpy(p->nodes, pl->nodes, sizeof(plan_node) * (size_t)p->n_nodes);
    if (p->n_bufs > 0)
        memcpy(p->bufs, pl->bufs, sizeof(plan_buf) * (size_t)p->n_bufs);
    if (p->n_groups > 0)
        memcpy(p->groups, pl->groups, sizeof(plan_group) * (size_t)p->n_groups);
    for (int k = 0; k < p->n_groups; k++)
        p->groups[k].memo = (kern_fused_memo *)(p->memos + memo_stride() * (size_t)k);
    cai_graph_plan_compile_sizes(p);
}

graph_plan *cai_graph_plan_new(const graph *g) {
    if (!g)
        return NULL;
    int n = cai_graph_count(g), n_groups = cai_graph_count_fused(g);
    planner pl;
    if (!planner_init(&pl, g, n, n_groups))
        return NULL;
    cai_graph_plan_fused(g, n, pl.nodes, pl.groups, n_groups, pl.last);
    find_folds(&pl, g, n);
    liveness(&pl, g, n);
    assign(&pl, g, n);
    graph_plan *p = plan_alloc(g, n, cai_graph_sx_count(g), pl.n_bufs, n_groups);
    if (p) {
        plan_fill(p, &pl);
        p->dag = cai_graph_plan_dag_new(p); /* NULL: the plan runs in order only */
    }
    cai_graph_mem_free(pl.nodes);
    return p;
}

void cai_graph_plan_free(graph_plan *p) {
    if (p)
        cai_graph_plan_dag_free(p->dag);
    cai_graph_mem_free(p);
}

const char *cai_graph_plan_error(const graph_plan *p) {
    return p ? p->err : "plan is NULL";
}
