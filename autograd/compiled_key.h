/* compiled_key.h - what the compiled backward collects from one walk of the autograd
 * graph: a key per node, the tensors it lifts to graph inputs, the sizes it lifts to size
 * slots, and the hooks it lifts by position.
 *
 * One list drives it: each op row's `fields`, plus every node's input and output shapes.
 * The tracing builder consumes the same lifted tensors and slots in the same order, so
 * the key and the traced graph cannot disagree.
 */
#ifndef CAGRAD_COMPILED_KEY_H
#define CAGRAD_COMPILED_KEY_H

#include "autograd/walk.h"

/* Who a size slot belongs to, for the "changed tensor shapes" log line. */
typedef enum { OWN_INPUT, OWN_GRAD_OUTPUT, OWN_SAVED, OWN_ATTR, OWN_SEED, OWN_LEAF } key_owner_kind;

typedef struct {
    int node_call; /* NodeCall id */
    key_owner_kind kind;
    const char *what; /* the field's name for OWN_SAVED and OWN_ATTR */
    int index;        /* OWN_INPUT: which input; OWN_SEED: which root */
    int dim;
} key_slot_owner;

/* How a lifted tensor is used by the compiled graph. */
typedef enum { LIFT_SAVED, LIFT_SEED, LIFT_LEAF } key_lift_kind;

typedef struct {
    ca_tensor *t; /* borrowed: the walk's nodes keep it alive */
    key_lift_kind kind;
    int first_slot; /* its dims are slots first_slot .. first_slot + t->ndim - 1 */
} key_lifted;

typedef struct {
    ca_hook *hook;
    int node_call;
    ca_tensor *leaf; /* post-accumulate hooks: the leaf; else NULL */
} key_hook;

typedef struct {
    /* per walk: NodeCall i (i >= 1) is nodes[i - 1]; NodeCall 0 is the synthetic GraphRoot */
    const ca_walk *walk; /* the walk collected: each node's NodeCall and needed */
    ca_node **nodes;
    int n_nodes;
    /* lifted tensors, deduplicated by identity (same storage, offset, shape, strides) */
    key_lifted *lifted;
    int n_lifted, cap_lifted;
    int32_t *lift_hash; /* open addressing over lifted indices by (storage, offset), -1 empty */
    int hash_cap;       /* a power of two, at least twice n_lifted */
    /* size slots */
    int64_t *sizes;
    key_slot_owner *owners;
    int n_sizes, cap_sizes, cap_owners;
    /* hooks by position, in the order they will run */
    key_hook *hooks;
    int n_hooks, cap_hooks;
    /* the key bytes of every node, back to back; node k's are bytes[off[k] .. off[k+1]) */
    uint8_t *bytes;
    int n_bytes, cap_bytes;
    int *off; /* n_nodes + 2 entries (GraphRoot first) */
    int cap_off;
    int *slot0; /* n_nodes + 2 entries: each NodeCall's first size slot */
    int cap_slot0;
    /* the GraphRoot's edges: root r's NodeCall and the lifted index of its seed */
    int n_roots;
    int *root_call, *root_seed, *root_nr; /* root_nr: the output of the root node */
    int cap_root_call, cap_root_seed, cap_root_nr;
} key_collect;

/* What a backward asks for: accumulate into leaves' .grad, or return gradients. */
typedef struct {
    bool capture;      /* autograd.grad */
    bool create_graph; /* differentiable gradients (compiled_double.h): another graph */
    int n_roots;
    ca_node *const *roots;
    const int *root_nrs;     /* which output of each root its seed enters (NULL: all 0) */
    ca_tensor *const *seeds; /* one gradient per root (lifted as LIFT_SEED) */
    int n_targets;           /* autograd.grad: nodes whose incoming gradient is returned */
    ca_node *const *targets; /* NULL entries: the input is not reached */
    const int *target_nrs;   /* which output of each target (NULL: all 0) */
} key_request;

/* Collect the key of an ordered walk. Errors like the eager engine for a saved tensor
 * that was freed by an earlier backward or changed in place. Buffers are reused. */
ca_status cai_key_collect_walk(key_collect *k, const ca_walk *w, const key_request *req);
void cai_key_collect_free(key_collect *k);
/* Node k's key bytes (k = 0 is the GraphRoot). */
static inline const uint8_t *key_bytes(const key_collect *k, int call, int *len) {
    *len = k->off[call + 1] - k->off[call];
    return k->bytes + k->off[call];
}
/* The index of t among the lifted tensors of this kind, or -1. */
int cai_key_find_lifted(const key_collect *k, const ca_tensor *t, key_lift_kind kind);
/* The first size slot NodeCall `call` lifted (its slots are contiguous, in the order
 * cai_key_collect_walk lifts them: input shapes, grad_output, then its fields). */
int cai_key_node_first_slot(const key_collect *k, int call);
/* "MmBackward0 (NodeCall 3) saved self dim 0" into buf. */
const char *cai_key_owner_str(const key_collect *k, int slot, char *buf, size_t size);
/* The name of NodeCall i ("GraphRoot" for 0). */
const char *cai_key_node_name(const key_collect *k, int call);

#endif /* CAGRAD_COMPILED_KEY_H */
