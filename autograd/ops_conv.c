/* ops_conv.c - conv2d, its internal weight gradient, and the internal im2col (unfold) and
 * col2im (fold) that some of its derivatives are built on.
 *
 * The forward runs im2col + GEMM a cache-sized slab of images at a time
 * (codegen/kern_conv_gemm.c). The derivative rule is builder calls only, so the compiled
 * backward traces it:
 *   grad_input  = at stride 1 with padding up to 'same' (grad_input_as_conv), conv2d of g
 *                 with the weight's channels swapped, the transposed padding and the taps
 *                 flipped: per image one GEMM with inner dim O/G*kh*kw and no col2im;
 *                 else col2im(W^T @ g), one GEMM per (image, group)
 *   grad_weight = the conv2d_weight_grad op: the sum over images of g @ im2col(x)^T, made
 *                 a slab of images at a time (no whole-batch columns)
 *   grad_bias   = g summed over N, OH, OW.
 * The weight gradient's own rule uses conv2d and grad_input again (it is bilinear), so a
 * convolution is twice differentiable.
 * The rule passes sizes through and never computes one: the sizes it needs (O/groups,
 * OH*OW) come from reshapes with -1 and from the metas of the values they make, so a
 * symbolic batch size stays symbolic.
 *
 * attrs: dims = the parameters CAI_CONV_KH ... CAI_CONV_DW (shape_rules.h), i[0] = groups,
 * i[1], i[2] = the end paddings (CAI_CONV_PH_END, CAI_CONV_PW_END); i[3] = im2col's column
 * layout (CAI_CONV_COLS_*), and for conv2d, its weight gradient and col2im 0 or
 * CAI_CONV_COLS_FLIP (internal: the taps in reverse); col2im's attrs.shape is the image
 * batch's shape, the weight gradient's the weight's.
 */
#include "autograd/builder.h"
#include "autograd/internal.h"

#include <string.h>

static ca_status need_params(const char *op, const ca_attrs *a) {
    if (a->dims.n != CAI_CONV_IN_DIMS)
        return err_set(CA_STATUS_INVALID, "%s: expected %d convolution parameters, got %d", op,
                       CAI_CONV_IN_DIMS, a->dims.n);
    return CA_OK;
}

/* The CAI_CONV_NPARAMS parameters from attrs. */
static void params_of(const ca_attrs *a, int64_t *p) {
    memcpy(p, a->dims.v, sizeof(int64_t) * CAI_CONV_IN_DIMS);
    p[CAI_CONV_PH_END] = a->i[1];
    p[CAI_CONV_PW_END] = a->i[2];
}

static ca_status need_float(const char *op, const char *what, const ca_meta *m) {
    if (m->dtype == CA_FLOAT32 || m->dtype == CA_FLOAT64)
        return CA_OK;
    return err_set(CA_STATUS_DTYPE,
                   "%s: %s must be float32 or float64, got %s; convert with ca_to_dtype", op, what,
                   ca_dtype_name(m->dtype));
}

/* The im2col rule on concrete sizes: out (4 sizes, in the order of the layout a->i[3]) and
 * ohw. */
static ca_status im2col_sizes(const char *op, const ca_meta *x, const ca_attrs *a, int64_t *out,
                              int64_t *ohw) {
    cai_rule_error e;
    int64_t p[CAI_CONV_NPARAMS];
    params_of(a, p);
    if (cai_rule_im2col(&cai_sizes_concrete, op, x->ndim, x->shape, p, a->i[0], out, ohw, &e))
        return cai_rule_raise(&e);
    cai_conv_cols_shape(a->i[3], out);
    return CA_OK;
}

static void geom_of(const int64_t *img, const ca_attrs *a, kern_conv_geom *g) {
    int64_t p[CAI_CONV_NPARAMS];
    params_of(a, p);
    *g = (kern_conv_geom){.n = img[0],
                          .c = img[1],
                          .h = img[2],
                          .w = img[3],
                          .kh = p[CAI_CONV_KH],
                          .kw = p[CAI_CONV_KW],
                          .sh = p[CAI_CONV_SH],
                          .sw = p[CAI_CONV_SW],
                          .ph = p[CAI_CONV_PH],
                          .pw = p[CAI_CONV_PW],
                          .dh = p[CAI_CONV_DH],
                          .dw = p[CAI_CONV_DW],
                          .ph_end = p[CAI_CONV_PH_END],
                          .pw_end = p[CAI_CONV_PW_END],
                          .groups = a->i[0],
                          .flip = a->i[3] & CAI_CONV_COLS_FLIP};
    g->oh = cai_kern_conv_out_size(g->h, g->kh, g->sh, g->ph + g->ph_end, g->dh);
    g->ow = cai_kern_conv_out_size(g->w, g->kw, g->sw, g->pw + g->pw_end, g->dw);
}

/* Hand r to *out on success, release it otherwise. */
static ca_status finish(ca_status st, ca_tensor *r, ca_tensor **out) {
    if (st != CA_OK) {
        ca_tensor_release(r);
        return st;
    }
    *out = r;
    return CA_OK;
}

/* A fresh tensor of x's dtype and the 4 sizes s. */
static ca_status new4(ca_dtype dt, const int64_t *s, ca_tensor **out) {
    ca_meta m = {.dtype = dt, .ndim = 4};
    memcpy(m.shape, s, sizeof(int64_t) * 4);
    return cai_tensor_new(&m, out);
}

/* cols = im2col(x) as a new tensor [N, groups, K, L], or [groups, K, N, L] (a->i[3]). */
static ca_status unfold(ca_tensor *x, const ca_attrs *a, ca_tensor **cols) {
    ca_meta xm;
    cai_tensor_meta(x, &xm);
    int64_t shape[4], cs[4]; /* cs: the strides in [N, G, K, L] order, for the kernel */
    int perm[4];
    kern_conv_geom g;
    CA_CHECK(im2col_sizes("im2col", &xm, a, shape, NULL));
    geom_of(x->shape, a, &g);
    ca_tensor *r = NULL;
    ca_status st = new4(x->dtype, shape, &r);
    if (st != CA_OK)
        return st;
    cai_conv_cols_perm(a->i[3], perm);
    for (int d = 0; d < 4; d++)
        cs[perm[d]] = r->strides[d];
    st = cai_op_kern_status(
        cai_kern_im2col(kdt(x->dtype), &g, cai_tensor_ptr(x), x->strides, cai_tensor_ptr(r), cs),
        "im2col");
    return finish(st, r, cols);
}

/* ---------------------------------------------------------------------------------------
 * conv2d(input [N, C, H, W], weight [O, C/groups, kh, kw], bias [O]?) -> [N, O, OH, OW]
 */
static ca_status conv2d_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                              ca_meta *out) {
    const ca_meta *x = &in[0], *w = &in[1];
    char s1[META_STR_SIZE], s2[META_STR_SIZE];
    CA_CHECK(need_params("conv2d", a));
    CA_CHECK(need_float("conv2d", "input", x));
    CA_CHECK(need_float("conv2d", "weight", w));
    if (x->dtype != w->dtype)
        return err_set(CA_STATUS_DTYPE,
                       "conv2d: Input type (%s) and weight type (%s) should be the same; convert "
                       "one with ca_to_dtype",
                       ca_dtype_name(x->dtype), ca_dtype_name(w->dtype));
    if (x->ndim != 4)
        return err_set(CA_STATUS_SHAPE,
                       "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of "
                       "size: %s",
                       cai_meta_str(x, s1, sizeof s1));
    if (w->ndim != 4)
        return err_set(CA_STATUS_SHAPE,
                       "conv2d: expected a 4-D weight [out_channels, in_channels/groups, kH, kW], "
                       "got size %s",
                       cai_meta_str(w, s1, sizeof s1));
    int64_t p[CAI_CONV_NPARAMS], groups = a->i[0];
    params_of(a, p);
    for (int k = CAI_CONV_SH; k < CAI_CONV_NPARAMS; k++) {
        const char *kind = cai_conv_param_kind(k);
        bool pad = kind[0] == 'p';
        if (p[k] < (pad ? 0 : 1))
            return err_set(CA_STATUS_INVALID, "%s %s is not supported",
                           pad ? "negative" : "non-positive", kind);
    }
    if (groups < 1)
        return err_set(CA_STATUS_INVALID, "non-positive groups is not supported");
    if (a->i[3] != 0 && a->i[3] != CAI_CONV_COLS_FLIP) /* internal: the derivative's flip */
        return err_set(CA_STATUS_INVALID, "conv2d: unknown tap order %lld", (long long)a->i[3]);
    a->dims.v[CAI_CONV_KH] = w->shape[2];
    a->dims.v[CAI_CONV_KW] = w->shape[3];
    if (w->shape[0] < 1)
        return err_set(CA_STATUS_SHAPE,
                       "Given groups=%lld, expected weight to be at least 1 at dimension 0, but "
                       "got weight of size %s instead",
                       (long long)groups, cai_meta_str(w, s1, sizeof s1));
    if (w->shape[0] % groups != 0)
        return err_set(CA_STATUS_SHAPE,
                       "Given groups=%lld, expected weight to be divisible by %lld at dimension 0, "
                       "but got weight of size [%s] instead",
                       (long long)groups, (long long)groups, cai_meta_str(w, s1, sizeof s1));
    if (x->shape[1] != w->shape[1] * groups)
        return err_set(CA_STATUS_SHAPE,
                       "Given groups=%lld, weight of size %s, expected input%s to have %lld "
                       "channels, but got %lld channels instead",
                       (long long)groups, cai_meta_str(w, s1, sizeof s1),
                       cai_meta_str(x, s2, sizeof s2), (long long)(w->shape[1] * groups),
                       (long long)x->shape[1]);
    if (n_in == 3) {
        const ca_meta *bias = &in[2];
        if (bias->ndim != 1 || bias->shape[0] != w->shape[0])
            return err_set(CA_STATUS_SHAPE,
                           "Given weight of size %s, expected bias to be 1-dimensional with %lld "
                           "elements, but got bias of size %s instead",
                           cai_meta_str(w, s1, sizeof s1), (long long)w->shape[0],
                           cai_meta_str(bias, s2, sizeof s2));
        if (bias->dtype != x->dtype)
            return err_set(CA_STATUS_DTYPE,
                           "conv2d: bias is %s but the input is %s; convert it with ca_to_dtype",
                           ca_dtype_name(bias->dtype), ca_dtype_name(x->dtype));
    }
    int64_t cols[4], ohw[2];
    CA_CHECK(im2col_sizes("conv2d", x, a, cols, ohw));
    *out = (ca_meta){
        .dtype = x->dtype, .ndim = 4, .shape = {x->shape[0], w->shape[0], ohw[0], ohw[1]}};
    return CA_OK;
}

static ca_status conv2d_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                ca_tensor **aux) {
    ca_tensor *x = in[0], *w = in[1], *bias = n_in == 3 ? in[2] : NULL;
    ca_tensor *wc = NULL, *r = NULL;
    int64_t N = m->shape[0], O = m->shape[1], L = m->shape[2] * m->shape[3];
    ca_status st = cai_tensor_new(m, &r);
    if (st != CA_OK || N * O * L == 0)
        return finish(st, r, out);
    double beta = 0.0;
    if (bias) { /* start with the bias, so the GEMMs add onto it */
        int64_t shape[3] = {N, O, L}, cst[3] = {O * L, L, 1};
        kern_src src = {.data = cai_tensor_ptr(bias), .strides = {0, bias->strides[0], 0}};
        st = cai_op_kern_status(cai_kern_pointwise(KPW_COPY, kdt(m->dtype), kdt(m->dtype), 3, shape,
                                                   cai_tensor_ptr(r), cst, &src, 0, 0),
                                "conv2d bias");
        beta = 1.0;
    }
    if (st == CA_OK)
        st = cai_tensor_contiguous(w, &wc);
    if (st == CA_OK) {
        kern_conv_geom g;
        geom_of(x->shape, a, &g);
        int rc = cai_kern_conv2d(kdt(m->dtype), &g, cai_tensor_ptr(x), x->strides,
                                 cai_tensor_ptr(wc), O, beta, cai_tensor_ptr(r));
        st = rc == -2 ? err_nomem("conv2d's columns") : cai_op_kern_status(rc, "conv2d");
    }
    ca_tensor_release(wc);
    return finish(st, r, out);
}

static ca_bval conv_im2col(ca_builder *b, ca_bval x, const ca_attrs *at, int64_t layout) {
    ca_attrs a = {.dims = at->dims, .i = {at->i[0], at->i[1], at->i[2], layout}};
    return bx_apply(b, CA_OP_IM2COL, 1, &x, &a);
}

/* col2im of cols whose taps are stored in reverse when flip is CAI_CONV_COLS_FLIP. */
static ca_bval conv_col2im(ca_builder *b, ca_bval cols, const ca_attrs *at, int64_t flip,
                           const ca_meta *full) {
    ca_attrs a = {.dims = at->dims,
                  .i = {at->i[0], at->i[1], at->i[2], flip},
                  .shape = bx_ints_of(full->ndim, full->shape)};
    return bx_apply(b, CA_OP_COL2IM, 1, &cols, &a);
}

/* The derivative rules below take the convolution's attrs at (conv2d's: parameters,
 * groups, end paddings, flip) and pass sizes through from values' metas, never computing
 * one, so a symbolic batch size stays symbolic. */

/* d(loss)/d(weight) of conv2d(x, w) for its gradient g: the weight gradient op, which
 * makes x's columns a cache-sized slab of images at a time (kern_conv_gemm.c). */
static ca_bval conv_grad_weight(ca_builder *b, const ca_attrs *at, const ca_meta *wm, ca_bval g,
                                ca_bval x) {
    ca_attrs a = *at;
    a.shape = bx_ints_of(wm->ndim, wm->shape);
    ca_bval in[2] = {g, x};
    return bx_apply(b, CA_OP_CONV2D_WEIGHT_GRAD, 2, in, &a);
}

/* Whether grad_input is computed as a convolution of g (grad_input_by_conv): at stride 1,
 * when the transposed convolution's padding d*(k-1) - p is not negative at either end, and
 * the output is at least as large as the input (so its GEMMs, over the input's positions,
 * do no more work than W^T @ g over the output's; the same when the padding is 'same').
 * Decided on the parameters alone, so a symbolic size never changes it. */
static bool grad_input_as_conv(const ca_attrs *a) {
    int64_t p[CAI_CONV_NPARAMS];
    params_of(a, p);
    const int k[2] = {CAI_CONV_KH, CAI_CONV_KW}, s[2] = {CAI_CONV_SH, CAI_CONV_SW},
              d[2] = {CAI_CONV_DH, CAI_CONV_DW}, pb[2] = {CAI_CONV_PH, CAI_CONV_PW},
              pe[2] = {CAI_CONV_PH_END, CAI_CONV_PW_END};
    for (int axis = 0; axis < 2; axis++) {
        int64_t reach = p[d[axis]] * (p[k[axis]] - 1);
        if (p[s[axis]] != 1 || p[pb[axis]] > reach || p[pe[axis]] > reach ||
            p[pb[axis]] + p[pe[axis]] < reach)
            return false;
    }
    return true;
}

/* The weight [G, O/G, C/G, kh, kw] as [G, C/G, O/G, kh, kw]. */
static const ca_ints w5_to_gcokk = {5, {0, 2, 1, 3, 4}};

/* grad_input at stride 1 as a convolution of g [N, O, OH, OW]. The columns of g with the
 * padding d*(k-1) - p and the taps reversed (CAI_CONV_COLS_FLIP) hold, in row (o, ki, kj)
 * at input position (y, x), g[o, y + p - ki*d, x + p - kj*d]: exactly what
 * w[o, c, ki, kj] multiplies in dx[c, y, x]. So dx = conv2d(g, w as [C, O/G, kh, kw], that
 * padding, the taps flipped): per image one GEMM whose inner dim is O/G*kh*kw rather than
 * the O/G of W^T @ g, and no col2im (which adds up kh*kw short rows per position). A
 * convolution that is itself flipped gives the plain one here. w5 is the weight as
 * [G, O/G, C/G, kh, kw]. */
static ca_bval grad_input_by_conv(ca_builder *b, const ca_attrs *at, const ca_meta *xm, ca_bval g,
                                  ca_bval w5) {
    const ca_meta *w5m = bx_meta(b, w5);
    if (!w5m)
        return NULL;
    ca_attrs ta = *at; /* the transposed convolution's padding and taps */
    int64_t *v = ta.dims.v;
    v[CAI_CONV_PH] = v[CAI_CONV_DH] * (v[CAI_CONV_KH] - 1) - v[CAI_CONV_PH];
    v[CAI_CONV_PW] = v[CAI_CONV_DW] * (v[CAI_CONV_KW] - 1) - v[CAI_CONV_PW];
    ta.i[1] = v[CAI_CONV_DH] * (v[CAI_CONV_KH] - 1) - ta.i[1];
    ta.i[2] = v[CAI_CONV_DW] * (v[CAI_CONV_KW] - 1) - ta.i[2];
    ta.i[3] = at->i[3] ^ CAI_CONV_COLS_FLIP;
    ca_ints w4s = {4, {xm->shape[1], w5m->shape[1], w5m->shape[3], w5m->shape[4]}};
    ca_bval wt = bx_reshape_ints(b, bx_contiguous(b, bx_permute(b, w5, &w5_to_gcokk)), &w4s);
    ca_bval in[2] = {g, wt};
    return bx_apply(b, CA_OP_CONV2D, 2, in, &ta);
}

/* d(loss)/d(x) of conv2d(x, w) for its gradient g: as a convolution of g where
 * grad_input_as_conv says so, else per image and group W^T @ g [K, L] folded back by
 * col2im. */
static ca_bval conv_grad_input(ca_builder *b, const ca_attrs *at, const ca_meta *xm, ca_bval g,
                               ca_bval w) {
    const ca_meta *wm = bx_meta(b, w), *gm = bx_meta(b, g);
    if (!wm || !gm)
        return NULL;
    int64_t G = at->i[0];
    ca_ints w5s = {5, {G, -1, wm->shape[1], wm->shape[2], wm->shape[3]}};
    ca_bval w5 = bx_reshape_ints(b, w, &w5s); /* [G, O/G, C/G, kh, kw] */
    if (grad_input_as_conv(at))
        return grad_input_by_conv(b, at, xm, g, w5);
    const ca_meta *w5m = bx_meta(b, w5);
    if (!w5m)
        return NULL;
    ca_ints g4s = {4, {gm->shape[0], G, w5m->shape[1], -1}}, w3s = {3, {G, w5m->shape[1], -1}};
    ca_bval g4 = bx_reshape_ints(b, g, &g4s); /* [N, G, O/G, L] */
    ca_bval dcols = bx_matmul(b, bx_reshape_ints(b, w5, &w3s), g4, true, false); /* [N, G, K, L] */
    return conv_col2im(b, dcols, at, at->i[3] & CAI_CONV_COLS_FLIP, xm);
}

static void conv2d_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    const ca_meta *wm = &n->in_meta[1], *gm = &n->out_meta;
    if (n->n_in == 3 && node_needs_grad(n, 2)) {
        int64_t dims[3] = {0, 2, 3};
        gin[2] = bx_sum(b, g, 3, dims, false);
    }
    if (gm->shape[0] == 0 || wm->shape[0] == 0 || wm->shape[1] == 0) {
        /* nothing to multiply (and reshapes with -1 would be ambiguous): zeros. A
         * symbolic size is never 0, so this holds in a trace too. */
        for (int i = 0; i < 2; i++)
            if (node_needs_grad(n, i))
                gin[i] = bx_zeros_like(b, bx_saved(b, n, i));
        return;
    }
    if (node_needs_grad(n, 0))
        gin[0] = conv_grad_input(b, &n->attrs, &n->in_meta[0], g, bx_saved(b, n, 1));
    if (node_needs_grad(n, 1))
        gin[1] = conv_grad_weight(b, &n->attrs, wm, g, bx_saved(b, n, 0));
}

/* ---------------------------------------------------------------------------------------
 * conv2d_weight_grad (internal): inputs g [N, O, OH, OW] and x [N, C, H, W], conv2d's attrs
 * and attrs.shape = the weight's [O, C/groups, kh, kw]
 */
static ca_status wgrad_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                             ca_meta *out) {
    const ca_meta *g = &in[0], *x = &in[1];
    const char *op = "conv2d_weight_grad";
    CA_CHECK(need_params(op, a));
    CA_CHECK(need_float(op, "the gradient", g));
    CA_CHECK(need_float(op, "the input", x));
    int64_t ohw[2], cols[4], G = a->i[0];
    const int64_t *w = a->shape.v;
    if (g->dtype != x->dtype || g->ndim != 4 || x->ndim != 4 || a->shape.n != 4 || G < 1)
        return err_set(CA_STATUS_SHAPE,
                       "%s: expects 4-D gradient and input of one dtype, a 4-D "
                       "weight shape and groups >= 1",
                       op);
    if (a->i[3] != 0 && a->i[3] != CAI_CONV_COLS_FLIP)
        return err_set(CA_STATUS_INVALID, "%s: unknown tap order %lld", op, (long long)a->i[3]);
    ca_attrs ka = *a;
    ka.i[3] = CAI_CONV_COLS_NGKL;
    CA_CHECK(im2col_sizes(op, x, &ka, cols, ohw));
    char s1[META_STR_SIZE], s2[META_STR_SIZE], s3[META_STR_SIZE];
    if (g->shape[0] != x->shape[0] || g->shape[1] != w[0] || g->shape[2] != ohw[0] ||
        g->shape[3] != ohw[1] || w[0] % G != 0 || w[1] * G != x->shape[1] ||
        w[2] != a->dims.v[CAI_CONV_KH] || w[3] != a->dims.v[CAI_CONV_KW])
        return err_set(CA_STATUS_SHAPE, "%s: gradient %s does not fit input %s and weight %s", op,
                       cai_meta_str(g, s1, sizeof s1), cai_meta_str(x, s2, sizeof s2),
                       cai_err_shape_str(4, w, s3, sizeof s3));
    *out = (ca_meta){.dtype = x->dtype, .ndim = 4};
    memcpy(out->shape, w, sizeof(int64_t) * 4);
    return CA_OK;
}

static ca_status wgrad_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                               const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                               ca_tensor **aux) {
    ca_tensor *gc = NULL, *r = NULL, *x = in[1];
    ca_status st = cai_tensor_contiguous(in[0], &gc);
    if (st == CA_OK)
        st = cai_tensor_new(m, &r);
    if (st == CA_OK) {
        kern_conv_geom g;
        geom_of(x->shape, a, &g);
        int rc = cai_kern_conv2d_weight_grad(kdt(m->dtype), &g, cai_tensor_ptr(x), x->strides,
                                             cai_tensor_ptr(gc), m->shape[0], cai_tensor_ptr(r));
        st = rc == -2 ? err_nomem("conv2d's columns") : cai_op_kern_status(rc, "conv2d");
    }
    ca_tensor_release(gc);
    return finish(st, r, out);
}

/* The weight gradient is bilinear in (g, x): with G_w its gradient,
 * <G_w, wgrad(g, x)> = <g, conv2d(x, G_w)>, so d/dg = conv2d(x, G_w) and d/dx is conv2d's
 * grad_input for the weight G_w and the gradient g. */
static void wgrad_backward(ca_builder *b, const ca_node *n, ca_bval gw, ca_bval *gin) {
    ca_attrs ca = n->attrs;
    ca.shape.n = 0;
    if (node_needs_grad(n, 0)) {
        ca_bval in[2] = {bx_saved(b, n, 1), gw};
        gin[0] = bx_apply(b, CA_OP_CONV2D, 2, in, &ca);
    }
    if (node_needs_grad(n, 1))
        gin[1] = conv_grad_input(b, &ca, &n->in_meta[1], bx_saved(b, n, 0), gw);
}

ca_status ca_conv2d(ca_tensor *x, ca_tensor *weight, ca_tensor *bias, const int64_t *stride,
                    const int64_t *padding, const int64_t *dilation, int64_t groups,
                    ca_tensor **out) {
    return ca_conv2d_padded(x, weight, bias, stride, padding, padding, dilation, groups, out);
}

ca_status ca_conv2d_padded(ca_tensor *x, ca_tensor *weight, ca_tensor *bias, const int64_t *stride,
                           const int64_t *padding, const int64_t *padding_end,
                           const int64_t *dilation, int64_t groups, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_conv2d");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_conv2d");
    CA_ARG_NOT_NULL(weight, "ca_conv2d");
    CA_ARG_NOT_NULL(stride, "ca_conv2d");
    CA_ARG_NOT_NULL(padding, "ca_conv2d");
    CA_ARG_NOT_NULL(padding_end, "ca_conv2d");
    CA_ARG_NOT_NULL(dilation, "ca_conv2d");
    char s1[META_STR_SIZE];
    if (x->ndim != 3 && x->ndim != 4)
        return err_set(CA_STATUS_SHAPE,
                       "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of "
                       "size: %s",
                       cai_err_shape_str(x->ndim, x->shape, s1, sizeof s1));
    ca_attrs a = {.dims = {CAI_CONV_IN_DIMS,
                           {weight->ndim == 4 ? weight->shape[2] : 0,
                            weight->ndim == 4 ? weight->shape[3] : 0, stride[0], stride[1],
                            padding[0], padding[1], dilation[0], dilation[1]}},
                  .i = {groups, padding_end[0], padding_end[1]}};
    ca_tensor *in[3] = {x, weight, bias}, *x4 = NULL, *y4 = NULL;
    if (x->ndim == 4)
        return cai_op_call(CA_OP_CONV2D, bias ? 3 : 2, in, &a, out, NULL);
    /* unbatched: a batch of one, squeezed away after */
    ca_status st = ca_unsqueeze(x, 0, &x4);
    in[0] = x4;
    if (st == CA_OK)
        st = cai_op_call(CA_OP_CONV2D, bias ? 3 : 2, in, &a, &y4, NULL);
    int64_t d0 = 0;
    if (st == CA_OK)
        st = ca_squeeze(y4, 1, &d0, out);
    ca_tensor_release(x4);
    ca_tensor_release(y4);
    return st;
}

/* ---------------------------------------------------------------------------------------
 * im2col (internal): x [N, C, H, W] -> [N, groups, C/groups*kh*kw, OH*OW]
 */
static ca_status im2col_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                              ca_meta *out) {
    CA_CHECK(need_params("im2col", a));
    if (a->i[3] < 0 || a->i[3] >= CAI_CONV_COLS__COUNT)
        return err_set(CA_STATUS_INVALID, "im2col: unknown column layout %lld", (long long)a->i[3]);
    CA_CHECK(need_float("im2col", "the input", &in[0]));
    *out = (ca_meta){.dtype = in[0].dtype, .ndim = 4};
    return im2col_sizes("im2col", &in[0], a, out->shape, NULL);
}

static ca_status im2col_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                ca_tensor **aux) {
    return unfold(in[0], a, out);
}

/* From columns in the layout [G, K, N, L] back to col2im's [N, G, K, L]. */
static const ca_ints gknl_to_ngkl = {4, {2, 0, 1, 3}};

static void im2col_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    int64_t layout = n->attrs.i[3];
    if (cai_conv_cols_order(layout) == CAI_CONV_COLS_GKNL) /* col2im reads [N, G, K, L] */
        g = bx_permute(b, g, &gknl_to_ngkl);
    gin[0] = conv_col2im(b, g, &n->attrs, layout & CAI_CONV_COLS_FLIP, &n->in_meta[0]);
}

/* ---------------------------------------------------------------------------------------
 * col2im (internal): columns [N, groups, K, L] -> zeros(attrs.shape) with each column entry
 * added where im2col read it
 */
static ca_status col2im_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                              ca_meta *out) {
    CA_CHECK(need_params("col2im", a));
    if (a->i[3] != 0 && a->i[3] != CAI_CONV_COLS_FLIP)
        return err_set(CA_STATUS_INVALID, "col2im: unknown tap order %lld (0 or %d)",
                       (long long)a->i[3], CAI_CONV_COLS_FLIP);
    CA_CHECK(need_float("col2im", "the columns", &in[0]));
    cai_rule_error e;
    int64_t p[CAI_CONV_NPARAMS];
    params_of(a, p);
    if (cai_rule_col2im(&cai_sizes_concrete, in[0].ndim, in[0].shape, a->shape.n, a->shape.v, p,
                        a->i[0], &e))
        return cai_rule_raise(&e);
    *out = (ca_meta){.dtype = in[0].dtype, .ndim = 4};
    memcpy(out->shape, a->shape.v, sizeof(int64_t) * 4);
    return CA_OK;
}

static ca_status col2im_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                ca_tensor **aux) {
    ca_tensor *cols = in[0], *r = NULL;
    kern_conv_geom g;
    geom_of(m->shape, a, &g);
    ca_status st = cai_tensor_new(m, &r);
    if (st == CA_OK)
        st = cai_op_kern_status(cai_kern_col2im(kdt(m->dtype), &g, cai_tensor_ptr(cols),
                                                cols->strides, cai_tensor_ptr(r)),
                                "col2im");
    return finish(st, r, out);
}

static void col2im_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    gin[0] = conv_im2col(b, g, &n->attrs, CAI_CONV_COLS_NGKL | n->attrs.i[3]);
}

/* ---------------------------------------------------------------------------------------
 * The rows
 */
#define CONV_PARAM_FIELDS                                                                          \
    {"params", FIELD_DIMS, FROM_ATTR, 0}, {"groups", FIELD_INT, FROM_ATTR, 0},                     \
        {"padding_end_h", FIELD_INT, FROM_ATTR, 1}, {                                              \
        "padding_end_w", FIELD_INT, FROM_ATTR, 2                                                   \
    }

static const ca_op_def rows[] = {
    {.id = CA_OP_CONV2D,
     .name = "conv2d",
     .node_name = "ConvolutionBackward0",
     .fusion = CA_FUSE_GEMM,
     .n_in_min = 2,
     .n_in_max = 3,
     .n_fields = 6,
     .fields = {{"input", FIELD_TENSOR, FROM_INPUT, 0},
                {"weight", FIELD_TENSOR, FROM_INPUT, 1},
                CONV_PARAM_FIELDS},
     .shape = conv2d_shape,
     .forward = conv2d_forward,
     .backward = conv2d_backward},
    {.id = CA_OP_CONV2D_WEIGHT_GRAD,
     .name = "conv2d_weight_grad",
     .node_name = "ConvolutionWeightGradBackward0",
     .fusion = CA_FUSE_GEMM,
     .n_in_min = 2,
     .n_in_max = 2,
     .n_fields = 7,
     .fields = {{"grad_output", FIELD_TENSOR, FROM_INPUT, 0},
                {"input", FIELD_TENSOR, FROM_INPUT, 1},
                CONV_PARAM_FIELDS,
                {"weight_sizes", FIELD_SIZES, FROM_ATTR, 0}},
     .shape = wgrad_shape,
     .forward = wgrad_forward,
     .backward = wgrad_backward},
    {.id = CA_OP_IM2COL,
     .name = "im2col",
     .node_name = "Im2ColBackward0",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 5,
     .fields = {CONV_PARAM_FIELDS, {"layout", FIELD_INT, FROM_ATTR, 3}},
     .shape = im2col_shape,
     .forward = im2col_forward,
     .backward = im2col_backward},
    {.id = CA_OP_COL2IM,
     .name = "col2im",
     .node_name = "Col2ImBackward0",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 6,
     .fields = {CONV_PARAM_FIELDS,
                {"self_sizes", FIELD_SIZES, FROM_ATTR, 0},
                {"flip", FIELD_INT, FROM_ATTR, 3}},
     .shape = col2im_shape,
     .forward = col2im_forward,
     .backward = col2im_backward},
};

const ca_op_group cai_ops_conv = {rows, sizeof rows / sizeof rows[0]};
