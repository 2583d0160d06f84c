/* tensor.c - refcounted tensors over refcounted, 64-byte aligned storage.
 *
 * A tensor is a view: shape, element strides and an offset into a storage that other
 * views may share. The version counter lives in the storage, so an in-place write through
 * any view is seen by every saved alias of it.
 */
#include "autograd/internal.h"
#include "codegen/cast.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Storage
 */
static ca_status storage_new(size_t nbytes, ca_storage **out) {
    ca_storage *s = cai_mem_calloc(1, sizeof *s); /* zeroed: not external, no deleter */
    if (!s)
        return err_nomem("a tensor storage header");
    s->data = cai_mem_data_alloc(nbytes);
    if (!s->data) {
        cai_mem_free(s);
        return err_nomem("tensor data");
    }
    atomic_init(&s->refcnt, 1);
    s->nbytes = nbytes;
    s->version = 0;
    *out = s;
    return CA_OK;
}

static void storage_release(ca_storage *s) {
    if (!s || !ref_dec(&s->refcnt))
        return;
    if (!s->external)
        cai_mem_data_free(s->data);
    else if (s->deleter)
        s->deleter(s->deleter_ctx);
    cai_mem_free(s);
}

/* ---------------------------------------------------------------------------------------
 * Construction and geometry
 */
size_t ca_dtype_size(ca_dtype dtype) {
    return dtype == CA_BOOL ? 1 : dtype == CA_FLOAT32 ? 4 : 8;
}

const char *ca_dtype_name(ca_dtype dtype) {
    switch (dtype) {
    case CA_FLOAT32: return "float32";
    case CA_FLOAT64: return "float64";
    case CA_INT64: return "int64";
    case CA_BOOL: return "bool";
    }
    return "invalid-dtype";
}

void cai_tensor_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = s;
        s *= shape[d] > 0 ? shape[d] : 1;
    }
}

static ca_status meta_validate(const ca_meta *m, const char *fn) {
    if ((unsigned)m->dtype > CA_BOOL)
        return err_set(CA_STATUS_DTYPE,
                       "%s: invalid dtype %d; use CA_FLOAT32, CA_FLOAT64, CA_INT64 or "
                       "CA_BOOL",
                       fn, (int)m->dtype);
    if (m->ndim < 0 || m->ndim > CA_MAX_DIMS)
        return err_set(CA_STATUS_SHAPE,
                       "%s: ndim %d is out of range; cagrad supports 0 to %d "
                       "dims",
                       fn, m->ndim, CA_MAX_DIMS);
    int64_t n = 1;
    for (int d = 0; d < m->ndim; d++) {
        if (m->shape[d] < 0)
            return err_set(CA_STATUS_SHAPE,
                           "%s: size %lld at dim %d is negative; sizes must "
                           "be >= 0",
                           fn, (long long)m->shape[d], d);
        if (m->shape[d] && n > (INT64_MAX / 8) / m->shape[d])
            return err_set(CA_STATUS_SHAPE, "%s: the shape has too many elements", fn);
        n *= m->shape[d];
    }
    return CA_OK;
}

static ca_status tensor_header(ca_storage *s, const ca_meta *m, ca_tensor **out) {
    ca_tensor *t = cai_mem_calloc(1, sizeof *t);
    if (!t)
        return err_nomem("a tensor header");
    atomic_init(&t->refcnt, 1);
    t->dtype = m->dtype;
    t->ndim = m->ndim;
    memcpy(t->shape, m->shape, sizeof(int64_t) * (size_t)m->ndim);
    cai_tensor_contiguous_strides(m->ndim, m->shape, t->strides);
    t->storage = s;
    *out = t;
    return CA_OK;
}

ca_status cai_tensor_new(const ca_meta *m, ca_tensor **out) {
    *out = NULL;
    CA_CHECK(meta_validate(m, "tensor"));
    ca_storage *s = NULL;
    CA_CHECK(storage_new((size_t)cai_meta_numel(m) * ca_dtype_size(m->dtype), &s));
    ca_status st = tensor_header(s, m, out);
    if (st != CA_OK)
        storage_release(s);
    return st;
}

ca_status cai_tensor_alias(ca_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                           int64_t offset, ca_tensor **out) {
    ca_meta m = {.dtype = t->dtype, .ndim = ndim};
    memcpy(m.shape, shape, sizeof(int64_t) * (size_t)ndim);
    CA_CHECK(tensor_header(t->storage, &m, out));
    ref_inc(&t->storage->refcnt);
    memcpy((*out)->strides, strides, sizeof(int64_t) * (size_t)ndim);
    (*out)->offset = offset;
    return CA_OK;
}

void cai_tensor_meta(const ca_tensor *t, ca_meta *out) {
    out->dtype = t->dtype;
    out->ndim = t->ndim;
    memcpy(out->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
}

void *cai_tensor_ptr(const ca_tensor *t) {
    return (char *)t->storage->data + (size_t)t->offset * ca_dtype_size(t->dtype);
}

void cai_tensor_src(const ca_tensor *t, int out_ndim, const int64_t *out_shape, kern_src *src) {
    src->data = cai_tensor_ptr(t);
    for (int i = 0; i < out_ndim; i++) {
        int d = i - (out_ndim - t->ndim);
        bool broadcast = d < 0 || (t->shape[d] == 1 && out_shape[i] != 1);
        src->strides[i] = broadcast ? 0 : t->strides[d];
    }
}

void cai_tensor_add_into(ca_tensor *acc, const kern_src *other) {
    kern_src src[2];
    cai_tensor_src(acc, acc->ndim, acc->shape, &src[0]);
    src[1] = *other;
    cai_kern_pointwise(KPW_ADD, kdt(acc->dtype), KERN_F32, acc->ndim, acc->shape,
                       cai_tensor_ptr(acc), acc->strides, src, 1.0, 0);
    cai_tensor_bump_version(acc);
}

void cai_tensor_bump_version(ca_tensor *t) {
    if (cai_recording)
        cai_record_refuse("it changes a tensor in place");
    t->storage->version++;
}

/* ---------------------------------------------------------------------------------------
 * References
 */
ca_tensor *ca_tensor_retain(ca_tensor *t) {
    if (t)
        ref_inc(&t->refcnt);
    return t;
}

void ca_tensor_release(ca_tensor *t) {
    if (!t || !ref_dec(&t->refcnt))
        return;
    if (t->grad_fn && node_retained(t->grad_fn, t->output_nr) == t)
        node_set_retained(t->grad_fn, t->output_nr, NULL);
    if (t->grad_accumulator)
        t->grad_accumulator->leaf = NULL; /* unreachable: the node holds a strong ref */
    cai_hook_list_free(&t->hooks);
    cai_hook_list_free(&t->post_acc_hooks);
    ca_tensor_release(t->grad);
    cai_node_release(t->grad_fn);
    cai_node_release(t->view_step);
    ca_tensor_release(t->view_src); /* at most CAI_VIEW_CHAIN_MAX deep */
    ca_tensor_release(t->view_base);
    storage_release(t->storage);
    cai_mem_free(t);
}

/* ---------------------------------------------------------------------------------------
 * Kernel helpers used by every layer above
 */
ca_status cai_tensor_pointwise(kern_pw_op op, const ca_meta *m, int n, ca_tensor *const *in,
                               double p0, double p1, ca_tensor **out) {
    CA_CHECK(cai_tensor_new(m, out));
    kern_src src[3];
    kern_dtype cond_dt = KERN_F32;
    for (int i = 0; i < n; i++)
        cai_tensor_src(in[i], m->ndim, m->shape, &src[i]);
    if (op == KPW_WHERE)
        cond_dt = kdt(in[0]->dtype);
    else if (op == KPW_MASKED_FILL)
        cond_dt = kdt(in[1]->dtype);
    if (cai_kern_pointwise(op, kdt(m->dtype), cond_dt, m->ndim, m->shape, cai_tensor_ptr(*out),
                           (*out)->strides, src, p0, p1) != 0) {
        ca_tensor_release(*out);
        *out = NULL;
        return err_set(CA_STATUS_DTYPE, "%s is not supported for %s tensors", cai_kern_pw_name(op),
                       ca_dtype_name(m->dtype));
    }
    return CA_OK;
}

bool ca_tensor_is_contiguous(const ca_tensor *t) {
    int64_t expect = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] == 1)
            continue;
        if (t->shape[d] == 0)
            return true;
        if (t->strides[d] != expect)
            return false;
        expect *= t->shape[d];
    }
    return true;
}

/* Whether t's elements fill their memory span without overlap in some order of its dims. */
static bool tensor_dense(const ca_tensor *t) {
    int order[CA_MAX_DIMS], n = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 0)
            return true;
        if (t->shape[d] != 1)
            order[n++] = d;
    }
    for (int i = 1; i < n; i++) /* by stride, smallest first (insertion sort: n <= 8) */
        for (int j = i; j > 0 && t->strides[order[j]] < t->strides[order[j - 1]]; j--) {
            int tmp = order[j];
            order[j] = order[j - 1];
            order[j - 1] = tmp;
        }
    int64_t expect = 1;
    for (int i = 0; i < n; i++) {
        if (t->strides[order[i]] != expect)
            return false;
        expect *= t->shape[order[i]];
    }
    return true;
}

bool cai_tensor_grad_strided(const ca_tensor *leaf) {
    return !ca_tensor_is_contiguous(leaf) && tensor_dense(leaf);
}

ca_status cai_tensor_grad_like(const ca_tensor *leaf, ca_tensor **out) {
    ca_meta m;
    cai_tensor_meta(leaf, &m);
    if (!cai_tensor_grad_strided(leaf))
        return cai_tensor_new(&m, out);
    ca_tensor *flat = NULL;
    CA_CHECK(cai_tensor_new(&m, &flat)); /* numel entries: the dense layout's span */
    ca_status st = cai_tensor_alias(flat, leaf->ndim, leaf->shape, leaf->strides, 0, out);
    ca_tensor_release(flat);
    return st;
}

ca_status cai_tensor_contiguous(ca_tensor *t, ca_tensor **out) {
    if (ca_tensor_is_contiguous(t)) {
        *out = ca_tensor_retain(t);
        return CA_OK;
    }
    ca_meta m;
    cai_tensor_meta(t, &m);
    return cai_tensor_pointwise(KPW_COPY, &m, 1, &t, 0, 0, out);
}

ca_status cai_tensor_full(const ca_meta *m, double value, ca_tensor **out) {
    CA_CHECK(cai_tensor_new(m, out));
    kern_src none = {.data = cai_tensor_ptr(*out)};
    cai_kern_pointwise(KPW_FILL, kdt(m->dtype), KERN_F32, m->ndim, m->shape, cai_tensor_ptr(*out),
                       (*out)->strides, &none, value, 0);
    return CA_OK;
}

/* ---------------------------------------------------------------------------------------
 * Creation (public)
 */
static ca_status make_meta(ca_dtype dt, int ndim, const int64_t *shape, ca_meta *m,
                           const char *fn) {
    if (ndim > 0 && !shape)
        return err_set(CA_STATUS_INVALID, "%s: shape is NULL but ndim is %d; pass %d sizes", fn,
                       ndim, ndim);
    if (ndim < 0 || ndim > CA_MAX_DIMS)
        return err_set(CA_STATUS_SHAPE,
                       "%s: ndim %d is out of range; cagrad supports 0 to %d "
                       "dims",
                       fn, ndim, CA_MAX_DIMS);
    m->dtype = dt;
    m->ndim = ndim;
    if (ndim)
        memcpy(m->shape, shape, sizeof(int64_t) * (size_t)ndim);
    return meta_validate(m, fn);
}

static ca_status create_filled(ca_dtype dt, int ndim, const int64_t *shape, double v,
                               ca_tensor **out, const char *fn) {
    CA_CHECK(ca_init());
    CA_ARG_NOT_NULL(out, fn);
    *out = NULL;
    ca_meta m;
    CA_CHECK(make_meta(dt, ndim, shape, &m, fn));
    CA_CHECK(cai_tensor_full(&m, v, out));
    if (cai_recording)
        cai_record_fill(*out, v);
    return CA_OK;
}

ca_status ca_empty(ca_dtype dt, int ndim, const int64_t *shape, ca_tensor **out) {
    CA_CHECK(ca_init());
    CA_ARG_NOT_NULL(out, "ca_empty");
    *out = NULL;
    ca_meta m;
    CA_CHECK(make_meta(dt, ndim, shape, &m, "ca_empty"));
    return cai_tensor_new(&m, out);
}

ca_status ca_zeros(ca_dtype dt, int ndim, const int64_t *shape, ca_tensor **out) {
    return create_filled(dt, ndim, shape, 0.0, out, "ca_zeros");
}

ca_status ca_ones(ca_dtype dt, int ndim, const int64_t *shape, ca_tensor **out) {
    return create_filled(dt, ndim, shape, 1.0, out, "ca_ones");
}

ca_status ca_full(ca_dtype dt, int ndim, const int64_t *shape, double value, ca_tensor **out) {
    return create_filled(dt, ndim, shape, value, out, "ca_full");
}

ca_status ca_arange(double start, double end, double step, ca_dtype dt, ca_tensor **out) {
    CA_CHECK(ca_init());
    CA_ARG_NOT_NULL(out, "ca_arange");
    *out = NULL;
    if (step == 0 || !isfinite(step) || !isfinite(start) || !isfinite(end))
        return err_set(CA_STATUS_INVALID,
                       "ca_arange: start, end and step must be finite and "
                       "step nonzero (got %g, %g, %g)",
                       start, end, step);
    if ((end - start) * step < 0)
        return err_set(CA_STATUS_INVALID,
                       "ca_arange: step %g goes away from end (start %g, end "
                       "%g); flip the sign of step",
                       step, start, end);
    if (dt == CA_BOOL) /* as torch: arange has no bool kernel */
        return err_set(CA_STATUS_DTYPE, "ca_arange: \"arange_cpu\" not implemented for 'Bool'");
    int64_t n = (int64_t)ceil((end - start) / step);
    ca_tensor *t;
    CA_CHECK(ca_empty(dt, 1, &n, &t));
    for (int64_t i = 0; i < n; i++) {
        double v = start + (double)i * step;
        if (dt == CA_FLOAT32)
            ((float *)cai_tensor_ptr(t))[i] = (float)v;
        else if (dt == CA_FLOAT64)
            ((double *)cai_tensor_ptr(t))[i] = v;
        else
            ((int64_t *)cai_tensor_ptr(t))[i] = (int64_t)v;
    }
    *out = t;
    return CA_OK;
}

static ca_status create_random(ca_dtype dt, int ndim, const int64_t *shape, bool normal,
                               ca_tensor **out, const char *fn) {
    CA_CHECK(ca_init());
    CA_ARG_NOT_NULL(out, fn);
    *out = NULL;
    if (dt == CA_INT64 || dt == CA_BOOL)
        return err_set(CA_STATUS_DTYPE,
                       "%s: random values need a float dtype (CA_FLOAT32 or "
                       "CA_FLOAT64), got %s",
                       fn, ca_dtype_name(dt));
    ca_meta m;
    CA_CHECK(make_meta(dt, ndim, shape, &m, fn));
    CA_CHECK(cai_tensor_new(&m, out));
    uint64_t seed, offset;
    cai_random_take(cai_meta_numel(&m), &seed, &offset);
    if (normal)
        cai_kern_rand_normal(kdt(dt), seed, &offset, cai_meta_numel(&m), cai_tensor_ptr(*out));
    else
        cai_kern_rand_uniform(kdt(dt), seed, &offset, cai_meta_numel(&m), cai_tensor_ptr(*out));
    return CA_OK;
}

ca_status ca_randn(ca_dtype dt, int ndim, const int64_t *shape, ca_tensor **out) {
    return create_random(dt, ndim, shape, true, out, "ca_randn");
}

ca_status ca_rand(ca_dtype dt, int ndim, const int64_t *shape, ca_tensor **out) {
    return create_random(dt, ndim, shape, false, out, "ca_rand");
}

ca_status ca_from_data(ca_dtype dt, int ndim, const int64_t *shape, const void *data,
                       ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_from_data");
    *out = NULL;
    CA_ARG_NOT_NULL(data, "ca_from_data");
    CA_CHECK(ca_empty(dt, ndim, shape, out));
    memcpy(cai_tensor_ptr(*out), data, (*out)->storage->nbytes);
    return CA_OK;
}

/* The bytes a view reaches from its first element, so an external storage knows its
 * extent (0 for an empty tensor). */
static size_t blob_extent(const ca_meta *m, const int64_t *strides) {
    int64_t last = 0;
    for (int d = 0; d < m->ndim; d++) {
        if (m->shape[d] == 0)
            return 0;
        last += (m->shape[d] - 1) * strides[d];
    }
    return (size_t)(last + 1) * ca_dtype_size(m->dtype);
}

static ca_status blob_check(const ca_meta *m, const int64_t *strides, const void *data) {
    static const char fn[] = "ca_tensor_from_blob";
    for (int d = 0; d < m->ndim; d++)
        if (strides[d] < 0)
            return err_set(CA_STATUS_INVALID,
                           "%s: stride %lld at dim %d is negative; cagrad views need "
                           "strides >= 0: copy the data into a contiguous buffer first",
                           fn, (long long)strides[d], d);
    if ((uintptr_t)data % ca_dtype_size(m->dtype))
        return err_set(CA_STATUS_INVALID,
                       "%s: data %p is not aligned to its %s elements (%zu bytes); copy it "
                       "into an aligned buffer first",
                       fn, data, ca_dtype_name(m->dtype), ca_dtype_size(m->dtype));
    return CA_OK;
}

ca_status ca_tensor_from_blob(ca_dtype dt, int ndim, const int64_t *shape, const int64_t *strides,
                              void *data, ca_blob_deleter_fn deleter, void *ctx, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_tensor_from_blob");
    *out = NULL;
    CA_CHECK(ca_init());
    CA_ARG_NOT_NULL(data, "ca_tensor_from_blob");
    if (ndim > 0)
        CA_ARG_NOT_NULL(shape, "ca_tensor_from_blob");
    ca_meta m = {.dtype = dt, .ndim = ndim};
    if (ndim > 0 && ndim <= CA_MAX_DIMS)
        memcpy(m.shape, shape, sizeof(int64_t) * (size_t)ndim);
    int64_t st[CA_MAX_DIMS];
    CA_CHECK(meta_validate(&m, "ca_tensor_from_blob"));
    if (strides)
        memcpy(st, strides, sizeof(int64_t) * (size_t)ndim);
    else
        cai_tensor_contiguous_strides(ndim, m.shape, st);
    CA_CHECK(blob_check(&m, st, data));
    ca_storage *s = cai_mem_calloc(1, sizeof *s);
    if (!s)
        return err_nomem("a tensor storage header");
    *s = (ca_storage){.refcnt = 1, .data = data, .nbytes = blob_extent(&m, st), .external = true};
    ca_status status = tensor_header(s, &m, out);
    if (status != CA_OK) {
        cai_mem_free(s); /* not storage_release: the caller keeps data on failure */
        return status;
    }
    memcpy((*out)->strides, st, sizeof(int64_t) * (size_t)ndim);
    s->deleter = deleter; /* only now: from here on the storage owns data */
    s->deleter_ctx = ctx;
    return CA_OK;
}

/* ---------------------------------------------------------------------------------------
 * Metadata and data access (public)
 */
ca_dtype ca_tensor_dtype(const ca_tensor *t) {
    return t ? t->dtype : CA_FLOAT32;
}
int ca_tensor_ndim(const ca_tensor *t) {
    return t ? t->ndim : 0;
}
const int64_t *ca_tensor_shape(const ca_tensor *t) {
    return t ? t->shape : NULL;
}
const int64_t *ca_tensor_strides(const ca_tensor *t) {
    return t ? t->strides : NULL;
}
uint64_t ca_tensor_version(const ca_tensor *t) {
    return t ? t->storage->version : 0;
}
bool cai_tensor_same_view(const ca_tensor *a, const ca_tensor *b) {
    if (a == b)
        return true;
    if (a->storage != b->storage || a->offset != b->offset || a->ndim != b->ndim ||
        a->dtype != b->dtype)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || a->strides[d] != b->strides[d])
            return false;
    return true;
}

void *ca_tensor_data(const ca_tensor *t) {
    if (cai_recording)
        cai_record_refuse("it reads tensor data (.item(), .tolist(), NumPy, printing)");
    return t ? cai_tensor_ptr(t) : NULL;
}

int64_t ca_tensor_numel(const ca_tensor *t) {
    if (!t)
        return 0;
    ca_meta m;
    cai_tensor_meta(t, &m);
    return cai_meta_numel(&m);
}

ca_status ca_tensor_copy_to(const ca_tensor *t, void *dst, size_t nbytes) {
    CA_ARG_NOT_NULL(t, "ca_tensor_copy_to");
    CA_ARG_NOT_NULL(dst, "ca_tensor_copy_to");
    size_t need = (size_t)ca_tensor_numel(t) * ca_dtype_size(t->dtype);
    if (nbytes < need)
        return err_set(CA_STATUS_INVALID,
                       "ca_tensor_copy_to: the buffer holds %zu bytes but the "
                       "tensor needs %zu; pass a larger buffer",
                       nbytes, need);
    int64_t strides[CA_MAX_DIMS];
    kern_src src;
    cai_tensor_contiguous_strides(t->ndim, t->shape, strides);
    cai_tensor_src(t, t->ndim, t->shape, &src);
    cai_kern_pointwise(KPW_COPY, kdt(t->dtype), KERN_F32, t->ndim, t->shape, dst, strides, &src, 0,
                       0);
    return CA_OK;
}

ca_status ca_tensor_item(const ca_tensor *t, double *out) {
    if (cai_recording)
        cai_record_refuse("it reads tensor data (.item(), .tolist(), NumPy, printing)");
    CA_ARG_NOT_NULL(t, "ca_tensor_item");
    CA_ARG_NOT_NULL(out, "ca_tensor_item");
    if (ca_tensor_numel(t) != 1) {
        char s[96];
        return err_set(CA_STATUS_SHAPE,
                       "ca_tensor_item: a tensor of shape %s has %lld elements; "
                       "item() needs exactly one",
                       cai_err_shape_str(t->ndim, t->shape, s, sizeof s),
                       (long long)ca_tensor_numel(t));
    }
    const void *p = cai_tensor_ptr(t);
    *out = kern_load(kdt(t->dtype), p, 0);
    return CA_OK;
}

const char *ca_tensor_describe(const ca_tensor *t, char *buf, size_t size) {
    if (!buf || size == 0)
        return buf;
    if (!t) {
        snprintf(buf, size, "NULL");
        return buf;
    }
    char s[160];
    snprintf(buf, size, "%s%s", ca_dtype_name(t->dtype),
             cai_err_shape_str(t->ndim, t->shape, s, sizeof s));
    return buf;
}

/* ---------------------------------------------------------------------------------------
 * Autograd state of a tensor (public)
 */
/* t's history, brought up to date first when t is a view whose base changed in place (a
 * lazy update, as PyTorch regenerates a view's grad_fn when read: it changes no value). A
 * failure leaves the old history, for the next op on t to report. */
const ca_tensor *cai_tensor_synced(const ca_tensor *t) {
    if (t && t->view_base && cai_view_sync_fast((ca_tensor *)t) != CA_OK)
        ca_error_clear();
    return t;
}

bool ca_tensor_requires_grad(const ca_tensor *t) {
    return t && cai_tensor_synced(t)->requires_grad;
}
bool ca_tensor_is_leaf(const ca_tensor *t) {
    return t && !cai_tensor_synced(t)->grad_fn;
}
ca_tensor *ca_tensor_grad(const ca_tensor *t) {
    return t ? t->grad : NULL;
}
bool ca_tensor_retains_grad(const ca_tensor *t) {
    return t && t->retains_grad;
}

ca_tensor *ca_tensor_view_base(const ca_tensor *t) {
    return t ? t->view_base : NULL;
}

const char *ca_tensor_grad_fn_name(const ca_tensor *t) {
    return t && cai_tensor_synced(t)->grad_fn ? cai_node_name(t->grad_fn) : NULL;
}

ca_status ca_tensor_set_requires_grad(ca_tensor *t, bool requires_grad) {
    CA_ARG_NOT_NULL(t, "ca_tensor_set_requires_grad");
    CA_CHECK(cai_view_sync_fast(t));
    if (t->grad_fn) {
        if (requires_grad)
            return CA_OK;
        return err_set(CA_STATUS_AUTOGRAD,
                       "ca_tensor_set_requires_grad: only leaf tensors can change requires_grad, "
                       "and this one was made by %s; use ca_tensor_detach() for a tensor outside "
                       "the graph",
                       cai_node_name(t->grad_fn));
    }
    if (requires_grad && (t->dtype == CA_INT64 || t->dtype == CA_BOOL))
        return err_set(CA_STATUS_DTYPE,
                       "ca_tensor_set_requires_grad: only float tensors can "
                       "require grad, this one is %s; convert it with "
                       "ca_to_dtype first",
                       ca_dtype_name(t->dtype));
    t->requires_grad = requires_grad;
    return CA_OK;
}

ca_status ca_tensor_set_grad(ca_tensor *t, ca_tensor *grad) {
    CA_ARG_NOT_NULL(t, "ca_tensor_set_grad");
    if (grad) {
        ca_meta a, b;
        cai_tensor_meta(t, &a);
        cai_tensor_meta(grad, &b);
        if (!cai_meta_same_shape(&a, &b) || a.dtype != b.dtype) {
            char s1[96], s2[96];
            return err_set(
                CA_STATUS_SHAPE,
                "ca_tensor_set_grad: the gradient is %s%s but the tensor is %s%s; a "
                "gradient must match its tensor's shape and dtype",
                ca_dtype_name(b.dtype), cai_err_shape_str(b.ndim, b.shape, s1, sizeof s1),
                ca_dtype_name(a.dtype), cai_err_shape_str(a.ndim, a.shape, s2, sizeof s2));
        }
    }
    ca_tensor *old = t->grad;
    t->grad = ca_tensor_retain(grad);
    ca_tensor_release(old);
    return CA_OK;
}

ca_status ca_tensor_detach(ca_tensor *t, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_tensor_detach");
    *out = NULL;
    CA_ARG_NOT_NULL(t, "ca_tensor_detach");
    return cai_tensor_alias(t, t->ndim, t->shape, t->strides, t->offset, out);
}

void ca_tensor_set_binding(ca_tensor *t, void *p) {
    if (t)
        t->binding = p;
}

void *ca_tensor_binding(const ca_tensor *t) {
    return t ? t->binding : NULL;
}

ca_status ca_tensor_detach_(ca_tensor *t) {
    CA_ARG_NOT_NULL(t, "ca_tensor_detach_");
    CA_CHECK(cai_view_sync_fast(t));
    ca_node *n = t->grad_fn;
    if (n && !n->custom && cai_op_def(n->op)->fusion == CA_FUSE_VIEW)
        return err_set(CA_STATUS_AUTOGRAD,
                       "Can't detach views in-place. Use detach() instead. If you are using "
                       "DistributedDataParallel (DDP) for training, and gradient_as_bucket_view "
                       "is set as True, gradients are views of DDP buckets, and hence detach_() "
                       "cannot be called on these gradients. To fix this error, please refer to "
                       "the Optimizer.zero_grad() function in torch/optim/optimizer.py as the "
                       "solution. (ca_tensor_detach_: this tensor is a view made by %s.)",
                       cai_node_name(n));
    if (n && t->retains_grad && node_retained(n, t->output_nr) == t)
        node_set_retained(n, t->output_nr, NULL); /* the node forgets its weak pointer */
    if (n) /* nodes that saved it as an input now refuse it (cai_node_check_saved) */
        t->storage->detach_epoch++;
    t->grad_fn = NULL;
    t->output_nr = 0;
    t->requires_grad = false;
    cai_node_release(n);
    return CA_OK;
}

ca_status ca_tensor_retain_grad(ca_tensor *t) {
    CA_ARG_NOT_NULL(t, "ca_tensor_retain_grad");
    CA_CHECK(cai_view_sync_fast(t));
    if (!t->requires_grad)
        return err_set(CA_STATUS_AUTOGRAD, "ca_tensor_retain_grad: the tensor does not require "
                                           "grad, so it will never get one; call it on a tensor "
                                           "computed from inputs that require grad");
    if (!t->grad_fn)
        return CA_OK; /* leaves keep their grad anyway */
    t->retains_grad = true;
    node_set_retained(t->grad_fn, t->output_nr, t);
    return CA_OK;
}
