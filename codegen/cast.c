/* cast.c - dtype conversion over strided index spaces.
 *
 * Casts are rare (explicit ca_to_dtype and its gradient), so a plain loop suffices.
 */
#include "codegen/cast.h"

void cai_kern_cast(kern_dtype out_dt, kern_dtype src_dt, int ndim, const int64_t *shape, void *out,
                   const int64_t *out_strides, const kern_src *src) {
    int64_t n = 1, idx[KERN_MAX_DIMS] = {0};
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    for (int64_t i = 0; i < n; i++) {
        int64_t so = 0, si = 0;
        for (int d = 0; d < ndim; d++) {
            so += idx[d] * out_strides[d];
            si += idx[d] * src->strides[d];
        }
        /* int64 -> int64 or f64 -> f64 round-trips exactly through this path only for
         * float dtypes; a same-dtype int64 cast is a plain copy */
        if (out_dt == KERN_I64 && src_dt == KERN_I64)
            ((int64_t *)out)[so] = ((const int64_t *)src->data)[si];
        else
            kern_store(out_dt, out, so, kern_load(src_dt, src->data, si));
        for (int d = ndim - 1; d >= 0; d--) {
            if (++idx[d] < shape[d])
                break;
            idx[d] = 0;
        }
    }
}
