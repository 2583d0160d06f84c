/* walk.c - the one deterministic walk of an autograd graph, shared by the eager engine
 * and the compiled backward.
 *
 *  1. discover: depth-first from the roots, counting for each node the edges pointing at
 *     it (its slot's deps);
 *  2. order: Kahn's algorithm, taking the most recently created ready node first (as
 *     PyTorch does), so every walk of the same graph gives the same order.
 * What a backward knows about a node (found, pending edges, needed, its gradient so far)
 * is the walk's: a slot per node, found through a hash table keyed by the node's address.
 * Nodes are never written, so two threads may walk graphs that share nodes at once. A walk
 * keeps its buffers between uses, so a steady-state backward walks without allocating.
 */
#include "autograd/walk.h"

#include <string.h>

static ca_status vec_reserve(node_vec *vec, int need) {
    if (!mem_grow((void **)&vec->v, &vec->cap, need, sizeof(ca_node *)))
        return err_nomem("the backward's node list");
    return CA_OK;
}

static ca_status vec_push(node_vec *vec, ca_node *n) {
    CA_CHECK(vec_reserve(vec, vec->n + 1));
    vec->v[vec->n++] = n;
    return CA_OK;
}

static void table_clear(ca_walk *w) {
    if (w->table_cap)
        memset(w->table, 0xff, sizeof(int32_t) * (size_t)w->table_cap);
}

static void table_put(ca_walk *w, const ca_node *n, int32_t i) {
    uint32_t h = walk_hash(n, w->table_cap);
    while (w->table[h] >= 0)
        h = (h + 1) & (uint32_t)(w->table_cap - 1);
    w->table[h] = i;
}

/* Keep the table under half full: double it and put every slot back. */
static ca_status table_reserve(ca_walk *w, int n_slots) {
    if (2 * n_slots < w->table_cap)
        return CA_OK;
    int cap = w->table_cap ? w->table_cap : 64;
    while (2 * n_slots >= cap)
        cap *= 2;
    int32_t *t = cai_mem_alloc(sizeof(int32_t) * (size_t)cap);
    if (!t)
        return err_nomem("the backward's node table");
    cai_mem_free(w->table);
    w->table = t;
    w->table_cap = cap;
    table_clear(w);
    for (int i = 0; i < w->nodes.n; i++)
        table_put(w, w->slots[i].node, i);
    return CA_OK;
}

/* Room in extra[] for the buffers of n's outputs 1..n_out-1; *at gets where they start. */
static ca_status extra_take(ca_walk *w, const ca_node *n, int *at) {
    *at = w->n_extra;
    if (n->n_out <= 1)
        return CA_OK;
    int need = w->n_extra + n->n_out - 1;
    if (!mem_grow((void **)&w->extra, &w->cap_extra, need, sizeof(ca_tensor *)))
        return err_nomem("the backward's gradient buffers");
    for (int k = w->n_extra; k < need; k++)
        w->extra[k] = NULL;
    w->n_extra = need;
    return CA_OK;
}

/* Give n a fresh slot and queue it. */
static ca_status visit(ca_walk *w, node_vec *stack, ca_node *n) {
    int i = w->nodes.n;
    CA_CHECK(table_reserve(w, i + 1));
    if (!mem_grow((void **)&w->slots, &w->cap_slots, i + 1, sizeof(walk_slot)))
        return err_nomem("the backward's node states");
    walk_slot *s = &w->slots[i];
    *s = (walk_slot){.node = n, .order_pos = -1};
    CA_CHECK(extra_take(w, n, &s->extra));
    CA_CHECK(vec_push(&w->nodes, n));
    table_put(w, n, i);
    return vec_push(stack, n);
}

static ca_status discover(ca_walk *w, ca_node *const *roots, int n_roots) {
    node_vec *stack = &w->scratch;
    stack->n = 0;
    for (int i = 0; i < n_roots; i++)
        if (cai_walk_find(w, roots[i]) < 0)
            CA_CHECK(visit(w, stack, roots[i]));
    while (stack->n > 0) {
        ca_node *n = stack->v[--stack->n];
        for (int i = 0; i < n->n_in; i++) {
            ca_node *c = n->next[i].fn;
            if (!c)
                continue;
            int at = cai_walk_find(w, c);
            if (at < 0) {
                at = w->nodes.n;
                CA_CHECK(visit(w, stack, c));
            }
            w->slots[at].deps++;
        }
    }
    return CA_OK;
}

/* A max-heap of slot indices on their nodes' creation sequence numbers. */
static uint64_t seq_at(const ca_walk *w, int i) {
    return w->slots[w->heap[i]].node->seq;
}

static void heap_swap(ca_walk *w, int a, int b) {
    int32_t t = w->heap[a];
    w->heap[a] = w->heap[b];
    w->heap[b] = t;
}

static void heap_push(ca_walk *w, int *n, int slot) {
    int i = (*n)++;
    w->heap[i] = slot;
    while (i > 0 && seq_at(w, (i - 1) / 2) < seq_at(w, i)) {
        heap_swap(w, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static int heap_pop(ca_walk *w, int *n) {
    int top = w->heap[0];
    w->heap[0] = w->heap[--*n];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && seq_at(w, l) > seq_at(w, m))
            m = l;
        if (r < *n && seq_at(w, r) > seq_at(w, m))
            m = r;
        if (m == i)
            break;
        heap_swap(w, i, m);
        i = m;
    }
    return top;
}

/* Consumes the slots' deps. */
static ca_status order(ca_walk *w) {
    int n = w->nodes.n, in_heap = 0;
    if (!mem_grow((void **)&w->heap, &w->cap_heap, n, sizeof(int32_t)))
        return err_nomem("the backward's node list");
    CA_CHECK(vec_reserve(&w->order, n));
    for (int i = 0; i < n; i++)
        if (w->slots[i].deps == 0)
            heap_push(w, &in_heap, i);
    while (in_heap > 0) {
        walk_slot *x = &w->slots[heap_pop(w, &in_heap)];
        x->order_pos = w->order.n;
        w->order.v[w->order.n++] = x->node;
        for (int i = 0; i < x->node->n_in; i++) {
            ca_node *c = x->node->next[i].fn;
            if (!c)
                continue;
            int at = cai_walk_find(w, c);
            if (--w->slots[at].deps == 0)
                heap_push(w, &in_heap, at);
        }
    }
    return CA_OK;
}

ca_status cai_walk_graph(ca_walk *w, ca_node *const *roots, int n_roots) {
    w->nodes.n = w->order.n = w->n_extra = 0;
    table_clear(w);
    CA_CHECK(discover(w, roots, n_roots));
    return order(w);
}

void cai_walk_free(ca_walk *w) {
    cai_mem_free(w->nodes.v);
    cai_mem_free(w->order.v);
    cai_mem_free(w->scratch.v);
    cai_mem_free(w->heap);
    cai_mem_free(w->slots);
    cai_mem_free(w->table);
    cai_mem_free(w->extra);
    memset(w, 0, sizeof *w);
}

void cai_walk_mark_needed(ca_walk *w, bool capture, ca_node *const *targets, int n_targets) {
    for (int i = 0; i < w->nodes.n; i++)
        w->slots[i].needed = !capture;
    if (!capture)
        return;
    for (int i = 0; i < n_targets; i++) {
        int at = cai_walk_find(w, targets[i]);
        if (at >= 0)
            w->slots[at].needed = true;
    }
    /* children come after parents in the order, so one backward sweep settles it */
    for (int i = w->order.n - 1; i >= 0; i--) {
        walk_slot *x = walk_slot_of(w, w->order.v[i]);
        for (int k = 0; k < x->node->n_in && !x->needed; k++)
            if (cai_walk_needed(w, x->node->next[k].fn))
                x->needed = true;
    }
}

bool cai_walk_leads_on(const ca_walk *w, const ca_node *n) {
    for (int i = 0; i < n->n_in; i++)
        if (cai_walk_needed(w, n->next[i].fn))
            return true;
    return false;
}
