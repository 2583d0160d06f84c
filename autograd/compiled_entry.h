/* compiled_entry.h - one compiled graph of the cache: compiled.c compiles it and looks it
 * up, compiled_run.c runs it (its call-outs back into the autograd layer included).
 * Private to those two files. */
#ifndef CAGRAD_COMPILED_ENTRY_H
#define CAGRAD_COMPILED_ENTRY_H

#include "autograd/compiled.h"
#include "autograd/compiled_callout.h"
#include "autograd/compiled_double.h"

#include <pthread.h>

/* What a cache entry holds: the graph, its plan, its arena, and per-run scratch, all
 * allocated when it is compiled so a steady-state run allocates nothing. */
typedef struct {
    graph *g;
    trace_read *reads; /* saved tensors the rules read: checked before each run */
    int n_reads;
    trace_callout *callouts; /* its call-outs, by number */
    int n_callouts;
    /* per lifted leaf: its accumulate_grad reads a call-out result nothing else reads, so
     * a result no one else holds may become .grad itself (as eager steals it) */
    uint8_t *steal;
    graph_plan *plan;
    void *arena;
    size_t arena_cap;
    int n_symbols;
    int64_t *sym_values;
    int n_inputs;
    graph_view *inputs;
    dbl_tape *tape;      /* create_graph: what makes its gradients differentiable */
    pthread_mutex_t run; /* held by the thread running it: its scratch and plan are one run's */
    bool verdict_logged; /* the verbose log has said how its plan runs on the pool */
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
/* This call's symbol values and input views, from the collected key. */
void cai_entry_bind(const cache_entry *e, const key_collect *k);
/* Run entry e for call c with key k; GOP_OUTPUT i writes outs[i]. The caller holds the
 * entry's run lock. */
ca_status cai_entry_run(const compiled_call *c, const cache_entry *e, const key_collect *k,
                        ca_tensor **outs, run_report *rep);
/* The same for a create_graph backward (compiled_double.h): the outputs become
 * differentiable, and leaves take theirs into .grad. */
ca_status cai_entry_run_double(const compiled_call *c, const cache_entry *e, const key_collect *k,
                               run_report *rep);

#endif /* CAGRAD_COMPILED_ENTRY_H */
