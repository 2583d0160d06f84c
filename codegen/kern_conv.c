/* kern_conv.c - im2col and col2im, the unfold and fold that conv2d is built on.
 *
 * im2col lays every receptive field of an image batch out as a column, so that a
 * convolution is a GEMM; col2im is its adjoint: every column entry is added back onto the
 * input position it was read from (padding positions are dropped). Work is split over
 * (image, channel) pairs: each pair reads and writes only its own rows and its own plane,
 * so no two threads touch the same element and the sums are in the same order on every
 * run and thread count.
 */
#include "kern_internal.h"

#include <string.h>

int64_t cai_kern_conv_out_size(int64_t in, int64_t k, int64_t s, int64_t pads, int64_t d) {
    if (s <= 0)
        return -1;
    int64_t span = in + pads - d * (k - 1) - 1;
    return span < 0 ? 0 : span / s + 1;
}

bool cai_kern_conv_geom_ok(const kern_conv_geom *g) {
    return g->n >= 0 && g->c >= 0 && g->h >= 0 && g->w >= 0 && g->kh >= 1 && g->kw >= 1 &&
           g->sh >= 1 && g->sw >= 1 && g->ph >= 0 && g->pw >= 0 && g->dh >= 1 && g->dw >= 1 &&
           g->ph_end >= 0 && g->pw_end >= 0 && g->groups >= 1 && g->c % g->groups == 0 &&
           g->oh == cai_kern_conv_out_size(g->h, g->kh, g->sh, g->ph + g->ph_end, g->dh) &&
           g->ow == cai_kern_conv_out_size(g->w, g->kw, g->sw, g->pw + g->pw_end, g->dw);
}

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
static int64_t cols_plane(const kern_conv_geom *g, const int64_t *cs, int64_t n, int64_t c) {
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
static void conv_valid_cols(const kern_conv_geom *g, int64_t first, int64_t *lo, int64_t *hi) {
    int64_t s = g->sw;
    int64_t l = first >= 0 ? 0 : (-first + s - 1) / s;              /* first ox with ix >= 0 */
    int64_t h = g->w - first <= 0 ? 0 : (g->w - first + s - 1) / s; /* first ox with ix >= w */
    *lo = l < g->ow ? l : g->ow;
    *hi = h < g->ow ? h : g->ow;
    if (*hi < *lo)
        *hi = *lo;
}

/* At unit strides with ow == w, output row oy of kernel row ki reads input row oy - *top,
 * for the output rows [*oy0, *oy1) (*oy1 >= *oy0; the others read padding), and the rows
 * of a plane read one after another are consecutive rows of the input. */
static bool conv_whole_rows(const kern_conv_geom *g, int64_t ki, int64_t *top, int64_t *oy0,
                            int64_t *oy1) {
    if (g->sw != 1 || g->sh != 1 || g->ow != g->w)
        return false;
    *top = g->ph - ki * g->dh; /* iy = oy - top */
    *oy0 = *top > 0 ? *top : 0;
    *oy1 = g->h + *top < g->oh ? g->h + *top : g->oh;
    if (*oy1 < *oy0)
        *oy1 = *oy0;
    return true;
}

/* Rows this short (a small image's, as LeNet's 10-wide) are copied and added by a plain
 * loop: a call per row (memcpy, the ISA's add kernel) costs more than the row. */
#define CONV_SHORT_ROW 16

/* The typed loops, once per float dtype. */
#define CONV_T        float
#define CONV_FN(name) name##_f32
#include "kern_conv.inc"
#undef CONV_T
#undef CONV_FN
#define CONV_T        double
#define CONV_FN(name) name##_f64
#include "kern_conv.inc"
#undef CONV_T
#undef CONV_FN

/* Planes per unit of work: about KERN_GRAIN elements each. */
static int64_t conv_grain(const kern_conv_geom *g) {
    int64_t per = g->kh * g->kw * g->oh * g->ow + g->h * g->w;
    return per >= KERN_GRAIN ? 1 : KERN_GRAIN / (per > 0 ? per : 1);
}

int cai_kern_im2col(kern_dtype dt, const kern_conv_geom *g, const void *x, const int64_t *xs,
                    void *cols, const int64_t *cs) {
    if ((dt != KERN_F32 && dt != KERN_F64) || !g || !cai_kern_conv_geom_ok(g) || cs[3] != 1)
        return -1;
    if (g->n * g->c * g->oh * g->ow == 0)
        return 0;
    conv_job j = {g, x, xs, cols, cs, NULL};
    cai_kern_parallel_for(g->n * g->c, conv_grain(g),
                          dt == KERN_F32 ? im2col_range_f32 : im2col_range_f64, &j);
    return 0;
}

int cai_kern_col2im(kern_dtype dt, const kern_conv_geom *g, const void *cols, const int64_t *cs,
                    void *out) {
    if ((dt != KERN_F32 && dt != KERN_F64) || !g || !cai_kern_conv_geom_ok(g))
        return -1;
    if (g->n * g->c * g->h * g->w == 0)
        return 0;
    conv_job j = {g, cols, cs, out, NULL, cai_kern_pw_kernel(KPW_ADD, dt)};
    cai_kern_parallel_for(g->n * g->c, conv_grain(g),
                          dt == KERN_F32 ? col2im_range_f32 : col2im_range_f64, &j);
    return 0;
}
