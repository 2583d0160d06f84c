/* test_alloc_fail.c - suite `oom`: allocation failure injection.
 *
 * A counting allocator (ca_set_allocator) fails exactly the Nth allocation and succeeds
 * again afterwards. Each scenario (a small MLP's forward and backward, ca_grad, hook
 * registration, tensor creation, views) is first run cleanly to count its K allocations;
 * then, for every N in 1..K, it is run with the Nth allocation failing. Each run must
 * fail with CA_STATUS_NOMEM and an "out of memory" message (or, if the failure was
 * absorbed, still give the right answer), leave no allocation alive once everything is
 * released (allocs minus frees, a leak check that works without LeakSanitizer), and leave
 * the library working: a clean run right after gives the reference result.
 */
#include "testutil.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * The failing allocator: testutil's counting allocator, plus the injection window
 */
static atomic_int fa_armed;   /* between fa_arm and fa_disarm */
static atomic_long fa_window; /* allocations between the last fa_arm and fa_disarm */

/* Install before making any tensor: every later allocation is counted. */
static void fa_install(void) {
    ca_set_num_threads(1); /* allocation order must not depend on scheduling */
    tu_alloc_install();
}

/* Count from zero again and fail the nth allocation from now (0: none). */
static void fa_arm(long n) {
    atomic_store(&fa_armed, 1);
    tu_alloc_arm(n);
}

/* End the injection window; its allocation count is what every_allocation walks. */
static void fa_disarm(void) {
    tu_alloc_disarm();
    if (atomic_exchange(&fa_armed, 0))
        atomic_store(&fa_window, tu_alloc_count());
}

static void fa_uninstall(void) {
    fa_disarm();
    tu_alloc_uninstall();
}

/* ---------------------------------------------------------------------------------------
 * Driving a scenario through every failure point
 *
 * A scenario does its work, checks its result when it succeeds (cr_assert), releases
 * everything it made, and returns the status of its first failing call. It arms the
 * allocator itself (with `fail_at`) at the point where injection should start, so it may
 * prepare inputs without failures first.
 */
typedef ca_status (*scenario_fn)(void *ctx, long fail_at);

static void check_failure(const char *name, long n, ca_status st, scenario_fn fn, void *ctx,
                          long baseline) {
    bool failed = tu_alloc_failed();
    fa_disarm();
    cr_assert(failed, "%s: allocation %ld of the counted run never happened", name, n);
    if (st != CA_OK) {
        cr_assert_eq(st, CA_STATUS_NOMEM, "%s: allocation %ld failed but the call returned %s: %s",
                     name, n, ca_status_name(st), ca_last_error());
        cr_assert(strstr(ca_last_error(), "out of memory"), "%s: allocation %ld: message \"%s\"",
                  name, n, ca_last_error());
    }
    /* st == CA_OK: the failure was absorbed; the scenario has checked its result */
    long leaked = tu_alloc_live() - baseline;
    cr_assert_eq(leaked, 0, "%s: after failing allocation %ld, %ld allocations leaked", name, n,
                 leaked);
    /* the library still works: a clean run right after gives the reference result */
    ca_status again = fn(ctx, 0);
    cr_assert_eq(again, CA_OK, "%s: clean run after failing allocation %ld: %s", name, n,
                 ca_last_error());
    cr_assert_eq(tu_alloc_live(), baseline, "%s: the clean run leaked", name);
}

/* Returns K, the number of allocations of a clean run. */
static long every_allocation(const char *name, scenario_fn fn, void *ctx) {
    long baseline = tu_alloc_live(); /* inputs the caller made before */
    ca_status st = fn(ctx, 0);       /* warm-up: first-use work happens here */
    cr_assert_eq(st, CA_OK, "%s: clean run: %s", name, ca_last_error());
    cr_assert_eq(tu_alloc_live(), baseline, "%s: the clean run leaked %ld allocations", name,
                 tu_alloc_live() - baseline);
    st = fn(ctx, 0);
    cr_assert_eq(st, CA_OK, "%s: clean run: %s", name, ca_last_error());
    long k = atomic_load(&fa_window);
    cr_assert_gt(k, 0, "%s: no allocation to fail", name);
    for (long n = 1; n <= k; n++) {
        ca_error_clear();
        st = fn(ctx, n);
        check_failure(name, n, st, fn, ctx, baseline);
    }
    cr_log_info("%s: failed each of %ld allocations in turn", name, k);
    return k;
}

/* First failing status of a sequence of steps: `STEP(st, call)` runs call only while st
 * is still CA_OK. */
#define STEP(st, call)                                                                             \
    do {                                                                                           \
        if ((st) == CA_OK)                                                                         \
            (st) = (call);                                                                         \
    } while (0)

/* ---------------------------------------------------------------------------------------
 * The MLP: x[4,3] -> linear(w1[5,3], b1[5]) -> relu -> linear(w2[2,5]) -> cross_entropy
 */
enum { P_W1, P_B1, P_W2, N_PARAMS };
static const int64_t param_numel[N_PARAMS] = {15, 5, 10};

typedef struct {
    ca_tensor *x, *w1, *b1, *w2, *t;
} mlp_inputs;

typedef struct {
    bool prebuilt; /* inputs made once, outside the failure window */
    mlp_inputs in; /* the prebuilt inputs */
    bool have_ref;
    double ref[N_PARAMS][15]; /* reference gradients */
    ca_reduction reduction;
    bool use_mse;
} mlp_ctx;

static void fill_values(double *v, int n, double scale, double shift) {
    for (int i = 0; i < n; i++)
        v[i] = scale * sin(1.7 * i + shift);
}

static ca_status make_inputs(mlp_inputs *m) {
    double x[12], w1[15], b1[5], w2[10];
    fill_values(x, 12, 1.0, 0.3);
    fill_values(w1, 15, 0.6, 1.1);
    fill_values(b1, 5, 0.1, 2.0);
    fill_values(w2, 10, 0.5, 0.7);
    int64_t t[4] = {0, 1, 1, 0};
    *m = (mlp_inputs){0};
    ca_status st = CA_OK;
    STEP(st, ca_from_data(CA_FLOAT64, TU_SHAPE(4, 3), x, &m->x));
    STEP(st, ca_from_data(CA_FLOAT64, TU_SHAPE(5, 3), w1, &m->w1));
    STEP(st, ca_from_data(CA_FLOAT64, TU_SHAPE(5), b1, &m->b1));
    STEP(st, ca_from_data(CA_FLOAT64, TU_SHAPE(2, 5), w2, &m->w2));
    STEP(st, ca_from_data(CA_INT64, TU_SHAPE(4), t, &m->t));
    STEP(st, ca_tensor_set_requires_grad(m->w1, true));
    STEP(st, ca_tensor_set_requires_grad(m->b1, true));
    STEP(st, ca_tensor_set_requires_grad(m->w2, true));
    return st;
}

static void release_inputs(mlp_inputs *m) {
    tu_release_n((ca_tensor *[]){m->x, m->w1, m->b1, m->w2, m->t}, 5);
    *m = (mlp_inputs){0};
}

/* Forward to the scalar loss. *loss is NULL on failure; intermediates are released. */
static ca_status mlp_forward(mlp_ctx *c, mlp_inputs *m, ca_tensor **loss) {
    ca_tensor *h = NULL, *a = NULL, *y = NULL, *onehot = NULL;
    *loss = NULL;
    ca_status st = CA_OK;
    STEP(st, ca_linear(m->x, m->w1, m->b1, &h));
    STEP(st, ca_relu(h, &a));
    STEP(st, ca_linear(a, m->w2, NULL, &y));
    if (c->use_mse) {
        STEP(st, ca_full(CA_FLOAT64, TU_SHAPE(4, 2), 0.5, &onehot));
        STEP(st, ca_mse_loss(y, onehot, c->reduction, loss));
    } else {
        STEP(st, ca_cross_entropy(y, m->t, c->reduction, -100, loss));
    }
    tu_release_n((ca_tensor *[]){h, a, y, onehot}, 4);
    return st;
}

static void read_grads(ca_tensor *const *params, double out[N_PARAMS][15]) {
    for (int p = 0; p < N_PARAMS; p++) {
        const ca_tensor *g = ca_tensor_grad(params[p]);
        cr_assert_not_null(g, "parameter %d has no .grad after a successful backward", p);
        TU_OK(ca_tensor_copy_to(g, out[p], sizeof out[p]));
    }
}

static void compare_grads(const mlp_ctx *c, double got[N_PARAMS][15], const char *what) {
    for (int p = 0; p < N_PARAMS; p++)
        for (int i = 0; i < param_numel[p]; i++)
            cr_assert(fabs(got[p][i] - c->ref[p][i]) <= 1e-12 * (1 + fabs(c->ref[p][i])),
                      "%s: param %d grad[%d] = %.17g, reference %.17g", what, p, i, got[p][i],
                      c->ref[p][i]);
}

/* Check (or record, the first time) the gradients of a successful run. */
static void settle_grads(mlp_ctx *c, ca_tensor *const *params) {
    double got[N_PARAMS][15];
    read_grads(params, got);
    if (!c->have_ref) {
        memcpy(c->ref, got, sizeof got);
        c->have_ref = true;
    } else {
        compare_grads(c, got, "backward");
    }
}

static ca_status mlp_backward_scenario(void *vctx, long fail_at) {
    mlp_ctx *c = vctx;
    mlp_inputs local = {0}, *m = c->prebuilt ? &c->in : &local;
    ca_tensor *loss = NULL;
    ca_status st = CA_OK;
    if (!c->prebuilt) {
        fa_arm(fail_at);
        st = make_inputs(m);
    } else {
        fa_arm(fail_at);
    }
    STEP(st, mlp_forward(c, m, &loss));
    STEP(st, ca_backward(loss));
    fa_disarm();
    ca_tensor *params[N_PARAMS] = {m->w1, m->b1, m->w2};
    if (st == CA_OK)
        settle_grads(c, params);
    ca_tensor_release(loss);
    if (c->prebuilt) /* keep the inputs, drop their gradients */
        for (int p = 0; p < N_PARAMS; p++)
            TU_OK(ca_tensor_set_grad(params[p], NULL));
    else
        release_inputs(m);
    return st;
}

Test(oom, mlp_every_allocation_fails_inputs_included) {
    fa_install();
    mlp_ctx c = {.reduction = CA_REDUCTION_MEAN};
    long k = every_allocation("mlp (inputs in the loop)", mlp_backward_scenario, &c);
    cr_assert_gt(k, 20, "suspiciously few allocations: %ld", k);
    fa_uninstall();
}

Test(oom, mlp_every_allocation_fails_prebuilt_inputs) {
    fa_install();
    mlp_ctx c = {.prebuilt = true, .reduction = CA_REDUCTION_SUM};
    TU_OK(make_inputs(&c.in));
    every_allocation("mlp (prebuilt inputs)", mlp_backward_scenario, &c);
    release_inputs(&c.in);
    cr_assert_eq(tu_alloc_live(), 0);
    fa_uninstall();
}

Test(oom, mlp_mse_every_allocation_fails) {
    fa_install();
    mlp_ctx c = {.use_mse = true, .reduction = CA_REDUCTION_MEAN};
    every_allocation("mlp with mse_loss", mlp_backward_scenario, &c);
    fa_uninstall();
}

/* Same gradients with and without the counting allocator: it changes nothing. */
Test(oom, failures_do_not_change_later_results) {
    mlp_ctx plain = {.reduction = CA_REDUCTION_MEAN};
    TU_OK(mlp_backward_scenario(&plain, 0)); /* default allocator: the reference */
    fa_install();
    mlp_ctx c = {.reduction = CA_REDUCTION_MEAN};
    memcpy(c.ref, plain.ref, sizeof c.ref);
    c.have_ref = true;
    for (long n = 1; n <= 40; n += 3) { /* fail, then a clean run compares with plain */
        ca_status st = mlp_backward_scenario(&c, n);
        check_failure("mlp vs default allocator", n, st, mlp_backward_scenario, &c, 0);
    }
    fa_uninstall();
}

/* ---------------------------------------------------------------------------------------
 * ca_grad, and backward with retain_graph, failing inside the backward only
 */
typedef struct {
    mlp_ctx mlp;
    bool retain;   /* retain_graph, then rerun on the same graph after a failure */
    bool use_grad; /* ca_grad instead of ca_backward_ex */
} bw_ctx;

static ca_status run_backward_once(bw_ctx *c, ca_tensor *loss, ca_tensor *const *params,
                                   ca_tensor **grads) {
    if (c->use_grad) {
        ca_grad_options o = {.retain_graph = c->retain};
        return ca_grad(1, &loss, N_PARAMS, params, &o, grads);
    }
    ca_backward_options o = {.retain_graph = c->retain};
    return ca_backward_ex(loss, &o);
}

static void check_backward_result(bw_ctx *c, ca_tensor *const *params, ca_tensor **grads) {
    double got[N_PARAMS][15];
    if (c->use_grad) {
        for (int p = 0; p < N_PARAMS; p++) {
            cr_assert_not_null(grads[p]);
            TU_OK(ca_tensor_copy_to(grads[p], got[p], sizeof got[p]));
            cr_assert_null(ca_tensor_grad(params[p]), "ca_grad touched .grad");
        }
    } else {
        read_grads(params, got);
    }
    if (!c->mlp.have_ref) {
        memcpy(c->mlp.ref, got, sizeof got);
        c->mlp.have_ref = true;
    }
    compare_grads(&c->mlp, got, c->use_grad ? "ca_grad" : "backward");
}

static ca_status backward_only_scenario(void *vctx, long fail_at) {
    bw_ctx *c = vctx;
    mlp_inputs m;
    ca_tensor *loss = NULL, *grads[N_PARAMS] = {0};
    TU_OK(make_inputs(&m));
    TU_OK(mlp_forward(&c->mlp, &m, &loss));
    ca_tensor *params[N_PARAMS] = {m.w1, m.b1, m.w2};
    fa_arm(fail_at);
    ca_status st = run_backward_once(c, loss, params, grads);
    fa_disarm();
    if (st != CA_OK) {
        for (int p = 0; p < N_PARAMS; p++)
            cr_assert_null(grads[p], "ca_grad left a result after failing");
        if (c->retain) { /* the graph survived: clear partial .grads and go again */
            for (int p = 0; p < N_PARAMS; p++)
                TU_OK(ca_tensor_set_grad(params[p], NULL));
            TU_OK(run_backward_once(c, loss, params, grads));
            check_backward_result(c, params, grads);
        }
    } else {
        check_backward_result(c, params, grads);
    }
    tu_release_n(grads, N_PARAMS);
    ca_tensor_release(loss);
    release_inputs(&m);
    return st;
}

Test(oom, grad_every_allocation_fails) {
    fa_install();
    bw_ctx c = {.mlp.reduction = CA_REDUCTION_MEAN, .use_grad = true};
    every_allocation("ca_grad", backward_only_scenario, &c);
    fa_uninstall();
}

Test(oom, grad_retain_graph_survives_failure) {
    fa_install();
    bw_ctx c = {.mlp.reduction = CA_REDUCTION_MEAN, .use_grad = true, .retain = true};
    every_allocation("ca_grad (retain_graph)", backward_only_scenario, &c);
    fa_uninstall();
}

Test(oom, backward_retain_graph_survives_failure) {
    fa_install();
    bw_ctx c = {.mlp.reduction = CA_REDUCTION_MEAN, .retain = true};
    every_allocation("backward (retain_graph)", backward_only_scenario, &c);
    fa_uninstall();
}

/* ---------------------------------------------------------------------------------------
 * Hooks
 */
typedef struct {
    int calls, freed;
} hook_ctx;

static ca_status count_hook(ca_tensor *grad, ca_tensor **replacement, void *ctx) {
    (void)grad;
    (void)replacement;
    ((hook_ctx *)ctx)->calls++;
    return CA_OK;
}

static ca_status count_post(ca_tensor *leaf, void *ctx) {
    (void)leaf;
    ((hook_ctx *)ctx)->calls++;
    return CA_OK;
}

static void count_free(void *ctx) {
    ((hook_ctx *)ctx)->freed++;
}

/* Register a hook with fn (NULL post: a tensor hook); on failure its ctx_free must not
 * run, since a hook that failed to register never became the library's. */
static bool try_register(ca_status *st, ca_tensor *t, hook_ctx *h, bool post) {
    if (*st != CA_OK)
        return false;
    *st = post ? ca_tensor_register_post_accumulate_grad_hook(t, count_post, h, count_free, NULL)
               : ca_tensor_register_hook(t, count_hook, h, count_free, NULL);
    if (*st != CA_OK)
        cr_assert_eq(h->freed, 0, "ctx_free ran for a hook that failed to register");
    return *st == CA_OK;
}

static ca_status hook_scenario(void *vctx, long fail_at) {
    (void)vctx;
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(3), true), *y = NULL, *L = NULL;
    TU_OK(ca_exp(x, &y));
    hook_ctx first = {0}, h_leaf = {0}, h_mid = {0}, h_post = {0};
    TU_OK(ca_tensor_register_hook(x, count_hook, &first, count_free, NULL));
    fa_arm(fail_at);
    ca_status st = CA_OK;
    bool r_leaf = try_register(&st, x, &h_leaf, false);
    bool r_mid = try_register(&st, y, &h_mid, false);
    bool r_post = try_register(&st, x, &h_post, true);
    fa_disarm();
    char msg[1024]; /* the checks below run more calls; keep the failure's message */
    snprintf(msg, sizeof msg, "%s", ca_last_error());
    /* the hooks that did register, and the earlier one, run exactly once */
    TU_OK(ca_sum(y, 0, NULL, false, &L));
    TU_OK(ca_backward(L));
    cr_assert_eq(first.calls, 1);
    cr_assert_eq(h_leaf.calls, r_leaf ? 1 : 0);
    cr_assert_eq(h_mid.calls, r_mid ? 1 : 0);
    cr_assert_eq(h_post.calls, r_post ? 1 : 0);
    tu_release_n((ca_tensor *[]){x, y, L}, 3);
    cr_assert_eq(first.freed, 1);
    cr_assert_eq(h_leaf.freed + h_mid.freed + h_post.freed, (int)r_leaf + r_mid + r_post);
    if (st != CA_OK)
        ca_error_set(st, "%s", msg);
    return st;
}

Test(oom, hook_registration_fails_cleanly) {
    fa_install();
    every_allocation("hook registration", hook_scenario, NULL);
    fa_uninstall();
}

/* ---------------------------------------------------------------------------------------
 * Creation, views, detach, a recorded op
 */
static ca_status creation_scenario(void *vctx, long fail_at) {
    (void)vctx;
    ca_tensor *t[8] = {0};
    double data[6] = {1, 2, 3, 4, 5, 6};
    fa_arm(fail_at);
    ca_status st = CA_OK;
    STEP(st, ca_zeros(CA_FLOAT32, TU_SHAPE(2, 3), &t[0]));
    STEP(st, ca_randn(CA_FLOAT64, TU_SHAPE(5), &t[1]));
    STEP(st, ca_from_data(CA_FLOAT64, TU_SHAPE(2, 3), data, &t[2]));
    STEP(st, ca_arange(0, 10, 2, CA_INT64, &t[3]));
    STEP(st, ca_tensor_detach(t[2], &t[4]));
    STEP(st, ca_transpose(t[2], 0, 1, &t[5]));
    STEP(st, ca_empty(CA_FLOAT32, 0, NULL, &t[6]));
    STEP(st, ca_contiguous(t[5], &t[7]));
    fa_disarm();
    if (st == CA_OK) {
        cr_assert_eq(tu_get(t[7], 1), 4.0);
        cr_assert_eq(tu_get(t[3], 4), 8.0);
    } else {
        for (int i = 0; i < 8; i++)
            if (t[i] == NULL) { /* the failing call left NULL; nothing after it ran */
                for (int k = i + 1; k < 8; k++)
                    cr_assert_null(t[k]);
                break;
            }
    }
    tu_release_n(t, 8);
    return st;
}

Test(oom, creation_and_views_fail_cleanly) {
    fa_install();
    every_allocation("creation", creation_scenario, NULL);
    fa_uninstall();
}

static ca_status recorded_ops_scenario(void *vctx, long fail_at) {
    (void)vctx;
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6}, true);
    ca_tensor *o[7] = {0};
    fa_arm(fail_at);
    ca_status st = CA_OK;
    STEP(st, ca_exp(x, &o[0]));
    STEP(st, ca_mul(o[0], x, &o[1]));
    STEP(st, ca_transpose(o[1], 0, 1, &o[2]));
    STEP(st, ca_reshape(o[2], TU_SHAPE(6), &o[3])); /* a copy: o[2] is not contiguous */
    STEP(st, ca_softmax(o[3], 0, &o[4]));
    STEP(st, ca_tensor_retain_grad(o[4]));
    STEP(st, ca_mean(o[4], 0, NULL, false, &o[5]));
    STEP(st, ca_backward(o[5]));
    fa_disarm();
    if (st == CA_OK) {
        cr_assert_not_null(ca_tensor_grad(x));
        cr_assert_not_null(ca_tensor_grad(o[4]));
    }
    tu_release_n(o, 7);
    ca_tensor_release(x);
    return st;
}

Test(oom, recorded_ops_and_backward_fail_cleanly) {
    fa_install();
    every_allocation("recorded ops", recorded_ops_scenario, NULL);
    fa_uninstall();
}

Test(oom, default_allocator_restored) {
    fa_install();
    ca_allocator cur;
    ca_get_allocator(&cur);
    cr_assert_eq((void *)cur.alloc, (void *)tu_counting_alloc);
    fa_uninstall();
    ca_get_allocator(&cur);
    cr_assert_neq((void *)cur.alloc, (void *)tu_counting_alloc);
    ca_tensor *t;
    long before = tu_alloc_count();
    TU_OK(ca_ones(CA_FLOAT32, TU_SHAPE(3), &t)); /* works with the default again */
    cr_assert_eq(tu_alloc_count(), before, "the default allocator is in use");
    ca_tensor_release(t);
}

/* cagrad.h promises that in-place ops allocate nothing (so never fail with
 * CA_STATUS_NOMEM), and ca_tensor_copy_to and ca_tensor_item do not either. */
Test(oom, inplace_and_reads_allocate_nothing) {
    fa_install();
    ca_tensor *a = tu_randn(CA_FLOAT32, TU_SHAPE(64, 64), false);
    ca_tensor *b = tu_randn(CA_FLOAT32, TU_SHAPE(64), false);
    ca_tensor *one = tu_randn(CA_FLOAT32, TU_SHAPE(1), false);
    static float buf[64 * 64];
    double v;
    fa_arm(1); /* the first allocation would fail */
    TU_OK(ca_add_(a, b, 0.5));
    TU_OK(ca_mul_(a, b));
    TU_OK(ca_mul_scalar_(a, 2.0));
    TU_OK(ca_copy_(a, b));
    TU_OK(ca_fill_(a, 1.0));
    TU_OK(ca_zero_(a));
    TU_OK(ca_tensor_copy_to(a, buf, sizeof buf));
    TU_OK(ca_tensor_item(one, &v));
    fa_disarm();
    cr_assert_eq(tu_alloc_count(), 0, "%ld allocations", tu_alloc_count());
    ca_tensor_release(a);
    ca_tensor_release(b);
    ca_tensor_release(one);
    fa_uninstall();
}
