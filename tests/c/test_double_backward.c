/* test_double_backward.c - create_graph: gradients that are differentiable again.
 *
 *  - the generic pointwise row's derivative table (ops_pw_deriv.c) has an entry for every
 *    kernel op of KERN_PW_OPS, and each derivative is checked against finite differences;
 *  - the engine: higher orders, .grad with a history, PyTorch's errors, no reference cycle,
 *    compiled autograd running a create_graph backward eagerly (counted);
 *  - a custom function's saved output keeps its history (ca_custom_saved_output).
 * The gradgradchecks of the op table's rows are in test_double_backward_ops.c.
 */
#include <math.h>
#include <string.h>

#include "gradgrad.h"
#include "autograd/internal.h"

/* ---------------------------------------------------------------------------------------
 * The generic pointwise row: every kernel op has an entry, and each derivative is right
 */
Test(double_backward, pw_table_covers_every_kernel_op) {
    int n = 0;
#define CHECK_ENTRY(NAME, AR, NP, FL, VEC, REF)                                                    \
    cr_assert(cai_pw_deriv_entry(KPW_##NAME) != 0,                                                 \
              "kernel op " #NAME " has no derivative entry in ops_pw_deriv.c");                    \
    n++;
    KERN_PW_OPS(CHECK_ENTRY)
#undef CHECK_ENTRY
    cr_assert_eq(n, KPW__COUNT);
    cr_assert(cai_pw_deriv_is_none(KPW_GT) && cai_pw_deriv_is_none(KPW_FLOOR));
    cr_assert(!cai_pw_deriv_is_none(KPW_TANH_BW));
}

/* Ops defined (or smooth) on positive inputs only: they get [0.2, 0.8], the others
 * +-[0.2, 0.8]. */
static bool positive_only(kern_pw_op op) {
    static const kern_pw_op pos[] = {KPW_LOG,        KPW_SQRT,  KPW_RSQRT,    KPW_LOG2,
                                     KPW_LOG10,      KPW_ACOSH, KPW_LOGIT,    KPW_LOGIT_BW,
                                     KPW_POW,        KPW_POW_S, KPW_POW_S_BW, KPW_POW_BW_BASE,
                                     KPW_POW_BW_EXP, KPW_XLOGY, KPW_FMOD,     KPW_REMAINDER};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i] == op)
            return true;
    return false;
}

static void pw_params(kern_pw_op op, double *p0, double *p1) {
    *p0 = 0.7, *p1 = 0.0;
    switch (op) {
    case KPW_SOFTPLUS:
    case KPW_SOFTPLUS_BW: *p0 = 1.3, *p1 = 20; break;
    case KPW_CLAMP: *p0 = -0.5, *p1 = 0.5; break;
    case KPW_CLAMP_BW:
    case KPW_HARDTANH_BW: *p0 = -1, *p1 = 1; break;
    case KPW_LOGIT:
    case KPW_LOGIT_BW: *p0 = NAN, *p1 = NAN; break;
    case KPW_ELU:
    case KPW_ELU_BW: *p0 = 1.3, *p1 = 1.1; break;
    case KPW_CELU:
    case KPW_CELU_BW: *p0 = 1.3, *p1 = 1 / 1.3; break;
    case KPW_POW_S:
    case KPW_POW_S_BW: *p0 = 2.5; break;
    case KPW_RPOW_S: *p0 = 1.7; break;
    case KPW_MAX_S:
    case KPW_MIN_S:
    case KPW_LEAKY_RELU:
    case KPW_LEAKY_RELU_BW: *p0 = 0.1; break;
    default: break;
    }
}

typedef struct {
    kern_pw_op op;
    double p0, p1;
} pw_case;

static ca_status call_pw(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    const pw_case *c = ctx;
    ca_attrs a = {.i = {c->op}, .s = {c->p0, c->p1}};
    return cai_op_call(CA_OP_PW, cai_kern_pw_arity(c->op), in, &a, out, NULL);
}

/* input k of op: a condition alternates 0 and 1; the others are drawn from the domain */
static ca_tensor *pw_input(kern_pw_op op, int k, bool rg) {
    if (k == cai_kern_pw_cond_input(op))
        return tu_from(CA_FLOAT64, TU_SHAPE(2, 3), (double[]){1, 0, 0, 1, 1, 0}, false);
    ca_tensor *t = tu_uniform(CA_FLOAT64, TU_SHAPE(2, 3), 0.2, 0.8, false);
    double *d = ca_tensor_data(t);
    for (int i = 0; i < 6; i++) {
        if (!positive_only(op) && i % 2)
            d[i] = -d[i];
        if (op == KPW_ACOSH)
            d[i] += 1.0;
    }
    ca_tensor_set_requires_grad(t, rg);
    return t;
}

Test(double_backward, pw_derivative_of_every_kernel_op_gradchecks) {
    int checked = 0;
    for (int op = 0; op < KPW__COUNT; op++) {
        if (cai_pw_deriv_entry((kern_pw_op)op) != 1)
            continue;
        pw_case c = {.op = (kern_pw_op)op};
        pw_params(c.op, &c.p0, &c.p1);
        int arity = cai_kern_pw_arity(c.op);
        ca_tensor *in[3] = {0};
        for (int k = 0; k < arity; k++)
            in[k] = pw_input(c.op, k, k != cai_kern_pw_cond_input(c.op));
        tu_gradcheck(call_pw, arity, in, &c, 1e-6, 1e-5);
        tu_release_n(in, arity);
        checked++;
    }
    cr_assert_geq(checked, 100);
}

/* ---------------------------------------------------------------------------------------
 * The engine
 */
/* y = sum(x^3): dy/dx = 3x^2 with a history; d(sum 3x^2)/dx = 6x; third order 6 */
Test(double_backward, grad_create_graph_gives_higher_orders) {
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(3), (double[]){1, -2, 0.5}, true);
    ca_tensor *c = NULL, *y = NULL, *g = NULL, *gs = NULL, *h = NULL, *hs = NULL, *k = NULL;
    TU_OK(ca_pow_scalar(x, 3.0, &c));
    TU_OK(ca_sum(c, 0, NULL, false, &y));
    ca_grad_options o = {.create_graph = true};
    TU_OK(ca_grad(1, &y, 1, &x, &o, &g));
    cr_assert(ca_tensor_grad_fn(g) != NULL, "the gradient has a history");
    tu_assert_values(g, (double[]){3, 12, 0.75}, 1e-12);
    TU_OK(ca_sum(g, 0, NULL, false, &gs));
    TU_OK(ca_grad(1, &gs, 1, &x, &o, &h));
    tu_assert_values(h, (double[]){6, -12, 3}, 1e-12);
    TU_OK(ca_sum(h, 0, NULL, false, &hs));
    TU_OK(ca_grad(1, &hs, 1, &x, NULL, &k));
    tu_assert_values(k, (double[]){6, 6, 6}, 1e-12);
    cr_assert(ca_tensor_grad_fn(k) == NULL, "without create_graph: no history");
    tu_release_n((ca_tensor *[]){x, c, y, g, gs, h, hs, k}, 8);
}

Test(double_backward, gradient_without_create_graph_is_not_differentiable) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(3), true), *y = NULL, *s = NULL, *g = NULL,
              *gs = NULL, *h = NULL;
    TU_OK(ca_tanh(x, &y));
    TU_OK(ca_sum(y, 0, NULL, false, &s));
    TU_OK(ca_grad(1, &s, 1, &x, NULL, &g));
    cr_assert(!ca_tensor_requires_grad(g));
    TU_OK(ca_sum(g, 0, NULL, false, &gs));
    TU_FAILS(ca_grad(1, &gs, 1, &x, NULL, &h), CA_STATUS_AUTOGRAD, "does not require grad");
    tu_release_n((ca_tensor *[]){x, y, s, g, gs}, 5);
}

/* backward(create_graph): .grad is CopyBackwards of the gradient, then .grad + g out of
 * place (AddBackward0), as PyTorch; the leaf and its .grad hold each other until .grad is
 * cleared (PyTorch warns of the same cycle), so the test clears it. */
Test(double_backward, backward_create_graph_grad_has_history) {
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){1, 2}, true);
    ca_backward_options o = {.create_graph = true};
    for (int round = 0; round < 2; round++) {
        ca_tensor *c = NULL, *y = NULL;
        TU_OK(ca_pow_scalar(x, 3.0, &c));
        TU_OK(ca_sum(c, 0, NULL, false, &y));
        TU_OK(ca_backward_ex(y, &o));
        ca_node *fn = ca_tensor_grad_fn(ca_tensor_grad(x));
        cr_assert_str_eq(ca_node_name(fn), round == 0 ? "CopyBackwards" : "AddBackward0");
        tu_release_n((ca_tensor *[]){c, y}, 2);
    }
    tu_assert_values(ca_tensor_grad(x), (double[]){6, 24}, 1e-12);
    ca_tensor *gs = NULL, *h = NULL;
    TU_OK(ca_sum(ca_tensor_grad(x), 0, NULL, false, &gs));
    TU_OK(ca_grad(1, &gs, 1, &x, NULL, &h));
    tu_assert_values(h, (double[]){12, 24}, 1e-12); /* d/dx of 2 * 3x^2 */
    TU_OK(ca_tensor_set_grad(x, NULL));
    tu_release_n((ca_tensor *[]){x, gs, h}, 3);
}

/* Under create_graph a .grad someone holds is never written: with no gradient requiring
 * grad, the second backward still makes a new .grad (PyTorch's AccumulateGrad with grad
 * mode on), where a plain backward adds in place. */
Test(double_backward, create_graph_accumulates_out_of_place) {
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){1, 2}, false);
    ca_tensor *w = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){3, 4}, true);
    for (int create = 0; create < 2; create++) {
        ca_backward_options o = {.create_graph = create, .retain_graph = true};
        ca_tensor *y = NULL, *s = NULL;
        TU_OK(ca_mul(x, w, &y)); /* d/dw = x: no gradient requires grad */
        TU_OK(ca_sum(y, 0, NULL, false, &s));
        TU_OK(ca_backward_ex(s, &o));
        ca_tensor *first = ca_tensor_retain(ca_tensor_grad(w));
        TU_OK(ca_backward_ex(s, &o));
        cr_assert_eq(ca_tensor_grad(w) == first, !create);
        tu_assert_values(first, create ? (double[]){1, 2} : (double[]){2, 4}, 0);
        tu_assert_values(ca_tensor_grad(w), (double[]){2, 4}, 0);
        TU_OK(ca_tensor_set_grad(w, NULL));
        tu_release_n((ca_tensor *[]){y, s, first}, 3);
    }
    tu_release_n((ca_tensor *[]){x, w}, 2);
}

/* cumprod_backward, the kernel of cumprod's first derivative, is not differentiated again
 * (a double backward builds cumprod's derivative from differentiable ops instead); reached
 * anyway, it fails naming itself, PyTorch's "the derivative for 'X' is not implemented". */
Test(double_backward, row_without_second_derivative_names_the_op) {
    ca_tensor *x = tu_uniform(CA_FLOAT64, TU_SHAPE(5), 0.5, 1.5, true), *y = NULL, *d = NULL;
    ca_tensor *g = tu_randn(CA_FLOAT64, TU_SHAPE(5), true), *loss = NULL;
    TU_OK(ca_cumprod(x, 0, &y));
    ca_attrs a = {.i = {0}};
    TU_OK(cai_op_call(CA_OP_CUMPROD_BACKWARD, 3, (ca_tensor *[]){x, y, g}, &a, &d, NULL));
    cr_assert(ca_tensor_requires_grad(d), "recorded, so that a backward reaches it");
    TU_OK(ca_sum(d, 0, NULL, false, &loss));
    TU_FAILS(ca_backward(loss), CA_STATUS_AUTOGRAD, "'cumprod_backward' is not implemented");
    tu_release_n((ca_tensor *[]){x, y, d, g, loss}, 5);
}

/* Under compiled autograd, ca_grad with create_graph is captured: its gradient comes from
 * a compiled graph and is the output of a CompiledAutogradBackward0 node, whose backward the
 * next ca_grad traces into a second compiled graph. Both hit the cache from then on. */
Test(double_backward, compiled_autograd_captures_ca_grad_with_create_graph) {
    ca_compiled_autograd_reset();
    TU_OK(ca_compiled_autograd_enable(NULL));
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){1, 2}, true);
    for (int step = 0; step < 2; step++) {
        ca_tensor *y = NULL, *s = NULL, *g = NULL, *gs = NULL, *h = NULL;
        TU_OK(ca_tanh(x, &y));
        TU_OK(ca_sum(y, 0, NULL, false, &s));
        ca_grad_options o = {.create_graph = true};
        TU_OK(ca_grad(1, &s, 1, &x, &o, &g));
        ca_compiled_counters c;
        ca_compiled_autograd_counters(&c);
        cr_assert_eq(c.eager_fallbacks, 0);
        cr_assert_eq(c.captures + c.cache_hits, 2 * step + 1);
        cr_assert(ca_tensor_requires_grad(g));
        const ca_custom_function *fn = ca_tensor_grad_fn_custom(g);
        cr_assert(fn && strcmp(fn->name, "CompiledAutogradBackward0") == 0);
        TU_OK(ca_sum(g, 0, NULL, false, &gs));
        TU_OK(ca_grad(1, &gs, 1, &x, NULL, &h)); /* through the node's traced backward */
        ca_compiled_autograd_counters(&c);
        cr_assert_eq(c.captures, 2);
        cr_assert_eq(c.custom_traced, 1);
        cr_assert_eq(c.cache_hits, 2 * step);
        for (int i = 0; i < 2; i++) { /* tanh' = 1 - tanh^2, tanh'' = -2 tanh (1 - tanh^2) */
            double t = tanh(tu_get(x, i));
            cr_assert_float_eq(tu_get(g, i), 1 - t * t, 1e-12);
            cr_assert_float_eq(tu_get(h, i), -2 * t * (1 - t * t), 1e-12);
        }
        tu_release_n((ca_tensor *[]){y, s, g, gs, h}, 5);
    }
    TU_OK(ca_compiled_autograd_disable());
    ca_tensor_release(x);
}

/* ca_backward_ex with create_graph is captured too, with static sizes and with dynamic=true:
 * .grad is a CopyBackwards copy of the compiled gradient, which a second backward
 * differentiates. */
Test(double_backward, compiled_autograd_captures_backward_into_grad) {
    for (int dynamic = 0; dynamic < 2; dynamic++) {
        ca_compiled_autograd_reset();
        ca_compiled_options opts = {.dynamic = dynamic};
        TU_OK(ca_compiled_autograd_enable(&opts));
        ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){1, 2}, true);
        ca_tensor *y = NULL, *s = NULL, *gs = NULL;
        TU_OK(ca_tanh(x, &y));
        TU_OK(ca_sum(y, 0, NULL, false, &s));
        ca_backward_options o = {.create_graph = true};
        TU_OK(ca_backward_ex(s, &o));
        ca_compiled_counters c;
        ca_compiled_autograd_counters(&c);
        cr_assert_eq(c.eager_fallbacks, 0);
        cr_assert_eq(c.captures, 1);
        cr_assert_str_eq(ca_tensor_grad_fn_name(ca_tensor_grad(x)), "CopyBackwards");
        TU_OK(ca_sum(ca_tensor_grad(x), 0, NULL, false, &gs));
        TU_OK(ca_tensor_set_grad(x, NULL)); /* the leaf and its .grad hold each other */
        TU_OK(ca_backward(gs));
        for (int i = 0; i < 2; i++) { /* tanh'' = -2 tanh (1 - tanh^2) */
            double t = tanh(tu_get(x, i));
            cr_assert_float_eq(tu_get(ca_tensor_grad(x), i), -2 * t * (1 - t * t), 1e-12);
        }
        TU_OK(ca_compiled_autograd_disable());
        tu_release_n((ca_tensor *[]){x, y, s, gs}, 4);
    }
}

/* ---------------------------------------------------------------------------------------
 * A C custom function that saves its own output (y = exp(x), dy = g * y): read through
 * ca_custom_saved_output, it is differentiable again
 */
static ca_status exp_backward(void *ctx, int n_out, ca_tensor *const *gout, int n_in,
                              ca_tensor **gin) {
    (void)n_out, (void)n_in;
    ca_tensor *y = NULL;
    CA_CHECK(ca_custom_saved_output(ctx, 0, &y));
    ca_status st = ca_mul(gout[0], y, &gin[0]);
    ca_tensor_release(y);
    return st;
}

static void release_ctx(void *ctx) {
    ca_tensor_release(ctx);
}

static ca_status custom_exp(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    (void)ctx;
    ca_tensor *y = NULL, *saved = NULL;
    bool prev = ca_set_grad_enabled(false);
    ca_status st = ca_exp(in[0], &y);
    ca_set_grad_enabled(prev);
    if (st == CA_OK)
        st = ca_tensor_detach(y, &saved);
    ca_custom_function fn = {.name = "ExpBackward",
                             .key = 77,
                             .backward = exp_backward,
                             .ctx = saved,
                             .ctx_free = release_ctx};
    if (st == CA_OK)
        st = ca_custom_apply(&fn, 1, in, 1, &y, NULL, out);
    else
        ca_tensor_release(saved);
    ca_tensor_release(y);
    return st;
}

Test(double_backward, custom_function_saved_output_gradgradcheck) {
    ca_tensor *x = tu_uniform(CA_FLOAT64, TU_SHAPE(5), -1, 1, true), *y = NULL;
    gradgradcheck_falls_back(custom_exp, 1, &x, NULL, 1e-5, 1e-4,
                             "create_graph through a custom function is not captured");
    TU_FAILS(ca_custom_saved_output(x, 0, &y), CA_STATUS_INVALID, "outside a custom");
    ca_tensor_release(x);
}

/* The scalar forms, minimum, fmod and remainder (a / b away from an integer, where they
 * are smooth), view, transpose and linear without bias on 3-D input (_unsafe_view). */
