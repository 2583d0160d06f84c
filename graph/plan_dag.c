/* plan_dag.c - which steps of a plan may run at the same time.
 *
 * The serial runner goes in graph order, and the memory plan relies on it: a buffer freed
 * by one value is reused by a later one. Running steps side by side keeps every order
 * that matters as an edge:
 *  - values: a step waits for the steps that make what it reads; a fused member is made
 *    where its group runs (the anchor), and the anchor waits for what every member reads;
 *  - buffers: a step that writes a buffer (its value, a fused group's outputs) waits for
 *    the buffer's previous writer and for every step that read the previous value since
 *    (temporaries never share memory with values: steps that copy an operand take a lock
 *    in the runner instead); reading through a view (or a hook that passed its gradient on,
 *    or a reshape that may or may not copy) reads the buffers underneath;
 *  - the caller's thread: hooks, call-outs and a GEMM that writes .grad itself run on the
 *    caller's thread, in graph order, as in the serial run;
 *  - memory outside the arena: user code (hooks, custom functions' call-outs) may change
 *    the graph's inputs in place (an optimizer step in a post-accumulate-grad hook updates
 *    a weight that a GEMM reads), so the inputs count as one more buffer, which such steps
 *    write: a step that reads an input keeps its place between them, as in eager.
 * Edges are collected as (from, to) pairs, sorted, deduplicated and stored as successor
 * lists with a predecessor count per step. Every edge must point forward in graph order,
 * which also proves the DAG has no cycle; a plan where one would not gets no DAG and
 * always runs serially.
 */
#include "graph/internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t from, to;
} dag_edge;

typedef struct {
    const graph_plan *p;
    dag_edge *e;
    int n_e, cap_e;
    int32_t *last_writer; /* per buffer */
    int32_t *rd_head;     /* per buffer: readers since its last write, a list */
    int32_t *rd_node, *rd_next;
    int n_rd, cap_rd_node, cap_rd_next;
    bool oom;
    bool backward;   /* an edge against graph order: no DAG (the serial run only) */
    int32_t outside; /* the buffer number standing for the inputs' memory */
} dag_builder;

static bool grow(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap)
        return true;
    int ncap = *cap ? *cap * 2 : 256;
    while (ncap < need)
        ncap *= 2;
    void *n = cai_graph_mem_alloc(elem * (size_t)ncap);
    if (!n)
        return false;
    if (*arr)
        memcpy(n, *arr, elem * (size_t)*cap);
    cai_graph_mem_free(*arr);
    *arr = n;
    *cap = ncap;
    return true;
}

static void add_edge(dag_builder *b, int32_t from, int32_t to) {
    if (from < 0 || from == to || b->oom)
        return;
    if (from > to) { /* a step that waits for a later one: graph order would not hold */
        b->backward = true;
        return;
    }
    if (!grow((void **)&b->e, &b->cap_e, b->n_e + 1, sizeof(dag_edge))) {
        b->oom = true;
        return;
    }
    b->e[b->n_e++] = (dag_edge){from, to};
}

static bool is_step(int8_t kind) {
    return kind != PK_SKIP && kind != PK_INPUT && kind != PK_FUSED_TMP && kind != PK_FUSED_OUT;
}

/* The step that makes value u: its group's anchor for a fused member, -1 for an input. */
static int32_t maker(const graph_plan *p, graph_val u) {
    const plan_node *pn = &p->nodes[u];
    if ((pn->kind == PK_FUSED_TMP || pn->kind == PK_FUSED_OUT) && pn->grp >= 0 && p->groups)
        return p->groups[pn->grp].anchor;
    return is_step(pn->kind) ? u : -1;
}

static bool on_caller(const graph_plan *p, graph_val v) {
    const plan_node *pn = &p->nodes[v];
    return pn->kind == PK_HOOK || pn->kind == PK_CALL || pn->kind == PK_RESULT ||
           (pn->kind == PK_BUFFER && pn->fold >= 0);
}

static void note_read(dag_builder *b, int32_t buf, graph_val v) {
    if (buf < 0 || b->oom)
        return;
    add_edge(b, b->last_writer[buf], v);
    if (!grow((void **)&b->rd_node, &b->cap_rd_node, b->n_rd + 1, sizeof(int32_t)) ||
        !grow((void **)&b->rd_next, &b->cap_rd_next, b->n_rd + 1, sizeof(int32_t))) {
        b->oom = true;
        return;
    }
    b->rd_node[b->n_rd] = v;
    b->rd_next[b->n_rd] = b->rd_head[buf];
    b->rd_head[buf] = b->n_rd++;
}

/* Every buffer value u's bytes may lie in, read by step v. */
static void read_value(dag_builder *b, graph_val u, graph_val v) {
    const graph_plan *p = b->p;
    for (;;) {
        const plan_node *pn = &p->nodes[u];
        const graph_node *x = cai_graph_node_at(p->g, u);
        switch (pn->kind) {
        case PK_BUFFER:
        case PK_FUSED_OUT:
        case PK_FUSED_RUN: note_read(b, pn->buf, v); return;
        case PK_MAYBE_VIEW: note_read(b, pn->buf, v); break; /* and what it may view */
        case PK_VIEW:
        case PK_HOOK: break; /* a view of its input; a hook may pass its input on */
        case PK_INPUT: note_read(b, b->outside, v); return; /* user code may change it */
        default: return; /* call-out results: memory of their own */
        }
        if (x->a.n_in < 1)
            return;
        u = x->a.in[0];
    }
}

/* Steps that run user code, which may change the inputs' memory. */
static bool runs_user_code(const graph_plan *p, graph_val v) {
    int op = cai_graph_node_at(p->g, v)->a.op;
    return op == GOP_HOOK || op == GOP_POST_HOOK || op == GOP_CALLOUT;
}

static void note_write(dag_builder *b, int32_t buf, graph_val v) {
    if (buf < 0)
        return;
    add_edge(b, b->last_writer[buf], v);
    for (int32_t k = b->rd_head[buf]; k >= 0 && b->rd_node && b->rd_next; k = b->rd_next[k])
        add_edge(b, b->rd_node[k], v);
    b->rd_head[buf] = -1;
    b->last_writer[buf] = v;
}

static void read_inputs_of(dag_builder *b, graph_val m, graph_val v) {
    const graph_node *x = cai_graph_node_at(b->p->g, m);
    for (int k = 0; k < x->a.n_in; k++) {
        graph_val u = x->a.in[k];
        if (maker(b->p, u) == v)
            continue; /* made by this same group */
        add_edge(b, maker(b->p, u), v);
        read_value(b, u, v);
    }
}

/* Edges into step v, in graph order: what it reads, then what it writes. */
static void step_edges(dag_builder *b, graph_val v, graph_val *prev_caller) {
    const graph_plan *p = b->p;
    const plan_node *pn = &p->nodes[v];
    const plan_group *G =
        pn->kind == PK_FUSED_RUN && pn->grp >= 0 && p->groups ? &p->groups[pn->grp] : NULL;
    if (G) { /* the members, and the reduction the group may end in (not a member) */
        for (int m = 0; m < G->n_members; m++)
            read_inputs_of(b, G->member[m], v);
        if (G->reduce >= 0)
            read_inputs_of(b, G->reduce, v);
    } else {
        read_inputs_of(b, v, v);
    }
    if (on_caller(p, v)) {
        add_edge(b, *prev_caller, v);
        *prev_caller = v;
    }
    if (runs_user_code(p, v))
        note_write(b, b->outside, v);
    if (G) {
        for (int m = 0; m < G->n_members; m++)
            if (G->member[m] != v)
                note_write(b, p->nodes[G->member[m]].buf, v);
        if (G->reduce >= 0 && G->reduce != v)
            note_write(b, p->nodes[G->reduce].buf, v);
    }
    if (G || pn->kind == PK_BUFFER || pn->kind == PK_MAYBE_VIEW)
        note_write(b, pn->buf, v);
    /* temporaries share memory with temporaries only; the runner locks them (tmp_ptr) */
}

static int edge_cmp(const void *a, const void *b) {
    const dag_edge *x = a, *y = b;
    if (x->from != y->from)
        return x->from < y->from ? -1 : 1;
    return (x->to > y->to) - (x->to < y->to);
}

/* The DAG in one block: header, steps, predecessor counts, successor offsets and lists. */
static plan_dag *dag_store(const graph_plan *p, dag_builder *b) {
    if (b->n_e > 1)
        qsort(b->e, (size_t)b->n_e, sizeof(dag_edge), edge_cmp);
    int n = p->n_nodes, n_e = 0, n_steps = 0;
    for (int i = 0; i < b->n_e; i++)
        if (i == 0 || edge_cmp(&b->e[i], &b->e[i - 1]) != 0)
            b->e[n_e++] = b->e[i];
    for (graph_val v = 0; v < n; v++)
        n_steps += is_step(p->nodes[v].kind);
    size_t nn = (size_t)n;
    size_t bytes = sizeof(plan_dag) + sizeof(int64_t) * nn +
                   sizeof(int32_t) * ((size_t)n_steps + 5 * nn + 1 + (size_t)n_e) +
                   sizeof(bool) * nn;
    plan_dag *d = cai_graph_mem_alloc(bytes);
    if (!d)
        return NULL;
    d->n_steps = n_steps;
    d->prio = (int64_t *)(d + 1); /* first: the 8-byte entries stay aligned */
    d->pending = (int32_t *)(d->prio + n);
    d->heap = d->pending + n;
    d->caller_q = d->heap + n;
    d->step = d->caller_q + n;
    d->n_pred = d->step + n_steps;
    d->succ_off = d->n_pred + n;
    d->succ = d->succ_off + n + 1;
    d->on_caller = (bool *)(d->succ + n_e);
    memset(d->n_pred, 0, sizeof(int32_t) * (size_t)n);
    memset(d->succ_off, 0, sizeof(int32_t) * ((size_t)n + 1));
    for (int i = 0; i < n_e; i++) {
        d->n_pred[b->e[i].to]++;
        d->succ_off[b->e[i].from + 1]++;
        d->succ[i] = b->e[i].to; /* sorted by from: the lists are in place */
    }
    for (graph_val v = 0; v < n; v++)
        d->succ_off[v + 1] += d->succ_off[v];
    for (graph_val v = 0, k = 0; v < n; v++) {
        d->on_caller[v] = on_caller(p, v);
        if (is_step(p->nodes[v].kind))
            d->step[k++] = v;
    }
    return d;
}

plan_dag *cai_graph_plan_dag_new(const graph_plan *p) {
    dag_builder b = {.p = p, .outside = p->n_bufs > 0 ? p->n_bufs : 0};
    size_t nb = (size_t)b.outside + 1;
    b.last_writer = cai_graph_mem_alloc(sizeof(int32_t) * nb);
    b.rd_head = cai_graph_mem_alloc(sizeof(int32_t) * nb);
    plan_dag *d = NULL;
    if (b.last_writer && b.rd_head) {
        for (size_t i = 0; i < nb; i++)
            b.last_writer[i] = b.rd_head[i] = -1;
        graph_val prev_caller = -1;
        for (graph_val v = 0; v < p->n_nodes && !b.oom; v++)
            if (is_step(p->nodes[v].kind))
                step_edges(&b, v, &prev_caller);
        if (!b.oom && !b.backward)
            d = dag_store(p, &b);
    }
    cai_graph_mem_free(b.e);
    cai_graph_mem_free(b.rd_node);
    cai_graph_mem_free(b.rd_next);
    cai_graph_mem_free(b.last_writer);
    cai_graph_mem_free(b.rd_head);
    return d;
}

void cai_graph_plan_dag_free(plan_dag *d) {
    cai_graph_mem_free(d);
}
