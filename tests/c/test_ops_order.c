/* test_ops_order.c - tril/triu, cumsum, sort/topk (ops_order.c, ops_sort.c) and pooling
 * (ops_pool.c): values on hand-made inputs, float64 gradients against central
 * differences, and the errors of refused arguments. */
#include <math.h>
#include <string.h>

#include "testutil.h"

/* ---------------------------------------------------------------------------------------
 * Values
 */
Test(ops_order, tril_triu_keep_their_side_of_the_diagonal) {
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6}, false);
    ca_tensor *lo = NULL, *up = NULL;
    TU_OK(ca_tril(x, 0, &lo));
    TU_OK(ca_triu(x, 1, &up));
    tu_assert_values(lo, (double[]){1, 0, 0, 4, 5, 0}, 0);
    tu_assert_values(up, (double[]){0, 2, 3, 0, 0, 6}, 0);
    tu_release_n((ca_tensor *[]){x, lo, up}, 3);
}

Test(ops_order, cumsum_runs_along_its_dim) {
    ca_tensor *x = tu_from(CA_FLOAT32, TU_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6}, false);
    ca_tensor *r0 = NULL, *r1 = NULL;
    TU_OK(ca_cumsum(x, 0, &r0));
    TU_OK(ca_cumsum(x, -1, &r1));
    tu_assert_values(r0, (double[]){1, 2, 3, 5, 7, 9}, 0);
    tu_assert_values(r1, (double[]){1, 3, 6, 4, 9, 15}, 0);
    tu_release_n((ca_tensor *[]){x, r0, r1}, 3);
}

/* Equal values keep their order either way; NaN sorts above every number. */
Test(ops_order, sort_is_stable_and_puts_nan_on_top) {
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(6), (double[]){2, NAN, 1, 2, -INFINITY, 1}, false);
    ca_tensor *v = NULL, *i = NULL;
    TU_OK(ca_sort(x, 0, false, true, &v, &i));
    tu_assert_values(i, (double[]){4, 2, 5, 0, 3, 1}, 0);
    tu_release_n((ca_tensor *[]){v, i}, 2);
    TU_OK(ca_sort(x, 0, true, false, &v, &i));
    tu_assert_values(i, (double[]){1, 0, 3, 2, 5, 4}, 0);
    cr_assert_eq(ca_tensor_dtype(i), CA_INT64);
    tu_release_n((ca_tensor *[]){v, i}, 2);
    TU_OK(ca_topk(x, 2, 0, false, true, &v, &i));
    tu_assert_values(v, (double[]){-INFINITY, 1}, 0);
    tu_assert_values(i, (double[]){4, 2}, 0);
    tu_release_n((ca_tensor *[]){v, i, x}, 3);
}

Test(ops_order, max_pool_indices_name_the_winner_in_its_plane) {
    double xv[16] = {1, 5, 0, 2, 3, 4, 7, 7, 0, 0, 1, 1, 9, 0, 1, 1};
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(1, 4, 4), xv, false), *v = NULL, *i = NULL;
    TU_OK(ca_max_pool2d(x, (int64_t[]){2, 2}, (int64_t[]){2, 2}, (int64_t[]){0, 0},
                        (int64_t[]){1, 1}, false, &v, &i));
    tu_assert_values(v, (double[]){5, 7, 9, 1}, 0);
    tu_assert_values(i, (double[]){1, 6, 12, 10}, 0);
    tu_release_n((ca_tensor *[]){x, v, i}, 3);
}

Test(ops_order, avg_pool_divides_by_the_window_it_was_asked_to) {
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(1, 1, 2, 2), (double[]){1, 2, 3, 4}, false);
    ca_tensor *with = NULL, *without = NULL, *over = NULL;
    const int64_t k[2] = {2, 2}, s[2] = {2, 2}, p[2] = {1, 1};
    TU_OK(ca_avg_pool2d(x, k, s, p, false, true, 0, &with));
    TU_OK(ca_avg_pool2d(x, k, s, p, false, false, 0, &without));
    TU_OK(ca_avg_pool2d(x, k, s, p, false, true, 3, &over));
    tu_assert_values(with, (double[]){0.25, 0.5, 0.75, 1}, 1e-15);
    tu_assert_values(without, (double[]){1, 2, 3, 4}, 1e-15);
    tu_assert_values(over, (double[]){1.0 / 3, 2.0 / 3, 1, 4.0 / 3}, 1e-15);
    tu_release_n((ca_tensor *[]){x, with, without, over}, 4);
}

/* ---------------------------------------------------------------------------------------
 * Gradients: float64 against central differences
 */
typedef ca_status (*unary_fn)(ca_tensor *x, ca_tensor **out);

static ca_status call_unary(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ((unary_fn)ctx)(in[0], out);
}

static ca_status g_tril(ca_tensor *x, ca_tensor **o) {
    return ca_tril(x, -1, o);
}
static ca_status g_triu(ca_tensor *x, ca_tensor **o) {
    return ca_triu(x, 1, o);
}
static ca_status g_cumsum(ca_tensor *x, ca_tensor **o) {
    return ca_cumsum(x, 1, o);
}
static ca_status g_cumprod(ca_tensor *x, ca_tensor **o) {
    return ca_cumprod(x, 0, o);
}
static ca_status g_cumprod_last(ca_tensor *x, ca_tensor **o) {
    return ca_cumprod(x, -1, o);
}
static ca_status g_sort(ca_tensor *x, ca_tensor **o) {
    ca_tensor *i = NULL;
    ca_status st = ca_sort(x, 0, true, false, o, &i);
    ca_tensor_release(i);
    return st;
}
static ca_status g_topk(ca_tensor *x, ca_tensor **o) {
    ca_tensor *i = NULL;
    ca_status st = ca_topk(x, 3, -1, true, true, o, &i);
    ca_tensor_release(i);
    return st;
}
static ca_status g_max_pool(ca_tensor *x, ca_tensor **o) {
    return ca_max_pool2d(x, (int64_t[]){3, 2}, (int64_t[]){2, 1}, (int64_t[]){1, 1},
                         (int64_t[]){1, 2}, true, o, NULL);
}
static ca_status g_avg_pool(ca_tensor *x, ca_tensor **o) {
    return ca_avg_pool2d(x, (int64_t[]){3, 3}, (int64_t[]){2, 2}, (int64_t[]){1, 1}, true, false, 0,
                         o);
}
static ca_status g_adaptive(ca_tensor *x, ca_tensor **o) {
    return ca_adaptive_avg_pool2d(x, 3, 2, o);
}

Test(ops_order, gradients_match_finite_differences) {
    static const struct {
        unary_fn f;
        int nd;
        int64_t shape[4];
    } cases[] = {
        {g_tril, 3, {2, 3, 4}},        {g_triu, 2, {4, 3}},        {g_cumsum, 3, {2, 5, 3}},
        {g_sort, 2, {5, 3}},           {g_cumprod, 2, {4, 3}},     {g_topk, 2, {3, 6}},
        {g_max_pool, 4, {2, 2, 5, 4}}, {g_avg_pool, 3, {2, 5, 6}}, {g_adaptive, 4, {1, 2, 7, 5}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ca_tensor *x = tu_randn(CA_FLOAT64, cases[k].nd, cases[k].shape, true);
        tu_gradcheck(call_unary, 1, &x, (void *)cases[k].f, 1e-7, 1e-5);
        ca_tensor_release(x);
    }
}

/* Zeros: the gradient at the first zero is the product of the others along the way, and
 * after it 0; central differences agree. */
Test(ops_order, cumprod_gradient_through_zeros) {
    ca_tensor *x =
        tu_from(CA_FLOAT64, TU_SHAPE(2, 4), (double[]){1.5, 0, 2, -0.5, 0, 3, 0, 2}, true);
    tu_gradcheck(call_unary, 1, &x, (void *)g_cumprod_last, 1e-7, 1e-5);
    ca_tensor_release(x);
}

/* ---------------------------------------------------------------------------------------
 * Refused arguments
 */
Test(ops_order, refused_arguments_say_why) {
    ca_tensor *v1 = tu_randn(CA_FLOAT32, TU_SHAPE(3), false), *x4 = NULL, *o = NULL, *i = NULL;
    x4 = tu_randn(CA_FLOAT32, TU_SHAPE(1, 1, 3, 3), false);
    TU_FAILS(ca_tril(v1, 0, &o), CA_STATUS_SHAPE, "at least 2 dimensions");
    TU_FAILS(ca_topk(v1, 4, 0, true, true, &o, &i), CA_STATUS_SHAPE, "k out of range");
    TU_FAILS(ca_sort(v1, 1, false, false, &o, &i), CA_STATUS_DIM, "out of range");
    TU_FAILS(ca_cumsum(v1, -2, &o), CA_STATUS_DIM, "out of range");
    const int64_t two[2] = {2, 2}, one[2] = {1, 1}, zero[2] = {0, 0};
    TU_FAILS(ca_max_pool2d(v1, two, two, zero, one, false, &o, NULL), CA_STATUS_SHAPE, "3D or 4D");
    TU_FAILS(ca_max_pool2d(x4, two, two, (int64_t[]){2, 0}, one, false, &o, NULL), CA_STATUS_SHAPE,
             "at most half of effective kernel size");
    TU_FAILS(ca_avg_pool2d(x4, (int64_t[]){4, 4}, two, zero, false, true, 0, &o), CA_STATUS_SHAPE,
             "Output size is too small");
    TU_FAILS(ca_adaptive_avg_pool2d(v1, 2, 2, &o), CA_STATUS_SHAPE, "Expected 3D or 4D tensor");
    cr_assert_null(o);
    tu_release_n((ca_tensor *[]){v1, x4}, 2);
}
