/* test_conv_rows.c - Criterion suite `conv_rows`: im2col and col2im for narrow images,
 * whose rows the vector builds (codegen/kern_conv_vec.inc, AVX-512 and AVX2) move a few
 * masked vectors at a time (AVX2's im2col whole vectors that run into the next row), give
 * the baseline loops' bits (codegen/kern_conv.inc): over paddings, strides, dilations,
 * groups, flipped taps, the batch-inner column layout, columns with gaps between rows
 * (which must stay untouched), images with NaN, infinities and signed zeros, and widths up
 * to one past two AVX-512 vectors' lanes (rows of one, two and four AVX2 vectors, and too
 * wide).
 */
#include "testutil.h"

#include "codegen/kern.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GAP 3 /* entries between the columns' rows, left as they were */

typedef struct {
    kern_conv_geom g;
    bool batch_inner; /* columns as [G, K, N, L] (CAI_CONV_COLS_GKNL's strides) */
} rows_case;

/* A deterministic stream: the geometry draws and the values. */
static uint64_t next(uint64_t *s) {
    *s = *s * 6364136223846793005u + 1442695040888963407u;
    return *s >> 33;
}

static int64_t pick(uint64_t *s, int64_t lo, int64_t hi) {
    return lo + (int64_t)(next(s) % (uint64_t)(hi - lo + 1));
}

/* A geometry with a narrow image (at most two vectors of lanes + 1 wide, half of them at
 * most one vector + 1) and an output that exists. */
static rows_case draw_case(uint64_t *s, int64_t lanes) {
    for (;;) {
        kern_conv_geom g = {.sw = 1}; /* drawn one by one: the order of the draws is fixed */
        int64_t widest = (next(s) & 1 ? 2 : 1) * lanes + 1;
        g.n = pick(s, 1, 3);
        g.groups = pick(s, 1, 2);
        g.h = pick(s, 1, 9);
        g.w = pick(s, 1, widest);
        g.kh = pick(s, 1, 4);
        g.kw = pick(s, 1, 5);
        g.sh = pick(s, 1, 2);
        g.ph = pick(s, 0, 2);
        g.pw = pick(s, 0, 3);
        g.dh = pick(s, 1, 2);
        g.dw = pick(s, 1, 2);
        g.ph_end = pick(s, 0, 2);
        g.pw_end = pick(s, 0, 3);
        g.flip = next(s) & 1;
        g.c = g.groups * pick(s, 1, 2);
        g.oh = cai_kern_conv_out_size(g.h, g.kh, g.sh, g.ph + g.ph_end, g.dh);
        g.ow = cai_kern_conv_out_size(g.w, g.kw, g.sw, g.pw + g.pw_end, g.dw);
        if (g.oh > 0 && g.ow > 0)
            return (rows_case){g, next(s) & 1};
    }
}

/* The columns' 4 element strides, rows GAP entries apart. */
static void col_strides(const rows_case *rc, int64_t *cs) {
    const kern_conv_geom *g = &rc->g;
    int64_t K = g->c / g->groups * g->kh * g->kw, row = g->oh * g->ow + GAP;
    if (rc->batch_inner) { /* [G, K, N, L] */
        int64_t s[4] = {row, K * g->n * row, g->n * row, 1};
        memcpy(cs, s, sizeof s);
    } else {
        int64_t s[4] = {g->groups * K * row, K * row, row, 1};
        memcpy(cs, s, sizeof s);
    }
}

static void fill(kern_dtype dt, void *p, int64_t n, uint64_t *s) {
    for (int64_t i = 0; i < n; i++) {
        int64_t r = pick(s, 0, 40);
        double v = r == 0 ? NAN : r == 1 ? INFINITY : r == 2 ? -0.0 : (double)pick(s, -99, 99) / 7;
        if (dt == KERN_F32)
            ((float *)p)[i] = (float)v;
        else
            ((double *)p)[i] = v;
    }
}

/* im2col and col2im of one case at the path `isa`: buffers the caller frees. The columns
 * start as a copy of `cols0` (gaps included), col2im reads `cin`. */
static void run_case(kern_isa_level isa, kern_dtype dt, const rows_case *rc, const void *x,
                     const void *cols0, const void *cin, size_t cols_bytes, void **cols,
                     void **img) {
    const kern_conv_geom *g = &rc->g;
    size_t es = cai_kern_dtype_size(dt), img_bytes = es * (size_t)(g->n * g->c * g->h * g->w);
    int64_t xs[4] = {g->c * g->h * g->w, g->h * g->w, g->w, 1}, cs[4];
    col_strides(rc, cs);
    cai_kern_isa_set(isa);
    *cols = malloc(cols_bytes);
    *img = malloc(img_bytes + 4 * es); /* 4 entries past the image must stay as they were */
    cr_assert(*cols && *img);
    memcpy(*cols, cols0, cols_bytes);
    memset(*img, 0x5a, img_bytes + 4 * es);
    cr_assert_eq(cai_kern_im2col(dt, g, x, xs, *cols, cs), 0);
    cr_assert_eq(cai_kern_col2im(dt, g, cin, cs, *img), 0);
    unsigned char *tail = (unsigned char *)*img + img_bytes;
    for (size_t i = 0; i < 4 * es; i++)
        cr_assert_eq(tail[i], 0x5a, "col2im wrote past the image");
}

Test(conv_rows, every_isa_gives_the_baseline_bits) {
    kern_isa_level before = cai_kern_isa();
    uint64_t s = 12345;
    for (int d = 0; d < 2; d++) {
        kern_dtype dt = d ? KERN_F64 : KERN_F32;
        size_t es = cai_kern_dtype_size(dt);
        for (int t = 0; t < 300; t++) {
            rows_case rc = draw_case(&s, d ? 8 : 16);
            const kern_conv_geom *g = &rc.g;
            int64_t cs[4], nx = g->n * g->c * g->h * g->w;
            col_strides(&rc, cs);
            int64_t ncols = g->n * g->c * g->kh * g->kw * (g->oh * g->ow + GAP);
            size_t cb = es * (size_t)ncols;
            void *x = malloc(es * (size_t)nx), *cols0 = malloc(cb), *cin = malloc(cb);
            cr_assert(x && cols0 && cin);
            fill(dt, x, nx, &s);
            fill(dt, cols0, ncols, &s);
            fill(dt, cin, ncols, &s);
            void *c_ref, *i_ref;
            run_case(KERN_ISA_SCALAR, dt, &rc, x, cols0, cin, cb, &c_ref, &i_ref);
            for (int l = KERN_ISA_AVX2; l <= (int)cai_kern_isa_cpu(); l++) {
                void *c_isa, *i_isa;
                run_case((kern_isa_level)l, dt, &rc, x, cols0, cin, cb, &c_isa, &i_isa);
                cr_assert(memcmp(c_isa, c_ref, cb) == 0,
                          "im2col at %s: bits differ (f%d case %d: %lldx%lld image, %lldx%lld "
                          "kernel)",
                          cai_kern_isa_name((kern_isa_level)l), d ? 64 : 32, t, (long long)g->h,
                          (long long)g->w, (long long)g->kh, (long long)g->kw);
                cr_assert(memcmp(i_isa, i_ref, es * (size_t)nx) == 0,
                          "col2im at %s: bits differ (f%d case %d: %lldx%lld image, %lldx%lld "
                          "kernel)",
                          cai_kern_isa_name((kern_isa_level)l), d ? 64 : 32, t, (long long)g->h,
                          (long long)g->w, (long long)g->kh, (long long)g->kw);
                free(c_isa);
                free(i_isa);
            }
            free(c_ref);
            free(i_ref);
            free(x);
            free(cols0);
            free(cin);
        }
    }
    cai_kern_isa_set(before);
}
