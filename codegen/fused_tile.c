/* fused_tile.c - the fused-loop interpreter's engine: one tile of a planned program (fused.c)
 * evaluated, and lanes that spread tiles over the thread pool.
 *
 * A tile is a list of runs (flat ranges of the index space); every instruction is one call
 * of the same per-ISA row kernel cai_kern_pointwise uses, so fused results equal op-by-op
 * results bit for bit, on every ISA path and thread count. An instruction that reads an
 * input constant along rows by value (kf_plan.by_value) calls its scalar form once per row
 * piece instead: the same bits, but for which NaN goes on where two NaNs meet. Both
 * drivers, fused_run.c and fused_reduce.c, run their tiles here.
 */
#include <assert.h>
#include <stdatomic.h>
#include <string.h>

#include "fused_internal.h"

/* ------------------------------------------------------------------ moving elements */

/* dst[i * ds] = src[i * s] for n elements of esz bytes; bytes, so NaN payloads survive. */
static void kf_move(int64_t esz, char *dst, int64_t ds, const char *src, int64_t s, int64_t n) {
    if (ds == 1 && s == 1) {
        memcpy(dst, src, (size_t)(n * esz));
        return;
    }
    kern_move_strided(esz, dst, ds, src, s, n); /* a splat included */
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

void cai_kern_fused_walk(const kf_plan *pl, const kf_opnd *o, int64_t f, int64_t n, char *buf,
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
        cai_kern_fused_walk(pl, o, runs[i].f, runs[i].n, buf + pos * pl->esz, NULL);
        pos += runs[i].n;
    }
    return buf;
}

/* A tile cut at row ends: in each piece the row-constant inputs are one value
 * (kf_plan.by_value). At most KF_PIECES pieces, else the tile reads them as arrays. */
#define KF_PIECES 40
typedef struct {
    int n;
    kf_run at[KF_PIECES];
    int64_t row[KF_PIECES]; /* the row each piece lies in */
} kf_pieces;

/* The tile's runs cut at row ends into p; false when there are too many pieces. */
static bool kf_cut_rows(const kf_plan *pl, const kf_run *runs, int nruns, kf_pieces *p) {
    int64_t L = pl->shape[pl->nd - 1];
    p->n = 0;
    for (int i = 0; i < nruns; i++) {
        int64_t f = runs[i].f, end = runs[i].f + runs[i].n, row = f / L;
        for (; f < end; row++) {
            int64_t stop = (row + 1) * L < end ? (row + 1) * L : end;
            if (p->n == KF_PIECES)
                return false;
            p->row[p->n] = row;
            p->at[p->n++] = (kf_run){f, stop - f};
            f = stop;
        }
    }
    return true;
}

/* Input r's value in each piece, as the scalar forms take it: one seek, then row by row
 * (a division per dim for every piece cost as much as a 64-entry row's work). */
static void kf_values(const kf_plan *pl, int r, const kf_pieces *pc, double *val) {
    const kf_opnd *o = &pl->op[r];
    int nd = pl->nd;
    int64_t j, idx[KERN_MAX_DIMS], off = 0;
    for (int i = 0; i < pc->n; i++) {
        if (i == 0 || pc->row[i] != pc->row[i - 1] + 1) {
            off = kf_seek(pl, o, pc->at[i].f, &j, idx);
        } else { /* the next row: step the outer index, as a walk does */
            for (int d = nd - 2; d >= 0; d--) {
                if (++idx[d] < pl->shape[d]) {
                    off += o->str[d];
                    break;
                }
                off -= (pl->shape[d] - 1) * o->str[d];
                idx[d] = 0;
            }
        }
        const char *p = o->src + off * o->isz;
        if (pl->dt == KERN_F32) {
            float v;
            memcpy(&v, p, sizeof v);
            val[i] = v;
        } else {
            memcpy(&val[i], p, sizeof val[i]);
        }
    }
}

/* Set by the tiles, read by tests: written only while clear, so the tiles of a run, on
 * every thread, only read it (a count per tile would bounce its cache line between them). */
static atomic_bool kf_values_read;

bool cai_kern_fused_values_read(bool clear) {
    return clear ? atomic_exchange_explicit(&kf_values_read, false, memory_order_relaxed)
                 : atomic_load_explicit(&kf_values_read, memory_order_relaxed);
}

/* Instruction k, which reads a by-value input, piece by piece through its scalar form. */
static void kf_by_value(const kf_plan *pl, int k, const kf_pieces *pc, const double *val, char *dst,
                        const char *src) {
    for (int i = 0; i < pc->n; i++) {
        pl->sfn[k](pc->at[i].n, dst, src, NULL, NULL, val[i], 0.0);
        dst += pc->at[i].n * pl->esz;
        src += pc->at[i].n * pl->esz;
    }
}

void cai_kern_fused_eval(const kf_plan *pl, const kf_ws *ws, const kf_run *runs, int nruns,
                         int64_t m, const char **loc) {
    const kern_fused_prog *p = pl->p;
    kf_pieces pc;
    pc.n = 0; /* (a full initialiser would clear all the pieces, per tile) */
    bool cut = pl->n_by_value > 0 && kf_cut_rows(pl, runs, nruns, &pc);
    if (cut && !atomic_load_explicit(&kf_values_read, memory_order_relaxed))
        atomic_store_explicit(&kf_values_read, true, memory_order_relaxed);
    double val[KERN_FUSED_MAX_INPUTS][KF_PIECES]; /* by-value inputs, per piece */
    int li = 0;
    for (int k = 0; k <= pl->n_instr; k++) {
        for (; li < pl->n_load && pl->first[pl->load[li]] == k; li++) {
            int r = pl->load[li];
            loc[r] = NULL;
            if (!cut || !pl->by_value[r])
                loc[r] = kf_load(pl, ws, r, runs, nruns);
            if (cut && pl->by_value[r])
                kf_values(pl, r, &pc, val[r]);
        }
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
        if (cut && pl->sfn[k]) {
            kf_by_value(pl, k, &pc, val[pl->s_reg[k]], dst, loc[pl->s_other[k]]);
            loc[d] = dst;
            continue;
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

int64_t cai_kern_fused_lanes(int64_t n, int64_t grain) {
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
int64_t cai_kern_fused_grain(int64_t elems_per_unit) {
    int64_t e = elems_per_unit > 0 ? elems_per_unit : 1;
    return e >= KERN_GRAIN ? 1 : (KERN_GRAIN + e - 1) / e;
}

void cai_kern_fused_launch(const kf_plan *pl, char *mem, int64_t lanes, int64_t n, int64_t grain,
                           kf_block_fn block, void *ctx) {
    kf_job j = {pl, block, ctx, mem, n, grain, 0};
    atomic_init(&j.next, 0);
    if (lanes > 1)
        cai_kern_parallel_for(lanes, 1, kf_lane, &j);
    else
        kf_lane(&j, 0, 1);
}

char *cai_kern_fused_lanes_mem(const kf_plan *pl, int64_t lanes, size_t extra, void *scratch,
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
