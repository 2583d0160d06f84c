/* kern_norm.c - batch normalization's training-mode forward: per-channel statistics of a
 * [N, C, inner] array and the affine map they give.
 *
 * Each channel gets its mean, then its sum of squares about that mean (two passes: no
 * cancellation), in double, then y = x * alpha + beta. Two layouts of the work:
 *  - long runs (inner >= BN_SHORT_RUN): one channel per unit of work; its N runs go
 *    through the ISA table's reduction leaves and pointwise kernels;
 *  - short runs (a [N, C] input's runs of one): a call per run would cost more than the
 *    run, and a channel's values lie a row apart, so a block of channels is swept row by
 *    row, reading memory in order, with one accumulator per channel.
 * A channel's result never depends on the thread count.
 */
#include "kern_internal.h"

#include <math.h>

#define BN_SHORT_RUN 16 /* runs shorter than this take the block sweep */
#define BN_BLOCK     64 /* channels per unit of the block sweep */

typedef struct {
    const kern_simd *simd;
    kern_dtype dt;
    size_t esz;
    int64_t N, C, inner;
    const char *x, *w, *b;
    char *y, *mean, *invstd, *var;
    double eps;
} bn_job;

/* From channel c's sums: its statistics stored, and its (alpha, beta). */
static void bn_finish(const bn_job *j, int64_t c, double mean, double sq, double *alpha,
                      double *beta) {
    double var = sq / (double)(j->N * j->inner), invstd = 1.0 / sqrt(var + j->eps);
    *alpha = invstd * (j->w ? kern_load(j->dt, j->w, c) : 1.0);
    *beta = (j->b ? kern_load(j->dt, j->b, c) : 0.0) - mean * *alpha;
    kern_store(j->dt, j->mean, c, mean);
    kern_store(j->dt, j->invstd, c, invstd);
    kern_store(j->dt, j->var, c, var);
}

/* ---------------------------------------------------------------------------------------
 * Long runs: one channel at a time
 */

/* Sum of run[i] (KRM_SUM) or of (run[i] - m)^2 (KRM_SUMSQ) over n contiguous values, as
 * the ISA's leaves, each widened to double. */
static double bn_run_sum(const bn_job *j, const char *run, int64_t n, kern_red_mode mode,
                         double m) {
    double acc = 0;
    int64_t leaf = j->simd->leaf;
    for (int64_t i = 0; i < n; i += leaf) {
        int64_t k = n - i < leaf ? n - i : leaf;
        acc += j->simd->acc(k, run + (size_t)i * j->esz, mode, m);
    }
    return acc;
}

/* Byte offset of run (n, c). */
static size_t bn_run_at(const bn_job *j, int64_t n, int64_t c) {
    return (size_t)((n * j->C + c) * j->inner) * j->esz;
}

static void bn_channel(const bn_job *j, int64_t c) {
    double sum = 0, sq = 0, alpha, beta;
    for (int64_t n = 0; n < j->N; n++)
        sum += bn_run_sum(j, j->x + bn_run_at(j, n, c), j->inner, KRM_SUM, 0);
    double mean = sum / (double)(j->N * j->inner); /* NaN over no values */
    for (int64_t n = 0; n < j->N; n++)
        sq += bn_run_sum(j, j->x + bn_run_at(j, n, c), j->inner, KRM_SUMSQ, mean);
    bn_finish(j, c, mean, sq, &alpha, &beta);
    for (int64_t n = 0; n < j->N; n++) {
        const char *in = j->x + bn_run_at(j, n, c);
        char *out = j->y + bn_run_at(j, n, c);
        j->simd->pw[KPW_MUL_S](j->inner, out, in, NULL, NULL, alpha, 0);
        j->simd->pw[KPW_ADD_S](j->inner, out, out, NULL, NULL, beta, 0);
    }
}

static void bn_channel_range(void *ctx, int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; c++)
        bn_channel(ctx, c);
}

/* ---------------------------------------------------------------------------------------
 * Short runs: a block of channels [c0, c0 + nc), row by row. Per channel k of the block:
 * acc[k] is its sum, then its sum of squares; mean[k], alpha[k], beta[k] as they come.
 */
typedef struct {
    double acc[BN_BLOCK], mean[BN_BLOCK], alpha[BN_BLOCK], beta[BN_BLOCK];
} bn_block_state;

/* The element types, named for the macros below: bn_f32, bn_f64. */
typedef float bn_f32;
typedef double bn_f64;

/* One row's run of nc channels of one value each (inner == 1, a [N, C] input): loops in
 * fixed chunks of 8 over restrict pointers, which the compiler vectorizes at -O2. */
#define BN_DEFINE_UNIT_ROWS(SUFFIX)                                                                \
    static void bn_row_sums_##SUFFIX(const bn_##SUFFIX *restrict x, int64_t nc,                    \
                                     double *restrict acc) {                                       \
        int64_t k = 0;                                                                             \
        for (; k + 8 <= nc; k += 8)                                                                \
            for (int u = 0; u < 8; u++)                                                            \
                acc[k + u] += x[k + u];                                                            \
        for (; k < nc; k++)                                                                        \
            acc[k] += x[k];                                                                        \
    }                                                                                              \
    static void bn_row_squares_##SUFFIX(const bn_##SUFFIX *restrict x, int64_t nc,                 \
                                        const double *restrict mean, double *restrict acc) {       \
        int64_t k = 0;                                                                             \
        for (; k + 8 <= nc; k += 8)                                                                \
            for (int u = 0; u < 8; u++) {                                                          \
                double d = x[k + u] - mean[k + u];                                                 \
                acc[k + u] += d * d;                                                               \
            }                                                                                      \
        for (; k < nc; k++)                                                                        \
            acc[k] += (x[k] - mean[k]) * (x[k] - mean[k]);                                         \
    }                                                                                              \
    static void bn_row_affine_##SUFFIX(const bn_##SUFFIX *restrict x, int64_t nc,                  \
                                       const double *restrict alpha, const double *restrict beta,  \
                                       bn_##SUFFIX *restrict y) {                                  \
        int64_t k = 0;                                                                             \
        for (; k + 8 <= nc; k += 8)                                                                \
            for (int u = 0; u < 8; u++)                                                            \
                y[k + u] = (bn_##SUFFIX)(x[k + u] * alpha[k + u] + beta[k + u]);                   \
        for (; k < nc; k++)                                                                        \
            y[k] = (bn_##SUFFIX)(x[k] * alpha[k] + beta[k]);                                       \
    }

/* The three sweeps of a block of element type bn_<SUFFIX>: sums, squares about the mean, y.
 * Each reads row n's run of nc * inner values in order. */
#define BN_DEFINE_SWEEPS(SUFFIX)                                                                   \
    static void bn_sums_##SUFFIX(const bn_job *j, int64_t c0, int64_t nc, bn_block_state *s) {     \
        int64_t inner = j->inner, row = j->C * inner;                                              \
        for (int64_t n = 0; n < j->N; n++) {                                                       \
            const bn_##SUFFIX *x = (const bn_##SUFFIX *)(const void *)j->x + n * row + c0 * inner; \
            if (inner == 1) {                                                                      \
                bn_row_sums_##SUFFIX(x, nc, s->acc);                                               \
                continue;                                                                          \
            }                                                                                      \
            for (int64_t k = 0; k < nc; k++) {                                                     \
                double a = 0;                                                                      \
                for (int64_t i = 0; i < inner; i++)                                                \
                    a += x[k * inner + i];                                                         \
                s->acc[k] += a;                                                                    \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void bn_squares_##SUFFIX(const bn_job *j, int64_t c0, int64_t nc, bn_block_state *s) {  \
        int64_t inner = j->inner, row = j->C * inner;                                              \
        for (int64_t n = 0; n < j->N; n++) {                                                       \
            const bn_##SUFFIX *x = (const bn_##SUFFIX *)(const void *)j->x + n * row + c0 * inner; \
            if (inner == 1) {                                                                      \
                bn_row_squares_##SUFFIX(x, nc, s->mean, s->acc);                                   \
                continue;                                                                          \
            }                                                                                      \
            for (int64_t k = 0; k < nc; k++) {                                                     \
                double a = 0, m = s->mean[k];                                                      \
                for (int64_t i = 0; i < inner; i++)                                                \
                    a += (x[k * inner + i] - m) * (x[k * inner + i] - m);                          \
                s->acc[k] += a;                                                                    \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void bn_affine_##SUFFIX(const bn_job *j, int64_t c0, int64_t nc,                        \
                                   const bn_block_state *s) {                                      \
        int64_t inner = j->inner, row = j->C * inner;                                              \
        for (int64_t n = 0; n < j->N; n++) {                                                       \
            const bn_##SUFFIX *x = (const bn_##SUFFIX *)(const void *)j->x + n * row + c0 * inner; \
            bn_##SUFFIX *y = (bn_##SUFFIX *)(void *)j->y + n * row + c0 * inner;                   \
            if (inner == 1) {                                                                      \
                bn_row_affine_##SUFFIX(x, nc, s->alpha, s->beta, y);                               \
                continue;                                                                          \
            }                                                                                      \
            for (int64_t k = 0; k < nc; k++)                                                       \
                for (int64_t i = 0; i < inner; i++)                                                \
                    y[k * inner + i] = (bn_##SUFFIX)(x[k * inner + i] * s->alpha[k] + s->beta[k]); \
        }                                                                                          \
    }
BN_DEFINE_UNIT_ROWS(f32)
BN_DEFINE_UNIT_ROWS(f64)
BN_DEFINE_SWEEPS(f32)
BN_DEFINE_SWEEPS(f64)
#undef BN_DEFINE_UNIT_ROWS
#undef BN_DEFINE_SWEEPS

static void bn_block(const bn_job *j, int64_t c0, int64_t nc) {
    bool f32 = j->dt == KERN_F32;
    bn_block_state s;
    memset(&s, 0, sizeof s);
    (f32 ? bn_sums_f32 : bn_sums_f64)(j, c0, nc, &s);
    for (int64_t k = 0; k < nc; k++) {
        s.mean[k] = s.acc[k] / (double)(j->N * j->inner);
        s.acc[k] = 0;
    }
    (f32 ? bn_squares_f32 : bn_squares_f64)(j, c0, nc, &s);
    for (int64_t k = 0; k < nc; k++)
        bn_finish(j, c0 + k, s.mean[k], s.acc[k], &s.alpha[k], &s.beta[k]);
    (f32 ? bn_affine_f32 : bn_affine_f64)(j, c0, nc, &s);
}

static void bn_block_range(void *ctx, int64_t begin, int64_t end) {
    const bn_job *j = ctx;
    for (int64_t b = begin; b < end; b++) {
        int64_t c0 = b * BN_BLOCK;
        bn_block(j, c0, j->C - c0 < BN_BLOCK ? j->C - c0 : BN_BLOCK);
    }
}

/* ---------------------------------------------------------------------------------------
 * Entry
 */
int cai_kern_batch_norm(kern_dtype dt, int64_t N, int64_t C, int64_t inner, const void *x,
                        const void *w, const void *b, double eps, void *y, void *mean, void *invstd,
                        void *var) {
    const kern_simd *simd = cai_kern_simd_for(dt);
    if (!simd || N < 0 || C < 0 || inner < 0)
        return -1;
    bn_job j = {.simd = simd,
                .dt = dt,
                .esz = cai_kern_dtype_size(dt),
                .N = N,
                .C = C,
                .inner = inner,
                .x = x,
                .w = w,
                .b = b,
                .y = y,
                .mean = mean,
                .invstd = invstd,
                .var = var,
                .eps = eps};
    bool long_runs = inner >= BN_SHORT_RUN;
    int64_t per_unit = N * inner * (long_runs ? 1 : BN_BLOCK) + 1;
    int64_t grain = per_unit >= KERN_GRAIN ? 1 : KERN_GRAIN / per_unit + 1;
    if (long_runs)
        cai_kern_parallel_for(C, grain, bn_channel_range, &j);
    else
        cai_kern_parallel_for((C + BN_BLOCK - 1) / BN_BLOCK, grain, bn_block_range, &j);
    return 0;
}
