/* plan_run_ops.c - the runners of the ops whose kernels read their inputs contiguous or
 * follow indices: index_add, scatter_add, index_select, gather, index_fill, the scans' derivatives,
 * im2col, col2im and conv2d's, and nll_loss's derivative (called from plan_run.c's run_buffer).
 */
#include "graph/internal.h"
#include "graph/shape_rules.h"

#include <string.h>

typedef plan_run_ctx run_ctx;

/* in, or a contiguous copy of it in the temporary buffer tmp. */
static int contiguous_input(run_ctx *r, graph_val v, const graph_view *in, int32_t tmp,
                            graph_view *out) {
    *out = *in;
    if (cai_run_is_contig(in))
        return 0;
    if (tmp < 0)
        return cai_run_fail(r->p, v, "an input needs a copy but the plan has no buffer for it");
    int rc = cai_run_copy_contig(cai_run_tmp(r, tmp), in, out);
    return rc ? cai_run_kern_fail(r->p, v, rc, "input copy") : 0;
}

static int index_fail(run_ctx *r, graph_val v, const char *op, int64_t pos, int64_t val, int dim,
                      int64_t size) {
    return cai_run_fail(
        r->p, v,
        "%s: index %lld at position %lld is out of range for dim %d of size %lld; valid "
        "indices are in [0, %lld)",
        op, (long long)val, (long long)pos, dim, (long long)size, (long long)size);
}

int cai_run_index_add(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out) {
    const plan_node *pn = &r->p->nodes[v];
    graph_view idx, src;
    int d = (int)x->a.i[0], rc = cai_run_fill_zero(out);
    if (rc)
        return cai_run_kern_fail(r->p, v, rc, "fill");
    if (contiguous_input(r, v, cai_run_in(r, x, 0), pn->tmp[0], &idx) ||
        contiguous_input(r, v, cai_run_in(r, x, 1), pn->tmp[1], &src))
        return -1;
    if (cai_run_numel(&src) == 0)
        return 0;
    int64_t outer, n, inner, bad_pos = -1, bad_val = 0;
    cai_kern_split_dim(out->ndim, out->shape, d, &outer, &n, &inner);
    rc = cai_kern_index_add(out->dtype, outer, n, inner, out->data, idx.data, cai_run_numel(&idx),
                            src.data, &bad_pos, &bad_val);
    if (rc == -1 && bad_pos >= 0)
        return index_fail(r, v, "index_add", bad_pos, bad_val, d, n);
    return rc ? cai_run_kern_fail(r->p, v, rc, "index_add") : 0;
}

/* index_select and gather: both inputs contiguous (copies in the plan's temporaries), the
 * kernel checks every index against the dim's size. */
int cai_run_index_select(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out) {
    const plan_node *pn = &r->p->nodes[v];
    graph_view src, idx;
    int d = (int)x->a.i[0];
    if (contiguous_input(r, v, cai_run_in(r, x, 0), pn->tmp[0], &src) ||
        contiguous_input(r, v, cai_run_in(r, x, 1), pn->tmp[1], &idx))
        return -1;
    if (cai_run_numel(out) == 0)
        return 0;
    int64_t outer, n, inner, bad_pos = -1, bad_val = 0;
    cai_kern_split_dim(src.ndim, src.shape, d, &outer, &n, &inner);
    int rc = cai_kern_index_select(out->dtype, outer, n, inner, src.data, idx.data,
                                   cai_run_numel(&idx), out->data, &bad_pos, &bad_val);
    if (rc == -1 && bad_pos >= 0)
        return index_fail(r, v, "index_select", bad_pos, bad_val, d, n);
    return rc ? cai_run_kern_fail(r->p, v, rc, "index_select") : 0;
}

/* gather reads x as [outer, n, inner] of the index's other sizes: x cut down to them (a
 * view, copied contiguous). */
int cai_run_gather(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out) {
    const plan_node *pn = &r->p->nodes[v];
    graph_view src, idx, cut = *cai_run_in(r, x, 0);
    int d = (int)x->a.i[0];
    if (contiguous_input(r, v, cai_run_in(r, x, 1), pn->tmp[1], &idx))
        return -1;
    for (int k = 0; k < cut.ndim; k++) {
        if (k == d)
            continue;
        if (idx.shape[k] > cut.shape[k])
            return cai_run_fail(r->p, v,
                                "gather: the index is larger than the input at dim %d (%lld > "
                                "%lld)",
                                k, (long long)idx.shape[k], (long long)cut.shape[k]);
        cut.shape[k] = idx.shape[k];
    }
    if (contiguous_input(r, v, &cut, pn->tmp[0], &src))
        return -1;
    if (cai_run_numel(out) == 0)
        return 0;
    int64_t outer, n, inner, bad_pos = -1, bad_val = 0;
    cai_kern_split_dim(src.ndim, src.shape, d, &outer, &n, &inner);
    int rc = cai_kern_gather(out->dtype, outer, n, inner, src.data, idx.data, idx.shape[d],
                             out->data, &bad_pos, &bad_val);
    if (rc == -1 && bad_pos >= 0)
        return index_fail(r, v, "gather", bad_pos, bad_val, d, n);
    return rc ? cai_run_kern_fail(r->p, v, rc, "gather") : 0;
}

/* The index covers only a corner of the output in the kept dims: scatter into a block of
 * the index's size, then place the block. */
static int scatter_corner(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out,
                          const graph_view *idx, graph_view *blk) {
    int d = (int)x->a.i[0];
    *blk = *out;
    bool corner = false;
    for (int k = 0; k < out->ndim; k++) {
        if (k == d)
            continue;
        if (idx->shape[k] > out->shape[k])
            return cai_run_fail(r->p, v,
                                "scatter_add: the index is larger than the output at dim %d "
                                "(%lld > %lld)",
                                k, (long long)idx->shape[k], (long long)out->shape[k]);
        blk->shape[k] = idx->shape[k];
        corner = corner || idx->shape[k] != out->shape[k];
    }
    if (!corner)
        return 0;
    int32_t tmp = r->p->nodes[v].tmp[2];
    if (tmp < 0)
        return cai_run_fail(r->p, v, "scatter_add needs a block but the plan has none");
    blk->data = cai_run_tmp(r, tmp);
    cai_run_contig_strides(blk->ndim, blk->shape, blk->strides);
    return cai_run_fill_zero(blk);
}

int cai_run_scatter_add(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out) {
    const plan_node *pn = &r->p->nodes[v];
    graph_view idx, src, blk;
    int d = (int)x->a.i[0], rc = cai_run_fill_zero(out);
    if (rc)
        return cai_run_kern_fail(r->p, v, rc, "fill");
    if (contiguous_input(r, v, cai_run_in(r, x, 0), pn->tmp[0], &idx) ||
        contiguous_input(r, v, cai_run_in(r, x, 1), pn->tmp[1], &src) ||
        scatter_corner(r, v, x, out, &idx, &blk))
        return -1;
    if (cai_run_numel(&src) == 0)
        return 0;
    int64_t outer, n, inner, bad_pos = -1, bad_val = 0;
    cai_kern_split_dim(blk.ndim, blk.shape, d, &outer, &n, &inner);
    rc = cai_kern_scatter_add(out->dtype, outer, n, inner, blk.data, idx.data,
                              idx.ndim > 0 ? idx.shape[d] : 1, src.data, &bad_pos, &bad_val);
    if (rc == -1 && bad_pos >= 0)
        return index_fail(r, v, "scatter_add", bad_pos, bad_val, d, n);
    if (rc)
        return cai_run_kern_fail(r->p, v, rc, "scatter_add");
    if (blk.data != out->data && (rc = cai_run_copy_strided(out->data, out->strides, &blk)) != 0)
        return cai_run_kern_fail(r->p, v, rc, "scatter_add block copy");
    return 0;
}

/* x with p[0] at the index along dim i[0]: a copy of x, then the fill. */
int cai_run_index_fill(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out) {
    graph_view idx;
    int d = (int)x->a.i[0], rc = cai_run_copy_strided(out->data, out->strides, cai_run_in(r, x, 0));
    if (rc)
        return cai_run_kern_fail(r->p, v, rc, "copy");
    if (contiguous_input(r, v, cai_run_in(r, x, 1), r->p->nodes[v].tmp[1], &idx))
        return -1;
    int64_t outer, n, inner, bad_pos = -1, bad_val = 0;
    cai_kern_split_dim(out->ndim, out->shape, d, &outer, &n, &inner);
    rc = cai_kern_index_fill(out->dtype, outer, n, inner, out->data, idx.data, cai_run_numel(&idx),
                             x->a.p[0], &bad_pos, &bad_val);
    if (rc == -1 && bad_pos >= 0)
        return cai_run_fail(
            r->p, v,
            "index_fill: index %lld at position %lld is out of range for dim %d of size "
            "%lld",
            (long long)bad_val, (long long)bad_pos, d, (long long)n);
    return rc ? cai_run_kern_fail(r->p, v, rc, "index_fill") : 0;
}

/* running sums along i[0] (from the end when i[1]): a copy of x, then the sums in place */
int cai_run_cumsum(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out) {
    int rc = cai_run_copy_strided(out->data, out->strides, cai_run_in(r, x, 0));
    if (rc)
        return cai_run_kern_fail(r->p, v, rc, "copy");
    int64_t outer, n, inner;
    cai_kern_split_dim(out->ndim, out->shape, (int)x->a.i[0], &outer, &n, &inner);
    rc = cai_kern_cumsum(out->dtype, outer, n, inner, out->data, out->data, x->a.i[1] != 0);
    return rc ? cai_run_kern_fail(r->p, v, rc, "cumsum") : 0;
}

/* tril / triu: a contiguous copy, then the kernel in place */
int cai_run_tri(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out) {
    int rc = cai_run_copy_strided(out->data, out->strides, cai_run_in(r, x, 0));
    if (rc)
        return cai_run_kern_fail(r->p, v, rc, "copy");
    int64_t rows = out->shape[out->ndim - 2], cols = out->shape[out->ndim - 1];
    int64_t numel = cai_run_numel(out), batch = rows * cols > 0 ? numel / (rows * cols) : 0;
    rc = cai_kern_tri(out->dtype, batch, rows, cols, x->a.i[0], x->a.i[1] != 0, out->data,
                      out->data);
    return rc ? cai_run_kern_fail(r->p, v, rc, "tri") : 0;
}

/* running products along dim i[0], from a contiguous x */
int cai_run_cumprod(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out) {
    graph_view in;
    if (contiguous_input(r, v, cai_run_in(r, x, 0), r->p->nodes[v].tmp[0], &in))
        return -1;
    int64_t outer, n, inner;
    cai_kern_split_dim(out->ndim, out->shape, (int)x->a.i[0], &outer, &n, &inner);
    int rc = cai_kern_cumprod(out->dtype, outer, n, inner, in.data, out->data);
    return rc ? cai_run_kern_fail(r->p, v, rc, "cumprod") : 0;
}

/* cumprod's derivative from x, cumprod(x) and g, each made contiguous when it is not */
int cai_run_cumprod_bw(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out) {
    const plan_node *pn = &r->p->nodes[v];
    graph_view in[3];
    for (int k = 0; k < 3; k++)
        if (contiguous_input(r, v, cai_run_in(r, x, k), pn->tmp[k], &in[k]))
            return -1;
    int64_t outer, n, inner;
    cai_kern_split_dim(out->ndim, out->shape, (int)x->a.i[0], &outer, &n, &inner);
    int rc = cai_kern_cumprod_backward(out->dtype, outer, n, inner, in[0].data, in[1].data,
                                       in[2].data, out->data);
    return rc ? cai_run_kern_fail(r->p, v, rc, "cumprod_backward") : 0;
}

/* im2col and col2im: the geometry from the image side's shape and the packed params. */
static void conv_geom(const graph_node *x, const int64_t *img, kern_conv_geom *cg) {
    int64_t p[GRAPH_CONV_NPARAMS];
    cai_graph_conv_unpack(x->a.i, p);
    *cg = (kern_conv_geom){.n = img[0],
                           .c = img[1],
                           .h = img[2],
                           .w = img[3],
                           .kh = p[0],
                           .kw = p[1],
                           .sh = p[2],
                           .sw = p[3],
                           .ph = p[4],
                           .pw = p[5],
                           .dh = p[6],
                           .dw = p[7],
                           .ph_end = p[8],
                           .pw_end = p[9],
                           .groups = x->a.i[3],
                           .flip = cai_graph_conv_layout(x->a.i) & CAI_CONV_COLS_FLIP};
    cg->oh = cai_kern_conv_out_size(cg->h, cg->kh, cg->sh, cg->ph + cg->ph_end, cg->dh);
    cg->ow = cai_kern_conv_out_size(cg->w, cg->kw, cg->sw, cg->pw + cg->pw_end, cg->dw);
}

int cai_run_conv(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out) {
    const graph_view *in = cai_run_in(r, x, 0);
    kern_conv_geom cg;
    int rc;
    if (x->a.op == GOP_IM2COL) {
        int perm[4];
        int64_t cs[4]; /* out's strides in [N, G, K, L] order, whatever its layout */
        cai_conv_cols_perm(cai_graph_conv_layout(x->a.i), perm);
        for (int d = 0; d < 4; d++)
            cs[perm[d]] = out->strides[d];
        conv_geom(x, in->shape, &cg);
        rc = cai_kern_im2col(out->dtype, &cg, in->data, in->strides, out->data, cs);
    } else {
        conv_geom(x, out->shape, &cg);
        int64_t want[4] = {cg.n, cg.groups, cg.c / cg.groups * cg.kh * cg.kw, cg.oh * cg.ow};
        char b1[96], b2[96];
        if (!cai_run_view_matches(in, in->dtype, 4, want))
            return cai_run_fail(r->p, v, "col2im: columns %s do not fit the output (%s expected)",
                                cai_run_view_str(in->dtype, in->ndim, in->shape, b1),
                                cai_run_view_str(in->dtype, 4, want, b2));
        rc = cai_kern_col2im(out->dtype, &cg, in->data, in->strides, out->data);
    }
    return rc ? cai_run_kern_fail(r->p, v, rc, cai_graph_op_name(x->a.op)) : 0;
}

/* conv2d and its weight gradient: the image read through its strides, the weight or the
 * gradient made contiguous where it is not (plan.c's take_temps). The sizes are checked
 * here, where they are concrete: the graph's shapes may leave channel counts symbolic. */
int cai_run_conv2d(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out) {
    bool fwd = x->a.op == GOP_CONV2D;
    int k = fwd ? 1 : 0;
    const graph_view *img = cai_run_in(r, x, fwd ? 0 : 1);
    graph_view dense;
    if (contiguous_input(r, v, cai_run_in(r, x, k), r->p->nodes[v].tmp[k], &dense))
        return -1;
    kern_conv_geom cg;
    conv_geom(x, img->shape, &cg);
    int64_t O = out->shape[fwd ? 1 : 0], G = cg.groups;
    int64_t w[4] = {O, G > 0 ? cg.c / G : 0, cg.kh, cg.kw}, y[4] = {cg.n, O, cg.oh, cg.ow};
    char b1[96], b2[96];
    const graph_view *weight = fwd ? &dense : out, *grad = fwd ? out : &dense;
    if (G < 1 || cg.c % G != 0 || O % G != 0 || !cai_run_view_matches(weight, out->dtype, 4, w) ||
        !cai_run_view_matches(grad, out->dtype, 4, y))
        return cai_run_fail(r->p, v, "weight %s and output %s do not fit the input %s",
                            cai_run_view_str(weight->dtype, weight->ndim, weight->shape, b1),
                            cai_run_view_str(grad->dtype, grad->ndim, grad->shape, b2),
                            cai_run_view_str(img->dtype, img->ndim, img->shape, (char[96]){0}));
    int rc = fwd ? cai_kern_conv2d(out->dtype, &cg, img->data, img->strides, dense.data, O, 0.0,
                                   out->data)
                 : cai_kern_conv2d_weight_grad(out->dtype, &cg, img->data, img->strides, dense.data,
                                               O, out->data);
    return rc ? cai_run_kern_fail(r->p, v, rc, cai_graph_op_name(x->a.op)) : 0;
}

/* The element offset of row-major index i of view v. */
static int64_t offset_of(const graph_view *v, int64_t i) {
    int64_t off = 0;
    for (int d = v->ndim - 1; d >= 0; d--) {
        off += (i % v->shape[d]) * v->strides[d];
        i /= v->shape[d];
    }
    return off;
}

/* Zeros with -g (/ total_weight for mean; per element for reduction none) at each
 * target class; ignored targets stay 0. */
int cai_run_nll_bw(run_ctx *r, graph_val v, const graph_node *x, const graph_view *out) {
    const graph_view *g = cai_run_in(r, x, 0), *t = cai_run_in(r, x, 1), *tw = cai_run_in(r, x, 2);
    int rc = cai_run_fill_zero(out);
    if (rc)
        return cai_run_kern_fail(r->p, v, rc, "fill");
    int64_t nd = out->ndim, N = nd >= 2 ? out->shape[0] : 1, C = out->shape[nd >= 2 ? 1 : 0];
    int64_t inner = 1, red = x->a.i[0], ignore = x->a.i[1];
    for (int d = 2; d < nd; d++)
        inner *= out->shape[d];
    double scale = red == GRAPH_REDUCTION_MEAN ? 1.0 / kern_load(tw->dtype, tw->data, 0) : 1.0;
    for (int64_t i = 0; i < N * inner; i++) {
        int64_t k = ((const int64_t *)t->data)[offset_of(t, i)];
        if (k == ignore)
            continue;
        if (k < 0 || k >= C)
            return cai_run_fail(
                r->p, v,
                "nll_loss backward: target %lld at position %lld is out of range for "
                "%lld classes",
                (long long)k, (long long)i, (long long)C);
        double gv = kern_load(g->dtype, g->data, red == GRAPH_REDUCTION_NONE ? offset_of(g, i) : 0);
        kern_store(out->dtype, out->data, ((i / inner) * C + k) * inner + i % inner, -gv * scale);
    }
    return 0;
}
