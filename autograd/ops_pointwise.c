/* ops_pointwise.c - the elementwise ops: their op-table rows, derivative rules and public
 * wrappers.
 *
 * Nearly every row shares op.c's pointwise shape rule (broadcasting, equal dtypes) and
 * forward kernel (row->pw over broadcast inputs); a row here mostly says which kernel op
 * it is, what it saves and how its gradient is formed. Derivatives follow PyTorch's
 * formulas (derivatives.yaml). Each input's gradient is summed back to that input's shape
 * with bx_sum_to, which undoes broadcasting.
 */
#include "autograd/builder.h"
#include "codegen/cast.h"

#include <math.h>

/* ---------------------------------------------------------------------------------------
 * Row shorthands
 */
/* A pointwise row with the shared shape rule and forward kernel. */
#define PW_ROW(ID, NAME, NODE, NIN, KOP, BW, NF, ...)                                              \
    {                                                                                              \
        .id = (ID), .name = (NAME), .node_name = (NODE), .fusion = CA_FUSE_POINTWISE,              \
        .n_in_min = (NIN), .n_in_max = (NIN), .n_fields = (NF), .fields = {__VA_ARGS__},           \
        .shape = cai_op_pointwise_shape, .forward = cai_op_pointwise_forward, .backward = (BW),    \
        .pw = (KOP)                                                                                \
    }

/* A comparison row: a bool result, no gradient. Inputs of different dtypes compare in
 * the promoted one (cmp_shape). Opaque to fusion: its result's dtype is not its inputs'. */
#define CMP_ROW(ID, NAME, NODE, NIN, KOP)                                                          \
    {                                                                                              \
        .id = (ID), .name = (NAME), .node_name = (NODE), .fusion = CA_FUSE_OPAQUE,                 \
        .n_in_min = (NIN), .n_in_max = (NIN), .flags = CA_OPF_NONDIFF, .n_fields = 0,              \
        .shape = cmp_shape, .forward = cmp_forward, .pw = (KOP)                                    \
    }

static ca_bval saved(ca_builder *b, const ca_node *n, int k) {
    return bx_saved(b, n, k);
}

/* gin[i] = v summed down to input i's shape, when input i needs a gradient */
static void set_grad(ca_builder *b, const ca_node *n, ca_bval *gin, int i, ca_bval v) {
    if (node_needs_grad(n, i))
        gin[i] = bx_sum_to(b, v, &n->in_meta[i]);
}

/* ---------------------------------------------------------------------------------------
 * Binary ops
 */
static void add_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    double alpha = n->attrs.s[0];
    set_grad(b, n, gin, 0, g);
    if (node_needs_grad(n, 1))
        set_grad(b, n, gin, 1, alpha == 1.0 ? g : bx_mul_s(b, g, alpha));
}

static void sub_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    double alpha = n->attrs.s[0];
    set_grad(b, n, gin, 0, g);
    if (node_needs_grad(n, 1))
        set_grad(b, n, gin, 1, alpha == 1.0 ? bx_neg(b, g) : bx_mul_s(b, g, -alpha));
}

/* saved: self, other */
static void mul_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (node_needs_grad(n, 0))
        set_grad(b, n, gin, 0, bx_mul(b, g, saved(b, n, 1)));
    if (node_needs_grad(n, 1))
        set_grad(b, n, gin, 1, bx_mul(b, g, saved(b, n, 0)));
}

/* saved: self, other. d/da = 1/b, d/db = -a/b^2 */
static void div_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    ca_bval other = saved(b, n, 1);
    if (node_needs_grad(n, 0))
        set_grad(b, n, gin, 0, bx_div(b, g, other));
    if (node_needs_grad(n, 1)) {
        ca_bval num = bx_mul(b, g, saved(b, n, 0));
        ca_bval q = bx_div(b, num, bx_mul(b, other, other));
        set_grad(b, n, gin, 1, bx_neg(b, q));
    }
}

/* saved: self, exponent, result */
static void pow_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    ca_bval base = saved(b, n, 0);
    if (node_needs_grad(n, 0))
        set_grad(b, n, gin, 0, bx_pw(b, KPW_POW_BW_BASE, g, base, saved(b, n, 1), 0, 0));
    if (node_needs_grad(n, 1))
        set_grad(b, n, gin, 1, bx_pw(b, KPW_POW_BW_EXP, g, base, saved(b, n, 2), 0, 0));
}

/* saved: self, other. Ties split the gradient half and half, as PyTorch does. For
 * minimum, `a` wins where b > a, so the arguments of KPW_MAXMIN_BW swap. */
static void maxmin_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin, bool max) {
    ca_bval x = saved(b, n, 0), y = saved(b, n, 1);
    ca_bval p = max ? x : y, q = max ? y : x;
    if (node_needs_grad(n, 0))
        set_grad(b, n, gin, 0, bx_pw(b, KPW_MAXMIN_BW, g, p, q, 0, 0));
    if (node_needs_grad(n, 1))
        set_grad(b, n, gin, 1, bx_pw(b, KPW_MAXMIN_BW, g, q, p, 0, 0));
}

static void maximum_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    maxmin_backward(b, n, g, gin, true);
}

static void minimum_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    maxmin_backward(b, n, g, gin, false);
}

/* saved: condition. The cond input (0) never gets a gradient. */
static void where_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    ca_bval cond = saved(b, n, 0);
    ca_bval zero = bx_zeros_like(b, g);
    if (node_needs_grad(n, 1))
        set_grad(b, n, gin, 1, bx_where(b, cond, g, zero));
    if (node_needs_grad(n, 2))
        set_grad(b, n, gin, 2, bx_where(b, cond, zero, g));
}

/* ---------------------------------------------------------------------------------------
 * Scalar forms (attrs.s[0] = the scalar)
 */
static void identity_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, 0, g);
}

static void neg_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, 0, bx_neg(b, g));
}

static void mul_s_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, 0, bx_mul_s(b, g, n->attrs.s[0]));
}

static void div_s_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, 0, bx_pw(b, KPW_DIV_S, g, NULL, NULL, n->attrs.s[0], 0));
}

/* s / a: d/da = -s / a^2. saved: self */
static void rdiv_s_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    ca_bval sq = bx_pw(b, KPW_SQUARE, saved(b, n, 0), NULL, NULL, 0, 0);
    ca_bval d = bx_pw(b, KPW_RDIV_S, sq, NULL, NULL, -n->attrs.s[0], 0);
    set_grad(b, n, gin, 0, bx_mul(b, g, d));
}

/* a ^ s. saved: self */
static void pow_s_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, 0, bx_pw(b, KPW_POW_S_BW, g, saved(b, n, 0), NULL, n->attrs.s[0], 0));
}

/* s ^ a: g * result * log(s). saved: result. For s == 0 PyTorch gives 0 where the
 * exponent is >= 0, i.e. where the result is 0 or 1; elsewhere result * log 0 stays. */
static void rpow_s_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    double s = n->attrs.s[0];
    ca_bval result = saved(b, n, 0);
    ca_bval v = bx_mul_s(b, bx_mul(b, g, result), log(s));
    if (s == 0.0) {
        ca_bval finite = bx_pw(b, KPW_LE_S, result, NULL, NULL, 1.0, 0);
        v = bx_pw(b, KPW_MASKED_FILL, v, finite, NULL, 0.0, 0);
    }
    set_grad(b, n, gin, 0, v);
}

/* max(a, s) = clamp(a, min=s): the gradient flows where a >= s (PyTorch's clamp_min).
 * saved: self */
static void maximum_s_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, 0, bx_pw(b, KPW_CLAMP_BW, g, saved(b, n, 0), NULL, n->attrs.s[0], NAN));
}

static void minimum_s_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, 0, bx_pw(b, KPW_CLAMP_BW, g, saved(b, n, 0), NULL, NAN, n->attrs.s[0]));
}

/* ---------------------------------------------------------------------------------------
 * Unary ops
 */
/* g * f'(saved k) where f' is the kernel op `dop` applied to (g, saved) */
static void unary_bw(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin, kern_pw_op dop,
                     double p0, double p1) {
    set_grad(b, n, gin, 0, bx_pw(b, dop, g, saved(b, n, 0), NULL, p0, p1));
}

static void exp_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, 0, bx_mul(b, g, saved(b, n, 0)));
}

static void log_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, 0, bx_div(b, g, saved(b, n, 0)));
}

/* g / (2 * result) */
static void sqrt_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    set_grad(b, n, gin, 0, bx_div(b, g, bx_mul_s(b, saved(b, n, 0), 2.0)));
}

/* -0.5 * g * result^3 */
static void rsqrt_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    ca_bval cube = bx_pw(b, KPW_POW_S, saved(b, n, 0), NULL, NULL, 3.0, 0);
    set_grad(b, n, gin, 0, bx_mul_s(b, bx_mul(b, g, cube), -0.5));
}

static void abs_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    unary_bw(b, n, g, gin, KPW_ABS_BW, 0, 0);
}

static void sin_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    ca_bval c = bx_pw(b, KPW_COS, saved(b, n, 0), NULL, NULL, 0, 0);
    set_grad(b, n, gin, 0, bx_mul(b, g, c));
}

static void cos_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    ca_bval s = bx_pw(b, KPW_SIN, saved(b, n, 0), NULL, NULL, 0, 0);
    set_grad(b, n, gin, 0, bx_neg(b, bx_mul(b, g, s)));
}

static void gelu_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    unary_bw(b, n, g, gin, n->attrs.i[0] ? KPW_GELU_TANH_BW : KPW_GELU_BW, 0, 0);
}

static void clamp_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    unary_bw(b, n, g, gin, KPW_CLAMP_BW, n->attrs.s[0], n->attrs.s[1]);
}

/* i[1] = 1: a clone (a copy of the same dtype), PyTorch's CloneBackward0. */
static const char *to_dtype_node_name(const ca_attrs *a) {
    return a->i[1] ? "CloneBackward0" : "ToCopyBackward0";
}

/* The gradient converts back to the input's dtype. */
static void to_dtype_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (!node_needs_grad(n, 0))
        return;
    if (n->in_meta[0].dtype == n->out_meta.dtype) {
        gin[0] = g;
        return;
    }
    ca_attrs a = {.i = {n->in_meta[0].dtype}};
    gin[0] = bx_apply(b, CA_OP_TO_DTYPE, 1, &g, &a);
}

/* ---------------------------------------------------------------------------------------
 * Rows with their own shape rule or forward
 */
static ca_status gelu_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                            ca_meta *out) {
    if (a->i[0] != CA_GELU_NONE && a->i[0] != CA_GELU_TANH)
        return err_set(CA_STATUS_INVALID,
                       "gelu: approximate must be CA_GELU_NONE (0) or "
                       "CA_GELU_TANH (1), got %lld",
                       (long long)a->i[0]);
    return cai_op_pointwise_shape(row, in, n_in, a, out);
}

static ca_status clamp_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                             ca_meta *out) {
    if (isnan(a->s[0]) && isnan(a->s[1]))
        return err_set(CA_STATUS_INVALID, "clamp: both bounds are NaN (missing); give at least "
                                          "one of min and max");
    return cai_op_pointwise_shape(row, in, n_in, a, out);
}

static bool dtype_valid(int64_t dt) {
    return dt == CA_FLOAT32 || dt == CA_FLOAT64 || dt == CA_INT64 || dt == CA_BOOL;
}

/* float <-> float, int64 -> float, anything <-> bool (x != 0; 0 or 1), and any dtype to
 * itself */
static ca_status to_dtype_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                                ca_meta *out) {
    int64_t to = a->i[0];
    if (!dtype_valid(to))
        return err_set(CA_STATUS_INVALID,
                       "to_dtype: %lld is not a dtype; pass CA_FLOAT32, "
                       "CA_FLOAT64, CA_INT64 or CA_BOOL",
                       (long long)to);
    if (to == CA_INT64 && in[0].dtype != CA_INT64 && in[0].dtype != CA_BOOL)
        return err_set(CA_STATUS_DTYPE,
                       "to_dtype: converting %s to int64 is not supported; "
                       "only float <-> float, int64 -> float and conversions to and "
                       "from bool are",
                       ca_dtype_name(in[0].dtype));
    *out = in[0];
    out->dtype = (ca_dtype)to;
    return CA_OK;
}

static ca_status to_dtype_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                  const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                  ca_tensor **aux) {
    ca_tensor *x = in[0];
    if (x->dtype == m->dtype) /* still a copy: the result must not alias x */
        return cai_tensor_pointwise(KPW_COPY, m, 1, in, 0, 0, out);
    CA_CHECK(cai_tensor_new(m, out));
    kern_src src;
    cai_tensor_src(x, m->ndim, m->shape, &src);
    cai_kern_cast(kdt(m->dtype), kdt(x->dtype), m->ndim, m->shape, cai_tensor_ptr(*out),
                  (*out)->strides, &src);
    return CA_OK;
}

/* ---------------------------------------------------------------------------------------
 * Comparisons: bool results, inputs promoted as PyTorch's (bool < int64 < float32 < float64)
 */
static ca_dtype promote_dtype(ca_dtype a, ca_dtype b) {
    static const int rank[] = {[CA_BOOL] = 0, [CA_INT64] = 1, [CA_FLOAT32] = 2, [CA_FLOAT64] = 3};
    return rank[a] >= rank[b] ? a : b;
}

static ca_dtype cmp_dtype(const ca_dtype *dt, int n_in) {
    return n_in == 2 ? promote_dtype(dt[0], dt[1]) : dt[0];
}

static ca_status cmp_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                           ca_meta *out) {
    ca_meta as[2] = {in[0], in[n_in - 1]};
    ca_dtype dt[2] = {in[0].dtype, in[n_in - 1].dtype};
    for (int i = 0; i < n_in; i++)
        as[i].dtype = cmp_dtype(dt, n_in);
    CA_CHECK(cai_op_pointwise_shape(row, as, n_in, a, out));
    out->dtype = CA_BOOL;
    return CA_OK;
}

/* A contiguous copy of x in dtype dt. */
static ca_status cast_copy(ca_tensor *x, ca_dtype dt, ca_tensor **out) {
    ca_meta m;
    cai_tensor_meta(x, &m);
    m.dtype = dt;
    CA_CHECK(cai_tensor_new(&m, out));
    kern_src src;
    cai_tensor_src(x, m.ndim, m.shape, &src);
    cai_kern_cast(kdt(dt), kdt(x->dtype), m.ndim, m.shape, cai_tensor_ptr(*out), (*out)->strides,
                  &src);
    return CA_OK;
}

/* Whether x is contiguous with the result's shape (nothing broadcast). */
static bool dense_as(const ca_tensor *x, const ca_meta *m) {
    if (x->ndim != m->ndim || !ca_tensor_is_contiguous(x))
        return false;
    for (int d = 0; d < m->ndim; d++)
        if (x->shape[d] != m->shape[d])
            return false;
    return true;
}

/* The common case in one pass: float inputs of one dtype, contiguous, not broadcast. */
static bool cmp_direct(const ca_op_def *row, ca_tensor *const *in, int n_in, const ca_attrs *a,
                       const ca_meta *m, ca_tensor **out, ca_status *st) {
    ca_dtype dt = in[0]->dtype;
    if ((dt != CA_FLOAT32 && dt != CA_FLOAT64) || in[n_in - 1]->dtype != dt)
        return false;
    for (int i = 0; i < n_in; i++)
        if (!dense_as(in[i], m))
            return false;
    if ((*st = cai_tensor_new(m, out)) != CA_OK)
        return true;
    cai_kern_compare_bool(row->pw, kdt(dt), cai_meta_numel(m), cai_tensor_ptr(in[0]),
                          n_in > 1 ? cai_tensor_ptr(in[1]) : NULL, a->s[0], cai_tensor_ptr(*out));
    return true;
}

/* Compares in the promoted dtype: bool inputs straight into the bool result, others into
 * 0/1 of their dtype first, then converted (contiguous floats in one pass, cmp_direct). */
static ca_status cmp_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                             const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                             ca_tensor **aux) {
    (void)aux;
    ca_status direct_st = CA_OK;
    if (cmp_direct(row, in, n_in, a, m, out, &direct_st))
        return direct_st;
    ca_dtype dt[2] = {in[0]->dtype, in[n_in - 1]->dtype};
    ca_dtype cdt = cmp_dtype(dt, n_in);
    ca_tensor *conv[2] = {NULL, NULL}, *args[2] = {in[0], in[n_in - 1]}, *tmp = NULL;
    ca_status st = CA_OK;
    for (int i = 0; i < n_in && st == CA_OK; i++)
        if (in[i]->dtype != cdt && (st = cast_copy(in[i], cdt, &conv[i])) == CA_OK)
            args[i] = conv[i];
    ca_meta tm = *m;
    tm.dtype = cdt;
    if (st == CA_OK && cdt == CA_BOOL)
        st = cai_tensor_pointwise(row->pw, m, n_in, args, a->s[0], a->s[1], out);
    else if (st == CA_OK &&
             (st = cai_tensor_pointwise(row->pw, &tm, n_in, args, a->s[0], a->s[1], &tmp)) == CA_OK)
        st = cast_copy(tmp, CA_BOOL, out);
    ca_tensor_release(tmp);
    cai_op_release_all(conv, 2);
    return st;
}

/* ---------------------------------------------------------------------------------------
 * The rows
 */
static const ca_op_def rows[] = {
    /* internal generic pointwise: backward helpers are built from it; a double backward
     * differentiates it (ops_pw_deriv.c), so it saves its inputs */
    {.id = CA_OP_PW,
     .name = "pointwise",
     .node_name = "PointwiseBackward",
     .fusion = CA_FUSE_POINTWISE,
     .n_in_min = 1,
     .n_in_max = 3,
     .n_fields = 6,
     .fields = {F_INT("op", 0), F_DBL("p0", 0), F_DBL("p1", 1), F_IN("a", 0), F_IN("b", 1),
                F_IN("c", 2)},
     .shape = cai_op_pointwise_shape,
     .forward = cai_op_pointwise_forward,
     .backward = cai_pw_backward,
     .pw = KPW_COPY},

    /* binary */
    PW_ROW(CA_OP_ADD, "add", "AddBackward0", 2, KPW_ADD, add_backward, 1, F_DBL("alpha", 0)),
    PW_ROW(CA_OP_SUB, "sub", "SubBackward0", 2, KPW_SUB, sub_backward, 1, F_DBL("alpha", 0)),
    PW_ROW(CA_OP_MUL, "mul", "MulBackward0", 2, KPW_MUL, mul_backward, 2, F_IN("self", 0),
           F_IN("other", 1)),
    PW_ROW(CA_OP_DIV, "div", "DivBackward0", 2, KPW_DIV, div_backward, 2, F_IN("self", 0),
           F_IN("other", 1)),
    PW_ROW(CA_OP_POW, "pow", "PowBackward1", 2, KPW_POW, pow_backward, 3, F_IN("self", 0),
           F_IN("exponent", 1), F_RESULT),
    PW_ROW(CA_OP_MAXIMUM, "maximum", "MaximumBackward0", 2, KPW_MAX, maximum_backward, 2,
           F_IN("self", 0), F_IN("other", 1)),
    PW_ROW(CA_OP_MINIMUM, "minimum", "MinimumBackward0", 2, KPW_MIN, minimum_backward, 2,
           F_IN("self", 0), F_IN("other", 1)),
    {.id = CA_OP_WHERE,
     .name = "where",
     .node_name = "WhereBackward0",
     .fusion = CA_FUSE_POINTWISE,
     .n_in_min = 3,
     .n_in_max = 3,
     .nondiff_inputs = 1u << 0,
     .n_fields = 1,
     .fields = {F_IN("condition", 0)},
     .shape = cai_op_pointwise_shape,
     .forward = cai_op_pointwise_forward,
     .backward = where_backward,
     .pw = KPW_WHERE},
    CMP_ROW(CA_OP_LT, "lt", "LtBackward0", 2, KPW_LT),
    CMP_ROW(CA_OP_LE, "le", "LeBackward0", 2, KPW_LE),
    CMP_ROW(CA_OP_GT, "gt", "GtBackward0", 2, KPW_GT),
    CMP_ROW(CA_OP_GE, "ge", "GeBackward0", 2, KPW_GE),
    CMP_ROW(CA_OP_EQ, "eq", "EqBackward0", 2, KPW_EQ),
    CMP_ROW(CA_OP_NE, "ne", "NeBackward0", 2, KPW_NE),

    /* scalar forms */
    PW_ROW(CA_OP_ADD_S, "add_scalar", "AddBackward1", 1, KPW_ADD_S, identity_backward, 0),
    PW_ROW(CA_OP_SUB_S, "sub_scalar", "SubBackward1", 1, KPW_SUB_S, identity_backward, 0),
    PW_ROW(CA_OP_RSUB_S, "rsub_scalar", "RsubBackward1", 1, KPW_RSUB_S, neg_backward, 0),
    PW_ROW(CA_OP_MUL_S, "mul_scalar", "MulBackward1", 1, KPW_MUL_S, mul_s_backward, 1,
           F_DBL("other", 0)),
    PW_ROW(CA_OP_DIV_S, "div_scalar", "DivBackward1", 1, KPW_DIV_S, div_s_backward, 1,
           F_DBL("other", 0)),
    PW_ROW(CA_OP_RDIV_S, "rdiv_scalar", "RdivBackward1", 1, KPW_RDIV_S, rdiv_s_backward, 2,
           F_IN("self", 0), F_DBL("other", 0)),
    PW_ROW(CA_OP_POW_S, "pow_scalar", "PowBackward0", 1, KPW_POW_S, pow_s_backward, 2,
           F_IN("self", 0), F_DBL("exponent", 0)),
    PW_ROW(CA_OP_RPOW_S, "rpow_scalar", "PowBackward2", 1, KPW_RPOW_S, rpow_s_backward, 2, F_RESULT,
           F_DBL("self", 0)),
    PW_ROW(CA_OP_MAXIMUM_S, "maximum_scalar", "ClampMinBackward0", 1, KPW_MAX_S, maximum_s_backward,
           2, F_IN("self", 0), F_DBL("min", 0)),
    PW_ROW(CA_OP_MINIMUM_S, "minimum_scalar", "ClampMaxBackward0", 1, KPW_MIN_S, minimum_s_backward,
           2, F_IN("self", 0), F_DBL("max", 0)),
    CMP_ROW(CA_OP_LT_S, "lt_scalar", "LtBackward1", 1, KPW_LT_S),
    CMP_ROW(CA_OP_LE_S, "le_scalar", "LeBackward1", 1, KPW_LE_S),
    CMP_ROW(CA_OP_GT_S, "gt_scalar", "GtBackward1", 1, KPW_GT_S),
    CMP_ROW(CA_OP_GE_S, "ge_scalar", "GeBackward1", 1, KPW_GE_S),
    CMP_ROW(CA_OP_EQ_S, "eq_scalar", "EqBackward1", 1, KPW_EQ_S),
    CMP_ROW(CA_OP_NE_S, "ne_scalar", "NeBackward1", 1, KPW_NE_S),

    /* unary */
    MATH_ROW(CA_OP_NEG, "neg", "NegBackward0", KPW_NEG, neg_backward, 0, 0),
    MATH_ROW(CA_OP_EXP, "exp", "ExpBackward0", KPW_EXP, exp_backward, 0, 1, F_RESULT),
    MATH_ROW(CA_OP_LOG, "log", "LogBackward0", KPW_LOG, log_backward, CA_OP_POSITIVE, 1,
             F_IN("self", 0)),
    MATH_ROW(CA_OP_SQRT, "sqrt", "SqrtBackward0", KPW_SQRT, sqrt_backward, CA_OP_POSITIVE, 1,
             F_RESULT),
    MATH_ROW(CA_OP_RSQRT, "rsqrt", "RsqrtBackward0", KPW_RSQRT, rsqrt_backward, CA_OP_POSITIVE, 1,
             F_RESULT),
    MATH_ROW(CA_OP_ABS, "abs", "AbsBackward0", KPW_ABS, abs_backward, 0, 1, F_IN("self", 0)),
    MATH_ROW(CA_OP_SIN, "sin", "SinBackward0", KPW_SIN, sin_backward, 0, 1, F_IN("self", 0)),
    MATH_ROW(CA_OP_COS, "cos", "CosBackward0", KPW_COS, cos_backward, 0, 1, F_IN("self", 0)),
    {.id = CA_OP_GELU,
     .name = "gelu",
     .node_name = "GeluBackward0",
     .fusion = CA_FUSE_POINTWISE,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 2,
     .fields = {F_IN("self", 0), F_INT("approximate", 0)},
     .shape = gelu_shape,
     .forward = cai_op_pointwise_forward,
     .backward = gelu_backward,
     .pw = KPW_GELU,
     .schema = "gelu(Tensor input, str{none|tanh} approximate='none')",
     .py = CA_OP_PY_NN},
    {.id = CA_OP_CLAMP,
     .name = "clamp",
     .node_name = "ClampBackward1",
     .fusion = CA_FUSE_POINTWISE,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 3,
     .fields = {F_IN("self", 0), F_DBL("min", 0), F_DBL("max", 1)},
     .shape = clamp_shape,
     .forward = cai_op_pointwise_forward,
     .backward = clamp_backward,
     .pw = KPW_CLAMP},
    /* a cast is not a kern_pw_op, so the fusion pass must treat it as opaque */
    {.id = CA_OP_TO_DTYPE,
     .name = "to_dtype",
     .node_name = "ToCopyBackward0",
     .node_name_of = to_dtype_node_name,
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 1,
     .fields = {F_INT("dtype", 0)},
     .shape = to_dtype_shape,
     .forward = to_dtype_forward,
     .backward = to_dtype_backward},
};

const ca_op_group cai_ops_pointwise = {rows, (int)(sizeof rows / sizeof rows[0])};

/* ---------------------------------------------------------------------------------------
 * Public wrappers
 */
static ca_status binary(int op, const char *fn, ca_tensor *a, ca_tensor *b, double alpha,
                        ca_tensor **out) {
    CA_ARG_NOT_NULL(out, fn);
    *out = NULL;
    CA_ARG_NOT_NULL(a, fn);
    CA_ARG_NOT_NULL(b, fn);
    ca_attrs at = {.s = {alpha, 0}};
    return cai_op_call2(op, a, b, &at, out);
}

static ca_status unary(int op, const char *fn, ca_tensor *x, const ca_attrs *at, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, fn);
    *out = NULL;
    CA_ARG_NOT_NULL(x, fn);
    return cai_op_call1(op, x, at, out);
}

static ca_status scalar(int op, const char *fn, ca_tensor *a, double s, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, fn);
    *out = NULL;
    CA_ARG_NOT_NULL(a, fn);
    ca_attrs at = {.s = {s, 0}};
    return cai_op_call1(op, a, &at, out);
}

#define DEF_BINARY(fn, OP)                                                                         \
    ca_status fn(ca_tensor *a, ca_tensor *b, ca_tensor **out) {                                    \
        return binary(OP, #fn, a, b, 1.0, out);                                                    \
    }
#define DEF_SCALAR(fn, OP)                                                                         \
    ca_status fn(ca_tensor *a, double s, ca_tensor **out) {                                        \
        return scalar(OP, #fn, a, s, out);                                                         \
    }
#define DEF_UNARY(fn, OP)                                                                          \
    ca_status fn(ca_tensor *x, ca_tensor **out) {                                                  \
        return unary(OP, #fn, x, NULL, out);                                                       \
    }

DEF_BINARY(ca_add, CA_OP_ADD)
DEF_BINARY(ca_sub, CA_OP_SUB)
DEF_BINARY(ca_mul, CA_OP_MUL)
DEF_BINARY(ca_div, CA_OP_DIV)
DEF_BINARY(ca_pow, CA_OP_POW)
DEF_BINARY(ca_maximum, CA_OP_MAXIMUM)
DEF_BINARY(ca_minimum, CA_OP_MINIMUM)
DEF_BINARY(ca_lt, CA_OP_LT)
DEF_BINARY(ca_le, CA_OP_LE)
DEF_BINARY(ca_gt, CA_OP_GT)
DEF_BINARY(ca_ge, CA_OP_GE)
DEF_BINARY(ca_eq, CA_OP_EQ)
DEF_BINARY(ca_ne, CA_OP_NE)

DEF_SCALAR(ca_add_scalar, CA_OP_ADD_S)
DEF_SCALAR(ca_sub_scalar, CA_OP_SUB_S)
DEF_SCALAR(ca_rsub_scalar, CA_OP_RSUB_S)
DEF_SCALAR(ca_mul_scalar, CA_OP_MUL_S)
DEF_SCALAR(ca_div_scalar, CA_OP_DIV_S)
DEF_SCALAR(ca_rdiv_scalar, CA_OP_RDIV_S)
DEF_SCALAR(ca_pow_scalar, CA_OP_POW_S)
DEF_SCALAR(ca_rpow_scalar, CA_OP_RPOW_S)
DEF_SCALAR(ca_maximum_scalar, CA_OP_MAXIMUM_S)
DEF_SCALAR(ca_minimum_scalar, CA_OP_MINIMUM_S)
DEF_SCALAR(ca_lt_scalar, CA_OP_LT_S)
DEF_SCALAR(ca_le_scalar, CA_OP_LE_S)
DEF_SCALAR(ca_gt_scalar, CA_OP_GT_S)
DEF_SCALAR(ca_ge_scalar, CA_OP_GE_S)
DEF_SCALAR(ca_eq_scalar, CA_OP_EQ_S)
DEF_SCALAR(ca_ne_scalar, CA_OP_NE_S)

DEF_UNARY(ca_neg, CA_OP_NEG)
DEF_UNARY(ca_exp, CA_OP_EXP)
DEF_UNARY(ca_log, CA_OP_LOG)
DEF_UNARY(ca_sqrt, CA_OP_SQRT)
DEF_UNARY(ca_rsqrt, CA_OP_RSQRT)
DEF_UNARY(ca_abs, CA_OP_ABS)
DEF_UNARY(ca_sin, CA_OP_SIN)
DEF_UNARY(ca_cos, CA_OP_COS)

ca_status ca_where(ca_tensor *cond, ca_tensor *a, ca_tensor *b, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_where");
    *out = NULL;
    CA_ARG_NOT_NULL(cond, "ca_where");
    CA_ARG_NOT_NULL(a, "ca_where");
    CA_ARG_NOT_NULL(b, "ca_where");
    ca_tensor *in[3] = {cond, a, b};
    return cai_op_call(CA_OP_WHERE, 3, in, NULL, out, NULL);
}

/* where(cond, a, full(b)) with a 0-d b: it broadcasts like where with a tensor, and the
 * recorded WhereBackward0 sends the gradient to `a` only. */
ca_status ca_where_scalar(ca_tensor *cond, ca_tensor *a, double b, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_where_scalar");
    *out = NULL;
    CA_ARG_NOT_NULL(cond, "ca_where_scalar");
    CA_ARG_NOT_NULL(a, "ca_where_scalar");
    ca_tensor *bt = NULL;
    CA_CHECK(ca_full(a->dtype, 0, NULL, b, &bt));
    ca_tensor *in[3] = {cond, a, bt};
    ca_status st = cai_op_call(CA_OP_WHERE, 3, in, NULL, out, NULL);
    ca_tensor_release(bt);
    return st;
}

ca_status ca_gelu(ca_tensor *x, ca_gelu_approximate approximate, ca_tensor **out) {
    ca_attrs at = {.i = {(int64_t)approximate}};
    return unary(CA_OP_GELU, "ca_gelu", x, &at, out);
}

ca_status ca_clamp(ca_tensor *x, double min, double max, ca_tensor **out) {
    ca_attrs at = {.s = {min, max}};
    return unary(CA_OP_CLAMP, "ca_clamp", x, &at, out);
}

ca_status ca_to_dtype(ca_tensor *x, ca_dtype dtype, ca_tensor **out) {
    ca_attrs at = {.i = {(int64_t)dtype}};
    return unary(CA_OP_TO_DTYPE, "ca_to_dtype", x, &at, out);
}

ca_status ca_clone(ca_tensor *x, ca_tensor **out) {
    ca_attrs at = {.i = {x ? (int64_t)x->dtype : 0, 1}};
    return unary(CA_OP_TO_DTYPE, "ca_clone", x, &at, out);
}
