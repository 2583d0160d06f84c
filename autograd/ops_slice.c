/* ops_slice.c - the slicing op group: slice, narrow and select (views of part of a tensor),
 * the internal slice_backward, cat and stack (whose derivatives are slices), and
 * masked_fill.
 *
 * slice and select are views like those of ops_shape.c: a new shape, strides and offset over
 * the input's storage. Their derivatives use slice_backward: zeros with the gradient placed
 * where the view took its elements.
 */
#include "autograd/builder.h"
#include "autograd/internal.h"
#include "autograd/ops_shape.h"

#include <string.h>

/* ---------------------------------------------------------------------------------------
 * slice / narrow / select
 */

/* A slice's canonical bounds (attrs i[1] and i[2]) say where each bound sits in a form that
 * holds for every size of the dim that gives the same form, so that the compiled backward's
 * key stays the same when a dynamic dim changes and x[1:-1] does not recompile:
 *  - SLICE_FROM_START(p), p >= 0: position p (a bound in [0, size] that the user gave as a
 *    number from the start, or one clamped to 0);
 *  - SLICE_FROM_END(k), k <= 0: position size + k (a bound the user gave from the end,
 *    -2 or INT64_MAX, or one clamped to the size).
 * slice_pos turns a canonical bound back into a position; in a trace the size may be a
 * symbolic handle, and bx_slice_pos keeps the position symbolic. */
#define SLICE_FROM_END(k) ((k)-1)

static int64_t slice_pos(int64_t bound, int64_t size) {
    return bound >= 0 ? bound : size + bound + 1;
}

static int64_t bx_slice_pos(ca_builder *b, int64_t bound, int64_t size) {
    return bound >= 0 ? bound : bx_size_add(b, size, bound + 1);
}

/* Python's clamping of a user's bound against a dim of `size`, in canonical form. */
static int64_t slice_bound(int64_t v, int64_t size) {
    if (v >= 0)
        return v <= size ? v : SLICE_FROM_END(0);
    return v >= -size ? SLICE_FROM_END(v) : 0;
}

/* Canonicalise (dim, start, end, step) in a->i[0..3] against a tensor of shape in; an end
 * before the start becomes the start (an empty slice). */
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
    a->i[1] = slice_bound(a->i[1], size);
    a->i[2] = slice_bound(a->i[2], size);
    if (slice_pos(a->i[2], size) < slice_pos(a->i[1], size))
        a->i[2] = a->i[1];
    return CA_OK;
}

/* The start and end positions of a canonical slice of a dim of `size`. */
static void slice_span(const ca_attrs *a, int64_t size, int64_t *start, int64_t *end) {
    *start = slice_pos(a->i[1], size);
    *end = slice_pos(a->i[2], size);
}

static ca_status slice_shape(const ca_op_def *row, const ca_meta *in, int n_in, ca_attrs *a,
                             ca_meta *out) {
    CA_CHECK(slice_canon("slice", in, a));
    int64_t start, end;
    slice_span(a, in->shape[a->i[0]], &start, &end);
    *out = *in;
    out->shape[a->i[0]] = cai_rule_slice_len(start, end, a->i[3]);
    return CA_OK;
}

static ca_status slice_forward(const ca_op_def *row, ca_tensor *const *in, int n_in,
                               const ca_attrs *a, const ca_meta *m, ca_tensor **out,
                               ca_tensor **aux) {
    ca_tensor *x = in[0];
    int d = (int)a->i[0];
    geom g = geom_of(x);
    g.offset += slice_pos(a->i[1], x->shape[d]) * x->strides[d];
    g.shape[d] = m->shape[d];
    g.strides[d] *= a->i[3];
    return geom_alias(x, &g, out);
}

/* The positions come from the input's size, so a trace with that size symbolic places the
 * gradient at a symbolic start. */
static void slice_backward(ca_builder *b, const ca_node *n, ca_bval g, ca_bval *gin) {
    const ca_attrs *a = &n->attrs;
    int d = (int)a->i[0];
    int64_t size = n->in_meta[0].shape[d];
    int64_t start = bx_slice_pos(b, a->i[1], size), end = bx_slice_pos(b, a->i[2], size);
    gin[0] = bx_slice_backward(b, g, &n->in_meta[0], d, start, end, a->i[3]);
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
    int64_t start, end;
    slice_span(a, full.shape[a->i[0]], &start, &end);
    cai_rule_error e;
    if (cai_rule_slice_backward(&cai_sizes_concrete, in->ndim, in->shape, full.ndim, full.shape,
                                (int)a->i[0], cai_rule_slice_len(start, end, a->i[3]), &e))
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
    int64_t start = slice_pos(a->i[1], m->shape[d]);
    char *dst =
        (char *)cai_tensor_ptr(r) + start * r->strides[d] * (int64_t)ca_dtype_size(m->dtype);
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
    int d = (int)a->i[0];
    int64_t size = n->out_meta.shape[d];
    int64_t start = bx_slice_pos(b, a->i[1], size), end = bx_slice_pos(b, a->i[2], size);
    gin[0] = bx_slice(b, g, d, start, end, a->i[3]);
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
            return err_set(CA_STATUS_SHAPE, /* torch's RuntimeError */
                           "zero-dimensional tensor (at position %d) cannot be "
                           "concatenated; unsqueeze it (or use ca_stack)",
                           i);
        if (in[ref].ndim == 1 && in[ref].shape[0] == 0)
            ref = i; /* the first tensor that is not a legacy empty one sets the shape */
    }
    const ca_meta *r = &in[ref];
    if (r->ndim == 1 && r->shape[0] == 0) { /* all legacy empty: [0], whatever the dim */
        a->i[0] = 0;
        *out = *r;
        return CA_OK;
    }
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
        int64_t end = bx_size_add(b, off, len); /* a size expression in a trace */
        if (node_needs_grad(n, i)) {
            ca_bval gi = bx_slice(b, g, d, off, end, 1);
            gin[i] = skipped ? bx_reshape(b, gi, m) : gi;
        }
        off = end;
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

const ca_op_group cai_ops_slice = {rows, sizeof rows / sizeof rows[0]};
