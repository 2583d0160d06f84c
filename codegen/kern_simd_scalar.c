/* kern_simd_scalar.c - the one-lane instantiation of kern_simd_body.inc, on libm.
 *
 * It is the reference path (CAGRAD_ISA=scalar) and the fallback for CPUs without AVX2, so
 * it is compiled with no -m flags. The template's vector operations become plain C.
 */
#include <math.h>

#include "kern_internal.h"

#define KS_CAT2(a, b) a##b
#define KS_CAT(a, b)  KS_CAT2(a, b)
#define KS_LM(f)      KS_CAT(f, LSFX) /* the libm function for T: expf or exp */

#define VLD(p)        (*(p))
#define VST(p, v)     (*(p) = (v))
#define VLDN(p, n)    (*(p))
#define VSTN(p, v, n) (*(p) = (v))
#define VTAIL(n)      1
#define VSET(x)       ((T)(x))
#define VZERO         ((T)0)
#define VADD(a, b)    ((a) + (b))
#define VSUB(a, b)    ((a) - (b))
#define VMUL(a, b)    ((a) * (b))
#define VDIV(a, b)    ((a) / (b))
#define VNEG(x)       (-(x))
#define VMAXR(a, b)   ((a) > (b) ? (a) : (b))
#define VMINR(a, b)   ((a) < (b) ? (a) : (b))
#define VLT(a, b)     ((a) < (b))
#define VLE(a, b)     ((a) <= (b))
#define VGT(a, b)     ((a) > (b))
#define VGE(a, b)     ((a) >= (b))
#define VEQ(a, b)     ((a) == (b))
#define VNE(a, b)     ((a) != (b))
#define VUNORD(a, b)  ((a) != (a) || (b) != (b))
#define VSEL(m, t, f) ((m) ? (t) : (f))
#define MAND(a, b)    ((a) && (b))
#define MOR(a, b)     ((a) || (b))
#define MANY(m)       (m)
#define MZERO         0
#define VSQRT         KS_LM(sqrt)
#define VABS          KS_LM(fabs)
#define VEXP          KS_LM(exp)
#define VLOG          KS_LM(log)
#define VSIN          KS_LM(sin)
#define VCOS          KS_LM(cos)
#define VTANH         KS_LM(tanh)
#define VERF          KS_LM(erf)
#define VLOG1P        KS_LM(log1p)
#define VEXPM1        KS_LM(expm1)
#define VPOW          KS_LM(pow)
#define VLOG2         KS_LM(log2)
#define VLOG10        KS_LM(log10)
#define VEXP2         KS_LM(exp2)
#define VSINH         KS_LM(sinh)
#define VCOSH         KS_LM(cosh)
#define VTAN          KS_LM(tan)
#define VASIN         KS_LM(asin)
#define VACOS         KS_LM(acos)
#define VATAN         KS_LM(atan)
#define VASINH        KS_LM(asinh)
#define VACOSH        KS_LM(acosh)
#define VATANH        KS_LM(atanh)
#define VERFC         KS_LM(erfc)
#define VATAN2        KS_LM(atan2)
#define VHYPOT        KS_LM(hypot)
#define VFMOD         KS_LM(fmod)
#define VCOPYSIGN     KS_LM(copysign)
#define VFLOOR        KS_LM(floor)
#define VCEIL         KS_LM(ceil)
#define VTRUNC        KS_LM(trunc)
#define VRINT         KS_LM(nearbyint) /* half to even in the default rounding mode */

#define T          float
#define V          float
#define M          int
#define W          1
#define LSFX       f
#define KS_NAME(x) cai_kern_scalar_f32_##x
#include "kern_simd_body.inc"
#undef LSFX

#define T double
#define V double
#define M int
#define W 1
#define LSFX
#define KS_NAME(x) cai_kern_scalar_f64_##x
#include "kern_simd_body.inc"
#undef LSFX
