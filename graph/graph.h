/* graph.h - the backward graph IR of the compiled backward, its passes, memory plan and
 * runner.
 *
 * The tracing builder (autograd layer) replays derivative rules into a graph: one node per
 * builder call, each node one value. Sizes are symbolic: every dim is a size expression
 * over size slots (the sizes the compiled-autograd key lifted), so one compiled graph
 * serves every value of a dynamic dim. Static slots are simply constants.
 *
 * This layer knows nothing about tensors' refcounts, autograd nodes or hooks' callables:
 * lifted tensors arrive as raw views, and hooks, .grad accumulation and autograd.grad's
 * outputs are call-outs through graph_callbacks.
 *
 * Prefixes (after the library's internal cai_): graph_ (the IR), graph_sx_ (size
 * expressions), graph_plan_ (memory plan and run).
 *
 * This is the layer's contract with the autograd layer and the tests; what only the
 * graph/ source files share is in graph/internal.h.
 */
#ifndef CAGRAD_GRAPH_H
#define CAGRAD_GRAPH_H

#include "codegen/kern.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GRAPH_MAX_IN 3

typedef struct graph graph;
typedef int32_t graph_sx;  /* a size expression (index into the graph's table); -1: none */
typedef int32_t graph_val; /* a value: the id of the node that makes it; -1: none */

/* Every allocation of this layer goes through this allocator (the library wires it to its
 * one allocator hook at start-up). Default: aligned_alloc / free. */
void cai_graph_set_allocator(kern_allocator a);

/* ---------------------------------------------------------------------------------------
 * Size expressions. Hash-consed per graph: the same expression always has the same id,
 * so two dims are provably equal when their ids are equal. Constants fold.
 */
typedef enum { GSX_CONST, GSX_SLOT, GSX_ADD, GSX_SUB, GSX_MUL, GSX_DIV } graph_sx_kind;

graph_sx cai_graph_sx_const(graph *g, int64_t v);
graph_sx cai_graph_sx_slot(graph *g, int slot);
/* a OP b; GSX_DIV truncates: exact for reshape's -1, a floor for conv2d's output sizes
 * (sizes are not negative). */
graph_sx cai_graph_sx_op(graph *g, graph_sx_kind k, graph_sx a, graph_sx b);
/* The value of s for the given slot values. */
int64_t cai_graph_sx_eval(const graph *g, graph_sx s, const int64_t *slots);
/* True (and *v set) when s is a constant. */
bool cai_graph_sx_const_value(const graph *g, graph_sx s, int64_t *v);
/* "s3", "64", "s0*s1" into buf; returns buf. */
const char *cai_graph_sx_str(const graph *g, graph_sx s, char *buf, size_t size);

/* ---------------------------------------------------------------------------------------
 * Nodes
 */
/* Every graph op, one row each: GRAPH_OPS(X) expands X(NAME, PRINTED, N_IN, N_INTS, FL).
 * From the rows come the enum, the printed names, the arity and attribute checks of
 * cai_graph_add and the side-effect facts the passes use.
 *   N_IN   inputs (-1: the kernel op's arity, for PW)
 *   N_INTS how many of i[0..3] the op reads (the rest are zeroed, so equal calls compare equal)
 *   FL     GOPF_ flags: SHAPE (reads the shape attribute), SIDE (a side effect: a root that
 *          keeps its order), NOVALUE (makes no value)
 */
enum { GOPF_SHAPE = 1 << 0, GOPF_SIDE = 1 << 1, GOPF_NOVALUE = 1 << 2 };

/* clang-format off */
#define GRAPH_OPS(X)                                                                               \
    /* i[0] = input number; dtype and shape given */                                              \
    X(INPUT, "getitem", 0, 1, GOPF_SHAPE)                                                          \
    /* i[0] = kern_pw_op, p[0..1] its params; n_in = its arity; broadcast */                      \
    X(PW, "pw", -1, 1, 0)                                                                          \
    /* i[0] = mask of reduced dims, i[1] = keepdim */                                             \
    X(SUM, "sum", 1, 2, 0)                                                                         \
    /* shape = target: sum a broadcast value back down */                                         \
    X(SUM_TO, "sum_to", 1, 0, GOPF_SHAPE)                                                          \
    /* shape = target (a view) */                                                                  \
    X(EXPAND, "expand", 1, 0, GOPF_SHAPE)                                                          \
    /* shape = target, one dim may be -1 (a view when strides allow) */                           \
    X(RESHAPE, "reshape", 1, 0, GOPF_SHAPE)                                                        \
    /* perm (a view) */                                                                            \
    X(PERMUTE, "permute", 1, 0, 0)                                                                 \
    /* i[0] = dim (a view) */                                                                      \
    X(UNSQUEEZE, "unsqueeze", 1, 1, 0)                                                             \
    /* i[0..3] = dim, start, end, step, canonical (a view) */                                     \
    X(SLICE, "slice", 1, 4, 0)                                                                     \
    /* shape = full; i[0] = dim, i[1], i[2] = start, end as size expressions (a slice of a */    \
    /* dynamic dim from its end starts at a symbolic position), i[3] = step: zeros(full) with */  \
    /* x at the slice; a length that is symbolic is checked at run time                    */    \
    X(SLICE_BACKWARD, "slice_backward", 1, 4, GOPF_SHAPE)                                          \
    /* i[0] = dim, shape = {start, length} as size expressions: a slice at a symbolic       */ \
    /* offset (cat's derivative along a dynamic dim), checked against the dim at run time (a view) */ \
    X(NARROW, "narrow", 1, 1, GOPF_SHAPE)                                                          \
    /* a contiguous copy */                                                                        \
    X(CONTIGUOUS, "contiguous", 1, 0, 0)                                                           \
    /* zeros of the dtype and shape given: a gradient that is zero by construction, which the  */ \
    /* simplifier passes through the ops it reaches (a symbolic zero)                          */ \
    X(ZEROS, "zeros", 0, 0, GOPF_SHAPE)                                                            \
    /* i[0], i[1] = transpose a, b (last two dims); batch dims broadcast */                       \
    X(MATMUL, "matmul", 2, 2, 0)                                                                   \
    /* in: index, src; shape = full; i[0] = dim */                                                 \
    X(INDEX_ADD, "index_add", 2, 1, GOPF_SHAPE)                                                    \
    X(SCATTER_ADD, "scatter_add", 2, 1, GOPF_SHAPE)                                                \
    /* in: x, index (0-D or 1-D); i[0] = dim: x's rows index[j] along dim, in order       */    \
    X(INDEX_SELECT, "index_select", 2, 1, 0)                                                       \
    /* in: x, index (x's ndim); i[0] = dim: x[.., index[o, j, i], ..], of index's shape */     \
    X(GATHER, "gather", 2, 1, 0)                                                                   \
    /* in: x, index; i[0] = dim, p[0] = value: x with value at the index along dim */          \
    X(INDEX_FILL, "index_fill", 2, 1, 0)                                                           \
    /* conv2d's unfold: x [N, C, H, W] -> [N, groups, C/groups*kh*kw, OH*OW]; i[0..2] =     */ \
    /* the packed parameters (cai_graph_conv_pack) and the column layout, which may put the  */ \
    /* dims in the order [groups, K, N, OH*OW] (cai_graph_conv_layout); i[3] = groups        */ \
    X(IM2COL, "im2col", 1, 4, 0)                                                                   \
    /* its adjoint, the fold: columns -> shape = [N, C, H, W]; i[0..3] as IM2COL             */ \
    X(COL2IM, "col2im", 1, 4, GOPF_SHAPE)                                                          \
    /* in: x [N, C, H, W], w [O, C/groups, kh, kw] (contiguous) -> [N, O, OH, OW]; i[0..3] as */ \
    /* IM2COL, whose layout here is 0 or CAI_CONV_COLS_FLIP (the taps reversed)              */ \
    X(CONV2D, "conv2d", 2, 4, 0)                                                                   \
    /* in: g [N, O, OH, OW] (contiguous), x -> shape = the weight's; i[0..3] as CONV2D        */ \
    X(CONV2D_WEIGHT_GRAD, "conv2d_weight_grad", 2, 4, GOPF_SHAPE)                                  \
    /* dtype = target */                                                                           \
    X(CAST, "cast", 1, 0, 0)                                                                       \
    /* i[0] = dim, i[1] = 1: running sums taken from the end (cumsum's derivative) */             \
    X(CUMSUM, "cumsum", 1, 2, 0)                                                                   \
    /* i[0] = diagonal, i[1] = 1: triu, else tril, over the last two dims (cumprod's rule) */   \
    X(TRI, "tri", 1, 2, 0)                                                                         \
    /* i[0] = dim: running products (cumprod's twice-differentiable rule) */                      \
    X(CUMPROD, "cumprod", 1, 1, 0)                                                                 \
    /* in: x, cumprod(x), g; i[0] = dim: cumprod's derivative */                                  \
    X(CUMPROD_BW, "cumprod_backward", 3, 1, 0)                                                     \
    /* shape[0] = N (n_shape 1): x * (p[0] / N); a mean's gradient over symbolic dims, where N  */ \
    /* is only known at run time. i[0] = 1: x * (p[0] * N) (a sum of an expand over them) */      \
    X(SCALE_SIZE, "scale_size", 1, 1, GOPF_SHAPE)                                                  \
    /* in: g, target, total_weight; shape = input's; i[0] = reduction, i[1] = ignore_index */     \
    X(NLL_BW, "nll_bw", 3, 2, GOPF_SHAPE)                                                          \
    /* in: grad; i[0] = hook number. Out: the (possibly replaced) grad */                         \
    X(HOOK, "call_hook", 1, 1, GOPF_SIDE)                                                          \
    /* in: grad; i[0] = retain number, i[1] = which output. Side effect: t.grad += grad */       \
    X(RETAIN, "retain_grad", 1, 2, GOPF_SIDE | GOPF_NOVALUE)                                       \
    /* in: grad; i[0] = leaf number. Side effect: leaf.grad += grad */                            \
    X(ACCUMULATE, "accumulate_grad", 1, 1, GOPF_SIDE | GOPF_NOVALUE)                               \
    /* in: the ACCUMULATE node; i[0] = leaf number, i[1] = hook number */                         \
    X(POST_HOOK, "post_accumulate_hook", 1, 2, GOPF_SIDE | GOPF_NOVALUE)                           \
    /* in: grad; i[0] = output number (autograd.grad's result) */                                 \
    X(OUTPUT, "output", 1, 1, GOPF_SIDE | GOPF_NOVALUE)                                            \
    /* Opaque call-outs (a custom function's backward): args, the call, then its results.   */    \
    /* in: a gradient; i[0] = call-out number, i[1] = which argument */                          \
    X(CALLOUT_ARG, "callout_arg", 1, 2, GOPF_SIDE | GOPF_NOVALUE)                                  \
    /* i[0] = call-out number: run it on the arguments staged so far */                          \
    X(CALLOUT, "callout", 0, 1, GOPF_SIDE | GOPF_NOVALUE)                                          \
    /* i[0] = call-out number, i[1] = which result; dtype and shape given, like INPUT */        \
    X(CALLOUT_RESULT, "callout_result", 0, 2, GOPF_SHAPE | GOPF_SIDE)
/* clang-format on */

typedef enum {
#define GRAPH_OP_ENUM(NAME, PRINTED, N_IN, N_INTS, FL) GOP_##NAME,
    GRAPH_OPS(GRAPH_OP_ENUM)
#undef GRAPH_OP_ENUM
        GOP__COUNT
} graph_op;

/* conv2d's 10 parameters (kh, kw, sh, sw, ph, pw, dh, dw, ph_end, pw_end: shape_rules.h's
 * CAI_CONV_*) as GOP_IM2COL / GOP_COL2IM's i[0..2], 16 bits each; false when one is
 * outside [0, 65535]. */
#define GRAPH_CONV_NPARAMS 10
static inline bool cai_graph_conv_pack(const int64_t *p, int64_t *i) {
    i[0] = i[1] = i[2] = 0;
    for (int k = 0; k < GRAPH_CONV_NPARAMS; k++) {
        if (p[k] < 0 || p[k] > 0xffff)
            return false;
        i[k / 4] |= p[k] << (16 * (k % 4));
    }
    return true;
}

static inline void cai_graph_conv_unpack(const int64_t *i, int64_t *p) {
    for (int k = 0; k < GRAPH_CONV_NPARAMS; k++)
        p[k] = (i[k / 4] >> (16 * (k % 4))) & 0xffff;
}

/* im2col's column layout (shape_rules.h's CAI_CONV_COLS_*) in the 16 bits after the
 * packed parameters (i[2] bits 32..47); col2im's is 0 or CAI_CONV_COLS_FLIP. */
#define GRAPH_CONV_LAYOUT_SHIFT 32
static inline void cai_graph_conv_set_layout(int64_t *i, int64_t layout) {
    i[2] |= (layout & 0xffff) << GRAPH_CONV_LAYOUT_SHIFT;
}

static inline int64_t cai_graph_conv_layout(const int64_t *i) {
    return (i[2] >> GRAPH_CONV_LAYOUT_SHIFT) & 0xffff;
}

/* Where a node came from, for the printed graph's comments and value names. */
typedef struct {
    int node_call;    /* NodeCall id of the autograd node whose rule made it; -1: none */
    const char *name; /* that node's name ("MulBackward0"); static string */
    int fwd_graph;    /* forward graph id: values are named aot{k}_... ; -1: no prefix */
} graph_origin;

typedef struct {
    graph_op op;
    int n_in;
    graph_val in[GRAPH_MAX_IN];
    kern_dtype dtype; /* INPUT and CAST: the dtype. Others: inferred, leave 0 */
    double p[2];
    int64_t i[4];
    int n_shape; /* shape attribute: INPUT's dims, or the target/full shape */
    graph_sx shape[KERN_MAX_DIMS];
    int n_perm;
    int8_t perm[KERN_MAX_DIMS];
} graph_op_args;

typedef struct {
    graph_op_args a;               /* as added, with -1 in a RESHAPE target resolved */
    kern_dtype dtype;              /* output dtype */
    int ndim;                      /* output rank */
    graph_sx shape[KERN_MAX_DIMS]; /* output shape, symbolic */
    graph_origin origin;
    bool dead;       /* removed by a pass */
    graph_val alias; /* set by CSE: this node was replaced by that one; -1 otherwise */
    int32_t fused;   /* set by cai_graph_fuse: 1 + the node's fused group; 0: none (Addition.) */
} graph_node;

/* The op's short name as printed and in messages ("sum", "matmul", "call_hook"; "pw" for
 * GOP_PW, whose printed name is its cai_kern_pw_name in lower case). (Addition.) */
const char *cai_graph_op_name(graph_op op);

/* GOP_NLL_BW's reduction codes (its i[0]). They are cagrad.h's ca_reduction values, which
 * this layer cannot include; the autograd layer checks with _Static_assert that they
 * agree. */
typedef enum {
    GRAPH_REDUCTION_NONE = 0,
    GRAPH_REDUCTION_MEAN = 1,
    GRAPH_REDUCTION_SUM = 2
} graph_reduction;

/* A new empty graph, or NULL when out of memory. */
graph *cai_graph_new(void);
void cai_graph_free(graph *g);
/* Append a node; infers its dtype and symbolic shape, checking the inputs like the
 * matching op's shape rule does. Returns its value, or -1 (message in cai_graph_error).
 * (Clarifications:) Fields an op does not use are zeroed in the stored args, and dims
 * are normalised (negative dims, perm entries), so equal calls store equal args. A
 * RESHAPE/EXPAND target dim is "-1" when it is the id -1 or the constant -1. Inputs that
 * CSE replaced are followed to their replacement. Sizes are compared symbolically: two
 * dims are equal when their ids are; a symbol (a dim that is not a constant) is never
 * taken to be 1, so it broadcasts against a constant 1 but against nothing else. The graph
 * is then right for any value >= 1 of the symbol (at 1, s against 1 and s against s give
 * eager's result too); the compiled-autograd cache never runs it with a symbol at 0. */
graph_val cai_graph_add(graph *g, const graph_op_args *a, graph_origin origin);
/* Unification, for finding which size slots a graph needs equal: after this call two
 * different slots (values[k] is slot k's value at capture, n slots) compare equal in shape
 * inference when their values are, and are put in one class; cai_graph_unify_find names a
 * slot's class (its lowest slot). Such a graph is only for reading the classes: its shapes
 * mix the slots of a class. Returns 0, or -1 out of memory. */
int cai_graph_unify(graph *g, int n, const int64_t *values);
int cai_graph_unify_find(const graph *g, int slot);
/* a and b are the same size: the same id, or (after cai_graph_unify) the same expression
 * over slots that can be unified, which it unifies. */
bool cai_graph_sx_same(graph *g, graph_sx a, graph_sx b);
const char *cai_graph_error(const graph *g);
/* Forget the last failure (a caller that recovered from it, leaving dead nodes behind). */
void cai_graph_clear_error(graph *g);
/* True when the last failure was an allocation (the graph is fine, memory ran out). */
bool cai_graph_out_of_memory(const graph *g);
int cai_graph_count(const graph *g); /* nodes, dead ones included */
const graph_node *cai_graph_node_at(const graph *g, graph_val v);
/* The concrete shape of v for the given slot values (for the tracing builder's meta). */
void cai_graph_eval_shape(const graph *g, graph_val v, const int64_t *slots, int64_t *shape);
int cai_graph_n_slots(const graph *g); /* 1 + the highest slot any expression uses */

/* ---------------------------------------------------------------------------------------
 * Passes. Side-effect nodes (HOOK, RETAIN, ACCUMULATE, POST_HOOK, OUTPUT) are roots and
 * keep their order.
 */
void cai_graph_dce(graph *g); /* mark nodes no root depends on dead */
void cai_graph_cse(graph *g); /* same op, args and inputs: later uses go to the first copy */
/* OUTPUT nodes numbered `first` or above whose value no other live node reads are dropped
 * (a double backward's kept values that only the output would keep alive); run DCE after. */
void cai_graph_drop_lone_outputs(graph *g, int64_t first);
/* (Clarification:) CSE rewrites every input to its replacement, then marks the replaced
 * node dead with alias set. INPUT and side-effect nodes are never merged. Either pass
 * keeps the graph unchanged if it cannot get its scratch memory. */

/* ---------------------------------------------------------------------------------------
 * Printing. The compiled-autograd log format, Python-like:
 *
 *   ===== Compiled autograd graph =====
 *   def forward(inputs, sizes, hooks):
 *       getitem: "f32[]" = inputs[0]
 *       getitem_1: "f32[s0, 784]" = inputs[1]
 *       # MeanBackward0 (NodeCall 1)
 *       aot0_expand: "f32[s0, 10]" = expand(getitem, [s0, 10])
 *       aot0_mul_s: "f32[s0, 10]" = mul_s(aot0_expand, 0.000976562)
 *       # MmBackward0 (NodeCall 3)
 *       aot0_matmul: "f32[10, 784]" = matmul(aot0_mul_s, getitem_1, ta=1, tb=0)
 *       # AccumulateGrad (NodeCall 4)
 *       accumulate_grad(leaf=0, aot0_matmul)
 *       return []
 *
 * A "# Name (NodeCall i)" comment opens each run of nodes with the same origin. Value
 * names are op names, suffixed _1, _2 ... when repeated, and prefixed aot{k}_ by their
 * forward graph. Dead nodes are not printed. verbose adds each slot's current value
 * ("# sizes: s0=64, s1=128") when slots is non-NULL. Returns a string from the graph's
 * allocator (free with cai_graph_free_string), or NULL when out of memory.
 *
 * (Clarifications:) Integer attributes print as name=value after the inputs (dim=1,
 * keepdim=0, ta=1), shapes and dim lists as [..], pointwise scalars positionally with %g
 * (add/sub print their alpha only when it is not 1: alpha=2). Call-outs name their
 * target first: call_hook(hooks[k], x), retain_grad(retain=k, x), accumulate_grad(leaf=k,
 * x), post_accumulate_hook(hooks[k], leaf=j). OUTPUT nodes print no line of their own:
 * "return [...]" lists their inputs by output number. A size expression prints with
 * Python operators, operands of + and * ordered by id: s0*s1, s0+1, s0//2, s1*(s0+1).
 */
char *cai_graph_print(const graph *g, bool verbose, const int64_t *slots);
void cai_graph_free_string(char *s);

/* ---------------------------------------------------------------------------------------
 * Memory plan and run
 *
 * The plan assigns every value that needs memory (not inputs, not views) to a buffer,
 * reusing a buffer once its last reader has run (liveness over the node order). Buffer
 * sizes are size expressions, so for given slot values the arena's size and each
 * buffer's offset are computed without allocating. One arena per cache entry, owned by
 * the caller: a steady-state run allocates nothing.
 *
 * (Clarifications:) RESHAPE and CONTIGUOUS are views when the input's strides allow (as
 * the eager ops), decided per run; the plan gives them a buffer used only for a copy. A
 * plan's run scratch lives in the plan: one run at a time per plan. cai_kern_reduce may still
 * take scratch memory for a very long reduction into few outputs (its split path).
 */
typedef struct graph_plan graph_plan;

typedef struct {
    void *data; /* element (0, ..., 0) */
    kern_dtype dtype;
    int ndim;
    int64_t shape[KERN_MAX_DIMS];
    int64_t strides[KERN_MAX_DIMS]; /* elements */
} graph_view;

/* The same, and when verbose with inputs (one view per GOP_INPUT), each input's type also
 * shows its strides this run: getitem_1: "f32[s0, 784][784, 1]" = inputs[1]. */
char *cai_graph_print_inputs(const graph *g, bool verbose, const int64_t *slots,
                             const graph_view *inputs);

typedef struct {
    /* HOOK, RETAIN, ACCUMULATE, POST_HOOK, OUTPUT and the CALLOUT nodes call this with the
     * node and its input's view. A HOOK may set *replacement to a view of the same shape and
     * dtype (the caller keeps its memory alive until the run ends); the run uses it from then
     * on. A CALLOUT_RESULT (in is NULL) must set *replacement to its value: a view of the
     * node's dtype and shape, alive until the run ends. CALLOUT's in is NULL too. Return 0, or
     * nonzero to stop the run (the caller has set its own error). (Clarifications:) replacement is
     * NULL for every node but HOOK, and in is NULL for POST_HOOK (the leaf is the caller's). A view
     * passed in is valid during the call; OUTPUT values stay valid after the run until the arena is
     * reused. call may be NULL (no callbacks: hooks pass their input through). */
    int (*call)(void *ctx, const graph_node *n, const graph_view *in, graph_view *replacement);
    void *ctx;
    /* (Addition.) Optional (may be NULL): where a GEMM whose only reader is an ACCUMULATE
     * node may write its result. The runner calls it when it reaches that GEMM, with the
     * ACCUMULATE node and the value's dtype and shape (value->data is NULL). Set *dst to the
     * leaf's .grad (allocating it when unset: *has_grad false, its contents are then
     * overwritten) and *has_grad to whether it already held a gradient (then the GEMM adds
     * to it, beta = 1). The runner writes dst itself and skips that ACCUMULATE node's call.
     * Leave dst->data NULL to decline (the ordinary call runs). If dst cannot be written
     * as is (another dtype or shape, a non-contiguous .grad, memory a GEMM operand reads),
     * the ordinary call runs after all when *has_grad is true; a .grad it allocated must
     * therefore be contiguous, of the value's dtype and shape. Return 0, or nonzero to stop
     * the run, as for call. The callback bumps .grad's version counter when *has_grad. */
    int (*accumulate_target)(void *ctx, const graph_node *acc, const graph_view *value,
                             graph_view *dst, bool *has_grad);
    /* Optional: called once after each accumulate_target that returned 0 with dst set, when
     * the runner is done writing dst (or gave up on it), on the same thread. The autograd
     * layer holds the leaf's lock from the one call to the other. */
    void (*accumulate_done)(void *ctx, const graph_node *acc);
} graph_callbacks;

/* Plan g (after its passes), or NULL when out of memory. The plan keeps a pointer to g. */
graph_plan *cai_graph_plan_new(const graph *g);
void cai_graph_plan_free(graph_plan *p);
/* Bytes of arena the plan needs for these slot values (64-byte aligned buffers). */
size_t cai_graph_plan_arena_bytes(graph_plan *p, const int64_t *slots);
/* Run the plan: inputs[k] is GOP_INPUT k's view; arena has at least
 * cai_graph_plan_arena_bytes bytes, 64-byte aligned. Returns 0, the callback's nonzero value,
 * or -1 for a kernel error (e.g. an index out of range; message via cai_graph_plan_error). */
int cai_graph_plan_run(graph_plan *p, const int64_t *slots, const graph_view *inputs, void *arena,
                       graph_callbacks cb);
const char *cai_graph_plan_error(const graph_plan *p);
/* Whether the last run went side by side on the pool (inter-op parallelism, plan_parallel.c)
 * rather than one step at a time. */
bool cai_graph_plan_ran_side_by_side(const graph_plan *p);
#define PLAN_TUNE_RUNS 8 /* timed runs each way before the chooser picks */
/* ...unless, after this many runs each way, side by side's best run is over this many
 * percent of in order's best: then in order, at once (plan_parallel.c) */
#define PLAN_TUNE_GIVE_UP_RUNS 2
#define PLAN_TUNE_GIVE_UP_PCT  125
/* Whether the last run went in order because a GEMM of the plan, at its sizes, goes whole
 * to OpenBLAS's threads across the pool, which steps side by side would hold (and which
 * they could not run with the same bits). (plan_parallel.c) */
bool cai_graph_plan_in_order_for_blas(const graph_plan *p);
/* What the chooser's verdict rests on: the run times that decided it, in ns (the second
 * fastest of its timed runs each way; the fastest where it gave side by side up early, as
 * its best run fell PLAN_TUNE_GIVE_UP_PCT behind), and how many runs it timed each way. */
typedef struct {
    int64_t in_order_ns, side_ns;
    int runs_each;
    bool gave_up;
} plan_verdict;
/* The chooser's verdict (plan_parallel.c): 1 side by side, 0 in order, -1 not made yet
 * (*v then untouched). */
int cai_graph_plan_verdict(const graph_plan *p, plan_verdict *v);
/* The same run, writing each step's wall time in ns into step_ns (one entry per graph node;
 * NULL: none). (plan_run.c) */
int cai_graph_plan_run_timed(graph_plan *p, const int64_t *slots, const graph_view *inputs,
                             void *arena, graph_callbacks cb, int64_t *step_ns);
/* The work and span of a timed run (plan_profile.c): work sums the steps' times (the
 * backward's time on one thread); span is the longest chain of steps that depend on each
 * other through values (a fused group counts at the step where it runs) or through the
 * order of user-visible side effects (hooks, call-outs, retain_grad): its time on
 * unlimited threads, buffer reuse aside. *steps: the steps that did work. */
void cai_graph_plan_work_span(const graph_plan *p, const int64_t *step_ns, int64_t *work,
                              int64_t *span, int *steps);

/* ---------------------------------------------------------------------------------------
 * Graphviz DOT (dot.c). (Addition.)
 *
 * The graph as a DOT digraph: one node per live IR node, labelled like the printer
 * ("aot0_matmul\nmatmul ta=1\nf32[s0, 784]": value name, op and attributes, dtype and
 * symbolic shape), inputs as boxes, side effects (call_hook, retain_grad, accumulate_grad,
 * post_accumulate_hook, output) as octagons, and an edge from each input to its users.
 * The nodes of each origin sit in a light cluster "Name (NodeCall i)"; fused groups
 * (cai_graph_node_group) are clusters "cluster_fused_<k>", inside their origin's cluster when
 * all their nodes share it. Returns a string from the graph's allocator (free with
 * cai_graph_free_string), or NULL when out of memory.
 */
char *cai_graph_dot(const graph *g);

/* ---------------------------------------------------------------------------------------
 * Fusion (fuse.c). (Addition.)
 *
 * cai_graph_fuse groups pointwise nodes (GOP_PW) of one dtype and one output shape (their
 * inputs may broadcast into it) into fused loop kernels, run by the fused-loop interpreter
 * (codegen/fused.h): a group's members are computed tile by tile at the position of its
 * last member, and only the values read outside the group (its outputs, at most 8) are
 * written to memory. A group whose one output is read only by a GOP_SUM or GOP_SUM_TO
 * takes that reduction in (a fused reduce: the pointwise result is never materialised);
 * the group then runs at the reduction's position. Groups are greedy in node order;
 * hooks, GEMMs and every other op are barriers: a non-member reading a member's value
 * closes the group, and no group spans a side-effect node, so callbacks see exactly what
 * the unfused run shows them. At most 16 inputs and 64 instructions per group. A group of
 * one node without a reduction is not fused. cai_graph_print ends each member's line (and a
 * fused reduction's) with "  # fused k".
 *
 * Run it last, after DCE, CSE and simplification, just before cai_graph_plan_new. Returns 0,
 * or -1 when out of memory (message in cai_graph_error; the graph is left unfused and
 * valid). The plan validates each group and runs one it cannot honour op by op, so later
 * edits cannot make a run wrong.
 */
int cai_graph_fuse(graph *g);
/* Fused kernels (groups) of the graph's live nodes. */
int cai_graph_count_fused(const graph *g);
/* The fused group of a live node (0, 1, ...), or -1. A fused reduce's SUM / SUM_TO node
 * belongs to its producers' group. */
int cai_graph_node_group(const graph *g, graph_val v);

/* ---------------------------------------------------------------------------------------
 * Algebraic simplification (simplify.c). (Addition.)
 *
 * Rewrites that keep every value, run after DCE and CSE (then DCE again, before fusion):
 *  - transposes fold into GEMM flags: matmul(permute(x, swap of the last two dims)) is
 *    matmul(x) with the operand's flag toggled; a reshape or unsqueeze that only adds or
 *    removes leading 1s, or an expand of batch dims only, is dropped in front of a matmul
 *    operand when the matmul's shape stays the same; a contiguous in front of one too;
 *  - expand followed by sum cancels: sum / sum_to over dims an expand broadcast becomes a
 *    multiply by the product of those sizes (mul_s for constants, scale_size with i[0] = 1
 *    for symbols), reshaped and expanded to the result; a sum over nothing or over dims of
 *    size 1 is the value, or a reshape of it;
 *  - identities drop: mul_s by 1, div_s by 1, add_s / sub_s of 0, copy, x + 0 and x * 1
 *    with a fill, reshape / expand / sum_to to the same shape, identity permutes, cast to
 *    the same dtype, contiguous of a value known contiguous; chains of views fold
 *    (permute of permute, expand of expand or of a leading unsqueeze, reshape of reshape,
 *    unsqueeze or contiguous).
 * A replaced node is marked dead with alias set (as CSE does) and its readers use the
 * replacement; new nodes take the origin of the node they replace and its place in the
 * order, so the printed comments stay right. Accumulation into GEMM beta is the plan's
 * (see graph_callbacks.accumulate_target). Returns the number of rewrites, or -1 when out
 * of memory (the graph is then unchanged and valid).
 */
int cai_graph_simplify(graph *g);

#endif /* CAGRAD_GRAPH_H */
