/* meta.c - shapes without data: numel, broadcasting, dim normalisation, shape strings.
 *
 * The rules themselves are graph/shape_rules.c's, shared with the graph; these adapt them
 * to ca_meta and to this layer's errors.
 */
#include "autograd/internal.h"

int64_t cai_meta_numel(const ca_meta *m) {
    int64_t n = 1;
    for (int d = 0; d < m->ndim; d++)
        n *= m->shape[d];
    return n;
}

bool cai_meta_same_shape(const ca_meta *a, const ca_meta *b) {
    if (a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return false;
    return true;
}

ca_status cai_rule_raise(const cai_rule_error *e) {
    switch (e->status) {
    case CAI_RULE_DIM: return err_set(CA_STATUS_DIM, "%s", e->msg);
    case CAI_RULE_DTYPE: return err_set(CA_STATUS_DTYPE, "%s", e->msg);
    case CAI_RULE_NOMEM: return err_nomem("a shape");
    default: return err_set(CA_STATUS_SHAPE, "%s", e->msg);
    }
}

ca_status cai_meta_broadcast(const ca_meta *a, const ca_meta *b, ca_meta *out, const char *op) {
    cai_rule_error e;
    ca_meta r = {.dtype = a->dtype};
    if (cai_rule_broadcast(&cai_sizes_concrete, op, a->ndim, a->shape, b->ndim, b->shape, &r.ndim,
                           r.shape, &e))
        return cai_rule_raise(&e);
    *out = r;
    return CA_OK;
}

ca_status cai_dim_normalize(int64_t *dim, int ndim, const char *op) {
    cai_rule_error e;
    return cai_rule_dim(dim, ndim, op, &e) ? cai_rule_raise(&e) : CA_OK;
}

const char *cai_meta_str(const ca_meta *m, char *buf, size_t size) {
    return cai_err_shape_str(m->ndim, m->shape, buf, size);
}
