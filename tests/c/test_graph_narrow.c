/* test_graph_narrow.c - Criterion suite `graph_narrow`: the narrow graph op (a slice at a
 * symbolic offset, cat's derivative along a dynamic dim) and the size algebra's
 * (x + y) - x fold it relies on. (Runs: the random-graph test and test_compiled.py.) */
#include "graph/graph.h"
#include "testutil.h"

#include <string.h>

static const graph_origin none = {-1, NULL, -1};

Test(graph_narrow, sum_minus_a_term_folds_to_the_other) {
    graph *g = cai_graph_new();
    graph_sx x = cai_graph_sx_slot(g, 0), y = cai_graph_sx_slot(g, 1);
    graph_sx s = cai_graph_sx_op(g, GSX_ADD, x, y);
    cr_assert_eq(cai_graph_sx_op(g, GSX_SUB, s, x), y);
    cr_assert_eq(cai_graph_sx_op(g, GSX_SUB, s, y), x);
    graph_sx z = cai_graph_sx_slot(g, 2); /* no fold: z is not a term */
    graph_sx d = cai_graph_sx_op(g, GSX_SUB, s, z);
    cr_assert(d != x && d != y && d >= 0);
    int64_t slots[3] = {7, 5, 2};
    cr_assert_eq(cai_graph_sx_eval(g, d, slots), 10);
    cai_graph_free(g);
}

Test(graph_narrow, shape_printing_and_errors) {
    graph *g = cai_graph_new();
    graph_sx a = cai_graph_sx_slot(g, 0), b = cai_graph_sx_slot(g, 1);
    graph_sx c4 = cai_graph_sx_const(g, 4), total = cai_graph_sx_op(g, GSX_ADD, a, b);
    graph_op_args in = {.op = GOP_INPUT, .dtype = KERN_F32, .n_shape = 2, .shape = {total, c4}};
    graph_val x = cai_graph_add(g, &in, none);
    graph_op_args nw = {.op = GOP_NARROW, .n_in = 1, .in = {x}, .n_shape = 2, .shape = {a, b}};
    graph_val v = cai_graph_add(g, &nw, none); /* rows [a, a + b): the second input's */
    cr_assert_geq(v, 0, "%s", cai_graph_error(g));
    const graph_node *n = cai_graph_node_at(g, v);
    cr_assert(n->ndim == 2 && n->shape[0] == b && n->shape[1] == c4);
    char *text = cai_graph_print(g, false, NULL);
    cr_assert(strstr(text, "= narrow(getitem, dim=0, start=s0, length=s1)") != NULL, "%s", text);
    cai_graph_free_string(text);
    /* a constant range past the dim's end is refused here; symbolic ones at run time */
    graph_op_args bad = {.op = GOP_NARROW,
                         .n_in = 1,
                         .in = {x},
                         .i = {1},
                         .n_shape = 2,
                         .shape = {cai_graph_sx_const(g, 3), cai_graph_sx_const(g, 2)}};
    cr_assert_lt(cai_graph_add(g, &bad, none), 0);
    cr_assert(strstr(cai_graph_error(g), "past the end of dim 1") != NULL, "%s",
              cai_graph_error(g));
    bad.n_shape = 1; /* {start, length} expected */
    cr_assert_lt(cai_graph_add(g, &bad, none), 0);
    cai_graph_free(g);
}
