/* custom_trace.h - a custom function's backward as a tape of op calls, so compiled autograd
 * can put its work into the captured graph instead of calling it out (see
 * ca_custom_function.trace_state in cagrad.h).
 *
 * Recording runs the backward once on zero gradients with a tape active on the thread:
 * every op it calls (through cai_op_call, at depth 0) is appended with its canonical
 * attributes and the identities of its input and output tensors. Replaying walks the tape
 * on any builder: the gradients and saved tensors are the tape's inputs, each recorded op
 * becomes the same op on the builder, and the tensors the backward returned name the
 * results. Because every op is a row of the op table, the tracing builder turns the tape
 * into graph IR with no per-op code beyond the rows that have no graph op of their own
 * (forward-only rows, lowered here to the builder calls derivative rules use).
 */
#ifndef CAGRAD_CUSTOM_TRACE_H
#define CAGRAD_CUSTOM_TRACE_H

#include "autograd/builder.h"

typedef struct {
    int op;
    int n_in, in0;  /* its inputs: tape->ins[in0 .. in0 + n_in) */
    ca_attrs a;     /* canonical: as the row's shape rule left them */
    ca_tensor *out; /* held by the tape, so no later tensor reuses its address */
} cai_tape_op;

/* A tensor the backward created filled with one value (zeros_like, ones, full): a
 * constant of the graph, made from any value there (see const_fill). */
typedef struct {
    ca_tensor *t; /* held */
    double value;
} cai_tape_fill;

/* A tensor the backward computed that equals saved tensor `saved` (a value its node keeps
 * from an earlier graph): the replay reads the saved tensor instead of the op. */
typedef struct {
    ca_tensor *t; /* held */
    int saved;
} cai_tape_known;

struct cai_tape {
    cai_tape_op *ops;
    int n_ops, cap_ops;
    cai_tape_fill *fills;
    int n_fills, cap_fills;
    cai_tape_known *known;
    int n_known, cap_known;
    ca_tensor **ins; /* held */
    int n_ins, cap_ins;
    int depth;     /* op calls under way (an op's forward may call ops of its own) */
    bool nomem;    /* the tape itself ran out of memory */
    char why[160]; /* the first refusal; empty while the recording is fit to replay */
    int n_grads;
    ca_tensor **grads; /* the zero gradients it ran on (NULL: none flowed to that output) */
    int n_gin;
    ca_tensor **gin; /* what the backward gave per input (NULL: none) */
};

/* Run custom node n's backward on zero gradients for the outputs with has_grad[k] and
 * record it into t (cai_tape_free it after). A backward that cannot be replayed is no
 * error: t->why says why. Errors: CA_STATUS_NOMEM. */
ca_status cai_tape_record(ca_node *n, const bool *has_grad, cai_tape *t);
void cai_tape_free(cai_tape *t);

/* Replay t on builder b: grads[k] is output k's gradient (NULL where none flowed) and
 * saved_vals[j] stands for saved[j]. Sets gin[i] per input (NULL: no gradient). Returns
 * false, with the reason in why, when an op uses a tensor that is none of these, or the
 * builder fails (b->status is then set; the caller decides whether to clear it). */
bool cai_tape_replay(const cai_tape *t, ca_builder *b, const ca_bval *grads, int n_saved,
                     ca_tensor *const *saved, const ca_bval *saved_vals, ca_bval *gin, char *why,
                     size_t why_size);

#endif /* CAGRAD_CUSTOM_TRACE_H */
