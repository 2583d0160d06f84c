/* builder_trace.h - the tracing builder: replays the derivative rules of a collected walk
 * into one backward graph (graph/graph.h), with symbolic sizes for the dynamic slots.
 *
 * The rules are the eager ones, unchanged. A rule sees a shadow of its node in which every
 * dynamic size is a handle (SIZE_HANDLE_BASE + size-expression id) instead of a number; it
 * passes sizes through to builder calls, which turn handles back into size expressions.
 * A rule that does arithmetic on a handle produces a number the tracer recognises as
 * corrupt, and the trace fails: that graph then runs eagerly instead of running wrong.
 */
#ifndef CAGRAD_BUILDER_TRACE_H
#define CAGRAD_BUILDER_TRACE_H

#include "autograd/builder.h"
#include "autograd/compiled_cache.h"
#include "graph/graph.h"

#define SIZE_HANDLE_BASE ((int64_t)1 << 52)
_Static_assert(SIZE_HANDLE_BASE / 2 == BX_SIZE_NUMBER_LIMIT, "bx_size_is_number's limit");

/* A saved tensor a rule read while tracing: checked before every run of the graph, in
 * this order, exactly as the eager rule would check it. */
typedef struct {
    int call; /* NodeCall */
    int k;    /* its saved tensor number */
} trace_read;

/* An opaque call-out of the graph (GOP_CALLOUT number = its index): a custom function's
 * backward, or one node hook of NodeCall `call`. */
typedef enum { CALLOUT_CUSTOM, CALLOUT_NODE_PRE, CALLOUT_NODE_POST } trace_callout_kind;

typedef struct {
    int call;
    trace_callout_kind kind;
    int hook;   /* node hooks: the hook's index among the key's lifted hooks */
    int n_args; /* gradients staged (custom, pre: the outputs; post: inputs then outputs) */
    int n_res;  /* results (custom, post: one per input; pre: one per output) */
} trace_callout;

/* How a custom function's backward was captured, for the verbose log and the counters. */
typedef struct {
    int call;
    bool traced;   /* its ops are in the graph; else it is a call-out */
    int n_ops;     /* traced: the ops it recorded */
    char why[160]; /* a call-out: why it was not traced */
} trace_custom_note;

typedef struct {
    graph *g;
    trace_read *reads; /* from the library's allocator; free with cai_mem_free */
    int n_reads;
    trace_callout *callouts; /* the same */
    int n_callouts;
    trace_custom_note *notes; /* the same */
    int n_notes;
    struct dbl_tape *tape; /* create_graph: the tape (compiled_double.h); else NULL */
} trace_result;

typedef struct {
    const key_collect *k;
    const cache_entry *e; /* which slots are symbols */
    /* non-NULL: each symbol's value; the graph unifies symbols of equal value that must be
     * equal (cai_graph_unify), to learn which ones it needs equal. Not a graph to run. */
    const int64_t *unify;
    bool capture;      /* autograd.grad: outputs instead of accumulation */
    bool create_graph; /* keep a tape that makes the gradients differentiable */
    int n_targets;
    ca_node *const *targets; /* autograd.grad's nodes (NULL: not reached) */
    const int *target_nrs;   /* which output of each (NULL: all 0) */
} trace_request;

/* Trace the whole backward described by req into a new graph (*out, free with
 * cai_graph_free). Only nodes the walk marked needed run (see cai_walk_mark_needed). Fails (with a
 * message) for an op the graph IR cannot express yet or a rule that did arithmetic on a symbolic
 * size; the caller then falls back to eager. */
ca_status cai_trace_backward(const trace_request *req, trace_result *out);

#endif /* CAGRAD_BUILDER_TRACE_H */
