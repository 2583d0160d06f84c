/* cast.h - the kernels whose input and output dtypes differ: dtype conversion, and float
 * comparisons written straight as bool. */
#ifndef CAGRAD_CAST_H
#define CAGRAD_CAST_H

#include "codegen/kern.h"

/* out[i] = (out dtype) src[i] over `shape`; out is written with out_strides. */
void cai_kern_cast(kern_dtype out_dt, kern_dtype src_dt, int ndim, const int64_t *shape, void *out,
                   const int64_t *out_strides, const kern_src *src);

/* out[i] = a[i] OP b[i] (b NULL: a[i] OP p0, p0 rounded to dt) as bool bytes, for op one of
 * the comparisons KPW_LT..KPW_NE (b given) or KPW_LT_S..KPW_NE_S (b NULL), over n contiguous
 * float32 or float64 elements. Returns 0, or -1 for another op, dtype or a negative n. */
int cai_kern_compare_bool(kern_pw_op op, kern_dtype dt, int64_t n, const void *a, const void *b,
                          double p0, uint8_t *out);

#endif /* CAGRAD_CAST_H */
