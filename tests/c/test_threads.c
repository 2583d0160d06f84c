/* test_threads.c - suite `threads`: the threading rules of cagrad.h's Threads section.
 *
 * Per-thread state (error, grad mode, op observer, graph-break reason) stays on its
 * thread, and ops on distinct groups of tensors run on several threads at once, sharing
 * the data cache and the kernel pool, with the same results as on one thread. Backward
 * calls are serialised by the caller, as the header asks, with a mutex here.
 */
#include "testutil.h"

#include <math.h>
#include <pthread.h>

/* ---------------------------------------------------------------------------------------
 * Per-thread state
 */
static int observed;
static void count_op(const char *op, int forward_graph, void *ctx) {
    (void)op, (void)forward_graph;
    ++*(int *)ctx;
}

/* Changes every piece of per-thread state, on its own thread. */
static void *change_thread_state(void *arg) {
    (void)arg;
    ca_set_grad_enabled(false);
    ca_set_op_observer(count_op, &observed);
    ca_error_set(CA_STATUS_VALUE, "set on the other thread");
    ca_graph_break("other thread");
    ca_tensor *x = NULL, *y = NULL;
    if (ca_ones(CA_FLOAT32, 0, NULL, &x) == CA_OK && ca_neg(x, &y) == CA_OK)
        observed += 100; /* the observer ran too: 101 */
    ca_tensor_release(y);
    ca_tensor_release(x);
    return NULL;
}

Test(threads, per_thread_state_stays_on_its_thread) {
    ca_error_clear();
    ca_graph_break("main thread");
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, change_thread_state, NULL), 0);
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_assert_eq(observed, 101, "the other thread's observer saw %d", observed);
    cr_assert(ca_is_grad_enabled());
    cr_assert_eq(ca_last_status(), CA_OK);
    cr_assert_str_eq(ca_last_error(), "");
    cr_assert_str_eq(ca_graph_break_last_reason(), "main thread");
    ca_tensor *x, *y;
    TU_OK(ca_ones(CA_FLOAT32, 0, NULL, &x));
    TU_OK(ca_neg(x, &y)); /* no observer on this thread */
    cr_assert_eq(observed, 101);
    ca_tensor_release(y);
    ca_tensor_release(x);
}

/* ---------------------------------------------------------------------------------------
 * Distinct groups on several threads
 */
#define N_THREADS 4
#define STEPS     30
#define IN        48
#define HIDDEN    96
#define BATCH     64

static pthread_mutex_t backward_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct {
    int seed;
    float grad[HIDDEN * IN]; /* d loss / d w after STEPS backwards */
    ca_status st;
} mlp_job;

static void fill(float *v, int n, int seed) {
    for (int i = 0; i < n; i++)
        v[i] = (float)((i * 37 + seed * 11) % 23 - 11) / 16.0f;
}

/* STEPS forwards and backwards of mean(relu(x @ w^T + b)) into w.grad, every tensor the
 * job's own; only the backward takes the lock. */
static ca_status mlp_steps(mlp_job *j) {
    float xs[BATCH * IN], ws[HIDDEN * IN], bs[HIDDEN];
    fill(xs, BATCH * IN, j->seed);
    fill(ws, HIDDEN * IN, j->seed + 1);
    fill(bs, HIDDEN, j->seed + 2);
    ca_tensor *x = NULL, *w = NULL, *b = NULL;
    ca_status st = ca_from_data(CA_FLOAT32, 2, (int64_t[]){BATCH, IN}, xs, &x);
    if (st == CA_OK)
        st = ca_from_data(CA_FLOAT32, 2, (int64_t[]){HIDDEN, IN}, ws, &w);
    if (st == CA_OK)
        st = ca_from_data(CA_FLOAT32, 1, (int64_t[]){HIDDEN}, bs, &b);
    if (st == CA_OK)
        st = ca_tensor_set_requires_grad(w, true);
    if (st == CA_OK)
        st = ca_tensor_set_requires_grad(b, true);
    for (int k = 0; k < STEPS && st == CA_OK; k++) {
        ca_tensor *h = NULL, *a = NULL, *loss = NULL;
        st = ca_linear(x, w, b, &h);
        if (st == CA_OK)
            st = ca_relu(h, &a);
        if (st == CA_OK)
            st = ca_mean(a, 0, NULL, false, &loss);
        if (st == CA_OK) {
            pthread_mutex_lock(&backward_lock);
            st = ca_backward(loss);
            pthread_mutex_unlock(&backward_lock);
        }
        ca_tensor_release(loss);
        ca_tensor_release(a);
        ca_tensor_release(h);
    }
    if (st == CA_OK)
        st = ca_tensor_copy_to(ca_tensor_grad(w), j->grad, sizeof j->grad);
    ca_tensor_release(b);
    ca_tensor_release(w);
    ca_tensor_release(x);
    return st;
}

static void *mlp_thread(void *arg) {
    mlp_job *j = arg;
    j->st = mlp_steps(j);
    return NULL;
}

Test(threads, distinct_groups_run_at_once) {
    static mlp_job ref[N_THREADS], par[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) { /* one thread: the reference */
        ref[i].seed = par[i].seed = i;
        TU_OK(mlp_steps(&ref[i]));
    }
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, mlp_thread, &par[i]), 0);
    for (int i = 0; i < N_THREADS; i++)
        cr_assert_eq(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < N_THREADS; i++) {
        cr_assert_eq(par[i].st, CA_OK, "thread %d failed", i);
        for (int k = 0; k < HIDDEN * IN; k++) /* kernels may split work differently */
            cr_assert_float_eq(par[i].grad[k], ref[i].grad[k], 1e-6 + 1e-5 * fabsf(ref[i].grad[k]),
                               "thread %d, w.grad[%d]: %g, one thread: %g", i, k, par[i].grad[k],
                               ref[i].grad[k]);
    }
}
