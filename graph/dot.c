/* dot.c - the backward graph as a Graphviz DOT picture: one DOT node per live IR node,
 * edges from each input to its users, fused groups drawn as clusters, and the rest of
 * each autograd node's IR grouped in a light cluster named after it.
 *
 * Labels use the printer's value names (cai_graph_value_names, as cai_graph_print), so a box in the
 * picture and a line of the CAGRAD_LOGS=compiled_autograd log can be matched by eye. Graphviz
 * clusters must nest, so a fused group sits inside its origin's cluster when all its nodes share
 * one origin, and at the top level when it spans several.
 */
#include "graph/internal.h"

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Strings (graph_sbuf): DOT's escaping
 */
static void sb_reset(graph_sbuf *b) {
    b->len = 0;
    if (b->s)
        b->s[0] = '\0';
}

static const char *sb_str(const graph_sbuf *b) {
    return b->oom || !b->s ? "" : b->s;
}

/* text as the inside of a DOT escString: quotes and backslashes escaped (a bare backslash
 * would start \N, \G ... substitutions), a newline as DOT's centred line break \n, and
 * other control characters dropped. */
static void sb_escaped(graph_sbuf *b, const char *text) {
    for (const char *p = text; *p; p++) {
        if (*p == '"' || *p == '\\')
            cai_graph_sb_printf(b, "\\%c", *p);
        else if (*p == '\n')
            cai_graph_sb_printf(b, "\\n");
        else if ((unsigned char)*p >= 0x20)
            cai_graph_sb_printf(b, "%c", *p);
    }
}

/* ---------------------------------------------------------------------------------------
 * Labels: "name\nop attrs\ndtype[shape]"; call-outs that make no value: "op\ntarget"
 */
static void label_slice(graph_sbuf *b, const int64_t *i) {
    cai_graph_sb_printf(b, " dim=%lld %lld:%lld:%lld", (long long)i[0], (long long)i[1],
                        (long long)i[2], (long long)i[3]);
}

/* The op's attributes after its name, space separated; flags only when set. */
static void label_attrs(graph_sbuf *b, const graph *g, const graph_node *x) {
    const graph_op_args *a = &x->a;
    switch (a->op) {
    case GOP_PW: cai_graph_sb_pw_params(b, x, " "); break;
    case GOP_SUM:
        cai_graph_sb_printf(b, " ");
        cai_graph_sb_dim_mask(b, a->i[0]);
        if (a->i[1])
            cai_graph_sb_printf(b, " keepdim=1");
        break;
    case GOP_PERMUTE:
        cai_graph_sb_printf(b, " ");
        cai_graph_sb_perm(b, a->n_perm, a->perm);
        break;
    case GOP_UNSQUEEZE:
    case GOP_NARROW: cai_graph_sb_printf(b, " dim=%lld", (long long)a->i[0]); break;
    case GOP_SLICE: label_slice(b, a->i); break;
    case GOP_SLICE_BACKWARD: {
        char s1[64], s2[64];
        cai_graph_sb_printf(b, " dim=%lld %s:%s:%lld", (long long)a->i[0],
                            cai_graph_sx_str(g, (graph_sx)a->i[1], s1, sizeof s1),
                            cai_graph_sx_str(g, (graph_sx)a->i[2], s2, sizeof s2),
                            (long long)a->i[3]);
        break;
    }
    case GOP_MATMUL:
        if (a->i[0])
            cai_graph_sb_printf(b, " ta=1");
        if (a->i[1])
            cai_graph_sb_printf(b, " tb=1");
        break;
    case GOP_INDEX_ADD:
    case GOP_SCATTER_ADD: cai_graph_sb_printf(b, " dim=%lld", (long long)a->i[0]); break;
    case GOP_CUMSUM:
        cai_graph_sb_printf(b, " dim=%lld%s", (long long)a->i[0], a->i[1] ? " reverse=1" : "");
        break;
    case GOP_INDEX_FILL:
        cai_graph_sb_printf(b, " dim=%lld value=%g", (long long)a->i[0], a->p[0]);
        break;
    case GOP_IM2COL:
    case GOP_COL2IM:
    case GOP_CONV2D:
    case GOP_CONV2D_WEIGHT_GRAD: cai_graph_sb_printf(b, " groups=%lld", (long long)a->i[3]); break;
    case GOP_SCALE_SIZE: { /* x * (p/N), or x * (p*N) when i[0] is set */
        char n[256];
        cai_graph_sb_printf(b, " %g%s(%s)", a->p[0], a->i[0] ? "*" : "/",
                            cai_graph_sx_str(g, a->shape[0], n, sizeof n));
        break;
    }
    case GOP_NLL_BW:
        cai_graph_sb_printf(b, " reduction=%lld ignore_index=%lld", (long long)a->i[0],
                            (long long)a->i[1]);
        break;
    case GOP_HOOK: cai_graph_sb_printf(b, " hooks[%lld]", (long long)a->i[0]); break;
    default: break;
    }
}

/* The label's text, unescaped, into t (reset first). */
static void label_text(graph_sbuf *t, const graph *g, const graph_node *x, const char *name) {
    sb_reset(t);
    const graph_op_args *a = &x->a;
    switch (a->op) {
    case GOP_RETAIN: cai_graph_sb_printf(t, "retain_grad\nretain=%lld", (long long)a->i[0]); return;
    case GOP_ACCUMULATE:
        cai_graph_sb_printf(t, "accumulate_grad\nleaf=%lld", (long long)a->i[0]);
        return;
    case GOP_POST_HOOK:
        cai_graph_sb_printf(t, "post_accumulate_hook\nhooks[%lld], leaf=%lld", (long long)a->i[1],
                            (long long)a->i[0]);
        return;
    case GOP_OUTPUT: cai_graph_sb_printf(t, "output\nreturn[%lld]", (long long)a->i[0]); return;
    case GOP_CALLOUT_ARG:
        cai_graph_sb_printf(t, "callout_arg\ncallouts[%lld], arg=%lld", (long long)a->i[0],
                            (long long)a->i[1]);
        return;
    case GOP_CALLOUT:
        cai_graph_sb_printf(t, "callout (opaque)\ncallouts[%lld]", (long long)a->i[0]);
        return;
    case GOP_CALLOUT_RESULT:
        cai_graph_sb_printf(t, "%s\ncallout_result\ncallouts[%lld], %lld\n", name,
                            (long long)a->i[0], (long long)a->i[1]);
        break;
    case GOP_INPUT: cai_graph_sb_printf(t, "%s\ninputs[%lld]\n", name, (long long)a->i[0]); break;
    default: {
        graph_name op;
        cai_graph_node_op_name(x, op);
        cai_graph_sb_printf(t, "%s\n%s", name, op);
        label_attrs(t, g, x);
        cai_graph_sb_printf(t, "\n");
    }
    }
    cai_graph_sb_printf(t, "%s", cai_graph_dtype_short(x->dtype));
    cai_graph_sb_shape(t, g, x->ndim, x->shape);
}

/* ---------------------------------------------------------------------------------------
 * Clusters: origins (light) and fused groups
 */
#define NO_CLUSTER (-1)

typedef struct {
    int n_nodes;
    int *origin; /* per node: index into origins, or NO_CLUSTER */
    int *group;  /* per node: index into groups, or NO_CLUSTER */
    graph_origin *origins;
    int n_origins;
    int *group_parent; /* per group: the origin cluster it nests in, or NO_CLUSTER */
    int *group_id;     /* per group: cai_graph_node_group's id */
    int n_groups;
    graph_name *names;
} layout;

static int origin_index(layout *l, const graph_origin *o) {
    if (o->node_call < 0 && !o->name)
        return NO_CLUSTER;
    for (int k = 0; k < l->n_origins; k++)
        if (cai_graph_same_origin(&l->origins[k], o))
            return k;
    l->origins[l->n_origins] = *o;
    return l->n_origins++;
}

static int group_index(layout *l, int id, int origin) {
    for (int k = 0; k < l->n_groups; k++)
        if (l->group_id[k] == id) {
            if (l->group_parent[k] != origin)
                l->group_parent[k] = NO_CLUSTER; /* spans origins: drawn at the top level */
            return k;
        }
    l->group_id[l->n_groups] = id;
    l->group_parent[l->n_groups] = origin;
    return l->n_groups++;
}

static void layout_free(layout *l) {
    cai_graph_mem_free(l->origin);
    cai_graph_mem_free(l->group);
    cai_graph_mem_free(l->origins);
    cai_graph_mem_free(l->group_parent);
    cai_graph_mem_free(l->group_id);
    cai_graph_mem_free(l->names);
}

static bool layout_new(const graph *g, layout *l) {
    size_t n = (size_t)cai_graph_count(g) + 1;
    memset(l, 0, sizeof *l);
    l->n_nodes = cai_graph_count(g);
    l->origin = cai_graph_mem_alloc(n * sizeof(int));
    l->group = cai_graph_mem_alloc(n * sizeof(int));
    l->origins = cai_graph_mem_alloc(n * sizeof(graph_origin));
    l->group_parent = cai_graph_mem_alloc(n * sizeof(int));
    l->group_id = cai_graph_mem_alloc(n * sizeof(int));
    l->names = cai_graph_value_names(g);
    if (!l->origin || !l->group || !l->origins || !l->group_parent || !l->group_id || !l->names) {
        layout_free(l);
        return false;
    }
    for (int v = 0; v < l->n_nodes; v++) {
        const graph_node *x = cai_graph_node_at(g, v);
        l->origin[v] = l->group[v] = NO_CLUSTER;
        if (x->dead)
            continue;
        l->origin[v] = origin_index(l, &x->origin);
        int id = cai_graph_node_group(g, v);
        if (id >= 0)
            l->group[v] = group_index(l, id, l->origin[v]);
    }
    return true;
}

/* ---------------------------------------------------------------------------------------
 * Output
 */
/* "MmBackward0 (NodeCall 3)", as the printer's origin comments, into t (reset first). */
static void origin_text(graph_sbuf *t, const graph_origin *o) {
    sb_reset(t);
    if (o->name)
        cai_graph_sb_printf(t, "%s%s", o->name, o->node_call >= 0 ? " " : "");
    if (o->node_call >= 0)
        cai_graph_sb_printf(t, "(NodeCall %d)", o->node_call);
}

static void emit_node(graph_sbuf *b, graph_sbuf *t, const graph *g, const layout *l, graph_val v,
                      const char *indent) {
    const graph_node *x = cai_graph_node_at(g, v);
    label_text(t, g, x, l->names[v]);
    cai_graph_sb_printf(b, "%sn%d [", indent, v);
    if (x->a.op == GOP_INPUT)
        cai_graph_sb_printf(b, "shape=box, fillcolor=\"#dbe8f7\", ");
    else if (cai_graph_op_is_side_effect(x->a.op))
        cai_graph_sb_printf(b, "shape=octagon, fillcolor=\"#f8dada\", ");
    cai_graph_sb_printf(b, "label=\"");
    sb_escaped(b, sb_str(t));
    cai_graph_sb_printf(b, "\"");
    if (l->origin[v] != NO_CLUSTER) {
        origin_text(t, &x->origin);
        cai_graph_sb_printf(b, ", tooltip=\"");
        sb_escaped(b, sb_str(t));
        cai_graph_sb_printf(b, "\"");
    }
    cai_graph_sb_printf(b, "];\n");
}

static void emit_group(graph_sbuf *b, graph_sbuf *t, const graph *g, const layout *l, int k,
                       const char *indent) {
    cai_graph_sb_printf(b, "%ssubgraph cluster_fused_%d {\n", indent, l->group_id[k]);
    cai_graph_sb_printf(
        b,
        "%s    label=\"fused %d\"; style=\"rounded,filled\"; fillcolor=\"#fff2d9\"; "
        "color=\"#e0a040\"; fontcolor=\"#a06000\";\n",
        indent, l->group_id[k]);
    char inner[32];
    snprintf(inner, sizeof inner, "%s    ", indent);
    for (int v = 0; v < l->n_nodes; v++)
        if (l->group[v] == k)
            emit_node(b, t, g, l, v, inner);
    cai_graph_sb_printf(b, "%s}\n", indent);
}

/* Whether origin k's cluster would hold anything: its nodes may all be in groups that span
 * origins, and Graphviz drops an empty cluster anyway. */
static bool origin_has_content(const layout *l, int k) {
    for (int v = 0; v < l->n_nodes; v++)
        if (l->origin[v] == k && l->group[v] == NO_CLUSTER)
            return true;
    for (int gk = 0; gk < l->n_groups; gk++)
        if (l->group_parent[gk] == k)
            return true;
    return false;
}

static void emit_origin(graph_sbuf *b, graph_sbuf *t, const graph *g, const layout *l, int k) {
    if (!origin_has_content(l, k))
        return;
    cai_graph_sb_printf(b, "    subgraph cluster_origin_%d {\n        label=\"", k);
    origin_text(t, &l->origins[k]);
    sb_escaped(b, sb_str(t));
    cai_graph_sb_printf(
        b, "\"; style=\"rounded,dashed\"; color=\"#b0b0b0\"; fontcolor=\"#707070\";\n");
    for (int v = 0; v < l->n_nodes; v++)
        if (l->origin[v] == k && l->group[v] == NO_CLUSTER)
            emit_node(b, t, g, l, v, "        ");
    for (int gk = 0; gk < l->n_groups; gk++)
        if (l->group_parent[gk] == k)
            emit_group(b, t, g, l, gk, "        ");
    cai_graph_sb_printf(b, "    }\n");
}

/* The input an edge starts from: CSE's replacement when the input was merged away. */
static graph_val edge_source(const graph *g, graph_val u) {
    for (int hops = 0; u >= 0 && hops < cai_graph_count(g); hops++) {
        const graph_node *y = cai_graph_node_at(g, u);
        if (!y->dead)
            return u;
        u = y->alias;
    }
    return -1;
}

static void emit_edges(graph_sbuf *b, const graph *g, const layout *l) {
    for (int v = 0; v < l->n_nodes; v++) {
        const graph_node *x = cai_graph_node_at(g, v);
        if (x->dead)
            continue;
        for (int k = 0; k < x->a.n_in; k++) {
            graph_val u = edge_source(g, x->a.in[k]);
            if (u < 0)
                continue;
            /* a post hook reads no value: it only runs after its accumulation */
            cai_graph_sb_printf(b, "    n%d -> n%d%s;\n", u, v,
                                x->a.op == GOP_POST_HOOK ? " [style=dashed]" : "");
        }
    }
}

static void emit_graph(graph_sbuf *b, graph_sbuf *t, const graph *g, const layout *l) {
    cai_graph_sb_printf(
        b, "digraph compiled_backward {\n"
           "    graph [rankdir=TB, fontname=\"Helvetica,Arial,sans-serif\", fontsize=10, "
           "labeljust=l, nodesep=0.25, ranksep=0.35];\n"
           "    node [shape=ellipse, style=filled, fillcolor=white, "
           "fontname=\"Helvetica,Arial,sans-serif\", fontsize=10];\n"
           "    edge [color=\"#606060\", arrowsize=0.6];\n");
    for (int v = 0; v < l->n_nodes; v++)
        if (!cai_graph_node_at(g, v)->dead && l->origin[v] == NO_CLUSTER &&
            l->group[v] == NO_CLUSTER)
            emit_node(b, t, g, l, v, "    ");
    for (int k = 0; k < l->n_groups; k++)
        if (l->group_parent[k] == NO_CLUSTER)
            emit_group(b, t, g, l, k, "    ");
    for (int k = 0; k < l->n_origins; k++)
        emit_origin(b, t, g, l, k);
    emit_edges(b, g, l);
    cai_graph_sb_printf(b, "}\n");
}

char *cai_graph_dot(const graph *g) {
    if (!g)
        return NULL;
    layout l;
    if (!layout_new(g, &l))
        return NULL;
    graph_sbuf b = {.first_cap = 4096}, t = {.first_cap = 4096};
    emit_graph(&b, &t, g, &l);
    layout_free(&l);
    bool oom = b.oom || t.oom || !b.s;
    cai_graph_mem_free(t.s);
    if (oom) {
        cai_graph_mem_free(b.s);
        return NULL;
    }
    return b.s;
}
