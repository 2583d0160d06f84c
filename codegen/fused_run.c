/* fused_run.c - cai_kern_fused_run (fused.h): a pointwise program run tile by tile, each
 * output stored as its tile is done, and the memo that keeps a plan across calls.
 *
 * Tiles lie inside rows (a long last dim cut evenly) or hold whole rows; outputs contiguous
 * where a tile lies are computed straight into their memory (fused.c picks them).
 */
#include <string.h>

#include "fused_internal.h"

/* ------------------------------------------------------------------ cai_kern_fused_run */

static kf_run kf_tile_range(const kf_plan *pl, int64_t t) {
    int64_t L = pl->shape[pl->nd - 1];
    if (pl->row_tiles) {
        int64_t row = t / pl->tpr, c = t % pl->tpr * pl->chunk;
        return (kf_run){row * L + c, L - c < pl->chunk ? L - c : pl->chunk};
    }
    int64_t f = t * pl->rpt * L, n = pl->rpt * L;
    return (kf_run){f, pl->total - f < n ? pl->total - f : n};
}

static void kf_run_block(void *ctx, const kf_ws *ws, int64_t begin, int64_t end) {
    const kf_plan *pl = ctx;
    const char *loc[KF_NREG];
    for (int64_t t = begin; t < end; t++) {
        kf_run run = kf_tile_range(pl, t);
        cai_kern_fused_eval(pl, ws, &run, 1, run.n, loc);
        for (int k = 0; k < pl->n_out; k++) {
            int r = pl->p->out_reg[k];
            if (pl->out_of[r] != k)
                cai_kern_fused_walk(pl, &pl->op[pl->n_in + k], run.f, run.n, NULL, loc[r]);
        }
    }
}

/* Runs a laid-out plan over its tiles. */
static int kf_run_planned(const kf_plan *pl, void *scratch, size_t scratch_bytes) {
    int64_t grain = cai_kern_fused_grain(pl->tile), lanes = cai_kern_fused_lanes(pl->ntiles, grain);
    bool owned;
    char *mem = cai_kern_fused_lanes_mem(pl, lanes, 0, scratch, scratch_bytes, &owned);
    if (!mem)
        return -2;
    cai_kern_fused_launch(pl, mem, lanes, pl->ntiles, grain, kf_run_block, (void *)pl);
    if (owned)
        cai_kern_scratch_free(mem);
    return 0;
}

/* ------------------------------------------------------------------ the memo */

/* A laid-out plan and what it was laid out for: the program, dtype, index space and the
 * strides of the inputs it reads and of the outputs. Nothing in it depends on where the
 * operands are, except which outputs are computed in place, which is checked per call. */
struct kern_fused_memo {
    bool full;            /* false: empty */
    kern_fused_prog prog; /* compared by value: a caller may reuse the program's memory */
    kern_dtype dt;
    int ndim;
    int64_t shape[KERN_MAX_DIMS];
    int64_t in_str[KERN_FUSED_MAX_INPUTS][KERN_MAX_DIMS];
    int64_t out_str[KERN_FUSED_MAX_OUTPUTS][KERN_MAX_DIMS];
    kf_plan pl;
};

size_t cai_kern_fused_memo_bytes(void) {
    return sizeof(kern_fused_memo);
}

static size_t kf_dims_bytes(int ndim) {
    return sizeof(int64_t) * (size_t)ndim;
}

static bool kf_same_prog(const kern_fused_prog *a, const kern_fused_prog *b) {
    return a->n_inputs == b->n_inputs && a->n_instr == b->n_instr && a->n_outputs == b->n_outputs &&
           memcmp(a->instr, b->instr, sizeof(kern_fused_instr) * (size_t)a->n_instr) == 0 &&
           memcmp(a->out_reg, b->out_reg, (size_t)a->n_outputs) == 0 &&
           memcmp(a->in_dt, b->in_dt, sizeof(kern_dtype) * (size_t)a->n_inputs) == 0;
}

static bool kf_memo_fits(const kern_fused_memo *m, const kern_fused_prog *p, kern_dtype dt,
                         int ndim, const int64_t *shape, const kern_src *in,
                         const int64_t *const *out_strides) {
    size_t db = kf_dims_bytes(ndim);
    if (!m->full || m->dt != dt || m->ndim != ndim || memcmp(m->shape, shape, db) != 0 ||
        !kf_same_prog(&m->prog, p))
        return false;
    for (int r = 0; r < m->pl.n_in; r++)
        if (m->pl.live[r] && memcmp(m->in_str[r], in[r].strides, db) != 0)
            return false;
    for (int k = 0; k < m->pl.n_out; k++)
        if (memcmp(m->out_str[k], out_strides[k], db) != 0)
            return false;
    return true;
}

static void kf_memo_key(kern_fused_memo *m, const kern_fused_prog *p, kern_dtype dt, int ndim,
                        const int64_t *shape, const kern_src *in,
                        const int64_t *const *out_strides) {
    size_t db = kf_dims_bytes(ndim);
    m->full = true;
    m->prog = *p;
    m->dt = dt;
    m->ndim = ndim;
    memcpy(m->shape, shape, db);
    for (int r = 0; r < m->pl.n_in; r++)
        if (m->pl.live[r])
            memcpy(m->in_str[r], in[r].strides, db);
    for (int k = 0; k < m->pl.n_out; k++)
        memcpy(m->out_str[k], out_strides[k], db);
}
/* Plans p afresh into pl (and memo's key, when there is a memo) and runs it. */
static int kf_run_fresh(kf_plan *pl, const kern_fused_prog *p, kern_dtype dt, int ndim,
                        const int64_t *shape, const kern_src *in, void *const *out,
                        const int64_t *const *out_strides, void *scratch, size_t scratch_bytes,
                        kern_fused_memo *memo) {
    if (cai_kern_fused_plan_init(pl, p, dt, ndim, shape, false) < 0 ||
        !cai_kern_fused_inputs_given(pl, in) || (pl->n_out > 0 && (!out || !out_strides)))
        return -1;
    if (pl->total == 0 || pl->n_out == 0)
        return 0;
    cai_kern_fused_plan_layout(pl, ndim, shape, in, out, out_strides, KF_TILE_MIN, 0);
    if (memo)
        kf_memo_key(memo, p, dt, ndim, shape, in, out_strides);
    return kf_run_planned(pl, scratch, scratch_bytes);
}

int cai_kern_fused_run_memo(const kern_fused_prog *p, kern_dtype dt, int ndim, const int64_t *shape,
                            const kern_src *in, void *const *out, const int64_t *const *out_strides,
                            void *scratch, size_t scratch_bytes, kern_fused_memo *memo) {
    if (!memo) {
        kf_plan pl;
        return kf_run_fresh(&pl, p, dt, ndim, shape, in, out, out_strides, scratch, scratch_bytes,
                            NULL);
    }
    if (p && in && out && out_strides && ndim >= 0 && ndim <= KERN_MAX_DIMS &&
        kf_memo_fits(memo, p, dt, ndim, shape, in, out_strides)) {
        memo->pl.p = p; /* equal to the remembered one, and alive */
        cai_kern_fused_plan_rebind(&memo->pl, in, out);
        return kf_run_planned(&memo->pl, scratch, scratch_bytes);
    }
    memo->full = false; /* until the new plan is complete */
    return kf_run_fresh(&memo->pl, p, dt, ndim, shape, in, out, out_strides, scratch, scratch_bytes,
                        memo);
}

int cai_kern_fused_run_ws(const kern_fused_prog *p, kern_dtype dt, int ndim, const int64_t *shape,
                          const kern_src *in, void *const *out, const int64_t *const *out_strides,
                          void *scratch, size_t scratch_bytes) {
    return cai_kern_fused_run_memo(p, dt, ndim, shape, in, out, out_strides, scratch, scratch_bytes,
                                   NULL);
}

int cai_kern_fused_run(const kern_fused_prog *p, kern_dtype dt, int ndim, const int64_t *shape,
                       const kern_src *in, void *const *out, const int64_t *const *out_strides) {
    return cai_kern_fused_run_ws(p, dt, ndim, shape, in, out, out_strides, NULL, 0);
}
