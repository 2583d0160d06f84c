/* test_ops_norm.c - Criterion suite `norm`: batch_norm in training mode (ops_norm.c).
 * Values and batch statistics against a double reference for 2-d to 5-d inputs, with and
 * without weight and bias; gradients against finite differences in float64; the compiled
 * backward against the eager one; the node; errors; allocation failure.
 */
#include "testutil.h"

#include "autograd/internal.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Reference: per channel of x [N, C, *], the mean and biased variance in double, then
 * (x - mean) / sqrt(var + eps) * w + b.
 */
typedef struct {
    double y[512], mean[80], var[80];
} bn_ref;

static void ref_batch_norm(const ca_tensor *x, const ca_tensor *w, const ca_tensor *b, double eps,
                           bn_ref *r) {
    const int64_t *shape = ca_tensor_shape(x);
    int64_t N = shape[0], C = shape[1], inner = ca_tensor_numel(x) / (N * C);
    cr_assert(ca_tensor_numel(x) <= 512 && C <= 80);
    int64_t idx[CA_MAX_DIMS];
    for (int64_t c = 0; c < C; c++) {
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < ca_tensor_numel(x); i++)
            if ((i / inner) % C == c) {
                tu_unflat(ca_tensor_ndim(x), shape, i, idx);
                sum += tu_at(x, idx);
            }
        r->mean[c] = sum / (double)(N * inner);
        for (int64_t i = 0; i < ca_tensor_numel(x); i++)
            if ((i / inner) % C == c) {
                tu_unflat(ca_tensor_ndim(x), shape, i, idx);
                double d = tu_at(x, idx) - r->mean[c];
                sq += d * d;
            }
        r->var[c] = sq / (double)(N * inner);
    }
    for (int64_t i = 0; i < ca_tensor_numel(x); i++) {
        int64_t c = (i / inner) % C;
        tu_unflat(ca_tensor_ndim(x), shape, i, idx);
        double v = (tu_at(x, idx) - r->mean[c]) / sqrt(r->var[c] + eps);
        r->y[i] = v * (w ? tu_get(w, c) : 1) + (b ? tu_get(b, c) : 0);
    }
}

static void check_forward(ca_tensor *x, ca_tensor *w, ca_tensor *b, double eps, double tol) {
    ca_tensor *y = NULL, *mean = NULL, *var = NULL;
    TU_OK(ca_batch_norm(x, w, b, eps, &y, &mean, &var));
    bn_ref r;
    memset(&r, 0, sizeof r);
    ref_batch_norm(x, w, b, eps, &r);
    tu_assert_shape(y, ca_tensor_ndim(x), ca_tensor_shape(x));
    tu_assert_shape(mean, 1, &ca_tensor_shape(x)[1]);
    tu_assert_values(y, r.y, tol);
    tu_assert_values(mean, r.mean, tol);
    tu_assert_values(var, r.var, tol);
    cr_assert(!ca_tensor_requires_grad(mean) && !ca_tensor_requires_grad(var));
    ca_tensor *all[] = {y, mean, var};
    tu_release_n(all, 3);
}

/* Shapes from [N, C] to 5-d: long runs (one channel per unit of work) and short ones
 * (blocks of 64 channels swept row by row; [5, 70] and [3, 70, 2] make a full block and a
 * partial one, and runs of one that are not a multiple of 8). */
static const struct {
    int nd;
    int64_t shape[5];
} SHAPES[] = {
    {2, {6, 3}},     {3, {2, 3, 5}},    {4, {2, 3, 4, 2}}, {5, {2, 3, 2, 2, 3}},
    {3, {2, 2, 40}}, {4, {1, 2, 8, 8}}, {2, {5, 70}},      {3, {3, 70, 2}},
};
#define N_SHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

Test(norm, batch_norm_forward_matches_reference) {
    ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int k = 0; k < 2; k++) {
        double tol = dts[k] == CA_FLOAT32 ? 1e-5 : 1e-12;
        for (int s = 0; s < N_SHAPES; s++) {
            ca_tensor *x = tu_randn(dts[k], SHAPES[s].nd, SHAPES[s].shape, false);
            int64_t C = SHAPES[s].shape[1];
            ca_tensor *w = tu_uniform(dts[k], 1, &C, 0.5, 1.5, false);
            ca_tensor *b = tu_randn(dts[k], 1, &C, false);
            for (int v = 0; v < 4; v++) /* none, weight, bias, both */
                check_forward(x, v & 1 ? w : NULL, v & 2 ? b : NULL, v ? 1e-5 : 1e-3, tol);
            ca_tensor *all[] = {x, w, b};
            tu_release_n(all, 3);
        }
    }
}

Test(norm, batch_norm_noncontiguous_and_offset_data) {
    /* a shift of 1000 with unit spread: the two-pass variance keeps float32 close */
    ca_tensor *x = tu_randn_noncontig(CA_FLOAT32, TU_SHAPE(3, 4, 5), false), *xs = NULL;
    TU_OK(ca_add_scalar(x, 1000.0, &xs));
    check_forward(x, NULL, NULL, 1e-5, 1e-5);
    ca_tensor *y = NULL, *var = NULL;
    TU_OK(ca_batch_norm(xs, NULL, NULL, 1e-5, &y, NULL, &var));
    bn_ref r;
    memset(&r, 0, sizeof r);
    ref_batch_norm(xs, NULL, NULL, 1e-5, &r);
    tu_assert_values(y, r.y, 5e-4); /* x * alpha + beta rounds at 1000 (ulp 6e-5) */
    tu_assert_values(var, r.var, 1e-4);
    ca_tensor *all[] = {x, xs, y, var};
    tu_release_n(all, 4);
}

Test(norm, batch_norm_empty_batch_gives_nan_statistics) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(0, 3, 2), false), *y = NULL, *mean = NULL;
    TU_OK(ca_batch_norm(x, NULL, NULL, 1e-5, &y, &mean, NULL));
    cr_assert_eq(ca_tensor_numel(y), 0);
    for (int c = 0; c < 3; c++)
        cr_assert(isnan(tu_get(mean, c)));
    ca_tensor *all[] = {x, y, mean};
    tu_release_n(all, 3);
}

/* ---------------------------------------------------------------------------------------
 * Gradients
 */
static ca_status f_bn(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    int which = *(const int *)ctx; /* bit0 weight, bit1 bias: in[1], in[2] */
    return ca_batch_norm(in[0], which & 1 ? in[1] : NULL, which & 2 ? in[2] : NULL, 1e-5, out, NULL,
                         NULL);
}

Test(norm, batch_norm_grad_finite_differences) {
    for (int s = 0; s < 5; s++) {
        ca_tensor *x = s == 4 ? tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3, 2, 4), true)
                              : tu_randn(CA_FLOAT64, SHAPES[s].nd, SHAPES[s].shape, true);
        int64_t C = ca_tensor_shape(x)[1];
        ca_tensor *w = tu_uniform(CA_FLOAT64, 1, &C, 0.5, 1.5, true);
        ca_tensor *b = tu_randn(CA_FLOAT64, 1, &C, true);
        for (int v = 0; v < 4; v++) {
            ca_tensor *in[3] = {x, w, b};
            tu_gradcheck(f_bn, 3, in, &v, 1e-6, 1e-5); /* v == 2: bias is the op's input 1 */
        }
        ca_tensor *all[] = {x, w, b};
        tu_release_n(all, 3);
    }
}

Test(norm, batch_norm_node_and_saved_statistics) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(4, 3, 2), true), *y = NULL;
    ca_tensor *w = tu_randn(CA_FLOAT64, TU_SHAPE(3), true);
    TU_OK(ca_batch_norm(x, w, NULL, 1e-5, &y, NULL, NULL));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "NativeBatchNormBackward0");
    ca_tensor_release(y);
    /* aux: mean [C] and invstd [C] (saved, as PyTorch's result1 and result2), then var */
    ca_tensor *aux[CA_MAX_AUX] = {0};
    ca_attrs a = {.s = {0.0}, .i = {0}};
    ca_tensor *t = tu_from(CA_FLOAT64, TU_SHAPE(2, 2), (double[]){1, 0, 3, 4}, false);
    TU_OK(cai_op_call(CA_OP_BATCH_NORM, 1, &t, &a, &y, aux));
    tu_assert_values(aux[0], (double[]){2, 2}, 1e-15);
    tu_assert_values(aux[1], (double[]){1, 0.5}, 1e-15); /* variances 1 and 4, eps 0 */
    tu_assert_values(aux[2], (double[]){1, 4}, 1e-15);
    tu_assert_values(y, (double[]){-1, -1, 1, 1}, 1e-15);
    ca_tensor *all[] = {x, w, t, y, aux[0], aux[1], aux[2]};
    tu_release_n(all, 7);
}

/* ---------------------------------------------------------------------------------------
 * Compiled backward against eager: loss = sum(batch_norm(x, w, b) * seed), every input's
 * gradient, for each flag combination, and a capture with no eager fallback.
 */
static void bn_loss_grads(ca_tensor *const *in, int which, ca_tensor *seed, ca_tensor **grads) {
    ca_tensor *y = NULL, *p = NULL, *loss = NULL;
    for (int k = 0; k < 3; k++)
        TU_OK(ca_tensor_set_grad(in[k], NULL));
    TU_OK(f_bn(in, &y, &which));
    TU_OK(ca_mul(y, seed, &p));
    TU_OK(ca_sum(p, 0, NULL, false, &loss));
    TU_OK(ca_backward(loss));
    for (int k = 0; k < 3; k++) {
        ca_tensor *g = ca_tensor_grad(in[k]);
        grads[k] = g ? ca_tensor_retain(g) : NULL;
    }
    ca_tensor *all[] = {y, p, loss};
    tu_release_n(all, 3);
}

Test(norm, batch_norm_compiled_matches_eager) {
    ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int k = 0; k < 2; k++)
        for (int s = 0; s < N_SHAPES; s++)
            for (int which = 0; which < 4; which++) {
                ca_tensor *x = tu_randn(dts[k], SHAPES[s].nd, SHAPES[s].shape, true);
                int64_t C = SHAPES[s].shape[1];
                ca_tensor *in[3] = {x, tu_uniform(dts[k], 1, &C, 0.5, 1.5, true),
                                    tu_randn(dts[k], 1, &C, true)};
                ca_tensor *seed = tu_randn(dts[k], SHAPES[s].nd, SHAPES[s].shape, false);
                ca_tensor *eager[3], *comp[3];
                bn_loss_grads(in, which, seed, eager);
                ca_compiled_autograd_reset();
                TU_OK(ca_compiled_autograd_enable(NULL));
                bn_loss_grads(in, which, seed, comp);
                TU_OK(ca_compiled_autograd_disable());
                ca_compiled_counters c;
                ca_compiled_autograd_counters(&c);
                cr_assert(c.captures == 1 && c.eager_fallbacks == 0, "shape %d flags %d", s, which);
                double tol = dts[k] == CA_FLOAT32 ? 1e-4 : 1e-10;
                for (int j = 0; j < 3; j++) {
                    cr_assert_eq(!eager[j], !comp[j], "input %d: gradient in one only", j);
                    if (eager[j])
                        tu_assert_close(comp[j], eager[j], tol, tol);
                }
                tu_release_n(eager, 3);
                tu_release_n(comp, 3);
                tu_release_n(in, 3);
                ca_tensor_release(seed);
                ca_compiled_autograd_reset();
            }
}

/* ---------------------------------------------------------------------------------------
 * Errors
 */
Test(norm, batch_norm_bad_inputs) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3, 4), false), *y = NULL, *m = NULL;
    ca_tensor *w4 = tu_randn(CA_FLOAT32, TU_SHAPE(4), false);
    ca_tensor *w2d = tu_randn(CA_FLOAT32, TU_SHAPE(3, 1), false);
    ca_tensor *w64 = tu_randn(CA_FLOAT64, TU_SHAPE(3), false);
    ca_tensor *x1 = tu_randn(CA_FLOAT32, TU_SHAPE(5), false);
    ca_tensor *i = tu_index(TU_SHAPE(2, 2), (int64_t[]){1, 2, 3, 4});
    TU_FAILS(ca_batch_norm(x, w4, NULL, 1e-5, &y, &m, NULL), CA_STATUS_SHAPE,
             "weight has shape [4]; expected [3]");
    TU_FAILS(ca_batch_norm(x, NULL, w4, 1e-5, &y, &m, NULL), CA_STATUS_SHAPE, "bias has shape");
    TU_FAILS(ca_batch_norm(x, w2d, NULL, 1e-5, &y, &m, NULL), CA_STATUS_SHAPE, "[3, 1]");
    TU_FAILS(ca_batch_norm(x, w64, NULL, 1e-5, &y, &m, NULL), CA_STATUS_DTYPE,
             "weight is float64 but the input is float32");
    TU_FAILS(ca_batch_norm(x1, NULL, NULL, 1e-5, &y, &m, NULL), CA_STATUS_SHAPE,
             "has 1 dims; expected [N, C, *]");
    TU_FAILS(ca_batch_norm(i, NULL, NULL, 1e-5, &y, &m, NULL), CA_STATUS_DTYPE, "int64");
    TU_FAILS(ca_batch_norm(NULL, NULL, NULL, 1e-5, &y, &m, NULL), CA_STATUS_INVALID, "NULL");
    TU_FAILS(ca_batch_norm(x, NULL, NULL, 1e-5, NULL, &m, NULL), CA_STATUS_INVALID, "NULL");
    cr_assert_null(y);
    cr_assert_null(m);
    ca_tensor *all[] = {x, w4, w2d, w64, x1, i};
    tu_release_n(all, 6);
}

/* ---------------------------------------------------------------------------------------
 * Allocation failure: CA_OK or CA_STATUS_NOMEM at every allocation, nothing left alive.
 */
static ca_status sc_batch_norm(void) {
    tu_sc_state s = {0};
    ca_tensor *x = tu_sc_randn(&s, TU_SHAPE(3, 2, 4), true);
    ca_tensor *w = tu_sc_randn(&s, TU_SHAPE(2), true);
    ca_tensor *b = tu_sc_randn(&s, TU_SHAPE(2), true);
    ca_tensor **y = tu_sc_slot(&s), **mean = tu_sc_slot(&s), **var = tu_sc_slot(&s);
    ca_tensor **l = tu_sc_slot(&s);
    TU_SC(&s, ca_batch_norm(x, w, b, 1e-5, y, mean, var));
    TU_SC(&s, ca_sum(*y, 0, NULL, false, l));
    return tu_sc_finish(&s, *l);
}

Test(norm, out_of_memory_at_every_allocation) {
    tu_oom_every_allocation("batch_norm", sc_batch_norm);
}
