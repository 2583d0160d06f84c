/* kern_pw_ops.h - every pointwise kernel op, defined once.
 *
 * One row per op: KERN_PW_OPS(X) expands X(NAME, AR, NP, FL, VEC, REF) for each, in enum
 * order. From the rows come the kern_pw_op enum, the name / arity / parameter tables
 * (kern_pw.c), the vector kernels of every ISA path (kern_simd_body.inc) and the double
 * reference the tests check every path against (tests/c/test_kern.c). Adding a row is all
 * it takes to add a kernel op; nothing else keeps a list of them.
 *
 *   NAME  the op: KPW_<NAME>, printed in lower case by the graph printer
 *   AR    inputs (1 unary, 2 binary, 3 ternary); derivative helpers take (g, x) or (g, y)
 *   NP    scalar parameters it reads (p0, then p1); the graph prints and compares these
 *   FL    KPWF_ flags below, or 0
 *   VEC   the vector formula, over the inputs a, b, c (vectors), the parameters p, q
 *         (broadcast vectors) and sp, sq (the same as scalars of the element type T), with
 *         the V-macros of kern_simd_body.inc and the helpers at the end of this file
 *   REF   the same in double precision over a, b, c, p0, p1, with libm and the kref_
 *         helpers of tests/c/test_kern.c: written independently of VEC, as a check on it
 *
 * Inputs that are "mask"/"cond" are nonzero = true. Comparison results are 1 or 0 in the
 * output dtype. Formulas follow PyTorch's CPU kernels, so results match within rounding.
 * int64 support is a separate list (I64_KERNELS in kern_pw.c): an op supports int64 when it
 * has a row there.
 */
#ifndef CAGRAD_KERN_PW_OPS_H
#define CAGRAD_KERN_PW_OPS_H

enum {
    KPWF_NOREAD = 1 << 0, /* reads no input: the one input only gives the shape (FILL) */
    KPWF_COND0 = 1 << 1,  /* input 0 is a condition of any dtype (where) */
    KPWF_COND1 = 1 << 2,  /* input 1 is a mask of any dtype (masked_fill) */
    /* input 0 times a factor of the rest: 0 where input 0 is 0, for finite factors. The
     * graph's simplifier lets a gradient that is zero by construction pass through it */
    KPWF_ZERO0 = 1 << 3,
};

/* clang-format off */
#define KERN_PW_OPS(X)                                                                             \
    /* unary: y = f(x) */                                                                          \
    X(COPY,       1, 0, KPWF_ZERO0, a,                          a)                                 \
    X(NEG,        1, 0, KPWF_ZERO0, VNEG(a),                    -a)                                \
    X(EXP,        1, 0, 0, VEXP(a),                    exp(a))                                     \
    X(LOG,        1, 0, 0, VLOG(a),                    log(a))                                     \
    X(SQRT,       1, 0, 0, VSQRT(a),                   sqrt(a))                                    \
    X(RSQRT,      1, 0, 0, VDIV(VONE, VSQRT(a)),       1 / sqrt(a))                                \
    X(ABS,        1, 0, 0, VABS(a),                    fabs(a))                                    \
    /* -1, 0, 1; 0 for +-0 and for NaN, as PyTorch */                                             \
    X(SIGN,       1, 0, 0, F(sign)(a),                 kref_sign(a))                               \
    X(SIN,        1, 0, 0, VSIN(a),                    sin(a))                                     \
    X(COS,        1, 0, 0, VCOS(a),                    cos(a))                                     \
    X(TANH,       1, 0, 0, VTANH(a),                   tanh(a))                                    \
    X(SIGMOID,    1, 0, 0, F(sigmoid)(a),              kref_sigmoid(a))                            \
    X(RELU,       1, 0, 0, VSEL(VLE(a, VZERO), VZERO, a), a > 0 ? a : 0)                           \
    /* p0 = negative_slope */                                                                      \
    X(LEAKY_RELU, 1, 1, 0, VSEL(VGT(a, VZERO), a, VMUL(a, p)), a > 0 ? a : a * p0)                 \
    /* exact: x * 0.5 * (1 + erf(x / sqrt 2)) */                                                   \
    X(GELU,       1, 0, 0, F(gelu)(a),                 a * 0.5 * (1 + erf(a / sqrt(2))))           \
    /* tanh approximation */                                                                       \
    X(GELU_TANH,  1, 0, 0, F(gelu_tanh)(a),            kref_gelu_tanh(a))                          \
    X(SILU,       1, 0, 0, VDIV(a, VADD(VONE, VEXP(VNEG(a)))), a * kref_sigmoid(a))                \
    /* p0 = beta, p1 = threshold: x where beta*x > threshold */                                    \
    X(SOFTPLUS,   1, 2, 0, F(softplus)(a, p, q),       p0 * a > p1 ? a : log1p(exp(p0 * a)) / p0)  \
    /* p0 = min, p1 = max; a NaN bound is no bound on that side */                                 \
    X(CLAMP,      1, 2, 0, F(clamp)(a, p, q),          fmin(fmax(a, p0), p1))                      \
    X(RECIPROCAL, 1, 0, 0, VDIV(VONE, a),              1 / a)                                      \
    X(SQUARE,     1, 0, 0, VMUL(a, a),                 a * a)                                      \
    /* x * tanh(softplus(x)) */                                                                    \
    X(MISH,       1, 0, 0, VMUL(a, VTANH(VLOG1P(VEXP(a)))), a * tanh(log1p(exp(a))))               \
    /* x * min(max(x + 3, 0), 6) / 6 */                                                            \
    X(HARDSWISH,  1, 0, 0, VDIV(VMUL(a, F(relu6)(VADD(a, VSET((T)3)))), VSET((T)6)),                \
      a * fmin(fmax(a + 3, 0), 6) / 6)                                                             \
    /* ELU: p1 * x where x > 0, else p0 * expm1(x) (p0 = alpha * scale, p1 = scale) */         \
    X(ELU,        1, 2, 0, VSEL(VGT(a, VZERO), VMUL(a, q), VMUL(VEXPM1(a), p)),                    \
      a > 0 ? a * p1 : expm1(a) * p0)                                                              \
    /* CELU: x where x > 0, else p0 * expm1(x * p1) (p0 = alpha, p1 = 1 / alpha) */             \
    X(CELU,       1, 2, 0, VSEL(VGT(a, VZERO), a, VMUL(VEXPM1(VMUL(a, q)), p)),                    \
      a > 0 ? a : expm1(a * p1) * p0)                                                              \
    /* log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)) */                                          \
    X(LOGSIGMOID, 1, 0, 0, VSUB(F(vmin)(a, VZERO), VLOG1P(VEXP(VNEG(VABS(a))))),                    \
      fmin(a, 0) - log1p(exp(-fabs(a))))                                                           \
    /* x / (1 + |x|) */                                                                            \
    X(SOFTSIGN,   1, 0, 0, VDIV(a, VADD(VABS(a), VONE)), a / (fabs(a) + 1))                          \
    /* min(max(x + 3, 0), 6) / 6 */                                                                \
    X(HARDSIGMOID, 1, 0, 0, VDIV(F(relu6)(VADD(a, VSET((T)3))), VSET((T)6)),                       \
      fmin(fmax(a + 3, 0), 6) / 6)                                                                 \
    /* the everyday math functions (libm / SLEEF) */                                               \
    X(LOG1P,      1, 0, 0, VLOG1P(a),                  log1p(a))                                   \
    X(EXPM1,      1, 0, 0, VEXPM1(a),                  expm1(a))                                   \
    X(LOG2,       1, 0, 0, VLOG2(a),                   log2(a))                                    \
    X(LOG10,      1, 0, 0, VLOG10(a),                  log10(a))                                   \
    X(EXP2,       1, 0, 0, VEXP2(a),                   exp2(a))                                    \
    X(ERF,        1, 0, 0, VERF(a),                    erf(a))                                     \
    X(ERFC,       1, 0, 0, VERFC(a),                   erfc(a))                                    \
    X(ERFINV,     1, 0, 0, F(erfinv)(a),               kref_erfinv(a))                             \
    X(SINH,       1, 0, 0, F(sinh)(a),                 sinh(a))                                    \
    X(COSH,       1, 0, 0, F(cosh)(a),                 cosh(a))                                    \
    X(TAN,        1, 0, 0, VTAN(a),                    tan(a))                                     \
    X(ASIN,       1, 0, 0, VASIN(a),                   asin(a))                                    \
    X(ACOS,       1, 0, 0, VACOS(a),                   acos(a))                                    \
    X(ATAN,       1, 0, 0, VATAN(a),                   atan(a))                                    \
    X(ASINH,      1, 0, 0, F(asinh)(a),                asinh(a))                                   \
    X(ACOSH,      1, 0, 0, F(acosh)(a),                acosh(a))                                   \
    X(ATANH,      1, 0, 0, VATANH(a),                  atanh(a))                                   \
    /* sin(pi x) / (pi x), 1 at 0 */                                                               \
    X(SINC,       1, 0, 0, F(sinc)(a),                 a == 0 ? 1 : sin(TK_PI * a) / (TK_PI * a))  \
    X(DEG2RAD,    1, 0, KPWF_ZERO0, F(deg2rad)(a),              a * (TK_PI / 180))                 \
    X(RAD2DEG,    1, 0, KPWF_ZERO0, F(rad2deg)(a),              a * (180 / TK_PI))                 \
    /* log(z / (1 - z)), z = x clamped to [p0, p1] (NaN: no bound, PyTorch's eps=None) */        \
    X(LOGIT,      1, 2, 0, F(logit)(a, p, q),                                                      \
      log(fmin(fmax(a, p0), p1) / (1 - fmin(fmax(a, p0), p1))))                                    \
    X(FLOOR,      1, 0, 0, VFLOOR(a),                  floor(a))                                   \
    X(CEIL,       1, 0, 0, VCEIL(a),                   ceil(a))                                    \
    X(TRUNC,      1, 0, 0, VTRUNC(a),                  trunc(a))                                   \
    /* half to even, at p0 = decimals: rint(x * 10^d) / 10^d, or for d < 0 rint(x / 10^-d) *  */ \
    /* 10^-d, with 10^|d| in T, as PyTorch */                                                      \
    X(ROUND,      1, 1, 0, F(round)(a, sp),            kref_round(a, p0))                          \
    /* x - trunc(x), as PyTorch */                                                                 \
    X(FRAC,       1, 0, 0, VSUB(a, VTRUNC(a)),         a - trunc(a))                               \
    /* scalar forms: x OP p0 (R...: p0 OP x) */                                                    \
    X(ADD_S,      1, 1, 0, VADD(a, p),                 a + p0)                                     \
    X(SUB_S,      1, 1, 0, VSUB(a, p),                 a - p0)                                     \
    X(RSUB_S,     1, 1, 0, VSUB(p, a),                 p0 - a)                                     \
    X(MUL_S,      1, 1, KPWF_ZERO0, VMUL(a, p),                 a * p0)                            \
    X(DIV_S,      1, 1, KPWF_ZERO0, VDIV(a, p),                 a / p0)                            \
    X(RDIV_S,     1, 1, 0, VDIV(p, a),                 p0 / a)                                     \
    /* x ^ p0; p0 in {0, 1, 2, 3, .5, -.5, -1, -2} without pow, as PyTorch */                      \
    X(POW_S,      1, 1, 0, F(pows)(a, sp),             pow(a, p0))                                 \
    X(RPOW_S,     1, 1, 0, VPOW(p, a),                 pow(p0, a))                                 \
    /* max(x, p0); NaN propagates (from x or p0), like clamp_min */                                \
    X(MAX_S,      1, 1, 0, F(vmax)(a, p),              fmax(a, p0))                                \
    X(MIN_S,      1, 1, 0, F(vmin)(a, p),              fmin(a, p0))                                \
    X(LT_S,       1, 1, 0, F(b2v)(VLT(a, p)),          a < p0)                                     \
    X(LE_S,       1, 1, 0, F(b2v)(VLE(a, p)),          a <= p0)                                    \
    X(GT_S,       1, 1, 0, F(b2v)(VGT(a, p)),          a > p0)                                     \
    X(GE_S,       1, 1, 0, F(b2v)(VGE(a, p)),          a >= p0)                                    \
    X(EQ_S,       1, 1, 0, F(b2v)(VEQ(a, p)),          a == p0)                                    \
    X(NE_S,       1, 1, 0, F(b2v)(VNE(a, p)),          a != p0)                                    \
    /* p0 everywhere: x only gives the shape, and its data is never read (may be NULL) */          \
    X(FILL,       1, 1, KPWF_NOREAD, p,                p0)                                         \
    /* binary: y = f(a, b) */                                                                      \
    /* a + p0 * b (p0 = alpha; callers pass 1 for plain add) */                                    \
    X(ADD,        2, 1, 0, VADD(a, VMUL(p, b)),        a + p0 * b)                                 \
    X(SUB,        2, 1, 0, VSUB(a, VMUL(p, b)),        a - p0 * b)                                 \
    X(MUL,        2, 0, KPWF_ZERO0, VMUL(a, b),                 a * b)                             \
    X(DIV,        2, 0, KPWF_ZERO0, VDIV(a, b),                 a / b)                             \
    X(POW,        2, 0, 0, VPOW(a, b),                 pow(a, b))                                  \
    /* maximum(a, b), NaN propagates */                                                            \
    X(MAX,        2, 0, 0, F(vmax)(a, b),              fmax(a, b))                                 \
    X(MIN,        2, 0, 0, F(vmin)(a, b),              fmin(a, b))                                 \
    X(LT,         2, 0, 0, F(b2v)(VLT(a, b)),          a < b)                                      \
    X(LE,         2, 0, 0, F(b2v)(VLE(a, b)),          a <= b)                                     \
    X(GT,         2, 0, 0, F(b2v)(VGT(a, b)),          a > b)                                      \
    X(GE,         2, 0, 0, F(b2v)(VGE(a, b)),          a >= b)                                     \
    X(EQ,         2, 0, 0, F(b2v)(VEQ(a, b)),          a == b)                                     \
    X(NE,         2, 0, 0, F(b2v)(VNE(a, b)),          a != b)                                     \
    /* the everyday binary math functions */                                                      \
    X(ATAN2,      2, 0, 0, VATAN2(a, b),               atan2(a, b))                                \
    X(HYPOT,      2, 0, 0, VHYPOT(a, b),               hypot(a, b))                                \
    X(FMOD,       2, 0, 0, VFMOD(a, b),                fmod(a, b))                                 \
    /* fmod moved to the divisor's sign (Python's %), as PyTorch */                                \
    X(REMAINDER,  2, 0, 0, F(remainder)(a, b),         kref_remainder(a, b))                       \
    X(COPYSIGN,   2, 0, 0, VCOPYSIGN(a, b),            copysign(a, b))                             \
    X(LOGADDEXP,  2, 0, 0, F(logaddexp)(a, b),         kref_logaddexp(a, b, 0))                    \
    X(LOGADDEXP2, 2, 0, 0, F(logaddexp2)(a, b),        kref_logaddexp(a, b, 1))                    \
    /* a log b, 0 where a == 0 unless b is NaN */                                                  \
    X(XLOGY,      2, 0, KPWF_ZERO0, F(xlogy)(a, b),        isnan(b) ? b : a == 0 ? 0 : a * log(b)) \
    /* floor(a / b), PyTorch's div_floor: from fmod, so that a == q b + fmod holds */              \
    X(FLOOR_DIVIDE, 2, 0, 0, F(floor_divide)(a, b),    kref_floor_divide(a, b))                    \
    /* b ? p0 : a (b = mask) */                                                                    \
    X(MASKED_FILL, 2, 1, KPWF_COND1, VSEL(VNE(b, VZERO), p, a), b != 0 ? p0 : a)                   \
    /* derivative helpers, binary: (g, x) or (g, y) -> dx, g = the incoming gradient */            \
    /* x <= 0 ? 0 : g (PyTorch's threshold_backward: NaN x passes g) */                            \
    X(RELU_BW,    2, 0, KPWF_ZERO0, VSEL(VLE(b, VZERO), VZERO, a), b > 0 ? a : 0)                  \
    /* g * (x > 0 ? 1 : p0) */                                                                     \
    X(LEAKY_RELU_BW, 2, 1, KPWF_ZERO0, VSEL(VGT(b, VZERO), a, VMUL(a, p)), b > 0 ? a : a * p0)     \
    X(GELU_BW,    2, 0, KPWF_ZERO0, F(gelu_bw)(a, b),           kref_gelu_bw(a, b))                \
    X(GELU_TANH_BW, 2, 0, KPWF_ZERO0, F(gelu_tanh_bw)(a, b),    kref_gelu_tanh_bw(a, b))           \
    /* g * s * (1 + x * (1 - s)), s = sigmoid(x) */                                                \
    X(SILU_BW,    2, 0, KPWF_ZERO0, F(silu_bw)(a, b),           kref_silu_bw(a, b))                \
    /* g * sigmoid(beta*x), or g where beta*x > threshold; p0, p1 as softplus */                   \
    X(SOFTPLUS_BW, 2, 2, KPWF_ZERO0, F(softplus_bw)(a, b, p, q),                                   \
      p0 * b > p1 ? a : a * kref_sigmoid(p0 * b))                                                  \
    /* (g, y): g * y * (1 - y) */                                                                  \
    X(SIGMOID_BW, 2, 0, KPWF_ZERO0, VMUL(VMUL(a, VSUB(VONE, b)), b), a * b * (1 - b))              \
    /* (g, y): g * (1 - y*y) */                                                                    \
    X(TANH_BW,    2, 0, KPWF_ZERO0, VMUL(a, VSUB(VONE, VMUL(b, b))), a * (1 - b * b))              \
    /* g * (min <= x <= max), p0 = min, p1 = max (NaN = unbounded) */                              \
    X(CLAMP_BW,   2, 2, KPWF_ZERO0, F(clamp_bw)(a, b, p, q),    b >= p0 && b <= p1 ? a : 0)        \
    /* g * sign(x) */                                                                              \
    X(ABS_BW,     2, 0, KPWF_ZERO0, VMUL(a, F(sign)(b)),        a * kref_sign(b))                  \
    /* g * (t + x * sigmoid(x) * (1 - t*t)), t = tanh(softplus(x)) */                             \
    X(MISH_BW,    2, 0, KPWF_ZERO0, F(mish_bw)(a, b),                                              \
      a * (tanh(log1p(exp(b))) + b * kref_sigmoid(b) * (1 - pow(tanh(log1p(exp(b))), 2))))        \
    /* 0 where x < -3, g where x >= 3, else g * (x / 3 + 1/2) (PyTorch's vector path: NaN x  */  \
    /* gives NaN) */                                                                               \
    X(HARDSWISH_BW, 2, 0, KPWF_ZERO0, F(hardswish_bw)(a, b),                                       \
      b < -3 ? 0 : b >= 3 ? a : a * (b / 3 + 0.5))                                                 \
    /* g / 6 where -3 < x < 3, else 0 (as g times 1/6 in T; PyTorch's float64 kernel uses */    \
    /* the float32 constant 1.0f / 6.0f there, which is 3e-8 off) */                              \
    X(HARDSIGMOID_BW, 2, 0, KPWF_ZERO0,                                                            \
      VSEL(MAND(VGT(b, VSET((T)-3)), VLT(b, VSET((T)3))), VMUL(a, VSET((T)(1.0 / 6))), VZERO),      \
      b > -3 && b < 3 ? a / 6 : 0)                                                                 \
    /* g * p1 where x > 0, else g * p0 * exp(x); p0, p1 as ELU */                                  \
    X(ELU_BW,     2, 2, KPWF_ZERO0, VSEL(VGT(b, VZERO), VMUL(a, q), VMUL(VMUL(a, p), VEXP(b))),    \
      b > 0 ? a * p1 : a * p0 * exp(b))                                                            \
    /* g where x > 0, else g * p1 * p0 * exp(x * p1); p0, p1 as CELU */                            \
    X(CELU_BW,    2, 2, KPWF_ZERO0,                                                                \
      VSEL(VGT(b, VZERO), a, VMUL(VMUL(VMUL(a, q), p), VEXP(VMUL(b, q)))),                         \
      b > 0 ? a : a * p1 * p0 * exp(b * p1))                                                       \
    /* g * (1 - sigmoid(x)), with z = exp(-|x|): g * (1 - z / (1 + z)) below 0, else      */  \
    /* g * z / (1 + z), as PyTorch's log_sigmoid_backward */                                       \
    X(LOGSIGMOID_BW, 2, 0, KPWF_ZERO0, F(logsigmoid_bw)(a, b),                                     \
      a * (b < 0 ? 1 - exp(-fabs(b)) / (1 + exp(-fabs(b))) : exp(-fabs(b)) / (1 + exp(-fabs(b)))))\
    /* g / (1 + |x|)^2 */                                                                          \
    X(SOFTSIGN_BW, 2, 0, KPWF_ZERO0, VDIV(a, F(square)(VADD(VABS(b), VONE))),                      \
      a / ((1 + fabs(b)) * (1 + fabs(b))))                                                         \
    /* g where p0 < x < p1, else 0 (NaN x included: PyTorch's vector path) */                      \
    X(HARDTANH_BW, 2, 2, KPWF_ZERO0, VSEL(MAND(VGT(b, p), VLT(b, q)), a, VZERO),                   \
      b > p0 && b < p1 ? a : 0)                                                                    \
    /* (g, x): g * 2/sqrt(pi) * exp(-x*x) */                                                     \
    X(ERF_BW,     2, 0, KPWF_ZERO0, F(erf_bw)(a, b),            \
      a * 2 / sqrt(TK_PI) * exp(-b * b))                                                           \
    /* (g, y): g * sqrt(pi)/2 * exp(y*y), y = erfinv(x) */                                         \
    X(ERFINV_BW,  2, 0, KPWF_ZERO0, F(erfinv_bw)(a, b),         \
      a * sqrt(TK_PI) / 2 * exp(b * b))                                                            \
    /* (g, x): g * d/dx sinc(x), 0 at x == 0 */                                                    \
    X(SINC_BW,    2, 0, KPWF_ZERO0, VMUL(a, F(sinc_d)(b)),      a * kref_sinc_d(b))                \
    /* (g, x): g / (x (1 - x)), 0 outside [p0, p1] (bounds as LOGIT; NaN: none) */                 \
    X(LOGIT_BW,   2, 2, KPWF_ZERO0, F(logit_bw)(a, b, p, q),                                       \
      b < p0 || b > p1 ? 0 : a / (b * (1 - b)))                                                    \
    /* (g, x): g * p0 * x^(p0-1); 0 where p0 == 0 */                                               \
    X(POW_S_BW, 2, 1, KPWF_ZERO0, F(pow_s_bw)(a, b, p, sp), p0 == 0 ? 0 : a * p0 * pow(b, p0 - 1)) \
    /* ternary: y = f(a, b, c) */                                                                  \
    /* a ? b : c */                                                                                \
    X(WHERE,      3, 0, KPWF_COND0, VSEL(VNE(a, VZERO), b, c), a != 0 ? b : c)                     \
    /* (g, a, b): g * b * a^(b-1); 0 where b == 0 */                                               \
    X(POW_BW_BASE, 3, 0, KPWF_ZERO0, F(pow_bw_base)(a, b, c),  c == 0 ? 0 : a * c * pow(b, c - 1)) \
    /* (g, a, y): g * y * log(a), y = a^b; 0 where a == 0 and y is finite, which for y = a^b   */  \
    /* is PyTorch's "a == 0 and b >= 0" */                                                         \
    X(POW_BW_EXP, 3, 0, KPWF_ZERO0, F(pow_bw_exp)(a, b, c),     a * c * log(b))                    \
    /* (g, a, b): g/2 where a == b, 0 where a < b, else g (a > b or NaN): maximum's grad for   */  \
    /* a; swap the args for b; minimum uses the same with swapped args, as PyTorch */              \
    X(MAXMIN_BW,  3, 0, KPWF_ZERO0, F(maxmin_bw)(a, b, c),      b == c ? a / 2 : b > c ? a : 0)
/* clang-format on */

#endif /* CAGRAD_KERN_PW_OPS_H */

/* ---------------------------------------------------------------------------------------
 * The vector helpers the VEC formulas call. This part is outside the include guard:
 * kern_simd_body.inc includes the file again once per ISA and element type, with T, V, W,
 * F() and the V-macros defined, and gets one copy of the helpers each time.
 */
#ifdef KS_NAME

/* (0 < x) - (x < 0): NaN and both zeros give +0, as in PyTorch. */
static inline V F(sign)(V x) {
    return VSUB(F(b2v)(VGT(x, VZERO)), F(b2v)(VLT(x, VZERO)));
}

static inline V F(sigmoid)(V x) {
    return VDIV(VONE, VADD(VONE, VEXP(VNEG(x))));
}

/* x ^ e with PyTorch's special exponents, which it computes without pow. */
static inline V F(pows)(V x, T e) {
    if (e == 2)
        return VMUL(x, x);
    if (e == 3)
        return VMUL(VMUL(x, x), x);
    if (e == (T)0.5)
        return VSQRT(x);
    if (e == (T)-0.5)
        return VDIV(VONE, VSQRT(x));
    if (e == -1)
        return VDIV(VONE, x);
    if (e == -2)
        return VDIV(VONE, VMUL(x, x));
    if (e == 1)
        return x;
    if (e == 0)
        return VONE;
    return VPOW(x, VSET(e));
}

#define KS_SQRT1_2      0.70710678118654752440
#define KS_SQRT_2_PI    0.79788456080286535588 /* sqrt(2/pi) */
#define KS_INV_SQRT_2PI 0.39894228040143267794 /* 1/sqrt(2*pi) */
#define KS_KAPPA        0.044715

/* Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7): what PyTorch's vectorised float GELU uses,
 * at a sixth of the cost of SLEEF's erff. Only GELU uses it, where absolute error counts.
 * erf_as_e takes e = exp(-x*x) from the caller: GELU's backward has it already. */
static inline V F(erf_as_e)(V x, V e) {
    V t = VDIV(VONE, VADD(VMUL(VSET((T)0.3275911), VABS(x)), VONE));
    V r = VADD(VMUL(VSET((T)1.061405429), t), VSET((T)-1.453152027));
    r = VADD(VMUL(r, t), VSET((T)1.421413741));
    r = VADD(VMUL(r, t), VSET((T)-0.284496736));
    r = VADD(VMUL(r, t), VSET((T)0.254829592));
    V y = VSUB(VONE, VMUL(VMUL(r, t), e));
    return VSEL(VLT(x, VZERO), VNEG(y), y);
}

static inline V F(erf_as)(V x) {
    return F(erf_as_e)(x, VEXP(VNEG(VMUL(x, x))));
}

#ifndef KS_GELU_ERF
#define KS_GELU_ERF VERF /* the ISA file picks erf_as for vector f32 */
#endif

static inline V F(gelu)(V x) {
    V e = KS_GELU_ERF(VMUL(x, VSET((T)KS_SQRT1_2)));
    return VMUL(VMUL(x, VSET((T)0.5)), VADD(VONE, e));
}

static inline V F(gelu_inner)(V x) {
    V cube = VMUL(VMUL(x, x), x);
    return VMUL(VSET((T)KS_SQRT_2_PI), VADD(x, VMUL(VSET((T)KS_KAPPA), cube)));
}

static inline V F(gelu_tanh)(V x) {
    return VMUL(VMUL(VSET((T)0.5), x), VADD(VONE, VTANH(F(gelu_inner)(x))));
}

static inline V F(softplus)(V x, V beta, V thr) {
    V z = VMUL(x, beta);
    return VSEL(VGT(z, thr), x, VDIV(VLOG1P(VEXP(z)), beta));
}

/* A NaN bound compares false, which is exactly "no bound on that side". */
static inline V F(clamp)(V x, V lo, V hi) {
    V r = VSEL(VLT(x, lo), lo, x);
    return VSEL(VGT(r, hi), hi, r);
}

/* d/dx x Phi(x) = Phi(x) + x phi(x). With erf_as, Phi's erf and phi share exp(-x*x/2):
 * one exp per element instead of two. */
static inline V F(gelu_bw)(V g, V x) {
    V z = VMUL(x, VSET((T)KS_SQRT1_2));
#ifdef KS_GELU_AS
    V e = VEXP(VNEG(VMUL(z, z)));
    V erf_z = F(erf_as_e)(z, e);
#else
    V e = VEXP(VMUL(VMUL(x, x), VSET((T)-0.5)));
    V erf_z = KS_GELU_ERF(z);
#endif
    V cdf = VMUL(VSET((T)0.5), VADD(VONE, erf_z));
    V pdf = VMUL(VSET((T)KS_INV_SQRT_2PI), e);
    return VMUL(g, VADD(cdf, VMUL(x, pdf)));
}

static inline V F(gelu_tanh_bw)(V g, V x) {
    V th = VTANH(F(gelu_inner)(x));
    V left = VMUL(VSET((T)0.5), x);
    V dleft = VMUL(VSET((T)0.5), VADD(VONE, th));
    V dinner = VMUL(VSET((T)KS_SQRT_2_PI), VADD(VONE, VMUL(VSET((T)(3 * KS_KAPPA)), VMUL(x, x))));
    V dright = VMUL(VMUL(left, VSUB(VONE, VMUL(th, th))), dinner);
    return VMUL(g, VADD(dleft, dright));
}

static inline V F(silu_bw)(V g, V x) {
    V s = F(sigmoid)(x);
    return VMUL(VMUL(g, s), VADD(VONE, VMUL(x, VSUB(VONE, s))));
}

static inline V F(softplus_bw)(V g, V x, V beta, V thr) {
    V z = VMUL(x, beta);
    return VSEL(VGT(z, thr), g, VMUL(g, F(sigmoid)(z)));
}

static inline V F(clamp_bw)(V g, V x, V lo, V hi) {
    M ok = MAND(MOR(VGE(x, lo), VUNORD(lo, lo)), MOR(VLE(x, hi), VUNORD(hi, hi)));
    return VSEL(ok, g, VZERO);
}

static inline V F(square)(V x) {
    return VMUL(x, x);
}

/* min(max(x, 0), 6), NaN propagating as in PyTorch's vec::minimum / maximum */
static inline V F(relu6)(V x) {
    return F(vmin)(F(vmax)(x, VZERO), VSET((T)6));
}

static inline V F(hardswish_bw)(V g, V x) {
    V mid = VMUL(g, VADD(VDIV(x, VSET((T)3)), VSET((T)0.5)));
    return VSEL(VLT(x, VSET((T)-3)), VZERO, VSEL(VGE(x, VSET((T)3)), g, mid));
}

static inline V F(logsigmoid_bw)(V g, V x) {
    V z = VEXP(VNEG(VABS(x)));
    M neg = VLT(x, VZERO);
    V max_deriv = VSEL(neg, VONE, VZERO), sign = VSEL(neg, VONE, VSET((T)-1));
    return VMUL(VSUB(max_deriv, VMUL(sign, VDIV(z, VADD(VONE, z)))), g);
}

static inline V F(mish_bw)(V g, V x) {
    V t = VTANH(VLOG1P(VEXP(x)));
    return VMUL(g, VADD(t, VMUL(VMUL(x, F(sigmoid)(x)), VSUB(VONE, VMUL(t, t)))));
}

/* g * e * x^(e-1), the exponent e - 1 formed in double as PyTorch does; 0 where e == 0. */
static inline V F(pow_s_bw)(V g, V x, V e, T se) {
    if (se == 0)
        return VZERO;
    return VMUL(g, VMUL(e, F(pows)(x, (T)((double)se - 1))));
}

static inline V F(pow_bw_base)(V g, V a, V b) {
    V d = VMUL(g, VMUL(b, VPOW(a, VSUB(b, VONE))));
    return VSEL(VEQ(b, VZERO), VZERO, d);
}

/* PyTorch zeroes where a == 0 and b >= 0, which for y = a^b is: a == 0 and y finite. */
static inline V F(pow_bw_exp)(V g, V a, V y) {
    M zero = MAND(VEQ(a, VZERO), VLT(VABS(y), VSET(KS_INF)));
    return VSEL(zero, VZERO, VMUL(g, VMUL(y, VLOG(a))));
}

/* torch.maximum's grad for a: g/2 on ties, 0 where a < b, g otherwise (NaN included). */
static inline V F(maxmin_bw)(V g, V a, V b) {
    return VSEL(VEQ(a, b), VMUL(g, VSET((T)0.5)), VSEL(VLT(a, b), VZERO, g));
}

#define KS_PI       3.14159265358979323846
#define KS_2_SQRTPI 1.12837916709551257390 /* 2/sqrt(pi) */
#define KS_SQRTPI_2 0.88622692545275801365 /* sqrt(pi)/2 */

/* erfinv: Giles' single-precision approximation ("Approximating the erfinv function",
 * GPU Computing Gems, 2011), then Newton steps on erf (|x| < 0.5) or on erfc, whose
 * 1 - |x| is exact near 1 where erf(y) - x would cancel: one step for float, two for
 * double. +-1 gives +-inf, |x| > 1 NaN. */
static inline V F(erfinv_giles)(V x) {
    V w = VNEG(VLOG(VMUL(VSUB(VONE, x), VADD(VONE, x))));
    V c = VSUB(w, VSET((T)2.5));
    V p = VSET((T)2.81022636e-08);
    p = VADD(VSET((T)3.43273939e-07), VMUL(p, c));
    p = VADD(VSET((T)-3.5233877e-06), VMUL(p, c));
    p = VADD(VSET((T)-4.39150654e-06), VMUL(p, c));
    p = VADD(VSET((T)0.00021858087), VMUL(p, c));
    p = VADD(VSET((T)-0.00125372503), VMUL(p, c));
    p = VADD(VSET((T)-0.00417768164), VMUL(p, c));
    p = VADD(VSET((T)0.246640727), VMUL(p, c));
    p = VADD(VSET((T)1.50140941), VMUL(p, c));
    V t = VSUB(VSQRT(w), VSET((T)3));
    V q = VSET((T)-0.000200214257);
    q = VADD(VSET((T)0.000100950558), VMUL(q, t));
    q = VADD(VSET((T)0.00134934322), VMUL(q, t));
    q = VADD(VSET((T)-0.00367342844), VMUL(q, t));
    q = VADD(VSET((T)0.00573950773), VMUL(q, t));
    q = VADD(VSET((T)-0.0076224613), VMUL(q, t));
    q = VADD(VSET((T)0.00943887047), VMUL(q, t));
    q = VADD(VSET((T)1.00167406), VMUL(q, t));
    q = VADD(VSET((T)2.83297682), VMUL(q, t));
    return VMUL(VSEL(VLT(w, VSET((T)5)), p, q), x);
}

/* y + (erfc(y) - (1 - ax)) / erfc'(-y) for ax = |x| near 1, y - (erf(y) - ax) / erf'(y) else */
static inline V F(erfinv_newton)(V y, V ax) {
    V slope = VMUL(VSET((T)KS_2_SQRTPI), VEXP(VNEG(VMUL(y, y))));
    V by_erf = VSUB(y, VDIV(VSUB(VERF(y), ax), slope));
    V by_erfc = VADD(y, VDIV(VSUB(VERFC(y), VSUB(VONE, ax)), slope));
    return VSEL(VLT(ax, VSET((T)0.5)), by_erf, by_erfc);
}

static inline V F(erfinv)(V x) {
    V ax = VABS(x);
    V y = F(erfinv_giles)(ax);
    y = F(erfinv_newton)(y, ax);
    if (sizeof(T) == 8)
        y = F(erfinv_newton)(y, ax);
    y = VSEL(VEQ(ax, VONE), VSET((T)KS_INF), y);
    y = VSEL(VLT(x, VZERO), VNEG(y), y);
    return VSEL(VEQ(x, VZERO), x, y); /* -0.0 stays -0.0 */
}

/* SLEEF's sinh and cosh overflow to inf a little before the true result does (near 710 in
 * double), so from |x| > 20, where e^-|x| no longer counts, they are e^|x| / 2, formed as
 * e^(|x|/2) * (e^(|x|/2) / 2) so that the square is what overflows, at the true place. */
static inline V F(exp_half_big)(V ax) {
    V h = VEXP(VMUL(ax, VSET((T)0.5)));
    return VMUL(h, VMUL(h, VSET((T)0.5)));
}

static inline V F(sinh)(V x) {
    V ax = VABS(x), big = F(exp_half_big)(ax);
    return VSEL(VGT(ax, VSET((T)20)), VSEL(VLT(x, VZERO), VNEG(big), big), VSINH(x));
}

static inline V F(cosh)(V x) {
    V ax = VABS(x);
    return VSEL(VGT(ax, VSET((T)20)), F(exp_half_big)(ax), VCOSH(x));
}

/* SLEEF's float asinh and acosh overflow for huge x; from 2^28 on, where 1 / (4 x^2) no
 * longer counts in double, they are log(2|x|) = log|x| + log 2. */
#define KS_BIG_ARC 268435456.0 /* 2^28 */
static inline V F(log2x)(V ax) {
    return VADD(VLOG(ax), VSET((T)0.69314718055994530942));
}

static inline V F(asinh)(V x) {
    V ax = VABS(x), big = F(log2x)(ax);
    return VSEL(VGT(ax, VSET((T)KS_BIG_ARC)), VSEL(VLT(x, VZERO), VNEG(big), big), VASINH(x));
}

static inline V F(acosh)(V x) {
    return VSEL(VGT(x, VSET((T)KS_BIG_ARC)), F(log2x)(x), VACOSH(x));
}
#undef KS_BIG_ARC

static inline V F(deg2rad)(V x) {
    return VMUL(x, VSET((T)(KS_PI / 180)));
}

static inline V F(rad2deg)(V x) {
    return VMUL(x, VSET((T)(180 / KS_PI)));
}

static inline V F(erf_bw)(V g, V x) {
    return VMUL(g, VMUL(VSET((T)KS_2_SQRTPI), VEXP(VNEG(VMUL(x, x)))));
}

static inline V F(erfinv_bw)(V g, V y) {
    return VMUL(g, VMUL(VSET((T)KS_SQRTPI_2), VEXP(VMUL(y, y))));
}

static inline V F(round)(V x, T decimals) {
    if (decimals == 0)
        return VRINT(x);
    T scale = (T)pow(10.0, fabs((double)decimals));
    if (decimals < 0)
        return VMUL(VRINT(VDIV(x, VSET(scale))), VSET(scale));
    return VDIV(VRINT(VMUL(x, VSET(scale))), VSET(scale));
}

/* fmod's result mod is nonzero and of the other sign than b */
static inline M F(signs_differ)(V mod, V b) {
    return MOR(MAND(VLT(b, VZERO), VGT(mod, VZERO)), MAND(VGT(b, VZERO), VLT(mod, VZERO)));
}

static inline V F(remainder)(V a, V b) {
    V mod = VFMOD(a, b);
    return VSEL(F(signs_differ)(mod, b), VADD(mod, b), mod);
}

/* max + log1p(exp(-|a - b|)), and a itself where a == b is infinite (inf - inf is NaN) */
static inline V F(logaddexp)(V a, V b) {
    V m = F(vmax)(a, b);
    V r = VADD(m, VLOG1P(VEXP(VNEG(VABS(VSUB(a, b))))));
    return VSEL(MAND(VEQ(a, b), VEQ(VABS(a), VSET(KS_INF))), a, r);
}

static inline V F(logaddexp2)(V a, V b) {
    V m = F(vmax)(a, b);
    V t = VMUL(VLOG1P(VEXP2(VNEG(VABS(VSUB(a, b))))), VSET((T)1.44269504088896340736));
    return VSEL(MAND(VEQ(a, b), VEQ(VABS(a), VSET(KS_INF))), a, VADD(m, t));
}

static inline V F(xlogy)(V x, V y) {
    V r = VSEL(VEQ(x, VZERO), VZERO, VMUL(x, VLOG(y)));
    return VSEL(VUNORD(y, y), y, r);
}

/* q = (a - fmod(a, b)) / b, one less where fmod's sign is not b's, then rounded to the
 * nearest whole number (q is whole up to rounding); a zero q takes the sign of a / b, and
 * b == 0 gives a / b (inf or NaN), as PyTorch's div_floor */
static inline V F(floor_divide)(V a, V b) {
    V mod = VFMOD(a, b);
    V q = VDIV(VSUB(a, mod), b);
    q = VSEL(F(signs_differ)(mod, b), VSUB(q, VONE), q);
    V fl = VFLOOR(q);
    fl = VSEL(VGT(VSUB(q, fl), VSET((T)0.5)), VADD(fl, VONE), fl);
    V quot = VDIV(a, b);
    fl = VSEL(VEQ(q, VZERO), VCOPYSIGN(VZERO, quot), fl);
    return VSEL(VEQ(b, VZERO), quot, fl);
}

static inline V F(sinc)(V x) {
    V px = VMUL(x, VSET((T)KS_PI));
    return VSEL(VEQ(x, VZERO), VONE, VDIV(VSIN(px), px));
}

/* d/dx sinc(x) = pi * (u cos u - sin u) / u^2, u = pi x. Below |u| = 1 the difference
 * cancels, so there it is the Taylor series pi * sum_k (-1)^k 2k u^(2k-1) / (2k+1)!. */
static inline V F(sinc_d)(V x) {
    V u = VMUL(x, VSET((T)KS_PI));
    V direct = VDIV(VSUB(VMUL(u, VCOS(u)), VSIN(u)), VMUL(u, x));
    static const double coef[] = {-1.0 / 3,
                                  1.0 / 30,
                                  -1.0 / 840,
                                  1.0 / 45360,
                                  -1.0 / 3991680,
                                  1.0 / 518918400,
                                  -1.0 / 93405312000.0,
                                  1.0 / 22230464256000.0,
                                  -1.0 / 6758061133824000.0};
    V u2 = VMUL(u, u), s = VSET((T)coef[8]);
    for (int k = 7; k >= 0; k--)
        s = VADD(VSET((T)coef[k]), VMUL(s, u2));
    V series = VMUL(VSET((T)KS_PI), VMUL(u, s));
    return VSEL(VLT(VABS(u), VONE), series, direct);
}

static inline V F(logit)(V x, V lo, V hi) {
    V z = F(clamp)(x, lo, hi);
    return VLOG(VDIV(z, VSUB(VONE, z)));
}

/* PyTorch's logit_backward: 0 outside [eps, 1 - eps] when eps is given */
static inline V F(logit_bw)(V g, V x, V lo, V hi) {
    M out = MOR(VLT(x, lo), VGT(x, hi));
    return VSEL(out, VZERO, VDIV(g, VMUL(x, VSUB(VONE, x))));
}

#undef KS_PI
#undef KS_2_SQRTPI
#undef KS_SQRTPI_2
#undef KS_SQRT1_2
#undef KS_SQRT_2_PI
#undef KS_INV_SQRT_2PI
#undef KS_KAPPA
#undef KS_GELU_ERF
#undef KS_GELU_AS

#endif /* KS_NAME */
