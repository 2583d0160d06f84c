/* kern_blas.h - the one place that names OpenBLAS's symbols.
 *
 * The scipy-openblas32 wheel (the OpenBLAS that NumPy and SciPy ship) prefixes every
 * symbol with scipy_, and its pkg-config flags say so: -DBLAS_SYMBOL_PREFIX=scipy_. Its
 * cblas.h declares the prefixed names; KERN_BLAS(cblas_sgemm) picks whichever this build
 * links. Included by the kernel files only.
 */
#ifndef CAGRAD_KERN_BLAS_H
#define CAGRAD_KERN_BLAS_H

#include <cblas.h>
#include <stdbool.h>
#include <stdint.h>

#include "kern.h"

#ifdef BLAS_SYMBOL_PREFIX
#define KERN_BLAS_CAT2(a, b) a##b
#define KERN_BLAS_CAT(a, b)  KERN_BLAS_CAT2(a, b)
#define KERN_BLAS(name)      KERN_BLAS_CAT(BLAS_SYMBOL_PREFIX, name)
#else
#define KERN_BLAS(name) name
/* OpenBLAS's own controls; not every system cblas.h declares them. */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char *openblas_get_config(void);
char *openblas_get_corename(void);
#endif

/* The GEMMs by plain names, which formatters and readers take for calls. */
#define kern_cblas_sgemm KERN_BLAS(cblas_sgemm)
#define kern_cblas_dgemm KERN_BLAS(cblas_dgemm)

/* Make OpenBLAS single-threaded and, where it can (0.3.27 and later), hand its threading
 * to cagrad's pool. Idempotent and thread-safe; every GEMM calls it first. */
void cai_kern_blas_init(void);

/* Whether a GEMM of this size should let OpenBLAS thread it through the callback (it
 * shares its packed panels across threads, which tiles cannot); false with an OpenBLAS
 * that has no callback. The sizes and the thread count decide, never the pool's state, so
 * the GEMM rounds the same way wherever it is called (cai_kern_gemm_blas_threaded). */
bool cai_kern_blas_threads_gemm(double mnk);

/* Around one cblas call that may thread: OpenBLAS's thread count is global, so it is raised
 * only under a lock and set back to one after the call. */
void cai_kern_blas_threaded_begin(void);
void cai_kern_blas_threaded_end(void);

/* One single-threaded row-major GEMM of dtype dt (float32 or float64):
 * C = A @ op(B) + beta * C, A M x K, op(B) = B^T when tb. The convolutions' GEMMs, each
 * an item of the pool whose size comes from the problem, not the thread count. */
void cai_kern_gemm1(kern_dtype dt, bool tb, int64_t M, int64_t N, int64_t K, const void *a,
                    int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc);

/* C += sum over i < nb of A_i @ B_i^T in float32 (kern_gemm_sum.c), for a small C and a
 * long inner dim L: A_i (M x L) at a + i * a_bs and B_i (N x L) at b + i * b_bs, rows lda
 * and ldb apart, their L elements contiguous. The same bits on every ISA. */
void cai_kern_gemm_nt_sum_f32(int64_t M, int64_t N, int64_t L, int64_t nb, const float *a,
                              int64_t lda, int64_t a_bs, const float *b, int64_t ldb, int64_t b_bs,
                              float *c, int64_t ldc);

#endif /* CAGRAD_KERN_BLAS_H */
