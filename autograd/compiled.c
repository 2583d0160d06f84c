/* compiled.c - compiled autograd: the public switches, and one compiled backward.
 *
 * The engine walks the graph and marks the needed nodes as for an eager backward, then
 * hands the walk here. cai_compiled_run collects the walk's key, looks it up in the trie
 * cache and, on a miss, traces the whole backward into one graph (builder_trace.c),
 * optimises it and plans its memory (graph/). It then runs the plan: kernels for the math,
 * and call-outs back here for hooks, retain_grad, .grad accumulation and autograd.grad's
 * outputs, in the eager engine's order. When a graph cannot be compiled (the cache bound
 * is reached, or a rule the graph IR cannot express yet), the engine runs it eagerly.
 */
#include "autograd/compiled_entry.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH           16
#define DEFAULT_CACHE_LIMIT 8

/* Compiled autograd's state, in two parts. This file owns both: other files see them only
 * through compiled.h's calls (cai_compiled_walk lends the walk to the engine for the length
 * of one backward).
 *
 * Shared by the process (compiled_autograd, under ca_lock, a recursive mutex: a custom
 * backward recorded at capture may call back in): the enable stack and log settings, the
 * cache, the counters, the latest graph and profile. It lives from first use to process
 * exit and starts zeroed; ca_compiled_autograd_reset frees the cache (with every compiled
 * graph) and zeroes the counters, but keeps the enable stack and the log settings.
 *
 * Per thread (thread_state(), freed when the thread exits): the running backward's walk,
 * key and seed, and whether a compiled backward is running on the thread. So several
 * threads may run compiled backwards at once: lookups and compiles take ca_lock, and a
 * cache entry's run (its arena and its plan's run state) takes one of that entry's run
 * slots, so two threads with equal keys (one model trained by several threads) run the
 * entry side by side, each on a slot of its own, as do different entries. */
typedef struct {
    int depth;                           /* enables not yet disabled; 0: compiled autograd off */
    ca_compiled_options opts[MAX_DEPTH]; /* each enable's options; the innermost rules */
    bool log_graph, log_verbose;         /* CAGRAD_LOGS, read at each enable */
    ca_cache cache;                      /* the trie of compiled graphs */
    ca_compiled_counters counters;
    const graph *last_graph;     /* the latest compiled backward's, for ca_graph_write_dot */
    bool last_eager;             /* the latest backward under compiled autograd ran eagerly */
    bool profiling;              /* time each step of the runs (ca_compiled_autograd_profile) */
    ca_compiled_profile profile; /* the latest profiled run's; steps 0: none yet */
} compiled_autograd_state;

typedef struct {
    ca_walk walk;    /* the engine's walk, reused from backward to backward */
    ca_tensor *seed; /* a one-element loss's implicit ones gradient, reused while unshared */
    key_collect key; /* the current backward's key, sizes and lifted tensors */
    bool running;    /* a compiled backward is running: a backward its call-outs start is eager */
} compiled_thread_state;

static compiled_autograd_state compiled_autograd;
static pthread_mutex_t ca_mutex;
static pthread_once_t ca_once = PTHREAD_ONCE_INIT;
static pthread_key_t ca_thread_key;
static _Thread_local compiled_thread_state *ca_thread;

static void thread_state_free(void *p) {
    compiled_thread_state *t = p;
    if (!t)
        return;
    cai_key_collect_free(&t->key);
    cai_walk_free(&t->walk);
    ca_tensor_release(t->seed);
    cai_mem_free(t);
}

static void ca_init_once(void) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&ca_mutex, &attr);
    pthread_mutexattr_destroy(&attr);
    pthread_key_create(&ca_thread_key, thread_state_free);
}

static void ca_lock(void) {
    pthread_once(&ca_once, ca_init_once);
    pthread_mutex_lock(&ca_mutex);
}

static void ca_unlock(void) {
    pthread_mutex_unlock(&ca_mutex);
}

/* This thread's state, made at its first use (NULL when out of memory). The key's
 * destructor frees it when the thread exits. */
static compiled_thread_state *thread_state(void) {
    if (ca_thread)
        return ca_thread;
    pthread_once(&ca_once, ca_init_once);
    compiled_thread_state *t = cai_mem_calloc(1, sizeof *t);
    if (t && pthread_setspecific(ca_thread_key, t) != 0) {
        cai_mem_free(t);
        t = NULL;
    }
    return ca_thread = t;
}

/* ---------------------------------------------------------------------------------------
 * Switches and counters
 */
static void read_log_settings(void) {
    const char *env = getenv("CAGRAD_LOGS");
    compiled_autograd.log_verbose = env && strstr(env, "compiled_autograd_verbose");
    compiled_autograd.log_graph = env && strstr(env, "compiled_autograd");
}

static ca_status enable_locked(const ca_compiled_options *options) {
    CA_CHECK(ca_init());
    if (compiled_autograd.depth == MAX_DEPTH)
        return err_set(CA_STATUS_INVALID,
                       "ca_compiled_autograd_enable: nested %d deep; every "
                       "enable needs a matching ca_compiled_autograd_disable",
                       MAX_DEPTH);
    ca_compiled_options o = options ? *options : (ca_compiled_options){0};
    if (o.cache_size_limit < 0)
        return err_set(CA_STATUS_INVALID,
                       "ca_compiled_autograd_enable: cache_size_limit is %d; "
                       "pass 0 for the default (%d) or a positive bound",
                       o.cache_size_limit, DEFAULT_CACHE_LIMIT);
    if (o.cache_size_limit == 0)
        o.cache_size_limit = DEFAULT_CACHE_LIMIT;
    compiled_autograd.opts[compiled_autograd.depth++] = o;
    read_log_settings();
    return CA_OK;
}

ca_status ca_compiled_autograd_enable(const ca_compiled_options *options) {
    ca_lock();
    ca_status r = enable_locked(options);
    ca_unlock();
    return r;
}

static ca_status disable_locked(void) {
    if (compiled_autograd.depth == 0)
        return err_set(CA_STATUS_INVALID, "ca_compiled_autograd_disable: compiled autograd is "
                                          "not enabled; calls must pair with "
                                          "ca_compiled_autograd_enable");
    compiled_autograd.depth--;
    return CA_OK;
}

ca_status ca_compiled_autograd_disable(void) {
    ca_lock();
    ca_status r = disable_locked();
    ca_unlock();
    return r;
}

static bool enabled_locked(void) {
    int d = compiled_autograd.depth;
    return d > 0 && !compiled_autograd.opts[d - 1].off;
}

bool ca_compiled_autograd_enabled(void) {
    ca_lock();
    bool r = enabled_locked();
    ca_unlock();
    return r;
}

static void reset_locked(void) {
    cai_cache_clear(&compiled_autograd.cache);
    if (ca_thread && !ca_thread->running) { /* its state; other threads' live on until they exit */
        thread_state_free(ca_thread);
        pthread_setspecific(ca_thread_key, NULL);
        ca_thread = NULL;
    }
    memset(&compiled_autograd.counters, 0, sizeof compiled_autograd.counters);
    compiled_autograd.last_graph = NULL; /* freed with the cache */
    compiled_autograd.last_eager = false;
    memset(&compiled_autograd.profile, 0, sizeof compiled_autograd.profile);
}

void ca_compiled_autograd_reset(void) {
    ca_lock();
    reset_locked();
    ca_unlock();
}

static void counters_locked(ca_compiled_counters *out) {
    if (out)
        *out = compiled_autograd.counters;
}

void ca_compiled_autograd_counters(ca_compiled_counters *out) {
    ca_lock();
    counters_locked(out);
    ca_unlock();
}

static void set_profiling_locked(bool on) {
    compiled_autograd.profiling = on;
}

void ca_compiled_autograd_set_profiling(bool on) {
    ca_lock();
    set_profiling_locked(on);
    ca_unlock();
}

static ca_status last_profile_locked(ca_compiled_profile *out) {
    CA_ARG_NOT_NULL(out, "ca_compiled_autograd_last_profile");
    if (compiled_autograd.profile.steps == 0)
        return err_set(CA_STATUS_INVALID,
                       "ca_compiled_autograd_last_profile: no compiled backward has run with "
                       "profiling on; call ca_compiled_autograd_set_profiling(true) first");
    *out = compiled_autograd.profile;
    return CA_OK;
}

ca_status ca_compiled_autograd_last_profile(ca_compiled_profile *out) {
    ca_lock();
    ca_status r = last_profile_locked(out);
    ca_unlock();
    return r;
}

/* ---------------------------------------------------------------------------------------
 * Logs
 */
static void log_new_node(const cache_lookup *l) {
    int sizes[16], n = cai_cache_child_key_sizes(l->at, sizes, 16), len;
    key_bytes(&ca_thread->key, l->call, &len);
    char prev[160] = "";
    size_t used = 0;
    for (int i = 0; i < n && used < sizeof prev; i++)
        used += (size_t)snprintf(prev + used, sizeof prev - used, i ? ", %d" : "%d", sizes[i]);
    fprintf(stderr,
            "[compiled_autograd_verbose] Cache miss due to new autograd node: %s (NodeCall %d) "
            "with key size %d, previous key sizes=[%s]\n",
            cai_key_node_name(&ca_thread->key, l->call), l->call, len, prev);
}

/* Called before the leaf records the new sizes: leaf->last_sizes and leaf->dynamic still
 * hold the old. */
static void log_changed_shapes(const cache_leaf *leaf) {
    int changed = 0;
    for (int s = 0; s < leaf->n_slots; s++)
        changed += ca_thread->key.sizes[s] != leaf->last_sizes[s];
    fprintf(stderr,
            "[compiled_autograd_verbose] Cache miss due to %d changed tensor shapes (total of "
            "%d):",
            changed, leaf->n_slots);
    for (int s = 0, k = 0; s < leaf->n_slots; s++)
        if (ca_thread->key.sizes[s] != leaf->last_sizes[s])
            fprintf(stderr, k++ ? ", sizes[%d]" : " sizes[%d]", s);
    fprintf(stderr, "\n");
    for (int s = 0; s < leaf->n_slots; s++) {
        int64_t was = leaf->last_sizes[s], now = ca_thread->key.sizes[s];
        if (was == now)
            continue;
        char owner[160];
        fprintf(stderr, "[compiled_autograd_verbose] sizes[%d]: %s: %lld -> %lld (%s%s)\n", s,
                cai_key_owner_str(&ca_thread->key, s, owner, sizeof owner), (long long)was,
                (long long)now, leaf->dynamic[s] ? "dynamic" : "now dynamic",
                now == 0 ? "; 0 specialises" : "");
    }
}

static void log_graph(const compiled_graph *cg) {
    const run_slot *s = cg->slots;
    char *text =
        cai_graph_print_inputs(cg->g, compiled_autograd.log_verbose, s->sym_values, s->inputs);
    if (text)
        fprintf(stderr, "[compiled_autograd] TRACED GRAPH\n%s", text);
    cai_graph_free_string(text);
}

/* How each custom function's backward was captured: counted, and logged when verbose. */
static void note_customs(const trace_result *res) {
    for (int i = 0; i < res->n_notes; i++) {
        const trace_custom_note *c = &res->notes[i];
        const char *name = cai_key_node_name(&ca_thread->key, c->call);
        if (c->traced)
            compiled_autograd.counters.custom_traced++;
        else
            compiled_autograd.counters.custom_callouts++;
        if (!compiled_autograd.log_verbose)
            continue;
        if (c->traced)
            fprintf(stderr,
                    "[compiled_autograd_verbose] %s (NodeCall %d): custom backward traced into "
                    "the graph (%d ops)\n",
                    name, c->call, c->n_ops);
        else
            fprintf(stderr,
                    "[compiled_autograd_verbose] %s (NodeCall %d): custom backward is an opaque "
                    "call-out: %s\n",
                    name, c->call, c->why);
    }
}

/* ---------------------------------------------------------------------------------------
 * Compiling an entry
 */
static void compiled_free(void *p) {
    compiled_graph *cg = p;
    if (!cg)
        return;
    while (cg->slots) {
        run_slot *next = cg->slots->next;
        cai_slot_free(cg->slots);
        cg->slots = next;
    }
    cai_graph_free(cg->g);
    cai_mem_free(cg->reads);
    cai_mem_free(cg->callouts);
    cai_mem_free(cg->steal);
    cai_dbl_tape_release(cg->tape);
    pthread_mutex_destroy(&cg->slots_mu);
    cai_mem_free(cg);
}

static ca_status compiled_alloc(const key_collect *k, const cache_entry *e, compiled_graph **out) {
    compiled_graph *cg = cai_mem_calloc(1, sizeof *cg);
    if (!cg)
        return err_nomem("a compiled backward");
    pthread_mutex_init(&cg->slots_mu, NULL);
    cg->n_symbols = e->n_symbols;
    cg->n_inputs = k->n_lifted;
    *out = cg;
    return CA_OK;
}

/* Mark the leaves whose accumulate_grad is the only reader of a call-out's result. */
static ca_status find_steals(compiled_graph *cg) {
    int n = cai_graph_count(cg->g);
    int *readers = cai_mem_calloc((size_t)n + 1, sizeof(int));
    cg->steal = cai_mem_calloc((size_t)cg->n_inputs + 1, 1);
    if (!readers || !cg->steal) {
        cai_mem_free(readers);
        return err_nomem("a compiled backward");
    }
    for (graph_val v = 0; v < n; v++) {
        const graph_node *x = cai_graph_node_at(cg->g, v);
        for (int k = 0; !x->dead && k < x->a.n_in; k++)
            readers[x->a.in[k]]++;
    }
    for (graph_val v = 0; v < n; v++) {
        const graph_node *x = cai_graph_node_at(cg->g, v);
        if (x->dead || x->a.op != GOP_ACCUMULATE)
            continue;
        const graph_node *in = cai_graph_node_at(cg->g, x->a.in[0]);
        if (in->a.op == GOP_CALLOUT_RESULT && readers[x->a.in[0]] == 1 && x->a.i[0] < cg->n_inputs)
            cg->steal[x->a.i[0]] = 1;
    }
    cai_mem_free(readers);
    return CA_OK;
}

/* Trace, optimise and plan the entry's graph. A trace failure is not the user's error:
 * *untraceable is set and the caller runs eagerly. */
static ca_status compile_entry(const compiled_call *c, cache_entry *e, bool *untraceable) {
    compiled_graph *cg;
    CA_CHECK(compiled_alloc(&ca_thread->key, e, &cg));
    trace_request tr = {.k = &ca_thread->key,
                        .e = e,
                        .capture = c->capture,
                        .create_graph = c->create_graph,
                        .n_targets = c->n_targets,
                        .targets = c->targets,
                        .target_nrs = c->target_nrs};
    trace_result res;
    ca_status st = cai_trace_backward(&tr, &res);
    cg->g = res.g;
    cg->tape = res.tape;
    cg->reads = res.reads;
    cg->n_reads = res.n_reads;
    cg->callouts = res.callouts;
    cg->n_callouts = res.n_callouts;
    if (st == CA_OK)
        note_customs(&res);
    cai_mem_free(res.notes);
    if (st == CA_STATUS_INTERNAL)
        *untraceable = true;
    if (st == CA_OK) {
        cai_graph_dce(cg->g);
        cai_graph_cse(cg->g);
        cai_graph_simplify(cg->g); /* out of memory leaves it unsimplified, still right */
        cai_graph_cse(cg->g);      /* rewrites can make equal nodes */
        if (cg->tape) /* a kept GEMM the graph does not need stays dead: its replay is too */
            cai_graph_drop_lone_outputs(cg->g, (int64_t)tr.n_targets + tr.k->n_lifted);
        cai_graph_dce(cg->g);
        cai_graph_fuse(
            cg->g); /* last before planning; out of memory leaves it unfused, still right */
        cg->slots = cai_slot_new(cg); /* the graph's plan, with its first run's state */
        if (!cg->slots)
            st = err_nomem("a compiled backward's memory plan");
    }
    if (st != CA_OK) {
        compiled_free(cg);
        return st;
    }
    e->compiled = cg;
    e->free_compiled = compiled_free;
    return find_steals(cg);
}

/* Which of e's symbolic slots the graph needs equal: a trace with a symbol per slot, in
 * which shape inference unifies symbols of equal value where it must compare them. cls[]
 * gets each slot's class (its class's first slot; -1 static). A trace that fails with
 * CA_STATUS_INTERNAL sets *untraceable. values and scratch have n_sizes entries. */
static ca_status needed_classes(const compiled_call *c, cache_entry *e, int32_t *cls,
                                int64_t *values, int32_t *scratch, bool *untraceable) {
    const key_collect *k = &ca_thread->key;
    for (int s = 0; s < k->n_sizes; s++)
        cls[s] = e->symbol[s] >= 0 ? s : -1;
    cai_cache_entry_set_classes(e, k, cls, scratch); /* a symbol per slot */
    for (int y = 0; y < e->n_symbols; y++)
        values[y] = k->sizes[e->first_slot[y]];
    trace_request tr = {.k = k,
                        .e = e,
                        .unify = values,
                        .capture = c->capture,
                        .n_targets = c->n_targets,
                        .targets = c->targets,
                        .target_nrs = c->target_nrs};
    trace_result res;
    ca_status st = cai_trace_backward(&tr, &res);
    *untraceable = st == CA_STATUS_INTERNAL;
    if (st != CA_OK)
        return st;
    for (int s = 0; s < k->n_sizes; s++)
        cls[s] = e->symbol[s] < 0 ? -1 : e->first_slot[cai_graph_unify_find(res.g, e->symbol[s])];
    cai_graph_free(res.g);
    cai_mem_free(res.reads);
    cai_mem_free(res.callouts);
    cai_mem_free(res.notes);
    return CA_OK;
}

/* compile_entry with as few equalities between e's symbolic slots as the graph needs: e's
 * duck sizing (equal values share a symbol) says which slots may share one, the needed
 * classes which must. Two dims that were equal at capture but never meet in the graph get
 * a symbol each, so a later change of one of them alone still hits. Falls back to duck
 * sizing when the classes cannot be found or traced. */
static ca_status compile_symbols(const compiled_call *c, cache_entry *e, bool *untraceable) {
    const key_collect *k = &ca_thread->key;
    int n = k->n_sizes;
    if (e->n_symbols == 0)
        return compile_entry(c, e, untraceable);
    int32_t *duck = cai_mem_alloc(sizeof(int32_t) * 3 * (size_t)n);
    int64_t *values = cai_mem_alloc(sizeof(int64_t) * (size_t)n);
    if (!duck || !values) {
        cai_mem_free(duck);
        cai_mem_free(values);
        return err_nomem("a compiled backward's size classes");
    }
    int32_t *cls = duck + n, *scratch = duck + 2 * n;
    int n_duck = e->n_symbols, n_symbolic = 0;
    for (int s = 0; s < n; s++) {
        duck[s] = e->symbol[s] >= 0 ? e->first_slot[e->symbol[s]] : -1;
        n_symbolic += e->symbol[s] >= 0;
    }
    ca_status st = CA_OK;
    *untraceable = false;
    bool refined = false;
    if (n_symbolic > n_duck) { /* some slots share a symbol: do they have to? */
        st = needed_classes(c, e, cls, values, scratch, untraceable);
        if (st == CA_OK) {
            cai_cache_entry_set_classes(e, k, cls, scratch);
            refined = e->n_symbols > n_duck;
            st = refined ? compile_entry(c, e, untraceable) : CA_OK;
        }
    }
    if (!refined || *untraceable) { /* duck sizing, as captured */
        cai_cache_entry_set_classes(e, k, duck, scratch);
        *untraceable = false;
        st = compile_entry(c, e, untraceable);
    }
    cai_mem_free(duck);
    cai_mem_free(values);
    return st;
}

/* ---------------------------------------------------------------------------------------
 * One compiled backward
 */
/* Free saved values as the eager engine does: those of every node whose rule ran. */
static void release_saved(void) {
    for (int i = 0; i < ca_thread->key.n_nodes; i++) {
        ca_node *n = ca_thread->key.nodes[i];
        const ca_walk *w = ca_thread->key.walk;
        if (cai_walk_needed(w, n) && n->op != CA_OP_ACCUMULATE_GRAD && cai_walk_leads_on(w, n))
            cai_node_release_saved(n);
    }
}

/* The entry to run for this key, compiling one on a miss; NULL to run eagerly. A backward
 * that fails with the user's error (a saved tensor changed in place or freed) counts
 * neither a hit nor a miss: the counters describe lookups that went somewhere. */
static ca_status find_or_compile(const compiled_call *c, cache_entry **out) {
    *out = NULL;
    cache_lookup l = cai_cache_find(&compiled_autograd.cache, &ca_thread->key);
    if (l.kind == LOOKUP_HIT) {
        CA_CHECK(cai_entry_check_reads(l.entry->compiled, &ca_thread->key));
        compiled_autograd.counters.cache_hits++;
        *out = l.entry;
        return CA_OK;
    }
    if (compiled_autograd.log_verbose && l.kind == LOOKUP_NEW_NODE)
        log_new_node(&l);
    const ca_compiled_options *o = &compiled_autograd.opts[compiled_autograd.depth - 1];
    cache_leaf *leaf;
    CA_CHECK(cai_cache_leaf_for(&compiled_autograd.cache, &ca_thread->key, &l, o->dynamic, &leaf));
    if (l.kind == LOOKUP_SHAPES) {
        if (compiled_autograd.log_verbose)
            log_changed_shapes(leaf);
        cai_cache_mark_changed(leaf, &ca_thread->key, NULL);
    }
    if (leaf->n_entries >= o->cache_size_limit) {
        if (!leaf->warned)
            fprintf(stderr,
                    "[compiled_autograd] warning: %d compiled graphs for one graph "
                    "(cache_size_limit); running it eagerly from now on\n",
                    leaf->n_entries);
        leaf->warned = true;
        compiled_autograd.counters.cache_misses++;
        compiled_autograd.counters.eager_fallbacks++;
        return CA_OK;
    }
    cache_entry *e;
    int64_t t0 = cai_kern_now_ns();
    CA_CHECK(cai_cache_add_entry(leaf, &ca_thread->key, NULL, NULL, &e));
    bool untraceable = false;
    ca_status st = compile_symbols(c, e, &untraceable);
    /* a dim captured at 1 that had to broadcast: the same entry with it as the constant 1 */
    if (untraceable && cai_cache_entry_specialise_ones(e, leaf, &ca_thread->key)) {
        untraceable = false;
        st = compile_symbols(c, e, &untraceable);
    }
    if (untraceable && compiled_autograd.log_verbose)
        fprintf(stderr, "[compiled_autograd_verbose] running eagerly: %s\n", ca_last_error());
    compiled_autograd.counters.compile_ns += cai_kern_now_ns() - t0;
    if (st != CA_OK) {
        cai_cache_drop_entry(leaf, e); /* no half-built entry: the next backward retries */
        if (untraceable) {
            compiled_autograd.counters.cache_misses++;
            compiled_autograd.counters.eager_fallbacks++;
            return CA_OK;
        }
        return st;
    }
    compiled_autograd.counters.cache_misses++;
    compiled_autograd.counters.captures++;
    compiled_autograd.counters.graphs++;
    compiled_autograd.counters.fused_kernels +=
        cai_graph_count_fused(((const compiled_graph *)e->compiled)->g);
    if (compiled_autograd.log_graph) { /* each traced graph is printed once, when it is made */
        compiled_graph *cg = e->compiled;
        cai_entry_bind(e, cg->slots, &ca_thread->key); /* no one runs it yet */
        log_graph(cg);
    }
    *out = e;
    return CA_OK;
}

ca_walk *cai_compiled_walk(void) {
    compiled_thread_state *t = thread_state();
    return t ? &t->walk : NULL;
}

ca_status cai_compiled_seed(const ca_meta *m, ca_tensor **out) {
    compiled_thread_state *t = thread_state();
    if (!t)
        return err_nomem("compiled autograd's per-thread state");
    if (t->seed) {
        ca_meta have;
        cai_tensor_meta(t->seed, &have);
        /* reused only while nobody else holds it, so no one can see it change */
        if (cai_meta_same_shape(&have, m) && have.dtype == m->dtype &&
            ref_count(&t->seed->refcnt) == 1 && t->seed->storage->version == 0) {
            *out = ca_tensor_retain(t->seed);
            return CA_OK;
        }
        ca_tensor_release(t->seed);
        t->seed = NULL;
    }
    CA_CHECK(cai_tensor_full(m, 1.0, &t->seed));
    *out = ca_tensor_retain(t->seed);
    return CA_OK;
}

static int depth_locked(void) {
    return compiled_autograd.depth;
}

int ca_compiled_autograd_depth(void) {
    ca_lock();
    int r = depth_locked();
    ca_unlock();
    return r;
}

bool cai_compiled_active(void) {
    return ca_compiled_autograd_enabled() && !(ca_thread && ca_thread->running);
}

static void note_eager_locked(const char *why) {
    compiled_autograd.counters.eager_fallbacks++;
    compiled_autograd.last_graph = NULL;
    compiled_autograd.last_eager = true;
    if (compiled_autograd.log_verbose)
        fprintf(stderr, "[compiled_autograd_verbose] running eagerly: %s\n", why);
}

void cai_compiled_note_eager(const char *why) {
    ca_lock();
    note_eager_locked(why);
    ca_unlock();
}

ca_status cai_compiled_run(const ca_walk *w, const compiled_call *c, bool *ran) {
    *ran = false;
    key_request req = {.capture = c->capture,
                       .create_graph = c->create_graph,
                       .n_roots = c->n_roots,
                       .roots = c->roots,
                       .root_nrs = c->root_nrs,
                       .seeds = c->seeds,
                       .n_targets = c->n_targets,
                       .targets = c->targets,
                       .target_nrs = c->target_nrs};
    compiled_thread_state *t = thread_state();
    if (!t)
        return err_nomem("compiled autograd's per-thread state");
    CA_CHECK(cai_key_collect_walk(&t->key, w, &req)); /* the eager engine's errors, if any */
    cache_entry *e = NULL;
    ca_lock();
    ca_status st = find_or_compile(c, &e);
    compiled_graph *cg = st == CA_OK && e ? e->compiled : NULL;
    if (st == CA_OK) {
        compiled_autograd.last_graph = cg ? cg->g : NULL;
        compiled_autograd.last_eager = !cg;
    }
    run_report rep = {.profiling = compiled_autograd.profiling,
                      .verbose = compiled_autograd.log_verbose};
    ca_unlock();
    if (!cg)
        return st;
    /* Taken after ca_lock is let go: a call-out of the run (a hook starting a backward)
     * takes ca_lock, so holding both in the other order here could deadlock. Nothing but
     * ca_compiled_autograd_reset frees an entry, and it must not race a backward. Threads
     * running this entry at once (one model's backwards on several threads) each get a
     * slot: they never wait for each other's runs. */
    run_slot *slot = cai_slot_acquire(cg);
    *ran = true;
    t->running = true;
    st = c->create_graph ? cai_entry_run_double(c, e, slot, &t->key, &rep)
                         : cai_entry_run(c, e, slot, &t->key, c->grads_out, &rep);
    t->running = false;
    cai_slot_release(slot);
    ca_lock();
    compiled_autograd.counters.side_by_side_runs += rep.side_by_side;
    if (rep.profile.steps > 0)
        compiled_autograd.profile = rep.profile;
    ca_unlock();
    if (st == CA_OK && !c->retain_graph)
        release_saved();
    return st;
}

/* ---------------------------------------------------------------------------------------
 * The latest compiled backward as a picture
 */
static ca_status write_text(const char *path, const char *text) {
    bool to_stdout = strcmp(path, "-") == 0;
    FILE *f = to_stdout ? stdout : fopen(path, "w");
    if (!f)
        return err_set(CA_STATUS_INVALID, "ca_graph_write_dot: cannot open \"%s\" for writing: %s",
                       path, strerror(errno));
    errno = 0;
    int err = fputs(text, f) < 0 ? errno : 0;
    int rc = to_stdout ? fflush(f) : fclose(f);
    if (rc != 0 && !err)
        err = errno;
    if (err || rc != 0)
        return err_set(CA_STATUS_INVALID, "ca_graph_write_dot: writing \"%s\" failed: %s", path,
                       strerror(err ? err : EIO));
    return CA_OK;
}

static ca_status write_dot_locked(const char *path) {
    CA_ARG_NOT_NULL(path, "ca_graph_write_dot");
    if (!compiled_autograd.last_graph)
        return err_set(CA_STATUS_INVALID, "ca_graph_write_dot: %s",
                       compiled_autograd.last_eager
                           ? "the latest backward ran eagerly (cache_size_limit reached, "
                             "or an op the compiled backward cannot trace), so it has no "
                             "graph; CAGRAD_LOGS=compiled_autograd_verbose says why"
                           : "no compiled backward has run yet (or "
                             "ca_compiled_autograd_reset dropped it); call ca_backward "
                             "with compiled autograd enabled first");
    char *text = cai_graph_dot(compiled_autograd.last_graph);
    if (!text)
        return err_nomem("the DOT text of a compiled backward");
    ca_status st = write_text(path, text);
    cai_graph_free_string(text);
    return st;
}

ca_status ca_graph_write_dot(const char *path) {
    ca_lock();
    ca_status r = write_dot_locked(path);
    ca_unlock();
    return r;
}
