/* kern_order.c - kernels whose result depends on element positions or order: the
 * triangle masks of tril and triu, running sums (cumsum), and sorting (sort, topk).
 *
 * Each works on contiguous data seen as [outer, n, inner] around one dim (or [batch, rows,
 * cols] for the triangles) and splits independent lines over the thread pool. Within a
 * line the order of work is fixed, so results are the same bits at every thread count.
 */
#include <math.h>
#include <string.h>

#include "kern_internal.h"

#define KERN_SCAN_CHUNK 256 /* inner elements per work unit of cumsum */

/* ---------------------------------------------------------------------------------------
 * tril / triu: keep the elements on one side of a diagonal, zero the others
 */
typedef struct {
    size_t es;
    int64_t rows, cols, diag;
    bool upper;
    const char *x;
    char *out;
} kern_tri_job;

/* The kept columns [lo, hi) of row i: j - i <= diag (tril) or j - i >= diag (triu). */
static void kern_tri_kept(const kern_tri_job *j, int64_t i, int64_t *lo, int64_t *hi) {
    int64_t edge = i + j->diag;
    if (j->upper) {
        *lo = edge < 0 ? 0 : edge > j->cols ? j->cols : edge;
        *hi = j->cols;
    } else {
        *lo = 0;
        *hi = edge + 1 < 0 ? 0 : edge + 1 > j->cols ? j->cols : edge + 1;
    }
}

static void kern_tri_rows(void *ctx, int64_t begin, int64_t end) {
    const kern_tri_job *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        int64_t lo, hi;
        kern_tri_kept(j, r % j->rows, &lo, &hi);
        const char *src = j->x + (size_t)(r * j->cols) * j->es;
        char *dst = j->out + (size_t)(r * j->cols) * j->es;
        if (dst != src && hi > lo)
            memcpy(dst + (size_t)lo * j->es, src + (size_t)lo * j->es, (size_t)(hi - lo) * j->es);
        memset(dst, 0, (size_t)lo * j->es);
        memset(dst + (size_t)hi * j->es, 0, (size_t)(j->cols - hi) * j->es);
    }
}

int cai_kern_tri(kern_dtype dt, int64_t batch, int64_t rows, int64_t cols, int64_t diag, bool upper,
                 const void *x, void *out) {
    if (batch < 0 || rows < 0 || cols < 0)
        return -1;
    kern_tri_job j = {cai_kern_dtype_size(dt), rows, cols, diag, upper, x, out};
    int64_t n_rows = batch * rows;
    cai_kern_parallel_for(n_rows, cols >= KERN_GRAIN ? 1 : KERN_GRAIN / (cols > 0 ? cols : 1),
                          kern_tri_rows, &j);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * cumsum: running sums along n, forward or from the end. Floats accumulate in double and
 * store each partial sum rounded, as PyTorch's CPU kernel does; int64 wraps.
 */
typedef struct {
    kern_dtype dt;
    int64_t n, inner, n_chunks;
    bool reverse;
    const void *x;
    void *out;
} kern_scan_job;

/* One line or block of lines: acc[i] += x, y = acc, for every step along n. T is the
 * element type, A the accumulator's (double for floats, as PyTorch; wrapping uint64_t for
 * int64). */
#define KERN_SCAN_BODY(T, A)                                                                       \
    do {                                                                                           \
        typedef T elem_t;                                                                          \
        typedef A acc_t;                                                                           \
        const elem_t *x = (const elem_t *)j->x;                                                    \
        elem_t *y = (elem_t *)j->out;                                                              \
        acc_t acc[KERN_SCAN_CHUNK];                                                                \
        for (int64_t i = 0; i < w; i++)                                                            \
            acc[i] = 0;                                                                            \
        for (int64_t s = 0; s < j->n; s++) {                                                       \
            int64_t k = j->reverse ? j->n - 1 - s : s;                                             \
            int64_t base = (o * j->n + k) * j->inner + i0;                                         \
            for (int64_t i = 0; i < w; i++) {                                                      \
                acc[i] += (acc_t)x[base + i];                                                      \
                y[base + i] = (elem_t)acc[i];                                                      \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* The same for contiguous lines (inner == 1): one accumulator, unit stride. */
#define KERN_SCAN_LINE(T, A)                                                                       \
    do {                                                                                           \
        typedef T elem_t;                                                                          \
        typedef A acc_t;                                                                           \
        const elem_t *x = (const elem_t *)j->x + u * j->n;                                         \
        elem_t *y = (elem_t *)j->out + u * j->n;                                                   \
        acc_t acc = 0;                                                                             \
        if (j->reverse)                                                                            \
            for (int64_t k = j->n - 1; k >= 0; k--)                                                \
                y[k] = (elem_t)(acc += (acc_t)x[k]);                                               \
        else                                                                                       \
            for (int64_t k = 0; k < j->n; k++)                                                     \
                y[k] = (elem_t)(acc += (acc_t)x[k]);                                               \
    } while (0)

static void kern_scan_lines(void *ctx, int64_t begin, int64_t end) {
    const kern_scan_job *j = ctx;
    for (int64_t u = begin; u < end; u++) {
        switch (j->dt) {
        case KERN_F32: KERN_SCAN_LINE(float, double); break;
        case KERN_F64: KERN_SCAN_LINE(double, double); break;
        default: KERN_SCAN_LINE(int64_t, uint64_t); break;
        }
    }
}

static void kern_scan_units(void *ctx, int64_t begin, int64_t end) {
    const kern_scan_job *j = ctx;
    for (int64_t u = begin; u < end; u++) {
        int64_t o = u / j->n_chunks, i0 = (u % j->n_chunks) * KERN_SCAN_CHUNK;
        int64_t w = j->inner - i0 < KERN_SCAN_CHUNK ? j->inner - i0 : KERN_SCAN_CHUNK;
        switch (j->dt) {
        case KERN_F32: KERN_SCAN_BODY(float, double); break;
        case KERN_F64: KERN_SCAN_BODY(double, double); break;
        default: KERN_SCAN_BODY(int64_t, uint64_t); break;
        }
    }
}

int cai_kern_cumsum(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x,
                    void *out, bool reverse) {
    if (outer < 0 || n < 0 || inner < 0)
        return -1;
    if (outer == 0 || n == 0 || inner == 0)
        return 0;
    int64_t n_chunks = (inner + KERN_SCAN_CHUNK - 1) / KERN_SCAN_CHUNK;
    kern_scan_job j = {dt, n, inner, n_chunks, reverse, x, out};
    int64_t per = n * (inner < KERN_SCAN_CHUNK ? inner : KERN_SCAN_CHUNK);
    cai_kern_parallel_for(outer * n_chunks, per >= KERN_GRAIN ? 1 : KERN_GRAIN / per,
                          inner == 1 ? kern_scan_lines : kern_scan_units, &j);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * sort and topk: a stable merge sort of each line's positions. NaN sorts above every
 * number (last ascending, first descending), as in PyTorch; equal values keep their
 * order, as PyTorch's stable sort.
 */
typedef struct {
    kern_dtype dt;
    int64_t n, inner, k;
    bool descending;
    const void *x;
    void *values;
    int64_t *indices;
    int failed; /* a work unit could not get its scratch */
} kern_sort_job;

/* Element a of the line comes strictly before element b. */
static bool kern_sort_before(const kern_sort_job *j, const void *line, int64_t a, int64_t b) {
    if (j->dt == KERN_I64) {
        int64_t va = ((const int64_t *)line)[a * j->inner],
                vb = ((const int64_t *)line)[b * j->inner];
        return j->descending ? va > vb : va < vb;
    }
    double va = kern_load(j->dt, line, a * j->inner), vb = kern_load(j->dt, line, b * j->inner);
    if (j->descending)
        return va > vb || (isnan(va) && !isnan(vb));
    return va < vb || (isnan(vb) && !isnan(va));
}

/* Sort pos[0..n) with tmp as scratch, bottom-up, taking from the left run on ties. */
static void kern_merge_sort(const kern_sort_job *j, const void *line, int64_t *pos, int64_t *tmp,
                            int64_t n) {
    for (int64_t width = 1; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n;
            int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t a = lo, b = mid, t = lo;
            while (a < mid && b < hi)
                tmp[t++] = kern_sort_before(j, line, pos[b], pos[a]) ? pos[b++] : pos[a++];
            while (a < mid)
                tmp[t++] = pos[a++];
            while (b < hi)
                tmp[t++] = pos[b++];
        }
        memcpy(pos, tmp, sizeof(int64_t) * (size_t)n);
    }
}

static void kern_sort_lines(void *ctx, int64_t begin, int64_t end) {
    kern_sort_job *j = ctx;
    size_t es = cai_kern_dtype_size(j->dt);
    int64_t *pos = cai_kern_scratch_alloc(sizeof(int64_t) * 2 * (size_t)j->n);
    if (!pos) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t u = begin; u < end; u++) {
        int64_t o = u / j->inner, i = u % j->inner;
        const char *line = (const char *)j->x + (size_t)(o * j->n * j->inner + i) * es;
        for (int64_t p = 0; p < j->n; p++)
            pos[p] = p;
        kern_merge_sort(j, line, pos, pos + j->n, j->n);
        int64_t out0 = o * j->k * j->inner + i;
        for (int64_t p = 0; p < j->k; p++) {
            int64_t at = out0 + p * j->inner;
            memcpy((char *)j->values + (size_t)at * es, line + (size_t)(pos[p] * j->inner) * es,
                   es);
            j->indices[at] = pos[p];
        }
    }
    cai_kern_scratch_free(pos);
}

int cai_kern_sort(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x, int64_t k,
                  bool descending, void *values, int64_t *indices) {
    if (outer < 0 || n < 0 || inner < 0 || k < 0 || k > n)
        return -1;
    if (outer == 0 || inner == 0 || k == 0)
        return 0;
    kern_sort_job j = {dt, n, inner, k, descending, x, values, indices, 0};
    int64_t per = n > 0 ? n * 8 : 1;
    cai_kern_parallel_for(outer * inner, per >= KERN_GRAIN ? 1 : KERN_GRAIN / per, kern_sort_lines,
                          &j);
    return j.failed ? -2 : 0;
}

/* ---------------------------------------------------------------------------------------
 * cumprod and its derivative. Floats accumulate in double, as PyTorch's CPU kernel.
 */
typedef struct {
    kern_dtype dt;
    int64_t n, inner;
    const void *x, *y, *g;
    void *out;
} kern_prod_job;

static void kern_cumprod_lines(void *ctx, int64_t begin, int64_t end) {
    const kern_prod_job *j = ctx;
    for (int64_t u = begin; u < end; u++) {
        int64_t at = (u / j->inner) * j->n * j->inner + u % j->inner;
        if (j->dt == KERN_I64) {
            uint64_t acc = 1;
            for (int64_t k = 0; k < j->n; k++, at += j->inner) {
                acc *= (uint64_t)((const int64_t *)j->x)[at];
                ((int64_t *)j->out)[at] = (int64_t)acc;
            }
            continue;
        }
        double acc = 1;
        for (int64_t k = 0; k < j->n; k++, at += j->inner) {
            acc *= kern_load(j->dt, j->x, at);
            kern_store(j->dt, j->out, at, acc);
        }
    }
}

/* One line of the derivative: before the first zero z of x, dx_k = (sum over i >= k of
 * g_i y_i) / x_k; at z, y_{z-1} times (g_z + sum over i > z of g_i x_{z+1} ... x_i); after
 * it, 0 (every product through them holds x_z = 0). */
static void kern_cumprod_bw_lines(void *ctx, int64_t begin, int64_t end) {
    const kern_prod_job *j = ctx;
    int64_t s = j->inner;
    for (int64_t u = begin; u < end; u++) {
        int64_t at0 = (u / s) * j->n * s + u % s, z = 0;
        while (z < j->n && kern_load(j->dt, j->x, at0 + z * s) != 0)
            z++;
        double acc = 0;
        for (int64_t k = z - 1; k >= 0; k--) {
            int64_t at = at0 + k * s;
            acc += kern_load(j->dt, j->g, at) * kern_load(j->dt, j->y, at);
            kern_store(j->dt, j->out, at, acc / kern_load(j->dt, j->x, at));
        }
        if (z == j->n)
            continue;
        double total = kern_load(j->dt, j->g, at0 + z * s), run = 1;
        for (int64_t k = z + 1; k < j->n; k++) {
            run *= kern_load(j->dt, j->x, at0 + k * s);
            total += kern_load(j->dt, j->g, at0 + k * s) * run;
            kern_store(j->dt, j->out, at0 + k * s, 0.0);
        }
        double before = z > 0 ? kern_load(j->dt, j->y, at0 + (z - 1) * s) : 1.0;
        kern_store(j->dt, j->out, at0 + z * s, before * total);
    }
}

static int kern_prod_run(const kern_prod_job *j, int64_t outer, kern_range_fn fn) {
    if (outer < 0 || j->n < 0 || j->inner < 0)
        return -1;
    if (outer == 0 || j->n == 0 || j->inner == 0)
        return 0;
    int64_t per = j->n * 4;
    cai_kern_parallel_for(outer * j->inner, per >= KERN_GRAIN ? 1 : KERN_GRAIN / per, fn,
                          (void *)j);
    return 0;
}

int cai_kern_cumprod(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x,
                     void *out) {
    kern_prod_job j = {dt, n, inner, x, NULL, NULL, out};
    return kern_prod_run(&j, outer, kern_cumprod_lines);
}

int cai_kern_cumprod_backward(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x,
                              const void *y, const void *g, void *out) {
    if (dt == KERN_I64)
        return -1;
    kern_prod_job j = {dt, n, inner, x, y, g, out};
    return kern_prod_run(&j, outer, kern_cumprod_bw_lines);
}
