/* node_saved.c - a built-in node's saved values by PyTorch's names (grad_fn._saved_self,
 * grad_fn._saved_dim, ...), read from the op row's fields: the row that tells the builders
 * and the compiled key what a node keeps also names it for users.
 */
#include <string.h>

#include "autograd/internal.h"

static const ca_op_def *saved_row(const ca_node *n) {
    if (!n || n->custom)
        return NULL;
    return cai_op_def(n->op);
}

int ca_node_n_saved(const ca_node *n) {
    const ca_op_def *row = saved_row(n);
    return row ? row->n_fields : 0;
}

const char *ca_node_saved_name(const ca_node *n, int i) {
    const ca_op_def *row = saved_row(n);
    return row && i >= 0 && i < row->n_fields ? row->fields[i].name : NULL;
}

static void ints_of(const ca_ints *v, ca_saved_value *out) {
    out->kind = CA_SAVED_INTS;
    out->n_ints = v->n;
    memcpy(out->ints, v->v, sizeof(int64_t) * (size_t)v->n);
}

/* Saved tensor k of n: checked as a backward checks it (freed, changed in place), then a
 * new reference, unpacked through its saved-tensor hooks when it was packed. */
static ca_status saved_tensor(ca_node *n, int f, ca_tensor **out) {
    for (int k = 0; k < n->n_saved; k++) {
        if (n->saved[k].field != f)
            continue;
        CA_CHECK(cai_node_check_saved(n, k));
        return cai_saved_read(&n->saved[k], out);
    }
    *out = NULL; /* an optional input that was not given */
    return CA_OK;
}

ca_status ca_node_saved(ca_node *n, const char *name, ca_saved_value *out) {
    CA_ARG_NOT_NULL(out, "ca_node_saved");
    memset(out, 0, sizeof *out);
    CA_ARG_NOT_NULL(n, "ca_node_saved");
    CA_ARG_NOT_NULL(name, "ca_node_saved");
    const ca_op_def *row = saved_row(n);
    for (int f = 0; row && f < row->n_fields; f++) {
        const ca_field_desc *fd = &row->fields[f];
        if (strcmp(fd->name, name) != 0)
            continue;
        switch (fd->kind) {
        case FIELD_TENSOR: out->kind = CA_SAVED_TENSOR; return saved_tensor(n, f, &out->tensor);
        case FIELD_INT:
            out->kind = CA_SAVED_INT;
            out->i = n->attrs.i[fd->idx];
            return CA_OK;
        case FIELD_DOUBLE:
            out->kind = CA_SAVED_DOUBLE;
            out->d = n->attrs.s[fd->idx];
            return CA_OK;
        case FIELD_DIMS: ints_of(&n->attrs.dims, out); return CA_OK;
        case FIELD_SIZES: ints_of(&n->attrs.shape, out); return CA_OK;
        }
    }
    return err_set(CA_STATUS_INVALID, "'%s' object has no attribute '_saved_%s'", cai_node_name(n),
                   name);
}
