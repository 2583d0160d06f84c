/* kern_internal.h - what the kernel files share and nothing above codegen/ may use.
 *
 * The per-ISA code (kern_simd_*.c, one instantiation of kern_simd_body.inc per ISA and
 * float dtype) exports one kern_simd table each. The generic drivers (pointwise
 * iterator, reduction planner, row kernels) pick the table for the current ISA and dtype
 * with cai_kern_simd_for() and only ever hand it contiguous data or a finished plan.
 */
#ifndef CAGRAD_KERN_INTERNAL_H
#define CAGRAD_KERN_INTERNAL_H

#include "ca_assert.h"
#include "kern.h"

#include <string.h>

/* Elements per unit of parallel work: small enough to balance, big enough to amortise. */
#define KERN_GRAIN 16384

/* A contiguous pointwise kernel: out[i] = op(a[i], b[i], c[i]) for i < n. Inputs beyond
 * the op's arity are not read (and may be NULL). */
typedef void (*kern_pw_fn)(int64_t n, void *out, const void *a, const void *b, const void *c,
                           double p0, double p1);

/* What a reduction leaf accumulates; SUMEXP and SUMSQ shift each element by m first. */
typedef enum { KRM_SUM, KRM_SUMEXP, KRM_SUMSQ, KRM_MAX, KRM_MIN } kern_red_mode;

/* The leaves' mode of a reduction op (logsumexp's second pass; its first is KRM_MAX). */
static inline kern_red_mode kern_red_mode_of(kern_red_op op) {
    switch (op) {
    case KRED_MAX: return KRM_MAX;
    case KRED_MIN: return KRM_MIN;
    case KRED_LOGSUMEXP: return KRM_SUMEXP;
    default: return KRM_SUM; /* SUM, MEAN */
    }
}

/* Shape and element strides of a set of dims, outermost first. */
typedef struct {
    int nd;
    int64_t shape[KERN_MAX_DIMS];
    int64_t stride[KERN_MAX_DIMS];
} kern_dims;

/* A reduction after planning (see kern_reduce.c). Every output is reduced over the flat
 * row-major index space [0, R) of `red`; the split of that space (a binary tree whose top
 * nseg leaves may run on different threads) depends on the shapes only, never on the
 * thread count, so results are reproducible. */
typedef struct {
    kern_red_op op;
    kern_dims keep; /* kept dims; in column mode the last one has stride 1 */
    kern_dims red;  /* reduced dims, collapsed */
    int64_t O, R;   /* outputs, reduced elements per output */
    bool col;       /* column mode: vectorise across the contiguous last kept dim */
    int64_t tile;   /* column mode: outputs per work unit */
    int64_t nunit;  /* work units: outputs, or (kept outer index, column tile) pairs */
    int64_t nseg;   /* power of two; > 1 splits each unit's reduction into segments */
    const void *in;
    void *out;
    void *part; /* nseg > 1: O * nseg partial results, [o][seg] */
} kern_rplan;

/* One ISA's kernels for one float dtype. */
typedef struct {
    kern_pw_fn pw[KPW__COUNT];
    void (*reduce)(const kern_rplan *pl);
    void (*softmax_row)(int64_t n, const void *x, void *y, bool log);
    /* mean and rstd point at one element each (may be NULL). */
    void (*layer_norm_row)(int64_t n, const void *x, const void *w, const void *b, double eps,
                           void *y, void *mean, void *rstd);
    /* A reduction leaf over n <= leaf contiguous elements (any n for MAX/MIN), as the
     * reduction tree computes it; the result is a T, widened. Lets the fused interpreter
     * sum its tiles exactly as cai_kern_reduce would. */
    double (*acc)(int64_t n, const void *p, kern_red_mode mode, double m);
    int col_tile;  /* outputs per column-mode reduction unit */
    int leaf;      /* elements per summation leaf of the inner-mode tree */
    int leaf_rows; /* rows per summation leaf of the column-mode tree */
} kern_simd;

extern const kern_simd cai_kern_scalar_f32_table, cai_kern_scalar_f64_table;
extern const kern_simd cai_kern_avx2_f32_table, cai_kern_avx2_f64_table;
extern const kern_simd cai_kern_avx512_f32_table, cai_kern_avx512_f64_table;

/* The table for the current ISA; NULL for KERN_I64. */
const kern_simd *cai_kern_simd_for(kern_dtype dt);

/* The inputs op's kernel reads: its arity, but none for FILL (0 for an invalid op). */
int cai_kern_pw_reads(kern_pw_op op);

/* The contiguous kernel cai_kern_pointwise runs for op in dtype dt on the current ISA; NULL
 * when dt does not support op. */
kern_pw_fn cai_kern_pw_kernel(kern_pw_op op, kern_dtype dt);

/* cai_kern_reduce's planning, shared with the fused interpreter. cai_kern_red_prepare fills
 * pl->keep, pl->red (collapsed; red gets a dummy size-1 dim when nothing is reduced),
 * pl->O and pl->R from shape, strides and rmask; -1 on a negative size. cai_kern_red_split
 * then picks inner/column mode and the segment count. cai_kern_red_empty writes the value of
 * a reduction over no element (-1 where there is none). */
int cai_kern_red_prepare(kern_rplan *pl, int ndim, const int64_t *shape, const int64_t *in_strides,
                         uint32_t rmask);
void cai_kern_red_split(kern_rplan *pl, int tile);
int cai_kern_red_empty(kern_red_op op, kern_dtype dt, int64_t O, void *out);

/* Drops size-1 dims of the index space shape[0..ndim) and merges neighbours that are
 * contiguous for all nops operands (str[k]: operand k's strides, in elements). Writes the
 * collapsed dims, outermost first, to cshape and cstr (which must not alias shape or str)
 * and returns their count: at least 1, a space of one element being one dim of size 1
 * with stride 0. Shared by the pointwise iterator and the fused interpreter. */
int cai_kern_collapse_dims(int ndim, const int64_t *shape, int nops, int64_t (*str)[KERN_MAX_DIMS],
                           int64_t *cshape, int64_t (*cstr)[KERN_MAX_DIMS]);

/* n mask elements of dtype mdt at src (stride s) as 1/0 of dtype dt at dst (stride ds);
 * strides in elements. How where / masked_fill read a condition of another dtype. */
void cai_kern_mask_pack(kern_dtype dt, char *dst, int64_t ds, kern_dtype mdt, const char *src,
                        int64_t s, int64_t n);

/* Convolutions (kern_conv.c, kern_conv_wino.c). Whether a geometry holds together: sizes
 * and paddings in range, oh and ow what the kernel, strides, paddings and dilations give. */
bool cai_kern_conv_geom_ok(const kern_conv_geom *g);
/* Whether cai_kern_conv2d and its weight gradient take Winograd's F(2x2, 3x3): a 3x3
 * kernel at unit strides and dilations, at least 16 channels per group in and out. */
bool cai_kern_conv_winograd_fits(kern_dtype dt, const kern_conv_geom *g, int64_t out_channels);
/* Turn the Winograd path off (and on again), process-wide: tests compare it with im2col's. */
void cai_kern_conv_set_winograd(bool on);
/* Tests: whether im2col's weight gradient may take cai_kern_gemm_nt_sum_f32 where its
 * shapes call for it (on by default); off, its GEMMs are all OpenBLAS's. */
void cai_kern_conv_set_gemm_sums(bool on);
/* cai_kern_conv2d and cai_kern_conv2d_weight_grad by F(2x2, 3x3), for a geometry that
 * fits; same arguments and returns. */
int cai_kern_conv2d_winograd(kern_dtype dt, const kern_conv_geom *g, const void *x,
                             const int64_t *xs, const void *w, int64_t out_channels, double beta,
                             void *y);
int cai_kern_conv2d_weight_grad_winograd(kern_dtype dt, const kern_conv_geom *g, const void *x,
                                         const int64_t *xs, const void *gy, int64_t out_channels,
                                         void *dw);

/* Scratch buffers through the allocator set by cai_kern_set_allocator. */
void *cai_kern_scratch_alloc(size_t nbytes);
void cai_kern_scratch_free(void *p);

/* One Philox-4x32-10 block (exposed for known-answer tests). */
void cai_kern_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* dst[0..n) = n copies of the esz-byte element at src (kern_move.c: vectorised). */
void cai_kern_splat(int64_t esz, char *dst, const char *src, int64_t n);

/* Bool bytes (0 or 1) to 1/0 of a float dtype, n contiguous elements (kern_move.c). */
void cai_kern_bool_to_float(kern_dtype dt, void *dst, const uint8_t *m, int64_t n);

/* dst[i * ds] = src[i * s] for n elements of esz (4 or 8) bytes. Constant-size memcpy
 * compiles to plain moves (a runtime size would call libc per element); bytes, not values,
 * so NaN payloads survive. */
static inline void kern_move_strided(int64_t esz, char *dst, int64_t ds, const char *src, int64_t s,
                                     int64_t n) {
    if (ds == 1 && s == 0) { /* a splat: one vector loop */
        cai_kern_splat(esz, dst, src, n);
        return;
    }
    if (esz == 1)
        for (int64_t i = 0; i < n; i++)
            dst[i * ds] = src[i * s];
    else if (esz == 4)
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + 4 * i * ds, src + 4 * i * s, 4);
    else
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + 8 * i * ds, src + 8 * i * s, 8);
}

/* Offset of row-major index `flat` over the first nd dims of d; fills idx[0..nd). */
static inline int64_t kern_dims_seek(const kern_dims *d, int nd, int64_t flat, int64_t *idx) {
    int64_t off = 0;
    for (int k = nd - 1; k >= 0; k--) {
        idx[k] = flat % d->shape[k];
        flat /= d->shape[k];
        off += idx[k] * d->stride[k];
    }
    return off;
}

/* Steps idx (first nd dims, last fastest) by one; returns the change of offset. */
static inline int64_t kern_dims_next(const kern_dims *d, int nd, int64_t *idx) {
    int64_t delta = 0;
    for (int k = nd - 1; k >= 0; k--) {
        delta += d->stride[k];
        if (++idx[k] < d->shape[k])
            return delta;
        delta -= d->stride[k] * d->shape[k];
        idx[k] = 0;
    }
    return delta;
}

/* Range [*r0, *r1) of segment s when [0, R) is halved log2(nseg) times, left half first;
 * the same split the reduction tree makes, so segments are subtrees of it. */
static inline void kern_seg_range(int64_t R, int64_t nseg, int64_t s, int64_t *r0, int64_t *r1) {
    int64_t lo = 0, hi = R;
    for (int64_t bit = nseg / 2; bit > 0; bit /= 2) {
        int64_t mid = lo + (hi - lo) / 2;
        if (s & bit)
            lo = mid;
        else
            hi = mid;
    }
    *r0 = lo;
    *r1 = hi;
}

/* Chunk c of n split into nchunks near-equal parts, each at least n / nchunks long: its
 * range [begin, begin + *len). The pool and helpers cut loops the same way. */
static inline int64_t cai_kern_chunk(int64_t c, int64_t n, int64_t nchunks, int64_t *len) {
    int64_t q = n / nchunks, r = n % nchunks;
    *len = q + (c < r ? 1 : 0);
    return c * q + (c < r ? c : r);
}

/* kern_help.c: from inside a pool job, hand this loop to the idle threads of a helping
 * gang; false (nothing ran) when no gang is open to helping or another loop holds it. */
bool cai_kern_help_try(int64_t n, int64_t grain, kern_range_fn fn, void *ctx);

#endif /* CAGRAD_KERN_INTERNAL_H */
