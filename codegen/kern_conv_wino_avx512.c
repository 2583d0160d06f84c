/* kern_conv_wino_avx512.c - Winograd F(2x2, 3x3)'s transforms (kern_conv_wino.inc) built
 * with -mavx512f -mavx512dq -mavx512vl -mavx512bw, for CPUs that have it (kern_conv_wino.c picks by
 * cai_kern_isa()). Baseline x86-64 vectorises their sweeps 2 floats wide at best.
 */
#if !defined(__AVX512F__)
// cppcheck-suppress preprocessorErrorDirective ; lint runs without the per-file -m flags
#error "kern_conv_wino_avx512.c must be compiled with -mavx512f -mavx512dq -mavx512vl -mavx512bw"
#endif

#include "kern_conv_wino.h"

#define WINO_XF_NAME cai_wino_xf_avx512
#include "kern_conv_wino_xf.inc"
