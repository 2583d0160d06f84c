/* shared.c - one model shared by threads, under ThreadSanitizer (make tsan).
 *
 * Four threads share one MLP's weights (float64). Each records its own forward on inputs of
 * its own and runs backwards into the shared leaves' .grad, all at once: 500 eager, then
 * 500 compiled (equal keys, so the threads run one compiled entry side by side, each on a
 * run slot of its own). The main thread checks and zeroes .grad between rounds, behind a
 * barrier, alternately setting it to none (each round's first accumulation makes a new
 * .grad, which threads race to make) and zeroing it in place (the compiled GEMM then adds
 * onto it, beta = 1). After each round every .grad must equal the sum of the threads'
 * gradients, each computed serially first, within rounding.
 *
 * Tolerance: an element of .grad is a sum of N = 4 * PER_ROUND per-thread terms, added in
 * whatever order the threads came; the reference adds them in another. Recursive
 * summation of N terms errs by at most (N - 1) u sum|term| (u = 2^-53), and each term
 * itself may differ from its serial value by a few roundings (the compiled graph's fused
 * kernels, a GEMM with beta = 1 adding onto .grad inside its dot products of length BATCH).
 * So |got - want| <= 1e-12 sum|term| leaves a margin of over 100 over the bound, while a
 * lost or doubled update misses by a whole term (about 1/N of the sum).
 *
 * Then, still compiled, the threads call ca_grad (autograd.grad) on the shared weights at
 * once, GRAD_RUNS each: every result equals that thread's serial one bit for bit (nothing
 * accumulates, so nothing depends on the order).
 *
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

enum {
    N_THREADS = 4,
    IN = 16,
    HID = 32,
    BATCH = 8,
    N_PARAMS = 3,
    PER_ROUND = 10, /* backwards per thread between two checks */
    ROUNDS = 50,    /* of each kind: 500 eager and 500 compiled backwards per thread */
    N_GRAD = IN * HID + HID + HID,
    GRAD_RUNS = 200, /* ca_grad calls per thread */
};

static ca_tensor *params[N_PARAMS]; /* w1 [IN, HID], b1 [HID], w2 [HID, 1]: shared */
static ca_tensor *inputs[N_THREADS];
static double serial[N_THREADS][N_GRAD]; /* each thread's gradient, computed alone */
static pthread_barrier_t round_start, round_end;
static int rounds_total;

static ca_tensor *randn64(int ndim, const int64_t *shape, double scale, bool requires_grad) {
    ca_tensor *raw, *out;
    CHECK(ca_randn(CA_FLOAT64, ndim, shape, &raw));
    CHECK(ca_mul_scalar(raw, scale, &out));
    ca_tensor_release(raw);
    CHECK(ca_tensor_set_requires_grad(out, requires_grad));
    return out;
}

/* mean((tanh(x w1 + b1) w2)^2) */
static ca_tensor *loss_of(ca_tensor *x) {
    ca_tensor *a, *h, *t, *o, *oo, *loss;
    CHECK(ca_matmul(x, params[0], &a));
    CHECK(ca_add(a, params[1], &h));
    CHECK(ca_tanh(h, &t));
    CHECK(ca_matmul(t, params[2], &o));
    CHECK(ca_mul(o, o, &oo));
    CHECK(ca_mean(oo, 0, NULL, false, &loss));
    ca_tensor *drop[] = {a, h, t, o, oo};
    for (size_t i = 0; i < sizeof drop / sizeof *drop; i++)
        ca_tensor_release(drop[i]);
    return loss;
}

static void backward_of(ca_tensor *x) {
    ca_tensor *loss = loss_of(x);
    CHECK(ca_backward(loss));
    ca_tensor_release(loss);
}

/* The parameters' .grad, back to back, into dst (0 where a .grad is unset). */
static void grads_into(double *dst) {
    size_t at = 0;
    for (int i = 0; i < N_PARAMS; i++) {
        ca_tensor *g = ca_tensor_grad(params[i]);
        size_t k = (size_t)ca_tensor_numel(params[i]);
        if (g)
            memcpy(dst + at, ca_tensor_data(g), sizeof(double) * k);
        else
            memset(dst + at, 0, sizeof(double) * k);
        at += k;
    }
}

/* Round r's zeroing: unset .grad (even r), or zero it in place (odd r). */
static void zero_grads(int r) {
    for (int i = 0; i < N_PARAMS; i++) {
        ca_tensor *g = ca_tensor_grad(params[i]);
        if (r % 2 == 0 || !g)
            CHECK(ca_tensor_set_grad(params[i], NULL));
        else
            CHECK(ca_zero_(g));
    }
}

static void *worker(void *arg) {
    ca_tensor *x = arg;
    for (int r = 0; r < rounds_total; r++) {
        pthread_barrier_wait(&round_start);
        for (int k = 0; k < PER_ROUND; k++)
            backward_of(x);
        pthread_barrier_wait(&round_end);
    }
    return NULL;
}

/* .grad against PER_ROUND times the serial gradients' sum, within the tolerance above. */
static int check_round(int r) {
    static double got[N_GRAD];
    grads_into(got);
    for (int j = 0; j < N_GRAD; j++) {
        double want = 0, mag = 0;
        for (int t = 0; t < N_THREADS; t++) {
            want += PER_ROUND * serial[t][j];
            mag += PER_ROUND * fabs(serial[t][j]);
        }
        if (fabs(got[j] - want) > 1e-12 * mag) {
            fprintf(stderr, "round %d: .grad entry %d is %.17g; the threads' sum is %.17g\n", r, j,
                    got[j], want);
            return 1;
        }
    }
    return 0;
}

static void make_model(void) {
    params[0] = randn64(2, (int64_t[]){IN, HID}, 0.3, true);
    params[1] = randn64(1, (int64_t[]){HID}, 0.1, true);
    params[2] = randn64(2, (int64_t[]){HID, 1}, 0.3, true);
    for (int t = 0; t < N_THREADS; t++)
        inputs[t] = randn64(2, (int64_t[]){BATCH, IN}, 1.0, false);
    for (int t = 0; t < N_THREADS; t++) { /* alone, eagerly */
        zero_grads(0);
        backward_of(inputs[t]);
        grads_into(serial[t]);
    }
    zero_grads(0);
}

/* The rounds: eager ones, then compiled ones (compiled autograd is switched for the whole
 * process, so between rounds, while the workers wait). */
static int run_rounds(void) {
    rounds_total = 2 * ROUNDS;
    pthread_barrier_init(&round_start, NULL, N_THREADS + 1);
    pthread_barrier_init(&round_end, NULL, N_THREADS + 1);
    pthread_t th[N_THREADS];
    for (int t = 0; t < N_THREADS; t++)
        if (pthread_create(&th[t], NULL, worker, inputs[t]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(1);
        }
    int bad = 0;
    for (int r = 0; r < rounds_total; r++) {
        if (r == ROUNDS)
            CHECK(ca_compiled_autograd_enable(NULL));
        pthread_barrier_wait(&round_start);
        pthread_barrier_wait(&round_end);
        bad |= check_round(r);
        zero_grads(r + 1);
    }
    for (int t = 0; t < N_THREADS; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&round_start);
    pthread_barrier_destroy(&round_end);
    return bad;
}

/* d loss / d params of thread t's input, by ca_grad, back to back into dst. */
static void grad_call(ca_tensor *x, double *dst) {
    ca_tensor *loss = loss_of(x), *g[N_PARAMS];
    CHECK(ca_grad(1, &loss, N_PARAMS, params, NULL, g));
    size_t at = 0;
    for (int i = 0; i < N_PARAMS; i++) {
        size_t k = (size_t)ca_tensor_numel(g[i]);
        memcpy(dst + at, ca_tensor_data(g[i]), sizeof(double) * k);
        at += k;
        ca_tensor_release(g[i]);
    }
    ca_tensor_release(loss);
}

typedef struct {
    ca_tensor *x;
    double want[N_GRAD];
    int bad;
} grad_worker;

static void *grad_run(void *arg) {
    grad_worker *w = arg;
    double got[N_GRAD];
    for (int r = 0; r < GRAD_RUNS && !w->bad; r++) {
        grad_call(w->x, got);
        w->bad = memcmp(got, w->want, sizeof got) != 0;
    }
    return NULL;
}

/* ca_grad from every thread at once, against each thread's serial result. */
static int concurrent_grads(void) {
    static grad_worker ws[N_THREADS];
    pthread_t th[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        ws[t].x = inputs[t];
        grad_call(inputs[t], ws[t].want);
    }
    for (int t = 0; t < N_THREADS; t++)
        if (pthread_create(&th[t], NULL, grad_run, &ws[t]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(1);
        }
    int bad = 0;
    for (int t = 0; t < N_THREADS; t++) {
        pthread_join(th[t], NULL);
        if (ws[t].bad)
            fprintf(stderr, "thread %d: ca_grad differs from its serial result\n", t);
        bad |= ws[t].bad;
    }
    return bad;
}

int main(void) {
    CHECK(ca_init());
    ca_manual_seed(7);
    make_model();
    int bad = run_rounds();
    ca_compiled_counters c;
    ca_compiled_autograd_counters(&c);
    bad |= concurrent_grads();
    CHECK(ca_compiled_autograd_disable());
    long long want_hits = (long long)N_THREADS * PER_ROUND * ROUNDS - 1;
    if (c.captures != 1 || c.eager_fallbacks != 0 || c.cache_hits != want_hits) {
        fprintf(stderr,
                "compiled rounds: %lld captures (1 expected), %lld hits (%lld), %lld "
                "eager fallbacks (0)\n",
                (long long)c.captures, (long long)c.cache_hits, want_hits,
                (long long)c.eager_fallbacks);
        bad = 1;
    }
    for (int i = 0; i < N_PARAMS; i++)
        ca_tensor_release(params[i]);
    for (int t = 0; t < N_THREADS; t++)
        ca_tensor_release(inputs[t]);
    printf("tsan shared model: %s\n", bad ? "MISMATCH" : "ok");
    return bad;
}
