/* vision.c: the vision encoder's forward pass (HF Qwen2VisionTransformerPretrainedModel.forward /
 * Qwen2_5_VisionTransformerPretrainedModel.forward; formats.md §2b "Vision graph", §3 "Vision 2-D
 * RoPE"). Activations live in big [n_tokens][dim] buffers so that every linear layer is one
 * oc_matmul call; the per-row work between them (norms, residual adds, rotary, activations) runs
 * as pool tasks over row chunks. Every row is computed by exactly one task in a fixed order, so the
 * result does not depend on the number of threads. Qwen2.5-VL: tokens are permuted into window
 * order right after the patch embedding (with their rotary positions) and the merger's output rows
 * are put back in grid order, as HF does with window_index. */
#include "vision_model.h"

#include <math.h>
#include <string.h>

#include "nn.h"

struct oc_vision_ctx {
    const oc_vision_model *m;
    oc_allocator alloc;
    oc_pool *pool;
    oc_isa isa;
    int32_t max_patches;
    oc_matmul_ctx *mm;
    void *block;                  /* every buffer below, one allocation */
    size_t block_bytes;
    float *x;                     /* [n][hidden] residual stream */
    float *h;                     /* [n][hidden] normed input / attention output / fc2 output;
                                     also [n/unit][proj] merger output (2.5-VL) */
    float *w;                     /* q|k|v [3][n][hidden]; or MLP [n][ffn] (x2 for 2.5-VL) */
    float *cos_t, *sin_t;         /* [n][head_dim / 2] rotary tables, processing order */
    float *inv_freq;              /* [head_dim / 4] */
    int32_t *order;               /* [n / unit] merged-token index per processing position */
    oc_token_span *windows;       /* [n / unit] */
    void *attn_scratch;
    size_t attn_scratch_bytes;
    oc_vision_debug_fn debug_fn;
    void *debug_user;
};

/* ---- buffer layout ------------------------------------------------------------------------------ */

typedef struct layout {
    size_t x, h, w, cos_t, sin_t, inv_freq, order, windows, attn, total, attn_bytes;
} layout;

static int take(size_t *off, size_t n_bytes, size_t *at) {
    size_t a;
    *at = *off;
    if (!oc_add_size(*off, n_bytes, &a) || !oc_add_size(a, OC_MEM_ALIGN - 1, &a)) return 0;
    *off = a & ~(size_t)(OC_MEM_ALIGN - 1);
    return 1;
}

static int floats(size_t a, size_t b, size_t c, size_t *out) {
    size_t t;
    return oc_mul_size(a, b, &t) && oc_mul_size(t, c, &t) && oc_mul_size(t, sizeof(float), out);
}

static int plan_layout(const oc_vision_hparams *hp, int32_t max_patches, int n_threads, layout *L) {
    size_t n = (size_t)max_patches, d = (size_t)hp->hidden, f = (size_t)hp->ffn;
    size_t unit = (size_t)hp->merge_size * (size_t)hp->merge_size, nm = n / unit + 1;
    size_t bx, bh, bh2, bw, bw2, bcs, off = 0;
    size_t n_mlp = hp->kind == OC_VISION_QWEN25VL ? 2 : 1;
    if (!floats(n, d, 1, &bx) || !floats(nm, (size_t)hp->proj_dim, 1, &bh2) || !floats(n, d, 3, &bw) ||
        !floats(n, f, n_mlp, &bw2) || !floats(n, (size_t)hp->head_dim / 2, 1, &bcs))
        return 0;
    bh = OC_MAX(bx, bh2);
    bw = OC_MAX(bw, bw2);
    oc_attn_dims dims = { max_patches, max_patches, hp->n_heads, hp->n_heads, hp->head_dim };
    L->attn_bytes = oc_attn_scratch_bytes(&dims, n_threads);
    if (!L->attn_bytes) return 0;
    return take(&off, bx, &L->x) && take(&off, bh, &L->h) && take(&off, bw, &L->w) && take(&off, bcs, &L->cos_t) &&
           take(&off, bcs, &L->sin_t) && take(&off, (size_t)hp->head_dim / 4 * sizeof(float), &L->inv_freq) &&
           take(&off, nm * sizeof(int32_t), &L->order) && take(&off, nm * sizeof(oc_token_span), &L->windows) &&
           take(&off, L->attn_bytes, &L->attn) && (L->total = off, 1);
}

static int64_t max_n_in(const oc_vision_hparams *hp) {
    int64_t md = (int64_t)hp->hidden * hp->merge_size * hp->merge_size;
    return OC_MAX(OC_MAX((int64_t)oc_vision_patch_dim(hp), (int64_t)hp->hidden), OC_MAX((int64_t)hp->ffn, md));
}

size_t oc_vision_ctx_bytes(const oc_vision_model *m, int32_t max_patches, int n_threads) {
    if (!m || max_patches < 1 || n_threads < 1) return 0;
    layout L;
    if (!plan_layout(&m->hp, max_patches, n_threads, &L)) return 0;
    size_t mm = 0, t;   /* the matmul scratch of the hungriest ISA table that runs here */
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        const oc_matmul_kernels *k = oc_matmul_kernels_for((oc_isa)isa);
        size_t b = k ? oc_matmul_scratch_bytes(k, n_threads, max_n_in(&m->hp), max_patches) : 0;
        if (k && !b) return 0;
        mm = OC_MAX(mm, b);
    }
    if (!oc_add_size(L.total, mm, &t) || !oc_add_size(t, sizeof(oc_vision_ctx), &t)) return 0;
    return t;
}

oc_status oc_vision_ctx_open(oc_vision_ctx **out, const oc_vision_model *m, int32_t max_patches, oc_pool *pool,
                             oc_isa isa, const oc_allocator *alloc, oc_error *err) {
    if (out) *out = NULL;
    if (!out || !m) return oc_fail(err, OC_ERR_INVALID, "vision: NULL argument");
    if (max_patches < 1) return oc_fail(err, OC_ERR_INVALID, "vision: max_patches %d must be >= 1", (int)max_patches);
    const oc_matmul_kernels *k = oc_matmul_kernels_for(isa);
    if (!k) return oc_fail(err, OC_ERR_UNSUPPORTED, "vision: ISA %s is not built or does not run here", oc_isa_name(isa));
    if (!alloc) alloc = oc_default_allocator();
    int n_threads = pool ? oc_pool_n_threads(pool) : 1;
    layout L;
    if (!plan_layout(&m->hp, max_patches, n_threads, &L))
        return oc_fail(err, OC_ERR_RANGE, "vision: scratch for %d patches overflows", (int)max_patches);
    oc_vision_ctx *c = oc_mem_calloc(alloc, sizeof *c);
    if (!c) return oc_fail(err, OC_ERR_NOMEM, "vision: out of memory");
    c->m = m;
    c->alloc = *alloc;
    c->pool = pool;
    c->isa = isa;
    c->max_patches = max_patches;
    c->block_bytes = L.total;
    c->block = oc_mem_alloc(alloc, L.total);
    if (!c->block) {
        oc_vision_ctx_close(c);
        return oc_fail(err, OC_ERR_NOMEM, "vision: out of memory for %zu bytes of scratch", L.total);
    }
    oc_status s = oc_matmul_ctx_open(&c->mm, k, pool, max_n_in(&m->hp), max_patches, alloc, err);
    if (s) {
        oc_vision_ctx_close(c);
        return s;
    }
    char *b = c->block;
    c->x = (float *)(b + L.x);
    c->h = (float *)(b + L.h);
    c->w = (float *)(b + L.w);
    c->cos_t = (float *)(b + L.cos_t);
    c->sin_t = (float *)(b + L.sin_t);
    c->inv_freq = (float *)(b + L.inv_freq);
    c->order = (int32_t *)(void *)(b + L.order);
    c->windows = (oc_token_span *)(void *)(b + L.windows);
    c->attn_scratch = b + L.attn;
    c->attn_scratch_bytes = L.attn_bytes;
    /* HF VisionRotaryEmbedding(dim = head_dim / 2, theta 10000) */
    oc_rope_inv_freq(c->inv_freq, m->hp.head_dim / 2, 10000.0f);
    *out = c;
    return OC_OK;
}

void oc_vision_ctx_close(oc_vision_ctx *ctx) {
    if (!ctx) return;
    oc_allocator a = ctx->alloc;
    oc_matmul_ctx_close(ctx->mm);
    if (ctx->block) oc_mem_free(&a, ctx->block, ctx->block_bytes);
    oc_mem_free(&a, ctx, sizeof *ctx);
}

void oc_vision_ctx_set_debug(oc_vision_ctx *ctx, oc_vision_debug_fn fn, void *user) {
    if (!ctx) return;
    ctx->debug_fn = fn;
    ctx->debug_user = user;
}

/* ---- row jobs ----------------------------------------------------------------------------------- */

typedef enum row_op {
    ROW_NORM,     /* if src: x += src; then y = norm(x) when w (LayerNorm if b, else RMSNorm) */
    ROW_ACT,      /* x = act(x) */
    ROW_GLU,      /* x = act(x) * src */
    ROW_GATHER,   /* x[r] = src[order[r / unit] * unit + r % unit]  (window order) */
    ROW_SCATTER,  /* x[order[r]] = src[r]                            (back to grid order) */
    ROW_ROTARY,   /* rotary tables for processing position r */
    ROW_ROPE      /* rotate every head of rows r of x (q) and y (k) */
} row_op;

typedef struct row_job {
    row_op op;
    int64_t dim;                  /* floats per row of x, y, src */
    float *x, *y;
    const float *src, *w, *b;
    float eps;
    oc_act act;
    const int32_t *order;
    int32_t unit, merge, merged_w;
    const oc_vision_hparams *hp;
    float *cos_t, *sin_t;
    const float *inv_freq;
    int64_t n_rows, rows_per_task;
} row_job;

static void row_one(const row_job *j, int64_t r) {
    size_t off = (size_t)r * (size_t)j->dim;
    float *x = j->x ? j->x + off : NULL;   /* ROW_ROTARY has no x */
    switch (j->op) {
    case ROW_NORM:
        if (j->src) oc_add(x, j->src + off, j->dim);
        if (j->w && j->b) oc_layer_norm(j->y + off, x, j->w, j->b, j->dim, j->eps);
        else if (j->w) oc_rms_norm(j->y + off, x, j->w, j->dim, j->eps);
        break;
    case ROW_ACT: oc_act_apply(x, j->dim, j->act); break;
    case ROW_GLU: oc_glu(x, x, j->src + off, j->dim, j->act); break;
    case ROW_GATHER: {
        size_t s = (size_t)j->order[r / j->unit] * (size_t)j->unit + (size_t)(r % j->unit);
        memcpy(x, j->src + s * (size_t)j->dim, (size_t)j->dim * sizeof(float));
        break;
    }
    case ROW_SCATTER:
        memcpy(j->x + (size_t)j->order[r] * (size_t)j->dim, j->src + off, (size_t)j->dim * sizeof(float));
        break;
    case ROW_ROTARY: {
        /* merge-order position -> (row, col) of the patch grid (HF rot_pos_emb); first half of the
         * frequencies rotate with the row, second half with the column */
        int32_t mi = j->order[r / j->unit], sub = (int32_t)(r % j->unit);
        int32_t py = (mi / j->merged_w) * j->merge + sub / j->merge;
        int32_t px = (mi % j->merged_w) * j->merge + sub % j->merge;
        int32_t q = j->hp->head_dim / 4;
        float *c = j->cos_t + (size_t)r * (size_t)(2 * q), *s = j->sin_t + (size_t)r * (size_t)(2 * q);
        for (int32_t k = 0; k < q; k++) {
            float ay = (float)py * j->inv_freq[k], ax = (float)px * j->inv_freq[k];
            c[k] = cosf(ay);
            s[k] = sinf(ay);
            c[q + k] = cosf(ax);
            s[q + k] = sinf(ax);
        }
        break;
    }
    case ROW_ROPE: {
        int32_t hd = j->hp->head_dim, half = hd / 2;
        const float *c = j->cos_t + (size_t)r * (size_t)half, *s = j->sin_t + (size_t)r * (size_t)half;
        for (int32_t h = 0; h < j->hp->n_heads; h++) {
            oc_rope_neox(x + (size_t)h * (size_t)hd, half, c, s);
            oc_rope_neox(j->y + off + (size_t)h * (size_t)hd, half, c, s);
        }
        break;
    }
    }
}

static void row_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const row_job *j = ctx;
    int64_t r0 = task * j->rows_per_task, r1 = OC_MIN(r0 + j->rows_per_task, j->n_rows);
    for (int64_t r = r0; r < r1; r++) row_one(j, r);
}

static void run_rows(oc_vision_ctx *c, row_job *j, int64_t n_rows) {
    int64_t per_row = OC_MAX(j->dim, (int64_t)c->m->hp.hidden);
    j->n_rows = n_rows;
    j->rows_per_task = OC_MAX((int64_t)1, (int64_t)16384 / per_row);
    oc_pool_run(c->pool, (n_rows + j->rows_per_task - 1) / j->rows_per_task, row_task, j);
}

static void norm_rows(oc_vision_ctx *c, const float *residual, const float *w, const float *b, int64_t n) {
    row_job j = { .op = ROW_NORM, .dim = c->m->hp.hidden, .x = c->x, .y = c->h, .src = residual, .w = w, .b = b,
                  .eps = c->m->hp.eps };
    run_rows(c, &j, n);
}

static void act_rows(oc_vision_ctx *c, float *x, const float *up, int64_t dim, oc_act act, int64_t n) {
    row_job j = { .op = up ? ROW_GLU : ROW_ACT, .dim = dim, .x = x, .src = up, .act = act };
    run_rows(c, &j, n);
}

/* ---- the forward pass --------------------------------------------------------------------------- */

static oc_status check_plan(const oc_vision_hparams *hp, const oc_stack_plan *plan, oc_error *err) {
    if (!plan || plan->shape.n_layers == 0) return OC_OK;
    if (plan->shape.n_layers != hp->n_layers || plan->shape.n_heads != hp->n_heads || !plan->heads)
        return oc_fail(err, OC_ERR_INVALID, "vision: plan is for %d layers x %d heads; encoder has %d x %d",
                       (int)plan->shape.n_layers, (int)plan->shape.n_heads, (int)hp->n_layers, (int)hp->n_heads);
    for (int64_t i = 0; i < (int64_t)hp->n_layers * hp->n_heads; i++) {
        oc_pattern_kind k = plan->heads[i].kind;
        if (k != OC_PATTERN_DENSE && k != OC_PATTERN_A_SHAPE)
            return oc_fail(err, OC_ERR_INVALID, "vision: plan layer %d head %d: pattern %d is not allowed in the vision stack",
                           (int)(i / hp->n_heads), (int)(i % hp->n_heads), (int)k);
    }
    return OC_OK;
}

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
    const oc_vision_hparams *hp;
    int64_t n;              /* patches */
    int32_t n_windows;
    const oc_stack_plan *plan;
    oc_attn_stats *stats;
    oc_error *err;
} fwd;

static oc_status linear(fwd *F, const oc_weight *w, const float *x, float *y, int64_t n_tok, const float *bias) {
    return oc_matmul(F->c->mm, w, x, (size_t)w->n_in, y, (size_t)w->n_out, n_tok, bias, F->err);
}

static oc_status attention(fwd *F, int32_t il, float *q, float *k, float *v) {
    const oc_vision_hparams *hp = F->hp;
    oc_vision_ctx *c = F->c;
    int full = hp->kind == OC_VISION_QWEN2VL || (il + 1) % hp->n_wa_pattern == 0;
    oc_attn_args a;
    memset(&a, 0, sizeof a);
    a.n_q = a.n_kv = (int32_t)F->n;
    a.n_head = a.n_head_kv = hp->n_heads;
    a.head_dim = hp->head_dim;
    a.q = q;
    a.k = k;
    a.v = v;
    a.kv_dtype = OC_DTYPE_F32;
    a.q_stride_token = a.k_stride_token = a.v_stride_token = a.out_stride_token = hp->hidden;
    a.q_stride_head = a.k_stride_head = a.v_stride_head = a.out_stride_head = hp->head_dim;
    a.out = c->h;
    a.scale = (float)pow((double)hp->head_dim, -0.5);   /* HF: self.scale = head_dim ** -0.5 */
    a.mask = full ? OC_ATTN_BIDIRECTIONAL : OC_ATTN_SEGMENTS;
    a.segments = c->windows;
    a.n_segments = F->n_windows;
    a.patterns = layer_patterns(F->plan, il, hp->n_heads);
    a.isa = c->isa;
    return oc_attn_run(&a, c->pool, c->attn_scratch, c->attn_scratch_bytes, F->stats, F->err);
}

/* One block, entered with h = norm1(x) and left with x = block output, h = next norm(x). */
static oc_status block(fwd *F, int32_t il) {
    oc_vision_ctx *c = F->c;
    const oc_vision_model *m = c->m;
    const oc_vision_layer *ly = &m->layers[il];
    const oc_vision_hparams *hp = F->hp;
    int64_t n = F->n, nd = n * hp->hidden, nf = n * hp->ffn;
    float *q = c->w, *k = c->w + nd, *v = c->w + 2 * nd;
    oc_status s;
    if ((s = linear(F, &ly->q, c->h, q, n, ly->q_b)) || (s = linear(F, &ly->k, c->h, k, n, ly->k_b)) ||
        (s = linear(F, &ly->v, c->h, v, n, ly->v_b)))
        return s;
    row_job rope = { .op = ROW_ROPE, .dim = hp->hidden, .x = q, .y = k, .hp = hp, .cos_t = c->cos_t,
                     .sin_t = c->sin_t };
    run_rows(c, &rope, n);
    if ((s = attention(F, il, q, k, v)) || (s = linear(F, &ly->o, c->h, q, n, ly->o_b))) return s;
    norm_rows(c, q, ly->ln2_w, ly->ln2_b, n);   /* x += attn; h = norm2(x) */
    if (hp->kind == OC_VISION_QWEN2VL) {        /* fc1 -> QuickGELU -> fc2 */
        if ((s = linear(F, &ly->up, c->h, c->w, n, ly->up_b))) return s;
        act_rows(c, c->w, NULL, hp->ffn, OC_ACT_GELU_QUICK, n);
    } else {                                    /* down(silu(gate) * up) */
        if ((s = linear(F, &ly->gate, c->h, c->w, n, ly->gate_b)) || (s = linear(F, &ly->up, c->h, c->w + nf, n, ly->up_b)))
            return s;
        act_rows(c, c->w, c->w + nf, hp->ffn, OC_ACT_SILU, n);
    }
    if ((s = linear(F, &ly->down, c->w, c->h, n, ly->down_b))) return s;
    int last = il + 1 == hp->n_layers;          /* x += mlp; h = next norm1, or the merger's ln_q */
    const oc_vision_layer *next = last ? NULL : &m->layers[il + 1];
    norm_rows(c, c->h, last ? m->post_ln_w : next->ln1_w, last ? m->post_ln_b : next->ln1_b, n);
    if (c->debug_fn) c->debug_fn(c->debug_user, il, c->x, (int32_t)n, hp->hidden);
    return OC_OK;
}

oc_status oc_vision_encode(oc_vision_ctx *ctx, const float *pixels, int32_t grid_h, int32_t grid_w,
                           const oc_stack_plan *plan, float *out, oc_attn_stats *stats, oc_error *err) {
    if (!ctx || !pixels || !out) return oc_fail(err, OC_ERR_INVALID, "vision: NULL argument");
    const oc_vision_model *m = ctx->m;
    const oc_vision_hparams *hp = &m->hp;
    int32_t merge = hp->merge_size, unit = merge * merge;
    if (grid_h < merge || grid_w < merge || grid_h % merge || grid_w % merge)
        return oc_fail(err, OC_ERR_INVALID, "vision: grid %dx%d is not a positive multiple of the merge size %d",
                       (int)grid_h, (int)grid_w, (int)merge);
    if ((int64_t)grid_h * grid_w > ctx->max_patches)
        return oc_fail(err, OC_ERR_RANGE, "vision: image of %dx%d patches exceeds the context's %d", (int)grid_h,
                       (int)grid_w, (int)ctx->max_patches);
    oc_status s = check_plan(hp, plan, err);
    if (s) return s;
    fwd F = { ctx, hp, (int64_t)grid_h * grid_w, 1, plan, stats, err };
    int32_t mh = grid_h / merge, mw = grid_w / merge, nm = mh * mw;
    if (hp->kind == OC_VISION_QWEN25VL) {
        F.n_windows = oc_vision_window_order(mh, mw, hp->window_size_px / merge / hp->patch_size, unit, ctx->order,
                                             ctx->windows);
    } else {
        for (int32_t i = 0; i < nm; i++) ctx->order[i] = i;
        ctx->windows[0].start = 0;
        ctx->windows[0].end = (int32_t)F.n;
    }
    /* patch embedding (HF Conv3d as one GEMM); 2.5-VL: then rows into window order */
    if (hp->kind == OC_VISION_QWEN25VL) {
        if ((s = linear(&F, &m->patch, pixels, ctx->h, F.n, NULL))) return s;
        row_job g = { .op = ROW_GATHER, .dim = hp->hidden, .x = ctx->x, .src = ctx->h, .order = ctx->order, .unit = unit };
        run_rows(ctx, &g, F.n);
    } else if ((s = linear(&F, &m->patch, pixels, ctx->x, F.n, NULL))) {
        return s;
    }
    if (ctx->debug_fn) ctx->debug_fn(ctx->debug_user, -1, ctx->x, (int32_t)F.n, hp->hidden);
    row_job rot = { .op = ROW_ROTARY, .dim = hp->head_dim / 2, .order = ctx->order, .unit = unit, .merge = merge,
                    .merged_w = mw, .hp = hp, .cos_t = ctx->cos_t, .sin_t = ctx->sin_t, .inv_freq = ctx->inv_freq };
    run_rows(ctx, &rot, F.n);
    norm_rows(ctx, NULL, m->layers[0].ln1_w, m->layers[0].ln1_b, F.n);
    for (int32_t il = 0; il < hp->n_layers; il++)
        if ((s = block(&F, il))) return s;
    /* merger: h = ln_q(x) viewed as [n / unit][unit * hidden] -> mlp.0 -> GELU (erf) -> mlp.2 */
    if ((s = linear(&F, &m->mm0, ctx->h, ctx->w, nm, m->mm0_b))) return s;
    act_rows(ctx, ctx->w, NULL, m->mm0.n_out, OC_ACT_GELU_ERF, nm);
    if (hp->kind == OC_VISION_QWEN2VL) return linear(&F, &m->mm2, ctx->w, out, nm, m->mm2_b);
    if ((s = linear(&F, &m->mm2, ctx->w, ctx->h, nm, m->mm2_b))) return s;
    row_job sc = { .op = ROW_SCATTER, .dim = hp->proj_dim, .x = out, .src = ctx->h, .order = ctx->order };
    run_rows(ctx, &sc, nm);
    return OC_OK;
}
