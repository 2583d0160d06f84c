/* plan_fused.c - the fused groups of the memory plan: for each group cai_graph_fuse marked,
 * its members (pointwise, in node order), the reduction it may end in, its outputs, and
 * the interpreter program (codegen/fused.h) that computes all of them in one loop.
 *
 * Every group is checked again here, so a group the plan cannot honour (members of
 * different spaces, a side effect between them, too many inputs or outputs, an op the
 * interpreter lacks) simply runs op by op.
 */
#include "graph/internal.h"

#include <string.h>

static bool same_space(const graph_node *a, const graph_node *b) {
    return a->dtype == b->dtype && a->ndim == b->ndim &&
           memcmp(a->shape, b->shape, sizeof(graph_sx) * (size_t)a->ndim) == 0;
}

/* Members (pointwise, in node order) and the reduction each group ends in. */
static void collect_members(plan_group *groups, int n_groups, const graph *g, int n) {
    int se = 0; /* side-effect nodes so far: a group must not span one */
    for (graph_val v = 0; v < n; v++) {
        const graph_node *x = cai_graph_node_at(g, v);
        int k = cai_graph_node_group(g, v);
        if (k < 0 || k >= n_groups) {
            se += !x->dead && cai_graph_op_is_side_effect(x->a.op);
            continue;
        }
        plan_group *G = &groups[k];
        if (G->first < 0)
            G->se_first = se;
        G->se_last = se;
        bool sum = x->a.op == GOP_SUM || x->a.op == GOP_SUM_TO;
        if (x->a.op == GOP_PW && G->reduce < 0 && G->n_members < KERN_FUSED_MAX_INSTR) {
            if (G->first < 0)
                G->first = v;
            G->member[G->n_members++] = v;
        } else if (sum && G->reduce < 0 && G->n_members > 0) {
            G->reduce = v;
        } else {
            G->ok = false;
        }
    }
    for (int k = 0; k < n_groups; k++) {
        plan_group *G = &groups[k];
        G->ok = G->ok && G->n_members > 0 && G->se_first == G->se_last;
        if (G->n_members > 0)
            G->anchor = G->reduce >= 0 ? G->reduce : G->member[G->n_members - 1];
    }
}

static void add_out(plan_group *G, graph_val v) {
    for (int i = 0; i < G->n_out; i++)
        if (G->out[i] == v)
            return;
    if (G->reduce >= 0 || G->n_out == KERN_FUSED_MAX_OUTPUTS)
        G->ok = false; /* a fused reduce's members are read by the reduction alone */
    else
        G->out[G->n_out++] = v;
}

/* Members read outside their group are its outputs; such a reader must come after the
 * group's anchor (it runs there). */
static void collect_outputs(plan_group *groups, int n_groups, const graph *g, int n) {
    for (graph_val v = 0; v < n; v++) {
        const graph_node *x = cai_graph_node_at(g, v);
        int kx = cai_graph_node_group(g, v);
        for (int i = 0; !x->dead && i < x->a.n_in; i++) {
            graph_val u = x->a.in[i];
            int ku = cai_graph_node_group(g, u);
            if (ku < 0 || ku >= n_groups || ku == kx)
                continue;
            plan_group *G = &groups[ku];
            if (v <= G->anchor)
                G->ok = false;
            else if (u != G->reduce)
                add_out(G, u);
        }
    }
    for (int k = 0; k < n_groups; k++) /* the anchor's value is kept, read or not */
        if (groups[k].ok && groups[k].reduce < 0)
            add_out(&groups[k], groups[k].anchor);
}

/* While a group's program is built, idx[v] is member v's index in it, else -1. */
static int member_index(const int32_t *idx, graph_val v) {
    return idx[v];
}

/* The register holding v: a member's instruction, or an input (added when new). */
static int reg_of(plan_group *G, const int32_t *idx, graph_val v, bool add) {
    int i = member_index(idx, v);
    if (i >= 0)
        return G->prog.n_inputs + i;
    for (i = 0; i < G->prog.n_inputs; i++)
        if (G->in[i] == v)
            return i;
    if (!add || G->prog.n_inputs == KERN_FUSED_MAX_INPUTS)
        return -1;
    G->in[G->prog.n_inputs] = v;
    return G->prog.n_inputs++;
}

/* One instruction per member, in node order, over the inputs gathered first. */
static bool build_prog(plan_group *G, const graph *g, const int32_t *idx) {
    kern_fused_prog *p = &G->prog;
    const graph_node *f = cai_graph_node_at(g, G->first);
    memset(p, 0, sizeof *p);
    for (int i = 0; i < G->n_members; i++) {
        const graph_node *x = cai_graph_node_at(g, G->member[i]);
        kern_pw_op op = (kern_pw_op)x->a.i[0];
        if (!same_space(f, x) || !cai_kern_fused_supports(op, f->dtype) ||
            cai_kern_pw_arity(op) != x->a.n_in)
            return false;
        for (int k = 0; k < x->a.n_in; k++)
            if (member_index(idx, x->a.in[k]) < 0 && reg_of(G, idx, x->a.in[k], true) < 0)
                return false;
    }
    for (int r = 0; r < p->n_inputs; r++)
        p->in_dt[r] = cai_graph_node_at(g, G->in[r])->dtype;
    for (int i = 0; i < G->n_members; i++) {
        const graph_node *x = cai_graph_node_at(g, G->member[i]);
        uint8_t reg[3] = {0, 0, 0};
        for (int k = 0; k < x->a.n_in; k++) {
            int r = reg_of(G, idx, x->a.in[k], false);
            CA_ASSERT(r >= 0 && r < p->n_inputs + i); /* an input, or an earlier member */
            reg[k] = (uint8_t)r;
        }
        p->instr[i] =
            (kern_fused_instr){(kern_pw_op)x->a.i[0], reg[0], reg[1], reg[2], x->a.p[0], x->a.p[1]};
    }
    CA_ASSERT(G->n_members <= KERN_FUSED_MAX_INSTR && G->n_out <= KERN_FUSED_MAX_OUTPUTS);
    p->n_instr = G->n_members;
    if (G->reduce >= 0) {
        const graph_node *r = cai_graph_node_at(g, G->reduce);
        int i = member_index(idx, r->a.in[0]);
        if (i < 0 || r->dtype != f->dtype)
            return false;
        p->n_outputs = 1;
        p->out_reg[0] = (uint8_t)(p->n_inputs + i);
        return true;
    }
    for (int k = 0; k < G->n_out; k++) {
        CA_ASSERT(member_index(idx, G->out[k]) >= 0); /* collect_outputs takes members only */
        p->out_reg[k] = (uint8_t)(p->n_inputs + member_index(idx, G->out[k]));
    }
    p->n_outputs = G->n_out;
    return G->n_out > 0;
}

void cai_graph_plan_fused(const graph *g, int n, plan_node *nodes, plan_group *groups, int n_groups,
                          int32_t *idx) {
    for (int v = 0; v < n; v++)
        idx[v] = -1;
    for (int k = 0; k < n_groups; k++)
        groups[k] = (plan_group){.ok = true, .first = -1, .anchor = -1, .reduce = -1};
    collect_members(groups, n_groups, g, n);
    collect_outputs(groups, n_groups, g, n);
    for (int k = 0; k < n_groups; k++) {
        plan_group *G = &groups[k];
        for (int i = 0; i < G->n_members; i++)
            idx[G->member[i]] = i;
        G->ok = G->ok && build_prog(G, g, idx);
        for (int i = 0; i < G->n_members; i++)
            idx[G->member[i]] = -1;
        if (!G->ok)
            continue;
        CA_ASSERT(G->anchor >= 0 && G->anchor < n && G->first >= 0);
        for (int i = 0; i < G->n_members; i++)
            nodes[G->member[i]] = (plan_node){PK_FUSED_TMP, -1, {-1, -1, -1}, k, -1, false};
        for (int i = 0; i < G->n_out; i++)
            nodes[G->out[i]].kind = PK_FUSED_OUT;
        nodes[G->anchor] = (plan_node){PK_FUSED_RUN, -1, {-1, -1, -1}, k, -1, false};
    }
}
