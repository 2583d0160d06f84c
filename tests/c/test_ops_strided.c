/* test_ops_strided.c - suite `strided`: ca_as_strided (ops_strided.c), a view with any
 * sizes, strides and storage offset: its values, its gradient (summed where windows
 * overlap), compiled equal to eager, an in-place op through it, and its refusals. Expected
 * values are worked out by hand. */
#include "testutil.h"

static ca_tensor *sum_all(ca_tensor *t) {
    ca_tensor *s = NULL;
    TU_OK(ca_sum(t, 0, NULL, false, &s));
    return s;
}

Test(strided, windows_read_the_memory_and_sum_their_gradients) {
    const double xv[5] = {1, 2, 3, 4, 5};
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(5), xv, true), *w = NULL, *s = NULL;
    /* windows of 3, step 1: [[1,2,3],[2,3,4],[3,4,5]] */
    TU_OK(ca_as_strided(x, 2, (int64_t[]){3, 3}, (int64_t[]){1, 1}, -1, &w));
    tu_assert_values(w, (const double[]){1, 2, 3, 2, 3, 4, 3, 4, 5}, 0);
    cr_assert_str_eq(ca_tensor_grad_fn_name(w), "AsStridedBackward0");
    s = sum_all(w);
    TU_OK(ca_backward(s));
    tu_assert_values(ca_tensor_grad(x), (const double[]){1, 2, 3, 2, 1}, 0); /* windows */
    ca_tensor *all[] = {x, w, s};
    tu_release_n(all, 3);
}

Test(strided, compiled_equals_eager) {
    const double xv[6] = {0.5, -1, 2, 1.5, -0.25, 3};
    double eager[6];
    for (int compiled = 0; compiled < 2; compiled++) {
        if (compiled)
            TU_OK(ca_compiled_autograd_enable(NULL));
        ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2, 3), xv, true), *y = NULL, *t = NULL,
                  *q = NULL, *s = NULL;
        TU_OK(ca_mul_scalar(x, 2.0, &y));
        /* y's transpose, read from the storage with an offset of 0 */
        TU_OK(ca_as_strided(y, 2, (int64_t[]){3, 2}, (int64_t[]){1, 3}, 0, &t));
        TU_OK(ca_mul(t, t, &q));
        s = sum_all(q);
        TU_OK(ca_backward(s));
        for (int i = 0; i < 6; i++) {
            double g = tu_get(ca_tensor_grad(x), i);
            cr_assert_float_eq(g, 8 * xv[i], 1e-12); /* d/dx sum((2x)^2) */
            if (compiled)
                cr_assert_float_eq(g, eager[i], 0);
            else
                eager[i] = g;
        }
        ca_tensor *all[] = {x, y, t, q, s};
        tu_release_n(all, 5);
    }
    ca_compiled_counters c;
    ca_compiled_autograd_counters(&c);
    cr_assert_eq(c.eager_fallbacks, 0);
    TU_OK(ca_compiled_autograd_disable());
}

Test(strided, an_in_place_op_through_it_reaches_the_base) {
    const double xv[4] = {1, 2, 3, 4};
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(4), xv, true), *y = NULL, *v = NULL, *s = NULL;
    TU_OK(ca_mul_scalar(x, 1.0, &y));
    TU_OK(ca_as_strided(y, 1, (int64_t[]){2}, (int64_t[]){2}, 1, &v)); /* y[1], y[3] */
    TU_OK(ca_mul_scalar_(v, 10.0));
    tu_assert_values(y, (const double[]){1, 20, 3, 40}, 0);
    s = sum_all(y);
    TU_OK(ca_backward(s));
    tu_assert_values(ca_tensor_grad(x), (const double[]){1, 10, 1, 10}, 0);
    ca_tensor *all[] = {x, y, v, s};
    tu_release_n(all, 4);
}

Test(strided, refusals_and_memory_outside_the_elements) {
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(4), (const double[]){1, 2, 3, 4}, true);
    ca_tensor *y = NULL, *v = NULL, *s = NULL;
    TU_FAILS(ca_as_strided(x, 1, (int64_t[]){3}, (int64_t[]){2}, -1, &v), CA_STATUS_SHAPE,
             "out of bounds for storage of size 32");
    TU_FAILS(ca_as_strided(x, 1, (int64_t[]){2}, (int64_t[]){-1}, -1, &v), CA_STATUS_SHAPE,
             "Negative strides");
    TU_FAILS(ca_as_strided(x, 1, (int64_t[]){2}, (int64_t[]){1}, -5, &v), CA_STATUS_SHAPE,
             "invalid storage offset");
    /* y = x[1:3] read as 3 elements from x[1]: x[3]'s memory is not y's, so its share of
     * the gradient is dropped, as PyTorch drops it */
    TU_OK(ca_narrow(x, 0, 1, 2, &y));
    TU_OK(ca_as_strided(y, 1, (int64_t[]){3}, (int64_t[]){1}, -1, &v));
    tu_assert_values(v, (const double[]){2, 3, 4}, 0);
    s = sum_all(v);
    TU_OK(ca_backward(s));
    tu_assert_values(ca_tensor_grad(x), (const double[]){0, 1, 1, 0}, 0);
    ca_tensor *all[] = {x, y, v, s};
    tu_release_n(all, 4);
}

Test(strided, an_expanded_input_splits_the_gradient) {
    /* e = x expanded to [2, 2]: both rows share x's memory; a view of e's first row gives
     * each of e's elements at a position half its gradient, and x the sum of its rows */
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2), (const double[]){1, 2}, true);
    ca_tensor *e = NULL, *v = NULL, *s = NULL;
    TU_OK(ca_expand(x, 2, (int64_t[]){2, 2}, &e));
    TU_OK(ca_as_strided(e, 1, (int64_t[]){2}, (int64_t[]){1}, -1, &v));
    s = sum_all(v);
    TU_OK(ca_backward(s));
    tu_assert_values(ca_tensor_grad(x), (const double[]){1, 1}, 0);
    ca_tensor *all[] = {x, e, v, s};
    tu_release_n(all, 4);
}
