/* shape_rules.c - the shape rules shared by the eager ops and the graph (shape_rules.h).
 *
 * Each rule is written against cai_sizes, never against a number: a size compares equal
 * by id, and "is it 1" or "print it" go through the algebra, so the same code proves a
 * symbolic graph right and checks an eager call.
 */
#include "graph/shape_rules.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define STR 160

static int fail(cai_rule_error *e, cai_rule_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(cai_rule_error *e, cai_rule_status st, const char *fmt, ...) {
    e->status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static int nomem(cai_rule_error *e, const char *op) {
    return fail(e, CAI_RULE_NOMEM, "%s: out of memory for a size expression", op);
}

static bool is_one(const cai_sizes *z, int64_t s) {
    int64_t v;
    return z->value(z->ctx, s, &v) && v == 1;
}

/* a and b are the same size: equal ids, or the algebra says so. */
static bool eq(const cai_sizes *z, int64_t a, int64_t b) {
    return a == b || (z->same && z->same(z->ctx, a, b));
}

static bool eq_n(const cai_sizes *z, int n, const int64_t *a, const int64_t *b) {
    for (int i = 0; i < n; i++)
        if (!eq(z, a[i], b[i]))
            return false;
    return true;
}

/* The size 1; -1 when out of memory. */
static int64_t one(const cai_sizes *z) {
    return z->constant(z->ctx, 1);
}

/* ---------------------------------------------------------------------------------------
 * Concrete sizes
 */
static bool concrete_value(const void *ctx, int64_t s, int64_t *v) {
    (void)ctx;
    if (v)
        *v = s;
    return true;
}

static int64_t concrete_constant(void *ctx, int64_t v) {
    (void)ctx;
    return v;
}

static const char *concrete_shape_str(const void *ctx, int n, const int64_t *shape, char *buf,
                                      size_t size) {
    (void)ctx;
    size_t o = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < n && o < size; d++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (o < size)
        snprintf(buf + o, size - o, "]");
    return buf;
}

static const char *concrete_size_str(const void *ctx, int64_t s, char *buf, size_t size) {
    (void)ctx;
    snprintf(buf, size, "%lld", (long long)s);
    return buf;
}

static const char *concrete_dtype_name(kern_dtype dt) {
    return dt == KERN_F32    ? "float32"
           : dt == KERN_F64  ? "float64"
           : dt == KERN_I64  ? "int64"
           : dt == KERN_BOOL ? "bool"
                             : "?";
}

static int64_t concrete_arith(void *ctx, cai_size_op op, int64_t a, int64_t b) {
    (void)ctx;
    switch (op) {
    case CAI_SIZE_ADD: return a + b;
    case CAI_SIZE_MUL: return a * b;
    default: return b != 0 ? a / b : -1;
    }
}

const cai_sizes cai_sizes_concrete = {
    .ctx = NULL,
    .value = concrete_value,
    .constant = concrete_constant,
    .shape_str = concrete_shape_str,
    .size_str = concrete_size_str,
    .dtype_name = concrete_dtype_name,
    .convert = "ca_to_dtype",
    .arith = concrete_arith,
};

/* ---------------------------------------------------------------------------------------
 * Dims and broadcasting
 */
int cai_rule_dim(int64_t *dim, int ndim, const char *op, cai_rule_error *e) {
    int64_t n = ndim > 0 ? ndim : 1; /* a 0-d value accepts dim 0 and -1, as PyTorch */
    if (*dim < -n || *dim >= n)
        return fail(e, CAI_RULE_DIM,
                    "%s: dim %lld is out of range for a tensor with %d dims (expected a dim in "
                    "[%lld, %lld])",
                    op, (long long)*dim, ndim, (long long)-n, (long long)(n - 1));
    if (*dim < 0)
        *dim += n;
    return 0;
}

int cai_rule_broadcast(const cai_sizes *z, const char *op, int na, const int64_t *a, int nb,
                       const int64_t *b, int *nout, int64_t *out, cai_rule_error *e) {
    int nd = na > nb ? na : nb;
    int64_t r[KERN_MAX_DIMS] = {0}, unit = one(z);
    if (unit < 0)
        return nomem(e, op);
    for (int i = 0; i < nd; i++) {
        int da = na - nd + i, db = nb - nd + i;
        int64_t sa = da >= 0 ? a[da] : unit, sb = db >= 0 ? b[db] : unit;
        if (!eq(z, sa, sb) && !is_one(z, sa) && !is_one(z, sb)) {
            char s1[STR], s2[STR], s3[STR], s4[STR];
            return fail(e, CAI_RULE_SHAPE,
                        "%s: shapes %s and %s cannot be broadcast together (dim %d: %s vs %s); "
                        "sizes must match or be 1",
                        op, z->shape_str(z->ctx, na, a, s1, STR),
                        z->shape_str(z->ctx, nb, b, s2, STR), i - nd,
                        z->size_str(z->ctx, sa, s3, STR), z->size_str(z->ctx, sb, s4, STR));
        }
        r[i] = is_one(z, sa) ? sb : sa;
    }
    *nout = nd;
    if (nd > 0)
        memcpy(out, r, sizeof(int64_t) * (size_t)nd);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Pointwise dtypes
 */
int cai_rule_pointwise_dtype(const cai_sizes *z, const char *op, kern_pw_op k, int n,
                             const kern_dtype *dt, kern_dtype *out, cai_rule_error *e) {
    int cond = cai_kern_pw_cond_input(k), first = cond == 0 ? 1 : 0;
    kern_dtype r = dt[first];
    for (int i = 0; i < n; i++)
        if (i != cond && dt[i] != r)
            return fail(e, CAI_RULE_DTYPE,
                        "%s: inputs have different dtypes (%s and %s); convert one with %s", op,
                        z->dtype_name(r), z->dtype_name(dt[i]), z->convert);
    if (!cai_kern_pw_supports(k, r))
        return fail(e, CAI_RULE_DTYPE,
                    "%s: %s inputs are not supported; convert them to a float dtype with %s "
                    "first",
                    op, z->dtype_name(r), z->convert);
    *out = r;
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Reductions
 */
int cai_rule_reduced_shape(const cai_sizes *z, int nx, const int64_t *x, uint32_t mask,
                           bool keepdim, int64_t *out) {
    int64_t unit = keepdim ? one(z) : 1;
    if (unit < 0)
        return -1;
    int nd = 0;
    for (int d = 0; d < nx; d++) {
        if (!(mask & (1u << d)))
            out[nd++] = x[d];
        else if (keepdim)
            out[nd++] = unit;
    }
    return nd;
}

int cai_rule_sum_to(const cai_sizes *z, int nx, const int64_t *x, int nt, const int64_t *t,
                    cai_rule_error *e) {
    bool ok = nt >= 0 && nt <= nx;
    for (int k = 0; ok && k < nt; k++)
        ok = eq(z, t[k], x[nx - nt + k]) || is_one(z, t[k]);
    if (ok)
        return 0;
    char s1[STR], s2[STR];
    return fail(e, CAI_RULE_SHAPE,
                "sum_to: a value of shape %s cannot be summed to shape %s; the target must "
                "broadcast to the value's shape",
                z->shape_str(z->ctx, nx, x, s1, STR),
                z->shape_str(z->ctx, nt > 0 ? nt : 0, t, s2, STR));
}

/* ---------------------------------------------------------------------------------------
 * Views
 */
static bool is_infer(const cai_sizes *z, int64_t s) {
    int64_t v;
    return s == -1 || (z->value(z->ctx, s, &v) && v == -1);
}

int cai_rule_expand(const cai_sizes *z, int nx, const int64_t *x, int nt, int64_t *t,
                    cai_rule_error *e) {
    char s1[STR], s2[STR], s3[STR], s4[STR];
    int64_t given[KERN_MAX_DIMS] = {0};
    if (nt > 0 && nt <= KERN_MAX_DIMS)
        memcpy(given, t, sizeof(int64_t) * (size_t)nt);
    if (nt < nx || nt > KERN_MAX_DIMS)
        return fail(e, CAI_RULE_SHAPE,
                    "expand: the target %s has %d dims but the input of shape %s has %d; give at "
                    "least as many sizes as input dims",
                    z->shape_str(z->ctx, nt > 0 && nt <= KERN_MAX_DIMS ? nt : 0, given, s1, STR),
                    nt, z->shape_str(z->ctx, nx, x, s2, STR), nx);
    int lead = nt - nx;
    for (int i = 0; i < nt; i++) {
        int64_t xs = i >= lead ? x[i - lead] : -1, v;
        bool negative = z->value(z->ctx, t[i], &v) && v < 0;
        /* torch's messages, word for word (its tests match them) */
        if (i < lead && (negative || is_infer(z, t[i])))
            return fail(e, CAI_RULE_SHAPE,
                        "The expanded size of the tensor (%s) isn't allowed in a leading, "
                        "non-existing dimension %d",
                        z->size_str(z->ctx, given[i], s1, STR), i);
        if (is_infer(z, t[i]))
            t[i] = xs;
        negative = z->value(z->ctx, t[i], &v) && v < 0;
        if (negative || (i >= lead && !eq(z, xs, t[i]) && !is_one(z, xs)))
            return fail(e, CAI_RULE_SHAPE,
                        "The expanded size of the tensor (%s) must match the existing size (%s) "
                        "at non-singleton dimension %d.  Target sizes: %s.  Tensor sizes: %s",
                        z->size_str(z->ctx, given[i], s2, STR), z->size_str(z->ctx, xs, s1, STR), i,
                        z->shape_str(z->ctx, nt, given, s4, STR),
                        z->shape_str(z->ctx, nx, x, s3, STR));
    }
    return 0;
}

int cai_rule_permute(const cai_sizes *z, int nx, const int64_t *x, int n, int64_t *perm,
                     int64_t *out, cai_rule_error *e) {
    char s1[STR];
    if (n != nx)
        return fail(e, CAI_RULE_DIM,
                    "permute: the permutation has %d entries but the input of shape %s has %d "
                    "dims; give one entry per dim",
                    n, z->shape_str(z->ctx, nx, x, s1, STR), nx);
    bool seen[KERN_MAX_DIMS] = {false};
    for (int i = 0; i < n; i++) {
        if (cai_rule_dim(&perm[i], nx, "permute", e))
            return -1;
        if (seen[perm[i]])
            return fail(e, CAI_RULE_DIM,
                        "permute: dim %lld appears twice in the permutation; each dim must "
                        "appear exactly once",
                        (long long)perm[i]);
        seen[perm[i]] = true;
        out[i] = x[perm[i]];
    }
    return 0;
}

int cai_rule_unsqueeze(const cai_sizes *z, int nx, const int64_t *x, int64_t *dim, int64_t *out,
                       cai_rule_error *e) {
    char s1[STR];
    if (nx >= KERN_MAX_DIMS)
        return fail(e, CAI_RULE_DIM,
                    "unsqueeze: the input of shape %s already has %d dims, the most cagrad "
                    "supports",
                    z->shape_str(z->ctx, nx, x, s1, STR), nx);
    if (cai_rule_dim(dim, nx + 1, "unsqueeze", e))
        return -1;
    int64_t unit = one(z);
    if (unit < 0)
        return nomem(e, "unsqueeze");
    for (int i = 0, j = 0; i <= nx; i++)
        out[i] = i == *dim ? unit : x[j++];
    return 0;
}

int64_t cai_rule_slice_len(int64_t start, int64_t end, int64_t step) {
    return end > start ? (end - start + step - 1) / step : 0;
}

int cai_rule_slice_backward(const cai_sizes *z, int ng, const int64_t *g, int nf,
                            const int64_t *full, int dim, int64_t len, cai_rule_error *e) {
    int64_t expect[KERN_MAX_DIMS];
    if (nf > 0)
        memcpy(expect, full, sizeof(int64_t) * (size_t)nf);
    expect[dim] = len;
    if (ng == nf && eq_n(z, nf, g, expect))
        return 0;
    char s1[STR], s2[STR], s3[STR];
    return fail(e, CAI_RULE_SHAPE,
                "slice_backward: the gradient has shape %s but the slice of %s along dim %lld "
                "has shape %s",
                z->shape_str(z->ctx, ng, g, s1, STR), z->shape_str(z->ctx, nf, full, s2, STR),
                (long long)dim, z->shape_str(z->ctx, nf, expect, s3, STR));
}

static bool all_constant(const cai_sizes *z, int n, const int64_t *s, int skip, int64_t *prod) {
    int64_t p = 1, v;
    for (int d = 0; d < n; d++) {
        if (d == skip)
            continue;
        if (!z->value(z->ctx, s[d], &v))
            return false;
        p *= v;
    }
    *prod = p;
    return true;
}

int cai_rule_reshape(const cai_sizes *z, const char *op, int nx, const int64_t *x, int nt,
                     int64_t *t, int *infer, cai_rule_error *e) {
    char s1[STR], s2[STR];
    *infer = -1;
    for (int d = 0; d < nt; d++) {
        int64_t v;
        if (is_infer(z, t[d])) {
            if (*infer >= 0)
                return fail(e, CAI_RULE_SHAPE,
                            "%s: only one dimension can be inferred, but target %s has -1 at dims "
                            "%d and %d; give the other sizes",
                            op, z->shape_str(z->ctx, nt, t, s1, STR), *infer, d);
            *infer = d;
        } else if (z->value(z->ctx, t[d], &v) && v < 0) {
            return fail(e, CAI_RULE_SHAPE,
                        "%s: invalid size %lld at dim %d of target %s; sizes must be >= 0 (or -1 "
                        "to infer one)",
                        op, (long long)v, d, z->shape_str(z->ctx, nt, t, s1, STR));
        }
    }
    int64_t numel, known;
    if (!all_constant(z, nx, x, -1, &numel) || !all_constant(z, nt, t, *infer, &known))
        return 0; /* symbolic: the caller reasons about the products */
    bool ok = *infer >= 0 ? known != 0 && numel % known == 0 : known == numel;
    if (!ok)
        return fail(e, CAI_RULE_SHAPE,
                    "%s: shape %s is invalid for an input of shape %s (%lld elements); the target "
                    "must have the same number of elements%s",
                    op, z->shape_str(z->ctx, nt, t, s1, STR), z->shape_str(z->ctx, nx, x, s2, STR),
                    (long long)numel,
                    *infer >= 0 && known == 0 ? " and -1 is ambiguous next to a size 0" : "");
    if (*infer >= 0 && (t[*infer] = z->constant(z->ctx, numel / known)) < 0)
        return nomem(e, op);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * matmul
 */
int cai_rule_matmul(const cai_sizes *z, const char *op, int na, const int64_t *a, bool ta, int nb,
                    const int64_t *b, bool tb, bool broadcast, int *nout, int64_t *out,
                    cai_rule_error *e) {
    char s1[STR], s2[STR], s3[STR], s4[STR];
    if (na < 2 || nb < 2)
        return fail(e, CAI_RULE_SHAPE,
                    "%s: both operands need at least 2 dims, got shapes %s and %s", op,
                    z->shape_str(z->ctx, na, a, s1, STR), z->shape_str(z->ctx, nb, b, s2, STR));
    int64_t m = a[na - (ta ? 1 : 2)], ka = a[na - (ta ? 2 : 1)];
    int64_t kb = b[nb - (tb ? 1 : 2)], n = b[nb - (tb ? 2 : 1)];
    if (!eq(z, ka, kb))
        return fail(e, CAI_RULE_SHAPE,
                    "%s: inner dims do not match: a %s%s and b %s%s (%s vs %s); a's columns must "
                    "equal b's rows",
                    op, z->shape_str(z->ctx, na, a, s1, STR), ta ? " (transposed)" : "",
                    z->shape_str(z->ctx, nb, b, s2, STR), tb ? " (transposed)" : "",
                    z->size_str(z->ctx, ka, s3, STR), z->size_str(z->ctx, kb, s4, STR));
    int ba = na - 2, bb = nb - 2, nd = ba > bb ? ba : bb;
    int64_t unit = one(z);
    if (unit < 0)
        return nomem(e, op);
    for (int i = 0; i < nd; i++) {
        int da = i - (nd - ba), db = i - (nd - bb);
        int64_t sa = da >= 0 ? a[da] : unit, sb = db >= 0 ? b[db] : unit;
        bool fits = eq(z, sa, sb) || (broadcast && (is_one(z, sa) || is_one(z, sb)));
        if (!fits)
            return fail(e, CAI_RULE_SHAPE,
                        "%s: batch dims of a %s and b %s do not %s (batch dim %d: %s vs %s)", op,
                        z->shape_str(z->ctx, na, a, s1, STR), z->shape_str(z->ctx, nb, b, s2, STR),
                        broadcast ? "broadcast; sizes must match or be 1" : "match", i,
                        z->size_str(z->ctx, sa, s3, STR), z->size_str(z->ctx, sb, s4, STR));
        out[i] = is_one(z, sa) ? sb : sa;
    }
    out[nd] = m;
    out[nd + 1] = n;
    *nout = nd + 2;
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Index scatters and nll's target
 */
static int need_int64_index(const cai_sizes *z, const char *op, kern_dtype dt, cai_rule_error *e) {
    if (dt == KERN_I64)
        return 0;
    return fail(e, CAI_RULE_DTYPE, "%s: the index tensor must be %s, got %s; convert it with %s",
                op, z->dtype_name(KERN_I64), z->dtype_name(dt), z->convert);
}

int cai_rule_index_add(const cai_sizes *z, kern_dtype idx_dt, int ni, const int64_t *idx, int ns,
                       const int64_t *src, int nf, const int64_t *full, int64_t *dim,
                       cai_rule_error *e) {
    char s1[STR], s2[STR], s3[STR], s4[STR];
    if (need_int64_index(z, "index_add", idx_dt, e))
        return -1;
    if (ni > 1)
        return fail(e, CAI_RULE_SHAPE, "index_add: the index must be 0-D or 1-D, got shape %s",
                    z->shape_str(z->ctx, ni, idx, s1, STR));
    if (cai_rule_dim(dim, nf, "index_add", e))
        return -1;
    int64_t n_idx = ni == 1 ? idx[0] : one(z), expect[KERN_MAX_DIMS];
    if (n_idx < 0)
        return nomem(e, "index_add");
    if (nf > 0)
        memcpy(expect, full, sizeof(int64_t) * (size_t)nf);
    if (nf > 0)
        expect[*dim] = n_idx;
    bool ok = ns == nf && eq_n(z, nf, src, expect) && (nf > 0 || is_one(z, n_idx));
    if (ok)
        return 0;
    return fail(e, CAI_RULE_SHAPE,
                "index_add: src has shape %s but the index of shape %s along dim %lld of %s needs "
                "shape %s",
                z->shape_str(z->ctx, ns, src, s1, STR), z->shape_str(z->ctx, ni, idx, s2, STR),
                (long long)*dim, z->shape_str(z->ctx, nf, full, s3, STR),
                z->shape_str(z->ctx, nf, expect, s4, STR));
}

int cai_rule_scatter_add(const cai_sizes *z, kern_dtype idx_dt, int ni, const int64_t *idx, int ns,
                         const int64_t *src, int nf, const int64_t *full, int64_t *dim,
                         cai_rule_error *e) {
    char s1[STR], s2[STR];
    if (need_int64_index(z, "scatter_add", idx_dt, e))
        return -1;
    if (ni != ns || !eq_n(z, ni, idx, src))
        return fail(e, CAI_RULE_SHAPE,
                    "scatter_add: src has shape %s but index has shape %s; they must match",
                    z->shape_str(z->ctx, ns, src, s1, STR), z->shape_str(z->ctx, ni, idx, s2, STR));
    if (ni != nf)
        return fail(e, CAI_RULE_SHAPE,
                    "scatter_add: index of shape %s must have as many dims as the output %s",
                    z->shape_str(z->ctx, ni, idx, s1, STR),
                    z->shape_str(z->ctx, nf, full, s2, STR));
    if (cai_rule_dim(dim, nf, "scatter_add", e))
        return -1;
    for (int d = 0; d < nf; d++) {
        int64_t vi, vf;
        if (d != *dim && z->value(z->ctx, idx[d], &vi) && z->value(z->ctx, full[d], &vf) && vi > vf)
            return fail(e, CAI_RULE_SHAPE,
                        "scatter_add: index shape %s is larger than the output %s at dim %d",
                        z->shape_str(z->ctx, ni, idx, s1, STR),
                        z->shape_str(z->ctx, nf, full, s2, STR), d);
    }
    return 0;
}

int cai_rule_nll_target(const cai_sizes *z, const char *op, int nx, const int64_t *x, int nt,
                        const int64_t *t, cai_rule_error *e) {
    bool ok = nx >= 1 && nt == (nx >= 2 ? nx - 1 : 0);
    if (ok && nx >= 2) {
        ok = eq(z, t[0], x[0]);
        for (int d = 2; d < nx; d++)
            ok = ok && eq(z, t[d - 1], x[d]);
    }
    if (ok)
        return 0;
    char s1[STR], s2[STR];
    return fail(e, CAI_RULE_SHAPE,
                "%s: input %s and target %s do not fit; expected input [N, C, d...] with target "
                "[N, d...], or input [C] with a 0-d target",
                op, z->shape_str(z->ctx, nx, x, s1, STR), z->shape_str(z->ctx, nt, t, s2, STR));
}

/* ---------------------------------------------------------------------------------------
 * index_fill, and conv2d's im2col and col2im
 */
int cai_rule_index_fill(const cai_sizes *z, kern_dtype idx_dt, int ni, int nx, int64_t *dim,
                        cai_rule_error *e) {
    if (need_int64_index(z, "index_fill", idx_dt, e))
        return -1;
    if (ni > 1)
        return fail(e, CAI_RULE_SHAPE,
                    "index_fill: Index has to be a vector/scalar (0-D or 1-D), got %d dims", ni);
    return cai_rule_dim(dim, nx, "index_fill", e);
}

/* One spatial output size: (in + pads - d(k-1) - 1) / s + 1 (pads: both sides' padding
 * together), a number when the input size
 * is one, else an expression (the division truncates: a floor, as the size is not
 * negative). -1 (e set) when out of memory. */
static int64_t conv_out(const cai_sizes *z, const char *op, int64_t in, int64_t k, int64_t s,
                        int64_t p, int64_t d, cai_rule_error *e) {
    int64_t v;
    if (z->value(z->ctx, in, &v)) {
        int64_t o = cai_kern_conv_out_size(v, k, s, p, d);
        int64_t c = o > 0 ? z->constant(z->ctx, o) : 0;
        return c < 0 ? nomem(e, op) : c;
    }
    int64_t c = z->constant(z->ctx, p - d * (k - 1) - 1), sc = z->constant(z->ctx, s);
    int64_t one_ = one(z);
    int64_t o = c < 0 || sc < 0 || one_ < 0 ? -1 : z->arith(z->ctx, CAI_SIZE_ADD, in, c);
    o = o < 0 ? -1 : z->arith(z->ctx, CAI_SIZE_DIV, o, sc);
    o = o < 0 ? -1 : z->arith(z->ctx, CAI_SIZE_ADD, o, one_);
    return o < 0 ? nomem(e, op) : o;
}

const char *cai_conv_param_kind(int k) {
    switch (k) {
    case CAI_CONV_KH:
    case CAI_CONV_KW: return "kernel size";
    case CAI_CONV_SH:
    case CAI_CONV_SW: return "stride";
    case CAI_CONV_DH:
    case CAI_CONV_DW: return "dilation";
    default: return "padding";
    }
}

void cai_conv_cols_perm(int64_t layout, int *perm) {
    static const int perms[CAI_CONV_COLS__COUNT][4] = {{0, 1, 2, 3}, {1, 2, 0, 3}};
    memcpy(perm, perms[cai_conv_cols_order(layout)], sizeof perms[0]);
}

void cai_conv_cols_shape(int64_t layout, int64_t *shape) {
    int perm[4];
    int64_t ngkl[4];
    memcpy(ngkl, shape, sizeof ngkl);
    cai_conv_cols_perm(layout, perm);
    for (int d = 0; d < 4; d++)
        shape[d] = ngkl[perm[d]];
}

int cai_rule_im2col(const cai_sizes *z, const char *op, int nx, const int64_t *x, const int64_t *p,
                    int64_t groups, int64_t *out, int64_t *ohw, cai_rule_error *e) {
    char s1[STR];
    if (nx != 4)
        return fail(e, CAI_RULE_SHAPE, "%s: expected a 4-D input [N, C, H, W], got shape %s", op,
                    z->shape_str(z->ctx, nx, x, s1, STR));
    for (int k = 0; k < CAI_CONV_NPARAMS; k++) {
        bool pad = cai_conv_param_kind(k)[0] == 'p';
        if (p[k] < (pad ? 0 : 1) || p[k] > INT32_MAX)
            return fail(e, CAI_RULE_SHAPE, "%s: %s %lld is out of range", op,
                        cai_conv_param_kind(k), (long long)p[k]);
    }
    if (groups < 1)
        return fail(e, CAI_RULE_SHAPE, "%s: non-positive groups is not supported", op);
    int64_t c, kk = p[CAI_CONV_KH] * p[CAI_CONV_KW], cg;
    if (z->value(z->ctx, x[1], &c)) {
        if (c % groups != 0)
            return fail(e, CAI_RULE_SHAPE, "%s: %lld channels do not split into %lld groups", op,
                        (long long)c, (long long)groups);
        cg = z->constant(z->ctx, c / groups * kk);
    } else {
        int64_t gs = z->constant(z->ctx, groups), ks = z->constant(z->ctx, kk);
        cg = gs < 0 || ks < 0 ? -1 : z->arith(z->ctx, CAI_SIZE_DIV, x[1], gs);
        cg = cg < 0 ? -1 : z->arith(z->ctx, CAI_SIZE_MUL, cg, ks);
    }
    if (cg < 0)
        return nomem(e, op);
    int64_t pads_h = p[CAI_CONV_PH] + p[CAI_CONV_PH_END],
            pads_w = p[CAI_CONV_PW] + p[CAI_CONV_PW_END];
    int64_t oh = conv_out(z, op, x[2], p[CAI_CONV_KH], p[CAI_CONV_SH], pads_h, p[CAI_CONV_DH], e);
    if (oh < 0)
        return -1;
    int64_t ow = conv_out(z, op, x[3], p[CAI_CONV_KW], p[CAI_CONV_SW], pads_w, p[CAI_CONV_DW], e);
    if (ow < 0)
        return -1;
    int64_t vh, vw;
    if ((z->value(z->ctx, oh, &vh) && vh == 0) || (z->value(z->ctx, ow, &vw) && vw == 0)) {
        int64_t h = 0, w = 0;
        z->value(z->ctx, x[2], &h);
        z->value(z->ctx, x[3], &w);
        int64_t ph = h + pads_h, pw = w + pads_w;
        int64_t kh = p[CAI_CONV_DH] * (p[CAI_CONV_KH] - 1) + 1;
        int64_t kw = p[CAI_CONV_DW] * (p[CAI_CONV_KW] - 1) + 1;
        return fail(e, CAI_RULE_SHAPE,
                    "Calculated padded input size per channel: (%lld x %lld). Kernel size: "
                    "(%lld x %lld). Kernel size can't be greater than actual input size",
                    (long long)ph, (long long)pw, (long long)kh, (long long)kw);
    }
    int64_t l = z->arith(z->ctx, CAI_SIZE_MUL, oh, ow), g = z->constant(z->ctx, groups);
    if (l < 0 || g < 0)
        return nomem(e, op);
    out[0] = x[0];
    out[1] = g;
    out[2] = cg;
    out[3] = l;
    if (ohw) {
        ohw[0] = oh;
        ohw[1] = ow;
    }
    return 0;
}

int cai_rule_col2im(const cai_sizes *z, int nc, const int64_t *cols, int nf, const int64_t *full,
                    const int64_t *p, int64_t groups, cai_rule_error *e) {
    int64_t expect[4] = {0, 0, 0, 0};
    char s1[STR], s2[STR], s3[STR];
    if (cai_rule_im2col(z, "col2im", nf, full, p, groups, expect, NULL, e))
        return -1;
    /* N and groups must be the same sizes; K and L too, unless one of them is symbolic
     * (then the runner checks them: products of symbolic sizes are not always provably
     * equal) */
    bool ok = nc == 4 && cols[0] == expect[0] && cols[1] == expect[1];
    for (int d = 2; ok && d < 4; d++) {
        int64_t a, b;
        ok = cols[d] == expect[d] ||
             !(z->value(z->ctx, cols[d], &a) && z->value(z->ctx, expect[d], &b));
    }
    if (ok)
        return 0;
    return fail(e, CAI_RULE_SHAPE,
                "col2im: columns of shape %s do not fit the output %s (%s expected)",
                z->shape_str(z->ctx, nc, cols, s1, STR), z->shape_str(z->ctx, nf, full, s2, STR),
                z->shape_str(z->ctx, 4, expect, s3, STR));
}
