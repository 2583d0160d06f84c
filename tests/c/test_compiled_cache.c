/* test_compiled_cache.c - the trie cache: hits, "new node" and "changed shapes" misses,
 * slots turning dynamic (1 -> 2 included), duck-sized symbols and classes that untie them,
 * dynamic=true, a symbol at 1 and 0, teardown,
 * and allocation failure while inserting. */
#include "autograd/compiled_cache.h"
#include "testutil.h"

#include <string.h>

typedef struct {
    ca_walk walk;
    key_collect key;
    ca_tensor *t[6];
} graph_key;

/* loss = sum(x @ w^T) with x [batch, in], w [out, in]; extra adds a tanh on top */
static void make_key(graph_key *g, int64_t batch, int64_t in, int64_t out, bool extra) {
    memset(g, 0, sizeof *g);
    g->t[0] = tu_randn(CA_FLOAT32, TU_SHAPE(batch, in), false);
    g->t[1] = tu_randn(CA_FLOAT32, TU_SHAPE(out, in), true);
    TU_OK(ca_linear(g->t[0], g->t[1], NULL, &g->t[2]));
    TU_OK(ca_sum(g->t[2], 0, NULL, false, &g->t[3]));
    ca_tensor *loss = g->t[3];
    if (extra) {
        TU_OK(ca_tanh(g->t[3], &g->t[4]));
        loss = g->t[4];
    }
    TU_OK(ca_ones(CA_FLOAT32, 0, NULL, &g->t[5]));
    ca_node *root = loss->grad_fn;
    TU_OK(cai_walk_graph(&g->walk, &root, 1));
    key_request req = {.n_roots = 1, .roots = &root, .seeds = &g->t[5]};
    TU_OK(cai_key_collect_walk(&g->key, &g->walk, &req));
}

static void free_key(graph_key *g) {
    cai_key_collect_free(&g->key);
    cai_walk_free(&g->walk);
    tu_release_n(g->t, 6);
}

static int freed;
static void count_free(void *p) {
    freed++;
}

/* Insert g at whatever its lookup says, returning the new entry. */
static cache_entry *insert(ca_cache *c, graph_key *g, bool dynamic) {
    cache_lookup l = cai_cache_find(c, &g->key);
    cache_leaf *leaf;
    cache_entry *e;
    TU_OK(cai_cache_leaf_for(c, &g->key, &l, dynamic, &leaf));
    if (l.kind == LOOKUP_SHAPES)
        cai_cache_mark_changed(leaf, &g->key, NULL);
    TU_OK(cai_cache_add_entry(leaf, &g->key, &freed, count_free, &e));
    return e;
}

Test(compiled_cache, empty_cache_misses_at_graph_root) {
    ca_cache c = {0};
    graph_key g;
    make_key(&g, 8, 4, 3, false);
    cache_lookup l = cai_cache_find(&c, &g.key);
    cr_assert_eq(l.kind, LOOKUP_NEW_NODE);
    cr_assert_eq(l.call, 0);
    free_key(&g);
}

Test(compiled_cache, same_graph_hits) {
    ca_cache c = {0};
    graph_key g1, g2;
    make_key(&g1, 8, 4, 3, false);
    make_key(&g2, 8, 4, 3, false);
    cache_entry *e = insert(&c, &g1, false);
    cache_lookup l = cai_cache_find(&c, &g2.key);
    cr_assert_eq(l.kind, LOOKUP_HIT);
    cr_assert_eq(l.entry, e);
    cai_cache_clear(&c);
    free_key(&g1);
    free_key(&g2);
}

Test(compiled_cache, batch_change_is_one_shapes_miss_then_hits) {
    ca_cache c = {0};
    graph_key g8, g16, g32;
    make_key(&g8, 8, 4, 3, false);
    make_key(&g16, 16, 4, 3, false);
    make_key(&g32, 32, 4, 3, false);
    insert(&c, &g8, false);
    cache_lookup l = cai_cache_find(&c, &g16.key);
    cr_assert_eq(l.kind, LOOKUP_SHAPES);
    uint8_t changed[256] = {0};
    cr_assert_lt(l.leaf->n_slots, 256);
    int n = cai_cache_mark_changed(l.leaf, &g16.key, changed);
    cr_assert_gt(n, 0);
    for (int s = 0; s < l.leaf->n_slots; s++)
        cr_assert_eq(l.leaf->dynamic[s], changed[s], "slot %d: only changed slots turn dynamic", s);
    cache_entry *e;
    TU_OK(cai_cache_add_entry(l.leaf, &g16.key, &freed, count_free, &e));
    cr_assert_eq(cai_cache_find(&c, &g32.key).kind, LOOKUP_HIT, "a third batch size hits");
    cr_assert_eq(cai_cache_find(&c, &g32.key).entry, e);
    cr_assert_eq(cai_cache_find(&c, &g8.key).kind, LOOKUP_HIT);
    cai_cache_clear(&c);
    free_key(&g8);
    free_key(&g16);
    free_key(&g32);
}

Test(compiled_cache, new_node_miss_names_the_first_differing_call) {
    ca_cache c = {0};
    graph_key a, b;
    make_key(&a, 8, 4, 3, false);
    make_key(&b, 8, 4, 3, true);
    insert(&c, &a, false);
    cache_lookup l = cai_cache_find(&c, &b.key);
    cr_assert_eq(l.kind, LOOKUP_NEW_NODE);
    cr_assert_eq(l.call, 1, "GraphRoot matches in shape, NodeCall 1 (TanhBackward0) differs");
    cr_assert_str_eq(cai_key_node_name(&b.key, 1), "TanhBackward0");
    int sizes[4];
    cr_assert_eq(cai_cache_child_key_sizes(l.at, sizes, 4), 1, "one previous key at that level");
    cai_cache_clear(&c);
    free_key(&a);
    free_key(&b);
}

Test(compiled_cache, dynamic_option_makes_first_entry_general) {
    ca_cache c = {0};
    graph_key g8, g16;
    make_key(&g8, 8, 4, 3, false);
    make_key(&g16, 16, 4, 3, false);
    insert(&c, &g8, true);
    cr_assert_eq(cai_cache_find(&c, &g16.key).kind, LOOKUP_HIT);
    cai_cache_clear(&c);
    free_key(&g8);
    free_key(&g16);
}

Test(compiled_cache, symbol_matches_one_but_not_zero) {
    ca_cache c = {0};
    graph_key g8, g1, g0;
    make_key(&g8, 8, 4, 3, false);
    make_key(&g1, 1, 4, 3, false);
    make_key(&g0, 0, 4, 3, false);
    cache_entry *e = insert(&c, &g8, true); /* every slot >= 2 is dynamic */
    cache_lookup l = cai_cache_find(&c, &g1.key);
    cr_assert_eq(l.kind, LOOKUP_HIT, "a batch of 1 runs the dynamic graph");
    cr_assert_eq(l.entry, e);
    cr_assert_eq(cai_cache_find(&c, &g0.key).kind, LOOKUP_SHAPES, "a batch of 0 needs its own");
    cai_cache_clear(&c);
    free_key(&g8);
    free_key(&g1);
    free_key(&g0);
}

/* PyTorch marks a dim dynamic on its first change, 1 -> 2 included. */
Test(compiled_cache, one_to_two_turns_dynamic) {
    ca_cache c = {0};
    graph_key g1, g2, g3;
    make_key(&g1, 1, 4, 3, false);
    make_key(&g2, 2, 4, 3, false);
    make_key(&g3, 3, 4, 3, false);
    cache_entry *first = insert(&c, &g1, false);
    cache_lookup l = cai_cache_find(&c, &g2.key);
    cr_assert_eq(l.kind, LOOKUP_SHAPES);
    uint8_t changed[256] = {0};
    cr_assert_lt(l.leaf->n_slots, 256);
    cr_assert_gt(cai_cache_mark_changed(l.leaf, &g2.key, changed), 0);
    for (int s = 0; s < l.leaf->n_slots; s++)
        cr_assert_eq(l.leaf->dynamic[s], changed[s], "slot %d: a change from 1 is dynamic", s);
    cache_entry *e;
    TU_OK(cai_cache_add_entry(l.leaf, &g2.key, &freed, count_free, &e));
    cr_assert_gt(e->n_symbols, 0, "the batch dim is a symbol");
    cr_assert_eq(cai_cache_find(&c, &g3.key).entry, e, "batch 3 hits the dynamic entry");
    cr_assert_eq(cai_cache_find(&c, &g1.key).kind, LOOKUP_HIT, "batch 1 hits");
    cr_assert(cai_cache_find(&c, &g1.key).entry == e || cai_cache_find(&c, &g1.key).entry == first);
    cai_cache_clear(&c);
    free_key(&g1);
    free_key(&g2);
    free_key(&g3);
}

Test(compiled_cache, equal_dims_share_a_symbol) {
    /* captured with batch == in == 8: the dynamic entry assumes they stay equal */
    ca_cache c = {0};
    graph_key sq, g12, g16;
    make_key(&sq, 8, 8, 3, false);
    make_key(&g12, 12, 12, 3, false);
    make_key(&g16, 16, 12, 3, false);
    insert(&c, &sq, true);
    cr_assert_eq(cai_cache_find(&c, &g12.key).kind, LOOKUP_HIT, "still equal: hit");
    cr_assert_eq(cai_cache_find(&c, &g16.key).kind, LOOKUP_SHAPES, "no longer equal: miss");
    cai_cache_clear(&c);
    free_key(&sq);
    free_key(&g12);
    free_key(&g16);
}

/* The compiled backward gives slots that need not be equal symbols of their own
 * (cai_cache_entry_set_classes): then batch == in at capture no longer ties them. */
Test(compiled_cache, classes_untie_equal_dims) {
    ca_cache c = {0};
    graph_key sq, g16;
    make_key(&sq, 8, 8, 3, false);
    make_key(&g16, 16, 12, 3, false);
    cache_entry *e = insert(&c, &sq, true);
    int n = sq.key.n_sizes;
    int32_t cls[256], scratch[256];
    cr_assert_lt(n, 256);
    int n_before = e->n_symbols;
    for (int s = 0; s < n; s++) /* each symbolic slot its own class */
        cls[s] = e->symbol[s] >= 0 ? s : -1;
    cai_cache_entry_set_classes(e, &sq.key, cls, scratch);
    cr_assert_gt(e->n_symbols, n_before, "more symbols than duck sizing gave");
    for (int s = 0; s < n; s++)
        cr_assert(cls[s] < 0 || e->first_slot[e->symbol[s]] == s);
    cr_assert_eq(cai_cache_find(&c, &g16.key).entry, e, "batch 16, in 12: still a hit");
    cai_cache_clear(&c);
    free_key(&sq);
    free_key(&g16);
}

Test(compiled_cache, clear_frees_every_compiled_payload) {
    ca_cache c = {0};
    graph_key a, b, b16;
    make_key(&a, 8, 4, 3, false);
    make_key(&b, 8, 4, 3, true);
    make_key(&b16, 16, 4, 3, true);
    freed = 0;
    insert(&c, &a, false);
    insert(&c, &b, false);
    insert(&c, &b16, false);
    cai_cache_clear(&c);
    cr_assert_eq(freed, 3);
    cr_assert_null(c.root.child);
    free_key(&a);
    free_key(&b);
    free_key(&b16);
}

/* The graph of make_key, built without asserting, for the allocation-failure sweep. */
static ca_status make_key_status(graph_key *g) {
    memset(g, 0, sizeof *g);
    ca_status st = ca_randn(CA_FLOAT32, TU_SHAPE(8, 4), &g->t[0]);
    if (st == CA_OK)
        st = ca_randn(CA_FLOAT32, TU_SHAPE(3, 4), &g->t[1]);
    if (st == CA_OK)
        st = ca_tensor_set_requires_grad(g->t[1], true);
    if (st == CA_OK)
        st = ca_linear(g->t[0], g->t[1], NULL, &g->t[2]);
    if (st == CA_OK)
        st = ca_sum(g->t[2], 0, NULL, false, &g->t[3]);
    if (st == CA_OK)
        st = ca_ones(CA_FLOAT32, 0, NULL, &g->t[5]);
    if (st != CA_OK)
        return st;
    ca_node *root = g->t[3]->grad_fn;
    if ((st = cai_walk_graph(&g->walk, &root, 1)) != CA_OK)
        return st;
    key_request req = {.n_roots = 1, .roots = &root, .seeds = &g->t[5]};
    return cai_key_collect_walk(&g->key, &g->walk, &req);
}

/* Allocation failure anywhere in an insertion leaves a cache that still works. */
static ca_status insert_scenario(void) {
    ca_cache c = {0};
    graph_key g;
    ca_status st = make_key_status(&g);
    cache_lookup l = {0};
    cache_leaf *leaf;
    cache_entry *e;
    if (st == CA_OK) {
        l = cai_cache_find(&c, &g.key);
        st = cai_cache_leaf_for(&c, &g.key, &l, false, &leaf);
    }
    if (st == CA_OK)
        st = cai_cache_add_entry(leaf, &g.key, &freed, count_free, &e);
    if (st == CA_OK && cai_cache_find(&c, &g.key).kind != LOOKUP_HIT)
        st = CA_STATUS_INTERNAL;
    cai_cache_clear(&c);
    free_key(&g);
    return st;
}

Test(compiled_cache, allocation_failure_while_inserting_is_clean) {
    tu_oom_every_allocation("cache insert", insert_scenario);
}
