/* dist_mpi.c - the ca_dist_* API over Open MPI (include/cagrad.h, docs/distributed.md).
 *
 * Every collective is a non-blocking MPI call (MPI_Iallreduce, ...) held by a
 * ca_dist_work; a blocking call is start + wait. A wait polls MPI_Test under one lock
 * (so callers on several threads are serialised, whatever thread level MPI gave), sleeping
 * a little between polls, and gives up at the work's deadline: MPI itself would block
 * forever on a peer that died or hangs. After a timeout the group is "broken": MPI cannot
 * cancel a collective, so nothing more can be sent on it and the only clean end is
 * MPI_Abort, which ca_dist_finalize does.
 *
 * Built only with CAGRAD_HAVE_MPI; dist_stub.c is the API of a build without MPI.
 */
#include "autograd/internal.h"

#if CAGRAD_HAVE_MPI

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_TIMEOUT_S 1800.0 /* PyTorch's default_pg_timeout: 30 minutes */

static pthread_mutex_t dist_lock = PTHREAD_MUTEX_INITIALIZER;

static struct {
    bool mpi_up;   /* MPI is initialised (by us or before us) and not finalised */
    bool mpi_ours; /* we called MPI_Init_thread, so we finalise it */
    bool group;    /* comm is a live communicator: ca_dist_init succeeded */
    bool broken;   /* a collective timed out: comm can never be used again */
    MPI_Comm comm;
    int rank, size;
    double timeout;
    char broken_why[256];
    ca_dist_work *running; /* started and not yet seen done: drained before leaving */
} g;

struct ca_dist_work {
    MPI_Request req;
    const char *what;  /* the collective's name, for errors */
    ca_tensor *tensor; /* written by MPI until done; AVG divides it when done */
    ca_tensor *input;  /* read by MPI until done (all_gather's input) */
    double deadline;   /* monotonic seconds */
    bool avg, done;
    ca_dist_work *prev, *next; /* g.running, while not done */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static ca_status mpi_fail(const char *fn, int rc) {
    char text[MPI_MAX_ERROR_STRING + 1] = "";
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return err_set(CA_STATUS_DIST, "%s failed on rank %d: %s", fn, g.rank, text);
}

/* The state a collective needs; the lock is held. */
static ca_status need_group(const char *fn) {
    if (!g.group)
        return err_set(CA_STATUS_DIST,
                       "%s: the process group is not initialised; call ca_dist_init "
                       "(Python: cagrad.distributed.init_process_group) first",
                       fn);
    if (g.broken)
        return err_set(CA_STATUS_DIST,
                       "%s on rank %d: the process group is broken by an earlier failure (%s); "
                       "no collective can run on it again",
                       fn, g.rank, g.broken_why);
    return CA_OK;
}

bool ca_dist_is_available(void) {
    return true;
}

bool ca_dist_is_initialized(void) {
    pthread_mutex_lock(&dist_lock);
    bool up = g.group;
    pthread_mutex_unlock(&dist_lock);
    return up;
}

/* An environment variable as an int: -1 when unset, -2 when not a whole number >= 0. */
static long env_int(const char *name) {
    const char *s = getenv(name);
    if (!s || !*s)
        return -1;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    return (*end || v < 0) ? -2 : v;
}

/* RANK / WORLD_SIZE / LOCAL_RANK (torchrun's), when set, must be what MPI says. */
static ca_status check_env(void) {
    const struct {
        const char *name;
        long mpi;
    } want[] = {
        {"RANK", g.rank},
        {"WORLD_SIZE", g.size},
        {"LOCAL_RANK", env_int("OMPI_COMM_WORLD_LOCAL_RANK")},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        long v = env_int(want[i].name);
        if (v == -1 || want[i].mpi < 0 || v == want[i].mpi)
            continue;
        return err_set(CA_STATUS_DIST,
                       "ca_dist_init: %s=%s in the environment, but Open MPI made this process "
                       "%s %ld (rank %d of %d); launch with mpirun -np N, or unset RANK, "
                       "WORLD_SIZE and LOCAL_RANK, so that they agree",
                       want[i].name, getenv(want[i].name), want[i].name, want[i].mpi, g.rank,
                       g.size);
    }
    return CA_OK;
}

static double env_timeout(void) {
    const char *s = getenv("CAGRAD_DIST_TIMEOUT");
    if (!s || !*s)
        return DEFAULT_TIMEOUT_S;
    char *end = NULL;
    double v = strtod(s, &end);
    return (*end || !(v > 0)) ? DEFAULT_TIMEOUT_S : v;
}

static ca_status mpi_start(void) {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized)
        return err_set(CA_STATUS_DIST, "ca_dist_init: MPI was finalised in this process and "
                                       "cannot start again (an MPI rule); start a new process");
    if (!inited) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS)
            return mpi_fail("MPI_Init_thread", rc);
        g.mpi_ours = true;
    }
    g.mpi_up = true;
    return CA_OK;
}

static ca_status group_start(double timeout_seconds) {
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &g.comm);
    if (rc != MPI_SUCCESS)
        return mpi_fail("MPI_Comm_dup", rc);
    MPI_Comm_set_errhandler(g.comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(g.comm, &g.rank);
    MPI_Comm_size(g.comm, &g.size);
    ca_status st = check_env();
    if (st != CA_OK) {
        MPI_Comm_free(&g.comm);
        return st;
    }
    g.timeout = timeout_seconds > 0 ? timeout_seconds : env_timeout();
    g.broken = false;
    g.group = true;
    return CA_OK;
}

ca_status ca_dist_init(double timeout_seconds) {
    pthread_mutex_lock(&dist_lock);
    ca_status st = CA_OK;
    if (g.group)
        st = err_set(CA_STATUS_DIST, "ca_dist_init: the process group is already initialised");
    if (st == CA_OK && !g.mpi_up)
        st = mpi_start();
    if (st == CA_OK)
        st = group_start(timeout_seconds);
    pthread_mutex_unlock(&dist_lock);
    return st;
}

static ca_status get_int(int *out, const int *field, const char *fn) {
    CA_ARG_NOT_NULL(out, fn);
    pthread_mutex_lock(&dist_lock);
    ca_status st = g.group ? CA_OK : need_group(fn);
    if (st == CA_OK)
        *out = *field;
    pthread_mutex_unlock(&dist_lock);
    return st;
}

ca_status ca_dist_rank(int *out) {
    return get_int(out, &g.rank, "ca_dist_rank");
}
ca_status ca_dist_world_size(int *out) {
    return get_int(out, &g.size, "ca_dist_world_size");
}

ca_status ca_dist_get_timeout(double *out) {
    CA_ARG_NOT_NULL(out, "ca_dist_get_timeout");
    pthread_mutex_lock(&dist_lock);
    ca_status st = g.group ? CA_OK : need_group("ca_dist_get_timeout");
    if (st == CA_OK)
        *out = g.timeout;
    pthread_mutex_unlock(&dist_lock);
    return st;
}

ca_status ca_dist_set_timeout(double seconds) {
    if (!(seconds > 0))
        return err_set(CA_STATUS_VALUE, "ca_dist_set_timeout: the timeout must be > 0 seconds");
    pthread_mutex_lock(&dist_lock);
    ca_status st = g.group ? CA_OK : need_group("ca_dist_set_timeout");
    if (st == CA_OK)
        g.timeout = seconds;
    pthread_mutex_unlock(&dist_lock);
    return st;
}

/* A broken group cannot be freed or finalised (MPI would wait for the peer that never
 * came): abort the job, which also ends the peers that hang. */
static void abort_if_broken(void) {
    if (!g.broken)
        return;
    fprintf(stderr, "cagrad.distributed: rank %d: aborting the MPI job: %s\n", g.rank,
            g.broken_why);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static ca_status drain(void);

ca_status ca_dist_destroy(void) {
    drain();
    pthread_mutex_lock(&dist_lock);
    ca_status st = g.group ? CA_OK : need_group("ca_dist_destroy");
    if (st == CA_OK) {
        abort_if_broken();
        MPI_Comm_free(&g.comm);
        g.group = false;
    }
    pthread_mutex_unlock(&dist_lock);
    return st;
}

ca_status ca_dist_finalize(void) {
    drain();
    pthread_mutex_lock(&dist_lock);
    ca_status st = CA_OK;
    if (!g.mpi_up)
        st = err_set(CA_STATUS_DIST, "ca_dist_finalize: MPI is not initialised");
    if (st == CA_OK) {
        abort_if_broken();
        if (g.group)
            MPI_Comm_free(&g.comm);
        g.group = false;
        if (g.mpi_ours)
            MPI_Finalize();
        g.mpi_up = false;
    }
    pthread_mutex_unlock(&dist_lock);
    return st;
}

/* ------------------------------------------------------------------------- collectives */

/* The MPI checker follows a request only within one function: every request below is
 * handed to a ca_dist_work and completed by ca_dist_work_wait / _is_completed (or leaked
 * on purpose after a timeout), which it cannot see. */
/* NOLINTBEGIN(clang-analyzer-optin.mpi.MPI-Checker) */

static ca_status mpi_type(const ca_tensor *t, const char *fn, MPI_Datatype *out) {
    switch (t->dtype) {
    case CA_FLOAT32: *out = MPI_FLOAT; return CA_OK;
    case CA_FLOAT64: *out = MPI_DOUBLE; return CA_OK;
    case CA_INT64: *out = MPI_INT64_T; return CA_OK;
    default: break;
    }
    return err_set(CA_STATUS_DTYPE,
                   "%s: tensors of dtype %s are not supported (float32, "
                   "float64 and int64 are)",
                   fn, ca_dtype_name(t->dtype));
}

/* The MPI count of a contiguous tensor. */
static ca_status buffer_of(const ca_tensor *t, const char *fn, MPI_Datatype *type, int *count) {
    CA_ARG_NOT_NULL(t, fn);
    if (!ca_tensor_is_contiguous(t))
        return err_set(CA_STATUS_INVALID, "%s: the tensor must be contiguous", fn);
    CA_CHECK(mpi_type(t, fn, type));
    int64_t n = ca_tensor_numel(t);
    if (n > INT32_MAX)
        return err_set(CA_STATUS_INVALID, "%s: %lld elements is more than one MPI call moves", fn,
                       (long long)n);
    *count = (int)n;
    return CA_OK;
}

static ca_status work_new(const char *what, ca_tensor *t, const ca_tensor *input,
                          ca_dist_work **out) {
    ca_dist_work *w = cai_mem_calloc(1, sizeof *w);
    if (!w)
        return err_nomem("a collective's work handle");
    w->what = what;
    w->tensor = t ? ca_tensor_retain(t) : NULL;
    w->input = input ? ca_tensor_retain((ca_tensor *)input) : NULL;
    w->req = MPI_REQUEST_NULL;
    w->deadline = now_s() + g.timeout;
    w->next = g.running;
    if (g.running)
        g.running->prev = w;
    g.running = w;
    *out = w;
    return CA_OK;
}

/* Off g.running; the lock is held. */
static void work_unlink(ca_dist_work *w) {
    if (w->prev)
        w->prev->next = w->next;
    else if (g.running == w)
        g.running = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
}

/* The lock is held when w may still be on g.running (a launch that failed). */
static void work_release(ca_dist_work *w) {
    if (!w->done)
        work_unlink(w);
    ca_tensor_release(w->tensor);
    ca_tensor_release(w->input);
    cai_mem_free(w);
}

/* The work is done: AVG divides the sum by the number of ranks. */
static void work_finish(ca_dist_work *w) {
    w->done = true;
    work_unlink(w);
    if (!w->avg)
        return;
    int64_t n = ca_tensor_numel(w->tensor);
    void *p = cai_tensor_ptr(w->tensor);
    if (w->tensor->dtype == CA_FLOAT32) {
        float *f = p;
        for (int64_t i = 0; i < n; i++)
            f[i] /= (float)g.size;
    } else {
        double *d = p;
        for (int64_t i = 0; i < n; i++)
            d[i] /= (double)g.size;
    }
}

/* One MPI_Test; the lock is held. */
static ca_status work_poll(ca_dist_work *w) {
    if (w->done)
        return CA_OK;
    if (g.broken || !g.group) /* MPI may be finalised: never touch the request then */
        return need_group(w->what);
    int flag = 0;
    int rc = MPI_Test(&w->req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
        return mpi_fail(w->what, rc);
    if (flag)
        work_finish(w);
    return CA_OK;
}

/* Sleep between polls, a little longer each time up to 200 us: a short collective
 * completes within the first polls, a long wait does not hog a shared core. */
static void backoff(long *ns) {
    struct timespec ts = {0, *ns};
    nanosleep(&ts, NULL);
    if (*ns < 200000)
        *ns *= 2;
}

ca_status ca_dist_work_wait(ca_dist_work *w) {
    CA_ARG_NOT_NULL(w, "ca_dist_work_wait");
    long sleep_ns = 1000;
    for (;;) {
        pthread_mutex_lock(&dist_lock);
        ca_status st = work_poll(w);
        bool done = w->done;
        if (st == CA_OK && !done && now_s() > w->deadline) {
            g.broken = true;
            snprintf(g.broken_why, sizeof g.broken_why,
                     "%s timed out on rank %d of %d after %g s (a peer died, hangs, or runs "
                     "different collectives)",
                     w->what, g.rank, g.size, g.timeout);
            st = err_set(CA_STATUS_DIST, "cagrad.distributed: %s", g.broken_why);
        }
        pthread_mutex_unlock(&dist_lock);
        if (st != CA_OK || done)
            return st;
        backoff(&sleep_ns);
    }
}

/* Wait for every collective still running before the communicator or MPI goes away (an
 * MPI_Finalize under a request of a freed communicator crashes). A timeout here breaks the
 * group, and leaving it then aborts. Works must not be freed on other threads meanwhile. */
static ca_status drain(void) {
    for (;;) {
        pthread_mutex_lock(&dist_lock);
        ca_dist_work *w = g.group && !g.broken ? g.running : NULL;
        pthread_mutex_unlock(&dist_lock);
        if (!w)
            return CA_OK;
        CA_CHECK(ca_dist_work_wait(w));
    }
}

ca_status ca_dist_work_is_completed(ca_dist_work *w, bool *done) {
    CA_ARG_NOT_NULL(w, "ca_dist_work_is_completed");
    CA_ARG_NOT_NULL(done, "ca_dist_work_is_completed");
    pthread_mutex_lock(&dist_lock);
    ca_status st = work_poll(w);
    *done = w->done;
    pthread_mutex_unlock(&dist_lock);
    return st;
}

void ca_dist_work_free(ca_dist_work *w) {
    if (!w)
        return;
    pthread_mutex_lock(&dist_lock);
    bool stuck = !w->done && (g.broken || !g.group);
    pthread_mutex_unlock(&dist_lock);
    /* MPI may still write the buffers of a work that never finished (a timeout, or its
     * group left before it was waited for): leaked on purpose. A failed wait here is not
     * the caller's error, so it must not replace their message. */
    if (stuck)
        return;
    if (!w->done) {
        ca_status st = ca_dist_work_wait(w);
        if (st != CA_OK)
            return;
    }
    work_release(w);
}

/* Hand a started work to the caller, or wait for it and free it (work NULL). */
static ca_status finish_call(ca_dist_work *w, ca_dist_work **work) {
    if (work) {
        *work = w;
        return CA_OK;
    }
    ca_status st = ca_dist_work_wait(w);
    ca_dist_work_free(w);
    return st;
}

/* Start a collective: `start` issues the MPI call with the lock held. */
typedef int (*start_fn)(ca_dist_work *w, void *arg);

static ca_status launch(const char *what, ca_tensor *t, const ca_tensor *input, bool avg,
                        start_fn start, void *arg, ca_dist_work **work) {
    if (work)
        *work = NULL;
    pthread_mutex_lock(&dist_lock);
    ca_status st = need_group(what);
    ca_dist_work *w = NULL;
    if (st == CA_OK)
        st = work_new(what, t, input, &w);
    if (st == CA_OK) {
        w->avg = avg;
        int rc = start(w, arg);
        if (rc != MPI_SUCCESS) {
            st = mpi_fail(what, rc);
            work_release(w);
        }
    }
    pthread_mutex_unlock(&dist_lock);
    if (st != CA_OK)
        return st;
    if (t)
        cai_tensor_bump_version(t); /* MPI writes it in place */
    return finish_call(w, work);
}

typedef struct {
    MPI_Datatype type;
    MPI_Op op;
    int count, root;
} coll_args;

static int start_allreduce(ca_dist_work *w, void *arg) {
    const coll_args *a = arg;
    return MPI_Iallreduce(MPI_IN_PLACE, cai_tensor_ptr(w->tensor), a->count, a->type, a->op, g.comm,
                          &w->req);
}

/* AVG is a sum, divided when done. */
static MPI_Op mpi_op(ca_dist_op op) {
    switch (op) {
    case CA_DIST_PRODUCT: return MPI_PROD;
    case CA_DIST_MIN: return MPI_MIN;
    case CA_DIST_MAX: return MPI_MAX;
    default: return MPI_SUM;
    }
}

ca_status ca_dist_all_reduce(ca_tensor *t, ca_dist_op op, ca_dist_work **work) {
    coll_args a = {0};
    CA_CHECK(buffer_of(t, "all_reduce", &a.type, &a.count));
    if ((int)op < CA_DIST_SUM || (int)op > CA_DIST_MAX)
        return err_set(CA_STATUS_INVALID,
                       "all_reduce: unknown op %d (CA_DIST_SUM, _AVG, _PRODUCT, _MIN, _MAX)",
                       (int)op);
    if (op == CA_DIST_AVG && t->dtype == CA_INT64)
        return err_set(CA_STATUS_DTYPE, "all_reduce: ReduceOp.AVG needs a floating-point "
                                        "tensor (an int64 mean would be rounded); use SUM");
    a.op = mpi_op(op);
    return launch("all_reduce", t, NULL, op == CA_DIST_AVG, start_allreduce, &a, work);
}

static int start_broadcast(ca_dist_work *w, void *arg) {
    const coll_args *a = arg;
    return MPI_Ibcast(cai_tensor_ptr(w->tensor), a->count, a->type, a->root, g.comm, &w->req);
}

ca_status ca_dist_broadcast(ca_tensor *t, int src, ca_dist_work **work) {
    coll_args a = {0};
    CA_CHECK(buffer_of(t, "broadcast", &a.type, &a.count));
    pthread_mutex_lock(&dist_lock);
    int size = g.group ? g.size : 1;
    pthread_mutex_unlock(&dist_lock);
    if (src < 0 || src >= size)
        return err_set(CA_STATUS_VALUE, "broadcast: src %d is not a rank (0 .. %d)", src, size - 1);
    a.root = src;
    return launch("broadcast", t, NULL, false, start_broadcast, &a, work);
}

static int start_allgather(ca_dist_work *w, void *arg) {
    const coll_args *a = arg;
    return MPI_Iallgather(cai_tensor_ptr(w->input), a->count, a->type, cai_tensor_ptr(w->tensor),
                          a->count, a->type, g.comm, &w->req);
}

ca_status ca_dist_all_gather(const ca_tensor *in, ca_tensor *out, ca_dist_work **work) {
    coll_args a = {0}, o = {0};
    CA_CHECK(buffer_of(in, "all_gather", &a.type, &a.count));
    CA_CHECK(buffer_of(out, "all_gather", &o.type, &o.count));
    pthread_mutex_lock(&dist_lock);
    int size = g.group ? g.size : 0;
    pthread_mutex_unlock(&dist_lock);
    if (out->dtype != in->dtype)
        return err_set(CA_STATUS_DTYPE, "all_gather: the output is %s but the input is %s",
                       ca_dtype_name(out->dtype), ca_dtype_name(in->dtype));
    if (size && (int64_t)o.count != (int64_t)a.count * size)
        return err_set(CA_STATUS_SHAPE,
                       "all_gather: the output has %d elements, but %d ranks of %d need %lld",
                       o.count, size, a.count, (long long)a.count * size);
    return launch("all_gather", out, in, false, start_allgather, &a, work);
}

static int start_barrier(ca_dist_work *w, void *arg) {
    (void)arg;
    return MPI_Ibarrier(g.comm, &w->req);
}

ca_status ca_dist_barrier(ca_dist_work **work) {
    return launch("barrier", NULL, NULL, false, start_barrier, NULL, work);
}

/* NOLINTEND(clang-analyzer-optin.mpi.MPI-Checker) */

#endif /* CAGRAD_HAVE_MPI */
