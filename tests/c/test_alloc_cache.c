/* test_alloc_cache.c - suite `alloc_cache`: freed tensor data is kept by size and handed
 * back to the next allocation of that size (ca_empty_cache, ca_set_cache_limit,
 * ca_get_cache_info). Criterion runs each test in its own process, so each starts with
 * an empty cache and the default limit.
 */
#include "testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* A float32 vector of n elements: 4n bytes of data. */
static ca_tensor *vec(int64_t n) {
    ca_tensor *t;
    TU_OK(ca_empty(CA_FLOAT32, 1, (int64_t[]){n}, &t));
    return t;
}

static ca_cache_info info(void) {
    ca_cache_info ci;
    ca_get_cache_info(&ci);
    return ci;
}

Test(alloc_cache, a_freed_block_serves_the_next_allocation_of_its_size) {
    ca_tensor *a = vec(4096);
    void *pa = ca_tensor_data(a);
    ca_tensor_release(a);
    cr_assert_eq(info().cached_blocks, 1);
    cr_assert_geq(info().cached_bytes, 4096 * 4);
    uint64_t hits = info().hits;
    ca_tensor *b = vec(4096);
    cr_assert_eq(ca_tensor_data(b), pa, "the same block comes back");
    cr_assert_eq(info().hits, hits + 1);
    cr_assert_eq(info().cached_blocks, 0);
    ca_tensor *c = vec(8192); /* another size: a miss */
    cr_assert_neq(ca_tensor_data(c), pa);
    cr_assert_eq(info().hits, hits + 1);
    ca_tensor_release(b);
    ca_tensor_release(c);
    cr_assert_eq(info().cached_blocks, 2);
}

Test(alloc_cache, sizes_within_64_bytes_share_a_bin) {
    ca_tensor *a = vec(1000); /* 4000 bytes: 4032 after rounding, as is 4004 */
    void *pa = ca_tensor_data(a);
    ca_tensor_release(a);
    ca_tensor *b = vec(1001);
    cr_assert_eq(ca_tensor_data(b), pa);
    ca_tensor_release(b);
}

Test(alloc_cache, the_last_freed_block_of_a_size_is_reused_first) {
    ca_tensor *a = vec(4096), *b = vec(4096);
    void *pb = ca_tensor_data(b);
    ca_tensor_release(a);
    ca_tensor_release(b); /* still in cache */
    ca_tensor *c = vec(4096);
    cr_assert_eq(ca_tensor_data(c), pb);
    ca_tensor_release(c);
}

Test(alloc_cache, small_blocks_are_not_cached) {
    ca_tensor *a = vec(16); /* 64 bytes */
    ca_tensor_release(a);
    cr_assert_eq(info().cached_blocks, 0);
    cr_assert_eq(info().misses, 0, "a small allocation is not a cache lookup");
}

Test(alloc_cache, a_reused_block_holds_what_the_new_tensor_says) {
    ca_tensor *a;
    TU_OK(ca_full(CA_FLOAT32, 1, (int64_t[]){4096}, 7.0, &a));
    ca_tensor_release(a);
    ca_tensor *z;
    TU_OK(ca_zeros(CA_FLOAT32, 1, (int64_t[]){4096}, &z));
    cr_assert_eq(info().hits, 1, "zeros took the cached block");
    const float *d = ca_tensor_data(z);
    for (int i = 0; i < 4096; i++)
        cr_assert_eq(d[i], 0.0f, "element %d", i);
    ca_tensor_release(z);
}

Test(alloc_cache, over_the_limit_the_least_recently_freed_blocks_go) {
    size_t blk = 16384; /* 4096 floats, a multiple of 64 */
    ca_set_cache_limit(3 * blk);
    ca_tensor *small1 = vec(4096), *big = vec(8192), *small2 = vec(4096);
    void *p2 = ca_tensor_data(small2);
    ca_tensor_release(small1);
    ca_tensor_release(big); /* 3 blocks' worth: full */
    cr_assert_eq(info().cached_bytes, 3 * blk);
    ca_tensor_release(small2); /* evicts small1, the oldest */
    cr_assert_eq(info().cached_bytes, 3 * blk);
    cr_assert_eq(info().cached_blocks, 2);
    ca_tensor *a = vec(4096), *b = vec(4096), *c = vec(8192);
    cr_assert_eq(ca_tensor_data(a), p2, "the newer block stayed");
    cr_assert_eq(info().hits, 2, "small2 and big were cached, small1 was not");
    ca_tensor_release(a);
    ca_tensor_release(b);
    ca_tensor_release(c);
    cr_assert_leq(info().cached_bytes, 3 * blk);
}

Test(alloc_cache, a_block_bigger_than_the_limit_is_not_cached) {
    ca_set_cache_limit(8192);
    ca_tensor *a = vec(4096); /* 16 KiB */
    ca_tensor_release(a);
    cr_assert_eq(info().cached_blocks, 0);
    cr_assert_eq(info().limit, 8192);
}

Test(alloc_cache, limit_zero_turns_caching_off_and_lowering_it_shrinks_now) {
    ca_tensor *a = vec(4096), *b = vec(8192);
    ca_tensor_release(a);
    ca_tensor_release(b);
    cr_assert_eq(info().cached_blocks, 2);
    ca_set_cache_limit(32768); /* keeps b, the newest */
    cr_assert_eq(info().cached_blocks, 1);
    cr_assert_eq(info().cached_bytes, 32768);
    ca_set_cache_limit(0);
    cr_assert_eq(info().cached_blocks, 0);
    ca_tensor *c = vec(4096);
    ca_tensor_release(c);
    cr_assert_eq(info().cached_bytes, 0);
}

Test(alloc_cache, empty_cache_gives_everything_back) {
    ca_tensor *a = vec(4096), *b = vec(4096), *c = vec(100000);
    ca_tensor_release(a);
    ca_tensor_release(b);
    ca_tensor_release(c);
    cr_assert_eq(info().cached_blocks, 3);
    ca_empty_cache();
    cr_assert_eq(info().cached_blocks, 0);
    cr_assert_eq(info().cached_bytes, 0);
    ca_tensor *d = vec(4096); /* and allocation still works */
    ca_tensor_release(d);
}

Test(alloc_cache, the_default_limit_is_512_mib) {
    cr_assert_eq(info().limit, (size_t)512 << 20);
}

Test(alloc_cache, a_user_allocator_sees_every_block_and_the_cache_stays_empty) {
    ca_tensor *cached = vec(8192);
    ca_tensor_release(cached);
    cr_assert_eq(info().cached_blocks, 1);
    tu_alloc_install();
    cr_assert_eq(info().cached_blocks, 0, "installing an allocator empties the cache");
    long live = tu_alloc_live();
    ca_tensor *a = vec(4096);
    cr_assert_gt(tu_alloc_live(), live, "the user's allocator made the data");
    ca_tensor_release(a);
    cr_assert_eq(tu_alloc_live(), live, "and got it back at once");
    cr_assert_eq(info().cached_blocks, 0);
    tu_alloc_uninstall();
}

static void *churn(void *arg) {
    int64_t n = *(int64_t *)arg;
    for (int i = 0; i < 2000; i++) {
        ca_tensor *t;
        if (ca_full(CA_FLOAT32, 1, (int64_t[]){n + i % 3 * 16}, (double)i, &t) != CA_OK)
            return (void *)1;
        const float *d = ca_tensor_data(t);
        bool ok = d[0] == (float)i && d[n - 1] == (float)i;
        ca_tensor_release(t);
        if (!ok)
            return (void *)1;
    }
    return NULL;
}

Test(alloc_cache, threads_share_the_cache_safely) {
    pthread_t th[4];
    int64_t n[4] = {1024, 1024, 4096, 1040};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, churn, &n[i]), 0);
    for (int i = 0; i < 4; i++) {
        void *rc;
        pthread_join(th[i], &rc);
        cr_assert_null(rc, "thread %d saw another thread's data or failed to allocate", i);
    }
    ca_cache_info ci = info();
    cr_assert_eq(ci.hits + ci.misses, 4 * 2000, "every allocation was one lookup");
    cr_assert_eq(ci.misses, ci.cached_blocks, "every block made is back in the cache");
    cr_assert_gt(ci.hits, ci.misses);
}

#if !defined(__SANITIZE_ADDRESS__)
/* The process's virtual size in bytes (VmSize). */
static size_t vm_size(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %zu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb * 1024;
}
#endif

/* Running out of address space with 128 MiB cached: the cache is emptied and the
 * allocation retried. AddressSanitizer reserves terabytes of shadow, so RLIMIT_AS cannot
 * be used under it. */
Test(alloc_cache, out_of_memory_empties_the_cache_and_retries) {
#if defined(__SANITIZE_ADDRESS__)
    cr_skip_test("RLIMIT_AS and AddressSanitizer's shadow do not mix");
#else
    ca_tensor *held[4];
    for (int i = 0; i < 4; i++) /* 32 MiB + header: past malloc's mmap threshold */
        held[i] = vec(8 << 20);
    for (int i = 0; i < 4; i++)
        ca_tensor_release(held[i]);
    cr_assert_eq(info().cached_bytes, (size_t)4 * (32 << 20));
    struct rlimit rl = {vm_size() + (96u << 20), RLIM_INFINITY};
    cr_assert_eq(setrlimit(RLIMIT_AS, &rl), 0);
    ca_tensor *big; /* 160 MiB: fits only once the cache has given its 128 MiB back */
    ca_status st = ca_empty(CA_FLOAT32, 1, (int64_t[]){40 << 20}, &big);
    cr_assert_eq(st, CA_OK, "%s", ca_last_error());
    cr_assert_eq(info().cached_bytes, 0);
    ca_tensor_release(big);
#endif
}

/* A cached block is poisoned: writing through a pointer kept past the tensor's release is
 * still a reported use after free, here in a child whose report goes to /dev/null. */
Test(alloc_cache, a_use_after_free_of_a_cached_block_is_reported) {
#if !defined(__SANITIZE_ADDRESS__)
    cr_skip_test("needs AddressSanitizer (make sanitize)");
#else
    ca_tensor *a = vec(4096);
    volatile float *d = ca_tensor_data(a);
    ca_tensor_release(a);
    cr_assert_eq(info().cached_blocks, 1);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 2);
        d[7] = 1.0f;
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    cr_assert(!(WIFEXITED(status) && WEXITSTATUS(status) == 0),
              "the write into a cached block went unnoticed");
#endif
}
