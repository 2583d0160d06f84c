/* ops_linalg.c - the linear-algebra ops: matmul (general, with transpose flags and batch
 * broadcasting), mm, bmm, addmm and linear (t and addmm or mm, as PyTorch records it); their
 * shape rules, forwards, derivative rules and
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
    if (a->dtype != b->dtype) /* torch's message, word for word (C's type names) */
        return err_set(CA_STATUS_DTYPE,
                       "expected m1 and m2 to have the same dtype, but got: %s != %s",
                       a->dtype == CA_FLOAT64 ? "double" : "float",
                       b->dtype == CA_FLOAT64 ? "double" : "float");
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

/* linear's arguments, checked before it is recorded as t, addmm or mm and views. */
static ca_status linear_check(const ca_meta *x, const ca_meta *w, const ca_meta *bias) {
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
    if (bias) {
        CA_CHECK(check_float_pair("linear", x, bias));
        if (bias->ndim != 1 || bias->shape[0] != w->shape[0])
            return err_set(CA_STATUS_SHAPE,
                           "linear: bias %s does not fit weight %s; bias must be 1-D with "
                           "out_features (%lld) elements",
                           cai_meta_str(bias, s1, sizeof s1), cai_meta_str(w, s2, sizeof s2),
                           (long long)w->shape[0]);
    }
    return CA_OK;
}

/* addmm(bias, a, b): a [M, K] @ b [K, N], plus bias broadcast to [M, N]. */
static ca_status addmm_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                             ca_meta *out) {
    CA_CHECK(need_ndim("addmm", "mat1", &in[1], 2, 2));
    CA_CHECK(need_ndim("addmm", "mat2", &in[2], 2, 2));
    a->i[0] = a->i[1] = 0;
    CA_CHECK(matmul_shape_common("addmm", &in[1], a, false, out));
    CA_CHECK(check_float_pair("addmm", &in[0], &in[1]));
    int nd;
    int64_t r[KERN_MAX_DIMS];
    cai_rule_error e;
    if (in[0].ndim > 2 ||
        cai_rule_broadcast(&cai_sizes_concrete, "addmm", in[0].ndim, in[0].shape, 2, out->shape,
                           &nd, r, &e) ||
        r[0] != out->shape[0] || r[1] != out->shape[1]) {
        char s1[128], s2[128];
        return err_set(CA_STATUS_SHAPE,
                       "addmm: the bias %s does not broadcast to the product's shape %s",
                       cai_meta_str(&in[0], s1, sizeof s1), cai_meta_str(out, s2, sizeof s2));
    }
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

/* C = op(A) @ op(B) + beta C into the contiguous tensor c of shape [batch..., M, N]
 * (cai_kern_gemm_nd collapses the batch dims); beta is 0 (c is fresh) or 1. */
static ca_status gemm_batched(ca_tensor *a, bool ta, ca_tensor *b, bool tb, double beta,
                              ca_tensor *c) {
    int nd = c->ndim, nb = nd - 2;
    int64_t M = c->shape[nd - 2], N = c->shape[nd - 1];
    int64_t K = ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    int64_t numel = 1;
    for (int d = 0; d < nd; d++)
        numel *= c->shape[d];
    if (numel == 0)
        return CA_OK;
    if (K == 0) { /* an empty sum: cblas need not be asked */
        if (beta == 0.0)
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
    st = gemm_status(cai_kern_gemm_nd(kdt(c->dtype), nb, c->shape, M, N, K, &A.m, ta, &B.m, tb,
                                      beta, cai_tensor_ptr(c)));
    ca_tensor_release(A.t);
    ca_tensor_release(B.t);
    return st;
}

static ca_status matmul_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                ca_tensor **aux) {
    CA_CHECK(cai_tensor_new(m, out));
    ca_status st = gemm_batched(in[0], a->i[0] != 0, in[1], a->i[1] != 0, 0.0, *out);
    if (st != CA_OK) {
        ca_tensor_release(*out);
        *out = NULL;
    }
    return st;
}

/* bias (broadcast) into the fresh [M, N] output, then a @ b added onto it by the GEMM. */
static ca_status addmm_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                               const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                               ca_tensor **aux) {
    ca_tensor *bias = in[0];
    CA_CHECK(cai_tensor_new(m, out));
    int64_t cst[2] = {m->shape[1], 1};
    kern_src src = {.data = cai_tensor_ptr(bias)};
    for (int d = 0; d < 2; d++) {
        int bd = d - (2 - bias->ndim);
        src.strides[d] = bd < 0 || bias->shape[bd] == 1 ? 0 : bias->strides[bd];
    }
    if (m->shape[0] * m->shape[1] > 0)
        cai_kern_pointwise(KPW_COPY, kdt(m->dtype), kdt(m->dtype), 2, m->shape,
                           cai_tensor_ptr(*out), cst, &src, 0, 0);
    ca_status st = gemm_batched(in[1], false, in[2], false, 1.0, *out);
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

/* A 2-D saved tensor laid out column-major (a transposed view, like linear's t(weight)). */
static bool col_major(const ca_node *n, int k) {
    const ca_tensor *t = n->saved[k].t;
    return t && t->ndim == 2 && t->shape[0] > 1 && t->shape[1] > 1 && t->strides[0] == 1 &&
           t->strides[1] >= t->shape[0];
}

/* The gradient of mat2 in a product mat1 @ mat2: mat1^T @ g, or, when mat2 is a transposed
 * view, (g^T @ mat1)^T, in mat2's layout (PyTorch's mm_mat2_backward does the same). Then
 * t()'s backward hands the weight of a linear a contiguous gradient that AccumulateGrad
 * can keep without a copy; compiled, the two transposes cancel. */
static ca_bval mat2_grad(ca_builder *b, const ca_node *n, ca_bval g, int mat1, int mat2) {
    ca_bval a = bx_saved(b, n, mat1);
    if (!col_major(n, mat2))
        return bx_matmul(b, a, g, true, false);
    return bx_transpose(b, bx_matmul(b, g, a, true, false), 0, 1);
}

/* mm and bmm: equal shapes, no flags, nothing to sum back. */
static void mm_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (node_needs_grad(n, 0))
        gin[0] = bx_matmul(b, g, bx_saved(b, n, 1), false, true);
    if (node_needs_grad(n, 1))
        gin[1] = n->op == CA_OP_MM ? mat2_grad(b, n, g, 0, 1)
                                   : bx_matmul(b, bx_saved(b, n, 0), g, true, false);
}

/* addmm: dbias = g summed to the bias's shape, dmat1 = g @ mat2^T, dmat2 = mat1^T @ g (in
 * mat2's layout). */
static void addmm_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (node_needs_grad(n, 0))
        gin[0] = bx_sum_to(b, g, &n->in_meta[0]);
    if (node_needs_grad(n, 1))
        gin[1] = bx_matmul(b, g, bx_saved(b, n, 1), false, true);
    if (node_needs_grad(n, 2))
        gin[2] = mat2_grad(b, n, g, 0, 1);
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
    {.id = CA_OP_ADDMM,
     .name = "addmm",
     .node_name = "AddmmBackward0",
     .fusion = CA_FUSE_GEMM,
     .n_in_min = 3,
     .n_in_max = 3,
     .n_fields = 2,
     .fields = {{"mat1", FIELD_TENSOR, FROM_INPUT, 1}, {"mat2", FIELD_TENSOR, FROM_INPUT, 2}},
     .shape = addmm_shape,
     .forward = addmm_forward,
     .backward = addmm_backward},
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

ca_status ca_addmm(ca_tensor *bias, ca_tensor *a, ca_tensor *b, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_addmm");
    *out = NULL;
    CA_ARG_NOT_NULL(bias, "ca_addmm");
    CA_ARG_NOT_NULL(a, "ca_addmm");
    CA_ARG_NOT_NULL(b, "ca_addmm");
    ca_attrs at = {0};
    ca_tensor *in[3] = {bias, a, b};
    return cai_op_call(CA_OP_ADDMM, 3, in, &at, out, NULL);
}

/* PyTorch's decomposition, so the graph has its nodes: t(weight), then addmm(bias, x, w^T)
 * or mm(x, w^T) on x viewed as 2-D. The views and t() are free; the product is one GEMM
 * that adds onto the bias, as before. */
ca_status ca_linear(ca_tensor *x, ca_tensor *weight, ca_tensor *bias, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_linear");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_linear");
    CA_ARG_NOT_NULL(weight, "ca_linear");
    ca_meta mx, mw, mb;
    cai_tensor_meta(x, &mx);
    cai_tensor_meta(weight, &mw);
    if (bias)
        cai_tensor_meta(bias, &mb);
    CA_CHECK(linear_check(&mx, &mw, bias ? &mb : NULL));
    int64_t shape[CA_MAX_DIMS];
    memcpy(shape, mx.shape, sizeof(int64_t) * (size_t)mx.ndim);
    shape[mx.ndim - 1] = mw.shape[0];
    ca_tensor *wt = NULL, *x2 = NULL, *y2 = NULL;
    ca_status st = ca_t(weight, &wt);
    if (st == CA_OK && mx.ndim == 2)
        x2 = ca_tensor_retain(x);
    else if (st == CA_OK && mx.ndim == 1 && !bias)
        st = ca_unsqueeze(x, 0, &x2);
    else if (st == CA_OK)
        st = ca_reshape(x, 2, (int64_t[]){-1, mw.shape[1]}, &x2);
    if (st == CA_OK)
        st = bias ? ca_addmm(bias, x2, wt, &y2) : ca_mm(x2, wt, &y2);
    if (st == CA_OK && mx.ndim == 2)
        *out = ca_tensor_retain(y2);
    else if (st == CA_OK && mx.ndim == 1 && !bias)
        st = ca_squeeze(y2, 1, (int64_t[]){0}, out);
    else if (st == CA_OK)
        st = bias ? ca_reshape(y2, mx.ndim, shape, out) : cai_unsafe_view(y2, mx.ndim, shape, out);
    ca_tensor_release(wt);
    ca_tensor_release(x2);
    ca_tensor_release(y2);
    return st;
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
