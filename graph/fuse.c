/* fuse.c - the fusion pass: pointwise nodes grouped into fused loop kernels.
 *
 * One greedy walk in node order. A pointwise node joins a group (one of its inputs'
 * groups, else the group most recently joined) when the group still takes members and
 * the result stays within the interpreter's limits; otherwise it opens a group of its own.
 * A group runs at the position of its last member, so it stops taking members as soon as
 * any node outside it reads one of its values (that reader, and everything after it that
 * depends on it, must see the value before the group could grow past it), and no group
 * spans a side-effect node (hooks and .grad accumulation are user-visible; their memory
 * may even alias the inputs). Outputs are counted exactly as the walk goes: a member is
 * an output while some reader of it is outside the group.
 *
 * At the end, a group whose single output is read only by a SUM / SUM_TO takes that
 * reduction in (a fused reduce), and single nodes without a reduction are let go (the
 * interpreter would only add overhead). Membership is recorded in graph_node.fused; the
 * memory plan (plan_fused.c) derives each group's program from its members and checks it again.
 */
#include "codegen/fused.h"
#include "graph/internal.h"

#include <string.h>

typedef struct {
    graph_val first; /* the first member: the dtype and shape every member has */
    int n_members;
    int n_in;
    graph_val in[KERN_FUSED_MAX_INPUTS]; /* values read from outside, deduplicated */
    int pending;      /* members read outside the group so far: its outputs if it closed now */
    int epoch;        /* side-effect nodes before it opened */
    bool frozen;      /* a non-member read a member: it takes no more */
    graph_val reduce; /* the SUM / SUM_TO it ends in, or -1 */
} fgroup;

typedef struct {
    graph *g;
    int n;
    int32_t *grp; /* per node: its group, or -1 */
    int32_t *ext; /* per node: reads of its value by nodes outside its group */
    fgroup *groups;
    int n_groups;
    int epoch;  /* side-effect nodes seen so far */
    int recent; /* the group a node last joined, or -1 */
} fuser;

static bool fusible(const graph_node *x) {
    if (x->dead || x->a.op != GOP_PW || x->a.n_in > 3)
        return false;
    kern_pw_op k = (kern_pw_op)x->a.i[0];
    return cai_kern_pw_arity(k) == x->a.n_in && cai_kern_fused_supports(k, x->dtype);
}

static bool same_space(const graph_node *a, const graph_node *b) {
    return a->dtype == b->dtype && a->ndim == b->ndim &&
           memcmp(a->shape, b->shape, sizeof(graph_sx) * (size_t)a->ndim) == 0;
}

/* Whether x reads v as an earlier input than k (to see each input once). */
static bool seen_before(const graph_node *x, int k) {
    for (int j = 0; j < k; j++)
        if (x->a.in[j] == x->a.in[k])
            return true;
    return false;
}

static int reads_of(const graph_node *x, graph_val v) {
    int c = 0;
    for (int k = 0; k < x->a.n_in; k++)
        c += x->a.in[k] == v;
    return c;
}

static bool has_input(const fgroup *G, graph_val v) {
    for (int i = 0; i < G->n_in; i++)
        if (G->in[i] == v)
            return true;
    return false;
}

/* Whether x may join group gi: open, same space, and within the limits afterwards. */
static bool can_join(const fuser *f, int gi, graph_val xv) {
    const fgroup *G = &f->groups[gi];
    const graph_node *x = cai_graph_node_at(f->g, xv);
    if (G->frozen || G->epoch != f->epoch || G->n_members >= KERN_FUSED_MAX_INSTR ||
        !same_space(cai_graph_node_at(f->g, G->first), x))
        return false;
    int n_new = 0, pending = G->pending + (f->ext[xv] > 0);
    for (int k = 0; k < x->a.n_in; k++) {
        graph_val v = x->a.in[k];
        if (seen_before(x, k))
            continue;
        if (f->grp[v] == gi)
            pending -= f->ext[v] == reads_of(x, v); /* x was its last outside reader */
        else if (!has_input(G, v))
            n_new++;
    }
    return G->n_in + n_new <= KERN_FUSED_MAX_INPUTS && pending <= KERN_FUSED_MAX_OUTPUTS;
}

static void join(fuser *f, int gi, graph_val xv) {
    fgroup *G = &f->groups[gi];
    const graph_node *x = cai_graph_node_at(f->g, xv);
    for (int k = 0; k < x->a.n_in; k++) {
        graph_val v = x->a.in[k];
        if (seen_before(x, k))
            continue;
        if (f->grp[v] == gi) {
            f->ext[v] -= reads_of(x, v);
            G->pending -= f->ext[v] == 0;
        } else if (!has_input(G, v)) {
            G->in[G->n_in++] = v;
        }
    }
    G->pending += f->ext[xv] > 0;
    G->n_members++;
    f->grp[xv] = gi;
    f->recent = gi;
}

static void open_group(fuser *f, graph_val xv) {
    int gi = f->n_groups++;
    f->groups[gi] = (fgroup){.first = xv, .epoch = f->epoch, .reduce = -1};
    join(f, gi, xv);
}

/* Place x: the first of its inputs' groups (then the most recent group) that takes it. */
static void place(fuser *f, graph_val xv) {
    const graph_node *x = cai_graph_node_at(f->g, xv);
    for (int k = 0; k < x->a.n_in; k++) {
        int gi = f->grp[x->a.in[k]];
        if (gi >= 0 && can_join(f, gi, xv)) {
            join(f, gi, xv);
            return;
        }
    }
    if (f->recent >= 0 && can_join(f, f->recent, xv))
        join(f, f->recent, xv);
    else
        open_group(f, xv);
}

/* A SUM / SUM_TO x whose input is its group's one output, read by x alone, since the
 * group opened with no side effect in between: the group ends in x. */
static void try_reduce(fuser *f, graph_val xv) {
    const graph_node *x = cai_graph_node_at(f->g, xv);
    graph_val o = x->a.in[0];
    int gi = f->grp[o];
    if (gi < 0)
        return;
    fgroup *G = &f->groups[gi];
    if (G->reduce >= 0 || G->pending != 1 || f->ext[o] != 1 || G->epoch != f->epoch ||
        x->dtype != cai_graph_node_at(f->g, o)->dtype)
        return;
    G->reduce = xv;
    G->frozen = true;
    f->grp[xv] = gi;
}

/* Every group a node reads from, other than its own, takes no more members. */
static void freeze_read(fuser *f, graph_val xv) {
    const graph_node *x = cai_graph_node_at(f->g, xv);
    for (int k = 0; k < x->a.n_in; k++) {
        int gi = f->grp[x->a.in[k]];
        if (gi >= 0 && gi != f->grp[xv])
            f->groups[gi].frozen = true;
    }
}

static void walk(fuser *f) {
    for (graph_val v = 0; v < f->n; v++) {
        const graph_node *x = cai_graph_node_at(f->g, v);
        if (x->dead)
            continue;
        if (cai_graph_op_is_side_effect(x->a.op))
            f->epoch++;
        if (fusible(x))
            place(f, v);
        else if (x->a.op == GOP_SUM || x->a.op == GOP_SUM_TO)
            try_reduce(f, v);
        freeze_read(f, v);
    }
}

/* Groups worth a kernel get dense ids, in order of their first member. */
static int number_groups(fuser *f, int32_t *id) {
    int k = 0;
    for (int gi = 0; gi < f->n_groups; gi++) {
        const fgroup *G = &f->groups[gi];
        bool keep = G->reduce >= 0 || (G->n_members > 1 && G->pending > 0);
        id[gi] = keep ? k++ : -1;
    }
    return k;
}

int cai_graph_fuse(graph *g) {
    if (!g)
        return -1;
    int n = cai_graph_count(g);
    size_t s_idx = ((sizeof(int32_t) * (size_t)n) + 15) & ~(size_t)15;
    char *m = cai_graph_mem_alloc(3 * s_idx + sizeof(fgroup) * (size_t)n);
    if (!m)
        return cai_graph_fail_nomem(g, "for the fusion pass");
    fuser f = {.g = g, .n = n, .recent = -1};
    f.grp = (int32_t *)m;
    f.ext = (int32_t *)(m + s_idx);
    int32_t *id = (int32_t *)(m + 2 * s_idx);
    f.groups = (fgroup *)(m + 3 * s_idx);
    for (graph_val v = 0; v < n; v++) {
        f.grp[v] = -1;
        f.ext[v] = 0;
    }
    for (graph_val v = 0; v < n; v++) {
        const graph_node *x = cai_graph_node_at(g, v);
        for (int k = 0; !x->dead && k < x->a.n_in; k++)
            f.ext[x->a.in[k]]++;
    }
    walk(&f);
    number_groups(&f, id);
    for (graph_val v = 0; v < n; v++)
        cai_graph_node_mut(g, v)->fused = f.grp[v] >= 0 && id[f.grp[v]] >= 0 ? 1 + id[f.grp[v]] : 0;
    cai_graph_mem_free(m);
    return 0;
}

int cai_graph_node_group(const graph *g, graph_val v) {
    const graph_node *x = cai_graph_node_at(g, v);
    return x && !x->dead && x->fused > 0 ? x->fused - 1 : -1;
}

int cai_graph_count_fused(const graph *g) {
    int most = 0;
    for (graph_val v = 0; v < cai_graph_count(g); v++) {
        int k = cai_graph_node_group(g, v);
        most = k + 1 > most ? k + 1 : most;
    }
    return most;
}
