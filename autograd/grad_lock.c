/* grad_lock.c - the locks that let threads share leaves: a striped table of mutexes keyed
 * by the leaf's address.
 *
 * Several threads may run backwards through one model at once (each its own forward, on
 * its own inputs), and each adds its gradient into the same leaves' .grad, as PyTorch's
 * AccumulateGrad does under the leaf's mutex. A mutex per tensor would cost every tensor
 * 40 bytes for the few that are leaves; a table of stripes costs nothing per tensor, and
 * two leaves that share a stripe only wait on each other's (short) accumulation.
 *
 * A thread holds one stripe at a time and calls nothing under it that takes another, or
 * that waits for another thread (a hook, a backward, the pool's gang): so stripes cannot
 * deadlock. cai_kern_no_wait_begin makes the pool run a GEMM under the lock without
 * waiting for another thread's job.
 */
#include "autograd/internal.h"

#include <pthread.h>

#define STRIPES 64 /* a power of two */

/* Each on its own cache line, so threads on neighbouring stripes do not share one. */
typedef struct {
    pthread_mutex_t mu;
    char pad[64 - sizeof(pthread_mutex_t) % 64];
} stripe;

#define STRIPE_INIT                                                                                \
    {                                                                                              \
        PTHREAD_MUTEX_INITIALIZER, {                                                               \
            0                                                                                      \
        }                                                                                          \
    }
#define STRIPE_INIT_8                                                                              \
    STRIPE_INIT, STRIPE_INIT, STRIPE_INIT, STRIPE_INIT, STRIPE_INIT, STRIPE_INIT, STRIPE_INIT,     \
        STRIPE_INIT
static stripe stripes[STRIPES] = {STRIPE_INIT_8, STRIPE_INIT_8, STRIPE_INIT_8, STRIPE_INIT_8,
                                  STRIPE_INIT_8, STRIPE_INIT_8, STRIPE_INIT_8, STRIPE_INIT_8};

static pthread_mutex_t *stripe_of(const ca_tensor *leaf) {
    uint64_t p = (uint64_t)(uintptr_t)leaf >> 4; /* headers are 16-byte aligned */
    p *= 0x9E3779B97F4A7C15ULL; /* Fibonacci hashing: the high bits mix every bit */
    return &stripes[p >> (64 - 6)].mu;
}

_Static_assert(STRIPES == 1 << 6, "the hash keeps 6 bits");

void cai_grad_lock(const ca_tensor *leaf) {
    pthread_mutex_lock(stripe_of(leaf));
    cai_kern_no_wait_begin();
}

void cai_grad_unlock(const ca_tensor *leaf) {
    cai_kern_no_wait_end();
    pthread_mutex_unlock(stripe_of(leaf));
}
