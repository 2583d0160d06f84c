/* fuzz_backward.c - a libFuzzer target over the C API: the input bytes are a program of
 * ops on random shapes and arguments, whose backward runs eagerly, compiled (a capture)
 * and compiled again (a cache hit), and whose gradients must agree.
 *
 *   make fuzz-lib FUZZ_SECONDS=60        (clang, -fsanitize=fuzzer,address,undefined)
 *   build-fuzz/fuzz_backward tests/fuzz/corpus CRASH_FILE   (replay one input)
 *
 * The bytes are read in order, each decision taking the next one (0 once they run out):
 *   header: the leaves' count (1..3) and each one's rank (1..3) and sizes (1..4), a seed
 *           for their values (float64, normal), and whether the loss uses autograd.grad;
 *   ops:    up to MAX_OPS of them, each an opcode byte and its arguments: which earlier
 *           values it takes, dims, positions, scalars. Arguments are not cleaned up: an op
 *           that rejects them must fail with a status and a message, and the program goes
 *           on without it, so the fuzzer probes the error paths too.
 * The loss is the sum of the last value that needs grad, times a fixed weight pattern.
 * Any crash, sanitizer report, leak, status without a message, or gradient mismatch
 * (float64, 1e-9 of the gradient's scale; NaN against NaN, inf against the same inf)
 * aborts, and libFuzzer keeps the input. A crash it finds becomes a case in
 * tests/fuzz/corpus (replayed by `make fuzz-lib`) and a regression test in tests/c.
 */
#include <cagrad.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VALS 24
#define MAX_OPS  16

typedef struct {
    const uint8_t *p;
    size_t n;
} bytes;

static int next(bytes *b) {
    if (b->n == 0)
        return 0;
    b->n--;
    return *b->p++;
}

static int pick(bytes *b, int n) {
    return n > 0 ? next(b) % n : 0;
}

static void fail(const char *what) {
    fprintf(stderr, "fuzz_backward: %s\n", what);
    abort();
}

typedef struct {
    ca_tensor *v[MAX_VALS];
    int n;
} values;

static void keep(values *vs, ca_tensor *t) {
    if (vs->n < MAX_VALS)
        vs->v[vs->n++] = t;
    else
        ca_tensor_release(t);
}

/* An op's result: kept when it succeeded; a failure must say why. */
static void result(values *vs, ca_status st, ca_tensor *out) {
    if (st == CA_OK) {
        keep(vs, out);
        return;
    }
    const char *msg = ca_last_error();
    if (!msg || !*msg)
        fail("an op failed without a message");
}

static int64_t some_dim(bytes *b, const ca_tensor *t) {
    int nd = ca_tensor_ndim(t);
    return (int64_t)pick(b, 2 * nd + 2) - nd - 1; /* out of range now and then */
}

/* One op from the bytes, on the values so far. */
static void apply_op(bytes *b, values *vs) {
    ca_tensor *x = vs->v[pick(b, vs->n)], *y = vs->v[pick(b, vs->n)], *out = NULL;
    int op = pick(b, 20);
    ca_status st;
    switch (op) {
    case 0: st = ca_tanh(x, &out); break;
    case 1: st = ca_sigmoid(x, &out); break;
    case 2: st = ca_sin(x, &out); break;
    case 3: st = ca_relu(x, &out); break;
    case 4: st = ca_mul_scalar(x, (pick(b, 9) - 4) * 0.5, &out); break;
    case 5: st = ca_add(x, y, &out); break;
    case 6: st = ca_mul(x, y, &out); break;
    case 7: st = ca_sub(x, y, &out); break;
    case 8: {
        int64_t d = some_dim(b, x);
        st = ca_sum(x, 1, &d, next(b) & 1, &out);
        break;
    }
    case 9: st = ca_softmax(x, some_dim(b, x), &out); break;
    case 10: st = ca_transpose(x, some_dim(b, x), some_dim(b, x), &out); break;
    case 11: {
        int64_t flat = ca_tensor_numel(x);
        st = ca_reshape(x, 1, &flat, &out);
        break;
    }
    case 12: st = ca_unsqueeze(x, some_dim(b, x), &out); break;
    case 13: {
        int64_t d = some_dim(b, x), s = pick(b, 7) - 3, e = pick(b, 9) - 3, step = pick(b, 3);
        st = ca_slice(x, d, s, e, step, &out);
        break;
    }
    case 14: st = ca_narrow(x, some_dim(b, x), pick(b, 4), pick(b, 4), &out); break;
    case 15: {
        ca_tensor *two[2] = {x, y};
        st = ca_cat(2, two, some_dim(b, x), &out);
        break;
    }
    case 16: st = ca_matmul(x, y, &out); break;
    case 17: st = ca_select(x, some_dim(b, x), pick(b, 5) - 1, &out); break;
    case 18: {
        int64_t d = some_dim(b, x);
        ca_tensor *idx = NULL;
        st = ca_max(x, 1, &d, next(b) & 1, &out, &idx);
        ca_tensor_release(idx);
        break;
    }
    default: {
        int64_t last = ca_tensor_ndim(x) > 0 ? ca_tensor_shape(x)[ca_tensor_ndim(x) - 1] : 1;
        st = ca_layer_norm(x, 1, &last, NULL, NULL, 1e-5, &out);
        break;
    }
    }
    result(vs, st, out);
}

static ca_tensor *leaf(bytes *b, uint64_t *seed) {
    int nd = 1 + pick(b, 3);
    int64_t shape[3];
    for (int d = 0; d < nd; d++)
        shape[d] = 1 + pick(b, 4);
    ca_tensor *t = NULL;
    ca_manual_seed((*seed)++);
    if (ca_randn(CA_FLOAT64, nd, shape, &t) != CA_OK || ca_tensor_set_requires_grad(t, true))
        fail("a leaf could not be made");
    return t;
}

/* The loss: sum(v * w), w a fixed pattern of v's shape, so every element's gradient is
 * distinct. NULL when v needs no grad or cannot be reduced. */
static ca_tensor *loss_of(ca_tensor *v) {
    if (!ca_tensor_requires_grad(v))
        return NULL;
    ca_tensor *w = NULL, *p = NULL, *s = NULL;
    int64_t n = ca_tensor_numel(v);
    if (ca_arange(1, (double)n + 1, 1, CA_FLOAT64, &w) == CA_OK) {
        ca_tensor *ws = NULL;
        if (ca_reshape(w, ca_tensor_ndim(v), ca_tensor_shape(v), &ws) == CA_OK &&
            ca_mul(v, ws, &p) == CA_OK)
            ca_sum(p, 0, NULL, false, &s);
        ca_tensor_release(ws);
    }
    ca_tensor_release(w);
    ca_tensor_release(p);
    return s;
}

static void same_values(ca_tensor *e, ca_tensor *c, int i, const char *what) {
    const double *a = ca_tensor_data(e), *z = ca_tensor_data(c);
    int64_t m = ca_tensor_numel(e);
    double scale = 1;
    for (int64_t k = 0; k < m; k++)
        if (isfinite(a[k]))
            scale = fmax(scale, fabs(a[k]));
    for (int64_t k = 0; k < m; k++) {
        bool same = isnan(a[k])   ? isnan(z[k])
                    : isinf(a[k]) ? a[k] == z[k]
                                  : fabs(a[k] - z[k]) <= 1e-9 * scale;
        if (!same) {
            fprintf(stderr, "leaf %d [%lld]: eager %.17g, %s %.17g\n", i, (long long)k, a[k], what,
                    z[k]);
            fail("gradients differ");
        }
    }
}

static void same_grads(int n, ca_tensor *const *e, ca_tensor *const *c, const char *what) {
    for (int i = 0; i < n; i++) {
        if (!e[i] != !c[i])
            fail(what);
        if (!e[i])
            continue;
        ca_tensor *ec = NULL, *cc = NULL; /* a gradient may be a strided view */
        if (ca_contiguous(e[i], &ec) != CA_OK || ca_contiguous(c[i], &cc) != CA_OK ||
            ca_tensor_numel(ec) != ca_tensor_numel(cc))
            fail("gradients of different sizes");
        same_values(ec, cc, i, what);
        ca_tensor_release(ec);
        ca_tensor_release(cc);
    }
}

static void grads(int n, ca_tensor *loss, ca_tensor *const *leaves, ca_tensor **g) {
    ca_grad_options o = {.retain_graph = true, .allow_unused = true};
    if (ca_grad(1, &loss, n, leaves, &o, g) != CA_OK) {
        fprintf(stderr, "%s\n", ca_last_error());
        fail("a backward failed");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool ready;
    if (!ready) {
        if (ca_init() != CA_OK)
            fail("ca_init");
        ca_set_num_threads(1);
        ready = true;
    }
    bytes b = {data, size};
    values vs = {.n = 0};
    int n_leaves = 1 + pick(&b, 3);
    uint64_t seed = (uint64_t)next(&b);
    ca_tensor *leaves[3];
    for (int i = 0; i < n_leaves; i++) {
        leaves[i] = leaf(&b, &seed);
        keep(&vs, ca_tensor_retain(leaves[i]));
    }
    for (int k = 0; k < MAX_OPS && b.n > 0; k++)
        apply_op(&b, &vs);
    ca_tensor *loss = NULL;
    for (int i = vs.n - 1; i >= 0 && !loss; i--)
        loss = loss_of(vs.v[i]);
    if (loss) {
        ca_tensor *e[3] = {0}, *c[3] = {0}, *h[3] = {0};
        ca_compiled_autograd_reset();
        grads(n_leaves, loss, leaves, e);
        if (ca_compiled_autograd_enable(NULL) != CA_OK)
            fail("enable");
        grads(n_leaves, loss, leaves, c); /* the capture */
        grads(n_leaves, loss, leaves, h); /* the cache hit */
        ca_compiled_autograd_disable();
        same_grads(n_leaves, e, c, "compiled");
        same_grads(n_leaves, e, h, "compiled (cache hit)");
        for (int i = 0; i < n_leaves; i++) {
            ca_tensor_release(e[i]);
            ca_tensor_release(c[i]);
            ca_tensor_release(h[i]);
        }
        ca_tensor_release(loss);
    }
    for (int i = 0; i < vs.n; i++)
        ca_tensor_release(vs.v[i]);
    for (int i = 0; i < n_leaves; i++)
        ca_tensor_release(leaves[i]);
    ca_compiled_autograd_reset();
    return 0;
}
