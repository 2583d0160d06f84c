/* dist_collectives.c - the ca_dist_* collectives across ranks, under
 * `mpirun -np N build/dist_collectives` (scripts/test-mpi.sh runs it with N = 2).
 *
 * Rank r contributes values that depend on r, so every result is known in closed form;
 * the program exits 1 on the first wrong value, naming it.
 */
#include <cagrad.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int rank, size;

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        if ((expr) != CA_OK) {                                                                     \
            fprintf(stderr, "rank %d: %s failed: %s\n", rank, #expr, ca_last_error());             \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void expect(const char *what, int i, double got, double want) {
    if (fabs(got - want) > 1e-6 * (1 + fabs(want))) {
        fprintf(stderr, "rank %d: %s[%d] = %g, expected %g\n", rank, what, i, got, want);
        exit(1);
    }
}

static ca_tensor *vec(ca_dtype dt, int n, double base) {
    double v[8];
    int64_t iv[8];
    for (int i = 0; i < n; i++) {
        v[i] = base + i;
        iv[i] = (int64_t)v[i];
    }
    ca_tensor *t = NULL;
    CHECK(ca_from_data(dt == CA_INT64 ? CA_INT64 : CA_FLOAT64, 1, (int64_t[]){n},
                       dt == CA_INT64 ? (const void *)iv : (const void *)v, &t));
    if (dt != CA_FLOAT32)
        return t;
    ca_tensor *c = NULL;
    CHECK(ca_to_dtype(t, dt, &c));
    ca_tensor_release(t);
    return c;
}

static double at(const ca_tensor *t, int i) {
    double v[16];
    ca_tensor *d = NULL;
    CHECK(ca_to_dtype((ca_tensor *)t, CA_FLOAT64, &d));
    CHECK(ca_tensor_copy_to(d, v, sizeof v));
    ca_tensor_release(d);
    return v[i];
}

/* sum over r of (r + 1) * 10 + i, and its mean */
static void reduce_checks(ca_dtype dt) {
    double ranks_sum = size * (size + 1) / 2.0;
    ca_tensor *t = vec(dt, 4, (rank + 1) * 10.0);
    CHECK(ca_dist_all_reduce(t, CA_DIST_SUM, NULL));
    for (int i = 0; i < 4; i++)
        expect("sum", i, at(t, i), 10 * ranks_sum + size * i);
    ca_tensor_release(t);
    t = vec(dt, 4, (rank + 1) * 10.0);
    CHECK(ca_dist_all_reduce(t, CA_DIST_MAX, NULL));
    for (int i = 0; i < 4; i++)
        expect("max", i, at(t, i), 10.0 * size + i);
    ca_tensor_release(t);
    t = vec(dt, 4, (rank + 1) * 10.0);
    CHECK(ca_dist_all_reduce(t, CA_DIST_MIN, NULL));
    for (int i = 0; i < 4; i++)
        expect("min", i, at(t, i), 10.0 + i);
    ca_tensor_release(t);
    if (dt == CA_INT64)
        return;
    t = vec(dt, 4, (rank + 1) * 10.0);
    ca_dist_work *w = NULL;
    CHECK(ca_dist_all_reduce(t, CA_DIST_AVG, &w));
    CHECK(ca_dist_work_wait(w));
    ca_dist_work_free(w);
    for (int i = 0; i < 4; i++)
        expect("avg", i, at(t, i), 10 * ranks_sum / size + i);
    ca_tensor_release(t);
}

int main(void) {
    CHECK(ca_init());
    CHECK(ca_dist_init(30));
    CHECK(ca_dist_rank(&rank));
    CHECK(ca_dist_world_size(&size));
    reduce_checks(CA_FLOAT32);
    reduce_checks(CA_FLOAT64);
    reduce_checks(CA_INT64);

    ca_tensor *b = vec(CA_FLOAT32, 3, 100.0 * rank);
    CHECK(ca_dist_broadcast(b, size - 1, NULL));
    for (int i = 0; i < 3; i++)
        expect("broadcast", i, at(b, i), 100.0 * (size - 1) + i);

    ca_tensor *all = NULL;
    CHECK(ca_zeros(CA_FLOAT32, 1, (int64_t[]){3 * size}, &all));
    ca_dist_work *w = NULL;
    ca_tensor *mine = vec(CA_FLOAT32, 3, 100.0 * rank);
    CHECK(ca_dist_all_gather(mine, all, &w));
    bool done = false;
    while (!done)
        CHECK(ca_dist_work_is_completed(w, &done));
    ca_dist_work_free(w);
    for (int i = 0; i < 3 * size; i++)
        expect("all_gather", i, at(all, i), 100.0 * (i / 3) + i % 3);
    CHECK(ca_dist_barrier(NULL));
    ca_tensor_release(b);
    ca_tensor_release(all);
    ca_tensor_release(mine);
    CHECK(ca_dist_finalize());
    printf("dist_collectives: rank %d of %d OK\n", rank, size);
    return 0;
}
