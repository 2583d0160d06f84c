/* test_compiled_random.c - suite `compiled_random`: a random-DAG differential test of the
 * compiled backward against the eager one.
 *
 * A seeded generator builds small random graphs: random ops from a broad set (pointwise,
 * reductions, softmax, views, matmul/linear, layer_norm, cat/stack, indexing, losses,
 * dropout, dtype casts), random shapes with broadcasting, fan-in (values reused, several
 * terms in the loss), tensor hooks that scale or keep the gradient, retain_grad, graph
 * breaks, in-place ops (on a fresh copy, or through a view of it: the base is rebased), views
 * (transpose, permute, slice, narrow, select, expand, reshape, squeeze,
 * unsqueeze), and leaves that are contiguous, non-contiguous or expanded, some requiring
 * grad. Shapes are written over symbolic sizes, so each graph is built again with other
 * sizes (same structure): that second variant goes through the cache's shape guards and a
 * recompile with dynamic dims. Every fourth graph uses dynamic=true, every fourth uses
 * ca_grad instead of ca_backward.
 *
 * For each graph and size variant: build, eager backward; build again, compiled backward;
 * (first variant) build again, compiled backward on the cached entry. The hook call counts
 * and any error must agree, and so must the gradients of every leaf and the retained
 * gradients: float64 ones within 1e-12 (relative to 1 + |eager|); float32 ones are judged
 * by a float64 oracle, the same graph built in float64 from the same rounded values and
 * run eagerly: compiled's error against it may be at most 8x eager float32's own error,
 * or 16 float32 ulps of the graph's gradient scale (judge_by_oracle). (A float32 graph
 * with dropout, whose masks are drawn per dtype, has no oracle: within 1e-5 of eager.)
 *
 * Every compiled backward must really run compiled (a capture or a cache hit), or the
 * comparison would be eager against eager: any eager fallback fails and names the seed,
 * the graph index and the trace's reason.
 *
 * CI runs 1000 graphs in under a second (20000 take about 5 s). A longer campaign, which
 * also prints its counts of captures, hits and fallbacks:
 *     CAGRAD_RANDOM_GRAPHS=200000 ./build/cagrad_tests --filter compiled_random/differential \
 *         --verbose
 * CAGRAD_RANDOM_SEED=S changes the base seed (default 20240611). A failure names the seed
 * and the graph index; CAGRAD_RANDOM_FIRST=i (with CAGRAD_RANDOM_GRAPHS=1) replays graph i
 * alone (the campaign-wide counts are checked from 64 graphs on).
 */
#include "autograd/internal.h"
#include "graph/internal.h"
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_GRAPHS 1000
#define DEFAULT_SEED   20240611ull
#define NSYM           4  /* table sizes are symbols 1..NSYM; 0 is a literal 1 */
#define MAX_VALS       40 /* values of one graph */
#define MAX_KEEP       96 /* tensors one build holds */
#define MAX_LEAVES     16
#define MAX_ND         4

/* ---------------------------------------------------------------------------------------
 * Generator
 */
typedef struct {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int rnd(rng *r, int n) {
    return (int)(rng_next(r) % (uint64_t)n);
}

static bool chance(rng *r, int percent) {
    return rnd(r, 100) < percent;
}

static double normal(rng *r) {
    double u1 = ((double)(rng_next(r) >> 11) + 1.0) * 0x1.0p-53;
    double u2 = (double)(rng_next(r) >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---------------------------------------------------------------------------------------
 * One build of one graph
 */
typedef struct {
    ca_tensor *t;
    int nd;
    int sym[MAX_ND]; /* 0: a literal 1; 1..NSYM: the size table; above: a fresh size */
} val;

typedef struct {
    rng r; /* structure: the same for every build of the graph */
    rng v; /* values: the same for builds of one size variant */
    int64_t size[NSYM + 1];
    int next_fresh;
    ca_dtype dt;
    ca_dtype src_dt; /* the graph's own dtype: dt unless this is its float64 oracle */
    val vals[MAX_VALS];
    int n;
    ca_tensor *keep[MAX_KEEP]; /* released at the end */
    int n_keep;
    ca_tensor *leaves[MAX_LEAVES]; /* leaves that require grad, in creation order */
    int n_leaves;
    ca_tensor *retained[4];
    int n_retained;
    char trace[768]; /* the ops, for failure messages */
    size_t trace_len;
    const char *what; /* seed/graph/variant, for failure messages */
} build;

static int hook_calls;
/* Building a graph's float64 oracle: every dtype float64, values rounded as the graph's. */
static bool oracle_build;
static const double hook_scales[] = {2.0, -1.0, 0.5, 1.0}; /* 1.0: keep the gradient */

static ca_status scale_hook(ca_tensor *grad, ca_tensor **repl, void *ctx) {
    hook_calls++;
    double s = *(const double *)ctx;
    return s == 1.0 ? CA_OK : ca_mul_scalar(grad, s, repl);
}

static void note(build *b, const char *op) {
    if (b->trace_len < sizeof b->trace - 1)
        b->trace_len += (size_t)snprintf(b->trace + b->trace_len, sizeof b->trace - b->trace_len,
                                         "%s%s", b->trace_len ? " " : "", op);
}

static ca_tensor *keep(build *b, ca_tensor *t) {
    cr_assert(b->n_keep < MAX_KEEP, "%s: too many tensors", b->what);
    b->keep[b->n_keep++] = t;
    return t;
}

#define RELEASE(...)                                                                               \
    tu_release_n((ca_tensor *[]){__VA_ARGS__},                                                     \
                 (int)(sizeof((ca_tensor *[]){__VA_ARGS__}) / sizeof(ca_tensor *)))

/* Check an op's status: the generator only makes valid calls. */
#define OK(b, expr)                                                                                \
    do {                                                                                           \
        ca_status st_ = (expr);                                                                    \
        cr_assert_eq(st_, CA_OK, "%s: forward %s failed: %s [ops: %s]", (b)->what, #expr,          \
                     ca_last_error(), (b)->trace);                                                 \
    } while (0)

static int fresh(build *b) {
    return NSYM + 1 + b->next_fresh++;
}

static void push(build *b, ca_tensor *t, int nd, const int *sym) {
    cr_assert(b->n < MAX_VALS, "%s: too many values", b->what);
    keep(b, t);
    cr_assert_eq(ca_tensor_ndim(t), nd, "%s: value rank %d, tracked %d [ops: %s]", b->what,
                 ca_tensor_ndim(t), nd, b->trace);
    val *v = &b->vals[b->n++];
    v->t = t;
    v->nd = nd;
    if (nd)
        memcpy(v->sym, sym, sizeof(int) * (size_t)nd);
}

static int64_t dim_of(const val *a, int d) {
    return ca_tensor_shape(a->t)[d];
}

/* A new tensor of `shape` with normal values, not yet pushed. kind: 0 constant, 1 leaf,
 * 2 non-contiguous leaf (a transpose), 3 expanded leaf (stride 0 in dim 0). */
static ca_tensor *make_tensor(build *b, int nd, const int64_t *shape, int kind) {
    if (kind == 2 && nd < 2)
        kind = 1;
    if (kind == 3 && (nd < 1 || shape[0] == 1))
        kind = 1;
    int64_t base[MAX_ND], n = 1;
    if (nd)
        memcpy(base, shape, sizeof(int64_t) * (size_t)nd);
    if (kind == 2) {
        base[nd - 2] = shape[nd - 1];
        base[nd - 1] = shape[nd - 2];
    } else if (kind == 3) {
        base[0] = 1;
    }
    for (int d = 0; d < nd; d++)
        n *= base[d];
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    cr_assert_not_null(v);
    for (int64_t i = 0; i < n; i++) {
        v[i] = normal(&b->v);
        if (b->src_dt == CA_FLOAT32) /* the oracle starts from the float32 graph's values */
            v[i] = (float)v[i];
    }
    ca_tensor *t = tu_from(b->dt, nd, base, v, false), *u = NULL;
    free(v);
    if (kind == 2) {
        OK(b, ca_transpose(t, -2, -1, &u));
        ca_tensor_release(t);
        t = u;
    } else if (kind == 3) {
        OK(b, ca_expand(t, nd, shape, &u));
        ca_tensor_release(t);
        t = u;
    }
    if (kind > 0) {
        OK(b, ca_tensor_set_requires_grad(t, true));
        cr_assert(b->n_leaves < MAX_LEAVES, "%s: too many leaves", b->what);
        b->leaves[b->n_leaves++] = t;
    }
    return t;
}

static int new_kind(build *b) {
    return chance(&b->r, 35) ? 0 : 1 + rnd(&b->r, 3);
}

/* A new value with a's shape (and symbols), pushed. */
static val *like(build *b, const val *a) {
    ca_tensor *t = make_tensor(b, a->nd, ca_tensor_shape(a->t), new_kind(b));
    push(b, t, a->nd, a->sym);
    return &b->vals[b->n - 1];
}

static val *pick(build *b) {
    return chance(&b->r, 50) ? &b->vals[b->n - 1] : &b->vals[rnd(&b->r, b->n)];
}

/* ---- broadcasting over symbols: equal symbols have equal sizes ---- */
static bool compatible(const val *a, const val *c) {
    for (int i = 1; i <= a->nd && i <= c->nd; i++) {
        int x = a->sym[a->nd - i], y = c->sym[c->nd - i];
        if (x != y && x != 0 && y != 0)
            return false;
    }
    return true;
}

static int broadcast(const val *a, const val *c, int *out) {
    int nd = a->nd > c->nd ? a->nd : c->nd;
    for (int i = 1; i <= nd; i++) {
        int x = i <= a->nd ? a->sym[a->nd - i] : 0, y = i <= c->nd ? c->sym[c->nd - i] : 0;
        out[nd - i] = x ? x : y;
    }
    return nd;
}

/* c broadcasts to exactly a's shape */
static bool fits_into(const val *c, const val *a) {
    if (c->nd > a->nd)
        return false;
    for (int i = 1; i <= c->nd; i++) {
        int y = c->sym[c->nd - i];
        if (y != 0 && y != a->sym[a->nd - i])
            return false;
    }
    return true;
}

static bool same_shape(const val *c, const val *a) {
    return c->nd == a->nd &&
           (a->nd == 0 || memcmp(c->sym, a->sym, sizeof(int) * (size_t)a->nd) == 0);
}

/* A partner for a binary op: a pool value that broadcasts with a (into a's shape when
 * `into`), or a new tensor made of a suffix of a's dims, some set to 1, maybe with a new
 * leading dim. Returned by value: the pool may move. */
static val partner(build *b, const val *a, bool into) {
    int cand[MAX_VALS], n = 0;
    for (int i = 0; i < b->n; i++)
        if (into ? fits_into(&b->vals[i], a) : compatible(a, &b->vals[i]))
            cand[n++] = i;
    if (n > 0 && chance(&b->r, 60))
        return b->vals[cand[rnd(&b->r, n)]];
    int sym[MAX_ND], nd = 0, drop = a->nd ? rnd(&b->r, a->nd + 1) : 0;
    int64_t shape[MAX_ND];
    if (!into && drop == 0 && a->nd < MAX_ND && chance(&b->r, 15)) { /* in front of a's */
        sym[0] = 1 + rnd(&b->r, NSYM);
        shape[0] = b->size[sym[0]];
        nd = 1;
    }
    for (int d = drop; d < a->nd; d++, nd++) {
        bool one = chance(&b->r, 25);
        sym[nd] = one ? 0 : a->sym[d];
        shape[nd] = one ? 1 : dim_of(a, d);
    }
    push(b, make_tensor(b, nd, shape, new_kind(b)), nd, sym);
    return b->vals[b->n - 1];
}

static val same_partner(build *b, const val *a) {
    int cand[MAX_VALS], n = 0;
    for (int i = 0; i < b->n; i++)
        if (same_shape(&b->vals[i], a))
            cand[n++] = i;
    if (n > 1 && chance(&b->r, 50)) /* a itself is one of them */
        return b->vals[cand[rnd(&b->r, n)]];
    return *like(b, a);
}

/* ---------------------------------------------------------------------------------------
 * The ops. Each appends one value (and maybe a partner before it).
 */
static void op_unary(build *b) {
    val a = *pick(b);
    ca_tensor *t = NULL, *u = NULL, *w = NULL;
    switch (rnd(&b->r, 19)) {
    case 0:
        note(b, "neg");
        OK(b, ca_neg(a.t, &t));
        break;
    case 1:
        note(b, "tanh");
        OK(b, ca_tanh(a.t, &t));
        break;
    case 2:
        note(b, "sigmoid");
        OK(b, ca_sigmoid(a.t, &t));
        break;
    case 3:
        note(b, "sin");
        OK(b, ca_sin(a.t, &t));
        break;
    case 4:
        note(b, "relu");
        OK(b, ca_relu(a.t, &t));
        break;
    case 5:
        note(b, "gelu");
        OK(b, ca_gelu(a.t, rnd(&b->r, 2) ? CA_GELU_TANH : CA_GELU_NONE, &t));
        break;
    case 6:
        note(b, "silu");
        OK(b, ca_silu(a.t, &t));
        break;
    case 7:
        note(b, "softplus");
        OK(b, ca_softplus(a.t, 1.0 + rnd(&b->r, 2), 2.0, &t));
        break;
    case 8:
        note(b, "leaky_relu");
        OK(b, ca_leaky_relu(a.t, 0.1, &t));
        break;
    case 9:
        note(b, "abs");
        OK(b, ca_abs(a.t, &t));
        break;
    case 10: /* exp of a bounded value */
        note(b, "exp(tanh)");
        OK(b, ca_tanh(a.t, &u));
        OK(b, ca_exp(u, &t));
        break;
    case 11:
        note(b, "log(x*x+1)");
        OK(b, ca_mul(a.t, a.t, &u));
        OK(b, ca_add_scalar(u, 1.0, &w));
        OK(b, ca_log(w, &t));
        break;
    case 12:
        note(b, "rsqrt(x*x+1)");
        OK(b, ca_mul(a.t, a.t, &u));
        OK(b, ca_add_scalar(u, 1.0, &w));
        OK(b, ca_rsqrt(w, &t));
        break;
    case 13:
        note(b, "mul_scalar");
        OK(b, ca_mul_scalar(a.t, -1.5, &t));
        break;
    case 14:
        note(b, "rsub_scalar");
        OK(b, ca_rsub_scalar(a.t, 0.5, &t));
        break;
    case 15:
        note(b, "pow_scalar");
        OK(b, ca_pow_scalar(a.t, 2.0, &t));
        break;
    case 16:
        note(b, "clamp");
        OK(b, ca_clamp(a.t, -0.5, 0.8, &t));
        break;
    case 17: /* to the other dtype and back */
        note(b, "to_dtype");
        OK(b, ca_to_dtype(a.t, b->dt == CA_FLOAT32 || oracle_build ? CA_FLOAT64 : CA_FLOAT32,
                          &u)); /* the oracle stays exact: float64 both ways */
        OK(b, ca_to_dtype(u, b->dt, &t));
        break;
    default:
        note(b, "dropout");
        OK(b, ca_dropout(a.t, 0.25, true, &t));
        break;
    }
    RELEASE(u, w);
    push(b, t, a.nd, a.sym);
}

static void op_binary(build *b) {
    val a = *pick(b);
    int kind = rnd(&b->r, 9);
    val c = partner(b, &a, kind >= 7);
    ca_tensor *t = NULL, *u = NULL, *w = NULL;
    int sym[MAX_ND], nd = broadcast(&a, &c, sym);
    switch (kind) {
    case 0:
        note(b, "add");
        OK(b, ca_add(a.t, c.t, &t));
        break;
    case 1:
        note(b, "sub");
        OK(b, ca_sub(c.t, a.t, &t));
        break;
    case 2:
    case 3:
        note(b, "mul");
        OK(b, ca_mul(a.t, c.t, &t));
        break;
    case 4: /* a / (|c| + 1) */
        note(b, "div");
        OK(b, ca_abs(c.t, &u));
        OK(b, ca_add_scalar(u, 1.0, &w));
        OK(b, ca_div(a.t, w, &t));
        break;
    case 5:
        note(b, "maximum");
        OK(b, ca_maximum(a.t, c.t, &t));
        break;
    case 6: /* where(a > c, a, c) */
        note(b, "where");
        OK(b, ca_gt(a.t, c.t, &u));
        OK(b, ca_where(u, a.t, c.t, &t));
        break;
    case 7:
        note(b, "minimum");
        OK(b, ca_minimum(a.t, c.t, &t));
        break;
    default: /* masked_fill(a, c > 0) */
        note(b, "masked_fill");
        OK(b, ca_gt_scalar(c.t, 0.0, &u));
        OK(b, ca_masked_fill(a.t, u, -0.75, &t));
        nd = a.nd;
        memcpy(sym, a.sym, sizeof sym);
        break;
    }
    RELEASE(u, w);
    push(b, t, nd, sym);
}

static void drop_dim(val *r, int d) {
    memmove(r->sym + d, r->sym + d + 1, sizeof(int) * (size_t)(r->nd - d - 1));
    r->nd--;
}

static void insert_dim(val *r, int d, int sym) {
    memmove(r->sym + d + 1, r->sym + d, sizeof(int) * (size_t)(r->nd - d));
    r->sym[d] = sym;
    r->nd++;
}

static void op_reduce(build *b) {
    val a = *pick(b);
    ca_tensor *t = NULL;
    if (a.nd == 0 || chance(&b->r, 10)) {
        note(b, "sum all");
        OK(b, ca_sum(a.t, 0, NULL, false, &t));
        push(b, t, 0, NULL);
        return;
    }
    int64_t dim = rnd(&b->r, a.nd);
    bool kd = chance(&b->r, 40);
    int k = rnd(&b->r, 6);
    switch (k) {
    case 0:
        note(b, "sum");
        OK(b, ca_sum(a.t, 1, &dim, kd, &t));
        break;
    case 1:
        note(b, "mean");
        OK(b, ca_mean(a.t, 1, &dim, kd, &t));
        break;
    case 2:
        note(b, "max");
        OK(b, ca_max(a.t, 1, &dim, kd, &t, NULL));
        break;
    case 3:
        note(b, "logsumexp");
        OK(b, ca_logsumexp(a.t, 1, &dim, kd, &t));
        break;
    case 4:
        note(b, "softmax");
        OK(b, ca_softmax(a.t, dim, &t));
        break;
    default:
        note(b, "log_softmax");
        OK(b, ca_log_softmax(a.t, dim, &t));
        break;
    }
    val r = a;
    if (k < 4) {
        if (kd)
            r.sym[dim] = 0;
        else
            drop_dim(&r, (int)dim);
    }
    push(b, t, r.nd, r.sym);
}

static void op_view(build *b) {
    val a = *pick(b), r = a;
    ca_tensor *t = NULL, *u = NULL;
    int k = rnd(&b->r, 9);
    if (a.nd == 0)
        k = chance(&b->r, 50) ? 4 : 6;
    if (a.nd < 2 && (k == 0 || k == 1 || k == 8))
        k = 4;
    if (a.nd == MAX_ND && (k == 4 || k == 6))
        k = 7;
    switch (k) {
    case 0: { /* transpose */
        int d0 = rnd(&b->r, a.nd), d1 = rnd(&b->r, a.nd);
        note(b, "transpose");
        OK(b, ca_transpose(a.t, d0, d1, &t));
        r.sym[d0] = a.sym[d1];
        r.sym[d1] = a.sym[d0];
        break;
    }
    case 1: { /* permute */
        int64_t perm[MAX_ND];
        for (int d = 0; d < a.nd; d++)
            perm[d] = d;
        for (int d = a.nd - 1; d > 0; d--) {
            int j = rnd(&b->r, d + 1);
            int64_t x = perm[d];
            perm[d] = perm[j];
            perm[j] = x;
        }
        note(b, "permute");
        OK(b, ca_permute(a.t, a.nd, perm, &t));
        for (int d = 0; d < a.nd; d++)
            r.sym[d] = a.sym[perm[d]];
        break;
    }
    case 2: { /* on a table dim (size >= 2): slice, narrow; on any: select */
        int dims[MAX_ND], n = 0;
        for (int d = 0; d < a.nd; d++)
            if (a.sym[d] >= 1 && a.sym[d] <= NSYM)
                dims[n++] = d;
        int d = n ? dims[rnd(&b->r, n)] : rnd(&b->r, a.nd), how = n ? rnd(&b->r, 3) : 2;
        if (how == 0) {
            note(b, "slice");
            OK(b, ca_slice(a.t, d, chance(&b->r, 50) ? 0 : -2, INT64_MAX, 1 + rnd(&b->r, 2), &t));
            r.sym[d] = fresh(b);
        } else if (how == 1) {
            note(b, "narrow");
            OK(b, ca_narrow(a.t, d, 1, 1, &t));
            r.sym[d] = 0;
        } else {
            note(b, "select");
            OK(b, ca_select(a.t, d, chance(&b->r, 50) ? 0 : -1, &t));
            drop_dim(&r, d);
        }
        break;
    }
    case 3: { /* squeeze a literal-1 dim, or flatten */
        int d = -1;
        for (int i = 0; i < a.nd; i++)
            if (a.sym[i] == 0)
                d = i;
        if (d >= 0) {
            note(b, "squeeze");
            OK(b, ca_squeeze(a.t, 1, (int64_t[]){d}, &t));
            drop_dim(&r, d);
        } else {
            note(b, "flatten");
            OK(b, ca_flatten(a.t, 0, -1, &t));
            r.nd = 1;
            r.sym[0] = fresh(b);
        }
        break;
    }
    case 4: { /* unsqueeze */
        int d = rnd(&b->r, a.nd + 1);
        note(b, "unsqueeze");
        OK(b, ca_unsqueeze(a.t, d, &t));
        insert_dim(&r, d, 0);
        break;
    }
    case 5: { /* reshape: merge two adjacent dims (-1), or append a 1 */
        int64_t shape[MAX_ND];
        int d = rnd(&b->r, a.nd);
        if (d + 1 < a.nd) {
            for (int i = 0, j = 0; i < a.nd; i++)
                if (i != d + 1) {
                    shape[j] = i == d ? -1 : dim_of(&a, i);
                    r.sym[j++] = i == d ? fresh(b) : a.sym[i];
                }
            r.nd = a.nd - 1;
        } else if (a.nd < MAX_ND) {
            for (int i = 0; i < a.nd; i++)
                shape[i] = dim_of(&a, i);
            shape[a.nd] = 1;
            r.sym[a.nd] = 0;
            r.nd = a.nd + 1;
        } else {
            memcpy(shape, ca_tensor_shape(a.t), sizeof shape);
        }
        note(b, "reshape");
        OK(b, ca_reshape(a.t, r.nd, shape, &t));
        break;
    }
    case 6: { /* expand: a new leading dim, and literal-1 dims to table sizes */
        int64_t shape[MAX_ND];
        r.nd = a.nd + 1;
        r.sym[0] = 1 + rnd(&b->r, NSYM);
        shape[0] = b->size[r.sym[0]];
        for (int i = 0; i < a.nd; i++) {
            r.sym[i + 1] = a.sym[i];
            shape[i + 1] = -1;
            if (a.sym[i] == 0 && chance(&b->r, 60)) {
                r.sym[i + 1] = 1 + rnd(&b->r, NSYM);
                shape[i + 1] = b->size[r.sym[i + 1]];
            }
        }
        note(b, "expand");
        OK(b, ca_expand(a.t, r.nd, shape, &t));
        break;
    }
    case 7:
        if (ca_tensor_is_contiguous(a.t)) {
            note(b, "view");
            OK(b, ca_view(a.t, a.nd, ca_tensor_shape(a.t), &t));
        } else {
            note(b, "contiguous");
            OK(b, ca_contiguous(a.t, &t));
        }
        break;
    default: /* a view of a view: transpose, then slice the whole dim */
        note(b, "transpose+slice");
        OK(b, ca_transpose(a.t, 0, a.nd - 1, &u));
        OK(b, ca_slice(u, 0, 0, INT64_MAX, 1, &t));
        ca_tensor_release(u);
        r.sym[0] = a.sym[a.nd - 1];
        r.sym[a.nd - 1] = a.sym[0];
        break;
    }
    push(b, t, r.nd, r.sym);
}

/* matmul with a new [k, n] (maybe a transposed view), or linear with a new [n, k] weight
 * and maybe a bias. */
static void op_matmul(build *b) {
    val a = *pick(b);
    if (a.nd == 0) {
        op_unary(b);
        return;
    }
    ca_tensor *t = NULL, *bias = NULL;
    int n_sym = 1 + rnd(&b->r, NSYM);
    int64_t n = b->size[n_sym], k = dim_of(&a, a.nd - 1);
    if (chance(&b->r, 40)) {
        bool tr = chance(&b->r, 40);
        ca_tensor *m = make_tensor(b, 2, tr ? (int64_t[]){n, k} : (int64_t[]){k, n},
                                   chance(&b->r, 25) ? 0 : 1);
        push(b, m, 2, tr ? (int[]){n_sym, a.sym[a.nd - 1]} : (int[]){a.sym[a.nd - 1], n_sym});
        ca_tensor *mm = m;
        if (tr) {
            OK(b, ca_transpose(m, 0, 1, &mm));
            keep(b, mm);
        }
        note(b, tr ? "matmul(w^T)" : "matmul");
        OK(b, ca_matmul(a.t, mm, &t));
    } else {
        ca_tensor *w = make_tensor(b, 2, (int64_t[]){n, k}, 1 + rnd(&b->r, 2));
        push(b, w, 2, (int[]){n_sym, a.sym[a.nd - 1]});
        if (chance(&b->r, 60))
            bias = keep(b, make_tensor(b, 1, &n, chance(&b->r, 20) ? 0 : 1));
        note(b, bias ? "linear+bias" : "linear");
        OK(b, ca_linear(a.t, w, bias, &t));
    }
    val r = a;
    r.sym[a.nd - 1] = n_sym;
    push(b, t, r.nd, r.sym);
}

static void op_nn(build *b) {
    val a = *pick(b);
    ca_tensor *t = NULL;
    int k = a.nd == 0 ? 4 : rnd(&b->r, 5);
    switch (k) {
    case 0: { /* layer_norm over the last dim, maybe affine */
        int64_t last = dim_of(&a, a.nd - 1);
        ca_tensor *w = NULL, *bb = NULL;
        if (chance(&b->r, 60)) {
            w = keep(b, make_tensor(b, 1, &last, 1));
            bb = keep(b, make_tensor(b, 1, &last, rnd(&b->r, 2)));
        }
        note(b, "layer_norm");
        OK(b, ca_layer_norm(a.t, 1, &last, w, bb, 1e-5, &t));
        push(b, t, a.nd, a.sym);
        return;
    }
    case 1: { /* cat or stack with a same-shape partner */
        val c = same_partner(b, &a), r = a;
        ca_tensor *two[2] = {a.t, c.t};
        if (a.nd == MAX_ND || chance(&b->r, 50)) {
            int64_t d = rnd(&b->r, a.nd);
            note(b, "cat");
            OK(b, ca_cat(2, two, d, &t));
            r.sym[d] = fresh(b);
        } else {
            int64_t d = rnd(&b->r, a.nd + 1);
            note(b, "stack");
            OK(b, ca_stack(2, two, d, &t));
            insert_dim(&r, (int)d, fresh(b));
        }
        push(b, t, r.nd, r.sym);
        return;
    }
    case 2: { /* index_select / gather / embedding, indices with repeats */
        int64_t d = rnd(&b->r, a.nd), len = 1 + rnd(&b->r, 4), ishape[MAX_ND], n = len;
        int how = rnd(&b->r, 3);
        if (how == 2 && a.nd != 2)
            how = 0;
        if (how == 2)
            d = 0;
        if (how == 1) { /* gather: a's shape with dim d of length len */
            n = 1;
            for (int i = 0; i < a.nd; i++)
                n *= ishape[i] = i == d ? len : dim_of(&a, i);
        }
        int64_t *idx = malloc(sizeof(int64_t) * (size_t)n);
        cr_assert_not_null(idx);
        for (int64_t i = 0; i < n; i++)
            idx[i] = (int64_t)(rng_next(&b->v) % (uint64_t)dim_of(&a, (int)d));
        ca_tensor *ix = keep(b, how == 1 ? tu_index(a.nd, ishape, idx) : tu_index(1, &len, idx));
        free(idx);
        val r = a;
        r.sym[d] = fresh(b);
        note(b, how == 0 ? "index_select" : how == 1 ? "gather" : "embedding");
        OK(b, how == 0   ? ca_index_select(a.t, d, ix, &t)
              : how == 1 ? ca_gather(a.t, d, ix, &t)
                         : ca_embedding(a.t, ix, &t));
        push(b, t, r.nd, r.sym);
        return;
    }
    case 3: { /* cross_entropy over [N, C], or mse_loss */
        ca_reduction red = (ca_reduction)rnd(&b->r, 3);
        if (a.nd == 2) {
            int64_t n = dim_of(&a, 0), c = dim_of(&a, 1);
            int64_t *tg = malloc(sizeof(int64_t) * (size_t)n);
            cr_assert_not_null(tg);
            for (int64_t i = 0; i < n; i++)
                tg[i] = (int64_t)(rng_next(&b->v) % (uint64_t)c);
            if (n > 1 && chance(&b->r, 30))
                tg[0] = -100;
            ca_tensor *target = keep(b, tu_index(1, &n, tg));
            free(tg);
            note(b, "cross_entropy");
            OK(b, ca_cross_entropy(a.t, target, red, -100, &t));
            push(b, t, red == CA_REDUCTION_NONE ? 1 : 0, a.sym);
            return;
        }
        val c = same_partner(b, &a);
        note(b, "mse_loss");
        OK(b, ca_mse_loss(a.t, c.t, red, &t));
        push(b, t, red == CA_REDUCTION_NONE ? a.nd : 0, a.sym);
        return;
    }
    default: { /* a * sum(a): fan-in through a reduction of itself */
        ca_tensor *s = NULL;
        note(b, "a*sum(a)");
        OK(b, ca_sum(a.t, 0, NULL, false, &s));
        OK(b, ca_mul(a.t, s, &t));
        ca_tensor_release(s);
        push(b, t, a.nd, a.sym);
        return;
    }
    }
}

/* Hooks, retain_grad and graph breaks on the value just made. */
static void decorate(build *b) {
    val *v = &b->vals[b->n - 1];
    if (chance(&b->r, 8)) {
        note(b, "|break|");
        OK(b, ca_graph_break(NULL));
    }
    if (!ca_tensor_requires_grad(v->t))
        return;
    if (chance(&b->r, 15)) {
        note(b, "+hook");
        OK(b, ca_tensor_register_hook(v->t, scale_hook, (void *)&hook_scales[rnd(&b->r, 4)], NULL,
                                      NULL));
    }
    /* Retained tensors (also ca_grad's inputs) have distinct nodes: a view op may return
     * its input. Two ca_grad inputs sharing a node is compiled/autograd_grad_same_node_twice
     * (disabled until fixed); allow repeats again once it is fixed. */
    bool seen = false;
    for (int i = 0; i < b->n_retained; i++)
        seen |= b->retained[i]->grad_fn == v->t->grad_fn;
    if (!ca_tensor_is_leaf(v->t) && !seen && b->n_retained < 4 && chance(&b->r, 10)) {
        note(b, "+retain_grad");
        OK(b, ca_tensor_retain_grad(v->t));
        b->retained[b->n_retained++] = v->t;
    }
}

/* Build the graph whose structure comes from rs and values from rv, with the given size
 * table. Returns its loss (owned by the build), or NULL if no leaf reaches it. */
/* An in-place op in the graph on a fresh copy c = a * 1 (nothing saved it yet, so no
 * version error follows) or on a view of c (narrow, select, transpose), as PyTorch's
 * CopySlices; c, and the view, go on into later ops. */
static void op_inplace(build *b) {
    val a = *pick(b);
    ca_tensor *c = NULL, *v = NULL;
    OK(b, ca_mul_scalar(a.t, 1.0, &c));
    push(b, c, a.nd, a.sym);
    val vv = a;
    int k = a.nd ? rnd(&b->r, 4) : 0, d = a.nd ? rnd(&b->r, a.nd) : 0;
    if (k == 1 && !(a.sym[d] >= 1 && a.sym[d] <= NSYM)) /* narrow needs a table dim */
        k = 2;
    if (k == 3 && a.nd < 2)
        k = 0;
    switch (k) {
    case 1:
        note(b, "narrow");
        OK(b, ca_narrow(c, d, 1, 1, &v));
        vv.sym[d] = 0;
        break;
    case 2:
        note(b, "select");
        OK(b, ca_select(c, d, chance(&b->r, 50) ? 0 : -1, &v));
        drop_dim(&vv, d);
        break;
    case 3:
        note(b, "transpose");
        OK(b, ca_transpose(c, 0, a.nd - 1, &v));
        vv.sym[0] = a.sym[a.nd - 1];
        vv.sym[a.nd - 1] = a.sym[0];
        break;
    default: v = ca_tensor_retain(c);
    }
    vv.t = v;
    switch (rnd(&b->r, 5)) {
    case 0:
        note(b, "mul_scalar_");
        OK(b, ca_mul_scalar_(v, chance(&b->r, 50) ? 0.5 : -3.0));
        break;
    case 1: {
        val p = partner(b, &vv, true);
        note(b, "add_");
        OK(b, ca_add_(v, p.t, chance(&b->r, 50) ? 1.0 : -2.0));
        break;
    }
    case 2: {
        val p = partner(b, &vv, true);
        note(b, "mul_");
        OK(b, ca_mul_(v, p.t));
        break;
    }
    case 3: { /* a same-shape source: a broadcast one makes constant rows, on which a later
               * layer_norm turns float32 rounding into noise 1/sqrt(eps) times larger than
               * the gradients the judge scales its bound by */
        val p = same_partner(b, &vv);
        note(b, "copy_");
        OK(b, ca_copy_(v, p.t));
        break;
    }
    default: note(b, "zero_"); OK(b, ca_zero_(v));
    }
    if (v != c && b->n < MAX_VALS)
        push(b, v, vv.nd, vv.sym);
    else
        ca_tensor_release(v);
}

static ca_tensor *build_graph(build *b, uint64_t rs, uint64_t rv, const int64_t *sizes,
                              const char *what) {
    memset(b, 0, sizeof *b);
    b->r.s = rs;
    b->v.s = rv;
    b->what = what;
    memcpy(b->size, sizes, sizeof b->size);
    b->dt = b->src_dt = chance(&b->r, 50) ? CA_FLOAT32 : CA_FLOAT64;
    if (oracle_build)
        b->dt = CA_FLOAT64;
    ca_manual_seed(rv); /* dropout masks */
    int n_leaves = 1 + rnd(&b->r, 3);
    for (int i = 0; i < n_leaves; i++) {
        val v = {.nd = rnd(&b->r, 4)};
        int64_t shape[MAX_ND];
        for (int d = 0; d < v.nd; d++) {
            v.sym[d] = chance(&b->r, 20) ? 0 : 1 + rnd(&b->r, NSYM);
            shape[d] = v.sym[d] ? b->size[v.sym[d]] : 1;
        }
        int kind = i == 0 ? 1 + rnd(&b->r, 3) : new_kind(b);
        note(b, kind == 0 ? "const" : kind == 1 ? "leaf" : kind == 2 ? "leaf(T)" : "leaf(E)");
        push(b, make_tensor(b, v.nd, shape, kind), v.nd, v.sym);
        decorate(b);
    }
    int n_ops = 2 + rnd(&b->r, 9);
    for (int i = 0; i < n_ops && b->n < MAX_VALS - 6; i++) {
        int k = rnd(&b->r, 100);
        if (k < 24)
            op_unary(b);
        else if (k < 47)
            op_binary(b);
        else if (k < 60)
            op_reduce(b);
        else if (k < 76)
            op_view(b);
        else if (k < 85)
            op_matmul(b);
        else if (k < 92)
            op_inplace(b);
        else
            op_nn(b);
        decorate(b);
    }
    /* loss = sum(last * w) + the sums of 0..2 other values: more fan-in */
    val last = b->vals[b->n - 1];
    ca_tensor *w = keep(b, make_tensor(b, last.nd, ca_tensor_shape(last.t), 0)), *lw = NULL,
              *loss = NULL;
    OK(b, ca_mul(last.t, w, &lw));
    OK(b, ca_sum(lw, 0, NULL, false, &loss));
    ca_tensor_release(lw);
    for (int i = rnd(&b->r, 3); i > 0; i--) {
        ca_tensor *s = NULL, *l2 = NULL;
        OK(b, ca_sum(b->vals[rnd(&b->r, b->n)].t, 0, NULL, false, &s));
        OK(b, ca_add(loss, s, &l2));
        RELEASE(s, loss);
        loss = l2;
    }
    keep(b, loss);
    return ca_tensor_requires_grad(loss) ? loss : NULL;
}

static void build_free(build *b) {
    for (int i = 0; i < b->n_leaves; i++)
        ca_tensor_set_grad(b->leaves[i], NULL);
    tu_release_n(b->keep, b->n_keep);
    b->n_keep = 0;
}

/* ---------------------------------------------------------------------------------------
 * Running a graph, eagerly or compiled, and comparing the outcomes
 */
typedef struct {
    bool built;
    ca_status st;
    char msg[512];
    int n;                        /* gradients: one per leaf (then per retained tensor) */
    ca_tensor *g[MAX_LEAVES + 4]; /* new references, NULL where none */
    int hooks;
    char trace[768];
} outcome;

typedef struct {
    uint64_t rs, rv;
    int64_t sizes[NSYM + 1];
    bool use_grad; /* ca_grad w.r.t. the leaves and retained tensors, instead of backward */
    const ca_compiled_options *opts;
} graph_case;

/* Whether the build's trace (space-separated op names) contains op as a whole word. */
static bool trace_has(const char *trace, const char *op) {
    size_t n = strlen(op);
    for (const char *p = trace; (p = strstr(p, op)) != NULL; p += n)
        if ((p == trace || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return true;
    return false;
}

/* A compiled backward must have run compiled: a capture or a cache hit, and no eager
 * fallback. A trace failure leaves its message in ca_last_error (status
 * CA_STATUS_INTERNAL) and the eager run that follows sets none; the cache_size_limit bound
 * sets none at all. A backward that fails counts neither a hit nor a miss: compare()
 * checks its error against the eager one. */
static void check_compiled(const outcome *o, const ca_compiled_counters *c0,
                           const ca_compiled_counters *c1, bool error_set, const char *what) {
    int64_t fallbacks = c1->eager_fallbacks - c0->eager_fallbacks;
    int64_t runs = c1->captures - c0->captures + c1->cache_hits - c0->cache_hits;
    const char *why = error_set && ca_last_status() == CA_STATUS_INTERNAL
                          ? ca_last_error()
                          : "no message (the cache_size_limit bound?)";
    cr_assert(fallbacks == 0,
              "%s: the compiled backward ran eagerly (%lld fallbacks): %s [ops: %s]", what,
              (long long)fallbacks, why, o->trace);
    cr_assert(o->st != CA_OK || runs == 1,
              "%s: the compiled backward neither compiled nor hit the cache (%lld captures "
              "and hits, no fallback) [ops: %s]",
              what, (long long)runs, o->trace);
}

static outcome run_case(const graph_case *gc, bool compiled, const char *what) {
    outcome o = {0};
    build b;
    ca_tensor *loss = build_graph(&b, gc->rs, gc->rv, gc->sizes, what);
    snprintf(o.trace, sizeof o.trace, "%s", b.trace);
    if (!loss) {
        build_free(&b);
        return o;
    }
    o.built = true;
    hook_calls = 0;
    ca_compiled_counters c0, c1;
    ca_compiled_autograd_counters(&c0);
    uint64_t gen = cai_err_generation();
    if (compiled)
        cr_assert_eq(ca_compiled_autograd_enable(gc->opts), CA_OK);
    if (gc->use_grad) {
        ca_tensor *inputs[MAX_LEAVES + 4];
        o.n = b.n_leaves + b.n_retained;
        memcpy(inputs, b.leaves, sizeof(ca_tensor *) * (size_t)b.n_leaves);
        memcpy(inputs + b.n_leaves, b.retained, sizeof(ca_tensor *) * (size_t)b.n_retained);
        ca_grad_options go = {.allow_unused = true};
        o.st = ca_grad(1, &loss, o.n, inputs, &go, o.g);
    } else {
        o.st = ca_backward(loss);
        o.n = b.n_leaves + b.n_retained;
        for (int i = 0; i < o.n; i++) {
            ca_tensor *t = i < b.n_leaves ? b.leaves[i] : b.retained[i - b.n_leaves];
            ca_tensor *g = ca_tensor_grad(t);
            o.g[i] = g ? ca_tensor_retain(g) : NULL;
        }
    }
    if (compiled)
        cr_assert_eq(ca_compiled_autograd_disable(), CA_OK);
    snprintf(o.msg, sizeof o.msg, "%s", o.st == CA_OK ? "" : ca_last_error());
    o.hooks = hook_calls;
    ca_compiled_autograd_counters(&c1);
    if (compiled)
        check_compiled(&o, &c0, &c1, cai_err_generation() != gen, what);
    build_free(&b);
    return o;
}

static void outcome_free(outcome *o) {
    tu_release_n(o->g, o->n);
}

/* The float64 oracle of a float32 graph whose eager run e succeeded: the same graph built
 * in float64 from the same (rounded) values, run eagerly. Not built (o.built false) for a
 * float64 graph, a graph with dropout (its masks are drawn per dtype) or one whose oracle
 * ends differently. */
static outcome run_oracle(const graph_case *gc, const outcome *e, const char *what) {
    outcome none = {0};
    bool f32 = false;
    for (int k = 0; k < e->n; k++)
        f32 |= e->g[k] && ca_tensor_dtype(e->g[k]) == CA_FLOAT32;
    if (!f32 || e->st != CA_OK || trace_has(e->trace, "dropout"))
        return none;
    oracle_build = true;
    outcome o = run_case(gc, false, what);
    oracle_build = false;
    if (o.st != CA_OK || o.n != e->n) {
        outcome_free(&o);
        return none;
    }
    return o;
}

static bool close_to(double a, double b, double tol) {
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b))
        return a == b;
    return fabs(a - b) <= tol * (1.0 + fabs(b));
}

/* A float32 gradient judged by its graph's float64 oracle o: compiled's largest error
 * against it may be ORACLE_FACTOR times eager float32's own, or ORACLE_ULPS float32 ulps
 * of the graph's gradient scale (the largest oracle entry of any
 * of its gradients: a gradient that is exactly 0, as layer_norm's sums over its
 * normalized dims, is float32 noise of the size of the terms that cancel), whichever is
 * larger. Compiled and eager are two float32 roundings of one exact value, so neither is
 * the reference for the other; the oracle tells a rounding from a wrong gradient. A
 * non-finite entry must be the same in both. */
#define ORACLE_FACTOR 8.0
#define ORACLE_ULPS   16.0

static void judge_by_oracle(const ca_tensor *x, const ca_tensor *y, const ca_tensor *o,
                            double scale, int k, const char *what, const char *trace) {
    double err_c = 0, err_e = 0;
    int64_t worst = 0;
    for (int64_t i = 0; i < ca_tensor_numel(y); i++) {
        double u = tu_get(x, i), v = tu_get(y, i), w = tu_get(o, i);
        if (!isfinite(u) || !isfinite(v) || !isfinite(w)) {
            cr_assert(close_to(u, v, 0.0),
                      "%s: gradient %d, element %lld: compiled %.17g, eager %.17g (oracle "
                      "%.17g) [ops: %s]",
                      what, k, (long long)i, u, v, w, trace);
            continue;
        }
        if (fabs(u - w) > err_c) {
            err_c = fabs(u - w);
            worst = i;
        }
        err_e = fmax(err_e, fabs(v - w));
    }
    double bound = fmax(ORACLE_FACTOR * err_e, ORACLE_ULPS * FLT_EPSILON * scale);
    cr_assert(err_c <= bound,
              "%s: gradient %d: compiled's error against the float64 oracle is %.3g (element "
              "%lld: compiled %.9g, oracle %.17g), eager float32's %.3g, graph scale %.3g: over "
              "the bound %.3g [ops: %s]",
              what, k, err_c, (long long)worst, tu_get(x, worst), tu_get(o, worst), err_e, scale,
              bound, trace);
}

/* o: the graph's float64 oracle (NULL: none, as for a float64 graph or one with dropout,
 * whose masks are drawn per dtype); float32 gradients are judged by it, float64 ones
 * against eager within 1e-12 (relative to 1 + |eager|), as are float32 ones without it. */
static void compare(const outcome *e, const outcome *c, const outcome *o, const char *what) {
    cr_assert_eq(c->built, e->built, "%s: built differently [ops: %s]", what, e->trace);
    cr_assert_str_eq(c->trace, e->trace, "%s: the builds differ", what);
    cr_assert_eq(c->st, e->st, "%s: compiled status %d (%s), eager %d (%s) [ops: %s]", what, c->st,
                 c->msg, e->st, e->msg, e->trace);
    cr_assert_str_eq(c->msg, e->msg, "%s: messages differ [ops: %s]", what, e->trace);
    cr_assert_eq(c->hooks, e->hooks, "%s: hooks ran %d times compiled, %d eager [ops: %s]", what,
                 c->hooks, e->hooks, e->trace);
    cr_assert_eq(c->n, e->n);
    double scale = 0; /* the graph's gradient scale, for judge_by_oracle */
    for (int k = 0; o && k < o->n; k++)
        for (int64_t i = 0; o->g[k] && i < ca_tensor_numel(o->g[k]); i++)
            if (isfinite(tu_get(o->g[k], i)))
                scale = fmax(scale, fabs(tu_get(o->g[k], i)));
    /* every gradient exactly 0 (an in-place copy_ or zero_ cut the leaves off, and what is
     * left cancels): float32 noise is then of the size of the terms that cancel, which the
     * loss weights (standard normal) set to about 1; a wrong term would be of that size */
    if (o && scale == 0)
        scale = 1.0;
    /* a float64 graph has no oracle: its scale is eager's largest gradient entry */
    double scale64 = 0;
    for (int k = 0; !o && k < e->n; k++)
        for (int64_t i = 0; e->g[k] && i < ca_tensor_numel(e->g[k]); i++)
            if (isfinite(tu_get(e->g[k], i)))
                scale64 = fmax(scale64, fabs(tu_get(e->g[k], i)));
    for (int k = 0; k < e->n; k++) {
        const ca_tensor *x = c->g[k], *y = e->g[k];
        cr_assert((x == NULL) == (y == NULL), "%s: gradient %d is %s compiled, %s eager [ops: %s]",
                  what, k, x ? "set" : "NULL", y ? "set" : "NULL", e->trace);
        if (!y)
            continue;
        char dx[96], dy[96];
        ca_tensor_describe(x, dx, sizeof dx);
        ca_tensor_describe(y, dy, sizeof dy);
        cr_assert_str_eq(dx, dy, "%s: gradient %d is %s compiled, %s eager [ops: %s]", what, k, dx,
                         dy, e->trace);
        if (ca_tensor_dtype(y) == CA_FLOAT32 && o && o->g[k]) {
            judge_by_oracle(x, y, o->g[k], scale, k, what, e->trace);
            continue;
        }
        double tol = ca_tensor_dtype(y) == CA_FLOAT32 ? 1e-5 : 1e-12;
        /* or, in float64, ORACLE_ULPS ulps of the graph's scale: an entry that is 0 by
         * cancellation (log_softmax's sum over its dim) is rounding noise of the size of
         * the terms that cancel, as the float32 judge allows against its oracle */
        double floor = ca_tensor_dtype(y) == CA_FLOAT64 ? ORACLE_ULPS * DBL_EPSILON * scale64 : 0;
        for (int64_t i = 0; i < ca_tensor_numel(y); i++) {
            double u = tu_get(x, i), v = tu_get(y, i);
            cr_assert(close_to(u, v, tol) || fabs(u - v) <= floor,
                      "%s: gradient %d (%s), element %lld: compiled %.17g, eager %.17g (tol %g) "
                      "[ops: %s]",
                      what, k, dy, (long long)i, u, v, tol, e->trace);
        }
    }
}

static long env_long(const char *name, long dflt) {
    const char *s = getenv(name);
    return s && *s ? strtol(s, NULL, 10) : dflt;
}

/* Graphs [first, first + n_graphs) of seed, each compared eager against compiled. */
static void differential_run(uint64_t seed, long first, long n_graphs) {
    ca_compiled_options dyn = {.dynamic = true};
    long compared = 0, skipped = 0, oracles = 0;
    int64_t captures = 0, hits = 0, fallbacks = 0;
    ca_compiled_autograd_reset();
    for (long g = first; g < first + n_graphs; g++) {
        rng gr = {seed * 0x9E3779B97F4A7C15ull + (uint64_t)g};
        graph_case gc = {
            .rs = rng_next(&gr), .use_grad = g % 4 == 1, .opts = g % 4 == 3 ? &dyn : NULL};
        for (int variant = 0; variant < 2; variant++) {
            gc.rv = rng_next(&gr);
            for (int s = 1; s <= NSYM; s++)
                gc.sizes[s] = 2 + rnd(&gr, 4);
            char what[160];
            snprintf(what, sizeof what,
                     "seed %llu graph %ld, size variant %d (sizes %lld %lld %lld %lld%s%s)",
                     (unsigned long long)seed, g, variant, (long long)gc.sizes[1],
                     (long long)gc.sizes[2], (long long)gc.sizes[3], (long long)gc.sizes[4],
                     gc.opts ? ", dynamic" : "", gc.use_grad ? ", ca_grad" : "");
            outcome e = run_case(&gc, false, what);
            if (!e.built) {
                skipped++;
                outcome_free(&e);
                continue;
            }
            outcome o = run_oracle(&gc, &e, what);
            oracles += o.built;
            outcome c = run_case(&gc, true, what);
            compare(&e, &c, o.built ? &o : NULL, what);
            outcome_free(&c);
            if (variant == 0) { /* the same graph again: from the cache */
                outcome c2 = run_case(&gc, true, what);
                compare(&e, &c2, o.built ? &o : NULL, what);
                outcome_free(&c2);
            }
            outcome_free(&o);
            outcome_free(&e);
            compared++;
        }
        if ((g - first + 1) % 64 == 0 || g == first + n_graphs - 1) {
            ca_compiled_counters cc;
            ca_compiled_autograd_counters(&cc);
            captures += cc.captures;
            hits += cc.cache_hits;
            fallbacks += cc.eager_fallbacks;
            ca_compiled_autograd_reset();
        }
    }
    cr_log_info("compiled_random: %ld graphs (seed %llu, from %ld), %ld size variants "
                "compared (%ld by a float64 oracle), %ld skipped (no leaf reaches the loss); "
                "%lld captures, %lld hits, %lld eager fallbacks",
                n_graphs, (unsigned long long)seed, first, compared, oracles, skipped,
                (long long)captures, (long long)hits, (long long)fallbacks);
    ca_compiled_autograd_reset();
    if (n_graphs < 64)
        return; /* a replay: too few graphs for the counts below */
    /* the comparison must mostly be of compiled graphs, not eager against eager */
    cr_assert_gt(compared, n_graphs, "only %ld variants compared", compared);
    cr_assert_gt(captures, compared / 2, "%lld captures for %ld comparisons", (long long)captures,
                 compared);
    cr_assert_gt(hits, compared / 2, "%lld cache hits for %ld comparisons", (long long)hits,
                 compared);
}

static void differential(long default_graphs) {
    const char *se = getenv("CAGRAD_RANDOM_SEED");
    differential_run(se && *se ? strtoull(se, NULL, 10) : DEFAULT_SEED,
                     env_long("CAGRAD_RANDOM_FIRST", 0),
                     env_long("CAGRAD_RANDOM_GRAPHS", default_graphs));
}

Test(compiled_random, differential) {
    differential(DEFAULT_GRAPHS);
}

/* Graph 553867 of seed 777 (a 1M-graph campaign): a layer_norm chain whose first leaf's
 * exact gradient is 0 (layer_norm's gradient sums to zero over the normalized dims).
 * float32 gives 3.84e-5 eagerly and 7.3e-7 compiled: both rounding noise around 0, compiled
 * the closer, which the old rule (compiled within 1e-5 of eager) called a mismatch. The
 * float64 oracle decides it is rounding. */
Test(compiled_random, oracle_decides_graph_553867_of_seed_777) {
    differential_run(777, 553867, 1);
}

/* The same graphs with every compiled run's steps side by side on two threads
 * (CAGRAD_INTEROP=1): the order plan_dag.c keeps must give eager's results. */
Test(compiled_random, differential_side_by_side) {
    if (ca_set_num_threads(2) < 2)
        cr_skip_test("needs 2 cores");
    setenv("CAGRAD_INTEROP", "1", 1);
    uint64_t before = cai_graph_plan_parallel_runs();
    differential(DEFAULT_GRAPHS / 2);
    cr_assert_gt(cai_graph_plan_parallel_runs(), before + DEFAULT_GRAPHS / 4,
                 "compiled runs did not go side by side");
}
