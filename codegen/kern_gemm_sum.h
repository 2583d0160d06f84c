/* kern_gemm_sum.h - the per-ISA builds of cai_kern_gemm_nt_sum_f32 (kern_blas.h), which
 * give the same bits: lane j of each item's sum takes the terms A_i[m, l] * B_i[n, l] with
 * l % 8 == j, one FMA each in order of l; the items' lanes are added in order of i, and the
 * 8 lanes in one fixed order. */
#ifndef CAGRAD_KERN_GEMM_SUM_H
#define CAGRAD_KERN_GEMM_SUM_H

#include <stdint.h>

#define GS_MR 4  /* rows of A per block: 4 x 3 accumulators, 3 + 1 operands in 16 registers */
#define GS_NR 3  /* rows of B per block */
#define GS_NC 96 /* columns of C per chunk: its sums, GS_MR x GS_NC x 8 floats, on the stack */
/* A chunk's last block writes its dropped columns' sums into the chunk's unused slots */
_Static_assert(GS_NC % GS_NR == 0, "GS_NC must be a multiple of GS_NR");
#define GS_CAT2(a, b) a##b
#define GS_CAT(a, b)  GS_CAT2(a, b)

void cai_gemm_sum_scalar(int64_t M, int64_t N, int64_t L, int64_t nb, const float *a, int64_t lda,
                         int64_t a_bs, const float *b, int64_t ldb, int64_t b_bs, float *c,
                         int64_t ldc);
void cai_gemm_sum_avx2(int64_t M, int64_t N, int64_t L, int64_t nb, const float *a, int64_t lda,
                       int64_t a_bs, const float *b, int64_t ldb, int64_t b_bs, float *c,
                       int64_t ldc);

#endif /* CAGRAD_KERN_GEMM_SUM_H */
