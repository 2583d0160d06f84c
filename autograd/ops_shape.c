/* ops_shape.c - the view op group: reshape, view (and flatten), permute (and transpose),
 * expand, squeeze, unsqueeze, and contiguous, which copies a view into fresh memory.
 *
 * A view's forward only computes a new shape, strides and offset over its input's storage
 * (cai_tensor_alias), so writes through either are seen by both and they share one version
 * counter. Derivatives map the gradient back with the inverse view or a sum over expanded
 * dims. The views that take part of a tensor (slice, narrow, select) are in ops_slice.c.
 */
#include "autograd/builder.h"
#include "autograd/internal.h"
#include "autograd/ops_shape.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * reshape / view
 */

/* Strides that let a tensor of (oshape, ostrides) be read as nshape without copying, if
 * they exist. Old dims are grouped into runs that are contiguous among themselves; each
 * run must be covered exactly by consecutive new dims, which then step through the run
 * row-major from its innermost stride. */
static bool view_strides(int on, const int64_t *oshape, const int64_t *ostrides, int nn,
                         const int64_t *nshape, int64_t *nstrides) {
    int64_t numel = 1;
    for (int d = 0; d < on; d++)
        numel *= oshape[d];
    if (numel <= 1) { /* no element needs a second stride: any layout reads the same */
        cai_tensor_contiguous_strides(nn, nshape, nstrides);
        return true;
    }
    int nd = nn - 1;
    int64_t run_numel = 1, view_numel = 1, base = ostrides[on - 1];
    for (int od = on - 1; od >= 0; od--) {
        run_numel *= oshape[od];
        bool run_ends = od == 0 || (oshape[od - 1] != 1 && ostrides[od - 1] != run_numel * base);
        if (!run_ends)
            continue;
        while (nd >= 0 && (view_numel < run_numel || nshape[nd] == 1)) {
            nstrides[nd] = view_numel * base;
            view_numel *= nshape[nd];
            nd--;
        }
        if (view_numel != run_numel)
            return false;
        if (od > 0) {
            base = ostrides[od - 1];
            run_numel = view_numel = 1;
        }
    }
    return nd < 0;
}

/* Resolve one -1 in the target and check that it keeps the number of elements. */
static ca_status reshape_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                               ca_meta *out) {
    ca_ints *s = &a->shape;
    if (s->n < 0 || s->n > CA_MAX_DIMS)
        return err_set(CA_STATUS_SHAPE, "%s: target has %d dims; cagrad supports 0 to %d",
                       row->name, s->n, CA_MAX_DIMS);
    cai_rule_error e;
    int infer;
    if (cai_rule_reshape(&cai_sizes_concrete, row->name, in->ndim, in->shape, s->n, s->v, &infer,
                         &e))
        return cai_rule_raise(&e);
    out->dtype = in->dtype;
    out->ndim = s->n;
    memcpy(out->shape, s->v, sizeof(int64_t) * (size_t)s->n);
    return CA_OK;
}

static ca_status reshape_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                 const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                 ca_tensor **aux) {
    ca_tensor *x = in[0];
    int64_t strides[CA_MAX_DIMS];
    if (view_strides(x->ndim, x->shape, x->strides, m->ndim, m->shape, strides))
        return cai_tensor_alias(x, m->ndim, m->shape, strides, x->offset, out);
    if (row->id == CA_OP_VIEW) {
        char b1[META_STR_SIZE], b2[META_STR_SIZE], b3[META_STR_SIZE];
        return err_set(CA_STATUS_SHAPE,
                       "view: view size is not compatible with input tensor's size and stride "
                       "(input shape %s, strides %s, target %s): at least one dimension spans "
                       "across two contiguous subspaces; use ca_reshape instead (it copies)",
                       cai_err_shape_str(x->ndim, x->shape, b1, sizeof b1),
                       cai_err_shape_str(x->ndim, x->strides, b2, sizeof b2),
                       cai_meta_str(m, b3, sizeof b3));
    }
    ca_tensor *c;
    CA_CHECK(cai_tensor_contiguous(x, &c));
    cai_tensor_contiguous_strides(m->ndim, m->shape, strides);
    ca_status st = cai_tensor_alias(c, m->ndim, m->shape, strides, c->offset, out);
    ca_tensor_release(c);
    return st;
}

/* reshape, view, squeeze and unsqueeze: back to the input's shape */
static void to_input_shape_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    gin[0] = bx_reshape(b, g, &n->in_meta[0]);
}

static ca_status shape_call(int op, const char *fn, ca_tensor *x, int ndim, const int64_t *shape,
                            ca_tensor **out) {
    CA_ARG_NOT_NULL(out, fn);
    *out = NULL;
    CA_ARG_NOT_NULL(x, fn);
    if (ndim < 0 || ndim > CA_MAX_DIMS)
        return err_set(CA_STATUS_SHAPE, "%s: ndim %d is out of range; cagrad supports 0 to %d dims",
                       fn, ndim, CA_MAX_DIMS);
    if (ndim > 0)
        CA_ARG_NOT_NULL(shape, fn);
    ca_attrs a = attrs_none();
    a.shape.n = ndim;
    if (ndim > 0)
        memcpy(a.shape.v, shape, sizeof(int64_t) * (size_t)ndim);
    return cai_op_call1(op, x, &a, out);
}

ca_status ca_reshape(ca_tensor *x, int ndim, const int64_t *shape, ca_tensor **out) {
    return shape_call(CA_OP_RESHAPE, "ca_reshape", x, ndim, shape, out);
}

ca_status ca_view(ca_tensor *x, int ndim, const int64_t *shape, ca_tensor **out) {
    return shape_call(CA_OP_VIEW, "ca_view", x, ndim, shape, out);
}

ca_status cai_unsafe_view(ca_tensor *x, int ndim, const int64_t *shape, ca_tensor **out) {
    return shape_call(CA_OP_UNSAFE_VIEW, "cai_unsafe_view", x, ndim, shape, out);
}

ca_status ca_flatten(ca_tensor *x, int64_t start_dim, int64_t end_dim, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_flatten");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_flatten");
    CA_CHECK(cai_dim_normalize(&start_dim, x->ndim, "flatten"));
    CA_CHECK(cai_dim_normalize(&end_dim, x->ndim, "flatten"));
    if (start_dim > end_dim)
        return err_set(CA_STATUS_DIM,
                       "flatten: start_dim %lld comes after end_dim %lld; pass "
                       "start_dim <= end_dim",
                       (long long)start_dim, (long long)end_dim);
    if (x->ndim == 0) {
        int64_t one = 1;
        return ca_reshape(x, 1, &one, out);
    }
    if (start_dim == end_dim) { /* nothing to merge: x itself, as PyTorch */
        *out = ca_tensor_retain(x);
        return CA_OK;
    }
    int64_t shape[CA_MAX_DIMS] = {0};
    int nd = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (d <= start_dim || d > end_dim)
            shape[nd++] = x->shape[d];
        else
            shape[nd - 1] *= x->shape[d];
    }
    return ca_reshape(x, nd, shape, out);
}

/* ---------------------------------------------------------------------------------------
 * permute / transpose
 */
static ca_status permute_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                               ca_meta *out) {
    cai_rule_error e;
    if (cai_rule_permute(&cai_sizes_concrete, in->ndim, in->shape, a->dims.n, a->dims.v, out->shape,
                         &e))
        return cai_rule_raise(&e);
    out->dtype = in->dtype;
    out->ndim = in->ndim;
    return CA_OK;
}

static ca_status permute_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                 const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                 ca_tensor **aux) {
    ca_tensor *x = in[0];
    geom g = geom_of(x);
    for (int i = 0; i < a->dims.n; i++) {
        g.shape[i] = x->shape[a->dims.v[i]];
        g.strides[i] = x->strides[a->dims.v[i]];
    }
    return geom_alias(x, &g, out);
}

static void permute_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    ca_ints inv = {.n = n->attrs.dims.n};
    for (int i = 0; i < inv.n; i++)
        inv.v[n->attrs.dims.v[i]] = i;
    gin[0] = bx_permute(b, g, &inv);
}

ca_status ca_permute(ca_tensor *x, int ndim, const int64_t *perm, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_permute");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_permute");
    if (ndim < 0 || ndim > CA_MAX_DIMS)
        return err_set(CA_STATUS_DIM,
                       "permute: the permutation has %d entries but the input has "
                       "%d dims; give one entry per dim",
                       ndim, x->ndim);
    if (ndim > 0)
        CA_ARG_NOT_NULL(perm, "ca_permute");
    ca_attrs a = attrs_none();
    a.dims.n = ndim;
    if (ndim > 0)
        memcpy(a.dims.v, perm, sizeof(int64_t) * (size_t)ndim);
    return cai_op_call1(CA_OP_PERMUTE, x, &a, out);
}

ca_status ca_transpose(ca_tensor *x, int64_t dim0, int64_t dim1, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_transpose");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_transpose");
    CA_CHECK(cai_dim_normalize(&dim0, x->ndim, "transpose"));
    CA_CHECK(cai_dim_normalize(&dim1, x->ndim, "transpose"));
    ca_attrs a = attrs_none();
    a.dims.n = x->ndim;
    for (int d = 0; d < x->ndim; d++)
        a.dims.v[d] = d == dim0 ? dim1 : d == dim1 ? dim0 : d;
    return cai_op_call1(CA_OP_TRANSPOSE, x, &a, out);
}

ca_status ca_t(ca_tensor *x, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_t");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_t");
    if (x->ndim > 2)
        return err_set(CA_STATUS_DIM,
                       "t() expects a tensor with <= 2 dimensions, but self is %dD; use "
                       "transpose(dim0, dim1) or permute()",
                       x->ndim);
    ca_attrs a = attrs_none();
    a.dims.n = x->ndim;
    for (int d = 0; d < x->ndim; d++)
        a.dims.v[d] = x->ndim - 1 - d;
    return cai_op_call1(CA_OP_T, x, &a, out);
}

/* ---------------------------------------------------------------------------------------
 * expand
 */
static ca_status expand_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                              ca_meta *out) {
    ca_ints *s = &a->shape;
    cai_rule_error e;
    if (cai_rule_expand(&cai_sizes_concrete, in->ndim, in->shape, s->n, s->v, &e))
        return cai_rule_raise(&e);
    out->dtype = in->dtype;
    out->ndim = s->n;
    memcpy(out->shape, s->v, sizeof(int64_t) * (size_t)s->n);
    return CA_OK;
}

static ca_status expand_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                ca_tensor **aux) {
    ca_tensor *x = in[0];
    int64_t strides[CA_MAX_DIMS];
    int lead = m->ndim - x->ndim;
    for (int i = 0; i < m->ndim; i++) {
        int d = i - lead;
        strides[i] = d < 0 || x->shape[d] != m->shape[i] ? 0 : x->strides[d];
    }
    return cai_tensor_alias(x, m->ndim, m->shape, strides, x->offset, out);
}

static void expand_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    gin[0] = bx_sum_to(b, g, &n->in_meta[0]);
}

ca_status ca_expand(ca_tensor *x, int ndim, const int64_t *shape, ca_tensor **out) {
    return shape_call(CA_OP_EXPAND, "ca_expand", x, ndim, shape, out);
}

/* ---------------------------------------------------------------------------------------
 * squeeze / unsqueeze
 */
static int cmp_i64(const void *pa, const void *pb) {
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

static bool ints_has(const ca_ints *s, int64_t v) {
    for (int i = 0; i < s->n; i++)
        if (s->v[i] == v)
            return true;
    return false;
}

/* Canonical dims: normalised, sorted, unique. Listed dims whose size is not 1 stay in the
 * list (squeezing them is a no-op), so an empty list keeps meaning "every size-1 dim". */
static ca_status squeeze_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                               ca_meta *out) {
    ca_ints *dims = &a->dims;
    if (dims->n == 0) {
        for (int d = 0; d < in->ndim; d++)
            if (in->shape[d] == 1)
                dims->v[dims->n++] = d;
    } else {
        for (int i = 0; i < dims->n; i++)
            CA_CHECK(cai_dim_normalize(&dims->v[i], in->ndim, "squeeze"));
        qsort(dims->v, (size_t)dims->n, sizeof(int64_t), cmp_i64);
        int u = 0;
        for (int i = 0; i < dims->n; i++)
            if (u == 0 || dims->v[u - 1] != dims->v[i])
                dims->v[u++] = dims->v[i];
        dims->n = u;
    }
    out->dtype = in->dtype;
    out->ndim = 0;
    for (int d = 0; d < in->ndim; d++)
        if (!(in->shape[d] == 1 && ints_has(dims, d)))
            out->shape[out->ndim++] = in->shape[d];
    return CA_OK;
}

static ca_status squeeze_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                 const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                 ca_tensor **aux) {
    ca_tensor *x = in[0];
    geom g = geom_of(x);
    g.ndim = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (x->shape[d] == 1 && ints_has(&a->dims, d))
            continue;
        g.shape[g.ndim] = x->shape[d];
        g.strides[g.ndim++] = x->strides[d];
    }
    return geom_alias(x, &g, out);
}

ca_status ca_squeeze(ca_tensor *x, int n_dims, const int64_t *dims, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_squeeze");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_squeeze");
    if (n_dims < 0 || n_dims > CA_MAX_DIMS)
        return err_set(CA_STATUS_DIM,
                       "squeeze: %d dims given; pass 0 to %d dims (0 squeezes "
                       "every size-1 dim)",
                       n_dims, CA_MAX_DIMS);
    if (n_dims > 0)
        CA_ARG_NOT_NULL(dims, "ca_squeeze");
    ca_attrs a = attrs_none();
    a.dims.n = n_dims;
    if (n_dims > 0)
        memcpy(a.dims.v, dims, sizeof(int64_t) * (size_t)n_dims);
    return cai_op_call1(CA_OP_SQUEEZE, x, &a, out);
}

static ca_status unsqueeze_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                                 ca_meta *out) {
    cai_rule_error e;
    if (cai_rule_unsqueeze(&cai_sizes_concrete, in->ndim, in->shape, &a->i[0], out->shape, &e))
        return cai_rule_raise(&e);
    out->dtype = in->dtype;
    out->ndim = in->ndim + 1;
    return CA_OK;
}

static ca_status unsqueeze_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                   const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                   ca_tensor **aux) {
    ca_tensor *x = in[0];
    int d = (int)a->i[0];
    geom g = geom_of(x);
    g.ndim = x->ndim + 1;
    for (int i = 0, j = 0; i < g.ndim; i++) {
        if (i == d) {
            g.shape[i] = 1;
            g.strides[i] = d < x->ndim ? x->shape[d] * x->strides[d] : 1;
        } else {
            g.shape[i] = x->shape[j];
            g.strides[i] = x->strides[j++];
        }
    }
    return geom_alias(x, &g, out);
}

ca_status ca_unsqueeze(ca_tensor *x, int64_t dim, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_unsqueeze");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_unsqueeze");
    ca_attrs a = attrs_none();
    a.i[0] = dim;
    return cai_op_call1(CA_OP_UNSQUEEZE, x, &a, out);
}

/* ---------------------------------------------------------------------------------------
 * contiguous
 */
static ca_status same_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                            ca_meta *out) {
    *out = in[0];
    return CA_OK;
}

/* Reached only for non-contiguous inputs from ca_contiguous; a builder may also ask for an
 * already contiguous value, which then gets a fresh header over the same storage. */
static ca_status contiguous_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                    const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                    ca_tensor **aux) {
    ca_tensor *x = in[0];
    if (ca_tensor_is_contiguous(x)) {
        geom g = geom_of(x);
        return geom_alias(x, &g, out);
    }
    return cai_tensor_contiguous(x, out);
}

static void identity_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    gin[0] = g;
}

ca_status ca_contiguous(ca_tensor *x, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_contiguous");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_contiguous");
    if (ca_tensor_is_contiguous(x)) {
        *out = ca_tensor_retain(x);
        return CA_OK;
    }
    return cai_op_call1(CA_OP_CONTIGUOUS, x, NULL, out);
}

/* ---------------------------------------------------------------------------------------
 * The rows
 */
static const ca_op_def rows[] = {
    {.id = CA_OP_RESHAPE,
     .name = "reshape",
     .node_name = "ViewBackward0",
     .fusion = CA_FUSE_VIEW,
     .n_in_min = 1,
     .n_in_max = 1,
     .shape = reshape_shape,
     .forward = reshape_forward,
     .backward = to_input_shape_backward},
    {.id = CA_OP_VIEW,
     .name = "view",
     .node_name = "ViewBackward0",
     .fusion = CA_FUSE_VIEW,
     .n_in_min = 1,
     .n_in_max = 1,
     .shape = reshape_shape,
     .forward = reshape_forward,
     .backward = to_input_shape_backward},
    {.id = CA_OP_UNSAFE_VIEW,
     .name = "_unsafe_view",
     .node_name = "UnsafeViewBackward0",
     .fusion = CA_FUSE_VIEW,
     .n_in_min = 1,
     .n_in_max = 1,
     .shape = reshape_shape,
     .forward = reshape_forward,
     .backward = to_input_shape_backward},
    {.id = CA_OP_PERMUTE,
     .name = "permute",
     .node_name = "PermuteBackward0",
     .fusion = CA_FUSE_VIEW,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 1,
     .fields = {{"dims", FIELD_DIMS, FROM_ATTR, 0}},
     .shape = permute_shape,
     .forward = permute_forward,
     .backward = permute_backward},
    {.id = CA_OP_TRANSPOSE,
     .name = "transpose",
     .node_name = "TransposeBackward0",
     .fusion = CA_FUSE_VIEW,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 1,
     .fields = {{"dims", FIELD_DIMS, FROM_ATTR, 0}},
     .shape = permute_shape,
     .forward = permute_forward,
     .backward = permute_backward},
    {.id = CA_OP_T,
     .name = "t",
     .node_name = "TBackward0",
     .fusion = CA_FUSE_VIEW,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 1,
     .fields = {{"dims", FIELD_DIMS, FROM_ATTR, 0}},
     .shape = permute_shape,
     .forward = permute_forward,
     .backward = permute_backward},
    {.id = CA_OP_EXPAND,
     .name = "expand",
     .node_name = "ExpandBackward0",
     .fusion = CA_FUSE_VIEW,
     .n_in_min = 1,
     .n_in_max = 1,
     .shape = expand_shape,
     .forward = expand_forward,
     .backward = expand_backward},
    {.id = CA_OP_SQUEEZE,
     .name = "squeeze",
     .node_name = "SqueezeBackward0",
     .fusion = CA_FUSE_VIEW,
     .n_in_min = 1,
     .n_in_max = 1,
     .shape = squeeze_shape,
     .forward = squeeze_forward,
     .backward = to_input_shape_backward},
    {.id = CA_OP_UNSQUEEZE,
     .name = "unsqueeze",
     .node_name = "UnsqueezeBackward0",
     .fusion = CA_FUSE_VIEW,
     .n_in_min = 1,
     .n_in_max = 1,
     .shape = unsqueeze_shape,
     .forward = unsqueeze_forward,
     .backward = to_input_shape_backward},
    {.id = CA_OP_CONTIGUOUS,
     .name = "contiguous",
     .node_name = "CloneBackward0",
     .fusion = CA_FUSE_POINTWISE,
     .n_in_min = 1,
     .n_in_max = 1,
     .shape = same_shape,
     .forward = contiguous_forward,
     .backward = identity_backward,
     .pw = KPW_COPY},
};

const ca_op_group cai_ops_shape = {rows, sizeof rows / sizeof rows[0]};
