/* walk.c - the one deterministic walk of an autograd graph, shared by the eager engine
 * and the compiled backward.
 *
 *  1. discover: depth-first from the roots, counting for each node the edges pointing at
 *     it (node->deps);
 *  2. order: Kahn's algorithm, taking the most recently created ready node first (as
 *     PyTorch does), so every walk of the same graph gives the same order.
 * A walk keeps its buffers between uses, so a steady-state backward walks without
 * allocating.
 */
#include "autograd/internal.h"

#include <stdatomic.h>
#include <string.h>

/* Atomic: walks on different threads (backwards of distinct graphs) each need an epoch no
 * other walk has, or one walk would take another's nodes for already found. */
static atomic_uint_fast64_t epoch_counter = 0;

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

/* Mark n found in this walk and queue it. */
static ca_status visit(ca_walk *w, node_vec *stack, ca_node *n) {
    n->epoch = w->epoch;
    n->deps = 0;
    n->needed = false;
    CA_CHECK(vec_push(&w->nodes, n));
    return vec_push(stack, n);
}

static ca_status discover(ca_walk *w, ca_node *const *roots, int n_roots) {
    node_vec *stack = &w->scratch;
    stack->n = 0;
    for (int i = 0; i < n_roots; i++)
        if (roots[i]->epoch != w->epoch)
            CA_CHECK(visit(w, stack, roots[i]));
    while (stack->n > 0) {
        ca_node *n = stack->v[--stack->n];
        for (int i = 0; i < n->n_in; i++) {
            ca_node *c = n->next[i].fn;
            if (!c)
                continue;
            if (c->epoch != w->epoch)
                CA_CHECK(visit(w, stack, c));
            c->deps++;
        }
    }
    return CA_OK;
}

/* A max-heap on creation sequence number. */
static void heap_push(node_vec *h, ca_node *n) {
    int i = h->n++;
    h->v[i] = n;
    while (i > 0 && h->v[(i - 1) / 2]->seq < h->v[i]->seq) {
        ca_node *t = h->v[i];
        h->v[i] = h->v[(i - 1) / 2];
        h->v[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static ca_node *heap_pop(node_vec *h) {
    ca_node *top = h->v[0];
    h->v[0] = h->v[--h->n];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && h->v[l]->seq > h->v[m]->seq)
            m = l;
        if (r < h->n && h->v[r]->seq > h->v[m]->seq)
            m = r;
        if (m == i)
            break;
        ca_node *t = h->v[i];
        h->v[i] = h->v[m];
        h->v[m] = t;
        i = m;
    }
    return top;
}

/* Consumes node->deps. */
static ca_status order(ca_walk *w) {
    int n = w->nodes.n;
    node_vec *heap = &w->scratch;
    CA_CHECK(vec_reserve(heap, n));
    CA_CHECK(vec_reserve(&w->order, n));
    heap->n = 0;
    for (int i = 0; i < n; i++)
        if (w->nodes.v[i]->deps == 0)
            heap_push(heap, w->nodes.v[i]);
    while (heap->n > 0) {
        ca_node *x = heap_pop(heap);
        w->order.v[w->order.n++] = x;
        for (int i = 0; i < x->n_in; i++) {
            ca_node *c = x->next[i].fn;
            if (c && --c->deps == 0)
                heap_push(heap, c);
        }
    }
    return CA_OK;
}

uint64_t cai_walk_new_epoch(void) {
    return atomic_fetch_add(&epoch_counter, 1) + 1;
}

ca_status cai_walk_graph(ca_walk *w, ca_node *const *roots, int n_roots) {
    w->epoch = cai_walk_new_epoch();
    w->nodes.n = w->order.n = 0;
    CA_CHECK(discover(w, roots, n_roots));
    return order(w);
}

void cai_walk_free(ca_walk *w) {
    cai_mem_free(w->nodes.v);
    cai_mem_free(w->order.v);
    cai_mem_free(w->scratch.v);
    memset(w, 0, sizeof *w);
}

void cai_walk_mark_needed(ca_walk *w, bool capture, ca_node *const *targets, int n_targets) {
    for (int i = 0; i < w->order.n; i++)
        w->order.v[i]->needed = !capture;
    if (!capture)
        return;
    for (int i = 0; i < n_targets; i++)
        if (targets[i])
            targets[i]->needed = true;
    /* children come after parents in the order, so one backward sweep settles it */
    for (int i = w->order.n - 1; i >= 0; i--) {
        ca_node *x = w->order.v[i];
        for (int k = 0; k < x->n_in && !x->needed; k++)
            if (x->next[k].fn && x->next[k].fn->needed)
                x->needed = true;
    }
}

bool cai_node_leads_on(const ca_node *n) {
    for (int i = 0; i < n->n_in; i++)
        if (n->next[i].fn && n->next[i].fn->needed)
            return true;
    return false;
}
