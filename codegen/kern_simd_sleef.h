/* kern_simd_sleef.h - the vector math functions of kern_simd_body.inc on SLEEF, for the
 * ISA files that include it after defining
 *   KS_SL(f)    SLEEF's 1.0-ulp f for the file's vector type and ISA,
 *   KS_SL15(f)  its 1.5-ulp f (erfc has only that one),
 *   KS_U05      the suffix of its 0.5-ulp functions (hypot has only that one),
 *   KS_SLX(f)   its exact f (floor, ceil, trunc, rint, fmod),
 *   SLV         SLEEF's vector-type infix (f8, d4, f16, d8).
 * One list, so an ISA path cannot miss a function the others have.
 */
#ifndef CAGRAD_KERN_SIMD_SLEEF_H
#define CAGRAD_KERN_SIMD_SLEEF_H

#define VEXP   KS_SL(exp)
#define VLOG   KS_SL(log)
#define VSIN   KS_SL(sin)
#define VCOS   KS_SL(cos)
#define VTANH  KS_SL(tanh)
#define VERF   KS_SL(erf)
#define VLOG1P KS_SL(log1p)
#define VEXPM1 KS_SL(expm1)
#define VPOW   KS_SL(pow)
#define VLOG2  KS_SL(log2)
#define VLOG10 KS_SL(log10)
#define VEXP2  KS_SL(exp2)
#define VSINH  KS_SL(sinh)
#define VCOSH  KS_SL(cosh)
#define VTAN   KS_SL(tan)
#define VASIN  KS_SL(asin)
#define VACOS  KS_SL(acos)
#define VATAN  KS_SL(atan)
#define VASINH KS_SL(asinh)
#define VACOSH KS_SL(acosh)
#define VATANH KS_SL(atanh)
#define VERFC  KS_SL15(erfc)
#define VATAN2 KS_SL(atan2)
#define VHYPOT KS_CAT(KS_CAT(Sleef_hypot, SLV), KS_U05) /* u05 only */
#define VFMOD  KS_SLX(fmod)
#define VFLOOR KS_SLX(floor)
#define VCEIL  KS_SLX(ceil)
#define VTRUNC KS_SLX(trunc)
#define VRINT  KS_SLX(rint) /* half to even */

#endif /* CAGRAD_KERN_SIMD_SLEEF_H */
