/* kern_conv_wino.h - what kern_conv_wino.c shares with its transforms
 * (kern_conv_wino.inc), which are built once per ISA: baseline x86-64 in kern_conv_wino.c,
 * and with AVX2 or AVX-512 in kern_conv_wino_avx2.c / kern_conv_wino_avx512.c, picked at
 * run time by cai_kern_isa(). The transforms are adds, subtractions and halvings, built
 * with -ffp-contract=off: every ISA computes the same bits, vectorised or not.
 */
#ifndef CAGRAD_KERN_CONV_WINO_H
#define CAGRAD_KERN_CONV_WINO_H

#include "kern_internal.h"

#define WINO_CHUNK 64  /* tiles of a tile row transformed together, at most */
#define WINO_BAND  320 /* tiles of a band of tile rows (with the image's split rows, + 1 row) */
_Static_assert(WINO_BAND >= 2 * WINO_CHUNK, "a band holds two tile rows of a full chunk");

/* The flat sweeps over a band's tiles read and write separate buffers through many
 * pointers, more than GCC's dependence analysis follows (restrict or not): it would leave
 * them scalar. */
#if defined(__GNUC__) && !defined(__clang__)
#define WINO_IVDEP _Pragma("GCC ivdep")
#else
#define WINO_IVDEP
#endif

typedef struct wino_xf wino_xf;

/* The sizes every stage shares. */
typedef struct {
    kern_dtype dt;
    size_t es;
    const wino_xf *xf; /* the transforms for this dtype and the ISA */
    const kern_conv_geom *g;
    int64_t C, O, Cg, Og, G;
    int64_t th, tw, tiles; /* tiles per image: th x tw */
    int64_t S;             /* images per slab */
    int64_t n0, s, nt;     /* this slab: images [n0, n0 + s), nt = s * tiles of them */
    const char *x;
    const int64_t *xs;
    const char *w, *gy;
    char *y, *dw;
    double beta;
    char *V, *M; /* [16][C][T], and [16][O][T] (forward M or the gradient's dY) */
    char *U;     /* [16][O][Cg]: the transformed weight, or the gradient's sums */
    int64_t vplane, mplane, uplane; /* entries from one position k's plane to the next */
    int64_t blocks, edge;           /* the forward GEMMs' blocks of tiles */
} wino_job;

/* One dtype's transforms at one ISA: the image planes (per slab image i and channel), the
 * weight (per output channel o). */
struct wino_xf {
    void (*input_tiles)(const wino_job *j, int64_t i, int64_t c);
    void (*output_tiles)(const wino_job *j, int64_t i, int64_t o);
    void (*grad_tiles)(const wino_job *j, int64_t i, int64_t o);
    void (*weight_transform)(const wino_job *j, int64_t o);
    void (*weight_untransform)(const wino_job *j, int64_t o);
};

/* [0] float32, [1] float64 */
extern const wino_xf cai_wino_xf_scalar[2];
extern const wino_xf cai_wino_xf_avx2[2];
extern const wino_xf cai_wino_xf_avx512[2];

/* The outputs of tile row ty that exist: 2, or 1 in the last row of an odd oh. */
static inline int64_t wino_tile_rows(const wino_job *j, int64_t ty) {
    return j->g->oh - 2 * ty < 2 ? j->g->oh - 2 * ty : 2;
}

/* Tile rows per flat sweep over a band of bt tile rows of a chunk of nt tiles: all of them
 * when the chunk is a whole tile row (the band's tiles are then contiguous in each plane),
 * else one at a time. */
static inline int64_t wino_rows_per_sweep(const wino_job *j, int64_t nt, int64_t bt) {
    return nt == j->tw ? bt : 1;
}

/* Where the weight stores the effective tap (a, b): turned 180 degrees with flip. */
static inline int wino_tap(const kern_conv_geom *g, int a, int b) {
    return g->flip ? (2 - a) * 3 + 2 - b : a * 3 + b;
}

/* A row of the table of both dtypes' transforms (kern_conv_wino_xf.inc). */
#define WINO_XF_ROW(sfx)                                                                           \
    {                                                                                              \
        input_tiles_##sfx, output_tiles_##sfx, grad_tiles_##sfx, weight_transform_##sfx,           \
            weight_untransform_##sfx                                                               \
    }

#endif
