/* compiled_callout.h - running the opaque call-outs of a compiled backward: a custom
 * function's backward and node hooks (compiled_callout.c), for compiled.c's runner.
 *
 * The graph stages a call-out's gradients (GOP_CALLOUT_ARG), calls it (GOP_CALLOUT) and
 * reads its results (GOP_CALLOUT_RESULT). The state below holds the call-out being staged
 * and every tensor whose memory the run still reads (results, hook replacements), until
 * the run ends.
 */
#ifndef CAGRAD_COMPILED_CALLOUT_H
#define CAGRAD_COMPILED_CALLOUT_H

#include "autograd/builder_trace.h"

typedef struct {
    const key_collect *k;
    const trace_callout *table; /* the graph's call-outs, by number */
    int cur;                    /* the call-out being staged: its number + 1; 0: none */
    ca_tensor **args, **res;    /* one block: its staged gradients, then its results */
    int n_args, n_res;
    ca_tensor **keep; /* alive until the run ends */
    int n_keep, cap_keep;
} callout_state;

/* Keep t (a reference the state takes) alive until cai_callout_end. */
ca_status cai_callout_keep(callout_state *s, ca_tensor *t);
ca_status cai_callout_arg(callout_state *s, const graph_node *x, const graph_view *in);
ca_status cai_callout_call(callout_state *s, const graph_node *x);
/* The result's view: memory kept alive until cai_callout_end. */
ca_status cai_callout_result(callout_state *s, const graph_node *x, graph_view *out);
void cai_callout_end(callout_state *s);
/* The result tensor behind view v, as a new reference, when only this state holds it (no
 * one else can see it change); else NULL. */
ca_tensor *cai_callout_take(callout_state *s, const graph_view *v);

/* Graph views of tensors and back (compiled.c uses them too). */
void cai_view_of(const ca_tensor *t, graph_view *v);
/* A new contiguous tensor holding a copy of v. */
ca_status cai_tensor_from_view(const graph_view *v, ca_tensor **out);
/* v's values into dst (of v's shape and dtype, any strides). */
void cai_view_copy_into(const graph_view *v, ca_tensor *dst);

#endif /* CAGRAD_COMPILED_CALLOUT_H */
