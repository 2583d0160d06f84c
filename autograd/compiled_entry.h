/* compiled_entry.h - one compiled graph of the cache: compiled.c compiles it and looks it
 * up, compiled_run.c runs it (its call-outs back into the autograd layer included).
 * Private to those two files. */
#ifndef CAGRAD_COMPILED_ENTRY_H
#define CAGRAD_COMPILED_ENTRY_H

#include "autograd/compiled.h"
#include "autograd/compiled_callout.h"
#include "autograd/compiled_double.h"

#include <pthread.h>

/* One run's state: a plan of the graph (the plan's own run scratch with it), its arena,
 * and the call's symbol values and input views. An entry compiles with one; threads that
 * run the entry at once each take a slot of their own, made on first need and kept. */
typedef struct run_slot {
    pthread_mutex_t lock; /* held by the thread running with it */
    graph_plan *plan;
    void *arena;
    size_t arena_cap;
    int64_t *sym_values;
    graph_view *inputs;
    bool verdict_logged; /* the verbose log has said how its plan runs on the pool */
    struct run_slot *next;
} run_slot;

/* What a cache entry holds: the graph, and its run slots, allocated when it is compiled
 * so a steady-state run allocates nothing. */
typedef struct {
    graph *g;
    trace_read *reads; /* saved tensors the rules read: checked before each run */
    int n_reads;
    trace_callout *callouts; /* its call-outs, by number */
    int n_callouts;
    /* per lifted leaf: its accumulate_grad reads a call-out result nothing else reads, so
     * a result no one else holds may become .grad itself (as eager steals it) */
    uint8_t *steal;
    int n_symbols;
    int n_inputs;
    dbl_tape *tape;           /* create_graph: what makes its gradients differentiable */
    run_slot *slots;          /* the first is made with the entry; never empty */
    pthread_mutex_t slots_mu; /* guards appending to slots */
} compiled_graph;

/* How one run went, for the shared counters, profile and log (written under ca_lock after
 * the run, which holds only its entry's lock). */
typedef struct {
    bool profiling, verbose; /* the settings when it started */
    bool side_by_side;
    ca_compiled_profile profile; /* profiling: steps 0 when the run was not timed */
} run_report;

/* The eager rules' checks of the saved tensors the graph reads, in their order. */
ca_status cai_entry_check_reads(const compiled_graph *cg, const key_collect *k);
/* This call's symbol values and input views, from the collected key, into slot s. */
void cai_entry_bind(const cache_entry *e, run_slot *s, const key_collect *k);
/* A run slot of cg, locked: a free one, else a new one (else, out of memory, the first,
 * waited for). cai_slot_release lets it go. */
run_slot *cai_slot_acquire(compiled_graph *cg);
void cai_slot_release(run_slot *s);
/* A new slot for cg's graph (NULL when out of memory), and freeing one. */
run_slot *cai_slot_new(const compiled_graph *cg);
void cai_slot_free(run_slot *s);
/* Run entry e for call c with key k on slot s (held); GOP_OUTPUT i writes outs[i]. */
ca_status cai_entry_run(const compiled_call *c, const cache_entry *e, run_slot *s,
                        const key_collect *k, ca_tensor **outs, run_report *rep);
/* The same for a create_graph backward (compiled_double.h): the outputs become
 * differentiable, and leaves take theirs into .grad. */
ca_status cai_entry_run_double(const compiled_call *c, const cache_entry *e, run_slot *s,
                               const key_collect *k, run_report *rep);

#endif /* CAGRAD_COMPILED_ENTRY_H */
