/* test_compiled_key.c - the compiled backward's cache key: the same graph gives the same
 * key, a size change changes only size slots, a new op changes the bytes at its node,
 * tensors are deduplicated by identity, hooks are lifted by position, and the eager
 * engine's errors (freed or modified saved tensors) come out of key collection too. */
#include "autograd/compiled_key.h"
#include "testutil.h"

#include <string.h>

typedef struct {
    ca_walk walk;
    key_collect key;
    ca_tensor *seed;
} key_run;

/* Walk loss's graph and collect its key (accumulate mode, seed = ones). */
static void collect(key_run *r, ca_tensor *loss) {
    memset(r, 0, sizeof *r);
    ca_node *root = loss->grad_fn;
    cr_assert_not_null(root);
    TU_OK(ca_ones(loss->dtype, loss->ndim, loss->shape, &r->seed));
    TU_OK(cai_walk_graph(&r->walk, &root, 1));
    key_request req = {.n_roots = 1, .roots = &root, .seeds = &r->seed};
    TU_OK(cai_key_collect_walk(&r->key, &r->walk, &req));
}

static void key_run_free(key_run *r) {
    cai_key_collect_free(&r->key);
    cai_walk_free(&r->walk);
    ca_tensor_release(r->seed);
}

/* loss = sum(relu(x @ w^T)) for x [batch, 4], w [3, 4] */
static ca_tensor *mlp_loss(int64_t batch, ca_tensor *w, ca_tensor **keep) {
    ca_tensor *x = tu_randn(CA_FLOAT32, TU_SHAPE(batch, 4), false), *h, *a, *l;
    TU_OK(ca_linear(x, w, NULL, &h));
    TU_OK(ca_relu(h, &a));
    TU_OK(ca_sum(a, 0, NULL, false, &l));
    keep[0] = x;
    keep[1] = h;
    keep[2] = a;
    return l;
}

static bool same_bytes(const key_collect *a, const key_collect *b) {
    return a->n_bytes == b->n_bytes && memcmp(a->bytes, b->bytes, (size_t)a->n_bytes) == 0;
}

Test(compiled_key, same_graph_same_key) {
    ca_tensor *w = tu_randn(CA_FLOAT32, TU_SHAPE(3, 4), true), *k1[3], *k2[3];
    ca_tensor *l1 = mlp_loss(8, w, k1), *l2 = mlp_loss(8, w, k2);
    key_run r1, r2;
    collect(&r1, l1);
    collect(&r2, l2);
    cr_assert_eq(r1.key.n_nodes, 5, "sum, relu, mm, t, AccumulateGrad");
    cr_assert(same_bytes(&r1.key, &r2.key));
    cr_assert_eq(r1.key.n_sizes, r2.key.n_sizes);
    cr_assert_eq(memcmp(r1.key.sizes, r2.key.sizes, sizeof(int64_t) * (size_t)r1.key.n_sizes), 0);
    cr_assert_str_eq(cai_key_node_name(&r1.key, 0), "GraphRoot");
    cr_assert_str_eq(cai_key_node_name(&r1.key, 1), "SumBackward0");
    key_run_free(&r1);
    key_run_free(&r2);
    tu_release_n((ca_tensor *[]){w, l1, l2, k1[0], k1[1], k1[2], k2[0], k2[1], k2[2]}, 9);
}

Test(compiled_key, batch_change_changes_only_sizes) {
    ca_tensor *w = tu_randn(CA_FLOAT32, TU_SHAPE(3, 4), true), *k1[3], *k2[3];
    ca_tensor *l1 = mlp_loss(8, w, k1), *l2 = mlp_loss(16, w, k2);
    key_run r1, r2;
    collect(&r1, l1);
    collect(&r2, l2);
    cr_assert(same_bytes(&r1.key, &r2.key), "a size change must not change the key bytes");
    cr_assert_eq(r1.key.n_sizes, r2.key.n_sizes);
    int changed = 0;
    for (int s = 0; s < r1.key.n_sizes; s++)
        if (r1.key.sizes[s] != r2.key.sizes[s]) {
            cr_assert_eq(r1.key.sizes[s], 8);
            cr_assert_eq(r2.key.sizes[s], 16);
            changed++;
        }
    cr_assert_gt(changed, 1, "every batch-sized slot changes");
    key_run_free(&r1);
    key_run_free(&r2);
    tu_release_n((ca_tensor *[]){w, l1, l2, k1[0], k1[1], k1[2], k2[0], k2[1], k2[2]}, 9);
}

Test(compiled_key, new_op_changes_bytes_at_its_node) {
    ca_tensor *w = tu_randn(CA_FLOAT32, TU_SHAPE(3, 4), true), *k1[3], *k2[3], *t, *l3;
    ca_tensor *l1 = mlp_loss(8, w, k1), *l2 = mlp_loss(8, w, k2);
    TU_OK(ca_tanh(l2, &t)); /* one more node at the top */
    TU_OK(ca_mul_scalar(t, 2.0, &l3));
    key_run r1, r3;
    collect(&r1, l1);
    collect(&r3, l3);
    cr_assert_eq(r3.key.n_nodes, r1.key.n_nodes + 2);
    int len1, len3;
    const uint8_t *b1 = key_bytes(&r1.key, 1, &len1), *b3 = key_bytes(&r3.key, 1, &len3);
    cr_assert(len1 != len3 || memcmp(b1, b3, (size_t)len1) != 0,
              "NodeCall 1 is SumBackward0 in one walk and MulBackward1 in the other");
    cr_assert_str_eq(cai_key_node_name(&r3.key, 1), "MulBackward1");
    key_run_free(&r1);
    key_run_free(&r3);
    tu_release_n((ca_tensor *[]){w, l1, l2, t, l3, k1[0], k1[1], k1[2], k2[0], k2[1], k2[2]}, 11);
}

Test(compiled_key, scalars_go_into_the_bytes) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(5), true), *a, *b, *la, *lb;
    TU_OK(ca_leaky_relu(x, 0.1, &a));
    TU_OK(ca_leaky_relu(x, 0.2, &b));
    TU_OK(ca_sum(a, 0, NULL, false, &la));
    TU_OK(ca_sum(b, 0, NULL, false, &lb));
    key_run ra, rb;
    collect(&ra, la);
    collect(&rb, lb);
    cr_assert(!same_bytes(&ra.key, &rb.key), "negative_slope 0.1 vs 0.2 must differ");
    key_run_free(&ra);
    key_run_free(&rb);
    tu_release_n((ca_tensor *[]){x, a, b, la, lb}, 5);
}

Test(compiled_key, tensors_deduplicated_by_identity) {
    /* y = x * x saves x twice (self and other): one lifted tensor */
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(2, 3), true), *y, *l;
    TU_OK(ca_mul(x, x, &y));
    TU_OK(ca_sum(y, 0, NULL, false, &l));
    key_run r;
    collect(&r, l);
    int saved = 0;
    for (int i = 0; i < r.key.n_lifted; i++)
        saved += r.key.lifted[i].kind == LIFT_SAVED;
    cr_assert_eq(saved, 1, "x saved as self and other is lifted once, got %d", saved);
    key_run_free(&r);
    tu_release_n((ca_tensor *[]){x, y, l}, 3);
}

static ca_status noop_hook(ca_tensor *g, ca_tensor **repl, void *ctx) {
    return CA_OK;
}

Test(compiled_key, hooks_lifted_by_position_not_identity) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(3), true), *y1, *y2, *l1, *l2;
    TU_OK(ca_exp(x, &y1));
    TU_OK(ca_exp(x, &y2));
    int c1 = 0, c2 = 0; /* distinct contexts: identity differs, position is the same */
    TU_OK(ca_tensor_register_hook(y1, noop_hook, &c1, NULL, NULL));
    TU_OK(ca_tensor_register_hook(y2, noop_hook, &c2, NULL, NULL));
    TU_OK(ca_sum(y1, 0, NULL, false, &l1));
    TU_OK(ca_sum(y2, 0, NULL, false, &l2));
    key_run r1, r2;
    collect(&r1, l1);
    collect(&r2, l2);
    cr_assert(same_bytes(&r1.key, &r2.key));
    cr_assert_eq(r1.key.n_hooks, 1);
    cr_assert_eq(r1.key.hooks[0].hook->ctx, &c1);
    cr_assert_eq(r2.key.hooks[0].hook->ctx, &c2);
    cr_assert_eq(r1.key.hooks[0].node_call, 2, "ExpBackward0 is NodeCall 2");
    key_run_free(&r1);
    key_run_free(&r2);
    tu_release_n((ca_tensor *[]){x, y1, y2, l1, l2}, 5);
}

Test(compiled_key, slot_owners_name_node_field_and_dim) {
    ca_tensor *w = tu_randn(CA_FLOAT32, TU_SHAPE(3, 4), true), *k[3];
    ca_tensor *l = mlp_loss(8, w, k);
    key_run r;
    collect(&r, l);
    bool found = false; /* linear's mm saves its input x [8, 4]: the slot of dim 0 is its */
    for (int s = 0; s < r.key.n_sizes && !found; s++) {
        const key_slot_owner *o = &r.key.owners[s];
        char buf[128];
        found = o->node_call == 3 && o->kind == OWN_SAVED && o->dim == 0 && r.key.sizes[s] == 8 &&
                strcmp(cai_key_owner_str(&r.key, s, buf, sizeof buf),
                       "MmBackward0 (NodeCall 3) saved self dim 0") == 0;
    }
    cr_assert(found, "a slot owned by MmBackward0 (NodeCall 3) saved self dim 0");
    cr_assert_str_eq(cai_key_node_name(&r.key, 3), "MmBackward0");
    cr_assert_str_eq(cai_key_node_name(&r.key, 4), "TBackward0");
    key_run_free(&r);
    tu_release_n((ca_tensor *[]){w, l, k[0], k[1], k[2]}, 5);
}

/* Key collection does not check saved tensors: like eager, only the ones a rule reads are
 * checked (by the trace, and before every run of a cached graph), so a change in place of
 * a saved tensor no rule reads is no error. The compiled suite checks the error itself. */
Test(compiled_key, saved_tensors_are_not_checked_by_the_key) {
    ca_tensor *x = tu_randn(CA_FLOAT64, TU_SHAPE(3), true), *y, *l;
    TU_OK(ca_exp(x, &y));
    TU_OK(ca_sum(y, 0, NULL, false, &l));
    bool prev = ca_set_grad_enabled(false);
    TU_OK(ca_mul_scalar_(y, 2.0));
    ca_set_grad_enabled(prev);
    ca_node *root = l->grad_fn;
    ca_tensor *seed = tu_from(CA_FLOAT64, 0, NULL, (double[]){1}, false);
    ca_walk w = {0};
    key_collect k = {0};
    TU_OK(cai_walk_graph(&w, &root, 1));
    key_request req = {.n_roots = 1, .roots = &root, .seeds = &seed};
    TU_OK(cai_key_collect_walk(&k, &w, &req));
    /* ...but the eager check of that node still reports it */
    TU_FAILS(cai_node_check_saved(k.nodes[1], 0), CA_STATUS_AUTOGRAD, "ExpBackward0");
    cai_key_collect_free(&k);
    cai_walk_free(&w);
    tu_release_n((ca_tensor *[]){x, y, l, seed}, 4);
}
