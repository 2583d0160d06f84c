/* test_errors.c - suite `errors`: one test per misuse of the public API.
 *
 * Each test checks the exact ca_status and a substring showing that the message says what
 * was wrong (both shapes for shape errors, the valid range for dims, the fix to apply),
 * and that result pointers are NULL after a failure. The library must never abort.
 */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

/* A poisoned pointer: a failing call must overwrite it with NULL. */
#define POISON ((ca_tensor *)(uintptr_t)0x1)

static void assert_msg(const char *needle) {
    cr_assert(strstr(ca_last_error(), needle) != NULL, "message \"%s\" lacks \"%s\"",
              ca_last_error(), needle);
}

static ca_tensor *rnd(ca_dtype dt, int ndim, const int64_t *shape, bool rg) {
    return tu_randn(dt, ndim, shape, rg);
}

/* ---------------------------------------------------------------------------------------
 * NULL arguments
 */
Test(errors, add_null_input) {
    ca_tensor *b = rnd(CA_FLOAT32, TU_SHAPE(2), false), *out = POISON;
    TU_FAILS(ca_add(NULL, b, &out), CA_STATUS_INVALID, "ca_add: argument 'a' is NULL");
    cr_assert_null(out);
    out = POISON;
    TU_FAILS(ca_add(b, NULL, &out), CA_STATUS_INVALID, "'b' is NULL");
    cr_assert_null(out);
    cr_assert_eq(ca_last_status(), CA_STATUS_INVALID);
    ca_tensor_release(b);
}

Test(errors, add_null_output) {
    ca_tensor *a = rnd(CA_FLOAT32, TU_SHAPE(2), false);
    TU_FAILS(ca_add(a, a, NULL), CA_STATUS_INVALID, "'out' is NULL");
    ca_tensor_release(a);
}

Test(errors, backward_null) {
    TU_FAILS(ca_backward(NULL), CA_STATUS_INVALID, "ca_backward");
    assert_msg("NULL");
    TU_FAILS(ca_backward_ex(NULL, NULL), CA_STATUS_INVALID, "NULL");
}

Test(errors, grad_null_arguments) {
    ca_tensor *x = rnd(CA_FLOAT64, TU_SHAPE(2), true), *y, *g = POISON;
    TU_OK(ca_sum(x, 0, NULL, false, &y));
    TU_FAILS(ca_grad(1, NULL, 1, &x, NULL, &g), CA_STATUS_INVALID, "'outputs' is NULL");
    TU_FAILS(ca_grad(1, &y, 1, NULL, NULL, &g), CA_STATUS_INVALID, "'inputs' is NULL");
    TU_FAILS(ca_grad(1, &y, 1, &x, NULL, NULL), CA_STATUS_INVALID, "'grads' is NULL");
    ca_tensor *none = NULL;
    TU_FAILS(ca_grad(1, &y, 1, &none, NULL, &g), CA_STATUS_INVALID, "input 0 is NULL");
    cr_assert_null(g);
    g = POISON;
    TU_FAILS(ca_grad(1, &none, 1, &x, NULL, &g), CA_STATUS_INVALID, "output 0 is NULL");
    cr_assert_null(g);
    ca_tensor_release(x);
    ca_tensor_release(y);
}

Test(errors, grad_needs_outputs_and_inputs) {
    ca_tensor *x = rnd(CA_FLOAT64, TU_SHAPE(2), true), *g = POISON;
    TU_FAILS(ca_grad(0, &x, 1, &x, NULL, &g), CA_STATUS_INVALID, "at least one");
    cr_assert_null(g, "results are set to NULL on error");
    ca_tensor_release(x);
}

static ca_status noop_hook(ca_tensor *grad, ca_tensor **replacement, void *ctx) {
    (void)grad;
    (void)replacement;
    (void)ctx;
    return CA_OK;
}

Test(errors, register_hook_null) {
    ca_tensor *x = rnd(CA_FLOAT64, TU_SHAPE(2), true);
    TU_FAILS(ca_tensor_register_hook(NULL, noop_hook, NULL, NULL, NULL), CA_STATUS_INVALID,
             "'t' is NULL");
    TU_FAILS(ca_tensor_register_hook(x, NULL, NULL, NULL, NULL), CA_STATUS_INVALID, "'fn' is NULL");
    ca_tensor_release(x);
}

Test(errors, from_data_null_data) {
    ca_tensor *out = POISON;
    TU_FAILS(ca_from_data(CA_FLOAT32, TU_SHAPE(2), NULL, &out), CA_STATUS_INVALID,
             "'data' is NULL");
    cr_assert_null(out, "results are set to NULL on error");
}

Test(errors, from_data_null_out) {
    float d[2] = {1, 2};
    TU_FAILS(ca_from_data(CA_FLOAT32, TU_SHAPE(2), d, NULL), CA_STATUS_INVALID, "'out' is NULL");
}

Test(errors, detach_null_input) {
    ca_tensor *out = POISON;
    TU_FAILS(ca_tensor_detach(NULL, &out), CA_STATUS_INVALID, "'t' is NULL");
    cr_assert_null(out, "results are set to NULL on error");
}

Test(errors, creation_null_shape) {
    ca_tensor *out = POISON;
    TU_FAILS(ca_zeros(CA_FLOAT32, 2, NULL, &out), CA_STATUS_INVALID, "shape is NULL");
    cr_assert_null(out);
}

Test(errors, getters_and_release_take_null) {
    /* getters answer neutrally, never crash */
    cr_assert_eq(ca_tensor_ndim(NULL), 0);
    cr_assert_eq(ca_tensor_numel(NULL), 0);
    cr_assert_null(ca_tensor_data(NULL));
    cr_assert_null(ca_tensor_grad(NULL));
    cr_assert(!ca_tensor_requires_grad(NULL));
    ca_tensor_release(NULL);
    double v;
    TU_FAILS(ca_tensor_item(NULL, &v), CA_STATUS_INVALID, "NULL");
    TU_FAILS(ca_tensor_set_requires_grad(NULL, true), CA_STATUS_INVALID, "NULL");
}

/* ---------------------------------------------------------------------------------------
 * Shapes, dtypes, dims
 */
Test(errors, broadcast_mismatch_names_both_shapes) {
    ca_tensor *a = rnd(CA_FLOAT32, TU_SHAPE(2, 3), false);
    ca_tensor *b = rnd(CA_FLOAT32, TU_SHAPE(4), false), *out = POISON;
    TU_FAILS(ca_add(a, b, &out), CA_STATUS_SHAPE, "[2, 3]");
    assert_msg("[4]");
    cr_assert_null(out);
    ca_tensor_release(a);
    ca_tensor_release(b);
}

Test(errors, dtype_mixing_says_ca_to_dtype) {
    ca_tensor *a = rnd(CA_FLOAT32, TU_SHAPE(2), false);
    ca_tensor *b = rnd(CA_FLOAT64, TU_SHAPE(2), false), *out;
    TU_FAILS(ca_mul(a, b, &out), CA_STATUS_DTYPE, "ca_to_dtype");
    assert_msg("float32");
    assert_msg("float64");
    ca_tensor_release(a);
    ca_tensor_release(b);
}

Test(errors, int64_where_float_needed) {
    ca_tensor *i = tu_index(TU_SHAPE(3), (int64_t[]){1, 2, 3}), *out = POISON;
    TU_FAILS(ca_exp(i, &out), CA_STATUS_DTYPE, "int64");
    cr_assert_null(out);
    TU_FAILS(ca_softmax(i, 0, &out), CA_STATUS_DTYPE, "int64");
    ca_tensor_release(i);
}

Test(errors, random_needs_float_dtype) {
    ca_tensor *out = POISON;
    TU_FAILS(ca_randn(CA_INT64, TU_SHAPE(2), &out), CA_STATUS_DTYPE, "float");
    cr_assert_null(out);
}

Test(errors, invalid_dtype_value) {
    ca_tensor *out = POISON;
    TU_FAILS(ca_zeros((ca_dtype)7, TU_SHAPE(2), &out), CA_STATUS_DTYPE, "invalid dtype 7");
    cr_assert_null(out);
}

Test(errors, sum_dim_out_of_range) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(2, 3), false), *out = POISON;
    TU_FAILS(ca_sum(x, 1, (int64_t[]){2}, false, &out), CA_STATUS_DIM, "dim 2 is out of range");
    assert_msg("[-2, 1]");
    cr_assert_null(out);
    ca_tensor_release(x);
}

Test(errors, softmax_dim_out_of_range) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(2, 3), false), *out;
    TU_FAILS(ca_softmax(x, -3, &out), CA_STATUS_DIM, "dim -3 is out of range");
    ca_tensor_release(x);
}

Test(errors, transpose_dim_out_of_range) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(2, 3), false), *out;
    TU_FAILS(ca_transpose(x, 0, 5, &out), CA_STATUS_DIM, "dim 5 is out of range");
    ca_tensor_release(x);
}

Test(errors, unsqueeze_dim_out_of_range) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(2, 3), false), *out;
    TU_FAILS(ca_unsqueeze(x, 4, &out), CA_STATUS_DIM, "[-3, 2]");
    ca_tensor_release(x);
}

Test(errors, cat_dim_out_of_range) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(2, 3), false), *out;
    ca_tensor *xs[2] = {x, x};
    TU_FAILS(ca_cat(2, xs, 2, &out), CA_STATUS_DIM, "dim 2 is out of range");
    ca_tensor_release(x);
}

Test(errors, cat_shape_mismatch) {
    ca_tensor *a = rnd(CA_FLOAT32, TU_SHAPE(2, 3), false);
    ca_tensor *b = rnd(CA_FLOAT32, TU_SHAPE(2, 4), false), *out;
    ca_tensor *xs[2] = {a, b};
    TU_FAILS(ca_cat(2, xs, 0, &out), CA_STATUS_SHAPE, "[2, 3]");
    assert_msg("[2, 4]");
    ca_tensor_release(a);
    ca_tensor_release(b);
}

Test(errors, negative_size) {
    ca_tensor *out = POISON;
    TU_FAILS(ca_zeros(CA_FLOAT32, TU_SHAPE(2, -1), &out), CA_STATUS_SHAPE, "negative");
    assert_msg("-1");
    cr_assert_null(out);
}

Test(errors, too_many_dims) {
    int64_t shape[CA_MAX_DIMS + 1];
    for (int i = 0; i <= CA_MAX_DIMS; i++)
        shape[i] = 1;
    ca_tensor *out = POISON;
    TU_FAILS(ca_zeros(CA_FLOAT32, CA_MAX_DIMS + 1, shape, &out), CA_STATUS_SHAPE, "ndim 9");
    assert_msg("0 to 8");
    cr_assert_null(out);
    TU_FAILS(ca_ones(CA_FLOAT32, -1, shape, &out), CA_STATUS_SHAPE, "ndim -1");
}

Test(errors, reshape_wrong_numel) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(2, 3), false), *out;
    TU_FAILS(ca_reshape(x, TU_SHAPE(4), &out), CA_STATUS_SHAPE, "[4]");
    assert_msg("[2, 3]");
    ca_tensor_release(x);
}

Test(errors, matmul_inner_mismatch) {
    ca_tensor *a = rnd(CA_FLOAT32, TU_SHAPE(2, 3), false);
    ca_tensor *b = rnd(CA_FLOAT32, TU_SHAPE(4, 5), false), *out = POISON;
    TU_FAILS(ca_matmul(a, b, &out), CA_STATUS_SHAPE, "[2, 3]");
    assert_msg("[4, 5]");
    cr_assert_null(out);
    ca_tensor_release(a);
    ca_tensor_release(b);
}

Test(errors, linear_weight_mismatch) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(4, 3), false);
    ca_tensor *w = rnd(CA_FLOAT32, TU_SHAPE(5, 2), false), *out;
    TU_FAILS(ca_linear(x, w, NULL, &out), CA_STATUS_SHAPE, "[4, 3]");
    assert_msg("[5, 2]");
    ca_tensor_release(x);
    ca_tensor_release(w);
}

Test(errors, layer_norm_wrong_normalized_shape) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(2, 4), false), *out = POISON;
    TU_FAILS(ca_layer_norm(x, 1, (int64_t[]){5}, NULL, NULL, 1e-5, &out), CA_STATUS_SHAPE, "[5]");
    assert_msg("[2, 4]");
    cr_assert_null(out);
    ca_tensor_release(x);
}

/* ---------------------------------------------------------------------------------------
 * Indices
 */
Test(errors, select_index_out_of_range) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(2, 3), false), *out;
    TU_FAILS(ca_select(x, 1, 5, &out), CA_STATUS_INDEX, "index 5 is out of range");
    assert_msg("size 3");
    ca_tensor_release(x);
}

Test(errors, index_select_value_out_of_range) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(4, 3), false), *out = POISON;
    ca_tensor *idx = tu_index(TU_SHAPE(3), (int64_t[]){0, 4, 1});
    TU_FAILS(ca_index_select(x, 0, idx, &out), CA_STATUS_INDEX, "index 4");
    assert_msg("out of range");
    cr_assert_null(out);
    ca_tensor_release(x);
    ca_tensor_release(idx);
}

Test(errors, index_tensor_must_be_int64) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(4, 3), false), *out;
    ca_tensor *idx = rnd(CA_FLOAT32, TU_SHAPE(2), false);
    TU_FAILS(ca_index_select(x, 0, idx, &out), CA_STATUS_DTYPE, "int64");
    ca_tensor_release(x);
    ca_tensor_release(idx);
}

Test(errors, embedding_index_out_of_range) {
    ca_tensor *w = rnd(CA_FLOAT32, TU_SHAPE(5, 2), true), *out;
    ca_tensor *idx = tu_index(TU_SHAPE(2), (int64_t[]){1, -1});
    TU_FAILS(ca_embedding(w, idx, &out), CA_STATUS_INDEX, "index -1");
    ca_tensor_release(w);
    ca_tensor_release(idx);
}

Test(errors, cross_entropy_target_out_of_range) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(2, 3), true), *out = POISON;
    ca_tensor *t = tu_index(TU_SHAPE(2), (int64_t[]){0, 3});
    TU_FAILS(ca_cross_entropy(x, t, CA_REDUCTION_MEAN, -100, &out), CA_STATUS_INDEX, "target 3");
    assert_msg("3 classes");
    cr_assert_null(out);
    ca_tensor_release(x);
    ca_tensor_release(t);
}

Test(errors, nll_target_must_be_int64) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(2, 3), false);
    ca_tensor *t = rnd(CA_FLOAT32, TU_SHAPE(2), false), *out;
    TU_FAILS(ca_nll_loss(x, t, CA_REDUCTION_MEAN, -100, &out), CA_STATUS_DTYPE, "int64");
    ca_tensor_release(x);
    ca_tensor_release(t);
}

/* ---------------------------------------------------------------------------------------
 * Values
 */
Test(errors, arange_zero_step) {
    ca_tensor *out = POISON;
    TU_FAILS(ca_arange(0, 5, 0, CA_FLOAT32, &out), CA_STATUS_INVALID, "step nonzero");
    cr_assert_null(out);
}

Test(errors, arange_step_away_from_end) {
    ca_tensor *out;
    TU_FAILS(ca_arange(0, 5, -1, CA_FLOAT32, &out), CA_STATUS_INVALID, "flip the sign");
}

Test(errors, dropout_p_out_of_range) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(4), false), *out = POISON;
    TU_FAILS(ca_dropout(x, 1.5, true, &out), CA_STATUS_INVALID, "p = 1.5");
    cr_assert_null(out);
    TU_FAILS(ca_dropout(x, -0.1, false, &out), CA_STATUS_INVALID, "between 0 and 1");
    ca_tensor_release(x);
}

/* An argument out of its range is CA_STATUS_VALUE (ValueError) for hardtanh, but alpha 0
 * of celu stays CA_STATUS_INVALID (PyTorch raises ZeroDivisionError there). */
Test(errors, activation_argument_statuses) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(4), false), *out = POISON;
    TU_FAILS(ca_hardtanh(x, 1.0, -1.0, &out), CA_STATUS_VALUE, "min_val cannot be greater");
    cr_assert_null(out);
    TU_FAILS(ca_celu(x, 0.0, &out), CA_STATUS_INVALID, "alpha cannot be 0");
    cr_assert_null(out);
    ca_tensor_release(x);
}

/* requires_grad true on a non-leaf is a no-op (it already requires grad); false fails. */
Test(errors, set_requires_grad_on_non_leaf) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(2), true), *y;
    TU_OK(ca_mul_scalar(x, 2.0, &y));
    TU_OK(ca_tensor_set_requires_grad(y, true));
    cr_assert(ca_tensor_requires_grad(y));
    TU_FAILS(ca_tensor_set_requires_grad(y, false), CA_STATUS_AUTOGRAD, "only leaf tensors");
    ca_tensor_release(y);
    ca_tensor_release(x);
}

Test(errors, item_of_many_elements) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(2, 3), false);
    double v;
    TU_FAILS(ca_tensor_item(x, &v), CA_STATUS_SHAPE, "[2, 3]");
    assert_msg("exactly one");
    ca_tensor_release(x);
}

Test(errors, copy_to_buffer_too_small) {
    ca_tensor *x = rnd(CA_FLOAT64, TU_SHAPE(2, 3), false);
    double buf[6];
    TU_FAILS(ca_tensor_copy_to(x, buf, sizeof buf - 1), CA_STATUS_INVALID, "47 bytes");
    assert_msg("needs 48");
    ca_tensor_release(x);
}

/* ---------------------------------------------------------------------------------------
 * Autograd misuse
 */
Test(errors, backward_twice) {
    ca_tensor *x = rnd(CA_FLOAT64, TU_SHAPE(3), true), *y, *L;
    TU_OK(ca_mul(x, x, &y));
    TU_OK(ca_sum(y, 0, NULL, false, &L));
    TU_OK(ca_backward(L));
    TU_FAILS(ca_backward(L), CA_STATUS_AUTOGRAD, "second time");
    assert_msg("retain_graph");
    ca_tensor_release(x);
    ca_tensor_release(y);
    ca_tensor_release(L);
}

Test(errors, backward_without_grad) {
    ca_tensor *x = rnd(CA_FLOAT64, TU_SHAPE(1), false);
    TU_FAILS(ca_backward(x), CA_STATUS_AUTOGRAD, "does not require grad");
    assert_msg("requires_grad");
    ca_tensor_release(x);
}

Test(errors, backward_nonscalar_implicit) {
    ca_tensor *x = rnd(CA_FLOAT64, TU_SHAPE(2, 2), true);
    TU_FAILS(ca_backward(x), CA_STATUS_AUTOGRAD,
             "implicitly created only for outputs with one "
             "element");
    assert_msg("[2, 2]");
    ca_tensor_release(x);
}

Test(errors, backward_explicit_gradient_wrong_shape) {
    ca_tensor *x = rnd(CA_FLOAT64, TU_SHAPE(3), true), *y;
    ca_tensor *g = rnd(CA_FLOAT64, TU_SHAPE(2), false);
    TU_OK(ca_mul_scalar(x, 2, &y));
    ca_backward_options o = {.gradient = g};
    TU_FAILS(ca_backward_ex(y, &o), CA_STATUS_SHAPE, "float64[2]");
    assert_msg("float64[3]");
    cr_assert_null(ca_tensor_grad(x));
    ca_tensor_release(x);
    ca_tensor_release(y);
    ca_tensor_release(g);
}

Test(errors, backward_explicit_gradient_wrong_dtype) {
    ca_tensor *x = rnd(CA_FLOAT64, TU_SHAPE(3), true), *y;
    ca_tensor *g = rnd(CA_FLOAT32, TU_SHAPE(3), false);
    TU_OK(ca_mul_scalar(x, 2, &y));
    ca_backward_options o = {.gradient = g};
    TU_FAILS(ca_backward_ex(y, &o), CA_STATUS_SHAPE, "float32[3]");
    ca_tensor_release(x);
    ca_tensor_release(y);
    ca_tensor_release(g);
}

Test(errors, grad_input_without_requires_grad) {
    ca_tensor *x = rnd(CA_FLOAT64, TU_SHAPE(3), true), *c = rnd(CA_FLOAT64, TU_SHAPE(3), false);
    ca_tensor *y, *L, *g[2] = {POISON, POISON};
    TU_OK(ca_mul(x, c, &y));
    TU_OK(ca_sum(y, 0, NULL, false, &L));
    ca_tensor *in[2] = {x, c};
    TU_FAILS(ca_grad(1, &L, 2, in, NULL, g), CA_STATUS_AUTOGRAD, "input 1 does not require grad");
    cr_assert(g[0] == NULL && g[1] == NULL);
    ca_tensor_release(x);
    ca_tensor_release(c);
    ca_tensor_release(y);
    ca_tensor_release(L);
}

Test(errors, remove_unknown_hook) {
    ca_tensor *x = rnd(CA_FLOAT64, TU_SHAPE(3), true);
    TU_FAILS(ca_tensor_remove_hook(x, 987654321), CA_STATUS_INVALID, "987654321");
    assert_msg("no hook");
    ca_tensor_release(x);
}

Test(errors, hook_on_tensor_without_grad) {
    ca_tensor *x = rnd(CA_FLOAT64, TU_SHAPE(3), false);
    TU_FAILS(ca_tensor_register_hook(x, noop_hook, NULL, NULL, NULL), CA_STATUS_AUTOGRAD,
             "does not require grad");
    ca_tensor_release(x);
}

static ca_status noop_post(ca_tensor *leaf, void *ctx) {
    (void)leaf;
    (void)ctx;
    return CA_OK;
}

Test(errors, post_accumulate_hook_on_nonleaf) {
    ca_tensor *x = rnd(CA_FLOAT64, TU_SHAPE(3), true), *y;
    TU_OK(ca_exp(x, &y));
    TU_FAILS(ca_tensor_register_post_accumulate_grad_hook(y, noop_post, NULL, NULL, NULL),
             CA_STATUS_AUTOGRAD, "is not a leaf");
    ca_tensor_release(x);
    ca_tensor_release(y);
}

Test(errors, inplace_on_leaf_requiring_grad) {
    ca_tensor *w = rnd(CA_FLOAT32, TU_SHAPE(3), true);
    TU_FAILS(ca_mul_scalar_(w, 0.5), CA_STATUS_AUTOGRAD, "leaf Variable that requires grad");
    assert_msg("ca_set_grad_enabled(false)");
    ca_tensor_release(w);
}

Test(errors, inplace_dtype_mismatch) {
    ca_tensor *a = rnd(CA_FLOAT32, TU_SHAPE(3), false), *b = rnd(CA_FLOAT64, TU_SHAPE(3), false);
    TU_FAILS(ca_copy_(a, b), CA_STATUS_DTYPE, "ca_to_dtype");
    ca_tensor_release(a);
    ca_tensor_release(b);
}

Test(errors, set_requires_grad_on_int64) {
    ca_tensor *i = tu_index(TU_SHAPE(2), (int64_t[]){0, 1});
    TU_FAILS(ca_tensor_set_requires_grad(i, true), CA_STATUS_DTYPE, "only float tensors");
    ca_tensor_release(i);
}

Test(errors, set_requires_grad_false_on_nonleaf) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(2), true), *y;
    TU_OK(ca_exp(x, &y));
    TU_FAILS(ca_tensor_set_requires_grad(y, false), CA_STATUS_AUTOGRAD, "ExpBackward0");
    assert_msg("ca_tensor_detach");
    ca_tensor_release(x);
    ca_tensor_release(y);
}

Test(errors, set_grad_shape_mismatch) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(2, 3), true), *g = rnd(CA_FLOAT32, TU_SHAPE(6), false);
    TU_FAILS(ca_tensor_set_grad(x, g), CA_STATUS_SHAPE, "float32[6]");
    assert_msg("float32[2, 3]");
    ca_tensor_release(x);
    ca_tensor_release(g);
}

Test(errors, retain_grad_without_requires_grad) {
    ca_tensor *x = rnd(CA_FLOAT32, TU_SHAPE(2), false);
    TU_FAILS(ca_tensor_retain_grad(x), CA_STATUS_AUTOGRAD, "does not require grad");
    ca_tensor_release(x);
}

/* ---------------------------------------------------------------------------------------
 * The error slot itself
 */
static ca_status counting_hook(ca_tensor *grad, ca_tensor **replacement, void *ctx) {
    (void)grad;
    (void)replacement;
    ++*(int *)ctx;
    return CA_OK;
}

/* "valid until the next failing call on that thread": successful calls, including a
 * backward that runs hooks, leave the last error alone */
Test(errors, last_error_survives_successful_calls) {
    ca_tensor *x = rnd(CA_FLOAT64, TU_SHAPE(2), true), *i = tu_index(TU_SHAPE(1), (int64_t[]){1});
    ca_tensor *y, *L, *bad = NULL;
    int calls = 0;
    TU_OK(ca_tensor_register_hook(x, counting_hook, &calls, NULL, NULL));
    TU_OK(ca_mul(x, x, &y));
    TU_OK(ca_sum(y, 0, NULL, false, &L));
    TU_FAILS(ca_exp(i, &bad), CA_STATUS_DTYPE, "int64");
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", ca_last_error());
    TU_OK(ca_backward(L));
    cr_assert_eq(calls, 1);
    cr_assert_str_eq(ca_last_error(), msg, "a successful backward changed the last error");
    cr_assert_eq(ca_last_status(), CA_STATUS_DTYPE);
    ca_tensor_release(x);
    ca_tensor_release(i);
    ca_tensor_release(y);
    ca_tensor_release(L);
}

Test(errors, error_slot_and_status_names) {
    ca_error_clear();
    cr_assert_str_eq(ca_last_error(), "");
    cr_assert_eq(ca_last_status(), CA_OK);
    cr_assert_eq(ca_error_set(CA_STATUS_HOOK, "custom %d", 7), CA_STATUS_HOOK);
    cr_assert_str_eq(ca_last_error(), "custom 7");
    cr_assert_eq(ca_last_status(), CA_STATUS_HOOK);
    cr_assert_str_eq(ca_status_name(CA_STATUS_NOMEM), "CA_STATUS_NOMEM");
    cr_assert_str_eq(ca_status_name(CA_STATUS_AUTOGRAD), "CA_STATUS_AUTOGRAD");
    ca_error_clear();
    cr_assert_eq(ca_last_status(), CA_OK);
}
