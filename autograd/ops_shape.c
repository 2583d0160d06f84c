/* ops_shape.c - the shape op group: the views (reshape, view, permute, expand, squeeze,
 * unsqueeze, slice, select), cat, contiguous, masked_fill and the internal slice_backward.
 *
 * A view's forward only computes a new shape, strides and offset over its input's storage
 * (cai_tensor_alias), so writes through either are seen by both and they share one version
 * counter. Derivatives map the gradient back with the inverse view, a sum over expanded
 * dims, or slice_backward (zeros with the gradient placed where the view took its
 * elements).
 */
#include "autograd/builder.h"
#include "autograd/internal.h"

#include <stdlib.h>
#include <string.h>

static ca_attrs attrs_none(void) {
    ca_attrs a;
    memset(&a, 0, sizeof a);
    return a;
}

/* A view of x with x's shape and strides except as the caller changes them. */
typedef struct {
    int ndim;
    int64_t shape[CA_MAX_DIMS];
    int64_t strides[CA_MAX_DIMS];
    int64_t offset;
} geom;

static geom geom_of(const ca_tensor *x) {
    geom g;
    g.ndim = x->ndim;
    memcpy(g.shape, x->shape, sizeof g.shape);
    memcpy(g.strides, x->strides, sizeof g.strides);
    g.offset = x->offset;
    return g;
}

static ca_status geom_alias(ca_tensor *x, const geom *g, ca_tensor **out) {
    return cai_tensor_alias(x, g->ndim, g->shape, g->strides, g->offset, out);
}

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
    return cai_op_call1(CA_OP_PERMUTE, x, &a, out);
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
 * slice / narrow / select
 */

/* Python's clamping of a slice bound against a dim of `size`. */
static int64_t slice_clamp(int64_t v, int64_t size) {
    if (v < 0)
        v += size;
    return v < 0 ? 0 : v > size ? size : v;
}

/* Canonicalise (dim, start, end, step) in a->i[0..3] against a tensor of shape in. */
static ca_status slice_canon(const char *op, const ca_meta *in, ca_attrs *a) {
    if (in->ndim == 0)
        return err_set(CA_STATUS_DIM,
                       "%s: a 0-dim tensor cannot be sliced; reshape it to [1] "
                       "first",
                       op);
    CA_CHECK(cai_dim_normalize(&a->i[0], in->ndim, op));
    if (a->i[3] <= 0)
        return err_set(CA_STATUS_INVALID, "%s: step must be positive, got %lld", op,
                       (long long)a->i[3]);
    int64_t size = in->shape[a->i[0]];
    a->i[1] = slice_clamp(a->i[1], size);
    a->i[2] = slice_clamp(a->i[2], size);
    if (a->i[2] < a->i[1])
        a->i[2] = a->i[1];
    return CA_OK;
}

static ca_status slice_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                             ca_meta *out) {
    CA_CHECK(slice_canon("slice", in, a));
    *out = *in;
    out->shape[a->i[0]] = cai_rule_slice_len(a->i[1], a->i[2], a->i[3]);
    return CA_OK;
}

static ca_status slice_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                               const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                               ca_tensor **aux) {
    ca_tensor *x = in[0];
    int d = (int)a->i[0];
    geom g = geom_of(x);
    g.offset += a->i[1] * x->strides[d];
    g.shape[d] = m->shape[d];
    g.strides[d] *= a->i[3];
    return geom_alias(x, &g, out);
}

static void slice_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    const ca_attrs *a = &n->attrs;
    gin[0] = bx_slice_backward(b, g, &n->in_meta[0], (int)a->i[0], a->i[1], a->i[2], a->i[3]);
}

ca_status ca_slice(ca_tensor *x, int64_t dim, int64_t start, int64_t end, int64_t step,
                   ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_slice");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_slice");
    ca_attrs a = attrs_none();
    a.i[0] = dim;
    a.i[1] = start;
    a.i[2] = end;
    a.i[3] = step;
    return cai_op_call1(CA_OP_SLICE, x, &a, out);
}

ca_status ca_narrow(ca_tensor *x, int64_t dim, int64_t start, int64_t length, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_narrow");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_narrow");
    if (x->ndim == 0)
        return err_set(CA_STATUS_DIM, "narrow: a 0-dim tensor cannot be narrowed; reshape it to "
                                      "[1] first");
    CA_CHECK(cai_dim_normalize(&dim, x->ndim, "narrow"));
    int64_t size = x->shape[dim];
    if (start < -size || start > size)
        return err_set(CA_STATUS_INDEX,
                       "narrow: start %lld is out of range for dim %lld of size "
                       "%lld; expected a start in [%lld, %lld]",
                       (long long)start, (long long)dim, (long long)size, (long long)-size,
                       (long long)size);
    if (start < 0)
        start += size;
    if (length < 0 || start + length > size)
        return err_set(CA_STATUS_INDEX,
                       "narrow: start (%lld) + length (%lld) exceeds dim %lld of "
                       "size %lld; the length must be in [0, %lld]",
                       (long long)start, (long long)length, (long long)dim, (long long)size,
                       (long long)(size - start));
    return ca_slice(x, dim, start, start + length, 1, out);
}

static ca_status select_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                              ca_meta *out) {
    char b1[META_STR_SIZE];
    if (in->ndim == 0)
        return err_set(CA_STATUS_DIM, "select: cannot select from a 0-dim tensor; it has no dim "
                                      "to index");
    CA_CHECK(cai_dim_normalize(&a->i[0], in->ndim, "select"));
    int d = (int)a->i[0];
    int64_t size = in->shape[d], idx = a->i[1];
    if (idx < -size || idx >= size)
        return err_set(CA_STATUS_INDEX,
                       "select: index %lld is out of range for dim %d of size "
                       "%lld (input shape %s); expected an index in [%lld, %lld]",
                       (long long)idx, d, (long long)size, cai_meta_str(in, b1, sizeof b1),
                       (long long)-size, (long long)(size - 1));
    a->i[1] = idx < 0 ? idx + size : idx;
    out->dtype = in->dtype;
    out->ndim = 0;
    for (int i = 0; i < in->ndim; i++)
        if (i != d)
            out->shape[out->ndim++] = in->shape[i];
    return CA_OK;
}

static ca_status select_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                ca_tensor **aux) {
    ca_tensor *x = in[0];
    int d = (int)a->i[0];
    geom g = geom_of(x);
    g.offset += a->i[1] * x->strides[d];
    g.ndim = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (i == d)
            continue;
        g.shape[g.ndim] = x->shape[i];
        g.strides[g.ndim++] = x->strides[i];
    }
    return geom_alias(x, &g, out);
}

static void select_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    int d = (int)n->attrs.i[0];
    int64_t idx = n->attrs.i[1];
    gin[0] = bx_slice_backward(b, bx_unsqueeze(b, g, d), &n->in_meta[0], d, idx, idx + 1, 1);
}

ca_status ca_select(ca_tensor *x, int64_t dim, int64_t index, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_select");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_select");
    ca_attrs a = attrs_none();
    a.i[0] = dim;
    a.i[1] = index;
    return cai_op_call1(CA_OP_SELECT, x, &a, out);
}

/* ---------------------------------------------------------------------------------------
 * slice_backward (internal): zeros(attrs.shape) with x placed at the slice
 */
static ca_status slice_bw_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                                ca_meta *out) {
    ca_meta full = {.dtype = in->dtype, .ndim = a->shape.n};
    if (a->shape.n < 0 || a->shape.n > CA_MAX_DIMS)
        return err_set(CA_STATUS_SHAPE, "slice_backward: full shape has %d dims", a->shape.n);
    memcpy(full.shape, a->shape.v, sizeof(int64_t) * (size_t)a->shape.n);
    CA_CHECK(slice_canon("slice_backward", &full, a));
    cai_rule_error e;
    if (cai_rule_slice_backward(&cai_sizes_concrete, in->ndim, in->shape, full.ndim, full.shape,
                                a->i, &e))
        return cai_rule_raise(&e);
    *out = full;
    return CA_OK;
}

static ca_status slice_bw_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                  const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                  ca_tensor **aux) {
    ca_tensor *r;
    CA_CHECK(cai_tensor_full(m, 0.0, &r));
    int d = (int)a->i[0];
    int64_t strides[CA_MAX_DIMS];
    memcpy(strides, r->strides, sizeof strides);
    strides[d] *= a->i[3];
    char *dst =
        (char *)cai_tensor_ptr(r) + a->i[1] * r->strides[d] * (int64_t)ca_dtype_size(m->dtype);
    ca_status st = cai_op_copy_into(dst, strides, in[0], "slice_backward");
    if (st != CA_OK) {
        ca_tensor_release(r);
        return st;
    }
    *out = r;
    return CA_OK;
}

static void slice_bw_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    const ca_attrs *a = &n->attrs;
    gin[0] = bx_slice(b, g, (int)a->i[0], a->i[1], a->i[2], a->i[3]);
}

/* ---------------------------------------------------------------------------------------
 * cat / stack
 */

/* A 1-D tensor of size 0 joins any cat and contributes nothing (PyTorch's legacy rule). */
static bool cat_skipped(const ca_meta *m, int out_ndim) {
    return m->ndim == 1 && m->shape[0] == 0 && out_ndim != 1;
}

static ca_status cat_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                           ca_meta *out) {
    char b1[META_STR_SIZE], b2[META_STR_SIZE];
    if (n_in < 1)
        return err_set(CA_STATUS_INVALID, "cat: expects at least one tensor");
    int ref = 0;
    for (int i = 0; i < n_in; i++) {
        if (in[i].dtype != in[0].dtype)
            return err_set(CA_STATUS_DTYPE,
                           "cat: tensor %d is %s but tensor 0 is %s; convert "
                           "with ca_to_dtype so all dtypes match",
                           i, ca_dtype_name(in[i].dtype), ca_dtype_name(in[0].dtype));
        if (in[i].ndim == 0)
            return err_set(CA_STATUS_DIM,
                           "cat: tensor %d is 0-dim and cannot be concatenated; "
                           "unsqueeze it (or use ca_stack)",
                           i);
        if (in[ref].ndim == 1 && in[ref].shape[0] == 0)
            ref = i; /* the first tensor that is not a legacy empty one sets the shape */
    }
    const ca_meta *r = &in[ref];
    CA_CHECK(cai_dim_normalize(&a->i[0], r->ndim, "cat"));
    int d = (int)a->i[0];
    *out = *r;
    out->shape[d] = 0;
    for (int i = 0; i < n_in; i++) {
        if (cat_skipped(&in[i], r->ndim))
            continue;
        bool ok = in[i].ndim == r->ndim;
        for (int k = 0; ok && k < r->ndim; k++)
            ok = k == d || in[i].shape[k] == r->shape[k];
        if (!ok)
            return err_set(CA_STATUS_SHAPE,
                           "cat: sizes of tensors must match except in dim %d: tensor %d has "
                           "shape %s but tensor %d has shape %s",
                           d, ref, cai_meta_str(r, b1, sizeof b1), i,
                           cai_meta_str(&in[i], b2, sizeof b2));
        out->shape[d] += in[i].shape[d];
    }
    return CA_OK;
}

static ca_status cat_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                             const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                             ca_tensor **aux) {
    ca_tensor *r;
    CA_CHECK(cai_tensor_new(m, &r));
    int d = (int)a->i[0];
    size_t esz = ca_dtype_size(m->dtype);
    int64_t off = 0;
    for (int i = 0; i < n_in; i++) {
        if (in[i]->ndim != m->ndim) /* a skipped legacy empty tensor */
            continue;
        char *dst = (char *)cai_tensor_ptr(r) + off * r->strides[d] * (int64_t)esz;
        ca_status st = cai_op_copy_into(dst, r->strides, in[i], "cat");
        if (st != CA_OK) {
            ca_tensor_release(r);
            return st;
        }
        off += in[i]->shape[d];
    }
    *out = r;
    return CA_OK;
}

static void cat_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    int d = (int)n->attrs.i[0];
    int64_t off = 0;
    for (int i = 0; i < n->n_in; i++) {
        const ca_meta *m = &n->in_meta[i];
        bool skipped = cat_skipped(m, n->out_meta.ndim);
        int64_t len = skipped ? 0 : m->shape[d];
        if (node_needs_grad(n, i)) {
            ca_bval gi = bx_slice(b, g, d, off, off + len, 1);
            gin[i] = skipped ? bx_reshape(b, gi, m) : gi;
        }
        off += len;
    }
}

ca_status ca_cat(int n, ca_tensor *const *tensors, int64_t dim, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_cat");
    *out = NULL;
    CA_ARG_NOT_NULL(tensors, "ca_cat");
    if (n < 1)
        return err_set(CA_STATUS_INVALID, "cat: expects a non-empty list of tensors, got %d", n);
    ca_attrs a = attrs_none();
    a.i[0] = dim;
    return cai_op_call(CA_OP_CAT, n, tensors, &a, out, NULL);
}

ca_status ca_stack(int n, ca_tensor *const *tensors, int64_t dim, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_stack");
    *out = NULL;
    CA_ARG_NOT_NULL(tensors, "ca_stack");
    if (n < 1)
        return err_set(CA_STATUS_INVALID, "stack: expects a non-empty list of tensors, got %d", n);
    for (int i = 0; i < n; i++) {
        if (!tensors[i])
            return err_set(CA_STATUS_INVALID, "stack: tensor %d is NULL; pass a valid tensor", i);
        ca_meta m0, mi;
        cai_tensor_meta(tensors[0], &m0);
        cai_tensor_meta(tensors[i], &mi);
        if (!cai_meta_same_shape(&m0, &mi)) {
            char b1[META_STR_SIZE], b2[META_STR_SIZE];
            return err_set(CA_STATUS_SHAPE,
                           "stack: expects each tensor to be equal size, but got "
                           "%s at entry 0 and %s at entry %d",
                           cai_meta_str(&m0, b1, sizeof b1), cai_meta_str(&mi, b2, sizeof b2), i);
        }
    }
    CA_CHECK(cai_dim_normalize(&dim, tensors[0]->ndim + 1, "stack"));
    ca_tensor **tmp = cai_mem_calloc((size_t)n, sizeof(ca_tensor *));
    if (!tmp)
        return err_nomem("stack's list of inputs");
    ca_status st = CA_OK;
    for (int i = 0; i < n && st == CA_OK; i++)
        st = ca_unsqueeze(tensors[i], dim, &tmp[i]);
    if (st == CA_OK)
        st = ca_cat(n, tmp, dim, out);
    cai_op_release_all(tmp, n);
    cai_mem_free(tmp);
    return st;
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
 * masked_fill
 */
static ca_status masked_fill_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                                   ca_meta *out) {
    const ca_meta *x = &in[0], *mask = &in[1];
    char b1[META_STR_SIZE], b2[META_STR_SIZE];
    bool ok = mask->ndim <= x->ndim;
    for (int i = 0; ok && i < mask->ndim; i++) {
        int64_t ms = mask->shape[i], xs = x->shape[x->ndim - mask->ndim + i];
        ok = ms == 1 || ms == xs;
    }
    if (!ok)
        return err_set(CA_STATUS_SHAPE,
                       "masked_fill: a mask of shape %s cannot be broadcast to "
                       "the input's shape %s; the mask must broadcast to the "
                       "input (sizes equal or 1, no extra dims)",
                       cai_meta_str(mask, b1, sizeof b1), cai_meta_str(x, b2, sizeof b2));
    *out = *x;
    return CA_OK;
}

static ca_status masked_fill_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                                     const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                                     ca_tensor **aux) {
    ca_tensor *r;
    CA_CHECK(cai_tensor_new(m, &r));
    kern_src src[2];
    cai_tensor_src(in[0], m->ndim, m->shape, &src[0]);
    cai_tensor_src(in[1], m->ndim, m->shape, &src[1]);
    int rc = cai_meta_numel(m) == 0
                 ? 0
                 : cai_kern_pointwise(KPW_MASKED_FILL, kdt(m->dtype), kdt(in[1]->dtype), m->ndim,
                                      m->shape, cai_tensor_ptr(r), r->strides, src, a->s[0], 0);
    ca_status st = cai_op_kern_status(rc, "masked_fill");
    if (st != CA_OK) {
        ca_tensor_release(r);
        return st;
    }
    *out = r;
    return CA_OK;
}

/* where(mask, 0, g) */
static void masked_fill_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    gin[0] = bx_pw(b, KPW_MASKED_FILL, g, bx_saved(b, n, 0), NULL, 0, 0);
}

ca_status ca_masked_fill(ca_tensor *x, ca_tensor *mask, double value, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_masked_fill");
    *out = NULL;
    CA_ARG_NOT_NULL(x, "ca_masked_fill");
    CA_ARG_NOT_NULL(mask, "ca_masked_fill");
    ca_attrs a = attrs_none();
    a.s[0] = value;
    return cai_op_call2(CA_OP_MASKED_FILL, x, mask, &a, out);
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
    {.id = CA_OP_SLICE,
     .name = "slice",
     .node_name = "SliceBackward0",
     .fusion = CA_FUSE_VIEW,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 4,
     .fields = {{"dim", FIELD_INT, FROM_ATTR, 0},
                {"start", FIELD_INT, FROM_ATTR, 1},
                {"end", FIELD_INT, FROM_ATTR, 2},
                {"step", FIELD_INT, FROM_ATTR, 3}},
     .shape = slice_shape,
     .forward = slice_forward,
     .backward = slice_backward},
    {.id = CA_OP_SELECT,
     .name = "select",
     .node_name = "SelectBackward0",
     .fusion = CA_FUSE_VIEW,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 2,
     .fields = {{"dim", FIELD_INT, FROM_ATTR, 0}, {"index", FIELD_INT, FROM_ATTR, 1}},
     .shape = select_shape,
     .forward = select_forward,
     .backward = select_backward},
    {.id = CA_OP_CAT,
     .name = "cat",
     .node_name = "CatBackward0",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 1,
     .n_in_max = -1,
     .n_fields = 1,
     .fields = {{"dim", FIELD_INT, FROM_ATTR, 0}},
     .shape = cat_shape,
     .forward = cat_forward,
     .backward = cat_backward},
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
    {.id = CA_OP_MASKED_FILL,
     .name = "masked_fill",
     .node_name = "MaskedFillBackward0",
     .fusion = CA_FUSE_POINTWISE,
     .n_in_min = 2,
     .n_in_max = 2,
     .nondiff_inputs = 1u << 1,
     .n_fields = 1,
     .fields = {{"mask", FIELD_TENSOR, FROM_INPUT, 1}},
     .shape = masked_fill_shape,
     .forward = masked_fill_forward,
     .backward = masked_fill_backward,
     .pw = KPW_MASKED_FILL},
    {.id = CA_OP_SLICE_BACKWARD,
     .name = "slice_backward",
     .node_name = "SliceBackwardBackward0",
     .fusion = CA_FUSE_OPAQUE,
     .n_in_min = 1,
     .n_in_max = 1,
     .n_fields = 4,
     .fields = {{"dim", FIELD_INT, FROM_ATTR, 0},
                {"start", FIELD_INT, FROM_ATTR, 1},
                {"end", FIELD_INT, FROM_ATTR, 2},
                {"step", FIELD_INT, FROM_ATTR, 3}},
     .shape = slice_bw_shape,
     .forward = slice_bw_forward,
     .backward = slice_bw_backward},
};

const ca_op_group cai_ops_shape = {rows, sizeof rows / sizeof rows[0]};
