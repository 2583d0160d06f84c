/* test_ops_conv.c - Criterion suite `conv`: conv2d, its internal im2col and col2im, and
 * index_fill. Forward values against plain-loop references, gradients against finite
 * differences, im2col and col2im as adjoints of each other, the graph ops' symbolic
 * shapes, and the error messages. (Compiled against eager: test_compiled.c.)
 */
#include "testutil.h"

#include "autograd/internal.h"
#include "graph/graph.h"

#include <math.h>
#include <string.h>

#define GC_TOL 1e-7

/* The case tables leave trailing fields (asym, padding_end) zero on purpose. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

typedef struct {
    int64_t stride[2], padding[2], dilation[2], groups;
    bool bias;
    bool asym; /* padding_end differs: ca_conv2d_padded */
    int64_t padding_end[2];
} conv_ctx;

static ca_status f_conv(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    const conv_ctx *c = ctx;
    if (c->asym)
        return ca_conv2d_padded(in[0], in[1], c->bias ? in[2] : NULL, c->stride, c->padding,
                                c->padding_end, c->dilation, c->groups, out);
    return ca_conv2d(in[0], in[1], c->bias ? in[2] : NULL, c->stride, c->padding, c->dilation,
                     c->groups, out);
}

static int64_t pad_end(const conv_ctx *c, int d) {
    return c->asym ? c->padding_end[d] : c->padding[d];
}

/* The reference: out[n, o, y, x] = b[o] + sum over the group's channels and the kernel. */
static double conv_ref(const ca_tensor *x, const ca_tensor *w, const ca_tensor *b,
                       const conv_ctx *c, int64_t n, int64_t o, int64_t oy, int64_t ox) {
    int64_t C = ca_tensor_shape(x)[1], H = ca_tensor_shape(x)[2], W = ca_tensor_shape(x)[3];
    const int64_t *ws = ca_tensor_shape(w);
    int64_t cg = C / c->groups, og = ws[0] / c->groups, g = o / og;
    double acc = b ? tu_get(b, o) : 0.0;
    for (int64_t ci = 0; ci < cg; ci++)
        for (int64_t ki = 0; ki < ws[2]; ki++)
            for (int64_t kj = 0; kj < ws[3]; kj++) {
                int64_t iy = oy * c->stride[0] - c->padding[0] + ki * c->dilation[0];
                int64_t ix = ox * c->stride[1] - c->padding[1] + kj * c->dilation[1];
                if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                    continue;
                int64_t xi[4] = {n, g * cg + ci, iy, ix}, wi[4] = {o, ci, ki, kj};
                acc += tu_at(x, xi) * tu_at(w, wi);
            }
    return acc;
}

static void check_conv_values(ca_dtype dt, const int64_t *xs, const int64_t *wsh, const conv_ctx *c,
                              bool noncontig) {
    ca_tensor *x = noncontig ? tu_randn_noncontig(dt, 4, xs, false) : tu_randn(dt, 4, xs, false);
    ca_tensor *w = tu_randn(dt, 4, wsh, false), *b = tu_randn(dt, 1, wsh, false), *y = NULL;
    ca_tensor *in[3] = {x, w, b};
    TU_OK(f_conv(in, &y, (void *)c));
    const int64_t *ys = ca_tensor_shape(y);
    int64_t oh =
        (xs[2] + c->padding[0] + pad_end(c, 0) - c->dilation[0] * (wsh[2] - 1) - 1) / c->stride[0] +
        1;
    int64_t ow =
        (xs[3] + c->padding[1] + pad_end(c, 1) - c->dilation[1] * (wsh[3] - 1) - 1) / c->stride[1] +
        1;
    tu_assert_shape(y, 4, (int64_t[]){xs[0], wsh[0], oh, ow});
    double tol = dt == CA_FLOAT32 ? 1e-4 : 1e-11;
    for (int64_t i = 0; i < ca_tensor_numel(y); i++) {
        int64_t idx[4];
        tu_unflat(4, ys, i, idx);
        double want = conv_ref(x, w, c->bias ? b : NULL, c, idx[0], idx[1], idx[2], idx[3]);
        cr_assert(fabs(tu_get(y, i) - want) <= tol * (1 + fabs(want)),
                  "conv2d %s: element %lld is %g, want %g", ca_dtype_name(dt), (long long)i,
                  tu_get(y, i), want);
    }
    ca_tensor *all[] = {x, w, b, y};
    tu_release_n(all, 4);
}

/* ---------------------------------------------------------------------------------------
 * conv2d
 */
Test(conv, forward_matches_reference) {
    static const struct {
        int64_t x[4], w[4];
        conv_ctx c;
    } cases[] = {
        {{2, 3, 6, 5}, {4, 3, 3, 3}, {{1, 1}, {0, 0}, {1, 1}, 1, true}},
        {{2, 3, 7, 8}, {4, 3, 3, 2}, {{2, 3}, {1, 2}, {1, 1}, 1, false}},
        {{1, 2, 9, 9}, {3, 2, 3, 3}, {{1, 2}, {2, 1}, {2, 3}, 1, true}},
        {{2, 4, 6, 6}, {6, 2, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 2, true}},
        {{1, 6, 5, 7}, {6, 1, 2, 3}, {{2, 1}, {0, 1}, {1, 2}, 6, false}},
        {{3, 2, 4, 4}, {5, 2, 1, 1}, {{1, 1}, {0, 0}, {1, 1}, 1, true}},
        {{1, 2, 3, 4}, {2, 2, 3, 4}, {{1, 1}, {0, 0}, {1, 1}, 1, true}},
        /* more padding at the end (bottom, right) than at the start */
        {{2, 2, 5, 6}, {3, 2, 4, 2}, {{1, 1}, {1, 0}, {1, 1}, 1, true, true, {2, 1}}},
        {{1, 4, 6, 5}, {4, 2, 3, 3}, {{2, 1}, {0, 2}, {1, 2}, 2, false, true, {1, 0}}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int d = 0; d < 2; d++) {
            ca_dtype dt = d ? CA_FLOAT64 : CA_FLOAT32;
            check_conv_values(dt, cases[k].x, cases[k].w, &cases[k].c, false);
            check_conv_values(dt, cases[k].x, cases[k].w, &cases[k].c, true);
        }
}

Test(conv, gradcheck) {
    static const struct {
        int64_t x[4], w[4];
        conv_ctx c;
    } cases[] = {
        {{2, 2, 5, 4}, {3, 2, 2, 3}, {{1, 1}, {0, 0}, {1, 1}, 1, true}},
        {{1, 2, 6, 5}, {2, 2, 3, 2}, {{2, 1}, {1, 2}, {1, 2}, 1, false}},
        {{2, 4, 4, 5}, {4, 2, 3, 3}, {{1, 2}, {1, 1}, {1, 1}, 2, true}},
        {{1, 2, 5, 4}, {2, 2, 2, 3}, {{1, 1}, {0, 1}, {2, 1}, 1, true, true, {1, 2}}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ca_tensor *in[3] = {tu_randn(CA_FLOAT64, 4, cases[k].x, true),
                            tu_randn(CA_FLOAT64, 4, cases[k].w, true),
                            tu_randn(CA_FLOAT64, 1, cases[k].w, true)};
        tu_gradcheck(f_conv, cases[k].c.bias ? 3 : 2, in, (void *)&cases[k].c, GC_TOL, GC_TOL);
        ca_tensor *y = NULL;
        TU_OK(f_conv(in, &y, (void *)&cases[k].c));
        cr_assert_str_eq(ca_tensor_grad_fn_name(y), "ConvolutionBackward0");
        ca_tensor_release(y);
        tu_release_n(in, 3);
    }
    /* a non-contiguous input */
    conv_ctx c = {{1, 1}, {1, 0}, {1, 1}, 1, true};
    ca_tensor *nc[3] = {tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(1, 2, 4, 3), true),
                        tu_randn(CA_FLOAT64, TU_SHAPE(2, 2, 2, 2), true),
                        tu_randn(CA_FLOAT64, TU_SHAPE(2), false)};
    tu_gradcheck(f_conv, 3, nc, &c, GC_TOL, GC_TOL);
    tu_release_n(nc, 3);
}

Test(conv, unbatched_input) {
    conv_ctx c = {{1, 2}, {1, 1}, {1, 1}, 1, true};
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 5, 6), true);
    ca_tensor *w = tu_randn(CA_FLOAT64, TU_SHAPE(3, 2, 3, 3), true);
    ca_tensor *b = tu_randn(CA_FLOAT64, TU_SHAPE(3), true), *x4 = NULL, *y = NULL, *y4 = NULL;
    ca_tensor *in[3] = {x, w, b};
    TU_OK(f_conv(in, &y, &c));
    tu_assert_shape(y, 3, (int64_t[]){3, 5, 3});
    TU_OK(ca_unsqueeze(x, 0, &x4));
    in[0] = x4;
    TU_OK(f_conv(in, &y4, &c));
    for (int64_t i = 0; i < ca_tensor_numel(y); i++)
        cr_assert_eq(tu_get(y, i), tu_get(y4, i));
    in[0] = x;
    tu_gradcheck(f_conv, 3, in, &c, GC_TOL, GC_TOL);
    ca_tensor *all[] = {x, w, b, x4, y, y4};
    tu_release_n(all, 6);
}

Test(conv, errors) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(2, 4, 5, 5), false);
    ca_tensor *w = tu_randn(CA_FLOAT32, TU_SHAPE(6, 4, 3, 3), false);
    ca_tensor *w3 = tu_randn(CA_FLOAT32, TU_SHAPE(6, 3, 3, 3), false);
    ca_tensor *w5 = tu_randn(CA_FLOAT32, TU_SHAPE(5, 2, 3, 3), false);
    ca_tensor *big = tu_randn(CA_FLOAT32, TU_SHAPE(6, 4, 7, 7), false);
    ca_tensor *wd = tu_randn(CA_FLOAT64, TU_SHAPE(6, 4, 3, 3), false);
    ca_tensor *b5 = tu_randn(CA_FLOAT32, TU_SHAPE(5), false);
    ca_tensor *x2 = tu_randn(CA_FLOAT32, TU_SHAPE(5, 5), false), *y = NULL;
    const int64_t one[2] = {1, 1}, zero[2] = {0, 0}, bad[2] = {0, 1}, neg[2] = {-1, 0};
    TU_FAILS(ca_conv2d(x, w3, NULL, one, zero, one, 1, &y), CA_STATUS_SHAPE,
             "expected input[2, 4, 5, 5] to have 3 channels, but got 4 channels instead");
    TU_FAILS(ca_conv2d(x, w, NULL, one, zero, one, 2, &y), CA_STATUS_SHAPE,
             "to have 8 channels, but got 4 channels");
    TU_FAILS(ca_conv2d(x, w5, NULL, one, zero, one, 2, &y), CA_STATUS_SHAPE,
             "expected weight to be divisible by 2 at dimension 0");
    TU_FAILS(ca_conv2d(x, big, NULL, one, zero, one, 1, &y), CA_STATUS_SHAPE,
             "Kernel size can't be greater than actual input size");
    TU_FAILS(ca_conv2d(x, w, NULL, bad, zero, one, 1, &y), CA_STATUS_INVALID,
             "non-positive stride");
    TU_FAILS(ca_conv2d(x, w, NULL, one, neg, one, 1, &y), CA_STATUS_INVALID, "negative padding");
    TU_FAILS(ca_conv2d(x, w, NULL, one, zero, bad, 1, &y), CA_STATUS_INVALID,
             "non-positive dilation");
    TU_FAILS(ca_conv2d(x, w, NULL, one, zero, one, 0, &y), CA_STATUS_INVALID,
             "non-positive groups");
    TU_FAILS(ca_conv2d(x, wd, NULL, one, zero, one, 1, &y), CA_STATUS_DTYPE, "should be the same");
    TU_FAILS(ca_conv2d(x, w, b5, one, zero, one, 1, &y), CA_STATUS_SHAPE,
             "expected bias to be 1-dimensional with 6 elements");
    TU_FAILS(ca_conv2d(x2, w, NULL, one, zero, one, 1, &y), CA_STATUS_SHAPE,
             "Expected 3D (unbatched) or 4D (batched) input to conv2d");
    TU_FAILS(ca_conv2d(x, w, NULL, NULL, zero, one, 1, &y), CA_STATUS_INVALID, "stride");
    cr_assert_null(y);
    ca_tensor *all[] = {x, w, w3, w5, big, wd, b5, x2};
    tu_release_n(all, 8);
}

/* ---------------------------------------------------------------------------------------
 * im2col and col2im: the internal rows and kernels
 */
typedef struct {
    int64_t p[CAI_CONV_NPARAMS], groups, full[4], layout; /* layout: im2col's CAI_CONV_COLS_* */
} cols_ctx;

static ca_attrs cols_attrs(const cols_ctx *c) {
    ca_attrs a = {.dims = {CAI_CONV_IN_DIMS},
                  .i = {c->groups, c->p[CAI_CONV_PH_END], c->p[CAI_CONV_PW_END], c->layout},
                  .shape = {4}};
    memcpy(a.dims.v, c->p, sizeof(int64_t) * CAI_CONV_IN_DIMS);
    memcpy(a.shape.v, c->full, sizeof c->full);
    return a;
}

static ca_status f_im2col(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    ca_attrs a = cols_attrs(ctx);
    return cai_op_call1(CA_OP_IM2COL, in[0], &a, out);
}

static ca_status f_col2im(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    ca_attrs a = cols_attrs(ctx);
    a.i[3] = 0; /* col2im has no layout: it reads its columns' strides */
    return cai_op_call1(CA_OP_COL2IM, in[0], &a, out);
}

static double dot(const ca_tensor *a, const ca_tensor *b) {
    double s = 0;
    for (int64_t i = 0; i < ca_tensor_numel(a); i++)
        s += tu_get(a, i) * tu_get(b, i);
    return s;
}

Test(conv, im2col_values_and_adjoint) {
    /* kernel 2x3, stride (2, 1), padding (1, 2), dilation (1, 2), 2 groups */
    cols_ctx c = {{2, 3, 2, 1, 1, 2, 1, 2, 1, 2}, 2, {2, 4, 5, 4}};
    ca_tensor *x = tu_randn(CA_FLOAT64, 4, c.full, true), *cols = NULL, *back = NULL;
    TU_OK(f_im2col(&x, &cols, &c));
    int64_t oh = (5 + 2 - 1 - 1) / 2 + 1, ow = (4 + 4 - 4 - 1) / 1 + 1;
    tu_assert_shape(cols, 4, (int64_t[]){2, 2, 2 * 6, oh * ow});
    cr_assert_str_eq(ca_tensor_grad_fn_name(cols), "Im2ColBackward0");
    for (int64_t i = 0; i < ca_tensor_numel(cols); i++) {
        int64_t l = i % (oh * ow), row = i / (oh * ow), k = row % 6, ch = (row / 6) % 4;
        int64_t n = row / 24, ki = k / 3, kj = k % 3, oy = l / ow, ox = l % ow;
        int64_t iy = oy * 2 - 1 + ki, ix = ox - 2 + kj * 2;
        double want =
            iy >= 0 && iy < 5 && ix >= 0 && ix < 4 ? tu_at(x, (int64_t[]){n, ch, iy, ix}) : 0.0;
        cr_assert_eq(tu_get(cols, i), want, "cols element %lld", (long long)i);
    }
    /* col2im is im2col's adjoint: <im2col(x), c> == <x, col2im(c)> */
    ca_tensor *r = tu_randn(CA_FLOAT64, 4, ca_tensor_shape(cols), false);
    TU_OK(f_col2im(&r, &back, &c));
    cr_assert_null(ca_tensor_grad_fn_name(back));
    double lhs = dot(cols, r), rhs = dot(x, back);
    cr_assert(fabs(lhs - rhs) <= 1e-12 * (1 + fabs(lhs)), "adjoint: %g vs %g", lhs, rhs);
    ca_tensor *rg = tu_randn(CA_FLOAT64, 4, ca_tensor_shape(cols), true);
    tu_gradcheck(f_im2col, 1, &x, &c, GC_TOL, GC_TOL);
    tu_gradcheck(f_col2im, 1, &rg, &c, GC_TOL, GC_TOL);
    ca_tensor *all[] = {x, cols, back, r, rg};
    tu_release_n(all, 5);
}

/* The flat index in x [N, C, H, W] that cols element i of the geometry c (oh x ow outputs)
 * reads, or -1 where it reads padding. */
static int64_t im2col_source(const cols_ctx *c, int64_t i, int64_t oh, int64_t ow) {
    int64_t kh = c->p[0], kw = c->p[1], taps = kh * kw, C = c->full[1];
    int64_t l = i % (oh * ow), row = i / (oh * ow), k = row % taps, ch = (row / taps) % C;
    int64_t n = row / (taps * C), oy = l / ow, ox = l % ow;
    int64_t iy = oy * c->p[2] - c->p[4] + k / kw * c->p[6];
    int64_t ix = ox * c->p[3] - c->p[5] + k % kw * c->p[7];
    if (iy < 0 || iy >= c->full[2] || ix < 0 || ix >= c->full[3])
        return -1;
    return ((n * C + ch) * c->full[2] + iy) * c->full[3] + ix;
}

/* Unit strides over rows of every width from 1 to 20, with and without padding, in both
 * float dtypes: the short-row copies and adds (whole blocks, an overlapping last block, a
 * half block, entry by entry) against the definition; col2im against the sum of the
 * entries read from each position, added in im2col's tap order as col2im adds them. */
Test(conv, short_rows_match_the_definition) {
    ca_dtype dts[] = {CA_FLOAT32, CA_FLOAT64};
    for (int d = 0; d < 2; d++)
        for (int64_t w = 1; w <= 20; w++)
            for (int64_t pad = 0; pad <= 1; pad++) {
                cols_ctx c = {{3, 2, 1, 1, pad, pad, 1, 1, pad, pad}, 1, {2, 2, 4, w}};
                int64_t oh = 4 + 2 * pad - 2, ow = w + 2 * pad - 1;
                if (ow < 1)
                    continue;
                ca_tensor *x = tu_randn(dts[d], 4, c.full, false), *cols = NULL, *back = NULL;
                TU_OK(f_im2col(&x, &cols, &c));
                ca_tensor *r = tu_randn(dts[d], 4, ca_tensor_shape(cols), false);
                TU_OK(f_col2im(&r, &back, &c));
                double *want = calloc((size_t)ca_tensor_numel(x), sizeof(double));
                cr_assert_not_null(want);
                for (int64_t i = 0; i < ca_tensor_numel(cols); i++) {
                    int64_t src = im2col_source(&c, i, oh, ow);
                    cr_assert_eq(tu_get(cols, i), src < 0 ? 0.0 : tu_get(x, src),
                                 "dtype %d width %lld pad %lld entry %lld", d, (long long)w,
                                 (long long)pad, (long long)i);
                    if (src >= 0)
                        want[src] += tu_get(r, i);
                }
                double tol = d == 0 ? 1e-6 : 1e-14;
                for (int64_t i = 0; i < ca_tensor_numel(x); i++)
                    cr_assert(fabs(tu_get(back, i) - want[i]) <= tol * (1 + fabs(want[i])),
                              "col2im: dtype %d width %lld pad %lld entry %lld: %g vs %g", d,
                              (long long)w, (long long)pad, (long long)i, tu_get(back, i), want[i]);
                free(want);
                ca_tensor *all[] = {x, cols, back, r};
                tu_release_n(all, 4);
            }
}

/* The [G, K, N, L] layout (conv2d's derivative's GEMMs over the whole batch) holds the same
 * entries as [N, G, K, L], and its derivative folds them back through a permuted view. */
Test(conv, im2col_batch_inner_layout) {
    cols_ctx c = {{2, 3, 2, 1, 1, 2, 1, 2, 1, 2}, 2, {3, 4, 5, 4}, CAI_CONV_COLS_NGKL};
    ca_tensor *x = tu_randn(CA_FLOAT64, 4, c.full, true), *ngkl = NULL, *gknl = NULL;
    TU_OK(f_im2col(&x, &ngkl, &c));
    c.layout = CAI_CONV_COLS_GKNL;
    TU_OK(f_im2col(&x, &gknl, &c));
    const int64_t *s = ca_tensor_shape(ngkl);
    tu_assert_shape(gknl, 4, (int64_t[]){s[1], s[2], s[0], s[3]});
    for (int64_t i = 0; i < ca_tensor_numel(ngkl); i++) {
        int64_t l = i % s[3], k = i / s[3] % s[2], grp = i / (s[3] * s[2]) % s[1];
        int64_t n = i / (s[3] * s[2] * s[1]);
        cr_assert_eq(tu_get(ngkl, i), tu_at(gknl, (int64_t[]){grp, k, n, l}), "entry %lld",
                     (long long)i);
    }
    tu_gradcheck(f_im2col, 1, &x, &c, GC_TOL, GC_TOL);
    c.layout = CAI_CONV_COLS__COUNT;
    ca_tensor *bad = NULL;
    cr_assert_eq(f_im2col(&x, &bad, &c), CA_STATUS_INVALID);
    cr_assert(strstr(ca_last_error(), "column layout") != NULL, "%s", ca_last_error());
    ca_tensor *all[] = {x, ngkl, gknl};
    tu_release_n(all, 3);
}

Test(conv, col2im_refuses_columns_that_do_not_fit) {
    cols_ctx c = {{3, 3, 1, 1, 0, 0, 1, 1, 0, 0}, 1, {1, 2, 5, 5}};
    ca_tensor *cols = tu_randn(CA_FLOAT64, TU_SHAPE(1, 1, 18, 8), false), *y = NULL;
    TU_FAILS(f_col2im(&cols, &y, &c), CA_STATUS_SHAPE, "do not fit the output");
    ca_tensor_release(cols);
}

Test(conv, kernels_refuse_bad_geometry) {
    kern_conv_geom g = {.n = 1,
                        .c = 2,
                        .h = 4,
                        .w = 4,
                        .kh = 3,
                        .kw = 3,
                        .sh = 1,
                        .sw = 1,
                        .ph = 0,
                        .pw = 0,
                        .dh = 1,
                        .dw = 1,
                        .oh = 2,
                        .ow = 2,
                        .groups = 1};
    double x[32] = {0}, cols[72];
    int64_t xs[4] = {32, 16, 4, 1}, cs[4] = {72, 72, 4, 1};
    cr_assert_eq(cai_kern_im2col(KERN_F64, &g, x, xs, cols, cs), 0);
    cr_assert_eq(cai_kern_im2col(KERN_I64, &g, x, xs, cols, cs), -1);
    int64_t spread[4] = {144, 144, 8, 2}; /* the rows' entries must be contiguous */
    cr_assert_eq(cai_kern_im2col(KERN_F64, &g, x, xs, cols, spread), -1);
    g.oh = 3; /* does not hold together with h, kh, sh, ph, dh */
    cr_assert_eq(cai_kern_im2col(KERN_F64, &g, x, xs, cols, cs), -1);
    cr_assert_eq(cai_kern_col2im(KERN_F64, &g, cols, cs, x), -1);
    g.oh = 2;
    g.groups = 3; /* 2 channels do not split into 3 groups */
    cr_assert_eq(cai_kern_col2im(KERN_F64, &g, cols, cs, x), -1);
    cr_assert_eq(cai_kern_conv_out_size(5, 7, 1, 0, 1), 0);
    cr_assert_eq(cai_kern_conv_out_size(7, 3, 2, 2, 2), 3);
    cr_assert_eq(cai_kern_conv_out_size(7, 3, 2, 1, 2), 2);
    cr_assert_eq(cai_kern_conv_out_size(7, 3, 0, 1, 2), -1);
}

/* ---------------------------------------------------------------------------------------
 * The graph ops: symbolic shapes
 */
Test(conv, graph_shapes_are_size_expressions) {
    graph *g = cai_graph_new();
    graph_sx n = cai_graph_sx_slot(g, 0), h = cai_graph_sx_slot(g, 1);
    graph_sx c4 = cai_graph_sx_const(g, 4), c9 = cai_graph_sx_const(g, 9);
    graph_origin o = {-1, NULL, -1};
    graph_op_args in = {.op = GOP_INPUT, .dtype = KERN_F32, .n_shape = 4, .shape = {n, c4, h, c9}};
    graph_val x = cai_graph_add(g, &in, o);
    /* kernel 3x2, stride (2, 1), padding (1, 0), dilation 1, groups 2 */
    int64_t p[GRAPH_CONV_NPARAMS] = {3, 2, 2, 1, 1, 0, 1, 1, 1, 0};
    graph_op_args im = {.op = GOP_IM2COL, .n_in = 1, .in = {x}, .i = {0, 0, 0, 2}};
    cr_assert(cai_graph_conv_pack(p, im.i));
    graph_val cols = cai_graph_add(g, &im, o);
    cr_assert_geq(cols, 0, "%s", cai_graph_error(g));
    const graph_node *cn = cai_graph_node_at(g, cols);
    cr_assert_eq(cn->ndim, 4);
    cr_assert_eq(cn->shape[0], n); /* the batch stays the symbol */
    int64_t v;
    cr_assert(cai_graph_sx_const_value(g, cn->shape[1], &v) && v == 2);
    cr_assert(cai_graph_sx_const_value(g, cn->shape[2], &v) && v == 2 * 3 * 2);
    int64_t slots[2] = {5, 11}, shape[4];
    cai_graph_eval_shape(g, cols, slots, shape); /* OH = (11 + 2 - 2 - 1) / 2 + 1 = 6, OW 8 */
    cr_assert(shape[0] == 5 && shape[3] == 6 * 8, "[%lld, ., ., %lld]", (long long)shape[0],
              (long long)shape[3]);
    slots[1] = 12; /* a floor: (12 + 2 - 2 - 1) / 2 + 1 = 6 */
    cai_graph_eval_shape(g, cols, slots, shape);
    cr_assert_eq(shape[3], 6 * 8);
    /* col2im back into the input's shape */
    graph_op_args fold = {.op = GOP_COL2IM,
                          .n_in = 1,
                          .in = {cols},
                          .i = {0, 0, 0, 2},
                          .n_shape = 4,
                          .shape = {n, c4, h, c9}};
    cai_graph_conv_pack(p, fold.i);
    graph_val back = cai_graph_add(g, &fold, o);
    cr_assert_geq(back, 0, "%s", cai_graph_error(g));
    cr_assert_eq(cai_graph_node_at(g, back)->shape[2], h);
    /* ... but not into one whose channels do not fit */
    fold.shape[1] = cai_graph_sx_const(g, 6);
    cr_assert_lt(cai_graph_add(g, &fold, o), 0);
    cr_assert(strstr(cai_graph_error(g), "col2im") != NULL, "%s", cai_graph_error(g));
    char *text = cai_graph_print(g, false, NULL);
    cr_assert(strstr(text, "im2col(getitem, kernel=[3, 2], stride=[2, 1], padding=[1, 0], "
                           "dilation=[1, 1], groups=2)") != NULL,
              "%s", text);
    cai_graph_free_string(text);
    p[CAI_CONV_PH_END] = 2; /* more padding at the bottom: printed, and in the sizes */
    cr_assert(cai_graph_conv_pack(p, im.i));
    graph_val cols2 = cai_graph_add(g, &im, o);
    cr_assert_geq(cols2, 0, "%s", cai_graph_error(g));
    cai_graph_eval_shape(g, cols2, slots, shape); /* OH = (12 + 3 - 2 - 1) / 2 + 1 = 7 */
    cr_assert_eq(shape[3], 7 * 8);
    text = cai_graph_print(g, false, NULL);
    cr_assert(strstr(text, "padding=[1, 0], padding_end=[2, 0], dilation=[1, 1]") != NULL, "%s",
              text);
    cai_graph_free_string(text);
    cai_graph_conv_set_layout(im.i, CAI_CONV_COLS_GKNL); /* [G, K, N, L]: printed, and the sizes */
    graph_val cols3 = cai_graph_add(g, &im, o);
    cr_assert_geq(cols3, 0, "%s", cai_graph_error(g));
    cr_assert_eq(cai_graph_node_at(g, cols3)->shape[2], n);
    cai_graph_eval_shape(g, cols3, slots, shape);
    cr_assert(shape[0] == 2 && shape[1] == 12 && shape[2] == 5 && shape[3] == 7 * 8);
    text = cai_graph_print(g, false, NULL);
    cr_assert(strstr(text, "groups=2, layout=gknl)") != NULL, "%s", text);
    cai_graph_free_string(text);
    int64_t big[GRAPH_CONV_NPARAMS] = {70000, 1, 1, 1, 0, 0, 1, 1, 0, 0}, packed[3];
    cr_assert_not(cai_graph_conv_pack(big, packed));
    cai_graph_free(g);
}

/* ---------------------------------------------------------------------------------------
 * index_fill
 */
typedef struct {
    int64_t dim;
    double value;
} fill_ctx;

static ca_status f_fill(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    const fill_ctx *c = ctx;
    return ca_index_fill(in[0], c->dim, in[1], c->value, out);
}

static ca_status f_fill_t(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ca_index_fill_tensor(in[0], ((const fill_ctx *)ctx)->dim, in[1], in[2], out);
}

Test(conv, index_fill_values) {
    for (int d = 0; d < 2; d++) {
        ca_dtype dt = d ? CA_FLOAT64 : CA_FLOAT32;
        ca_tensor *x = tu_randn_noncontig(dt, TU_SHAPE(3, 4, 2), false), *y = NULL;
        ca_tensor *idx = tu_index(TU_SHAPE(3), (int64_t[]){3, -4, 3});
        TU_OK(ca_index_fill(x, 1, idx, 2.5, &y));
        tu_assert_shape(y, 3, (int64_t[]){3, 4, 2});
        for (int64_t i = 0; i < 24; i++) {
            int64_t at[3];
            tu_unflat(3, (int64_t[]){3, 4, 2}, i, at);
            double want = at[1] == 0 || at[1] == 3 ? 2.5 : tu_at(x, at);
            cr_assert_eq(tu_get(y, i), want, "element %lld", (long long)i);
        }
        cr_assert_eq(ca_tensor_dtype(y), dt);
        ca_tensor *all[] = {x, y, idx};
        tu_release_n(all, 3);
    }
    /* a 0-d index and a 0-d input; int64 values */
    ca_tensor *s = tu_from(CA_FLOAT64, 0, NULL, (double[]){4.0}, false), *y = NULL;
    ca_tensor *i0 = tu_index(0, NULL, (int64_t[]){-1});
    TU_OK(ca_index_fill(s, 0, i0, 7.0, &y));
    cr_assert_eq(tu_get(y, 0), 7.0);
    ca_tensor_release(y);
    ca_tensor *xi = tu_index(TU_SHAPE(2, 2), (int64_t[]){1, 2, 3, 4});
    TU_OK(ca_index_fill(xi, 0, i0, -3.0, &y));
    tu_assert_values(y, (double[]){1, 2, -3, -3}, 0);
    ca_tensor *all[] = {s, y, i0, xi};
    tu_release_n(all, 4);
}

Test(conv, index_fill_gradcheck) {
    fill_ctx c = {0, 1.5};
    ca_tensor *in[3] = {tu_randn(CA_FLOAT64, TU_SHAPE(4, 3), true),
                        tu_index(TU_SHAPE(3), (int64_t[]){2, 0, 2}),
                        tu_from(CA_FLOAT64, 0, NULL, (double[]){0.5}, true)};
    tu_gradcheck(f_fill, 2, in, &c, GC_TOL, GC_TOL);
    tu_gradcheck(f_fill_t, 3, in, &c, GC_TOL, GC_TOL);
    ca_tensor *y = NULL;
    TU_OK(f_fill(in, &y, &c));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "IndexFillBackward0");
    ca_tensor_release(y);
    TU_OK(f_fill_t(in, &y, &c));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "IndexFillBackward1");
    /* value's gradient: the sum of the gradient at the filled rows, each counted once */
    ca_tensor *loss = NULL;
    TU_OK(ca_sum(y, 0, NULL, false, &loss));
    TU_OK(ca_backward(loss));
    cr_assert_eq(tu_get(ca_tensor_grad(in[2]), 0), 6.0);
    ca_tensor *all[] = {in[0], in[1], in[2], y, loss};
    tu_release_n(all, 5);
}

Test(conv, index_fill_errors) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(3, 4), false), *y = NULL;
    ca_tensor *i5 = tu_index(TU_SHAPE(1), (int64_t[]){4}),
              *in5 = tu_index(TU_SHAPE(1), (int64_t[]){-5});
    ca_tensor *i2 = tu_index(TU_SHAPE(1, 1), (int64_t[]){0});
    ca_tensor *fi = tu_from(CA_FLOAT32, 1, (int64_t[]){1}, (double[]){0}, false);
    ca_tensor *v1 = tu_randn(CA_FLOAT32, TU_SHAPE(2), false),
              *ok = tu_index(TU_SHAPE(1), (int64_t[]){0});
    TU_FAILS(ca_index_fill(x, 1, i5, 1.0, &y), CA_STATUS_INDEX,
             "index 4 is out of bounds for dimension 1 with size 4");
    TU_FAILS(ca_index_fill(x, 1, in5, 1.0, &y), CA_STATUS_INDEX, "index -5 is out of bounds");
    TU_FAILS(ca_index_fill(x, 1, i2, 1.0, &y), CA_STATUS_SHAPE, "Index has to be a vector/scalar");
    TU_FAILS(ca_index_fill(x, 1, fi, 1.0, &y), CA_STATUS_INDEX, "Expected dtype int64 for index");
    TU_FAILS(ca_index_fill(x, 2, ok, 1.0, &y), CA_STATUS_DIM, "out of range");
    TU_FAILS(ca_index_fill_tensor(x, 1, ok, v1, &y), CA_STATUS_SHAPE,
             "only supports a 0-dimensional value tensor");
    cr_assert_null(y);
    ca_tensor *all[] = {x, i5, in5, i2, fi, v1, ok};
    tu_release_n(all, 7);
}

/* ---------------------------------------------------------------------------------------
 * Allocation failure: every allocation of a forward and backward through conv2d (with
 * groups and a bias) and index_fill (with a tensor value), and of one through a conv2d
 * made in slabs, fails in turn; each run must end in CA_OK or CA_STATUS_NOMEM with nothing
 * left allocated.
 */
static ca_status oom_scenario(void) {
    tu_sc_state s = {0};
    int64_t ids[3] = {1, 0, 1};
    const int64_t one[2] = {1, 1}, pad[2] = {1, 0};
    ca_tensor *x = tu_sc_randn(&s, TU_SHAPE(2, 4, 5, 4), true);
    ca_tensor *w = tu_sc_randn(&s, TU_SHAPE(4, 2, 3, 2), true);
    ca_tensor *b = tu_sc_randn(&s, TU_SHAPE(4), true);
    ca_tensor *v = tu_sc_randn(&s, 0, NULL, true);
    ca_tensor **idx = tu_sc_slot(&s), **y = tu_sc_slot(&s), **f = tu_sc_slot(&s);
    TU_SC(&s, ca_from_data(CA_INT64, TU_SHAPE(3), ids, idx));
    TU_SC(&s, ca_conv2d(x, w, b, one, pad, one, 2, y));
    TU_SC(&s, ca_index_fill_tensor(*y, 1, *idx, v, f));
    return tu_sc_finish(&s, *f);
}

/* A 3x3 'same' convolution of 3 images whose columns are more than a slab's worth each:
 * grad_input as a convolution of the gradient, the weight gradient's slabs side by side
 * (a partial and a columns buffer each). */
static ca_status oom_slabs_scenario(void) {
    tu_sc_state s = {0};
    const int64_t one[2] = {1, 1};
    ca_tensor *x = tu_sc_randn(&s, TU_SHAPE(3, 64, 12, 12), true);
    ca_tensor *w = tu_sc_randn(&s, TU_SHAPE(8, 64, 3, 3), true);
    ca_tensor **y = tu_sc_slot(&s);
    TU_SC(&s, ca_conv2d(x, w, NULL, one, one, one, 1, y));
    return tu_sc_finish(&s, *y);
}

Test(conv, oom_every_allocation_is_clean) {
    tu_oom_every_allocation("conv2d and index_fill", oom_scenario);
    tu_oom_every_allocation("conv2d in slabs", oom_slabs_scenario);
}
