/* builder_trace.c - the tracing builder (see builder_trace.h).
 *
 * cai_trace_backward mirrors the eager engine's run over the same walk: gradients summed over
 * fan-in (IR adds), tensor hooks and retain_grad as call nodes, then the node's rule, whose
 * builder calls become IR nodes; AccumulateGrad becomes an accumulate node and its
 * post-accumulate hooks follow it. Values carry the NodeCall and forward graph of the rule
 * that made them, for the printed graph.
 */
#include "autograd/builder_trace.h"

#include "autograd/builder.h"
#include "autograd/compiled_double.h"
#include "autograd/custom_trace.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    ca_builder base;
    const trace_request *req;
    graph *g;
    graph_val *lifted; /* value of each lifted tensor */
    graph_val *buf;    /* per NodeCall output (out_base): gradient flowing into it, or -1 */
    int *out_base;     /* per NodeCall: its output 0's index in buf */
    trace_read *reads; /* saved tensors read, in order */
    int n_reads, cap_reads;
    trace_callout *callouts; /* the graph's call-outs, by number */
    int n_callouts, cap_callouts;
    trace_custom_note *notes; /* how each custom backward was captured */
    int n_notes, cap_notes;
    ca_meta *shadow_outs; /* max_out entries: the shadow's output metas, symbolic */
    int max_out;
    int call; /* the NodeCall whose rule is running */
    graph_origin origin;
    ca_node shadow;     /* the node the running rule sees */
    ca_meta *shadow_in; /* max_in entries */
    int max_in;
    ca_meta metas[16]; /* ring of meta() answers */
    int next_meta;
    dbl_tape *tape; /* create_graph: the ops, inputs and outputs of a differentiable result */
} trace_builder;

static ca_bval bval_of(graph_val v) {
    return (ca_bval)(intptr_t)(v + 1);
}

static graph_val val_of(ca_bval b) {
    return (graph_val)((intptr_t)b - 1);
}

/* Record the trace's first failure. Running out of memory in the graph layer is a real
 * error (CA_STATUS_NOMEM); anything else means this graph cannot be traced yet
 * (CA_STATUS_INTERNAL), and the caller runs it eagerly instead. */
static ca_bval trace_fail(trace_builder *tb, const char *fmt, const char *what) {
    if (tb->base.status != CA_OK)
        return NULL;
    if (tb->g && cai_graph_out_of_memory(tb->g))
        tb->base.status = err_nomem("the compiled backward's graph");
    else if (tb->g && cai_graph_error(tb->g)[0])
        tb->base.status = err_set(CA_STATUS_INTERNAL, "%s: %s", what, cai_graph_error(tb->g));
    else
        tb->base.status = err_set(CA_STATUS_INTERNAL, fmt, what);
    return NULL;
}

/* ---------------------------------------------------------------------------------------
 * Sizes: numbers for static slots, handles for symbolic ones
 */
static int64_t slot_size(trace_builder *tb, int slot) {
    const cache_entry *e = tb->req->e;
    if (e->symbol[slot] < 0)
        return tb->req->k->sizes[slot];
    return SIZE_HANDLE_BASE + cai_graph_sx_slot(tb->g, e->symbol[slot]);
}

/* A rule's size (number or handle) as a size expression; -1 if it is corrupt. */
static graph_sx size_sx(trace_builder *tb, int64_t v) {
    if (v >= SIZE_HANDLE_BASE / 2) {
        int64_t id = v - SIZE_HANDLE_BASE;
        return id >= 0 && id < INT32_MAX ? (graph_sx)id : -1;
    }
    return v >= -1 ? cai_graph_sx_const(tb->g, v) : -1;
}

static int64_t sx_size(trace_builder *tb, graph_sx s) {
    int64_t v;
    return cai_graph_sx_const_value(tb->g, s, &v) ? v : SIZE_HANDLE_BASE + s;
}

static bool decode_shape(trace_builder *tb, const ca_ints *in, graph_op_args *a) {
    a->n_shape = in->n;
    for (int d = 0; d < in->n; d++)
        if ((a->shape[d] = size_sx(tb, in->v[d])) < 0)
            return false;
    return true;
}

/* Ints that are positions (slice bounds) must not be handles: a rule that computes a
 * position from a symbolic size cannot be traced with that size symbolic. */
static bool plain_ints(const int64_t *v, int n) {
    for (int i = 0; i < n; i++)
        if (v[i] >= SIZE_HANDLE_BASE / 2 || v[i] <= -SIZE_HANDLE_BASE / 2)
            return false;
    return true;
}

/* ---------------------------------------------------------------------------------------
 * Lowering op-table rows to graph ops
 */
static uint32_t dims_mask(const ca_ints *dims, int ndim) {
    uint32_t m = 0;
    for (int i = 0; i < dims->n; i++)
        m |= 1u << (dims->v[i] < 0 ? dims->v[i] + ndim : dims->v[i]);
    return dims->n ? m : (ndim ? (1u << ndim) - 1 : 0);
}

/* A slice whose start or end is a symbolic size (cat's derivative along a dynamic dim):
 * step 1 only, as narrow(dim, start, end - start). */
static bool lower_narrow(trace_builder *tb, const ca_attrs *at, graph_op_args *a) {
    if (!plain_ints(at->i, 1) || at->i[3] != 1)
        return false;
    graph_sx start = size_sx(tb, at->i[1]), end = size_sx(tb, at->i[2]);
    if (start < 0 || end < 0)
        return false;
    a->op = GOP_NARROW;
    a->n_shape = 2;
    a->shape[0] = start;
    a->shape[1] = cai_graph_sx_op(tb->g, GSX_SUB, end, start);
    a->i[1] = a->i[2] = a->i[3] = 0;
    return a->shape[1] >= 0;
}

/* nll_loss_backward's reduction goes to GOP_NLL_BW as it is (lower copies attrs.i). */
_Static_assert((int)GRAPH_REDUCTION_NONE == (int)CA_REDUCTION_NONE, "reduction codes differ");
_Static_assert((int)GRAPH_REDUCTION_MEAN == (int)CA_REDUCTION_MEAN, "reduction codes differ");
_Static_assert((int)GRAPH_REDUCTION_SUM == (int)CA_REDUCTION_SUM, "reduction codes differ");

/* Fill a with the graph op for row `op`; false if the row has no graph op. */
static bool lower(trace_builder *tb, int op, const ca_attrs *at, int in_ndim, graph_op_args *a) {
    memcpy(a->i, at->i, sizeof a->i);
    a->p[0] = at->s[0];
    a->p[1] = at->s[1];
    switch (op) {
    case CA_OP_PW: a->op = GOP_PW; return true;
    case CA_OP_SUM:
        a->op = GOP_SUM;
        a->i[0] = dims_mask(&at->dims, in_ndim);
        a->i[1] = at->i[0];
        return true;
    case CA_OP_SUM_TO: a->op = GOP_SUM_TO; return decode_shape(tb, &at->shape, a);
    case CA_OP_EXPAND: a->op = GOP_EXPAND; return decode_shape(tb, &at->shape, a);
    case CA_OP_RESHAPE: a->op = GOP_RESHAPE; return decode_shape(tb, &at->shape, a);
    case CA_OP_PERMUTE:
        a->op = GOP_PERMUTE;
        a->n_perm = at->dims.n;
        for (int d = 0; d < at->dims.n; d++)
            a->perm[d] = (int8_t)(at->dims.v[d] < 0 ? at->dims.v[d] + in_ndim : at->dims.v[d]);
        return true;
    case CA_OP_UNSQUEEZE: a->op = GOP_UNSQUEEZE; return true;
    case CA_OP_SLICE: /* a symbolic start: a narrow, with the length as a size expression */
        if (plain_ints(at->i, 4)) {
            a->op = GOP_SLICE;
            return true;
        }
        return lower_narrow(tb, at, a);
    case CA_OP_SLICE_BACKWARD: /* start and end as size expressions: symbolic from a dim's end */
        a->op = GOP_SLICE_BACKWARD;
        a->i[1] = size_sx(tb, at->i[1]);
        a->i[2] = size_sx(tb, at->i[2]);
        return a->i[1] >= 0 && a->i[2] >= 0 && plain_ints(&at->i[3], 1) &&
               decode_shape(tb, &at->shape, a);
    case CA_OP_CONTIGUOUS: a->op = GOP_CONTIGUOUS; return true;
    case CA_OP_MATMUL: a->op = GOP_MATMUL; return true;
    case CA_OP_INDEX_ADD: a->op = GOP_INDEX_ADD; return decode_shape(tb, &at->shape, a);
    case CA_OP_SCATTER_ADD: a->op = GOP_SCATTER_ADD; return decode_shape(tb, &at->shape, a);
    case CA_OP_TO_DTYPE:
        a->op = GOP_CAST;
        a->dtype = (kern_dtype)at->i[0];
        return true;
    case CA_OP_NLL_LOSS_BACKWARD: a->op = GOP_NLL_BW; return decode_shape(tb, &at->shape, a);
    case CA_OP_INDEX_FILL: a->op = GOP_INDEX_FILL; return true;
    case CA_OP_INDEX_SELECT: a->op = GOP_INDEX_SELECT; return true;
    case CA_OP_GATHER: a->op = GOP_GATHER; return true;
    case CA_OP_CUMSUM: a->op = GOP_CUMSUM; return true;
    case CA_OP_CUMPROD: a->op = GOP_CUMPROD; return true;
    case CA_OP_TRIL:
    case CA_OP_TRIU:
        a->op = GOP_TRI;
        a->i[1] = op == CA_OP_TRIU;
        return true;
    case CA_OP_CUMPROD_BACKWARD: a->op = GOP_CUMPROD_BW; return true;
    case CA_OP_IM2COL:
    case CA_OP_COL2IM: {
        int64_t p[CAI_CONV_NPARAMS]; /* ops_conv.c's attrs: dims, and the end paddings in i */
        if (at->dims.n != CAI_CONV_IN_DIMS)
            return false;
        memcpy(p, at->dims.v, sizeof(int64_t) * CAI_CONV_IN_DIMS);
        p[CAI_CONV_PH_END] = at->i[1];
        p[CAI_CONV_PW_END] = at->i[2];
        a->op = op == CA_OP_IM2COL ? GOP_IM2COL : GOP_COL2IM;
        if (!cai_graph_conv_pack(p, a->i) || at->i[3] < 0 || at->i[3] >= CAI_CONV_COLS__COUNT ||
            (op == CA_OP_COL2IM && (at->i[3] & ~(int64_t)CAI_CONV_COLS_FLIP)))
            return false;
        cai_graph_conv_set_layout(a->i, at->i[3]); /* the column layout */
        a->i[3] = at->i[0];                        /* groups */
        return op == CA_OP_IM2COL || decode_shape(tb, &at->shape, a);
    }
    case CA_OP_CONV2D: /* the derivative's convolutions: no bias */
    case CA_OP_CONV2D_WEIGHT_GRAD: {
        int64_t p[CAI_CONV_NPARAMS];
        if (at->dims.n != CAI_CONV_IN_DIMS || a->n_in != 2)
            return false;
        memcpy(p, at->dims.v, sizeof(int64_t) * CAI_CONV_IN_DIMS);
        p[CAI_CONV_PH_END] = at->i[1];
        p[CAI_CONV_PW_END] = at->i[2];
        a->op = op == CA_OP_CONV2D ? GOP_CONV2D : GOP_CONV2D_WEIGHT_GRAD;
        if (!cai_graph_conv_pack(p, a->i) || (at->i[3] & ~(int64_t)CAI_CONV_COLS_FLIP))
            return false;
        cai_graph_conv_set_layout(a->i, at->i[3]); /* the taps' order */
        a->i[3] = at->i[0];                        /* groups */
        return op == CA_OP_CONV2D || decode_shape(tb, &at->shape, a);
    }
    default: return false;
    }
}

static graph_val add_node(trace_builder *tb, const graph_op_args *a) {
    graph_val v = cai_graph_add(tb->g, a, tb->origin);
    if (v < 0)
        trace_fail(tb, "%s", tb->origin.name ? tb->origin.name : "an input");
    return v;
}

/* ---------------------------------------------------------------------------------------
 * The builder interface
 */
/* A double backward's GEMM: the graph outputs its value (after the targets and the
 * leaves) and the node keeps it, so that a compiled backward through the node reads it
 * instead of computing it again (compiled_double.c's replay). */
static void keep_value(trace_builder *tb, graph_val v) {
    int q = cai_dbl_keep_last(tb->tape);
    graph_op_args a = {.op = GOP_OUTPUT,
                       .n_in = 1,
                       .in = {v},
                       .i = {tb->req->n_targets + tb->req->k->n_lifted + q}};
    add_node(tb, &a);
}

static ca_bval trace_apply(ca_builder *b, int op, int n, const ca_bval *in, const ca_attrs *at) {
    trace_builder *tb = (trace_builder *)b;
    graph_op_args a = {.n_in = n};
    if (n > GRAPH_MAX_IN)
        return trace_fail(tb, "op '%s' has too many inputs to trace", cai_op_def(op)->name);
    for (int i = 0; i < n; i++) {
        a.in[i] = val_of(in[i]);
        CA_ASSERT(a.in[i] >= 0 && a.in[i] < cai_graph_count(tb->g)); /* a value of this graph */
    }
    const graph_node *x = cai_graph_node_at(tb->g, a.in[0]);
    if (!lower(tb, op, at ? at : &(ca_attrs){0}, x ? x->ndim : 0, &a))
        return trace_fail(tb,
                          "cannot trace op '%s' here (no graph op for it, or a rule computed a "
                          "position from a symbolic size)",
                          cai_op_def(op)->name);
    int before = cai_graph_count(tb->g);
    graph_val v = add_node(tb, &a);
    if (v >= before && tb->tape && !cai_dbl_record_op(tb->tape, op, n, a.in, at, v))
        tb->base.status = err_nomem("the compiled double backward's tape");
    else if (v >= before && tb->tape && op == CA_OP_MATMUL)
        keep_value(tb, v);
    return v < 0 || tb->base.status != CA_OK ? NULL : bval_of(v);
}

static bool record_read(trace_builder *tb, int k) {
    if (!mem_grow((void **)&tb->reads, &tb->cap_reads, tb->n_reads + 1, sizeof(trace_read)))
        return false;
    tb->reads[tb->n_reads++] = (trace_read){tb->call, k};
    return true;
}

/* A double backward's read of lifted tensor idx: its value, or a value of its own when an
 * earlier read joined the tensor to another history; recorded on the tape. -1 on failure. */
static graph_val tape_input(trace_builder *tb, int idx, dbl_read kind, int call, int k) {
    bool used;
    graph_val v = cai_dbl_input_val(tb->tape, tb->req->k, idx, kind, call, k, &used);
    if (v >= 0)
        return v;
    v = tb->lifted[idx];
    if (used) { /* a copy in the graph, which its passes fold back into v */
        graph_op_args copy = {.op = GOP_PW, .n_in = 1, .in = {v}, .i = {KPW_COPY}};
        if ((v = add_node(tb, &copy)) < 0)
            return -1;
    }
    if (!cai_dbl_record_input(tb->tape, v, idx, kind, call, k)) {
        tb->base.status = err_nomem("the compiled double backward's tape");
        return -1;
    }
    return v;
}

static ca_bval trace_saved(ca_builder *b, const ca_node *n, int k) {
    trace_builder *tb = (trace_builder *)b;
    ca_status st = cai_node_check_saved(n, k);
    if (st != CA_OK) {
        b->status = st;
        return NULL;
    }
    if (!n->saved[k].t)
        return NULL;
    if (!record_read(tb, k)) {
        b->status = err_nomem("the compiled backward's trace");
        return NULL;
    }
    const ca_node *real = tb->req->k->nodes[tb->call - 1]; /* n is its shadow */
    if (tb->tape && cai_saved_aux_recomputed(real, k)) /* a double backward's: from its inputs */
        return cai_op_def(n->op)->aux_again(b, n, cai_op_def(n->op)->fields[n->saved[k].field].idx);
    int idx = cai_key_find_lifted(tb->req->k, n->saved[k].t, LIFT_SAVED);
    CA_ASSERT(idx < tb->req->k->n_lifted);
    if (idx < 0)
        return trace_fail(tb, "saved tensor of %s was not lifted by the key", cai_node_name(n));
    graph_val v = tb->tape ? tape_input(tb, idx, DBL_SAVED, tb->call, k) : tb->lifted[idx];
    return v < 0 ? NULL : bval_of(v);
}

static const ca_meta *trace_meta(ca_builder *b, ca_bval v) {
    trace_builder *tb = (trace_builder *)b;
    const graph_node *x = cai_graph_node_at(tb->g, val_of(v));
    CA_ASSERT(x); /* a value of this graph */
    ca_meta *m = &tb->metas[tb->next_meta++ % 16];
    m->dtype = (ca_dtype)x->dtype;
    m->ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++)
        m->shape[d] = sx_size(tb, x->shape[d]);
    return m;
}

/* x / N with N the product of the masked dims: a constant when they are all static, else
 * a size expression the graph evaluates at run time. */
static ca_bval trace_scale_inv_numel(ca_builder *b, ca_bval x, const ca_meta *m,
                                     uint32_t dim_mask) {
    trace_builder *tb = (trace_builder *)b;
    graph_sx count = cai_graph_sx_const(tb->g, 1);
    for (int d = 0; d < m->ndim && count >= 0; d++) {
        graph_sx dim = dim_mask & (1u << d) ? size_sx(tb, m->shape[d]) : -1;
        if (dim_mask & (1u << d))
            count = dim < 0 ? -1 : cai_graph_sx_op(tb->g, GSX_MUL, count, dim);
    }
    if (count < 0)
        return trace_fail(tb, "%s: a mean over a corrupt size", tb->origin.name);
    int64_t c;
    if (cai_graph_sx_const_value(tb->g, count, &c))
        return bx_mul_s(b, x, 1.0 / (double)c);
    graph_op_args a = {.op = GOP_SCALE_SIZE, .n_in = 1, .in = {val_of(x)}, .n_shape = 1};
    a.shape[0] = count;
    a.p[0] = 1.0;
    int before = cai_graph_count(tb->g);
    graph_val v = add_node(tb, &a);
    if (v >= before && tb->tape && !cai_dbl_record_scale(tb->tape, val_of(x), count, v))
        tb->base.status = err_nomem("the compiled double backward's tape");
    return v < 0 || tb->base.status != CA_OK ? NULL : bval_of(v);
}

/* x + y as a size expression (a number when both are); y may be a negative number (a
 * position counted from a dim's end: size - 2). A corrupt handle fails the trace. */
static int64_t trace_size_add(ca_builder *b, int64_t x, int64_t y) {
    trace_builder *tb = (trace_builder *)b;
    bool minus = y < 0 && y > INT64_MIN;
    graph_sx a = size_sx(tb, x), c = size_sx(tb, minus ? -y : y), s = -1;
    if (a >= 0 && c >= 0)
        s = cai_graph_sx_op(tb->g, minus ? GSX_SUB : GSX_ADD, a, c);
    if (s < 0) {
        trace_fail(tb, "%s: a size sum could not be formed", tb->origin.name);
        return 0;
    }
    return sx_size(tb, s);
}

/* x * y as a size expression (a number when both are) */
static int64_t trace_size_mul(ca_builder *b, int64_t x, int64_t y) {
    trace_builder *tb = (trace_builder *)b;
    graph_sx a = size_sx(tb, x), c = size_sx(tb, y), s = -1;
    if (a >= 0 && c >= 0)
        s = cai_graph_sx_op(tb->g, GSX_MUL, a, c);
    if (s < 0) {
        trace_fail(tb, "%s: a size product could not be formed", tb->origin.name);
        return 0;
    }
    return sx_size(tb, s);
}

static const ca_builder_vtbl trace_vtbl = {trace_apply,           trace_saved,    trace_meta,
                                           trace_scale_inv_numel, trace_size_add, trace_size_mul};

/* ---------------------------------------------------------------------------------------
 * Inputs and the shadow node
 */
static ca_status add_inputs(trace_builder *tb) {
    const key_collect *k = tb->req->k;
    for (int i = 0; i < k->n_lifted; i++) {
        const key_lifted *l = &k->lifted[i];
        graph_op_args a = {.op = GOP_INPUT, .dtype = kdt(l->t->dtype), .n_shape = l->t->ndim};
        a.i[0] = i;
        for (int d = 0; d < l->t->ndim; d++)
            a.shape[d] = size_sx(tb, slot_size(tb, l->first_slot + d));
        tb->origin = (graph_origin){-1, NULL, -1};
        if ((tb->lifted[i] = add_node(tb, &a)) < 0)
            return tb->base.status;
    }
    return CA_OK;
}

static void shadow_meta(trace_builder *tb, ca_meta *m, int *cursor) {
    for (int d = 0; d < m->ndim; d++)
        m->shape[d] = slot_size(tb, (*cursor)++);
}

/* The node as its rule must see it: dynamic sizes replaced by handles, in the order the
 * key lifted them (input shapes, grad_output, then the row's fields). */
static void make_shadow(trace_builder *tb, const ca_node *n, int call) {
    const key_collect *k = tb->req->k;
    int cursor = cai_key_node_first_slot(k, call);
    CA_ASSERT(n->n_in <= tb->max_in); /* shadow_in's size; run_rule turns larger nodes away */
    tb->shadow = *n;
    memcpy(tb->shadow_in, n->in_meta, sizeof(ca_meta) * (size_t)n->n_in);
    tb->shadow.in_meta = tb->shadow_in;
    for (int i = 0; i < n->n_in; i++)
        shadow_meta(tb, &tb->shadow_in[i], &cursor);
    shadow_meta(tb, &tb->shadow.out_meta, &cursor);
    tb->shadow_outs[0] = tb->shadow.out_meta;
    for (int o = 1; o < n->n_out; o++) { /* a custom function's: lifted after output 0 */
        tb->shadow_outs[o] = n->outs[o - 1].meta;
        shadow_meta(tb, &tb->shadow_outs[o], &cursor);
    }
    const ca_op_def *row = cai_op_def(n->op);
    int saved = 0;
    for (int f = 0; f < row->n_fields; f++) {
        const ca_field_desc *fd = &row->fields[f];
        if (fd->kind == FIELD_TENSOR) {
            ca_tensor *t = n->saved[saved++].t;
            int idx = t ? cai_key_find_lifted(k, t, LIFT_SAVED) : -1;
            if (idx >= 0 && k->lifted[idx].first_slot == cursor)
                cursor += t->ndim; /* first lifted here: its dims were lifted here */
        } else if (fd->kind == FIELD_SIZES) {
            for (int d = 0; d < n->attrs.shape.n; d++)
                tb->shadow.attrs.shape.v[d] = slot_size(tb, cursor++);
        }
    }
}

/* ---------------------------------------------------------------------------------------
 * The backward, node by node
 */
static graph_val side_effect(trace_builder *tb, graph_op op, graph_val in, int64_t i0, int64_t i1) {
    if (tb->tape && op != GOP_OUTPUT) {
        trace_fail(tb,
                   "%s: create_graph=True with tensor or node hooks, retain_grad or .grad "
                   "accumulation is not captured yet",
                   tb->origin.name ? tb->origin.name : "the backward");
        return -1;
    }
    if (tb->tape)
        cai_dbl_record_output(tb->tape, (int)i0, in);
    graph_op_args a = {.op = op, .n_in = 1, .in = {in}, .i = {i0, i1}};
    return add_node(tb, &a);
}

/* The gradient flowing into output nr of NodeCall call (a slot of buf). */
static graph_val *buf_at(trace_builder *tb, int call, int nr) {
    CA_ASSERT(call >= 1 && call <= tb->req->k->n_nodes); /* a NodeCall of this walk */
    return &tb->buf[tb->out_base[call] + nr];
}

/* buf[call, nr] += v, as an IR add when something is there already. */
static void accumulate(trace_builder *tb, int call, int nr, graph_val v) {
    graph_val *b = buf_at(tb, call, nr);
    if (*b < 0) {
        *b = v;
        return;
    }
    graph_op_args a = {.op = GOP_PW, .n_in = 2, .in = {*b, v}, .i = {KPW_ADD}};
    a.p[0] = 1.0;
    int before = cai_graph_count(tb->g);
    graph_val sum = add_node(tb, &a);
    ca_attrs add = {.s = {1.0}, .i = {KPW_ADD}}; /* bx_add's, for a double backward's tape */
    if (sum >= before && tb->tape && !cai_dbl_record_op(tb->tape, CA_OP_PW, 2, a.in, &add, sum))
        tb->base.status = err_nomem("the compiled double backward's tape");
    *b = sum;
}

/* Tensor hooks of output nr of NodeCall `call`, in order; each may replace the gradient. */
static graph_val run_hooks(trace_builder *tb, int call, int nr, graph_val g) {
    const key_collect *k = tb->req->k;
    for (int h = 0; h < k->n_hooks && g >= 0; h++)
        if (k->hooks[h].node_call == call && k->hooks[h].hook->kind == HOOK_PRE &&
            k->hooks[h].hook->output_nr == nr)
            g = side_effect(tb, GOP_HOOK, g, h, 0);
    return g;
}

static bool post_hooked(const trace_builder *tb, int call) {
    const key_collect *k = tb->req->k;
    for (int h = 0; h < k->n_hooks; h++)
        if (k->hooks[h].node_call == call && k->hooks[h].leaf)
            return true;
    return false;
}

static void run_post_hooks(trace_builder *tb, int call, graph_val acc, int leaf) {
    const key_collect *k = tb->req->k;
    for (int h = 0; h < k->n_hooks; h++)
        if (k->hooks[h].node_call == call && k->hooks[h].leaf)
            side_effect(tb, GOP_POST_HOOK, acc, leaf, h);
}

/* ---------------------------------------------------------------------------------------
 * Call-outs: a custom function's backward and node hooks, opaque to the graph
 */
/* Stage args (those >= 0), call, and set res[i] to result i's value where res[i] >= 0 on
 * entry (its meta from metas[i], symbolic); other results are not read. */
static void emit_callout(trace_builder *tb, trace_callout c, const graph_val *args, graph_val *res,
                         const ca_meta *metas) {
    if (tb->tape) {
        trace_fail(tb,
                   "%s: create_graph=True with a call-out (a custom function's backward "
                   "or a node hook) is not captured yet",
                   tb->origin.name ? tb->origin.name : "the backward");
        return;
    }
    if (!mem_grow((void **)&tb->callouts, &tb->cap_callouts, tb->n_callouts + 1,
                  sizeof(trace_callout))) {
        tb->base.status = err_nomem("the compiled backward's trace");
        return;
    }
    int num = tb->n_callouts++;
    tb->callouts[num] = c;
    for (int a = 0; a < c.n_args && tb->base.status == CA_OK; a++)
        if (args[a] >= 0)
            side_effect(tb, GOP_CALLOUT_ARG, args[a], num, a);
    graph_op_args call_a = {.op = GOP_CALLOUT, .i = {num}};
    add_node(tb, &call_a);
    for (int i = 0; i < c.n_res && tb->base.status == CA_OK; i++) {
        if (res[i] < 0)
            continue;
        const ca_meta *m = &metas[i];
        graph_op_args a = {.op = GOP_CALLOUT_RESULT, .dtype = kdt(m->dtype), .n_shape = m->ndim};
        a.i[0] = num;
        a.i[1] = i;
        for (int d = 0; d < m->ndim; d++)
            if ((a.shape[d] = size_sx(tb, m->shape[d])) < 0) {
                trace_fail(tb, "%s: a corrupt size", tb->origin.name);
                return;
            }
        res[i] = add_node(tb, &a);
    }
}

static int hook_index(const key_collect *k, const ca_hook *h) {
    for (int i = 0; i < k->n_hooks; i++)
        if (k->hooks[i].hook == h)
            return i;
    return -1;
}

/* Node pre-hooks on the output gradients g (n_out of them, -1 where none flowed). */
static void node_pre_hooks(trace_builder *tb, ca_node *n, int call, graph_val *g, int n_g) {
    for (ca_hook *h = n->node_pre_hooks; h && tb->base.status == CA_OK; h = h->next) {
        trace_callout c = {call, CALLOUT_NODE_PRE, hook_index(tb->req->k, h), n->n_out, n->n_out};
        graph_val args[64] = {0};
        memcpy(args, g, sizeof(graph_val) * (size_t)n_g);
        emit_callout(tb, c, args, g, tb->shadow_outs);
    }
}

/* Node post-hooks on the input gradients gin (-1 where none) given the outputs' g. */
static void node_post_hooks(trace_builder *tb, ca_node *n, int call, graph_val *gin,
                            const graph_val *g, int n_g) {
    for (ca_hook *h = n->node_post_hooks; h && tb->base.status == CA_OK; h = h->next) {
        trace_callout c = {call, CALLOUT_NODE_POST, hook_index(tb->req->k, h), n->n_in + n->n_out,
                           n->n_in};
        graph_val args[192] = {0};
        if (n->n_in + n->n_out > 192) {
            trace_fail(tb, "%s has too many gradients for its node hooks", tb->origin.name);
            return;
        }
        for (int i = 0; i < n->n_in; i++)
            args[i] = gin[i];
        for (int o = 0; o < n_g; o++)
            args[n->n_in + o] = g[o];
        emit_callout(tb, c, args, gin, tb->shadow_in);
    }
}

static void pass_on(trace_builder *tb, const ca_node *n, const graph_val *gin) {
    for (int i = 0; i < n->n_in && tb->base.status == CA_OK; i++) {
        ca_node *c = n->next[i].fn;
        if (gin[i] >= 0 && cai_walk_needed(tb->req->k->walk, c))
            accumulate(tb, cai_walk_call_id(tb->req->k->walk, c), n->next[i].input_nr, gin[i]);
    }
}

static void run_rule(trace_builder *tb, ca_node *n, int call, graph_val g) {
    const ca_op_def *row = cai_op_def(n->op);
    ca_bval local_b[8] = {0}, *gin_b = local_b;
    graph_val local_v[8], *gin = local_v;
    if (n->n_in > 8) { /* a cat or stack of many tensors */
        gin_b = cai_mem_calloc((size_t)n->n_in, sizeof(ca_bval) + sizeof(graph_val));
        if (!gin_b) {
            tb->base.status = err_nomem("the compiled backward's trace");
            return;
        }
        gin = (graph_val *)(gin_b + n->n_in);
    }
    make_shadow(tb, n, call);
    tb->call = call;
    row->backward(&tb->base, &tb->shadow, bval_of(g), gin_b);
    for (int i = 0; i < n->n_in; i++)
        gin[i] = gin_b[i] ? val_of(gin_b[i]) : -1;
    if (n->node_post_hooks && tb->base.status == CA_OK)
        node_post_hooks(tb, n, call, gin, &g, 1);
    pass_on(tb, n, gin);
    if (gin_b != local_b)
        cai_mem_free(gin_b);
}

/* autograd.grad: every requested input whose gradient is output nr of n's (the same
 * tensor may be asked for twice) gets an output. */
static void outputs_for(trace_builder *tb, const ca_node *n, int nr, graph_val g) {
    const trace_request *req = tb->req;
    for (int i = 0; i < req->n_targets && tb->base.status == CA_OK; i++)
        if (req->targets[i] == n && (req->target_nrs ? req->target_nrs[i] : 0) == nr)
            side_effect(tb, GOP_OUTPUT, g, i, 0);
}

/* Output nr's gradient through its hooks, retain_grad and autograd.grad's outputs. */
static graph_val output_grad(trace_builder *tb, ca_node *n, int call, int nr) {
    graph_val g = run_hooks(tb, call, nr, *buf_at(tb, call, nr));
    if (g >= 0 && !tb->req->capture && node_retained(n, nr))
        side_effect(tb, GOP_RETAIN, g, call, nr);
    if (g >= 0 && tb->req->capture)
        outputs_for(tb, n, nr, g);
    return g;
}

/* ---------------------------------------------------------------------------------------
 * Custom functions: traced when they can be, else call-outs
 */
static void note_custom(trace_builder *tb, int call, bool traced, int n_ops, const char *why) {
    if (!mem_grow((void **)&tb->notes, &tb->cap_notes, tb->n_notes + 1,
                  sizeof(trace_custom_note))) {
        tb->base.status = err_nomem("the compiled backward's trace");
        return;
    }
    trace_custom_note *c = &tb->notes[tb->n_notes++];
    *c = (trace_custom_note){.call = call, .traced = traced, .n_ops = n_ops};
    snprintf(c->why, sizeof c->why, "%s", why);
}

/* Whether n's backward may be recorded: its function says so for this node, and every size
 * of the node is static (a recording holds concrete sizes). */
static bool custom_traceable(trace_builder *tb, const ca_node *n, int call, char *why,
                             size_t size) {
    const ca_custom *c = n->custom;
    const key_collect *k = tb->req->k;
    if (!c->trace.state) {
        snprintf(why, size, "%s", c->trace.why[0] ? c->trace.why : "its function is opaque");
        return false;
    }
    bool dynamic = false;
    for (int s = k->slot0[call]; s < k->slot0[call + 1]; s++)
        dynamic |= tb->req->e->symbol[s] >= 0;
    for (int j = 0; j < c->trace.n_saved && !dynamic; j++) { /* lifted by an earlier node */
        const ca_tensor *t = c->trace.saved[j];
        int idx = t ? cai_key_find_lifted(k, t, LIFT_SAVED) : -1;
        for (int d = 0; idx >= 0 && d < t->ndim; d++)
            dynamic |= tb->req->e->symbol[k->lifted[idx].first_slot + d] >= 0;
    }
    if (dynamic)
        snprintf(why, size, "its sizes are dynamic");
    return !dynamic;
}

/* Replay a recorded tape: the gradients g and the node's saved tensors are its inputs. */
static bool replay_custom(trace_builder *tb, const ca_node *n, int call, const cai_tape *t,
                          const graph_val *g, graph_val *gin, char *why, size_t size) {
    const ca_custom *c = n->custom;
    ca_bval grads[64] = {0}, saved[CA_CUSTOM_MAX_SAVED] = {0}, res[128] = {0};
    for (int k = 0; k < n->n_out; k++)
        grads[k] = g[k] >= 0 ? bval_of(g[k]) : NULL;
    for (int j = 0; j < c->trace.n_saved; j++) {
        const ca_tensor *s = c->trace.saved[j];
        int idx = s ? cai_key_find_lifted(tb->req->k, s, LIFT_SAVED) : -1;
        graph_val v = idx < 0    ? -1
                      : tb->tape ? tape_input(tb, idx, DBL_CUSTOM_SAVED, call, j)
                                 : tb->lifted[idx];
        if (idx >= 0 && v < 0) {
            snprintf(why, size, "%s", ca_last_error());
            return false;
        }
        saved[j] = v >= 0 ? bval_of(v) : NULL;
    }
    /* A value an earlier graph computed (cai_record_known) is read instead of replayed;
     * not under create_graph, where the op must be replayed so that the node it records
     * carries the value's history into the next backward. */
    cai_tape replayed = *t;
    if (tb->tape)
        replayed.n_known = 0;
    if (!cai_tape_replay(&replayed, &tb->base, grads, c->trace.n_saved, c->trace.saved, saved, res,
                         why, size))
        return false;
    for (int i = 0; i < n->n_in; i++)
        gin[i] = gin[i] >= 0 && res[i] ? val_of(res[i]) : -1;
    return true;
}

/* The backward recorded (custom_trace.c) and its ops put into the graph. False when it
 * cannot be (why says why): a failure to replay is cleared, and the caller makes a
 * call-out instead. Running out of memory stays an error. */
static bool trace_custom_ops(trace_builder *tb, ca_node *n, int call, const graph_val *g,
                             graph_val *gin, char *why, size_t size) {
    bool has_grad[64];
    for (int k = 0; k < n->n_out; k++)
        has_grad[k] = g[k] >= 0;
    cai_tape t;
    ca_status st = cai_tape_record(n, has_grad, &t);
    bool ok = st == CA_OK && !t.why[0];
    if (st != CA_OK)
        tb->base.status = st;
    else if (t.why[0])
        snprintf(why, size, "%s", t.why);
    if (ok && !(ok = replay_custom(tb, n, call, &t, g, gin, why, size)) &&
        tb->base.status != CA_STATUS_NOMEM && !cai_graph_out_of_memory(tb->g)) {
        tb->base.status = CA_OK; /* what was added is unreachable: dead-code elimination */
        cai_graph_clear_error(tb->g);
    }
    if (tb->base.status == CA_OK)
        note_custom(tb, call, ok, t.n_ops, ok ? "" : why);
    cai_tape_free(&t);
    return ok && tb->base.status == CA_OK;
}

/* A custom function's backward: recorded and traced into the graph when it can be; else
 * opaque, its output gradients staged as arguments, the call-out running the user's
 * callback, and each input's gradient a result. */
static void trace_custom(trace_builder *tb, ca_node *n, int call) {
    if (tb->tape && !cai_dbl_is_node(n)) {
        trace_fail(tb, "%s: create_graph=True through a custom function is not captured yet",
                   cai_node_name(n));
        return;
    }
    bool any = false;
    graph_val g[64];
    if (n->n_out > 64) {
        trace_fail(tb, "%s has too many outputs to trace", cai_node_name(n));
        return;
    }
    for (int k = 0; k < 64; k++)
        g[k] = -1;
    for (int k = 0; k < n->n_out && tb->base.status == CA_OK; k++) {
        g[k] = *buf_at(tb, call, k) >= 0 ? output_grad(tb, n, call, k) : -1;
        any |= g[k] >= 0;
    }
    make_shadow(tb, n, call);
    /* node pre-hooks as the eager engine: not where autograd.grad only captures */
    bool leads_on = any && cai_walk_leads_on(tb->req->k->walk, n);
    if (any && (leads_on || !tb->req->capture) && n->node_pre_hooks)
        node_pre_hooks(tb, n, call, g, n->n_out);
    if (!leads_on || tb->base.status != CA_OK)
        return;
    graph_val gin[128] = {0};
    if (n->n_in > 128) {
        trace_fail(tb, "%s has too many inputs to trace", cai_node_name(n));
        return;
    }
    for (int i = 0; i < n->n_in; i++)
        gin[i] = cai_walk_needed(tb->req->k->walk, n->next[i].fn) ? 0 : -1; /* >= 0: wanted */
    char why[160] = "";
    bool traced = false;
    if (!custom_traceable(tb, n, call, why, sizeof why))
        note_custom(tb, call, false, 0, why);
    else
        traced = trace_custom_ops(tb, n, call, g, gin, why, sizeof why); /* notes itself */
    if (tb->base.status != CA_OK)
        return;
    if (!traced)
        emit_callout(tb, (trace_callout){call, CALLOUT_CUSTOM, -1, n->n_out, n->n_in}, g, gin,
                     tb->shadow_in);
    if (n->node_post_hooks && tb->base.status == CA_OK)
        node_post_hooks(tb, n, call, gin, g, n->n_out);
    pass_on(tb, n, gin);
}

static bool any_grad(trace_builder *tb, const ca_node *n, int call) {
    for (int k = 0; k < n->n_out; k++)
        if (*buf_at(tb, call, k) >= 0)
            return true;
    return false;
}

static void trace_node(trace_builder *tb, int call) {
    CA_ASSERT(call >= 1 && call <= tb->req->k->n_nodes);
    ca_node *n = tb->req->k->nodes[call - 1];
    if (!cai_walk_needed(tb->req->k->walk, n) || !any_grad(tb, n, call))
        return;
    tb->origin = (graph_origin){call, cai_node_name(n), n->graph_id};
    if (n->custom) {
        trace_custom(tb, n, call);
        return;
    }
    bool is_acc = n->op == CA_OP_ACCUMULATE_GRAD;
    graph_val g = output_grad(tb, n, call, 0);
    /* node pre-hooks as the eager engine: not where autograd.grad only captures */
    bool prehooks = !tb->req->capture || (!is_acc && cai_walk_leads_on(tb->req->k->walk, n));
    if (g >= 0 && tb->base.status == CA_OK && prehooks && n->node_pre_hooks) {
        make_shadow(tb, n, call);
        node_pre_hooks(tb, n, call, &g, 1);
    }
    if (g < 0 || tb->base.status != CA_OK)
        return;
    if (is_acc && !tb->req->capture) {
        int leaf = cai_key_find_lifted(tb->req->k, n->leaf, LIFT_LEAF);
        CA_ASSERT(leaf >= 0); /* the key lifts every AccumulateGrad's leaf */
        if (tb->tape) {       /* an output: .grad takes it differentiably after the run */
            side_effect(tb, GOP_OUTPUT, g, tb->req->n_targets + leaf, 0);
            if (n->node_post_hooks || post_hooked(tb, call))
                trace_fail(tb,
                           "%s: create_graph=True with post-accumulate-grad or node hooks is "
                           "not captured yet",
                           tb->origin.name);
            return;
        }
        graph_val acc = side_effect(tb, GOP_ACCUMULATE, g, leaf, 0);
        if (acc >= 0)
            run_post_hooks(tb, call, acc, leaf);
        if (acc >= 0 && n->node_post_hooks)
            node_post_hooks(tb, n, call, NULL, &g, 1);
    } else if (!is_acc && cai_walk_leads_on(tb->req->k->walk, n)) {
        run_rule(tb, n, call, g);
    }
}

/* A double backward's tape: its rules choose their twice-differentiable forms, as the
 * eager create_graph backward's do. Symbolic sizes stay handles there, resolved per run. */
static ca_status start_tape(trace_builder *tb) {
    tb->base.create_graph = true; /* outputs: autograd.grad's, then one per lifted leaf */
    tb->tape = cai_dbl_tape_new(tb->req->n_targets + tb->req->k->n_lifted);
    return tb->tape ? CA_OK : err_nomem("the compiled double backward's tape");
}

static ca_status trace_alloc(trace_builder *tb, const key_collect *k) {
    size_t calls = (size_t)k->n_nodes + 1, outs = 1;
    tb->g = cai_graph_new();
    if (tb->g && tb->req->unify && cai_graph_unify(tb->g, tb->req->e->n_symbols, tb->req->unify))
        return err_nomem("the compiled backward's trace");
    tb->lifted = cai_mem_alloc(sizeof(graph_val) * ((size_t)k->n_lifted + 1));
    tb->out_base = cai_mem_alloc(sizeof(int) * calls);
    tb->max_in = 8;
    for (int c = 0; c < k->n_nodes; c++)
        if (k->nodes[c]->n_in > tb->max_in)
            tb->max_in = k->nodes[c]->n_in;
    tb->shadow_in = cai_mem_alloc(sizeof(ca_meta) * (size_t)tb->max_in);
    tb->max_out = 1;
    for (int c = 0; c < k->n_nodes; c++)
        if (k->nodes[c]->n_out > tb->max_out)
            tb->max_out = k->nodes[c]->n_out;
    tb->shadow_outs = cai_mem_alloc(sizeof(ca_meta) * (size_t)tb->max_out);
    if (!tb->g || !tb->lifted || !tb->out_base || !tb->shadow_in || !tb->shadow_outs)
        return err_nomem("the compiled backward's trace");
    tb->out_base[0] = 0;
    for (int c = 1; c <= k->n_nodes; c++) {
        tb->out_base[c] = (int)outs;
        outs += (size_t)k->nodes[c - 1]->n_out;
    }
    if (!(tb->buf = cai_mem_alloc(sizeof(graph_val) * outs)))
        return err_nomem("the compiled backward's trace");
    for (size_t c = 0; c < outs; c++)
        tb->buf[c] = -1;
    return CA_OK;
}

static void trace_free_scratch(trace_builder *tb) {
    cai_mem_free(tb->lifted);
    cai_mem_free(tb->buf);
    cai_mem_free(tb->out_base);
    cai_mem_free(tb->shadow_in);
    cai_mem_free(tb->shadow_outs);
}

ca_status cai_trace_backward(const trace_request *req, trace_result *out) {
    memset(out, 0, sizeof *out);
    trace_builder tb = {.base = {.vt = &trace_vtbl, .status = CA_OK}, .req = req};
    const key_collect *k = req->k;
    ca_status st = trace_alloc(&tb, k);
    if (st == CA_OK && req->create_graph && !req->unify)
        st = start_tape(&tb);
    if (st == CA_OK)
        st = add_inputs(&tb);
    if (st == CA_OK) {
        for (int r = 0; r < k->n_roots; r++) { /* the GraphRoot's edges: seed r enters its root */
            graph_val seed = tb.lifted[k->root_seed[r]];
            if (tb.tape && (seed = tape_input(&tb, k->root_seed[r], DBL_SEED, 0, r)) < 0)
                break;
            accumulate(&tb, k->root_call[r], k->root_nr[r], seed);
        }
        for (int c = 1; c <= k->n_nodes && tb.base.status == CA_OK; c++)
            trace_node(&tb, c);
        st = tb.base.status;
    }
    trace_free_scratch(&tb);
    if (st != CA_OK) {
        cai_dbl_tape_release(tb.tape);
        cai_graph_free(tb.g);
        cai_mem_free(tb.reads);
        cai_mem_free(tb.callouts);
        cai_mem_free(tb.notes);
        return st;
    }
    *out = (trace_result){tb.g,          tb.reads, tb.n_reads, tb.callouts,
                          tb.n_callouts, tb.notes, tb.n_notes, tb.tape};
    return CA_OK;
}
