/* cast.h - dtype conversion, the one kernel whose input and output dtypes differ. */
#ifndef CAGRAD_CAST_H
#define CAGRAD_CAST_H

#include "codegen/kern.h"

/* out[i] = (out dtype) src[i] over `shape`; out is written with out_strides. */
void cai_kern_cast(kern_dtype out_dt, kern_dtype src_dt, int ndim, const int64_t *shape, void *out,
                   const int64_t *out_strides, const kern_src *src);

#endif /* CAGRAD_CAST_H */
