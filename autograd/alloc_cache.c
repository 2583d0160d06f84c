/* alloc_cache.c - data blocks (tensor storage, kernel and plan scratch), cached by size.
 *
 * A training loop frees and re-allocates the same tensor sizes every step. Handed back to
 * malloc, a freed block at the top of the heap is trimmed (brk) or a large one unmapped,
 * and the next step page-faults the memory back in and clears it again: on a 200-op
 * pointwise chain that was a sixth of the backward's time, and on a large MLP every weight
 * gradient (64 MiB) came back through the page-fault path each step. So freed data blocks
 * stay here, in bins of one exact size (rounded to 64 bytes), and an allocation of that
 * size takes the most recently freed one (still in cache). The cache holds at most
 * `limit` bytes; past it the least recently freed blocks go back to the allocator.
 *
 * Only blocks of the default allocator are cached: a user's ca_allocator sees every
 * allocation and free, as documented. Each block starts with a 64-byte header that says
 * how big it is and which allocator made it, so a block made before ca_set_allocator is
 * still freed by the allocator that made it. Under AddressSanitizer a cached block's
 * payload is poisoned, so a use after free is still reported.
 */
#include "autograd/internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define CACHE_POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define CACHE_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define CACHE_POISON(p, n)   ((void)(p), (void)(n))
#define CACHE_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define HDR           64u                   /* header bytes; keeps the payload 64-byte aligned */
#define MIN_CACHED    1024u                 /* smaller blocks are cheap for malloc: not cached */
#define MAX_BINS      128                   /* distinct cached sizes */
#define DEFAULT_LIMIT (512ull << 20)        /* bytes; CAGRAD_CACHE_LIMIT_MB overrides */
#define BLOCK_MAGIC   0xca9dda7aca9dda7aull /* catches a pointer this file did not make */

typedef struct block block;
struct block {
    uint64_t magic;
    size_t size;          /* payload bytes, a multiple of 64 */
    bool from_default;    /* made by the default allocator (only those are cached) */
    block *bin_next;      /* next free block of the same size (LIFO) */
    block *older, *newer; /* all cached blocks, least recently freed first */
};
_Static_assert(sizeof(block) <= HDR, "the block header must fit in HDR bytes");

typedef struct {
    size_t size;
    block *top;
} bin;

static struct {
    pthread_mutex_t lock;
    bool configured; /* limit read from the environment */
    size_t limit, bytes, blocks;
    uint64_t hits, misses;
    bin bins[MAX_BINS]; /* sorted by size */
    int n_bins;
    block *oldest, *newest;
} C = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* ------------------------------------------------------------------ configuration */

static void cache_configure_locked(void) {
    if (C.configured)
        return;
    C.configured = true;
    C.limit = DEFAULT_LIMIT;
    const char *env = getenv("CAGRAD_CACHE_LIMIT_MB");
    if (env && *env) {
        char *end;
        unsigned long long mb = strtoull(env, &end, 10);
        if (*end == '\0' && mb <= (SIZE_MAX >> 20))
            C.limit = (size_t)mb << 20;
    }
}

/* fork() while another thread holds the lock would leave it locked in the child forever,
 * so the lock is taken around fork, as malloc does with its own. */
static void cache_fork_prepare(void) {
    pthread_mutex_lock(&C.lock);
}
static void cache_fork_parent(void) {
    pthread_mutex_unlock(&C.lock);
}
static void cache_fork_child(void) {
    pthread_mutex_init(&C.lock, NULL);
}
static pthread_once_t cache_atfork_once = PTHREAD_ONCE_INIT;
static void cache_atfork_register(void) {
    pthread_atfork(cache_fork_prepare, cache_fork_parent, cache_fork_child);
}

/* Locks the cache; the first time, registers the fork handlers and reads the limit. */
static void cache_lock(void) {
    pthread_once(&cache_atfork_once, cache_atfork_register);
    pthread_mutex_lock(&C.lock);
    cache_configure_locked();
}

/* ------------------------------------------------------------------ bins */

/* Index of the bin for size, or where it would go (*found false). */
static int bin_find(size_t size, bool *found) {
    int lo = 0, hi = C.n_bins;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (C.bins[mid].size < size)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < C.n_bins && C.bins[lo].size == size;
    return lo;
}

static void bin_drop(int i) {
    memmove(&C.bins[i], &C.bins[i + 1], sizeof(bin) * (size_t)(C.n_bins - i - 1));
    C.n_bins--;
}

/* Unlinks b (the top of its bin, or any block when evicting) from the age list. */
static void age_unlink(block *b) {
    if (b->older)
        b->older->newer = b->newer;
    else
        C.oldest = b->newer;
    if (b->newer)
        b->newer->older = b->older;
    else
        C.newest = b->older;
    C.bytes -= b->size;
    C.blocks--;
}

/* Unlinks block b from bin i, wherever it sits in that bin, and from the age list. */
static void bin_unlink(int i, block *b) {
    block **pp = &C.bins[i].top;
    while (*pp != b)
        pp = &(*pp)->bin_next;
    *pp = b->bin_next;
    if (!C.bins[i].top)
        bin_drop(i);
    age_unlink(b);
}

/* Takes the most recently freed cached block of exactly size, or NULL. */
static block *cache_take_locked(size_t size) {
    bool found;
    int i = bin_find(size, &found);
    if (!found)
        return NULL;
    block *b = C.bins[i].top;
    bin_unlink(i, b);
    return b;
}

/* Removes block b, cached in the bin of its size. */
static void cache_remove_locked(block *b) {
    bool found;
    bin_unlink(bin_find(b->size, &found), b);
}

/* Caches b; false when there is no room for it (no bin left, or over the limit). */
static bool cache_put_locked(block *b) {
    if (b->size > C.limit)
        return false;
    bool found;
    int i = bin_find(b->size, &found);
    if (!found) {
        if (C.n_bins == MAX_BINS)
            return false;
        memmove(&C.bins[i + 1], &C.bins[i], sizeof(bin) * (size_t)(C.n_bins - i));
        C.bins[i] = (bin){b->size, NULL};
        C.n_bins++;
    }
    b->bin_next = C.bins[i].top;
    C.bins[i].top = b;
    b->older = C.newest;
    b->newer = NULL;
    if (C.newest)
        C.newest->newer = b;
    else
        C.oldest = b;
    C.newest = b;
    C.bytes += b->size;
    C.blocks++;
    return true;
}

/* ------------------------------------------------------------------ blocks */

static void block_release(block *b) {
    if (b->from_default)
        cai_mem_default_free(b);
    else
        cai_mem_free(b);
}

/* Pops the least recently freed blocks until the cache fits in `keep` bytes; returns
 * them as a list (through bin_next) to release outside the lock. */
static block *cache_shrink_locked(size_t keep) {
    block *out = NULL;
    while (C.bytes > keep && C.oldest) {
        block *b = C.oldest;
        CACHE_UNPOISON((char *)b + HDR, b->size);
        cache_remove_locked(b);
        b->bin_next = out;
        out = b;
    }
    return out;
}

static void release_list(block *b) {
    while (b) {
        block *next = b->bin_next;
        block_release(b);
        b = next;
    }
}

static block *block_new(size_t size) {
    bool dflt = cai_mem_is_default();
    block *b = cai_mem_alloc_aligned(HDR + size, 64);
    if (!b && dflt) { /* out of memory: what the cache holds may be enough */
        ca_empty_cache();
        b = cai_mem_alloc_aligned(HDR + size, 64);
    }
    if (!b)
        return NULL;
    *b = (block){.magic = BLOCK_MAGIC, .size = size, .from_default = dflt};
    return b;
}

void *cai_mem_data_alloc(size_t nbytes) {
    if (nbytes > SIZE_MAX - 2 * HDR)
        return NULL;
    size_t size = (nbytes + 63) / 64 * 64;
    if (size == 0)
        size = 64;
    block *b = NULL;
    if (size >= MIN_CACHED && cai_mem_is_default()) {
        cache_lock();
        b = cache_take_locked(size);
        if (b) {
            CACHE_UNPOISON((char *)b + HDR, size);
            C.hits++;
        } else {
            C.misses++;
        }
        pthread_mutex_unlock(&C.lock);
    }
    if (!b)
        b = block_new(size);
    return b ? (char *)b + HDR : NULL;
}

void cai_mem_data_free(void *p) {
    if (!p)
        return;
    block *b = (block *)(void *)((char *)p - HDR);
    if (b->magic != BLOCK_MAGIC)
        abort(); /* not a data block: freeing it would corrupt the heap */
    if (b->size >= MIN_CACHED && b->from_default && cai_mem_is_default()) {
        cache_lock();
        bool kept = cache_put_locked(b);
        if (kept)
            CACHE_POISON((char *)b + HDR, b->size);
        block *evicted = kept ? cache_shrink_locked(C.limit) : NULL;
        pthread_mutex_unlock(&C.lock);
        if (kept) {
            release_list(evicted);
            return;
        }
    }
    block_release(b);
}

/* ------------------------------------------------------------------ public */

void ca_empty_cache(void) {
    cache_lock();
    block *all = cache_shrink_locked(0);
    pthread_mutex_unlock(&C.lock);
    release_list(all);
}

void ca_set_cache_limit(size_t bytes) {
    cache_lock();
    C.limit = bytes;
    block *evicted = cache_shrink_locked(bytes);
    pthread_mutex_unlock(&C.lock);
    release_list(evicted);
}

void ca_get_cache_info(ca_cache_info *out) {
    if (!out)
        return;
    cache_lock();
    *out = (ca_cache_info){C.limit, C.bytes, C.blocks, C.hits, C.misses};
    pthread_mutex_unlock(&C.lock);
}
