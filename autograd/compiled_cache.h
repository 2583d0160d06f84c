/* compiled_cache.h - the compiled backward's cache: a trie of per-node keys, with the
 * compiled graphs at its leaves guarded by sizes.
 *
 * One trie level per NodeCall: graphs that start alike share a prefix, and the first level
 * without a matching child is exactly the node a "new autograd node" miss names. A leaf
 * holds the compiled entries for one key, and which size slots have varied there.
 *
 * Sizes: a slot starts static (an entry matches only its captured value). The first time a
 * static slot changes at a leaf (1 -> 2, 4 -> 1 and 0 -> n included, as in PyTorch), the
 * slot becomes dynamic for good, and the entry compiled next treats it as a symbol when its
 * value there is >= 1. A symbol matches any value >= 1, provided the slots that share it
 * are still equal. Here slots of equal value share one (duck sizing); the compiled
 * backward then unties those its graph does not need equal (cai_cache_entry_set_classes).
 *
 * Why 1 is right and 0 is not: graph/shape.c lets a symbol meet only itself or the
 * constant 1 (anything else fails the trace), and at value 1 both give eager's shapes and
 * values, so a graph traced with a symbol is right for every value >= 1, whatever the value
 * at capture. A trace that needs a dim captured at 1 to broadcast against another size
 * fails; the caller then retraces with those slots as the constant 1
 * (cai_cache_entry_specialise_ones). At 0 a symbol's graph can differ from eager (a mean's
 * 1/N is inf, and the simplifier's sum(expand(x)) = x * N is then nan where eager sums
 * nothing to 0), so a dynamic slot at 0 is a constant in its entry, and 0 never matches a
 * symbol.
 */
#ifndef CAGRAD_COMPILED_CACHE_H
#define CAGRAD_COMPILED_CACHE_H

#include "autograd/compiled_key.h"

typedef struct cache_entry cache_entry;
typedef struct cache_leaf cache_leaf;
typedef struct trie_node trie_node;

struct cache_entry {
    cache_entry *next;
    int n_slots;
    int64_t *sizes;      /* captured values */
    int32_t *symbol;     /* per slot: -1 static, else its symbol (equal slots share one) */
    int32_t *first_slot; /* per symbol: the first slot that uses it */
    int n_symbols;
    void *compiled; /* the compiled program; freed with free_compiled */
    void (*free_compiled)(void *compiled);
};

struct cache_leaf {
    int n_slots;
    uint8_t *dynamic;    /* per slot, sticky */
    int64_t *last_sizes; /* sizes of the latest capture here, for "old -> new" */
    cache_entry *entries;
    int n_entries;
    bool warned; /* the bound was reached and said once */
};

struct trie_node {
    trie_node *child, *sibling;
    int len;
    uint8_t *key;
    cache_leaf *leaf;
};

typedef struct {
    trie_node root; /* the level above GraphRoot */
} ca_cache;

typedef enum { LOOKUP_HIT, LOOKUP_NEW_NODE, LOOKUP_SHAPES } cache_lookup_kind;

typedef struct {
    cache_lookup_kind kind;
    int call;           /* NEW_NODE: the first NodeCall without a matching trie child */
    trie_node *at;      /* NEW_NODE: the trie node whose children did not match */
    cache_leaf *leaf;   /* SHAPES and HIT */
    cache_entry *entry; /* HIT */
} cache_lookup;

/* Look the collected key up. Allocates nothing. */
cache_lookup cai_cache_find(ca_cache *c, const key_collect *k);
/* The leaf for k, creating the rest of its trie path. With `dynamic`, a new leaf starts
 * with every slot of value >= 2 dynamic. */
ca_status cai_cache_leaf_for(ca_cache *c, const key_collect *k, const cache_lookup *l, bool dynamic,
                             cache_leaf **out);
/* A SHAPES miss: mark the slots whose value differs from the leaf's last capture dynamic.
 * changed[] (n_slots entries, may be NULL) gets 1 for each slot that changed; returns how
 * many changed. Records k's sizes as the last capture. */
int cai_cache_mark_changed(cache_leaf *leaf, const key_collect *k, uint8_t *changed);
/* A new entry for k at leaf, with the leaf's current dynamic slots of value >= 1 as
 * symbols. The entry owns `compiled` from now on (also on failure, when it is freed at
 * once). */
ca_status cai_cache_add_entry(cache_leaf *leaf, const key_collect *k, void *compiled,
                              void (*free_compiled)(void *), cache_entry **out);
/* Give e's slots symbols by class: slots with equal cls[] share one, cls[s] < 0 is static;
 * a class is a slot number (< n_sizes). Symbols are numbered in slot order. scratch holds
 * n_sizes entries. */
void cai_cache_entry_set_classes(cache_entry *e, const key_collect *k, const int32_t *cls,
                                 int32_t *scratch);
/* Make e's symbols captured at 1 constants again (after a trace that needed them to
 * broadcast); false when it had none, so a retrace would change nothing. */
bool cai_cache_entry_specialise_ones(cache_entry *e, const cache_leaf *leaf, const key_collect *k);
/* Remove e from leaf and free it (a compile that failed after the entry was made). */
void cai_cache_drop_entry(cache_leaf *leaf, cache_entry *e);
/* Key byte lengths of the children of t, for the "previous key sizes" log. */
int cai_cache_child_key_sizes(const trie_node *t, int *out, int max);
/* Free everything. */
void cai_cache_clear(ca_cache *c);

#endif /* CAGRAD_COMPILED_CACHE_H */
