/* testutil.h - helpers shared by the Criterion suites: tensor makers, comparison against
 * plain references, gradcheck (analytic gradients against central finite differences in
 * float64), and allocation-failure injection.
 *
 * Every maker asserts success (cr_assert) so a test body stays straight-line. Tensors a
 * test makes are released by the test (LeakSanitizer checks it).
 */
#ifndef CAGRAD_TESTUTIL_H
#define CAGRAD_TESTUTIL_H

#include <cagrad.h>
#include <criterion/criterion.h>

/* Shapes as literals: TU_SHAPE(2, 3) -> (const int64_t[]){2, 3} with its count. */
#define TU_SHAPE(...)                                                                              \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]) {                       \
        __VA_ARGS__                                                                                \
    }

/* Assert that a ca_status is CA_OK, printing ca_last_error() otherwise. */
#define TU_OK(expr)                                                                                \
    do {                                                                                           \
        ca_status tu_st_ = (expr);                                                                 \
        cr_assert_eq(tu_st_, CA_OK, "%s failed: %s", #expr, ca_last_error());                      \
    } while (0)

/* Assert that expr fails with `status` and that ca_last_error() contains `needle`. */
#define TU_FAILS(expr, status, needle)                                                             \
    do {                                                                                           \
        ca_status tu_st_ = (expr);                                                                 \
        cr_assert_eq(tu_st_, (status), "%s: expected status %d, got %d (%s)", #expr,               \
                     (int)(status), (int)tu_st_, ca_last_error());                                 \
        cr_assert(strstr(ca_last_error(), (needle)) != NULL, "%s: message \"%s\" lacks \"%s\"",    \
                  #expr, ca_last_error(), (needle));                                               \
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
/* The element at multi-index idx (one entry per dim), as a double. */
double tu_at(const ca_tensor *t, const int64_t *idx);
/* The multi-index idx of row-major flat index i in a tensor of shape (nd dims). */
void tu_unflat(int nd, const int64_t *shape, int64_t i, int64_t *idx);
/* Assert t has nd dims of sizes shape. */
void tu_assert_shape(const ca_tensor *t, int nd, const int64_t *shape);
/* Release the first n of ts (NULL entries are fine). */
void tu_release_n(ca_tensor **ts, int n);
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

/* ---------------------------------------------------------------------------------------
 * A counting allocator, and allocation-failure injection
 *
 * tu_alloc_install puts a counting allocator in place (ca_set_allocator). It keeps the
 * number of allocations not yet freed, so a test can see when storage is freed and check
 * for leaks without LeakSanitizer. It also counts allocations since the last tu_alloc_arm
 * and fails exactly the armed one (returning NULL). Install it before making any tensor.
 */

/* Install the counting allocator with every counter at zero and no failure armed. */
void tu_alloc_install(void);
/* Disarm and restore the default allocator. */
void tu_alloc_uninstall(void);
/* Count from zero again and fail the nth allocation from now (0: none). */
void tu_alloc_arm(long n);
/* Stop failing; the count since tu_alloc_arm is kept. */
void tu_alloc_disarm(void);
/* Allocations since the last tu_alloc_arm. */
long tu_alloc_count(void);
/* Allocations made through the counting allocator and not yet freed. */
long tu_alloc_live(void);
/* Whether the armed allocation has been failed since the last tu_alloc_arm. */
bool tu_alloc_failed(void);
/* The counting allocator's alloc function (to recognise it in ca_get_allocator). */
void *tu_counting_alloc(size_t size, size_t align, void *ctx);

/* A scenario for tu_oom_every_allocation: makes its inputs, runs forward and backward,
 * releases everything and returns the status of its first failing call. */
typedef ca_status (*tu_sc_fn)(void);

/* Run fn twice cleanly (a warm-up, then a run counting its K allocations) and then once
 * with each allocation 1..K failing. Asserts every run returns CA_OK or CA_STATUS_NOMEM
 * and leaves no allocation alive; `name` starts every failure message. Calls ca_init. */
void tu_oom_every_allocation(const char *name, tu_sc_fn fn);

/* The state of a scenario: the first failing status and the tensors made so far (every
 * slot is released at the end, NULL ones included). */
#define TU_SC_SLOTS 24
typedef struct {
    ca_status st;
    int n;
    ca_tensor *t[TU_SC_SLOTS];
} tu_sc_state;

/* Run call only while the scenario s (a tu_sc_state *) has not failed; keep its status. */
#define TU_SC(s, call)                                                                             \
    do {                                                                                           \
        if ((s)->st == CA_OK)                                                                      \
            (s)->st = (call);                                                                      \
    } while (0)

/* The next free slot, for an output the scenario makes (released by tu_sc_release). */
ca_tensor **tu_sc_slot(tu_sc_state *s);
/* A float64 ca_randn tensor in a new slot (requires_grad when rg); NULL once s failed. */
ca_tensor *tu_sc_randn(tu_sc_state *s, int nd, const int64_t *shape, bool rg);
/* loss = sum(y * y) and its backward, in new slots; nothing once s failed. */
void tu_sc_backward(tu_sc_state *s, ca_tensor *y);
/* Release every slot; returns the scenario's first failing status. */
ca_status tu_sc_release(tu_sc_state *s);
/* tu_sc_backward then tu_sc_release. */
ca_status tu_sc_finish(tu_sc_state *s, ca_tensor *y);

#endif /* CAGRAD_TESTUTIL_H */
