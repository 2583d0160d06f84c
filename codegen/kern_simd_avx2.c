/* kern_simd_avx2.c - the AVX2 + FMA instantiation of kern_simd_body.inc, on SLEEF.
 *
 * Built with -mavx2 -mfma and reached only through cai_kern_simd_for() once kern_core.c has
 * seen avx2 and fma on the CPU. Tails use maskload/maskstore, so no lane past n is touched.
 */
#if !defined(__AVX2__) || !defined(__FMA__)
// cppcheck-suppress preprocessorErrorDirective ; lint runs without the per-file -m flags
#error "kern_simd_avx2.c must be compiled with -mavx2 -mfma"
#endif

#include <immintrin.h>
#include <math.h>
#include <sleef.h>

#include "kern_internal.h"

#define KS_CAT2(a, b) a##b
#define KS_CAT(a, b)  KS_CAT2(a, b)
#define KS_I(op)      KS_CAT(_mm256_##op##_, SFX) /* _mm256_add_ps or _mm256_add_pd */
#define KS_SL(f)      KS_CAT(KS_CAT(Sleef_##f, SLV), _u10avx2)
#define KS_SL15(f)    KS_CAT(KS_CAT(Sleef_##f, SLV), _u15avx2) /* erfc: SLEEF has only u15 */
#define KS_U05        _u05avx2
#define KS_SLX(f)     KS_CAT(KS_CAT(Sleef_##f, SLV), _avx2) /* exact: floor, ceil, ... */

#define VLD             KS_I(loadu)
#define VST             KS_I(storeu)
#define VLDN(p, n)      KS_I(maskload)(p, KS_TAILI(n))
#define VSTN(p, v, n)   KS_I(maskstore)(p, KS_TAILI(n), v)
#define VTAIL(n)        KS_CAT(_mm256_castsi256_, SFX)(KS_TAILI(n))
#define VSET            KS_I(set1)
#define VZERO           KS_I(setzero)()
#define VADD            KS_I(add)
#define VSUB            KS_I(sub)
#define VMUL            KS_I(mul)
#define VDIV            KS_I(div)
#define VSQRT           KS_I(sqrt)
#define VNEG(x)         KS_I (xor)(x, VSET(-0.0))
#define VABS(x)         KS_I(andnot)(VSET(-0.0), x)
#define VCOPYSIGN(a, b) KS_I(or)(VABS(a), KS_I(and)(VSET(-0.0), b))
#define VMAXR           KS_I(max)
#define VMINR           KS_I(min)
#define VCMP            KS_I(cmp)
#define VLT(a, b)       VCMP(a, b, _CMP_LT_OQ)
#define VLE(a, b)       VCMP(a, b, _CMP_LE_OQ)
#define VGT(a, b)       VCMP(a, b, _CMP_GT_OQ)
#define VGE(a, b)       VCMP(a, b, _CMP_GE_OQ)
#define VEQ(a, b)       VCMP(a, b, _CMP_EQ_OQ)
#define VNE(a, b)       VCMP(a, b, _CMP_NEQ_UQ)
#define VUNORD(a, b)    VCMP(a, b, _CMP_UNORD_Q)
#define VSEL(m, t, f)   KS_I(blendv)(f, t, m)
#define MAND            KS_I(and)
#define MOR             KS_I(or)
#define MANY(m)         (KS_I(movemask)(m) != 0)
#define MZERO           VZERO
#include "kern_simd_sleef.h"

#define T   float
#define V   __m256
#define M   __m256
#define W   8
#define SFX ps
#define SLV f8
#define KS_TAILI(n)                                                                                \
    _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define KS_NAME(x)     cai_kern_avx2_f32_##x
#define KS_GELU_ERF(x) KS_NAME(erf_as)(x)
#define KS_GELU_AS     1 /* erf_as: gelu_bw shares its exp */
#include "kern_simd_body.inc"
#undef SFX
#undef SLV
#undef KS_TAILI

#define T           double
#define V           __m256d
#define M           __m256d
#define W           4
#define SFX         pd
#define SLV         d4
#define KS_TAILI(n) _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3))
#define KS_NAME(x)  cai_kern_avx2_f64_##x
#include "kern_simd_body.inc"
