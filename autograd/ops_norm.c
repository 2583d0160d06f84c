/* ops_norm.c - batch normalization in training mode: the row, its shape rule, forward and
 * derivative rule, and the public wrapper.
 *
 * The forward is one kernel (cai_kern_batch_norm: statistics and affine map per channel);
 * the node saves the input, the weight and the per-channel mean and invstd, as PyTorch's
 * NativeBatchNormBackward0. The derivative rule is written with bx_* calls only, so the
 * compiled backward fuses it: two channel sums over fused pointwise inputs, then one
 * pointwise pass for the input's gradient.
 */
#include "autograd/builder.h"
#include "autograd/internal.h"

#include <string.h>

/* attrs.i[0]: which of weight and bias are inputs (weight first when both). */
enum { BN_WEIGHT = 1, BN_BIAS = 2 };

/* ---------------------------------------------------------------------------------------
 * Shape rule: x [N, C, *] float; weight and bias [C] of x's dtype.
 */
static ca_status bn_param_check(const ca_meta *x, const ca_meta *p, const char *what) {
    if (p->dtype != x->dtype)
        return err_set(CA_STATUS_DTYPE,
                       "batch_norm: %s is %s but the input is %s; convert it with ca_to_dtype so "
                       "the dtypes match",
                       what, ca_dtype_name(p->dtype), ca_dtype_name(x->dtype));
    if (p->ndim == 1 && p->shape[0] == x->shape[1])
        return CA_OK;
    char s1[128];
    return err_set(CA_STATUS_SHAPE,
                   "batch_norm: %s has shape %s; expected [%lld], one value per channel (dim 1 "
                   "of the input)",
                   what, cai_meta_str(p, s1, sizeof s1), (long long)x->shape[1]);
}

static ca_status bn_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                          ca_meta *out) {
    const ca_meta *x = &in[0];
    if (x->dtype != CA_FLOAT32 && x->dtype != CA_FLOAT64)
        return err_set(CA_STATUS_DTYPE,
                       "batch_norm: the input must be float32 or float64, got %s; convert it "
                       "with ca_to_dtype",
                       ca_dtype_name(x->dtype));
    char s1[128];
    if (x->ndim < 2)
        return err_set(CA_STATUS_SHAPE,
                       "batch_norm: the input %s has %d dims; expected [N, C, *] with at "
                       "least 2",
                       cai_meta_str(x, s1, sizeof s1), x->ndim);
    a->i[0] &= BN_WEIGHT | BN_BIAS;
    int want = 1 + (a->i[0] & BN_WEIGHT ? 1 : 0) + (a->i[0] & BN_BIAS ? 1 : 0);
    if (n_in != want)
        return err_set(CA_STATUS_INVALID, "batch_norm: flags %lld call for %d inputs, got %d",
                       (long long)a->i[0], want, n_in);
    int next = 1;
    if (a->i[0] & BN_WEIGHT)
        CA_CHECK(bn_param_check(x, &in[next++], "weight"));
    if (a->i[0] & BN_BIAS)
        CA_CHECK(bn_param_check(x, &in[next], "bias"));
    *out = *x;
    return CA_OK;
}

/* ---------------------------------------------------------------------------------------
 * Forward: aux[0] = mean [C], aux[1] = invstd [C] (both saved), aux[2] = biased var [C]
 * (for the caller's running statistics; not saved).
 */
static ca_status bn_run(const ca_attrs *a, ca_tensor *const *t, ca_tensor *y,
                        ca_tensor *const *st) {
    int64_t N = y->shape[0], C = y->shape[1], inner = 1;
    for (int d = 2; d < y->ndim; d++)
        inner *= y->shape[d];
    return cai_op_kern_status(cai_kern_batch_norm(kdt(y->dtype), N, C, inner, cai_tensor_ptr(t[0]),
                                                  t[1] ? cai_tensor_ptr(t[1]) : NULL,
                                                  t[2] ? cai_tensor_ptr(t[2]) : NULL, a->s[0],
                                                  cai_tensor_ptr(y), cai_tensor_ptr(st[0]),
                                                  cai_tensor_ptr(st[1]), cai_tensor_ptr(st[2])),
                              "batch_norm");
}

static ca_status bn_forward(const ca_op_def *row, ca_tensor *const *in, int n_in, const ca_attrs *a,
                            const ca_meta *m, ca_tensor **out, ca_tensor **aux) {
    ca_meta cm = {.dtype = m->dtype, .ndim = 1, .shape = {m->shape[1]}};
    ca_tensor *t[7] = {0}; /* x, weight, bias (contiguous), y, mean, invstd, var */
    int next = 1;
    ca_status st = cai_tensor_contiguous(in[0], &t[0]);
    if (st == CA_OK && (a->i[0] & BN_WEIGHT))
        st = cai_tensor_contiguous(in[next++], &t[1]);
    if (st == CA_OK && (a->i[0] & BN_BIAS))
        st = cai_tensor_contiguous(in[next], &t[2]);
    if (st == CA_OK)
        st = cai_tensor_new(m, &t[3]);
    for (int k = 4; k < 7 && st == CA_OK; k++)
        st = cai_tensor_new(&cm, &t[k]);
    if (st == CA_OK)
        st = bn_run(a, t, t[3], &t[4]);
    if (st == CA_OK) {
        *out = t[3];
        for (int k = 0; k < 3; k++)
            aux[k] = t[4 + k];
        t[3] = t[4] = t[5] = t[6] = NULL;
    }
    cai_op_release_all(t, 7);
    return st;
}

/* ---------------------------------------------------------------------------------------
 * Derivative rule. With d = x - mean, xh = d * invstd, the sums over every dim but 1 and
 * M = numel / C values per channel:
 *   dbias = sum(g), dweight = sum(g * xh) = invstd * sum(g * d),
 *   dx = invstd * weight * (g - sum(g) / M - xh * sum(g * xh) / M)
 *      = (g - mean_g) * scale - d * k,
 * with scale = invstd * weight, mean_g = sum(g) / M and k = scale * invstd^2 * sum(g * d) / M.
 * The per-channel factors are folded on [1, C, 1, ...] values, so the full-size work is two
 * sums (of g and of g * d) and one pointwise pass over g and x for dx. d stays x - mean,
 * as in PyTorch's kernel, not x * k1 + k0, which cancels when the mean is large.
 */

/* A [C] value as [1, C, 1, ...] for an nd-dim input: unsqueezes, no sizes needed. */
static ca_bval bn_channel_view(ca_builder *b, ca_bval v, int nd) {
    v = bx_unsqueeze(b, v, 0);
    for (int d = 2; d < nd; d++)
        v = bx_unsqueeze(b, v, d);
    return v;
}

typedef struct {
    int64_t dims[CA_MAX_DIMS]; /* every dim but 1 */
    int n_dims;
    uint32_t mask;
} bn_dims;

static bn_dims bn_reduced_dims(int nd) {
    bn_dims r = {.n_dims = 0, .mask = 0};
    for (int d = 0; d < nd; d++)
        if (d != 1) {
            r.dims[r.n_dims++] = d;
            r.mask |= 1u << d;
        }
    return r;
}

/* dx = (g - mean_g) * scale - d * k, from the two channel sums. d is made again here, as
 * x + (-mean) (the same bits as x - mean, but not the same node, so CSE keeps it apart):
 * shared, it would be an output of the group that feeds sum(g * d), which then could not
 * take that sum in and would write d and g * d out in full. */
static ca_bval bn_grad_input(ca_builder *b, const ca_node *n, const bn_dims *r, ca_bval g,
                             ca_bval neg_mean, ca_bval invstd, ca_bval sum_g, ca_bval sum_gd) {
    const ca_meta *xm = &n->in_meta[0];
    ca_bval d = bx_add(b, bx_saved(b, n, 0), neg_mean);
    bool has_w = n->attrs.i[0] & BN_WEIGHT;
    ca_bval scale =
        has_w ? bx_mul(b, invstd, bn_channel_view(b, bx_saved(b, n, 1), xm->ndim)) : invstd;
    ca_bval mean_g = bx_scale_inv_numel(b, sum_g, xm, r->mask);
    ca_bval mean_gd = bx_scale_inv_numel(b, sum_gd, xm, r->mask);
    ca_bval k = bx_mul(b, bx_mul(b, scale, bx_mul(b, invstd, invstd)), mean_gd);
    return bx_sub(b, bx_mul(b, bx_sub(b, g, mean_g), scale), bx_mul(b, d, k));
}

/* The channel sum of v (keepdim): over the trailing dims first, contiguous runs that the
 * reductions sum fastest, then over the batch dim, a small [N, C, 1, ...] sum. */
static ca_bval bn_channel_sum(ca_builder *b, ca_bval v, const bn_dims *r) {
    if (r->n_dims > 1)
        v = bx_sum(b, v, r->n_dims - 1, r->dims + 1, true);
    return bx_sum(b, v, 1, r->dims, true);
}

/* Double backward: aux 0 (the channel means) or 1 (invstd = 1 / sqrt(biased var + eps)),
 * [C], recomputed from the saved input with builder calls, so they carry its history. */
static ca_bval bn_aux_again(ca_builder *b, const ca_node *n, int k) {
    const ca_meta *xm = &n->in_meta[0];
    bn_dims r = bn_reduced_dims(xm->ndim);
    ca_bval x = bx_saved(b, n, 0);
    ca_bval v = bx_scale_inv_numel(b, bn_channel_sum(b, x, &r), xm, r.mask);
    if (k == 1) {
        ca_bval d = bx_sub(b, x, v);
        ca_bval var = bx_scale_inv_numel(b, bn_channel_sum(b, bx_mul(b, d, d), &r), xm, r.mask);
        v = bx_pw(b, KPW_RSQRT, bx_add_s(b, var, n->attrs.s[0]), NULL, NULL, 0, 0);
    }
    ca_meta c = {.dtype = xm->dtype, .ndim = 1, .shape = {xm->shape[1]}};
    return bx_reshape(b, v, &c);
}

static void bn_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    int nd = n->in_meta[0].ndim;
    bool has_w = n->attrs.i[0] & BN_WEIGHT, has_b = n->attrs.i[0] & BN_BIAS;
    int wi = 1, bi = has_w ? 2 : 1;
    bool need_x = node_needs_grad(n, 0), need_w = has_w && node_needs_grad(n, wi);
    bool need_b = has_b && node_needs_grad(n, bi);
    bn_dims r = bn_reduced_dims(nd);
    ca_bval sum_g = NULL, sum_gd = NULL, mean = NULL, invstd = NULL;
    if (need_x || need_b)
        sum_g = bn_channel_sum(b, g, &r);
    if (need_x || need_w) {
        invstd = bn_channel_view(b, bx_saved(b, n, 3), nd);
        mean = bn_channel_view(b, bx_saved(b, n, 2), nd);
        ca_bval d = bx_sub(b, bx_saved(b, n, 0), mean);
        sum_gd = bn_channel_sum(b, bx_mul(b, g, d), &r);
    }
    if (need_b)
        gin[bi] = bx_reshape(b, sum_g, &n->in_meta[bi]);
    if (need_w)
        gin[wi] = bx_reshape(b, bx_mul(b, sum_gd, invstd), &n->in_meta[wi]);
    if (need_x)
        gin[0] = bn_grad_input(b, n, &r, g, bx_neg(b, mean), invstd, sum_g, sum_gd);
}

/* ---------------------------------------------------------------------------------------
 * The row. "weight" is saved from input 1, which is the bias when only a bias is given;
 * the rule reads it only when flags say there is a weight (as layer_norm's row).
 */
static const ca_op_def rows[] = {
    {.id = CA_OP_BATCH_NORM,
     .name = "batch_norm",
     .node_name = "NativeBatchNormBackward0",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 1,
     .n_in_max = 3,
     .n_fields = 6,
     .fields = {{"input", FIELD_TENSOR, FROM_INPUT, 0},
                {"weight", FIELD_TENSOR, FROM_INPUT, 1},
                {"result1", FIELD_TENSOR, FROM_AUX, 0},
                {"result2", FIELD_TENSOR, FROM_AUX, 1},
                {"eps", FIELD_DOUBLE, FROM_ATTR, 0},
                {"flags", FIELD_INT, FROM_ATTR, 0}},
     .shape = bn_shape,
     .forward = bn_forward,
     .backward = bn_backward,
     .aux_again = bn_aux_again},
};

const ca_op_group cai_ops_norm = {rows, sizeof rows / sizeof rows[0]};

/* ---------------------------------------------------------------------------------------
 * Public wrapper
 */
static void bn_take_stat(ca_tensor **aux, int k, ca_tensor **dst) {
    if (dst) {
        *dst = aux[k];
        aux[k] = NULL;
    }
}

ca_status ca_batch_norm(ca_tensor *x, ca_tensor *weight, ca_tensor *bias, double eps,
                        ca_tensor **out, ca_tensor **batch_mean, ca_tensor **batch_var) {
    CA_ARG_NOT_NULL(out, "ca_batch_norm");
    *out = NULL;
    if (batch_mean)
        *batch_mean = NULL;
    if (batch_var)
        *batch_var = NULL;
    CA_ARG_NOT_NULL(x, "ca_batch_norm");
    ca_attrs a = {.s = {eps}, .i = {0}};
    /* weight's slot stays at index 1 for the saved-field list; see the row */
    ca_tensor *in[3] = {x, NULL, NULL}, *aux[CA_MAX_AUX] = {0};
    int n = 1;
    if (weight) {
        in[n++] = weight;
        a.i[0] |= BN_WEIGHT;
    }
    if (bias) {
        in[n++] = bias;
        a.i[0] |= BN_BIAS;
    }
    ca_status st = cai_op_call(CA_OP_BATCH_NORM, n, in, &a, out, aux);
    if (st == CA_OK) {
        bn_take_stat(aux, 0, batch_mean);
        bn_take_stat(aux, 2, batch_var);
    }
    cai_op_release_all(aux, CA_MAX_AUX);
    return st;
}
