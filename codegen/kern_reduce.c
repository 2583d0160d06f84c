/* kern_reduce.c - cai_kern_reduce: plans a reduction, then hands it to the ISA table.
 *
 * Planning splits the dims into kept and reduced sets, collapses each, and picks a mode:
 * "inner" (each output reduces runs along the innermost reduced dim; vectorised when that
 * dim is contiguous) or "column" (the last kept dim is contiguous, so one vector holds
 * several outputs and the reduced rows stream past it: column sums, bias gradients). How
 * the reduced space is split (and so the rounding) depends on shapes only, never on the
 * thread count. argmax/argmin and int64 run here as plain C, parallel over outputs.
 */
#include <math.h>
#include <string.h>

#include "kern_internal.h"

#define KERN_RED_SEG_MIN   32768 /* elements per segment before a unit is split */
#define KERN_RED_SEG_MAX   64
#define KERN_RED_FEW_UNITS 64 /* fewer units than this leaves threads idle: split them */

/* Merges neighbouring dims that are contiguous with each other; keeps row-major order. */
static void kern_dims_collapse(kern_dims *d) {
    int nd = 0;
    for (int k = 0; k < d->nd; k++) {
        if (nd > 0 && d->stride[nd - 1] == d->stride[k] * d->shape[k]) {
            d->shape[nd - 1] *= d->shape[k];
            d->stride[nd - 1] = d->stride[k];
            continue;
        }
        d->shape[nd] = d->shape[k];
        d->stride[nd] = d->stride[k];
        nd++;
    }
    d->nd = nd;
}

static void kern_dims_push(kern_dims *d, int64_t shape, int64_t stride) {
    d->shape[d->nd] = shape;
    d->stride[d->nd] = stride;
    d->nd++;
}

/* ------------------------------------------------------------------ plain-C paths */

typedef struct {
    const kern_rplan *pl;
    kern_dtype dt;
    int64_t *idx;
} kern_arg_job;

/* First index of the max (min); the first NaN wins outright. */
#define KERN_ARG_BODY(TY)                                                                          \
    {                                                                                              \
        const TY *x = (const TY *)pl->in + off;                                                    \
        TY best = x[0];                                                                            \
        int64_t bi = 0, roff = 0;                                                                  \
        for (int64_t r = 1; r < pl->R && best == best; r++) {                                      \
            roff += kern_dims_next(&pl->red, pl->red.nd, ridx);                                    \
            TY v = x[roff];                                                                        \
            if (v != v || (is_min ? v < best : v > best)) {                                        \
                best = v;                                                                          \
                bi = r;                                                                            \
            }                                                                                      \
        }                                                                                          \
        ((TY *)pl->out)[o] = best;                                                                 \
        if (j->idx)                                                                                \
            j->idx[o] = bi;                                                                        \
    }

static void kern_arg_range(void *ctx, int64_t begin, int64_t end) {
    const kern_arg_job *j = ctx;
    const kern_rplan *pl = j->pl;
    bool is_min = pl->op == KRED_MIN;
    int64_t kidx[KERN_MAX_DIMS], ridx[KERN_MAX_DIMS];
    for (int64_t o = begin; o < end; o++) {
        int64_t off = kern_dims_seek(&pl->keep, pl->keep.nd, o, kidx);
        memset(ridx, 0, sizeof ridx);
        if (j->dt == KERN_F32)
            KERN_ARG_BODY(float)
        else if (j->dt == KERN_F64)
            KERN_ARG_BODY(double)
        else
            KERN_ARG_BODY(int64_t)
    }
}

/* int64 sums wrap, so any order gives the same result. */
static void kern_sum_i64_range(void *ctx, int64_t begin, int64_t end) {
    const kern_rplan *pl = ((const kern_arg_job *)ctx)->pl;
    int64_t kidx[KERN_MAX_DIMS], ridx[KERN_MAX_DIMS];
    for (int64_t o = begin; o < end; o++) {
        const int64_t *x =
            (const int64_t *)pl->in + kern_dims_seek(&pl->keep, pl->keep.nd, o, kidx);
        memset(ridx, 0, sizeof ridx);
        uint64_t acc = 0;
        int64_t roff = 0;
        for (int64_t r = 0; r < pl->R; r++) {
            acc += (uint64_t)x[roff];
            roff += kern_dims_next(&pl->red, pl->red.nd, ridx);
        }
        ((int64_t *)pl->out)[o] = (int64_t)acc;
    }
}

static void kern_red_plain(const kern_rplan *pl, kern_dtype dt, int64_t *idx) {
    kern_arg_job j = {pl, dt, idx};
    int64_t grain = pl->R >= KERN_GRAIN ? 1 : KERN_GRAIN / pl->R;
    cai_kern_parallel_for(pl->O, grain, pl->op == KRED_SUM ? kern_sum_i64_range : kern_arg_range,
                          &j);
}

/* ------------------------------------------------------------------ planning */

/* Reductions over no element: 0 for sums, NaN for mean, -inf for logsumexp. */
int cai_kern_red_empty(kern_red_op op, kern_dtype dt, int64_t O, void *out) {
    if (op == KRED_MAX || op == KRED_MIN || (dt == KERN_I64 && op != KRED_SUM))
        return -1;
    double v = op == KRED_SUM ? 0.0 : op == KRED_MEAN ? NAN : -INFINITY;
    for (int64_t o = 0; o < O; o++) {
        if (dt == KERN_F32)
            ((float *)out)[o] = (float)v;
        else if (dt == KERN_F64)
            ((double *)out)[o] = v;
        else
            ((int64_t *)out)[o] = 0;
    }
    return 0;
}

/* Column mode needs a contiguous last kept dim and a non-contiguous reduced one. */
void cai_kern_red_split(kern_rplan *pl, int tile) {
    int nk = pl->keep.nd, nr = pl->red.nd;
    pl->col = nk > 0 && pl->keep.stride[nk - 1] == 1 && pl->red.stride[nr - 1] != 1;
    if (pl->col) {
        int64_t L = pl->keep.shape[nk - 1];
        pl->tile = tile;
        pl->nunit = pl->O / L * ((L + tile - 1) / tile);
    } else {
        pl->tile = 1;
        pl->nunit = pl->O;
    }
    pl->nseg = 1;
    if (pl->nunit >= KERN_RED_FEW_UNITS)
        return;
    while (pl->nseg < KERN_RED_SEG_MAX && pl->R / (2 * pl->nseg) * pl->tile >= KERN_RED_SEG_MIN)
        pl->nseg *= 2;
}

int cai_kern_red_prepare(kern_rplan *pl, int ndim, const int64_t *shape, const int64_t *in_strides,
                         uint32_t rmask) {
    pl->O = pl->R = 1;
    pl->keep.nd = pl->red.nd = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return -1;
        bool r = (rmask >> d) & 1;
        if (r)
            pl->R *= shape[d];
        else
            pl->O *= shape[d];
        if (shape[d] != 1)
            kern_dims_push(r ? &pl->red : &pl->keep, shape[d], in_strides[d]);
    }
    kern_dims_collapse(&pl->keep);
    kern_dims_collapse(&pl->red);
    if (pl->red.nd == 0) /* one element per output: a strided copy */
        kern_dims_push(&pl->red, 1, 0);
    return 0;
}

int cai_kern_reduce(kern_red_op op, kern_dtype dt, int ndim, const int64_t *shape, const void *in,
                    const int64_t *in_strides, uint32_t rmask, void *out, int64_t *idx) {
    if ((unsigned)op >= KRED__COUNT || cai_kern_dtype_size(dt) == 0 || ndim < 0 ||
        ndim > KERN_MAX_DIMS)
        return -1;
    if (dt == KERN_I64 && (op == KRED_MEAN || op == KRED_LOGSUMEXP))
        return -1;
    kern_rplan pl = {.op = op, .in = in, .out = out};
    if (cai_kern_red_prepare(&pl, ndim, shape, in_strides, rmask) < 0)
        return -1;
    if (pl.O == 0)
        return 0;
    if (pl.R == 0)
        return cai_kern_red_empty(op, dt, pl.O, out);
    bool want_idx = idx && (op == KRED_MAX || op == KRED_MIN);
    if (want_idx || dt == KERN_I64) {
        kern_red_plain(&pl, dt, want_idx ? idx : NULL);
        return 0;
    }
    const kern_simd *simd = cai_kern_simd_for(dt);
    cai_kern_red_split(&pl, simd->col_tile);
    if (pl.nseg > 1) {
        pl.part = cai_kern_scratch_alloc((size_t)(pl.O * pl.nseg) * cai_kern_dtype_size(dt));
        if (!pl.part)
            return -2;
    }
    simd->reduce(&pl);
    cai_kern_scratch_free(pl.part);
    return 0;
}
