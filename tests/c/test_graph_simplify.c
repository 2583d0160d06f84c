/* test_graph_simplify.c - cai_graph_simplify (graph/simplify.c) and the runner's GEMM that
 * writes a leaf's .grad (graph_callbacks.accumulate_target; graph/plan.c finds those
 * GEMMs, graph/plan_run.c runs them).
 *
 * Graphs are built by hand. Each rewrite is checked on the ops left after the pass (and
 * the printed text where the format matters), on the values (the same graph run with and
 * without the pass, against plain loops where the math is simple), and where it must not
 * apply.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kern.h"
#include "graph/graph.h"

/* ------------------------------------------------------------------ building */

static const graph_origin TS_NONE = {-1, NULL, -1};

static graph_val ts_add_o(graph *g, graph_op_args a, graph_origin o) {
    graph_val v = cai_graph_add(g, &a, o);
    cr_assert(v >= 0, "cai_graph_add failed: %s", cai_graph_error(g));
    return v;
}

static graph_val ts_add(graph *g, graph_op_args a) {
    return ts_add_o(g, a, TS_NONE);
}

static graph_sx ts_c(graph *g, int64_t v) {
    return cai_graph_sx_const(g, v);
}

/* An input of constant shape. */
static graph_val ts_input(graph *g, int k, kern_dtype dt, int n, const int64_t *shape) {
    graph_op_args a = {.op = GOP_INPUT, .i = {k}, .dtype = dt, .n_shape = n};
    for (int d = 0; d < n; d++)
        a.shape[d] = ts_c(g, shape[d]);
    return ts_add(g, a);
}

static graph_op_args ts_pw(kern_pw_op op, int n, graph_val x, graph_val y, double p0) {
    return (graph_op_args){.op = GOP_PW, .n_in = n, .in = {x, y}, .i = {op}, .p = {p0}};
}

static graph_op_args ts_shape_op(graph *g, graph_op op, graph_val x, int n, const int64_t *shape) {
    graph_op_args a = {.op = op, .n_in = 1, .in = {x}, .n_shape = n};
    for (int d = 0; d < n; d++)
        a.shape[d] = ts_c(g, shape[d]);
    return a;
}

static graph_op_args ts_permute(graph_val x, int n, const int8_t *perm) {
    graph_op_args a = {.op = GOP_PERMUTE, .n_in = 1, .in = {x}, .n_perm = n};
    memcpy(a.perm, perm, (size_t)n);
    return a;
}

static graph_op_args ts_matmul(graph_val a, graph_val b, int ta, int tb) {
    return (graph_op_args){.op = GOP_MATMUL, .n_in = 2, .in = {a, b}, .i = {ta, tb}};
}

static graph_op_args ts_sum(graph_val x, uint32_t mask, int keep) {
    return (graph_op_args){.op = GOP_SUM, .n_in = 1, .in = {x}, .i = {mask, keep}};
}

static graph_op_args ts_one(graph_op op, graph_val x, int64_t i0) {
    return (graph_op_args){.op = op, .n_in = 1, .in = {x}, .i = {i0}};
}

static void ts_output(graph *g, graph_val x, int k) {
    ts_add(g, ts_one(GOP_OUTPUT, x, k));
}

/* The live nodes' ops in order ("getitem getitem matmul output"), pointwise ops by their
 * kern name in lower case. */
static const char *ts_ops(const graph *g, char *buf, size_t size) {
    size_t len = 0;
    buf[0] = '\0';
    for (int v = 0; v < cai_graph_count(g); v++) {
        const graph_node *x = cai_graph_node_at(g, v);
        if (x->dead)
            continue;
        char name[32];
        const char *src = x->a.op == GOP_PW ? cai_kern_pw_name((kern_pw_op)x->a.i[0])
                                            : cai_graph_op_name(x->a.op);
        size_t k = 0;
        for (; src[k] && k + 1 < sizeof name; k++)
            name[k] = (char)(src[k] >= 'A' && src[k] <= 'Z' ? src[k] - 'A' + 'a' : src[k]);
        name[k] = '\0';
        len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? " " : "", name);
        if (len >= size)
            break;
    }
    return buf;
}

#define TS_OPS_ARE(g, want)                                                                        \
    do {                                                                                           \
        char ts_b_[1024];                                                                          \
        cr_assert_str_eq(ts_ops((g), ts_b_, sizeof ts_b_), (want));                                \
    } while (0)

/* The printed graph contains (or lacks) needle. */
static void ts_printed(const graph *g, const char *needle, bool want) {
    char *text = cai_graph_print(g, false, NULL);
    cr_assert_not_null(text);
    bool has = strstr(text, needle) != NULL;
    cr_assert_eq(has, want, "printed graph %s \"%s\":\n%s", want ? "lacks" : "has", needle, text);
    cai_graph_free_string(text);
}

/* Simplify, then CSE (rewrites may make equal nodes) and DCE, as compiled autograd does;
 * returns the number of rewrites. */
static int ts_simplify(graph *g) {
    int n = cai_graph_simplify(g);
    cr_assert(n >= 0, "cai_graph_simplify failed: %s", cai_graph_error(g));
    cai_graph_cse(g);
    cai_graph_dce(g);
    return n;
}

/* ------------------------------------------------------------------ running */

#define TS_MAX 256
typedef struct {
    int calls[GOP__COUNT];
    double acc[4][TS_MAX];
    int acc_n[4];
    double out[4][TS_MAX];
    int out_n[4];
    /* accumulate_target: what it hands out */
    int target_calls;
    graph_view value; /* what the runner asked for */
    graph_view dst;
    bool has_grad, decline;
} ts_rec;

static double ts_get(const graph_view *v, int64_t i) {
    int64_t off = 0;
    for (int d = v->ndim - 1; d >= 0; d--) {
        off += (i % v->shape[d]) * v->strides[d];
        i /= v->shape[d];
    }
    return v->dtype == KERN_F32 ? ((const float *)v->data)[off] : ((const double *)v->data)[off];
}

static int64_t ts_numel(const graph_view *v) {
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++)
        n *= v->shape[d];
    return n;
}

static void ts_copy(const graph_view *in, double *dst, int *n) {
    int64_t m = ts_numel(in);
    cr_assert(m <= TS_MAX);
    for (int64_t i = 0; i < m; i++)
        dst[i] = ts_get(in, i);
    *n = (int)m;
}

static int ts_call(void *ctx, const graph_node *n, const graph_view *in, graph_view *repl) {
    ts_rec *r = ctx;
    (void)repl;
    r->calls[n->a.op]++;
    int k = (int)n->a.i[0];
    if (n->a.op == GOP_ACCUMULATE)
        ts_copy(in, r->acc[k], &r->acc_n[k]);
    else if (n->a.op == GOP_OUTPUT)
        ts_copy(in, r->out[k], &r->out_n[k]);
    return 0;
}

static int ts_target(void *ctx, const graph_node *acc, const graph_view *value, graph_view *dst,
                     bool *has_grad) {
    ts_rec *r = ctx;
    cr_assert_eq(acc->a.op, GOP_ACCUMULATE);
    cr_assert_null(value->data);
    r->target_calls++;
    r->value = *value;
    if (r->decline)
        return 0;
    *dst = r->dst;
    *has_grad = r->has_grad;
    return 0;
}

/* Plan g and run it once; with the accumulate_target callback when `target`. */
static void ts_run(const graph *g, const int64_t *slots, const graph_view *inputs, ts_rec *rec,
                   bool target) {
    graph_plan *p = cai_graph_plan_new(g);
    cr_assert_not_null(p);
    size_t bytes = cai_graph_plan_arena_bytes(p, slots);
    void *arena = aligned_alloc(64, bytes ? (bytes + 63) / 64 * 64 : 64);
    graph_callbacks cb = {ts_call, rec, target ? ts_target : NULL, NULL};
    int rc = cai_graph_plan_run(p, slots, inputs, arena, cb);
    cr_assert_eq(rc, 0, "run failed (%d): %s", rc, cai_graph_plan_error(p));
    free(arena);
    cai_graph_plan_free(p);
}

static graph_view ts_view(void *data, kern_dtype dt, int nd, const int64_t *shape) {
    graph_view v = {.data = data, .dtype = dt, .ndim = nd};
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        v.shape[d] = shape[d];
        v.strides[d] = s;
        s *= shape[d];
    }
    return v;
}

static void ts_fill(double *p, int n, int seed) {
    for (int i = 0; i < n; i++)
        p[i] = sin(1.7 * (i + 1) + seed) * (1 + 0.1 * i);
}

static void ts_close(const double *got, const double *want, int n, double tol, const char *what) {
    for (int i = 0; i < n; i++)
        cr_assert(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])),
                  "%s[%d]: got %.17g want %.17g", what, i, got[i], want[i]);
}

/* A graph builder for before/after comparisons: fills *g's nodes, reads up to 4 f64
 * inputs of the given shapes. */
typedef void (*ts_build)(graph *g);

/* Build twice, simplify one, run both on the same f64 inputs: every output and
 * accumulation must agree (within tol: 0 for exact rewrites). Returns the simplified
 * graph (free it). */
static graph *ts_same_values(ts_build build, int n_in, const int64_t (*shapes)[4], const int *ndims,
                             const int64_t *slots, double tol) {
    graph *g0 = cai_graph_new(), *g1 = cai_graph_new();
    cr_assert(g0 && g1);
    build(g0);
    build(g1);
    cai_graph_dce(g0);
    cai_graph_cse(g0);
    cai_graph_dce(g1);
    cai_graph_cse(g1);
    ts_simplify(g1);
    double data[4][TS_MAX];
    graph_view in[4];
    for (int k = 0; k < n_in; k++) {
        ts_fill(data[k], TS_MAX, k);
        in[k] = ts_view(data[k], KERN_F64, ndims[k], shapes[k]);
    }
    static ts_rec r0, r1;
    memset(&r0, 0, sizeof r0);
    memset(&r1, 0, sizeof r1);
    ts_run(g0, slots, in, &r0, false);
    ts_run(g1, slots, in, &r1, false);
    for (int k = 0; k < 4; k++) {
        cr_assert_eq(r0.out_n[k], r1.out_n[k], "output %d: %d vs %d values", k, r0.out_n[k],
                     r1.out_n[k]);
        cr_assert_eq(r0.acc_n[k], r1.acc_n[k]);
        ts_close(r1.out[k], r0.out[k], r0.out_n[k], tol, "output");
        ts_close(r1.acc[k], r0.acc[k], r0.acc_n[k], tol, "accumulation");
    }
    cai_graph_free(g0);
    return g1;
}

/* ------------------------------------------------------------------ transposes into GEMM */

static void build_transposed_operands(graph *g) {
    graph_val x = ts_input(g, 0, KERN_F64, 2, (int64_t[]){3, 4});
    graph_val y = ts_input(g, 1, KERN_F64, 2, (int64_t[]){3, 5});
    graph_val z = ts_input(g, 2, KERN_F64, 2, (int64_t[]){6, 5});
    graph_val xt = ts_add(g, ts_permute(x, 2, (int8_t[]){1, 0}));
    graph_val m = ts_add(g, ts_matmul(xt, y, 0, 0)); /* x^T y: [4, 5] */
    graph_val zt = ts_add(g, ts_permute(z, 2, (int8_t[]){1, 0}));
    graph_val m2 = ts_add(g, ts_matmul(m, zt, 0, 0)); /* (x^T y) z^T: [4, 6] */
    ts_output(g, m2, 0);
}

Test(cai_graph_simplify, transpose_folds_into_matmul_flags) {
    const int64_t shapes[3][4] = {{3, 4}, {3, 5}, {6, 5}};
    graph *g = ts_same_values(build_transposed_operands, 3, shapes, (int[]){2, 2, 2}, NULL, 0);
    TS_OPS_ARE(g, "getitem getitem getitem matmul matmul output");
    ts_printed(g, "matmul(getitem, getitem_1, ta=1, tb=0)", true);
    ts_printed(g, "matmul(matmul, getitem_2, ta=0, tb=1)", true);
    cai_graph_free(g);
}

static void build_transposed_flagged(graph *g) {
    graph_val x = ts_input(g, 0, KERN_F64, 3, (int64_t[]){2, 4, 3});
    graph_val y = ts_input(g, 1, KERN_F64, 3, (int64_t[]){2, 4, 5});
    graph_val xt = ts_add(g, ts_permute(x, 3, (int8_t[]){0, 2, 1})); /* [2, 3, 4] */
    ts_output(g, ts_add(g, ts_matmul(xt, y, 0, 0)), 0);              /* [2, 3, 5] */
}

Test(cai_graph_simplify, batched_transpose_folds) {
    graph *g = cai_graph_new();
    graph_val x = ts_input(g, 0, KERN_F64, 3, (int64_t[]){2, 4, 3});
    graph_val y = ts_input(g, 1, KERN_F64, 3, (int64_t[]){2, 3, 5});
    graph_val xt = ts_add(g, ts_permute(x, 3, (int8_t[]){0, 2, 1})); /* [2, 3, 4] */
    graph_val m = ts_add(g, ts_matmul(xt, y, 1, 0)); /* ta = 1 on a transpose: x, [2, 4, 5] */
    ts_output(g, m, 0);
    ts_simplify(g);
    TS_OPS_ARE(g, "getitem getitem matmul output");
    ts_printed(g, "matmul(getitem, getitem_1, ta=0, tb=0)", true);
    cai_graph_free(g);
    const int64_t shapes[2][4] = {{2, 4, 3}, {2, 4, 5}};
    g = ts_same_values(build_transposed_flagged, 2, shapes, (int[]){3, 3}, NULL, 0);
    TS_OPS_ARE(g, "getitem getitem matmul output");
    ts_printed(g, "matmul(getitem, getitem_1, ta=1, tb=0)", true);
    cai_graph_free(g);
}

/* linear's weight gradient through TBackward0: (x^T g)^T is g^T x, one GEMM, no permute */
static void build_transposed_product(graph *g) {
    graph_val x = ts_input(g, 0, KERN_F64, 2, (int64_t[]){6, 4});
    graph_val y = ts_input(g, 1, KERN_F64, 2, (int64_t[]){6, 3});
    graph_val m = ts_add(g, ts_matmul(x, y, 1, 0));                 /* [4, 3] */
    ts_output(g, ts_add(g, ts_permute(m, 2, (int8_t[]){1, 0})), 0); /* [3, 4] */
    graph_val b = ts_input(g, 2, KERN_F64, 3, (int64_t[]){2, 5, 4});
    graph_val c = ts_input(g, 3, KERN_F64, 3, (int64_t[]){2, 3, 4});
    graph_val mb = ts_add(g, ts_matmul(b, c, 0, 1));                    /* [2, 5, 3] */
    ts_output(g, ts_add(g, ts_permute(mb, 3, (int8_t[]){0, 2, 1})), 1); /* [2, 3, 5] */
}

Test(cai_graph_simplify, transpose_of_a_product_is_the_swapped_product) {
    const int64_t shapes[4][4] = {{6, 4}, {6, 3}, {2, 5, 4}, {2, 3, 4}};
    graph *g = ts_same_values(build_transposed_product, 4, shapes, (int[]){2, 2, 3, 3}, NULL, 0);
    cai_graph_dce(g);
    TS_OPS_ARE(g, "getitem getitem matmul output getitem getitem matmul output");
    ts_printed(g, "matmul(getitem_1, getitem, ta=1, tb=0)", true);
    ts_printed(g, "matmul(getitem_3, getitem_2, ta=0, tb=1)", true);
    cai_graph_free(g);
}

/* ... but not when the product is read elsewhere too: that would be two GEMMs */
Test(cai_graph_simplify, transpose_of_a_shared_product_stays) {
    graph *g = cai_graph_new();
    graph_val x = ts_input(g, 0, KERN_F64, 2, (int64_t[]){6, 4});
    graph_val y = ts_input(g, 1, KERN_F64, 2, (int64_t[]){6, 3});
    graph_val m = ts_add(g, ts_matmul(x, y, 1, 0));
    ts_output(g, ts_add(g, ts_permute(m, 2, (int8_t[]){1, 0})), 0);
    ts_output(g, m, 1);
    ts_simplify(g);
    TS_OPS_ARE(g, "getitem getitem matmul permute output output");
    cai_graph_free(g);
}

Test(cai_graph_simplify, permute_that_is_not_a_last_two_swap_stays) {
    graph *g = cai_graph_new();
    graph_val x = ts_input(g, 0, KERN_F64, 3, (int64_t[]){3, 2, 4});
    graph_val y = ts_input(g, 1, KERN_F64, 3, (int64_t[]){2, 4, 5});
    graph_val xp = ts_add(g, ts_permute(x, 3, (int8_t[]){1, 0, 2})); /* batch swap: [2, 3, 4] */
    graph_val m = ts_add(g, ts_matmul(xp, y, 0, 0));
    graph_val z = ts_input(g, 2, KERN_F64, 3, (int64_t[]){4, 3, 2});
    graph_val zp = ts_add(g, ts_permute(z, 3, (int8_t[]){2, 1, 0})); /* all reversed */
    graph_val m2 = ts_add(g, ts_matmul(zp, y, 0, 0));                /* [2, 3, 4] @ [2, 4, 5] */
    ts_output(g, m, 0);
    ts_output(g, m2, 1);
    ts_simplify(g);
    TS_OPS_ARE(g, "getitem getitem permute matmul getitem permute matmul output output");
    cai_graph_free(g);
}

static void build_leading_ones(graph *g) {
    graph_val x = ts_input(g, 0, KERN_F64, 2, (int64_t[]){3, 4});
    graph_val y = ts_input(g, 1, KERN_F64, 3, (int64_t[]){2, 4, 5});
    graph_val x3 = ts_add(g, ts_shape_op(g, GOP_RESHAPE, x, 3, (int64_t[]){1, 3, 4}));
    graph_val m = ts_add(g, ts_matmul(x3, y, 0, 0)); /* [2, 3, 5] either way */
    graph_val w = ts_input(g, 2, KERN_F64, 2, (int64_t[]){5, 2});
    graph_val w3 = ts_add(g, ts_one(GOP_UNSQUEEZE, w, 0));
    graph_val m2 = ts_add(g, ts_matmul(m, w3, 0, 0)); /* [2, 3, 2] */
    ts_output(g, m2, 0);
}

Test(cai_graph_simplify, leading_ones_before_a_matmul_drop) {
    const int64_t shapes[3][4] = {{3, 4}, {2, 4, 5}, {5, 2}};
    graph *g = ts_same_values(build_leading_ones, 3, shapes, (int[]){2, 3, 2}, NULL, 0);
    TS_OPS_ARE(g, "getitem getitem matmul getitem matmul output");
    cai_graph_free(g);
}

Test(cai_graph_simplify, leading_ones_stay_when_the_matmul_shape_would_change) {
    graph *g = cai_graph_new();
    graph_val x = ts_input(g, 0, KERN_F64, 2, (int64_t[]){3, 4});
    graph_val y = ts_input(g, 1, KERN_F64, 2, (int64_t[]){4, 5});
    graph_val x3 = ts_add(g, ts_shape_op(g, GOP_RESHAPE, x, 3, (int64_t[]){1, 3, 4}));
    ts_output(g, ts_add(g, ts_matmul(x3, y, 0, 0)), 0); /* [1, 3, 5]: the 1 is the result's */
    graph_val x2 = ts_add(g, ts_shape_op(g, GOP_RESHAPE, x, 2, (int64_t[]){4, 3}));
    ts_output(g, ts_add(g, ts_matmul(x2, x, 0, 0)), 1); /* a real reshape */
    ts_simplify(g);
    TS_OPS_ARE(g, "getitem getitem reshape matmul output reshape matmul output");
    cai_graph_free(g);
}

static void build_batch_expand_operand(graph *g) {
    graph_val x = ts_input(g, 0, KERN_F64, 2, (int64_t[]){3, 4});
    graph_val y = ts_input(g, 1, KERN_F64, 3, (int64_t[]){2, 4, 5});
    graph_val xe = ts_add(g, ts_shape_op(g, GOP_EXPAND, x, 3, (int64_t[]){2, 3, 4}));
    graph_val c = ts_add(g, ts_one(GOP_CONTIGUOUS, y, 0));
    ts_output(g, ts_add(g, ts_matmul(xe, c, 0, 0)), 0);
    graph_val z = ts_input(g, 2, KERN_F64, 2, (int64_t[]){1, 4});
    graph_val ze = ts_add(g, ts_shape_op(g, GOP_EXPAND, z, 2, (int64_t[]){3, 4})); /* rows */
    ts_output(g, ts_add(g, ts_matmul(ze, y, 0, 0)), 1);
}

Test(cai_graph_simplify, batch_expand_and_contiguous_before_a_matmul_drop) {
    const int64_t shapes[3][4] = {{3, 4}, {2, 4, 5}, {1, 4}};
    graph *g = ts_same_values(build_batch_expand_operand, 3, shapes, (int[]){2, 3, 2}, NULL, 0);
    /* the expand of a matrix dim stays */
    TS_OPS_ARE(g, "getitem getitem matmul output getitem expand matmul output");
    ts_printed(g, "matmul(getitem, getitem_1, ta=0, tb=0)", true);
    cai_graph_free(g);
}

/* ------------------------------------------------------------------ expand then sum */

static void build_expand_sum(graph *g) {
    graph_val y = ts_input(g, 0, KERN_F64, 2, (int64_t[]){3, 1});
    graph_val e = ts_add(g, ts_shape_op(g, GOP_EXPAND, y, 2, (int64_t[]){3, 4}));
    ts_output(g, ts_add(g, ts_sum(e, 2, 1)), 0); /* [3, 1] = 4 y */
    ts_output(g, ts_add(g, ts_sum(e, 2, 0)), 1); /* [3] */
    graph_val s = ts_input(g, 1, KERN_F64, 0, NULL);
    graph_val e2 = ts_add(g, ts_shape_op(g, GOP_EXPAND, s, 2, (int64_t[]){8, 3}));
    ts_output(g, ts_add(g, ts_shape_op(g, GOP_SUM_TO, e2, 1, (int64_t[]){3})), 2); /* 8 s */
    graph_val e3 = ts_add(g, ts_shape_op(g, GOP_EXPAND, y, 3, (int64_t[]){2, 3, 5}));
    ts_output(g, ts_add(g, ts_shape_op(g, GOP_SUM_TO, e3, 2, (int64_t[]){1, 5})), 3);
}

Test(cai_graph_simplify, expand_then_sum_becomes_a_multiply) {
    const int64_t shapes[2][4] = {{3, 1}, {0}};
    graph *g = ts_same_values(build_expand_sum, 2, shapes, (int[]){2, 0}, NULL, 1e-14);
    TS_OPS_ARE(g, "getitem mul_s output reshape output getitem mul_s expand output expand sum_to "
                  "output");
    char *text = cai_graph_print(g, false, NULL);
    cr_assert_not_null(text);
    cr_assert(strstr(text, "mul_s: \"f64[3, 1]\" = mul_s(getitem, 4)"), "%s", text);
    cr_assert(strstr(text, "reshape: \"f64[3]\" = reshape(mul_s, [3])"), "%s", text);
    cr_assert(strstr(text, "mul_s_1: \"f64[]\" = mul_s(getitem_1, 8)"), "%s", text);
    cr_assert(strstr(text, "expand: \"f64[3]\" = expand(mul_s_1, [3])"), "%s", text);
    /* [2, 3, 5] -> [1, 5] sums dim 1, where y has 3: a real sum */
    cr_assert(strstr(text, "sum_to(expand_1, [1, 5])"), "%s", text);
    cai_graph_free_string(text);
    cai_graph_free(g);
}

Test(cai_graph_simplify, expand_then_sum_values_by_hand) {
    graph *g = cai_graph_new();
    graph_val y = ts_input(g, 0, KERN_F32, 2, (int64_t[]){2, 1});
    graph_val e = ts_add(g, ts_shape_op(g, GOP_EXPAND, y, 3, (int64_t[]){5, 2, 3}));
    ts_output(g, ts_add(g, ts_shape_op(g, GOP_SUM_TO, e, 2, (int64_t[]){2, 3})), 0);
    ts_simplify(g);
    TS_OPS_ARE(g, "getitem mul_s expand output");
    float data[2] = {1.5f, -2.25f};
    graph_view in = ts_view(data, KERN_F32, 2, (int64_t[]){2, 1});
    static ts_rec r;
    memset(&r, 0, sizeof r);
    ts_run(g, NULL, &in, &r, false);
    cr_assert_eq(r.out_n[0], 6);
    ts_close(r.out[0], (double[]){7.5, 7.5, 7.5, -11.25, -11.25, -11.25}, 6, 1e-7, "sum_to");
    cai_graph_free(g);
}

Test(cai_graph_simplify, expand_then_sum_over_a_symbol_scales_at_run_time) {
    graph *g = cai_graph_new();
    graph_op_args in = {.op = GOP_INPUT, .i = {0}, .dtype = KERN_F64, .n_shape = 0};
    graph_val s = ts_add(g, in);
    graph_op_args ea = {.op = GOP_EXPAND, .n_in = 1, .in = {s}, .n_shape = 2};
    ea.shape[0] = cai_graph_sx_slot(g, 0);
    ea.shape[1] = ts_c(g, 3);
    graph_val e = ts_add(g, ea);
    ts_output(g, ts_add(g, ts_shape_op(g, GOP_SUM_TO, e, 1, (int64_t[]){3})), 0);
    ts_simplify(g);
    TS_OPS_ARE(g, "getitem scale_size expand output");
    ts_printed(g, "scale_size(getitem, 1, [s0], mul=1)", true);
    double x = 0.75;
    graph_view v = ts_view(&x, KERN_F64, 0, NULL);
    for (int64_t n = 2; n <= 7; n += 5) {
        static ts_rec r;
        memset(&r, 0, sizeof r);
        ts_run(g, &n, &v, &r, false);
        double want = 0.75 * (double)n;
        ts_close(r.out[0], (double[]){want, want, want}, 3, 1e-15, "sum over s0");
    }
    cai_graph_free(g);
}

Test(cai_graph_simplify, expand_then_a_real_sum_stays) {
    graph *g = cai_graph_new();
    graph_val y = ts_input(g, 0, KERN_F64, 2, (int64_t[]){3, 1});
    graph_val e = ts_add(g, ts_shape_op(g, GOP_EXPAND, y, 2, (int64_t[]){3, 4}));
    ts_output(g, ts_add(g, ts_sum(e, 3, 0)), 0); /* dim 0 was not broadcast */
    graph_val e0 = ts_add(g, ts_shape_op(g, GOP_EXPAND, y, 2, (int64_t[]){3, 0}));
    ts_output(g, ts_add(g, ts_sum(e0, 2, 0)), 1); /* an empty sum is 0, not 0 * y */
    ts_simplify(g);
    TS_OPS_ARE(g, "getitem expand sum output expand sum output");
    cai_graph_free(g);
}

Test(cai_graph_simplify, sum_over_nothing_or_ones) {
    graph *g = cai_graph_new();
    graph_val x = ts_input(g, 0, KERN_F64, 3, (int64_t[]){2, 1, 3});
    ts_output(g, ts_add(g, ts_sum(x, 0, 0)), 0);                                        /* x */
    ts_output(g, ts_add(g, ts_sum(x, 2, 1)), 1);                                        /* x */
    ts_output(g, ts_add(g, ts_sum(x, 2, 0)), 2);                                        /* [2, 3] */
    ts_output(g, ts_add(g, ts_shape_op(g, GOP_SUM_TO, x, 3, (int64_t[]){2, 1, 3})), 3); /* x */
    ts_simplify(g);
    TS_OPS_ARE(g, "getitem output output reshape output output");
    ts_printed(g, "return [getitem, getitem, reshape, getitem]", true);
    cai_graph_free(g);
}

/* ------------------------------------------------------------------ identities */

static void build_identities(graph *g) {
    graph_val x = ts_input(g, 0, KERN_F64, 2, (int64_t[]){2, 3});
    graph_val v = ts_add(g, ts_pw(KPW_MUL_S, 1, x, -1, 1.0));
    v = ts_add(g, ts_pw(KPW_ADD_S, 1, v, -1, 0.0));
    v = ts_add(g, ts_pw(KPW_SUB_S, 1, v, -1, 0.0));
    v = ts_add(g, ts_pw(KPW_DIV_S, 1, v, -1, 1.0));
    v = ts_add(g, ts_pw(KPW_COPY, 1, v, -1, 0));
    v = ts_add(g, ts_shape_op(g, GOP_RESHAPE, v, 2, (int64_t[]){2, 3}));
    v = ts_add(g, ts_shape_op(g, GOP_EXPAND, v, 2, (int64_t[]){2, 3}));
    v = ts_add(g, ts_permute(v, 2, (int8_t[]){0, 1}));
    graph_val t = ts_add(g, ts_permute(v, 2, (int8_t[]){1, 0}));
    v = ts_add(g, ts_permute(t, 2, (int8_t[]){1, 0})); /* back */
    v = ts_add(g, ts_one(GOP_UNSQUEEZE, v, 1));
    v = ts_add(g, ts_shape_op(g, GOP_RESHAPE, v, 2, (int64_t[]){2, 3})); /* back */
    graph_op_args cast = {.op = GOP_CAST, .n_in = 1, .in = {v}, .dtype = KERN_F64};
    v = ts_add(g, cast);
    graph_val zero = ts_add(g, ts_pw(KPW_FILL, 1, x, -1, 0.0));
    graph_val one = ts_add(g, ts_pw(KPW_FILL, 1, x, -1, 1.0));
    v = ts_add(g, ts_pw(KPW_ADD, 2, v, zero, 1.0));
    v = ts_add(g, ts_pw(KPW_ADD, 2, zero, v, 1.0));
    v = ts_add(g, ts_pw(KPW_SUB, 2, v, zero, 3.0));
    v = ts_add(g, ts_pw(KPW_MUL, 2, one, v, 0));
    v = ts_add(g, ts_pw(KPW_MUL, 2, v, one, 0));
    ts_output(g, v, 0);
}

Test(cai_graph_simplify, identities_drop) {
    const int64_t shapes[1][4] = {{2, 3}};
    graph *g = ts_same_values(build_identities, 1, shapes, (int[]){2}, NULL, 0);
    TS_OPS_ARE(g, "getitem output");
    ts_printed(g, "return [getitem]", true);
    cai_graph_free(g);
}

static void build_near_identities(graph *g) {
    graph_val x = ts_input(g, 0, KERN_F64, 2, (int64_t[]){2, 3});
    graph_val v = ts_add(g, ts_pw(KPW_MUL_S, 1, x, -1, 2.0));
    v = ts_add(g, ts_pw(KPW_ADD_S, 1, v, -1, 1.0));
    v = ts_add(g, ts_pw(KPW_RSUB_S, 1, v, -1, 0.0)); /* 0 - v */
    v = ts_add(g, ts_pw(KPW_MUL_S, 1, v, -1, 0.0));  /* NaN * 0 is not 0 */
    graph_val one = ts_add(g, ts_pw(KPW_FILL, 1, x, -1, 1.0));
    v = ts_add(g, ts_pw(KPW_ADD, 2, v, one, 1.0));
    graph_val zero = ts_add(g, ts_pw(KPW_FILL, 1, x, -1, 0.0));
    v = ts_add(g, ts_pw(KPW_ADD, 2, zero, v, 2.0)); /* 0 + 2 v */
    graph_val col = ts_input(g, 1, KERN_F64, 2, (int64_t[]){2, 1});
    graph_val w = ts_add(g, ts_pw(KPW_ADD, 2, col, zero, 1.0)); /* broadcasts: [2, 3] */
    graph_val c = ts_add(g, ts_one(GOP_CONTIGUOUS, x, 0));      /* of an input */
    ts_output(g, v, 0);
    ts_output(g, ts_add(g, ts_pw(KPW_MUL, 2, c, w, 0)), 1);
    graph_op_args cast = {.op = GOP_CAST, .n_in = 1, .in = {x}, .dtype = KERN_F32};
    ts_output(g, ts_add(g, cast), 2);
}

Test(cai_graph_simplify, near_identities_stay) {
    const int64_t shapes[2][4] = {{2, 3}, {2, 1}};
    graph *g = ts_same_values(build_near_identities, 2, shapes, (int[]){2, 2}, NULL, 0);
    TS_OPS_ARE(g, "getitem mul_s add_s rsub_s mul_s fill add fill add getitem add contiguous "
                  "output mul output cast output");
    cai_graph_free(g);
}

Test(cai_graph_simplify, contiguous_of_a_buffer_drops) {
    graph *g = cai_graph_new();
    graph_val x = ts_input(g, 0, KERN_F64, 2, (int64_t[]){2, 3});
    graph_val m = ts_add(g, ts_pw(KPW_EXP, 1, x, -1, 0));
    graph_val c = ts_add(g, ts_one(GOP_CONTIGUOUS, m, 0));
    graph_val c2 = ts_add(g, ts_one(GOP_CONTIGUOUS, ts_add(g, ts_permute(x, 2, (int8_t[]){1, 0})),
                                    0)); /* a view: stays */
    ts_output(g, c, 0);
    ts_output(g, c2, 1);
    ts_simplify(g);
    TS_OPS_ARE(g, "getitem exp permute contiguous output output");
    cai_graph_free(g);
}

Test(cai_graph_simplify, view_chains_fold) {
    graph *g = cai_graph_new();
    graph_val s = ts_input(g, 0, KERN_F64, 0, NULL);
    graph_val u = ts_add(g, ts_one(GOP_UNSQUEEZE, s, 0));
    u = ts_add(g, ts_one(GOP_UNSQUEEZE, u, 1));
    graph_val e = ts_add(g, ts_shape_op(g, GOP_EXPAND, u, 2, (int64_t[]){4, 2}));
    graph_val x = ts_input(g, 1, KERN_F64, 3, (int64_t[]){2, 3, 4});
    graph_val p = ts_add(g, ts_permute(x, 3, (int8_t[]){1, 2, 0}));  /* [3, 4, 2] */
    graph_val p2 = ts_add(g, ts_permute(p, 3, (int8_t[]){0, 2, 1})); /* [3, 2, 4] */
    graph_val r = ts_add(g, ts_shape_op(g, GOP_RESHAPE, x, 2, (int64_t[]){6, 4}));
    graph_val r2 = ts_add(g, ts_shape_op(g, GOP_RESHAPE, r, 1, (int64_t[]){24}));
    ts_output(g, e, 0);
    ts_output(g, p2, 1);
    ts_output(g, r2, 2);
    ts_simplify(g);
    TS_OPS_ARE(g, "getitem expand getitem permute reshape output output output");
    ts_printed(g, "expand(getitem, [4, 2])", true);
    ts_printed(g, "permute(getitem_1, [1, 0, 2])", true);
    ts_printed(g, "reshape(getitem_1, [24])", true);
    cai_graph_free(g);
}

/* ------------------------------------------------------------------ order and origins */

Test(cai_graph_simplify, new_nodes_keep_origin_and_place) {
    graph *g = cai_graph_new();
    graph_origin a = {1, "SumBackward0", 0}, b = {2, "AddBackward0", 0}, c = {3, "MulBackward0", 0};
    graph_val s = ts_input(g, 0, KERN_F64, 0, NULL);
    graph_val x = ts_input(g, 1, KERN_F64, 1, (int64_t[]){3});
    graph_val e = ts_add_o(g, ts_shape_op(g, GOP_EXPAND, s, 2, (int64_t[]){8, 3}), a);
    graph_val t = ts_add_o(g, ts_shape_op(g, GOP_SUM_TO, e, 1, (int64_t[]){3}), b);
    graph_val m = ts_add_o(g, ts_pw(KPW_MUL, 2, t, x, 0), c);
    ts_add_o(g, ts_one(GOP_ACCUMULATE, m, 0), c);
    int rewrites = ts_simplify(g);
    cr_assert_eq(rewrites, 1, "%d rewrites", rewrites);
    char *text = cai_graph_print(g, false, NULL);
    cr_assert_not_null(text);
    const char *want = "    # AddBackward0 (NodeCall 2)\n"
                       "    aot0_mul_s: \"f64[]\" = mul_s(getitem, 8)\n"
                       "    aot0_expand: \"f64[3]\" = expand(aot0_mul_s, [3])\n"
                       "    # MulBackward0 (NodeCall 3)\n"
                       "    aot0_mul: \"f64[3]\" = mul(aot0_expand, getitem_1)\n"
                       "    accumulate_grad(leaf=0, aot0_mul)\n";
    cr_assert(strstr(text, want), "got:\n%s", text);
    cai_graph_free_string(text);
    /* every node reads only earlier ones */
    for (int v = 0; v < cai_graph_count(g); v++) {
        const graph_node *n = cai_graph_node_at(g, v);
        for (int k = 0; !n->dead && k < n->a.n_in; k++)
            cr_assert(n->a.in[k] < v && !cai_graph_node_at(g, n->a.in[k])->dead);
    }
    cai_graph_free(g);
}

Test(cai_graph_simplify, nothing_to_do_and_null) {
    graph *g = cai_graph_new();
    graph_val x = ts_input(g, 0, KERN_F64, 1, (int64_t[]){3});
    ts_output(g, ts_add(g, ts_pw(KPW_EXP, 1, x, -1, 0)), 0);
    cr_assert_eq(cai_graph_simplify(g), 0);
    TS_OPS_ARE(g, "getitem exp output");
    cr_assert_eq(cai_graph_simplify(NULL), -1);
    cai_graph_free(g);
}

static long ts_allocs, ts_fail_at;

static void *ts_failing_alloc(size_t n) {
    if (++ts_allocs == ts_fail_at)
        return NULL;
    return aligned_alloc(64, (n + 63) / 64 * 64 + 64);
}

Test(cai_graph_simplify, out_of_memory_leaves_the_graph_unchanged) {
    for (ts_fail_at = 1; ts_fail_at <= 8; ts_fail_at++) {
        graph *g = cai_graph_new();
        graph_val y = ts_input(g, 0, KERN_F64, 2, (int64_t[]){3, 1});
        graph_val e = ts_add(g, ts_shape_op(g, GOP_EXPAND, y, 2, (int64_t[]){3, 4}));
        ts_output(g, ts_add(g, ts_sum(e, 2, 0)), 0);
        char before[512], after[512];
        ts_ops(g, before, sizeof before);
        ts_allocs = 0;
        cai_graph_set_allocator((kern_allocator){ts_failing_alloc, free});
        int n = cai_graph_simplify(g);
        cai_graph_set_allocator((kern_allocator){NULL, NULL});
        ts_ops(g, after, sizeof after);
        if (n < 0) {
            cr_assert_str_eq(after, before);
            cr_assert(cai_graph_out_of_memory(g));
        } else {
            cai_graph_dce(g); /* a rewrite that could not get its nodes is skipped */
            ts_ops(g, after, sizeof after);
            cr_assert(strcmp(after, "getitem mul_s reshape output") == 0 ||
                          strcmp(after, before) == 0,
                      "%s", after);
        }
        cai_graph_free(g);
    }
}

/* ------------------------------------------------------------------ GEMM into .grad */

/* x [m, k] @ y [k, n] -> accumulate_grad(leaf 0); an output reads it too when `shared`;
 * between the GEMM and the accumulation, a hook when `between` is 1, a slice (it may fail
 * on the data) when 2. */
static graph *build_gemm_acc(kern_dtype dt, int64_t m, int64_t k, int64_t n, bool shared,
                             int between) {
    graph *g = cai_graph_new();
    graph_val x = ts_input(g, 0, dt, 2, (int64_t[]){m, k});
    graph_val y = ts_input(g, 1, dt, 2, (int64_t[]){k, n});
    graph_val p = ts_add(g, ts_matmul(x, y, 0, 0));
    if (between == 1)
        ts_add(g, ts_one(GOP_HOOK, x, 0));
    if (between == 2)
        ts_output(
            g, ts_add(g, (graph_op_args){.op = GOP_SLICE, .n_in = 1, .in = {x}, .i = {0, 0, 1, 1}}),
            1);
    graph_val a = ts_add(g, ts_one(GOP_ACCUMULATE, p, 0));
    ts_add(g, (graph_op_args){.op = GOP_POST_HOOK, .n_in = 1, .in = {a}, .i = {0, 0}});
    if (shared)
        ts_output(g, p, 0);
    return g;
}

static void ref_gemm(const double *x, const double *y, int64_t m, int64_t k, int64_t n,
                     double *out) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t t = 0; t < k; t++)
                s += x[i * k + t] * y[t * n + j];
            out[i * n + j] = s;
        }
}

typedef struct {
    double x[12], y[20], want[15];
    graph_view in[2];
} gemm_case;

static void gemm_case_init(gemm_case *c) {
    ts_fill(c->x, 12, 3);
    ts_fill(c->y, 20, 4);
    c->in[0] = ts_view(c->x, KERN_F64, 2, (int64_t[]){3, 4});
    c->in[1] = ts_view(c->y, KERN_F64, 2, (int64_t[]){4, 5});
    ref_gemm(c->x, c->y, 3, 4, 5, c->want);
}

Test(cai_graph_simplify, gemm_writes_a_fresh_grad) {
    gemm_case c;
    gemm_case_init(&c);
    graph *g = build_gemm_acc(KERN_F64, 3, 4, 5, false, 0);
    double grad[15];
    for (int i = 0; i < 15; i++)
        grad[i] = NAN; /* fresh memory: every element must be written */
    static ts_rec r;
    memset(&r, 0, sizeof r);
    r.dst = ts_view(grad, KERN_F64, 2, (int64_t[]){3, 5});
    r.has_grad = false;
    ts_run(g, NULL, c.in, &r, true);
    cr_assert_eq(r.target_calls, 1);
    cr_assert_eq(r.calls[GOP_ACCUMULATE], 0, "the accumulate call must be skipped");
    cr_assert_eq(r.calls[GOP_POST_HOOK], 1, "post hooks still run");
    cr_assert_eq(r.value.dtype, KERN_F64);
    cr_assert(r.value.ndim == 2 && r.value.shape[0] == 3 && r.value.shape[1] == 5);
    ts_close(grad, c.want, 15, 1e-13, "fresh grad");
    cai_graph_free(g);
}

Test(cai_graph_simplify, gemm_adds_onto_a_grad_that_is_there) {
    gemm_case c;
    gemm_case_init(&c);
    graph *g = build_gemm_acc(KERN_F64, 3, 4, 5, false, 0);
    double grad[15], want[15];
    for (int i = 0; i < 15; i++) {
        grad[i] = 0.5 * i - 3;
        want[i] = grad[i] + c.want[i];
    }
    static ts_rec r;
    memset(&r, 0, sizeof r);
    r.dst = ts_view(grad, KERN_F64, 2, (int64_t[]){3, 5});
    r.has_grad = true;
    ts_run(g, NULL, c.in, &r, true);
    cr_assert_eq(r.target_calls, 1);
    cr_assert_eq(r.calls[GOP_ACCUMULATE], 0);
    ts_close(grad, want, 15, 1e-13, "accumulated grad");
    cai_graph_free(g);
}

Test(cai_graph_simplify, gemm_into_grad_f32_batched) {
    graph *g = cai_graph_new();
    graph_val x = ts_input(g, 0, KERN_F32, 3, (int64_t[]){2, 3, 4});
    graph_val y = ts_input(g, 1, KERN_F32, 2, (int64_t[]){5, 4});
    graph_val p = ts_add(g, ts_matmul(x, y, 0, 1)); /* [2, 3, 5] */
    ts_add(g, ts_one(GOP_ACCUMULATE, p, 0));
    float xd[24], yd[20], grad[30];
    double want[30];
    for (int i = 0; i < 24; i++)
        xd[i] = (float)sin(i + 1.0);
    for (int i = 0; i < 20; i++)
        yd[i] = (float)cos(i * 0.7);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 5; j++) {
                double s = 1.0; /* the grad held 1s */
                for (int t = 0; t < 4; t++)
                    s += (double)xd[b * 12 + i * 4 + t] * yd[j * 4 + t];
                want[b * 15 + i * 5 + j] = s;
            }
    for (int i = 0; i < 30; i++)
        grad[i] = 1.0f;
    graph_view in[2] = {ts_view(xd, KERN_F32, 3, (int64_t[]){2, 3, 4}),
                        ts_view(yd, KERN_F32, 2, (int64_t[]){5, 4})};
    static ts_rec r;
    memset(&r, 0, sizeof r);
    r.dst = ts_view(grad, KERN_F32, 3, (int64_t[]){2, 3, 5});
    r.has_grad = true;
    ts_run(g, NULL, in, &r, true);
    cr_assert_eq(r.calls[GOP_ACCUMULATE], 0);
    double got[30];
    for (int i = 0; i < 30; i++)
        got[i] = grad[i];
    ts_close(got, want, 30, 1e-5, "f32 batched grad");
    cai_graph_free(g);
}

/* The ordinary call ran with the GEMM's value, and dst was left alone. */
static void assert_not_folded(const ts_rec *r, const gemm_case *c, const double *grad,
                              double grad0) {
    cr_assert_eq(r->calls[GOP_ACCUMULATE], 1, "the accumulate call must run");
    cr_assert_eq(r->acc_n[0], 15);
    ts_close(r->acc[0], c->want, 15, 1e-13, "accumulated value");
    for (int i = 0; grad && i < 15; i++)
        cr_assert_eq(grad[i], grad0, "dst[%d] was written", i);
}

Test(cai_graph_simplify, gemm_used_twice_or_behind_a_barrier_is_not_folded) {
    gemm_case c;
    gemm_case_init(&c);
    for (int variant = 0; variant < 3; variant++) {
        graph *g = build_gemm_acc(KERN_F64, 3, 4, 5, variant == 0, variant);
        double grad[15];
        for (int i = 0; i < 15; i++)
            grad[i] = 2.0;
        static ts_rec r;
        memset(&r, 0, sizeof r);
        r.dst = ts_view(grad, KERN_F64, 2, (int64_t[]){3, 5});
        r.has_grad = true;
        ts_run(g, NULL, c.in, &r, true);
        cr_assert_eq(r.target_calls, 0, "variant %d: the target must not be asked", variant);
        assert_not_folded(&r, &c, grad, 2.0);
        cai_graph_free(g);
    }
}

Test(cai_graph_simplify, gemm_without_target_declined_or_unusable) {
    gemm_case c;
    gemm_case_init(&c);
    graph *g = build_gemm_acc(KERN_F64, 3, 4, 5, false, 0);
    double grad[15];
    static ts_rec r;
    /* no callback */
    memset(&r, 0, sizeof r);
    ts_run(g, NULL, c.in, &r, false);
    assert_not_folded(&r, &c, NULL, 0);
    /* declined */
    memset(&r, 0, sizeof r);
    r.decline = true;
    ts_run(g, NULL, c.in, &r, true);
    cr_assert_eq(r.target_calls, 1);
    assert_not_folded(&r, &c, NULL, 0);
    /* a .grad that is there but not contiguous (a transposed [5, 3]) */
    for (int i = 0; i < 15; i++)
        grad[i] = 2.0;
    memset(&r, 0, sizeof r);
    r.dst = (graph_view){
        .data = grad, .dtype = KERN_F64, .ndim = 2, .shape = {3, 5}, .strides = {1, 3}};
    r.has_grad = true;
    ts_run(g, NULL, c.in, &r, true);
    assert_not_folded(&r, &c, grad, 2.0);
    /* a .grad of another shape */
    memset(&r, 0, sizeof r);
    r.dst = ts_view(grad, KERN_F64, 2, (int64_t[]){5, 3});
    r.has_grad = true;
    ts_run(g, NULL, c.in, &r, true);
    assert_not_folded(&r, &c, grad, 2.0);
    cai_graph_free(g);
}

Test(cai_graph_simplify, gemm_into_a_fresh_strided_grad_copies) {
    gemm_case c;
    gemm_case_init(&c);
    graph *g = build_gemm_acc(KERN_F64, 3, 4, 5, false, 0);
    double grad[15];
    static ts_rec r;
    memset(&r, 0, sizeof r);
    r.dst = (graph_view){
        .data = grad, .dtype = KERN_F64, .ndim = 2, .shape = {3, 5}, .strides = {1, 3}};
    r.has_grad = false;
    ts_run(g, NULL, c.in, &r, true);
    cr_assert_eq(r.calls[GOP_ACCUMULATE], 0);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++)
            cr_assert(fabs(grad[j * 3 + i] - c.want[i * 5 + j]) < 1e-13);
    cai_graph_free(g);
}

Test(cai_graph_simplify, gemm_into_a_grad_its_operand_reads_is_not_folded) {
    /* x [3, 3] @ y [3, 3] accumulated into a .grad that is y's memory */
    graph *g = cai_graph_new();
    graph_val x = ts_input(g, 0, KERN_F64, 2, (int64_t[]){3, 3});
    graph_val y = ts_input(g, 1, KERN_F64, 2, (int64_t[]){3, 3});
    ts_add(g, ts_one(GOP_ACCUMULATE, ts_add(g, ts_matmul(x, y, 0, 0)), 0));
    double xd[9], yd[9], want[9];
    ts_fill(xd, 9, 1);
    ts_fill(yd, 9, 2);
    ref_gemm(xd, yd, 3, 3, 3, want);
    graph_view in[2] = {ts_view(xd, KERN_F64, 2, (int64_t[]){3, 3}),
                        ts_view(yd, KERN_F64, 2, (int64_t[]){3, 3})};
    static ts_rec r;
    memset(&r, 0, sizeof r);
    r.dst = in[1];
    r.has_grad = true;
    ts_run(g, NULL, in, &r, true);
    cr_assert_eq(r.target_calls, 1);
    cr_assert_eq(r.calls[GOP_ACCUMULATE], 1);
    ts_close(r.acc[0], want, 9, 1e-13, "value");
    cai_graph_free(g);
}

Test(cai_graph_simplify, gemm_into_grad_with_an_empty_inner_dim) {
    graph *g = build_gemm_acc(KERN_F64, 3, 0, 5, false, 0);
    double grad[15];
    graph_view in[2] = {ts_view(NULL, KERN_F64, 2, (int64_t[]){3, 0}),
                        ts_view(NULL, KERN_F64, 2, (int64_t[]){0, 5})};
    for (int has = 0; has < 2; has++) {
        for (int i = 0; i < 15; i++)
            grad[i] = 4.0;
        static ts_rec r;
        memset(&r, 0, sizeof r);
        r.dst = ts_view(grad, KERN_F64, 2, (int64_t[]){3, 5});
        r.has_grad = has;
        ts_run(g, NULL, in, &r, true);
        cr_assert_eq(r.calls[GOP_ACCUMULATE], 0);
        for (int i = 0; i < 15; i++)
            cr_assert_eq(grad[i], has ? 4.0 : 0.0);
    }
    cai_graph_free(g);
}
