/* test_op_table.c - the start-up check of the op table: complete in the real build, and
 * refusing tables with a missing row, a missing rule or a duplicate id. */
#include "autograd/internal.h"
#include "testutil.h"

Test(op_table, real_table_is_complete) {
    TU_OK(ca_init());
    for (int id = 0; id < CA_OP__COUNT; id++) {
        const ca_op_def *r = cai_op_def(id);
        cr_assert_not_null(r, "op id %d has no row", id);
        cr_assert_eq(r->id, id);
        cr_assert(r->backward || (r->flags & CA_OPF_NONDIFF), "%s lacks a rule", r->name);
    }
}

Test(op_table, missing_group_is_refused) {
    TU_OK(ca_init()); /* fills cai_op_def's table */
    const ca_op_def *t[CA_OP__COUNT];
    /* drop cai_ops_nn: its ops have no rows */
    const ca_op_group *gs[16];
    int n = 0;
    for (int g = 0; g < cai_op_n_groups; g++)
        if (cai_op_groups[g] != &cai_ops_nn)
            gs[n++] = cai_op_groups[g];
    cr_assert_eq(n, cai_op_n_groups - 1);
    TU_FAILS(cai_op_table_build(gs, n, t), CA_STATUS_INTERNAL, "op table is incomplete");
    cr_assert_eq(cai_op_table_build(cai_op_groups, cai_op_n_groups, t), CA_OK);
}

Test(op_table, row_without_derivative_is_refused) {
    TU_OK(ca_init()); /* fills cai_op_def's table */
    ca_op_def bad = *cai_op_def(CA_OP_EXP);
    bad.backward = NULL; /* differentiable, but no rule */
    ca_op_group g = {&bad, 1};
    const ca_op_group *gs[] = {&g};
    const ca_op_def *t[CA_OP__COUNT];
    TU_FAILS(cai_op_table_build(gs, 1, t), CA_STATUS_INTERNAL, "no derivative rule");
}

Test(op_table, row_without_shape_rule_is_refused) {
    TU_OK(ca_init()); /* fills cai_op_def's table */
    ca_op_def bad = *cai_op_def(CA_OP_MUL);
    bad.shape = NULL;
    ca_op_group g = {&bad, 1};
    const ca_op_group *gs[] = {&g};
    const ca_op_def *t[CA_OP__COUNT];
    TU_FAILS(cai_op_table_build(gs, 1, t), CA_STATUS_INTERNAL, "lacks a shape rule");
}

Test(op_table, duplicate_id_is_refused) {
    TU_OK(ca_init()); /* fills cai_op_def's table */
    ca_op_group g = {cai_op_def(CA_OP_ADD), 1};
    const ca_op_group *gs[] = {&g, &g};
    const ca_op_def *t[CA_OP__COUNT];
    TU_FAILS(cai_op_table_build(gs, 2, t), CA_STATUS_INTERNAL, "has two rows");
}

Test(op_table, too_many_saved_tensors_is_refused) {
    TU_OK(ca_init()); /* fills cai_op_def's table */
    ca_op_def bad = *cai_op_def(CA_OP_MUL);
    bad.n_fields = CA_MAX_SAVED + 1;
    for (int f = 0; f < bad.n_fields; f++)
        bad.fields[f] = (ca_field_desc){"self", FIELD_TENSOR, FROM_INPUT, 0};
    ca_op_group g = {&bad, 1};
    const ca_op_group *gs[] = {&g};
    const ca_op_def *t[CA_OP__COUNT];
    TU_FAILS(cai_op_table_build(gs, 1, t), CA_STATUS_INTERNAL, "saves");
}

/* Schemas: the registry parses every one at start-up, and a malformed one is refused. */
Test(op_table, schemas_are_checked) {
    TU_OK(ca_init());
    ca_op_def row = *cai_op_def(CA_OP_GELU);
    cr_assert(cai_op_schema_valid(&row));
    static const char *const bad[] = {
        "gelu",                                  /* no parameter list */
        "elu(Tensor input)",                     /* another op's name */
        "gelu(Tensor input",                     /* unclosed */
        "gelu(Tensor input, double alpha=1.0)",  /* an unknown type */
        "gelu(Tensor input, str{} approximate)", /* no choices */
        "gelu(Tensor input, float)",             /* no name */
        "gelu(float alpha=1.0)",                 /* fewer tensors than the op's inputs */
        "gelu(Tensor input, Tensor other)",      /* more */
        "gelu(Tensor input) trailing",           /* text after the list */
        "gelu(Tensor input=1)",                  /* a default for a tensor */
        "gelu(Tensor input, str{none|tanh} approximate='erf')", /* not a choice */
        "gelu(Tensor input, float a=1.0, float b)",             /* no default after one */
        "gelu(Tensor input, float a=True)",                     /* a bool for a float */
        "gelu(Tensor input, float a, float b, float c)",        /* more floats than attrs.s holds */
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        row.schema = bad[k];
        cr_assert(!cai_op_schema_valid(&row), "accepted \"%s\"", bad[k]);
    }
    row.schema = "gelu(Tensor input, str{none|tanh} approximate='none', float a=-1.5, int b=2, "
                 "bool c=False)";
    cr_assert(cai_op_schema_valid(&row));
}
