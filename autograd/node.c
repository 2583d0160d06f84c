/* node.c - autograd nodes: refcounts, names, and the leaves' AccumulateGrad nodes.
 *
 * Ownership runs one way to avoid cycles: a tensor owns its grad_fn, a node owns the
 * nodes of its next edges and its saved tensors (detached aliases), and an AccumulateGrad
 * node owns its leaf. The leaf points back to that node only weakly.
 */
#include <stdio.h>
#include <string.h>

#include "autograd/internal.h"

ca_node *cai_node_retain(ca_node *n) {
    if (n)
        ref_inc(&n->refcnt);
    return n;
}

void cai_node_release_saved(ca_node *n) {
    if (n->custom && n->custom->fn.release && !n->released)
        n->custom->fn.release(n->custom->fn.ctx);
    for (int i = 0; i < n->n_saved; i++) {
        ca_tensor_release(n->saved[i].t);
        n->saved[i].t = NULL;
        cai_node_release(n->saved[i].origin);
        n->saved[i].origin = NULL;
        cai_saved_free_packed(&n->saved[i]);
    }
    n->released = true;
}

void cai_node_release(ca_node *n) {
    /* Iterative, with an intrusive worklist, so that freeing a long chain (a graph of 10k
     * ops) cannot overflow the stack and needs no allocation. */
    if (!n || !ref_dec(&n->refcnt))
        return;
    n->free_link = NULL;
    ca_node *work = n;
    while (work) {
        n = work;
        work = n->free_link;
        cai_node_release_saved(n);
        cai_hook_list_free(&n->pre_hooks);
        cai_hook_list_free(&n->node_pre_hooks);
        cai_hook_list_free(&n->node_post_hooks);
        for (int k = 0; k < n->n_out; k++) {
            ca_tensor *r = node_retained(n, k);
            if (r)
                r->retains_grad = false;
        }
        cai_custom_free(n);
        cai_mem_free(n->outs);
        if (n->user_free)
            n->user_free(n->user);
        if (n->leaf) {
            /* under the leaf's lock: another thread may be looking it up (its count is 0
             * now, so it makes a new one) */
            cai_grad_lock(n->leaf);
            if (n->leaf->grad_accumulator == n)
                n->leaf->grad_accumulator = NULL;
            cai_grad_unlock(n->leaf);
            ca_tensor_release(n->leaf);
        }
        for (int i = 0; i < n->n_in; i++) {
            ca_node *c = n->next[i].fn;
            if (c && ref_dec(&c->refcnt)) {
                c->free_link = work;
                work = c;
            }
        }
        cai_mem_free(n);
    }
}

const char *cai_node_name(const ca_node *n) {
    if (n->custom)
        return n->custom->name;
    const ca_op_def *row = cai_op_def(n->op);
    if (row && row->node_name_of)
        return row->node_name_of(&n->attrs);
    return row ? row->node_name : "UnknownBackward";
}

/* One allocation holds the node and its per-input arrays. */
ca_status cai_node_alloc(int op, int n_in, ca_node **out) {
    size_t size = sizeof(ca_node) + (size_t)n_in * (sizeof(ca_edge) + sizeof(ca_meta));
    ca_node *n = cai_mem_calloc(1, size);
    if (!n)
        return err_nomem("an autograd node");
    atomic_init(&n->refcnt, 1);
    n->op = op;
    n->n_in = n_in;
    n->n_out = 1;
    n->in_meta = (ca_meta *)(n + 1);
    n->next = (ca_edge *)(n->in_meta + n_in);
    n->graph_id = cai_fwd_graph_current();
    n->seq = cai_node_next_seq();
    *out = n;
    return CA_OK;
}

/* A weak pointer made strong under the leaf's lock: threads recording forwards through
 * one model share its leaves' nodes, and one may be dropping the last reference. */
ca_status cai_node_grad_accumulator(ca_tensor *leaf, ca_node **out) {
    cai_grad_lock(leaf);
    ca_node *have = leaf->grad_accumulator;
    if (have && ref_inc_unless_zero(&have->refcnt)) {
        cai_grad_unlock(leaf);
        *out = have;
        return CA_OK;
    }
    ca_node *n;
    ca_status st = cai_node_alloc(CA_OP_ACCUMULATE_GRAD, 0, &n);
    if (st != CA_OK) {
        cai_grad_unlock(leaf);
        return st;
    }
    /* Accumulate as soon as ready (as PyTorch does), whenever the node was made: a leaf's
     * accumulator can outlive one step while older tensors keep it, and the walk order,
     * and so the compiled-autograd cache key, must not depend on that. */
    n->seq = UINT64_MAX;
    cai_tensor_meta(leaf, &n->out_meta);
    n->leaf = ca_tensor_retain(leaf);
    leaf->grad_accumulator = n;
    cai_grad_unlock(leaf);
    *out = n;
    return CA_OK;
}

ca_node *cai_node_grad_accumulator_peek(ca_tensor *leaf) {
    cai_grad_lock(leaf);
    ca_node *n = leaf->grad_accumulator;
    cai_grad_unlock(leaf);
    return n;
}

/* torch's name for a tensor's type in its messages: [torch.FloatTensor [2, 3]] */
static const char *torch_type_name(ca_dtype dt) {
    switch (dt) {
    case CA_FLOAT32: return "torch.FloatTensor";
    case CA_FLOAT64: return "torch.DoubleTensor";
    case CA_INT64: return "torch.LongTensor";
    default: return "torch.BoolTensor";
    }
}

/* ", which is output 0 of Mul," for a saved tensor that is a node's output, as PyTorch
 * writes it (the node's name without its "Backward<k>" suffix): the node of the last
 * in-place op on its memory, else its grad_fn when saved, or n itself for n's output. */
static void saved_origin(const ca_node *n, const ca_saved *s, char *buf, size_t size) {
    const char *name = NULL;
    int nr = 0;
    if (cai_op_def(n->op)->fields[s->field].src == FROM_OUTPUT)
        name = cai_node_name(n);
    else if (s->t && s->t->storage->rebased_by)
        name = s->t->storage->rebased_by;
    else if (s->origin) {
        name = cai_node_name(s->origin);
        nr = s->origin_nr;
    }
    buf[0] = '\0';
    if (!name)
        return;
    size_t len = strlen(name);
    while (len > 0 && name[len - 1] >= '0' && name[len - 1] <= '9')
        len--;
    if (len > 8 && strncmp(name + len - 8, "Backward", 8) == 0)
        len -= 8;
    snprintf(buf, size, ", which is output %d of %.*s,", nr, (int)len, name);
}

/* The messages start with torch's own words (PyTorch's tests match them), then say which
 * node and field it was. */
ca_status cai_node_check_saved(const ca_node *n, int k) {
    const ca_saved *s = &n->saved[k];
    const ca_op_def *row = cai_op_def(n->op);
    const char *field = row->fields[s->field].name;
    if (n->released)
        return err_set(
            CA_STATUS_AUTOGRAD,
            "Trying to backward through the graph a second time (or directly access saved "
            "tensors after they have already been freed). Saved intermediate values of the "
            "graph are freed when you call .backward() or autograd.grad(). Specify "
            "retain_graph=True if you need to backward through the graph a second time or if "
            "you need to access saved tensors after calling backward. (%s's saved '%s' was "
            "freed by an earlier backward.)",
            row->node_name, field);
    if (s->t && !s->hooks && s->origin && s->t->storage->detach_epoch != s->detach_epoch)
        return err_set(CA_STATUS_AUTOGRAD,
                       "Trying to use a saved tensor that has been detached in-place, i.e. with "
                       ".detach_().This is not supported, please use out-of-place `.detach()` "
                       "instead (%s's saved '%s')",
                       row->node_name, field);
    if (s->t && !s->hooks && s->t->storage->version != s->version) {
        char shape[128], origin[160];
        saved_origin(n, s, origin, sizeof origin);
        return err_set(
            CA_STATUS_AUTOGRAD,
            "one of the variables needed for gradient computation has been modified by an "
            "inplace operation: [%s %s]%s is at version %llu; expected version %llu instead. "
            "Hint: enable anomaly detection to find the operation that failed to compute its "
            "gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False). (It was "
            "saved as '%s' by %s: do not change it in place before backward(), or change a "
            "copy, clone(), instead.)",
            torch_type_name(s->t->dtype), cai_err_shape_str(s->t->ndim, s->t->shape, shape, 128),
            origin, (unsigned long long)s->t->storage->version, (unsigned long long)s->version,
            field, row->node_name);
    }
    return CA_OK;
}

/* ---------------------------------------------------------------------------------------
 * The public view of nodes
 */
ca_node *ca_tensor_grad_fn(const ca_tensor *t) {
    return t ? cai_tensor_synced(t)->grad_fn : NULL;
}

ca_status ca_tensor_grad_accumulator(ca_tensor *t, ca_node **out) {
    CA_ARG_NOT_NULL(out, "ca_tensor_grad_accumulator");
    *out = NULL;
    CA_ARG_NOT_NULL(t, "ca_tensor_grad_accumulator");
    if (t->grad_fn || !t->requires_grad)
        return err_set(CA_STATUS_AUTOGRAD,
                       "ca_tensor_grad_accumulator: only a leaf that requires grad has an "
                       "AccumulateGrad node (this tensor %s)",
                       t->grad_fn ? "is not a leaf" : "does not require grad");
    return cai_node_grad_accumulator(t, out);
}

ca_node *ca_node_retain(ca_node *n) {
    return cai_node_retain(n);
}

void ca_node_release(ca_node *n) {
    cai_node_release(n);
}

const char *ca_node_name(const ca_node *n) {
    return n ? cai_node_name(n) : NULL;
}

int ca_node_n_next(const ca_node *n) {
    return n ? n->n_in : 0;
}

ca_node *ca_node_next(const ca_node *n, int i, int *input_nr) {
    if (input_nr)
        *input_nr = 0;
    if (!n || i < 0 || i >= n->n_in)
        return NULL;
    if (input_nr)
        *input_nr = n->next[i].input_nr;
    return n->next[i].fn;
}

int ca_node_n_outputs(const ca_node *n) {
    return n ? n->n_out : 0;
}

ca_tensor *ca_node_variable(const ca_node *n) {
    return n && n->op == CA_OP_ACCUMULATE_GRAD ? n->leaf : NULL;
}

void ca_node_set_user_data(ca_node *n, void *data, ca_ctx_free_fn ctx_free) {
    if (!n)
        return;
    if (n->user_free)
        n->user_free(n->user);
    n->user = data;
    n->user_free = ctx_free;
}

void *ca_node_user_data(const ca_node *n) {
    return n ? n->user : NULL;
}

const ca_custom_function *ca_node_custom(const ca_node *n) {
    return n && n->custom ? &n->custom->fn : NULL;
}
