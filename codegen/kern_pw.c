/* kern_pw.c - cai_kern_pointwise: the N-d strided iterator around the contiguous kernels.
 *
 * Dims are collapsed where every operand is contiguous across them; the flat index space
 * is split over the pool. Each row (innermost dim) goes straight to the ISA kernel when all
 * its strides are 1; otherwise it is cut into blocks whose strided or broadcast inputs are
 * packed into stack buffers first (and a strided output unpacked after), so every layout
 * runs the same vector code. int64 ops are plain C here.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kern_internal.h"

#define KERN_PW_BLOCK 256

static const struct {
    const char *name;
    uint8_t arity, nparams, flags;
} kern_pw_info[KPW__COUNT] = {
#define KERN_PW_INFO(NAME, AR, NP, FL, VEC, REF) [KPW_##NAME] = {#NAME, AR, NP, FL},
    KERN_PW_OPS(KERN_PW_INFO)
#undef KERN_PW_INFO
};

int cai_kern_pw_arity(kern_pw_op op) {
    return (unsigned)op < KPW__COUNT ? kern_pw_info[op].arity : -1;
}

int cai_kern_pw_nparams(kern_pw_op op) {
    return (unsigned)op < KPW__COUNT ? kern_pw_info[op].nparams : 0;
}

const char *cai_kern_pw_name(kern_pw_op op) {
    return (unsigned)op < KPW__COUNT ? kern_pw_info[op].name : "?";
}

int cai_kern_pw_cond_input(kern_pw_op op) {
    if ((unsigned)op >= KPW__COUNT)
        return -1;
    int fl = kern_pw_info[op].flags;
    return fl & KPWF_COND0 ? 0 : fl & KPWF_COND1 ? 1 : -1;
}

bool cai_kern_pw_zero_passes(kern_pw_op op) {
    return (unsigned)op < KPW__COUNT && (kern_pw_info[op].flags & KPWF_ZERO0);
}

int cai_kern_pw_reads(kern_pw_op op) {
    if ((unsigned)op >= KPW__COUNT)
        return 0;
    return kern_pw_info[op].flags & KPWF_NOREAD ? 0 : kern_pw_info[op].arity;
}

/* ------------------------------------------------------------------ int64 kernels */

/* Saturating double -> int64 (a plain cast is undefined out of range). */
static int64_t kern_d2i(double v) {
    if (v != v)
        return 0;
    if (v >= 9223372036854775807.0)
        return INT64_MAX;
    if (v <= -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)v;
}

/* Wrapping arithmetic, as two's complement tensors do (signed overflow is UB in C). */
#define WADD(x, y) ((int64_t)((uint64_t)(x) + (uint64_t)(y)))
#define WSUB(x, y) ((int64_t)((uint64_t)(x) - (uint64_t)(y)))
#define WMUL(x, y) ((int64_t)((uint64_t)(x) * (uint64_t)(y)))
/* long double holds every int64 and double exactly, so this compares exactly. */
#define LD(x) ((long double)(x))

#define I64_KERNELS(X)                                                                             \
    X(COPY, x[i])                                                                                  \
    X(NEG, WSUB(0, x[i]))                                                                          \
    X(ABS, x[i] < 0 ? WSUB(0, x[i]) : x[i])                                                        \
    X(SIGN, (x[i] > 0) - (x[i] < 0))                                                               \
    X(SQUARE, WMUL(x[i], x[i]))                                                                    \
    X(FLOOR, x[i])                                                                                 \
    X(CEIL, x[i])                                                                                  \
    X(TRUNC, x[i])                                                                                 \
    X(ROUND, x[i])                                                                                 \
    X(ADD_S, WADD(x[i], ip))                                                                       \
    X(SUB_S, WSUB(x[i], ip))                                                                       \
    X(RSUB_S, WSUB(ip, x[i]))                                                                      \
    X(MUL_S, WMUL(x[i], ip))                                                                       \
    X(MAX_S, LD(x[i]) < LD(p0) ? ip : x[i])                                                        \
    X(MIN_S, LD(x[i]) > LD(p0) ? ip : x[i])                                                        \
    X(LT_S, LD(x[i]) < LD(p0))                                                                     \
    X(LE_S, LD(x[i]) <= LD(p0))                                                                    \
    X(GT_S, LD(x[i]) > LD(p0))                                                                     \
    X(GE_S, LD(x[i]) >= LD(p0))                                                                    \
    X(EQ_S, LD(x[i]) == LD(p0))                                                                    \
    X(NE_S, LD(x[i]) != LD(p0))                                                                    \
    X(FILL, ip)                                                                                    \
    X(ADD, WADD(x[i], WMUL(ip, y[i])))                                                             \
    X(SUB, WSUB(x[i], WMUL(ip, y[i])))                                                             \
    X(MUL, WMUL(x[i], y[i]))                                                                       \
    X(MAX, x[i] > y[i] ? x[i] : y[i])                                                              \
    X(MIN, x[i] < y[i] ? x[i] : y[i])                                                              \
    X(LT, x[i] < y[i])                                                                             \
    X(LE, x[i] <= y[i])                                                                            \
    X(GT, x[i] > y[i])                                                                             \
    X(GE, x[i] >= y[i])                                                                            \
    X(EQ, x[i] == y[i])                                                                            \
    X(NE, x[i] != y[i])                                                                            \
    X(MASKED_FILL, y[i] ? ip : x[i])                                                               \
    X(WHERE, x[i] ? y[i] : z[i])

#define I64_DEF(NAME, EXPR)                                                                        \
    static void kern_i64_##NAME(int64_t n, void *out, const void *a, const void *b, const void *c, \
                                double p0, double p1) {                                            \
        int64_t *o = out, ip = kern_d2i(p0);                                                       \
        const int64_t *x = a, *y = b, *z = c;                                                      \
        (void)x, (void)y, (void)z, (void)p0, (void)p1, (void)ip;                                   \
        for (int64_t i = 0; i < n; i++)                                                            \
            o[i] = (int64_t)(EXPR);                                                                \
    }
I64_KERNELS(I64_DEF)

static const kern_pw_fn kern_i64_table[KPW__COUNT] = {
#define I64_TAB(NAME, EXPR) [KPW_##NAME] = kern_i64_##NAME,
    I64_KERNELS(I64_TAB)
#undef I64_TAB
};

/* ------------------------------------------------------------------ bool kernels */

/* Bytes that are 0 or 1. Arithmetic on bools is logical, as PyTorch's: add (alpha 1) and
 * max are or, mul and min are and; comparisons with a scalar read a bool as 0 or 1. */
#define BOOL_KERNELS(X)                                                                            \
    X(COPY, x[i])                                                                                  \
    X(FILL, p0 != 0)                                                                               \
    X(LT_S, x[i] < p0)                                                                             \
    X(LE_S, x[i] <= p0)                                                                            \
    X(GT_S, x[i] > p0)                                                                             \
    X(GE_S, x[i] >= p0)                                                                            \
    X(EQ_S, x[i] == p0)                                                                            \
    X(NE_S, x[i] != p0)                                                                            \
    X(ADD, x[i] | (p0 != 0 && y[i]))                                                               \
    X(MUL, x[i] & y[i])                                                                            \
    X(MAX, x[i] | y[i])                                                                            \
    X(MIN, x[i] & y[i])                                                                            \
    X(LT, x[i] < y[i])                                                                             \
    X(LE, x[i] <= y[i])                                                                            \
    X(GT, x[i] > y[i])                                                                             \
    X(GE, x[i] >= y[i])                                                                            \
    X(EQ, x[i] == y[i])                                                                            \
    X(NE, x[i] != y[i])                                                                            \
    X(MASKED_FILL, y[i] ? p0 != 0 : x[i])                                                          \
    X(WHERE, x[i] ? y[i] : z[i])

#define BOOL_DEF(NAME, EXPR)                                                                       \
    static void kern_bool_##NAME(int64_t n, void *out, const void *a, const void *b,               \
                                 const void *c, double p0, double p1) {                            \
        uint8_t *o = out;                                                                          \
        const uint8_t *x = a, *y = b, *z = c;                                                      \
        (void)x, (void)y, (void)z, (void)p0, (void)p1;                                             \
        for (int64_t i = 0; i < n; i++)                                                            \
            o[i] = (uint8_t)((EXPR) != 0);                                                         \
    }
BOOL_KERNELS(BOOL_DEF)

static const kern_pw_fn kern_bool_table[KPW__COUNT] = {
#define BOOL_TAB(NAME, EXPR) [KPW_##NAME] = kern_bool_##NAME,
    BOOL_KERNELS(BOOL_TAB)
#undef BOOL_TAB
};

bool cai_kern_pw_supports(kern_pw_op op, kern_dtype dt) {
    if ((unsigned)op >= KPW__COUNT)
        return false;
    if (dt == KERN_BOOL)
        return kern_bool_table[op] != NULL;
    return dt == KERN_I64 ? kern_i64_table[op] != NULL : dt == KERN_F32 || dt == KERN_F64;
}

kern_pw_fn cai_kern_pw_kernel(kern_pw_op op, kern_dtype dt) {
    if ((unsigned)op >= KPW__COUNT)
        return NULL;
    const kern_simd *simd = cai_kern_simd_for(dt);
    if (simd)
        return simd->pw[op];
    return dt == KERN_I64 ? kern_i64_table[op] : dt == KERN_BOOL ? kern_bool_table[op] : NULL;
}

/* ------------------------------------------------------------------ the iterator */

typedef struct {
    kern_pw_fn fn;
    int nin;                /* inputs the kernel reads */
    int conv;               /* input holding a mask of another dtype, or -1 */
    kern_dtype dt, cond_dt; /* cond_dt: dtype of input `conv` */
    size_t esz;
    int64_t sz[4]; /* element size per operand ([0] output, [1..3] inputs) */
    int nd;
    int64_t shape[KERN_MAX_DIMS];
    int64_t str[4][KERN_MAX_DIMS]; /* [0] output, [1..3] inputs; elements */
    char *base[4];
    double p0, p1;
} kern_pw_plan;

/* The inputs the kernel reads; the clamp only spells out 0..3 for static analysis. */
static inline int kern_pw_nin(const kern_pw_plan *pl) {
    return pl->nin < 0 ? 0 : pl->nin > 3 ? 3 : pl->nin;
}

int cai_kern_collapse_dims(int ndim, const int64_t *shape, int nops, int64_t (*str)[KERN_MAX_DIMS],
                           int64_t *cshape, int64_t (*cstr)[KERN_MAX_DIMS]) {
    int nd = 0; /* collected innermost first */
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] == 1)
            continue;
        bool merge = nd > 0;
        for (int k = 0; merge && k < nops; k++)
            merge = str[k][d] == cstr[k][nd - 1] * cshape[nd - 1];
        if (merge) {
            cshape[nd - 1] *= shape[d];
            continue;
        }
        cshape[nd] = shape[d];
        for (int k = 0; k < nops; k++)
            cstr[k][nd] = str[k][d];
        nd++;
    }
    if (nd == 0) {
        cshape[0] = 1;
        for (int k = 0; k < nops; k++)
            cstr[k][0] = 0;
        nd = 1;
    }
    for (int i = 0, j = nd - 1; i < j; i++, j--) { /* flip to outermost first */
        int64_t t = cshape[i];
        cshape[i] = cshape[j];
        cshape[j] = t;
        for (int k = 0; k < nops; k++) {
            t = cstr[k][i];
            cstr[k][i] = cstr[k][j];
            cstr[k][j] = t;
        }
    }
    return nd;
}

/* A bool mask (bytes 0/1) into float 1/0: the usual case (masked_fill's, where's
 * condition); false when not that case. */
static bool kern_mask_pack_bool(kern_dtype dt, char *dst, int64_t ds, kern_dtype mdt,
                                const char *src, int64_t s, int64_t n) {
    if (mdt != KERN_BOOL || (dt != KERN_F32 && dt != KERN_F64))
        return false;
    const uint8_t *m = (const uint8_t *)src;
    if (s == 1 && ds == 1) {
        cai_kern_bool_to_float(dt, dst, m, n);
    } else if (dt == KERN_F32) {
        float *o = (float *)dst;
        for (int64_t i = 0; i < n; i++)
            o[i * ds] = (float)(m[i * s] != 0);
    } else {
        double *o = (double *)dst;
        for (int64_t i = 0; i < n; i++)
            o[i * ds] = (double)(m[i * s] != 0);
    }
    return true;
}

void cai_kern_mask_pack(kern_dtype dt, char *dst, int64_t ds, kern_dtype mdt, const char *src,
                        int64_t s, int64_t n) {
    if (kern_mask_pack_bool(dt, dst, ds, mdt, src, s, n))
        return;
    int64_t isz = (int64_t)cai_kern_dtype_size(mdt);
    for (int64_t i = 0; i < n; i++) {
        const char *q = src + i * s * isz;
        bool on = kern_load(mdt, q, 0) != 0;
        if (dt == KERN_F32)
            ((float *)dst)[i * ds] = on;
        else if (dt == KERN_F64)
            ((double *)dst)[i * ds] = on;
        else if (dt == KERN_BOOL)
            ((uint8_t *)dst)[i * ds] = on;
        else
            ((int64_t *)dst)[i * ds] = on;
    }
}

/* Packs n elements at stride s into dst at stride ds (elements), converting a mask input
 * to 1/0 of dt. */
static void kern_pw_pack(const kern_pw_plan *pl, int k, char *dst, int64_t ds, const char *src,
                         int64_t s, int64_t n) {
    if (k != pl->conv)
        kern_move_strided(pl->sz[0], dst, ds, src, s, n);
    else
        cai_kern_mask_pack(pl->dt, dst, ds, pl->cond_dt, src, s, n);
}

typedef struct {
    _Alignas(64) char b[4][KERN_PW_BLOCK * 8]; /* [0] output, [1..3] inputs */
} kern_pw_bufs;

/* m <= KERN_PW_BLOCK elements at p[] with strides s[], not all unit: packs what is not
 * contiguous, runs the kernel, unpacks a strided output. A broadcast input (stride 0) is
 * packed only when `fill` is set; callers reuse its buffer while the value is the same. */
static void kern_pw_block(const kern_pw_plan *pl, int64_t m, char *const *p, const int64_t *s,
                          kern_pw_bufs *bf, bool fill) {
    const void *in[3] = {NULL, NULL, NULL};
    for (int k = 0; k < kern_pw_nin(pl); k++) {
        int64_t sk = s[k + 1];
        if (sk == 1 && k != pl->conv) {
            in[k] = p[k + 1];
            continue;
        }
        if (sk != 0 || fill)
            kern_pw_pack(pl, k, bf->b[k + 1], 1, p[k + 1], sk, m);
        in[k] = bf->b[k + 1];
    }
    char *o = s[0] == 1 ? p[0] : bf->b[0];
    pl->fn(m, o, in[0], in[1], in[2], pl->p0, pl->p1);
    if (s[0] != 1)
        kern_move_strided(pl->sz[0], p[0], s[0], bf->b[0], 1, m);
}

/* One row of n elements; p[k] point at its first element, s[k] are its strides. */
static void kern_pw_row(const kern_pw_plan *pl, int64_t n, char *const *p, const int64_t *s) {
    bool direct = s[0] == 1;
    for (int k = 1; k <= kern_pw_nin(pl); k++)
        direct = direct && s[k] == 1 && k - 1 != pl->conv;
    if (direct) {
        pl->fn(n, p[0], p[1], p[2], p[3], pl->p0, pl->p1);
        return;
    }
    kern_pw_bufs bf;
    for (int64_t b = 0; b < n; b += KERN_PW_BLOCK) {
        char *q[4] = {p[0] + b * s[0] * pl->sz[0], NULL, NULL, NULL};
        for (int k = 1; k <= kern_pw_nin(pl); k++)
            q[k] = p[k] + b * s[k] * pl->sz[k];
        /* the first block is the longest, so its broadcast fill serves the row */
        kern_pw_block(pl, n - b < KERN_PW_BLOCK ? n - b : KERN_PW_BLOCK, q, s, &bf, b == 0);
    }
}

#define KERN_PW_TILE_ROWS 16
#define KERN_PW_TILE_COLS 64  /* rows x cols = KERN_PW_BLOCK * 4 elements per buffer */
#define KERN_PW_TILE_SPAN 256 /* rows one column block sweeps before the next */

/* One tile: nrows <= KERN_PW_TILE_ROWS rows of m <= KERN_PW_TILE_COLS columns. A gathered
 * operand is packed column by column, walking its row stride: for a transposed operand
 * that reads whole cache lines, where gathering along a row would touch a line (and, with
 * power-of-two strides, the same cache set) per element. A scattered output likewise. */
static void kern_pw_tile(const kern_pw_plan *pl, int64_t nrows, int64_t m, char *const *p,
                         const int64_t *s, const int64_t *rs) {
    _Alignas(64) char buf[4][KERN_PW_TILE_ROWS * KERN_PW_TILE_COLS * 8];
    const int64_t ld = KERN_PW_TILE_COLS;
    int64_t esz = pl->sz[0];
    for (int k = 0; k < kern_pw_nin(pl); k++) {
        int64_t sk = s[k + 1], isz = pl->sz[k + 1];
        if (sk == 1 && k != pl->conv)
            continue;
        for (int64_t c = 0; c < (sk == 0 ? 1 : m); c++) /* a broadcast row: column 0 only */
            kern_pw_pack(pl, k, buf[k + 1] + c * esz, ld, p[k + 1] + c * sk * isz, rs[k + 1],
                         nrows);
        for (int64_t r = 0; sk == 0 && r < nrows; r++) /* ...spread over the row */
            kern_move_strided(esz, buf[k + 1] + (r * ld + 1) * esz, 1, buf[k + 1] + r * ld * esz, 0,
                              m - 1);
    }
    for (int64_t r = 0; r < nrows; r++) {
        const void *in[3] = {NULL, NULL, NULL};
        for (int k = 0; k < kern_pw_nin(pl); k++)
            in[k] = s[k + 1] == 1 && k != pl->conv ? p[k + 1] + r * rs[k + 1] * pl->sz[k + 1]
                                                   : buf[k + 1] + r * ld * esz;
        char *o = s[0] == 1 ? p[0] + r * rs[0] * esz : buf[0] + r * ld * esz;
        pl->fn(m, o, in[0], in[1], in[2], pl->p0, pl->p1);
    }
    for (int64_t c = 0; s[0] != 1 && c < m; c++)
        kern_move_strided(esz, p[0] + c * s[0] * esz, rs[0], buf[0] + c * esz, ld, nrows);
}

/* nrows full rows of n, rs[k] elements apart: column blocks outside, row groups inside,
 * so a transposed operand's pages stay in the TLB while a block sweeps down the rows. */
static void kern_pw_rows_tiled(const kern_pw_plan *pl, int64_t nrows, int64_t n, char *const *p,
                               const int64_t *s, const int64_t *rs) {
    for (int64_t b = 0; b < n; b += KERN_PW_TILE_COLS)
        for (int64_t r = 0; r < nrows; r += KERN_PW_TILE_ROWS) {
            char *q[4] = {p[0] + (r * rs[0] + b * s[0]) * pl->sz[0], NULL, NULL, NULL};
            for (int k = 1; k <= kern_pw_nin(pl); k++)
                q[k] = p[k] + (r * rs[k] + b * s[k]) * pl->sz[k];
            int64_t m = n - b < KERN_PW_TILE_COLS ? n - b : KERN_PW_TILE_COLS;
            int64_t nr = nrows - r < KERN_PW_TILE_ROWS ? nrows - r : KERN_PW_TILE_ROWS;
            kern_pw_tile(pl, nr, m, q, s, rs);
        }
}

#define KERN_PW_BCAST_BLOCK 1024 /* elements of short rows per kernel call */

/* nrows short rows of n (nrows * n <= KERN_PW_BCAST_BLOCK) in one kernel call: every operand is
 * contiguous across them (rs == n) except inputs broadcast along each row (s == 0), whose
 * rows' values are spread into a buffer first. Row by row, a softmax's x - rowmax or a
 * per-channel scale over 8x8 planes paid a call and a fill per 64 elements. */
static void kern_pw_rows_bcast(const kern_pw_plan *pl, int64_t nrows, int64_t n, char *const *p,
                               const int64_t *s, const int64_t *rs) {
    _Alignas(64) char buf[3][KERN_PW_BCAST_BLOCK * 8];
    const void *in[3] = {NULL, NULL, NULL};
    for (int k = 0; k < kern_pw_nin(pl); k++) {
        if (s[k + 1] != 0) {
            in[k] = p[k + 1];
            continue;
        }
        for (int64_t r = 0; r < nrows; r++)
            kern_pw_pack(pl, k, buf[k] + r * n * pl->sz[0], 1,
                         p[k + 1] + r * rs[k + 1] * pl->sz[k + 1], 0, n);
        in[k] = buf[k];
    }
    pl->fn(nrows * n, p[0], in[0], in[1], in[2], pl->p0, pl->p1);
}

/* Whether short rows can go to kern_pw_rows_bcast: some input broadcast along the rows,
 * every other operand contiguous across them. */
static bool kern_pw_bcast_rows(const kern_pw_plan *pl, int nops, const int64_t *s,
                               const int64_t *rs) {
    int64_t L = pl->shape[pl->nd - 1];
    bool any = false;
    if (pl->nd < 2 || 2 * L > KERN_PW_BCAST_BLOCK)
        return false;
    for (int k = 0; k < nops; k++) {
        bool bcast = k > 0 && s[k] == 0;
        if (!bcast && !(s[k] == 1 && rs[k] == L && (k == 0 || k - 1 != pl->conv)))
            return false;
        any = any || bcast;
    }
    return any;
}

/* Flat range [begin, end) of the collapsed index space: rows, or tiles of rows when an
 * operand is gathered or scattered, or blocks of short rows with a row-broadcast input. */
static void kern_pw_range(void *ctx, int64_t begin, int64_t end) {
    const kern_pw_plan *pl = ctx;
    int nd = pl->nd, nops = kern_pw_nin(pl) + 1;
    int64_t L = pl->shape[nd - 1], j = begin % L, q = begin / L;
    int64_t idx[KERN_MAX_DIMS] = {0}, s[4] = {0, 0, 0, 0}, rs[4] = {0, 0, 0, 0};
    char *p[4] = {NULL, NULL, NULL, NULL};
    bool tiled = false;
    for (int d = nd - 2; d >= 0; d--) {
        idx[d] = q % pl->shape[d];
        q /= pl->shape[d];
    }
    for (int k = 0; k < nops; k++) {
        int64_t off = j * pl->str[k][nd - 1];
        for (int d = 0; d < nd - 1; d++)
            off += idx[d] * pl->str[k][d];
        p[k] = pl->base[k] + off * pl->sz[k];
        s[k] = pl->str[k][nd - 1];
        rs[k] = nd > 1 ? pl->str[k][nd - 2] : 0;
        /* tiles pay off when the operand is closer packed down the rows than along them */
        tiled = tiled || (nd > 1 && s[k] != 0 && s[k] != 1 && llabs(rs[k]) < llabs(s[k]));
    }
    bool bcast = !tiled && kern_pw_bcast_rows(pl, nops, s, rs);
    while (begin < end) {
        int64_t rows = 1, len = L - j < end - begin ? L - j : end - begin;
        if ((tiled || bcast) && j == 0) { /* full rows left in this plane and in the range */
            int64_t most = tiled ? KERN_PW_TILE_SPAN : KERN_PW_BCAST_BLOCK / L;
            rows = (end - begin) / L;
            rows = rows < pl->shape[nd - 2] - idx[nd - 2] ? rows : pl->shape[nd - 2] - idx[nd - 2];
            rows = rows < most ? rows : most;
            if (rows < 1)
                rows = 1;
        }
        if (rows > 1 && tiled)
            kern_pw_rows_tiled(pl, rows, L, p, s, rs);
        else if (rows > 1)
            kern_pw_rows_bcast(pl, rows, L, p, s, rs);
        else
            kern_pw_row(pl, len, p, s);
        begin += rows > 1 ? rows * L : len;
        if (begin >= end)
            break;
        for (int k = 0; k < nops; k++) /* back to the row start, then carry */
            p[k] -= j * s[k] * pl->sz[k];
        j = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int d = nd - 2; d >= 0; d--) {
                bool carry = ++idx[d] == pl->shape[d];
                for (int k = 0; k < nops; k++)
                    p[k] += (carry ? -(pl->shape[d] - 1) : 1) * pl->str[k][d] * pl->sz[k];
                if (!carry)
                    break;
                idx[d] = 0;
            }
    }
}

int cai_kern_pointwise(kern_pw_op op, kern_dtype dt, kern_dtype cond_dt, int ndim,
                       const int64_t *shape, void *out, const int64_t *out_strides,
                       const kern_src *src, double p0, double p1) {
    if ((unsigned)op >= KPW__COUNT || ndim < 0 || ndim > KERN_MAX_DIMS ||
        cai_kern_dtype_size(dt) == 0)
        return -1;
    kern_pw_plan pl = {.dt = dt, .cond_dt = dt, .esz = cai_kern_dtype_size(dt), .conv = -1};
    pl.fn = cai_kern_pw_kernel(op, dt);
    if (!pl.fn)
        return -1;
    int cond = cai_kern_pw_cond_input(op);
    if (cond >= 0 && cond_dt != dt) {
        if (cai_kern_dtype_size(cond_dt) == 0)
            return -1;
        pl.conv = cond;
        pl.cond_dt = cond_dt;
    }
    int64_t total = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return -1;
        total *= shape[d];
    }
    if (total == 0)
        return 0;
    pl.nin = cai_kern_pw_reads(op);
    pl.p0 = p0;
    pl.p1 = p1;
    for (int k = 0; k < 4; k++)
        pl.sz[k] = (int64_t)(k - 1 == pl.conv && k > 0 ? cai_kern_dtype_size(pl.cond_dt) : pl.esz);
    int64_t str[4][KERN_MAX_DIMS]; /* the caller's strides; pl.str gets them collapsed */
    pl.base[0] = out;
    for (int d = 0; d < ndim; d++)
        str[0][d] = out_strides[d];
    for (int k = 0; k < pl.nin; k++) {
        pl.base[k + 1] = (char *)src[k].data;
        for (int d = 0; d < ndim; d++)
            str[k + 1][d] = src[k].strides[d];
    }
    pl.nd = cai_kern_collapse_dims(ndim, shape, pl.nin + 1, str, pl.shape, pl.str);
    if (total >= 2 * KERN_GRAIN)
        cai_kern_parallel_for(total, KERN_GRAIN, kern_pw_range, &pl);
    else
        kern_pw_range(&pl, 0, total);
    return 0;
}
