/* state.c - process and thread state: start-up check, grad mode, forward graph ids,
 * node sequence numbers, the random generator's position, and the thread count.
 */
#include "autograd/internal.h"
#include "graph/graph.h"

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>

/* ---------------------------------------------------------------------------------------
 * Start-up: the op table is checked once; every entry point that makes tensors calls
 * ca_init, so an incomplete table is reported before any op runs.
 */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static ca_status init_status = CA_OK;
static char init_msg[1024];

static void init_run(void) {
    cai_kern_set_allocator((kern_allocator){cai_mem_data_alloc, cai_mem_data_free});
    cai_graph_set_allocator((kern_allocator){cai_mem_data_alloc, cai_mem_data_free});
    init_status = cai_op_table_check();
    if (init_status != CA_OK)
        snprintf(init_msg, sizeof init_msg, "%s", ca_last_error());
}

ca_status ca_init(void) {
    pthread_once(&init_once, init_run);
    if (init_status != CA_OK)
        return err_set(init_status, "%s", init_msg);
    return CA_OK;
}

/* ---------------------------------------------------------------------------------------
 * Grad mode (per thread, like torch.no_grad)
 */
static _Thread_local bool grad_disabled = false;

bool cai_grad_mode_enabled(void) {
    return !grad_disabled;
}
bool ca_is_grad_enabled(void) {
    return !grad_disabled;
}

bool ca_set_grad_enabled(bool enabled) {
    bool prev = !grad_disabled;
    grad_disabled = !enabled;
    return prev;
}

/* ---------------------------------------------------------------------------------------
 * Forward graph ids and node order. A graph break closes the current forward graph and
 * opens the next; every node records the id it was made in, so the compiled backward can
 * name its values aot{k}_ and one backward can span several forward graphs.
 */
static atomic_int current_graph = 0;
static atomic_uint_fast64_t seq_counter = 0;
static _Thread_local char last_break_reason[256];

int cai_fwd_graph_current(void) {
    return atomic_load(&current_graph);
}

ca_status ca_graph_break(const char *reason) {
    snprintf(last_break_reason, sizeof last_break_reason, "%s", reason ? reason : "");
    atomic_fetch_add(&current_graph, 1);
    return CA_OK;
}

int ca_forward_graph_id(void) {
    return atomic_load(&current_graph);
}

const char *ca_graph_break_last_reason(void) {
    return last_break_reason;
}

int ca_tensor_forward_graph_id(const ca_tensor *t) {
    return t && t->grad_fn ? t->grad_fn->graph_id : -1;
}

static _Thread_local ca_op_observer_fn op_observer;
static _Thread_local void *op_observer_ctx;

void ca_set_op_observer(ca_op_observer_fn fn, void *ctx) {
    op_observer = fn;
    op_observer_ctx = fn ? ctx : NULL;
}

void cai_op_observe(const char *op) {
    if (op_observer)
        op_observer(op, cai_fwd_graph_current(), op_observer_ctx);
}
uint64_t cai_node_next_seq(void) {
    return atomic_fetch_add(&seq_counter, 1);
}

uint64_t cai_node_peek_seq(void) {
    return atomic_load(&seq_counter);
}

/* ---------------------------------------------------------------------------------------
 * Random generator position: one (seed, offset) pair for the process. Each random call
 * takes draws from the offset on, so a seed fixes every later value.
 */
/* Under a lock: threads drawing at once each take a range of draws of their own. */
static uint64_t rng_seed = 0x2545F4914F6CDD1DULL;
static uint64_t rng_offset = 0;
static pthread_mutex_t rng_lock = PTHREAD_MUTEX_INITIALIZER;

void ca_manual_seed(uint64_t seed) {
    ca_rng_set_state(seed, 0);
}

void ca_rng_get_state(uint64_t *seed, uint64_t *offset) {
    pthread_mutex_lock(&rng_lock);
    if (seed)
        *seed = rng_seed;
    if (offset)
        *offset = rng_offset;
    pthread_mutex_unlock(&rng_lock);
}

void ca_rng_set_state(uint64_t seed, uint64_t offset) {
    pthread_mutex_lock(&rng_lock);
    rng_seed = seed;
    rng_offset = offset;
    pthread_mutex_unlock(&rng_lock);
}

void cai_random_take(int64_t n, uint64_t *seed, uint64_t *offset) {
    pthread_mutex_lock(&rng_lock);
    *seed = rng_seed;
    *offset = rng_offset;
    rng_offset += (uint64_t)n;
    pthread_mutex_unlock(&rng_lock);
}

/* ---------------------------------------------------------------------------------------
 * Threads
 */
int ca_set_num_threads(int n) {
    return cai_kern_set_num_threads(n);
}
int ca_get_num_threads(void) {
    return cai_kern_num_threads();
}

const char *ca_kernel_isa(void) {
    return ca_init() == CA_OK ? cai_kern_isa_name(cai_kern_isa()) : "unknown";
}

const char *ca_blas_core(void) {
    return cai_kern_blas_core();
}
