/* ops_pw_deriv.c - the derivative rule of the generic pointwise row (CA_OP_PW), one entry
 * per kernel op.
 *
 * Derivative rules build their results from CA_OP_PW (the KPW_*_BW helpers, comparisons
 * as masks, ...). A first backward runs them with grad mode off, so this rule is reached
 * only by a double backward (create_graph): it differentiates those helpers once more.
 *
 * The table below maps every kern_pw_op to one of:
 *  - a function giving d(out)/d(input i) * g for every input the node needs, written with
 *    builder calls so that it is differentiable again (third order and up);
 *  - PWD_NONE: the result carries no gradient at all (comparisons, sign, floor, fill: their
 *    derivative is zero almost everywhere and PyTorch's versions return booleans or
 *    integer-valued results); op.c then records no node for them.
 * A kernel op without an entry is a hole that tests/c/test_double_backward.c finds by
 * walking KERN_PW_OPS, and then checks every entry against finite differences.
 */
#include "autograd/builder.h"

#include <math.h>

typedef struct {
    kern_pw_op op;
    ca_bval g;    /* the gradient of the node's output */
    ca_bval x[3]; /* the op's inputs a, b, c (NULL beyond its arity) */
    double p0, p1;
    bool need[3];
} pw_call;

/* Set d[i] = d(out)/d(input i) * g (not yet summed down to the input's shape) for every
 * i with c->need[i]. */
typedef void (*pw_deriv_fn)(ca_builder *b, const pw_call *c, ca_bval *d);

typedef enum { PWD_MISSING, PWD_RULE, PWD_NONE } pw_deriv_kind;

typedef struct {
    pw_deriv_kind kind;
    pw_deriv_fn fn;
} pw_deriv;

/* ---------------------------------------------------------------------------------------
 * Shorthands
 */
static ca_bval pw1(ca_builder *b, kern_pw_op op, ca_bval x, double p0, double p1) {
    return bx_pw(b, op, x, NULL, NULL, p0, p1);
}
static ca_bval pw2(ca_builder *b, kern_pw_op op, ca_bval x, ca_bval y, double p0, double p1) {
    return bx_pw(b, op, x, y, NULL, p0, p1);
}
static ca_bval sq(ca_builder *b, ca_bval x) {
    return pw1(b, KPW_SQUARE, x, 0, 0);
}
static ca_bval rsub_s(ca_builder *b, double s, ca_bval x) { /* s - x */
    return pw1(b, KPW_RSUB_S, x, s, 0);
}
static ca_bval sigmoid(ca_builder *b, ca_bval x) {
    return pw1(b, KPW_SIGMOID, x, 0, 0);
}
/* A unary op: d[0] = EXPR over g and a. */
#define UNARY(NAME, EXPR)                                                                          \
    static void NAME(ca_builder *b, const pw_call *c, ca_bval *d) {                                \
        ca_bval g = c->g, a = c->x[0];                                                             \
        (void)a;                                                                                   \
        d[0] = (EXPR);                                                                             \
    }

/* A derivative helper (g, x) -> g * f'(x): linear in g, so its derivative for g is the same
 * op applied to the incoming gradient; for x it is g * f''(x) * gg, given by X2 over g (the
 * incoming gradient), h (the helper's own g) and x. */
#define HELPER(NAME, X2)                                                                           \
    static void NAME(ca_builder *b, const pw_call *c, ca_bval *d) {                                \
        ca_bval g = c->g, h = c->x[0], x = c->x[1];                                                \
        (void)h;                                                                                   \
        if (c->need[0])                                                                            \
            d[0] = bx_pw(b, c->op, g, x, NULL, c->p0, c->p1);                                      \
        if (c->need[1])                                                                            \
            d[1] = (X2);                                                                           \
    }

/* ---------------------------------------------------------------------------------------
 * Unary ops
 */
UNARY(d_copy, g)
UNARY(d_neg, bx_neg(b, g))
UNARY(d_exp, bx_mul(b, g, bx_exp(b, a)))
UNARY(d_log, bx_div(b, g, a))
UNARY(d_sqrt, bx_div(b, g, bx_mul_s(b, pw1(b, KPW_SQRT, a, 0, 0), 2.0)))
/* -g / (2 a sqrt a) */
UNARY(d_rsqrt, bx_mul_s(b, bx_div(b, bx_mul(b, g, pw1(b, KPW_RSQRT, a, 0, 0)), a), -0.5))
UNARY(d_abs, pw2(b, KPW_ABS_BW, g, a, 0, 0))
UNARY(d_sin, bx_mul(b, g, pw1(b, KPW_COS, a, 0, 0)))
UNARY(d_cos, bx_neg(b, bx_mul(b, g, pw1(b, KPW_SIN, a, 0, 0))))
UNARY(d_tanh, pw2(b, KPW_TANH_BW, g, pw1(b, KPW_TANH, a, 0, 0), 0, 0))
UNARY(d_sigmoid, pw2(b, KPW_SIGMOID_BW, g, sigmoid(b, a), 0, 0))
UNARY(d_recip, bx_neg(b, bx_div(b, g, sq(b, a))))
UNARY(d_square, bx_mul(b, g, bx_mul_s(b, a, 2.0)))
UNARY(d_log1p, bx_div(b, g, bx_add_s(b, a, 1.0)))
UNARY(d_expm1, bx_mul(b, g, bx_exp(b, a)))
UNARY(d_log2, bx_div(b, g, bx_mul_s(b, a, 0.69314718055994530942)))
UNARY(d_log10, bx_div(b, g, bx_mul_s(b, a, 2.30258509299404568402)))
UNARY(d_exp2, bx_mul(b, g, bx_mul_s(b, pw1(b, KPW_EXP2, a, 0, 0), 0.69314718055994530942)))
UNARY(d_erf, pw2(b, KPW_ERF_BW, g, a, 0, 0))
UNARY(d_erfc, bx_neg(b, pw2(b, KPW_ERF_BW, g, a, 0, 0)))
UNARY(d_erfinv, pw2(b, KPW_ERFINV_BW, g, pw1(b, KPW_ERFINV, a, 0, 0), 0, 0))
UNARY(d_sinh, bx_mul(b, g, pw1(b, KPW_COSH, a, 0, 0)))
UNARY(d_cosh, bx_mul(b, g, pw1(b, KPW_SINH, a, 0, 0)))
UNARY(d_tan, bx_mul(b, g, bx_add_s(b, sq(b, pw1(b, KPW_TAN, a, 0, 0)), 1.0)))
UNARY(d_asin, bx_mul(b, g, pw1(b, KPW_RSQRT, rsub_s(b, 1.0, sq(b, a)), 0, 0)))
UNARY(d_acos, bx_neg(b, bx_mul(b, g, pw1(b, KPW_RSQRT, rsub_s(b, 1.0, sq(b, a)), 0, 0))))
UNARY(d_atan, bx_div(b, g, bx_add_s(b, sq(b, a), 1.0)))
UNARY(d_asinh, bx_mul(b, g, pw1(b, KPW_RSQRT, bx_add_s(b, sq(b, a), 1.0), 0, 0)))
UNARY(d_acosh, bx_mul(b, g, pw1(b, KPW_RSQRT, bx_add_s(b, sq(b, a), -1.0), 0, 0)))
UNARY(d_atanh, bx_div(b, g, rsub_s(b, 1.0, sq(b, a))))
UNARY(d_sinc, pw2(b, KPW_SINC_BW, g, a, 0, 0))
UNARY(d_deg2rad, bx_mul_s(b, g, 3.14159265358979323846 / 180))
UNARY(d_rad2deg, bx_mul_s(b, g, 180 / 3.14159265358979323846))

/* unary ops whose derivative is their own _BW helper with the op's parameters */
#define VIA_HELPER(NAME, BW)                                                                       \
    static void NAME(ca_builder *b, const pw_call *c, ca_bval *d) {                                \
        d[0] = bx_pw(b, BW, c->g, c->x[0], NULL, c->p0, c->p1);                                    \
    }
VIA_HELPER(d_relu, KPW_RELU_BW)
VIA_HELPER(d_leaky_relu, KPW_LEAKY_RELU_BW)
VIA_HELPER(d_gelu, KPW_GELU_BW)
VIA_HELPER(d_gelu_tanh, KPW_GELU_TANH_BW)
VIA_HELPER(d_silu, KPW_SILU_BW)
VIA_HELPER(d_softplus, KPW_SOFTPLUS_BW)
VIA_HELPER(d_clamp, KPW_CLAMP_BW)
VIA_HELPER(d_mish, KPW_MISH_BW)
VIA_HELPER(d_hardswish, KPW_HARDSWISH_BW)
VIA_HELPER(d_elu, KPW_ELU_BW)
VIA_HELPER(d_celu, KPW_CELU_BW)
VIA_HELPER(d_logsigmoid, KPW_LOGSIGMOID_BW)
VIA_HELPER(d_softsign, KPW_SOFTSIGN_BW)
VIA_HELPER(d_logit, KPW_LOGIT_BW)
VIA_HELPER(d_pow_s, KPW_POW_S_BW)

/* hardsigmoid: g / 6 inside (-3, 3), as its helper with the bounds of hardtanh */
static void d_hardsigmoid(ca_builder *b, const pw_call *c, ca_bval *d) {
    d[0] = bx_pw(b, KPW_HARDSIGMOID_BW, c->g, c->x[0], NULL, 0, 0);
}

/* ---------------------------------------------------------------------------------------
 * Scalar forms (p0 = the scalar)
 */
UNARY(d_mul_s, bx_mul_s(b, g, c->p0))
UNARY(d_div_s, pw1(b, KPW_DIV_S, g, c->p0, 0))
/* s / a: -s g / a^2 */
UNARY(d_rdiv_s, bx_mul(b, g, pw1(b, KPW_RDIV_S, sq(b, a), -c->p0, 0)))
/* s ^ a: g s^a log s (s == 0 not differentiated again) */
UNARY(d_rpow_s, bx_mul(b, g, bx_mul_s(b, pw1(b, KPW_RPOW_S, a, c->p0, 0), log(c->p0))))
/* clamp_min and clamp_max, as the first-order rules of maximum / minimum with a scalar */
UNARY(d_max_s, pw2(b, KPW_CLAMP_BW, g, a, c->p0, NAN))
UNARY(d_min_s, pw2(b, KPW_CLAMP_BW, g, a, NAN, c->p0))

/* ---------------------------------------------------------------------------------------
 * Binary ops
 */
static void d_add(ca_builder *b, const pw_call *c, ca_bval *d) { /* a + p0 b */
    d[0] = c->g;
    if (c->need[1])
        d[1] = bx_mul_s(b, c->g, c->p0);
}

static void d_sub(ca_builder *b, const pw_call *c, ca_bval *d) {
    d[0] = c->g;
    if (c->need[1])
        d[1] = bx_mul_s(b, c->g, -c->p0);
}

static void d_mul(ca_builder *b, const pw_call *c, ca_bval *d) {
    if (c->need[0])
        d[0] = bx_mul(b, c->g, c->x[1]);
    if (c->need[1])
        d[1] = bx_mul(b, c->g, c->x[0]);
}

static void d_div(ca_builder *b, const pw_call *c, ca_bval *d) {
    if (c->need[0])
        d[0] = bx_div(b, c->g, c->x[1]);
    if (c->need[1])
        d[1] = bx_neg(b, bx_div(b, bx_mul(b, c->g, c->x[0]), sq(b, c->x[1])));
}

static void d_pow(ca_builder *b, const pw_call *c, ca_bval *d) {
    ca_bval a = c->x[0], e = c->x[1];
    if (c->need[0])
        d[0] = bx_pw(b, KPW_POW_BW_BASE, c->g, a, e, 0, 0);
    if (c->need[1])
        d[1] = bx_pw(b, KPW_POW_BW_EXP, c->g, a, pw2(b, KPW_POW, a, e, 0, 0), 0, 0);
}

/* maximum: ties split half and half (KPW_MAXMIN_BW); minimum swaps the arguments */
static void d_max(ca_builder *b, const pw_call *c, ca_bval *d) {
    if (c->need[0])
        d[0] = bx_pw(b, KPW_MAXMIN_BW, c->g, c->x[0], c->x[1], 0, 0);
    if (c->need[1])
        d[1] = bx_pw(b, KPW_MAXMIN_BW, c->g, c->x[1], c->x[0], 0, 0);
}

static void d_min(ca_builder *b, const pw_call *c, ca_bval *d) {
    if (c->need[0])
        d[0] = bx_pw(b, KPW_MAXMIN_BW, c->g, c->x[1], c->x[0], 0, 0);
    if (c->need[1])
        d[1] = bx_pw(b, KPW_MAXMIN_BW, c->g, c->x[0], c->x[1], 0, 0);
}

/* atan2(a, b): (b, -a) / (a^2 + b^2) */
static void d_atan2(ca_builder *b, const pw_call *c, ca_bval *d) {
    ca_bval r2 = bx_add(b, sq(b, c->x[0]), sq(b, c->x[1]));
    ca_bval gr = bx_div(b, c->g, r2);
    if (c->need[0])
        d[0] = bx_mul(b, gr, c->x[1]);
    if (c->need[1])
        d[1] = bx_neg(b, bx_mul(b, gr, c->x[0]));
}

/* hypot(a, b): (a, b) / hypot */
static void d_hypot(ca_builder *b, const pw_call *c, ca_bval *d) {
    ca_bval gr = bx_div(b, c->g, pw2(b, KPW_HYPOT, c->x[0], c->x[1], 0, 0));
    for (int i = 0; i < 2; i++)
        if (c->need[i])
            d[i] = bx_mul(b, gr, c->x[i]);
}

/* a - q b for q = trunc(a / b) (fmod) or floor(a / b) (remainder) */
static void d_fmod(ca_builder *b, const pw_call *c, ca_bval *d) {
    d[0] = c->g;
    if (c->need[1]) {
        ca_bval q = pw1(b, KPW_TRUNC, bx_div(b, c->x[0], c->x[1]), 0, 0);
        d[1] = bx_neg(b, bx_mul(b, c->g, q));
    }
}

static void d_remainder(ca_builder *b, const pw_call *c, ca_bval *d) {
    d[0] = c->g;
    if (c->need[1]) {
        ca_bval q = pw2(b, KPW_FLOOR_DIVIDE, c->x[0], c->x[1], 0, 0);
        d[1] = bx_neg(b, bx_mul(b, c->g, q));
    }
}

/* copysign(a, b) = |a| sign(b): g sign(a) sign(result) for a (0 at a == 0); b none */
static void d_copysign(ca_builder *b, const pw_call *c, ca_bval *d) {
    if (c->need[0]) {
        ca_bval r = pw2(b, KPW_COPYSIGN, c->x[0], c->x[1], 0, 0);
        ca_bval s = bx_mul(b, pw1(b, KPW_SIGN, c->x[0], 0, 0), pw1(b, KPW_SIGN, r, 0, 0));
        d[0] = bx_mul(b, c->g, s);
    }
    if (c->need[1])
        d[1] = bx_zeros_like(b, c->x[1]);
}

/* logaddexp: g sigmoid(a - b) and g sigmoid(b - a); base 2: g / (1 + 2^(b - a)) */
static void d_logaddexp(ca_builder *b, const pw_call *c, ca_bval *d) {
    ca_bval diff = bx_sub(b, c->x[0], c->x[1]);
    if (c->need[0])
        d[0] = bx_mul(b, c->g, sigmoid(b, diff));
    if (c->need[1])
        d[1] = bx_mul(b, c->g, sigmoid(b, bx_neg(b, diff)));
}

static void d_logaddexp2(ca_builder *b, const pw_call *c, ca_bval *d) {
    for (int i = 0; i < 2; i++) {
        if (!c->need[i])
            continue;
        ca_bval p = pw1(b, KPW_EXP2, bx_sub(b, c->x[1 - i], c->x[i]), 0, 0);
        d[i] = bx_div(b, c->g, bx_add_s(b, p, 1.0));
    }
}

/* a log b: g xlogy(a != 0, b) and g a / b */
static void d_xlogy(ca_builder *b, const pw_call *c, ca_bval *d) {
    if (c->need[0])
        d[0] = bx_mul(b, c->g, pw2(b, KPW_XLOGY, pw1(b, KPW_NE_S, c->x[0], 0, 0), c->x[1], 0, 0));
    if (c->need[1])
        d[1] = bx_div(b, bx_mul(b, c->g, c->x[0]), c->x[1]);
}

/* mask ? p0 : a: g where the mask is off; the mask has none */
static void d_masked_fill(ca_builder *b, const pw_call *c, ca_bval *d) {
    if (c->need[0])
        d[0] = pw2(b, KPW_MASKED_FILL, c->g, c->x[1], 0, 0);
    if (c->need[1])
        d[1] = bx_zeros_like(b, c->x[1]);
}

/* ---------------------------------------------------------------------------------------
 * Derivative helpers (g, x): f'' of the op they differentiate
 */
static ca_bval zeros_x(ca_builder *b, ca_bval x) {
    return bx_zeros_like(b, x);
}
/* piecewise linear ops: f'' = 0 */
HELPER(d_relu_bw, zeros_x(b, x))
HELPER(d_leaky_relu_bw, zeros_x(b, x))
HELPER(d_clamp_bw, zeros_x(b, x))
HELPER(d_abs_bw, zeros_x(b, x))
HELPER(d_hardsigmoid_bw, zeros_x(b, x))
HELPER(d_hardtanh_bw, zeros_x(b, x))
/* gelu'' = phi(x) (2 - x^2), phi the standard normal density */
static ca_bval gelu_dd(ca_builder *b, ca_bval x) {
    ca_bval phi = bx_mul_s(b, bx_exp(b, bx_mul_s(b, sq(b, x), -0.5)), 0.39894228040143267794);
    return bx_mul(b, phi, rsub_s(b, 2.0, sq(b, x)));
}
HELPER(d_gelu_bw, bx_mul(b, bx_mul(b, g, h), gelu_dd(b, x)))
/* gelu_tanh = x (1 + t) / 2, t = tanh(u), u = k (x + c x^3):
 * f'' = (1 - t^2) (u' + x (u'' - 2 t u'^2) / 2), u' = k (1 + 3 c x^2), u'' = 6 c k x */
static ca_bval gelu_tanh_dd(ca_builder *b, ca_bval x) {
    const double k = 0.79788456080286535588, c = 0.044715;
    ca_bval x2 = sq(b, x);
    ca_bval u = bx_mul_s(b, bx_add(b, x, bx_mul_s(b, bx_mul(b, x2, x), c)), k);
    ca_bval t = pw1(b, KPW_TANH, u, 0, 0);
    ca_bval du = bx_mul_s(b, bx_add_s(b, bx_mul_s(b, x2, 3 * c), 1.0), k);
    ca_bval ddu = bx_mul_s(b, x, 6 * c * k);
    ca_bval bend = bx_sub(b, ddu, bx_mul(b, bx_mul_s(b, t, 2.0), sq(b, du)));
    ca_bval inner = bx_add(b, du, bx_mul_s(b, bx_mul(b, x, bend), 0.5));
    return bx_mul(b, rsub_s(b, 1.0, sq(b, t)), inner);
}
HELPER(d_gelu_tanh_bw, bx_mul(b, bx_mul(b, g, h), gelu_tanh_dd(b, x)))
/* silu' = s (1 + x (1 - s)); silu'' = s (1 - s) (2 + x (1 - 2 s)) */
static ca_bval silu_dd(ca_builder *b, ca_bval x) {
    ca_bval s = sigmoid(b, x);
    ca_bval ds = bx_mul(b, s, rsub_s(b, 1.0, s));
    ca_bval t = bx_add_s(b, bx_mul(b, x, rsub_s(b, 1.0, bx_mul_s(b, s, 2.0))), 2.0);
    return bx_mul(b, ds, t);
}
HELPER(d_silu_bw, bx_mul(b, bx_mul(b, g, h), silu_dd(b, x)))
/* softplus' = sigmoid(beta x) below the threshold: beta s (1 - s) there, 0 above */
static ca_bval softplus_dd(ca_builder *b, ca_bval x, double beta, double threshold) {
    ca_bval bxv = bx_mul_s(b, x, beta);
    ca_bval s = sigmoid(b, bxv);
    ca_bval v = bx_mul_s(b, bx_mul(b, s, rsub_s(b, 1.0, s)), beta);
    return bx_mul(b, v, pw1(b, KPW_LE_S, bxv, threshold, 0));
}
HELPER(d_softplus_bw, bx_mul(b, bx_mul(b, g, h), softplus_dd(b, x, c->p0, c->p1)))
/* (g, y) helpers: sigmoid' = y (1 - y) -> d/dy = 1 - 2y; tanh' = 1 - y^2 -> -2y */
HELPER(d_sigmoid_bw, bx_mul(b, bx_mul(b, g, h), rsub_s(b, 1.0, bx_mul_s(b, x, 2.0))))
HELPER(d_tanh_bw, bx_mul(b, bx_mul(b, g, h), bx_mul_s(b, x, -2.0)))
/* mish = x t, t = tanh(softplus x), s = sigmoid x: f'' = s (1 - t^2) (2 + x (1 - s) - 2 x s t) */
static ca_bval mish_dd(ca_builder *b, ca_bval x) {
    ca_bval s = sigmoid(b, x);
    ca_bval t = pw1(b, KPW_TANH, pw1(b, KPW_SOFTPLUS, x, 1.0, 20.0), 0, 0);
    ca_bval xs = bx_mul(b, x, s);
    ca_bval br = bx_sub(b, bx_add_s(b, bx_sub(b, x, xs), 2.0), bx_mul(b, bx_mul_s(b, xs, 2.0), t));
    return bx_mul(b, bx_mul(b, s, rsub_s(b, 1.0, sq(b, t))), br);
}
HELPER(d_mish_bw, bx_mul(b, bx_mul(b, g, h), mish_dd(b, x)))
/* hardswish'' = 1/3 inside (-3, 3) */
static ca_bval inside3(ca_builder *b, ca_bval x) {
    return bx_mul(b, pw1(b, KPW_GT_S, x, -3.0, 0), pw1(b, KPW_LT_S, x, 3.0, 0));
}
HELPER(d_hardswish_bw, bx_mul(b, bx_mul_s(b, bx_mul(b, g, h), 1.0 / 3), inside3(b, x)))
/* elu'' = p0 exp(x) below 0 (the helper's value where x <= 0), celu'' = p1 * that */
static ca_bval at_most0(ca_builder *b, ca_bval x) {
    return pw1(b, KPW_LE_S, x, 0.0, 0);
}
HELPER(d_elu_bw, bx_mul(b, bx_mul(b, g, at_most0(b, x)), bx_pw(b, c->op, h, x, NULL, c->p0, c->p1)))
HELPER(d_celu_bw,
       bx_mul_s(b,
                bx_mul(b, bx_mul(b, g, at_most0(b, x)), bx_pw(b, c->op, h, x, NULL, c->p0, c->p1)),
                c->p1))
/* logsigmoid' = 1 - sigmoid(x): d/dx = -s (1 - s) */
static ca_bval logsigmoid_dd(ca_builder *b, ca_bval x) {
    ca_bval s = sigmoid(b, x);
    return bx_neg(b, bx_mul(b, s, rsub_s(b, 1.0, s)));
}
HELPER(d_logsigmoid_bw, bx_mul(b, bx_mul(b, g, h), logsigmoid_dd(b, x)))
/* softsign' = 1 / (1 + |x|)^2: d/dx = -2 sign(x) / (1 + |x|)^3 */
static ca_bval softsign_dd(ca_builder *b, ca_bval x) {
    ca_bval den = pw1(b, KPW_POW_S, bx_add_s(b, pw1(b, KPW_ABS, x, 0, 0), 1.0), 3.0, 0);
    return bx_div(b, bx_mul_s(b, pw1(b, KPW_SIGN, x, 0, 0), -2.0), den);
}
HELPER(d_softsign_bw, bx_mul(b, bx_mul(b, g, h), softsign_dd(b, x)))
/* (g, x): erf' = 2/sqrt(pi) exp(-x^2) -> d/dx = -2x times the helper's value */
HELPER(d_erf_bw, bx_mul(b, g, bx_mul(b, bx_pw(b, c->op, h, x, NULL, 0, 0), bx_mul_s(b, x, -2.0))))
/* (g, y): erfinv' = sqrt(pi)/2 exp(y^2) -> d/dy = 2y times the helper's value */
HELPER(d_erfinv_bw, bx_mul(b, g, bx_mul(b, bx_pw(b, c->op, h, x, NULL, 0, 0), bx_mul_s(b, x, 2.0))))
/* sinc' = (cos(pi x) - sinc x) / x, sinc'' = -(pi sin(pi x) + 2 sinc') / x; -pi^2 / 3
 * at x == 0 (the limit), computed there from a stand-in x of 1 */
static ca_bval sinc_dd(ca_builder *b, ca_bval x) {
    const double pi = 3.14159265358979323846;
    ca_bval zero = pw1(b, KPW_EQ_S, x, 0.0, 0);
    ca_bval xs = pw2(b, KPW_MASKED_FILL, x, zero, 1.0, 0);
    ca_bval px = bx_mul_s(b, xs, pi);
    ca_bval d1 = bx_div(b, bx_sub(b, pw1(b, KPW_COS, px, 0, 0), pw1(b, KPW_SINC, xs, 0, 0)), xs);
    ca_bval num = bx_add(b, bx_mul_s(b, pw1(b, KPW_SIN, px, 0, 0), pi), bx_mul_s(b, d1, 2.0));
    ca_bval d2 = bx_neg(b, bx_div(b, num, xs));
    return pw2(b, KPW_MASKED_FILL, d2, zero, -pi * pi / 3, 0);
}
HELPER(d_sinc_bw, bx_mul(b, bx_mul(b, g, h), sinc_dd(b, x)))
/* logit' = 1 / (x (1 - x)) inside the bounds -> times (2x - 1) / (x (1 - x)) */
HELPER(d_logit_bw, bx_mul(b, g,
                          bx_mul(b, bx_pw(b, c->op, h, x, NULL, c->p0, c->p1),
                                 bx_div(b, bx_add_s(b, bx_mul_s(b, x, 2.0), -1.0),
                                        bx_mul(b, x, rsub_s(b, 1.0, x))))))
/* p h x^(p-1) -> d/dx = p (p - 1) h x^(p-2): the helper at p - 1, times p */
HELPER(d_pow_s_bw, bx_mul(b, g, bx_mul_s(b, bx_pw(b, c->op, h, x, NULL, c->p0 - 1, 0), c->p0)))

/* ---------------------------------------------------------------------------------------
 * Ternary ops
 */
static void d_where(ca_builder *b, const pw_call *c, ca_bval *d) {
    ca_bval zero = bx_zeros_like(b, c->g);
    if (c->need[0])
        d[0] = bx_zeros_like(b, c->x[0]);
    if (c->need[1])
        d[1] = bx_where(b, c->x[0], c->g, zero);
    if (c->need[2])
        d[2] = bx_where(b, c->x[0], zero, c->g);
}

/* (h, a, e) -> h e a^(e-1), 0 where e == 0 */
static void d_pow_bw_base(ca_builder *b, const pw_call *c, ca_bval *d) {
    ca_bval h = c->x[0], a = c->x[1], e = c->x[2];
    if (c->need[0])
        d[0] = bx_pw(b, KPW_POW_BW_BASE, c->g, a, e, 0, 0);
    if (c->need[1]) /* h e (e-1) a^(e-2): the same op on (h e, a, e - 1) */
        d[1] = bx_pw(b, KPW_POW_BW_BASE, bx_mul(b, c->g, bx_mul(b, h, e)), a, bx_add_s(b, e, -1.0),
                     0, 0);
    if (c->need[2]) { /* h a^(e-1) (1 + e log a), 0 where e == 0 */
        ca_bval t = pw2(b, KPW_POW, a, bx_add_s(b, e, -1.0), 0, 0);
        ca_bval v = bx_mul(b, t, bx_add_s(b, bx_mul(b, e, bx_log(b, a)), 1.0));
        v = bx_mul(b, v, pw1(b, KPW_NE_S, e, 0.0, 0));
        d[2] = bx_mul(b, c->g, bx_mul(b, h, v));
    }
}

/* (h, a, y) -> h y log a, with y an input of its own */
static void d_pow_bw_exp(ca_builder *b, const pw_call *c, ca_bval *d) {
    ca_bval h = c->x[0], a = c->x[1], y = c->x[2];
    if (c->need[0])
        d[0] = bx_pw(b, KPW_POW_BW_EXP, c->g, a, y, 0, 0);
    if (c->need[1])
        d[1] = bx_mul(b, c->g, bx_div(b, bx_mul(b, h, y), a));
    if (c->need[2])
        d[2] = bx_mul(b, c->g, bx_mul(b, h, bx_log(b, a)));
}

/* (h, a, b) -> h, h/2 or 0 by how a and b compare: piecewise constant in a and b */
static void d_maxmin_bw(ca_builder *b, const pw_call *c, ca_bval *d) {
    if (c->need[0])
        d[0] = bx_pw(b, KPW_MAXMIN_BW, c->g, c->x[1], c->x[2], 0, 0);
    for (int i = 1; i < 3; i++)
        if (c->need[i])
            d[i] = bx_zeros_like(b, c->x[i]);
}

/* ---------------------------------------------------------------------------------------
 * The table
 */
#define R(FN)                                                                                      \
    { PWD_RULE, FN }
#define NONE                                                                                       \
    { PWD_NONE, NULL }

static const pw_deriv derivs[KPW__COUNT] = {
    [KPW_COPY] = R(d_copy),
    [KPW_NEG] = R(d_neg),
    [KPW_EXP] = R(d_exp),
    [KPW_LOG] = R(d_log),
    [KPW_SQRT] = R(d_sqrt),
    [KPW_RSQRT] = R(d_rsqrt),
    [KPW_ABS] = R(d_abs),
    [KPW_SIGN] = NONE,
    [KPW_SIN] = R(d_sin),
    [KPW_COS] = R(d_cos),
    [KPW_TANH] = R(d_tanh),
    [KPW_SIGMOID] = R(d_sigmoid),
    [KPW_RELU] = R(d_relu),
    [KPW_LEAKY_RELU] = R(d_leaky_relu),
    [KPW_GELU] = R(d_gelu),
    [KPW_GELU_TANH] = R(d_gelu_tanh),
    [KPW_SILU] = R(d_silu),
    [KPW_SOFTPLUS] = R(d_softplus),
    [KPW_CLAMP] = R(d_clamp),
    [KPW_RECIPROCAL] = R(d_recip),
    [KPW_SQUARE] = R(d_square),
    [KPW_MISH] = R(d_mish),
    [KPW_HARDSWISH] = R(d_hardswish),
    [KPW_ELU] = R(d_elu),
    [KPW_CELU] = R(d_celu),
    [KPW_LOGSIGMOID] = R(d_logsigmoid),
    [KPW_SOFTSIGN] = R(d_softsign),
    [KPW_HARDSIGMOID] = R(d_hardsigmoid),
    [KPW_LOG1P] = R(d_log1p),
    [KPW_EXPM1] = R(d_expm1),
    [KPW_LOG2] = R(d_log2),
    [KPW_LOG10] = R(d_log10),
    [KPW_EXP2] = R(d_exp2),
    [KPW_ERF] = R(d_erf),
    [KPW_ERFC] = R(d_erfc),
    [KPW_ERFINV] = R(d_erfinv),
    [KPW_SINH] = R(d_sinh),
    [KPW_COSH] = R(d_cosh),
    [KPW_TAN] = R(d_tan),
    [KPW_ASIN] = R(d_asin),
    [KPW_ACOS] = R(d_acos),
    [KPW_ATAN] = R(d_atan),
    [KPW_ASINH] = R(d_asinh),
    [KPW_ACOSH] = R(d_acosh),
    [KPW_ATANH] = R(d_atanh),
    [KPW_SINC] = R(d_sinc),
    [KPW_DEG2RAD] = R(d_deg2rad),
    [KPW_RAD2DEG] = R(d_rad2deg),
    [KPW_LOGIT] = R(d_logit),
    [KPW_FLOOR] = NONE,
    [KPW_CEIL] = NONE,
    [KPW_TRUNC] = NONE,
    [KPW_ROUND] = NONE,
    [KPW_FRAC] = R(d_copy),
    [KPW_ADD_S] = R(d_copy),
    [KPW_SUB_S] = R(d_copy),
    [KPW_RSUB_S] = R(d_neg),
    [KPW_MUL_S] = R(d_mul_s),
    [KPW_DIV_S] = R(d_div_s),
    [KPW_RDIV_S] = R(d_rdiv_s),
    [KPW_POW_S] = R(d_pow_s),
    [KPW_RPOW_S] = R(d_rpow_s),
    [KPW_MAX_S] = R(d_max_s),
    [KPW_MIN_S] = R(d_min_s),
    [KPW_LT_S] = NONE,
    [KPW_LE_S] = NONE,
    [KPW_GT_S] = NONE,
    [KPW_GE_S] = NONE,
    [KPW_EQ_S] = NONE,
    [KPW_NE_S] = NONE,
    [KPW_FILL] = NONE,
    [KPW_ADD] = R(d_add),
    [KPW_SUB] = R(d_sub),
    [KPW_MUL] = R(d_mul),
    [KPW_DIV] = R(d_div),
    [KPW_POW] = R(d_pow),
    [KPW_MAX] = R(d_max),
    [KPW_MIN] = R(d_min),
    [KPW_LT] = NONE,
    [KPW_LE] = NONE,
    [KPW_GT] = NONE,
    [KPW_GE] = NONE,
    [KPW_EQ] = NONE,
    [KPW_NE] = NONE,
    [KPW_ATAN2] = R(d_atan2),
    [KPW_HYPOT] = R(d_hypot),
    [KPW_FMOD] = R(d_fmod),
    [KPW_REMAINDER] = R(d_remainder),
    [KPW_COPYSIGN] = R(d_copysign),
    [KPW_LOGADDEXP] = R(d_logaddexp),
    [KPW_LOGADDEXP2] = R(d_logaddexp2),
    [KPW_XLOGY] = R(d_xlogy),
    [KPW_FLOOR_DIVIDE] = NONE,
    [KPW_MASKED_FILL] = R(d_masked_fill),
    [KPW_RELU_BW] = R(d_relu_bw),
    [KPW_LEAKY_RELU_BW] = R(d_leaky_relu_bw),
    [KPW_GELU_BW] = R(d_gelu_bw),
    [KPW_GELU_TANH_BW] = R(d_gelu_tanh_bw),
    [KPW_SILU_BW] = R(d_silu_bw),
    [KPW_SOFTPLUS_BW] = R(d_softplus_bw),
    [KPW_SIGMOID_BW] = R(d_sigmoid_bw),
    [KPW_TANH_BW] = R(d_tanh_bw),
    [KPW_CLAMP_BW] = R(d_clamp_bw),
    [KPW_ABS_BW] = R(d_abs_bw),
    [KPW_MISH_BW] = R(d_mish_bw),
    [KPW_HARDSWISH_BW] = R(d_hardswish_bw),
    [KPW_HARDSIGMOID_BW] = R(d_hardsigmoid_bw),
    [KPW_ELU_BW] = R(d_elu_bw),
    [KPW_CELU_BW] = R(d_celu_bw),
    [KPW_LOGSIGMOID_BW] = R(d_logsigmoid_bw),
    [KPW_SOFTSIGN_BW] = R(d_softsign_bw),
    [KPW_HARDTANH_BW] = R(d_hardtanh_bw),
    [KPW_ERF_BW] = R(d_erf_bw),
    [KPW_ERFINV_BW] = R(d_erfinv_bw),
    [KPW_SINC_BW] = R(d_sinc_bw),
    [KPW_LOGIT_BW] = R(d_logit_bw),
    [KPW_POW_S_BW] = R(d_pow_s_bw),
    [KPW_WHERE] = R(d_where),
    [KPW_POW_BW_BASE] = R(d_pow_bw_base),
    [KPW_POW_BW_EXP] = R(d_pow_bw_exp),
    [KPW_MAXMIN_BW] = R(d_maxmin_bw),
};

int cai_pw_deriv_entry(kern_pw_op op) {
    return (unsigned)op < KPW__COUNT ? (int)derivs[op].kind : PWD_MISSING;
}

bool cai_pw_deriv_is_none(kern_pw_op op) {
    return cai_pw_deriv_entry(op) == PWD_NONE;
}

/* The rule of CA_OP_PW. saved: the inputs a, b, c (those past the op's arity are NULL). */
void cai_pw_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    kern_pw_op op = (kern_pw_op)n->attrs.i[0];
    if (cai_pw_deriv_entry(op) != PWD_RULE) { /* NONE records no node; MISSING is a bug */
        cai_bx_fail(b, CA_STATUS_INTERNAL,
                    "pointwise op '%s' has no derivative entry (ops_pw_deriv.c); please "
                    "report this bug",
                    cai_kern_pw_name(op));
        return;
    }
    pw_call c = {.op = op, .g = g, .p0 = n->attrs.s[0], .p1 = n->attrs.s[1]};
    for (int i = 0; i < n->n_in; i++) {
        c.need[i] = node_needs_grad(n, i);
        c.x[i] = bx_saved(b, n, i);
    }
    ca_bval d[3] = {0};
    derivs[op].fn(b, &c, d);
    for (int i = 0; i < n->n_in && b->status == CA_OK; i++) {
        if (!c.need[i])
            continue;
        if (!d[i]) {
            cai_bx_fail(b, CA_STATUS_INTERNAL,
                        "pointwise op '%s' gave no derivative for input %d; please report "
                        "this bug",
                        cai_kern_pw_name(op), i);
            return;
        }
        gin[i] = bx_sum_to(b, d[i], &n->in_meta[i]);
    }
}
