/* stress.c - the threaded paths under ThreadSanitizer (make tsan).
 *
 * Criterion's test runner cannot start under TSan (its shared arena collides with TSan's
 * memory layout: Snaipe/Criterion#274), so the threaded paths get this plain program:
 *  - GEMMs big enough that OpenBLAS threads them on cagrad's pool through its callback
 *    (or cagrad cuts them into tiles), again and again, and from two threads at once while
 *    a third keeps the pool busy with pointwise loops (a GEMM that finds the pool busy
 *    runs OpenBLAS's jobs on threads made for the call), against the first result at the
 *    same thread count, bit for bit;
 *  - conv2d's slab kernels, forward and both gradients, eager and compiled, against one
 *    thread, bit for bit;
 *  - a transformer-like block's compiled backward with a hook, run with its steps side by
 *    side (CAGRAD_INTEROP=1; idle threads help the kernels of running steps), in order
 *    (0), and chosen by timing, against the first run, bit for bit, many times;
 *  - compiled backwards from 8 threads at once, each on a graph of its own, two shapes
 *    among them (so threads share cache entries, and entries run side by side), with a
 *    hook that reads compiled autograd's state from inside the run, 1000 each, against a
 *    serial run, bit for bit.
 * It exits 1 on a mismatch; TSan makes any data race exit 66.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cagrad.h"

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != CA_OK) {                                                                     \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, ca_last_error());        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* big enough that kernels split across threads (and idle threads help them) */
enum { B = 4, T = 64, D = 128, H = 4, N_PARAMS = 5 };

static ca_tensor *param(int ndim, const int64_t *shape, double scale) {
    ca_tensor *raw, *out;
    CHECK(ca_randn(CA_FLOAT32, ndim, shape, &raw));
    CHECK(ca_mul_scalar(raw, scale, &out));
    ca_tensor_release(raw);
    CHECK(ca_tensor_set_requires_grad(out, true));
    return out;
}

static ca_status half_hook(ca_tensor *grad, ca_tensor **repl, void *ctx) {
    (void)ctx;
    return ca_mul_scalar(grad, 0.5, repl);
}

/* x + (softmax(q k^T) v) with q = k = v = ln(x) W1 per head, then + gelu(.) W2; mse to 0. */
static ca_tensor *block_loss(ca_tensor **p) {
    ca_tensor *h, *a, *q, *kt, *s, *att, *y, *r, *f, *g, *o, *out, *loss;
    CHECK(ca_layer_norm(p[0], 1, (int64_t[]){D}, p[3], p[4], 1e-5, &h));
    CHECK(ca_matmul(h, p[1], &a));
    CHECK(ca_reshape(a, 4, (int64_t[]){B, T, H, D / H}, &q));
    ca_tensor *qh;
    CHECK(ca_transpose(q, 1, 2, &qh));
    CHECK(ca_transpose(qh, 2, 3, &kt));
    CHECK(ca_matmul(qh, kt, &s));
    CHECK(ca_softmax(s, -1, &att));
    CHECK(ca_matmul(att, qh, &y));
    CHECK(ca_tensor_register_hook(y, half_hook, NULL, NULL, NULL));
    ca_tensor *yt, *yr;
    CHECK(ca_transpose(y, 1, 2, &yt));
    CHECK(ca_reshape(yt, 3, (int64_t[]){B, T, D}, &yr));
    CHECK(ca_add(p[0], yr, &r));
    CHECK(ca_gelu(r, CA_GELU_NONE, &f));
    CHECK(ca_matmul(f, p[2], &g));
    CHECK(ca_add(r, g, &o));
    CHECK(ca_mul(o, o, &out));
    CHECK(ca_mean(out, 0, NULL, false, &loss));
    ca_tensor *drop[] = {h, a, q, qh, kt, s, att, y, yt, yr, r, f, g, o, out};
    for (size_t i = 0; i < sizeof drop / sizeof *drop; i++)
        ca_tensor_release(drop[i]);
    return loss;
}

static void grads_of(ca_tensor **p, float *dst, size_t *n) {
    *n = 0;
    for (int i = 0; i < N_PARAMS; i++) {
        ca_tensor *g = ca_tensor_grad(p[i]);
        int64_t k = ca_tensor_numel(g);
        memcpy(dst + *n, ca_tensor_data(g), sizeof(float) * (size_t)k);
        *n += (size_t)k;
        CHECK(ca_tensor_set_grad(p[i], NULL));
    }
}

static int backward_runs(ca_tensor **p, const char *interop, int runs, const float *want,
                         size_t n_want) {
    static float got[1 << 18];
    if (interop)
        setenv("CAGRAD_INTEROP", interop, 1);
    else
        unsetenv("CAGRAD_INTEROP");
    for (int i = 0; i < runs; i++) {
        ca_tensor *loss = block_loss(p);
        CHECK(ca_backward(loss));
        ca_tensor_release(loss);
        size_t n;
        grads_of(p, got, &n);
        if (n != n_want || memcmp(got, want, sizeof(float) * n) != 0) {
            fprintf(stderr, "CAGRAD_INTEROP=%s run %d: gradients differ from the first run\n",
                    interop ? interop : "(unset)", i);
            return 1;
        }
    }
    return 0;
}

/* 17.5M multiply-adds into a C too small for two tiles of 128 rows: OpenBLAS threads it */
enum { GEMM_M = 120, GEMM_N = 112, GEMM_K = 1300 };

typedef struct {
    ca_tensor *a, *b, *want;
    int runs, bad;
} gemm_job;

static void *gemm_runs(void *arg) {
    gemm_job *g = arg;
    for (int i = 0; i < g->runs && !g->bad; i++) {
        ca_tensor *c;
        CHECK(ca_matmul(g->a, g->b, &c));
        g->bad = memcmp(ca_tensor_data(g->want), ca_tensor_data(c),
                        sizeof(float) * GEMM_M * GEMM_N) != 0;
        ca_tensor_release(c);
    }
    return NULL;
}

/* Pointwise loops on the pool, from a thread of their own: the GEMMs above find it busy. */
typedef struct {
    ca_tensor *x;
    int stop;
} busy_job;

static void *busy_runs(void *arg) {
    busy_job *b = arg;
    while (!__atomic_load_n(&b->stop, __ATOMIC_RELAXED)) {
        ca_tensor *y;
        CHECK(ca_mul(b->x, b->x, &y));
        ca_tensor_release(y);
    }
    return NULL;
}

static int gemms(void) {
    ca_tensor *a, *b, *c1;
    CHECK(ca_randn(CA_FLOAT32, 2, (int64_t[]){GEMM_M, GEMM_K}, &a));
    CHECK(ca_randn(CA_FLOAT32, 2, (int64_t[]){GEMM_K, GEMM_N}, &b));
    ca_set_num_threads(2);
    CHECK(ca_matmul(a, b, &c1));
    gemm_job g[2] = {{a, b, c1, 20, 0}, {a, b, c1, 20, 0}};
    gemm_runs(&g[0]);
    int bad = g[0].bad;
    if (bad)
        fprintf(stderr, "a threaded GEMM differs from its first run\n");
    pthread_t th[3];
    busy_job busy = {.stop = 0};
    CHECK(ca_randn(CA_FLOAT32, 1, (int64_t[]){1 << 20}, &busy.x));
    for (int i = 0; i < 3; i++)
        if (pthread_create(&th[i], NULL, i < 2 ? gemm_runs : busy_runs,
                           i < 2 ? &g[i] : (void *)&busy) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(1);
        }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    __atomic_store_n(&busy.stop, 1, __ATOMIC_RELAXED);
    pthread_join(th[2], NULL);
    ca_tensor_release(busy.x);
    for (int i = 0; i < 2; i++) {
        if (g[i].bad)
            fprintf(stderr, "thread %d: a GEMM run alongside another differs\n", i);
        bad |= g[i].bad;
    }
    ca_tensor_release(a);
    ca_tensor_release(b);
    ca_tensor_release(c1);
    return bad;
}

/* conv2d (3x3, padding 1): forward, grad_input (a convolution of the gradient) and weight
 * gradient at 2 threads, eagerly and compiled, against one eager thread, bit for bit. Over
 * [6, 8, 12, 12] to 12 channels the im2col slab kernels (the weight gradient's slabs side
 * by side, their partials added after); over [6, 16, 12, 12] to 16 Winograd's with one slab,
 * its stages' items on the pool; over [12, 32, 16, 16] to 32 Winograd's with three slabs
 * side by side (and the weight gradient's partial sums). */
static int conv_grads(ca_tensor *x, ca_tensor *w, float *dst) {
    ca_tensor *y, *sq, *loss;
    const int64_t one[2] = {1, 1};
    CHECK(ca_conv2d(x, w, NULL, one, one, one, 1, &y));
    CHECK(ca_mul(y, y, &sq));
    CHECK(ca_sum(sq, 0, NULL, false, &loss));
    CHECK(ca_backward(loss));
    ca_tensor *g[2] = {ca_tensor_grad(x), ca_tensor_grad(w)};
    int64_t nx = ca_tensor_numel(g[0]), nw = ca_tensor_numel(g[1]);
    memcpy(dst, ca_tensor_data(g[0]), sizeof(float) * (size_t)nx);
    memcpy(dst + nx, ca_tensor_data(g[1]), sizeof(float) * (size_t)nw);
    CHECK(ca_tensor_set_grad(x, NULL));
    CHECK(ca_tensor_set_grad(w, NULL));
    ca_tensor *drop[] = {y, sq, loss};
    for (int i = 0; i < 3; i++)
        ca_tensor_release(drop[i]);
    return (int)(nx + nw);
}

static int convs_of(int64_t n, int64_t c, int64_t hw, int64_t o) {
    static float want[1 << 18], got[1 << 18];
    ca_tensor *x = param(4, (int64_t[]){n, c, hw, hw}, 1.0);
    ca_tensor *w = param(4, (int64_t[]){o, c, 3, 3}, 0.3);
    ca_set_num_threads(1);
    int count = conv_grads(x, w, want), bad = 0;
    ca_set_num_threads(2);
    for (int i = 0; i < 8 && !bad; i++) {
        if (i == 4)
            CHECK(ca_compiled_autograd_enable(NULL));
        conv_grads(x, w, got);
        bad = memcmp(want, got, sizeof(float) * (size_t)count) != 0;
    }
    ca_compiled_autograd_disable();
    if (bad)
        fprintf(stderr,
                "conv2d's gradients over [%lld, %lld, %lld, %lld] at 2 threads differ "
                "from one thread's\n",
                (long long)n, (long long)c, (long long)hw, (long long)hw);
    ca_tensor_release(x);
    ca_tensor_release(w);
    return bad;
}

/* ---------------------------------------------------------------------------------------
 * Concurrent compiled backwards
 */
enum { N_WORKERS = 8, WORKER_RUNS = 1000, MLP_IN = 24, MLP_HID = 32 };

typedef struct {
    ca_tensor *p[4]; /* w1 [in, hid], b1 [hid], w2 [hid, 1], x [batch, in]: its own group */
    float want[MLP_IN * MLP_HID + 2 * MLP_HID + 1];
    int bad;
} worker;

/* A hook that reads compiled autograd's shared state from inside a compiled run (as a hook
 * that starts a backward of its own does): the run must not hold a lock that a thread
 * waiting for that state holds the other way round. */
static ca_status probe_hook(ca_tensor *grad, ca_tensor **repl, void *ctx) {
    (void)grad, (void)repl, (void)ctx;
    ca_compiled_counters c;
    ca_compiled_autograd_counters(&c);
    return ca_compiled_autograd_enabled() ? CA_OK : CA_STATUS_INVALID;
}

static ca_tensor *mlp_loss(ca_tensor **p) {
    ca_tensor *a, *h, *t, *o, *oo, *loss;
    CHECK(ca_matmul(p[3], p[0], &a));
    CHECK(ca_add(a, p[1], &h));
    CHECK(ca_tensor_register_hook(h, probe_hook, NULL, NULL, NULL));
    CHECK(ca_tanh(h, &t));
    CHECK(ca_matmul(t, p[2], &o));
    CHECK(ca_mul(o, o, &oo));
    CHECK(ca_mean(oo, 0, NULL, false, &loss));
    ca_tensor *drop[] = {a, h, t, o, oo};
    for (size_t i = 0; i < sizeof drop / sizeof *drop; i++)
        ca_tensor_release(drop[i]);
    return loss;
}

static size_t mlp_grads(ca_tensor **p, float *dst) {
    size_t n = 0;
    for (int i = 0; i < 3; i++) {
        ca_tensor *g = ca_tensor_grad(p[i]);
        int64_t k = ca_tensor_numel(g);
        memcpy(dst + n, ca_tensor_data(g), sizeof(float) * (size_t)k);
        n += (size_t)k;
        CHECK(ca_tensor_set_grad(p[i], NULL));
    }
    return n;
}

static void *worker_run(void *arg) {
    worker *w = arg;
    float got[sizeof w->want / sizeof w->want[0]];
    for (int r = 0; r < WORKER_RUNS && !w->bad; r++) {
        ca_tensor *loss = mlp_loss(w->p);
        CHECK(ca_backward(loss));
        ca_tensor_release(loss);
        size_t n = mlp_grads(w->p, got);
        w->bad = memcmp(got, w->want, sizeof(float) * n) != 0;
    }
    return NULL;
}

/* Each worker's gradients first serially (compiled), then all of them at once. */
static int concurrent_backwards(void) {
    static worker ws[N_WORKERS];
    for (int i = 0; i < N_WORKERS; i++) {
        int64_t batch = i % 2 ? 24 : 16;
        ws[i].p[0] = param(2, (int64_t[]){MLP_IN, MLP_HID}, 0.3);
        ws[i].p[1] = param(1, (int64_t[]){MLP_HID}, 0.1);
        ws[i].p[2] = param(2, (int64_t[]){MLP_HID, 1}, 0.3);
        CHECK(ca_randn(CA_FLOAT32, 2, (int64_t[]){batch, MLP_IN}, &ws[i].p[3]));
        ca_tensor *loss = mlp_loss(ws[i].p);
        CHECK(ca_backward(loss));
        ca_tensor_release(loss);
        mlp_grads(ws[i].p, ws[i].want);
    }
    pthread_t th[N_WORKERS];
    for (int i = 0; i < N_WORKERS; i++)
        if (pthread_create(&th[i], NULL, worker_run, &ws[i]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    int bad = 0;
    for (int i = 0; i < N_WORKERS; i++) {
        pthread_join(th[i], NULL);
        if (ws[i].bad)
            fprintf(stderr, "worker %d: gradients differ from the serial run\n", i);
        bad |= ws[i].bad;
        for (int k = 0; k < 4; k++)
            ca_tensor_release(ws[i].p[k]);
    }
    ca_compiled_counters c;
    ca_compiled_autograd_counters(&c);
    if (c.eager_fallbacks != 0 || c.captures != 2) {
        fprintf(stderr, "concurrent backwards: %lld captures (2 expected), %lld fallbacks\n",
                (long long)c.captures, (long long)c.eager_fallbacks);
        bad = 1;
    }
    return bad;
}

static int convs(void) {
    return convs_of(6, 8, 12, 12) | convs_of(6, 16, 12, 16) | convs_of(12, 32, 16, 32);
}

int main(void) {
    CHECK(ca_init());
    ca_manual_seed(11);
    int bad = gemms();
    bad |= convs();
    ca_tensor *p[N_PARAMS] = {param(3, (int64_t[]){B, T, D}, 1.0), param(2, (int64_t[]){D, D}, 0.2),
                              param(2, (int64_t[]){D, D}, 0.2), param(1, (int64_t[]){D}, 1.0),
                              param(1, (int64_t[]){D}, 0.1)};
    CHECK(ca_compiled_autograd_enable(NULL));
    static float want[1 << 18];
    size_t n_want;
    setenv("CAGRAD_INTEROP", "0", 1);
    ca_tensor *loss = block_loss(p);
    CHECK(ca_backward(loss)); /* the miss: captured, compiled, run in order */
    ca_tensor_release(loss);
    grads_of(p, want, &n_want);
    ca_compiled_counters c0, c1, c2;
    ca_compiled_autograd_counters(&c0);
    bad |= backward_runs(p, "1", 60, want, n_want);
    ca_compiled_autograd_counters(&c1);
    bad |= backward_runs(p, "0", 10, want, n_want);
    ca_compiled_autograd_counters(&c2);
    if (c1.side_by_side_runs - c0.side_by_side_runs != 60 ||
        c2.side_by_side_runs != c1.side_by_side_runs) {
        fprintf(stderr, "side-by-side runs: %lld forced on (60 expected), %lld forced off\n",
                (long long)(c1.side_by_side_runs - c0.side_by_side_runs),
                (long long)(c2.side_by_side_runs - c1.side_by_side_runs));
        bad = 1;
    }
    bad |= backward_runs(p, NULL, 30, want, n_want);
    ca_compiled_autograd_reset();
    bad |= concurrent_backwards();
    ca_compiled_autograd_disable();
    for (int i = 0; i < N_PARAMS; i++)
        ca_tensor_release(p[i]);
    printf("tsan stress: %s\n", bad ? "MISMATCH" : "ok");
    return bad;
}
