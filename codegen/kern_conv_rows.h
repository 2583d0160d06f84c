/* kern_conv_rows.h - what im2col and col2im's loops share (kern_conv.c, the baseline
 * loops for any geometry, and kern_conv_vec.inc, a few vectors a row for narrow images):
 * the job, where a plane's rows sit in the columns, and which output columns read the
 * image.
 */
#ifndef CAGRAD_KERN_CONV_ROWS_H
#define CAGRAD_KERN_CONV_ROWS_H

#include "kern_internal.h"

typedef struct {
    const kern_conv_geom *g;
    const char *src;
    const int64_t *ss; /* the source's 4 element strides */
    char *dst;
    const int64_t *ds; /* im2col: the columns' 4 element strides */
    kern_pw_fn add;    /* col2im: the contiguous a + 1 * b kernel of the dtype and ISA */
} conv_job;

/* The element offset of cols row (n, c, 0, 0) in a strided [n, groups, c/groups*kh*kw, l]:
 * computed once per plane, as its divisions cost more than a short row's copy. */
static inline int64_t cols_plane(const kern_conv_geom *g, const int64_t *cs, int64_t n, int64_t c) {
    int64_t cg = g->c / g->groups;
    return n * cs[0] + (c / cg) * cs[1] + (c % cg) * g->kh * g->kw * cs[2];
}

/* Row (ki, kj)'s offset from its plane's row (0, 0): the taps reversed when g->flip. */
static inline int64_t cols_tap(const kern_conv_geom *g, const int64_t *cs, int64_t ki, int64_t kj) {
    if (g->flip) {
        ki = g->kh - 1 - ki;
        kj = g->kw - 1 - kj;
    }
    return (ki * g->kw + kj) * cs[2];
}

/* The output columns [*lo, *hi) whose input column ox * sw + first lies in [0, w): the
 * others read padding. */
static inline void conv_valid_cols(const kern_conv_geom *g, int64_t first, int64_t *lo,
                                   int64_t *hi) {
    int64_t s = g->sw;
    int64_t l = first >= 0 ? 0 : (-first + s - 1) / s;              /* first ox with ix >= 0 */
    int64_t h = g->w - first <= 0 ? 0 : (g->w - first + s - 1) / s; /* first ox with ix >= w */
    *lo = l < g->ow ? l : g->ow;
    *hi = h < g->ow ? h : g->ow;
    if (*hi < *lo)
        *hi = *lo;
}

/* The vector loops (kern_conv_vec.inc, built as kern_conv_avx512.c and kern_conv_avx2.c),
 * at unit column stride over rows of unit element stride, for images narrow enough that a
 * row fits CONV_ROW_BYTES (32 floats, 16 doubles: two AVX-512 vectors or four AVX2 ones):
 * for im2col an output row (ow), for col2im an image row (w). Masked loads and stores per
 * row, where the baseline loops copy or add a short row entry by entry; col2im sums image
 * rows in registers, in the baseline's order: the same bits. Ranges of (image, channel)
 * planes, as kern_range_fn. */
#define CONV_ROW_BYTES 128
#define CONV_VEC_KW    32 /* col2im's kernel columns, at most */
#define CONV_ROWS      4  /* vectors col2im sums at once: independent chains of adds */
/* Inlined where called with a constant vector count, so each count gets its own loop. */
#define CONV_INLINE inline __attribute__((always_inline))

/* p + k for a k that may point before p's row: the lanes there are masked off and never
 * read, but the address must still be formed without C's pointer arithmetic rules. */
static inline const void *shifted(const void *p, int64_t k, size_t es) {
    return (const void *)((uintptr_t)p + (uintptr_t)(k * (int64_t)es));
}

void cai_im2col_range_avx512_f32(void *job, int64_t begin, int64_t end);
void cai_im2col_range_avx512_f64(void *job, int64_t begin, int64_t end);
void cai_col2im_range_avx512_f32(void *job, int64_t begin, int64_t end);
void cai_col2im_range_avx512_f64(void *job, int64_t begin, int64_t end);
void cai_im2col_range_avx2_f32(void *job, int64_t begin, int64_t end);
void cai_im2col_range_avx2_f64(void *job, int64_t begin, int64_t end);
void cai_col2im_range_avx2_f32(void *job, int64_t begin, int64_t end);
void cai_col2im_range_avx2_f64(void *job, int64_t begin, int64_t end);

#endif
