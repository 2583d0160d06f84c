/* kern_rows.c - softmax, log_softmax and layer_norm over the rows of a [rows, n] array.
 *
 * The per-row math lives in the ISA tables (kern_simd_body.inc); this file only spreads
 * whole rows over the pool, so a row's result never depends on the thread count.
 */
#include "kern_internal.h"

typedef struct {
    const kern_simd *simd;
    int64_t n;
    size_t esz;
    const char *x, *w, *b;
    char *y, *mean, *rstd;
    double eps;
    bool log;
} kern_rows_job;

static int64_t kern_rows_grain(int64_t n) {
    return n >= KERN_GRAIN ? 1 : KERN_GRAIN / n;
}

static void kern_softmax_range(void *ctx, int64_t begin, int64_t end) {
    const kern_rows_job *j = ctx;
    size_t row = (size_t)j->n * j->esz;
    for (int64_t r = begin; r < end; r++)
        j->simd->softmax_row(j->n, j->x + (size_t)r * row, j->y + (size_t)r * row, j->log);
}

int cai_kern_softmax(kern_dtype dt, int64_t rows, int64_t n, const void *x, void *y, bool log) {
    const kern_simd *simd = cai_kern_simd_for(dt);
    if (!simd || rows < 0 || n < 0)
        return -1;
    if (rows == 0 || n == 0)
        return 0;
    kern_rows_job j = {
        .simd = simd, .n = n, .esz = cai_kern_dtype_size(dt), .x = x, .y = y, .log = log};
    cai_kern_parallel_for(rows, kern_rows_grain(n), kern_softmax_range, &j);
    return 0;
}

static void kern_layer_norm_range(void *ctx, int64_t begin, int64_t end) {
    const kern_rows_job *j = ctx;
    size_t row = (size_t)j->n * j->esz;
    for (int64_t r = begin; r < end; r++)
        j->simd->layer_norm_row(j->n, j->x + (size_t)r * row, j->w, j->b, j->eps,
                                j->y + (size_t)r * row,
                                j->mean ? j->mean + (size_t)r * j->esz : NULL,
                                j->rstd ? j->rstd + (size_t)r * j->esz : NULL);
}

int cai_kern_layer_norm(kern_dtype dt, int64_t rows, int64_t n, const void *x, const void *w,
                        const void *b, double eps, void *y, void *mean, void *rstd) {
    const kern_simd *simd = cai_kern_simd_for(dt);
    if (!simd || rows < 0 || n < 0)
        return -1;
    if (rows == 0)
        return 0;
    kern_rows_job j = {.simd = simd,
                       .n = n,
                       .esz = cai_kern_dtype_size(dt),
                       .x = x,
                       .w = w,
                       .b = b,
                       .y = y,
                       .mean = mean,
                       .rstd = rstd,
                       .eps = eps};
    cai_kern_parallel_for(rows, kern_rows_grain(n > 0 ? n : 1), kern_layer_norm_range, &j);
    return 0;
}
