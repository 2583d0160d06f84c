/* error.c - the thread-local error slot behind ca_last_error().
 *
 * A failing call formats its message here and returns its status; the caller checks one
 * int and reads the text only when it wants it (SQLite's errcode/errmsg split).
 */
#include "autograd/internal.h"

#include <stdio.h>
#include <string.h>

#define ERR_CAP 1024

static _Thread_local char err_msg[ERR_CAP];
static _Thread_local ca_status err_status = CA_OK;
static _Thread_local uint64_t err_gen = 0; /* bumped by every set: who set an error? */

uint64_t cai_err_generation(void) {
    return err_gen;
}

static ca_status err_vset(ca_status status, const char *fmt, va_list ap) {
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    err_status = status;
    err_gen++;
    return status;
}

ca_status cai_err_set_impl(ca_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vset(status, fmt, ap);
    va_end(ap);
    return status;
}

ca_status ca_error_set(ca_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vset(status, fmt ? fmt : "(no message)", ap);
    va_end(ap);
    return status;
}

void cai_err_nomem_impl(const char *what) {
    cai_err_set_impl(CA_STATUS_NOMEM,
                     "out of memory while allocating %s; free some tensors or reduce the "
                     "batch size",
                     what);
}

const char *ca_last_error(void) {
    return err_msg;
}
ca_status ca_last_status(void) {
    return err_status;
}

void ca_error_clear(void) {
    err_msg[0] = '\0';
    err_status = CA_OK;
}

const char *ca_status_name(ca_status status) {
    switch (status) {
    case CA_OK: return "CA_OK";
    case CA_STATUS_INVALID: return "CA_STATUS_INVALID";
    case CA_STATUS_SHAPE: return "CA_STATUS_SHAPE";
    case CA_STATUS_DTYPE: return "CA_STATUS_DTYPE";
    case CA_STATUS_DIM: return "CA_STATUS_DIM";
    case CA_STATUS_INDEX: return "CA_STATUS_INDEX";
    case CA_STATUS_NOMEM: return "CA_STATUS_NOMEM";
    case CA_STATUS_AUTOGRAD: return "CA_STATUS_AUTOGRAD";
    case CA_STATUS_HOOK: return "CA_STATUS_HOOK";
    case CA_STATUS_INTERNAL: return "CA_STATUS_INTERNAL";
    case CA_STATUS_VALUE: return "CA_STATUS_VALUE";
    case CA_STATUS_DIST: return "CA_STATUS_DIST";
    }
    return "CA_STATUS_UNKNOWN";
}

const char *cai_err_shape_str(int ndim, const int64_t *shape, char *buf, size_t size) {
    return cai_sizes_concrete.shape_str(NULL, ndim, shape, buf, size);
}
