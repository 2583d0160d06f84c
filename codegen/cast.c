/* cast.c - dtype conversion over strided index spaces.
 *
 * Casts are rare (explicit ca_to_dtype and its gradient), so a plain loop suffices.
 */
#include "codegen/cast.h"

static double load(kern_dtype dt, const char *p) {
    switch (dt) {
    case KERN_F32: return *(const float *)p;
    case KERN_F64: return *(const double *)p;
    default: return (double)*(const int64_t *)p;
    }
}

static void store(kern_dtype dt, char *p, double v) {
    switch (dt) {
    case KERN_F32: *(float *)p = (float)v; break;
    case KERN_F64: *(double *)p = v; break;
    default: *(int64_t *)p = (int64_t)v; break; /* truncates toward zero, as PyTorch */
    }
}

void kern_cast(kern_dtype out_dt, kern_dtype src_dt, int ndim, const int64_t *shape, void *out,
               const int64_t *out_strides, const kern_src *src) {
    int64_t n = 1, idx[KERN_MAX_DIMS] = {0};
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    size_t osz = kern_dtype_size(out_dt), isz = kern_dtype_size(src_dt);
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
            store(out_dt, (char *)out + (size_t)so * osz,
                  load(src_dt, (const char *)src->data + (size_t)si * isz));
        for (int d = ndim - 1; d >= 0; d--) {
            if (++idx[d] < shape[d])
                break;
            idx[d] = 0;
        }
    }
}
