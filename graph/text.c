/* text.c - the text pieces the log printer (print.c) and the DOT writer (dot.c) share: a
 * growable string on the layer's allocator, value names, and the spelling of dtypes,
 * shapes, dim lists and pointwise parameters.
 *
 * One implementation keeps the two outputs in step: the DOT picture is matched to the
 * CAGRAD_LOGS=compiled_autograd log by its value names.
 */
#include "graph/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Growable string
 */
static bool sb_reserve(graph_sbuf *b, size_t extra) {
    if (b->oom)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t ncap = b->cap ? b->cap : b->first_cap;
    while (ncap < b->len + extra + 1)
        ncap *= 2;
    char *p = cai_graph_mem_alloc(ncap);
    if (!p) {
        b->oom = true;
        return false;
    }
    if (b->s)
        memcpy(p, b->s, b->len + 1);
    cai_graph_mem_free(b->s);
    b->s = p;
    b->cap = ncap;
    return true;
}

void cai_graph_sb_printf(graph_sbuf *b, const char *fmt, ...) {
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

void cai_graph_sb_shape(graph_sbuf *b, const graph *g, int n, const graph_sx *shape) {
    char buf[512];
    cai_graph_sb_printf(b, "%s", cai_graph_shape_str(g, n, shape, buf, sizeof buf));
}

void cai_graph_sb_dim_mask(graph_sbuf *b, int64_t mask) {
    cai_graph_sb_printf(b, "[");
    for (int d = 0, first = 1; d < KERN_MAX_DIMS; d++)
        if ((mask >> d) & 1) {
            cai_graph_sb_printf(b, "%s%d", first ? "" : ", ", d);
            first = 0;
        }
    cai_graph_sb_printf(b, "]");
}

void cai_graph_sb_perm(graph_sbuf *b, int n, const int8_t *perm) {
    cai_graph_sb_printf(b, "[");
    for (int d = 0; d < n; d++)
        cai_graph_sb_printf(b, "%s%d", d ? ", " : "", perm[d]);
    cai_graph_sb_printf(b, "]");
}

void cai_graph_sb_pw_params(graph_sbuf *b, const graph_node *x, const char *sep) {
    kern_pw_op k = (kern_pw_op)x->a.i[0];
    if (k == KPW_ADD || k == KPW_SUB) {
        if (x->a.p[0] != 1.0)
            cai_graph_sb_printf(b, "%salpha=%g", sep, x->a.p[0]);
        return;
    }
    for (int j = 0; j < cai_kern_pw_nparams(k); j++)
        cai_graph_sb_printf(b, "%s%g", sep, x->a.p[j]);
}

/* ---------------------------------------------------------------------------------------
 * Small spellings
 */
const char *cai_graph_dtype_short(kern_dtype dt) {
    return dt == KERN_F32    ? "f32"
           : dt == KERN_F64  ? "f64"
           : dt == KERN_I64  ? "i64"
           : dt == KERN_BOOL ? "b8"
                             : "?";
}

bool cai_graph_same_origin(const graph_origin *a, const graph_origin *b) {
    if (a->node_call != b->node_call)
        return false;
    if (!a->name || !b->name)
        return a->name == b->name;
    return strcmp(a->name, b->name) == 0;
}

/* ---------------------------------------------------------------------------------------
 * Value names
 */
typedef struct {
    graph_name base;
    int count;
} name_count;

void cai_graph_node_op_name(const graph_node *x, graph_name buf) {
    const char *src =
        x->a.op == GOP_PW ? cai_kern_pw_name((kern_pw_op)x->a.i[0]) : cai_graph_op_name(x->a.op);
    size_t k = 0;
    for (; src[k] && k + 1 < GRAPH_NAME_MAX; k++)
        buf[k] = (char)(src[k] >= 'A' && src[k] <= 'Z' ? src[k] - 'A' + 'a' : src[k]);
    buf[k] = '\0';
}

static void base_name(const graph_node *x, graph_name buf) {
    graph_name op;
    cai_graph_node_op_name(x, op);
    if (x->origin.fwd_graph >= 0 && x->a.op != GOP_INPUT)
        snprintf(buf, GRAPH_NAME_MAX, "aot%d_%.40s", x->origin.fwd_graph, op);
    else
        snprintf(buf, GRAPH_NAME_MAX, "%s", op);
}

/* counts has room for one entry per node. */
static void assign_names(const graph *g, graph_name *names, name_count *counts) {
    int n_counts = 0;
    for (int v = 0; v < cai_graph_count(g); v++) {
        const graph_node *x = cai_graph_node_at(g, v);
        names[v][0] = '\0';
        if (x->dead || !cai_graph_op_has_value(x->a.op))
            continue;
        graph_name base;
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
            snprintf(names[v], GRAPH_NAME_MAX, "%s", base);
        else
            snprintf(names[v], GRAPH_NAME_MAX, "%.50s_%d", base, counts[c].count);
        counts[c].count++;
    }
}

graph_name *cai_graph_value_names(const graph *g) {
    size_t n = (size_t)cai_graph_count(g) + 1;
    graph_name *names = cai_graph_mem_alloc(n * sizeof(graph_name));
    name_count *counts = cai_graph_mem_alloc(n * sizeof(name_count));
    if (!names || !counts) {
        cai_graph_mem_free(names);
        cai_graph_mem_free(counts);
        return NULL;
    }
    assign_names(g, names, counts);
    cai_graph_mem_free(counts);
    return names;
}
