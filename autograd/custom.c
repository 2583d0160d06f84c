/* custom.c - custom functions: nodes whose backward is the user's callback.
 *
 * ca_custom_apply records one node over the inputs and gives each differentiable output
 * its place among the node's outputs (a node of several outputs: edges name the output by
 * input_nr). The backward callback runs with grad mode off; what it returns is checked
 * here for the eager engine and the compiled backward alike, with PyTorch's rules: a
 * gradient of another dtype is converted, one of a broadcast shape summed down, anything
 * else an error naming the function.
 */
#include "autograd/internal.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * The node's life
 */
void cai_custom_free(ca_node *n) {
    ca_custom *c = n->custom;
    if (!c)
        return;
    n->custom = NULL;
    if (c->fn.ctx_free)
        c->fn.ctx_free(c->fn.ctx);
    cai_mem_free(c);
}

/* Interned names: one copy per distinct name, kept until the process ends (functions are
 * classes, so there are few). */
typedef struct interned {
    struct interned *next;
    char name[CA_CUSTOM_NAME_MAX];
} interned;

static interned *interned_names;
static pthread_mutex_t interned_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *intern_name(const char *name) {
    pthread_mutex_lock(&interned_lock);
    interned *it = interned_names;
    while (it && strcmp(it->name, name) != 0)
        it = it->next;
    if (!it && (it = cai_mem_calloc(1, sizeof *it))) { /* never freed: see above */
        snprintf(it->name, sizeof it->name, "%s", name);
        it->next = interned_names;
        interned_names = it;
    }
    pthread_mutex_unlock(&interned_lock);
    return it ? it->name : NULL;
}

static ca_status check_apply_args(const ca_custom_function *fn, int n_inputs,
                                  ca_tensor *const *inputs, int n_outputs,
                                  ca_tensor *const *outputs, ca_tensor **results) {
    CA_ARG_NOT_NULL(fn, "ca_custom_apply");
    CA_ARG_NOT_NULL(outputs, "ca_custom_apply");
    CA_ARG_NOT_NULL(results, "ca_custom_apply");
    if (!fn->backward || !fn->name)
        return err_set(CA_STATUS_INVALID,
                       "ca_custom_apply: the function needs a name and a backward callback");
    if (strlen(fn->name) >= CA_CUSTOM_NAME_MAX)
        return err_set(CA_STATUS_INVALID,
                       "ca_custom_apply: the name \"%.40s...\" is longer than %d bytes", fn->name,
                       CA_CUSTOM_NAME_MAX - 1);
    if (n_inputs < 0 || n_outputs < 1 || (n_inputs > 0 && !inputs))
        return err_set(CA_STATUS_INVALID,
                       "ca_custom_apply: %s: got %d inputs and %d outputs; a function needs at "
                       "least one output",
                       fn->name, n_inputs, n_outputs);
    for (int i = 0; i < n_inputs; i++)
        if (!inputs[i])
            return err_set(CA_STATUS_INVALID, "ca_custom_apply: %s: input %d is NULL", fn->name, i);
    for (int k = 0; k < n_outputs; k++)
        if (!outputs[k])
            return err_set(CA_STATUS_INVALID, "ca_custom_apply: %s: output %d is NULL", fn->name,
                           k);
    return CA_OK;
}

static int input_index(int n_inputs, ca_tensor *const *inputs, const ca_tensor *t) {
    for (int i = 0; i < n_inputs; i++)
        if (inputs[i] == t)
            return i;
    return -1;
}

static bool differentiable_output(const ca_tensor *t, unsigned flags) {
    return !(flags & CA_CUSTOM_NONDIFF) && t->dtype != CA_INT64;
}

/* A dirty output must be an input, and not a leaf that requires grad (as in-place ops). */
static ca_status check_dirty(const ca_custom_function *fn, int n_inputs, ca_tensor *const *inputs,
                             int n_outputs, ca_tensor *const *outputs, const unsigned *flags) {
    for (int k = 0; k < n_outputs; k++) {
        if (!flags || !(flags[k] & CA_CUSTOM_DIRTY))
            continue;
        ca_tensor *t = outputs[k];
        if (input_index(n_inputs, inputs, t) < 0)
            return err_set(CA_STATUS_INVALID,
                           "%s: output %d was marked dirty but is not one of the inputs; "
                           "mark_dirty() takes the inputs that forward() changed in place",
                           fn->name, k);
        if (t->requires_grad && !t->grad_fn && cai_grad_mode_enabled())
            return err_set(CA_STATUS_AUTOGRAD,
                           "a leaf Variable that requires grad has been used in an in-place "
                           "operation. (%s changed input %d in place.)",
                           fn->name, input_index(n_inputs, inputs, t));
    }
    return CA_OK;
}

static ca_status node_make(const ca_custom_function *fn, int n_inputs, ca_tensor *const *inputs,
                           int n_outputs, ca_node **out) {
    ca_node *n;
    CA_CHECK(cai_node_alloc(CA_OP_CUSTOM, n_inputs, &n));
    n->n_out = n_outputs;
    ca_status st = CA_OK;
    n->custom = cai_mem_calloc(1, sizeof *n->custom);
    if (n_outputs > 1 && st == CA_OK)
        n->outs = cai_mem_calloc((size_t)n_outputs - 1, sizeof *n->outs);
    if (!n->custom || (n_outputs > 1 && !n->outs))
        st = err_nomem("a custom function's node");
    if (st == CA_OK) {
        n->custom->fn = *fn;
        n->custom->fn.ctx_free = NULL; /* set once the node owns ctx (node_own_ctx) */
        n->custom->name = intern_name(fn->name);
        n->custom->fn.name = n->custom->name;
        if (!n->custom->name)
            st = err_nomem("a custom function's name");
    }
    for (int i = 0; i < n_inputs && st == CA_OK; i++) {
        ca_tensor *x = inputs[i];
        cai_tensor_meta(x, &n->in_meta[i]);
        if (!x->requires_grad)
            continue;
        n->next[i].input_nr = x->output_nr;
        if (x->grad_fn)
            n->next[i].fn = cai_node_retain(x->grad_fn);
        else
            st = cai_node_grad_accumulator(x, &n->next[i].fn);
    }
    if (st != CA_OK) {
        cai_node_release(n);
        return st;
    }
    *out = n;
    return CA_OK;
}

/* Output k of the node: t itself when it is fresh (or dirty), else a new alias. */
static ca_status attach_output(ca_node *n, int k, ca_tensor *t, bool alias, ca_tensor **res) {
    if (alias)
        CA_CHECK(cai_tensor_alias(t, t->ndim, t->shape, t->strides, t->offset, &t));
    else
        ca_tensor_retain(t);
    if (t->grad_fn && node_retained(t->grad_fn, t->output_nr) == t)
        node_set_retained(t->grad_fn, t->output_nr, NULL);
    cai_node_release(t->grad_fn);
    t->grad_fn = cai_node_retain(n);
    t->output_nr = k;
    t->requires_grad = true;
    t->retains_grad = false;
    cai_tensor_meta(t, node_out_meta(n, k));
    *res = t;
    return CA_OK;
}

static void results_release(int n, ca_tensor **results) {
    for (int k = 0; k < n; k++) {
        ca_tensor_release(results[k]);
        results[k] = NULL;
    }
}

static bool any_requires_grad(int n_inputs, ca_tensor *const *inputs) {
    for (int i = 0; i < n_inputs; i++)
        if (inputs[i]->requires_grad)
            return true;
    return false;
}

static ca_status attach_outputs(ca_node *n, int n_inputs, ca_tensor *const *inputs, int n_outputs,
                                ca_tensor *const *outputs, const unsigned *flags,
                                ca_tensor **results) {
    for (int k = 0; k < n_outputs; k++) {
        ca_tensor *t = outputs[k];
        unsigned f = flags ? flags[k] : 0;
        if (!differentiable_output(t, f)) {
            cai_tensor_meta(t, node_out_meta(n, k));
            if (input_index(n_inputs, inputs, t) >= 0 || t->grad_fn || t->requires_grad)
                CA_CHECK(
                    cai_tensor_alias(t, t->ndim, t->shape, t->strides, t->offset, &results[k]));
            else
                results[k] = ca_tensor_retain(t);
            continue;
        }
        bool dirty = f & CA_CUSTOM_DIRTY;
        bool alias =
            !dirty && (input_index(n_inputs, inputs, t) >= 0 || t->grad_fn || t->requires_grad);
        for (int j = 0; j < k && !alias; j++) /* the same tensor returned twice */
            alias = outputs[j] == t;
        CA_CHECK(attach_output(n, k, t, alias, &results[k]));
    }
    return CA_OK;
}

ca_status ca_custom_apply(const ca_custom_function *fn, int n_inputs, ca_tensor *const *inputs,
                          int n_outputs, ca_tensor *const *outputs, const unsigned *output_flags,
                          ca_tensor **results) {
    CA_CHECK(ca_init());
    ca_status st = check_apply_args(fn, n_inputs, inputs, n_outputs, outputs, results);
    for (int i = 0; i < n_inputs && st == CA_OK; i++) /* a view whose base changed in place */
        st = cai_view_sync_fast(inputs[i]);
    if (st == CA_OK) {
        for (int k = 0; k < n_outputs; k++)
            results[k] = NULL;
        st = check_dirty(fn, n_inputs, inputs, n_outputs, outputs, output_flags);
    }
    for (int k = 0; st == CA_OK && output_flags && k < n_outputs; k++)
        if (output_flags[k] & CA_CUSTOM_DIRTY) /* as PyTorch: a dirty input's version moves on */
            cai_tensor_bump_version(outputs[k]);
    bool record = st == CA_OK && cai_grad_mode_enabled() && any_requires_grad(n_inputs, inputs);
    if (st == CA_OK && !record) {
        for (int k = 0; k < n_outputs; k++)
            results[k] = ca_tensor_retain(outputs[k]);
    }
    ca_node *n = NULL;
    if (record)
        st = node_make(fn, n_inputs, inputs, n_outputs, &n);
    if (n) {
        n->custom->fn.ctx_free = fn->ctx_free; /* the node owns ctx from here on */
        st = attach_outputs(n, n_inputs, inputs, n_outputs, outputs, output_flags, results);
        if (st != CA_OK)
            results_release(n_outputs, results);
        cai_node_release(n); /* the outputs hold it */
        return st;
    }
    if (fn && fn->ctx_free)
        fn->ctx_free(fn->ctx);
    return st;
}

int ca_tensor_output_nr(const ca_tensor *t) {
    return t ? cai_tensor_synced(t)->output_nr : 0;
}

const ca_custom_function *ca_tensor_grad_fn_custom(const ca_tensor *t) {
    return t && cai_tensor_synced(t)->grad_fn && t->grad_fn->custom ? &t->grad_fn->custom->fn
                                                                    : NULL;
}

const ca_custom_function *ca_tensor_sole_custom_fn(const ca_tensor *t) {
    if (!t || ref_count((cai_refcnt *)&t->refcnt) != 1) /* no sync: collectors run no ops */
        return NULL;
    ca_node *n = t->grad_fn;
    return n && n->custom && ref_count(&n->refcnt) == 1 ? &n->custom->fn : NULL;
}

/* ---------------------------------------------------------------------------------------
 * The backward
 */
/* g as input i's gradient: converted to its dtype, summed down from a broadcast shape. */
static ca_status fit_grad(const ca_node *n, int i, ca_tensor **g) {
    const ca_meta *want = &n->in_meta[i];
    ca_meta have;
    cai_tensor_meta(*g, &have);
    if (!cai_meta_same_shape(&have, want)) {
        cai_rule_error e;
        if (cai_rule_sum_to(&cai_sizes_concrete, have.ndim, have.shape, want->ndim, want->shape,
                            &e) != 0) {
            char s1[96], s2[96];
            return err_set(CA_STATUS_SHAPE,
                           "Function %s returned an invalid gradient at index %d - got %s but "
                           "expected shape compatible with %s",
                           n->custom->name, i, cai_err_shape_str(have.ndim, have.shape, s1, 96),
                           cai_err_shape_str(want->ndim, want->shape, s2, 96));
        }
        ca_attrs a = {0};
        a.shape.n = want->ndim;
        memcpy(a.shape.v, want->shape, sizeof(int64_t) * (size_t)want->ndim);
        ca_tensor *s;
        CA_CHECK(cai_op_call1(CA_OP_SUM_TO, *g, &a, &s));
        ca_tensor_release(*g);
        *g = s;
    }
    if ((*g)->dtype != want->dtype) {
        ca_attrs a = {.i = {want->dtype}};
        ca_tensor *c;
        CA_CHECK(cai_op_call1(CA_OP_TO_DTYPE, *g, &a, &c));
        ca_tensor_release(*g);
        *g = c;
    }
    return CA_OK;
}

/* the node whose backward callback runs on this thread (innermost), for saved outputs */
static _Thread_local ca_node *running_node;

ca_status ca_custom_saved_output(ca_tensor *saved, int k, ca_tensor **out) {
    CA_ARG_NOT_NULL(out, "ca_custom_saved_output");
    *out = NULL;
    CA_ARG_NOT_NULL(saved, "ca_custom_saved_output");
    ca_node *n = running_node;
    if (!n)
        return err_set(CA_STATUS_INVALID,
                       "ca_custom_saved_output: called outside a custom function's backward");
    if (k < 0 || k >= n->n_out)
        return err_set(CA_STATUS_INVALID, "ca_custom_saved_output: output %d of %s, which has %d",
                       k, n->custom->name, n->n_out);
    ca_meta m;
    cai_tensor_meta(saved, &m);
    const ca_meta *want = node_out_meta(n, k);
    if (m.dtype != want->dtype || !cai_meta_same_shape(&m, want))
        return err_set(CA_STATUS_INVALID,
                       "ca_custom_saved_output: the tensor is not output %d of %s (its dtype or "
                       "shape differs)",
                       k, n->custom->name);
    if (!cai_engine_create_graph()) {
        *out = ca_tensor_retain(saved);
        return CA_OK;
    }
    CA_CHECK(
        cai_tensor_alias(saved, saved->ndim, saved->shape, saved->strides, saved->offset, out));
    (*out)->grad_fn = cai_node_retain(n); /* the backward's scope holds it, never the node */
    (*out)->output_nr = k;
    (*out)->requires_grad = true;
    return CA_OK;
}

ca_status cai_custom_backward(ca_node *n, ca_tensor *const *grads, ca_tensor **gin) {
    ca_custom *c = n->custom;
    for (int i = 0; i < n->n_in; i++)
        gin[i] = NULL;
    /* grad mode = create_graph, as PyTorch: a backward written with differentiable ops is
     * then differentiable again */
    bool prev = ca_set_grad_enabled(cai_engine_create_graph());
    uint64_t gen = cai_err_generation();
    ca_node *outer = running_node;
    running_node = n;
    ca_status st = c->fn.backward(c->fn.ctx, n->n_out, grads, n->n_in, gin);
    running_node = outer;
    if (st != CA_OK && cai_err_generation() == gen)
        st = err_set(st, "the backward of %s failed with %s and set no message", c->name,
                     ca_status_name(st));
    for (int i = 0; i < n->n_in && st == CA_OK; i++) {
        if (!node_needs_grad(n, i)) {
            ca_tensor_release(gin[i]);
            gin[i] = NULL;
        } else if (gin[i]) {
            st = fit_grad(n, i, &gin[i]);
        }
    }
    ca_set_grad_enabled(prev);
    if (st != CA_OK)
        for (int i = 0; i < n->n_in; i++) {
            ca_tensor_release(gin[i]);
            gin[i] = NULL;
        }
    return st;
}
