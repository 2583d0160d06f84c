/* test_op_table.c - the start-up check of the op table: complete in the real build, and
 * refusing tables with a missing row, a missing rule or a duplicate id. */
#include "autograd/internal.h"
#include "testutil.h"

static const ca_op_group *const real_groups[] = {
    &ops_pointwise, &ops_reduce, &ops_shape, &ops_index, &ops_linalg, &ops_nn, &ops_autograd};
#define N_REAL ((int)(sizeof real_groups / sizeof real_groups[0]))

Test(op_table, real_table_is_complete) {
    TU_OK(ca_init());
    for (int id = 0; id < CA_OP__COUNT; id++) {
        const ca_op_def *r = op_def(id);
        cr_assert_not_null(r, "op id %d has no row", id);
        cr_assert_eq(r->id, id);
        cr_assert(r->backward || (r->flags & CA_OPF_NONDIFF), "%s lacks a rule", r->name);
    }
}

Test(op_table, missing_group_is_refused) {
    TU_OK(ca_init()); /* fills op_def's table */
    const ca_op_def *t[CA_OP__COUNT];
    /* drop ops_nn: its ops have no rows */
    const ca_op_group *gs[] = {&ops_pointwise, &ops_reduce, &ops_shape,
                               &ops_index,     &ops_linalg, &ops_autograd};
    TU_FAILS(op_table_build(gs, 6, t), CA_STATUS_INTERNAL, "op table is incomplete");
    cr_assert_eq(op_table_build(real_groups, N_REAL, t), CA_OK);
}

Test(op_table, row_without_derivative_is_refused) {
    TU_OK(ca_init()); /* fills op_def's table */
    ca_op_def bad = *op_def(CA_OP_EXP);
    bad.backward = NULL; /* differentiable, but no rule */
    ca_op_group g = {&bad, 1};
    const ca_op_group *gs[] = {&g};
    const ca_op_def *t[CA_OP__COUNT];
    TU_FAILS(op_table_build(gs, 1, t), CA_STATUS_INTERNAL, "no derivative rule");
}

Test(op_table, row_without_shape_rule_is_refused) {
    TU_OK(ca_init()); /* fills op_def's table */
    ca_op_def bad = *op_def(CA_OP_MUL);
    bad.shape = NULL;
    ca_op_group g = {&bad, 1};
    const ca_op_group *gs[] = {&g};
    const ca_op_def *t[CA_OP__COUNT];
    TU_FAILS(op_table_build(gs, 1, t), CA_STATUS_INTERNAL, "lacks a shape rule");
}

Test(op_table, duplicate_id_is_refused) {
    TU_OK(ca_init()); /* fills op_def's table */
    ca_op_group g = {op_def(CA_OP_ADD), 1};
    const ca_op_group *gs[] = {&g, &g};
    const ca_op_def *t[CA_OP__COUNT];
    TU_FAILS(op_table_build(gs, 2, t), CA_STATUS_INTERNAL, "has two rows");
}

Test(op_table, too_many_saved_tensors_is_refused) {
    TU_OK(ca_init()); /* fills op_def's table */
    ca_op_def bad = *op_def(CA_OP_MUL);
    bad.n_fields = CA_MAX_SAVED + 1;
    for (int f = 0; f < bad.n_fields; f++)
        bad.fields[f] = (ca_field_desc){"self", FIELD_TENSOR, FROM_INPUT, 0};
    ca_op_group g = {&bad, 1};
    const ca_op_group *gs[] = {&g};
    const ca_op_def *t[CA_OP__COUNT];
    TU_FAILS(op_table_build(gs, 1, t), CA_STATUS_INTERNAL, "saves");
}
