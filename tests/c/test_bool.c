/* test_bool.c - suite `bool_dtype`: CA_BOOL tensors (one byte, 0 or 1): creation, casts
 * both ways, comparisons returning bool with PyTorch's promotion of mixed inputs, bool
 * conditions and masks in where/masked_fill (eager and compiled backward), the kernels
 * that move bytes (copy, cat, index_select, gather), and what bool refuses.
 */
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* ---------------------------------------------------------------------------------------
 * Creation
 */
Test(bool_dtype, name_size_and_creation) {
    cr_assert_str_eq(ca_dtype_name(CA_BOOL), "bool");
    cr_assert_eq(ca_dtype_size(CA_BOOL), 1);
    ca_tensor *z = NULL, *o = NULL, *f = NULL, *e = NULL;
    TU_OK(ca_zeros(CA_BOOL, TU_SHAPE(2, 3), &z));
    TU_OK(ca_ones(CA_BOOL, TU_SHAPE(2, 3), &o));
    TU_OK(ca_full(CA_BOOL, TU_SHAPE(3), -2.5, &f)); /* nonzero: true */
    TU_OK(ca_empty(CA_BOOL, TU_SHAPE(4), &e));
    cr_assert_eq(ca_tensor_dtype(z), CA_BOOL);
    tu_assert_values(z, (double[]){0, 0, 0, 0, 0, 0}, 0);
    tu_assert_values(o, (double[]){1, 1, 1, 1, 1, 1}, 0);
    const uint8_t *fb = ca_tensor_data(f);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(fb[i], 1, "full(-2.5) byte %d is %d, not 1", i, fb[i]);
    tu_release_n((ca_tensor *[]){z, o, f, e}, 4);
}

Test(bool_dtype, from_data_item_and_copy_to) {
    const uint8_t bytes[4] = {1, 0, 0, 1};
    ca_tensor *t = NULL, *s = NULL;
    TU_OK(ca_from_data(CA_BOOL, TU_SHAPE(4), bytes, &t));
    tu_assert_values(t, (double[]){1, 0, 0, 1}, 0);
    TU_OK(ca_select(t, 0, 3, &s));
    double v = -1;
    TU_OK(ca_tensor_item(s, &v));
    cr_assert_eq(v, 1.0);
    uint8_t back[4] = {9, 9, 9, 9};
    TU_OK(ca_tensor_copy_to(t, back, sizeof back));
    for (int i = 0; i < 4; i++)
        cr_assert_eq(back[i], bytes[i], "copy_to byte %d", i);
    tu_release_n((ca_tensor *[]){t, s}, 2);
}

Test(bool_dtype, random_and_arange_refuse_bool) {
    ca_tensor *y = NULL;
    TU_FAILS(ca_randn(CA_BOOL, TU_SHAPE(3), &y), CA_STATUS_DTYPE, "bool");
    TU_FAILS(ca_rand(CA_BOOL, TU_SHAPE(3), &y), CA_STATUS_DTYPE, "bool");
    TU_FAILS(ca_arange(0, 3, 1, CA_BOOL, &y), CA_STATUS_DTYPE, "Bool");
    cr_assert_null(y);
}

/* ---------------------------------------------------------------------------------------
 * Casts
 */
Test(bool_dtype, casts_to_bool_are_nonzero) {
    const double v[6] = {0.0, -0.0, 0.25, -3, NAN, INFINITY};
    const double want[6] = {0, 0, 1, 1, 1, 1};
    const ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int k = 0; k < 2; k++) {
        ca_tensor *x = tu_from(dts[k], TU_SHAPE(6), v, false), *y = NULL;
        TU_OK(ca_to_dtype(x, CA_BOOL, &y));
        cr_assert_eq(ca_tensor_dtype(y), CA_BOOL);
        tu_assert_values(y, want, 0);
        tu_release_n((ca_tensor *[]){x, y}, 2);
    }
    ca_tensor *i = tu_index(TU_SHAPE(3), (int64_t[]){0, -7, 1}), *y = NULL;
    TU_OK(ca_to_dtype(i, CA_BOOL, &y));
    tu_assert_values(y, (double[]){0, 1, 1}, 0);
    tu_release_n((ca_tensor *[]){i, y}, 2);
}

Test(bool_dtype, casts_from_bool_are_zero_one) {
    const double v[6] = {1, 0, 0, 1, 1, 0};
    ca_tensor *b = tu_from(CA_BOOL, TU_SHAPE(2, 3), v, false), *bt = NULL;
    TU_OK(ca_transpose(b, 0, 1, &bt)); /* a strided source */
    const ca_dtype dts[3] = {CA_FLOAT32, CA_FLOAT64, CA_INT64};
    for (int k = 0; k < 3; k++) {
        ca_tensor *y = NULL;
        TU_OK(ca_to_dtype(bt, dts[k], &y));
        cr_assert_eq(ca_tensor_dtype(y), dts[k]);
        tu_assert_values(y, (double[]){1, 1, 0, 1, 0, 0}, 0);
        ca_tensor_release(y);
    }
    tu_release_n((ca_tensor *[]){b, bt}, 2);
}

Test(bool_dtype, to_bool_has_no_gradient) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(3), true), *y = NULL, *l = NULL;
    TU_OK(ca_to_dtype(x, CA_BOOL, &y));
    cr_assert_not(ca_tensor_requires_grad(y), "to bool requires grad");
    cr_assert_null(ca_tensor_grad_fn(y));
    TU_FAILS(ca_tensor_set_requires_grad(y, true), CA_STATUS_DTYPE, "bool");
    TU_OK(ca_to_dtype(y, CA_INT64, &l)); /* bool -> int64 is allowed, unlike float -> int64 */
    tu_assert_values(l, (double[]){tu_get(y, 0), tu_get(y, 1), tu_get(y, 2)}, 0);
    tu_release_n((ca_tensor *[]){x, y, l}, 3);
}

/* ---------------------------------------------------------------------------------------
 * Comparisons
 */
Test(bool_dtype, comparisons_promote_mixed_inputs) {
    ca_tensor *f32 = tu_from(CA_FLOAT32, TU_SHAPE(3), (double[]){0.5, 1, 2}, false);
    ca_tensor *f64 = tu_from(CA_FLOAT64, TU_SHAPE(3), (double[]){0.5, 2, 1}, false);
    ca_tensor *i64 = tu_index(TU_SHAPE(3), (int64_t[]){0, 1, 2});
    ca_tensor *b = tu_from(CA_BOOL, TU_SHAPE(3), (double[]){1, 1, 0}, false), *y = NULL;
    TU_OK(ca_lt(f32, f64, &y)); /* in float64 */
    cr_assert_eq(ca_tensor_dtype(y), CA_BOOL);
    tu_assert_values(y, (double[]){0, 1, 0}, 0);
    ca_tensor_release(y);
    TU_OK(ca_eq(i64, f32, &y)); /* int64 vs float: in float32 */
    tu_assert_values(y, (double[]){0, 1, 1}, 0);
    ca_tensor_release(y);
    TU_OK(ca_ge(b, f32, &y)); /* bool reads as 0/1 */
    tu_assert_values(y, (double[]){1, 1, 0}, 0);
    ca_tensor_release(y);
    TU_OK(ca_ne(b, i64, &y));
    tu_assert_values(y, (double[]){1, 0, 1}, 0);
    tu_release_n((ca_tensor *[]){f32, f64, i64, b, y}, 5);
}

Test(bool_dtype, bool_comparisons_and_logical_kernels) {
    ca_tensor *a = tu_from(CA_BOOL, TU_SHAPE(4), (double[]){0, 0, 1, 1}, false);
    ca_tensor *b = tu_from(CA_BOOL, TU_SHAPE(4), (double[]){0, 1, 0, 1}, false), *y = NULL;
    TU_OK(ca_lt(a, b, &y));
    tu_assert_values(y, (double[]){0, 1, 0, 0}, 0);
    ca_tensor_release(y);
    TU_OK(ca_eq_scalar(a, 1.0, &y));
    tu_assert_values(y, (double[]){0, 0, 1, 1}, 0);
    ca_tensor_release(y);
    TU_OK(ca_mul(a, b, &y)); /* and */
    cr_assert_eq(ca_tensor_dtype(y), CA_BOOL);
    tu_assert_values(y, (double[]){0, 0, 0, 1}, 0);
    ca_tensor_release(y);
    TU_OK(ca_add(a, b, &y)); /* or */
    tu_assert_values(y, (double[]){0, 1, 1, 1}, 0);
    ca_tensor_release(y);
    TU_OK(ca_maximum(a, b, &y));
    tu_assert_values(y, (double[]){0, 1, 1, 1}, 0);
    tu_release_n((ca_tensor *[]){a, b, y}, 3);
}

Test(bool_dtype, arithmetic_on_bool_is_refused) {
    ca_tensor *a = tu_from(CA_BOOL, TU_SHAPE(2), (double[]){0, 1}, false), *y = NULL;
    ca_tensor *f = tu_randn(CA_FLOAT32, TU_SHAPE(2), false);
    TU_FAILS(ca_neg(a, &y), CA_STATUS_DTYPE, "bool");
    TU_FAILS(ca_exp(a, &y), CA_STATUS_DTYPE, "ca_to_dtype");
    TU_FAILS(ca_sub(a, a, &y), CA_STATUS_DTYPE, "bool");
    TU_FAILS(ca_mul(a, f, &y), CA_STATUS_DTYPE, "bool"); /* C does not promote */
    TU_FAILS(ca_sum(a, 0, NULL, false, &y), CA_STATUS_DTYPE, "bool");
    cr_assert_null(y);
    tu_release_n((ca_tensor *[]){a, f}, 2);
}

/* ---------------------------------------------------------------------------------------
 * Conditions and masks
 */
static ca_tensor *grad_of(ca_tensor *t) {
    return ca_tensor_grad(t);
}

/* where(x > 0, x * y, y) with a bool condition; returns sum as the loss. */
static ca_status where_loss(ca_tensor *x, ca_tensor *y, ca_tensor **loss) {
    ca_tensor *c = NULL, *xy = NULL, *w = NULL;
    ca_status st = ca_gt_scalar(x, 0.0, &c);
    if (st == CA_OK)
        st = ca_mul(x, y, &xy);
    if (st == CA_OK)
        st = ca_where(c, xy, y, &w);
    if (st == CA_OK)
        st = ca_sum(w, 0, NULL, false, loss);
    tu_release_n((ca_tensor *[]){c, xy, w}, 3);
    return st;
}

Test(bool_dtype, where_with_bool_condition_eager_and_compiled) {
    const double xv[4] = {1, -2, 3, -4}, yv[4] = {10, 20, 30, 40};
    const ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int k = 0; k < 2; k++)
        for (int compiled = 0; compiled < 2; compiled++) {
            ca_tensor *x = tu_from(dts[k], TU_SHAPE(4), xv, true);
            ca_tensor *y = tu_from(dts[k], TU_SHAPE(4), yv, true), *loss = NULL;
            TU_OK(where_loss(x, y, &loss));
            if (compiled)
                TU_OK(ca_compiled_autograd_enable(NULL));
            ca_status st = ca_backward(loss);
            if (compiled)
                TU_OK(ca_compiled_autograd_disable());
            cr_assert_eq(st, CA_OK, "backward (compiled %d): %s", compiled, ca_last_error());
            /* d/dx: y where x > 0; d/dy: x where x > 0, else 1 */
            tu_assert_values(grad_of(x), (double[]){10, 0, 30, 0}, 0);
            tu_assert_values(grad_of(y), (double[]){1, 1, 3, 1}, 0);
            tu_release_n((ca_tensor *[]){x, y, loss}, 3);
        }
}

Test(bool_dtype, masked_fill_with_bool_mask_and_its_gradient) {
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2, 2), (double[]){1, 2, 3, 4}, true);
    ca_tensor *m = tu_from(CA_BOOL, TU_SHAPE(2), (double[]){0, 1}, false), *y = NULL, *l = NULL;
    TU_OK(ca_masked_fill(x, m, -INFINITY, &y));
    tu_assert_values(y, (double[]){1, -INFINITY, 3, -INFINITY}, 0);
    ca_tensor *keep = NULL;
    TU_OK(ca_masked_fill(x, m, 0.0, &keep));
    TU_OK(ca_sum(keep, 0, NULL, false, &l));
    TU_OK(ca_backward(l));
    tu_assert_values(grad_of(x), (double[]){1, 0, 1, 0}, 0);
    tu_release_n((ca_tensor *[]){x, m, y, l, keep}, 5);
}

/* ---------------------------------------------------------------------------------------
 * Kernels that move bytes
 */
Test(bool_dtype, copies_cat_and_index_select) {
    const double v[6] = {1, 0, 0, 1, 1, 0};
    ca_tensor *b = tu_from(CA_BOOL, TU_SHAPE(2, 3), v, false), *bt = NULL, *c = NULL;
    TU_OK(ca_transpose(b, 0, 1, &bt));
    TU_OK(ca_contiguous(bt, &c));
    tu_assert_values(c, (double[]){1, 1, 0, 1, 0, 0}, 0);
    ca_tensor *cat = NULL, *parts[2] = {b, b};
    TU_OK(ca_cat(2, parts, 1, &cat));
    tu_assert_values(cat, (double[]){1, 0, 0, 1, 0, 0, 1, 1, 0, 1, 1, 0}, 0);
    ca_tensor *idx = tu_index(TU_SHAPE(3), (int64_t[]){2, 0, 2}), *sel = NULL, *g = NULL;
    TU_OK(ca_index_select(b, 1, idx, &sel));
    tu_assert_values(sel, (double[]){0, 1, 0, 0, 1, 0}, 0);
    ca_tensor *gi = tu_index(TU_SHAPE(2, 1), (int64_t[]){1, 2});
    TU_OK(ca_gather(b, 1, gi, &g));
    tu_assert_values(g, (double[]){0, 0}, 0);
    tu_release_n((ca_tensor *[]){b, bt, c, cat, idx, sel, gi, g}, 8);
}

Test(bool_dtype, tril_keeps_bools_and_other_kernels_refuse_them) {
    ca_tensor *b = NULL, *y = NULL;
    TU_OK(ca_ones(CA_BOOL, TU_SHAPE(2, 2), &b));
    TU_OK(ca_tril(b, 0, &y));
    cr_assert_eq(ca_tensor_dtype(y), CA_BOOL);
    tu_assert_values(y, (double[]){1, 0, 1, 1}, 0);
    ca_tensor_release(y);
    y = NULL;
    /* kernels written for float or int64 elements never see a bool one */
    TU_FAILS(ca_cumsum(b, 0, &y), CA_STATUS_DTYPE, "bool");
    TU_FAILS(ca_softmax(b, 0, &y), CA_STATUS_DTYPE, "bool");
    TU_FAILS(ca_matmul(b, b, &y), CA_STATUS_DTYPE, "bool");
    cr_assert_null(y);
    ca_tensor_release(b);
}

/* The flat (typed, pooled) and strided (element by element) cast paths agree, both ways,
 * over more elements than one pool grain. */
Test(bool_dtype, flat_and_strided_casts_agree) {
    const int64_t rows = 300, cols = 100; /* 30000 elements: more than KERN_GRAIN */
    const ca_dtype dts[3] = {CA_FLOAT32, CA_FLOAT64, CA_INT64};
    double *v = malloc(sizeof(double) * (size_t)(rows * cols));
    cr_assert(v != NULL);
    for (int64_t i = 0; i < rows * cols; i++)
        v[i] = (double)((i * 7) % 5) - 2.0; /* -2..2: zeros among them */
    for (int k = 0; k < 3; k++) {
        ca_tensor *x = tu_from(dts[k], TU_SHAPE(rows, cols), v, false);
        ca_tensor *xt = NULL, *flat = NULL, *strided = NULL, *back = NULL;
        TU_OK(ca_transpose(x, 0, 1, &xt));
        TU_OK(ca_to_dtype(x, CA_BOOL, &flat));
        TU_OK(ca_to_dtype(xt, CA_BOOL, &strided));
        TU_OK(ca_to_dtype(flat, dts[k], &back));
        for (int64_t i = 0; i < rows * cols; i += 997) {
            int64_t r = i / cols, c = i % cols;
            cr_assert_eq(tu_get(flat, i), v[i] != 0, "%s flat element %lld", ca_dtype_name(dts[k]),
                         (long long)i);
            cr_assert_eq(tu_get(strided, c * rows + r), v[i] != 0, "%s strided element %lld",
                         ca_dtype_name(dts[k]), (long long)i);
            cr_assert_eq(tu_get(back, i), v[i] != 0, "%s back element %lld", ca_dtype_name(dts[k]),
                         (long long)i);
        }
        tu_release_n((ca_tensor *[]){x, xt, flat, strided, back}, 5);
    }
    free(v);
}

/* Every comparison on contiguous floats (16-element vector blocks and the scalar tail)
 * against C's operators, NaN, signed zeros and ties included. */
typedef ca_status (*cmp_fn)(ca_tensor *, ca_tensor *, ca_tensor **);
typedef ca_status (*cmp_s_fn)(ca_tensor *, double, ca_tensor **);

static bool rel(int k, double a, double b) {
    switch (k) {
    case 0: return a < b;
    case 1: return a <= b;
    case 2: return a > b;
    case 3: return a >= b;
    case 4: return a == b;
    default: return a != b;
    }
}

Test(bool_dtype, comparisons_of_contiguous_floats_in_blocks_and_tail) {
    const cmp_fn fns[6] = {ca_lt, ca_le, ca_gt, ca_ge, ca_eq, ca_ne};
    const cmp_s_fn sfns[6] = {ca_lt_scalar, ca_le_scalar, ca_gt_scalar,
                              ca_ge_scalar, ca_eq_scalar, ca_ne_scalar};
    const ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    enum { N = 37 }; /* two blocks of 16 and a tail of 5 */
    double av[N], bv[N];
    for (int i = 0; i < N; i++) {
        av[i] = (double)(i % 7) - 3.0;
        bv[i] = (double)(i % 5) - 2.0;
    }
    av[3] = NAN, bv[20] = NAN, av[33] = NAN, av[7] = -0.0, bv[7] = 0.0;
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 6; k++) {
            ca_tensor *a = tu_from(dts[d], TU_SHAPE(N), av, false);
            ca_tensor *b = tu_from(dts[d], TU_SHAPE(N), bv, false), *y = NULL, *ys = NULL;
            TU_OK(fns[k](a, b, &y));
            TU_OK(sfns[k](a, 1.0, &ys));
            for (int i = 0; i < N; i++) {
                cr_assert_eq(tu_get(y, i), rel(k, av[i], bv[i]), "%s relation %d element %d",
                             ca_dtype_name(dts[d]), k, i);
                cr_assert_eq(tu_get(ys, i), rel(k, av[i], 1.0), "%s scalar relation %d element %d",
                             ca_dtype_name(dts[d]), k, i);
            }
            tu_release_n((ca_tensor *[]){a, b, y, ys}, 4);
        }
}
