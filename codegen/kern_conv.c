/* kern_conv.c - im2col and col2im, the unfold and fold that conv2d is built on.
 *
 * im2col lays every receptive field of an image batch out as a column, so that a
 * convolution is a GEMM; col2im is its adjoint: every column entry is added back onto the
 * input position it was read from (padding positions are dropped). Work is split over
 * (image, channel) pairs: each pair reads and writes only its own rows and its own plane,
 * so no two threads touch the same element and the sums are in the same order on every
 * run and thread count.
 */
#include "kern_conv_rows.h"

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

/* At unit strides with ow == w, output row oy of kernel row ki reads input row oy - *top,
 * for the output rows [*oy0, *oy1) (*oy1 >= *oy0; the others read padding), and the rows
 * of a plane read one after another are consecutive rows of the input. */
static bool conv_whole_rows(const kern_conv_geom *g, int64_t ki, int64_t *top, int64_t *oy0,
                            int64_t *oy1) {
    if (g->sw != 1 || g->sh != 1 || g->ow != g->w)
        return false;
    *top = g->ph - ki * g->dh; /* iy = oy - top */
    *oy0 = *top > 0 ? *top : 0;
    if (*oy0 > g->oh) /* a padding above taller than the output (a 1-row image, 5 taps) */
        *oy0 = g->oh;
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

/* The vector loops of an ISA and dtype (kern_conv_vec.inc). */
typedef struct {
    kern_range_fn im2col, col2im;
} conv_rows_fns;

/* The vector loops that take a geometry whose rows of `width` entries (im2col's output
 * rows, col2im's image rows) have unit element stride (`unit`), or NULL. */
static const conv_rows_fns *conv_rows_in_vector(kern_dtype dt, const kern_conv_geom *g,
                                                int64_t width, bool unit) {
    static const conv_rows_fns fns[2][2] = {
        {{cai_im2col_range_avx2_f32, cai_col2im_range_avx2_f32},
         {cai_im2col_range_avx2_f64, cai_col2im_range_avx2_f64}},
        {{cai_im2col_range_avx512_f32, cai_col2im_range_avx512_f32},
         {cai_im2col_range_avx512_f64, cai_col2im_range_avx512_f64}}};
    kern_isa_level isa = cai_kern_isa();
    if (isa < KERN_ISA_AVX2 || !unit || g->sw != 1 || g->kw > CONV_VEC_KW ||
        width * (int64_t)cai_kern_dtype_size(dt) > CONV_ROW_BYTES)
        return NULL;
    return &fns[isa == KERN_ISA_AVX512][dt == KERN_F64];
}

int cai_kern_im2col(kern_dtype dt, const kern_conv_geom *g, const void *x, const int64_t *xs,
                    void *cols, const int64_t *cs) {
    if ((dt != KERN_F32 && dt != KERN_F64) || !g || !cai_kern_conv_geom_ok(g) || cs[3] != 1)
        return -1;
    if (g->n * g->c * g->oh * g->ow == 0)
        return 0;
    conv_job j = {g, x, xs, cols, cs, NULL};
    bool f32 = dt == KERN_F32;
    kern_range_fn fn = f32 ? im2col_range_f32 : im2col_range_f64;
    /* where a kernel row's taps are one block copy (im2col_rows_at_once), that is faster */
    bool blocks = g->sh == 1 && g->ow == g->w && xs[2] == g->w;
    const conv_rows_fns *vec = blocks ? NULL : conv_rows_in_vector(dt, g, g->ow, xs[3] == 1);
    if (vec)
        fn = vec->im2col;
    cai_kern_parallel_for(g->n * g->c, conv_grain(g), fn, &j);
    return 0;
}

int cai_kern_col2im(kern_dtype dt, const kern_conv_geom *g, const void *cols, const int64_t *cs,
                    void *out) {
    if ((dt != KERN_F32 && dt != KERN_F64) || !g || !cai_kern_conv_geom_ok(g))
        return -1;
    if (g->n * g->c * g->h * g->w == 0)
        return 0;
    conv_job j = {g, cols, cs, out, NULL, cai_kern_pw_kernel(KPW_ADD, dt)};
    bool f32 = dt == KERN_F32;
    kern_range_fn fn = f32 ? col2im_range_f32 : col2im_range_f64;
    const conv_rows_fns *vec = conv_rows_in_vector(dt, g, g->w, cs[3] == 1);
    if (vec)
        fn = vec->col2im;
    cai_kern_parallel_for(g->n * g->c, conv_grain(g), fn, &j);
    return 0;
}
