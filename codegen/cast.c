/* cast.c - dtype conversion over strided index spaces.
 *
 * Casts are rare (explicit ca_to_dtype and its gradient, and a comparison's 0/1 result
 * into bool), so plain loops suffice: a flat one when both sides collapse to one
 * contiguous run, else an index walk.
 */
#include "codegen/cast.h"
#include "codegen/kern_internal.h"

/* Element so of out = element si of src, converted. */
static inline void cast_one(kern_dtype out_dt, kern_dtype src_dt, void *out, int64_t so,
                            const void *src, int64_t si) {
    /* a same-dtype int64 cast is a plain copy: the double path would round above 2^53 */
    if (out_dt == KERN_I64 && src_dt == KERN_I64)
        ((int64_t *)out)[so] = ((const int64_t *)src)[si];
    else
        kern_store(out_dt, out, so, kern_load(src_dt, src, si));
}

/* Whether the whole space is one contiguous run on both sides (row-major strides). */
static bool cast_flat(int ndim, const int64_t *shape, const int64_t *out_strides,
                      const int64_t *src_strides) {
    int64_t want = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] != 1 && (out_strides[d] != want || src_strides[d] != want))
            return false;
        want *= shape[d];
    }
    return true;
}

/* The flat loops of the bool casts, which every comparison of floats runs: typed, so the
 * compiler vectorises them, and split over the pool. */
#define CAST_TO_BOOL(T)                                                                            \
    for (int64_t i = begin; i < end; i++)                                                          \
        ((uint8_t *)j->out)[i] = ((const T *)j->src)[i] != 0;
#define CAST_FROM_BOOL(T)                                                                          \
    for (int64_t i = begin; i < end; i++)                                                          \
        ((T *)j->out)[i] = (T)((const uint8_t *)j->src)[i];

typedef struct {
    kern_dtype out_dt, src_dt;
    void *out;
    const void *src;
} cast_job;

static void cast_bool_range(void *ctx, int64_t begin, int64_t end) {
    const cast_job *j = ctx;
    bool to_bool = j->out_dt == KERN_BOOL;
    kern_dtype other = to_bool ? j->src_dt : j->out_dt;
    if (to_bool && other == KERN_F32)
        CAST_TO_BOOL(float)
    else if (to_bool && other == KERN_F64)
        CAST_TO_BOOL(double)
    else if (to_bool)
        CAST_TO_BOOL(int64_t)
    else if (other == KERN_F32)
        CAST_FROM_BOOL(float)
    else if (other == KERN_F64)
        CAST_FROM_BOOL(double)
    else
        CAST_FROM_BOOL(int64_t)
}

/* Returns false for a pair without a bool on exactly one side. */
static bool cast_flat_bool(kern_dtype out_dt, kern_dtype src_dt, int64_t n, void *out,
                           const void *src) {
    if ((out_dt == KERN_BOOL) == (src_dt == KERN_BOOL))
        return false;
    cast_job j = {out_dt, src_dt, out, src};
    cai_kern_parallel_for(n, KERN_GRAIN, cast_bool_range, &j);
    return true;
}

void cai_kern_cast(kern_dtype out_dt, kern_dtype src_dt, int ndim, const int64_t *shape, void *out,
                   const int64_t *out_strides, const kern_src *src) {
    int64_t n = 1, idx[KERN_MAX_DIMS] = {0};
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    if (cast_flat(ndim, shape, out_strides, src->strides)) {
        if (cast_flat_bool(out_dt, src_dt, n, out, src->data))
            return;
        for (int64_t i = 0; i < n; i++)
            cast_one(out_dt, src_dt, out, i, src->data, i);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t so = 0, si = 0;
        for (int d = 0; d < ndim; d++) {
            so += idx[d] * out_strides[d];
            si += idx[d] * src->strides[d];
        }
        cast_one(out_dt, src_dt, out, so, src->data, si);
        for (int d = ndim - 1; d >= 0; d--) {
            if (++idx[d] < shape[d])
                break;
            idx[d] = 0;
        }
    }
}
