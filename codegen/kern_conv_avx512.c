/* kern_conv_avx512.c - im2col and col2im for narrow images (kern_conv_vec.inc), built with
 * -mavx512f -mavx512dq -mavx512vl -mavx512bw for CPUs that have it (kern_conv.c picks by
 * cai_kern_isa()).
 *
 * A small image's rows (LeNet's second convolution: 14 wide in, 10 out) are shorter than a
 * vector. The baseline loops copy (im2col) or add (col2im) them a few entries at a time,
 * and col2im's adds of one tap's row onto the next tap's, one column over, wait on each
 * other's stores. Here a row of up to two vectors (a 28- or 32-pixel image's, in floats)
 * is one masked load and one masked store per vector: the mask keeps the lanes that read
 * padding at zero and the lanes past the row untouched, and lets a load start before its
 * row (the lanes there are never read). col2im keeps four vectors of image rows in
 * registers (four rows of one vector or two of two) and adds every tap's contribution to
 * them in the baseline's (ki, kj) order, with a masked-off lane adding +0, which leaves a
 * sum that starts at +0 unchanged: the same bits as the baseline.
 */
#if !defined(__AVX512F__)
// cppcheck-suppress preprocessorErrorDirective ; lint runs without the per-file -m flags
#error "kern_conv_avx512.c must be compiled with -mavx512f -mavx512dq -mavx512vl -mavx512bw"
#endif

#include "kern_conv_rows.h"

#include <immintrin.h>
#include <stdint.h>

#define CONV_MAX_VECS 2 /* vectors per row, at most */
#define CONV_SPILL    0 /* masked stores are as fast as whole ones */

/* The lanes [lo, hi) of a mask, 0 <= lo < hi <= 16. */
static inline uint32_t lanes(int64_t lo, int64_t hi) {
    return ((1u << hi) - 1u) & ~((1u << lo) - 1u);
}

#define CONV_MAND(a, b) ((a) & (b))

#define CONV_T           float
#define CONV_FN(name)    name##_avx512_f32
#define CONV_VEC         __m512
#define CONV_MASK        __mmask16
#define CONV_LANES       16
#define CONV_LOADZ       _mm512_maskz_loadu_ps
#define CONV_STORE       _mm512_mask_storeu_ps
#define CONV_STOREU      _mm512_storeu_ps
#define CONV_ADD         _mm512_add_ps
#define CONV_ZERO        _mm512_setzero_ps
#define CONV_RANGE(l, h) ((__mmask16)lanes(l, h))
#define CONV_MALL        ((__mmask16)0xffffu)
#define CONV_MNONE       ((__mmask16)0)
#include "kern_conv_vec.inc"
#undef CONV_MASK
#undef CONV_MALL
#undef CONV_MNONE
#define CONV_T           double
#define CONV_FN(name)    name##_avx512_f64
#define CONV_VEC         __m512d
#define CONV_MASK        __mmask8
#define CONV_LANES       8
#define CONV_LOADZ       _mm512_maskz_loadu_pd
#define CONV_STORE       _mm512_mask_storeu_pd
#define CONV_STOREU      _mm512_storeu_pd
#define CONV_ADD         _mm512_add_pd
#define CONV_ZERO        _mm512_setzero_pd
#define CONV_RANGE(l, h) ((__mmask8)lanes(l, h))
#define CONV_MALL        ((__mmask8)0xffu)
#define CONV_MNONE       ((__mmask8)0)
#include "kern_conv_vec.inc"
