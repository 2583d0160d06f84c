/* gradgrad.c - gradgradcheck for the double backward tests (see gradgrad.h). */
#include <string.h>

#include "gradgrad.h"

static ca_status gg_first_grads(gg_state *s, int n, ca_tensor *const *in, bool create,
                                ca_tensor **grads, ca_tensor **req, int *n_req) {
    ca_tensor *y = NULL, *yw = NULL, *loss = NULL;
    ca_status st = s->f(in, &y, s->ctx);
    if (st != CA_OK)
        return st;
    if (!s->w)
        s->w = tu_randn(CA_FLOAT64, ca_tensor_ndim(y), ca_tensor_shape(y), false);
    st = ca_mul(y, s->w, &yw);
    if (st == CA_OK)
        st = ca_sum(yw, 0, NULL, false, &loss);
    *n_req = 0;
    for (int k = 0; k < n; k++)
        if (ca_tensor_requires_grad(in[k]))
            req[(*n_req)++] = in[k];
    ca_grad_options o = {.allow_unused = true, .create_graph = create};
    if (st == CA_OK)
        st = ca_grad(1, &loss, *n_req, req, &o, grads);
    tu_release_n((ca_tensor *[]){y, yw, loss}, 3);
    return st;
}

ca_status gg_fn(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    gg_state *s = ctx;
    int n = 0;
    while (n < GG_MAX_IN && in[n] && s->v[n] != (ca_tensor *)-1)
        n++;
    bool create = ca_set_grad_enabled(true); /* the outer pass's mode */
    ca_tensor *grads[GG_MAX_IN] = {0}, *req[GG_MAX_IN];
    int n_req = 0;
    ca_status st = gg_first_grads(s, n, in, create, grads, req, &n_req);
    ca_set_grad_enabled(create);
    ca_tensor *acc = NULL;
    for (int j = 0; j < n_req && st == CA_OK; j++) {
        if (!grads[j])
            continue;
        if (!s->v[j])
            s->v[j] = tu_randn(CA_FLOAT64, ca_tensor_ndim(req[j]), ca_tensor_shape(req[j]), false);
        ca_tensor *p = NULL, *ps = NULL, *sum = NULL;
        st = ca_mul(grads[j], s->v[j], &p);
        if (st == CA_OK)
            st = ca_sum(p, 0, NULL, false, &ps);
        if (st == CA_OK && acc)
            st = ca_add(acc, ps, &sum);
        else if (st == CA_OK)
            sum = ca_tensor_retain(ps);
        ca_tensor_release(acc);
        acc = sum;
        tu_release_n((ca_tensor *[]){p, ps}, 2);
    }
    /* a gradient that does not depend on x (a linear op) is constant: keep x in the graph
     * with a zero term, so the outer check compares zeros with the numeric slope */
    for (int j = 0; j < n_req && st == CA_OK && create && acc && !ca_tensor_requires_grad(acc);
         j++) {
        ca_tensor *xs = NULL, *z = NULL, *sum = NULL;
        st = ca_sum(req[j], 0, NULL, false, &xs);
        if (st == CA_OK)
            st = ca_mul_scalar(xs, 0.0, &z);
        if (st == CA_OK)
            st = ca_add(acc, z, &sum);
        tu_release_n((ca_tensor *[]){xs, z, acc}, 3);
        acc = sum;
    }
    tu_release_n(grads, n_req);
    if (st == CA_OK && !acc)
        st = ca_sum(req[0], 0, NULL, false, &acc); /* no gradient at all: never here */
    *out = acc;
    return st;
}

void gradgradcheck(tu_fn f, int n, ca_tensor *const *inputs, void *ctx, double atol, double rtol) {
    gradgradcheck_falls_back(f, n, inputs, ctx, atol, rtol, NULL);
}

void gradgradcheck_falls_back(tu_fn f, int n, ca_tensor *const *inputs, void *ctx, double atol,
                              double rtol, const char *why) {
    gg_state s = {.f = f, .ctx = ctx};
    for (int k = n; k < GG_MAX_IN; k++)
        s.v[k] = (ca_tensor *)-1; /* marks the end of the inputs for gg_fn */
    ca_tensor *in[GG_MAX_IN + 1] = {0};
    memcpy(in, inputs, sizeof(ca_tensor *) * (size_t)n);
    tu_gradcheck(gg_fn, n, in, &s, atol, rtol);
    if (!ca_compiled_autograd_enabled()) { /* again, compiled: both backwards captured */
        ca_compiled_autograd_reset();
        TU_OK(ca_compiled_autograd_enable(NULL));
        tu_gradcheck(gg_fn, n, in, &s, atol, rtol);
        ca_compiled_counters c;
        ca_compiled_autograd_counters(&c);
        TU_OK(ca_compiled_autograd_disable());
        if (why) /* once it is captured, the caller moves to gradgradcheck */
            cr_assert(c.eager_fallbacks > 0,
                      "compiled gradgradcheck: no eager fallback any more "
                      "(%s): call gradgradcheck",
                      why);
        else
            cr_assert(c.eager_fallbacks == 0 && c.captures >= 2,
                      "compiled gradgradcheck: %lld eager fallbacks, %lld captures (see "
                      "CAGRAD_LOGS=compiled_autograd_verbose)",
                      (long long)c.eager_fallbacks, (long long)c.captures);
    }
    ca_tensor_release(s.w);
    for (int k = 0; k < n; k++)
        ca_tensor_release(s.v[k]);
}

/* The analytic pass of a gradgradcheck: F(x) with create_graph, then its backward. */
void second_order_pass(tu_fn f, int n, ca_tensor *const *in, void *ctx) {
    gg_state s = {.f = f, .ctx = ctx};
    for (int k = n; k < GG_MAX_IN; k++)
        s.v[k] = (ca_tensor *)-1;
    ca_tensor *args[GG_MAX_IN + 1] = {0}, *out = NULL;
    memcpy(args, in, sizeof(ca_tensor *) * (size_t)n);
    TU_OK(gg_fn(args, &out, &s));
    TU_OK(ca_backward(out));
    ca_tensor_release(out);
    ca_tensor_release(s.w);
    for (int k = 0; k < n; k++) {
        ca_tensor_release(s.v[k]);
        TU_OK(ca_tensor_set_grad(in[k], NULL));
    }
}
