/* vision_encoder.c: the vision encoder's forward pass (HF Qwen2VisionTransformerPretrainedModel.forward /
 * Qwen2_5_VisionTransformerPretrainedModel.forward; docs/formats.md §2b "Vision graph", §3 "Vision 2-D
 * RoPE"). Activations live in big [n_tokens][dim] backend buffers (vision_ctx.h) so that every step
 * is one backend operation over all tokens (backend.h): one matmul per linear layer, one call per
 * norm, rotary, activation or row gather. The host computes what depends on the grid alone (window
 * order, rotary tables, as pool tasks) and uploads it. Every backend operation gives results that do
 * not depend on the number of threads. Qwen2.5-VL: tokens are permuted into window order right
 * after the patch embedding (with their rotary positions) and the merger's output rows are put back
 * in grid order, as HF does with window_index. */
#include "model/vision_ctx.h"

#include <math.h>
#include <string.h>

/* ---- host tables -------------------------------------------------------------------------------- */

typedef struct rotary_job {
    const oc_vision_ctx *c;
    int32_t unit, merge, merged_w;
    int64_t n_rows, rows_per_task;
} rotary_job;

/* Rotary tables for processing position r: merge-order position -> (row, col) of the patch grid
 * (HF rot_pos_emb); the first half of the frequencies rotate with the row, the second half with
 * the column. */
static void rotary_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const rotary_job *j = ctx;
    const oc_vision_ctx *c = j->c;
    int32_t q = c->m->hp.head_dim / 4;
    int64_t r0 = task * j->rows_per_task, r1 = OC_MIN(r0 + j->rows_per_task, j->n_rows);
    for (int64_t r = r0; r < r1; r++) {
        int32_t mi = c->order_h[r / j->unit], sub = (int32_t)(r % j->unit);
        int32_t py = (mi / j->merged_w) * j->merge + sub / j->merge;
        int32_t px = (mi % j->merged_w) * j->merge + sub % j->merge;
        float *cs = c->cos_h + (size_t)r * (size_t)(2 * q), *sn = c->sin_h + (size_t)r * (size_t)(2 * q);
        for (int32_t k = 0; k < q; k++) {
            float ay = (float)py * c->inv_freq[k], ax = (float)px * c->inv_freq[k];
            cs[k] = cosf(ay);
            sn[k] = sinf(ay);
            cs[q + k] = cosf(ax);
            sn[q + k] = sinf(ax);
        }
    }
}

/* ---- the forward pass --------------------------------------------------------------------------- */

/* The layer's head patterns, or NULL when all are dense (the engine's cheapest path). */
static const oc_head_pattern *layer_patterns(const oc_stack_plan *plan, int32_t il, int32_t n_heads) {
    if (!plan || plan->shape.n_layers == 0) return NULL;
    const oc_head_pattern *p = plan->heads + (size_t)il * (size_t)n_heads;
    for (int32_t h = 0; h < n_heads; h++)
        if (p[h].kind != OC_PATTERN_DENSE) return p;
    return NULL;
}

typedef struct fwd {
    oc_vision_ctx *c;
    oc_backend *be;
    const oc_vision_hparams *hp;
    int64_t n;              /* patches */
    int32_t n_windows;
    const oc_stack_plan *plan;
    oc_attn_stats *stats;
    oc_error *err;
} fwd;

/* y rows [n_tok][w.n_out] = x rows [n_tok][w.n_in] W^T (+ bias), both from element offsets. */
static oc_status linear(fwd *F, const oc_bw *w, const oc_bt *x, int64_t x_off, oc_bt *y, int64_t y_off, int64_t n_tok,
                        const oc_bt *bias) {
    return F->be->ops->matmul(F->be, w, x, x_off, w->w.n_in, y, y_off, w->w.n_out, n_tok, oc_bt_opt(bias), F->err);
}

/* x += res (res may be NULL); h = norm(x) with (w, b): LayerNorm when b is present, else RMSNorm. */
static oc_status norm(fwd *F, const oc_bt *res, const oc_bt *w, const oc_bt *b) {
    oc_vision_ctx *c = F->c;
    oc_norm_kind kind = b->n_bytes ? OC_NORM_LAYER : OC_NORM_RMS;
    return F->be->ops->norm(F->be, kind, &c->x, 0, res, 0, &c->h, 0, oc_bt_opt(w), oc_bt_opt(b), F->n, F->hp->hidden,
                            F->hp->eps, F->err);
}

/* Tests: the residual stream through a host view. */
static oc_status debug(fwd *F, int32_t layer) {
    oc_vision_ctx *c = F->c;
    if (!c->debug_fn) return OC_OK;
    size_t n_bytes = sizeof(float) * (size_t)F->n * (size_t)F->hp->hidden;
    const float *x = F->be->ops->map_read(F->be, &c->x, 0, n_bytes, F->err);
    if (!x) return F->err ? F->err->status : OC_ERR_DEVICE;
    c->debug_fn(c->debug_user, layer, x, (int32_t)F->n, F->hp->hidden);
    F->be->ops->unmap(F->be, &c->x, x);
    return OC_OK;
}

/* The calibration hook: q|k|v through a host view, and the layer's segments. */
static oc_status observe(fwd *F, int32_t il) {
    oc_vision_ctx *c = F->c;
    const oc_vision_hparams *hp = F->hp;
    int full = hp->kind == OC_VISION_QWEN2VL || (il + 1) % hp->n_wa_pattern == 0;
    oc_token_span whole = { 0, (int32_t)F->n };
    size_t n_bytes = sizeof(float) * 3 * (size_t)F->n * (size_t)hp->hidden;
    const float *qkv = F->be->ops->map_read(F->be, &c->w, 0, n_bytes, F->err);
    if (!qkv) return F->err ? F->err->status : OC_ERR_DEVICE;
    c->observe_fn(c->observe_user, il, qkv, (int32_t)F->n, full ? &whole : c->windows, full ? 1 : F->n_windows);
    F->be->ops->unmap(F->be, &c->w, qkv);
    return OC_OK;
}

/* h = attention(q, k, v) with q|k|v the thirds of w. */
static oc_status attention(fwd *F, int32_t il) {
    const oc_vision_hparams *hp = F->hp;
    oc_vision_ctx *c = F->c;
    int full = hp->kind == OC_VISION_QWEN2VL || (il + 1) % hp->n_wa_pattern == 0;
    int64_t nd = F->n * hp->hidden;
    oc_attn_call a;
    memset(&a, 0, sizeof a);
    a.n_q = a.n_kv = (int32_t)F->n;
    a.n_head = a.n_head_kv = hp->n_heads;
    a.head_dim = hp->head_dim;
    a.k_off = nd;
    a.v_off = 2 * nd;
    a.kv_dtype = OC_DTYPE_F32;
    a.q_stride_token = a.k_stride_token = a.v_stride_token = a.out_stride_token = hp->hidden;
    a.q_stride_head = a.k_stride_head = a.v_stride_head = a.out_stride_head = hp->head_dim;
    a.scale = (float)pow((double)hp->head_dim, -0.5);   /* HF: self.scale = head_dim ** -0.5 */
    a.mask = full ? OC_ATTN_BIDIRECTIONAL : OC_ATTN_SEGMENTS;
    a.segments = c->windows;
    a.n_segments = F->n_windows;
    a.patterns = layer_patterns(F->plan, il, hp->n_heads);
    /* bf16 products where the CPU's BF16 path is on (attn_call.h), unless the file asks for f32
     * weights: F16 / BF16 matrices take matmul.h's BF16 path under the same rule, quantized ones the
     * int8 path (Q8_0: 3e-2 in test_vision), both coarser than bf16 attention (test_attn: 2e-2) */
    a.bf16_products = c->layers[il].q.w.dtype != OC_DTYPE_F32;
    oc_attn_bt t = { &c->w, &c->w, &c->w, &c->h };   /* q | k | v are the thirds of w */
    return F->be->ops->attention(F->be, &a, &t, F->stats, F->err);
}

/* One block, entered with h = norm1(x) and left with x = block output, h = next norm(x). */
static oc_status block(fwd *F, int32_t il) {
    oc_vision_ctx *c = F->c;
    const oc_vision_layer_bt *ly = &c->layers[il];
    const oc_vision_hparams *hp = F->hp;
    oc_backend *be = F->be;
    int64_t n = F->n, nd = n * hp->hidden, nf = n * hp->ffn;
    int32_t half = hp->head_dim / 2;
    oc_status s;
    /* q, k, v [n][hidden] = h W^T + b in the thirds of w; rotate q and k */
    if ((s = linear(F, &ly->q, &c->h, 0, &c->w, 0, n, &ly->q_b)) || (s = linear(F, &ly->k, &c->h, 0, &c->w, nd, n, &ly->k_b)) ||
        (s = linear(F, &ly->v, &c->h, 0, &c->w, 2 * nd, n, &ly->v_b)) ||
        (s = be->ops->rope(be, &c->w, 0, n, hp->n_heads, hp->head_dim, half, &c->cos_t, &c->sin_t, F->err)) ||
        (s = be->ops->rope(be, &c->w, nd, n, hp->n_heads, hp->head_dim, half, &c->cos_t, &c->sin_t, F->err)))
        return s;
    if (c->observe_fn && (s = observe(F, il))) return s;
    /* h = attention; w = h Wo^T + b; x += w; h = norm2(x) */
    if ((s = attention(F, il)) || (s = linear(F, &ly->o, &c->h, 0, &c->w, 0, n, &ly->o_b)) ||
        (s = norm(F, &c->w, &ly->ln2_w, &ly->ln2_b)))
        return s;
    if (hp->kind == OC_VISION_QWEN2VL) {        /* fc1 -> QuickGELU -> fc2 */
        if ((s = linear(F, &ly->up, &c->h, 0, &c->w, 0, n, &ly->up_b)) ||
            (s = be->ops->act(be, &c->w, 0, nf, OC_ACT_GELU_QUICK, F->err)))
            return s;
    } else {                                    /* down(silu(gate) * up) */
        if ((s = linear(F, &ly->gate, &c->h, 0, &c->w, 0, n, &ly->gate_b)) ||
            (s = linear(F, &ly->up, &c->h, 0, &c->w, nf, n, &ly->up_b)) ||
            (s = be->ops->glu(be, &c->w, 0, &c->w, nf, nf, OC_ACT_SILU, F->err)))
            return s;
    }
    if ((s = linear(F, &ly->down, &c->w, 0, &c->h, 0, n, &ly->down_b))) return s;
    int last = il + 1 == hp->n_layers;          /* x += mlp; h = next norm1, or the merger's ln_q */
    const oc_vision_layer_bt *next = last ? NULL : &c->layers[il + 1];
    if ((s = norm(F, &c->h, last ? &c->post_ln_w : &next->ln1_w, last ? &c->post_ln_b : &next->ln1_b))) return s;
    return debug(F, il);
}

/* Window order (2.5-VL) or the identity, the inverse order, and the rotary tables, on the host;
 * then uploaded (copies nothing on the CPU backend: the buffers are bound to these arrays). */
static oc_status tables(fwd *F, int32_t grid_w) {
    oc_vision_ctx *c = F->c;
    const oc_vision_hparams *hp = F->hp;
    int32_t merge = hp->merge_size, unit = merge * merge, mw = grid_w / merge, nm = (int32_t)(F->n / unit);
    if (hp->kind == OC_VISION_QWEN25VL) {
        F->n_windows = oc_vision_window_order(nm / mw, mw, hp->window_size_px / merge / hp->patch_size, unit,
                                              c->order_h, c->windows);
    } else {
        for (int32_t i = 0; i < nm; i++) c->order_h[i] = i;
        c->windows[0].start = 0;
        c->windows[0].end = (int32_t)F->n;
        F->n_windows = 1;
    }
    for (int32_t i = 0; i < nm; i++) c->inv_h[c->order_h[i]] = i;
    rotary_job rot = { c, unit, merge, mw, F->n, OC_MAX((int64_t)1, (int64_t)16384 / OC_MAX(hp->head_dim / 2, hp->hidden)) };
    oc_pool_run(c->pool, (rot.n_rows + rot.rows_per_task - 1) / rot.rows_per_task, rotary_task, &rot);
    oc_backend *be = F->be;
    size_t idx_bytes = sizeof(int32_t) * (size_t)nm, tab_bytes = sizeof(float) * (size_t)F->n * (size_t)(hp->head_dim / 2);
    oc_status s;
    if ((s = be->ops->write(be, &c->order, 0, c->order_h, idx_bytes, F->err)) ||
        (s = be->ops->write(be, &c->inv_order, 0, c->inv_h, idx_bytes, F->err)) ||
        (s = be->ops->write(be, &c->cos_t, 0, c->cos_h, tab_bytes, F->err)))
        return s;
    return be->ops->write(be, &c->sin_t, 0, c->sin_h, tab_bytes, F->err);
}

/* The arguments both entry points take, checked before anything is bound or computed. */
static oc_status check_args(const oc_vision_ctx *ctx, const float *pixels, int32_t grid_h, int32_t grid_w,
                            const void *out, oc_error *err) {
    if (!ctx || !pixels || !out) return oc_fail(err, OC_ERR_INVALID, "vision: NULL argument");
    int32_t merge = ctx->m->hp.merge_size;
    if (grid_h < merge || grid_w < merge || grid_h % merge || grid_w % merge)
        return oc_fail(err, OC_ERR_INVALID, "vision: grid %dx%d is not a positive multiple of the merge size %d",
                       (int)grid_h, (int)grid_w, (int)merge);
    if ((int64_t)grid_h * grid_w > ctx->max_patches)
        return oc_fail(err, OC_ERR_RANGE, "vision: image of %dx%d patches exceeds the context's %d", (int)grid_h,
                       (int)grid_w, (int)ctx->max_patches);
    return OC_OK;
}

/* The forward pass (arguments checked) into rows out_row.. of out: the context's own out, bound to
 * the caller's memory, or another instance's buffer on the same device. */
static oc_status encode_pass(oc_vision_ctx *ctx, const float *pixels, int32_t grid_h, int32_t grid_w,
                             const oc_stack_plan *plan, oc_bt *out, int64_t out_row, oc_attn_stats *stats,
                             oc_error *err);

/* The pass, then the attention counts a device deferred (backend.h attn_stats_flush). */
static oc_status encode(oc_vision_ctx *ctx, const float *pixels, int32_t grid_h, int32_t grid_w,
                        const oc_stack_plan *plan, oc_bt *out, int64_t out_row, oc_attn_stats *stats,
                        oc_error *err) {
    oc_status st = encode_pass(ctx, pixels, grid_h, grid_w, plan, out, out_row, stats, err);
    oc_error e2;
    oc_backend *be = ctx->be;
    oc_status fs = be->ops->attn_stats_flush ? be->ops->attn_stats_flush(be, st ? &e2 : err) : OC_OK;
    return st ? st : fs;
}

static oc_status encode_pass(oc_vision_ctx *ctx, const float *pixels, int32_t grid_h, int32_t grid_w,
                             const oc_stack_plan *plan, oc_bt *out, int64_t out_row, oc_attn_stats *stats,
                             oc_error *err) {
    const oc_vision_hparams *hp = &ctx->m->hp;
    int32_t unit = hp->merge_size * hp->merge_size;
    oc_status s;
    fwd F = { ctx, ctx->be, hp, (int64_t)grid_h * grid_w, 1, plan, stats, err };
    oc_backend *be = ctx->be;
    int64_t nm = F.n / unit;
    size_t pix_bytes = sizeof(float) * (size_t)F.n * (size_t)oc_vision_patch_dim(hp);
    int64_t out_off = out_row * hp->proj_dim;
    if ((s = tables(&F, grid_w)) || (s = be->ops->bind(be, &ctx->pixels, pixels, pix_bytes, err)) ||
        (s = be->ops->write(be, &ctx->pixels, 0, pixels, pix_bytes, err)))
        return s;
    /* patch embedding (HF Conv3d as one GEMM); 2.5-VL: then rows into window order */
    if (hp->kind == OC_VISION_QWEN25VL) {
        if ((s = linear(&F, &ctx->patch, &ctx->pixels, 0, &ctx->h, 0, F.n, NULL)) ||
            (s = be->ops->gather_rows(be, &ctx->x, 0, &ctx->h, 0, &ctx->order, F.n, hp->hidden, unit, err)))
            return s;
    } else if ((s = linear(&F, &ctx->patch, &ctx->pixels, 0, &ctx->x, 0, F.n, NULL))) {
        return s;
    }
    if ((s = debug(&F, -1)) || (s = norm(&F, NULL, &ctx->layers[0].ln1_w, &ctx->layers[0].ln1_b))) return s;
    for (int32_t il = 0; il < hp->n_layers; il++)
        if ((s = block(&F, il))) return s;
    /* merger: h = ln_q(x) viewed as [nm][unit * hidden] -> mlp.0 -> GELU (erf) -> mlp.2 */
    if ((s = linear(&F, &ctx->mm0, &ctx->h, 0, &ctx->w, 0, nm, &ctx->mm0_b)) ||
        (s = be->ops->act(be, &ctx->w, 0, nm * ctx->mm0.w.n_out, OC_ACT_GELU_ERF, err)))
        return s;
    if (hp->kind == OC_VISION_QWEN2VL) return linear(&F, &ctx->mm2, &ctx->w, 0, out, out_off, nm, &ctx->mm2_b);
    if ((s = linear(&F, &ctx->mm2, &ctx->w, 0, &ctx->h, 0, nm, &ctx->mm2_b))) return s;   /* back to grid order */
    return be->ops->gather_rows(be, out, out_off, &ctx->h, 0, &ctx->inv_order, nm, hp->proj_dim, 1, err);
}

oc_status oc_vision_encode(oc_vision_ctx *ctx, const float *pixels, int32_t grid_h, int32_t grid_w,
                           const oc_stack_plan *plan, float *out, oc_attn_stats *stats, oc_error *err) {
    oc_status s = check_args(ctx, pixels, grid_h, grid_w, out, err);
    if (s) return s;
    oc_backend *be = ctx->be;
    int32_t unit = ctx->m->hp.merge_size * ctx->m->hp.merge_size;
    size_t out_bytes = sizeof(float) * (size_t)((int64_t)grid_h * grid_w / unit) * (size_t)ctx->m->hp.proj_dim;
    if ((s = be->ops->bind(be, &ctx->out, out, out_bytes, err)) ||
        (s = encode(ctx, pixels, grid_h, grid_w, plan, &ctx->out, 0, stats, err)))
        return s;
    return be->ops->read(be, &ctx->out, 0, out, out_bytes, err);
}

oc_status oc_vision_encode_to(oc_vision_ctx *ctx, const float *pixels, int32_t grid_h, int32_t grid_w,
                              const oc_stack_plan *plan, oc_bt *dst, int64_t dst_row, oc_attn_stats *stats,
                              oc_error *err) {
    oc_status s = check_args(ctx, pixels, grid_h, grid_w, dst, err);
    if (s) return s;
    if (dst_row < 0) return oc_fail(err, OC_ERR_INVALID, "vision: negative row %lld", (long long)dst_row);
    return encode(ctx, pixels, grid_h, grid_w, plan, dst, dst_row, stats, err);
}
