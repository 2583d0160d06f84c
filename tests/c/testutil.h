/* testutil.h - helpers shared by the Criterion suites: tensor makers, comparison against
 * plain references, and gradcheck (analytic gradients against central finite
 * differences in float64).
 *
 * Every maker asserts success (cr_assert) so a test body stays straight-line. Tensors a
 * test makes are released by the test (LeakSanitizer checks it).
 */
#ifndef CAGRAD_TESTUTIL_H
#define CAGRAD_TESTUTIL_H

#include <cagrad.h>
#include <criterion/criterion.h>

/* Shapes as literals: TU_SHAPE(2, 3) -> (const int64_t[]){2, 3} with its count. */
#define TU_SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

/* Assert that a ca_status is CA_OK, printing ca_last_error() otherwise. */
#define TU_OK(expr)                                                                        \
    do {                                                                                   \
        ca_status tu_st_ = (expr);                                                         \
        cr_assert_eq(tu_st_, CA_OK, "%s failed: %s", #expr, ca_last_error());              \
    } while (0)

/* Assert that expr fails with `status` and that ca_last_error() contains `needle`. */
#define TU_FAILS(expr, status, needle)                                                     \
    do {                                                                                   \
        ca_status tu_st_ = (expr);                                                         \
        cr_assert_eq(tu_st_, (status), "%s: expected status %d, got %d (%s)", #expr,       \
                     (int)(status), (int)tu_st_, ca_last_error());                         \
        cr_assert(strstr(ca_last_error(), (needle)) != NULL,                               \
                  "%s: message \"%s\" lacks \"%s\"", #expr, ca_last_error(), (needle));     \
    } while (0)

/* Seeded normal values; requires_grad set when rg. */
ca_tensor *tu_randn(ca_dtype dt, int ndim, const int64_t *shape, bool rg);
/* Uniform values in [lo, hi). */
ca_tensor *tu_uniform(ca_dtype dt, int ndim, const int64_t *shape, double lo, double hi, bool rg);
/* Values given row-major as doubles (converted to dt). */
ca_tensor *tu_from(ca_dtype dt, int ndim, const int64_t *shape, const double *values, bool rg);
/* int64 tensor from values. */
ca_tensor *tu_index(int ndim, const int64_t *shape, const int64_t *values);
/* A NON-contiguous tensor of `shape` with normal values: the transpose of the last two
 * dims of a contiguous tensor (ndim >= 2), or every other element of a longer tensor
 * (ndim 1). Its storage is kept alive by the view; requires_grad set when rg (the view is
 * a leaf: it is detached from the way it was made). */
ca_tensor *tu_randn_noncontig(ca_dtype dt, int ndim, const int64_t *shape, bool rg);

/* Element i (row-major logical index) of any tensor, as a double. */
double tu_get(const ca_tensor *t, int64_t i);
/* Assert same shape and |a - b| <= atol + rtol * |b| everywhere (NaN == NaN). */
void tu_assert_close(const ca_tensor *a, const ca_tensor *b, double atol, double rtol);
/* Assert the tensor equals values (row-major) within atol. */
void tu_assert_values(const ca_tensor *t, const double *values, double atol);

/* The function under test: out = f(inputs). Must not keep references to inputs. */
typedef ca_status (*tu_fn)(ca_tensor *const *inputs, ca_tensor **out, void *ctx);

/* Gradcheck in float64: for a fixed random projection w, L = sum(f(x) * w). Compares
 * ca_backward's .grad of every input with requires_grad against central differences
 * (h = 1e-6) of L, element by element, and asserts |analytic - numeric| <= atol +
 * rtol * |numeric|. Inputs may be non-contiguous or broadcast views. Clears .grad
 * before and after. Also checks that ca_grad gives the same gradients as ca_backward. */
void tu_gradcheck(tu_fn f, int n, ca_tensor *const *inputs, void *ctx, double atol, double rtol);

#endif /* CAGRAD_TESTUTIL_H */
