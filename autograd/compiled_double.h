/* compiled_double.h - a double backward under compiled autograd: autograd.grad or
 * backward() with create_graph=True captured, cached and fused like any other backward,
 * its gradients differentiable.
 *
 * The trace of such a backward keeps a tape beside its graph: each op-table call its rules
 * made (op, inputs, attributes, output, as values of the trace), which lifted tensors they
 * read (the tape's inputs) and which values are the outputs (autograd.grad's, or each
 * leaf's gradient, which the caller then accumulates into .grad). The compiled graph
 * computes the gradients. Then one node, CompiledAutogradBackward0, a custom function made
 * here, takes the tape's inputs joined to their histories (a saved input to the input's
 * grad_fn, a saved output to its node, as the eager double backward unpacks them) and gives
 * the gradients as its outputs. Its backward replays the tape's ops on its inputs (with grad
 * mode on, so each op records its usual node) and runs those nodes' own derivative rules in
 * reverse order: every rule is differentiated by the rules themselves, and a second
 * backward under compiled autograd records that backward (custom_trace.c) into its own
 * cached graph. The tape is shared by every node the cache entry makes, and keys the
 * second backward's cache.
 *
 * Not captured (the backward then runs eagerly, counted and logged): tensor, node and
 * post-accumulate hooks, retain_grad and custom functions. Sizes a trace keeps symbolic
 * are handles on the tape, resolved per run (dbl_sizes).
 */
#ifndef CAGRAD_COMPILED_DOUBLE_H
#define CAGRAD_COMPILED_DOUBLE_H

#include "autograd/compiled_key.h"
#include "graph/graph.h"

typedef struct dbl_tape dbl_tape;

/* A new empty tape for n_targets outputs, or NULL when out of memory. */
dbl_tape *cai_dbl_tape_new(int n_targets);
void cai_dbl_tape_release(dbl_tape *t);

/* Value `out` is op `op` of values in[0 .. n_in) with attributes a. False: out of memory. */
bool cai_dbl_record_op(dbl_tape *t, int op, int n_in, const int32_t *in, const ca_attrs *a,
                       int32_t out);
/* How a tape input was read, which says which history the node joins it to. */
typedef enum {
    DBL_SAVED,        /* saved tensor kk of NodeCall call: its node's edge (reconnected) */
    DBL_SEED,         /* root kk's seed gradient: its own history */
    DBL_CUSTOM_SAVED, /* saved kk of a CompiledAutogradBackward0 at NodeCall call: its own */
} dbl_read;

/* The value an earlier read of lifted tensor `lifted` with the same history got, or -1;
 * *lifted_used says whether it was read at all. A tensor read with two histories (a view
 * that aliases its base whole, a detached copy) needs a value per history, as the node
 * joins each input to one. */
int32_t cai_dbl_input_val(const dbl_tape *t, const key_collect *k, int lifted, dbl_read kind,
                          int call, int kk, bool *lifted_used);
/* Value `val` is lifted tensor `lifted`, read as `kind` says. False: out of memory. */
bool cai_dbl_record_input(dbl_tape *t, int32_t val, int lifted, dbl_read kind, int call, int kk);
/* Whether n is a CompiledAutogradBackward0 node (whose inputs keep their own histories, so
 * a double backward through it may be captured too). */
bool cai_dbl_is_node(const ca_node *n);
/* autograd.grad's output `target` is value val (the first one recorded stays). */
void cai_dbl_record_output(dbl_tape *t, int target, int32_t val);

/* The last op recorded (a GEMM) is kept: the graph outputs its value too, and the node
 * gets it, so that a compiled backward through the node reads it instead of replaying
 * the op. Returns its number among the kept values. */
int cai_dbl_keep_last(dbl_tape *t);
/* How many values the tape keeps: the graph's outputs after the targets and leaves. */
int cai_dbl_n_kept(const dbl_tape *t);

/* Value out is x * (1 / N), N the size expression `count` of a symbolic trace (a mean's
 * scale). False: out of memory. */
bool cai_dbl_record_scale(dbl_tape *t, int32_t x, int32_t count, int32_t out);

/* The sizes of a run of a graph traced with symbols: its size expressions' graph and the
 * symbols' values (n of them; 0 for a static graph). */
typedef struct {
    const graph *g;
    const int64_t *values;
    int n;
} dbl_sizes;

/* After a run: grads[i] (n of them, NULL where none) become outputs of one new
 * CompiledAutogradBackward0 node over the tape's inputs, as found in key k; sizes the trace
 * kept symbolic take the values z gives. kept[q] (cai_dbl_n_kept of them, borrowed) are the
 * kept values of this run. */
ca_status cai_dbl_attach(dbl_tape *t, const key_collect *k, const dbl_sizes *z, int n,
                         ca_tensor **grads, ca_tensor *const *kept);

#endif /* CAGRAD_COMPILED_DOUBLE_H */
