/* test_compiled_oom.c - Criterion suite `compiled_oom`: allocation failure at every
 * allocation of a GPT block's compiled backward (its compile on the miss, then its run),
 * the transformer-sized counterpart of test_compiled.c's MLP and chain scenarios. Each
 * failing run must end in CA_STATUS_NOMEM with nothing leaked (tu_oom_every_allocation
 * counts the live allocations), never in a silent eager fallback; the next backward must
 * work and give the eager engine's gradients.
 */
#include "testutil.h"

#include "autograd/internal.h"

#include <math.h>
#include <string.h>

enum { B = 2, T = 8, D = 16, H = 2, DH = D / H, N_LEAVES = 12 };

/* The block's forward from its leaves (x, then the parameters in the order below):
 * pre-LN causal self-attention and a GELU MLP, each added back to its input; the loss is
 * the mean square of the output. Intermediate values are released as it goes. */
static ca_status gpt_forward(ca_tensor *const *l, ca_tensor **loss) {
    ca_tensor *x = l[0], *ln1w = l[1], *ln1b = l[2], *wqkv = l[3], *bqkv = l[4];
    ca_tensor *wproj = l[5], *ln2w = l[6], *ln2b = l[7], *w1 = l[8], *b1 = l[9];
    ca_tensor *w2 = l[10], *b2 = l[11];
    ca_tensor *t[40] = {0};
    int n = 0;
    ca_status st = CA_OK;
#define STEP(call)                                                                                 \
    do {                                                                                           \
        if (st == CA_OK)                                                                           \
            st = (call);                                                                           \
    } while (0)
#define NEW (&t[n++])
    const int64_t dnorm[1] = {D}, heads[4] = {B, T, H, DH}, flat[3] = {B, T, D};
    const int64_t tt[2] = {T, T};
    ca_tensor **h = NEW, **qkv = NEW, *qkvs[3] = {0};
    STEP(ca_layer_norm(x, 1, dnorm, ln1w, ln1b, 1e-5, h));
    STEP(ca_linear(*h, wqkv, bqkv, qkv));
    for (int k = 0; k < 3; k++) { /* q, k, v: [B, H, T, DH] */
        ca_tensor **part = NEW, **r = NEW, **tr = NEW;
        STEP(ca_narrow(*qkv, 2, k * D, D, part));
        STEP(ca_reshape(*part, 4, heads, r));
        STEP(ca_transpose(*r, 1, 2, tr));
        qkvs[k] = *tr;
    }
    ca_tensor **kt = NEW, **att = NEW, **scaled = NEW, **ones = NEW, **low = NEW, **upper = NEW;
    ca_tensor **masked = NEW, **p = NEW, **y = NEW, **yt = NEW, **yf = NEW, **a = NEW, **x1 = NEW;
    STEP(ca_transpose(qkvs[1], -2, -1, kt));
    STEP(ca_matmul(qkvs[0], *kt, att));
    STEP(ca_mul_scalar(*att, 1.0 / sqrt((double)DH), scaled));
    STEP(ca_ones(CA_FLOAT32, 2, tt, ones));
    STEP(ca_tril(*ones, 0, low));
    STEP(ca_sub(*ones, *low, upper)); /* 1 above the diagonal: the future, masked */
    STEP(ca_masked_fill(*scaled, *upper, -INFINITY, masked));
    STEP(ca_softmax(*masked, -1, p));
    STEP(ca_matmul(*p, qkvs[2], y));
    STEP(ca_transpose(*y, 1, 2, yt));
    STEP(ca_reshape(*yt, 3, flat, yf));
    STEP(ca_linear(*yf, wproj, NULL, a));
    STEP(ca_add(x, *a, x1));
    ca_tensor **h2 = NEW, **f1 = NEW, **g = NEW, **f2 = NEW, **x2 = NEW, **sq = NEW;
    STEP(ca_layer_norm(*x1, 1, dnorm, ln2w, ln2b, 1e-5, h2));
    STEP(ca_linear(*h2, w1, b1, f1));
    STEP(ca_gelu(*f1, CA_GELU_NONE, g));
    STEP(ca_linear(*g, w2, b2, f2));
    STEP(ca_add(*x1, *f2, x2));
    STEP(ca_mul(*x2, *x2, sq));
    STEP(ca_mean(*sq, 0, NULL, false, loss));
#undef STEP
#undef NEW
    tu_release_n(t, n);
    return st;
}

static const int64_t *leaf_shape(int i, int *nd) {
    static const int64_t shapes[N_LEAVES][3] = {{B, T, D},  {D},     {D},        {3 * D, D},
                                                {3 * D},    {D, D},  {D},        {D},
                                                {4 * D, D}, {4 * D}, {D, 4 * D}, {D}};
    static const int nds[N_LEAVES] = {3, 1, 1, 2, 1, 2, 1, 1, 2, 1, 2, 1};
    *nd = nds[i];
    return shapes[i];
}

/* Make the leaves, run the forward and a compiled backward. */
static ca_status gpt_run(tu_sc_state *s, ca_tensor **leaves) {
    for (int i = 0; i < N_LEAVES; i++) {
        int nd;
        const int64_t *shape = leaf_shape(i, &nd);
        leaves[i] = tu_sc_randn(s, nd, shape, true);
    }
    ca_tensor **loss = tu_sc_slot(s);
    TU_SC(s, gpt_forward(leaves, loss));
    TU_SC(s, ca_compiled_autograd_enable(NULL));
    if (s->st == CA_OK) {
        s->st = ca_backward(*loss);
        ca_compiled_autograd_disable();
    }
    return s->st;
}

/* The compiled .grad of every leaf against ca_grad's eager gradients of a fresh forward. */
static void gpt_compare(ca_tensor *const *leaves, const char *when) {
    ca_tensor *loss, *g[N_LEAVES];
    cr_assert(!ca_compiled_autograd_enabled());
    TU_OK(gpt_forward(leaves, &loss));
    TU_OK(ca_grad(1, &loss, N_LEAVES, leaves, NULL, g));
    for (int i = 0; i < N_LEAVES; i++) {
        const ca_tensor *c = ca_tensor_grad(leaves[i]);
        cr_assert_not_null(c, "%s: leaf %d has no .grad", when, i);
        for (int64_t k = 0; k < ca_tensor_numel(g[i]); k++) {
            double want = tu_get(g[i], k), got = tu_get(c, k);
            cr_assert(fabs(got - want) <= 1e-5 * (1 + fabs(want)),
                      "%s: leaf %d [%lld]: compiled %g, eager %g", when, i, (long long)k, got,
                      want);
        }
    }
    tu_release_n(g, N_LEAVES);
    ca_tensor_release(loss);
}

static int runs_failed, silent_fallbacks;

static ca_status oom_gpt_scenario(void) {
    ca_compiled_autograd_reset();
    tu_sc_state s = {0};
    ca_tensor *leaves[N_LEAVES] = {0};
    ca_status st = gpt_run(&s, leaves);
    bool failed = tu_alloc_failed();
    tu_alloc_disarm();
    ca_compiled_counters c;
    ca_compiled_autograd_counters(&c);
    if (st == CA_OK && failed && c.eager_fallbacks > 0)
        silent_fallbacks++;
    if (st == CA_OK) {
        gpt_compare(leaves, "a compiled GPT-block backward that succeeded");
    } else if (leaves[N_LEAVES - 1]) { /* the forward ran: the backward failed */
        cr_assert_eq(st, CA_STATUS_NOMEM, "a failed allocation gave %s: %s", ca_status_name(st),
                     ca_last_error());
        runs_failed++;
        tu_sc_state s2 = {0};
        ca_tensor *l2[N_LEAVES] = {0};
        cr_assert_eq(gpt_run(&s2, l2), CA_OK, "the clean run after a failed one failed: %s",
                     ca_last_error());
        gpt_compare(l2, "the clean GPT-block run after a failed one");
        tu_sc_release(&s2);
    }
    tu_sc_release(&s);
    ca_compiled_autograd_reset();
    return st;
}

Test(compiled_oom, gpt_block_at_every_allocation) {
    runs_failed = silent_fallbacks = 0;
    tu_oom_every_allocation("compiled GPT-block backward", oom_gpt_scenario);
    cr_assert_gt(runs_failed, 0, "no run failed in the compiled backward");
    cr_assert_eq(silent_fallbacks, 0, "%d failed allocations ran eagerly instead of failing",
                 silent_fallbacks);
}
