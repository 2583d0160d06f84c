/* fused.c - the fused-loop interpreter's planning (fused.h): what a program may be, and
 * how it will run over one index space.
 *
 * Planning validates the program, drops instructions nobody reads, collapses the index
 * space over every operand (as cai_kern_pointwise does) and sorts each input into one of: a
 * splat (filled once per call), read in place (its elements are contiguous where the tile
 * is), or gathered per tile. Register buffers are handed out by liveness (a buffer is
 * reused once its last reader has run), so a long chain keeps only a few tiles alive and
 * they stay in L1. The plan is run by fused_tile.c's engine, driven by fused_run.c
 * (elementwise) or fused_reduce.c (a reduction); the scratch a run needs is bounded here.
 */
#include <string.h>

#include "fused_internal.h"

#define KF_TILE_MAX 1024        /* longer tiles stop paying once the call overhead is amortised */
#define KF_BUDGET   (32 * 1024) /* bytes of live tile buffers: about one L1 */
/* Register buffers are this much further apart than a tile: tiles are often a multiple of
 * 4 KiB, and buffers 4 KiB apart alias in the load/store unit (a store to one stalls
 * loads from the others), which made fused loops slower than op by op. */
#define KF_SLOT_PAD 192

/* ------------------------------------------------------------------ validation */

static bool kf_dtype_ok(kern_dtype dt) {
    return (unsigned)dt <= KERN_BOOL;
}

/* Registers op reads (the clamp spells out 0..3 for static analysis). */
static int kf_nread(kern_pw_op op) {
    int n = cai_kern_pw_reads(op);
    return n < 0 ? 0 : n > 3 ? 3 : n;
}

/* A register of another dtype may only be a where's cond or a masked_fill's mask. */
static bool kf_read_ok(const kern_fused_prog *p, kern_dtype dt, int k, int i, int reg) {
    if (reg >= p->n_inputs + k)
        return false; /* read before written */
    if (reg >= p->n_inputs || p->in_dt[reg] == dt)
        return true;
    return cai_kern_pw_cond_input(p->instr[k].op) == i;
}

static int kf_validate(const kern_fused_prog *p, kern_dtype dt) {
    if (!p || !kf_dtype_ok(dt) || p->n_inputs < 0 || p->n_inputs > KERN_FUSED_MAX_INPUTS ||
        p->n_instr < 0 || p->n_instr > KERN_FUSED_MAX_INSTR || p->n_outputs < 0 ||
        p->n_outputs > KERN_FUSED_MAX_OUTPUTS)
        return -1;
    for (int r = 0; r < p->n_inputs; r++)
        if (!kf_dtype_ok(p->in_dt[r]))
            return -1;
    for (int k = 0; k < p->n_instr; k++) {
        const kern_fused_instr *in = &p->instr[k];
        if (!cai_kern_pw_kernel(in->op, dt))
            return -1; /* unknown op, or one the dtype lacks */
        int nread = kf_nread(in->op);
        const int reg[3] = {in->a, in->b, in->c};
        for (int i = 0; i < nread; i++)
            if (!kf_read_ok(p, dt, k, i, reg[i]))
                return -1;
    }
    for (int k = 0; k < p->n_outputs; k++) {
        int r = p->out_reg[k];
        if (r >= p->n_inputs + p->n_instr || (r < p->n_inputs && p->in_dt[r] != dt))
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ planning */

/* Drops size-1 dims and merges neighbours contiguous for all nops operands (their
 * caller strides in str); leaves the collapsed dims in pl->shape and the operands. */
static void kf_collapse(kf_plan *pl, int ndim, const int64_t *shape, int nops,
                        int64_t (*str)[KERN_MAX_DIMS]) {
    int64_t cs[KF_NOPS][KERN_MAX_DIMS];
    pl->nd = cai_kern_collapse_dims(ndim, shape, nops, str, pl->shape, cs);
    for (int k = 0; k < nops; k++)
        for (int d = 0; d < pl->nd; d++)
            pl->op[k].str[d] = cs[k][d];
}

static kf_kind kf_classify(const kf_plan *pl, const kf_opnd *o) {
    bool zero = true, contig = true;
    int64_t want = 1;
    for (int d = pl->nd - 1; d >= 0; d--) {
        zero = zero && o->str[d] == 0;
        contig = contig && o->str[d] == want;
        want *= pl->shape[d];
    }
    if (zero)
        return KF_SPLAT;
    if (o->cvt)
        return KF_GATHER;
    if (contig)
        return KF_CONTIG;
    return o->str[pl->nd - 1] == 1 ? KF_INNER : KF_GATHER;
}

/* Which registers matter (outputs and what they read), and the last use of each. */
static void kf_liveness(kf_plan *pl) {
    const kern_fused_prog *p = pl->p;
    for (int r = 0; r < KF_NREG; r++) {
        pl->live[r] = false;
        pl->last[r] = pl->first[r] = -1;
    }
    for (int k = 0; k < pl->n_out; k++) {
        pl->live[p->out_reg[k]] = true;
        pl->last[p->out_reg[k]] = pl->n_instr;
        pl->first[p->out_reg[k]] = pl->n_instr;
    }
    for (int k = pl->n_instr - 1; k >= 0; k--) {
        if (!pl->live[pl->n_in + k])
            continue;
        const int reg[3] = {p->instr[k].a, p->instr[k].b, p->instr[k].c};
        for (int i = 0; i < pl->nread[k]; i++) {
            CA_ASSERT(reg[i] < pl->n_in + k); /* kf_validate: read only once written */
            pl->live[reg[i]] = true;
            pl->first[reg[i]] = k; /* walking backwards: ends at the first reader */
            if (pl->last[reg[i]] < k)
                pl->last[reg[i]] = k;
        }
    }
    pl->n_load = 0; /* live inputs by first use: an insertion sort of at most 16 */
    for (int r = 0; r < pl->n_in; r++) {
        if (!pl->live[r])
            continue;
        int i = pl->n_load++;
        for (; i > 0 && pl->first[pl->load[i - 1]] > pl->first[r]; i--)
            pl->load[i] = pl->load[i - 1];
        pl->load[i] = r;
    }
}

static bool kf_needs_slot(const kf_plan *pl, int r) {
    switch (pl->op[r].kind) {
    case KF_SPLAT:
    case KF_GATHER: return true;
    case KF_CONTIG: return pl->reduce; /* a reduction tile may be several runs */
    case KF_INNER: return pl->reduce || !pl->row_tiles;
    default: return false;
    }
}

static int kf_slot_take(int *pool, int *npool, int *nslots) {
    return *npool > 0 ? pool[--*npool] : (*nslots)++;
}

/* Linear scan over the program: an input gets its buffer just before its first reader,
 * a register gives its buffer back after its last reader. The destination may take an
 * operand's buffer: the row kernels are elementwise, so out == in is safe. */
static void kf_assign_slots(kf_plan *pl) {
    const kern_fused_prog *p = pl->p;
    int pool[KF_NREG], npool = 0, ns = 0;
    for (int r = 0; r < KF_NREG; r++)
        pl->slot[r] = -1;
    for (int r = 0; r < pl->n_in; r++) /* splats are filled once: never reused */
        if (pl->live[r] && pl->op[r].kind == KF_SPLAT)
            pl->slot[r] = ns++;
    int li = 0;
    for (int k = 0; k <= pl->n_instr; k++) {
        for (; li < pl->n_load && pl->first[pl->load[li]] == k; li++) {
            int r = pl->load[li];
            if (pl->op[r].kind != KF_SPLAT && kf_needs_slot(pl, r))
                pl->slot[r] = kf_slot_take(pool, &npool, &ns);
        }
        if (k == pl->n_instr || !pl->live[pl->n_in + k])
            continue;
        const int reg[3] = {p->instr[k].a, p->instr[k].b, p->instr[k].c};
        for (int i = 0; i < pl->nread[k]; i++) {
            int r = reg[i];
            bool dup = (i > 0 && reg[0] == r) || (i > 1 && reg[1] == r);
            bool splat = r < pl->n_in && pl->op[r].kind == KF_SPLAT;
            if (!dup && !splat && pl->last[r] == k && pl->slot[r] >= 0) {
                CA_ASSERT(npool < KF_NREG);
                pool[npool++] = pl->slot[r];
            }
        }
        if (pl->out_of[pl->n_in + k] < 0)
            pl->slot[pl->n_in + k] = kf_slot_take(pool, &npool, &ns);
    }
    CA_ASSERT(ns <= KF_NREG);
    pl->nslots = ns;
}

/* Bytes spanned by an operand, to see whether an output may alias an input. */
static void kf_extent(const kf_plan *pl, const kf_opnd *o, const char *base, uintptr_t *lo,
                      uintptr_t *hi) {
    int64_t mn = 0, mx = 0;
    for (int d = 0; d < pl->nd; d++) {
        int64_t e = (pl->shape[d] - 1) * o->str[d];
        if (e < 0)
            mn += e;
        else
            mx += e;
    }
    *lo = (uintptr_t)base + (uintptr_t)(mn * o->isz);
    *hi = (uintptr_t)base + (uintptr_t)((mx + 1) * o->isz);
}

/* An output register is computed straight into the output when that memory is contiguous
 * wherever a tile lies and no input can see it change under it. */
static void kf_pick_direct(kf_plan *pl) {
    for (int r = 0; r < KF_NREG; r++)
        pl->out_of[r] = -1;
    for (int k = 0; k < pl->n_out; k++) {
        int r = pl->p->out_reg[k];
        const kf_opnd *o = &pl->op[pl->n_in + k];
        bool ok = r >= pl->n_in && pl->out_of[r] < 0 &&
                  (o->kind == KF_CONTIG || (o->kind == KF_INNER && pl->row_tiles));
        uintptr_t lo, hi, ilo, ihi;
        kf_extent(pl, o, o->dst, &lo, &hi);
        for (int i = 0; ok && i < pl->n_in; i++) {
            if (!pl->live[i])
                continue;
            kf_extent(pl, &pl->op[i], pl->op[i].src, &ilo, &ihi);
            ok = hi <= ilo || ihi <= lo;
        }
        if (ok)
            pl->out_of[r] = k;
    }
}

/* Tiles as big as fit nslots buffers in about one L1, at least min_tile. */
static int64_t kf_tile_size(int64_t nslots, int64_t esz, int64_t min_tile) {
    int64_t ns = nslots > 0 ? nslots : 1, t = KF_TILE_MAX;
    while (t > KF_TILE_MIN && t * ns * esz > KF_BUDGET)
        t /= 2;
    return t < min_tile ? min_tile : t;
}

static void kf_choose_tile(kf_plan *pl, int64_t min_tile) {
    pl->tile = kf_tile_size(pl->nslots, pl->esz, min_tile);
    int64_t L = pl->shape[pl->nd - 1], rows = pl->total / L;
    pl->row_tiles = 2 * L > pl->tile;
    if (pl->row_tiles) { /* split a row evenly, in whole vectors where possible */
        pl->tpr = (L + pl->tile - 1) / pl->tile;
        pl->chunk = ((L + pl->tpr - 1) / pl->tpr + 15) / 16 * 16;
        pl->tpr = (L + pl->chunk - 1) / pl->chunk;
        pl->ntiles = rows * pl->tpr;
    } else {
        pl->rpt = pl->tile / L;
        pl->ntiles = (rows + pl->rpt - 1) / pl->rpt;
    }
}

int cai_kern_fused_plan_init(kf_plan *pl, const kern_fused_prog *p, kern_dtype dt, int ndim,
                             const int64_t *shape, bool reduce) {
    memset(pl, 0, sizeof *pl);
    if (kf_validate(p, dt) < 0 || ndim < 0 || ndim > KERN_MAX_DIMS || (ndim > 0 && !shape))
        return -1;
    if (reduce && p->n_outputs != 1)
        return -1;
    pl->p = p;
    pl->dt = dt;
    pl->esz = (int64_t)cai_kern_dtype_size(dt);
    pl->n_in = p->n_inputs;
    pl->n_instr = p->n_instr;
    pl->n_out = p->n_outputs;
    CA_ASSERT(pl->n_in + pl->n_instr <= KF_NREG && pl->n_out <= KERN_FUSED_MAX_OUTPUTS);
    pl->reduce = reduce;
    pl->total = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return -1;
        pl->total *= shape[d];
    }
    for (int k = 0; k < pl->n_instr; k++) {
        const kern_fused_instr *ins = &p->instr[k];
        pl->fn[k] = cai_kern_pw_kernel(ins->op, dt);
        pl->nread[k] = kf_nread(ins->op);
    }
    kf_liveness(pl);
    return 0;
}

bool cai_kern_fused_inputs_given(const kf_plan *pl, const kern_src *in) {
    for (int r = 0; r < pl->n_in; r++)
        if (pl->live[r] && !in)
            return false;
    return true;
}

/* The scalar form of instruction ins when its operand i (0: a, 1: b) is one value: a - s,
 * s - a, a * s, a / s, s / a, a + s (ADD and SUB with alpha 1 only), or -1. The same
 * operation on the same operands: the same bits, except which NaN goes on where two meet
 * (the hardware's choice of operand, which a compiler may order differently in the
 * baseline build). Forms that would swap the operands (s + a, s * a) are left out. */
static int kf_scalar_form(const kern_fused_instr *ins, int i) {
    switch (ins->op) {
    case KPW_ADD: return i == 1 && ins->p0 == 1.0 ? KPW_ADD_S : -1;
    case KPW_SUB: return ins->p0 != 1.0 ? -1 : i == 1 ? KPW_SUB_S : KPW_RSUB_S;
    case KPW_MUL: return i == 1 ? KPW_MUL_S : -1;
    case KPW_DIV: return i == 1 ? KPW_DIV_S : KPW_RDIV_S;
    default: return -1;
    }
}

/* Live inputs constant along rows of at least KF_VALUE_ROW (shorter rows would make
 * pieces a call too short), not a splat and not converted, of a float program (the scalar
 * forms take a double: exact for floats, not for every int64). */
static bool kf_row_constant(const kf_plan *pl, int r) {
    const kf_opnd *o = &pl->op[r];
    bool fp = pl->dt == KERN_F32 || pl->dt == KERN_F64;
    return fp && pl->live[r] && o->kind == KF_GATHER && !o->cvt && pl->nd >= 2 &&
           o->str[pl->nd - 1] == 0 && pl->shape[pl->nd - 1] >= KF_VALUE_ROW;
}

/* Which row-constant inputs are read by value (kf_plan.by_value): those whose every live
 * reader has a scalar form with it as the scalar and reads an array (no other row-constant
 * input) as its other operand, and that are not themselves an output (stored from their
 * loaded values). */
static void kf_pick_by_value(kf_plan *pl) {
    const kern_fused_prog *p = pl->p;
    pl->n_by_value = 0;
    for (int r = 0; r < pl->n_in; r++)
        pl->by_value[r] = kf_row_constant(pl, r);
    for (int k = 0; k < pl->n_out; k++)
        if (p->out_reg[k] < pl->n_in)
            pl->by_value[p->out_reg[k]] = false;
    for (int k = 0; k < pl->n_instr; k++) {
        if (!pl->live[pl->n_in + k])
            continue;
        const int reg[3] = {p->instr[k].a, p->instr[k].b, p->instr[k].c};
        for (int i = 0; i < pl->nread[k]; i++) {
            int r = reg[i], other = reg[1 - (i & 1)];
            if (r >= pl->n_in || !pl->by_value[r])
                continue;
            bool array = other >= pl->n_in || !kf_row_constant(pl, other);
            if (pl->nread[k] != 2 || i > 1 || !array || kf_scalar_form(&p->instr[k], i) < 0)
                pl->by_value[r] = false;
        }
    }
    for (int k = 0; k < pl->n_instr; k++) {
        pl->sfn[k] = NULL;
        if (!pl->live[pl->n_in + k] || pl->nread[k] != 2)
            continue;
        const int reg[2] = {p->instr[k].a, p->instr[k].b};
        for (int i = 0; i < 2; i++)
            if (reg[i] < pl->n_in && pl->by_value[reg[i]]) {
                pl->sfn[k] = cai_kern_pw_kernel(kf_scalar_form(&p->instr[k], i), pl->dt);
                pl->s_reg[k] = reg[i];
                pl->s_other[k] = reg[1 - i];
            }
    }
    for (int r = 0; r < pl->n_in; r++)
        pl->n_by_value += pl->by_value[r];
}

/* Tile buffers for the outputs now computed in place, and one lane's workspace size. */
static void kf_plan_slots(kf_plan *pl) {
    kf_assign_slots(pl);
    pl->slot_bytes = (size_t)(pl->tile * pl->esz) + KF_SLOT_PAD;
    size_t bytes = (size_t)pl->nslots * pl->slot_bytes + (size_t)(pl->n_spare * pl->tile * pl->esz);
    if (pl->reduce)
        bytes += (size_t)pl->tile * sizeof(kf_run);
    pl->ws_bytes = (bytes + 63) / 64 * 64;
}

void cai_kern_fused_plan_layout(kf_plan *pl, int ndim, const int64_t *shape, const kern_src *in,
                                void *const *out, const int64_t *const *out_strides,
                                int64_t min_tile, int64_t n_spare) {
    int64_t str[KF_NOPS][KERN_MAX_DIMS] = {{0}};
    int nops = pl->n_in + (pl->reduce ? 1 : pl->n_out);
    for (int r = 0; r < pl->n_in; r++) {
        kf_opnd *o = &pl->op[r];
        o->mdt = pl->p->in_dt[r];
        o->cvt = o->mdt != pl->dt;
        o->isz = (int64_t)cai_kern_dtype_size(o->mdt);
        if (!pl->live[r])
            continue; /* never read: may be NULL, must not stop dims merging */
        o->src = in[r].data;
        for (int d = 0; d < ndim; d++)
            str[r][d] = in[r].strides[d];
    }
    for (int k = 0; k < nops - pl->n_in; k++) {
        kf_opnd *o = &pl->op[pl->n_in + k];
        o->mdt = pl->dt;
        o->isz = pl->esz;
        int64_t c = 1;
        for (int d = ndim - 1; d >= 0; d--) {
            str[pl->n_in + k][d] = out_strides ? out_strides[k][d] : c;
            c *= shape[d];
        }
        o->dst = out ? out[k] : NULL;
    }
    kf_collapse(pl, ndim, shape, nops, str);
    for (int k = 0; k < nops; k++)
        pl->op[k].kind = k < pl->n_in && !pl->live[k] ? KF_UNUSED : kf_classify(pl, &pl->op[k]);
    kf_pick_by_value(pl);
    /* size the tiles for the worst case (nothing in place), then settle what is direct */
    for (int r = 0; r < KF_NREG; r++)
        pl->out_of[r] = -1;
    kf_assign_slots(pl);
    kf_choose_tile(pl, min_tile);
    pl->n_spare = n_spare;
    if (!pl->reduce)
        kf_pick_direct(pl);
    kf_plan_slots(pl);
}

/* Outputs computed straight into their memory, as a bit mask. */
static unsigned kf_direct_mask(const kf_plan *pl) {
    unsigned mask = 0;
    for (int k = 0; k < pl->n_out; k++)
        if (pl->out_of[pl->p->out_reg[k]] == k)
            mask |= 1u << k;
    return mask;
}

/* Points a remembered plan at this call's operands. Which outputs may be computed in
 * place depends on where the operands are; when that changes, the tile buffers are
 * handed out again. */
void cai_kern_fused_plan_rebind(kf_plan *pl, const kern_src *in, void *const *out) {
    for (int r = 0; r < pl->n_in; r++)
        if (pl->live[r])
            pl->op[r].src = in[r].data;
    for (int k = 0; k < pl->n_out; k++)
        pl->op[pl->n_in + k].dst = out[k];
    unsigned before = kf_direct_mask(pl);
    kf_pick_direct(pl);
    if (kf_direct_mask(pl) != before)
        kf_plan_slots(pl);
}

/* ------------------------------------------------------------------ scratch sizes */

/* The workspace of one lane at most: cai_kern_fused_plan_layout sizes tiles for the slots it counts
 * first, then may need fewer; a slot count never exceeds one per live register. */
static size_t kf_lane_bound(const kf_plan *pl, int64_t min_tile, int64_t n_spare) {
    int64_t ns_max = 0;
    for (int r = 0; r < pl->n_in + pl->n_instr; r++)
        ns_max += pl->live[r];
    size_t most = 0;
    for (int64_t ns = 0; ns <= ns_max; ns++) {
        int64_t t = kf_tile_size(ns, pl->esz, min_tile);
        size_t bytes =
            (size_t)ns * ((size_t)(t * pl->esz) + KF_SLOT_PAD) + (size_t)(n_spare * t * pl->esz);
        if (pl->reduce)
            bytes += (size_t)t * sizeof(kf_run);
        bytes = (bytes + 63) / 64 * 64;
        most = bytes > most ? bytes : most;
    }
    return most;
}

size_t cai_kern_fused_scratch_bytes(const kern_fused_prog *p, kern_dtype dt, int ndim,
                                    const int64_t *shape, int red, uint32_t rmask) {
    kf_plan pl;
    size_t lane, part = 0;
    if (red < 0) {
        if (cai_kern_fused_plan_init(&pl, p, dt, ndim, shape, false) < 0 || pl.total == 0 ||
            pl.n_out == 0)
            return 0;
        lane = kf_lane_bound(&pl, KF_TILE_MIN, 0);
    } else {
        int64_t min_tile, n_spare;
        if (cai_kern_fused_red_needs(&pl, p, dt, ndim, shape, (kern_red_op)red, rmask, &min_tile,
                                     &n_spare, &part) != 0)
            return 0;
        lane = kf_lane_bound(&pl, min_tile, n_spare);
    }
    /* More than one lane needs two grains of work (cai_kern_fused_lanes): units cover at most twice
     * the elements they stand for, so fewer than KERN_GRAIN / 2 elements run on one. */
    int nth = pl.total < KERN_GRAIN / 2 ? 1 : cai_kern_num_threads();
    return (size_t)(nth > 1 ? nth : 1) * lane + part;
}

bool cai_kern_fused_supports(kern_pw_op op, kern_dtype dt) {
    return kf_dtype_ok(dt) && (unsigned)op < KPW__COUNT && cai_kern_pw_kernel(op, dt) != NULL;
}
