/* test_ops_pointwise.c - the pointwise ops (suite `pointwise`): forward values against
 * scalar references in float32 and float64 (contiguous, broadcast, non-contiguous),
 * gradients against finite differences, node names, and the errors of bad inputs.
 *
 * Most ops are table-driven: each op is a case (wrapper, reference, input generator, node
 * name) and gets its own Test, so a failure names the op. Inputs for ops with kinks
 * (relu, abs, clamp, maximum) are drawn away from the kink so finite differences hold.
 */
#include "testutil.h"

#include "autograd/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Input generators: value of logical element i given a uniform u in [0, 1)
 */
typedef double (*gen_fn)(int64_t i, double u);

static double gen_any(int64_t i, double u) {
    return -2.0 + 4.0 * u;
}
static double gen_pos(int64_t i, double u) {
    return 0.5 + 2.5 * u;
}
/* away from 0, both signs */
static double gen_kink0(int64_t i, double u) {
    return (i % 2 ? -1.0 : 1.0) * (0.2 + 1.8 * u);
}
/* away from 0.3, both sides */
static double gen_kink03(int64_t i, double u) {
    return 0.3 + (i % 2 ? -1.0 : 1.0) * (0.2 + u);
}
/* clamp(-0.5, 0.8): inside, below and above, away from both bounds */
static double gen_clamp(int64_t i, double u) {
    switch (i % 3) {
    case 0: return -0.4 + 1.0 * u;
    case 1: return -0.7 - u;
    default: return 1.0 + u;
    }
}
/* softplus(beta 2, threshold 3) switches at x = 1.5 */
static double gen_softplus(int64_t i, double u) {
    return i % 2 ? -2.0 + 3.0 * u : 2.0 + u;
}
/* maximum/minimum: |a| >= 1 and |b| < 0.8, so a and b never tie */
static double gen_sep_a(int64_t i, double u) {
    return (i % 2 ? -1.0 : 1.0) * (1.0 + u);
}
static double gen_sep_b(int64_t i, double u) {
    return -0.8 + 1.6 * u;
}

static uint64_t lcg_state = 12345;
static double lcg_uniform(void) {
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg_state >> 11) * 0x1.0p-53;
}

/* A tensor of `shape` with values gen(i, u). noncontig (ndim >= 2): the transpose of a
 * contiguous tensor, so the values are read through swapped strides. */
static ca_tensor *make_input(ca_dtype dt, int ndim, const int64_t *shape, gen_fn gen,
                             bool noncontig, bool rg) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        v[i] = gen(i, lcg_uniform());
    if (!noncontig) {
        ca_tensor *t = tu_from(dt, ndim, shape, v, rg);
        free(v);
        return t;
    }
    cr_assert(ndim >= 2, "make_input: noncontig needs ndim >= 2");
    int64_t rows = shape[ndim - 2], cols = shape[ndim - 1], outer = n / (rows * cols);
    int64_t bshape[CA_MAX_DIMS], strides[CA_MAX_DIMS];
    memcpy(bshape, shape, sizeof(int64_t) * (size_t)ndim);
    bshape[ndim - 2] = cols;
    bshape[ndim - 1] = rows;
    double *bv = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t o = 0; o < outer; o++)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++)
                bv[o * rows * cols + c * rows + r] = v[o * rows * cols + r * cols + c];
    ca_tensor *base = tu_from(dt, ndim, bshape, bv, false);
    free(v);
    free(bv);
    memcpy(strides, ca_tensor_strides(base), sizeof(int64_t) * (size_t)ndim);
    strides[ndim - 2] = 1;
    strides[ndim - 1] = rows;
    ca_tensor *view = NULL;
    TU_OK(cai_tensor_alias(base, ndim, shape, strides, 0, &view));
    ca_tensor_release(base);
    cr_assert(!ca_tensor_is_contiguous(view), "make_input: view is contiguous");
    if (rg)
        TU_OK(ca_tensor_set_requires_grad(view, true));
    return view;
}

/* Element of t that broadcasts to logical element `flat` of an output of out shape. */
static double bcast_get(const ca_tensor *t, int out_ndim, const int64_t *out_shape, int64_t flat) {
    int nd = ca_tensor_ndim(t);
    const int64_t *sh = ca_tensor_shape(t);
    int64_t idx = 0, mul = 1;
    for (int d = out_ndim - 1; d >= 0; d--) {
        int64_t c = flat % out_shape[d];
        flat /= out_shape[d];
        int td = d - (out_ndim - nd);
        if (td < 0)
            continue;
        idx += (sh[td] == 1 ? 0 : c) * mul;
        mul *= sh[td];
    }
    return tu_get(t, idx);
}

static void assert_shape(const ca_tensor *t, int ndim, const int64_t *shape, const char *what) {
    cr_assert_eq(ca_tensor_ndim(t), ndim, "%s: ndim %d, expected %d", what, ca_tensor_ndim(t),
                 ndim);
    for (int d = 0; d < ndim; d++)
        cr_assert_eq(ca_tensor_shape(t)[d], shape[d], "%s: dim %d is %lld, expected %lld", what, d,
                     (long long)ca_tensor_shape(t)[d], (long long)shape[d]);
}

static bool near(double a, double b, double atol, double rtol) {
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b))
        return a == b;
    return fabs(a - b) <= atol + rtol * fabs(b);
}

static double tol_abs(ca_dtype dt) {
    return dt == CA_FLOAT32 ? 1e-5 : 1e-12;
}
static double tol_rel(ca_dtype dt) {
    return dt == CA_FLOAT32 ? 1e-5 : 1e-12;
}

#define GC_ATOL 1e-6
#define GC_RTOL 1e-6

/* ---------------------------------------------------------------------------------------
 * Unary ops (and scalar forms with a fixed scalar)
 */
typedef ca_status (*unary_fn)(ca_tensor *x, ca_tensor **out);
typedef double (*ref1_fn)(double x);

typedef struct {
    const char *name;
    unary_fn fn;
    ref1_fn ref;
    gen_fn gen;
    const char *node; /* grad_fn name */
} unary_case;

static ca_status call_unary(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ((const unary_case *)ctx)->fn(in[0], out);
}

static void check_unary_values(const unary_case *c, ca_tensor *x, const char *what) {
    ca_tensor *y = NULL;
    ca_status st = c->fn(x, &y);
    cr_assert_eq(st, CA_OK, "%s (%s): failed: %s", c->name, what, ca_last_error());
    cr_assert_eq(ca_tensor_dtype(y), ca_tensor_dtype(x), "%s (%s): dtype changed", c->name, what);
    assert_shape(y, ca_tensor_ndim(x), ca_tensor_shape(x), c->name);
    ca_dtype dt = ca_tensor_dtype(x);
    for (int64_t i = 0; i < ca_tensor_numel(x); i++) {
        double xv = tu_get(x, i), got = tu_get(y, i), want = c->ref(xv);
        cr_assert(near(got, want, tol_abs(dt), tol_rel(dt)),
                  "%s (%s, %s): element %lld: f(%.9g) = %.12g, expected %.12g", c->name, what,
                  ca_dtype_name(dt), (long long)i, xv, got, want);
    }
    ca_tensor_release(y);
}

static void check_unary_forward(const unary_case *c) {
    const ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int k = 0; k < 2; k++) {
        ca_tensor *x = make_input(dts[k], TU_SHAPE(3, 4), c->gen, false, false);
        check_unary_values(c, x, "contiguous");
        ca_tensor_release(x);
        x = make_input(dts[k], TU_SHAPE(2, 3, 4), c->gen, true, false);
        check_unary_values(c, x, "non-contiguous");
        ca_tensor_release(x);
    }
    /* the recorded node, and no node without requires_grad */
    ca_tensor *x = make_input(CA_FLOAT64, TU_SHAPE(5), c->gen, false, true), *y = NULL;
    TU_OK(c->fn(x, &y));
    const char *nm = ca_tensor_grad_fn_name(y);
    cr_assert(nm && strcmp(nm, c->node) == 0, "%s: grad_fn is %s, expected %s", c->name,
              nm ? nm : "NULL", c->node);
    ca_tensor_release(y);
    TU_OK(ca_tensor_set_requires_grad(x, false));
    TU_OK(c->fn(x, &y));
    cr_assert(ca_tensor_grad_fn_name(y) == NULL && !ca_tensor_requires_grad(y),
              "%s: recorded a node for an input without requires_grad", c->name);
    ca_tensor_release(y);
    ca_tensor_release(x);
}

static void check_unary_grad(const unary_case *c) {
    ca_tensor *x = make_input(CA_FLOAT64, TU_SHAPE(3, 4), c->gen, false, true);
    tu_gradcheck(call_unary, 1, &x, (void *)c, GC_ATOL, GC_RTOL);
    ca_tensor_release(x);
    x = make_input(CA_FLOAT64, TU_SHAPE(2, 4, 3), c->gen, true, true);
    tu_gradcheck(call_unary, 1, &x, (void *)c, GC_ATOL, GC_RTOL);
    ca_tensor_release(x);
}

#define UNARY_TESTS(NAME, FN, REF, GEN, NODE)                                                      \
    static const unary_case case_##NAME = {#NAME, FN, REF, GEN, NODE};                             \
    Test(pointwise, NAME##_forward) {                                                              \
        check_unary_forward(&case_##NAME);                                                         \
    }                                                                                              \
    Test(pointwise, NAME##_grad) {                                                                 \
        check_unary_grad(&case_##NAME);                                                            \
    }

/* references */
static double r_neg(double x) {
    return -x;
}
static double r_rsqrt(double x) {
    return 1.0 / sqrt(x);
}
static double r_sigmoid(double x) {
    return 1.0 / (1.0 + exp(-x));
}
static double r_relu(double x) {
    return x > 0 ? x : 0;
}
static double r_leaky(double x) {
    return x > 0 ? x : 0.1 * x;
}
static double r_gelu(double x) {
    return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}
static double r_gelu_tanh(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double r_silu(double x) {
    return x / (1.0 + exp(-x));
}
static double r_softplus(double x) {
    return 2.0 * x > 3.0 ? x : log1p(exp(2.0 * x)) / 2.0;
}
static double r_clamp(double x) {
    return x < -0.5 ? -0.5 : x > 0.8 ? 0.8 : x;
}
static double r_clamp_min(double x) {
    return x < -0.5 ? -0.5 : x;
}
static double r_clamp_max(double x) {
    return x > 0.8 ? 0.8 : x;
}
static double r_add_s(double x) {
    return x + 1.5;
}
static double r_sub_s(double x) {
    return x - 1.5;
}
static double r_rsub_s(double x) {
    return 1.5 - x;
}
static double r_mul_s(double x) {
    return x * -2.5;
}
static double r_div_s(double x) {
    return x / 4.0;
}
static double r_rdiv_s(double x) {
    return 3.0 / x;
}
static double r_pow3(double x) {
    return x * x * x;
}
static double r_pow_half(double x) {
    return sqrt(x);
}
static double r_pow_m15(double x) {
    return pow(x, -1.5);
}
static double r_pow0(double x) {
    return 1.0;
}
static double r_rpow(double x) {
    return pow(2.5, x);
}
static double r_max_s(double x) {
    return x > 0.3 ? x : 0.3;
}
static double r_min_s(double x) {
    return x < 0.3 ? x : 0.3;
}

/* wrappers with fixed parameters */
static ca_status w_leaky(ca_tensor *x, ca_tensor **o) {
    return ca_leaky_relu(x, 0.1, o);
}
static ca_status w_gelu(ca_tensor *x, ca_tensor **o) {
    return ca_gelu(x, CA_GELU_NONE, o);
}
static ca_status w_gelu_tanh(ca_tensor *x, ca_tensor **o) {
    return ca_gelu(x, CA_GELU_TANH, o);
}
static ca_status w_softplus(ca_tensor *x, ca_tensor **o) {
    return ca_softplus(x, 2.0, 3.0, o);
}
static ca_status w_clamp(ca_tensor *x, ca_tensor **o) {
    return ca_clamp(x, -0.5, 0.8, o);
}
static ca_status w_clamp_min(ca_tensor *x, ca_tensor **o) {
    return ca_clamp(x, -0.5, NAN, o);
}
static ca_status w_clamp_max(ca_tensor *x, ca_tensor **o) {
    return ca_clamp(x, NAN, 0.8, o);
}
static ca_status w_add_s(ca_tensor *x, ca_tensor **o) {
    return ca_add_scalar(x, 1.5, o);
}
static ca_status w_sub_s(ca_tensor *x, ca_tensor **o) {
    return ca_sub_scalar(x, 1.5, o);
}
static ca_status w_rsub_s(ca_tensor *x, ca_tensor **o) {
    return ca_rsub_scalar(x, 1.5, o);
}
static ca_status w_mul_s(ca_tensor *x, ca_tensor **o) {
    return ca_mul_scalar(x, -2.5, o);
}
static ca_status w_div_s(ca_tensor *x, ca_tensor **o) {
    return ca_div_scalar(x, 4.0, o);
}
static ca_status w_rdiv_s(ca_tensor *x, ca_tensor **o) {
    return ca_rdiv_scalar(x, 3.0, o);
}
static ca_status w_pow3(ca_tensor *x, ca_tensor **o) {
    return ca_pow_scalar(x, 3.0, o);
}
static ca_status w_pow_half(ca_tensor *x, ca_tensor **o) {
    return ca_pow_scalar(x, 0.5, o);
}
static ca_status w_pow_m15(ca_tensor *x, ca_tensor **o) {
    return ca_pow_scalar(x, -1.5, o);
}
static ca_status w_pow0(ca_tensor *x, ca_tensor **o) {
    return ca_pow_scalar(x, 0.0, o);
}
static ca_status w_rpow(ca_tensor *x, ca_tensor **o) {
    return ca_rpow_scalar(x, 2.5, o);
}
static ca_status w_max_s(ca_tensor *x, ca_tensor **o) {
    return ca_maximum_scalar(x, 0.3, o);
}
static ca_status w_min_s(ca_tensor *x, ca_tensor **o) {
    return ca_minimum_scalar(x, 0.3, o);
}

UNARY_TESTS(neg, ca_neg, r_neg, gen_any, "NegBackward0")
UNARY_TESTS(exp, ca_exp, exp, gen_any, "ExpBackward0")
UNARY_TESTS(log, ca_log, log, gen_pos, "LogBackward0")
UNARY_TESTS(sqrt, ca_sqrt, sqrt, gen_pos, "SqrtBackward0")
UNARY_TESTS(rsqrt, ca_rsqrt, r_rsqrt, gen_pos, "RsqrtBackward0")
UNARY_TESTS(abs, ca_abs, fabs, gen_kink0, "AbsBackward0")
UNARY_TESTS(sin, ca_sin, sin, gen_any, "SinBackward0")
UNARY_TESTS(cos, ca_cos, cos, gen_any, "CosBackward0")
UNARY_TESTS(tanh, ca_tanh, tanh, gen_any, "TanhBackward0")
UNARY_TESTS(sigmoid, ca_sigmoid, r_sigmoid, gen_any, "SigmoidBackward0")
UNARY_TESTS(relu, ca_relu, r_relu, gen_kink0, "ReluBackward0")
UNARY_TESTS(leaky_relu, w_leaky, r_leaky, gen_kink0, "LeakyReluBackward0")
UNARY_TESTS(gelu, w_gelu, r_gelu, gen_any, "GeluBackward0")
UNARY_TESTS(gelu_tanh, w_gelu_tanh, r_gelu_tanh, gen_any, "GeluBackward0")
UNARY_TESTS(silu, ca_silu, r_silu, gen_any, "SiluBackward0")
UNARY_TESTS(softplus, w_softplus, r_softplus, gen_softplus, "SoftplusBackward0")
UNARY_TESTS(clamp, w_clamp, r_clamp, gen_clamp, "ClampBackward1")
UNARY_TESTS(clamp_min_only, w_clamp_min, r_clamp_min, gen_clamp, "ClampBackward1")
UNARY_TESTS(clamp_max_only, w_clamp_max, r_clamp_max, gen_clamp, "ClampBackward1")
UNARY_TESTS(add_scalar, w_add_s, r_add_s, gen_any, "AddBackward1")
UNARY_TESTS(sub_scalar, w_sub_s, r_sub_s, gen_any, "SubBackward1")
UNARY_TESTS(rsub_scalar, w_rsub_s, r_rsub_s, gen_any, "RsubBackward1")
UNARY_TESTS(mul_scalar, w_mul_s, r_mul_s, gen_any, "MulBackward1")
UNARY_TESTS(div_scalar, w_div_s, r_div_s, gen_any, "DivBackward1")
UNARY_TESTS(rdiv_scalar, w_rdiv_s, r_rdiv_s, gen_kink0, "RdivBackward1")
UNARY_TESTS(pow_scalar_3, w_pow3, r_pow3, gen_any, "PowBackward0")
UNARY_TESTS(pow_scalar_half, w_pow_half, r_pow_half, gen_pos, "PowBackward0")
UNARY_TESTS(pow_scalar_neg, w_pow_m15, r_pow_m15, gen_pos, "PowBackward0")
UNARY_TESTS(pow_scalar_0, w_pow0, r_pow0, gen_any, "PowBackward0")
UNARY_TESTS(rpow_scalar, w_rpow, r_rpow, gen_any, "PowBackward2")
UNARY_TESTS(maximum_scalar, w_max_s, r_max_s, gen_kink03, "ClampMinBackward0")
UNARY_TESTS(minimum_scalar, w_min_s, r_min_s, gen_kink03, "ClampMaxBackward0")

/* ---------------------------------------------------------------------------------------
 * Binary ops
 */
typedef ca_status (*binary_fn)(ca_tensor *a, ca_tensor *b, ca_tensor **out);
typedef double (*ref2_fn)(double a, double b);

typedef struct {
    const char *name;
    binary_fn fn;
    ref2_fn ref;
    gen_fn gen_a, gen_b;
    const char *node;
} binary_case;

static ca_status call_binary(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ((const binary_case *)ctx)->fn(in[0], in[1], out);
}

/* shapes of a and b for the broadcast configurations */
typedef struct {
    int na;
    int64_t sa[3];
    int nb;
    int64_t sb[3];
    bool noncontig_a;
    const char *what;
} bin_config;

static const bin_config bin_configs[] = {
    {2, {3, 4}, 2, {3, 4}, false, "same shape"},
    {2, {3, 4}, 1, {4}, false, "b broadcast [4]"},
    {2, {3, 1}, 2, {1, 4}, false, "both broadcast [3,1]x[1,4]"},
    {3, {2, 3, 4}, 2, {3, 1}, false, "rank broadcast [2,3,4]x[3,1]"},
    {2, {3, 4}, 2, {1, 4}, true, "non-contiguous a"},
};

static void check_binary_values(const binary_case *c, ca_dtype dt, const bin_config *cf) {
    ca_tensor *a = make_input(dt, cf->na, cf->sa, c->gen_a, cf->noncontig_a, false);
    ca_tensor *b = make_input(dt, cf->nb, cf->sb, c->gen_b, false, false), *y = NULL;
    ca_status st = c->fn(a, b, &y);
    cr_assert_eq(st, CA_OK, "%s (%s): failed: %s", c->name, cf->what, ca_last_error());
    cr_assert_eq(ca_tensor_dtype(y), dt, "%s: dtype changed", c->name);
    int ndim = ca_tensor_ndim(y);
    const int64_t *shape = ca_tensor_shape(y);
    cr_assert_eq(ndim, cf->na > cf->nb ? cf->na : cf->nb, "%s (%s): ndim %d", c->name, cf->what,
                 ndim);
    for (int64_t i = 0; i < ca_tensor_numel(y); i++) {
        double av = bcast_get(a, ndim, shape, i), bv = bcast_get(b, ndim, shape, i);
        double got = tu_get(y, i), want = c->ref(av, bv);
        cr_assert(near(got, want, tol_abs(dt), tol_rel(dt)),
                  "%s (%s, %s): element %lld: f(%.9g, %.9g) = %.12g, expected %.12g", c->name,
                  cf->what, ca_dtype_name(dt), (long long)i, av, bv, got, want);
    }
    ca_tensor_release(a);
    ca_tensor_release(b);
    ca_tensor_release(y);
}

static void check_binary_forward(const binary_case *c) {
    for (size_t k = 0; k < sizeof bin_configs / sizeof bin_configs[0]; k++) {
        check_binary_values(c, CA_FLOAT32, &bin_configs[k]);
        check_binary_values(c, CA_FLOAT64, &bin_configs[k]);
    }
    ca_tensor *a = make_input(CA_FLOAT64, TU_SHAPE(3), c->gen_a, false, true);
    ca_tensor *b = make_input(CA_FLOAT64, TU_SHAPE(3), c->gen_b, false, false), *y = NULL;
    TU_OK(c->fn(a, b, &y));
    const char *nm = ca_tensor_grad_fn_name(y);
    cr_assert(nm && strcmp(nm, c->node) == 0, "%s: grad_fn is %s, expected %s", c->name,
              nm ? nm : "NULL", c->node);
    ca_tensor_release(a);
    ca_tensor_release(b);
    ca_tensor_release(y);
}

static void check_binary_grad(const binary_case *c) {
    for (size_t k = 0; k < sizeof bin_configs / sizeof bin_configs[0]; k++) {
        const bin_config *cf = &bin_configs[k];
        ca_tensor *in[2] = {make_input(CA_FLOAT64, cf->na, cf->sa, c->gen_a, cf->noncontig_a, true),
                            make_input(CA_FLOAT64, cf->nb, cf->sb, c->gen_b, false, true)};
        tu_gradcheck(call_binary, 2, in, (void *)c, GC_ATOL, GC_RTOL);
        /* only one side requires grad: the rule must skip the other */
        TU_OK(ca_tensor_set_requires_grad(in[k % 2], false));
        tu_gradcheck(call_binary, 2, in, (void *)c, GC_ATOL, GC_RTOL);
        ca_tensor_release(in[0]);
        ca_tensor_release(in[1]);
    }
}

#define BINARY_TESTS(NAME, FN, REF, GA, GB, NODE)                                                  \
    static const binary_case bcase_##NAME = {#NAME, FN, REF, GA, GB, NODE};                        \
    Test(pointwise, NAME##_forward) {                                                              \
        check_binary_forward(&bcase_##NAME);                                                       \
    }                                                                                              \
    Test(pointwise, NAME##_grad) {                                                                 \
        check_binary_grad(&bcase_##NAME);                                                          \
    }

static double r_add(double a, double b) {
    return a + b;
}
static double r_sub(double a, double b) {
    return a - b;
}
static double r_mul(double a, double b) {
    return a * b;
}
static double r_div(double a, double b) {
    return a / b;
}
static double r_maximum(double a, double b) {
    return a > b ? a : b;
}
static double r_minimum(double a, double b) {
    return a < b ? a : b;
}

BINARY_TESTS(add, ca_add, r_add, gen_any, gen_any, "AddBackward0")
BINARY_TESTS(sub, ca_sub, r_sub, gen_any, gen_any, "SubBackward0")
BINARY_TESTS(mul, ca_mul, r_mul, gen_any, gen_any, "MulBackward0")
BINARY_TESTS(div, ca_div, r_div, gen_any, gen_kink0, "DivBackward0")
BINARY_TESTS(pow, ca_pow, pow, gen_pos, gen_any, "PowBackward1")
BINARY_TESTS(maximum, ca_maximum, r_maximum, gen_sep_a, gen_sep_b, "MaximumBackward0")
BINARY_TESTS(minimum, ca_minimum, r_minimum, gen_sep_a, gen_sep_b, "MinimumBackward0")

/* ---------------------------------------------------------------------------------------
 * Gradients at special points, checked by hand
 */
/* backward of sum(f(a, b)) and the grads of a and b against expected values */
static void check_grads_2(binary_fn fn, ca_tensor *a, ca_tensor *b, const double *ga,
                          const double *gb) {
    ca_tensor *y = NULL, *loss = NULL;
    TU_OK(fn(a, b, &y));
    TU_OK(ca_sum(y, 0, NULL, false, &loss));
    TU_OK(ca_backward(loss));
    tu_assert_values(ca_tensor_grad(a), ga, 1e-12);
    tu_assert_values(ca_tensor_grad(b), gb, 1e-12);
    ca_tensor_release(y);
    ca_tensor_release(loss);
}

Test(pointwise, maximum_ties_split_gradient) {
    ca_tensor *a = tu_from(CA_FLOAT64, TU_SHAPE(3), (double[]){1, 2, 3}, true);
    ca_tensor *b = tu_from(CA_FLOAT64, TU_SHAPE(3), (double[]){1, 0, 5}, true);
    check_grads_2(ca_maximum, a, b, (double[]){0.5, 1, 0}, (double[]){0.5, 0, 1});
    ca_tensor_release(a);
    ca_tensor_release(b);
}

Test(pointwise, minimum_ties_split_gradient) {
    ca_tensor *a = tu_from(CA_FLOAT64, TU_SHAPE(3), (double[]){1, 2, 3}, true);
    ca_tensor *b = tu_from(CA_FLOAT64, TU_SHAPE(3), (double[]){1, 0, 5}, true);
    check_grads_2(ca_minimum, a, b, (double[]){0.5, 0, 1}, (double[]){0.5, 1, 0});
    ca_tensor_release(a);
    ca_tensor_release(b);
}

/* backward of sum(f(x)) against expected values of x.grad */
static void check_grad_1(unary_fn fn, ca_tensor *x, const double *gx) {
    ca_tensor *y = NULL, *loss = NULL;
    TU_OK(fn(x, &y));
    TU_OK(ca_sum(y, 0, NULL, false, &loss));
    TU_OK(ca_backward(loss));
    tu_assert_values(ca_tensor_grad(x), gx, 1e-12);
    ca_tensor_release(y);
    ca_tensor_release(loss);
}

Test(pointwise, relu_abs_clamp_grad_at_kinks) {
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(3), (double[]){-1, 0, 2}, true);
    check_grad_1(ca_relu, x, (double[]){0, 0, 1}); /* PyTorch: 0 at 0 */
    TU_OK(ca_tensor_set_grad(x, NULL));
    check_grad_1(ca_abs, x, (double[]){-1, 0, 1}); /* sign(0) = 0 */
    ca_tensor_release(x);
    ca_tensor *c = tu_from(CA_FLOAT64, TU_SHAPE(4), (double[]){-0.5, 0, 0.8, 1}, true);
    check_grad_1(w_clamp, c, (double[]){1, 1, 1, 0}); /* bounds included, as PyTorch */
    ca_tensor_release(c);
}

Test(pointwise, pow_scalar_zero_exponent_grad_is_zero) {
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(3), (double[]){0, 2, -3}, true);
    check_grad_1(w_pow0, x, (double[]){0, 0, 0});
    ca_tensor_release(x);
}

static ca_status w_rpow0(ca_tensor *x, ca_tensor **o) {
    return ca_rpow_scalar(x, 0.0, o);
}

Test(pointwise, rpow_zero_base_grad_like_pytorch) {
    /* 0^x: PyTorch's gradient is 0 where x >= 0 */
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){0, 2}, true);
    check_grad_1(w_rpow0, x, (double[]){0, 0});
    ca_tensor_release(x);
}

Test(pointwise, pow_zero_base_grad) {
    /* d/db a^b at a = 0 is 0 (PyTorch masks it); d/da 0^2 = 0 */
    ca_tensor *a = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){0, 2}, true);
    ca_tensor *b = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){2, 3}, true);
    check_grads_2(ca_pow, a, b, (double[]){0, 12}, (double[]){0, 8 * log(2.0)});
    ca_tensor_release(a);
    ca_tensor_release(b);
}

Test(pointwise, add_with_alpha_attr) {
    /* the ADD row's alpha (attrs.s[0]) in forward and backward */
    ca_tensor *a = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){1, 2}, true);
    ca_tensor *b = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){10, 20}, true), *y = NULL,
              *loss = NULL;
    ca_attrs at = {.s = {-3.0, 0}};
    TU_OK(cai_op_call2(CA_OP_ADD, a, b, &at, &y));
    tu_assert_values(y, (double[]){-29, -58}, 1e-12);
    TU_OK(ca_sum(y, 0, NULL, false, &loss));
    TU_OK(ca_backward(loss));
    tu_assert_values(ca_tensor_grad(a), (double[]){1, 1}, 1e-12);
    tu_assert_values(ca_tensor_grad(b), (double[]){-3, -3}, 1e-12);
    ca_tensor_release(y);
    ca_tensor_release(loss);
    at.s[0] = 2.0;
    TU_OK(cai_op_call2(CA_OP_SUB, a, b, &at, &y));
    tu_assert_values(y, (double[]){-19, -38}, 1e-12);
    TU_OK(ca_sum(y, 0, NULL, false, &loss));
    TU_OK(ca_tensor_set_grad(b, NULL));
    TU_OK(ca_backward(loss));
    tu_assert_values(ca_tensor_grad(b), (double[]){-2, -2}, 1e-12);
    ca_tensor_release(y);
    ca_tensor_release(loss);
    ca_tensor_release(a);
    ca_tensor_release(b);
}

/* The generic row is differentiable (double backward reaches it, ops_pw_deriv.c), but a
 * kernel op without a gradient (a comparison) records no node. */
Test(pointwise, generic_pw_row_runs_any_kernel_op) {
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(3), (double[]){1, -2, 3}, true), *y = NULL;
    ca_attrs at = {.i = {KPW_SQUARE}};
    TU_OK(cai_op_call1(CA_OP_PW, x, &at, &y));
    tu_assert_values(y, (double[]){1, 4, 9}, 0);
    cr_assert(ca_tensor_requires_grad(y), "square through the PW row records its node");
    ca_tensor_release(y);
    at = (ca_attrs){.i = {KPW_GT_S}, .s = {0}};
    TU_OK(cai_op_call1(CA_OP_PW, x, &at, &y));
    tu_assert_values(y, (double[]){1, 0, 1}, 0);
    cr_assert(!ca_tensor_requires_grad(y), "a comparison has no gradient");
    ca_tensor_release(y);
    at.i[0] = KPW_MUL; /* binary op with one input */
    TU_FAILS(cai_op_call1(CA_OP_PW, x, &at, &y), CA_STATUS_INVALID, "takes 2 inputs");
    ca_tensor_release(x);
}

/* ---------------------------------------------------------------------------------------
 * where
 */
typedef struct {
    bool scalar_b;
} where_ctx;

static ca_status call_where(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    if (((where_ctx *)ctx)->scalar_b)
        return ca_where_scalar(in[0], in[1], -7.0, out);
    return ca_where(in[0], in[1], in[2], out);
}

Test(pointwise, where_forward) {
    const ca_dtype dts[2] = {CA_FLOAT32, CA_FLOAT64};
    for (int k = 0; k < 2; k++) {
        /* cond [3,1] (any dtype, nonzero = true), a [3,4] non-contiguous, b [4] */
        ca_tensor *c = tu_from(CA_INT64, TU_SHAPE(3, 1), (double[]){1, 0, -2}, false);
        ca_tensor *a = make_input(dts[k], TU_SHAPE(3, 4), gen_any, true, false);
        ca_tensor *b = make_input(dts[k], TU_SHAPE(4), gen_any, false, false), *y = NULL;
        TU_OK(ca_where(c, a, b, &y));
        assert_shape(y, TU_SHAPE(3, 4), "where");
        for (int64_t i = 0; i < 12; i++) {
            double want = (i / 4 != 1) ? tu_get(a, i) : tu_get(b, i % 4);
            cr_assert_eq(tu_get(y, i), want, "where (%s): element %lld", ca_dtype_name(dts[k]),
                         (long long)i);
        }
        ca_tensor_release(y);
        /* float cond, broadcast over the other way */
        ca_tensor *cf = tu_from(dts[k], TU_SHAPE(4), (double[]){0, 0.5, 0, 1}, false);
        TU_OK(ca_where(cf, a, b, &y));
        for (int64_t i = 0; i < 12; i++) {
            double want = (i % 4 == 1 || i % 4 == 3) ? tu_get(a, i) : tu_get(b, i % 4);
            cr_assert_eq(tu_get(y, i), want, "where float cond: element %lld", (long long)i);
        }
        ca_tensor_release(y);
        ca_tensor_release(cf);
        ca_tensor_release(c);
        ca_tensor_release(a);
        ca_tensor_release(b);
    }
}

Test(pointwise, where_grad) {
    where_ctx ctx = {false};
    ca_tensor *in[3] = {tu_from(CA_FLOAT64, TU_SHAPE(3, 1), (double[]){1, 0, 1}, false),
                        make_input(CA_FLOAT64, TU_SHAPE(3, 4), gen_any, true, true),
                        make_input(CA_FLOAT64, TU_SHAPE(4), gen_any, false, true)};
    tu_gradcheck(call_where, 3, in, &ctx, GC_ATOL, GC_RTOL);
    ca_tensor *y = NULL;
    TU_OK(ca_where(in[0], in[1], in[2], &y));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "WhereBackward0");
    ca_tensor_release(y);
    for (int k = 0; k < 3; k++)
        ca_tensor_release(in[k]);
}

Test(pointwise, where_cond_gets_no_grad) {
    /* a float cond that requires grad must not get a gradient */
    ca_tensor *c = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){1, 0}, true);
    ca_tensor *a = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){1, 2}, true);
    ca_tensor *b = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){3, 4}, true), *y = NULL,
              *loss = NULL;
    TU_OK(ca_where(c, a, b, &y));
    TU_OK(ca_sum(y, 0, NULL, false, &loss));
    TU_OK(ca_backward(loss));
    cr_assert_null(ca_tensor_grad(c), "cond got a gradient");
    tu_assert_values(ca_tensor_grad(a), (double[]){1, 0}, 0);
    tu_assert_values(ca_tensor_grad(b), (double[]){0, 1}, 0);
    ca_tensor *all[] = {c, a, b, y, loss};
    for (int k = 0; k < 5; k++)
        ca_tensor_release(all[k]);
}

Test(pointwise, where_scalar_forward_and_grad) {
    ca_tensor *c = tu_from(CA_FLOAT32, TU_SHAPE(2, 1), (double[]){0, 1}, false);
    ca_tensor *a = tu_from(CA_FLOAT32, TU_SHAPE(3), (double[]){1, 2, 3}, false), *y = NULL;
    TU_OK(ca_where_scalar(c, a, -7.0, &y)); /* broadcasts to [2, 3] like where */
    assert_shape(y, TU_SHAPE(2, 3), "where_scalar");
    tu_assert_values(y, (double[]){-7, -7, -7, 1, 2, 3}, 0);
    ca_tensor_release(y);
    ca_tensor_release(a);
    ca_tensor_release(c);

    where_ctx ctx = {true};
    ca_tensor *in[2] = {tu_from(CA_INT64, TU_SHAPE(4), (double[]){1, 0, 0, 3}, false),
                        make_input(CA_FLOAT64, TU_SHAPE(3, 4), gen_any, true, true)};
    tu_gradcheck(call_where, 2, in, &ctx, GC_ATOL, GC_RTOL);
    ca_tensor_release(in[0]);
    ca_tensor_release(in[1]);
}

Test(pointwise, where_bad_inputs) {
    ca_tensor *c = tu_from(CA_INT64, TU_SHAPE(2), (double[]){1, 0}, false);
    ca_tensor *a = tu_randn(CA_FLOAT32, TU_SHAPE(3), false);
    ca_tensor *b = tu_randn(CA_FLOAT64, TU_SHAPE(2), false), *y = NULL;
    TU_FAILS(ca_where(c, a, a, &y), CA_STATUS_SHAPE, "[3]");
    TU_FAILS(ca_where(c, b, a, &y), CA_STATUS_DTYPE, "ca_to_dtype");
    TU_FAILS(ca_where(NULL, a, a, &y), CA_STATUS_INVALID, "cond");
    TU_FAILS(ca_where_scalar(c, NULL, 1.0, &y), CA_STATUS_INVALID, "'a'");
    cr_assert_null(y);
    ca_tensor_release(c);
    ca_tensor_release(a);
    ca_tensor_release(b);
}

/* ---------------------------------------------------------------------------------------
 * Comparisons: 1 or 0 in the inputs' dtype, never a gradient
 */
typedef struct {
    const char *name;
    binary_fn fn;
    ca_status (*sfn)(ca_tensor *, double, ca_tensor **);
    int (*ref)(double, double);
} cmp_case;

static int c_lt(double a, double b) {
    return a < b;
}
static int c_le(double a, double b) {
    return a <= b;
}
static int c_gt(double a, double b) {
    return a > b;
}
static int c_ge(double a, double b) {
    return a >= b;
}
static int c_eq(double a, double b) {
    return a == b;
}
static int c_ne(double a, double b) {
    return a != b;
}

static void check_compare(const cmp_case *c) {
    const ca_dtype dts[3] = {CA_FLOAT32, CA_FLOAT64, CA_INT64};
    const double av[6] = {1, 2, 3, -1, 0, 5}, bv[3] = {1, 3, 2};
    for (int k = 0; k < 3; k++) {
        ca_tensor *a = tu_from(dts[k], TU_SHAPE(2, 3), av, false);
        ca_tensor *b = tu_from(dts[k], TU_SHAPE(3), bv, false), *y = NULL;
        TU_OK(c->fn(a, b, &y));
        cr_assert_eq(ca_tensor_dtype(y), CA_BOOL, "%s: result dtype is not bool", c->name);
        for (int64_t i = 0; i < 6; i++)
            cr_assert_eq(tu_get(y, i), (double)c->ref(av[i], bv[i % 3]), "%s (%s): element %lld",
                         c->name, ca_dtype_name(dts[k]), (long long)i);
        ca_tensor_release(y);
        TU_OK(c->sfn(a, 2.0, &y));
        cr_assert_eq(ca_tensor_dtype(y), CA_BOOL, "%s_scalar: result dtype", c->name);
        for (int64_t i = 0; i < 6; i++)
            cr_assert_eq(tu_get(y, i), (double)c->ref(av[i], 2.0), "%s_scalar (%s): element %lld",
                         c->name, ca_dtype_name(dts[k]), (long long)i);
        ca_tensor_release(y);
        ca_tensor_release(a);
        ca_tensor_release(b);
    }
    /* no node even when an input requires grad */
    ca_tensor *a = tu_randn(CA_FLOAT64, TU_SHAPE(3), true), *y = NULL;
    TU_OK(c->fn(a, a, &y));
    cr_assert(!ca_tensor_requires_grad(y) && !ca_tensor_grad_fn_name(y), "%s recorded a node",
              c->name);
    ca_tensor_release(y);
    TU_OK(c->sfn(a, 0.0, &y));
    cr_assert(!ca_tensor_requires_grad(y), "%s_scalar recorded a node", c->name);
    ca_tensor_release(y);
    ca_tensor_release(a);
}

#define CMP_TEST(NAME, REF)                                                                        \
    Test(pointwise, NAME##_compare) {                                                              \
        const cmp_case c = {#NAME, ca_##NAME, ca_##NAME##_scalar, REF};                            \
        check_compare(&c);                                                                         \
    }

CMP_TEST(lt, c_lt)
CMP_TEST(le, c_le)
CMP_TEST(gt, c_gt)
CMP_TEST(ge, c_ge)
CMP_TEST(eq, c_eq)
CMP_TEST(ne, c_ne)

Test(pointwise, compare_nan) {
    ca_tensor *a = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){NAN, 1}, false), *y = NULL;
    TU_OK(ca_eq(a, a, &y));
    tu_assert_values(y, (double[]){0, 1}, 0);
    ca_tensor_release(y);
    TU_OK(ca_ne(a, a, &y));
    tu_assert_values(y, (double[]){1, 0}, 0);
    ca_tensor_release(y);
    ca_tensor_release(a);
}

/* ---------------------------------------------------------------------------------------
 * to_dtype
 */
Test(pointwise, to_dtype_forward) {
    const double v[4] = {1.5, -2.25, 3.0e10, 0.1};
    ca_tensor *x32 = tu_from(CA_FLOAT32, TU_SHAPE(2, 2), v, false), *y = NULL;
    TU_OK(ca_to_dtype(x32, CA_FLOAT64, &y));
    cr_assert_eq(ca_tensor_dtype(y), CA_FLOAT64);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(tu_get(y, i), (double)(float)v[i], "f32->f64 element %d", i);
    ca_tensor_release(y);

    ca_tensor *x64 = make_input(CA_FLOAT64, TU_SHAPE(3, 4), gen_any, true, false);
    TU_OK(ca_to_dtype(x64, CA_FLOAT32, &y)); /* non-contiguous source */
    cr_assert_eq(ca_tensor_dtype(y), CA_FLOAT32);
    assert_shape(y, TU_SHAPE(3, 4), "to_dtype");
    for (int i = 0; i < 12; i++)
        cr_assert_eq(tu_get(y, i), (double)(float)tu_get(x64, i), "f64->f32 element %d", i);
    ca_tensor_release(y);

    ca_tensor *xi = tu_index(TU_SHAPE(3), (int64_t[]){-4, 0, 123456789});
    TU_OK(ca_to_dtype(xi, CA_FLOAT64, &y));
    tu_assert_values(y, (double[]){-4, 0, 123456789}, 0);
    ca_tensor_release(y);
    TU_OK(ca_to_dtype(xi, CA_FLOAT32, &y));
    tu_assert_values(y, (double[]){-4, 0, (double)(float)123456789}, 0);
    ca_tensor_release(y);

    /* same dtype: a copy, not an alias */
    TU_OK(ca_to_dtype(x32, CA_FLOAT32, &y));
    cr_assert_neq(ca_tensor_data(y), ca_tensor_data(x32), "same-dtype to_dtype aliased x");
    tu_assert_close(y, x32, 0, 0);
    ca_tensor_release(y);
    ca_tensor_release(x32);
    ca_tensor_release(x64);
    ca_tensor_release(xi);
}

Test(pointwise, to_dtype_grad_converts_back) {
    ca_tensor *x = tu_from(CA_FLOAT32, TU_SHAPE(3), (double[]){1, 2, 3}, true);
    ca_tensor *w = tu_from(CA_FLOAT64, TU_SHAPE(3), (double[]){0.5, -1, 2}, false);
    ca_tensor *y = NULL, *p = NULL, *loss = NULL;
    TU_OK(ca_to_dtype(x, CA_FLOAT64, &y));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "ToCopyBackward0");
    ca_tensor *c = NULL;
    TU_OK(ca_clone(y, &c)); /* the same row: a copy of the same dtype, PyTorch's name */
    cr_assert_str_eq(ca_tensor_grad_fn_name(c), "CloneBackward0");
    ca_tensor_release(c);
    TU_OK(ca_mul(y, w, &p));
    TU_OK(ca_sum(p, 0, NULL, false, &loss));
    TU_OK(ca_backward(loss));
    ca_tensor *g = ca_tensor_grad(x);
    cr_assert_not_null(g);
    cr_assert_eq(ca_tensor_dtype(g), CA_FLOAT32, "grad of a float32 input must be float32");
    tu_assert_values(g, (double[]){0.5, -1, 2}, 0);
    ca_tensor *all[] = {x, w, y, p, loss};
    for (int k = 0; k < 5; k++)
        ca_tensor_release(all[k]);
}

static ca_status call_to_f64(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ca_to_dtype(in[0], CA_FLOAT64, out);
}

Test(pointwise, to_dtype_gradcheck_same_dtype) {
    ca_tensor *x = make_input(CA_FLOAT64, TU_SHAPE(3, 4), gen_any, true, true);
    tu_gradcheck(call_to_f64, 1, &x, NULL, GC_ATOL, GC_RTOL);
    ca_tensor_release(x);
}

Test(pointwise, to_dtype_bad_inputs) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(2), false), *y = NULL;
    TU_FAILS(ca_to_dtype(x, CA_INT64, &y), CA_STATUS_DTYPE, "int64");
    TU_FAILS(ca_to_dtype(x, (ca_dtype)7, &y), CA_STATUS_INVALID, "not a dtype");
    TU_FAILS(ca_to_dtype(NULL, CA_FLOAT64, &y), CA_STATUS_INVALID, "'x'");
    cr_assert_null(y);
    ca_tensor_release(x);
}

/* ---------------------------------------------------------------------------------------
 * Bad inputs and int64
 */
Test(pointwise, binary_shape_mismatch_names_both_shapes) {
    ca_tensor *a = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3), false);
    ca_tensor *b = tu_randn(CA_FLOAT32, TU_SHAPE(4), false), *y = NULL;
    TU_FAILS(ca_add(a, b, &y), CA_STATUS_SHAPE, "[2, 3]");
    TU_FAILS(ca_mul(a, b, &y), CA_STATUS_SHAPE, "[4]");
    TU_FAILS(ca_maximum(a, b, &y), CA_STATUS_SHAPE, "maximum");
    cr_assert_null(y);
    ca_tensor_release(a);
    ca_tensor_release(b);
}

Test(pointwise, mixed_dtypes_are_rejected) {
    ca_tensor *a = tu_randn(CA_FLOAT32, TU_SHAPE(3), false);
    ca_tensor *b = tu_randn(CA_FLOAT64, TU_SHAPE(3), false), *y = NULL;
    TU_FAILS(ca_add(a, b, &y), CA_STATUS_DTYPE, "ca_to_dtype");
    TU_FAILS(ca_pow(a, b, &y), CA_STATUS_DTYPE, "float64");
    ca_tensor_release(a);
    ca_tensor_release(b);
}

Test(pointwise, float_ops_reject_int64) {
    ca_tensor *x = tu_index(TU_SHAPE(3), (int64_t[]){1, 2, 3}), *y = NULL;
    TU_FAILS(ca_log(x, &y), CA_STATUS_DTYPE, "int64");
    TU_FAILS(ca_exp(x, &y), CA_STATUS_DTYPE, "ca_to_dtype");
    TU_FAILS(ca_div(x, x, &y), CA_STATUS_DTYPE, "int64");
    TU_FAILS(ca_gelu(x, CA_GELU_NONE, &y), CA_STATUS_DTYPE, "int64");
    TU_FAILS(ca_pow_scalar(x, 2.0, &y), CA_STATUS_DTYPE, "int64");
    ca_tensor_release(x);
}

Test(pointwise, int64_arithmetic) {
    ca_tensor *a = tu_index(TU_SHAPE(3), (int64_t[]){1, -2, 3});
    ca_tensor *b = tu_index(TU_SHAPE(3), (int64_t[]){4, 5, -6}), *y = NULL;
    TU_OK(ca_add(a, b, &y));
    cr_assert_eq(ca_tensor_dtype(y), CA_INT64);
    tu_assert_values(y, (double[]){5, 3, -3}, 0);
    ca_tensor_release(y);
    TU_OK(ca_mul(a, b, &y));
    tu_assert_values(y, (double[]){4, -10, -18}, 0);
    ca_tensor_release(y);
    TU_OK(ca_maximum(a, b, &y));
    tu_assert_values(y, (double[]){4, 5, 3}, 0);
    ca_tensor_release(y);
    TU_OK(ca_neg(a, &y));
    tu_assert_values(y, (double[]){-1, 2, -3}, 0);
    ca_tensor_release(y);
    TU_OK(ca_add_scalar(a, 10, &y));
    tu_assert_values(y, (double[]){11, 8, 13}, 0);
    ca_tensor_release(y);
    ca_tensor_release(a);
    ca_tensor_release(b);
}

Test(pointwise, null_arguments) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(2), false), *y = (ca_tensor *)x;
    TU_FAILS(ca_add(NULL, x, &y), CA_STATUS_INVALID, "'a' is NULL");
    cr_assert_null(y, "*out must be NULL after an error");
    TU_FAILS(ca_sub(x, NULL, &y), CA_STATUS_INVALID, "'b' is NULL");
    TU_FAILS(ca_exp(x, NULL), CA_STATUS_INVALID, "'out' is NULL");
    TU_FAILS(ca_relu(NULL, &y), CA_STATUS_INVALID, "'x' is NULL");
    TU_FAILS(ca_mul_scalar(NULL, 2.0, &y), CA_STATUS_INVALID, "ca_mul_scalar");
    TU_FAILS(ca_clamp(NULL, 0, 1, &y), CA_STATUS_INVALID, "ca_clamp");
    ca_tensor_release(x);
}

Test(pointwise, bad_parameters) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(2), false), *y = NULL;
    TU_FAILS(ca_gelu(x, (ca_gelu_approximate)3, &y), CA_STATUS_INVALID, "approximate");
    TU_FAILS(ca_clamp(x, NAN, NAN, &y), CA_STATUS_INVALID, "at least one");
    ca_tensor_release(x);
}

Test(pointwise, clamp_min_above_max_gives_max) {
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(3), (double[]){-1, 0.5, 2}, false), *y = NULL;
    TU_OK(ca_clamp(x, 1.0, 0.0, &y)); /* PyTorch: every element becomes max */
    tu_assert_values(y, (double[]){0, 0, 0}, 0);
    ca_tensor_release(y);
    ca_tensor_release(x);
}

Test(pointwise, scalar_0d_and_empty_inputs) {
    ca_tensor *s = tu_from(CA_FLOAT64, 0, NULL, (double[]){2.0}, true), *y = NULL;
    TU_OK(ca_mul(s, s, &y));
    cr_assert_eq(ca_tensor_ndim(y), 0);
    tu_assert_values(y, (double[]){4.0}, 0);
    TU_OK(ca_backward(y));
    tu_assert_values(ca_tensor_grad(s), (double[]){4.0}, 0);
    ca_tensor_release(y);
    ca_tensor *e = tu_randn(CA_FLOAT32, TU_SHAPE(0, 3), false);
    TU_OK(ca_exp(e, &y));
    assert_shape(y, TU_SHAPE(0, 3), "exp of empty");
    ca_tensor_release(y);
    ca_tensor_release(e);
    ca_tensor_release(s);
}

Test(pointwise, saved_input_modified_in_place_is_detected) {
    ca_tensor *a = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){1, 2}, true);
    ca_tensor *b = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){3, 4}, false), *y = NULL,
              *loss = NULL;
    TU_OK(ca_mul(a, b, &y)); /* saves b for a's gradient */
    TU_OK(ca_sum(y, 0, NULL, false, &loss));
    TU_OK(ca_mul_scalar_(b, 2.0));
    TU_FAILS(ca_backward(loss), CA_STATUS_AUTOGRAD, "in");
    ca_tensor *all[] = {a, b, y, loss};
    for (int k = 0; k < 4; k++)
        ca_tensor_release(all[k]);
}
