/* kern_rand.c - uniform, normal and dropout-mask draws from Philox-4x32-10.
 *
 * Philox is counter-based: block b of the stream for a seed is philox(counter = b,
 * key = seed), four 32-bit words. Draw i of a call is the absolute draw *offset + i, so a
 * value depends only on (seed, absolute position), never on threads or ISA. f32 draws use
 * one word (24 bits), f64 draws two words (53 bits).
 */
#include <math.h>

#include "kern_internal.h"

/* Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11), Random123. */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void cai_kern_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (uint32_t)p1;
        c2 = n2;
        c3 = (uint32_t)p0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

static void kern_philox_block(uint64_t seed, uint64_t block, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), 0, 0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    cai_kern_philox4x32_10(ctr, key, out);
}

/* Uniform [0, 1) of absolute draw i, at the dtype's resolution, as a double. */
static double kern_uniform_at(kern_dtype dt, uint64_t seed, uint64_t i, uint64_t *blk,
                              uint32_t w[4]) {
    uint64_t per = dt == KERN_F32 ? 4 : 2, b = i / per;
    if (b != *blk) {
        kern_philox_block(seed, b, w);
        *blk = b;
    }
    if (dt == KERN_F32)
        return (double)(w[i % 4] >> 8) * 0x1p-24;
    uint64_t hi = w[2 * (i % 2)], lo = w[2 * (i % 2) + 1];
    return (double)(((hi << 32) | lo) >> 11) * 0x1p-53;
}

typedef enum { KERN_RAND_UNIFORM, KERN_RAND_NORMAL, KERN_RAND_DROPOUT } kern_rand_kind;

typedef struct {
    kern_rand_kind kind;
    kern_dtype dt;
    uint64_t seed, offset;
    double p, scale;
    void *out;
} kern_rand_job;

/* Box-Muller on the pair (2k, 2k+1): the first gives r cos, the second r sin. */
static double kern_normal_at(const kern_rand_job *j, uint64_t i, uint64_t *blk, uint32_t w[4]) {
    uint64_t first = i & ~(uint64_t)1;
    double u1 = kern_uniform_at(j->dt, j->seed, first, blk, w);
    double u2 = kern_uniform_at(j->dt, j->seed, first + 1, blk, w);
    double r = sqrt(-2.0 * log(1.0 - u1)); /* 1 - u1 is in (0, 1]: no log(0) */
    double t = 6.283185307179586476925 * u2;
    return (i & 1) ? r * sin(t) : r * cos(t);
}

static void kern_rand_range(void *ctx, int64_t begin, int64_t end) {
    const kern_rand_job *j = ctx;
    uint64_t blk = UINT64_MAX;
    uint32_t w[4] = {0, 0, 0, 0};
    for (int64_t t = begin; t < end; t++) {
        uint64_t i = j->offset + (uint64_t)t;
        double v;
        if (j->kind == KERN_RAND_NORMAL)
            v = kern_normal_at(j, i, &blk, w);
        else if (j->kind == KERN_RAND_UNIFORM)
            v = kern_uniform_at(j->dt, j->seed, i, &blk, w);
        else
            v = kern_uniform_at(j->dt, j->seed, i, &blk, w) < j->p ? 0.0 : j->scale;
        if (j->dt == KERN_F32)
            ((float *)j->out)[t] = (float)v;
        else
            ((double *)j->out)[t] = v;
    }
}

static void kern_rand_run(kern_rand_kind kind, kern_dtype dt, uint64_t seed, uint64_t *offset,
                          int64_t n, double p, void *out) {
    if ((dt != KERN_F32 && dt != KERN_F64) || n <= 0)
        return;
    kern_rand_job j = {kind, dt, seed, *offset, p, p < 1 ? 1.0 / (1.0 - p) : 0.0, out};
    cai_kern_parallel_for(n, KERN_GRAIN, kern_rand_range, &j);
    *offset += (uint64_t)n;
}

void cai_kern_rand_uniform(kern_dtype dt, uint64_t seed, uint64_t *offset, int64_t n, void *out) {
    kern_rand_run(KERN_RAND_UNIFORM, dt, seed, offset, n, 0, out);
}

void cai_kern_rand_normal(kern_dtype dt, uint64_t seed, uint64_t *offset, int64_t n, void *out) {
    kern_rand_run(KERN_RAND_NORMAL, dt, seed, offset, n, 0, out);
}

void cai_kern_rand_dropout_mask(kern_dtype dt, uint64_t seed, uint64_t *offset, int64_t n, double p,
                                void *out) {
    kern_rand_run(KERN_RAND_DROPOUT, dt, seed, offset, n, p, out);
}
