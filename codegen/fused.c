/* fused.c - the fused-loop interpreter (fused.h): a pointwise program run tile by tile.
 *
 * Planning validates the program, drops instructions nobody reads, collapses the index
 * space over every operand (as cai_kern_pointwise does) and sorts each input into one of: a
 * splat (filled once per call), read in place (its elements are contiguous where the tile
 * is), or gathered per tile. Register buffers are handed out by liveness (a buffer is
 * reused once its last reader has run), so a long chain keeps only a few tiles alive and
 * they stay in L1. A tile is a list of runs (flat ranges of the index space); every
 * instruction is one call of the same per-ISA row kernel cai_kern_pointwise uses, so fused
 * results equal op-by-op results bit for bit, on every ISA path and thread count.
 *
 * cai_kern_fused_reduce takes cai_kern_reduce's plan of the (never materialised) contiguous
 * pointwise result and walks the same summation tree: tiles are cut along its leaves
 * (inner mode) or rows (column mode) and each leaf goes through the ISA's own leaf
 * accumulator, so the result matches cai_kern_pointwise + cai_kern_reduce (bitwise in practice).
 * The T-typed half of that lives in fused_red.inc.
 */
#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "fused.h"
#include "kern_internal.h"

#define KF_NREG     (KERN_FUSED_MAX_INPUTS + KERN_FUSED_MAX_INSTR)
#define KF_NOPS     (KERN_FUSED_MAX_INPUTS + KERN_FUSED_MAX_OUTPUTS)
#define KF_TILE_MIN 256         /* elements; a multiple of every vector width */
#define KF_TILE_MAX 1024        /* longer tiles stop paying once the call overhead is amortised */
#define KF_BUDGET   (32 * 1024) /* bytes of live tile buffers: about one L1 */
/* Register buffers are this much further apart than a tile: tiles are often a multiple of
 * 4 KiB, and buffers 4 KiB apart alias in the load/store unit (a store to one stalls
 * loads from the others), which made fused loops slower than op by op. */
#define KF_SLOT_PAD 192

/* How an operand's elements are reached for a tile. */
typedef enum {
    KF_UNUSED, /* not read */
    KF_SPLAT,  /* one value everywhere: a buffer filled once per call */
    KF_CONTIG, /* row-major contiguous over the collapsed space */
    KF_INNER,  /* contiguous along rows only */
    KF_GATHER, /* anything else: copied per tile */
} kf_kind;

typedef struct {
    kf_kind kind;
    bool cvt;        /* a cond/mask of another dtype: loaded as 1/0 of the program dtype */
    kern_dtype mdt;  /* dtype in memory */
    int64_t isz;     /* bytes per element in memory */
    const char *src; /* inputs */
    char *dst;       /* outputs */
    int64_t str[KERN_MAX_DIMS]; /* element strides over the collapsed dims */
} kf_opnd;

typedef struct {
    int64_t f, n; /* flat range [f, f + n) of the index space */
} kf_run;

typedef struct {
    const kern_fused_prog *p;
    kern_dtype dt;
    int64_t esz;
    int n_in, n_instr, n_out;
    bool reduce;
    kern_pw_fn fn[KERN_FUSED_MAX_INSTR];
    int nread[KERN_FUSED_MAX_INSTR]; /* operands the kernel reads */
    bool live[KF_NREG];
    int last[KF_NREG];   /* last instruction reading a register; n_instr: stored */
    int first[KF_NREG];  /* inputs: the instruction before which it is loaded */
    int slot[KF_NREG];   /* tile buffer of a register; -1 for none */
    int out_of[KF_NREG]; /* output a register is computed straight into, or -1 */
    int load[KERN_FUSED_MAX_INPUTS], n_load; /* live inputs by first use */
    int nslots;
    int nd;
    int64_t shape[KERN_MAX_DIMS], total;
    kf_opnd op[KF_NOPS]; /* inputs, then outputs (or the reduction's virtual output) */
    int64_t tile;        /* elements per tile buffer */
    size_t slot_bytes;   /* distance between register buffers: a tile and KF_SLOT_PAD */
    /* cai_kern_fused_run's tiling: tiles inside rows (tpr per row, `chunk` long) or rpt whole
     * rows per tile */
    bool row_tiles;
    int64_t tpr, chunk, rpt, ntiles;
    int64_t n_spare; /* reductions: spare tile buffers per lane */
    size_t ws_bytes; /* one lane's workspace */
} kf_plan;

/* One lane's scratch: the register buffers and, for reductions, the tile's run list and
 * spare tile-sized buffers (a temporary, then the column tree's partial sums). */
typedef struct {
    char *slots;
    kf_run *runs;
    char *tmp;
    char *stack;
} kf_ws;

/* ------------------------------------------------------------------ validation */

static bool kf_dtype_ok(kern_dtype dt) {
    return (unsigned)dt <= KERN_I64;
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

/* Validates the program and the index space and works out liveness; -1 on anything bad.
 * Sets pl->total (0: nothing to run). */
static int kf_plan_init(kf_plan *pl, const kern_fused_prog *p, kern_dtype dt, int ndim,
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

/* Every input the program reads is given. */
static bool kf_inputs_given(const kf_plan *pl, const kern_src *in) {
    for (int r = 0; r < pl->n_in; r++)
        if (pl->live[r] && !in)
            return false;
    return true;
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

/* Collapses, classifies and sizes everything once the index space is known not empty.
 * Operands are the inputs, then the outputs, or (out_strides NULL) the one contiguous
 * virtual output a reduction reads. */
static void kf_plan_layout(kf_plan *pl, int ndim, const int64_t *shape, const kern_src *in,
                           void *const *out, const int64_t *const *out_strides, int64_t min_tile,
                           int64_t n_spare) {
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

/* ------------------------------------------------------------------ moving elements */

/* dst[i * ds] = src[i * s] for n elements of esz bytes; bytes, so NaN payloads survive. */
static void kf_move(int64_t esz, char *dst, int64_t ds, const char *src, int64_t s, int64_t n) {
    if (ds == 1 && s == 1) {
        memcpy(dst, src, (size_t)(n * esz));
        return;
    }
    if (ds == 1 && s == 0 && n > 0) { /* a splat: double the filled prefix (vector memcpy) */
        memcpy(dst, src, (size_t)esz);
        for (int64_t k = 1; k < n; k *= 2)
            memcpy(dst + k * esz, dst, (size_t)((n - k < k ? n - k : k) * esz));
        return;
    }
    kern_move_strided(esz, dst, ds, src, s, n);
}

/* Element offset of flat index f in operand o; *j gets f's position in its row and idx
 * the outer index. */
static int64_t kf_seek(const kf_plan *pl, const kf_opnd *o, int64_t f, int64_t *j, int64_t *idx) {
    int nd = pl->nd;
    int64_t L = pl->shape[nd - 1], q = f / L, off = 0;
    *j = f % L;
    for (int d = nd - 2; d >= 0; d--) {
        idx[d] = q % pl->shape[d];
        q /= pl->shape[d];
        off += idx[d] * o->str[d];
    }
    return off + *j * o->str[nd - 1];
}

/* Loads the flat range [f, f + n) of input o into buf, or (from != NULL) stores `from` to
 * output o, one row piece at a time. */
static void kf_walk(const kf_plan *pl, const kf_opnd *o, int64_t f, int64_t n, char *buf,
                    const char *from) {
    int nd = pl->nd;
    int64_t L = pl->shape[nd - 1], s = o->str[nd - 1], j, idx[KERN_MAX_DIMS];
    int64_t off = kf_seek(pl, o, f, &j, idx);
    while (n > 0) {
        int64_t len = L - j < n ? L - j : n;
        if (from) {
            kf_move(pl->esz, o->dst + off * o->isz, s, from, 1, len);
            from += len * pl->esz;
        } else {
            if (o->cvt)
                cai_kern_mask_pack(pl->dt, buf, 1, o->mdt, o->src + off * o->isz, s, len);
            else
                kf_move(pl->esz, buf, 1, o->src + off * o->isz, s, len);
            buf += len * pl->esz;
        }
        n -= len;
        off -= j * s; /* back to the row start, then on to the next row */
        j = 0;
        for (int d = nd - 2; d >= 0 && n > 0; d--) {
            if (++idx[d] < pl->shape[d]) {
                off += o->str[d];
                break;
            }
            off -= (pl->shape[d] - 1) * o->str[d];
            idx[d] = 0;
        }
    }
}

/* ------------------------------------------------------------------ one tile */

static char *kf_slot(const kf_plan *pl, const kf_ws *ws, int s) {
    assert(s >= 0 && s < pl->nslots);
    return ws->slots + (size_t)s * pl->slot_bytes;
}

static bool kf_in_place(const kf_plan *pl, const kf_opnd *o, const kf_run *runs, int nruns) {
    if (nruns != 1)
        return false;
    int64_t L = pl->shape[pl->nd - 1];
    return o->kind == KF_CONTIG || (o->kind == KF_INNER && runs[0].f % L + runs[0].n <= L);
}

static const char *kf_load(const kf_plan *pl, const kf_ws *ws, int r, const kf_run *runs,
                           int nruns) {
    const kf_opnd *o = &pl->op[r];
    int64_t j, idx[KERN_MAX_DIMS];
    if (o->kind == KF_SPLAT)
        return kf_slot(pl, ws, pl->slot[r]);
    if (kf_in_place(pl, o, runs, nruns))
        return o->src + kf_seek(pl, o, runs[0].f, &j, idx) * o->isz;
    char *buf = kf_slot(pl, ws, pl->slot[r]);
    int64_t pos = 0;
    for (int i = 0; i < nruns; i++) {
        kf_walk(pl, o, runs[i].f, runs[i].n, buf + pos * pl->esz, NULL);
        pos += runs[i].n;
    }
    return buf;
}

/* Runs the program over the runs (m elements in all); loc[r] gets where register r's
 * values are. Inputs are loaded just before their first reader. */
static void kf_eval(const kf_plan *pl, const kf_ws *ws, const kf_run *runs, int nruns, int64_t m,
                    const char **loc) {
    const kern_fused_prog *p = pl->p;
    int li = 0;
    for (int k = 0; k <= pl->n_instr; k++) {
        for (; li < pl->n_load && pl->first[pl->load[li]] == k; li++)
            loc[pl->load[li]] = kf_load(pl, ws, pl->load[li], runs, nruns);
        if (k == pl->n_instr || !pl->live[pl->n_in + k])
            continue;
        const kern_fused_instr *ins = &p->instr[k];
        int d = pl->n_in + k, ok = pl->out_of[d];
        char *dst;
        if (ok >= 0) {
            const kf_opnd *o = &pl->op[pl->n_in + ok];
            int64_t j, idx[KERN_MAX_DIMS];
            dst = o->dst + kf_seek(pl, o, runs[0].f, &j, idx) * o->isz;
        } else {
            dst = kf_slot(pl, ws, pl->slot[d]);
        }
        const int reg[3] = {ins->a, ins->b, ins->c};
        const void *arg[3] = {NULL, NULL, NULL};
        for (int i = 0; i < pl->nread[k] && i < 3; i++) {
            CA_ASSERT(reg[i] < d); /* loc[reg[i]] was set by a load or an earlier instruction */
            arg[i] = loc[reg[i]];
        }
        pl->fn[k](m, dst, arg[0], arg[1], arg[2], ins->p0, ins->p1);
        loc[d] = dst;
    }
}

/* ------------------------------------------------------------------ lanes */

/* A lane is one workspace; lanes take blocks of `grain` work units from a shared counter,
 * so the split of the work (never its results) depends on the threads. */
typedef void (*kf_block_fn)(void *ctx, const kf_ws *ws, int64_t begin, int64_t end);

typedef struct {
    const kf_plan *pl;
    kf_block_fn block;
    void *ctx;
    char *mem;
    int64_t n, grain;
    atomic_int_fast64_t next;
} kf_job;

static kf_ws kf_ws_at(const kf_plan *pl, char *mem, int64_t lane) {
    char *base = mem + (size_t)lane * pl->ws_bytes;
    size_t tb = (size_t)(pl->tile * pl->esz), sb = (size_t)pl->nslots * pl->slot_bytes;
    kf_ws ws = {base, NULL, NULL, NULL};
    if (pl->reduce) { /* the runs last, so every buffer stays 64-byte aligned */
        ws.tmp = base + sb;
        ws.stack = ws.tmp + tb;
        ws.runs = (kf_run *)(void *)(base + sb + (size_t)pl->n_spare * tb);
    }
    return ws;
}

/* Splat inputs are filled once per workspace. */
static void kf_ws_prefill(const kf_plan *pl, const kf_ws *ws) {
    for (int r = 0; r < pl->n_in; r++) {
        const kf_opnd *o = &pl->op[r];
        if (o->kind != KF_SPLAT || pl->slot[r] < 0)
            continue;
        char *buf = kf_slot(pl, ws, pl->slot[r]);
        if (o->cvt)
            cai_kern_mask_pack(pl->dt, buf, 1, o->mdt, o->src, 0, pl->tile);
        else
            kf_move(pl->esz, buf, 1, o->src, 0, pl->tile);
    }
}

static void kf_lane(void *ctx, int64_t begin, int64_t end) {
    kf_job *j = ctx;
    kf_ws ws = kf_ws_at(j->pl, j->mem, begin); /* run serially, the lanes share one */
    (void)end;
    for (;;) {
        int64_t b = atomic_fetch_add(&j->next, j->grain);
        if (b >= j->n)
            return;
        j->block(j->ctx, &ws, b, b + j->grain < j->n ? b + j->grain : j->n);
    }
}

/* Lanes worth running for n units of `grain`: one, or one per thread. */
static int64_t kf_lanes(int64_t n, int64_t grain) {
    if (n < 2 * grain) /* before asking the pool: that may cost a system call */
        return 1;
    int64_t nth = cai_kern_num_threads(), most = n / grain;
    if (nth < 2)
        return 1;
    return nth < most ? nth : most;
}

/* Units of work per grab: at least KERN_GRAIN elements of the index space, the grain by
 * which cai_kern_pointwise splits one op, so a fused loop never takes more threads than the
 * ops it replaces would. (Counting element-instructions instead sent loops of a few
 * thousand elements to the pool, whose wake-up cost more than the whole loop.) */
static int64_t kf_grain(int64_t elems_per_unit) {
    int64_t e = elems_per_unit > 0 ? elems_per_unit : 1;
    return e >= KERN_GRAIN ? 1 : (KERN_GRAIN + e - 1) / e;
}

/* Runs block over [0, n) on `lanes` workspaces at mem (lanes * ws_bytes, filled here). */
static void kf_launch(const kf_plan *pl, char *mem, int64_t lanes, int64_t n, int64_t grain,
                      kf_block_fn block, void *ctx) {
    kf_job j = {pl, block, ctx, mem, n, grain, 0};
    atomic_init(&j.next, 0);
    if (lanes > 1)
        cai_kern_parallel_for(lanes, 1, kf_lane, &j);
    else
        kf_lane(&j, 0, 1);
}

/* The lanes' workspaces and `extra` bytes after them: the caller's scratch when it is big
 * enough, else allocated (*owned set: free it with cai_kern_scratch_free). */
static char *kf_lanes_mem(const kf_plan *pl, int64_t lanes, size_t extra, void *scratch,
                          size_t scratch_bytes, bool *owned) {
    size_t need = (size_t)lanes * pl->ws_bytes + extra;
    char *mem = scratch && scratch_bytes >= need ? scratch : NULL;
    *owned = !mem;
    if (!mem)
        mem = cai_kern_scratch_alloc(need);
    for (int64_t l = 0; mem && l < lanes; l++) {
        kf_ws ws = kf_ws_at(pl, mem, l);
        kf_ws_prefill(pl, &ws);
    }
    return mem;
}

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
        kf_eval(pl, ws, &run, 1, run.n, loc);
        for (int k = 0; k < pl->n_out; k++) {
            int r = pl->p->out_reg[k];
            if (pl->out_of[r] != k)
                kf_walk(pl, &pl->op[pl->n_in + k], run.f, run.n, NULL, loc[r]);
        }
    }
}

/* Runs a laid-out plan over its tiles. */
static int kf_run_planned(const kf_plan *pl, void *scratch, size_t scratch_bytes) {
    int64_t grain = kf_grain(pl->tile), lanes = kf_lanes(pl->ntiles, grain);
    bool owned;
    char *mem = kf_lanes_mem(pl, lanes, 0, scratch, scratch_bytes, &owned);
    if (!mem)
        return -2;
    kf_launch(pl, mem, lanes, pl->ntiles, grain, kf_run_block, (void *)pl);
    if (owned)
        cai_kern_scratch_free(mem);
    return 0;
}

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
static void kf_plan_rebind(kf_plan *pl, const kern_src *in, void *const *out) {
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

/* Plans p afresh into pl (and memo's key, when there is a memo) and runs it. */
static int kf_run_fresh(kf_plan *pl, const kern_fused_prog *p, kern_dtype dt, int ndim,
                        const int64_t *shape, const kern_src *in, void *const *out,
                        const int64_t *const *out_strides, void *scratch, size_t scratch_bytes,
                        kern_fused_memo *memo) {
    if (kf_plan_init(pl, p, dt, ndim, shape, false) < 0 || !kf_inputs_given(pl, in) ||
        (pl->n_out > 0 && (!out || !out_strides)))
        return -1;
    if (pl->total == 0 || pl->n_out == 0)
        return 0;
    kf_plan_layout(pl, ndim, shape, in, out, out_strides, KF_TILE_MIN, 0);
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
        kf_plan_rebind(&memo->pl, in, out);
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

/* ------------------------------------------------------------------ cai_kern_fused_reduce */

/* A reduction pass: cai_kern_reduce's plan of the virtual contiguous pointwise result (whose
 * flat index is the collapsed space's), and what the leaves accumulate. */
typedef struct {
    const kf_plan *pl;
    const kern_simd *simd; /* NULL for int64 */
    kern_rplan rp;
    kern_red_mode mode;
    kern_red_op fin;
    int64_t leaf; /* elements per leaf of a summation tree */
} kf_red;

/* Column mode's work units are our own: the last kept dim cut into chunks that fit a tile
 * (whole rows when they do, so consecutive reduced rows are one run, read in place). A
 * column's result depends only on the row tree and cai_kern_reduce's segment split, which
 * stay as planned. Returns the number of units. */
static int64_t kf_col_units(kern_rplan *rp, int64_t tile) {
    int64_t L = rp->keep.shape[rp->keep.nd - 1], nch = (L + tile - 1) / tile;
    rp->tile = nch == 1 ? L : ((L + nch - 1) / nch + 15) / 16 * 16;
    return rp->O / L * ((L + rp->tile - 1) / rp->tile);
}

/* Partial-sum buffers the column tree needs: one per level of halving. */
static int64_t kf_col_levels(const kern_rplan *rp, int64_t leaf_rows) {
    int64_t n = (rp->R + rp->nseg - 1) / rp->nseg, levels = 1;
    for (; n > leaf_rows; levels++)
        n -= n / 2; /* the larger half */
    return levels;
}

/* Hands out the pointwise values in the order the reduction consumes them. A tile is
 * built from whole leaves (inner mode) or rows (column mode) of consecutive work items,
 * so no value is computed twice and every request lies inside one tile. */
typedef struct {
    const kf_red *rd;
    const kf_ws *ws;
    int64_t w, r, w_end; /* first element not yet in a tile: item w, reduced index r */
    const char *vals;
    int64_t pos, len;
} kf_feed;

static int64_t kf_seg_start(const kf_red *rd, int64_t w) {
    int64_t r0, r1;
    kern_seg_range(rd->rp.R, rd->rp.nseg, w % rd->rp.nseg, &r0, &r1);
    return r0;
}

/* End of the leaf of [r0, r1) that starts at x: the halving cai_kern_reduce's tree makes.
 * Max/min (and int64) do not depend on the split: they take whole tiles. */
static int64_t kf_leaf_end(const kf_red *rd, int64_t r0, int64_t r1, int64_t x) {
    if (!rd->simd || rd->mode >= KRM_MAX)
        return r1 - x < rd->pl->tile ? r1 : x + rd->pl->tile;
    int64_t lo = r0, hi = r1;
    while (hi - lo > rd->leaf) {
        int64_t mid = lo + (hi - lo) / 2;
        if (x < mid)
            hi = mid;
        else
            lo = mid;
    }
    return hi;
}

static int kf_push_run(kf_run *runs, int nruns, int64_t f, int64_t n) {
    if (nruns > 0 && runs[nruns - 1].f + runs[nruns - 1].n == f) {
        runs[nruns - 1].n += n;
        return nruns;
    }
    runs[nruns] = (kf_run){f, n};
    return nruns + 1;
}

/* Inner mode: the reduced elements [x, y) of output u, along the innermost reduced dim. */
static int kf_add_inner(const kf_red *rd, int64_t u, int64_t x, int64_t y, kf_run *runs,
                        int nruns) {
    const kern_dims *red = &rd->rp.red;
    int nr = red->nd;
    int64_t Lr = red->shape[nr - 1], s = red->stride[nr - 1], idx[KERN_MAX_DIMS];
    int64_t base = kern_dims_seek(&rd->rp.keep, rd->rp.keep.nd, u, idx);
    int64_t j = x % Lr, row = kern_dims_seek(red, nr - 1, x / Lr, idx);
    for (int64_t r = x; r < y;) {
        int64_t len = s == 1 ? (Lr - j < y - r ? Lr - j : y - r) : 1;
        nruns = kf_push_run(runs, nruns, base + row + j * s, len);
        r += len;
        j += len;
        if (j == Lr && r < y) {
            j = 0;
            row += kern_dims_next(red, nr - 1, idx);
        }
    }
    return nruns;
}

/* Column mode: unit u's columns [c0, c0 + *nc) start at flat index base + row offset. */
static int64_t kf_col_unit(const kf_red *rd, int64_t u, int64_t *c0, int64_t *nc) {
    const kern_dims *keep = &rd->rp.keep;
    int nk = keep->nd;
    int64_t L = keep->shape[nk - 1], ntile = (L + rd->rp.tile - 1) / rd->rp.tile;
    int64_t idx[KERN_MAX_DIMS], outer = u / ntile;
    *c0 = u % ntile * rd->rp.tile;
    *nc = L - *c0 < rd->rp.tile ? L - *c0 : rd->rp.tile;
    return kern_dims_seek(keep, nk - 1, outer, idx) + *c0;
}

/* Rows [x, y) of column unit u. */
static int kf_add_rows(const kf_red *rd, int64_t u, int64_t x, int64_t y, kf_run *runs, int nruns) {
    int64_t c0, nc, idx[KERN_MAX_DIMS];
    int64_t base = kf_col_unit(rd, u, &c0, &nc);
    int64_t off = kern_dims_seek(&rd->rp.red, rd->rp.red.nd, x, idx);
    for (int64_t r = x; r < y; r++) {
        nruns = kf_push_run(runs, nruns, base + off, nc);
        if (r + 1 < y)
            off += kern_dims_next(&rd->rp.red, rd->rp.red.nd, idx);
    }
    return nruns;
}

/* Builds and evaluates the next tile. */
static void kf_feed_fill(kf_feed *fd) {
    const kf_red *rd = fd->rd;
    const kf_plan *pl = rd->pl;
    const kern_rplan *rp = &rd->rp;
    int nruns = 0;
    int64_t m = 0;
    while (fd->w < fd->w_end) {
        int64_t r0, r1, u = fd->w / rp->nseg, y, size;
        kern_seg_range(rp->R, rp->nseg, fd->w % rp->nseg, &r0, &r1);
        if (fd->r >= r1) {
            if (++fd->w < fd->w_end)
                fd->r = kf_seg_start(rd, fd->w);
            continue;
        }
        if (rp->col) {
            int64_t c0, nc;
            kf_col_unit(rd, u, &c0, &nc);
            int64_t rows = (pl->tile - m) / nc;
            y = r1 - fd->r < rows ? r1 : fd->r + rows;
            size = (y - fd->r) * nc;
        } else {
            y = kf_leaf_end(rd, r0, r1, fd->r);
            size = y - fd->r;
        }
        if (size <= 0 || m + size > pl->tile)
            break;
        nruns = rp->col ? kf_add_rows(rd, u, fd->r, y, fd->ws->runs, nruns)
                        : kf_add_inner(rd, u, fd->r, y, fd->ws->runs, nruns);
        m += size;
        fd->r = y;
    }
    assert(m > 0);
    CA_ASSERT(m <= pl->tile && nruns <= pl->tile); /* runs: a tile's worth in the workspace */
    const char *loc[KF_NREG];
    kf_eval(pl, fd->ws, fd->ws->runs, nruns, m, loc);
    fd->vals = loc[pl->p->out_reg[0]];
    fd->pos = 0;
    fd->len = m;
}

/* The next n values, in consumption order. */
static const void *kf_take(kf_feed *fd, int64_t n) {
    if (fd->pos >= fd->len)
        kf_feed_fill(fd);
    const char *v = fd->vals + fd->pos * fd->rd->pl->esz;
    fd->pos += n;
    assert(fd->pos <= fd->len);
    return v;
}

static kf_feed kf_feed_start(const kf_red *rd, const kf_ws *ws, int64_t begin, int64_t end) {
    kf_feed fd = {rd, ws, begin, kf_seg_start(rd, begin), end, NULL, 0, 0};
    return fd;
}

#define T     float
#define FR(x) kf_f32_##x
#include "fused_red.inc"
#define T     double
#define FR(x) kf_f64_##x
#include "fused_red.inc"

/* int64: sums wrap and extremes are exact, so any order gives the same result. */
static void kf_i64_block(void *ctx, const kf_ws *ws, int64_t begin, int64_t end) {
    const kf_red *rd = ctx;
    kf_feed fd = kf_feed_start(rd, ws, begin, end);
    int64_t *out = rd->rp.out;
    for (int64_t u = begin; u < end; u++) {
        uint64_t sum = 0;
        int64_t ext = 0;
        for (int64_t x = 0; x < rd->rp.R;) {
            int64_t y = kf_leaf_end(rd, 0, rd->rp.R, x);
            const int64_t *v = kf_take(&fd, y - x);
            for (int64_t i = 0; i < y - x; i++) {
                sum += (uint64_t)v[i];
                bool better = rd->rp.op == KRED_MAX ? v[i] > ext : v[i] < ext;
                if ((x == 0 && i == 0) || better)
                    ext = v[i];
            }
            x = y;
        }
        out[u] = rd->rp.op == KRED_SUM ? (int64_t)sum : ext;
    }
}

/* One pass over all work items; nseg > 1 ends by replaying the top of the tree. */
static void kf_red_pass(kf_red *rd, char *mem, int64_t lanes, int64_t grain, kern_red_mode mode,
                        kern_red_op fin) {
    rd->mode = mode;
    rd->fin = fin;
    kf_block_fn block = !rd->simd                ? kf_i64_block
                        : rd->pl->dt == KERN_F32 ? kf_f32_block
                                                 : kf_f64_block;
    kf_launch(rd->pl, mem, lanes, rd->rp.nunit * rd->rp.nseg, grain, block, rd);
    if (rd->rp.nseg > 1 && rd->pl->dt == KERN_F32)
        kf_f32_parts(rd);
    else if (rd->rp.nseg > 1)
        kf_f64_parts(rd);
}

/* logsumexp = log(sum(exp(x - m))) + m with m the max, or 0 where that is infinite. */
static void kf_red_run(kf_red *rd, char *mem, int64_t lanes, int64_t grain) {
    if (rd->rp.op != KRED_LOGSUMEXP) {
        kf_red_pass(rd, mem, lanes, grain, kern_red_mode_of(rd->rp.op), rd->rp.op);
        return;
    }
    kf_red_pass(rd, mem, lanes, grain, KRM_MAX, KRED_MAX);
    if (rd->pl->dt == KERN_F32)
        kf_f32_unshift(rd);
    else
        kf_f64_unshift(rd);
    kf_red_pass(rd, mem, lanes, grain, KRM_SUMEXP, KRED_LOGSUMEXP);
}

/* cai_kern_fused_reduce's planning up to the layout (cai_kern_reduce's plan of the virtual
 * contiguous pointwise result). Returns -1 on bad arguments, 1 when no element is reduced
 * or nothing is kept (the caller finishes), else 0 with *levels the column tree's depth. */
static int kf_red_init(kf_plan *pl, kf_red *rd, const kern_fused_prog *p, kern_dtype dt, int ndim,
                       const int64_t *shape, kern_red_op red, uint32_t rmask, void *out,
                       int64_t *levels) {
    if ((unsigned)red >= KRED__COUNT ||
        (dt == KERN_I64 && red != KRED_SUM && red != KRED_MAX && red != KRED_MIN))
        return -1;
    if (kf_plan_init(pl, p, dt, ndim, shape, true) < 0)
        return -1;
    *rd = (kf_red){.pl = pl, .simd = cai_kern_simd_for(dt)};
    int64_t vstr[KERN_MAX_DIMS], c = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        vstr[d] = c;
        c *= shape[d];
    }
    rd->rp = (kern_rplan){.op = red, .out = out};
    if (cai_kern_red_prepare(&rd->rp, ndim, shape, vstr, rmask) < 0)
        return -1;
    if (rd->rp.O == 0 || rd->rp.R == 0)
        return 1;
    if (rd->simd) {
        cai_kern_red_split(&rd->rp, rd->simd->col_tile);
        rd->leaf = rd->simd->leaf;
    } else { /* one item per output, like cai_kern_reduce's plain path */
        rd->rp.col = false;
        rd->rp.tile = rd->rp.nseg = 1;
        rd->rp.nunit = rd->rp.O;
    }
    *levels = rd->rp.col ? kf_col_levels(&rd->rp, rd->simd->leaf_rows) : 0;
    return 0;
}

/* The partial results of a segmented reduction, after the lanes' workspaces. */
static size_t kf_red_part_bytes(const kf_red *rd) {
    return rd->rp.nseg > 1 ? (size_t)(rd->rp.O * rd->rp.nseg * rd->pl->esz) : 0;
}

int cai_kern_fused_reduce_ws(const kern_fused_prog *p, kern_dtype dt, int ndim,
                             const int64_t *shape, const kern_src *in, kern_red_op red,
                             uint32_t rmask, void *out, void *scratch, size_t scratch_bytes) {
    kf_plan pl;
    kf_red rd;
    int64_t levels = 0;
    int rc = kf_red_init(&pl, &rd, p, dt, ndim, shape, red, rmask, out, &levels);
    if (rc < 0 || !kf_inputs_given(&pl, in))
        return -1;
    if (rc > 0)
        return rd.rp.O == 0 ? 0 : cai_kern_red_empty(red, dt, rd.rp.O, out);
    kf_plan_layout(&pl, ndim, shape, in, NULL, NULL, rd.simd ? rd.leaf : KF_TILE_MIN, 1 + levels);
    if (rd.rp.col)
        rd.rp.nunit = kf_col_units(&rd.rp, pl.tile);
    int64_t per = rd.rp.R / rd.rp.nseg * rd.rp.tile, n = rd.rp.nunit * rd.rp.nseg;
    int64_t grain = kf_grain(per), lanes = kf_lanes(n, grain);
    size_t part = kf_red_part_bytes(&rd);
    bool owned;
    char *mem = kf_lanes_mem(&pl, lanes, part, scratch, scratch_bytes, &owned);
    if (!mem)
        return -2;
    rd.rp.part = part ? mem + (size_t)lanes * pl.ws_bytes : NULL;
    kf_red_run(&rd, mem, lanes, grain);
    if (owned)
        cai_kern_scratch_free(mem);
    return 0;
}

int cai_kern_fused_reduce(const kern_fused_prog *p, kern_dtype dt, int ndim, const int64_t *shape,
                          const kern_src *in, kern_red_op red, uint32_t rmask, void *out) {
    return cai_kern_fused_reduce_ws(p, dt, ndim, shape, in, red, rmask, out, NULL, 0);
}

/* ------------------------------------------------------------------ scratch sizes */

/* The workspace of one lane at most: kf_plan_layout sizes tiles for the slots it counts
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
        if (kf_plan_init(&pl, p, dt, ndim, shape, false) < 0 || pl.total == 0 || pl.n_out == 0)
            return 0;
        lane = kf_lane_bound(&pl, KF_TILE_MIN, 0);
    } else {
        kf_red rd;
        int64_t levels = 0;
        if (kf_red_init(&pl, &rd, p, dt, ndim, shape, (kern_red_op)red, rmask, NULL, &levels) != 0)
            return 0;
        lane = kf_lane_bound(&pl, rd.simd ? rd.leaf : KF_TILE_MIN, 1 + levels);
        part = kf_red_part_bytes(&rd);
    }
    /* More than one lane needs two grains of work (kf_lanes): units cover at most twice
     * the elements they stand for, so fewer than KERN_GRAIN / 2 elements run on one. */
    int nth = pl.total < KERN_GRAIN / 2 ? 1 : cai_kern_num_threads();
    return (size_t)(nth > 1 ? nth : 1) * lane + part;
}

bool cai_kern_fused_supports(kern_pw_op op, kern_dtype dt) {
    return kf_dtype_ok(dt) && (unsigned)op < KPW__COUNT && cai_kern_pw_kernel(op, dt) != NULL;
}
