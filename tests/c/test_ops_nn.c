/* test_ops_nn.c - Criterion suite `nn`: softmax, log_softmax, nll_loss, cross_entropy,
 * mse_loss, layer_norm and dropout against scalar references; their gradients against
 * finite differences; and their error messages.
 */
#include "testutil.h"

#include "autograd/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double item(const ca_tensor *t) {
    double v = 0;
    TU_OK(ca_tensor_item(t, &v));
    return v;
}

/* ---------------------------------------------------------------------------------------
 * References
 */

/* softmax (or log_softmax) of x along dim, row-major into ref */
static void ref_softmax(const ca_tensor *x, int dim, bool log_, double *ref) {
    int nd = ca_tensor_ndim(x);
    const int64_t *s = ca_tensor_shape(x);
    int64_t n = s[dim], inner = 1, outer = 1;
    for (int d = dim + 1; d < nd; d++)
        inner *= s[d];
    for (int d = 0; d < dim; d++)
        outer *= s[d];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t k = 0; k < n; k++)
                mx = fmax(mx, tu_get(x, (o * n + k) * inner + i));
            for (int64_t k = 0; k < n; k++)
                sum += exp(tu_get(x, (o * n + k) * inner + i) - mx);
            for (int64_t k = 0; k < n; k++) {
                double v = tu_get(x, (o * n + k) * inner + i) - mx;
                ref[(o * n + k) * inner + i] = log_ ? v - log(sum) : exp(v) / sum;
            }
        }
}

static void check_softmax(ca_tensor *x, int dim, bool log_, double tol) {
    ca_tensor *y = NULL;
    TU_OK(log_ ? ca_log_softmax(x, dim, &y) : ca_softmax(x, dim, &y));
    cr_assert_eq(ca_tensor_dtype(y), ca_tensor_dtype(x));
    cr_assert_eq(ca_tensor_numel(y), ca_tensor_numel(x));
    int nd = ca_tensor_ndim(x);
    double *ref = malloc(sizeof(double) * (size_t)ca_tensor_numel(x));
    ref_softmax(x, dim < 0 ? dim + nd : dim, log_, ref);
    tu_assert_values(y, ref, tol);
    free(ref);
    ca_tensor_release(y);
}

/* ---------------------------------------------------------------------------------------
 * softmax / log_softmax
 */
Test(nn, softmax_rows_sum_to_one) {
    ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int k = 0; k < 2; k++) {
        ca_tensor *x = tu_randn(dts[k], TU_SHAPE(4, 7), false), *y = NULL;
        TU_OK(ca_softmax(x, -1, &y));
        for (int64_t r = 0; r < 4; r++) {
            double s = 0;
            for (int64_t c = 0; c < 7; c++) {
                double v = tu_get(y, r * 7 + c);
                cr_assert(v > 0 && v < 1);
                s += v;
            }
            cr_assert(fabs(s - 1) < 1e-6, "row %lld sums to %g", (long long)r, s);
        }
        check_softmax(x, 1, false, dts[k] == CA_FLOAT32 ? 1e-6 : 1e-14);
        ca_tensor_release(x);
        ca_tensor_release(y);
    }
}

Test(nn, softmax_hand_values_and_stability) {
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2, 2), (double[]){0, log(3.0), 1000, 1000}, false);
    ca_tensor *y = NULL;
    TU_OK(ca_softmax(x, 1, &y));
    tu_assert_values(y, (double[]){0.25, 0.75, 0.5, 0.5}, 1e-15);
    ca_tensor_release(y);
    TU_OK(ca_log_softmax(x, 1, &y));
    tu_assert_values(y, (double[]){log(0.25), log(0.75), log(0.5), log(0.5)}, 1e-14);
    ca_tensor_release(y);
    ca_tensor_release(x);
}

Test(nn, softmax_non_last_dim_and_noncontig) {
    ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int k = 0; k < 2; k++) {
        double tol = dts[k] == CA_FLOAT32 ? 1e-6 : 1e-14;
        ca_tensor *x = tu_randn(dts[k], TU_SHAPE(3, 4, 5), false);
        ca_tensor *xn = tu_randn_noncontig(dts[k], TU_SHAPE(3, 4, 5), false);
        for (int dim = 0; dim < 3; dim++) {
            check_softmax(x, dim, false, tol);
            check_softmax(xn, dim, false, tol);
        }
        check_softmax(x, -2, false, tol);
        ca_tensor_release(x);
        ca_tensor_release(xn);
    }
}

Test(nn, log_softmax_matches_log_of_softmax) {
    ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int k = 0; k < 2; k++) {
        double tol = dts[k] == CA_FLOAT32 ? 1e-5 : 1e-13;
        ca_tensor *x = tu_randn(dts[k], TU_SHAPE(3, 4, 5), false);
        ca_tensor *xn = tu_randn_noncontig(dts[k], TU_SHAPE(3, 4, 5), false);
        for (int dim = 0; dim < 3; dim++) {
            ca_tensor *ls = NULL, *s = NULL;
            TU_OK(ca_log_softmax(x, dim, &ls));
            TU_OK(ca_softmax(x, dim, &s));
            for (int64_t i = 0; i < 60; i++)
                cr_assert(fabs(tu_get(ls, i) - log(tu_get(s, i))) < tol);
            check_softmax(xn, dim, true, tol);
            ca_tensor_release(ls);
            ca_tensor_release(s);
        }
        ca_tensor_release(x);
        ca_tensor_release(xn);
    }
}

typedef struct {
    int64_t dim;
    bool log_;
} sm_ctx;

static ca_status f_softmax(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    const sm_ctx *c = ctx;
    return c->log_ ? ca_log_softmax(in[0], c->dim, out) : ca_softmax(in[0], c->dim, out);
}

/* gradcheck along every dim, contiguous and not, then the node name of one call */
static void check_softmax_grad(bool log_, int64_t named_dim, const char *node_name) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(3, 4), true);
    ca_tensor *xn = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(2, 3, 4), true);
    for (int dim = -1; dim < 2; dim++) {
        sm_ctx c = {dim, log_};
        tu_gradcheck(f_softmax, 1, &x, &c, 1e-7, 1e-6);
        tu_gradcheck(f_softmax, 1, &xn, &c, 1e-7, 1e-6);
    }
    ca_tensor *y = NULL;
    TU_OK(f_softmax(&x, &y, &(sm_ctx){named_dim, log_}));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), node_name);
    ca_tensor_release(y);
    ca_tensor_release(x);
    ca_tensor_release(xn);
}

Test(nn, softmax_grad) {
    check_softmax_grad(false, 0, "SoftmaxBackward0");
}

Test(nn, log_softmax_grad) {
    check_softmax_grad(true, 1, "LogSoftmaxBackward0");
}

Test(nn, softmax_bad_inputs) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3), false), *y = NULL;
    ca_tensor *i = tu_index(TU_SHAPE(2), (int64_t[]){1, 2});
    TU_FAILS(ca_softmax(x, 2, &y), CA_STATUS_DIM, "dim 2");
    TU_FAILS(ca_log_softmax(x, -3, &y), CA_STATUS_DIM, "[-2, 1]");
    TU_FAILS(ca_softmax(i, 0, &y), CA_STATUS_DTYPE, "int64");
    TU_FAILS(ca_log_softmax(NULL, 0, &y), CA_STATUS_INVALID, "NULL");
    TU_FAILS(ca_softmax(x, 0, NULL), CA_STATUS_INVALID, "NULL");
    cr_assert_null(y);
    ca_tensor_release(x);
    ca_tensor_release(i);
}

/* ---------------------------------------------------------------------------------------
 * nll_loss and cross_entropy
 */
Test(nn, nll_loss_each_reduction) {
    ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int k = 0; k < 2; k++) {
        ca_tensor *lp =
            tu_from(dts[k], TU_SHAPE(3, 4),
                    (double[]){-1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12}, false);
        ca_tensor *t = tu_index(TU_SHAPE(3), (int64_t[]){2, 0, 3});
        ca_tensor *o = NULL;
        TU_OK(ca_nll_loss(lp, t, CA_REDUCTION_NONE, -100, &o));
        cr_assert_eq(ca_tensor_ndim(o), 1);
        cr_assert_eq(ca_tensor_dtype(o), dts[k]);
        tu_assert_values(o, (double[]){3, 5, 12}, 0);
        ca_tensor_release(o);
        TU_OK(ca_nll_loss(lp, t, CA_REDUCTION_SUM, -100, &o));
        cr_assert_eq(ca_tensor_ndim(o), 0);
        cr_assert_eq(item(o), 20);
        ca_tensor_release(o);
        TU_OK(ca_nll_loss(lp, t, CA_REDUCTION_MEAN, -100, &o));
        cr_assert(fabs(item(o) - 20.0 / 3) < 1e-6);
        ca_tensor_release(o);
        ca_tensor_release(lp);
        ca_tensor_release(t);
    }
}

Test(nn, nll_loss_ignore_index) {
    ca_tensor *lp = tu_from(CA_FLOAT64, TU_SHAPE(3, 2), (double[]){-1, -2, -3, -4, -5, -6}, false);
    ca_tensor *t = tu_index(TU_SHAPE(3), (int64_t[]){1, 7, 0});
    ca_tensor *o = NULL;
    TU_OK(ca_nll_loss(lp, t, CA_REDUCTION_NONE, 7, &o));
    tu_assert_values(o, (double[]){2, 0, 5}, 0);
    ca_tensor_release(o);
    TU_OK(ca_nll_loss(lp, t, CA_REDUCTION_MEAN, 7, &o)); /* averages over 2 targets */
    cr_assert_eq(item(o), 3.5);
    ca_tensor_release(o);
    ca_tensor *all = tu_index(TU_SHAPE(3), (int64_t[]){7, 7, 7});
    TU_OK(ca_nll_loss(lp, all, CA_REDUCTION_MEAN, 7, &o)); /* NaN, as PyTorch */
    cr_assert(isnan(item(o)));
    ca_tensor_release(o);
    TU_OK(ca_nll_loss(lp, all, CA_REDUCTION_SUM, 7, &o));
    cr_assert_eq(item(o), 0);
    ca_tensor_release(o);
    ca_tensor *ts[] = {lp, t, all};
    tu_release_n(ts, 3);
}

Test(nn, nll_loss_one_d_and_spatial) {
    ca_tensor *lp1 = tu_from(CA_FLOAT32, TU_SHAPE(3), (double[]){-1, -2, -3}, false);
    ca_tensor *t0 = tu_index(0, NULL, (int64_t[]){1});
    ca_tensor *o = NULL;
    TU_OK(ca_nll_loss(lp1, t0, CA_REDUCTION_MEAN, -100, &o));
    cr_assert_eq(ca_tensor_ndim(o), 0);
    cr_assert_eq(item(o), 2);
    ca_tensor_release(o);
    TU_OK(ca_nll_loss(lp1, t0, CA_REDUCTION_NONE, -100, &o));
    cr_assert_eq(ca_tensor_ndim(o), 0);
    cr_assert_eq(item(o), 2);
    ca_tensor_release(o);
    /* [N=2, C=3, d=2]: target [2, 2] */
    ca_tensor *lp = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3, 2), false);
    ca_tensor *t = tu_index(TU_SHAPE(2, 2), (int64_t[]){0, 2, 1, 1});
    TU_OK(ca_nll_loss(lp, t, CA_REDUCTION_NONE, -100, &o));
    cr_assert_eq(ca_tensor_ndim(o), 2);
    int64_t tg[4] = {0, 2, 1, 1};
    double ref[4];
    for (int i = 0; i < 4; i++) {
        int64_t n = i / 2, s = i % 2;
        ref[i] = -tu_get(lp, (n * 3 + tg[i]) * 2 + s);
    }
    tu_assert_values(o, ref, 0);
    ca_tensor_release(o);
    ca_tensor *ts[] = {lp1, t0, lp, t};
    tu_release_n(ts, 4);
}

typedef struct {
    ca_reduction red;
    int64_t ignore;
    ca_tensor *target;
    bool ce;
} loss_ctx;

static ca_status f_nll(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    const loss_ctx *c = ctx;
    return c->ce ? ca_cross_entropy(in[0], c->target, c->red, c->ignore, out)
                 : ca_nll_loss(in[0], c->target, c->red, c->ignore, out);
}

Test(nn, nll_loss_grad) {
    ca_tensor *lp = tu_randn(CA_FLOAT64, TU_SHAPE(4, 3), true);
    ca_tensor *lpn = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(4, 3), true);
    ca_tensor *lps = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3, 2), true);
    ca_tensor *t = tu_index(TU_SHAPE(4), (int64_t[]){2, -1, 0, 2});
    ca_tensor *ts = tu_index(TU_SHAPE(2, 2), (int64_t[]){0, 2, -1, 1});
    for (int r = 0; r < 3; r++) {
        loss_ctx c = {(ca_reduction)r, -1, t, false};
        tu_gradcheck(f_nll, 1, &lp, &c, 1e-7, 1e-6);
        tu_gradcheck(f_nll, 1, &lpn, &c, 1e-7, 1e-6);
        loss_ctx cs = {(ca_reduction)r, -1, ts, false};
        tu_gradcheck(f_nll, 1, &lps, &cs, 1e-7, 1e-6);
    }
    ca_tensor *o = NULL;
    TU_OK(ca_nll_loss(lp, t, CA_REDUCTION_MEAN, -1, &o));
    cr_assert_str_eq(ca_tensor_grad_fn_name(o), "NllLossBackward0");
    TU_OK(ca_backward(o)); /* d/dlp = -1/3 at each counted target */
    tu_assert_values(ca_tensor_grad(lp),
                     (double[]){0, 0, -1.0 / 3, 0, 0, 0, -1.0 / 3, 0, 0, 0, 0, -1.0 / 3}, 1e-15);
    ca_tensor_release(o);
    ca_tensor *all[] = {lp, lpn, lps, t, ts};
    tu_release_n(all, 5);
}

Test(nn, nll_loss_bad_inputs) {
    ca_tensor *lp = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3), false), *o = NULL;
    ca_tensor *hi = tu_index(TU_SHAPE(2), (int64_t[]){0, 3});
    ca_tensor *neg = tu_index(TU_SHAPE(2), (int64_t[]){-2, 0});
    ca_tensor *ft = tu_from(CA_FLOAT32, TU_SHAPE(2), (double[]){0, 1}, false);
    ca_tensor *t3 = tu_index(TU_SHAPE(3), (int64_t[]){0, 1, 2});
    TU_FAILS(ca_nll_loss(lp, hi, CA_REDUCTION_MEAN, -100, &o), CA_STATUS_INDEX, "target 3");
    TU_FAILS(ca_nll_loss(lp, hi, CA_REDUCTION_MEAN, -100, &o), CA_STATUS_INDEX, "3 classes");
    TU_FAILS(ca_nll_loss(lp, neg, CA_REDUCTION_SUM, -100, &o), CA_STATUS_INDEX, "target -2");
    TU_FAILS(ca_cross_entropy(lp, hi, CA_REDUCTION_NONE, -100, &o), CA_STATUS_INDEX, "target 3");
    TU_FAILS(ca_nll_loss(lp, ft, CA_REDUCTION_MEAN, -100, &o), CA_STATUS_DTYPE, "int64");
    TU_FAILS(ca_nll_loss(lp, t3, CA_REDUCTION_MEAN, -100, &o), CA_STATUS_SHAPE, "[2, 3]");
    TU_FAILS(ca_nll_loss(lp, t3, CA_REDUCTION_MEAN, -100, &o), CA_STATUS_SHAPE, "[3]");
    TU_FAILS(ca_nll_loss(lp, hi, (ca_reduction)5, -100, &o), CA_STATUS_INVALID, "reduction");
    TU_FAILS(ca_nll_loss(hi, hi, CA_REDUCTION_MEAN, -100, &o), CA_STATUS_DTYPE, "int64");
    TU_FAILS(ca_cross_entropy(NULL, hi, CA_REDUCTION_MEAN, -100, &o), CA_STATUS_INVALID, "NULL");
    cr_assert_null(o);
    ca_tensor *all[] = {lp, hi, neg, ft, t3};
    tu_release_n(all, 5);
}

/* cross_entropy = mean over targets of logsumexp(x_n) - x_n[t_n] */
Test(nn, cross_entropy_forward) {
    ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int k = 0; k < 2; k++) {
        double tol = dts[k] == CA_FLOAT32 ? 1e-5 : 1e-13;
        ca_tensor *x = tu_randn(dts[k], TU_SHAPE(3, 5), false);
        ca_tensor *t = tu_index(TU_SHAPE(3), (int64_t[]){4, 0, 2});
        int64_t tg[3] = {4, 0, 2};
        double per[3], sum = 0;
        for (int n = 0; n < 3; n++) {
            double s = 0;
            for (int c = 0; c < 5; c++)
                s += exp(tu_get(x, n * 5 + c));
            per[n] = log(s) - tu_get(x, n * 5 + tg[n]);
            sum += per[n];
        }
        ca_tensor *o = NULL;
        TU_OK(ca_cross_entropy(x, t, CA_REDUCTION_NONE, -100, &o));
        tu_assert_values(o, per, tol);
        ca_tensor_release(o);
        TU_OK(ca_cross_entropy(x, t, CA_REDUCTION_SUM, -100, &o));
        cr_assert(fabs(item(o) - sum) < tol * 3);
        ca_tensor_release(o);
        TU_OK(ca_cross_entropy(x, t, CA_REDUCTION_MEAN, 4, &o)); /* drops the first row */
        cr_assert(fabs(item(o) - (per[1] + per[2]) / 2) < tol * 3);
        ca_tensor_release(o);
        ca_tensor *x1 = tu_from(dts[k], TU_SHAPE(2), (double[]){0, 0}, false);
        ca_tensor *t0 = tu_index(0, NULL, (int64_t[]){1});
        TU_OK(ca_cross_entropy(x1, t0, CA_REDUCTION_MEAN, -100, &o));
        cr_assert(fabs(item(o) - log(2.0)) < tol);
        ca_tensor_release(o);
        ca_tensor *all[] = {x, t, x1, t0};
        tu_release_n(all, 4);
    }
}

Test(nn, cross_entropy_grad) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(4, 3), true);
    ca_tensor *xn = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(4, 3), true);
    ca_tensor *xs = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3, 2), true);
    ca_tensor *x1 = tu_randn(CA_FLOAT64, TU_SHAPE(3), true);
    ca_tensor *t = tu_index(TU_SHAPE(4), (int64_t[]){2, 5, 0, 1});
    ca_tensor *ts = tu_index(TU_SHAPE(2, 2), (int64_t[]){0, 2, 5, 1});
    ca_tensor *t0 = tu_index(0, NULL, (int64_t[]){2});
    for (int r = 0; r < 3; r++) {
        loss_ctx c = {(ca_reduction)r, 5, t, true};
        tu_gradcheck(f_nll, 1, &x, &c, 1e-7, 1e-6);
        tu_gradcheck(f_nll, 1, &xn, &c, 1e-7, 1e-6);
        loss_ctx cs = {(ca_reduction)r, 5, ts, true};
        tu_gradcheck(f_nll, 1, &xs, &cs, 1e-7, 1e-6);
        loss_ctx c1 = {(ca_reduction)r, -100, t0, true};
        tu_gradcheck(f_nll, 1, &x1, &c1, 1e-7, 1e-6);
    }
    ca_tensor *all[] = {x, xn, xs, x1, t, ts, t0};
    tu_release_n(all, 7);
}

/* ---------------------------------------------------------------------------------------
 * mse_loss
 */
Test(nn, mse_loss_each_reduction) {
    ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int k = 0; k < 2; k++) {
        ca_tensor *x = tu_from(dts[k], TU_SHAPE(2, 2), (double[]){1, 2, 3, 4}, false);
        ca_tensor *y = tu_from(dts[k], TU_SHAPE(2, 2), (double[]){0, 4, 3, 1}, false);
        ca_tensor *o = NULL;
        TU_OK(ca_mse_loss(x, y, CA_REDUCTION_NONE, &o));
        cr_assert_eq(ca_tensor_ndim(o), 2);
        tu_assert_values(o, (double[]){1, 4, 0, 9}, 0);
        ca_tensor_release(o);
        TU_OK(ca_mse_loss(x, y, CA_REDUCTION_SUM, &o));
        cr_assert_eq(ca_tensor_ndim(o), 0);
        cr_assert_eq(item(o), 14);
        ca_tensor_release(o);
        TU_OK(ca_mse_loss(x, y, CA_REDUCTION_MEAN, &o));
        cr_assert_eq(item(o), 3.5);
        ca_tensor_release(o);
        ca_tensor_release(x);
        ca_tensor_release(y);
    }
}

Test(nn, mse_loss_broadcast_and_noncontig) {
    ca_tensor *x = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3, 2), false);
    ca_tensor *y = tu_randn(CA_FLOAT64, TU_SHAPE(2), false);
    ca_tensor *o = NULL;
    TU_OK(ca_mse_loss(x, y, CA_REDUCTION_NONE, &o));
    double ref[6], sum = 0;
    for (int i = 0; i < 6; i++) {
        double d = tu_get(x, i) - tu_get(y, i % 2);
        ref[i] = d * d;
        sum += ref[i];
    }
    tu_assert_values(o, ref, 1e-14);
    ca_tensor_release(o);
    TU_OK(ca_mse_loss(x, y, CA_REDUCTION_MEAN, &o));
    cr_assert(fabs(item(o) - sum / 6) < 1e-14);
    ca_tensor_release(o);
    ca_tensor_release(x);
    ca_tensor_release(y);
}

static ca_status f_mse(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ca_mse_loss(in[0], in[1], *(const ca_reduction *)ctx, out);
}

Test(nn, mse_loss_grad) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(3, 2), true);
    ca_tensor *y = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3, 2), true);
    ca_tensor *yb = tu_randn(CA_FLOAT64, TU_SHAPE(2), true);
    for (int r = 0; r < 3; r++) {
        ca_reduction red = (ca_reduction)r;
        ca_tensor *in[2] = {x, y}, *inb[2] = {x, yb}, *inb2[2] = {yb, x};
        tu_gradcheck(f_mse, 2, in, &red, 1e-7, 1e-6);
        tu_gradcheck(f_mse, 2, inb, &red, 1e-7, 1e-6);
        tu_gradcheck(f_mse, 2, inb2, &red, 1e-7, 1e-6);
    }
    ca_tensor *o = NULL;
    TU_OK(ca_mse_loss(x, y, CA_REDUCTION_MEAN, &o));
    cr_assert_str_eq(ca_tensor_grad_fn_name(o), "MseLossBackward0");
    ca_tensor_release(o);
    ca_tensor *all[] = {x, y, yb};
    tu_release_n(all, 3);
}

Test(nn, mse_loss_bad_inputs) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(3, 2), false), *o = NULL;
    ca_tensor *x64 = tu_randn(CA_FLOAT64, TU_SHAPE(3, 2), false);
    ca_tensor *y = tu_randn(CA_FLOAT32, TU_SHAPE(3, 4), false);
    ca_tensor *i = tu_index(TU_SHAPE(3, 2), (int64_t[]){1, 2, 3, 4, 5, 6});
    TU_FAILS(ca_mse_loss(x, y, CA_REDUCTION_MEAN, &o), CA_STATUS_SHAPE, "[3, 2] and [3, 4]");
    TU_FAILS(ca_mse_loss(x, x64, CA_REDUCTION_MEAN, &o), CA_STATUS_DTYPE, "ca_to_dtype");
    TU_FAILS(ca_mse_loss(i, i, CA_REDUCTION_MEAN, &o), CA_STATUS_DTYPE, "int64");
    TU_FAILS(ca_mse_loss(x, x, (ca_reduction)-1, &o), CA_STATUS_INVALID, "reduction");
    TU_FAILS(ca_mse_loss(x, NULL, CA_REDUCTION_MEAN, &o), CA_STATUS_INVALID, "target");
    cr_assert_null(o);
    ca_tensor *all[] = {x, x64, y, i};
    tu_release_n(all, 4);
}

/* ---------------------------------------------------------------------------------------
 * layer_norm
 */
static void ref_layer_norm(const ca_tensor *x, int64_t n, const ca_tensor *w, const ca_tensor *b,
                           double eps, double *ref) {
    int64_t rows = ca_tensor_numel(x) / n;
    for (int64_t r = 0; r < rows; r++) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < n; j++)
            mean += tu_get(x, r * n + j);
        mean /= (double)n;
        for (int64_t j = 0; j < n; j++) {
            double d = tu_get(x, r * n + j) - mean;
            var += d * d;
        }
        var /= (double)n;
        for (int64_t j = 0; j < n; j++) {
            double v = (tu_get(x, r * n + j) - mean) / sqrt(var + eps);
            ref[r * n + j] = v * (w ? tu_get(w, j) : 1) + (b ? tu_get(b, j) : 0);
        }
    }
}

Test(nn, layer_norm_forward) {
    ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int k = 0; k < 2; k++) {
        double tol = dts[k] == CA_FLOAT32 ? 1e-5 : 1e-12;
        ca_tensor *x = tu_randn(dts[k], TU_SHAPE(2, 3, 4), false);
        ca_tensor *xn = tu_randn_noncontig(dts[k], TU_SHAPE(2, 3, 4), false);
        ca_tensor *w1 = tu_randn(dts[k], TU_SHAPE(4), false),
                  *b1 = tu_randn(dts[k], TU_SHAPE(4), false);
        ca_tensor *w2 = tu_randn(dts[k], TU_SHAPE(3, 4), false);
        ca_tensor *b2 = tu_randn_noncontig(dts[k], TU_SHAPE(3, 4), false);
        double ref[24];
        for (int v = 0; v < 4; v++) { /* none, weight, bias, both */
            ca_tensor *w = v & 1 ? w1 : NULL, *b = v & 2 ? b1 : NULL, *y = NULL;
            TU_OK(ca_layer_norm(x, 1, (int64_t[]){4}, w, b, 1e-5, &y));
            ref_layer_norm(x, 4, w, b, 1e-5, ref);
            tu_assert_values(y, ref, tol);
            ca_tensor_release(y);
            /* two normalized dims, non-contiguous input */
            w = v & 1 ? w2 : NULL, b = v & 2 ? b2 : NULL;
            TU_OK(ca_layer_norm(xn, 2, (int64_t[]){3, 4}, w, b, 1e-3, &y));
            ref_layer_norm(xn, 12, w, b, 1e-3, ref);
            tu_assert_values(y, ref, tol);
            ca_tensor_release(y);
        }
        ca_tensor *all[] = {x, xn, w1, b1, w2, b2};
        tu_release_n(all, 6);
    }
}

typedef struct {
    int n_norm;
    int64_t shape[2];
    int which; /* bit0 weight, bit1 bias: in[1], in[2] */
} ln_ctx;

static ca_status f_ln(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    const ln_ctx *c = ctx;
    return ca_layer_norm(in[0], c->n_norm, c->shape, c->which & 1 ? in[1] : NULL,
                         c->which & 2 ? in[2] : NULL, 1e-5, out);
}

Test(nn, layer_norm_grad) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(3, 4), true);
    ca_tensor *w = tu_randn(CA_FLOAT64, TU_SHAPE(4), true);
    ca_tensor *b = tu_randn(CA_FLOAT64, TU_SHAPE(4), true);
    for (int v = 0; v < 4; v++) {
        ln_ctx c = {1, {4}, v};
        ca_tensor *in[3] = {x, w, b};
        tu_gradcheck(f_ln, 3, in, &c, 1e-6, 1e-5); /* v == 2: bias is the op's input 1 */
    }
    ca_tensor *y = NULL;
    TU_OK(ca_layer_norm(x, 1, (int64_t[]){4}, w, b, 1e-5, &y));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "NativeLayerNormBackward0");
    ca_tensor_release(y);
    ca_tensor *all[] = {x, w, b};
    tu_release_n(all, 3);
}

Test(nn, layer_norm_grad_two_dims_noncontig) {
    ca_tensor *x = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(2, 2, 3), true);
    ca_tensor *x2 = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3), true); /* no leading dims */
    ca_tensor *w = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(2, 3), true);
    ca_tensor *b = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3), true);
    for (int v = 0; v < 4; v++) {
        ln_ctx c = {2, {2, 3}, v};
        ca_tensor *in[3] = {x, w, b}, *in2[3] = {x2, w, b};
        tu_gradcheck(f_ln, 3, in, &c, 1e-6, 1e-5);
        tu_gradcheck(f_ln, 3, in2, &c, 1e-6, 1e-5);
    }
    ca_tensor *all[] = {x, x2, w, b};
    tu_release_n(all, 4);
}

Test(nn, layer_norm_bad_inputs) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3, 4), false), *y = NULL;
    ca_tensor *w3 = tu_randn(CA_FLOAT32, TU_SHAPE(3), false);
    ca_tensor *w4d = tu_randn(CA_FLOAT64, TU_SHAPE(4), false);
    ca_tensor *i = tu_index(TU_SHAPE(4), (int64_t[]){1, 2, 3, 4});
    TU_FAILS(ca_layer_norm(x, 1, (int64_t[]){5}, NULL, NULL, 1e-5, &y), CA_STATUS_SHAPE, "[5]");
    TU_FAILS(ca_layer_norm(x, 1, (int64_t[]){5}, NULL, NULL, 1e-5, &y), CA_STATUS_SHAPE,
             "[2, 3, 4]");
    TU_FAILS(ca_layer_norm(x, 2, (int64_t[]){4, 4}, NULL, NULL, 1e-5, &y), CA_STATUS_SHAPE,
             "[4, 4]");
    TU_FAILS(ca_layer_norm(x, 4, (int64_t[]){1, 2, 3, 4}, NULL, NULL, 1e-5, &y), CA_STATUS_SHAPE,
             "normalized_shape");
    TU_FAILS(ca_layer_norm(x, 0, NULL, NULL, NULL, 1e-5, &y), CA_STATUS_SHAPE, "n_normalized");
    TU_FAILS(ca_layer_norm(x, 1, (int64_t[]){4}, w3, NULL, 1e-5, &y), CA_STATUS_SHAPE,
             "weight has shape [3]");
    TU_FAILS(ca_layer_norm(x, 1, (int64_t[]){4}, NULL, w3, 1e-5, &y), CA_STATUS_SHAPE, "bias");
    TU_FAILS(ca_layer_norm(x, 1, (int64_t[]){4}, w4d, NULL, 1e-5, &y), CA_STATUS_DTYPE,
             "ca_to_dtype");
    TU_FAILS(ca_layer_norm(i, 1, (int64_t[]){4}, NULL, NULL, 1e-5, &y), CA_STATUS_DTYPE, "int64");
    TU_FAILS(ca_layer_norm(x, 1, NULL, NULL, NULL, 1e-5, &y), CA_STATUS_INVALID, "NULL");
    cr_assert_null(y);
    ca_tensor *all[] = {x, w3, w4d, i};
    tu_release_n(all, 4);
}

/* ---------------------------------------------------------------------------------------
 * dropout
 */
Test(nn, dropout_reproducible_and_scaled) {
    ca_tensor *x = tu_uniform(CA_FLOAT32, TU_SHAPE(50, 20), 1, 2, false);
    ca_tensor *a = NULL, *b = NULL, *c = NULL;
    ca_manual_seed(7);
    TU_OK(ca_dropout(x, 0.25, true, &a));
    ca_manual_seed(7);
    TU_OK(ca_dropout(x, 0.25, true, &b));
    TU_OK(ca_dropout(x, 0.25, true, &c)); /* the generator moved on */
    bool differs = false;
    for (int64_t i = 0; i < 1000; i++) {
        double va = tu_get(a, i), xv = tu_get(x, i);
        cr_assert_eq(va, tu_get(b, i), "element %lld differs with the same seed", (long long)i);
        cr_assert(va == 0 || fabs(va - xv / 0.75) < 1e-5, "element %lld: %g from %g", (long long)i,
                  va, xv);
        differs = differs || (tu_get(c, i) != va);
    }
    cr_assert(differs, "a second draw gave the same mask");
    ca_tensor *all[] = {x, a, b, c};
    tu_release_n(all, 4);
}

Test(nn, dropout_zero_fraction_close_to_p) {
    double ps[2] = {0.3, 0.8};
    for (int k = 0; k < 2; k++) {
        ca_tensor *x = tu_uniform(CA_FLOAT64, TU_SHAPE(100, 100), 1, 2, false), *y = NULL;
        TU_OK(ca_dropout(x, ps[k], true, &y));
        int64_t zeros = 0;
        for (int64_t i = 0; i < 10000; i++)
            zeros += tu_get(y, i) == 0;
        double frac = (double)zeros / 10000;
        cr_assert(fabs(frac - ps[k]) < 0.03, "zero fraction %g for p %g", frac, ps[k]);
        ca_tensor_release(x);
        ca_tensor_release(y);
    }
}

Test(nn, dropout_identity_cases) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(4, 4), true), *y = NULL;
    TU_OK(ca_dropout(x, 0.5, false, &y)); /* eval: x itself, no node */
    cr_assert_eq(y, x);
    cr_assert_null(ca_tensor_grad_fn_name(y));
    ca_tensor_release(y);
    TU_OK(ca_dropout(x, 0.0, true, &y));
    cr_assert_eq(y, x);
    ca_tensor_release(y);
    TU_OK(ca_dropout(x, 1.0, true, &y)); /* everything dropped */
    for (int64_t i = 0; i < 16; i++)
        cr_assert_eq(tu_get(y, i), 0);
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "NativeDropoutBackward0");
    ca_tensor_release(y);
    ca_tensor_release(x);
}

static ca_status f_dropout(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    ca_manual_seed(1234); /* every finite-difference pass sees the same mask */
    return ca_dropout(in[0], 0.4, true, out);
}

Test(nn, dropout_grad) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(5, 6), true);
    ca_tensor *xn = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(5, 6), true);
    tu_gradcheck(f_dropout, 1, &x, NULL, 1e-7, 1e-6);
    tu_gradcheck(f_dropout, 1, &xn, NULL, 1e-7, 1e-6);
    /* the gradient is the mask: 0 or 1/(1-p), matching the output's zeros */
    ca_tensor *y = NULL, *s = NULL;
    TU_OK(f_dropout(&x, &y, NULL));
    TU_OK(ca_sum(y, 0, NULL, false, &s));
    TU_OK(ca_backward(s));
    const ca_tensor *g = ca_tensor_grad(x);
    for (int64_t i = 0; i < 30; i++) {
        double gv = tu_get(g, i);
        cr_assert(gv == 0 || fabs(gv - 1 / 0.6) < 1e-12);
        cr_assert_eq(gv == 0, tu_get(y, i) == 0);
    }
    ca_tensor *all[] = {x, xn, y, s};
    tu_release_n(all, 4);
}

Test(nn, dropout_bad_inputs) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(3), false), *y = NULL;
    ca_tensor *i = tu_index(TU_SHAPE(2), (int64_t[]){1, 2});
    TU_FAILS(ca_dropout(x, 1.5, true, &y), CA_STATUS_INVALID, "between 0 and 1");
    TU_FAILS(ca_dropout(x, -0.1, false, &y), CA_STATUS_INVALID, "-0.1");
    TU_FAILS(ca_dropout(x, NAN, true, &y), CA_STATUS_INVALID, "p =");
    TU_FAILS(ca_dropout(i, 0.5, true, &y), CA_STATUS_DTYPE, "int64");
    TU_FAILS(ca_dropout(NULL, 0.5, true, &y), CA_STATUS_INVALID, "NULL");
    cr_assert_null(y);
    ca_tensor_release(x);
    ca_tensor_release(i);
}

/* ---------------------------------------------------------------------------------------
 * Aux outputs and saved values
 */
Test(nn, layer_norm_aux_mean_rstd) {
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2, 1, 2), (double[]){1, 3, 0, 4}, false);
    ca_tensor *y = NULL, *aux[CA_MAX_AUX] = {0};
    ca_attrs a = {.s = {0.0}, .i = {2, 0}, .shape = {2, {1, 2}}};
    TU_OK(cai_op_call(CA_OP_LAYER_NORM, 1, &x, &a, &y, aux));
    /* mean and rstd keep x's leading dims with 1 in the normalized ones, as PyTorch */
    cr_assert_eq(ca_tensor_ndim(aux[0]), 3);
    cr_assert_eq(ca_tensor_shape(aux[0])[0], 2);
    cr_assert_eq(ca_tensor_shape(aux[0])[1], 1);
    cr_assert_eq(ca_tensor_shape(aux[1])[2], 1);
    tu_assert_values(aux[0], (double[]){2, 2}, 1e-15);
    tu_assert_values(aux[1], (double[]){1, 0.5}, 1e-15); /* variances 1 and 4, eps 0 */
    tu_assert_values(y, (double[]){-1, 1, -1, 1}, 1e-15);
    ca_tensor *all[] = {x, y, aux[0], aux[1]};
    tu_release_n(all, 4);
}

Test(nn, nll_loss_total_weight_aux) {
    ca_tensor *lp = tu_randn(CA_FLOAT32, TU_SHAPE(4, 3), false);
    ca_tensor *t = tu_index(TU_SHAPE(4), (int64_t[]){1, -3, 2, -3});
    ca_tensor *o = NULL, *aux[CA_MAX_AUX] = {0};
    ca_attrs a = {.i = {CA_REDUCTION_MEAN, -3}};
    TU_OK(cai_op_call(CA_OP_NLL_LOSS, 2, (ca_tensor *[]){lp, t}, &a, &o, aux));
    cr_assert_eq(ca_tensor_ndim(aux[0]), 0);
    cr_assert_eq(ca_tensor_dtype(aux[0]), CA_FLOAT32);
    cr_assert_eq(item(aux[0]), 2);
    double ref = -(tu_get(lp, 1) + tu_get(lp, 8)) / 2;
    cr_assert(fabs(item(o) - ref) < 1e-6);
    ca_tensor *all[] = {lp, t, o, aux[0]};
    tu_release_n(all, 4);
}

/* d cross_entropy / dx = (softmax(x) - onehot(t)) / N for the mean */
Test(nn, cross_entropy_grad_hand_values) {
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2, 2), (double[]){0, 0, 0, log(3.0)}, true);
    ca_tensor *t = tu_index(TU_SHAPE(2), (int64_t[]){0, 1});
    ca_tensor *o = NULL;
    TU_OK(ca_cross_entropy(x, t, CA_REDUCTION_MEAN, -100, &o));
    TU_OK(ca_backward(o));
    tu_assert_values(ca_tensor_grad(x), (double[]){-0.25, 0.25, 0.125, -0.125}, 1e-15);
    ca_tensor *all[] = {x, t, o};
    tu_release_n(all, 3);
}

Test(nn, softmax_saved_result_changed_in_place) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3), true), *y = NULL, *s = NULL;
    TU_OK(ca_softmax(x, 1, &y));
    TU_OK(ca_sum(y, 0, NULL, false, &s));
    bool prev = ca_set_grad_enabled(false);
    TU_OK(ca_mul_scalar_(y, 2.0));
    ca_set_grad_enabled(prev);
    TU_FAILS(ca_backward(s), CA_STATUS_AUTOGRAD, "SoftmaxBackward0");
    ca_tensor *all[] = {x, y, s};
    tu_release_n(all, 3);
}

/* ---------------------------------------------------------------------------------------
 * Allocation failure: each scenario makes its inputs, runs forward and backward, and
 * releases everything; it is run once per allocation with that allocation failing. Each
 * run must give CA_OK or CA_STATUS_NOMEM and leave no allocation alive.
 */
static ca_status sc_softmax(void) {
    tu_sc_state s = {0};
    ca_tensor *x = tu_sc_randn(&s, TU_SHAPE(3, 4), true);
    ca_tensor **a = tu_sc_slot(&s), **b = tu_sc_slot(&s), **y = tu_sc_slot(&s);
    TU_SC(&s, ca_softmax(x, 0, a)); /* not the last dim: permuted copies */
    TU_SC(&s, ca_log_softmax(x, 1, b));
    TU_SC(&s, ca_add(*a, *b, y));
    return tu_sc_finish(&s, *y);
}

static ca_status sc_losses(void) {
    tu_sc_state s = {0};
    ca_tensor *x = tu_sc_randn(&s, TU_SHAPE(4, 3), true);
    ca_tensor *xs = tu_sc_randn(&s, TU_SHAPE(2, 3, 2), true);
    ca_tensor *yb = tu_sc_randn(&s, TU_SHAPE(3), true);
    ca_tensor **t = tu_sc_slot(&s), **ts = tu_sc_slot(&s), **ce = tu_sc_slot(&s),
              **nl = tu_sc_slot(&s);
    ca_tensor **ms = tu_sc_slot(&s), **nls = tu_sc_slot(&s), **y1 = tu_sc_slot(&s),
              **y = tu_sc_slot(&s);
    TU_SC(&s, ca_from_data(CA_INT64, TU_SHAPE(4), (int64_t[]){0, 2, -100, 1}, t));
    TU_SC(&s, ca_from_data(CA_INT64, TU_SHAPE(2, 2), (int64_t[]){0, 2, 1, 1}, ts));
    TU_SC(&s, ca_cross_entropy(x, *t, CA_REDUCTION_MEAN, -100, ce));
    TU_SC(&s, ca_nll_loss(xs, *ts, CA_REDUCTION_NONE, -100, nl));
    TU_SC(&s, ca_sum(*nl, 0, NULL, false, nls));
    TU_SC(&s, ca_mse_loss(x, yb, CA_REDUCTION_MEAN, ms));
    TU_SC(&s, ca_add(*ce, *ms, y1));
    TU_SC(&s, ca_add(*y1, *nls, y));
    return tu_sc_finish(&s, *y);
}

static ca_status sc_layer_norm_dropout(void) {
    tu_sc_state s = {0};
    ca_tensor *x0 = tu_sc_randn(&s, TU_SHAPE(3, 2, 4), true);
    ca_tensor *w = tu_sc_randn(&s, TU_SHAPE(2, 4), true);
    ca_tensor *b = tu_sc_randn(&s, TU_SHAPE(2, 4), true);
    ca_tensor **x = tu_sc_slot(&s), **l1 = tu_sc_slot(&s), **l2 = tu_sc_slot(&s),
              **d = tu_sc_slot(&s);
    ca_tensor **y = tu_sc_slot(&s);
    TU_SC(&s, ca_transpose(x0, 0, 1, x)); /* [2, 3, 4], not contiguous */
    TU_SC(&s, ca_layer_norm(*x, 1, (int64_t[]){4}, NULL, NULL, 1e-5, l1));
    TU_SC(&s, ca_layer_norm(x0, 2, (int64_t[]){2, 4}, w, b, 1e-5, l2));
    TU_SC(&s, ca_dropout(*l1, 0.5, true, d));
    TU_SC(&s, ca_sum(*d, 0, NULL, false, y));
    ca_tensor **y2 = tu_sc_slot(&s);
    TU_SC(&s, ca_mul(*l2, *y, y2));
    return tu_sc_finish(&s, *y2);
}

Test(nn, out_of_memory_at_every_allocation) {
    tu_oom_every_allocation("softmax", sc_softmax);
    tu_oom_every_allocation("losses", sc_losses);
    tu_oom_every_allocation("layer_norm and dropout", sc_layer_norm_dropout);
}
