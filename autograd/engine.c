/* engine.c - the eager backward: ca_backward (loss.backward) and ca_grad (autograd.grad).
 *
 * A backward is four passes over the nodes reachable from the roots:
 *  1-2. walk (walk.c): discover the nodes and order them deterministically;
 *  3. prune: for autograd.grad, keep only nodes on a path to a requested input;
 *  4. run: each node's incoming gradient (summed over fan-in) goes through its tensor
 *     hooks, then its derivative rule (eager builder), and on to its next edges.
 */
#include "autograd/builder.h"
#include "autograd/compiled.h"

#include <string.h>

typedef enum { RUN_ACCUMULATE, RUN_CAPTURE } run_mode;

typedef struct {
    run_mode mode;
    bool retain_graph;
    /* create_graph: rules run with grad mode on, so the gradients they make record nodes
     * and are differentiable again; every sum of gradients is then an out-of-place op */
    bool create_graph;
    ca_walk *walk; /* own_walk, or the compiled backward's, which outlives this run */
    ca_walk own_walk;
    /* autograd.grad: gradient captured at each requested input's node */
    int n_cap;
    ca_node **cap_nodes;
    int *cap_nrs; /* which output of cap_nodes[i] (custom functions have several) */
    ca_tensor **cap_grads;
    const int *root_nrs; /* which output of each root node its seed enters */
} engine_run;

/* ---------------------------------------------------------------------------------------
 * 3. prune (autograd.grad only): a node is needed if it leads to a requested input
 */
/* ---------------------------------------------------------------------------------------
 * 4. run
 */
/* a + b as an op that records its node (create_graph), the alpha of add at 1 */
static ca_status add_recorded(ca_tensor *a, ca_tensor *b, ca_tensor **out) {
    ca_attrs one = {.s = {1.0}};
    return cai_op_call2(CA_OP_ADD, a, b, &one, out);
}

/* Output k's buf += g, out of place: buf and g may alias tensors the user or a saved value
 * holds. */
static ca_status buffer_add(const engine_run *r, ca_node *n, int k, ca_tensor *g) {
    ca_tensor **buf = cai_walk_buf(r->walk, n, k);
    if (!*buf) {
        *buf = ca_tensor_retain(g);
        return CA_OK;
    }
    ca_tensor *in[2] = {*buf, g}, *sum;
    if (r->create_graph && ((*buf)->requires_grad || g->requires_grad))
        CA_CHECK(add_recorded(*buf, g, &sum));
    else
        CA_CHECK(cai_tensor_pointwise(KPW_ADD, node_out_meta(n, k), 2, in, 1.0, 0, &sum));
    ca_tensor_release(*buf);
    *buf = sum;
    return CA_OK;
}

/* t.grad with a reference of the caller's (NULL: none), read under t's lock. */
static ca_tensor *grad_of(ca_tensor *t) {
    cai_grad_lock(t);
    ca_tensor *grad = ca_tensor_retain(t->grad);
    cai_grad_unlock(t);
    return grad;
}

/* t.grad = next if it is still old (references: t.grad's to old is dropped, next's moves
 * to t.grad); false, changing nothing, when another thread changed it meanwhile. */
static bool grad_swap(ca_tensor *t, ca_tensor *old, ca_tensor *next) {
    cai_grad_lock(t);
    bool same = t->grad == old;
    if (same)
        t->grad = next;
    cai_grad_unlock(t);
    if (same)
        ca_tensor_release(old);
    return same;
}

/* create_graph: .grad = copy of g the first time (CopyBackwards for a leaf, CloneBackward0
 * for a retained non-leaf), then .grad + g out of place, so that .grad keeps g's history,
 * as PyTorch's AccumulateGrad and retain_grad hook under grad mode. The new .grad is made
 * outside t's lock (its ops record nodes and call the op observer, which may wait for
 * Python's GIL) and put in place only if no other thread's gradient came meanwhile: else
 * it is made again from theirs. */
static ca_status accumulate_grad_recorded(ca_tensor *t, ca_tensor *g) {
    for (;;) {
        ca_tensor *old = grad_of(t), *next;
        ca_status st =
            old ? add_recorded(old, g, &next)
                : cai_op_call1(t->grad_fn ? CA_OP_GRAD_CLONE : CA_OP_GRAD_COPY, g, NULL, &next);
        bool done = st != CA_OK || grad_swap(t, old, next);
        if (st == CA_OK && !done)
            ca_tensor_release(next);
        ca_tensor_release(old);
        if (done)
            return st;
    }
}

/* .grad += g, under the leaf's lock (nothing here calls out). The first gradient is stolen
 * when nothing else can see it, else copied, so a later in-place accumulation never writes
 * into a tensor someone else holds. */
static ca_status grad_accumulate_locked(ca_tensor *leaf, ca_tensor *g) {
    if (!leaf->grad) {
        bool private = ref_count(&g->refcnt) == 1 && ref_count(&g->storage->refcnt) == 1 &&
                       ca_tensor_is_contiguous(g);
        if (private && !cai_tensor_grad_strided(leaf)) {
            leaf->grad = ca_tensor_retain(g);
            return CA_OK;
        }
        CA_CHECK(cai_tensor_grad_like(leaf, &leaf->grad));
        return cai_op_copy_into(cai_tensor_ptr(leaf->grad), leaf->grad->strides, g, ".grad");
    }
    kern_src src;
    cai_tensor_src(g, leaf->grad->ndim, leaf->grad->shape, &src);
    cai_tensor_add_into(leaf->grad, &src);
    return CA_OK;
}

/* Threads backwarding through one model at once each add theirs. Under create_graph the
 * new .grad is always a new tensor (PyTorch's AccumulateGrad with grad mode on), even when
 * neither gradient requires grad: a .grad someone holds is never written. */
ca_status cai_grad_accumulate(ca_tensor *leaf, ca_tensor *g, bool create_graph) {
    if (create_graph)
        return accumulate_grad_recorded(leaf, g);
    cai_grad_lock(leaf);
    ca_status st = grad_accumulate_locked(leaf, g);
    cai_grad_unlock(leaf);
    return st;
}

static ca_status check_grad_meta(const ca_node *n, int i, ca_tensor *g) {
    ca_meta m;
    cai_tensor_meta(g, &m);
    if (cai_meta_same_shape(&m, &n->in_meta[i]) && m.dtype == n->in_meta[i].dtype)
        return CA_OK;
    char s1[96], s2[96];
    return err_set(CA_STATUS_INTERNAL,
                   "derivative rule of %s returned a gradient of %s%s for input %d, which is "
                   "%s%s; please report this bug",
                   cai_node_name(n), ca_dtype_name(m.dtype),
                   cai_err_shape_str(m.ndim, m.shape, s1, 96), i,
                   ca_dtype_name(n->in_meta[i].dtype),
                   cai_err_shape_str(n->in_meta[i].ndim, n->in_meta[i].shape, s2, 96));
}

/* Node post-hooks on the rule's gradients: the hooks see (and may replace) references
 * of their own, which then flow on instead of the rule's. */
static ca_status run_post_hooks(ca_node *n, ca_bval *gin, ca_tensor *g, ca_tensor **held) {
    for (int i = 0; i < n->n_in; i++)
        held[i] = gin[i] ? ca_tensor_retain(bv_tensor(gin[i])) : NULL;
    ca_status st = cai_hook_run_node_post(n->node_post_hooks, n->n_in, held, 1, &g, n);
    for (int i = 0; i < n->n_in; i++)
        gin[i] = held[i] ? bv_of(held[i]) : NULL;
    return st;
}

/* Run n's derivative rule on g and pass the results along its needed edges. */
static ca_status run_rule(const engine_run *r, ca_node *n, ca_tensor *g) {
    const ca_op_def *row = cai_op_def(n->op);
    ca_bval local[8], *gin = local;
    ca_tensor *held_local[8] = {0}, **held = held_local;
    if (n->n_in > 8 && !(gin = cai_mem_calloc(2 * (size_t)n->n_in, sizeof(void *))))
        return err_nomem("a rule's gradient list");
    if (n->n_in > 8)
        held = (ca_tensor **)(gin + n->n_in);
    memset(gin, 0, sizeof(ca_bval) * (size_t)n->n_in);
    ca_eager_builder eb;
    cai_eager_builder_init(&eb);
    eb.base.create_graph = r->create_graph;
    bool prev = ca_set_grad_enabled(r->create_graph);
    row->backward(&eb.base, n, bv_of(g), gin);
    ca_set_grad_enabled(prev);
    ca_status st = eb.base.status;
    bool hooked = st == CA_OK && n->node_post_hooks;
    if (hooked)
        st = run_post_hooks(n, gin, g, held);
    for (int i = 0; i < n->n_in && st == CA_OK; i++) {
        ca_node *c = n->next[i].fn;
        if (!cai_walk_needed(r->walk, c) || (hooked && !gin[i]))
            continue;
        if (!gin[i])
            st = err_set(CA_STATUS_INTERNAL,
                         "derivative rule of %s gave no gradient for input "
                         "%d; please report this bug",
                         row->node_name, i);
        else if ((st = check_grad_meta(n, i, bv_tensor(gin[i]))) == CA_OK)
            st = buffer_add(r, c, n->next[i].input_nr, bv_tensor(gin[i]));
    }
    for (int i = 0; hooked && i < n->n_in; i++)
        ca_tensor_release(held[i]);
    cai_eager_scope_end(&eb);
    if (gin != local)
        cai_mem_free(gin);
    return st;
}

static void capture(engine_run *r, ca_node *n, int k, ca_tensor *g) {
    for (int i = 0; i < r->n_cap; i++)
        if (r->cap_nodes[i] == n && r->cap_nrs[i] == k && !r->cap_grads[i])
            r->cap_grads[i] = ca_tensor_retain(g);
}

/* Retain-grad: the tensor's .grad gets this gradient (summed over backwards). */
static ca_status retain_grad(const engine_run *r, ca_tensor *t, ca_tensor *g) {
    if (r->create_graph && g->requires_grad)
        return cai_grad_accumulate(t, g, r->create_graph);
    if (!t->grad) { /* a copy: g goes on to the rule, which must not see later writes */
        ca_meta m;
        cai_tensor_meta(g, &m);
        return cai_tensor_pointwise(KPW_COPY, &m, 1, &g, 0, 0, &t->grad);
    }
    return cai_grad_accumulate(t, g, r->create_graph);
}

/* Output k's gradient *g through the tensor hooks `hooks` (those of output k), into
 * retain_grad, and into autograd.grad's captures: the steps every node's outputs take
 * before its node pre-hooks and its rule. */
static ca_status output_grad(engine_run *r, ca_node *n, int k, ca_hook *hooks, ca_tensor **g) {
    ca_status st = cai_hook_run_pre_output(hooks, k, g, node_out_meta(n, k), cai_node_name(n));
    if (st == CA_OK && r->mode == RUN_ACCUMULATE && node_retained(n, k))
        st = retain_grad(r, node_retained(n, k), *g);
    if (st == CA_OK && r->mode == RUN_CAPTURE)
        capture(r, n, k, *g);
    return st;
}

/* A custom function's node: each output's gradient through its hooks and retain_grad,
 * then the user's backward on all of them at once. */
static ca_status run_custom(engine_run *r, ca_node *n) {
    ca_tensor *local[8], **grads = local, *gin_local[8], **gin = gin_local;
    size_t need = (size_t)(n->n_out > n->n_in ? n->n_out : n->n_in);
    if (need > 8 && !(grads = cai_mem_calloc(2 * need, sizeof(ca_tensor *))))
        return err_nomem("a custom function's gradients");
    if (need > 8)
        gin = grads + need;
    bool any = false;
    ca_status st = CA_OK;
    for (int k = 0; k < n->n_out; k++) {
        ca_tensor **buf = cai_walk_buf(r->walk, n, k);
        grads[k] = *buf;
        *buf = NULL;
        if (!grads[k] || st != CA_OK)
            continue;
        any = true;
        st = output_grad(r, n, k, n->pre_hooks, &grads[k]);
    }
    /* node pre-hooks run unless autograd.grad only captures the node's gradient, as
     * PyTorch's (backward(inputs=) runs those of its targets) */
    bool leads_on = any && cai_walk_leads_on(r->walk, n);
    if (st == CA_OK && any && (leads_on || r->mode == RUN_ACCUMULATE) && n->node_pre_hooks)
        st = cai_hook_run_node_pre(n->node_pre_hooks, n->n_out, grads, n);
    bool ran_rule = false;
    if (st == CA_OK && leads_on) {
        st = cai_custom_backward(n, grads, gin);
        if (st == CA_OK && n->node_post_hooks)
            st = cai_hook_run_node_post(n->node_post_hooks, n->n_in, gin, n->n_out, grads, n);
        ran_rule = true;
        for (int i = 0; i < n->n_in; i++) {
            ca_node *c = n->next[i].fn;
            if (st == CA_OK && gin[i] && cai_walk_needed(r->walk, c))
                st = buffer_add(r, c, n->next[i].input_nr, gin[i]);
            ca_tensor_release(gin[i]);
        }
    }
    for (int k = 0; k < n->n_out; k++)
        ca_tensor_release(grads[k]);
    if (grads != local)
        cai_mem_free(grads);
    if (st == CA_OK && ran_rule && !r->retain_graph)
        cai_node_release_saved(n);
    return st;
}

static ca_status run_node(engine_run *r, ca_node *n) {
    if (n->custom)
        return run_custom(r, n);
    ca_tensor **buf = cai_walk_buf(r->walk, n, 0);
    ca_tensor *g = *buf;
    *buf = NULL;
    if (!g) /* nothing flowed here (pruned parents) */
        return CA_OK;
    bool is_acc = n->op == CA_OP_ACCUMULATE_GRAD;
    ca_hook *hooks = is_acc ? (n->leaf ? n->leaf->hooks : NULL) : n->pre_hooks;
    ca_status st = output_grad(r, n, 0, hooks, &g);
    /* node pre-hooks run unless autograd.grad only captures the node's gradient (at an
     * input, or at a leaf's AccumulateGrad), as PyTorch's; backward(inputs=) runs those
     * of its targets */
    bool prehooks =
        r->mode == RUN_ACCUMULATE ? !is_acc || n->leaf : !is_acc && cai_walk_leads_on(r->walk, n);
    if (st == CA_OK && prehooks && n->node_pre_hooks)
        st = cai_hook_run_node_pre(n->node_pre_hooks, 1, &g, n);
    bool ran_rule = false;
    if (st == CA_OK && !g) { /* a node pre-hook dropped the gradient */
    } else if (st == CA_OK && is_acc && r->mode == RUN_ACCUMULATE && n->leaf) {
        st = cai_grad_accumulate(n->leaf, g, r->create_graph);
        if (st == CA_OK)
            st = cai_hook_run_post(n->leaf->post_acc_hooks, n->leaf);
        if (st == CA_OK && n->node_post_hooks)
            st = cai_hook_run_node_post(n->node_post_hooks, 0, NULL, 1, &g, n);
    } else if (st == CA_OK && !is_acc && cai_walk_leads_on(r->walk, n)) {
        st = run_rule(r, n, g);
        ran_rule = true;
    }
    ca_tensor_release(g);
    if (st == CA_OK && ran_rule && !r->retain_graph)
        cai_node_release_saved(n);
    return st;
}

/* ---------------------------------------------------------------------------------------
 * Driving a backward
 */
/* A backward started from inside another (a custom Function's backward that runs one, as
 * checkpointing does) walks with a walk of its own: the outer one's gradients stay in the
 * outer walk. */
static _Thread_local int engine_depth;
/* the innermost running backward's create_graph, for custom functions' backwards */
static _Thread_local bool engine_create_graph;

bool cai_engine_create_graph(void) {
    return engine_create_graph;
}

static void run_cleanup(engine_run *r) {
    ca_walk *w = r->walk;
    for (int i = 0; i < w->nodes.n; i++) {
        ca_tensor_release(w->slots[i].buf);
        w->slots[i].buf = NULL;
        cai_saved_drop_unpacked(w->nodes.v[i]);
    }
    for (int k = 0; k < w->n_extra; k++) {
        ca_tensor_release(w->extra[k]);
        w->extra[k] = NULL;
    }
    cai_walk_free(&r->own_walk);
}

/* roots[i] receives grads[i] (borrowed); every root must differ from NULL. */
static ca_status engine_run_graph(engine_run *r, ca_node *const *roots, ca_tensor *const *grads,
                                  int n_roots) {
    if (cai_recording) { /* the recording is thrown away; the call-out will run this */
        cai_record_refuse("it runs a backward of its own");
        return err_set(CA_STATUS_INVALID, "a backward started inside a custom backward that "
                                          "compiled autograd is tracing");
    }
    /* create_graph too (compiled_double.h) */
    bool compiled = cai_compiled_active();
    /* a compiled backward keeps its walk's buffers, so a steady state allocates nothing;
     * a nested backward (an eager outer one's rule started it) walks on its own */
    r->walk = compiled && engine_depth == 0 ? cai_compiled_walk() : &r->own_walk;
    ca_status st = CA_OK;
    if (!r->walk) { /* no memory for this thread's compiled state */
        r->walk = &r->own_walk;
        compiled = false;
        st = err_nomem("compiled autograd's per-thread state");
    }
    if (st == CA_OK)
        st = cai_walk_graph(r->walk, roots, n_roots);
    bool ran = false;
    for (int i = 0; i < r->walk->nodes.n && st == CA_OK; i++) /* saved-tensor hooks */
        st = cai_saved_unpack(r->walk->nodes.v[i]);
    engine_depth++;
    cai_kern_bind_begin();
    bool outer_create_graph = engine_create_graph;
    engine_create_graph = r->create_graph;
    /* PyTorch runs the whole backward (hooks too) with grad mode = create_graph; a plain
     * backward leaves the mode as it is (its rules turn it off themselves) */
    bool prev_mode = r->create_graph ? ca_set_grad_enabled(true) : false;
    if (st == CA_OK) {
        cai_walk_mark_needed(r->walk, r->mode == RUN_CAPTURE || r->n_cap > 0, r->cap_nodes,
                             r->n_cap);
        if (compiled) {
            compiled_call c = {.capture = r->mode == RUN_CAPTURE,
                               .create_graph = r->create_graph,
                               .retain_graph = r->retain_graph,
                               .n_roots = n_roots,
                               .roots = roots,
                               .root_nrs = r->root_nrs,
                               .seeds = grads,
                               .n_targets = r->n_cap,
                               .targets = r->cap_nodes,
                               .target_nrs = r->cap_nrs,
                               .grads_out = r->cap_grads};
            st = cai_compiled_run(r->walk, &c, &ran);
        }
        for (int i = 0; i < n_roots && st == CA_OK && !ran; i++)
            st = buffer_add(r, roots[i], r->root_nrs[i], grads[i]);
    }
    for (int i = 0; i < r->walk->order.n && st == CA_OK && !ran; i++)
        if (cai_walk_needed(r->walk, r->walk->order.v[i]))
            st = run_node(r, r->walk->order.v[i]);
    if (r->create_graph)
        ca_set_grad_enabled(prev_mode);
    engine_create_graph = outer_create_graph;
    engine_depth--;
    cai_kern_bind_end();
    run_cleanup(r);
    return st;
}

/* The node a root tensor's gradient enters: its grad_fn, or its AccumulateGrad if it is a
 * leaf (new reference). */
static ca_status root_node(ca_tensor *t, const char *fn, int i, ca_node **out) {
    if (!t->requires_grad)
        return err_set(CA_STATUS_AUTOGRAD,
                       "%s: output %d does not require grad and has no grad_fn, so there is "
                       "nothing to differentiate; set requires_grad on an input it depends on "
                       "(and keep grad mode on while computing it)",
                       fn, i);
    if (t->grad_fn) {
        *out = cai_node_retain(t->grad_fn);
        return CA_OK;
    }
    return cai_node_grad_accumulator(t, out);
}

/* The seed gradient for output t: the given one (checked) or ones for one element. */
static ca_status root_grad(ca_tensor *t, ca_tensor *given, const char *fn, ca_tensor **out) {
    ca_meta m;
    cai_tensor_meta(t, &m);
    if (!given) {
        if (cai_meta_numel(&m) != 1) {
            char s[96];
            return err_set(CA_STATUS_AUTOGRAD,
                           "%s: grad can be implicitly created only for outputs with one "
                           "element, and this output has shape %s; pass an explicit gradient "
                           "(ca_backward_ex with options.gradient) or reduce it first (ca_sum)",
                           fn, cai_err_shape_str(m.ndim, m.shape, s, sizeof s));
        }
        return cai_compiled_active() ? cai_compiled_seed(&m, out) : cai_tensor_full(&m, 1.0, out);
    }
    ca_meta gm;
    cai_tensor_meta(given, &gm);
    if (!cai_meta_same_shape(&m, &gm) || m.dtype != gm.dtype) {
        char s1[96], s2[96];
        return err_set(CA_STATUS_SHAPE,
                       "%s: the gradient is %s%s but the output is %s%s; pass a gradient of the "
                       "output's shape and dtype",
                       fn, ca_dtype_name(gm.dtype), cai_err_shape_str(gm.ndim, gm.shape, s1, 96),
                       ca_dtype_name(m.dtype), cai_err_shape_str(m.ndim, m.shape, s2, 96));
    }
    *out = ca_tensor_retain(given);
    return CA_OK;
}

/* Seeds and root nodes for n outputs. On failure everything made is released. */
static ca_status roots_prepare(int n, ca_tensor *const *outs, ca_tensor *const *given,
                               const char *fn, ca_node **nodes, ca_tensor **grads) {
    ca_status st = CA_OK;
    int i = 0;
    for (; i < n && st == CA_OK; i++) {
        nodes[i] = NULL;
        grads[i] = NULL;
        if (!outs[i])
            st = err_set(CA_STATUS_INVALID, "%s: output %d is NULL; pass a valid tensor", fn, i);
        if (st == CA_OK)
            st = cai_view_sync_fast(outs[i]);
        if (st == CA_OK)
            st = root_node(outs[i], fn, i, &nodes[i]);
        if (st == CA_OK)
            st = root_grad(outs[i], given ? given[i] : NULL, fn, &grads[i]);
    }
    if (st != CA_OK)
        for (int k = 0; k < i; k++) {
            cai_node_release(nodes[k]);
            ca_tensor_release(grads[k]);
        }
    return st;
}

static void roots_release(int n, ca_node **nodes, ca_tensor **grads) {
    for (int i = 0; i < n; i++) {
        cai_node_release(nodes[i]);
        ca_tensor_release(grads[i]);
    }
}

static ca_status grad_targets(engine_run *r, ca_node *const *roots, int n_roots, int n_in,
                              ca_tensor *const *inputs);

/* backward(inputs=...): the inputs' nodes become the run's targets, and a non-leaf input
 * retains its grad. */
static ca_status inputs_prepare(engine_run *r, ca_node *root, const ca_backward_options *o) {
    if (o->n_inputs < 0 || !o->inputs)
        return err_set(CA_STATUS_INVALID,
                       "ca_backward_ex: options.n_inputs is %d with inputs %s; pass n_inputs > 0 "
                       "and the tensors, or 0 for every leaf",
                       o->n_inputs, o->inputs ? "set" : "NULL");
    for (int i = 0; i < o->n_inputs; i++) {
        ca_tensor *t = o->inputs[i];
        if (!t)
            return err_set(CA_STATUS_INVALID, "ca_backward_ex: input %d is NULL", i);
        if (t->grad_fn)
            CA_CHECK(ca_tensor_retain_grad(t));
    }
    r->n_cap = o->n_inputs;
    r->cap_nodes = cai_mem_calloc((size_t)o->n_inputs, sizeof(ca_node *) + sizeof(int));
    if (!r->cap_nodes)
        return err_nomem("ca_backward_ex's inputs");
    r->cap_nrs = (int *)(r->cap_nodes + o->n_inputs);
    return grad_targets(r, &root, 1, o->n_inputs, o->inputs);
}

ca_status ca_backward_ex(ca_tensor *root, const ca_backward_options *options) {
    CA_CHECK(ca_init());
    CA_ARG_NOT_NULL(root, "ca_backward");
    ca_backward_options o = options ? *options : (ca_backward_options){0};
    ca_node *node;
    ca_tensor *grad;
    CA_CHECK(roots_prepare(1, &root, &o.gradient, "ca_backward", &node, &grad));
    int nr = tensor_grad_nr(root);
    /* create_graph keeps the graph too: the new graph reaches into it */
    engine_run r = {.mode = RUN_ACCUMULATE,
                    .retain_graph = o.retain_graph || o.create_graph,
                    .create_graph = o.create_graph,
                    .root_nrs = &nr};
    ca_status st = o.n_inputs ? inputs_prepare(&r, node, &o) : CA_OK;
    if (st == CA_OK)
        st = engine_run_graph(&r, &node, &grad, 1);
    cai_mem_free(r.cap_nodes);
    roots_release(1, &node, &grad);
    return st;
}

ca_status ca_backward(ca_tensor *loss) {
    return ca_backward_ex(loss, NULL);
}

/* The node whose incoming gradient is d/d(input), or NULL if no graph reaches it. */
static ca_status capture_node(ca_tensor *t, int i, const ca_walk *probe, ca_node **out, int *nr) {
    if (!t)
        return err_set(CA_STATUS_INVALID, "ca_grad: input %d is NULL; pass a valid tensor", i);
    if (!t->requires_grad)
        return err_set(CA_STATUS_AUTOGRAD,
                       "ca_grad: input %d does not require grad, so it has "
                       "no gradient; set requires_grad on it before the "
                       "forward",
                       i);
    ca_node *n = t->grad_fn ? t->grad_fn : cai_node_grad_accumulator_peek(t);
    *out = cai_walk_find(probe, n) >= 0 ? n : NULL;
    *nr = tensor_grad_nr(t);
    return CA_OK;
}

static ca_status grad_collect(engine_run *r, int n_in, ca_tensor *const *inputs, bool allow_unused,
                              ca_tensor **grads) {
    for (int i = 0; i < n_in; i++) {
        grads[i] = r->cap_grads[i];
        r->cap_grads[i] = NULL;
        if (!grads[i] && !allow_unused) {
            for (int k = 0; k <= i; k++) {
                ca_tensor_release(grads[k]);
                grads[k] = NULL;
            }
            for (int k = i + 1; k < n_in; k++)
                ca_tensor_release(r->cap_grads[k]);
            return err_set(CA_STATUS_AUTOGRAD,
                           "ca_grad: input %d was not used to compute the outputs, so its "
                           "gradient is undefined; set options.allow_unused to get NULL instead",
                           i);
        }
    }
    return CA_OK;
}

/* Discovery runs inside engine_run_graph, but capture nodes must be known before the run.
 * So discovery happens first here, and the run walks again (cheap). */
static ca_status grad_targets(engine_run *r, ca_node *const *roots, int n_roots, int n_in,
                              ca_tensor *const *inputs) {
    ca_walk probe = {0};
    ca_status st = cai_walk_graph(&probe, roots, n_roots);
    for (int i = 0; i < n_in && st == CA_OK; i++) {
        st = cai_view_sync_fast(inputs[i]);
        if (st == CA_OK)
            st = capture_node(inputs[i], i, &probe, &r->cap_nodes[i], &r->cap_nrs[i]);
    }
    cai_walk_free(&probe);
    return st;
}

ca_status ca_grad(int n_outputs, ca_tensor *const *outputs, int n_inputs, ca_tensor *const *inputs,
                  const ca_grad_options *options, ca_tensor **grads) {
    CA_CHECK(ca_init());
    CA_ARG_NOT_NULL(grads, "ca_grad");
    for (int i = 0; i < n_inputs; i++)
        grads[i] = NULL;
    CA_ARG_NOT_NULL(outputs, "ca_grad");
    CA_ARG_NOT_NULL(inputs, "ca_grad");
    if (n_outputs < 1 || n_inputs < 1)
        return err_set(CA_STATUS_INVALID,
                       "ca_grad: needs at least one output and one input (got "
                       "%d and %d)",
                       n_outputs, n_inputs);
    ca_grad_options o = options ? *options : (ca_grad_options){0};
    /* pointers, then the root and capture output numbers */
    size_t n_ptrs = (size_t)n_outputs * 2 + (size_t)n_inputs * 2;
    size_t n_ints = (size_t)n_outputs + (size_t)n_inputs;
    void **mem = cai_mem_calloc(n_ptrs + (n_ints + 1) / 2 + 1, sizeof(void *));
    if (!mem)
        return err_nomem("ca_grad's bookkeeping");
    ca_node **roots = (ca_node **)mem;
    ca_tensor **seeds = (ca_tensor **)(mem + n_outputs);
    engine_run r = {.mode = RUN_CAPTURE,
                    .retain_graph = o.retain_graph || o.create_graph,
                    .create_graph = o.create_graph,
                    .n_cap = n_inputs};
    r.cap_nodes = (ca_node **)(mem + 2 * n_outputs);
    r.cap_grads = (ca_tensor **)(mem + 2 * n_outputs + n_inputs);
    int *nrs = (int *)(mem + n_ptrs);
    r.root_nrs = nrs;
    r.cap_nrs = nrs + n_outputs;
    for (int i = 0; i < n_outputs; i++)
        nrs[i] = outputs[i] ? tensor_grad_nr(outputs[i]) : 0;
    ca_status st = roots_prepare(n_outputs, outputs, o.grad_outputs, "ca_grad", roots, seeds);
    if (st == CA_OK) {
        st = grad_targets(&r, roots, n_outputs, n_inputs, inputs);
        if (st == CA_OK)
            st = engine_run_graph(&r, roots, seeds, n_outputs);
        if (st == CA_OK)
            st = grad_collect(&r, n_inputs, inputs, o.allow_unused, grads);
        else
            for (int i = 0; i < n_inputs; i++)
                ca_tensor_release(r.cap_grads[i]);
        roots_release(n_outputs, roots, seeds);
    }
    cai_mem_free(mem);
    return st;
}
