/* blas_config.c - ca_get_blas_info and ca_show_config: which BLAS runs the GEMMs, how it
 * threads, and whether its kernels are below what the CPU can do.
 *
 * The slow-core check compares the widest vector ISA of OpenBLAS's kernels with the
 * CPU's. An old OpenBLAS that does not know a new CPU falls back to Prescott kernels (SSE3)
 * and runs sgemm several times slower; so does an OPENBLAS_CORETYPE that names an older
 * core. The warning says which of the two it is. cagrad never sets OPENBLAS_CORETYPE: a
 * user's setting is theirs.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "cagrad.h"
#include "codegen/kern.h"

static char blas_warning[512];
static pthread_once_t blas_warning_once = PTHREAD_ONCE_INIT;

static void blas_build_warning(void) {
    kern_blas_info k;
    cai_kern_blas_info(&k);
    if (k.core_isa >= k.cpu_isa)
        return;
    const char *forced = getenv("OPENBLAS_CORETYPE");
    int n =
        snprintf(blas_warning, sizeof blas_warning,
                 "OpenBLAS %s runs its %s kernels (%s), but this CPU supports %s: "
                 "matrix products run at a fraction of the CPU's speed. ",
                 k.version, k.core, cai_kern_isa_name(k.core_isa), cai_kern_isa_name(k.cpu_isa));
    if (n < 0 || (size_t)n >= sizeof blas_warning)
        return;
    if (forced && *forced)
        snprintf(blas_warning + n, sizeof blas_warning - (size_t)n,
                 "OPENBLAS_CORETYPE=%s in the environment forces that core; unset it to let "
                 "OpenBLAS pick this CPU's kernels (cagrad never changes it).",
                 forced);
    else
        snprintf(blas_warning + n, sizeof blas_warning - (size_t)n,
                 "This OpenBLAS does not know this CPU. Build cagrad against a current one: "
                 "pip install -U scipy-openblas32, then rebuild (CMake option "
                 "-DCAGRAD_BLAS=scipy-openblas32).");
}

void ca_get_blas_info(ca_blas_info *out) {
    if (!out)
        return;
    kern_blas_info k;
    cai_kern_blas_info(&k);
    pthread_once(&blas_warning_once, blas_build_warning);
    out->name = k.name;
    out->version = k.version;
    out->config = k.config;
    out->core = k.core;
    out->threading = k.threads_callback
                         ? "cagrad's pool: OpenBLAS hands its threads to it (threads callback)"
                         : "cagrad's pool: big GEMMs cut into tiles, OpenBLAS single-threaded";
    out->core_isa = cai_kern_isa_name(k.core_isa);
    out->cpu_isa = cai_kern_isa_name(k.cpu_isa);
    out->warning = blas_warning[0] ? blas_warning : NULL;
}

size_t ca_show_config(char *buf, size_t cap) {
    ca_blas_info b;
    ca_get_blas_info(&b);
    int n =
        snprintf(buf, buf ? cap : 0,
                 "cagrad %s\n"
                 "  kernel ISA: %s (CPU supports %s)\n"
                 "  threads: %d (cagrad.set_num_threads, CAGRAD_NUM_THREADS)\n"
                 "  BLAS: OpenBLAS %s from %s\n"
                 "    core: %s (%s kernels)\n"
                 "    threading: %s\n"
                 "    config: %s\n"
                 "%s%s%s",
                 ca_version(), ca_kernel_isa(), b.cpu_isa, ca_get_num_threads(), b.version, b.name,
                 b.core, b.core_isa, b.threading, b.config, b.warning ? "  WARNING: " : "",
                 b.warning ? b.warning : "", b.warning ? "\n" : "");
    return n < 0 ? 0 : (size_t)n;
}
