/* plan.c - the memory plan of a graph and the runner that executes it.
 *
 * Planning (once per graph) decides, per node, where its value lives:
 *  - INPUT: the caller's view;
 *  - views (expand, permute, unsqueeze, slice): a view of their input, no memory;
 *  - reshape and contiguous: a view when the input's strides allow, else a copy. Input
 *    strides can differ between runs, so this is decided at run time; the plan gives
 *    them a buffer that is used only when a copy is needed;
 *  - call-outs: no memory (a hook's value is its replacement or its input);
 *  - members of a fused group (graph_fuse): all computed by one fused loop where the group
 *    runs (its last member, or the reduction it ends in); only values read outside the
 *    group get buffers, and the loops' scratch is one region at the end of the arena;
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
#include "codegen/fused.h"
#include "graph/internal.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { PK_SKIP, PK_INPUT, PK_VIEW, PK_MAYBE_VIEW, PK_BUFFER, PK_HOOK, PK_CALL };
/* Members of a fused group (fuse.c): a value only its group reads (no memory), a value
 * read outside (a buffer), and the node where the whole group runs (the last member or
 * the reduction it ends in; a buffer). */
enum { PK_FUSED_TMP = PK_CALL + 1, PK_FUSED_OUT, PK_FUSED_RUN };

#define N_TMP 3   /* temporaries per node: operand copies, scatter_add's block */
#define ALIGN 64u /* buffer alignment in the arena */

typedef struct {
    int8_t kind;
    int32_t buf;        /* the value's buffer, or -1 */
    int32_t tmp[N_TMP]; /* temporaries, or -1 */
    int32_t grp;        /* the fused group it belongs to (fused kinds only), or -1 */
    int32_t fold;       /* GEMM <-> the ACCUMULATE whose .grad it may write (find_folds), -1 */
    bool folded;        /* run scratch, on that ACCUMULATE: the GEMM wrote .grad this run */
} plan_node;

/* A fused group as the plan runs it: one interpreter program over the members' space. */
typedef struct {
    bool ok;               /* false: its members run op by op */
    graph_val first;       /* the first member: dtype and shape of the index space */
    graph_val anchor;      /* where it runs */
    graph_val reduce;      /* the SUM / SUM_TO it ends in, or -1 */
    int se_first, se_last; /* side effects before the first member and before the anchor */
    int n_members, n_out;
    graph_val member[KERN_FUSED_MAX_INSTR];
    graph_val in[KERN_FUSED_MAX_INPUTS];   /* input registers' values */
    graph_val out[KERN_FUSED_MAX_OUTPUTS]; /* members written to their buffers */
    kern_fused_prog prog;
    kern_fused_memo *memo; /* the loop's plan, kept from run to run (run scratch) */
} plan_group;

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
    int n_nodes, n_sx, n_bufs, n_groups;
    plan_node *nodes;
    plan_buf *bufs;
    plan_group *groups;
    int64_t scratch_off;  /* run scratch: where the fused loops' scratch starts */
    size_t scratch_bytes; /* run scratch: its size */
    /* The fused loops' scratch for the last slot values and thread count: working it out
     * plans every group, so a steady state (same sizes each run) does it once. */
    int n_slots;
    int64_t *memo_slots;
    int memo_threads; /* 0: nothing memoised yet */
    size_t memo_scratch;
    char *memos; /* run scratch: one kern_fused_memo per group, memo_stride() apart */
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
    plan_group *groups;
    int n_groups;
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

/* The step at which v is computed: its group's anchor for a fused member. */
static int32_t step_of(const planner *pl, graph_val v) {
    int32_t k = pl->nodes[v].grp;
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
        const graph_node *x = graph_node_at(g, v);
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
    return op == GOP_HOOK || op == GOP_POST_HOOK || op == GOP_INDEX_ADD || op == GOP_SCATTER_ADD ||
           op == GOP_NLL_BW || op == GOP_SLICE || op == GOP_SLICE_BACKWARD;
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
        const graph_node *x = graph_node_at(g, v);
        bool live = pl->nodes[v].kind != PK_SKIP;
        hooks[v + 1] = hooks[v] + (live && fold_barrier(x->a.op));
        for (int k = 0; live && k < x->a.n_in; k++)
            readers[x->a.in[k]]++;
    }
    for (int a = 0; a < n; a++) {
        const graph_node *x = graph_node_at(g, a);
        if (pl->nodes[a].kind == PK_SKIP || x->a.op != GOP_ACCUMULATE)
            continue;
        graph_val m = x->a.in[0];
        if (graph_node_at(g, m)->a.op == GOP_MATMUL && pl->nodes[m].kind == PK_BUFFER &&
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
        for (int i = 0; i < N_TMP; i++)
            if (pn->tmp[i] >= 0)
                pl->busy[pn->tmp[i]] = false;
        for (int32_t o = pl->head[v]; o >= 0; o = pl->next[o])
            pl->busy[pl->nodes[o].buf] = false;
    }
}

/* ---------------------------------------------------------------------------------------
 * Fused groups: the program of each group graph_fuse marked, checked again here so a
 * group the plan cannot honour simply runs op by op.
 */
static bool same_space(const graph_node *a, const graph_node *b) {
    return a->dtype == b->dtype && a->ndim == b->ndim &&
           memcmp(a->shape, b->shape, sizeof(graph_sx) * (size_t)a->ndim) == 0;
}

/* Members (pointwise, in node order) and the reduction each group ends in. */
static void collect_members(planner *pl, const graph *g, int n) {
    int se = 0; /* side-effect nodes so far: a group must not span one */
    for (graph_val v = 0; v < n; v++) {
        const graph_node *x = graph_node_at(g, v);
        int k = graph_node_group(g, v);
        if (k < 0 || k >= pl->n_groups) {
            se += !x->dead && graph_op_is_side_effect(x->a.op);
            continue;
        }
        plan_group *G = &pl->groups[k];
        if (G->first < 0)
            G->se_first = se;
        G->se_last = se;
        bool sum = x->a.op == GOP_SUM || x->a.op == GOP_SUM_TO;
        if (x->a.op == GOP_PW && G->reduce < 0 && G->n_members < KERN_FUSED_MAX_INSTR) {
            if (G->first < 0)
                G->first = v;
            G->member[G->n_members++] = v;
        } else if (sum && G->reduce < 0 && G->n_members > 0) {
            G->reduce = v;
        } else {
            G->ok = false;
        }
    }
    for (int k = 0; k < pl->n_groups; k++) {
        plan_group *G = &pl->groups[k];
        G->ok = G->ok && G->n_members > 0 && G->se_first == G->se_last;
        if (G->n_members > 0)
            G->anchor = G->reduce >= 0 ? G->reduce : G->member[G->n_members - 1];
    }
}

static void add_out(plan_group *G, graph_val v) {
    for (int i = 0; i < G->n_out; i++)
        if (G->out[i] == v)
            return;
    if (G->reduce >= 0 || G->n_out == KERN_FUSED_MAX_OUTPUTS)
        G->ok = false; /* a fused reduce's members are read by the reduction alone */
    else
        G->out[G->n_out++] = v;
}

/* Members read outside their group are its outputs; such a reader must come after the
 * group's anchor (it runs there). */
static void collect_outputs(planner *pl, const graph *g, int n) {
    for (graph_val v = 0; v < n; v++) {
        const graph_node *x = graph_node_at(g, v);
        int kx = graph_node_group(g, v);
        for (int i = 0; !x->dead && i < x->a.n_in; i++) {
            graph_val u = x->a.in[i];
            int ku = graph_node_group(g, u);
            if (ku < 0 || ku >= pl->n_groups || ku == kx)
                continue;
            plan_group *G = &pl->groups[ku];
            if (v <= G->anchor)
                G->ok = false;
            else if (u != G->reduce)
                add_out(G, u);
        }
    }
    for (int k = 0; k < pl->n_groups; k++) /* the anchor's value is kept, read or not */
        if (pl->groups[k].ok && pl->groups[k].reduce < 0)
            add_out(&pl->groups[k], pl->groups[k].anchor);
}

/* While a group's program is built, idx[v] is member v's index in it, else -1. */
static int member_index(const int32_t *idx, graph_val v) {
    return idx[v];
}

/* The register holding v: a member's instruction, or an input (added when new). */
static int reg_of(plan_group *G, const int32_t *idx, graph_val v, bool add) {
    int i = member_index(idx, v);
    if (i >= 0)
        return G->prog.n_inputs + i;
    for (i = 0; i < G->prog.n_inputs; i++)
        if (G->in[i] == v)
            return i;
    if (!add || G->prog.n_inputs == KERN_FUSED_MAX_INPUTS)
        return -1;
    G->in[G->prog.n_inputs] = v;
    return G->prog.n_inputs++;
}

/* One instruction per member, in node order, over the inputs gathered first. */
static bool build_prog(plan_group *G, const graph *g, const int32_t *idx) {
    kern_fused_prog *p = &G->prog;
    const graph_node *f = graph_node_at(g, G->first);
    memset(p, 0, sizeof *p);
    for (int i = 0; i < G->n_members; i++) {
        const graph_node *x = graph_node_at(g, G->member[i]);
        kern_pw_op op = (kern_pw_op)x->a.i[0];
        if (!same_space(f, x) || !kern_fused_supports(op, f->dtype) ||
            kern_pw_arity(op) != x->a.n_in)
            return false;
        for (int k = 0; k < x->a.n_in; k++)
            if (member_index(idx, x->a.in[k]) < 0 && reg_of(G, idx, x->a.in[k], true) < 0)
                return false;
    }
    for (int r = 0; r < p->n_inputs; r++)
        p->in_dt[r] = graph_node_at(g, G->in[r])->dtype;
    for (int i = 0; i < G->n_members; i++) {
        const graph_node *x = graph_node_at(g, G->member[i]);
        uint8_t reg[3] = {0, 0, 0};
        for (int k = 0; k < x->a.n_in; k++)
            reg[k] = (uint8_t)reg_of(G, idx, x->a.in[k], false);
        p->instr[i] =
            (kern_fused_instr){(kern_pw_op)x->a.i[0], reg[0], reg[1], reg[2], x->a.p[0], x->a.p[1]};
    }
    p->n_instr = G->n_members;
    if (G->reduce >= 0) {
        const graph_node *r = graph_node_at(g, G->reduce);
        int i = member_index(idx, r->a.in[0]);
        if (i < 0 || r->dtype != f->dtype)
            return false;
        p->n_outputs = 1;
        p->out_reg[0] = (uint8_t)(p->n_inputs + i);
        return true;
    }
    for (int k = 0; k < G->n_out; k++)
        p->out_reg[k] = (uint8_t)(p->n_inputs + member_index(idx, G->out[k]));
    p->n_outputs = G->n_out;
    return G->n_out > 0;
}

/* Check every group, build its program, and give its members their kinds. pl->last is
 * scratch here (liveness fills it later). */
static void plan_fused(planner *pl, const graph *g, int n) {
    int32_t *idx = pl->last;
    for (int v = 0; v < n; v++)
        idx[v] = -1;
    for (int k = 0; k < pl->n_groups; k++)
        pl->groups[k] = (plan_group){.ok = true, .first = -1, .anchor = -1, .reduce = -1};
    collect_members(pl, g, n);
    collect_outputs(pl, g, n);
    for (int k = 0; k < pl->n_groups; k++) {
        plan_group *G = &pl->groups[k];
        for (int i = 0; i < G->n_members; i++)
            idx[G->member[i]] = i;
        G->ok = G->ok && build_prog(G, g, idx);
        for (int i = 0; i < G->n_members; i++)
            idx[G->member[i]] = -1;
        if (!G->ok)
            continue;
        for (int i = 0; i < G->n_members; i++)
            pl->nodes[G->member[i]] = (plan_node){PK_FUSED_TMP, -1, {-1, -1, -1}, k, -1, false};
        for (int i = 0; i < G->n_out; i++)
            pl->nodes[G->out[i]].kind = PK_FUSED_OUT;
        pl->nodes[G->anchor] = (plan_node){PK_FUSED_RUN, -1, {-1, -1, -1}, k, -1, false};
    }
}

static size_t round16(size_t n) {
    return (n + 15) & ~(size_t)15;
}

/* Bytes between the groups' fused-loop memos. */
static size_t memo_stride(void) {
    return round16(kern_fused_memo_bytes());
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
    int n_slots = graph_n_slots(g);
    size_t s_slots = round16(sizeof(int64_t) * (size_t)n_slots);
    size_t s_memo = memo_stride() * (size_t)n_groups;
    char *m = graph_mem_alloc(s_plan + s_nodes + s_bufs + s_groups + s_prog + s_val + s_off +
                              s_views + s_slots + s_memo);
    if (!m)
        return NULL;
    graph_plan *p = (graph_plan *)m;
    memset(p, 0, sizeof *p);
    p->g = g;
    p->n_nodes = n;
    p->n_sx = n_sx;
    p->n_bufs = n_bufs;
    p->n_groups = n_groups;
    m += s_plan;
    p->nodes = (plan_node *)m;
    m += s_nodes;
    p->bufs = (plan_buf *)m;
    m += s_bufs;
    p->groups = (plan_group *)m;
    m += s_groups;
    p->prog = (sx_step *)m;
    m += s_prog;
    p->val = (int64_t *)m;
    m += s_val;
    p->offset = (int64_t *)m;
    m += s_off;
    p->views = (graph_view *)m;
    m += s_views;
    p->n_slots = n_slots;
    p->memo_slots = (int64_t *)m;
    m += s_slots;
    p->memos = m;
    memset(m, 0, s_memo); /* empty memos; graph_plan_new points each group at its own */
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
    int n = graph_count(g), max_bufs = (N_TMP + 1) * n, n_groups = graph_count_fused(g);
    size_t s_nodes = round16(sizeof(plan_node) * (size_t)n);
    size_t s_idx = round16(sizeof(int32_t) * (size_t)(n + 1));
    size_t s_bufs = round16(sizeof(plan_buf) * (size_t)max_bufs);
    size_t s_groups = round16(sizeof(plan_group) * (size_t)n_groups);
    char *scratch =
        graph_mem_alloc(s_nodes + 3 * s_idx + s_bufs + s_groups + (size_t)max_bufs + 16);
    if (!scratch)
        return NULL;
    planner pl = {.nodes = (plan_node *)scratch, .n_groups = n_groups};
    pl.last = (int32_t *)(scratch + s_nodes);
    pl.head = (int32_t *)(scratch + s_nodes + s_idx);
    pl.next = (int32_t *)(scratch + s_nodes + 2 * s_idx);
    pl.bufs = (plan_buf *)(scratch + s_nodes + 3 * s_idx);
    pl.groups = (plan_group *)(scratch + s_nodes + 3 * s_idx + s_bufs);
    pl.busy = (bool *)(scratch + s_nodes + 3 * s_idx + s_bufs + s_groups);
    memset(pl.busy, 0, (size_t)max_bufs);
    for (int v = 0; v < n; v++)
        pl.nodes[v] = (plan_node){kind_of(graph_node_at(g, v)), -1, {-1, -1, -1}, -1, -1, false};
    plan_fused(&pl, g, n);
    find_folds(&pl, g, n);
    liveness(&pl, g, n);
    assign(&pl, g, n);
    graph_plan *p = plan_alloc(g, n, graph_sx_count(g), pl.n_bufs, n_groups);
    if (p) {
        if (n > 0)
            memcpy(p->nodes, pl.nodes, sizeof(plan_node) * (size_t)n);
        if (pl.n_bufs > 0)
            memcpy(p->bufs, pl.bufs, sizeof(plan_buf) * (size_t)pl.n_bufs);
        if (n_groups > 0)
            memcpy(p->groups, pl.groups, sizeof(plan_group) * (size_t)n_groups);
        for (int k = 0; k < n_groups; k++)
            p->groups[k].memo = (kern_fused_memo *)(p->memos + memo_stride() * (size_t)k);
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

/* Dims where a sum_to's target is 1 but its input is not, and the input's extra leading
 * dims: the reduced dims. */
static uint32_t sum_to_mask(int in_nd, const int64_t *in_shape, int out_nd,
                            const int64_t *out_shape) {
    int lead = in_nd - out_nd;
    uint32_t mask = 0;
    for (int d = 0; d < in_nd; d++)
        if (d < lead || (out_shape[d - lead] == 1 && in_shape[d] != 1))
            mask |= 1u << d;
    return mask;
}

static void eval_shape(const graph_plan *p, const graph_node *x, const int64_t *vals,
                       const int64_t *slots, int64_t *shape) {
    for (int d = 0; d < x->ndim; d++)
        shape[d] = vals ? vals[x->shape[d]] : graph_sx_eval(p->g, x->shape[d], slots);
}

/* Scratch the fused loops need: they run one at a time, so they share one region. */
static size_t fused_scratch(const graph_plan *p, const int64_t *slots) {
    size_t most = 0;
    for (int k = 0; p && k < p->n_groups; k++) {
        const plan_group *G = &p->groups[k];
        if (!G->ok)
            continue;
        const graph_node *f = graph_node_at(p->g, G->first);
        int64_t shape[KERN_MAX_DIMS], rshape[KERN_MAX_DIMS];
        eval_shape(p, f, NULL, slots, shape);
        int red = -1;
        uint32_t mask = 0;
        if (G->reduce >= 0) {
            const graph_node *r = graph_node_at(p->g, G->reduce);
            eval_shape(p, r, NULL, slots, rshape);
            red = KRED_SUM;
            mask = r->a.op == GOP_SUM ? (uint32_t)r->a.i[0]
                                      : sum_to_mask(f->ndim, shape, r->ndim, rshape);
        }
        size_t b = kern_fused_scratch_bytes(&G->prog, f->dtype, f->ndim, shape, red, mask);
        most = b > most ? b : most;
    }
    return most;
}

/* fused_scratch for these slot values, worked out again only when they or the thread
 * count changed since the last call. */
static size_t fused_scratch_memo(graph_plan *p, const int64_t *slots) {
    int nth = kern_num_threads();
    size_t bytes = sizeof(int64_t) * (size_t)p->n_slots;
    if (!slots && bytes) /* no slot values given: every slot reads as 0, do not memoise */
        return fused_scratch(p, slots);
    if (p->memo_threads == nth && (bytes == 0 || memcmp(p->memo_slots, slots, bytes) == 0))
        return p->memo_scratch;
    p->memo_scratch = fused_scratch(p, slots);
    if (bytes)
        memcpy(p->memo_slots, slots, bytes);
    p->memo_threads = nth;
    return p->memo_scratch;
}

size_t graph_plan_arena_bytes(graph_plan *p, const int64_t *slots) {
    size_t total = 0;
    for (int b = 0; p && b < p->n_bufs; b++)
        total += align_up(buf_bytes(p, &p->bufs[b], NULL, slots));
    return p ? total + align_up((int64_t)fused_scratch_memo(p, slots)) : 0;
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
    p->scratch_off = off;
    p->scratch_bytes = fused_scratch_memo(p, slots);
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
    if (!r->cb->call || (r->p->nodes[v].fold >= 0 && r->p->nodes[v].folded))
        return 0; /* no callbacks, or the GEMM already wrote this .grad */
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
    int cond = kern_pw_cond_input(k);
    kern_dtype cond_dt = cond >= 0 ? in_view(r, x, cond)->dtype : out->dtype;
    return kern_pointwise(k, out->dtype, cond_dt, out->ndim, out->shape, out->data, out->strides,
                          src, x->a.p[0], x->a.p[1]);
}

/* x * (p / N), or x * (p * N) when i[0] is set: N is evaluated for this run, so one graph
 * serves every size. */
static int run_scale_size(run_ctx *r, const graph_node *x, const graph_view *out) {
    kern_src src;
    bcast_src(in_view(r, x, 0), out, &src);
    double n = (double)r->p->val[x->a.shape[0]];
    return kern_pointwise(KPW_MUL_S, out->dtype, out->dtype, out->ndim, out->shape, out->data,
                          out->strides, &src, x->a.i[0] ? x->a.p[0] * n : x->a.p[0] / n, 0);
}

static int run_sum(run_ctx *r, const graph_node *x, const graph_view *out) {
    const graph_view *in = in_view(r, x, 0);
    return kern_reduce(KRED_SUM, in->dtype, in->ndim, in->shape, in->data, in->strides,
                       (uint32_t)x->a.i[0], out->data, NULL);
}

static int run_sum_to(run_ctx *r, const graph_node *x, const graph_view *out) {
    const graph_view *in = in_view(r, x, 0);
    uint32_t mask = sum_to_mask(in->ndim, in->shape, out->ndim, out->shape);
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

static int gemm_prep(run_ctx *r, graph_val v, const graph_view *in, int32_t tmp, int nb,
                     const int64_t *bshape, kern_mat_nd *o) {
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

/* out = a @ b, or out += a @ b when beta is 1 (out contiguous). */
static int run_matmul(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out,
                      double beta) {
    const graph_view *a = in_view(r, x, 0), *b = in_view(r, x, 1);
    int nb = out->ndim - 2;
    int64_t K = a->shape[a->ndim - (x->a.i[0] ? 2 : 1)];
    if (numel(out) == 0)
        return 0;
    if (K == 0) /* an empty sum */
        return beta != 0.0 ? 0 : fill_zero(out);
    const plan_node *pn = &r->p->nodes[v];
    kern_mat_nd A, B;
    if (gemm_prep(r, v, a, pn->tmp[0], nb, out->shape, &A) ||
        gemm_prep(r, v, b, pn->tmp[1], nb, out->shape, &B))
        return -1;
    int rc = kern_gemm_nd(out->dtype, nb, out->shape, out->shape[nb], out->shape[nb + 1], K, &A,
                          x->a.i[0] != 0, &B, x->a.i[1] != 0, beta, out->data);
    return rc ? kern_fail(r->p, v, rc, "matmul") : 0;
}

/* Whether w's bytes meet dst's (each taken as the span from its lowest to its highest
 * element). */
static bool views_overlap(const graph_view *w, const graph_view *dst) {
    const graph_view *vs[2] = {w, dst};
    uintptr_t lo[2], hi[2];
    for (int i = 0; i < 2; i++) {
        int64_t first = 0, last = 0, es = (int64_t)esize(vs[i]);
        if (numel(vs[i]) == 0 || !vs[i]->data)
            return false;
        for (int d = 0; d < vs[i]->ndim; d++) {
            int64_t span = (vs[i]->shape[d] - 1) * vs[i]->strides[d];
            first += span < 0 ? span : 0;
            last += span > 0 ? span : 0;
        }
        lo[i] = (uintptr_t)vs[i]->data + (uintptr_t)(first * es);
        hi[i] = (uintptr_t)vs[i]->data + (uintptr_t)((last + 1) * es);
    }
    return lo[0] < hi[1] && lo[1] < hi[0];
}

/* Whether dst shares memory from outside the arena (inputs, hook results): the GEMM's
 * operands may be views of it. */
static bool target_is_read(const run_ctx *r, graph_val v, const graph_view *dst) {
    for (graph_val u = 0; u < v; u++) {
        int8_t k = r->p->nodes[u].kind;
        if ((k == PK_INPUT || k == PK_HOOK) && views_overlap(&r->p->views[u], dst))
            return true;
    }
    return false;
}

/* A matmul whose ACCUMULATE may be folded in (find_folds): ask for the .grad and write
 * it, GEMM beta = 1 onto a gradient that is there, 0 into a fresh one. */
static int run_matmul_acc(run_ctx *r, graph_val v, const graph_node *x, graph_view *out) {
    const plan_node *pn = &r->p->nodes[v];
    plan_node *pa = &r->p->nodes[pn->fold];
    pa->folded = false;
    if (!r->cb->accumulate_target)
        return run_matmul(r, v, x, out, 0.0);
    graph_view want = *out, dst;
    want.data = NULL;
    memset(&dst, 0, sizeof dst);
    bool has = false;
    int rc =
        r->cb->accumulate_target(r->cb->ctx, graph_node_at(r->p->g, pn->fold), &want, &dst, &has);
    if (rc)
        return rc;
    if (!dst.data) /* declined */
        return run_matmul(r, v, x, out, 0.0);
    bool fits = view_matches(&dst, out->dtype, out->ndim, out->shape);
    char b1[96], b2[96];
    if (!fits && !has)
        return fail(r->p, v, "the new .grad is %s for a gradient %s",
                    view_str(dst.dtype, dst.ndim, dst.shape, b1),
                    view_str(out->dtype, out->ndim, out->shape, b2));
    if (fits && is_contig(&dst) && !target_is_read(r, v, &dst)) {
        if ((rc = run_matmul(r, v, x, &dst, has ? 1.0 : 0.0)) == 0) {
            pa->folded = true;
            *out = dst;
        }
        return rc;
    }
    if ((rc = run_matmul(r, v, x, out, 0.0)) != 0 || has)
        return rc; /* the ACCUMULATE's call adds it, at its step */
    if ((rc = copy_strided(dst.data, dst.strides, out)) != 0)
        return kern_fail(r->p, v, rc, "copy into .grad");
    pa->folded = true;
    return 0;
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
    kern_split_dim(out->ndim, out->shape, d, &outer, &n, &inner);
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
    kern_split_dim(blk.ndim, blk.shape, d, &outer, &n, &inner);
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
    double scale = red == GRAPH_REDUCTION_MEAN ? 1.0 / kern_load(tw->dtype, tw->data, 0) : 1.0;
    for (int64_t i = 0; i < N * inner; i++) {
        int64_t k = ((const int64_t *)t->data)[offset_of(t, i)];
        if (k == ignore)
            continue;
        if (k < 0 || k >= C)
            return fail(r->p, v,
                        "nll_loss backward: target %lld at position %lld is out of range for "
                        "%lld classes",
                        (long long)k, (long long)i, (long long)C);
        double gv = kern_load(g->dtype, g->data, red == GRAPH_REDUCTION_NONE ? offset_of(g, i) : 0);
        kern_store(out->dtype, out->data, ((i / inner) * C + k) * inner + i % inner, -gv * scale);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Fused loops
 */

/* A whole fused group at its anchor v: inputs broadcast into the members' space, outputs
 * into their buffers, or the reduction's result into its buffer. */
static int run_fused(run_ctx *r, graph_val v) {
    graph_plan *p = r->p;
    const plan_group *G = &p->groups[p->nodes[v].grp];
    graph_view space;
    node_view(p, graph_node_at(p->g, G->first), NULL, &space);
    kern_src in[KERN_FUSED_MAX_INPUTS];
    for (int i = 0; i < G->prog.n_inputs; i++)
        bcast_src(&p->views[G->in[i]], &space, &in[i]);
    void *scratch = r->arena + p->scratch_off;
    int rc;
    if (G->reduce >= 0) {
        const graph_node *x = graph_node_at(p->g, G->reduce);
        graph_view *out = &p->views[G->reduce];
        node_view(p, x, buf_ptr(r, p->nodes[G->reduce].buf), out);
        uint32_t mask = x->a.op == GOP_SUM
                            ? (uint32_t)x->a.i[0]
                            : sum_to_mask(space.ndim, space.shape, out->ndim, out->shape);
        rc = kern_fused_reduce_ws(&G->prog, space.dtype, space.ndim, space.shape, in, KRED_SUM,
                                  mask, out->data, scratch, p->scratch_bytes);
    } else {
        void *out[KERN_FUSED_MAX_OUTPUTS];
        const int64_t *out_strides[KERN_FUSED_MAX_OUTPUTS];
        for (int k = 0; k < G->n_out; k++) {
            graph_view *o = &p->views[G->out[k]];
            node_view(p, graph_node_at(p->g, G->out[k]), buf_ptr(r, p->nodes[G->out[k]].buf), o);
            out[k] = o->data;
            out_strides[k] = o->strides;
        }
        rc = kern_fused_run_memo(&G->prog, space.dtype, space.ndim, space.shape, in, out,
                                 out_strides, scratch, p->scratch_bytes, G->memo);
    }
    return rc ? kern_fail(p, v, rc, "fused loop") : 0;
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
    case GOP_MATMUL:
        return r->p->nodes[v].fold >= 0 ? run_matmul_acc(r, v, x, out)
                                        : run_matmul(r, v, x, out, 0.0);
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
        case PK_FUSED_TMP:
        case PK_FUSED_OUT: break; /* computed where its group runs */
        case PK_FUSED_RUN: rc = run_fused(&r, v); break;
        default: rc = run_buffer(&r, v); break;
        }
        if (rc)
            return rc;
    }
    return 0;
}
