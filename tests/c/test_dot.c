/* test_dot.c - suite `dot`: the backward graph as Graphviz DOT (cai_graph_dot, graph/dot.c)
 * and its public door, ca_graph_write_dot.
 *
 * Covered: the nodes, shapes, clusters and edges of a hand-built graph (dead nodes left
 * out, names as the printer's), each op's attributes in its label, fused groups as
 * clusters (nested in their origin's, or at the top level when they span origins), labels
 * escaped for DOT, the text accepted by Graphviz's
 * `dot -Tsvg` (skipped, passing, when /usr/bin/dot is absent), allocation failure, and
 * ca_graph_write_dot: its errors (no compiled backward yet, after reset, after an eager
 * fallback, NULL or unwritable path, out of memory) and its output (a file, or stdout).
 */
#include "graph/graph.h"
#include "testutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DOT_BIN "/usr/bin/dot"

/* ---------------------------------------------------------------------------------------
 * Helpers
 */
static graph_val td_add(graph *g, graph_op_args a, graph_origin o) {
    graph_val v = cai_graph_add(g, &a, o);
    cr_assert(v >= 0, "cai_graph_add failed: %s", cai_graph_error(g));
    return v;
}

static graph_op_args td_pw(kern_pw_op op, graph_val x, double p0) {
    return (graph_op_args){.op = GOP_PW, .n_in = 1, .in = {x}, .i = {op}, .p = {p0}};
}

static graph_op_args td_callout(graph_op op, graph_val x, int64_t k) {
    return (graph_op_args){.op = op, .n_in = 1, .in = {x}, .i = {k}};
}

/* Assert s contains needle. */
static void td_has(const char *s, const char *needle) {
    cr_assert(strstr(s, needle) != NULL, "DOT text lacks \"%s\":\n%s", needle, s);
}

static void td_lacks(const char *s, const char *needle) {
    cr_assert(strstr(s, needle) == NULL, "DOT text should not contain \"%s\":\n%s", needle, s);
}

static int td_count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* The graph of the printer's test, in small: two forward graphs, origins, a repeated
 * name, a hook, a post hook, an output and a dead node.
 *   n0 getitem  n1 getitem_1  n2 expand  n3 mul_s  n4 neg (dead)  n5 matmul  n6 call_hook
 *   n7 accumulate_grad  n8 post_accumulate_hook  n9 sum_to  n10 output */
static graph *td_graph(void) {
    graph *g = cai_graph_new();
    cr_assert_not_null(g);
    graph_sx s0 = cai_graph_sx_slot(g, 0), c3 = cai_graph_sx_const(g, 3),
             c4 = cai_graph_sx_const(g, 4);
    graph_origin none = {-1, NULL, -1}, mean = {1, "MeanBackward0", 0};
    graph_origin mm = {3, "MmBackward0", 1}, acc = {4, "AccumulateGrad", -1};
    graph_val gr = td_add(g, (graph_op_args){.op = GOP_INPUT, .i = {0}, .dtype = KERN_F32}, none);
    graph_val x =
        td_add(g,
               (graph_op_args){
                   .op = GOP_INPUT, .i = {1}, .dtype = KERN_F32, .n_shape = 2, .shape = {s0, c4}},
               none);
    graph_val e = td_add(
        g,
        (graph_op_args){.op = GOP_EXPAND, .n_in = 1, .in = {gr}, .n_shape = 2, .shape = {s0, c3}},
        mean);
    graph_val m = td_add(g, td_pw(KPW_MUL_S, e, 0.5), mean);
    td_add(g, td_pw(KPW_NEG, m, 0), mean); /* no root needs it: dead after DCE */
    graph_val w =
        td_add(g, (graph_op_args){.op = GOP_MATMUL, .n_in = 2, .in = {m, x}, .i = {1, 0}}, mm);
    graph_val h = td_add(g, td_callout(GOP_HOOK, w, 0), acc);
    graph_val a = td_add(g, td_callout(GOP_ACCUMULATE, h, 0), acc);
    td_add(g, (graph_op_args){.op = GOP_POST_HOOK, .n_in = 1, .in = {a}, .i = {0, 1}}, acc);
    graph_val b = td_add(
        g, (graph_op_args){.op = GOP_SUM_TO, .n_in = 1, .in = {m}, .n_shape = 1, .shape = {c3}},
        mm);
    td_add(g, td_callout(GOP_OUTPUT, b, 0), mm);
    cai_graph_dce(g);
    return g;
}

/* A path for a scratch file; the caller unlinks it. */
static void td_tmp_path(char *path, size_t size, const char *suffix) {
    snprintf(path, size, "/tmp/cagrad_dot_%ld_%s", (long)getpid(), suffix);
}

static void td_write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s: %s", path, strerror(errno));
    cr_assert(fputs(text, f) >= 0);
    cr_assert_eq(fclose(f), 0);
}

/* The whole file as a malloc'd string (the caller frees it). */
static char *td_read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot read %s: %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    cr_assert_not_null(s);
    size_t n;
    while ((n = fread(s + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len < 2) {
            cap *= 2;
            char *grown = realloc(s, cap);
            cr_assert_not_null(grown);
            s = grown;
        }
    }
    fclose(f);
    s[len] = '\0';
    return s;
}

/* Render DOT text with `dot -Tsvg`; returns the SVG (malloc'd) or NULL when dot is absent.
 * Asserts dot exits 0 and prints nothing on stderr (no syntax error, no warning). */
static char *td_render(const char *dot_text) {
    if (access(DOT_BIN, X_OK) != 0)
        return NULL;
    char in[128], out[128], err[128], cmd[512];
    td_tmp_path(in, sizeof in, "in.dot");
    td_tmp_path(out, sizeof out, "out.svg");
    td_tmp_path(err, sizeof err, "err.txt");
    td_write_file(in, dot_text);
    snprintf(cmd, sizeof cmd, "%s -Tsvg '%s' -o '%s' 2>'%s'", DOT_BIN, in, out, err);
    int rc = system(cmd);
    char *errs = td_read_file(err);
    cr_assert(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0,
              "dot -Tsvg failed (status %d): %s\ninput:\n%s", rc, errs, dot_text);
    cr_assert_str_empty(errs, "dot -Tsvg complained: %s", errs);
    free(errs);
    char *svg = td_read_file(out);
    unlink(in);
    unlink(out);
    unlink(err);
    return svg;
}

/* A small compiled backward: loss = sum(relu(linear(x, w, b))), x [batch, 4]. */
static void td_backward(int64_t batch, ca_tensor *w, ca_tensor *b) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(batch, 4), false);
    ca_tensor *h = NULL, *a = NULL, *loss = NULL;
    TU_OK(ca_linear(x, w, b, &h));
    TU_OK(ca_relu(h, &a));
    TU_OK(ca_sum(a, 0, NULL, false, &loss));
    TU_OK(ca_backward(loss));
    TU_OK(ca_tensor_set_grad(w, NULL));
    TU_OK(ca_tensor_set_grad(b, NULL));
    ca_tensor *all[] = {x, h, a, loss};
    tu_release_n(all, 4);
}

/* ---------------------------------------------------------------------------------------
 * cai_graph_dot
 */
Test(dot, nodes_shapes_clusters_and_edges) {
    graph *g = td_graph();
    char *s = cai_graph_dot(g);
    cr_assert_not_null(s);
    cr_assert(strncmp(s, "digraph compiled_backward {\n", 28) == 0, "%s", s);
    cr_assert(strcmp(s + strlen(s) - 2, "}\n") == 0, "%s", s);
    /* inputs are boxes, named as the printer names them */
    td_has(s, "n0 [shape=box, fillcolor=\"#dbe8f7\", label=\"getitem\\ninputs[0]\\nf32[]\"];");
    td_has(s,
           "n1 [shape=box, fillcolor=\"#dbe8f7\", label=\"getitem_1\\ninputs[1]\\nf32[s0, 4]\"];");
    /* computations: name, op with attributes, dtype and symbolic shape */
    td_has(s, "n2 [label=\"aot0_expand\\nexpand\\nf32[s0, 3]\"");
    td_has(s, "n3 [label=\"aot0_mul_s\\nmul_s 0.5\\nf32[s0, 3]\"");
    td_has(s, "n5 [label=\"aot1_matmul\\nmatmul ta=1\\nf32[3, 4]\"");
    td_has(s, "n9 [label=\"aot1_sum_to\\nsum_to\\nf32[3]\"");
    /* side effects in their own style; the hook makes a value, so it has a name */
    td_has(s, "n6 [shape=octagon, fillcolor=\"#f8dada\", "
              "label=\"call_hook\\ncall_hook hooks[0]\\nf32[3, 4]\"");
    td_has(s, "n7 [shape=octagon, fillcolor=\"#f8dada\", label=\"accumulate_grad\\nleaf=0\"");
    td_has(s, "n8 [shape=octagon, fillcolor=\"#f8dada\", "
              "label=\"post_accumulate_hook\\nhooks[1], leaf=0\"");
    td_has(s, "n10 [shape=octagon, fillcolor=\"#f8dada\", label=\"output\\nreturn[0]\"");
    td_has(s, "tooltip=\"MmBackward0 (NodeCall 3)\"");
    /* the dead node is left out, with its edge */
    td_lacks(s, "n4 ");
    td_lacks(s, "-> n4;");
    td_lacks(s, "neg");
    /* one light cluster per origin, holding that origin's nodes */
    td_has(s, "subgraph cluster_origin_0 {\n        label=\"MeanBackward0 (NodeCall 1)\"");
    td_has(s, "subgraph cluster_origin_1 {\n        label=\"MmBackward0 (NodeCall 3)\"");
    td_has(s, "subgraph cluster_origin_2 {\n        label=\"AccumulateGrad (NodeCall 4)\"");
    cr_assert_eq(td_count(s, "subgraph cluster_origin_"), 3, "%s", s);
    const char *mean = strstr(s, "cluster_origin_0"), *mm = strstr(s, "cluster_origin_1");
    const char *n2 = strstr(s, "    n2 ["), *n5 = strstr(s, "    n5 [");
    cr_assert(mean && mm && n2 && n5 && mean < n2 && n2 < mm && mm < n5,
              "nodes must sit in their origin's cluster:\n%s", s);
    /* inputs (no origin) are outside every cluster: before the first one */
    cr_assert(strstr(s, "    n1 [") < strstr(s, "subgraph"), "%s", s);
    /* edges from inputs to users; the post hook's (ordering only) is dashed */
    const char *edges[] = {"n0 -> n2;",
                           "n2 -> n3;",
                           "n3 -> n5;",
                           "n1 -> n5;",
                           "n5 -> n6;",
                           "n6 -> n7;",
                           "n7 -> n8 [style=dashed];",
                           "n3 -> n9;",
                           "n9 -> n10;"};
    for (size_t k = 0; k < sizeof edges / sizeof edges[0]; k++)
        td_has(s, edges[k]);
    cr_assert_eq(td_count(s, " -> "), 9, "exactly one edge per live input:\n%s", s);
    /* no fusion ran: no fused cluster */
    td_lacks(s, "cluster_fused_");
    cai_graph_free_string(s);
    cai_graph_free(g);
}

Test(dot, labels_show_attributes) {
    graph *g = cai_graph_new();
    graph_sx s0 = cai_graph_sx_slot(g, 0), s1 = cai_graph_sx_slot(g, 1);
    graph_origin none = {-1, NULL, -1};
    graph_val x = td_add(
        g, (graph_op_args){.op = GOP_INPUT, .dtype = KERN_F64, .n_shape = 2, .shape = {s0, s1}},
        none);
    graph_val v[] = {
        td_add(g, (graph_op_args){.op = GOP_SUM, .n_in = 1, .in = {x}, .i = {2, 1}}, none),
        td_add(g, (graph_op_args){.op = GOP_SUM, .n_in = 1, .in = {x}, .i = {3, 0}}, none),
        td_add(
            g,
            (graph_op_args){.op = GOP_PERMUTE, .n_in = 1, .in = {x}, .n_perm = 2, .perm = {1, 0}},
            none),
        td_add(g, (graph_op_args){.op = GOP_SLICE, .n_in = 1, .in = {x}, .i = {1, 0, 1, 1}}, none),
        td_add(g, (graph_op_args){.op = GOP_UNSQUEEZE, .n_in = 1, .in = {x}, .i = {0}}, none),
        td_add(g, (graph_op_args){.op = GOP_CAST, .n_in = 1, .in = {x}, .dtype = KERN_F32}, none),
        td_add(
            g,
            (graph_op_args){
                .op = GOP_SCALE_SIZE, .n_in = 1, .in = {x}, .p = {2}, .n_shape = 1, .shape = {s0}},
            none),
        td_add(g,
               (graph_op_args){.op = GOP_SCALE_SIZE,
                               .n_in = 1,
                               .in = {x},
                               .p = {3},
                               .i = {1},
                               .n_shape = 1,
                               .shape = {s1}},
               none),
        td_add(g, (graph_op_args){.op = GOP_PW, .n_in = 2, .in = {x, x}, .i = {KPW_ADD}, .p = {2}},
               none),
        td_add(g, (graph_op_args){.op = GOP_PW, .n_in = 2, .in = {x, x}, .i = {KPW_SUB}, .p = {1}},
               none),
        td_add(
            g,
            (graph_op_args){.op = GOP_MATMUL, .n_in = 2, .in = {x, x}, .i = {0, 1}, .n_shape = 0},
            none),
    };
    int n = (int)(sizeof v / sizeof v[0]);
    for (int k = 0; k < n; k++)
        td_add(g, td_callout(GOP_RETAIN, v[k], k), none);
    char *s = cai_graph_dot(g);
    cr_assert_not_null(s);
    td_has(s, "label=\"getitem\\ninputs[0]\\nf64[s0, s1]\"");
    td_has(s, "label=\"sum\\nsum [1] keepdim=1\\nf64[s0, 1]\"");
    td_has(s, "label=\"sum_1\\nsum [0, 1]\\nf64[]\"");
    td_has(s, "label=\"permute\\npermute [1, 0]\\nf64[s1, s0]\"");
    td_has(s, "label=\"slice\\nslice dim=1 0:1:1\\nf64[s0, 1]\"");
    td_has(s, "label=\"unsqueeze\\nunsqueeze dim=0\\nf64[1, s0, s1]\"");
    td_has(s, "label=\"cast\\ncast\\nf32[s0, s1]\"");
    td_has(s, "label=\"scale_size\\nscale_size 2/(s0)\\nf64[s0, s1]\"");
    td_has(s, "label=\"scale_size_1\\nscale_size 3*(s1)\\nf64[s0, s1]\"");
    td_has(s, "label=\"add\\nadd alpha=2\\nf64[s0, s1]\"");
    td_has(s, "label=\"sub\\nsub\\nf64[s0, s1]\"");
    td_has(s, "label=\"matmul\\nmatmul tb=1\\nf64[s0, s0]\"");
    td_has(s, "label=\"retain_grad\\nretain=0\"");
    cr_assert_eq(td_count(s, "label=\"retain_grad"), n);
    cr_assert_eq(td_count(s, " -> "), 2 * n + 3, "%s", s); /* add, sub, matmul read x twice */
    cai_graph_free_string(s);
    cai_graph_free(g);
}

/* Every quoted string of the DOT text must close on its line, and hold no raw control
 * character: a label that broke out of its quotes would show here. */
static void td_assert_quotes_balanced(const char *s) {
    bool in_str = false;
    for (const char *p = s; *p; p++) {
        if (in_str && *p == '\\') {
            cr_assert(p[1] != '\0' && p[1] != '\n', "a dangling backslash:\n%s", s);
            p++;
            continue;
        }
        if (*p == '"')
            in_str = !in_str;
        cr_assert(!(in_str && (unsigned char)*p < 0x20), "a control character in a string:\n%s", s);
        if (*p == '\n')
            cr_assert(!in_str, "a string runs past its line:\n%s", s);
    }
    cr_assert(!in_str, "an unclosed string:\n%s", s);
}

Test(dot, labels_escaped) {
    graph *g = cai_graph_new();
    graph_origin odd = {2, "Odd\"Fn\\N\nY\t", -1}, name_only = {-1, "Hook\"", -1};
    graph_val x = td_add(g, (graph_op_args){.op = GOP_INPUT, .i = {0}, .dtype = KERN_F64}, odd);
    graph_val y = td_add(g, td_pw(KPW_ADD_S, x, -2.5), name_only);
    td_add(g, td_callout(GOP_OUTPUT, y, 0), name_only);
    char *s = cai_graph_dot(g);
    cr_assert_not_null(s);
    /* the quote and backslash are escaped (a bare \N would be Graphviz's node name), the
     * newline becomes DOT's \n, the tab is dropped */
    td_has(s, "label=\"Odd\\\"Fn\\\\N\\nY (NodeCall 2)\"");
    td_has(s, "tooltip=\"Odd\\\"Fn\\\\N\\nY (NodeCall 2)\"");
    td_has(s, "label=\"Hook\\\"\"");
    td_has(s, "label=\"add_s\\nadd_s -2.5\\nf64[]\"");
    td_assert_quotes_balanced(s);
    char *svg = td_render(s);
    if (svg) { /* Graphviz reads the label back as the original text (tab dropped) */
        td_has(svg, "Odd&quot;Fn\\N");
        td_has(svg, ">Hook&quot;</text>");
        free(svg);
    }
    cai_graph_free_string(s);
    cai_graph_free(g);
}

Test(dot, renders_with_graphviz) {
    graph *g = td_graph();
    char *s = cai_graph_dot(g);
    cr_assert_not_null(s);
    td_assert_quotes_balanced(s);
    char *svg = td_render(s);
    if (!svg) {
        cr_log_info("dot/renders_with_graphviz: %s not found, render check skipped", DOT_BIN);
    } else {
        td_has(svg, "<svg");
        td_has(svg, ">aot1_matmul</text>");
        td_has(svg, ">MeanBackward0 (NodeCall 1)</text>");
        cr_assert_eq(td_count(svg, "class=\"node\""), 10, "10 live nodes drawn:\n%s", svg);
        cr_assert_eq(td_count(svg, "class=\"edge\""), 9, "9 edges drawn");
        cr_assert_eq(td_count(svg, "class=\"cluster\""), 3, "3 origin clusters drawn");
        free(svg);
    }
    cai_graph_free_string(s);
    cai_graph_free(g);
}

/* The text between the line opening cluster `name` and its closing brace. */
static char *td_cluster(const char *s, const char *name) {
    char open[96];
    snprintf(open, sizeof open, "subgraph %s {", name);
    const char *p = strstr(s, open);
    cr_assert_not_null(p, "no %s in:\n%s", name, s);
    const char *line_end = strchr(p, '\n');
    int indent = 0; /* the closing brace is indented as the opening line */
    while (p - indent > s && p[-indent - 1] == ' ')
        indent++;
    char close[64];
    snprintf(close, sizeof close, "\n%*s}\n", indent, "");
    const char *q = strstr(line_end, close);
    cr_assert_not_null(q, "%s is not closed:\n%s", name, s);
    size_t len = (size_t)(q - p) + strlen(close); /* up to its closing brace */
    char *body = malloc(len + 1);
    cr_assert_not_null(body);
    memcpy(body, p, len);
    body[len] = '\0';
    return body;
}

/* Two pointwise chains: one inside MulBackward0 (its group nests in that origin's
 * cluster), one spanning ExpBackward0 and NegBackward0 (its group sits at the top level,
 * and ExpBackward0, left empty, gets no cluster).
 *   n0 x  n1 mul_s  n2 add_s  n3 output  n4 exp  n5 neg  n6 output */
Test(dot, fused_groups_are_clusters) {
    graph *g = cai_graph_new();
    graph_sx c8 = cai_graph_sx_const(g, 8);
    graph_origin none = {-1, NULL, -1}, mul = {1, "MulBackward0", 0};
    graph_origin ex = {2, "ExpBackward0", 0}, neg = {3, "NegBackward0", 0};
    graph_val x = td_add(
        g, (graph_op_args){.op = GOP_INPUT, .dtype = KERN_F32, .n_shape = 1, .shape = {c8}}, none);
    graph_val a = td_add(g, td_pw(KPW_MUL_S, x, 2.0), mul);
    graph_val b = td_add(g, td_pw(KPW_ADD_S, a, 1.0), mul);
    td_add(g, td_callout(GOP_OUTPUT, b, 0), mul);
    graph_val c = td_add(g, td_pw(KPW_EXP, x, 0), ex);
    graph_val d = td_add(g, td_pw(KPW_NEG, c, 0), neg);
    td_add(g, td_callout(GOP_OUTPUT, d, 1), neg);
    cr_assert_eq(cai_graph_fuse(g), 0, "%s", cai_graph_error(g));
    int ga = cai_graph_node_group(g, a), gc = cai_graph_node_group(g, c);
    cr_assert(ga >= 0 && gc >= 0 && ga != gc, "expected two groups, got %d and %d", ga, gc);
    cr_assert_eq(cai_graph_node_group(g, b), ga);
    cr_assert_eq(cai_graph_node_group(g, d), gc);

    char *s = cai_graph_dot(g);
    cr_assert_not_null(s);
    char name_a[32], name_c[32], label[32];
    snprintf(name_a, sizeof name_a, "cluster_fused_%d", ga);
    snprintf(name_c, sizeof name_c, "cluster_fused_%d", gc);
    cr_assert_eq(td_count(s, "subgraph cluster_fused_"), 2, "%s", s);
    /* the one-origin group: inside MulBackward0's cluster, holding n1 and n2 */
    char *mul_cluster = td_cluster(s, "cluster_origin_0");
    td_has(mul_cluster, "label=\"MulBackward0 (NodeCall 1)\"");
    char *fa = td_cluster(mul_cluster, name_a);
    snprintf(label, sizeof label, "label=\"fused %d\"", ga);
    td_has(fa, label);
    td_has(fa, "n1 [");
    td_has(fa, "n2 [");
    td_lacks(fa, "n3 [");
    td_has(mul_cluster, "n3 ["); /* the output: in the origin, outside the group */
    /* the spanning group: at the top level, outside both origins' clusters */
    char *fc = td_cluster(s, name_c);
    td_has(fc, "n4 [");
    td_has(fc, "n5 [");
    cr_assert(strstr(s, name_c) < strstr(s, "cluster_origin_"),
              "a group spanning origins is drawn before (outside) the origin clusters:\n%s", s);
    /* an origin left empty (ExpBackward0) gets no cluster; NegBackward0 keeps its output.
     * The names stay in the tooltips. */
    cr_assert_eq(td_count(s, "subgraph cluster_origin_"), 2, "%s", s);
    td_has(s, "label=\"NegBackward0 (NodeCall 3)\"");
    td_lacks(s, "label=\"ExpBackward0");
    td_has(fc, "tooltip=\"ExpBackward0 (NodeCall 2)\"");
    td_has(fc, "tooltip=\"NegBackward0 (NodeCall 3)\"");
    td_has(s, "n4 -> n5;");
    td_assert_quotes_balanced(s);
    char *svg = td_render(s);
    if (svg) {
        td_has(svg, ">fused ");
        cr_assert_eq(td_count(svg, "class=\"cluster\""), 4, "2 origins + 2 groups:\n%s", svg);
        free(svg);
    }
    free(mul_cluster);
    free(fa);
    free(fc);
    cai_graph_free_string(s);
    cai_graph_free(g);
}

Test(dot, empty_graph_and_null) {
    cr_assert_null(cai_graph_dot(NULL));
    graph *g = cai_graph_new();
    char *s = cai_graph_dot(g);
    cr_assert_not_null(s);
    td_lacks(s, "->");
    td_lacks(s, "subgraph");
    td_has(s, "digraph compiled_backward {");
    char *svg = td_render(s);
    free(svg);
    cai_graph_free_string(s);
    cai_graph_free(g);
}

/* A failing allocator for the graph layer: fails the fail_at-th allocation, counts live. */
static long td_allocs, td_fail_at, td_live;

static void *td_alloc(size_t n) {
    td_allocs++;
    if (td_fail_at && td_allocs == td_fail_at)
        return NULL;
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    td_live += p != NULL;
    return p;
}

static void td_free(void *p) {
    td_live -= p != NULL;
    free(p);
}

Test(dot, survives_allocation_failure) {
    cai_graph_set_allocator((kern_allocator){td_alloc, td_free});
    graph *g = td_graph();
    long live = td_live;
    int failures = 0;
    for (long k = 1;; k++) {
        td_allocs = 0;
        td_fail_at = k;
        char *s = cai_graph_dot(g);
        if (s) {
            cai_graph_free_string(s);
            break;
        }
        failures++;
        cr_assert_eq(td_live, live, "cai_graph_dot leaked after failing allocation %ld", k);
        cr_assert_lt(k, 1000, "cai_graph_dot never succeeded");
    }
    cr_assert_gt(failures, 5, "every allocation of cai_graph_dot should be tried (%d)", failures);
    td_fail_at = 0;
    cai_graph_free(g);
    cai_graph_set_allocator((kern_allocator){NULL, NULL});
    cr_assert_eq(td_live, 0);
}

/* ---------------------------------------------------------------------------------------
 * ca_graph_write_dot
 */
Test(dot, write_errors) {
    char path[128];
    td_tmp_path(path, sizeof path, "never.dot");
    ca_compiled_autograd_reset();
    TU_FAILS(ca_graph_write_dot(path), CA_STATUS_INVALID, "no compiled backward has run yet");
    cr_assert_neq(access(path, F_OK), 0, "nothing must be written on failure");
    TU_FAILS(ca_graph_write_dot(NULL), CA_STATUS_INVALID, "argument 'path' is NULL");

    ca_tensor *w = tu_randn(CA_FLOAT32, TU_SHAPE(3, 4), true);
    ca_tensor *b = tu_randn(CA_FLOAT32, TU_SHAPE(3), true);
    td_backward(8, w, b); /* eager: still no compiled graph */
    TU_FAILS(ca_graph_write_dot(path), CA_STATUS_INVALID, "no compiled backward");
    TU_OK(ca_compiled_autograd_enable(NULL));
    td_backward(8, w, b);
    TU_FAILS(ca_graph_write_dot("/nonexistent-cagrad-dir/g.dot"), CA_STATUS_INVALID,
             "cannot open \"/nonexistent-cagrad-dir/g.dot\" for writing: No such file or "
             "directory");
    if (access("/dev/full", W_OK) == 0) /* ENOSPC shows when the data is flushed */
        TU_FAILS(ca_graph_write_dot("/dev/full"), CA_STATUS_INVALID,
                 "writing \"/dev/full\" failed: No space left on device");
    ca_compiled_autograd_reset(); /* frees the graph: it must be forgotten too */
    TU_FAILS(ca_graph_write_dot(path), CA_STATUS_INVALID, "ca_compiled_autograd_reset");
    TU_OK(ca_compiled_autograd_disable());
    ca_tensor_release(w);
    ca_tensor_release(b);
}

Test(dot, write_file_after_miss_and_hit) {
    char path[128];
    td_tmp_path(path, sizeof path, "mlp.dot");
    ca_tensor *w = tu_randn(CA_FLOAT32, TU_SHAPE(3, 4), true);
    ca_tensor *b = tu_randn(CA_FLOAT32, TU_SHAPE(3), true);
    ca_compiled_autograd_reset();
    TU_OK(ca_compiled_autograd_enable(NULL));
    td_backward(8, w, b); /* miss: static sizes */
    TU_OK(ca_graph_write_dot(path));
    char *first = td_read_file(path);
    cr_assert(strncmp(first, "digraph", 7) == 0, "%s", first);
    td_has(first, "accumulate_grad");
    td_has(first, "matmul");
    td_has(first, "(NodeCall 1)");
    td_has(first, "f32[8, 3]");
    td_backward(16, w, b); /* miss: the batch becomes a symbol */
    td_backward(32, w, b); /* hit: the latest run is the dynamic graph */
    ca_compiled_counters c;
    ca_compiled_autograd_counters(&c);
    cr_assert_eq(c.captures, 2);
    cr_assert_eq(c.cache_hits, 1);
    TU_OK(ca_graph_write_dot(path));
    char *second = td_read_file(path);
    cr_assert(strncmp(second, "digraph", 7) == 0, "%s", second);
    td_has(second, "f32[s0, 3]");
    td_lacks(second, "f32[8, 3]");
    char *svg = td_render(second);
    free(svg);
    free(first);
    free(second);
    unlink(path);
    TU_OK(ca_compiled_autograd_disable());
    ca_compiled_autograd_reset();
    ca_tensor_release(w);
    ca_tensor_release(b);
}

Test(dot, write_to_stdout) {
    char path[128];
    td_tmp_path(path, sizeof path, "stdout.txt");
    ca_tensor *w = tu_randn(CA_FLOAT32, TU_SHAPE(3, 4), true);
    ca_tensor *b = tu_randn(CA_FLOAT32, TU_SHAPE(3), true);
    ca_compiled_autograd_reset();
    TU_OK(ca_compiled_autograd_enable(NULL));
    td_backward(8, w, b);
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    FILE *f = fopen(path, "w");
    cr_assert(saved >= 0 && f);
    dup2(fileno(f), STDOUT_FILENO);
    ca_status st = ca_graph_write_dot("-");
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    fclose(f);
    TU_OK(st);
    char *text = td_read_file(path);
    cr_assert(strncmp(text, "digraph compiled_backward {", 27) == 0, "%s", text);
    td_has(text, "accumulate_grad");
    free(text);
    unlink(path);
    TU_OK(ca_compiled_autograd_disable());
    ca_compiled_autograd_reset();
    ca_tensor_release(w);
    ca_tensor_release(b);
}

/* cache_size_limit 1: a second batch size runs eagerly, and has no graph to draw; a run
 * that hits the cache again has one. */
Test(dot, eager_fallback_has_no_graph) {
    char path[128];
    td_tmp_path(path, sizeof path, "fallback.dot");
    ca_tensor *w = tu_randn(CA_FLOAT32, TU_SHAPE(3, 4), true);
    ca_tensor *b = tu_randn(CA_FLOAT32, TU_SHAPE(3), true);
    ca_compiled_autograd_reset();
    ca_compiled_options o = {.cache_size_limit = 1};
    TU_OK(ca_compiled_autograd_enable(&o));
    td_backward(8, w, b);
    td_backward(16, w, b);
    ca_compiled_counters c;
    ca_compiled_autograd_counters(&c);
    cr_assert_eq(c.eager_fallbacks, 1);
    TU_FAILS(ca_graph_write_dot(path), CA_STATUS_INVALID, "the latest backward ran eagerly");
    td_backward(8, w, b); /* a hit */
    TU_OK(ca_graph_write_dot(path));
    char *text = td_read_file(path);
    td_has(text, "f32[8, 3]");
    free(text);
    unlink(path);
    TU_OK(ca_compiled_autograd_disable());
    ca_compiled_autograd_reset();
    ca_tensor_release(w);
    ca_tensor_release(b);
}

Test(dot, write_out_of_memory) {
    char path[128];
    td_tmp_path(path, sizeof path, "oom.dot");
    tu_alloc_install();
    TU_OK(ca_init());
    ca_tensor *w = tu_randn(CA_FLOAT32, TU_SHAPE(3, 4), true);
    ca_tensor *b = tu_randn(CA_FLOAT32, TU_SHAPE(3), true);
    ca_compiled_autograd_reset();
    TU_OK(ca_compiled_autograd_enable(NULL));
    td_backward(8, w, b);
    tu_alloc_arm(1);
    TU_FAILS(ca_graph_write_dot(path), CA_STATUS_NOMEM, "DOT text");
    cr_assert(tu_alloc_failed());
    tu_alloc_disarm();
    cr_assert_neq(access(path, F_OK), 0, "nothing must be written on failure");
    TU_OK(ca_graph_write_dot(path)); /* and it works again */
    unlink(path);
    TU_OK(ca_compiled_autograd_disable());
    ca_compiled_autograd_reset();
    ca_tensor_release(w);
    ca_tensor_release(b);
    cr_assert_eq(tu_alloc_live(), 0, "%ld allocations leaked", tu_alloc_live());
    tu_alloc_uninstall();
}
