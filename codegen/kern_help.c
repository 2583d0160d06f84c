/* kern_help.c - idle threads of a gang help a parallel loop that one of them starts.
 *
 * A compiled plan's steps side by side (graph/plan_parallel.c) run on a gang: every pool
 * thread loops over ready steps, and a kernel inside a step would run on its thread
 * alone. When a step's kernel starts a parallel loop and other threads of the gang have
 * nothing to do, they join it here, so a lone big step still uses every thread. One loop
 * at a time (its publisher owns the slot); a loop that finds the slot taken, or no gang
 * open to helping, runs on its own thread.
 *
 * The publisher fills the slot, opens it and wakes the gang; it claims chunks like its
 * helpers, then closes the slot and waits until no helper is inside. A helper counts
 * itself in before it looks at the slot and out when it leaves, and reads the slot only
 * while it is open, so the publisher never reuses the slot under a helper. The chunks are
 * the ones cai_kern_parallel_for would make, so results are the same bits.
 *
 * One gang at a time is open to helping: the pool runs one gang at a time, and begin/end
 * are called inside it (by its job 0), so threads that each start a side-by-side run (two
 * compiled backwards at once) take the slot in turn, ordered by the pool's lock.
 */
#include <stdatomic.h>

#include "kern_internal.h"

static struct {
    atomic_bool enabled; /* a gang open to helping runs */
    void (*wake)(void *ctx);
    void *wake_ctx;
    atomic_int owner; /* 1 while a publisher holds the slot */
    atomic_bool open;
    atomic_int helpers; /* threads inside the open loop */
    atomic_uint gen;    /* bumped at every publication, for watchers */
    kern_range_fn fn;   /* the loop: valid while open */
    void *ctx;
    int64_t n, nchunks;
    atomic_int_fast64_t next;
} kern_help;

void cai_kern_help_begin(void (*wake)(void *ctx), void *ctx) {
    kern_help.wake = wake;
    kern_help.wake_ctx = ctx;
    atomic_store(&kern_help.enabled, true);
}

void cai_kern_help_end(void) {
    atomic_store(&kern_help.enabled, false);
}

unsigned cai_kern_help_gen(void) {
    return atomic_load_explicit(&kern_help.gen, memory_order_acquire);
}

static void help_chunks(kern_range_fn fn, void *ctx, int64_t n, int64_t nchunks) {
    for (;;) {
        int64_t c = atomic_fetch_add(&kern_help.next, 1), len;
        if (c >= nchunks)
            return;
        int64_t b = cai_kern_chunk(c, n, nchunks, &len);
        fn(ctx, b, b + len);
    }
}

bool cai_kern_help(void) {
    if (!atomic_load(&kern_help.open))
        return false;
    atomic_fetch_add(&kern_help.helpers, 1);
    bool ran = false;
    if (atomic_load(&kern_help.open)) { /* still open: the slot is this loop's */
        help_chunks(kern_help.fn, kern_help.ctx, kern_help.n, kern_help.nchunks);
        ran = true;
    }
    atomic_fetch_sub(&kern_help.helpers, 1);
    return ran;
}

bool cai_kern_help_try(int64_t n, int64_t grain, kern_range_fn fn, void *ctx) {
    int free_slot = 0;
    if (!atomic_load(&kern_help.enabled) ||
        !atomic_compare_exchange_strong(&kern_help.owner, &free_slot, 1))
        return false;
    int64_t nchunks = n / grain, most = 4 * (int64_t)cai_kern_num_threads();
    kern_help.fn = fn;
    kern_help.ctx = ctx;
    kern_help.n = n;
    kern_help.nchunks = nchunks < most ? nchunks : most;
    atomic_store(&kern_help.next, 0);
    atomic_store(&kern_help.open, true);
    atomic_fetch_add_explicit(&kern_help.gen, 1, memory_order_release);
    if (kern_help.wake)
        kern_help.wake(kern_help.wake_ctx);
    help_chunks(fn, ctx, n, kern_help.nchunks);
    atomic_store(&kern_help.open, false);
    while (atomic_load(&kern_help.helpers) > 0) /* helpers finish the chunks they took */
        cai_kern_cpu_relax();
    atomic_store(&kern_help.owner, 0);
    return true;
}
