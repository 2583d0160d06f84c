/* builder.c - the bx_ helpers: each fills in the attributes of one op-table row and hands
 * it to the builder's apply. They hold no logic of their own, so any builder (eager or
 * tracing) gets every helper for free.
 */
#include "autograd/builder.h"

#include <stdio.h>
#include <string.h>

ca_bval cai_bx_apply(ca_builder *b, int op, int n, const ca_bval *in, const ca_attrs *a) {
    CA_ASSERT(op >= 0 && op < CA_OP__COUNT && n >= 0 && (n == 0 || in));
    if (b->status != CA_OK)
        return NULL;
    for (int i = 0; i < n; i++)
        if (!in[i]) {
            if (b->status == CA_OK)
                b->status = err_set(CA_STATUS_INTERNAL,
                                    "derivative rule passed a missing value "
                                    "to op %d",
                                    op);
            return NULL;
        }
    return b->vt->apply(b, op, n, in, a);
}

ca_bval cai_bx_saved(ca_builder *b, const ca_node *n, int k) {
    CA_ASSERT(n && k >= 0 && k < n->n_saved); /* a rule reads only what its row saves */
    return b->status == CA_OK ? b->vt->saved(b, n, k) : NULL;
}

const ca_meta *cai_bx_meta(ca_builder *b, ca_bval v) {
    return v ? b->vt->meta(b, v) : NULL;
}

ca_bval cai_bx_fail(ca_builder *b, ca_status st, const char *fmt, ...) {
    if (b->status != CA_OK)
        return NULL;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    b->status = err_set(st, "%s", msg);
    return NULL;
}

ca_bval cai_bx_scale_inv_numel(ca_builder *b, ca_bval x, const ca_meta *m, uint32_t dim_mask) {
    return b->status == CA_OK && x ? b->vt->scale_inv_numel(b, x, m, dim_mask) : NULL;
}
