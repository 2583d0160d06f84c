/* ops_shape.h - what the view ops (ops_shape.c) and the slicing ops (ops_slice.c) share:
 * zeroed attributes for a public wrapper to fill, and a view's geometry over its input's
 * storage.
 */
#ifndef CAGRAD_OPS_SHAPE_H
#define CAGRAD_OPS_SHAPE_H

#include "autograd/internal.h"

#include <string.h>

static inline ca_attrs attrs_none(void) {
    ca_attrs a;
    memset(&a, 0, sizeof a);
    return a;
}

/* A view of x with x's shape and strides except as the caller changes them. */
typedef struct {
    int ndim;
    int64_t shape[CA_MAX_DIMS];
    int64_t strides[CA_MAX_DIMS];
    int64_t offset;
} geom;

static inline geom geom_of(const ca_tensor *x) {
    geom g;
    g.ndim = x->ndim;
    memcpy(g.shape, x->shape, sizeof g.shape);
    memcpy(g.strides, x->strides, sizeof g.strides);
    g.offset = x->offset;
    return g;
}

static inline ca_status geom_alias(ca_tensor *x, const geom *g, ca_tensor **out) {
    return cai_tensor_alias(x, g->ndim, g->shape, g->strides, g->offset, out);
}

#endif /* CAGRAD_OPS_SHAPE_H */
