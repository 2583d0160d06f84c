/* kern_simd_avx512.c - the AVX-512 instantiation of kern_simd_body.inc, on SLEEF.
 *
 * Built with -mavx512f -mavx512dq -mavx512vl -mavx512bw -mavx2 -mfma and reached only
 * through cai_kern_simd_for() once kern_core.c has seen those features on the CPU (valgrind
 * and older CPUs have none). Tails use lane masks, so no lane past n is touched.
 */
#if !defined(__AVX512F__) || !defined(__AVX512DQ__)
// cppcheck-suppress preprocessorErrorDirective ; lint runs without the per-file -m flags
#error "kern_simd_avx512.c must be compiled with -mavx512f -mavx512dq -mavx512vl -mavx512bw"
#endif

#include <immintrin.h>
#include <math.h>
#include <sleef.h>

#include "kern_internal.h"

#define KS_CAT2(a, b) a##b
#define KS_CAT(a, b)  KS_CAT2(a, b)
#define KS_I(op)      KS_CAT(_mm512_##op##_, SFX) /* _mm512_add_ps or _mm512_add_pd */
#define KS_SL(f)      KS_CAT(KS_CAT(Sleef_##f, SLV), _u10avx512f)
#define KS_SL15(f)    KS_CAT(KS_CAT(Sleef_##f, SLV), _u15avx512f) /* erfc: SLEEF has only u15 */
#define KS_U05        _u05avx512f
#define KS_SLX(f)     KS_CAT(KS_CAT(Sleef_##f, SLV), _avx512f) /* exact: floor, ceil, ... */

#define VLD             KS_I(loadu)
#define VST             KS_I(storeu)
#define VTAIL(n)        ((M)((1u << (n)) - 1u))
#define VLDN(p, n)      KS_I(maskz_loadu)(VTAIL(n), p)
#define VSTN(p, v, n)   KS_I(mask_storeu)(p, VTAIL(n), v)
#define VSET            KS_I(set1)
#define VZERO           KS_I(setzero)()
#define VADD            KS_I(add)
#define VSUB            KS_I(sub)
#define VMUL            KS_I(mul)
#define VDIV            KS_I(div)
#define VSQRT           KS_I(sqrt)
#define VNEG(x)         KS_I (xor)(x, VSET(-0.0))
#define VABS            KS_I(abs)
#define VCOPYSIGN(a, b) KS_I(or)(VABS(a), KS_I(and)(VSET(-0.0), b))
#define VMAXR           KS_I(max)
#define VMINR           KS_I(min)
#define VCMP            KS_CAT(KS_I(cmp), _mask)
#define VLT(a, b)       VCMP(a, b, _CMP_LT_OQ)
#define VLE(a, b)       VCMP(a, b, _CMP_LE_OQ)
#define VGT(a, b)       VCMP(a, b, _CMP_GT_OQ)
#define VGE(a, b)       VCMP(a, b, _CMP_GE_OQ)
#define VEQ(a, b)       VCMP(a, b, _CMP_EQ_OQ)
#define VNE(a, b)       VCMP(a, b, _CMP_NEQ_UQ)
#define VUNORD(a, b)    VCMP(a, b, _CMP_UNORD_Q)
#define VSEL(m, t, f)   KS_I(mask_blend)(m, f, t)
#define MAND(a, b)      ((M)((a) & (b)))
#define MOR(a, b)       ((M)((a) | (b)))
#define MANY(m)         ((m) != 0)
#define MZERO           ((M)0)
#include "kern_simd_sleef.h"

#define T              float
#define V              __m512
#define M              __mmask16
#define W              16
#define SFX            ps
#define SLV            f16
#define KS_NAME(x)     cai_kern_avx512_f32_##x
#define KS_GELU_ERF(x) KS_NAME(erf_as)(x)
#define KS_GELU_AS     1 /* erf_as: gelu_bw shares its exp */
#include "kern_simd_body.inc"
#undef SFX
#undef SLV

#define T          double
#define V          __m512d
#define M          __mmask8
#define W          8
#define SFX        pd
#define SLV        d8
#define KS_NAME(x) cai_kern_avx512_f64_##x
#include "kern_simd_body.inc"
