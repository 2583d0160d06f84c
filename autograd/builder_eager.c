/* builder_eager.c - the eager builder: each builder call runs its op at once.
 *
 * Values are tensors. Every tensor a rule makes is tracked in the scope and released by
 * cai_eager_scope_end, so rules never release anything. The engine runs rules with grad mode
 * off, so the ops called here record no graph.
 */
#include "autograd/builder.h"

#include <string.h>

static bool track(ca_eager_builder *eb, ca_tensor *t) {
    if (!mem_grow((void **)&eb->temps, &eb->cap_temps, eb->n_temps + 1, sizeof(ca_tensor *)))
        return false;
    CA_ASSERT(eb->n_temps < eb->cap_temps);
    eb->temps[eb->n_temps++] = t;
    return true;
}

static ca_bval eager_apply(ca_builder *b, int op, int n, const ca_bval *in, const ca_attrs *a) {
    ca_tensor *out;
    ca_status st = cai_op_call(op, n, (ca_tensor *const *)in, a, &out, NULL);
    if (st != CA_OK) {
        b->status = st;
        return NULL;
    }
    if (!track((ca_eager_builder *)b, out)) {
        ca_tensor_release(out);
        b->status = err_nomem("the backward's list of temporaries");
        return NULL;
    }
    return bv_of(out);
}

static ca_bval eager_saved(ca_builder *b, const ca_node *n, int k) {
    ca_status st = cai_node_check_saved(n, k);
    if (st != CA_OK) {
        b->status = st;
        return NULL;
    }
    return n->saved[k].t ? bv_of(n->saved[k].t) : NULL; /* NULL: an optional input not given */
}

static const ca_meta *eager_meta(ca_builder *b, ca_bval v) {
    ca_eager_builder *eb = (ca_eager_builder *)b;
    CA_ASSERT(v != NULL); /* bx_meta answers NULL itself */
    ca_meta *m = &eb->metas[eb->next_meta++ % 16];
    cai_tensor_meta(bv_tensor(v), m);
    return m;
}

static ca_bval eager_scale_inv_numel(ca_builder *b, ca_bval x, const ca_meta *m,
                                     uint32_t dim_mask) {
    double count = 1;
    for (int d = 0; d < m->ndim; d++)
        if (dim_mask & (1u << d))
            count *= (double)m->shape[d];
    return bx_mul_s(b, x, 1.0 / count);
}

static int64_t eager_size_add(ca_builder *b, int64_t x, int64_t y) {
    (void)b;
    return x + y;
}

static const ca_builder_vtbl eager_vtbl = {eager_apply, eager_saved, eager_meta,
                                           eager_scale_inv_numel, eager_size_add};

void cai_eager_builder_init(ca_eager_builder *eb) {
    memset(eb, 0, sizeof *eb);
    eb->base.vt = &eager_vtbl;
    eb->base.status = CA_OK;
}

void cai_eager_scope_end(ca_eager_builder *eb) {
    for (int i = 0; i < eb->n_temps; i++)
        ca_tensor_release(eb->temps[i]);
    cai_mem_free(eb->temps);
    eb->temps = NULL;
    eb->n_temps = eb->cap_temps = 0;
}
