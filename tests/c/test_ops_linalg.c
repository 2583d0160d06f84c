/* test_ops_linalg.c - Criterion suite `linalg`: matmul (every transpose-flag combination,
 * broadcast batches, the 1-D cases of torch.matmul), mm, bmm, addmm and linear (and the
 * nodes linear records), against a naive
 * triple loop; their gradients against finite differences; and their error messages.
 */
#include "testutil.h"

#include "autograd/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Reference: C = op(A) @ op(B) with batch broadcasting, by a triple loop over logical
 * elements (so any strides work).
 */
static int64_t flat_of(int nd, const int64_t *shape, const int64_t *idx) {
    int64_t f = 0;
    for (int d = 0; d < nd; d++)
        f = f * shape[d] + idx[d];
    return f;
}

/* Element (batch idx of the output, r, c) of a matrix operand, with `trans` applied. */
static double mat_at(const ca_tensor *t, bool trans, int nb_out, const int64_t *bidx, int64_t r,
                     int64_t c) {
    int nd = ca_tensor_ndim(t);
    const int64_t *shape = ca_tensor_shape(t);
    int64_t idx[CA_MAX_DIMS];
    for (int d = 0; d < nd - 2; d++) {
        int od = d + (nb_out - (nd - 2));
        idx[d] = shape[d] == 1 ? 0 : bidx[od];
    }
    idx[nd - 2] = trans ? c : r;
    idx[nd - 1] = trans ? r : c;
    return tu_get(t, flat_of(nd, shape, idx));
}

static void check_matmul(const ca_tensor *a, const ca_tensor *b, bool ta, bool tb,
                         const ca_tensor *out, double tol) {
    int nd = ca_tensor_ndim(out), nb = nd - 2;
    const int64_t *os = ca_tensor_shape(out);
    int64_t M = os[nd - 2], N = os[nd - 1];
    const int64_t *as = ca_tensor_shape(a);
    int64_t K = ta ? as[ca_tensor_ndim(a) - 2] : as[ca_tensor_ndim(a) - 1];
    int64_t n = ca_tensor_numel(out);
    for (int64_t i = 0; i < n; i++) {
        int64_t idx[CA_MAX_DIMS], rem = i;
        for (int d = nd - 1; d >= 0; d--) {
            idx[d] = rem % os[d];
            rem /= os[d];
        }
        double ref = 0;
        for (int64_t k = 0; k < K; k++)
            ref += mat_at(a, ta, nb, idx, idx[nb], k) * mat_at(b, tb, nb, idx, k, idx[nb + 1]);
        double got = tu_get(out, i);
        cr_assert(fabs(got - ref) <= tol * (1 + fabs(ref)),
                  "element %lld: got %.10g, expected %.10g (M %lld N %lld K %lld)", (long long)i,
                  got, ref, (long long)M, (long long)N, (long long)K);
    }
}

static ca_status matmul_flags(ca_tensor *a, ca_tensor *b, bool ta, bool tb, ca_tensor **out) {
    ca_attrs at = {.i = {ta, tb}};
    return cai_op_call2(CA_OP_MATMUL, a, b, &at, out);
}

/* ---------------------------------------------------------------------------------------
 * Forward
 */
Test(linalg, mm_forward_hand_values) {
    ca_tensor *a = tu_from(CA_FLOAT64, TU_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6}, false);
    ca_tensor *b = tu_from(CA_FLOAT64, TU_SHAPE(3, 2), (double[]){7, 8, 9, 10, 11, 12}, false);
    ca_tensor *c = NULL;
    TU_OK(ca_mm(a, b, &c));
    tu_assert_shape(c, TU_SHAPE(2, 2));
    tu_assert_values(c, (double[]){58, 64, 139, 154}, 0);
    cr_assert_null(ca_tensor_grad_fn_name(c));
    ca_tensor_release(a);
    ca_tensor_release(b);
    ca_tensor_release(c);
}

Test(linalg, mm_forward_f32_f64_noncontig) {
    ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int k = 0; k < 2; k++) {
        double tol = dts[k] == CA_FLOAT32 ? 1e-5 : 1e-12;
        ca_tensor *a = tu_randn(dts[k], TU_SHAPE(5, 7), false);
        ca_tensor *b = tu_randn(dts[k], TU_SHAPE(7, 4), false);
        ca_tensor *at = tu_randn_noncontig(dts[k], TU_SHAPE(5, 7), false);
        ca_tensor *bt = tu_randn_noncontig(dts[k], TU_SHAPE(7, 4), false);
        ca_tensor *pairs[4][2] = {{a, b}, {at, b}, {a, bt}, {at, bt}};
        for (int p = 0; p < 4; p++) {
            ca_tensor *c = NULL;
            TU_OK(ca_mm(pairs[p][0], pairs[p][1], &c));
            cr_assert_eq(ca_tensor_dtype(c), dts[k]);
            check_matmul(pairs[p][0], pairs[p][1], false, false, c, tol);
            ca_tensor_release(c);
        }
        ca_tensor_release(a);
        ca_tensor_release(b);
        ca_tensor_release(at);
        ca_tensor_release(bt);
    }
}

Test(linalg, matmul_flags_forward_all_combos) {
    ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int k = 0; k < 2; k++) {
        double tol = dts[k] == CA_FLOAT32 ? 1e-5 : 1e-12;
        for (int f = 0; f < 4; f++) {
            bool ta = f & 1, tb = f & 2;
            /* op(a): [2, 3, 4], op(b): [4, 5] broadcast over the batch */
            ca_tensor *a = ta ? tu_randn(dts[k], TU_SHAPE(2, 4, 3), false)
                              : tu_randn(dts[k], TU_SHAPE(2, 3, 4), false);
            ca_tensor *b = tb ? tu_randn(dts[k], TU_SHAPE(5, 4), false)
                              : tu_randn(dts[k], TU_SHAPE(4, 5), false);
            ca_tensor *c = NULL;
            TU_OK(matmul_flags(a, b, ta, tb, &c));
            tu_assert_shape(c, TU_SHAPE(2, 3, 5));
            check_matmul(a, b, ta, tb, c, tol);
            ca_tensor_release(a);
            ca_tensor_release(b);
            ca_tensor_release(c);
        }
    }
}

Test(linalg, matmul_broadcast_batch_forward) {
    ca_tensor *a = tu_randn(CA_FLOAT64, TU_SHAPE(2, 1, 3, 4), false);
    ca_tensor *b = tu_randn(CA_FLOAT64, TU_SHAPE(3, 4, 5), false);
    ca_tensor *c = NULL;
    TU_OK(ca_matmul(a, b, &c));
    tu_assert_shape(c, TU_SHAPE(2, 3, 3, 5));
    check_matmul(a, b, false, false, c, 1e-12);
    ca_tensor_release(c);
    /* the other way round, and a batch whose strides do not collapse (outer loop) */
    ca_tensor *d = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3, 3, 4), false);
    ca_tensor *e = tu_randn(CA_FLOAT32, TU_SHAPE(1, 3, 4, 2), false);
    TU_OK(ca_matmul(d, e, &c));
    tu_assert_shape(c, TU_SHAPE(2, 3, 3, 2));
    check_matmul(d, e, false, false, c, 1e-5);
    ca_tensor_release(c);
    ca_tensor_release(a);
    ca_tensor_release(b);
    ca_tensor_release(d);
    ca_tensor_release(e);
}

Test(linalg, matmul_noncontig_batched) {
    for (int f = 0; f < 4; f++) {
        bool ta = f & 1, tb = f & 2;
        ca_tensor *a = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3, 4, 4), false);
        ca_tensor *b = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(1, 4, 4), false);
        ca_tensor *c = NULL;
        TU_OK(matmul_flags(a, b, ta, tb, &c));
        tu_assert_shape(c, TU_SHAPE(3, 4, 4));
        check_matmul(a, b, ta, tb, c, 1e-12);
        ca_tensor_release(a);
        ca_tensor_release(b);
        ca_tensor_release(c);
    }
}

static void check_linear(const ca_tensor *x, const ca_tensor *w, const ca_tensor *bias,
                         const ca_tensor *y, double tol);

Test(linalg, matmul_expanded_operand) {
    /* a matrix with a stride-0 row dim: cblas cannot take it as is */
    ca_tensor *row = tu_randn(CA_FLOAT64, TU_SHAPE(1, 4), false);
    ca_tensor *a = NULL, *c = NULL;
    TU_OK(ca_expand(row, TU_SHAPE(3, 4), &a));
    ca_tensor *b = tu_randn(CA_FLOAT64, TU_SHAPE(4, 2), false);
    TU_OK(ca_matmul(a, b, &c));
    check_matmul(a, b, false, false, c, 1e-12);
    ca_tensor_release(c);
    ca_tensor *w = tu_randn(CA_FLOAT64, TU_SHAPE(2, 4), false); /* the same through linear */
    TU_OK(ca_linear(a, w, NULL, &c));
    check_linear(a, w, NULL, c, 1e-12);
    ca_tensor_release(c);
    ca_tensor_release(w);
    ca_tensor_release(row);
    ca_tensor_release(a);
    ca_tensor_release(b);
}

Test(linalg, matmul_one_d_cases) {
    ca_tensor *v3 = tu_from(CA_FLOAT64, TU_SHAPE(3), (double[]){1, 2, 3}, false);
    ca_tensor *w3 = tu_from(CA_FLOAT64, TU_SHAPE(3), (double[]){4, 5, 6}, false);
    ca_tensor *m23 = tu_from(CA_FLOAT64, TU_SHAPE(2, 3), (double[]){1, 0, 2, 0, 1, 1}, false);
    ca_tensor *m32 = tu_from(CA_FLOAT64, TU_SHAPE(3, 2), (double[]){1, 0, 0, 1, 1, 1}, false);
    ca_tensor *b232 = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3, 2), false);
    ca_tensor *b223 = tu_randn(CA_FLOAT64, TU_SHAPE(2, 2, 3), false);
    ca_tensor *c = NULL;

    TU_OK(ca_matmul(v3, w3, &c)); /* dot: 0-d */
    cr_assert_eq(ca_tensor_ndim(c), 0);
    tu_assert_values(c, (double[]){32}, 0);
    ca_tensor_release(c);

    TU_OK(ca_matmul(v3, m32, &c)); /* [3] @ [3, 2] -> [2] */
    tu_assert_shape(c, TU_SHAPE(2));
    tu_assert_values(c, (double[]){4, 5}, 0);
    ca_tensor_release(c);

    TU_OK(ca_matmul(m23, v3, &c)); /* [2, 3] @ [3] -> [2] */
    tu_assert_shape(c, TU_SHAPE(2));
    tu_assert_values(c, (double[]){7, 5}, 0);
    ca_tensor_release(c);

    TU_OK(ca_matmul(v3, b232, &c)); /* [3] @ [2, 3, 2] -> [2, 2] */
    tu_assert_shape(c, TU_SHAPE(2, 2));
    for (int64_t i = 0; i < 4; i++) {
        int64_t bt = i / 2, col = i % 2;
        double ref = 0;
        for (int64_t k = 0; k < 3; k++)
            ref += (k + 1) * tu_get(b232, bt * 6 + k * 2 + col);
        cr_assert(fabs(tu_get(c, i) - ref) < 1e-12);
    }
    ca_tensor_release(c);

    TU_OK(ca_matmul(b223, v3, &c)); /* [2, 2, 3] @ [3] -> [2, 2] */
    tu_assert_shape(c, TU_SHAPE(2, 2));
    for (int64_t i = 0; i < 4; i++) {
        double ref = 0;
        for (int64_t k = 0; k < 3; k++)
            ref += tu_get(b223, i * 3 + k) * (k + 1);
        cr_assert(fabs(tu_get(c, i) - ref) < 1e-12);
    }
    ca_tensor_release(c);

    ca_tensor *all[] = {v3, w3, m23, m32, b232, b223};
    for (int i = 0; i < 6; i++)
        ca_tensor_release(all[i]);
}

Test(linalg, bmm_forward) {
    ca_tensor *a = tu_randn(CA_FLOAT32, TU_SHAPE(3, 2, 5), false);
    ca_tensor *b = tu_randn_noncontig(CA_FLOAT32, TU_SHAPE(3, 5, 4), false);
    ca_tensor *c = NULL;
    TU_OK(ca_bmm(a, b, &c));
    tu_assert_shape(c, TU_SHAPE(3, 2, 4));
    check_matmul(a, b, false, false, c, 1e-5);
    ca_tensor_release(a);
    ca_tensor_release(b);
    ca_tensor_release(c);
}

Test(linalg, empty_inner_dim_gives_zeros) {
    ca_tensor *a = tu_randn(CA_FLOAT64, TU_SHAPE(2, 0), false);
    ca_tensor *b = tu_randn(CA_FLOAT64, TU_SHAPE(0, 3), false);
    ca_tensor *c = NULL;
    TU_OK(ca_mm(a, b, &c));
    tu_assert_shape(c, TU_SHAPE(2, 3));
    tu_assert_values(c, (double[]){0, 0, 0, 0, 0, 0}, 0);
    ca_tensor_release(a);
    ca_tensor_release(b);
    ca_tensor_release(c);
}

/* y[r, o] = sum_i x[r, i] w[o, i] + bias[o] */
static void check_linear(const ca_tensor *x, const ca_tensor *w, const ca_tensor *bias,
                         const ca_tensor *y, double tol) {
    int64_t nin = ca_tensor_shape(w)[1], nout = ca_tensor_shape(w)[0];
    int64_t rows = ca_tensor_numel(x) / nin;
    cr_assert_eq(ca_tensor_numel(y), rows * nout);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < nout; o++) {
            double ref = bias ? tu_get(bias, o) : 0;
            for (int64_t i = 0; i < nin; i++)
                ref += tu_get(x, r * nin + i) * tu_get(w, o * nin + i);
            double got = tu_get(y, r * nout + o);
            cr_assert(fabs(got - ref) <= tol * (1 + fabs(ref)), "[%lld, %lld]: %g vs %g",
                      (long long)r, (long long)o, got, ref);
        }
}

Test(linalg, linear_forward) {
    ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int k = 0; k < 2; k++) {
        double tol = dts[k] == CA_FLOAT32 ? 1e-5 : 1e-12;
        ca_tensor *x2 = tu_randn(dts[k], TU_SHAPE(4, 3), false);
        ca_tensor *x3 = tu_randn(dts[k], TU_SHAPE(2, 4, 3), false);
        ca_tensor *xn = tu_randn_noncontig(dts[k], TU_SHAPE(2, 4, 3), false);
        ca_tensor *x1 = tu_randn(dts[k], TU_SHAPE(3), false);
        ca_tensor *w = tu_randn(dts[k], TU_SHAPE(5, 3), false);
        ca_tensor *wn = tu_randn_noncontig(dts[k], TU_SHAPE(5, 3), false);
        ca_tensor *bias = tu_randn(dts[k], TU_SHAPE(5), false);
        ca_tensor *xs[4] = {x2, x3, xn, x1}, *ws[2] = {w, wn}, *bs[2] = {NULL, bias};
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 2; j++)
                for (int l = 0; l < 2; l++) {
                    ca_tensor *y = NULL;
                    TU_OK(ca_linear(xs[i], ws[j], bs[l], &y));
                    int nd = ca_tensor_ndim(xs[i]);
                    cr_assert_eq(ca_tensor_ndim(y), nd);
                    cr_assert_eq(ca_tensor_shape(y)[nd - 1], 5);
                    check_linear(xs[i], ws[j], bs[l], y, tol);
                    ca_tensor_release(y);
                }
        ca_tensor *all[] = {x2, x3, xn, x1, w, wn, bias};
        for (int i = 0; i < 7; i++)
            ca_tensor_release(all[i]);
    }
}

/* ---------------------------------------------------------------------------------------
 * Gradients
 */
static ca_status f_mm(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ca_mm(in[0], in[1], out);
}
static ca_status f_bmm(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ca_bmm(in[0], in[1], out);
}
static ca_status f_matmul(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ca_matmul(in[0], in[1], out);
}
static ca_status f_matmul_flags(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    const int *fl = ctx;
    return matmul_flags(in[0], in[1], fl[0], fl[1], out);
}
static ca_status f_linear(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ca_linear(in[0], in[1], ctx ? in[2] : NULL, out);
}

/* Gradcheck f on (a, b), check the node name of one call, and release a and b. */
static void check_grad_and_node(tu_fn f, ca_tensor *a, ca_tensor *b, void *ctx,
                                const char *node_name) {
    ca_tensor *in[2] = {a, b};
    tu_gradcheck(f, 2, in, ctx, 1e-7, 1e-6);
    ca_tensor *c = NULL;
    TU_OK(f(in, &c, ctx));
    cr_assert_str_eq(ca_tensor_grad_fn_name(c), node_name);
    ca_tensor_release(c);
    ca_tensor_release(a);
    ca_tensor_release(b);
}

Test(linalg, mm_grad) {
    ca_tensor *a = tu_randn(CA_FLOAT64, TU_SHAPE(3, 4), true);
    ca_tensor *b = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(4, 2), true);
    check_grad_and_node(f_mm, a, b, NULL, "MmBackward0");
}

Test(linalg, bmm_grad) {
    ca_tensor *a = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(2, 3, 4), true);
    ca_tensor *b = tu_randn(CA_FLOAT64, TU_SHAPE(2, 4, 2), true);
    check_grad_and_node(f_bmm, a, b, NULL, "BmmBackward0");
}

Test(linalg, matmul_flags_grad_all_combos) {
    for (int f = 0; f < 4; f++) {
        int fl[2] = {f & 1, (f >> 1) & 1};
        /* op(a): [2, 3, 4] batch-broadcast against op(b): [1, 4, 2] */
        ca_tensor *a = fl[0] ? tu_randn(CA_FLOAT64, TU_SHAPE(2, 4, 3), true)
                             : tu_randn(CA_FLOAT64, TU_SHAPE(2, 3, 4), true);
        ca_tensor *b = fl[1] ? tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(1, 2, 4), true)
                             : tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(1, 4, 2), true);
        check_grad_and_node(f_matmul_flags, a, b, fl, "MatmulBackward0");
    }
}

Test(linalg, matmul_broadcast_batch_grad) {
    ca_tensor *a = tu_randn(CA_FLOAT64, TU_SHAPE(2, 1, 3, 2), true);
    ca_tensor *b = tu_randn(CA_FLOAT64, TU_SHAPE(3, 2, 2), true);
    ca_tensor *in[2] = {a, b};
    tu_gradcheck(f_matmul, 2, in, NULL, 1e-7, 1e-6);
    /* a 2-D operand against a batch, on either side */
    ca_tensor *m = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3), true);
    ca_tensor *in2[2] = {m, a}, *in3[2] = {b, m};
    tu_gradcheck(f_matmul, 2, in2, NULL, 1e-7, 1e-6);
    tu_gradcheck(f_matmul, 2, in3, NULL, 1e-7, 1e-6);
    ca_tensor_release(a);
    ca_tensor_release(b);
    ca_tensor_release(m);
}

Test(linalg, matmul_one_d_grad) {
    ca_tensor *v = tu_randn(CA_FLOAT64, TU_SHAPE(3), true);
    ca_tensor *w = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3), true);
    ca_tensor *m = tu_randn(CA_FLOAT64, TU_SHAPE(3, 2), true);
    ca_tensor *mt = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3), true);
    ca_tensor *b232 = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3, 2), true);
    ca_tensor *b223 = tu_randn(CA_FLOAT64, TU_SHAPE(2, 2, 3), true);
    ca_tensor *cases[5][2] = {{v, w}, {v, m}, {mt, v}, {v, b232}, {b223, w}};
    for (int i = 0; i < 5; i++)
        tu_gradcheck(f_matmul, 2, cases[i], NULL, 1e-7, 1e-6);
    ca_tensor *all[] = {v, w, m, mt, b232, b223};
    for (int i = 0; i < 6; i++)
        ca_tensor_release(all[i]);
}

/* "Name(next, next, ...)" of y's grad_fn, one level down ("-" for an edge to nothing). */
static void graph_str(ca_tensor *y, char *buf, size_t size) {
    ca_node *n = y->grad_fn;
    size_t used = (size_t)snprintf(buf, size, "%s(", cai_node_name(n));
    for (int i = 0; i < n->n_in && used < size; i++) {
        ca_node *c = n->next[i].fn;
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "",
                                 c ? cai_node_name(c) : "-");
    }
    if (used < size)
        snprintf(buf + used, size - used, ")");
}

/* linear records PyTorch's nodes (torch 2.13, x and weight requiring grad):
 *   x [5, 3]:    AddmmBackward0(bias, x, TBackward0(w))      MmBackward0(x, TBackward0(w))
 *   x [2, 5, 3]: ViewBackward0(AddmmBackward0(bias, ViewBackward0(x), TBackward0(w)))
 *                UnsafeViewBackward0(MmBackward0(ViewBackward0(x), TBackward0(w)))
 *   x [3]:       ViewBackward0(AddmmBackward0(...))   SqueezeBackward4(MmBackward0(
 *                UnsqueezeBackward0(x), ...)) (cagrad: SqueezeBackward0) */
Test(linalg, linear_records_pytorchs_nodes) {
    ca_tensor *w = tu_randn(CA_FLOAT32, TU_SHAPE(4, 3), true);
    ca_tensor *bias = tu_randn(CA_FLOAT32, TU_SHAPE(4), true);
    static const struct {
        int nd;
        int64_t shape[3];
        bool bias;
        const char *top, *inner;
    } cases[] = {
        {2, {5, 3}, true, "AddmmBackward0(AccumulateGrad, AccumulateGrad, TBackward0)", NULL},
        {2, {5, 3}, false, "MmBackward0(AccumulateGrad, TBackward0)", NULL},
        {3,
         {2, 5, 3},
         true,
         "ViewBackward0(AddmmBackward0)",
         "AddmmBackward0(AccumulateGrad, ViewBackward0, TBackward0)"},
        {3,
         {2, 5, 3},
         false,
         "UnsafeViewBackward0(MmBackward0)",
         "MmBackward0(ViewBackward0, TBackward0)"},
        {1,
         {3},
         true,
         "ViewBackward0(AddmmBackward0)",
         "AddmmBackward0(AccumulateGrad, ViewBackward0, TBackward0)"},
        {1,
         {3},
         false,
         "SqueezeBackward0(MmBackward0)",
         "MmBackward0(UnsqueezeBackward0, TBackward0)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ca_tensor *x = tu_randn(CA_FLOAT32, cases[i].nd, cases[i].shape, true), *y = NULL;
        TU_OK(ca_linear(x, w, cases[i].bias ? bias : NULL, &y));
        char got[256];
        graph_str(y, got, sizeof got);
        cr_assert_str_eq(got, cases[i].top, "case %zu", i);
        if (cases[i].inner) {
            ca_tensor inner = {.grad_fn = y->grad_fn->next[0].fn};
            graph_str(&inner, got, sizeof got);
            cr_assert_str_eq(got, cases[i].inner, "case %zu", i);
        }
        ca_node *t = NULL; /* TBackward0 leads to the weight's accumulator */
        ca_node *mm = cases[i].inner ? y->grad_fn->next[0].fn : y->grad_fn;
        t = mm->next[mm->n_in - 1].fn;
        cr_assert_str_eq(cai_node_name(t->next[0].fn), "AccumulateGrad");
        ca_tensor_release(x);
        ca_tensor_release(y);
    }
    ca_tensor *m = tu_randn(CA_FLOAT32, TU_SHAPE(3, 4), true), *v = NULL;
    TU_OK(ca_t(m, &v));
    cr_assert_str_eq(ca_tensor_grad_fn_name(v), "TBackward0");
    ca_tensor_release(v);
    TU_OK(ca_transpose(m, 0, 1, &v));
    cr_assert_str_eq(ca_tensor_grad_fn_name(v), "TransposeBackward0");
    ca_tensor_release(v);
    TU_OK(ca_permute(m, 2, (int64_t[]){1, 0}, &v));
    cr_assert_str_eq(ca_tensor_grad_fn_name(v), "PermuteBackward0");
    tu_release_n((ca_tensor *[]){v, m, w, bias}, 4);
}

Test(linalg, linear_grad) {
    ca_tensor *w = tu_randn(CA_FLOAT64, TU_SHAPE(4, 3), true);
    ca_tensor *bias = tu_randn(CA_FLOAT64, TU_SHAPE(4), true);
    ca_tensor *xs[4] = {tu_randn(CA_FLOAT64, TU_SHAPE(5, 3), true),
                        tu_randn(CA_FLOAT64, TU_SHAPE(2, 3, 3), true),
                        tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(2, 2, 3), true),
                        tu_randn(CA_FLOAT64, TU_SHAPE(3), true)};
    for (int i = 0; i < 4; i++) {
        ca_tensor *in[3] = {xs[i], w, bias};
        tu_gradcheck(f_linear, 2, in, NULL, 1e-7, 1e-6);
        tu_gradcheck(f_linear, 3, in, (void *)1, 1e-7, 1e-6);
        ca_tensor_release(xs[i]);
    }
    ca_tensor *wn = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(4, 3), true);
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3), false); /* only weight and bias */
    ca_tensor *in[3] = {x, wn, bias};
    tu_gradcheck(f_linear, 3, in, (void *)1, 1e-7, 1e-6);
    ca_tensor *y = NULL;
    TU_OK(ca_linear(x, wn, bias, &y));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "AddmmBackward0");
    ca_tensor_release(y);
    ca_tensor_release(x);
    ca_tensor_release(wn);
    ca_tensor_release(w);
    ca_tensor_release(bias);
}

Test(linalg, linear_backward_values) {
    /* y = x w^T + b summed: dW[o, i] = sum_r x[r, i], db = rows, dx[r, i] = sum_o w[o, i] */
    ca_tensor *x = tu_from(CA_FLOAT32, TU_SHAPE(2, 2), (double[]){1, 2, 3, 4}, true);
    ca_tensor *w = tu_from(CA_FLOAT32, TU_SHAPE(3, 2), (double[]){1, 0, 0, 1, 1, 1}, true);
    ca_tensor *b = tu_from(CA_FLOAT32, TU_SHAPE(3), (double[]){0, 0, 0}, true);
    ca_tensor *y = NULL, *s = NULL;
    TU_OK(ca_linear(x, w, b, &y));
    TU_OK(ca_sum(y, 0, NULL, false, &s));
    TU_OK(ca_backward(s));
    tu_assert_values(ca_tensor_grad(w), (double[]){4, 6, 4, 6, 4, 6}, 1e-6);
    tu_assert_values(ca_tensor_grad(b), (double[]){2, 2, 2}, 1e-6);
    tu_assert_values(ca_tensor_grad(x), (double[]){2, 2, 2, 2}, 1e-6);
    ca_tensor *all[] = {x, w, b, y, s};
    for (int i = 0; i < 5; i++)
        ca_tensor_release(all[i]);
}

/* ---------------------------------------------------------------------------------------
 * Bad inputs
 */
Test(linalg, bad_inner_dims_name_both_shapes) {
    ca_tensor *a = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3), false);
    ca_tensor *b = tu_randn(CA_FLOAT32, TU_SHAPE(4, 5), false);
    ca_tensor *b3 = tu_randn(CA_FLOAT32, TU_SHAPE(2, 4, 5), false);
    ca_tensor *v = tu_randn(CA_FLOAT32, TU_SHAPE(4), false);
    ca_tensor *c = (ca_tensor *)0x1;
    TU_FAILS(ca_mm(a, b, &c), CA_STATUS_SHAPE, "[2, 3]");
    cr_assert_null(c);
    TU_FAILS(ca_mm(a, b, &c), CA_STATUS_SHAPE, "[4, 5]");
    TU_FAILS(ca_matmul(a, b3, &c), CA_STATUS_SHAPE, "[2, 4, 5]");
    TU_FAILS(ca_matmul(a, v, &c), CA_STATUS_SHAPE, "[2, 3] and [4]");
    TU_FAILS(ca_matmul(v, a, &c), CA_STATUS_SHAPE, "[4] and [2, 3]");
    TU_FAILS(ca_linear(a, b, NULL, &c), CA_STATUS_SHAPE, "[4, 5]");
    ca_tensor *w = tu_randn(CA_FLOAT32, TU_SHAPE(4, 3), false);
    ca_tensor *bias = tu_randn(CA_FLOAT32, TU_SHAPE(5), false);
    TU_FAILS(ca_linear(a, w, bias, &c), CA_STATUS_SHAPE, "bias [5]");
    ca_tensor *all[] = {a, b, b3, v, w, bias};
    for (int i = 0; i < 6; i++)
        ca_tensor_release(all[i]);
}

Test(linalg, bad_batch_broadcast) {
    ca_tensor *a = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3, 4), false);
    ca_tensor *b = tu_randn(CA_FLOAT64, TU_SHAPE(3, 4, 5), false);
    ca_tensor *c = NULL;
    TU_FAILS(ca_matmul(a, b, &c), CA_STATUS_SHAPE, "[2, 3, 4]");
    TU_FAILS(ca_matmul(a, b, &c), CA_STATUS_SHAPE, "[3, 4, 5]");
    TU_FAILS(ca_bmm(a, b, &c), CA_STATUS_SHAPE, "do not match");
    ca_tensor_release(a);
    ca_tensor_release(b);
}

Test(linalg, bad_dtypes) {
    ca_tensor *a = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3), false);
    ca_tensor *b = tu_randn(CA_FLOAT64, TU_SHAPE(3, 2), false);
    ca_tensor *i = tu_index(TU_SHAPE(3, 2), (int64_t[]){1, 2, 3, 4, 5, 6});
    ca_tensor *i2 = tu_index(TU_SHAPE(2, 3), (int64_t[]){1, 2, 3, 4, 5, 6});
    ca_tensor *c = NULL;
    TU_FAILS(ca_mm(a, b, &c), CA_STATUS_DTYPE, "but got: float != double");
    TU_FAILS(ca_matmul(a, b, &c), CA_STATUS_DTYPE, "but got: float != double");
    TU_FAILS(ca_mm(i2, i, &c), CA_STATUS_DTYPE, "int64");
    TU_FAILS(ca_linear(i2, i2, NULL, &c), CA_STATUS_DTYPE, "int64");
    ca_tensor *w = tu_randn(CA_FLOAT64, TU_SHAPE(4, 3), false);
    TU_FAILS(ca_linear(a, w, NULL, &c), CA_STATUS_DTYPE, "but got: float != double");
    ca_tensor *all[] = {a, b, i, i2, w};
    for (int k = 0; k < 5; k++)
        ca_tensor_release(all[k]);
}

Test(linalg, bad_ranks_and_nulls) {
    ca_tensor *s = tu_from(CA_FLOAT32, 0, NULL, (double[]){2}, false);
    ca_tensor *m = tu_randn(CA_FLOAT32, TU_SHAPE(2, 2), false);
    ca_tensor *v = tu_randn(CA_FLOAT32, TU_SHAPE(2), false);
    ca_tensor *c = NULL;
    TU_FAILS(ca_mm(s, m, &c), CA_STATUS_SHAPE, "2-D");
    TU_FAILS(ca_mm(m, v, &c), CA_STATUS_SHAPE, "[2]");
    TU_FAILS(ca_bmm(m, m, &c), CA_STATUS_SHAPE, "3-D");
    TU_FAILS(ca_matmul(s, m, &c), CA_STATUS_SHAPE, "at least 1 dim");
    TU_FAILS(ca_linear(s, m, NULL, &c), CA_STATUS_SHAPE, "x");
    TU_FAILS(ca_linear(m, v, NULL, &c), CA_STATUS_SHAPE, "weight");
    TU_FAILS(ca_mm(NULL, m, &c), CA_STATUS_INVALID, "NULL");
    TU_FAILS(ca_matmul(m, NULL, &c), CA_STATUS_INVALID, "NULL");
    TU_FAILS(ca_linear(m, NULL, NULL, &c), CA_STATUS_INVALID, "weight");
    TU_FAILS(ca_bmm(m, m, NULL), CA_STATUS_INVALID, "out");
    ca_tensor_release(s);
    ca_tensor_release(m);
    ca_tensor_release(v);
}

/* ---------------------------------------------------------------------------------------
 * Allocation failure: each scenario makes its inputs, runs forward and backward, and
 * releases everything; it is run once per allocation with that allocation failing. Each
 * run must give CA_OK or CA_STATUS_NOMEM and leave no allocation alive.
 */
static ca_status sc_matmul_batched(void) {
    tu_sc_state s = {0};
    ca_tensor *a = tu_sc_randn(&s, TU_SHAPE(2, 3, 4), true);
    ca_tensor *b = tu_sc_randn(&s, TU_SHAPE(1, 2, 4), true);
    ca_tensor **bt = tu_sc_slot(&s), **y1 = tu_sc_slot(&s), **y2 = tu_sc_slot(&s),
              **y = tu_sc_slot(&s);
    TU_SC(&s, ca_transpose(b, 1, 2, bt));
    TU_SC(&s, ca_matmul(a, *bt, y1)); /* a non-contiguous operand broadcast over the batch */
    TU_SC(&s, matmul_flags(a, b, false, true, y2));
    TU_SC(&s, ca_add(*y1, *y2, y));
    return tu_sc_finish(&s, *y);
}

static ca_status sc_matmul_one_d(void) {
    tu_sc_state s = {0};
    ca_tensor *v = tu_sc_randn(&s, TU_SHAPE(3), true);
    ca_tensor *m = tu_sc_randn(&s, TU_SHAPE(2, 3, 4), true);
    ca_tensor **y1 = tu_sc_slot(&s), **d = tu_sc_slot(&s), **y = tu_sc_slot(&s);
    TU_SC(&s, ca_matmul(v, m, y1));
    TU_SC(&s, ca_matmul(v, v, d));
    TU_SC(&s, ca_mul(*y1, *d, y));
    return tu_sc_finish(&s, *y);
}

static ca_status sc_linear_mm(void) {
    tu_sc_state s = {0};
    ca_tensor *x0 = tu_sc_randn(&s, TU_SHAPE(2, 4, 3), true);
    ca_tensor *w = tu_sc_randn(&s, TU_SHAPE(5, 3), true);
    ca_tensor *b = tu_sc_randn(&s, TU_SHAPE(5), true);
    ca_tensor *row = tu_sc_randn(&s, TU_SHAPE(1, 4), true);
    ca_tensor *m = tu_sc_randn(&s, TU_SHAPE(4, 5), true);
    ca_tensor **x = tu_sc_slot(&s), **h = tu_sc_slot(&s), **e = tu_sc_slot(&s),
              **p = tu_sc_slot(&s);
    ca_tensor **y = tu_sc_slot(&s);
    TU_SC(&s, ca_transpose(x0, 0, 1, x)); /* leading dims that do not fold: a copy */
    TU_SC(&s, ca_linear(*x, w, b, h));
    TU_SC(&s, ca_expand(row, TU_SHAPE(2, 4), e)); /* a stride-0 matrix: a copy */
    TU_SC(&s, ca_mm(*e, m, p));
    TU_SC(&s, ca_add(*h, *p, y));
    return tu_sc_finish(&s, *y);
}

Test(linalg, out_of_memory_at_every_allocation) {
    tu_oom_every_allocation("matmul batched", sc_matmul_batched);
    tu_oom_every_allocation("matmul 1-D", sc_matmul_one_d);
    tu_oom_every_allocation("linear and mm", sc_linear_mm);
}
