/* test_dist.c - suite `dist`: the ca_dist_* API in one process (a world of one rank; the
 * two-rank checks are tests/mpi/dist_collectives.c under mpirun, scripts/test-mpi.sh).
 *
 * Each test runs in its own Criterion worker process, so each may start MPI afresh. A
 * build without MPI checks that every call fails with the message naming the package.
 */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
/* Open MPI keeps allocations from MPI_Init past MPI_Finalize (its own, hwloc's, PMIx's);
 * LeakSanitizer would report them as this test's leaks. Allocations made while starting
 * and stopping MPI are not checked; everything cagrad allocates in between is. */
#define MPI_UNCHECKED(stmt)                                                                        \
    do {                                                                                           \
        __lsan_disable();                                                                          \
        stmt;                                                                                      \
        __lsan_enable();                                                                           \
    } while (0)
#else
#define MPI_UNCHECKED(stmt) stmt
#endif

static ca_status dist_init(double timeout) {
    ca_status st;
    MPI_UNCHECKED(st = ca_dist_init(timeout));
    return st;
}

static ca_status dist_finalize(void) {
    ca_status st;
    MPI_UNCHECKED(st = ca_dist_finalize());
    return st;
}

static void init_or_skip(void) {
    if (!ca_dist_is_available())
        cr_skip_test("built without MPI (CAGRAD_MPI=OFF or no libopenmpi-dev)");
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("LOCAL_RANK");
    cr_assert_eq(dist_init(0), CA_OK, "%s", ca_last_error());
}

Test(dist, without_mpi_every_call_names_the_package) {
    if (ca_dist_is_available())
        cr_skip_test("built with MPI");
    int rank = 0;
    TU_FAILS(dist_init(0), CA_STATUS_DIST, "libopenmpi-dev");
    TU_FAILS(ca_dist_rank(&rank), CA_STATUS_DIST, "CAGRAD_MPI");
    cr_assert(!ca_dist_is_initialized());
}

Test(dist, one_rank_world) {
    int rank = -1, size = -1;
    double timeout = 0;
    if (ca_dist_is_available())
        TU_FAILS(ca_dist_rank(&rank), CA_STATUS_DIST, "not initialised");
    init_or_skip();
    cr_assert(ca_dist_is_initialized());
    cr_assert_eq(ca_dist_rank(&rank), CA_OK);
    cr_assert_eq(ca_dist_world_size(&size), CA_OK);
    cr_assert_eq(rank, 0);
    cr_assert_eq(size, 1);
    cr_assert_eq(ca_dist_get_timeout(&timeout), CA_OK);
    cr_assert_float_eq(timeout, 1800.0, 0.0, "PyTorch's default: 30 minutes");
    TU_FAILS(dist_init(0), CA_STATUS_DIST, "already initialised");
    TU_FAILS(ca_dist_set_timeout(0), CA_STATUS_VALUE, "> 0");
    ca_status destroyed;
    MPI_UNCHECKED(destroyed = ca_dist_destroy());
    cr_assert_eq(destroyed, CA_OK);
    cr_assert(!ca_dist_is_initialized());
    cr_assert_eq(dist_init(5), CA_OK, "a new group after destroy: %s", ca_last_error());
    cr_assert_eq(ca_dist_get_timeout(&timeout), CA_OK);
    cr_assert_float_eq(timeout, 5.0, 0.0);
    cr_assert_eq(dist_finalize(), CA_OK);
}

Test(dist, collectives_of_one_rank) {
    init_or_skip();
    const double v[] = {1.5, -2.0, 3.25};
    ca_tensor *t = tu_from(CA_FLOAT64, TU_SHAPE(3), v, false);
    ca_tensor *out = tu_from(CA_FLOAT64, TU_SHAPE(3), (const double[]){0, 0, 0}, false);
    cr_assert_eq(ca_dist_all_reduce(t, CA_DIST_SUM, NULL), CA_OK, "%s", ca_last_error());
    cr_assert_eq(ca_dist_all_reduce(t, CA_DIST_AVG, NULL), CA_OK, "%s", ca_last_error());
    cr_assert_eq(ca_dist_broadcast(t, 0, NULL), CA_OK, "%s", ca_last_error());
    ca_dist_work *w = NULL;
    cr_assert_eq(ca_dist_all_gather(t, out, &w), CA_OK, "%s", ca_last_error());
    cr_assert_eq(ca_dist_work_wait(w), CA_OK, "%s", ca_last_error());
    bool done = false;
    cr_assert_eq(ca_dist_work_is_completed(w, &done), CA_OK);
    cr_assert(done);
    ca_dist_work_free(w);
    const double *got = ca_tensor_data(out);
    for (int i = 0; i < 3; i++)
        cr_assert_float_eq(got[i], v[i], 0.0, "element %d", i);
    cr_assert_eq(ca_dist_barrier(NULL), CA_OK);
    ca_tensor_release(t);
    ca_tensor_release(out);
    cr_assert_eq(dist_finalize(), CA_OK);
}

Test(dist, collective_errors) {
    init_or_skip();
    ca_tensor *i = tu_index(TU_SHAPE(2), (const int64_t[]){1, 2});
    ca_tensor *nc = tu_randn_noncontig(CA_FLOAT32, TU_SHAPE(3, 4), false);
    ca_tensor *f = tu_randn(CA_FLOAT32, TU_SHAPE(3), false);
    ca_tensor *wrong = tu_randn(CA_FLOAT32, TU_SHAPE(2), false);
    TU_FAILS(ca_dist_all_reduce(i, CA_DIST_AVG, NULL), CA_STATUS_DTYPE, "floating-point");
    cr_assert_eq(ca_dist_all_reduce(i, CA_DIST_SUM, NULL), CA_OK, "%s", ca_last_error());
    TU_FAILS(ca_dist_all_reduce(nc, CA_DIST_SUM, NULL), CA_STATUS_INVALID, "contiguous");
    TU_FAILS(ca_dist_all_reduce(NULL, CA_DIST_SUM, NULL), CA_STATUS_INVALID, "NULL");
    TU_FAILS(ca_dist_all_reduce(f, (ca_dist_op)9, NULL), CA_STATUS_INVALID, "unknown op 9");
    TU_FAILS(ca_dist_broadcast(f, 1, NULL), CA_STATUS_VALUE, "src 1 is not a rank");
    TU_FAILS(ca_dist_all_gather(f, wrong, NULL), CA_STATUS_SHAPE, "need 3");
    TU_FAILS(ca_dist_all_gather(f, i, NULL), CA_STATUS_DTYPE, "int64");
    ca_tensor_release(i);
    ca_tensor_release(nc);
    ca_tensor_release(f);
    ca_tensor_release(wrong);
    cr_assert_eq(dist_finalize(), CA_OK);
}

Test(dist, environment_must_agree_with_mpi) {
    if (!ca_dist_is_available())
        cr_skip_test("built without MPI");
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    TU_FAILS(dist_init(0), CA_STATUS_DIST, "RANK=1 in the environment");
    cr_assert(!ca_dist_is_initialized());
    unsetenv("RANK");
    TU_FAILS(dist_init(0), CA_STATUS_DIST, "WORLD_SIZE=2");
    unsetenv("WORLD_SIZE");
    setenv("CAGRAD_DIST_TIMEOUT", "7.5", 1);
    cr_assert_eq(dist_init(0), CA_OK, "%s", ca_last_error());
    double timeout = 0;
    cr_assert_eq(ca_dist_get_timeout(&timeout), CA_OK);
    cr_assert_float_eq(timeout, 7.5, 0.0);
    cr_assert_eq(dist_finalize(), CA_OK);
}
