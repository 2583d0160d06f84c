/* test_inplace_view.c - suite `inplace_view`: in-place ops on views of tensors in the
 * autograd graph (view_inplace.c), as PyTorch's CopySlices: the base takes the update's
 * history, every view of the base sees it, and the elements outside the view keep their
 * gradient path exactly. Also fill_/zero_ in the graph. Expected values are worked out by
 * hand from the chain rule. */
#include "testutil.h"

static ca_tensor *sum_all(ca_tensor *t) {
    ca_tensor *s = NULL;
    TU_OK(ca_sum(t, 0, NULL, false, &s));
    return s;
}

static ca_tensor *vec(const double *v, bool rg) {
    return tu_from(CA_FLOAT64, TU_SHAPE(3), v, rg);
}

static void backward_sum(ca_tensor *t) {
    ca_tensor *s = sum_all(t);
    TU_OK(ca_backward(s));
    ca_tensor_release(s);
}

Test(inplace_view, update_through_a_view_reaches_the_base) {
    const double xv[3] = {1, 2, 3};
    ca_tensor *x = vec(xv, true), *y = NULL, *v = NULL;
    TU_OK(ca_mul_scalar(x, 2.0, &y));
    TU_OK(ca_narrow(y, 0, 0, 2, &v));
    TU_OK(ca_mul_scalar_(v, 3.0)); /* y = [6x0, 6x1, 2x2] */
    tu_assert_values(y, (const double[]){6, 12, 6}, 0);
    cr_assert_eq(ca_tensor_version(y), 1);
    cr_assert(!ca_tensor_is_leaf(y));
    backward_sum(y);
    tu_assert_values(ca_tensor_grad(x), (const double[]){6, 6, 2}, 1e-12);
    ca_tensor *all[] = {x, y, v};
    tu_release_n(all, 3);
}

Test(inplace_view, the_view_itself_carries_the_update) {
    const double xv[3] = {1, 2, 3};
    ca_tensor *x = vec(xv, true), *y = NULL, *v = NULL;
    TU_OK(ca_mul_scalar(x, 2.0, &y));
    TU_OK(ca_narrow(y, 0, 1, 2, &v));
    TU_OK(ca_mul_scalar_(v, 5.0));                                 /* v = 10 x[1:3] */
    cr_assert_str_eq(ca_tensor_grad_fn_name(v), "SliceBackward0"); /* replayed on y */
    backward_sum(v);
    tu_assert_values(ca_tensor_grad(x), (const double[]){0, 10, 10}, 1e-12);
    ca_tensor *all[] = {x, y, v};
    tu_release_n(all, 3);
}

Test(inplace_view, other_views_of_the_base_see_the_update) {
    /* a and b overlap at y[1]; writing through a changes what b's history must say */
    const double xv[3] = {1, 2, 3};
    ca_tensor *x = vec(xv, true), *y = NULL, *a = NULL, *b = NULL;
    TU_OK(ca_mul_scalar(x, 2.0, &y));
    TU_OK(ca_narrow(y, 0, 0, 2, &a));
    TU_OK(ca_narrow(y, 0, 1, 2, &b));
    TU_OK(ca_mul_scalar_(a, 5.0)); /* b = [10 x1, 2 x2] */
    backward_sum(b);
    tu_assert_values(ca_tensor_grad(x), (const double[]){0, 10, 2}, 1e-12);
    ca_tensor *all[] = {x, y, a, b};
    tu_release_n(all, 4);
}

Test(inplace_view, update_of_the_base_reaches_its_views) {
    const double xv[3] = {1, 2, 3};
    ca_tensor *x = vec(xv, true), *y = NULL, *v = NULL;
    TU_OK(ca_mul_scalar(x, 2.0, &y));
    TU_OK(ca_narrow(y, 0, 1, 2, &v));
    TU_OK(ca_mul_scalar_(y, 3.0)); /* v = 6 x[1:3] */
    tu_assert_values(v, (const double[]){12, 18}, 0);
    backward_sum(v);
    tu_assert_values(ca_tensor_grad(x), (const double[]){0, 6, 6}, 1e-12);
    ca_tensor *all[] = {x, y, v};
    tu_release_n(all, 3);
}

Test(inplace_view, a_buffer_takes_a_history_through_its_view) {
    /* out = zeros; out[1:3] = 2w: as `out[i] = f(x)` in a loop */
    const double wv[2] = {4, 5};
    ca_tensor *w = tu_from(CA_FLOAT64, TU_SHAPE(2), wv, true), *out = NULL, *v = NULL, *p = NULL;
    TU_OK(ca_zeros(CA_FLOAT64, 1, (const int64_t[]){3}, &out));
    TU_OK(ca_narrow(out, 0, 1, 2, &v));
    TU_OK(ca_mul_scalar(w, 2.0, &p));
    cr_assert(!ca_tensor_requires_grad(v));
    TU_OK(ca_copy_(v, p));
    cr_assert(ca_tensor_requires_grad(out));
    cr_assert(ca_tensor_requires_grad(v));
    tu_assert_values(out, (const double[]){0, 8, 10}, 0);
    backward_sum(out);
    tu_assert_values(ca_tensor_grad(w), (const double[]){2, 2}, 1e-12);
    ca_tensor *all[] = {w, out, v, p};
    tu_release_n(all, 4);
}

Test(inplace_view, elements_outside_the_view_keep_an_exact_gradient) {
    /* where, not a masked sum: an infinity outside the view gives no NaN */
    const double xv[3] = {1.0 / 0.0, 2, 3};
    ca_tensor *x = vec(xv, true), *y = NULL, *v = NULL;
    TU_OK(ca_mul_scalar(x, 1.0, &y));
    TU_OK(ca_narrow(y, 0, 1, 2, &v));
    TU_OK(ca_mul_scalar_(v, 2.0));
    backward_sum(y);
    tu_assert_values(ca_tensor_grad(x), (const double[]){1, 2, 2}, 0);
    ca_tensor *all[] = {x, y, v};
    tu_release_n(all, 3);
}

Test(inplace_view, views_of_views_and_transposes) {
    /* y = 2x over [2, 3]; y.t()[2] is y[:, 2]; add w to it */
    const double xv[6] = {1, 2, 3, 4, 5, 6}, wv[2] = {10, 20};
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2, 3), xv, true);
    ca_tensor *w = tu_from(CA_FLOAT64, TU_SHAPE(2), wv, true);
    ca_tensor *y = NULL, *t = NULL, *col = NULL, *sq = NULL;
    TU_OK(ca_mul_scalar(x, 2.0, &y));
    TU_OK(ca_transpose(y, 0, 1, &t));
    TU_OK(ca_select(t, 0, 2, &col));
    TU_OK(ca_mul_(col, w)); /* y[:, 2] = 2 x[:, 2] * w */
    tu_assert_values(y, (const double[]){2, 4, 60, 8, 10, 240}, 0);
    TU_OK(ca_mul(y, y, &sq)); /* d/dx sum(y^2) = 2 y dy/dx */
    backward_sum(sq);
    tu_assert_values(ca_tensor_grad(x), (const double[]){8, 16, 2400, 32, 40, 19200}, 1e-9);
    tu_assert_values(ca_tensor_grad(w), (const double[]){2 * 60 * 6, 2 * 240 * 12}, 1e-9);
    ca_tensor *all[] = {x, w, y, t, col, sq};
    tu_release_n(all, 6);
}

Test(inplace_view, compiled_equals_eager) {
    const double xv[3] = {0.5, -1, 2}, wv[2] = {3, -2};
    double eager[3], eager_w[2];
    for (int compiled = 0; compiled < 2; compiled++) {
        if (compiled)
            TU_OK(ca_compiled_autograd_enable(NULL));
        ca_tensor *x = vec(xv, true), *w = tu_from(CA_FLOAT64, TU_SHAPE(2), wv, true);
        ca_tensor *y = NULL, *v = NULL, *t = NULL;
        TU_OK(ca_mul_scalar(x, 3.0, &y));
        TU_OK(ca_narrow(y, 0, 1, 2, &v));
        TU_OK(ca_add_(v, w, 2.0));
        TU_OK(ca_mul_(v, w));
        TU_OK(ca_tanh(y, &t));
        backward_sum(t);
        for (int i = 0; i < 3; i++) {
            if (compiled)
                cr_assert_float_eq(tu_get(ca_tensor_grad(x), i), eager[i], 1e-12);
            else
                eager[i] = tu_get(ca_tensor_grad(x), i);
        }
        for (int i = 0; i < 2; i++) {
            if (compiled)
                cr_assert_float_eq(tu_get(ca_tensor_grad(w), i), eager_w[i], 1e-12);
            else
                eager_w[i] = tu_get(ca_tensor_grad(w), i);
        }
        ca_tensor *all[] = {x, w, y, v, t};
        tu_release_n(all, 5);
    }
    TU_OK(ca_compiled_autograd_disable());
}

Test(inplace_view, a_view_of_a_leaf_refuses) {
    const double xv[3] = {1, 2, 3};
    ca_tensor *x = vec(xv, true), *v = NULL;
    TU_OK(ca_narrow(x, 0, 0, 2, &v));
    TU_FAILS(ca_mul_scalar_(v, 2.0), CA_STATUS_AUTOGRAD,
             "a view of a leaf Variable that requires grad");
    tu_assert_values(x, xv, 0);
    cr_assert_eq(ca_tensor_version(x), 0);
    ca_tensor *all[] = {x, v};
    tu_release_n(all, 2);
}

Test(inplace_view, an_overlapping_view_refuses) {
    const double xv[1] = {2};
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(1), xv, true), *y = NULL, *e = NULL;
    TU_OK(ca_mul_scalar(x, 1.0, &y));
    TU_OK(ca_expand(y, 1, (const int64_t[]){3}, &e));
    TU_FAILS(ca_mul_scalar_(e, 2.0), CA_STATUS_AUTOGRAD, "single memory location");
    tu_assert_values(y, (const double[]){2}, 0);
    ca_tensor *all[] = {x, y, e};
    tu_release_n(all, 3);
}

Test(inplace_view, a_saved_value_changed_through_a_view_fails_at_backward) {
    const double xv[3] = {0, 1, 2};
    ca_tensor *x = vec(xv, true), *y = NULL, *v = NULL;
    TU_OK(ca_exp(x, &y)); /* exp saves its output */
    TU_OK(ca_narrow(y, 0, 0, 1, &v));
    TU_OK(ca_mul_scalar_(v, 2.0));
    ca_tensor *s = sum_all(y);
    TU_FAILS(ca_backward(s), CA_STATUS_AUTOGRAD, "modified by an inplace operation");
    ca_tensor *all[] = {x, y, v, s};
    tu_release_n(all, 4);
}

Test(inplace_view, fill_in_the_graph_cuts_the_gradient) {
    /* y.fill_(1): y keeps requiring grad, its old history gets zeros (FillBackward0) */
    const double xv[3] = {1, 2, 3};
    ca_tensor *x = vec(xv, true), *y = NULL, *v = NULL;
    TU_OK(ca_mul_scalar(x, 2.0, &y));
    TU_OK(ca_fill_(y, 1.0));
    tu_assert_values(y, (const double[]){1, 1, 1}, 0);
    cr_assert(ca_tensor_requires_grad(y));
    backward_sum(y);
    tu_assert_values(ca_tensor_grad(x), (const double[]){0, 0, 0}, 0);
    TU_OK(ca_tensor_set_grad(x, NULL));
    ca_tensor *z = NULL;
    TU_OK(ca_mul_scalar(x, 2.0, &z));
    TU_OK(ca_narrow(z, 0, 0, 1, &v));
    TU_OK(ca_zero_(v)); /* z = [0, 2 x1, 2 x2] */
    backward_sum(z);
    tu_assert_values(ca_tensor_grad(x), (const double[]){0, 2, 2}, 0);
    ca_tensor *all[] = {x, y, z, v};
    tu_release_n(all, 4);
}

Test(inplace_view, a_view_made_without_grad_refuses_and_knows_its_base) {
    const double xv[3] = {1, 2, 3};
    ca_tensor *x = vec(xv, true), *y = NULL, *v = NULL, *w = NULL;
    TU_OK(ca_mul_scalar(x, 2.0, &y));
    bool prev = ca_set_grad_enabled(false);
    TU_OK(ca_narrow(y, 0, 0, 2, &v));
    ca_set_grad_enabled(prev);
    TU_OK(ca_narrow(v, 0, 0, 1, &w)); /* a view of it inherits how it was made */
    cr_assert_eq(ca_tensor_view_base(v), y);
    cr_assert_eq(ca_tensor_view_base(w), y);
    cr_assert_null(ca_tensor_view_base(y));
    TU_FAILS(ca_mul_scalar_(v, 2.0), CA_STATUS_AUTOGRAD, "created in no_grad mode");
    TU_FAILS(ca_mul_scalar_(w, 2.0), CA_STATUS_AUTOGRAD, "created in no_grad mode");
    tu_assert_values(y, (const double[]){2, 4, 6}, 0);
    ca_tensor *all[] = {x, y, v, w};
    tu_release_n(all, 4);
}

Test(inplace_view, an_output_of_a_multi_view_function_refuses) {
    const double xv[6] = {1, 2, 3, 4, 5, 6};
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2, 3), xv, true), *y = NULL, *row = NULL,
              *part = NULL, *plain = NULL;
    TU_OK(ca_mul_scalar(x, 1.0, &y));
    TU_OK(ca_select(y, 0, 1, &row));
    TU_FAILS(ca_tensor_mark_multi_output_view(row, "Stack", 1), CA_STATUS_INVALID, "Unbind");
    TU_FAILS(ca_tensor_mark_multi_output_view(y, "Unbind", 1), CA_STATUS_INVALID, "not a view");
    TU_OK(ca_tensor_mark_multi_output_view(row, "Unbind", 1));
    TU_FAILS(ca_mul_scalar_(row, 2.0), CA_STATUS_AUTOGRAD, "Output 1 of Unbind is a view");
    TU_OK(ca_narrow(row, 0, 0, 2, &part)); /* a view of it: PyTorch names its own op */
    TU_FAILS(ca_mul_scalar_(part, 2.0), CA_STATUS_AUTOGRAD, "Output 0 of Slice is a view");
    bool prev = ca_set_grad_enabled(false); /* outside the graph it writes */
    TU_OK(ca_mul_scalar_(row, 2.0));
    ca_set_grad_enabled(prev);
    tu_assert_values(y, (const double[]){1, 2, 3, 8, 10, 12}, 0);
    TU_OK(ca_narrow(y, 0, 0, 1, &plain)); /* other views of y are not marked */
    TU_OK(ca_mul_scalar_(plain, 2.0));
    ca_tensor *all[] = {x, y, row, part, plain};
    tu_release_n(all, 5);
}
