/* test_node_hooks.c - suite `node_hooks`: the graph-node API (ca_tensor_grad_fn,
 * ca_node_next, AccumulateGrad nodes) and node pre- and post-hooks, eager and compiled.
 *
 * Covered: names and next edges of a small graph; a pre-hook that scales a node's output
 * gradient; a post-hook that replaces a node's input gradient; hooks on AccumulateGrad
 * (before and after .grad is written); hooks on a custom function's node; the order of
 * tensor hooks and node pre-hooks; a hook returning a gradient of the wrong shape, or
 * failing; removal. Every case runs eagerly and compiled (no eager fallback), and must
 * agree with the closed form.
 */
#include "autograd/internal.h"
#include "testutil.h"

#include <string.h>

#define RELEASE(...)                                                                               \
    tu_release_n((ca_tensor *[]){__VA_ARGS__},                                                     \
                 (int)(sizeof((ca_tensor *[]){__VA_ARGS__}) / sizeof(ca_tensor *)))

typedef struct {
    double factor; /* multiply the gradient by it */
    int index;     /* which entry */
    int calls;
    int mode; /* 0: scale; 1: wrong shape; 2: fail; 3: record order */
    char *order;
} hook_state;

static ca_status scale_entry(ca_tensor **grads, hook_state *s) {
    s->calls++;
    if (s->mode == 2)
        return ca_error_set(CA_STATUS_INVALID, "node hook refuses");
    if (s->mode == 3) {
        strcat(s->order, "N");
        return CA_OK;
    }
    ca_tensor *g = grads[s->index], *r;
    if (!g)
        return CA_OK;
    if (s->mode == 1)
        TU_OK(ca_zeros(g->dtype, 1, (int64_t[]){g->shape[0] + 1}, &r));
    else
        TU_OK(ca_mul_scalar(g, s->factor, &r));
    ca_tensor_release(g);
    grads[s->index] = r;
    return CA_OK;
}

static ca_status pre_hook(int n_out, ca_tensor **grads, void *ctx) {
    cr_assert_geq(n_out, 1);
    return scale_entry(grads, ctx);
}

static ca_status post_hook(int n_in, ca_tensor **gin, int n_out, ca_tensor *const *gout,
                           void *ctx) {
    cr_assert_geq(n_out, 1);
    cr_assert_not_null(gout[0]);
    if (n_in == 0) { /* AccumulateGrad */
        ((hook_state *)ctx)->calls++;
        return CA_OK;
    }
    return scale_entry(gin, ctx);
}

static ca_status tensor_hook(ca_tensor *grad, ca_tensor **repl, void *ctx) {
    strcat(((hook_state *)ctx)->order, "T");
    return CA_OK;
}

/* loss = sum(3 * (x * w)) for x, w of shape [4]: d/dx = 3 w, d/dw = 3 x. */
typedef struct {
    ca_tensor *x, *w, *xw, *y, *loss;
} net;

static net net_make(void) {
    net n;
    n.x = tu_randn(CA_FLOAT32, TU_SHAPE(4), true);
    n.w = tu_randn(CA_FLOAT32, TU_SHAPE(4), true);
    TU_OK(ca_mul(n.x, n.w, &n.xw));
    TU_OK(ca_mul_scalar(n.xw, 3.0, &n.y));
    TU_OK(ca_sum(n.y, 0, NULL, false, &n.loss));
    return n;
}

static void net_free(net *n) {
    RELEASE(n->loss, n->y, n->xw, n->x, n->w);
}

static ca_status run(ca_tensor *loss, bool compiled) {
    if (compiled)
        TU_OK(ca_compiled_autograd_enable(NULL));
    ca_status st = ca_backward(loss);
    if (compiled)
        TU_OK(ca_compiled_autograd_disable());
    return st;
}

/* grad of x is k_x * 3 * w, of w is k_w * 3 * x */
static void assert_grads(const net *n, double kx, double kw) {
    for (int64_t i = 0; i < 4; i++) {
        cr_assert_float_eq(tu_get(n->x->grad, i), kx * 3 * tu_get(n->w, i), 1e-5);
        cr_assert_float_eq(tu_get(n->w->grad, i), kw * 3 * tu_get(n->x, i), 1e-5);
    }
}

static void check_fallbacks(bool compiled) {
    ca_compiled_counters c;
    ca_compiled_autograd_counters(&c);
    if (compiled)
        cr_assert_eq(c.eager_fallbacks, 0);
}

Test(node_hooks, graph_structure) {
    net n = net_make();
    ca_node *mul = ca_tensor_grad_fn(n.xw);
    cr_assert_str_eq(ca_node_name(ca_tensor_grad_fn(n.loss)), "SumBackward0");
    cr_assert_str_eq(ca_node_name(mul), "MulBackward0");
    cr_assert_eq(ca_node_n_next(mul), 2);
    int nr = -1;
    ca_node *acc = ca_node_next(mul, 0, &nr);
    cr_assert_str_eq(ca_node_name(acc), "AccumulateGrad");
    cr_assert_eq(ca_node_variable(acc), n.x);
    cr_assert_eq(nr, 0);
    ca_node *acc2;
    TU_OK(ca_tensor_grad_accumulator(n.x, &acc2));
    cr_assert_eq(acc, acc2, "a leaf has one AccumulateGrad node while it lives");
    ca_node_release(acc2);
    cr_assert_null(ca_tensor_grad_fn(n.x));
    ca_node *none;
    TU_FAILS(ca_tensor_grad_accumulator(n.y, &none), CA_STATUS_AUTOGRAD, "is not a leaf");
    net_free(&n);
}

Test(node_hooks, pre_and_post_hooks_eager_and_compiled) {
    ca_compiled_autograd_reset();
    for (int round = 0; round < 4; round++) {
        bool compiled = round >= 1;
        net n = net_make();
        hook_state pre = {.factor = 2.0}, post = {.factor = 5.0, .index = 1};
        ca_hook_handle h;
        TU_OK(ca_node_register_pre_hook(ca_tensor_grad_fn(n.xw), pre_hook, &pre, NULL, &h));
        TU_OK(ca_node_register_post_hook(ca_tensor_grad_fn(n.xw), post_hook, &post, NULL, NULL));
        TU_OK(run(n.loss, compiled));
        assert_grads(&n, 2.0, 10.0); /* the pre-hook scales both, the post-hook w's */
        cr_assert_eq(pre.calls, 1);
        cr_assert_eq(post.calls, 1);
        check_fallbacks(compiled);
        net_free(&n);
    }
    ca_compiled_counters c;
    ca_compiled_autograd_counters(&c);
    cr_assert_eq(c.captures, 1, "hooks are lifted by position: one capture, then hits");
    ca_compiled_autograd_reset();
}

Test(node_hooks, accumulate_grad_hooks) {
    for (int compiled = 0; compiled < 2; compiled++) {
        net n = net_make();
        ca_node *acc;
        TU_OK(ca_tensor_grad_accumulator(n.w, &acc));
        hook_state pre = {.factor = 0.5}, post = {0};
        TU_OK(ca_node_register_pre_hook(acc, pre_hook, &pre, NULL, NULL));
        TU_OK(ca_node_register_post_hook(acc, post_hook, &post, NULL, NULL));
        TU_OK(run(n.loss, compiled));
        assert_grads(&n, 1.0, 0.5);
        cr_assert_eq(post.calls, 1, "the post-hook runs after .grad is written");
        check_fallbacks(compiled);
        ca_node_release(acc);
        net_free(&n);
    }
    ca_compiled_autograd_reset();
}

Test(node_hooks, tensor_hooks_run_before_node_pre_hooks) {
    for (int compiled = 0; compiled < 2; compiled++) {
        net n = net_make();
        char order[16] = "";
        hook_state node = {.mode = 3, .order = order}, tensor = {.order = order};
        TU_OK(ca_node_register_pre_hook(ca_tensor_grad_fn(n.xw), pre_hook, &node, NULL, NULL));
        TU_OK(ca_tensor_register_hook(n.xw, tensor_hook, &tensor, NULL, NULL));
        TU_OK(run(n.loss, compiled));
        cr_assert_str_eq(order, "TN");
        net_free(&n);
    }
    ca_compiled_autograd_reset();
}

Test(node_hooks, bad_hooks_fail_and_the_next_backward_works) {
    for (int compiled = 0; compiled < 2; compiled++) {
        for (int mode = 1; mode <= 2; mode++) {
            net n = net_make();
            hook_state bad = {.factor = 1.0, .mode = mode};
            ca_hook_handle h;
            TU_OK(ca_node_register_post_hook(ca_tensor_grad_fn(n.xw), post_hook, &bad, NULL, &h));
            if (mode == 1)
                TU_FAILS(run(n.loss, compiled), CA_STATUS_HOOK, "must keep each gradient's shape");
            else
                TU_FAILS(run(n.loss, compiled), CA_STATUS_INVALID, "node hook refuses");
            net_free(&n);
        }
        net n = net_make(); /* and then all is well */
        TU_OK(run(n.loss, compiled));
        assert_grads(&n, 1.0, 1.0);
        net_free(&n);
    }
    ca_compiled_autograd_reset();
}

Test(node_hooks, remove) {
    net n = net_make();
    hook_state pre = {.factor = 2.0};
    ca_hook_handle h;
    ca_node *mul = ca_tensor_grad_fn(n.xw);
    TU_OK(ca_node_register_pre_hook(mul, pre_hook, &pre, NULL, &h));
    TU_OK(ca_node_remove_hook(mul, h));
    TU_FAILS(ca_node_remove_hook(mul, h), CA_STATUS_INVALID, "no hook with handle");
    TU_OK(ca_backward(n.loss));
    assert_grads(&n, 1.0, 1.0);
    cr_assert_eq(pre.calls, 0);
    net_free(&n);
}

/* A hook that tries to remove a hook (itself, or another) from inside its own call. */
typedef struct {
    ca_tensor *t;
    ca_hook_handle target;
    ca_status got;
    int calls;
} removing_state;

static ca_status removing_hook(ca_tensor *grad, ca_tensor **repl, void *ctx) {
    (void)grad, (void)repl;
    removing_state *s = ctx;
    s->calls++;
    s->got = ca_tensor_remove_hook(s->t, s->target);
    ca_error_clear();
    return CA_OK;
}

static ca_status counting_hook(ca_tensor *grad, ca_tensor **repl, void *ctx) {
    (void)grad, (void)repl;
    ++*(int *)ctx;
    return CA_OK;
}

/* A running hook cannot be removed (its entry would be freed under its own call); one that
 * is not running can, and the backward goes on. */
Test(node_hooks, a_hook_cannot_remove_itself_while_it_runs) {
    for (int self = 0; self < 2; self++) {
        net n = net_make();
        removing_state rs = {.t = n.xw};
        int other_calls = 0;
        ca_hook_handle h_rm, h_other;
        TU_OK(ca_tensor_register_hook(n.xw, removing_hook, &rs, NULL, &h_rm));
        TU_OK(ca_tensor_register_hook(n.xw, counting_hook, &other_calls, NULL, &h_other));
        rs.target = self ? h_rm : h_other;
        TU_OK(ca_backward(n.loss));
        cr_assert_eq(rs.calls, 1);
        if (self) {
            cr_assert_eq(rs.got, CA_STATUS_INVALID, "removing itself must be refused");
            cr_assert_eq(other_calls, 1);
            TU_OK(ca_tensor_remove_hook(n.xw, h_rm)); /* after the backward it can */
        } else {
            cr_assert_eq(rs.got, CA_OK, "removing a hook that is not running works");
            cr_assert_eq(other_calls, 0, "the removed hook did not run");
        }
        net_free(&n);
    }
}

/* A custom function y = 2x whose node carries hooks. */
static ca_status twice_backward(void *ctx, int n_out, ca_tensor *const *gout, int n_in,
                                ca_tensor **gin) {
    return ca_mul_scalar(gout[0], 2.0, &gin[0]);
}

Test(node_hooks, hooks_on_a_custom_function) {
    for (int compiled = 0; compiled < 2; compiled++) {
        ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(3), true), *y, *res, *loss;
        bool prev = ca_set_grad_enabled(false);
        TU_OK(ca_mul_scalar(x, 2.0, &y));
        ca_set_grad_enabled(prev);
        ca_custom_function fn = {.name = "TwiceBackward", .key = 7, .backward = twice_backward};
        TU_OK(ca_custom_apply(&fn, 1, &x, 1, &y, NULL, &res));
        hook_state pre = {.factor = 3.0}, post = {.factor = 5.0};
        TU_OK(ca_node_register_pre_hook(ca_tensor_grad_fn(res), pre_hook, &pre, NULL, NULL));
        TU_OK(ca_node_register_post_hook(ca_tensor_grad_fn(res), post_hook, &post, NULL, NULL));
        cr_assert_not_null(ca_node_custom(ca_tensor_grad_fn(res)));
        TU_OK(ca_sum(res, 0, NULL, false, &loss));
        TU_OK(run(loss, compiled));
        for (int64_t i = 0; i < 3; i++)
            cr_assert_float_eq(tu_get(x->grad, i), 30.0, 1e-12);
        check_fallbacks(compiled);
        RELEASE(loss, res, y, x);
    }
    ca_compiled_autograd_reset();
}

Test(node_hooks, backward_inputs_writes_only_their_grads) {
    for (int compiled = 0; compiled < 2; compiled++) {
        net n = net_make();
        if (compiled)
            TU_OK(ca_compiled_autograd_enable(NULL));
        ca_backward_options o = {
            .retain_graph = true, .n_inputs = 2, .inputs = (ca_tensor *[]){n.x, n.xw}};
        TU_OK(ca_backward_ex(n.loss, &o));
        TU_OK(ca_backward_ex(n.loss, &(ca_backward_options){0}));
        if (compiled)
            TU_OK(ca_compiled_autograd_disable());
        cr_assert_not_null(n.x->grad);
        cr_assert(ca_tensor_retains_grad(n.xw), "a non-leaf input retains its grad");
        for (int64_t i = 0; i < 4; i++) {
            cr_assert_float_eq(tu_get(n.x->grad, i), 2 * 3 * tu_get(n.w, i), 1e-5);
            cr_assert_float_eq(tu_get(n.w->grad, i), 3 * tu_get(n.x, i), 1e-5); /* once */
            cr_assert_float_eq(tu_get(n.xw->grad, i), 6.0, 1e-5);               /* twice */
        }
        check_fallbacks(compiled);
        ca_backward_options bad = {.n_inputs = 1, .inputs = NULL};
        TU_FAILS(ca_backward_ex(n.loss, &bad), CA_STATUS_INVALID, "options.n_inputs");
        net_free(&n);
    }
    ca_compiled_autograd_reset();
}

/* Saved-tensor hooks: pack keeps a copy scaled by 2, unpack hands it back. */
typedef struct {
    int packs, unpacks, frees;
} saved_counts;

static saved_counts counts;

static ca_status pack_double(ca_tensor *t, void **packed, void *ctx) {
    counts.packs++;
    ca_tensor *c;
    CA_CHECK(ca_mul_scalar(t, 2.0, &c));
    *packed = c;
    return CA_OK;
}

static ca_status unpack_same(void *packed, ca_tensor **out, void *ctx) {
    counts.unpacks++;
    *out = ca_tensor_retain(packed);
    return CA_OK;
}

static void free_packed(void *packed) {
    counts.frees++;
    ca_tensor_release(packed);
}

Test(node_hooks, saved_tensor_hooks) {
    for (int compiled = 0; compiled < 2; compiled++) {
        counts = (saved_counts){0};
        ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(3), (double[]){1, 2, 3}, true), *y, *loss;
        TU_OK(ca_saved_tensors_hooks_push(pack_double, unpack_same, free_packed, NULL, NULL));
        TU_OK(ca_mul(x, x, &y)); /* saves x twice (self, other) */
        TU_OK(ca_saved_tensors_hooks_pop());
        TU_OK(ca_sum(y, 0, NULL, false, &loss));
        cr_assert_eq(counts.packs, 2);
        if (compiled)
            TU_OK(ca_compiled_autograd_enable(NULL));
        TU_OK(ca_backward_ex(loss, &(ca_backward_options){.retain_graph = true}));
        TU_OK(ca_backward(loss));
        if (compiled)
            TU_OK(ca_compiled_autograd_disable());
        cr_assert_eq(counts.unpacks, 4, "each backward unpacks afresh");
        cr_assert_eq(counts.frees, 2, "a backward without retain_graph frees the packed values");
        for (int64_t i = 0; i < 3; i++) /* d(x*x)/dx with both saved x doubled, twice */
            cr_assert_float_eq(tu_get(x->grad, i), 2 * (4.0 * (double)(i + 1)), 1e-12);
        RELEASE(loss, y, x);
    }
    TU_FAILS(ca_saved_tensors_hooks_pop(), CA_STATUS_INVALID, "no saved-tensor hooks");
    TU_FAILS(ca_saved_tensors_hooks_push(NULL, unpack_same, NULL, NULL, NULL), CA_STATUS_INVALID,
             "pack and unpack are both required");
    ca_compiled_autograd_reset();
}

/* ca_grad captures at its inputs' nodes without running them: the node pre-hooks of the
 * captured node (xw's MulBackward0) and of a leaf's AccumulateGrad do not run, as
 * PyTorch's; a node that runs on the way to an input (the scalar Mul) runs its own. */
static void grad_skips_hooks_of_unrun_nodes(bool compiled) {
    net n = net_make();
    hook_state at_mul = {.factor = 1}, at_acc = {.factor = 1}, at_scale = {.factor = 1};
    ca_node *acc = NULL;
    TU_OK(ca_tensor_grad_accumulator(n.x, &acc));
    TU_OK(ca_node_register_pre_hook(ca_tensor_grad_fn(n.xw), pre_hook, &at_mul, NULL, NULL));
    TU_OK(ca_node_register_pre_hook(acc, pre_hook, &at_acc, NULL, NULL));
    TU_OK(ca_node_register_pre_hook(ca_tensor_grad_fn(n.y), pre_hook, &at_scale, NULL, NULL));
    ca_grad_options o = {.retain_graph = true};
    ca_tensor *g = NULL;
    if (compiled)
        TU_OK(ca_compiled_autograd_enable(NULL));
    TU_OK(ca_grad(1, &n.loss, 1, &n.xw, &o, &g)); /* captured at xw: its Mul does not run */
    cr_assert_eq(at_mul.calls, 0);
    cr_assert_eq(at_scale.calls, 1);
    ca_tensor_release(g);
    TU_OK(ca_grad(1, &n.loss, 1, &n.x, &o, &g)); /* Mul runs, x's AccumulateGrad does not */
    cr_assert_eq(at_mul.calls, 1);
    cr_assert_eq(at_acc.calls, 0);
    ca_tensor_release(g);
    if (compiled)
        TU_OK(ca_compiled_autograd_disable());
    check_fallbacks(compiled);
    TU_OK(run(n.loss, compiled)); /* a backward runs every node: the AccumulateGrad too */
    cr_assert_eq(at_acc.calls, 1);
    ca_node_release(acc);
    net_free(&n);
}

Test(node_hooks, grad_skips_hooks_of_unrun_nodes_eager) {
    grad_skips_hooks_of_unrun_nodes(false);
}

Test(node_hooks, grad_skips_hooks_of_unrun_nodes_compiled) {
    grad_skips_hooks_of_unrun_nodes(true);
}
