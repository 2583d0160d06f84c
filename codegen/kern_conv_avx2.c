/* kern_conv_avx2.c - im2col and col2im for narrow images (kern_conv_vec.inc), built with
 * -mavx2 -mfma for CPUs that have AVX2 but not AVX-512 (kern_conv.c picks by
 * cai_kern_isa()). The loops are kern_conv_avx512.c's, at half the lanes and up to four
 * vectors a row, so the same images (rows of up to 32 floats or 16 doubles) take them. AVX2
 * has masked loads and stores (vmaskmov) but no mask registers: a mask is a vector whose
 * lanes are all ones or all zeros, made by comparing the lane numbers with the range's
 * ends. A masked-off lane reads as +0 and touches no memory, as AVX-512's do.
 *
 * A masked store (vmaskmovps) is slow on AMD's cores, and im2col stores every row it moves:
 * with a masked store per vector it ran at 0.3-0.8x the baseline's speed on a Zen 3. So
 * im2col stores whole vectors (CONV_SPILL), running past a row's end into the next row of
 * the same tap, which is written after it, and masks only where a vector would leave the
 * tap's block. On that Zen 3, 1 thread, baseline -> AVX2: im2col [32, 6, 14, 14] 5x5
 * 247 -> 181 µs, [32, 3, 32, 32] 5x5 455-470 -> 402 µs; col2im 301 -> 196 µs and 1030 ->
 * 495 µs; [32, 1, 28, 28] 5x5 padding 2 col2im 308 -> 147 µs.
 */
#if !defined(__AVX2__)
// cppcheck-suppress preprocessorErrorDirective ; lint runs without the per-file -m flags
#error "kern_conv_avx2.c must be compiled with -mavx2 -mfma"
#endif

#include "kern_conv_rows.h"

#include <immintrin.h>
#include <stdint.h>

#define CONV_MAX_VECS 4 /* vectors per row, at most */
#define CONV_SPILL    1

/* The 32-bit lanes [lo, hi) of a mask, 0 <= lo < hi <= 8. */
static inline __m256i lanes32(int64_t lo, int64_t hi) {
    __m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_si256(_mm256_cmpgt_epi32(i, _mm256_set1_epi32((int)lo - 1)),
                            _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), i));
}

/* The 64-bit lanes [lo, hi) of a mask, 0 <= lo < hi <= 4. */
static inline __m256i lanes64(int64_t lo, int64_t hi) {
    __m256i i = _mm256_setr_epi64x(0, 1, 2, 3);
    return _mm256_and_si256(_mm256_cmpgt_epi64(i, _mm256_set1_epi64x(lo - 1)),
                            _mm256_cmpgt_epi64(_mm256_set1_epi64x(hi), i));
}

#define CONV_MASK  __m256i
#define CONV_MAND  _mm256_and_si256
#define CONV_MALL  _mm256_set1_epi32(-1)
#define CONV_MNONE _mm256_setzero_si256()

#define CONV_T              float
#define CONV_FN(name)       name##_avx2_f32
#define CONV_VEC            __m256
#define CONV_LANES          8
#define CONV_LOADZ(m, p)    _mm256_maskload_ps((const float *)(p), m)
#define CONV_STORE(p, m, v) _mm256_maskstore_ps((float *)(p), m, v)
#define CONV_STOREU(p, v)   _mm256_storeu_ps((float *)(p), v)
#define CONV_ADD            _mm256_add_ps
#define CONV_ZERO           _mm256_setzero_ps
#define CONV_RANGE          lanes32
#include "kern_conv_vec.inc"
#define CONV_T              double
#define CONV_FN(name)       name##_avx2_f64
#define CONV_VEC            __m256d
#define CONV_LANES          4
#define CONV_LOADZ(m, p)    _mm256_maskload_pd((const double *)(p), m)
#define CONV_STORE(p, m, v) _mm256_maskstore_pd((double *)(p), m, v)
#define CONV_STOREU(p, v)   _mm256_storeu_pd((double *)(p), v)
#define CONV_ADD            _mm256_add_pd
#define CONV_ZERO           _mm256_setzero_pd
#define CONV_RANGE          lanes64
#include "kern_conv_vec.inc"
