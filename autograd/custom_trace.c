/* custom_trace.c - recording a custom backward as a tape, and replaying it on a builder
 * (see custom_trace.h).
 */
#include "autograd/custom_trace.h"

#include <stdio.h>
#include <string.h>

_Thread_local cai_tape *cai_recording;

int ca_custom_tracing(void) {
    return cai_recording != NULL;
}

void ca_custom_refuse_tracing(const char *why) {
    if (cai_recording)
        cai_record_refuse(why && why[0] ? why : "its backward refused tracing");
}

/* ---------------------------------------------------------------------------------------
 * Recording
 */
int cai_record_enter(void) {
    return cai_recording->depth++;
}

void cai_record_leave(void) {
    cai_recording->depth--;
}

void cai_record_refuse(const char *why) {
    cai_tape *t = cai_recording;
    if (t && !t->why[0])
        snprintf(t->why, sizeof t->why, "%s", why);
}

void cai_record_op(int op, int n_in, ca_tensor *const *in, const ca_attrs *a, ca_tensor *out) {
    cai_tape *t = cai_recording;
    if (t->nomem || t->why[0])
        return; /* refused already: the tape will not be replayed */
    if (!mem_grow((void **)&t->ops, &t->cap_ops, t->n_ops + 1, sizeof(cai_tape_op)) ||
        !mem_grow((void **)&t->ins, &t->cap_ins, t->n_ins + n_in, sizeof(ca_tensor *))) {
        t->nomem = true;
        return;
    }
    t->ops[t->n_ops++] = (cai_tape_op){op, n_in, t->n_ins, *a, ca_tensor_retain(out)};
    for (int i = 0; i < n_in; i++)
        t->ins[t->n_ins++] = ca_tensor_retain(in[i]);
}

void cai_record_fill(ca_tensor *x, double value) {
    cai_tape *t = cai_recording;
    if (t->nomem || t->why[0])
        return;
    if (!mem_grow((void **)&t->fills, &t->cap_fills, t->n_fills + 1, sizeof(cai_tape_fill))) {
        t->nomem = true;
        return;
    }
    t->fills[t->n_fills++] = (cai_tape_fill){ca_tensor_retain(x), value};
}

void cai_record_known(ca_tensor *x, int saved) {
    cai_tape *t = cai_recording;
    if (t->nomem || t->why[0])
        return;
    if (!mem_grow((void **)&t->known, &t->cap_known, t->n_known + 1, sizeof(cai_tape_known))) {
        t->nomem = true;
        return;
    }
    t->known[t->n_known++] = (cai_tape_known){ca_tensor_retain(x), saved};
}

void cai_tape_free(cai_tape *t) {
    for (int o = 0; o < t->n_ops; o++)
        ca_tensor_release(t->ops[o].out);
    for (int f = 0; f < t->n_fills; f++)
        ca_tensor_release(t->fills[f].t);
    cai_mem_free(t->fills);
    for (int q = 0; q < t->n_known; q++)
        ca_tensor_release(t->known[q].t);
    cai_mem_free(t->known);
    cai_op_release_all(t->ins, t->n_ins);
    if (t->grads)
        cai_op_release_all(t->grads, t->n_grads);
    if (t->gin)
        cai_op_release_all(t->gin, t->n_gin);
    cai_mem_free(t->ops);
    cai_mem_free(t->ins);
    cai_mem_free(t->grads);
    cai_mem_free(t->gin);
    memset(t, 0, sizeof *t);
}

static ca_status zero_grads(ca_node *n, const bool *has_grad, cai_tape *t) {
    for (int k = 0; k < n->n_out; k++) {
        const ca_meta *m = node_out_meta(n, k);
        if (has_grad[k])
            CA_CHECK(ca_zeros(m->dtype, m->ndim, m->shape, &t->grads[k]));
    }
    return CA_OK;
}

ca_status cai_tape_record(ca_node *n, const bool *has_grad, cai_tape *t) {
    memset(t, 0, sizeof *t);
    t->n_grads = n->n_out;
    t->n_gin = n->n_in;
    t->grads = cai_mem_calloc((size_t)n->n_out, sizeof(ca_tensor *));
    t->gin = cai_mem_calloc((size_t)n->n_in + 1, sizeof(ca_tensor *));
    if (!t->grads || !t->gin)
        return err_nomem("recording a custom backward");
    CA_CHECK(zero_grads(n, has_grad, t));
    cai_tape *outer = cai_recording; /* NULL: a recording starts no compiled backward */
    cai_recording = t;
    ca_status st = cai_custom_backward(n, t->grads, t->gin);
    cai_recording = outer;
    if (t->nomem || st == CA_STATUS_NOMEM)
        return err_nomem("recording a custom backward");
    if (st != CA_OK && !t->why[0])
        snprintf(t->why, sizeof t->why, "its backward failed on zero gradients: %.100s",
                 ca_last_error());
    return CA_OK;
}

/* ---------------------------------------------------------------------------------------
 * Replaying
 */
typedef struct {
    const cai_tape *t;
    ca_builder *b;
    const ca_bval *grads;
    int n_saved;
    ca_tensor *const *saved;
    const ca_bval *saved_vals;
    const ca_bval *vals; /* per op: its output's value */
    int n_done;          /* ops replayed so far */
    ca_bval *fill_vals;  /* per fill: its constant, made when first used */
} replay;

/* The value standing for tensor x: the latest op output, a gradient or a saved tensor that
 * is x, or else one that is the same view of the same storage (a detached alias). */
static ca_bval value_of_exact(const replay *r, const ca_tensor *x, bool view) {
    for (int o = r->n_done - 1; o >= 0; o--)
        if (view ? cai_tensor_same_view(r->t->ops[o].out, x) : r->t->ops[o].out == x)
            return r->vals[o];
    for (int k = 0; k < r->t->n_grads; k++)
        if (r->t->grads[k] && r->grads[k] &&
            (view ? cai_tensor_same_view(r->t->grads[k], x) : r->t->grads[k] == x))
            return r->grads[k];
    for (int j = 0; j < r->n_saved; j++)
        if (r->saved[j] && r->saved_vals[j] &&
            (view ? cai_tensor_same_view(r->saved[j], x) : r->saved[j] == x))
            return r->saved_vals[j];
    return NULL;
}

/* Any value of the graph: a gradient (one always flows in) or a saved tensor. */
static ca_bval some_value(const replay *r) {
    for (int k = 0; k < r->t->n_grads; k++)
        if (r->grads[k])
            return r->grads[k];
    for (int j = 0; j < r->n_saved; j++)
        if (r->saved_vals[j])
            return r->saved_vals[j];
    return NULL;
}

/* A constant tensor of fill f's dtype, shape and value. The graph has no op without
 * inputs, so it is FILL (which reads only its input's shape) of one element of some value,
 * viewed as a 0-d tensor, cast and expanded. */
static ca_bval const_fill(const replay *r, const cai_tape_fill *f) {
    ca_builder *b = r->b;
    ca_bval v = some_value(r);
    const ca_meta *m = bx_meta(b, v);
    for (int d = 0; m && d < m->ndim; d++)
        v = bx_slice(b, v, d, 0, 1, 1);
    ca_ints scalar = {.n = 0};
    v = bx_pw(b, KPW_FILL, bx_reshape_ints(b, v, &scalar), NULL, NULL, f->value, 0);
    m = bx_meta(b, v);
    if (m && m->dtype != f->t->dtype)
        v = bx_apply(b, CA_OP_TO_DTYPE, 1, &v, &(ca_attrs){.i = {f->t->dtype}});
    ca_meta want;
    cai_tensor_meta(f->t, &want);
    return bx_expand(b, v, &want);
}

static ca_bval value_of(const replay *r, const ca_tensor *x) {
    ca_bval v = value_of_exact(r, x, false);
    if (!v)
        v = value_of_exact(r, x, true);
    for (int f = 0; !v && f < r->t->n_fills; f++)
        if (r->t->fills[f].t == x)
            v = r->fill_vals[f] ? r->fill_vals[f]
                                : (r->fill_vals[f] = const_fill(r, &r->t->fills[f]));
    return v;
}

/* Rows whose forward is the pointwise kernel cai_op_pw_kind names, with s[0], s[1] as its
 * parameters (their shape rules may check more, as gelu's and clamp's do). */
static bool pointwise_row(const ca_op_def *row) {
    return row->forward == cai_op_pointwise_forward;
}

static ca_bval replay_comparison(ca_builder *b, const cai_tape_op *o, const ca_bval *in) {
    ca_bval v = bx_pw(b, cai_op_def(o->op)->pw, in[0], o->n_in > 1 ? in[1] : NULL, NULL, o->a.s[0],
                      o->a.s[1]);
    return bx_apply(b, CA_OP_TO_DTYPE, 1, &v, &(ca_attrs){.i = {CA_BOOL}});
}

static bool same_dtypes(ca_builder *b, const cai_tape_op *o, const ca_bval *in) {
    const ca_meta *m0 = bx_meta(b, in[0]), *m1 = o->n_in > 1 ? bx_meta(b, in[1]) : m0;
    return m0 && m1 && m0->dtype == m1->dtype;
}

/* Rows without a graph op of their own, as the builder calls derivative rules use. */
static ca_bval replay_one(ca_builder *b, const cai_tape_op *o, const ca_bval *in,
                          const ca_meta *out) {
    const ca_op_def *row = cai_op_def(o->op);
    /* a comparison's kernel gives 0/1 in the inputs' dtype, converted to bool; inputs of
     * two dtypes (compared in the promoted one) are left to bx_apply */
    if (cai_op_is_comparison(row->id) && same_dtypes(b, o, in))
        return replay_comparison(b, o, in);
    if (pointwise_row(row))
        return bx_pw(b, cai_op_pw_kind(row, &o->a), in[0], o->n_in > 1 ? in[1] : NULL,
                     o->n_in > 2 ? in[2] : NULL, o->a.s[0], o->a.s[1]);
    switch (o->op) {
    case CA_OP_RESHAPE:
    case CA_OP_VIEW:
    case CA_OP_UNSAFE_VIEW:
    case CA_OP_SQUEEZE:
    case CA_OP_UNSQUEEZE: return bx_reshape(b, in[0], out);
    case CA_OP_TRANSPOSE:
    case CA_OP_T: return bx_permute(b, in[0], &o->a.dims); /* their attrs are the permutation */
    case CA_OP_EXPAND: return bx_expand(b, in[0], out);
    case CA_OP_SELECT: { /* attrs: the dim and the index, canonical */
        ca_bval s = bx_slice(b, in[0], (int)o->a.i[0], o->a.i[1], o->a.i[1] + 1, 1);
        return bx_reshape(b, s, out);
    }
    case CA_OP_MM:
    case CA_OP_BMM: return bx_matmul(b, in[0], in[1], false, false);
    case CA_OP_ADDMM: return bx_add(b, in[0], bx_matmul(b, in[1], in[2], false, false));
    case CA_OP_MEAN: {
        const ca_meta *m = bx_meta(b, in[0]);
        double n_in = m ? (double)cai_meta_numel(m) : 1, n_out = (double)cai_meta_numel(out);
        ca_bval s = bx_sum(b, in[0], o->a.dims.n, o->a.dims.v, o->a.i[0]);
        return bx_mul_s(b, s, n_in > 0 ? n_out / n_in : 0);
    }
    default: return bx_apply(b, o->op, o->n_in, in, &o->a);
    }
}

static bool same_meta(const ca_meta *a, const ca_meta *b) {
    return a && a->dtype == b->dtype && cai_meta_same_shape(a, b);
}

/* The saved tensor's value that op o's result is known to equal (cai_record_known), or
 * NULL: the op is replayed. */
static ca_bval known_value(const replay *r, const cai_tape_op *op) {
    for (int q = 0; q < r->t->n_known; q++) {
        int j = r->t->known[q].saved;
        if (r->t->known[q].t == op->out && j < r->n_saved && r->saved_vals[j])
            return r->saved_vals[j];
    }
    return NULL;
}

static bool replay_ops(replay *r, ca_builder *b, ca_bval *vals, char *why, size_t why_size) {
    const cai_tape *t = r->t;
    for (int o = 0; o < t->n_ops; o++, r->n_done++) {
        const cai_tape_op *op = &t->ops[o];
        ca_meta want;
        cai_tensor_meta(op->out, &want);
        if ((vals[o] = known_value(r, op)) && same_meta(bx_meta(b, vals[o]), &want))
            continue; /* computed by an earlier graph: read, not replayed */
        ca_bval in[CA_MAX_AUX + 8] = {0};
        if (op->n_in > (int)(sizeof in / sizeof in[0])) {
            snprintf(why, why_size, "it calls %s with %d inputs", cai_op_def(op->op)->name,
                     op->n_in);
            return false;
        }
        for (int i = 0; i < op->n_in; i++)
            if (!(in[i] = value_of(r, t->ins[op->in0 + i]))) {
                snprintf(why, why_size,
                         "its %s uses a tensor that is neither a gradient nor a saved tensor "
                         "(input %d); save it with save_for_backward to trace it",
                         cai_op_def(op->op)->name, i);
                return false;
            }
        vals[o] = replay_one(b, op, in, &want);
        if (b->status != CA_OK) {
            snprintf(why, why_size, "%.150s", ca_last_error());
            return false;
        }
        if (!same_meta(bx_meta(b, vals[o]), &want)) {
            snprintf(why, why_size, "its %s does not keep its shape in the graph",
                     cai_op_def(op->op)->name);
            return false;
        }
    }
    return true;
}

bool cai_tape_replay(const cai_tape *t, ca_builder *b, const ca_bval *grads, int n_saved,
                     ca_tensor *const *saved, const ca_bval *saved_vals, ca_bval *gin, char *why,
                     size_t why_size) {
    ca_bval *vals = cai_mem_calloc((size_t)t->n_ops + (size_t)t->n_fills + 1, sizeof(ca_bval));
    if (!vals) {
        b->status = err_nomem("replaying a custom backward");
        snprintf(why, why_size, "out of memory");
        return false;
    }
    replay r = {t, b, grads, n_saved, saved, saved_vals, vals, 0, vals + t->n_ops};
    bool ok = replay_ops(&r, b, vals, why, why_size);
    for (int i = 0; i < t->n_gin && ok; i++) {
        gin[i] = t->gin[i] ? value_of(&r, t->gin[i]) : NULL;
        if (t->gin[i] && !gin[i]) {
            snprintf(why, why_size,
                     "gradient %d is a tensor that is neither computed by its ops nor a "
                     "gradient or saved tensor",
                     i);
            ok = false;
        }
    }
    cai_mem_free(vals);
    return ok;
}
