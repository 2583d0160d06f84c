/* compiled_key.c - collect the compiled backward's cache key from one walk.
 *
 * For every node, in walk order, its key bytes hold what must be equal for a compiled
 * graph to be reused: the op, the edge structure (which NodeCall each input's gradient
 * goes to), the scalar and flag attributes its row's fields name, dtypes and ranks, and
 * hook counts. Sizes never go into the bytes: each one becomes a size slot, so a change of
 * size is told apart from a change of graph (and can become a dynamic dim). Tensors become
 * lifted inputs, deduplicated by identity; hooks are lifted by position.
 */
#include "autograd/compiled_key.h"

#include <stdio.h>
#include <string.h>

static ca_status grow(void **p, int *cap, int need, size_t elem) {
    return mem_grow(p, cap, need, elem) ? CA_OK : err_nomem("the compiled backward's key");
}

/* ---- key bytes ---- */
static ca_status put(key_collect *k, const void *v, int len) {
    CA_CHECK(grow((void **)&k->bytes, &k->cap_bytes, k->n_bytes + len, 1));
    memcpy(k->bytes + k->n_bytes, v, (size_t)len);
    k->n_bytes += len;
    return CA_OK;
}

static ca_status put_i64(key_collect *k, int64_t v) {
    return put(k, &v, sizeof v);
}
static ca_status put_i32(key_collect *k, int32_t v) {
    return put(k, &v, sizeof v);
}
static ca_status put_f64(key_collect *k, double v) {
    return put(k, &v, sizeof v);
}

/* ---- size slots ---- */
static ca_status lift_size(key_collect *k, int64_t v, key_slot_owner o) {
    int n = k->n_sizes;
    CA_CHECK(grow((void **)&k->sizes, &k->cap_sizes, n + 1, sizeof(int64_t)));
    CA_CHECK(grow((void **)&k->owners, &k->cap_owners, n + 1, sizeof(key_slot_owner)));
    k->sizes[n] = v;
    k->owners[n] = o;
    k->n_sizes = n + 1;
    return CA_OK;
}

static ca_status lift_shape(key_collect *k, const ca_meta *m, key_slot_owner o) {
    CA_CHECK(put_i32(k, (int32_t)m->dtype * 16 + m->ndim));
    for (o.dim = 0; o.dim < m->ndim; o.dim++)
        CA_CHECK(lift_size(k, m->shape[o.dim], o));
    return CA_OK;
}

/* ---- lifted tensors ---- */
/* Lifting runs on every compiled backward, hits included, so finding a tensor already
 * lifted is a hash probe, not a scan of all lifted tensors. */
static uint32_t lift_slot(const key_collect *k, const ca_tensor *t, key_lift_kind kind) {
    uint64_t h = (uint64_t)(uintptr_t)t->storage * 0x9E3779B97F4A7C15ull;
    h ^= ((uint64_t)t->offset + (uint64_t)kind * 0x85EBCA6Bull) * 0xC2B2AE3D27D4EB4Full;
    return (uint32_t)(h >> 32) & (uint32_t)(k->hash_cap - 1);
}

int cai_key_find_lifted(const key_collect *k, const ca_tensor *t, key_lift_kind kind) {
    if (k->hash_cap == 0)
        return -1;
    for (uint32_t s = lift_slot(k, t, kind);; s = (s + 1) & (uint32_t)(k->hash_cap - 1)) {
        int32_t i = k->lift_hash[s];
        if (i < 0)
            return -1;
        if (k->lifted[i].kind == kind && cai_tensor_same_view(k->lifted[i].t, t))
            return i;
    }
}

static void hash_insert(key_collect *k, int idx) {
    const key_lifted *l = &k->lifted[idx];
    uint32_t s = lift_slot(k, l->t, l->kind);
    while (k->lift_hash[s] >= 0)
        s = (s + 1) & (uint32_t)(k->hash_cap - 1);
    k->lift_hash[s] = idx;
}

/* Keep the table at most half full; rebuilding only grows it, so a steady state with the
 * same graph never allocates. */
static ca_status hash_reserve(key_collect *k, int n) {
    if (2 * n <= k->hash_cap)
        return CA_OK;
    int cap = k->hash_cap ? k->hash_cap : 64;
    while (cap < 2 * n)
        cap *= 2;
    int32_t *h = cai_mem_alloc(sizeof(int32_t) * (size_t)cap);
    if (!h)
        return err_nomem("the compiled backward's key");
    cai_mem_free(k->lift_hash);
    k->lift_hash = h;
    k->hash_cap = cap;
    memset(h, 0xff, sizeof(int32_t) * (size_t)cap);
    for (int i = 0; i < k->n_lifted; i++)
        hash_insert(k, i);
    return CA_OK;
}

int cai_key_node_first_slot(const key_collect *k, int call) {
    return k->slot0[call];
}

/* Lift t (or find it lifted already); its index goes into the key, and on first lift its
 * dims become size slots. */
static ca_status lift_tensor(key_collect *k, ca_tensor *t, key_lift_kind kind, key_slot_owner o) {
    int idx = cai_key_find_lifted(k, t, kind);
    if (idx < 0) {
        CA_CHECK(grow((void **)&k->lifted, &k->cap_lifted, k->n_lifted + 1, sizeof(key_lifted)));
        CA_CHECK(hash_reserve(k, k->n_lifted + 1));
        idx = k->n_lifted++;
        k->lifted[idx] = (key_lifted){t, kind, k->n_sizes};
        hash_insert(k, idx);
        for (o.dim = 0; o.dim < t->ndim; o.dim++)
            CA_CHECK(lift_size(k, t->shape[o.dim], o));
    }
    CA_CHECK(put_i32(k, idx));
    return put_i32(k, (int32_t)t->dtype * 16 + t->ndim);
}

/* ---- hooks ---- */
static ca_status lift_hooks(key_collect *k, ca_hook *list, int call, ca_tensor *leaf) {
    int count = 0;
    for (ca_hook *h = list; h; h = h->next, count++) {
        CA_CHECK(grow((void **)&k->hooks, &k->cap_hooks, k->n_hooks + 1, sizeof(key_hook)));
        k->hooks[k->n_hooks++] = (key_hook){h, call, leaf};
        if (h->output_nr) /* only a custom function's later outputs have nonzero ones */
            CA_CHECK(put_i32(k, h->output_nr));
    }
    return put_i32(k, count);
}

/* What a traced backward depends on, from the function's trace_state: the state number it
 * gave (0: a call-out) and the tensors it reads, lifted like an op's saved tensors. */
static ca_status ask_trace_state(ca_custom *c) {
    ca_custom_trace_info *info = &c->trace;
    memset(info, 0, sizeof *info);
    if (!c->fn.trace_state)
        return CA_OK;
    uint64_t gen = cai_err_generation();
    ca_status st = c->fn.trace_state(c->fn.ctx, info);
    if (st != CA_OK && cai_err_generation() == gen)
        st = err_set(st, "the trace_state of %s failed with %s and set no message", c->name,
                     ca_status_name(st));
    CA_CHECK(st);
    if (info->n_saved < 0 || info->n_saved > CA_CUSTOM_MAX_SAVED || info->n_sizes < 0 ||
        info->n_sizes > CA_CUSTOM_MAX_SIZES)
        return err_set(CA_STATUS_INVALID,
                       "the trace_state of %s gave %d saved tensors and %d sizes; at most %d "
                       "and %d are allowed",
                       c->name, info->n_saved, info->n_sizes, CA_CUSTOM_MAX_SAVED,
                       CA_CUSTOM_MAX_SIZES);
    info->why[sizeof info->why - 1] = '\0';
    return CA_OK;
}

static ca_status custom_trace_key(key_collect *k, ca_node *n, int call) {
    const ca_custom_trace_info *info = &n->custom->trace;
    CA_CHECK(ask_trace_state(n->custom));
    CA_CHECK(put_i64(k, (int64_t)info->state));
    if (!info->state)
        return CA_OK;
    CA_CHECK(put_i32(k, info->n_sizes));
    for (int j = 0; j < info->n_sizes; j++)
        CA_CHECK(
            lift_size(k, info->sizes[j], (key_slot_owner){call, OWN_ATTR, "traced int", 0, j}));
    CA_CHECK(put_i32(k, info->n_saved));
    for (int j = 0; j < info->n_saved; j++) {
        ca_tensor *t = info->saved[j];
        if (t)
            CA_CHECK(
                lift_tensor(k, t, LIFT_SAVED, (key_slot_owner){call, OWN_SAVED, "tensor", j, 0}));
        else
            CA_CHECK(put_i32(k, -1));
    }
    return CA_OK;
}

/* A custom function: its identity, each output's shape and retain_grad, and what a traced
 * backward depends on. */
static ca_status custom_key(key_collect *k, ca_node *n, int call) {
    CA_CHECK(put_i64(k, (int64_t)n->custom->fn.key));
    CA_CHECK(put_i32(k, n->n_out));
    for (int o = 1; o < n->n_out; o++)
        CA_CHECK(lift_shape(k, node_out_meta(n, o),
                            (key_slot_owner){call, OWN_GRAD_OUTPUT, "grad", o, 0}));
    for (int o = 1; o < n->n_out; o++)
        CA_CHECK(put_i32(k, node_retained(n, o) != NULL));
    return custom_trace_key(k, n, call);
}

/* ---- per node ---- */
static ca_status node_fields(key_collect *k, const ca_node *n, int call) {
    const ca_op_def *row = cai_op_def(n->op);
    int saved = 0;
    for (int f = 0; f < row->n_fields; f++) {
        const ca_field_desc *fd = &row->fields[f];
        switch (fd->kind) {
        case FIELD_TENSOR: {
            /* not checked here: like eager, only the saved tensors a rule reads are
             * checked (trace_saved, and run_entry on a hit) */
            ca_tensor *t = n->saved[saved++].t;
            if (t)
                CA_CHECK(lift_tensor(k, t, LIFT_SAVED,
                                     (key_slot_owner){call, OWN_SAVED, fd->name, 0, 0}));
            else
                CA_CHECK(put_i32(k, -1)); /* an optional input that was not given */
            break;
        }
        case FIELD_INT: CA_CHECK(put_i64(k, n->attrs.i[fd->idx])); break;
        case FIELD_DOUBLE: CA_CHECK(put_f64(k, n->attrs.s[fd->idx])); break;
        case FIELD_DIMS:
            CA_CHECK(put_i32(k, n->attrs.dims.n));
            for (int d = 0; d < n->attrs.dims.n; d++)
                CA_CHECK(put_i64(k, n->attrs.dims.v[d]));
            break;
        case FIELD_SIZES:
            CA_CHECK(put_i32(k, n->attrs.shape.n));
            for (int d = 0; d < n->attrs.shape.n; d++)
                CA_CHECK(lift_size(k, n->attrs.shape.v[d],
                                   (key_slot_owner){call, OWN_ATTR, fd->name, 0, d}));
            break;
        }
    }
    return CA_OK;
}

/* Edges, shapes, fields and hooks of one node. */
static ca_status node_key(key_collect *k, ca_node *n, int call) {
    CA_CHECK(put_i32(k, n->op));
    CA_CHECK(put_i32(k, n->n_in));
    for (int i = 0; i < n->n_in; i++) {
        ca_node *c = n->next[i].fn;
        CA_CHECK(put_i32(k, c ? cai_walk_call_id(k->walk, c) : -1));
        if (c && c->n_out > 1)
            CA_CHECK(put_i32(k, n->next[i].input_nr));
        CA_CHECK(lift_shape(k, &n->in_meta[i], (key_slot_owner){call, OWN_INPUT, "input", i, 0}));
    }
    CA_CHECK(lift_shape(k, &n->out_meta, (key_slot_owner){call, OWN_GRAD_OUTPUT, "grad", 0, 0}));
    if (n->op == CA_OP_ACCUMULATE_GRAD) {
        CA_CHECK(
            lift_tensor(k, n->leaf, LIFT_LEAF, (key_slot_owner){call, OWN_LEAF, "leaf", 0, 0}));
        CA_CHECK(lift_hooks(k, n->leaf->hooks, call, NULL));
        CA_CHECK(lift_hooks(k, n->node_pre_hooks, call, NULL));
        CA_CHECK(lift_hooks(k, n->node_post_hooks, call, NULL));
        return lift_hooks(k, n->leaf->post_acc_hooks, call, n->leaf);
    }
    if (n->custom)
        CA_CHECK(custom_key(k, n, call));
    CA_CHECK(node_fields(k, n, call));
    CA_CHECK(lift_hooks(k, n->pre_hooks, call, NULL));
    CA_CHECK(lift_hooks(k, n->node_pre_hooks, call, NULL));
    CA_CHECK(lift_hooks(k, n->node_post_hooks, call, NULL));
    return put_i32(k, n->retained != NULL);
}

/* GraphRoot: the mode, where each seed enters, and autograd.grad's targets. */
static ca_status root_key(key_collect *k, const key_request *req) {
    CA_CHECK(put_i32(k, req->capture | req->create_graph << 1)); /* never mixed */
    CA_CHECK(put_i32(k, req->n_roots));
    k->n_roots = req->n_roots;
    CA_CHECK(grow((void **)&k->root_call, &k->cap_root_call, req->n_roots, sizeof(int)));
    CA_CHECK(grow((void **)&k->root_seed, &k->cap_root_seed, req->n_roots, sizeof(int)));
    CA_CHECK(grow((void **)&k->root_nr, &k->cap_root_nr, req->n_roots, sizeof(int)));
    for (int i = 0; i < req->n_roots; i++) {
        k->root_call[i] = cai_walk_call_id(k->walk, req->roots[i]);
        k->root_nr[i] = req->root_nrs ? req->root_nrs[i] : 0;
        CA_CHECK(put_i32(k, k->root_call[i]));
        CA_CHECK(put_i32(k, k->root_nr[i]));
        CA_CHECK(
            lift_tensor(k, req->seeds[i], LIFT_SEED, (key_slot_owner){0, OWN_SEED, "seed", i, 0}));
        k->root_seed[i] = cai_key_find_lifted(k, req->seeds[i], LIFT_SEED);
    }
    CA_CHECK(put_i32(k, req->n_targets));
    for (int i = 0; i < req->n_targets; i++) {
        CA_CHECK(put_i32(k, req->targets[i] ? cai_walk_call_id(k->walk, req->targets[i]) : -1));
        CA_CHECK(put_i32(k, req->target_nrs ? req->target_nrs[i] : 0));
    }
    return CA_OK;
}

static ca_status mark_offset(key_collect *k, int i) {
    CA_CHECK(grow((void **)&k->off, &k->cap_off, i + 1, sizeof(int)));
    CA_CHECK(grow((void **)&k->slot0, &k->cap_slot0, i + 1, sizeof(int)));
    k->off[i] = k->n_bytes;
    k->slot0[i] = k->n_sizes;
    return CA_OK;
}

ca_status cai_key_collect_walk(key_collect *k, const ca_walk *w, const key_request *req) {
    k->walk = w;
    k->nodes = w->order.v;
    k->n_nodes = w->order.n;
    k->n_lifted = k->n_sizes = k->n_hooks = k->n_bytes = 0;
    if (k->hash_cap)
        memset(k->lift_hash, 0xff, sizeof(int32_t) * (size_t)k->hash_cap);
    CA_CHECK(mark_offset(k, 0));
    CA_CHECK(root_key(k, req));
    for (int i = 0; i < k->n_nodes; i++) {
        CA_CHECK(mark_offset(k, i + 1));
        CA_CHECK(node_key(k, k->nodes[i], i + 1));
    }
    return mark_offset(k, k->n_nodes + 1);
}

void cai_key_collect_free(key_collect *k) {
    cai_mem_free(k->lifted);
    cai_mem_free(k->lift_hash);
    cai_mem_free(k->sizes);
    cai_mem_free(k->owners);
    cai_mem_free(k->hooks);
    cai_mem_free(k->bytes);
    cai_mem_free(k->off);
    cai_mem_free(k->slot0);
    cai_mem_free(k->root_call);
    cai_mem_free(k->root_seed);
    cai_mem_free(k->root_nr);
    memset(k, 0, sizeof *k);
}

const char *cai_key_node_name(const key_collect *k, int call) {
    return call == 0 ? "GraphRoot" : cai_node_name(k->nodes[call - 1]);
}

const char *cai_key_owner_str(const key_collect *k, int slot, char *buf, size_t size) {
    const key_slot_owner *o = &k->owners[slot];
    const char *node = cai_key_node_name(k, o->node_call);
    int call = o->node_call;
    switch (o->kind) {
    case OWN_INPUT:
        snprintf(buf, size, "%s (NodeCall %d) input %d dim %d", node, call, o->index, o->dim);
        break;
    case OWN_GRAD_OUTPUT:
        if (o->index > 0)
            snprintf(buf, size, "%s (NodeCall %d) grad_output %d dim %d", node, call, o->index,
                     o->dim);
        else
            snprintf(buf, size, "%s (NodeCall %d) grad_output dim %d", node, call, o->dim);
        break;
    case OWN_SAVED:
        snprintf(buf, size, "%s (NodeCall %d) saved %s dim %d", node, call, o->what, o->dim);
        break;
    case OWN_ATTR:
        snprintf(buf, size, "%s (NodeCall %d) %s dim %d", node, call, o->what, o->dim);
        break;
    case OWN_SEED:
        snprintf(buf, size, "GraphRoot (NodeCall 0) seed %d dim %d", o->index, o->dim);
        break;
    case OWN_LEAF: snprintf(buf, size, "%s (NodeCall %d) leaf dim %d", node, call, o->dim); break;
    }
    return buf;
}
