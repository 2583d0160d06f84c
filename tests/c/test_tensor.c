/* test_tensor.c - suite `tensor`: creation, metadata, storage alignment, reference
 * counts, views (shared storage and version counter), data access, detach, the autograd
 * attributes of a tensor, and in-place ops with their version bumps and grad-mode rules.
 */
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static double val(const ca_tensor *t, int64_t i) {
    return tu_get(t, i);
}

/* ---------------------------------------------------------------------------------------
 * Creation
 */
Test(tensor, zeros_ones_full_every_dtype) {
    const ca_dtype dts[] = {CA_FLOAT32, CA_FLOAT64, CA_INT64};
    for (int k = 0; k < 3; k++) {
        ca_tensor *z, *o, *f;
        TU_OK(ca_zeros(dts[k], TU_SHAPE(2, 3), &z));
        TU_OK(ca_ones(dts[k], TU_SHAPE(2, 3), &o));
        TU_OK(ca_full(dts[k], TU_SHAPE(2, 3), 7.0, &f));
        cr_assert_eq(ca_tensor_dtype(z), dts[k]);
        cr_assert_eq(ca_tensor_numel(f), 6);
        for (int64_t i = 0; i < 6; i++) {
            cr_assert_eq(val(z, i), 0.0, "zeros(%s)[%ld]", ca_dtype_name(dts[k]), (long)i);
            cr_assert_eq(val(o, i), 1.0, "ones(%s)[%ld]", ca_dtype_name(dts[k]), (long)i);
            cr_assert_eq(val(f, i), 7.0, "full(%s)[%ld]", ca_dtype_name(dts[k]), (long)i);
        }
        ca_tensor_release(z);
        ca_tensor_release(o);
        ca_tensor_release(f);
    }
}

Test(tensor, zero_dim_and_empty_tensors) {
    ca_tensor *s, *e;
    TU_OK(ca_full(CA_FLOAT64, 0, NULL, 2.5, &s));
    cr_assert_eq(ca_tensor_ndim(s), 0);
    cr_assert_eq(ca_tensor_numel(s), 1);
    double v = 0;
    TU_OK(ca_tensor_item(s, &v));
    cr_assert_eq(v, 2.5);
    TU_OK(ca_zeros(CA_FLOAT32, TU_SHAPE(0, 3), &e));
    cr_assert_eq(ca_tensor_numel(e), 0);
    cr_assert_eq(ca_tensor_shape(e)[0], 0);
    cr_assert_eq(ca_tensor_shape(e)[1], 3);
    cr_assert(ca_tensor_is_contiguous(e));
    ca_tensor_release(s);
    ca_tensor_release(e);
}

Test(tensor, arange_float32) {
    ca_tensor *t;
    TU_OK(ca_arange(0, 1, 0.25, CA_FLOAT32, &t));
    cr_assert_eq(ca_tensor_ndim(t), 1);
    tu_assert_values(t, (double[]){0, 0.25, 0.5, 0.75}, 0);
    ca_tensor_release(t);
    /* end is exclusive even when step does not divide the range */
    TU_OK(ca_arange(1, 2.05, 0.5, CA_FLOAT32, &t));
    tu_assert_values(t, (double[]){1, 1.5, 2}, 0);
    ca_tensor_release(t);
}

Test(tensor, arange_negative_step_float64) {
    ca_tensor *t;
    TU_OK(ca_arange(5, 0, -1.5, CA_FLOAT64, &t));
    cr_assert_eq(ca_tensor_dtype(t), CA_FLOAT64);
    cr_assert_eq(ca_tensor_numel(t), 4);
    tu_assert_values(t, (double[]){5, 3.5, 2, 0.5}, 0);
    ca_tensor_release(t);
}

Test(tensor, arange_int64) {
    ca_tensor *t;
    TU_OK(ca_arange(2, 11, 3, CA_INT64, &t));
    cr_assert_eq(ca_tensor_dtype(t), CA_INT64);
    const int64_t *p = ca_tensor_data(t);
    cr_assert_eq(ca_tensor_numel(t), 3);
    cr_assert(p[0] == 2 && p[1] == 5 && p[2] == 8, "got %ld %ld %ld", (long)p[0], (long)p[1],
              (long)p[2]);
    ca_tensor_release(t);
    TU_OK(ca_arange(3, -3, -2, CA_INT64, &t));
    p = ca_tensor_data(t);
    cr_assert_eq(ca_tensor_numel(t), 3);
    cr_assert(p[0] == 3 && p[1] == 1 && p[2] == -1);
    ca_tensor_release(t);
}

static bool same_values(const ca_tensor *a, const ca_tensor *b) {
    for (int64_t i = 0; i < ca_tensor_numel(a); i++)
        if (val(a, i) != val(b, i))
            return false;
    return true;
}

Test(tensor, randn_reproducible_with_seed) {
    ca_tensor *a, *b, *c, *d;
    ca_manual_seed(42);
    TU_OK(ca_randn(CA_FLOAT32, TU_SHAPE(64), &a));
    TU_OK(ca_randn(CA_FLOAT32, TU_SHAPE(64), &c)); /* the generator moved on */
    ca_manual_seed(42);
    TU_OK(ca_randn(CA_FLOAT32, TU_SHAPE(64), &b));
    ca_manual_seed(43);
    TU_OK(ca_randn(CA_FLOAT32, TU_SHAPE(64), &d));
    cr_assert(same_values(a, b), "same seed must give the same values");
    cr_assert(!same_values(a, c), "a second call must give new values");
    cr_assert(!same_values(a, d), "another seed must give other values");
    /* standard normal: the sample mean and variance of 64 draws are loose but bounded */
    double m = 0, v = 0;
    for (int i = 0; i < 64; i++)
        m += val(a, i) / 64;
    for (int i = 0; i < 64; i++)
        v += (val(a, i) - m) * (val(a, i) - m) / 63;
    cr_assert(fabs(m) < 0.5 && v > 0.4 && v < 2.0, "mean %g var %g", m, v);
    ca_tensor *all[] = {a, b, c, d};
    for (int i = 0; i < 4; i++)
        ca_tensor_release(all[i]);
}

Test(tensor, rand_uniform_range_and_reproducible) {
    ca_tensor *a, *b;
    ca_manual_seed(7);
    TU_OK(ca_rand(CA_FLOAT64, TU_SHAPE(10, 20), &a));
    ca_manual_seed(7);
    TU_OK(ca_rand(CA_FLOAT64, TU_SHAPE(10, 20), &b));
    cr_assert(same_values(a, b));
    double m = 0;
    for (int i = 0; i < 200; i++) {
        double x = val(a, i);
        cr_assert(x >= 0 && x < 1, "rand value %g outside [0, 1)", x);
        m += x / 200;
    }
    cr_assert(fabs(m - 0.5) < 0.1, "mean %g", m);
    ca_tensor_release(a);
    ca_tensor_release(b);
}

Test(tensor, from_data_copies_the_buffer) {
    double src[6] = {1, 2, 3, 4, 5, 6};
    ca_tensor *t;
    TU_OK(ca_from_data(CA_FLOAT64, TU_SHAPE(3, 2), src, &t));
    src[0] = 100; /* the tensor owns a copy */
    tu_assert_values(t, (double[]){1, 2, 3, 4, 5, 6}, 0);
    cr_assert_neq(ca_tensor_data(t), (void *)src);
    ca_tensor_release(t);
    int64_t ints[3] = {-1, 0, 1LL << 40};
    TU_OK(ca_from_data(CA_INT64, TU_SHAPE(3), ints, &t));
    cr_assert_eq(((int64_t *)ca_tensor_data(t))[2], 1LL << 40);
    ca_tensor_release(t);
}

/* ---------------------------------------------------------------------------------------
 * Metadata, storage, references
 */
Test(tensor, metadata_getters) {
    ca_tensor *t;
    TU_OK(ca_zeros(CA_FLOAT64, TU_SHAPE(2, 3, 4), &t));
    cr_assert_eq(ca_tensor_dtype(t), CA_FLOAT64);
    cr_assert_eq(ca_tensor_ndim(t), 3);
    const int64_t *sh = ca_tensor_shape(t), *st = ca_tensor_strides(t);
    cr_assert(sh[0] == 2 && sh[1] == 3 && sh[2] == 4);
    cr_assert(st[0] == 12 && st[1] == 4 && st[2] == 1, "strides %ld %ld %ld", (long)st[0],
              (long)st[1], (long)st[2]);
    cr_assert_eq(ca_tensor_numel(t), 24);
    cr_assert(ca_tensor_is_contiguous(t));
    cr_assert_eq(ca_tensor_version(t), 0);
    cr_assert(ca_tensor_is_leaf(t));
    cr_assert(!ca_tensor_requires_grad(t));
    cr_assert_null(ca_tensor_grad(t));
    cr_assert_null(ca_tensor_grad_fn_name(t));
    cr_assert(!ca_tensor_retains_grad(t));
    cr_assert_str_eq(ca_dtype_name(CA_FLOAT32), "float32");
    cr_assert_str_eq(ca_dtype_name(CA_INT64), "int64");
    cr_assert_eq(ca_dtype_size(CA_FLOAT32), 4);
    cr_assert_eq(ca_dtype_size(CA_FLOAT64), 8);
    cr_assert_eq(ca_dtype_size(CA_INT64), 8);
    ca_tensor_release(t);
}

Test(tensor, storage_is_64_byte_aligned) {
    const int64_t sizes[] = {1, 3, 17, 1000};
    const ca_dtype dts[] = {CA_FLOAT32, CA_FLOAT64, CA_INT64};
    for (int k = 0; k < 3; k++)
        for (int s = 0; s < 4; s++) {
            ca_tensor *t;
            TU_OK(ca_empty(dts[k], 1, &sizes[s], &t));
            cr_assert_eq((uintptr_t)ca_tensor_data(t) % 64, 0, "%s[%ld] at %p",
                         ca_dtype_name(dts[k]), (long)sizes[s], ca_tensor_data(t));
            ca_tensor_release(t);
        }
    /* op results too */
    ca_tensor *a = tu_randn(CA_FLOAT32, TU_SHAPE(5, 7), false), *b;
    TU_OK(ca_exp(a, &b));
    cr_assert_eq((uintptr_t)ca_tensor_data(b) % 64, 0);
    ca_tensor_release(a);
    ca_tensor_release(b);
}

Test(tensor, retain_release_frees_on_last_reference) {
    tu_alloc_install();
    ca_tensor *t;
    TU_OK(ca_ones(CA_FLOAT32, TU_SHAPE(4), &t));
    long live = tu_alloc_live();
    cr_assert_gt(live, 0, "the counting allocator saw no allocation");
    cr_assert_eq(ca_tensor_retain(t), t, "retain returns its argument");
    ca_tensor_release(t);
    cr_assert_eq(tu_alloc_live(), live, "freed while a reference remained");
    cr_assert_eq(val(t, 3), 1.0);
    ca_tensor_release(t);
    cr_assert_eq(tu_alloc_live(), 0, "%ld blocks still live after the last release",
                 tu_alloc_live());
    ca_tensor_release(NULL); /* no-op */
    cr_assert_null(ca_tensor_retain(NULL));
    tu_alloc_uninstall();
}

Test(tensor, view_keeps_storage_alive) {
    tu_alloc_install();
    ca_tensor *t, *v;
    TU_OK(ca_arange(0, 6, 1, CA_FLOAT32, &t));
    TU_OK(ca_slice(t, 0, 2, 6, 1, &v));
    ca_tensor_release(t); /* the view still holds the storage */
    tu_assert_values(v, (double[]){2, 3, 4, 5}, 0);
    ca_tensor_release(v);
    cr_assert_eq(tu_alloc_live(), 0);
    tu_alloc_uninstall();
}

/* ---------------------------------------------------------------------------------------
 * Views and data access
 */
Test(tensor, transpose_shares_storage_and_version) {
    ca_tensor *t, *v;
    TU_OK(ca_arange(0, 6, 1, CA_FLOAT32, &t));
    ca_tensor *m;
    TU_OK(ca_reshape(t, TU_SHAPE(2, 3), &m));
    TU_OK(ca_transpose(m, 0, 1, &v));
    cr_assert_eq(ca_tensor_data(v), ca_tensor_data(m), "a transpose is a view");
    cr_assert(!ca_tensor_is_contiguous(v));
    cr_assert(ca_tensor_strides(v)[0] == 1 && ca_tensor_strides(v)[1] == 3);
    cr_assert(ca_tensor_shape(v)[0] == 3 && ca_tensor_shape(v)[1] == 2);
    uint64_t v0 = ca_tensor_version(v);
    TU_OK(ca_mul_scalar_(m, 2.0));
    cr_assert_eq(ca_tensor_version(v), v0 + 1, "the view shares the version counter");
    cr_assert_eq(ca_tensor_version(t), v0 + 1);
    /* v[2, 1] = m[1, 2] = 2 * 5 */
    cr_assert_eq(val(v, 5), 10.0);
    TU_OK(ca_fill_(v, -1.0)); /* a write through the view is seen by the base */
    cr_assert_eq(ca_tensor_version(m), v0 + 2);
    cr_assert_eq(val(t, 4), -1.0);
    ca_tensor_release(t);
    ca_tensor_release(m);
    ca_tensor_release(v);
}

Test(tensor, strided_slice_view) {
    ca_tensor *t, *v;
    TU_OK(ca_arange(0, 10, 1, CA_FLOAT64, &t));
    TU_OK(ca_slice(t, 0, 1, 10, 3, &v)); /* 1, 4, 7 */
    cr_assert_eq(ca_tensor_numel(v), 3);
    cr_assert_eq(ca_tensor_strides(v)[0], 3);
    cr_assert_eq((double *)ca_tensor_data(v), (double *)ca_tensor_data(t) + 1);
    tu_assert_values(v, (double[]){1, 4, 7}, 0);
    TU_OK(ca_zero_(v));
    tu_assert_values(t, (double[]){0, 0, 2, 3, 0, 5, 6, 0, 8, 9}, 0);
    cr_assert_eq(ca_tensor_version(t), 1);
    ca_tensor_release(t);
    ca_tensor_release(v);
}

Test(tensor, copy_to_of_noncontiguous_view) {
    ca_tensor *t, *m, *v;
    TU_OK(ca_arange(0, 6, 1, CA_FLOAT64, &t));
    TU_OK(ca_reshape(t, TU_SHAPE(2, 3), &m));
    TU_OK(ca_transpose(m, 0, 1, &v));
    double out[6] = {0};
    TU_OK(ca_tensor_copy_to(v, out, sizeof out));
    const double want[6] = {0, 3, 1, 4, 2, 5};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(out[i], want[i], "out[%d] = %g, want %g", i, out[i], want[i]);
    float f32[4] = {0};
    ca_tensor *g = tu_from(CA_FLOAT32, TU_SHAPE(2, 2), (double[]){1, 2, 3, 4}, false), *gt;
    TU_OK(ca_transpose(g, 0, 1, &gt));
    TU_OK(ca_tensor_copy_to(gt, f32, sizeof f32));
    cr_assert(f32[0] == 1 && f32[1] == 3 && f32[2] == 2 && f32[3] == 4);
    ca_tensor *all[] = {t, m, v, g, gt};
    for (int i = 0; i < 5; i++)
        ca_tensor_release(all[i]);
}

Test(tensor, item_of_one_element_tensors) {
    double v = 0;
    ca_tensor *a = tu_from(CA_FLOAT32, TU_SHAPE(1, 1), (double[]){1.5}, false);
    ca_tensor *b = tu_from(CA_FLOAT64, 0, NULL, (double[]){-2.25}, false);
    ca_tensor *c = tu_index(TU_SHAPE(1), (int64_t[]){123456789012LL});
    TU_OK(ca_tensor_item(a, &v));
    cr_assert_eq(v, 1.5);
    TU_OK(ca_tensor_item(b, &v));
    cr_assert_eq(v, -2.25);
    TU_OK(ca_tensor_item(c, &v));
    cr_assert_eq(v, 123456789012.0);
    ca_tensor_release(a);
    ca_tensor_release(b);
    ca_tensor_release(c);
}

Test(tensor, describe) {
    char buf[64];
    ca_tensor *a, *b, *c;
    TU_OK(ca_zeros(CA_FLOAT32, TU_SHAPE(2, 3), &a));
    TU_OK(ca_zeros(CA_INT64, 0, NULL, &b));
    TU_OK(ca_zeros(CA_FLOAT64, TU_SHAPE(5), &c));
    cr_assert_str_eq(ca_tensor_describe(a, buf, sizeof buf), "float32[2, 3]");
    cr_assert_str_eq(ca_tensor_describe(b, buf, sizeof buf), "int64[]");
    cr_assert_str_eq(ca_tensor_describe(c, buf, sizeof buf), "float64[5]");
    char small[6];
    memset(small, 'x', sizeof small);
    cr_assert_eq(ca_tensor_describe(a, small, sizeof small), small);
    cr_assert_eq(small[5], '\0', "a truncated description is still NUL-terminated");
    cr_assert_str_eq(small, "float");
    ca_tensor_release(a);
    ca_tensor_release(b);
    ca_tensor_release(c);
}

/* ---------------------------------------------------------------------------------------
 * Autograd attributes
 */
Test(tensor, detach_shares_storage_without_graph) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(3), true), *y, *d;
    TU_OK(ca_exp(x, &y));
    TU_OK(ca_tensor_detach(y, &d));
    cr_assert_eq(ca_tensor_data(d), ca_tensor_data(y));
    cr_assert_null(ca_tensor_grad_fn_name(d));
    cr_assert(!ca_tensor_requires_grad(d));
    cr_assert(ca_tensor_is_leaf(d));
    cr_assert_str_eq(ca_tensor_grad_fn_name(y), "ExpBackward0");
    uint64_t v = ca_tensor_version(y);
    TU_OK(ca_fill_(d, 3.0)); /* allowed: d is outside the graph */
    cr_assert_eq(ca_tensor_version(y), v + 1, "detach shares the version counter");
    cr_assert_eq(val(y, 0), 3.0);
    ca_tensor_release(x);
    ca_tensor_release(y);
    ca_tensor_release(d);
}

Test(tensor, set_requires_grad_rules) {
    ca_tensor *i = tu_index(TU_SHAPE(2), (int64_t[]){0, 1});
    TU_FAILS(ca_tensor_set_requires_grad(i, true), CA_STATUS_DTYPE, "int64");
    cr_assert(!ca_tensor_requires_grad(i));
    TU_OK(ca_tensor_set_requires_grad(i, false));
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2), true), *y;
    cr_assert(ca_tensor_requires_grad(x));
    TU_OK(ca_mul_scalar(x, 2.0, &y));
    cr_assert(!ca_tensor_is_leaf(y));
    TU_OK(ca_tensor_set_requires_grad(y, true)); /* already true: fine */
    TU_FAILS(ca_tensor_set_requires_grad(y, false), CA_STATUS_AUTOGRAD, "leaf");
    cr_assert(ca_tensor_requires_grad(y));
    TU_OK(ca_tensor_set_requires_grad(x, false)); /* a leaf may turn it off */
    cr_assert(!ca_tensor_requires_grad(x));
    ca_tensor_release(i);
    ca_tensor_release(x);
    ca_tensor_release(y);
}

Test(tensor, set_grad_checks_and_replaces) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3), true);
    ca_tensor *bad = tu_randn(CA_FLOAT32, TU_SHAPE(3, 2), false);
    ca_tensor *bad_dt = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3), false);
    ca_tensor *good = tu_randn(CA_FLOAT32, TU_SHAPE(2, 3), false);
    TU_FAILS(ca_tensor_set_grad(x, bad), CA_STATUS_SHAPE, "[3, 2]");
    cr_assert(strstr(ca_last_error(), "[2, 3]"), "%s", ca_last_error());
    TU_FAILS(ca_tensor_set_grad(x, bad_dt), CA_STATUS_SHAPE, "float64");
    cr_assert_null(ca_tensor_grad(x));
    TU_OK(ca_tensor_set_grad(x, good));
    cr_assert_eq(ca_tensor_grad(x), good);
    ca_tensor_release(good); /* x keeps its own reference */
    cr_assert_eq(ca_tensor_numel(ca_tensor_grad(x)), 6);
    TU_OK(ca_tensor_set_grad(x, NULL));
    cr_assert_null(ca_tensor_grad(x));
    ca_tensor_release(x);
    ca_tensor_release(bad);
    ca_tensor_release(bad_dt);
}

/* ---------------------------------------------------------------------------------------
 * In-place ops
 */
Test(tensor, inplace_ops_bump_version_and_compute) {
    ca_tensor *a = tu_from(CA_FLOAT32, TU_SHAPE(2, 2), (double[]){1, 2, 3, 4}, false);
    ca_tensor *b = tu_from(CA_FLOAT32, TU_SHAPE(2, 2), (double[]){10, 20, 30, 40}, false);
    ca_tensor *row = tu_from(CA_FLOAT32, TU_SHAPE(2), (double[]){5, 6}, false);
    cr_assert_eq(ca_tensor_version(a), 0);
    TU_OK(ca_add_(a, b, 0.5)); /* a += 0.5 * b */
    cr_assert_eq(ca_tensor_version(a), 1);
    tu_assert_values(a, (double[]){6, 12, 18, 24}, 0);
    TU_OK(ca_mul_(a, row)); /* broadcast over rows */
    cr_assert_eq(ca_tensor_version(a), 2);
    tu_assert_values(a, (double[]){30, 72, 90, 144}, 0);
    TU_OK(ca_mul_scalar_(a, 0.5));
    cr_assert_eq(ca_tensor_version(a), 3);
    tu_assert_values(a, (double[]){15, 36, 45, 72}, 0);
    TU_OK(ca_zero_(a));
    cr_assert_eq(ca_tensor_version(a), 4);
    tu_assert_values(a, (double[]){0, 0, 0, 0}, 0);
    TU_OK(ca_fill_(a, 2.5));
    cr_assert_eq(ca_tensor_version(a), 5);
    tu_assert_values(a, (double[]){2.5, 2.5, 2.5, 2.5}, 0);
    TU_OK(ca_copy_(a, row)); /* src broadcasts to self's shape */
    cr_assert_eq(ca_tensor_version(a), 6);
    tu_assert_values(a, (double[]){5, 6, 5, 6}, 0);
    cr_assert_eq(ca_tensor_version(b), 0, "other is only read");
    cr_assert_eq(ca_tensor_version(row), 0);
    ca_tensor_release(a);
    ca_tensor_release(b);
    ca_tensor_release(row);
}

Test(tensor, inplace_cannot_grow_self) {
    ca_tensor *a = tu_randn(CA_FLOAT32, TU_SHAPE(2), false);
    ca_tensor *b = tu_randn(CA_FLOAT32, TU_SHAPE(3, 2), false);
    TU_FAILS(ca_add_(a, b, 1.0), CA_STATUS_SHAPE, "[3, 2]");
    cr_assert_eq(ca_tensor_version(a), 0, "a failed in-place op must not bump the version");
    ca_tensor_release(a);
    ca_tensor_release(b);
}

Test(tensor, inplace_on_leaf_requiring_grad) {
    ca_tensor *w = tu_from(CA_FLOAT64, TU_SHAPE(3), (double[]){1, 2, 3}, true);
    ca_tensor *d = tu_from(CA_FLOAT64, TU_SHAPE(3), (double[]){1, 1, 1}, false);
    cr_assert(ca_is_grad_enabled());
    TU_FAILS(ca_add_(w, d, -0.5), CA_STATUS_AUTOGRAD, "leaf");
    cr_assert(strstr(ca_last_error(), "ca_set_grad_enabled"), "%s", ca_last_error());
    TU_FAILS(ca_zero_(w), CA_STATUS_AUTOGRAD, "in-place");
    cr_assert_eq(ca_tensor_version(w), 0);
    tu_assert_values(w, (double[]){1, 2, 3}, 0);
    bool prev = ca_set_grad_enabled(false);
    cr_assert(prev);
    TU_OK(ca_add_(w, d, -0.5));
    TU_OK(ca_mul_scalar_(w, 2.0));
    cr_assert(!ca_set_grad_enabled(prev));
    cr_assert(ca_is_grad_enabled());
    cr_assert_eq(ca_tensor_version(w), 2);
    tu_assert_values(w, (double[]){1, 3, 5}, 0);
    cr_assert(ca_tensor_requires_grad(w) && ca_tensor_is_leaf(w));
    ca_tensor_release(w);
    ca_tensor_release(d);
}

/* detach_ in place: a non-leaf leaves its graph, and a view made by a view op refuses. */
Test(tensor, detach_in_place) {
    int64_t shape[] = {2, 3};
    ca_tensor *a = tu_randn(CA_FLOAT32, 2, shape, true), *y = NULL, *v = NULL;
    TU_OK(ca_mul_scalar(a, 2.0, &y));
    TU_OK(ca_transpose(y, 0, 1, &v));
    TU_FAILS(ca_tensor_detach_(v), CA_STATUS_AUTOGRAD, "Can't detach views in-place");
    TU_OK(ca_tensor_retain_grad(y));
    TU_OK(ca_tensor_detach_(y));
    cr_assert(ca_tensor_is_leaf(y));
    cr_assert_not(ca_tensor_requires_grad(y));
    cr_assert_null(ca_tensor_grad_fn(y));
    cr_assert_not_null(ca_tensor_grad_fn(v), "the view keeps its history");
    ca_tensor *ts[] = {v, y, a};
    tu_release_n(ts, 3);
}

/* A node that saved a non-leaf input refuses it once that input was detached in place
 * (PyTorch's SavedVariable error), eager and compiled; one that saved a leaf does not. */
Test(tensor, saved_input_detached_in_place_is_refused) {
    for (int compiled = 0; compiled < 2; compiled++) {
        ca_tensor *a = tu_randn(CA_FLOAT32, TU_SHAPE(3), true), *y = NULL, *s = NULL, *l = NULL;
        ca_tensor *leaf_sin = NULL, *l2 = NULL;
        TU_OK(ca_mul_scalar(a, 2.0, &y));
        TU_OK(ca_sin(y, &s)); /* saves y, a non-leaf */
        TU_OK(ca_sin(a, &leaf_sin));
        TU_OK(ca_sum(s, 0, NULL, false, &l));
        TU_OK(ca_sum(leaf_sin, 0, NULL, false, &l2));
        TU_OK(ca_tensor_detach_(y));
        if (compiled)
            TU_OK(ca_compiled_autograd_enable(NULL));
        TU_FAILS(ca_backward(l), CA_STATUS_AUTOGRAD, "detached in-place");
        TU_OK(ca_backward(l2));
        if (compiled)
            TU_OK(ca_compiled_autograd_disable());
        ca_tensor *ts[] = {l2, leaf_sin, l, s, y, a};
        tu_release_n(ts, 6);
    }
}

/* A transposed leaf's first .grad is transposed too (PyTorch's AccumulateGrad layout),
 * eager and compiled, with the GEMM writing it; then it accumulates in place. */
Test(tensor, grad_takes_a_dense_leafs_strides) {
    for (int compiled = 0; compiled < 2; compiled++) {
        int64_t ws[] = {5, 3}, xs[] = {4, 3};
        ca_tensor *w0 = tu_randn(CA_FLOAT32, 2, ws, false), *w = NULL, *wd = NULL;
        ca_tensor *x = tu_randn(CA_FLOAT32, 2, xs, false), *y = NULL, *loss = NULL;
        TU_OK(ca_transpose(w0, 0, 1, &wd));
        TU_OK(ca_tensor_detach(wd, &w));
        TU_OK(ca_tensor_set_requires_grad(w, true));
        if (compiled)
            TU_OK(ca_compiled_autograd_enable(NULL));
        TU_OK(ca_matmul(x, w, &y));
        TU_OK(ca_sum(y, 0, NULL, false, &loss));
        TU_OK(ca_backward(loss));
        const int64_t *st = ca_tensor_strides(ca_tensor_grad(w));
        cr_assert(st[0] == 1 && st[1] == 3, "compiled %d: .grad strides (%lld, %lld)", compiled,
                  (long long)st[0], (long long)st[1]);
        /* d(sum(x @ w))/dw[k][j] = sum_i x[i][k] */
        for (int k = 0; k < 3; k++) {
            double want = 0;
            for (int i = 0; i < 4; i++)
                want += tu_at(x, (int64_t[]){i, k});
            for (int j = 0; j < 5; j++)
                cr_assert_float_eq(tu_at(ca_tensor_grad(w), (int64_t[]){k, j}), want, 1e-4);
        }
        if (compiled)
            TU_OK(ca_compiled_autograd_disable());
        ca_tensor *ts[] = {loss, y, x, w, wd, w0};
        tu_release_n(ts, 6);
    }
}
