/* kern_conv_wino.c - 3x3 convolutions at unit stride by Winograd's F(2x2, 3x3).
 *
 * A 2x2 tile of outputs of a 3x3 kernel reads a 4x4 patch d of the image. Winograd's
 * minimal filtering algorithm (Lavin & Gray, "Fast Algorithms for Convolutional Neural
 * Networks", 2016) computes it as
 *     y = A^T [ (G g G^T) . (B^T d B) ] A
 * with 16 products where the direct sum takes 36: the transformed image V = B^T d B and
 * weight U = G g G^T meet position by position, so over channels each of the 16 positions
 * k is one GEMM, M_k[o, tile] = sum_c U_k[o, c] V_k[c, tile], 2.25x fewer flops than
 * im2col's. The weight gradient is the same bilinear form read the other way (transposing
 * the algorithm): dg = G^T [ sum over tiles (A dy A^T) . (B^T d B) ] G, again 16 GEMMs, now
 * with the tiles as their inner dim.
 *
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]   G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]
 *   A^T = [1 1 1 0; 0 1 -1 -1]
 *
 * The constants are 0, +-1 and 1/2, so the transforms add no rounding beyond their sums;
 * the GEMMs' sums are as long as im2col's over channels but the taps are summed in
 * transformed space, so results differ from im2col's by rounding (tests/c/test_conv_wino.c
 * bounds the f32 error against an f64 reference by a small multiple of im2col's). Patches
 * that reach past the image read zeros. At unit stride only the last tile of an odd oh can
 * have a discarded output row, and the one row only it reads lies past the image (row
 * h + ph_end): so no value of the image reaches only discarded outputs.
 *
 * Work is cut by the sizes alone, as in kern_conv_gemm.c: a slab of images at a time (the
 * transformed slab in cache), transforms per (image, channel), GEMMs per (position, group,
 * block of tiles), each a single-threaded BLAS call. Every element is the same sum in the
 * same order at every thread count. The weight gradient adds its slabs in order into 16
 * accumulators per group before the final transform.
 */
#include "kern_conv_wino.h"
#include "kern_blas.h"

#include <string.h>

#define WINO_SLAB       (1 << 18) /* transformed entries (V and M or dY) per slab, about */
#define WINO_TILE_EDGE  512       /* tiles per forward GEMM, at most about */
#define WINO_PARTIALS   (1 << 21) /* entries of the weight gradient's partial sums, at most */
#define WINO_MIN_CHANNS 16        /* per group, in and out: below it im2col's GEMM wins */
/* Between the 16 planes: a transform writes (or reads) all 16 at once, and planes a
 * multiple of 4 KB apart would fall in one set of the L1 cache and evict each other. */
#define WINO_PLANE_PAD 16

static bool wino_enabled = true;

void cai_kern_conv_set_winograd(bool on) {
    wino_enabled = on;
}

bool cai_kern_conv_winograd_fits(kern_dtype dt, const kern_conv_geom *g, int64_t out_channels) {
    if (!wino_enabled || (dt != KERN_F32 && dt != KERN_F64) || g->groups < 1)
        return false;
    return g->kh == 3 && g->kw == 3 && g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1 &&
           g->c / g->groups >= WINO_MIN_CHANNS && out_channels / g->groups >= WINO_MIN_CHANNS &&
           g->oh >= 2 && g->ow >= 2;
}

/* The baseline transforms (the AVX builds are in kern_conv_wino_avx2.c / _avx512.c). */
#define WINO_XF_NAME cai_wino_xf_scalar
#include "kern_conv_wino_xf.inc"

static const wino_xf *wino_xf_for(kern_dtype dt) {
    int d = dt == KERN_F32 ? 0 : 1;
    switch (cai_kern_isa()) {
    case KERN_ISA_AVX512: return &cai_wino_xf_avx512[d];
    case KERN_ISA_AVX2: return &cai_wino_xf_avx2[d];
    default: return &cai_wino_xf_scalar[d];
    }
}

/* The pool's ranges over each stage's items. */
static void input_items(void *ctx, int64_t begin, int64_t end) {
    const wino_job *j = ctx;
    for (int64_t it = begin; it < end; it++)
        j->xf->input_tiles(j, it / j->C, it % j->C);
}

static void output_items(void *ctx, int64_t begin, int64_t end) {
    const wino_job *j = ctx;
    for (int64_t it = begin; it < end; it++)
        j->xf->output_tiles(j, it / j->O, it % j->O);
}

static void grad_items(void *ctx, int64_t begin, int64_t end) {
    const wino_job *j = ctx;
    for (int64_t it = begin; it < end; it++)
        j->xf->grad_tiles(j, it / j->O, it % j->O);
}

static void weight_items(void *ctx, int64_t begin, int64_t end) {
    const wino_job *j = ctx;
    for (int64_t o = begin; o < end; o++)
        j->xf->weight_transform(j, o);
}

static void unweight_items(void *ctx, int64_t begin, int64_t end) {
    const wino_job *j = ctx;
    for (int64_t o = begin; o < end; o++)
        j->xf->weight_untransform(j, o);
}

/* Forward GEMMs: item (k, group, block of tiles): M_k[group] = U_k[group] @ V_k[group]. */
static void forward_gemms(void *ctx, int64_t begin, int64_t end) {
    const wino_job *j = ctx;
    size_t es = j->es;
    for (int64_t it = begin; it < end; it++) {
        int64_t k = it / (j->G * j->blocks), grp = it / j->blocks % j->G;
        int64_t lo = it % j->blocks * j->edge, n = j->nt - lo < j->edge ? j->nt - lo : j->edge;
        const char *a = j->U + (size_t)(k * j->uplane + grp * j->Og * j->Cg) * es;
        const char *b = j->V + (size_t)(k * j->vplane + grp * j->Cg * j->nt + lo) * es;
        char *c = j->M + (size_t)(k * j->mplane + grp * j->Og * j->nt + lo) * es;
        cai_kern_gemm1(j->dt, false, j->Og, n, j->Cg, a, j->Cg, b, j->nt, 0.0, c, j->nt);
    }
}

/* Gradient GEMMs: item (k, group): U_k[group] = beta U_k[group] + dY_k[group] @ V_k[group]^T,
 * over the slab's tiles (beta 0 for a partial's first slab, so nothing clears U first). */
static void grad_gemms(void *ctx, int64_t begin, int64_t end) {
    const wino_job *j = ctx;
    size_t es = j->es;
    for (int64_t it = begin; it < end; it++) {
        int64_t k = it / j->G, grp = it % j->G;
        const char *a = j->M + (size_t)(k * j->mplane + grp * j->Og * j->nt) * es;
        const char *b = j->V + (size_t)(k * j->vplane + grp * j->Cg * j->nt) * es;
        char *c = j->U + (size_t)(k * j->uplane + grp * j->Og * j->Cg) * es;
        cai_kern_gemm1(j->dt, true, j->Og, j->Cg, j->nt, a, j->nt, b, j->nt, j->beta, c, j->Cg);
    }
}

/* Sizes and the slab: images whose V and M together fill about WINO_SLAB entries. */
static void wino_setup(wino_job *j, kern_dtype dt, const kern_conv_geom *g, const void *x,
                       const int64_t *xs, int64_t out_channels) {
    cai_kern_blas_init(); /* OpenBLAS on one thread: the GEMMs call it directly */
    *j = (wino_job){
        .dt = dt, .es = cai_kern_dtype_size(dt), .xf = wino_xf_for(dt), .g = g, .x = x, .xs = xs};
    j->C = g->c;
    j->O = out_channels;
    j->G = g->groups;
    j->Cg = g->c / g->groups;
    j->Og = out_channels / g->groups;
    j->th = (g->oh + 1) / 2;
    j->tw = (g->ow + 1) / 2;
    j->tiles = j->th * j->tw;
    int64_t per = 16 * (j->C + j->O) * j->tiles;
    j->S = WINO_SLAB / per;
    j->S = j->S < 1 ? 1 : j->S > g->n ? g->n : j->S;
    j->vplane = j->C * j->S * j->tiles + WINO_PLANE_PAD;
    j->mplane = j->O * j->S * j->tiles + WINO_PLANE_PAD;
    j->uplane = j->O * j->Cg + WINO_PLANE_PAD;
}

/* A slab's scratch, V and M: false (and nothing held) when it cannot be had. */
static bool slab_alloc(wino_job *j) {
    j->V = cai_kern_scratch_alloc(16 * (size_t)j->vplane * j->es);
    j->M = cai_kern_scratch_alloc(16 * (size_t)j->mplane * j->es);
    if (j->V && j->M)
        return true;
    cai_kern_scratch_free(j->V);
    cai_kern_scratch_free(j->M);
    j->V = j->M = NULL;
    return false;
}

static void slab_free(wino_job *j) {
    cai_kern_scratch_free(j->V);
    cai_kern_scratch_free(j->M);
}

/* Slab k: its images and tiles, and the forward GEMMs' blocks of its tiles. */
static void slab_at(wino_job *j, int64_t k) {
    j->n0 = k * j->S;
    j->s = j->g->n - j->n0 < j->S ? j->g->n - j->n0 : j->S;
    j->nt = j->s * j->tiles;
    j->blocks = (j->nt + WINO_TILE_EDGE - 1) / WINO_TILE_EDGE;
    j->edge = (j->nt + j->blocks - 1) / j->blocks;
}

static int64_t slab_count(const wino_job *j) {
    return (j->g->n + j->S - 1) / j->S;
}

/* A stage's items on the pool (in_pool) or all on the calling thread: the same calls
 * either way, so the same bits. */
static void stage(wino_job *j, bool in_pool, int64_t items, kern_range_fn fn) {
    if (in_pool)
        cai_kern_parallel_for(items, 1, fn, j);
    else
        fn(j, 0, items);
}

/* One slab's forward, stage after stage. */
static void forward_slab(wino_job *j, bool in_pool) {
    stage(j, in_pool, j->s * j->C, input_items);
    stage(j, in_pool, 16 * j->G * j->blocks, forward_gemms);
    stage(j, in_pool, j->s * j->O, output_items);
}

/* One slab's part of the weight gradient: its 16 * groups products added into j->U. */
static void grad_slab(wino_job *j, bool in_pool) {
    stage(j, in_pool, j->s * j->C, input_items);
    stage(j, in_pool, j->s * j->O, grad_items);
    stage(j, in_pool, 16 * j->G, grad_gemms);
}

/* Partial sum p of the weight gradient, at parts + p * 16 * uplane: slabs
 * [p * per_part, (p + 1) * per_part) added in order. */
static void grad_partial(wino_job *j, char *parts, int64_t p, int64_t per_part, bool in_pool) {
    int64_t slabs = slab_count(j), part = 16 * j->uplane;
    j->U = parts + (size_t)(p * part) * j->es;
    for (int64_t k = p * per_part; k < (p + 1) * per_part && k < slabs; k++) {
        slab_at(j, k);
        j->beta = k == p * per_part ? 0.0 : 1.0;
        grad_slab(j, in_pool);
    }
}

/* Slabs side by side, each worker with its own scratch: the forward of slabs [begin, end),
 * or the weight gradient's partial sums p in [begin, end) (partial p: slabs [p*q, p*q + q)
 * added in order into U + p * 16 * uplane). */
typedef struct {
    wino_job base;
    int64_t per_part; /* slabs per partial sum (the weight gradient) */
    int64_t parts;    /* partial sums */
    int rc;           /* the first failure, set atomically */
} wino_sides;

static void forward_side_range(void *ctx, int64_t begin, int64_t end) {
    wino_sides *w = ctx;
    wino_job j = w->base;
    if (!slab_alloc(&j)) {
        __atomic_store_n(&w->rc, -2, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t k = begin; k < end; k++) {
        slab_at(&j, k);
        forward_slab(&j, false);
    }
    slab_free(&j);
}

static void grad_side_range(void *ctx, int64_t begin, int64_t end) {
    wino_sides *w = ctx;
    wino_job j = w->base;
    if (!slab_alloc(&j)) {
        __atomic_store_n(&w->rc, -2, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t p = begin; p < end; p++)
        grad_partial(&j, w->base.U, p, w->per_part, false);
    slab_free(&j);
}

/* Rows [begin, end) of the 16 planes (row k * O + o: position k, output channel o) of
 * the weight gradient's first partial sum take the others' rows, in order: each entry is
 * the same sum at every thread count. */
static void sum_partial_rows(void *ctx, int64_t begin, int64_t end) {
    const wino_sides *w = ctx;
    const wino_job *j = &w->base;
    kern_pw_fn add = cai_kern_pw_kernel(KPW_ADD, j->dt);
    size_t part = (size_t)(16 * j->uplane) * j->es;
    for (int64_t r = begin; r < end; r++) {
        char *dst = j->U + (size_t)(r / j->O * j->uplane + r % j->O * j->Cg) * j->es;
        for (int64_t p = 1; p < w->parts; p++)
            add(j->Cg, dst, dst, dst + (size_t)p * part, NULL, 1.0, 0.0);
    }
}

/* Units of work: whole slabs side by side when there are enough of them to go round,
 * else a slab at a time with its stages' items on the pool. */
static bool sides_go_round(int64_t units) {
    return units >= 2 && units >= cai_kern_num_threads();
}

int cai_kern_conv2d_winograd(kern_dtype dt, const kern_conv_geom *g, const void *x,
                             const int64_t *xs, const void *w, int64_t out_channels, double beta,
                             void *y) {
    wino_sides sd = {.rc = 0};
    wino_job *j = &sd.base;
    wino_setup(j, dt, g, x, xs, out_channels);
    j->w = w;
    j->y = y;
    j->beta = beta;
    if (!(j->U = cai_kern_scratch_alloc(16 * (size_t)j->uplane * j->es)))
        return -2;
    cai_kern_parallel_for(j->O, 1, weight_items, j);
    int64_t slabs = slab_count(j);
    if (sides_go_round(slabs)) {
        cai_kern_parallel_for(slabs, 1, forward_side_range, &sd);
    } else if (!slab_alloc(j)) {
        sd.rc = -2;
    } else {
        for (int64_t k = 0; k < slabs; k++) {
            slab_at(j, k);
            forward_slab(j, true);
        }
        slab_free(j);
    }
    cai_kern_scratch_free(j->U);
    return sd.rc;
}

/* The weight gradient adds the slabs' products into partial sums, each over a run of
 * slabs in order, and the partials in order: their count comes from the sizes alone (at
 * most WINO_PARTIALS entries in all), so the bits do not depend on the thread count,
 * whether the partials are made side by side or one after another. */
int cai_kern_conv2d_weight_grad_winograd(kern_dtype dt, const kern_conv_geom *g, const void *x,
                                         const int64_t *xs, const void *gy, int64_t out_channels,
                                         void *dw) {
    wino_sides sd = {.rc = 0};
    wino_job *j = &sd.base;
    wino_setup(j, dt, g, x, xs, out_channels);
    j->gy = gy;
    j->dw = dw;
    int64_t slabs = slab_count(j), part = 16 * j->uplane;
    int64_t most = WINO_PARTIALS / part > 1 ? WINO_PARTIALS / part : 1;
    sd.per_part = (slabs + most - 1) / most;
    int64_t parts = (slabs + sd.per_part - 1) / sd.per_part;
    if (!(j->U = cai_kern_scratch_alloc((size_t)(parts * part) * j->es)))
        return -2;
    if (sides_go_round(parts)) {
        cai_kern_parallel_for(parts, 1, grad_side_range, &sd);
    } else if (!slab_alloc(j)) {
        sd.rc = -2;
    } else { /* a partial at a time, each slab's stages on the pool */
        char *U = j->U;
        for (int64_t p = 0; p < parts; p++)
            grad_partial(j, U, p, sd.per_part, true);
        j->U = U;
        slab_free(j);
    }
    if (sd.rc == 0) {
        sd.parts = parts;
        cai_kern_parallel_for(16 * j->O, 16, sum_partial_rows, &sd);
        cai_kern_parallel_for(j->O, 1, unweight_items, j);
    }
    cai_kern_scratch_free(j->U);
    return sd.rc;
}
