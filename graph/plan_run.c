/* plan_run.c - the runner of a memory plan: one pass over the nodes in order, each node
 * run as its plan kind says.
 *
 * Sizes and offsets come first (plan_eval.c). Then inputs are bound to the caller's views,
 * views are computed from their input's, call-outs go to the caller's callbacks (hooks,
 * .grad, autograd.grad's outputs), fused groups run their loop at their anchor, and every
 * other node calls its kernel from codegen/ on its buffer in the arena. A run allocates
 * nothing; the first failure stops it, with a message for cai_graph_plan_error.
 */
#include "codegen/cast.h"
#include "graph/internal.h"
#include "graph/shape_rules.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * The run's context, its errors, and views
 */
typedef plan_run_ctx run_ctx; /* internal.h: one per thread of a run */

static pthread_mutex_t fail_mu = PTHREAD_MUTEX_INITIALIZER;

/* Record "value v (op): message" for cai_graph_plan_error; returns -1. Steps run side by
 * side may fail at once: the first message stays. */
int cai_run_fail(graph_plan *p, graph_val v, const char *fmt, ...) {
    const graph_node *x = cai_graph_node_at(p->g, v);
    pthread_mutex_lock(&fail_mu);
    if (p->err[0] == '\0') {
        int n = snprintf(p->err, sizeof p->err, "value %d (%s): ", v, cai_graph_op_name(x->a.op));
        va_list ap;
        va_start(ap, fmt);
        if (n >= 0 && (size_t)n < sizeof p->err)
            vsnprintf(p->err + n, sizeof p->err - (size_t)n, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&fail_mu);
    return -1;
}

int cai_run_kern_fail(graph_plan *p, graph_val v, int rc, const char *what) {
    if (rc == -2)
        return cai_run_fail(p, v, "%s: out of memory for kernel scratch", what);
    return cai_run_fail(p, v, "%s: the kernel failed (%d); dtype or arguments unsupported", what,
                        rc);
}

void cai_run_contig_strides(int nd, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    if (nd <= 0 || nd > KERN_MAX_DIMS)
        return;
    for (int d = nd - 1; d >= 0; d--) {
        strides[d] = s;
        s *= shape[d] > 1 ? shape[d] : 1;
    }
}

int64_t cai_run_numel(const graph_view *v) {
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++)
        n *= v->shape[d];
    return n;
}

bool cai_run_is_contig(const graph_view *v) {
    for (int d = 0; d < v->ndim; d++)
        if (v->shape[d] == 0) /* no elements: any strides read nothing (and the plan gave */
            return true;      /* a copy of it no buffer) */
    int64_t want = 1;
    for (int d = v->ndim - 1; d >= 0; d--) {
        if (v->shape[d] != 1 && v->strides[d] != want)
            return false;
        want *= v->shape[d];
    }
    return true;
}

static size_t esize(const graph_view *v) {
    return cai_kern_dtype_size(v->dtype);
}

/* The node's output over `data`, contiguous, with its evaluated shape. */
static void node_view(const graph_plan *p, const graph_node *x, void *data, graph_view *out) {
    out->data = data;
    out->dtype = x->dtype;
    out->ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++)
        out->shape[d] = p->val[x->shape[d]];
    cai_run_contig_strides(out->ndim, out->shape, out->strides);
}

static void *buf_ptr(const run_ctx *r, int32_t b) {
    CA_ASSERT(b >= -1 && b < r->p->n_bufs);
    return b >= 0 ? r->arena + r->p->offset[b] : NULL;
}

/* A temporary buffer, about to be written. Temporaries never share memory with values,
 * but steps run side by side may share one: the first step to use one holds the run's
 * temporaries lock until it finishes (plan_parallel.c lets it go). Copies are rare (an
 * operand whose strides the kernel cannot take), so the lock is rarely taken. */
void *cai_run_tmp(run_ctx *r, int32_t tmp) {
    if (r->tmp_mu && !r->holds_tmp) {
        pthread_mutex_lock(r->tmp_mu);
        r->holds_tmp = true;
    }
    return buf_ptr(r, tmp);
}

const graph_view *cai_run_in(const run_ctx *r, const graph_node *x, int k) {
    CA_ASSERT(k >= 0 && k < x->a.n_in && x->a.in[k] >= 0 && x->a.in[k] < r->step);
    return &r->p->views[x->a.in[k]];
}

int cai_run_copy_strided(void *dst, const int64_t *dst_strides, const graph_view *src) {
    kern_src s = {.data = src->data};
    memcpy(s.strides, src->strides, sizeof s.strides);
    return cai_kern_pointwise(KPW_COPY, src->dtype, src->dtype, src->ndim, src->shape, dst,
                              dst_strides, &s, 0, 0);
}

/* A contiguous copy of src into dst; *out becomes that copy. */
int cai_run_copy_contig(void *dst, const graph_view *src, graph_view *out) {
    graph_view c = *src;
    c.data = dst;
    cai_run_contig_strides(c.ndim, c.shape, c.strides);
    int rc = cai_run_copy_strided(dst, c.strides, src);
    *out = c;
    return rc;
}

int cai_run_fill_zero(const graph_view *out) {
    kern_src none = {.data = NULL};
    return cai_kern_pointwise(KPW_FILL, out->dtype, out->dtype, out->ndim, out->shape, out->data,
                              out->strides, &none, 0, 0);
}

/* src's strides per dim of `out` when broadcast to it (0 where it broadcasts). */
static void bcast_src(const graph_view *in, const graph_view *out, kern_src *s) {
    int lead = out->ndim - in->ndim;
    s->data = in->data;
    for (int i = 0; i < out->ndim; i++) {
        int d = i - lead;
        s->strides[i] = d < 0 || in->shape[d] != out->shape[i] ? 0 : in->strides[d];
    }
}

/* Strides that read (on, oshape, ostr) as nshape without copying, if they exist. Old dims
 * form runs that are contiguous among themselves; each run must be covered exactly by
 * consecutive new dims, which step through it row-major from the run's inner stride. */
static bool reshape_strides(const graph_view *in, graph_view *out) {
    int on = in->ndim, nn = out->ndim;
    const int64_t *oshape = in->shape, *ostr = in->strides;
    if (cai_run_numel(in) <= 1) {
        cai_run_contig_strides(nn, out->shape, out->strides);
        return true;
    }
    int nd = nn - 1;
    int64_t run = 1, covered = 1, base = ostr[on - 1];
    for (int od = on - 1; od >= 0; od--) {
        run *= oshape[od];
        if (od > 0 && (oshape[od - 1] == 1 || ostr[od - 1] == run * base))
            continue; /* the run goes on */
        while (nd >= 0 && (covered < run || out->shape[nd] == 1)) {
            out->strides[nd] = covered * base;
            covered *= out->shape[nd];
            nd--;
        }
        if (covered != run)
            return false;
        if (od > 0) {
            base = ostr[od - 1];
            run = covered = 1;
        }
    }
    return nd < 0;
}

/* ---------------------------------------------------------------------------------------
 * Nodes without kernels
 */
/* "f32[2, 3]" into buf (size >= 96). */
const char *cai_run_view_str(kern_dtype dt, int nd, const int64_t *shape, char *buf) {
    static const char *const names[] = {"f32", "f64", "i64", "b8"};
    size_t size = 96;
    int len = snprintf(buf, size, "%s[", (unsigned)dt <= KERN_BOOL ? names[dt] : "?");
    for (int d = 0; d < nd && len > 0 && (size_t)len < size; d++)
        len +=
            snprintf(buf + len, size - (size_t)len, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (len > 0 && (size_t)len < size)
        snprintf(buf + len, size - (size_t)len, "]");
    return buf;
}

bool cai_run_view_matches(const graph_view *v, kern_dtype dt, int nd, const int64_t *shape) {
    if (v->dtype != dt || v->ndim != nd)
        return false;
    for (int d = 0; d < nd; d++)
        if (v->shape[d] != shape[d])
            return false;
    return true;
}

static int bind_input(run_ctx *r, graph_val v, const graph_view *inputs) {
    const graph_node *x = cai_graph_node_at(r->p->g, v);
    graph_view want;
    node_view(r->p, x, NULL, &want);
    if (!inputs)
        return cai_run_fail(r->p, v, "input %lld is missing (inputs is NULL)",
                            (long long)x->a.i[0]);
    const graph_view *in = &inputs[x->a.i[0]];
    char b1[96], b2[96];
    if (!cai_run_view_matches(in, want.dtype, want.ndim, want.shape))
        return cai_run_fail(r->p, v, "input %lld is %s but the graph expects %s for these sizes",
                            (long long)x->a.i[0],
                            cai_run_view_str(in->dtype, in->ndim, in->shape, b1),
                            cai_run_view_str(want.dtype, want.ndim, want.shape, b2));
    r->p->views[v] = *in;
    return 0;
}

static int run_view(run_ctx *r, graph_val v) {
    const graph_node *x = cai_graph_node_at(r->p->g, v);
    const graph_view *in = cai_run_in(r, x, 0);
    graph_view *out = &r->p->views[v];
    node_view(r->p, x, in->data, out);
    int lead = out->ndim - in->ndim, d = (int)x->a.i[0];
    switch (x->a.op) {
    case GOP_EXPAND:
        for (int i = 0; i < out->ndim; i++)
            out->strides[i] =
                i < lead || in->shape[i - lead] != out->shape[i] ? 0 : in->strides[i - lead];
        break;
    case GOP_PERMUTE:
        for (int i = 0; i < out->ndim; i++)
            out->strides[i] = in->strides[x->a.perm[i]];
        break;
    case GOP_UNSQUEEZE:
        for (int i = 0, j = 0; i < out->ndim; i++)
            out->strides[i] =
                i == d ? (d < in->ndim ? in->shape[d] * in->strides[d] : 1) : in->strides[j++];
        break;
    case GOP_NARROW: {
        int64_t start = r->p->val[x->a.shape[0]], len = out->shape[d];
        long long end = (long long)start + (long long)len;
        if (start < 0 || end > in->shape[d])
            return cai_run_fail(r->p, v, "narrow %lld:%lld is past the end of dim %d (size %lld)",
                                (long long)start, end, d, (long long)in->shape[d]);
        memcpy(out->strides, in->strides, sizeof out->strides);
        out->data = (char *)in->data + start * in->strides[d] * (int64_t)esize(in);
        break;
    }
    default: /* GOP_SLICE */
        if (x->a.i[2] > in->shape[d])
            return cai_run_fail(r->p, v, "slice end %lld is past the end of dim %d (size %lld)",
                                (long long)x->a.i[2], d, (long long)in->shape[d]);
        memcpy(out->strides, in->strides, sizeof out->strides);
        out->strides[d] *= x->a.i[3];
        out->data = (char *)in->data + x->a.i[1] * in->strides[d] * (int64_t)esize(in);
        break;
    }
    return 0;
}

/* reshape and contiguous: a view when the strides allow, else a copy into the buffer. */
static int run_maybe_view(run_ctx *r, graph_val v) {
    const graph_node *x = cai_graph_node_at(r->p->g, v);
    const graph_view *in = cai_run_in(r, x, 0);
    graph_view *out = &r->p->views[v];
    node_view(r->p, x, in->data, out);
    if (x->a.op == GOP_RESHAPE && cai_run_numel(in) != cai_run_numel(out))
        return cai_run_fail(r->p, v,
                            "reshape: %lld elements cannot be viewed as %lld (the sizes this "
                            "graph was compiled for no longer hold)",
                            (long long)cai_run_numel(in), (long long)cai_run_numel(out));
    bool ok = x->a.op == GOP_RESHAPE ? reshape_strides(in, out) : cai_run_is_contig(in);
    if (ok)
        return 0;
    graph_view c;
    int rc = cai_run_copy_contig(buf_ptr(r, r->p->nodes[v].buf), in, &c);
    if (rc)
        return cai_run_kern_fail(r->p, v, rc, "copy");
    node_view(r->p, x, c.data, out);
    return 0;
}

static int run_hook(run_ctx *r, graph_val v) {
    const graph_node *x = cai_graph_node_at(r->p->g, v);
    const graph_view *in = cai_run_in(r, x, 0);
    graph_view repl;
    memset(&repl, 0, sizeof repl);
    int rc = r->cb->call ? r->cb->call(r->cb->ctx, x, in, &repl) : 0;
    if (rc)
        return rc;
    if (!repl.data) {
        r->p->views[v] = *in;
        return 0;
    }
    char b1[96], b2[96];
    if (!cai_run_view_matches(&repl, in->dtype, in->ndim, in->shape))
        return cai_run_fail(
            r->p, v,
            "hook %lld returned a gradient %s for a gradient %s; a hook must keep the "
            "dtype and shape",
            (long long)x->a.i[0], cai_run_view_str(repl.dtype, repl.ndim, repl.shape, b1),
            cai_run_view_str(in->dtype, in->ndim, in->shape, b2));
    r->p->views[v] = repl;
    return 0;
}

static int run_call(run_ctx *r, graph_val v) {
    const graph_node *x = cai_graph_node_at(r->p->g, v);
    if (!r->cb->call || (r->p->nodes[v].fold >= 0 && r->p->nodes[v].folded))
        return 0; /* no callbacks, or the GEMM already wrote this .grad */
    const graph_view *in = x->a.op == GOP_POST_HOOK || x->a.n_in == 0 ? NULL : cai_run_in(r, x, 0);
    return r->cb->call(r->cb->ctx, x, in, NULL);
}

/* A call-out's result: the callback hands over its value, of the node's dtype and shape. */
static int run_result(run_ctx *r, graph_val v) {
    const graph_node *x = cai_graph_node_at(r->p->g, v);
    graph_view want, got;
    node_view(r->p, x, NULL, &want);
    memset(&got, 0, sizeof got);
    int rc = r->cb->call ? r->cb->call(r->cb->ctx, x, NULL, &got) : 0;
    if (rc)
        return rc;
    char b1[96], b2[96];
    if (!got.data)
        return cai_run_fail(r->p, v, "call-out %lld gave no result %lld", (long long)x->a.i[0],
                            (long long)x->a.i[1]);
    if (!cai_run_view_matches(&got, want.dtype, want.ndim, want.shape))
        return cai_run_fail(r->p, v, "call-out %lld's result %lld is %s but the graph expects %s",
                            (long long)x->a.i[0], (long long)x->a.i[1],
                            cai_run_view_str(got.dtype, got.ndim, got.shape, b1),
                            cai_run_view_str(want.dtype, want.ndim, want.shape, b2));
    r->p->views[v] = got;
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Kernels: pointwise, reductions, copies
 */
static int run_pw(run_ctx *r, const graph_node *x, const graph_view *out) {
    kern_pw_op k = (kern_pw_op)x->a.i[0];
    kern_src src[GRAPH_MAX_IN];
    memset(src, 0, sizeof src);
    for (int i = 0; i < x->a.n_in; i++)
        bcast_src(cai_run_in(r, x, i), out, &src[i]);
    int cond = cai_kern_pw_cond_input(k);
    kern_dtype cond_dt = cond >= 0 ? cai_run_in(r, x, cond)->dtype : out->dtype;
    return cai_kern_pointwise(k, out->dtype, cond_dt, out->ndim, out->shape, out->data,
                              out->strides, src, x->a.p[0], x->a.p[1]);
}

/* x * (p / N), or x * (p * N) when i[0] is set: N is evaluated for this run, so one graph
 * serves every size. */
static int run_scale_size(run_ctx *r, const graph_node *x, const graph_view *out) {
    kern_src src;
    bcast_src(cai_run_in(r, x, 0), out, &src);
    double n = (double)r->p->val[x->a.shape[0]];
    return cai_kern_pointwise(KPW_MUL_S, out->dtype, out->dtype, out->ndim, out->shape, out->data,
                              out->strides, &src, x->a.i[0] ? x->a.p[0] * n : x->a.p[0] / n, 0);
}

static int run_sum(run_ctx *r, const graph_node *x, const graph_view *out) {
    const graph_view *in = cai_run_in(r, x, 0);
    return cai_kern_reduce(KRED_SUM, in->dtype, in->ndim, in->shape, in->data, in->strides,
                           (uint32_t)x->a.i[0], out->data, NULL);
}

static int run_sum_to(run_ctx *r, const graph_node *x, const graph_view *out) {
    const graph_view *in = cai_run_in(r, x, 0);
    uint32_t mask = cai_graph_sum_to_mask(in->ndim, in->shape, out->ndim, out->shape);
    return cai_kern_reduce(KRED_SUM, in->dtype, in->ndim, in->shape, in->data, in->strides, mask,
                           out->data, NULL);
}

static int run_slice_backward(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out) {
    int d = (int)x->a.i[0];
    const graph_view *in = cai_run_in(r, x, 0);
    int64_t start = r->p->val[x->a.i[1]], end = r->p->val[x->a.i[2]], step = x->a.i[3];
    if (start < 0 || end < start || end > out->shape[d] ||
        in->shape[d] != cai_rule_slice_len(start, end, step))
        return cai_run_fail(r->p, v,
                            "slice %lld:%lld:%lld of dim %d (size %lld) does not take the "
                            "gradient's %lld elements",
                            (long long)start, (long long)end, (long long)step, d,
                            (long long)out->shape[d], (long long)in->shape[d]);
    int rc = cai_run_fill_zero(out);
    if (rc)
        return rc;
    int64_t strides[KERN_MAX_DIMS];
    memcpy(strides, out->strides, sizeof strides);
    strides[d] *= step;
    char *dst = (char *)out->data + start * out->strides[d] * (int64_t)esize(out);
    return cai_run_copy_strided(dst, strides, in);
}

static int run_cast(run_ctx *r, const graph_node *x, const graph_view *out) {
    const graph_view *in = cai_run_in(r, x, 0);
    if (cai_run_numel(in) == 0)
        return 0;
    kern_src s = {.data = in->data};
    memcpy(s.strides, in->strides, sizeof s.strides);
    cai_kern_cast(out->dtype, in->dtype, out->ndim, out->shape, out->data, out->strides, &s);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * matmul
 */

static int gemm_prep(run_ctx *r, graph_val v, const graph_view *in, int32_t tmp, int nb,
                     const int64_t *bshape, kern_mat_nd *o) {
    graph_view w = *in;
    int nd = w.ndim;
    memset(o, 0, sizeof *o);
    /* an operand cai_kern_gemm would pack with scratch memory is copied into a planned buffer */
    if (!cai_kern_gemm_unpacked(w.shape[nd - 2], w.shape[nd - 1], w.strides[nd - 2],
                                w.strides[nd - 1])) {
        if (tmp < 0)
            return cai_run_fail(r->p, v,
                                "an operand needs a copy but the plan has no buffer for it");
        int rc = cai_run_copy_contig(cai_run_tmp(r, tmp), in, &w);
        if (rc)
            return cai_run_kern_fail(r->p, v, rc, "matmul operand copy");
    }
    o->data = w.data;
    o->rs = w.strides[nd - 2];
    o->cs = w.strides[nd - 1];
    for (int i = 0; i < nb; i++) {
        int d = i - (nb - (nd - 2));
        o->bs[i] = d < 0 || (w.shape[d] == 1 && bshape[i] != 1) ? 0 : w.strides[d];
    }
    return 0;
}

/* out = a @ b, or out += a @ b when beta is 1 (out contiguous). */
static int run_matmul(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out,
                      double beta) {
    const graph_view *a = cai_run_in(r, x, 0), *b = cai_run_in(r, x, 1);
    int nb = out->ndim - 2;
    int64_t K = a->shape[a->ndim - (x->a.i[0] ? 2 : 1)];
    if (cai_run_numel(out) == 0)
        return 0;
    if (K == 0) /* an empty sum */
        return beta != 0.0 ? 0 : cai_run_fill_zero(out);
    const plan_node *pn = &r->p->nodes[v];
    kern_mat_nd A, B;
    if (gemm_prep(r, v, a, pn->tmp[0], nb, out->shape, &A) ||
        gemm_prep(r, v, b, pn->tmp[1], nb, out->shape, &B))
        return -1;
    int rc = cai_kern_gemm_nd(out->dtype, nb, out->shape, out->shape[nb], out->shape[nb + 1], K, &A,
                              x->a.i[0] != 0, &B, x->a.i[1] != 0, beta, out->data);
    return rc ? cai_run_kern_fail(r->p, v, rc, "matmul") : 0;
}

/* Whether w's bytes meet dst's (each taken as the span from its lowest to its highest
 * element). */
static bool views_overlap(const graph_view *w, const graph_view *dst) {
    const graph_view *vs[2] = {w, dst};
    uintptr_t lo[2], hi[2];
    for (int i = 0; i < 2; i++) {
        int64_t first = 0, last = 0, es = (int64_t)esize(vs[i]);
        if (cai_run_numel(vs[i]) == 0 || !vs[i]->data)
            return false;
        for (int d = 0; d < vs[i]->ndim; d++) {
            int64_t span = (vs[i]->shape[d] - 1) * vs[i]->strides[d];
            first += span < 0 ? span : 0;
            last += span > 0 ? span : 0;
        }
        lo[i] = (uintptr_t)vs[i]->data + (uintptr_t)(first * es);
        hi[i] = (uintptr_t)vs[i]->data + (uintptr_t)((last + 1) * es);
    }
    return lo[0] < hi[1] && lo[1] < hi[0];
}

/* Whether dst shares memory from outside the arena (inputs, hook results): the GEMM's
 * operands may be views of it. */
static bool target_is_read(const run_ctx *r, graph_val v, const graph_view *dst) {
    for (graph_val u = 0; u < v; u++) {
        int8_t k = r->p->nodes[u].kind;
        if ((k == PK_INPUT || k == PK_HOOK || k == PK_RESULT) &&
            views_overlap(&r->p->views[u], dst))
            return true;
    }
    return false;
}

/* Write the matmul v into the .grad dst (has: it holds a gradient already), or into its
 * own buffer when dst cannot take it as is. */
static int write_acc_target(run_ctx *r, graph_val v, const graph_node *x, graph_view *out,
                            const graph_view *dst, bool has) {
    plan_node *pa = &r->p->nodes[r->p->nodes[v].fold];
    bool fits = cai_run_view_matches(dst, out->dtype, out->ndim, out->shape);
    char b1[96], b2[96];
    if (!fits && !has)
        return cai_run_fail(r->p, v, "the new .grad is %s for a gradient %s",
                            cai_run_view_str(dst->dtype, dst->ndim, dst->shape, b1),
                            cai_run_view_str(out->dtype, out->ndim, out->shape, b2));
    int rc;
    if (fits && cai_run_is_contig(dst) && !target_is_read(r, v, dst)) {
        if ((rc = run_matmul(r, v, x, dst, has ? 1.0 : 0.0)) == 0) {
            pa->folded = true;
            *out = *dst;
        }
        return rc;
    }
    if ((rc = run_matmul(r, v, x, out, 0.0)) != 0 || has)
        return rc; /* the ACCUMULATE's call adds it, at its step */
    if ((rc = cai_run_copy_strided(dst->data, dst->strides, out)) != 0)
        return cai_run_kern_fail(r->p, v, rc, "copy into .grad");
    pa->folded = true;
    return 0;
}

/* A matmul whose ACCUMULATE may be folded in (find_folds): ask for the .grad and write
 * it, GEMM beta = 1 onto a gradient that is there, 0 into a fresh one. */
static int run_matmul_acc(run_ctx *r, graph_val v, const graph_node *x, graph_view *out) {
    const plan_node *pn = &r->p->nodes[v];
    CA_ASSERT(pn->fold > v && pn->fold < r->p->n_nodes); /* its ACCUMULATE runs later */
    plan_node *pa = &r->p->nodes[pn->fold];
    pa->folded = false;
    if (!r->cb->accumulate_target)
        return run_matmul(r, v, x, out, 0.0);
    graph_view want = *out, dst;
    want.data = NULL;
    memset(&dst, 0, sizeof dst);
    bool has = false;
    const graph_node *acc = cai_graph_node_at(r->p->g, pn->fold);
    int rc = r->cb->accumulate_target(r->cb->ctx, acc, &want, &dst, &has);
    if (rc)
        return rc;
    if (!dst.data) /* declined */
        return run_matmul(r, v, x, out, 0.0);
    rc = write_acc_target(r, v, x, out, &dst, has);
    if (r->cb->accumulate_done)
        r->cb->accumulate_done(r->cb->ctx, acc);
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * Fused loops
 */

/* A whole fused group at its anchor v: inputs broadcast into the members' space, outputs
 * into their buffers, or the reduction's result into its buffer. */
static int run_fused(run_ctx *r, graph_val v) {
    graph_plan *p = r->p;
    CA_ASSERT(p->nodes[v].grp >= 0 && p->nodes[v].grp < p->n_groups);
    const plan_group *G = &p->groups[p->nodes[v].grp];
    CA_ASSERT(G->ok && G->anchor == v);
    graph_view space;
    node_view(p, cai_graph_node_at(p->g, G->first), NULL, &space);
    kern_src in[KERN_FUSED_MAX_INPUTS];
    for (int i = 0; i < G->prog.n_inputs; i++) {
        CA_ASSERT(G->in[i] >= 0 && G->in[i] < v);
        bcast_src(&p->views[G->in[i]], &space, &in[i]);
    }
    void *scratch = r->scratch;
    int rc;
    if (G->reduce >= 0) {
        const graph_node *x = cai_graph_node_at(p->g, G->reduce);
        graph_view *out = &p->views[G->reduce];
        node_view(p, x, buf_ptr(r, p->nodes[G->reduce].buf), out);
        uint32_t mask = x->a.op == GOP_SUM
                            ? (uint32_t)x->a.i[0]
                            : cai_graph_sum_to_mask(space.ndim, space.shape, out->ndim, out->shape);
        rc = cai_kern_fused_reduce_ws(&G->prog, space.dtype, space.ndim, space.shape, in, KRED_SUM,
                                      mask, out->data, scratch, p->scratch_bytes);
    } else {
        void *out[KERN_FUSED_MAX_OUTPUTS];
        const int64_t *out_strides[KERN_FUSED_MAX_OUTPUTS];
        for (int k = 0; k < G->n_out; k++) {
            graph_view *o = &p->views[G->out[k]];
            node_view(p, cai_graph_node_at(p->g, G->out[k]), buf_ptr(r, p->nodes[G->out[k]].buf),
                      o);
            out[k] = o->data;
            out_strides[k] = o->strides;
        }
        rc = cai_kern_fused_run_memo(&G->prog, space.dtype, space.ndim, space.shape, in, out,
                                     out_strides, scratch, p->scratch_bytes, G->memo);
    }
    return rc ? cai_run_kern_fail(p, v, rc, "fused loop") : 0;
}

/* ---------------------------------------------------------------------------------------
 * The run
 */
static int run_buffer(run_ctx *r, graph_val v) {
    const graph_node *x = cai_graph_node_at(r->p->g, v);
    graph_view *out = &r->p->views[v];
    node_view(r->p, x, buf_ptr(r, r->p->nodes[v].buf), out);
    int rc;
    switch (x->a.op) {
    case GOP_PW: rc = run_pw(r, x, out); break;
    case GOP_SUM: rc = run_sum(r, x, out); break;
    case GOP_SUM_TO: rc = run_sum_to(r, x, out); break;
    case GOP_SLICE_BACKWARD: rc = run_slice_backward(r, v, x, out); break;
    case GOP_ZEROS: rc = cai_run_fill_zero(out); break;
    case GOP_CAST: rc = run_cast(r, x, out); break;
    case GOP_SCALE_SIZE: rc = run_scale_size(r, x, out); break;
    case GOP_MATMUL:
        return r->p->nodes[v].fold >= 0 ? run_matmul_acc(r, v, x, out)
                                        : run_matmul(r, v, x, out, 0.0);
    case GOP_INDEX_ADD: return cai_run_index_add(r, v, x, out);
    case GOP_SCATTER_ADD: return cai_run_scatter_add(r, v, x, out);
    case GOP_INDEX_SELECT: return cai_run_index_select(r, v, x, out);
    case GOP_GATHER: return cai_run_gather(r, v, x, out);
    case GOP_NLL_BW: return cai_run_nll_bw(r, v, x, out);
    case GOP_INDEX_FILL: return cai_run_index_fill(r, v, x, out);
    case GOP_CUMSUM: return cai_run_cumsum(r, v, x, out);
    case GOP_TRI: return cai_run_tri(r, v, x, out);
    case GOP_CUMPROD: return cai_run_cumprod(r, v, x, out);
    case GOP_CUMPROD_BW: return cai_run_cumprod_bw(r, v, x, out);
    case GOP_IM2COL:
    case GOP_COL2IM: return cai_run_conv(r, v, x, out);
    case GOP_CONV2D:
    case GOP_CONV2D_WEIGHT_GRAD: return cai_run_conv2d(r, v, x, out);
    default: return cai_run_fail(r->p, v, "no kernel for this op");
    }
    if (rc == -1 && r->p->err[0])
        return -1; /* already described */
    return rc ? cai_run_kern_fail(r->p, v, rc, x->a.op == GOP_PW ? "pointwise" : "kernel") : 0;
}

int cai_graph_plan_run(graph_plan *p, const int64_t *slots, const graph_view *inputs, void *arena,
                       graph_callbacks cb) {
    return cai_graph_plan_run_timed(p, slots, inputs, arena, cb, NULL);
}

int cai_graph_plan_run_step(run_ctx *r, graph_val v) {
    switch (r->p->nodes[v].kind) {
    case PK_SKIP:
    case PK_INPUT: /* bound before the steps */
    case PK_FUSED_TMP:
    case PK_FUSED_OUT: return 0; /* computed where its group runs */
    case PK_VIEW: return run_view(r, v);
    case PK_MAYBE_VIEW: return run_maybe_view(r, v);
    case PK_HOOK: return run_hook(r, v);
    case PK_CALL: return run_call(r, v);
    case PK_RESULT: return run_result(r, v);
    case PK_FUSED_RUN: return run_fused(r, v);
    default: return run_buffer(r, v);
    }
}

/* One step at a time, in graph order; each step's time into step_ns when given. */
static int run_in_order(run_ctx *r, int64_t *step_ns) {
    graph_plan *p = r->p;
    for (graph_val v = 0; v < p->n_nodes; v++) {
        int8_t kind = p->nodes[v].kind;
        r->step = v;
        int64_t t0 = step_ns ? cai_kern_now_ns() : 0;
        int rc = cai_graph_plan_run_step(r, v);
        if (step_ns) /* steps that only bind or skip do no work: 0, so a chain's span is work */
            step_ns[v] =
                kind == PK_INPUT || kind == PK_SKIP || kind == PK_FUSED_TMP || kind == PK_FUSED_OUT
                    ? 0
                    : cai_kern_now_ns() - t0;
        if (rc)
            return rc;
    }
    return 0;
}

int cai_graph_plan_run_timed(graph_plan *p, const int64_t *slots, const graph_view *inputs,
                             void *arena, graph_callbacks cb, int64_t *step_ns) {
    if (!p)
        return -1;
    p->err[0] = '\0';
    cai_graph_plan_eval_sizes(p, slots);
    run_ctx r = {.p = p, .arena = arena, .cb = &cb, .scratch = (char *)arena + p->scratch_off};
    for (graph_val v = 0; v < p->n_nodes; v++) {
        if (p->nodes[v].kind != PK_INPUT)
            continue;
        r.step = v;
        int rc = bind_input(&r, v, inputs);
        if (rc)
            return rc;
    }
    p->last_side_by_side = false;
    if (step_ns) /* profiles time each step alone */
        return run_in_order(&r, step_ns);
    cai_graph_plan_check_blas(p);
    bool side_by_side = cai_graph_plan_pick_parallel(p);
    int64_t t0 = cai_kern_now_ns();
    bool ran = false;
    int rc = side_by_side ? cai_graph_plan_run_parallel(p, arena, &cb, &ran) : 0;
    if (!ran) { /* not side by side, or the pool or memory could not give it */
        side_by_side = false;
        rc = run_in_order(&r, NULL);
    }
    p->last_side_by_side = side_by_side;
    if (rc == 0)
        cai_graph_plan_note_time(p, side_by_side, cai_kern_now_ns() - t0);
    return rc;
}
