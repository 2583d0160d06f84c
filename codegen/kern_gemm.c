/* kern_gemm.c - batched strided GEMM on cblas (row-major sgemm/dgemm).
 *
 * Each operand reaches cblas as-is when one of its strides is 1 (flipping the transpose
 * flag when that is the row stride); only an operand with neither is packed, once for the
 * whole batch, into scratch memory.
 *
 * One pool (kern_blas.c): OpenBLAS runs single-threaded except for a big lone GEMM when
 * its threads callback hands its jobs to cagrad's pool. Otherwise cagrad's pool runs the
 * GEMMs in parallel itself: batches of small GEMMs side by side, an item each; a big GEMM
 * cut into tiles along its longer side of C (rows or columns, multiples of 16), one
 * single-threaded cblas call each. Neither cuts K, but OpenBLAS's kernels round an element
 * by where it falls in their register blocks, and its threaded driver differently again:
 * tiles, OpenBLAS's threads and one call can differ in the last bits. So which way a GEMM
 * goes depends on the sizes and the thread count alone (cai_kern_gemm_blas_threaded), never
 * on whether the pool is free, and a result is the same bits at a given thread count. (A
 * GEMM for OpenBLAS's threads that finds the pool busy, held by another thread's job or
 * called inside one, has kern_blas.c run OpenBLAS's jobs on threads made for the call. The
 * compiled plan keeps such GEMMs out of its side-by-side runs, graph/plan_parallel.c.)
 */
#include <limits.h>

#include "kern_blas.h"
#include "kern_internal.h"

#define KERN_GEMM_SMALL      (64.0 * 64.0 * 64.0) /* below this M*N*K a tile is not worth it */
#define KERN_GEMM_TILE_ALIGN 16                   /* tile edges, in rows or columns of C */
#define KERN_GEMM_TILE_MIN   128 /* thinner tiles: OpenBLAS's threads instead, where it has them */
#define KERN_GEMM_HUGE       (1024.0 * 1024.0 * 1024.0) /* M*N*K: OpenBLAS's threads always */

typedef struct {
    const char *data; /* batch item 0 */
    int64_t bs;       /* elements between batch items */
    bool trans;       /* the cblas transpose flag */
    int64_t ld;
    void *packed; /* scratch buffer to free, if any */
} kern_gemm_opnd;

typedef struct {
    kern_dtype dt;
    int64_t M, N, K, ldc, bsC;
    double alpha, beta;
    kern_gemm_opnd a, b;
    char *c;
    int64_t tiles;   /* per batch item */
    bool split_rows; /* tiles cut M (else N) */
    int64_t edge;    /* rows or columns per tile (the last may have fewer) */
    bool shared_c;   /* bsC 0 with a batch: the items accumulate into one C, in order */
    int64_t batch;
} kern_gemm_job;

/* How cblas takes a rows x cols matrix with strides (rs, cs): row-major as it is (0),
 * column-major with the transpose flag flipped (1), or not at all (-1: it is packed). A
 * dim of size 1 has no meaningful stride, so it never forces a copy. */
static int kern_gemm_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
    if ((cs == 1 || cols == 1) && (rows == 1 || rs >= cols) && rs <= INT_MAX)
        return 0;
    if ((rs == 1 || rows == 1) && (cols == 1 || cs >= rows) && cs <= INT_MAX)
        return 1;
    return -1;
}

bool cai_kern_gemm_unpacked(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
    return kern_gemm_layout(rows, cols, rs, cs) >= 0;
}

/* Describes op(X), a rows x cols matrix with strides (rs, cs), to cblas. Returns false if
 * X must be packed. */
static bool kern_gemm_direct(int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                             kern_gemm_opnd *o) {
    int layout = kern_gemm_layout(rows, cols, rs, cs);
    if (layout == 0) {
        o->trans = false;
        o->ld = rows == 1 ? cols : rs;
    } else if (layout == 1) {
        o->trans = true;
        o->ld = cols == 1 ? rows : cs;
    }
    return layout >= 0;
}

static int kern_gemm_prep(kern_dtype dt, int64_t batch, int64_t rows, int64_t cols, kern_mat X,
                          bool trans, kern_gemm_opnd *o) {
    int64_t rs = trans ? X.cs : X.rs, cs = trans ? X.rs : X.cs;
    o->data = X.data;
    o->bs = X.bs;
    o->packed = NULL;
    if (kern_gemm_direct(rows, cols, rs, cs, o))
        return 0;
    int64_t nb = X.bs == 0 ? 1 : batch, sz = rows * cols;
    o->packed = cai_kern_scratch_alloc((size_t)(nb * sz) * cai_kern_dtype_size(dt));
    if (!o->packed)
        return -2;
    int64_t shape[3] = {nb, rows, cols}, ostr[3] = {sz, cols, 1};
    kern_src src = {.data = X.data, .strides = {X.bs, rs, cs}};
    cai_kern_pointwise(KPW_COPY, dt, dt, 3, shape, o->packed, ostr, &src, 0, 0);
    o->data = o->packed;
    o->bs = X.bs == 0 ? 0 : sz;
    o->trans = false;
    o->ld = cols;
    return 0;
}

/* Tile t of batch item i. A tile of rows [lo, lo + len) takes those rows of op(A) and of
 * C; a tile of columns those columns of op(B) and of C. */
static void kern_gemm_one(const kern_gemm_job *j, int64_t i, int64_t t) {
    int64_t esz = (int64_t)cai_kern_dtype_size(j->dt);
    int64_t lo = t * j->edge, dim = j->split_rows ? j->M : j->N;
    int64_t len = dim - lo < j->edge ? dim - lo : j->edge;
    const char *a = j->a.data + i * j->a.bs * esz;
    const char *b = j->b.data + i * j->b.bs * esz;
    char *c = j->c + i * j->bsC * esz;
    if (j->split_rows) {
        a += (j->a.trans ? lo : lo * j->a.ld) * esz;
        c += lo * j->ldc * esz;
    } else {
        b += (j->b.trans ? lo * j->b.ld : lo) * esz;
        c += lo * esz;
    }
    enum CBLAS_TRANSPOSE ta = j->a.trans ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = j->b.trans ? CblasTrans : CblasNoTrans;
    int M = (int)(j->split_rows ? len : j->M), N = (int)(j->split_rows ? j->N : len);
    int K = (int)j->K;
    int lda = (int)j->a.ld, ldb = (int)j->b.ld, ldc = (int)j->ldc;
    if (j->dt == KERN_F32)
        kern_cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, (float)j->alpha, (const float *)a, lda,
                         (const float *)b, ldb, (float)j->beta, (float *)c, ldc);
    else
        kern_cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, j->alpha, (const double *)a, lda,
                         (const double *)b, ldb, j->beta, (double *)c, ldc);
}

/* How many tiles each GEMM is cut into for this many threads: one per thread for a GEMM
 * big enough that each tile is at least KERN_GEMM_SMALL, along the longer side of C; one
 * when the batch already gives every thread work, or when the items share C (bsC 0: they
 * accumulate). */
static void kern_gemm_tiles(kern_gemm_job *j, int64_t batch, int threads) {
    j->batch = batch;
    j->shared_c = j->bsC == 0 && batch > 1;
    int64_t side_by_side = j->shared_c ? 1 : batch;   /* items that can run at once */
    int64_t per_item = side_by_side == 1 ? batch : 1; /* a shared C: its items in turn */
    double mnk = (double)j->M * (double)j->N * (double)j->K * (double)per_item;
    j->split_rows = j->M >= j->N;
    int64_t dim = j->split_rows ? j->M : j->N;
    int64_t want = threads / (side_by_side < threads ? side_by_side : threads);
    if (want > (int64_t)(mnk / KERN_GEMM_SMALL))
        want = (int64_t)(mnk / KERN_GEMM_SMALL);
    if (want > dim / KERN_GEMM_TILE_ALIGN)
        want = dim / KERN_GEMM_TILE_ALIGN;
    if (want < 2) {
        j->tiles = 1;
        j->edge = dim;
        return;
    }
    int64_t edge = (dim + want - 1) / want;
    edge = (edge + KERN_GEMM_TILE_ALIGN - 1) / KERN_GEMM_TILE_ALIGN * KERN_GEMM_TILE_ALIGN;
    j->edge = edge;
    j->tiles = (dim + edge - 1) / edge;
}

/* Work item w: with a shared C, tile w of every item in batch order (a tile's sums stay in
 * order, tiles run side by side); else tile w % tiles of item w / tiles. */
static void kern_gemm_range(void *ctx, int64_t begin, int64_t end) {
    const kern_gemm_job *j = ctx;
    for (int64_t w = begin; w < end; w++) {
        if (j->shared_c)
            for (int64_t i = 0; i < j->batch; i++)
                kern_gemm_one(j, i, w);
        else
            kern_gemm_one(j, w / j->tiles, w % j->tiles);
    }
}

/* K == 0: C = beta * C, where beta == 0 overwrites (even NaN), as BLAS does. */
static void kern_gemm_scale(const kern_gemm_job *j, int64_t batch) {
    for (int64_t i = 0; i < batch; i++)
        for (int64_t r = 0; r < j->M; r++) {
            int64_t off = i * j->bsC + r * j->ldc;
            for (int64_t k = 0; k < j->N; k++) {
                if (j->dt == KERN_F32) {
                    float *c = (float *)j->c + off + k;
                    *c = j->beta == 0 ? 0.0f : (float)j->beta * *c;
                } else {
                    double *c = (double *)j->c + off + k;
                    *c = j->beta == 0 ? 0.0 : j->beta * *c;
                }
            }
        }
}

/* OpenBLAS threads a lone GEMM itself, sharing its packed panels across the threads, where
 * tiles would be thin: each tile packs the whole of the other operand again, a cost of
 * about one part in the tile's length of its work, which tiles of 128 rows or columns or
 * more keep small. Past KERN_GEMM_HUGE (w6's GEMMs) OpenBLAS threads it at any thread
 * count, as measured on 16 cores. Tiles otherwise, which the compiled plan can run side by
 * side with other steps (graph/plan_parallel.c runs a plan with a GEMM for OpenBLAS's
 * threads in order). On 2 cores w3's GEMMs are tiles by this rule: in an A/B of
 * alternating processes (not the benchmark harness), its compiled backward took 3.8 ms
 * against 4.4 ms with them on OpenBLAS's threads and the plan in order. */
bool cai_kern_gemm_blas_threaded(int64_t batch, int64_t M, int64_t N, int64_t K) {
    double mnk = (double)M * (double)N * (double)K;
    if (batch != 1 || !cai_kern_blas_threads_gemm(mnk))
        return false;
    int64_t longer = M > N ? M : N, threads = cai_kern_num_threads();
    return mnk >= KERN_GEMM_HUGE || (longer + threads - 1) / threads < KERN_GEMM_TILE_MIN;
}

int cai_kern_gemm(kern_dtype dt, int64_t batch, int64_t M, int64_t N, int64_t K, double alpha,
                  kern_mat A, bool transA, kern_mat B, bool transB, double beta, void *C,
                  int64_t ldc, int64_t bsC) {
    if ((dt != KERN_F32 && dt != KERN_F64) || batch < 0 || M < 0 || N < 0 || K < 0)
        return -1;
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX || ldc > INT_MAX)
        return -1;
    if (N == 1 && M > 1 && ldc == 1) {
        /* A column vector C = op(A) op(B) is also the row vector C^T = op(B)^T op(A)^T,
         * with the same memory. OpenBLAS hands either to a GEMV whose kernel sums in its
         * own order (gemv_t blocks of partial sums, gemv_n one sum per entry), so the two
         * orientations of one product could differ in their last bits: a compiled
         * backward that folds a transpose into its GEMM would not match the eager one.
         * Every vector output takes the row form. */
        kern_mat t = A;
        A = B;
        B = t;
        bool tt = transA;
        transA = !transB;
        transB = !tt;
        N = M;
        M = 1;
    }
    if (M == 1 && ldc < N)
        ldc = N; /* one row: its stride is never used */
    if (ldc < N || ldc < 1)
        return -1;
    if (batch == 0 || M == 0 || N == 0)
        return 0;
    kern_gemm_job j = {.dt = dt,
                       .M = M,
                       .N = N,
                       .K = K,
                       .ldc = ldc,
                       .bsC = bsC,
                       .alpha = alpha,
                       .beta = beta,
                       .c = C};
    if (K == 0) {
        kern_gemm_scale(&j, batch);
        return 0;
    }
    int rc = kern_gemm_prep(dt, batch, M, K, A, transA, &j.a);
    if (rc == 0)
        rc = kern_gemm_prep(dt, batch, K, N, B, transB, &j.b);
    double mnk = (double)M * (double)N * (double)K;
    if (rc == 0)
        cai_kern_blas_init();
    if (rc == 0 && cai_kern_gemm_blas_threaded(batch, M, N, K)) {
        kern_gemm_tiles(&j, batch, 1); /* whole: OpenBLAS splits it on the pool */
        cai_kern_blas_threaded_begin();
        kern_gemm_range(&j, 0, 1);
        cai_kern_blas_threaded_end();
    } else if (rc == 0) {
        kern_gemm_tiles(&j, batch, cai_kern_num_threads());
        int64_t items = j.shared_c ? j.tiles : batch * j.tiles;
        /* small GEMMs: several to an item of work */
        int64_t grain =
            !j.shared_c && mnk < KERN_GEMM_SMALL ? (int64_t)(KERN_GEMM_SMALL / mnk) / 4 + 1 : 1;
        cai_kern_parallel_for(items, grain, kern_gemm_range, &j);
    }
    cai_kern_scratch_free(j.a.packed);
    cai_kern_scratch_free(j.b.packed);
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * Batch dims: cai_kern_gemm_nd
 */

/* Batch dims without size-1 dims, neighbours merged where all three operands step
 * through them uniformly; sa, sb, sc are A's, B's and C's strides per merged dim. */
typedef struct {
    int n;
    int64_t size[KERN_MAX_DIMS], sa[KERN_MAX_DIMS], sb[KERN_MAX_DIMS], sc[KERN_MAX_DIMS];
} kern_batch_dims;

static void kern_batch_collapse(int nb, const int64_t *bshape, const kern_mat_nd *A,
                                const kern_mat_nd *B, int64_t mn, kern_batch_dims *bd) {
    int64_t sc[KERN_MAX_DIMS], s = mn;
    for (int i = nb - 1; i >= 0; i--) {
        sc[i] = s;
        s *= bshape[i];
    }
    bd->n = 0;
    for (int i = 0; i < nb; i++) {
        if (bshape[i] == 1)
            continue;
        int k = bd->n - 1;
        bool merge = k >= 0 && bd->sa[k] == A->bs[i] * bshape[i] &&
                     bd->sb[k] == B->bs[i] * bshape[i] && bd->sc[k] == sc[i] * bshape[i];
        if (!merge)
            k = bd->n++;
        bd->size[k] = merge ? bd->size[k] * bshape[i] : bshape[i];
        bd->sa[k] = A->bs[i];
        bd->sb[k] = B->bs[i];
        bd->sc[k] = sc[i];
    }
}

int cai_kern_gemm_nd(kern_dtype dt, int nb, const int64_t *bshape, int64_t M, int64_t N, int64_t K,
                     const kern_mat_nd *A, bool transA, const kern_mat_nd *B, bool transB,
                     double beta, void *C) {
    kern_batch_dims bd;
    kern_batch_collapse(nb, bshape, A, B, M * N, &bd);
    int64_t es = (int64_t)cai_kern_dtype_size(dt);
    int64_t batch = 1, bsa = 0, bsb = 0, bsc = M * N, outer = 1;
    if (bd.n > 0) {
        batch = bd.size[bd.n - 1];
        bsa = bd.sa[bd.n - 1];
        bsb = bd.sb[bd.n - 1];
        bsc = bd.sc[bd.n - 1];
        for (int k = 0; k < bd.n - 1; k++)
            outer *= bd.size[k];
    }
    for (int64_t o = 0; o < outer; o++) {
        int64_t oa = 0, ob = 0, oc = 0, rem = o;
        for (int k = bd.n - 2; k >= 0; k--) {
            int64_t i = rem % bd.size[k];
            rem /= bd.size[k];
            oa += i * bd.sa[k];
            ob += i * bd.sb[k];
            oc += i * bd.sc[k];
        }
        kern_mat ma = {(const char *)A->data + oa * es, A->rs, A->cs, bsa};
        kern_mat mb = {(const char *)B->data + ob * es, B->rs, B->cs, bsb};
        int rc = cai_kern_gemm(dt, batch, M, N, K, 1.0, ma, transA, mb, transB, beta,
                               (char *)C + oc * es, N, bsc);
        if (rc)
            return rc;
    }
    return 0;
}
