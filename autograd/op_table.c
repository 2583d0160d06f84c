/* op_table.c - gathers the op groups into one table indexed by op id, and checks it.
 *
 * The check runs at start-up (ca_init): every id must have exactly one row, every row a
 * shape rule and a forward kernel, and every differentiable row a derivative rule. A
 * missing rule is a start-up error, not a surprise in the middle of a backward.
 */
#include "autograd/builder.h"

#include <stdio.h>
#include <string.h>

const ca_op_group *const cai_op_groups[] = {
    &cai_ops_pointwise, &cai_ops_activation, &cai_ops_reduce, &cai_ops_shape,
    &cai_ops_slice,     &cai_ops_index,      &cai_ops_linalg, &cai_ops_nn,
    &cai_ops_norm,      &cai_ops_conv,       &cai_ops_order,  &cai_ops_sort,
    &cai_ops_pool,      &cai_ops_autograd,   &cai_ops_math,   &cai_ops_strided};
const int cai_op_n_groups = (int)(sizeof cai_op_groups / sizeof cai_op_groups[0]);

static const ca_op_def *table[CA_OP__COUNT];

const ca_op_def *cai_op_def(int id) {
    return id >= 0 && id < CA_OP__COUNT ? table[id] : NULL;
}

static ca_status row_check(const ca_op_def *r) {
    const char *name = r->name ? r->name : "(unnamed)";
    if (!r->name || !r->node_name)
        return err_set(CA_STATUS_INTERNAL, "op table: row %d lacks a name or node name", r->id);
    bool engine_row = r->id == CA_OP_ACCUMULATE_GRAD || r->id == CA_OP_CUSTOM;
    if (!engine_row && (!r->shape || !r->forward))
        return err_set(CA_STATUS_INTERNAL, "op table: op '%s' lacks a %s", name,
                       r->shape ? "forward kernel" : "shape rule");
    if (!engine_row && !r->backward && !(r->flags & CA_OPF_NONDIFF))
        return err_set(CA_STATUS_INTERNAL,
                       "op table: op '%s' has no derivative rule and is not "
                       "marked CA_OPF_NONDIFF",
                       name);
    int n_tensors = 0;
    if (r->n_fields < 0 || r->n_fields > CA_MAX_FIELDS)
        return err_set(CA_STATUS_INTERNAL, "op table: op '%s' has %d fields", name, r->n_fields);
    for (int f = 0; f < r->n_fields; f++) {
        const ca_field_desc *fd = &r->fields[f];
        bool bad_input = fd->src == FROM_INPUT && r->n_in_max >= 0 && fd->idx >= r->n_in_max;
        bool bad_aux = fd->src == FROM_AUX && fd->idx >= CA_MAX_AUX;
        if (!fd->name || bad_input || bad_aux)
            return err_set(CA_STATUS_INTERNAL, "op table: op '%s' field %d is malformed", name, f);
        n_tensors += fd->kind == FIELD_TENSOR;
    }
    if (n_tensors > CA_MAX_SAVED)
        return err_set(CA_STATUS_INTERNAL, "op table: op '%s' saves %d tensors (max %d)", name,
                       n_tensors, CA_MAX_SAVED);
    return CA_OK;
}

static ca_status table_fill(const ca_op_group *const *gs, int n_groups, const ca_op_def **t) {
    for (int g = 0; g < n_groups; g++) {
        for (int i = 0; i < gs[g]->count; i++) {
            const ca_op_def *r = &gs[g]->rows[i];
            if (r->id < 0 || r->id >= CA_OP__COUNT)
                return err_set(CA_STATUS_INTERNAL, "op table: row '%s' has id %d out of range",
                               r->name ? r->name : "?", r->id);
            if (t[r->id])
                return err_set(CA_STATUS_INTERNAL, "op table: id %d has two rows ('%s' and '%s')",
                               r->id, t[r->id]->name, r->name ? r->name : "?");
            CA_CHECK(row_check(r));
            t[r->id] = r;
        }
    }
    return CA_OK;
}

ca_status cai_op_table_build(const ca_op_group *const *gs, int n_groups, const ca_op_def **t) {
    memset(t, 0, sizeof(ca_op_def *) * CA_OP__COUNT);
    CA_CHECK(table_fill(gs, n_groups, t));
    for (int id = 0; id < CA_OP__COUNT; id++) {
        if (t[id])
            continue;
        const char *prev = "the first op";
        for (int j = id - 1; j >= 0; j--)
            if (t[j]) {
                prev = t[j]->name;
                break;
            }
        return err_set(CA_STATUS_INTERNAL,
                       "op table is incomplete: op id %d (just after '%s') has no row; every op "
                       "needs a shape rule, a forward kernel and a derivative rule",
                       id, prev);
    }
    return CA_OK;
}

ca_status cai_op_table_check(void) {
    CA_CHECK(cai_op_table_build(cai_op_groups, cai_op_n_groups, table));
    return cai_op_registry_build();
}

/* ---------------------------------------------------------------------------------------
 * The autograd engine's own node kinds
 */
static void grad_copy_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    (void)b;
    if (node_needs_grad(n, 0))
        gin[0] = g;
}

static const ca_op_def autograd_rows[] = {
    {.id = CA_OP_ACCUMULATE_GRAD,
     .name = "accumulate_grad",
     .node_name = "AccumulateGrad",
     .fusion = CA_FUSE_OPAQUE,
     .flags = CA_OPF_NONDIFF},
    /* recorded by ca_custom_apply only; its node names itself and runs the user's backward
     * (custom.c) */
    {.id = CA_OP_CUSTOM,
     .name = "custom_function",
     .node_name = "CustomFunctionBackward",
     .fusion = CA_FUSE_OPAQUE,
     .flags = CA_OPF_NONDIFF},
    /* backward(create_graph=True): a leaf's first .grad, a copy of the gradient that keeps
     * its history (PyTorch's CopyBackwards) */
    {.id = CA_OP_GRAD_COPY,
     .name = "grad_copy",
     .node_name = "CopyBackwards",
     .fusion = CA_FUSE_POINTWISE,
     .n_in_min = 1,
     .n_in_max = 1,
     .shape = cai_op_pointwise_shape,
     .forward = cai_op_pointwise_forward,
     .backward = grad_copy_backward,
     .pw = KPW_COPY},
    /* the same for retain_grad's first .grad (PyTorch clones it: CloneBackward0) */
    {.id = CA_OP_GRAD_CLONE,
     .name = "grad_clone",
     .node_name = "CloneBackward0",
     .fusion = CA_FUSE_POINTWISE,
     .n_in_min = 1,
     .n_in_max = 1,
     .shape = cai_op_pointwise_shape,
     .forward = cai_op_pointwise_forward,
     .backward = grad_copy_backward,
     .pw = KPW_COPY},
};

const ca_op_group cai_ops_autograd = {autograd_rows,
                                      sizeof autograd_rows / sizeof autograd_rows[0]};
