/* test_ops_index.c - Criterion suite `index`: index_select, embedding, gather and the
 * internal index_add and scatter_add. Forward values against scalar-loop references,
 * gradients against finite differences (duplicate indices included, so accumulation is
 * exercised), and the error messages for bad dtypes, shapes and index values.
 */
#include "testutil.h"

#include "autograd/internal.h"

#include <stdlib.h>
#include <string.h>

#define GC_TOL 1e-7

static const ca_dtype float_dtypes[2] = {CA_FLOAT32, CA_FLOAT64};

static void check_index_select(const ca_tensor *x, int dim, const ca_tensor *index,
                               const ca_tensor *y) {
    int nd = ca_tensor_ndim(y);
    for (int64_t i = 0; i < ca_tensor_numel(y); i++) {
        int64_t o[CA_MAX_DIMS];
        tu_unflat(nd, ca_tensor_shape(y), i, o);
        o[dim] = (int64_t)tu_get(index, o[dim]);
        cr_assert_eq(tu_get(y, i), tu_at(x, o), "element %lld", (long long)i);
    }
}

static void check_gather(const ca_tensor *x, int dim, const ca_tensor *index, const ca_tensor *y) {
    int nd = ca_tensor_ndim(y);
    for (int64_t i = 0; i < ca_tensor_numel(y); i++) {
        int64_t o[CA_MAX_DIMS];
        tu_unflat(nd, ca_tensor_shape(y), i, o);
        o[dim] = (int64_t)tu_get(index, i);
        cr_assert_eq(tu_get(y, i), tu_at(x, o), "element %lld", (long long)i);
    }
}

typedef struct {
    int64_t dim;
} dim_ctx;

static ca_status f_index_select(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ca_index_select(in[0], ((dim_ctx *)ctx)->dim, in[1], out);
}

static ca_status f_embedding(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ca_embedding(in[0], in[1], out);
}

static ca_status f_gather(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return ca_gather(in[0], ((dim_ctx *)ctx)->dim, in[1], out);
}

/* the internal rows, called through cai_op_call with inputs (index, src) */
typedef struct {
    int op;
    int64_t dim;
    int ndim;
    int64_t full[CA_MAX_DIMS];
} internal_ctx;

static ca_status internal_call(const internal_ctx *c, ca_tensor *index, ca_tensor *src,
                               ca_tensor **out) {
    ca_attrs a = {.i = {c->dim}, .shape = {.n = c->ndim}};
    memcpy(a.shape.v, c->full, sizeof(int64_t) * (size_t)c->ndim);
    return cai_op_call2(c->op, index, src, &a, out);
}

static ca_status f_internal(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    return internal_call(ctx, in[0], in[1], out);
}

/* ---------------------------------------------------------------------------------------
 * index_select
 */
Test(index, index_select_forward_dims) {
    for (int k = 0; k < 2; k++) {
        ca_tensor *x = tu_randn(float_dtypes[k], TU_SHAPE(3, 4, 2), false);
        ca_tensor *idx = tu_index(TU_SHAPE(5), (int64_t[]){2, 0, 2, 1, 0}), *y;
        int64_t dims[3] = {0, 1, -1};
        int64_t canon[3] = {0, 1, 2};
        for (int j = 0; j < 3; j++) {
            ca_tensor *i2 = idx;
            if (canon[j] == 2) /* dim of size 2: use in-range indices */
                i2 = tu_index(TU_SHAPE(3), (int64_t[]){1, 1, 0});
            TU_OK(ca_index_select(x, dims[j], i2, &y));
            cr_assert_eq(ca_tensor_shape(y)[canon[j]], ca_tensor_numel(i2));
            cr_assert_eq(ca_tensor_dtype(y), float_dtypes[k]);
            check_index_select(x, (int)canon[j], i2, y);
            ca_tensor_release(y);
            if (i2 != idx)
                ca_tensor_release(i2);
        }
        ca_tensor_release(idx);
        ca_tensor_release(x);
    }
}

Test(index, index_select_noncontig_and_small_cases) {
    ca_tensor *x = tu_randn_noncontig(CA_FLOAT32, TU_SHAPE(4, 3), false);
    ca_tensor *base = tu_index(TU_SHAPE(6), (int64_t[]){3, 9, 0, 9, 3, 9}), *idx, *y;
    TU_OK(ca_slice(base, 0, 0, 6, 2, &idx)); /* a strided index: {3, 0, 3} */
    TU_OK(ca_index_select(x, 0, idx, &y));
    tu_assert_shape(y, TU_SHAPE(3, 3));
    check_index_select(x, 0, idx, y);
    ca_tensor_release(y);
    /* a 0-d index keeps the dim with size 1 */
    ca_tensor *i0 = tu_index(0, NULL, (int64_t[]){2});
    TU_OK(ca_index_select(x, 1, i0, &y));
    tu_assert_shape(y, TU_SHAPE(4, 1));
    ca_tensor_release(y);
    /* an empty index gives an empty result */
    ca_tensor *ie = tu_index(TU_SHAPE(0), NULL);
    TU_OK(ca_index_select(x, 1, ie, &y));
    tu_assert_shape(y, TU_SHAPE(4, 0));
    ca_tensor_release(y);
    /* a 0-d input with a one-value index */
    ca_tensor *s = tu_from(CA_FLOAT64, 0, NULL, (double[]){6}, false);
    ca_tensor *i1 = tu_index(TU_SHAPE(1), (int64_t[]){0});
    TU_OK(ca_index_select(s, 0, i1, &y));
    cr_assert_eq(ca_tensor_ndim(y), 0);
    cr_assert_eq(tu_get(y, 0), 6.0);
    ca_tensor_release(y);
    ca_tensor *all[] = {x, base, idx, i0, ie, s, i1};
    tu_release_n(all, 7);
}

Test(index, index_select_grad_duplicates) {
    dim_ctx c = {1};
    ca_tensor *in[2] = {tu_randn(CA_FLOAT64, TU_SHAPE(2, 4, 3), true),
                        tu_index(TU_SHAPE(5), (int64_t[]){3, 1, 3, 3, 0})};
    tu_gradcheck(f_index_select, 2, in, &c, GC_TOL, GC_TOL);
    ca_tensor *y;
    TU_OK(ca_index_select(in[0], 1, in[1], &y));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "IndexSelectBackward0");
    ca_tensor_release(y);
    dim_ctx c0 = {0};
    ca_tensor *nc[2] = {tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3, 2), true),
                        tu_index(TU_SHAPE(4), (int64_t[]){2, 2, 0, 1})};
    tu_gradcheck(f_index_select, 2, nc, &c0, GC_TOL, GC_TOL);
    tu_release_n(in, 2);
    tu_release_n(nc, 2);
}

Test(index, index_select_errors) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(3, 4), false), *y = NULL;
    ca_tensor *fidx = tu_from(CA_FLOAT32, TU_SHAPE(2), (double[]){0, 1}, false);
    ca_tensor *i2d = tu_index(TU_SHAPE(2, 1), (int64_t[]){0, 1});
    ca_tensor *big = tu_index(TU_SHAPE(3), (int64_t[]){0, 5, 1});
    ca_tensor *neg = tu_index(TU_SHAPE(2), (int64_t[]){0, -1});
    ca_tensor *ok = tu_index(TU_SHAPE(2), (int64_t[]){0, 1});
    TU_FAILS(ca_index_select(x, 0, fidx, &y), CA_STATUS_DTYPE, "must be int64, got float32");
    TU_FAILS(ca_index_select(x, 0, i2d, &y), CA_STATUS_SHAPE, "0-D or 1-D");
    TU_FAILS(ca_index_select(x, 1, big, &y), CA_STATUS_INDEX, "index 5 at position 1");
    TU_FAILS(ca_index_select(x, 0, big, &y), CA_STATUS_INDEX, "valid indices are in [0, 3)");
    TU_FAILS(ca_index_select(x, 0, neg, &y), CA_STATUS_INDEX, "negative indices are not supported");
    TU_FAILS(ca_index_select(x, 2, ok, &y), CA_STATUS_DIM, "index_select");
    TU_FAILS(ca_index_select(x, 0, NULL, &y), CA_STATUS_INVALID, "NULL");
    TU_FAILS(ca_index_select(x, 0, ok, NULL), CA_STATUS_INVALID, "NULL");
    cr_assert_null(y);
    ca_tensor *all[] = {x, fidx, i2d, big, neg, ok};
    tu_release_n(all, 6);
}

/* ---------------------------------------------------------------------------------------
 * embedding
 */
Test(index, embedding_forward) {
    for (int k = 0; k < 2; k++) {
        ca_tensor *w = tu_randn(float_dtypes[k], TU_SHAPE(5, 3), false);
        ca_tensor *ids = tu_index(TU_SHAPE(2, 3), (int64_t[]){4, 0, 4, 2, 1, 0}), *y;
        TU_OK(ca_embedding(w, ids, &y));
        tu_assert_shape(y, TU_SHAPE(2, 3, 3));
        cr_assert_eq(ca_tensor_dtype(y), float_dtypes[k]);
        for (int64_t i = 0; i < 18; i++) {
            int64_t row = (int64_t)tu_get(ids, i / 3);
            cr_assert_eq(tu_get(y, i), tu_at(w, (int64_t[]){row, i % 3}));
        }
        ca_tensor_release(y);
        ca_tensor_release(ids);
        ca_tensor_release(w);
    }
    /* 0-d indices give one row; empty indices give [0, D] */
    ca_tensor *w = tu_randn(CA_FLOAT32, TU_SHAPE(4, 2), false), *y;
    ca_tensor *s = tu_index(0, NULL, (int64_t[]){3}), *e = tu_index(TU_SHAPE(0), NULL);
    TU_OK(ca_embedding(w, s, &y));
    tu_assert_shape(y, TU_SHAPE(2));
    cr_assert_eq(tu_get(y, 1), tu_at(w, (int64_t[]){3, 1}));
    ca_tensor_release(y);
    TU_OK(ca_embedding(w, e, &y));
    tu_assert_shape(y, TU_SHAPE(0, 2));
    ca_tensor_release(y);
    ca_tensor *all[] = {w, s, e};
    tu_release_n(all, 3);
}

Test(index, embedding_grad) {
    ca_tensor *in[2] = {tu_randn(CA_FLOAT64, TU_SHAPE(4, 3), true),
                        tu_index(TU_SHAPE(2, 3), (int64_t[]){1, 3, 1, 1, 0, 3})};
    tu_gradcheck(f_embedding, 2, in, NULL, GC_TOL, GC_TOL);
    ca_tensor *y;
    TU_OK(ca_embedding(in[0], in[1], &y));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "EmbeddingBackward0");
    ca_tensor_release(y);
    ca_tensor *nc[2] = {tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3, 2), true),
                        tu_index(TU_SHAPE(4), (int64_t[]){2, 0, 2, 2})};
    tu_gradcheck(f_embedding, 2, nc, NULL, GC_TOL, GC_TOL);
    tu_release_n(in, 2);
    tu_release_n(nc, 2);
}

Test(index, embedding_errors) {
    ca_tensor *w = tu_randn(CA_FLOAT32, TU_SHAPE(4, 3), false), *y = NULL;
    ca_tensor *w3 = tu_randn(CA_FLOAT32, TU_SHAPE(2, 2, 2), false);
    ca_tensor *ids = tu_index(TU_SHAPE(2), (int64_t[]){0, 4});
    ca_tensor *fids = tu_from(CA_FLOAT64, TU_SHAPE(1), (double[]){0}, false);
    TU_FAILS(ca_embedding(w, ids, &y), CA_STATUS_INDEX, "index 4 at position 1");
    TU_FAILS(ca_embedding(w, ids, &y), CA_STATUS_INDEX, "[0, 4)");
    TU_FAILS(ca_embedding(w3, fids, &y), CA_STATUS_DTYPE, "int64");
    TU_FAILS(ca_embedding(w3, ids, &y), CA_STATUS_SHAPE, "[2, 2, 2]");
    TU_FAILS(ca_embedding(NULL, ids, &y), CA_STATUS_INVALID, "NULL");
    cr_assert_null(y);
    ca_tensor *all[] = {w, w3, ids, fids};
    tu_release_n(all, 4);
}

/* ---------------------------------------------------------------------------------------
 * gather
 */
Test(index, gather_forward_dims) {
    for (int k = 0; k < 2; k++) {
        ca_tensor *x = tu_randn(float_dtypes[k], TU_SHAPE(3, 4), false), *y;
        ca_tensor *i1 = tu_index(TU_SHAPE(3, 2), (int64_t[]){3, 0, 1, 1, 2, 3});
        TU_OK(ca_gather(x, 1, i1, &y));
        tu_assert_shape(y, TU_SHAPE(3, 2));
        check_gather(x, 1, i1, y);
        ca_tensor_release(y);
        ca_tensor *i0 = tu_index(TU_SHAPE(2, 4), (int64_t[]){2, 1, 0, 2, 0, 0, 1, 1});
        TU_OK(ca_gather(x, -2, i0, &y));
        check_gather(x, 0, i0, y);
        cr_assert_eq(ca_tensor_dtype(y), float_dtypes[k]);
        ca_tensor_release(y);
        ca_tensor *all[] = {x, i1, i0};
        tu_release_n(all, 3);
    }
}

Test(index, gather_smaller_index_noncontig) {
    /* index smaller than x on the other dims (PyTorch's rule), x non-contiguous */
    ca_tensor *x = tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3, 4, 5), false), *y;
    ca_tensor *idx = tu_index(TU_SHAPE(2, 6, 3),
                              (int64_t[]){0, 3, 1, 2, 2, 0, 3, 3, 3, 1, 0, 0, 2, 1, 0, 0, 1, 2,
                                          3, 2, 1, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 0, 1, 2});
    TU_OK(ca_gather(x, 1, idx, &y));
    tu_assert_shape(y, TU_SHAPE(2, 6, 3));
    check_gather(x, 1, idx, y);
    ca_tensor_release(y);
    ca_tensor *s = tu_from(CA_FLOAT32, 0, NULL, (double[]){4}, false);
    ca_tensor *s0 = tu_index(0, NULL, (int64_t[]){0});
    TU_OK(ca_gather(s, 0, s0, &y));
    cr_assert_eq(ca_tensor_ndim(y), 0);
    cr_assert_eq(tu_get(y, 0), 4.0);
    ca_tensor_release(y);
    ca_tensor *all[] = {x, idx, s, s0};
    tu_release_n(all, 4);
}

Test(index, gather_grad) {
    dim_ctx c = {0};
    ca_tensor *in[2] = {
        tu_randn(CA_FLOAT64, TU_SHAPE(3, 4), true),
        tu_index(TU_SHAPE(4, 4), (int64_t[]){0, 1, 2, 0, 2, 2, 2, 2, 1, 0, 0, 1, 0, 0, 1, 1})};
    tu_gradcheck(f_gather, 2, in, &c, GC_TOL, GC_TOL);
    ca_tensor *y;
    TU_OK(ca_gather(in[0], 0, in[1], &y));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "GatherBackward0");
    ca_tensor_release(y);
    dim_ctx c1 = {-1};
    ca_tensor *nc[2] = {tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(3, 4), true),
                        tu_index(TU_SHAPE(2, 3), (int64_t[]){3, 3, 0, 1, 2, 1})};
    tu_gradcheck(f_gather, 2, nc, &c1, GC_TOL, GC_TOL);
    tu_release_n(in, 2);
    tu_release_n(nc, 2);
}

Test(index, gather_errors) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(3, 4), false), *y = NULL;
    ca_tensor *i1d = tu_index(TU_SHAPE(2), (int64_t[]){0, 1});
    ca_tensor *wide = tu_index(TU_SHAPE(1, 5), (int64_t[]){0, 0, 0, 0, 0});
    ca_tensor *big = tu_index(TU_SHAPE(2, 2), (int64_t[]){0, 1, 3, 1});
    ca_tensor *neg = tu_index(TU_SHAPE(1, 1), (int64_t[]){-2});
    ca_tensor *fl = tu_from(CA_FLOAT32, TU_SHAPE(1, 1), (double[]){0}, false);
    TU_FAILS(ca_gather(x, 1, i1d, &y), CA_STATUS_SHAPE,
             "index has shape [2] and input has shape [3, 4]");
    TU_FAILS(ca_gather(x, 0, wide, &y), CA_STATUS_SHAPE,
             "[1, 5] is larger than input shape [3, 4]");
    TU_FAILS(ca_gather(x, 0, big, &y), CA_STATUS_INDEX, "index 3 at position 2");
    TU_FAILS(ca_gather(x, 0, neg, &y), CA_STATUS_INDEX, "negative");
    TU_FAILS(ca_gather(x, 0, fl, &y), CA_STATUS_DTYPE, "int64");
    TU_FAILS(ca_gather(x, 2, big, &y), CA_STATUS_DIM, "gather");
    cr_assert_null(y);
    ca_tensor *all[] = {x, i1d, wide, big, neg, fl};
    tu_release_n(all, 6);
}

/* ---------------------------------------------------------------------------------------
 * index_add and scatter_add (internal rows used by the derivatives above)
 */
Test(index, index_add_forward_accumulates) {
    internal_ctx c = {CA_OP_INDEX_ADD, 1, 2, {2, 4}};
    ca_tensor *idx = tu_index(TU_SHAPE(3), (int64_t[]){3, 0, 3}), *y;
    ca_tensor *src = tu_from(CA_FLOAT64, TU_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6}, false);
    TU_OK(internal_call(&c, idx, src, &y));
    tu_assert_values(y, (double[]){2, 0, 0, 4, 5, 0, 0, 10}, 0);
    ca_tensor_release(y);
    internal_ctx bad = {CA_OP_INDEX_ADD, 0, 2, {2, 4}};
    TU_FAILS(internal_call(&bad, idx, src, &y), CA_STATUS_SHAPE, "[3, 4]");
    internal_ctx oob = {CA_OP_INDEX_ADD, 1, 2, {2, 3}};
    TU_FAILS(internal_call(&oob, idx, src, &y), CA_STATUS_INDEX, "index 3 at position 0");
    ca_tensor_release(idx);
    ca_tensor_release(src);
}

Test(index, index_add_grad) {
    internal_ctx c = {CA_OP_INDEX_ADD, 0, 2, {4, 3}};
    ca_tensor *in[2] = {tu_index(TU_SHAPE(5), (int64_t[]){1, 1, 3, 0, 1}),
                        tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(5, 3), true)};
    tu_gradcheck(f_internal, 2, in, &c, GC_TOL, GC_TOL);
    tu_release_n(in, 2);
}

Test(index, scatter_add_forward_and_corner) {
    /* index smaller than the output on dim 0: only the corner block receives values */
    internal_ctx c = {CA_OP_SCATTER_ADD, 1, 2, {3, 4}};
    ca_tensor *idx = tu_index(TU_SHAPE(2, 2), (int64_t[]){3, 3, 0, 2}), *y;
    ca_tensor *src = tu_from(CA_FLOAT32, TU_SHAPE(2, 2), (double[]){1, 2, 3, 4}, false);
    TU_OK(internal_call(&c, idx, src, &y));
    tu_assert_shape(y, TU_SHAPE(3, 4));
    tu_assert_values(y, (double[]){0, 0, 0, 3, 3, 0, 4, 0, 0, 0, 0, 0}, 0);
    ca_tensor_release(y);
    internal_ctx mism = {CA_OP_SCATTER_ADD, 1, 2, {3, 4}};
    ca_tensor *src3 = tu_from(CA_FLOAT32, TU_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6}, false);
    TU_FAILS(internal_call(&mism, idx, src3, &y), CA_STATUS_SHAPE, "[2, 3]");
    internal_ctx oob = {CA_OP_SCATTER_ADD, 1, 2, {3, 3}};
    TU_FAILS(internal_call(&oob, idx, src, &y), CA_STATUS_INDEX, "valid indices are in [0, 3)");
    ca_tensor *all[] = {idx, src, src3};
    tu_release_n(all, 3);
}

Test(index, scatter_add_grad) {
    internal_ctx c = {CA_OP_SCATTER_ADD, 0, 2, {3, 4}};
    ca_tensor *in[2] = {tu_index(TU_SHAPE(4, 3), (int64_t[]){0, 2, 2, 2, 2, 1, 0, 0, 0, 1, 2, 0}),
                        tu_randn_noncontig(CA_FLOAT64, TU_SHAPE(4, 3), true)};
    tu_gradcheck(f_internal, 2, in, &c, GC_TOL, GC_TOL);
    tu_release_n(in, 2);
}

Test(index, internal_rows_reject_bad_inputs) {
    ca_tensor *src = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3), false), *y = NULL;
    ca_tensor *fidx = tu_from(CA_FLOAT64, TU_SHAPE(2), (double[]){0, 1}, false);
    ca_tensor *i2d = tu_index(TU_SHAPE(2, 1), (int64_t[]){0, 1});
    internal_ctx ia = {CA_OP_INDEX_ADD, 0, 2, {4, 3}};
    TU_FAILS(internal_call(&ia, fidx, src, &y), CA_STATUS_DTYPE, "int64");
    TU_FAILS(internal_call(&ia, i2d, src, &y), CA_STATUS_SHAPE, "0-D or 1-D");
    internal_ctx ia_dim = {CA_OP_INDEX_ADD, 2, 2, {4, 3}};
    ca_tensor *ok = tu_index(TU_SHAPE(2), (int64_t[]){0, 1});
    TU_FAILS(internal_call(&ia_dim, ok, src, &y), CA_STATUS_DIM, "index_add");
    internal_ctx sa = {CA_OP_SCATTER_ADD, 0, 3, {4, 3, 1}};
    TU_FAILS(internal_call(&sa, i2d, src, &y), CA_STATUS_SHAPE, "[2, 1]");
    cr_assert_null(y);
    ca_tensor *all[] = {src, fidx, i2d, ok};
    tu_release_n(all, 4);
}

Test(index, embedding_strided_indices_f32) {
    ca_tensor *w = tu_randn(CA_FLOAT32, TU_SHAPE(6, 2), false), *y;
    ca_tensor *base = tu_index(TU_SHAPE(2, 3), (int64_t[]){5, 1, 0, 2, 2, 3}), *ids;
    TU_OK(ca_transpose(base, 0, 1, &ids)); /* {{5, 2}, {1, 2}, {0, 3}} */
    TU_OK(ca_embedding(w, ids, &y));
    tu_assert_shape(y, TU_SHAPE(3, 2, 2));
    int64_t rows[6] = {5, 2, 1, 2, 0, 3};
    for (int64_t i = 0; i < 12; i++)
        cr_assert_eq(tu_get(y, i), tu_at(w, (int64_t[]){rows[i / 2], i % 2}));
    ca_tensor *all[] = {w, y, base, ids};
    tu_release_n(all, 4);
}

/* ---------------------------------------------------------------------------------------
 * Mixed cases
 */
Test(index, int64_values_and_empty_gather) {
    ca_tensor *x = tu_index(TU_SHAPE(2, 3), (int64_t[]){10, 11, 12, 13, 14, 15}), *y;
    ca_tensor *idx = tu_index(TU_SHAPE(2), (int64_t[]){2, 0});
    TU_OK(ca_index_select(x, 1, idx, &y));
    cr_assert_eq(ca_tensor_dtype(y), CA_INT64);
    tu_assert_values(y, (double[]){12, 10, 15, 13}, 0);
    ca_tensor_release(y);
    ca_tensor *e = tu_index(TU_SHAPE(2, 0), NULL);
    TU_OK(ca_gather(x, 1, e, &y));
    tu_assert_shape(y, TU_SHAPE(2, 0));
    ca_tensor_release(y);
    ca_tensor *all[] = {x, idx, e};
    tu_release_n(all, 3);
}

/* gather's gradient goes through scatter_add, and scatter_add's through gather: a
 * chain of the two checks both derivative rules against each other */
static ca_status f_gather_then_select(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    ca_tensor *g = NULL;
    ca_status st = ca_gather(in[0], 1, in[1], &g);
    if (st == CA_OK)
        st = ca_index_select(g, 0, in[2], out);
    ca_tensor_release(g);
    return st;
}

Test(index, gather_index_select_chain_grad) {
    ca_tensor *in[3] = {tu_randn(CA_FLOAT64, TU_SHAPE(3, 5), true),
                        tu_index(TU_SHAPE(3, 2), (int64_t[]){4, 4, 0, 2, 1, 4}),
                        tu_index(TU_SHAPE(4), (int64_t[]){2, 0, 2, 1})};
    tu_gradcheck(f_gather_then_select, 3, in, NULL, GC_TOL, GC_TOL);
    tu_release_n(in, 3);
}

/* ---------------------------------------------------------------------------------------
 * Allocation failure: every allocation of a forward and backward through embedding,
 * gather (whose backward scatters into a corner block) and index_select fails in turn;
 * each run must end in CA_OK or CA_STATUS_NOMEM with nothing left allocated.
 */
static ca_status oom_scenario(void) {
    tu_sc_state s = {0};
    double wv[15];
    for (int i = 0; i < 15; i++)
        wv[i] = 0.2 * i - 1.0;
    int64_t ids[4] = {4, 0, 4, 2}, gidx[8] = {2, 0, 1, 1, 0, 2, 2, 2}, sidx[3] = {1, 3, 1};
    ca_tensor **w = tu_sc_slot(&s), **id = tu_sc_slot(&s), **gi = tu_sc_slot(&s);
    ca_tensor **si = tu_sc_slot(&s), **emb = tu_sc_slot(&s), **ga = tu_sc_slot(&s);
    ca_tensor **sel = tu_sc_slot(&s), **l1 = tu_sc_slot(&s), **ga2 = tu_sc_slot(&s);
    ca_tensor **l2 = tu_sc_slot(&s), **l3 = tu_sc_slot(&s), **l12 = tu_sc_slot(&s);
    ca_tensor **l = tu_sc_slot(&s);
    TU_SC(&s, ca_from_data(CA_FLOAT64, TU_SHAPE(5, 3), wv, w));
    TU_SC(&s, ca_tensor_set_requires_grad(*w, true));
    TU_SC(&s, ca_from_data(CA_INT64, TU_SHAPE(2, 2), ids, id));
    TU_SC(&s, ca_from_data(CA_INT64, TU_SHAPE(4, 2), gidx, gi));
    TU_SC(&s, ca_from_data(CA_INT64, TU_SHAPE(3), sidx, si));
    TU_SC(&s, ca_embedding(*w, *id, emb));
    TU_SC(&s, ca_gather(*w, 1, *gi, ga));
    TU_SC(&s, ca_index_select(*w, 0, *si, sel));
    TU_SC(&s, ca_sum(*emb, 0, NULL, false, l1));
    TU_SC(&s, ca_mul(*ga, *ga, ga2));
    TU_SC(&s, ca_sum(*ga2, 0, NULL, false, l2));
    TU_SC(&s, ca_sum(*sel, 0, NULL, false, l3));
    TU_SC(&s, ca_add(*l1, *l2, l12));
    TU_SC(&s, ca_add(*l12, *l3, l));
    TU_SC(&s, ca_backward(*l));
    if (s.st == CA_OK)
        cr_assert_not_null(ca_tensor_grad(*w));
    return tu_sc_release(&s);
}

Test(index, oom_every_allocation_is_clean) {
    tu_oom_every_allocation("embedding, gather and index_select", oom_scenario);
}

/* ca_scatter_add_zeros / ca_index_add_zeros: the public forms of the internal rows. */
static ca_status f_scatter_zeros(ca_tensor *const *in, ca_tensor **out, void *ctx) {
    ca_tensor *idx = ctx;
    return ca_scatter_add_zeros(TU_SHAPE(2, 3), 1, idx, in[0], out);
}

Test(index, scatter_add_zeros_and_index_add_zeros) {
    ca_tensor *idx = tu_index(TU_SHAPE(2, 2), (int64_t[]){2, 2, 0, 1}), *y;
    ca_tensor *src = tu_from(CA_FLOAT64, TU_SHAPE(2, 2), (double[]){1, 2, 3, 4}, true);
    TU_OK(ca_scatter_add_zeros(TU_SHAPE(2, 3), 1, idx, src, &y)); /* duplicates add */
    tu_assert_values(y, (double[]){0, 0, 3, 3, 4, 0}, 0);
    ca_tensor_release(y);
    tu_gradcheck(f_scatter_zeros, 1, &src, idx, 1e-7, 1e-6);
    ca_tensor *rows = tu_index(TU_SHAPE(2), (int64_t[]){1, 1});
    TU_OK(ca_index_add_zeros(TU_SHAPE(3, 2), 0, rows, src, &y));
    tu_assert_values(y, (double[]){0, 0, 4, 6, 0, 0}, 0);
    ca_tensor_release(y);
    TU_FAILS(ca_scatter_add_zeros(CA_MAX_DIMS + 1, (int64_t[CA_MAX_DIMS + 1]){0}, 0, idx, src, &y),
             CA_STATUS_INVALID, "ca_scatter_add_zeros: a shape of");
    ca_tensor *bad = tu_index(TU_SHAPE(2, 2), (int64_t[]){0, 3, 0, 0});
    cr_assert_neq(ca_scatter_add_zeros(TU_SHAPE(2, 3), 1, bad, src, &y), CA_OK);
    tu_release_n((ca_tensor *[]){idx, src, rows, bad}, 4);
}
