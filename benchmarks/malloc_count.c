/* malloc_count.c - an LD_PRELOAD shim that counts heap allocations, for benchmarks/bench.py.
 *
 * It interposes malloc, calloc, realloc, posix_memalign, aligned_alloc and memalign (plus
 * valloc and pvalloc), counts every call in a process-wide counter, and forwards to
 * glibc's own implementation (__libc_malloc and friends, which need no dlsym and so no
 * allocation while resolving). free is not interposed. C++ operator new calls malloc, so
 * PyTorch's allocations are counted as well as cagrad's, OpenBLAS's and Python's.
 *
 * Counters are relaxed atomics: cheap, and exact across threads (OpenBLAS and OpenMP
 * workers allocate too). Read them with ctypes:
 *
 *   lib = ctypes.CDLL(None)                     # the preloaded shim is in global scope
 *   calls = ctypes.c_uint64.in_dll(lib, "malloc_count_total_calls")
 *   before = calls.value; ...; n = calls.value - before
 *
 * Build: CMake builds it as build/libmalloc_count.so (CAGRAD_BUILD_BENCHMARKS).
 * Use:   LD_PRELOAD=build/libmalloc_count.so python ...
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void *__libc_valloc(size_t size);
extern void *__libc_pvalloc(size_t size);

#define EXPORT __attribute__((visibility("default")))

enum { MC_MALLOC, MC_CALLOC, MC_REALLOC, MC_POSIX_MEMALIGN, MC_ALIGNED_ALLOC, MC_MEMALIGN, MC_N };

static uint64_t calls[MC_N];
/* Exported so that a reader can load them without a call (ctypes c_uint64.in_dll). */
EXPORT uint64_t malloc_count_total_calls;
EXPORT uint64_t malloc_count_total_bytes;

static inline void count(int which, size_t bytes) {
    __atomic_fetch_add(&calls[which], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&malloc_count_total_calls, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&malloc_count_total_bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------ the counters */

/* Every counted call since the process started. */
EXPORT uint64_t malloc_count_total(void) {
    return __atomic_load_n(&malloc_count_total_calls, __ATOMIC_RELAXED);
}

/* Bytes requested by those calls (realloc counts its new size). */
EXPORT uint64_t malloc_count_bytes(void) {
    return __atomic_load_n(&malloc_count_total_bytes, __ATOMIC_RELAXED);
}

/* Calls of one function: 0 malloc, 1 calloc, 2 realloc, 3 posix_memalign, 4 aligned_alloc,
 * 5 memalign (valloc and pvalloc count as memalign). Out of range: 0. */
EXPORT uint64_t malloc_count_calls(int which) {
    return which >= 0 && which < MC_N ? __atomic_load_n(&calls[which], __ATOMIC_RELAXED) : 0;
}

/* 1: this shim is the process's allocator (so the counts mean something). */
EXPORT int malloc_count_active(void) {
    return 1;
}

/* ------------------------------------------------------------------ the interposers */

EXPORT void *malloc(size_t size) {
    count(MC_MALLOC, size);
    return __libc_malloc(size);
}

EXPORT void *calloc(size_t n, size_t size) {
    count(MC_CALLOC, n * size);
    return __libc_calloc(n, size);
}

EXPORT void *realloc(void *p, size_t size) {
    count(MC_REALLOC, size);
    return __libc_realloc(p, size);
}

EXPORT int posix_memalign(void **out, size_t alignment, size_t size) {
    count(MC_POSIX_MEMALIGN, size);
    /* POSIX: a power of two and a multiple of sizeof(void *); *out is untouched on error */
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment % sizeof(void *) != 0)
        return EINVAL;
    void *p = __libc_memalign(alignment, size);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

EXPORT void *aligned_alloc(size_t alignment, size_t size) {
    count(MC_ALIGNED_ALLOC, size);
    return __libc_memalign(alignment, size);
}

EXPORT void *memalign(size_t alignment, size_t size) {
    count(MC_MEMALIGN, size);
    return __libc_memalign(alignment, size);
}

EXPORT void *valloc(size_t size) {
    count(MC_MEMALIGN, size);
    return __libc_valloc(size);
}

EXPORT void *pvalloc(size_t size) {
    count(MC_MEMALIGN, size);
    return __libc_pvalloc(size);
}
