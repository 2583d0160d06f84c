/* test_autograd.c - suite `autograd`: the eager engine's PyTorch semantics.
 *
 * Covered: dependency-counted execution order, .grad accumulation, retain_graph and the
 * "backward a second time" error, explicit seeds, ca_grad (several inputs, non-leaf
 * inputs, grad_outputs, allow_unused, pruning), no-grad mode, tensor hooks (order,
 * replacement, failures, removal, ctx_free), retain_grad, post-accumulate-grad hooks,
 * detection of saved tensors changed in place, grad_fn names, long chains and dtypes.
 * Leak checks use a counting allocator: live blocks must return to zero.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Helpers
 */
/* For a test that installed the counting allocator (tu_alloc_install) before making any
 * tensor: restore the default allocator and assert nothing is live. */
static void assert_no_leak(void) {
    long live = tu_alloc_live();
    tu_alloc_uninstall();
    cr_assert_eq(live, 0, "%ld allocations still live after releasing everything", live);
}

#define RELEASE(...)                                                                               \
    tu_release_n((ca_tensor *[]){__VA_ARGS__},                                                     \
                 (int)(sizeof((ca_tensor *[]){__VA_ARGS__}) / sizeof(ca_tensor *)))

static ca_tensor *sum_all(ca_tensor *t) {
    ca_tensor *s;
    TU_OK(ca_sum(t, 0, NULL, false, &s));
    return s;
}

static ca_tensor *mul(ca_tensor *a, ca_tensor *b) {
    ca_tensor *o;
    TU_OK(ca_mul(a, b, &o));
    return o;
}

static ca_tensor *add(ca_tensor *a, ca_tensor *b) {
    ca_tensor *o;
    TU_OK(ca_add(a, b, &o));
    return o;
}

static ca_tensor *mul_s(ca_tensor *a, double s) {
    ca_tensor *o;
    TU_OK(ca_mul_scalar(a, s, &o));
    return o;
}

static ca_tensor *vec(ca_dtype dt, int n, const double *v, bool rg) {
    int64_t shape[1] = {n};
    return tu_from(dt, 1, shape, v, rg);
}

static void assert_grad(const ca_tensor *t, const double *want, double atol) {
    const ca_tensor *g = ca_tensor_grad(t);
    cr_assert_not_null(g, "expected a .grad");
    tu_assert_values(g, want, atol);
}

/* A hook that records what it saw, in a global call log too (for ordering). */
typedef struct {
    int id;
    int calls;
    double seen[8];
    int n_seen;
    double scale;    /* != 0: replace the gradient by scale * grad */
    int freed;       /* ctx_free calls */
    ca_tensor *kept; /* a reference to the first gradient seen, when keep is set */
    bool keep;
} hook_rec;

static int call_log[16];
static int n_log;

static ca_status record_hook(ca_tensor *grad, ca_tensor **replacement, void *ctx) {
    hook_rec *r = ctx;
    r->calls++;
    if (n_log < 16)
        call_log[n_log++] = r->id;
    r->n_seen = (int)(ca_tensor_numel(grad) < 8 ? ca_tensor_numel(grad) : 8);
    for (int i = 0; i < r->n_seen; i++)
        r->seen[i] = tu_get(grad, i);
    if (r->keep && !r->kept)
        r->kept = ca_tensor_retain(grad);
    if (r->scale != 0)
        return ca_mul_scalar(grad, r->scale, replacement);
    return CA_OK;
}

static void rec_free(void *ctx) {
    ((hook_rec *)ctx)->freed++;
}

static void assert_seen(const hook_rec *r, const double *want, int n, double atol) {
    cr_assert_eq(r->n_seen, n, "hook %d saw %d values, expected %d", r->id, r->n_seen, n);
    for (int i = 0; i < n; i++)
        cr_assert(fabs(r->seen[i] - want[i]) <= atol, "hook %d saw [%d] = %g, expected %g", r->id,
                  i, r->seen[i], want[i]);
}

/* ---------------------------------------------------------------------------------------
 * Order and accumulation
 */
Test(autograd, simple_product_gradients) {
    ca_tensor *x = vec(CA_FLOAT64, 3, (double[]){1, 2, 3}, true);
    ca_tensor *w = vec(CA_FLOAT64, 3, (double[]){4, 5, 6}, true);
    ca_tensor *y = mul(x, w), *L = sum_all(y);
    double l;
    TU_OK(ca_tensor_item(L, &l));
    cr_assert_eq(l, 32.0);
    TU_OK(ca_backward(L));
    assert_grad(x, (double[]){4, 5, 6}, 0);
    assert_grad(w, (double[]){1, 2, 3}, 0);
    cr_assert_null(ca_tensor_grad(y), "a non-leaf keeps no .grad without retain_grad");
    RELEASE(x, w, y, L);
}

Test(autograd, diamond_runs_each_node_once) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *a = mul_s(x, 2), *b = mul_s(x, 3), *c = add(a, b), *L = sum_all(c);
    hook_rec hx = {.id = 0}, ha = {.id = 1}, hb = {.id = 2}, hc = {.id = 3};
    TU_OK(ca_tensor_register_hook(x, record_hook, &hx, NULL, NULL));
    TU_OK(ca_tensor_register_hook(a, record_hook, &ha, NULL, NULL));
    TU_OK(ca_tensor_register_hook(b, record_hook, &hb, NULL, NULL));
    TU_OK(ca_tensor_register_hook(c, record_hook, &hc, NULL, NULL));
    TU_OK(ca_backward(L));
    cr_assert(hx.calls == 1 && ha.calls == 1 && hb.calls == 1 && hc.calls == 1,
              "calls x=%d a=%d b=%d c=%d", hx.calls, ha.calls, hb.calls, hc.calls);
    assert_seen(&hx, (double[]){5, 5}, 2, 0); /* the sum of both branches, in one call */
    assert_grad(x, (double[]){5, 5}, 0);
    /* c runs before a and b, which both run before x's accumulation */
    cr_assert_eq(call_log[0], 3);
    cr_assert_eq(call_log[3], 0);
    RELEASE(x, a, b, c, L);
}

Test(autograd, diamond_with_uneven_branches) {
    /* c = (2x)^2 + 3x: the long branch must finish before x's node runs */
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *a = mul_s(x, 2), *a2 = mul(a, a), *b = mul_s(x, 3), *c = add(a2, b);
    ca_tensor *L = sum_all(c);
    hook_rec hx = {.id = 0}, ha = {.id = 1};
    TU_OK(ca_tensor_register_hook(x, record_hook, &hx, NULL, NULL));
    TU_OK(ca_tensor_register_hook(a, record_hook, &ha, NULL, NULL));
    TU_OK(ca_backward(L));
    cr_assert_eq(hx.calls, 1);
    cr_assert_eq(ha.calls, 1);
    assert_seen(&ha, (double[]){4, 8}, 2, 0);  /* 2a, summed over a's two uses */
    assert_grad(x, (double[]){11, 19}, 1e-12); /* 8x + 3 */
    RELEASE(x, a, a2, b, c, L);
}

Test(autograd, leaf_used_twice_gets_summed_gradient_once) {
    ca_tensor *x = vec(CA_FLOAT32, 3, (double[]){1, -2, 3}, true);
    hook_rec h = {0};
    TU_OK(ca_tensor_register_hook(x, record_hook, &h, NULL, NULL));
    ca_tensor *y = mul(x, x), *L = sum_all(y);
    TU_OK(ca_backward(L));
    cr_assert_eq(h.calls, 1);
    assert_grad(x, (double[]){2, -4, 6}, 1e-6);
    RELEASE(x, y, L);
}

Test(autograd, gradients_accumulate_over_backwards) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *w = vec(CA_FLOAT64, 2, (double[]){3, 4}, false);
    for (int k = 1; k <= 3; k++) { /* a fresh graph each time */
        ca_tensor *y = mul(x, w), *L = sum_all(y);
        TU_OK(ca_backward(L));
        assert_grad(x, (double[]){3.0 * k, 4.0 * k}, 0);
        RELEASE(y, L);
    }
    cr_assert_null(ca_tensor_grad(w), "w does not require grad");
    TU_OK(ca_tensor_set_grad(x, NULL)); /* zero_grad by clearing */
    ca_tensor *y = mul(x, w), *L = sum_all(y);
    TU_OK(ca_backward(L));
    assert_grad(x, (double[]){3, 4}, 0);
    RELEASE(x, w, y, L);
}

Test(autograd, retain_graph_allows_second_backward) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *w = vec(CA_FLOAT64, 2, (double[]){3, 4}, true);
    ca_tensor *e = NULL, *y, *L;
    TU_OK(ca_exp(x, &e));
    y = mul(e, w);
    L = sum_all(y);
    ca_backward_options o = {.retain_graph = true};
    TU_OK(ca_backward_ex(L, &o));
    TU_OK(ca_backward_ex(L, &o));
    double e1 = exp(1.0), e2 = exp(2.0);
    assert_grad(x, (double[]){2 * 3 * e1, 2 * 4 * e2}, 1e-12);
    assert_grad(w, (double[]){2 * e1, 2 * e2}, 1e-12);
    TU_OK(ca_backward(L)); /* the last one may free the graph */
    assert_grad(w, (double[]){3 * e1, 3 * e2}, 1e-12);
    TU_FAILS(ca_backward(L), CA_STATUS_AUTOGRAD, "second time");
    RELEASE(x, w, e, y, L);
}

Test(autograd, second_backward_fails_naming_retain_graph) {
    ca_tensor *x = vec(CA_FLOAT32, 2, (double[]){1, 2}, true);
    ca_tensor *w = vec(CA_FLOAT32, 2, (double[]){3, 4}, true);
    ca_tensor *y = mul(x, w), *L = sum_all(y);
    TU_OK(ca_backward(L));
    TU_FAILS(ca_backward(L), CA_STATUS_AUTOGRAD, "second time");
    cr_assert(strstr(ca_last_error(), "retain_graph"), "%s", ca_last_error());
    cr_assert(strstr(ca_last_error(), "MulBackward0"), "%s", ca_last_error());
    assert_grad(x, (double[]){3, 4}, 0); /* the failed backward added nothing */
    RELEASE(x, w, y, L);
}

Test(autograd, second_backward_through_saved_output_fails) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){0, 1}, true), *y;
    TU_OK(ca_exp(x, &y));
    ca_tensor *L = sum_all(y);
    TU_OK(ca_backward(L));
    TU_FAILS(ca_backward(L), CA_STATUS_AUTOGRAD, "ExpBackward0");
    cr_assert(strstr(ca_last_error(), "second time"), "%s", ca_last_error());
    RELEASE(x, y, L);
}

Test(autograd, second_backward_without_saved_tensors_is_allowed) {
    /* as in PyTorch: only freed saved tensors make a second backward fail */
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *a = mul_s(x, 2), *b = add(a, x), *L = sum_all(b);
    TU_OK(ca_backward(L));
    TU_OK(ca_backward(L));
    assert_grad(x, (double[]){6, 6}, 0);
    RELEASE(x, a, b, L);
}

Test(autograd, nonscalar_root_needs_explicit_gradient) {
    ca_tensor *x = vec(CA_FLOAT64, 3, (double[]){1, 2, 3}, true), *y = mul_s(x, 2);
    TU_FAILS(ca_backward(y), CA_STATUS_AUTOGRAD, "implicitly");
    cr_assert(strstr(ca_last_error(), "one element"), "%s", ca_last_error());
    cr_assert(strstr(ca_last_error(), "[3]"), "%s", ca_last_error());
    cr_assert_null(ca_tensor_grad(x));
    RELEASE(x, y);
}

Test(autograd, backward_ex_with_explicit_gradient) {
    ca_tensor *x = vec(CA_FLOAT64, 3, (double[]){1, 2, 3}, true), *y = mul(x, x);
    ca_tensor *g = vec(CA_FLOAT64, 3, (double[]){1, 10, 100}, false);
    ca_backward_options o = {.gradient = g};
    TU_OK(ca_backward_ex(y, &o));
    assert_grad(x, (double[]){2, 40, 600}, 0);
    tu_assert_values(g, (double[]){1, 10, 100}, 0);
    RELEASE(x, y, g);
}

Test(autograd, explicit_gradient_is_not_aliased_by_grad) {
    /* y = x + 1 passes the seed straight through: .grad must be a copy of it */
    ca_tensor *x = vec(CA_FLOAT64, 3, (double[]){1, 2, 3}, true), *y;
    TU_OK(ca_add_scalar(x, 1.0, &y));
    ca_tensor *g = vec(CA_FLOAT64, 3, (double[]){1, 2, 3}, false);
    ca_backward_options o = {.gradient = g, .retain_graph = true};
    TU_OK(ca_backward_ex(y, &o));
    cr_assert_neq(ca_tensor_data(ca_tensor_grad(x)), ca_tensor_data(g));
    TU_OK(ca_backward_ex(y, &o)); /* accumulates in place into .grad */
    assert_grad(x, (double[]){2, 4, 6}, 0);
    tu_assert_values(g, (double[]){1, 2, 3}, 0);
    RELEASE(x, y, g);
}

Test(autograd, leaf_grads_are_not_shared) {
    ca_tensor *a = vec(CA_FLOAT32, 2, (double[]){1, 2}, true);
    ca_tensor *b = vec(CA_FLOAT32, 2, (double[]){3, 4}, true);
    ca_tensor *c = add(a, b), *L = sum_all(c);
    TU_OK(ca_backward(L));
    cr_assert_neq(ca_tensor_data(ca_tensor_grad(a)), ca_tensor_data(ca_tensor_grad(b)));
    bool prev = ca_set_grad_enabled(false);
    TU_OK(ca_zero_(ca_tensor_grad(a)));
    ca_set_grad_enabled(prev);
    assert_grad(b, (double[]){1, 1}, 0);
    RELEASE(a, b, c, L);
}

Test(autograd, backward_on_scalar_leaf) {
    ca_tensor *x = tu_from(CA_FLOAT64, 0, NULL, (double[]){3.5}, true);
    TU_OK(ca_backward(x));
    double g;
    TU_OK(ca_tensor_item(ca_tensor_grad(x), &g));
    cr_assert_eq(g, 1.0);
    TU_OK(ca_backward(x));
    TU_OK(ca_tensor_item(ca_tensor_grad(x), &g));
    cr_assert_eq(g, 2.0);
    ca_tensor_release(x);
}

Test(autograd, backward_without_grad_fails) {
    ca_tensor *x = vec(CA_FLOAT64, 1, (double[]){1}, false), *y = mul_s(x, 2);
    TU_FAILS(ca_backward(y), CA_STATUS_AUTOGRAD, "does not require grad");
    RELEASE(x, y);
}

Test(autograd, backward_works_with_grad_mode_off) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true), *y = mul(x, x), *L = sum_all(y);
    bool prev = ca_set_grad_enabled(false);
    ca_status st = ca_backward(L);
    ca_set_grad_enabled(prev);
    TU_OK(st);
    assert_grad(x, (double[]){2, 4}, 0);
    cr_assert(ca_is_grad_enabled());
    RELEASE(x, y, L);
}

Test(autograd, grad_fn_names) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(2, 2), true);
    ca_tensor *w = tu_randn(CA_FLOAT32, TU_SHAPE(2, 2), true);
    ca_tensor *o[8] = {0};
    TU_OK(ca_add(x, w, &o[0]));
    TU_OK(ca_mul(x, w, &o[1]));
    TU_OK(ca_mul_scalar(x, 3, &o[2]));
    TU_OK(ca_exp(x, &o[3]));
    TU_OK(ca_sub(x, w, &o[4]));
    TU_OK(ca_sum(x, 0, NULL, false, &o[5]));
    TU_OK(ca_mm(x, w, &o[6]));
    TU_OK(ca_relu(x, &o[7]));
    const char *want[8] = {"AddBackward0", "MulBackward0", "MulBackward1", "ExpBackward0",
                           "SubBackward0", "SumBackward0", "MmBackward0",  "ReluBackward0"};
    for (int i = 0; i < 8; i++) {
        const char *got = ca_tensor_grad_fn_name(o[i]);
        cr_assert(got && strcmp(got, want[i]) == 0, "op %d: grad_fn %s, want %s", i,
                  got ? got : "(null)", want[i]);
        cr_assert(!ca_tensor_is_leaf(o[i]) && ca_tensor_requires_grad(o[i]));
    }
    cr_assert_null(ca_tensor_grad_fn_name(x));
    tu_release_n(o, 8);
    RELEASE(x, w);
}

Test(autograd, input_without_requires_grad_gets_nothing) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *c = vec(CA_FLOAT64, 2, (double[]){5, 6}, false);
    ca_tensor *y = mul(x, c), *L = sum_all(y);
    cr_assert(ca_tensor_requires_grad(y));
    TU_OK(ca_backward(L));
    assert_grad(x, (double[]){5, 6}, 0);
    cr_assert_null(ca_tensor_grad(c));
    RELEASE(x, c, y, L);
}

Test(autograd, no_grad_mode_records_nothing) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    cr_assert(ca_set_grad_enabled(false));
    cr_assert(!ca_is_grad_enabled());
    ca_tensor *y = mul(x, x), *z;
    TU_OK(ca_exp(y, &z));
    cr_assert(!ca_set_grad_enabled(true));
    cr_assert_null(ca_tensor_grad_fn_name(y));
    cr_assert_null(ca_tensor_grad_fn_name(z));
    cr_assert(!ca_tensor_requires_grad(y) && !ca_tensor_requires_grad(z));
    cr_assert(ca_tensor_is_leaf(z));
    tu_assert_values(z, (double[]){exp(1), exp(4)}, 1e-12);
    TU_FAILS(ca_backward(z), CA_STATUS_AUTOGRAD, "does not require grad");
    ca_tensor *r = mul(x, x); /* recording again */
    cr_assert_str_eq(ca_tensor_grad_fn_name(r), "MulBackward0");
    RELEASE(x, y, z, r);
}

Test(autograd, float32_and_float64_graphs) {
    const ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int k = 0; k < 2; k++) {
        ca_tensor *x = vec(dts[k], 3, (double[]){0.5, -1, 2}, true), *e, *t;
        TU_OK(ca_exp(x, &e));
        TU_OK(ca_tanh(x, &t));
        ca_tensor *p = mul(e, t), *L = sum_all(p);
        TU_OK(ca_backward(L));
        const ca_tensor *g = ca_tensor_grad(x);
        cr_assert_eq(ca_tensor_dtype(g), dts[k]);
        const double xs[3] = {0.5, -1, 2};
        for (int i = 0; i < 3; i++) {
            double th = tanh(xs[i]), want = exp(xs[i]) * (th + 1 - th * th);
            double tol = dts[k] == CA_FLOAT32 ? 1e-5 : 1e-13;
            cr_assert(fabs(tu_get(g, i) - want) <= tol * (1 + fabs(want)),
                      "%s grad[%d] = %.17g, want %.17g", ca_dtype_name(dts[k]), i, tu_get(g, i),
                      want);
        }
        RELEASE(x, e, t, p, L);
    }
}

Test(autograd, long_chain_backward_and_free) {
    ca_tensor *x = tu_from(CA_FLOAT64, 0, NULL, (double[]){1.0}, true);
    ca_tensor *c = tu_from(CA_FLOAT64, 0, NULL, (double[]){1.0001}, false);
    ca_tensor *y = ca_tensor_retain(x);
    const int n = 20000;
    for (int i = 0; i < n; i++) { /* alternate a node with saved tensors and one without */
        ca_tensor *next = (i % 2) ? mul(y, c) : mul_s(y, 1.0001);
        ca_tensor_release(y);
        y = next;
    }
    TU_OK(ca_backward(y));
    double g;
    TU_OK(ca_tensor_item(ca_tensor_grad(x), &g));
    double want = pow(1.0001, n);
    cr_assert(fabs(g - want) < 1e-9 * want, "grad %.17g want %.17g", g, want);
    ca_tensor_release(y); /* frees 20000 nodes: must not recurse */
    RELEASE(x, c);
}

/* ---------------------------------------------------------------------------------------
 * ca_grad
 */
Test(autograd, grad_returns_without_touching_dot_grad) {
    ca_tensor *x = vec(CA_FLOAT64, 3, (double[]){1, 2, 3}, true);
    ca_tensor *w = vec(CA_FLOAT64, 3, (double[]){4, 5, 6}, true);
    ca_tensor *y = mul(x, w), *L = sum_all(y);
    TU_OK(ca_tensor_retain_grad(y));
    ca_tensor *in[2] = {x, w}, *g[2] = {NULL, NULL};
    TU_OK(ca_grad(1, &L, 2, in, NULL, g));
    tu_assert_values(g[0], (double[]){4, 5, 6}, 0);
    tu_assert_values(g[1], (double[]){1, 2, 3}, 0);
    cr_assert_null(ca_tensor_grad(x));
    cr_assert_null(ca_tensor_grad(w));
    cr_assert_null(ca_tensor_grad(y), "retain_grad is for backward, not for ca_grad");
    RELEASE(x, w, y, L, g[0], g[1]);
}

Test(autograd, grad_for_nonleaf_input) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *w = vec(CA_FLOAT64, 2, (double[]){3, 4}, true);
    ca_tensor *y = mul(x, w), *z = mul(y, y), *L = sum_all(z);
    ca_tensor *in[2] = {y, x}, *g[2];
    TU_OK(ca_grad(1, &L, 2, in, NULL, g));
    tu_assert_values(g[0], (double[]){6, 16}, 0);  /* 2y */
    tu_assert_values(g[1], (double[]){18, 64}, 0); /* 2y * w */
    RELEASE(x, w, y, z, L, g[0], g[1]);
}

Test(autograd, grad_with_grad_outputs_and_several_outputs) {
    ca_tensor *x = vec(CA_FLOAT64, 3, (double[]){1, 2, 3}, true);
    ca_tensor *y1 = mul_s(x, 2), *y2 = mul(x, x), *L = sum_all(x);
    ca_tensor *g1 = vec(CA_FLOAT64, 3, (double[]){1, 0, -1}, false);
    ca_tensor *g2 = vec(CA_FLOAT64, 3, (double[]){1, 1, 1}, false);
    ca_tensor *outs[3] = {y1, y2, L}, *gos[3] = {g1, g2, NULL}, *g = NULL;
    ca_grad_options o = {.grad_outputs = gos};
    TU_OK(ca_grad(3, outs, 1, &x, &o, &g));
    /* 2 * g1 + 2x * g2 + 1 */
    tu_assert_values(g, (double[]){5, 5, 5}, 0);
    RELEASE(x, y1, y2, L, g1, g2, g);
}

Test(autograd, grad_allow_unused_gives_null) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *u = vec(CA_FLOAT64, 2, (double[]){7, 7}, true);
    ca_tensor *y = mul(x, x), *L = sum_all(y);
    ca_tensor *in[2] = {u, x}, *g[2] = {x, x}; /* garbage in: must be overwritten */
    ca_grad_options o = {.allow_unused = true};
    TU_OK(ca_grad(1, &L, 2, in, &o, g));
    cr_assert_null(g[0]);
    tu_assert_values(g[1], (double[]){2, 4}, 0);
    RELEASE(x, u, y, L, g[1]);
}

Test(autograd, grad_unused_input_is_an_error) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *u = vec(CA_FLOAT64, 2, (double[]){7, 7}, true);
    ca_tensor *y = mul(x, x), *L = sum_all(y);
    ca_tensor *in[2] = {x, u}, *g[2];
    TU_FAILS(ca_grad(1, &L, 2, in, NULL, g), CA_STATUS_AUTOGRAD, "input 1");
    cr_assert(strstr(ca_last_error(), "allow_unused"), "%s", ca_last_error());
    cr_assert(g[0] == NULL && g[1] == NULL, "outputs are NULL on error");
    RELEASE(x, u, y, L);
}

Test(autograd, grad_prunes_unrelated_branches) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *v = vec(CA_FLOAT64, 2, (double[]){3, 4}, true);
    ca_tensor *a = mul_s(x, 2), *b = mul(v, v), *c = add(a, b), *L = sum_all(c);
    hook_rec hv = {.id = 1}, hb = {.id = 2}, hx = {.id = 3};
    TU_OK(ca_tensor_register_hook(v, record_hook, &hv, NULL, NULL));
    TU_OK(ca_tensor_register_hook(b, record_hook, &hb, NULL, NULL));
    TU_OK(ca_tensor_register_hook(x, record_hook, &hx, NULL, NULL));
    ca_tensor *g;
    TU_OK(ca_grad(1, &L, 1, &x, NULL, &g));
    tu_assert_values(g, (double[]){2, 2}, 0);
    cr_assert_eq(hv.calls, 0, "a hook on an unrelated leaf ran");
    cr_assert_eq(hb.calls, 0, "a hook on an unrelated branch ran");
    cr_assert_eq(hx.calls, 1);
    RELEASE(x, v, a, b, c, L, g);
}

Test(autograd, grad_does_not_run_the_inputs_grad_fn) {
    /* torch.autograd.grad(L, y) stops at y: y's own grad_fn (ExpBackward0) neither runs
     * nor frees its saved result, so a later backward through y still works */
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){0, 1}, true), *y;
    TU_OK(ca_exp(x, &y));
    ca_tensor *z = mul_s(y, 2), *L = sum_all(z), *g;
    TU_OK(ca_grad(1, &L, 1, &y, NULL, &g));
    tu_assert_values(g, (double[]){2, 2}, 0);
    ca_tensor *z2 = mul_s(y, 3), *L2 = sum_all(z2);
    TU_OK(ca_backward(L2));
    assert_grad(x, (double[]){3, 3 * exp(1)}, 1e-12);
    RELEASE(x, y, z, L, g, z2, L2);
}

Test(autograd, grad_of_leaf_with_respect_to_itself) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true), *g;
    ca_tensor *seed = vec(CA_FLOAT64, 2, (double[]){3, 4}, false);
    ca_grad_options o = {.grad_outputs = &seed};
    TU_OK(ca_grad(1, &x, 1, &x, &o, &g));
    tu_assert_values(g, (double[]){3, 4}, 0);
    cr_assert_null(ca_tensor_grad(x));
    RELEASE(x, seed, g);
}

Test(autograd, grad_twice_needs_retain_graph) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *y = mul(x, x), *L = sum_all(y), *g1, *g2, *g3;
    ca_grad_options keep = {.retain_graph = true};
    TU_OK(ca_grad(1, &L, 1, &x, &keep, &g1));
    TU_OK(ca_grad(1, &L, 1, &x, NULL, &g2));
    tu_assert_values(g2, (double[]){2, 4}, 0);
    TU_FAILS(ca_grad(1, &L, 1, &x, NULL, &g3), CA_STATUS_AUTOGRAD, "second time");
    cr_assert_null(g3);
    RELEASE(x, y, L, g1, g2);
}

/* ---------------------------------------------------------------------------------------
 * Hooks
 */
Test(autograd, hook_on_leaf_sees_its_gradient) {
    ca_tensor *x = vec(CA_FLOAT64, 3, (double[]){1, 2, 3}, true);
    ca_tensor *w = vec(CA_FLOAT64, 3, (double[]){4, 5, 6}, false);
    hook_rec h = {0};
    ca_hook_handle id = 0;
    TU_OK(ca_tensor_register_hook(x, record_hook, &h, NULL, &id));
    cr_assert_neq(id, 0);
    ca_tensor *y = mul(x, w), *L = sum_all(y);
    TU_OK(ca_backward(L));
    cr_assert_eq(h.calls, 1);
    assert_seen(&h, (double[]){4, 5, 6}, 3, 0);
    RELEASE(x, w, y, L);
}

Test(autograd, hook_on_nonleaf_sees_its_gradient) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *y = mul_s(x, 3), *z = mul(y, y), *L = sum_all(z);
    hook_rec h = {0};
    TU_OK(ca_tensor_register_hook(y, record_hook, &h, NULL, NULL));
    TU_OK(ca_backward(L));
    cr_assert_eq(h.calls, 1);
    assert_seen(&h, (double[]){6, 12}, 2, 0); /* 2y */
    assert_grad(x, (double[]){18, 36}, 0);
    RELEASE(x, y, z, L);
}

Test(autograd, hook_on_dropped_nonleaf_still_runs) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *y = mul_s(x, 3);
    hook_rec h = {0};
    TU_OK(ca_tensor_register_hook(y, record_hook, &h, NULL, NULL));
    ca_tensor *L = sum_all(y);
    ca_tensor_release(y); /* the hook lives on y's node, which L's graph keeps */
    TU_OK(ca_backward(L));
    cr_assert_eq(h.calls, 1);
    RELEASE(x, L);
}

Test(autograd, hook_replacement_changes_downstream_gradients) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *w = vec(CA_FLOAT64, 2, (double[]){3, 4}, true);
    ca_tensor *y = mul(x, w), *L = sum_all(y);
    hook_rec hy = {.scale = 10}, hw = {.scale = -1};
    TU_OK(ca_tensor_register_hook(y, record_hook, &hy, NULL, NULL));
    TU_OK(ca_tensor_register_hook(w, record_hook, &hw, NULL, NULL));
    TU_OK(ca_backward(L));
    assert_grad(x, (double[]){30, 40}, 0);   /* 10 * w */
    assert_grad(w, (double[]){-10, -20}, 0); /* -(10 * x): the leaf hook runs last */
    assert_seen(&hw, (double[]){10, 20}, 2, 0);
    RELEASE(x, w, y, L);
}

static ca_status wrong_shape_hook(ca_tensor *grad, ca_tensor **replacement, void *ctx) {
    (void)grad;
    (void)ctx;
    return ca_zeros(CA_FLOAT32, TU_SHAPE(2), replacement);
}

Test(autograd, hook_returning_wrong_shape_fails_without_leak) {
    tu_alloc_install();
    ca_tensor *x = vec(CA_FLOAT32, 3, (double[]){1, 2, 3}, true);
    ca_tensor *y = mul(x, x), *L = sum_all(y);
    TU_OK(ca_tensor_register_hook(y, wrong_shape_hook, NULL, NULL, NULL));
    TU_FAILS(ca_backward(L), CA_STATUS_HOOK, "[2]");
    cr_assert(strstr(ca_last_error(), "[3]"), "message names both shapes: %s", ca_last_error());
    cr_assert_null(ca_tensor_grad(x));
    RELEASE(x, y, L);
    assert_no_leak();
}

static ca_status refusing_hook(ca_tensor *grad, ca_tensor **replacement, void *ctx) {
    (void)grad;
    (void)replacement;
    ++*(int *)ctx;
    return ca_error_set(CA_STATUS_INVALID, "hook refused gradient %d", 42);
}

Test(autograd, failing_hook_stops_backward_then_next_backward_works) {
    tu_alloc_install();
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *w = vec(CA_FLOAT64, 2, (double[]){3, 4}, true);
    ca_tensor *y = mul(x, w), *z;
    TU_OK(ca_exp(y, &z));
    ca_tensor *L = sum_all(z);
    int calls = 0;
    TU_OK(ca_tensor_register_hook(y, refusing_hook, &calls, NULL, NULL));
    TU_FAILS(ca_backward(L), CA_STATUS_INVALID, "hook refused gradient 42");
    cr_assert_eq(calls, 1);
    cr_assert_null(ca_tensor_grad(x), "backward must stop at the failing hook");
    cr_assert_null(ca_tensor_grad(w));
    RELEASE(y, z, L);
    /* a new graph works */
    ca_tensor *y2 = mul(x, w), *L2 = sum_all(y2);
    TU_OK(ca_backward(L2));
    assert_grad(x, (double[]){3, 4}, 0);
    RELEASE(x, w, y2, L2);
    assert_no_leak();
}

static ca_status silent_failing_hook(ca_tensor *grad, ca_tensor **replacement, void *ctx) {
    (void)grad;
    (void)replacement;
    (void)ctx;
    return CA_STATUS_INVALID; /* no message */
}

Test(autograd, failing_hook_without_message_gets_one) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true), *y = mul_s(x, 2);
    ca_tensor *L = sum_all(y);
    TU_OK(ca_tensor_register_hook(x, silent_failing_hook, NULL, NULL, NULL));
    TU_FAILS(ca_backward(L), CA_STATUS_HOOK, "set no message");
    cr_assert(strstr(ca_last_error(), "CA_STATUS_INVALID"), "%s", ca_last_error());
    RELEASE(x, y, L);
}

Test(autograd, hooks_run_in_registration_order) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true), *y = mul_s(x, 1);
    ca_tensor *L = sum_all(y);
    hook_rec h1 = {.id = 1, .scale = 2}, h2 = {.id = 2, .scale = 3}, h3 = {.id = 3};
    TU_OK(ca_tensor_register_hook(y, record_hook, &h1, NULL, NULL));
    TU_OK(ca_tensor_register_hook(y, record_hook, &h2, NULL, NULL));
    TU_OK(ca_tensor_register_hook(y, record_hook, &h3, NULL, NULL));
    TU_OK(ca_backward(L));
    cr_assert_eq(n_log, 3);
    cr_assert(call_log[0] == 1 && call_log[1] == 2 && call_log[2] == 3, "order %d %d %d",
              call_log[0], call_log[1], call_log[2]);
    assert_seen(&h2, (double[]){2, 2}, 2, 0); /* each hook sees the previous replacement */
    assert_seen(&h3, (double[]){6, 6}, 2, 0);
    assert_grad(x, (double[]){6, 6}, 0);
    RELEASE(x, y, L);
}

Test(autograd, remove_hook_by_handle) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    hook_rec h1 = {.id = 1, .scale = 100}, h2 = {.id = 2};
    ca_hook_handle id1, id2;
    TU_OK(ca_tensor_register_hook(x, record_hook, &h1, rec_free, &id1));
    TU_OK(ca_tensor_register_hook(x, record_hook, &h2, rec_free, &id2));
    cr_assert_neq(id1, id2);
    TU_OK(ca_tensor_remove_hook(x, id1));
    cr_assert_eq(h1.freed, 1, "ctx_free runs on removal");
    cr_assert_eq(h2.freed, 0);
    ca_tensor *y = mul_s(x, 2), *L = sum_all(y);
    TU_OK(ca_backward(L));
    cr_assert_eq(h1.calls, 0, "a removed hook ran");
    cr_assert_eq(h2.calls, 1);
    assert_grad(x, (double[]){2, 2}, 0);
    TU_FAILS(ca_tensor_remove_hook(x, id1), CA_STATUS_INVALID, "no hook");
    cr_assert_eq(h1.freed, 1, "ctx_free must run once");
    RELEASE(x, y, L);
    cr_assert_eq(h2.freed, 1, "ctx_free runs when the tensor is freed");
}

Test(autograd, remove_hook_of_nonleaf) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true), *y = mul_s(x, 2);
    hook_rec h = {.scale = 5};
    ca_hook_handle id;
    TU_OK(ca_tensor_register_hook(y, record_hook, &h, rec_free, &id));
    TU_FAILS(ca_tensor_remove_hook(x, id), CA_STATUS_INVALID, "no hook"); /* wrong tensor */
    TU_OK(ca_tensor_remove_hook(y, id));
    cr_assert_eq(h.freed, 1);
    ca_tensor *L = sum_all(y);
    TU_OK(ca_backward(L));
    cr_assert_eq(h.calls, 0);
    assert_grad(x, (double[]){2, 2}, 0);
    RELEASE(x, y, L);
}

Test(autograd, ctx_free_when_graph_is_freed) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true), *y = mul_s(x, 2);
    hook_rec hy = {0}, hx = {0};
    TU_OK(ca_tensor_register_hook(y, record_hook, &hy, rec_free, NULL));
    TU_OK(ca_tensor_register_hook(x, record_hook, &hx, rec_free, NULL));
    ca_tensor *L = sum_all(y);
    ca_tensor_release(y);
    cr_assert_eq(hy.freed, 0, "the graph still holds y's node");
    TU_OK(ca_backward(L));
    ca_tensor_release(L);
    cr_assert_eq(hy.freed, 1, "ctx_free runs when the node is freed");
    cr_assert_eq(hx.freed, 0);
    ca_tensor_release(x);
    cr_assert_eq(hx.freed, 1, "ctx_free runs when the leaf is freed");
}

Test(autograd, hook_keeping_a_gradient_sees_no_later_writes) {
    /* the hook keeps a reference to the gradient; accumulating into .grad later must not
     * write into the tensor it kept */
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true), *y = mul(x, x);
    ca_tensor *L = sum_all(y);
    hook_rec h = {.keep = true};
    TU_OK(ca_tensor_register_hook(x, record_hook, &h, NULL, NULL));
    ca_backward_options o = {.retain_graph = true};
    TU_OK(ca_backward_ex(L, &o));
    TU_OK(ca_backward_ex(L, &o));
    assert_grad(x, (double[]){4, 8}, 0);
    cr_assert_not_null(h.kept);
    tu_assert_values(h.kept, (double[]){2, 4}, 0);
    RELEASE(x, y, L, h.kept);
}

Test(autograd, register_hook_rules) {
    ca_tensor *c = vec(CA_FLOAT64, 2, (double[]){1, 2}, false);
    hook_rec h = {0};
    TU_FAILS(ca_tensor_register_hook(c, record_hook, &h, rec_free, NULL), CA_STATUS_AUTOGRAD,
             "require grad");
    cr_assert_eq(h.freed, 0, "a hook that was not registered is not the library's to free");
    ca_tensor_release(c);
    cr_assert_eq(h.freed, 0);
}

/* ---------------------------------------------------------------------------------------
 * retain_grad and post-accumulate-grad hooks
 */
Test(autograd, retain_grad_fills_nonleaf_grad) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *y = mul_s(x, 3), *z = mul(y, y), *L = sum_all(z);
    TU_OK(ca_tensor_retain_grad(y));
    cr_assert(ca_tensor_retains_grad(y));
    TU_OK(ca_tensor_retain_grad(x)); /* no-op on leaves */
    ca_backward_options o = {.retain_graph = true};
    TU_OK(ca_backward_ex(L, &o));
    assert_grad(y, (double[]){6, 12}, 0);
    cr_assert_null(ca_tensor_grad(z), "z did not ask to retain its grad");
    TU_OK(ca_backward_ex(L, &o));
    assert_grad(y, (double[]){12, 24}, 0);
    assert_grad(x, (double[]){36, 72}, 0);
    RELEASE(x, y, z, L);
}

Test(autograd, retain_grad_sees_hook_modified_gradient) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *y = mul_s(x, 1), *L = sum_all(y);
    TU_OK(ca_tensor_retain_grad(y)); /* before the hook: the hook still applies first */
    hook_rec h = {.scale = 3};
    TU_OK(ca_tensor_register_hook(y, record_hook, &h, NULL, NULL));
    TU_OK(ca_backward(L));
    assert_grad(y, (double[]){3, 3}, 0);
    assert_grad(x, (double[]){3, 3}, 0);
    RELEASE(x, y, L);
}

Test(autograd, retain_grad_on_the_root) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true), *y = mul(x, x), *L = sum_all(y);
    TU_OK(ca_tensor_retain_grad(L));
    TU_OK(ca_backward(L));
    double g;
    TU_OK(ca_tensor_item(ca_tensor_grad(L), &g));
    cr_assert_eq(g, 1.0);
    RELEASE(x, y, L);
}

Test(autograd, retain_grad_on_a_dropped_tensor_is_harmless) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true), *y = mul_s(x, 2);
    TU_OK(ca_tensor_retain_grad(y));
    ca_tensor *L = sum_all(y);
    ca_tensor_release(y); /* its node lives on in L's graph */
    TU_OK(ca_backward(L));
    assert_grad(x, (double[]){2, 2}, 0);
    RELEASE(x, L);
}

Test(autograd, retained_grad_is_a_private_copy) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *y = mul_s(x, 1), *L = sum_all(y);
    TU_OK(ca_tensor_retain_grad(y));
    TU_OK(ca_backward(L));
    cr_assert_neq(ca_tensor_data(ca_tensor_grad(y)), ca_tensor_data(ca_tensor_grad(x)));
    TU_OK(ca_fill_(ca_tensor_grad(y), 9));
    assert_grad(x, (double[]){1, 1}, 0);
    RELEASE(x, y, L);
}

typedef struct {
    int calls;
    double grad0;
    bool had_grad;
} post_rec;

static ca_status post_hook(ca_tensor *leaf, void *ctx) {
    post_rec *r = ctx;
    r->calls++;
    ca_tensor *g = ca_tensor_grad(leaf);
    r->had_grad = g != NULL;
    r->grad0 = g ? tu_get(g, 0) : NAN;
    return CA_OK;
}

Test(autograd, post_accumulate_hook_sees_updated_grad) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *y = mul(x, x), *L = sum_all(y);
    post_rec r = {0};
    ca_hook_handle id;
    TU_OK(ca_tensor_register_post_accumulate_grad_hook(x, post_hook, &r, NULL, &id));
    ca_backward_options o = {.retain_graph = true};
    TU_OK(ca_backward_ex(L, &o));
    cr_assert_eq(r.calls, 1);
    cr_assert(r.had_grad, "the hook runs after .grad is set");
    cr_assert_eq(r.grad0, 2.0);
    TU_OK(ca_backward_ex(L, &o));
    cr_assert_eq(r.calls, 2);
    cr_assert_eq(r.grad0, 4.0, "the hook sees the accumulated .grad");
    TU_OK(ca_tensor_remove_hook(x, id));
    TU_OK(ca_backward(L));
    cr_assert_eq(r.calls, 2);
    RELEASE(x, y, L);
}

Test(autograd, post_accumulate_hook_only_on_leaves) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true), *y = mul_s(x, 2);
    ca_tensor *c = vec(CA_FLOAT64, 2, (double[]){1, 2}, false);
    post_rec r = {0};
    TU_FAILS(ca_tensor_register_post_accumulate_grad_hook(y, post_hook, &r, NULL, NULL),
             CA_STATUS_AUTOGRAD, "leaf");
    TU_FAILS(ca_tensor_register_post_accumulate_grad_hook(c, post_hook, &r, NULL, NULL),
             CA_STATUS_AUTOGRAD, "require grad");
    RELEASE(x, y, c);
}

Test(autograd, post_accumulate_hook_not_run_by_grad) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true), *y = mul(x, x);
    ca_tensor *L = sum_all(y), *g;
    post_rec r = {0};
    TU_OK(ca_tensor_register_post_accumulate_grad_hook(x, post_hook, &r, NULL, NULL));
    TU_OK(ca_grad(1, &L, 1, &x, NULL, &g));
    cr_assert_eq(r.calls, 0, "ca_grad accumulates nothing, so no post-accumulate hook");
    RELEASE(x, y, L, g);
}

/* ---------------------------------------------------------------------------------------
 * Saved tensors changed in place
 */
Test(autograd, inplace_change_of_saved_input_is_detected) {
    ca_tensor *x = vec(CA_FLOAT32, 2, (double[]){1, 2}, true);
    ca_tensor *w = vec(CA_FLOAT32, 2, (double[]){3, 4}, true);
    ca_tensor *d = vec(CA_FLOAT32, 2, (double[]){1, 1}, false);
    ca_tensor *y = mul(x, w), *L = sum_all(y);
    bool prev = ca_set_grad_enabled(false);
    TU_OK(ca_add_(w, d, 1.0));
    ca_set_grad_enabled(prev);
    TU_FAILS(ca_backward(L), CA_STATUS_AUTOGRAD, "MulBackward0");
    cr_assert(strstr(ca_last_error(), "inplace operation"), "%s", ca_last_error());
    cr_assert(strstr(ca_last_error(), "version 1"), "%s", ca_last_error());
    cr_assert(strstr(ca_last_error(), "version 0"), "%s", ca_last_error());
    RELEASE(x, w, d, y, L);
}

Test(autograd, inplace_change_of_saved_output_is_detected) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){0, 1}, true), *y;
    TU_OK(ca_exp(x, &y));
    ca_tensor *L = sum_all(y);
    bool prev = ca_set_grad_enabled(false);
    TU_OK(ca_mul_scalar_(y, 2.0));
    TU_OK(ca_mul_scalar_(y, 0.5));
    ca_set_grad_enabled(prev);
    TU_FAILS(ca_backward(L), CA_STATUS_AUTOGRAD, "ExpBackward0");
    cr_assert(strstr(ca_last_error(), "version 2"), "%s", ca_last_error());
    cr_assert_null(ca_tensor_grad(x));
    RELEASE(x, y, L);
}

Test(autograd, inplace_change_through_a_view_is_detected) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3), true);
    ca_tensor *w = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3), false), *row;
    ca_tensor *y = mul(x, w), *L = sum_all(y);
    TU_OK(ca_select(w, 0, 1, &row)); /* w does not require grad: allowed in grad mode */
    TU_OK(ca_fill_(row, 0.0));
    TU_FAILS(ca_backward(L), CA_STATUS_AUTOGRAD, "MulBackward0");
    RELEASE(x, w, row, y, L);
}

Test(autograd, inplace_change_through_detached_alias_is_detected) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){0, 1}, true), *y, *d;
    TU_OK(ca_exp(x, &y));
    ca_tensor *L = sum_all(y);
    TU_OK(ca_tensor_detach(y, &d)); /* shares the version counter, as in PyTorch */
    TU_OK(ca_fill_(d, 1.0));
    TU_FAILS(ca_backward(L), CA_STATUS_AUTOGRAD, "ExpBackward0");
    RELEASE(x, y, d, L);
}

Test(autograd, unrelated_inplace_change_is_fine) {
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *w = vec(CA_FLOAT64, 2, (double[]){3, 4}, true);
    ca_tensor *u = vec(CA_FLOAT64, 2, (double[]){0, 0}, false);
    ca_tensor *y = mul(x, w), *s = add(x, w), *L1 = sum_all(y), *L2 = sum_all(s);
    ca_tensor *L = add(L1, L2);
    TU_OK(ca_fill_(u, 5.0)); /* not in the graph at all */
    TU_OK(ca_backward(L));
    assert_grad(x, (double[]){4, 5}, 0);
    RELEASE(x, w, u, y, s, L1, L2, L);
}

Test(autograd, inplace_change_of_saved_but_unneeded_tensor_is_fine) {
    /* w needs no gradient, so x (saved for w's gradient only) is never read */
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *w = vec(CA_FLOAT64, 2, (double[]){3, 4}, false);
    ca_tensor *y = mul(x, w), *L = sum_all(y);
    bool prev = ca_set_grad_enabled(false);
    TU_OK(ca_mul_scalar_(x, 10));
    ca_set_grad_enabled(prev);
    TU_OK(ca_backward(L));
    assert_grad(x, (double[]){3, 4}, 0);
    RELEASE(x, w, y, L);
}

Test(autograd, inplace_change_of_unsaved_input_is_fine) {
    /* add saves no tensors, so changing its input after the forward is harmless */
    ca_tensor *x = vec(CA_FLOAT64, 2, (double[]){1, 2}, true);
    ca_tensor *w = vec(CA_FLOAT64, 2, (double[]){3, 4}, true);
    ca_tensor *y = add(x, w), *L = sum_all(y);
    bool prev = ca_set_grad_enabled(false);
    TU_OK(ca_mul_scalar_(w, 10));
    ca_set_grad_enabled(prev);
    TU_OK(ca_backward(L));
    assert_grad(w, (double[]){1, 1}, 0);
    RELEASE(x, w, y, L);
}

/* ---------------------------------------------------------------------------------------
 * Forward graphs
 */
Test(autograd, graph_break_opens_the_next_forward_graph) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(3), true), *a, *b, *c;
    int g0 = ca_forward_graph_id();
    TU_OK(ca_exp(x, &a));
    TU_OK(ca_graph_break("print(a)"));
    cr_assert_eq(ca_forward_graph_id(), g0 + 1);
    cr_assert_str_eq(ca_graph_break_last_reason(), "print(a)");
    TU_OK(ca_mul(a, a, &b));
    TU_OK(ca_graph_break(NULL));
    TU_OK(ca_sum(b, 0, NULL, false, &c));
    cr_assert_eq(ca_tensor_forward_graph_id(a), g0);
    cr_assert_eq(ca_tensor_forward_graph_id(b), g0 + 1);
    cr_assert_eq(ca_tensor_forward_graph_id(c), g0 + 2);
    cr_assert_eq(ca_tensor_forward_graph_id(x), -1, "a leaf belongs to no forward graph");
    /* a backward across the three forward graphs still reaches the leaf */
    TU_OK(ca_backward(c));
    cr_assert_not_null(ca_tensor_grad(x));
    tu_release_n((ca_tensor *[]){x, a, b, c}, 4);
}
