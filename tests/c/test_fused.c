/* test_fused.c - the fused-loop interpreter (codegen/fused.h) against op-by-op kernels.
 *
 * cai_kern_fused_run runs the same row kernels as cai_kern_pointwise, so every program must equal
 * the op-by-op result (each instruction a cai_kern_pointwise call into a full-size buffer)
 * bit for bit, on every layout, ISA path and thread count. cai_kern_fused_reduce must match
 * cai_kern_pointwise + cai_kern_reduce within a few ulps. Malformed programs give -1, a failing
 * allocator -2 with nothing leaked.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/fused.h"

/* ------------------------------------------------------------------ helpers */

static uint64_t tf_rng;

static double tf_rand(double lo, double hi) {
    uint64_t z = (tf_rng += 0x9E3779B97F4A7C15ull); /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return lo + (hi - lo) * (double)(z >> 11) * 0x1p-53;
}

static void tf_set(kern_dtype dt, void *p, int64_t i, double v) {
    if (dt == KERN_F32)
        ((float *)p)[i] = (float)v;
    else if (dt == KERN_F64)
        ((double *)p)[i] = v;
    else
        ((int64_t *)p)[i] = (int64_t)v;
}

static double tf_get(kern_dtype dt, const void *p, int64_t i) {
    if (dt == KERN_F32)
        return ((const float *)p)[i];
    if (dt == KERN_F64)
        return ((const double *)p)[i];
    return (double)((const int64_t *)p)[i];
}

/* n random values in [lo, hi); every 7th is 0 so masks and comparisons see both sides. */
static void *tf_fill(kern_dtype dt, int64_t n, double lo, double hi) {
    void *p = malloc((size_t)(n > 0 ? n : 1) * 8);
    for (int64_t i = 0; i < n; i++)
        tf_set(dt, p, i,
               i % 7 == 3       ? 0
               : dt == KERN_I64 ? floor(tf_rand(lo, hi))
                                : tf_rand(lo, hi));
    return p;
}

/* Elements a view of `shape` with `st` reaches: the buffer it needs. */
static int64_t tf_span(int nd, const int64_t *shape, const int64_t *st) {
    int64_t hi = 0;
    for (int d = 0; d < nd; d++) {
        if (shape[d] == 0)
            return 1;
        hi += (shape[d] - 1) * st[d];
    }
    return hi + 1;
}

static int64_t tf_numel(int nd, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= shape[d];
    return n;
}

static void tf_contig(int nd, const int64_t *shape, int64_t *st) {
    int64_t c = 1;
    for (int d = nd - 1; d >= 0; d--) {
        st[d] = c;
        c *= shape[d];
    }
}

/* Offset of row-major index i in a view with strides st. */
static int64_t tf_off(int nd, const int64_t *shape, const int64_t *st, int64_t i) {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        off += i % shape[d] * st[d];
        i /= shape[d];
    }
    return off;
}

static kern_fused_prog tf_prog(kern_dtype dt, int n_inputs) {
    kern_fused_prog p;
    memset(&p, 0, sizeof p);
    p.n_inputs = n_inputs;
    for (int r = 0; r < KERN_FUSED_MAX_INPUTS; r++)
        p.in_dt[r] = dt;
    return p;
}

static int tf_add(kern_fused_prog *p, kern_pw_op op, int a, int b, int c, double p0, double p1) {
    p->instr[p->n_instr] = (kern_fused_instr){op, (uint8_t)a, (uint8_t)b, (uint8_t)c, p0, p1};
    return p->n_inputs + p->n_instr++;
}

static void tf_out(kern_fused_prog *p, int reg) {
    p->out_reg[p->n_outputs++] = (uint8_t)reg;
}

/* The program op by op: every register a contiguous full-size buffer made by
 * cai_kern_pointwise. Returns the buffers (caller frees with tf_regs_free). */
static void **tf_reference(const kern_fused_prog *p, kern_dtype dt, int nd, const int64_t *shape,
                           const kern_src *in) {
    int nreg = p->n_inputs + p->n_instr;
    int64_t n = tf_numel(nd, shape), cst[KERN_MAX_DIMS];
    tf_contig(nd, shape, cst);
    void **reg = calloc((size_t)nreg, sizeof(void *));
    for (int k = 0; k < p->n_instr; k++) {
        const kern_fused_instr *ins = &p->instr[k];
        const int r[3] = {ins->a, ins->b, ins->c};
        kern_src src[3];
        memset(src, 0, sizeof src);
        kern_dtype cond_dt = dt;
        for (int i = 0; i < 3 && i < cai_kern_pw_arity(ins->op); i++) {
            if (r[i] < p->n_inputs) {
                src[i] = in[r[i]];
                bool cond =
                    (ins->op == KPW_WHERE && i == 0) || (ins->op == KPW_MASKED_FILL && i == 1);
                if (cond)
                    cond_dt = p->in_dt[r[i]];
            } else {
                src[i].data = reg[r[i]];
                memcpy(src[i].strides, cst, sizeof cst);
            }
        }
        reg[p->n_inputs + k] = malloc((size_t)(n > 0 ? n : 1) * 8);
        int rc = cai_kern_pointwise(ins->op, dt, cond_dt, nd, shape, reg[p->n_inputs + k], cst, src,
                                    ins->p0, ins->p1);
        cr_assert_eq(rc, 0, "reference op %s", cai_kern_pw_name(ins->op));
    }
    return reg;
}

static void tf_regs_free(void **reg, int nreg) {
    for (int k = 0; k < nreg; k++)
        free(reg[k]);
    free(reg);
}

/* Bitwise: output k of the fused run (strides ost[k]) against register out_reg[k]. */
static void tf_assert_same(const kern_fused_prog *p, kern_dtype dt, int nd, const int64_t *shape,
                           const kern_src *in, void **ref, void *const *out,
                           const int64_t *const *ost, const char *what) {
    int64_t n = tf_numel(nd, shape), esz = (int64_t)cai_kern_dtype_size(dt), cst[KERN_MAX_DIMS];
    tf_contig(nd, shape, cst);
    for (int k = 0; k < p->n_outputs; k++) {
        int r = p->out_reg[k];
        for (int64_t i = 0; i < n; i++) {
            const char *want = r < p->n_inputs ? (const char *)in[r].data +
                                                     tf_off(nd, shape, in[r].strides, i) * esz
                                               : (const char *)ref[r] + i * esz;
            const char *got = (const char *)out[k] + tf_off(nd, shape, ost[k], i) * esz;
            cr_assert(memcmp(want, got, (size_t)esz) == 0,
                      "%s: output %d element %lld: got %.17g want %.17g", what, k, (long long)i,
                      tf_get(dt, got, 0), tf_get(dt, want, 0));
        }
    }
}

/* When set, tf_check_run runs through this memo (cai_kern_fused_run_memo). */
static kern_fused_memo *tf_memo;

/* Runs p fused and op by op; outputs are fresh buffers with strides ost (NULL: contiguous). */
static void tf_check_run(const kern_fused_prog *p, kern_dtype dt, int nd, const int64_t *shape,
                         const kern_src *in, const int64_t (*ost)[KERN_MAX_DIMS],
                         const char *what) {
    void *out[KERN_FUSED_MAX_OUTPUTS];
    const int64_t *osp[KERN_FUSED_MAX_OUTPUTS];
    int64_t cst[KERN_MAX_DIMS];
    tf_contig(nd, shape, cst);
    for (int k = 0; k < p->n_outputs; k++) {
        osp[k] = ost ? ost[k] : cst;
        int64_t span = tf_span(nd, shape, osp[k]);
        out[k] = malloc((size_t)span * 8);
        memset(out[k], 0xA5, (size_t)span * 8);
    }
    int rc = tf_memo ? cai_kern_fused_run_memo(p, dt, nd, shape, in, out, osp, NULL, 0, tf_memo)
                     : cai_kern_fused_run(p, dt, nd, shape, in, out, osp);
    cr_assert_eq(rc, 0, "%s", what);
    void **ref = tf_reference(p, dt, nd, shape, in);
    tf_assert_same(p, dt, nd, shape, in, ref, out, osp, what);
    tf_regs_free(ref, p->n_inputs + p->n_instr);
    for (int k = 0; k < p->n_outputs; k++)
        free(out[k]);
}

/* Distance in units in the last place; NaN matches NaN. */
static double tf_ulps(kern_dtype dt, double got, double want) {
    if (isnan(got) || isnan(want))
        return isnan(got) && isnan(want) ? 0 : INFINITY;
    if (got == want)
        return 0;
    double ulp = dt == KERN_F32 ? fabs(nextafterf((float)want, INFINITY) - (float)want)
                                : fabs(nextafter(want, INFINITY) - want);
    return fabs(got - want) / ulp;
}

/* ------------------------------------------------------------------ layouts */

typedef struct {
    const char *name;
    int nd;
    int64_t shape[3];
    int64_t st[3][3]; /* inputs 0..2 */
    int64_t ost[3];
} tf_layout;

static const tf_layout tf_layouts[] = {
    {"contiguous", 2, {37, 150}, {{150, 1}, {150, 1}, {150, 1}}, {150, 1}},
    {"broadcast", 2, {37, 150}, {{150, 1}, {0, 1}, {1, 0}}, {150, 1}},
    {"transposed", 2, {37, 150}, {{1, 37}, {150, 1}, {0, 0}}, {1, 37}},
    {"long_rows", 2, {3, 2500}, {{2500, 1}, {0, 1}, {1, 0}}, {2500, 1}},
    {"permuted3d", 3, {4, 5, 130}, {{1, 4, 20}, {650, 130, 1}, {0, 130, 1}}, {650, 130, 1}},
    {"strided1d", 1, {999}, {{2}, {3}, {1}}, {2}},
};
#define TF_NLAYOUTS (int)(sizeof tf_layouts / sizeof tf_layouts[0])

typedef struct {
    void *buf[3];
    kern_src src[3];
} tf_inputs;

static void tf_inputs_make(tf_inputs *t, kern_dtype dt, const tf_layout *l, double lo, double hi) {
    for (int k = 0; k < 3; k++) {
        int64_t span = tf_span(l->nd, l->shape, l->st[k]);
        t->buf[k] = tf_fill(dt, span, lo, hi);
        t->src[k].data = t->buf[k];
        memset(t->src[k].strides, 0, sizeof t->src[k].strides);
        memcpy(t->src[k].strides, l->st[k], sizeof l->st[k]);
    }
    /* b equals a in places, so ties (EQ, MAXMIN_BW) happen */
    int64_t na = tf_span(l->nd, l->shape, l->st[0]), nb = tf_span(l->nd, l->shape, l->st[1]);
    for (int64_t i = 0; i < 40 && i * 5 < na && i * 5 < nb; i++)
        memcpy((char *)t->buf[1] + i * (int64_t)cai_kern_dtype_size(dt) * 5,
               (char *)t->buf[0] + i * (int64_t)cai_kern_dtype_size(dt) * 5,
               cai_kern_dtype_size(dt));
}

static void tf_inputs_free(tf_inputs *t) {
    for (int k = 0; k < 3; k++)
        free(t->buf[k]);
}

/* Parameters that exercise each op's interesting path. */
static void tf_params(kern_pw_op op, double *p0, double *p1) {
    *p0 = 0.75;
    *p1 = 0.25;
    switch (op) {
    case KPW_CLAMP:
    case KPW_CLAMP_BW: *p0 = -0.5, *p1 = 0.7; break;
    case KPW_SOFTPLUS:
    case KPW_SOFTPLUS_BW: *p0 = 1.5, *p1 = 2; break;
    case KPW_POW_S: *p0 = 3; break;
    case KPW_POW_S_BW: *p0 = 2.5; break;
    case KPW_RPOW_S: *p0 = 1.3; break;
    case KPW_ADD:
    case KPW_SUB: *p0 = 0.5; break;
    case KPW_FILL: *p0 = 3.25; break;
    case KPW_MASKED_FILL: *p0 = -7; break;
    default: break;
    }
}

/* Every op as a one-instruction program, on every layout, with the layout's output strides. */
static void tf_every_op(kern_dtype dt) {
    char what[128];
    for (int li = 0; li < TF_NLAYOUTS; li++) {
        const tf_layout *l = &tf_layouts[li];
        tf_rng = 100 + (uint64_t)li;
        tf_inputs t;
        tf_inputs_make(&t, dt, l, -2, 2);
        int64_t ost[1][KERN_MAX_DIMS] = {{0}};
        memcpy(ost[0], l->ost, sizeof l->ost);
        for (int op = 0; op < KPW__COUNT; op++) {
            double p0, p1;
            tf_params((kern_pw_op)op, &p0, &p1);
            kern_fused_prog p = tf_prog(dt, 3);
            tf_out(&p, tf_add(&p, (kern_pw_op)op, 0, 1, 2, p0, p1));
            snprintf(what, sizeof what, "%s on %s, dt %d", cai_kern_pw_name((kern_pw_op)op),
                     l->name, (int)dt);
            tf_check_run(&p, dt, l->nd, l->shape, t.src, ost, what);
        }
        tf_inputs_free(&t);
    }
}

/* ------------------------------------------------------------------ programs */

/* gelu_tanh's backward written out op by op: g * (0.5 * (1 + t) + 0.5 x (1 - t^2) k (1 + 3
 * kappa x^2)), t = tanh(k (x + kappa x^3)); outputs the gradient and t. */
static kern_fused_prog tf_gelu_bw_prog(kern_dtype dt) {
    const double k = 0.7978845608028654, kap = 0.044715;
    kern_fused_prog p = tf_prog(dt, 2); /* 0: g, 1: x */
    int x2 = tf_add(&p, KPW_SQUARE, 1, 0, 0, 0, 0);
    int x3 = tf_add(&p, KPW_MUL, x2, 1, 0, 0, 0);
    int in = tf_add(&p, KPW_ADD, 1, x3, 0, kap, 0);
    int t = tf_add(&p, KPW_TANH, tf_add(&p, KPW_MUL_S, in, 0, 0, k, 0), 0, 0, 0, 0);
    int left = tf_add(&p, KPW_MUL_S, tf_add(&p, KPW_ADD_S, t, 0, 0, 1, 0), 0, 0, 0.5, 0);
    int omt = tf_add(&p, KPW_RSUB_S, tf_add(&p, KPW_SQUARE, t, 0, 0, 0, 0), 0, 0, 1, 0);
    int dinner = tf_add(&p, KPW_MUL_S, tf_add(&p, KPW_MUL_S, x2, 0, 0, 3 * kap, 0), 0, 0, 1, 0);
    dinner = tf_add(&p, KPW_MUL_S, tf_add(&p, KPW_ADD_S, dinner, 0, 0, 1, 0), 0, 0, k, 0);
    int right = tf_add(&p, KPW_MUL, tf_add(&p, KPW_MUL_S, 1, 0, 0, 0.5, 0), omt, 0, 0, 0);
    right = tf_add(&p, KPW_MUL, right, dinner, 0, 0, 0);
    int grad = tf_add(&p, KPW_MUL, 0, tf_add(&p, KPW_ADD, left, right, 0, 1, 0), 0, 0, 0);
    tf_out(&p, grad);
    tf_out(&p, t);
    return p;
}

/* Ops a random chain draws from: values stay mostly finite. */
static const struct {
    kern_pw_op op;
    double p0, p1;
} tf_chain_ops[] = {
    {KPW_TANH, 0, 0},         {KPW_SIGMOID, 0, 0},     {KPW_SIN, 0, 0},
    {KPW_COS, 0, 0},          {KPW_MUL, 0, 0},         {KPW_ADD, 1, 0},
    {KPW_SUB, 0.5, 0},        {KPW_MUL_S, 0.9, 0},     {KPW_ADD_S, -0.3, 0},
    {KPW_CLAMP, -1, 1},       {KPW_GELU, 0, 0},        {KPW_SILU, 0, 0},
    {KPW_WHERE, 0, 0},        {KPW_MAXMIN_BW, 0, 0},   {KPW_MASKED_FILL, 0.5, 0},
    {KPW_RELU_BW, 0, 0},      {KPW_TANH_BW, 0, 0},     {KPW_SIGMOID_BW, 0, 0},
    {KPW_GELU_BW, 0, 0},      {KPW_ABS, 0, 0},         {KPW_EXP, 0, 0},
    {KPW_LOG, 0, 0},          {KPW_SQRT, 0, 0},        {KPW_SQUARE, 0, 0},
    {KPW_MAX, 0, 0},          {KPW_MIN, 0, 0},         {KPW_GT, 0, 0},
    {KPW_LEAKY_RELU, 0.1, 0}, {KPW_SOFTPLUS, 1, 20},   {KPW_POW_S_BW, 1.5, 0},
    {KPW_DIV, 0, 0},          {KPW_POW_BW_BASE, 0, 0}, {KPW_FILL, 0.25, 0},
};
#define TF_NCHAIN (int)(sizeof tf_chain_ops / sizeof tf_chain_ops[0])

/* n random instructions over n_in inputs; outputs: the last register, a few random ones
 * (dead ends included, so some instructions are dropped) and, if asked, an input. */
static kern_fused_prog tf_random_prog(kern_dtype dt, int n_in, int n, int n_out, uint64_t seed) {
    kern_fused_prog p = tf_prog(dt, n_in);
    tf_rng = seed;
    for (int k = 0; k < n; k++) {
        int t = (int)tf_rand(0, TF_NCHAIN), have = n_in + k;
        /* mostly the newest registers, so the chain is deep, sometimes old ones */
        int a = have - 1 - (int)tf_rand(0, have < 3 ? have : 3);
        int b = (int)tf_rand(0, have), c = (int)tf_rand(0, have);
        tf_add(&p, tf_chain_ops[t].op, a, b, c, tf_chain_ops[t].p0, tf_chain_ops[t].p1);
    }
    tf_out(&p, n_in + n - 1);
    for (int k = 1; k < n_out; k++)
        tf_out(&p, (int)tf_rand(0, n_in + n));
    return p;
}

/* ------------------------------------------------------------------ run tests */

Test(fused, every_op_matches_pointwise_f32) {
    tf_every_op(KERN_F32);
}

Test(fused, every_op_matches_pointwise_f64) {
    tf_every_op(KERN_F64);
}

Test(fused, gelu_backward_chain) {
    char what[96];
    for (int dt = 0; dt < 2; dt++)
        for (int li = 0; li < TF_NLAYOUTS; li++) {
            const tf_layout *l = &tf_layouts[li];
            tf_rng = 7;
            tf_inputs t;
            tf_inputs_make(&t, (kern_dtype)dt, l, -3, 3);
            kern_fused_prog p = tf_gelu_bw_prog((kern_dtype)dt);
            snprintf(what, sizeof what, "gelu bw on %s dt %d", l->name, dt);
            tf_check_run(&p, (kern_dtype)dt, l->nd, l->shape, t.src, NULL, what);
            /* and against the library's own fused GELU_TANH_BW, within rounding */
            int64_t n = tf_numel(l->nd, l->shape), cst[KERN_MAX_DIMS];
            tf_contig(l->nd, l->shape, cst);
            void *a = malloc((size_t)n * 8), *b = malloc((size_t)n * 8),
                 *tt = malloc((size_t)n * 8);
            void *outs[2] = {a, tt};
            const int64_t *osp[2] = {cst, cst};
            cr_assert_eq(cai_kern_fused_run(&p, (kern_dtype)dt, l->nd, l->shape, t.src, outs, osp),
                         0);
            cr_assert_eq(cai_kern_pointwise(KPW_GELU_TANH_BW, (kern_dtype)dt, (kern_dtype)dt, l->nd,
                                            l->shape, b, cst, t.src, 0, 0),
                         0);
            for (int64_t i = 0; i < n; i++) {
                double x = tf_get((kern_dtype)dt, a, i), y = tf_get((kern_dtype)dt, b, i);
                cr_assert(fabs(x - y) <= 1e-5 * (1 + fabs(y)), "%s [%lld]: %g vs %g", what,
                          (long long)i, x, y);
            }
            free(a), free(b), free(tt);
            tf_inputs_free(&t);
        }
}

/* 50 random instructions over inputs of mixed layouts, four outputs, some strided. */
Test(fused, random_chain_50) {
    char what[96];
    for (int dt = 0; dt < 2; dt++)
        for (int li = 0; li < TF_NLAYOUTS; li++)
            for (uint64_t seed = 1; seed <= 3; seed++) {
                const tf_layout *l = &tf_layouts[li];
                tf_rng = seed * 31;
                tf_inputs t;
                tf_inputs_make(&t, (kern_dtype)dt, l, -1.5, 1.5);
                kern_fused_prog p = tf_random_prog((kern_dtype)dt, 3, 50, 4, seed);
                int64_t ost[4][KERN_MAX_DIMS] = {{0}};
                for (int k = 0; k < 4; k++)
                    tf_contig(l->nd, l->shape, ost[k]);
                memcpy(ost[1], l->ost, sizeof l->ost);
                snprintf(what, sizeof what, "chain seed %d on %s dt %d", (int)seed, l->name, dt);
                tf_check_run(&p, (kern_dtype)dt, l->nd, l->shape, t.src, ost, what);
                tf_inputs_free(&t);
            }
}

/* One memo through every random chain and layout, each run twice with fresh inputs: the
 * second run reuses the plan and must read the new operands; a new program, layout or
 * dtype (the program reuses the same memory) must be planned afresh. */
Test(fused, memo_reuses_a_plan_only_for_the_same_program_and_layout) {
    tf_memo = calloc(1, cai_kern_fused_memo_bytes());
    char what[96];
    for (int dt = 0; dt < 2; dt++)
        for (int li = 0; li < TF_NLAYOUTS; li++)
            for (uint64_t seed = 1; seed <= 2; seed++) {
                const tf_layout *l = &tf_layouts[li];
                kern_fused_prog p = tf_random_prog((kern_dtype)dt, 3, 30, 3, seed);
                int64_t ost[3][KERN_MAX_DIMS] = {{0}};
                for (int k = 0; k < 3; k++)
                    tf_contig(l->nd, l->shape, ost[k]);
                memcpy(ost[2], l->ost, sizeof l->ost);
                tf_inputs t[2]; /* both alive: the second run's inputs are elsewhere */
                for (int rep = 0; rep < 2; rep++) {
                    tf_rng = seed * 131 + (uint64_t)rep;
                    tf_inputs_make(&t[rep], (kern_dtype)dt, l, -1.5, 1.5);
                    snprintf(what, sizeof what, "memo seed %d rep %d on %s dt %d", (int)seed, rep,
                             l->name, dt);
                    tf_check_run(&p, (kern_dtype)dt, l->nd, l->shape, t[rep].src, ost, what);
                }
                tf_inputs_free(&t[0]);
                tf_inputs_free(&t[1]);
            }
    free(tf_memo);
    tf_memo = NULL;
}

/* A remembered plan computes an output in place only while no input overlaps it: an
 * output over input 0 (read again after it is written) needs a tile buffer, and the next
 * call with separate memory may go back to writing in place. */
Test(fused, memo_rechecks_outputs_over_inputs_each_call) {
    const tf_layout *l = &tf_layouts[0];
    int64_t n = tf_numel(l->nd, l->shape);
    size_t bytes = (size_t)n * sizeof(float);
    kern_fused_memo *memo = calloc(1, cai_kern_fused_memo_bytes());
    kern_fused_prog r = tf_prog(KERN_F32, 2);
    int x2 = tf_add(&r, KPW_MUL_S, 0, 0, 0, 2, 0);
    tf_out(&r, x2);
    tf_out(&r, tf_add(&r, KPW_ADD, 0, x2, 0, 1, 0)); /* 3x */
    const int64_t *cst2[2] = {l->ost, l->ost};
    for (int call = 0; call < 4; call++) {
        tf_rng = 11 + (uint64_t)call;
        tf_inputs t;
        tf_inputs_make(&t, KERN_F32, l, -1, 1);
        float *x0 = malloc(bytes), *a = malloc(bytes), *b = malloc(bytes);
        memcpy(x0, t.buf[0], bytes);
        bool over = call % 2 == 1; /* calls 1 and 3 write output 0 over x */
        void *out[2] = {over ? t.buf[0] : a, b};
        cr_assert_eq(
            cai_kern_fused_run_memo(&r, KERN_F32, l->nd, l->shape, t.src, out, cst2, NULL, 0, memo),
            0);
        for (int64_t i = 0; i < n; i++) {
            cr_assert_eq(b[i], (float)(3.0 * x0[i]), "call %d element %lld", call, (long long)i);
            cr_assert_eq(((float *)out[0])[i], 2 * x0[i], "call %d element %lld", call,
                         (long long)i);
        }
        free(x0), free(a), free(b);
        tf_inputs_free(&t);
    }
    free(memo);
}

/* Outputs: an input register, one register twice, a strided view, and an in-place update
 * (the output is input 0's own memory). */
Test(fused, several_outputs_and_in_place) {
    const tf_layout *l = &tf_layouts[0];
    int64_t n = tf_numel(l->nd, l->shape);
    for (int dt = 0; dt < 2; dt++) {
        tf_rng = 3;
        tf_inputs t;
        tf_inputs_make(&t, (kern_dtype)dt, l, -1, 1);
        kern_fused_prog p = tf_prog((kern_dtype)dt, 2);
        int e = tf_add(&p, KPW_EXP, 0, 0, 0, 0, 0);
        int m = tf_add(&p, KPW_MUL, e, 1, 0, 0, 0);
        tf_out(&p, m);
        tf_out(&p, 1);
        tf_out(&p, m);
        tf_out(&p, e);
        int64_t ost[4][KERN_MAX_DIMS] = {{150, 1}, {150, 1}, {1, 37}, {300, 2}};
        tf_check_run(&p, (kern_dtype)dt, l->nd, l->shape, t.src, ost, "four outputs");
        /* in place: x = x * sigmoid(x) + y, written over x */
        size_t bytes = (size_t)n * cai_kern_dtype_size((kern_dtype)dt);
        void *x0 = malloc(bytes), *ref = malloc(bytes);
        memcpy(x0, t.buf[0], bytes);
        kern_fused_prog q = tf_prog((kern_dtype)dt, 2);
        int s = tf_add(&q, KPW_SIGMOID, 0, 0, 0, 0, 0);
        tf_out(&q, tf_add(&q, KPW_ADD, tf_add(&q, KPW_MUL, 0, s, 0, 0, 0), 1, 0, 1, 0));
        void *out1[1] = {ref};
        const int64_t *cst[1] = {l->ost};
        cr_assert_eq(cai_kern_fused_run(&q, (kern_dtype)dt, l->nd, l->shape, t.src, out1, cst), 0);
        void *out2[1] = {t.buf[0]};
        cr_assert_eq(cai_kern_fused_run(&q, (kern_dtype)dt, l->nd, l->shape, t.src, out2, cst), 0);
        cr_assert(memcmp(ref, t.buf[0], bytes) == 0, "in-place update differs");
        cr_assert(memcmp(ref, x0, bytes) != 0);
        /* the output over x is computed first, and x is read again afterwards */
        memcpy(t.buf[0], x0, bytes);
        kern_fused_prog r = tf_prog((kern_dtype)dt, 2);
        int x2 = tf_add(&r, KPW_MUL_S, 0, 0, 0, 2, 0);
        tf_out(&r, x2);
        tf_out(&r, tf_add(&r, KPW_ADD, 0, x2, 0, 1, 0)); /* 3x */
        void *other = malloc(bytes);
        void *out3[2] = {t.buf[0], other};
        const int64_t *cst2[2] = {l->ost, l->ost};
        cr_assert_eq(cai_kern_fused_run(&r, (kern_dtype)dt, l->nd, l->shape, t.src, out3, cst2), 0);
        for (int64_t i = 0; i < n; i++) {
            double want = 3 * tf_get((kern_dtype)dt, x0, i); /* x + 2x rounds like 3x */
            if (dt == KERN_F32)
                want = (float)want;
            cr_assert_eq(tf_get((kern_dtype)dt, other, i), want,
                         "x read after the output over it was written");
        }
        free(x0), free(ref), free(other);
        tf_inputs_free(&t);
    }
}

/* Views with negative strides (reversed): inputs read backwards, an output written so. */
Test(fused, negative_strides) {
    enum { R = 30, C = 77 };
    int64_t shape[2] = {R, C}, n = R * C;
    tf_rng = 13;
    for (int dt = 0; dt < 2; dt++) {
        size_t esz = cai_kern_dtype_size((kern_dtype)dt);
        char *a = tf_fill((kern_dtype)dt, n, -1, 1), *b = tf_fill((kern_dtype)dt, C, -1, 1);
        /* a flipped along both dims, b reversed and broadcast down the rows */
        kern_src in[2] = {{a + (size_t)(n - 1) * esz, {-C, -1}},
                          {b + (size_t)(C - 1) * esz, {0, -1}}};
        kern_fused_prog p = tf_prog((kern_dtype)dt, 2);
        int e = tf_add(&p, KPW_MUL, tf_add(&p, KPW_SIN, 0, 0, 0, 0, 0), 1, 0, 0, 0);
        tf_out(&p, e);
        tf_out(&p, tf_add(&p, KPW_SUB, e, 0, 0, 1, 0));
        void **ref = tf_reference(&p, (kern_dtype)dt, 2, shape, in);
        char *o0 = malloc((size_t)n * esz), *o1 = malloc((size_t)n * esz);
        void *out[2] = {o0 + (size_t)(n - 1) * esz, o1}; /* output 0 reversed */
        int64_t rst[2] = {-C, -1}, cst[2] = {C, 1};
        const int64_t *os[2] = {rst, cst};
        cr_assert_eq(cai_kern_fused_run(&p, (kern_dtype)dt, 2, shape, in, out, os), 0);
        tf_assert_same(&p, (kern_dtype)dt, 2, shape, in, ref, out, os, "negative strides");
        tf_regs_free(ref, p.n_inputs + p.n_instr);
        free(a), free(b), free(o0), free(o1);
    }
}

/* A where's cond and a masked_fill's mask in int64 / another float dtype: contiguous,
 * broadcast, transposed and splat masks. */
Test(fused, cond_of_other_dtype) {
    const kern_dtype pair[4][2] = {
        {KERN_F32, KERN_I64}, {KERN_F32, KERN_F64}, {KERN_F64, KERN_F32}, {KERN_I64, KERN_F64}};
    char what[96];
    for (int ci = 0; ci < 4; ci++)
        for (int li = 0; li < TF_NLAYOUTS; li++) {
            const tf_layout *l = &tf_layouts[li];
            kern_dtype dt = pair[ci][0], cdt = pair[ci][1];
            tf_rng = 11 + (uint64_t)li;
            tf_inputs t;
            tf_inputs_make(&t, dt, l, -100, 100);
            /* input 2 becomes the mask, of dtype cdt, values in {-2..1} (0 often) */
            free(t.buf[2]);
            t.buf[2] = tf_fill(cdt, tf_span(l->nd, l->shape, l->st[2]), -2, 2);
            t.src[2].data = t.buf[2];
            kern_fused_prog p = tf_prog(dt, 3);
            p.in_dt[2] = cdt;
            int w = tf_add(&p, KPW_WHERE, 2, 0, 1, 0, 0);
            int mf = tf_add(&p, KPW_MASKED_FILL, w, 2, 0, 9.5, 0);
            tf_out(&p, tf_add(&p, KPW_MUL, mf, 0, 0, 0, 0));
            tf_out(&p, w);
            snprintf(what, sizeof what, "dt %d, cond dt %d on %s", (int)dt, (int)cdt, l->name);
            tf_check_run(&p, dt, l->nd, l->shape, t.src, NULL, what);
            /* the mask may not feed anything else, nor be an output */
            kern_fused_prog bad = p;
            bad.instr[2].b = 2;
            void *o[2] = {NULL, NULL};
            const int64_t *os[2] = {l->ost, l->ost};
            cr_assert_eq(cai_kern_fused_run(&bad, dt, l->nd, l->shape, t.src, o, os), -1);
            bad = p;
            bad.out_reg[1] = 2;
            cr_assert_eq(cai_kern_fused_run(&bad, dt, l->nd, l->shape, t.src, o, os), -1);
            tf_inputs_free(&t);
        }
}

Test(fused, int64_programs) {
    const tf_layout *l = &tf_layouts[1];
    tf_rng = 5;
    tf_inputs t;
    tf_inputs_make(&t, KERN_I64, l, -1000, 1000);
    kern_fused_prog p = tf_prog(KERN_I64, 3);
    int a = tf_add(&p, KPW_ADD, 0, 1, 0, 3, 0);
    int b = tf_add(&p, KPW_MUL, a, 2, 0, 0, 0);
    int c = tf_add(&p, KPW_WHERE, tf_add(&p, KPW_GT_S, b, 0, 0, 10.5, 0), b, 0, 0, 0);
    int d = tf_add(&p, KPW_MAX, tf_add(&p, KPW_ABS, c, 0, 0, 0, 0),
                   tf_add(&p, KPW_NEG, 1, 0, 0, 0, 0), 0, 0, 0);
    int e = tf_add(&p, KPW_SQUARE, tf_add(&p, KPW_RSUB_S, d, 0, 0, 7, 0), 0, 0, 0, 0);
    tf_out(&p, tf_add(&p, KPW_MASKED_FILL, e, 1, 0, -1, 0));
    tf_out(&p, tf_add(&p, KPW_SIGN, b, 0, 0, 0, 0));
    tf_check_run(&p, KERN_I64, l->nd, l->shape, t.src, NULL, "int64 chain");
    /* wrapping, as cai_kern_pointwise */
    int64_t big = INT64_MAX, res = 0, one = 1, st0 = 0;
    kern_src s = {&big, {0}};
    kern_fused_prog q = tf_prog(KERN_I64, 1);
    tf_out(&q, tf_add(&q, KPW_ADD_S, 0, 0, 0, 1, 0));
    void *o[1] = {&res};
    const int64_t *os[1] = {&st0};
    cr_assert_eq(cai_kern_fused_run(&q, KERN_I64, 1, &one, &s, o, os), 0);
    cr_assert_eq(res, INT64_MIN);
    /* float-only ops are refused */
    q.instr[0].op = KPW_EXP;
    cr_assert_eq(cai_kern_fused_run(&q, KERN_I64, 1, &one, &s, o, os), -1);
    q.instr[0].op = KPW_GELU_BW;
    cr_assert_eq(cai_kern_fused_run(&q, KERN_I64, 1, &one, &s, o, os), -1);
    tf_inputs_free(&t);
}

/* On each ISA path the fused run equals that path's op-by-op result, and the vector paths
 * stay close to the scalar one. */
Test(fused, isa_paths_agree) {
    int top = cai_kern_isa();
    const tf_layout *l = &tf_layouts[1];
    char what[96];
    for (int dt = 0; dt < 2; dt++) {
        tf_rng = 17;
        tf_inputs t;
        tf_inputs_make(&t, (kern_dtype)dt, l, -3, 3);
        kern_fused_prog p = tf_gelu_bw_prog((kern_dtype)dt);
        kern_fused_prog q = tf_random_prog((kern_dtype)dt, 3, 40, 2, 99);
        int64_t n = tf_numel(l->nd, l->shape), cst[KERN_MAX_DIMS];
        tf_contig(l->nd, l->shape, cst);
        double *base = malloc(sizeof(double) * (size_t)n);
        void *o = malloc((size_t)n * 8), *o2 = malloc((size_t)n * 8);
        void *outs[2] = {o, o2};
        const int64_t *osp[2] = {cst, cst};
        for (int isa = 0; isa <= top; isa++) {
            cr_assert_eq(cai_kern_isa_set((kern_isa_level)isa), isa);
            snprintf(what, sizeof what, "%s dt %d", cai_kern_isa_name((kern_isa_level)isa), dt);
            tf_check_run(&p, (kern_dtype)dt, l->nd, l->shape, t.src, NULL, what);
            tf_check_run(&q, (kern_dtype)dt, l->nd, l->shape, t.src, NULL, what);
            cr_assert_eq(cai_kern_fused_run(&p, (kern_dtype)dt, l->nd, l->shape, t.src, outs, osp),
                         0);
            for (int64_t i = 0; i < n; i++) {
                double v = tf_get((kern_dtype)dt, o, i);
                if (isa == 0)
                    base[i] = v;
                else
                    cr_assert(fabs(v - base[i]) <= 1e-5 * (1 + fabs(base[i])),
                              "%s [%lld]: %g vs scalar %g", what, (long long)i, v, base[i]);
            }
        }
        cai_kern_isa_set((kern_isa_level)top);
        free(base), free(o), free(o2);
        tf_inputs_free(&t);
    }
}

/* ------------------------------------------------------------------ reductions */

/* cai_kern_fused_reduce against cai_kern_pointwise + cai_kern_reduce: within maxulp ulps (float).
 */
static void tf_check_reduce(const kern_fused_prog *p, kern_dtype dt, int nd, const int64_t *shape,
                            const kern_src *in, kern_red_op red, uint32_t rmask, double maxulp,
                            const char *what) {
    int64_t n = tf_numel(nd, shape), O = 1, cst[KERN_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        if (!(rmask >> d & 1))
            O *= shape[d];
    tf_contig(nd, shape, cst);
    void **reg = tf_reference(p, dt, nd, shape, in);
    int r = p->out_reg[0];
    const void *vals = r < p->n_inputs ? NULL : reg[r];
    void *tmp = NULL;
    if (!vals) { /* an input register: materialise it */
        kern_src s = in[r];
        tmp = malloc((size_t)(n > 0 ? n : 1) * 8);
        cr_assert_eq(cai_kern_pointwise(KPW_COPY, dt, dt, nd, shape, tmp, cst, &s, 0, 0), 0);
        vals = tmp;
    }
    void *want = malloc((size_t)(O > 0 ? O : 1) * 8), *got = malloc((size_t)(O > 0 ? O : 1) * 8);
    int rc = cai_kern_reduce(red, dt, nd, shape, vals, cst, rmask, want, NULL);
    cr_assert_eq(cai_kern_fused_reduce(p, dt, nd, shape, in, red, rmask, got), rc, "%s", what);
    for (int64_t o = 0; rc == 0 && o < O; o++) {
        double g = tf_get(dt, got, o), w = tf_get(dt, want, o);
        double u = dt == KERN_I64 ? (g == w ? 0 : INFINITY) : tf_ulps(dt, g, w);
        cr_assert(u <= maxulp, "%s: output %lld: got %.17g want %.17g (%g ulps)", what,
                  (long long)o, g, w, u);
    }
    free(want), free(got), free(tmp);
    tf_regs_free(reg, p->n_inputs + p->n_instr);
}

/* A small chain for the reductions: y = tanh(a) * b + c (broadcast). */
static kern_fused_prog tf_red_prog(kern_dtype dt) {
    kern_fused_prog p = tf_prog(dt, 3);
    int t = tf_add(&p, KPW_TANH, 0, 0, 0, 0, 0);
    tf_out(&p, tf_add(&p, KPW_ADD, tf_add(&p, KPW_MUL, t, 1, 0, 0, 0), 2, 0, 1, 0));
    return p;
}

typedef struct {
    int nd;
    int64_t shape[4];
    uint32_t rmask;
    const char *name;
} tf_red_case;

static void tf_reduce_cases(const tf_red_case *cs, int ncase, const kern_red_op *ops, int nops,
                            double maxulp) {
    char what[128];
    for (int dt = 0; dt < 2; dt++)
        for (int ci = 0; ci < ncase; ci++) {
            const tf_red_case *c = &cs[ci];
            int64_t cst[4] = {0}, bst[4] = {0}, tst[4];
            tf_contig(c->nd, c->shape, cst);
            /* a contiguous, b broadcast along dim 0, c a transposed view of its first two dims */
            for (int d = 1; d < c->nd; d++)
                bst[d] = cst[d];
            memcpy(tst, cst, sizeof tst);
            if (c->nd >= 2) {
                int64_t rev[4] = {c->shape[1], c->shape[0], c->shape[2], c->shape[3]}, rst[4];
                tf_contig(c->nd, rev, rst);
                tst[0] = rst[1];
                tst[1] = rst[0];
            }
            const int64_t *st[3] = {cst, bst, tst};
            tf_rng = 41 + (uint64_t)ci;
            kern_src in[3];
            void *buf[3];
            for (int k = 0; k < 3; k++) {
                buf[k] = tf_fill((kern_dtype)dt, tf_span(c->nd, c->shape, st[k]), -2, 2);
                in[k].data = buf[k];
                memset(in[k].strides, 0, sizeof in[k].strides);
                memcpy(in[k].strides, st[k], sizeof(int64_t) * (size_t)c->nd);
            }
            kern_fused_prog p = tf_red_prog((kern_dtype)dt);
            for (int oi = 0; oi < nops; oi++) {
                snprintf(what, sizeof what, "%s op %d dt %d", c->name, (int)ops[oi], dt);
                tf_check_reduce(&p, (kern_dtype)dt, c->nd, c->shape, in, ops[oi], c->rmask, maxulp,
                                what);
            }
            for (int k = 0; k < 3; k++)
                free(buf[k]);
        }
}

static const kern_red_op tf_all_red[] = {KRED_SUM, KRED_MEAN, KRED_MAX, KRED_MIN, KRED_LOGSUMEXP};

/* Reducing the innermost dims: rows (layer_norm backward's row sums). */
Test(fused, reduce_row_sums) {
    const tf_red_case cs[] = {
        {2, {64, 768}, 2, "rows 64x768"},
        {2, {1000, 37}, 2, "short rows 1000x37"},
        {2, {3, 50000}, 2, "long rows 3x50000 (split)"},
        {3, {6, 20, 30}, 6, "two inner dims"},
    };
    tf_reduce_cases(cs, 4, tf_all_red, 5, 0); /* the same tree: the same bits */
}

/* Reducing outer dims over contiguous inner ones: column sums (a bias gradient). */
Test(fused, reduce_column_sums) {
    const tf_red_case cs[] = {
        {2, {4096, 64}, 1, "bias 4096x64"},          {2, {300, 1000}, 1, "wide 300x1000"},
        {3, {7, 400, 40}, 2, "middle dim"},          {3, {50, 3, 700}, 3, "two outer dims"},
        {2, {68, 100}, 1, "68 rows: a 17-row node"},
    };
    tf_reduce_cases(cs, 5, tf_all_red, 5, 0);
}

Test(fused, reduce_all_dims) {
    const tf_red_case cs[] = {
        {1, {100003}, 1, "1-d all"},
        {2, {513, 517}, 3, "2-d all"},
        {3, {3, 1, 5}, 7, "tiny all"},
    };
    tf_reduce_cases(cs, 3, tf_all_red, 5, 2);
}

Test(fused, reduce_general_masks) {
    const tf_red_case cs[] = {
        {3, {5, 6, 7}, 5, "dims 0,2"},        {4, {3, 4, 5, 6}, 10, "dims 1,3"},
        {4, {3, 4, 5, 6}, 5, "dims 0,2"},     {4, {2, 3, 4, 50}, 0, "no dim"},
        {3, {4, 1, 9}, 2, "size-1 dim only"},
    };
    tf_reduce_cases(cs, 5, tf_all_red, 5, 2);
}

/* NaN wins in max/min (inner and column), infinities in logsumexp; a reduction of an
 * input register alone; int64 reductions; empty spaces. */
Test(fused, reduce_special_values_and_int64) {
    for (int dt = 0; dt < 2; dt++) {
        int64_t shape[2] = {40, 300}, cst[2] = {300, 1};
        void *x = tf_fill((kern_dtype)dt, 12000, -1, 1);
        tf_set((kern_dtype)dt, x, 5 * 300 + 17, NAN);
        tf_set((kern_dtype)dt, x, 9 * 300 + 3, INFINITY);
        tf_set((kern_dtype)dt, x, 11 * 300 + 8, -INFINITY);
        kern_src in = {x, {300, 1}};
        (void)cst;
        kern_fused_prog p = tf_prog((kern_dtype)dt, 1);
        tf_out(&p, 0);
        for (uint32_t m = 1; m <= 3; m++)
            for (int op = 0; op < KRED__COUNT; op++)
                tf_check_reduce(&p, (kern_dtype)dt, 2, shape, &in, (kern_red_op)op, m, 2,
                                "special values");
        free(x);
    }
    /* int64: sum wraps, max and min exact; mean and logsumexp are refused */
    const tf_red_case cs[] = {
        {2, {50, 60}, 1, "cols"}, {2, {50, 60}, 2, "rows"}, {3, {4, 5, 6}, 5, "mixed"}};
    for (int ci = 0; ci < 3; ci++) {
        const tf_red_case *c = &cs[ci];
        int64_t cst[3], bst[3] = {0, 0, 0};
        tf_contig(c->nd, c->shape, cst);
        bst[c->nd - 1] = 1;
        tf_rng = 3;
        void *a = tf_fill(KERN_I64, tf_numel(c->nd, c->shape), -1e6, 1e6);
        void *b = tf_fill(KERN_I64, c->shape[c->nd - 1], -50, 50);
        kern_src in[2] = {{a, {0}}, {b, {0}}};
        memcpy(in[0].strides, cst, sizeof cst);
        memcpy(in[1].strides, bst, sizeof bst);
        kern_fused_prog p = tf_prog(KERN_I64, 2);
        tf_out(&p, tf_add(&p, KPW_MUL, tf_add(&p, KPW_ADD, 0, 1, 0, 1, 0), 1, 0, 0, 0));
        for (int op = 0; op < KRED__COUNT; op++)
            tf_check_reduce(&p, KERN_I64, c->nd, c->shape, in, (kern_red_op)op, c->rmask, 0,
                            c->name);
        int64_t o[64];
        cr_assert_eq(cai_kern_fused_reduce(&p, KERN_I64, c->nd, c->shape, in, KRED_MEAN, 1, o), -1);
        free(a), free(b);
    }
    /* empty: no output, or outputs over nothing */
    kern_fused_prog p = tf_prog(KERN_F32, 1);
    tf_out(&p, tf_add(&p, KPW_EXP, 0, 0, 0, 0, 0));
    int64_t sh[2] = {3, 0};
    float o[3] = {7, 7, 7};
    kern_src none = {NULL, {1, 1}};
    cr_assert_eq(cai_kern_fused_reduce(&p, KERN_F32, 2, sh, &none, KRED_SUM, 2, o), 0);
    cr_assert(o[0] == 0 && o[1] == 0 && o[2] == 0);
    cr_assert_eq(cai_kern_fused_reduce(&p, KERN_F32, 2, sh, &none, KRED_MEAN, 2, o), 0);
    cr_assert(isnan(o[0]) && isnan(o[2]));
    cr_assert_eq(cai_kern_fused_reduce(&p, KERN_F32, 2, sh, &none, KRED_MAX, 2, o), -1);
    cr_assert_eq(cai_kern_fused_reduce(&p, KERN_F32, 2, sh, &none, KRED_SUM, 1, o), 0);
}

/* ------------------------------------------------------------------ threads, errors */

/* Same bits with 1 and 2 threads: a big broadcast run, and reductions split into
 * segments (row, column and all-dims). */
Test(fused, threads_bitwise_equal) {
    int64_t shape[2] = {1024, 1000}, n = 1024 * 1000, cst[2] = {1000, 1};
    tf_rng = 23;
    void *a = tf_fill(KERN_F32, n, -2, 2), *b = tf_fill(KERN_F32, 1000, -2, 2);
    void *c = tf_fill(KERN_F32, n, -2, 2);
    kern_src in[3] = {{a, {1000, 1}}, {b, {0, 1}}, {c, {1, 1024}}};
    kern_fused_prog p = tf_random_prog(KERN_F32, 3, 30, 3, 5);
    void *o1[3], *o2[3];
    const int64_t *os[3] = {cst, cst, cst};
    for (int k = 0; k < 3; k++) {
        o1[k] = malloc((size_t)n * 4);
        o2[k] = malloc((size_t)n * 4);
    }
    cai_kern_set_num_threads(1);
    cr_assert_eq(cai_kern_fused_run(&p, KERN_F32, 2, shape, in, o1, os), 0);
    cai_kern_set_num_threads(2);
    cr_assert_eq(cai_kern_fused_run(&p, KERN_F32, 2, shape, in, o2, os), 0);
    for (int k = 0; k < 3; k++)
        cr_assert(memcmp(o1[k], o2[k], (size_t)n * 4) == 0, "run output %d", k);
    kern_fused_prog q = tf_red_prog(KERN_F32);
    int64_t big[1] = {n};
    kern_src flat[3] = {{a, {1}}, {c, {1}}, {b, {0}}};
    for (int op = 0; op < KRED__COUNT; op++) {
        for (uint32_t m = 1; m <= 3; m++) {
            cai_kern_set_num_threads(1);
            cr_assert_eq(
                cai_kern_fused_reduce(&q, KERN_F32, 2, shape, in, (kern_red_op)op, m, o1[0]), 0);
            cai_kern_set_num_threads(2);
            cr_assert_eq(
                cai_kern_fused_reduce(&q, KERN_F32, 2, shape, in, (kern_red_op)op, m, o2[0]), 0);
            size_t no = m == 1 ? 1000 : m == 2 ? 1024 : 1;
            cr_assert(memcmp(o1[0], o2[0], no * 4) == 0, "reduce op %d mask %u", op, m);
        }
        cai_kern_set_num_threads(1);
        cr_assert_eq(cai_kern_fused_reduce(&q, KERN_F32, 1, big, flat, (kern_red_op)op, 1, o1[0]),
                     0);
        cai_kern_set_num_threads(2);
        cr_assert_eq(cai_kern_fused_reduce(&q, KERN_F32, 1, big, flat, (kern_red_op)op, 1, o2[0]),
                     0);
        cr_assert(memcmp(o1[0], o2[0], 4) == 0, "1-d reduce op %d", op);
    }
    /* and the 2-thread results are the reference's */
    tf_check_reduce(&q, KERN_F32, 1, big, flat, KRED_SUM, 1, 2, "1-d sum, 2 threads");
    tf_check_reduce(&q, KERN_F32, 2, shape, in, KRED_SUM, 1, 2, "column sum, 2 threads");
    for (int k = 0; k < 3; k++)
        free(o1[k]), free(o2[k]);
    free(a), free(b), free(c);
}

Test(fused, malformed_programs) {
    float x[4] = {1, 2, 3, 4}, y[4];
    int64_t sh = 4, st = 1;
    kern_src in[2] = {{x, {1}}, {x, {1}}};
    void *o[2] = {y, y};
    const int64_t *os[2] = {&st, &st};
    kern_fused_prog good = tf_prog(KERN_F32, 2);
    tf_out(&good, tf_add(&good, KPW_ADD, 0, 1, 0, 1, 0));
    cr_assert_eq(cai_kern_fused_run(&good, KERN_F32, 1, &sh, in, o, os), 0);
    cr_assert_eq(y[3], 8);
    kern_fused_prog p = good;
    p.instr[0].b = 2; /* reads itself: before it is written */
    cr_assert_eq(cai_kern_fused_run(&p, KERN_F32, 1, &sh, in, o, os), -1);
    p = good;
    p.out_reg[0] = 3; /* no such register */
    cr_assert_eq(cai_kern_fused_run(&p, KERN_F32, 1, &sh, in, o, os), -1);
    p = good;
    p.instr[0].op = KPW__COUNT;
    cr_assert_eq(cai_kern_fused_run(&p, KERN_F32, 1, &sh, in, o, os), -1);
    p = good;
    p.instr[0].op = KPW_WHERE; /* arity 3: c = 0 is fine, c = 5 is not */
    cr_assert_eq(cai_kern_fused_run(&p, KERN_F32, 1, &sh, in, o, os), 0);
    p.instr[0].c = 5;
    cr_assert_eq(cai_kern_fused_run(&p, KERN_F32, 1, &sh, in, o, os), -1);
    p = good;
    p.instr[0].op = KPW_NEG; /* unary: b is not read, any value goes */
    p.instr[0].b = 200;
    cr_assert_eq(cai_kern_fused_run(&p, KERN_F32, 1, &sh, in, o, os), 0);
    p = good;
    p.n_inputs = KERN_FUSED_MAX_INPUTS + 1;
    cr_assert_eq(cai_kern_fused_run(&p, KERN_F32, 1, &sh, in, o, os), -1);
    p = good;
    p.n_instr = KERN_FUSED_MAX_INSTR + 1;
    cr_assert_eq(cai_kern_fused_run(&p, KERN_F32, 1, &sh, in, o, os), -1);
    p = good;
    p.n_outputs = KERN_FUSED_MAX_OUTPUTS + 1;
    cr_assert_eq(cai_kern_fused_run(&p, KERN_F32, 1, &sh, in, o, os), -1);
    p = good;
    p.in_dt[1] = KERN_I64; /* another dtype, read by an add */
    cr_assert_eq(cai_kern_fused_run(&p, KERN_F32, 1, &sh, in, o, os), -1);
    p = good;
    p.in_dt[1] = (kern_dtype)7;
    cr_assert_eq(cai_kern_fused_run(&p, KERN_F32, 1, &sh, in, o, os), -1);
    cr_assert_eq(cai_kern_fused_run(&good, (kern_dtype)3, 1, &sh, in, o, os), -1);
    cr_assert_eq(cai_kern_fused_run(NULL, KERN_F32, 1, &sh, in, o, os), -1);
    int64_t neg = -1;
    cr_assert_eq(cai_kern_fused_run(&good, KERN_F32, 1, &neg, in, o, os), -1);
    cr_assert_eq(cai_kern_fused_run(&good, KERN_F32, KERN_MAX_DIMS + 1, &sh, in, o, os), -1);
    cr_assert_eq(cai_kern_fused_run(&good, KERN_F32, 1, &sh, NULL, o, os), -1);
    /* reductions: one output, a known op */
    float r;
    p = good;
    tf_out(&p, 0);
    cr_assert_eq(cai_kern_fused_reduce(&p, KERN_F32, 1, &sh, in, KRED_SUM, 1, &r), -1);
    cr_assert_eq(cai_kern_fused_reduce(&good, KERN_F32, 1, &sh, in, KRED__COUNT, 1, &r), -1);
    p = good;
    p.instr[0].a = 9;
    cr_assert_eq(cai_kern_fused_reduce(&p, KERN_F32, 1, &sh, in, KRED_SUM, 1, &r), -1);
    cr_assert_eq(cai_kern_fused_reduce(&good, KERN_F32, 1, &sh, in, KRED_SUM, 1, &r), 0);
    cr_assert_eq(r, 20);
}

static atomic_int tf_live_allocs, tf_total_allocs;

static void *tf_count_alloc(size_t n) {
    atomic_fetch_add(&tf_live_allocs, 1);
    atomic_fetch_add(&tf_total_allocs, 1);
    return aligned_alloc(64, (n + 63) / 64 * 64);
}

static void tf_count_free(void *q) {
    atomic_fetch_sub(&tf_live_allocs, 1);
    free(q);
}

static void *tf_fail_alloc(size_t n) {
    (void)n;
    return NULL;
}

/* Scratch comes from the allocator hook only, is all given back, and its failure is -2
 * with the outputs untouched. */
Test(fused, allocation_failure) {
    int64_t shape[2] = {300, 500}, cst[2] = {500, 1}, n = 150000;
    tf_rng = 8;
    void *a = tf_fill(KERN_F64, n, -1, 1), *b = tf_fill(KERN_F64, 500, -1, 1);
    double *y = malloc(sizeof(double) * (size_t)n);
    kern_src in[2] = {{a, {500, 1}}, {b, {0, 1}}};
    kern_fused_prog p = tf_prog(KERN_F64, 2); /* y = tanh(a) * b + b */
    int t = tf_add(&p, KPW_TANH, 0, 0, 0, 0, 0);
    tf_out(&p, tf_add(&p, KPW_ADD, tf_add(&p, KPW_MUL, t, 1, 0, 0, 0), 1, 0, 1, 0));
    void *o[1] = {y};
    const int64_t *os[1] = {cst};
    for (int threads = 1; threads <= 2; threads++) {
        cai_kern_set_num_threads(threads);
        cai_kern_set_allocator((kern_allocator){tf_fail_alloc, free});
        memset(y, 0, sizeof(double) * (size_t)n);
        cr_assert_eq(cai_kern_fused_run(&p, KERN_F64, 2, shape, in, o, os), -2);
        cr_assert_eq(y[0], 0, "nothing written on failure");
        for (uint32_t m = 1; m <= 3; m++)
            cr_assert_eq(cai_kern_fused_reduce(&p, KERN_F64, 2, shape, in, KRED_LOGSUMEXP, m, y),
                         -2);
        cai_kern_set_allocator((kern_allocator){tf_count_alloc, tf_count_free});
        atomic_store(&tf_live_allocs, 0);
        atomic_store(&tf_total_allocs, 0);
        cr_assert_eq(cai_kern_fused_run(&p, KERN_F64, 2, shape, in, o, os), 0);
        for (uint32_t m = 1; m <= 3; m++)
            cr_assert_eq(cai_kern_fused_reduce(&p, KERN_F64, 2, shape, in, KRED_LOGSUMEXP, m, y),
                         0);
        cr_assert_eq(atomic_load(&tf_live_allocs), 0, "scratch leaked");
        cr_assert_eq(atomic_load(&tf_total_allocs), 4, "one scratch block per call");
        cai_kern_set_allocator((kern_allocator){NULL, NULL});
    }
    free(a), free(b), free(y);
}

/* ndim 0, a zero-size space (nothing written, inputs may be NULL), FILL without inputs,
 * a splat input, and a program with no instruction. */
Test(fused, scalars_empty_and_splats) {
    double x = 1.5, y = 0;
    int64_t cz[2] = {0, 0};
    kern_src in[1] = {{&x, {0}}};
    void *o[1] = {&y};
    const int64_t *os[1] = {cz};
    kern_fused_prog p = tf_prog(KERN_F64, 1);
    tf_out(&p, tf_add(&p, KPW_MUL_S, tf_add(&p, KPW_EXP, 0, 0, 0, 0, 0), 0, 0, 2, 0));
    cr_assert_eq(cai_kern_fused_run(&p, KERN_F64, 0, NULL, in, o, os), 0);
    cr_assert_eq(y, 2 * exp(1.5));
    int64_t zero[2] = {4, 0}, st[2] = {0, 1};
    kern_src none[1] = {{NULL, {1, 1}}};
    void *on[1] = {NULL};
    const int64_t *osn[1] = {st};
    cr_assert_eq(cai_kern_fused_run(&p, KERN_F64, 2, zero, none, on, osn), 0);
    /* FILL reads nothing: its input may be NULL */
    int64_t sh[2] = {33, 70}, cst[2] = {70, 1};
    double *big = malloc(sizeof(double) * 33 * 70);
    kern_fused_prog f = tf_prog(KERN_F64, 1);
    tf_out(&f, tf_add(&f, KPW_FILL, 0, 0, 0, -2.5, 0));
    void *ob[1] = {big};
    const int64_t *osb[1] = {cst};
    cr_assert_eq(cai_kern_fused_run(&f, KERN_F64, 2, sh, none, ob, osb), 0);
    for (int i = 0; i < 33 * 70; i++)
        cr_assert_eq(big[i], -2.5);
    /* a splat (all strides 0) input, converted from int64, against the op-by-op path */
    int64_t one = 1;
    tf_rng = 2;
    void *v = tf_fill(KERN_F64, 33 * 70, -1, 1);
    kern_src sp[2] = {{v, {70, 1}}, {&one, {0, 0}}};
    kern_fused_prog w = tf_prog(KERN_F64, 2);
    w.in_dt[1] = KERN_I64;
    tf_out(&w, tf_add(&w, KPW_MASKED_FILL, tf_add(&w, KPW_SIN, 0, 0, 0, 0, 0), 1, 0, 4, 0));
    tf_check_run(&w, KERN_F64, 2, sh, sp, NULL, "int64 splat mask");
    /* no instruction: outputs are copies of inputs (a transpose here) */
    kern_fused_prog c = tf_prog(KERN_F64, 1);
    tf_out(&c, 0);
    int64_t tsh[2] = {70, 33}, tst[1][KERN_MAX_DIMS] = {{1, 70}};
    kern_src tv[1] = {{v, {1, 70}}};
    tf_check_run(&c, KERN_F64, 2, tsh, tv, tst, "copy program");
    free(big), free(v);
}
