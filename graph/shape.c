/* shape.c - shape inference for cai_graph_add: per op, check the inputs the way the eager
 * op's shape rule does, canonicalise the args, and compute the output's dtype and
 * symbolic shape.
 *
 * Sizes are size expressions, compared by id. A constant 1 broadcasts; a symbol is never
 * taken to be 1, so it meets only itself or a constant 1, which keeps the graph right for
 * any value >= 1 of the symbol (the compiled-autograd cache never binds one to 0).
 * Anything not provably right is an error that names the dims, so the tracer can fall back
 * instead of running a graph that might be wrong.
 */
#include "graph/internal.h"
#include "graph/shape_rules.h"

#include <string.h>

#define SHAPE_STR 160

static const char *dtype_name(kern_dtype dt) {
    return dt == KERN_F32 ? "f32" : dt == KERN_F64 ? "f64" : dt == KERN_I64 ? "i64" : "?";
}

static const char *shape_of(const graph *g, const graph_node *n, char *buf) {
    return cai_graph_shape_str(g, n->ndim, n->shape, buf, SHAPE_STR);
}

/* -1 in a RESHAPE or EXPAND target: the id -1 or the constant -1. */
static bool sx_infer(const graph *g, graph_sx s) {
    return s == -1 || cai_graph_sx_is(g, s, -1);
}

bool cai_graph_same_shape(int na, const graph_sx *a, int nb, const graph_sx *b) {
    if (na != nb)
        return false;
    for (int d = 0; d < na; d++)
        if (a[d] != b[d])
            return false;
    return true;
}

/* ---------------------------------------------------------------------------------------
 * The shared shape rules (shape_rules.h) over this graph's size expressions
 */
static bool sizes_value(const void *ctx, int64_t s, int64_t *v) {
    return s >= INT32_MIN && s <= INT32_MAX && cai_graph_sx_const_value(ctx, (graph_sx)s, v);
}

static int64_t sizes_constant(void *ctx, int64_t v) {
    return cai_graph_sx_const(ctx, v);
}

static const char *sizes_shape_str(const void *ctx, int n, const int64_t *shape, char *buf,
                                   size_t size) {
    graph_sx sx[KERN_MAX_DIMS];
    n = n < KERN_MAX_DIMS ? n : KERN_MAX_DIMS;
    for (int d = 0; d < n; d++)
        sx[d] = (graph_sx)shape[d];
    return cai_graph_shape_str(ctx, n, sx, buf, size);
}

static const char *sizes_size_str(const void *ctx, int64_t s, char *buf, size_t size) {
    return cai_graph_sx_str(ctx, (graph_sx)s, buf, size);
}

static int64_t sizes_arith(void *ctx, cai_size_op op, int64_t a, int64_t b) {
    graph_sx_kind k = op == CAI_SIZE_ADD ? GSX_ADD : op == CAI_SIZE_MUL ? GSX_MUL : GSX_DIV;
    return cai_graph_sx_op(ctx, k, (graph_sx)a, (graph_sx)b);
}

static bool sizes_same(void *ctx, int64_t a, int64_t b) {
    return a >= 0 && b >= 0 && a <= INT32_MAX && b <= INT32_MAX &&
           cai_graph_sx_same(ctx, (graph_sx)a, (graph_sx)b);
}

static cai_sizes sizes_of(graph *g) {
    return (cai_sizes){.ctx = g,
                       .value = sizes_value,
                       .same = sizes_same,
                       .constant = sizes_constant,
                       .shape_str = sizes_shape_str,
                       .size_str = sizes_size_str,
                       .dtype_name = dtype_name,
                       .convert = "a cast",
                       .arith = sizes_arith};
}

/* A failed shared rule as this graph's error. */
static int rule_fail(graph *g, const cai_rule_error *e) {
    if (e->status == CAI_RULE_NOMEM)
        return cai_graph_fail_nomem(g, "a size expression");
    return cai_graph_fail(g, "%s", e->msg);
}

static void to64(int n, const graph_sx *s, int64_t *out) {
    for (int d = 0; d < n; d++)
        out[d] = s[d];
}

static void to_sx(int n, const int64_t *s, graph_sx *out) {
    for (int d = 0; d < n; d++)
        out[d] = (graph_sx)s[d];
}

static int norm_dim(graph *g, const char *op, int64_t *dim, int ndim) {
    cai_rule_error e;
    return cai_rule_dim(dim, ndim, op, &e) ? rule_fail(g, &e) : 0;
}

/* ---------------------------------------------------------------------------------------
 * Arity, inputs and canonical args
 */
static int op_n_in(const graph_op_args *a) {
    if (a->op != GOP_PW)
        return cai_graph_op_n_in(a->op);
    return (unsigned)a->i[0] < KPW__COUNT ? cai_kern_pw_arity((kern_pw_op)a->i[0]) : -1;
}

/* Zero every field the op does not read. */
static void canon_unused(graph_op_args *a, int n_in) {
    for (int k = n_in; k < GRAPH_MAX_IN; k++)
        a->in[k] = -1;
    int ni = cai_graph_op_n_ints(a->op);
    for (int k = ni; k < 4; k++)
        a->i[k] = 0;
    int np = a->op == GOP_PW ? cai_kern_pw_nparams((kern_pw_op)a->i[0])
             : a->op == GOP_SCALE_SIZE || a->op == GOP_INDEX_FILL ? 1
                                                                  : 0;
    for (int k = np; k < 2; k++)
        a->p[k] = 0;
    if (a->op != GOP_INPUT && a->op != GOP_CAST && a->op != GOP_CALLOUT_RESULT)
        a->dtype = 0;
    if (!cai_graph_op_uses_shape(a->op))
        a->n_shape = 0;
    for (int d = a->n_shape; d < KERN_MAX_DIMS; d++)
        a->shape[d] = 0;
    if (a->op != GOP_PERMUTE)
        a->n_perm = 0;
    for (int d = a->n_perm; d < KERN_MAX_DIMS; d++)
        a->perm[d] = 0;
}

/* Check the inputs and follow CSE's replacements. */
static int check_inputs(graph *g, graph_op_args *a, int n_in) {
    const char *op = cai_graph_op_name(a->op);
    if (a->n_in != n_in)
        return cai_graph_fail(g, "%s: takes %d inputs, got %d", op, n_in, a->n_in);
    for (int k = 0; k < n_in; k++) {
        const graph_node *in = cai_graph_node_at(g, a->in[k]);
        if (!in)
            return cai_graph_fail(g, "%s: input %d is value %d, which does not exist (%d nodes)",
                                  op, k, a->in[k], cai_graph_count(g));
        a->in[k] = cai_graph_resolve(g, a->in[k]);
        in = cai_graph_node_at(g, a->in[k]);
        bool want_acc = a->op == GOP_POST_HOOK;
        if (want_acc ? in->a.op != GOP_ACCUMULATE : !cai_graph_op_has_value(in->a.op))
            return cai_graph_fail(
                g, "%s: input %d is a %s node, %s", op, k, cai_graph_op_name(in->a.op),
                want_acc ? "expected its accumulate_grad node" : "which makes no value");
    }
    return 0;
}

static int check_shape_attr(graph *g, const graph_op_args *a, bool allow_infer) {
    const char *op = cai_graph_op_name(a->op);
    if (a->n_shape < 0 || a->n_shape > KERN_MAX_DIMS)
        return cai_graph_fail(g, "%s: the shape has %d dims; graphs support 0 to %d", op,
                              a->n_shape, KERN_MAX_DIMS);
    for (int d = 0; d < a->n_shape; d++) {
        graph_sx s = a->shape[d];
        if (allow_infer && sx_infer(g, s))
            continue;
        int64_t v;
        if (s < 0 || s >= cai_graph_sx_count(g))
            return cai_graph_fail(
                g, "%s: dim %d of the shape is size expression %d, not in the table", op, d, s);
        if (cai_graph_sx_const_value(g, s, &v) && v < 0)
            return cai_graph_fail(g, "%s: size %lld at dim %d of the shape is negative", op,
                                  (long long)v, d);
    }
    return 0;
}

static const graph_node *in_node(const graph *g, const graph_node *n, int k) {
    return cai_graph_node_at(g, n->a.in[k]);
}

static void set_out(graph_node *n, kern_dtype dt, int ndim, const graph_sx *shape) {
    n->dtype = dt;
    n->ndim = ndim;
    if (ndim > 0)
        memmove(n->shape, shape, sizeof(graph_sx) * (size_t)ndim);
}

static void copy_out(graph_node *n, const graph_node *in) {
    set_out(n, in->dtype, in->ndim, in->shape);
}

/* ---------------------------------------------------------------------------------------
 * Broadcasting
 */
/* out = broadcast of (na, a) and (nb, b); out may alias a. */
static int bcast(graph *g, const char *op, int na, const graph_sx *a, int nb, const graph_sx *b,
                 int *nout, graph_sx *out) {
    int64_t a64[KERN_MAX_DIMS], b64[KERN_MAX_DIMS], r[KERN_MAX_DIMS];
    to64(na, a, a64);
    to64(nb, b, b64);
    cai_sizes z = sizes_of(g);
    cai_rule_error e;
    if (cai_rule_broadcast(&z, op, na, a64, nb, b64, nout, r, &e))
        return rule_fail(g, &e);
    to_sx(*nout, r, out);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Per-op rules
 */
static int infer_input(graph *g, graph_node *n) {
    graph_op_args *a = &n->a;
    if (a->i[0] < 0)
        return cai_graph_fail(g, "getitem: input number %lld is negative", (long long)a->i[0]);
    if ((unsigned)a->dtype > KERN_I64)
        return cai_graph_fail(g, "getitem: dtype %d is not a kern_dtype", (int)a->dtype);
    if (check_shape_attr(g, a, false))
        return -1;
    for (int v = 0; v < cai_graph_count(g); v++) {
        const graph_node *o = cai_graph_node_at(g, v);
        if (o->a.op == GOP_INPUT && o->a.i[0] == a->i[0])
            return cai_graph_fail(g, "getitem: input %lld is already value %d", (long long)a->i[0],
                                  v);
    }
    set_out(n, a->dtype, a->n_shape, a->shape);
    return 0;
}

static int infer_pw(graph *g, graph_node *n) {
    kern_pw_op k = (kern_pw_op)n->a.i[0];
    char op[32]; /* the printed name: cai_kern_pw_name in lower case */
    const char *src = cai_kern_pw_name(k);
    size_t len = 0;
    for (; src[len] && len + 1 < sizeof op; len++)
        op[len] = (char)(src[len] >= 'A' && src[len] <= 'Z' ? src[len] - 'A' + 'a' : src[len]);
    op[len] = '\0';
    kern_dtype dts[GRAPH_MAX_IN], dt;
    for (int i = 0; i < n->a.n_in; i++)
        dts[i] = in_node(g, n, i)->dtype;
    cai_sizes z = sizes_of(g);
    cai_rule_error e;
    if (cai_rule_pointwise_dtype(&z, op, k, n->a.n_in, dts, &dt, &e))
        return rule_fail(g, &e);
    int nd = 0;
    graph_sx shape[KERN_MAX_DIMS];
    for (int i = 0; i < n->a.n_in; i++) {
        const graph_node *x = in_node(g, n, i);
        if (bcast(g, op, nd, shape, x->ndim, x->shape, &nd, shape))
            return -1;
    }
    set_out(n, dt, nd, shape);
    return 0;
}

static int infer_sum(graph *g, graph_node *n) {
    const graph_node *x = in_node(g, n, 0);
    uint64_t mask = (uint64_t)n->a.i[0];
    if (n->a.i[0] < 0 || (mask >> x->ndim) != 0)
        return cai_graph_fail(g, "sum: dim mask 0x%llx names dims a %d-D value does not have",
                              (unsigned long long)mask, x->ndim);
    n->a.i[1] = n->a.i[1] != 0;
    int64_t x64[KERN_MAX_DIMS], r[KERN_MAX_DIMS];
    to64(x->ndim, x->shape, x64);
    cai_sizes z = sizes_of(g);
    int nd = cai_rule_reduced_shape(&z, x->ndim, x64, (uint32_t)mask, n->a.i[1], r);
    if (nd < 0)
        return cai_graph_fail_nomem(g, "a size expression");
    graph_sx shape[KERN_MAX_DIMS];
    to_sx(nd, r, shape);
    set_out(n, x->dtype, nd, shape);
    return 0;
}

static int infer_sum_to(graph *g, graph_node *n) {
    const graph_node *x = in_node(g, n, 0);
    const graph_op_args *a = &n->a;
    if (check_shape_attr(g, a, false))
        return -1;
    int64_t x64[KERN_MAX_DIMS], t64[KERN_MAX_DIMS];
    to64(x->ndim, x->shape, x64);
    to64(a->n_shape, a->shape, t64);
    cai_sizes z = sizes_of(g);
    cai_rule_error e;
    if (cai_rule_sum_to(&z, x->ndim, x64, a->n_shape, t64, &e))
        return rule_fail(g, &e);
    set_out(n, x->dtype, a->n_shape, a->shape);
    return 0;
}

static int infer_expand(graph *g, graph_node *n) {
    const graph_node *x = in_node(g, n, 0);
    graph_op_args *a = &n->a;
    if (check_shape_attr(g, a, true))
        return -1;
    int64_t x64[KERN_MAX_DIMS], t64[KERN_MAX_DIMS];
    to64(x->ndim, x->shape, x64);
    to64(a->n_shape, a->shape, t64);
    for (int d = 0; d < a->n_shape; d++) /* the constant -1 asks to infer, as the id -1 */
        t64[d] = sx_infer(g, a->shape[d]) ? -1 : t64[d];
    cai_sizes z = sizes_of(g);
    cai_rule_error e;
    if (cai_rule_expand(&z, x->ndim, x64, a->n_shape, t64, &e))
        return rule_fail(g, &e);
    to_sx(a->n_shape, t64, a->shape);
    set_out(n, x->dtype, a->n_shape, a->shape);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * reshape: element counts as multisets of factors
 */
#define MAX_FACTORS 32

typedef struct {
    int64_t c;    /* product of the constant factors */
    bool partial; /* too many factors to track: never provably equal */
    int n;
    graph_sx f[MAX_FACTORS]; /* the symbolic factors */
} factors;

/* Split s into constant and symbolic factors, looking through products. */
static void factor_add(const graph *g, graph_sx s, factors *fs) {
    int64_t a, b;
    graph_sx_kind k = cai_graph_sx_get(g, s, &a, &b);
    if (k == GSX_CONST) {
        fs->c *= a;
    } else if (k == GSX_MUL && fs->n + 2 <= MAX_FACTORS) {
        factor_add(g, (graph_sx)a, fs);
        factor_add(g, (graph_sx)b, fs);
    } else if (fs->n < MAX_FACTORS) {
        fs->f[fs->n++] = s;
    } else {
        fs->partial = true;
    }
}

static void factors_of(const graph *g, int n, const graph_sx *shape, int skip, factors *fs) {
    fs->c = 1;
    fs->partial = false;
    fs->n = 0;
    for (int d = 0; d < n; d++)
        if (d != skip)
            factor_add(g, shape[d], fs);
}

/* Remove from `from` one copy of each factor of `what`; false if one is missing. */
static bool factors_cancel(factors *from, const factors *what) {
    for (int i = 0; i < what->n; i++) {
        int j = 0;
        while (j < from->n && from->f[j] != what->f[i])
            j++;
        if (j == from->n)
            return false;
        from->f[j] = from->f[--from->n];
    }
    return true;
}

static graph_sx product(graph *g, int n, const graph_sx *shape, int skip) {
    graph_sx p = cai_graph_sx_const(g, 1);
    for (int d = 0; d < n && p >= 0; d++)
        if (d != skip)
            p = cai_graph_sx_op(g, GSX_MUL, p, shape[d]);
    return p;
}

/* The size of the -1 dim: the input's factors left after cancelling the known target
 * dims, or numel / known when they do not cancel. */
static graph_sx reshape_infer(graph *g, const graph_node *x, const graph_op_args *a, int infer) {
    factors in, known;
    factors_of(g, x->ndim, x->shape, -1, &in);
    factors_of(g, a->n_shape, a->shape, infer, &known);
    factors rest = in;
    char s1[SHAPE_STR];
    if (known.c == 0)
        return cai_graph_fail(g, "reshape: -1 is ambiguous next to a size 0 in target %s",
                              cai_graph_shape_str(g, a->n_shape, a->shape, s1, sizeof s1));
    if (!in.partial && !known.partial && factors_cancel(&rest, &known) && rest.c % known.c == 0) {
        graph_sx p = cai_graph_sx_const(g, rest.c / known.c);
        for (int i = 0; i < rest.n && p >= 0; i++)
            p = cai_graph_sx_op(g, GSX_MUL, p, rest.f[i]);
        return p;
    }
    graph_sx num = product(g, x->ndim, x->shape, -1);
    graph_sx den = num < 0 ? -1 : product(g, a->n_shape, a->shape, infer);
    return den < 0 ? -1 : cai_graph_sx_op(g, GSX_DIV, num, den);
}

static int infer_reshape(graph *g, graph_node *n) {
    const graph_node *x = in_node(g, n, 0);
    graph_op_args *a = &n->a;
    if (check_shape_attr(g, a, true))
        return -1;
    int64_t x64[KERN_MAX_DIMS], t64[KERN_MAX_DIMS];
    to64(x->ndim, x->shape, x64);
    for (int d = 0; d < a->n_shape; d++) /* the id -1 or the constant -1: infer */
        t64[d] = sx_infer(g, a->shape[d]) ? -1 : a->shape[d];
    cai_sizes z = sizes_of(g);
    cai_rule_error e;
    int infer;
    if (cai_rule_reshape(&z, "reshape", x->ndim, x64, a->n_shape, t64, &infer, &e))
        return rule_fail(g, &e);
    if (infer >= 0 && t64[infer] >= 0) { /* every size constant: the rule resolved it */
        a->shape[infer] = (graph_sx)t64[infer];
    } else if (infer >= 0) {
        graph_sx s = reshape_infer(g, x, a, infer);
        if (s < 0)
            return -1;
        a->shape[infer] = s;
    }
    /* Symbolic sizes whose products cannot be proven equal (a flattened batch B*T is its
     * own symbol) are accepted: the forward's view guaranteed them, the cache guards their
     * values, and the runner checks the element counts on every run. */
    set_out(n, x->dtype, a->n_shape, a->shape);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Views and copies
 */
static int infer_permute(graph *g, graph_node *n) {
    const graph_node *x = in_node(g, n, 0);
    graph_op_args *a = &n->a;
    int64_t x64[KERN_MAX_DIMS], perm[KERN_MAX_DIMS], r[KERN_MAX_DIMS];
    to64(x->ndim, x->shape, x64);
    int np = a->n_perm >= 0 && a->n_perm <= KERN_MAX_DIMS ? a->n_perm : 0;
    for (int i = 0; i < np; i++)
        perm[i] = (int64_t)a->perm[i]; /* may be negative: the rule normalises it */
    cai_sizes z = sizes_of(g);
    cai_rule_error e;
    if (cai_rule_permute(&z, x->ndim, x64, a->n_perm, perm, r, &e))
        return rule_fail(g, &e);
    graph_sx shape[KERN_MAX_DIMS];
    for (int i = 0; i < np; i++)
        a->perm[i] = (int8_t)perm[i];
    to_sx(x->ndim, r, shape);
    set_out(n, x->dtype, x->ndim, shape);
    return 0;
}

static int infer_unsqueeze(graph *g, graph_node *n) {
    const graph_node *x = in_node(g, n, 0);
    int64_t x64[KERN_MAX_DIMS], r[KERN_MAX_DIMS];
    to64(x->ndim, x->shape, x64);
    cai_sizes z = sizes_of(g);
    cai_rule_error e;
    if (cai_rule_unsqueeze(&z, x->ndim, x64, &n->a.i[0], r, &e))
        return rule_fail(g, &e);
    graph_sx shape[KERN_MAX_DIMS];
    to_sx(x->ndim + 1, r, shape);
    set_out(n, x->dtype, x->ndim + 1, shape);
    return 0;
}

/* Check canonical slice args i[0..3] against a shape of nd dims; the length into *len. */
static int slice_check(graph *g, const char *op, int64_t *i, int nd, const graph_sx *shape,
                       graph_sx *len) {
    *len = -1;
    if (nd == 0)
        return cai_graph_fail(g, "%s: a 0-d value cannot be sliced", op);
    if (norm_dim(g, op, &i[0], nd))
        return -1;
    int64_t start = i[1], end = i[2], step = i[3], size;
    if (step <= 0 || start < 0 || end < start)
        return cai_graph_fail(g,
                              "%s: slice %lld:%lld:%lld is not canonical; expected 0 <= start <= "
                              "end and step > 0",
                              op, (long long)start, (long long)end, (long long)step);
    if (cai_graph_sx_const_value(g, shape[i[0]], &size) && end > size)
        return cai_graph_fail(g, "%s: slice end %lld is past the end of dim %lld (size %lld)", op,
                              (long long)end, (long long)i[0], (long long)size);
    *len = cai_graph_sx_const(g, cai_rule_slice_len(start, end, step));
    return *len < 0 ? -1 : 0;
}

static int infer_slice(graph *g, graph_node *n) {
    const graph_node *x = in_node(g, n, 0);
    graph_sx len, shape[KERN_MAX_DIMS];
    if (slice_check(g, "slice", n->a.i, x->ndim, x->shape, &len))
        return -1;
    memcpy(shape, x->shape, sizeof shape);
    shape[n->a.i[0]] = len;
    set_out(n, x->dtype, x->ndim, shape);
    return 0;
}

static int infer_slice_backward(graph *g, graph_node *n) {
    const graph_node *x = in_node(g, n, 0);
    graph_op_args *a = &n->a;
    graph_sx len;
    if (check_shape_attr(g, a, false) ||
        slice_check(g, "slice_backward", a->i, a->n_shape, a->shape, &len))
        return -1;
    int64_t g64[KERN_MAX_DIMS], f64[KERN_MAX_DIMS];
    to64(x->ndim, x->shape, g64);
    to64(a->n_shape, a->shape, f64);
    cai_sizes z = sizes_of(g);
    cai_rule_error e;
    if (cai_rule_slice_backward(&z, x->ndim, g64, a->n_shape, f64, a->i, &e))
        return rule_fail(g, &e);
    set_out(n, x->dtype, a->n_shape, a->shape);
    return 0;
}

static int infer_same(graph *g, graph_node *n) {
    copy_out(n, in_node(g, n, 0));
    return 0;
}

static int infer_cast(graph *g, graph_node *n) {
    if ((unsigned)n->a.dtype > KERN_I64)
        return cai_graph_fail(g, "cast: dtype %d is not a kern_dtype", (int)n->a.dtype);
    const graph_node *x = in_node(g, n, 0);
    set_out(n, n->a.dtype, x->ndim, x->shape);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * matmul
 */
static int infer_matmul(graph *g, graph_node *n) {
    const graph_node *x = in_node(g, n, 0), *y = in_node(g, n, 1);
    if (x->dtype == KERN_I64 || x->dtype != y->dtype)
        return cai_graph_fail(g, "matmul: expected two f32 or two f64 operands, got %s and %s",
                              dtype_name(x->dtype), dtype_name(y->dtype));
    n->a.i[0] = n->a.i[0] != 0;
    n->a.i[1] = n->a.i[1] != 0;
    int64_t a64[KERN_MAX_DIMS], b64[KERN_MAX_DIMS], r[KERN_MAX_DIMS];
    to64(x->ndim, x->shape, a64);
    to64(y->ndim, y->shape, b64);
    cai_sizes z = sizes_of(g);
    cai_rule_error e;
    int nd = 0;
    if (cai_rule_matmul(&z, "matmul", x->ndim, a64, n->a.i[0], y->ndim, b64, n->a.i[1], true, &nd,
                        r, &e))
        return rule_fail(g, &e);
    graph_sx shape[KERN_MAX_DIMS];
    to_sx(nd, r, shape);
    set_out(n, x->dtype, nd, shape);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * index_add, scatter_add, nll backward
 */
static int need_index(graph *g, const char *op, const char *what, const graph_node *x) {
    if (x->dtype == KERN_I64)
        return 0;
    return cai_graph_fail(g, "%s: %s must be i64, got %s", op, what, dtype_name(x->dtype));
}

/* index_add and scatter_add: (index, src) into zeros of the shape attribute. */
typedef int (*scatter_rule)(const cai_sizes *z, kern_dtype idx_dt, int ni, const int64_t *idx,
                            int ns, const int64_t *src, int nf, const int64_t *full, int64_t *dim,
                            cai_rule_error *e);

static int infer_scatter(graph *g, graph_node *n, scatter_rule rule) {
    const graph_node *idx = in_node(g, n, 0), *src = in_node(g, n, 1);
    graph_op_args *a = &n->a;
    if (check_shape_attr(g, a, false))
        return -1;
    int64_t i64[KERN_MAX_DIMS], s64[KERN_MAX_DIMS], f64[KERN_MAX_DIMS];
    to64(idx->ndim, idx->shape, i64);
    to64(src->ndim, src->shape, s64);
    to64(a->n_shape, a->shape, f64);
    cai_sizes z = sizes_of(g);
    cai_rule_error e;
    if (rule(&z, idx->dtype, idx->ndim, i64, src->ndim, s64, a->n_shape, f64, &a->i[0], &e))
        return rule_fail(g, &e);
    set_out(n, src->dtype, a->n_shape, a->shape);
    return 0;
}

static int nll_check_target(graph *g, const graph_op_args *a, const graph_node *t) {
    int64_t x64[KERN_MAX_DIMS], t64[KERN_MAX_DIMS];
    to64(a->n_shape, a->shape, x64);
    to64(t->ndim, t->shape, t64);
    cai_sizes z = sizes_of(g);
    cai_rule_error e;
    return cai_rule_nll_target(&z, "nll_bw", a->n_shape, x64, t->ndim, t64, &e) ? rule_fail(g, &e)
                                                                                : 0;
}

static int infer_scale_size(graph *g, graph_node *n) {
    const graph_node *x = in_node(g, n, 0);
    if (n->a.n_shape != 1)
        return cai_graph_fail(g, "scale_size: needs exactly one size expression (N), got %d",
                              n->a.n_shape);
    if (x->dtype == KERN_I64)
        return cai_graph_fail(g, "scale_size: needs a float input, got int64");
    n->a.i[0] = n->a.i[0] != 0; /* 1: multiply by N instead of dividing */
    set_out(n, x->dtype, x->ndim, x->shape);
    return 0;
}

static int infer_nll_bw(graph *g, graph_node *n) {
    const graph_node *gr = in_node(g, n, 0), *t = in_node(g, n, 1), *tw = in_node(g, n, 2);
    graph_op_args *a = &n->a;
    char s1[SHAPE_STR], s2[SHAPE_STR];
    if (gr->dtype == KERN_I64)
        return cai_graph_fail(g, "nll_bw: the gradient must be f32 or f64, got i64");
    if (a->i[0] < GRAPH_REDUCTION_NONE || a->i[0] > GRAPH_REDUCTION_SUM)
        return cai_graph_fail(g, "nll_bw: reduction %lld is not none (0), mean (1) or sum (2)",
                              (long long)a->i[0]);
    if (check_shape_attr(g, a, false) || need_index(g, "nll_bw", "the target", t))
        return -1;
    if (a->n_shape < 1)
        return cai_graph_fail(g, "nll_bw: the input shape must have 1 to %d dims, got 0",
                              KERN_MAX_DIMS);
    if (nll_check_target(g, a, t))
        return -1;
    if (tw->dtype != gr->dtype)
        return cai_graph_fail(g, "nll_bw: total_weight is %s but the gradient is %s",
                              dtype_name(tw->dtype), dtype_name(gr->dtype));
    bool per_elem = a->i[0] == GRAPH_REDUCTION_NONE;
    bool fits = per_elem ? gr->ndim == t->ndim : gr->ndim == 0;
    for (int d = 0; per_elem && fits && d < gr->ndim; d++)
        fits = cai_graph_sx_same(g, gr->shape[d], t->shape[d]);
    if (!fits)
        return cai_graph_fail(g, "nll_bw: gradient %s does not fit target %s for reduction %lld",
                              shape_of(g, gr, s1), shape_of(g, t, s2), (long long)a->i[0]);
    set_out(n, gr->dtype, a->n_shape, a->shape);
    return 0;
}

/* index_fill(x, index): x with value p[0] at the index along dim i[0] */
static int infer_index_fill(graph *g, graph_node *n) {
    const graph_node *x = in_node(g, n, 0), *idx = in_node(g, n, 1);
    cai_sizes z = sizes_of(g);
    cai_rule_error e;
    if (cai_rule_index_fill(&z, idx->dtype, idx->ndim, x->ndim, &n->a.i[0], &e))
        return rule_fail(g, &e);
    copy_out(n, x);
    return 0;
}

/* cumsum(x) along i[0]: x's dtype and shape */
static int infer_cumsum(graph *g, graph_node *n) {
    const graph_node *x = in_node(g, n, 0);
    cai_rule_error e;
    if (cai_rule_dim(&n->a.i[0], x->ndim, "cumsum", &e))
        return rule_fail(g, &e);
    n->a.i[1] = n->a.i[1] != 0;
    copy_out(n, x);
    return 0;
}

/* cumprod_backward(x, y, g) along i[0]: three values of one dtype and shape */
static int infer_cumprod_bw(graph *g, graph_node *n) {
    const graph_node *x = in_node(g, n, 0);
    cai_sizes z = sizes_of(g);
    char s1[SHAPE_STR], s2[SHAPE_STR];
    for (int k = 1; k < 3; k++) {
        const graph_node *o = in_node(g, n, k);
        bool same = o->dtype == x->dtype && o->ndim == x->ndim;
        for (int d = 0; same && d < x->ndim; d++)
            same =
                o->shape[d] == x->shape[d] || (z.same && z.same(z.ctx, o->shape[d], x->shape[d]));
        if (!same)
            return cai_graph_fail(g, "cumprod_backward: input %d %s does not match the input %s", k,
                                  shape_of(g, o, s1), shape_of(g, x, s2));
    }
    cai_rule_error e;
    if (cai_rule_dim(&n->a.i[0], x->ndim, "cumprod_backward", &e))
        return rule_fail(g, &e);
    copy_out(n, x);
    return 0;
}

_Static_assert(GRAPH_CONV_NPARAMS == CAI_CONV_NPARAMS, "conv2d's parameter counts differ");

/* im2col(x) and col2im(cols) into the shape attribute: conv2d's unfold and fold */
static int infer_conv(graph *g, graph_node *n) {
    const graph_node *x = in_node(g, n, 0);
    graph_op_args *a = &n->a;
    int64_t p[CAI_CONV_NPARAMS], x64[KERN_MAX_DIMS], f64[KERN_MAX_DIMS], out[4];
    const char *op = cai_graph_op_name(a->op);
    if (x->dtype == KERN_I64)
        return cai_graph_fail(g, "%s: needs a float input, got i64", op);
    cai_graph_conv_unpack(a->i, p);
    to64(x->ndim, x->shape, x64);
    cai_sizes z = sizes_of(g);
    cai_rule_error e;
    graph_sx o[4];
    if (a->op == GOP_IM2COL) {
        if (cai_rule_im2col(&z, op, x->ndim, x64, p, a->i[3], out, NULL, &e))
            return rule_fail(g, &e);
        cai_conv_cols_shape(cai_graph_conv_layout(a->i), out);
        to_sx(4, out, o);
        set_out(n, x->dtype, 4, o);
        return 0;
    }
    if (check_shape_attr(g, a, false))
        return -1;
    to64(a->n_shape, a->shape, f64);
    if (cai_rule_col2im(&z, x->ndim, x64, a->n_shape, f64, p, a->i[3], &e))
        return rule_fail(g, &e);
    set_out(n, x->dtype, a->n_shape, a->shape);
    return 0;
}

/* conv2d(x, w): [N, O, OH, OW], OH and OW by im2col's rule. conv2d_weight_grad(g, x): its
 * shape attribute, the weight's, for which x must be a valid input. (The op-table rows
 * check the channel counts on concrete sizes; here they may be symbolic.) */
static int infer_conv2d(graph *g, graph_node *n) {
    bool fwd = n->a.op == GOP_CONV2D;
    const graph_node *x = in_node(g, n, fwd ? 0 : 1), *other = in_node(g, n, fwd ? 1 : 0);
    graph_op_args *a = &n->a;
    const char *op = cai_graph_op_name(a->op);
    if (x->dtype == KERN_I64 || other->dtype != x->dtype || x->ndim != 4 || other->ndim != 4)
        return cai_graph_fail(g, "%s: needs 4-D float operands of one dtype", op);
    if (cai_graph_conv_layout(a->i) & ~(int64_t)CAI_CONV_COLS_FLIP)
        return cai_graph_fail(g, "%s: unknown tap order %lld", op,
                              (long long)cai_graph_conv_layout(a->i));
    int64_t p[CAI_CONV_NPARAMS], x64[4], cols[4], ohw[2];
    cai_graph_conv_unpack(a->i, p);
    to64(4, x->shape, x64);
    cai_sizes z = sizes_of(g);
    cai_rule_error e;
    if (cai_rule_im2col(&z, op, 4, x64, p, a->i[3], cols, ohw, &e))
        return rule_fail(g, &e);
    if (!fwd) {
        if (check_shape_attr(g, a, false))
            return -1;
        set_out(n, x->dtype, a->n_shape, a->shape);
        return 0;
    }
    int64_t out[4] = {x64[0], 0, ohw[0], ohw[1]};
    graph_sx o[4];
    to_sx(4, out, o);
    o[1] = other->shape[0];
    set_out(n, x->dtype, 4, o);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Call-outs
 */
static int infer_callout(graph *g, graph_node *n) {
    const graph_node *x = in_node(g, n, 0);
    const char *op = cai_graph_op_name(n->a.op);
    if (n->a.i[0] < 0 || (n->a.op == GOP_POST_HOOK && n->a.i[1] < 0))
        return cai_graph_fail(g, "%s: numbers must be >= 0, got %lld", op,
                              (long long)(n->a.i[0] < 0 ? n->a.i[0] : n->a.i[1]));
    if (n->a.op == GOP_POST_HOOK && x->a.i[0] != n->a.i[0])
        return cai_graph_fail(
            g,
            "post_accumulate_hook: leaf %lld does not match its accumulate_grad's "
            "leaf %lld",
            (long long)n->a.i[0], (long long)x->a.i[0]);
    for (int v = 0; n->a.op == GOP_OUTPUT && v < cai_graph_count(g); v++) {
        const graph_node *o = cai_graph_node_at(g, v);
        if (o->a.op == GOP_OUTPUT && !o->dead && o->a.i[0] == n->a.i[0])
            return cai_graph_fail(g, "output: output %lld is already value %d",
                                  (long long)n->a.i[0], v);
    }
    copy_out(n, x);
    return 0;
}

/* A custom function's call-out: its numbers, and a result's given dtype and shape. */
static int infer_opaque(graph *g, graph_node *n) {
    const char *op = cai_graph_op_name(n->a.op);
    if (n->a.i[0] < 0 || n->a.i[1] < 0)
        return cai_graph_fail(g, "%s: numbers must be >= 0, got %lld and %lld", op,
                              (long long)n->a.i[0], (long long)n->a.i[1]);
    if (n->a.op == GOP_CALLOUT_ARG) {
        copy_out(n, in_node(g, n, 0));
        return 0;
    }
    if (n->a.op == GOP_CALLOUT) {
        set_out(n, KERN_F32, 0, NULL);
        return 0;
    }
    if ((unsigned)n->a.dtype > KERN_I64)
        return cai_graph_fail(g, "%s: dtype %d is not a kern_dtype", op, (int)n->a.dtype);
    if (check_shape_attr(g, &n->a, false))
        return -1;
    set_out(n, n->a.dtype, n->a.n_shape, n->a.shape);
    return 0;
}

int cai_graph_infer(graph *g, graph_node *n) {
    graph_op_args *a = &n->a;
    if ((unsigned)a->op >= GOP__COUNT)
        return cai_graph_fail(g, "cai_graph_add: op %d is not a graph_op", (int)a->op);
    if (a->op == GOP_PW && (uint64_t)a->i[0] >= KPW__COUNT)
        return cai_graph_fail(g, "pw: %lld is not a kern_pw_op", (long long)a->i[0]);
    int n_in = op_n_in(a);
    if (check_inputs(g, a, n_in))
        return -1;
    if (a->n_perm < 0 || a->n_perm > KERN_MAX_DIMS)
        return cai_graph_fail(g, "%s: the permutation has %d entries", cai_graph_op_name(a->op),
                              a->n_perm);
    if (cai_graph_op_uses_shape(a->op) && (a->n_shape < 0 || a->n_shape > KERN_MAX_DIMS))
        return cai_graph_fail(g, "%s: the shape has %d dims; graphs support 0 to %d",
                              cai_graph_op_name(a->op), a->n_shape, KERN_MAX_DIMS);
    canon_unused(a, n_in);
    switch (a->op) {
    case GOP_INPUT: return infer_input(g, n);
    case GOP_PW: return infer_pw(g, n);
    case GOP_SUM: return infer_sum(g, n);
    case GOP_SUM_TO: return infer_sum_to(g, n);
    case GOP_EXPAND: return infer_expand(g, n);
    case GOP_RESHAPE: return infer_reshape(g, n);
    case GOP_PERMUTE: return infer_permute(g, n);
    case GOP_UNSQUEEZE: return infer_unsqueeze(g, n);
    case GOP_SLICE: return infer_slice(g, n);
    case GOP_SLICE_BACKWARD: return infer_slice_backward(g, n);
    case GOP_CONTIGUOUS: return infer_same(g, n);
    case GOP_MATMUL: return infer_matmul(g, n);
    case GOP_INDEX_ADD: return infer_scatter(g, n, cai_rule_index_add);
    case GOP_SCATTER_ADD: return infer_scatter(g, n, cai_rule_scatter_add);
    case GOP_CAST: return infer_cast(g, n);
    case GOP_NLL_BW: return infer_nll_bw(g, n);
    case GOP_SCALE_SIZE: return infer_scale_size(g, n);
    case GOP_CALLOUT_ARG:
    case GOP_CALLOUT:
    case GOP_CALLOUT_RESULT: return infer_opaque(g, n);
    case GOP_INDEX_FILL: return infer_index_fill(g, n);
    case GOP_CUMSUM: return infer_cumsum(g, n);
    case GOP_CUMPROD_BW: return infer_cumprod_bw(g, n);
    case GOP_IM2COL:
    case GOP_COL2IM: return infer_conv(g, n);
    case GOP_CONV2D:
    case GOP_CONV2D_WEIGHT_GRAD: return infer_conv2d(g, n);
    default: return infer_callout(g, n);
    }
}
