/* test_kern.c - the compute kernels (codegen/kern.h) against plain double references.
 *
 * Every ISA path the machine has (up to the CAGRAD_ISA cap) runs every case and must
 * match the reference, and the vector paths must agree with the scalar one. Comparisons
 * count failures and assert once, so a mismatch reports its first instance.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cagrad.h"
#include "codegen/ca_assert.h"
#include "codegen/kern.h"
#include "codegen/kern_internal.h"

/* ------------------------------------------------------------------ helpers */

static uint64_t tk_rng_state;

static double tk_rand(double lo, double hi) {
    uint64_t z = (tk_rng_state += 0x9E3779B97F4A7C15ull); /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return lo + (hi - lo) * (double)(z >> 11) * 0x1p-53;
}

static double tk_get(kern_dtype dt, const void *p, int64_t i) {
    if (dt == KERN_F32)
        return ((const float *)p)[i];
    if (dt == KERN_F64)
        return ((const double *)p)[i];
    return (double)((const int64_t *)p)[i];
}

static void tk_set(kern_dtype dt, void *p, int64_t i, double v) {
    if (dt == KERN_F32)
        ((float *)p)[i] = (float)v;
    else if (dt == KERN_F64)
        ((double *)p)[i] = v;
    else
        ((int64_t *)p)[i] = (int64_t)v;
}

/* The ISA paths to test: scalar up to what cai_kern_isa() starts with (CPU and env cap). */
static int tk_max_isa(void) {
    static int m = -1;
    if (m < 0)
        m = (int)cai_kern_isa();
    return m;
}

/* Bitwise identity (determinism checks compare bits, not values). */
static bool tk_same_bits(const void *a, const void *b, size_t n) {
    return memcmp(a, b, n) == 0;
}

typedef struct {
    int n, fails;
    char first[256];
} tk_check;

/* NaN matches NaN; infinities must match exactly. */
static void tk_close(tk_check *c, double got, double ref, double rtol, double atol,
                     const char *what, int64_t i) {
    c->n++;
    bool ok;
    if (isnan(ref))
        ok = isnan(got);
    else if (isinf(ref))
        ok = got == ref;
    else
        ok = fabs(got - ref) <= atol + rtol * fabs(ref);
    if (!ok && c->fails++ == 0)
        snprintf(c->first, sizeof c->first, "%s [%lld]: got %.17g want %.17g", what, (long long)i,
                 got, ref);
}

#define TK_ASSERT(c)                                                                               \
    cr_assert((c).fails == 0, "%d of %d mismatches; first: %s", (c).fails, (c).n, (c).first)

/* ------------------------------------------------------------------ pointwise reference */

#define TK_PI 3.14159265358979323846

/* The helpers the REF column of kern_pw_ops.h calls. */
static double kref_sign(double x) {
    return x > 0 ? 1 : x < 0 ? -1 : 0;
}

static double kref_sigmoid(double x) {
    return 1 / (1 + exp(-x));
}

static double kref_gelu_tanh(double x) {
    const double k = sqrt(2 / TK_PI), kap = 0.044715;
    return 0.5 * x * (1 + tanh(k * (x + kap * x * x * x)));
}

static double kref_gelu_bw(double g, double x) {
    return g * (0.5 * (1 + erf(x / sqrt(2))) + x * exp(-0.5 * x * x) / sqrt(2 * TK_PI));
}

static double kref_gelu_tanh_bw(double g, double x) {
    const double k = sqrt(2 / TK_PI), kap = 0.044715;
    double t = tanh(k * (x + kap * x * x * x));
    return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * kap * x * x));
}

static double kref_silu_bw(double g, double x) {
    double s = kref_sigmoid(x);
    return g * s * (1 + x * (1 - s));
}

/* erfinv by bisection on erf (|x| < 0.5) or on erfc (1 - |x| is exact there): slow and
 * independent of the kernel's approximation and Newton steps. */
static double kref_erfinv(double x) {
    double ax = fabs(x);
    if (ax > 1 || isnan(x))
        return NAN;
    if (ax == 1)
        return copysign(INFINITY, x);
    double lo = 0, hi = 6;
    for (int i = 0; i < 200 && lo < hi; i++) {
        double mid = 0.5 * (lo + hi);
        bool below = ax < 0.5 ? erf(mid) < ax : erfc(mid) > 1 - ax;
        if (mid == lo || mid == hi)
            break;
        if (below)
            lo = mid;
        else
            hi = mid;
    }
    return copysign(0.5 * (lo + hi), x);
}

/* half to even, without the rounding mode: round() breaks ties away from zero */
static double kref_round_even(double x) {
    double r = round(x);
    if (fabs(x - trunc(x)) == 0.5 && fmod(r, 2) != 0)
        r -= copysign(1, x);
    return r;
}

/* round to p0 decimals, half to even, with 10^|d| in double (the kernels round it to T) */
static double kref_round(double x, double decimals) {
    double scale = pow(10, fabs(decimals));
    if (decimals == 0)
        return kref_round_even(x);
    return decimals < 0 ? kref_round_even(x / scale) * scale : kref_round_even(x * scale) / scale;
}

/* d/dx sin(pi x) / (pi x); near 0 from the series -pi u / 3 + pi u^3 / 30 - ..., u = pi x */
static double kref_sinc_d(double x) {
    double u = TK_PI * x;
    if (fabs(u) < 1e-2)
        return TK_PI * (-u / 3 + u * u * u / 30 - pow(u, 5) / 840);
    return (u * cos(u) - sin(u)) / (u * x);
}

/* Python's %: the remainder with the divisor's sign */
static double kref_remainder(double a, double b) {
    double r = a - b * floor(a / b);
    return r == b ? 0 : r; /* floor(a / b) rounded up when a / b rounds to a whole number */
}

/* log(e^a + e^b) (base2: log2(2^a + 2^b)), from the larger one */
static double kref_logaddexp(double a, double b, int base2) {
    double hi = fmax(a, b), lo = fmin(a, b);
    if (isinf(hi) && hi == lo)
        return hi;
    return base2 ? hi + log2(1 + exp2(lo - hi)) : hi + log(1 + exp(lo - hi));
}

/* floor(a / b), from the exact remainder */
static double kref_floor_divide(double a, double b) {
    if (b == 0)
        return a / b;
    double q = round((a - kref_remainder(a, b)) / b);
    return q == 0 ? copysign(0, a / b) : q;
}

/* Every op's REF formula from kern_pw_ops.h, in double. */
static double tk_ref(kern_pw_op op, double a, double b, double c, double p0, double p1) {
    (void)a, (void)b, (void)c, (void)p0, (void)p1;
    switch (op) {
#define TK_REF(NAME, AR, NP, FL, VEC, REF)                                                         \
    case KPW_##NAME: return (double)(REF);
        KERN_PW_OPS(TK_REF)
#undef TK_REF
    default: return NAN;
    }
}

/* Input domains, parameters and where to plant ties (equal values) for each op. */
typedef struct {
    double lo[3], hi[3], p0, p1;
    int mask;   /* input holding 0/1, or -1 */
    int tie;    /* 1: input 1 (or 2 for ternary) sometimes equals the one before; 2: x == p0 */
    bool zeros; /* input 0 (or 1 for _BW) is sometimes exactly 0 */
} tk_cfg;

static tk_cfg tk_config(kern_pw_op op) {
    tk_cfg c = {{-3, -3, -3}, {3, 3, 3}, 0.25, 1.5, -1, 0, false};
    switch (op) {
    case KPW_LOG:
    case KPW_SQRT:
    case KPW_RSQRT:
    case KPW_LOG2:
    case KPW_LOG10:
        c.lo[0] = 0.05;
        c.hi[0] = 5;
        break;
    case KPW_RECIPROCAL:
    case KPW_RDIV_S:
        c.lo[0] = 0.3;
        c.p0 = 1.7;
        break;
    case KPW_DIV: c.lo[1] = 0.3; break;
    case KPW_FMOD:
    case KPW_REMAINDER:
    case KPW_FLOOR_DIVIDE:
        c.lo[1] = 0.3; /* away from 0: a remainder near b's size flips with rounding */
        break;
    case KPW_XLOGY:
        c.lo[1] = 0.05;
        c.zeros = true;
        break;
    case KPW_LOG1P: c.lo[0] = -0.9; break;
    case KPW_ROUND: c.p0 = 0; break;
    case KPW_ASIN:
    case KPW_ACOS:
    case KPW_ATANH:
    case KPW_ERFINV:
        c.lo[0] = -0.999;
        c.hi[0] = 0.999;
        break;
    case KPW_ACOSH:
        c.lo[0] = 1.001;
        c.hi[0] = 5;
        break;
    case KPW_LOGIT:
    case KPW_LOGIT_BW:
        c.lo[0] = c.lo[1] = 0.01;
        c.hi[0] = c.hi[1] = 0.99;
        c.p0 = 0.05;
        c.p1 = 0.95;
        break;
    case KPW_DIV_S: c.p0 = 1.7; break;
    case KPW_POW_S:
        c.lo[0] = 0.1;
        c.p0 = 2.5;
        break;
    case KPW_RPOW_S: c.p0 = 1.7; break;
    case KPW_POW:
        c.lo[0] = 0.1;
        c.lo[1] = -2;
        c.hi[1] = 2;
        break;
    case KPW_LEAKY_RELU:
    case KPW_LEAKY_RELU_BW: c.p0 = 0.01; break;
    case KPW_SOFTPLUS:
    case KPW_SOFTPLUS_BW:
        c.p0 = 1.5;
        c.p1 = 2;
        break;
    case KPW_CLAMP:
    case KPW_CLAMP_BW:
        c.p0 = -1;
        c.p1 = 1.5;
        break;
    case KPW_ADD:
    case KPW_SUB: c.p0 = 0.5; break;
    case KPW_FILL: c.p0 = 2.5; break;
    case KPW_MASKED_FILL:
        c.mask = 1;
        c.p0 = -4;
        break;
    case KPW_WHERE: c.mask = 0; break;
    case KPW_SIGMOID_BW:
        c.lo[1] = 0;
        c.hi[1] = 1;
        break;
    case KPW_TANH_BW:
        c.lo[1] = -1;
        c.hi[1] = 1;
        break;
    case KPW_POW_S_BW:
        c.lo[1] = 0.1;
        c.p0 = 2.5;
        break;
    case KPW_POW_BW_BASE:
        c.lo[1] = 0.1;
        c.lo[2] = -2;
        c.hi[2] = 2;
        break;
    case KPW_POW_BW_EXP: c.lo[1] = 0.1; break;
    case KPW_MAXMIN_BW:
    case KPW_MAX:
    case KPW_MIN:
    case KPW_LT:
    case KPW_LE:
    case KPW_GT:
    case KPW_GE:
    case KPW_EQ:
    case KPW_NE: c.tie = 1; break;
    case KPW_MAX_S:
    case KPW_MIN_S:
    case KPW_LT_S:
    case KPW_LE_S:
    case KPW_GT_S:
    case KPW_GE_S:
    case KPW_EQ_S:
    case KPW_NE_S: c.tie = 2; break;
    case KPW_SIGN:
    case KPW_ABS:
    case KPW_RELU:
    case KPW_ABS_BW:
    case KPW_RELU_BW: c.zeros = true; break;
    default: break;
    }
    return c;
}

/* A 1-D or 2-D index space with strides per operand; origin = element offset of the
 * index (0, ..., 0) inside the operand's buffer (for negative strides). */
typedef struct {
    const char *name;
    int nd;
    int64_t shape[2], ostr[2], istr[3][2], origin[4], len[4];
} tk_layout;

/* clang-format off */
static const tk_layout tk_layouts[] = {
    {"contiguous", 1, {1003, 1}, {1, 0}, {{1, 0}, {1, 0}, {1, 0}}, {0, 0, 0, 0},
     {1003, 1003, 1003, 1003}},
    /* in0 full, in1 broadcast along dim 1 (a column), in2 a broadcast scalar */
    {"broadcast", 2, {9, 70}, {70, 1}, {{70, 1}, {1, 0}, {0, 0}}, {0, 0, 0, 0},
     {630, 630, 9, 1}},
    /* in0 broadcast along dim 0 (a row): the unary case */
    {"row-broadcast", 2, {9, 70}, {70, 1}, {{0, 1}, {0, 1}, {70, 1}}, {0, 0, 0, 0},
     {630, 70, 70, 630}},
    /* transposed input and output, reversed rows in in1 */
    {"transposed", 2, {13, 17}, {1, 13}, {{1, 13}, {-17, 1}, {1, 13}}, {0, 0, 12 * 17, 0},
     {221, 221, 221, 221}},
    /* row gathers: every other element, padded rows, a broadcast row read at stride 3 */
    {"sliced", 2, {20, 30}, {30, 1}, {{70, 2}, {31, 1}, {0, 3}}, {0, 0, 0, 0},
     {600, 1400, 620, 90}},
    /* tiled path (in0 transposed) with a column-broadcast and a scalar input */
    {"transposed-broadcast", 2, {40, 150}, {150, 1}, {{1, 40}, {1, 0}, {0, 0}}, {0, 0, 0, 0},
     {6000, 6000, 40, 1}},
};
/* clang-format on */
#define TK_NLAYOUTS ((int)(sizeof tk_layouts / sizeof tk_layouts[0]))

typedef struct {
    void *in[3], *out;
    double *got, *ref; /* logical (row-major) order */
    int64_t count;
} tk_pw_case;

static int64_t tk_off(const tk_layout *L, const int64_t *str, int64_t flat) {
    int64_t i = L->nd == 2 ? flat / L->shape[1] : flat, j = L->nd == 2 ? flat % L->shape[1] : 0;
    return i * str[0] + (L->nd == 2 ? j * str[1] : 0);
}

/* Makes inputs (same values for a given op/dtype/layout), runs op, fills got and ref. */
static int tk_pw_run(kern_pw_op op, kern_dtype dt, const tk_layout *L, tk_pw_case *c) {
    tk_cfg cfg = tk_config(op);
    int ar = cai_kern_pw_arity(op);
    size_t esz = cai_kern_dtype_size(dt);
    tk_rng_state = 1000 + (uint64_t)op * 7 + (uint64_t)dt;
    c->count = L->nd == 2 ? L->shape[0] * L->shape[1] : L->shape[0];
    for (int k = 0; k < 3; k++) {
        c->in[k] = calloc((size_t)L->len[k + 1], esz);
        for (int64_t i = 0; i < L->len[k + 1]; i++) {
            double v = tk_rand(cfg.lo[k], cfg.hi[k]);
            if (k == cfg.mask)
                v = tk_rand(0, 1) < 0.5;
            if (cfg.zeros && k == (ar == 2) && tk_rand(0, 1) < 0.125)
                v = 0;
            tk_set(dt, c->in[k], i, v);
        }
    }
    c->out = calloc((size_t)L->len[0], esz);
    c->got = calloc((size_t)c->count, sizeof(double));
    c->ref = calloc((size_t)c->count, sizeof(double));
    /* ties go into the buffers along the logical order, before the reference reads them */
    for (int64_t f = 0; f < c->count && cfg.tie; f++) {
        if (tk_rand(0, 1) >= 0.125)
            continue;
        int dst = ar == 3 ? 2 : ar == 2 ? 1 : 0, src = dst - 1;
        int64_t od = L->origin[dst + 1] + tk_off(L, L->istr[dst], f);
        double v = cfg.tie == 2
                       ? cfg.p0
                       : tk_get(dt, c->in[src], L->origin[src + 1] + tk_off(L, L->istr[src], f));
        tk_set(dt, c->in[dst], od, v);
    }
    kern_src src[3];
    for (int k = 0; k < 3; k++) {
        src[k].data = (char *)c->in[k] + (size_t)L->origin[k + 1] * esz;
        memset(src[k].strides, 0, sizeof src[k].strides);
        for (int d = 0; d < L->nd; d++)
            src[k].strides[d] = L->istr[k][d];
    }
    int rc = cai_kern_pointwise(op, dt, dt, L->nd, L->shape, c->out, L->ostr, src, cfg.p0, cfg.p1);
    for (int64_t f = 0; f < c->count; f++) {
        double v[3];
        for (int k = 0; k < 3; k++)
            v[k] = tk_get(dt, c->in[k], L->origin[k + 1] + tk_off(L, L->istr[k], f));
        c->got[f] = tk_get(dt, c->out, tk_off(L, L->ostr, f));
        c->ref[f] = tk_ref(op, v[0], v[1], v[2], cfg.p0, cfg.p1);
    }
    return rc;
}

static void tk_pw_free(tk_pw_case *c) {
    for (int k = 0; k < 3; k++)
        free(c->in[k]);
    free(c->out);
    free(c->got);
    free(c->ref);
}

static double tk_rtol(kern_dtype dt) {
    return dt == KERN_F32 ? 2e-6 : 1e-13;
}
static double tk_atol(kern_dtype dt) {
    return dt == KERN_F32 ? 1e-6 : 1e-13;
}

/* Every op on every ISA path in one layout, against the double reference. */
static void tk_pw_layout(kern_dtype dt, const tk_layout *L) {
    tk_check chk = {0};
    char what[128];
    for (int isa = 0; isa <= tk_max_isa(); isa++) {
        cai_kern_isa_set((kern_isa_level)isa);
        for (int op = 0; op < KPW__COUNT; op++) {
            tk_pw_case c;
            int rc = tk_pw_run((kern_pw_op)op, dt, L, &c);
            snprintf(what, sizeof what, "%s %s %s %s", cai_kern_isa_name((kern_isa_level)isa),
                     cai_kern_pw_name((kern_pw_op)op), dt == KERN_F32 ? "f32" : "f64", L->name);
            cr_assert_eq(rc, 0, "%s: rc %d", what, rc);
            for (int64_t f = 0; f < c.count; f++)
                tk_close(&chk, c.got[f], c.ref[f], tk_rtol(dt), tk_atol(dt), what, f);
            tk_pw_free(&c);
        }
    }
    TK_ASSERT(chk);
}

/* ------------------------------------------------------------------ pointwise tests */

Test(kern, isa_selection) {
    int start = tk_max_isa(); /* before any cai_kern_isa_set */
    int cpu = cai_kern_isa_set(KERN_ISA_AVX512);
    cr_assert(start <= cpu);
    cr_assert(cpu >= KERN_ISA_SCALAR && cpu <= KERN_ISA_AVX512);
    cr_assert_eq(cai_kern_isa(), cpu);
    cr_assert_eq(cai_kern_isa_set(KERN_ISA_SCALAR), KERN_ISA_SCALAR);
    cr_assert_eq(cai_kern_isa(), KERN_ISA_SCALAR);
    cr_assert_str_eq(cai_kern_isa_name(KERN_ISA_SCALAR), "scalar");
    cr_assert_str_eq(cai_kern_isa_name(KERN_ISA_AVX2), "avx2");
    cr_assert_str_eq(cai_kern_isa_name(KERN_ISA_AVX512), "avx512");
    const char *env = getenv("CAGRAD_ISA");
    if (env && strcmp(env, "scalar") == 0)
        cr_assert_eq(start, KERN_ISA_SCALAR, "CAGRAD_ISA=scalar must cap the path");
    if (env && strcmp(env, "avx2") == 0)
        cr_assert(start <= KERN_ISA_AVX2, "CAGRAD_ISA=avx2 must cap the path");
    if (!env)
        cr_assert_eq(start, cpu, "without CAGRAD_ISA the best path is used");
    cr_assert(strlen(cai_kern_blas_core()) > 0);
    cr_assert_eq(cai_kern_dtype_size(KERN_F32), 4);
    cr_assert_eq(cai_kern_dtype_size(KERN_I64), 8);
}

Test(kern, pw_arity_and_names) {
    cr_assert_eq(cai_kern_pw_arity(KPW_EXP), 1);
    cr_assert_eq(cai_kern_pw_arity(KPW_FILL), 1);
    cr_assert_eq(cai_kern_pw_arity(KPW_ADD), 2);
    cr_assert_eq(cai_kern_pw_arity(KPW_ABS_BW), 2);
    cr_assert_eq(cai_kern_pw_arity(KPW_WHERE), 3);
    cr_assert_eq(cai_kern_pw_arity(KPW_MAXMIN_BW), 3);
    cr_assert_eq(cai_kern_pw_arity(KPW__COUNT), -1);
    for (int op = 0; op < KPW__COUNT; op++)
        cr_assert(cai_kern_pw_name((kern_pw_op)op) && cai_kern_pw_name((kern_pw_op)op)[0] != '?');
    cr_assert_str_eq(cai_kern_pw_name(KPW_GELU_TANH_BW), "GELU_TANH_BW");
}

Test(kern, pw_contiguous_f32) {
    tk_pw_layout(KERN_F32, &tk_layouts[0]);
}
Test(kern, pw_contiguous_f64) {
    tk_pw_layout(KERN_F64, &tk_layouts[0]);
}

Test(kern, pw_broadcast) {
    for (int dt = 0; dt < 2; dt++) {
        tk_pw_layout((kern_dtype)dt, &tk_layouts[1]);
        tk_pw_layout((kern_dtype)dt, &tk_layouts[2]);
    }
}

Test(kern, pw_strided_and_transposed) {
    for (int dt = 0; dt < 2; dt++)
        for (int li = 3; li < TK_NLAYOUTS; li++)
            tk_pw_layout((kern_dtype)dt, &tk_layouts[li]);
}

/* The vector paths against the scalar path, op by op, on the mixed layouts. */
Test(kern, pw_isa_paths_agree) {
    tk_check chk = {0};
    char what[128];
    for (int dt = 0; dt < 2; dt++)
        for (int li = 0; li < TK_NLAYOUTS; li++)
            for (int op = 0; op < KPW__COUNT; op++) {
                tk_pw_case base;
                cai_kern_isa_set(KERN_ISA_SCALAR);
                tk_pw_run((kern_pw_op)op, (kern_dtype)dt, &tk_layouts[li], &base);
                for (int isa = 1; isa <= tk_max_isa(); isa++) {
                    tk_pw_case c;
                    cai_kern_isa_set((kern_isa_level)isa);
                    tk_pw_run((kern_pw_op)op, (kern_dtype)dt, &tk_layouts[li], &c);
                    snprintf(what, sizeof what, "%s vs scalar: %s dt%d %s",
                             cai_kern_isa_name((kern_isa_level)isa),
                             cai_kern_pw_name((kern_pw_op)op), dt, tk_layouts[li].name);
                    for (int64_t f = 0; f < c.count; f++)
                        tk_close(&chk, c.got[f], base.got[f], tk_rtol((kern_dtype)dt),
                                 tk_atol((kern_dtype)dt), what, f);
                    tk_pw_free(&c);
                }
                tk_pw_free(&base);
            }
    TK_ASSERT(chk);
}

/* One op on 37 copies of one value (vector body and tail) on every path and dtype: every
 * lane must give `want` (NaN matches NaN, signs of zero ignored). */
static void tk_special(tk_check *chk, kern_pw_op op, double a, double b, double c, double p0,
                       double p1, double want) {
    enum { N = 37 };
    char what[96];
    for (int dt = 0; dt < 2; dt++)
        for (int isa = 0; isa <= tk_max_isa(); isa++) {
            cai_kern_isa_set((kern_isa_level)isa);
            double buf[3][N], out[N];
            float fbuf[3][N], fout[N];
            for (int i = 0; i < N; i++) {
                double v[3] = {a, b, c};
                for (int k = 0; k < 3; k++) {
                    buf[k][i] = v[k];
                    fbuf[k][i] = (float)v[k];
                }
            }
            kern_src src[3];
            for (int k = 0; k < 3; k++) {
                src[k].data = dt ? (void *)buf[k] : (void *)fbuf[k];
                src[k].strides[0] = 1;
            }
            int64_t shape = N, st = 1;
            int rc = cai_kern_pointwise(op, (kern_dtype)dt, (kern_dtype)dt, 1, &shape,
                                        dt ? (void *)out : (void *)fout, &st, src, p0, p1);
            snprintf(what, sizeof what, "%s(%g,%g,%g) %s dt%d", cai_kern_pw_name(op), a, b, c,
                     cai_kern_isa_name((kern_isa_level)isa), dt);
            cr_assert_eq(rc, 0, "%s", what);
            for (int i = 0; i < N; i++)
                tk_close(chk, dt ? out[i] : fout[i], want, 1e-6, 1e-30, what, i);
        }
}

Test(kern, pw_special_values) {
    tk_check c = {0};
    double inf = INFINITY, nan = NAN;
    tk_special(&c, KPW_SIGMOID, -100, 0, 0, 0, 0, 0);
    tk_special(&c, KPW_SIGMOID, -inf, 0, 0, 0, 0, 0);
    tk_special(&c, KPW_SIGMOID, 100, 0, 0, 0, 0, 1);
    tk_special(&c, KPW_SILU, -200, 0, 0, 0, 0, 0);
    tk_special(&c, KPW_RELU, nan, 0, 0, 0, 0, nan);
    tk_special(&c, KPW_RELU, -0.0, 0, 0, 0, 0, 0);
    tk_special(&c, KPW_SIGN, 0, 0, 0, 0, 0, 0);
    tk_special(&c, KPW_SIGN, nan, 0, 0, 0, 0, 0); /* PyTorch: sign(nan) = 0 */
    tk_special(&c, KPW_SIGN, -3, 0, 0, 0, 0, -1);
    tk_special(&c, KPW_ABS_BW, 5, 0, 0, 0, 0, 0);
    tk_special(&c, KPW_ABS_BW, 5, -2, 0, 0, 0, -5);
    tk_special(&c, KPW_MAX, nan, 1, 0, 0, 0, nan);
    tk_special(&c, KPW_MAX, 1, nan, 0, 0, 0, nan);
    tk_special(&c, KPW_MIN, 1, nan, 0, 0, 0, nan);
    tk_special(&c, KPW_MAX_S, nan, 0, 0, 1, 0, nan);
    tk_special(&c, KPW_MIN_S, 3, 0, 0, 1, 0, 1);
    tk_special(&c, KPW_POW, 0, 0, 0, 0, 0, 1);
    tk_special(&c, KPW_POW, -2, 3, 0, 0, 0, -8);
    tk_special(&c, KPW_POW, -2, 0.5, 0, 0, 0, nan);
    tk_special(&c, KPW_POW_S, -2, 0, 0, 3, 0, -8);
    tk_special(&c, KPW_POW_S, -2, 0, 0, 5, 0, -32);
    tk_special(&c, KPW_POW_S, 0, 0, 0, 0, 0, 1);
    tk_special(&c, KPW_POW_S, nan, 0, 0, 0, 0, 1);
    tk_special(&c, KPW_POW_S, 4, 0, 0, 0.5, 0, 2);
    tk_special(&c, KPW_POW_S, 4, 0, 0, -0.5, 0, 0.5);
    tk_special(&c, KPW_POW_S, 4, 0, 0, -2, 0, 0.0625);
    tk_special(&c, KPW_RPOW_S, 0, 0, 0, 0, 0, 1);
    tk_special(&c, KPW_SOFTPLUS, 25, 0, 0, 1, 20, 25);
    tk_special(&c, KPW_SOFTPLUS, 19, 0, 0, 1, 20, log1p(exp(19)));
    tk_special(&c, KPW_SOFTPLUS, -200, 0, 0, 1, 20, 0);
    tk_special(&c, KPW_SOFTPLUS_BW, 2, 25, 0, 1, 20, 2);
    tk_special(&c, KPW_GELU, 1, 0, 0, 0, 0, 0.8413447460685429);
    tk_special(&c, KPW_GELU_TANH, 1, 0, 0, 0, 0, 0.8411919906082768);
    tk_special(&c, KPW_CLAMP, 5, 0, 0, nan, 1, 1);
    tk_special(&c, KPW_CLAMP, -5, 0, 0, nan, 1, -5);
    tk_special(&c, KPW_CLAMP, -5, 0, 0, -1, nan, -1);
    tk_special(&c, KPW_CLAMP, nan, 0, 0, -1, 1, nan);
    tk_special(&c, KPW_CLAMP_BW, 3, 7, 0, nan, 1, 0);
    tk_special(&c, KPW_CLAMP_BW, 3, -7, 0, nan, 1, 3);
    tk_special(&c, KPW_CLAMP_BW, 3, 1, 0, -1, 1, 3);
    tk_special(&c, KPW_MAXMIN_BW, 3, 2, 2, 0, 0, 1.5);
    tk_special(&c, KPW_MAXMIN_BW, 3, 1, 2, 0, 0, 0);
    tk_special(&c, KPW_MAXMIN_BW, 3, nan, 2, 0, 0, 3);
    tk_special(&c, KPW_POW_BW_EXP, 3, 0, 0, 0, 0, 0);      /* 0^b, b > 0 */
    tk_special(&c, KPW_POW_BW_EXP, 3, 0, 1, 0, 0, 0);      /* 0^0 */
    tk_special(&c, KPW_POW_BW_EXP, 1, 0, inf, 0, 0, -inf); /* 0^-1 */
    tk_special(&c, KPW_POW_BW_BASE, 3, 0, 0, 0, 0, 0);
    tk_special(&c, KPW_POW_S_BW, 3, 2, 0, 0, 0, 0);
    tk_special(&c, KPW_POW_S_BW, 1, -2, 0, 3, 0, 12);
    tk_special(&c, KPW_RELU_BW, 4, nan, 0, 0, 0, 4); /* threshold_backward: x <= 0 ? 0 : g */
    tk_special(&c, KPW_RELU_BW, 4, 0, 0, 0, 0, 0);
    tk_special(&c, KPW_MASKED_FILL, 1, nan, 0, 9, 0, 9); /* NaN is a true mask */
    tk_special(&c, KPW_WHERE, 0, 1, 2, 0, 0, 2);
    tk_special(&c, KPW_FILL, 1, 0, 0, -3, 0, -3);
    tk_special(&c, KPW_NE_S, nan, 0, 0, 1, 0, 1);
    tk_special(&c, KPW_EQ, nan, nan, 0, 0, 0, 0);
    TK_ASSERT(c);
}

/* WHERE and MASKED_FILL take a mask of any dtype; also through the packed paths (strided
 * 1-D with a strided output, and 2-D tiles with a transposed mask). */
Test(kern, pw_cond_dtypes) {
    enum { N = 300 };
    float a[N], b[N], out[2 * N];
    double fc[N];
    int64_t ic[N], st = 1, sh = N, half = N / 2, st2 = 2;
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = (float)-i;
        ic[i] = (i % 3 == 0) ? 7 : 0;
        fc[i] = (i % 3 == 0) ? -0.5 : 0.0;
    }
    for (int isa = 0; isa <= tk_max_isa(); isa++) {
        cai_kern_isa_set((kern_isa_level)isa);
        kern_src w[3] = {{ic, {1}}, {a, {1}}, {b, {1}}};
        cr_assert_eq(cai_kern_pointwise(KPW_WHERE, KERN_F32, KERN_I64, 1, &sh, out, &st, w, 0, 0),
                     0);
        for (int i = 0; i < N; i++)
            cr_assert_eq(out[i], i % 3 == 0 ? a[i] : b[i]);
        kern_src m[2] = {{a, {1}}, {fc, {1}}};
        cr_assert_eq(
            cai_kern_pointwise(KPW_MASKED_FILL, KERN_F32, KERN_F64, 1, &sh, out, &st, m, 5, 0), 0);
        for (int i = 0; i < N; i++)
            cr_assert_eq(out[i], i % 3 == 0 ? 5.0f : a[i]);
        /* strided mask (every other element of ic) and strided output */
        kern_src ws[3] = {{ic, {2}}, {a, {1}}, {b, {1}}};
        cr_assert_eq(
            cai_kern_pointwise(KPW_WHERE, KERN_F32, KERN_I64, 1, &half, out, &st2, ws, 0, 0), 0);
        for (int i = 0; i < half; i++)
            cr_assert_eq(out[2 * i], (2 * i) % 3 == 0 ? a[i] : b[i]);
        /* [15, 20] with the mask read transposed from a [20, 15] buffer */
        int64_t sh2[2] = {15, 20}, ost[2] = {20, 1};
        kern_src wt[3] = {{ic, {1, 15}}, {a, {20, 1}}, {b, {0, 1}}};
        cr_assert_eq(cai_kern_pointwise(KPW_WHERE, KERN_F32, KERN_I64, 2, sh2, out, ost, wt, 0, 0),
                     0);
        for (int i = 0; i < 15; i++)
            for (int j = 0; j < 20; j++)
                cr_assert_eq(out[i * 20 + j], ic[j * 15 + i] ? a[i * 20 + j] : b[j]);
        /* FILL reads no input: src may be NULL */
        cr_assert_eq(
            cai_kern_pointwise(KPW_FILL, KERN_F32, KERN_F32, 2, sh2, out, ost, NULL, 2.5, 0), 0);
        for (int i = 0; i < 300; i++)
            cr_assert_eq(out[i], 2.5f);
    }
}

Test(kern, pw_int64) {
    enum { N = 50 };
    int64_t a[N], b[N], out[N], sh = N, st = 1;
    for (int i = 0; i < N; i++) {
        a[i] = i - 25;
        b[i] = (i * 7) % 11 - 5;
    }
    kern_src s[3] = {{a, {1}}, {b, {1}}, {a, {1}}};
    cr_assert_eq(cai_kern_pointwise(KPW_ADD, KERN_I64, KERN_I64, 1, &sh, out, &st, s, 3, 0), 0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(out[i], a[i] + 3 * b[i]);
    cr_assert_eq(cai_kern_pointwise(KPW_MAX, KERN_I64, KERN_I64, 1, &sh, out, &st, s, 0, 0), 0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(out[i], a[i] > b[i] ? a[i] : b[i]);
    cr_assert_eq(cai_kern_pointwise(KPW_LT_S, KERN_I64, KERN_I64, 1, &sh, out, &st, s, 2.5, 0), 0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(out[i], a[i] < 2.5);
    cr_assert_eq(cai_kern_pointwise(KPW_ABS, KERN_I64, KERN_I64, 1, &sh, out, &st, s, 0, 0), 0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(out[i], llabs(a[i]));
    cr_assert_eq(cai_kern_pointwise(KPW_WHERE, KERN_I64, KERN_I64, 1, &sh, out, &st, s, 0, 0), 0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(out[i], a[i] ? b[i] : a[i]);
    int64_t big = INT64_MAX;
    kern_src sb = {&big, {0}};
    int64_t one = 1;
    cr_assert_eq(cai_kern_pointwise(KPW_ADD_S, KERN_I64, KERN_I64, 0, NULL, out, &st, &sb, 1, 0),
                 0);
    cr_assert_eq(out[0], INT64_MIN, "int64 add wraps");
    (void)one;
    cr_assert_eq(cai_kern_pointwise(KPW_EXP, KERN_I64, KERN_I64, 1, &sh, out, &st, s, 0, 0), -1);
    cr_assert_eq(cai_kern_pointwise(KPW_GELU_BW, KERN_I64, KERN_I64, 1, &sh, out, &st, s, 0, 0),
                 -1);
}

/* Big enough to use the pool: 1 and 2 threads give identical bits; shape with 0 is a no-op. */
Test(kern, pw_parallel_and_empty) {
    int64_t n = 300000, sh[2] = {600, 500}, ost[2] = {500, 1};
    float *x = malloc(sizeof(float) * (size_t)n), *y1 = malloc(sizeof(float) * (size_t)n);
    float *y2 = malloc(sizeof(float) * (size_t)n);
    tk_rng_state = 5;
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)tk_rand(-4, 4);
    kern_src s = {x, {1, 600}}; /* transposed read */
    cai_kern_set_num_threads(1);
    cr_assert_eq(cai_kern_pointwise(KPW_GELU, KERN_F32, KERN_F32, 2, sh, y1, ost, &s, 0, 0), 0);
    cai_kern_set_num_threads(2);
    cr_assert_eq(cai_kern_pointwise(KPW_GELU, KERN_F32, KERN_F32, 2, sh, y2, ost, &s, 0, 0), 0);
    cr_assert(tk_same_bits(y1, y2, sizeof(float) * (size_t)n));
    tk_check c = {0};
    for (int64_t i = 0; i < 600; i++)
        for (int64_t j = 0; j < 500; j++)
            tk_close(&c, y2[i * 500 + j], tk_ref(KPW_GELU, x[j * 600 + i], 0, 0, 0, 0), 2e-6, 1e-6,
                     "gelu", i * 500 + j);
    TK_ASSERT(c);
    int64_t zsh[2] = {0, 5};
    cr_assert_eq(cai_kern_pointwise(KPW_EXP, KERN_F32, KERN_F32, 2, zsh, NULL, ost, &s, 0, 0), 0);
    free(x);
    free(y1);
    free(y2);
}

/* ------------------------------------------------------------------ reductions */

/* Reference reduction of a 3-d strided input over rmask, in double. */
static void tk_red_ref(kern_red_op op, kern_dtype dt, const int64_t *shape, const void *x,
                       const int64_t *st, uint32_t rmask, double *out, int64_t *idx,
                       double *abssum) {
    int64_t O = 1;
    for (int d = 0; d < 3; d++)
        if (!(rmask >> d & 1))
            O *= shape[d];
    for (int64_t o = 0; o < O; o++) {
        out[o] = op == KRED_MAX ? -INFINITY : op == KRED_MIN ? INFINITY : 0;
        idx[o] = -1;
        abssum[o] = 0;
    }
    /* pass 1: sums / extremes; pass 2 (logsumexp) needs the max first */
    double *mx = calloc((size_t)O, sizeof(double));
    for (int pass = 0; pass < (op == KRED_LOGSUMEXP ? 2 : 1); pass++) {
        for (int64_t i = 0; i < shape[0]; i++)
            for (int64_t j = 0; j < shape[1]; j++)
                for (int64_t k = 0; k < shape[2]; k++) {
                    int64_t id[3] = {i, j, k}, o = 0, r = 0;
                    for (int d = 0; d < 3; d++) {
                        if (rmask >> d & 1)
                            r = r * shape[d] + id[d];
                        else
                            o = o * shape[d] + id[d];
                    }
                    double v = tk_get(dt, x, i * st[0] + j * st[1] + k * st[2]);
                    if (op == KRED_LOGSUMEXP && pass == 0) {
                        if (idx[o] < 0 || v > mx[o])
                            mx[o] = v;
                        idx[o] = 0;
                    } else if (op == KRED_LOGSUMEXP) {
                        out[o] += exp(v - mx[o]);
                        abssum[o] += exp(v - mx[o]);
                    } else if (op == KRED_MAX || op == KRED_MIN) {
                        bool better = op == KRED_MAX ? v > out[o] : v < out[o];
                        if (idx[o] < 0 || better) {
                            out[o] = v;
                            idx[o] = r;
                        }
                    } else {
                        out[o] += v;
                        abssum[o] += fabs(v);
                    }
                }
    }
    int64_t R = 1;
    for (int d = 0; d < 3; d++)
        if (rmask >> d & 1)
            R *= shape[d];
    for (int64_t o = 0; o < O; o++) {
        if (op == KRED_MEAN) {
            out[o] /= (double)R;
            abssum[o] /= (double)R;
        }
        if (op == KRED_LOGSUMEXP) {
            out[o] = log(out[o]) + mx[o];
            abssum[o] = fabs(out[o]);
        }
    }
    free(mx);
}

/* Every op and rmask on a contiguous and a permuted view, every ISA path. */
Test(kern, reduce_masks_vs_reference) {
    enum { n = 6 * 5 * 130 };
    const int64_t shape[3] = {6, 5, 130};
    const int64_t strides[2][3] = {{650, 130, 1}, {5, 1, 30}}; /* row-major; dims of [130][6][5] */
    tk_check chk = {0};
    char what[128];
    for (int dt = 0; dt < 2; dt++) {
        void *x = malloc((size_t)n * 8);
        tk_rng_state = 77;
        for (int64_t i = 0; i < n; i++)
            tk_set((kern_dtype)dt, x, i, tk_rand(-1, 1));
        for (int isa = 0; isa <= tk_max_isa(); isa++) {
            cai_kern_isa_set((kern_isa_level)isa);
            for (int lay = 0; lay < 2; lay++)
                for (uint32_t mask = 0; mask < 8; mask++)
                    for (int op = 0; op < KRED__COUNT; op++) {
                        double ref[n], abssum[n], got[n];
                        int64_t ridx[n], gidx[n];
                        float gf[n];
                        tk_red_ref((kern_red_op)op, (kern_dtype)dt, shape, x, strides[lay], mask,
                                   ref, ridx, abssum);
                        int rc = cai_kern_reduce((kern_red_op)op, (kern_dtype)dt, 3, shape, x,
                                                 strides[lay], mask, dt ? (void *)got : (void *)gf,
                                                 gidx);
                        snprintf(what, sizeof what, "%s op%d mask%u lay%d dt%d",
                                 cai_kern_isa_name((kern_isa_level)isa), op, mask, lay, dt);
                        cr_assert_eq(rc, 0, "%s", what);
                        int64_t O = 1;
                        for (int d = 0; d < 3; d++)
                            if (!(mask >> d & 1))
                                O *= shape[d];
                        double tol = dt ? 1e-14 : 2e-6;
                        for (int64_t o = 0; o < O; o++) {
                            double g = dt ? got[o] : gf[o];
                            tk_close(&chk, g, ref[o], tol, tol * (abssum[o] + 1), what, o);
                            if (op == KRED_MAX || op == KRED_MIN)
                                tk_close(&chk, (double)gidx[o], (double)ridx[o], 0, 0, what, o);
                        }
                    }
        }
        free(x);
    }
    TK_ASSERT(chk);
}

Test(kern, reduce_argmax_ties_and_nan) {
    for (int isa = 0; isa <= tk_max_isa(); isa++) {
        cai_kern_isa_set((kern_isa_level)isa);
        float x[8] = {1, 3, 3, 2, -1, -1, 0, -1};
        int64_t sh[2] = {2, 4}, st[2] = {4, 1}, idx[4];
        float out[4];
        cr_assert_eq(cai_kern_reduce(KRED_MAX, KERN_F32, 2, sh, x, st, 2, out, idx), 0);
        cr_assert(out[0] == 3 && idx[0] == 1 && out[1] == 0 && idx[1] == 2);
        cr_assert_eq(cai_kern_reduce(KRED_MIN, KERN_F32, 2, sh, x, st, 2, out, idx), 0);
        cr_assert(out[0] == 1 && idx[0] == 0 && out[1] == -1 && idx[1] == 0);
        /* flat index over both reduced dims */
        cr_assert_eq(cai_kern_reduce(KRED_MIN, KERN_F32, 2, sh, x, st, 3, out, idx), 0);
        cr_assert(out[0] == -1 && idx[0] == 4);
        /* column argmax (reduce dim 0) */
        cr_assert_eq(cai_kern_reduce(KRED_MAX, KERN_F32, 2, sh, x, st, 1, out, idx), 0);
        cr_assert(out[0] == 1 && idx[0] == 0 && out[2] == 3 && idx[2] == 0 && out[3] == 2);
        /* first NaN wins, for max and min, with and without idx */
        float y[6] = {1, NAN, 5, NAN, 7, 0};
        int64_t n6 = 6, s1 = 1;
        cr_assert_eq(cai_kern_reduce(KRED_MAX, KERN_F32, 1, &n6, y, &s1, 1, out, idx), 0);
        cr_assert(isnan(out[0]) && idx[0] == 1);
        cr_assert_eq(cai_kern_reduce(KRED_MIN, KERN_F32, 1, &n6, y, &s1, 1, out, idx), 0);
        cr_assert(isnan(out[0]) && idx[0] == 1);
        cr_assert_eq(cai_kern_reduce(KRED_MAX, KERN_F32, 1, &n6, y, &s1, 1, out, NULL), 0);
        cr_assert(isnan(out[0]));
        double z[100];
        for (int i = 0; i < 100; i++)
            z[i] = i == 77 ? NAN : i;
        int64_t n100 = 100;
        double dout[4];
        cr_assert_eq(cai_kern_reduce(KRED_MIN, KERN_F64, 1, &n100, z, &s1, 1, dout, NULL), 0);
        cr_assert(isnan(dout[0]));
        cr_assert_eq(cai_kern_reduce(KRED_LOGSUMEXP, KERN_F64, 1, &n100, z, &s1, 1, dout, NULL), 0);
        cr_assert(isnan(dout[0]));
        int64_t ix[5] = {3, -2, 9, 9, 1}, iout[2], n5 = 5;
        cr_assert_eq(cai_kern_reduce(KRED_MAX, KERN_I64, 1, &n5, ix, &s1, 1, iout, idx), 0);
        cr_assert(iout[0] == 9 && idx[0] == 2);
        cr_assert_eq(cai_kern_reduce(KRED_SUM, KERN_I64, 1, &n5, ix, &s1, 1, iout, NULL), 0);
        cr_assert_eq(iout[0], 20);
        cr_assert_eq(cai_kern_reduce(KRED_MEAN, KERN_I64, 1, &n5, ix, &s1, 1, iout, NULL), -1);
    }
}

Test(kern, reduce_empty_and_infinite) {
    float x[4] = {-INFINITY, -INFINITY, INFINITY, 1}, out[3];
    int64_t sh[2] = {3, 0}, st[2] = {0, 1}, s1 = 1, n2 = 2;
    cr_assert_eq(cai_kern_reduce(KRED_SUM, KERN_F32, 2, sh, x, st, 2, out, NULL), 0);
    cr_assert(out[0] == 0 && out[2] == 0);
    cr_assert_eq(cai_kern_reduce(KRED_MEAN, KERN_F32, 2, sh, x, st, 2, out, NULL), 0);
    cr_assert(isnan(out[1]));
    cr_assert_eq(cai_kern_reduce(KRED_LOGSUMEXP, KERN_F32, 2, sh, x, st, 2, out, NULL), 0);
    cr_assert(out[1] == -INFINITY);
    cr_assert_eq(cai_kern_reduce(KRED_MAX, KERN_F32, 2, sh, x, st, 2, out, NULL), -1);
    cr_assert_eq(cai_kern_reduce(KRED_SUM, KERN_F32, 2, sh, x, st, 1, out, NULL), 0, "no outputs");
    for (int isa = 0; isa <= tk_max_isa(); isa++) {
        cai_kern_isa_set((kern_isa_level)isa);
        cr_assert_eq(cai_kern_reduce(KRED_LOGSUMEXP, KERN_F32, 1, &n2, x, &s1, 1, out, NULL), 0);
        cr_assert(out[0] == -INFINITY, "all -inf gives -inf, got %g", out[0]);
        cr_assert_eq(cai_kern_reduce(KRED_LOGSUMEXP, KERN_F32, 1, &n2, x + 1, &s1, 1, out, NULL),
                     0);
        cr_assert(out[0] == INFINITY, "any +inf gives +inf, got %g", out[0]);
        float big[2] = {1000, 1000};
        cr_assert_eq(cai_kern_reduce(KRED_LOGSUMEXP, KERN_F32, 1, &n2, big, &s1, 1, out, NULL), 0);
        cr_assert(fabs(out[0] - (1000 + log(2.0))) < 1e-3);
        int64_t sh0 = 5, z = 0;
        float five[5] = {1, 2, 3, 4, 5}, o5[5];
        cr_assert_eq(cai_kern_reduce(KRED_SUM, KERN_F32, 1, &sh0, five, &s1, 0, o5, NULL), 0);
        cr_assert(tk_same_bits(o5, five, sizeof five), "no reduced dims: a copy");
        cr_assert_eq(cai_kern_reduce(KRED_SUM, KERN_F32, 0, NULL, five, NULL, 0, o5, NULL), 0);
        cr_assert_eq(o5[0], 1);
        (void)z;
    }
}

/* Large reductions split into segments and column tiles: same bits for 1 and 2 threads,
 * and cascade summation keeps f32 close to the double sum. */
Test(kern, reduce_threads_deterministic) {
    int64_t n = (1 << 21) + 3;
    float *x = malloc(sizeof(float) * (size_t)n);
    tk_rng_state = 9;
    double ref = 0, abs = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)tk_rand(-1, 2);
        ref += x[i];
        abs += fabs(x[i]);
    }
    for (int isa = 0; isa <= tk_max_isa(); isa++) {
        cai_kern_isa_set((kern_isa_level)isa);
        int64_t s1 = 1, cols[2] = {(n - 3) / 24, 24}, cst[2] = {24, 1};
        float a[32], b[32];
        for (int op = 0; op < KRED__COUNT; op++) {
            cai_kern_set_num_threads(1);
            cr_assert_eq(cai_kern_reduce((kern_red_op)op, KERN_F32, 1, &n, x, &s1, 1, a, NULL), 0);
            cai_kern_set_num_threads(2);
            cr_assert_eq(cai_kern_reduce((kern_red_op)op, KERN_F32, 1, &n, x, &s1, 1, b, NULL), 0);
            cr_assert(tk_same_bits(a, b, sizeof(float)), "op %d: %.9g vs %.9g", op, a[0], b[0]);
            cai_kern_set_num_threads(1);
            cr_assert_eq(cai_kern_reduce((kern_red_op)op, KERN_F32, 2, cols, x, cst, 1, a, NULL),
                         0);
            cai_kern_set_num_threads(2);
            cr_assert_eq(cai_kern_reduce((kern_red_op)op, KERN_F32, 2, cols, x, cst, 1, b, NULL),
                         0);
            cr_assert(tk_same_bits(a, b, 24 * sizeof(float)), "column op %d", op);
        }
        cai_kern_reduce(KRED_SUM, KERN_F32, 1, &n, x, &s1, 1, a, NULL);
        cr_assert(fabs(a[0] - ref) <= 1e-6 * abs, "%s: sum %.9g vs %.9g",
                  cai_kern_isa_name((kern_isa_level)isa), a[0], ref);
    }
    free(x);
}

/* ------------------------------------------------------------------ row kernels */

Test(kern, softmax_and_log_softmax) {
    const int64_t ns[4] = {1, 7, 100, 3000}, rows = 5;
    tk_check chk = {0};
    char what[96];
    for (int dt = 0; dt < 2; dt++)
        for (int isa = 0; isa <= tk_max_isa(); isa++) {
            cai_kern_isa_set((kern_isa_level)isa);
            for (int t = 0; t < 4; t++) {
                int64_t n = ns[t];
                void *x = malloc((size_t)(rows * n) * 8), *y = malloc((size_t)(rows * n) * 8);
                tk_rng_state = 3 + (uint64_t)t;
                for (int64_t i = 0; i < rows * n; i++)
                    tk_set((kern_dtype)dt, x, i, tk_rand(-10, 10) + (i / n == 2 ? 500 : 0));
                for (int lg = 0; lg < 2; lg++) {
                    cr_assert_eq(cai_kern_softmax((kern_dtype)dt, rows, n, x, y, lg), 0);
                    for (int64_t r = 0; r < rows; r++) {
                        double m = -INFINITY, s = 0;
                        for (int64_t i = 0; i < n; i++)
                            m = fmax(m, tk_get((kern_dtype)dt, x, r * n + i));
                        for (int64_t i = 0; i < n; i++)
                            s += exp(tk_get((kern_dtype)dt, x, r * n + i) - m);
                        snprintf(what, sizeof what, "%s softmax log=%d n=%lld dt%d",
                                 cai_kern_isa_name((kern_isa_level)isa), lg, (long long)n, dt);
                        for (int64_t i = 0; i < n; i++) {
                            double v = tk_get((kern_dtype)dt, x, r * n + i) - m;
                            double want = lg ? v - log(s) : exp(v) / s;
                            tk_close(&chk, tk_get((kern_dtype)dt, y, r * n + i), want,
                                     dt ? 1e-13 : 1e-5, dt ? 1e-15 : 1e-7, what, i);
                        }
                    }
                }
                free(x);
                free(y);
            }
        }
    TK_ASSERT(chk);
    float big[2] = {1000, 0}, out[2];
    cr_assert_eq(cai_kern_softmax(KERN_F32, 1, 2, big, out, true), 0);
    cr_assert(out[0] == 0 && out[1] == -1000, "log_softmax is shift-stable: %g %g", out[0], out[1]);
    cr_assert_eq(cai_kern_softmax(KERN_I64, 1, 2, big, out, true), -1);
}

Test(kern, layer_norm) {
    const int64_t ns[3] = {1, 33, 2000}, rows = 4;
    tk_check chk = {0};
    char what[96];
    for (int dt = 0; dt < 2; dt++)
        for (int isa = 0; isa <= tk_max_isa(); isa++) {
            cai_kern_isa_set((kern_isa_level)isa);
            for (int t = 0; t < 3; t++) {
                int64_t n = ns[t];
                size_t bytes = (size_t)(rows * n) * 8;
                void *x = malloc(bytes), *y = malloc(bytes), *w = malloc((size_t)n * 8);
                void *b = malloc((size_t)n * 8), *mean = malloc(64), *rstd = malloc(64);
                tk_rng_state = 11 + (uint64_t)t;
                for (int64_t i = 0; i < rows * n; i++)
                    tk_set((kern_dtype)dt, x, i, tk_rand(-2, 2) + 3);
                for (int64_t i = 0; i < n; i++) {
                    tk_set((kern_dtype)dt, w, i, tk_rand(0.5, 1.5));
                    tk_set((kern_dtype)dt, b, i, tk_rand(-1, 1));
                }
                for (int affine = 0; affine < 2; affine++) {
                    cr_assert_eq(cai_kern_layer_norm((kern_dtype)dt, rows, n, x, affine ? w : NULL,
                                                     affine ? b : NULL, 1e-5, y, mean, rstd),
                                 0);
                    snprintf(what, sizeof what, "%s layer_norm n=%lld affine=%d dt%d",
                             cai_kern_isa_name((kern_isa_level)isa), (long long)n, affine, dt);
                    for (int64_t r = 0; r < rows; r++) {
                        double mu = 0, var = 0;
                        for (int64_t i = 0; i < n; i++)
                            mu += tk_get((kern_dtype)dt, x, r * n + i);
                        mu /= (double)n;
                        for (int64_t i = 0; i < n; i++) {
                            double d = tk_get((kern_dtype)dt, x, r * n + i) - mu;
                            var += d * d;
                        }
                        double rs = 1 / sqrt(var / (double)n + 1e-5), tol = dt ? 1e-12 : 2e-5;
                        tk_close(&chk, tk_get((kern_dtype)dt, mean, r), mu, tol, tol, what, r);
                        tk_close(&chk, tk_get((kern_dtype)dt, rstd, r), rs, tol, tol, what, r);
                        for (int64_t i = 0; i < n; i++) {
                            double want = (tk_get((kern_dtype)dt, x, r * n + i) - mu) * rs;
                            if (affine)
                                want = want * tk_get((kern_dtype)dt, w, i) +
                                       tk_get((kern_dtype)dt, b, i);
                            tk_close(&chk, tk_get((kern_dtype)dt, y, r * n + i), want, tol, tol,
                                     what, i);
                        }
                    }
                }
                free(x), free(y), free(w), free(b), free(mean), free(rstd);
            }
        }
    TK_ASSERT(chk);
}

/* ------------------------------------------------------------------ GEMM */

/* Checks C[bi] = alpha * op(A) op(B) + beta * C0 against doubles; A, B given as element
 * accessors through kern_mat strides. */
static void tk_gemm_check(tk_check *chk, kern_dtype dt, int64_t batch, int64_t M, int64_t N,
                          int64_t K, double alpha, kern_mat A, bool ta, kern_mat B, bool tb,
                          double beta, const void *C0, const void *C, int64_t ldc, int64_t bsC,
                          const char *what) {
    double tol = dt == KERN_F32 ? 1e-5 : 1e-12;
    for (int64_t bi = 0; bi < batch; bi++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) {
                    int64_t ai = bi * A.bs + (ta ? k * A.rs + i * A.cs : i * A.rs + k * A.cs);
                    int64_t bj = bi * B.bs + (tb ? j * B.rs + k * B.cs : k * B.rs + j * B.cs);
                    s += tk_get(dt, A.data, ai) * tk_get(dt, B.data, bj);
                }
                int64_t ci = bi * bsC + i * ldc + j;
                double c0 = tk_get(dt, C0, ci);
                double want = alpha * s + (beta == 0 ? 0 : beta * c0);
                tk_close(chk, tk_get(dt, C, ci), want, tol, tol, what, ci);
            }
}

static void *tk_fill(kern_dtype dt, int64_t n, double lo, double hi) {
    void *p = malloc((size_t)(n > 0 ? n : 1) * 8);
    for (int64_t i = 0; i < n; i++)
        tk_set(dt, p, i, tk_rand(lo, hi));
    return p;
}

Test(kern, gemm_transpose_combos) {
    const int64_t dims[2][3] = {{5, 7, 3}, {33, 17, 29}};
    tk_check chk = {0};
    char what[96];
    tk_rng_state = 21;
    for (int dt = 0; dt < 2; dt++)
        for (int s = 0; s < 2; s++)
            for (int t = 0; t < 4; t++) {
                int64_t M = dims[s][0], N = dims[s][1], K = dims[s][2];
                bool ta = t & 1, tb = t & 2;
                void *a = tk_fill((kern_dtype)dt, M * K, -1, 1);
                void *b = tk_fill((kern_dtype)dt, K * N, -1, 1);
                void *c0 = tk_fill((kern_dtype)dt, M * N, -1, 1), *c = malloc((size_t)(M * N) * 8);
                memcpy(c, c0, (size_t)(M * N) * cai_kern_dtype_size((kern_dtype)dt));
                /* stored row-major as op's operand: A is K x M when transposed */
                kern_mat A = {a, ta ? M : K, 1, 0}, B = {b, tb ? K : N, 1, 0};
                int rc =
                    cai_kern_gemm((kern_dtype)dt, 1, M, N, K, 0.5, A, ta, B, tb, 0.25, c, N, 0);
                cr_assert_eq(rc, 0);
                snprintf(what, sizeof what, "gemm %lldx%lldx%lld ta%d tb%d dt%d", (long long)M,
                         (long long)N, (long long)K, ta, tb, dt);
                tk_gemm_check(&chk, (kern_dtype)dt, 1, M, N, K, 0.5, A, ta, B, tb, 0.25, c0, c, N,
                              0, what);
                /* the same matrices seen through column-major strides (rs == 1) */
                kern_mat At = {a, 1, ta ? M : K, 0};
                memcpy(c, c0, (size_t)(M * N) * cai_kern_dtype_size((kern_dtype)dt));
                cr_assert_eq(
                    cai_kern_gemm((kern_dtype)dt, 1, M, N, K, 1, At, !ta, B, tb, 0, c, N, 0), 0);
                tk_gemm_check(&chk, (kern_dtype)dt, 1, M, N, K, 1, At, !ta, B, tb, 0, c0, c, N, 0,
                              what);
                free(a), free(b), free(c0), free(c);
            }
    TK_ASSERT(chk);
    cr_assert_eq(cai_kern_gemm(KERN_I64, 1, 1, 1, 1, 1, (kern_mat){0}, false, (kern_mat){0}, false,
                               0, NULL, 1, 0),
                 -1);
}

static atomic_int tk_allocs;
static void *tk_count_alloc(size_t n) {
    atomic_fetch_add(&tk_allocs, 1);
    return malloc(n);
}
static void *tk_fail_alloc(size_t n) {
    (void)n;
    return NULL;
}

/* Neither stride 1: the operand is packed through the allocator; failure is -2. */
Test(kern, gemm_copy_path_and_allocator) {
    int64_t M = 6, N = 5, K = 4;
    tk_check chk = {0};
    tk_rng_state = 31;
    for (int dt = 0; dt < 2; dt++) {
        void *a = tk_fill((kern_dtype)dt, 3 * M * K + 8, -1, 1),
             *b = tk_fill((kern_dtype)dt, K * N, -1, 1);
        void *c0 = tk_fill((kern_dtype)dt, 2 * M * N, -1, 1), *c = malloc((size_t)(2 * M * N) * 8);
        kern_mat A = {a, 3 * K, 2, 0}, B = {b, N, 1, 0};
        cai_kern_set_allocator((kern_allocator){tk_count_alloc, free});
        atomic_store(&tk_allocs, 0);
        memcpy(c, c0, (size_t)(2 * M * N) * cai_kern_dtype_size((kern_dtype)dt));
        /* ldc = 2N: C rows are strided too */
        cr_assert_eq(
            cai_kern_gemm((kern_dtype)dt, 1, M, N, K, 1, A, false, B, false, 1, c, 2 * N, 0), 0);
        cr_assert(atomic_load(&tk_allocs) >= 1, "packing uses the scratch allocator");
        tk_gemm_check(&chk, (kern_dtype)dt, 1, M, N, K, 1, A, false, B, false, 1, c0, c, 2 * N, 0,
                      "copy path");
        cai_kern_set_allocator((kern_allocator){tk_fail_alloc, free});
        cr_assert_eq(
            cai_kern_gemm((kern_dtype)dt, 1, M, N, K, 1, A, false, B, false, 1, c, 2 * N, 0), -2);
        cai_kern_set_allocator((kern_allocator){NULL, NULL}); /* back to the default */
        free(a), free(b), free(c0), free(c);
    }
    TK_ASSERT(chk);
}

/* bs == 0 broadcasts A over the batch; beta = 1 accumulates; beta = 0 overwrites NaN. */
Test(kern, gemm_batch_broadcast_and_beta) {
    tk_check chk = {0};
    tk_rng_state = 41;
    const int64_t cfg[2][4] = {{3, 4, 6, 5}, {300, 8, 8, 8}}; /* batch, M, N, K */
    for (int dt = 0; dt < 2; dt++)
        for (int s = 0; s < 2; s++) {
            int64_t batch = cfg[s][0], M = cfg[s][1], N = cfg[s][2], K = cfg[s][3];
            void *a = tk_fill((kern_dtype)dt, M * K, -1, 1);
            void *b = tk_fill((kern_dtype)dt, batch * K * N, -1, 1);
            void *c0 = tk_fill((kern_dtype)dt, batch * M * N, -1, 1);
            void *c = malloc((size_t)(batch * M * N) * 8);
            size_t cb = (size_t)(batch * M * N) * cai_kern_dtype_size((kern_dtype)dt);
            kern_mat A = {a, K, 1, 0}, B = {b, 1, K, K * N}; /* B stored transposed per item */
            memcpy(c, c0, cb);
            cr_assert_eq(cai_kern_gemm((kern_dtype)dt, batch, M, N, K, 1, A, false, B, false, 1, c,
                                       N, M * N),
                         0);
            tk_gemm_check(&chk, (kern_dtype)dt, batch, M, N, K, 1, A, false, B, false, 1, c0, c, N,
                          M * N, "batch beta=1");
            for (int64_t i = 0; i < batch * M * N; i++)
                tk_set((kern_dtype)dt, c, i, NAN);
            cr_assert_eq(cai_kern_gemm((kern_dtype)dt, batch, M, N, K, 2, A, false, B, false, 0, c,
                                       N, M * N),
                         0);
            tk_gemm_check(&chk, (kern_dtype)dt, batch, M, N, K, 2, A, false, B, false, 0, c0, c, N,
                          M * N, "batch beta=0");
            free(a), free(b), free(c0), free(c);
        }
    TK_ASSERT(chk);
}

Test(kern, gemm_k0_and_empty) {
    float c[6] = {1, 2, 3, 4, NAN, 6}, a[1] = {0}, b[1] = {0};
    kern_mat A = {a, 0, 1, 0}, B = {b, 3, 1, 0};
    cr_assert_eq(cai_kern_gemm(KERN_F32, 1, 2, 3, 0, 1, A, false, B, false, 0.5, c, 3, 0), 0);
    cr_assert(c[0] == 0.5f && c[3] == 2 && isnan(c[4]) && c[5] == 3);
    cr_assert_eq(cai_kern_gemm(KERN_F32, 1, 2, 3, 0, 1, A, false, B, false, 0, c, 3, 0), 0);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(c[i], 0, "beta 0 overwrites, NaN included");
    cr_assert_eq(cai_kern_gemm(KERN_F32, 1, 0, 3, 4, 1, A, false, B, false, 0, c, 3, 0), 0);
    cr_assert_eq(cai_kern_gemm(KERN_F32, 0, 2, 3, 4, 1, A, false, B, false, 0, c, 3, 0), 0);
    cr_assert_eq(cai_kern_gemm(KERN_F32, 1, 2, 3, 1, 1, A, false, B, false, 0, c, 2, 0), -1,
                 "ldc < N");
    /* a 1 x K row times K x 1 column: strides of size-1 dims are ignored */
    float r[3] = {1, 2, 3}, col[9] = {4, 0, 0, 5, 0, 0, 6, 0, 0}, d = 0;
    kern_mat R = {r, 999, 1, 0}, Cm = {col, 3, 777, 0};
    cr_assert_eq(cai_kern_gemm(KERN_F32, 1, 1, 1, 3, 1, R, false, Cm, false, 0, &d, 1, 0), 0);
    cr_assert_eq(d, 32);
}

/* ------------------------------------------------------------------ indexing */

Test(kern, index_select_and_add) {
    /* x: [outer 2, n 4, inner 3] */
    double x[24], out[2 * 5 * 3];
    for (int i = 0; i < 24; i++)
        x[i] = i;
    int64_t index[5] = {3, 0, 3, 1, 2};
    cr_assert_eq(cai_kern_index_select(KERN_F64, 2, 4, 3, x, index, 5, out, NULL, NULL), 0);
    for (int o = 0; o < 2; o++)
        for (int j = 0; j < 5; j++)
            for (int i = 0; i < 3; i++)
                cr_assert_eq(out[(o * 5 + j) * 3 + i], x[(o * 4 + index[j]) * 3 + i]);
    /* index_add with a duplicate index accumulates both */
    double acc[24] = {0};
    cr_assert_eq(cai_kern_index_add(KERN_F64, 2, 4, 3, acc, index, 5, out, NULL, NULL), 0);
    for (int o = 0; o < 2; o++)
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < 3; i++) {
                double want = 0;
                for (int j = 0; j < 5; j++)
                    if (index[j] == k)
                        want += out[(o * 5 + j) * 3 + i];
                cr_assert_eq(acc[(o * 4 + k) * 3 + i], want);
            }
    /* big inner: several chunks per outer row, f32 and int64 */
    int64_t inner = 3000, idx2[3] = {1, 1, 0};
    float *src = malloc(sizeof(float) * 3 * 3000), *dst = calloc(2 * 3000, sizeof(float));
    int64_t *isrc = malloc(sizeof(int64_t) * 3 * 3000), *idst = calloc(2 * 3000, sizeof(int64_t));
    for (int64_t i = 0; i < 3 * inner; i++) {
        src[i] = (float)(i % 17);
        isrc[i] = i;
    }
    cr_assert_eq(cai_kern_index_add(KERN_F32, 1, 2, inner, dst, idx2, 3, src, NULL, NULL), 0);
    cr_assert_eq(cai_kern_index_add(KERN_I64, 1, 2, inner, idst, idx2, 3, isrc, NULL, NULL), 0);
    for (int64_t i = 0; i < inner; i++) {
        cr_assert_eq(dst[i], src[2 * inner + i]);
        cr_assert_eq(dst[inner + i], src[i] + src[inner + i]);
        cr_assert_eq(idst[inner + i], isrc[i] + isrc[inner + i]);
    }
    free(src), free(dst), free(isrc), free(idst);
}

Test(kern, gather_and_scatter_add) {
    /* x: [outer 2, n 3, inner 2]; index: [2, n_out 4, 2] */
    float x[12], out[16], acc[12] = {0};
    for (int i = 0; i < 12; i++)
        x[i] = (float)(10 * i);
    int64_t index[16] = {2, 0, 1, 1, 0, 0, 2, 2, 1, 0, 1, 2, 0, 0, 2, 1};
    cr_assert_eq(cai_kern_gather(KERN_F32, 2, 3, 2, x, index, 4, out, NULL, NULL), 0);
    for (int o = 0; o < 2; o++)
        for (int j = 0; j < 4; j++)
            for (int i = 0; i < 2; i++) {
                int64_t p = (o * 4 + j) * 2 + i;
                cr_assert_eq(out[p], x[(o * 3 + index[p]) * 2 + i]);
            }
    cr_assert_eq(cai_kern_scatter_add(KERN_F32, 2, 3, 2, acc, index, 4, out, NULL, NULL), 0);
    for (int o = 0; o < 2; o++)
        for (int k = 0; k < 3; k++)
            for (int i = 0; i < 2; i++) {
                float want = 0;
                for (int j = 0; j < 4; j++) {
                    int64_t p = (o * 4 + j) * 2 + i;
                    if (index[p] == k)
                        want += out[p];
                }
                cr_assert_eq(acc[(o * 3 + k) * 2 + i], want);
            }
}

/* inner 1 (a scatter along the last dim, max_pool2d's derivative) has its own loop: each
 * row's entries added in order, duplicates included, in every dtype */
Test(kern, scatter_add_along_the_last_dim) {
    enum { OUTER = 70, N = 5, M = 9 };
    int64_t index[OUTER * M];
    double src[OUTER * M], want[OUTER * N] = {0}, got[OUTER * N] = {0};
    float srcf[OUTER * M], gotf[OUTER * N] = {0};
    int64_t srci[OUTER * M], goti[OUTER * N] = {0};
    for (int o = 0; o < OUTER; o++)
        for (int j = 0; j < M; j++) {
            int p = o * M + j;
            index[p] = (o * 7 + j * 3) % N; /* each row hits some positions twice */
            src[p] = 0.25 * (p % 13) - 1.0;
            srcf[p] = (float)src[p];
            srci[p] = p % 11 - 5;
            want[o * N + index[p]] += src[p];
        }
    cr_assert_eq(cai_kern_scatter_add(KERN_F64, OUTER, N, 1, got, index, M, src, NULL, NULL), 0);
    cr_assert_eq(cai_kern_scatter_add(KERN_F32, OUTER, N, 1, gotf, index, M, srcf, NULL, NULL), 0);
    cr_assert_eq(cai_kern_scatter_add(KERN_I64, OUTER, N, 1, goti, index, M, srci, NULL, NULL), 0);
    for (int k = 0; k < OUTER * N; k++) {
        cr_assert_eq(got[k], want[k], "f64 entry %d", k);
        cr_assert_eq(gotf[k], (float)want[k], "f32 entry %d", k); /* quarters: exact */
        int64_t wi = 0;
        for (int j = 0; j < M; j++)
            wi += index[k / N * M + j] == k % N ? srci[k / N * M + j] : 0;
        cr_assert_eq(goti[k], wi, "i64 entry %d", k);
    }
}

Test(kern, index_out_of_range) {
    double x[12] = {0}, out[12] = {0};
    int64_t pos = -7, val = -7;
    int64_t bad1[3] = {0, 4, 1}, bad2[3] = {0, 1, -1};
    cr_assert_eq(cai_kern_index_select(KERN_F64, 1, 4, 3, x, bad1, 3, out, &pos, &val), -1);
    cr_assert(pos == 1 && val == 4);
    cr_assert_eq(cai_kern_index_add(KERN_F64, 1, 4, 3, out, bad2, 3, x, &pos, &val), -1);
    cr_assert(pos == 2 && val == -1, "negative indices are out of range");
    int64_t g[6] = {0, 1, 2, 3, 0, 0};
    out[0] = 42;
    cr_assert_eq(cai_kern_gather(KERN_F64, 1, 3, 2, x, g, 3, out, &pos, &val), -1);
    cr_assert(pos == 3 && val == 3);
    cr_assert_eq(out[0], 42, "nothing written on error");
    cr_assert_eq(cai_kern_scatter_add(KERN_F64, 1, 3, 2, out, g, 3, x, &pos, &val), -1);
    cr_assert(pos == 3 && val == 3 && out[0] == 42);
    cr_assert_eq(cai_kern_index_select(KERN_F64, 1, 4, 3, x, bad1, 3, out, NULL, NULL), -1);
}

/* ------------------------------------------------------------------ random */

Test(kern, philox_known_answers) {
    /* Random123 kat_vectors */
    const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                                {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}};
    const uint32_t key[3][2] = {{0, 0}, {0xffffffff, 0xffffffff}, {0xa4093822, 0x299f31d0}};
    const uint32_t want[3][4] = {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
                                 {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
                                 {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}};
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        cai_kern_philox4x32_10(ctr[t], key[t], out);
        for (int i = 0; i < 4; i++)
            cr_assert_eq(out[i], want[t][i], "vector %d word %d: %08x", t, i, out[i]);
    }
}

Test(kern, rand_reproducible) {
    enum { N = 100001 };
    for (int dt = 0; dt < 2; dt++) {
        size_t esz = cai_kern_dtype_size((kern_dtype)dt);
        char *a = malloc(N * esz), *b = malloc(N * esz), *c = malloc(N * esz);
        for (int kind = 0; kind < 3; kind++) {
            uint64_t off = 5, off2 = 5;
            cai_kern_set_num_threads(1);
            if (kind == 0)
                cai_kern_rand_uniform((kern_dtype)dt, 1234, &off, N, a);
            else if (kind == 1)
                cai_kern_rand_normal((kern_dtype)dt, 1234, &off, N, a);
            else
                cai_kern_rand_dropout_mask((kern_dtype)dt, 1234, &off, N, 0.3, a);
            cr_assert_eq(off, 5 + N, "offset advances by n");
            /* two calls (an odd split, through a Box-Muller pair) and 2 threads */
            cai_kern_set_num_threads(2);
            int64_t first = 33333;
            for (int part = 0; part < 2; part++) {
                int64_t cnt = part ? N - first : first;
                char *dst = b + (part ? (size_t)first * esz : 0);
                if (kind == 0)
                    cai_kern_rand_uniform((kern_dtype)dt, 1234, &off2, cnt, dst);
                else if (kind == 1)
                    cai_kern_rand_normal((kern_dtype)dt, 1234, &off2, cnt, dst);
                else
                    cai_kern_rand_dropout_mask((kern_dtype)dt, 1234, &off2, cnt, 0.3, dst);
            }
            cr_assert(tk_same_bits(a, b, N * esz), "kind %d dt %d: same stream", kind, dt);
            uint64_t off3 = 5;
            cai_kern_rand_uniform((kern_dtype)dt, 1235, &off3, N, c);
            cr_assert(!tk_same_bits(a, c, 64), "another seed gives other numbers");
        }
        free(a), free(b), free(c);
    }
}

Test(kern, rand_statistics) {
    enum { N = 400000 };
    double *x = malloc(sizeof(double) * N);
    float *f = malloc(sizeof(float) * N);
    uint64_t off = 0;
    cai_kern_rand_uniform(KERN_F64, 7, &off, N, x);
    cai_kern_rand_uniform(KERN_F32, 7, &off, N, f);
    double m = 0, v = 0, mf = 0, vf = 0;
    for (int i = 0; i < N; i++) {
        cr_assert(x[i] >= 0 && x[i] < 1 && f[i] >= 0 && f[i] < 1);
        m += x[i];
        mf += f[i];
    }
    m /= N, mf /= N;
    for (int i = 0; i < N; i++) {
        v += (x[i] - m) * (x[i] - m);
        vf += (f[i] - mf) * (f[i] - mf);
    }
    v /= N, vf /= N;
    cr_assert(fabs(m - 0.5) < 3e-3 && fabs(v - 1.0 / 12) < 2e-3, "uniform f64 %g %g", m, v);
    cr_assert(fabs(mf - 0.5) < 3e-3 && fabs(vf - 1.0 / 12) < 2e-3, "uniform f32 %g %g", mf, vf);
    for (int dt = 0; dt < 2; dt++) {
        void *p = dt ? (void *)x : (void *)f;
        cai_kern_rand_normal((kern_dtype)dt, 8, &off, N, p);
        double s = 0, s2 = 0;
        for (int i = 0; i < N; i++) {
            double z = dt ? x[i] : f[i];
            cr_assert(isfinite(z));
            s += z;
            s2 += z * z;
        }
        double mean = s / N, sd = sqrt(s2 / N - mean * mean);
        cr_assert(fabs(mean) < 0.01 && fabs(sd - 1) < 0.01, "normal dt%d %g %g", dt, mean, sd);
    }
    cai_kern_rand_dropout_mask(KERN_F32, 9, &off, N, 0.3, f);
    int zeros = 0;
    for (int i = 0; i < N; i++) {
        cr_assert(f[i] == 0 || f[i] == (float)(1 / 0.7));
        zeros += f[i] == 0;
    }
    cr_assert(fabs((double)zeros / N - 0.3) < 5e-3, "dropout rate %g", (double)zeros / N);
    cai_kern_rand_dropout_mask(KERN_F32, 9, &off, 1000, 1.0, f);
    cai_kern_rand_dropout_mask(KERN_F64, 9, &off, 1000, 0.0, x);
    for (int i = 0; i < 1000; i++)
        cr_assert(f[i] == 0 && x[i] == 1);
    free(x), free(f);
}

/* ------------------------------------------------------------------ thread pool */

typedef struct {
    atomic_int *hits;
    int64_t grain;
    atomic_int short_ranges, calls;
} tk_pf_ctx;

static void tk_pf_mark(void *ctx, int64_t begin, int64_t end) {
    tk_pf_ctx *c = ctx;
    atomic_fetch_add(&c->calls, 1);
    if (end - begin < c->grain)
        atomic_fetch_add(&c->short_ranges, 1);
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add(&c->hits[i], 1);
}

static void tk_pf_nested(void *ctx, int64_t begin, int64_t end) {
    tk_pf_ctx *c = ctx;
    for (int64_t i = begin; i < end; i++) /* a nested call runs serially, covering all */
        cai_kern_parallel_for(10, 1, tk_pf_mark, c);
}

Test(kern, parallel_for_covers_range_once) {
    enum { N = 100003 };
    atomic_int *hits = calloc(N, sizeof(atomic_int));
    for (int t = 1; t <= 2; t++) {
        cr_assert_eq(cai_kern_set_num_threads(t), t);
        cr_assert_eq(cai_kern_num_threads(), t);
        for (int64_t grain = 1; grain <= 40000; grain *= 200) {
            tk_pf_ctx c = {hits, grain, 0, 0};
            for (int i = 0; i < N; i++)
                atomic_store(&hits[i], 0);
            cai_kern_parallel_for(N, grain, tk_pf_mark, &c);
            for (int i = 0; i < N; i++)
                cr_assert_eq(atomic_load(&hits[i]), 1, "t=%d grain=%lld i=%d", t, (long long)grain,
                             i);
            cr_assert_eq(atomic_load(&c.short_ranges), 0, "ranges shorter than grain");
        }
        tk_pf_ctx c = {hits, 1000, 0, 0};
        cai_kern_parallel_for(1999, 1000, tk_pf_mark, &c);
        cr_assert_eq(atomic_load(&c.calls), 1, "n < 2 * grain runs serially");
        for (int i = 0; i < 10; i++)
            atomic_store(&hits[i], 0);
        tk_pf_ctx n = {hits, 1, 0, 0};
        cai_kern_parallel_for(50, 1, tk_pf_nested, &n);
        for (int i = 0; i < 10; i++)
            cr_assert_eq(atomic_load(&hits[i]), 50);
    }
    free(hits);
}

/* The public name of the kernel path is the one the kernels really take. */
Test(kern, public_isa_name_is_the_path_in_use) {
    const char *isa = ca_kernel_isa();
    cr_assert_str_eq(isa, cai_kern_isa_name(cai_kern_isa()));
    cr_assert(strcmp(isa, "avx512") == 0 || strcmp(isa, "avx2") == 0 || strcmp(isa, "scalar") == 0,
              "unexpected ISA name %s", isa);
}

/* The public BLAS core is the one the kernels' OpenBLAS reports. */
Test(kern, public_blas_core_is_openblas_core) {
    cr_assert_str_eq(ca_blas_core(), cai_kern_blas_core());
    cr_assert(strlen(ca_blas_core()) > 0);
}

/* ------------------------------------------------------------------ CA_ASSERT */

static bool tk_count_call(int *calls) {
    ++*calls;
    return false;
}

#ifdef CAGRAD_DEBUG_ASSERTS
/* The sanitizer build checks internal invariants: a broken one aborts. */
Test(ca_assert, aborts_on_a_broken_invariant, .signal = SIGABRT) {
    int calls = 0;
    CA_ASSERT(tk_count_call(&calls));
}
#else
/* Every other build compiles CA_ASSERT away: its condition is type-checked, never run. */
Test(ca_assert, never_evaluates_its_condition) {
    int calls = 0;
    CA_ASSERT(tk_count_call(&calls));
    cr_assert_eq(calls, 0, "CA_ASSERT ran its condition %d times in a plain build", calls);
}
#endif
