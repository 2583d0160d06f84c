/* kern_norm.c - batch normalization's training-mode forward: per-channel statistics of a
 * [N, C, inner] array and the affine map they give.
 *
 * One channel is one unit of work: its N runs of `inner` contiguous values are summed
 * twice (the mean, then the squares about it) and mapped once. Long runs go through the
 * ISA table's reduction leaves and pointwise kernels; short runs (inner below a vector or
 * two, as a [N, C] input's runs of one) through a plain loop, where a call per run would
 * cost more than the run.
 */
#include "kern_internal.h"

#include <math.h>

/* Runs shorter than this take the plain loop. */
#define BN_SHORT_RUN 16

typedef struct {
    const kern_simd *simd;
    kern_dtype dt;
    size_t esz;
    int64_t N, C, inner;
    const char *x, *w, *b;
    char *y, *mean, *invstd, *var;
    double eps;
} bn_job;

/* Sum of run[i] (KRM_SUM) or of (run[i] - m)^2 (KRM_SUMSQ) over n contiguous values: the
 * ISA's leaves, each widened to double, or a plain double loop for a short run. */
static double bn_run_sum(const bn_job *j, const char *run, int64_t n, kern_red_mode mode,
                         double m) {
    double acc = 0;
    if (n < BN_SHORT_RUN) {
        for (int64_t i = 0; i < n; i++) {
            double v = kern_load(j->dt, run, i);
            acc += mode == KRM_SUMSQ ? (v - m) * (v - m) : v;
        }
        return acc;
    }
    int64_t leaf = j->simd->leaf;
    for (int64_t i = 0; i < n; i += leaf) {
        int64_t k = n - i < leaf ? n - i : leaf;
        acc += j->simd->acc(k, run + (size_t)i * j->esz, mode, m);
    }
    return acc;
}

/* out[i] = run[i] * alpha + beta over n contiguous values. */
static void bn_run_affine(const bn_job *j, const char *run, char *out, int64_t n, double alpha,
                          double beta) {
    if (n < BN_SHORT_RUN) {
        for (int64_t i = 0; i < n; i++)
            kern_store(j->dt, out, i, kern_load(j->dt, run, i) * alpha + beta);
        return;
    }
    j->simd->pw[KPW_MUL_S](n, out, run, NULL, NULL, alpha, 0);
    j->simd->pw[KPW_ADD_S](n, out, out, NULL, NULL, beta, 0);
}

/* Byte offset of run (n, c). */
static size_t bn_run_at(const bn_job *j, int64_t n, int64_t c) {
    return (size_t)((n * j->C + c) * j->inner) * j->esz;
}

static void bn_channel(const bn_job *j, int64_t c) {
    double count = (double)(j->N * j->inner), sum = 0, sq = 0;
    for (int64_t n = 0; n < j->N; n++)
        sum += bn_run_sum(j, j->x + bn_run_at(j, n, c), j->inner, KRM_SUM, 0);
    double mean = sum / count; /* NaN over no values */
    /* two passes: squares about the mean, not E[x^2] - mean^2, which cancels */
    for (int64_t n = 0; n < j->N; n++)
        sq += bn_run_sum(j, j->x + bn_run_at(j, n, c), j->inner, KRM_SUMSQ, mean);
    double var = sq / count, invstd = 1.0 / sqrt(var + j->eps);
    double alpha = invstd * (j->w ? kern_load(j->dt, j->w, c) : 1.0);
    double beta = (j->b ? kern_load(j->dt, j->b, c) : 0.0) - mean * alpha;
    for (int64_t n = 0; n < j->N; n++)
        bn_run_affine(j, j->x + bn_run_at(j, n, c), j->y + bn_run_at(j, n, c), j->inner, alpha,
                      beta);
    kern_store(j->dt, j->mean, c, mean);
    kern_store(j->dt, j->invstd, c, invstd);
    kern_store(j->dt, j->var, c, var);
}

static void bn_range(void *ctx, int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; c++)
        bn_channel(ctx, c);
}

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
    int64_t per_channel = N * inner;
    cai_kern_parallel_for(C, per_channel >= KERN_GRAIN ? 1 : KERN_GRAIN / (per_channel + 1) + 1,
                          bn_range, &j);
    return 0;
}
