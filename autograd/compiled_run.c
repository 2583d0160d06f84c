/* compiled_run.c - running one compiled graph: binding the call's sizes and tensors, the
 * plan's run, and its call-outs back into the autograd layer (tensor hooks, retain_grad,
 * .grad accumulation, post-accumulate hooks, custom backwards, autograd.grad's outputs),
 * in the eager engine's order; and a create_graph backward's outputs made differentiable.
 */
#include "autograd/compiled_entry.h"

#include <stdio.h>
#include <string.h>

/* Once a compiled graph has timed its runs both ways: which it keeps, and why. */
static void log_verdict(run_slot *s) {
    if (cai_graph_plan_in_order_for_blas(s->plan)) {
        s->verdict_logged = true;
        fprintf(stderr,
                "[compiled_autograd_verbose] graph runs in order on %d threads: a GEMM of it "
                "goes whole to OpenBLAS's threads across the pool, which steps side by side "
                "would hold\n",
                ca_get_num_threads());
        return;
    }
    plan_verdict pv;
    int v = cai_graph_plan_verdict(s->plan, &pv);
    if (v < 0)
        return;
    s->verdict_logged = true;
    fprintf(stderr,
            "[compiled_autograd_verbose] graph runs %s on %d threads: steps side by side "
            "took %.1f us, in order %.1f us (%s of %d timed runs each way; %s%d%%)\n",
            v ? "its steps side by side" : "in order", ca_get_num_threads(),
            (double)pv.side_ns / 1e3, (double)pv.in_order_ns / 1e3,
            pv.gave_up ? "fastest" : "second fastest", pv.runs_each,
            pv.gave_up ? "given up early: side by side's best run was behind by over "
                       : "side by side must win by ",
            pv.gave_up ? PLAN_TUNE_GIVE_UP_PCT - 100 : 5);
}

typedef struct {
    const compiled_call *c;
    const compiled_graph *cg;
    ca_tensor **outs; /* where GOP_OUTPUT i writes: c->grads_out, or a double backward's */
    callout_state co; /* call-outs, and what the run still reads (hook replacements) */
    ca_status st;
} run_ctx;

static void src_of(const graph_view *v, kern_src *src) {
    src->data = v->data;
    memcpy(src->strides, v->strides, sizeof(int64_t) * (size_t)v->ndim);
}

/* t.grad += v, or t.grad = copy of v when unset: the run-time branch that makes
 * zero_grad(set_to_none=True) cost no recompile. Under t's lock, as every accumulation. */
static ca_status grad_add_view(ca_tensor *t, const graph_view *v) {
    cai_grad_lock(t);
    ca_status st = CA_OK;
    if (!t->grad) {
        st = cai_tensor_grad_like(t, &t->grad); /* a leaf's .grad takes its layout */
        if (st == CA_OK)
            cai_view_copy_into(v, t->grad);
    } else {
        kern_src src;
        src_of(v, &src);
        cai_tensor_add_into(t->grad, &src);
    }
    cai_grad_unlock(t);
    return st;
}

/* The call-out's result, which no one else holds, becomes .grad when there is none. */
static bool grad_steal(ca_tensor *leaf, callout_state *co, const graph_view *v) {
    if (cai_tensor_grad_strided(leaf))
        return false; /* its .grad takes its strides: grad_add_view copies */
    cai_grad_lock(leaf);
    bool stolen = !leaf->grad && (leaf->grad = cai_callout_take(co, v)) != NULL;
    cai_grad_unlock(leaf);
    return stolen;
}

static ca_status call_pre_hook(run_ctx *r, const graph_node *n, const graph_view *in,
                               graph_view *repl) {
    const key_hook *kh = &r->co.k->hooks[n->a.i[0]];
    ca_hook one = *kh->hook;
    one.next = NULL; /* run just this hook, with the eager engine's checks and messages */
    ca_tensor *g;
    CA_CHECK(cai_tensor_from_view(in, &g));
    ca_tensor *before = g;
    ca_meta expect;
    cai_tensor_meta(g, &expect);
    ca_status st = cai_hook_run_pre(&one, &g, &expect, cai_key_node_name(r->co.k, kh->node_call));
    if (st == CA_OK && g != before) {
        CA_CHECK(cai_callout_keep(&r->co, g));
        cai_view_of(g, repl); /* the run reads the replacement from here on */
        return CA_OK;
    }
    ca_tensor_release(g);
    return st;
}

static ca_status call_out(run_ctx *r, const graph_node *n, const graph_view *in, graph_view *repl) {
    switch (n->a.op) {
    case GOP_HOOK: return call_pre_hook(r, n, in, repl);
    case GOP_RETAIN: {
        ca_tensor *t = node_retained(r->co.k->nodes[n->a.i[0] - 1], (int)n->a.i[1]);
        return t ? grad_add_view(t, in) : CA_OK;
    }
    case GOP_CALLOUT_ARG: return cai_callout_arg(&r->co, n, in);
    case GOP_CALLOUT: return cai_callout_call(&r->co, n);
    case GOP_CALLOUT_RESULT: return cai_callout_result(&r->co, n, repl);
    case GOP_ACCUMULATE: {
        ca_tensor *leaf = r->co.k->lifted[n->a.i[0]].t;
        if (r->cg->steal[n->a.i[0]] && grad_steal(leaf, &r->co, in))
            return CA_OK;
        return grad_add_view(leaf, in);
    }
    case GOP_POST_HOOK: {
        ca_hook one = *r->co.k->hooks[n->a.i[1]].hook;
        one.next = NULL;
        return cai_hook_run_post(&one, r->co.k->lifted[n->a.i[0]].t);
    }
    case GOP_OUTPUT: {
        ca_tensor **slot = &r->outs[n->a.i[0]];
        if (*slot)
            return CA_OK; /* the first gradient to arrive is the one, as in eager */
        return cai_tensor_from_view(in, slot);
    }
    default: return err_set(CA_STATUS_INTERNAL, "graph call-out for op %d", (int)n->a.op);
    }
}

static int call_out_cb(void *ctx, const graph_node *n, const graph_view *in, graph_view *repl) {
    run_ctx *r = ctx;
    r->st = call_out(r, n, in, repl);
    return r->st != CA_OK;
}

/* Where a GEMM may write a leaf's gradient itself (beta = 1 onto .grad, or beta = 0 into
 * a new one): the run-time branch of grad_add_view, without the copy or the add. The
 * leaf's lock is taken here and let go by accumulate_done_cb once the GEMM has written. */
static ca_status grad_target(ca_tensor *t, const graph_view *value, graph_view *dst,
                             bool *has_grad) {
    cai_grad_lock(t);
    *has_grad = t->grad != NULL;
    if (t->grad) {
        cai_tensor_bump_version(t->grad); /* the runner writes it next */
    } else {
        (void)value; /* of t's shape and dtype: the key's lifted leaf */
        ca_status st = cai_tensor_grad_like(t, &t->grad); /* the runner copies if strided */
        if (st != CA_OK) {
            cai_grad_unlock(t);
            return st;
        }
    }
    cai_view_of(t->grad, dst);
    return CA_OK;
}

static int accumulate_target_cb(void *ctx, const graph_node *acc, const graph_view *value,
                                graph_view *dst, bool *has_grad) {
    run_ctx *r = ctx;
    r->st = grad_target(r->co.k->lifted[acc->a.i[0]].t, value, dst, has_grad);
    return r->st != CA_OK;
}

static void accumulate_done_cb(void *ctx, const graph_node *acc) {
    run_ctx *r = ctx;
    cai_grad_unlock(r->co.k->lifted[acc->a.i[0]].t);
}

/* The eager rules' checks of the saved tensors they read, in their order. */
ca_status cai_entry_check_reads(const compiled_graph *cg, const key_collect *k) {
    for (int i = 0; i < cg->n_reads; i++)
        CA_CHECK(cai_node_check_saved(k->nodes[cg->reads[i].call - 1], cg->reads[i].k));
    return CA_OK;
}

/* This call's symbol values and input views, from the collected key. */
void cai_entry_bind(const cache_entry *e, run_slot *s, const key_collect *k) {
    for (int y = 0; y < e->n_symbols; y++)
        s->sym_values[y] = k->sizes[e->first_slot[y]];
    for (int i = 0; i < k->n_lifted; i++)
        cai_view_of(k->lifted[i].t, &s->inputs[i]);
}

run_slot *cai_slot_new(const compiled_graph *cg) {
    run_slot *s = cai_mem_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_mutex_init(&s->lock, NULL);
    s->sym_values = cai_mem_alloc(sizeof(int64_t) * (size_t)(cg->n_symbols + 1));
    s->inputs = cai_mem_alloc(sizeof(graph_view) * (size_t)(cg->n_inputs + 1));
    s->plan = cg->g ? cai_graph_plan_new(cg->g) : NULL;
    if (!s->sym_values || !s->inputs || (cg->g && !s->plan)) {
        cai_slot_free(s);
        return NULL;
    }
    return s;
}

void cai_slot_free(run_slot *s) {
    if (!s)
        return;
    cai_graph_plan_free(s->plan);
    cai_mem_data_free(s->arena);
    cai_mem_free(s->sym_values);
    cai_mem_free(s->inputs);
    pthread_mutex_destroy(&s->lock);
    cai_mem_free(s);
}

run_slot *cai_slot_acquire(compiled_graph *cg) {
    pthread_mutex_lock(&cg->slots_mu);
    run_slot *s = cg->slots;
    while (s && pthread_mutex_trylock(&s->lock) != 0)
        s = s->next;
    pthread_mutex_unlock(&cg->slots_mu);
    if (s)
        return s;
    /* every slot is running: another thread runs this graph too */
    if ((s = cai_slot_new(cg)) != NULL) {
        pthread_mutex_lock(&s->lock);
        pthread_mutex_lock(&cg->slots_mu);
        s->next = cg->slots->next; /* after the first, which stays first */
        cg->slots->next = s;
        pthread_mutex_unlock(&cg->slots_mu);
        return s;
    }
    s = cg->slots;
    pthread_mutex_lock(&s->lock);
    return s;
}

void cai_slot_release(run_slot *s) {
    pthread_mutex_unlock(&s->lock);
}

/* The CA_PROFILE_TOP costliest steps of a timed run, longest first, with their kernels
 * and the autograd nodes that made them. */
static void profile_top(const graph *g, const int64_t *ns, int n, ca_compiled_profile *p) {
    p->n_top = 0;
    for (graph_val v = 0; v < n; v++) {
        if (ns[v] <= 0)
            continue;
        int at = p->n_top < CA_PROFILE_TOP ? p->n_top++ : CA_PROFILE_TOP;
        while (at > 0 && p->top[at - 1].ns < ns[v]) { /* insertion, the shortest drops out */
            if (at < CA_PROFILE_TOP)
                p->top[at] = p->top[at - 1];
            at--;
        }
        if (at < CA_PROFILE_TOP) {
            const graph_node *x = cai_graph_node_at(g, v);
            p->top[at] = (ca_compiled_step){.op = cai_graph_op_name(x->a.op),
                                            .node = x->origin.name ? x->origin.name : "",
                                            .ns = ns[v]};
        }
    }
}

/* The run with every step timed, and its work, span and costliest steps kept for
 * ca_compiled_autograd_last_profile. Without memory for the times it runs untimed. */
static int run_profiled(const compiled_graph *cg, run_slot *s, graph_callbacks cb,
                        ca_compiled_profile *p) {
    int n = cai_graph_count(cg->g);
    int64_t *ns = cai_mem_calloc((size_t)n + 1, sizeof(int64_t));
    int rc = cai_graph_plan_run_timed(s->plan, s->sym_values, s->inputs, s->arena, cb, ns);
    if (ns && rc == 0) {
        cai_graph_plan_work_span(s->plan, ns, &p->work_ns, &p->span_ns, &p->steps);
        profile_top(cg->g, ns, n, p);
    }
    cai_mem_free(ns);
    return rc;
}

ca_status cai_entry_run(const compiled_call *c, const cache_entry *e, run_slot *s,
                        const key_collect *k, ca_tensor **outs, run_report *rep) {
    compiled_graph *cg = e->compiled;
    cai_entry_bind(e, s, k);
    size_t bytes = cai_graph_plan_arena_bytes(s->plan, s->sym_values);
    if (bytes > s->arena_cap) { /* only when sizes grow: a steady state allocates nothing */
        cai_mem_data_free(s->arena);
        s->arena_cap = 0;
        if (!(s->arena = cai_mem_data_alloc(bytes)))
            return err_nomem("a compiled backward's arena");
        s->arena_cap = bytes;
    }
    run_ctx r = {
        .c = c, .cg = cg, .outs = outs, .co = {.k = k, .table = cg->callouts}, .st = CA_OK};
    graph_callbacks cb = {call_out_cb, &r, accumulate_target_cb, accumulate_done_cb};
    int rc = rep->profiling ? run_profiled(cg, s, cb, &rep->profile)
                            : cai_graph_plan_run(s->plan, s->sym_values, s->inputs, s->arena, cb);
    cai_callout_end(&r.co);
    rep->side_by_side = cai_graph_plan_ran_side_by_side(s->plan);
    if (rep->verbose && !s->verdict_logged)
        log_verdict(s);
    if (rc > 0)
        return r.st;
    if (rc < 0)
        return err_set(CA_STATUS_INDEX, "%s", cai_graph_plan_error(s->plan));
    return CA_OK;
}

/* A double backward (compiled_double.h): the outputs (autograd.grad's, then each leaf's
 * gradient) become differentiable, then leaves accumulate theirs as the eager create_graph
 * backward does (CopyBackwards, then AddBackward0). */
ca_status cai_entry_run_double(const compiled_call *c, const cache_entry *e, run_slot *s,
                               const key_collect *k, run_report *rep) {
    const compiled_graph *cg = e->compiled;
    int n = c->n_targets + k->n_lifted, n_kept = cai_dbl_n_kept(cg->tape);
    ca_tensor **outs = cai_mem_calloc((size_t)(n + n_kept) + 1, sizeof(ca_tensor *));
    if (!outs)
        return err_nomem("a compiled double backward's outputs");
    ca_status st = cai_entry_run(c, e, s, k, outs, rep);
    dbl_sizes z = {cg->g, s->sym_values, e->n_symbols};
    if (st == CA_OK)
        st = cai_dbl_attach(cg->tape, k, &z, n, outs, outs + n);
    cai_op_release_all(outs + n, n_kept);    /* the node holds what it keeps */
    for (int i = 0; i < c->n_targets; i++) { /* backward(inputs=) has targets, no outputs */
        if (st == CA_OK && c->grads_out)
            c->grads_out[i] = outs[i];
        else
            ca_tensor_release(outs[i]);
    }
    for (int i = 0; i < k->n_lifted; i++) {
        ca_tensor *g = outs[c->n_targets + i];
        if (g && st == CA_OK)
            st = cai_grad_accumulate(k->lifted[i].t, g, true);
        ca_tensor_release(g);
    }
    cai_mem_free(outs);
    return st;
}
