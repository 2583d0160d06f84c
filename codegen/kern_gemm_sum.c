/* kern_gemm_sum.c - C += sum over a batch of A_i B_i^T in float32, for GEMMs with a small
 * C and a long inner dim: a convolution's weight gradient, dW[o, tap] summed over each
 * image's output positions, where few channels (LeNet's first layer: 6 x 25 over 784
 * positions) leave OpenBLAS's register blocks mostly empty (21 GFLOP/s on a Zen 3 core that
 * peaks at 100). Here 4 rows of A by 3 rows of B run at once, 8 lanes wide along the inner
 * dim, each of the 12 sums in a vector register, and the batch loop is inside, so C is
 * written once per block.
 *
 * Every build (baseline here, AVX2 in kern_gemm_sum_avx2.c; an AVX-512 CPU takes AVX2's)
 * sums each lane in the same order with one rounding per term, and the lanes are added
 * here in one fixed order: the same bits on every CPU and at every thread count. The
 * baseline's fmaf is a libm call, some 40x slower than AVX2's loop: it is there for CPUs
 * without AVX2 (none since 2015) and for tests that compare the ISAs.
 */
#include "kern_blas.h"
#include "kern_gemm_sum.h"
#include "kern_internal.h"

#include <math.h>
#include <string.h>

typedef struct {
    float l[8];
} gs_v8;

static inline gs_v8 gs_load(const float *p) {
    gs_v8 v;
    memcpy(v.l, p, sizeof v.l);
    return v;
}

static inline void gs_store(float *p, gs_v8 v) {
    memcpy(p, v.l, sizeof v.l);
}

static inline gs_v8 gs_add(gs_v8 a, gs_v8 b) {
    for (int j = 0; j < 8; j++)
        a.l[j] += b.l[j];
    return a;
}

static inline gs_v8 gs_fma(gs_v8 a, gs_v8 b, gs_v8 c) {
    for (int j = 0; j < 8; j++)
        c.l[j] = fmaf(a.l[j], b.l[j], c.l[j]);
    return c;
}

#define GS_NAME         cai_gemm_sum_scalar
#define GS_V            gs_v8
#define GS_ZERO         ((gs_v8){{0}})
#define GS_ADD(a, b)    gs_add(a, b)
#define GS_LOAD(p)      gs_load(p)
#define GS_STORE(p, v)  gs_store(p, v)
#define GS_FMA(a, b, c) gs_fma(a, b, c)
#include "kern_gemm_sum.inc"

void cai_kern_gemm_nt_sum_f32(int64_t M, int64_t N, int64_t L, int64_t nb, const float *a,
                              int64_t lda, int64_t a_bs, const float *b, int64_t ldb, int64_t b_bs,
                              float *c, int64_t ldc) {
    (cai_kern_isa() >= KERN_ISA_AVX2 ? cai_gemm_sum_avx2 : cai_gemm_sum_scalar)(
        M, N, L, nb, a, lda, a_bs, b, ldb, b_bs, c, ldc);
}
