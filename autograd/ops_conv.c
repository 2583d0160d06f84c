/* ops_conv.c - conv2d, and the internal im2col (unfold) and col2im (fold) that it and its
 * derivative rule are built on.
 *
 * The forward unfolds the input into columns [N, groups, C/groups*kh*kw, OH*OW] and runs
 * one batched GEMM per (image, group) against the weight viewed as [groups, O/groups, K].
 * The derivative rule is builder calls only, so the compiled backward traces it:
 *   grad_input  = col2im(W^T @ g), one GEMM per (image, group)
 *   grad_weight = g @ im2col(input)^T: when K >= L (batch_in_gemm), one GEMM per group
 *                 over the whole batch, g copied to [G, O/G, N*L] and the columns made in
 *                 the layout [G, K, N*L], so the sum over images happens inside the GEMM
 *                 (no [N, G, O/G, K] temporary and no separate sum); else one GEMM per
 *                 (image, group) and a sum over the batch
 *   grad_bias   = g summed over N, OH, OW.
 * The rule passes sizes through and never computes one: the sizes it needs (O/groups,
 * OH*OW) come from reshapes with -1 and from the metas of the values they make, so a
 * symbolic batch size stays symbolic.
 *
 * attrs: dims = the parameters CAI_CONV_KH ... CAI_CONV_DW (shape_rules.h), i[0] = groups,
 * i[1], i[2] = the end paddings (CAI_CONV_PH_END, CAI_CONV_PW_END); im2col's i[3] = the
 * column layout (CAI_CONV_COLS_*); col2im's attrs.shape is the image batch's shape.
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
                          .groups = a->i[0]};
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
    ca_tensor *cols = NULL, *wc = NULL, *r = NULL;
    int64_t N = m->shape[0], O = m->shape[1], L = m->shape[2] * m->shape[3], G = a->i[0];
    int64_t Og = O / G, K = w->shape[1] * w->shape[2] * w->shape[3];
    size_t esz = ca_dtype_size(m->dtype);
    ca_status st = cai_tensor_new(m, &r);
    if (st != CA_OK || N * O * L == 0)
        return finish(st, r, out);
    double beta = 0.0;
    if (bias) { /* start with the bias, so the GEMM adds onto it */
        int64_t shape[3] = {N, O, L}, cst[3] = {O * L, L, 1};
        kern_src src = {.data = cai_tensor_ptr(bias), .strides = {0, bias->strides[0], 0}};
        st = cai_op_kern_status(cai_kern_pointwise(KPW_COPY, kdt(m->dtype), kdt(m->dtype), 3, shape,
                                                   cai_tensor_ptr(r), cst, &src, 0, 0),
                                "conv2d bias");
        beta = 1.0;
    } else if (K == 0) {
        memset(cai_tensor_ptr(r), 0, (size_t)(N * O * L) * esz);
    }
    if (st == CA_OK && K > 0)
        st = unfold(x, a, &cols);
    if (st == CA_OK && K > 0)
        st = cai_tensor_contiguous(w, &wc);
    if (st == CA_OK && K > 0) {
        int64_t bshape[2] = {N, G};
        kern_mat_nd A = {.data = cai_tensor_ptr(wc), .rs = K, .cs = 1, .bs = {0, Og * K}};
        kern_mat_nd B = {.data = cai_tensor_ptr(cols), .rs = L, .cs = 1, .bs = {G * K * L, K * L}};
        int rc = cai_kern_gemm_nd(kdt(m->dtype), 2, bshape, Og, L, K, &A, false, &B, false, beta,
                                  cai_tensor_ptr(r));
        st = rc == -2 ? err_nomem("a GEMM packing buffer") : cai_op_kern_status(rc, "conv2d");
    }
    ca_tensor_release(cols);
    ca_tensor_release(wc);
    return finish(st, r, out);
}

static ca_bval conv_im2col(ca_builder *b, ca_bval x, const ca_attrs *at, int64_t layout) {
    ca_attrs a = {.dims = at->dims, .i = {at->i[0], at->i[1], at->i[2], layout}};
    return bx_apply(b, CA_OP_IM2COL, 1, &x, &a);
}

static ca_bval conv_col2im(ca_builder *b, ca_bval cols, const ca_attrs *at, const ca_meta *full) {
    ca_attrs a = {.dims = at->dims,
                  .i = {at->i[0], at->i[1], at->i[2]},
                  .shape = bx_ints_of(full->ndim, full->shape)};
    return bx_apply(b, CA_OP_COL2IM, 1, &cols, &a);
}

/* The permutations from g's [N, G, O/G, L] to [G, O/G, N, L], and from columns in the layout
 * [G, K, N, L] back to col2im's [N, G, K, L]. */
static const ca_ints to_gonl = {4, {1, 2, 0, 3}}, gknl_to_ngkl = {4, {2, 0, 1, 3}};

/* g [N, O, OH, OW], x [N, C, H, W], w [O, C/G, kh, kw]; with K = C/G*kh*kw, L = OH*OW.
 * Every size the products need comes from a value's meta, never from arithmetic here: O/G
 * from w viewed as [G, -1, C/G, kh, kw], and L from the columns when they are made (so it
 * is the very size col2im and im2col expect), else from g's reshape's -1.
 * grad_input folded like grad_weight (one [G, K, N*L] product read back by col2im through
 * a permuted view) measured ~10% slower than N products on w9's conv at 1 thread: its K
 * is only O/G and its output, the whole batch's columns, leaves the cache before col2im
 * reads it. */
/* Whether grad_weight sums over the batch inside one GEMM per group. That costs a copy of g
 * (N*O*L elements) and saves the [N, G, O/G, K] products and their sum (N*O*K): fold when
 * K >= L, and when a size is a trace's dynamic one. Decided on the node's sizes when the rule
 * runs; both ways give the same values, up to rounding. Measured at 1 thread: w9's
 * 64-channel 3x3 conv on 16x16 (K 576, L 256) folded ~8% faster; LeNet's 1->6 5x5 conv
 * on 28x28 (K 25, L 784) folded ~20% slower, its g copy far larger than what it saves. */
static bool batch_in_gemm(const ca_meta *wm, const ca_meta *gm) {
    const int64_t sizes[5] = {wm->shape[1], wm->shape[2], wm->shape[3], gm->shape[2], gm->shape[3]};
    for (int i = 0; i < 5; i++)
        if (!bx_size_is_number(sizes[i]))
            return true;
    return sizes[0] * sizes[1] * sizes[2] >= sizes[3] * sizes[4];
}

static void conv2d_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    const ca_meta *wm = &n->in_meta[1], *gm = &n->out_meta;
    int64_t G = n->attrs.i[0];
    bool need_x = node_needs_grad(n, 0), need_w = node_needs_grad(n, 1);
    if (n->n_in == 3 && node_needs_grad(n, 2)) {
        int64_t dims[3] = {0, 2, 3};
        gin[2] = bx_sum(b, g, 3, dims, false);
    }
    if (!need_x && !need_w)
        return;
    if (gm->shape[0] == 0 || wm->shape[0] == 0 || wm->shape[1] == 0) {
        /* nothing to multiply (and reshapes with -1 would be ambiguous): zeros. A
         * symbolic size is never 0, so this holds in a trace too. */
        for (int i = 0; i < 2; i++)
            if (node_needs_grad(n, i))
                gin[i] = bx_zeros_like(b, bx_saved(b, n, i));
        return;
    }
    ca_ints w5s = {5, {G, -1, wm->shape[1], wm->shape[2], wm->shape[3]}};
    ca_bval w5 = bx_reshape_ints(b, bx_saved(b, n, 1), &w5s); /* [G, O/G, C/G, kh, kw] */
    bool fold = batch_in_gemm(wm, gm);
    ca_bval cols = need_w ? conv_im2col(b, bx_saved(b, n, 0), &n->attrs,
                                        fold ? CAI_CONV_COLS_GKNL : CAI_CONV_COLS_NGKL)
                          : NULL;
    const ca_meta *w5m = bx_meta(b, w5), *cm = bx_meta(b, cols);
    if (!w5m || (need_w && !cm))
        return;
    ca_ints g4s = {4, {gm->shape[0], G, w5m->shape[1], cm ? cm->shape[3] : -1}};
    ca_bval g4 = bx_reshape_ints(b, g, &g4s); /* [N, G, O/G, L] */
    if (need_x) {
        ca_ints w3s = {3, {G, w5m->shape[1], -1}};
        ca_bval w3 = bx_reshape_ints(b, w5, &w3s);         /* [G, O/G, K] */
        ca_bval dcols = bx_matmul(b, w3, g4, true, false); /* [N, G, K, L] */
        gin[0] = conv_col2im(b, dcols, &n->attrs, &n->in_meta[0]);
    }
    if (need_w && !fold) {
        ca_bval dw = bx_matmul(b, g4, cols, false, true); /* [N, G, O/G, K] */
        int64_t batch = 0;
        gin[1] = bx_reshape(b, bx_sum(b, dw, 1, &batch, false), wm);
    } else if (need_w) {
        ca_ints g3s = {3, {G, w5m->shape[1], -1}}, c3s = {3, {G, cm->shape[1], -1}};
        ca_bval g3 = /* [G, O/G, N*L] */
            bx_reshape_ints(b, bx_contiguous(b, bx_permute(b, g4, &to_gonl)), &g3s);
        ca_bval dw = bx_matmul(b, g3, bx_reshape_ints(b, cols, &c3s), false, true);
        gin[1] = bx_reshape(b, dw, wm); /* [G, O/G, K] -> [O, C/G, kh, kw] */
    }
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

static void im2col_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (n->attrs.i[3] == CAI_CONV_COLS_GKNL) /* col2im reads [N, G, K, L]: a permuted view */
        g = bx_permute(b, g, &gknl_to_ngkl);
    gin[0] = conv_col2im(b, g, &n->attrs, &n->in_meta[0]);
}

/* ---------------------------------------------------------------------------------------
 * col2im (internal): columns [N, groups, K, L] -> zeros(attrs.shape) with each column entry
 * added where im2col read it
 */
static ca_status col2im_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                              ca_meta *out) {
    CA_CHECK(need_params("col2im", a));
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
    gin[0] = conv_im2col(b, g, &n->attrs, CAI_CONV_COLS_NGKL);
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
     .n_fields = 5,
     .fields = {CONV_PARAM_FIELDS, {"self_sizes", FIELD_SIZES, FROM_ATTR, 0}},
     .shape = col2im_shape,
     .forward = col2im_forward,
     .backward = col2im_backward},
};

const ca_op_group cai_ops_conv = {rows, sizeof rows / sizeof rows[0]};
