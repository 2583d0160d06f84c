/* walk.h - the walk of an autograd graph (walk.c), shared by the eager engine and the
 * compiled backward: its nodes in the execution order, and each node's state for one
 * backward. */
#ifndef CAGRAD_WALK_H
#define CAGRAD_WALK_H

#include "autograd/internal.h"

/* ---------------------------------------------------------------------------------------
 * The walk (walk.c): the nodes reachable from some roots, in the one deterministic
 * execution order, and each node's state for this one backward. That state lives in the
 * walk, never in the node: threads backwarding at once through graphs that share nodes
 * (the AccumulateGrad nodes of one model's leaves) each keep their own. Buffers are kept
 * between walks.
 */
typedef struct {
    ca_node **v;
    int n, cap;
} node_vec;

/* One node's state in one backward. */
typedef struct {
    ca_node *node;
    int deps;       /* edges from nodes of the walk not yet ordered (used up by ordering) */
    int order_pos;  /* its place in the execution order: NodeCall order_pos + 1 */
    bool needed;    /* its rule runs (cai_walk_mark_needed) */
    ca_tensor *buf; /* gradient accumulated for output 0 */
    int extra;      /* outputs 1..n_out-1 (custom functions): their buffers from extra[] */
} walk_slot;

typedef struct {
    node_vec nodes;   /* discovery order: nodes.v[i] is slots[i].node */
    node_vec order;   /* execution order: the most recently created ready node first */
    node_vec scratch; /* discovery's stack */
    int32_t *heap;    /* ordering's heap of slot indices */
    int cap_heap;
    walk_slot *slots;
    int cap_slots;
    int32_t *table; /* open addressing, node address -> slot index, -1 empty */
    int table_cap;  /* a power of two, above twice the nodes */
    ca_tensor **extra;
    int n_extra, cap_extra;
} ca_walk;

/* Walk from the roots: every slot starts with nothing needed and no gradient. */
ca_status cai_walk_graph(ca_walk *w, ca_node *const *roots, int n_roots);
void cai_walk_free(ca_walk *w);

static inline uint32_t walk_hash(const ca_node *n, int cap) {
    uint64_t p = (uint64_t)(uintptr_t)n >> 4; /* nodes are 16-byte aligned */
    return (uint32_t)((p * 0x9E3779B97F4A7C15ULL) >> 32) & (uint32_t)(cap - 1);
}

/* n's slot index in w, or -1 when the walk did not reach n. */
static inline int cai_walk_find(const ca_walk *w, const ca_node *n) {
    if (!w->table_cap || !n)
        return -1;
    for (uint32_t h = walk_hash(n, w->table_cap);; h = (h + 1) & (uint32_t)(w->table_cap - 1)) {
        int32_t i = w->table[h];
        if (i < 0 || w->slots[i].node == n)
            return i;
    }
}

/* n's slot; n must be in the walk. */
static inline walk_slot *walk_slot_of(const ca_walk *w, const ca_node *n) {
    int i = cai_walk_find(w, n);
    CA_ASSERT(i >= 0);
    return &w->slots[i];
}

/* Whether n is in the walk and its rule runs. */
static inline bool cai_walk_needed(const ca_walk *w, const ca_node *n) {
    int i = cai_walk_find(w, n);
    return i >= 0 && w->slots[i].needed;
}

/* NodeCall number of n (its place in the order, from 1), or -1 outside the walk. */
static inline int cai_walk_call_id(const ca_walk *w, const ca_node *n) {
    int i = cai_walk_find(w, n);
    return i >= 0 ? w->slots[i].order_pos + 1 : -1;
}

/* Where output k of n (in the walk) accumulates its gradient during this backward. */
static inline ca_tensor **cai_walk_buf(const ca_walk *w, const ca_node *n, int k) {
    walk_slot *s = walk_slot_of(w, n);
    return k == 0 ? &s->buf : &w->extra[s->extra + k - 1];
}

/* Set needed: every node for a backward; for autograd.grad (capture), the targets and the
 * nodes on a path to one. */
void cai_walk_mark_needed(ca_walk *w, bool capture, ca_node *const *targets, int n_targets);
/* Whether one of n's edges leads to a needed node. A node's rule runs only then:
 * autograd.grad w.r.t. a non-leaf y stops at y and leaves y's own grad_fn (and its saved
 * values) alone. Every backward (eager, traced, compiled) asks this one question. */
bool cai_walk_leads_on(const ca_walk *w, const ca_node *n);

#endif /* CAGRAD_WALK_H */
