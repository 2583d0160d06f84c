/* test_ops_shape.c - Criterion suite `shape`: the views (reshape, view, flatten, permute,
 * transpose, expand, squeeze, unsqueeze, slice, narrow, select), cat, stack, contiguous,
 * masked_fill and the internal slice_backward. Forward values against index-mapping
 * references on contiguous and non-contiguous inputs, aliasing where PyTorch aliases,
 * gradients against finite differences, and the error messages.
 */
#include "testutil.h"

#include "autograd/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GC_TOL 1e-7

/* ---------------------------------------------------------------------------------------
 * Helpers
 */
static const ca_dtype float_dtypes[2] = {CA_FLOAT32, CA_FLOAT64};

/* 0, 1, 2, ... in row-major order */
static ca_tensor *iota(ca_dtype dt, int nd, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= shape[d];
    double v[256];
    cr_assert(n <= 256, "iota: too many elements");
    for (int64_t i = 0; i < n; i++)
        v[i] = (double)i;
    return tu_from(dt, nd, shape, v, false);
}

/* The view shares x's storage: same buffer, and one version counter. */
static void assert_aliases(ca_tensor *view, ca_tensor *base) {
    cr_assert(view->storage == base->storage, "expected a view sharing the input's storage");
    uint64_t before = ca_tensor_version(view);
    bool prev = ca_set_grad_enabled(false);
    TU_OK(ca_fill_(base, 42.0));
    ca_set_grad_enabled(prev);
    cr_assert_eq(ca_tensor_version(view), ca_tensor_version(base));
    cr_assert_gt(ca_tensor_version(view), before, "the view's version did not move");
    for (int64_t i = 0; i < ca_tensor_numel(view); i++)
        cr_assert_eq(tu_get(view, i), 42.0, "write through the base not seen at %lld",
                     (long long)i);
}

/* gradcheck bodies: ctx carries the op's arguments */
typedef struct {
    int n;
    int64_t v[CA_MAX_DIMS];
} ints_ctx;

typedef struct {
    int64_t a, b, c, d;
} args_ctx;

static ca_status f_reshape(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    ints_ctx *c = ctx;
    return ca_reshape(in[0], c->n, c->v, out);
}

static ca_status f_view(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    ints_ctx *c = ctx;
    return ca_view(in[0], c->n, c->v, out);
}

static ca_status f_permute(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    ints_ctx *c = ctx;
    return ca_permute(in[0], c->n, c->v, out);
}

static ca_status f_expand(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    ints_ctx *c = ctx;
    return ca_expand(in[0], c->n, c->v, out);
}

static ca_status f_squeeze(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    ints_ctx *c = ctx;
    return ca_squeeze(in[0], c->n, c->v, out);
}

static ca_status f_unsqueeze(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ca_unsqueeze(in[0], ((args_ctx *)ctx)->a, out);
}

static ca_status f_transpose(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    args_ctx *c = ctx;
    return ca_transpose(in[0], c->a, c->b, out);
}

static ca_status f_flatten(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    args_ctx *c = ctx;
    return ca_flatten(in[0], c->a, c->b, out);
}

static ca_status f_slice(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    args_ctx *c = ctx;
    return ca_slice(in[0], c->a, c->b, c->c, c->d, out);
}

static ca_status f_narrow(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    args_ctx *c = ctx;
    return ca_narrow(in[0], c->a, c->b, c->c, out);
}

static ca_status f_select(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    args_ctx *c = ctx;
    return ca_select(in[0], c->a, c->b, out);
}

static ca_status f_contiguous(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ca_contiguous(in[0], out);
}

static ca_status f_cat3(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ca_cat(3, in, ((args_ctx *)ctx)->a, out);
}

static ca_status f_stack3(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ca_stack(3, in, ((args_ctx *)ctx)->a, out);
}

static ca_status f_masked_fill(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ca_masked_fill(in[0], in[1], -3.5, out);
}

/* ---------------------------------------------------------------------------------------
 * reshape / view / flatten
 */
Test(shape, reshape_forward_values_and_infer) {
    for (int k = 0; k < 2; k++) {
        ca_tensor *x = iota(float_dtypes[k], TU_SHAPE(2, 3, 4)), *y;
        TU_OK(ca_reshape(x, TU_SHAPE(4, -1), &y));
        tu_assert_shape(y, TU_SHAPE(4, 6));
        cr_assert_eq(ca_tensor_dtype(y), float_dtypes[k]);
        for (int64_t i = 0; i < 24; i++)
            cr_assert_eq(tu_get(y, i), (double)i);
        assert_aliases(y, x);
        ca_tensor_release(y);
        ca_tensor_release(x);
    }
}

Test(shape, reshape_noncontig_copies_when_needed) {
    ca_tensor *x = tu_randn_noncontig(CA_FLOAT32, TU_SHAPE(3, 4), false), *y;
    TU_OK(ca_reshape(x, TU_SHAPE(12), &y));
    for (int64_t i = 0; i < 12; i++)
        cr_assert_eq(tu_get(y, i), tu_get(x, i), "element %lld", (long long)i);
    cr_assert(y->storage != x->storage, "a transposed input cannot be flattened without a copy");
    cr_assert(ca_tensor_is_contiguous(y));
    ca_tensor_release(y);
    ca_tensor_release(x);
}

Test(shape, reshape_noncontig_aliases_when_strides_allow) {
    /* a column slice [4, 2] of a [4, 6] tensor: splitting rows keeps strides valid */
    ca_tensor *base = iota(CA_FLOAT64, TU_SHAPE(4, 6)), *x, *y, *z;
    TU_OK(ca_slice(base, 1, 2, 4, 1, &x));
    TU_OK(ca_reshape(x, TU_SHAPE(2, 2, 2, 1), &y));
    for (int64_t i = 0; i < 8; i++)
        cr_assert_eq(tu_get(y, i), tu_get(x, i));
    cr_assert_eq(ca_tensor_strides(y)[0], 12);
    cr_assert_eq(ca_tensor_strides(y)[1], 6);
    cr_assert_eq(ca_tensor_strides(y)[2], 1);
    /* a transposed tensor keeps aliasing when a dim is only split */
    TU_OK(ca_transpose(base, 0, 1, &z));
    ca_tensor *w;
    TU_OK(ca_reshape(z, TU_SHAPE(3, 2, 4), &w));
    for (int64_t i = 0; i < 24; i++)
        cr_assert_eq(tu_get(w, i), tu_get(z, i));
    /* merging dims 0 and 1 of a [2, 3, 2] slice of [2, 3, 4] needs no copy either */
    ca_tensor *b3 = iota(CA_FLOAT64, TU_SHAPE(2, 3, 4)), *s3, *m3;
    TU_OK(ca_slice(b3, 2, 0, 2, 1, &s3));
    TU_OK(ca_reshape(s3, TU_SHAPE(6, 2), &m3));
    cr_assert_eq(ca_tensor_strides(m3)[0], 4);
    cr_assert_eq(ca_tensor_strides(m3)[1], 1);
    for (int64_t i = 0; i < 12; i++)
        cr_assert_eq(tu_get(m3, i), tu_get(s3, i));
    assert_aliases(m3, b3);
    assert_aliases(w, base);
    cr_assert(y->storage == base->storage);
    ca_tensor *all[] = {base, x, y, z, w, b3, s3, m3};
    for (int i = 0; i < 8; i++)
        ca_tensor_release(all[i]);
}

Test(shape, reshape_zero_dim_and_empty) {
    ca_tensor *s = tu_from(CA_FLOAT64, 0, NULL, (double[]){7}, false), *a, *b, *e, *f;
    TU_OK(ca_reshape(s, TU_SHAPE(1, 1), &a));
    tu_assert_shape(a, TU_SHAPE(1, 1));
    TU_OK(ca_reshape(a, 0, NULL, &b));
    cr_assert_eq(ca_tensor_ndim(b), 0);
    cr_assert_eq(tu_get(b, 0), 7.0);
    ca_tensor *z = tu_from(CA_FLOAT32, TU_SHAPE(0, 3), NULL, false);
    TU_OK(ca_reshape(z, TU_SHAPE(3, -1), &e));
    tu_assert_shape(e, TU_SHAPE(3, 0));
    TU_OK(ca_reshape(z, TU_SHAPE(-1), &f));
    tu_assert_shape(f, TU_SHAPE(0));
    ca_tensor *bad = NULL;
    TU_FAILS(ca_reshape(z, TU_SHAPE(0, -1), &bad), CA_STATUS_SHAPE, "ambiguous");
    ca_tensor *all[] = {s, a, b, z, e, f};
    for (int i = 0; i < 6; i++)
        ca_tensor_release(all[i]);
}

Test(shape, reshape_grad) {
    ints_ctx c = {3, {2, -1, 3}};
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(3, 4), true);
    tu_gradcheck(f_reshape, 1, &x, &c, GC_TOL, GC_TOL);
    ca_tensor *nc = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3, 4), true);
    tu_gradcheck(f_reshape, 1, &nc, &c, GC_TOL, GC_TOL);
    ca_tensor *y;
    TU_OK(ca_reshape(x, TU_SHAPE(12), &y));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "ViewBackward0");
    ca_tensor_release(y);
    ca_tensor_release(x);
    ca_tensor_release(nc);
}

Test(shape, reshape_errors) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3), false), *y = NULL;
    TU_FAILS(ca_reshape(x, TU_SHAPE(-1, -1), &y), CA_STATUS_SHAPE, "only one dimension");
    cr_assert_null(y);
    TU_FAILS(ca_reshape(x, TU_SHAPE(4, 2), &y), CA_STATUS_SHAPE, "[4, 2]");
    TU_FAILS(ca_reshape(x, TU_SHAPE(4, 2), &y), CA_STATUS_SHAPE, "[2, 3]");
    TU_FAILS(ca_reshape(x, TU_SHAPE(-1, 4), &y), CA_STATUS_SHAPE, "[-1, 4]");
    TU_FAILS(ca_reshape(x, TU_SHAPE(-2, -3), &y), CA_STATUS_SHAPE, "invalid size -2");
    TU_FAILS(ca_reshape(NULL, TU_SHAPE(6), &y), CA_STATUS_INVALID, "NULL");
    TU_FAILS(ca_reshape(x, 1, NULL, &y), CA_STATUS_INVALID, "NULL");
    TU_FAILS(ca_reshape(x, TU_SHAPE(6), NULL), CA_STATUS_INVALID, "NULL");
    ca_tensor_release(x);
}

Test(shape, view_forward_and_alias) {
    for (int k = 0; k < 2; k++) {
        ca_tensor *x = iota(float_dtypes[k], TU_SHAPE(6)), *y;
        TU_OK(ca_view(x, TU_SHAPE(3, 1, 2), &y));
        tu_assert_shape(y, TU_SHAPE(3, 1, 2));
        for (int64_t i = 0; i < 6; i++)
            cr_assert_eq(tu_get(y, i), (double)i);
        assert_aliases(y, x);
        ca_tensor_release(y);
        ca_tensor_release(x);
    }
}

Test(shape, view_rejects_non_viewable_strides) {
    ca_tensor *x = tu_randn_noncontig(CA_FLOAT32, TU_SHAPE(3, 4), false), *y = NULL;
    TU_FAILS(ca_view(x, TU_SHAPE(12), &y), CA_STATUS_SHAPE, "use ca_reshape instead");
    TU_FAILS(ca_view(x, TU_SHAPE(12), &y), CA_STATUS_SHAPE, "view size is not compatible");
    cr_assert_null(y);
    /* splitting a dim of the transposed tensor is fine */
    TU_OK(ca_view(x, TU_SHAPE(3, 2, 2), &y));
    cr_assert(y->storage == x->storage);
    ca_tensor_release(y);
    ca_tensor_release(x);
}

Test(shape, view_grad) {
    ints_ctx c = {2, {4, 3}};
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 6), true);
    tu_gradcheck(f_view, 1, &x, &c, GC_TOL, GC_TOL);
    ints_ctx c2 = {3, {2, 2, 3}};
    ca_tensor *nc = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(4, 3), true);
    tu_gradcheck(f_view, 1, &nc, &c2, GC_TOL, GC_TOL);
    ca_tensor_release(x);
    ca_tensor_release(nc);
}

Test(shape, flatten_forward_and_grad) {
    ca_tensor *x = iota(CA_FLOAT64, TU_SHAPE(2, 3, 4, 5)), *y, *z, *s, *f;
    TU_OK(ca_flatten(x, 1, 2, &y));
    tu_assert_shape(y, TU_SHAPE(2, 12, 5));
    TU_OK(ca_flatten(x, 0, -1, &z));
    tu_assert_shape(z, TU_SHAPE(120));
    cr_assert_eq(tu_get(z, 77), 77.0);
    ca_tensor *same;
    TU_OK(ca_flatten(x, 2, 2, &same));
    cr_assert_eq(same, x, "flatten of one dim returns the input itself, as PyTorch");
    s = tu_from(CA_FLOAT32, 0, NULL, (double[]){3}, false);
    TU_OK(ca_flatten(s, 0, -1, &f));
    tu_assert_shape(f, TU_SHAPE(1));
    ca_tensor *bad = NULL;
    TU_FAILS(ca_flatten(x, 2, 1, &bad), CA_STATUS_DIM, "start_dim");
    TU_FAILS(ca_flatten(x, 0, 4, &bad), CA_STATUS_DIM, "flatten");

    args_ctx c = {1, -1, 0, 0};
    ca_tensor *nc = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(2, 3, 2), true);
    tu_gradcheck(f_flatten, 1, &nc, &c, GC_TOL, GC_TOL);
    ca_tensor *all[] = {x, y, z, same, s, f, nc};
    for (int i = 0; i < 7; i++)
        ca_tensor_release(all[i]);
}

/* ---------------------------------------------------------------------------------------
 * permute / transpose
 */
static void check_permute(const ca_tensor *x, const int64_t *perm, const ca_tensor *y) {
    int nd = ca_tensor_ndim(x);
    for (int64_t i = 0; i < ca_tensor_numel(y); i++) {
        int64_t o[CA_MAX_DIMS], src[CA_MAX_DIMS];
        tu_unflat(nd, ca_tensor_shape(y), i, o);
        for (int k = 0; k < nd; k++)
            src[perm[k]] = o[k];
        cr_assert_eq(tu_get(y, i), tu_at(x, src), "element %lld", (long long)i);
    }
}

Test(shape, permute_forward_contig_and_noncontig) {
    int64_t perm[3] = {2, 0, 1};
    for (int k = 0; k < 2; k++) {
        ca_tensor *x = tu_randn(float_dtypes[k], TU_SHAPE(2, 3, 4), false), *y;
        TU_OK(ca_permute(x, 3, perm, &y));
        tu_assert_shape(y, TU_SHAPE(4, 2, 3));
        check_permute(x, perm, y);
        cr_assert(y->storage == x->storage);
        ca_tensor_release(y);
        ca_tensor_release(x);
    }
    ca_tensor *nc = tu_randn_noncontig(CA_FLOAT32, TU_SHAPE(2, 3, 4), false), *y;
    int64_t neg[3] = {-1, 0, -2};
    TU_OK(ca_permute(nc, 3, neg, &y));
    check_permute(nc, perm, y);
    assert_aliases(y, nc);
    ca_tensor_release(y);
    ca_tensor_release(nc);
}

Test(shape, permute_grad) {
    ints_ctx c = {3, {1, 2, 0}};
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3, 4), true);
    tu_gradcheck(f_permute, 1, &x, &c, GC_TOL, GC_TOL);
    ca_tensor *nc = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(2, 3, 4), true);
    tu_gradcheck(f_permute, 1, &nc, &c, GC_TOL, GC_TOL);
    ca_tensor *y;
    TU_OK(ca_permute(x, 3, c.v, &y));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "PermuteBackward0");
    ca_tensor_release(y);
    ca_tensor_release(x);
    ca_tensor_release(nc);
}

Test(shape, permute_errors) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3, 4), false), *y = NULL;
    TU_FAILS(ca_permute(x, TU_SHAPE(0, 0, 1), &y), CA_STATUS_DIM, "appears twice");
    TU_FAILS(ca_permute(x, TU_SHAPE(0, 2, -3), &y), CA_STATUS_DIM, "appears twice");
    TU_FAILS(ca_permute(x, TU_SHAPE(1, 0), &y), CA_STATUS_DIM, "has 3 dims");
    TU_FAILS(ca_permute(x, TU_SHAPE(0, 1, 3), &y), CA_STATUS_DIM, "out of range");
    TU_FAILS(ca_permute(x, 3, NULL, &y), CA_STATUS_INVALID, "NULL");
    cr_assert_null(y);
    ca_tensor_release(x);
}

Test(shape, transpose_forward_grad_and_errors) {
    ca_tensor *x = iota(CA_FLOAT64, TU_SHAPE(2, 3)), *y;
    TU_OK(ca_transpose(x, -1, 0, &y));
    tu_assert_shape(y, TU_SHAPE(3, 2));
    tu_assert_values(y, (double[]){0, 3, 1, 4, 2, 5}, 0);
    assert_aliases(y, x);
    ca_tensor *s = tu_from(CA_FLOAT64, 0, NULL, (double[]){1}, false), *t;
    TU_OK(ca_transpose(s, 0, -1, &t));
    cr_assert_eq(ca_tensor_ndim(t), 0);
    ca_tensor *bad = NULL;
    TU_FAILS(ca_transpose(x, 0, 2, &bad), CA_STATUS_DIM, "transpose");

    args_ctx c = {0, 2, 0, 0};
    ca_tensor *g = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3, 2, 4), true);
    tu_gradcheck(f_transpose, 1, &g, &c, GC_TOL, GC_TOL);
    ca_tensor *all[] = {x, y, s, g};
    for (int i = 0; i < 4; i++)
        ca_tensor_release(all[i]);
    ca_tensor_release(t);
}

/* ---------------------------------------------------------------------------------------
 * expand
 */
Test(shape, expand_forward_values_and_strides) {
    for (int k = 0; k < 2; k++) {
        ca_tensor *x = iota(float_dtypes[k], TU_SHAPE(3, 1)), *y;
        TU_OK(ca_expand(x, TU_SHAPE(2, -1, 4), &y));
        tu_assert_shape(y, TU_SHAPE(2, 3, 4));
        for (int64_t i = 0; i < 24; i++) {
            int64_t o[3];
            tu_unflat(3, ca_tensor_shape(y), i, o);
            cr_assert_eq(tu_get(y, i), (double)o[1]);
        }
        cr_assert_eq(ca_tensor_strides(y)[0], 0);
        cr_assert_eq(ca_tensor_strides(y)[2], 0);
        assert_aliases(y, x);
        ca_tensor_release(y);
        ca_tensor_release(x);
    }
    /* 0-d to a shape, and size 1 to size 0 */
    ca_tensor *s = tu_from(CA_FLOAT32, 0, NULL, (double[]){5}, false), *a, *e;
    TU_OK(ca_expand(s, TU_SHAPE(2, 2), &a));
    tu_assert_values(a, (double[]){5, 5, 5, 5}, 0);
    ca_tensor *one = tu_randn(CA_FLOAT32, TU_SHAPE(1, 3), false);
    TU_OK(ca_expand(one, TU_SHAPE(0, 3), &e));
    tu_assert_shape(e, TU_SHAPE(0, 3));
    ca_tensor *all[] = {s, a, one, e};
    for (int i = 0; i < 4; i++)
        ca_tensor_release(all[i]);
}

Test(shape, expand_grad) {
    ints_ctx c = {3, {2, 3, 4}};
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(3, 1), true);
    tu_gradcheck(f_expand, 1, &x, &c, GC_TOL, GC_TOL);
    ints_ctx c2 = {3, {2, -1, -1}};
    ca_tensor *nc = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3, 4), true);
    tu_gradcheck(f_expand, 1, &nc, &c2, GC_TOL, GC_TOL);
    ca_tensor *y;
    TU_OK(ca_expand(x, 2, c.v + 1, &y));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "ExpandBackward0");
    ca_tensor_release(y);
    ca_tensor_release(x);
    ca_tensor_release(nc);
}

Test(shape, expand_errors) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3), false), *y = NULL;
    TU_FAILS(ca_expand(x, TU_SHAPE(2, 4), &y), CA_STATUS_SHAPE, "[2, 3]");
    TU_FAILS(ca_expand(x, TU_SHAPE(2, 4), &y), CA_STATUS_SHAPE, "[2, 4]");
    TU_FAILS(ca_expand(x, TU_SHAPE(3), &y), CA_STATUS_SHAPE, "at least as many");
    TU_FAILS(ca_expand(x, TU_SHAPE(-1, 2, 3), &y), CA_STATUS_SHAPE,
             "leading, non-existing dimension 0");
    TU_FAILS(ca_expand(x, TU_SHAPE(2, -2), &y), CA_STATUS_SHAPE, "must match the existing size");
    TU_FAILS(ca_expand(NULL, TU_SHAPE(2, 3), &y), CA_STATUS_INVALID, "NULL");
    cr_assert_null(y);
    ca_tensor_release(x);
}

/* ---------------------------------------------------------------------------------------
 * squeeze / unsqueeze
 */
Test(shape, squeeze_forward) {
    ca_tensor *x = iota(CA_FLOAT64, TU_SHAPE(1, 3, 1, 2)), *a, *b, *c, *d;
    TU_OK(ca_squeeze(x, 0, NULL, &a));
    tu_assert_shape(a, TU_SHAPE(3, 2));
    TU_OK(ca_squeeze(x, TU_SHAPE(-2), &b));
    tu_assert_shape(b, TU_SHAPE(1, 3, 2));
    TU_OK(ca_squeeze(x, TU_SHAPE(1, 2, 2), &c)); /* dim 1 has size 3: no-op for it */
    tu_assert_shape(c, TU_SHAPE(1, 3, 2));
    for (int64_t i = 0; i < 6; i++)
        cr_assert_eq(tu_get(c, i), (double)i);
    assert_aliases(a, x);
    ca_tensor *s = tu_from(CA_FLOAT32, 0, NULL, (double[]){1}, false);
    TU_OK(ca_squeeze(s, TU_SHAPE(0), &d));
    cr_assert_eq(ca_tensor_ndim(d), 0);
    ca_tensor *bad = NULL;
    TU_FAILS(ca_squeeze(x, TU_SHAPE(4), &bad), CA_STATUS_DIM, "squeeze");
    cr_assert_null(bad);
    ca_tensor *all[] = {x, a, b, c, s, d};
    for (int i = 0; i < 6; i++)
        ca_tensor_release(all[i]);
}

Test(shape, squeeze_noncontig_and_grad) {
    ca_tensor *nc = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(1, 4, 1, 3), true), *y;
    TU_OK(ca_squeeze(nc, 0, NULL, &y));
    tu_assert_shape(y, TU_SHAPE(4, 3));
    for (int64_t i = 0; i < 12; i++)
        cr_assert_eq(tu_get(y, i), tu_get(nc, i));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "SqueezeBackward0");
    ints_ctx c = {1, {2}};
    tu_gradcheck(f_squeeze, 1, &nc, &c, GC_TOL, GC_TOL);
    ints_ctx all = {0, {0}};
    tu_gradcheck(f_squeeze, 1, &nc, &all, GC_TOL, GC_TOL);
    ca_tensor_release(y);
    ca_tensor_release(nc);
}

Test(shape, unsqueeze_forward_positions) {
    ca_tensor *x = tu_randn_noncontig(CA_FLOAT32, TU_SHAPE(2, 3), false);
    int64_t dims[4] = {0, 1, 2, -1};
    int64_t expect[4][3] = {{1, 2, 3}, {2, 1, 3}, {2, 3, 1}, {2, 3, 1}};
    for (int k = 0; k < 4; k++) {
        ca_tensor *y;
        TU_OK(ca_unsqueeze(x, dims[k], &y));
        tu_assert_shape(y, 3, expect[k]);
        for (int64_t i = 0; i < 6; i++)
            cr_assert_eq(tu_get(y, i), tu_get(x, i));
        cr_assert(y->storage == x->storage);
        ca_tensor_release(y);
    }
    /* PyTorch's strides for the new dim: size * stride of the dim it lands before */
    ca_tensor *c = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3), false), *u;
    TU_OK(ca_unsqueeze(c, 1, &u));
    cr_assert_eq(ca_tensor_strides(u)[0], 3);
    cr_assert_eq(ca_tensor_strides(u)[1], 3);
    cr_assert_eq(ca_tensor_strides(u)[2], 1);
    ca_tensor_release(u);
    ca_tensor_release(c);
    ca_tensor *s = tu_from(CA_FLOAT64, 0, NULL, (double[]){2}, false), *t;
    TU_OK(ca_unsqueeze(s, -1, &t));
    tu_assert_shape(t, TU_SHAPE(1));
    ca_tensor *bad = NULL;
    TU_FAILS(ca_unsqueeze(x, 3, &bad), CA_STATUS_DIM, "unsqueeze");
    TU_FAILS(ca_unsqueeze(x, -4, &bad), CA_STATUS_DIM, "[-3, 2]");
    ca_tensor_release(t);
    ca_tensor_release(x);
    ca_tensor_release(s);
}

Test(shape, unsqueeze_grad) {
    args_ctx c = {1, 0, 0, 0};
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3), true);
    tu_gradcheck(f_unsqueeze, 1, &x, &c, GC_TOL, GC_TOL);
    args_ctx c2 = {-1, 0, 0, 0};
    ca_tensor *nc = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(2, 3), true);
    tu_gradcheck(f_unsqueeze, 1, &nc, &c2, GC_TOL, GC_TOL);
    ca_tensor *y;
    TU_OK(ca_unsqueeze(x, 0, &y));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "UnsqueezeBackward0");
    ca_tensor_release(y);
    ca_tensor_release(x);
    ca_tensor_release(nc);
}

/* ---------------------------------------------------------------------------------------
 * slice / narrow / select
 */

/* y == x[..., start:end:step, ...] along dim, start already canonical */
static void check_slice(const ca_tensor *x, int dim, int64_t start, int64_t step,
                        const ca_tensor *y) {
    int nd = ca_tensor_ndim(x);
    for (int64_t i = 0; i < ca_tensor_numel(y); i++) {
        int64_t o[CA_MAX_DIMS];
        tu_unflat(nd, ca_tensor_shape(y), i, o);
        o[dim] = start + o[dim] * step;
        cr_assert_eq(tu_get(y, i), tu_at(x, o), "element %lld", (long long)i);
    }
}

Test(shape, slice_forward_values) {
    for (int k = 0; k < 2; k++) {
        ca_tensor *x = tu_randn(float_dtypes[k], TU_SHAPE(4, 7), false), *y;
        TU_OK(ca_slice(x, 1, 1, 6, 2, &y));
        tu_assert_shape(y, TU_SHAPE(4, 3));
        check_slice(x, 1, 1, 2, y);
        assert_aliases(y, x);
        ca_tensor_release(y);
        ca_tensor_release(x);
    }
}

Test(shape, slice_python_clamping) {
    ca_tensor *x = iota(CA_FLOAT64, TU_SHAPE(6)), *y;
    TU_OK(ca_slice(x, 0, -4, 100, 1, &y)); /* x[-4:100] */
    tu_assert_values(y, (double[]){2, 3, 4, 5}, 0);
    tu_assert_shape(y, TU_SHAPE(4));
    ca_tensor_release(y);
    TU_OK(ca_slice(x, -1, -100, -2, 3, &y)); /* x[-100:-2:3] */
    tu_assert_values(y, (double[]){0, 3}, 0);
    tu_assert_shape(y, TU_SHAPE(2));
    ca_tensor_release(y);
    TU_OK(ca_slice(x, 0, 4, 2, 1, &y)); /* empty */
    tu_assert_shape(y, TU_SHAPE(0));
    ca_tensor_release(y);
    TU_OK(ca_slice(x, 0, 0, INT64_MAX, 4, &y));
    tu_assert_values(y, (double[]){0, 4}, 0);
    ca_tensor_release(y);
    ca_tensor_release(x);
}

Test(shape, slice_noncontig_and_chained) {
    ca_tensor *nc = tu_randn_noncontig(CA_FLOAT32, TU_SHAPE(5, 6), false), *a, *b;
    TU_OK(ca_slice(nc, 0, 1, 5, 2, &a));
    check_slice(nc, 0, 1, 2, a);
    TU_OK(ca_slice(a, 1, 2, 6, 3, &b));
    tu_assert_shape(b, TU_SHAPE(2, 2));
    for (int64_t i = 0; i < 4; i++) {
        int64_t o[2];
        tu_unflat(2, ca_tensor_shape(b), i, o);
        int64_t src[2] = {1 + 2 * o[0], 2 + 3 * o[1]};
        cr_assert_eq(tu_get(b, i), tu_at(nc, src));
    }
    assert_aliases(b, nc);
    ca_tensor_release(a);
    ca_tensor_release(b);
    ca_tensor_release(nc);
}

Test(shape, slice_grad) {
    args_ctx c = {1, 1, -1, 2};
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(3, 6), true);
    tu_gradcheck(f_slice, 1, &x, &c, GC_TOL, GC_TOL);
    args_ctx c2 = {0, -3, 100, 1};
    ca_tensor *nc = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(4, 3), true);
    tu_gradcheck(f_slice, 1, &nc, &c2, GC_TOL, GC_TOL);
    ca_tensor *y;
    TU_OK(ca_slice(x, 0, 0, 2, 1, &y));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "SliceBackward0");
    ca_tensor_release(y);
    ca_tensor_release(x);
    ca_tensor_release(nc);
}

Test(shape, slice_errors) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(3, 4), false), *y = NULL;
    TU_FAILS(ca_slice(x, 0, 0, 2, 0, &y), CA_STATUS_INVALID, "step must be positive");
    TU_FAILS(ca_slice(x, 0, 0, 2, -1, &y), CA_STATUS_INVALID, "step must be positive");
    TU_FAILS(ca_slice(x, 2, 0, 2, 1, &y), CA_STATUS_DIM, "slice");
    ca_tensor *s = tu_from(CA_FLOAT32, 0, NULL, (double[]){1}, false);
    TU_FAILS(ca_slice(s, 0, 0, 1, 1, &y), CA_STATUS_DIM, "0-dim");
    cr_assert_null(y);
    ca_tensor_release(s);
    ca_tensor_release(x);
}

Test(shape, narrow_forward_grad_and_errors) {
    ca_tensor *x = iota(CA_FLOAT64, TU_SHAPE(2, 5)), *y;
    TU_OK(ca_narrow(x, 1, -3, 2, &y));
    tu_assert_values(y, (double[]){2, 3, 7, 8}, 0);
    assert_aliases(y, x);
    ca_tensor_release(y);
    TU_OK(ca_narrow(x, 1, 5, 0, &y));
    tu_assert_shape(y, TU_SHAPE(2, 0));
    ca_tensor_release(y);
    TU_FAILS(ca_narrow(x, 1, 4, 2, &y), CA_STATUS_INDEX, "exceeds dim 1 of size 5");
    TU_FAILS(ca_narrow(x, 1, 6, 0, &y), CA_STATUS_INDEX, "start 6 is out of range");
    TU_FAILS(ca_narrow(x, 1, 0, -1, &y), CA_STATUS_INDEX, "length");

    args_ctx c = {0, 1, 2, 0};
    ca_tensor *nc = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3, 2), true);
    tu_gradcheck(f_narrow, 1, &nc, &c, GC_TOL, GC_TOL);
    ca_tensor_release(nc);
    ca_tensor_release(x);
}

Test(shape, select_forward_values) {
    for (int k = 0; k < 2; k++) {
        ca_tensor *x = iota(float_dtypes[k], TU_SHAPE(2, 3, 4)), *y;
        TU_OK(ca_select(x, 1, -1, &y));
        tu_assert_shape(y, TU_SHAPE(2, 4));
        tu_assert_values(y, (double[]){8, 9, 10, 11, 20, 21, 22, 23}, 0);
        assert_aliases(y, x);
        ca_tensor_release(y);
        ca_tensor_release(x);
    }
    ca_tensor *v = iota(CA_FLOAT64, TU_SHAPE(3)), *s;
    TU_OK(ca_select(v, 0, 2, &s));
    cr_assert_eq(ca_tensor_ndim(s), 0);
    cr_assert_eq(tu_get(s, 0), 2.0);
    ca_tensor *nc = tu_randn_noncontig(CA_FLOAT32, TU_SHAPE(3, 4), false), *c;
    TU_OK(ca_select(nc, 1, 2, &c));
    for (int64_t i = 0; i < 3; i++)
        cr_assert_eq(tu_get(c, i), tu_at(nc, (int64_t[]){i, 2}));
    ca_tensor *all[] = {v, s, nc, c};
    for (int i = 0; i < 4; i++)
        ca_tensor_release(all[i]);
}

Test(shape, select_grad) {
    args_ctx c = {1, -2, 0, 0};
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 4, 3), true);
    tu_gradcheck(f_select, 1, &x, &c, GC_TOL, GC_TOL);
    args_ctx c2 = {0, 1, 0, 0};
    ca_tensor *v = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3), true);
    tu_gradcheck(f_select, 1, &v, &c2, GC_TOL, GC_TOL); /* to a 0-d result */
    ca_tensor *y;
    TU_OK(ca_select(x, 0, 0, &y));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "SelectBackward0");
    ca_tensor_release(y);
    ca_tensor_release(x);
    ca_tensor_release(v);
}

Test(shape, select_errors) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3), false), *y = NULL;
    TU_FAILS(ca_select(x, 1, 3, &y), CA_STATUS_INDEX,
             "index 3 is out of range for dim 1 of size 3");
    TU_FAILS(ca_select(x, 0, -3, &y), CA_STATUS_INDEX, "index -3");
    TU_FAILS(ca_select(x, 2, 0, &y), CA_STATUS_DIM, "select");
    ca_tensor *s = tu_from(CA_FLOAT32, 0, NULL, (double[]){1}, false);
    TU_FAILS(ca_select(s, 0, 0, &y), CA_STATUS_DIM, "0-dim");
    cr_assert_null(y);
    ca_tensor_release(s);
    ca_tensor_release(x);
}

/* ---------------------------------------------------------------------------------------
 * cat / stack
 */

/* y == cat(xs, dim) by locating each output element's source */
static void check_cat(int n, ca_tensor *const *xs, int dim, const ca_tensor *y) {
    int nd = ca_tensor_ndim(y);
    for (int64_t i = 0; i < ca_tensor_numel(y); i++) {
        int64_t o[CA_MAX_DIMS];
        tu_unflat(nd, ca_tensor_shape(y), i, o);
        int k = 0;
        while (o[dim] >= ca_tensor_shape(xs[k])[dim])
            o[dim] -= ca_tensor_shape(xs[k++])[dim];
        cr_assert(k < n);
        cr_assert_eq(tu_get(y, i), tu_at(xs[k], o), "element %lld", (long long)i);
    }
}

Test(shape, cat_forward_dims_and_dtypes) {
    for (int k = 0; k < 2; k++) {
        ca_tensor *xs[3] = {tu_randn(float_dtypes[k], TU_SHAPE(2, 3), false),
                            tu_randn(float_dtypes[k], TU_SHAPE(1, 3), false),
                            tu_randn(float_dtypes[k], TU_SHAPE(4, 3), false)};
        ca_tensor *y;
        TU_OK(ca_cat(3, xs, 0, &y));
        tu_assert_shape(y, TU_SHAPE(7, 3));
        check_cat(3, xs, 0, y);
        cr_assert(y->storage != xs[0]->storage, "cat copies");
        ca_tensor_release(y);
        for (int i = 0; i < 3; i++)
            ca_tensor_release(xs[i]);
    }
    ca_tensor *ys[2] = {tu_randn(CA_FLOAT32, TU_SHAPE(2, 2, 2), false),
                        tu_randn(CA_FLOAT32, TU_SHAPE(2, 2, 3), false)};
    ca_tensor *y;
    TU_OK(ca_cat(2, ys, -1, &y));
    tu_assert_shape(y, TU_SHAPE(2, 2, 5));
    check_cat(2, ys, 2, y);
    ca_tensor_release(y);
    ca_tensor_release(ys[0]);
    ca_tensor_release(ys[1]);
}

Test(shape, cat_noncontig_int64_and_empty) {
    ca_tensor *xs[3] = {tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3, 2), false),
                        tu_randn(CA_FLOAT64, TU_SHAPE(3, 0), false),
                        tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3, 4), false)};
    ca_tensor *y;
    TU_OK(ca_cat(3, xs, 1, &y));
    tu_assert_shape(y, TU_SHAPE(3, 6));
    check_cat(3, xs, 1, y);
    ca_tensor_release(y);
    /* a legacy 1-D empty tensor joins any cat, as in PyTorch */
    ca_tensor *leg[2] = {tu_randn(CA_FLOAT64, TU_SHAPE(0), false), xs[0]};
    TU_OK(ca_cat(2, leg, 0, &y));
    tu_assert_shape(y, TU_SHAPE(3, 2));
    ca_tensor_release(y);
    ca_tensor_release(leg[0]);
    for (int i = 0; i < 3; i++)
        ca_tensor_release(xs[i]);
    ca_tensor *is[2] = {tu_index(TU_SHAPE(2), (int64_t[]){1, 2}),
                        tu_index(TU_SHAPE(3), (int64_t[]){3, 4, 5})};
    TU_OK(ca_cat(2, is, 0, &y));
    cr_assert_eq(ca_tensor_dtype(y), CA_INT64);
    tu_assert_values(y, (double[]){1, 2, 3, 4, 5}, 0);
    ca_tensor_release(y);
    ca_tensor_release(is[0]);
    ca_tensor_release(is[1]);
}

Test(shape, cat_grad_some_inputs) {
    ca_tensor *xs[3] = {tu_randn(CA_FLOAT64, TU_SHAPE(2, 3), true),
                        tu_randn(CA_FLOAT64, TU_SHAPE(2, 1), false),
                        tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(2, 2), true)};
    args_ctx c = {1, 0, 0, 0};
    tu_gradcheck(f_cat3, 3, xs, &c, GC_TOL, GC_TOL);
    ca_tensor *ys[3] = {tu_randn(CA_FLOAT64, TU_SHAPE(1, 2), false),
                        tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3, 2), true),
                        tu_randn(CA_FLOAT64, TU_SHAPE(2, 2), true)};
    args_ctx c0 = {-2, 0, 0, 0};
    tu_gradcheck(f_cat3, 3, ys, &c0, GC_TOL, GC_TOL);
    ca_tensor *y;
    TU_OK(ca_cat(3, ys, 0, &y));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "CatBackward0");
    ca_tensor_release(y);
    for (int i = 0; i < 3; i++) {
        ca_tensor_release(xs[i]);
        ca_tensor_release(ys[i]);
    }
}

Test(shape, cat_grad_with_legacy_empty) {
    ca_tensor *xs[3] = {tu_randn(CA_FLOAT64, TU_SHAPE(2, 3), true),
                        tu_randn(CA_FLOAT64, TU_SHAPE(0), true),
                        tu_randn(CA_FLOAT64, TU_SHAPE(1, 3), true)};
    args_ctx c = {0, 0, 0, 0};
    tu_gradcheck(f_cat3, 3, xs, &c, GC_TOL, GC_TOL);
    for (int i = 0; i < 3; i++)
        ca_tensor_release(xs[i]);
}

Test(shape, cat_errors) {
    ca_tensor *a = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3), false);
    ca_tensor *b = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3), false);
    ca_tensor *c = tu_randn(CA_FLOAT32, TU_SHAPE(3, 4), false);
    ca_tensor *s = tu_from(CA_FLOAT32, 0, NULL, (double[]){1}, false), *y = NULL;
    TU_FAILS(ca_cat(2, (ca_tensor *[]){a, b}, 0, &y), CA_STATUS_DTYPE, "ca_to_dtype");
    TU_FAILS(ca_cat(2, (ca_tensor *[]){a, c}, 0, &y), CA_STATUS_SHAPE, "[2, 3]");
    TU_FAILS(ca_cat(2, (ca_tensor *[]){a, c}, 0, &y), CA_STATUS_SHAPE, "[3, 4]");
    TU_FAILS(ca_cat(2, (ca_tensor *[]){a, c}, 0, &y), CA_STATUS_SHAPE, "except in dim 0");
    TU_FAILS(ca_cat(2, (ca_tensor *[]){a, a}, 2, &y), CA_STATUS_DIM, "cat");
    TU_FAILS(ca_cat(2, (ca_tensor *[]){a, s}, 0, &y), CA_STATUS_SHAPE,
             "zero-dimensional tensor (at position 1)"); /* torch: a RuntimeError */
    TU_FAILS(ca_cat(0, (ca_tensor *[]){a}, 0, &y), CA_STATUS_INVALID, "non-empty");
    TU_FAILS(ca_cat(2, (ca_tensor *[]){a, NULL}, 0, &y), CA_STATUS_INVALID, "NULL");
    TU_FAILS(ca_cat(1, NULL, 0, &y), CA_STATUS_INVALID, "NULL");
    cr_assert_null(y);
    ca_tensor *all[] = {a, b, c, s};
    for (int i = 0; i < 4; i++)
        ca_tensor_release(all[i]);
}

Test(shape, stack_forward_and_errors) {
    ca_tensor *xs[3] = {iota(CA_FLOAT32, TU_SHAPE(2, 2)),
                        tu_randn_noncontig(CA_FLOAT32, TU_SHAPE(2, 2), false),
                        tu_randn(CA_FLOAT32, TU_SHAPE(2, 2), false)};
    ca_tensor *y;
    TU_OK(ca_stack(3, xs, 1, &y));
    tu_assert_shape(y, TU_SHAPE(2, 3, 2));
    for (int64_t i = 0; i < 12; i++) {
        int64_t o[3];
        tu_unflat(3, ca_tensor_shape(y), i, o);
        cr_assert_eq(tu_get(y, i), tu_at(xs[o[1]], (int64_t[]){o[0], o[2]}));
    }
    ca_tensor_release(y);
    TU_OK(ca_stack(3, xs, -1, &y));
    tu_assert_shape(y, TU_SHAPE(2, 2, 3));
    ca_tensor_release(y);
    ca_tensor *bad = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3), false);
    y = NULL;
    TU_FAILS(ca_stack(2, (ca_tensor *[]){xs[0], bad}, 0, &y), CA_STATUS_SHAPE, "[2, 2] at entry 0");
    TU_FAILS(ca_stack(2, (ca_tensor *[]){xs[0], bad}, 0, &y), CA_STATUS_SHAPE, "[2, 3] at entry 1");
    TU_FAILS(ca_stack(3, xs, 3, &y), CA_STATUS_DIM, "stack");
    TU_FAILS(ca_stack(0, xs, 0, &y), CA_STATUS_INVALID, "non-empty");
    cr_assert_null(y);
    ca_tensor_release(bad);
    for (int i = 0; i < 3; i++)
        ca_tensor_release(xs[i]);
}

Test(shape, stack_grad_some_inputs) {
    ca_tensor *xs[3] = {tu_randn(CA_FLOAT64, TU_SHAPE(2, 3), true),
                        tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(2, 3), false),
                        tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(2, 3), true)};
    args_ctx c = {1, 0, 0, 0};
    tu_gradcheck(f_stack3, 3, xs, &c, GC_TOL, GC_TOL);
    args_ctx c2 = {0, 0, 0, 0};
    tu_gradcheck(f_stack3, 3, xs, &c2, GC_TOL, GC_TOL);
    for (int i = 0; i < 3; i++)
        ca_tensor_release(xs[i]);
}

/* ---------------------------------------------------------------------------------------
 * contiguous
 */
Test(shape, contiguous_forward) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3), false), *y;
    TU_OK(ca_contiguous(x, &y));
    cr_assert_eq(y, x, "an already contiguous tensor comes back as itself");
    ca_tensor_release(y);
    for (int k = 0; k < 2; k++) {
        ca_tensor *nc = tu_randn_noncontig(float_dtypes[k], TU_SHAPE(3, 4), false), *c;
        TU_OK(ca_contiguous(nc, &c));
        cr_assert(ca_tensor_is_contiguous(c));
        cr_assert(!ca_tensor_is_contiguous(nc));
        cr_assert(c->storage != nc->storage);
        for (int64_t i = 0; i < 12; i++)
            cr_assert_eq(tu_get(c, i), tu_get(nc, i));
        ca_tensor_release(c);
        ca_tensor_release(nc);
    }
    TU_FAILS(ca_contiguous(NULL, &y), CA_STATUS_INVALID, "NULL");
    ca_tensor_release(x);
}

Test(shape, contiguous_grad) {
    ca_tensor *nc = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3, 4), true), *c;
    tu_gradcheck(f_contiguous, 1, &nc, NULL, GC_TOL, GC_TOL);
    TU_OK(ca_contiguous(nc, &c));
    cr_assert_str_eq(ca_tensor_grad_fn_name(c), "CloneBackward0");
    ca_tensor_release(c);
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(3), true);
    TU_OK(ca_contiguous(x, &c));
    cr_assert_null(ca_tensor_grad_fn_name(c), "no node for an already contiguous tensor");
    ca_tensor_release(c);
    ca_tensor_release(x);
    ca_tensor_release(nc);
}

/* ---------------------------------------------------------------------------------------
 * masked_fill
 */
Test(shape, masked_fill_forward_broadcast_mask) {
    for (int k = 0; k < 2; k++) {
        ca_tensor *x = iota(float_dtypes[k], TU_SHAPE(2, 3));
        ca_tensor *m = tu_index(TU_SHAPE(3), (int64_t[]){1, 0, 5}), *y;
        TU_OK(ca_masked_fill(x, m, -1.5, &y));
        tu_assert_values(y, (double[]){-1.5, 1, -1.5, -1.5, 4, -1.5}, 0);
        cr_assert_eq(ca_tensor_dtype(y), float_dtypes[k]);
        ca_tensor_release(y);
        ca_tensor *mf = tu_from(CA_FLOAT32, TU_SHAPE(2, 1), (double[]){0, 1}, false);
        TU_OK(ca_masked_fill(x, mf, 9, &y));
        tu_assert_values(y, (double[]){0, 1, 2, 9, 9, 9}, 0);
        ca_tensor_release(y);
        ca_tensor_release(mf);
        ca_tensor_release(m);
        ca_tensor_release(x);
    }
    ca_tensor *iv = tu_index(TU_SHAPE(3), (int64_t[]){4, 5, 6}), *iy;
    ca_tensor *im = tu_index(TU_SHAPE(3), (int64_t[]){0, 0, 2});
    TU_OK(ca_masked_fill(iv, im, -7, &iy));
    cr_assert_eq(ca_tensor_dtype(iy), CA_INT64);
    tu_assert_values(iy, (double[]){4, 5, -7}, 0);
    ca_tensor_release(iy);
    ca_tensor_release(iv);
    ca_tensor_release(im);
    ca_tensor *nc = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3, 2), false), *y;
    ca_tensor *m = tu_from(CA_FLOAT64, TU_SHAPE(3, 2), (double[]){0, 1, 1, 0, 0, 0}, false);
    TU_OK(ca_masked_fill(nc, m, 0.25, &y));
    for (int64_t i = 0; i < 6; i++)
        cr_assert_eq(tu_get(y, i), tu_get(m, i) != 0 ? 0.25 : tu_get(nc, i));
    ca_tensor_release(y);
    ca_tensor_release(m);
    ca_tensor_release(nc);
}

Test(shape, masked_fill_grad) {
    ca_tensor *in[2] = {tu_randn(CA_FLOAT64, TU_SHAPE(3, 4), true),
                        tu_index(TU_SHAPE(4), (int64_t[]){0, 1, 1, 0})};
    tu_gradcheck(f_masked_fill, 2, in, NULL, GC_TOL, GC_TOL);
    ca_tensor *nc[2] = {tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(2, 3), true),
                        tu_from(CA_FLOAT64, TU_SHAPE(2, 1), (double[]){1, 0}, false)};
    tu_gradcheck(f_masked_fill, 2, nc, NULL, GC_TOL, GC_TOL);
    ca_tensor *y;
    TU_OK(ca_masked_fill(in[0], in[1], 0, &y));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "MaskedFillBackward0");
    ca_tensor_release(y);
    for (int i = 0; i < 2; i++) {
        ca_tensor_release(in[i]);
        ca_tensor_release(nc[i]);
    }
}

Test(shape, masked_fill_errors) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(3), false), *y = NULL;
    ca_tensor *big = tu_index(TU_SHAPE(2, 3), (int64_t[]){0, 1, 0, 1, 0, 1});
    ca_tensor *bad = tu_index(TU_SHAPE(2), (int64_t[]){0, 1});
    TU_FAILS(ca_masked_fill(x, big, 0, &y), CA_STATUS_SHAPE, "mask of shape [2, 3]");
    TU_FAILS(ca_masked_fill(x, big, 0, &y), CA_STATUS_SHAPE, "input's shape [3]");
    TU_FAILS(ca_masked_fill(x, bad, 0, &y), CA_STATUS_SHAPE, "[2]");
    TU_FAILS(ca_masked_fill(x, NULL, 0, &y), CA_STATUS_INVALID, "NULL");
    cr_assert_null(y);
    ca_tensor_release(x);
    ca_tensor_release(big);
    ca_tensor_release(bad);
}

/* ---------------------------------------------------------------------------------------
 * slice_backward (internal) and chains of views
 */
static ca_status slice_bw(ca_tensor *x, int ndim, const int64_t *full, int64_t dim, int64_t start,
                          int64_t end, int64_t step, ca_tensor **out) {
    ca_attrs a = {.i = {dim, start, end, step}, .shape = {.n = ndim}};
    memcpy(a.shape.v, full, sizeof(int64_t) * (size_t)ndim);
    return cai_op_call1(CA_OP_SLICE_BACKWARD, x, &a, out);
}

static ca_status f_slice_bw(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return slice_bw(in[0], TU_SHAPE(3, 7), 1, 1, 7, 3, out);
}

Test(shape, slice_backward_forward_and_grad) {
    ca_tensor *x = tu_from(CA_FLOAT64, TU_SHAPE(3, 2), (double[]){1, 2, 3, 4, 5, 6}, false), *y;
    TU_OK(slice_bw(x, TU_SHAPE(3, 7), 1, 1, 7, 3, &y));
    tu_assert_values(y, (double[]){0, 1, 0, 0, 2, 0, 0, 0, 3, 0, 0, 4, 0, 0, 0, 5, 0, 0, 6, 0, 0},
                     0);
    ca_tensor_release(y);
    TU_FAILS(slice_bw(x, TU_SHAPE(3, 7), 1, 0, 7, 2, &y), CA_STATUS_SHAPE, "[3, 4]");
    ca_tensor *g = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3, 2), true);
    tu_gradcheck(f_slice_bw, 1, &g, NULL, GC_TOL, GC_TOL);
    ca_tensor_release(g);
    ca_tensor_release(x);
}

/* permute -> slice -> select -> unsqueeze -> expand -> reshape, all views */
static ca_status f_view_chain(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    ca_tensor *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL;
    ca_status st = ca_permute(in[0], TU_SHAPE(2, 0, 1), &a);
    if (st == CA_OK)
        st = ca_slice(a, 1, 1, 4, 2, &b);
    if (st == CA_OK)
        st = ca_select(b, 2, -1, &c);
    if (st == CA_OK)
        st = ca_unsqueeze(c, 1, &d);
    if (st == CA_OK)
        st = ca_expand(d, TU_SHAPE(-1, 3, -1), &e);
    if (st == CA_OK)
        st = ca_reshape(e, TU_SHAPE(-1), out);
    ca_tensor *all[] = {a, b, c, d, e};
    for (int i = 0; i < 5; i++)
        ca_tensor_release(all[i]);
    return st;
}

Test(shape, view_chain_noncontig_grad) {
    ca_tensor *x = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(4, 2, 3), true), *y;
    TU_OK(f_view_chain(&x, &y, NULL));
    tu_assert_shape(y, TU_SHAPE(3 * 3 * 2));
    /* y[(i * 3 + r) * 2 + j] = x[1 + 2 j, 1, i] for i < 3, j < 2, any r */
    for (int64_t i = 0; i < 3; i++)
        for (int64_t r = 0; r < 3; r++)
            for (int64_t j = 0; j < 2; j++)
                cr_assert_eq(tu_get(y, (i * 3 + r) * 2 + j),
                             tu_at(x, (int64_t[]){1 + 2 * j, 1, i}));
    ca_tensor_release(y);
    tu_gradcheck(f_view_chain, 1, &x, NULL, GC_TOL, GC_TOL);
    ca_tensor_release(x);
}

/* ---------------------------------------------------------------------------------------
 * Allocation failure: every allocation of a forward and backward through the copying
 * and aliasing ops fails in turn; each run must end in CA_OK or CA_STATUS_NOMEM with
 * nothing left allocated.
 */
static ca_status oom_scenario(void) {
    tu_sc_state s = {0};
    double xv[12];
    for (int i = 0; i < 12; i++)
        xv[i] = 0.1 * i - 0.4;
    int64_t mv[7] = {0, 1, 0, 0, 1, 0, 0};
    ca_tensor **x = tu_sc_slot(&s), **mask = tu_sc_slot(&s), **xt = tu_sc_slot(&s);
    ca_tensor **r = tu_sc_slot(&s), **sl = tu_sc_slot(&s), **row = tu_sc_slot(&s);
    ca_tensor **row1 = tu_sc_slot(&s), **rows = tu_sc_slot(&s), **c = tu_sc_slot(&s);
    ca_tensor **stk = tu_sc_slot(&s), **mf = tu_sc_slot(&s), **pm = tu_sc_slot(&s);
    ca_tensor **pc = tu_sc_slot(&s), **fl = tu_sc_slot(&s), **y = tu_sc_slot(&s);
    TU_SC(&s, ca_from_data(CA_FLOAT64, TU_SHAPE(3, 4), xv, x));
    TU_SC(&s, ca_tensor_set_requires_grad(*x, true));
    TU_SC(&s, ca_from_data(CA_INT64, TU_SHAPE(7), mv, mask));
    TU_SC(&s, ca_transpose(*x, 0, 1, xt));
    TU_SC(&s, ca_reshape(*xt, TU_SHAPE(2, 6), r)); /* copies */
    TU_SC(&s, ca_slice(*r, 1, 1, 6, 2, sl));
    TU_SC(&s, ca_select(*x, 0, 1, row));
    TU_SC(&s, ca_unsqueeze(*row, 0, row1));
    TU_SC(&s, ca_expand(*row1, TU_SHAPE(2, 4), rows));
    TU_SC(&s, ca_cat(2, (ca_tensor *[]){*sl, *rows}, 1, c));
    TU_SC(&s, ca_stack(2, (ca_tensor *[]){*c, *c}, 0, stk));
    TU_SC(&s, ca_masked_fill(*stk, *mask, 0.5, mf));
    TU_SC(&s, ca_permute(*mf, TU_SHAPE(2, 0, 1), pm));
    TU_SC(&s, ca_contiguous(*pm, pc));
    TU_SC(&s, ca_flatten(*pc, 0, 1, fl));
    TU_SC(&s, ca_squeeze(*fl, 0, NULL, y));
    tu_sc_backward(&s, *y);
    if (s.st == CA_OK)
        cr_assert_not_null(ca_tensor_grad(*x));
    return tu_sc_release(&s);
}

Test(shape, oom_every_allocation_is_clean) {
    tu_oom_every_allocation("shape ops", oom_scenario);
}
