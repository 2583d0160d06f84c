/* test_blob.c - suite `blob`: tensors over memory owned elsewhere (ca_tensor_from_blob,
 * what NumPy and DLPack interop stand on) and the per-thread op observer (what explain()
 * counts ops with).
 */
#include "testutil.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    int calls;
} deleter_log;

static void count_delete(void *ctx) {
    ((deleter_log *)ctx)->calls++;
}

Test(blob, shares_memory_and_deletes_once_after_the_last_view) {
    float data[6] = {1, 2, 3, 4, 5, 6};
    deleter_log log = {0};
    ca_tensor *t, *tt, *y;
    TU_OK(
        ca_tensor_from_blob(CA_FLOAT32, 2, (int64_t[]){2, 3}, NULL, data, count_delete, &log, &t));
    cr_assert_eq(ca_tensor_data(t), (void *)data, "no copy");
    TU_OK(ca_transpose(t, 0, 1, &tt)); /* a view keeps the storage alive */
    TU_OK(ca_mul_scalar_(t, 2.0));     /* writes go to the caller's memory */
    cr_assert_eq(data[5], 12.0f);
    cr_assert_eq(ca_tensor_version(tt), 1, "the version counter lives in the storage");
    TU_OK(ca_add(tt, tt, &y));
    cr_assert_eq(tu_get(y, 1), 2 * 8.0, "y[0,1] = 2 * t[1,0]");
    ca_tensor_release(t);
    cr_assert_eq(log.calls, 0, "a view is still alive");
    ca_tensor_release(tt);
    cr_assert_eq(log.calls, 1);
    ca_tensor_release(y);
    cr_assert_eq(log.calls, 1, "y has its own storage");
}

Test(blob, strided_views_read_through_the_given_strides) {
    double data[12];
    for (int i = 0; i < 12; i++)
        data[i] = i;
    ca_tensor *t, *s;
    /* every other column of a 3x4 row-major matrix */
    TU_OK(ca_tensor_from_blob(CA_FLOAT64, 2, (int64_t[]){3, 2}, (int64_t[]){4, 2}, data, NULL, NULL,
                              &t));
    cr_assert(!ca_tensor_is_contiguous(t));
    TU_OK(ca_sum(t, 0, NULL, false, &s));
    cr_assert_eq(tu_get(s, 0), 0 + 2 + 4 + 6 + 8 + 10.0);
    ca_tensor_release(s);
    ca_tensor_release(t); /* NULL deleter: the memory stays the caller's */
    cr_assert_eq(data[11], 11.0);
}

Test(blob, gradients_flow_into_an_external_leaf) {
    float data[3] = {1, 2, 3};
    ca_tensor *x, *y, *loss;
    TU_OK(ca_tensor_from_blob(CA_FLOAT32, 1, (int64_t[]){3}, NULL, data, NULL, NULL, &x));
    TU_OK(ca_tensor_set_requires_grad(x, true));
    TU_OK(ca_mul(x, x, &y));
    TU_OK(ca_sum(y, 0, NULL, false, &loss));
    TU_OK(ca_backward(loss));
    cr_assert_eq(tu_get(ca_tensor_grad(x), 2), 6.0);
    ca_tensor_release(loss);
    ca_tensor_release(y);
    ca_tensor_release(x);
}

Test(blob, bad_input_is_refused_and_the_caller_keeps_the_memory) {
    float data[8] = {0};
    deleter_log log = {0};
    ca_tensor *t = (ca_tensor *)&log;
    TU_FAILS(ca_tensor_from_blob(CA_FLOAT32, 1, (int64_t[]){4}, (int64_t[]){-1}, data + 3,
                                 count_delete, &log, &t),
             CA_STATUS_INVALID, "negative");
    cr_assert_null(t);
    TU_FAILS(ca_tensor_from_blob(CA_FLOAT32, 1, (int64_t[]){2}, NULL, (char *)data + 1,
                                 count_delete, &log, &t),
             CA_STATUS_INVALID, "aligned");
    TU_FAILS(
        ca_tensor_from_blob(CA_FLOAT32, 1, (int64_t[]){-2}, NULL, data, count_delete, &log, &t),
        CA_STATUS_SHAPE, "negative");
    TU_FAILS(ca_tensor_from_blob(CA_FLOAT32, 1, (int64_t[]){2}, NULL, NULL, count_delete, &log, &t),
             CA_STATUS_INVALID, "NULL");
    TU_FAILS(ca_tensor_from_blob(CA_FLOAT32, CA_MAX_DIMS + 1, (int64_t[CA_MAX_DIMS + 1]){0}, NULL,
                                 data, count_delete, &log, &t),
             CA_STATUS_SHAPE, "ndim");
    cr_assert_eq(log.calls, 0, "on failure the deleter never runs");
}

Test(blob, header_allocation_failure_keeps_the_memory_with_the_caller) {
    float data[2] = {0};
    deleter_log log = {0};
    TU_OK(ca_init()); /* its own allocations are not the ones under test */
    tu_alloc_install();
    for (long fail_at = 1; fail_at <= 2; fail_at++) { /* the storage, then the header */
        ca_tensor *t = NULL;
        tu_alloc_arm(fail_at);
        ca_status st =
            ca_tensor_from_blob(CA_FLOAT32, 1, (int64_t[]){2}, NULL, data, count_delete, &log, &t);
        tu_alloc_disarm();
        cr_assert_eq(st, CA_STATUS_NOMEM, "allocation %ld failed: %s", fail_at, ca_last_error());
        cr_assert_null(t);
    }
    cr_assert_eq(log.calls, 0);
    cr_assert_eq(tu_alloc_live(), 0, "nothing leaked");
    tu_alloc_uninstall();
}

/* ---------------------------------------------------------------------------------------
 * Op observer
 */
typedef struct {
    int n;
    char names[8][32];
    int graphs[8];
} op_log;

static void record_op(const char *op, int graph, void *ctx) {
    op_log *log = ctx;
    if (log->n < 8) {
        snprintf(log->names[log->n], sizeof log->names[0], "%s", op);
        log->graphs[log->n] = graph;
    }
    log->n++;
}

Test(blob, the_op_observer_sees_each_successful_op_with_its_forward_graph) {
    op_log log = {0};
    ca_tensor *a = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3), false),
              *b = tu_randn(CA_FLOAT32, TU_SHAPE(3, 2), false);
    ca_tensor *c, *d, *bad = NULL;
    int g0 = ca_forward_graph_id();
    ca_set_op_observer(record_op, &log);
    TU_OK(ca_mm(a, b, &c));
    TU_OK(ca_graph_break("test"));
    TU_OK(ca_relu(c, &d));
    TU_FAILS(ca_add(a, b, &bad), CA_STATUS_SHAPE, "[2, 3]"); /* failures are not ops */
    ca_set_op_observer(NULL, NULL);
    ca_tensor_release(d);
    TU_OK(ca_relu(c, &d)); /* after removal: not seen */
    cr_assert_eq(log.n, 2);
    cr_assert_str_eq(log.names[0], "mm");
    cr_assert_str_eq(log.names[1], "relu");
    cr_assert_eq(log.graphs[0], g0);
    cr_assert_eq(log.graphs[1], g0 + 1);
    ca_tensor *all[] = {a, b, c, d};
    for (int i = 0; i < 4; i++)
        ca_tensor_release(all[i]);
}
