/* testutil.c - the helpers of testutil.h: seeded tensor makers, element access,
 * comparisons against references, gradcheck by central finite differences, and the
 * allocation-failure sweep.
 *
 * The makers draw from a generator of their own (splitmix64), not from ca_randn, so tests
 * that seed the library's generator (dropout, randn) are not disturbed by the inputs they
 * make, and gradcheck's projection w is the same on every call.
 */
#include "testutil.h"

#include "autograd/internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * A small local generator. Criterion runs each test in its own process, so every test
 * starts from the same state and its inputs are reproducible.
 */
typedef struct {
    uint64_t s;
} tu_rng;

static tu_rng tu_global_rng = {0x9E3779B97F4A7C15ull};

static uint64_t rng_next(tu_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) with 53 random bits */
static double rng_uniform(tu_rng *r) {
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

static double rng_normal(tu_rng *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static int64_t shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

/* ---------------------------------------------------------------------------------------
 * Makers
 */
ca_tensor *tu_from(ca_dtype dt, int ndim, const int64_t *shape, const double *values, bool rg) {
    int64_t n = shape_numel(ndim, shape);
    size_t esz = ca_dtype_size(dt);
    void *buf = malloc((size_t)(n > 0 ? n : 1) * esz);
    cr_assert(buf != NULL, "tu_from: out of memory");
    for (int64_t i = 0; i < n; i++) {
        if (dt == CA_FLOAT32)
            ((float *)buf)[i] = (float)values[i];
        else if (dt == CA_FLOAT64)
            ((double *)buf)[i] = values[i];
        else if (dt == CA_BOOL)
            ((uint8_t *)buf)[i] = values[i] != 0;
        else
            ((int64_t *)buf)[i] = (int64_t)values[i];
    }
    ca_tensor *t = NULL;
    ca_status st = ca_from_data(dt, ndim, shape, buf, &t);
    free(buf);
    cr_assert_eq(st, CA_OK, "tu_from: ca_from_data failed: %s", ca_last_error());
    if (rg) {
        st = ca_tensor_set_requires_grad(t, true);
        cr_assert_eq(st, CA_OK, "tu_from: set_requires_grad failed: %s", ca_last_error());
    }
    return t;
}

/* n values from the global generator: normal, or uniform in [lo, hi) */
static double *draw_values(int64_t n, bool normal, double lo, double hi) {
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    cr_assert(v != NULL, "tu: out of memory");
    for (int64_t i = 0; i < n; i++)
        v[i] = normal ? rng_normal(&tu_global_rng) : lo + (hi - lo) * rng_uniform(&tu_global_rng);
    return v;
}

ca_tensor *tu_randn(ca_dtype dt, int ndim, const int64_t *shape, bool rg) {
    double *v = draw_values(shape_numel(ndim, shape), true, 0, 0);
    ca_tensor *t = tu_from(dt, ndim, shape, v, rg);
    free(v);
    return t;
}

ca_tensor *tu_uniform(ca_dtype dt, int ndim, const int64_t *shape, double lo, double hi, bool rg) {
    double *v = draw_values(shape_numel(ndim, shape), false, lo, hi);
    ca_tensor *t = tu_from(dt, ndim, shape, v, rg);
    free(v);
    return t;
}

ca_tensor *tu_index(int ndim, const int64_t *shape, const int64_t *values) {
    ca_tensor *t = NULL;
    int64_t none = 0; /* an empty index tensor may come with values == NULL */
    ca_status st = ca_from_data(CA_INT64, ndim, shape, values ? values : &none, &t);
    cr_assert_eq(st, CA_OK, "tu_index: ca_from_data failed: %s", ca_last_error());
    return t;
}

/* The view is made with cai_tensor_alias directly (not ca_transpose), so it is a leaf with
 * no grad_fn and the helpers do not depend on the shape ops under test. */
ca_tensor *tu_randn_noncontig(ca_dtype dt, int ndim, const int64_t *shape, bool rg) {
    cr_assert(ndim >= 1, "tu_randn_noncontig: needs ndim >= 1");
    int64_t base_shape[CA_MAX_DIMS], strides[CA_MAX_DIMS];
    memcpy(base_shape, shape, (size_t)ndim * sizeof(int64_t));
    if (ndim == 1)
        base_shape[0] = 2 * shape[0];
    else {
        base_shape[ndim - 2] = shape[ndim - 1];
        base_shape[ndim - 1] = shape[ndim - 2];
    }
    ca_tensor *base = tu_randn(dt, ndim, base_shape, false);
    const int64_t *bs = ca_tensor_strides(base);
    memcpy(strides, bs, (size_t)ndim * sizeof(int64_t));
    if (ndim == 1)
        strides[0] = 2;
    else {
        strides[ndim - 2] = bs[ndim - 1];
        strides[ndim - 1] = bs[ndim - 2];
    }
    ca_tensor *view = NULL;
    ca_status st = cai_tensor_alias(base, ndim, shape, strides, 0, &view);
    ca_tensor_release(base);
    cr_assert_eq(st, CA_OK, "tu_randn_noncontig: cai_tensor_alias failed: %s", ca_last_error());
    if (rg) {
        st = ca_tensor_set_requires_grad(view, true);
        cr_assert_eq(st, CA_OK, "tu_randn_noncontig: set_requires_grad: %s", ca_last_error());
    }
    return view;
}

/* ---------------------------------------------------------------------------------------
 * Element access and comparison
 */

/* Element offset (in elements, from ca_tensor_data) of row-major logical index i. */
static int64_t logical_offset(const ca_tensor *t, int64_t i) {
    int nd = ca_tensor_ndim(t);
    const int64_t *shape = ca_tensor_shape(t), *strides = ca_tensor_strides(t);
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        off += (i % shape[d]) * strides[d];
        i /= shape[d];
    }
    return off;
}

double tu_get(const ca_tensor *t, int64_t i) {
    cr_assert(t != NULL, "tu_get: NULL tensor");
    cr_assert(i >= 0 && i < ca_tensor_numel(t), "tu_get: index %lld out of range [0, %lld)",
              (long long)i, (long long)ca_tensor_numel(t));
    int64_t off = logical_offset(t, i);
    const void *p = ca_tensor_data(t);
    switch (ca_tensor_dtype(t)) {
    case CA_FLOAT32: return ((const float *)p)[off];
    case CA_FLOAT64: return ((const double *)p)[off];
    case CA_BOOL: return ((const uint8_t *)p)[off];
    default: return (double)((const int64_t *)p)[off];
    }
}

double tu_at(const ca_tensor *t, const int64_t *idx) {
    int nd = ca_tensor_ndim(t);
    const int64_t *shape = ca_tensor_shape(t);
    int64_t f = 0;
    for (int d = 0; d < nd; d++)
        f = f * shape[d] + idx[d];
    return tu_get(t, f);
}

void tu_unflat(int nd, const int64_t *shape, int64_t i, int64_t *idx) {
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
}

void tu_assert_shape(const ca_tensor *t, int nd, const int64_t *shape) {
    cr_assert_eq(ca_tensor_ndim(t), nd, "ndim %d, expected %d", ca_tensor_ndim(t), nd);
    for (int d = 0; d < nd; d++)
        cr_assert_eq(ca_tensor_shape(t)[d], shape[d], "dim %d is %lld, expected %lld", d,
                     (long long)ca_tensor_shape(t)[d], (long long)shape[d]);
}

void tu_release_n(ca_tensor **ts, int n) {
    for (int i = 0; i < n; i++)
        ca_tensor_release(ts[i]);
}

static bool close_enough(double a, double b, double atol, double rtol) {
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b))
        return a == b;
    return fabs(a - b) <= atol + rtol * fabs(b);
}

static const char *describe(const ca_tensor *t, char *buf, size_t size) {
    return ca_tensor_describe(t, buf, size);
}

void tu_assert_close(const ca_tensor *a, const ca_tensor *b, double atol, double rtol) {
    cr_assert(a != NULL && b != NULL, "tu_assert_close: NULL tensor");
    char da[96], db[96];
    bool same = ca_tensor_ndim(a) == ca_tensor_ndim(b) &&
                memcmp(ca_tensor_shape(a), ca_tensor_shape(b),
                       (size_t)ca_tensor_ndim(a) * sizeof(int64_t)) == 0;
    cr_assert(same, "tu_assert_close: shapes differ: %s vs %s", describe(a, da, sizeof da),
              describe(b, db, sizeof db));
    int64_t n = ca_tensor_numel(a);
    for (int64_t i = 0; i < n; i++) {
        double x = tu_get(a, i), y = tu_get(b, i);
        cr_assert(close_enough(x, y, atol, rtol),
                  "tu_assert_close: element %lld differs: %.17g vs expected %.17g "
                  "(atol %g, rtol %g)",
                  (long long)i, x, y, atol, rtol);
    }
}

void tu_assert_values(const ca_tensor *t, const double *values, double atol) {
    cr_assert(t != NULL, "tu_assert_values: NULL tensor");
    int64_t n = ca_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double x = tu_get(t, i);
        cr_assert(close_enough(x, values[i], atol, 0.0),
                  "tu_assert_values: element %lld is %.17g, expected %.17g (atol %g)", (long long)i,
                  x, values[i], atol);
    }
}

/* ---------------------------------------------------------------------------------------
 * Gradcheck
 */
#define TU_GC_MAX_IN 16
#define TU_GC_H      1e-6

typedef struct {
    tu_fn f;
    int n;
    ca_tensor *const *inputs;
    void *ctx;
    ca_tensor *w; /* the fixed projection, shape of f's output */
} gc_state;

/* A float64 tensor of `like`'s shape with normal values from a generator seeded 1234. */
static ca_tensor *gc_projection(const ca_tensor *like) {
    tu_rng r = {1234};
    int nd = ca_tensor_ndim(like);
    int64_t n = ca_tensor_numel(like);
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    cr_assert(v != NULL, "tu_gradcheck: out of memory");
    for (int64_t i = 0; i < n; i++)
        v[i] = rng_normal(&r);
    ca_tensor *w = NULL;
    ca_status st = ca_from_data(CA_FLOAT64, nd, ca_tensor_shape(like), v, &w);
    free(v);
    cr_assert_eq(st, CA_OK, "tu_gradcheck: making w failed: %s", ca_last_error());
    return w;
}

/* L = sum(f(x) * w) as a new scalar tensor; makes w on the first call. */
static ca_tensor *gc_loss(gc_state *s) {
    ca_tensor *y = NULL, *yw = NULL, *loss = NULL;
    ca_status st = s->f(s->inputs, &y, s->ctx);
    cr_assert_eq(st, CA_OK, "tu_gradcheck: f failed: %s", ca_last_error());
    cr_assert(y != NULL, "tu_gradcheck: f returned CA_OK but no output");
    cr_assert_eq(ca_tensor_dtype(y), CA_FLOAT64, "tu_gradcheck: f's output is %s, not float64",
                 ca_dtype_name(ca_tensor_dtype(y)));
    if (s->w == NULL)
        s->w = gc_projection(y);
    st = ca_mul(y, s->w, &yw);
    ca_tensor_release(y);
    cr_assert_eq(st, CA_OK, "tu_gradcheck: f(x) * w failed: %s", ca_last_error());
    st = ca_sum(yw, 0, NULL, false, &loss);
    ca_tensor_release(yw);
    cr_assert_eq(st, CA_OK, "tu_gradcheck: sum failed: %s", ca_last_error());
    return loss;
}

static double gc_eval(gc_state *s) {
    ca_tensor *loss = gc_loss(s);
    double v = 0;
    ca_status st = ca_tensor_item(loss, &v);
    ca_tensor_release(loss);
    cr_assert_eq(st, CA_OK, "tu_gradcheck: item failed: %s", ca_last_error());
    return v;
}

/* Central difference of L for element i of input t (written in place through its strides,
 * then restored). Grad mode is off around it. */
static double gc_numeric(gc_state *s, ca_tensor *t, int64_t i) {
    double *p = (double *)ca_tensor_data(t) + logical_offset(t, i);
    double orig = *p;
    *p = orig + TU_GC_H;
    double lp = gc_eval(s);
    *p = orig - TU_GC_H;
    double lm = gc_eval(s);
    *p = orig;
    return (lp - lm) / (2 * TU_GC_H);
}

/* A stride-0 dim of size > 1 means one memory element stands for several logical ones,
 * so perturbing "one element" is not defined (PyTorch's gradcheck refuses these too). */
static bool has_overlap(const ca_tensor *t) {
    for (int d = 0; d < ca_tensor_ndim(t); d++)
        if (ca_tensor_strides(t)[d] == 0 && ca_tensor_shape(t)[d] > 1)
            return true;
    return false;
}

static void gc_clear_grads(int n, ca_tensor *const *in) {
    for (int k = 0; k < n; k++)
        if (ca_tensor_requires_grad(in[k]))
            ca_tensor_set_grad(in[k], NULL);
}

/* Gradient element i of input k, from a gradient tensor that may be NULL (= zeros). */
static double grad_at(const ca_tensor *g, int64_t i) {
    return g ? tu_get(g, i) : 0.0;
}

static void gc_check_grad_shape(const ca_tensor *g, const ca_tensor *t, int k, const char *via) {
    if (g == NULL)
        return;
    char dg[96], dt[96];
    bool same = ca_tensor_dtype(g) == ca_tensor_dtype(t) &&
                ca_tensor_ndim(g) == ca_tensor_ndim(t) &&
                memcmp(ca_tensor_shape(g), ca_tensor_shape(t),
                       (size_t)ca_tensor_ndim(t) * sizeof(int64_t)) == 0;
    cr_assert(same, "tu_gradcheck: %s gradient of input %d is %s, input is %s", via, k,
              describe(g, dg, sizeof dg), describe(t, dt, sizeof dt));
}

void tu_gradcheck(tu_fn f, int n, ca_tensor *const *inputs, void *ctx, double atol, double rtol) {
    cr_assert(f != NULL && inputs != NULL && n > 0 && n <= TU_GC_MAX_IN,
              "tu_gradcheck: bad arguments (n = %d)", n);
    gc_state s = {f, n, inputs, ctx, NULL};
    ca_tensor *req[TU_GC_MAX_IN];
    int req_idx[TU_GC_MAX_IN], n_req = 0;
    for (int k = 0; k < n; k++) {
        ca_tensor *t = inputs[k];
        cr_assert(t != NULL, "tu_gradcheck: input %d is NULL", k);
        if (!ca_tensor_requires_grad(t))
            continue;
        cr_assert_eq(ca_tensor_dtype(t), CA_FLOAT64,
                     "tu_gradcheck: input %d requires grad but is %s; gradcheck needs float64", k,
                     ca_dtype_name(ca_tensor_dtype(t)));
        cr_assert(!has_overlap(t),
                  "tu_gradcheck: input %d requires grad but has a stride-0 dim; pass a tensor "
                  "without overlapping memory",
                  k);
        if (!ca_tensor_is_leaf(t))
            cr_assert_eq(ca_tensor_retain_grad(t), CA_OK, "retain_grad: %s", ca_last_error());
        req[n_req] = t;
        req_idx[n_req++] = k;
    }
    cr_assert(n_req > 0, "tu_gradcheck: no input requires grad");

    bool prev_mode = ca_set_grad_enabled(true);

    /* analytic, through ca_backward: keep our own refs to the .grad tensors */
    ca_tensor *bw[TU_GC_MAX_IN] = {0}, *gr[TU_GC_MAX_IN] = {0};
    gc_clear_grads(n, inputs);
    ca_tensor *loss = gc_loss(&s);
    ca_status st = ca_backward(loss);
    ca_tensor_release(loss);
    cr_assert_eq(st, CA_OK, "tu_gradcheck: ca_backward failed: %s", ca_last_error());
    for (int j = 0; j < n_req; j++) {
        ca_tensor *g = ca_tensor_grad(req[j]);
        bw[j] = g ? ca_tensor_retain(g) : NULL;
        gc_check_grad_shape(bw[j], req[j], req_idx[j], "ca_backward");
    }
    gc_clear_grads(n, inputs);

    /* analytic again, through ca_grad */
    loss = gc_loss(&s);
    ca_grad_options opt = {.grad_outputs = NULL, .retain_graph = false, .allow_unused = true};
    st = ca_grad(1, &loss, n_req, req, &opt, gr);
    ca_tensor_release(loss);
    cr_assert_eq(st, CA_OK, "tu_gradcheck: ca_grad failed: %s", ca_last_error());

    /* numeric, with grad mode off */
    ca_set_grad_enabled(false);
    int worst_in = -1, n_bad = 0;
    int64_t worst_i = -1;
    double worst_a = 0, worst_n = 0, worst_excess = 0;
    bool grad_mismatch = false;
    int gm_in = -1;
    int64_t gm_i = -1;
    double gm_bw = 0, gm_gr = 0;
    for (int j = 0; j < n_req; j++) {
        gc_check_grad_shape(gr[j], req[j], req_idx[j], "ca_grad");
        int64_t numel = ca_tensor_numel(req[j]);
        for (int64_t i = 0; i < numel; i++) {
            double a = grad_at(bw[j], i), a2 = grad_at(gr[j], i);
            double num = gc_numeric(&s, req[j], i);
            if (!grad_mismatch && !close_enough(a2, a, 1e-12, 1e-9)) {
                grad_mismatch = true;
                gm_in = req_idx[j], gm_i = i, gm_bw = a, gm_gr = a2;
            }
            double excess = fabs(a - num) - (atol + rtol * fabs(num));
            if (isnan(a) != isnan(num) || excess > 0) {
                n_bad++;
                if (worst_in < 0 || isnan(a) || isnan(num) || excess > worst_excess) {
                    worst_in = req_idx[j], worst_i = i, worst_a = a, worst_n = num;
                    worst_excess = isnan(excess) ? INFINITY : excess;
                }
            }
        }
    }
    ca_set_grad_enabled(prev_mode);

    for (int j = 0; j < n_req; j++) {
        ca_tensor_release(bw[j]);
        ca_tensor_release(gr[j]);
    }
    ca_tensor_release(s.w);
    gc_clear_grads(n, inputs);

    cr_assert(n_bad == 0,
              "tu_gradcheck: %d element(s) off; worst: input %d, flat index %lld: analytic "
              "%.12g, numeric %.12g (atol %g, rtol %g)",
              n_bad, worst_in, (long long)worst_i, worst_a, worst_n, atol, rtol);
    cr_assert(!grad_mismatch,
              "tu_gradcheck: ca_grad and ca_backward disagree: input %d, flat index %lld: "
              "ca_backward %.17g, ca_grad %.17g",
              gm_in, (long long)gm_i, gm_bw, gm_gr);
}

/* ---------------------------------------------------------------------------------------
 * The counting allocator and the allocation-failure sweep. Atomics: the library may
 * allocate from its worker threads.
 */
static atomic_long oom_live;    /* allocations not yet freed */
static atomic_long oom_count;   /* allocations since the last tu_alloc_arm */
static atomic_long oom_fail_at; /* 0: never fail */
static atomic_int oom_failed;   /* the armed failure happened */

void *tu_counting_alloc(size_t size, size_t align, void *ctx) {
    (void)ctx;
    long n = atomic_fetch_add(&oom_count, 1) + 1;
    if (n == atomic_load(&oom_fail_at)) {
        atomic_store(&oom_failed, 1);
        return NULL;
    }
    size_t rounded = (size + align - 1) / align * align;
    void *p = aligned_alloc(align, rounded ? rounded : align);
    if (p)
        atomic_fetch_add(&oom_live, 1);
    return p;
}

static void oom_free(void *p, void *ctx) {
    (void)ctx;
    if (p)
        atomic_fetch_sub(&oom_live, 1);
    free(p);
}

void tu_alloc_install(void) {
    ca_set_allocator(&(ca_allocator){tu_counting_alloc, oom_free, NULL});
    atomic_store(&oom_live, 0);
    atomic_store(&oom_count, 0);
    atomic_store(&oom_fail_at, 0);
    atomic_store(&oom_failed, 0);
}

void tu_alloc_uninstall(void) {
    tu_alloc_disarm();
    ca_set_allocator(NULL);
}

void tu_alloc_arm(long n) {
    atomic_store(&oom_count, 0);
    atomic_store(&oom_failed, 0);
    atomic_store(&oom_fail_at, n);
}

void tu_alloc_disarm(void) {
    atomic_store(&oom_fail_at, 0);
}

long tu_alloc_count(void) {
    return atomic_load(&oom_count);
}

long tu_alloc_live(void) {
    return atomic_load(&oom_live);
}

bool tu_alloc_failed(void) {
    return atomic_load(&oom_failed) != 0;
}

void tu_oom_every_allocation(const char *name, tu_sc_fn fn) {
    TU_OK(ca_init());
    ca_set_num_threads(1); /* allocation order must not depend on scheduling */
    tu_alloc_install();
    TU_OK(fn()); /* warm-up: first-use work happens here */
    tu_alloc_arm(0);
    TU_OK(fn());
    long k = tu_alloc_count();
    cr_assert_eq(tu_alloc_live(), 0, "%s: a clean run leaked %ld allocations", name,
                 tu_alloc_live());
    for (long n = 1; n <= k; n++) {
        tu_alloc_arm(n);
        ca_status st = fn();
        tu_alloc_disarm();
        cr_assert(st == CA_OK || st == CA_STATUS_NOMEM,
                  "%s: allocation %ld failed and the call returned %d: %s", name, n, (int)st,
                  ca_last_error());
        cr_assert_eq(tu_alloc_live(), 0, "%s: allocation %ld failed and %ld allocations leaked",
                     name, n, tu_alloc_live());
    }
    tu_alloc_uninstall();
}

ca_tensor **tu_sc_slot(tu_sc_state *s) {
    cr_assert(s->n < TU_SC_SLOTS, "tu_sc_slot: a scenario may make at most %d tensors",
              TU_SC_SLOTS);
    return &s->t[s->n++];
}

ca_tensor *tu_sc_randn(tu_sc_state *s, int nd, const int64_t *shape, bool rg) {
    ca_tensor **p = tu_sc_slot(s);
    TU_SC(s, ca_randn(CA_FLOAT64, nd, shape, p));
    if (rg)
        TU_SC(s, ca_tensor_set_requires_grad(*p, true));
    return *p;
}

void tu_sc_backward(tu_sc_state *s, ca_tensor *y) {
    ca_tensor **sq = tu_sc_slot(s), **l = tu_sc_slot(s);
    TU_SC(s, ca_mul(y, y, sq));
    TU_SC(s, ca_sum(*sq, 0, NULL, false, l));
    TU_SC(s, ca_backward(*l));
}

ca_status tu_sc_release(tu_sc_state *s) {
    for (int i = 0; i < s->n; i++)
        ca_tensor_release(s->t[i]);
    return s->st;
}

ca_status tu_sc_finish(tu_sc_state *s, ca_tensor *y) {
    tu_sc_backward(s, y);
    return tu_sc_release(s);
}
