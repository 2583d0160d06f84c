/* test_fused_rows.c - Criterion suite `fused_rows`: fused loops whose inputs are constant
 * along rows (BatchNorm's per-channel operands over [N, C, H*W]) read them by value, one
 * per row piece, through the readers' scalar forms (codegen/fused_tile.c). The same program
 * with those inputs materialised in full must give the same bits (where two NaNs meet, any
 * NaN: fr_same): every scalar form (a - s, s - a, a * s, a / s, s / a, a + s), forms with
 * none (alpha 2, max) that keep the input an array, tiles of one row and of many, rows too
 * short to take the path, NaN, infinities and signed zeros, both float dtypes, a
 * reduction, 1 and 2 threads, every ISA path. */
#include "testutil.h"

#include "codegen/fused.h"
#include "codegen/kern.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NS 8 /* row-constant inputs of the program */

static uint64_t fr_state = 7;

static double fr_value(void) {
    fr_state = fr_state * 6364136223846793005u + 1442695040888963407u;
    int64_t r = (int64_t)(fr_state >> 33) % 60;
    return r == 0 ? NAN : r == 1 ? -INFINITY : r == 2 ? -0.0 : r == 3 ? 0.0 : (double)(r - 30) / 7;
}

static void *fr_fill(kern_dtype dt, int64_t n) {
    void *p = malloc((size_t)(n > 0 ? n : 1) * 8);
    cr_assert_not_null(p);
    for (int64_t i = 0; i < n; i++) {
        if (dt == KERN_F32)
            ((float *)p)[i] = (float)fr_value();
        else
            ((double *)p)[i] = fr_value();
    }
    return p;
}

static int fr_ins(kern_fused_prog *p, kern_pw_op op, int a, int b, double p0) {
    p->instr[p->n_instr] = (kern_fused_instr){.op = op, .a = (uint8_t)a, .b = (uint8_t)b, .p0 = p0};
    return p->n_inputs + p->n_instr++;
}

/* Input 0 is the array x, inputs 1..NS the row-constant ones; out: one register. */
static kern_fused_prog fr_program(kern_dtype dt) {
    kern_fused_prog p = {.n_inputs = 1 + NS, .n_outputs = 1};
    for (int r = 0; r < p.n_inputs; r++)
        p.in_dt[r] = dt;
    int t = fr_ins(&p, KPW_SUB, 0, 1, 1.0); /* x - s1 */
    t = fr_ins(&p, KPW_MUL, t, 2, 0.0);     /* * s2 */
    t = fr_ins(&p, KPW_DIV, t, 3, 0.0);     /* / s3 */
    t = fr_ins(&p, KPW_SUB, 4, t, 1.0);     /* s4 - t */
    t = fr_ins(&p, KPW_DIV, 5, t, 0.0);     /* s5 / t */
    t = fr_ins(&p, KPW_ADD, t, 6, 1.0);     /* + s6 */
    t = fr_ins(&p, KPW_ADD, t, 7, 2.0);     /* + 2 s7: no scalar form */
    t = fr_ins(&p, KPW_MAX, t, 8, 0.0);     /* max(t, s8): none */
    t = fr_ins(&p, KPW_MUL, t, 0, 0.0);     /* * x */
    p.out_reg[0] = (uint8_t)t;
    return p;
}

/* Shape [rows, channels, len]: x contiguous, each row-constant input one value per
 * (row, channel), given with the strides {channels, 1, 0} or (full, which gets the
 * allocations) materialised in full. */
typedef struct {
    int64_t shape[3];
} fr_case;

static void fr_inputs(kern_dtype dt, const fr_case *c, void *x, void **s, void **full,
                      kern_src *in) {
    int64_t n = c->shape[0] * c->shape[1] * c->shape[2], es = (int64_t)cai_kern_dtype_size(dt);
    in[0] = (kern_src){x, {c->shape[1] * c->shape[2], c->shape[2], 1}};
    for (int r = 1; r <= NS; r++) {
        if (!full) {
            in[r] = (kern_src){s[r - 1], {c->shape[1], 1, 0}};
            continue;
        }
        char *f = full[r - 1] = malloc((size_t)(n * es));
        cr_assert_not_null(f);
        for (int64_t i = 0; i < n; i++)
            memcpy(f + i * es, (char *)s[r - 1] + i / c->shape[2] * es, (size_t)es);
        in[r] = (kern_src){f, {c->shape[1] * c->shape[2], c->shape[2], 1}};
    }
}

/* Bit for bit, but for NaNs: where two NaNs meet, which one goes on is the hardware's
 * choice of operand, and a compiler may order a scalar form's operands differently. */
static void fr_same(kern_dtype dt, const void *got, const void *want, int64_t n, const char *what,
                    const fr_case *c) {
    int64_t es = (int64_t)cai_kern_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) {
        double g = dt == KERN_F32 ? ((const float *)got)[i] : ((const double *)got)[i];
        double w = dt == KERN_F32 ? ((const float *)want)[i] : ((const double *)want)[i];
        bool same =
            memcmp((const char *)got + i * es, (const char *)want + i * es, (size_t)es) == 0 ||
            (isnan(g) && isnan(w));
        cr_assert(same, "%s: [%lld, %lld, %lld] f%d %s element %lld: %.17g against %.17g", what,
                  (long long)c->shape[0], (long long)c->shape[1], (long long)c->shape[2],
                  (int)es * 8, cai_kern_isa_name(cai_kern_isa()), (long long)i, g, w);
    }
}

/* One case at the current thread count: the elementwise run and a sum over the rows' last
 * dim, by value (row-constant strides) against materialised inputs, bit for bit. */
static void fr_check(kern_dtype dt, const fr_case *c, bool expect_by_value) {
    int64_t n = c->shape[0] * c->shape[1] * c->shape[2], rows = c->shape[0] * c->shape[1];
    int64_t es = (int64_t)cai_kern_dtype_size(dt),
            cst[3] = {c->shape[1] * c->shape[2], c->shape[2], 1};
    void *x = fr_fill(dt, n), *s[NS];
    for (int r = 0; r < NS; r++)
        s[r] = fr_fill(dt, rows);
    kern_fused_prog p = fr_program(dt);
    kern_src by[1 + NS], full[1 + NS];
    void *made[NS]; /* the materialised inputs */
    fr_inputs(dt, c, x, s, NULL, by);
    fr_inputs(dt, c, x, s, made, full);
    void *y0 = malloc((size_t)(n * es)), *y1 = malloc((size_t)(n * es));
    void *r0 = malloc((size_t)(rows * es)), *r1 = malloc((size_t)(rows * es));
    cr_assert(y0 && y1 && r0 && r1);
    const int64_t *ost[1] = {cst};
    cai_kern_fused_values_read(true);
    cr_assert_eq(cai_kern_fused_run(&p, dt, 3, c->shape, by, &y0, ost), 0);
    cr_assert_eq(cai_kern_fused_reduce(&p, dt, 3, c->shape, by, KRED_SUM, 1u << 2, r0), 0);
    bool took = cai_kern_fused_values_read(false);
    cr_assert_eq(took, expect_by_value, "shape [%lld, %lld, %lld] f%d: read by value %d",
                 (long long)c->shape[0], (long long)c->shape[1], (long long)c->shape[2],
                 dt == KERN_F32 ? 32 : 64, took);
    cr_assert_eq(cai_kern_fused_run(&p, dt, 3, c->shape, full, &y1, ost), 0);
    cr_assert_eq(cai_kern_fused_reduce(&p, dt, 3, c->shape, full, KRED_SUM, 1u << 2, r1), 0);
    fr_same(dt, y0, y1, n, "elementwise", c);
    fr_same(dt, r0, r1, rows, "row sums", c);
    for (int r = 0; r < NS; r++)
        free(s[r]), free(made[r]);
    free(x), free(y0), free(y1), free(r0), free(r1);
}

Test(fused_rows, row_constant_inputs_by_value_give_the_same_bits) {
    const struct {
        fr_case c;
        bool by_value;
    } cases[] = {
        {{{4, 16, 256}}, true}, /* BatchNorm over 16x16 planes: four rows a tile */
        {{{2, 3, 1000}}, true}, /* rows longer than a tile */
        {{{3, 5, 300}}, true},  /* tiles that start mid-row */
        {{{30, 40, 64}}, true}, /* the shortest rows taken */
        {{{20, 9, 63}}, false}, /* too short: the readers read a splat per row */
    };
    int threads = cai_kern_num_threads();
    kern_isa_level isa = cai_kern_isa();
    for (int l = KERN_ISA_SCALAR; l <= (int)cai_kern_isa_cpu(); l++)
        for (int t = 1; t <= 2; t++) {
            cai_kern_isa_set((kern_isa_level)l);
            cai_kern_set_num_threads(t);
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                fr_check(KERN_F32, &cases[i].c, cases[i].by_value);
                fr_check(KERN_F64, &cases[i].c, cases[i].by_value);
            }
        }
    cai_kern_set_num_threads(threads);
    cai_kern_isa_set(isa);
}

/* A row-constant input that is also an output is stored from its loaded values, so it is
 * read as an array: the program x - s, s. */
Test(fused_rows, an_input_that_is_an_output_stays_an_array) {
    kern_dtype dt = KERN_F32;
    fr_case c = {{3, 4, 100}};
    int64_t n = 3 * 4 * 100, cst[3] = {400, 100, 1};
    void *x = fr_fill(dt, n), *s = fr_fill(dt, 12);
    float *full = malloc(sizeof(float) * (size_t)n), *got[2], *want[2];
    cr_assert_not_null(full);
    for (int64_t i = 0; i < n; i++)
        full[i] = ((float *)s)[i / 100];
    kern_fused_prog p = {.n_inputs = 2, .n_outputs = 2, .in_dt = {dt, dt}};
    p.out_reg[0] = (uint8_t)fr_ins(&p, KPW_SUB, 0, 1, 1.0);
    p.out_reg[1] = 1;
    kern_src by[2] = {{x, {400, 100, 1}}, {s, {4, 1, 0}}},
             mat[2] = {{x, {400, 100, 1}}, {full, {400, 100, 1}}};
    for (int k = 0; k < 2; k++) {
        got[k] = malloc(sizeof(float) * (size_t)n);
        want[k] = malloc(sizeof(float) * (size_t)n);
        cr_assert(got[k] && want[k]);
    }
    const int64_t *ost[2] = {cst, cst};
    cr_assert_eq(cai_kern_fused_run(&p, dt, 3, c.shape, by, (void *const *)got, ost), 0);
    cr_assert_eq(cai_kern_fused_run(&p, dt, 3, c.shape, mat, (void *const *)want, ost), 0);
    fr_same(dt, got[0], want[0], n, "x - s", &c);
    fr_same(dt, got[1], want[1], n, "s", &c);
    for (int k = 0; k < 2; k++)
        free(got[k]), free(want[k]);
    free(x), free(s), free(full);
}
