/* compiled_callout.c - the call-outs of a compiled backward (see compiled_callout.h).
 *
 * Each call-out runs the eager engine's own code on tensors: cai_custom_backward for a
 * custom function, cai_hook_run_node_pre / _post for one node hook, with the same checks
 * and messages. A result the graph reads but the callee left out (a custom backward or a
 * hook returning None for a gradient the graph was traced to carry on) is zeros.
 */
#include "autograd/compiled_callout.h"

#include <string.h>

void cai_view_of(const ca_tensor *t, graph_view *v) {
    v->data = cai_tensor_ptr(t);
    v->dtype = kdt(t->dtype);
    v->ndim = t->ndim;
    memcpy(v->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    memcpy(v->strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
}

void cai_view_copy_into(const graph_view *v, ca_tensor *dst) {
    kern_src src = {.data = v->data};
    memcpy(src.strides, v->strides, sizeof(int64_t) * (size_t)v->ndim);
    cai_kern_pointwise(KPW_COPY, v->dtype, KERN_F32, v->ndim, v->shape, cai_tensor_ptr(dst),
                       dst->strides, &src, 0, 0);
}

ca_status cai_tensor_from_view(const graph_view *v, ca_tensor **out) {
    ca_meta m = {.dtype = (ca_dtype)v->dtype, .ndim = v->ndim};
    memcpy(m.shape, v->shape, sizeof(int64_t) * (size_t)v->ndim);
    CA_CHECK(cai_tensor_new(&m, out));
    cai_view_copy_into(v, *out);
    return CA_OK;
}

ca_status cai_callout_keep(callout_state *s, ca_tensor *t) {
    if (!mem_grow((void **)&s->keep, &s->cap_keep, s->n_keep + 1, sizeof(ca_tensor *))) {
        ca_tensor_release(t);
        return err_nomem("the call-out results of a compiled backward");
    }
    s->keep[s->n_keep++] = t;
    return CA_OK;
}

static void staged_clear(callout_state *s) {
    for (int i = 0; i < s->n_args; i++)
        ca_tensor_release(s->args[i]);
    for (int i = 0; i < s->n_res; i++)
        ca_tensor_release(s->res[i]);
    cai_mem_free(s->args); /* one block with res */
    s->args = s->res = NULL;
    s->n_args = s->n_res = 0;
    s->cur = 0;
}

/* Start staging call-out `num` unless it is the one being staged. */
static ca_status begin(callout_state *s, int num) {
    if (s->cur == num + 1)
        return CA_OK;
    staged_clear(s);
    const trace_callout *c = &s->table[num];
    size_t slots = (size_t)c->n_args + (size_t)c->n_res;
    if (!(s->args = cai_mem_calloc(slots ? slots : 1, sizeof(ca_tensor *))))
        return err_nomem("a compiled backward's call-out");
    s->res = s->args + c->n_args;
    s->n_args = c->n_args;
    s->cur = num + 1;
    return CA_OK;
}

ca_status cai_callout_arg(callout_state *s, const graph_node *x, const graph_view *in) {
    CA_CHECK(begin(s, (int)x->a.i[0]));
    ca_tensor **slot = &s->args[x->a.i[1]];
    ca_tensor_release(*slot);
    *slot = NULL;
    return cai_tensor_from_view(in, slot);
}

/* Just hook h of its list, so each hook is its own call-out. */
static ca_hook one_hook(const key_hook *kh) {
    ca_hook h = *kh->hook;
    h.next = NULL;
    return h;
}

static ca_status call_by_kind(callout_state *s, const trace_callout *c, ca_node *n) {
    ca_hook h;
    switch (c->kind) {
    case CALLOUT_CUSTOM: return cai_custom_backward(n, s->args, s->res);
    case CALLOUT_NODE_PRE:
        h = one_hook(&s->k->hooks[c->hook]);
        for (int o = 0; o < c->n_res; o++)
            s->res[o] = ca_tensor_retain(s->args[o]);
        return cai_hook_run_node_pre(&h, n->n_out, s->res, n);
    case CALLOUT_NODE_POST:
        h = one_hook(&s->k->hooks[c->hook]);
        for (int i = 0; i < c->n_res; i++)
            s->res[i] = ca_tensor_retain(s->args[i]);
        return cai_hook_run_node_post(&h, n->n_in, s->res, n->n_out, s->args + n->n_in, n);
    }
    return err_set(CA_STATUS_INTERNAL, "call-out of kind %d", (int)c->kind);
}

ca_status cai_callout_call(callout_state *s, const graph_node *x) {
    int num = (int)x->a.i[0];
    CA_CHECK(begin(s, num));
    const trace_callout *c = &s->table[num];
    ca_node *n = s->k->nodes[c->call - 1];
    s->n_res = c->n_res;
    return call_by_kind(s, c, n);
}

ca_status cai_callout_result(callout_state *s, const graph_node *x, graph_view *out) {
    int num = (int)x->a.i[0], i = (int)x->a.i[1];
    if (s->cur != num + 1 || i >= s->n_res)
        return err_set(CA_STATUS_INTERNAL,
                       "compiled backward: result %d of call-out %d read before its call", i, num);
    const trace_callout *c = &s->table[num];
    ca_node *n = s->k->nodes[c->call - 1];
    if (!s->res[i]) { /* left out: zeros of the gradient's meta */
        const ca_meta *m = c->kind == CALLOUT_NODE_PRE ? node_out_meta(n, i) : &n->in_meta[i];
        CA_CHECK(cai_tensor_full(m, 0.0, &s->res[i]));
    }
    CA_CHECK(cai_callout_keep(s, ca_tensor_retain(s->res[i])));
    cai_view_of(s->res[i], out);
    return CA_OK;
}

ca_tensor *cai_callout_take(callout_state *s, const graph_view *v) {
    ca_tensor *t = NULL;
    int64_t held = 0;
    for (int i = 0; i < s->n_keep; i++)
        if (cai_tensor_ptr(s->keep[i]) == v->data && (!t || s->keep[i] == t)) {
            t = s->keep[i];
            held++;
        }
    for (int i = 0; t && i < s->n_res; i++)
        held += s->res[i] == t;
    if (!t || ref_count(&t->refcnt) != held || ref_count(&t->storage->refcnt) != 1 ||
        t->storage->external || !ca_tensor_is_contiguous(t) || kdt(t->dtype) != v->dtype ||
        t->ndim != v->ndim || memcmp(t->shape, v->shape, sizeof(int64_t) * (size_t)v->ndim) != 0)
        return NULL;
    return ca_tensor_retain(t);
}

void cai_callout_end(callout_state *s) {
    staged_clear(s);
    for (int i = 0; i < s->n_keep; i++)
        ca_tensor_release(s->keep[i]);
    cai_mem_free(s->keep);
    s->keep = NULL;
    s->n_keep = s->cap_keep = 0;
}
