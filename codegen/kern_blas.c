/* kern_blas.c - which OpenBLAS runs the GEMMs, how it threads, and what it reports.
 *
 * One pool. OpenBLAS is told to use one thread at the first GEMM. With an OpenBLAS that
 * has the threads callback (0.3.27 and later), a big GEMM raises OpenBLAS's count to the
 * pool's size for that one call, and OpenBLAS's jobs run on the pool's threads through the
 * callback: OpenBLAS splits the GEMM its own way, sharing packed panels between threads.
 * Without the callback, kern_gemm.c cuts big GEMMs into tiles itself. Either way
 * OpenBLAS's own threads never run.
 *
 * OpenBLAS's threaded GEMM has its jobs wait on each other (each packs a panel the others
 * read), so they must all run at once, each on its own thread: cai_kern_gang. Where the
 * pool is busy (another thread's job holds it, or the GEMM is called inside a pool job),
 * the jobs run on threads made for the call. That is a fallback for concurrent callers,
 * never the common path (the compiled plan runs such GEMMs in order,
 * graph/plan_parallel.c), and it keeps the bits: tiles would round differently from the
 * same call on a free pool. It does not wait for the pool: the call holds the lock on
 * OpenBLAS's thread count, which a GEMM inside the busy pool's job may be waiting for.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kern_blas.h"
#include "kern_internal.h"

#ifndef CAGRAD_BLAS_NAME
#define CAGRAD_BLAS_NAME "system"
#endif

#define KERN_BLAS_THREADED_MNK (256.0 * 256.0 * 256.0) /* below: tiles or one thread */

static pthread_once_t kern_blas_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t kern_blas_threads_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint_fast64_t kern_blas_callbacks; /* OpenBLAS thread hand-offs, for tests */

#ifdef CAGRAD_BLAS_THREADS_CALLBACK
typedef struct {
    openblas_dojob_callback dojob;
    char *jobdata;
    size_t elsize;
    int dojob_data;
} kern_blas_jobs;

static void kern_blas_job_range(void *ctx, int64_t begin, int64_t end) {
    const kern_blas_jobs *j = ctx;
    for (int64_t i = begin; i < end; i++)
        j->dojob((int)i, j->jobdata + (size_t)i * j->elsize, j->dojob_data);
}

typedef struct {
    const kern_blas_jobs *jobs;
    int64_t i;
} kern_blas_one_job;

static void *kern_blas_job_thread(void *arg) {
    const kern_blas_one_job *o = arg;
    kern_blas_job_range((void *)o->jobs, o->i, o->i + 1);
    return NULL;
}

/* Fallback: the jobs on threads of their own (job 0 on the caller). A thread that cannot
 * be made leaves its job to the caller after job 0, which hangs if job 0 waits on that
 * job's panel; the process is out of threads then, and there is nothing better to do. */
static void kern_blas_jobs_on_threads(const kern_blas_jobs *j, int n) {
    pthread_t tid[64];
    kern_blas_one_job one[64];
    bool made[64] = {false};
    if (n > 64)
        n = 64; /* OpenBLAS's MAX_THREADS */
    for (int i = 1; i < n; i++) {
        one[i] = (kern_blas_one_job){j, i};
        made[i] = pthread_create(&tid[i], NULL, kern_blas_job_thread, &one[i]) == 0;
    }
    kern_blas_job_range((void *)j, 0, 1);
    for (int i = 1; i < n; i++) {
        if (made[i])
            pthread_join(tid[i], NULL);
        else
            kern_blas_job_range((void *)j, i, i + 1);
    }
}

static void kern_blas_threads_cb(int sync, openblas_dojob_callback dojob, int numjobs,
                                 size_t elsize, void *jobdata, int dojob_data) {
    (void)sync; /* OpenBLAS passes 1: return when every job is done, as this does */
    kern_blas_jobs j = {dojob, jobdata, elsize, dojob_data};
    atomic_fetch_add_explicit(&kern_blas_callbacks, 1, memory_order_relaxed);
    if (numjobs <= 1) {
        kern_blas_job_range(&j, 0, numjobs);
        return;
    }
    /* never wait for the pool here: the caller holds kern_blas_threads_mu, which a pool
     * job of another thread's may be waiting for (a GEMM of its own), and that job holds
     * the pool */
    cai_kern_no_wait_begin();
    bool ganged = cai_kern_gang(numjobs, kern_blas_job_range, &j);
    cai_kern_no_wait_end();
    if (!ganged)
        kern_blas_jobs_on_threads(&j, numjobs);
}
#endif

static void kern_blas_setup(void) {
    KERN_BLAS(openblas_set_num_threads)(1);
#ifdef CAGRAD_BLAS_THREADS_CALLBACK
    KERN_BLAS(openblas_set_threads_callback_function)(kern_blas_threads_cb);
#endif
}

uint64_t cai_kern_blas_callbacks(void) {
    return atomic_load_explicit(&kern_blas_callbacks, memory_order_relaxed);
}

void cai_kern_blas_init(void) {
    pthread_once(&kern_blas_once, kern_blas_setup);
}

bool cai_kern_blas_threads_gemm(double mnk) {
#ifdef CAGRAD_BLAS_THREADS_CALLBACK
    return mnk >= KERN_BLAS_THREADED_MNK && cai_kern_num_threads() > 1;
#else
    (void)mnk;
    return false;
#endif
}

void cai_kern_blas_threaded_begin(void) {
    pthread_mutex_lock(&kern_blas_threads_mu);
    KERN_BLAS(openblas_set_num_threads)(cai_kern_num_threads());
}

void cai_kern_blas_threaded_end(void) {
    KERN_BLAS(openblas_set_num_threads)(1);
    pthread_mutex_unlock(&kern_blas_threads_mu);
}

/* ------------------------------------------------------------------ reports */

const char *cai_kern_blas_core(void) {
    const char *s = KERN_BLAS(openblas_get_corename)();
    return s ? s : "unknown";
}

/* The widest vector ISA an OpenBLAS core's kernels use, on cagrad's scale. Cores that
 * use AVX but not AVX2 (Sandybridge, Bulldozer...) count as scalar here: cagrad has no
 * AVX-only level, and on a CPU with AVX2 they are below it either way. */
static kern_isa_level kern_blas_core_isa(const char *core) {
    static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    static const char *const avx2[] = {"Haswell", "Zen", "Excavator", "Skylake"};
    for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
        if (strcasecmp(core, avx512[i]) == 0)
            return KERN_ISA_AVX512;
    for (size_t i = 0; i < sizeof avx2 / sizeof *avx2; i++)
        if (strcasecmp(core, avx2[i]) == 0)
            return KERN_ISA_AVX2;
    return KERN_ISA_SCALAR;
}

/* "0.3.34" out of openblas_get_config()'s "OpenBLAS 0.3.34.481.3 DYNAMIC_ARCH ...": the
 * first three numbers after "OpenBLAS ". */
static void kern_blas_version(const char *config, char *out, size_t cap) {
    const char *p = config ? strstr(config, "OpenBLAS ") : NULL;
    long part[3];
    char *end = NULL;
    p = p ? p + 9 : NULL;
    for (int i = 0; i < 3 && p; i++) {
        part[i] = strtol(p, &end, 10);
        if (end == p || (i < 2 && *end != '.'))
            p = NULL;
        else
            p = i < 2 ? end + 1 : end;
    }
    if (!p) {
        snprintf(out, cap, "unknown");
        return;
    }
    snprintf(out, cap, "%ld.%ld.%ld", part[0], part[1], part[2]);
}

static char kern_blas_version_str[32];
static pthread_once_t kern_blas_version_once = PTHREAD_ONCE_INIT;

static void kern_blas_read_version(void) {
    kern_blas_version(KERN_BLAS(openblas_get_config)(), kern_blas_version_str,
                      sizeof kern_blas_version_str);
}

void cai_kern_blas_info(kern_blas_info *out) {
    pthread_once(&kern_blas_version_once, kern_blas_read_version);
    const char *config = KERN_BLAS(openblas_get_config)();
    out->name = CAGRAD_BLAS_NAME;
    out->version = kern_blas_version_str;
    out->config = config ? config : "unknown";
    out->core = cai_kern_blas_core();
#ifdef CAGRAD_BLAS_THREADS_CALLBACK
    out->threads_callback = true;
#else
    out->threads_callback = false;
#endif
    out->core_isa = kern_blas_core_isa(out->core);
    out->cpu_isa = cai_kern_isa_cpu();
}

void cai_kern_gemm1(kern_dtype dt, bool tb, int64_t M, int64_t N, int64_t K, const void *a,
                    int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    enum CBLAS_TRANSPOSE t = tb ? CblasTrans : CblasNoTrans;
    if (dt == KERN_F32)
        kern_cblas_sgemm(CblasRowMajor, CblasNoTrans, t, (int)M, (int)N, (int)K, 1.0f,
                         (const float *)a, (int)lda, (const float *)b, (int)ldb, (float)beta,
                         (float *)c, (int)ldc);
    else
        kern_cblas_dgemm(CblasRowMajor, CblasNoTrans, t, (int)M, (int)N, (int)K, 1.0,
                         (const double *)a, (int)lda, (const double *)b, (int)ldb, beta,
                         (double *)c, (int)ldc);
}
