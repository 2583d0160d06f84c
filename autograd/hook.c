/* hook.c - tensor pre-hooks and post-accumulate-grad hooks.
 *
 * A leaf keeps its hooks itself; a non-leaf's pre-hooks live on its grad_fn, so they run
 * even after the user drops the tensor (as in PyTorch). Handles are process-unique ids.
 */
#include "autograd/internal.h"

#include <stdatomic.h>
#include <string.h>

static atomic_uint_fast64_t next_hook_id = 1;

void cai_hook_list_free(ca_hook **list) {
    ca_hook *h = *list;
    *list = NULL;
    while (h) {
        ca_hook *next = h->next;
        if (h->ctx_free)
            h->ctx_free(h->ctx);
        cai_mem_free(h);
        h = next;
    }
}

static ca_status hook_append(ca_hook **list, ca_hook *h) {
    while (*list)
        list = &(*list)->next;
    *list = h;
    return CA_OK;
}

static ca_status hook_new(hook_kind kind, void *ctx, ca_ctx_free_fn ctx_free, ca_hook **out) {
    ca_hook *h = cai_mem_calloc(1, sizeof *h);
    if (!h)
        return err_nomem("a hook");
    h->id = atomic_fetch_add(&next_hook_id, 1);
    h->kind = kind;
    h->ctx = ctx;
    h->ctx_free = ctx_free;
    *out = h;
    return CA_OK;
}

ca_status ca_tensor_register_hook(ca_tensor *t, ca_tensor_hook_fn fn, void *ctx,
                                  ca_ctx_free_fn ctx_free, ca_hook_handle *handle) {
    CA_ARG_NOT_NULL(t, "ca_tensor_register_hook");
    CA_ARG_NOT_NULL(fn, "ca_tensor_register_hook");
    CA_CHECK(cai_view_sync_fast(t));
    if (!t->requires_grad)
        return err_set(CA_STATUS_AUTOGRAD, "ca_tensor_register_hook: cannot register a hook on "
                                           "a tensor that does not require grad; call "
                                           "ca_tensor_set_requires_grad(t, true) on the leaf "
                                           "first");
    ca_hook *h = NULL;
    CA_CHECK(hook_new(HOOK_PRE, ctx, ctx_free, &h));
    h->pre = fn;
    h->output_nr = t->grad_fn ? t->output_nr : 0;
    hook_append(t->grad_fn ? &t->grad_fn->pre_hooks : &t->hooks, h);
    if (handle)
        *handle = h->id;
    return CA_OK;
}

ca_status ca_tensor_register_post_accumulate_grad_hook(ca_tensor *t, ca_post_accumulate_hook_fn fn,
                                                       void *ctx, ca_ctx_free_fn ctx_free,
                                                       ca_hook_handle *handle) {
    CA_ARG_NOT_NULL(t, "ca_tensor_register_post_accumulate_grad_hook");
    CA_ARG_NOT_NULL(fn, "ca_tensor_register_post_accumulate_grad_hook");
    if (t->grad_fn || !t->requires_grad)
        return err_set(CA_STATUS_AUTOGRAD,
                       "ca_tensor_register_post_accumulate_grad_hook: post-accumulate-grad hooks "
                       "can only be registered on leaf tensors that require grad (this tensor %s)",
                       t->grad_fn ? "is not a leaf" : "does not require grad");
    ca_hook *h = NULL;
    CA_CHECK(hook_new(HOOK_POST_ACCUMULATE, ctx, ctx_free, &h));
    h->post = fn;
    hook_append(&t->post_acc_hooks, h);
    if (handle)
        *handle = h->id;
    return CA_OK;
}

/* The ids of the hooks running on this thread, innermost last. A running hook cannot be
 * removed: its entry and ctx would be freed under its own call, and the loop running it
 * reads the entry afterwards. (Python's handles defer such a removal to the backward's
 * end, as PyTorch lets a hook remove itself.) */
#define HOOK_NEST 32
static _Thread_local ca_hook_handle hook_running[HOOK_NEST];
static _Thread_local int hook_depth;

static void hook_enter(const ca_hook *h) {
    if (hook_depth < HOOK_NEST)
        hook_running[hook_depth] = h->id;
    hook_depth++;
}

static void hook_leave(void) {
    hook_depth--;
}

static bool hook_is_running(ca_hook_handle id) {
    for (int i = 0; i < hook_depth && i < HOOK_NEST; i++)
        if (hook_running[i] == id)
            return true;
    return hook_depth > HOOK_NEST; /* too deep to know: assume it is */
}

typedef enum { UNLINK_NONE, UNLINK_DONE, UNLINK_RUNNING } unlink_result;

static unlink_result hook_unlink(ca_hook **list, ca_hook_handle id) {
    for (; *list; list = &(*list)->next) {
        if ((*list)->id != id)
            continue;
        if (hook_is_running(id))
            return UNLINK_RUNNING;
        ca_hook *h = *list;
        *list = h->next;
        h->next = NULL;
        cai_hook_list_free(&h);
        return UNLINK_DONE;
    }
    return UNLINK_NONE;
}

/* The status of removing `handle` from the first of n lists that has it. */
static ca_status hook_remove(ca_hook **lists[], int n, ca_hook_handle handle, const char *fn,
                             bool *found) {
    *found = true;
    for (int i = 0; i < n; i++) {
        unlink_result r = lists[i] ? hook_unlink(lists[i], handle) : UNLINK_NONE;
        if (r == UNLINK_DONE)
            return CA_OK;
        if (r == UNLINK_RUNNING)
            return err_set(CA_STATUS_INVALID,
                           "%s: hook %llu is running; a hook cannot remove itself during its "
                           "own call (remove it after the backward returns)",
                           fn, (unsigned long long)handle);
    }
    *found = false;
    return CA_OK;
}

ca_status ca_tensor_remove_hook(ca_tensor *t, ca_hook_handle handle) {
    CA_ARG_NOT_NULL(t, "ca_tensor_remove_hook");
    ca_hook **lists[] = {&t->hooks, &t->post_acc_hooks, t->grad_fn ? &t->grad_fn->pre_hooks : NULL};
    bool found;
    ca_status st = hook_remove(lists, 3, handle, "ca_tensor_remove_hook", &found);
    if (found)
        return st;
    return err_set(CA_STATUS_INVALID,
                   "ca_tensor_remove_hook: no hook with handle %llu is "
                   "registered on this tensor (already removed, or registered "
                   "on another tensor)",
                   (unsigned long long)handle);
}

ca_status cai_hook_run_pre(ca_hook *list, ca_tensor **grad, const ca_meta *expect,
                           const char *owner) {
    return cai_hook_run_pre_output(list, -1, grad, expect, owner);
}

/* k < 0: every hook of the list. */
ca_status cai_hook_run_pre_output(ca_hook *list, int k, ca_tensor **grad, const ca_meta *expect,
                                  const char *owner) {
    for (ca_hook *h = list; h; h = h->next) {
        if (k >= 0 && h->output_nr != k)
            continue;
        ca_tensor *repl = NULL;
        uint64_t gen = cai_err_generation();
        hook_enter(h);
        ca_status st = h->pre(*grad, &repl, h->ctx);
        hook_leave();
        if (st != CA_OK) {
            ca_tensor_release(repl);
            if (cai_err_generation() == gen)
                return err_set(CA_STATUS_HOOK,
                               "a tensor hook on the output of %s failed with "
                               "%s and set no message",
                               owner, ca_status_name(st));
            return st;
        }
        if (!repl)
            continue;
        ca_meta m;
        cai_tensor_meta(repl, &m);
        if (!cai_meta_same_shape(&m, expect) || m.dtype != expect->dtype) {
            char s1[96], s2[96];
            ca_tensor_release(repl);
            return err_set(CA_STATUS_HOOK,
                           "a tensor hook on the output of %s returned a gradient of %s%s, but "
                           "the tensor is %s%s; a hook must return a gradient of the same shape "
                           "and dtype (or none)",
                           owner, ca_dtype_name(m.dtype),
                           cai_err_shape_str(m.ndim, m.shape, s1, 96), ca_dtype_name(expect->dtype),
                           cai_err_shape_str(expect->ndim, expect->shape, s2, 96));
        }
        ca_tensor_release(*grad);
        *grad = repl;
    }
    return CA_OK;
}

ca_status cai_hook_run_post(ca_hook *list, ca_tensor *leaf) {
    for (ca_hook *h = list; h; h = h->next) {
        uint64_t gen = cai_err_generation();
        hook_enter(h);
        ca_status st = h->post(leaf, h->ctx);
        hook_leave();
        if (st != CA_OK) {
            if (cai_err_generation() == gen)
                return err_set(CA_STATUS_HOOK,
                               "a post-accumulate-grad hook failed with %s and "
                               "set no message",
                               ca_status_name(st));
            return st;
        }
    }
    return CA_OK;
}

/* ---------------------------------------------------------------------------------------
 * Node hooks
 */
/* A new hook of `kind` appended to list; the caller sets its function. */
static ca_status node_hook_add(ca_hook **list, hook_kind kind, void *ctx, ca_ctx_free_fn ctx_free,
                               ca_hook_handle *handle, ca_hook **out) {
    CA_CHECK(hook_new(kind, ctx, ctx_free, out));
    hook_append(list, *out);
    if (handle)
        *handle = (*out)->id;
    return CA_OK;
}

ca_status ca_node_register_pre_hook(ca_node *n, ca_node_pre_hook_fn fn, void *ctx,
                                    ca_ctx_free_fn ctx_free, ca_hook_handle *handle) {
    CA_ARG_NOT_NULL(n, "ca_node_register_pre_hook");
    CA_ARG_NOT_NULL(fn, "ca_node_register_pre_hook");
    ca_hook *h;
    CA_CHECK(node_hook_add(&n->node_pre_hooks, HOOK_NODE_PRE, ctx, ctx_free, handle, &h));
    h->node_pre = fn;
    return CA_OK;
}

ca_status ca_node_register_post_hook(ca_node *n, ca_node_post_hook_fn fn, void *ctx,
                                     ca_ctx_free_fn ctx_free, ca_hook_handle *handle) {
    CA_ARG_NOT_NULL(n, "ca_node_register_post_hook");
    CA_ARG_NOT_NULL(fn, "ca_node_register_post_hook");
    ca_hook *h;
    CA_CHECK(node_hook_add(&n->node_post_hooks, HOOK_NODE_POST, ctx, ctx_free, handle, &h));
    h->node_post = fn;
    return CA_OK;
}

ca_status ca_node_remove_hook(ca_node *n, ca_hook_handle handle) {
    CA_ARG_NOT_NULL(n, "ca_node_remove_hook");
    ca_hook **lists[] = {&n->node_pre_hooks, &n->node_post_hooks};
    bool found;
    ca_status st = hook_remove(lists, 2, handle, "ca_node_remove_hook", &found);
    if (found)
        return st;
    return err_set(CA_STATUS_INVALID,
                   "ca_node_remove_hook: no hook with handle %llu is registered on %s (already "
                   "removed, or registered elsewhere)",
                   (unsigned long long)handle, cai_node_name(n));
}

/* A hook's status: its own error, or one saying it set no message. */
static ca_status hook_failed(ca_status st, uint64_t gen, const char *what, const ca_node *n) {
    if (cai_err_generation() == gen)
        return err_set(CA_STATUS_HOOK, "a %s of %s failed with %s and set no message", what,
                       cai_node_name(n), ca_status_name(st));
    return st;
}

/* Replacements must keep each gradient's dtype and shape (NULL entries may become any). */
static ca_status check_replaced(int n, ca_tensor *const *now, ca_tensor *const *before,
                                const ca_meta *(*meta)(const ca_node *, int), const char *what,
                                const ca_node *node) {
    for (int i = 0; i < n; i++) {
        if (!now[i] || now[i] == before[i])
            continue;
        const ca_meta *want = meta(node, i);
        ca_meta m;
        cai_tensor_meta(now[i], &m);
        if (cai_meta_same_shape(&m, want) && m.dtype == want->dtype)
            continue;
        char s1[96], s2[96];
        return err_set(CA_STATUS_HOOK,
                       "a %s of %s returned a gradient of %s%s at index %d, where %s%s is "
                       "expected; a hook must keep each gradient's shape and dtype",
                       what, cai_node_name(node), ca_dtype_name(m.dtype),
                       cai_err_shape_str(m.ndim, m.shape, s1, 96), i, ca_dtype_name(want->dtype),
                       cai_err_shape_str(want->ndim, want->shape, s2, 96));
    }
    return CA_OK;
}

static const ca_meta *out_meta_of(const ca_node *n, int k) {
    return node_out_meta_c(n, k);
}

static const ca_meta *in_meta_of(const ca_node *n, int i) {
    return &n->in_meta[i];
}

#define HOOK_MAX_GRADS 64

ca_status cai_hook_run_node_pre(ca_hook *list, int n_out, ca_tensor **grads, const ca_node *n) {
    ca_tensor *before[HOOK_MAX_GRADS];
    if (list && n_out > HOOK_MAX_GRADS)
        return err_set(CA_STATUS_INVALID, "node hooks on %s: more than %d outputs",
                       cai_node_name(n), HOOK_MAX_GRADS);
    for (ca_hook *h = list; h; h = h->next) {
        memcpy(before, grads, sizeof(ca_tensor *) * (size_t)n_out);
        uint64_t gen = cai_err_generation();
        hook_enter(h);
        ca_status st = h->node_pre(n_out, grads, h->ctx);
        hook_leave();
        if (st == CA_OK)
            st = check_replaced(n_out, grads, before, out_meta_of, "node pre-hook", n);
        if (st != CA_OK)
            return hook_failed(st, gen, "node pre-hook", n);
    }
    return CA_OK;
}

ca_status cai_hook_run_node_post(ca_hook *list, int n_in, ca_tensor **gin, int n_out,
                                 ca_tensor *const *gout, const ca_node *n) {
    ca_tensor *before[HOOK_MAX_GRADS];
    if (list && n_in > HOOK_MAX_GRADS)
        return err_set(CA_STATUS_INVALID, "node hooks on %s: more than %d inputs", cai_node_name(n),
                       HOOK_MAX_GRADS);
    for (ca_hook *h = list; h; h = h->next) {
        if (n_in > 0) /* AccumulateGrad has no inputs (gin NULL) */
            memcpy(before, gin, sizeof(ca_tensor *) * (size_t)n_in);
        uint64_t gen = cai_err_generation();
        hook_enter(h);
        ca_status st = h->node_post(n_in, gin, n_out, gout, h->ctx);
        hook_leave();
        if (st == CA_OK)
            st = check_replaced(n_in, gin, before, in_meta_of, "node post-hook", n);
        if (st != CA_OK)
            return hook_failed(st, gen, "node post-hook", n);
    }
    return CA_OK;
}
