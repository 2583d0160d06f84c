/* test_custom_trace.c - suite `custom_trace`: custom backwards traced into the compiled graph
 * (ca_custom_function.trace_state).
 *
 * Covered: a cube function whose backward only calls ops (or multiplies by a tensor it
 * fills itself, a constant of the graph) is recorded once and traced (its
 * callback does not run on cache hits, ca_custom_tracing() is set while it is recorded,
 * gradients equal the eager ones); a backward that reads tensor data, changes a tensor in
 * place, uses a tensor it was not given, fails on zero gradients or refuses the recording
 * itself (ca_custom_refuse_tracing), and a trace_state that
 * answers 0, each become a call-out that runs on every backward with the right gradient; a
 * new state number recompiles and the old one hits again; a dynamic size makes a call-out;
 * a failing trace_state fails the backward with its message.
 */
#include "autograd/internal.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RELEASE(...)                                                                               \
    tu_release_n((ca_tensor *[]){__VA_ARGS__},                                                     \
                 (int)(sizeof((ca_tensor *[]){__VA_ARGS__}) / sizeof(ca_tensor *)))

typedef enum {
    OPS_ONLY,
    FILLED_CONSTANT,
    READS_DATA,
    IN_PLACE,
    UNSAVED_TENSOR,
    FAILS_ON_ZEROS,
    REFUSES, /* calls ca_custom_refuse_tracing (a side effect each backward must have) */
    STATE_ZERO,
    STATE_FAILS
} cube_mode;

/* y = x^3 with x saved; its backward 3 x^2 g, perhaps with a twist (mode). */
typedef struct {
    ca_tensor *x;     /* saved: held here */
    ca_tensor *other; /* a tensor the backward may use without saving it (all ones) */
    cube_mode mode;
    uint64_t state;
    int calls;    /* backward callbacks */
    int recorded; /* of which under ca_custom_tracing() */
} cube_ctx;

static int all_zero(const ca_tensor *g) {
    const float *p = ca_tensor_data(g);
    for (int64_t i = 0; i < ca_tensor_numel(g); i++)
        if (p[i] != 0)
            return 0;
    return 1;
}

static ca_status cube_backward(void *ctx, int n_out, ca_tensor *const *g, int n_in,
                               ca_tensor **gin) {
    cube_ctx *c = ctx;
    cr_assert_eq(n_out, 1);
    cr_assert_eq(n_in, 1);
    c->calls++;
    c->recorded += ca_custom_tracing() != 0;
    ca_tensor *x2, *t, *r;
    TU_OK(ca_mul(c->x, c->x, &x2));
    if (c->mode == READS_DATA) /* the gradients are zeros only while it is recorded */
        cr_assert_eq(all_zero(g[0]), ca_custom_tracing() != 0);
    if (c->mode == IN_PLACE)
        TU_OK(ca_mul_scalar_(x2, 1.0));
    if (c->mode == REFUSES)
        ca_custom_refuse_tracing("cube queues a callback");
    if (c->mode == UNSAVED_TENSOR) {
        ca_tensor *y;
        TU_OK(ca_mul(x2, c->other, &y));
        RELEASE(x2);
        x2 = y;
    }
    if (c->mode == FAILS_ON_ZEROS && ca_custom_tracing()) {
        RELEASE(x2);
        return ca_error_set(CA_STATUS_INVALID, "cube refuses zeros");
    }
    if (c->mode == FILLED_CONSTANT) { /* 3 as a tensor it makes: a constant of the graph */
        ca_tensor *three;
        TU_OK(ca_full(x2->dtype, x2->ndim, x2->shape, 3.0, &three));
        TU_OK(ca_mul(x2, three, &t));
        RELEASE(three);
    } else {
        TU_OK(ca_mul_scalar(x2, 3.0, &t));
    }
    TU_OK(ca_mul(t, g[0], &r));
    RELEASE(x2, t);
    gin[0] = r;
    return CA_OK;
}

static ca_status cube_trace_state(void *ctx, ca_custom_trace_info *info) {
    cube_ctx *c = ctx;
    if (c->mode == STATE_FAILS)
        return ca_error_set(CA_STATUS_INVALID, "cube's trace_state refuses");
    info->state = c->mode == STATE_ZERO ? 0 : c->state;
    if (!info->state)
        snprintf(info->why, sizeof info->why, "cube says no");
    info->saved[0] = c->x;
    info->n_saved = 1;
    return CA_OK;
}

static void cube_free(void *ctx) {
    cube_ctx *c = ctx;
    RELEASE(c->x, c->other);
    free(c);
}

/* loss = sum(cube(x)), with a fresh node each call (as each forward makes). */
static ca_tensor *cube_loss(ca_tensor *x, cube_mode mode, uint64_t state, cube_ctx **seen) {
    cube_ctx *c = calloc(1, sizeof *c);
    cr_assert_not_null(c);
    c->x = ca_tensor_retain(x);
    c->mode = mode;
    c->state = state;
    TU_OK(ca_ones(CA_FLOAT32, x->ndim, x->shape, &c->other));
    ca_tensor *x2, *y, *res;
    bool prev = ca_set_grad_enabled(false);
    TU_OK(ca_mul(x, x, &x2));
    TU_OK(ca_mul(x2, x, &y));
    ca_set_grad_enabled(prev);
    ca_custom_function fn = {.name = "CubeBackward",
                             .key = 7,
                             .backward = cube_backward,
                             .ctx = c,
                             .ctx_free = cube_free,
                             .trace_state = cube_trace_state};
    TU_OK(ca_custom_apply(&fn, 1, &x, 1, &y, NULL, &res));
    ca_tensor *loss;
    TU_OK(ca_sum(res, 0, NULL, false, &loss));
    RELEASE(x2, y, res);
    *seen = c;
    return loss;
}

static void assert_cube_grad(ca_tensor *x) {
    cr_assert_not_null(x->grad);
    for (int64_t i = 0; i < ca_tensor_numel(x); i++) {
        double v = tu_get(x, i), want = 3 * v * v;
        cr_assert_float_eq(tu_get(x->grad, i), want, 1e-5 * (1 + want), "grad[%lld] = %g, want %g",
                           (long long)i, tu_get(x->grad, i), want);
    }
}

/* Three compiled backwards over fresh nodes; returns the callbacks run over all three (a
 * capture's recording included). */
static int compiled_rounds(ca_tensor *x, cube_mode mode, uint64_t state) {
    int calls = 0;
    TU_OK(ca_compiled_autograd_enable(NULL));
    for (int i = 0; i < 3; i++) {
        cube_ctx *c;
        ca_tensor *loss = cube_loss(x, mode, state, &c);
        ca_tensor_set_grad(x, NULL);
        TU_OK(ca_backward(loss));
        calls += c->calls;
        assert_cube_grad(x);
        RELEASE(loss);
    }
    TU_OK(ca_compiled_autograd_disable());
    return calls;
}

Test(custom_trace, ops_only_backward_is_traced_once) {
    ca_compiled_autograd_reset();
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(6), true);
    cube_ctx *c;
    ca_tensor *loss = cube_loss(x, OPS_ONLY, 1, &c);
    TU_OK(ca_compiled_autograd_enable(NULL));
    TU_OK(ca_backward(loss));
    TU_OK(ca_compiled_autograd_disable());
    cr_assert_eq(c->calls, 1, "recorded once at capture");
    cr_assert_eq(c->recorded, 1, "with ca_custom_tracing() set");
    cr_assert_eq(ca_custom_tracing(), 0);
    assert_cube_grad(x);
    RELEASE(loss);
    cr_assert_eq(compiled_rounds(x, OPS_ONLY, 1), 0, "hits do not call the callback");
    ca_compiled_counters k;
    ca_compiled_autograd_counters(&k);
    cr_assert_eq(k.captures, 1);
    cr_assert_eq(k.cache_hits, 3);
    cr_assert_eq(k.custom_traced, 1);
    cr_assert_eq(k.custom_callouts, 0);
    cr_assert_eq(k.eager_fallbacks, 0);
    RELEASE(x);
}

static void assert_call_out(cube_mode mode, int want_calls) {
    ca_compiled_autograd_reset();
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(5), true);
    cr_assert_eq(compiled_rounds(x, mode, 1), want_calls, "mode %d", (int)mode);
    ca_compiled_counters k;
    ca_compiled_autograd_counters(&k);
    cr_assert_eq(k.captures, 1, "mode %d", (int)mode);
    cr_assert_eq(k.custom_traced, 0, "mode %d", (int)mode);
    cr_assert_eq(k.custom_callouts, 1, "mode %d", (int)mode);
    cr_assert_eq(k.eager_fallbacks, 0, "mode %d", (int)mode);
    RELEASE(x);
}

Test(custom_trace, tensors_it_fills_itself_are_constants) {
    ca_compiled_autograd_reset();
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3), true);
    cr_assert_eq(compiled_rounds(x, FILLED_CONSTANT, 1), 1, "recorded once, then hits");
    ca_compiled_counters k;
    ca_compiled_autograd_counters(&k);
    cr_assert_eq(k.custom_traced, 1);
    cr_assert_eq(k.custom_callouts, 0);
    RELEASE(x);
}

Test(custom_trace, refused_recordings_become_call_outs) {
    /* the recording runs the callback once more, then each backward calls it */
    assert_call_out(READS_DATA, 4);
    assert_call_out(IN_PLACE, 4);
    assert_call_out(UNSAVED_TENSOR, 4);
    assert_call_out(FAILS_ON_ZEROS, 4);
    assert_call_out(REFUSES, 4);
    assert_call_out(STATE_ZERO, 3); /* not recorded at all */
    ca_custom_refuse_tracing("outside a recording: no effect");
}

Test(custom_trace, state_number_is_part_of_the_key) {
    ca_compiled_autograd_reset();
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(4), true);
    cr_assert_eq(compiled_rounds(x, OPS_ONLY, 1), 1, "recorded at the capture");
    cr_assert_eq(compiled_rounds(x, OPS_ONLY, 2), 1, "a new state is recorded again");
    cr_assert_eq(compiled_rounds(x, OPS_ONLY, 1), 0, "and the old one hits");
    ca_compiled_counters k;
    ca_compiled_autograd_counters(&k);
    cr_assert_eq(k.captures, 2, "state 2 is a new graph; state 1 hits again");
    cr_assert_eq(k.cache_hits, 7);
    RELEASE(x);
}

Test(custom_trace, dynamic_sizes_make_a_call_out) {
    ca_compiled_autograd_reset();
    ca_tensor *a = tu_randn(CA_FLOAT32, TU_SHAPE(4), true);
    ca_tensor *b = tu_randn(CA_FLOAT32, TU_SHAPE(7), true);
    cr_assert_eq(compiled_rounds(a, OPS_ONLY, 1), 1);
    cr_assert_eq(compiled_rounds(b, OPS_ONLY, 1), 3, "a call-out, never recorded");
    ca_compiled_counters k;
    ca_compiled_autograd_counters(&k);
    cr_assert_eq(k.captures, 2);
    cr_assert_eq(k.custom_traced, 1);
    cr_assert_eq(k.custom_callouts, 1);
    RELEASE(a, b);
}

Test(custom_trace, failing_trace_state_fails_the_backward) {
    ca_compiled_autograd_reset();
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(3), true);
    cube_ctx *c;
    ca_tensor *loss = cube_loss(x, STATE_FAILS, 1, &c);
    TU_OK(ca_compiled_autograd_enable(NULL));
    cr_assert_eq(ca_backward(loss), CA_STATUS_INVALID);
    cr_assert(strstr(ca_last_error(), "cube's trace_state refuses"), "%s", ca_last_error());
    TU_OK(ca_compiled_autograd_disable());
    RELEASE(loss);
    cr_assert_eq(compiled_rounds(x, OPS_ONLY, 1), 1, "the next backward works");
    RELEASE(x);
}
