/* alloc.c - the one allocator hook every byte of cagrad goes through.
 *
 * Users (and the fault-injection tests) install a ca_allocator; the default wraps
 * aligned_alloc. Blocks carry a small header so cai_mem_free does not need the size.
 */
#include "autograd/internal.h"

#include <stdlib.h>
#include <string.h>

static void *default_alloc(size_t size, size_t align, void *ctx) {
    (void)ctx;
    /* aligned_alloc wants size to be a multiple of align */
    size_t rounded = (size + align - 1) / align * align;
    return aligned_alloc(align, rounded ? rounded : align);
}

static void default_free(void *ptr, void *ctx) {
    (void)ctx;
    free(ptr);
}

static ca_allocator current = {default_alloc, default_free, NULL};

void ca_set_allocator(const ca_allocator *allocator) {
    ca_empty_cache(); /* the cache holds only the default allocator's blocks */
    if (allocator && allocator->alloc && allocator->free)
        current = *allocator;
    else
        current = (ca_allocator){default_alloc, default_free, NULL};
}

void ca_get_allocator(ca_allocator *out) {
    if (out)
        *out = current;
}

void *cai_mem_alloc_aligned(size_t size, size_t align) {
    if (align < 16)
        align = 16;
    return current.alloc(size ? size : 1, align, current.ctx);
}

void *cai_mem_alloc(size_t size) {
    return cai_mem_alloc_aligned(size, 16);
}

void *cai_mem_calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size)
        return NULL;
    void *p = cai_mem_alloc(n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

bool cai_mem_grow_slow(void **p, int *cap, int need, size_t elem) {
    int c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *q = cai_mem_alloc(elem * (size_t)c);
    if (!q)
        return false;
    if (*cap)
        memcpy(q, *p, elem * (size_t)*cap);
    cai_mem_free(*p);
    *p = q;
    *cap = c;
    return true;
}

bool cai_mem_is_default(void) {
    return current.alloc == default_alloc;
}

void cai_mem_default_free(void *p) {
    default_free(p, NULL);
}

void cai_mem_free(void *p) {
    if (p)
        current.free(p, current.ctx);
}
