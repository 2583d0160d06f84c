/* test_ops_conv_grad.c - Criterion suite `conv_grad`: the ops conv2d's derivative is made
 * of. The weight gradient op against a plain-loop reference and by finite differences
 * (its own derivative, for double backward); the flipped taps of im2col, col2im and
 * conv2d (grad_input as a convolution of g); the slab kernels' bits at 1 and 2 threads;
 * the graph ops' shapes and printing. (conv2d's own values and gradients: test_ops_conv.c;
 * compiled against eager: test_compiled.c.)
 */
#include "testutil.h"

#include "autograd/internal.h"
#include "codegen/kern_internal.h"
#include "graph/graph.h"

#include <math.h>
#include <string.h>

#define GC_TOL 1e-7

/* The contexts leave trailing fields (flip, wshape) zero on purpose. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

/* A convolution's attrs (ops_conv.c): kh, kw, sh, sw, ph, pw, dh, dw, ph_end, pw_end. */
typedef struct {
    int64_t p[CAI_CONV_NPARAMS], groups, flip, wshape[4];
} conv_attrs_ctx;

static ca_attrs attrs_of(const conv_attrs_ctx *c) {
    ca_attrs a = {.dims = {CAI_CONV_IN_DIMS},
                  .i = {c->groups, c->p[CAI_CONV_PH_END], c->p[CAI_CONV_PW_END], c->flip},
                  .shape = {4}};
    memcpy(a.dims.v, c->p, sizeof(int64_t) * CAI_CONV_IN_DIMS);
    memcpy(a.shape.v, c->wshape, sizeof c->wshape);
    return a;
}

/* in: g, x */
static ca_status f_wgrad(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    ca_attrs a = attrs_of(ctx);
    return cai_op_call(CA_OP_CONV2D_WEIGHT_GRAD, 2, (ca_tensor **)in, &a, out, NULL);
}

/* in: x, w; conv2d with the context's flip */
static ca_status f_conv(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    ca_attrs a = attrs_of(ctx);
    a.shape.n = 0;
    return cai_op_call(CA_OP_CONV2D, 2, (ca_tensor **)in, &a, out, NULL);
}

/* The output size of one spatial dim, as conv2d's. */
static int64_t out_size(int64_t in, const int64_t *p, int axis) {
    int64_t k = p[CAI_CONV_KH + axis], s = p[CAI_CONV_SH + axis], d = p[CAI_CONV_DH + axis];
    int64_t pads = p[CAI_CONV_PH + axis] + p[CAI_CONV_PH_END + axis];
    return (in + pads - d * (k - 1) - 1) / s + 1;
}

/* dw[o, ci, ki, kj] = sum over n, oy, ox of g[n, o, oy, ox] * x[n, grp*cg + ci, iy, ix],
 * with the tap (ki, kj) read at the turned position when flipped. */
static double wgrad_ref(const ca_tensor *g, const ca_tensor *x, const conv_attrs_ctx *c,
                        const int64_t *wi) {
    const int64_t *gs = ca_tensor_shape(g), *xs = ca_tensor_shape(x), *p = c->p;
    int64_t cg = xs[1] / c->groups, og = gs[1] / c->groups, grp = wi[0] / og;
    int64_t ki = c->flip ? p[CAI_CONV_KH] - 1 - wi[2] : wi[2];
    int64_t kj = c->flip ? p[CAI_CONV_KW] - 1 - wi[3] : wi[3];
    double acc = 0;
    for (int64_t n = 0; n < gs[0]; n++)
        for (int64_t oy = 0; oy < gs[2]; oy++)
            for (int64_t ox = 0; ox < gs[3]; ox++) {
                int64_t iy = oy * p[CAI_CONV_SH] - p[CAI_CONV_PH] + ki * p[CAI_CONV_DH];
                int64_t ix = ox * p[CAI_CONV_SW] - p[CAI_CONV_PW] + kj * p[CAI_CONV_DW];
                if (iy < 0 || iy >= xs[2] || ix < 0 || ix >= xs[3])
                    continue;
                acc += tu_at(g, (int64_t[]){n, wi[0], oy, ox}) *
                       tu_at(x, (int64_t[]){n, grp * cg + wi[1], iy, ix});
            }
    return acc;
}

static void check_wgrad(conv_attrs_ctx c, const int64_t *xshape, int64_t out_channels) {
    int64_t oh = out_size(xshape[2], c.p, 0), ow = out_size(xshape[3], c.p, 1);
    int64_t gshape[4] = {xshape[0], out_channels, oh, ow};
    int64_t ws[4] = {out_channels, xshape[1] / c.groups, c.p[CAI_CONV_KH], c.p[CAI_CONV_KW]};
    memcpy(c.wshape, ws, sizeof ws);
    ca_tensor *in[2] = {tu_randn(CA_FLOAT64, 4, gshape, true),
                        tu_randn(CA_FLOAT64, 4, xshape, true)};
    ca_tensor *dw = NULL;
    TU_OK(f_wgrad(in, &dw, &c));
    tu_assert_shape(dw, 4, ws);
    for (int64_t i = 0; i < ca_tensor_numel(dw); i++) {
        int64_t wi[4];
        tu_unflat(4, ws, i, wi);
        double want = wgrad_ref(in[0], in[1], &c, wi);
        cr_assert(fabs(tu_get(dw, i) - want) <= 1e-12 * (1 + fabs(want)), "dw[%lld]: %g vs %g",
                  (long long)i, tu_get(dw, i), want);
    }
    cr_assert_str_eq(ca_tensor_grad_fn_name(dw), "ConvolutionWeightGradBackward0");
    tu_gradcheck(f_wgrad, 2, in, &c, GC_TOL, GC_TOL); /* its own derivative rule */
    ca_tensor *all[] = {in[0], in[1], dw};
    tu_release_n(all, 3);
}

Test(conv_grad, weight_grad_matches_reference_and_its_rule_gradchecks) {
    /* 3x3 'same' (grad_input as a convolution); kernel 2x3 with stride (2, 1), padding
     * (1, 2) and (0, 1) at the end, dilation (1, 2), 2 groups (grad_input by col2im);
     * and both with the taps flipped */
    conv_attrs_ctx same = {{3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, 1, 0};
    conv_attrs_ctx odd = {{2, 3, 2, 1, 1, 2, 1, 2, 0, 1}, 2, 0};
    check_wgrad(same, (int64_t[]){2, 3, 5, 4}, 4);
    check_wgrad(odd, (int64_t[]){2, 4, 5, 6}, 6);
    same.flip = odd.flip = CAI_CONV_COLS_FLIP;
    check_wgrad(same, (int64_t[]){2, 3, 5, 4}, 4);
    check_wgrad(odd, (int64_t[]){2, 4, 5, 6}, 6);
}

/* conv2d with the taps flipped is conv2d with the kernel turned 180 degrees. */
Test(conv_grad, flipped_conv2d_is_the_turned_kernel) {
    conv_attrs_ctx c = {{3, 2, 1, 2, 1, 0, 2, 1, 2, 1}, 2, CAI_CONV_COLS_FLIP};
    int64_t xs[4] = {2, 4, 6, 5}, ws[4] = {6, 2, 3, 2};
    ca_tensor *in[2] = {tu_randn(CA_FLOAT64, 4, xs, true), tu_randn(CA_FLOAT64, 4, ws, true)};
    double turned[72];
    for (int64_t i = 0; i < 72; i++) {
        int64_t wi[4];
        tu_unflat(4, ws, i, wi);
        turned[i] = tu_at(in[1], (int64_t[]){wi[0], wi[1], 2 - wi[2], 1 - wi[3]});
    }
    ca_tensor *wt = tu_from(CA_FLOAT64, 4, ws, turned, false), *y = NULL, *ref = NULL;
    ca_tensor *plain_in[2] = {in[0], wt};
    TU_OK(f_conv(in, &y, &c));
    conv_attrs_ctx plain = c;
    plain.flip = 0;
    TU_OK(f_conv(plain_in, &ref, &plain));
    tu_assert_close(y, ref, 1e-12, 1e-12);
    tu_gradcheck(f_conv, 2, in, &c, GC_TOL, GC_TOL);
    c.flip = 1; /* neither 0 nor CAI_CONV_COLS_FLIP */
    ca_tensor *bad = NULL;
    TU_FAILS(f_conv(in, &bad, &c), CA_STATUS_INVALID, "tap order");
    ca_tensor *all[] = {in[0], in[1], wt, y, ref};
    tu_release_n(all, 5);
}

Test(conv_grad, weight_grad_refuses_sizes_that_do_not_fit) {
    conv_attrs_ctx c = {{3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, 1, 0, {4, 3, 3, 3}};
    ca_tensor *g = tu_randn(CA_FLOAT64, TU_SHAPE(2, 4, 5, 4), false);
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3, 5, 4), false), *dw = NULL;
    ca_tensor *in[2] = {g, x};
    c.wshape[1] = 2; /* the input has 3 channels */
    TU_FAILS(f_wgrad(in, &dw, &c), CA_STATUS_SHAPE, "does not fit input");
    c.wshape[1] = 3;
    c.p[CAI_CONV_SH] = 2; /* g is the stride-1 output */
    TU_FAILS(f_wgrad(in, &dw, &c), CA_STATUS_SHAPE, "does not fit input");
    cr_assert_null(dw);
    ca_tensor_release(g);
    ca_tensor_release(x);
}

/* The slab kernels on geometry g with O output channels: the same bits at one and two
 * threads, and dw[0, 0, 1, 1] (the centre tap of the first channel pair) against a double
 * reference. */
static void check_slab_bits(const kern_conv_geom *g, int64_t O) {
    int64_t L = g->oh * g->ow, K = g->c / g->groups * 9, nx = g->n * g->c * L, ny = g->n * O * L;
    int64_t xs[4] = {g->c * L, L, g->w, 1};
    float *x = malloc(sizeof(float) * (size_t)nx), *w = malloc(sizeof(float) * (size_t)(O * K));
    float *gy = malloc(sizeof(float) * (size_t)ny), *y[2], *dw[2];
    for (int64_t i = 0; i < nx; i++)
        x[i] = (float)sin(0.37 * (double)i);
    for (int64_t i = 0; i < ny; i++)
        gy[i] = (float)cos(0.11 * (double)i);
    for (int64_t i = 0; i < O * K; i++)
        w[i] = (float)sin(1.3 * (double)i);
    int before = ca_get_num_threads();
    for (int t = 0; t < 2; t++) {
        ca_set_num_threads(t + 1);
        y[t] = malloc(sizeof(float) * (size_t)ny);
        dw[t] = malloc(sizeof(float) * (size_t)(O * K));
        cr_assert_eq(cai_kern_conv2d(KERN_F32, g, x, xs, w, O, 0.0, y[t]), 0);
        cr_assert_eq(cai_kern_conv2d_weight_grad(KERN_F32, g, x, xs, gy, O, dw[t]), 0);
    }
    ca_set_num_threads(before);
    cr_assert(memcmp(y[0], y[1], sizeof(float) * (size_t)ny) == 0, "conv2d's bits differ");
    cr_assert(memcmp(dw[0], dw[1], sizeof(float) * (size_t)(O * K)) == 0,
              "the weight gradient's bits differ");
    double acc = 0;
    for (int64_t n = 0; n < g->n; n++)
        for (int64_t l = 0; l < L; l++)
            acc += (double)gy[n * O * L + l] * (double)x[n * g->c * L + l];
    cr_assert(fabs(dw[0][4] - acc) <= 1e-4 * (1 + fabs(acc)), "%g vs %g", dw[0][4], acc);
    cr_assert_eq(cai_kern_conv2d(KERN_I64, g, x, xs, w, O, 0.0, y[0]), -1);
    kern_conv_geom bad = *g;
    bad.groups = 5; /* 64 channels do not split into 5 groups */
    cr_assert_eq(cai_kern_conv2d_weight_grad(KERN_F32, &bad, x, xs, gy, O, dw[0]), -1);
    float *all[] = {x, w, gy, y[0], y[1], dw[0], dw[1]};
    for (int i = 0; i < 7; i++)
        free(all[i]);
}

static void check_slab_geometries(void);

/* 3x3 'same' convolutions: 3 images of 64 channels on 24x24 in 2 groups (a slab per
 * image; the weight gradient's slabs side by side, a partial each), and 40 images of 64
 * channels on 16x16 to 72 (the partials would be too many: slabs in turn, blocks of the
 * weight gradient's columns side by side). */
Test(conv_grad, slab_kernels_give_the_same_bits_at_1_and_2_threads) {
    for (int wino = 0; wino < 2; wino++) { /* im2col + GEMM, then Winograd's (3x3, 32+) */
        cai_kern_conv_set_winograd(wino);
        check_slab_geometries();
    }
}

static void check_slab_geometries(void) {
    kern_conv_geom g = {.n = 3,
                        .c = 64,
                        .h = 24,
                        .w = 24,
                        .kh = 3,
                        .kw = 3,
                        .sh = 1,
                        .sw = 1,
                        .ph = 1,
                        .pw = 1,
                        .dh = 1,
                        .dw = 1,
                        .ph_end = 1,
                        .pw_end = 1,
                        .oh = 24,
                        .ow = 24,
                        .groups = 2};
    check_slab_bits(&g, 32);
    g.n = 40;
    g.h = g.w = g.oh = g.ow = 16;
    g.groups = 1;
    check_slab_bits(&g, 72);
}

/* im2col with the taps flipped stores tap (ki, kj) in the row of (kh-1-ki, kw-1-kj), and
 * col2im with the same flag is its adjoint. */
Test(conv_grad, flipped_im2col_reverses_the_taps) {
    conv_attrs_ctx c = {{2, 3, 1, 2, 1, 1, 2, 1, 0, 1}, 2, 0};
    int64_t xs[4] = {2, 4, 5, 6};
    ca_tensor *x = tu_randn(CA_FLOAT64, 4, xs, true), *plain = NULL, *flipped = NULL;
    ca_attrs a = attrs_of(&c);
    a.shape.n = 0;
    a.i[3] = CAI_CONV_COLS_NGKL;
    TU_OK(cai_op_call1(CA_OP_IM2COL, x, &a, &plain));
    a.i[3] = CAI_CONV_COLS_NGKL | CAI_CONV_COLS_FLIP;
    TU_OK(cai_op_call1(CA_OP_IM2COL, x, &a, &flipped));
    const int64_t *s = ca_tensor_shape(plain); /* [N, G, C/G*6, L] */
    for (int64_t i = 0; i < ca_tensor_numel(plain); i++) {
        int64_t l = i % s[3], k = i / s[3] % s[2], rest = i / (s[3] * s[2]);
        int64_t turned = k / 6 * 6 + (5 - k % 6);
        cr_assert_eq(tu_get(plain, i), tu_get(flipped, (rest * s[2] + turned) * s[3] + l));
    }
    ca_attrs f = attrs_of(&c);
    f.i[3] = CAI_CONV_COLS_FLIP;
    memcpy(f.shape.v, xs, sizeof xs);
    ca_tensor *r = tu_randn(CA_FLOAT64, 4, s, false), *back = NULL;
    TU_OK(cai_op_call1(CA_OP_COL2IM, r, &f, &back));
    double lhs = 0, rhs = 0;
    for (int64_t i = 0; i < ca_tensor_numel(r); i++)
        lhs += tu_get(flipped, i) * tu_get(r, i);
    for (int64_t i = 0; i < ca_tensor_numel(x); i++)
        rhs += tu_get(x, i) * tu_get(back, i);
    cr_assert(fabs(lhs - rhs) <= 1e-12 * (1 + fabs(lhs)), "adjoint: %g vs %g", lhs, rhs);
    f.i[3] = CAI_CONV_COLS_GKNL; /* col2im takes only the flip flag */
    ca_tensor *bad = NULL;
    TU_FAILS(cai_op_call1(CA_OP_COL2IM, r, &f, &bad), CA_STATUS_INVALID, "tap order");
    ca_tensor *all[] = {x, plain, flipped, r, back};
    tu_release_n(all, 5);
}

/* The graph ops: conv2d's output from the image's symbolic sizes and the weight's count,
 * the weight gradient into its shape attribute; the flip printed. */
Test(conv_grad, graph_ops_shapes_and_printing) {
    graph *g = cai_graph_new();
    graph_sx n = cai_graph_sx_slot(g, 0), h = cai_graph_sx_slot(g, 1);
    graph_sx c4 = cai_graph_sx_const(g, 4), c6 = cai_graph_sx_const(g, 6);
    graph_sx c3 = cai_graph_sx_const(g, 3), c2 = cai_graph_sx_const(g, 2);
    graph_origin o = {-1, NULL, -1};
    graph_op_args xi = {.op = GOP_INPUT, .dtype = KERN_F32, .n_shape = 4, .shape = {n, c4, h, c6}};
    graph_op_args wi = {
        .op = GOP_INPUT, .dtype = KERN_F32, .i = {1}, .n_shape = 4, .shape = {c6, c2, c3, c3}};
    graph_val x = cai_graph_add(g, &xi, o), w = cai_graph_add(g, &wi, o);
    int64_t p[GRAPH_CONV_NPARAMS] = {3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
    graph_op_args conv = {.op = GOP_CONV2D, .n_in = 2, .in = {x, w}, .i = {0, 0, 0, 2}};
    cr_assert(cai_graph_conv_pack(p, conv.i));
    cai_graph_conv_set_layout(conv.i, CAI_CONV_COLS_FLIP);
    graph_val y = cai_graph_add(g, &conv, o);
    cr_assert_geq(y, 0, "%s", cai_graph_error(g));
    const graph_node *yn = cai_graph_node_at(g, y);
    cr_assert(yn->ndim == 4 && yn->shape[0] == n && yn->shape[1] == c6);
    int64_t slots[2] = {5, 7}, shape[4];
    cai_graph_eval_shape(g, y, slots, shape);
    cr_assert(shape[0] == 5 && shape[1] == 6 && shape[2] == 7 && shape[3] == 6);
    graph_op_args wg = {.op = GOP_CONV2D_WEIGHT_GRAD,
                        .n_in = 2,
                        .in = {y, x},
                        .i = {0, 0, 0, 2},
                        .n_shape = 4,
                        .shape = {c6, c2, c3, c3}};
    cai_graph_conv_pack(p, wg.i);
    graph_val dw = cai_graph_add(g, &wg, o);
    cr_assert_geq(dw, 0, "%s", cai_graph_error(g));
    cr_assert_eq(cai_graph_node_at(g, dw)->shape[1], c2);
    char *text = cai_graph_print(g, false, NULL);
    cr_assert(strstr(text, "conv2d(getitem, getitem_1, kernel=[3, 3], stride=[1, 1], padding=[1, "
                           "1], dilation=[1, 1], groups=2, flip=1)") != NULL,
              "%s", text);
    cr_assert(strstr(text, "conv2d_weight_grad(") != NULL, "%s", text);
    cai_graph_free_string(text);
    cai_graph_conv_set_layout(conv.i, CAI_CONV_COLS_GKNL); /* not a tap order */
    cr_assert_lt(cai_graph_add(g, &conv, o), 0);
    cr_assert(strstr(cai_graph_error(g), "tap order") != NULL, "%s", cai_graph_error(g));
    cai_graph_free(g);
}

/* A 1x1 convolution at unit strides without padding reads its images as their own
 * columns, through their strides: here the first 4 of 6 channels of each image (the image
 * stride is 6 planes), in 2 groups. Both kernels against plain loops. */
Test(conv_grad, one_by_one_kernels_read_the_images_in_place) {
    enum { N = 3, CB = 6, C = 4, O = 6, G = 2, H = 3, W = 5, L = H * W };
    kern_conv_geom g = {.n = N,
                        .c = C,
                        .h = H,
                        .w = W,
                        .kh = 1,
                        .kw = 1,
                        .sh = 1,
                        .sw = 1,
                        .dh = 1,
                        .dw = 1,
                        .oh = H,
                        .ow = W,
                        .groups = G};
    double x[N * CB * L], w[O * C / G], gy[N * O * L], y[N * O * L], dw[O * C / G];
    for (int i = 0; i < N * CB * L; i++)
        x[i] = sin(0.7 * i);
    for (int i = 0; i < O * C / G; i++)
        w[i] = cos(1.1 * i);
    for (int i = 0; i < N * O * L; i++)
        gy[i] = sin(0.3 * i + 1);
    int64_t xs[4] = {CB * L, L, W, 1};
    cr_assert_eq(cai_kern_conv2d(KERN_F64, &g, x, xs, w, O, 0.0, y), 0);
    cr_assert_eq(cai_kern_conv2d_weight_grad(KERN_F64, &g, x, xs, gy, O, dw), 0);
    int og = O / G, cg = C / G;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++)
            for (int l = 0; l < L; l++) {
                double want = 0;
                for (int c = 0; c < cg; c++)
                    want += w[o * cg + c] * x[n * CB * L + (o / og * cg + c) * L + l];
                double got = y[(n * O + o) * L + l];
                cr_assert(fabs(got - want) <= 1e-12, "y[%d, %d, %d]: %g vs %g", n, o, l, got, want);
            }
    for (int o = 0; o < O; o++)
        for (int c = 0; c < cg; c++) {
            double want = 0;
            for (int n = 0; n < N; n++)
                for (int l = 0; l < L; l++)
                    want += gy[(n * O + o) * L + l] * x[n * CB * L + (o / og * cg + c) * L + l];
            cr_assert(fabs(dw[o * cg + c] - want) <= 1e-12, "dw[%d, %d]: %g vs %g", o, c,
                      dw[o * cg + c], want);
        }
}
