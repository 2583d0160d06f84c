/* view_inplace.c - in-place ops on views of tensors in the autograd graph.
 *
 * PyTorch lets a program write through a view of a tensor in the graph (y[:, 0] += b,
 * y[1:3].mul_(2), h.t().relu_()): the view's base takes a CopySlices history, and every
 * view of that base sees it. cagrad does the same with the ops it already differentiates,
 * so the eager and the compiled backward both follow without a node kind of their own:
 *
 *   - a view op records, on its result, the base that owns the memory (PyTorch's _base)
 *     and, with grad mode on, one step (the op's node: row, canonical attributes, shapes)
 *     back to the tensor it was made from (cai_view_track). A view made with grad mode off
 *     refuses in-place ops in the graph, with PyTorch's error;
 *   - an in-place op on view v computes r = op(v) out of place, as any in-place op in the
 *     graph does (inplace.c). Then base b takes the history
 *         b' = where(selected, embed(r), b)
 *     where embed is the adjoint of v's view ops (their derivative rules, run recording,
 *     so embed(r) is b-shaped with r's values at v's elements and zeros elsewhere) and
 *     selected is embed of ones: the gradient of v's elements flows to r, the rest to b's
 *     old history. where keeps the other elements exact, infinities included;
 *   - every view of b, v among them, replays its view ops on b's new history before it is
 *     next used (cai_view_sync), as PyTorch regenerates a view's grad_fn when its base's
 *     version moved on. The memory's history_epoch tells a stale view.
 *
 * The cost: an in-place op on a view reads and writes all of b once in the forward, and its
 * backward is a where over b (PyTorch clones the gradient of b in CopySlices' backward).
 * Views whose elements overlap (expand) are refused, as PyTorch refuses them.
 */
#include "autograd/builder.h"
#include "autograd/internal.h"

#include <stdlib.h>
#include <string.h>

ca_status cai_view_track(ca_tensor *res, ca_tensor *src, ca_node *step) {
    int depth = src->view_base ? src->view_depth + 1 : 1;
    res->view_base = ca_tensor_retain(src->view_base ? src->view_base : src);
    res->view_depth = depth;
    res->view_epoch = res->storage->history_epoch;
    /* grad mode off (the backward's own reshapes, optimizer steps): only the base, as
     * PyTorch, whose in-place ops in the graph refuse such a view */
    res->view_no_grad = !cai_grad_mode_enabled() || (src->view_base && src->view_no_grad);
    if (!step && res->grad_fn) /* the node op.c just recorded */
        step = cai_node_retain(res->grad_fn);
    if (src->view_base && src->view_multi && step) { /* PyTorch names the last view op */
        res->view_multi = cai_node_name(step);
        res->view_multi_nr = 0;
    }
    if (res->view_no_grad || depth > CAI_VIEW_CHAIN_MAX || !step) { /* not replayable */
        if (step)
            cai_node_release(step);
        return CA_OK;
    }
    res->view_src = ca_tensor_retain(src);
    res->view_step = step;
    return CA_OK;
}

/* The view ops from v back to its base, the last one applied first (steps[0] made v);
 * -1 when the chain is longer than CAI_VIEW_CHAIN_MAX. */
static int view_chain(const ca_tensor *v, ca_node **steps) {
    int n = 0;
    for (const ca_tensor *t = v; t->view_base; t = t->view_src) {
        if (!t->view_step)
            return -1;
        steps[n++] = t->view_step;
    }
    return n;
}

static ca_status chain_too_long(const ca_tensor *v, const char *fn) {
    return err_set(CA_STATUS_AUTOGRAD,
                   "%s: this view is %d view ops away from its base, and cagrad follows at "
                   "most %d to update the base's history; clone() the view first",
                   fn, v->view_depth, CAI_VIEW_CHAIN_MAX);
}

/* The values a view row saved (as_strided's position maps) into the replayed node m: the
 * same tensors, which never change; one packed by saved-tensor hooks is unpacked once and
 * held as it is. */
static ca_status copy_saved(ca_node *m, ca_node *step) {
    for (int k = 0; k < step->n_saved; k++) {
        ca_saved *s = &step->saved[k];
        ca_tensor *t = NULL;
        CA_CHECK(cai_saved_read(s, &t));
        m->saved[k] = (ca_saved){.t = t, .version = t ? t->storage->version : 0, .field = s->field};
        m->n_saved = k + 1;
    }
    return CA_OK;
}

/* t's view ops as nodes over its base's current history, made directly from the steps
 * (their attributes are kept in canonical form, their saved values carried over): t's
 * values do not change, only the history they carry. */
static ca_status view_replay(ca_tensor *t, ca_node *const *steps, int n) {
    ca_tensor *b = t->view_base;
    ca_node *cur = NULL;
    int cur_nr = 0;
    if (b->grad_fn) {
        cur = cai_node_retain(b->grad_fn);
        cur_nr = b->output_nr;
    } else if (b->requires_grad) {
        CA_CHECK(cai_node_grad_accumulator(b, &cur));
    }
    if (!cur) { /* the base is outside the graph: so is the view */
        cai_tensor_take_history(t, NULL, 0, false);
        t->view_epoch = t->storage->history_epoch;
        return CA_OK;
    }
    for (int k = n - 1; k >= 0; k--) {
        ca_node *m = NULL;
        ca_status st = cai_node_alloc(steps[k]->op, 1, &m);
        if (st != CA_OK) {
            cai_node_release(cur);
            return st;
        }
        m->attrs = steps[k]->attrs;
        m->in_meta[0] = steps[k]->in_meta[0];
        m->out_meta = steps[k]->out_meta;
        st = copy_saved(m, steps[k]);
        if (st != CA_OK) {
            cai_node_release(m);
            cai_node_release(cur);
            return st;
        }
        m->next[0] = (ca_edge){.fn = cur, .input_nr = cur_nr}; /* takes cur's reference */
        cur = m;
        cur_nr = 0;
    }
    cai_tensor_take_history(t, cur, cur_nr, true);
    cai_node_release(cur);
    t->view_epoch = t->storage->history_epoch;
    return CA_OK;
}

ca_status cai_view_sync(ca_tensor *t) {
    if (!t->view_base || t->view_epoch == t->storage->history_epoch)
        return CA_OK;
    if (t->view_no_grad) { /* its history never follows the base's, as in PyTorch */
        t->view_epoch = t->storage->history_epoch;
        return CA_OK;
    }
    ca_node *steps[CAI_VIEW_CHAIN_MAX];
    int n = view_chain(t, steps);
    if (n < 0)
        return chain_too_long(t, "a view used after its base changed in place");
    return view_replay(t, steps, n);
}

/* Whether two of v's elements share memory: a broadcast (stride 0) or overlapping dims. */
static bool view_overlaps(const ca_tensor *v) {
    int order[CA_MAX_DIMS], n = 0;
    for (int d = 0; d < v->ndim; d++) {
        if (v->shape[d] == 0)
            return false;
        if (v->shape[d] > 1)
            order[n++] = d;
    }
    for (int i = 1; i < n; i++) /* by stride, smallest first (insertion sort) */
        for (int j = i; j > 0 && llabs(v->strides[order[j]]) < llabs(v->strides[order[j - 1]]);
             j--) {
            int tmp = order[j];
            order[j] = order[j - 1];
            order[j - 1] = tmp;
        }
    int64_t span = 1; /* elements covered by the dims so far */
    for (int i = 0; i < n; i++) {
        int64_t st = llabs(v->strides[order[i]]);
        if (st < span)
            return true;
        span = st * v->shape[order[i]];
    }
    return false;
}

/* The adjoint of the view ops in steps applied to x: each step's derivative rule, the last
 * view op first, recording when grad mode is on. *out is a new reference. */
static ca_status view_embed(ca_node *const *steps, int n, ca_tensor *x, ca_tensor **out) {
    ca_eager_builder eb;
    cai_eager_builder_init(&eb);
    eb.base.create_graph = cai_grad_mode_enabled();
    ca_bval cur = bv_of(x);
    for (int k = 0; k < n && eb.base.status == CA_OK; k++) {
        ca_bval gin[1] = {0};
        /* a value saved-tensor hooks packed (as_strided's maps) comes back for the rule */
        eb.base.status = cai_saved_unpack(steps[k]);
        if (eb.base.status == CA_OK)
            cai_op_def(steps[k]->op)->backward(&eb.base, steps[k], cur, gin);
        cai_saved_drop_unpacked(steps[k]);
        cur = gin[0];
    }
    ca_status st = eb.base.status;
    *out = st == CA_OK ? ca_tensor_retain(bv_tensor(cur)) : NULL;
    cai_eager_scope_end(&eb);
    return st;
}

/* b' = where(selected, embed(r), b): b with r at the view's elements. */
static ca_status view_scatter(ca_node *const *steps, int n, ca_tensor *b, ca_tensor *r,
                              ca_tensor **out) {
    ca_meta mr;
    cai_tensor_meta(r, &mr);
    ca_tensor *ones = NULL, *mask = NULL, *selected = NULL, *embedded = NULL;
    bool prev = ca_set_grad_enabled(false);
    ca_status st = cai_tensor_full(&mr, 1.0, &ones);
    if (st == CA_OK)
        st = view_embed(steps, n, ones, &mask);
    if (st == CA_OK)
        st = ca_ne_scalar(mask, 0.0, &selected);
    ca_set_grad_enabled(prev);
    if (st == CA_OK)
        st = view_embed(steps, n, r, &embedded);
    if (st == CA_OK)
        st = ca_where(selected, embedded, b, out);
    ca_tensor_release(ones);
    ca_tensor_release(mask);
    ca_tensor_release(selected);
    ca_tensor_release(embedded);
    return st;
}

static const char multi_view_tail[] =
    "This view is the output of a function that returns multiple views. Such functions do not "
    "allow the output views to be modified inplace. You should replace the inplace operation "
    "by an out-of-place one.";

/* PyTorch's refusal of an in-place op in the graph on an output of unbind/split (or a view
 * of one); its node is named without "Backward0". */
static ca_status multi_view_error(const ca_tensor *v, const char *fn) {
    if (!v->view_base->requires_grad)
        return err_set(CA_STATUS_AUTOGRAD,
                       "A view was created in no_grad mode and is being modified inplace with "
                       "grad mode enabled. %s (%s)",
                       multi_view_tail, fn);
    const char *name = v->view_multi;
    size_t n = strlen(name);
    if (n > 9 && strcmp(name + n - 9, "Backward0") == 0)
        n -= 9;
    return err_set(CA_STATUS_AUTOGRAD,
                   "Output %d of %.*s is a view and is being modified "
                   "inplace. %s (%s)",
                   v->view_multi_nr, (int)n, name, multi_view_tail, fn);
}

ca_status ca_tensor_mark_multi_output_view(ca_tensor *t, const char *function, int output_nr) {
    static const char *const known[] = {"Unbind", "Split", "SplitWithSizes"};
    CA_ARG_NOT_NULL(t, "ca_tensor_mark_multi_output_view");
    CA_ARG_NOT_NULL(function, "ca_tensor_mark_multi_output_view");
    if (!t->view_base)
        return err_set(CA_STATUS_INVALID,
                       "ca_tensor_mark_multi_output_view: the tensor is not a view");
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        if (strcmp(function, known[k]) == 0) {
            t->view_multi = known[k];
            t->view_multi_nr = output_nr;
            return CA_OK;
        }
    return err_set(CA_STATUS_INVALID,
                   "ca_tensor_mark_multi_output_view: %s is not one of Unbind, Split, "
                   "SplitWithSizes",
                   function);
}

ca_status cai_view_rebase(ca_tensor *v, ca_tensor *r, bool *done, const char *fn) {
    *done = false;
    ca_tensor *b = v->view_base;
    if (v->view_multi)
        return multi_view_error(v, fn);
    if (b->requires_grad && !b->grad_fn)
        return err_set(CA_STATUS_AUTOGRAD,
                       "a view of a leaf Variable that requires grad is being used in an "
                       "in-place operation. (%s: do the update with grad mode off, as "
                       "torch.no_grad() does, or clone() the view first.)",
                       fn);
    if (v->view_no_grad)
        return err_set(CA_STATUS_AUTOGRAD,
                       "A view was created in no_grad mode and is being modified inplace with "
                       "grad mode enabled. Given that this use case is ambiguous and "
                       "error-prone, it is forbidden. You can clarify your code by moving both "
                       "the view and the inplace either both inside the no_grad block (if you "
                       "don't want the inplace to be tracked) or both outside (if you want the "
                       "inplace to be tracked). (%s)",
                       fn);
    if (view_overlaps(v))
        return err_set(CA_STATUS_AUTOGRAD,
                       "unsupported operation: more than one element of the written-to tensor "
                       "refers to a single memory location. Please clone() the tensor before "
                       "performing the operation. (%s)",
                       fn);
    ca_node *steps[CAI_VIEW_CHAIN_MAX];
    int n = view_chain(v, steps);
    if (n < 0)
        return chain_too_long(v, fn);
    bool ok;
    CA_CHECK(cai_node_keep_saved(r->grad_fn, v->storage, &ok));
    if (!ok)
        return CA_OK;
    ca_tensor *nb = NULL;
    CA_CHECK(view_scatter(steps, n, b, r, &nb));
    ca_status st = cai_node_keep_saved(nb->grad_fn, v->storage, &ok);
    if (st == CA_OK && ok)
        st = cai_tensor_write(v, r, fn);
    if (st == CA_OK && ok) {
        cai_tensor_take_history(b, nb->grad_fn, nb->output_nr, nb->requires_grad);
        b->storage->rebased_by = b->grad_fn ? cai_node_name(b->grad_fn) : NULL;
        b->storage->history_epoch++;
        st = cai_view_sync(v); /* v's own history now starts at b's */
        *done = st == CA_OK;
    }
    ca_tensor_release(nb);
    return st;
}
