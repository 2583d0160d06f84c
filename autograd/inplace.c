/* inplace.c - in-place updates (add_, mul_, zero_, fill_, copy_): optimizer steps under
 * no-grad, and in-place ops on tensors in the autograd graph. Each bumps the storage's
 * version counter, which is how backward detects a saved tensor that changed under it.
 *
 * In the graph, an in-place op runs out of place, r = op(self, ...), and self takes r's
 * values and history (cai_tensor_rebase), as PyTorch rebases self's grad_fn onto the op's
 * node: the gradient flows through the op to self's old history. What the op's node saved
 * of self moves to memory of its own first, as PyTorch keeps the original self of an
 * in-place op whose derivative needs it (when saved-tensor hooks packed it instead, the op
 * runs again on a copy of self). Rebasing changes self and, for copy_, may change the
 * source's node: not safe while another thread uses either.
 */
#include "autograd/internal.h"

#include <stdatomic.h>

static ca_status leaf_error(const char *fn) {
    return err_set(CA_STATUS_AUTOGRAD,
                   "a leaf Variable that requires grad is being used in an in-place "
                   "operation. (%s: do the update with grad mode off, "
                   "ca_set_grad_enabled(false), as torch.no_grad() does for optimizer steps.)",
                   fn);
}

/* Whether the update must be recorded (grad mode on, self or other in the graph); a leaf
 * that requires grad is an error then, as in PyTorch. */
static ca_status inplace_check(ca_tensor *self, ca_tensor *other, const char *fn, bool *graph) {
    *graph = false;
    CA_CHECK(ca_init());
    CA_ARG_NOT_NULL(self, fn);
    if (!cai_grad_mode_enabled())
        return CA_OK;
    if (self->requires_grad && !self->grad_fn)
        return leaf_error(fn);
    /* a view of a tensor in the graph too: its base's history must take the update (or,
     * for a view made with grad mode off, PyTorch's error) */
    *graph = self->requires_grad || (other && other->requires_grad) ||
             (self->view_base && self->view_base->requires_grad);
    return CA_OK;
}

/* The values n's backward saved from storage s, moved to memory of their own before s is
 * written: what PyTorch's in-place ops keep as the "original self" when their derivative
 * needs it. False when n holds a value packed by saved-tensor hooks, which cannot be
 * reached (the caller recomputes from a copy instead). */
ca_status cai_node_keep_saved(ca_node *n, const ca_storage *s, bool *ok) {
    *ok = true;
    if (!n)
        return CA_OK;
    for (int i = 0; i < n->n_saved; i++) {
        ca_saved *sv = &n->saved[i];
        if (!sv->t && sv->packed) {
            *ok = false;
            return CA_OK;
        }
        if (!sv->t || sv->t->storage != s)
            continue;
        ca_meta m;
        cai_tensor_meta(sv->t, &m);
        ca_tensor *copy = NULL;
        CA_CHECK(cai_tensor_pointwise(KPW_COPY, &m, 1, &sv->t, 0, 0, &copy));
        bool stale = sv->version != sv->t->storage->version;
        ca_tensor_release(sv->t);
        sv->t = copy;
        sv->version = copy->storage->version;
        if (stale) /* changed in place before this op: backward still reports it */
            copy->storage->version++;
    }
    return CA_OK;
}

/* self's memory takes r's values (same shape and dtype); its version goes up. */
ca_status cai_tensor_write(ca_tensor *self, ca_tensor *r, const char *fn) {
    kern_src src;
    cai_tensor_src(r, self->ndim, self->shape, &src);
    if (cai_kern_pointwise(KPW_COPY, kdt(self->dtype), KERN_F32, self->ndim, self->shape,
                           cai_tensor_ptr(self), self->strides, &src, 0, 0) != 0)
        return err_set(CA_STATUS_DTYPE, "%s: not supported for %s tensors", fn,
                       ca_dtype_name(self->dtype));
    cai_tensor_bump_version(self);
    return CA_OK;
}

void cai_tensor_take_history(ca_tensor *t, ca_node *node, int output_nr, bool requires_grad) {
    ca_node *old = t->grad_fn;
    int old_nr = t->output_nr;
    t->grad_fn = node ? cai_node_retain(node) : NULL;
    t->output_nr = output_nr;
    t->requires_grad = requires_grad;
    if (t->retains_grad && old && node_retained(old, old_nr) == t)
        node_set_retained(old, old_nr, NULL); /* retain_grad follows t to the new node */
    if (t->retains_grad && t->grad_fn)
        node_set_retained(t->grad_fn, t->output_nr, t);
    if (old)
        cai_node_release(old);
}

/* Whether a node on r's history recorded since mark, other than r's own (whose saved
 * values cai_node_keep_saved keeps), saved memory s, or values packed by saved-tensor
 * hooks (which might be s): the op that made r from self then needs self's old values
 * inside, and must run again on a copy of self. Beyond WALK_MOST nodes it says so too. */
#define WALK_MOST 256
static bool inner_saved(const ca_node *r, const ca_storage *s, uint64_t mark) {
    const ca_node *seen[WALK_MOST], *stack[WALK_MOST];
    int n_seen = 0, top = 0;
    for (int i = 0; r && i < r->n_in; i++)
        if (r->next[i].fn && top < WALK_MOST)
            stack[top++] = r->next[i].fn;
    while (top > 0) {
        const ca_node *n = stack[--top];
        if (n->seq < mark || n->seq == UINT64_MAX) /* older, or a leaf's accumulator */
            continue;
        bool again = false;
        for (int k = 0; k < n_seen && !again; k++)
            again = seen[k] == n;
        if (again)
            continue;
        if (n_seen == WALK_MOST)
            return true;
        seen[n_seen++] = n;
        for (int i = 0; i < n->n_saved; i++)
            if ((n->saved[i].t && n->saved[i].t->storage == s) ||
                (!n->saved[i].t && n->saved[i].packed))
                return true;
        for (int i = 0; i < n->n_in; i++)
            if (n->next[i].fn) {
                if (top == WALK_MOST)
                    return true;
                stack[top++] = n->next[i].fn;
            }
    }
    return false;
}

ca_status cai_tensor_rebase(ca_tensor *self, ca_tensor *r, bool *done, const char *fn) {
    return cai_tensor_rebase_since(self, r, UINT64_MAX, done, fn);
}

ca_status cai_tensor_rebase_since(ca_tensor *self, ca_tensor *r, uint64_t mark, bool *done,
                                  const char *fn) {
    *done = false;
    if (self->requires_grad && !self->grad_fn)
        return leaf_error(fn);
    ca_meta ms, mr;
    cai_tensor_meta(self, &ms);
    cai_tensor_meta(r, &mr);
    if (ms.dtype != mr.dtype || !cai_meta_same_shape(&ms, &mr))
        return err_set(CA_STATUS_SHAPE, "%s: the result does not fit self in place", fn);
    if (mark != UINT64_MAX && inner_saved(r->grad_fn, self->storage, mark))
        return CA_OK; /* *done false: compute r again from a copy of self */
    if (self->view_base)
        return cai_view_rebase(self, r, done, fn);
    bool ok;
    CA_CHECK(cai_node_keep_saved(r->grad_fn, self->storage, &ok));
    if (!ok)
        return CA_OK;
    CA_CHECK(cai_tensor_write(self, r, fn));
    cai_tensor_take_history(self, r->grad_fn, r->output_nr, r->requires_grad);
    /* a custom node's name lives with it: version errors then name the saved grad_fn */
    self->storage->rebased_by =
        self->grad_fn && !self->grad_fn->custom ? cai_node_name(self->grad_fn) : NULL;
    self->storage->history_epoch++; /* views of self replay their ops on its new history */
    *done = true;
    return CA_OK;
}

/* r = op(x, other) out of place, for the in-place op `op` in the graph. */
static ca_status inplace_compute(ca_tensor *x, ca_tensor *other, kern_pw_op op, double p0,
                                 ca_tensor **r) {
    *r = NULL;
    switch (op) {
    case KPW_ADD: {
        if (p0 == 1)
            return ca_add(x, other, r);
        ca_tensor *scaled = NULL;
        CA_CHECK(ca_mul_scalar(other, p0, &scaled));
        ca_status st = ca_add(x, scaled, r);
        ca_tensor_release(scaled);
        return st;
    }
    case KPW_MUL: return ca_mul(x, other, r);
    case KPW_MUL_S: return ca_mul_scalar(x, p0, r);
    default: return err_set(CA_STATUS_INVALID, "in-place op %d has no graph form", (int)op);
    }
}

/* self = op(self, other) in the graph: out of place, then rebased onto self; again from a
 * clone of self when the op's node saved self. copy_ takes src's values and history
 * (broadcast and converted to self's dtype). */
static ca_status inplace_graph(ca_tensor *self, ca_tensor *other, kern_pw_op op, double p0,
                               const char *fn) {
    ca_tensor *r = NULL, *c = NULL;
    bool done = false;
    ca_status st;
    if (op == KPW_COPY) {
        /* src's own node may have saved self (self.copy_(f(self))): keep those values */
        bool ok;
        st = cai_node_keep_saved(other->grad_fn, self->storage, &ok);
        ca_tensor *conv = ca_tensor_retain(other), *wide = NULL;
        if (st == CA_OK && other->dtype != self->dtype) {
            ca_tensor_release(conv);
            conv = NULL;
            st = ca_to_dtype(other, self->dtype, &conv);
        }
        ca_meta mc, ms;
        if (st == CA_OK) {
            cai_tensor_meta(conv, &mc);
            cai_tensor_meta(self, &ms);
        }
        if (st == CA_OK && !cai_meta_same_shape(&mc, &ms))
            st = ca_expand(conv, self->ndim, self->shape, &wide);
        else if (st == CA_OK)
            wide = ca_tensor_retain(conv);
        if (st == CA_OK) /* a node of its own, over fresh memory */
            st = ca_mul_scalar(wide, 1.0, &r);
        ca_tensor_release(conv);
        ca_tensor_release(wide);
    } else {
        st = inplace_compute(self, other, op, p0, &r);
    }
    if (st == CA_OK)
        st = cai_tensor_rebase(self, r, &done, fn);
    if (st == CA_OK && !done) {
        ca_tensor_release(r);
        r = NULL;
        st = ca_mul_scalar(self, 1.0, &c); /* a differentiable copy */
        if (st == CA_OK)
            st = inplace_compute(c, other, op, p0, &r);
        if (st == CA_OK)
            st = cai_tensor_rebase(self, r, &done, fn);
    }
    ca_tensor_release(r);
    ca_tensor_release(c);
    return st;
}

/* self = op(self, other) with other broadcast to self's shape. */
static ca_status inplace_binary(ca_tensor *self, ca_tensor *other, kern_pw_op op, double p0,
                                const char *fn) {
    CA_ARG_NOT_NULL(other, fn);
    bool graph;
    CA_CHECK(inplace_check(self, other, fn, &graph));
    ca_meta ms, mo, mb;
    cai_tensor_meta(self, &ms);
    cai_tensor_meta(other, &mo);
    if (ms.dtype != mo.dtype)
        return err_set(CA_STATUS_DTYPE,
                       "%s: self is %s but other is %s; convert other with "
                       "ca_to_dtype",
                       fn, ca_dtype_name(ms.dtype), ca_dtype_name(mo.dtype));
    CA_CHECK(cai_meta_broadcast(&ms, &mo, &mb, fn));
    if (!cai_meta_same_shape(&mb, &ms)) {
        char s1[96], s2[96];
        return err_set(CA_STATUS_SHAPE,
                       "%s: other of shape %s cannot be broadcast to self's "
                       "shape %s in place",
                       fn, cai_err_shape_str(mo.ndim, mo.shape, s1, 96),
                       cai_err_shape_str(ms.ndim, ms.shape, s2, 96));
    }
    if (graph)
        return inplace_graph(self, other, op, p0, fn);
    kern_src src[2];
    cai_tensor_src(self, ms.ndim, ms.shape, &src[0]);
    cai_tensor_src(other, ms.ndim, ms.shape, &src[1]);
    const kern_src *s = op == KPW_COPY ? &src[1] : src; /* copy reads only other */
    if (cai_kern_pointwise(op, kdt(ms.dtype), KERN_F32, ms.ndim, ms.shape, cai_tensor_ptr(self),
                           self->strides, s, p0, 0) != 0)
        return err_set(CA_STATUS_DTYPE, "%s: not supported for %s tensors", fn,
                       ca_dtype_name(ms.dtype));
    cai_tensor_bump_version(self);
    return CA_OK;
}

/* fill_ / zero_ of a tensor in the graph: self = where(false, self, value), whose values
 * are all value and whose gradient to self's old history is zero, as PyTorch's
 * FillBackward0 (self keeps requiring grad). */
static ca_status fill_graph(ca_tensor *self, double value, const char *fn) {
    ca_meta none = {.dtype = CA_BOOL, .ndim = 0};
    ca_tensor *no = NULL, *r = NULL;
    bool done = false;
    ca_status st = cai_tensor_full(&none, 0.0, &no);
    if (st == CA_OK)
        st = ca_where_scalar(no, self, value, &r);
    if (st == CA_OK)
        st = cai_tensor_rebase(self, r, &done, fn);
    ca_tensor_release(no);
    ca_tensor_release(r);
    return st;
}

/* self = op(self) with scalar p0. */
static ca_status inplace_unary(ca_tensor *self, kern_pw_op op, double p0, const char *fn) {
    bool graph;
    CA_CHECK(inplace_check(self, NULL, fn, &graph));
    if (graph && op == KPW_MUL_S)
        return inplace_graph(self, NULL, op, p0, fn);
    if (graph)
        return fill_graph(self, p0, fn);
    kern_src src;
    cai_tensor_src(self, self->ndim, self->shape, &src);
    if (cai_kern_pointwise(op, kdt(self->dtype), KERN_F32, self->ndim, self->shape,
                           cai_tensor_ptr(self), self->strides, &src, p0, 0) != 0)
        return err_set(CA_STATUS_DTYPE, "%s: not supported for %s tensors", fn,
                       ca_dtype_name(self->dtype));
    cai_tensor_bump_version(self);
    return CA_OK;
}

ca_status ca_tensor_rebase_(ca_tensor *self, ca_tensor *result, bool *done) {
    return ca_tensor_rebase_since_(self, result, UINT64_MAX, done);
}

uint64_t ca_graph_mark(void) {
    return cai_node_peek_seq();
}

ca_status ca_tensor_rebase_since_(ca_tensor *self, ca_tensor *result, uint64_t mark, bool *done) {
    CA_ARG_NOT_NULL(done, "ca_tensor_rebase_");
    *done = false;
    CA_CHECK(ca_init());
    CA_ARG_NOT_NULL(self, "ca_tensor_rebase_");
    CA_ARG_NOT_NULL(result, "ca_tensor_rebase_");
    return cai_tensor_rebase_since(self, result, mark, done, "ca_tensor_rebase_");
}

ca_status ca_add_(ca_tensor *self, ca_tensor *other, double alpha) {
    return inplace_binary(self, other, KPW_ADD, alpha, "ca_add_");
}

ca_status ca_mul_(ca_tensor *self, ca_tensor *other) {
    return inplace_binary(self, other, KPW_MUL, 0, "ca_mul_");
}

ca_status ca_copy_(ca_tensor *self, ca_tensor *src) {
    return inplace_binary(self, src, KPW_COPY, 0, "ca_copy_");
}

ca_status ca_mul_scalar_(ca_tensor *self, double s) {
    return inplace_unary(self, KPW_MUL_S, s, "ca_mul_scalar_");
}

ca_status ca_zero_(ca_tensor *self) {
    return inplace_unary(self, KPW_FILL, 0, "ca_zero_");
}

ca_status ca_fill_(ca_tensor *self, double value) {
    return inplace_unary(self, KPW_FILL, value, "ca_fill_");
}
