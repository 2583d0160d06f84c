/* test_graph_fuse.c - the fusion pass (graph/fuse.c) and the runner's fused loops
 * (graph/plan_fused.c, graph/plan_run.c).
 *
 * Graphs are built by hand. Grouping decisions are read back with cai_graph_node_group and
 * cai_graph_count_fused; values are checked by running the same graph planned before and
 * after the pass: a fused run runs the same row kernels (and reduction tree) as the
 * op-by-op run, so every output must be equal bit for bit.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kern.h"
#include "graph/internal.h"

/* ------------------------------------------------------------------ building */

static const graph_origin TF_NONE = {-1, NULL, -1};

static graph_val tf_add_o(graph *g, graph_op_args a, graph_origin o) {
    graph_val v = cai_graph_add(g, &a, o);
    cr_assert(v >= 0, "cai_graph_add failed: %s", cai_graph_error(g));
    return v;
}

static graph_val tf_add(graph *g, graph_op_args a) {
    return tf_add_o(g, a, TF_NONE);
}

static graph_val tf_input(graph *g, int k, kern_dtype dt, int n, const graph_sx *shape) {
    graph_op_args a = {.op = GOP_INPUT, .i = {k}, .dtype = dt, .n_shape = n};
    for (int d = 0; d < n; d++)
        a.shape[d] = shape[d];
    return tf_add(g, a);
}

static graph_val tf_pw(graph *g, kern_pw_op op, graph_val x, graph_val y, graph_val z, double p0) {
    int n = cai_kern_pw_arity(op);
    return tf_add(g,
                  (graph_op_args){.op = GOP_PW, .n_in = n, .in = {x, y, z}, .i = {op}, .p = {p0}});
}

static graph_val tf_un(graph *g, kern_pw_op op, graph_val x) {
    return tf_pw(g, op, x, -1, -1, 0.5);
}

static graph_val tf_bin(graph *g, kern_pw_op op, graph_val x, graph_val y) {
    return tf_pw(g, op, x, y, -1, 1.0);
}

static graph_val tf_call(graph *g, graph_op op, graph_val x, int64_t k) {
    return tf_add(g, (graph_op_args){.op = op, .n_in = 1, .in = {x}, .i = {k}});
}

static graph_val tf_sum(graph *g, graph_val x, int64_t mask, int64_t keepdim) {
    return tf_add(g, (graph_op_args){.op = GOP_SUM, .n_in = 1, .in = {x}, .i = {mask, keepdim}});
}

static graph_val tf_shape_op(graph *g, graph_op op, graph_val x, int n, const graph_sx *shape) {
    graph_op_args a = {.op = op, .n_in = 1, .in = {x}, .n_shape = n};
    for (int d = 0; d < n; d++)
        a.shape[d] = shape[d];
    return tf_add(g, a);
}

static graph_val tf_matmul(graph *g, graph_val a, graph_val b) {
    return tf_add(g, (graph_op_args){.op = GOP_MATMUL, .n_in = 2, .in = {a, b}});
}

static int tf_group(const graph *g, graph_val v) {
    return cai_graph_node_group(g, v);
}

/* ------------------------------------------------------------------ data and runs */

static uint64_t tf_rng = 777;

static double tf_rand(void) {
    uint64_t z = (tf_rng += 0x9E3779B97F4A7C15ull); /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-53 * 2.0 - 1.0;
}

#define TF_MAX_IN  24
#define TF_MAX_OUT 16

/* The graph's inputs: one buffer per GOP_INPUT, filled with values in [-1.5, 1.5]. */
typedef struct {
    int n;
    graph_view in[TF_MAX_IN];
    void *mem[TF_MAX_IN];
} tf_inputs;

static void tf_make_inputs(const graph *g, const int64_t *slots, tf_inputs *ti) {
    memset(ti, 0, sizeof *ti);
    for (graph_val v = 0; v < cai_graph_count(g); v++) {
        const graph_node *x = cai_graph_node_at(g, v);
        if (x->a.op != GOP_INPUT)
            continue;
        int k = (int)x->a.i[0];
        cr_assert_lt(k, TF_MAX_IN);
        graph_view *w = &ti->in[k];
        w->dtype = x->dtype;
        w->ndim = x->ndim;
        cai_graph_eval_shape(g, v, slots, w->shape);
        int64_t n = 1;
        for (int d = x->ndim - 1; d >= 0; d--) {
            w->strides[d] = n;
            n *= w->shape[d];
        }
        void *m = malloc((size_t)(n > 0 ? n : 1) * 8);
        for (int64_t i = 0; i < n; i++) {
            double r = 1.5 * tf_rand();
            if (x->dtype == KERN_F32)
                ((float *)m)[i] = (float)r;
            else if (x->dtype == KERN_F64)
                ((double *)m)[i] = r;
            else
                ((int64_t *)m)[i] = r > 0;
        }
        w->data = m;
        ti->mem[k] = m;
        ti->n = k + 1 > ti->n ? k + 1 : ti->n;
    }
}

static void tf_free_inputs(tf_inputs *ti) {
    for (int k = 0; k < TF_MAX_IN; k++)
        free(ti->mem[k]);
}

/* What the callbacks saw: each OUTPUT and ACCUMULATE value's bytes, row-major. */
typedef struct {
    char *out[TF_MAX_OUT], *acc[TF_MAX_OUT];
    int64_t out_bytes[TF_MAX_OUT], acc_bytes[TF_MAX_OUT];
    int calls;
} tf_rec;

static char *tf_bytes(const graph_view *v, int64_t *nbytes) {
    int64_t n = 1, es = v->dtype == KERN_F32 ? 4 : 8;
    for (int d = 0; d < v->ndim; d++)
        n *= v->shape[d];
    char *b = malloc((size_t)(n * es + 1));
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0, r = i;
        for (int d = v->ndim - 1; d >= 0; d--) {
            off += (r % v->shape[d]) * v->strides[d];
            r /= v->shape[d];
        }
        memcpy(b + i * es, (const char *)v->data + off * es, (size_t)es);
    }
    *nbytes = n * es;
    return b;
}

static int tf_cb(void *ctx, const graph_node *n, const graph_view *in, graph_view *repl) {
    tf_rec *r = ctx;
    (void)repl;
    r->calls++;
    int k = (int)n->a.i[0];
    if (n->a.op == GOP_OUTPUT && k < TF_MAX_OUT && !r->out[k])
        r->out[k] = tf_bytes(in, &r->out_bytes[k]);
    else if (n->a.op == GOP_ACCUMULATE && k < TF_MAX_OUT && !r->acc[k])
        r->acc[k] = tf_bytes(in, &r->acc_bytes[k]);
    return 0;
}

static void tf_free_rec(tf_rec *r) {
    for (int k = 0; k < TF_MAX_OUT; k++) {
        free(r->out[k]);
        free(r->acc[k]);
    }
}

static void tf_run(const graph *g, const int64_t *slots, const tf_inputs *ti, tf_rec *rec) {
    graph_plan *p = cai_graph_plan_new(g);
    cr_assert_not_null(p);
    size_t bytes = cai_graph_plan_arena_bytes(p, slots);
    void *arena = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    memset(rec, 0, sizeof *rec);
    int rc =
        cai_graph_plan_run(p, slots, ti->in, arena, (graph_callbacks){.call = tf_cb, .ctx = rec});
    cr_assert_eq(rc, 0, "run failed: %s", cai_graph_plan_error(p));
    free(arena);
    cai_graph_plan_free(p);
}

static void tf_same(const tf_rec *a, const tf_rec *b, const char *what) {
    cr_assert_eq(a->calls, b->calls, "%s: %d callbacks fused, %d unfused", what, a->calls,
                 b->calls);
    for (int k = 0; k < TF_MAX_OUT; k++) {
        cr_assert((a->out[k] == NULL) == (b->out[k] == NULL), "%s: output %d", what, k);
        cr_assert((a->acc[k] == NULL) == (b->acc[k] == NULL), "%s: leaf %d", what, k);
        if (a->out[k]) {
            cr_assert_eq(a->out_bytes[k], b->out_bytes[k]);
            cr_assert(memcmp(a->out[k], b->out[k], (size_t)a->out_bytes[k]) == 0,
                      "%s: output %d differs between the fused and the unfused run", what, k);
        }
        if (a->acc[k]) {
            cr_assert_eq(a->acc_bytes[k], b->acc_bytes[k]);
            cr_assert(memcmp(a->acc[k], b->acc[k], (size_t)a->acc_bytes[k]) == 0,
                      "%s: leaf %d differs between the fused and the unfused run", what, k);
        }
    }
}

/* Run g unfused, fuse it, run it again: the results must be equal bit for bit. Returns
 * the number of groups. */
static int tf_check_fused(graph *g, const int64_t *slots, const char *what) {
    tf_inputs ti;
    tf_make_inputs(g, slots, &ti);
    tf_rec plain, fused;
    tf_run(g, slots, &ti, &plain);
    cr_assert_eq(cai_graph_fuse(g), 0, "%s", cai_graph_error(g));
    tf_run(g, slots, &ti, &fused);
    tf_same(&fused, &plain, what);
    tf_free_rec(&plain);
    tf_free_rec(&fused);
    tf_free_inputs(&ti);
    return cai_graph_count_fused(g);
}

/* ------------------------------------------------------------------ grouping */

Test(cai_graph_fuse, chain_is_one_group) {
    graph *g = cai_graph_new();
    graph_sx s0 = cai_graph_sx_slot(g, 0), c10 = cai_graph_sx_const(g, 10);
    graph_val x = tf_input(g, 0, KERN_F32, 2, (graph_sx[]){s0, c10});
    graph_val y = tf_input(g, 1, KERN_F32, 1, (graph_sx[]){c10}); /* broadcast in */
    graph_val a = tf_bin(g, KPW_MUL, x, y);
    graph_val b = tf_un(g, KPW_TANH, a);
    graph_val c = tf_un(g, KPW_MUL_S, b);
    graph_val d = tf_bin(g, KPW_TANH_BW, c, x);
    tf_call(g, GOP_OUTPUT, d, 0);
    int64_t slots[] = {7};
    cr_assert_eq(tf_check_fused(g, slots, "chain"), 1);
    graph_val m[] = {a, b, c, d};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(tf_group(g, m[i]), 0, "member %d", i);
    cr_assert_eq(tf_group(g, x), -1);
    cr_assert_eq(tf_group(g, y), -1);
    cai_graph_free(g);
}

/* The arena's size is remembered between runs of the same sizes, but a new thread count
 * (each lane of a fused loop has its own workspace) or a new size still changes it. */
Test(cai_graph_fuse, arena_bytes_follow_the_sizes_and_the_thread_count) {
    graph *g = cai_graph_new();
    graph_sx s0 = cai_graph_sx_slot(g, 0), c10 = cai_graph_sx_const(g, 10);
    graph_val x = tf_input(g, 0, KERN_F32, 2, (graph_sx[]){s0, c10});
    graph_val b = tf_un(g, KPW_TANH, tf_un(g, KPW_EXP, x));
    tf_call(g, GOP_OUTPUT, tf_bin(g, KPW_MUL, b, x), 0);
    cr_assert_eq(cai_graph_fuse(g), 0, "%s", cai_graph_error(g));
    cr_assert_eq(cai_graph_count_fused(g), 1);
    graph_plan *p = cai_graph_plan_new(g);
    int64_t n = 4000, m = 8000; /* 40000 elements: enough for two lanes */
    cai_kern_set_num_threads(1);
    size_t one = cai_graph_plan_arena_bytes(p, &n);
    cr_assert_eq(cai_graph_plan_arena_bytes(p, &n), one, "the same sizes, the same arena");
    cai_kern_set_num_threads(2);
    size_t two = cai_graph_plan_arena_bytes(p, &n);
    cr_assert_gt(two, one, "a second lane needs its own workspace");
    cr_assert_gt(cai_graph_plan_arena_bytes(p, &m), two, "a bigger input needs bigger buffers");
    cr_assert_eq(cai_graph_plan_arena_bytes(p, &n), two, "and back again");
    cai_kern_set_num_threads(0);
    cai_graph_plan_free(p);
    cai_graph_free(g);
}

Test(cai_graph_fuse, value_read_outside_is_a_group_output) {
    graph *g = cai_graph_new();
    graph_sx c6 = cai_graph_sx_const(g, 6);
    graph_val x = tf_input(g, 0, KERN_F64, 1, (graph_sx[]){c6});
    graph_val a = tf_un(g, KPW_EXP, x);
    graph_val b = tf_un(g, KPW_NEG, a);
    graph_val c = tf_bin(g, KPW_MUL, a, b); /* a is read inside ... */
    graph_val d = tf_un(g, KPW_SIN, c);
    tf_call(g, GOP_OUTPUT, d, 0);
    tf_call(g, GOP_OUTPUT, a, 1); /* ... and outside: it is written, d too */
    tf_call(g, GOP_OUTPUT, a, 2);
    cr_assert_eq(tf_check_fused(g, NULL, "two outputs"), 1);
    graph_val m[] = {a, b, c, d};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(tf_group(g, m[i]), 0, "member %d", i);
    cai_graph_free(g);
}

Test(cai_graph_fuse, matmul_is_a_barrier) {
    graph *g = cai_graph_new();
    graph_sx c4 = cai_graph_sx_const(g, 4), c3 = cai_graph_sx_const(g, 3);
    graph_val x = tf_input(g, 0, KERN_F32, 2, (graph_sx[]){c4, c3});
    graph_val w = tf_input(g, 1, KERN_F32, 2, (graph_sx[]){c3, c3});
    graph_val a = tf_un(g, KPW_EXP, x);
    graph_val b = tf_un(g, KPW_TANH, a);
    graph_val m = tf_matmul(g, b, w); /* reads b: the group takes no more */
    graph_val c = tf_un(g, KPW_NEG, b);
    graph_val d = tf_bin(g, KPW_ADD, c, m);
    graph_val e = tf_un(g, KPW_SQUARE, d);
    tf_call(g, GOP_OUTPUT, e, 0);
    cr_assert_eq(tf_check_fused(g, NULL, "matmul"), 2);
    cr_assert_eq(tf_group(g, m), -1, "a GEMM is never fused");
    cr_assert_eq(tf_group(g, a), tf_group(g, b));
    cr_assert_eq(tf_group(g, c), tf_group(g, d));
    cr_assert_eq(tf_group(g, c), tf_group(g, e));
    cr_assert_neq(tf_group(g, a), tf_group(g, c), "a member read by the matmul closes the group");
    cai_graph_free(g);
}

Test(cai_graph_fuse, hooks_and_side_effects_are_barriers) {
    graph *g = cai_graph_new();
    graph_sx c5 = cai_graph_sx_const(g, 5);
    graph_val x = tf_input(g, 0, KERN_F32, 1, (graph_sx[]){c5});
    graph_val y = tf_input(g, 1, KERN_F32, 1, (graph_sx[]){c5});
    graph_val a = tf_un(g, KPW_EXP, x);
    graph_val a2 = tf_un(g, KPW_SIGMOID, a);
    graph_val h = tf_call(g, GOP_HOOK, a2, 0);
    graph_val b = tf_un(g, KPW_NEG, h);
    graph_val b2 = tf_un(g, KPW_COS, b);
    graph_val c = tf_un(g, KPW_ABS, y); /* independent of the hook's value ... */
    tf_call(g, GOP_RETAIN, b2, 0);
    graph_val d = tf_bin(g, KPW_MUL, c, y); /* ... but a retain_grad lies between c and d */
    graph_val e = tf_un(g, KPW_RELU, d);
    tf_call(g, GOP_ACCUMULATE, e, 0);
    tf_call(g, GOP_ACCUMULATE, b2, 1);
    cr_assert_eq(tf_check_fused(g, NULL, "hooks"), 3);
    cr_assert_eq(tf_group(g, h), -1);
    cr_assert_eq(tf_group(g, a), tf_group(g, a2));
    cr_assert_eq(tf_group(g, b), tf_group(g, b2));
    cr_assert_eq(tf_group(g, c), tf_group(g, b), "c joins the open group of the same space");
    cr_assert_neq(tf_group(g, a), tf_group(g, b), "nothing crosses the hook");
    cr_assert_eq(tf_group(g, d), tf_group(g, e));
    cr_assert_neq(tf_group(g, d), tf_group(g, c), "nothing crosses the retain_grad");
    cai_graph_free(g);
}

Test(cai_graph_fuse, dtype_and_shape_split_groups) {
    graph *g = cai_graph_new();
    graph_sx s0 = cai_graph_sx_slot(g, 0), c3 = cai_graph_sx_const(g, 3);
    graph_val x = tf_input(g, 0, KERN_F32, 2, (graph_sx[]){s0, c3});
    graph_val v = tf_input(g, 1, KERN_F32, 1, (graph_sx[]){c3});
    graph_val z = tf_input(g, 2, KERN_F64, 2, (graph_sx[]){s0, c3});
    graph_val a = tf_un(g, KPW_EXP, x);
    graph_val za = tf_un(g, KPW_EXP, z);    /* f64: another group */
    graph_val b = tf_bin(g, KPW_MUL, a, v); /* [3] broadcasts into [s0, 3]: joins a */
    graph_val zb = tf_un(g, KPW_TANH, za);
    graph_val va = tf_un(g, KPW_NEG, v); /* [3]: another space */
    graph_val vb = tf_un(g, KPW_SQRT, va);
    graph_val c = tf_bin(g, KPW_SUB, b, vb); /* reads the [3] group: joins a again */
    tf_call(g, GOP_OUTPUT, c, 0);
    tf_call(g, GOP_OUTPUT, zb, 1);
    int64_t slots[] = {5};
    cr_assert_eq(tf_check_fused(g, slots, "spaces"), 3);
    cr_assert_eq(tf_group(g, a), tf_group(g, b));
    cr_assert_eq(tf_group(g, a), tf_group(g, c));
    cr_assert_eq(tf_group(g, za), tf_group(g, zb));
    cr_assert_eq(tf_group(g, va), tf_group(g, vb));
    cr_assert_neq(tf_group(g, a), tf_group(g, za), "dtypes differ");
    cr_assert_neq(tf_group(g, a), tf_group(g, va), "shapes differ");
    cr_assert_neq(tf_group(g, za), tf_group(g, va));
    cai_graph_free(g);
}

Test(cai_graph_fuse, single_nodes_are_not_fused) {
    graph *g = cai_graph_new();
    graph_sx c4 = cai_graph_sx_const(g, 4), c2 = cai_graph_sx_const(g, 2);
    graph_val x = tf_input(g, 0, KERN_F32, 1, (graph_sx[]){c4});
    graph_val y = tf_input(g, 1, KERN_F32, 1, (graph_sx[]){c2});
    graph_val a = tf_un(g, KPW_EXP, x);
    graph_val b = tf_un(g, KPW_EXP, y);
    tf_call(g, GOP_OUTPUT, a, 0);
    tf_call(g, GOP_OUTPUT, b, 1);
    cr_assert_eq(tf_check_fused(g, NULL, "singles"), 0);
    cr_assert_eq(tf_group(g, a), -1);
    cr_assert_eq(tf_group(g, b), -1);
    cr_assert_eq(cai_graph_fuse(NULL), -1);
    cr_assert_eq(cai_graph_count_fused(NULL), 0);
    cr_assert_eq(cai_graph_node_group(g, -1), -1);
    cr_assert_eq(cai_graph_node_group(g, 1000), -1);
    cai_graph_free(g);
}

/* ------------------------------------------------------------------ limits */

Test(cai_graph_fuse, instruction_limit_splits) {
    graph *g = cai_graph_new();
    graph_sx c8 = cai_graph_sx_const(g, 8);
    graph_val x = tf_input(g, 0, KERN_F32, 1, (graph_sx[]){c8});
    graph_val v = x, m[100];
    for (int i = 0; i < 100; i++)
        v = m[i] = tf_pw(g, i % 2 ? KPW_MUL_S : KPW_ADD_S, v, -1, -1, i % 2 ? 0.99 : 0.01);
    tf_call(g, GOP_OUTPUT, v, 0);
    cr_assert_eq(tf_check_fused(g, NULL, "100 instructions"), 2);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(tf_group(g, m[i]), i < 64 ? 0 : 1, "node %d", i);
    cai_graph_free(g);
}

Test(cai_graph_fuse, input_limit_splits) {
    graph *g = cai_graph_new();
    graph_sx c8 = cai_graph_sx_const(g, 8);
    graph_val in[20], m[20];
    for (int k = 0; k < 20; k++)
        in[k] = tf_input(g, k, KERN_F64, 1, (graph_sx[]){c8});
    graph_val acc = tf_un(g, KPW_NEG, in[0]);
    for (int k = 1; k < 20; k++)
        acc = m[k] = tf_bin(g, KPW_ADD, acc, in[k]);
    tf_call(g, GOP_OUTPUT, acc, 0);
    cr_assert_eq(tf_check_fused(g, NULL, "20 inputs"), 2);
    for (int k = 1; k < 20; k++) /* the first group holds inputs 0..15 */
        cr_assert_eq(tf_group(g, m[k]), k < 16 ? 0 : 1, "add %d", k);
    cai_graph_free(g);
}

Test(cai_graph_fuse, output_limit_splits) {
    graph *g = cai_graph_new();
    graph_sx c8 = cai_graph_sx_const(g, 8);
    graph_val x = tf_input(g, 0, KERN_F32, 1, (graph_sx[]){c8});
    graph_val v = x, m[12];
    for (int k = 0; k < 12; k++) {
        v = m[k] = tf_pw(g, KPW_MUL_S, v, -1, -1, 1.0 + k / 16.0);
        tf_call(g, GOP_OUTPUT, v, k); /* every value is read outside */
    }
    cr_assert_eq(tf_check_fused(g, NULL, "12 outputs"), 0,
                 "outputs read by side effects between the members: no group spans them");
    cai_graph_free(g);

    g = cai_graph_new(); /* the same with the reads at the end: 8 outputs per group */
    c8 = cai_graph_sx_const(g, 8);
    x = tf_input(g, 0, KERN_F32, 1, (graph_sx[]){c8});
    v = x;
    for (int k = 0; k < 12; k++)
        v = m[k] = tf_pw(g, KPW_MUL_S, v, -1, -1, 1.0 + k / 16.0);
    for (int k = 0; k < 12; k++)
        tf_call(g, GOP_OUTPUT, m[k], k);
    cr_assert_eq(tf_check_fused(g, NULL, "12 outputs at the end"), 2);
    for (int k = 0; k < 12; k++)
        cr_assert_eq(tf_group(g, m[k]), k < 8 ? 0 : 1, "node %d", k);
    cai_graph_free(g);
}

/* ------------------------------------------------------------------ fused reduce */

Test(cai_graph_fuse, pointwise_into_sum_is_a_fused_reduce) {
    graph *g = cai_graph_new();
    graph_sx s0 = cai_graph_sx_slot(g, 0), c7 = cai_graph_sx_const(g, 7);
    graph_val x = tf_input(g, 0, KERN_F32, 2, (graph_sx[]){s0, c7});
    graph_val y = tf_input(g, 1, KERN_F32, 2, (graph_sx[]){s0, c7});
    graph_val a = tf_bin(g, KPW_MUL, x, y);
    graph_val b = tf_un(g, KPW_TANH, a);
    graph_val s = tf_sum(g, b, 1, 0); /* over dim 0 */
    graph_val c = tf_un(g, KPW_EXP, x);
    graph_val t = tf_shape_op(g, GOP_SUM_TO, c, 1, (graph_sx[]){c7}); /* sum_to: a reduction */
    graph_val c2 = tf_un(g, KPW_NEG, y); /* one node is enough for a fused reduce */
    graph_val s2 = tf_sum(g, c2, 3, 1);
    tf_call(g, GOP_OUTPUT, s, 0);
    tf_call(g, GOP_OUTPUT, t, 1);
    tf_call(g, GOP_OUTPUT, s2, 2);
    int64_t slots[] = {300};
    cr_assert_eq(tf_check_fused(g, slots, "fused reduce"), 3);
    cr_assert_eq(tf_group(g, a), tf_group(g, s), "the sum ends the group");
    cr_assert_eq(tf_group(g, b), tf_group(g, s));
    cr_assert_eq(tf_group(g, c), tf_group(g, t));
    cr_assert_eq(tf_group(g, c2), tf_group(g, s2));
    cr_assert_neq(tf_group(g, s), tf_group(g, t));
    cai_graph_free(g);
}

Test(cai_graph_fuse, sum_of_a_value_read_elsewhere_stays_apart) {
    graph *g = cai_graph_new();
    graph_sx c9 = cai_graph_sx_const(g, 9), c4 = cai_graph_sx_const(g, 4);
    graph_val x = tf_input(g, 0, KERN_F64, 2, (graph_sx[]){c4, c9});
    graph_val a = tf_un(g, KPW_EXP, x);
    graph_val b = tf_un(g, KPW_SIN, a);
    graph_val s = tf_sum(g, b, 2, 0);
    graph_val c = tf_un(g, KPW_COS, x);
    graph_val d = tf_un(g, KPW_SQUARE, c);
    graph_val r = tf_call(g, GOP_HOOK, x, 0);
    graph_val t = tf_sum(g, d, 1, 0); /* a hook between the group and the sum */
    graph_val e = tf_un(g, KPW_NEG, r);
    tf_call(g, GOP_OUTPUT, s, 0);
    tf_call(g, GOP_OUTPUT, b, 1); /* b is read by the sum and by an output */
    tf_call(g, GOP_OUTPUT, t, 2);
    tf_call(g, GOP_OUTPUT, e, 3);
    cr_assert_eq(tf_check_fused(g, NULL, "no fused reduce"), 2);
    cr_assert_eq(tf_group(g, s), -1, "b has another reader");
    cr_assert_eq(tf_group(g, a), tf_group(g, b));
    cr_assert_eq(tf_group(g, t), -1, "the sum lies past a hook");
    cr_assert_eq(tf_group(g, c), tf_group(g, d));
    cai_graph_free(g);
}

/* ------------------------------------------------------------------ printing */

Test(cai_graph_fuse, printed_text) {
    graph *g = cai_graph_new();
    graph_sx s0 = cai_graph_sx_slot(g, 0), c3 = cai_graph_sx_const(g, 3);
    graph_origin mul = {2, "MulBackward0", 0}, tanh_o = {3, "TanhBackward0", 0};
    graph_origin sum = {4, "SumBackward1", 0}, acc = {5, "AccumulateGrad", -1};
    graph_val gr = tf_input(g, 0, KERN_F32, 2, (graph_sx[]){s0, c3});
    graph_val x = tf_input(g, 1, KERN_F32, 1, (graph_sx[]){c3});
    graph_val y = tf_input(g, 2, KERN_F32, 2, (graph_sx[]){s0, c3});
    graph_val m =
        tf_add_o(g, (graph_op_args){.op = GOP_PW, .n_in = 2, .in = {gr, x}, .i = {KPW_MUL}}, mul);
    graph_val t = tf_add_o(
        g, (graph_op_args){.op = GOP_PW, .n_in = 2, .in = {m, y}, .i = {KPW_TANH_BW}}, tanh_o);
    graph_val s = tf_add_o(
        g, (graph_op_args){.op = GOP_SUM_TO, .n_in = 1, .in = {t}, .n_shape = 1, .shape = {c3}},
        sum);
    tf_add_o(g, (graph_op_args){.op = GOP_ACCUMULATE, .n_in = 1, .in = {s}, .i = {0}}, acc);
    cai_graph_dce(g);
    cr_assert_eq(cai_graph_fuse(g), 0);
    char *txt = cai_graph_print(g, false, NULL);
    cr_assert_not_null(txt);
    cr_assert_str_eq(txt, "===== Compiled autograd graph =====\n"
                          "def forward(inputs, sizes, hooks):\n"
                          "    getitem: \"f32[s0, 3]\" = inputs[0]\n"
                          "    getitem_1: \"f32[3]\" = inputs[1]\n"
                          "    getitem_2: \"f32[s0, 3]\" = inputs[2]\n"
                          "    # MulBackward0 (NodeCall 2)\n"
                          "    aot0_mul: \"f32[s0, 3]\" = mul(getitem, getitem_1)  # fused 0\n"
                          "    # TanhBackward0 (NodeCall 3)\n"
                          "    aot0_tanh_bw: \"f32[s0, 3]\" = tanh_bw(aot0_mul, getitem_2)  # "
                          "fused 0\n"
                          "    # SumBackward1 (NodeCall 4)\n"
                          "    aot0_sum_to: \"f32[3]\" = sum_to(aot0_tanh_bw, [3])  # fused 0\n"
                          "    # AccumulateGrad (NodeCall 5)\n"
                          "    accumulate_grad(leaf=0, aot0_sum_to)\n"
                          "    return []\n");
    cai_graph_free_string(txt);
    int64_t slots[] = {4};
    tf_inputs ti;
    tf_make_inputs(g, slots, &ti);
    tf_rec rec;
    tf_run(g, slots, &ti, &rec); /* and it runs: sum over rows of tanh_bw(gr * x, y) */
    for (int j = 0; j < 3; j++) {
        float want = 0;
        for (int i = 0; i < 4; i++) {
            float gv = ((float *)ti.mem[0])[i * 3 + j] * ((float *)ti.mem[1])[j];
            float yv = ((float *)ti.mem[2])[i * 3 + j];
            want += gv * (1 - yv * yv);
        }
        float got;
        memcpy(&got, rec.acc[0] + 4 * j, 4);
        cr_assert(fabsf(got - want) <= 1e-5f * (1 + fabsf(want)), "[%d]: %g vs %g", j, got, want);
    }
    tf_free_rec(&rec);
    tf_free_inputs(&ti);
    cai_graph_free(g);
}

/* ------------------------------------------------------------------ random graphs */

/* A random graph of pointwise ops over [s0, 5] with broadcast inputs ([5], [s0, 1], [],
 * [1, 5]), some f64 values, and now and then a sum, a sum_to, an expand, a matmul, a hook
 * or a retain_grad between them; several values end in outputs and leaves. */
typedef struct {
    graph *g;
    graph_val vals[64];
    int n;
    int n_in;
} tf_gen;

static uint64_t tf_pick_state;

static int tf_pick(int n) {
    tf_pick_state = tf_pick_state * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((tf_pick_state >> 33) % (uint64_t)n);
}

/* A random value of dtype dt (input 7 is always f64, inputs 0 and 1 f32). */
static graph_val tf_val_of(tf_gen *t, kern_dtype dt) {
    int k = tf_pick(t->n);
    for (int i = 0; i < t->n; i++) {
        graph_val v = t->vals[(k + i) % t->n];
        if (cai_graph_node_at(t->g, v)->dtype == dt)
            return v;
    }
    return t->vals[0];
}

static void tf_gen_step(tf_gen *t, kern_dtype dt, graph_sx s0, graph_sx c5, graph_val w) {
    static const kern_pw_op un[] = {KPW_NEG,    KPW_EXP,   KPW_TANH,  KPW_SIGMOID, KPW_ABS,
                                    KPW_SQUARE, KPW_MUL_S, KPW_ADD_S, KPW_RELU,    KPW_SIN,
                                    KPW_SILU,   KPW_CLAMP, KPW_GT_S};
    static const kern_pw_op bin[] = {KPW_ADD,     KPW_SUB,        KPW_MUL,
                                     KPW_MAX,     KPW_MIN,        KPW_TANH_BW,
                                     KPW_RELU_BW, KPW_SIGMOID_BW, KPW_MASKED_FILL};
    graph *g = t->g;
    int r = tf_pick(20);
    graph_val a = tf_val_of(t, dt), v;
    const graph_node *an = cai_graph_node_at(g, a);
    if (r < 7) {
        v = tf_pw(g, un[tf_pick(13)], a, -1, -1, 0.25 + tf_pick(4) * 0.5);
    } else if (r < 15) {
        graph_val b = tf_val_of(t, dt);
        v = tf_pw(g, bin[tf_pick(9)], a, b, -1, r % 3 ? 1.0 : 0.5);
    } else if (r == 15) {
        v = tf_pw(g, KPW_WHERE, tf_val_of(t, dt), a, tf_val_of(t, dt), 0);
    } else if (r == 16 && an->ndim == 2) { /* results that still broadcast to [s0, 5] */
        int mask = tf_pick(3) == 0 ? 2 : tf_pick(2) ? 1 : 3;
        v = tf_sum(g, a, mask, mask == 2 || tf_pick(2));
    } else if (r == 17 && an->ndim == 2 && an->shape[1] == c5) {
        v = tf_shape_op(g, GOP_SUM_TO, a, 1, (graph_sx[]){c5});
    } else if (r == 18 && an->dtype == KERN_F32 && an->ndim == 2 && an->shape[1] == c5) {
        v = tf_matmul(g, a, w);
    } else if (r == 19) {
        v = tf_call(g, tf_pick(2) ? GOP_HOOK : GOP_RETAIN, a, t->n);
        if (cai_graph_node_at(g, v)->a.op == GOP_RETAIN)
            return;
    } else {
        v = tf_shape_op(g, GOP_EXPAND, a, 2, (graph_sx[]){s0, c5});
    }
    if (t->n < 64)
        t->vals[t->n++] = v;
}

static graph *tf_random_graph(uint64_t seed, int n_ops) {
    tf_pick_state = seed;
    tf_gen t = {.g = cai_graph_new()};
    graph *g = t.g;
    graph_sx s0 = cai_graph_sx_slot(g, 0), c5 = cai_graph_sx_const(g, 5),
             c1 = cai_graph_sx_const(g, 1);
    const graph_sx shapes[][2] = {{s0, c5}, {c5, 0}, {s0, c1}, {0, 0}, {c1, c5}, {s0, c5}};
    const int nds[] = {2, 1, 2, 0, 2, 2};
    for (int k = 0; k < 8; k++) {
        int s = k < 2 ? 0 : tf_pick(6);
        kern_dtype dt = k == 7 || (k > 2 && tf_pick(4) == 0) ? KERN_F64 : KERN_F32;
        t.vals[t.n++] = tf_input(g, t.n_in++, dt, nds[s], shapes[s]);
    }
    graph_val w = tf_input(g, t.n_in++, KERN_F32, 2, (graph_sx[]){c5, c5});
    for (int i = 0; i < n_ops; i++)
        tf_gen_step(&t, tf_pick(5) ? KERN_F32 : KERN_F64, s0, c5, w);
    int n_out = 1 + tf_pick(4);
    for (int k = 0; k < n_out; k++)
        tf_call(g, GOP_OUTPUT, t.vals[t.n - 1 - tf_pick(t.n > 12 ? 12 : t.n)], k);
    for (int k = 0; k < 2 && t.n > 8; k++)
        tf_call(g, GOP_ACCUMULATE, t.vals[8 + tf_pick(t.n - 8)], k);
    cai_graph_dce(g);
    cai_graph_cse(g);
    return g;
}

Test(cai_graph_fuse, random_graphs_fused_equal_unfused_bitwise) {
    int groups = 0, reduces = 0;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        graph *g = tf_random_graph(seed, 10 + (int)(seed % 40));
        int64_t slots[] = {seed % 7 == 0 ? 1 : (int64_t)(2 + seed % 13)};
        char what[64];
        snprintf(what, sizeof what, "random graph %llu", (unsigned long long)seed);
        groups += tf_check_fused(g, slots, what);
        for (graph_val v = 0; v < cai_graph_count(g); v++)
            reduces += tf_group(g, v) >= 0 && cai_graph_node_at(g, v)->a.op != GOP_PW;
        cai_graph_free(g);
    }
    cr_assert_gt(groups, 300, "the random graphs should make groups (%d)", groups);
    cr_assert_gt(reduces, 10, "the random graphs should make fused reduces (%d)", reduces);
}

/* Long loops and reductions: several lanes, a split reduction (its partial results come
 * from the arena too). */
Test(cai_graph_fuse, large_runs_equal_unfused_bitwise) {
    graph *g = cai_graph_new();
    graph_sx s0 = cai_graph_sx_slot(g, 0), c3 = cai_graph_sx_const(g, 3);
    graph_val x = tf_input(g, 0, KERN_F32, 2, (graph_sx[]){s0, c3});
    graph_val y = tf_input(g, 1, KERN_F32, 2, (graph_sx[]){s0, c3});
    graph_val z = tf_input(g, 2, KERN_F64, 1, (graph_sx[]){s0});
    graph_val a = tf_bin(g, KPW_MUL, x, y);
    graph_val b = tf_un(g, KPW_SIGMOID, a);
    graph_val c = tf_bin(g, KPW_SIGMOID_BW, b, x);
    graph_val s = tf_sum(g, c, 3, 0); /* everything into one value */
    graph_val d = tf_un(g, KPW_TANH, y);
    graph_val e = tf_bin(g, KPW_ADD, d, x);
    graph_val za = tf_un(g, KPW_EXP, z);
    graph_val zb = tf_un(g, KPW_SQRT, za);
    graph_val zs = tf_sum(g, zb, 1, 1);
    tf_call(g, GOP_OUTPUT, s, 0);
    tf_call(g, GOP_OUTPUT, e, 1);
    tf_call(g, GOP_OUTPUT, zs, 2);
    int64_t slots[] = {100003};
    cr_assert_eq(tf_check_fused(g, slots, "large"), 3);
    cai_graph_free(g);
}

/* ------------------------------------------------------------------ the plan's checks */

/* Groups marked by hand that the plan cannot honour run op by op, with the same values. */
Test(cai_graph_fuse, plan_runs_bad_groups_op_by_op) {
    graph *g = cai_graph_new();
    graph_sx c6 = cai_graph_sx_const(g, 6), c2 = cai_graph_sx_const(g, 2);
    graph_val x = tf_input(g, 0, KERN_F32, 1, (graph_sx[]){c6});
    graph_val y = tf_input(g, 1, KERN_F32, 1, (graph_sx[]){c2});
    graph_val a = tf_un(g, KPW_EXP, x);
    graph_val r = tf_shape_op(g, GOP_RESHAPE, a, 2, (graph_sx[]){c2, cai_graph_sx_const(g, 3)});
    graph_val s = tf_sum(g, r, 2, 0);
    graph_val b = tf_un(g, KPW_NEG, a);
    graph_val c = tf_un(g, KPW_EXP, y);
    graph_val d = tf_bin(g, KPW_ADD, c, s);
    graph_val e = tf_un(g, KPW_COS, b);
    tf_call(g, GOP_OUTPUT, d, 0);
    tf_call(g, GOP_OUTPUT, e, 1);
    tf_inputs ti;
    tf_make_inputs(g, NULL, &ti);
    tf_rec plain, bad;
    tf_run(g, NULL, &ti, &plain);
    /* group 0 = {a, b}: a is read (through a reshape) before b, where the group would run;
     * group 1 = {c, e}: different shapes; group 2 = {d} with x's node as a "reduction" */
    cai_graph_node_mut(g, a)->fused = 1;
    cai_graph_node_mut(g, b)->fused = 1;
    cai_graph_node_mut(g, c)->fused = 2;
    cai_graph_node_mut(g, e)->fused = 2;
    cai_graph_node_mut(g, d)->fused = 3;
    cai_graph_node_mut(g, x)->fused = 3;
    cr_assert_eq(cai_graph_count_fused(g), 3);
    tf_run(g, NULL, &ti, &bad);
    tf_same(&bad, &plain, "bad groups");
    tf_free_rec(&plain);
    tf_free_rec(&bad);
    tf_free_inputs(&ti);
    cai_graph_free(g);
}

/* ------------------------------------------------------------------ memory */

static long tf_allocs, tf_live, tf_fail_at;

static void *tf_count_alloc(size_t n) {
    tf_allocs++;
    if (tf_fail_at && tf_allocs == tf_fail_at)
        return NULL;
    tf_live++;
    return aligned_alloc(64, (n + 63) / 64 * 64 + 64);
}

static void tf_count_free(void *p) {
    if (p) {
        tf_live--;
        free(p);
    }
}

static const kern_allocator TF_COUNTING = {tf_count_alloc, tf_count_free};

/* A fused reduce into one value (a split reduction when s0 is large) and a fused loop
 * with two outputs; no reduction is left to cai_kern_reduce (whose split path may allocate). */
static graph *tf_mixed_graph(void) {
    graph *g = cai_graph_new();
    graph_sx s0 = cai_graph_sx_slot(g, 0), c4 = cai_graph_sx_const(g, 4);
    graph_val x = tf_input(g, 0, KERN_F32, 2, (graph_sx[]){s0, c4});
    graph_val y = tf_input(g, 1, KERN_F32, 1, (graph_sx[]){c4});
    graph_val a = tf_bin(g, KPW_MUL, x, y);
    graph_val b = tf_un(g, KPW_TANH, a);
    graph_val c = tf_bin(g, KPW_TANH_BW, b, x);
    graph_val s = tf_sum(g, c, 3, 0);
    graph_val d = tf_un(g, KPW_EXP, x);
    graph_val e = tf_bin(g, KPW_SUB, d, y);
    tf_call(g, GOP_ACCUMULATE, s, 0);
    tf_call(g, GOP_OUTPUT, d, 0);
    tf_call(g, GOP_OUTPUT, e, 1);
    return g;
}

Test(cai_graph_fuse, out_of_memory_leaves_the_graph_unfused) {
    cai_graph_set_allocator(TF_COUNTING);
    graph *g = tf_mixed_graph();
    tf_allocs = 0;
    tf_fail_at = 1;
    cr_assert_eq(cai_graph_fuse(g), -1);
    tf_fail_at = 0;
    cr_assert(cai_graph_out_of_memory(g));
    cr_assert(strstr(cai_graph_error(g), "out of memory"), "%s", cai_graph_error(g));
    cr_assert_eq(cai_graph_count_fused(g), 0, "a failed pass leaves no group");
    cr_assert_eq(cai_graph_fuse(g), 0); /* and the graph is fine */
    cr_assert_gt(cai_graph_count_fused(g), 0);
    long live = tf_live;
    int failures = 0;
    for (long k = 1;; k++) { /* cai_graph_plan_new of a fused graph */
        tf_fail_at = k;
        tf_allocs = 0;
        graph_plan *p = cai_graph_plan_new(g);
        tf_fail_at = 0;
        if (p) {
            cai_graph_plan_free(p);
            break;
        }
        failures++;
        cr_assert_eq(tf_live, live, "cai_graph_plan_new leaked after failure %ld", k);
    }
    cr_assert_gt(failures, 0);
    for (long k = 1; k <= 3; k++) {
        tf_allocs = 0;
        tf_fail_at = k;
        char *s = cai_graph_print(g, false, NULL);
        tf_fail_at = 0;
        cr_assert_null(s, "cai_graph_print must fail cleanly at allocation %ld", k);
    }
    cai_graph_free(g);
    cai_graph_set_allocator((kern_allocator){NULL, NULL});
    cr_assert_eq(tf_live, 0, "%ld allocations leaked", tf_live);
}

/* The fused loops take their scratch from the arena, large runs and split reductions too. */
Test(cai_graph_fuse, fused_run_allocates_nothing) {
    cai_graph_set_allocator(TF_COUNTING);
    cai_kern_set_allocator(TF_COUNTING);
    graph *g = tf_mixed_graph();
    cr_assert_eq(cai_graph_fuse(g), 0);
    cr_assert_eq(cai_graph_count_fused(g), 2);
    graph_plan *p = cai_graph_plan_new(g);
    const int64_t sizes[] = {3, 50000, 7};
    for (int r = 0; r < 3; r++) {
        const int64_t *slots = &sizes[r];
        tf_inputs ti;
        tf_make_inputs(g, slots, &ti);
        size_t bytes = cai_graph_plan_arena_bytes(p, slots);
        void *arena = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
        tf_rec rec;
        memset(&rec, 0, sizeof rec);
        tf_allocs = 0;
        int rc = cai_graph_plan_run(p, slots, ti.in, arena,
                                    (graph_callbacks){.call = tf_cb, .ctx = &rec});
        long during = tf_allocs; /* the recorder copies with malloc, not the hook */
        cr_assert_eq(rc, 0, "%s", cai_graph_plan_error(p));
        cr_assert_eq(during, 0, "a fused run allocated %ld times (size %lld)", during,
                     (long long)*slots);
        free(arena);
        tf_free_rec(&rec);
        tf_free_inputs(&ti);
    }
    cai_graph_plan_free(p);
    cai_graph_free(g);
    cai_graph_set_allocator((kern_allocator){NULL, NULL});
    cai_kern_set_allocator((kern_allocator){NULL, NULL});
    cr_assert_eq(tf_live, 0, "%ld allocations leaked", tf_live);
}
