/* internal.h - the objects of the autograd layer: tensors, storage, nodes, the op table.
 *
 * Layering: autograd sits on graph and codegen and knows about refcounts, hooks and
 * versions. Everything here is private to the library; include/cagrad.h is the public
 * face. Every global symbol of the library starts with ca: ca_ for the public API, cai_
 * for the internal one (scripts/check-symbols.sh checks it), so cagrad links into any
 * program. After cai_ comes the module: cai_tensor_ (tensor.c), cai_op_ (op.c, the generic
 * op call), cai_hook_ (hook.c), cai_mem_ (alloc.c), err_ (error.c; macros over cai_err_).
 */
#ifndef CAGRAD_INTERNAL_H
#define CAGRAD_INTERNAL_H

#include "cagrad.h"
#include "autograd/ops_activation.h"
#include "codegen/ca_assert.h"
#include "codegen/kern.h"
#include "graph/shape_rules.h"

#include <stdarg.h>
#include <stdatomic.h>

typedef struct ca_node ca_node;
typedef struct ca_hook ca_hook;

/* ---------------------------------------------------------------------------------------
 * Errors (error.c). err_set formats the thread's message and returns status, so a
 * failing path reads `return err_set(CA_STATUS_SHAPE, "...")`.
 */
ca_status cai_err_set_impl(ca_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void cai_err_nomem_impl(const char *what);
/* Macros, so the status a failing path returns is visible where it is returned: static
 * analysis then knows that `return err_set(...)` never returns CA_OK. */
#define err_set(status, ...) (cai_err_set_impl((status), __VA_ARGS__), (status))
#define err_nomem(what)      (cai_err_nomem_impl(what), CA_STATUS_NOMEM)
/* A counter bumped by every error set on this thread: compare before and after a
 * callback to learn whether it set a message, without clearing the user's last error. */
uint64_t cai_err_generation(void);
/* "[2, 3]" into buf */
const char *cai_err_shape_str(int ndim, const int64_t *shape, char *buf, size_t size);

#define CA_CHECK(expr)                                                                             \
    do {                                                                                           \
        ca_status ca_check_st_ = (expr);                                                           \
        if (ca_check_st_ != CA_OK)                                                                 \
            return ca_check_st_;                                                                   \
    } while (0)

#define CA_ARG_NOT_NULL(p, fn)                                                                     \
    do {                                                                                           \
        if ((p) == NULL)                                                                           \
            return err_set(CA_STATUS_INVALID,                                                      \
                           "%s: argument '%s' is NULL; pass a valid "                              \
                           "pointer",                                                              \
                           fn, #p);                                                                \
    } while (0)

/* ---------------------------------------------------------------------------------------
 * Memory (alloc.c). Every byte goes through the installed ca_allocator.
 */
void *cai_mem_alloc(size_t size); /* 16-byte aligned; NULL on failure */
void *cai_mem_alloc_aligned(size_t size, size_t align);
void *cai_mem_calloc(size_t n, size_t size);
void cai_mem_free(void *p);
bool cai_mem_is_default(void);      /* the default allocator is installed */
void cai_mem_default_free(void *p); /* frees a block the default allocator made */
/* Data blocks (alloc_cache.c): tensor storage and scratch, 64-byte aligned, kept in a
 * cache by size when freed. Free them only with cai_mem_data_free. */
void *cai_mem_data_alloc(size_t nbytes);
void cai_mem_data_free(void *p);
/* Grow the array *p of *cap elements (of elem bytes) to hold at least need, doubling and
 * keeping its contents. False when out of memory; *p and *cap are then unchanged. */
bool cai_mem_grow_slow(void **p, int *cap, int need, size_t elem);
/* Inline: the key collection calls it for every value it records, and nearly always
 * there is room already. */
static inline bool mem_grow(void **p, int *cap, int need, size_t elem) {
    return need <= *cap || cai_mem_grow_slow(p, cap, need, elem);
}

/* ---------------------------------------------------------------------------------------
 * Shapes
 */
typedef struct {
    int n;
    int64_t v[CA_MAX_DIMS];
} ca_ints;

/* dtype and shape of a value, without data: what shape rules compute */
typedef struct {
    ca_dtype dtype;
    int ndim;
    int64_t shape[CA_MAX_DIMS];
} ca_meta;

int64_t cai_meta_numel(const ca_meta *m);
bool cai_meta_same_shape(const ca_meta *a, const ca_meta *b);
/* Broadcast a and b (NumPy rules) into out; on failure an error naming both shapes. */
ca_status cai_meta_broadcast(const ca_meta *a, const ca_meta *b, ca_meta *out, const char *op);
/* Normalise a possibly negative dim against ndim (ndim 0 accepts -1 and 0, as PyTorch);
 * error naming the op and the valid range otherwise. */
ca_status cai_dim_normalize(int64_t *dim, int ndim, const char *op);
/* A failed shape rule (graph/shape_rules.h) as this layer's error: its message, and the
 * status its kind maps to (SHAPE, DIM, DTYPE, NOMEM). */
ca_status cai_rule_raise(const cai_rule_error *e);
/* "[2, 3]" for m's shape into buf (cai_err_shape_str); META_STR_SIZE is a size that fits. */
#define META_STR_SIZE 160
const char *cai_meta_str(const ca_meta *m, char *buf, size_t size);

/* The public dtypes and dims are the kernels' own, so kdt is a cast. */
_Static_assert((int)CA_FLOAT32 == (int)KERN_F32 && (int)CA_FLOAT64 == (int)KERN_F64 &&
                   (int)CA_INT64 == (int)KERN_I64 && (int)CA_BOOL == (int)KERN_BOOL,
               "ca_dtype and kern_dtype differ");
_Static_assert(CA_MAX_DIMS == KERN_MAX_DIMS, "CA_MAX_DIMS and KERN_MAX_DIMS differ");

static inline kern_dtype kdt(ca_dtype dt) {
    return (kern_dtype)dt;
}

/* ---------------------------------------------------------------------------------------
 * Reference counts. Atomic, because tensors, storages and nodes may be shared by threads
 * (a model's weights used by several threads' forwards and backwards). An increment needs
 * no ordering: the caller already holds a reference. A decrement is acq_rel: the releasing
 * thread's writes to the object happen before the free by whichever thread drops the last
 * reference. "count == 1" (ref_count) is a sole owner's test, made to write into a buffer
 * in place: only a thread holding that one reference can see 1, and the acquire load
 * orders its writes after the other holders' last uses.
 */
typedef _Atomic int64_t cai_refcnt;

static inline void ref_inc(cai_refcnt *r) {
    atomic_fetch_add_explicit(r, 1, memory_order_relaxed);
}
/* True when this was the last reference: the caller frees the object. */
static inline bool ref_dec(cai_refcnt *r) {
    return atomic_fetch_sub_explicit(r, 1, memory_order_acq_rel) == 1;
}
static inline int64_t ref_count(cai_refcnt *r) {
    return atomic_load_explicit(r, memory_order_acquire);
}
/* A new reference unless the count already reached zero (the object is being freed):
 * how a weak pointer (a leaf's AccumulateGrad node) is turned into a strong one. */
static inline bool ref_inc_unless_zero(cai_refcnt *r) {
    int64_t have = atomic_load_explicit(r, memory_order_relaxed);
    while (have > 0)
        if (atomic_compare_exchange_weak_explicit(r, &have, have + 1, memory_order_relaxed,
                                                  memory_order_relaxed))
            return true;
    return false;
}

/* ---------------------------------------------------------------------------------------
 * Storage and tensors (tensor.c)
 */
typedef struct ca_storage {
    cai_refcnt refcnt;
    void *data;
    size_t nbytes;
    uint64_t version; /* shared by every view: bumped by each in-place write */
    /* Moves on each time an in-place op gives a tensor over this memory a new history
     * (inplace.c): a view whose view_epoch differs replays its view ops on its base's new
     * history before it is used (view_inplace.c). */
    uint64_t history_epoch;
    /* The node name (an op row's, static) of the last in-place op that gave a tensor over
     * this memory a new history (inplace.c): version errors name it, as PyTorch names the
     * changed tensor's grad_fn at backward time. */
    const char *rebased_by;
    /* Moves on each time a tensor over this memory with a history is detached in place
     * (ca_tensor_detach_): a saved non-leaf input read after it raises PyTorch's error. */
    uint64_t detach_epoch;
    /* Memory owned elsewhere (ca_tensor_from_blob): handed back through the deleter
     * instead of freed. */
    bool external;
    ca_blob_deleter_fn deleter;
    void *deleter_ctx;
} ca_storage;

struct ca_tensor {
    cai_refcnt refcnt;
    ca_dtype dtype;
    int ndim;
    int64_t shape[CA_MAX_DIMS];
    int64_t strides[CA_MAX_DIMS]; /* elements */
    int64_t offset;               /* elements */
    ca_storage *storage;

    bool requires_grad;
    bool retains_grad;
    ca_tensor *grad;           /* strong */
    ca_node *grad_fn;          /* strong; NULL for leaves */
    int output_nr;             /* which output of grad_fn this is (custom functions: 0..) */
    ca_node *grad_accumulator; /* weak: the leaf's AccumulateGrad node, cleared when freed */
    ca_hook *hooks;            /* leaf only: tensor pre-hooks (non-leaf ones live on grad_fn) */
    ca_hook *post_acc_hooks;   /* leaf only */
    void *binding;             /* ca_tensor_set_binding: a language binding's, borrowed */

    /* A view made by a view op (view_inplace.c): the tensor that owns the memory (PyTorch's
     * _base) and, when made with grad mode on, the tensor it was made from and the op's step
     * (a node holding the row, the attributes and the shapes), all strong. An in-place op
     * on the view rebases the base's history through them, as PyTorch's CopySlices does.
     * view_depth counts the steps back to the base; past CAI_VIEW_CHAIN_MAX, or for a view
     * made with grad mode off (view_no_grad, inherited by its views), view_src and view_step
     * are NULL (not replayable). */
    ca_tensor *view_base;
    ca_tensor *view_src;
    ca_node *view_step;
    int view_depth;
    bool view_no_grad;
    /* An output of a function that returns several views (unbind, split: marked by
     * ca_tensor_mark_multi_output_view, inherited by views of it): PyTorch refuses in-place
     * ops on it in the graph. view_multi names the function ("Unbind"), view_multi_nr the
     * output. */
    const char *view_multi;
    int view_multi_nr;
    uint64_t view_epoch; /* the memory's history_epoch when grad_fn was last made */
};

/* Which output of its grad_fn t's gradient enters (0 for a leaf's AccumulateGrad). */
static inline int tensor_grad_nr(const ca_tensor *t) {
    return t->grad_fn ? t->output_nr : 0;
}

/* A new contiguous tensor with uninitialised data. */
ca_status cai_tensor_new(const ca_meta *m, ca_tensor **out);
/* A new tensor header aliasing t's storage with the given geometry (a view). */
ca_status cai_tensor_alias(ca_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                           int64_t offset, ca_tensor **out);
void cai_tensor_meta(const ca_tensor *t, ca_meta *out);
void cai_tensor_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);
void *cai_tensor_ptr(const ca_tensor *t); /* element (0,...,0) */
/* Strides of t broadcast to out_ndim/out_shape (0 on broadcast dims) as a kernel source. */
void cai_tensor_src(const ca_tensor *t, int out_ndim, const int64_t *out_shape, kern_src *src);
/* Whether leaf's .grad takes leaf's strides: its elements fill their memory span without
 * overlap (PyTorch's "non-overlapping and dense"), but not in row-major order. */
bool cai_tensor_grad_strided(const ca_tensor *leaf);
/* A new, unfilled tensor for leaf's first .grad: leaf's strides when it is dense but not
 * contiguous (a transposed weight's grad is transposed too), else contiguous, as PyTorch's
 * AccumulateGrad lays gradients out. */
ca_status cai_tensor_grad_like(const ca_tensor *leaf, ca_tensor **out);
/* Run a pointwise kernel writing a fresh contiguous tensor of shape m. */
ca_status cai_tensor_pointwise(kern_pw_op op, const ca_meta *m, int n, ca_tensor *const *in,
                               double p0, double p1, ca_tensor **out);
/* A contiguous tensor with t's values: a new ref to t itself if already contiguous. */
ca_status cai_tensor_contiguous(ca_tensor *t, ca_tensor **out);
/* ca_view recorded as UnsafeViewBackward0 (ops_shape.c; linear's output, as PyTorch) */
ca_status cai_unsafe_view(ca_tensor *x, int ndim, const int64_t *shape, ca_tensor **out);
/* acc += other in place (other has acc's shape, as a kernel source), bumping acc's
 * version: how .grad accumulates, in the eager and the compiled backward alike. */
void cai_tensor_add_into(ca_tensor *acc, const kern_src *other);
/* Bump the version counter: call after every in-place write. */
void cai_tensor_bump_version(ca_tensor *t);
/* An in-place op on a tensor in the autograd graph, done as r = op(self, ...) out of place:
 * self takes r's values (written into its memory, bumping its version) and r's history,
 * as PyTorch rebases a tensor's grad_fn onto the in-place op's node. *done is false, with
 * nothing changed, when r's node saved self's memory (its backward needs self's old
 * values): the caller computes r again from a clone of self. When self is a view, its
 * base takes the history (cai_view_rebase). Errors: a leaf that requires grad (or a view of
 * one), r of another shape or dtype. */
ca_status cai_tensor_rebase(ca_tensor *self, ca_tensor *r, bool *done, const char *fn);
/* The same for an r made by several ops since mark (ca_graph_mark): *done stays false when
 * one of them saved self's memory. UINT64_MAX: r's own node only. */
ca_status cai_tensor_rebase_since(ca_tensor *self, ca_tensor *r, uint64_t mark, bool *done,
                                  const char *fn);
/* Copy the values n's backward saved from storage s to memory of their own before s is
 * written; *ok false when a saved-tensor hook packed one (the caller recomputes from a
 * copy of self instead). */
ca_status cai_node_keep_saved(ca_node *n, const ca_storage *s, bool *ok);
/* self's memory takes r's values (same shape and dtype); its version goes up. */
ca_status cai_tensor_write(ca_tensor *self, ca_tensor *r, const char *fn);
/* t takes history (node, output_nr, requires_grad), moving a retained grad with it. */
void cai_tensor_take_history(ca_tensor *t, ca_node *node, int output_nr, bool requires_grad);

/* a and b are the same view: one storage, offset, dtype, shape and strides. */
bool cai_tensor_same_view(const ca_tensor *a, const ca_tensor *b);
/* Raw, autograd-free fills used by creation functions and the engine. */
ca_status cai_tensor_full(const ca_meta *m, double value, ca_tensor **out);

/* ---------------------------------------------------------------------------------------
 * Op attributes: the non-tensor arguments of one op call. One struct for every op so
 * nodes, the builders and (later) the compiled-autograd key can treat them generically.
 * Each op's table row says which fields it uses and what they mean.
 */
typedef struct ca_attrs {
    double s[2];   /* scalars: alpha, slope, bounds, beta/threshold, p, eps, fill value */
    int64_t i[4];  /* ints: dim, start, length, step, reduction, ignore_index, flags */
    ca_ints dims;  /* a dim list or permutation */
    ca_ints shape; /* a target shape */
} ca_attrs;

/* ---------------------------------------------------------------------------------------
 * Nodes (one per differentiable op call; node.c)
 */
typedef struct {
    ca_node *fn;  /* strong; NULL when no gradient flows to this input */
    int input_nr; /* which output of fn this input was (0 but for custom functions' outputs) */
} ca_edge;

/* Output k >= 1 of a node with several outputs (only custom functions have them): output 0
 * is the node's own out_meta and retained. */
typedef struct {
    ca_meta meta;
    ca_tensor *retained; /* weak, as ca_node.retained */
} ca_node_out;

/* A custom function's node (custom.c): the user's callbacks, and its name. The name is
 * interned (kept for the life of the process), because compiled graphs and their logs name
 * nodes by pointer and outlive the node. */
#define CA_CUSTOM_NAME_MAX 64
typedef struct {
    ca_custom_function fn;
    const char *name;
    ca_custom_trace_info trace; /* fn.trace_state's answer at this backward's key */
} ca_custom;

typedef struct cai_saved_hooks cai_saved_hooks;

typedef struct {
    ca_tensor *t;     /* a detached alias (no grad_fn, so no reference cycle) */
    uint64_t version; /* storage version when saved */
    int field;        /* index into the op row's fields, for error messages */
    /* The grad_fn (strong; also an edge of the saving node, so never its last reference)
     * and output number of a saved input that had one, for version errors. */
    ca_node *origin;
    int origin_nr;
    uint64_t detach_epoch; /* with origin: the storage's detach_epoch when saved */
    /* Packed by saved-tensor hooks (saved_hooks.c): t is NULL but while a backward runs,
     * when it holds what the unpack hook gave back. */
    void *packed;
    cai_saved_hooks *hooks; /* strong */
    ca_meta meta;           /* what the unpack hook must give back */
} ca_saved;

/* Saved-tensor hooks (saved_hooks.c). */
/* Pack s->t through this thread's innermost hooks, if any (s->t is then released). */
ca_status cai_saved_pack(ca_saved *s);
/* Unpack every packed saved tensor of n into s->t (at the start of a backward), and drop
 * them again (at its end: the next backward unpacks afresh, as PyTorch does). */
ca_status cai_saved_unpack(ca_node *n);
/* One saved value as a new reference (NULL: none), through its unpack hook when packed. */
ca_status cai_saved_read(ca_saved *s, ca_tensor **out);
void cai_saved_drop_unpacked(ca_node *n);
/* Free s's packed value and hooks. */
void cai_saved_free_packed(ca_saved *s);

#define CA_MAX_SAVED 4

struct ca_node {
    cai_refcnt refcnt;
    int op;           /* ca_op_id */
    int graph_id;     /* forward graph it was recorded in */
    uint64_t seq;     /* creation order: later nodes run first among ready ones */
    ca_attrs attrs;   /* canonical (normalised) attributes */
    ca_meta out_meta; /* the gradient this node receives has this dtype and shape */
    int n_in;
    ca_edge *next;    /* n_in entries */
    ca_meta *in_meta; /* n_in entries: dtype and shape of each input */
    int n_saved;
    ca_saved saved[CA_MAX_SAVED];
    bool released; /* saved values freed by a backward without retain_graph */

    ca_hook *pre_hooks;       /* tensor hooks of the node's output, in registration order */
    ca_hook *node_pre_hooks;  /* node hooks (ca_node_register_pre_hook) */
    ca_hook *node_post_hooks; /* node hooks (ca_node_register_post_hook) */
    ca_tensor *retained;      /* weak: the output tensor when it retains its grad */
    ca_tensor *leaf;          /* AccumulateGrad only: strong ref to the leaf */
    int n_out;                /* outputs: 1, or a custom function's count */
    ca_node_out *outs;        /* outputs 1 .. n_out-1 (n_out - 1 entries), or NULL */
    ca_custom *custom;        /* CA_OP_CUSTOM only */
    void *user;               /* ca_node_set_user_data */
    ca_ctx_free_fn user_free;

    /* No state of a backward lives here (it is the walk's: walk_slot), because threads may
     * backward through one node at once. */
    ca_node *free_link; /* cai_node_release's worklist: written only by the freeing thread */
};

ca_status cai_node_alloc(int op, int n_in, ca_node **out);

/* ---- views in the autograd graph (view_inplace.c) ---- */
/* t, its history first brought up to date (cai_view_sync) when t is a stale view. */
const ca_tensor *cai_tensor_synced(const ca_tensor *t);
#define CAI_VIEW_CHAIN_MAX 32
/* Record that res, made by a view op from src, is a view of src's memory (op.c). step: the
 * op's node without edges (row, canonical attributes, shapes, saved values), taken over;
 * NULL when the op recorded res->grad_fn, or with grad mode off (then only the base is
 * kept). */
ca_status cai_view_track(ca_tensor *res, ca_tensor *src, ca_node *step);
/* Bring a view's history up to date: when an in-place op gave its base (or another view of
 * it) a new history, replay the view's ops on the base. A no-op for other tensors. */
ca_status cai_view_sync(ca_tensor *t);
static inline ca_status cai_view_sync_fast(ca_tensor *t) {
    return t && t->view_base && t->view_epoch != t->storage->history_epoch ? cai_view_sync(t)
                                                                           : CA_OK;
}
/* The in-place op r = op(v) on a view v, as PyTorch's CopySlices: v's base b takes the
 * history where(selected, embed(r), b), embed being the view ops' adjoint, so the gradient
 * of the selected elements flows to r and the rest to b's old history; v replays its view
 * ops on it. Then v's memory takes r's values. *done as cai_tensor_rebase. */
ca_status cai_view_rebase(ca_tensor *v, ca_tensor *r, bool *done, const char *fn);

/* Output k's gradient meta, buffer and retained tensor (k < n->n_out). */
static inline ca_meta *node_out_meta(ca_node *n, int k) {
    return k == 0 ? &n->out_meta : &n->outs[k - 1].meta;
}
static inline const ca_meta *node_out_meta_c(const ca_node *n, int k) {
    return k == 0 ? &n->out_meta : &n->outs[k - 1].meta;
}
static inline ca_tensor *node_retained(const ca_node *n, int k) {
    return k == 0 ? n->retained : n->outs[k - 1].retained;
}
static inline void node_set_retained(ca_node *n, int k, ca_tensor *t) {
    if (k == 0)
        n->retained = t;
    else
        n->outs[k - 1].retained = t;
}

/* ---------------------------------------------------------------------------------------
 * Custom functions (custom.c)
 */
/* Run a custom node's backward: grads[k] is output k's gradient (NULL: none flowed),
 * gin[i] receives input i's gradient (new reference; NULL: none) for every input whose edge
 * is set, checked against the input (a broadcast gradient is summed down, another dtype
 * converted, anything else an error naming the function). */
ca_status cai_custom_backward(ca_node *n, ca_tensor *const *grads, ca_tensor **gin);
/* leaf.grad += g, as the engine's AccumulateGrad: out of place, recorded (CopyBackwards,
 * then AddBackward0) when create_graph and either side has a history; else in place, the
 * first g stolen when no one else holds it. */
ca_status cai_grad_accumulate(ca_tensor *leaf, ca_tensor *g, bool create_graph);
/* The lock of leaf's .grad (grad_lock.c): every accumulation into a .grad that threads
 * may share holds it. Hooks run outside it. */
void cai_grad_lock(const ca_tensor *leaf);
void cai_grad_unlock(const ca_tensor *leaf);
/* Whether the running backward (engine.c) has create_graph: false outside a backward. */
bool cai_engine_create_graph(void);
/* Free the node's custom part (its ctx through ctx_free). */
void cai_custom_free(ca_node *n);

/* Recording a custom backward for compiled autograd (custom_trace.c). While a tape is
 * active on this thread, cai_op_call appends each op called at depth 0 (not the ops an
 * op's own forward calls), and whatever makes the recording unfit to replay refuses it:
 * reading tensor data, changing a tensor in place, starting a backward. */
typedef struct cai_tape cai_tape;
extern _Thread_local cai_tape *cai_recording;
int cai_record_enter(void); /* the depth before this op call */
void cai_record_leave(void);
void cai_record_op(int op, int n_in, ca_tensor *const *in, const ca_attrs *a, ca_tensor *out);
void cai_record_fill(ca_tensor *t, double value); /* t was made filled with value */
void cai_record_known(ca_tensor *t, int saved);   /* t, just computed, equals saved[saved] */
void cai_record_refuse(const char *why);

ca_node *cai_node_retain(ca_node *n);
/* Free n's saved values and mark them freed: a backward without retain_graph does this to
 * every node whose rule ran, so a second backward through n gives PyTorch's error. */
void cai_node_release_saved(ca_node *n);
void cai_node_release(ca_node *n);
/* True if the rule must produce a gradient for input i. */
static inline bool node_needs_grad(const ca_node *n, int i) {
    return n->next[i].fn != NULL;
}
const char *cai_node_name(const ca_node *n);
/* CA_OK if saved tensor k of n can be used: not freed by an earlier backward, not
 * changed in place since it was saved. Else PyTorch's error, naming the node. */
ca_status cai_node_check_saved(const ca_node *n, int k);
/* The leaf's AccumulateGrad node, created on first use (new reference). */
ca_status cai_node_grad_accumulator(ca_tensor *leaf, ca_node **out);
/* The leaf's AccumulateGrad node if it has one, without a reference: only to compare. */
ca_node *cai_node_grad_accumulator_peek(ca_tensor *leaf);

/* ---------------------------------------------------------------------------------------
 * Hooks (hook.c)
 */
typedef enum { HOOK_PRE, HOOK_POST_ACCUMULATE, HOOK_NODE_PRE, HOOK_NODE_POST } hook_kind;

struct ca_hook {
    ca_hook *next;
    ca_hook_handle id;
    hook_kind kind;
    int output_nr; /* pre-hooks on a node: the output whose gradient they see */
    ca_tensor_hook_fn pre;
    ca_post_accumulate_hook_fn post;
    ca_node_pre_hook_fn node_pre;
    ca_node_post_hook_fn node_post;
    void *ctx;
    ca_ctx_free_fn ctx_free;
};

void cai_hook_list_free(ca_hook **list);
/* Run pre-hooks on *grad (a new reference owned by the caller, replaced in place). The
 * expected meta is checked against each replacement; `owner` names the tensor's node in
 * messages. */
ca_status cai_hook_run_pre(ca_hook *list, ca_tensor **grad, const ca_meta *expect,
                           const char *owner);
/* The same for the hooks of one output of a node (those with h->output_nr == k). */
ca_status cai_hook_run_pre_output(ca_hook *list, int k, ca_tensor **grad, const ca_meta *expect,
                                  const char *owner);
ca_status cai_hook_run_post(ca_hook *list, ca_tensor *leaf);
/* Node hooks (HOOK_NODE_PRE / HOOK_NODE_POST) of list, each on the arrays in place:
 * entries are references the caller owns, which a hook may replace. Every replacement is
 * checked against metas (the output metas for pre-hooks, the input metas for post-hooks);
 * `owner` names the node in messages. */
ca_status cai_hook_run_node_pre(ca_hook *list, int n_out, ca_tensor **grads, const ca_node *n);
ca_status cai_hook_run_node_post(ca_hook *list, int n_in, ca_tensor **gin, int n_out,
                                 ca_tensor *const *gout, const ca_node *n);

/* ---------------------------------------------------------------------------------------
 * The builder: the interface every derivative rule is written against (builder.h).
 */
typedef struct ca_builder ca_builder;
typedef struct ca_bval_s *ca_bval; /* opaque: a tensor in eager mode, an IR value traced */

/* ---------------------------------------------------------------------------------------
 * The op table. Each op is one row of data; ops_*.c files each export an array of rows,
 * and op_table.c gathers them into a table indexed by ca_op_id, checked at start-up.
 */
typedef enum {
    CA_FUSE_POINTWISE,
    CA_FUSE_REDUCTION,
    CA_FUSE_GEMM,
    CA_FUSE_VIEW,
    CA_FUSE_OPAQUE,
} ca_fusion_class;

/* What a node keeps from its op call. TENSOR fields are saved tensors (in order, they
 * become node->saved[0..]); the others name attrs the rule reads, so the compiled
 * backward can put them in its cache key (scalars, ints) or lift them (sizes). */
typedef enum {
    FIELD_TENSOR, /* src: FROM_INPUT(k), FROM_OUTPUT, FROM_AUX(k) */
    FIELD_INT,    /* attrs.i[idx] */
    FIELD_DOUBLE, /* attrs.s[idx] */
    FIELD_DIMS,   /* attrs.dims */
    FIELD_SIZES,  /* attrs.shape: sizes, lifted to size slots by the compiled backward */
} ca_field_kind;

typedef enum { FROM_INPUT, FROM_OUTPUT, FROM_AUX, FROM_ATTR } ca_field_src;

typedef struct {
    const char *name; /* as in logs: "self", "other", "result", "dim" */
    ca_field_kind kind;
    ca_field_src src;
    int idx; /* input or aux number, or attrs index */
} ca_field_desc;

#define CA_MAX_FIELDS 8
#define CA_MAX_AUX    3

/* Field shorthands for the rows: a saved input or result, a double or int attr. */
#define F_IN(nm, k)                                                                                \
    { nm, FIELD_TENSOR, FROM_INPUT, k }
#define F_RESULT                                                                                   \
    { "result", FIELD_TENSOR, FROM_OUTPUT, 0 }
#define F_DBL(nm, k)                                                                               \
    { nm, FIELD_DOUBLE, FROM_ATTR, k }
#define F_INT(nm, k)                                                                               \
    { nm, FIELD_INT, FROM_ATTR, k }

enum {
    CA_OPF_NONDIFF = 1u << 0, /* no gradient at all (comparisons, backward-only helpers) */
};

/* Shape rule: validate inputs and attrs, canonicalise attrs in place (negative dims,
 * -1 sizes, clamped slices), and compute the output's dtype and shape. Pure: no data. */
typedef struct ca_op_def ca_op_def;
typedef ca_status (*ca_shape_fn)(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                                 ca_meta *out);
/* Forward kernel: compute *out (a new tensor of meta `m`, or a view) and any aux outputs
 * (new references, e.g. argmax indices or layer_norm's mean and rstd). */
typedef ca_status (*ca_forward_fn)(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                   const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                   ca_tensor **aux);
/* Derivative rule: given the gradient g of the node's output, set gin[i] for every input
 * with node_needs_grad(n, i). Errors are sticky in the builder (see builder.h). */
typedef void (*ca_deriv_fn)(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin);
/* Argument mapping: the op's scalar arguments, in its schema's order, checked and stored
 * in attrs (a row without one gets the registry's default mapping; op_registry.c). */
typedef ca_status (*ca_args_fn)(const double *arg, int n_arg, ca_attrs *a);

struct ca_op_def {
    int id;                /* ca_op_id: the row's place in the table */
    const char *name;      /* the op: "mul" */
    const char *node_name; /* its node in logs and grad_fn: "MulBackward0" */
    /* optional: the node's name from its attributes, where one row stands for two of
     * PyTorch's ops (to_dtype for clone) */
    const char *(*node_name_of)(const ca_attrs *a);
    ca_fusion_class fusion;
    int n_in_min, n_in_max; /* tensor inputs (n_in_max -1: unbounded, e.g. cat) */
    unsigned flags;
    uint32_t nondiff_inputs; /* bit i: input i never gets a gradient (cond, mask, index) */
    int n_fields;
    ca_field_desc fields[CA_MAX_FIELDS];
    ca_shape_fn shape;
    ca_forward_fn forward;
    ca_deriv_fn backward; /* NULL only with CA_OPF_NONDIFF */
    kern_pw_op pw;        /* pointwise rows: the kernel op */
    kern_pw_op pw_bw;     /* activations: the derivative kernel (ops_activation.c) */
    /* Rows whose saved aux values depend on the inputs (layer_norm's mean and rstd), which
     * the rule reads as constants: aux output k recomputed from the saved inputs with
     * builder calls. A double backward hands the rule these instead, so they carry the
     * inputs' history. (Aux values that are constants, indices or masks need none.) */
    ca_bval (*aux_again)(ca_builder *b, const ca_node *n, int k);
    /* The op registry (cagrad.h): rows with a schema are callable by name and become
     * Python functions. schema is the Python signature, PyTorch's names and defaults:
     * "elu(Tensor input, float alpha=1.0)"; py says where PyTorch has it (CA_OP_PY_*). */
    const char *schema;
    unsigned py;
    ca_args_fn args; /* NULL: the default mapping of the schema's scalars to attrs */
};

/* Every op, public and internal. Internal rows (helpers that derivative rules use) are
 * ops too, so a rule's output is always expressible as graph IR. */
typedef enum {
    /* internal: generic pointwise, attrs.i[0] = kern_pw_op, s[0..1] = params */
    CA_OP_PW,
    /* pointwise binary */
    CA_OP_ADD,
    CA_OP_SUB,
    CA_OP_MUL,
    CA_OP_DIV,
    CA_OP_POW,
    CA_OP_MAXIMUM,
    CA_OP_MINIMUM,
    CA_OP_WHERE,
    CA_OP_LT,
    CA_OP_LE,
    CA_OP_GT,
    CA_OP_GE,
    CA_OP_EQ,
    CA_OP_NE,
    /* scalar forms: attrs.s[0] = the scalar */
    CA_OP_ADD_S,
    CA_OP_SUB_S,
    CA_OP_RSUB_S,
    CA_OP_MUL_S,
    CA_OP_DIV_S,
    CA_OP_RDIV_S,
    CA_OP_POW_S,
    CA_OP_RPOW_S,
    CA_OP_MAXIMUM_S,
    CA_OP_MINIMUM_S,
    CA_OP_LT_S,
    CA_OP_LE_S,
    CA_OP_GT_S,
    CA_OP_GE_S,
    CA_OP_EQ_S,
    CA_OP_NE_S,
    /* unary */
    CA_OP_NEG,
    CA_OP_EXP,
    CA_OP_LOG,
    CA_OP_SQRT,
    CA_OP_RSQRT,
    CA_OP_ABS,
    CA_OP_SIN,
    CA_OP_COS,
    CA_OP_GELU,
    CA_OP_CLAMP,
    CA_OP_TO_DTYPE,
    /* the everyday math functions (ops_math.c) */
    CA_OP_LOG1P,
    CA_OP_EXPM1,
    CA_OP_LOG2,
    CA_OP_LOG10,
    CA_OP_EXP2,
    CA_OP_ERF,
    CA_OP_ERFC,
    CA_OP_ERFINV,
    CA_OP_SINH,
    CA_OP_COSH,
    CA_OP_TAN,
    CA_OP_ASIN,
    CA_OP_ACOS,
    CA_OP_ATAN,
    CA_OP_ASINH,
    CA_OP_ACOSH,
    CA_OP_ATANH,
    CA_OP_SINC,
    CA_OP_DEG2RAD,
    CA_OP_RAD2DEG,
    CA_OP_SQUARE,
    CA_OP_RECIPROCAL,
    CA_OP_FLOOR,
    CA_OP_CEIL,
    CA_OP_TRUNC,
    CA_OP_ROUND,
    CA_OP_FRAC,
    CA_OP_SGN,
    CA_OP_LOGIT,
    CA_OP_ATAN2,
    CA_OP_HYPOT,
    CA_OP_FMOD,
    CA_OP_REMAINDER,
    CA_OP_COPYSIGN,
    CA_OP_LOGADDEXP,
    CA_OP_LOGADDEXP2,
    CA_OP_XLOGY,
    CA_OP_FLOOR_DIVIDE,
    /* reductions: attrs.dims = reduced dims (canonical, sorted), i[0] = keepdim */
    CA_OP_SUM,
    CA_OP_MEAN,
    CA_OP_MAX,
    CA_OP_MIN,
    CA_OP_LOGSUMEXP,
    CA_OP_SUM_TO, /* internal: sum a broadcast gradient back to attrs.shape */
    /* shape */
    CA_OP_RESHAPE,
    CA_OP_VIEW,
    CA_OP_UNSAFE_VIEW, /* a view under UnsafeViewBackward0 (linear's output, as PyTorch) */
    CA_OP_PERMUTE,
    CA_OP_TRANSPOSE, /* permute under PyTorch's node names: TransposeBackward0 */
    CA_OP_T,         /* and TBackward0 (2-D t()) */
    CA_OP_EXPAND,
    CA_OP_SQUEEZE,
    CA_OP_UNSQUEEZE,
    CA_OP_SLICE,
    CA_OP_SELECT,
    CA_OP_AS_STRIDED, /* ops_strided.c: shape = sizes, dims = strides, i[0] = offset */
    CA_OP_CAT,
    CA_OP_CONTIGUOUS,
    CA_OP_MASKED_FILL,
    CA_OP_SLICE_BACKWARD, /* internal: place x into zeros(attrs.shape) at a slice */
    /* indexing */
    CA_OP_INDEX_SELECT,
    CA_OP_EMBEDDING,
    CA_OP_GATHER,
    CA_OP_INDEX_ADD,    /* internal: zeros(attrs.shape).index_add(dim, index, src) */
    CA_OP_SCATTER_ADD,  /* internal: zeros(attrs.shape).scatter_add(dim, index, src) */
    CA_OP_INDEX_FILL,   /* x.index_fill(dim, index, attrs.s[0]) */
    CA_OP_INDEX_FILL_T, /* x.index_fill(dim, index, value), value a 0-d tensor (input 2) */
    /* linear algebra: attrs.i[0], i[1] = transpose flags of a and b */
    CA_OP_MATMUL,
    CA_OP_MM,
    CA_OP_BMM,
    CA_OP_ADDMM, /* bias + a @ b, 2-D; attrs unused */
    /* nn */
    CA_OP_SOFTMAX,
    CA_OP_LOG_SOFTMAX,
    CA_OP_NLL_LOSS,
    CA_OP_MSE_LOSS,
    CA_OP_LAYER_NORM,
    CA_OP_DROPOUT,
    CA_OP_NLL_LOSS_BACKWARD, /* internal */
    /* normalization (ops_norm.c) */
    CA_OP_BATCH_NORM, /* training; s[0] = eps, i[0] = weight/bias flags; aux mean, invstd, var */
    /* convolution (ops_conv.c): attrs.dims = CAI_CONV_* parameters, i[0] = groups */
    CA_OP_CONV2D,
    CA_OP_IM2COL,             /* internal: conv2d's unfold */
    CA_OP_COL2IM,             /* internal: its adjoint, into attrs.shape */
    CA_OP_CONV2D_WEIGHT_GRAD, /* internal: conv2d's weight gradient */
    /* position and order (ops_order.c, ops_sort.c) */
    CA_OP_TRIL, /* attrs.i[0] = diagonal */
    CA_OP_TRIU,
    CA_OP_CUMSUM,           /* i[0] = dim, i[1] = 1: summed from the end (the derivative) */
    CA_OP_CUMPROD,          /* i[0] = dim */
    CA_OP_CUMPROD_BACKWARD, /* internal: (x, cumprod(x), g) -> cumprod's derivative */
    CA_OP_SORT,             /* i[0] = dim, i[1] = descending, i[2] = stable; aux 0: indices */
    CA_OP_SORT_STABLE,      /* the same, under SortBackward1 (stable=True) */
    CA_OP_TOPK,             /* i[0] = dim, i[1] = largest, i[2] = sorted, i[3] = k */
    /* pooling (ops_pool.c): dims = kh, kw, sh, sw, ph, pw, dh, dw; i[0] = ceil_mode */
    CA_OP_MAX_POOL2D,
    CA_OP_AVG_POOL2D,          /* i[1] = count_include_pad, i[2] = divisor_override (0: none) */
    CA_OP_ADAPTIVE_AVG_POOL2D, /* i[0], i[1] = output height and width */
/* the activations (ops_activation.h) */
#define CA_OP_ENUM_ACTIVATION(ID, ...) CA_OP_##ID,
    CA_ACTIVATIONS(CA_OP_ENUM_ACTIVATION)
#undef CA_OP_ENUM_ACTIVATION
    /* autograd's own nodes */
    CA_OP_ACCUMULATE_GRAD,
    CA_OP_CUSTOM, /* a custom function: its backward is the user's callback (custom.c) */
    /* double backward (create_graph): a leaf's first .grad (CopyBackwards, as PyTorch),
     * and a retained non-leaf's (CloneBackward0) */
    CA_OP_GRAD_COPY,
    CA_OP_GRAD_CLONE,
    CA_OP__COUNT
} ca_op_id;

/* A unary math row in the op registry (ops_pointwise.c, ops_math.c): torch.<NAME>(input, *,
 * out=None) and the method, on the shared pointwise shape rule and forward kernel. */
#define MATH_ROW(ID, NAME, NODE, KOP, BW, FLAGS, NF, ...)                                          \
    {                                                                                              \
        .id = (ID), .name = (NAME), .node_name = (NODE), .fusion = CA_FUSE_POINTWISE,              \
        .n_in_min = 1, .n_in_max = 1, .n_fields = (NF), .fields = {__VA_ARGS__},                   \
        .shape = cai_op_pointwise_shape, .forward = cai_op_pointwise_forward, .backward = (BW),    \
        .pw = (KOP), .schema = NAME "(Tensor input)",                                              \
        .py = CA_OP_PY_TORCH | CA_OP_PY_TENSOR | CA_OP_PY_OUT | (FLAGS)                            \
    }

/* Each ops_*.c exports its rows; op_table.c lists these groups. */
typedef struct {
    const ca_op_def *rows;
    int count;
} ca_op_group;

extern const ca_op_group cai_ops_pointwise, cai_ops_activation, cai_ops_reduce, cai_ops_shape,
    cai_ops_slice, cai_ops_index, cai_ops_linalg, cai_ops_nn, cai_ops_norm, cai_ops_conv,
    cai_ops_order, cai_ops_sort, cai_ops_pool, cai_ops_autograd, cai_ops_math, cai_ops_strided;
/* Every group, as cai_op_table_check gathers them. */
extern const ca_op_group *const cai_op_groups[];
extern const int cai_op_n_groups;

const ca_op_def *cai_op_def(int id);
/* Checks that every id has exactly one complete row and fills the table (op_table.c), then
 * builds the op registry from the rows' schemas (op_registry.c). */
ca_status cai_op_table_check(void);
/* The registry over the filled table: every schema parsed, or CA_STATUS_INTERNAL naming the
 * row whose schema is malformed. */
ca_status cai_op_registry_build(void);
/* Whether row's schema is well formed and names the row (tests use it on made-up rows). */
bool cai_op_schema_valid(const ca_op_def *row);
/* Op `op`'s scalar arguments (n_arg of them, in its schema's order) into attrs, checked:
 * the row's own args function, or the default mapping of its schema. */
ca_status cai_op_def_args(int op, const double *arg, int n_arg, ca_attrs *a);
/* The same check over any list of groups, into table t (CA_OP__COUNT entries): tests use
 * it to show that an incomplete table is refused. */
ca_status cai_op_table_build(const ca_op_group *const *groups, int n_groups, const ca_op_def **t);

/* ---------------------------------------------------------------------------------------
 * The generic op call (op.c): validate, shape rule, forward, and record a node when grad
 * mode is on and an input requires grad. aux_out (may be NULL) receives the op's aux
 * outputs as new references (CA_MAX_AUX entries, unused ones NULL).
 */
ca_status cai_op_call(int op, int n_in, ca_tensor *const *in, const ca_attrs *attrs,
                      ca_tensor **out, ca_tensor **aux_out);
/* Whether op is a comparison (lt ... ne, tensor or scalar form): its result is bool. */
bool cai_op_is_comparison(int op);
/* Shorthands for the public wrappers. */
ca_status cai_op_call1(int op, ca_tensor *x, const ca_attrs *a, ca_tensor **out);
ca_status cai_op_call2(int op, ca_tensor *x, ca_tensor *y, const ca_attrs *a, ca_tensor **out);

/* A kernel's return code as a status: 0 is CA_OK, -2 out of memory (err_nomem(what)),
 * anything else an internal error naming what and the code. */
ca_status cai_op_kern_status(int rc, const char *what);
/* Copy every element of src into dst, a strided region of src's shape and dtype; `what`
 * names the op in errors. */
ca_status cai_op_copy_into(void *dst, const int64_t *dst_strides, ca_tensor *src, const char *what);
/* Release the first n of ts (NULL entries are fine): a forward's intermediates. */
void cai_op_release_all(ca_tensor **ts, int n);

/* Forward kernel shared by every pointwise row: runs row->pw (or attrs.i[0] for
 * CA_OP_PW) with attrs.s[0..1] as params over broadcast inputs. */
ca_status cai_op_pointwise_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                   const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                   ca_tensor **aux);
/* Shape rule shared by pointwise rows: the kernel op's arity, broadcast all inputs, equal
 * dtypes (float unless the kernel op takes int64), except the cond input of KPW_WHERE
 * (input 0) and the mask of KPW_MASKED_FILL (input 1), which may be any dtype. The output
 * takes the other inputs' dtype; comparisons too (1 or 0). */
ca_status cai_op_pointwise_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                                 ca_meta *out);
/* The kernel op of a pointwise row (row->pw, or attrs.i[0] for CA_OP_PW). */
kern_pw_op cai_op_pw_kind(const ca_op_def *row, const ca_attrs *a);

/* The derivative of the generic pointwise row (ops_pw_deriv.c), reached by double backward:
 * its rule, and its table's entry for a kernel op: 0 none (a hole: a bug), 1 a derivative,
 * 2 no gradient at all (comparisons, sign, floor...: no node is recorded for them). */
void cai_pw_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin);
int cai_pw_deriv_entry(kern_pw_op op);
bool cai_pw_deriv_is_none(kern_pw_op op);

/* ---------------------------------------------------------------------------------------
 * Grad mode, graph ids, sequence numbers (autograd_state.c)
 */
bool cai_grad_mode_enabled(void);
int cai_fwd_graph_current(void);
/* Tell this thread's op observer (if any) that op `name` ran. */
void cai_op_observe(const char *name);
uint64_t cai_node_next_seq(void);
uint64_t cai_node_peek_seq(void); /* the seq the next node will get */

/* ---------------------------------------------------------------------------------------
 * Random state (state.c): the global seed and offset the random kernels consume.
 */
/* Take n draws: the seed and the offset they start at (the global offset moves past them). */
void cai_random_take(int64_t n, uint64_t *seed, uint64_t *offset);

#endif /* CAGRAD_INTERNAL_H */
