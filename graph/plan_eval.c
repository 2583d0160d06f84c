/* plan_eval.c - the memory plan's sizes for one run: every size expression evaluated for
 * the run's slot values in one pass, the buffers laid out in the arena (prefix sums,
 * 64-byte aligned), and the scratch the fused loops need after them.
 *
 * Working out the fused loops' scratch plans every group, so it is memoised on the slot
 * values and the thread count: a steady state (same sizes each run) does it once.
 */
#include "graph/internal.h"

#include <string.h>

#define ALIGN 64u /* buffer alignment in the arena */

void cai_graph_plan_compile_sizes(graph_plan *p) {
    for (int s = 0; s < p->n_sx; s++) {
        int64_t a, b;
        graph_sx_kind k = cai_graph_sx_get(p->g, s, &a, &b);
        CA_ASSERT(k == GSX_CONST ||
                  (k == GSX_SLOT ? a >= 0 && a < p->n_slots : a >= 0 && a < s && b >= 0 && b < s));
        p->prog[s] = (sx_step){.kind = (int8_t)k, .a = (int32_t)a, .b = (int32_t)b, .c = a};
    }
}

static size_t align_up(int64_t n) {
    return n <= 0 ? 0 : ((size_t)n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

/* vals: every expression's value (the run's pass), or NULL to evaluate each factor. */
static int64_t buf_bytes(const graph_plan *p, const plan_buf *b, const int64_t *vals,
                         const int64_t *slots) {
    int64_t n = b->cbytes;
    for (int i = 0; i < b->nsym; i++)
        n *= vals ? vals[b->sym[i]] : cai_graph_sx_eval(p->g, b->sym[i], slots);
    return n;
}

uint32_t cai_graph_sum_to_mask(int in_nd, const int64_t *in_shape, int out_nd,
                               const int64_t *out_shape) {
    int lead = in_nd - out_nd;
    uint32_t mask = 0;
    for (int d = 0; d < in_nd; d++)
        if (d < lead || (out_shape[d - lead] == 1 && in_shape[d] != 1))
            mask |= 1u << d;
    return mask;
}

static void eval_shape(const graph_plan *p, const graph_node *x, const int64_t *vals,
                       const int64_t *slots, int64_t *shape) {
    for (int d = 0; d < x->ndim; d++)
        shape[d] = vals ? vals[x->shape[d]] : cai_graph_sx_eval(p->g, x->shape[d], slots);
}

/* Scratch one fused loop needs: the largest of the groups'. Steps run side by side get a
 * region per thread (cai_graph_plan_arena_bytes). */
static size_t fused_scratch(const graph_plan *p, const int64_t *slots) {
    size_t most = 0;
    for (int k = 0; p && k < p->n_groups; k++) {
        const plan_group *G = &p->groups[k];
        if (!G->ok)
            continue;
        const graph_node *f = cai_graph_node_at(p->g, G->first);
        int64_t shape[KERN_MAX_DIMS], rshape[KERN_MAX_DIMS];
        eval_shape(p, f, NULL, slots, shape);
        int red = -1;
        uint32_t mask = 0;
        if (G->reduce >= 0) {
            const graph_node *r = cai_graph_node_at(p->g, G->reduce);
            eval_shape(p, r, NULL, slots, rshape);
            red = KRED_SUM;
            mask = r->a.op == GOP_SUM ? (uint32_t)r->a.i[0]
                                      : cai_graph_sum_to_mask(f->ndim, shape, r->ndim, rshape);
        }
        size_t b = cai_kern_fused_scratch_bytes(&G->prog, f->dtype, f->ndim, shape, red, mask);
        most = b > most ? b : most;
    }
    return most;
}

/* fused_scratch for these slot values, worked out again only when they or the thread
 * count changed since the last call. */
static size_t fused_scratch_memo(graph_plan *p, const int64_t *slots) {
    int nth = cai_kern_num_threads();
    size_t bytes = sizeof(int64_t) * (size_t)p->n_slots;
    if (!slots && bytes) /* no slot values given: every slot reads as 0, do not memoise */
        return fused_scratch(p, slots);
    if (p->memo_threads == nth && (bytes == 0 || memcmp(p->memo_slots, slots, bytes) == 0))
        return p->memo_scratch;
    p->memo_scratch = fused_scratch(p, slots);
    if (bytes)
        memcpy(p->memo_slots, slots, bytes);
    p->memo_threads = nth;
    return p->memo_scratch;
}

/* The buffers' bytes in the arena, each aligned. */
static size_t bufs_bytes(const graph_plan *p, const int64_t *vals, const int64_t *slots) {
    size_t total = 0;
    for (int b = 0; b < p->n_bufs; b++)
        total += align_up(buf_bytes(p, &p->bufs[b], vals, slots));
    return total;
}

size_t cai_graph_plan_arena_bytes(graph_plan *p, const int64_t *slots) {
    if (!p)
        return 0;
    size_t total = bufs_bytes(p, NULL, slots);
    /* one scratch region per thread: steps run side by side each need their own */
    int nth = cai_kern_num_threads();
    return total + (size_t)(nth > 1 ? nth : 1) * align_up((int64_t)fused_scratch_memo(p, slots));
}

/* Operands precede users in the table, so one pass in id order evaluates everything. */
void cai_graph_plan_eval_sizes(graph_plan *p, const int64_t *slots) {
    int64_t *v = p->val;
    for (int s = 0; s < p->n_sx; s++) {
        const sx_step *e = &p->prog[s];
        switch (e->kind) {
        case GSX_CONST: v[s] = e->c; break;
        case GSX_SLOT: v[s] = slots ? slots[e->c] : 0; break;
        case GSX_ADD: v[s] = v[e->a] + v[e->b]; break;
        case GSX_SUB: v[s] = v[e->a] - v[e->b]; break;
        case GSX_MUL: v[s] = v[e->a] * v[e->b]; break;
        default: v[s] = v[e->b] != 0 ? v[e->a] / v[e->b] : 0; break;
        }
    }
    int64_t off = 0;
    for (int b = 0; b < p->n_bufs; b++) {
        p->offset[b] = off;
        off += (int64_t)align_up(buf_bytes(p, &p->bufs[b], v, slots));
    }
    /* the buffers end where cai_graph_plan_arena_bytes sized them to, before the scratch */
    CA_ASSERT((size_t)off == bufs_bytes(p, NULL, slots));
    p->scratch_off = off;
    p->scratch_bytes = fused_scratch_memo(p, slots);
}
