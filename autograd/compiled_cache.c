/* compiled_cache.c - the trie of per-node keys and the size-guarded entries at its leaves.
 * See compiled_cache.h for the rules on static and dynamic slots.
 */
#include "autograd/compiled_cache.h"

#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Lookup
 */
static trie_node *child_matching(trie_node *t, const uint8_t *key, int len) {
    for (trie_node *c = t->child; c; c = c->sibling)
        if (c->len == len && memcmp(c->key, key, (size_t)len) == 0)
            return c;
    return NULL;
}

/* Static slots must equal their captured value. A symbol's slots match any value >= 1
 * (1 included, 0 not: see compiled_cache.h), provided they are all equal (compared with the
 * symbol's first slot). */
static bool entry_matches(const cache_entry *e, const key_collect *k) {
    if (e->n_slots != k->n_sizes)
        return false;
    for (int s = 0; s < k->n_sizes; s++) {
        int64_t v = k->sizes[s];
        int32_t sym = e->symbol[s];
        if (sym < 0 ? v != e->sizes[s] : v < 1 || v != k->sizes[e->first_slot[sym]])
            return false;
    }
    return true;
}

cache_lookup cai_cache_find(ca_cache *c, const key_collect *k) {
    trie_node *t = &c->root;
    for (int call = 0; call <= k->n_nodes; call++) {
        int len;
        const uint8_t *key = key_bytes(k, call, &len);
        trie_node *next = child_matching(t, key, len);
        if (!next)
            return (cache_lookup){.kind = LOOKUP_NEW_NODE, .call = call, .at = t};
        t = next;
    }
    if (!t->leaf)
        return (cache_lookup){.kind = LOOKUP_NEW_NODE, .call = k->n_nodes, .at = t};
    for (cache_entry *e = t->leaf->entries; e; e = e->next)
        if (entry_matches(e, k))
            return (cache_lookup){.kind = LOOKUP_HIT, .leaf = t->leaf, .entry = e};
    return (cache_lookup){.kind = LOOKUP_SHAPES, .leaf = t->leaf};
}

/* ---------------------------------------------------------------------------------------
 * Insertion
 */
static ca_status trie_child(trie_node *t, const uint8_t *key, int len, trie_node **out) {
    trie_node *c = child_matching(t, key, len);
    if (c) {
        *out = c;
        return CA_OK;
    }
    c = cai_mem_calloc(1, sizeof *c);
    uint8_t *copy = cai_mem_alloc((size_t)len);
    if (!c || !copy) {
        cai_mem_free(c);
        cai_mem_free(copy);
        return err_nomem("the compiled backward's cache");
    }
    memcpy(copy, key, (size_t)len);
    c->key = copy;
    c->len = len;
    c->sibling = t->child; /* a new child goes first: recent graphs are found first */
    t->child = c;
    *out = c;
    return CA_OK;
}

static ca_status leaf_new(const key_collect *k, bool dynamic, cache_leaf **out) {
    cache_leaf *leaf = cai_mem_calloc(1, sizeof *leaf);
    size_t n = (size_t)k->n_sizes;
    uint8_t *dyn = cai_mem_calloc(n ? n : 1, 1);
    int64_t *last = cai_mem_alloc(sizeof(int64_t) * (n ? n : 1));
    if (!leaf || !dyn || !last) {
        cai_mem_free(leaf);
        cai_mem_free(dyn);
        cai_mem_free(last);
        return err_nomem("the compiled backward's cache");
    }
    for (size_t s = 0; s < n; s++)
        dyn[s] = dynamic && k->sizes[s] >= 2;
    if (n)
        memcpy(last, k->sizes, sizeof(int64_t) * n);
    leaf->n_slots = k->n_sizes;
    leaf->dynamic = dyn;
    leaf->last_sizes = last;
    *out = leaf;
    return CA_OK;
}

/* Walks (and creates) the trie path of k. On failure the nodes already made stay: they
 * are valid, empty prefixes, and the next lookup simply misses at the same place. */
ca_status cai_cache_leaf_for(ca_cache *c, const key_collect *k, const cache_lookup *l, bool dynamic,
                             cache_leaf **out) {
    if (l->kind != LOOKUP_NEW_NODE) {
        *out = l->leaf;
        return CA_OK;
    }
    trie_node *t = &c->root;
    for (int call = 0; call <= k->n_nodes; call++) {
        int len;
        const uint8_t *key = key_bytes(k, call, &len);
        CA_CHECK(trie_child(t, key, len, &t));
    }
    if (!t->leaf)
        CA_CHECK(leaf_new(k, dynamic, &t->leaf));
    *out = t->leaf;
    return CA_OK;
}

int cai_cache_mark_changed(cache_leaf *leaf, const key_collect *k, uint8_t *changed) {
    int count = 0;
    for (int s = 0; s < leaf->n_slots; s++) {
        bool diff = k->sizes[s] != leaf->last_sizes[s];
        if (changed)
            changed[s] = diff;
        count += diff;
        if (diff) /* 0 and 1 included: a size that changes is dynamic from now on */
            leaf->dynamic[s] = 1;
        leaf->last_sizes[s] = k->sizes[s];
    }
    return count;
}

static void entry_free(cache_entry *e) {
    if (e->free_compiled && e->compiled)
        e->free_compiled(e->compiled);
    cai_mem_free(e->sizes);
    cai_mem_free(e->symbol);
    cai_mem_free(e->first_slot);
    cai_mem_free(e);
}

/* Duck sizing: dynamic slots with equal values share a symbol. Slots below `min` stay
 * constants. */
static void assign_symbols(cache_entry *e, const cache_leaf *leaf, const key_collect *k,
                           int64_t min) {
    e->n_symbols = 0;
    for (int s = 0; s < k->n_sizes; s++) {
        e->symbol[s] = -1;
        if (!leaf->dynamic[s] || k->sizes[s] < min)
            continue;
        for (int t = 0; t < s && e->symbol[s] < 0; t++)
            if (e->symbol[t] >= 0 && k->sizes[t] == k->sizes[s])
                e->symbol[s] = e->symbol[t];
        if (e->symbol[s] < 0) {
            e->first_slot[e->n_symbols] = s;
            e->symbol[s] = e->n_symbols++;
        }
    }
}

void cai_cache_entry_set_classes(cache_entry *e, const key_collect *k, const int32_t *cls,
                                 int32_t *scratch) {
    for (int s = 0; s < k->n_sizes; s++)
        scratch[s] = -1; /* class -> its symbol */
    e->n_symbols = 0;
    for (int s = 0; s < k->n_sizes; s++) {
        e->symbol[s] = cls[s] < 0 ? -1 : scratch[cls[s]];
        if (cls[s] >= 0 && e->symbol[s] < 0) {
            e->first_slot[e->n_symbols] = s;
            e->symbol[s] = scratch[cls[s]] = e->n_symbols++;
        }
    }
}

bool cai_cache_entry_specialise_ones(cache_entry *e, const cache_leaf *leaf, const key_collect *k) {
    bool any = false;
    for (int s = 0; s < k->n_sizes; s++)
        any |= e->symbol[s] >= 0 && k->sizes[s] == 1;
    if (any)
        assign_symbols(e, leaf, k, 2);
    return any;
}

ca_status cai_cache_add_entry(cache_leaf *leaf, const key_collect *k, void *compiled,
                              void (*free_compiled)(void *), cache_entry **out) {
    size_t n = (size_t)k->n_sizes ? (size_t)k->n_sizes : 1;
    cache_entry *e = cai_mem_calloc(1, sizeof *e);
    if (e) {
        e->sizes = cai_mem_alloc(sizeof(int64_t) * n);
        e->symbol = cai_mem_alloc(sizeof(int32_t) * n);
        e->first_slot = cai_mem_alloc(sizeof(int32_t) * n);
        e->compiled = compiled;
        e->free_compiled = free_compiled;
    }
    if (!e || !e->sizes || !e->symbol || !e->first_slot) {
        if (e)
            entry_free(e);
        else if (free_compiled && compiled)
            free_compiled(compiled);
        return err_nomem("a compiled backward's cache entry");
    }
    e->n_slots = k->n_sizes;
    if (k->n_sizes)
        memcpy(e->sizes, k->sizes, sizeof(int64_t) * (size_t)k->n_sizes);
    assign_symbols(e, leaf, k, 1);
    e->next = leaf->entries;
    leaf->entries = e;
    leaf->n_entries++;
    *out = e;
    return CA_OK;
}

void cai_cache_drop_entry(cache_leaf *leaf, cache_entry *e) {
    for (cache_entry **p = &leaf->entries; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            leaf->n_entries--;
            entry_free(e);
            return;
        }
}

int cai_cache_child_key_sizes(const trie_node *t, int *out, int max) {
    int n = 0;
    for (const trie_node *c = t->child; c && n < max; c = c->sibling)
        out[n++] = c->len;
    return n;
}

/* ---------------------------------------------------------------------------------------
 * Teardown: iterative over siblings, recursive over depth only through an explicit
 * worklist threaded through the sibling pointers, so a 10k-node graph cannot overflow the
 * stack.
 */
static void leaf_free(cache_leaf *leaf) {
    if (!leaf)
        return;
    while (leaf->entries) {
        cache_entry *e = leaf->entries;
        leaf->entries = e->next;
        entry_free(e);
    }
    cai_mem_free(leaf->dynamic);
    cai_mem_free(leaf->last_sizes);
    cai_mem_free(leaf);
}

void cai_cache_clear(ca_cache *c) {
    trie_node *work = c->root.child;
    c->root.child = NULL;
    while (work) {
        trie_node *t = work;
        work = t->sibling;
        /* splice t's children onto the worklist */
        if (t->child) {
            trie_node *last = t->child;
            while (last->sibling)
                last = last->sibling;
            last->sibling = work;
            work = t->child;
        }
        leaf_free(t->leaf);
        cai_mem_free(t->key);
        cai_mem_free(t);
    }
}
