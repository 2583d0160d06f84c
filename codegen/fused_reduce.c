/* fused_reduce.c - cai_kern_fused_reduce (fused.h): a pointwise program whose one output is
 * reduced without being materialised.
 *
 * It takes cai_kern_reduce's plan of the (never materialised) contiguous pointwise result
 * and walks the same summation tree: tiles are cut along its leaves (inner mode) or rows
 * (column mode) and each leaf goes through the ISA's own leaf accumulator, so the result
 * matches cai_kern_pointwise + cai_kern_reduce (bitwise in practice). Tiles are evaluated
 * by fused_tile.c; the T-typed half of the reduction lives in fused_red.inc.
 */
#include <assert.h>
#include <math.h>

#include "fused_internal.h"

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
    cai_kern_fused_eval(pl, fd->ws, fd->ws->runs, nruns, m, loc);
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
    cai_kern_fused_launch(rd->pl, mem, lanes, rd->rp.nunit * rd->rp.nseg, grain, block, rd);
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
    if (cai_kern_fused_plan_init(pl, p, dt, ndim, shape, true) < 0)
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

int cai_kern_fused_red_needs(kf_plan *pl, const kern_fused_prog *p, kern_dtype dt, int ndim,
                             const int64_t *shape, kern_red_op red, uint32_t rmask,
                             int64_t *min_tile, int64_t *n_spare, size_t *part) {
    kf_red rd;
    int64_t levels = 0;
    int rc = kf_red_init(pl, &rd, p, dt, ndim, shape, red, rmask, NULL, &levels);
    if (rc != 0)
        return rc;
    *min_tile = rd.simd ? rd.leaf : KF_TILE_MIN;
    *n_spare = 1 + levels;
    *part = kf_red_part_bytes(&rd);
    return 0;
}

int cai_kern_fused_reduce_ws(const kern_fused_prog *p, kern_dtype dt, int ndim,
                             const int64_t *shape, const kern_src *in, kern_red_op red,
                             uint32_t rmask, void *out, void *scratch, size_t scratch_bytes) {
    kf_plan pl;
    kf_red rd;
    int64_t levels = 0;
    int rc = kf_red_init(&pl, &rd, p, dt, ndim, shape, red, rmask, out, &levels);
    if (rc < 0 || !cai_kern_fused_inputs_given(&pl, in))
        return -1;
    if (rc > 0)
        return rd.rp.O == 0 ? 0 : cai_kern_red_empty(red, dt, rd.rp.O, out);
    cai_kern_fused_plan_layout(&pl, ndim, shape, in, NULL, NULL, rd.simd ? rd.leaf : KF_TILE_MIN,
                               1 + levels);
    if (rd.rp.col)
        rd.rp.nunit = kf_col_units(&rd.rp, pl.tile);
    int64_t per = rd.rp.R / rd.rp.nseg * rd.rp.tile, n = rd.rp.nunit * rd.rp.nseg;
    int64_t grain = cai_kern_fused_grain(per), lanes = cai_kern_fused_lanes(n, grain);
    size_t part = kf_red_part_bytes(&rd);
    bool owned;
    char *mem = cai_kern_fused_lanes_mem(&pl, lanes, part, scratch, scratch_bytes, &owned);
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
