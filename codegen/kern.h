/* kern.h - the compute kernels of cagrad: raw buffers in, raw buffers out.
 *
 * This is the bottom layer. It knows nothing about tensors' refcounts, autograd nodes or
 * hooks: callers hand it pointers, shapes and element strides. Every kernel accepts
 * strided (non-contiguous, broadcast with stride 0) inputs and writes a contiguous
 * output unless stated otherwise. Strides are in elements, not bytes.
 *
 * Pointwise math goes through SLEEF's vector functions. Each kernel family has an
 * AVX-512 path, an AVX2 path and a scalar path; the path is chosen once at run time
 * (cai_kern_isa()), because valgrind and older CPUs have no AVX-512.
 *
 * Big kernels split their work over the thread pool (cai_kern_parallel_for). GEMMs go to
 * cblas with transpose flags; an operand is copied only when neither of its two inner
 * strides is 1.
 */
#ifndef CAGRAD_KERN_H
#define CAGRAD_KERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KERN_MAX_DIMS 8

/* KERN_BOOL: one byte per element, always 0 or 1 */
typedef enum { KERN_F32 = 0, KERN_F64 = 1, KERN_I64 = 2, KERN_BOOL = 3 } kern_dtype;

size_t cai_kern_dtype_size(kern_dtype dt);

/* Element i of a dt array, read as a double (an int64 converts exactly below 2^53). For
 * the plain loops that handle every dtype at once: casts and nll_loss. */
static inline double kern_load(kern_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case KERN_F32: return ((const float *)p)[i];
    case KERN_F64: return ((const double *)p)[i];
    case KERN_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return (double)((const int64_t *)p)[i];
    }
}

/* Element i of a dt array = v: rounded to float32, truncated toward zero to int64, or
 * v != 0 for bool, as PyTorch converts. kern_load's other half. */
static inline void kern_store(kern_dtype dt, void *p, int64_t i, double v) {
    switch (dt) {
    case KERN_F32: ((float *)p)[i] = (float)v; break;
    case KERN_F64: ((double *)p)[i] = v; break;
    case KERN_BOOL: ((uint8_t *)p)[i] = v != 0; break; /* NaN is nonzero: true, as in torch */
    default: ((int64_t *)p)[i] = (int64_t)v; break;
    }
}

/* ---------------------------------------------------------------------------------------
 * Run-time ISA selection.
 * The environment variable CAGRAD_ISA=scalar|avx2|avx512 caps the path (tests use it to
 * check that all paths agree); it can never raise the path above what the CPU has.
 */
typedef enum { KERN_ISA_SCALAR = 0, KERN_ISA_AVX2 = 1, KERN_ISA_AVX512 = 2 } kern_isa_level;

kern_isa_level cai_kern_isa(void);
/* The widest path this CPU (and its OS) supports, before any CAGRAD_ISA cap. */
kern_isa_level cai_kern_isa_cpu(void);
/* Force a path (clamped to what the CPU supports); returns the path now in use.
 * (The AVX-512 path needs avx512f, dq, bw and vl; the AVX2 path avx2 and fma.) */
kern_isa_level cai_kern_isa_set(kern_isa_level want);
const char *cai_kern_isa_name(kern_isa_level isa);

/* ---------------------------------------------------------------------------------------
 * Pointwise ops. One enum for every elementwise function, forward and backward helpers
 * alike, so the graph layer can fuse any chain of them. The ops, their arity, parameters
 * and formulas are the rows of kern_pw_ops.h; every table below comes from those rows.
 */
#include "kern_pw_ops.h"

typedef enum {
#define KERN_PW_ENUM(NAME, AR, NP, FL, VEC, REF) KPW_##NAME,
    KERN_PW_OPS(KERN_PW_ENUM)
#undef KERN_PW_ENUM
        KPW__COUNT
} kern_pw_op;

/* KPW_NP_<NAME>: the op's parameter count as a constant, for static tables. */
enum {
#define KERN_PW_NP(NAME, AR, NP, FL, VEC, REF) KPW_NP_##NAME = (NP),
    KERN_PW_OPS(KERN_PW_NP)
#undef KERN_PW_NP
};

/* Each takes any int and answers for one outside [0, KPW__COUNT) too: -1, 0, "?", -1, false. */
int cai_kern_pw_arity(kern_pw_op op);   /* inputs (FILL's one input is never read) */
int cai_kern_pw_nparams(kern_pw_op op); /* scalar parameters read: 0, 1 (p0) or 2 (p0, p1) */
const char *cai_kern_pw_name(kern_pw_op op);
/* The input that is a condition or mask of any dtype (where: 0, masked_fill: 1), or -1. */
int cai_kern_pw_cond_input(kern_pw_op op);
/* Whether op is input 0 times a factor of its other inputs and parameters (KPWF_ZERO0): its
 * result is 0 where input 0 is, while the factor is finite. */
bool cai_kern_pw_zero_passes(kern_pw_op op);
/* Whether cai_kern_pointwise runs op in dtype dt (every op runs in float32 and float64). */
bool cai_kern_pw_supports(kern_pw_op op, kern_dtype dt);

/* A strided input: data points at the element for index (0,...,0); strides are given per
 * output dim (0 for a broadcast dim). */
typedef struct {
    const void *data;
    int64_t strides[KERN_MAX_DIMS];
} kern_src;

/* out[i] = op(src[0][i], ..., src[arity-1][i]) over the index space `shape` (ndim dims,
 * ndim == 0 means one element). out is written with out_strides (pass contiguous strides
 * for a fresh output; the same kernel serves in-place updates of views). All inputs and
 * the output share dtype dt, except that the condition input (cai_kern_pw_cond_input) may be
 * any dtype: pass its dtype in cond_dt. KERN_I64 supports the ops cai_kern_pw_supports says
 * (int64 arithmetic wraps; p0 is truncated to int64, except that comparisons with p0 are
 * exact). Returns 0, or -1 for an unsupported op/dtype pair. */
int cai_kern_pointwise(kern_pw_op op, kern_dtype dt, kern_dtype cond_dt, int ndim,
                       const int64_t *shape, void *out, const int64_t *out_strides,
                       const kern_src *src, double p0, double p1);

/* ---------------------------------------------------------------------------------------
 * Reductions. The input has ndim dims; `rmask` bit d set means dim d is reduced. The
 * output is contiguous over the kept dims, in order (keepdim is a caller-side view).
 * For MAX/MIN, `idx` (may be NULL) receives the argmax/argmin as a flat row-major index
 * into the sub-space of reduced dims (for one reduced dim that is just the index along
 * it). Ties take the first index; NaN wins, like PyTorch.
 * Sums (and mean, logsumexp) use cascade/pairwise summation, so the error grows with
 * log(n), not n, as in PyTorch. The result does not depend on the thread count.
 * KERN_I64 supports SUM (wrapping), MAX and MIN. Over zero elements SUM gives 0, MEAN NaN,
 * LOGSUMEXP -inf and MAX/MIN fail. Returns 0, -1 (bad arguments/unsupported), or -2 if
 * scratch memory (partial sums of a split reduction) could not be allocated.
 */
typedef enum { KRED_SUM, KRED_MEAN, KRED_MAX, KRED_MIN, KRED_LOGSUMEXP, KRED__COUNT } kern_red_op;

int cai_kern_reduce(kern_red_op op, kern_dtype dt, int ndim, const int64_t *shape, const void *in,
                    const int64_t *in_strides, uint32_t rmask, void *out, int64_t *idx);

/* ---------------------------------------------------------------------------------------
 * Row kernels over the last dim of a contiguous [rows, n] array.
 * softmax / log_softmax: y = softmax(x) along each row (numerically stable: max-shift).
 * layer_norm: y = (x - mean) * rstd * w + b along each row; w and b may be NULL.
 * mean and rstd (length rows) are written when non-NULL. rstd = 1/sqrt(var + eps), with the
 * biased variance.
 */
int cai_kern_softmax(kern_dtype dt, int64_t rows, int64_t n, const void *x, void *y, bool log);
int cai_kern_layer_norm(kern_dtype dt, int64_t rows, int64_t n, const void *x, const void *w,
                        const void *b, double eps, void *y, void *mean, void *rstd);

/* batch_norm in training mode (kern_norm.c) over a contiguous x viewed as [N, C, inner]:
 * per channel c, the mean and the biased variance over N and inner (two passes, partial
 * sums widened to double), invstd = 1/sqrt(var + eps), and y = x * alpha + beta with
 * alpha = invstd * w[c], beta = b[c] - mean * alpha (w, b may be NULL: 1 and 0). mean,
 * invstd and var get C values each. Channels are spread over the pool; a channel's result
 * never depends on the thread count. Over N * inner == 0 values the statistics are NaN.
 * Returns 0, or -1 for KERN_I64 or a negative size. */
int cai_kern_batch_norm(kern_dtype dt, int64_t N, int64_t C, int64_t inner, const void *x,
                        const void *w, const void *b, double eps, void *y, void *mean, void *invstd,
                        void *var);

/* ---------------------------------------------------------------------------------------
 * GEMM. C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b] for b in [0, batch).
 * Each operand is described by its element strides: rs (between rows), cs (between
 * columns) and bs (between batch items; 0 broadcasts one matrix over the batch). op(X) is
 * X^T when the trans flag is set, so A is (M x K) after op, B is (K x N) after op.
 * A matrix whose cs == 1 goes to cblas as-is; one whose rs == 1 goes with the transpose
 * flag flipped; only one with neither is copied (into a buffer from the scratch
 * allocator). C must have cs == 1. Batches of small GEMMs are spread over the pool;
 * bsC == 0 runs the batch serially, in order, on the one C (beta = 1 sums over the batch).
 * Returns 0, -1 (KERN_I64, negative sizes, ldc < N, sizes beyond int) or -2 (out of
 * scratch memory).
 */
typedef struct {
    const void *data;
    int64_t rs, cs, bs;
} kern_mat;

int cai_kern_gemm(kern_dtype dt, int64_t batch, int64_t M, int64_t N, int64_t K, double alpha,
                  kern_mat A, bool transA, kern_mat B, bool transB, double beta, void *C,
                  int64_t ldc, int64_t bsC);

/* Whether cai_kern_gemm hands a GEMM of `batch` items of M x N x K whole to OpenBLAS,
 * threaded across the pool through its threads callback (its result rounds differently
 * from tiles'). The BLAS, the thread count and the sizes decide. Such a GEMM wants the
 * whole pool: where the pool is busy (another thread's job, or called inside one) its
 * jobs run on threads made for the call. */
bool cai_kern_gemm_blas_threaded(int64_t batch, int64_t M, int64_t N, int64_t K);

/* Whether cai_kern_gemm hands a rows x cols matrix with strides (rs, cs) to cblas as it is;
 * false: it packs a copy with scratch memory. (A caller with memory of its own, as the
 * compiled backward's arena, can make that copy itself.) */
bool cai_kern_gemm_unpacked(int64_t rows, int64_t cols, int64_t rs, int64_t cs);

/* A matrix operand with batch dims: data at batch index (0, ...), its matrix strides, and
 * its element stride per batch dim of the product (0 where it broadcasts). */
typedef struct {
    const void *data;
    int64_t rs, cs;
    int64_t bs[KERN_MAX_DIMS];
} kern_mat_nd;

/* C[i...] = op(A[i...]) @ op(B[i...]) + beta * C[i...] for every index i... of the nb
 * batch dims bshape; C is contiguous [bshape..., M, N]. Batch dims of size 1 are dropped
 * and neighbours that all three operands step through uniformly are merged; the innermost
 * merged dim is cai_kern_gemm's batch, the others an outer loop, so broadcast batches cost no
 * copy. Returns cai_kern_gemm's code (the first failure stops the loop). */
int cai_kern_gemm_nd(kern_dtype dt, int nb, const int64_t *bshape, int64_t M, int64_t N, int64_t K,
                     const kern_mat_nd *A, bool transA, const kern_mat_nd *B, bool transB,
                     double beta, void *C);

/* ---------------------------------------------------------------------------------------
 * Indexing. Tensors here are viewed as [outer, n, inner] around the indexed dim, with
 * contiguous inputs and outputs (the caller makes them contiguous). Indices are int64
 * and are bounds-checked: on an out-of-range index the kernel returns -1 and writes the
 * offending position and value to *bad_pos / *bad_val (may be NULL).
 *
 * index_select: out[o, j, i] = x[o, index[j], i], j < n_index
 * index_add:    out[o, index[j], i] += src[o, j, i]  (out must be pre-filled; serial over
 *               j so duplicate indices accumulate deterministically)
 * gather:       out[o, j, i] = x[o, index[o, j, i], i], index is [outer, n_out, inner]
 * scatter_add:  out[o, index[o, j, i], i] += src[o, j, i]
 */
/* The [outer, n, inner] view of shape around dim: the product of the dims before it, its
 * size, and the product of the dims after it. A 0-d shape is one element, [1, 1, 1]. */
void cai_kern_split_dim(int ndim, const int64_t *shape, int dim, int64_t *outer, int64_t *n,
                        int64_t *inner);
int cai_kern_index_select(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x,
                          const int64_t *index, int64_t n_index, void *out, int64_t *bad_pos,
                          int64_t *bad_val);
int cai_kern_index_add(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, void *out,
                       const int64_t *index, int64_t n_index, const void *src, int64_t *bad_pos,
                       int64_t *bad_val);
int cai_kern_gather(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x,
                    const int64_t *index, int64_t n_out, void *out, int64_t *bad_pos,
                    int64_t *bad_val);
int cai_kern_scatter_add(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, void *out,
                         const int64_t *index, int64_t n_src, const void *src, int64_t *bad_pos,
                         int64_t *bad_val);

/* index_fill:   out[o, index[j], i] = value (out pre-filled with the input). Negative
 *               indices count from the end (-n is 0), as PyTorch's index_fill; the check
 *               accepts [-n, n). */
int cai_kern_index_fill(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, void *out,
                        const int64_t *index, int64_t n_index, double value, int64_t *bad_pos,
                        int64_t *bad_val);

/* ---------------------------------------------------------------------------------------
 * Order and position (kern_order.c); contiguous operands, results the same bits at every
 * thread count.
 * tri:    x as [batch, rows, cols]; out keeps x where j - i <= diag (tril) or j - i >= diag
 *         (upper: triu) and is 0 elsewhere. out may be x. Returns 0, or -1 for bad sizes.
 * cumsum: out[o, k, i] = sum of x[o, 0..k, i] (reverse: of x[o, k..n-1, i]); floats
 *         accumulate in double, as PyTorch's CPU kernel. out may be x. 0 or -1.
 * sort:   values/indices [outer, k, inner] = the first k of each line of x [outer, n, inner]
 *         in ascending (or descending) order, stably, NaN above every number, with the
 *         positions they came from. 0, -1 (bad sizes, k > n) or -2 (out of memory).
 */
int cai_kern_tri(kern_dtype dt, int64_t batch, int64_t rows, int64_t cols, int64_t diag, bool upper,
                 const void *x, void *out);
int cai_kern_cumsum(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x,
                    void *out, bool reverse);
/* cumprod: out[o, k, i] = product of x[o, 0..k, i]. cumprod_backward: the gradient of
 * sum(g * cumprod(x)) for x, y = cumprod(x), exact where x has zeros (f32/f64). All
 * contiguous; 0 or -1. */
int cai_kern_cumprod(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x,
                     void *out);
int cai_kern_cumprod_backward(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x,
                              const void *y, const void *g, void *out);
int cai_kern_sort(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x, int64_t k,
                  bool descending, void *values, int64_t *indices);

/* ---------------------------------------------------------------------------------------
 * 2-d pooling (kern_pooling.c) over contiguous planes [planes, h, w] into [planes, oh, ow],
 * kernel kh x kw, strides, zero padding ph, pw at both sides, dilations; split over planes.
 * max:  out = the first largest value of each window (or its last NaN), indices = its position
 *       y * w + x in the plane; mask (may be NULL) [planes, kh*kw, oh*ow] = 1 at the winner's
 *       window slot, 0 elsewhere (the derivative's columns). 0, or -1 (int64, bad sizes).
 * avg:  divisors [oh*ow] first (the window size with padding, without it, or the override;
 *       1 for a window that misses the input), then out = window sum / divisor, summed in
 *       the element type as PyTorch's CPU kernel. 0 or -1.
 */
typedef struct {
    int64_t planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
} kern_pool_geom;

int cai_kern_max_pool2d(kern_dtype dt, const kern_pool_geom *g, const void *x, void *out,
                        int64_t *indices, void *mask);
void cai_kern_avg_pool2d_divisors(kern_dtype dt, const kern_pool_geom *g, bool count_include_pad,
                                  int64_t divisor_override, void *div);
int cai_kern_avg_pool2d(kern_dtype dt, const kern_pool_geom *g, const void *x, const void *div,
                        void *out);
/* adaptive avg: output row o averages input rows [floor(o*h/oh), ceil((o+1)*h/oh)), and
 * columns likewise (kh, kw, strides and the rest of g unused): sum / rows / cols, summed in
 * the element type as PyTorch's CPU kernel. 0 or -1. The weights: mat [out, in] = 1/len at
 * the inputs each output averages, 0 elsewhere (the derivative's matrices). */
int cai_kern_adaptive_avg_pool2d(kern_dtype dt, const kern_pool_geom *g, const void *x, void *out);
void cai_kern_adaptive_weights(kern_dtype dt, int64_t in, int64_t out, void *mat);

/* ---------------------------------------------------------------------------------------
 * Convolution as a GEMM: im2col (unfold) and col2im (fold, its adjoint). The geometry of
 * conv2d over an image batch [n, c, h, w] with a kh x kw kernel, strides sh, sw, zero
 * padding ph, pw at the start (top, left) and ph_end, pw_end at the end, dilations dh, dw:
 * oh = (h + ph + ph_end - dh*(kh-1) - 1)/sh + 1 output rows (cai_kern_conv_out_size), ow
 * likewise. groups splits the channels (for the
 * column layout [n, groups, c/groups*kh*kw, oh*ow]). flip stores the kernel taps in reverse:
 * tap (ki, kj) in the row of (kh-1-ki, kw-1-kj), which makes the columns of a gradient g
 * the ones a transposed convolution multiplies by the weight as it is (conv2d's
 * grad_input at stride 1, see ops_conv.c).
 */
typedef struct {
    int64_t n, c, h, w;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t ph_end, pw_end;
    int64_t oh, ow;
    int64_t groups;
    bool flip;
} kern_conv_geom;

/* The output size of one spatial dim: (in + pads - d(k-1) - 1) / s + 1, pads the padding
 * of both sides together; 0 when the kernel does not fit, -1 for s <= 0. */
int64_t cai_kern_conv_out_size(int64_t in, int64_t k, int64_t s, int64_t pads, int64_t d);
/* cols[n, c*kh*kw + ki*kw + kj, oy*ow + ox] = x[n, c, oy*sh - ph + ki*dh, ox*sw - pw + kj*dw],
 * 0 where that is padding (with flip, the row of tap (ki, kj) is c*kh*kw + (kh-1-ki)*kw +
 * kw-1-kj). x is read with its 4 element strides xs; cols is written as
 * [n, groups, c/groups*kh*kw, oh*ow] with its 4 element strides cs, the last 1 (so the
 * batch may sit inside the rows' layout, [groups, K, n, oh*ow], for a GEMM over the whole
 * batch). Returns 0, or -1 (not f32/f64, cs[3] != 1, or a geometry that does not hold
 * together). */
int cai_kern_im2col(kern_dtype dt, const kern_conv_geom *g, const void *x, const int64_t *xs,
                    void *cols, const int64_t *cs);
/* out [n, c, h, w] (contiguous, overwritten) = at each position, the sum of the cols
 * entries im2col would have read from it. cols is read as [n, groups, c/groups*kh*kw,
 * oh*ow] with its 4 element strides cs. Returns 0 or -1 as cai_kern_im2col. */
int cai_kern_col2im(kern_dtype dt, const kern_conv_geom *g, const void *cols, const int64_t *cs,
                    void *out);
/* conv2d through the columns, a cache-sized slab of images at a time (kern_conv_gemm.c):
 * y [n, out_channels, oh*ow] (contiguous) = beta * y + W @ im2col(x), one GEMM per image
 * and group, W the weight contiguous as [groups, out_channels/groups, c/groups*kh*kw]
 * (with g->flip, the columns' taps reversed: a convolution with the kernel turned 180
 * degrees). Returns 0, -1 (not f32/f64, a bad geometry, out_channels not a multiple of
 * groups) or -2 (out of scratch memory). */
int cai_kern_conv2d(kern_dtype dt, const kern_conv_geom *g, const void *x, const int64_t *xs,
                    const void *w, int64_t out_channels, double beta, void *y);
/* Its weight gradient: dw [groups, out_channels/groups, c/groups*kh*kw] (contiguous,
 * overwritten) = the sum over images of gy[image, group] @ im2col(x)[image, group]^T, gy
 * contiguous [n, out_channels, oh*ow], added in image order. Returns as cai_kern_conv2d. */
int cai_kern_conv2d_weight_grad(kern_dtype dt, const kern_conv_geom *g, const void *x,
                                const int64_t *xs, const void *gy, int64_t out_channels, void *dw);

/* ---------------------------------------------------------------------------------------
 * Random numbers: a counter-based generator (Philox-4x32-10), so a (seed, offset) pair
 * gives the same numbers on every run, thread count and ISA path. Each call consumes
 * `n` draws starting at *offset and advances *offset.
 * uniform in [0, 1); normal via Box-Muller; bernoulli writes 1/(1-p) with probability
 * 1-p and 0 otherwise (dropout's scaled mask; p == 1 gives all zeros).
 * dt is KERN_F32 (one 32-bit word, 24 bits, per draw) or KERN_F64 (two words, 53 bits);
 * KERN_I64 writes nothing.
 */
void cai_kern_rand_uniform(kern_dtype dt, uint64_t seed, uint64_t *offset, int64_t n, void *out);
void cai_kern_rand_normal(kern_dtype dt, uint64_t seed, uint64_t *offset, int64_t n, void *out);
void cai_kern_rand_dropout_mask(kern_dtype dt, uint64_t seed, uint64_t *offset, int64_t n, double p,
                                void *out);

/* ---------------------------------------------------------------------------------------
 * Thread pool: one pool for the process, sized to the cores (or CAGRAD_NUM_THREADS). It
 * runs the GEMMs too (kern_gemm.c keeps OpenBLAS to one thread), so no other pool competes
 * for the cores. fn(ctx, begin, end) is called on disjoint ranges
 * covering [0, n); ranges are at least `grain` long. Runs serially when n < 2 * grain,
 * when there is one thread, or when called from inside a pool worker.
 */
typedef void (*kern_range_fn)(void *ctx, int64_t begin, int64_t end);

void cai_kern_parallel_for(int64_t n, int64_t grain, kern_range_fn fn, void *ctx);
/* fn(ctx, i, i + 1) for every i in [0, n), each on its own thread and all at once, for
 * jobs that wait on each other (OpenBLAS's threaded GEMM); job 0 runs on the calling
 * thread. Waits while another thread's job holds the pool. Returns false, having run nothing, where
 * that cannot be promised: n above the pool's size, or a call from inside a pool job. */
bool cai_kern_gang(int n, kern_range_fn fn, void *ctx);
/* Between begin and end (nested, per thread) cai_kern_gang returns false instead of waiting
 * for another thread's job: a thread holding a lock that such a job's threads may wait for
 * (a leaf's gradient lock) must not wait for them. */
void cai_kern_no_wait_begin(void);
void cai_kern_no_wait_end(void);
/* Whether a parallel call from this thread would get the whole pool now (a hint: another
 * thread may take it first). */
bool cai_kern_pool_free(void);
/* Helping (kern_help.c): while a gang whose threads run loops of their own is open to it
 * (between begin and end), a parallel loop started inside it is shared with the gang's
 * idle threads, which call cai_kern_help. wake(ctx) is called at each new loop, to wake
 * threads that sleep; cai_kern_help_gen changes then, for threads that spin. Call begin
 * and end from inside the gang (its job 0): the pool runs one gang at a time, so two
 * threads' side-by-side runs never share the slot. */
void cai_kern_help_begin(void (*wake)(void *ctx), void *ctx);
void cai_kern_help_end(void);
/* A spin-wait's pause (x86's PAUSE; nothing elsewhere). */
static inline void cai_kern_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}
/* Join the open loop, if any; true when this thread ran part of one. */
bool cai_kern_help(void);
unsigned cai_kern_help_gen(void);
int cai_kern_num_threads(void);
/* CLOCK_MONOTONIC in ns: the one clock of the library's timers (compile time, plan
 * profiles, the pool's spin). */
int64_t cai_kern_now_ns(void);
/* A backward's scope (nested, per thread): from its first parallel job to its end, the
 * calling thread stays on its CPU and the workers on CPUs of their own (kern_pool.c). */
void cai_kern_bind_begin(void);
void cai_kern_bind_end(void);
/* Set the pool size (1..cores); returns the size now in use. Safe between calls only. */
int cai_kern_set_num_threads(int n);

/* ---------------------------------------------------------------------------------------
 * Scratch memory for kernels (GEMM packing copies). Set once by the layer above, so that
 * every byte still goes through the library's one allocator hook. alloc may return NULL;
 * kernels then return -2 (out of memory).
 */
typedef struct {
    void *(*alloc)(size_t nbytes);
    void (*free)(void *p);
} kern_allocator;

/* Set the scratch allocator; one with a NULL alloc or free restores the default. */
void cai_kern_set_allocator(kern_allocator a);
/* The default: 64-byte aligned_alloc (sizes rounded up to a multiple of 64; 0 takes 64
 * bytes) and free. graph/ uses it too, so there is one default in the library. */
void *cai_kern_default_alloc(size_t nbytes);
kern_allocator cai_kern_default_allocator(void);

/* BLAS core name as OpenBLAS reports it (e.g. "Haswell", "SkylakeX"), for reports. */
const char *cai_kern_blas_core(void);

/* The OpenBLAS this build links, for show_config and the slow-core warning. Strings are
 * static. core_isa is the widest vector ISA the core's kernels use; below cpu_isa, GEMMs
 * run at a fraction of the speed the CPU has. */
typedef struct {
    const char *name;      /* "scipy-openblas32" (the wheel) or "system" (pkg-config) */
    const char *version;   /* "0.3.34", or "unknown" */
    const char *config;    /* openblas_get_config() */
    const char *core;      /* openblas_get_corename() */
    bool threads_callback; /* its threading runs on cagrad's pool (OpenBLAS >= 0.3.27) */
    kern_isa_level core_isa, cpu_isa;
} kern_blas_info;
void cai_kern_blas_info(kern_blas_info *out);
/* How many times OpenBLAS has handed a threaded call to the pool (0 without the callback). */
uint64_t cai_kern_blas_callbacks(void);

#endif /* CAGRAD_KERN_H */
