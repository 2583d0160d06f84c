/* plan_parallel.c - a plan's steps side by side on the kernel pool (inter-op parallelism).
 *
 * Every thread of the pool runs the same loop: take the ready step on the longest
 * remaining path, run it, and release the steps that waited only for it (plan_dag.c says
 * which wait for which). Steps that must run on the caller's thread (hooks, call-outs, a
 * GEMM writing .grad) are handed to it alone, in graph order. A step's kernels start their
 * parallel loops as usual, and threads that find no ready step join them
 * (codegen/kern_help.c): the pool itself is busy with the steps.
 *
 * Which is faster, one step at a time with each kernel split across the pool, or steps
 * side by side, depends on the plan and the machine. So the plan times its first runs
 * both ways (PLAN_TUNE_RUNS each, alternating), keeps side by side only when it is at
 * least 5% faster, and times again when the thread count changes. It stops early, in
 * order, when side by side's best runs are far behind (PLAN_TUNE_GIVE_UP_*). CAGRAD_INTEROP=0 or 1
 * forces one way, except that a plan with a GEMM that OpenBLAS threads across the whole pool
 * always runs in order (plan_wants_blas_threads), so both ways give the same bits.
 *
 * Longest path first: each step's cost is guessed from its sizes (a GEMM's multiply-adds,
 * any other step's elements), and a step's priority is its cost plus its costliest chain of
 * successors, worked out per run since sizes may change.
 */
#include "graph/internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    graph_plan *p;
    plan_dag *d;
    char *arena;
    const graph_callbacks *cb;
    size_t scratch_stride;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t *pending; /* per node: predecessors not finished */
    int64_t *prio;    /* per node: longest path from it, in guessed cost */
    int32_t *heap;    /* ready steps any thread may run, highest prio first */
    int n_heap;
    int32_t *caller_q; /* ready steps for the caller, a FIFO */
    int q_head, q_tail;
    int done, failed_rc;
    int next_tid;
    atomic_uint news;       /* bumped under the lock whenever a step is ready or the run ends */
    pthread_mutex_t tmp_mu; /* the temporaries' lock (plan_run.c, tmp_ptr) */
} par_run;

static atomic_uint_fast64_t par_runs; /* runs side by side, for tests */

uint64_t cai_graph_plan_parallel_runs(void) {
    return atomic_load_explicit(&par_runs, memory_order_relaxed);
}

bool cai_graph_plan_ran_side_by_side(const graph_plan *p) {
    return p && p->last_side_by_side;
}

int cai_graph_plan_choice(const graph_plan *p) {
    return p->tune_pick;
}

/* ------------------------------------------------------------------ costs and priorities */

static int64_t numel_of(const graph_plan *p, const graph_node *x) {
    int64_t n = 1;
    for (int d = 0; d < x->ndim; d++)
        n *= p->val[x->shape[d]];
    return n;
}

/* A matmul's inner dim at this run's sizes (as run_matmul reads it), at least 1. */
static int64_t matmul_inner(const graph_plan *p, const graph_node *x) {
    const graph_node *a = cai_graph_node_at(p->g, x->a.in[0]);
    int64_t k = a->ndim >= 2 ? p->val[a->shape[a->ndim - (x->a.i[0] ? 2 : 1)]] : 1;
    return k > 0 ? k : 1;
}

static int64_t step_cost(const graph_plan *p, graph_val v) {
    const graph_node *x = cai_graph_node_at(p->g, v);
    int64_t n = numel_of(p, x);
    if (x->a.op == GOP_MATMUL && x->a.n_in >= 2)
        return n * matmul_inner(p, x) / 8; /* a multiply-add costs less than a pointwise op */
    if (x->a.op == GOP_CONV2D || x->a.op == GOP_CONV2D_WEIGHT_GRAD) {
        /* the GEMMs' inner dim: a weight row (the columns' rows, the weight's numel over
         * its dim 0), or g's positions per channel (summed over: over its dim 1) */
        bool fwd = x->a.op == GOP_CONV2D;
        const graph_node *in = cai_graph_node_at(p->g, x->a.in[fwd ? 1 : 0]);
        int64_t rows = in->ndim > 1 ? p->val[in->shape[fwd ? 0 : 1]] : 1;
        int64_t k = rows > 0 ? numel_of(p, in) / rows : 1;
        return n * (k > 0 ? k : 1) / 8;
    }
    if (p->nodes[v].kind == PK_FUSED_RUN && p->nodes[v].grp >= 0) {
        const plan_group *G = &p->groups[p->nodes[v].grp];
        return numel_of(p, cai_graph_node_at(p->g, G->first)) * G->n_members;
    }
    return n + 1;
}

static void priorities(par_run *r) {
    const plan_dag *d = r->d;
    for (int i = d->n_steps - 1; i >= 0; i--) {
        graph_val v = d->step[i];
        int64_t most = 0;
        for (int32_t k = d->succ_off[v]; k < d->succ_off[v + 1]; k++)
            if (r->prio[d->succ[k]] > most)
                most = r->prio[d->succ[k]];
        r->prio[v] = most + step_cost(r->p, v);
    }
}

/* ------------------------------------------------------------------ the ready heap */

static void heap_push(par_run *r, int32_t v) {
    int i = r->n_heap++;
    while (i > 0) {
        int up = (i - 1) / 2;
        if (r->prio[r->heap[up]] >= r->prio[v])
            break;
        r->heap[i] = r->heap[up];
        i = up;
    }
    r->heap[i] = v;
}

static int32_t heap_pop(par_run *r) {
    int32_t top = r->heap[0], last = r->heap[--r->n_heap];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= r->n_heap)
            break;
        if (c + 1 < r->n_heap && r->prio[r->heap[c + 1]] > r->prio[r->heap[c]])
            c++;
        if (r->prio[r->heap[c]] <= r->prio[last])
            break;
        r->heap[i] = r->heap[c];
        i = c;
    }
    if (r->n_heap > 0)
        r->heap[i] = last;
    return top;
}

static void make_ready(par_run *r, int32_t v) {
    atomic_fetch_add_explicit(&r->news, 1, memory_order_release);
    if (r->d->on_caller[v])
        r->caller_q[r->q_tail++] = v;
    else
        heap_push(r, v);
}

/* ------------------------------------------------------------------ the loop */

/* Under the lock: the next step for this thread, or -1 to wait, or -2 to stop. */
static int32_t take(par_run *r, bool is_caller) {
    if (r->failed_rc || r->done == r->d->n_steps)
        return -2;
    if (is_caller && r->q_head < r->q_tail)
        return r->caller_q[r->q_head++];
    return r->n_heap > 0 ? heap_pop(r) : -1;
}

static void finish(par_run *r, int32_t v, int rc) {
    if (rc || r->done + 1 == r->d->n_steps)
        atomic_fetch_add_explicit(&r->news, 1, memory_order_release);
    if (rc) {
        if (!r->failed_rc)
            r->failed_rc = rc;
        pthread_cond_broadcast(&r->cv);
        return;
    }
    r->done++;
    int woken = 0;
    for (int32_t k = r->d->succ_off[v]; k < r->d->succ_off[v + 1]; k++) {
        int32_t s = r->d->succ[k];
        if (--r->pending[s] == 0) {
            make_ready(r, s);
            woken++;
        }
    }
    if (woken || r->done == r->d->n_steps) /* all: the caller may be the one to wake */
        pthread_cond_broadcast(&r->cv);
}

#define PAR_SPIN_NS 50000 /* how long an idle thread watches for a ready step before sleeping */

/* Called with the lock held and nothing to take: watch `news` without the lock for a
 * while (a step is often microseconds away, and waking a sleeping thread costs tens of
 * them), helping any parallel loop a running step starts meanwhile (kern_help.c); then
 * sleep on the condition variable if nothing came. */
static void wait_for_news(par_run *r) {
    unsigned seen = atomic_load_explicit(&r->news, memory_order_acquire);
    unsigned help_seen = cai_kern_help_gen();
    pthread_mutex_unlock(&r->mu);
    int64_t t0 = cai_kern_now_ns();
    bool came = false;
    for (unsigned i = 1; !came; i++) {
        came = atomic_load_explicit(&r->news, memory_order_acquire) != seen;
        if (!came && cai_kern_help()) /* helped: the step may be done, look again */
            t0 = cai_kern_now_ns();
        cai_kern_cpu_relax();
        if (i % 64 == 0 && cai_kern_now_ns() - t0 > PAR_SPIN_NS)
            break;
    }
    pthread_mutex_lock(&r->mu);
    if (!came && atomic_load_explicit(&r->news, memory_order_acquire) == seen &&
        cai_kern_help_gen() == help_seen)
        pthread_cond_wait(&r->cv, &r->mu);
}

/* kern_help's wake-up: a running step started a parallel loop; sleeping threads join it. */
static void wake_helpers(void *ctx) {
    par_run *r = ctx;
    pthread_mutex_lock(&r->mu);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void par_worker(void *ctx, int64_t begin, int64_t end) {
    par_run *r = ctx;
    (void)end;
    bool is_caller = begin == 0; /* a gang's job 0 runs on the calling thread */
    if (is_caller) /* inside the gang: another thread's run cannot open the slot now */
        cai_kern_help_begin(wake_helpers, r);
    pthread_mutex_lock(&r->mu);
    int tid = r->next_tid++;
    plan_run_ctx rc = {.p = r->p, .arena = r->arena, .cb = r->cb, .tmp_mu = &r->tmp_mu};
    rc.scratch = r->arena + r->p->scratch_off + (size_t)tid * r->scratch_stride;
    for (;;) {
        int32_t v = take(r, is_caller);
        if (v == -2)
            break;
        if (v == -1) {
            wait_for_news(r);
            continue;
        }
        pthread_mutex_unlock(&r->mu);
        rc.step = v;
        int code = cai_graph_plan_run_step(&rc, v);
        if (rc.holds_tmp) {
            rc.holds_tmp = false;
            pthread_mutex_unlock(&r->tmp_mu);
        }
        pthread_mutex_lock(&r->mu);
        finish(r, v, code);
    }
    pthread_mutex_unlock(&r->mu);
    if (is_caller) /* every step has run: no loop of this run publishes any more */
        cai_kern_help_end();
}

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

int cai_graph_plan_run_parallel(graph_plan *p, char *arena, const graph_callbacks *cb, bool *ran) {
    int nth = cai_kern_num_threads();
    *ran = false;
    if (nth < 2 || !cai_kern_pool_free())
        return 0;
    if (!p->dag)
        return 0; /* a plan that must run in order, or no memory for its DAG */
    plan_dag *d = p->dag;
    int n = p->n_nodes;
    par_run r = {.p = p, .d = d, .arena = arena, .cb = cb};
    r.scratch_stride = align64(p->scratch_bytes);
    r.prio = d->prio;
    r.pending = d->pending;
    r.heap = d->heap;
    r.caller_q = d->caller_q;
    memcpy(r.pending, d->n_pred, sizeof(int32_t) * (size_t)n);
    priorities(&r);
    for (int i = 0; i < d->n_steps; i++)
        if (r.pending[d->step[i]] == 0)
            make_ready(&r, d->step[i]);
    pthread_mutex_init(&r.mu, NULL);
    pthread_mutex_init(&r.tmp_mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    int rc = 0;
    *ran = cai_kern_gang(nth, par_worker, &r);
    if (*ran) {
        rc = r.failed_rc;
        atomic_fetch_add_explicit(&par_runs, 1, memory_order_relaxed);
    }
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.tmp_mu);
    pthread_mutex_destroy(&r.mu);
    return rc;
}

/* ------------------------------------------------------------------ choosing */

/* Whether a GEMM of the plan goes whole to OpenBLAS's threads at this run's sizes (the
 * kernel layer decides by the sizes and the thread count). Such a GEMM wants the whole
 * pool, which steps side by side hold: it would make threads of its own for the call, and
 * it must not fall back to tiles, which round differently (the bits would then depend on
 * which way the plan ran). A plan with one runs in order. */
static bool plan_wants_blas_threads(const graph_plan *p) {
    for (graph_val v = 0; v < p->n_nodes; v++) {
        const graph_node *x = cai_graph_node_at(p->g, v);
        if (x->a.op != GOP_MATMUL || x->a.n_in < 2)
            continue;
        int64_t n = numel_of(p, x), M = 1, N = n;
        if (x->ndim >= 2) {
            M = p->val[x->shape[x->ndim - 2]];
            N = p->val[x->shape[x->ndim - 1]];
        }
        if (M * N > 0 && cai_kern_gemm_blas_threaded(n / (M * N), M, N, matmul_inner(p, x)))
            return true;
    }
    return false;
}

void cai_graph_plan_check_blas(graph_plan *p) {
    p->blas_in_order = cai_kern_num_threads() > 1 && plan_wants_blas_threads(p);
}

bool cai_graph_plan_in_order_for_blas(const graph_plan *p) {
    return p && p->blas_in_order;
}

static int interop_env(void) {
    const char *e = getenv("CAGRAD_INTEROP");
    if (e && strcmp(e, "0") == 0)
        return 0;
    if (e && strcmp(e, "1") == 0)
        return 1;
    return -1;
}

/* The second fastest of n runs: other tenants of the machine only ever add time, so the
 * fast end estimates a way's own cost, and the second fastest is not one lucky run. */
static int64_t fast_end_ns(const int64_t *t, int n) {
    int64_t s[PLAN_TUNE_RUNS];
    memcpy(s, t, sizeof(int64_t) * (size_t)n);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && s[j] < s[j - 1]; j--) {
            int64_t x = s[j];
            s[j] = s[j - 1];
            s[j - 1] = x;
        }
    return s[n > 1 ? 1 : 0];
}

bool cai_graph_plan_pick_parallel(graph_plan *p) {
    if (p->blas_in_order)
        return false;
    int forced = interop_env();
    if (forced >= 0)
        return forced == 1;
    int nth = cai_kern_num_threads();
    if (nth < 2)
        return false;
    if (p->tune_threads != nth) {
        p->tune_threads = nth;
        p->tune_n[0] = p->tune_n[1] = 0;
        p->tune_pick = -1;
        p->tune_gave_up = false;
    }
    if (p->tune_pick >= 0)
        return p->tune_pick == 1;
    return p->tune_n[1] < p->tune_n[0]; /* alternate, one step at a time first */
}

/* The fastest of n runs. */
static int64_t fastest_ns(const int64_t *t, int n) {
    int64_t m = t[0];
    for (int i = 1; i < n; i++)
        m = t[i] < m ? t[i] : m;
    return m;
}

void cai_graph_plan_note_time(graph_plan *p, bool parallel, int64_t ns) {
    if (p->tune_pick >= 0 || p->blas_in_order || interop_env() >= 0)
        return;
    int k = parallel ? 1 : 0;
    if (p->tune_n[k] < PLAN_TUNE_RUNS)
        p->tune_ns[k][p->tune_n[k]++] = ns;
    int n0 = p->tune_n[0], n1 = p->tune_n[1];
    /* Give up on side by side early when even its best run so far is far behind: steps
     * side by side can take whole-pool kernels (a big GEMM that OpenBLAS would thread) down
     * to a few threads each, and on 16 cores such a run costs 4x (w6), too dear to repeat
     * PLAN_TUNE_RUNS times. Noise only adds time, so two slow best runs are a verdict. */
    if (n0 >= PLAN_TUNE_GIVE_UP_RUNS && n1 >= PLAN_TUNE_GIVE_UP_RUNS &&
        fastest_ns(p->tune_ns[1], n1) * 100 >
            fastest_ns(p->tune_ns[0], n0) * PLAN_TUNE_GIVE_UP_PCT) {
        p->tune_pick = 0;
        p->tune_gave_up = true;
    } else if (n0 == PLAN_TUNE_RUNS && n1 == PLAN_TUNE_RUNS)
        p->tune_pick = fast_end_ns(p->tune_ns[1], PLAN_TUNE_RUNS) <
                               fast_end_ns(p->tune_ns[0], PLAN_TUNE_RUNS) * 95 / 100
                           ? 1
                           : 0;
}

/* The figures that decided: the fastest run each way where the chooser gave up early,
 * else the second fastest. */
int cai_graph_plan_verdict(const graph_plan *p, plan_verdict *v) {
    if (!p || p->tune_pick < 0)
        return -1;
    int64_t (*decided)(const int64_t *, int) = p->tune_gave_up ? fastest_ns : fast_end_ns;
    v->in_order_ns = decided(p->tune_ns[0], p->tune_n[0]);
    v->side_ns = decided(p->tune_ns[1], p->tune_n[1]);
    v->runs_each = p->tune_n[1] < p->tune_n[0] ? p->tune_n[1] : p->tune_n[0];
    v->gave_up = p->tune_gave_up;
    return p->tune_pick;
}
