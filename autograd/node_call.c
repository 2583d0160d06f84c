/* node_call.c - calling a built-in node on a gradient (PyTorch's grad_fn(grad)): its
 * derivative rule runs once, outside any backward, and hands back the gradients of the
 * node's inputs. Grad mode decides whether the rule's ops record, as PyTorch's call does:
 * on by default, so the results are differentiable again.
 */
#include "autograd/builder.h"
#include "autograd/internal.h"

static ca_status call_check(const ca_node *n, const ca_tensor *g) {
    if (n->custom || n->op == CA_OP_ACCUMULATE_GRAD)
        return err_set(CA_STATUS_INVALID,
                       "ca_node_call: %s cannot be called: only built-in derivative rules can "
                       "(call a custom function's backward yourself)",
                       cai_node_name(n));
    ca_meta m;
    cai_tensor_meta(g, &m);
    if (m.dtype != n->out_meta.dtype || !cai_meta_same_shape(&m, &n->out_meta)) {
        char s1[96], s2[96];
        return err_set(CA_STATUS_SHAPE,
                       "ca_node_call: %s's output is %s%s but the gradient given is %s%s; pass "
                       "a gradient of the output's shape and dtype",
                       cai_node_name(n), ca_dtype_name(n->out_meta.dtype),
                       cai_err_shape_str(n->out_meta.ndim, n->out_meta.shape, s1, 96),
                       ca_dtype_name(m.dtype), cai_err_shape_str(m.ndim, m.shape, s2, 96));
    }
    for (int k = 0; k < n->n_saved; k++) /* freed by a backward, or changed in place */
        CA_CHECK(cai_node_check_saved(n, k));
    return CA_OK;
}

ca_status ca_node_call(ca_node *n, ca_tensor *grad_output, ca_tensor **grad_inputs) {
    CA_CHECK(ca_init());
    CA_ARG_NOT_NULL(n, "ca_node_call");
    CA_ARG_NOT_NULL(grad_output, "ca_node_call");
    CA_ARG_NOT_NULL(grad_inputs, "ca_node_call");
    for (int i = 0; i < n->n_in; i++)
        grad_inputs[i] = NULL;
    CA_CHECK(call_check(n, grad_output));
    ca_bval local[8], *gin = local;
    if (n->n_in > 8 && !(gin = cai_mem_calloc((size_t)n->n_in, sizeof(ca_bval))))
        return err_nomem("ca_node_call's gradient list");
    memset(gin, 0, sizeof(ca_bval) * (size_t)n->n_in);
    ca_status st = cai_saved_unpack(n);
    ca_eager_builder eb;
    cai_eager_builder_init(&eb);
    eb.base.create_graph = cai_grad_mode_enabled();
    if (st == CA_OK) {
        cai_op_def(n->op)->backward(&eb.base, n, bv_of(grad_output), gin);
        st = eb.base.status;
    }
    for (int i = 0; i < n->n_in && st == CA_OK; i++) /* none for an input without an edge */
        if (n->next[i].fn && gin[i])
            grad_inputs[i] = ca_tensor_retain(bv_tensor(gin[i]));
    cai_eager_scope_end(&eb);
    cai_saved_drop_unpacked(n);
    if (gin != local)
        cai_mem_free(gin);
    return st;
}

/* A GradientEdge (node n, output k) as a tensor ca_grad takes as an input or output: a
 * leaf's AccumulateGrad stands for the leaf itself; any other node's output k for a zero
 * of that output's gradient's dtype and shape (one element, broadcast), whose grad_fn is
 * n at output k. */
ca_status ca_node_output_tensor(ca_node *n, int k, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_node_output_tensor");
    *out = NULL;
    CA_ARG_NOT_NULL(n, "ca_node_output_tensor");
    if (k < 0 || k >= n->n_out)
        return err_set(CA_STATUS_INVALID, "ca_node_output_tensor: %s has %d output(s), not %d",
                       cai_node_name(n), n->n_out, k + 1);
    if (n->op == CA_OP_ACCUMULATE_GRAD) {
        if (!n->leaf)
            return err_set(CA_STATUS_INVALID, "ca_node_output_tensor: this AccumulateGrad "
                                              "node's leaf is gone");
        *out = ca_tensor_retain(n->leaf);
        return CA_OK;
    }
    const ca_meta *m = node_out_meta_c(n, k);
    ca_meta one = {.dtype = m->dtype, .ndim = 0};
    ca_tensor *zero = NULL;
    CA_CHECK(cai_tensor_full(&one, 0.0, &zero));
    int64_t strides[CA_MAX_DIMS] = {0};
    ca_status st = cai_tensor_alias(zero, m->ndim, m->shape, strides, zero->offset, out);
    ca_tensor_release(zero);
    if (st != CA_OK)
        return st;
    (*out)->grad_fn = cai_node_retain(n);
    (*out)->output_nr = k;
    (*out)->requires_grad = true;
    return CA_OK;
}
