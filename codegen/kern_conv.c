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

int64_t cai_kern_conv_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
    if (s <= 0)
        return -1;
    int64_t span = in + 2 * p - d * (k - 1) - 1;
    return span < 0 ? 0 : span / s + 1;
}

static bool geom_ok(const kern_conv_geom *g) {
    return g->n >= 0 && g->c >= 0 && g->h >= 0 && g->w >= 0 && g->kh >= 1 && g->kw >= 1 &&
           g->sh >= 1 && g->sw >= 1 && g->ph >= 0 && g->pw >= 0 && g->dh >= 1 && g->dw >= 1 &&
           g->groups >= 1 && g->c % g->groups == 0 &&
           g->oh == cai_kern_conv_out_size(g->h, g->kh, g->sh, g->ph, g->dh) &&
           g->ow == cai_kern_conv_out_size(g->w, g->kw, g->sw, g->pw, g->dw);
}

typedef struct {
    const kern_conv_geom *g;
    const char *src;
    const int64_t *ss; /* the source's 4 element strides */
    char *dst;
} conv_job;

/* The element offset of cols row (n, c, ki, kj) in a strided [n, groups, c/groups*kh*kw, l]. */
static int64_t cols_row(const kern_conv_geom *g, const int64_t *cs, int64_t n, int64_t c,
                        int64_t ki, int64_t kj) {
    int64_t cg = g->c / g->groups, k = ((c % cg) * g->kh + ki) * g->kw + kj;
    return n * cs[0] + (c / cg) * cs[1] + k * cs[2];
}

#define CONV_KERNELS(T)                                                                            \
    /* cols rows of (image n, channel c): contiguous [.., c*kh*kw + ki*kw + kj, oh*ow] */          \
    static void im2col_plane_##T(const kern_conv_geom *g, const T *x, const int64_t *xs, T *cols,  \
                                 int64_t n, int64_t c) {                                           \
        const T *xp = x + n * xs[0] + c * xs[1];                                                   \
        int64_t l = g->oh * g->ow;                                                                 \
        for (int64_t ki = 0; ki < g->kh; ki++)                                                     \
            for (int64_t kj = 0; kj < g->kw; kj++) {                                               \
                T *row = cols + ((n * g->c + c) * g->kh * g->kw + ki * g->kw + kj) * l;            \
                for (int64_t oy = 0; oy < g->oh; oy++) {                                           \
                    int64_t iy = oy * g->sh - g->ph + ki * g->dh;                                  \
                    T *o = row + oy * g->ow;                                                       \
                    if (iy < 0 || iy >= g->h) {                                                    \
                        for (int64_t ox = 0; ox < g->ow; ox++)                                     \
                            o[ox] = 0;                                                             \
                        continue;                                                                  \
                    }                                                                              \
                    const T *xr = xp + iy * xs[2];                                                 \
                    for (int64_t ox = 0; ox < g->ow; ox++) {                                       \
                        int64_t ix = ox * g->sw - g->pw + kj * g->dw;                              \
                        o[ox] = ix >= 0 && ix < g->w ? xr[ix * xs[3]] : (T)0;                      \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
    }                                                                                              \
    /* out plane (n, c), contiguous, = the sum of the cols entries read from it */                 \
    static void col2im_plane_##T(const kern_conv_geom *g, const T *cols, const int64_t *cs,        \
                                 T *out, int64_t n, int64_t c) {                                   \
        T *op = out + (n * g->c + c) * g->h * g->w;                                                \
        for (int64_t i = 0; i < g->h * g->w; i++)                                                  \
            op[i] = 0;                                                                             \
        for (int64_t ki = 0; ki < g->kh; ki++)                                                     \
            for (int64_t kj = 0; kj < g->kw; kj++) {                                               \
                const T *row = cols + cols_row(g, cs, n, c, ki, kj);                               \
                for (int64_t oy = 0; oy < g->oh; oy++) {                                           \
                    int64_t iy = oy * g->sh - g->ph + ki * g->dh;                                  \
                    if (iy < 0 || iy >= g->h)                                                      \
                        continue;                                                                  \
                    T *orow = op + iy * g->w;                                                      \
                    const T *src = row + oy * g->ow * cs[3];                                       \
                    for (int64_t ox = 0; ox < g->ow; ox++) {                                       \
                        int64_t ix = ox * g->sw - g->pw + kj * g->dw;                              \
                        if (ix >= 0 && ix < g->w)                                                  \
                            orow[ix] += src[ox * cs[3]];                                           \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
    }                                                                                              \
    static void im2col_range_##T(void *ctx, int64_t begin, int64_t end) {                          \
        const conv_job *j = ctx;                                                                   \
        for (int64_t u = begin; u < end; u++)                                                      \
            im2col_plane_##T(j->g, (const T *)j->src, j->ss, (T *)j->dst, u / j->g->c,             \
                             u % j->g->c);                                                         \
    }                                                                                              \
    static void col2im_range_##T(void *ctx, int64_t begin, int64_t end) {                          \
        const conv_job *j = ctx;                                                                   \
        for (int64_t u = begin; u < end; u++)                                                      \
            col2im_plane_##T(j->g, (const T *)j->src, j->ss, (T *)j->dst, u / j->g->c,             \
                             u % j->g->c);                                                         \
    }

CONV_KERNELS(float)
CONV_KERNELS(double)

/* Planes per unit of work: about KERN_GRAIN elements each. */
static int64_t conv_grain(const kern_conv_geom *g) {
    int64_t per = g->kh * g->kw * g->oh * g->ow + g->h * g->w;
    return per >= KERN_GRAIN ? 1 : KERN_GRAIN / (per > 0 ? per : 1);
}

int cai_kern_im2col(kern_dtype dt, const kern_conv_geom *g, const void *x, const int64_t *xs,
                    void *cols) {
    if ((dt != KERN_F32 && dt != KERN_F64) || !g || !geom_ok(g))
        return -1;
    if (g->n * g->c * g->oh * g->ow == 0)
        return 0;
    conv_job j = {g, x, xs, cols};
    cai_kern_parallel_for(g->n * g->c, conv_grain(g),
                          dt == KERN_F32 ? im2col_range_float : im2col_range_double, &j);
    return 0;
}

int cai_kern_col2im(kern_dtype dt, const kern_conv_geom *g, const void *cols, const int64_t *cs,
                    void *out) {
    if ((dt != KERN_F32 && dt != KERN_F64) || !g || !geom_ok(g))
        return -1;
    if (g->n * g->c * g->h * g->w == 0)
        return 0;
    conv_job j = {g, cols, cs, out};
    cai_kern_parallel_for(g->n * g->c, conv_grain(g),
                          dt == KERN_F32 ? col2im_range_float : col2im_range_double, &j);
    return 0;
}
