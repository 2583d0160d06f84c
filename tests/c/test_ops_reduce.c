/* test_ops_reduce.c - the reductions (suite `reduce`): sum, mean, max, min, logsumexp
 * over dim lists, and the internal sum_to. Forward values against a scalar reference that
 * gathers every reduced group, gradients against finite differences, arg indices, keepdim
 * shapes, empty inputs, and the errors of bad dims and dtypes.
 */
#include "testutil.h"

#include "autograd/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Reference: the reduction computed group by group in double
 */
typedef enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_LSE } ref_kind;

static const char *kind_name(ref_kind k) {
    static const char *names[] = {"sum", "mean", "max", "min", "logsumexp"};
    return names[k];
}

/* values[o] and (max/min) idx[o] for each output slot o (row-major over kept dims); the
 * arg index is row-major over the reduced dims, first occurrence on ties. Returns the
 * number of output slots. */
static int64_t ref_reduce(const ca_tensor *x, uint32_t mask, ref_kind k, double *values,
                          int64_t *idx) {
    int nd = ca_tensor_ndim(x);
    const int64_t *sh = ca_tensor_shape(x);
    int64_t n_out = 1, n_red = 1;
    for (int d = 0; d < nd; d++)
        *((mask >> d) & 1 ? &n_red : &n_out) *= sh[d];
    double *grp = malloc(sizeof(double) * (size_t)(n_out * n_red + 1));
    int64_t n = ca_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, o = 0, r = 0, om = 1, rm = 1;
        for (int d = nd - 1; d >= 0; d--) {
            int64_t c = rem % sh[d];
            rem /= sh[d];
            if ((mask >> d) & 1) {
                r += c * rm;
                rm *= sh[d];
            } else {
                o += c * om;
                om *= sh[d];
            }
        }
        grp[o * n_red + r] = tu_get(x, i);
    }
    for (int64_t o = 0; o < n_out; o++) {
        const double *g = grp + o * n_red;
        double acc = k == R_SUM || k == R_MEAN ? 0 : g[0];
        int64_t best = 0;
        for (int64_t r = 0; r < n_red; r++) {
            if (k == R_SUM || k == R_MEAN)
                acc += g[r];
            else if ((k == R_MAX || k == R_LSE) ? g[r] > acc : g[r] < acc) {
                acc = g[r];
                best = r;
            }
        }
        if (k == R_MEAN)
            acc /= (double)n_red;
        if (k == R_LSE) {
            double s = 0;
            for (int64_t r = 0; r < n_red; r++)
                s += exp(g[r] - acc);
            acc += log(s);
        }
        values[o] = acc;
        if (idx)
            idx[o] = best;
    }
    free(grp);
    return n_out;
}

static uint32_t mask_of(int n, const int64_t *dims, int ndim) {
    if (n == 0)
        return (1u << ndim) - 1;
    uint32_t m = 0;
    for (int k = 0; k < n; k++)
        m |= 1u << (dims[k] < 0 ? dims[k] + ndim : dims[k]);
    return m;
}

static ca_status run_kind(ref_kind k, ca_tensor *x, int n, const int64_t *dims, bool keepdim,
                          ca_tensor **out, ca_tensor **idx) {
    switch (k) {
    case R_SUM: return ca_sum(x, n, dims, keepdim, out);
    case R_MEAN: return ca_mean(x, n, dims, keepdim, out);
    case R_MAX: return ca_max(x, n, dims, keepdim, out, idx);
    case R_MIN: return ca_min(x, n, dims, keepdim, out, idx);
    default: return ca_logsumexp(x, n, dims, keepdim, out);
    }
}

/* Run kind k of x over dims, check the shape (keepdim or not), values and indices. */
static void check_reduce(ref_kind k, ca_tensor *x, int n, const int64_t *dims, bool keepdim,
                         const char *what) {
    ca_tensor *y = NULL, *ix = NULL;
    bool arg = k == R_MAX || k == R_MIN;
    ca_status st = run_kind(k, x, n, dims, keepdim, &y, arg ? &ix : NULL);
    cr_assert_eq(st, CA_OK, "%s (%s): failed: %s", kind_name(k), what, ca_last_error());
    int nd = ca_tensor_ndim(x);
    uint32_t mask = mask_of(n, dims, nd);
    int exp_nd = 0;
    for (int d = 0; d < nd; d++) {
        bool red = (mask >> d) & 1;
        if (red && !keepdim)
            continue;
        int64_t want = red ? 1 : ca_tensor_shape(x)[d];
        cr_assert(exp_nd < ca_tensor_ndim(y) && ca_tensor_shape(y)[exp_nd] == want,
                  "%s (%s): output dim %d should be %lld", kind_name(k), what, exp_nd,
                  (long long)want);
        exp_nd++;
    }
    cr_assert_eq(ca_tensor_ndim(y), exp_nd, "%s (%s): output has %d dims, expected %d",
                 kind_name(k), what, ca_tensor_ndim(y), exp_nd);
    cr_assert_eq(ca_tensor_dtype(y), ca_tensor_dtype(x), "%s: dtype changed", kind_name(k));
    double vals[256];
    int64_t idx[256];
    int64_t n_out = ref_reduce(x, mask, k, vals, idx);
    cr_assert_eq(ca_tensor_numel(y), n_out);
    bool f32 = ca_tensor_dtype(x) == CA_FLOAT32;
    for (int64_t o = 0; o < n_out; o++) {
        double got = tu_get(y, o);
        double tol = (f32 ? 1e-5 : 1e-12) * (1 + fabs(vals[o]));
        cr_assert(fabs(got - vals[o]) <= tol, "%s (%s, %s): slot %lld is %.12g, expected %.12g",
                  kind_name(k), what, ca_dtype_name(ca_tensor_dtype(x)), (long long)o, got,
                  vals[o]);
        if (arg)
            cr_assert_eq(tu_get(ix, o), (double)idx[o],
                         "%s (%s): index of slot %lld is %g, "
                         "expected %lld",
                         kind_name(k), what, (long long)o, tu_get(ix, o), (long long)idx[o]);
    }
    if (arg) {
        cr_assert_eq(ca_tensor_dtype(ix), CA_INT64, "%s: indices are not int64", kind_name(k));
        cr_assert_eq(ca_tensor_ndim(ix), ca_tensor_ndim(y), "%s: indices shape", kind_name(k));
    }
    ca_tensor_release(y);
    ca_tensor_release(ix);
}

/* Every dim configuration we test, on one input. */
static void check_reduce_all_configs(ref_kind k, ca_tensor *x3, const char *what) {
    check_reduce(k, x3, 0, NULL, false, what);
    check_reduce(k, x3, 0, NULL, true, what);
    check_reduce(k, x3, 1, (int64_t[]){1}, false, what);
    check_reduce(k, x3, 1, (int64_t[]){-1}, true, what);
    check_reduce(k, x3, 2, (int64_t[]){2, 0}, false, what);
    check_reduce(k, x3, 2, (int64_t[]){0, -1}, true, what);
    check_reduce(k, x3, 2, (int64_t[]){1, 2}, false, what);
}

static void check_forward(ref_kind k) {
    const ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int t = 0; t < 2; t++) {
        ca_tensor *x = tu_randn(dts[t], TU_SHAPE(2, 3, 4), false);
        check_reduce_all_configs(k, x, "contiguous");
        ca_tensor_release(x);
        x = tu_randn_noncontig(dts[t], TU_SHAPE(2, 3, 4), false);
        check_reduce_all_configs(k, x, "non-contiguous");
        ca_tensor_release(x);
        x = tu_randn(dts[t], TU_SHAPE(7), false);
        check_reduce(k, x, 1, (int64_t[]){0}, false, "1-d");
        ca_tensor_release(x);
    }
}

/* ---------------------------------------------------------------------------------------
 * Gradcheck over dim configurations
 */
typedef struct {
    ref_kind k;
    int n;
    int64_t dims[3];
    bool keepdim;
} red_ctx;

static ca_status call_reduce(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    const red_ctx *c = ctx;
    return run_kind(c->k, in[0], c->n, c->dims, c->keepdim, out, NULL);
}

static void check_grad(ref_kind k) {
    const red_ctx cfgs[] = {
        {k, 0, {0}, false},   {k, 1, {1}, false},    {k, 1, {-1}, true},      {k, 2, {0, 2}, false},
        {k, 2, {2, 0}, true}, {k, 2, {1, 2}, false}, {k, 3, {0, 1, 2}, true},
    };
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        red_ctx ctx = cfgs[c];
        ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3, 4), true);
        tu_gradcheck(call_reduce, 1, &x, &ctx, 1e-6, 1e-6);
        ca_tensor_release(x);
        x = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(2, 3, 4), true);
        tu_gradcheck(call_reduce, 1, &x, &ctx, 1e-6, 1e-6);
        ca_tensor_release(x);
    }
}

/* ---------------------------------------------------------------------------------------
 * Per-op tests
 */
Test(reduce, sum_forward) {
    check_forward(R_SUM);
}
Test(reduce, sum_grad) {
    check_grad(R_SUM);
}
Test(reduce, mean_forward) {
    check_forward(R_MEAN);
}
Test(reduce, mean_grad) {
    check_grad(R_MEAN);
}
Test(reduce, max_forward) {
    check_forward(R_MAX);
}
Test(reduce, max_grad) {
    check_grad(R_MAX);
}
Test(reduce, min_forward) {
    check_forward(R_MIN);
}
Test(reduce, min_grad) {
    check_grad(R_MIN);
}
Test(reduce, logsumexp_forward) {
    check_forward(R_LSE);
}
Test(reduce, logsumexp_grad) {
    check_grad(R_LSE);
}

Test(reduce, node_names) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3), true), *y = NULL;
    const char *want[] = {"SumBackward0", "MeanBackward0", "MaxBackward0", "MinBackward0",
                          "LogsumexpBackward0"};
    for (int k = 0; k < 5; k++) {
        TU_OK(run_kind((ref_kind)k, x, 1, (int64_t[]){1}, false, &y, NULL));
        const char *nm = ca_tensor_grad_fn_name(y);
        cr_assert(nm && strcmp(nm, want[k]) == 0, "%s: grad_fn %s, expected %s",
                  kind_name((ref_kind)k), nm ? nm : "NULL", want[k]);
        ca_tensor_release(y);
    }
    ca_tensor_release(x);
}

Test(reduce, sum_int64) {
    ca_tensor *x = tu_index(TU_SHAPE(2, 3), (int64_t[]){1, 2, 3, 40, 50, 60}), *y = NULL;
    TU_OK(ca_sum(x, 1, (int64_t[]){1}, false, &y));
    cr_assert_eq(ca_tensor_dtype(y), CA_INT64);
    tu_assert_values(y, (double[]){6, 150}, 0);
    ca_tensor_release(y);
    TU_OK(ca_sum(x, 0, NULL, false, &y));
    tu_assert_values(y, (double[]){156}, 0);
    ca_tensor_release(y);
    ca_tensor_release(x);
}

Test(reduce, empty_inputs_like_pytorch) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(0, 3), false), *y = NULL, *ix = NULL;
    TU_OK(ca_sum(x, 1, (int64_t[]){0}, false, &y));
    tu_assert_values(y, (double[]){0, 0, 0}, 0);
    ca_tensor_release(y);
    TU_OK(ca_mean(x, 1, (int64_t[]){0}, false, &y));
    tu_assert_values(y, (double[]){NAN, NAN, NAN}, 0);
    ca_tensor_release(y);
    TU_OK(ca_logsumexp(x, 1, (int64_t[]){0}, false, &y));
    tu_assert_values(y, (double[]){-INFINITY, -INFINITY, -INFINITY}, 0);
    ca_tensor_release(y);
    TU_OK(ca_mean(x, 0, NULL, false, &y));
    tu_assert_values(y, (double[]){NAN}, 0);
    ca_tensor_release(y);
    /* reducing a non-empty dim of an empty tensor gives an empty result */
    TU_OK(ca_max(x, 1, (int64_t[]){1}, false, &y, &ix));
    cr_assert_eq(ca_tensor_numel(y), 0);
    cr_assert_not_null(ix);
    cr_assert_eq(ca_tensor_numel(ix), 0);
    ca_tensor_release(y);
    ca_tensor_release(ix);
    /* torch: an IndexError for the empty dim, a RuntimeError for a whole reduction */
    TU_FAILS(ca_max(x, 1, (int64_t[]){0}, false, &y, &ix), CA_STATUS_INDEX,
             "Expected reduction dim 0 to have non-zero size");
    TU_FAILS(ca_min(x, 0, NULL, false, &y, NULL), CA_STATUS_SHAPE,
             "Expected reduction dim to be specified");
    ca_tensor_release(x);
}

Test(reduce, zero_dim_input) {
    ca_tensor *x = tu_from(CA_FLOAT64, 0, NULL, (double[]){2.5}, true), *y = NULL, *ix = NULL;
    TU_OK(ca_sum(x, 0, NULL, false, &y));
    cr_assert_eq(ca_tensor_ndim(y), 0);
    tu_assert_values(y, (double[]){2.5}, 0);
    TU_OK(ca_backward(y));
    tu_assert_values(ca_tensor_grad(x), (double[]){1}, 0);
    ca_tensor_release(y);
    TU_OK(ca_max(x, 1, (int64_t[]){-1}, true, &y, &ix)); /* dim -1 of a 0-d tensor */
    cr_assert_eq(ca_tensor_ndim(y), 0);
    tu_assert_values(y, (double[]){2.5}, 0);
    tu_assert_values(ix, (double[]){0}, 0);
    TU_OK(ca_tensor_set_grad(x, NULL));
    TU_OK(ca_backward(y));
    tu_assert_values(ca_tensor_grad(x), (double[]){1}, 0);
    ca_tensor_release(y);
    ca_tensor_release(ix);
    TU_FAILS(ca_sum(x, 1, (int64_t[]){1}, false, &y), CA_STATUS_DIM, "out of range");
    ca_tensor_release(x);
}

Test(reduce, max_min_ties_take_first_index_and_get_gradient_there) {
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2, 3), (double[]){1, 3, 3, 0, 0, -1}, true);
    ca_tensor *v = NULL, *ix = NULL;
    TU_OK(ca_max(x, 1, (int64_t[]){1}, false, &v, &ix));
    tu_assert_values(v, (double[]){3, 0}, 0);
    tu_assert_values(ix, (double[]){1, 0}, 0);
    ca_tensor *seed = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){2, 5}, false);
    TU_OK(ca_backward_ex(v, &(ca_backward_options){.gradient = seed}));
    ca_tensor_release(seed);
    tu_assert_values(ca_tensor_grad(x), (double[]){0, 2, 0, 5, 0, 0}, 0);
    ca_tensor_release(v);
    ca_tensor_release(ix);
    TU_OK(ca_min(x, 0, NULL, false, &v, &ix)); /* all dims: flat row-major index */
    tu_assert_values(v, (double[]){-1}, 0);
    tu_assert_values(ix, (double[]){5}, 0);
    ca_tensor_release(v);
    ca_tensor_release(ix);
    ca_tensor_release(x);
}

Test(reduce, max_multi_dim_flat_index_and_grad) {
    /* [2, 3, 2], reduce dims {0, 2}: flat index over (d0, d2) row-major */
    double v[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, -11};
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2, 3, 2), v, true), *m = NULL, *ix = NULL,
              *loss = NULL;
    TU_OK(ca_max(x, 2, (int64_t[]){2, 0}, true, &m, &ix));
    int64_t want_shape[3] = {1, 3, 1};
    for (int d = 0; d < 3; d++)
        cr_assert_eq(ca_tensor_shape(m)[d], want_shape[d]);
    tu_assert_values(m, (double[]){7, 9, 10}, 0);
    tu_assert_values(ix, (double[]){3, 3, 2}, 0);
    TU_OK(ca_sum(m, 0, NULL, false, &loss));
    TU_OK(ca_backward(loss));
    tu_assert_values(ca_tensor_grad(x), (double[]){0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0}, 0);
    ca_tensor_release(m);
    ca_tensor_release(ix);
    ca_tensor_release(loss);
    ca_tensor_release(x);
}

Test(reduce, logsumexp_is_stable) {
    ca_tensor *x = tu_from(CA_FLOAT32, TU_SHAPE(2, 2), (double[]){1000, 1000, -1000, -1000}, false),
              *y = NULL;
    TU_OK(ca_logsumexp(x, 1, (int64_t[]){1}, false, &y));
    tu_assert_values(y, (double[]){1000 + log(2.0), -1000 + log(2.0)}, 1e-3);
    ca_tensor_release(y);
    ca_tensor_release(x);
}

Test(reduce, mean_grad_values) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 4), true), *y = NULL;
    TU_OK(ca_mean(x, 0, NULL, false, &y));
    TU_OK(ca_backward(y));
    double want[8];
    for (int i = 0; i < 8; i++)
        want[i] = 1.0 / 8;
    tu_assert_values(ca_tensor_grad(x), want, 1e-15);
    ca_tensor_release(y);
    ca_tensor_release(x);
}

/* ---------------------------------------------------------------------------------------
 * sum_to (internal)
 */
static ca_status sum_to(ca_tensor *x, int n, const int64_t *shape, ca_tensor **out) {
    ca_attrs a = {.shape = {.n = n}};
    for (int k = 0; k < n; k++)
        a.shape.v[k] = shape[k];
    return cai_op_call1(CA_OP_SUM_TO, x, &a, out);
}

static ca_status call_sum_to(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return sum_to(in[0], TU_SHAPE(3, 1), out);
}

Test(reduce, sum_to_forward) {
    const ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int t = 0; t < 2; t++) {
        ca_tensor *x = tu_randn_noncontig(dts[t], TU_SHAPE(2, 3, 4), false), *y = NULL;
        TU_OK(sum_to(x, TU_SHAPE(3, 1), &y));
        cr_assert_eq(ca_tensor_ndim(y), 2);
        cr_assert(ca_tensor_shape(y)[0] == 3 && ca_tensor_shape(y)[1] == 1);
        for (int r = 0; r < 3; r++) {
            double s = 0;
            for (int b = 0; b < 2; b++)
                for (int c = 0; c < 4; c++)
                    s += tu_get(x, b * 12 + r * 4 + c);
            cr_assert(fabs(tu_get(y, r) - s) <= (t ? 1e-12 : 1e-5) * (1 + fabs(s)),
                      "sum_to (%s): row %d is %g, expected %g", ca_dtype_name(dts[t]), r,
                      tu_get(y, r), s);
        }
        ca_tensor_release(y);
        /* same shape: a copy */
        TU_OK(sum_to(x, TU_SHAPE(2, 3, 4), &y));
        tu_assert_close(y, x, 0, 0);
        cr_assert(ca_tensor_is_contiguous(y));
        ca_tensor_release(y);
        ca_tensor_release(x);
    }
}

Test(reduce, sum_to_grad_and_bad_target) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3, 4), true), *y = NULL;
    tu_gradcheck(call_sum_to, 1, &x, NULL, 1e-6, 1e-6);
    TU_FAILS(sum_to(x, TU_SHAPE(2, 4), &y), CA_STATUS_SHAPE, "[2, 3, 4]");
    TU_FAILS(sum_to(x, TU_SHAPE(2, 4), &y), CA_STATUS_SHAPE, "[2, 4]");
    TU_FAILS(sum_to(x, TU_SHAPE(1, 2, 3, 4), &y), CA_STATUS_SHAPE, "cannot be summed");
    ca_tensor_release(x);
}

/* ---------------------------------------------------------------------------------------
 * Bad inputs
 */
Test(reduce, bad_dims) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3), false), *y = NULL, *ix = NULL;
    TU_FAILS(ca_sum(x, 1, (int64_t[]){2}, false, &y), CA_STATUS_DIM, "out of range");
    TU_FAILS(ca_mean(x, 1, (int64_t[]){-3}, false, &y), CA_STATUS_DIM, "dim -3");
    TU_FAILS(ca_max(x, 2, (int64_t[]){0, 5}, false, &y, &ix), CA_STATUS_DIM, "max");
    TU_FAILS(ca_sum(x, 2, (int64_t[]){1, -1}, false, &y), CA_STATUS_DIM,
             "dim 1 appears more than once");
    TU_FAILS(ca_logsumexp(x, 2, (int64_t[]){0, 0}, false, &y), CA_STATUS_DIM, "dim 0");
    TU_FAILS(ca_sum(x, 2, NULL, false, &y), CA_STATUS_INVALID, "dims is NULL");
    TU_FAILS(ca_sum(x, 9, (int64_t[9]){0}, false, &y), CA_STATUS_INVALID, "n_dims");
    TU_FAILS(ca_sum(x, -1, NULL, false, &y), CA_STATUS_INVALID, "n_dims");
    cr_assert_null(y);
    cr_assert_null(ix);
    ca_tensor_release(x);
}

Test(reduce, bad_dtypes_and_nulls) {
    ca_tensor *xi = tu_index(TU_SHAPE(3), (int64_t[]){1, 2, 3}), *y = NULL, *ix = NULL;
    TU_FAILS(ca_mean(xi, 0, NULL, false, &y), CA_STATUS_DTYPE, "int64");
    TU_FAILS(ca_max(xi, 0, NULL, false, &y, &ix), CA_STATUS_DTYPE, "ca_to_dtype");
    TU_FAILS(ca_logsumexp(xi, 0, NULL, false, &y), CA_STATUS_DTYPE, "float32 or float64");
    TU_FAILS(ca_sum(NULL, 0, NULL, false, &y), CA_STATUS_INVALID, "'x' is NULL");
    TU_FAILS(ca_mean(xi, 0, NULL, false, NULL), CA_STATUS_INVALID, "'out' is NULL");
    TU_FAILS(ca_max(xi, 0, NULL, false, NULL, &ix), CA_STATUS_INVALID, "'values' is NULL");
    cr_assert_null(ix);
    ca_tensor_release(xi);
}

Test(reduce, max_without_indices_and_canonical_attrs) {
    /* indices may be NULL; dims given negative and unsorted still reduce the same dims */
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3, 4), true), *a = NULL, *b = NULL;
    TU_OK(ca_max(x, 2, (int64_t[]){-1, 0}, false, &a, NULL));
    TU_OK(ca_max(x, 2, (int64_t[]){0, 2}, false, &b, NULL));
    tu_assert_close(a, b, 0, 0);
    const ca_attrs *at = &a->grad_fn->attrs; /* the node keeps the canonical spelling */
    cr_assert(at->dims.n == 2 && at->dims.v[0] == 0 && at->dims.v[1] == 2 && at->i[0] == 0,
              "node attrs not canonical: n=%d [%lld, %lld]", at->dims.n, (long long)at->dims.v[0],
              (long long)at->dims.v[1]);
    ca_tensor_release(a);
    ca_tensor_release(b);
    ca_tensor_release(x);
}

Test(reduce, logsumexp_grad_is_softmax) {
    double v[6] = {0.5, -1, 2, 3, 3, -4};
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2, 3), v, true), *y = NULL, *l = NULL;
    TU_OK(ca_logsumexp(x, 1, (int64_t[]){-1}, false, &y));
    TU_OK(ca_sum(y, 0, NULL, false, &l));
    TU_OK(ca_backward(l));
    double want[6];
    for (int r = 0; r < 2; r++) {
        double s = 0;
        for (int c = 0; c < 3; c++)
            s += exp(v[r * 3 + c]);
        for (int c = 0; c < 3; c++)
            want[r * 3 + c] = exp(v[r * 3 + c]) / s;
    }
    tu_assert_values(ca_tensor_grad(x), want, 1e-14);
    ca_tensor_release(y);
    ca_tensor_release(l);
    ca_tensor_release(x);
}

Test(reduce, sum_f32_long_is_accurate) {
    /* 2^16 float32 values of 0.1: a naive float loop drifts by ~1e-3 relative */
    int64_t n = 1 << 16;
    ca_tensor *x = NULL, *y = NULL;
    TU_OK(ca_full(CA_FLOAT32, 1, &n, 0.1, &x));
    TU_OK(ca_sum(x, 0, NULL, false, &y));
    double want = (double)n * (double)0.1f;
    cr_assert(fabs(tu_get(y, 0) - want) <= 1e-5 * want, "sum is %.9g, expected %.9g", tu_get(y, 0),
              want);
    ca_tensor_release(y);
    TU_OK(ca_mean(x, 0, NULL, false, &y));
    cr_assert(fabs(tu_get(y, 0) - 0.1f) <= 1e-6, "mean is %.9g", tu_get(y, 0));
    ca_tensor_release(y);
    ca_tensor_release(x);
}

Test(reduce, no_grad_mode_records_nothing) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3), true), *y = NULL, *ix = NULL;
    bool prev = ca_set_grad_enabled(false);
    TU_OK(ca_sum(x, 0, NULL, false, &y));
    cr_assert(!ca_tensor_requires_grad(y) && !ca_tensor_grad_fn_name(y), "sum recorded a node");
    ca_tensor_release(y);
    TU_OK(ca_max(x, 1, (int64_t[]){0}, false, &y, &ix));
    cr_assert(!ca_tensor_requires_grad(y), "max recorded a node");
    ca_tensor_release(y);
    ca_tensor_release(ix);
    ca_set_grad_enabled(prev);
    ca_tensor_release(x);
}
