/* ops_sort.c - sort and topk: values in order along a dim, and the int64 positions they
 * came from (aux output 0).
 *
 * Both sort stably (equal values keep their order, NaN above every number), so
 * stable=False gives the stable order too, which PyTorch allows. Their derivative
 * scatter-adds the gradient back through the saved positions, which the compiled backward
 * runs as its SCATTER_ADD op.
 */
#include "autograd/builder.h"
#include "autograd/internal.h"

#include <string.h>

/* ---------------------------------------------------------------------------------------
 * sort(x, dim, descending, stable): attrs.i[0] = dim, i[1] = descending, i[2] = stable
 * topk(x, k, dim, largest, sorted): attrs.i[0] = dim, i[1] = largest, i[2] = sorted,
 * i[3] = k. So i[0] and i[1] mean the same in both rows.
 */
static ca_status sort_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                            ca_meta *out) {
    CA_CHECK(cai_dim_normalize(&a->i[0], in[0].ndim, row->name));
    a->i[1] = a->i[1] != 0;
    a->i[2] = a->i[2] != 0;
    *out = in[0];
    if (row->id != CA_OP_TOPK)
        return CA_OK;
    int64_t n = in[0].ndim > 0 ? in[0].shape[a->i[0]] : 1;
    if (a->i[3] < 0 || a->i[3] > n)
        return err_set(CA_STATUS_SHAPE,
                       "selected index k out of range: k is %lld but dim %lld has size %lld",
                       (long long)a->i[3], (long long)a->i[0], (long long)n);
    if (out->ndim > 0)
        out->shape[a->i[0]] = a->i[3];
    return CA_OK;
}

static ca_status sort_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                              const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                              ca_tensor **aux) {
    ca_tensor *xc = NULL, *values = NULL, *indices = NULL;
    ca_meta im = *m;
    im.dtype = CA_INT64;
    int64_t outer, n, inner;
    cai_kern_split_dim(in[0]->ndim, in[0]->shape, (int)a->i[0], &outer, &n, &inner);
    int64_t k = row->id == CA_OP_TOPK ? a->i[3] : n;
    ca_status st = cai_tensor_contiguous(in[0], &xc);
    if (st == CA_OK)
        st = cai_tensor_new(m, &values);
    if (st == CA_OK)
        st = cai_tensor_new(&im, &indices);
    if (st == CA_OK)
        st = cai_op_kern_status(cai_kern_sort(kdt(m->dtype), outer, n, inner, cai_tensor_ptr(xc), k,
                                              a->i[1] != 0, cai_tensor_ptr(values),
                                              cai_tensor_ptr(indices)),
                                row->name);
    ca_tensor_release(xc);
    if (st != CA_OK) {
        ca_tensor_release(values);
        ca_tensor_release(indices);
        return st;
    }
    *out = values;
    aux[0] = indices;
    return CA_OK;
}

/* each value's gradient goes back to the position it came from */
static void sort_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    gin[0] = bx_scatter_add(b, &n->in_meta[0], (int)n->attrs.i[0], bx_saved(b, n, 0), g);
}

/* Run row op and hand back values and indices (either pointer may be NULL: not wanted). */
static ca_status sort_call(int op, ca_tensor *x, const ca_attrs *a, ca_tensor **values,
                           ca_tensor **indices) {
    ca_tensor *v = NULL, *aux[CA_MAX_AUX] = {0};
    CA_CHECK(cai_op_call(op, 1, &x, a, &v, aux));
    for (int k = 1; k < CA_MAX_AUX; k++)
        ca_tensor_release(aux[k]);
    if (values)
        *values = v;
    else
        ca_tensor_release(v);
    if (indices)
        *indices = aux[0];
    else
        ca_tensor_release(aux[0]);
    return CA_OK;
}

ca_status ca_sort(ca_tensor *x, int64_t dim, bool descending, bool stable, ca_tensor **values,
                  ca_tensor **indices) {
    CA_ARG_NOT_NULL(values, "ca_sort");
    CA_ARG_NOT_NULL(indices, "ca_sort");
    *values = *indices = NULL;
    CA_ARG_NOT_NULL(x, "ca_sort");
    ca_attrs a = {.i = {dim, descending, stable}};
    return sort_call(stable ? CA_OP_SORT_STABLE : CA_OP_SORT, x, &a, values, indices);
}

ca_status ca_topk(ca_tensor *x, int64_t k, int64_t dim, bool largest, bool sorted,
                  ca_tensor **values, ca_tensor **indices) {
    CA_ARG_NOT_NULL(values, "ca_topk");
    CA_ARG_NOT_NULL(indices, "ca_topk");
    *values = *indices = NULL;
    CA_ARG_NOT_NULL(x, "ca_topk");
    ca_attrs a = {.i = {dim, largest, sorted, k}};
    return sort_call(CA_OP_TOPK, x, &a, values, indices);
}

/* ---------------------------------------------------------------------------------------
 * The rows: sort under PyTorch's two node names (SortBackward1 for stable=True), and topk
 */
#define SORT_ROW(ID, NAME, NODE)                                                                   \
    {                                                                                              \
        .id = (ID), .name = (NAME), .node_name = (NODE), .fusion = CA_FUSE_OPAQUE, .n_in_min = 1,  \
        .n_in_max = 1, .n_fields = 2,                                                              \
        .fields = {{"indices", FIELD_TENSOR, FROM_AUX, 0}, F_INT("dim", 0)}, .shape = sort_shape,  \
        .forward = sort_forward, .backward = sort_backward                                         \
    }

static const ca_op_def rows[] = {
    SORT_ROW(CA_OP_SORT, "sort", "SortBackward0"),
    SORT_ROW(CA_OP_SORT_STABLE, "sort", "SortBackward1"),
    SORT_ROW(CA_OP_TOPK, "topk", "TopkBackward0"),
};

const ca_op_group cai_ops_sort = {rows, sizeof rows / sizeof rows[0]};
