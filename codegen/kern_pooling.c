/* kern_pooling.c - 2-d max and average pooling over planes [planes, h, w] (planes = the
 * image batch times its channels), split over the planes on the thread pool.
 *
 * Windows follow PyTorch's CPU kernels: a max window skips padding and takes the first
 * largest value, or the last NaN (PyTorch's `val > max || isnan(val)`); an average window sums in
 * the element type, row by row, and divides by the window's size counted with or without padding,
 * or by an override.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kern_internal.h"

#define KERN_POOL_RUN 256 /* interior outputs of a row swept together */

typedef struct {
    kern_dtype dt;
    const kern_pool_geom *g;
    const void *x;
    void *out;
    int64_t *indices; /* max: position h * w + x in the plane */
    void *mask;       /* max: one-hot [planes, kh * kw, oh * ow] of the winner, or NULL */
    const void *div;  /* avg: the divisor of each output position, [oh * ow] */
} kern_pool_job;

/* The first window row or column at or after 0 that the window starting at `start` with
 * dilation d reads: the number of taps to skip. */
static int64_t kern_pool_skip(int64_t start, int64_t d) {
    return start < 0 ? (-start + d - 1) / d : 0;
}

/* One window of max pooling with element type T: the first largest value, or the last
 * NaN (PyTorch's `val > max || isnan(val)`), over the taps from (ki0, kj0) on that lie in
 * the plane; best = -1 when none does. */
#define KERN_MAX_POOL_WINDOW(T, y0, x0, ki0, kj0)                                                  \
    do {                                                                                           \
        for (int64_t ki = (ki0); ki < g->kh; ki++) {                                               \
            int64_t y = (y0) + ki * g->dh;                                                         \
            if (y >= g->h)                                                                         \
                break;                                                                             \
            const T *row = x + y * g->w;                                                           \
            for (int64_t kj = (kj0); kj < g->kw; kj++) {                                           \
                int64_t xx = (x0) + kj * g->dw;                                                    \
                if (xx >= g->w)                                                                    \
                    break;                                                                         \
                T v = row[xx];                                                                     \
                if (best < 0 || v > bv || v != v) {                                                \
                    bv = v;                                                                        \
                    best = y * g->w + xx;                                                          \
                    best_k = ki * g->kw + kj;                                                      \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* Interior outputs [ox0, ox1) of output row oy whose window rows all lie in the plane
 * (row y0 its first): their windows read no padding, so each tap is one sweep along the
 * row (a run of up to KERN_POOL_RUN outputs at a time), updating the values in out and
 * the winners' positions, as 32-bit ints, in place (the first tap sets them) with
 * selects. A branch per tap, as in the window above, mispredicts about half the time on
 * real data: the window's winner is data-dependent. The same rule as the window's (the
 * first largest, or the last NaN), so the same result. Built twice: for any strides, and
 * with column stride 2 and no dilation as constants (2x2 and 3x3 pooling at stride 2),
 * whose sweeps vectorise. */
#define KERN_MAX_POOL_INTERIOR_DEFINE(T, name, SW, DW)                                             \
    static void name(const kern_pool_geom *g, const T *x, int64_t y0, int64_t ox0, int64_t ox1,    \
                     void *out_, int64_t *restrict idx) {                                          \
        typedef T elem_t;                                                                          \
        elem_t *restrict out = out_;                                                               \
        int64_t sw = (SW), dw = (DW), taps = g->kh * g->kw;                                        \
        int32_t win[KERN_POOL_RUN]; /* 32-bit, as wide as a float: the selects vectorise */        \
        for (int64_t c0 = ox0; c0 < ox1; c0 += KERN_POOL_RUN) {                                    \
            int64_t n = ox1 - c0 < KERN_POOL_RUN ? ox1 - c0 : KERN_POOL_RUN;                       \
            int64_t at = y0 * g->w - g->pw + c0 * sw; /* tap (0, 0) sets the run's values */       \
            elem_t *restrict best = out + c0;                                                      \
            const elem_t *restrict r = x + at;                                                     \
            for (int64_t q = 0; q < n; q++) {                                                      \
                best[q] = r[q * sw];                                                               \
                win[q] = (int32_t)at + (int32_t)(q * sw);                                          \
            }                                                                                      \
            for (int64_t t = 1; t < taps; t++) {                                                   \
                int64_t ki = t / g->kw, kj = t % g->kw;                                            \
                at = (y0 + ki * g->dh) * g->w + kj * dw - g->pw + c0 * sw;                         \
                r = x + at;                                                                        \
                int32_t at32 = (int32_t)at, sw32 = (int32_t)sw;                                    \
                for (int64_t q = 0; q < n; q++) {                                                  \
                    elem_t v = r[q * sw];                                                          \
                    bool take = (v > best[q]) | (v != v); /* no short circuit, no branch */        \
                    best[q] = take ? v : best[q];                                                  \
                    win[q] = take ? at32 + (int32_t)q * sw32 : win[q];                             \
                }                                                                                  \
            }                                                                                      \
            for (int64_t q = 0; q < n; q++)                                                        \
                idx[c0 + q] = win[q];                                                              \
        }                                                                                          \
    }

/* GCC: vectorise the sweeps (the dynamic cost model; -O2's very cheap one takes no loop
 * that needs a remainder). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("vect-cost-model=dynamic")
#endif
KERN_MAX_POOL_INTERIOR_DEFINE(float, kern_max_pool_interior_s2_f32, 2, 1)
KERN_MAX_POOL_INTERIOR_DEFINE(double, kern_max_pool_interior_s2_f64, 2, 1)
KERN_MAX_POOL_INTERIOR_DEFINE(float, kern_max_pool_interior_f32, g->sw, g->dw)
KERN_MAX_POOL_INTERIOR_DEFINE(double, kern_max_pool_interior_f64, g->sw, g->dw)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

/* The output columns [*ox0, *ox1) whose windows lie within the plane's columns. */
static void kern_max_pool_inner_cols(const kern_pool_geom *g, int64_t *ox0, int64_t *ox1) {
    int64_t last = g->w - 1 - (g->kw - 1) * g->dw + g->pw; /* the largest x0 + pw inside */
    *ox0 = (g->pw + g->sw - 1) / g->sw;
    *ox1 = last < 0 ? 0 : last / g->sw + 1;
    *ox1 = *ox1 < g->ow ? *ox1 : g->ow;
    *ox0 = *ox0 < *ox1 ? *ox0 : *ox1;
}

/* One plane of max pooling with element type T, output row by output row: the interior
 * of rows whose windows read no padding branch-free (without a mask to fill), the rest
 * window by window. */
#define KERN_MAX_POOL_PLANE(T, sfx)                                                                \
    do {                                                                                           \
        typedef T elem_t;                                                                          \
        const elem_t *x = (const elem_t *)j->x + p * g->h * g->w;                                  \
        elem_t *out = (elem_t *)j->out + p * L,                                                    \
               *mask = j->mask ? (elem_t *)j->mask + p * K * L : NULL;                             \
        int64_t *idx = j->indices + p * L, in0, in1;                                               \
        bool small = g->h * g->w <= INT32_MAX; /* the interior's positions are 32-bit */           \
        kern_max_pool_inner_cols(g, &in0, &in1);                                                   \
        if (mask)                                                                                  \
            memset(mask, 0, sizeof(elem_t) * (size_t)(K * L));                                     \
        for (int64_t oy = 0; oy < g->oh; oy++) {                                                   \
            int64_t y0 = oy * g->sh - g->ph, ki0 = kern_pool_skip(y0, g->dh);                      \
            int64_t ox0 = 0, ox1 = 0, o = oy * g->ow;                                              \
            if (!mask && small && y0 >= 0 && y0 + (g->kh - 1) * g->dh < g->h) {                    \
                ox0 = in0;                                                                         \
                ox1 = in1;                                                                         \
                if (g->sw == 2 && g->dw == 1)                                                      \
                    kern_max_pool_interior_s2_##sfx(g, x, y0, ox0, ox1, out + o, idx + o);         \
                else                                                                               \
                    kern_max_pool_interior_##sfx(g, x, y0, ox0, ox1, out + o, idx + o);            \
            }                                                                                      \
            for (int64_t ox = 0; ox < g->ow; ox++) {                                               \
                if (ox == ox0 && ox1 > ox0)                                                        \
                    ox = ox1; /* done above */                                                     \
                if (ox >= g->ow)                                                                   \
                    break;                                                                         \
                int64_t x0 = ox * g->sw - g->pw, best = -1, best_k = 0;                            \
                elem_t bv = 0;                                                                     \
                KERN_MAX_POOL_WINDOW(elem_t, y0, x0, ki0, kern_pool_skip(x0, g->dw));              \
                out[o + ox] = best >= 0 ? bv : (elem_t)-INFINITY;                                  \
                idx[o + ox] = best;                                                                \
                if (mask && best >= 0)                                                             \
                    mask[best_k * L + o + ox] = 1;                                                 \
            }                                                                                      \
        }                                                                                          \
    } while (0)

static void kern_max_pool_planes(void *ctx, int64_t begin, int64_t end) {
    const kern_pool_job *j = ctx;
    const kern_pool_geom *g = j->g;
    int64_t L = g->oh * g->ow, K = g->kh * g->kw;
    for (int64_t p = begin; p < end; p++) {
        if (j->dt == KERN_F32)
            KERN_MAX_POOL_PLANE(float, f32);
        else
            KERN_MAX_POOL_PLANE(double, f64);
    }
}

/* One plane of average pooling with element type T, summed in T (PyTorch's opmath type on
 * the CPU is the element type for float32 and float64). */
#define KERN_AVG_POOL_PLANE(T)                                                                     \
    do {                                                                                           \
        typedef T elem_t;                                                                          \
        const elem_t *x = (const elem_t *)j->x + p * g->h * g->w, *div = (const elem_t *)j->div;   \
        elem_t *out = (elem_t *)j->out + p * L;                                                    \
        for (int64_t o = 0; o < L; o++) {                                                          \
            int64_t y0 = (o / g->ow) * g->sh - g->ph, x0 = (o % g->ow) * g->sw - g->pw;            \
            int64_t y1 = y0 + g->kh < g->h ? y0 + g->kh : g->h;                                    \
            int64_t x1 = x0 + g->kw < g->w ? x0 + g->kw : g->w;                                    \
            elem_t sum = 0;                                                                        \
            for (int64_t y = y0 < 0 ? 0 : y0; y < y1; y++)                                         \
                for (int64_t xx = x0 < 0 ? 0 : x0; xx < x1; xx++)                                  \
                    sum += x[y * g->w + xx];                                                       \
            out[o] = sum / div[o];                                                                 \
        }                                                                                          \
    } while (0)

static void kern_avg_pool_planes(void *ctx, int64_t begin, int64_t end) {
    const kern_pool_job *j = ctx;
    const kern_pool_geom *g = j->g;
    int64_t L = g->oh * g->ow;
    for (int64_t p = begin; p < end; p++) {
        if (j->dt == KERN_F32)
            KERN_AVG_POOL_PLANE(float);
        else
            KERN_AVG_POOL_PLANE(double);
    }
}

static int64_t kern_pool_grain(const kern_pool_geom *g) {
    int64_t per = g->oh * g->ow * g->kh * g->kw;
    return per >= KERN_GRAIN ? 1 : KERN_GRAIN / (per > 0 ? per : 1);
}

int cai_kern_max_pool2d(kern_dtype dt, const kern_pool_geom *g, const void *x, void *out,
                        int64_t *indices, void *mask) {
    if (dt == KERN_I64 || g->planes < 0 || g->oh < 0 || g->ow < 0)
        return -1;
    kern_pool_job j = {dt, g, x, out, indices, mask, NULL};
    cai_kern_parallel_for(g->planes, kern_pool_grain(g), kern_max_pool_planes, &j);
    return 0;
}

void cai_kern_avg_pool2d_divisors(kern_dtype dt, const kern_pool_geom *g, bool count_include_pad,
                                  int64_t divisor_override, void *div) {
    for (int64_t o = 0; o < g->oh * g->ow; o++) {
        int64_t y0 = (o / g->ow) * g->sh - g->ph, x0 = (o % g->ow) * g->sw - g->pw;
        int64_t y1 = y0 + g->kh < g->h + g->ph ? y0 + g->kh : g->h + g->ph;
        int64_t x1 = x0 + g->kw < g->w + g->pw ? x0 + g->kw : g->w + g->pw;
        int64_t padded = (y1 - y0) * (x1 - x0);
        y0 = y0 < 0 ? 0 : y0;
        x0 = x0 < 0 ? 0 : x0;
        y1 = y1 < g->h ? y1 : g->h;
        x1 = x1 < g->w ? x1 : g->w;
        int64_t inside = y0 < y1 && x0 < x1 ? (y1 - y0) * (x1 - x0) : 0;
        int64_t d = divisor_override ? divisor_override : count_include_pad ? padded : inside;
        kern_store(dt, div, o, inside > 0 ? (double)d : 1.0); /* empty: the sum is 0 */
    }
}

int cai_kern_avg_pool2d(kern_dtype dt, const kern_pool_geom *g, const void *x, const void *div,
                        void *out) {
    if (dt == KERN_I64 || g->planes < 0 || g->oh < 0 || g->ow < 0)
        return -1;
    kern_pool_job j = {dt, g, x, out, NULL, NULL, div};
    cai_kern_parallel_for(g->planes, kern_pool_grain(g), kern_avg_pool_planes, &j);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * adaptive average pooling: output row o averages input rows [floor(o*h/oh),
 * ceil((o+1)*h/oh)), as PyTorch's adaptive kernels
 */
static int64_t kern_adaptive_start(int64_t o, int64_t in, int64_t out) {
    return o * in / out;
}

static int64_t kern_adaptive_end(int64_t o, int64_t in, int64_t out) {
    return ((o + 1) * in + out - 1) / out;
}

static void kern_adaptive_planes(void *ctx, int64_t begin, int64_t end) {
    const kern_pool_job *j = ctx;
    const kern_pool_geom *g = j->g;
    for (int64_t p = begin; p < end; p++) {
        int64_t base = p * g->h * g->w;
        for (int64_t oy = 0; oy < g->oh; oy++) {
            int64_t y0 = kern_adaptive_start(oy, g->h, g->oh),
                    y1 = kern_adaptive_end(oy, g->h, g->oh);
            for (int64_t ox = 0; ox < g->ow; ox++) {
                int64_t x0 = kern_adaptive_start(ox, g->w, g->ow);
                int64_t x1 = kern_adaptive_end(ox, g->w, g->ow);
                double sum = 0;
                float sum32 = 0;
                for (int64_t y = y0; y < y1; y++)
                    for (int64_t x = x0; x < x1; x++) {
                        double v = kern_load(j->dt, j->x, base + y * g->w + x);
                        sum += v;
                        sum32 += (float)v;
                    }
                double r = j->dt == KERN_F32 ? (double)(sum32 / (float)(y1 - y0) / (float)(x1 - x0))
                                             : sum / (double)(y1 - y0) / (double)(x1 - x0);
                kern_store(j->dt, j->out, (p * g->oh + oy) * g->ow + ox, r);
            }
        }
    }
}

int cai_kern_adaptive_avg_pool2d(kern_dtype dt, const kern_pool_geom *g, const void *x, void *out) {
    if (dt == KERN_I64 || g->planes < 0 || g->oh < 1 || g->ow < 1 || g->h < 1 || g->w < 1)
        return -1;
    kern_pool_job j = {dt, g, x, out, NULL, NULL, NULL};
    int64_t per = g->h * g->w;
    cai_kern_parallel_for(g->planes, per >= KERN_GRAIN ? 1 : KERN_GRAIN / per, kern_adaptive_planes,
                          &j);
    return 0;
}

void cai_kern_adaptive_weights(kern_dtype dt, int64_t in, int64_t out, void *mat) {
    for (int64_t o = 0; o < out; o++) {
        int64_t lo = kern_adaptive_start(o, in, out), hi = kern_adaptive_end(o, in, out);
        for (int64_t i = 0; i < in; i++)
            kern_store(dt, mat, o * in + i, i >= lo && i < hi ? 1.0 / (double)(hi - lo) : 0.0);
    }
}
