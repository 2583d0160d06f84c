/* compiled.h - the engine's door into the compiled backward (compiled.c). */
#ifndef CAGRAD_COMPILED_H
#define CAGRAD_COMPILED_H

#include "autograd/compiled_cache.h"

/* One backward, as the engine prepared it: roots with their seeds, and for autograd.grad
 * (capture) the target nodes and where their gradients go. */
typedef struct {
    bool capture;
    bool create_graph; /* capture only: the gradients become differentiable */
    bool retain_graph;
    int n_roots;
    ca_node *const *roots;
    const int *root_nrs; /* the output of each root node its seed enters */
    ca_tensor *const *seeds;
    int n_targets;
    ca_node *const *targets;
    const int *target_nrs; /* capture: which output of each target */
    ca_tensor **grads_out; /* capture: n_targets slots, NULL on entry */
} compiled_call;

/* The walk every compiled backward reuses (its buffers are kept until reset). */
ca_walk *cai_compiled_walk(void);
/* A new reference to a tensor of ones of meta m, kept between backwards (the implicit seed
 * of a one-element loss), so a steady-state compiled backward allocates nothing. */
ca_status cai_compiled_seed(const ca_meta *m, ca_tensor **out);
/* True while compiled autograd is enabled. */
bool cai_compiled_active(void);
/* A backward under compiled autograd runs eagerly for `why` (create_graph): counted as an
 * eager fallback, and said in the verbose log. */
void cai_compiled_note_eager(const char *why);
/* Run the walked, needed-marked backward compiled. *ran is false when it must run eagerly
 * instead (nothing has been done then); errors are the eager engine's. */
ca_status cai_compiled_run(const ca_walk *w, const compiled_call *c, bool *ran);

#endif /* CAGRAD_COMPILED_H */
