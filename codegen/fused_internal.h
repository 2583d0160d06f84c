/* fused_internal.h - what the fused-loop interpreter's files share and nothing outside them
 * may use: the plan of a program over an index space, a lane's scratch, and the calls
 * between planning (fused.c), the tile engine (fused_tile.c) and the two drivers,
 * elementwise (fused_run.c) and reduction (fused_reduce.c).
 */
#ifndef CAGRAD_FUSED_INTERNAL_H
#define CAGRAD_FUSED_INTERNAL_H

#include "fused.h"
#include "kern_internal.h"

#define KF_NREG      (KERN_FUSED_MAX_INPUTS + KERN_FUSED_MAX_INSTR)
#define KF_NOPS      (KERN_FUSED_MAX_INPUTS + KERN_FUSED_MAX_OUTPUTS)
#define KF_TILE_MIN  256 /* elements; a multiple of every vector width */
#define KF_VALUE_ROW 64  /* row length from which row-constant inputs are read by value */

/* How an operand's elements are reached for a tile. */
typedef enum {
    KF_UNUSED, /* not read */
    KF_SPLAT,  /* one value everywhere: a buffer filled once per call */
    KF_CONTIG, /* row-major contiguous over the collapsed space */
    KF_INNER,  /* contiguous along rows only */
    KF_GATHER, /* anything else: copied per tile */
} kf_kind;

typedef struct {
    kf_kind kind;
    bool cvt;        /* a cond/mask of another dtype: loaded as 1/0 of the program dtype */
    kern_dtype mdt;  /* dtype in memory */
    int64_t isz;     /* bytes per element in memory */
    const char *src; /* inputs */
    char *dst;       /* outputs */
    int64_t str[KERN_MAX_DIMS]; /* element strides over the collapsed dims */
} kf_opnd;

typedef struct {
    int64_t f, n; /* flat range [f, f + n) of the index space */
} kf_run;

typedef struct {
    const kern_fused_prog *p;
    kern_dtype dt;
    int64_t esz;
    int n_in, n_instr, n_out;
    bool reduce;
    kern_pw_fn fn[KERN_FUSED_MAX_INSTR];
    int nread[KERN_FUSED_MAX_INSTR]; /* operands the kernel reads */
    bool live[KF_NREG];
    int last[KF_NREG];   /* last instruction reading a register; n_instr: stored */
    int first[KF_NREG];  /* inputs: the instruction before which it is loaded */
    int slot[KF_NREG];   /* tile buffer of a register; -1 for none */
    int out_of[KF_NREG]; /* output a register is computed straight into, or -1 */
    int load[KERN_FUSED_MAX_INPUTS], n_load; /* live inputs by first use */
    /* Inputs constant along rows of at least KF_VALUE_ROW (the last dim's stride 0, e.g.
     * BatchNorm's per-channel operands over [N, C, H*W]) that every reader takes as its
     * scalar parameter: a tile is cut at row ends, the input read as one value per piece,
     * and its readers call their scalar form (sfn: ADD_S for ADD, ...) piece by piece
     * instead of reading a splat of it, a copy per row. */
    bool by_value[KERN_FUSED_MAX_INPUTS];
    int n_by_value;
    kern_pw_fn sfn[KERN_FUSED_MAX_INSTR]; /* NULL: the instruction reads no by-value input */
    int s_reg[KERN_FUSED_MAX_INSTR];      /* its by-value input */
    int s_other[KERN_FUSED_MAX_INSTR];    /* the register it reads as an array */
    int nslots;
    int nd;
    int64_t shape[KERN_MAX_DIMS], total;
    kf_opnd op[KF_NOPS]; /* inputs, then outputs (or the reduction's virtual output) */
    int64_t tile;        /* elements per tile buffer */
    size_t slot_bytes;   /* distance between register buffers: a tile and KF_SLOT_PAD */
    /* cai_kern_fused_run's tiling: tiles inside rows (tpr per row, `chunk` long) or rpt whole
     * rows per tile */
    bool row_tiles;
    int64_t tpr, chunk, rpt, ntiles;
    int64_t n_spare; /* reductions: spare tile buffers per lane */
    size_t ws_bytes; /* one lane's workspace */
} kf_plan;

/* One lane's scratch: the register buffers and, for reductions, the tile's run list and
 * spare tile-sized buffers (a temporary, then the column tree's partial sums). */
typedef struct {
    char *slots;
    kf_run *runs;
    char *tmp;
    char *stack;
} kf_ws;

/* A lane is one workspace; lanes take blocks of `grain` work units from a shared counter,
 * so the split of the work (never its results) depends on the threads. */
typedef void (*kf_block_fn)(void *ctx, const kf_ws *ws, int64_t begin, int64_t end);

/* ------------------------------------------------------------ planning (fused.c) */

/* Validates the program and the index space and works out liveness; -1 on anything bad.
 * Sets pl->total (0: nothing to run). */
int cai_kern_fused_plan_init(kf_plan *pl, const kern_fused_prog *p, kern_dtype dt, int ndim,
                             const int64_t *shape, bool reduce);

/* Every input the program reads is given. */
bool cai_kern_fused_inputs_given(const kf_plan *pl, const kern_src *in);

/* Collapses, classifies and sizes everything once the index space is known not empty.
 * Operands are the inputs, then the outputs, or (out_strides NULL) the one contiguous
 * virtual output a reduction reads. */
void cai_kern_fused_plan_layout(kf_plan *pl, int ndim, const int64_t *shape, const kern_src *in,
                                void *const *out, const int64_t *const *out_strides,
                                int64_t min_tile, int64_t n_spare);

/* Points a laid-out elementwise plan at this call's operands. */
void cai_kern_fused_plan_rebind(kf_plan *pl, const kern_src *in, void *const *out);

/* ------------------------------------------------------------ tiles and lanes (fused_tile.c) */

/* Loads the flat range [f, f + n) of input o into buf, or (from != NULL) stores `from` to
 * output o, one row piece at a time. */
void cai_kern_fused_walk(const kf_plan *pl, const kf_opnd *o, int64_t f, int64_t n, char *buf,
                         const char *from);

/* Runs the program over the runs (m elements in all); loc[r] gets where register r's
 * values are (NULL for an input read by value). Inputs are loaded just before their first
 * reader. */
void cai_kern_fused_eval(const kf_plan *pl, const kf_ws *ws, const kf_run *runs, int nruns,
                         int64_t m, const char **loc);

/* Lanes worth running for n units of `grain`: one, or one per thread. */
int64_t cai_kern_fused_lanes(int64_t n, int64_t grain);

/* Units of work per grab: at least KERN_GRAIN elements of the index space. */
int64_t cai_kern_fused_grain(int64_t elems_per_unit);

/* Runs block over [0, n) on `lanes` workspaces at mem (lanes * ws_bytes, filled here). */
void cai_kern_fused_launch(const kf_plan *pl, char *mem, int64_t lanes, int64_t n, int64_t grain,
                           kf_block_fn block, void *ctx);

/* The lanes' workspaces and `extra` bytes after them: the caller's scratch when it is big
 * enough, else allocated (*owned set: free it with cai_kern_scratch_free). */
char *cai_kern_fused_lanes_mem(const kf_plan *pl, int64_t lanes, size_t extra, void *scratch,
                               size_t scratch_bytes, bool *owned);

/* ------------------------------------------------------------ reductions (fused_reduce.c) */

/* What a reduction of p needs per lane, for cai_kern_fused_scratch_bytes: plans it into pl
 * and gives the smallest tile, the spare tile buffers per lane and the bytes of partial
 * results after the lanes. Nonzero when it needs no scratch (bad arguments, nothing to
 * reduce). */
int cai_kern_fused_red_needs(kf_plan *pl, const kern_fused_prog *p, kern_dtype dt, int ndim,
                             const int64_t *shape, kern_red_op red, uint32_t rmask,
                             int64_t *min_tile, int64_t *n_spare, size_t *part);

#endif /* CAGRAD_FUSED_INTERNAL_H */
