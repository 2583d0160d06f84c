/* meta.c - shapes without data: numel, broadcasting, dim normalisation, shape strings.
 *
 * Shape rules run on ca_meta only, so the same rule serves eager tensors and (later)
 * traced IR values.
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

ca_status cai_meta_broadcast(const ca_meta *a, const ca_meta *b, ca_meta *out, const char *op) {
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    ca_meta r = {.dtype = a->dtype, .ndim = nd};
    for (int i = 0; i < nd; i++) {
        int da = a->ndim - nd + i, db = b->ndim - nd + i;
        int64_t sa = da >= 0 ? a->shape[da] : 1;
        int64_t sb = db >= 0 ? b->shape[db] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            char s1[96], s2[96];
            return err_set(CA_STATUS_SHAPE,
                           "%s: shapes %s and %s cannot be broadcast together (dim %d: %lld vs "
                           "%lld); sizes must match or be 1",
                           op, cai_meta_str(a, s1, sizeof s1), cai_meta_str(b, s2, sizeof s2),
                           i - nd, (long long)sa, (long long)sb);
        }
        r.shape[i] = sa == 1 ? sb : sa;
    }
    *out = r;
    return CA_OK;
}

ca_status cai_dim_normalize(int64_t *dim, int ndim, const char *op) {
    int64_t n = ndim > 0 ? ndim : 1; /* a 0-d tensor accepts dim 0 and -1, as PyTorch */
    if (*dim < -n || *dim >= n)
        return err_set(CA_STATUS_DIM,
                       "%s: dim %lld is out of range for a tensor with %d dims (expected a "
                       "dim in [%lld, %lld])",
                       op, (long long)*dim, ndim, (long long)-n, (long long)(n - 1));
    if (*dim < 0)
        *dim += n;
    return CA_OK;
}

const char *cai_meta_str(const ca_meta *m, char *buf, size_t size) {
    return cai_err_shape_str(m->ndim, m->shape, buf, size);
}
