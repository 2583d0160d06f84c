/* kern_conv_wino_avx2.c - Winograd F(2x2, 3x3)'s transforms (kern_conv_wino.inc) built
 * with -mavx2 -mfma, for CPUs that have it (kern_conv_wino.c picks by cai_kern_isa()).
 * Baseline x86-64 vectorises their sweeps 2 floats wide at best.
 */
#if !defined(__AVX2__)
// cppcheck-suppress preprocessorErrorDirective ; lint runs without the per-file -m flags
#error "kern_conv_wino_avx2.c must be compiled with -mavx2 -mfma"
#endif

#include "kern_conv_wino.h"

/* GCC: vectorise the transforms' short sweeps (the dynamic cost model; -O2's cheap one
 * leaves them scalar) and keep their short copies and fills as loops rather than a libc
 * call per image row: 15% of the convolution's time (kern_conv_wino.h). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic", "no-tree-loop-distribute-patterns")
#endif
#define WT        float
#define WFN(name) name##_f32
#include "kern_conv_wino.inc"
#undef WT
#undef WFN
#define WT        double
#define WFN(name) name##_f64
#include "kern_conv_wino.inc"
#undef WT
#undef WFN

const wino_xf cai_wino_xf_avx2[2] = {WINO_XF_ROW(f32), WINO_XF_ROW(f64)};
