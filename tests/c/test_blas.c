/* test_blas.c - the BLAS behind the GEMMs: what it reports (ca_get_blas_info,
 * ca_show_config), the pool's gang that runs OpenBLAS's threads, and threaded GEMMs that
 * equal one-thread ones bit for bit.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cagrad.h"
#include "codegen/kern.h"

static int tb_isa_rank(const char *isa) {
    if (strcmp(isa, "avx512") == 0)
        return 2;
    if (strcmp(isa, "avx2") == 0)
        return 1;
    cr_assert_str_eq(isa, "scalar");
    return 0;
}

Test(blas, info_is_consistent) {
    ca_blas_info b;
    ca_get_blas_info(&b);
    cr_assert(strcmp(b.name, "system") == 0 || strcmp(b.name, "scipy-openblas32") == 0, "%s",
              b.name);
    cr_assert_str_eq(b.core, ca_blas_core());
    cr_assert(strstr(b.config, b.version) != NULL, "version %s not in config '%s'", b.version,
              b.config);
    int a, c, d;
    cr_assert_eq(sscanf(b.version, "%d.%d.%d", &a, &c, &d), 3, "version '%s'", b.version);
    /* the warning is there exactly when the kernels are below the CPU */
    bool below = tb_isa_rank(b.core_isa) < tb_isa_rank(b.cpu_isa);
    cr_assert_eq(b.warning != NULL, below, "core %s (%s), cpu %s, warning %s", b.core, b.core_isa,
                 b.cpu_isa, b.warning ? b.warning : "(none)");
    ca_get_blas_info(NULL); /* no crash */
}

Test(blas, show_config_is_snprintf_like) {
    size_t need = ca_show_config(NULL, 0);
    cr_assert_gt(need, 40);
    char *full = malloc(need + 1);
    cr_assert_eq(ca_show_config(full, need + 1), need);
    cr_assert_eq(strlen(full), need);
    cr_assert(strstr(full, "OpenBLAS") && strstr(full, ca_blas_core()) &&
                  strstr(full, ca_version()),
              "%s", full);
    char small[16];
    cr_assert_eq(ca_show_config(small, sizeof small), need);
    cr_assert_eq(strlen(small), sizeof small - 1);
    cr_assert(strncmp(small, full, sizeof small - 1) == 0);
    free(full);
}

/* Each job arrives, then waits (bounded) for every other: that finishes only when all
 * run at once on threads of their own. */
typedef struct {
    atomic_int arrived;
    int n;
    atomic_int timed_out;
    pthread_t job0; /* the thread that ran job 0 */
} tb_gang;

static void tb_gang_job(void *ctx, int64_t begin, int64_t end) {
    tb_gang *g = ctx;
    cr_assert_eq(end - begin, 1);
    if (begin == 0)
        g->job0 = pthread_self();
    atomic_fetch_add(&g->arrived, 1);
    int64_t t0 = cai_kern_now_ns();
    while (atomic_load(&g->arrived) < g->n)
        if (cai_kern_now_ns() - t0 > 5000000000LL) {
            atomic_store(&g->timed_out, 1);
            return;
        }
}

Test(blas, gang_runs_every_job_at_once) {
    if (ca_set_num_threads(2) < 2)
        cr_skip_test("needs 2 cores");
    for (int rep = 0; rep < 50; rep++) {
        tb_gang g = {.n = 2};
        cr_assert(cai_kern_gang(2, tb_gang_job, &g));
        cr_assert_eq(atomic_load(&g.arrived), 2);
        cr_assert_eq(atomic_load(&g.timed_out), 0, "rep %d: the jobs did not run at once", rep);
        cr_assert(pthread_equal(g.job0, pthread_self()), "job 0 ran on another thread");
    }
    tb_gang g = {.n = 3};
    cr_assert_not(cai_kern_gang(3, tb_gang_job, &g), "3 jobs on a pool of 2 cannot be a gang");
    cr_assert_eq(atomic_load(&g.arrived), 0);
}

static void tb_gang_from_worker(void *ctx, int64_t begin, int64_t end) {
    atomic_int *refused = ctx;
    tb_gang g = {.n = 2};
    for (int64_t i = begin; i < end; i++)
        if (!cai_kern_gang(2, tb_gang_job, &g))
            atomic_fetch_add(refused, 1);
}

Test(blas, gang_refuses_inside_a_pool_job) {
    if (ca_set_num_threads(2) < 2)
        cr_skip_test("needs 2 cores");
    atomic_int refused = 0;
    cai_kern_parallel_for(2, 1, tb_gang_from_worker, &refused);
    cr_assert_eq(atomic_load(&refused), 2);
}

static void tb_fill(float *p, int64_t n, uint32_t seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
}

/* A GEMM big enough to thread (through OpenBLAS's callback where this OpenBLAS has it,
 * else in tiles) gives one thread's result within rounding: neither cuts K, but OpenBLAS's
 * kernels round an element by where it falls in their register blocks, so the last bits
 * may differ. Each entry is within the bound of a K-term dot product on either side,
 * 2 K u sum_k |a_ik b_kj| (u = 2^-24). */
Test(blas, threaded_gemm_is_one_threads_within_rounding) {
    const int64_t M = 120, N = 112, K = 1300; /* OpenBLAS's threads, where it has them */
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *c1 = malloc(sizeof(float) * M * N), *c2 = malloc(sizeof(float) * M * N);
    tb_fill(a, M * K, 1);
    tb_fill(b, K * N, 2);
    kern_mat A = {(const char *)a, K, 1, 0}, B = {(const char *)b, N, 1, 0};
    ca_set_num_threads(1);
    cr_assert_eq(cai_kern_gemm(KERN_F32, 1, M, N, K, 1.0, A, false, B, false, 0.0, c1, N, 0), 0);
    if (ca_set_num_threads(2) < 2)
        cr_skip_test("needs 2 cores");
    uint64_t before = cai_kern_blas_callbacks();
    cr_assert_eq(cai_kern_gemm(KERN_F32, 1, M, N, K, 1.0, A, false, B, false, 0.0, c2, N, 0), 0);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double mag = 0.0;
            for (int64_t k = 0; k < K; k++)
                mag += fabs((double)a[i * K + k] * (double)b[k * N + j]);
            double diff = fabs((double)c1[i * N + j] - (double)c2[i * N + j]);
            cr_assert_leq(diff, 2.0 * (double)K * 0x1p-24 * mag, "C[%ld, %ld]: %g apart", (long)i,
                          (long)j, diff);
        }
    ca_blas_info info;
    ca_get_blas_info(&info);
    if (strstr(info.threading, "callback"))
        cr_assert_gt(cai_kern_blas_callbacks(), before, "OpenBLAS did not thread through the pool");
    else
        cr_assert_eq(cai_kern_blas_callbacks(), 0);
    free(a);
    free(b);
    free(c1);
    free(c2);
}

/* The same GEMM at the same thread count gives the same bits wherever it is called: from
 * the caller, with the pool free, and from inside a pool job, with the pool busy. Which way
 * it goes (OpenBLAS's threads through the callback, or tiles) depends on its sizes and the
 * thread count alone; a GEMM for OpenBLAS's threads called inside a pool job runs its jobs
 * on threads made for the call. It used to fall back to tiles there, which with OpenBLAS's
 * Haswell kernels differed in the last bits: the compiled backward's steps side by side
 * then differed from the same plan run in order. */
typedef struct {
    int64_t M, N, K;
    float *a, *b, *want; /* want: the caller's result, with the pool free */
    kern_mat A, B;
    float *c[2];
    atomic_int failed;
} tb_busy_gemm;

/* 17.5M multiply-adds into a C too small for tiles of 128 rows: OpenBLAS's threads. */
static void tb_busy_gemm_init(tb_busy_gemm *g, uint32_t seed) {
    *g = (tb_busy_gemm){.M = 120, .N = 112, .K = 1300};
    g->a = malloc(sizeof(float) * g->M * g->K);
    g->b = malloc(sizeof(float) * g->K * g->N);
    g->want = malloc(sizeof(float) * g->M * g->N);
    for (int i = 0; i < 2; i++)
        g->c[i] = malloc(sizeof(float) * g->M * g->N);
    tb_fill(g->a, g->M * g->K, seed);
    tb_fill(g->b, g->K * g->N, seed + 1);
    g->A = (kern_mat){(const char *)g->a, g->K, 1, 0};
    g->B = (kern_mat){(const char *)g->b, g->N, 1, 0};
    cr_assert_eq(cai_kern_gemm(KERN_F32, 1, g->M, g->N, g->K, 1.0, g->A, false, g->B, false, 0.0,
                               g->want, g->N, 0),
                 0);
}

static void tb_busy_gemm_free(tb_busy_gemm *g) {
    free(g->a);
    free(g->b);
    free(g->want);
    free(g->c[0]);
    free(g->c[1]);
}

static void tb_busy_gemm_job(void *ctx, int64_t begin, int64_t end) {
    tb_busy_gemm *g = ctx;
    for (int64_t i = begin; i < end; i++)
        if (cai_kern_gemm(KERN_F32, 1, g->M, g->N, g->K, 1.0, g->A, false, g->B, false, 0.0,
                          g->c[i], g->N, 0) != 0)
            atomic_store(&g->failed, 1);
}

Test(blas, gemm_keeps_its_bits_where_the_pool_is_busy) {
    if (ca_set_num_threads(2) < 2)
        cr_skip_test("needs 2 cores");
    tb_busy_gemm g;
    tb_busy_gemm_init(&g, 5);
    cai_kern_parallel_for(2, 1, tb_busy_gemm_job, &g); /* two GEMMs, each in a pool job */
    cr_assert_eq(atomic_load(&g.failed), 0);
    for (int i = 0; i < 2; i++)
        cr_assert(memcmp(g.want, g.c[i], sizeof(float) * g.M * g.N) == 0,
                  "the GEMM in pool job %d differs from the caller's", i);
    tb_busy_gemm_free(&g);
}

/* Two threads, each with GEMMs for OpenBLAS's threads: one calls them directly, the other
 * from inside its pool jobs. The first holds the lock on OpenBLAS's thread count while its
 * jobs look for the pool, which the second's job holds while it waits for that lock: had
 * the first waited for the pool, neither would go on. Every result keeps its bits. */
typedef struct {
    tb_busy_gemm g;
    atomic_int mismatches;
} tb_race;

static void tb_race_job(void *ctx, int64_t begin, int64_t end) {
    tb_race *r = ctx;
    for (int64_t i = begin; i < end; i++) {
        tb_busy_gemm_job(&r->g, i, i + 1);
        if (memcmp(r->g.want, r->g.c[i], sizeof(float) * r->g.M * r->g.N) != 0)
            atomic_fetch_add(&r->mismatches, 1);
    }
}

static void *tb_race_in_pool(void *arg) {
    for (int rep = 0; rep < 30; rep++)
        cai_kern_parallel_for(2, 1, tb_race_job, arg);
    return NULL;
}

Test(blas, gemms_from_a_pool_job_and_another_thread_do_not_wait_on_each_other, .timeout = 120) {
    if (ca_set_num_threads(2) < 2)
        cr_skip_test("needs 2 cores");
    tb_race r;
    tb_busy_gemm_init(&r.g, 7);
    atomic_init(&r.mismatches, 0);
    tb_busy_gemm *g = &r.g;
    float *c = malloc(sizeof(float) * g->M * g->N);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, tb_race_in_pool, &r), 0);
    for (int rep = 0; rep < 60; rep++) {
        cr_assert_eq(cai_kern_gemm(KERN_F32, 1, g->M, g->N, g->K, 1.0, g->A, false, g->B, false,
                                   0.0, c, g->N, 0),
                     0);
        if (memcmp(g->want, c, sizeof(float) * g->M * g->N) != 0)
            atomic_fetch_add(&r.mismatches, 1);
    }
    pthread_join(th, NULL);
    cr_assert_eq(atomic_load(&g->failed), 0);
    cr_assert_eq(atomic_load(&r.mismatches), 0);
    free(c);
    tb_busy_gemm_free(g);
}

/* A vector output gives the same bits in either orientation: C = A b as a column [M, 1]
 * and C^T = b^T A^T as a row [1, M]. OpenBLAS sends each to a GEMV whose kernel sums in
 * its own order (with the Haswell kernels the two differed in the last bits), so
 * cai_kern_gemm gives every vector output the row form: a compiled backward that folds a
 * transpose into its GEMM then matches the eager one. */
Test(blas, vector_output_is_the_same_in_either_orientation) {
    const int64_t M = 37, K = 300;
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K);
    double *ad = malloc(sizeof(double) * M * K), *bd = malloc(sizeof(double) * K);
    float c1[37], c2[37];
    double d1[37], d2[37];
    tb_fill(a, M * K, 3);
    tb_fill(b, K, 4);
    for (int64_t i = 0; i < M * K; i++)
        ad[i] = a[i] + a[(i * 7) % (M * K)] * 1e-3;
    for (int64_t i = 0; i < K; i++)
        bd[i] = b[i] - b[(i * 5) % K] * 1e-3;
    ca_set_num_threads(1);
    for (int d = 0; d < 2; d++) {
        kern_dtype dt = d ? KERN_F64 : KERN_F32;
        const char *pa = d ? (const char *)ad : (const char *)a;
        const char *pb = d ? (const char *)bd : (const char *)b;
        void *col = d ? (void *)d1 : (void *)c1, *row = d ? (void *)d2 : (void *)c2;
        kern_mat A = {pa, K, 1, 0}, bcol = {pb, 1, 1, 0}, brow = {pb, K, 1, 0};
        cr_assert_eq(cai_kern_gemm(dt, 1, M, 1, K, 1.0, A, false, bcol, false, 0.0, col, 1, 0), 0);
        cr_assert_eq(cai_kern_gemm(dt, 1, 1, M, K, 1.0, brow, false, A, true, 0.0, row, M, 0), 0);
        size_t bytes = (size_t)M * (d ? sizeof(double) : sizeof(float));
        cr_assert(memcmp(col, row, bytes) == 0, "float%d: the two orientations differ",
                  d ? 64 : 32);
    }
    free(a);
    free(b);
    free(ad);
    free(bd);
}

/* Helping: a gang's job 0 starts a parallel loop inside the gang; job 1, idle, joins it
 * through cai_kern_help. Every chunk runs once, and both threads take part. */
typedef struct {
    atomic_int helper_ready, done_loop;
    atomic_int chunks_by[2];
    atomic_int hits[4096];
    pthread_t job0;
    atomic_bool expect_help;
} tb_help;

static void tb_help_range(void *ctx, int64_t begin, int64_t end) {
    tb_help *h = ctx;
    int who = pthread_equal(pthread_self(), h->job0) ? 0 : 1;
    atomic_fetch_add(&h->chunks_by[who], 1);
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add(&h->hits[i], 1);
    /* the loop's owner waits (at most 5 s) for the helper to take a chunk: with other
     * test processes on the cores the helper may be scheduled late */
    int64_t t0 = cai_kern_now_ns();
    while (who == 0 && atomic_load(&h->chunks_by[1]) == 0 && atomic_load(&h->expect_help))
        if (cai_kern_now_ns() - t0 > 5000000000LL)
            atomic_store(&h->expect_help, false); /* once: the assertion reports it */
}

static void tb_help_job(void *ctx, int64_t begin, int64_t end) {
    tb_help *h = ctx;
    (void)end;
    if (begin == 0) {
        h->job0 = pthread_self();
        while (!atomic_load(&h->helper_ready)) /* the other thread is idle and watching */
            ;
        cai_kern_parallel_for(4096, 64, tb_help_range, h);
        atomic_store(&h->done_loop, 1);
    } else {
        atomic_store(&h->helper_ready, 1);
        while (!atomic_load(&h->done_loop))
            cai_kern_help();
    }
}

static void tb_no_wake(void *ctx) {
    (void)ctx;
}

Test(blas, idle_gang_threads_help_a_loop) {
    if (ca_set_num_threads(2) < 2)
        cr_skip_test("needs 2 cores");
    tb_help *h = calloc(1, sizeof *h);
    h->expect_help = true;
    cai_kern_help_begin(tb_no_wake, NULL);
    cr_assert(cai_kern_gang(2, tb_help_job, h));
    cai_kern_help_end();
    for (int i = 0; i < 4096; i++)
        cr_assert_eq(atomic_load(&h->hits[i]), 1, "element %d ran %d times", i,
                     atomic_load(&h->hits[i]));
    cr_assert_gt(atomic_load(&h->chunks_by[0]), 0);
    cr_assert_gt(atomic_load(&h->chunks_by[1]), 0,
                 "the idle thread did not help (%d chunks by the other)",
                 atomic_load(&h->chunks_by[0]));
    free(h);
}

Test(blas, no_helping_outside_a_helping_gang) {
    if (ca_set_num_threads(2) < 2)
        cr_skip_test("needs 2 cores");
    tb_help *h = calloc(1, sizeof *h);
    cr_assert(cai_kern_gang(2, tb_help_job, h)); /* no cai_kern_help_begin */
    for (int i = 0; i < 4096; i++)
        cr_assert_eq(atomic_load(&h->hits[i]), 1);
    cr_assert_eq(atomic_load(&h->chunks_by[1]), 0, "a thread helped a gang closed to it");
    free(h);
}
