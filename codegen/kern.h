/* kern.h - the compute kernels of cagrad: raw buffers in, raw buffers out.
 *
 * This is the bottom layer. It knows nothing about tensors' refcounts, autograd nodes or
 * hooks: callers hand it pointers, shapes and element strides. Every kernel accepts
 * strided (non-contiguous, broadcast with stride 0) inputs and writes a contiguous
 * output unless stated otherwise. Strides are in elements, not bytes.
 *
 * Pointwise math goes through SLEEF's vector functions. Each kernel family has an
 * AVX-512 path, an AVX2 path and a scalar path; the path is chosen once at run time
 * (kern_isa()), because valgrind and older CPUs have no AVX-512.
 *
 * Big kernels split their work over the thread pool (kern_parallel_for). GEMMs go to
 * cblas with transpose flags; an operand is copied only when neither of its two inner
 * strides is 1.
 */
#ifndef CAGRAD_KERN_H
#define CAGRAD_KERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KERN_MAX_DIMS 8

typedef enum { KERN_F32 = 0, KERN_F64 = 1, KERN_I64 = 2 } kern_dtype;

size_t kern_dtype_size(kern_dtype dt);

/* ---------------------------------------------------------------------------------------
 * Run-time ISA selection.
 * The environment variable CAGRAD_ISA=scalar|avx2|avx512 caps the path (tests use it to
 * check that all paths agree); it can never raise the path above what the CPU has.
 */
typedef enum { KERN_ISA_SCALAR = 0, KERN_ISA_AVX2 = 1, KERN_ISA_AVX512 = 2 } kern_isa_level;

kern_isa_level kern_isa(void);
/* Force a path (clamped to what the CPU supports); returns the path now in use.
 * (The AVX-512 path needs avx512f, dq, bw and vl; the AVX2 path avx2 and fma.) */
kern_isa_level kern_isa_set(kern_isa_level want);
const char *kern_isa_name(kern_isa_level isa);

/* ---------------------------------------------------------------------------------------
 * Pointwise ops. One enum for every elementwise function, forward and backward helpers
 * alike, so the graph layer can fuse any chain of them. Arity is fixed per op
 * (kern_pw_arity). p0/p1 are the op's scalar parameters, listed beside each op.
 * Inputs that are "mask"/"cond" are nonzero = true. Comparison results are 1 or 0 in the
 * output dtype.
 */
typedef enum {
    /* unary: y = f(x) */
    KPW_COPY, /* x */
    KPW_NEG,  /* -x */
    KPW_EXP,
    KPW_LOG,
    KPW_SQRT,
    KPW_RSQRT, /* 1/sqrt(x) */
    KPW_ABS,
    KPW_SIGN, /* -1, 0, 1; 0 for +-0 and for NaN, as PyTorch */
    KPW_SIN,
    KPW_COS,
    KPW_TANH,
    KPW_SIGMOID,
    KPW_RELU,
    KPW_LEAKY_RELU, /* p0 = negative_slope */
    KPW_GELU,       /* exact: x * 0.5 * (1 + erf(x / sqrt 2)) */
    KPW_GELU_TANH,  /* tanh approximation */
    KPW_SILU,
    KPW_SOFTPLUS,   /* p0 = beta, p1 = threshold: x if beta*x > threshold */
    KPW_CLAMP,      /* p0 = min, p1 = max; NaN bound = no bound on that side */
    KPW_RECIPROCAL, /* 1/x */
    KPW_SQUARE,     /* x*x */
    KPW_ADD_S,      /* x + p0 */
    KPW_SUB_S,      /* x - p0 */
    KPW_RSUB_S,     /* p0 - x */
    KPW_MUL_S,      /* x * p0 */
    KPW_DIV_S,      /* x / p0 */
    KPW_RDIV_S,     /* p0 / x */
    KPW_POW_S,      /* x ^ p0; p0 in {0, 1, 2, 3, .5, -.5, -1, -2} as PyTorch does them */
    KPW_RPOW_S,     /* p0 ^ x */
    KPW_MAX_S,      /* max(x, p0); NaN propagates (from x or p0), like clamp_min */
    KPW_MIN_S,
    KPW_LT_S, /* x < p0 */
    KPW_LE_S,
    KPW_GT_S,
    KPW_GE_S,
    KPW_EQ_S,
    KPW_NE_S,
    KPW_FILL, /* p0 (x only gives shape; src is not read and may be NULL) */
    /* binary: y = f(a, b) */
    KPW_ADD, /* a + p0 * b   (p0 = alpha; callers pass 1 for plain add) */
    KPW_SUB, /* a - p0 * b */
    KPW_MUL,
    KPW_DIV,
    KPW_POW, /* a ^ b */
    KPW_MAX, /* maximum(a, b), NaN propagates */
    KPW_MIN,
    KPW_LT,
    KPW_LE,
    KPW_GT,
    KPW_GE,
    KPW_EQ,
    KPW_NE,
    KPW_MASKED_FILL, /* b ? p0 : a   (b = mask) */
    /* derivative helpers, binary: (g, x) or (g, y) -> dx.  g = incoming gradient */
    KPW_RELU_BW,       /* x <= 0 ? 0 : g (PyTorch's threshold_backward: NaN x passes g) */
    KPW_LEAKY_RELU_BW, /* g * (x > 0 ? 1 : p0) */
    KPW_GELU_BW,       /* g * d/dx gelu(x), exact form */
    KPW_GELU_TANH_BW,  /* g * d/dx gelu_tanh(x) */
    KPW_SILU_BW,       /* g * s * (1 + x * (1 - s)), s = sigmoid(x) */
    KPW_SOFTPLUS_BW,   /* g * sigmoid(beta*x), or g where beta*x > threshold; p0,p1 as softplus */
    KPW_SIGMOID_BW,    /* (g, y): g * y * (1 - y) */
    KPW_TANH_BW,       /* (g, y): g * (1 - y*y) */
    KPW_CLAMP_BW,      /* g * (min <= x <= max), p0 = min, p1 = max (NaN = unbounded) */
    KPW_ABS_BW,        /* g * sign(x) */
    KPW_POW_S_BW,      /* (g, x): g * p0 * x^(p0-1); 0 where p0 == 0 (p1 is ignored) */
    /* ternary: y = f(a, b, c) */
    KPW_WHERE,       /* a ? b : c */
    KPW_POW_BW_BASE, /* (g, a, b): g * b * a^(b-1); 0 where b == 0 */
    KPW_POW_BW_EXP,  /* (g, a, y): g * y * log(a), y = a^b; 0 where a == 0 and y is
                        finite, which for y = a^b is PyTorch's "a == 0 and b >= 0" */
    KPW_MAXMIN_BW,   /* (g, a, b): g/2 where a == b, 0 where a < b, else g (a > b or NaN),
                        i.e. maximum's grad for a; swap args for b; minimum uses the same
                        with swapped args, as PyTorch */
    KPW__COUNT
} kern_pw_op;

int kern_pw_arity(kern_pw_op op);
const char *kern_pw_name(kern_pw_op op);

/* A strided input: data points at the element for index (0,...,0); strides are given per
 * output dim (0 for a broadcast dim). */
typedef struct {
    const void *data;
    int64_t strides[KERN_MAX_DIMS];
} kern_src;

/* out[i] = op(src[0][i], ..., src[arity-1][i]) over the index space `shape` (ndim dims,
 * ndim == 0 means one element). out is written with out_strides (pass contiguous strides
 * for a fresh output; the same kernel serves in-place updates of views). All inputs and
 * the output share dtype dt, except that a `mask`/`cond` input of KPW_MASKED_FILL and
 * KPW_WHERE may be any dtype: pass its dtype in cond_dt. KERN_I64 supports only COPY,
 * FILL, NEG, ABS, SIGN, SQUARE, ADD*, SUB*, RSUB_S, MUL*, comparisons, MAX, MIN, MAX_S,
 * MIN_S, WHERE and MASKED_FILL (int64 arithmetic wraps; p0 is truncated to int64, except that
 * comparisons with p0 are exact). Returns 0, or -1 for an unsupported op/dtype pair. */
int kern_pointwise(kern_pw_op op, kern_dtype dt, kern_dtype cond_dt, int ndim, const int64_t *shape,
                   void *out, const int64_t *out_strides, const kern_src *src, double p0,
                   double p1);

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

int kern_reduce(kern_red_op op, kern_dtype dt, int ndim, const int64_t *shape, const void *in,
                const int64_t *in_strides, uint32_t rmask, void *out, int64_t *idx);

/* ---------------------------------------------------------------------------------------
 * Row kernels over the last dim of a contiguous [rows, n] array.
 * softmax / log_softmax: y = softmax(x) along each row (numerically stable: max-shift).
 * layer_norm: y = (x - mean) * rstd * w + b along each row; w and b may be NULL.
 * mean and rstd (length rows) are written when non-NULL. rstd = 1/sqrt(var + eps), with the
 * biased variance.
 */
int kern_softmax(kern_dtype dt, int64_t rows, int64_t n, const void *x, void *y, bool log);
int kern_layer_norm(kern_dtype dt, int64_t rows, int64_t n, const void *x, const void *w,
                    const void *b, double eps, void *y, void *mean, void *rstd);

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

int kern_gemm(kern_dtype dt, int64_t batch, int64_t M, int64_t N, int64_t K, double alpha,
              kern_mat A, bool transA, kern_mat B, bool transB, double beta, void *C, int64_t ldc,
              int64_t bsC);

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
int kern_index_select(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x,
                      const int64_t *index, int64_t n_index, void *out, int64_t *bad_pos,
                      int64_t *bad_val);
int kern_index_add(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, void *out,
                   const int64_t *index, int64_t n_index, const void *src, int64_t *bad_pos,
                   int64_t *bad_val);
int kern_gather(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, const void *x,
                const int64_t *index, int64_t n_out, void *out, int64_t *bad_pos, int64_t *bad_val);
int kern_scatter_add(kern_dtype dt, int64_t outer, int64_t n, int64_t inner, void *out,
                     const int64_t *index, int64_t n_src, const void *src, int64_t *bad_pos,
                     int64_t *bad_val);

/* ---------------------------------------------------------------------------------------
 * Random numbers: a counter-based generator (Philox-4x32-10), so a (seed, offset) pair
 * gives the same numbers on every run, thread count and ISA path. Each call consumes
 * `n` draws starting at *offset and advances *offset.
 * uniform in [0, 1); normal via Box-Muller; bernoulli writes 1/(1-p) with probability
 * 1-p and 0 otherwise (dropout's scaled mask; p == 1 gives all zeros).
 * dt is KERN_F32 (one 32-bit word, 24 bits, per draw) or KERN_F64 (two words, 53 bits);
 * KERN_I64 writes nothing.
 */
void kern_rand_uniform(kern_dtype dt, uint64_t seed, uint64_t *offset, int64_t n, void *out);
void kern_rand_normal(kern_dtype dt, uint64_t seed, uint64_t *offset, int64_t n, void *out);
void kern_rand_dropout_mask(kern_dtype dt, uint64_t seed, uint64_t *offset, int64_t n, double p,
                            void *out);

/* ---------------------------------------------------------------------------------------
 * Thread pool: one pool for the process, sized to the cores (or CAGRAD_NUM_THREADS).
 * Work is only ever run while no GEMM is in flight, so the pool and OpenBLAS's own
 * threads never compete for the cores. fn(ctx, begin, end) is called on disjoint ranges
 * covering [0, n); ranges are at least `grain` long. Runs serially when n < 2 * grain,
 * when there is one thread, or when called from inside a pool worker.
 */
typedef void (*kern_range_fn)(void *ctx, int64_t begin, int64_t end);

void kern_parallel_for(int64_t n, int64_t grain, kern_range_fn fn, void *ctx);
int kern_num_threads(void);
/* Set the pool size (1..cores); returns the size now in use. Safe between calls only. */
int kern_set_num_threads(int n);

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
void kern_set_allocator(kern_allocator a);
/* The default: 64-byte aligned_alloc (sizes rounded up to a multiple of 64; 0 takes 64
 * bytes) and free. graph/ uses it too, so there is one default in the library. */
void *kern_default_alloc(size_t nbytes);
kern_allocator kern_default_allocator(void);

/* BLAS core name as OpenBLAS reports it (e.g. "Haswell", "SkylakeX"), for reports. */
const char *kern_blas_core(void);

#endif /* CAGRAD_KERN_H */
