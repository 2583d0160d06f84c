/* test_gemm_sum.c - cai_kern_gemm_nt_sum_f32 (codegen/kern_gemm_sum.c): C += sum over a
 * batch of A_i B_i^T, against a float64 reference, and every ISA's build bit for bit. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kern.h"
#include "codegen/kern_blas.h"

typedef struct {
    int64_t M, N, L, nb;
} gs_case;

/* Sizes across the blocks' edges (4 rows by 3, chunks of 96 columns), the vectors' tails
 * (L % 8) and batches; operands with row and batch strides wider than their rows. */
static const gs_case gs_cases[] = {
    {6, 25, 784, 3},  {5, 7, 13, 2},   {1, 1, 1, 1},    {4, 3, 8, 1},
    {9, 100, 300, 2}, {3, 200, 17, 4}, {17, 2, 260, 1}, {2, 5, 7, 0},
};

typedef struct {
    float *a, *b, *c;
    int64_t lda, ldb, ldc, a_bs, b_bs;
} gs_data;

static gs_data gs_make(const gs_case *t) {
    gs_data d = {.lda = t->L + 3, .ldb = t->L + 5, .ldc = t->N + 2};
    d.a_bs = t->M * d.lda + 7;
    d.b_bs = t->N * d.ldb + 1;
    int64_t na = (t->nb > 0 ? t->nb : 1) * d.a_bs, nbb = (t->nb > 0 ? t->nb : 1) * d.b_bs;
    d.a = malloc(sizeof(float) * (size_t)na);
    d.b = malloc(sizeof(float) * (size_t)nbb);
    d.c = malloc(sizeof(float) * (size_t)(t->M * d.ldc));
    for (int64_t i = 0; i < na; i++)
        d.a[i] = (float)sin(0.37 * (double)i + 0.1);
    for (int64_t i = 0; i < nbb; i++)
        d.b[i] = (float)cos(0.23 * (double)i - 0.4);
    for (int64_t i = 0; i < t->M * d.ldc; i++)
        d.c[i] = (float)(0.5 * sin((double)i));
    return d;
}

static void gs_free(gs_data *d) {
    free(d->a);
    free(d->b);
    free(d->c);
}

static void gs_run(const gs_case *t, gs_data *d) {
    cai_kern_gemm_nt_sum_f32(t->M, t->N, t->L, t->nb, d->a, d->lda, d->a_bs, d->b, d->ldb, d->b_bs,
                             d->c, d->ldc);
}

/* Within (L / 8 + nb + 8) u of sum |c| + sum |a b| of each entry: the error bound of sums
 * in 8 lanes along L, then over the batch, then across the lanes. Entries past N in each
 * row of C are left as they were. */
Test(gemm_sum, is_the_float64_sum_within_its_rounding) {
    for (size_t k = 0; k < sizeof gs_cases / sizeof gs_cases[0]; k++) {
        const gs_case *t = &gs_cases[k];
        gs_data d = gs_make(t);
        float *c0 = malloc(sizeof(float) * (size_t)(t->M * d.ldc));
        memcpy(c0, d.c, sizeof(float) * (size_t)(t->M * d.ldc));
        gs_run(t, &d);
        double u = 0x1p-24, steps = (double)t->L / 8 + (double)t->nb + 8;
        for (int64_t m = 0; m < t->M; m++) {
            for (int64_t n = 0; n < t->N; n++) {
                double ref = c0[m * d.ldc + n], mag = fabs(ref);
                for (int64_t i = 0; i < t->nb; i++)
                    for (int64_t l = 0; l < t->L; l++) {
                        double p = (double)d.a[i * d.a_bs + m * d.lda + l] *
                                   (double)d.b[i * d.b_bs + n * d.ldb + l];
                        ref += p;
                        mag += fabs(p);
                    }
                double got = d.c[m * d.ldc + n];
                cr_assert(fabs(got - ref) <= steps * u * mag,
                          "case %zu [%lld, %lld]: %.9g against %.9g (bound %g)", k, (long long)m,
                          (long long)n, got, ref, steps * u * mag);
            }
            for (int64_t n = t->N; n < d.ldc; n++)
                cr_assert_eq(d.c[m * d.ldc + n], c0[m * d.ldc + n], "case %zu: past N", k);
        }
        free(c0);
        gs_free(&d);
    }
}

/* The AVX2 build sums each lane in the baseline's order, one FMA per term. */
Test(gemm_sum, every_isa_gives_the_baseline_bits) {
    kern_isa_level before = cai_kern_isa();
    if (cai_kern_isa_cpu() < KERN_ISA_AVX2)
        cr_skip_test("this CPU has only the baseline");
    for (size_t k = 0; k < sizeof gs_cases / sizeof gs_cases[0]; k++) {
        const gs_case *t = &gs_cases[k];
        gs_data d[2] = {gs_make(t), gs_make(t)};
        kern_isa_level isa[2] = {KERN_ISA_SCALAR, cai_kern_isa_cpu()};
        for (int v = 0; v < 2; v++) {
            cai_kern_isa_set(isa[v]);
            gs_run(t, &d[v]);
        }
        cai_kern_isa_set(before);
        cr_assert(memcmp(d[0].c, d[1].c, sizeof(float) * (size_t)(t->M * d[0].ldc)) == 0,
                  "case %zu: the bits differ", k);
        gs_free(&d[0]);
        gs_free(&d[1]);
    }
}
