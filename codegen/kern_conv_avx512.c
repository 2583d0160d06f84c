/* kern_conv_avx512.c - im2col and col2im for narrow images, built with -mavx512f -mavx512dq
 * -mavx512vl -mavx512bw for CPUs that have it (kern_conv.c picks by cai_kern_isa()).
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

#define CONV_ROWS     4 /* vectors col2im sums at once: independent chains of adds */
#define CONV_MAX_VECS 2 /* vectors per row, at most */
/* Inlined where called with a constant vector count, so each count gets its own loop. */
#define CONV_INLINE inline __attribute__((always_inline))

/* The lanes [lo, hi) of a mask, 0 <= lo < hi <= 16. */
static inline uint32_t lanes(int64_t lo, int64_t hi) {
    return ((1u << hi) - 1u) & ~((1u << lo) - 1u);
}

/* p + k for a k that may point before p's row: the lanes there are masked off and never
 * read, but the address must still be formed without C's pointer arithmetic rules. */
static inline const void *shifted(const void *p, int64_t k, size_t es) {
    return (const void *)((uintptr_t)p + (uintptr_t)(k * (int64_t)es));
}

#define CONV_T        float
#define CONV_FN(name) name##_f32
#define CONV_VEC      __m512
#define CONV_MASK     __mmask16
#define CONV_LANES    16
#define CONV_LOADZ    _mm512_maskz_loadu_ps
#define CONV_STORE    _mm512_mask_storeu_ps
#define CONV_ADD      _mm512_add_ps
#define CONV_ZERO     _mm512_setzero_ps
#include "kern_conv_avx512.inc"
#undef CONV_T
#undef CONV_FN
#undef CONV_VEC
#undef CONV_MASK
#undef CONV_LANES
#undef CONV_LOADZ
#undef CONV_STORE
#undef CONV_ADD
#undef CONV_ZERO
#define CONV_T        double
#define CONV_FN(name) name##_f64
#define CONV_VEC      __m512d
#define CONV_MASK     __mmask8
#define CONV_LANES    8
#define CONV_LOADZ    _mm512_maskz_loadu_pd
#define CONV_STORE    _mm512_mask_storeu_pd
#define CONV_ADD      _mm512_add_pd
#define CONV_ZERO     _mm512_setzero_pd
#include "kern_conv_avx512.inc"
