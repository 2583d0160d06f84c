/* fused.h - the fused-loop interpreter: a chain of pointwise ops, optionally ending in a
 * reduction, run as one loop over tiles, so intermediates never touch memory.
 *
 * A program is a short list of instructions over registers. Registers 0..n_inputs-1 hold
 * the inputs (strided, broadcast sources); each instruction writes a new register
 * n_inputs + k. Per tile (a few hundred elements of the collapsed index space) the
 * interpreter gathers each input into a contiguous tile buffer once, runs every
 * instruction with the same vectorised row kernels as cai_kern_pointwise (AVX-512 / AVX2 /
 * scalar, chosen at run time), and stores the output registers. Tiles are spread over the
 * thread pool; results do not depend on the thread count.
 *
 * This is what the compiled backward's fusion pass emits for a group of pointwise nodes
 * (and a pointwise producer feeding a reduction).
 */
#ifndef CAGRAD_FUSED_H
#define CAGRAD_FUSED_H

#include "codegen/kern.h"

#define KERN_FUSED_MAX_INPUTS  16
#define KERN_FUSED_MAX_INSTR   64
#define KERN_FUSED_MAX_OUTPUTS 8

typedef struct {
    kern_pw_op op;   /* any op of kern.h; its arity says how many of a, b, c are read */
    uint8_t a, b, c; /* source registers */
    double p0, p1;   /* the op's scalar parameters */
} kern_fused_instr;

/* Notes on the interpreter (fused.c plans, fused_tile.c runs the tiles): instructions no
 * output depends on are skipped; an output may name an input register (a copy) or the same
 * register as another output; an output may be an input's own memory with the same strides
 * (an in-place update), but other partial overlaps are undefined, as for cai_kern_pointwise.
 * in_dt must be filled for every input: a zeroed program declares float32 inputs. */
typedef struct {
    int n_inputs;
    int n_instr;
    kern_fused_instr instr[KERN_FUSED_MAX_INSTR];
    int n_outputs; /* 0..KERN_FUSED_MAX_OUTPUTS for cai_kern_fused_run (0 writes nothing) */
    uint8_t out_reg[KERN_FUSED_MAX_OUTPUTS]; /* registers stored to the outputs, in order */
    /* Inputs whose dtype differs from the program's (a where's cond, a masked_fill mask):
     * in_dt[r] for input register r (set it to the program dtype for ordinary inputs);
     * every other register has the program dtype. */
    kern_dtype in_dt[KERN_FUSED_MAX_INPUTS];
} kern_fused_prog;

/* Run p over the index space `shape` (ndim dims) in dtype dt. in[r] is input register r,
 * with strides per output dim (0 to broadcast). out[k] receives register out_reg[k],
 * written with out_strides[k] (contiguous for fresh buffers; views are allowed).
 * Returns 0, -1 for a malformed program (a register read before it is written, an op
 * the dtype does not support), -2 when scratch memory could not be had. */
int cai_kern_fused_run(const kern_fused_prog *p, kern_dtype dt, int ndim, const int64_t *shape,
                       const kern_src *in, void *const *out, const int64_t *const *out_strides);

/* Run p, then reduce its single output register (n_outputs must be 1) with `red` over the
 * dims set in rmask, without materialising the pointwise result. out is contiguous over the
 * kept dims (like cai_kern_reduce). Sum and mean use the same cascade summation as
 * cai_kern_reduce, so the result equals cai_kern_pointwise followed by cai_kern_reduce up to
 * rounding of the summation order (tests compare within a few ulps). MAX/MIN without indices.
 * (fused_reduce.c walks cai_kern_reduce's own plan and leaves, so in practice the bits are equal.)
 * LOGSUMEXP works too; KERN_I64 takes SUM (wrapping), MAX and MIN, as cai_kern_reduce does.
 * Over zero elements the result is cai_kern_reduce's. Returns 0, -1 or -2 as cai_kern_fused_run. */
int cai_kern_fused_reduce(const kern_fused_prog *p, kern_dtype dt, int ndim, const int64_t *shape,
                          const kern_src *in, kern_red_op red, uint32_t rmask, void *out);

/* The same two with caller scratch (the compiled backward's arena, so a run allocates
 * nothing): scratch, 64-byte aligned, holds scratch_bytes bytes. When it is NULL or too
 * small for this call, the call allocates its scratch as the functions above do. */
int cai_kern_fused_run_ws(const kern_fused_prog *p, kern_dtype dt, int ndim, const int64_t *shape,
                          const kern_src *in, void *const *out, const int64_t *const *out_strides,
                          void *scratch, size_t scratch_bytes);
int cai_kern_fused_reduce_ws(const kern_fused_prog *p, kern_dtype dt, int ndim,
                             const int64_t *shape, const kern_src *in, kern_red_op red,
                             uint32_t rmask, void *out, void *scratch, size_t scratch_bytes);

/* cai_kern_fused_run_ws that remembers its plan (validation, liveness, the collapsed index
 * space, tiles and buffers) in caller memory, so a call with an equal program and the
 * same dtype, shape and strides only points it at the new operands. A compiled backward
 * keeps one memo per fused group: planning each group on every run was a tenth of a
 * 200-op pointwise chain's backward. memo: cai_kern_fused_memo_bytes() bytes, zeroed before
 * first use, 16-byte aligned, used by one call at a time; NULL runs without one. */
typedef struct kern_fused_memo kern_fused_memo;
size_t cai_kern_fused_memo_bytes(void);
int cai_kern_fused_run_memo(const kern_fused_prog *p, kern_dtype dt, int ndim, const int64_t *shape,
                            const kern_src *in, void *const *out, const int64_t *const *out_strides,
                            void *scratch, size_t scratch_bytes, kern_fused_memo *memo);

/* Bytes of scratch that always suffice for cai_kern_fused_run_ws (red < 0) or
 * cai_kern_fused_reduce_ws (red a kern_red_op, over rmask) of p over `shape`, whatever the
 * operands' strides, at the current thread count. 0 for a malformed program or when the
 * call needs none. */
size_t cai_kern_fused_scratch_bytes(const kern_fused_prog *p, kern_dtype dt, int ndim,
                                    const int64_t *shape, int red, uint32_t rmask);

/* Whether a tile has read a row-constant input by value (fused_internal.h,
 * kf_plan.by_value) since the last call with clear set: for tests. */
bool cai_kern_fused_values_read(bool clear);

/* Whether an instruction may use op in dtype dt (the fusion pass asks before fusing). */
bool cai_kern_fused_supports(kern_pw_op op, kern_dtype dt);

#endif /* CAGRAD_FUSED_H */
