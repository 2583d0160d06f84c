/* kern_pool.c - the process-wide thread pool behind cai_kern_parallel_for.
 *
 * Workers are created lazily by the first parallel call. After a job a worker spins for a
 * short while (KERN_POOL_SPIN_NS) watching for the next one, since a backward's kernels
 * come back to back and waking a sleeping thread costs tens of microseconds; then it
 * sleeps on a condition variable, so an idle process burns no core. The calling thread works
 * too, and likewise watches the workers finish a job for a while before it sleeps. A job is
 * split into fixed chunks claimed through an atomic counter; kernels make their results
 * independent of which thread ran which chunk. After fork() the child forgets the parent's
 * workers (they do not exist there) and creates its own on demand, which is what
 * Criterion's one-process-per-test needs. Only as many workers as a job has chunks for take
 * part in it (kern_pool.seats); the rest keep watching for the next.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity, sched_getcpu, pthread_setaffinity_np */
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kern_internal.h"

static struct {
    pthread_mutex_t mu;
    pthread_cond_t wake; /* workers: a new job (gen changed) or stop */
    pthread_cond_t idle; /* caller: active dropped to zero */
    int want;            /* configured size (incl. the caller); 0 = default */
    int size;            /* live workers + 1; 0 = not created */
    pthread_t *tid;
    uint64_t gen;
    bool stop, busy;
    atomic_int active; /* workers inside the current job (changed under the lock) */
    kern_range_fn fn;
    void *ctx;
    int64_t n, nchunks;
    bool one_each;                 /* a gang: each thread runs at most one chunk */
    atomic_int_fast64_t gang_done; /* a gang's chunks finished (changed under the lock) */
    atomic_int_fast64_t next;
    atomic_uint_fast64_t spin_gen; /* gen, for workers that spin without the lock */
    atomic_bool spin_stop;         /* stop, likewise */
    /* Workers the current job wants: those numbered 1..seats take part, the others skip it
     * without taking the lock, so a job of a few chunks costs a few threads' locking, not
     * the whole pool's (on many cores that locking outweighed small kernels). */
    atomic_int seats;
} kern_pool = {.mu = PTHREAD_MUTEX_INITIALIZER,
               .wake = PTHREAD_COND_INITIALIZER,
               .idle = PTHREAD_COND_INITIALIZER};

static int bind_workers_around = -1; /* the caller CPU the workers were placed around */
static pthread_mutex_t kern_pool_resize_mu = PTHREAD_MUTEX_INITIALIZER; /* kern_pool_stop */
static _Thread_local bool kern_in_pool; /* nested calls run serially */
static _Thread_local int kern_no_wait;  /* cai_kern_no_wait_begin's depth */
static pthread_once_t kern_atfork_once = PTHREAD_ONCE_INIT;

static int kern_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static int kern_default_threads(void) {
    int n = kern_cores();
    const char *e = getenv("CAGRAD_NUM_THREADS");
    if (e) {
        char *end = NULL;
        long v = strtol(e, &end, 10);
        if (end != e && *end == '\0' && v > 0 && v < n)
            n = (int)v;
    }
    return n;
}

/* Claim chunks (cai_kern_chunk) until none is left. In a gang (one_each) a thread takes
 * one chunk at most and reports it done. */
static void kern_run_chunks(kern_range_fn fn, void *ctx, int64_t n, int64_t nchunks,
                            bool one_each) {
    for (;;) {
        int64_t c = atomic_fetch_add(&kern_pool.next, 1), len;
        if (c >= nchunks)
            return;
        int64_t b = cai_kern_chunk(c, n, nchunks, &len);
        fn(ctx, b, b + len);
        if (one_each) {
            pthread_mutex_lock(&kern_pool.mu);
            if (++kern_pool.gang_done == nchunks)
                pthread_cond_broadcast(&kern_pool.idle);
            pthread_mutex_unlock(&kern_pool.mu);
            return;
        }
    }
}

#define KERN_POOL_SPIN_NS 100000 /* how long a worker watches for the next job */

int64_t cai_kern_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Watch for a job after `seen` (or stop) without the lock, for KERN_POOL_SPIN_NS at most. */
static void kern_spin_for_job(uint64_t seen) {
    int64_t t0 = cai_kern_now_ns();
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(&kern_pool.spin_gen, memory_order_acquire) != seen ||
            atomic_load_explicit(&kern_pool.spin_stop, memory_order_acquire))
            return;
        cai_kern_cpu_relax();
        if (i % 64 == 0 && cai_kern_now_ns() - t0 > KERN_POOL_SPIN_NS)
            return;
    }
}

typedef struct {
    uint64_t gen; /* the pool's gen when the worker was made: jobs after it are new */
    int idx;      /* 1 .. size - 1 */
} kern_worker_arg;

/* Whether worker idx sits out the job it sees: one that wants fewer workers. Read without
 * the lock: a stale value only makes the worker look again. */
static bool kern_worker_skips(int idx) {
    return idx > atomic_load_explicit(&kern_pool.seats, memory_order_acquire);
}

static void *kern_worker(void *argp) {
    kern_worker_arg arg = *(kern_worker_arg *)argp;
    free(argp);
    uint64_t seen = arg.gen;
    kern_in_pool = true;
    pthread_mutex_lock(&kern_pool.mu);
    for (;;) {
        if (kern_pool.gen == seen && !kern_pool.stop) {
            pthread_mutex_unlock(&kern_pool.mu);
            for (;;) { /* jobs that do not need this worker pass by without the lock */
                kern_spin_for_job(seen);
                uint64_t g = atomic_load_explicit(&kern_pool.spin_gen, memory_order_acquire);
                if (g == seen || atomic_load_explicit(&kern_pool.spin_stop, memory_order_acquire) ||
                    !kern_worker_skips(arg.idx))
                    break;
                seen = g;
            }
            pthread_mutex_lock(&kern_pool.mu);
        }
        while (kern_pool.gen == seen && !kern_pool.stop)
            pthread_cond_wait(&kern_pool.wake, &kern_pool.mu);
        if (kern_pool.stop)
            break;
        seen = kern_pool.gen;
        if (kern_worker_skips(arg.idx))
            continue;
        kern_pool.active++; /* holds off the next job until we stop claiming chunks */
        kern_range_fn fn = kern_pool.fn;
        void *ctx = kern_pool.ctx;
        int64_t n = kern_pool.n, nchunks = kern_pool.nchunks;
        bool one_each = kern_pool.one_each;
        pthread_mutex_unlock(&kern_pool.mu);
        kern_run_chunks(fn, ctx, n, nchunks, one_each);
        pthread_mutex_lock(&kern_pool.mu);
        if (--kern_pool.active == 0)
            pthread_cond_broadcast(&kern_pool.idle);
    }
    pthread_mutex_unlock(&kern_pool.mu);
    return NULL;
}

/* In a forked child the workers are gone; start from scratch there. */
static void kern_pool_atfork_child(void) {
    pthread_mutex_init(&kern_pool.mu, NULL);
    pthread_mutex_init(&kern_pool_resize_mu, NULL);
    pthread_cond_init(&kern_pool.wake, NULL);
    pthread_cond_init(&kern_pool.idle, NULL);
    free(kern_pool.tid);
    kern_pool.tid = NULL;
    kern_pool.size = 0;
    kern_pool.gen = 0;
    kern_pool.stop = kern_pool.busy = false;
    atomic_store(&kern_pool.active, 0);
    atomic_store(&kern_pool.gang_done, 0);
    atomic_store(&kern_pool.spin_gen, 0);
    atomic_store(&kern_pool.spin_stop, false);
}

static void kern_pool_register_atfork(void) {
    pthread_atfork(NULL, NULL, kern_pool_atfork_child);
}

/* Called with the lock held. */
static void kern_pool_start(void) {
    pthread_once(&kern_atfork_once, kern_pool_register_atfork);
    int want = kern_pool.want > 0 ? kern_pool.want : kern_default_threads();
    kern_pool.size = 1;
    bind_workers_around = -1; /* new workers: placed by the next scope */
    if (want < 2)
        return;
    kern_pool.tid = malloc(sizeof(pthread_t) * (size_t)(want - 1));
    if (!kern_pool.tid)
        return;
    for (int i = 0; i < want - 1; i++) {
        kern_worker_arg *arg = malloc(sizeof *arg);
        if (!arg)
            break;
        *arg = (kern_worker_arg){.gen = kern_pool.gen, .idx = i + 1};
        if (pthread_create(&kern_pool.tid[i], NULL, kern_worker, arg) != 0) {
            free(arg);
            break;
        }
        kern_pool.size++;
    }
}

/* Called without the lock; joins all workers. */
/* Resizing may happen while other threads run kernels (the Python binding holds no lock):
 * one resize at a time, after the running job; while the workers stop, callers see the pool
 * as busy (stop) and run serially. */
static void kern_pool_stop(void) {
    pthread_mutex_lock(&kern_pool_resize_mu);
    pthread_mutex_lock(&kern_pool.mu);
    while (kern_pool.busy)
        pthread_cond_wait(&kern_pool.idle, &kern_pool.mu);
    int nw = kern_pool.size - 1;
    kern_pool.stop = true;
    atomic_store_explicit(&kern_pool.spin_stop, true, memory_order_release);
    pthread_cond_broadcast(&kern_pool.wake);
    pthread_mutex_unlock(&kern_pool.mu);
    for (int i = 0; i < nw; i++)
        pthread_join(kern_pool.tid[i], NULL);
    pthread_mutex_lock(&kern_pool.mu);
    free(kern_pool.tid);
    kern_pool.tid = NULL;
    kern_pool.size = 0;
    kern_pool.stop = false;
    atomic_store_explicit(&kern_pool.spin_stop, false, memory_order_release);
    pthread_cond_broadcast(&kern_pool.idle); /* a gang may wait for the pool */
    pthread_mutex_unlock(&kern_pool.mu);
    pthread_mutex_unlock(&kern_pool_resize_mu);
}

/* Called with the lock held and the pool not busy: makes (fn, ctx) the pool's job, wakes
 * the workers and drops the lock. */
static void kern_pool_publish(kern_range_fn fn, void *ctx, int64_t n, int64_t nchunks,
                              bool one_each) {
    while (kern_pool.active > 0) /* a late worker may still hold the previous job */
        pthread_cond_wait(&kern_pool.idle, &kern_pool.mu);
    kern_pool.busy = true;
    kern_pool.fn = fn;
    kern_pool.ctx = ctx;
    kern_pool.n = n;
    kern_pool.nchunks = nchunks;
    kern_pool.one_each = one_each;
    atomic_store(&kern_pool.gang_done, 0);
    atomic_store(&kern_pool.next, one_each ? 1 : 0); /* a gang's job 0 is the caller's */
    /* the caller takes a chunk too; a gang needs a worker for each of its other jobs */
    int64_t seats = nchunks - 1 < kern_pool.size - 1 ? nchunks - 1 : kern_pool.size - 1;
    atomic_store_explicit(&kern_pool.seats, (int)seats, memory_order_release);
    kern_pool.gen++;
    atomic_store_explicit(&kern_pool.spin_gen, kern_pool.gen, memory_order_release);
    pthread_cond_broadcast(&kern_pool.wake);
    pthread_mutex_unlock(&kern_pool.mu);
}

static bool kern_job_finished(int64_t nchunks, bool one_each) {
    return atomic_load_explicit(&kern_pool.active, memory_order_acquire) == 0 &&
           (!one_each ||
            atomic_load_explicit(&kern_pool.gang_done, memory_order_acquire) >= nchunks);
}

/* The caller, its share done, watches the workers finish for KERN_POOL_SPIN_NS at most
 * before it sleeps on the condition variable: their chunks are about as long as its own,
 * so they are usually a few microseconds from done, while a sleep and a wake-up cost tens
 * of microseconds on a VM (each a system call, the wake-up an interrupt to the other
 * core): on small kernels as much as the kernel. */
static void kern_wait_for_workers(int64_t nchunks, bool one_each) {
    int64_t t0 = cai_kern_now_ns();
    for (unsigned i = 1; !kern_job_finished(nchunks, one_each); i++) {
        cai_kern_cpu_relax();
        if (i % 64 == 0 && cai_kern_now_ns() - t0 > KERN_POOL_SPIN_NS)
            return;
    }
}

/* The caller's share of the job just published, then the wait for the rest: every chunk
 * claimed and finished (a gang also waits for chunks that no thread has claimed yet). */
static void kern_pool_run_and_release(kern_range_fn fn, void *ctx, int64_t n, int64_t nchunks,
                                      bool one_each) {
    kern_in_pool = true;
    if (one_each) { /* a gang: the caller runs job 0, the workers the rest */
        fn(ctx, 0, 1);
        pthread_mutex_lock(&kern_pool.mu);
        kern_pool.gang_done++;
        pthread_mutex_unlock(&kern_pool.mu);
    } else {
        kern_run_chunks(fn, ctx, n, nchunks, one_each);
    }
    kern_in_pool = false;
    kern_wait_for_workers(nchunks, one_each);
    pthread_mutex_lock(&kern_pool.mu);
    while (kern_pool.active > 0 || (one_each && kern_pool.gang_done < nchunks))
        pthread_cond_wait(&kern_pool.idle, &kern_pool.mu);
    kern_pool.busy = false;
    pthread_cond_broadcast(&kern_pool.idle); /* a gang may be waiting for the pool */
    pthread_mutex_unlock(&kern_pool.mu);
}

/* ------------------------------------------------------------------ placement
 * During a backward (cai_kern_bind_begin .. end) the calling thread stays on the CPU it
 * started on and each worker on a CPU of its own among the others, as OpenMP does under
 * OMP_PROC_BIND. Left to the scheduler, a worker woken after the process has been idle is
 * often placed on its waker's CPU (on a VM the other vCPU may not look idle), and the two
 * then share one core for milliseconds, until the load balancer parts them: slower than one
 * thread. The caller's own mask is put back at the end; the workers keep their CPUs until
 * a later backward starts on one of them. CAGRAD_BIND_THREADS=0 turns this off. */
static _Thread_local int bind_depth;
static _Thread_local bool bind_done;   /* placed (or given up) in this scope */
static _Thread_local bool bind_pinned; /* the caller's mask was changed: restore it */
static _Thread_local cpu_set_t bind_saved;
static _Thread_local int bind_cpu;
static int bind_enabled = -1;

static bool bind_wanted(void) {
    if (bind_enabled < 0) {
        const char *e = getenv("CAGRAD_BIND_THREADS");
        bind_enabled = !(e && strcmp(e, "0") == 0);
    }
    return bind_enabled == 1;
}

/* Worker i's CPU: the i-th of `set` other than `skip`, cyclically. */
static int bind_nth_other(const cpu_set_t *set, int skip, int i) {
    int n = CPU_COUNT(set) - 1, k = n > 0 ? (i - 1) % n : 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, set) && c != skip && k-- == 0)
            return c;
    return -1;
}

/* Called with the pool's lock held, before publishing the first job of a scope. */
static void bind_place(void) {
    bind_done = true;
    if (!bind_wanted() || sched_getaffinity(0, sizeof bind_saved, &bind_saved) != 0 ||
        CPU_COUNT(&bind_saved) < 2)
        return;
    int c = sched_getcpu();
    if (c < 0 || c >= CPU_SETSIZE || !CPU_ISSET(c, &bind_saved))
        return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(c, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0)
        return;
    bind_pinned = true;
    bind_cpu = c;
    if (bind_workers_around == c)
        return;
    for (int i = 1; i < kern_pool.size; i++) {
        int w = bind_nth_other(&bind_saved, c, i);
        if (w < 0)
            continue;
        CPU_ZERO(&one);
        CPU_SET(w, &one);
        pthread_setaffinity_np(kern_pool.tid[i - 1], sizeof one, &one);
    }
    bind_workers_around = c;
}

void cai_kern_bind_begin(void) {
    if (bind_depth++ == 0)
        bind_done = bind_pinned = false;
}

void cai_kern_bind_end(void) {
    if (--bind_depth > 0 || !bind_pinned)
        return;
    bind_pinned = false;
    cpu_set_t now; /* a hook that moved this thread itself keeps its choice */
    if (sched_getaffinity(0, sizeof now, &now) == 0 && CPU_COUNT(&now) == 1 &&
        CPU_ISSET(bind_cpu, &now))
        sched_setaffinity(0, sizeof bind_saved, &bind_saved);
}

void cai_kern_parallel_for(int64_t n, int64_t grain, kern_range_fn fn, void *ctx) {
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    if (n < 2 * grain) {
        fn(ctx, 0, n);
        return;
    }
    if (kern_in_pool) { /* nested: idle threads of a helping gang may join, else serial */
        if (!cai_kern_help_try(n, grain, fn, ctx))
            fn(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&kern_pool.mu);
    if (kern_pool.size == 0)
        kern_pool_start();
    /* busy: another thread's job runs; stop: the pool is being resized */
    if (kern_pool.size < 2 || kern_pool.busy || kern_pool.stop) {
        pthread_mutex_unlock(&kern_pool.mu);
        fn(ctx, 0, n);
        return;
    }
    if (bind_depth > 0 && !bind_done)
        bind_place();
    int64_t nchunks = n / grain, most = 4 * (int64_t)kern_pool.size;
    kern_pool_publish(fn, ctx, n, nchunks < most ? nchunks : most, false);
    kern_pool_run_and_release(fn, ctx, n, nchunks < most ? nchunks : most, false);
}

bool cai_kern_gang(int n, kern_range_fn fn, void *ctx) {
    if (n <= 0)
        return true;
    if (kern_in_pool)
        return false;
    pthread_mutex_lock(&kern_pool.mu);
    if (kern_pool.size == 0)
        kern_pool_start();
    if (n > kern_pool.size) {
        pthread_mutex_unlock(&kern_pool.mu);
        return false;
    }
    if ((kern_pool.busy && kern_no_wait > 0) || kern_pool.stop) {
        pthread_mutex_unlock(&kern_pool.mu);
        return false;
    }
    while (kern_pool.busy) /* another thread's job: a gang cannot run inline, so wait */
        pthread_cond_wait(&kern_pool.idle, &kern_pool.mu);
    if (kern_pool.stop || kern_pool.size < n) { /* resized meanwhile */
        pthread_mutex_unlock(&kern_pool.mu);
        return false;
    }
    if (bind_depth > 0 && !bind_done)
        bind_place();
    kern_pool_publish(fn, ctx, n, n, true);
    kern_pool_run_and_release(fn, ctx, n, n, true);
    return true;
}

void cai_kern_no_wait_begin(void) {
    kern_no_wait++;
}

void cai_kern_no_wait_end(void) {
    kern_no_wait--;
}

bool cai_kern_pool_free(void) {
    if (kern_in_pool)
        return false;
    pthread_mutex_lock(&kern_pool.mu);
    bool free_now = !kern_pool.busy && !kern_pool.stop;
    pthread_mutex_unlock(&kern_pool.mu);
    return free_now;
}

int cai_kern_num_threads(void) {
    pthread_mutex_lock(&kern_pool.mu);
    int n = kern_pool.size > 0 ? kern_pool.size
                               : (kern_pool.want > 0 ? kern_pool.want : kern_default_threads());
    pthread_mutex_unlock(&kern_pool.mu);
    return n;
}

int cai_kern_set_num_threads(int n) {
    int cores = kern_cores();
    if (n < 1)
        n = 1;
    if (n > cores)
        n = cores;
    pthread_mutex_lock(&kern_pool.mu);
    bool restart = kern_pool.size > 0 && kern_pool.size != n;
    kern_pool.want = n;
    pthread_mutex_unlock(&kern_pool.mu);
    if (restart)
        kern_pool_stop(); /* the next parallel call starts the new size */
    return n;
}
