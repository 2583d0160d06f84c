/* saved_hooks.c - saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks).
 *
 * While hooks are pushed on a thread, every tensor an op saves for backward goes through
 * pack; the node keeps what pack returned instead of the tensor. A backward unpacks them
 * all when it starts (so the eager rules, the compiled key and its trace see tensors, as
 * without hooks) and drops the unpacked tensors when it ends, so each backward unpacks
 * afresh. The version check is the hooks' business then, as in PyTorch: an unpacked
 * tensor is whatever unpack made.
 */
#include "autograd/internal.h"

struct cai_saved_hooks {
    cai_refcnt refcnt;
    ca_pack_hook_fn pack;
    ca_unpack_hook_fn unpack;
    ca_ctx_free_fn free_packed;
    void *ctx;
    ca_ctx_free_fn ctx_free;
    cai_saved_hooks *below; /* the stack, while pushed */
};

static _Thread_local cai_saved_hooks *top;

static void hooks_release(cai_saved_hooks *h) {
    if (!h || !ref_dec(&h->refcnt))
        return;
    if (h->ctx_free)
        h->ctx_free(h->ctx);
    cai_mem_free(h);
}

ca_status ca_saved_tensors_hooks_push(ca_pack_hook_fn pack, ca_unpack_hook_fn unpack,
                                      ca_ctx_free_fn free_packed, void *ctx,
                                      ca_ctx_free_fn ctx_free) {
    if (!pack || !unpack)
        return err_set(CA_STATUS_INVALID,
                       "ca_saved_tensors_hooks_push: pack and unpack are both required");
    cai_saved_hooks *h = cai_mem_calloc(1, sizeof *h);
    if (!h)
        return err_nomem("saved-tensor hooks");
    *h = (cai_saved_hooks){1, pack, unpack, free_packed, ctx, ctx_free, top};
    top = h;
    return CA_OK;
}

ca_status ca_saved_tensors_hooks_pop(void) {
    if (!top)
        return err_set(CA_STATUS_INVALID, "ca_saved_tensors_hooks_pop: no saved-tensor hooks "
                                          "are pushed on this thread");
    cai_saved_hooks *h = top;
    top = h->below;
    h->below = NULL;
    hooks_release(h);
    return CA_OK;
}

ca_status cai_saved_pack(ca_saved *s) {
    if (!top || !s->t)
        return CA_OK;
    cai_tensor_meta(s->t, &s->meta);
    void *packed = NULL;
    uint64_t gen = cai_err_generation();
    bool prev = ca_set_grad_enabled(false);
    ca_status st = top->pack(s->t, &packed, top->ctx);
    ca_set_grad_enabled(prev);
    if (st != CA_OK)
        return cai_err_generation() == gen
                   ? err_set(CA_STATUS_HOOK, "a pack hook failed with %s and set no message",
                             ca_status_name(st))
                   : st;
    s->packed = packed;
    s->hooks = top;
    ref_inc(&top->refcnt);
    ca_tensor_release(s->t);
    s->t = NULL;
    return CA_OK;
}

static ca_status unpack_one(ca_saved *s) {
    ca_tensor *t = NULL;
    uint64_t gen = cai_err_generation();
    ca_status st = s->hooks->unpack(s->packed, &t, s->hooks->ctx);
    if (st != CA_OK) {
        ca_tensor_release(t);
        return cai_err_generation() == gen
                   ? err_set(CA_STATUS_HOOK, "an unpack hook failed with %s and set no message",
                             ca_status_name(st))
                   : st;
    }
    ca_meta m = {0};
    if (t)
        cai_tensor_meta(t, &m);
    if (!t || !cai_meta_same_shape(&m, &s->meta) || m.dtype != s->meta.dtype) {
        char s1[96], s2[96];
        ca_tensor_release(t);
        return err_set(CA_STATUS_HOOK,
                       "an unpack hook gave back %s%s for a saved tensor of %s%s; it must give "
                       "back a tensor of the saved tensor's shape and dtype",
                       t ? ca_dtype_name(m.dtype) : "nothing",
                       t ? cai_err_shape_str(m.ndim, m.shape, s1, 96) : "",
                       ca_dtype_name(s->meta.dtype),
                       cai_err_shape_str(s->meta.ndim, s->meta.shape, s2, 96));
    }
    s->t = t;
    return CA_OK;
}

ca_status cai_saved_unpack(ca_node *n) {
    for (int i = 0; i < n->n_saved; i++)
        if (n->saved[i].hooks && !n->saved[i].t && !n->released)
            CA_CHECK(unpack_one(&n->saved[i]));
    return CA_OK;
}

ca_status cai_saved_read(ca_saved *s, ca_tensor **out) {
    *out = NULL;
    if (s->t) {
        *out = ca_tensor_retain(s->t);
        return CA_OK;
    }
    if (!s->hooks)
        return CA_OK;
    CA_CHECK(unpack_one(s)); /* into s->t, checked against the saved meta */
    *out = s->t;
    s->t = NULL;
    return CA_OK;
}

void cai_saved_drop_unpacked(ca_node *n) {
    for (int i = 0; i < n->n_saved; i++)
        if (n->saved[i].hooks) {
            ca_tensor_release(n->saved[i].t);
            n->saved[i].t = NULL;
        }
}

void cai_saved_free_packed(ca_saved *s) {
    if (!s->hooks)
        return;
    if (s->hooks->free_packed)
        s->hooks->free_packed(s->packed);
    s->packed = NULL;
    hooks_release(s->hooks);
    s->hooks = NULL;
}
