/* builder_eager.c - the eager builder: each builder call runs its op at once.
 *
 * Values are tensors. Every tensor a rule makes is tracked in the scope and released by
 * cai_eager_scope_end, so rules never release anything. The engine runs rules with grad mode
 * off, so the ops called here record no graph; with create_graph it runs them with grad
 * mode on, and they record the graph of the gradients (a double backward).
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

/* ---------------------------------------------------------------------------------------
 * Saved values under create_graph. A saved tensor is a detached alias (a node holding its
 * own output's history would be a cycle), so for a double backward the rule gets it back
 * connected, as PyTorch's SavedVariable unpacks: a saved input joins the input's history
 * (the node's own edge for that input: its grad_fn, or the leaf itself), a saved output
 * the node that made it. These tensors live in the rule's scope; the nodes the rule
 * records hold the edges, pointing back into the first graph only, so no cycle forms.
 */
static ca_status alias_with_edge(ca_tensor *t, ca_node *fn, int nr, ca_tensor **out) {
    CA_CHECK(cai_tensor_alias(t, t->ndim, t->shape, t->strides, t->offset, out));
    (*out)->grad_fn = fn; /* the reference passes to the alias */
    (*out)->output_nr = nr;
    (*out)->requires_grad = true;
    return CA_OK;
}

static bool any_edge(const ca_node *n) {
    for (int i = 0; i < n->n_in; i++)
        if (n->next[i].fn)
            return true;
    return false;
}

ca_status cai_saved_reconnect(const ca_node *n, int k, ca_tensor **out) {
    const ca_op_def *row = cai_op_def(n->op);
    const ca_field_desc *fd = &row->fields[n->saved[k].field];
    ca_tensor *t = n->saved[k].t;
    ca_edge e = {0};
    if (fd->src == FROM_INPUT && fd->idx < n->n_in)
        e = n->next[fd->idx];
    else if (fd->src == FROM_OUTPUT)
        e = (ca_edge){(ca_node *)n, fd->idx}; /* output idx of the node itself */
    if (!e.fn) { /* a constant: an input that needs no gradient, indices, masks */
        *out = ca_tensor_retain(t);
        return CA_OK;
    }
    if (e.fn->op == CA_OP_ACCUMULATE_GRAD && e.fn->leaf && !n->saved[k].hooks) {
        *out = ca_tensor_retain(e.fn->leaf); /* the same view: saved inputs alias it whole */
        return CA_OK;
    }
    /* else the values the node saved (what an unpack hook gave back, for a leaf too), with
     * the gradient going where the saved tensor's would */
    ca_status st = alias_with_edge(t, cai_node_retain(e.fn), e.input_nr, out);
    if (st != CA_OK)
        cai_node_release(e.fn);
    return st;
}

/* An aux value that depends on the inputs (layer_norm's mean and rstd) is recomputed from
 * them by the row (row->aux_again), when any input carries a history. */
bool cai_saved_aux_recomputed(const ca_node *n, int k) {
    const ca_op_def *row = cai_op_def(n->op);
    return row->fields[n->saved[k].field].src == FROM_AUX && row->aux_again && any_edge(n);
}

static ca_bval eager_saved(ca_builder *b, const ca_node *n, int k) {
    ca_eager_builder *eb = (ca_eager_builder *)b;
    ca_status st = cai_node_check_saved(n, k);
    if (st != CA_OK) {
        b->status = st;
        return NULL;
    }
    if (!n->saved[k].t) /* an optional input not given */
        return NULL;
    if (!b->create_graph)
        return bv_of(n->saved[k].t);
    if (cai_saved_aux_recomputed(n, k)) /* tracked by the builder calls that make it */
        return cai_op_def(n->op)->aux_again(b, n, cai_op_def(n->op)->fields[n->saved[k].field].idx);
    ca_tensor *t;
    if ((st = cai_saved_reconnect(n, k, &t)) != CA_OK) {
        b->status = st;
        return NULL;
    }
    if (!track(eb, t)) {
        ca_tensor_release(t);
        b->status = err_nomem("the backward's list of temporaries");
        return NULL;
    }
    return bv_of(t);
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

static int64_t eager_size_mul(ca_builder *b, int64_t x, int64_t y) {
    (void)b;
    return x * y;
}

static const ca_builder_vtbl eager_vtbl = {eager_apply,           eager_saved,    eager_meta,
                                           eager_scale_inv_numel, eager_size_add, eager_size_mul};

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
