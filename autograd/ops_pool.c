/* ops_pool.c - 2-d max and average pooling of [N, C, H, W] or unbatched [C, H, W] input.
 *
 * attrs: dims = the pooling parameters kh, kw, sh, sw, ph, pw, dh, dw (the first
 * CAI_CONV_IN_DIMS conv parameters, shape_rules.h); i[0] = ceil_mode; avg_pool2d:
 * i[1] = count_include_pad, i[2] = divisor_override (0: none); the shape rule sets
 * i[3] = the end paddings ph_end | pw_end << 32 at which conv2d's col2im has this output
 * size.
 *
 * max_pool2d's derivative sends each window's gradient to its winner: a scatter_add of the
 * gradient into zeros [planes, h*w] at the saved indices, as PyTorch's kernel does. With a
 * dilation, a window can miss the input altogether (its index is -1), so there the
 * derivative is the other one, conv2d's col2im (fold) of gradient columns [planes, 1,
 * kh*kw, oh*ow] times a one-hot mask of each window's winner, saved by the forward. The
 * fold is also avg_pool2d's, of the gradient over the saved divisors. All are graph ops
 * the compiled backward traces, and a rule needs no arithmetic on sizes.
 */
#include "autograd/builder.h"
#include "autograd/internal.h"

#include <string.h>

enum { POOL_KH, POOL_KW, POOL_SH, POOL_SW, POOL_PH, POOL_PW, POOL_DH, POOL_DW };

/* The output size of one spatial dim, as PyTorch's pooling_output_shape. */
static int64_t pool_out_size(int64_t in, int64_t k, int64_t s, int64_t pad, int64_t d, bool ceil) {
    int64_t span = in + 2 * pad - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
    int64_t out = (span >= 0 ? span / s : -((-span + s - 1) / s)) + 1;
    if (ceil && (out - 1) * s >= in + pad)
        out--;
    return out;
}

/* The end padding at which col2im's floor division gives `out` (see kern_conv_geom). */
static int64_t pool_end_pad(int64_t in, int64_t k, int64_t s, int64_t pad, int64_t d, int64_t out) {
    int64_t e = (out - 1) * s + d * (k - 1) + 1 - in - pad;
    return e > 0 ? e : 0;
}

static ca_status pool_check_params(const char *op, const int64_t *p) {
    if (p[POOL_KH] <= 0 || p[POOL_KW] <= 0)
        return err_set(CA_STATUS_SHAPE,
                       "%s: kernel size should be greater than zero, but got kH: %lld kW: %lld", op,
                       (long long)p[POOL_KH], (long long)p[POOL_KW]);
    if (p[POOL_SH] <= 0 || p[POOL_SW] <= 0)
        return err_set(CA_STATUS_SHAPE, "%s: stride should not be zero, but got sH: %lld sW: %lld",
                       op, (long long)p[POOL_SH], (long long)p[POOL_SW]);
    if (p[POOL_DH] <= 0 || p[POOL_DW] <= 0)
        return err_set(CA_STATUS_SHAPE,
                       "%s: dilation should be greater than zero, but got dilationH: %lld "
                       "dilationW: %lld",
                       op, (long long)p[POOL_DH], (long long)p[POOL_DW]);
    for (int k = 0; k < 2; k++) {
        int64_t pad = p[POOL_PH + k], ks = p[POOL_KH + k], d = p[POOL_DH + k];
        if (pad < 0 || pad > (d * (ks - 1) + 1) / 2)
            return err_set(CA_STATUS_SHAPE,
                           "%s: pad should be at most half of effective kernel size, but got "
                           "pad=%lld, kernel_size=%lld and dilation=%lld",
                           op, (long long)pad, (long long)ks, (long long)d);
    }
    return CA_OK;
}

static ca_status pool_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                            ca_meta *out) {
    const ca_meta *x = &in[0];
    const int64_t *p = a->dims.v;
    if (a->dims.n != CAI_CONV_IN_DIMS)
        return err_set(CA_STATUS_INVALID, "%s: expected %d pooling parameters, got %d", row->name,
                       CAI_CONV_IN_DIMS, a->dims.n);
    bool empty = false;
    for (int d = x->ndim == 4 ? 1 : 0; d < x->ndim; d++)
        empty = empty || x->shape[d] == 0;
    if ((x->ndim != 3 && x->ndim != 4) || empty)
        return err_set(CA_STATUS_SHAPE,
                       "%s: non-empty 3D or 4D (batch mode) tensor expected for input", row->name);
    if (x->dtype == CA_INT64)
        return err_set(CA_STATUS_DTYPE, "%s: the input must be float32 or float64, got int64",
                       row->name);
    CA_CHECK(pool_check_params(row->name, p));
    if (row->id == CA_OP_AVG_POOL2D && a->i[2] < 0)
        return err_set(CA_STATUS_SHAPE, "%s: divisor must be not zero", row->name);
    int64_t h = x->shape[x->ndim - 2], w = x->shape[x->ndim - 1];
    int64_t oh = pool_out_size(h, p[POOL_KH], p[POOL_SH], p[POOL_PH], p[POOL_DH], a->i[0] != 0);
    int64_t ow = pool_out_size(w, p[POOL_KW], p[POOL_SW], p[POOL_PW], p[POOL_DW], a->i[0] != 0);
    int64_t c = x->shape[x->ndim - 3];
    if (oh < 1 || ow < 1)
        return err_set(CA_STATUS_SHAPE,
                       "Given input size: (%lldx%lldx%lld). Calculated output size: "
                       "(%lldx%lldx%lld). Output size is too small",
                       (long long)c, (long long)h, (long long)w, (long long)c, (long long)oh,
                       (long long)ow);
    a->i[0] = a->i[0] != 0;
    a->i[1] = a->i[1] != 0;
    a->i[3] = pool_end_pad(h, p[POOL_KH], p[POOL_SH], p[POOL_PH], p[POOL_DH], oh) |
              pool_end_pad(w, p[POOL_KW], p[POOL_SW], p[POOL_PW], p[POOL_DW], ow) << 32;
    *out = *x;
    out->shape[x->ndim - 2] = oh;
    out->shape[x->ndim - 1] = ow;
    return CA_OK;
}

static kern_pool_geom pool_geom(const ca_attrs *a, const ca_meta *x, const ca_meta *m) {
    const int64_t *p = a->dims.v;
    int64_t planes = x->ndim == 4 ? x->shape[0] * x->shape[1] : x->shape[0];
    return (kern_pool_geom){.planes = planes,
                            .h = x->shape[x->ndim - 2],
                            .w = x->shape[x->ndim - 1],
                            .oh = m->shape[m->ndim - 2],
                            .ow = m->shape[m->ndim - 1],
                            .kh = p[POOL_KH],
                            .kw = p[POOL_KW],
                            .sh = p[POOL_SH],
                            .sw = p[POOL_SW],
                            .ph = p[POOL_PH],
                            .pw = p[POOL_PW],
                            .dh = p[POOL_DH],
                            .dw = p[POOL_DW]};
}

/* Whether every window of max_pool2d reads the input (pool_check_params's padding bound
 * sees to that without a dilation): then its derivative scatters by the indices. */
static bool max_pool_scatters(const ca_attrs *a) {
    return a->dims.v[POOL_DH] == 1 && a->dims.v[POOL_DW] == 1;
}

/* ---------------------------------------------------------------------------------------
 * max_pool2d: the result, its int64 indices (aux 0), and, with a dilation, when a node
 * will be recorded, the one-hot mask [batch..., kh*kw, oh, ow] of each window's winner
 * (aux 1)
 */
static ca_status max_pool_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                  const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                  ca_tensor **aux) {
    ca_tensor *xc = NULL, *r = NULL;
    ca_meta xm, im = *m, mm = *m;
    cai_tensor_meta(in[0], &xm);
    kern_pool_geom g = pool_geom(a, &xm, m);
    /* the mask [batch..., kh*kw, oh, ow]: the kernel's [planes, kh*kw, oh*ow] */
    mm.ndim = m->ndim + 1;
    mm.shape[m->ndim - 2] = g.kh * g.kw;
    mm.shape[m->ndim - 1] = g.oh;
    mm.shape[m->ndim] = g.ow;
    im.dtype = CA_INT64;
    bool want_mask = cai_grad_mode_enabled() && in[0]->requires_grad && !max_pool_scatters(a);
    ca_status st = cai_tensor_contiguous(in[0], &xc);
    if (st == CA_OK)
        st = cai_tensor_new(m, &r);
    if (st == CA_OK)
        st = cai_tensor_new(&im, &aux[0]);
    if (st == CA_OK && want_mask)
        st = cai_tensor_new(&mm, &aux[1]);
    if (st == CA_OK)
        st = cai_op_kern_status(cai_kern_max_pool2d(kdt(m->dtype), &g, cai_tensor_ptr(xc),
                                                    cai_tensor_ptr(r), cai_tensor_ptr(aux[0]),
                                                    aux[1] ? cai_tensor_ptr(aux[1]) : NULL),
                                row->name);
    ca_tensor_release(xc);
    if (st != CA_OK) {
        cai_op_release_all((ca_tensor *[]){r, aux[0], aux[1]}, 3);
        aux[0] = aux[1] = NULL;
        return st;
    }
    *out = r;
    return CA_OK;
}

/* ---------------------------------------------------------------------------------------
 * avg_pool2d: the result, and the divisor of each output position [oh, ow] (aux 0)
 */
static ca_status avg_pool_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                  const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                  ca_tensor **aux) {
    ca_tensor *xc = NULL, *r = NULL;
    ca_meta xm, dm = {.dtype = m->dtype, .ndim = 2};
    cai_tensor_meta(in[0], &xm);
    kern_pool_geom g = pool_geom(a, &xm, m);
    dm.shape[0] = g.oh;
    dm.shape[1] = g.ow;
    ca_status st = cai_tensor_contiguous(in[0], &xc);
    if (st == CA_OK)
        st = cai_tensor_new(m, &r);
    if (st == CA_OK)
        st = cai_tensor_new(&dm, &aux[0]);
    if (st == CA_OK) {
        cai_kern_avg_pool2d_divisors(kdt(m->dtype), &g, a->i[1] != 0, a->i[2],
                                     cai_tensor_ptr(aux[0]));
        st = cai_op_kern_status(cai_kern_avg_pool2d(kdt(m->dtype), &g, cai_tensor_ptr(xc),
                                                    cai_tensor_ptr(aux[0]), cai_tensor_ptr(r)),
                                row->name);
    }
    ca_tensor_release(xc);
    if (st != CA_OK) {
        cai_op_release_all((ca_tensor *[]){r, aux[0]}, 2);
        aux[0] = NULL;
        return st;
    }
    *out = r;
    return CA_OK;
}

/* ---------------------------------------------------------------------------------------
 * The derivatives: per-window columns [batch..., kh*kw, oh, ow] (the output's batch dims),
 * folded back by col2im over planes [planes, 1, kh*kw, oh*ow]. Every size comes from a
 * meta (planes from a reshape with -1), so sizes stay symbolic; the saved mask and
 * divisors share the gradient's batch dims, so a dynamic batch size unifies with theirs.
 */
static int64_t pool_window(const ca_node *n) {
    return n->attrs.dims.v[POOL_KH] * n->attrs.dims.v[POOL_KW];
}

static ca_bval pool_fold(ca_builder *b, const ca_node *n, ca_bval cols) {
    const ca_meta *o = &n->out_meta, *x = &n->in_meta[0];
    ca_ints flat = {.n = 4,
                    .v = {-1, pool_window(n), o->shape[o->ndim - 2], o->shape[o->ndim - 1]}};
    ca_bval planes = bx_unsqueeze(b, bx_reshape_ints(b, cols, &flat), 1);
    const ca_meta *pm = bx_meta(b, planes);
    if (!pm)
        return NULL;
    ca_ints cols_shape = {.n = 4, .v = {pm->shape[0], 1, pool_window(n), -1}};
    int64_t ends = n->attrs.i[3];
    ca_attrs a = {
        .dims = n->attrs.dims,
        .i = {1, ends & 0xffffffff, ends >> 32},
        .shape = {.n = 4, .v = {pm->shape[0], 1, x->shape[x->ndim - 2], x->shape[x->ndim - 1]}}};
    ca_bval folded = bx_reshape_ints(b, planes, &cols_shape);
    return bx_reshape(b, bx_apply(b, CA_OP_COL2IM, 1, &folded, &a), x);
}

/* g as [batch..., 1, oh, ow] */
static ca_bval pool_grad_cols(ca_builder *b, const ca_node *n, ca_bval g) {
    return bx_unsqueeze(b, g, n->out_meta.ndim - 2);
}

/* each window's gradient goes to its winner: added into zeros [planes, h*w] at the saved
 * indices (saved 0), or, with a dilation, g times the one-hot mask (saved 1), folded */
static void max_pool_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (!max_pool_scatters(&n->attrs)) {
        gin[0] = pool_fold(b, n, bx_mul(b, pool_grad_cols(b, n, g), bx_saved(b, n, 1)));
        return;
    }
    const ca_meta *o = &n->out_meta, *x = &n->in_meta[0];
    int64_t h = x->shape[x->ndim - 2], w = x->shape[x->ndim - 1];
    ca_ints flat = {.n = 2,
                    .v = {-1, bx_size_mul(b, o->shape[o->ndim - 2], o->shape[o->ndim - 1])}};
    ca_bval src = bx_reshape_ints(b, g, &flat);
    ca_bval index = bx_reshape_ints(b, bx_saved(b, n, 0), &flat);
    const ca_meta *sm = bx_meta(b, src);
    if (!sm)
        return;
    ca_meta planes = *sm;
    planes.shape[1] = bx_size_mul(b, h, w);
    gin[0] = bx_reshape(b, bx_scatter_add(b, &planes, 1, index, src), x);
}

/* each window's gradient over its divisor, spread over the window, folded */
static void avg_pool_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    ca_bval q = bx_div(b, pool_grad_cols(b, n, g), bx_saved(b, n, 0));
    const ca_meta *qm = bx_meta(b, q);
    if (!qm)
        return;
    ca_meta wide = *qm;
    wide.shape[wide.ndim - 3] = pool_window(n);
    gin[0] = pool_fold(b, n, bx_expand(b, q, &wide));
}

/* ---------------------------------------------------------------------------------------
 * adaptive_avg_pool2d: attrs.i[0], i[1] = the output's height and width. Its windows vary
 * in size, so the derivative is two products with the averaging matrices Ph [oh, h] and
 * Pw [ow, w] (aux 0 and 1): out = Ph x Pw^T, so dx = Ph^T g Pw.
 */
static ca_status adaptive_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                                ca_meta *out) {
    const ca_meta *x = &in[0];
    char b1[META_STR_SIZE];
    if (x->ndim != 3 && x->ndim != 4)
        return err_set(CA_STATUS_SHAPE,
                       "adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got %s",
                       cai_meta_str(x, b1, sizeof b1));
    for (int d = x->ndim - 3; d < x->ndim; d++)
        if (x->shape[d] == 0)
            return err_set(CA_STATUS_SHAPE,
                           "adaptive_avg_pool2d(): Expected input to have non-zero size for "
                           "non-batch dimensions, but input has sizes %s with dimension %d being "
                           "empty",
                           cai_meta_str(x, b1, sizeof b1), d);
    if (x->dtype == CA_INT64)
        return err_set(CA_STATUS_DTYPE, "adaptive_avg_pool2d: the input must be float32 or "
                                        "float64, got int64");
    if (a->i[0] < 0 || a->i[1] < 0)
        return err_set(CA_STATUS_SHAPE,
                       "adaptive_avg_pool2d: elements of output_size must be greater than or equal "
                       "to 0 but received {%lld, %lld}",
                       (long long)a->i[0], (long long)a->i[1]);
    *out = *x;
    out->shape[x->ndim - 2] = a->i[0];
    out->shape[x->ndim - 1] = a->i[1];
    return CA_OK;
}

static ca_status weights_new(ca_dtype dt, int64_t in, int64_t out, ca_tensor **mat) {
    ca_meta m = {.dtype = dt, .ndim = 2, .shape = {out, in}};
    CA_CHECK(cai_tensor_new(&m, mat));
    cai_kern_adaptive_weights(kdt(dt), in, out, cai_tensor_ptr(*mat));
    return CA_OK;
}

static ca_status adaptive_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                  const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                  ca_tensor **aux) {
    ca_tensor *xc = NULL, *r = NULL;
    ca_meta xm;
    cai_tensor_meta(in[0], &xm);
    ca_attrs unit = {.dims = {.n = CAI_CONV_IN_DIMS, .v = {1, 1, 1, 1, 0, 0, 1, 1}}};
    kern_pool_geom g = pool_geom(&unit, &xm, m);
    ca_status st = cai_tensor_contiguous(in[0], &xc);
    if (st == CA_OK)
        st = cai_tensor_new(m, &r);
    if (st == CA_OK)
        st = weights_new(m->dtype, g.h, g.oh, &aux[0]);
    if (st == CA_OK)
        st = weights_new(m->dtype, g.w, g.ow, &aux[1]);
    if (st == CA_OK && cai_meta_numel(m) > 0)
        st = cai_op_kern_status(
            cai_kern_adaptive_avg_pool2d(kdt(m->dtype), &g, cai_tensor_ptr(xc), cai_tensor_ptr(r)),
            row->name);
    ca_tensor_release(xc);
    if (st != CA_OK) {
        cai_op_release_all((ca_tensor *[]){r, aux[0], aux[1]}, 3);
        aux[0] = aux[1] = NULL;
        return st;
    }
    *out = r;
    return CA_OK;
}

static void adaptive_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    ca_bval rows = bx_matmul(b, g, bx_saved(b, n, 1), false, false);
    gin[0] = bx_matmul(b, bx_saved(b, n, 0), rows, true, false);
}

/* ---------------------------------------------------------------------------------------
 * The public functions
 */
static ca_attrs pool_attrs(const int64_t *kernel, const int64_t *stride, const int64_t *padding,
                           const int64_t *dilation, bool ceil_mode) {
    ca_attrs a = {.dims = {.n = CAI_CONV_IN_DIMS,
                           .v = {kernel[0], kernel[1], stride[0], stride[1], padding[0], padding[1],
                                 dilation[0], dilation[1]}},
                  .i = {ceil_mode}};
    return a;
}

ca_status ca_max_pool2d(ca_tensor *x, const int64_t *kernel, const int64_t *stride,
                        const int64_t *padding, const int64_t *dilation, bool ceil_mode,
                        ca_tensor **out, ca_tensor **indices) {
    CA_ARG_NOT_NULL(out, "ca_max_pool2d");
    *out = NULL;
    if (indices)
        *indices = NULL;
    CA_ARG_NOT_NULL(x, "ca_max_pool2d");
    CA_ARG_NOT_NULL(kernel, "ca_max_pool2d");
    CA_ARG_NOT_NULL(stride, "ca_max_pool2d");
    CA_ARG_NOT_NULL(padding, "ca_max_pool2d");
    CA_ARG_NOT_NULL(dilation, "ca_max_pool2d");
    ca_attrs a = pool_attrs(kernel, stride, padding, dilation, ceil_mode);
    ca_tensor *aux[CA_MAX_AUX] = {0};
    CA_CHECK(cai_op_call(CA_OP_MAX_POOL2D, 1, &x, &a, out, aux));
    if (indices)
        *indices = aux[0];
    else
        ca_tensor_release(aux[0]);
    ca_tensor_release(aux[1]);
    return CA_OK;
}

ca_status ca_avg_pool2d(ca_tensor *x, const int64_t *kernel, const int64_t *stride,
                        const int64_t *padding, bool ceil_mode, bool count_include_pad,
                        int64_t divisor_override, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_avg_pool2d");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_avg_pool2d");
    CA_ARG_NOT_NULL(kernel, "ca_avg_pool2d");
    CA_ARG_NOT_NULL(stride, "ca_avg_pool2d");
    CA_ARG_NOT_NULL(padding, "ca_avg_pool2d");
    ca_attrs a = pool_attrs(kernel, stride, padding, (const int64_t[]){1, 1}, ceil_mode);
    a.i[1] = count_include_pad;
    a.i[2] = divisor_override;
    return cai_op_call1(CA_OP_AVG_POOL2D, x, &a, out);
}

ca_status ca_adaptive_avg_pool2d(ca_tensor *x, int64_t out_h, int64_t out_w, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_adaptive_avg_pool2d");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_adaptive_avg_pool2d");
    ca_attrs a = {.i = {out_h, out_w}};
    return cai_op_call1(CA_OP_ADAPTIVE_AVG_POOL2D, x, &a, out);
}

/* ---------------------------------------------------------------------------------------
 * The rows
 */
static const ca_op_def rows[] = {
    {.id = CA_OP_MAX_POOL2D,
     .name = "max_pool2d",
     .node_name = "MaxPool2DWithIndicesBackward0",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 4,
     .fields = {{"indices", FIELD_TENSOR, FROM_AUX, 0},
                {"mask", FIELD_TENSOR, FROM_AUX, 1},
                {"params", FIELD_DIMS, FROM_ATTR, 0},
                F_INT("end_padding", 3)},
     .shape = pool_shape,
     .forward = max_pool_forward,
     .backward = max_pool_backward},
    {.id = CA_OP_AVG_POOL2D,
     .name = "avg_pool2d",
     .node_name = "AvgPool2DBackward0",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 3,
     .fields = {{"divisors", FIELD_TENSOR, FROM_AUX, 0},
                {"params", FIELD_DIMS, FROM_ATTR, 0},
                F_INT("end_padding", 3)},
     .shape = pool_shape,
     .forward = avg_pool_forward,
     .backward = avg_pool_backward},
    {.id = CA_OP_ADAPTIVE_AVG_POOL2D,
     .name = "adaptive_avg_pool2d",
     .node_name = "AdaptiveAvgPool2DBackward0",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 2,
     .fields = {{"rows", FIELD_TENSOR, FROM_AUX, 0}, {"cols", FIELD_TENSOR, FROM_AUX, 1}},
     .shape = adaptive_shape,
     .forward = adaptive_forward,
     .backward = adaptive_backward},
};

const ca_op_group cai_ops_pool = {rows, sizeof rows / sizeof rows[0]};
