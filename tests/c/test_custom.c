/* test_custom.c - suite `custom`: custom functions (ca_custom_apply), eager and compiled.
 *
 * Covered: a scale function and a two-output function, their gradients against the
 * closed form, eager and compiled (one capture, then hits, no eager fallback); an output
 * nobody uses (its gradient is NULL in the callback); returned gradients that are
 * broadcast (summed down), of another dtype (converted) or of a wrong shape (an error
 * naming the function); a failing callback (the error propagates, the cache stays usable);
 * release and ctx_free; non-differentiable and int64 outputs; outputs that are inputs
 * (aliased) and dirty inputs (history rebased); grad mode off records nothing.
 */
#include "autograd/internal.h"
#include "testutil.h"

#include <string.h>

#define RELEASE(...)                                                                               \
    tu_release_n((ca_tensor *[]){__VA_ARGS__},                                                     \
                 (int)(sizeof((ca_tensor *[]){__VA_ARGS__}) / sizeof(ca_tensor *)))

/* What a test's function does in backward, and what it saw. */
typedef struct {
    double scale[2];    /* grad_input[0] = sum_k scale[k] * grad_output[k] */
    int calls;          /* backward calls */
    int released;       /* release calls */
    int freed;          /* ctx_free calls */
    int null_grads;     /* grad_outputs that were NULL, over all calls */
    int mode;           /* 0: the rule; 1: fail; 2: wrong shape; 3: broadcast; 4: float64 */
    bool grad_mode_off; /* grad mode was off in every call */
} fn_state;

static ca_status scale_backward(void *ctx, int n_out, ca_tensor *const *gout, int n_in,
                                ca_tensor **gin) {
    fn_state *s = ctx;
    s->calls++;
    s->grad_mode_off &= !ca_is_grad_enabled();
    cr_assert_eq(n_in, 1);
    if (s->mode == 1)
        return ca_error_set(CA_STATUS_INVALID, "scale_backward refuses");
    if (s->mode == 2)
        return ca_zeros(CA_FLOAT32, 1, (int64_t[]){7}, &gin[0]);
    ca_tensor *acc = NULL;
    for (int k = 0; k < n_out; k++) {
        if (!gout[k]) {
            s->null_grads++;
            continue;
        }
        ca_tensor *term;
        TU_OK(ca_mul_scalar(gout[k], s->scale[k], &term));
        if (!acc) {
            acc = term;
            continue;
        }
        ca_tensor *sum;
        TU_OK(ca_add(acc, term, &sum));
        RELEASE(acc, term);
        acc = sum;
    }
    if (acc && s->mode == 3) { /* a gradient of shape [2, n]: the input broadcasts to it */
        ca_tensor *twice;
        TU_OK(ca_expand(acc, acc->ndim + 1, (int64_t[]){2, acc->shape[0]}, &twice));
        ca_tensor *half;
        TU_OK(ca_mul_scalar(twice, 0.5, &half));
        RELEASE(acc, twice);
        acc = half;
    }
    if (acc && s->mode == 4) {
        ca_tensor *d;
        TU_OK(ca_to_dtype(acc, CA_FLOAT64, &d));
        RELEASE(acc);
        acc = d;
    }
    gin[0] = acc;
    return CA_OK;
}

static void state_release(void *ctx) {
    ((fn_state *)ctx)->released++;
}

static void state_free(void *ctx) {
    ((fn_state *)ctx)->freed++;
}

static ca_custom_function scale_fn(fn_state *s, double a, double b) {
    s->scale[0] = a;
    s->scale[1] = b;
    s->grad_mode_off = true;
    return (ca_custom_function){.name = "ScaleBackward",
                                .key = 42,
                                .backward = scale_backward,
                                .release = state_release,
                                .ctx = s,
                                .ctx_free = state_free};
}

/* outs[k] = scale[k] * x, computed with grad mode off, then recorded as one node. */
static void apply_scale(fn_state *s, ca_tensor *x, int n_out, ca_tensor **res) {
    ca_tensor *outs[2];
    bool prev = ca_set_grad_enabled(false);
    for (int k = 0; k < n_out; k++)
        TU_OK(ca_mul_scalar(x, s->scale[k], &outs[k]));
    ca_set_grad_enabled(prev);
    ca_custom_function fn = scale_fn(s, s->scale[0], s->scale[1]);
    TU_OK(ca_custom_apply(&fn, 1, &x, n_out, outs, NULL, res));
    tu_release_n(outs, n_out);
}

/* loss = sum(w0 * a) + sum(w1 * b): d/dx = scale0 * w0 + scale1 * w1. */
static ca_tensor *weighted_loss(ca_tensor *a, ca_tensor *b, double w0, double w1) {
    ca_tensor *ta, *sa, *loss;
    TU_OK(ca_mul_scalar(a, w0, &ta));
    TU_OK(ca_sum(ta, 0, NULL, false, &sa));
    if (!b) {
        RELEASE(ta);
        return sa;
    }
    ca_tensor *tb, *sb;
    TU_OK(ca_mul_scalar(b, w1, &tb));
    TU_OK(ca_sum(tb, 0, NULL, false, &sb));
    TU_OK(ca_add(sa, sb, &loss));
    RELEASE(ta, sa, tb, sb);
    return loss;
}

static void assert_grad_all(ca_tensor *x, double want) {
    cr_assert_not_null(x->grad);
    for (int64_t i = 0; i < x->shape[0]; i++)
        cr_assert_float_eq(tu_get(x->grad, i), want, 1e-6, "grad[%lld] = %g, want %g", (long long)i,
                           tu_get(x->grad, i), want);
}

static void two_outputs_round(bool compiled, double want) {
    fn_state s = {.mode = 0};
    s.scale[0] = 2.0;
    s.scale[1] = 3.0;
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(5), true), *res[2];
    apply_scale(&s, x, 2, res);
    cr_assert_str_eq(ca_tensor_grad_fn_name(res[0]), "ScaleBackward");
    cr_assert_eq(res[0]->grad_fn, res[1]->grad_fn, "both outputs belong to one node");
    cr_assert_eq(ca_tensor_output_nr(res[1]), 1);
    ca_tensor *loss = weighted_loss(res[0], res[1], 1.0, 10.0);
    if (compiled)
        TU_OK(ca_compiled_autograd_enable(NULL));
    TU_OK(ca_backward(loss));
    if (compiled)
        TU_OK(ca_compiled_autograd_disable());
    assert_grad_all(x, want);
    cr_assert_eq(s.calls, 1);
    cr_assert_eq(s.released, 1, "a backward without retain_graph releases the saved state");
    cr_assert(s.grad_mode_off);
    cr_assert_eq(s.freed, 0, "the outputs hold the node");
    RELEASE(loss, res[0], res[1]);
    cr_assert_eq(s.freed, 1, "ctx_free runs once the node is freed");
    RELEASE(x);
}

Test(custom, two_outputs_eager_and_compiled) {
    two_outputs_round(false, 2.0 * 1.0 + 3.0 * 10.0);
    ca_compiled_autograd_reset();
    for (int i = 0; i < 3; i++)
        two_outputs_round(true, 32.0);
    ca_compiled_counters c;
    ca_compiled_autograd_counters(&c);
    cr_assert_eq(c.captures, 1);
    cr_assert_eq(c.cache_hits, 2);
    cr_assert_eq(c.eager_fallbacks, 0);
    ca_compiled_autograd_reset();
}

static void unused_output_round(bool compiled) {
    fn_state s = {0};
    s.scale[0] = 2.0;
    s.scale[1] = 3.0;
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(4), true), *res[2];
    apply_scale(&s, x, 2, res);
    ca_tensor *loss = weighted_loss(res[1], NULL, 1.0, 0);
    if (compiled)
        TU_OK(ca_compiled_autograd_enable(NULL));
    TU_OK(ca_backward(loss));
    if (compiled)
        TU_OK(ca_compiled_autograd_disable());
    assert_grad_all(x, 3.0);
    cr_assert_eq(s.null_grads, 1, "output 0 got no gradient: the callback sees NULL");
    RELEASE(loss, res[0], res[1], x);
}

Test(custom, unused_output_gets_null) {
    unused_output_round(false);
    unused_output_round(true);
    ca_compiled_autograd_reset();
}

static ca_status run_mode(int mode, bool compiled, double *g0) {
    fn_state s = {.mode = mode};
    s.scale[0] = 2.0;
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(3), true), *res[1];
    apply_scale(&s, x, 1, res);
    s.mode = mode;
    ca_tensor *loss = weighted_loss(res[0], NULL, 1.0, 0);
    if (compiled)
        TU_OK(ca_compiled_autograd_enable(NULL));
    ca_status st = ca_backward(loss);
    if (compiled)
        TU_OK(ca_compiled_autograd_disable());
    if (st == CA_OK) {
        cr_assert_eq(x->grad->dtype, CA_FLOAT32, "the gradient takes the input's dtype");
        *g0 = tu_get(x->grad, 0);
    }
    RELEASE(loss, res[0], x);
    return st;
}

Test(custom, returned_gradients_are_fitted_or_refused) {
    for (int compiled = 0; compiled < 2; compiled++) {
        double g = 0;
        TU_OK(run_mode(3, compiled, &g)); /* [2, 3] summed down to [3] */
        cr_assert_float_eq(g, 2.0, 1e-6);
        TU_OK(run_mode(4, compiled, &g)); /* float64 converted to float32 */
        cr_assert_float_eq(g, 2.0, 1e-6);
        TU_FAILS(run_mode(2, compiled, &g), CA_STATUS_SHAPE,
                 "Function ScaleBackward returned an invalid gradient at index 0 - got [7] but "
                 "expected shape compatible with [3]");
        TU_FAILS(run_mode(1, compiled, &g), CA_STATUS_INVALID, "scale_backward refuses");
        TU_OK(run_mode(0, compiled, &g)); /* and the next backward works */
        cr_assert_float_eq(g, 2.0, 1e-6);
    }
    ca_compiled_autograd_reset();
}

Test(custom, backward_twice_needs_retain_graph) {
    fn_state s = {0};
    s.scale[0] = 2.0;
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(3), true), *res[1];
    apply_scale(&s, x, 1, res);
    ca_tensor *loss = weighted_loss(res[0], NULL, 1.0, 0);
    TU_OK(ca_backward_ex(loss, &(ca_backward_options){.retain_graph = true}));
    cr_assert_eq(s.released, 0, "retain_graph keeps the saved state");
    TU_OK(ca_backward(loss));
    cr_assert_eq(s.released, 1);
    assert_grad_all(x, 4.0);
    RELEASE(loss, res[0], x);
    cr_assert_eq(s.freed, 1);
}

Test(custom, outputs_nondiff_alias_and_no_grad_mode) {
    fn_state s = {0};
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(3), true);
    ca_tensor *idx = tu_index(TU_SHAPE(2), (int64_t[]){0, 1}), *y, *res[3];
    bool prev = ca_set_grad_enabled(false);
    TU_OK(ca_mul_scalar(x, 2.0, &y));
    ca_set_grad_enabled(prev);
    ca_custom_function fn = scale_fn(&s, 2.0, 0);
    TU_OK(ca_custom_apply(&fn, 1, &x, 3, (ca_tensor *[]){y, idx, x},
                          (unsigned[]){CA_CUSTOM_NONDIFF, 0, 0}, res));
    cr_assert_eq(res[0], y);
    cr_assert(!ca_tensor_requires_grad(res[0]), "a non-differentiable output needs no grad");
    cr_assert(!ca_tensor_requires_grad(res[1]), "int64 outputs are never differentiable");
    cr_assert_neq(res[2], x, "an input returned as is comes back as an alias");
    cr_assert_eq(res[2]->storage, x->storage);
    cr_assert_str_eq(ca_tensor_grad_fn_name(res[2]), "ScaleBackward");
    cr_assert(ca_tensor_is_leaf(x), "the input itself keeps its history");
    RELEASE(res[0], res[1], res[2]);
    cr_assert_eq(s.freed, 1);

    fn_state off = {0};
    ca_custom_function fn2 = scale_fn(&off, 2.0, 0);
    prev = ca_set_grad_enabled(false);
    TU_OK(ca_custom_apply(&fn2, 1, &x, 1, &y, NULL, res));
    ca_set_grad_enabled(prev);
    cr_assert_eq(res[0], y);
    cr_assert_null(res[0]->grad_fn, "grad mode off records no node");
    cr_assert_eq(off.freed, 1, "and ctx_free runs at once");
    RELEASE(res[0], y, idx, x);
}

Test(custom, dirty_inputs) {
    fn_state s = {0};
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(3), true), *h, *res[1];
    TU_OK(ca_mul_scalar(x, 1.0, &h)); /* a non-leaf the function changes in place */
    ca_custom_function fn = scale_fn(&s, 2.0, 0);
    bool prev = ca_set_grad_enabled(false);
    TU_OK(ca_mul_scalar_(h, 2.0));
    ca_set_grad_enabled(prev);
    uint64_t v = ca_tensor_version(h);
    TU_OK(ca_custom_apply(&fn, 1, &h, 1, &h, (unsigned[]){CA_CUSTOM_DIRTY}, res));
    cr_assert_eq(res[0], h, "a dirty input is the output itself");
    cr_assert_eq(ca_tensor_version(h), v + 1, "apply moves a dirty input's version on, as torch");
    cr_assert_str_eq(ca_tensor_grad_fn_name(h), "ScaleBackward", "its history is rebased");
    ca_tensor *loss = weighted_loss(h, NULL, 1.0, 0);
    TU_OK(ca_backward(loss));
    assert_grad_all(x, 2.0);
    RELEASE(loss, res[0], h);

    fn_state leaf = {0};
    ca_custom_function fn2 = scale_fn(&leaf, 2.0, 0);
    TU_FAILS(ca_custom_apply(&fn2, 1, &x, 1, &x, (unsigned[]){CA_CUSTOM_DIRTY}, res),
             CA_STATUS_AUTOGRAD, "a leaf Variable that requires grad has been used in an in-place");
    cr_assert_eq(leaf.freed, 1, "a refused apply frees ctx");
    ca_tensor *other = tu_randn(CA_FLOAT32, TU_SHAPE(3), false);
    fn_state notin = {0};
    ca_custom_function fn3 = scale_fn(&notin, 2.0, 0);
    TU_FAILS(ca_custom_apply(&fn3, 1, &x, 1, &other, (unsigned[]){CA_CUSTOM_DIRTY}, res),
             CA_STATUS_INVALID, "marked dirty but is not one of the inputs");
    RELEASE(other, x);
}

Test(custom, bad_arguments) {
    fn_state s = {0};
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(3), true), *res[1];
    ca_custom_function fn = scale_fn(&s, 2.0, 0);
    fn.backward = NULL;
    TU_FAILS(ca_custom_apply(&fn, 1, &x, 1, &x, NULL, res), CA_STATUS_INVALID,
             "needs a name and a backward callback");
    fn = scale_fn(&s, 2.0, 0);
    TU_FAILS(ca_custom_apply(&fn, 1, &x, 0, &x, NULL, res), CA_STATUS_INVALID,
             "at least one output");
    cr_assert_eq(s.freed, 2, "every refusal frees ctx");
    RELEASE(x);
}

/* A custom backward that runs a backward of its own (as checkpointing does) through a leaf
 * whose AccumulateGrad node the outer backward still holds a gradient for. */
typedef struct {
    ca_tensor *w;
} nested_state;

static ca_status nested_backward(void *ctx, int n_out, ca_tensor *const *gout, int n_in,
                                 ca_tensor **gin) {
    nested_state *s = ctx;
    ca_tensor *t, *inner;
    bool prev = ca_set_grad_enabled(true);
    TU_OK(ca_mul_scalar(s->w, 5.0, &t));
    TU_OK(ca_sum(t, 0, NULL, false, &inner));
    ca_set_grad_enabled(prev);
    ca_tensor *g = NULL; /* d(inner)/dw = 5, whatever the outer backward holds for w */
    ca_status st = ca_grad(1, &inner, 1, &s->w, NULL, &g);
    RELEASE(t, inner);
    if (st != CA_OK)
        return st;
    for (int64_t i = 0; i < 2; i++)
        cr_assert_float_eq(tu_get(g, i), 5.0, 1e-12, "the nested grad is %g", tu_get(g, i));
    RELEASE(g);
    return ca_mul_scalar(gout[0], 2.0, &gin[0]);
}

Test(custom, nested_backward_keeps_the_outer_pending_gradients) {
    for (int compiled = 0; compiled < 2; compiled++) {
        ca_tensor *w = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){1, 2}, true), *a, *y, *c;
        nested_state s = {w};
        TU_OK(ca_mul_scalar(w, 2.0, &a));
        bool prev = ca_set_grad_enabled(false);
        TU_OK(ca_mul_scalar(a, 2.0, &y));
        ca_set_grad_enabled(prev);
        ca_custom_function fn = {
            .name = "NestedBackward", .key = 9, .backward = nested_backward, .ctx = &s};
        TU_OK(ca_custom_apply(&fn, 1, &a, 1, &y, NULL, &c));
        /* made after the custom node, so its branch runs first and leaves w's
         * AccumulateGrad waiting with a gradient while the custom backward runs */
        ca_tensor *b, *sb, *sc, *loss;
        TU_OK(ca_mul_scalar(w, 3.0, &b));
        TU_OK(ca_sum(b, 0, NULL, false, &sb));
        TU_OK(ca_sum(c, 0, NULL, false, &sc));
        TU_OK(ca_add(sc, sb, &loss));
        if (compiled)
            TU_OK(ca_compiled_autograd_enable(NULL));
        TU_OK(ca_backward(loss));
        if (compiled)
            TU_OK(ca_compiled_autograd_disable());
        /* 3 (b) + 2 * 2 (through the custom node); the nested ca_grad writes no .grad */
        for (int64_t i = 0; i < 2; i++)
            cr_assert_float_eq(tu_get(w->grad, i), 7.0, 1e-12, "compiled=%d: grad %g", compiled,
                               tu_get(w->grad, i));
        RELEASE(loss, sc, sb, b, c, y, a, w);
    }
    ca_compiled_autograd_reset();
}

/* ca_tensor_sole_custom_fn: the node's function only while one reference holds the output
 * and the output alone holds the node (what a binding's cycle collector may traverse). */
Test(custom, sole_custom_fn_only_while_the_output_alone_holds_the_node) {
    fn_state s = {.mode = 0};
    s.scale[0] = 2.0;
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(3), true), *res[2];
    apply_scale(&s, x, 1, res);
    const ca_custom_function *fn = ca_tensor_sole_custom_fn(res[0]);
    cr_assert_not_null(fn);
    cr_assert_eq(fn->ctx, &s);
    ca_tensor *extra = ca_tensor_retain(res[0]); /* a second holder of the output */
    cr_assert_null(ca_tensor_sole_custom_fn(res[0]));
    RELEASE(extra);
    ca_tensor *view; /* a second holder of the node: a view shares its history */
    TU_OK(ca_view(res[0], 1, (int64_t[]){3}, &view));
    cr_assert_null(ca_tensor_sole_custom_fn(res[0]));
    RELEASE(view);
    cr_assert_eq(ca_tensor_sole_custom_fn(res[0]), fn);
    RELEASE(res[0]);
    apply_scale(&s, x, 2, res); /* two outputs share one node */
    cr_assert_null(ca_tensor_sole_custom_fn(res[0]));
    cr_assert_null(ca_tensor_sole_custom_fn(x), "a leaf has no node");
    cr_assert_null(ca_tensor_sole_custom_fn(NULL));
    RELEASE(res[0], res[1], x);
}
