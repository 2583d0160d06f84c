/* op.c - the generic op call: validate, run the shape rule and the forward kernel, and
 * record a node when the call needs a gradient.
 *
 * Every public op goes through cai_op_call, so recording, saving and the checks around them
 * exist once. Saved tensors are detached aliases stamped with their storage version:
 * backward compares the stamp to report a saved tensor that was changed in place.
 */
#include "autograd/internal.h"

#include <stdatomic.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Recording
 */
static ca_status edge_for(ca_tensor *t, ca_edge *e) {
    e->input_nr = t->output_nr;
    if (t->grad_fn) {
        e->fn = cai_node_retain(t->grad_fn);
        return CA_OK;
    }
    return cai_node_grad_accumulator(t, &e->fn);
}

static ca_tensor *field_tensor(const ca_field_desc *f, ca_tensor *const *in, int n_in,
                               ca_tensor *res, ca_tensor *const *aux) {
    switch (f->src) {
    case FROM_INPUT: return f->idx < n_in ? in[f->idx] : NULL; /* CA_OP_PW: 1 to 3 inputs */
    case FROM_OUTPUT: return res;
    case FROM_AUX: return aux[f->idx];
    default: return NULL;
    }
}

static bool input_differentiable(const ca_op_def *row, ca_tensor *const *in, int i) {
    return !(row->nondiff_inputs & (1u << (i < 31 ? i : 31))) && in[i]->requires_grad;
}

static ca_status save_fields(const ca_op_def *row, ca_node *n, ca_tensor *const *in, int n_in,
                             ca_tensor *res, ca_tensor *const *aux) {
    for (int f = 0; f < row->n_fields; f++) {
        const ca_field_desc *fd = &row->fields[f];
        if (fd->kind != FIELD_TENSOR)
            continue;
        ca_tensor *t = field_tensor(fd, in, n_in, res, aux);
        ca_saved *s = &n->saved[n->n_saved++];
        s->field = f;
        if (!t) /* an optional input that was not given (e.g. layer_norm without weight) */
            continue;
        CA_CHECK(cai_tensor_alias(t, t->ndim, t->shape, t->strides, t->offset, &s->t));
        s->version = t->storage->version;
        if (fd->src == FROM_INPUT && t->grad_fn && input_differentiable(row, in, fd->idx)) {
            s->origin = cai_node_retain(t->grad_fn);
            s->origin_nr = t->output_nr;
            s->detach_epoch = t->storage->detach_epoch;
        }
        CA_CHECK(cai_saved_pack(s));
    }
    return CA_OK;
}

static bool needs_record(const ca_op_def *row, ca_tensor *const *in, int n_in, const ca_attrs *a) {
    if (!cai_grad_mode_enabled() || (row->flags & CA_OPF_NONDIFF))
        return false;
    /* the generic pointwise row's comparisons, sign, floor, fill...: no gradient, as
     * PyTorch's boolean or integer-valued results (reached by double backward only) */
    if (row->id == CA_OP_PW && cai_pw_deriv_is_none((kern_pw_op)a->i[0]))
        return false;
    /* a conversion to bool or int64 has no gradient: PyTorch's result does not require it */
    if (row->id == CA_OP_TO_DTYPE && (a->i[0] == CA_BOOL || a->i[0] == CA_INT64))
        return false;
    for (int i = 0; i < n_in; i++)
        if (input_differentiable(row, in, i))
            return true;
    return false;
}

static ca_status record_node(const ca_op_def *row, ca_tensor *const *in, int n_in,
                             const ca_attrs *a, const ca_meta *metas, ca_tensor *res,
                             ca_tensor *const *aux) {
    ca_node *n;
    CA_CHECK(cai_node_alloc(row->id, n_in, &n));
    n->attrs = *a;
    cai_tensor_meta(res, &n->out_meta);
    ca_status st = CA_OK;
    for (int i = 0; i < n_in && st == CA_OK; i++) {
        n->in_meta[i] = metas[i];
        if (input_differentiable(row, in, i))
            st = edge_for(in[i], &n->next[i]);
    }
    if (st == CA_OK)
        st = save_fields(row, n, in, n_in, res, aux);
    if (st != CA_OK) {
        cai_node_release(n);
        return st;
    }
    res->grad_fn = n;
    res->requires_grad = true;
    return CA_OK;
}

/* A view op's result: its base and, with grad mode on, the op's step for replaying it on
 * the base's history later (view_inplace.c). The node just recorded is that step; else a
 * node without edges, with the same attributes, shapes and saved values. */
static ca_status view_track(const ca_op_def *row, ca_tensor *const *in, int n_in, const ca_attrs *a,
                            const ca_meta *metas, ca_tensor *res, ca_tensor *const *aux) {
    ca_node *step = NULL;
    if (cai_grad_mode_enabled() && !res->grad_fn) {
        CA_CHECK(cai_node_alloc(row->id, n_in, &step));
        step->attrs = *a;
        memcpy(step->in_meta, metas, sizeof(ca_meta) * (size_t)n_in);
        cai_tensor_meta(res, &step->out_meta);
        ca_status st = save_fields(row, step, in, n_in, res, aux);
        if (st != CA_OK) {
            cai_node_release(step);
            return st;
        }
    }
    return cai_view_track(res, in[0], step);
}

/* ---------------------------------------------------------------------------------------
 * The call
 */
/* Whether the row computes on bool inputs: pointwise rows (their dtype rule asks the
 * kernel), comparisons, conversions, views and the ops that only move elements. Every
 * other kernel is written for float or int64 elements and must never see a bool one. */
bool cai_op_is_comparison(int op) {
    switch (op) {
    case CA_OP_LT:
    case CA_OP_LE:
    case CA_OP_GT:
    case CA_OP_GE:
    case CA_OP_EQ:
    case CA_OP_NE:
    case CA_OP_LT_S:
    case CA_OP_LE_S:
    case CA_OP_GT_S:
    case CA_OP_GE_S:
    case CA_OP_EQ_S:
    case CA_OP_NE_S: return true;
    default: return false;
    }
}

static bool takes_bool(const ca_op_def *row) {
    if (row->fusion == CA_FUSE_POINTWISE || row->fusion == CA_FUSE_VIEW ||
        cai_op_is_comparison(row->id))
        return true;
    switch (row->id) {
    case CA_OP_TO_DTYPE:
    case CA_OP_RESHAPE:
    case CA_OP_VIEW:
    case CA_OP_UNSAFE_VIEW:
    case CA_OP_PERMUTE:
    case CA_OP_TRANSPOSE:
    case CA_OP_T:
    case CA_OP_EXPAND:
    case CA_OP_SQUEEZE:
    case CA_OP_UNSQUEEZE:
    case CA_OP_SLICE:
    case CA_OP_SELECT:
    case CA_OP_CAT:
    case CA_OP_CONTIGUOUS:
    case CA_OP_MASKED_FILL:
    case CA_OP_INDEX_SELECT:
    case CA_OP_GATHER:
    case CA_OP_TRIL:
    case CA_OP_TRIU:
    case CA_OP_CUSTOM: return true;
    default: return false;
    }
}

static ca_status check_inputs(const ca_op_def *row, int n_in, ca_tensor *const *in) {
    bool too_few = n_in < row->n_in_min, too_many = row->n_in_max >= 0 && n_in > row->n_in_max;
    if (too_few || too_many || (n_in > 0 && !in))
        return err_set(CA_STATUS_INVALID, "%s: got %d input tensors, expected %d to %d", row->name,
                       n_in, row->n_in_min, row->n_in_max);
    for (int i = 0; i < n_in; i++)
        if (!in[i])
            return err_set(CA_STATUS_INVALID, "%s: input tensor %d is NULL; pass a valid tensor",
                           row->name, i);
    for (int i = 0; i < n_in; i++)
        if (in[i]->dtype == CA_BOOL && !takes_bool(row))
            return err_set(CA_STATUS_DTYPE,
                           "%s: bool inputs are not supported; convert them with "
                           "ca_to_dtype first",
                           row->name);
    return CA_OK;
}

static ca_status op_run(const ca_op_def *row, int n_in, ca_tensor *const *in, ca_attrs *a,
                        ca_meta *metas, ca_tensor **out, ca_tensor **aux_out) {
    ca_meta om;
    ca_tensor *res = NULL, *aux[CA_MAX_AUX] = {0};
    for (int i = 0; i < n_in; i++)
        cai_tensor_meta(in[i], &metas[i]);
    CA_CHECK(row->shape(row, metas, n_in, a, &om));
    CA_CHECK(row->forward(row, in, n_in, a, &om, &res, aux));
    ca_status st = CA_OK;
    if (needs_record(row, in, n_in, a))
        st = record_node(row, in, n_in, a, metas, res, aux);
    /* a view: in-place ops on it must reach its base's history */
    if (st == CA_OK && row->fusion == CA_FUSE_VIEW && res != in[0] &&
        res->storage == in[0]->storage && !res->view_base)
        st = view_track(row, in, n_in, a, metas, res, aux);
    for (int k = 0; k < CA_MAX_AUX; k++) {
        if (st == CA_OK && aux_out)
            aux_out[k] = aux[k];
        else
            ca_tensor_release(aux[k]);
    }
    if (st != CA_OK) {
        ca_tensor_release(res);
        return st;
    }
    *out = res;
    return CA_OK;
}

ca_status cai_op_call(int op, int n_in, ca_tensor *const *in, const ca_attrs *attrs,
                      ca_tensor **out, ca_tensor **aux_out) {
    CA_CHECK(ca_init());
    const ca_op_def *row = cai_op_def(op);
    if (!row)
        return err_set(CA_STATUS_INTERNAL, "op id %d has no row in the op table", op);
    CA_ARG_NOT_NULL(out, row->name);
    *out = NULL;
    if (aux_out)
        memset(aux_out, 0, sizeof(ca_tensor *) * CA_MAX_AUX);
    CA_CHECK(check_inputs(row, n_in, in));
    for (int i = 0; i < n_in; i++) /* a view whose base changed in place in the graph */
        CA_CHECK(cai_view_sync_fast(in[i]));
    ca_attrs a = attrs ? *attrs : (ca_attrs){0};
    ca_meta local[8], *metas = local;
    if (n_in > 8 && !(metas = cai_mem_alloc(sizeof(ca_meta) * (size_t)n_in)))
        return err_nomem("input shapes");
    int depth = cai_recording ? cai_record_enter() : -1;
    ca_status st = op_run(row, n_in, in, &a, metas, out, aux_out);
    if (depth >= 0) {
        cai_record_leave();
        if (st == CA_OK && depth == 0)
            cai_record_op(op, n_in, in, &a, *out);
    }
    if (metas != local)
        cai_mem_free(metas);
    if (st == CA_OK)
        cai_op_observe(row->name);
    return st;
}

ca_status cai_op_call1(int op, ca_tensor *x, const ca_attrs *a, ca_tensor **out) {
    return cai_op_call(op, 1, &x, a, out, NULL);
}

ca_status cai_op_call2(int op, ca_tensor *x, ca_tensor *y, const ca_attrs *a, ca_tensor **out) {
    ca_tensor *in[2] = {x, y};
    return cai_op_call(op, 2, in, a, out, NULL);
}

/* ---------------------------------------------------------------------------------------
 * Helpers for the op groups' forwards
 */
ca_status cai_op_kern_status(int rc, const char *what) {
    if (rc == 0)
        return CA_OK;
    if (rc == -2)
        return err_nomem(what);
    return err_set(CA_STATUS_INTERNAL, "%s: kernel failed with code %d; please report this", what,
                   rc);
}

ca_status cai_op_copy_into(void *dst, const int64_t *dst_strides, ca_tensor *src,
                           const char *what) {
    ca_meta m;
    cai_tensor_meta(src, &m);
    if (cai_meta_numel(&m) == 0)
        return CA_OK;
    kern_src s;
    cai_tensor_src(src, src->ndim, src->shape, &s);
    int rc = cai_kern_pointwise(KPW_COPY, kdt(src->dtype), kdt(src->dtype), src->ndim, src->shape,
                                dst, dst_strides, &s, 0, 0);
    return cai_op_kern_status(rc, what);
}

void cai_op_release_all(ca_tensor **ts, int n) {
    for (int i = 0; i < n; i++)
        ca_tensor_release(ts[i]);
}

/* ---------------------------------------------------------------------------------------
 * The shape rule and forward kernel shared by every pointwise row
 */
kern_pw_op cai_op_pw_kind(const ca_op_def *row, const ca_attrs *a) {
    if (row->id == CA_OP_PW)
        return (kern_pw_op)a->i[0];
    if (row->id == CA_OP_GELU && a->i[0]) /* approximate='tanh' is its own kernel op */
        return KPW_GELU_TANH;
    return row->pw;
}

ca_status cai_op_pointwise_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                                 ca_meta *out) {
    kern_pw_op k = cai_op_pw_kind(row, a);
    if ((unsigned)k >= KPW__COUNT || cai_kern_pw_arity(k) != n_in)
        return err_set(CA_STATUS_INVALID, "%s: pointwise op %d takes %d inputs, got %d", row->name,
                       (int)k, (unsigned)k < KPW__COUNT ? cai_kern_pw_arity(k) : -1, n_in);
    kern_dtype dt[3]; /* n_in is k's arity, checked above */
    cai_rule_error e;
    for (int i = 0; i < n_in; i++)
        dt[i] = kdt(in[i].dtype);
    kern_dtype r_dt;
    if (cai_rule_pointwise_dtype(&cai_sizes_concrete, row->name, k, n_in, dt, &r_dt, &e))
        return cai_rule_raise(&e);
    ca_meta r = {.dtype = (ca_dtype)r_dt};
    for (int i = 0; i < n_in; i++)
        if (cai_rule_broadcast(&cai_sizes_concrete, row->name, r.ndim, r.shape, in[i].ndim,
                               in[i].shape, &r.ndim, r.shape, &e))
            return cai_rule_raise(&e);
    *out = r;
    return CA_OK;
}

ca_status cai_op_pointwise_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                   const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                   ca_tensor **aux) {
    (void)aux;
    return cai_tensor_pointwise(cai_op_pw_kind(row, a), m, n_in, in, a->s[0], a->s[1], out);
}
