/* shape_rules.h - the shape rules that the eager ops and the graph both apply, written once.
 *
 * A rule checks its inputs' shapes (and dtypes), canonicalises its arguments (negative
 * dims, -1 sizes) and computes the output's shape. The eager ops run it on concrete sizes
 * (autograd/, every op call), the graph on symbolic ones (graph/shape.c, every traced
 * node), so the two cannot disagree on what is legal.
 *
 * A size is an int64_t: for the eager ops the size itself, in a graph a size-expression id
 * (graph_sx). Size expressions are hash-consed, so two sizes are provably equal exactly
 * when they are equal as numbers, in both worlds; whatever else a rule needs from a size
 * (is it the constant 1? a new constant; a printed shape) it asks the cai_sizes it is given.
 * A symbolic size is never taken to be 1 (it may be 1 at run time: see graph.h).
 *
 * Rules return 0, or -1 with the reason in a cai_rule_error; each layer turns that into its
 * own error (a ca_status and ca_last_error(), or graph_error()).
 */
#ifndef CAGRAD_SHAPE_RULES_H
#define CAGRAD_SHAPE_RULES_H

#include "codegen/kern.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Arithmetic on sizes (cai_sizes.arith): a + b, a * b, a / b (truncating; sizes are not
 * negative, so a floor). */
typedef enum { CAI_SIZE_ADD, CAI_SIZE_MUL, CAI_SIZE_DIV } cai_size_op;

typedef struct {
    void *ctx; /* the graph, or NULL for concrete sizes */
    /* the value of size s when it is a constant; false for a symbolic size */
    bool (*value)(const void *ctx, int64_t s, int64_t *v);
    /* a and b are the same size though their ids differ (NULL: never); a graph that
     * unifies sizes (cai_graph_unify) says yes for slots of equal values, and records it */
    bool (*same)(void *ctx, int64_t a, int64_t b);
    /* the size that is the constant v (a new expression in a graph); -1 out of memory */
    int64_t (*constant)(void *ctx, int64_t v);
    /* "[2, s0]" and "s0" into buf */
    const char *(*shape_str)(const void *ctx, int n, const int64_t *shape, char *buf, size_t size);
    const char *(*size_str)(const void *ctx, int64_t s, char *buf, size_t size);
    /* "float32" or "f32": how dtypes are spelled in this layer's messages */
    const char *(*dtype_name)(kern_dtype dt);
    const char *convert; /* how a user converts a dtype here: "ca_to_dtype", "a cast" */
    /* a op b (a new expression in a graph); -1 when out of memory */
    int64_t (*arith)(void *ctx, cai_size_op op, int64_t a, int64_t b);
} cai_sizes;

/* Concrete sizes: a size is its value (the eager ops; dtypes spelled "float32"). */
extern const cai_sizes cai_sizes_concrete;

typedef enum {
    CAI_RULE_SHAPE = 1, /* shapes that do not fit */
    CAI_RULE_DIM,       /* a dim out of range */
    CAI_RULE_DTYPE,     /* a dtype the op does not take, or two that differ */
    CAI_RULE_NOMEM,     /* a new size expression could not be made */
} cai_rule_status;

#define CAI_RULE_MSG 320

typedef struct {
    cai_rule_status status;
    char msg[CAI_RULE_MSG]; /* "The expanded size of the tensor (4) must match ..." */
} cai_rule_error;

/* *dim against ndim dims (a 0-d value takes 0 and -1, as PyTorch), made non-negative. */
int cai_rule_dim(int64_t *dim, int ndim, const char *op, cai_rule_error *e);

/* out = the broadcast of shapes a and b (NumPy rules); out may alias a. */
int cai_rule_broadcast(const cai_sizes *z, const char *op, int na, const int64_t *a, int nb,
                       const int64_t *b, int *nout, int64_t *out, cai_rule_error *e);

/* The dtype of pointwise kernel op k over n inputs of dtypes dt[]: the inputs' one dtype
 * (the condition input of where / masked_fill may be any), which k must support. */
int cai_rule_pointwise_dtype(const cai_sizes *z, const char *op, kern_pw_op k, int n,
                             const kern_dtype *dt, kern_dtype *out, cai_rule_error *e);

/* The shape of a reduction of x over the dims set in mask: those dims dropped, or kept as
 * 1 with keepdim. The caller has checked the mask. Returns the output's rank, or -1 when
 * the size 1 could not be made (out of memory). */
int cai_rule_reduced_shape(const cai_sizes *z, int nx, const int64_t *x, uint32_t mask,
                           bool keepdim, int64_t *out);

/* sum_to: x must be a broadcast of target t (leading dims added, size-1 dims grown). */
int cai_rule_sum_to(const cai_sizes *z, int nx, const int64_t *x, int nt, const int64_t *t,
                    cai_rule_error *e);

/* expand x to target t in place: -1 keeps the input's size (never a new leading dim), and
 * only size-1 dims grow. */
int cai_rule_expand(const cai_sizes *z, int nx, const int64_t *x, int nt, int64_t *t,
                    cai_rule_error *e);

/* permute: perm (n entries, normalised in place) must name each of x's dims once; out is
 * the permuted shape. */
int cai_rule_permute(const cai_sizes *z, int nx, const int64_t *x, int n, int64_t *perm,
                     int64_t *out, cai_rule_error *e);

/* unsqueeze: a size-1 dim inserted at *dim (normalised in place against nx + 1 dims);
 * out has nx + 1 dims. */
int cai_rule_unsqueeze(const cai_sizes *z, int nx, const int64_t *x, int64_t *dim, int64_t *out,
                       cai_rule_error *e);

/* [batch..., M, K] @ [batch..., K, N], each operand transposed (its last two dims) when
 * its flag is set, with at least 2 dims each; batch dims broadcast when `broadcast`, else
 * they must be equal. Returns the output's rank in *nout. */
int cai_rule_matmul(const cai_sizes *z, const char *op, int na, const int64_t *a, bool ta, int nb,
                    const int64_t *b, bool tb, bool broadcast, int *nout, int64_t *out,
                    cai_rule_error *e);

/* The length of a canonical slice start:end:step (0 <= start, step > 0). */
int64_t cai_rule_slice_len(int64_t start, int64_t end, int64_t step);

/* slice_backward: the gradient g must have full's shape but for dim `dim`, which is `len`
 * long (the slice's length; a graph whose slice starts at a symbolic position passes g's
 * own size there and checks the length at run time). */
int cai_rule_slice_backward(const cai_sizes *z, int ng, const int64_t *g, int nf,
                            const int64_t *full, int dim, int64_t len, cai_rule_error *e);

/* reshape x to target t (nt dims). At most one -1 (the id -1 or the constant -1), whose
 * position goes to *infer (-1: none); other constant sizes must be >= 0. When every size
 * of x and of t but the -1 is a constant, the element counts are checked and the -1 is
 * resolved in t; otherwise t is left as it is for the caller's symbolic reasoning. */
int cai_rule_reshape(const cai_sizes *z, const char *op, int nx, const int64_t *x, int nt,
                     int64_t *t, int *infer, cai_rule_error *e);

/* index_add into zeros(full): the index (dtype idx_dt) is 0-D or 1-D int64, *dim is
 * normalised against full, and src must be full with that dim the index's length. */
int cai_rule_index_add(const cai_sizes *z, kern_dtype idx_dt, int ni, const int64_t *idx, int ns,
                       const int64_t *src, int nf, const int64_t *full, int64_t *dim,
                       cai_rule_error *e);

/* scatter_add into zeros(full): an int64 index of src's shape and full's rank, no larger
 * than full outside *dim (normalised). */
int cai_rule_scatter_add(const cai_sizes *z, kern_dtype idx_dt, int ni, const int64_t *idx, int ns,
                         const int64_t *src, int nf, const int64_t *full, int64_t *dim,
                         cai_rule_error *e);

/* nll_loss's target against its input x: [N] for [N, C], [N, d1, ...] for [N, C, d1, ...],
 * 0-D for [C]. */
int cai_rule_nll_target(const cai_sizes *z, const char *op, int nx, const int64_t *x, int nt,
                        const int64_t *t, cai_rule_error *e);

/* index_fill of x along *dim (normalised): an int64 index (dtype idx_dt) of 0 or 1 dims. */
int cai_rule_index_fill(const cai_sizes *z, kern_dtype idx_dt, int ni, int nx, int64_t *dim,
                        cai_rule_error *e);

/* conv2d's parameters, in this order, in ca_attrs.dims and the graph's im2col / col2im:
 * kernel, stride, zero padding at the start (top, left), dilation, and zero padding at the
 * end (bottom, right; PyTorch's padding='same' can need one more there). */
enum {
    CAI_CONV_KH,
    CAI_CONV_KW,
    CAI_CONV_SH,
    CAI_CONV_SW,
    CAI_CONV_PH,
    CAI_CONV_PW,
    CAI_CONV_DH,
    CAI_CONV_DW,
    CAI_CONV_PH_END,
    CAI_CONV_PW_END,
    CAI_CONV_NPARAMS
};

/* What conv2d parameter k is: "kernel size", "stride", "padding" or "dilation". */
const char *cai_conv_param_kind(int k);
/* How the autograd layer's ca_attrs hold them (dims has room for 8): dims.v = the first
 * CAI_CONV_IN_DIMS, i[0] = groups, i[1], i[2] = the end paddings (PH_END, PW_END). */
#define CAI_CONV_IN_DIMS 8

/* The layouts im2col can store its columns in (ops_conv.c's attrs.i[3]): [N, groups, K, L]
 * as im2col's rule gives them, or [groups, K, N, L], the batch next to the positions, so
 * that one GEMM per group runs over the whole batch (conv2d's derivative). Either may have
 * CAI_CONV_COLS_FLIP added: the kernel taps stored in reverse order (kern_conv_geom's flip;
 * col2im's layout is 0 or that flag). */
enum {
    CAI_CONV_COLS_NGKL,
    CAI_CONV_COLS_GKNL,
    CAI_CONV_COLS_FLIP,
    CAI_CONV_COLS__COUNT = 4 /* every order, with and without FLIP */
};
/* The dims' order of a layout, CAI_CONV_COLS_NGKL or CAI_CONV_COLS_GKNL. */
static inline int64_t cai_conv_cols_order(int64_t layout) {
    return layout & CAI_CONV_COLS_GKNL;
}
/* perm[d] = the [N, G, K, L] dim that stored dim d of the layout holds. */
void cai_conv_cols_perm(int64_t layout, int *perm);
/* shape ([N, G, K, L], im2col's rule) reordered in place into the layout's order. */
void cai_conv_cols_shape(int64_t layout, int64_t *shape);

/* im2col (conv2d's unfold) of x [N, C, H, W] with the conv parameters p (CAI_CONV_*) and
 * groups: out = [N, groups, C/groups*kh*kw, OH*OW], and ohw (may be NULL) = {OH, OW}. The
 * parameters must be in range (kernel, stride, dilation >= 1, padding >= 0, groups >= 1
 * dividing C) and the kernel must fit the padded input (checked when H and W are
 * numbers; a symbolic OH is (H + ph + ph_end - dh*(kh-1) - 1) / sh + 1, a floor
 * division). */
int cai_rule_im2col(const cai_sizes *z, const char *op, int nx, const int64_t *x, const int64_t *p,
                    int64_t groups, int64_t *out, int64_t *ohw, cai_rule_error *e);

/* col2im (im2col's adjoint) into full [N, C, H, W]: cols must be im2col's output shape for
 * full; its last two sizes may also be symbolic ones not provably equal to it (the graph's
 * runner checks them). */
int cai_rule_col2im(const cai_sizes *z, int nc, const int64_t *cols, int nf, const int64_t *full,
                    const int64_t *p, int64_t groups, cai_rule_error *e);

#endif /* CAGRAD_SHAPE_RULES_H */
