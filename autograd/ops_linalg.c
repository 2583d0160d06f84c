/* ops_linalg.c - the linear-algebra ops: matmul (general, with transpose flags and batch
 * broadcasting), mm, bmm and linear; their shape rules, forwards, derivative rules and
 * public wrappers.
 *
 * Every product goes through cai_kern_gemm with transpose flags and element strides, so a
 * transposed or strided operand costs nothing: cai_kern_gemm alone decides whether an operand
 * must be packed. Derivatives are products too (bx_matmul), so compiled autograd sees
 * GEMMs with flags it can fold further.
 */
#include "autograd/builder.h"
#include "autograd/internal.h"

#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Validation helpers
 */
static ca_status check_float_pair(const char *op, const ca_meta *a, const ca_meta *b) {
    if (a->dtype == CA_INT64 || b->dtype == CA_INT64)
        return err_set(CA_STATUS_DTYPE,
                       "%s: expected float32 or float64 tensors, got %s and %s; convert with "
                       "ca_to_dtype",
                       op, ca_dtype_name(a->dtype), ca_dtype_name(b->dtype));
    if (a->dtype != b->dtype)
        return err_set(CA_STATUS_DTYPE,
                       "%s: dtypes differ (%s and %s); convert one with ca_to_dtype so both "
                       "match",
                       op, ca_dtype_name(a->dtype), ca_dtype_name(b->dtype));
    return CA_OK;
}

static ca_status need_ndim(const char *op, const char *what, const ca_meta *m, int lo, int hi) {
    if (m->ndim >= lo && m->ndim <= hi)
        return CA_OK;
    char s[128];
    cai_meta_str(m, s, sizeof s);
    if (lo == hi)
        return err_set(CA_STATUS_SHAPE, "%s: %s must be %d-D, got a %d-D tensor of shape %s", op,
                       what, lo, m->ndim, s);
    return err_set(CA_STATUS_SHAPE, "%s: %s must have at least %d dims, got shape %s", op, what, lo,
                   s);
}

/* ---------------------------------------------------------------------------------------
 * Shape rules
 */
/* [batch..., M, K] x [batch..., K, N] with transpose flags and broadcast batch dims. */
static ca_status matmul_shape_common(const char *op, const ca_meta *in, ca_attrs *a, bool bcast,
                                     ca_meta *out) {
    const ca_meta *ma = &in[0], *mb = &in[1];
    CA_CHECK(check_float_pair(op, ma, mb));
    a->i[0] = a->i[0] != 0;
    a->i[1] = a->i[1] != 0;
    cai_rule_error e;
    out->dtype = ma->dtype;
    if (cai_rule_matmul(&cai_sizes_concrete, op, ma->ndim, ma->shape, a->i[0], mb->ndim, mb->shape,
                        a->i[1], bcast, &out->ndim, out->shape, &e))
        return cai_rule_raise(&e);
    return CA_OK;
}

static ca_status matmul_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                              ca_meta *out) {
    CA_CHECK(need_ndim("matmul", "a", &in[0], 2, CA_MAX_DIMS));
    CA_CHECK(need_ndim("matmul", "b", &in[1], 2, CA_MAX_DIMS));
    return matmul_shape_common("matmul", in, a, true, out);
}

static ca_status mm_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                          ca_meta *out) {
    CA_CHECK(need_ndim("mm", "a", &in[0], 2, 2));
    CA_CHECK(need_ndim("mm", "b", &in[1], 2, 2));
    a->i[0] = a->i[1] = 0;
    return matmul_shape_common("mm", in, a, false, out);
}

static ca_status bmm_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                           ca_meta *out) {
    CA_CHECK(need_ndim("bmm", "a", &in[0], 3, 3));
    CA_CHECK(need_ndim("bmm", "b", &in[1], 3, 3));
    a->i[0] = a->i[1] = 0;
    return matmul_shape_common("bmm", in, a, false, out);
}

static ca_status linear_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                              ca_meta *out) {
    const ca_meta *x = &in[0], *w = &in[1];
    CA_CHECK(need_ndim("linear", "x", x, 1, CA_MAX_DIMS));
    CA_CHECK(need_ndim("linear", "weight", w, 2, 2));
    CA_CHECK(check_float_pair("linear", x, w));
    char s1[128], s2[128];
    if (x->shape[x->ndim - 1] != w->shape[1])
        return err_set(CA_STATUS_SHAPE,
                       "linear: x %s and weight %s do not fit: x's last dim (%lld) must equal "
                       "weight's in_features (dim 1, %lld)",
                       cai_meta_str(x, s1, sizeof s1), cai_meta_str(w, s2, sizeof s2),
                       (long long)x->shape[x->ndim - 1], (long long)w->shape[1]);
    if (n_in == 3) {
        const ca_meta *bias = &in[2];
        CA_CHECK(check_float_pair("linear", x, bias));
        if (bias->ndim != 1 || bias->shape[0] != w->shape[0])
            return err_set(CA_STATUS_SHAPE,
                           "linear: bias %s does not fit weight %s; bias must be 1-D with "
                           "out_features (%lld) elements",
                           cai_meta_str(bias, s1, sizeof s1), cai_meta_str(w, s2, sizeof s2),
                           (long long)w->shape[0]);
    }
    *out = *x;
    out->shape[x->ndim - 1] = w->shape[0];
    return CA_OK;
}

/* ---------------------------------------------------------------------------------------
 * GEMM plumbing
 */

/* Strides of a size-1 matrix dim carry no information; pick ones cblas accepts. */
static void mat_norm_strides(int64_t rows, int64_t cols, int64_t *rs, int64_t *cs) {
    if (cols == 1)
        *cs = 1;
    if (rows == 1)
        *rs = *cs == 1 ? (cols > 1 ? cols : 1) : 1;
}

/* cai_kern_gemm passes a matrix with a unit inner stride straight to cblas, so the other
 * stride must be a valid leading dimension (e.g. not 0 from an expand). */
static bool mat_strides_ok(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
    if (cs == 1)
        return rs >= (cols > 1 ? cols : 1);
    if (rs == 1)
        return cs >= (rows > 1 ? rows : 1);
    return true; /* neither is 1: cai_kern_gemm packs it */
}

static int64_t elem_size(ca_dtype dt) {
    return (int64_t)ca_dtype_size(dt);
}

static ca_status gemm_status(int rc) {
    if (rc == -2)
        return err_nomem("a GEMM packing buffer");
    if (rc != 0)
        return err_set(CA_STATUS_INTERNAL, "cai_kern_gemm failed (%d); please report it", rc);
    return CA_OK;
}

/* A matrix operand: the tensor that owns its data, and the data as cai_kern_gemm_nd reads it
 * (matrix strides, and strides per output batch dim, 0 where it broadcasts). */
typedef struct {
    ca_tensor *t; /* owned: the input itself or a contiguous copy */
    kern_mat_nd m;
} gemm_operand;

static ca_status operand_init(ca_tensor *x, int nb, const int64_t *bshape, gemm_operand *op) {
    ca_tensor *t = ca_tensor_retain(x);
    int64_t rows = t->shape[t->ndim - 2], cols = t->shape[t->ndim - 1];
    int64_t rs = t->strides[t->ndim - 2], cs = t->strides[t->ndim - 1];
    mat_norm_strides(rows, cols, &rs, &cs);
    if (!mat_strides_ok(rows, cols, rs, cs)) {
        ca_tensor *c;
        ca_status st = cai_tensor_contiguous(t, &c);
        ca_tensor_release(t);
        CA_CHECK(st);
        t = c;
        rs = t->strides[t->ndim - 2];
        cs = t->strides[t->ndim - 1];
        mat_norm_strides(rows, cols, &rs, &cs);
    }
    op->t = t;
    op->m.data = cai_tensor_ptr(t);
    op->m.rs = rs;
    op->m.cs = cs;
    int own_nb = t->ndim - 2;
    for (int i = 0; i < nb; i++) {
        int d = i - (nb - own_nb);
        op->m.bs[i] = (d < 0 || (t->shape[d] == 1 && bshape[i] != 1)) ? 0 : t->strides[d];
    }
    return CA_OK;
}

/* C = op(A) @ op(B) into the fresh contiguous tensor c of shape [batch..., M, N]
 * (cai_kern_gemm_nd collapses the batch dims). */
static ca_status gemm_batched(ca_tensor *a, bool ta, ca_tensor *b, bool tb, ca_tensor *c) {
    int nd = c->ndim, nb = nd - 2;
    int64_t M = c->shape[nd - 2], N = c->shape[nd - 1];
    int64_t K = ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    int64_t numel = 1;
    for (int d = 0; d < nd; d++)
        numel *= c->shape[d];
    if (numel == 0)
        return CA_OK;
    if (K == 0) { /* an empty sum: cblas need not be asked */
        memset(cai_tensor_ptr(c), 0, (size_t)(numel * elem_size(c->dtype)));
        return CA_OK;
    }
    gemm_operand A, B;
    CA_CHECK(operand_init(a, nb, c->shape, &A));
    ca_status st = operand_init(b, nb, c->shape, &B);
    if (st != CA_OK) {
        ca_tensor_release(A.t);
        return st;
    }
    st = gemm_status(cai_kern_gemm_nd(kdt(c->dtype), nb, c->shape, M, N, K, &A.m, ta, &B.m, tb, 0.0,
                                      cai_tensor_ptr(c)));
    ca_tensor_release(A.t);
    ca_tensor_release(B.t);
    return st;
}

static ca_status matmul_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                ca_tensor **aux) {
    CA_CHECK(cai_tensor_new(m, out));
    ca_status st = gemm_batched(in[0], a->i[0] != 0, in[1], a->i[1] != 0, *out);
    if (st != CA_OK) {
        ca_tensor_release(*out);
        *out = NULL;
    }
    return st;
}

/* Stride between rows when x's leading dims fold into one, or -1 when they do not. */
static int64_t fold_row_stride(const ca_tensor *x) {
    int64_t rs = -1, next = 0; /* next: the stride the outer dim must have */
    for (int d = x->ndim - 2; d >= 0; d--) {
        if (x->shape[d] == 1)
            continue;
        if (rs < 0)
            rs = x->strides[d];
        else if (x->strides[d] != next)
            return -1;
        next = x->strides[d] * x->shape[d];
    }
    return rs < 0 ? 0 : rs; /* 0: one row, its stride is free */
}

static ca_status linear_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                ca_tensor **aux) {
    ca_tensor *w = in[1], *bias = n_in == 3 ? in[2] : NULL;
    ca_tensor *x = ca_tensor_retain(in[0]);
    int64_t rs = fold_row_stride(x);
    if (rs < 0) {
        ca_tensor *c;
        ca_status st = cai_tensor_contiguous(x, &c);
        ca_tensor_release(x);
        CA_CHECK(st);
        x = c;
        rs = fold_row_stride(x);
    }
    int64_t nin = w->shape[1], nout = w->shape[0], rows = 1;
    for (int d = 0; d < x->ndim - 1; d++)
        rows *= x->shape[d];
    ca_status st = cai_tensor_new(m, out);
    if (st != CA_OK) {
        ca_tensor_release(x);
        return st;
    }
    double beta = 0.0;
    if (bias && rows * nout > 0) { /* start C with the bias so the GEMM adds onto it */
        int64_t shape[2] = {rows, nout}, cst[2] = {nout, 1};
        kern_src src = {.data = cai_tensor_ptr(bias), .strides = {0, bias->strides[0]}};
        cai_kern_pointwise(KPW_COPY, kdt(m->dtype), kdt(m->dtype), 2, shape, cai_tensor_ptr(*out),
                           cst, &src, 0, 0);
        beta = 1.0;
    } else if (rows * nout > 0 && nin == 0) {
        memset(cai_tensor_ptr(*out), 0, (size_t)(rows * nout * elem_size(m->dtype)));
    }
    if (rows * nout > 0 && nin > 0) {
        int64_t xcs = x->strides[x->ndim - 1], wrs = w->strides[0], wcs = w->strides[1];
        mat_norm_strides(rows, nin, &rs, &xcs);
        mat_norm_strides(nout, nin, &wrs, &wcs);
        ca_tensor *wc = ca_tensor_retain(w);
        if (!mat_strides_ok(nout, nin, wrs, wcs)) {
            ca_tensor_release(wc);
            st = cai_tensor_contiguous(w, &wc);
            wrs = nin;
            wcs = 1;
            mat_norm_strides(nout, nin, &wrs, &wcs);
        }
        if (st == CA_OK && !mat_strides_ok(rows, nin, rs, xcs)) {
            ca_tensor *c = NULL;
            st = cai_tensor_contiguous(x, &c);
            ca_tensor_release(x);
            x = c;
            rs = nin;
            xcs = 1;
            mat_norm_strides(rows, nin, &rs, &xcs);
        }
        if (st == CA_OK) {
            kern_mat A = {cai_tensor_ptr(x), rs, xcs, 0}, B = {cai_tensor_ptr(wc), wrs, wcs, 0};
            st = gemm_status(cai_kern_gemm(kdt(m->dtype), 1, rows, nout, nin, 1.0, A, false, B,
                                           true, beta, cai_tensor_ptr(*out), nout, rows * nout));
        }
        ca_tensor_release(wc);
    }
    ca_tensor_release(x);
    if (st != CA_OK) {
        ca_tensor_release(*out);
        *out = NULL;
    }
    return st;
}

/* ---------------------------------------------------------------------------------------
 * Derivative rules. For C = op_a(A) @ op_b(B):
 *   dA = g @ op_b(B)^T        (ta false)      dA = op_b(B) @ g^T   (ta true)
 *   dB = op_a(A)^T @ g        (tb false)      dB = g^T @ op_a(A)   (tb true)
 * each summed back over the batch dims the input was broadcast along.
 */
static void matmul_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    bool ta = n->attrs.i[0] != 0, tb = n->attrs.i[1] != 0;
    if (node_needs_grad(n, 0)) {
        ca_bval B = bx_saved(b, n, 1);
        ca_bval d = ta ? bx_matmul(b, B, g, tb, true) : bx_matmul(b, g, B, false, !tb);
        gin[0] = bx_sum_to(b, d, &n->in_meta[0]);
    }
    if (node_needs_grad(n, 1)) {
        ca_bval A = bx_saved(b, n, 0);
        ca_bval d = tb ? bx_matmul(b, g, A, true, ta) : bx_matmul(b, A, g, !ta, false);
        gin[1] = bx_sum_to(b, d, &n->in_meta[1]);
    }
}

/* mm and bmm: equal shapes, no flags, nothing to sum back. */
static void mm_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (node_needs_grad(n, 0))
        gin[0] = bx_matmul(b, g, bx_saved(b, n, 1), false, true);
    if (node_needs_grad(n, 1))
        gin[1] = bx_matmul(b, bx_saved(b, n, 0), g, true, false);
}

/* y = x @ w^T + bias with x's leading dims folded into rows:
 *   dx = g @ w, dW = g^T @ x (over all rows), dbias = g summed over the rows. */
static void linear_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    const ca_meta *wm = &n->in_meta[1];
    ca_ints g2s = {2, {-1, wm->shape[0]}}, x2s = {2, {-1, wm->shape[1]}};
    bool need_x = node_needs_grad(n, 0), need_w = node_needs_grad(n, 1);
    ca_bval g2 = (need_x || need_w) ? bx_reshape_ints(b, g, &g2s) : NULL;
    if (need_x) {
        ca_bval dx2 = bx_matmul(b, g2, bx_saved(b, n, 1), false, false);
        gin[0] = bx_reshape(b, dx2, &n->in_meta[0]);
    }
    if (need_w) {
        ca_bval x2 = bx_reshape_ints(b, bx_saved(b, n, 0), &x2s);
        gin[1] = bx_matmul(b, g2, x2, true, false);
    }
    if (n->n_in == 3 && node_needs_grad(n, 2))
        gin[2] = bx_sum_to(b, g, &n->in_meta[2]);
}

/* ---------------------------------------------------------------------------------------
 * The rows
 */
#define GEMM_FIELDS                                                                                \
    .n_fields = 4, .fields = {{"self", FIELD_TENSOR, FROM_INPUT, 0},                               \
                              {"mat2", FIELD_TENSOR, FROM_INPUT, 1},                               \
                              {"transpose_self", FIELD_INT, FROM_ATTR, 0},                         \
                              {"transpose_mat2", FIELD_INT, FROM_ATTR, 1}}

static const ca_op_def rows[] = {
    {.id = CA_OP_MATMUL,
     .name = "matmul",
     .node_name = "MatmulBackward0",
     .fusion = CA_FUSE_GEMM,
     .n_in_min = 2,
     .n_in_max = 2,
     GEMM_FIELDS,
     .shape = matmul_shape,
     .forward = matmul_forward,
     .backward = matmul_backward},
    {.id = CA_OP_MM,
     .name = "mm",
     .node_name = "MmBackward0",
     .fusion = CA_FUSE_GEMM,
     .n_in_min = 2,
     .n_in_max = 2,
     GEMM_FIELDS,
     .shape = mm_shape,
     .forward = matmul_forward,
     .backward = mm_backward},
    {.id = CA_OP_BMM,
     .name = "bmm",
     .node_name = "BmmBackward0",
     .fusion = CA_FUSE_GEMM,
     .n_in_min = 2,
     .n_in_max = 2,
     GEMM_FIELDS,
     .shape = bmm_shape,
     .forward = matmul_forward,
     .backward = mm_backward},
    {.id = CA_OP_LINEAR,
     .name = "linear",
     .node_name = "LinearBackward0",
     .fusion = CA_FUSE_GEMM,
     .n_in_min = 2,
     .n_in_max = 3,
     .n_fields = 2,
     .fields = {{"input", FIELD_TENSOR, FROM_INPUT, 0}, {"weight", FIELD_TENSOR, FROM_INPUT, 1}},
     .shape = linear_shape,
     .forward = linear_forward,
     .backward = linear_backward},
};

const ca_op_group cai_ops_linalg = {rows, sizeof rows / sizeof rows[0]};

/* ---------------------------------------------------------------------------------------
 * Public wrappers
 */
ca_status ca_mm(ca_tensor *a, ca_tensor *b, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_mm");
    *out = NULL;
    CA_ARG_NOT_NULL(a, "ca_mm");
    CA_ARG_NOT_NULL(b, "ca_mm");
    ca_attrs at = {0};
    return cai_op_call2(CA_OP_MM, a, b, &at, out);
}

ca_status ca_bmm(ca_tensor *a, ca_tensor *b, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_bmm");
    *out = NULL;
    CA_ARG_NOT_NULL(a, "ca_bmm");
    CA_ARG_NOT_NULL(b, "ca_bmm");
    ca_attrs at = {0};
    return cai_op_call2(CA_OP_BMM, a, b, &at, out);
}

ca_status ca_linear(ca_tensor *x, ca_tensor *weight, ca_tensor *bias, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_linear");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_linear");
    CA_ARG_NOT_NULL(weight, "ca_linear");
    ca_attrs at = {0};
    ca_tensor *in[3] = {x, weight, bias};
    return cai_op_call(CA_OP_LINEAR, bias ? 3 : 2, in, &at, out, NULL);
}

/* The core product of ca_matmul once both operands are at least 2-D. */
static ca_status matmul_core(ca_tensor *a, ca_tensor *b, ca_tensor **out) {
    if (a->ndim == 2 && b->ndim == 2)
        return ca_mm(a, b, out);
    ca_attrs at = {0};
    return cai_op_call2(CA_OP_MATMUL, a, b, &at, out);
}

/* torch.matmul: 1-D operands become matrices (a row for a, a column for b) around the
 * core product, and the added dim is squeezed away afterwards. */
ca_status ca_matmul(ca_tensor *a, ca_tensor *b, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_matmul");
    *out = NULL;
    CA_ARG_NOT_NULL(a, "ca_matmul");
    CA_ARG_NOT_NULL(b, "ca_matmul");
    char s1[128], s2[128];
    if (a->ndim == 0 || b->ndim == 0)
        return err_set(CA_STATUS_SHAPE,
                       "matmul: both arguments need at least 1 dim, got shapes %s and %s; use "
                       "ca_mul for a product with a scalar",
                       cai_err_shape_str(a->ndim, a->shape, s1, sizeof s1),
                       cai_err_shape_str(b->ndim, b->shape, s2, sizeof s2));
    if (a->ndim >= 2 && b->ndim >= 2)
        return matmul_core(a, b, out);
    int64_t ka = a->shape[a->ndim - 1], kb = b->shape[b->ndim == 1 ? 0 : b->ndim - 2];
    if (ka != kb)
        return err_set(CA_STATUS_SHAPE,
                       "matmul: shapes %s and %s do not fit: a's last dim (%lld) must equal "
                       "b's %s dim (%lld)",
                       cai_err_shape_str(a->ndim, a->shape, s1, sizeof s1),
                       cai_err_shape_str(b->ndim, b->shape, s2, sizeof s2), (long long)ka,
                       b->ndim == 1 ? "only" : "second-to-last", (long long)kb);
    ca_tensor *a2 = NULL, *b2 = NULL, *c = NULL;
    ca_status st = CA_OK;
    if (a->ndim == 1)
        st = ca_unsqueeze(a, 0, &a2);
    else
        a2 = ca_tensor_retain(a);
    if (st == CA_OK) {
        if (b->ndim == 1)
            st = ca_unsqueeze(b, -1, &b2);
        else
            b2 = ca_tensor_retain(b);
    }
    if (st == CA_OK)
        st = matmul_core(a2, b2, &c);
    if (st == CA_OK) {
        /* squeeze the dims the 1-D operands added: -2 for a, -1 for b */
        int64_t dims[2];
        int nd = 0;
        if (a->ndim == 1)
            dims[nd++] = c->ndim - 2;
        if (b->ndim == 1)
            dims[nd++] = c->ndim - 1;
        st = ca_squeeze(c, nd, dims, out);
    }
    ca_tensor_release(a2);
    ca_tensor_release(b2);
    ca_tensor_release(c);
    return st;
}
