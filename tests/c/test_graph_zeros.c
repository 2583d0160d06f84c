/* test_graph_zeros.c - symbolic zeros in cai_graph_simplify (graph/simplify.c): a gradient
 * that is zero by construction (fill(_, 0), as the rules make for the derivative of relu's
 * derivative) turns the ops that are linear in it into zeros nodes, and dead-code
 * elimination drops what fed them.
 *
 * Graphs are built by hand and run before and after the pass on the same float64 inputs:
 * the outputs must be equal, and the ops left must be the expected ones.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kern.h"
#include "graph/graph.h"

static const graph_origin TZ_NONE = {-1, NULL, -1};

static graph_val tz_add(graph *g, graph_op_args a) {
    graph_val v = cai_graph_add(g, &a, TZ_NONE);
    cr_assert(v >= 0, "cai_graph_add failed: %s", cai_graph_error(g));
    return v;
}

static graph_val tz_input(graph *g, int k, int rows, int cols) {
    graph_op_args a = {.op = GOP_INPUT, .i = {k}, .dtype = KERN_F64, .n_shape = 2};
    a.shape[0] = cai_graph_sx_const(g, rows);
    a.shape[1] = cai_graph_sx_const(g, cols);
    return tz_add(g, a);
}

static graph_val tz_pw(graph *g, kern_pw_op op, int n, graph_val x, graph_val y, double p0) {
    return tz_add(g, (graph_op_args){.op = GOP_PW, .n_in = n, .in = {x, y}, .i = {op}, .p = {p0}});
}

static graph_val tz_matmul(graph *g, graph_val a, graph_val b, int ta, int tb) {
    return tz_add(g, (graph_op_args){.op = GOP_MATMUL, .n_in = 2, .in = {a, b}, .i = {ta, tb}});
}

static void tz_output(graph *g, graph_val x, int k) {
    tz_add(g, (graph_op_args){.op = GOP_OUTPUT, .n_in = 1, .in = {x}, .i = {k}});
}

/* How many live nodes run op. */
static int tz_count(const graph *g, graph_op op) {
    int n = 0;
    for (int v = 0; v < cai_graph_count(g); v++)
        n += !cai_graph_node_at(g, v)->dead && cai_graph_node_at(g, v)->a.op == op;
    return n;
}

#define TZ_N 64
typedef struct {
    double out[4][TZ_N];
    int n[4];
} tz_outputs;

static int tz_call(void *ctx, const graph_node *n, const graph_view *in, graph_view *repl) {
    (void)repl;
    tz_outputs *o = ctx;
    if (n->a.op != GOP_OUTPUT)
        return 0;
    int k = (int)n->a.i[0], m = (int)(in->shape[0] * in->shape[1]);
    cr_assert(m <= TZ_N);
    for (int i = 0; i < m; i++) {
        int64_t r = i / in->shape[1], c = i % in->shape[1];
        o->out[k][i] = ((const double *)in->data)[r * in->strides[0] + c * in->strides[1]];
    }
    o->n[k] = m;
    return 0;
}

/* Run g on inputs of the given [rows, cols] shapes, filled with values that include an
 * inf in input 1 when `with_inf`. */
static void tz_run(const graph *g, int n_in, const int (*shapes)[2], bool with_inf, tz_outputs *o) {
    static double data[4][TZ_N];
    graph_view in[4];
    for (int k = 0; k < n_in; k++) {
        for (int i = 0; i < TZ_N; i++)
            data[k][i] = sin(1.3 * (i + 1) + k) * (1 + 0.2 * i);
        if (with_inf && k == 1)
            data[k][0] = INFINITY;
        in[k] = (graph_view){.data = data[k],
                             .dtype = KERN_F64,
                             .ndim = 2,
                             .shape = {shapes[k][0], shapes[k][1]},
                             .strides = {shapes[k][1], 1}};
    }
    memset(o, 0, sizeof *o);
    graph_plan *p = cai_graph_plan_new(g);
    cr_assert_not_null(p, "plan: %s", cai_graph_error(g));
    size_t bytes = cai_graph_plan_arena_bytes(p, NULL);
    void *arena = aligned_alloc(64, bytes ? (bytes + 63) / 64 * 64 : 64);
    graph_callbacks cb = {tz_call, o, NULL, NULL};
    int rc = cai_graph_plan_run(p, NULL, in, arena, cb);
    cr_assert_eq(rc, 0, "run failed (%d): %s", rc, cai_graph_plan_error(p));
    free(arena);
    cai_graph_plan_free(p);
}

static void tz_simplify(graph *g) {
    cai_graph_dce(g);
    cai_graph_cse(g);
    cr_assert(cai_graph_simplify(g) >= 0, "%s", cai_graph_error(g));
    cai_graph_cse(g);
    cai_graph_dce(g);
}

/* A double backward's shape: the derivative of leaky_relu_bw with respect to its saved
 * input is fill(x, 0); it flows through a layer's two GEMMs, the activation's rule and a
 * bias sum, and meets a real gradient in an add. */
static void build_layer_of_zeros(graph *g) {
    graph_val x = tz_input(g, 0, 4, 3);              /* the saved activation */
    graph_val w = tz_input(g, 1, 3, 3);              /* the layer's weight */
    graph_val real = tz_input(g, 2, 4, 3);           /* a real gradient */
    graph_val z = tz_pw(g, KPW_FILL, 1, x, -1, 0.0); /* d leaky_relu_bw / dx */
    graph_val dx = tz_matmul(g, z, w, 0, 1);         /* [4, 3] */
    graph_val dw = tz_matmul(g, z, x, 1, 0);         /* [3, 3] */
    graph_val act = tz_pw(g, KPW_LEAKY_RELU_BW, 2, dx, x, 0.2);
    graph_op_args sum = {.op = GOP_SUM, .n_in = 1, .in = {act}, .i = {1, 0}}; /* [3] */
    graph_val bias = tz_add(g, sum);
    graph_val total = tz_pw(g, KPW_ADD, 2, real, act, 1.0); /* real + 0 */
    tz_output(g, total, 0);
    tz_output(g, dw, 1);
    graph_op_args as_col = {.op = GOP_UNSQUEEZE, .n_in = 1, .in = {bias}, .i = {0}};
    tz_output(g, tz_add(g, as_col), 2);
}

Test(graph_zeros, a_layer_fed_zeros_becomes_zeros) {
    const int shapes[3][2] = {{4, 3}, {3, 3}, {4, 3}};
    graph *g0 = cai_graph_new(), *g1 = cai_graph_new();
    build_layer_of_zeros(g0);
    build_layer_of_zeros(g1);
    tz_simplify(g1);
    cr_assert_eq(tz_count(g0, GOP_MATMUL), 2);
    cr_assert_eq(tz_count(g1, GOP_MATMUL), 0, "a GEMM on zeros is left");
    cr_assert_eq(tz_count(g1, GOP_SUM), 0);
    cr_assert_eq(tz_count(g1, GOP_PW), 0, "real + 0 should be real, the rest zeros");
    cr_assert_eq(tz_count(g1, GOP_ZEROS), 2); /* dw [3, 3] and the bias sum [3] */
    char *text = cai_graph_print(g1, false, NULL);
    cr_assert(strstr(text, "zeros([3, 3])") != NULL, "%s", text);
    cai_graph_free_string(text);
    tz_outputs o0, o1;
    tz_run(g0, 3, shapes, false, &o0);
    tz_run(g1, 3, shapes, false, &o1);
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(o0.n[k], o1.n[k]);
        for (int i = 0; i < o0.n[k]; i++)
            cr_assert_eq(o0.out[k][i], o1.out[k][i], "output %d[%d]", k, i);
    }
    for (int i = 0; i < o1.n[1]; i++)
        cr_assert_eq(o1.out[1][i], 0.0);
    cai_graph_free(g0);
    cai_graph_free(g1);
}

/* The documented divergence: eager multiplies the zero by an inf and gets NaN; the
 * symbolic zero stays 0. */
Test(graph_zeros, an_inf_factor_gives_zero_not_nan) {
    const int shapes[2][2] = {{4, 3}, {3, 3}};
    graph *g0 = cai_graph_new(), *g1 = cai_graph_new();
    for (int k = 0; k < 2; k++) {
        graph *g = k ? g1 : g0;
        graph_val x = tz_input(g, 0, 4, 3), w = tz_input(g, 1, 3, 3);
        tz_output(g, tz_matmul(g, tz_pw(g, KPW_FILL, 1, x, -1, 0.0), w, 0, 0), 0);
    }
    tz_simplify(g1);
    tz_outputs o0, o1;
    tz_run(g0, 2, shapes, true, &o0);
    tz_run(g1, 2, shapes, true, &o1);
    cr_assert(isnan(o0.out[0][0]), "0 * inf in a GEMM: %g", o0.out[0][0]);
    cr_assert_eq(o1.out[0][0], 0.0);
    cai_graph_free(g0);
    cai_graph_free(g1);
}

/* What is not a symbolic zero, or not linear in one, stays: a multiply by the constant 0
 * (NaN * 0 is NaN), fill(_, 1), exp of zeros (1), zeros + a broadcast, and a hook on
 * zeros (a hook may replace its gradient). */
Test(graph_zeros, what_is_not_linear_in_a_zero_stays) {
    graph *g = cai_graph_new();
    graph_val x = tz_input(g, 0, 4, 3), row = tz_input(g, 1, 1, 3);
    graph_val z = tz_pw(g, KPW_FILL, 1, x, -1, 0.0);
    graph_val one = tz_pw(g, KPW_FILL, 1, x, -1, 1.0);
    tz_output(g, tz_pw(g, KPW_MUL_S, 1, x, -1, 0.0), 0);
    tz_output(g, tz_pw(g, KPW_MUL, 2, one, x, 0), 1);
    tz_output(g, tz_pw(g, KPW_EXP, 1, z, -1, 0), 2);
    tz_output(g, tz_pw(g, KPW_ADD, 2, row, z, 1.0), 3);
    graph_val hooked = tz_add(g, (graph_op_args){.op = GOP_HOOK, .n_in = 1, .in = {z}, .i = {0}});
    tz_output(g, tz_matmul(g, hooked, tz_input(g, 2, 3, 3), 0, 0), 4);
    tz_simplify(g);
    cr_assert_eq(tz_count(g, GOP_ZEROS), 0);
    cr_assert_eq(tz_count(g, GOP_HOOK), 1);
    cr_assert_eq(tz_count(g, GOP_MATMUL), 1);
    char *text = cai_graph_print(g, false, NULL);
    cr_assert(strstr(text, "mul_s(getitem, 0)") != NULL, "%s", text);
    cr_assert(strstr(text, "exp(") != NULL, "%s", text);
    cai_graph_free_string(text);
    cai_graph_free(g);
}
