/* kern_gemm_sum_avx2.c - cai_kern_gemm_nt_sum_f32's loops on AVX2 with FMA. */
#include "kern_gemm_sum.h"

#include <immintrin.h>
#include <string.h>

#define GS_NAME         cai_gemm_sum_avx2
#define GS_V            __m256
#define GS_ZERO         _mm256_setzero_ps()
#define GS_ADD(a, b)    _mm256_add_ps(a, b)
#define GS_LOAD(p)      _mm256_loadu_ps(p)
#define GS_STORE(p, v)  _mm256_storeu_ps(p, v)
#define GS_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#include "kern_gemm_sum.inc"
