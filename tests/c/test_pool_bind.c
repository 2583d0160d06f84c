/* test_pool_bind.c - suite `pool_bind`: where the pool's threads run during a backward.
 *
 * From a backward's first parallel job to its end the calling thread stays on its CPU and
 * every worker on a CPU of its own among the others (kern_pool.c); the caller's mask is put
 * back afterwards, and CAGRAD_BIND_THREADS=0 leaves every mask alone. Each test needs two
 * CPUs in this process's mask and skips otherwise.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity, sched_getcpu */
#endif
#include "testutil.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "codegen/kern.h"

/* What the workers saw: the CPU count of their mask and, when it is one, that CPU. */
typedef struct {
    pthread_t caller;
    atomic_int worker_ran, worker_mask_count, worker_cpu;
} pb_seen;

static int pb_only_cpu(const cpu_set_t *m) {
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, m))
            return c;
    return -1;
}

/* The caller's chunk waits (5 s at most) until a worker has run one, so that every job has
 * a worker in it even when a test beside this one keeps the other CPU busy for a while. */
static void pb_job(void *ctx, int64_t begin, int64_t end) {
    pb_seen *s = ctx;
    (void)begin, (void)end;
    if (pthread_equal(pthread_self(), s->caller)) {
        for (int i = 0; i < 5000 && !atomic_load(&s->worker_ran); i++)
            usleep(1000);
        return;
    }
    cpu_set_t m;
    cr_assert_eq(sched_getaffinity(0, sizeof m, &m), 0);
    atomic_store(&s->worker_mask_count, CPU_COUNT(&m));
    atomic_store(&s->worker_cpu, pb_only_cpu(&m));
    atomic_store(&s->worker_ran, 1);
}

static void pb_need_two_cpus(cpu_set_t *mask) {
    cr_assert_eq(sched_getaffinity(0, sizeof *mask, mask), 0);
    if (CPU_COUNT(mask) < 2 || ca_set_num_threads(2) < 2)
        cr_skip_test("needs 2 CPUs");
}

static void pb_run_job(pb_seen *s) {
    *s = (pb_seen){.caller = pthread_self(), .worker_cpu = -1};
    cai_kern_parallel_for(8, 1, pb_job, s);
    cr_assert(atomic_load(&s->worker_ran), "no worker took part in a job in 5 s");
}

Test(pool_bind, a_backward_scope_keeps_caller_and_workers_apart) {
    cpu_set_t before, during, after;
    pb_need_two_cpus(&before);
    pb_seen s;
    cai_kern_bind_begin();
    pb_run_job(&s);
    cr_assert_eq(sched_getaffinity(0, sizeof during, &during), 0);
    cr_assert_eq(CPU_COUNT(&during), 1, "the caller is not held on one CPU");
    int mine = pb_only_cpu(&during);
    cr_assert(CPU_ISSET(mine, &before), "the caller's CPU %d is outside its own mask", mine);
    cr_assert_eq(atomic_load(&s.worker_mask_count), 1, "the worker is not held on one CPU");
    cr_assert_neq(atomic_load(&s.worker_cpu), mine, "the worker shares the caller's CPU %d", mine);
    cr_assert(CPU_ISSET(atomic_load(&s.worker_cpu), &before));
    cai_kern_bind_end();
    cr_assert_eq(sched_getaffinity(0, sizeof after, &after), 0);
    cr_assert(CPU_EQUAL(&before, &after), "the caller's mask was not put back");
}

Test(pool_bind, nested_scopes_restore_at_the_outermost_end) {
    cpu_set_t before, now;
    pb_need_two_cpus(&before);
    pb_seen s;
    cai_kern_bind_begin();
    cai_kern_bind_begin(); /* a hook's backward inside the outer one */
    pb_run_job(&s);
    cai_kern_bind_end();
    cr_assert_eq(sched_getaffinity(0, sizeof now, &now), 0);
    cr_assert_eq(CPU_COUNT(&now), 1, "the inner end let the caller go early");
    cai_kern_bind_end();
    cr_assert_eq(sched_getaffinity(0, sizeof now, &now), 0);
    cr_assert(CPU_EQUAL(&before, &now));
}

Test(pool_bind, a_thread_that_moved_itself_keeps_its_choice) {
    cpu_set_t before, mine, now;
    pb_need_two_cpus(&before);
    pb_seen s;
    cai_kern_bind_begin();
    pb_run_job(&s);
    CPU_ZERO(&mine); /* a hook pins the thread where it wants it: two CPUs of its own */
    for (int c = 0, k = 0; c < CPU_SETSIZE && k < 2; c++)
        if (CPU_ISSET(c, &before)) {
            CPU_SET(c, &mine);
            k++;
        }
    cr_assert_eq(sched_setaffinity(0, sizeof mine, &mine), 0);
    cai_kern_bind_end();
    cr_assert_eq(sched_getaffinity(0, sizeof now, &now), 0);
    cr_assert(CPU_EQUAL(&mine, &now), "the end overwrote the thread's own choice");
    sched_setaffinity(0, sizeof before, &before);
}

Test(pool_bind, off_with_cagrad_bind_threads_0) {
    cpu_set_t before, now;
    setenv("CAGRAD_BIND_THREADS", "0", 1); /* read at the first scope of this process */
    pb_need_two_cpus(&before);
    pb_seen s;
    cai_kern_bind_begin();
    pb_run_job(&s);
    cr_assert_eq(sched_getaffinity(0, sizeof now, &now), 0);
    cr_assert(CPU_EQUAL(&before, &now), "CAGRAD_BIND_THREADS=0 still moved the caller");
    cr_assert_gt(atomic_load(&s.worker_mask_count), 1, "CAGRAD_BIND_THREADS=0 pinned the worker");
    cai_kern_bind_end();
}

Test(pool_bind, outside_a_backward_nothing_moves) {
    cpu_set_t before, now;
    pb_need_two_cpus(&before);
    pb_seen s;
    pb_run_job(&s);
    cr_assert_eq(sched_getaffinity(0, sizeof now, &now), 0);
    cr_assert(CPU_EQUAL(&before, &now));
    cr_assert_gt(atomic_load(&s.worker_mask_count), 1, "a forward-time job pinned the worker");
}

/* The engine opens the scope: a leaf's hook, which runs after the parallel pointwise
 * gradient of exp over a million elements, sees its thread held on one CPU, and the
 * thread's mask is whole again once ca_backward returns. */
static ca_status pb_hook(ca_tensor *grad, ca_tensor **replacement, void *ctx) {
    (void)grad, (void)replacement;
    cpu_set_t m;
    if (sched_getaffinity(0, sizeof m, &m) == 0)
        *(int *)ctx = CPU_COUNT(&m);
    return CA_OK;
}

Test(pool_bind, a_backward_holds_its_thread_until_it_returns) {
    cpu_set_t before, after;
    pb_need_two_cpus(&before);
    int64_t shape[] = {1 << 20};
    ca_tensor *x = tu_randn(CA_FLOAT32, 1, shape, true), *y = NULL, *loss = NULL;
    cr_assert_eq(ca_exp(x, &y), CA_OK);
    cr_assert_eq(ca_sum(y, 0, NULL, false, &loss), CA_OK);
    int count_in_hook = 0;
    ca_hook_handle h;
    cr_assert_eq(ca_tensor_register_hook(x, pb_hook, &count_in_hook, NULL, &h), CA_OK);
    cr_assert_eq(ca_backward(loss), CA_OK);
    cr_assert_eq(count_in_hook, 1, "during the backward the thread's mask had %d CPUs",
                 count_in_hook);
    cr_assert_eq(sched_getaffinity(0, sizeof after, &after), 0);
    cr_assert(CPU_EQUAL(&before, &after), "ca_backward did not put the mask back");
    ca_tensor *ts[] = {loss, y, x};
    tu_release_n(ts, 3);
}
