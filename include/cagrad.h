/* cagrad.h - the public C API of cagrad, a compiled-autograd engine.
 *
 * A complete program: a 2-layer MLP, its forward, the backward, and the gradients.
 *
 *     #include <cagrad.h>
 *     #include <stdio.h>
 *
 *     int main(void) {
 *         ca_manual_seed(0);
 *         int64_t xs[2] = {32, 4}, w1s[2] = {16, 4}, w2s[2] = {1, 16}, b1s[1] = {16};
 *         ca_tensor *x, *w1, *b1, *w2, *h, *a, *y, *loss;
 *         if (ca_randn(CA_FLOAT32, 2, xs, &x) || ca_randn(CA_FLOAT32, 2, w1s, &w1) ||
 *             ca_zeros(CA_FLOAT32, 1, b1s, &b1) || ca_randn(CA_FLOAT32, 2, w2s, &w2)) {
 *             fprintf(stderr, "%s\n", ca_last_error());
 *             return 1;
 *         }
 *         ca_tensor_set_requires_grad(w1, true);            // leaves we want .grad for
 *         ca_tensor_set_requires_grad(b1, true);
 *         ca_tensor_set_requires_grad(w2, true);
 *         ca_linear(x, w1, b1, &h);                         // h = x @ w1^T + b1
 *         ca_relu(h, &a);
 *         ca_linear(a, w2, NULL, &y);                       // y: [32, 1]
 *         ca_mean(y, 0, NULL, false, &loss);                // scalar
 *         if (ca_backward(loss) != CA_OK) {                 // fills w1, b1, w2 .grad
 *             fprintf(stderr, "%s\n", ca_last_error());
 *             return 1;
 *         }
 *         const float *g = ca_tensor_data(ca_tensor_grad(w1)); // borrowed, [16, 4]
 *         printf("dloss/dw1[0,0] = %g\n", g[0]);
 *         ca_tensor *all[] = {x, w1, b1, w2, h, a, y, loss};
 *         for (int i = 0; i < 8; i++)
 *             ca_tensor_release(all[i]);
 *         return 0;
 *     }
 *
 * Conventions
 * - Every fallible call returns ca_status: CA_OK (0) on success, a negative code on
 *   error. The message, which says what was wrong and how to fix it, comes from
 *   ca_last_error() (thread-local, valid until the next failing call on that thread).
 *   The library never exits or aborts on bad input.
 * - "Errors:" under a declaration, or at the head of its group, lists every status other
 *   than CA_OK that the call returns, and when. CA_STATUS_INTERNAL (a bug in cagrad, or a
 *   failed ca_init) is not repeated there: any call that makes tensors, runs an op or a
 *   backward may return it. Calls that return no ca_status, and ca_graph_break, cannot
 *   fail.
 * - Results come back through the last parameter(s). On error they are set to NULL.
 * - Ownership: a `ca_tensor **out` receives a NEW reference, which the caller releases
 *   with ca_tensor_release(). Getters return BORROWED pointers, valid while the tensor
 *   lives. Tensor arguments are borrowed: the library takes its own references when it
 *   keeps them (for example in the autograd graph).
 * - Semantics follow PyTorch: broadcasting, views, .grad accumulation, hooks and the
 *   errors for backward twice or for in-place modification of a saved tensor.
 * - Dims may be negative (counted from the end), as in PyTorch.
 * - No implicit dtype promotion: binary ops need equal dtypes; convert with ca_to_dtype.
 *   Comparisons (ca_lt, ..., ca_ne and their _scalar forms) are the exception: they
 *   compare in PyTorch's promoted dtype (bool < int64 < float32 < float64) and return
 *   CA_BOOL.
 *
 * Threads
 * cagrad takes no lock around a call; its state is of three kinds, as in PyTorch.
 * - Per thread: the last error, grad mode, the op observer and the last graph-break
 *   reason. A new thread starts with no error, grad mode on and no observer.
 * - Shared tensors: reference counts (of tensors, storages and autograd nodes) are atomic,
 *   so threads may share tensors: one model's weights used by several threads' forwards
 *   and backwards at once, each on inputs of its own. Each backward keeps its state in a
 *   walk of its own, so backwards whose graphs meet (at the shared leaves' AccumulateGrad
 *   nodes) run at once, eager or compiled; every accumulation into a .grad holds that
 *   tensor's lock, so a shared leaf's .grad ends as the sum of every thread's gradient, in
 *   some order (float sums may round differently from a serial run). Changing a tensor is
 *   the caller's race with every other use of it, as in PyTorch: in-place ops (the
 *   optimizer step, zeroing .grad), ca_tensor_set_grad, ca_tensor_set_requires_grad,
 *   ca_tensor_retain_grad and registering or removing hooks, and reading .grad while a
 *   backward on another thread may accumulate into it. An in-place op in the graph on a
 *   view, or on a tensor with views, changes every view of its memory: each rebuilds its
 *   history when next used, so such views must not be in use on other threads until each
 *   has been used once on the changing thread. Saved-tensor hooks' tensors are
 *   unpacked into the graph's nodes for the length of a backward: a graph with packed
 *   saved tensors is backwarded by one thread at a time.
 * - Process-wide. Safe from any thread (locked, atomic, or read-only after ca_init):
 *   ca_init, the op registry, the data cache, forward-graph ids (a break on any thread
 *   opens the next graph for all), the random generator (each call takes a range of
 *   draws of its own under a lock, so which thread gets which numbers depends on their
 *   order), the kernel thread pool (kernels started by several threads at once share it:
 *   one runs in parallel, the others on their own thread; ca_set_num_threads waits for
 *   the running kernel), and compiled autograd (its cache, counters and enable stack are
 *   locked; each thread keeps its own walk and key; threads whose keys match run the same
 *   cached graph side by side, each with run state of its own). Compiled autograd, once
 *   enabled, applies to every thread's backward. ca_compiled_autograd_reset must not run
 *   while another thread runs a backward (it frees the graphs), and ca_set_allocator runs
 *   while no other thread is inside cagrad.
 * Hooks, ctx_free functions, blob deleters and the op observer run on the thread whose
 * call triggers them, outside the .grad locks (a hook may call cagrad). Each declaration,
 * or group, says which rule applies: "Thread-safe: yes" (any thread, any time), "per
 * thread", "shared" (the tensors it is given may be in use on other threads, as long as
 * no thread changes them meanwhile), or "no" with the rule above. The Python package
 * releases the GIL around its calls and takes no lock of its own.
 */
#ifndef CAGRAD_H
#define CAGRAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CA_MAX_DIMS 8

/* ---------------------------------------------------------------------------------------
 * Version. The macros give the header's version at compile time, ca_version() the version
 * of the library linked, so a program can check that the two agree:
 *     if (strcmp(ca_version(), CA_VERSION) != 0) ...
 * CA_VERSION_NUMBER is major * 1000000 + minor * 1000 + patch, for #if comparisons. The
 * Python package's __version__ and pyproject.toml carry the same version.
 */
#define CA_VERSION_MAJOR  0
#define CA_VERSION_MINOR  1
#define CA_VERSION_PATCH  0
#define CA_VERSION_NUMBER 1000
#define CA_VERSION        "0.1.0"

/* "MAJOR.MINOR.PATCH" of the library linked. Static string. Thread-safe: yes. */
const char *ca_version(void);

/* ---------------------------------------------------------------------------------------
 * Status codes and errors
 */
typedef enum {
    CA_OK = 0,
    CA_STATUS_INVALID = -1,  /* a bad argument: NULL, a bad value, a wrong kind of tensor */
    CA_STATUS_SHAPE = -2,    /* shapes that do not fit; the message names both */
    CA_STATUS_DTYPE = -3,    /* a dtype the op does not take, or two dtypes that differ */
    CA_STATUS_DIM = -4,      /* a dim out of range */
    CA_STATUS_INDEX = -5,    /* an index out of range */
    CA_STATUS_NOMEM = -6,    /* an allocation failed; nothing was leaked */
    CA_STATUS_AUTOGRAD = -7, /* backward twice, in-place changed saved tensor, no grad_fn */
    CA_STATUS_HOOK = -8,     /* a hook failed or returned a gradient that does not fit */
    CA_STATUS_INTERNAL = -9, /* a broken internal invariant: please report it */
    CA_STATUS_VALUE = -10,   /* an argument's value is outside its range (Python: ValueError) */
    CA_STATUS_DIST = -11,    /* distributed: no MPI in this build, not initialised, a timeout */
} ca_status;

/* The thread's error: failing calls set it, calls that succeed leave it alone. The next
 * four calls are Thread-safe: per thread. */

/* The message of the last failing call on this thread ("" if none). Borrowed. */
const char *ca_last_error(void);
/* The status of the last failing call on this thread (CA_OK if none). */
ca_status ca_last_status(void);
/* Set the thread's error, printf-style, and return `status`. For hooks that fail. */
ca_status ca_error_set(ca_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void ca_error_clear(void);
/* "CA_STATUS_SHAPE" for CA_STATUS_SHAPE. Static string. Thread-safe: yes. */
const char *ca_status_name(ca_status status);

/* Verify the op table (every op has a shape rule, a forward kernel and a derivative
 * rule) and set up the library. Called on first use by every entry point; calling it
 * yourself gives the check's message early. Idempotent: a failure is final, and every
 * later call reports it again.
 * Errors: CA_STATUS_INTERNAL (the op table is incomplete: a build defect).
 * Thread-safe: yes. */
ca_status ca_init(void);

/* ---------------------------------------------------------------------------------------
 * Memory. All allocation (tensor storage, nodes, scratch) goes through one allocator.
 * alloc returns memory aligned to `align` (a power of two, at most 64) or NULL. A program
 * that calls cagrad from several threads gets concurrent alloc and free calls: an
 * allocator it installs must be thread-safe.
 */
typedef struct {
    void *(*alloc)(size_t size, size_t align, void *ctx);
    void (*free)(void *ptr, void *ctx);
    void *ctx;
} ca_allocator;

/* Install an allocator (NULL, or one with a NULL function, restores the default). Do
 * this only while no tensor made with another allocator is alive.
 * Thread-safe: no; call it while no other thread is inside cagrad. */
void ca_set_allocator(const ca_allocator *allocator);
/* The allocator in use into *out (out may be NULL). Thread-safe: yes. */
void ca_get_allocator(ca_allocator *out);

/* The data cache. Freed tensor data and kernel scratch of 1 KiB or more stay cached by
 * exact size (rounded up to 64 bytes), so a training loop that frees and re-allocates the
 * same sizes every step neither calls malloc nor page-faults fresh memory in. The least
 * recently freed blocks go back to the allocator once the cache holds more than its
 * limit: 512 MiB, or CAGRAD_CACHE_LIMIT_MB (read once, at first use; 0 turns caching
 * off). Only the default allocator's blocks are cached; installing an allocator empties
 * the cache. Running out of memory empties it and retries once.
 * Thread-safe: yes (the cache has its own lock). */
typedef struct {
    size_t limit;          /* bytes the cache may hold */
    size_t cached_bytes;   /* bytes it holds now */
    size_t cached_blocks;  /* blocks it holds now */
    uint64_t hits, misses; /* cacheable allocations served from it / from the allocator */
} ca_cache_info;

void ca_empty_cache(void);                  /* gives every cached block back to the allocator */
void ca_set_cache_limit(size_t bytes);      /* 0 turns caching off; shrinks the cache now */
void ca_get_cache_info(ca_cache_info *out); /* out may be NULL */

/* ---------------------------------------------------------------------------------------
 * Threads and random numbers
 */
/* Threads used by cagrad's kernels and GEMMs: n clamped to 1..cores; returns the count
 * set. The pool is resized at the next kernel. OpenBLAS's own threads never run: cagrad
 * keeps it to one thread and runs its threading on this pool (see ca_get_blas_info).
 * Thread-safe: no; one ca_set_num_threads at a time. */
int ca_set_num_threads(int n);
/* The pool's size, or the size it will start with. Thread-safe: yes. */
int ca_get_num_threads(void);
/* The kernel path in use: "avx512", "avx2" or "scalar" (chosen at start-up from the CPU,
 * capped by CAGRAD_ISA), or "unknown" when ca_init failed. Static string.
 * Thread-safe: yes. */
const char *ca_kernel_isa(void);
/* OpenBLAS's core type in use ("Cooperlake", "Haswell", ...; OPENBLAS_CORETYPE forces it),
 * or "unknown". Static string. Benchmarks report it beside the kernel ISA.
 * Thread-safe: yes. */
const char *ca_blas_core(void);

/* The BLAS behind the GEMMs. Strings are static. */
typedef struct {
    const char *name;      /* "scipy-openblas32" (the wheel NumPy ships) or "system" */
    const char *version;   /* OpenBLAS's version, "0.3.34"; "unknown" if it does not say */
    const char *config;    /* openblas_get_config() */
    const char *core;      /* the kernels in use, as ca_blas_core */
    const char *threading; /* how its GEMMs are threaded, in words */
    const char *core_isa;  /* widest vector ISA of those kernels: "avx512", "avx2", "scalar" */
    const char *cpu_isa;   /* widest this CPU and OS support */
    /* Non-NULL when the kernels are below what the CPU supports (say Prescott kernels on
     * an AVX-512 CPU, GEMMs several times slower): what is wrong and how to fix it.
     * cagrad never sets or overrides OPENBLAS_CORETYPE. The Python package warns with it
     * once, at import. */
    const char *warning;
} ca_blas_info;
/* Fills *out. Thread-safe: yes. */
void ca_get_blas_info(ca_blas_info *out);
/* cagrad's build and run-time configuration as text (version, kernel ISA, threads, the
 * BLAS and its warning), like torch.__config__.show(). Writes at most cap bytes including
 * the NUL and returns the length the whole text needs, as snprintf does.
 * Thread-safe: yes. */
size_t ca_show_config(char *buf, size_t cap);
/* Seed the generator behind ca_randn, ca_rand and ca_dropout: one generator for the
 * process. Thread-safe: no; a random call (see Threads). */
void ca_manual_seed(uint64_t seed);
/* The random generator's whole state (seed and how far it has advanced), to replay the
 * same random numbers later (torch.get_rng_state / set_rng_state; checkpointing uses it).
 * Thread-safe: no; random calls (see Threads). */
void ca_rng_get_state(uint64_t *seed, uint64_t *offset);
void ca_rng_set_state(uint64_t seed, uint64_t offset);

/* ---------------------------------------------------------------------------------------
 * Tensors
 */
/* CA_BOOL: one byte per element, 0 or 1. Bool tensors never require grad; on them the
 * pointwise ops are logical (add, maximum: or; mul, minimum: and), comparisons, where,
 * masked_fill and copies; other arithmetic and reductions refuse them (convert first). */
typedef enum { CA_FLOAT32 = 0, CA_FLOAT64 = 1, CA_INT64 = 2, CA_BOOL = 3 } ca_dtype;

typedef struct ca_tensor ca_tensor;

/* "float32", ...; "invalid-dtype" for a value that is not a ca_dtype. Thread-safe: yes. */
const char *ca_dtype_name(ca_dtype dtype);
size_t ca_dtype_size(ca_dtype dtype); /* bytes per element. Thread-safe: yes. */

/* Creation. Each returns a new, contiguous tensor (new reference in *out).
 * Errors: CA_STATUS_INVALID (out NULL; shape NULL with ndim > 0), CA_STATUS_SHAPE (ndim
 * outside 0..CA_MAX_DIMS, a negative size, too many elements), CA_STATUS_DTYPE (a value
 * that is not a ca_dtype), CA_STATUS_NOMEM.
 * Thread-safe: yes (a new tensor is a group of its own); ca_randn and ca_rand are random
 * calls. */
ca_status ca_empty(ca_dtype dtype, int ndim, const int64_t *shape, ca_tensor **out);
ca_status ca_zeros(ca_dtype dtype, int ndim, const int64_t *shape, ca_tensor **out);
ca_status ca_ones(ca_dtype dtype, int ndim, const int64_t *shape, ca_tensor **out);
ca_status ca_full(ca_dtype dtype, int ndim, const int64_t *shape, double value, ca_tensor **out);
/* [start, end) in steps of step, as torch.arange. Also CA_STATUS_INVALID when start, end
 * or step is not finite, step is 0, or step points away from end. */
ca_status ca_arange(double start, double end, double step, ca_dtype dtype, ca_tensor **out);
/* Standard normal / uniform [0, 1), from the seeded generator. Also CA_STATUS_DTYPE for
 * CA_INT64. Thread-safe: no; random calls (see Threads). */
ca_status ca_randn(ca_dtype dtype, int ndim, const int64_t *shape, ca_tensor **out);
ca_status ca_rand(ca_dtype dtype, int ndim, const int64_t *shape, ca_tensor **out);
/* Copies numel elements, row-major, from `data` (which the caller keeps). Also
 * CA_STATUS_INVALID when data is NULL. */
ca_status ca_from_data(ca_dtype dtype, int ndim, const int64_t *shape, const void *data,
                       ca_tensor **out);

/* Wrap memory owned by someone else (a NumPy array, a DLPack producer) as a tensor,
 * without copying. strides are in elements (NULL: contiguous) and must be >= 0; data must
 * be aligned to the dtype's size. On success, deleter(ctx) (deleter may be NULL) is called
 * exactly once, when the last view of that memory is released; on failure it is never
 * called and the caller still owns data.
 * Errors: CA_STATUS_INVALID (out or data NULL, shape NULL with ndim > 0, a negative
 * stride, data not aligned), CA_STATUS_SHAPE (ndim outside 0..CA_MAX_DIMS, a negative size, too
 * many elements), CA_STATUS_DTYPE (not a ca_dtype), CA_STATUS_NOMEM. Thread-safe: yes. */
typedef void (*ca_blob_deleter_fn)(void *ctx);
ca_status ca_tensor_from_blob(ca_dtype dtype, int ndim, const int64_t *shape,
                              const int64_t *strides, void *data, ca_blob_deleter_fn deleter,
                              void *ctx, ca_tensor **out);

/* Shared memory, as torch.Tensor.share_memory_() (Linux). ca_tensor_share_memory_ moves
 * t's memory, and so every view of it, into an anonymous memory file mapped shared: a
 * process forked afterwards writes the same memory (Hogwild training), and the file's
 * descriptor (ca_tensor_shared_fd: owned by the memory, with the mapping's size and the
 * byte offset of t's element 0) maps it in another process, once passed there (as
 * multiprocessing passes descriptors over a Unix socket), with ca_tensor_from_shared_fd,
 * which duplicates fd and takes geometry as ca_tensor_from_blob. Values are kept; sharing
 * shared memory is a no-op. ca_tensor_shared_fd returns -1 for memory that is not shared.
 * Errors: CA_STATUS_INVALID (t or out NULL, a bad descriptor or offset), CA_STATUS_NOMEM
 * (the system refused the memory), CA_STATUS_SHAPE (the view exceeds the mapping), and
 * ca_tensor_from_blob's. Thread-safe: no for share_memory_ (t's memory moves), shared for
 * the others. */
ca_status ca_tensor_share_memory_(ca_tensor *t);
bool ca_tensor_is_shared(const ca_tensor *t);
int ca_tensor_shared_fd(const ca_tensor *t, size_t *map_bytes, size_t *elem0_offset);
ca_status ca_tensor_from_shared_fd(int fd, size_t map_bytes, size_t elem0_offset, ca_dtype dtype,
                                   int ndim, const int64_t *shape, const int64_t *strides,
                                   ca_tensor **out);

/* References. retain returns its argument; both take NULL. Releasing the last reference
 * may free nodes and release other tensors of t's graph. Thread-safe: shared. */
ca_tensor *ca_tensor_retain(ca_tensor *t);
void ca_tensor_release(ca_tensor *t);

/* Metadata. Pointers are borrowed and live as long as the tensor. A NULL t gives
 * CA_FLOAT32, 0, NULL or false. Thread-safe: shared. */
ca_dtype ca_tensor_dtype(const ca_tensor *t);
int ca_tensor_ndim(const ca_tensor *t);
const int64_t *ca_tensor_shape(const ca_tensor *t);
const int64_t *ca_tensor_strides(const ca_tensor *t); /* in elements */
int64_t ca_tensor_numel(const ca_tensor *t);
bool ca_tensor_is_contiguous(const ca_tensor *t);
/* Version counter, shared by views of one storage, bumped by every in-place write. */
uint64_t ca_tensor_version(const ca_tensor *t);
/* Pointer to element (0, ..., 0); walk it with ca_tensor_strides. Borrowed. */
void *ca_tensor_data(const ca_tensor *t);
/* Copy all elements, row-major, into dst (nbytes >= numel * dtype size).
 * Errors: CA_STATUS_INVALID (t or dst NULL, nbytes too small). */
ca_status ca_tensor_copy_to(const ca_tensor *t, void *dst, size_t nbytes);
/* The value of a one-element tensor, as a double.
 * Errors: CA_STATUS_INVALID (t or out NULL), CA_STATUS_SHAPE (numel is not 1). */
ca_status ca_tensor_item(const ca_tensor *t, double *out);
/* "float32[2, 3]" (or "NULL") into buf (always NUL-terminated); returns buf. */
const char *ca_tensor_describe(const ca_tensor *t, char *buf, size_t size);

/* ---------------------------------------------------------------------------------------
 * Autograd state of a tensor
 */
/* The calls on a tensor here are Thread-safe: shared. */
/* Only leaves (tensors made by the user, not by an op that recorded a graph) can change
 * requires_grad, and only float tensors can require grad. true on a non-leaf is a no-op.
 * Errors: CA_STATUS_INVALID (t NULL), CA_STATUS_AUTOGRAD (false on a non-leaf),
 * CA_STATUS_DTYPE (true on an int64 tensor). */
ca_status ca_tensor_set_requires_grad(ca_tensor *t, bool requires_grad);
bool ca_tensor_requires_grad(const ca_tensor *t);
bool ca_tensor_is_leaf(const ca_tensor *t);
/* The accumulated gradient, or NULL. Borrowed. */
ca_tensor *ca_tensor_grad(const ca_tensor *t);
/* Replace .grad (NULL clears it, like `t.grad = None`). The tensor keeps its own
 * reference to grad, which must match t's shape and dtype.
 * Errors: CA_STATUS_INVALID (t NULL), CA_STATUS_SHAPE (grad's shape or dtype differs). */
ca_status ca_tensor_set_grad(ca_tensor *t, ca_tensor *grad);
/* Name of the node that made t ("MulBackward0"), or NULL for a leaf. Static string. */
const char *ca_tensor_grad_fn_name(const ca_tensor *t);
/* The tensor whose memory the view t was made over by view ops (PyTorch's _base: never
 * itself a view), or NULL when t is not such a view (a detached alias is not). Borrowed. */
ca_tensor *ca_tensor_view_base(const ca_tensor *t);
/* Mark the view t as output output_nr of a function that returns several views
 * (function: "Unbind", "Split" or "SplitWithSizes"; a binding that builds torch.unbind or
 * torch.split out of ca_select/ca_narrow calls it): in-place ops on it, or on views of it,
 * in the graph are then refused as PyTorch refuses them.
 * Errors: CA_STATUS_INVALID (t or function NULL, t not a view, another function).
 * Thread-safe: no (t changes). */
ca_status ca_tensor_mark_multi_output_view(ca_tensor *t, const char *function, int output_nr);
/* A new tensor sharing t's storage, outside the graph (requires_grad false).
 * Errors: CA_STATUS_INVALID (t or out NULL), CA_STATUS_NOMEM. */
ca_status ca_tensor_detach(ca_tensor *t, ca_tensor **out);
/* One pointer per tensor for a language binding (NULL until set; not reference counted,
 * never read by the library): Python keeps its wrapper there while the wrapper lives, so
 * that a tensor handed out twice is the same object, as in PyTorch. */
void ca_tensor_set_binding(ca_tensor *t, void *p);
void *ca_tensor_binding(const ca_tensor *t);
/* In place, as PyTorch's detach_(): t leaves its graph and becomes a leaf that does not
 * require grad (the graph itself is unchanged for the other tensors in it).
 * Errors: CA_STATUS_INVALID (t NULL), CA_STATUS_AUTOGRAD (t is a view made by a view op
 * in the graph: PyTorch's "Can't detach views in-place"; use ca_tensor_detach). */
ca_status ca_tensor_detach_(ca_tensor *t);
/* Make a non-leaf keep its gradient in .grad during backward (no-op on leaves).
 * Errors: CA_STATUS_INVALID (t NULL), CA_STATUS_AUTOGRAD (t does not require grad). */
ca_status ca_tensor_retain_grad(ca_tensor *t);
bool ca_tensor_retains_grad(const ca_tensor *t);

/* Grad mode. With it off, ops record no graph (like torch.no_grad()).
 * Thread-safe: per thread; each thread starts with it on. */
bool ca_is_grad_enabled(void);
/* Returns the previous setting, so callers can restore it. */
bool ca_set_grad_enabled(bool enabled);

/* ---------------------------------------------------------------------------------------
 * Forward graphs and graph breaks
 */
/* Close the current forward graph and open the next, like torch._dynamo.graph_break().
 * Every node records the forward graph it was recorded in; one backward may span several
 * forward graphs. reason (may be NULL) is copied; see ca_graph_break_last_reason.
 * Always CA_OK. Thread-safe: yes; the graph id is process-wide (a break on one thread
 * moves every thread's later ops to the next graph), the reason per thread. */
ca_status ca_graph_break(const char *reason);
/* The forward graph ops are recorded into now (0 at start, +1 per break).
 * Thread-safe: yes. */
int ca_forward_graph_id(void);
/* The reason given to this thread's last ca_graph_break ("" if none). Borrowed.
 * Thread-safe: per thread. */
const char *ca_graph_break_last_reason(void);
/* The forward graph t's grad_fn was recorded in, or -1 for a leaf (or NULL).
 * Thread-safe: shared. */
int ca_tensor_forward_graph_id(const ca_tensor *t);
/* fn (NULL removes it) is called after every op that succeeds on this thread, with the
 * op's name ("mul") and the forward graph it ran in. Tools such as explain() count ops
 * with it; with no observer set, ops pay one branch. Thread-safe: per thread. */
typedef void (*ca_op_observer_fn)(const char *op, int forward_graph, void *ctx);
void ca_set_op_observer(ca_op_observer_fn fn, void *ctx);

/* ---------------------------------------------------------------------------------------
 * Hooks
 *
 * A tensor hook runs when the gradient for its tensor has been computed, before it is
 * used: `grad` is borrowed. To replace the gradient, set *replacement to a NEW reference
 * of the same shape and dtype; leave it NULL to keep `grad`. Return CA_OK, or an error
 * (set a message with ca_error_set): the backward then stops with that error and frees
 * what it held.
 *
 * A post-accumulate-grad hook runs on a leaf after its .grad has been updated.
 *
 * ctx is yours; ctx_free (may be NULL) is called on it when the hook is removed or its
 * owner is freed. Hooks run in the order they were registered, on the thread that runs
 * the backward. handle may be NULL. The calls here are Thread-safe: shared.
 */
typedef ca_status (*ca_tensor_hook_fn)(ca_tensor *grad, ca_tensor **replacement, void *ctx);
typedef ca_status (*ca_post_accumulate_hook_fn)(ca_tensor *leaf, void *ctx);
typedef void (*ca_ctx_free_fn)(void *ctx);
typedef uint64_t ca_hook_handle;

/* t must require grad.
 * Errors: CA_STATUS_INVALID (t or fn NULL), CA_STATUS_AUTOGRAD (t does not require grad),
 * CA_STATUS_NOMEM. */
ca_status ca_tensor_register_hook(ca_tensor *t, ca_tensor_hook_fn fn, void *ctx,
                                  ca_ctx_free_fn ctx_free, ca_hook_handle *handle);
/* t must be a leaf that requires grad.
 * Errors: CA_STATUS_INVALID (t or fn NULL), CA_STATUS_AUTOGRAD (t is not a leaf, or does
 * not require grad), CA_STATUS_NOMEM. */
ca_status ca_tensor_register_post_accumulate_grad_hook(ca_tensor *t, ca_post_accumulate_hook_fn fn,
                                                       void *ctx, ca_ctx_free_fn ctx_free,
                                                       ca_hook_handle *handle);
/* Remove a hook of either kind registered on t. A hook cannot remove itself during its own
 * call (its entry and ctx would be freed under it): remove it after the backward returns.
 * Errors: CA_STATUS_INVALID (t NULL; no hook with that handle on t; the hook is running). */
ca_status ca_tensor_remove_hook(ca_tensor *t, ca_hook_handle handle);

/* ---------------------------------------------------------------------------------------
 * Graph nodes (torch.autograd.graph.Node): the autograd graph itself, and hooks on it.
 *
 * ca_tensor_grad_fn borrows t's node (NULL for a leaf); ca_tensor_grad_accumulator gives a
 * leaf's AccumulateGrad node (made on first use; the leaf keeps it only while someone
 * holds it, as in PyTorch). Hold a node with ca_node_retain / ca_node_release.
 *
 * A node pre-hook runs before the node's backward with its output gradients
 * (grad_outputs[k], NULL where none flowed); a post-hook runs after it with the gradients
 * it computed for its inputs (grad_inputs[i], NULL where the input needs none) and the
 * output gradients. Either may replace an entry of the array it may change: release the
 * old reference and store a new one of the same shape and dtype. For an AccumulateGrad
 * node the pre-hooks see the gradient before it is added to .grad, and the post-hooks run
 * after (no grad_inputs). Tensor hooks of the same gradient run before node pre-hooks.
 * Under compiled autograd each hook is a call-out step of the compiled graph.
 * Thread-safe: shared.
 */
typedef struct ca_node ca_node;
typedef ca_status (*ca_node_pre_hook_fn)(int n_outputs, ca_tensor **grad_outputs, void *ctx);
typedef ca_status (*ca_node_post_hook_fn)(int n_inputs, ca_tensor **grad_inputs, int n_outputs,
                                          ca_tensor *const *grad_outputs, void *ctx);

ca_node *ca_tensor_grad_fn(const ca_tensor *t);
/* Errors: CA_STATUS_INVALID (t or out NULL), CA_STATUS_AUTOGRAD (t is not a leaf that
 * requires grad), CA_STATUS_NOMEM. */
ca_status ca_tensor_grad_accumulator(ca_tensor *t, ca_node **out);
ca_node *ca_node_retain(ca_node *n);
void ca_node_release(ca_node *n);
/* "MmBackward0", "AccumulateGrad", a custom function's name. */
const char *ca_node_name(const ca_node *n);
/* The node's inputs in the forward, as next edges: the node input i's gradient goes to
 * (borrowed; NULL when that input needs no gradient), and which of its outputs. */
int ca_node_n_next(const ca_node *n);
ca_node *ca_node_next(const ca_node *n, int i, int *input_nr);
int ca_node_n_outputs(const ca_node *n);
/* An AccumulateGrad node's leaf (borrowed), else NULL. */
ca_tensor *ca_node_variable(const ca_node *n);
/* One pointer of yours per node (a language binding keeps PyTorch's `metadata` dict
 * there): set it (ctx_free, may be NULL, runs on the old one and when the node is freed),
 * and read it (NULL when unset). */
void ca_node_set_user_data(ca_node *n, void *data, ca_ctx_free_fn ctx_free);
void *ca_node_user_data(const ca_node *n);
/* The custom function a node runs, or NULL (see ca_custom_apply). */
const struct ca_custom_function_s *ca_node_custom(const ca_node *n);
/* A built-in node's saved values by PyTorch's names (grad_fn._saved_self, _saved_dim):
 * ca_node_n_saved / ca_node_saved_name list them (none for custom functions' nodes and
 * AccumulateGrad), ca_node_saved reads one. A tensor comes back as a new reference (NULL
 * for an optional input that was not given), through its unpack hook if saved-tensor hooks
 * packed it. Errors: CA_STATUS_INVALID (an argument NULL; no saved value of that name),
 * CA_STATUS_AUTOGRAD (freed by a backward, or changed in place since: a backward's
 * messages), CA_STATUS_HOOK (the unpack hook failed). */
typedef enum { CA_SAVED_TENSOR, CA_SAVED_INT, CA_SAVED_DOUBLE, CA_SAVED_INTS } ca_saved_kind;
typedef struct {
    ca_saved_kind kind;
    ca_tensor *tensor; /* CA_SAVED_TENSOR */
    int64_t i;         /* CA_SAVED_INT */
    double d;          /* CA_SAVED_DOUBLE */
    int n_ints;        /* CA_SAVED_INTS: dims or sizes */
    int64_t ints[CA_MAX_DIMS];
} ca_saved_value;
int ca_node_n_saved(const ca_node *n);
const char *ca_node_saved_name(const ca_node *n, int i);
ca_status ca_node_saved(ca_node *n, const char *name, ca_saved_value *out);
/* Call a built-in node on its output's gradient, as PyTorch's grad_fn(grad): its
 * derivative rule runs once and grad_inputs[i] (ca_node_n_next entries) gets input i's
 * gradient as a new reference, NULL where input i needs none. With grad mode on the rule's
 * ops record, so the results are differentiable. Errors: CA_STATUS_INVALID (an argument
 * NULL; a custom function's or AccumulateGrad node), CA_STATUS_SHAPE (grad_output not of
 * the output's shape and dtype), CA_STATUS_AUTOGRAD (saved values freed by a backward, or
 * changed in place). */
ca_status ca_node_call(ca_node *n, ca_tensor *grad_output, ca_tensor **grad_inputs);
/* A graph edge (node n's output k, PyTorch's GradientEdge) as a tensor that ca_grad and
 * ca_backward_ex take as an input or output: for an AccumulateGrad node its leaf, else a
 * zero of the output's gradient's dtype and shape (broadcast from one element) whose
 * grad_fn is n at output k. New reference. Errors: CA_STATUS_INVALID (n or out NULL; k
 * not an output of n; the AccumulateGrad node's leaf is gone), CA_STATUS_NOMEM. */
ca_status ca_node_output_tensor(ca_node *n, int k, ca_tensor **out);
/* Errors: CA_STATUS_INVALID (n or fn NULL), CA_STATUS_NOMEM. */
ca_status ca_node_register_pre_hook(ca_node *n, ca_node_pre_hook_fn fn, void *ctx,
                                    ca_ctx_free_fn ctx_free, ca_hook_handle *handle);
ca_status ca_node_register_post_hook(ca_node *n, ca_node_post_hook_fn fn, void *ctx,
                                     ca_ctx_free_fn ctx_free, ca_hook_handle *handle);
/* As ca_tensor_remove_hook, for node hooks.
 * Errors: CA_STATUS_INVALID (n NULL; no hook with that handle on n; the hook is running). */
ca_status ca_node_remove_hook(ca_node *n, ca_hook_handle handle);

/* ---------------------------------------------------------------------------------------
 * Saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks)
 *
 * While pushed (per thread, innermost first), every tensor an op saves for backward is
 * handed to pack, which stores in *packed whatever it likes (a copy, an offloaded buffer,
 * the tensor itself as a new reference); the node keeps that instead of the tensor. Each
 * backward that needs it calls unpack(packed, &out), which must give back a new reference
 * of the saved tensor's shape and dtype. free_packed (may be NULL) runs when the node lets
 * go of packed (after a backward without retain_graph, or when the node is freed); ctx_free
 * when the last node packed by these hooks is gone and they were popped. The version check
 * of saved tensors changed in place is skipped for packed ones: the hooks own them.
 * Errors (push): CA_STATUS_INVALID (pack or unpack NULL), CA_STATUS_NOMEM; (pop): nothing
 * pushed. Thread-safe: per thread. */
typedef ca_status (*ca_pack_hook_fn)(ca_tensor *t, void **packed, void *ctx);
typedef ca_status (*ca_unpack_hook_fn)(void *packed, ca_tensor **out, void *ctx);
ca_status ca_saved_tensors_hooks_push(ca_pack_hook_fn pack, ca_unpack_hook_fn unpack,
                                      ca_ctx_free_fn free_packed, void *ctx,
                                      ca_ctx_free_fn ctx_free);
ca_status ca_saved_tensors_hooks_pop(void);

/* ---------------------------------------------------------------------------------------
 * Custom functions: a node whose backward is your callback (torch.autograd.Function is
 * built on it).
 *
 * Compute the outputs yourself, with grad mode off, then record them with ca_custom_apply:
 * it makes one node whose inputs are `inputs` and whose outputs are `outputs`, and returns
 * the tensors the caller should hand out (results[k], new references):
 *  - an output made by the forward (no grad_fn yet) becomes the node's output k in place;
 *  - an output that is one of the inputs, or that has a history already, is returned as a
 *    new alias of it (same storage) carrying the node, as PyTorch does for `return x`;
 *  - an output flagged CA_CUSTOM_DIRTY (an input the forward changed in place) has its
 *    history rebased onto the node; it must be one of the inputs, and not a leaf that
 *    requires grad;
 *  - an output flagged CA_CUSTOM_NONDIFF, and every int64 output, gets no gradient: it is
 *    returned as is and does not require grad.
 * No node is made when grad mode is off or no input requires grad: results[k] are then new
 * references to outputs[k], and ctx_free runs at once.
 *
 * backward(ctx, n_outputs, grad_outputs, n_inputs, grad_inputs) runs during a backward with
 * grad mode off (on with create_graph: ops it calls then record, so it is differentiable
 * again). grad_outputs[k] is borrowed, NULL when no gradient reached output k (its
 * consumers did not need one). Set grad_inputs[i] to a new reference for each input that
 * needs one (those that require grad; the others are ignored), or leave it NULL for none.
 * A gradient of another dtype is converted; one of a shape the input broadcasts to is
 * summed down; any other shape is an error naming the function. Return CA_OK, or an error
 * with a message (ca_error_set): the backward stops with it and frees what it held.
 * Under compiled autograd the callback is an opaque call-out step of the compiled graph;
 * there a NULL gradient for an input that needs one counts as zeros.
 *
 * Traced backwards (optional). Set trace_state, and compiled autograd may run the backward
 * once, at capture, on zero gradients, recording the ops it calls, and put those ops into
 * its graph instead of a call-out: they are then fused with the rest and the callback no
 * longer runs on cache hits. trace_state(ctx, info) is asked at every compiled backward,
 * with info zeroed, and fills it in (ca_custom_trace_info):
 *  - state: 0 to run the callback as a call-out (write the reason into why), or a nonzero
 *    number that is equal for two nodes of this function exactly when their backwards,
 *    given gradients and saved tensors of the same shapes and the same sizes (below), call
 *    the same ops with the same arguments: it goes into the cache key;
 *  - saved[0 .. n_saved): the tensors the backward reads besides its gradients, borrowed:
 *    valid until release runs or the node is freed;
 *  - sizes[0 .. n_sizes): integers the backward bakes into its ops (a length it kept, a
 *    dim): they key the graph like tensor sizes do, so a change of one is a change of
 *    size, not of graph. When one of them, or any size of the node, has become dynamic the
 *    node is a call-out.
 * The recording is refused, and the callback runs as a call-out, when the backward reads
 * tensor data (ca_tensor_data, ca_tensor_item), changes a tensor in place, starts a
 * backward, calls an op the compiled graph cannot express, uses a tensor that is neither a
 * gradient nor one of saved nor made by it with ca_zeros, ca_ones or ca_full (those become
 * constants), or fails; also when the node's sizes are dynamic. Anything
 * else it does (its own side effects) happens at capture only. ca_custom_tracing() is
 * nonzero while a callback is being recorded.
 *
 * release (may be NULL) runs when a backward without retain_graph has used the node:
 * free the saved state then, and fail a later backward with PyTorch's "backward through
 * the graph a second time" error. ctx_free (may be NULL) runs when the node is freed.
 * name ("MyFnBackward", at most 63 bytes) is copied; key is your identity for the
 * function (e.g. a class id): the compiled-autograd cache tells functions apart by it.
 * Thread-safe: shared.
 */
typedef ca_status (*ca_custom_backward_fn)(void *ctx, int n_outputs, ca_tensor *const *grad_outputs,
                                           int n_inputs, ca_tensor **grad_inputs);

#define CA_CUSTOM_MAX_SAVED 128
#define CA_CUSTOM_MAX_SIZES 32
typedef struct {
    uint64_t state; /* 0: a call-out */
    int n_saved;
    ca_tensor *saved[CA_CUSTOM_MAX_SAVED]; /* borrowed */
    int n_sizes;
    int64_t sizes[CA_CUSTOM_MAX_SIZES];
    char why[128]; /* state 0: why (for the verbose log) */
} ca_custom_trace_info;
typedef ca_status (*ca_custom_trace_state_fn)(void *ctx, ca_custom_trace_info *info);

typedef struct ca_custom_function_s {
    const char *name;
    uint64_t key;
    ca_custom_backward_fn backward;
    void (*release)(void *ctx);
    void *ctx;
    ca_ctx_free_fn ctx_free;
    ca_custom_trace_state_fn trace_state; /* NULL: the backward is always a call-out */
} ca_custom_function;

enum { CA_CUSTOM_DIRTY = 1u << 0, CA_CUSTOM_NONDIFF = 1u << 1 };

/* output_flags may be NULL (no flags). On failure nothing is recorded, results are NULL,
 * and ctx_free has run.
 * Errors: CA_STATUS_INVALID (NULL arguments, n_inputs < 0 or n_outputs < 1, a name too
 * long, a dirty output that is not an input), CA_STATUS_AUTOGRAD (a dirty leaf that
 * requires grad), CA_STATUS_NOMEM. */
ca_status ca_custom_apply(const ca_custom_function *fn, int n_inputs, ca_tensor *const *inputs,
                          int n_outputs, ca_tensor *const *outputs, const unsigned *output_flags,
                          ca_tensor **results);
/* t's output number in its grad_fn (0 for every op but a custom function's outputs). */
int ca_tensor_output_nr(const ca_tensor *t);
/* The function t's grad_fn runs when it is a custom function's node (name, key, callbacks
 * and ctx as given to ca_custom_apply), else NULL. Borrowed: valid while t's grad_fn is.
 * Thread-safe: shared. */
const ca_custom_function *ca_tensor_grad_fn_custom(const ca_tensor *t);
/* For a language binding's cycle collector: the custom function of t's grad_fn when t holds
 * the only reference to that node and one reference alone holds t (the binding's own), so
 * that the function's ctx is reachable only through t; else NULL. PyTorch's rule for
 * collecting the cycles a ctx that holds its own output makes. Another thread taking a
 * reference changes the answer; a collector that holds its interpreter's lock sees its
 * own objects consistently. Thread-safe: shared. */
const ca_custom_function *ca_tensor_sole_custom_fn(const ca_tensor *t);
/* Nonzero while compiled autograd records a custom backward on this thread (see
 * trace_state): a callback should then report failure through its status alone. */
int ca_custom_tracing(void);
/* Inside a custom backward that compiled autograd is recording (ca_custom_tracing()
 * nonzero): refuse the recording, so that the backward runs as a call-out in every
 * compiled backward, for a side effect that must happen each time (a callback queued for
 * the backward's end, a graph break); why (copied, the first reason kept) goes to the
 * verbose log. No effect otherwise. Thread-safe: per thread. */
void ca_custom_refuse_tracing(const char *why);
/* Inside a custom backward: `saved` (a detached copy or alias of the function's own output
 * k, which a ctx must not hold with its history: the output holds the node) as the
 * backward should read it. Under create_graph it comes back with output k of the running
 * node as its history, so that a double backward differentiates through it (PyTorch's
 * saved outputs do the same); otherwise a new reference to `saved` itself.
 * Errors: CA_STATUS_INVALID (NULL arguments, called outside a custom backward, k out of
 * range, or `saved` not of output k's dtype and shape). Thread-safe: per thread. */
ca_status ca_custom_saved_output(ca_tensor *saved, int k, ca_tensor **out);

/* ---------------------------------------------------------------------------------------
 * Backward
 *
 * Errors, for the three calls: CA_STATUS_INVALID (root NULL; ca_grad adds cases below),
 * CA_STATUS_AUTOGRAD (a root that does not require grad; no seed gradient for a root of
 * more than one element; a saved tensor freed by an earlier backward or changed in place
 * since it was saved), CA_STATUS_SHAPE (a seed gradient whose shape or dtype differs from
 * its root's), CA_STATUS_HOOK (a hook failed without setting a message, or returned a
 * gradient that does not fit), the status a failing hook returned, CA_STATUS_NOMEM, and
 * under compiled autograd CA_STATUS_INDEX (a kernel of the compiled graph failed at run
 * time, running out of scratch memory included).
 * Thread-safe: shared (the graph's tensors); see Threads for compiled autograd.
 */
/* loss.backward(): loss must have one element. Gradients accumulate into the .grad of
 * every leaf that requires grad. Saved values are freed afterwards; a second backward
 * through the same graph is an error. */
ca_status ca_backward(ca_tensor *loss);

typedef struct {
    ca_tensor *gradient; /* d(root) seed, same shape as root; NULL only for one element */
    bool retain_graph;   /* keep saved values for another backward */
    /* backward(inputs=...): when n_inputs > 0, only these tensors' .grad are written (only
     * the part of the graph that leads to them runs); a non-leaf among them retains its
     * grad from then on, as in PyTorch. */
    int n_inputs;
    ca_tensor *const *inputs;
    /* Double backward: the gradients are made with differentiable ops, so they carry a
     * grad_fn (when they depend on something that requires grad) and can be
     * differentiated again; a leaf's .grad becomes a non-leaf (its first value a
     * CopyBackwards copy, then .grad + g out of place). Implies retain_graph. Under
     * compiled autograd it is captured and cached (see ca_grad_options.create_graph).
     * Leaves and their .grad then hold each other: set .grad to NULL after use. */
    bool create_graph;
} ca_backward_options;

ca_status ca_backward_ex(ca_tensor *root, const ca_backward_options *options);

typedef struct {
    ca_tensor *const *grad_outputs; /* n_outputs entries (entries may be NULL), or NULL */
    bool retain_graph;
    bool allow_unused; /* an input that outputs do not depend on gives NULL, not an error */
    /* Double backward: grads are differentiable (see ca_backward_options.create_graph);
     * implies retain_graph. Under compiled autograd it is captured and cached: the grads
     * are the outputs of a CompiledAutogradBackward0 node (a custom function's; a backward
     * through it is traced into that backward's compiled graph). */
    bool create_graph;
} ca_grad_options;

/* torch.autograd.grad: grads[i] receives d(outputs)/d(inputs[i]) as a new reference;
 * .grad fields are not touched. options may be NULL. Also CA_STATUS_INVALID when
 * outputs, inputs or grads is NULL, an entry of outputs or inputs is NULL, or n_outputs or
 * n_inputs is below 1; and CA_STATUS_AUTOGRAD for an input that does not require grad, or that the
 * outputs do not use (without allow_unused). */
ca_status ca_grad(int n_outputs, ca_tensor *const *outputs, int n_inputs, ca_tensor *const *inputs,
                  const ca_grad_options *options, ca_tensor **grads);

/* ---------------------------------------------------------------------------------------
 * Compiled autograd
 *
 * While enabled, ca_backward and ca_grad do not run the graph node by node: they walk it
 * (hooks included), look the walk up in a cache keyed by node types and sizes, and on a
 * miss trace the whole backward into one graph, optimise it, plan its memory, and run
 * it. Results equal the eager backward's. CAGRAD_LOGS=compiled_autograd prints each
 * traced graph; compiled_autograd_verbose adds why each cache miss happened.
 *
 * The cache, the counters and the enable depth are process-wide: enabled on one thread,
 * compiled autograd applies to every thread's backward. Every call here is Thread-safe:
 * yes (locked), but ca_compiled_autograd_reset, which must not run while another thread
 * runs a backward.
 */
typedef struct {
    bool dynamic;         /* every size symbolic from the first capture (else: on change) */
    int cache_size_limit; /* compiled graphs per cache leaf; 0 means the default, 8 */
    bool off; /* this level turns compiled autograd off (torch's compiled_autograd._disable) */
} ca_compiled_options;

/* Enable (options may be NULL for the defaults). Calls nest: each enable needs a disable,
 * and the innermost options apply; a level with `off` set runs backwards eagerly until it
 * is disabled. Reads CAGRAD_LOGS.
 * Errors: CA_STATUS_INVALID (nested more than 16 deep; cache_size_limit < 0). */
ca_status ca_compiled_autograd_enable(const ca_compiled_options *options);
/* Errors: CA_STATUS_INVALID (not enabled). */
ca_status ca_compiled_autograd_disable(void);
/* Whether a backward now would run compiled: enabled, and the innermost level not off. */
bool ca_compiled_autograd_enabled(void);
/* Levels enabled and not yet disabled (off levels included). */
int ca_compiled_autograd_depth(void);
/* Drop every compiled graph and zero the counters. */
void ca_compiled_autograd_reset(void);

typedef struct {
    int64_t captures; /* graphs traced */
    int64_t cache_hits;
    int64_t cache_misses;
    int64_t graphs;          /* compiled graphs alive in the cache */
    int64_t fused_kernels;   /* fused loops in those graphs */
    int64_t eager_fallbacks; /* backwards run eagerly (cache bound reached, or untraceable) */
    int64_t compile_ns;      /* wall time spent compiling on misses: trace, passes, plan */
    int64_t custom_traced;   /* custom backwards traced into captured graphs (per capture) */
    int64_t custom_callouts; /* custom backwards captured as opaque call-outs (per capture) */
    /* compiled runs whose steps ran side by side on the thread pool (inter-op parallelism;
     * each graph times both ways on its first runs and keeps the faster, see
     * docs/compiled-autograd.md; CAGRAD_INTEROP=0/1 forces one) */
    int64_t side_by_side_runs;
} ca_compiled_counters;

void ca_compiled_autograd_counters(ca_compiled_counters *out); /* out may be NULL */

/* Profiling the compiled backward's plan: how much of it could run in parallel. While on
 * (off by default: it reads the clock around every step), each compiled run times its
 * steps and keeps:
 *  - work: the steps' times summed, the backward's time on one thread;
 *  - span: the longest chain of steps that depend on each other (through values, or the
 *    order of hooks and call-outs), its time on unlimited threads;
 * so work / span bounds the speed-up any number of threads could give the plan, and
 * max(work / p, span) is the best time on p threads. Measure at 1 thread: a step's own
 * kernel threads shorten it, which is intra-op parallelism, not the plan's.
 * It also keeps the costliest steps: where the backward's time goes, by kernel and by the
 * autograd node that made each.
 * Errors (last_profile): CA_STATUS_INVALID (out NULL; no profiled run yet). Not
 * thread-safe, as the rest of compiled autograd. */
#define CA_PROFILE_TOP 8
typedef struct {
    const char *op;   /* the step's kernel ("matmul", "conv2d_weight_grad", "pw": fused) */
    const char *node; /* the autograd node whose rule made it ("ConvolutionBackward0") */
    int64_t ns;
} ca_compiled_step;
typedef struct {
    int64_t work_ns;
    int64_t span_ns;
    int steps; /* steps that did work */
    /* the costliest steps, longest first (static strings, valid for the process) */
    int n_top;
    ca_compiled_step top[CA_PROFILE_TOP];
} ca_compiled_profile;
void ca_compiled_autograd_set_profiling(bool on);
ca_status ca_compiled_autograd_last_profile(ca_compiled_profile *out);

/* Write the graph of the latest compiled backward (the last one run, cache hit or miss) as
 * Graphviz DOT to path, or to stdout for "-". Render it with `dot -Tsvg in.dot -o out.svg`.
 * Nodes are labelled like the CAGRAD_LOGS=compiled_autograd graph (value name, op,
 * dtype and symbolic shape); each autograd node's part is a light cluster "Name (NodeCall
 * i)", and each fused kernel a cluster "fused k".
 * Errors: CA_STATUS_INVALID (path NULL; no compiled backward has run since start-up or
 * ca_compiled_autograd_reset; the latest backward ran eagerly, see eager_fallbacks; the
 * file cannot be written: the message names the path and the system's reason),
 * CA_STATUS_NOMEM. */
ca_status ca_graph_write_dot(const char *path);

/* ---------------------------------------------------------------------------------------
 * Ops. Each records a node in the autograd graph when grad mode is on and an input
 * requires grad. Binary ops broadcast with NumPy's rules. Results are new references.
 *
 * Errors, for every op: CA_STATUS_INVALID (a NULL tensor or out), CA_STATUS_NOMEM; each
 * group adds its own. Every op is Thread-safe: shared (all its tensor arguments);
 * ca_dropout, when it drops, is also a random call.
 */
/* pointwise binary.
 * Errors: CA_STATUS_SHAPE (shapes that do not broadcast), CA_STATUS_DTYPE (the dtypes
 * differ, or int64 for an op other than add, sub, mul, maximum, minimum, where and the
 * comparisons). */
ca_status ca_add(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_sub(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_mul(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_div(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_pow(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_maximum(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_minimum(ca_tensor *a, ca_tensor *b, ca_tensor **out);
/* cond ? a : b; cond is any dtype, nonzero = true, and gets no gradient */
ca_status ca_where(ca_tensor *cond, ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_where_scalar(ca_tensor *cond, ca_tensor *a, double b, ca_tensor **out);
/* comparisons: CA_BOOL results, compared in the inputs' promoted dtype; no gradient */
ca_status ca_lt(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_le(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_gt(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_ge(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_eq(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_ne(ca_tensor *a, ca_tensor *b, ca_tensor **out);

/* scalar forms: a OP s, and the reflected s OP a.
 * Errors: CA_STATUS_DTYPE (int64, except add, sub, rsub, mul, maximum, minimum and the
 * comparisons). */
ca_status ca_add_scalar(ca_tensor *a, double s, ca_tensor **out);
ca_status ca_sub_scalar(ca_tensor *a, double s, ca_tensor **out);
ca_status ca_rsub_scalar(ca_tensor *a, double s, ca_tensor **out); /* s - a */
ca_status ca_mul_scalar(ca_tensor *a, double s, ca_tensor **out);
ca_status ca_div_scalar(ca_tensor *a, double s, ca_tensor **out);
ca_status ca_rdiv_scalar(ca_tensor *a, double s, ca_tensor **out); /* s / a */
ca_status ca_pow_scalar(ca_tensor *a, double s, ca_tensor **out);  /* a ^ s */
ca_status ca_rpow_scalar(ca_tensor *a, double s, ca_tensor **out); /* s ^ a */
ca_status ca_maximum_scalar(ca_tensor *a, double s, ca_tensor **out);
ca_status ca_minimum_scalar(ca_tensor *a, double s, ca_tensor **out);
ca_status ca_lt_scalar(ca_tensor *a, double s, ca_tensor **out);
ca_status ca_le_scalar(ca_tensor *a, double s, ca_tensor **out);
ca_status ca_gt_scalar(ca_tensor *a, double s, ca_tensor **out);
ca_status ca_ge_scalar(ca_tensor *a, double s, ca_tensor **out);
ca_status ca_eq_scalar(ca_tensor *a, double s, ca_tensor **out);
ca_status ca_ne_scalar(ca_tensor *a, double s, ca_tensor **out);

/* pointwise unary.
 * Errors: CA_STATUS_DTYPE (int64, except neg, abs and to_dtype), and the cases below. */
ca_status ca_neg(ca_tensor *x, ca_tensor **out);
ca_status ca_exp(ca_tensor *x, ca_tensor **out);
ca_status ca_log(ca_tensor *x, ca_tensor **out);
ca_status ca_sqrt(ca_tensor *x, ca_tensor **out);
ca_status ca_rsqrt(ca_tensor *x, ca_tensor **out);
ca_status ca_abs(ca_tensor *x, ca_tensor **out);
ca_status ca_sin(ca_tensor *x, ca_tensor **out);
ca_status ca_cos(ca_tensor *x, ca_tensor **out);
/* the everyday math functions, as torch.<name> (ops_math.c). int64: CA_STATUS_DTYPE, except
 * floor, ceil, trunc, round and sgn, which keep int64 as PyTorch does. round is half to
 * even (torch.round with decimals=0). */
ca_status ca_log1p(ca_tensor *x, ca_tensor **out);
ca_status ca_expm1(ca_tensor *x, ca_tensor **out);
ca_status ca_log2(ca_tensor *x, ca_tensor **out);
ca_status ca_log10(ca_tensor *x, ca_tensor **out);
ca_status ca_exp2(ca_tensor *x, ca_tensor **out);
ca_status ca_erf(ca_tensor *x, ca_tensor **out);
ca_status ca_erfc(ca_tensor *x, ca_tensor **out);
ca_status ca_erfinv(ca_tensor *x, ca_tensor **out);
ca_status ca_sinh(ca_tensor *x, ca_tensor **out);
ca_status ca_cosh(ca_tensor *x, ca_tensor **out);
ca_status ca_tan(ca_tensor *x, ca_tensor **out);
ca_status ca_asin(ca_tensor *x, ca_tensor **out);
ca_status ca_acos(ca_tensor *x, ca_tensor **out);
ca_status ca_atan(ca_tensor *x, ca_tensor **out);
ca_status ca_asinh(ca_tensor *x, ca_tensor **out);
ca_status ca_acosh(ca_tensor *x, ca_tensor **out);
ca_status ca_atanh(ca_tensor *x, ca_tensor **out);
ca_status ca_sinc(ca_tensor *x, ca_tensor **out); /* sin(pi x) / (pi x), 1 at 0 */
ca_status ca_deg2rad(ca_tensor *x, ca_tensor **out);
ca_status ca_rad2deg(ca_tensor *x, ca_tensor **out);
ca_status ca_square(ca_tensor *x, ca_tensor **out);
ca_status ca_reciprocal(ca_tensor *x, ca_tensor **out);
ca_status ca_floor(ca_tensor *x, ca_tensor **out);
ca_status ca_ceil(ca_tensor *x, ca_tensor **out);
ca_status ca_trunc(ca_tensor *x, ca_tensor **out);
/* half to even at `decimals` decimal places (negative: tens, hundreds, ...) */
ca_status ca_round(ca_tensor *x, int64_t decimals, ca_tensor **out);
ca_status ca_frac(ca_tensor *x, ca_tensor **out); /* x - trunc(x) */
ca_status ca_sgn(ca_tensor *x, ca_tensor **out);  /* sign: -1, 0 or 1 */
/* log(z / (1 - z)), z = x clamped to [eps, 1 - eps]; eps NaN or negative: no clamp (None) */
ca_status ca_logit(ca_tensor *x, double eps, ca_tensor **out);
/* the binary ones, broadcasting (float only; CA_STATUS_DTYPE for int64). remainder has the
 * divisor's sign (Python's %), fmod the dividend's; floor_divide records no gradient. */
ca_status ca_atan2(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_hypot(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_fmod(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_remainder(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_copysign(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_logaddexp(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_logaddexp2(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_xlogy(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_floor_divide(ca_tensor *a, ca_tensor *b, ca_tensor **out);
ca_status ca_tanh(ca_tensor *x, ca_tensor **out);
ca_status ca_sigmoid(ca_tensor *x, ca_tensor **out);
ca_status ca_relu(ca_tensor *x, ca_tensor **out);
ca_status ca_leaky_relu(ca_tensor *x, double negative_slope, ca_tensor **out);
typedef enum { CA_GELU_NONE = 0, CA_GELU_TANH = 1 } ca_gelu_approximate;
/* CA_STATUS_INVALID when approximate is not a ca_gelu_approximate */
ca_status ca_gelu(ca_tensor *x, ca_gelu_approximate approximate, ca_tensor **out);
ca_status ca_silu(ca_tensor *x, ca_tensor **out);
ca_status ca_softplus(ca_tensor *x, double beta, double threshold, ca_tensor **out);
ca_status ca_mish(ca_tensor *x, ca_tensor **out);        /* x * tanh(softplus(x)) */
ca_status ca_hardswish(ca_tensor *x, ca_tensor **out);   /* x * min(max(x + 3, 0), 6) / 6 */
ca_status ca_hardsigmoid(ca_tensor *x, ca_tensor **out); /* min(max(x + 3, 0), 6) / 6 */
/* x where x > 0, else alpha * (exp(x) - 1) (PyTorch's default alpha is 1) */
ca_status ca_elu(ca_tensor *x, double alpha, ca_tensor **out);
/* scale * elu(x, alpha) with SELU's fixed alpha 1.6732632... and scale 1.0507009... */
ca_status ca_selu(ca_tensor *x, ca_tensor **out);
/* x where x > 0, else alpha * (exp(x / alpha) - 1); alpha must not be 0 (CA_STATUS_INVALID) */
ca_status ca_celu(ca_tensor *x, double alpha, ca_tensor **out);
ca_status ca_logsigmoid(ca_tensor *x, ca_tensor **out); /* log(sigmoid(x)), stable */
ca_status ca_softsign(ca_tensor *x, ca_tensor **out);   /* x / (1 + |x|) */
/* x clamped to [min_val, max_val] (PyTorch: -1, 1); the gradient flows strictly inside.
 * CA_STATUS_VALUE when min_val > max_val. */
ca_status ca_hardtanh(ca_tensor *x, double min_val, double max_val, ca_tensor **out);
ca_status ca_relu6(ca_tensor *x, ca_tensor **out); /* hardtanh(x, 0, 6), as PyTorch */
/* Pass NAN for a missing bound (torch.clamp(x, min=None, ...)); CA_STATUS_INVALID when
 * both are NAN. */
ca_status ca_clamp(ca_tensor *x, double min, double max, ca_tensor **out);
/* A copy converted to dtype (gradient converts back). To bool: x != 0 (NaN is true); from
 * bool: 0 or 1. A result of bool or int64 has no gradient. CA_STATUS_INVALID when dtype is
 * not a ca_dtype; CA_STATUS_DTYPE from a float dtype to int64 (unsupported). */
ca_status ca_to_dtype(ca_tensor *x, ca_dtype dtype, ca_tensor **out);
/* A contiguous copy of x in memory of its own (torch.clone); its node is CloneBackward0.
 * CA_STATUS_INVALID for x or out NULL. */
ca_status ca_clone(ca_tensor *x, ca_tensor **out);

/* reductions over n_dims dims (n_dims == 0: every dim).
 * Errors: CA_STATUS_INVALID (n_dims outside 0..CA_MAX_DIMS; dims NULL with n_dims > 0),
 * CA_STATUS_DIM (a dim out of range or listed twice), CA_STATUS_DTYPE (int64, except for
 * ca_sum), CA_STATUS_SHAPE (ca_max or ca_min over a dim of size 0). */
ca_status ca_sum(ca_tensor *x, int n_dims, const int64_t *dims, bool keepdim, ca_tensor **out);
ca_status ca_mean(ca_tensor *x, int n_dims, const int64_t *dims, bool keepdim, ca_tensor **out);
/* values, and (if indices != NULL) the int64 arg index: along the dim for one dim, a flat
 * row-major index into the reduced dims for several. The gradient goes to that index. */
ca_status ca_max(ca_tensor *x, int n_dims, const int64_t *dims, bool keepdim, ca_tensor **values,
                 ca_tensor **indices);
ca_status ca_min(ca_tensor *x, int n_dims, const int64_t *dims, bool keepdim, ca_tensor **values,
                 ca_tensor **indices);
ca_status ca_logsumexp(ca_tensor *x, int n_dims, const int64_t *dims, bool keepdim,
                       ca_tensor **out);

/* shape ops: views share storage with x where PyTorch's do (and so join x's group).
 * Errors: CA_STATUS_DIM (a dim out of range or repeated, and the cases noted below),
 * CA_STATUS_SHAPE (a target shape that does not fit x: another number of elements, more
 * than one -1, a negative size, ndim outside 0..CA_MAX_DIMS). */
ca_status ca_reshape(ca_tensor *x, int ndim, const int64_t *shape, ca_tensor **out);
/* CA_STATUS_SHAPE also when x's strides cannot be viewed as shape (ca_reshape copies) */
ca_status ca_view(ca_tensor *x, int ndim, const int64_t *shape, ca_tensor **out);
/* CA_STATUS_DIM when ndim is not x's number of dims */
ca_status ca_permute(ca_tensor *x, int ndim, const int64_t *perm, ca_tensor **out);
ca_status ca_transpose(ca_tensor *x, int64_t dim0, int64_t dim1, ca_tensor **out);
/* x.t(): the transpose of a 2-D x (node TBackward0); 0-D and 1-D x come back as they are.
 * CA_STATUS_DIM for more than 2 dims. */
ca_status ca_t(ca_tensor *x, ca_tensor **out);
/* -1 keeps a dim; new leading dims may be added. CA_STATUS_SHAPE for fewer dims than x,
 * a new leading dim of -1, or a size that differs from a dim of x that is not 1. */
ca_status ca_expand(ca_tensor *x, int ndim, const int64_t *shape, ca_tensor **out);
/* n_dims == 0 squeezes every size-1 dim; CA_STATUS_DIM for n_dims outside
 * 0..CA_MAX_DIMS */
ca_status ca_squeeze(ca_tensor *x, int n_dims, const int64_t *dims, ca_tensor **out);
/* CA_STATUS_DIM when x already has CA_MAX_DIMS dims */
ca_status ca_unsqueeze(ca_tensor *x, int64_t dim, ca_tensor **out);
/* CA_STATUS_DIM when start_dim comes after end_dim */
ca_status ca_flatten(ca_tensor *x, int64_t start_dim, int64_t end_dim, ca_tensor **out);
/* CA_STATUS_DIM for a 0-d x; CA_STATUS_INDEX for a start outside [-size, size], or a
 * length that is negative or runs past the dim's end */
ca_status ca_narrow(ca_tensor *x, int64_t dim, int64_t start, int64_t length, ca_tensor **out);
/* x[..., start:end:step, ...] along dim, with Python's clamping of start and end.
 * CA_STATUS_DIM for a 0-d x; CA_STATUS_INVALID when step <= 0. */
ca_status ca_slice(ca_tensor *x, int64_t dim, int64_t start, int64_t end, int64_t step,
                   ca_tensor **out);
/* CA_STATUS_DIM for a 0-d x; CA_STATUS_INDEX when index is outside dim */
ca_status ca_select(ca_tensor *x, int64_t dim, int64_t index, ca_tensor **out);
/* A view of x's memory with the given sizes, strides (elements, >= 0) and storage offset
 * (elements from the memory's start; -1: x's own), as torch.as_strided. Its gradient, as
 * PyTorch's, goes by memory position: each element's gradient to the position it reads
 * (summed where the view's elements overlap, as sliding windows do), each of x's elements
 * taking its position's, split evenly among x's elements that share it (an expand); a
 * position none of x's elements has drops its gradient.
 * Errors: CA_STATUS_SHAPE (sizes and strides of different lengths, a negative size, stride
 * or offset, memory beyond x's storage), CA_STATUS_INVALID (x or out NULL). */
ca_status ca_as_strided(ca_tensor *x, int ndim, const int64_t *size, const int64_t *stride,
                        int64_t storage_offset, ca_tensor **out);
/* n >= 1 tensors (else CA_STATUS_INVALID) of one dtype (else CA_STATUS_DTYPE). cat:
 * CA_STATUS_DIM for a 0-d tensor, CA_STATUS_SHAPE for sizes that differ off dim. stack:
 * CA_STATUS_SHAPE for shapes that differ. */
ca_status ca_cat(int n, ca_tensor *const *tensors, int64_t dim, ca_tensor **out);
ca_status ca_stack(int n, ca_tensor *const *tensors, int64_t dim, ca_tensor **out);
ca_status ca_contiguous(ca_tensor *x, ca_tensor **out); /* new ref to x if contiguous */
/* mask (any dtype, nonzero = fill) must broadcast to x: else CA_STATUS_SHAPE */
ca_status ca_masked_fill(ca_tensor *x, ca_tensor *mask, double value, ca_tensor **out);

/* indexing (index tensors are int64).
 * Errors: CA_STATUS_DTYPE (an index tensor that is not int64), CA_STATUS_DIM (dim out of
 * range), CA_STATUS_INDEX (an index value outside [0, size)), CA_STATUS_SHAPE (index_select:
 * an index of more than 1 dim; embedding: a weight that is not 2-D, or indices of
 * CA_MAX_DIMS dims; gather: an index whose ndim differs from x's, or larger than x off
 * dim). */
ca_status ca_index_select(ca_tensor *x, int64_t dim, ca_tensor *index, ca_tensor **out);
ca_status ca_embedding(ca_tensor *weight, ca_tensor *indices, ca_tensor **out);
ca_status ca_gather(ca_tensor *x, int64_t dim, ca_tensor *index, ca_tensor **out);
/* zeros(shape) with src's entries added at the positions index names along dim, as a new
 * tensor of src's dtype; differentiable in src (its gradient is the output's gradient read
 * back at index). scatter_add: index and src of one shape, index's ndim that of shape,
 * out[..., index[i...], ...] += src[i...] at index's own position off dim; index_add: a 1-D
 * index of src's size along dim, out.select(dim, index[j]) += src.select(dim, j). PyTorch's
 * x.scatter_add(dim, index, src) and x.index_add(dim, index, src) are x plus these.
 * Errors: CA_STATUS_INDEX (an index outside [0, size), or not int64), CA_STATUS_SHAPE (sizes
 * that do not fit), CA_STATUS_INVALID (a shape of more than CA_MAX_DIMS dims). */
ca_status ca_scatter_add_zeros(int ndim, const int64_t *shape, int64_t dim, ca_tensor *index,
                               ca_tensor *src, ca_tensor **out);
ca_status ca_index_add_zeros(int ndim, const int64_t *shape, int64_t dim, ca_tensor *index,
                             ca_tensor *src, ca_tensor **out);
/* x with value at the positions index (0-D or 1-D) names along dim. Negative indices count
 * from the end, as PyTorch's index_fill: CA_STATUS_INDEX for one outside [-size, size) and
 * for an index that is not int64. The _tensor form takes the value from a 0-d tensor
 * (else CA_STATUS_SHAPE), which gets the sum of the gradient at the filled positions. */
ca_status ca_index_fill(ca_tensor *x, int64_t dim, ca_tensor *index, double value, ca_tensor **out);
ca_status ca_index_fill_tensor(ca_tensor *x, int64_t dim, ca_tensor *index, ca_tensor *value,
                               ca_tensor **out);

/* position and order.
 * tril/triu: x (at least 2-D; the last two dims are the matrices) with the elements above
 * (tril) or below (triu) the diagonal `diagonal` set to 0, as torch.tril/triu.
 * cumsum: running sums along dim; floats accumulate in double, as PyTorch on the CPU.
 * sort: values along dim in ascending (descending) order and their int64 positions;
 * always stable (equal values keep their order; NaN sorts above every number). stable
 * only picks the node name (SortBackward1), as in PyTorch.
 * topk: the k largest (smallest) values along dim and their positions, in order.
 * Errors: CA_STATUS_SHAPE (tril/triu of fewer than 2 dims, k out of range), CA_STATUS_DIM. */
ca_status ca_tril(ca_tensor *x, int64_t diagonal, ca_tensor **out);
ca_status ca_triu(ca_tensor *x, int64_t diagonal, ca_tensor **out);
ca_status ca_cumsum(ca_tensor *x, int64_t dim, ca_tensor **out);
/* cumprod: running products along dim (floats in double); the gradient is exact where x
 * has zeros. */
ca_status ca_cumprod(ca_tensor *x, int64_t dim, ca_tensor **out);
ca_status ca_sort(ca_tensor *x, int64_t dim, bool descending, bool stable, ca_tensor **values,
                  ca_tensor **indices);
ca_status ca_topk(ca_tensor *x, int64_t k, int64_t dim, bool largest, bool sorted,
                  ca_tensor **values, ca_tensor **indices);

/* 2-d pooling of x [N, C, H, W] or [C, H, W] (float32/float64), as torch's max_pool2d and
 * avg_pool2d: kernel, stride, padding (both sides) and dilation are (height, width) pairs.
 * indices (may be NULL) receives max_pool2d's int64 positions y * W + x of each window's
 * winner. divisor_override 0 means none.
 * Errors: CA_STATUS_SHAPE (rank, a parameter out of range, an output smaller than 1). */
ca_status ca_max_pool2d(ca_tensor *x, const int64_t *kernel, const int64_t *stride,
                        const int64_t *padding, const int64_t *dilation, bool ceil_mode,
                        ca_tensor **out, ca_tensor **indices);
ca_status ca_avg_pool2d(ca_tensor *x, const int64_t *kernel, const int64_t *stride,
                        const int64_t *padding, bool ceil_mode, bool count_include_pad,
                        int64_t divisor_override, ca_tensor **out);
/* adaptive_avg_pool2d: output [.., out_h, out_w]; row o averages input rows
 * [floor(o*H/out_h), ceil((o+1)*H/out_h)), columns likewise. */
ca_status ca_adaptive_avg_pool2d(ca_tensor *x, int64_t out_h, int64_t out_w, ca_tensor **out);

/* linear algebra.
 * Errors: CA_STATUS_SHAPE (ranks, inner dims, batch dims or a bias that do not fit),
 * CA_STATUS_DTYPE (int64, or dtypes that differ). */
ca_status ca_matmul(ca_tensor *a, ca_tensor *b, ca_tensor **out); /* torch.matmul rules */
ca_status ca_mm(ca_tensor *a, ca_tensor *b, ca_tensor **out);     /* [n,k] @ [k,m] */
ca_status ca_bmm(ca_tensor *a, ca_tensor *b, ca_tensor **out);    /* [b,n,k] @ [b,k,m] */
/* bias + a @ b, a [n,k], b [k,m], bias broadcastable to [n,m] (node AddmmBackward0) */
ca_status ca_addmm(ca_tensor *bias, ca_tensor *a, ca_tensor *b, ca_tensor **out);
/* x @ weight^T + bias; weight [out, in]; bias [out] or NULL. Recorded as PyTorch records
 * it: t(weight) (TBackward0), then addmm (AddmmBackward0) or, without bias, mm
 * (MmBackward0); an x of other than 2 dims is viewed as 2-D around it (ViewBackward0,
 * and UnsafeViewBackward0 for the output without bias; a 1-D x without bias is
 * unsqueezed and squeezed). */
ca_status ca_linear(ca_tensor *x, ca_tensor *weight, ca_tensor *bias, ca_tensor **out);
/* 2-D convolution (cross-correlation, as torch.nn.functional.conv2d): x [N, C, H, W] or
 * unbatched [C, H, W], weight [O, C/groups, kH, kW], bias [O] or NULL; stride, padding
 * (zeros, on both sides) and dilation are {height, width} pairs. Output [N, O, OH, OW]
 * with OH = (H + 2*padding[0] - dilation[0]*(kH-1) - 1) / stride[0] + 1 (OW likewise).
 * CA_STATUS_INVALID for a stride or dilation < 1, a padding < 0 or groups < 1;
 * CA_STATUS_SHAPE for channels that do not fit the weight and groups, a kernel larger than
 * the padded input, or a bias that is not [O]; CA_STATUS_DTYPE as above. */
ca_status ca_conv2d(ca_tensor *x, ca_tensor *weight, ca_tensor *bias, const int64_t *stride,
                    const int64_t *padding, const int64_t *dilation, int64_t groups,
                    ca_tensor **out);
/* The same with the padding at the start (top, left) and at the end (bottom, right) given
 * apart: OH = (H + padding[0] + padding_end[0] - dilation[0]*(kH-1) - 1) / stride[0] + 1.
 * (PyTorch's padding='same' pads one more at the end when the total is odd.) */
ca_status ca_conv2d_padded(ca_tensor *x, ca_tensor *weight, ca_tensor *bias, const int64_t *stride,
                           const int64_t *padding, const int64_t *padding_end,
                           const int64_t *dilation, int64_t groups, ca_tensor **out);

/* neural-network ops.
 * Errors: CA_STATUS_DTYPE (an input that is not float32 or float64, or dtypes that
 * differ), CA_STATUS_INVALID (a reduction that is not a ca_reduction), and below. */
typedef enum { CA_REDUCTION_NONE = 0, CA_REDUCTION_MEAN = 1, CA_REDUCTION_SUM = 2 } ca_reduction;
/* CA_STATUS_DIM when dim is out of range */
ca_status ca_softmax(ca_tensor *x, int64_t dim, ca_tensor **out);
ca_status ca_log_softmax(ca_tensor *x, int64_t dim, ca_tensor **out);
/* input [N, C] or [C] (or [N, C, d...]); target int64 class indices; targets equal to
 * ignore_index (PyTorch's default is -100) add nothing and are not counted by MEAN.
 * CA_STATUS_DTYPE for a target that is not int64, CA_STATUS_SHAPE for an input and target
 * that do not fit (or a 0-d input), CA_STATUS_INDEX for a target outside [0, C). */
ca_status ca_cross_entropy(ca_tensor *input, ca_tensor *target, ca_reduction reduction,
                           int64_t ignore_index, ca_tensor **out);
ca_status ca_nll_loss(ca_tensor *log_probs, ca_tensor *target, ca_reduction reduction,
                      int64_t ignore_index, ca_tensor **out);
/* CA_STATUS_SHAPE when input and target do not broadcast */
ca_status ca_mse_loss(ca_tensor *input, ca_tensor *target, ca_reduction reduction, ca_tensor **out);
/* normalizes over the last n_normalized dims, whose sizes must equal normalized_shape;
 * weight and bias (shape normalized_shape) may be NULL. CA_STATUS_SHAPE for n_normalized
 * outside 1..CA_MAX_DIMS or shapes that do not match; CA_STATUS_INVALID when
 * normalized_shape is NULL. */
ca_status ca_layer_norm(ca_tensor *x, int n_normalized, const int64_t *normalized_shape,
                        ca_tensor *weight, ca_tensor *bias, double eps, ca_tensor **out);
/* batch normalization with the batch's statistics (training mode): x is [N, C, *] (at least
 * 2 dims); each channel (dim 1) is normalized over every other dim with its mean and biased
 * variance, out = (x - mean) / sqrt(var + eps) * weight + bias. weight and bias ([C]) may
 * be NULL. batch_mean and batch_var (may be NULL) receive the channel means and biased
 * variances, [C] tensors outside autograd, for a caller's running statistics. One node,
 * NativeBatchNormBackward0. Over an empty batch the statistics are NaN.
 * CA_STATUS_SHAPE for x with fewer than 2 dims or a weight or bias that is not [C];
 * CA_STATUS_DTYPE for x that is not float or a weight or bias of another dtype. */
ca_status ca_batch_norm(ca_tensor *x, ca_tensor *weight, ca_tensor *bias, double eps,
                        ca_tensor **out, ca_tensor **batch_mean, ca_tensor **batch_var);
/* training: zero with probability p, scale the rest by 1/(1-p); else the identity (a new
 * reference to x, with no dtype check). CA_STATUS_INVALID when p is outside [0, 1].
 * When training and p > 0, a random call (see Threads). */
ca_status ca_dropout(ca_tensor *x, double p, bool training, ca_tensor **out);

/* in-place ops: bump the version counter. Outside the autograd graph (grad mode off, or
 * no operand requiring grad) they allocate nothing. In it, as in PyTorch, the op is
 * recorded: it runs out of place and self takes the result's values and history
 * (ca_tensor_rebase_), so the gradient flows through it to self's old history and to other;
 * copy_ gives self src's history; zero_/fill_ give a zero gradient to self's old history.
 * On a view, the view's base takes the update's history (ca_tensor_rebase_). A leaf that
 * requires grad, or a view of one, is refused (update it with grad mode off, as
 * torch.no_grad() does for optimizer steps), as is a view whose elements overlap.
 * Errors: CA_STATUS_INVALID (self or other NULL), CA_STATUS_AUTOGRAD (those refusals),
 * CA_STATUS_DTYPE (self and other differ), CA_STATUS_SHAPE (other does not broadcast to
 * self's shape).
 * Thread-safe: shared (self's and other's). */
ca_status ca_add_(ca_tensor *self, ca_tensor *other, double alpha); /* self += alpha*other */
ca_status ca_mul_(ca_tensor *self, ca_tensor *other);
ca_status ca_mul_scalar_(ca_tensor *self, double s);
ca_status ca_zero_(ca_tensor *self);
ca_status ca_fill_(ca_tensor *self, double value);
ca_status ca_copy_(ca_tensor *self, ca_tensor *src); /* src broadcasts to self's shape */

/* Any in-place op on a tensor in the autograd graph, given its result computed out of
 * place (result = op(self, ...)): self takes result's values, written into self's memory
 * (its version goes up), and result's history, as PyTorch rebases self onto the in-place
 * op's node. *done is false, with nothing changed, when result's node saved self's memory
 * (its backward needs self's old values): compute result again from a copy of self (a
 * differentiable one, such as ca_mul_scalar(self, 1)) and call again.
 * When self is a view (made by a view op with grad mode on), its base takes the history
 * where(selected, result scattered into the base's shape, base), as PyTorch's CopySlices,
 * and every view of the base rebuilds its history from the base's when next used.
 * Errors: CA_STATUS_INVALID (an argument NULL), CA_STATUS_AUTOGRAD (self is a leaf that
 * requires grad while grad mode is on, or a view of one; self's elements overlap; self is
 * more than 32 view ops from its base), CA_STATUS_SHAPE (result's shape or dtype is not
 * self's).
 * Thread-safe: no (self is written). */
ca_status ca_tensor_rebase_(ca_tensor *self, ca_tensor *result, bool *done);
/* A mark of the recording: the nodes recorded after it are "since" it. Thread-safe: shared. */
uint64_t ca_graph_mark(void);
/* ca_tensor_rebase_ for a result that several ops made from self (a composite in-place
 * op, such as clamp_ with tensor bounds): *done is also false, with nothing changed, when
 * any node recorded since mark on result's history saved self's memory, not only result's
 * own. Take the mark right before computing result. Errors and thread safety: as
 * ca_tensor_rebase_. */
ca_status ca_tensor_rebase_since_(ca_tensor *self, ca_tensor *result, uint64_t mark, bool *done);

/* ---------------------------------------------------------------------------------------
 * The op registry: the ops with a PyTorch-style schema, callable by index. Bindings build
 * their functions from it (the Python package makes torch.elu, nn.functional.elu, ... out
 * of it), and a C program can call such an op by name without a function of its own.
 *
 * A schema is the op's Python signature with PyTorch's names and defaults:
 *     "elu(Tensor input, float alpha=1.0)"
 *     "gelu(Tensor input, str{none|tanh} approximate='none')"
 * Parameters are Tensor, float, int, bool, or str{a|b|...}: one of the choices, passed as
 * its index. ca_op_apply takes the Tensor arguments in schema order, and every other
 * argument as a double, in schema order too.
 */
enum {
    CA_OP_PY_TORCH = 1u << 0,   /* PyTorch has torch.<name> */
    CA_OP_PY_TENSOR = 1u << 1,  /* ... and the method Tensor.<name> */
    CA_OP_PY_NN = 1u << 2,      /* ... and torch.nn.functional.<name> */
    CA_OP_PY_INPLACE = 1u << 3, /* whose functional form also takes inplace=False */
    CA_OP_PY_OUT = 1u << 4,     /* whose torch.<name> also takes out= */
    CA_OP_POSITIVE = 1u << 5,   /* defined on positive inputs only (log, sqrt, ...) */
    /* the other input domains, for tests that draw inputs: */
    CA_OP_UNIT = 1u << 6,     /* defined on (-1, 1) only (asin, atanh, erfinv) */
    CA_OP_ABOVE_1 = 1u << 7,  /* defined on (1, inf) only (acosh) */
    CA_OP_ABOVE_M1 = 1u << 8, /* defined on (-1, inf) only (log1p) */
    CA_OP_PROB = 1u << 9,     /* defined on (0, 1) only (logit) */
};

#define CA_OP_MAX_SCALARS 4
#define CA_OP_MAX_ARGS    8  /* Tensors and scalars together */
#define CA_OP_ARG_NAME    24 /* longest argument name, with its NUL */

typedef struct {
    const char *name;   /* "elu": static, like schema */
    const char *schema; /* "elu(Tensor input, float alpha=1.0)" */
    int n_tensors;      /* Tensor arguments */
    int n_scalars;      /* the others (at most CA_OP_MAX_SCALARS) */
    /* the last n_defaults scalars have defaults: defaults[k] for scalar k, as ca_op_apply
     * takes it (True is 1, a choice its index) */
    int n_defaults;
    double defaults[CA_OP_MAX_SCALARS];
    /* every argument in schema order: its name ("input", "alpha"; static) and whether it
     * is a Tensor, so a binding can take arguments by name without reading the schema */
    int n_args;
    const char *arg_names[CA_OP_MAX_ARGS];
    bool arg_is_tensor[CA_OP_MAX_ARGS];
    unsigned flags; /* CA_OP_PY_* and the domain flags (CA_OP_POSITIVE, ...) */
} ca_op_info;

/* The registry is built once, by ca_init, and only read after: ca_op_count, ca_op_describe
 * and ca_op_find are Thread-safe: yes. */
/* Ops in the registry (0 if the library failed to initialise). */
int ca_op_count(void);
/* Op `index` (0 .. ca_op_count() - 1).
 * Errors: CA_STATUS_INVALID (out NULL; index out of range). */
ca_status ca_op_describe(int index, ca_op_info *out);
/* The index of the op named `name`.
 * Errors: CA_STATUS_INVALID (name or index NULL; no op of that name). */
ca_status ca_op_find(const char *name, int *index);
/* Run op `index`: like its own function (ca_elu), with the same checks and statuses, and
 * CA_STATUS_INVALID when index is out of range, the numbers of tensors or scalars do not
 * match its schema, scalars is NULL while n_scalars > 0, or a scalar the schema types int,
 * bool or str is not a whole number (or not the index of a choice).
 * Thread-safe: shared, as the op. */
ca_status ca_op_apply(int index, int n_tensors, ca_tensor *const *tensors, int n_scalars,
                      const double *scalars, ca_tensor **out);

/* ---------------------------------------------------------------------------------------
 * Distributed data parallelism over Open MPI (docs/distributed.md)
 *
 * One process per rank, started by Open MPI's launcher (mpirun -np 2 prog). The
 * collectives work in place on contiguous float32, float64 or int64 tensors and are the
 * same call on every rank, in the same order. With `work` NULL a call blocks until done;
 * with a ca_dist_work ** it starts a non-blocking MPI collective and stores a new handle
 * (free it with ca_dist_work_free) whose tensors must not be read or written until
 * ca_dist_work_wait returns. A wait polls MPI and fails with CA_STATUS_DIST, naming the
 * rank and the collective, once the timeout passes (a peer that died or hangs), instead of
 * blocking forever; the group is then broken: later collectives fail at once, and
 * ca_dist_finalize aborts the MPI job (MPI_Abort) since MPI cannot finish a collective a
 * peer never joins. A build without MPI (CMake -DCAGRAD_MPI=OFF, or AUTO without
 * libopenmpi-dev) has every function below: ca_dist_is_available() is false and the others
 * fail with CA_STATUS_DIST, naming the package and the option.
 * Thread-safe: yes (MPI calls are serialised by an internal lock).
 */
typedef enum {
    CA_DIST_SUM = 0,
    CA_DIST_AVG = 1, /* the sum divided by the number of ranks: float dtypes only */
    CA_DIST_PRODUCT = 2,
    CA_DIST_MIN = 3,
    CA_DIST_MAX = 4,
} ca_dist_op;
typedef struct ca_dist_work ca_dist_work;

/* True when this build has MPI. */
bool ca_dist_is_available(void);
/* Join the process group: MPI_Init_thread (unless MPI is already initialised; then it is
 * not finalised here either) and a private communicator. timeout_seconds <= 0 takes
 * $CAGRAD_DIST_TIMEOUT, else 1800 (PyTorch's 30 minutes). Torchrun-style RANK, WORLD_SIZE
 * and LOCAL_RANK, when set, must agree with Open MPI's rank, size and local rank.
 * Errors: CA_STATUS_DIST (no MPI; already initialised; MPI failed; the environment
 * disagrees with MPI). */
ca_status ca_dist_init(double timeout_seconds);
bool ca_dist_is_initialized(void);
/* This process's rank, the number of ranks, the timeout in seconds.
 * Errors: CA_STATUS_INVALID (out NULL), CA_STATUS_DIST (not initialised). */
ca_status ca_dist_rank(int *out);
ca_status ca_dist_world_size(int *out);
ca_status ca_dist_get_timeout(double *out);
/* Change the timeout of later waits (seconds > 0). Errors: CA_STATUS_VALUE, CA_STATUS_DIST. */
ca_status ca_dist_set_timeout(double seconds);
/* Leave the group (every rank calls it); MPI stays initialised, so ca_dist_init can make a
 * new group. MPI_Abort instead when a collective timed out.
 * Errors: CA_STATUS_DIST (not initialised). */
ca_status ca_dist_destroy(void);
/* Leave the group if still in it and finalise MPI (if ca_dist_init started it); MPI cannot
 * start again in this process. MPI_Abort instead when a collective timed out.
 * Errors: CA_STATUS_DIST (MPI not initialised). */
ca_status ca_dist_finalize(void);

/* t = the sum (CA_DIST_SUM; or mean, product, minimum, maximum) of t over the ranks.
 * Errors: CA_STATUS_INVALID (t NULL, not contiguous, op unknown), CA_STATUS_DTYPE (AVG on
 * int64), CA_STATUS_DIST (not initialised, broken, MPI failed, timeout), CA_STATUS_NOMEM. */
ca_status ca_dist_all_reduce(ca_tensor *t, ca_dist_op op, ca_dist_work **work);
/* t = rank src's t. Errors: as ca_dist_all_reduce, and CA_STATUS_VALUE (src out of range). */
ca_status ca_dist_broadcast(ca_tensor *t, int src, ca_dist_work **work);
/* out (contiguous, world_size * numel(in) elements, in's dtype) = every rank's `in`, by
 * rank. Errors: as ca_dist_all_reduce, and CA_STATUS_SHAPE / CA_STATUS_DTYPE (out does
 * not fit). */
ca_status ca_dist_all_gather(const ca_tensor *in, ca_tensor *out, ca_dist_work **work);
/* Wait until every rank has called it. Errors: CA_STATUS_DIST. */
ca_status ca_dist_barrier(ca_dist_work **work);

/* Wait for w (idempotent once done). A timeout breaks the group (above).
 * Errors: CA_STATUS_INVALID (w NULL), CA_STATUS_DIST (timeout; MPI failed). */
ca_status ca_dist_work_wait(ca_dist_work *w);
/* *done = whether w has finished (polls MPI; never blocks). Errors: as ca_dist_work_wait,
 * less the timeout. */
ca_status ca_dist_work_is_completed(ca_dist_work *w, bool *done);
/* Free w (NULL is a no-op). A work still running is waited for first; if that fails
 * (timeout), or its group was destroyed before, its buffers are leaked, since MPI may
 * still write them, and MPI is not called. */
void ca_dist_work_free(ca_dist_work *w);

#ifdef __cplusplus
}
#endif

#endif /* CAGRAD_H */
