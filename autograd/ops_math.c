/* ops_math.c - the everyday unary math functions (log1p, erf, tan, asin, floor, ...): their
 * op-table rows, derivative rules and C functions.
 *
 * Every row is a MATH_ROW: the shared pointwise shape rule and forward kernel (the kernel
 * op of codegen/kern_pw_ops.h), torch.<name> with out= and Tensor.<name>. The derivative
 * rules follow PyTorch's formulas (derivatives.yaml); where PyTorch's derivative is zero
 * (floor, ceil, trunc, round, sgn) the rule still gives a zero gradient, as PyTorch's
 * FloorBackward0 etc. do, rather than marking the op non-differentiable.
 */
#include "autograd/builder.h"

#include <math.h>

#define MATH_PI   3.14159265358979323846
#define MATH_LN2  0.69314718055994530942
#define MATH_LN10 2.30258509299404568402

static ca_bval saved(ca_builder *b, const ca_node *n) {
    return bx_saved(b, n, 0);
}

static void set_grad(ca_builder *b, const ca_node *n, ca_bval *gin, ca_bval v) {
    if (node_needs_grad(n, 0))
        gin[0] = bx_sum_to(b, v, &n->in_meta[0]);
}

static ca_bval pw1(ca_builder *b, kern_pw_op op, ca_bval x, double p0) {
    return bx_pw(b, op, x, NULL, NULL, p0, 0);
}

static ca_bval square(ca_builder *b, ca_bval x) {
    return pw1(b, KPW_SQUARE, x, 0);
}

/* ---------------------------------------------------------------------------------------
 * Exponentials and logarithms (saved: self, or the result where marked)
 */
static void log1p_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_div(b, g, bx_add_s(b, saved(b, n), 1.0)));
}

/* saved: result. g * (result + 1) */
static void expm1_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_mul(b, g, bx_add_s(b, saved(b, n), 1.0)));
}

static void log2_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_div(b, g, bx_mul_s(b, saved(b, n), MATH_LN2)));
}

static void log10_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_div(b, g, bx_mul_s(b, saved(b, n), MATH_LN10)));
}

/* saved: result. g * result * ln 2 */
static void exp2_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_mul_s(b, bx_mul(b, g, saved(b, n)), MATH_LN2));
}

static void erf_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_pw(b, KPW_ERF_BW, g, saved(b, n), NULL, 0, 0));
}

static void erfc_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_neg(b, bx_pw(b, KPW_ERF_BW, g, saved(b, n), NULL, 0, 0)));
}

/* saved: result */
static void erfinv_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_pw(b, KPW_ERFINV_BW, g, saved(b, n), NULL, 0, 0));
}

/* ---------------------------------------------------------------------------------------
 * Trigonometric and hyperbolic functions
 */
static void sinh_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_mul(b, g, pw1(b, KPW_COSH, saved(b, n), 0)));
}

static void cosh_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_mul(b, g, pw1(b, KPW_SINH, saved(b, n), 0)));
}

/* saved: result. g * (1 + result^2) */
static void tan_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_mul(b, g, bx_add_s(b, square(b, saved(b, n)), 1.0)));
}

/* 1 / sqrt(1 - x^2) */
static ca_bval asin_slope(ca_builder *b, const ca_node *n) {
    return pw1(b, KPW_RSQRT, pw1(b, KPW_RSUB_S, square(b, saved(b, n)), 1.0), 0);
}

static void asin_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_mul(b, g, asin_slope(b, n)));
}

static void acos_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_mul(b, g, bx_neg(b, asin_slope(b, n))));
}

static void atan_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_div(b, g, bx_add_s(b, square(b, saved(b, n)), 1.0)));
}

/* g / sqrt(x^2 + 1) */
static void asinh_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    ca_bval slope = pw1(b, KPW_RSQRT, bx_add_s(b, square(b, saved(b, n)), 1.0), 0);
    set_grad(b, n, gin, bx_mul(b, g, slope));
}

/* g / sqrt(x^2 - 1) */
static void acosh_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    ca_bval slope = pw1(b, KPW_RSQRT, bx_add_s(b, square(b, saved(b, n)), -1.0), 0);
    set_grad(b, n, gin, bx_mul(b, g, slope));
}

/* g / (1 - x^2) */
static void atanh_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_div(b, g, pw1(b, KPW_RSUB_S, square(b, saved(b, n)), 1.0)));
}

static void sinc_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_pw(b, KPW_SINC_BW, g, saved(b, n), NULL, 0, 0));
}

static void deg2rad_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_mul_s(b, g, MATH_PI / 180));
}

static void rad2deg_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_mul_s(b, g, 180 / MATH_PI));
}

/* ---------------------------------------------------------------------------------------
 * Powers, rounding, sign
 */
/* square is pow(x, 2) to PyTorch (PowBackward0): g * 2x */
static void square_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_mul(b, g, bx_mul_s(b, saved(b, n), 2.0)));
}

/* saved: result. -g * result^2 */
static void reciprocal_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_mul(b, bx_neg(b, g), square(b, saved(b, n))));
}

/* floor, ceil, trunc, round, sgn: piecewise constant, so PyTorch's gradient is zero */
static void zero_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_zeros_like(b, g));
}

/* frac = x - trunc(x): the gradient passes through */
static void frac_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, g);
}

/* round(decimals=d), d in attrs.i[0], passed to the kernel as p0 (attrs.s[0]). int64 keeps
 * its values at d = 0 only; PyTorch has no integer round with decimals either. */
static ca_status round_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                             ca_meta *out) {
    if (a->i[0] != 0 && in[0].dtype == CA_INT64)
        return err_set(CA_STATUS_DTYPE, "round: decimals=%lld needs a float tensor, got int64",
                       (long long)a->i[0]);
    a->s[0] = (double)a->i[0];
    return cai_op_pointwise_shape(row, in, n_in, a, out);
}

/* logit(eps): attrs.s[0] = eps as given, canonicalised to the kernel's bounds: s[0] = eps,
 * s[1] = 1 - eps, or both NaN (no clamp) for None (NaN) and a negative eps, as PyTorch */
static ca_status logit_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                             ca_meta *out) {
    double eps = a->s[0];
    bool clamp = !isnan(eps) && eps >= 0;
    a->s[0] = clamp ? eps : NAN;
    a->s[1] = clamp ? 1 - eps : NAN;
    return cai_op_pointwise_shape(row, in, n_in, a, out);
}

/* g / (x (1 - x)), 0 outside [eps, 1 - eps] when clamped */
static void logit_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, bx_pw(b, KPW_LOGIT_BW, g, saved(b, n), NULL, n->attrs.s[0], n->attrs.s[1]));
}

/* ---------------------------------------------------------------------------------------
 * Binary ops (saved: self, other, and the result where marked). Each input's gradient is
 * summed back to its shape, which undoes broadcasting.
 */
static void set_grad_at(ca_builder *b, const ca_node *n, ca_bval *gin, int i, ca_bval v) {
    if (node_needs_grad(n, i))
        gin[i] = bx_sum_to(b, v, &n->in_meta[i]);
}

/* d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2) */
static void atan2_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    ca_bval x = bx_saved(b, n, 0), y = bx_saved(b, n, 1);
    ca_bval norm2 = bx_add(b, square(b, x), square(b, y));
    if (node_needs_grad(n, 0))
        set_grad_at(b, n, gin, 0, bx_div(b, bx_mul(b, g, y), norm2));
    if (node_needs_grad(n, 1))
        set_grad_at(b, n, gin, 1, bx_div(b, bx_mul(b, bx_neg(b, g), x), norm2));
}

/* saved: self, other, result. d/da = a / result, d/db = b / result */
static void hypot_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    ca_bval r = bx_saved(b, n, 2);
    for (int i = 0; i < 2; i++)
        if (node_needs_grad(n, i))
            set_grad_at(b, n, gin, i, bx_div(b, bx_mul(b, g, bx_saved(b, n, i)), r));
}

/* a - q b with q = trunc(a / b) (fmod) or the floor division (remainder): d/da = 1 and
 * d/db = -q, as PyTorch */
static void fmod_like_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin,
                               bool floor_q) {
    set_grad_at(b, n, gin, 0, g);
    if (!node_needs_grad(n, 1))
        return;
    ca_bval x = bx_saved(b, n, 0), y = bx_saved(b, n, 1);
    ca_bval q = floor_q ? bx_pw(b, KPW_FLOOR_DIVIDE, x, y, NULL, 0, 0)
                        : pw1(b, KPW_TRUNC, bx_div(b, x, y), 0);
    set_grad_at(b, n, gin, 1, bx_mul(b, bx_neg(b, g), q));
}

static void fmod_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    fmod_like_backward(b, n, g, gin, false);
}

static void remainder_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    fmod_like_backward(b, n, g, gin, true);
}

/* saved: self, result. g * result / self, 0 where self == 0; the sign's input gets 0 */
static void copysign_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (node_needs_grad(n, 0)) {
        ca_bval x = bx_saved(b, n, 0);
        ca_bval ratio = bx_div(b, bx_saved(b, n, 1), x);
        ca_bval at_zero = pw1(b, KPW_EQ_S, x, 0.0);
        ratio = bx_pw(b, KPW_MASKED_FILL, ratio, at_zero, NULL, 0.0, 0);
        set_grad_at(b, n, gin, 0, bx_mul(b, g, ratio));
    }
    set_grad_at(b, n, gin, 1, bx_zeros_like(b, g));
}

/* d/da = 1 / (1 + base^(b - a)), and the same with a and b swapped */
static void logaddexp_any_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin,
                                   kern_pw_op exp_op) {
    for (int i = 0; i < 2; i++) {
        if (!node_needs_grad(n, i))
            continue;
        ca_bval diff = bx_sub(b, bx_saved(b, n, 1 - i), bx_saved(b, n, i));
        ca_bval denom = bx_add_s(b, pw1(b, exp_op, diff, 0), 1.0);
        set_grad_at(b, n, gin, i, bx_div(b, g, denom));
    }
}

static void logaddexp_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    logaddexp_any_backward(b, n, g, gin, KPW_EXP);
}

static void logaddexp2_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    logaddexp_any_backward(b, n, g, gin, KPW_EXP2);
}

/* d/da = xlogy(g, b), 0 where a == 0 and b <= 0 (PyTorch's rule); d/db = g a / b */
static void xlogy_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    ca_bval x = bx_saved(b, n, 0), y = bx_saved(b, n, 1);
    if (node_needs_grad(n, 0)) {
        ca_bval off = bx_mul(b, pw1(b, KPW_EQ_S, x, 0.0), pw1(b, KPW_LE_S, y, 0.0));
        ca_bval d = bx_pw(b, KPW_XLOGY, g, y, NULL, 0, 0);
        set_grad_at(b, n, gin, 0, bx_pw(b, KPW_MASKED_FILL, d, off, NULL, 0.0, 0));
    }
    if (node_needs_grad(n, 1))
        set_grad_at(b, n, gin, 1, bx_div(b, bx_mul(b, g, x), y));
}

/* ---------------------------------------------------------------------------------------
 * The rows
 */
/* A binary row in the op registry: torch.<NAME>(input, other, *, out=None) and the method,
 * broadcasting, on the shared pointwise shape rule and forward kernel. */
#define BIN_ROW(ID, NAME, NODE, KOP, BW, FL, NF, ...)                                              \
    {                                                                                              \
        .id = (ID), .name = (NAME), .node_name = (NODE), .fusion = CA_FUSE_POINTWISE,              \
        .n_in_min = 2, .n_in_max = 2, .flags = (FL), .n_fields = (NF), .fields = {__VA_ARGS__},    \
        .shape = cai_op_pointwise_shape, .forward = cai_op_pointwise_forward, .backward = (BW),    \
        .pw = (KOP), .schema = NAME "(Tensor input, Tensor other)",                                \
        .py = CA_OP_PY_TORCH | CA_OP_PY_TENSOR | CA_OP_PY_OUT                                      \
    }
#define F_OTHER F_IN("other", 1)

#define F_SELF F_IN("self", 0)

static const ca_op_def rows[] = {
    MATH_ROW(CA_OP_LOG1P, "log1p", "Log1PBackward0", KPW_LOG1P, log1p_backward, CA_OP_ABOVE_M1, 1,
             F_SELF),
    MATH_ROW(CA_OP_EXPM1, "expm1", "Expm1Backward0", KPW_EXPM1, expm1_backward, 0, 1, F_RESULT),
    MATH_ROW(CA_OP_LOG2, "log2", "Log2Backward0", KPW_LOG2, log2_backward, CA_OP_POSITIVE, 1,
             F_SELF),
    MATH_ROW(CA_OP_LOG10, "log10", "Log10Backward0", KPW_LOG10, log10_backward, CA_OP_POSITIVE, 1,
             F_SELF),
    MATH_ROW(CA_OP_EXP2, "exp2", "Exp2Backward0", KPW_EXP2, exp2_backward, 0, 1, F_RESULT),
    MATH_ROW(CA_OP_ERF, "erf", "ErfBackward0", KPW_ERF, erf_backward, 0, 1, F_SELF),
    MATH_ROW(CA_OP_ERFC, "erfc", "ErfcBackward0", KPW_ERFC, erfc_backward, 0, 1, F_SELF),
    MATH_ROW(CA_OP_ERFINV, "erfinv", "ErfinvBackward0", KPW_ERFINV, erfinv_backward, CA_OP_UNIT, 1,
             F_RESULT),
    MATH_ROW(CA_OP_SINH, "sinh", "SinhBackward0", KPW_SINH, sinh_backward, 0, 1, F_SELF),
    MATH_ROW(CA_OP_COSH, "cosh", "CoshBackward0", KPW_COSH, cosh_backward, 0, 1, F_SELF),
    MATH_ROW(CA_OP_TAN, "tan", "TanBackward0", KPW_TAN, tan_backward, 0, 1, F_RESULT),
    MATH_ROW(CA_OP_ASIN, "asin", "AsinBackward0", KPW_ASIN, asin_backward, CA_OP_UNIT, 1, F_SELF),
    MATH_ROW(CA_OP_ACOS, "acos", "AcosBackward0", KPW_ACOS, acos_backward, CA_OP_UNIT, 1, F_SELF),
    MATH_ROW(CA_OP_ATAN, "atan", "AtanBackward0", KPW_ATAN, atan_backward, 0, 1, F_SELF),
    MATH_ROW(CA_OP_ASINH, "asinh", "AsinhBackward0", KPW_ASINH, asinh_backward, 0, 1, F_SELF),
    MATH_ROW(CA_OP_ACOSH, "acosh", "AcoshBackward0", KPW_ACOSH, acosh_backward, CA_OP_ABOVE_1, 1,
             F_SELF),
    MATH_ROW(CA_OP_ATANH, "atanh", "AtanhBackward0", KPW_ATANH, atanh_backward, CA_OP_UNIT, 1,
             F_SELF),
    MATH_ROW(CA_OP_SINC, "sinc", "SincBackward0", KPW_SINC, sinc_backward, 0, 1, F_SELF),
    MATH_ROW(CA_OP_DEG2RAD, "deg2rad", "Deg2RadBackward0", KPW_DEG2RAD, deg2rad_backward, 0, 0),
    MATH_ROW(CA_OP_RAD2DEG, "rad2deg", "Rad2DegBackward0", KPW_RAD2DEG, rad2deg_backward, 0, 0),
    MATH_ROW(CA_OP_SQUARE, "square", "PowBackward0", KPW_SQUARE, square_backward, 0, 1, F_SELF),
    MATH_ROW(CA_OP_RECIPROCAL, "reciprocal", "ReciprocalBackward0", KPW_RECIPROCAL,
             reciprocal_backward, 0, 1, F_RESULT),
    MATH_ROW(CA_OP_FLOOR, "floor", "FloorBackward0", KPW_FLOOR, zero_backward, 0, 0),
    MATH_ROW(CA_OP_CEIL, "ceil", "CeilBackward0", KPW_CEIL, zero_backward, 0, 0),
    MATH_ROW(CA_OP_TRUNC, "trunc", "TruncBackward0", KPW_TRUNC, zero_backward, 0, 0),
    {.id = CA_OP_ROUND,
     .name = "round",
     .node_name = "RoundBackward1", /* PyTorch's name when decimals is given */
     .fusion = CA_FUSE_POINTWISE,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 2,
     .fields = {F_INT("decimals", 0), F_DBL("p0", 0)},
     .shape = round_shape,
     .forward = cai_op_pointwise_forward,
     .backward = zero_backward,
     .pw = KPW_ROUND,
     .schema = "round(Tensor input, int decimals=0)",
     .py = CA_OP_PY_TORCH | CA_OP_PY_TENSOR | CA_OP_PY_OUT},
    MATH_ROW(CA_OP_FRAC, "frac", "FracBackward0", KPW_FRAC, frac_backward, 0, 0),
    MATH_ROW(CA_OP_SGN, "sgn", "SgnBackward0", KPW_SIGN, zero_backward, 0, 0),
    {.id = CA_OP_LOGIT,
     .name = "logit",
     .node_name = "LogitBackward0",
     .fusion = CA_FUSE_POINTWISE,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 3,
     .fields = {F_SELF, F_DBL("lo", 0), F_DBL("hi", 1)},
     .shape = logit_shape,
     .forward = cai_op_pointwise_forward,
     .backward = logit_backward,
     .pw = KPW_LOGIT,
     .schema = "logit(Tensor input, float? eps=None)",
     .py = CA_OP_PY_TORCH | CA_OP_PY_TENSOR | CA_OP_PY_OUT | CA_OP_PROB},

    BIN_ROW(CA_OP_ATAN2, "atan2", "Atan2Backward0", KPW_ATAN2, atan2_backward, 0, 2, F_SELF,
            F_OTHER),
    BIN_ROW(CA_OP_HYPOT, "hypot", "HypotBackward0", KPW_HYPOT, hypot_backward, 0, 3, F_SELF,
            F_OTHER, F_RESULT),
    BIN_ROW(CA_OP_FMOD, "fmod", "FmodBackward1", KPW_FMOD, fmod_backward, 0, 2, F_SELF, F_OTHER),
    BIN_ROW(CA_OP_REMAINDER, "remainder", "RemainderBackward1", KPW_REMAINDER, remainder_backward,
            0, 2, F_SELF, F_OTHER),
    BIN_ROW(CA_OP_COPYSIGN, "copysign", "CopysignBackward0", KPW_COPYSIGN, copysign_backward, 0, 2,
            F_SELF, F_RESULT),
    BIN_ROW(CA_OP_LOGADDEXP, "logaddexp", "LogaddexpBackward0", KPW_LOGADDEXP, logaddexp_backward,
            0, 2, F_SELF, F_OTHER),
    BIN_ROW(CA_OP_LOGADDEXP2, "logaddexp2", "Logaddexp2Backward0", KPW_LOGADDEXP2,
            logaddexp2_backward, 0, 2, F_SELF, F_OTHER),
    BIN_ROW(CA_OP_XLOGY, "xlogy", "XlogyBackward0", KPW_XLOGY, xlogy_backward, 0, 2, F_SELF,
            F_OTHER),
    /* PyTorch records a node that fails in backward; cagrad records none */
    BIN_ROW(CA_OP_FLOOR_DIVIDE, "floor_divide", "FloorDivideBackward0", KPW_FLOOR_DIVIDE, NULL,
            CA_OPF_NONDIFF, 0),
};

const ca_op_group cai_ops_math = {rows, (int)(sizeof rows / sizeof rows[0])};

/* ---------------------------------------------------------------------------------------
 * C functions
 */
static ca_status unary(int op, const char *fn, ca_tensor *x, const ca_attrs *at, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, fn);
    *out = NULL;
    CA_ARG_NOT_NULL(x, fn);
    return cai_op_call1(op, x, at, out);
}

#define DEF_UNARY(NAME, OP)                                                                        \
    ca_status ca_##NAME(ca_tensor *x, ca_tensor **out) {                                           \
        return unary(OP, "ca_" #NAME, x, NULL, out);                                               \
    }

DEF_UNARY(log1p, CA_OP_LOG1P)
DEF_UNARY(expm1, CA_OP_EXPM1)
DEF_UNARY(log2, CA_OP_LOG2)
DEF_UNARY(log10, CA_OP_LOG10)
DEF_UNARY(exp2, CA_OP_EXP2)
DEF_UNARY(erf, CA_OP_ERF)
DEF_UNARY(erfc, CA_OP_ERFC)
DEF_UNARY(erfinv, CA_OP_ERFINV)
DEF_UNARY(sinh, CA_OP_SINH)
DEF_UNARY(cosh, CA_OP_COSH)
DEF_UNARY(tan, CA_OP_TAN)
DEF_UNARY(asin, CA_OP_ASIN)
DEF_UNARY(acos, CA_OP_ACOS)
DEF_UNARY(atan, CA_OP_ATAN)
DEF_UNARY(asinh, CA_OP_ASINH)
DEF_UNARY(acosh, CA_OP_ACOSH)
DEF_UNARY(atanh, CA_OP_ATANH)
DEF_UNARY(sinc, CA_OP_SINC)
DEF_UNARY(deg2rad, CA_OP_DEG2RAD)
DEF_UNARY(rad2deg, CA_OP_RAD2DEG)
DEF_UNARY(square, CA_OP_SQUARE)
DEF_UNARY(reciprocal, CA_OP_RECIPROCAL)
DEF_UNARY(floor, CA_OP_FLOOR)
DEF_UNARY(ceil, CA_OP_CEIL)
DEF_UNARY(trunc, CA_OP_TRUNC)
DEF_UNARY(frac, CA_OP_FRAC)
DEF_UNARY(sgn, CA_OP_SGN)

static ca_status binary(int op, const char *fn, ca_tensor *a, ca_tensor *b, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, fn);
    *out = NULL;
    CA_ARG_NOT_NULL(a, fn);
    CA_ARG_NOT_NULL(b, fn);
    return cai_op_call2(op, a, b, NULL, out);
}

#define DEF_BINARY(NAME, OP)                                                                       \
    ca_status ca_##NAME(ca_tensor *a, ca_tensor *b, ca_tensor **out) {                             \
        return binary(OP, "ca_" #NAME, a, b, out);                                                 \
    }

DEF_BINARY(atan2, CA_OP_ATAN2)
DEF_BINARY(hypot, CA_OP_HYPOT)
DEF_BINARY(fmod, CA_OP_FMOD)
DEF_BINARY(remainder, CA_OP_REMAINDER)
DEF_BINARY(copysign, CA_OP_COPYSIGN)
DEF_BINARY(logaddexp, CA_OP_LOGADDEXP)
DEF_BINARY(logaddexp2, CA_OP_LOGADDEXP2)
DEF_BINARY(xlogy, CA_OP_XLOGY)
DEF_BINARY(floor_divide, CA_OP_FLOOR_DIVIDE)

ca_status ca_logit(ca_tensor *x, double eps, ca_tensor **out) {
    ca_attrs at = {.s = {eps, 0}};
    return unary(CA_OP_LOGIT, "ca_logit", x, &at, out);
}

ca_status ca_round(ca_tensor *x, int64_t decimals, ca_tensor **out) {
    ca_attrs at = {.i = {decimals}};
    return unary(CA_OP_ROUND, "ca_round", x, &at, out);
}
