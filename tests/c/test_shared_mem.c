/* test_shared_mem.c - suite `shared_mem`: ca_tensor_share_memory_ and the descriptor pair
 * (shared_mem.c): values survive the move, views follow it, another mapping of the
 * descriptor and a forked child write the same memory, and bad descriptors are refused. */
#include "testutil.h"

#include <sys/wait.h>
#include <unistd.h>

Test(shared_mem, share_keeps_values_and_moves_every_view) {
    const double v[4] = {1, 2, 3, 4};
    ca_tensor *t = tu_from(CA_FLOAT64, TU_SHAPE(4), v, false), *view = NULL;
    TU_OK(ca_narrow(t, 0, 1, 2, &view));
    cr_assert(!ca_tensor_is_shared(t));
    cr_assert_eq(ca_tensor_shared_fd(t, NULL, NULL), -1);
    TU_OK(ca_tensor_share_memory_(t));
    TU_OK(ca_tensor_share_memory_(t)); /* a no-op the second time */
    cr_assert(ca_tensor_is_shared(t) && ca_tensor_is_shared(view));
    tu_assert_values(t, v, 0);
    tu_assert_values(view, (const double[]){2, 3}, 0);
    size_t bytes = 0, off = 0;
    cr_assert_geq(ca_tensor_shared_fd(view, &bytes, &off), 0);
    cr_assert_eq(bytes, 4 * sizeof(double));
    cr_assert_eq(off, sizeof(double));
    ca_tensor *all[] = {t, view};
    tu_release_n(all, 2);
}

Test(shared_mem, a_second_mapping_writes_the_same_memory) {
    const double v[4] = {1, 2, 3, 4};
    ca_tensor *t = tu_from(CA_FLOAT64, TU_SHAPE(2, 2), v, false), *col = NULL, *other = NULL;
    TU_OK(ca_tensor_share_memory_(t));
    TU_OK(ca_select(t, 1, 1, &col)); /* t[:, 1]: element 0 at byte 8, stride 2 */
    size_t bytes = 0, off = 0;
    int fd = ca_tensor_shared_fd(col, &bytes, &off);
    TU_OK(ca_tensor_from_shared_fd(fd, bytes, off, CA_FLOAT64, 1, (const int64_t[]){2},
                                   (const int64_t[]){2}, &other));
    tu_assert_values(other, (const double[]){2, 4}, 0);
    TU_OK(ca_mul_scalar_(other, 10.0));
    tu_assert_values(t, (const double[]){1, 20, 3, 40}, 0);
    cr_assert(ca_tensor_is_shared(other));
    ca_tensor *all[] = {t, col, other};
    tu_release_n(all, 3);
}

Test(shared_mem, a_forked_child_writes_the_parents_memory) {
    const float v[3] = {1, 2, 3};
    ca_tensor *t = NULL;
    TU_OK(ca_from_data(CA_FLOAT32, 1, (const int64_t[]){3}, v, &t));
    TU_OK(ca_tensor_share_memory_(t));
    pid_t pid = fork();
    if (pid == 0) {
        ((float *)ca_tensor_data(t))[1] = 42.0f; /* no cagrad call: just the memory */
        _exit(0);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    tu_assert_values(t, (const double[]){1, 42, 3}, 0);
    ca_tensor_release(t);
}

Test(shared_mem, bad_descriptors_and_geometry_refuse) {
    ca_tensor *t = NULL, *out = NULL;
    TU_OK(ca_zeros(CA_FLOAT32, 1, (const int64_t[]){4}, &t));
    TU_OK(ca_tensor_share_memory_(t));
    size_t bytes = 0, off = 0;
    int fd = ca_tensor_shared_fd(t, &bytes, &off);
    TU_FAILS(
        ca_tensor_from_shared_fd(-1, bytes, 0, CA_FLOAT32, 1, (const int64_t[]){4}, NULL, &out),
        CA_STATUS_INVALID, "descriptor");
    TU_FAILS(ca_tensor_from_shared_fd(fd, bytes, bytes + 4, CA_FLOAT32, 1, (const int64_t[]){1},
                                      NULL, &out),
             CA_STATUS_INVALID, "ca_tensor_shared_fd");
    TU_FAILS(
        ca_tensor_from_shared_fd(fd, bytes, 4, CA_FLOAT32, 1, (const int64_t[]){4}, NULL, &out),
        CA_STATUS_SHAPE, "does not fit");
    cr_assert_null(out);
    TU_FAILS(ca_tensor_share_memory_(NULL), CA_STATUS_INVALID, "NULL");
    ca_tensor_release(t);
}
