/* gradgrad.h - gradgradcheck for the double backward tests: the double backward of a
 * function against central differences of its first gradient, in float64.
 *
 * F(x) = sum_k <dL/dx_k, v_k>, L = sum(f(x) * w), with w and the v_k fixed random
 * projections: tu_gradcheck of F checks dF/dx (the double backward, create_graph) against
 * finite differences of F (first-order gradients only).
 */
#ifndef CAGRAD_TESTS_GRADGRAD_H
#define CAGRAD_TESTS_GRADGRAD_H

#include "testutil.h"

#define GG_MAX_IN 4

typedef struct {
    tu_fn f;
    void *ctx;
    ca_tensor *w;            /* projection of f's output, made at the first call */
    ca_tensor *v[GG_MAX_IN]; /* projections of the first gradients */
} gg_state;

/* F for tu_gradcheck: ctx is a gg_state. The inner gradient is taken with create_graph
 * while grad mode is on (tu_gradcheck's analytic pass) and plainly while it is off. */
ca_status gg_fn(ca_tensor *const *in, ca_tensor **out, void *ctx);
/* gradgradcheck of f on n inputs (at most GG_MAX_IN) with tu_gradcheck's tolerances; then,
 * unless compiled autograd is on already, again under it, where the create_graph gradient
 * and the backward through it must both be compiled graphs (no eager fallback). */
void gradgradcheck(tu_fn f, int n, ca_tensor *const *inputs, void *ctx, double atol, double rtol);
/* The same for a function whose double backward compiled autograd still runs eagerly, for
 * the reason `why`: the compiled pass checks the values and that it did fall back. */
void gradgradcheck_falls_back(tu_fn f, int n, ca_tensor *const *inputs, void *ctx, double atol,
                              double rtol, const char *why);
/* Only the analytic pass: F with create_graph, then its backward (no comparison); .grad of
 * the inputs is cleared after. For tests that watch which ops run. */
void second_order_pass(tu_fn f, int n, ca_tensor *const *in, void *ctx);

#endif /* CAGRAD_TESTS_GRADGRAD_H */
