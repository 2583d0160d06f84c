/* test_conv_wino.c - Criterion suite `conv_wino`: 3x3 unit-stride convolutions by
 * Winograd's F(2x2, 3x3) (codegen/kern_conv_wino.c). Forward and weight gradient against a
 * plain double loop: in f64 to rounding, in f32 within a small multiple of the error that
 * im2col + GEMM makes on the same data (so the float64 reference decides that what differs
 * is rounding); odd sizes (partial tiles), asymmetric padding, groups, flipped taps,
 * strided images, beta = 1, several slabs; which geometries take the path; and allocation
 * failure through conv2d's forward and backward.
 */
#include "testutil.h"

#include "autograd/internal.h"
#include "codegen/kern_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    kern_conv_geom g;
    int64_t O;
    bool nhwc; /* the images stored channels last: strided reads */
} wino_case;

static kern_conv_geom geom(int64_t n, int64_t c, int64_t h, int64_t w, int64_t ph, int64_t pw,
                           int64_t ph_end, int64_t pw_end, int64_t groups) {
    kern_conv_geom g = {.n = n,
                        .c = c,
                        .h = h,
                        .w = w,
                        .kh = 3,
                        .kw = 3,
                        .sh = 1,
                        .sw = 1,
                        .ph = ph,
                        .pw = pw,
                        .dh = 1,
                        .dw = 1,
                        .ph_end = ph_end,
                        .pw_end = pw_end,
                        .groups = groups};
    g.oh = cai_kern_conv_out_size(h, 3, 1, ph + ph_end, 1);
    g.ow = cai_kern_conv_out_size(w, 3, 1, pw + pw_end, 1);
    return g;
}

/* The effective tap (ki, kj) of weight entry [o, ci]: turned with flip. */
static int64_t tap(const kern_conv_geom *g, int64_t ki, int64_t kj) {
    return g->flip ? (2 - ki) * 3 + 2 - kj : ki * 3 + kj;
}

/* y[n, o, oy, ox] and dw[o, ci, tap] in double from the same (rounded) values. */
static void reference(const wino_case *t, const double *x, const int64_t *xs, const double *w,
                      const double *gy, double *y, double *dw) {
    const kern_conv_geom *g = &t->g;
    int64_t cg = g->c / g->groups, og = t->O / g->groups, L = g->oh * g->ow;
    memset(dw, 0, sizeof(double) * (size_t)(t->O * cg * 9));
    for (int64_t n = 0; n < g->n; n++)
        for (int64_t o = 0; o < t->O; o++)
            for (int64_t oy = 0; oy < g->oh; oy++)
                for (int64_t ox = 0; ox < g->ow; ox++) {
                    double acc = 0, gv = gy[(n * t->O + o) * L + oy * g->ow + ox];
                    for (int64_t ci = 0; ci < cg; ci++)
                        for (int64_t ki = 0; ki < 3; ki++)
                            for (int64_t kj = 0; kj < 3; kj++) {
                                int64_t iy = oy - g->ph + ki, ix = ox - g->pw + kj;
                                if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w)
                                    continue;
                                int64_t c = o / og * cg + ci,
                                        wi = (o * cg + ci) * 9 + tap(g, ki, kj);
                                double xv = x[n * xs[0] + c * xs[1] + iy * xs[2] + ix * xs[3]];
                                acc += w[wi] * xv;
                                dw[wi] += gv * xv;
                            }
                    y[(n * t->O + o) * L + oy * g->ow + ox] = acc;
                }
}

static double max_err(const float *a, const double *ref, int64_t n, double *scale) {
    double e = 0;
    *scale = 0;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)a[i] - ref[i]));
        *scale = fmax(*scale, fabs(ref[i]));
    }
    return e;
}

/* Runs case t's forward (with beta, onto y0) and weight gradient in f32 through Winograd
 * and through im2col, and in f64 through Winograd; checks each against the reference. */
static void check_case(const wino_case *t, double beta) {
    const kern_conv_geom *g = &t->g;
    cr_assert(cai_kern_conv_winograd_fits(KERN_F32, g, t->O), "the case must take the path");
    int64_t L = g->oh * g->ow, nx = g->n * g->c * g->h * g->w, ny = g->n * t->O * L;
    int64_t nw = t->O * g->c / g->groups * 9;
    int64_t xs[4] = {g->c * g->h * g->w, g->h * g->w, g->w, 1};
    if (t->nhwc) {
        int64_t s[4] = {g->h * g->w * g->c, 1, g->w * g->c, g->c};
        memcpy(xs, s, sizeof s);
    }
    float *xf = malloc(sizeof(float) * (size_t)nx), *wf = malloc(sizeof(float) * (size_t)nw);
    float *gf = malloc(sizeof(float) * (size_t)ny), *y0 = malloc(sizeof(float) * (size_t)ny);
    double *xd = malloc(sizeof(double) * (size_t)nx), *wd = malloc(sizeof(double) * (size_t)nw);
    double *gd = malloc(sizeof(double) * (size_t)ny), *yr = malloc(sizeof(double) * (size_t)ny);
    double *dwr = malloc(sizeof(double) * (size_t)nw);
    for (int64_t i = 0; i < nx; i++)
        xd[i] = xf[i] = (float)sin(0.37 * (double)i + 0.2);
    for (int64_t i = 0; i < nw; i++)
        wd[i] = wf[i] = (float)cos(1.3 * (double)i);
    for (int64_t i = 0; i < ny; i++) {
        gd[i] = gf[i] = (float)sin(0.11 * (double)i - 1.0);
        y0[i] = (float)cos(0.05 * (double)i);
    }
    reference(t, xd, xs, wd, gd, yr, dwr);
    for (int64_t i = 0; i < ny; i++)
        yr[i] += beta * (double)y0[i];
    float *y[2], *dw[2];
    /* im2col's GEMMs all OpenBLAS's: the bound is against a plain GEMM's error (its
     * weight gradient's sums in two levels, cai_kern_gemm_nt_sum_f32, err less) */
    cai_kern_conv_set_gemm_sums(false);
    for (int path = 0; path < 2; path++) { /* 0: Winograd, 1: im2col */
        cai_kern_conv_set_winograd(path == 0);
        y[path] = malloc(sizeof(float) * (size_t)ny);
        dw[path] = malloc(sizeof(float) * (size_t)nw);
        memcpy(y[path], y0, sizeof(float) * (size_t)ny);
        cr_assert_eq(cai_kern_conv2d(KERN_F32, g, xf, xs, wf, t->O, beta, y[path]), 0);
        cr_assert_eq(cai_kern_conv2d_weight_grad(KERN_F32, g, xf, xs, gf, t->O, dw[path]), 0);
    }
    cai_kern_conv_set_winograd(true);
    cai_kern_conv_set_gemm_sums(true);
    /* f32: Winograd's error within 4x im2col's, with a floor of 8 ulps of the scale */
    double sy, sw;
    double ey[2] = {max_err(y[0], yr, ny, &sy), max_err(y[1], yr, ny, &sy)};
    double ew[2] = {max_err(dw[0], dwr, nw, &sw), max_err(dw[1], dwr, nw, &sw)};
    cr_assert(ey[0] <= fmax(4 * ey[1], 8 * 0x1p-24 * sy),
              "conv2d: Winograd %g, im2col %g (scale %g)", ey[0], ey[1], sy);
    cr_assert(ew[0] <= fmax(4 * ew[1], 8 * 0x1p-24 * sw),
              "weight grad: Winograd %g, im2col %g (scale %g)", ew[0], ew[1], sw);
    /* f64: to rounding */
    double *yd = malloc(sizeof(double) * (size_t)ny), *dwd = malloc(sizeof(double) * (size_t)nw);
    for (int64_t i = 0; i < ny; i++)
        yd[i] = (double)y0[i];
    cr_assert_eq(cai_kern_conv2d(KERN_F64, g, xd, xs, wd, t->O, beta, yd), 0);
    cr_assert_eq(cai_kern_conv2d_weight_grad(KERN_F64, g, xd, xs, gd, t->O, dwd), 0);
    for (int64_t i = 0; i < ny; i++)
        cr_assert(fabs(yd[i] - yr[i]) <= 1e-12 * (1 + sy), "y[%lld]: %.17g vs %.17g", (long long)i,
                  yd[i], yr[i]);
    for (int64_t i = 0; i < nw; i++)
        cr_assert(fabs(dwd[i] - dwr[i]) <= 1e-12 * (1 + sw), "dw[%lld]: %.17g vs %.17g",
                  (long long)i, dwd[i], dwr[i]);
    void *all[] = {xf, wf, gf, y0, xd, wd, gd, yr, dwr, y[0], y[1], dw[0], dw[1], yd, dwd};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]);
}

Test(conv_wino, same_padding_matches_the_reference) {
    wino_case t = {geom(2, 16, 8, 8, 1, 1, 1, 1, 1), 16, false};
    check_case(&t, 0.0);
}

/* odd output sizes: the last row and column of tiles have one output each */
Test(conv_wino, partial_tiles_without_padding) {
    wino_case t = {geom(3, 32, 9, 7, 0, 0, 0, 0, 1), 24, false};
    check_case(&t, 0.0);
}

Test(conv_wino, asymmetric_padding_and_groups) {
    wino_case t = {geom(2, 32, 6, 5, 2, 1, 0, 2, 2), 32, false};
    check_case(&t, 0.0);
}

Test(conv_wino, flipped_taps_strided_images_and_beta) {
    wino_case t = {geom(2, 16, 7, 7, 1, 1, 1, 1, 1), 16, true};
    t.g.flip = true;
    check_case(&t, 1.0);
}

/* a padding wider than a chunk of tiles (WINO_CHUNK): the chunk reads padding only */
Test(conv_wino, padding_wider_than_a_chunk) {
    wino_case t = {geom(1, 16, 4, 5, 3, 150, 1, 140, 1), 16, false};
    check_case(&t, 0.0);
}

/* an image wider than a chunk of tiles and taller than a band of them (WINO_BAND): the
 * transforms go a band of tile rows at a time, a tile row at a time in the chunks that are
 * not whole rows; odd sizes leave half tiles at the bottom and right edges */
Test(conv_wino, bands_and_chunks_of_a_large_image) {
    wino_case t = {geom(1, 16, 13, 141, 1, 1, 1, 1, 1), 16, false};
    check_case(&t, 0.0);
    /* 65 tiles a row: the last chunk is one tile, with one column */
    wino_case s = {geom(1, 16, 13, 129, 1, 1, 1, 1, 1), 16, true};
    check_case(&s, 1.0);
}

/* a tall narrow image: more tile rows than one band holds at 2 tiles a row */
Test(conv_wino, bands_of_a_tall_image) {
    wino_case t = {geom(1, 16, 330, 3, 1, 1, 1, 1, 1), 16, false};
    check_case(&t, 0.0);
}

/* 64 -> 64 channels on 16x16: several slabs of images, the last one short */
Test(conv_wino, several_slabs) {
    wino_case t = {geom(11, 64, 16, 16, 1, 1, 1, 1, 1), 64, false};
    check_case(&t, 0.0);
}

/* 5 images of 64 channels on 16x16: 3 slabs of 2 images. One thread runs the slabs side
 * by side (the weight gradient's 3 partial sums too), four a slab at a time with each
 * stage's items on the pool: the same bits. */
Test(conv_wino, slabs_side_by_side_or_in_turn_give_the_same_bits) {
    kern_conv_geom g = geom(5, 64, 16, 16, 1, 1, 1, 1, 1);
    int64_t L = 256, nx = 5 * 64 * L, nw = 64 * 64 * 9;
    int64_t xs[4] = {64 * L, L, 16, 1};
    float *x = malloc(sizeof(float) * (size_t)nx), *w = malloc(sizeof(float) * (size_t)nw);
    float *gy = malloc(sizeof(float) * (size_t)nx), *y[2], *dw[2];
    for (int64_t i = 0; i < nx; i++) {
        x[i] = (float)sin(0.37 * (double)i);
        gy[i] = (float)cos(0.11 * (double)i);
    }
    for (int64_t i = 0; i < nw; i++)
        w[i] = (float)sin(1.3 * (double)i);
    int before = ca_get_num_threads(), threads[2] = {1, 4};
    for (int t = 0; t < 2; t++) {
        ca_set_num_threads(threads[t]);
        y[t] = malloc(sizeof(float) * (size_t)nx);
        dw[t] = malloc(sizeof(float) * (size_t)nw);
        cr_assert_eq(cai_kern_conv2d(KERN_F32, &g, x, xs, w, 64, 0.0, y[t]), 0);
        cr_assert_eq(cai_kern_conv2d_weight_grad(KERN_F32, &g, x, xs, gy, 64, dw[t]), 0);
    }
    ca_set_num_threads(before);
    cr_assert(memcmp(y[0], y[1], sizeof(float) * (size_t)nx) == 0, "conv2d's bits differ");
    cr_assert(memcmp(dw[0], dw[1], sizeof(float) * (size_t)nw) == 0, "dw's bits differ");
    float *all[] = {x, w, gy, y[0], y[1], dw[0], dw[1]};
    for (int i = 0; i < 7; i++)
        free(all[i]);
}

/* The transforms are built once per ISA (kern_conv_wino_avx2.c / _avx512.c): every level
 * the CPU has gives the baseline's bits, forward (with beta, from strided images and
 * contiguous ones, past the image's edges) and weight gradient, f32 and f64. */
static void isa_run(kern_dtype dt, const kern_conv_geom *g, const int64_t *xs, int64_t nx,
                    int64_t O, double beta, void **y, void **dw) {
    size_t es = cai_kern_dtype_size(dt);
    int64_t ny = g->n * O * g->oh * g->ow, nw = O * g->c / g->groups * 9;
    void *x = malloc(es * (size_t)nx), *w = malloc(es * (size_t)nw), *gy = malloc(es * (size_t)ny);
    for (int64_t i = 0; i < nx; i++)
        kern_store(dt, x, i, sin(0.37 * (double)i + 0.2));
    for (int64_t i = 0; i < nw; i++)
        kern_store(dt, w, i, cos(1.3 * (double)i));
    *y = malloc(es * (size_t)ny);
    *dw = malloc(es * (size_t)nw);
    for (int64_t i = 0; i < ny; i++) {
        kern_store(dt, gy, i, sin(0.11 * (double)i - 1.0));
        kern_store(dt, *y, i, cos(0.05 * (double)i));
    }
    cr_assert_eq(cai_kern_conv2d(dt, g, x, xs, w, O, beta, *y), 0);
    cr_assert_eq(cai_kern_conv2d_weight_grad(dt, g, x, xs, gy, O, *dw), 0);
    free(x);
    free(w);
    free(gy);
}

Test(conv_wino, every_isa_gives_the_baseline_bits) {
    kern_isa_level before = cai_kern_isa();
    kern_conv_geom gs[2] = {geom(3, 16, 9, 11, 1, 2, 0, 1, 1), geom(2, 32, 8, 8, 1, 1, 1, 1, 2)};
    gs[1].flip = true;
    for (int c = 0; c < 2; c++)
        for (int d = 0; d < 2; d++) {
            kern_dtype dt = d ? KERN_F64 : KERN_F32;
            const kern_conv_geom *g = &gs[c];
            int64_t nx = g->n * g->c * g->h * g->w, O = 16 * (c + 1);
            int64_t xs[4] = {g->c * g->h * g->w, g->h * g->w, g->w, 1};
            if (c == 0) { /* channels last: the strided copy into the chunk's rows */
                int64_t s[4] = {g->h * g->w * g->c, 1, g->w * g->c, g->c};
                memcpy(xs, s, sizeof s);
            }
            size_t by = cai_kern_dtype_size(dt) * (size_t)(g->n * O * g->oh * g->ow);
            size_t bw = cai_kern_dtype_size(dt) * (size_t)(O * g->c / g->groups * 9);
            void *y0, *dw0;
            cai_kern_isa_set(KERN_ISA_SCALAR);
            isa_run(dt, g, xs, nx, O, 0.7, &y0, &dw0);
            for (int l = KERN_ISA_AVX2; l <= (int)cai_kern_isa_cpu(); l++) {
                void *y, *dw;
                cai_kern_isa_set((kern_isa_level)l);
                isa_run(dt, g, xs, nx, O, 0.7, &y, &dw);
                cr_assert(memcmp(y, y0, by) == 0, "conv2d at %s: bits differ (case %d, f%d)",
                          cai_kern_isa_name((kern_isa_level)l), c, d ? 64 : 32);
                cr_assert(memcmp(dw, dw0, bw) == 0, "dw at %s: bits differ (case %d, f%d)",
                          cai_kern_isa_name((kern_isa_level)l), c, d ? 64 : 32);
                free(y);
                free(dw);
            }
            free(y0);
            free(dw0);
        }
    cai_kern_isa_set(before);
}

Test(conv_wino, taken_only_where_it_fits) {
    kern_conv_geom g = geom(2, 16, 8, 8, 1, 1, 1, 1, 1);
    cr_assert(cai_kern_conv_winograd_fits(KERN_F32, &g, 16));
    cr_assert(cai_kern_conv_winograd_fits(KERN_F64, &g, 16));
    cr_assert_not(cai_kern_conv_winograd_fits(KERN_I64, &g, 16));
    cr_assert_not(cai_kern_conv_winograd_fits(KERN_F32, &g, 8)); /* few output channels */
    kern_conv_geom few = geom(2, 8, 8, 8, 1, 1, 1, 1, 1);
    cr_assert_not(cai_kern_conv_winograd_fits(KERN_F32, &few, 16));
    kern_conv_geom grouped = geom(2, 32, 8, 8, 1, 1, 1, 1, 4); /* 8 channels a group */
    cr_assert_not(cai_kern_conv_winograd_fits(KERN_F32, &grouped, 32));
    kern_conv_geom strided = g;
    strided.sh = 2;
    cr_assert_not(cai_kern_conv_winograd_fits(KERN_F32, &strided, 16));
    kern_conv_geom dilated = g;
    dilated.dw = 2;
    cr_assert_not(cai_kern_conv_winograd_fits(KERN_F32, &dilated, 16));
    kern_conv_geom five = g;
    five.kh = five.kw = 5;
    cr_assert_not(cai_kern_conv_winograd_fits(KERN_F32, &five, 16));
    kern_conv_geom thin = geom(2, 16, 3, 8, 0, 1, 0, 1, 1); /* one output row */
    cr_assert_not(cai_kern_conv_winograd_fits(KERN_F32, &thin, 16));
    cai_kern_conv_set_winograd(false);
    cr_assert_not(cai_kern_conv_winograd_fits(KERN_F32, &g, 16));
    cai_kern_conv_set_winograd(true);
}

/* Every allocation of a forward and backward through a conv2d whose three kernels
 * (forward, grad_input as a flipped convolution, weight gradient) all take the path. */
static ca_status oom_wino_scenario(void) {
    tu_sc_state s = {0};
    const int64_t one[2] = {1, 1};
    ca_tensor *x = tu_sc_randn(&s, TU_SHAPE(2, 16, 6, 6), true);
    ca_tensor *w = tu_sc_randn(&s, TU_SHAPE(16, 16, 3, 3), true);
    ca_tensor **y = tu_sc_slot(&s);
    TU_SC(&s, ca_conv2d(x, w, NULL, one, one, one, 1, y));
    return tu_sc_finish(&s, *y);
}

Test(conv_wino, oom_every_allocation_is_clean) {
    tu_oom_every_allocation("conv2d by Winograd", oom_wino_scenario);
}
