/* test_inplace_graph.c - suite `inplace_graph`: in-place ops on tensors in the autograd
 * graph (inplace.c). The op runs out of place and the tensor takes its values and history,
 * as PyTorch rebases: gradients flow through the in-place op to the tensor's old history,
 * a node that needs self's old values gets a clone, a node that saved self before the
 * update reports the change at backward (views: test_inplace_view.c). Expected values are
 * worked out by hand from the chain rule. */
#include "testutil.h"

#include <math.h>
#include <string.h>

static ca_tensor *sum_all(ca_tensor *t) {
    ca_tensor *s = NULL;
    TU_OK(ca_sum(t, 0, NULL, false, &s));
    return s;
}

static ca_tensor *vec(const double *v, bool rg) {
    return tu_from(CA_FLOAT64, TU_SHAPE(3), v, rg);
}

Test(inplace_graph, add_then_mul_scalar_flow_to_both_histories) {
    const double xv[3] = {1, 2, 3}, wv[3] = {-1, 0.5, 4};
    ca_tensor *x = vec(xv, true), *w = vec(wv, true), *y = NULL;
    TU_OK(ca_mul_scalar(x, 2.0, &y)); /* y = 2x */
    TU_OK(ca_add_(y, w, 3.0));        /* y = 2x + 3w */
    TU_OK(ca_mul_scalar_(y, 0.5));    /* y = x + 1.5w */
    cr_assert_eq(ca_tensor_version(y), 2);
    const double want[3] = {1 - 1.5, 2 + 0.75, 3 + 6};
    tu_assert_values(y, want, 1e-12);
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "MulBackward1"); /* the scalar product */
    ca_tensor *s = sum_all(y);
    TU_OK(ca_backward(s));
    tu_assert_values(ca_tensor_grad(x), (const double[]){1, 1, 1}, 1e-12);
    tu_assert_values(ca_tensor_grad(w), (const double[]){1.5, 1.5, 1.5}, 1e-12);
    ca_tensor *all[] = {x, w, y, s};
    tu_release_n(all, 4);
}

Test(inplace_graph, plain_tensor_joins_the_graph) {
    const double av[3] = {1, 1, 1}, wv[3] = {2, 3, 4};
    ca_tensor *a = vec(av, false), *w = vec(wv, true);
    TU_OK(ca_add_(a, w, 1.0)); /* a buffer accumulating a parameter, as `buf += w` */
    cr_assert(ca_tensor_requires_grad(a));
    ca_tensor *s = sum_all(a);
    TU_OK(ca_backward(s));
    tu_assert_values(ca_tensor_grad(w), (const double[]){1, 1, 1}, 1e-12);
    ca_tensor *all[] = {a, w, s};
    tu_release_n(all, 3);
}

Test(inplace_graph, mul_by_a_tensor_in_the_graph_keeps_selfs_old_values) {
    /* y.mul_(w): mul's node needs y's old values for w's gradient, so it runs on a clone */
    const double xv[3] = {1, 2, 3}, wv[3] = {5, 6, 7};
    ca_tensor *x = vec(xv, true), *w = vec(wv, true), *y = NULL;
    TU_OK(ca_mul_scalar(x, 2.0, &y));
    TU_OK(ca_mul_(y, w));
    tu_assert_values(y, (const double[]){10, 24, 42}, 1e-12);
    ca_tensor *s = sum_all(y);
    TU_OK(ca_backward(s));
    tu_assert_values(ca_tensor_grad(w), (const double[]){2, 4, 6}, 1e-12);    /* old y */
    tu_assert_values(ca_tensor_grad(x), (const double[]){10, 12, 14}, 1e-12); /* 2w */
    ca_tensor *all[] = {x, w, y, s};
    tu_release_n(all, 4);
}

Test(inplace_graph, copy_takes_the_sources_history) {
    const double xv[3] = {1, 2, 3}, wv[3] = {4, 5, 6};
    ca_tensor *x = vec(xv, true), *w = vec(wv, true), *y = NULL, *p = NULL;
    TU_OK(ca_mul_scalar(x, 2.0, &y));
    TU_OK(ca_mul_scalar(w, 3.0, &p));
    TU_OK(ca_copy_(y, p));
    tu_assert_values(y, (const double[]){12, 15, 18}, 1e-12);
    ca_tensor *s = sum_all(y);
    TU_OK(ca_backward(s));
    tu_assert_values(ca_tensor_grad(w), (const double[]){3, 3, 3}, 1e-12);
    cr_assert_null(ca_tensor_grad(x), "x's old history no longer reaches the loss");
    ca_tensor *all[] = {x, w, y, p, s};
    tu_release_n(all, 5);
}

Test(inplace_graph, a_saved_tensor_changed_in_place_fails_at_backward) {
    /* exp saves its output; changing it in place breaks exp's backward, as in PyTorch */
    const double xv[3] = {0, 1, 2};
    ca_tensor *x = vec(xv, true), *y = NULL, *z = NULL;
    TU_OK(ca_exp(x, &y));
    TU_OK(ca_mul_scalar(y, 1.0, &z));
    TU_OK(ca_mul_scalar_(y, 2.0));
    ca_tensor *s = sum_all(y);
    TU_FAILS(ca_backward(s), CA_STATUS_AUTOGRAD, "modified by an inplace operation");
    ca_tensor *all[] = {x, y, z, s};
    tu_release_n(all, 4);
}

Test(inplace_graph, retained_grad_follows_the_tensor) {
    const double xv[3] = {1, 2, 3};
    ca_tensor *x = vec(xv, true), *y = NULL;
    TU_OK(ca_mul_scalar(x, 2.0, &y));
    TU_OK(ca_tensor_retain_grad(y));
    TU_OK(ca_mul_scalar_(y, 3.0));
    ca_tensor *z = NULL;
    TU_OK(ca_mul_scalar(y, 5.0, &z));
    ca_tensor *s = sum_all(z);
    TU_OK(ca_backward(s));
    /* the gradient of y's current value (after the update), as PyTorch's retain_grad */
    tu_assert_values(ca_tensor_grad(y), (const double[]){5, 5, 5}, 1e-12);
    tu_assert_values(ca_tensor_grad(x), (const double[]){30, 30, 30}, 1e-12);
    ca_tensor *all[] = {x, y, z, s};
    tu_release_n(all, 4);
}

Test(inplace_graph, compiled_equals_eager) {
    const double xv[3] = {0.5, -1, 2}, wv[3] = {3, 1, -2};
    double eager[3];
    for (int compiled = 0; compiled < 2; compiled++) {
        if (compiled)
            TU_OK(ca_compiled_autograd_enable(NULL));
        ca_tensor *x = vec(xv, true), *w = vec(wv, true), *y = NULL, *t = NULL;
        TU_OK(ca_mul_scalar(x, 3.0, &y)); /* saves nothing: y may change in place */
        TU_OK(ca_add_(y, w, -2.0));
        TU_OK(ca_mul_(y, w));
        TU_OK(ca_tanh(y, &t));
        ca_tensor *s = sum_all(t);
        TU_OK(ca_backward(s));
        for (int i = 0; i < 3; i++) {
            if (compiled)
                cr_assert_float_eq(tu_get(ca_tensor_grad(x), i), eager[i], 1e-12);
            else
                eager[i] = tu_get(ca_tensor_grad(x), i);
        }
        ca_tensor *all[] = {x, w, y, t, s};
        tu_release_n(all, 5);
    }
    TU_OK(ca_compiled_autograd_disable());
}

/* y <- sin(y) + 1 by two ops (a composite in-place op): sin saved y, so rebasing y onto
 * the result would change what sin's backward reads. ca_tensor_rebase_ looks at the last
 * node only and takes it; ca_tensor_rebase_since_ with a mark taken before the ops sees
 * sin's saved y and refuses (*done false), and the op then runs again on a copy. */
Test(inplace_graph, composite_result_whose_inner_op_saved_self_is_refused) {
    const double xv[3] = {0.5, -1, 2};
    ca_tensor *x = vec(xv, true), *y = NULL, *e = NULL, *r = NULL, *c = NULL;
    TU_OK(ca_mul_scalar(x, 2.0, &y));
    uint64_t mark = ca_graph_mark();
    TU_OK(ca_sin(y, &e));
    TU_OK(ca_add_scalar(e, 1.0, &r));
    bool done = true;
    TU_OK(ca_tensor_rebase_since_(y, r, mark, &done));
    cr_assert_not(done, "sin saved y: refused");
    cr_assert_eq(ca_tensor_version(y), 0, "nothing changed");
    ca_tensor_release(e);
    ca_tensor_release(r);
    TU_OK(ca_mul_scalar(y, 1.0, &c)); /* again from a differentiable copy */
    mark = ca_graph_mark();
    TU_OK(ca_sin(c, &e));
    TU_OK(ca_add_scalar(e, 1.0, &r));
    TU_OK(ca_tensor_rebase_since_(y, r, mark, &done));
    cr_assert(done);
    ca_tensor *s = sum_all(y);
    TU_OK(ca_backward(s));
    double want[3]; /* d/dx (sin(2x) + 1) = 2 cos(2x) */
    for (int i = 0; i < 3; i++)
        want[i] = 2 * cos(2 * xv[i]);
    tu_assert_values(ca_tensor_grad(x), want, 1e-9);
    ca_tensor *all[] = {x, y, e, r, c, s};
    tu_release_n(all, 6);
}
