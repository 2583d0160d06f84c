/* cast.c - dtype conversion over strided index spaces.
 *
 * Casts are rare (explicit ca_to_dtype and its gradient, and a comparison's 0/1 result
 * into bool), so plain loops suffice: a flat one when both sides collapse to one
 * contiguous run, else an index walk.
 */
#include "codegen/cast.h"
#include "codegen/kern_internal.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Element so of out = element si of src, converted. */
static inline void cast_one(kern_dtype out_dt, kern_dtype src_dt, void *out, int64_t so,
                            const void *src, int64_t si) {
    /* a same-dtype int64 cast is a plain copy: the double path would round above 2^53 */
    if (out_dt == KERN_I64 && src_dt == KERN_I64)
        ((int64_t *)out)[so] = ((const int64_t *)src)[si];
    else
        kern_store(out_dt, out, so, kern_load(src_dt, src, si));
}

/* Whether the whole space is one contiguous run on both sides (row-major strides). */
static bool cast_flat(int ndim, const int64_t *shape, const int64_t *out_strides,
                      const int64_t *src_strides) {
    int64_t want = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] != 1 && (out_strides[d] != want || src_strides[d] != want))
            return false;
        want *= shape[d];
    }
    return true;
}

/* The flat loops of the bool casts: typed, so the compiler vectorises them (restrict
 * locals: a byte store could otherwise alias the job's own pointers), split over the pool. */
#define CAST_TO_BOOL(T)                                                                            \
    do {                                                                                           \
        uint8_t *restrict o = j->out;                                                              \
        const T *restrict x = j->src;                                                              \
        for (int64_t i = begin; i < end; i++)                                                      \
            o[i] = x[i] != 0;                                                                      \
    } while (0);
#define CAST_FROM_BOOL(T)                                                                          \
    do {                                                                                           \
        const uint8_t *restrict x = j->src;                                                        \
        T *restrict o = j->out; /* NOLINT(bugprone-macro-parentheses): T is a type */              \
        for (int64_t i = begin; i < end; i++)                                                      \
            o[i] = (T)x[i];                                                                        \
    } while (0);

typedef struct {
    kern_dtype out_dt, src_dt;
    void *out;
    const void *src;
} cast_job;

static void cast_bool_range(void *ctx, int64_t begin, int64_t end) {
    const cast_job *j = ctx;
    bool to_bool = j->out_dt == KERN_BOOL;
    kern_dtype other = to_bool ? j->src_dt : j->out_dt;
    if (to_bool && other == KERN_F32)
        CAST_TO_BOOL(float)
    else if (to_bool && other == KERN_F64)
        CAST_TO_BOOL(double)
    else if (to_bool)
        CAST_TO_BOOL(int64_t)
    else if (other == KERN_F32)
        CAST_FROM_BOOL(float)
    else if (other == KERN_F64)
        CAST_FROM_BOOL(double)
    else
        CAST_FROM_BOOL(int64_t)
}

/* Returns false for a pair without a bool on exactly one side. */
static bool cast_flat_bool(kern_dtype out_dt, kern_dtype src_dt, int64_t n, void *out,
                           const void *src) {
    if ((out_dt == KERN_BOOL) == (src_dt == KERN_BOOL))
        return false;
    cast_job j = {out_dt, src_dt, out, src};
    cai_kern_parallel_for(n, KERN_GRAIN, cast_bool_range, &j);
    return true;
}

void cai_kern_cast(kern_dtype out_dt, kern_dtype src_dt, int ndim, const int64_t *shape, void *out,
                   const int64_t *out_strides, const kern_src *src) {
    int64_t n = 1, idx[KERN_MAX_DIMS] = {0};
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    if (cast_flat(ndim, shape, out_strides, src->strides)) {
        if (cast_flat_bool(out_dt, src_dt, n, out, src->data))
            return;
        for (int64_t i = 0; i < n; i++)
            cast_one(out_dt, src_dt, out, i, src->data, i);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t so = 0, si = 0;
        for (int d = 0; d < ndim; d++) {
            so += idx[d] * out_strides[d];
            si += idx[d] * src->strides[d];
        }
        cast_one(out_dt, src_dt, out, so, src->data, si);
        for (int d = ndim - 1; d >= 0; d--) {
            if (++idx[d] < shape[d])
                break;
            idx[d] = 0;
        }
    }
}

/* ---------------------------------------------------------------------------------------
 * Comparisons of contiguous floats straight into bool bytes
 */
typedef enum { REL_LT, REL_LE, REL_GT, REL_GE, REL_EQ, REL_NE, REL_NONE } cmp_rel;

static cmp_rel cmp_relation(kern_pw_op op, bool *scalar) {
    static const struct {
        kern_pw_op op;
        cmp_rel rel;
        bool scalar;
    } table[] = {
        {KPW_LT, REL_LT, false},  {KPW_LE, REL_LE, false},  {KPW_GT, REL_GT, false},
        {KPW_GE, REL_GE, false},  {KPW_EQ, REL_EQ, false},  {KPW_NE, REL_NE, false},
        {KPW_LT_S, REL_LT, true}, {KPW_LE_S, REL_LE, true}, {KPW_GT_S, REL_GT, true},
        {KPW_GE_S, REL_GE, true}, {KPW_EQ_S, REL_EQ, true}, {KPW_NE_S, REL_NE, true},
    };
    for (size_t k = 0; k < sizeof table / sizeof table[0]; k++)
        if (table[k].op == op) {
            *scalar = table[k].scalar;
            return table[k].rel;
        }
    return REL_NONE;
}

typedef struct {
    cmp_rel rel;
    kern_dtype dt;
    const void *a, *b; /* b NULL: compare with p0 */
    double p0;
    uint8_t *out;
} cmp_job;

/* The scalar is rounded to T first, as the pointwise kernels compare (and PyTorch). */
#define CMP_RUN(T, OPR)                                                                            \
    do {                                                                                           \
        const T *restrict x = j->a, *restrict y = j->b;                                            \
        uint8_t *restrict o = j->out;                                                              \
        T s = (T)j->p0;                                                                            \
        if (y)                                                                                     \
            for (int64_t i = begin; i < end; i++)                                                  \
                o[i] = x[i] OPR y[i];                                                              \
        else                                                                                       \
            for (int64_t i = begin; i < end; i++)                                                  \
                o[i] = x[i] OPR s;                                                                 \
    } while (0)

#define CMP_OPS(T)                                                                                 \
    switch (j->rel) {                                                                              \
    case REL_LT: CMP_RUN(T, <); break;                                                             \
    case REL_LE: CMP_RUN(T, <=); break;                                                            \
    case REL_GT: CMP_RUN(T, >); break;                                                             \
    case REL_GE: CMP_RUN(T, >=); break;                                                            \
    case REL_EQ: CMP_RUN(T, ==); break;                                                            \
    default: CMP_RUN(T, !=); break;                                                                \
    }

#if defined(__SSE2__)
/* 16 elements at a time with SSE2 (every x86-64 has it): the compiler does not vectorise a
 * float compare into bytes at -O2. Lane masks are all ones or zero; packing them down to
 * bytes and keeping bit 0 gives 0/1. The ordered compares are false with a NaN, and
 * cmpneq true, as C's operators. One loop per relation, so none branches inside. */

/* Four 4-lane masks as 16 bytes of 0/1. */
static inline __m128i masks_to_bytes(__m128 m0, __m128 m1, __m128 m2, __m128 m3) {
    __m128i lo = _mm_packs_epi32(_mm_castps_si128(m0), _mm_castps_si128(m1));
    __m128i hi = _mm_packs_epi32(_mm_castps_si128(m2), _mm_castps_si128(m3));
    return _mm_and_si128(_mm_packs_epi16(lo, hi), _mm_set1_epi8(1));
}

/* Two 2-lane double masks as one 4-lane mask (the low half of each 64-bit lane). */
static inline __m128 narrow_pd(__m128d m0, __m128d m1) {
    return _mm_shuffle_ps(_mm_castpd_ps(m0), _mm_castpd_ps(m1), _MM_SHUFFLE(2, 0, 2, 0));
}

/* Block k of 4 lanes (k = 0..3) at i; Y(off) is the other operand at x + off's place. */
#define PS_AT(k, Y) CMP(_mm_loadu_ps(x + i + 4 * (k)), Y(i + 4 * (k)))
#define PD_AT(k, Y)                                                                                \
    narrow_pd(CMP(_mm_loadu_pd(x + i + 4 * (k)), Y##D(i + 4 * (k))),                               \
              CMP(_mm_loadu_pd(x + i + 4 * (k) + 2), Y##D(i + 4 * (k) + 2)))
#define Y_LOAD(off)   _mm_loadu_ps(y + (off))
#define Y_LOADD(off)  _mm_loadu_pd(y + (off))
#define Y_SPLAT(off)  s
#define Y_SPLATD(off) s
#define BLOCK(AT, Y)  masks_to_bytes(AT(0, Y), AT(1, Y), AT(2, Y), AT(3, Y))

/* One relation's blocks: a loop for a tensor operand, one for the scalar. */
#define CMP_BLOCKS_FN(NAME, T, VS, SET1, AT)                                                       \
    static int64_t NAME(const cmp_job *j, int64_t i, int64_t end) {                                \
        const T *x = j->a, *y = j->b;                                                              \
        uint8_t *o = j->out;                                                                       \
        VS s = SET1((T)j->p0);                                                                     \
        if (y)                                                                                     \
            for (; i + 16 <= end; i += 16)                                                         \
                _mm_storeu_si128((__m128i *)(o + i), BLOCK(AT, Y_LOAD));                           \
        else                                                                                       \
            for (; i + 16 <= end; i += 16)                                                         \
                _mm_storeu_si128((__m128i *)(o + i), BLOCK(AT, Y_SPLAT));                          \
        return i;                                                                                  \
    }

#define CMP _mm_cmplt_ps
CMP_BLOCKS_FN(lt_ps, float, __m128, _mm_set1_ps, PS_AT)
#undef CMP
#define CMP _mm_cmple_ps
CMP_BLOCKS_FN(le_ps, float, __m128, _mm_set1_ps, PS_AT)
#undef CMP
#define CMP _mm_cmpgt_ps
CMP_BLOCKS_FN(gt_ps, float, __m128, _mm_set1_ps, PS_AT)
#undef CMP
#define CMP _mm_cmpge_ps
CMP_BLOCKS_FN(ge_ps, float, __m128, _mm_set1_ps, PS_AT)
#undef CMP
#define CMP _mm_cmpeq_ps
CMP_BLOCKS_FN(eq_ps, float, __m128, _mm_set1_ps, PS_AT)
#undef CMP
#define CMP _mm_cmpneq_ps
CMP_BLOCKS_FN(ne_ps, float, __m128, _mm_set1_ps, PS_AT)
#undef CMP
#define CMP _mm_cmplt_pd
CMP_BLOCKS_FN(lt_pd, double, __m128d, _mm_set1_pd, PD_AT)
#undef CMP
#define CMP _mm_cmple_pd
CMP_BLOCKS_FN(le_pd, double, __m128d, _mm_set1_pd, PD_AT)
#undef CMP
#define CMP _mm_cmpgt_pd
CMP_BLOCKS_FN(gt_pd, double, __m128d, _mm_set1_pd, PD_AT)
#undef CMP
#define CMP _mm_cmpge_pd
CMP_BLOCKS_FN(ge_pd, double, __m128d, _mm_set1_pd, PD_AT)
#undef CMP
#define CMP _mm_cmpeq_pd
CMP_BLOCKS_FN(eq_pd, double, __m128d, _mm_set1_pd, PD_AT)
#undef CMP
#define CMP _mm_cmpneq_pd
CMP_BLOCKS_FN(ne_pd, double, __m128d, _mm_set1_pd, PD_AT)
#undef CMP

/* The 16-element blocks of [begin, end); returns where the scalar tail starts. */
static int64_t cmp_blocks(const cmp_job *j, int64_t begin, int64_t end) {
    typedef int64_t (*blocks_fn)(const cmp_job *, int64_t, int64_t);
    static const blocks_fn ps[] = {lt_ps, le_ps, gt_ps, ge_ps, eq_ps, ne_ps};
    static const blocks_fn pd[] = {lt_pd, le_pd, gt_pd, ge_pd, eq_pd, ne_pd};
    return (j->dt == KERN_F32 ? ps : pd)[j->rel](j, begin, end);
}
#else
static int64_t cmp_blocks(const cmp_job *j, int64_t begin, int64_t end) {
    (void)j, (void)end;
    return begin;
}
#endif

static void cmp_range(void *ctx, int64_t begin, int64_t end) {
    const cmp_job *j = ctx;
    begin = cmp_blocks(j, begin, end);
    if (j->dt == KERN_F32)
        CMP_OPS(float)
    else
        CMP_OPS(double)
}

int cai_kern_compare_bool(kern_pw_op op, kern_dtype dt, int64_t n, const void *a, const void *b,
                          double p0, uint8_t *out) {
    bool scalar = false;
    cmp_rel rel = cmp_relation(op, &scalar);
    if (rel == REL_NONE || (dt != KERN_F32 && dt != KERN_F64) || scalar != (b == NULL) || n < 0)
        return -1;
    cmp_job j = {rel, dt, a, b, p0, out};
    cai_kern_parallel_for(n, KERN_GRAIN, cmp_range, &j);
    return 0;
}
