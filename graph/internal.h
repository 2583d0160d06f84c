/* internal.h - what the graph/ source files share and no other layer may use: the layer's
 * allocator, raw access to size expressions and nodes, error recording, shape inference,
 * small shape and op facts, and the text helpers of the printer and the DOT writer.
 *
 * graph.h is the contract the autograd layer and the tests build on; this header is
 * graph/'s own (white-box tests may include it too). (Addition.)
 */
#ifndef CAGRAD_GRAPH_INTERNAL_H
#define CAGRAD_GRAPH_INTERNAL_H

#include "graph/graph.h"

/* ---------------------------------------------------------------------------------------
 * Memory, raw access and errors (ir.c)
 */
void *graph_mem_alloc(size_t nbytes); /* the layer's allocator; NULL when out of memory */
void graph_mem_free(void *p);
/* Expressions in the table. Ids run 0..count-1 and operands always precede their users,
 * so one pass in id order evaluates every expression. */
int graph_sx_count(const graph *g);
/* Kind and operands of s: CONST a = value; SLOT a = slot; ops a, b = operand ids. */
graph_sx_kind graph_sx_get(const graph *g, graph_sx s, int64_t *a, int64_t *b);
/* True when s is the constant v. */
bool graph_sx_is(const graph *g, graph_sx s, int64_t v);
graph_node *graph_node_mut(graph *g, graph_val v);
/* v, or the node CSE or simplification replaced it with, following aliases to the end. */
graph_val graph_resolve(const graph *g, graph_val v);
/* Record an error message for graph_error; returns -1. */
int graph_fail_nomem(graph *g, const char *what);
int graph_fail(graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---------------------------------------------------------------------------------------
 * Shapes and op facts
 */
/* Check and canonicalise n->a and infer n's dtype, rank and shape (shape.c); -1 on error. */
int graph_infer(graph *g, graph_node *n);
/* The same rank and the same expression ids dim by dim (so provably equal). (shape.c) */
bool graph_same_shape(int na, const graph_sx *a, int nb, const graph_sx *b);
/* "[s0, 10]" into buf; returns buf. */
const char *graph_shape_str(const graph *g, int n, const graph_sx *shape, char *buf, size_t size);
/* HOOK, RETAIN, ACCUMULATE, POST_HOOK and OUTPUT. */
bool graph_op_is_side_effect(graph_op op);
/* False for the nodes that make no value (RETAIN, ACCUMULATE, POST_HOOK, OUTPUT). */
bool graph_op_has_value(graph_op op);

/* ---------------------------------------------------------------------------------------
 * Text shared by the printer (print.c) and the DOT writer (dot.c), so that a box of the
 * picture and a line of the log name a value the same way (text.c)
 */
/* A growable string on the layer's allocator. Start it as {.first_cap = n} (n > 0: the
 * first allocation's size). Once an allocation fails, oom is set and writes are dropped. */
typedef struct {
    char *s;
    size_t len, cap, first_cap;
    bool oom;
} graph_sbuf;

void graph_sb_printf(graph_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "[s0, 10]" */
void graph_sb_shape(graph_sbuf *b, const graph *g, int n, const graph_sx *shape);
/* The dims set in a GOP_SUM mask, "[0, 2]". */
void graph_sb_dim_mask(graph_sbuf *b, int64_t mask);
/* A permutation, "[1, 0]". */
void graph_sb_perm(graph_sbuf *b, int n, const int8_t *perm);
/* A GOP_PW node's parameters, each after sep: add and sub show only an alpha that is not 1
 * ("alpha=2"), other ops every parameter they read, with %g. */
void graph_sb_pw_params(graph_sbuf *b, const graph_node *x, const char *sep);

/* "f32", "f64", "i64" ("?" for anything else). */
const char *graph_dtype_short(kern_dtype dt);
/* Same NodeCall id and the same name (by text; both NULL counts as the same). */
bool graph_same_origin(const graph_origin *a, const graph_origin *b);

#define GRAPH_NAME_MAX 64
typedef char graph_name[GRAPH_NAME_MAX];
/* The op's printed name: graph_op_name, or kern_pw_name in lower case for GOP_PW. */
void graph_node_op_name(const graph_node *x, graph_name buf);
/* A name per node, from the layer's allocator (free with graph_mem_free), or NULL when out
 * of memory. Every live node that makes a value is named by its op, prefixed aot{k}_ by
 * its forward graph (inputs never are) and suffixed _1, _2 ... when that name was used
 * before; the others get "". */
graph_name *graph_value_names(const graph *g);

#endif /* CAGRAD_GRAPH_INTERNAL_H */
