/* plan_profile.c - the work and span of a timed run of a plan (see graph.h).
 *
 * Graph order is a topological order, so one pass computes each step's earliest finish:
 * the latest finish among what it depends on, plus its own time. A fused group's members
 * are computed where the group runs (its anchor), so a reader of a member waits for the
 * anchor; the anchor waits for everything its members read. User-visible side effects
 * (hooks, call-outs, retain_grad) keep their order; .grad accumulation and autograd.grad's
 * outputs touch separate tensors and do not. Buffer reuse is left out: it is the memory
 * plan's choice, and a parallel plan can choose differently.
 */
#include "graph/internal.h"

#include <string.h>

static bool ordered_effect(graph_op op) {
    return cai_graph_op_is_side_effect(op) && op != GOP_ACCUMULATE && op != GOP_OUTPUT;
}

/* The latest finish among v's inputs (and, for an ordered effect, the previous one). */
static int64_t ready_at(const graph_plan *p, const int64_t *finish, graph_val v,
                        graph_val prev_effect) {
    const graph_node *x = cai_graph_node_at(p->g, v);
    int64_t at = 0;
    for (int k = 0; k < x->a.n_in; k++)
        if (finish[x->a.in[k]] > at)
            at = finish[x->a.in[k]];
    if (ordered_effect(x->a.op) && prev_effect >= 0 && finish[prev_effect] > at)
        at = finish[prev_effect];
    return at;
}

/* An anchor runs once everything its group's members read is ready. */
static int64_t group_ready_at(const graph_plan *p, const int64_t *finish, const plan_group *grp,
                              int64_t at) {
    for (int m = 0; m < grp->n_members; m++)
        if (finish[grp->member[m]] > at)
            at = finish[grp->member[m]];
    return at;
}

void cai_graph_plan_work_span(const graph_plan *p, const int64_t *step_ns, int64_t *work,
                              int64_t *span, int *steps) {
    *work = *span = 0;
    *steps = 0;
    int64_t *finish = cai_graph_mem_alloc(sizeof(int64_t) * ((size_t)p->n_nodes + 1));
    if (!finish)
        return;
    memset(finish, 0, sizeof(int64_t) * (size_t)p->n_nodes);
    graph_val prev_effect = -1;
    for (graph_val v = 0; v < p->n_nodes; v++) {
        const plan_node *pn = &p->nodes[v];
        int64_t at = ready_at(p, finish, v, prev_effect);
        if (pn->kind == PK_FUSED_RUN && pn->grp >= 0)
            at = group_ready_at(p, finish, &p->groups[pn->grp], at);
        finish[v] = at + step_ns[v];
        *work += step_ns[v];
        *steps += step_ns[v] > 0 && pn->kind != PK_SKIP;
        if (finish[v] > *span)
            *span = finish[v];
        if (ordered_effect(cai_graph_node_at(p->g, v)->a.op))
            prev_effect = v;
        if (pn->kind == PK_FUSED_RUN && pn->grp >= 0) { /* its members are ready with it */
            const plan_group *grp = &p->groups[pn->grp];
            for (int m = 0; m < grp->n_members; m++)
                finish[grp->member[m]] = finish[v];
        }
    }
    cai_graph_mem_free(finish);
}
