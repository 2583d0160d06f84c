/* kern_index.c - index_select, index_add, gather and scatter_add on [outer, n, inner].
 *
 * Every index is checked before anything is written, so a bad index leaves the output
 * untouched. The accumulating kernels split work over (outer, inner-chunk) pairs only:
 * within a pair the index dim runs serially in order, so duplicate indices add up in the
 * same order on every run and no two threads touch the same element.
 */
#include <string.h>

#include "kern_internal.h"

#define KERN_INDEX_CHUNK 1024 /* inner elements per work unit of the accumulating kernels */

void cai_kern_split_dim(int ndim, const int64_t *shape, int dim, int64_t *outer, int64_t *n,
                        int64_t *inner) {
    *outer = *inner = 1;
    *n = ndim > 0 ? shape[dim] : 1;
    for (int d = 0; d < ndim; d++) {
        if (d < dim)
            *outer *= shape[d];
        else if (d > dim)
            *inner *= shape[d];
    }
}

/* First out-of-range entry of index[0..count) (limit n), or -1. */
static int64_t kern_index_check(const int64_t *index, int64_t count, int64_t n, int64_t *bad_pos,
                                int64_t *bad_val) {
    for (int64_t i = 0; i < count; i++)
        if (index[i] < 0 || index[i] >= n) {
            if (bad_pos)
                *bad_pos = i;
            if (bad_val)
                *bad_val = index[i];
            return i;
        }
    return -1;
}

typedef struct {
    kern_dtype dt;
    int64_t outer, n, inner, m; /* m: length of the index dim on the indexed side */
    const int64_t *index;
    const char *src;
    char *dst;
} kern_index_job;

static int64_t kern_index_grain(int64_t per_item) {
    return per_item >= KERN_GRAIN ? 1 : KERN_GRAIN / (per_item > 0 ? per_item : 1);
}

/* The accumulating kernels' work units: (outer, chunk of KERN_INDEX_CHUNK inner elements)
 * pairs, chunk fastest. */
static int64_t kern_index_nchunks(int64_t inner) {
    return (inner + KERN_INDEX_CHUNK - 1) / KERN_INDEX_CHUNK;
}

static void kern_index_run_chunked(kern_index_job *j, kern_range_fn fn) {
    int64_t per = (j->inner < KERN_INDEX_CHUNK ? j->inner : KERN_INDEX_CHUNK) * j->m;
    cai_kern_parallel_for(j->outer * kern_index_nchunks(j->inner), kern_index_grain(per), fn, j);
}

/* dst[0..len) += src[0..len) in the dtype. */
static void kern_add_into(kern_dtype dt, char *dst, const char *src, int64_t len) {
    if (dt == KERN_F32) {
        float *d = (float *)dst;
        const float *s = (const float *)src;
        for (int64_t i = 0; i < len; i++)
            d[i] += s[i];
    } else if (dt == KERN_F64) {
        double *d = (double *)dst;
        const double *s = (const double *)src;
        for (int64_t i = 0; i < len; i++)
            d[i] += s[i];
    } else {
        int64_t *d = (int64_t *)dst;
        const int64_t *s = (const int64_t *)src;
        for (int64_t i = 0; i < len; i++)
            d[i] = (int64_t)((uint64_t)d[i] + (uint64_t)s[i]);
    }
}

/* ------------------------------------------------------------------ select / add */

static void kern_select_range(void *ctx, int64_t begin, int64_t end) {
    const kern_index_job *j = ctx;
    size_t row = (size_t)j->inner * cai_kern_dtype_size(j->dt);
    for (int64_t r = begin; r < end; r++) { /* r = o * m + jj */
        int64_t o = r / j->m, jj = r % j->m;
        memcpy(j->dst + (size_t)r * row, j->src + (size_t)(o * j->n + j->index[jj]) * row, row);
    }
}

int cai_kern_index_select(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x,
                          const int64_t *index, int64_t n_index, void *out, int64_t *bad_pos,
                          int64_t *bad_val) {
    if (cai_kern_dtype_size(dt) == 0 || outer < 0 || n < 0 || inner < 0 || n_index < 0)
        return -1;
    if (kern_index_check(index, n_index, n, bad_pos, bad_val) >= 0)
        return -1;
    kern_index_job j = {dt, outer, n, inner, n_index, index, x, out};
    cai_kern_parallel_for(outer * n_index, kern_index_grain(inner), kern_select_range, &j);
    return 0;
}

/* Units are (o, inner chunk); each walks the index in order. */
static void kern_index_add_range(void *ctx, int64_t begin, int64_t end) {
    const kern_index_job *j = ctx;
    size_t esz = cai_kern_dtype_size(j->dt);
    int64_t nch = kern_index_nchunks(j->inner);
    for (int64_t u = begin; u < end; u++) {
        int64_t o = u / nch, i0 = (u % nch) * KERN_INDEX_CHUNK;
        int64_t len = j->inner - i0 < KERN_INDEX_CHUNK ? j->inner - i0 : KERN_INDEX_CHUNK;
        for (int64_t jj = 0; jj < j->m; jj++) {
            size_t d = (size_t)((o * j->n + j->index[jj]) * j->inner + i0) * esz;
            size_t s = (size_t)((o * j->m + jj) * j->inner + i0) * esz;
            kern_add_into(j->dt, j->dst + d, j->src + s, len);
        }
    }
}

int cai_kern_index_add(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, void *out,
                       const int64_t *index, int64_t n_index, const void *src, int64_t *bad_pos,
                       int64_t *bad_val) {
    if (cai_kern_dtype_size(dt) == 0 || outer < 0 || n < 0 || inner < 0 || n_index < 0)
        return -1;
    if (kern_index_check(index, n_index, n, bad_pos, bad_val) >= 0)
        return -1;
    if (inner == 0)
        return 0;
    kern_index_job j = {dt, outer, n, inner, n_index, index, src, out};
    kern_index_run_chunked(&j, kern_index_add_range);
    return 0;
}

/* ------------------------------------------------------------------ gather / scatter */

#define KERN_GATHER_LOOP(TY)                                                                       \
    for (int64_t i = 0; i < j->inner; i++)                                                         \
        ((TY *)j->dst)[r * j->inner + i] = ((const TY *)j->src)[(o * j->n + ix[i]) * j->inner + i];

static void kern_gather_range(void *ctx, int64_t begin, int64_t end) {
    const kern_index_job *j = ctx;
    for (int64_t r = begin; r < end; r++) { /* r = o * m + jj */
        int64_t o = r / j->m;
        const int64_t *ix = j->index + r * j->inner;
        if (cai_kern_dtype_size(j->dt) == 1)
            KERN_GATHER_LOOP(uint8_t)
        else if (cai_kern_dtype_size(j->dt) == 4)
            KERN_GATHER_LOOP(uint32_t)
        else
            KERN_GATHER_LOOP(uint64_t)
    }
}

int cai_kern_gather(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x,
                    const int64_t *index, int64_t n_out, void *out, int64_t *bad_pos,
                    int64_t *bad_val) {
    if (cai_kern_dtype_size(dt) == 0 || outer < 0 || n < 0 || inner < 0 || n_out < 0)
        return -1;
    if (kern_index_check(index, outer * n_out * inner, n, bad_pos, bad_val) >= 0)
        return -1;
    kern_index_job j = {dt, outer, n, inner, n_out, index, x, out};
    cai_kern_parallel_for(outer * n_out, kern_index_grain(inner), kern_gather_range, &j);
    return 0;
}

#define KERN_SCATTER_LOOP(TY, ADD)                                                                 \
    for (int64_t jj = 0; jj < j->m; jj++) {                                                        \
        typedef TY kern_elem;                                                                      \
        int64_t row = (o * j->m + jj) * j->inner;                                                  \
        const int64_t *ix = j->index + row;                                                        \
        const kern_elem *s = (const kern_elem *)j->src + row;                                      \
        kern_elem *d = (kern_elem *)j->dst + o * j->n * j->inner;                                  \
        for (int64_t i = i0; i < i1; i++)                                                          \
            d[ix[i] * j->inner + i] = ADD(d[ix[i] * j->inner + i], s[i]);                          \
    }

#define KERN_PLUS(a, b)  ((a) + (b))
#define KERN_WPLUS(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))

/* inner 1 (a scatter along the last dim, as max_pool2d's derivative): each unit is one
 * outer row, its m entries added in order. */
#define KERN_SCATTER_ROW(TY, ADD)                                                                  \
    do {                                                                                           \
        typedef TY kern_elem;                                                                      \
        const int64_t *ix = j->index + o * j->m;                                                   \
        const kern_elem *s = (const kern_elem *)j->src + o * j->m;                                 \
        kern_elem *d = (kern_elem *)j->dst + o * j->n;                                             \
        for (int64_t jj = 0; jj < j->m; jj++)                                                      \
            d[ix[jj]] = ADD(d[ix[jj]], s[jj]);                                                     \
    } while (0)

static void kern_scatter_add_range(void *ctx, int64_t begin, int64_t end) {
    const kern_index_job *j = ctx;
    if (j->inner == 1) {
        for (int64_t o = begin; o < end; o++) {
            if (j->dt == KERN_F32)
                KERN_SCATTER_ROW(float, KERN_PLUS);
            else if (j->dt == KERN_F64)
                KERN_SCATTER_ROW(double, KERN_PLUS);
            else
                KERN_SCATTER_ROW(int64_t, KERN_WPLUS);
        }
        return;
    }
    int64_t nch = kern_index_nchunks(j->inner);
    for (int64_t u = begin; u < end; u++) {
        int64_t o = u / nch, i0 = (u % nch) * KERN_INDEX_CHUNK;
        int64_t i1 = j->inner - i0 < KERN_INDEX_CHUNK ? j->inner : i0 + KERN_INDEX_CHUNK;
        if (j->dt == KERN_F32)
            KERN_SCATTER_LOOP(float, KERN_PLUS)
        else if (j->dt == KERN_F64)
            KERN_SCATTER_LOOP(double, KERN_PLUS)
        else
            KERN_SCATTER_LOOP(int64_t, KERN_WPLUS)
    }
}

int cai_kern_scatter_add(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, void *out,
                         const int64_t *index, int64_t n_src, const void *src, int64_t *bad_pos,
                         int64_t *bad_val) {
    if (cai_kern_dtype_size(dt) == 0 || outer < 0 || n < 0 || inner < 0 || n_src < 0)
        return -1;
    if (kern_index_check(index, outer * n_src * inner, n, bad_pos, bad_val) >= 0)
        return -1;
    if (inner == 0)
        return 0;
    kern_index_job j = {dt, outer, n, inner, n_src, index, src, out};
    kern_index_run_chunked(&j, kern_scatter_add_range);
    return 0;
}

/* Units are (o, j): each writes one run of inner elements. Duplicate indices write the
 * same value, so the order does not matter. */
typedef struct {
    kern_dtype dt;
    int64_t n, inner, n_index;
    const int64_t *index;
    double value;
    char *out;
} kern_fill_job;

static void kern_index_fill_range(void *ctx, int64_t begin, int64_t end) {
    const kern_fill_job *j = ctx;
    for (int64_t u = begin; u < end; u++) {
        int64_t o = u / j->n_index, k = j->index[u % j->n_index];
        k = k < 0 ? k + j->n : k;
        int64_t base = (o * j->n + k) * j->inner;
        if (j->dt == KERN_F32) {
            float *d = (float *)j->out + base;
            for (int64_t i = 0; i < j->inner; i++)
                d[i] = (float)j->value;
        } else if (j->dt == KERN_F64) {
            double *d = (double *)j->out + base;
            for (int64_t i = 0; i < j->inner; i++)
                d[i] = j->value;
        } else {
            int64_t *d = (int64_t *)j->out + base;
            for (int64_t i = 0; i < j->inner; i++)
                d[i] = (int64_t)j->value;
        }
    }
}

int cai_kern_index_fill(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, void *out,
                        const int64_t *index, int64_t n_index, double value, int64_t *bad_pos,
                        int64_t *bad_val) {
    if (cai_kern_dtype_size(dt) == 0 || outer < 0 || n < 0 || inner < 0 || n_index < 0)
        return -1;
    for (int64_t i = 0; i < n_index; i++)
        if (index[i] < -n || index[i] >= n) {
            if (bad_pos)
                *bad_pos = i;
            if (bad_val)
                *bad_val = index[i];
            return -1;
        }
    kern_fill_job j = {dt, n, inner, n_index, index, value, out};
    cai_kern_parallel_for(outer * n_index, kern_index_grain(inner), kern_index_fill_range, &j);
    return 0;
}
