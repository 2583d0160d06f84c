/* compiled_double.c - the tape of a compiled double backward and the differentiable node
 * its gradients get (see compiled_double.h).
 */
#include "autograd/compiled_double.h"

#include "autograd/builder.h"
#include "autograd/builder_trace.h"
#include "graph/graph.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* The cache tells custom functions apart by this key; tapes by their id (trace_state). */
#define DBL_FUNCTION_KEY 0xCA9D0B1EBAC4ull

typedef struct {
    int op;
    int n_in;
    int32_t in[GRAPH_MAX_IN];
    ca_attrs a; /* sizes of a symbolic trace are handles (SIZE_HANDLE_BASE + expression) */
    int32_t out;
    int32_t count; /* >= 0: a mean's 1 / N, N this size expression, is a's s[0] */
    int32_t kept;  /* >= 0: the graph outputs the value, the node keeps it (cai_dbl_keep_last) */
} dbl_op;

typedef struct {
    int32_t val;
    int lifted;
    dbl_read kind;
    int call; /* DBL_SAVED, DBL_CUSTOM_SAVED: the NodeCall */
    int k;    /* saved tensor k of it, or root k's seed */
} dbl_input;

struct dbl_tape {
    atomic_int refcnt;
    uint64_t id;
    dbl_op *ops;
    int n_ops, cap_ops;
    dbl_input *ins;
    int n_ins, cap_ins;
    int32_t *outs; /* per autograd.grad target: its value, -1 when none */
    int n_outs;
    int n_kept;
    int32_t n_vals; /* every value is below this */
};

static atomic_uint_fast64_t next_tape_id = 1;

dbl_tape *cai_dbl_tape_new(int n_targets) {
    dbl_tape *t = cai_mem_calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->outs = cai_mem_alloc(sizeof(int32_t) * ((size_t)n_targets + 1));
    if (!t->outs) {
        cai_mem_free(t);
        return NULL;
    }
    for (int i = 0; i < n_targets; i++)
        t->outs[i] = -1;
    t->n_outs = n_targets;
    atomic_init(&t->refcnt, 1);
    t->id = atomic_fetch_add(&next_tape_id, 1);
    return t;
}

static dbl_tape *tape_retain(dbl_tape *t) {
    atomic_fetch_add(&t->refcnt, 1);
    return t;
}

void cai_dbl_tape_release(dbl_tape *t) {
    if (!t || atomic_fetch_sub(&t->refcnt, 1) != 1)
        return;
    cai_mem_free(t->ops);
    cai_mem_free(t->ins);
    cai_mem_free(t->outs);
    cai_mem_free(t);
}

static void note_val(dbl_tape *t, int32_t v) {
    if (v + 1 > t->n_vals)
        t->n_vals = v + 1;
}

bool cai_dbl_record_op(dbl_tape *t, int op, int n_in, const int32_t *in, const ca_attrs *a,
                       int32_t out) {
    CA_ASSERT(n_in >= 0 && n_in <= GRAPH_MAX_IN && out >= 0);
    if (!mem_grow((void **)&t->ops, &t->cap_ops, t->n_ops + 1, sizeof(dbl_op)))
        return false;
    dbl_op *o = &t->ops[t->n_ops++];
    memset(o, 0, sizeof *o);
    o->op = op;
    o->n_in = n_in;
    o->out = out;
    o->count = -1;
    o->kept = -1;
    if (a)
        o->a = *a;
    for (int i = 0; i < n_in; i++) {
        o->in[i] = in[i];
        note_val(t, in[i]);
    }
    note_val(t, out);
    return true;
}

int cai_dbl_keep_last(dbl_tape *t) {
    CA_ASSERT(t->n_ops > 0);
    return t->ops[t->n_ops - 1].kept = t->n_kept++;
}

int cai_dbl_n_kept(const dbl_tape *t) {
    return t->n_kept;
}

bool cai_dbl_record_scale(dbl_tape *t, int32_t x, int32_t count, int32_t out) {
    ca_attrs a = {.i = {KPW_MUL_S}};
    if (!cai_dbl_record_op(t, CA_OP_PW, 1, &x, &a, out))
        return false;
    t->ops[t->n_ops - 1].count = count;
    return true;
}

/* Which history a read joins, as an identity to compare: the node and output it joins, the
 * leaf itself, or none (a constant). */
typedef struct {
    const void *id;
    int nr;
} read_history;

/* The tensor a seed or a custom function's saved read is: it keeps its own history. */
static ca_tensor *own_tensor(const key_collect *k, const dbl_input *r) {
    if (r->kind == DBL_SEED)
        return k->lifted[r->lifted].t;
    return k->nodes[r->call - 1]->custom->trace.saved[r->k];
}

static read_history history_of(const key_collect *k, const dbl_input *r) {
    if (r->kind != DBL_SAVED) {
        const ca_tensor *t = own_tensor(k, r);
        return t->grad_fn ? (read_history){t->grad_fn, t->output_nr}
                          : (read_history){t->requires_grad ? t : NULL, 0};
    }
    const ca_node *n = k->nodes[r->call - 1];
    const ca_field_desc *fd = &cai_op_def(n->op)->fields[n->saved[r->k].field];
    if (fd->src == FROM_OUTPUT)
        return (read_history){n, fd->idx};
    if (fd->src != FROM_INPUT || fd->idx >= n->n_in || !n->next[fd->idx].fn)
        return (read_history){NULL, 0};
    const ca_edge *e = &n->next[fd->idx];
    if (e->fn->op == CA_OP_ACCUMULATE_GRAD && e->fn->leaf)
        return (read_history){e->fn->leaf, 0};
    return (read_history){e->fn, e->input_nr};
}

int32_t cai_dbl_input_val(const dbl_tape *t, const key_collect *k, int lifted, dbl_read kind,
                          int call, int kk, bool *lifted_used) {
    dbl_input r = {-1, lifted, kind, call, kk};
    read_history want = history_of(k, &r);
    *lifted_used = false;
    for (int i = 0; i < t->n_ins; i++) {
        if (t->ins[i].lifted != lifted)
            continue;
        *lifted_used = true;
        read_history h = history_of(k, &t->ins[i]);
        if (h.id == want.id && h.nr == want.nr)
            return t->ins[i].val;
    }
    return -1;
}

bool cai_dbl_record_input(dbl_tape *t, int32_t val, int lifted, dbl_read kind, int call, int kk) {
    if (!mem_grow((void **)&t->ins, &t->cap_ins, t->n_ins + 1, sizeof(dbl_input)))
        return false;
    t->ins[t->n_ins++] = (dbl_input){val, lifted, kind, call, kk};
    note_val(t, val);
    return true;
}

void cai_dbl_record_output(dbl_tape *t, int target, int32_t val) {
    CA_ASSERT(target >= 0 && target < t->n_outs);
    if (t->outs[target] < 0)
        t->outs[target] = val;
    note_val(t, val);
}

/* ---------------------------------------------------------------------------------------
 * The node: CompiledAutogradBackward0
 */
typedef struct {
    dbl_tape *tape; /* held */
    dbl_op *ops;    /* the tape's ops with this run's sizes, when the trace had symbols */
    int n_sizes;
    int64_t sizes[CA_CUSTOM_MAX_SIZES]; /* the symbols' values: they key a traced backward */
    int n_in;
    ca_tensor **in;   /* held: the tape's inputs, joined to their histories */
    ca_tensor **kept; /* held: the run's kept values (the tape's n_kept), NULL where none */
    int *kept_slot;   /* per kept value: its saved slot for a traced backward, -1: none */
    int n_saved;      /* the inputs, then the kept values that have a slot */
    int n_out;
    int32_t *out_vals; /* the value of each output */
    bool released;
} dbl_ctx;

static void release_inputs(dbl_ctx *c) {
    if (c->in)
        cai_op_release_all(c->in, c->n_in);
    if (c->kept)
        cai_op_release_all(c->kept, c->tape->n_kept);
}

static void dbl_release(void *ctx) {
    dbl_ctx *c = ctx;
    release_inputs(c);
    c->released = true;
}

static void dbl_ctx_free(void *ctx) {
    dbl_ctx *c = ctx;
    if (!c)
        return;
    if (!c->released)
        release_inputs(c);
    cai_mem_free(c->in);
    cai_mem_free(c->kept);
    cai_mem_free(c->kept_slot);
    cai_mem_free(c->ops);
    cai_mem_free(c->out_vals);
    cai_dbl_tape_release(c->tape);
    cai_mem_free(c);
}

static ca_status dbl_trace_state(void *ctx, ca_custom_trace_info *info) {
    dbl_ctx *c = ctx;
    if (c->released || c->n_in > CA_CUSTOM_MAX_SAVED || c->n_sizes < 0) {
        snprintf(info->why, sizeof info->why, "%s",
                 c->released      ? "its saved tensors were freed"
                 : c->n_sizes < 0 ? "its graph has more symbolic sizes than a traced backward "
                                    "may key"
                                  : "its graph reads more tensors than a traced backward may save");
        return CA_OK;
    }
    info->state = c->tape->id;
    info->n_saved = c->n_saved; /* the kept values after the inputs (replay's hints) */
    for (int j = 0; j < c->n_in; j++)
        info->saved[j] = c->in[j];
    for (int q = 0; q < c->tape->n_kept; q++)
        if (c->kept_slot[q] >= 0)
            info->saved[c->kept_slot[q]] = c->kept[q];
    info->n_sizes = c->n_sizes;
    memcpy(info->sizes, c->sizes, sizeof(int64_t) * (size_t)c->n_sizes);
    return CA_OK;
}

/* The tape's ops as this node runs them: with its run's sizes when the trace had symbols. */
static const dbl_op *ctx_ops(const dbl_ctx *c) {
    return c->ops ? c->ops : c->tape->ops;
}

/* *slot += g, out of place (so a create_graph backward records the sum). */
static ca_status acc_add(ca_tensor **slot, ca_tensor *g) {
    if (!*slot) {
        *slot = ca_tensor_retain(g);
        return CA_OK;
    }
    ca_tensor *s;
    CA_CHECK(ca_add(*slot, g, &s));
    ca_tensor_release(*slot);
    *slot = s;
    return CA_OK;
}

/* The tape's ops again, on the node's inputs, with grad mode on: each op whose inputs
 * carry a history records its usual node, whose rule the reverse pass runs. */
static ca_status replay(const dbl_ctx *c, ca_tensor **vals) {
    const dbl_tape *t = c->tape;
    const dbl_op *ops = ctx_ops(c);
    for (int j = 0; j < c->n_in; j++)
        vals[t->ins[j].val] = ca_tensor_retain(c->in[j]);
    bool prev = ca_set_grad_enabled(true);
    ca_status st = CA_OK;
    for (int o = 0; o < t->n_ops && st == CA_OK; o++) {
        const dbl_op *e = &ops[o];
        ca_tensor *in[GRAPH_MAX_IN] = {0};
        for (int i = 0; i < e->n_in && st == CA_OK; i++)
            if (!(in[i] = vals[e->in[i]]))
                st = err_set(CA_STATUS_INTERNAL,
                             "CompiledAutogradBackward0: the tape's %s reads a value it never "
                             "made; please report this bug",
                             cai_op_def(e->op)->name);
        if (st == CA_OK)
            st = cai_op_call(e->op, e->n_in, in, &e->a, &vals[e->out], NULL);
        /* a kept value: the recording of a compiled backward through this node reads the
         * first graph's result instead of replaying the op (custom_trace.c) */
        if (st == CA_OK && e->kept >= 0 && c->kept_slot[e->kept] >= 0 && ca_custom_tracing())
            cai_record_known(vals[e->out], c->kept_slot[e->kept]);
    }
    ca_set_grad_enabled(prev);
    return st;
}

/* The rule of the node op e recorded for y, on y's gradient g, into the inputs' sums. */
static ca_status reverse_one(const dbl_op *e, ca_tensor *y, ca_tensor *g, ca_tensor **acc) {
    ca_node *n = y->grad_fn;
    if (n->op != e->op || n->n_in != e->n_in)
        return err_set(CA_STATUS_INTERNAL,
                       "CompiledAutogradBackward0: replaying %s made a %s node; please report "
                       "this bug",
                       cai_op_def(e->op)->name, cai_node_name(n));
    CA_CHECK(cai_saved_unpack(n));
    ca_eager_builder eb;
    cai_eager_builder_init(&eb);
    eb.base.create_graph = cai_engine_create_graph();
    ca_bval gin[GRAPH_MAX_IN] = {0};
    cai_op_def(n->op)->backward(&eb.base, n, bv_of(g), gin);
    ca_status st = eb.base.status;
    for (int i = 0; i < e->n_in && st == CA_OK; i++)
        if (n->next[i].fn && gin[i])
            st = acc_add(&acc[e->in[i]], bv_tensor(gin[i]));
    cai_eager_scope_end(&eb);
    cai_saved_drop_unpacked(n);
    return st;
}

/* From the last op to the first: each value's summed gradient through its op's rule. */
static ca_status reverse(const dbl_ctx *c, ca_tensor **vals, ca_tensor **acc) {
    const dbl_tape *t = c->tape;
    const dbl_op *ops = ctx_ops(c);
    for (int o = t->n_ops - 1; o >= 0; o--) {
        const dbl_op *e = &ops[o];
        ca_tensor *g = acc[e->out], *y = vals[e->out];
        if (!g || !y->requires_grad)
            continue;
        bool identity = false; /* an op that gave back its input: the gradient passes */
        for (int i = 0; i < e->n_in && !identity; i++)
            if (vals[e->in[i]] == y) {
                identity = true;
                CA_CHECK(acc_add(&acc[e->in[i]], g));
            }
        if (!identity && y->grad_fn)
            CA_CHECK(reverse_one(e, y, g, acc));
    }
    return CA_OK;
}

static ca_status dbl_backward(void *ctx, int n_outputs, ca_tensor *const *grad_outputs,
                              int n_inputs, ca_tensor **grad_inputs) {
    dbl_ctx *c = ctx;
    const dbl_tape *t = c->tape;
    if (c->released)
        return err_set(CA_STATUS_AUTOGRAD,
                       "Trying to backward through the graph a second time (or directly access "
                       "saved tensors after they have already been freed). Saved intermediate "
                       "values of the graph are freed when you call .backward() or "
                       "autograd.grad(). Specify retain_graph=True if you need to backward "
                       "through the graph a second time or if you need to access saved tensors "
                       "after calling backward. (CompiledAutogradBackward0's inputs were freed "
                       "by an earlier backward.)");
    CA_ASSERT(n_outputs == c->n_out && n_inputs == c->n_in);
    ca_tensor **vals = cai_mem_calloc(2 * (size_t)t->n_vals + 1, sizeof(ca_tensor *));
    if (!vals)
        return err_nomem("CompiledAutogradBackward0");
    ca_tensor **acc = vals + t->n_vals;
    ca_status st = replay(c, vals);
    for (int k = 0; k < n_outputs && st == CA_OK; k++)
        if (grad_outputs[k])
            st = acc_add(&acc[c->out_vals[k]], grad_outputs[k]);
    if (st == CA_OK)
        st = reverse(c, vals, acc);
    for (int j = 0; j < n_inputs && st == CA_OK; j++)
        grad_inputs[j] = acc[t->ins[j].val] ? ca_tensor_retain(acc[t->ins[j].val]) : NULL;
    cai_op_release_all(vals, 2 * t->n_vals);
    cai_mem_free(vals);
    return st;
}

/* The tape's input j as the node takes it: a seed as it is, a saved tensor joined to its
 * history. */
static ca_status input_of(const key_collect *k, const dbl_input *r, ca_tensor **out) {
    if (r->kind != DBL_SAVED) {
        *out = ca_tensor_retain(own_tensor(k, r));
        return CA_OK;
    }
    return cai_saved_reconnect(k->nodes[r->call - 1], r->k, out);
}

bool cai_dbl_is_node(const ca_node *n) {
    return n->custom && n->custom->fn.key == DBL_FUNCTION_KEY &&
           n->custom->fn.backward == dbl_backward;
}

/* A size the trace kept symbolic (a handle) as this run's number. */
static int64_t resolve(const dbl_sizes *z, int64_t v) {
    if (v < BX_SIZE_NUMBER_LIMIT)
        return v;
    return cai_graph_sx_eval(z->g, (graph_sx)(v - SIZE_HANDLE_BASE), z->values);
}

/* The tape's ops with the handles in their attributes replaced by this run's sizes. */
static ca_status resolve_ops(dbl_ctx *c, const dbl_sizes *z) {
    const dbl_tape *t = c->tape;
    if (!(c->ops = cai_mem_alloc(sizeof(dbl_op) * ((size_t)t->n_ops + 1))))
        return err_nomem("CompiledAutogradBackward0");
    memcpy(c->ops, t->ops, sizeof(dbl_op) * (size_t)t->n_ops);
    for (int o = 0; o < t->n_ops; o++) {
        ca_attrs *a = &c->ops[o].a;
        for (int k = 0; k < 4; k++)
            a->i[k] = resolve(z, a->i[k]);
        for (int d = 0; d < a->shape.n; d++)
            a->shape.v[d] = resolve(z, a->shape.v[d]);
        for (int d = 0; d < a->dims.n; d++)
            a->dims.v[d] = resolve(z, a->dims.v[d]);
        if (c->ops[o].count >= 0) {
            int64_t n = cai_graph_sx_eval(z->g, c->ops[o].count, z->values);
            a->s[0] = n > 0 ? 1.0 / (double)n : INFINITY; /* a mean over nothing, as eager */
        }
    }
    c->n_sizes = z->n <= CA_CUSTOM_MAX_SIZES ? z->n : -1;
    if (c->n_sizes > 0)
        memcpy(c->sizes, z->values, sizeof(int64_t) * (size_t)z->n);
    return CA_OK;
}

static ca_status make_ctx(dbl_tape *t, const key_collect *k, const dbl_sizes *z, int n,
                          ca_tensor *const *grads, ca_tensor *const *kept, dbl_ctx **out) {
    dbl_ctx *c = cai_mem_calloc(1, sizeof *c);
    if (!c)
        return err_nomem("CompiledAutogradBackward0");
    c->tape = tape_retain(t);
    c->n_in = t->n_ins;
    c->in = cai_mem_calloc((size_t)t->n_ins + 1, sizeof(ca_tensor *));
    c->kept = cai_mem_calloc((size_t)t->n_kept + 1, sizeof(ca_tensor *));
    c->kept_slot = cai_mem_calloc((size_t)t->n_kept + 1, sizeof(int));
    c->out_vals = cai_mem_calloc((size_t)n + 1, sizeof(int32_t));
    ca_status st = c->in && c->kept && c->kept_slot && c->out_vals
                       ? CA_OK
                       : err_nomem("CompiledAutogradBackward0");
    c->n_saved = t->n_ins;
    for (int q = 0; q < t->n_kept && st == CA_OK; q++) { /* slots while they last */
        c->kept[q] = kept[q] ? ca_tensor_retain(kept[q]) : NULL;
        c->kept_slot[q] = kept[q] && c->n_saved < CA_CUSTOM_MAX_SAVED ? c->n_saved++ : -1;
    }
    if (st == CA_OK && z->n > 0)
        st = resolve_ops(c, z);
    for (int j = 0; j < t->n_ins && st == CA_OK; j++)
        st = input_of(k, &t->ins[j], &c->in[j]);
    for (int i = 0; i < n && st == CA_OK; i++) {
        if (!grads[i])
            continue;
        if (t->outs[i] < 0)
            st = err_set(CA_STATUS_INTERNAL,
                         "CompiledAutogradBackward0: output %d has no value "
                         "on the tape; please report this bug",
                         i);
        else
            c->out_vals[c->n_out++] = t->outs[i];
    }
    if (st != CA_OK) {
        dbl_ctx_free(c);
        return st;
    }
    *out = c;
    return CA_OK;
}

ca_status cai_dbl_attach(dbl_tape *t, const key_collect *k, const dbl_sizes *z, int n,
                         ca_tensor **grads, ca_tensor *const *kept) {
    dbl_ctx *c;
    CA_CHECK(make_ctx(t, k, z, n, grads, kept, &c));
    if (c->n_out == 0) {
        dbl_ctx_free(c);
        return CA_OK;
    }
    ca_tensor **outs = cai_mem_calloc(2 * (size_t)c->n_out, sizeof(ca_tensor *));
    if (!outs) {
        dbl_ctx_free(c);
        return err_nomem("CompiledAutogradBackward0");
    }
    ca_tensor **res = outs + c->n_out;
    for (int i = 0, j = 0; i < n; i++)
        if (grads[i])
            outs[j++] = grads[i];
    ca_custom_function fn = {.name = "CompiledAutogradBackward0",
                             .key = DBL_FUNCTION_KEY,
                             .backward = dbl_backward,
                             .release = dbl_release,
                             .ctx = c,
                             .ctx_free = dbl_ctx_free,
                             .trace_state = dbl_trace_state};
    ca_status st = ca_custom_apply(&fn, c->n_in, c->in, c->n_out, outs, NULL, res);
    for (int i = 0, j = 0; i < n && st == CA_OK; i++)
        if (grads[i]) {
            ca_tensor_release(grads[i]);
            grads[i] = res[j++];
        }
    cai_mem_free(outs);
    return st;
}
