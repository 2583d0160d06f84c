/* bench_compiled.c - eager backward vs compiled backward, side by side in one run.
 *
 * For each workload it prints medians (with min and max) over repeated runs of:
 *   - the eager backward (node by node);
 *   - the compiled backward on a cache hit;
 *   - the compile time of a miss, two ways: cagrad's internal timer (compile_ns: trace,
 *     graph passes, plan), and the cost of the miss measured the way the Python harness
 *     measures PyTorch's (a miss minus the mean of the hits just before and after it;
 *     the median of those differences, shown as a bound when it is within the noise);
 *   - the cache-lookup cost per node (walk + key collection + trie lookup).
 * Workloads: an MLP 784-256-256-10 at batch 64 with cross_entropy, and a chain of 200
 * pointwise ops on 4096 elements. Both backwards run on the same graph with the same
 * data, alternating, and their gradients are compared before anything is timed.
 *
 * Run: make bench-compiled   (or build/bench_compiled [reps])
 */
#include "autograd/compiled_key.h"
#include "autograd/compiled_cache.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        if ((expr) != CA_OK) {                                                                     \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, ca_last_error()); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    double median, min, max;
} stats;

static stats summarize(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return (stats){v[n / 2], v[0], v[n - 1]};
}

/* ---------------------------------------------------------------------------------------
 * Workloads: each builds a forward whose backward is timed, over fixed leaves.
 */
typedef struct {
    const char *name;
    int n_leaves;
    ca_tensor *leaves[8];
    ca_tensor *data[4];
    ca_tensor *(*forward)(void *w); /* returns the loss; keeps no references */
} workload;

static ca_tensor *randn_leaf(int64_t r, int64_t c, double scale) {
    int64_t shape[2] = {r, c};
    ca_tensor *t, *s;
    CHECK(ca_randn(CA_FLOAT32, c ? 2 : 1, shape, &t));
    CHECK(ca_mul_scalar(t, scale, &s));
    ca_tensor_release(t);
    CHECK(ca_tensor_set_requires_grad(s, true));
    return s;
}

static ca_tensor *mlp_forward(void *p) {
    workload *w = p;
    ca_tensor *h1, *a1, *h2, *a2, *y, *loss;
    CHECK(ca_linear(w->data[0], w->leaves[0], w->leaves[1], &h1));
    CHECK(ca_relu(h1, &a1));
    CHECK(ca_linear(a1, w->leaves[2], w->leaves[3], &h2));
    CHECK(ca_relu(h2, &a2));
    CHECK(ca_linear(a2, w->leaves[4], w->leaves[5], &y));
    CHECK(ca_cross_entropy(y, w->data[1], CA_REDUCTION_MEAN, -100, &loss));
    ca_tensor *tmp[] = {h1, a1, h2, a2, y};
    for (int i = 0; i < 5; i++)
        ca_tensor_release(tmp[i]);
    return loss;
}

static void mlp_setup(workload *w) {
    w->name = "MLP 784-256-256-10, batch 64";
    w->n_leaves = 6;
    w->leaves[0] = randn_leaf(256, 784, 0.05);
    w->leaves[1] = randn_leaf(256, 0, 0.01);
    w->leaves[2] = randn_leaf(256, 256, 0.06);
    w->leaves[3] = randn_leaf(256, 0, 0.01);
    w->leaves[4] = randn_leaf(10, 256, 0.06);
    w->leaves[5] = randn_leaf(10, 0, 0.01);
    int64_t xs[2] = {64, 784};
    CHECK(ca_randn(CA_FLOAT32, 2, xs, &w->data[0]));
    int64_t labels[64];
    for (int i = 0; i < 64; i++)
        labels[i] = (i * 7) % 10;
    int64_t ls[1] = {64};
    CHECK(ca_from_data(CA_INT64, 1, ls, labels, &w->data[1]));
    w->forward = mlp_forward;
}

/* 200 pointwise ops cycling through a few kinds, on 4096 elements. */
static ca_tensor *chain_forward(void *p) {
    workload *w = p;
    ca_tensor *x = ca_tensor_retain(w->leaves[0]), *y, *loss;
    for (int i = 0; i < 200; i++) {
        switch (i % 4) {
        case 0: CHECK(ca_mul(x, w->leaves[1], &y)); break;
        case 1: CHECK(ca_tanh(x, &y)); break;
        case 2: CHECK(ca_add_scalar(x, 0.1, &y)); break;
        default: CHECK(ca_sigmoid(x, &y)); break;
        }
        ca_tensor_release(x);
        x = y;
    }
    CHECK(ca_sum(x, 0, NULL, false, &loss));
    ca_tensor_release(x);
    return loss;
}

static void chain_setup(workload *w) {
    w->name = "pointwise chain, 200 ops x 4096";
    w->n_leaves = 2;
    w->leaves[0] = randn_leaf(4096, 0, 1.0);
    w->leaves[1] = randn_leaf(4096, 0, 1.0);
    w->forward = chain_forward;
}

static void workload_free(workload *w) {
    for (int i = 0; i < w->n_leaves; i++)
        ca_tensor_release(w->leaves[i]);
    for (int i = 0; i < 4; i++)
        ca_tensor_release(w->data[i]);
}

/* ---------------------------------------------------------------------------------------
 * Measuring
 */
static void clear_grads(workload *w) {
    for (int i = 0; i < w->n_leaves; i++)
        ca_tensor_set_grad(w->leaves[i], NULL);
}

/* One backward of a fresh forward; returns its time in microseconds. */
static double timed_backward(workload *w, bool compiled) {
    ca_tensor *loss = w->forward(w);
    clear_grads(w);
    if (compiled)
        CHECK(ca_compiled_autograd_enable(NULL));
    double t0 = now_us();
    CHECK(ca_backward(loss));
    double t = now_us() - t0;
    if (compiled)
        CHECK(ca_compiled_autograd_disable());
    ca_tensor_release(loss);
    return t;
}

/* Grads of one eager and one compiled backward must agree before anything is timed. */
static void check_agreement(workload *w) {
    float *eager[8];
    timed_backward(w, false);
    for (int i = 0; i < w->n_leaves; i++) {
        ca_tensor *g = ca_tensor_grad(w->leaves[i]);
        size_t n = (size_t)ca_tensor_numel(g);
        eager[i] = malloc(n * sizeof(float));
        CHECK(ca_tensor_copy_to(g, eager[i], n * sizeof(float)));
    }
    timed_backward(w, true);
    double worst = 0;
    for (int i = 0; i < w->n_leaves; i++) {
        ca_tensor *g = ca_tensor_grad(w->leaves[i]);
        const float *c = ca_tensor_data(g);
        for (int64_t k = 0; k < ca_tensor_numel(g); k++) {
            double d = fabs((double)c[k] - eager[i][k]) / (1e-5 + fabs((double)eager[i][k]));
            worst = d > worst ? d : worst;
        }
        free(eager[i]);
    }
    if (worst > 1e-3) {
        fprintf(stderr, "%s: compiled and eager gradients differ (worst relative %g)\n", w->name,
                worst);
        exit(1);
    }
}

/* Walk + key + trie lookup, per node, on a graph already in the cache. */
static double lookup_us_per_node(workload *w, int reps) {
    ca_tensor *loss = w->forward(w), *seed;
    CHECK(ca_ones(CA_FLOAT32, 0, NULL, &seed));
    ca_node *root = loss->grad_fn;
    ca_walk walk = {0};
    key_collect key = {0};
    ca_cache cache = {0};
    key_request req = {.n_roots = 1, .roots = &root, .seeds = &seed};
    CHECK(cai_walk_graph(&walk, &root, 1));
    CHECK(cai_key_collect_walk(&key, &walk, &req));
    cache_lookup l = cai_cache_find(&cache, &key);
    cache_leaf *leaf;
    cache_entry *e;
    CHECK(cai_cache_leaf_for(&cache, &key, &l, false, &leaf));
    CHECK(cai_cache_add_entry(leaf, &key, NULL, NULL, &e));
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int r = 0; r < reps; r++) {
        double t0 = now_us();
        CHECK(cai_walk_graph(&walk, &root, 1));
        CHECK(cai_key_collect_walk(&key, &walk, &req));
        if (cai_cache_find(&cache, &key).kind != LOOKUP_HIT)
            exit(1);
        t[r] = (now_us() - t0) / (key.n_nodes + 1);
    }
    double med = summarize(t, reps).median;
    free(t);
    cai_cache_clear(&cache);
    cai_key_collect_free(&key);
    cai_walk_free(&walk);
    ca_tensor_release(seed);
    ca_tensor_release(loss);
    return med;
}

/* Compile time on a miss: cagrad's internal timer, and miss - (hit before + hit after) / 2
 * per rep, the way the Python harness measures PyTorch's compiles. */
#define MISS_REPS 15

static int64_t compile_ns(void) {
    ca_compiled_counters c;
    ca_compiled_autograd_counters(&c);
    return c.compile_ns;
}

static void print_miss(workload *w) {
    double internal[MISS_REPS], cost[MISS_REPS];
    for (int r = 0; r < MISS_REPS; r++) {
        timed_backward(w, true); /* warm: the entry exists */
        double before = timed_backward(w, true);
        ca_compiled_autograd_reset();
        int64_t ns = compile_ns();
        double miss = timed_backward(w, true);
        internal[r] = (double)(compile_ns() - ns) / 1000.0;
        double after = timed_backward(w, true);
        cost[r] = miss - (before + after) / 2;
    }
    double mean = 0, var = 0;
    for (int r = 0; r < MISS_REPS; r++)
        mean += cost[r] / MISS_REPS;
    for (int r = 0; r < MISS_REPS; r++)
        var += (cost[r] - mean) * (cost[r] - mean) / (MISS_REPS - 1);
    stats si = summarize(internal, MISS_REPS), sc = summarize(cost, MISS_REPS);
    printf("  %-28s %10.1f us  (min %.1f, max %.1f)\n", "compile on a miss (internal)", si.median,
           si.min, si.max);
    double noise = 2 * sqrt(var / MISS_REPS); /* two standard errors of the mean */
    if (sc.median > noise)
        printf("  %-28s %10.1f us  (middle half %.1f to %.1f)\n", "miss cost, hit-subtracted",
               sc.median, cost[MISS_REPS / 4], cost[MISS_REPS - 1 - MISS_REPS / 4]);
    else
        printf("  %-28s <= %7.1f us  (in the noise: median %.1f, 2 s.e. %.1f)\n",
               "miss cost, hit-subtracted", (sc.median > 0 ? sc.median : 0) + noise, sc.median,
               noise);
}

static void bench(workload *w, int reps) {
    check_agreement(w);
    double *te = malloc(sizeof(double) * (size_t)reps), *tc = malloc(sizeof(double) * (size_t)reps);
    for (int r = 0; r < reps; r++) { /* alternate, so drift hits both alike */
        te[r] = timed_backward(w, false);
        tc[r] = timed_backward(w, true);
    }
    stats se = summarize(te, reps), sc = summarize(tc, reps);
    double lookup = lookup_us_per_node(w, reps);
    printf("%s\n", w->name);
    printf("  %-28s %10.1f us  (min %.1f, max %.1f)\n", "eager backward", se.median, se.min,
           se.max);
    printf("  %-28s %10.1f us  (min %.1f, max %.1f)  %.2fx eager\n", "compiled backward, hit",
           sc.median, sc.min, sc.max, se.median / sc.median);
    print_miss(w);
    printf("  %-28s %10.3f us\n\n", "cache lookup per node", lookup);
    free(te);
    free(tc);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 50;
    if (reps < 5)
        reps = 5;
    CHECK(ca_init());
    const char *core = getenv("OPENBLAS_CORETYPE");
    printf("cagrad compiled-backward benchmark: %d repetitions, medians\n", reps);
    printf("ISA %s, BLAS core %s%s, %d threads\n\n", cai_kern_isa_name(cai_kern_isa()),
           cai_kern_blas_core(), core ? " (OPENBLAS_CORETYPE set by the environment)" : "",
           ca_get_num_threads());
    ca_manual_seed(0);
    workload mlp = {0}, chain = {0};
    mlp_setup(&mlp);
    chain_setup(&chain);
    bench(&mlp, reps);
    bench(&chain, reps);
    workload_free(&mlp);
    workload_free(&chain);
    ca_compiled_autograd_reset();
    return 0;
}
