/* test_node_saved.c - suite `node_saved`: a built-in node's saved values by PyTorch's names
 * (ca_node_saved) and calling a node on a gradient (ca_node_call), and the version error's
 * ", which is output 0 of Mul," clause.
 */
#include "testutil.h"

#include <string.h>

Test(node_saved, names_and_values_of_a_mul_node) {
    int64_t shape[] = {3};
    ca_tensor *x = tu_randn(CA_FLOAT64, 1, shape, true), *w = tu_randn(CA_FLOAT64, 1, shape, true);
    ca_tensor *y = NULL;
    TU_OK(ca_mul(x, w, &y));
    ca_node *n = ca_tensor_grad_fn(y);
    cr_assert_eq(ca_node_n_saved(n), 2);
    cr_assert_str_eq(ca_node_saved_name(n, 0), "self");
    cr_assert_str_eq(ca_node_saved_name(n, 1), "other");
    cr_assert_null(ca_node_saved_name(n, 2));
    ca_saved_value v;
    TU_OK(ca_node_saved(n, "other", &v));
    cr_assert_eq(v.kind, CA_SAVED_TENSOR);
    tu_assert_close(v.tensor, w, 0, 0);
    ca_tensor_release(v.tensor);
    TU_FAILS(ca_node_saved(n, "exponent", &v), CA_STATUS_INVALID, "_saved_exponent");
    ca_tensor *loss = NULL;
    TU_OK(ca_sum(y, 0, NULL, false, &loss));
    TU_OK(ca_backward(loss));
    TU_FAILS(ca_node_saved(n, "self", &v), CA_STATUS_AUTOGRAD,
             "Trying to backward through the graph a second time");
    ca_tensor *ts[] = {loss, y, w, x};
    tu_release_n(ts, 4);
}

Test(node_saved, scalars_and_dims) {
    int64_t shape[] = {2, 3};
    ca_tensor *x = tu_randn(CA_FLOAT32, 2, shape, true), *p = NULL, *s = NULL;
    TU_OK(ca_pow_scalar(x, 3.0, &p));
    ca_saved_value v;
    TU_OK(ca_node_saved(ca_tensor_grad_fn(p), "exponent", &v));
    cr_assert_eq(v.kind, CA_SAVED_DOUBLE);
    cr_assert_eq(v.d, 3.0);
    TU_OK(ca_softmax(x, 1, &s));
    TU_OK(ca_node_saved(ca_tensor_grad_fn(s), "dim", &v));
    cr_assert(v.kind == CA_SAVED_INT || v.kind == CA_SAVED_INTS);
    cr_assert_eq(v.kind == CA_SAVED_INT ? v.i : v.ints[0], 1);
    ca_tensor *ts[] = {s, p, x};
    tu_release_n(ts, 3);
}

Test(node_saved, calling_a_node_runs_its_rule) {
    double xv[] = {1, 2, 3}, wv[] = {4, 5, 6}, gv[] = {1, -1, 2};
    int64_t shape[] = {3};
    ca_tensor *x = tu_from(CA_FLOAT64, 1, shape, xv, true);
    ca_tensor *w = tu_from(CA_FLOAT64, 1, shape, wv, false);
    ca_tensor *g = tu_from(CA_FLOAT64, 1, shape, gv, false), *y = NULL, *gin[2];
    TU_OK(ca_mul(x, w, &y));
    ca_node *n = ca_tensor_grad_fn(y);
    TU_OK(ca_node_call(n, g, gin));
    tu_assert_values(gin[0], (double[]){4, -5, 12}, 0);
    cr_assert_null(gin[1], "w needs no gradient");
    ca_tensor_release(gin[0]);
    int64_t bad[] = {4};
    ca_tensor *g4 = tu_randn(CA_FLOAT64, 1, bad, false);
    TU_FAILS(ca_node_call(n, g4, gin), CA_STATUS_SHAPE, "the gradient given is");
    ca_node *acc = NULL;
    TU_OK(ca_tensor_grad_accumulator(x, &acc));
    TU_FAILS(ca_node_call(acc, g, gin), CA_STATUS_INVALID, "cannot be called");
    ca_node_release(acc);
    ca_tensor *ts[] = {g4, y, g, w, x};
    tu_release_n(ts, 5);
}

/* The error names the node of the in-place op that changed a saved input in the graph,
 * else the input's grad_fn when saved, else nothing for a leaf. */
Test(node_saved, version_errors_name_the_changed_tensors_node) {
    int64_t shape[] = {3};
    ca_tensor *w = tu_randn(CA_FLOAT32, 1, shape, true), *x = NULL, *y = NULL, *loss = NULL;
    TU_OK(ca_mul_scalar(w, 2.0, &x));
    TU_OK(ca_mul(x, w, &y));
    bool prev = ca_set_grad_enabled(false);
    TU_OK(ca_mul_scalar_(x, 3.0));
    ca_set_grad_enabled(prev);
    TU_OK(ca_sum(y, 0, NULL, false, &loss));
    TU_FAILS(ca_backward(loss), CA_STATUS_AUTOGRAD,
             "[torch.FloatTensor [3]], which is output 0 "
             "of Mul, is at version 1");
    ca_tensor *ts[] = {loss, y, x, w};
    tu_release_n(ts, 4);
}
