/* test_double_backward_ops.c - gradgradcheck (gradgrad.h) of the op table's rows in
 * float64: every op of the registry with one or two tensor inputs, so a new op is covered
 * without editing this file, composites for the rows outside the registry, and a coverage
 * test that fails naming any differentiable row that no gradgradcheck reaches.
 */
#include <math.h>
#include <string.h>

#include "gradgrad.h"
#include "autograd/internal.h"

/* ---------------------------------------------------------------------------------------
 * Every op of the registry: gradgradcheck in float64
 */
typedef struct {
    int index;
    ca_op_info info;
} reg_case;

static ca_status call_op(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    const reg_case *c = ctx;
    return ca_op_apply(c->index, c->info.n_tensors, in, c->info.n_scalars, c->info.defaults, out);
}

/* values away from 0 and from the kinks at +-1, +-3 and 6 of the piecewise ops; inside
 * the domain of the ops defined on part of the line only */
static const double *domain(unsigned fl, int k) {
    static const double any[2][8] = {{-4.7, -2.2, -0.6, -0.15, 0.3, 1.7, 4.1, 7.3},
                                     {0.9, -1.4, 2.3, 0.45, -0.7, 1.1, -2.6, 0.35}};
    static const double pos[2][8] = {{0.15, 0.3, 0.6, 1.2, 1.7, 2.2, 4.1, 7.3},
                                     {0.9, 1.4, 2.3, 0.45, 0.7, 1.1, 2.6, 0.35}};
    static const double unit[8] = {-0.9, -0.6, -0.3, -0.15, 0.2, 0.45, 0.7, 0.85};
    static const double above_1[8] = {1.05, 1.3, 1.7, 2.2, 3.1, 4.1, 5.5, 7.3};
    static const double prob[8] = {0.05, 0.2, 0.3, 0.45, 0.55, 0.7, 0.8, 0.95};
    return fl & (CA_OP_POSITIVE | CA_OP_ABOVE_M1) || k == 1 ? pos[k] /* xlogy's y */
           : fl & CA_OP_PROB                                ? prob
           : fl & CA_OP_UNIT                                ? unit
           : fl & CA_OP_ABOVE_1                             ? above_1
                                                            : any[k];
}

/* Ops whose gradient is not smooth enough at the test points for finite differences of
 * the first gradient: discontinuous in the value (fmod, remainder: the second derivative
 * is 0 a.e. and is checked through the pointwise test above). */
static bool skip_numeric(const char *name) {
    return strcmp(name, "fmod") == 0 || strcmp(name, "remainder") == 0;
}

/* Every registry op with one or two tensor inputs and default scalars; returns how many.
 * Compiled: under compiled autograd, where the create_graph gradient and the backward
 * through it are both compiled graphs (compiled_double.c), none running eagerly. */
static int registry_gradgradchecks(bool compiled) {
    int checked = 0;
    for (int k = 0; k < ca_op_count(); k++) {
        reg_case c = {.index = k};
        TU_OK(ca_op_describe(k, &c.info));
        int nt = c.info.n_tensors;
        if (nt > 2 || c.info.n_defaults != c.info.n_scalars || skip_numeric(c.info.name))
            continue;
        ca_tensor *in[2] = {0};
        for (int j = 0; j < nt; j++)
            in[j] = tu_from(CA_FLOAT64, TU_SHAPE(2, 4), domain(c.info.flags, j), true);
        ca_tensor *probe = NULL; /* a binary op of the registry may want other shapes */
        bool runs = call_op(in, &probe, &c) == CA_OK && ca_tensor_requires_grad(probe);
        ca_tensor_release(probe);
        if (runs) {
            cr_log_info("gradgradcheck %s%s", c.info.name, compiled ? " (compiled)" : "");
            ca_compiled_autograd_reset();
            if (compiled)
                TU_OK(ca_compiled_autograd_enable(NULL));
            gradgradcheck(call_op, nt, in, &c, 1e-5, 1e-4);
            ca_compiled_counters cc;
            ca_compiled_autograd_counters(&cc);
            if (compiled) {
                TU_OK(ca_compiled_autograd_disable());
                cr_assert(cc.eager_fallbacks == 0 && cc.captures >= 2,
                          "%s: %lld eager fallbacks, %lld captures", c.info.name,
                          (long long)cc.eager_fallbacks, (long long)cc.captures);
            }
            checked++;
        }
        tu_release_n(in, nt);
    }
    return checked;
}

Test(double_backward, every_registry_op_gradgradchecks) {
    cr_assert_geq(registry_gradgradchecks(false), 60);
}

Test(double_backward, every_registry_op_gradgradchecks_compiled) {
    cr_assert_geq(registry_gradgradchecks(true), 60);
}

/* ---------------------------------------------------------------------------------------
 * The everyday ops outside the registry (rows of the op table without a schema)
 */
typedef ca_status (*bin_fn)(ca_tensor *, ca_tensor *, ca_tensor **);

static ca_status call_bin(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ((bin_fn)ctx)(in[0], in[1], out);
}

Test(double_backward, arithmetic_and_matmul_gradgradcheck) {
    bin_fn fns[] = {ca_add, ca_sub, ca_mul, ca_div, ca_pow, ca_maximum, ca_matmul};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        bool mm = fns[i] == ca_matmul;
        ca_tensor *a = tu_uniform(CA_FLOAT64, TU_SHAPE(3, 4), 0.5, 1.5, true);
        ca_tensor *b = mm ? tu_randn(CA_FLOAT64, TU_SHAPE(4, 2), true)
                          : tu_uniform(CA_FLOAT64, TU_SHAPE(4), 0.3, 1.2, true); /* broadcast */
        gradgradcheck(call_bin, 2, (ca_tensor *[]){a, b}, (void *)fns[i], 1e-5, 1e-4);
        tu_release_n((ca_tensor *[]){a, b}, 2);
    }
}

static ca_status reductions(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    (void)ctx;
    ca_tensor *sm = NULL, *ls = NULL, *m = NULL, *lse = NULL, *p = NULL;
    int64_t d1 = 1;
    ca_status st = ca_softmax(in[0], 1, &sm);
    if (st == CA_OK)
        st = ca_log_softmax(in[0], 0, &ls);
    if (st == CA_OK)
        st = ca_mul(sm, ls, &p);
    if (st == CA_OK)
        st = ca_mean(p, 1, &d1, true, &m);
    if (st == CA_OK)
        st = ca_logsumexp(in[0], 1, &d1, true, &lse);
    if (st == CA_OK)
        st = ca_add(m, lse, out);
    tu_release_n((ca_tensor *[]){sm, ls, m, lse, p}, 5);
    return st;
}

Test(double_backward, softmax_and_reductions_gradgradcheck) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(3, 5), true);
    gradgradcheck(reductions, 1, &x, NULL, 1e-5, 1e-4);
    ca_tensor_release(x);
}

static ca_status losses(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    ca_tensor *target = ctx, *ce = NULL, *mse = NULL, *sq = NULL;
    ca_status st = ca_cross_entropy(in[0], target, CA_REDUCTION_MEAN, -100, &ce);
    if (st == CA_OK)
        st = ca_mul(in[0], in[0], &sq);
    if (st == CA_OK)
        st = ca_mse_loss(sq, in[1], CA_REDUCTION_SUM, &mse);
    if (st == CA_OK)
        st = ca_add(ce, mse, out);
    tu_release_n((ca_tensor *[]){ce, mse, sq}, 3);
    return st;
}

Test(double_backward, cross_entropy_and_mse_gradgradcheck) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(4, 3), true);
    ca_tensor *t = tu_randn(CA_FLOAT64, TU_SHAPE(4, 3), true);
    ca_tensor *target = tu_index(TU_SHAPE(4), (int64_t[]){0, 2, 1, 2});
    gradgradcheck(losses, 2, (ca_tensor *[]){x, t}, target, 1e-5, 1e-4);
    tu_release_n((ca_tensor *[]){x, t, target}, 3);
}

static ca_status shapes(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    (void)ctx;
    ca_tensor *r = NULL, *p = NULL, *s = NULL, *c = NULL, *e = NULL, *w = NULL;
    ca_status st = ca_reshape(in[0], 2, (int64_t[]){4, 3}, &r);
    /* overlapping windows of r's rows, 2 wide: [4, 2, 2] over [4, 3] */
    if (st == CA_OK)
        st = ca_as_strided(r, 3, (int64_t[]){4, 2, 2}, (int64_t[]){3, 1, 1}, -1, &w);
    ca_tensor *ws = NULL, *wr = NULL;
    if (st == CA_OK)
        st = ca_reshape(w, 2, (int64_t[]){4, 4}, &ws);
    if (st == CA_OK)
        st = ca_slice(ws, 1, 0, 3, 1, &wr); /* [4, 3], r's shape again */
    ca_tensor_release(r);
    r = NULL;
    if (st == CA_OK)
        st = ca_mul(wr, wr, &r);
    tu_release_n((ca_tensor *[]){w, ws, wr}, 3);
    if (st == CA_OK)
        st = ca_permute(r, 2, (int64_t[]){1, 0}, &p);
    if (st == CA_OK)
        st = ca_slice(p, 1, 1, 4, 2, &s);
    if (st == CA_OK)
        st = ca_cat(2, (ca_tensor *[]){s, s}, 1, &c);
    if (st == CA_OK)
        st = ca_exp(c, &e);
    if (st == CA_OK)
        st = ca_cumsum(e, 1, out);
    tu_release_n((ca_tensor *[]){r, p, s, c, e}, 5);
    return st;
}

Test(double_backward, views_and_cat_gradgradcheck) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 6), true);
    gradgradcheck(shapes, 1, &x, NULL, 1e-5, 1e-4);
    ca_tensor_release(x);
}

/* ---------------------------------------------------------------------------------------
 * More rows outside the registry: convolution and pooling, indexing, order, linear
 * algebra, selection ops. Each composite multiplies by a nonlinear factor, so that the
 * second derivative runs through every rule's own ops (their derivative rules).
 */
/* f(x) * x, so a rule linear in x still has a second derivative to check */
static ca_status times_self(ca_tensor *y, ca_tensor *x, ca_tensor **out) {
    ca_status st = ca_mul(y, x, out);
    ca_tensor_release(y);
    return st;
}

static ca_status conv_pool(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    (void)ctx;
    ca_tensor *c = NULL, *t = NULL, *m = NULL, *a = NULL, *ad = NULL, *s = NULL;
    int64_t one[2] = {1, 1}, two[2] = {2, 2}, zero[2] = {0, 0};
    ca_status st = ca_conv2d(in[0], in[1], in[2], one, one, one, 1, &c);
    if (st == CA_OK)
        st = ca_tanh(c, &t);
    if (st == CA_OK)
        st = ca_max_pool2d(t, two, two, zero, one, false, &m, NULL);
    if (st == CA_OK)
        st = ca_avg_pool2d(t, two, one, zero, false, true, 0, &a);
    if (st == CA_OK)
        st = ca_adaptive_avg_pool2d(a, 2, 2, &ad);
    if (st == CA_OK)
        st = ca_mul(m, ad, &s);
    if (st == CA_OK)
        st = ca_mul(s, s, out);
    tu_release_n((ca_tensor *[]){c, t, m, a, ad, s}, 6);
    return st;
}

Test(double_backward, conv2d_and_pooling_gradgradcheck) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(1, 2, 4, 4), true);
    ca_tensor *w = tu_randn(CA_FLOAT64, TU_SHAPE(2, 2, 3, 3), true);
    ca_tensor *b = tu_randn(CA_FLOAT64, TU_SHAPE(2), true);
    gradgradcheck(conv_pool, 3, (ca_tensor *[]){x, w, b}, NULL, 1e-5, 1e-4);
    tu_release_n((ca_tensor *[]){x, w, b}, 3);
}

static ca_status indexing(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    ca_tensor *const *ix = ctx; /* rows [3], gather index [2, 3], filled rows [2] */
    ca_tensor *e = NULL, *s = NULL, *g = NULL, *f = NULL, *sa = NULL, *p = NULL;
    ca_status st = ca_embedding(in[0], ix[0], &e); /* [3, 4] */
    if (st == CA_OK)
        st = ca_index_select(in[0], 0, ix[0], &s); /* [3, 4] */
    if (st == CA_OK)
        st = ca_gather(in[0], 0, ix[1], &g); /* [2, 3] */
    if (st == CA_OK)
        st = ca_index_fill(e, 0, ix[2], 0.5, &f); /* rows 1 and 2 */
    ca_tensor *src = NULL, *sa5 = NULL;           /* the embedding's first 3 columns into [3, 5] */
    if (st == CA_OK)
        st = ca_slice(e, 1, 0, 3, 1, &src);
    if (st == CA_OK)
        st = ca_index_add_zeros(2, (int64_t[]){3, 5}, 1, ix[0], src, &sa5);
    if (st == CA_OK)
        st = ca_slice(sa5, 1, 0, 4, 1, &sa);
    tu_release_n((ca_tensor *[]){src, sa5}, 2);
    if (st == CA_OK)
        st = ca_mul(f, sa, &p);
    ca_tensor *ps = NULL, *gs = NULL, *ss = NULL;
    if (st == CA_OK)
        st = ca_sum(p, 0, NULL, false, &ps);
    if (st == CA_OK)
        st = ca_sum(g, 0, NULL, false, &gs);
    if (st == CA_OK)
        st = ca_mul(s, s, &ss);
    ca_tensor *t = NULL, *u = NULL;
    if (st == CA_OK)
        st = ca_sum(ss, 0, NULL, false, &t);
    if (st == CA_OK)
        st = ca_mul(gs, ps, &u);
    if (st == CA_OK)
        st = ca_add(u, t, out);
    tu_release_n((ca_tensor *[]){e, s, g, f, sa, p, ps, gs, ss, t, u}, 11);
    return st;
}

Test(double_backward, indexing_gradgradcheck) {
    ca_tensor *w = tu_randn(CA_FLOAT64, TU_SHAPE(5, 4), true);
    ca_tensor *ix[3] = {tu_index(TU_SHAPE(3), (int64_t[]){4, 0, 2}),
                        tu_index(TU_SHAPE(2, 3), (int64_t[]){1, 0, 4, 3, 3, 2}),
                        tu_index(TU_SHAPE(2), (int64_t[]){1, 2})};
    gradgradcheck(indexing, 1, &w, ix, 1e-5, 1e-4);
    tu_release_n((ca_tensor *[]){w, ix[0], ix[1], ix[2]}, 4);
}

static ca_status order_and_select(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    (void)ctx;
    ca_tensor *sv = NULL, *tv = NULL, *mx = NULL, *mn = NULL, *mask = NULL, *mf = NULL;
    ca_tensor *cl = NULL, *w = NULL, *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    ca_tensor *ix[4] = {0};
    int64_t d1 = 1;
    ca_status st = ca_sort(in[0], 1, true, false, &sv, &ix[0]);
    if (st == CA_OK)
        st = ca_topk(in[0], 2, 1, true, true, &tv, &ix[1]);
    if (st == CA_OK)
        st = ca_max(in[0], 1, &d1, true, &mx, &ix[2]);
    if (st == CA_OK)
        st = ca_min(in[0], 1, &d1, true, &mn, &ix[3]);
    tu_release_n(ix, 4);
    if (st == CA_OK)
        st = ca_gt_scalar(in[0], 0.0, &mask);
    if (st == CA_OK)
        st = ca_masked_fill(in[0], mask, 0.25, &mf);
    if (st == CA_OK)
        st = ca_clamp(in[0], -0.8, 0.9, &cl);
    if (st == CA_OK)
        st = ca_where(mask, sv, cl, &w);
    if (st == CA_OK)
        st = ca_mul(w, mf, &a);
    if (st == CA_OK)
        st = ca_mul(mx, mn, &b);
    if (st == CA_OK)
        st = ca_mul(a, b, &c);
    if (st == CA_OK)
        st = ca_sum(tv, 0, NULL, false, &d);
    if (st == CA_OK)
        st = ca_mul(c, d, out);
    tu_release_n((ca_tensor *[]){sv, tv, mx, mn, mask, mf, cl, w, a, b, c, d}, 12);
    return st;
}

Test(double_backward, sort_max_where_clamp_gradgradcheck) {
    /* distinct values, away from the clamp bounds and from 0 */
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2, 4),
                           (double[]){0.3, -1.2, 0.7, -0.45, 1.4, 0.15, -0.6, 0.55}, true);
    gradgradcheck(order_and_select, 1, &x, NULL, 1e-5, 1e-4);
    ca_tensor_release(x);
}

static ca_status linalg(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    (void)ctx;
    ca_tensor *mm = NULL, *am = NULL, *lin = NULL, *b3 = NULL, *bm = NULL, *t = NULL;
    ca_tensor *u = NULL, *sq = NULL, *ex = NULL, *s = NULL, *tr = NULL;
    ca_status st = ca_mm(in[0], in[1], &mm); /* [3, 2] */
    if (st == CA_OK)
        st = ca_addmm(in[2], in[0], in[1], &am);
    if (st == CA_OK)
        st = ca_t(in[1], &tr); /* [2, 4] */
    if (st == CA_OK)
        st = ca_linear(in[0], tr, in[2], &lin);
    if (st == CA_OK)
        st = ca_unsqueeze(mm, 0, &u); /* [1, 3, 2] */
    if (st == CA_OK)
        st = ca_expand(u, 3, (int64_t[]){2, 3, 2}, &ex);
    if (st == CA_OK)
        st = ca_reshape(am, 3, (int64_t[]){1, 2, 3}, &b3);
    ca_tensor *b3e = NULL;
    if (st == CA_OK)
        st = ca_expand(b3, 3, (int64_t[]){2, 2, 3}, &b3e);
    if (st == CA_OK)
        st = ca_bmm(ex, b3e, &bm); /* [2, 3, 3] */
    if (st == CA_OK)
        st = ca_tanh(bm, &t);
    if (st == CA_OK)
        st = ca_select(t, 0, 1, &s);
    ca_tensor *s2 = NULL, *ls = NULL;
    if (st == CA_OK)
        st = ca_sum(lin, 0, NULL, false, &ls);
    if (st == CA_OK)
        st = ca_mul(s, ls, &s2);
    if (st == CA_OK)
        st = ca_squeeze(s2, 0, NULL, &sq);
    if (st == CA_OK)
        st = times_self(ca_tensor_retain(sq), sq, out);
    tu_release_n((ca_tensor *[]){mm, am, lin, b3, b3e, bm, t, u, sq, ex, s, tr, s2, ls}, 14);
    return st;
}

Test(double_backward, mm_addmm_linear_bmm_views_gradgradcheck) {
    ca_tensor *a = tu_randn(CA_FLOAT64, TU_SHAPE(3, 4), true);
    ca_tensor *b = tu_randn(CA_FLOAT64, TU_SHAPE(4, 2), true);
    ca_tensor *bias = tu_randn(CA_FLOAT64, TU_SHAPE(2), true);
    gradgradcheck(linalg, 3, (ca_tensor *[]){a, b, bias}, NULL, 1e-5, 1e-4);
    tu_release_n((ca_tensor *[]){a, b, bias}, 3);
}

static ca_status dtype_round_trip(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    (void)ctx;
    ca_tensor *f = NULL, *e = NULL, *d = NULL;
    ca_status st = ca_to_dtype(in[0], CA_FLOAT32, &f);
    if (st == CA_OK)
        st = ca_exp(f, &e);
    if (st == CA_OK)
        st = ca_to_dtype(e, CA_FLOAT64, &d);
    if (st == CA_OK)
        st = times_self(d, in[0], out);
    tu_release_n((ca_tensor *[]){f, e}, 2);
    return st;
}

/* the float32 leg loses precision: a looser tolerance, still far below the values */
Test(double_backward, to_dtype_gradgradcheck) {
    ca_tensor *x = tu_uniform(CA_FLOAT64, TU_SHAPE(4), -1, 1, true);
    gradgradcheck(dtype_round_trip, 1, &x, NULL, 5e-3, 5e-3);
    ca_tensor_release(x);
}

/* layer_norm and batch_norm save their statistics as aux values; a double backward
 * recomputes them from the input (row->aux_again) so that they carry its history */
static ca_status norms(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    (void)ctx;
    ca_tensor *ln = NULL, *t = NULL, *bn = NULL, *u = NULL;
    int64_t shape[2] = {3, 4};
    ca_status st = ca_layer_norm(in[0], 2, shape, in[1], in[2], 1e-5, &ln);
    if (st == CA_OK)
        st = ca_tanh(ln, &t);
    if (st == CA_OK)
        st = ca_batch_norm(t, in[3], NULL, 1e-5, &bn, NULL, NULL);
    if (st == CA_OK)
        st = ca_sin(bn, &u);
    if (st == CA_OK)
        st = times_self(u, bn, out);
    tu_release_n((ca_tensor *[]){ln, t, bn}, 3);
    return st;
}

Test(double_backward, layer_norm_and_batch_norm_gradgradcheck) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3, 4), true);
    ca_tensor *w = tu_randn(CA_FLOAT64, TU_SHAPE(3, 4), true);
    ca_tensor *b = tu_randn(CA_FLOAT64, TU_SHAPE(3, 4), true);
    ca_tensor *bw = tu_randn(CA_FLOAT64, TU_SHAPE(3), true);
    gradgradcheck(norms, 4, (ca_tensor *[]){x, w, b, bw}, NULL, 1e-5, 1e-4);
    tu_release_n((ca_tensor *[]){x, w, b, bw}, 4);
}

typedef ca_status (*scalar_fn)(ca_tensor *, double, ca_tensor **);

static ca_status scalar_forms(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    (void)ctx;
    static const struct {
        scalar_fn fn;
        double s;
    } forms[] = {{ca_add_scalar, 0.5},  {ca_sub_scalar, 0.25},    {ca_rsub_scalar, 3.0},
                 {ca_div_scalar, 1.5},  {ca_rdiv_scalar, 2.0},    {ca_pow_scalar, 2.5},
                 {ca_rpow_scalar, 1.7}, {ca_maximum_scalar, 0.4}, {ca_minimum_scalar, 0.6}};
    ca_tensor *acc = ca_tensor_retain(in[0]);
    ca_status st = CA_OK;
    for (size_t i = 0; i < sizeof forms / sizeof forms[0] && st == CA_OK; i++) {
        ca_tensor *v = NULL, *p = NULL;
        st = forms[i].fn(in[0], forms[i].s, &v); /* acc = acc * (1 + 0.1 * form(x)) */
        if (st == CA_OK)
            st = ca_mul_scalar(v, 0.1, &p);
        ca_tensor_release(v);
        v = NULL;
        if (st == CA_OK)
            st = ca_add_scalar(p, 1.0, &v);
        ca_tensor_release(p);
        p = NULL;
        if (st == CA_OK)
            st = ca_mul(acc, v, &p);
        ca_tensor_release(v);
        ca_tensor_release(acc);
        acc = p;
    }
    ca_tensor *mn = NULL, *fm = NULL, *rm = NULL, *a = NULL, *b = NULL, *vw = NULL, *tr = NULL;
    ca_tensor *lin = NULL, *x3 = NULL;
    if (st == CA_OK)
        st = ca_minimum(acc, in[1], &mn);
    if (st == CA_OK)
        st = ca_fmod(in[0], in[1], &fm);
    if (st == CA_OK)
        st = ca_remainder(in[0], in[1], &rm);
    if (st == CA_OK)
        st = ca_mul(mn, fm, &a);
    if (st == CA_OK)
        st = ca_mul(a, rm, &b);
    if (st == CA_OK)
        st = ca_view(b, 3, (int64_t[]){1, 2, 4}, &x3);
    if (st == CA_OK)
        st = ca_transpose(in[1], 0, 1, &tr); /* [4, 2] */
    ca_tensor *w = NULL;
    if (st == CA_OK)
        st = ca_transpose(tr, 1, 0, &w); /* back to [2, 4]: out_features 2 */
    if (st == CA_OK)
        st = ca_linear(x3, w, NULL, &lin); /* [1, 2, 2] */
    ca_tensor_release(w);
    if (st == CA_OK)
        st = ca_view(lin, 1, (int64_t[]){4}, &vw);
    if (st == CA_OK)
        st = times_self(ca_tensor_retain(vw), vw, out);
    tu_release_n((ca_tensor *[]){acc, mn, fm, rm, a, b, vw, tr, lin, x3}, 10);
    return st;
}

static void scalar_inputs(ca_tensor **in) {
    in[0] = tu_from(CA_FLOAT64, TU_SHAPE(2, 4),
                    (double[]){0.3, 0.75, 0.5, 0.9, 0.2, 0.65, 0.35, 0.8}, true);
    in[1] = tu_from(CA_FLOAT64, TU_SHAPE(2, 4), (double[]){1.6, 1.9, 1.7, 2.2, 1.8, 2.4, 1.5, 2.1},
                    true);
}

Test(double_backward, scalar_forms_minimum_fmod_views_gradgradcheck) {
    ca_tensor *in[2];
    scalar_inputs(in);
    gradgradcheck(scalar_forms, 2, in, NULL, 1e-5, 1e-4);
    tu_release_n(in, 2);
}

/* cumprod with zeros in x (one and two per row): its double backward is built from
 * differentiable ops (ops_order.c), exact there as the kernel */
static ca_status cumprods(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    (void)ctx;
    ca_tensor *c0 = NULL, *c1 = NULL, *p = NULL;
    ca_status st = ca_cumprod(in[0], 0, &c0);
    if (st == CA_OK)
        st = ca_cumprod(in[0], 1, &c1);
    if (st == CA_OK)
        st = ca_mul(c0, c1, &p);
    if (st == CA_OK)
        st = times_self(ca_tensor_retain(p), p, out);
    tu_release_n((ca_tensor *[]){c0, c1, p}, 3);
    return st;
}

static ca_tensor *cumprod_input(void) {
    return tu_from(CA_FLOAT64, TU_SHAPE(3, 4),
                   (double[]){0.5, 0.0, 1.3, -0.7, 1.1, 0.9, 0.0, 0.0, 0.4, -1.2, 0.8, 1.5}, true);
}

Test(double_backward, cumprod_with_zeros_gradgradcheck) {
    ca_tensor *x = cumprod_input();
    gradgradcheck(cumprods, 1, &x, NULL, 1e-5, 1e-4);
    ca_tensor_release(x);
}

/* ---------------------------------------------------------------------------------------
 * Coverage: every row of the op table with a derivative rule runs (forward, or inside a
 * first backward's rules) in the gradgradchecks above, so a new row is either covered by
 * the registry walk or fails here until a composite uses it.
 */
typedef struct {
    bool seen[CA_OP__COUNT];
} seen_ops;

static void observe(const char *op, int forward_graph, void *ctx) {
    (void)forward_graph;
    seen_ops *s = ctx;
    for (int id = 0; id < CA_OP__COUNT; id++)
        if (cai_op_def(id) && strcmp(cai_op_def(id)->name, op) == 0)
            s->seen[id] = true;
}

static void run_composites(void) {
    bin_fn fns[] = {ca_add, ca_sub, ca_mul, ca_div, ca_pow, ca_maximum, ca_matmul};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        ca_tensor *ab[2] = {tu_uniform(CA_FLOAT64, TU_SHAPE(3, 3), 0.5, 1.5, true),
                            tu_uniform(CA_FLOAT64, TU_SHAPE(3, 3), 0.5, 1.5, true)};
        second_order_pass(call_bin, 2, ab, (void *)fns[i]);
        tu_release_n(ab, 2);
    }
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(3, 5), true);
    second_order_pass(reductions, 1, &x, NULL);
    ca_tensor_release(x);
    ca_tensor *lt[2] = {tu_randn(CA_FLOAT64, TU_SHAPE(4, 3), true),
                        tu_randn(CA_FLOAT64, TU_SHAPE(4, 3), true)};
    ca_tensor *target = tu_index(TU_SHAPE(4), (int64_t[]){0, 2, 1, 2});
    second_order_pass(losses, 2, lt, target);
    tu_release_n((ca_tensor *[]){lt[0], lt[1], target}, 3);
    x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 6), true);
    second_order_pass(shapes, 1, &x, NULL);
    ca_tensor_release(x);
    ca_tensor *cv[3] = {tu_randn(CA_FLOAT64, TU_SHAPE(1, 2, 4, 4), true),
                        tu_randn(CA_FLOAT64, TU_SHAPE(2, 2, 3, 3), true),
                        tu_randn(CA_FLOAT64, TU_SHAPE(2), true)};
    second_order_pass(conv_pool, 3, cv, NULL);
    tu_release_n(cv, 3);
    ca_tensor *w = tu_randn(CA_FLOAT64, TU_SHAPE(5, 4), true);
    ca_tensor *ix[3] = {tu_index(TU_SHAPE(3), (int64_t[]){4, 0, 2}),
                        tu_index(TU_SHAPE(2, 3), (int64_t[]){1, 0, 4, 3, 3, 2}),
                        tu_index(TU_SHAPE(2), (int64_t[]){1, 2})};
    second_order_pass(indexing, 1, &w, ix);
    tu_release_n((ca_tensor *[]){w, ix[0], ix[1], ix[2]}, 4);
    x = tu_from(CA_FLOAT64, TU_SHAPE(2, 4),
                (double[]){0.3, -1.2, 0.7, -0.45, 1.4, 0.15, -0.6, 0.55}, true);
    second_order_pass(order_and_select, 1, &x, NULL);
    ca_tensor_release(x);
    ca_tensor *la[3] = {tu_randn(CA_FLOAT64, TU_SHAPE(3, 4), true),
                        tu_randn(CA_FLOAT64, TU_SHAPE(4, 2), true),
                        tu_randn(CA_FLOAT64, TU_SHAPE(2), true)};
    second_order_pass(linalg, 3, la, NULL);
    tu_release_n(la, 3);
    x = tu_uniform(CA_FLOAT64, TU_SHAPE(4), -1, 1, true);
    second_order_pass(dtype_round_trip, 1, &x, NULL);
    ca_tensor_release(x);
    ca_tensor *nm[4] = {
        tu_randn(CA_FLOAT64, TU_SHAPE(2, 3, 4), true), tu_randn(CA_FLOAT64, TU_SHAPE(3, 4), true),
        tu_randn(CA_FLOAT64, TU_SHAPE(3, 4), true), tu_randn(CA_FLOAT64, TU_SHAPE(3), true)};
    second_order_pass(norms, 4, nm, NULL);
    tu_release_n(nm, 4);
    ca_tensor *sc[2];
    scalar_inputs(sc);
    second_order_pass(scalar_forms, 2, sc, NULL);
    tu_release_n(sc, 2);
    x = cumprod_input();
    second_order_pass(cumprods, 1, &x, NULL);
    ca_tensor_release(x);
}

static void run_registry(void) {
    for (int k = 0; k < ca_op_count(); k++) {
        reg_case c = {.index = k};
        TU_OK(ca_op_describe(k, &c.info));
        int nt = c.info.n_tensors;
        if (nt > 2 || c.info.n_defaults != c.info.n_scalars || skip_numeric(c.info.name))
            continue;
        ca_tensor *in[2] = {0}, *probe = NULL;
        for (int j = 0; j < nt; j++)
            in[j] = tu_from(CA_FLOAT64, TU_SHAPE(2, 4), domain(c.info.flags, j), true);
        bool runs = call_op(in, &probe, &c) == CA_OK && ca_tensor_requires_grad(probe);
        ca_tensor_release(probe);
        if (runs)
            second_order_pass(call_op, nt, in, &c);
        tu_release_n(in, nt);
    }
}

/* Rows a gradgradcheck cannot take, each for its reason */
static bool exempt(int id) {
    switch (id) {
    case CA_OP_PW:               /* every kernel op checked by the pointwise test above */
    case CA_OP_DROPOUT:          /* random: a new mask per call (its rule is g * mask) */
    case CA_OP_CUMPROD_BACKWARD: /* refuses by name (row_without_second_derivative...) */
    case CA_OP_GRAD_COPY:        /* .grad's copies: identity rules, engine tests above */
    case CA_OP_GRAD_CLONE: return true;
    default: return false;
    }
}

Test(double_backward, every_differentiable_row_is_covered) {
    static seen_ops seen;
    ca_set_op_observer(observe, &seen);
    run_composites();
    run_registry();
    ca_set_op_observer(NULL, NULL);
    int missing = 0;
    for (int id = 0; id < CA_OP__COUNT; id++) {
        const ca_op_def *row = cai_op_def(id);
        if (!row || !row->backward || exempt(id) || seen.seen[id])
            continue;
        cr_log_error("no gradgradcheck runs op '%s' (%s)", row->name, row->node_name);
        missing++;
    }
    cr_assert_eq(missing, 0, "%d differentiable rows are not gradgradchecked", missing);
}
