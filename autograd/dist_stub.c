/* dist_stub.c - the ca_dist_* API of a build without MPI (CMake: CAGRAD_MPI=OFF, or AUTO
 * where find_package(MPI) found none). Every call fails the same way, naming what to
 * install; dist_mpi.c is the real one.
 */
#include "autograd/internal.h"

#if !CAGRAD_HAVE_MPI

static ca_status no_mpi(const char *fn) {
    return err_set(CA_STATUS_DIST,
                   "%s: this cagrad was built without MPI, so it has no distributed support; "
                   "install Open MPI (Debian: apt-get install openmpi-bin libopenmpi-dev, or "
                   "scripts/install-deps.sh) and rebuild with -DCAGRAD_MPI=ON (or AUTO)",
                   fn);
}

bool ca_dist_is_available(void) {
    return false;
}
bool ca_dist_is_initialized(void) {
    return false;
}
ca_status ca_dist_init(double timeout_seconds) {
    (void)timeout_seconds;
    return no_mpi("ca_dist_init");
}
ca_status ca_dist_rank(int *out) {
    (void)out;
    return no_mpi("ca_dist_rank");
}
ca_status ca_dist_world_size(int *out) {
    (void)out;
    return no_mpi("ca_dist_world_size");
}
ca_status ca_dist_get_timeout(double *out) {
    (void)out;
    return no_mpi("ca_dist_get_timeout");
}
ca_status ca_dist_set_timeout(double seconds) {
    (void)seconds;
    return no_mpi("ca_dist_set_timeout");
}
ca_status ca_dist_destroy(void) {
    return no_mpi("ca_dist_destroy");
}
ca_status ca_dist_finalize(void) {
    return no_mpi("ca_dist_finalize");
}
ca_status ca_dist_all_reduce(ca_tensor *t, ca_dist_op op, ca_dist_work **work) {
    (void)t, (void)op, (void)work;
    return no_mpi("ca_dist_all_reduce");
}
ca_status ca_dist_broadcast(ca_tensor *t, int src, ca_dist_work **work) {
    (void)t, (void)src, (void)work;
    return no_mpi("ca_dist_broadcast");
}
ca_status ca_dist_all_gather(const ca_tensor *in, ca_tensor *out, ca_dist_work **work) {
    (void)in, (void)out, (void)work;
    return no_mpi("ca_dist_all_gather");
}
ca_status ca_dist_barrier(ca_dist_work **work) {
    (void)work;
    return no_mpi("ca_dist_barrier");
}
ca_status ca_dist_work_wait(ca_dist_work *w) {
    (void)w;
    return no_mpi("ca_dist_work_wait");
}
ca_status ca_dist_work_is_completed(ca_dist_work *w, bool *done) {
    (void)w, (void)done;
    return no_mpi("ca_dist_work_is_completed");
}
void ca_dist_work_free(ca_dist_work *w) {
    (void)w;
}

#endif /* !CAGRAD_HAVE_MPI */
