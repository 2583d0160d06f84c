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
#include "kern_blas.h"
#include "kern_internal.h"

#include <string.h>

#define WINO_SLAB       (1 << 18) /* transformed entries (V and M or dY) per slab, about */
#define WINO_TILE_EDGE  512       /* tiles per forward GEMM, at most about */
#define WINO_MIN_CHANNS 16        /* per group, in and out: below it im2col's GEMM wins */
/* Between the 16 planes: a transform writes (or reads) all 16 at once, and planes a
 * multiple of 4 KB apart would fall in one set of the L1 cache and evict each other. */
#define WINO_PLANE_PAD 16
#define WINO_CHUNK     64                   /* tiles of a tile row transformed together */
#define WINO_COLS      (2 * WINO_CHUNK + 2) /* the image columns a chunk reads */

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

/* The sizes every stage shares. */
typedef struct {
    kern_dtype dt;
    size_t es;
    const kern_conv_geom *g;
    int64_t C, O, Cg, Og, G;
    int64_t th, tw, tiles; /* tiles per image: th x tw */
    int64_t S;             /* images per slab */
    int64_t n0, s, nt;     /* this slab: images [n0, n0 + s), nt = s * tiles of them */
    const char *x;
    const int64_t *xs;
    const char *w, *gy;
    char *y, *dw;
    double beta;
    char *V, *M; /* [16][C][T], and [16][O][T] (forward M or the gradient's dY) */
    char *U;     /* [16][O][Cg]: the transformed weight, or the gradient's sums */
    int64_t vplane, mplane, uplane; /* entries from one position k's plane to the next */
    int64_t blocks, edge;           /* the forward GEMMs' blocks of tiles */
} wino_job;

/* The outputs of tile row ty that exist: 2, or 1 in the last row of an odd oh. */
static inline int64_t wino_tile_rows(const wino_job *j, int64_t ty) {
    return j->g->oh - 2 * ty < 2 ? j->g->oh - 2 * ty : 2;
}

/* Where the weight stores the effective tap (a, b): turned 180 degrees with flip. */
static inline int wino_tap(const kern_conv_geom *g, int a, int b) {
    return g->flip ? (2 - a) * 3 + 2 - b : a * 3 + b;
}

/* The typed transforms, once per float dtype. */
#define WT        float
#define WFN(name) name##_f32
#include "kern_conv_wino.inc"
#undef WT
#undef WFN
#define WT        double
#define WFN(name) name##_f64
#include "kern_conv_wino.inc"
#undef WT
#undef WFN

/* The pool's ranges over each stage's items. */
static void input_items(void *ctx, int64_t begin, int64_t end) {
    const wino_job *j = ctx;
    for (int64_t it = begin; it < end; it++)
        (j->dt == KERN_F32 ? input_tiles_f32 : input_tiles_f64)(j, it / j->C, it % j->C);
}

static void output_items(void *ctx, int64_t begin, int64_t end) {
    const wino_job *j = ctx;
    for (int64_t it = begin; it < end; it++)
        (j->dt == KERN_F32 ? output_tiles_f32 : output_tiles_f64)(j, it / j->O, it % j->O);
}

static void grad_items(void *ctx, int64_t begin, int64_t end) {
    const wino_job *j = ctx;
    for (int64_t it = begin; it < end; it++)
        (j->dt == KERN_F32 ? grad_tiles_f32 : grad_tiles_f64)(j, it / j->O, it % j->O);
}

static void weight_items(void *ctx, int64_t begin, int64_t end) {
    const wino_job *j = ctx;
    for (int64_t o = begin; o < end; o++)
        (j->dt == KERN_F32 ? weight_transform_f32 : weight_transform_f64)(j, o);
}

static void unweight_items(void *ctx, int64_t begin, int64_t end) {
    const wino_job *j = ctx;
    for (int64_t o = begin; o < end; o++)
        (j->dt == KERN_F32 ? weight_untransform_f32 : weight_untransform_f64)(j, o);
}

/* One single-threaded row-major GEMM: C = A @ op(B) + beta * C. */
static void gemm1(kern_dtype dt, bool tb, int64_t M, int64_t N, int64_t K, const void *a,
                  int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    enum CBLAS_TRANSPOSE t = tb ? CblasTrans : CblasNoTrans;
    if (dt == KERN_F32)
        kern_cblas_sgemm(CblasRowMajor, CblasNoTrans, t, (int)M, (int)N, (int)K, 1.0f,
                         (const float *)a, (int)lda, (const float *)b, (int)ldb, (float)beta,
                         (float *)c, (int)ldc);
    else
        kern_cblas_dgemm(CblasRowMajor, CblasNoTrans, t, (int)M, (int)N, (int)K, 1.0,
                         (const double *)a, (int)lda, (const double *)b, (int)ldb, beta,
                         (double *)c, (int)ldc);
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
        gemm1(j->dt, false, j->Og, n, j->Cg, a, j->Cg, b, j->nt, 0.0, c, j->nt);
    }
}

/* Gradient GEMMs: item (k, group): U_k[group] += dY_k[group] @ V_k[group]^T, over the
 * slab's tiles. */
static void grad_gemms(void *ctx, int64_t begin, int64_t end) {
    const wino_job *j = ctx;
    size_t es = j->es;
    for (int64_t it = begin; it < end; it++) {
        int64_t k = it / j->G, grp = it % j->G;
        const char *a = j->M + (size_t)(k * j->mplane + grp * j->Og * j->nt) * es;
        const char *b = j->V + (size_t)(k * j->vplane + grp * j->Cg * j->nt) * es;
        char *c = j->U + (size_t)(k * j->uplane + grp * j->Og * j->Cg) * es;
        gemm1(j->dt, true, j->Og, j->Cg, j->nt, a, j->nt, b, j->nt, 1.0, c, j->Cg);
    }
}

/* Sizes, the slab (images whose V and M together fill about WINO_SLAB entries) and its
 * scratch. Returns false when the scratch cannot be had. */
static bool wino_setup(wino_job *j, kern_dtype dt, const kern_conv_geom *g, const void *x,
                       const int64_t *xs, int64_t out_channels) {
    cai_kern_blas_init(); /* OpenBLAS on one thread: the GEMMs call it directly */
    *j = (wino_job){.dt = dt, .es = cai_kern_dtype_size(dt), .g = g, .x = x, .xs = xs};
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
    size_t T = (size_t)(j->S * j->tiles);
    j->vplane = j->C * (int64_t)T + WINO_PLANE_PAD;
    j->mplane = j->O * (int64_t)T + WINO_PLANE_PAD;
    j->uplane = j->O * j->Cg + WINO_PLANE_PAD;
    j->V = cai_kern_scratch_alloc(16 * (size_t)j->vplane * j->es);
    j->M = cai_kern_scratch_alloc(16 * (size_t)j->mplane * j->es);
    j->U = cai_kern_scratch_alloc(16 * (size_t)j->uplane * j->es);
    return j->V && j->M && j->U;
}

static void wino_free(wino_job *j) {
    cai_kern_scratch_free(j->V);
    cai_kern_scratch_free(j->M);
    cai_kern_scratch_free(j->U);
}

static void next_slab(wino_job *j) {
    j->s = j->g->n - j->n0 < j->S ? j->g->n - j->n0 : j->S;
    j->nt = j->s * j->tiles;
}

int cai_kern_conv2d_winograd(kern_dtype dt, const kern_conv_geom *g, const void *x,
                             const int64_t *xs, const void *w, int64_t out_channels, double beta,
                             void *y) {
    wino_job j;
    if (!wino_setup(&j, dt, g, x, xs, out_channels)) {
        wino_free(&j);
        return -2;
    }
    j.w = w;
    j.y = y;
    j.beta = beta;
    cai_kern_parallel_for(j.O, 1, weight_items, &j);
    for (j.n0 = 0; j.n0 < g->n; j.n0 += j.S) {
        next_slab(&j);
        j.blocks = (j.nt + WINO_TILE_EDGE - 1) / WINO_TILE_EDGE;
        j.edge = (j.nt + j.blocks - 1) / j.blocks;
        cai_kern_parallel_for(j.s * j.C, 1, input_items, &j);
        cai_kern_parallel_for(16 * j.G * j.blocks, 1, forward_gemms, &j);
        cai_kern_parallel_for(j.s * j.O, 1, output_items, &j);
    }
    wino_free(&j);
    return 0;
}

int cai_kern_conv2d_weight_grad_winograd(kern_dtype dt, const kern_conv_geom *g, const void *x,
                                         const int64_t *xs, const void *gy, int64_t out_channels,
                                         void *dw) {
    wino_job j;
    if (!wino_setup(&j, dt, g, x, xs, out_channels)) {
        wino_free(&j);
        return -2;
    }
    j.gy = gy;
    j.dw = dw;
    memset(j.U, 0, 16 * (size_t)j.uplane * j.es);
    for (j.n0 = 0; j.n0 < g->n; j.n0 += j.S) {
        next_slab(&j);
        cai_kern_parallel_for(j.s * j.C, 1, input_items, &j);
        cai_kern_parallel_for(j.s * j.O, 1, grad_items, &j);
        cai_kern_parallel_for(16 * j.G, 1, grad_gemms, &j);
    }
    cai_kern_parallel_for(j.O, 1, unweight_items, &j);
    wino_free(&j);
    return 0;
}
