/* inplace.c - in-place updates (add_, mul_, zero_, fill_, copy_), mostly for optimizer
 * steps under no-grad. Each bumps the storage's version counter, which is how backward
 * detects a saved tensor that changed under it.
 */
#include "autograd/internal.h"

static ca_status inplace_check(ca_tensor *self, ca_tensor *other, const char *fn) {
    CA_CHECK(ca_init());
    CA_ARG_NOT_NULL(self, fn);
    if (!cai_grad_mode_enabled())
        return CA_OK;
    if (self->requires_grad && !self->grad_fn)
        return err_set(CA_STATUS_AUTOGRAD,
                       "%s: a leaf tensor that requires grad is being used in an in-place "
                       "operation; do the update with grad mode off (ca_set_grad_enabled(false), "
                       "as torch.no_grad() does for optimizer steps)",
                       fn);
    if (self->requires_grad || (other && other->requires_grad))
        return err_set(CA_STATUS_AUTOGRAD,
                       "%s: in-place ops on tensors in the autograd graph are not supported; use "
                       "the out-of-place op, or turn grad mode off if no gradient should flow",
                       fn);
    return CA_OK;
}

/* self = op(self, other) with other broadcast to self's shape. */
static ca_status inplace_binary(ca_tensor *self, ca_tensor *other, kern_pw_op op, double p0,
                                const char *fn) {
    CA_ARG_NOT_NULL(other, fn);
    CA_CHECK(inplace_check(self, other, fn));
    ca_meta ms, mo, mb;
    cai_tensor_meta(self, &ms);
    cai_tensor_meta(other, &mo);
    if (ms.dtype != mo.dtype)
        return err_set(CA_STATUS_DTYPE,
                       "%s: self is %s but other is %s; convert other with "
                       "ca_to_dtype",
                       fn, ca_dtype_name(ms.dtype), ca_dtype_name(mo.dtype));
    CA_CHECK(cai_meta_broadcast(&ms, &mo, &mb, fn));
    if (!cai_meta_same_shape(&mb, &ms)) {
        char s1[96], s2[96];
        return err_set(CA_STATUS_SHAPE,
                       "%s: other of shape %s cannot be broadcast to self's "
                       "shape %s in place",
                       fn, cai_err_shape_str(mo.ndim, mo.shape, s1, 96),
                       cai_err_shape_str(ms.ndim, ms.shape, s2, 96));
    }
    kern_src src[2];
    cai_tensor_src(self, ms.ndim, ms.shape, &src[0]);
    cai_tensor_src(other, ms.ndim, ms.shape, &src[1]);
    const kern_src *s = op == KPW_COPY ? &src[1] : src; /* copy reads only other */
    if (cai_kern_pointwise(op, kdt(ms.dtype), KERN_F32, ms.ndim, ms.shape, cai_tensor_ptr(self),
                           self->strides, s, p0, 0) != 0)
        return err_set(CA_STATUS_DTYPE, "%s: not supported for %s tensors", fn,
                       ca_dtype_name(ms.dtype));
    cai_tensor_bump_version(self);
    return CA_OK;
}

/* self = op(self) with scalar p0. */
static ca_status inplace_unary(ca_tensor *self, kern_pw_op op, double p0, const char *fn) {
    CA_CHECK(inplace_check(self, NULL, fn));
    kern_src src;
    cai_tensor_src(self, self->ndim, self->shape, &src);
    if (cai_kern_pointwise(op, kdt(self->dtype), KERN_F32, self->ndim, self->shape,
                           cai_tensor_ptr(self), self->strides, &src, p0, 0) != 0)
        return err_set(CA_STATUS_DTYPE, "%s: not supported for %s tensors", fn,
                       ca_dtype_name(self->dtype));
    cai_tensor_bump_version(self);
    return CA_OK;
}

ca_status ca_add_(ca_tensor *self, ca_tensor *other, double alpha) {
    return inplace_binary(self, other, KPW_ADD, alpha, "ca_add_");
}

ca_status ca_mul_(ca_tensor *self, ca_tensor *other) {
    return inplace_binary(self, other, KPW_MUL, 0, "ca_mul_");
}

ca_status ca_copy_(ca_tensor *self, ca_tensor *src) {
    return inplace_binary(self, src, KPW_COPY, 0, "ca_copy_");
}

ca_status ca_mul_scalar_(ca_tensor *self, double s) {
    return inplace_unary(self, KPW_MUL_S, s, "ca_mul_scalar_");
}

ca_status ca_zero_(ca_tensor *self) {
    return inplace_unary(self, KPW_FILL, 0, "ca_zero_");
}

ca_status ca_fill_(ca_tensor *self, double value) {
    return inplace_unary(self, KPW_FILL, value, "ca_fill_");
}
