/* print.c - the compiled-autograd log format: a graph printed as a Python-like function,
 * one line per live node, with "# Name (NodeCall i)" comments where the origin changes.
 *
 * The format is documented in graph.h and users read it in their logs (it mirrors
 * PyTorch's compiled-autograd graphs), so it is checked as text by the tests: change it
 * only together with them.
 */
#include "graph/graph.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define NAME_MAX_LEN 64

/* ---------------------------------------------------------------------------------------
 * A growable string on the graph's allocator
 */
typedef struct {
    char *s;
    size_t len, cap;
    bool oom;
} sbuf;

static bool sb_reserve(sbuf *b, size_t extra) {
    if (b->oom)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t ncap = b->cap ? b->cap : 1024;
    while (ncap < b->len + extra + 1)
        ncap *= 2;
    char *p = graph_mem_alloc(ncap);
    if (!p) {
        b->oom = true;
        return false;
    }
    if (b->s)
        memcpy(p, b->s, b->len + 1);
    graph_mem_free(b->s);
    b->s = p;
    b->cap = ncap;
    return true;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !sb_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* ---------------------------------------------------------------------------------------
 * Value names
 */
typedef struct {
    char base[NAME_MAX_LEN];
    int count;
} name_count;

/* The op's printed name: kern_pw_name in lower case for pointwise ops. */
static void op_name(const graph_node *x, char *buf) {
    const char *src =
        x->a.op == GOP_PW ? kern_pw_name((kern_pw_op)x->a.i[0]) : graph_op_name(x->a.op);
    size_t k = 0;
    for (; src[k] && k + 1 < NAME_MAX_LEN; k++)
        buf[k] = (char)(src[k] >= 'A' && src[k] <= 'Z' ? src[k] - 'A' + 'a' : src[k]);
    buf[k] = '\0';
}

static void base_name(const graph_node *x, char *buf) {
    char op[NAME_MAX_LEN];
    op_name(x, op);
    if (x->origin.fwd_graph >= 0 && x->a.op != GOP_INPUT)
        snprintf(buf, NAME_MAX_LEN, "aot%d_%.40s", x->origin.fwd_graph, op);
    else
        snprintf(buf, NAME_MAX_LEN, "%s", op);
}

/* names[v] for every live node that makes a value: its base name, suffixed _k when the
 * base was used k times before. counts has room for one entry per node. */
static void assign_names(const graph *g, char (*names)[NAME_MAX_LEN], name_count *counts) {
    int n_counts = 0;
    for (int v = 0; v < graph_count(g); v++) {
        const graph_node *x = graph_node_at(g, v);
        names[v][0] = '\0';
        if (x->dead || !graph_op_has_value(x->a.op))
            continue;
        char base[NAME_MAX_LEN];
        base_name(x, base);
        int c = 0;
        while (c < n_counts && strcmp(counts[c].base, base) != 0)
            c++;
        if (c == n_counts) {
            memcpy(counts[c].base, base, sizeof base);
            counts[c].count = 0;
            n_counts++;
        }
        if (counts[c].count == 0)
            snprintf(names[v], NAME_MAX_LEN, "%s", base);
        else
            snprintf(names[v], NAME_MAX_LEN, "%.50s_%d", base, counts[c].count);
        counts[c].count++;
    }
}

/* ---------------------------------------------------------------------------------------
 * Lines
 */
static const char *dtype_short(kern_dtype dt) {
    return dt == KERN_F32 ? "f32" : dt == KERN_F64 ? "f64" : dt == KERN_I64 ? "i64" : "?";
}

static void print_shape(sbuf *b, const graph *g, int n, const graph_sx *shape) {
    char buf[512];
    sb_printf(b, "%s", graph_shape_str(g, n, shape, buf, sizeof buf));
}

static void print_type(sbuf *b, const graph *g, const graph_node *x) {
    sb_printf(b, "\"%s", dtype_short(x->dtype));
    print_shape(b, g, x->ndim, x->shape);
    sb_printf(b, "\"");
}

static void print_inputs(sbuf *b, const graph_node *x, char (*names)[NAME_MAX_LEN], bool first) {
    for (int k = 0; k < x->a.n_in; k++)
        sb_printf(b, "%s%s", first && k == 0 ? "" : ", ", names[x->a.in[k]]);
}

static void print_slice(sbuf *b, const int64_t *i) {
    sb_printf(b, ", dim=%lld, start=%lld, end=%lld, step=%lld", (long long)i[0], (long long)i[1],
              (long long)i[2], (long long)i[3]);
}

static void print_pw_params(sbuf *b, const graph_node *x) {
    kern_pw_op k = (kern_pw_op)x->a.i[0];
    int np = graph_pw_nparams(k);
    if ((k == KPW_ADD || k == KPW_SUB) && x->a.p[0] != 1.0)
        sb_printf(b, ", alpha=%g", x->a.p[0]);
    else if (k != KPW_ADD && k != KPW_SUB)
        for (int j = 0; j < np; j++)
            sb_printf(b, ", %g", x->a.p[j]);
}

/* Everything after the inputs: shapes, dim lists, scalars and flags. */
static void print_attrs(sbuf *b, const graph *g, const graph_node *x) {
    const graph_op_args *a = &x->a;
    switch (a->op) {
    case GOP_PW: print_pw_params(b, x); break;
    case GOP_SUM:
        sb_printf(b, ", [");
        for (int d = 0, first = 1; d < KERN_MAX_DIMS; d++)
            if ((a->i[0] >> d) & 1) {
                sb_printf(b, "%s%d", first ? "" : ", ", d);
                first = 0;
            }
        sb_printf(b, "], keepdim=%lld", (long long)a->i[1]);
        break;
    case GOP_PERMUTE:
        sb_printf(b, ", [");
        for (int d = 0; d < a->n_perm; d++)
            sb_printf(b, "%s%d", d ? ", " : "", a->perm[d]);
        sb_printf(b, "]");
        break;
    case GOP_UNSQUEEZE: sb_printf(b, ", dim=%lld", (long long)a->i[0]); break;
    case GOP_SLICE: print_slice(b, a->i); break;
    case GOP_MATMUL:
        sb_printf(b, ", ta=%lld, tb=%lld", (long long)a->i[0], (long long)a->i[1]);
        break;
    case GOP_CAST: sb_printf(b, ", dtype=%s", dtype_short(a->dtype)); break;
    case GOP_SCALE_SIZE: sb_printf(b, ", %g", a->p[0]); break;
    default: break;
    }
    if (a->n_shape > 0 || a->op == GOP_SUM_TO || a->op == GOP_EXPAND || a->op == GOP_RESHAPE ||
        a->op == GOP_INDEX_ADD || a->op == GOP_SCATTER_ADD) {
        if (a->op != GOP_INPUT) {
            sb_printf(b, ", ");
            print_shape(b, g, a->n_shape, a->shape);
        }
    }
    if (a->op == GOP_SLICE_BACKWARD)
        print_slice(b, a->i);
    else if (a->op == GOP_INDEX_ADD || a->op == GOP_SCATTER_ADD)
        sb_printf(b, ", dim=%lld", (long long)a->i[0]);
    else if (a->op == GOP_NLL_BW)
        sb_printf(b, ", reduction=%lld, ignore_index=%lld", (long long)a->i[0], (long long)a->i[1]);
    else if (a->op == GOP_SCALE_SIZE && a->i[0])
        sb_printf(b, ", mul=1");
}

static void print_callout(sbuf *b, const graph_node *x, char (*names)[NAME_MAX_LEN]) {
    const graph_op_args *a = &x->a;
    switch (a->op) {
    case GOP_RETAIN:
        sb_printf(b, "retain_grad(retain=%lld, %s)\n", (long long)a->i[0], names[a->in[0]]);
        break;
    case GOP_ACCUMULATE:
        sb_printf(b, "accumulate_grad(leaf=%lld, %s)\n", (long long)a->i[0], names[a->in[0]]);
        break;
    default: /* GOP_POST_HOOK */
        sb_printf(b, "post_accumulate_hook(hooks[%lld], leaf=%lld)\n", (long long)a->i[1],
                  (long long)a->i[0]);
        break;
    }
}

static void print_node(sbuf *b, const graph *g, const graph_node *x, graph_val v,
                       char (*names)[NAME_MAX_LEN]) {
    sb_printf(b, "    ");
    if (!graph_op_has_value(x->a.op)) {
        print_callout(b, x, names);
        return;
    }
    sb_printf(b, "%s: ", names[v]);
    print_type(b, g, x);
    if (x->a.op == GOP_INPUT) {
        sb_printf(b, " = inputs[%lld]\n", (long long)x->a.i[0]);
        return;
    }
    if (x->a.op == GOP_HOOK) {
        sb_printf(b, " = call_hook(hooks[%lld], %s)\n", (long long)x->a.i[0], names[x->a.in[0]]);
        return;
    }
    char op[NAME_MAX_LEN];
    op_name(x, op);
    sb_printf(b, " = %s(", op);
    print_inputs(b, x, names, true);
    print_attrs(b, g, x);
    sb_printf(b, ")\n");
}

/* A member of a fused group ends its line with "  # fused k" (graph_fuse). */
static void mark_fused(sbuf *b, const graph *g, graph_val v) {
    int k = graph_node_group(g, v);
    if (k < 0 || b->oom || b->len == 0 || b->s[b->len - 1] != '\n')
        return;
    b->len--;
    sb_printf(b, "  # fused %d\n", k);
}

static bool same_origin(const graph_origin *a, const graph_origin *b) {
    if (a->node_call != b->node_call)
        return false;
    if (!a->name || !b->name)
        return a->name == b->name;
    return strcmp(a->name, b->name) == 0;
}

static void print_origin(sbuf *b, const graph_origin *o) {
    if (o->name && o->node_call >= 0)
        sb_printf(b, "    # %s (NodeCall %d)\n", o->name, o->node_call);
    else if (o->name)
        sb_printf(b, "    # %s\n", o->name);
    else if (o->node_call >= 0)
        sb_printf(b, "    # NodeCall %d\n", o->node_call);
}

/* The live OUTPUT node with the smallest output number above `after`, or -1. */
static graph_val next_output(const graph *g, int64_t after) {
    graph_val best = -1;
    for (int v = 0; v < graph_count(g); v++) {
        const graph_node *x = graph_node_at(g, v);
        if (x->dead || x->a.op != GOP_OUTPUT || x->a.i[0] <= after)
            continue;
        if (best < 0 || x->a.i[0] < graph_node_at(g, best)->a.i[0])
            best = v;
    }
    return best;
}

/* "return [a, b]": OUTPUT nodes' inputs by output number. */
static void print_return(sbuf *b, const graph *g, char (*names)[NAME_MAX_LEN]) {
    sb_printf(b, "    return [");
    int64_t after = -1;
    for (graph_val v = next_output(g, after); v >= 0; v = next_output(g, after)) {
        const graph_node *x = graph_node_at(g, v);
        sb_printf(b, "%s%s", after >= 0 ? ", " : "", names[x->a.in[0]]);
        after = x->a.i[0];
    }
    sb_printf(b, "]\n");
}

static void print_body(sbuf *b, const graph *g, bool verbose, const int64_t *slots,
                       char (*names)[NAME_MAX_LEN]) {
    sb_printf(b, "===== Compiled autograd graph =====\n");
    sb_printf(b, "def forward(inputs, sizes, hooks):\n");
    if (verbose && slots && graph_n_slots(g) > 0) {
        sb_printf(b, "    # sizes:");
        for (int s = 0; s < graph_n_slots(g); s++)
            sb_printf(b, "%s s%d=%lld", s ? "," : "", s, (long long)slots[s]);
        sb_printf(b, "\n");
    }
    graph_origin prev = {.node_call = -1, .name = NULL, .fwd_graph = -1};
    for (int v = 0; v < graph_count(g); v++) {
        const graph_node *x = graph_node_at(g, v);
        if (x->dead || x->a.op == GOP_OUTPUT)
            continue;
        if (!same_origin(&x->origin, &prev))
            print_origin(b, &x->origin);
        prev = x->origin;
        print_node(b, g, x, v, names);
        mark_fused(b, g, v);
    }
    print_return(b, g, names);
}

char *graph_print(const graph *g, bool verbose, const int64_t *slots) {
    if (!g)
        return NULL;
    size_t n = (size_t)graph_count(g) + 1;
    char(*names)[NAME_MAX_LEN] = graph_mem_alloc(n * NAME_MAX_LEN);
    name_count *counts = graph_mem_alloc(n * sizeof(name_count));
    sbuf b = {0};
    if (names && counts) {
        assign_names(g, names, counts);
        print_body(&b, g, verbose, slots, names);
    } else {
        b.oom = true;
    }
    graph_mem_free(names);
    graph_mem_free(counts);
    if (b.oom || !b.s) {
        graph_mem_free(b.s);
        return NULL;
    }
    return b.s;
}

void graph_free_string(char *s) {
    graph_mem_free(s);
}
