/* print.c - the compiled-autograd log format: a graph printed as a Python-like function,
 * one line per live node, with "# Name (NodeCall i)" comments where the origin changes.
 *
 * The format is documented in graph.h and users read it in their logs (it mirrors
 * PyTorch's compiled-autograd graphs), so it is checked as text by the tests: change it
 * only together with them.
 */
#include "graph/internal.h"
#include "graph/shape_rules.h"

#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Lines
 */
static void print_type(graph_sbuf *b, const graph *g, const graph_node *x) {
    cai_graph_sb_printf(b, "\"%s", cai_graph_dtype_short(x->dtype));
    cai_graph_sb_shape(b, g, x->ndim, x->shape);
    cai_graph_sb_printf(b, "\"");
}

static void print_inputs(graph_sbuf *b, const graph_node *x, graph_name *names, bool first) {
    for (int k = 0; k < x->a.n_in; k++)
        cai_graph_sb_printf(b, "%s%s", first && k == 0 ? "" : ", ", names[x->a.in[k]]);
}

static void print_slice(graph_sbuf *b, const int64_t *i) {
    cai_graph_sb_printf(b, ", dim=%lld, start=%lld, end=%lld, step=%lld", (long long)i[0],
                        (long long)i[1], (long long)i[2], (long long)i[3]);
}

/* Everything after the inputs: shapes, dim lists, scalars and flags. */
static void print_attrs(graph_sbuf *b, const graph *g, const graph_node *x) {
    const graph_op_args *a = &x->a;
    switch (a->op) {
    case GOP_PW: cai_graph_sb_pw_params(b, x, ", "); break;
    case GOP_SUM:
        cai_graph_sb_printf(b, ", ");
        cai_graph_sb_dim_mask(b, a->i[0]);
        cai_graph_sb_printf(b, ", keepdim=%lld", (long long)a->i[1]);
        break;
    case GOP_PERMUTE:
        cai_graph_sb_printf(b, ", ");
        cai_graph_sb_perm(b, a->n_perm, a->perm);
        break;
    case GOP_UNSQUEEZE: cai_graph_sb_printf(b, ", dim=%lld", (long long)a->i[0]); break;
    case GOP_SLICE: print_slice(b, a->i); break;
    case GOP_NARROW: {
        char s1[64], s2[64];
        cai_graph_sb_printf(b, ", dim=%lld, start=%s, length=%s", (long long)a->i[0],
                            cai_graph_sx_str(g, a->shape[0], s1, sizeof s1),
                            cai_graph_sx_str(g, a->shape[1], s2, sizeof s2));
        break;
    }
    case GOP_MATMUL:
        cai_graph_sb_printf(b, ", ta=%lld, tb=%lld", (long long)a->i[0], (long long)a->i[1]);
        break;
    case GOP_CAST: cai_graph_sb_printf(b, ", dtype=%s", cai_graph_dtype_short(a->dtype)); break;
    case GOP_SCALE_SIZE: cai_graph_sb_printf(b, ", %g", a->p[0]); break;
    default: break;
    }
    if (a->n_shape > 0 || a->op == GOP_SUM_TO || a->op == GOP_EXPAND || a->op == GOP_RESHAPE ||
        a->op == GOP_INDEX_ADD || a->op == GOP_SCATTER_ADD) {
        if (a->op != GOP_INPUT && a->op != GOP_NARROW) { /* narrow names its two */
            if (a->n_in > 0)
                cai_graph_sb_printf(b, ", ");
            cai_graph_sb_shape(b, g, a->n_shape, a->shape);
        }
    }
    if (a->op == GOP_SLICE_BACKWARD) {
        char s1[64], s2[64];
        cai_graph_sb_printf(b, ", dim=%lld, start=%s, end=%s, step=%lld", (long long)a->i[0],
                            cai_graph_sx_str(g, (graph_sx)a->i[1], s1, sizeof s1),
                            cai_graph_sx_str(g, (graph_sx)a->i[2], s2, sizeof s2),
                            (long long)a->i[3]);
    } else if (a->op == GOP_INDEX_ADD || a->op == GOP_SCATTER_ADD || a->op == GOP_INDEX_SELECT ||
               a->op == GOP_GATHER || a->op == GOP_CUMPROD)
        cai_graph_sb_printf(b, ", dim=%lld", (long long)a->i[0]);
    else if (a->op == GOP_NLL_BW)
        cai_graph_sb_printf(b, ", reduction=%lld, ignore_index=%lld", (long long)a->i[0],
                            (long long)a->i[1]);
    else if (a->op == GOP_SCALE_SIZE && a->i[0])
        cai_graph_sb_printf(b, ", mul=1");
    else if (a->op == GOP_INDEX_FILL)
        cai_graph_sb_printf(b, ", dim=%lld, value=%g", (long long)a->i[0], a->p[0]);
    else if (a->op == GOP_TRI)
        cai_graph_sb_printf(b, ", diagonal=%lld%s", (long long)a->i[0], a->i[1] ? ", upper=1" : "");
    else if (a->op == GOP_CUMSUM)
        cai_graph_sb_printf(b, ", dim=%lld%s", (long long)a->i[0], a->i[1] ? ", reverse=1" : "");
    else if (a->op == GOP_IM2COL || a->op == GOP_COL2IM || a->op == GOP_CONV2D ||
             a->op == GOP_CONV2D_WEIGHT_GRAD) {
        int64_t p[GRAPH_CONV_NPARAMS];
        cai_graph_conv_unpack(a->i, p);
        cai_graph_sb_printf(b, ", kernel=[%lld, %lld], stride=[%lld, %lld], padding=[%lld, %lld]",
                            (long long)p[0], (long long)p[1], (long long)p[2], (long long)p[3],
                            (long long)p[4], (long long)p[5]);
        if (p[8] != p[4] || p[9] != p[5]) /* more at the end */
            cai_graph_sb_printf(b, ", padding_end=[%lld, %lld]", (long long)p[8], (long long)p[9]);
        cai_graph_sb_printf(b, ", dilation=[%lld, %lld], groups=%lld", (long long)p[6],
                            (long long)p[7], (long long)a->i[3]);
        int64_t layout = cai_graph_conv_layout(a->i);
        if (cai_conv_cols_order(layout) == CAI_CONV_COLS_GKNL)
            cai_graph_sb_printf(b, ", layout=gknl");
        if (layout & CAI_CONV_COLS_FLIP)
            cai_graph_sb_printf(b, ", flip=1");
    }
}

static void print_callout(graph_sbuf *b, const graph_node *x, graph_name *names) {
    const graph_op_args *a = &x->a;
    switch (a->op) {
    case GOP_RETAIN:
        cai_graph_sb_printf(b, "retain_grad(retain=%lld, %s)\n", (long long)a->i[0],
                            names[a->in[0]]);
        break;
    case GOP_ACCUMULATE:
        cai_graph_sb_printf(b, "accumulate_grad(leaf=%lld, %s)\n", (long long)a->i[0],
                            names[a->in[0]]);
        break;
    case GOP_CALLOUT_ARG:
        cai_graph_sb_printf(b, "callout_arg(callouts[%lld], arg=%lld, %s)\n", (long long)a->i[0],
                            (long long)a->i[1], names[a->in[0]]);
        break;
    case GOP_CALLOUT:
        cai_graph_sb_printf(b, "callout(callouts[%lld])\n", (long long)a->i[0]);
        break;
    default: /* GOP_POST_HOOK */
        cai_graph_sb_printf(b, "post_accumulate_hook(hooks[%lld], leaf=%lld)\n", (long long)a->i[1],
                            (long long)a->i[0]);
        break;
    }
}

/* Verbose dumps show each input's strides as they are this run: "f32[s0, 784][784, 1]",
 * as PyTorch's verbose compiled-autograd graph does. */
static void print_strides(graph_sbuf *b, const graph_view *in) {
    cai_graph_sb_printf(b, "[");
    for (int d = 0; d < in->ndim; d++)
        cai_graph_sb_printf(b, d ? ", %lld" : "%lld", (long long)in->strides[d]);
    cai_graph_sb_printf(b, "]");
}

static void print_node(graph_sbuf *b, const graph *g, const graph_node *x, graph_val v,
                       graph_name *names, const graph_view *inputs) {
    cai_graph_sb_printf(b, "    ");
    if (!cai_graph_op_has_value(x->a.op)) {
        print_callout(b, x, names);
        return;
    }
    cai_graph_sb_printf(b, "%s: ", names[v]);
    print_type(b, g, x);
    if (x->a.op == GOP_INPUT && inputs) {
        b->len--; /* reopen the type's closing quote */
        print_strides(b, &inputs[x->a.i[0]]);
        cai_graph_sb_printf(b, "\"");
    }
    if (x->a.op == GOP_INPUT) {
        cai_graph_sb_printf(b, " = inputs[%lld]\n", (long long)x->a.i[0]);
        return;
    }
    if (x->a.op == GOP_CALLOUT_RESULT) {
        cai_graph_sb_printf(b, " = callout_result(callouts[%lld], %lld)\n", (long long)x->a.i[0],
                            (long long)x->a.i[1]);
        return;
    }
    if (x->a.op == GOP_HOOK) {
        cai_graph_sb_printf(b, " = call_hook(hooks[%lld], %s)\n", (long long)x->a.i[0],
                            names[x->a.in[0]]);
        return;
    }
    graph_name op;
    cai_graph_node_op_name(x, op);
    cai_graph_sb_printf(b, " = %s(", op);
    print_inputs(b, x, names, true);
    print_attrs(b, g, x);
    cai_graph_sb_printf(b, ")\n");
}

/* A member of a fused group ends its line with "  # fused k" (cai_graph_fuse). */
static void mark_fused(graph_sbuf *b, const graph *g, graph_val v) {
    int k = cai_graph_node_group(g, v);
    if (k < 0 || b->oom || b->len == 0 || b->s[b->len - 1] != '\n')
        return;
    b->len--;
    cai_graph_sb_printf(b, "  # fused %d\n", k);
}

static void print_origin(graph_sbuf *b, const graph_origin *o) {
    if (o->name && o->node_call >= 0)
        cai_graph_sb_printf(b, "    # %s (NodeCall %d)\n", o->name, o->node_call);
    else if (o->name)
        cai_graph_sb_printf(b, "    # %s\n", o->name);
    else if (o->node_call >= 0)
        cai_graph_sb_printf(b, "    # NodeCall %d\n", o->node_call);
}

/* The live OUTPUT node with the smallest output number above `after`, or -1. */
static graph_val next_output(const graph *g, int64_t after) {
    graph_val best = -1;
    for (int v = 0; v < cai_graph_count(g); v++) {
        const graph_node *x = cai_graph_node_at(g, v);
        if (x->dead || x->a.op != GOP_OUTPUT || x->a.i[0] <= after)
            continue;
        if (best < 0 || x->a.i[0] < cai_graph_node_at(g, best)->a.i[0])
            best = v;
    }
    return best;
}

/* "return [a, b]": OUTPUT nodes' inputs by output number. */
static void print_return(graph_sbuf *b, const graph *g, graph_name *names) {
    cai_graph_sb_printf(b, "    return [");
    int64_t after = -1;
    for (graph_val v = next_output(g, after); v >= 0; v = next_output(g, after)) {
        const graph_node *x = cai_graph_node_at(g, v);
        cai_graph_sb_printf(b, "%s%s", after >= 0 ? ", " : "", names[x->a.in[0]]);
        after = x->a.i[0];
    }
    cai_graph_sb_printf(b, "]\n");
}

/* Mark the slots size expression s uses. */
static void mark_slots(const graph *g, graph_sx s, bool *used, int n) {
    int64_t a, b;
    graph_sx_kind k = s < 0 ? GSX_CONST : cai_graph_sx_get(g, s, &a, &b);
    if (k == GSX_SLOT && a >= 0 && a < n)
        used[a] = true;
    else if (k != GSX_CONST && k != GSX_SLOT) {
        mark_slots(g, (graph_sx)a, used, n);
        mark_slots(g, (graph_sx)b, used, n);
    }
}

/* The slots live nodes' shapes and size arguments use (a symbol can be bound and yet
 * unused: its dims never reach a value the graph computes); NULL out of memory. */
static bool *used_slots(const graph *g) {
    int n = cai_graph_n_slots(g);
    bool *used = cai_graph_mem_alloc((size_t)n);
    if (!used)
        return NULL;
    memset(used, 0, (size_t)n);
    for (int v = 0; v < cai_graph_count(g); v++) {
        const graph_node *x = cai_graph_node_at(g, v);
        for (int d = 0; !x->dead && d < x->ndim; d++)
            mark_slots(g, x->shape[d], used, n);
        for (int d = 0; !x->dead && d < x->a.n_shape; d++)
            mark_slots(g, x->a.shape[d], used, n);
    }
    return used;
}

static void print_body(graph_sbuf *b, const graph *g, bool verbose, const int64_t *slots,
                       const graph_view *inputs, graph_name *names) {
    cai_graph_sb_printf(b, "===== Compiled autograd graph =====\n");
    cai_graph_sb_printf(b, "def forward(inputs, sizes, hooks):\n");
    if (verbose && slots && cai_graph_n_slots(g) > 0) {
        bool *used = used_slots(g); /* NULL: print them all */
        cai_graph_sb_printf(b, "    # sizes:");
        for (int s = 0, k = 0; s < cai_graph_n_slots(g); s++)
            if (!used || used[s])
                cai_graph_sb_printf(b, "%s s%d=%lld", k++ ? "," : "", s, (long long)slots[s]);
        cai_graph_sb_printf(b, "\n");
        cai_graph_mem_free(used);
    }
    graph_origin prev = {.node_call = -1, .name = NULL, .fwd_graph = -1};
    for (int v = 0; v < cai_graph_count(g); v++) {
        const graph_node *x = cai_graph_node_at(g, v);
        if (x->dead || x->a.op == GOP_OUTPUT)
            continue;
        if (!cai_graph_same_origin(&x->origin, &prev))
            print_origin(b, &x->origin);
        prev = x->origin;
        print_node(b, g, x, v, names, verbose ? inputs : NULL);
        mark_fused(b, g, v);
    }
    print_return(b, g, names);
}

char *cai_graph_print(const graph *g, bool verbose, const int64_t *slots) {
    return cai_graph_print_inputs(g, verbose, slots, NULL);
}

char *cai_graph_print_inputs(const graph *g, bool verbose, const int64_t *slots,
                             const graph_view *inputs) {
    if (!g)
        return NULL;
    graph_name *names = cai_graph_value_names(g);
    graph_sbuf b = {.first_cap = 1024};
    if (names)
        print_body(&b, g, verbose, slots, inputs, names);
    else
        b.oom = true;
    cai_graph_mem_free(names);
    if (b.oom || !b.s) {
        cai_graph_mem_free(b.s);
        return NULL;
    }
    return b.s;
}

void cai_graph_free_string(char *s) {
    cai_graph_mem_free(s);
}
