/* internal.h - what the graph/ source files share and no other layer may use: the layer's
 * allocator, raw access to size expressions and nodes, error recording, shape inference,
 * small shape and op facts, the text helpers of the printer and the DOT writer, and the
 * memory plan's data, shared by the plan_*.c files.
 *
 * graph.h is the contract the autograd layer and the tests build on; this header is
 * graph/'s own (white-box tests may include it too). (Addition.)
 */
#ifndef CAGRAD_GRAPH_INTERNAL_H
#define CAGRAD_GRAPH_INTERNAL_H

#include "codegen/ca_assert.h"
#include "codegen/fused.h"
#include "graph/graph.h"
#include "graph/shape_rules.h"

#include <pthread.h>

/* ---------------------------------------------------------------------------------------
 * Memory, raw access and errors (ir.c)
 */
void *cai_graph_mem_alloc(size_t nbytes); /* the layer's allocator; NULL when out of memory */
void cai_graph_mem_free(void *p);
/* Expressions in the table. Ids run 0..count-1 and operands always precede their users,
 * so one pass in id order evaluates every expression. */
int cai_graph_sx_count(const graph *g);
/* Kind and operands of s: CONST a = value; SLOT a = slot; ops a, b = operand ids. */
graph_sx_kind cai_graph_sx_get(const graph *g, graph_sx s, int64_t *a, int64_t *b);
/* True when s is the constant v. */
bool cai_graph_sx_is(const graph *g, graph_sx s, int64_t v);
graph_node *cai_graph_node_mut(graph *g, graph_val v);
/* v, or the node CSE or simplification replaced it with, following aliases to the end. */
graph_val cai_graph_resolve(const graph *g, graph_val v);
/* Record an error message for cai_graph_error; returns -1. */
int cai_graph_fail_nomem(graph *g, const char *what);
int cai_graph_fail(graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---------------------------------------------------------------------------------------
 * Shapes and op facts
 */
/* Check and canonicalise n->a and infer n's dtype, rank and shape (shape.c); -1 on error. */
int cai_graph_infer(graph *g, graph_node *n);
/* The same rank and the same expression ids dim by dim (so provably equal). (shape.c) */
bool cai_graph_same_shape(int na, const graph_sx *a, int nb, const graph_sx *b);
/* "[s0, 10]" into buf; returns buf. */
const char *cai_graph_shape_str(const graph *g, int n, const graph_sx *shape, char *buf,
                                size_t size);
/* Facts from an op's GRAPH_OPS row (graph.h): its inputs (-1 for PW: the kernel op's
 * arity), how many of i[0..3] it reads, whether it reads the shape attribute, whether it
 * is a side effect (HOOK, RETAIN, ACCUMULATE, POST_HOOK, OUTPUT) and whether it makes a
 * value (all but RETAIN, ACCUMULATE, POST_HOOK, OUTPUT). (ir.c) */
int cai_graph_op_n_in(graph_op op);
int cai_graph_op_n_ints(graph_op op);
bool cai_graph_op_uses_shape(graph_op op);
bool cai_graph_op_is_side_effect(graph_op op);
bool cai_graph_op_has_value(graph_op op);

/* ---------------------------------------------------------------------------------------
 * Text shared by the printer (print.c) and the DOT writer (dot.c), so that a box of the
 * picture and a line of the log name a value the same way (text.c)
 */
/* A growable string on the layer's allocator. Start it as {.first_cap = n} (n > 0: the
 * first allocation's size). Once an allocation fails, oom is set and writes are dropped. */
typedef struct {
    char *s;
    size_t len, cap, first_cap;
    bool oom;
} graph_sbuf;

void cai_graph_sb_printf(graph_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "[s0, 10]" */
void cai_graph_sb_shape(graph_sbuf *b, const graph *g, int n, const graph_sx *shape);
/* The dims set in a GOP_SUM mask, "[0, 2]". */
void cai_graph_sb_dim_mask(graph_sbuf *b, int64_t mask);
/* A permutation, "[1, 0]". */
void cai_graph_sb_perm(graph_sbuf *b, int n, const int8_t *perm);
/* A GOP_PW node's parameters, each after sep: add and sub show only an alpha that is not 1
 * ("alpha=2"), other ops every parameter they read, with %g. */
void cai_graph_sb_pw_params(graph_sbuf *b, const graph_node *x, const char *sep);

/* "f32", "f64", "i64" ("?" for anything else). */
const char *cai_graph_dtype_short(kern_dtype dt);
/* Same NodeCall id and the same name (by text; both NULL counts as the same). */
bool cai_graph_same_origin(const graph_origin *a, const graph_origin *b);

#define GRAPH_NAME_MAX 64
typedef char graph_name[GRAPH_NAME_MAX];
/* The op's printed name: cai_graph_op_name, or cai_kern_pw_name in lower case for GOP_PW. */
void cai_graph_node_op_name(const graph_node *x, graph_name buf);
/* A name per node, from the layer's allocator (free with cai_graph_mem_free), or NULL when out
 * of memory. Every live node that makes a value is named by its op, prefixed aot{k}_ by
 * its forward graph (inputs never are) and suffixed _1, _2 ... when that name was used
 * before; the others get "". */
graph_name *cai_graph_value_names(const graph *g);

/* ---------------------------------------------------------------------------------------
 * The memory plan and its runner, one concern a file: plan.c (buffer kinds, liveness,
 * buffer reuse, the plan's one block), plan_fused.c (fused groups' programs), plan_eval.c
 * (size evaluation and the arena's layout), plan_run.c (the run). A node's plan kind:
 */
enum { PK_SKIP, PK_INPUT, PK_VIEW, PK_MAYBE_VIEW, PK_BUFFER, PK_HOOK, PK_CALL, PK_RESULT };
/* Members of a fused group (fuse.c): a value only its group reads (no memory), a value
 * read outside (a buffer), and the node where the whole group runs (the last member or
 * the reduction it ends in; a buffer). */
enum { PK_FUSED_TMP = PK_RESULT + 1, PK_FUSED_OUT, PK_FUSED_RUN };

#define PLAN_N_TMP 3 /* temporaries per node: operand copies, scatter_add's block */

typedef struct {
    int8_t kind;
    int32_t buf;             /* the value's buffer, or -1 */
    int32_t tmp[PLAN_N_TMP]; /* temporaries, or -1 */
    int32_t grp;             /* the fused group it belongs to (fused kinds only), or -1 */
    int32_t fold;            /* GEMM <-> the ACCUMULATE whose .grad it may write (find_folds), -1 */
    bool folded;             /* run scratch, on that ACCUMULATE: the GEMM wrote .grad this run */
} plan_node;

/* A fused group as the plan runs it: one interpreter program over the members' space. */
typedef struct {
    bool ok;               /* false: its members run op by op */
    graph_val first;       /* the first member: dtype and shape of the index space */
    graph_val anchor;      /* where it runs */
    graph_val reduce;      /* the SUM / SUM_TO it ends in, or -1 */
    int se_first, se_last; /* side effects before the first member and before the anchor */
    int n_members, n_out;
    graph_val member[KERN_FUSED_MAX_INSTR];
    graph_val in[KERN_FUSED_MAX_INPUTS];   /* input registers' values */
    graph_val out[KERN_FUSED_MAX_OUTPUTS]; /* members written to their buffers */
    kern_fused_prog prog;
    kern_fused_memo *memo; /* the loop's plan, kept from run to run (run scratch) */
} plan_group;

/* A buffer's size: cbytes times the product of the symbolic factors (sorted ids). */
typedef struct {
    bool temp; /* a step's temporary: never shares memory with a value */
    int64_t cbytes;
    int nsym;
    graph_sx sym[KERN_MAX_DIMS];
} plan_buf;

/* One size expression, for the evaluation pass (plan_eval.c). */
typedef struct {
    int8_t kind;
    int32_t a, b; /* operand ids */
    int64_t c;    /* constant value or slot number */
} sx_step;

/* The steps' dependency DAG for running them side by side (plan_dag.c): step v may start
 * once every step in its predecessors has finished. Steps are the nodes that run
 * something (not SKIP, INPUT or fused members). A dependency is a value read (a fused
 * member's readers wait for its group's anchor), a buffer reused (the next value in a
 * buffer waits for every reader of the previous one), or the order of the steps that must
 * run on the caller's thread in graph order (hooks, call-outs, a GEMM that writes .grad). */
typedef struct plan_dag {
    int n_steps;
    int32_t *step;     /* the steps, in graph order */
    int32_t *n_pred;   /* per node: predecessors (steps only) */
    int32_t *succ_off; /* per node: its successors are succ[succ_off[v] .. succ_off[v + 1]) */
    int32_t *succ;
    bool *on_caller; /* per node: must run on the caller's thread */
    /* run scratch, per node: the longest path from it, predecessors not yet finished, the
     * ready heap and the caller's queue */
    int64_t *prio;
    int32_t *pending, *heap, *caller_q;
} plan_dag;

/* Build the DAG; NULL when out of memory or when some step would have to wait for a
 * later one (the plan then always runs in order). Free with cai_graph_plan_dag_free. */
plan_dag *cai_graph_plan_dag_new(const graph_plan *p);
void cai_graph_plan_dag_free(plan_dag *d);

/* One thread's view of a run (plan_run.c, plan_parallel.c). */
typedef struct {
    graph_plan *p;
    char *arena;
    const graph_callbacks *cb;
    graph_val step;          /* the node being run: every value it reads was made before it */
    char *scratch;           /* this thread's region for the fused loops' scratch */
    pthread_mutex_t *tmp_mu; /* steps side by side: the temporaries' lock; NULL in order */
    bool holds_tmp;          /* this thread's step holds it */
} plan_run_ctx;

/* Shape inference's helpers (shape.c), shared with shape_ops.c: the size algebra as the
 * rules' cai_sizes, a rule's error as the graph's (-1), shapes between graph_sx and
 * int64_t, input k's node, the output's dtype and shape, the shape attribute's check, and
 * names for messages (cai_shape_str writes into GRAPH_SHAPE_STR bytes). */
#define GRAPH_SHAPE_STR 160
cai_sizes cai_shape_sizes(graph *g);
int cai_shape_rule_fail(graph *g, const cai_rule_error *e);
void cai_shape_to64(int n, const graph_sx *s, int64_t *out);
void cai_shape_to_sx(int n, const int64_t *s, graph_sx *out);
const graph_node *cai_shape_in(const graph *g, const graph_node *n, int k);
void cai_shape_set_out(graph_node *n, kern_dtype dt, int ndim, const graph_sx *shape);
void cai_shape_copy_out(graph_node *n, const graph_node *in);
int cai_shape_check_attr(graph *g, const graph_op_args *a, bool allow_infer);
const char *cai_shape_dtype_name(kern_dtype dt);
const char *cai_shape_str(const graph *g, const graph_node *n, char *buf);

/* shape_ops.c: inference of the index, scatter, nll, scan and convolution ops; 0 or -1. */
int cai_shape_infer_index_add(graph *g, graph_node *n);
int cai_shape_infer_scatter_add(graph *g, graph_node *n);
int cai_shape_infer_index_select(graph *g, graph_node *n);
int cai_shape_infer_tri(graph *g, graph_node *n);
int cai_shape_infer_cumprod(graph *g, graph_node *n);
int cai_shape_infer_gather(graph *g, graph_node *n);
int cai_shape_infer_scale_size(graph *g, graph_node *n);
int cai_shape_infer_nll_bw(graph *g, graph_node *n);
int cai_shape_infer_index_fill(graph *g, graph_node *n);
int cai_shape_infer_cumsum(graph *g, graph_node *n);
int cai_shape_infer_cumprod_bw(graph *g, graph_node *n);
int cai_shape_infer_conv(graph *g, graph_node *n);
int cai_shape_infer_conv2d(graph *g, graph_node *n);

/* The runner's helpers (plan_run.c), shared with plan_run_ops.c. cai_run_fail records
 * "value v (op): message" for cai_graph_plan_error (the first of steps failing side by
 * side stays) and returns -1; cai_run_kern_fail words a kernel's code (-2: out of
 * memory). cai_run_in is input k's view; cai_run_tmp a temporary buffer, about to be
 * written (steps side by side take the temporaries' lock). cai_run_view_str writes
 * "f32[2, 3]" into buf (96 bytes or more). */
int cai_run_fail(graph_plan *p, graph_val v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int cai_run_kern_fail(graph_plan *p, graph_val v, int rc, const char *what);
const graph_view *cai_run_in(const plan_run_ctx *r, const graph_node *x, int k);
void *cai_run_tmp(plan_run_ctx *r, int32_t tmp);
int64_t cai_run_numel(const graph_view *v);
bool cai_run_is_contig(const graph_view *v);
void cai_run_contig_strides(int nd, const int64_t *shape, int64_t *strides);
int cai_run_copy_strided(void *dst, const int64_t *dst_strides, const graph_view *src);
int cai_run_copy_contig(void *dst, const graph_view *src, graph_view *out);
int cai_run_fill_zero(const graph_view *out);
const char *cai_run_view_str(kern_dtype dt, int nd, const int64_t *shape, char *buf);
bool cai_run_view_matches(const graph_view *v, kern_dtype dt, int nd, const int64_t *shape);

/* The runners of plan_run_ops.c: one node into its buffer out; 0 or -1 (the failure
 * recorded). */
int cai_run_index_add(plan_run_ctx *r, graph_val v, const graph_node *x, const graph_view *out);
int cai_run_scatter_add(plan_run_ctx *r, graph_val v, const graph_node *x, const graph_view *out);
int cai_run_index_select(plan_run_ctx *r, graph_val v, const graph_node *x, const graph_view *out);
int cai_run_gather(plan_run_ctx *r, graph_val v, const graph_node *x, const graph_view *out);
int cai_run_tri(plan_run_ctx *r, graph_val v, const graph_node *x, const graph_view *out);
int cai_run_cumprod(plan_run_ctx *r, graph_val v, const graph_node *x, const graph_view *out);
int cai_run_index_fill(plan_run_ctx *r, graph_val v, const graph_node *x, const graph_view *out);
int cai_run_cumsum(plan_run_ctx *r, graph_val v, const graph_node *x, const graph_view *out);
int cai_run_cumprod_bw(plan_run_ctx *r, graph_val v, const graph_node *x, const graph_view *out);
int cai_run_conv(plan_run_ctx *r, graph_val v, const graph_node *x, const graph_view *out);
int cai_run_conv2d(plan_run_ctx *r, graph_val v, const graph_node *x, const graph_view *out);
int cai_run_nll_bw(plan_run_ctx *r, graph_val v, const graph_node *x, const graph_view *out);

/* Run one step (any plan kind but INPUT); 0 or the failure's code. (plan_run.c) */
int cai_graph_plan_run_step(plan_run_ctx *r, graph_val v);
/* Run the steps side by side on the kernel pool (plan_parallel.c), inputs bound already:
 * 0 or the first failure's code. *ran is false when nothing ran (one thread, the pool
 * busy, no memory, or a plan without a DAG): run it in order then. */
int cai_graph_plan_run_parallel(graph_plan *p, char *arena, const graph_callbacks *cb, bool *ran);
/* Whether this run should go side by side: never where cai_graph_plan_check_blas found a
 * GEMM for OpenBLAS's threads; else CAGRAD_INTEROP=0/1 forces it, or the plan times both
 * ways on its first runs and keeps the faster (plan_parallel.c). */
bool cai_graph_plan_pick_parallel(graph_plan *p);
/* Whether this run's sizes give the plan a GEMM that OpenBLAS threads across the whole
 * pool (p->blas_in_order, which keeps the run in order); after cai_graph_plan_eval_sizes.
 * (plan_parallel.c) */
void cai_graph_plan_check_blas(graph_plan *p);
/* Report a run's wall time to the chooser. */
void cai_graph_plan_note_time(graph_plan *p, bool parallel, int64_t ns);
/* The chooser's pick: -1 not yet, 0 in order, 1 side by side. */
int cai_graph_plan_choice(const graph_plan *p);
/* Runs made side by side in this process (tests count them). */
uint64_t cai_graph_plan_parallel_runs(void);

struct graph_plan {
    const graph *g;
    int n_nodes, n_sx, n_bufs, n_groups;
    plan_node *nodes;
    plan_buf *bufs;
    plan_group *groups;
    int64_t scratch_off;  /* run scratch: where the fused loops' scratch starts */
    size_t scratch_bytes; /* run scratch: its size */
    /* The fused loops' scratch for the last slot values and thread count: working it out
     * plans every group, so a steady state (same sizes each run) does it once. */
    int n_slots;
    int64_t *memo_slots;
    int memo_threads; /* 0: nothing memoised yet */
    size_t memo_scratch;
    char *memos; /* run scratch: one kern_fused_memo per group (plan.c lays them out) */
    sx_step *prog;
    int64_t *val;      /* run scratch: every expression's value */
    int64_t *offset;   /* run scratch: each buffer's byte offset */
    graph_view *views; /* run scratch: each node's value */
    plan_dag *dag;     /* built at the first parallel run */
    /* The side-by-side chooser: runs timed each way, for this thread count */
    int tune_threads, tune_n[2];
    int64_t tune_ns[2][PLAN_TUNE_RUNS];
    int8_t tune_pick;       /* -1 undecided, 0 one step at a time, 1 side by side */
    bool tune_gave_up;      /* picked in order early: side by side's best run far behind */
    bool last_side_by_side; /* how the last run went */
    bool blas_in_order;     /* the last run's sizes gave it a GEMM for OpenBLAS's threads
                               (cai_graph_plan_check_blas) */
    char err[256];
};

/* Check the groups cai_graph_fuse marked, build each one's program, and give its members
 * their kinds in nodes (n of them). idx is scratch of n entries. (plan_fused.c) */
void cai_graph_plan_fused(const graph *g, int n, plan_node *nodes, plan_group *groups, int n_groups,
                          int32_t *idx);
/* Turn the graph's size expressions into p->prog, for cai_graph_plan_eval_sizes. (plan_eval.c) */
void cai_graph_plan_compile_sizes(graph_plan *p);
/* For these slot values: every expression's value (p->val), each buffer's offset in the
 * arena (p->offset), and where the fused loops' scratch lies in it. (plan_eval.c) */
void cai_graph_plan_eval_sizes(graph_plan *p, const int64_t *slots);
/* The reduced dims of a sum_to from in_shape to out_shape, as a cai_kern_reduce mask: the
 * input's extra leading dims, and dims where the target is 1 but the input is not. */
uint32_t cai_graph_sum_to_mask(int in_nd, const int64_t *in_shape, int out_nd,
                               const int64_t *out_shape);

#endif /* CAGRAD_GRAPH_INTERNAL_H */
