/* ops_reduce.c - reductions over dims (sum, mean, max, min, logsumexp) and the internal
 * sum_to that undoes broadcasting: their op-table rows, derivative rules and wrappers.
 *
 * attrs: dims = the reduced dims, i[0] = keepdim. The shape rule canonicalises dims (an
 * empty list means every dim and becomes the explicit list; negative dims are normalised;
 * the list is sorted), so nodes store one spelling for each call. cai_kern_reduce writes its
 * result contiguous over the kept dims, which is also the layout of the keepdim shape, so
 * the output tensor is allocated with the final shape and the kernel writes straight into
 * it.
 */
#include "autograd/builder.h"

#include <math.h>

/* ---------------------------------------------------------------------------------------
 * Shape rules
 */
static bool is_float(ca_dtype dt) {
    return dt == CA_FLOAT32 || dt == CA_FLOAT64;
}

static uint32_t dims_mask(const ca_ints *dims) {
    uint32_t mask = 0;
    for (int k = 0; k < dims->n; k++)
        mask |= 1u << dims->v[k];
    return mask;
}

/* Normalise, sort and check a dim list in place; n == 0 becomes every dim. */
static ca_status canon_dims(ca_ints *dims, int ndim, const char *op) {
    if (dims->n < 0 || dims->n > CA_MAX_DIMS)
        return err_set(CA_STATUS_INVALID, "%s: %d dims given; pass 0 to %d dims", op, dims->n,
                       CA_MAX_DIMS);
    if (dims->n == 0) {
        dims->n = ndim;
        for (int d = 0; d < ndim; d++)
            dims->v[d] = d;
        return CA_OK;
    }
    for (int k = 0; k < dims->n; k++)
        CA_CHECK(cai_dim_normalize(&dims->v[k], ndim, op));
    for (int k = 1; k < dims->n; k++) { /* insertion sort: at most 8 entries */
        int64_t v = dims->v[k];
        int j = k;
        for (; j > 0 && dims->v[j - 1] > v; j--)
            dims->v[j] = dims->v[j - 1];
        dims->v[j] = v;
    }
    for (int k = 1; k < dims->n; k++)
        if (dims->v[k] == dims->v[k - 1])
            return err_set(CA_STATUS_DIM,
                           "%s: dim %lld appears more than once in the list of "
                           "dims; list each dim once",
                           op, (long long)dims->v[k]);
    if (ndim == 0) /* dim 0 / -1 of a 0-d tensor: nothing to reduce */
        dims->n = 0;
    return CA_OK;
}

/* The output meta of a reduction of `in` over a->dims (canonical). */
static void reduced_meta(const ca_meta *in, const ca_attrs *a, ca_meta *out) {
    ca_meta r = {.dtype = in->dtype};
    r.ndim = cai_rule_reduced_shape(&cai_sizes_concrete, in->ndim, in->shape, dims_mask(&a->dims),
                                    a->i[0], r.shape);
    *out = r;
}

static ca_status reduce_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                              ca_meta *out) {
    bool int_ok = row->id == CA_OP_SUM;
    if (!is_float(in[0].dtype) && !(int_ok && in[0].dtype == CA_INT64))
        return err_set(CA_STATUS_DTYPE,
                       "%s: input is %s; %s needs float32 or float64 (convert "
                       "with ca_to_dtype)",
                       row->name, ca_dtype_name(in[0].dtype), row->name);
    bool whole = a->dims.n == 0;
    CA_CHECK(canon_dims(&a->dims, in[0].ndim, row->name));
    a->i[0] = a->i[0] != 0;
    bool argreduce = row->id == CA_OP_MAX || row->id == CA_OP_MIN;
    for (int k = 0; argreduce && k < a->dims.n; k++)
        if (in[0].shape[a->dims.v[k]] == 0) { /* torch's errors: a RuntimeError for a whole */
            char s[96];                       /* reduction, else an IndexError */
            if (whole)
                return err_set(CA_STATUS_SHAPE,
                               "%s(): Expected reduction dim to be specified for input.numel() "
                               "== 0 (input %s). Specify the reduction dim with the 'dim' "
                               "argument.",
                               row->name, cai_meta_str(&in[0], s, sizeof s));
            return err_set(CA_STATUS_INDEX,
                           "%s(): Expected reduction dim %lld to have non-zero size (input %s); "
                           "the %s of no elements is undefined",
                           row->name, (long long)a->dims.v[k], cai_meta_str(&in[0], s, sizeof s),
                           row->name);
        }
    reduced_meta(&in[0], a, out);
    return CA_OK;
}

/* sum_to: input must be a broadcast of attrs.shape (leading dims added, size-1 dims grown) */
static ca_status sum_to_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                              ca_meta *out) {
    const ca_ints *to = &a->shape;
    cai_rule_error e;
    if (cai_rule_sum_to(&cai_sizes_concrete, in[0].ndim, in[0].shape, to->n, to->v, &e))
        return cai_rule_raise(&e);
    ca_meta r = {.dtype = in[0].dtype, .ndim = to->n};
    for (int k = 0; k < to->n; k++)
        r.shape[k] = to->v[k];
    *out = r;
    return CA_OK;
}

/* ---------------------------------------------------------------------------------------
 * Forward
 */
static kern_red_op red_kind(int op) {
    switch (op) {
    case CA_OP_MEAN: return KRED_MEAN;
    case CA_OP_MAX: return KRED_MAX;
    case CA_OP_MIN: return KRED_MIN;
    case CA_OP_LOGSUMEXP: return KRED_LOGSUMEXP;
    default: return KRED_SUM;
    }
}

/* What a reduction of no elements gives, as PyTorch: sum 0, mean NaN, logsumexp -inf. */
static double empty_value(kern_red_op k) {
    return k == KRED_SUM ? 0.0 : k == KRED_MEAN ? NAN : -INFINITY;
}

/* Reduce x over rmask into a new tensor of meta m (the same layout as the kept dims);
 * idx_out, when given, receives the int64 arg indices (same shape). Empty inputs and
 * reductions over no dim (0-d inputs) never reach the kernel. */
static ca_status run_reduce(kern_red_op k, ca_tensor *x, uint32_t rmask, const ca_meta *m,
                            ca_tensor **out, ca_tensor **idx_out) {
    ca_tensor *o = NULL, *ix = NULL;
    ca_meta im = *m;
    im.dtype = CA_INT64;
    bool trivial = ca_tensor_numel(x) == 0 || cai_meta_numel(m) == 0 || rmask == 0;
    ca_status st;
    if (!trivial)
        st = cai_tensor_new(m, &o);
    else if (rmask == 0)
        st = cai_tensor_pointwise(KPW_COPY, m, 1, &x, 0, 0, &o);
    else
        st = cai_tensor_full(m, empty_value(k), &o);
    if (st == CA_OK && idx_out)
        st = trivial ? cai_tensor_full(&im, 0, &ix) : cai_tensor_new(&im, &ix);
    if (st == CA_OK && !trivial) {
        int rc =
            cai_kern_reduce(k, kdt(x->dtype), x->ndim, x->shape, cai_tensor_ptr(x), x->strides,
                            rmask, cai_tensor_ptr(o), ix ? (int64_t *)cai_tensor_ptr(ix) : NULL);
        if (rc == -2)
            st = err_nomem("reduction scratch");
        else if (rc != 0)
            st = err_set(CA_STATUS_DTYPE, "reduction is not supported for %s tensors",
                         ca_dtype_name(x->dtype));
    }
    if (st != CA_OK) {
        ca_tensor_release(o);
        ca_tensor_release(ix);
        return st;
    }
    *out = o;
    if (idx_out)
        *idx_out = ix;
    return CA_OK;
}

static ca_status reduce_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                ca_tensor **aux) {
    bool argreduce = row->id == CA_OP_MAX || row->id == CA_OP_MIN;
    return run_reduce(red_kind(row->id), in[0], dims_mask(&a->dims), m, out,
                      argreduce ? &aux[0] : NULL);
}

static ca_status sum_to_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                ca_tensor **aux) {
    ca_tensor *x = in[0];
    int lead = x->ndim - m->ndim;
    uint32_t mask = 0;
    for (int d = 0; d < x->ndim; d++)
        if (d < lead || (m->shape[d - lead] == 1 && x->shape[d] != 1))
            mask |= 1u << d;
    if (mask == 0) /* same sizes: still a copy, never an alias of x */
        return cai_tensor_pointwise(KPW_COPY, m, 1, in, 0, 0, out);
    return run_reduce(KRED_SUM, x, mask, m, out, NULL);
}

/* ---------------------------------------------------------------------------------------
 * Derivative rules
 */
/* g with the reduced dims put back as size 1 (a no-op when keepdim) */
static ca_bval keepdim_view(ca_builder *b, const ca_node *n, ca_bval g) {
    if (n->attrs.i[0])
        return g;
    for (int k = 0; k < n->attrs.dims.n; k++) /* ascending, so each dim lands in place */
        g = bx_unsqueeze(b, g, (int)n->attrs.dims.v[k]);
    return g;
}

static void sum_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (node_needs_grad(n, 0))
        gin[0] = bx_expand(b, keepdim_view(b, n, g), &n->in_meta[0]);
}

static void mean_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (!node_needs_grad(n, 0))
        return;
    ca_bval s = bx_scale_inv_numel(b, g, &n->in_meta[0], dims_mask(&n->attrs.dims));
    gin[0] = bx_expand(b, keepdim_view(b, n, s), &n->in_meta[0]);
}

/* Several reduced dims: move them to the end and flatten them, so the flat arg index
 * (row-major over the reduced dims) becomes an index along one last dim; scatter there,
 * then undo the flatten and the permutation. The flattened size comes from the builder
 * (reshape with -1 of an expanded view), so the rule does no arithmetic on sizes. */
static ca_bval argreduce_multi(ca_builder *b, const ca_node *n, ca_bval g, ca_bval idx) {
    const ca_meta *im = &n->in_meta[0];
    uint32_t mask = dims_mask(&n->attrs.dims);
    ca_ints perm = {.n = im->ndim}, inv = {.n = im->ndim}, flat = {0};
    int p = 0;
    for (int d = 0; d < im->ndim; d++)
        if (!(mask & (1u << d))) {
            flat.v[flat.n++] = im->shape[d];
            perm.v[p++] = d;
        }
    for (int d = 0; d < im->ndim; d++)
        if (mask & (1u << d))
            perm.v[p++] = d;
    for (int d = 0; d < im->ndim; d++)
        inv.v[perm.v[d]] = d;
    ca_ints col = flat; /* [kept..., 1]: g and the indices */
    col.v[col.n++] = 1;
    flat.v[flat.n++] = -1; /* [kept..., prod(reduced)] */

    ca_bval gk = keepdim_view(b, n, g);
    ca_bval permuted = bx_permute(b, bx_expand(b, gk, im), &perm);
    ca_bval flat_v = bx_reshape_ints(b, permuted, &flat);
    const ca_meta *flat_m = bx_meta(b, flat_v);
    const ca_meta *perm_m = bx_meta(b, permuted);
    if (!flat_m || !perm_m)
        return NULL;
    ca_meta full = *flat_m, back = *perm_m; /* copies: the builder may reuse its storage */
    ca_bval src = bx_reshape_ints(b, gk, &col);
    ca_bval index = bx_reshape_ints(b, idx, &col);
    ca_bval s = bx_scatter_add(b, &full, full.ndim - 1, index, src);
    return bx_permute(b, bx_reshape(b, s, &back), &inv);
}

/* saved: indices (aux 0). The gradient goes to the arg index only. */
static void argreduce_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (!node_needs_grad(n, 0))
        return;
    const ca_ints *dims = &n->attrs.dims;
    ca_bval idx = bx_saved(b, n, 0);
    if (dims->n == 0) { /* a 0-d input: the value is the input */
        gin[0] = g;
        return;
    }
    if (dims->n > 1) {
        gin[0] = argreduce_multi(b, n, g, idx);
        return;
    }
    int d = (int)dims->v[0];
    if (!n->attrs.i[0]) {
        g = bx_unsqueeze(b, g, d);
        idx = bx_unsqueeze(b, idx, d);
    }
    gin[0] = bx_scatter_add(b, &n->in_meta[0], d, idx, g);
}

/* saved: self, result. d/dx logsumexp = exp(x - result) */
static void logsumexp_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (!node_needs_grad(n, 0))
        return;
    ca_bval x = bx_saved(b, n, 0), r = keepdim_view(b, n, bx_saved(b, n, 1));
    gin[0] = bx_mul(b, keepdim_view(b, n, g), bx_exp(b, bx_sub(b, x, r)));
}

static void sum_to_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    if (node_needs_grad(n, 0))
        gin[0] = bx_expand(b, g, &n->in_meta[0]);
}

/* ---------------------------------------------------------------------------------------
 * The rows
 */
#define F_DIMS                                                                                     \
    { "dim", FIELD_DIMS, FROM_ATTR, 0 }
#define F_KEEPDIM                                                                                  \
    { "keepdim", FIELD_INT, FROM_ATTR, 0 }

#define RED_ROW(ID, NAME, NODE, BW, NF, ...)                                                       \
    {                                                                                              \
        .id = ID, .name = NAME, .node_name = NODE, .fusion = CA_FUSE_REDUCTION, .n_in_min = 1,     \
        .n_in_max = 1, .n_fields = NF, .fields = {__VA_ARGS__}, .shape = reduce_shape,             \
        .forward = reduce_forward, .backward = BW                                                  \
    }

static const ca_op_def rows[] = {
    RED_ROW(CA_OP_SUM, "sum", "SumBackward0", sum_backward, 2, F_DIMS, F_KEEPDIM),
    RED_ROW(CA_OP_MEAN, "mean", "MeanBackward0", mean_backward, 2, F_DIMS, F_KEEPDIM),
    RED_ROW(CA_OP_MAX, "max", "MaxBackward0", argreduce_backward, 3, F_DIMS, F_KEEPDIM,
            {"indices", FIELD_TENSOR, FROM_AUX, 0}),
    RED_ROW(CA_OP_MIN, "min", "MinBackward0", argreduce_backward, 3, F_DIMS, F_KEEPDIM,
            {"indices", FIELD_TENSOR, FROM_AUX, 0}),
    RED_ROW(CA_OP_LOGSUMEXP, "logsumexp", "LogsumexpBackward0", logsumexp_backward, 4, F_DIMS,
            F_KEEPDIM, {"self", FIELD_TENSOR, FROM_INPUT, 0},
            {"result", FIELD_TENSOR, FROM_OUTPUT, 0}),
    {.id = CA_OP_SUM_TO,
     .name = "sum_to",
     .node_name = "SumToSizeBackward0",
     .fusion = CA_FUSE_REDUCTION,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 1,
     .fields = {{"size", FIELD_SIZES, FROM_ATTR, 0}},
     .shape = sum_to_shape,
     .forward = sum_to_forward,
     .backward = sum_to_backward},
};

const ca_op_group cai_ops_reduce = {rows, (int)(sizeof rows / sizeof rows[0])};

/* ---------------------------------------------------------------------------------------
 * Public wrappers
 */
static ca_status reduce_attrs(const char *fn, int n_dims, const int64_t *dims, bool keepdim,
                              ca_attrs *a) {
    if (n_dims < 0 || n_dims > CA_MAX_DIMS)
        return err_set(CA_STATUS_INVALID, "%s: n_dims is %d; pass 0 (every dim) to %d dims", fn,
                       n_dims, CA_MAX_DIMS);
    if (n_dims > 0 && !dims)
        return err_set(CA_STATUS_INVALID, "%s: dims is NULL but n_dims is %d; pass %d dims", fn,
                       n_dims, n_dims);
    *a = (ca_attrs){.i = {keepdim}, .dims = {.n = n_dims}};
    for (int k = 0; k < n_dims; k++)
        a->dims.v[k] = dims[k];
    return CA_OK;
}

static ca_status reduce_call(int op, const char *fn, ca_tensor *x, int n_dims, const int64_t *dims,
                             bool keepdim, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, fn);
    *out = NULL;
    CA_ARG_NOT_NULL(x, fn);
    ca_attrs a;
    CA_CHECK(reduce_attrs(fn, n_dims, dims, keepdim, &a));
    return cai_op_call1(op, x, &a, out);
}

ca_status ca_sum(ca_tensor *x, int n_dims, const int64_t *dims, bool keepdim, ca_tensor **out) {
    return reduce_call(CA_OP_SUM, "ca_sum", x, n_dims, dims, keepdim, out);
}

ca_status ca_mean(ca_tensor *x, int n_dims, const int64_t *dims, bool keepdim, ca_tensor **out) {
    return reduce_call(CA_OP_MEAN, "ca_mean", x, n_dims, dims, keepdim, out);
}

ca_status ca_logsumexp(ca_tensor *x, int n_dims, const int64_t *dims, bool keepdim,
                       ca_tensor **out) {
    return reduce_call(CA_OP_LOGSUMEXP, "ca_logsumexp", x, n_dims, dims, keepdim, out);
}

static ca_status argreduce_call(int op, const char *fn, ca_tensor *x, int n_dims,
                                const int64_t *dims, bool keepdim, ca_tensor **values,
                                ca_tensor **indices) {
    CA_ARG_NOT_NULL(values, fn);
    *values = NULL;
    if (indices)
        *indices = NULL;
    CA_ARG_NOT_NULL(x, fn);
    ca_attrs a;
    CA_CHECK(reduce_attrs(fn, n_dims, dims, keepdim, &a));
    ca_tensor *aux[CA_MAX_AUX] = {0};
    CA_CHECK(cai_op_call(op, 1, &x, &a, values, aux));
    if (indices)
        *indices = aux[0];
    else
        ca_tensor_release(aux[0]);
    for (int k = 1; k < CA_MAX_AUX; k++)
        ca_tensor_release(aux[k]);
    return CA_OK;
}

ca_status ca_max(ca_tensor *x, int n_dims, const int64_t *dims, bool keepdim, ca_tensor **values,
                 ca_tensor **indices) {
    return argreduce_call(CA_OP_MAX, "ca_max", x, n_dims, dims, keepdim, values, indices);
}

ca_status ca_min(ca_tensor *x, int n_dims, const int64_t *dims, bool keepdim, ca_tensor **values,
                 ca_tensor **indices) {
    return argreduce_call(CA_OP_MIN, "ca_min", x, n_dims, dims, keepdim, values, indices);
}
