/* kern_conv_gemm.c - conv2d and its weight gradient as im2col + GEMM, a slab of images at
 * a time.
 *
 * A whole batch's columns are kh*kw times the input (9x for a 3x3 kernel: 9.4 MB for a
 * [16, 64, 16, 16] batch), so made at once they leave the cache before the GEMM reads
 * them, and writing them costs about as much again as reading them. A slab's columns
 * (about KERN_CONV_SLAB entries) stay in cache between the two.
 *
 * The GEMMs are single-threaded BLAS calls, spread over the pool as items whose sizes
 * come from the convolution alone: OpenBLAS rounds a product differently when the same
 * matrix is cut into other column blocks, so cutting by the thread count (as
 * cai_kern_gemm's tiles do) would change the bits from one thread count to another. Here
 * every element is the same sum in the same order at every thread count: conv2d's items
 * are (image, group, block of output positions). The weight gradient's are slabs side by
 * side, a partial sum each, added in slab order after, when the partials are small (slab
 * sizes from the sizes alone); else (group, block of its columns), each adding the images'
 * products in image order. A 1x1 kernel at unit strides without padding needs no columns:
 * the images are their own.
 */
#include "kern_blas.h"
#include "kern_internal.h"

#include <string.h>

#define KERN_CONV_SLAB     (1 << 18) /* column entries per slab: 1 MB of float32 */
#define KERN_CONV_Y_EDGE   256       /* output positions per conv2d GEMM, at most about */
#define KERN_CONV_PARTIALS (1 << 20) /* entries of the weight gradient's partials, at most */
#define KERN_CONV_W_BLOCKS 4         /* column blocks of the weight gradient, at most */

/* The sizes of a convolution's GEMMs and its slab: K the columns' rows per group, L the
 * output positions, M the output channels per group. */
typedef struct {
    kern_dtype dt;
    size_t es;
    const kern_conv_geom *g;
    int64_t G, K, L, M, O;
    int64_t n0, s;        /* the slab: images [n0, n0 + s) */
    int64_t blocks, edge; /* the GEMMs' column blocks: of y's positions, or of dw's columns */
    double beta;
    const char *w, *gy;
    char *cols, *y, *dw;
    bool direct;    /* a 1x1 kernel over whole planes: the image is its own columns */
    const char *cv; /* the slab's columns: image i's at cv + i * cv_img, [groups, K, L] */
    int64_t cv_img;
} conv_job;

/* Whether x's images are their own columns: a 1x1 kernel at unit strides without padding,
 * each image's planes one after another ([C, H*W] rows with unit stride). */
static bool conv_direct(const kern_conv_geom *g, const int64_t *xs) {
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0 &&
           g->ph_end == 0 && g->pw_end == 0 && g->oh == g->h && g->ow == g->w && xs[3] == 1 &&
           xs[2] == g->w && xs[1] == g->h * g->w;
}

/* Scratch for s images' columns, or none (NULL, and true) when the images are their own. */
static bool cols_alloc(conv_job *j, int64_t s) {
    j->cols = NULL;
    if (j->direct)
        return true;
    j->cols = cai_kern_scratch_alloc((size_t)(s * j->G * j->K * j->L) * j->es);
    return j->cols != NULL;
}

static bool conv_sizes(kern_dtype dt, const kern_conv_geom *g, int64_t out_channels, conv_job *j) {
    cai_kern_blas_init(); /* OpenBLAS on one thread: the GEMMs below call it directly */
    *j = (conv_job){.dt = dt, .g = g, .G = g->groups, .O = out_channels};
    if ((dt != KERN_F32 && dt != KERN_F64) || g->groups < 1 || out_channels % g->groups != 0 ||
        g->c % g->groups != 0)
        return false;
    j->es = cai_kern_dtype_size(dt);
    j->K = g->c / g->groups * g->kh * g->kw;
    j->L = g->oh * g->ow;
    j->M = out_channels / g->groups;
    return j->K <= INT32_MAX && j->L <= INT32_MAX && j->M <= INT32_MAX &&
           out_channels * j->L <= INT32_MAX;
}

/* Images per slab: enough that the slab's columns fill about KERN_CONV_SLAB entries, and
 * at least `want` where that stays within KERN_CONV_SLAB entries per thread (so more
 * threads never cost more than a slab each); at least one, at most the batch. */
static int64_t conv_slab(const conv_job *j, int64_t want) {
    int64_t per = j->G * j->K * j->L;
    if (per <= 0)
        return j->g->n > 0 ? j->g->n : 1;
    int64_t s = KERN_CONV_SLAB / per, most = KERN_CONV_SLAB * cai_kern_num_threads() / per;
    want = want < most ? want : most;
    s = s > want ? s : want;
    return s < 1 ? 1 : s > j->g->n ? j->g->n : s;
}

/* The columns of the slab's images, [s, groups, K, L]: x itself when it is its own
 * columns (conv_direct), else made in j->cols. */
static int slab_cols(conv_job *j, const char *x, const int64_t *xs) {
    const char *first = x + (size_t)(j->n0 * xs[0]) * j->es;
    if (j->direct) {
        j->cv = first;
        j->cv_img = xs[0];
        return 0;
    }
    kern_conv_geom sg = *j->g;
    sg.n = j->s;
    int64_t cs[4] = {j->G * j->K * j->L, j->K * j->L, j->L, 1};
    j->cv = j->cols;
    j->cv_img = j->G * j->K * j->L;
    return cai_kern_im2col(j->dt, &sg, first, xs, j->cols, cs);
}

/* Items of the slab: (image, group, block of output positions); each is one GEMM, the
 * same call at every thread count. */
static void conv_items(void *ctx, int64_t begin, int64_t end) {
    const conv_job *j = ctx;
    for (int64_t it = begin; it < end; it++) {
        int64_t i = it / (j->G * j->blocks), grp = it / j->blocks % j->G,
                lo = it % j->blocks * j->edge;
        int64_t n = j->L - lo < j->edge ? j->L - lo : j->edge;
        const char *a = j->w + (size_t)(grp * j->M * j->K) * j->es;
        const char *b = j->cv + (size_t)(i * j->cv_img + grp * j->K * j->L + lo) * j->es;
        char *c = j->y + (size_t)(((j->n0 + i) * j->O + grp * j->M) * j->L + lo) * j->es;
        cai_kern_gemm1(j->dt, false, j->M, n, j->K, a, j->K, b, j->L, j->beta, c, j->L);
    }
}

int cai_kern_conv2d(kern_dtype dt, const kern_conv_geom *g, const void *x, const int64_t *xs,
                    const void *w, int64_t out_channels, double beta, void *y) {
    conv_job j;
    if (!conv_sizes(dt, g, out_channels, &j))
        return -1;
    j.direct = conv_direct(g, xs);
    if (g->n * out_channels * j.L == 0)
        return 0;
    if (cai_kern_conv_geom_ok(g) && cai_kern_conv_winograd_fits(dt, g, out_channels))
        return cai_kern_conv2d_winograd(dt, g, x, xs, w, out_channels, beta, y);
    if (j.K == 0) { /* an empty sum: beta * y */
        if (beta == 0.0)
            memset(y, 0, (size_t)(g->n * out_channels * j.L) * j.es);
        return 0;
    }
    j.blocks = (j.L + KERN_CONV_Y_EDGE - 1) / KERN_CONV_Y_EDGE;
    j.edge = (j.L + j.blocks - 1) / j.blocks;
    j.beta = beta;
    j.w = w;
    j.y = y;
    /* a slab gives every thread two items or more where the batch allows, and a
     * multiple of the thread count where it has more items than threads (3 items on 2
     * threads take as long as 4) */
    int64_t per_image = j.G * j.blocks, threads = cai_kern_num_threads(), want = 2 * threads;
    int64_t S = conv_slab(&j, (want + per_image - 1) / per_image);
    if (S * per_image > threads && S * per_image % threads != 0 && S > 1) {
        int64_t items = S * per_image - S * per_image % threads;
        S = items / per_image > 0 ? items / per_image : 1;
    }
    if (!cols_alloc(&j, S))
        return -2;
    int rc = 0;
    for (j.n0 = 0; j.n0 < g->n && rc == 0; j.n0 += S) {
        j.s = g->n - j.n0 < S ? g->n - j.n0 : S;
        if ((rc = slab_cols(&j, x, xs)) == 0)
            cai_kern_parallel_for(j.s * per_image, 1, conv_items, &j);
    }
    cai_kern_scratch_free(j.cols);
    return rc;
}

static bool gemm_sums_enabled = true;

void cai_kern_conv_set_gemm_sums(bool on) {
    gemm_sums_enabled = on;
}

/* Whether a weight gradient's per-image GEMMs (M channels by n taps over L positions)
 * go to cai_kern_gemm_nt_sum_f32 rather than BLAS: few channels or taps, which leave
 * OpenBLAS's register blocks mostly empty, over enough positions to fill its vectors.
 * On a Zen 3 core, 1 thread: [6 x 25] over 784 positions, 32 images (LeNet's first layer)
 * 142 us against OpenBLAS's 357; [64 x 27] over 256, 1.3x faster; but 2x slower than
 * OpenBLAS on [16 x 150] over 100 and [32 x 288] over 256. */
static bool wgrad_by_sums(const conv_job *j, int64_t n) {
    return gemm_sums_enabled && j->dt == KERN_F32 && (j->M < 32 || n < 32) && j->L >= 256;
}

/* Items of the slab: (group, block of dw's columns), each adding the slab's images'
 * products in image order: the blocks are fixed by the sizes, so every element of dw is
 * the same sum in the same order at every thread count. */
static void wgrad_items(void *ctx, int64_t begin, int64_t end) {
    const conv_job *j = ctx;
    for (int64_t it = begin; it < end; it++) {
        int64_t grp = it / j->blocks, lo = it % j->blocks * j->edge;
        int64_t n = j->K - lo < j->edge ? j->K - lo : j->edge;
        char *c = j->dw + (size_t)(grp * j->M * j->K + lo) * j->es;
        if (wgrad_by_sums(j, n)) {
            const char *a = j->gy + (size_t)((j->n0 * j->O + grp * j->M) * j->L) * j->es;
            const char *b = j->cv + (size_t)((grp * j->K + lo) * j->L) * j->es;
            cai_kern_gemm_nt_sum_f32(j->M, n, j->L, j->s, (const float *)a, j->L, j->O * j->L,
                                     (const float *)b, j->L, j->cv_img, (float *)c, j->K);
            continue;
        }
        for (int64_t i = 0; i < j->s; i++) {
            const char *a = j->gy + (size_t)(((j->n0 + i) * j->O + grp * j->M) * j->L) * j->es;
            const char *b = j->cv + (size_t)(i * j->cv_img + (grp * j->K + lo) * j->L) * j->es;
            cai_kern_gemm1(j->dt, true, j->M, n, j->L, a, j->L, b, j->L, 1.0, c, j->K);
        }
    }
}

/* The image-parallel weight gradient: slab k's products summed into its own partial
 * (parts + k * O*K), slabs side by side, each worker with its own columns. */
typedef struct {
    conv_job base;
    const char *x;
    const int64_t *xs;
    int64_t S, slabs;
    char *parts;
    int rc; /* the first failure, set atomically */
} wgrad_slabs_job;

static void wgrad_slab_range(void *ctx, int64_t begin, int64_t end) {
    wgrad_slabs_job *w = ctx;
    conv_job j = w->base;
    size_t part = (size_t)(j.O * j.K) * j.es;
    if (!cols_alloc(&j, w->S)) {
        __atomic_store_n(&w->rc, -2, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t k = begin; k < end; k++) {
        j.n0 = k * w->S;
        j.s = j.g->n - j.n0 < w->S ? j.g->n - j.n0 : w->S;
        j.dw = w->parts + (size_t)k * part;
        memset(j.dw, 0, part);
        int rc = slab_cols(&j, w->x, w->xs);
        if (rc) {
            __atomic_store_n(&w->rc, rc, __ATOMIC_RELAXED);
            break;
        }
        wgrad_items(&j, 0, j.G); /* j.blocks 1: whole rows of dw */
    }
    cai_kern_scratch_free(j.cols);
}

typedef struct {
    kern_dtype dt;
    int64_t n, slabs;
    const char *parts;
    char *out;
} parts_sum_job;

#define PARTS_BLOCK 1024 /* entries of out per unit of the sum's work */

/* out = the partials added in slab order, over blocks of entries [begin, end) * PARTS_BLOCK:
 * partial by partial, each a contiguous run through the ISA's vector add (element by
 * element, the strided reads of 16 partials 150 KB apart missed the cache). Every entry
 * is the same sum in the same order. */
static void parts_sum_range(void *ctx, int64_t begin, int64_t end) {
    const parts_sum_job *p = ctx;
    int64_t lo = begin * PARTS_BLOCK, hi = end * PARTS_BLOCK < p->n ? end * PARTS_BLOCK : p->n;
    size_t es = cai_kern_dtype_size(p->dt);
    char *out = p->out + (size_t)lo * es;
    memcpy(out, p->parts + (size_t)lo * es, (size_t)(hi - lo) * es);
    kern_pw_fn add = cai_kern_pw_kernel(KPW_ADD, p->dt); /* the ISA's vector add */
    for (int64_t k = 1; k < p->slabs; k++)
        add(hi - lo, out, out, p->parts + (size_t)(k * p->n + lo) * es, NULL, 1.0, 0.0);
}

/* Slabs side by side when the weight gradient is small: a partial per slab of about
 * KERN_CONV_SLAB / 4 column entries, the partials (at most KERN_CONV_PARTIALS entries in
 * all) added in slab order after. Every count comes from the sizes: the same bits at
 * every thread count. Returns 1 when the sizes call for the other scheme. */
static int wgrad_by_slabs(conv_job *j, const void *x, const int64_t *xs) {
    int64_t per = j->G * j->K * j->L, S = per > 0 ? KERN_CONV_SLAB / 4 / per : 1;
    S = S < 1 ? 1 : S > j->g->n ? j->g->n : S;
    int64_t slabs = (j->g->n + S - 1) / S, n = j->O * j->K;
    if (slabs < 2 || slabs * n > KERN_CONV_PARTIALS)
        return 1;
    wgrad_slabs_job w = {.base = *j, .x = x, .xs = xs, .S = S, .slabs = slabs};
    w.base.blocks = 1;
    w.base.edge = j->K;
    if (!(w.parts = cai_kern_scratch_alloc((size_t)(slabs * n) * j->es)))
        return -2;
    cai_kern_parallel_for(slabs, 1, wgrad_slab_range, &w);
    if (w.rc == 0) {
        parts_sum_job p = {j->dt, n, slabs, w.parts, j->dw};
        int64_t blocks = (n + PARTS_BLOCK - 1) / PARTS_BLOCK;
        cai_kern_parallel_for(blocks, KERN_GRAIN / (PARTS_BLOCK * slabs) + 1, parts_sum_range, &p);
    }
    cai_kern_scratch_free(w.parts);
    return w.rc;
}

int cai_kern_conv2d_weight_grad(kern_dtype dt, const kern_conv_geom *g, const void *x,
                                const int64_t *xs, const void *gy, int64_t out_channels, void *dw) {
    conv_job j;
    if (!conv_sizes(dt, g, out_channels, &j))
        return -1;
    j.direct = conv_direct(g, xs);
    memset(dw, 0, (size_t)(out_channels * j.K) * j.es);
    if (g->n * j.L * j.K * j.M == 0)
        return 0;
    if (cai_kern_conv_geom_ok(g) && cai_kern_conv_winograd_fits(dt, g, out_channels))
        return cai_kern_conv2d_weight_grad_winograd(dt, g, x, xs, gy, out_channels, dw);
    j.gy = gy;
    j.dw = dw;
    int rc = wgrad_by_slabs(&j, x, xs);
    if (rc <= 0)
        return rc;
    /* else slabs one after another, their GEMMs side by side over blocks of dw's columns */
    j.blocks = j.K / 32 < KERN_CONV_W_BLOCKS ? (j.K / 32 > 1 ? j.K / 32 : 1) : KERN_CONV_W_BLOCKS;
    j.edge = (j.K + j.blocks - 1) / j.blocks;
    j.blocks = (j.K + j.edge - 1) / j.edge;
    int64_t S = conv_slab(&j, 1);
    if (!cols_alloc(&j, S))
        return -2;
    rc = 0;
    for (j.n0 = 0; j.n0 < g->n && rc == 0; j.n0 += S) {
        j.s = g->n - j.n0 < S ? g->n - j.n0 : S;
        if ((rc = slab_cols(&j, x, xs)) == 0)
            cai_kern_parallel_for(j.G * j.blocks, 1, wgrad_items, &j);
    }
    cai_kern_scratch_free(j.cols);
    return rc;
}
