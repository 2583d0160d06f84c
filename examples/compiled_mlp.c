/* compiled_mlp.c - train a small MLP with compiled autograd, watch the cache, and draw the
 * compiled backward.
 *
 * The model is 16 -> 32 -> 4 (ca_linear, ca_relu, ca_linear, ca_cross_entropy), trained
 * with plain SGD on a toy problem (the class is the largest of the first four features).
 * Every backward runs compiled: the first one is traced, optimised and planned; the
 * batch then grows from 64 to 128, which recompiles once with the batch dim symbolic;
 * a batch of 96 afterwards hits that graph without a recompile. The program prints the
 * counters, checks them, and writes the graph of the latest compiled backward as
 * Graphviz DOT (ca_graph_write_dot).
 *
 *   ./build/compiled_mlp [out.dot]      default: $TMPDIR/compiled_mlp.dot (or /tmp)
 *   dot -Tsvg out.dot -o out.svg        render it
 *   CAGRAD_LOGS=compiled_autograd_verbose ./build/compiled_mlp     the graph and miss reasons
 *
 * Exit status: 0 when training worked and the counters are as expected, 1 otherwise.
 * It releases everything it makes (CI runs it under LeakSanitizer).
 */
#include <cagrad.h>

#include <stdio.h>
#include <stdlib.h>

enum { N_IN = 16, HIDDEN = 32, N_CLASSES = 4, MAX_BATCH = 128, STEPS_PER_PHASE = 20 };
static const double LEARNING_RATE = 0.1;

#define CHECK(call)                                                                                \
    do {                                                                                           \
        ca_status check_st_ = (call);                                                              \
        if (check_st_ != CA_OK) {                                                                  \
            fprintf(stderr, "compiled_mlp: %s failed (%s): %s\n", #call,                           \
                    ca_status_name(check_st_), ca_last_error());                                   \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* ---------------------------------------------------------------------------------------
 * Data: x [batch, N_IN] normal values, y [batch] = argmax of x's first N_CLASSES columns
 */
static ca_status make_batch(int64_t batch, ca_tensor **x_out, ca_tensor **y_out) {
    ca_tensor *x = NULL, *y = NULL;
    float xs[MAX_BATCH * N_IN];
    int64_t labels[MAX_BATCH];
    *x_out = *y_out = NULL;
    CHECK(ca_randn(CA_FLOAT32, 2, (int64_t[]){batch, N_IN}, &x));
    CHECK(ca_tensor_copy_to(x, xs, sizeof(float) * (size_t)(batch * N_IN)));
    for (int64_t i = 0; i < batch; i++) {
        int best = 0;
        for (int c = 1; c < N_CLASSES; c++)
            if (xs[i * N_IN + c] > xs[i * N_IN + best])
                best = c;
        labels[i] = best;
    }
    CHECK(ca_from_data(CA_INT64, 1, &batch, labels, &y));
    *x_out = x;
    *y_out = y;
    return CA_OK;
fail:
    ca_tensor_release(x);
    ca_tensor_release(y);
    return ca_last_status();
}

/* ---------------------------------------------------------------------------------------
 * The model: w1 [HIDDEN, N_IN], b1, w2 [N_CLASSES, HIDDEN], b2
 */
enum { N_PARAMS = 4 };

static ca_status make_param(int ndim, const int64_t *shape, double scale, ca_tensor **out) {
    ca_tensor *raw = NULL;
    *out = NULL;
    bool prev = ca_set_grad_enabled(false);
    ca_status st = ca_randn(CA_FLOAT32, ndim, shape, &raw);
    if (st == CA_OK)
        st = ca_mul_scalar(raw, scale, out);
    ca_set_grad_enabled(prev);
    ca_tensor_release(raw);
    if (st == CA_OK)
        st = ca_tensor_set_requires_grad(*out, true);
    return st;
}

static ca_status init_params(ca_tensor **p) {
    CHECK(make_param(2, (int64_t[]){HIDDEN, N_IN}, 0.35, &p[0]));
    CHECK(make_param(1, (int64_t[]){HIDDEN}, 0.0, &p[1]));
    CHECK(make_param(2, (int64_t[]){N_CLASSES, HIDDEN}, 0.25, &p[2]));
    CHECK(make_param(1, (int64_t[]){N_CLASSES}, 0.0, &p[3]));
    return CA_OK;
fail:
    return ca_last_status();
}

/* loss = cross_entropy(linear(relu(linear(x, w1, b1)), w2, b2), y). Intermediates are
 * released at once: the autograd graph keeps what the backward needs. */
static ca_status forward_loss(ca_tensor *const *p, ca_tensor *x, ca_tensor *y, ca_tensor **loss) {
    ca_tensor *h = NULL, *a = NULL, *logits = NULL;
    *loss = NULL;
    ca_status st = ca_linear(x, p[0], p[1], &h);
    if (st == CA_OK)
        st = ca_relu(h, &a);
    if (st == CA_OK)
        st = ca_linear(a, p[2], p[3], &logits);
    if (st == CA_OK)
        st = ca_cross_entropy(logits, y, CA_REDUCTION_MEAN, -100, loss);
    ca_tensor_release(h);
    ca_tensor_release(a);
    ca_tensor_release(logits);
    return st;
}

/* p -= lr * p.grad, then p.grad = None (no recompile: accumulation is decided at run time) */
static ca_status sgd_step(ca_tensor *const *p) {
    bool prev = ca_set_grad_enabled(false);
    ca_status st = CA_OK;
    for (int i = 0; i < N_PARAMS && st == CA_OK; i++) {
        ca_tensor *g = ca_tensor_grad(p[i]); /* borrowed */
        if (g)
            st = ca_add_(p[i], g, -LEARNING_RATE);
        if (st == CA_OK)
            st = ca_tensor_set_grad(p[i], NULL);
    }
    ca_set_grad_enabled(prev);
    return st;
}

/* STEPS_PER_PHASE steps on one batch; *first and *last get the first and last losses. */
static ca_status train_phase(ca_tensor *const *p, int64_t batch, double *first, double *last) {
    ca_tensor *x = NULL, *y = NULL, *loss = NULL;
    CHECK(make_batch(batch, &x, &y));
    for (int step = 0; step < STEPS_PER_PHASE; step++) {
        CHECK(forward_loss(p, x, y, &loss));
        CHECK(ca_tensor_item(loss, step == 0 ? first : last));
        CHECK(ca_backward(loss)); /* compiled: a cache lookup, then one planned graph */
        CHECK(sgd_step(p));
        ca_tensor_release(loss);
        loss = NULL;
    }
    printf("batch %3lld: loss %.4f -> %.4f\n", (long long)batch, *first, *last);
    ca_tensor_release(x);
    ca_tensor_release(y);
    return CA_OK;
fail:
    ca_tensor_release(x);
    ca_tensor_release(y);
    ca_tensor_release(loss);
    return ca_last_status();
}

int main(int argc, char **argv) {
    ca_tensor *p[N_PARAMS] = {0};
    bool enabled = false;
    int rc = 1;
    char path[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s", argc > 1 ? argv[1] : "");
    if (argc <= 1)
        snprintf(path, sizeof path, "%s/compiled_mlp.dot", tmp && *tmp ? tmp : "/tmp");

    ca_manual_seed(7);
    CHECK(init_params(p));
    CHECK(ca_compiled_autograd_enable(NULL)); /* static sizes first; a change recompiles */
    enabled = true;

    const int64_t batches[3] = {64, 128, 96};
    double first = 0, last = 0, start = 0;
    for (int k = 0; k < 3; k++) {
        CHECK(train_phase(p, batches[k], &first, &last));
        if (k == 0)
            start = first;
    }

    ca_compiled_counters c;
    ca_compiled_autograd_counters(&c);
    printf("captures=%lld cache_hits=%lld cache_misses=%lld graphs=%lld fused_kernels=%lld "
           "eager_fallbacks=%lld\n",
           (long long)c.captures, (long long)c.cache_hits, (long long)c.cache_misses,
           (long long)c.graphs, (long long)c.fused_kernels, (long long)c.eager_fallbacks);

    CHECK(ca_graph_write_dot(path)); /* the batch-96 backward: the dynamic graph */
    printf("wrote the compiled backward to %s (render: dot -Tsvg %s -o graph.svg)\n", path, path);

    /* 64: capture; 128: recompile with the batch symbolic; 96: hits that graph */
    if (c.captures != 2 || c.cache_misses != 2 || c.cache_hits != 3 * STEPS_PER_PHASE - 2 ||
        c.eager_fallbacks != 0) {
        fprintf(stderr,
                "compiled_mlp: unexpected counters (want captures=2, misses=2, "
                "hits=%d, no eager fallback)\n",
                3 * STEPS_PER_PHASE - 2);
        goto fail;
    }
    if (!(last < start)) {
        fprintf(stderr, "compiled_mlp: the loss did not go down (%.4f -> %.4f)\n", start, last);
        goto fail;
    }
    rc = 0;
fail:
    if (enabled)
        ca_compiled_autograd_disable();
    ca_compiled_autograd_reset(); /* frees the cached graphs */
    for (int i = 0; i < N_PARAMS; i++)
        ca_tensor_release(p[i]);
    return rc;
}
