/* shape.c - shape inference for cai_graph_add: per op, check the inputs the way the eager
 * op's shape rule does, canonicalise the args, and compute the output's dtype and
 * symbolic shape.
 *
 * Sizes are size expressions, compared by id. A constant 1 broadcasts; a symbol is never
 * taken to be 1, so it meets only itself or a constant 1, which keeps the graph right for
 * any value >= 1 of the symbol (the compiled-autograd cache never binds one to 0).
 * Anything not provably right is an error that names the dims, so the tracer can fall back
 * instead of running a graph that might be wrong. The index, scatter, nll, scan and
 * convolution ops are inferred in shape_ops.c, with the helpers here (cai_shape_*).
 */
#include "graph/internal.h"
#include "graph/shape_rules.h"

#include <string.h>

const char *cai_shape_dtype_name(kern_dtype dt) {
    return dt == KERN_F32    ? "f32"
           : dt == KERN_F64  ? "f64"
           : dt == KERN_I64  ? "i64"
           : dt == KERN_BOOL ? "b8"
                             : "?";
}

const char *cai_shape_str(const graph *g, const graph_node *n, char *buf) {
    return cai_graph_shape_str(g, n->ndim, n->shape, buf, GRAPH_SHAPE_STR);
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

cai_sizes cai_shape_sizes(graph *g) {
    return (cai_sizes){.ctx = g,
                       .value = sizes_value,
                       .same = sizes_same,
                       .constant = sizes_constant,
                       .shape_str = sizes_shape_str,
                       .size_str = sizes_size_str,
                       .dtype_name = cai_shape_dtype_name,
                       .convert = "a cast",
                       .arith = sizes_arith};
}

/* A failed shared rule as this graph's error. */
int cai_shape_rule_fail(graph *g, const cai_rule_error *e) {
    if (e->status == CAI_RULE_NOMEM)
        return cai_graph_fail_nomem(g, "a size expression");
    return cai_graph_fail(g, "%s", e->msg);
}

void cai_shape_to64(int n, const graph_sx *s, int64_t *out) {
    for (int d = 0; d < n; d++)
        out[d] = s[d];
}

void cai_shape_to_sx(int n, const int64_t *s, graph_sx *out) {
    for (int d = 0; d < n; d++)
        out[d] = (graph_sx)s[d];
}

static int norm_dim(graph *g, const char *op, int64_t *dim, int ndim) {
    cai_rule_error e;
    return cai_rule_dim(dim, ndim, op, &e) ? cai_shape_rule_fail(g, &e) : 0;
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
    if (a->op != GOP_INPUT && a->op != GOP_CAST && a->op != GOP_CALLOUT_RESULT &&
        a->op != GOP_ZEROS)
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

int cai_shape_check_attr(graph *g, const graph_op_args *a, bool allow_infer) {
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

const graph_node *cai_shape_in(const graph *g, const graph_node *n, int k) {
    return cai_graph_node_at(g, n->a.in[k]);
}

void cai_shape_set_out(graph_node *n, kern_dtype dt, int ndim, const graph_sx *shape) {
    n->dtype = dt;
    n->ndim = ndim;
    if (ndim > 0)
        memmove(n->shape, shape, sizeof(graph_sx) * (size_t)ndim);
}

void cai_shape_copy_out(graph_node *n, const graph_node *in) {
    cai_shape_set_out(n, in->dtype, in->ndim, in->shape);
}

/* ---------------------------------------------------------------------------------------
 * Broadcasting
 */
/* out = broadcast of (na, a) and (nb, b); out may alias a. */
static int bcast(graph *g, const char *op, int na, const graph_sx *a, int nb, const graph_sx *b,
                 int *nout, graph_sx *out) {
    int64_t a64[KERN_MAX_DIMS], b64[KERN_MAX_DIMS], r[KERN_MAX_DIMS];
    cai_shape_to64(na, a, a64);
    cai_shape_to64(nb, b, b64);
    cai_sizes z = cai_shape_sizes(g);
    cai_rule_error e;
    if (cai_rule_broadcast(&z, op, na, a64, nb, b64, nout, r, &e))
        return cai_shape_rule_fail(g, &e);
    cai_shape_to_sx(*nout, r, out);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Per-op rules
 */
static int infer_input(graph *g, graph_node *n) {
    graph_op_args *a = &n->a;
    if (a->i[0] < 0)
        return cai_graph_fail(g, "getitem: input number %lld is negative", (long long)a->i[0]);
    if ((unsigned)a->dtype > KERN_BOOL)
        return cai_graph_fail(g, "getitem: dtype %d is not a kern_dtype", (int)a->dtype);
    if (cai_shape_check_attr(g, a, false))
        return -1;
    for (int v = 0; v < cai_graph_count(g); v++) {
        const graph_node *o = cai_graph_node_at(g, v);
        if (o->a.op == GOP_INPUT && o->a.i[0] == a->i[0])
            return cai_graph_fail(g, "getitem: input %lld is already value %d", (long long)a->i[0],
                                  v);
    }
    cai_shape_set_out(n, a->dtype, a->n_shape, a->shape);
    return 0;
}

static int infer_zeros(graph *g, graph_node *n) {
    if ((unsigned)n->a.dtype > KERN_BOOL)
        return cai_graph_fail(g, "zeros: dtype %d is not a kern_dtype", (int)n->a.dtype);
    if (cai_shape_check_attr(g, &n->a, false))
        return -1;
    cai_shape_set_out(n, n->a.dtype, n->a.n_shape, n->a.shape);
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
        dts[i] = cai_shape_in(g, n, i)->dtype;
    cai_sizes z = cai_shape_sizes(g);
    cai_rule_error e;
    if (cai_rule_pointwise_dtype(&z, op, k, n->a.n_in, dts, &dt, &e))
        return cai_shape_rule_fail(g, &e);
    int nd = 0;
    graph_sx shape[KERN_MAX_DIMS];
    for (int i = 0; i < n->a.n_in; i++) {
        const graph_node *x = cai_shape_in(g, n, i);
        if (bcast(g, op, nd, shape, x->ndim, x->shape, &nd, shape))
            return -1;
    }
    cai_shape_set_out(n, dt, nd, shape);
    return 0;
}

static int infer_sum(graph *g, graph_node *n) {
    const graph_node *x = cai_shape_in(g, n, 0);
    uint64_t mask = (uint64_t)n->a.i[0];
    if (n->a.i[0] < 0 || (mask >> x->ndim) != 0)
        return cai_graph_fail(g, "sum: dim mask 0x%llx names dims a %d-D value does not have",
                              (unsigned long long)mask, x->ndim);
    n->a.i[1] = n->a.i[1] != 0;
    int64_t x64[KERN_MAX_DIMS], r[KERN_MAX_DIMS];
    cai_shape_to64(x->ndim, x->shape, x64);
    cai_sizes z = cai_shape_sizes(g);
    int nd = cai_rule_reduced_shape(&z, x->ndim, x64, (uint32_t)mask, n->a.i[1], r);
    if (nd < 0)
        return cai_graph_fail_nomem(g, "a size expression");
    graph_sx shape[KERN_MAX_DIMS];
    cai_shape_to_sx(nd, r, shape);
    cai_shape_set_out(n, x->dtype, nd, shape);
    return 0;
}

static int infer_sum_to(graph *g, graph_node *n) {
    const graph_node *x = cai_shape_in(g, n, 0);
    const graph_op_args *a = &n->a;
    if (cai_shape_check_attr(g, a, false))
        return -1;
    int64_t x64[KERN_MAX_DIMS], t64[KERN_MAX_DIMS];
    cai_shape_to64(x->ndim, x->shape, x64);
    cai_shape_to64(a->n_shape, a->shape, t64);
    cai_sizes z = cai_shape_sizes(g);
    cai_rule_error e;
    if (cai_rule_sum_to(&z, x->ndim, x64, a->n_shape, t64, &e))
        return cai_shape_rule_fail(g, &e);
    cai_shape_set_out(n, x->dtype, a->n_shape, a->shape);
    return 0;
}

static int infer_expand(graph *g, graph_node *n) {
    const graph_node *x = cai_shape_in(g, n, 0);
    graph_op_args *a = &n->a;
    if (cai_shape_check_attr(g, a, true))
        return -1;
    int64_t x64[KERN_MAX_DIMS], t64[KERN_MAX_DIMS];
    cai_shape_to64(x->ndim, x->shape, x64);
    cai_shape_to64(a->n_shape, a->shape, t64);
    for (int d = 0; d < a->n_shape; d++) /* the constant -1 asks to infer, as the id -1 */
        t64[d] = sx_infer(g, a->shape[d]) ? -1 : t64[d];
    cai_sizes z = cai_shape_sizes(g);
    cai_rule_error e;
    if (cai_rule_expand(&z, x->ndim, x64, a->n_shape, t64, &e))
        return cai_shape_rule_fail(g, &e);
    cai_shape_to_sx(a->n_shape, t64, a->shape);
    cai_shape_set_out(n, x->dtype, a->n_shape, a->shape);
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
    char s1[GRAPH_SHAPE_STR];
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
    const graph_node *x = cai_shape_in(g, n, 0);
    graph_op_args *a = &n->a;
    if (cai_shape_check_attr(g, a, true))
        return -1;
    int64_t x64[KERN_MAX_DIMS], t64[KERN_MAX_DIMS];
    cai_shape_to64(x->ndim, x->shape, x64);
    for (int d = 0; d < a->n_shape; d++) /* the id -1 or the constant -1: infer */
        t64[d] = sx_infer(g, a->shape[d]) ? -1 : a->shape[d];
    cai_sizes z = cai_shape_sizes(g);
    cai_rule_error e;
    int infer;
    if (cai_rule_reshape(&z, "reshape", x->ndim, x64, a->n_shape, t64, &infer, &e))
        return cai_shape_rule_fail(g, &e);
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
    cai_shape_set_out(n, x->dtype, a->n_shape, a->shape);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Views and copies
 */
static int infer_permute(graph *g, graph_node *n) {
    const graph_node *x = cai_shape_in(g, n, 0);
    graph_op_args *a = &n->a;
    int64_t x64[KERN_MAX_DIMS], perm[KERN_MAX_DIMS], r[KERN_MAX_DIMS];
    cai_shape_to64(x->ndim, x->shape, x64);
    int np = a->n_perm >= 0 && a->n_perm <= KERN_MAX_DIMS ? a->n_perm : 0;
    for (int i = 0; i < np; i++)
        perm[i] = (int64_t)a->perm[i]; /* may be negative: the rule normalises it */
    cai_sizes z = cai_shape_sizes(g);
    cai_rule_error e;
    if (cai_rule_permute(&z, x->ndim, x64, a->n_perm, perm, r, &e))
        return cai_shape_rule_fail(g, &e);
    graph_sx shape[KERN_MAX_DIMS];
    for (int i = 0; i < np; i++)
        a->perm[i] = (int8_t)perm[i];
    cai_shape_to_sx(x->ndim, r, shape);
    cai_shape_set_out(n, x->dtype, x->ndim, shape);
    return 0;
}

static int infer_unsqueeze(graph *g, graph_node *n) {
    const graph_node *x = cai_shape_in(g, n, 0);
    int64_t x64[KERN_MAX_DIMS], r[KERN_MAX_DIMS];
    cai_shape_to64(x->ndim, x->shape, x64);
    cai_sizes z = cai_shape_sizes(g);
    cai_rule_error e;
    if (cai_rule_unsqueeze(&z, x->ndim, x64, &n->a.i[0], r, &e))
        return cai_shape_rule_fail(g, &e);
    graph_sx shape[KERN_MAX_DIMS];
    cai_shape_to_sx(x->ndim + 1, r, shape);
    cai_shape_set_out(n, x->dtype, x->ndim + 1, shape);
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
    const graph_node *x = cai_shape_in(g, n, 0);
    graph_sx len, shape[KERN_MAX_DIMS];
    if (slice_check(g, "slice", n->a.i, x->ndim, x->shape, &len))
        return -1;
    memcpy(shape, x->shape, sizeof shape);
    shape[n->a.i[0]] = len;
    cai_shape_set_out(n, x->dtype, x->ndim, shape);
    return 0;
}

/* narrow: dim i[0] becomes shape[1] (the length) long; start and length are checked here
 * where they are numbers, at run time where they are symbolic. */
static int infer_narrow(graph *g, graph_node *n) {
    const graph_node *x = cai_shape_in(g, n, 0);
    int64_t start, len, size;
    if (x->ndim == 0)
        return cai_graph_fail(g, "narrow: a 0-d value cannot be narrowed");
    if (norm_dim(g, "narrow", &n->a.i[0], x->ndim))
        return -1;
    if (n->a.n_shape != 2 || cai_shape_check_attr(g, &n->a, false))
        return cai_graph_fail(g, "narrow: expects {start, length} as its shape attribute");
    int d = (int)n->a.i[0];
    if (cai_graph_sx_const_value(g, n->a.shape[0], &start) &&
        cai_graph_sx_const_value(g, n->a.shape[1], &len) &&
        cai_graph_sx_const_value(g, x->shape[d], &size) &&
        (start < 0 || len < 0 || start + len > size)) {
        long long end = (long long)start + (long long)len;
        return cai_graph_fail(g, "narrow: %lld:%lld is past the end of dim %d (size %lld)",
                              (long long)start, end, d, (long long)size);
    }
    graph_sx shape[KERN_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[d] = n->a.shape[1];
    cai_shape_set_out(n, x->dtype, x->ndim, shape);
    return 0;
}

/* slice_backward's start and end are size expressions: where they and x's length along the
 * dim are numbers the length is checked here, else at run time. */
static int infer_slice_backward(graph *g, graph_node *n) {
    const graph_node *x = cai_shape_in(g, n, 0);
    graph_op_args *a = &n->a;
    if (cai_shape_check_attr(g, a, false))
        return -1;
    if (a->n_shape == 0)
        return cai_graph_fail(g, "slice_backward: a 0-d value cannot be sliced");
    if (norm_dim(g, "slice_backward", &a->i[0], a->n_shape))
        return -1;
    int d = (int)a->i[0];
    int64_t start, end, len, size;
    bool numbers = cai_graph_sx_const_value(g, (graph_sx)a->i[1], &start) &&
                   cai_graph_sx_const_value(g, (graph_sx)a->i[2], &end);
    if (a->i[3] <= 0 || (numbers && (start < 0 || end < start)))
        return cai_graph_fail(g, "slice_backward: the slice is not canonical; expected 0 <= start "
                                 "<= end and step > 0");
    if (numbers && cai_graph_sx_const_value(g, a->shape[d], &size) && end > size)
        return cai_graph_fail(g,
                              "slice_backward: slice end %lld is past the end of dim %d (size "
                              "%lld)",
                              (long long)end, d, (long long)size);
    graph_sx expect = x->ndim > d ? x->shape[d] : -1; /* g's own length: checked at run time */
    if (numbers && x->ndim > d && cai_graph_sx_const_value(g, x->shape[d], &len))
        expect = cai_graph_sx_const(g, cai_rule_slice_len(start, end, a->i[3]));
    int64_t g64[KERN_MAX_DIMS], f64[KERN_MAX_DIMS];
    cai_shape_to64(x->ndim, x->shape, g64);
    cai_shape_to64(a->n_shape, a->shape, f64);
    cai_sizes z = cai_shape_sizes(g);
    cai_rule_error e;
    if (cai_rule_slice_backward(&z, x->ndim, g64, a->n_shape, f64, d, expect, &e))
        return cai_shape_rule_fail(g, &e);
    cai_shape_set_out(n, x->dtype, a->n_shape, a->shape);
    return 0;
}

static int infer_same(graph *g, graph_node *n) {
    cai_shape_copy_out(n, cai_shape_in(g, n, 0));
    return 0;
}

static int infer_cast(graph *g, graph_node *n) {
    if ((unsigned)n->a.dtype > KERN_BOOL)
        return cai_graph_fail(g, "cast: dtype %d is not a kern_dtype", (int)n->a.dtype);
    const graph_node *x = cai_shape_in(g, n, 0);
    cai_shape_set_out(n, n->a.dtype, x->ndim, x->shape);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * matmul
 */
static int infer_matmul(graph *g, graph_node *n) {
    const graph_node *x = cai_shape_in(g, n, 0), *y = cai_shape_in(g, n, 1);
    if (x->dtype == KERN_I64 || x->dtype != y->dtype)
        return cai_graph_fail(g, "matmul: expected two f32 or two f64 operands, got %s and %s",
                              cai_shape_dtype_name(x->dtype), cai_shape_dtype_name(y->dtype));
    n->a.i[0] = n->a.i[0] != 0;
    n->a.i[1] = n->a.i[1] != 0;
    int64_t a64[KERN_MAX_DIMS], b64[KERN_MAX_DIMS], r[KERN_MAX_DIMS];
    cai_shape_to64(x->ndim, x->shape, a64);
    cai_shape_to64(y->ndim, y->shape, b64);
    cai_sizes z = cai_shape_sizes(g);
    cai_rule_error e;
    int nd = 0;
    if (cai_rule_matmul(&z, "matmul", x->ndim, a64, n->a.i[0], y->ndim, b64, n->a.i[1], true, &nd,
                        r, &e))
        return cai_shape_rule_fail(g, &e);
    graph_sx shape[KERN_MAX_DIMS];
    cai_shape_to_sx(nd, r, shape);
    cai_shape_set_out(n, x->dtype, nd, shape);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Call-outs
 */
static int infer_callout(graph *g, graph_node *n) {
    const graph_node *x = cai_shape_in(g, n, 0);
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
    cai_shape_copy_out(n, x);
    return 0;
}

/* A custom function's call-out: its numbers, and a result's given dtype and shape. */
static int infer_opaque(graph *g, graph_node *n) {
    const char *op = cai_graph_op_name(n->a.op);
    if (n->a.i[0] < 0 || n->a.i[1] < 0)
        return cai_graph_fail(g, "%s: numbers must be >= 0, got %lld and %lld", op,
                              (long long)n->a.i[0], (long long)n->a.i[1]);
    if (n->a.op == GOP_CALLOUT_ARG) {
        cai_shape_copy_out(n, cai_shape_in(g, n, 0));
        return 0;
    }
    if (n->a.op == GOP_CALLOUT) {
        cai_shape_set_out(n, KERN_F32, 0, NULL);
        return 0;
    }
    if ((unsigned)n->a.dtype > KERN_BOOL)
        return cai_graph_fail(g, "%s: dtype %d is not a kern_dtype", op, (int)n->a.dtype);
    if (cai_shape_check_attr(g, &n->a, false))
        return -1;
    cai_shape_set_out(n, n->a.dtype, n->a.n_shape, n->a.shape);
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
    case GOP_NARROW: return infer_narrow(g, n);
    case GOP_SLICE_BACKWARD: return infer_slice_backward(g, n);
    case GOP_CONTIGUOUS: return infer_same(g, n);
    case GOP_ZEROS: return infer_zeros(g, n);
    case GOP_MATMUL: return infer_matmul(g, n);
    case GOP_INDEX_ADD: return cai_shape_infer_index_add(g, n);
    case GOP_SCATTER_ADD: return cai_shape_infer_scatter_add(g, n);
    case GOP_INDEX_SELECT: return cai_shape_infer_index_select(g, n);
    case GOP_GATHER: return cai_shape_infer_gather(g, n);
    case GOP_CAST: return infer_cast(g, n);
    case GOP_NLL_BW: return cai_shape_infer_nll_bw(g, n);
    case GOP_SCALE_SIZE: return cai_shape_infer_scale_size(g, n);
    case GOP_CALLOUT_ARG:
    case GOP_CALLOUT:
    case GOP_CALLOUT_RESULT: return infer_opaque(g, n);
    case GOP_INDEX_FILL: return cai_shape_infer_index_fill(g, n);
    case GOP_CUMSUM: return cai_shape_infer_cumsum(g, n);
    case GOP_TRI: return cai_shape_infer_tri(g, n);
    case GOP_CUMPROD: return cai_shape_infer_cumprod(g, n);
    case GOP_CUMPROD_BW: return cai_shape_infer_cumprod_bw(g, n);
    case GOP_IM2COL:
    case GOP_COL2IM: return cai_shape_infer_conv(g, n);
    case GOP_CONV2D:
    case GOP_CONV2D_WEIGHT_GRAD: return cai_shape_infer_conv2d(g, n);
    default: return infer_callout(g, n);
    }
}
