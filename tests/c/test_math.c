/* test_math.c - the C functions of ops_math.c that the registry tests do not call: the
 * binary ones (values against libm, broadcasting, gradients against finite differences),
 * round with decimals, logit with eps, and int64. */
#include <math.h>
#include <string.h>

#include "testutil.h"

typedef ca_status (*binary_fn)(ca_tensor *, ca_tensor *, ca_tensor **);

static const double A[6] = {1.3, -2.6, 0.7, -0.45, 3.55, 2.1}; /* off the jumps of fmod */
static const double B[3] = {0.5, -1.5, 2.25};                  /* broadcast over A's rows */

static double py_remainder(double a, double b) {
    double r = fmod(a, b);
    return r != 0 && (r < 0) != (b < 0) ? r + b : r;
}

static double logaddexp_ref(double a, double b) {
    return fmax(a, b) + log1p(exp(-fabs(a - b)));
}

static double logaddexp2_ref(double a, double b) {
    return fmax(a, b) + log2(1 + exp2(-fabs(a - b)));
}

static double xlogy_ref(double a, double b) {
    return a == 0 ? 0 : a * log(fabs(b)); /* b is |B| below */
}

static double floor_divide_ref(double a, double b) {
    return floor(a / b);
}

static const struct {
    const char *name;
    binary_fn fn;
    double (*ref)(double, double);
    bool positive_b, differentiable;
} BINARY[] = {
    {"atan2", ca_atan2, atan2, false, true},
    {"hypot", ca_hypot, hypot, false, true},
    {"fmod", ca_fmod, fmod, false, true},
    {"remainder", ca_remainder, py_remainder, false, true},
    {"copysign", ca_copysign, copysign, false, true},
    {"logaddexp", ca_logaddexp, logaddexp_ref, false, true},
    {"logaddexp2", ca_logaddexp2, logaddexp2_ref, false, true},
    {"xlogy", ca_xlogy, xlogy_ref, true, true},
    {"floor_divide", ca_floor_divide, floor_divide_ref, false, false},
};
#define N_BINARY (int)(sizeof BINARY / sizeof BINARY[0])

static ca_status call_binary(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ((binary_fn)ctx)(in[0], in[1], out);
}

Test(math, binary_functions_match_libm_and_gradcheck) {
    double b_pos[3];
    for (int j = 0; j < 3; j++)
        b_pos[j] = fabs(B[j]);
    for (int k = 0; k < N_BINARY; k++) {
        const double *bv = BINARY[k].positive_b ? b_pos : B;
        bool rg = BINARY[k].differentiable;
        ca_tensor *a = tu_from(CA_FLOAT64, TU_SHAPE(2, 3), A, rg);
        ca_tensor *b = tu_from(CA_FLOAT64, TU_SHAPE(1, 3), bv, rg);
        ca_tensor *y = NULL;
        TU_OK(BINARY[k].fn(a, b, &y));
        double want[6];
        for (int i = 0; i < 6; i++)
            want[i] = BINARY[k].ref(A[i], bv[i % 3]);
        tu_assert_values(y, want, 1e-12);
        cr_assert_eq(ca_tensor_requires_grad(y), rg, "%s: requires_grad", BINARY[k].name);
        if (rg && BINARY[k].fn != ca_copysign) { /* copysign: a jump at 0 in b */
            ca_tensor *in[2] = {a, b};
            tu_gradcheck(call_binary, 2, in, (void *)BINARY[k].fn, 1e-6, 1e-5);
        }
        ca_tensor_release(y);
        ca_tensor_release(a);
        ca_tensor_release(b);
    }
}

Test(math, binary_functions_refuse_int64_and_null) {
    const int64_t v[2] = {1, 2};
    ca_tensor *i = tu_index(TU_SHAPE(2), v), *y = NULL;
    TU_FAILS(ca_atan2(i, i, &y), CA_STATUS_DTYPE, "int64");
    TU_FAILS(ca_hypot(NULL, i, &y), CA_STATUS_INVALID, "ca_hypot");
    ca_tensor_release(i);
}

Test(math, round_takes_decimals_and_keeps_int64) {
    const double x[4] = {1.2345, -2.5, 0.5, 1250};
    ca_tensor *t = tu_from(CA_FLOAT64, TU_SHAPE(4), x, false), *y = NULL;
    TU_OK(ca_round(t, 0, &y));
    tu_assert_values(y, (const double[]){1, -2, 0, 1250}, 0);
    ca_tensor_release(y);
    TU_OK(ca_round(t, 2, &y));
    tu_assert_values(y, (const double[]){1.23, -2.5, 0.5, 1250}, 1e-15);
    ca_tensor_release(y);
    TU_OK(ca_round(t, -2, &y));
    tu_assert_values(y, (const double[]){0, -0, 0, 1200}, 0); /* 12.5 rounds to even */
    ca_tensor_release(y);
    ca_tensor_release(t);
    const int64_t v[2] = {-3, 4};
    ca_tensor *i = tu_index(TU_SHAPE(2), v);
    TU_OK(ca_round(i, 0, &y));
    cr_assert_eq(ca_tensor_dtype(y), CA_INT64);
    tu_assert_values(y, (const double[]){-3, 4}, 0);
    ca_tensor_release(y);
    TU_FAILS(ca_round(i, 1, &y), CA_STATUS_DTYPE, "decimals=1 needs a float tensor");
    ca_tensor_release(i);
}

Test(math, logit_clamps_to_eps) {
    const double x[3] = {0.01, 0.5, 0.999};
    ca_tensor *t = tu_from(CA_FLOAT64, TU_SHAPE(3), x, false), *y = NULL;
    TU_OK(ca_logit(t, 0.1, &y));
    tu_assert_values(y, (const double[]){log(0.1 / 0.9), 0, log(0.9 / 0.1)}, 1e-12);
    ca_tensor_release(y);
    TU_OK(ca_logit(t, NAN, &y)); /* None: no clamp */
    tu_assert_values(y, (const double[]){log(0.01 / 0.99), 0, log(0.999 / 0.001)}, 1e-12);
    ca_tensor_release(y);
    ca_tensor_release(t);
}
