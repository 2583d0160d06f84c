/* mlp_sgd.c - train a small neural network with cagrad and plain SGD.
 *
 * This example is a tour of the C API in one program. It
 *   1. makes a toy data set: points in the plane, class 0 inside a disc of radius 0.5,
 *      class 1 on a ring of radius 0.8 to 1.2 (concentric circles: not linearly
 *      separable, so the hidden layers have real work to do);
 *   2. builds a multi-layer perceptron 2 -> 32 -> 32 -> 2 out of ca_linear and ca_relu;
 *   3. trains it with full-batch gradient descent:
 *        logits = mlp(x); loss = cross_entropy(logits, y);
 *        ca_backward(loss)           fills .grad of every parameter;
 *        p -= lr * p.grad            under ca_set_grad_enabled(false), like torch.no_grad();
 *        p.grad = None               ca_tensor_set_grad(p, NULL), so gradients do not pile up;
 *   4. prints the loss every 50 steps and the final accuracy.
 *
 * Every cagrad call returns a ca_status; on failure ca_last_error() says what went wrong
 * and how to fix it. This program checks every call (the CHECK macro) and releases every
 * tensor it owns (it runs under LeakSanitizer in CI). Each `ca_tensor **out` gives a new
 * reference that must be released with ca_tensor_release(); getters such as
 * ca_tensor_grad() return borrowed pointers that must not be released.
 *
 * Exit status: 0 when training worked, 1 on any error or when the loss did not go down.
 *
 * Build and run:  make demo   (or: ./build/mlp_sgd)
 */
#include <cagrad.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum {
    N_POINTS = 256, /* half per class */
    HIDDEN = 32,
    N_CLASSES = 2,
    STEPS = 600,
    PRINT_EVERY = 50,
};
static const double LEARNING_RATE = 0.2;

/* On failure: print the library's message and jump to the cleanup label. */
#define CHECK(call)                                                                                \
    do {                                                                                           \
        ca_status check_st_ = (call);                                                              \
        if (check_st_ != CA_OK) {                                                                  \
            fprintf(stderr, "mlp_sgd: %s failed (%s): %s\n", #call, ca_status_name(check_st_),     \
                    ca_last_error());                                                              \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* ---------------------------------------------------------------------------------------
 * Data: points x [N, 2] (float32) and class labels y [N] (int64, as cross_entropy wants)
 */
static ca_status make_circles(ca_tensor **x_out, ca_tensor **y_out) {
    const int64_t n = N_POINTS;
    ca_tensor *radius = NULL, *angle = NULL, *x = NULL, *y = NULL;
    float r[N_POINTS], a[N_POINTS], xy[N_POINTS * 2];
    int64_t labels[N_POINTS];
    *x_out = *y_out = NULL;

    /* uniform random numbers from cagrad's seeded generator (reproducible runs) */
    CHECK(ca_rand(CA_FLOAT32, 1, &n, &radius));
    CHECK(ca_rand(CA_FLOAT32, 1, &n, &angle));
    CHECK(ca_tensor_copy_to(radius, r, sizeof r));
    CHECK(ca_tensor_copy_to(angle, a, sizeof a));
    for (int i = 0; i < N_POINTS; i++) {
        int cls = i % 2;
        float rad = cls == 0 ? 0.5f * r[i] : 0.8f + 0.4f * r[i];
        float theta = 6.2831853f * a[i];
        xy[2 * i] = rad * cosf(theta);
        xy[2 * i + 1] = rad * sinf(theta);
        labels[i] = cls;
    }
    CHECK(ca_from_data(CA_FLOAT32, 2, (int64_t[]){N_POINTS, 2}, xy, &x));
    CHECK(ca_from_data(CA_INT64, 1, &n, labels, &y));
    ca_tensor_release(radius);
    ca_tensor_release(angle);
    *x_out = x;
    *y_out = y;
    return CA_OK;
fail:
    ca_tensor_release(radius);
    ca_tensor_release(angle);
    ca_tensor_release(x);
    ca_tensor_release(y);
    return ca_last_status();
}

/* ---------------------------------------------------------------------------------------
 * The model: three linear layers. Weights are [out, in] (as torch.nn.Linear), so
 * ca_linear computes x @ w^T + b.
 */
enum { N_PARAMS = 6 };
typedef struct {
    ca_tensor *p[N_PARAMS]; /* w1, b1, w2, b2, w3, b3 */
} mlp;

/* A parameter: normal values scaled for ReLU layers (He init), then marked as a leaf that
 * requires grad. The scaling runs with grad mode off: it is set-up, not part of the model. */
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

static ca_status mlp_init(mlp *m) {
    const int64_t sizes[4] = {2, HIDDEN, HIDDEN, N_CLASSES};
    for (int layer = 0; layer < 3; layer++) {
        int64_t in = sizes[layer], out = sizes[layer + 1];
        CHECK(make_param(2, (int64_t[]){out, in}, sqrt(2.0 / (double)in), &m->p[2 * layer]));
        CHECK(ca_zeros(CA_FLOAT32, 1, &out, &m->p[2 * layer + 1])); /* biases start at 0 */
        CHECK(ca_tensor_set_requires_grad(m->p[2 * layer + 1], true));
    }
    return CA_OK;
fail:
    return ca_last_status();
}

static void mlp_free(mlp *m) {
    for (int i = 0; i < N_PARAMS; i++) {
        ca_tensor_release(m->p[i]);
        m->p[i] = NULL;
    }
}

/* logits = linear(relu(linear(relu(linear(x))))). Intermediates are released as soon as
 * they are used: the autograd graph keeps what the backward needs by itself. */
static ca_status mlp_forward(const mlp *m, ca_tensor *x, ca_tensor **logits) {
    ca_tensor *h = NULL, *a = NULL;
    ca_tensor *cur = ca_tensor_retain(x);
    *logits = NULL;
    for (int layer = 0; layer < 3; layer++) {
        CHECK(ca_linear(cur, m->p[2 * layer], m->p[2 * layer + 1], &h));
        ca_tensor_release(cur);
        cur = NULL;
        if (layer == 2)
            break;
        CHECK(ca_relu(h, &a));
        ca_tensor_release(h);
        h = NULL;
        cur = a;
        a = NULL;
    }
    *logits = h;
    return CA_OK;
fail:
    ca_tensor_release(cur);
    ca_tensor_release(h);
    ca_tensor_release(a);
    return ca_last_status();
}

/* p -= lr * p.grad for every parameter, then clear the gradients. */
static ca_status sgd_step(mlp *m, double lr) {
    bool prev = ca_set_grad_enabled(false); /* in-place updates of leaves need no-grad */
    ca_status st = CA_OK;
    for (int i = 0; i < N_PARAMS && st == CA_OK; i++) {
        ca_tensor *g = ca_tensor_grad(m->p[i]); /* borrowed */
        if (g)
            st = ca_add_(m->p[i], g, -lr);
        if (st == CA_OK)
            st = ca_tensor_set_grad(m->p[i], NULL);
    }
    ca_set_grad_enabled(prev);
    return st;
}

/* Fraction of points whose largest logit is the right class. */
static ca_status accuracy(ca_tensor *logits, ca_tensor *y, double *acc) {
    ca_tensor *values = NULL, *pred = NULL;
    int64_t p[N_POINTS], t[N_POINTS];
    CHECK(ca_max(logits, 1, (int64_t[]){1}, false, &values, &pred)); /* argmax over classes */
    CHECK(ca_tensor_copy_to(pred, p, sizeof p));
    CHECK(ca_tensor_copy_to(y, t, sizeof t));
    int correct = 0;
    for (int i = 0; i < N_POINTS; i++)
        correct += p[i] == t[i];
    *acc = (double)correct / N_POINTS;
    ca_tensor_release(values);
    ca_tensor_release(pred);
    return CA_OK;
fail:
    ca_tensor_release(values);
    ca_tensor_release(pred);
    return ca_last_status();
}

int main(void) {
    ca_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
    mlp model = {{0}};
    double first_loss = NAN, last_loss = NAN, acc = 0;
    int rc = 1;

    CHECK(ca_init()); /* optional: reports an incomplete library before any work */
    ca_manual_seed(1234);
    CHECK(make_circles(&x, &y));
    CHECK(mlp_init(&model));

    for (int step = 0; step <= STEPS; step++) {
        CHECK(mlp_forward(&model, x, &logits));
        CHECK(ca_cross_entropy(logits, y, CA_REDUCTION_MEAN, -100, &loss));
        CHECK(ca_tensor_item(loss, &last_loss));
        if (step == 0)
            first_loss = last_loss;
        if (step % PRINT_EVERY == 0)
            printf("step %4d  loss %.4f\n", step, last_loss);
        if (step < STEPS) {
            CHECK(ca_backward(loss)); /* d loss / d p into every parameter's .grad */
            CHECK(sgd_step(&model, LEARNING_RATE));
        } else {
            CHECK(accuracy(logits, y, &acc));
        }
        /* releasing the loss and logits frees this step's graph */
        ca_tensor_release(loss);
        ca_tensor_release(logits);
        loss = logits = NULL;
    }

    printf("final loss %.4f (initial %.4f), accuracy %.1f%%\n", last_loss, first_loss, 100.0 * acc);
    if (!(last_loss < first_loss)) {
        fprintf(stderr, "mlp_sgd: the loss did not go down: the engine is broken\n");
        goto fail;
    }
    rc = 0;
fail:
    ca_tensor_release(loss);
    ca_tensor_release(logits);
    ca_tensor_release(x);
    ca_tensor_release(y);
    mlp_free(&model);
    return rc;
}
