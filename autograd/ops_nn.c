/* ops_nn.c - the neural-network ops: softmax, log_softmax, nll_loss (and its internal
 * backward row), mse_loss, layer_norm and dropout; their shape rules, forwards, derivative
 * rules and public wrappers, plus the composite cross_entropy.
 *
 * Forwards run the row kernels of codegen (softmax, layer_norm, the dropout mask) on
 * contiguous rows; nll_loss, a gather of one value per row, is a plain loop here.
 * Derivative rules are written with bx_* calls only, as everywhere.
 */
#include "autograd/builder.h"
#include "autograd/internal.h"
#include "graph/graph.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Helpers
 */
static ca_status need_float(const char *op, const char *what, const ca_meta *m) {
    if (m->dtype == CA_FLOAT32 || m->dtype == CA_FLOAT64)
        return CA_OK;
    return err_set(CA_STATUS_DTYPE,
                   "%s: %s must be float32 or float64, got %s; convert with ca_to_dtype", op, what,
                   ca_dtype_name(m->dtype));
}

static ca_status need_same_dtype(const char *op, const char *what, const ca_meta *x,
                                 const ca_meta *y) {
    if (x->dtype == y->dtype)
        return CA_OK;
    return err_set(CA_STATUS_DTYPE,
                   "%s: %s is %s but the input is %s; convert it with ca_to_dtype so the dtypes "
                   "match",
                   op, what, ca_dtype_name(y->dtype), ca_dtype_name(x->dtype));
}

static ca_status check_reduction(const char *op, int64_t r) {
    if (r == CA_REDUCTION_NONE || r == CA_REDUCTION_MEAN || r == CA_REDUCTION_SUM)
        return CA_OK;
    return err_set(CA_STATUS_INVALID,
                   "%s: reduction %lld is not valid; use CA_REDUCTION_NONE, CA_REDUCTION_MEAN "
                   "or CA_REDUCTION_SUM",
                   op, (long long)r);
}

/* ---------------------------------------------------------------------------------------
 * softmax / log_softmax: attrs.i[0] = dim
 */
static ca_status softmax_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                               ca_meta *out) {
    CA_CHECK(need_float(row->name, "x", &in[0]));
    CA_CHECK(cai_dim_normalize(&a->i[0], in[0].ndim, row->name));
    *out = in[0];
    return CA_OK;
}

/* x with dims d and e exchanged, as a view. */
static ca_status swap_view(ca_tensor *x, int d, int e, ca_tensor **out) {
    int64_t shape[CA_MAX_DIMS], strides[CA_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    memcpy(strides, x->strides, sizeof strides);
    shape[d] = x->shape[e];
    shape[e] = x->shape[d];
    strides[d] = x->strides[e];
    strides[e] = x->strides[d];
    return cai_tensor_alias(x, x->ndim, shape, strides, x->offset, out);
}

/* softmax over the last dim of a contiguous x into a fresh tensor */
static ca_status softmax_rows(ca_tensor *x, bool log, ca_tensor **out) {
    ca_meta m;
    cai_tensor_meta(x, &m);
    CA_CHECK(cai_tensor_new(&m, out));
    int64_t n = x->ndim ? x->shape[x->ndim - 1] : 1, rows = n ? cai_meta_numel(&m) / n : 0;
    if (rows == 0 || n == 0)
        return CA_OK;
    ca_status st = cai_op_kern_status(
        cai_kern_softmax(kdt(x->dtype), rows, n, cai_tensor_ptr(x), cai_tensor_ptr(*out), log),
        "softmax");
    if (st != CA_OK) {
        ca_tensor_release(*out);
        *out = NULL;
    }
    return st;
}

/* The kernel works on contiguous rows: other dims are swapped to the end and back. */
static ca_status softmax_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                 const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                 ca_tensor **aux) {
    ca_tensor *x = in[0];
    bool log = row->id == CA_OP_LOG_SOFTMAX;
    int dim = (int)a->i[0], last = x->ndim - 1;
    if (x->ndim == 0 || (dim == last && ca_tensor_is_contiguous(x)))
        return softmax_rows(x, log, out);
    ca_tensor *t[4] = {0}; /* swapped view, its contiguous copy, result, result swapped back */
    ca_status st = swap_view(x, dim, last, &t[0]);
    if (st == CA_OK)
        st = cai_tensor_contiguous(t[0], &t[1]);
    if (st == CA_OK)
        st = softmax_rows(t[1], log, &t[2]);
    if (st == CA_OK)
        st = swap_view(t[2], dim, last, &t[3]);
    if (st == CA_OK)
        st = cai_tensor_contiguous(t[3], out);
    cai_op_release_all(t, 4);
    return st;
}

/* softmax: dx = y * (g - sum(g * y)); log_softmax: dx = g - exp(y) * sum(g). */
static void softmax_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (!node_needs_grad(n, 0))
        return;
    ca_bval y = bx_saved(b, n, 0);
    int64_t dim = n->attrs.i[0];
    ca_bval s = bx_sum(b, bx_mul(b, g, y), 1, &dim, true);
    gin[0] = bx_mul(b, y, bx_sub(b, g, s));
}

static void log_softmax_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (!node_needs_grad(n, 0))
        return;
    ca_bval y = bx_saved(b, n, 0);
    int64_t dim = n->attrs.i[0];
    ca_bval s = bx_sum(b, g, 1, &dim, true);
    gin[0] = bx_sub(b, g, bx_mul(b, bx_exp(b, y), s));
}

/* ---------------------------------------------------------------------------------------
 * nll_loss: inputs (log_probs [N, C, d...] or [C], target int64 [N, d...] or []);
 * attrs.i[0] = reduction, i[1] = ignore_index; aux[0] = total_weight.
 */

/* [N, C, inner] view of an input shape ([C] is N = 1, inner = 1) */
static void nll_dims(int ndim, const int64_t *shape, int64_t *N, int64_t *C, int64_t *inner) {
    *N = ndim >= 2 ? shape[0] : 1;
    *C = ndim >= 2 ? shape[1] : shape[0];
    *inner = 1;
    for (int d = 2; d < ndim; d++)
        *inner *= shape[d];
}

static ca_status nll_check_target(const char *op, const ca_meta *x, const ca_meta *t) {
    if (t->dtype != CA_INT64)
        return err_set(CA_STATUS_DTYPE,
                       "%s: target must hold int64 class indices, got %s; convert it with "
                       "ca_to_dtype(target, CA_INT64, ...)",
                       op, ca_dtype_name(t->dtype));
    cai_rule_error e;
    if (cai_rule_nll_target(&cai_sizes_concrete, op, x->ndim, x->shape, t->ndim, t->shape, &e))
        return cai_rule_raise(&e);
    return CA_OK;
}

static ca_status nll_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                           ca_meta *out) {
    CA_CHECK(need_float("nll_loss", "input", &in[0]));
    CA_CHECK(check_reduction("nll_loss", a->i[0]));
    CA_CHECK(nll_check_target("nll_loss", &in[0], &in[1]));
    if (a->i[0] == CA_REDUCTION_NONE) {
        *out = in[1];
        out->dtype = in[0].dtype;
    } else {
        *out = (ca_meta){.dtype = in[0].dtype, .ndim = 0};
    }
    return CA_OK;
}

static ca_status nll_bad_target(int64_t t, int64_t pos, int64_t C, int64_t ignore) {
    return err_set(CA_STATUS_INDEX,
                   "nll_loss: target %lld (at flat position %lld) is out of range for %lld "
                   "classes; targets must be in [0, %lld) or equal ignore_index (%lld)",
                   (long long)t, (long long)pos, (long long)C, (long long)C, (long long)ignore);
}

/* Sum (or per-element values) of -x[n, target, s] over non-ignored targets. */
static ca_status nll_compute(const ca_tensor *x, const ca_tensor *t, const ca_attrs *a,
                             ca_tensor *out, ca_tensor *tw) {
    int64_t N, C, inner;
    nll_dims(x->ndim, x->shape, &N, &C, &inner);
    const int64_t *tg = cai_tensor_ptr(t);
    const void *xp = cai_tensor_ptr(x);
    void *op = cai_tensor_ptr(out);
    kern_dtype dt = kdt(x->dtype);
    double acc = 0, count = 0;
    for (int64_t i = 0; i < N * inner; i++) {
        int64_t k = tg[i], n = i / inner, s = i % inner;
        double v = 0;
        if (k != a->i[1]) {
            if (k < 0 || k >= C)
                return nll_bad_target(k, i, C, a->i[1]);
            v = -kern_load(dt, xp, (n * C + k) * inner + s);
            count += 1;
        }
        if (a->i[0] == CA_REDUCTION_NONE)
            kern_store(dt, op, i, v);
        acc += v;
    }
    if (a->i[0] == CA_REDUCTION_SUM)
        kern_store(dt, op, 0, acc);
    else if (a->i[0] == CA_REDUCTION_MEAN)
        kern_store(dt, op, 0, acc / count); /* 0/0 = NaN when every target is ignored, as PyTorch */
    kern_store(dt, cai_tensor_ptr(tw), 0, count);
    return CA_OK;
}

static ca_status nll_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                             const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                             ca_tensor **aux) {
    ca_meta twm = {.dtype = in[0]->dtype, .ndim = 0};
    ca_tensor *t[4] = {0}; /* x contiguous, target contiguous, out, total_weight */
    ca_status st = cai_tensor_contiguous(in[0], &t[0]);
    if (st == CA_OK)
        st = cai_tensor_contiguous(in[1], &t[1]);
    if (st == CA_OK)
        st = cai_tensor_new(m, &t[2]);
    if (st == CA_OK)
        st = cai_tensor_new(&twm, &t[3]);
    if (st == CA_OK)
        st = nll_compute(t[0], t[1], a, t[2], t[3]);
    if (st == CA_OK) {
        *out = t[2];
        aux[0] = t[3];
        t[2] = t[3] = NULL;
    }
    cai_op_release_all(t, 4);
    return st;
}

static void nll_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (!node_needs_grad(n, 0))
        return;
    ca_attrs a = {0};
    a.i[0] = n->attrs.i[0];
    a.i[1] = n->attrs.i[1];
    a.shape.n = n->in_meta[0].ndim;
    memcpy(a.shape.v, n->in_meta[0].shape, sizeof(int64_t) * (size_t)a.shape.n);
    ca_bval ins[3] = {g, bx_saved(b, n, 0), bx_saved(b, n, 1)};
    gin[0] = bx_apply(b, CA_OP_NLL_LOSS_BACKWARD, 3, ins, &a);
}

/* nll_loss_backward is linear in g: its derivative for g is nll_loss of the incoming
 * gradient at the same targets, reduced the same way (total_weight counts the same
 * targets). Reached by double backward only. saved: target */
static void nll_bw_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (!node_needs_grad(n, 0))
        return;
    ca_attrs a = {.i = {n->attrs.i[0], n->attrs.i[1]}};
    ca_bval ins[2] = {g, bx_saved(b, n, 0)};
    gin[0] = bx_apply(b, CA_OP_NLL_LOSS, 2, ins, &a);
}

/* nll_loss_backward (internal): inputs (g, target, total_weight); attrs as nll_loss plus
 * attrs.shape = the input's shape. Zeros with -g (/ total_weight for mean, per element
 * for none) at each target class. */
static ca_status nll_bw_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                              ca_meta *out) {
    const char *op = "nll_loss_backward";
    CA_CHECK(need_float(op, "grad", &in[0]));
    CA_CHECK(check_reduction(op, a->i[0]));
    if (a->shape.n < 1 || a->shape.n > CA_MAX_DIMS)
        return err_set(CA_STATUS_SHAPE, "%s: the input shape has %d dims; expected 1 to %d", op,
                       a->shape.n, CA_MAX_DIMS);
    ca_meta xm = {.dtype = in[0].dtype, .ndim = a->shape.n};
    memcpy(xm.shape, a->shape.v, sizeof(int64_t) * (size_t)a->shape.n);
    CA_CHECK(nll_check_target(op, &xm, &in[1]));
    CA_CHECK(need_same_dtype(op, "total_weight", &in[0], &in[2]));
    bool per_elem = a->i[0] == CA_REDUCTION_NONE;
    if ((per_elem && !cai_meta_same_shape(&in[0], &in[1])) || (!per_elem && in[0].ndim != 0)) {
        char s1[128], s2[128];
        return err_set(CA_STATUS_SHAPE, "%s: grad %s does not fit target %s for reduction %lld", op,
                       cai_meta_str(&in[0], s1, sizeof s1), cai_meta_str(&in[1], s2, sizeof s2),
                       (long long)a->i[0]);
    }
    *out = xm;
    return CA_OK;
}

static ca_status nll_bw_compute(const ca_tensor *g, const ca_tensor *t, const ca_tensor *tw,
                                const ca_attrs *a, ca_tensor *out) {
    int64_t N, C, inner;
    nll_dims(out->ndim, out->shape, &N, &C, &inner);
    kern_dtype dt = kdt(out->dtype);
    const int64_t *tg = cai_tensor_ptr(t);
    const void *gp = cai_tensor_ptr(g);
    void *op = cai_tensor_ptr(out);
    double scale = a->i[0] == CA_REDUCTION_MEAN ? 1.0 / kern_load(dt, cai_tensor_ptr(tw), 0) : 1.0;
    for (int64_t i = 0; i < N * inner; i++) {
        int64_t k = tg[i], n = i / inner, s = i % inner;
        if (k == a->i[1])
            continue;
        if (k < 0 || k >= C)
            return nll_bad_target(k, i, C, a->i[1]);
        double gv = kern_load(dt, gp, a->i[0] == CA_REDUCTION_NONE ? i : 0);
        kern_store(dt, op, (n * C + k) * inner + s, -gv * scale);
    }
    return CA_OK;
}

static ca_status nll_bw_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                ca_tensor **aux) {
    ca_tensor *t[3] = {0}; /* g contiguous, target contiguous, result */
    ca_status st = cai_tensor_contiguous(in[0], &t[0]);
    if (st == CA_OK)
        st = cai_tensor_contiguous(in[1], &t[1]);
    if (st == CA_OK)
        st = cai_tensor_full(m, 0.0, &t[2]);
    if (st == CA_OK)
        st = nll_bw_compute(t[0], t[1], in[2], a, t[2]);
    if (st == CA_OK) {
        *out = t[2];
        t[2] = NULL;
    }
    cai_op_release_all(t, 3);
    return st;
}

/* ---------------------------------------------------------------------------------------
 * mse_loss: inputs (input, target), broadcast as PyTorch does; attrs.i[0] = reduction
 */
static ca_status mse_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                           ca_meta *out) {
    CA_CHECK(need_float("mse_loss", "input", &in[0]));
    CA_CHECK(need_float("mse_loss", "target", &in[1]));
    CA_CHECK(need_same_dtype("mse_loss", "target", &in[0], &in[1]));
    CA_CHECK(check_reduction("mse_loss", a->i[0]));
    ca_meta bm;
    CA_CHECK(cai_meta_broadcast(&in[0], &in[1], &bm, "mse_loss"));
    if (a->i[0] == CA_REDUCTION_NONE)
        *out = bm;
    else
        *out = (ca_meta){.dtype = in[0].dtype, .ndim = 0};
    return CA_OK;
}

static ca_status mse_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                             const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                             ca_tensor **aux) {
    ca_meta bm, xm, tm;
    cai_tensor_meta(in[0], &xm);
    cai_tensor_meta(in[1], &tm);
    CA_CHECK(cai_meta_broadcast(&xm, &tm, &bm, "mse_loss"));
    ca_tensor *t[3] = {0}; /* difference, its square, the reduced result */
    ca_status st = cai_tensor_pointwise(KPW_SUB, &bm, 2, in, 1.0, 0.0, &t[0]);
    if (st == CA_OK)
        st = cai_tensor_pointwise(KPW_SQUARE, &bm, 1, &t[0], 0.0, 0.0, &t[1]);
    if (st == CA_OK && a->i[0] == CA_REDUCTION_NONE) {
        *out = t[1];
        t[1] = NULL;
    } else if (st == CA_OK) {
        st = cai_tensor_new(m, &t[2]);
        kern_red_op op = a->i[0] == CA_REDUCTION_MEAN ? KRED_MEAN : KRED_SUM;
        uint32_t mask = (uint32_t)((1u << bm.ndim) - 1u);
        if (st == CA_OK)
            st = cai_op_kern_status(cai_kern_reduce(op, kdt(bm.dtype), bm.ndim, bm.shape,
                                                    cai_tensor_ptr(t[1]), t[1]->strides, mask,
                                                    cai_tensor_ptr(t[2]), NULL),
                                    "mse_loss reduction");
        if (st == CA_OK) {
            *out = t[2];
            t[2] = NULL;
        }
    }
    cai_op_release_all(t, 3);
    return st;
}

/* d/dinput = 2 (input - target) g (/ numel for mean); target gets the negative. */
static void mse_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    ca_bval d = bx_sub(b, bx_saved(b, n, 0), bx_saved(b, n, 1));
    ca_bval gd = bx_mul_s(b, bx_mul(b, d, g), 2.0);
    if (n->attrs.i[0] == CA_REDUCTION_MEAN) {
        const ca_meta *dm = bx_meta(b, d);
        uint32_t all = dm ? (uint32_t)((1u << dm->ndim) - 1u) : 0;
        gd = bx_scale_inv_numel(b, gd, dm, all);
    }
    if (node_needs_grad(n, 0))
        gin[0] = bx_sum_to(b, gd, &n->in_meta[0]);
    if (node_needs_grad(n, 1))
        gin[1] = bx_sum_to(b, bx_neg(b, gd), &n->in_meta[1]);
}

/* ---------------------------------------------------------------------------------------
 * layer_norm: inputs x, weight (if flags bit0), bias (if flags bit1); attrs.i[0] =
 * n_normalized, i[1] = flags, attrs.shape = normalized_shape, s[0] = eps.
 * aux[0] = mean, aux[1] = rstd, shaped like x with 1 in the normalized dims (as PyTorch),
 * so the rule broadcasts them without a reshape.
 */
enum { LN_WEIGHT = 1, LN_BIAS = 2 };

static ca_status ln_param_check(const ca_meta *x, const ca_meta *p, const char *what,
                                const ca_attrs *a) {
    CA_CHECK(need_same_dtype("layer_norm", what, x, p));
    bool ok = p->ndim == a->shape.n;
    for (int j = 0; ok && j < a->shape.n; j++)
        ok = p->shape[j] == a->shape.v[j];
    if (ok)
        return CA_OK;
    char s1[128], s2[128];
    return err_set(CA_STATUS_SHAPE,
                   "layer_norm: %s has shape %s but normalized_shape is %s; they "
                   "must be equal",
                   what, cai_meta_str(p, s1, sizeof s1),
                   cai_err_shape_str(a->shape.n, a->shape.v, s2, sizeof s2));
}

static ca_status ln_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                          ca_meta *out) {
    const ca_meta *x = &in[0];
    CA_CHECK(need_float("layer_norm", "x", x));
    a->i[1] &= LN_WEIGHT | LN_BIAS;
    int k = (int)a->i[0], want = 1 + (a->i[1] & LN_WEIGHT ? 1 : 0) + (a->i[1] & LN_BIAS ? 1 : 0);
    if (n_in != want)
        return err_set(CA_STATUS_INVALID, "layer_norm: flags %lld call for %d inputs, got %d",
                       (long long)a->i[1], want, n_in);
    char s1[128], s2[128];
    if (k < 1 || k > x->ndim || a->shape.n != k)
        return err_set(CA_STATUS_SHAPE,
                       "layer_norm: normalized_shape has %d dims but x %s has %d; it must name "
                       "1 to %d trailing dims of x",
                       k, cai_meta_str(x, s1, sizeof s1), x->ndim, x->ndim);
    for (int j = 0; j < k; j++)
        if (x->shape[x->ndim - k + j] != a->shape.v[j])
            return err_set(CA_STATUS_SHAPE,
                           "layer_norm: normalized_shape %s does not match the last %d dims of "
                           "x %s",
                           cai_err_shape_str(k, a->shape.v, s1, sizeof s1), k,
                           cai_meta_str(x, s2, sizeof s2));
    int next = 1;
    if (a->i[1] & LN_WEIGHT)
        CA_CHECK(ln_param_check(x, &in[next++], "weight", a));
    if (a->i[1] & LN_BIAS)
        CA_CHECK(ln_param_check(x, &in[next], "bias", a));
    *out = *x;
    return CA_OK;
}

static ca_status ln_forward(const ca_op_def *row, ca_tensor *const *in, int n_in, const ca_attrs *a,
                            const ca_meta *m, ca_tensor **out, ca_tensor **aux) {
    int k = (int)a->i[0], nd = m->ndim, next = 1;
    ca_meta sm = *m; /* mean and rstd: x's shape with 1 in the normalized dims */
    for (int j = nd - k; j < nd; j++)
        sm.shape[j] = 1;
    ca_tensor *t[6] = {0}; /* x, weight, bias (contiguous), y, mean, rstd */
    ca_status st = cai_tensor_contiguous(in[0], &t[0]);
    if (st == CA_OK && (a->i[1] & LN_WEIGHT))
        st = cai_tensor_contiguous(in[next++], &t[1]);
    if (st == CA_OK && (a->i[1] & LN_BIAS))
        st = cai_tensor_contiguous(in[next], &t[2]);
    if (st == CA_OK)
        st = cai_tensor_new(m, &t[3]);
    if (st == CA_OK)
        st = cai_tensor_new(&sm, &t[4]);
    if (st == CA_OK)
        st = cai_tensor_new(&sm, &t[5]);
    int64_t rows = cai_meta_numel(&sm), n = rows ? cai_meta_numel(m) / rows : 0;
    if (st == CA_OK && rows > 0 && n > 0)
        st = cai_op_kern_status(cai_kern_layer_norm(kdt(m->dtype), rows, n, cai_tensor_ptr(t[0]),
                                                    t[1] ? cai_tensor_ptr(t[1]) : NULL,
                                                    t[2] ? cai_tensor_ptr(t[2]) : NULL, a->s[0],
                                                    cai_tensor_ptr(t[3]), cai_tensor_ptr(t[4]),
                                                    cai_tensor_ptr(t[5])),
                                "layer_norm");
    if (st == CA_OK) {
        *out = t[3];
        aux[0] = t[4];
        aux[1] = t[5];
        t[3] = t[4] = t[5] = NULL;
    }
    cai_op_release_all(t, 6);
    return st;
}

/* With xh = (x - mean) * rstd and gw = g * weight (or g), over the normalized dims:
 *   dx = rstd * (gw - mean(gw) - xh * mean(gw * xh)),
 *   dweight = sum over leading dims of g * xh, dbias = sum over leading dims of g. */
/* Double backward: aux 0 (mean) or 1 (rstd = 1 / sqrt(biased var + eps)) recomputed from
 * the saved input with builder calls, so that they carry its history. */
static ca_bval ln_aux_again(ca_builder *b, const ca_node *n, int k) {
    const ca_meta *xm = &n->in_meta[0];
    int kk = (int)n->attrs.i[0], nd = xm->ndim;
    int64_t dims[CA_MAX_DIMS];
    uint32_t mask = 0;
    for (int j = 0; j < kk; j++) {
        dims[j] = nd - kk + j;
        mask |= 1u << (nd - kk + j);
    }
    ca_bval x = bx_saved(b, n, 0);
    ca_bval mean = bx_scale_inv_numel(b, bx_sum(b, x, kk, dims, true), xm, mask);
    if (k == 0)
        return mean;
    ca_bval d = bx_sub(b, x, mean);
    ca_bval var = bx_scale_inv_numel(b, bx_sum(b, bx_mul(b, d, d), kk, dims, true), xm, mask);
    return bx_pw(b, KPW_RSQRT, bx_add_s(b, var, n->attrs.s[0]), NULL, NULL, 0, 0);
}

static void ln_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    int k = (int)n->attrs.i[0], nd = n->in_meta[0].ndim;
    bool has_w = n->attrs.i[1] & LN_WEIGHT, has_b = n->attrs.i[1] & LN_BIAS;
    int wi = 1, bi = has_w ? 2 : 1;
    bool need_x = node_needs_grad(n, 0), need_w = has_w && node_needs_grad(n, wi);
    if (need_x || need_w) {
        ca_bval rstd = bx_saved(b, n, 3);
        ca_bval xh = bx_mul(b, bx_sub(b, bx_saved(b, n, 0), bx_saved(b, n, 2)), rstd);
        if (need_w)
            gin[wi] = bx_sum_to(b, bx_mul(b, g, xh), &n->in_meta[wi]);
        if (need_x) {
            int64_t dims[CA_MAX_DIMS];
            uint32_t mask = 0;
            for (int j = 0; j < k; j++) {
                dims[j] = nd - k + j;
                mask |= 1u << (nd - k + j);
            }
            const ca_meta *xm = &n->in_meta[0];
            ca_bval gw = has_w ? bx_mul(b, g, bx_saved(b, n, 1)) : g;
            ca_bval m1 = bx_scale_inv_numel(b, bx_sum(b, gw, k, dims, true), xm, mask);
            ca_bval m2 =
                bx_scale_inv_numel(b, bx_sum(b, bx_mul(b, gw, xh), k, dims, true), xm, mask);
            ca_bval inner = bx_sub(b, bx_sub(b, gw, m1), bx_mul(b, xh, m2));
            gin[0] = bx_mul(b, rstd, inner);
        }
    }
    if (has_b && node_needs_grad(n, bi))
        gin[bi] = bx_sum_to(b, g, &n->in_meta[bi]);
}

/* ---------------------------------------------------------------------------------------
 * dropout: s[0] = p, i[0] = training; aux[0] = the scaled mask
 */
static ca_status check_p(const char *op, double p) {
    if (p >= 0.0 && p <= 1.0)
        return CA_OK;
    return err_set(CA_STATUS_INVALID,
                   "%s: probability p = %g is out of range; it must be between 0 and 1", op, p);
}

static ca_status dropout_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                               ca_meta *out) {
    CA_CHECK(need_float("dropout", "x", &in[0]));
    CA_CHECK(check_p("dropout", a->s[0]));
    a->i[0] = a->i[0] != 0;
    *out = in[0];
    return CA_OK;
}

static ca_status dropout_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                 const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                 ca_tensor **aux) {
    ca_tensor *mask;
    CA_CHECK(cai_tensor_new(m, &mask));
    uint64_t seed, offset;
    cai_random_take(cai_meta_numel(m), &seed, &offset);
    cai_kern_rand_dropout_mask(kdt(m->dtype), seed, &offset, cai_meta_numel(m), a->s[0],
                               cai_tensor_ptr(mask));
    ca_tensor *xm[2] = {in[0], mask};
    ca_status st = cai_tensor_pointwise(KPW_MUL, m, 2, xm, 0.0, 0.0, out);
    if (st != CA_OK) {
        ca_tensor_release(mask);
        return st;
    }
    aux[0] = mask;
    return CA_OK;
}

static void dropout_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (node_needs_grad(n, 0))
        gin[0] = bx_mul(b, g, bx_saved(b, n, 0));
}

/* ---------------------------------------------------------------------------------------
 * The rows
 */
static const ca_op_def rows[] = {
    {.id = CA_OP_SOFTMAX,
     .name = "softmax",
     .node_name = "SoftmaxBackward0",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 2,
     .fields = {{"result", FIELD_TENSOR, FROM_OUTPUT, 0}, {"dim", FIELD_INT, FROM_ATTR, 0}},
     .shape = softmax_shape,
     .forward = softmax_forward,
     .backward = softmax_backward},
    {.id = CA_OP_LOG_SOFTMAX,
     .name = "log_softmax",
     .node_name = "LogSoftmaxBackward0",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 2,
     .fields = {{"result", FIELD_TENSOR, FROM_OUTPUT, 0}, {"dim", FIELD_INT, FROM_ATTR, 0}},
     .shape = softmax_shape,
     .forward = softmax_forward,
     .backward = log_softmax_backward},
    {.id = CA_OP_NLL_LOSS,
     .name = "nll_loss",
     .node_name = "NllLossBackward0",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 2,
     .n_in_max = 2,
     .nondiff_inputs = 1u << 1,
     .n_fields = 4,
     .fields = {{"target", FIELD_TENSOR, FROM_INPUT, 1},
                {"total_weight", FIELD_TENSOR, FROM_AUX, 0},
                {"reduction", FIELD_INT, FROM_ATTR, 0},
                {"ignore_index", FIELD_INT, FROM_ATTR, 1}},
     .shape = nll_shape,
     .forward = nll_forward,
     .backward = nll_backward},
    {.id = CA_OP_MSE_LOSS,
     .name = "mse_loss",
     .node_name = "MseLossBackward0",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 2,
     .n_in_max = 2,
     .n_fields = 3,
     .fields = {{"self", FIELD_TENSOR, FROM_INPUT, 0},
                {"target", FIELD_TENSOR, FROM_INPUT, 1},
                {"reduction", FIELD_INT, FROM_ATTR, 0}},
     .shape = mse_shape,
     .forward = mse_forward,
     .backward = mse_backward},
    /* "weight" is saved from input 1, which is the bias when only a bias is given; the
     * rule reads it only when flags say there is a weight. */
    {.id = CA_OP_LAYER_NORM,
     .name = "layer_norm",
     .node_name = "NativeLayerNormBackward0",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 1,
     .n_in_max = 3,
     .n_fields = 6,
     .fields = {{"input", FIELD_TENSOR, FROM_INPUT, 0},
                {"weight", FIELD_TENSOR, FROM_INPUT, 1},
                {"result1", FIELD_TENSOR, FROM_AUX, 0},
                {"result2", FIELD_TENSOR, FROM_AUX, 1},
                {"n_normalized", FIELD_INT, FROM_ATTR, 0},
                {"flags", FIELD_INT, FROM_ATTR, 1}},
     .shape = ln_shape,
     .forward = ln_forward,
     .backward = ln_backward,
     .aux_again = ln_aux_again},
    {.id = CA_OP_DROPOUT,
     .name = "dropout",
     .node_name = "NativeDropoutBackward0",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 1,
     .fields = {{"result1", FIELD_TENSOR, FROM_AUX, 0}},
     .shape = dropout_shape,
     .forward = dropout_forward,
     .backward = dropout_backward},
    {.id = CA_OP_NLL_LOSS_BACKWARD,
     .name = "nll_loss_backward",
     .node_name = "NllLossBackwardBackward0",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 3,
     .n_in_max = 3,
     .nondiff_inputs = 0x6u, /* target, total_weight */
     .n_fields = 4,
     .fields = {{"target", FIELD_TENSOR, FROM_INPUT, 1},
                {"reduction", FIELD_INT, FROM_ATTR, 0},
                {"ignore_index", FIELD_INT, FROM_ATTR, 1},
                {"self_sizes", FIELD_SIZES, FROM_ATTR, 0}},
     .shape = nll_bw_shape,
     .forward = nll_bw_forward,
     .backward = nll_bw_backward},
};

const ca_op_group cai_ops_nn = {rows, sizeof rows / sizeof rows[0]};

/* ---------------------------------------------------------------------------------------
 * Public wrappers
 */
ca_status ca_softmax(ca_tensor *x, int64_t dim, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_softmax");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_softmax");
    ca_attrs a = {.i = {dim}};
    return cai_op_call1(CA_OP_SOFTMAX, x, &a, out);
}

ca_status ca_log_softmax(ca_tensor *x, int64_t dim, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_log_softmax");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_log_softmax");
    ca_attrs a = {.i = {dim}};
    return cai_op_call1(CA_OP_LOG_SOFTMAX, x, &a, out);
}

ca_status ca_nll_loss(ca_tensor *log_probs, ca_tensor *target, ca_reduction reduction,
                      int64_t ignore_index, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_nll_loss");
    *out = NULL;
    CA_ARG_NOT_NULL(log_probs, "ca_nll_loss");
    CA_ARG_NOT_NULL(target, "ca_nll_loss");
    ca_attrs a = {.i = {(int64_t)reduction, ignore_index}};
    return cai_op_call2(CA_OP_NLL_LOSS, log_probs, target, &a, out);
}

/* log_softmax over the class dim (1, or 0 for a 1-D input), then nll_loss: two nodes, as
 * in PyTorch. */
ca_status ca_cross_entropy(ca_tensor *input, ca_tensor *target, ca_reduction reduction,
                           int64_t ignore_index, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_cross_entropy");
    *out = NULL;
    CA_ARG_NOT_NULL(input, "ca_cross_entropy");
    CA_ARG_NOT_NULL(target, "ca_cross_entropy");
    if (input->ndim == 0)
        return err_set(CA_STATUS_SHAPE, "cross_entropy: input is 0-d; expected [C] or [N, C, "
                                        "d...] class scores");
    ca_tensor *lp;
    CA_CHECK(ca_log_softmax(input, input->ndim == 1 ? 0 : 1, &lp));
    ca_status st = ca_nll_loss(lp, target, reduction, ignore_index, out);
    ca_tensor_release(lp);
    return st;
}

ca_status ca_mse_loss(ca_tensor *input, ca_tensor *target, ca_reduction reduction,
                      ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_mse_loss");
    *out = NULL;
    CA_ARG_NOT_NULL(input, "ca_mse_loss");
    CA_ARG_NOT_NULL(target, "ca_mse_loss");
    ca_attrs a = {.i = {(int64_t)reduction}};
    return cai_op_call2(CA_OP_MSE_LOSS, input, target, &a, out);
}

ca_status ca_layer_norm(ca_tensor *x, int n_normalized, const int64_t *normalized_shape,
                        ca_tensor *weight, ca_tensor *bias, double eps, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_layer_norm");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_layer_norm");
    if (n_normalized < 1 || n_normalized > CA_MAX_DIMS)
        return err_set(CA_STATUS_SHAPE,
                       "layer_norm: n_normalized is %d; normalized_shape must have 1 to %d dims",
                       n_normalized, CA_MAX_DIMS);
    CA_ARG_NOT_NULL(normalized_shape, "ca_layer_norm");
    ca_attrs a = {.s = {eps}, .i = {n_normalized, 0}};
    a.shape.n = n_normalized;
    memcpy(a.shape.v, normalized_shape, sizeof(int64_t) * (size_t)n_normalized);
    /* weight's slot stays at index 1 for the saved-field list; see the row */
    ca_tensor *in[3] = {x, NULL, NULL};
    int n = 1;
    if (weight) {
        in[n++] = weight;
        a.i[1] |= LN_WEIGHT;
    }
    if (bias) {
        in[n++] = bias;
        a.i[1] |= LN_BIAS;
    }
    return cai_op_call(CA_OP_LAYER_NORM, n, in, &a, out, NULL);
}

/* Eval mode and p == 0 are the identity and record nothing, as in PyTorch. */
ca_status ca_dropout(ca_tensor *x, double p, bool training, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_dropout");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_dropout");
    CA_CHECK(check_p("dropout", p));
    if (!training || p == 0.0) {
        *out = ca_tensor_retain(x);
        return CA_OK;
    }
    ca_attrs a = {.s = {p}, .i = {1}};
    return cai_op_call1(CA_OP_DROPOUT, x, &a, out);
}
