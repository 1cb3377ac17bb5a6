/* text_layer.c: one step of the language model's forward pass, the layer, and what every caller of it
 * shares (docs/formats.md §2a graph; Hugging Face Qwen2VLTextModel / Qwen2_5_VLTextModel): the input
 * rows and M-RoPE tables, then per layer RMSNorm -> q/k/v (+bias) -> M-RoPE on q and k
 * -> keys and values appended to the f16 KV cache -> grouped-query attention through the engine
 * (causal, with the plan's per-head patterns) -> output projection -> residual -> RMSNorm ->
 * SwiGLU -> residual; then the final norm and the lm head. Its callers: text_forward.c (a batch
 * through every layer: decode, and prompts of plans that keep the whole cache) and text_prefill.c
 * (a whole prompt segment by segment, for plans that evict).
 *
 * Every step is one backend operation over the whole batch (backend.h) on buffers opened with the
 * context (text_ctx.c), so the same graph runs on the CPU or a device and a call allocates nothing.
 * The host does only what needs host values: checking the batch, the M-RoPE tables from the
 * positions, and the transfers of ids, image embeddings and logits. Results do not depend on the
 * thread count (every backend operation guarantees it). */
#include "model/text_ctx.h"
#include "core/f16.h"

#include <math.h>
#include <string.h>

/* M-RoPE tables for the batch (docs/formats.md §3, HF apply_multimodal_rotary_pos_emb): pair k takes
 * its position from the stream its section names (t, h, w, then e = 0), the sections repeating
 * over the pairs as llama.cpp's rope_multi does; angle = pos * inv_freq[k] in f32 as HF computes. */
static void mrope_tables(oc_text_ctx *c, const oc_text_batch *b, int32_t row) {
    const oc_text_hparams *hp = &c->m->hp;
    int32_t pairs = hp->head_dim / 2;
    const int32_t *s = hp->rope_sections;
    int32_t sect_total = s[0] + s[1] + s[2] + s[3];
    for (int32_t i = 0; i < b->n_tokens; i++) {
        float *cs = c->cos_h + (size_t)(row + i) * pairs, *sn = c->sin_h + (size_t)(row + i) * pairs;
        for (int32_t k = 0; k < pairs; k++) {
            int32_t sec = k % sect_total;
            int32_t pos = sec < s[0] ? b->pos_t[i] : sec < s[0] + s[1] ? b->pos_h[i]
                          : sec < s[0] + s[1] + s[2] ? b->pos_w[i] : 0;
            float angle = (float)pos * c->inv_freq[k];
            cs[k] = cosf(angle);
            sn[k] = sinf(angle);
        }
    }
}

/* Rows i..j-1 of x (from element xo) from the image store, or from embd when the batch indexes it,
 * rows -1 - ids[i].. of it, in runs of consecutive rows: one gather_rows each (the index 0 with
 * unit = the run's length copies the run in order), or one write. */
static oc_status indexed_rows(oc_text_ctx *c, const oc_text_batch *b, int32_t i, int32_t j, int64_t xo, oc_error *err) {
    oc_backend *be = c->be;
    int64_t d = c->m->hp.n_embd;
    const int32_t *ids = b->ids;
    if (b->embd_in_store && !c->image_store.n_bytes)
        return oc_fail(err, OC_ERR_INVALID, "text: batch reads an absent image store");
    while (i < j) {
        int32_t k = i + 1;
        while (k < j && ids[k] == ids[k - 1] - 1) k++;
        int64_t row = -1 - (int64_t)ids[i];
        oc_status st = b->embd_in_store
                           ? be->ops->gather_rows(be, &c->x, xo + i * d, &c->image_store, row * d, &c->zero, k - i,
                                                  d, k - i, err)
                           : be->ops->write(be, &c->x, (size_t)(xo + i * d) * sizeof(float), b->embd + row * d,
                                            (size_t)(k - i) * (size_t)d * sizeof(float), err);
        if (st) return st;
        i = k;
    }
    return OC_OK;
}

oc_status oc_text_inputs(oc_text_ctx *c, const oc_text_batch *b, int64_t xo, oc_error *err) {
    oc_backend *be = c->be;
    int32_t n = b->n_tokens;
    size_t row = (size_t)c->m->hp.n_embd * sizeof(float);
    oc_status st;
    for (int32_t i = 0; i < n;) {
        if (b->ids && b->ids[i] >= 0) {
            i++;
            continue;
        }
        int32_t j = i;
        while (j < n && !(b->ids && b->ids[j] >= 0)) j++;
        if ((b->embd_in_store || b->embd_indexed) && b->ids)
            st = indexed_rows(c, b, i, j, xo, err);
        else
            st = be->ops->write(be, &c->x, (size_t)xo * sizeof(float) + (size_t)i * row, (const char *)b->embd + (size_t)i * row,
                                (size_t)(j - i) * row, err);
        if (st) return st;
        i = j;
    }
    if (!b->ids) return OC_OK;
    size_t ids_bytes = sizeof(int32_t) * (size_t)n;
    if ((st = be->ops->bind(be, &c->ids, b->ids, ids_bytes, err)) ||
        (st = be->ops->write(be, &c->ids, 0, b->ids, ids_bytes, err)))
        return st;
    return be->ops->embed(be, &c->token_embd, &c->ids, n, &c->x, xo, err);
}

int64_t oc_text_k_base(const oc_text_ctx *c, int32_t il) {
    return il < c->book.n_compacted ? c->reg.k_at[il] : c->reg.k_pre[il];
}
int64_t oc_text_v_base(const oc_text_ctx *c, int32_t il) {
    return il < c->book.n_compacted ? c->reg.v_at[il] : c->reg.v_pre[il];
}

oc_attn_call oc_text_attn_call(const oc_text_ctx *c, int32_t il, int32_t n_q) {
    const oc_text_hparams *hp = &c->m->hp;
    int64_t d = hp->n_embd, hd = hp->head_dim, kvd = (int64_t)hp->n_head_kv * hd;
    oc_attn_call a;
    memset(&a, 0, sizeof a);
    a.n_q = n_q;
    a.n_kv = c->n_past + n_q;
    a.n_head = hp->n_head;
    a.n_head_kv = hp->n_head_kv;
    a.head_dim = hp->head_dim;
    a.q_stride_token = d;
    a.q_stride_head = hd;
    a.k_off = oc_text_k_base(c, il);   /* GLA: the group's first layer's keys */
    a.v_off = oc_text_v_base(c, il);
    a.kv_dtype = OC_DTYPE_F16;
    a.k_stride_token = a.v_stride_token = kvd;
    a.k_stride_head = a.v_stride_head = hd;
    a.out_stride_token = d;
    a.out_stride_head = hd;
    a.scale = 1.0f / sqrtf((float)hd);
    a.mask = OC_ATTN_CAUSAL;
    a.q_offset = c->n_past;
    return a;
}

/* The cache row where the batch's k and v go when the layer's rows are one block (heads side by
 * side in a row, as in a dense cache): n_past while the layer is dense; once compacted, the held
 * count when every kv head holds as many rows (ZipVL's one set per layer), so a device's decode
 * stores with the rotation in one launch there too (four launches fewer a layer with two kv
 * heads: on an H200 the budgeted ZipVL plan decoded at 0.73x dense before); -1: per kv head. */
static int32_t block_row(const oc_text_ctx *c, int32_t il) {
    if (!oc_text_compacted(c, il)) return c->n_past;
    int32_t n0 = *oc_kv_book_n(&c->book, il, 0);
    for (int32_t g = 1; g < c->m->hp.n_head_kv; g++)
        if (*oc_kv_book_n(&c->book, il, g) != n0) return -1;
    return n0;
}

/* Every kv head of layer il holds the same positions (ZipVL's one set per layer does). */
static int same_rows(const oc_text_ctx *c, int32_t il) {
    int32_t n0 = *oc_kv_book_n(&c->book, il, 0);
    const int32_t *p0 = oc_kv_book_pos(&c->book, il, 0);
    for (int32_t g = 1; g < c->m->hp.n_head_kv; g++)
        if (*oc_kv_book_n(&c->book, il, g) != n0 || memcmp(oc_kv_book_pos(&c->book, il, g), p0, (size_t)n0 * sizeof *p0))
            return 0;
    return 1;
}

static oc_status attention_calls(oc_text_ctx *c, const oc_text_batch *b, int32_t il, oc_attn_stats *stats,
                                 oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    const oc_kv_layer *P = &c->kvp->layer[il];
    int64_t hd = hp->head_dim;
    oc_attn_call a = oc_text_attn_call(c, il, b->n_tokens);
    a.patterns = b->plan && b->plan->shape.n_layers > 0
                     ? b->plan->heads + (size_t)il * (size_t)b->plan->shape.n_heads : NULL;
    a.layout = b->layout;
    a.estimate_ns = &c->times.estimate_ns;
    if (b->layer_masks && b->layer_masks[il]) {
        a.mask = OC_ATTN_EXPLICIT;
        a.explicit_mask = b->layer_masks[il];
        a.explicit_stride_q = a.n_kv;
        a.explicit_stride_head = b->layer_mask_stride_head;
        a.patterns = NULL;
    }
    /* Q-Cache Eq. 5-6: a GLA lazy layer's queries are its group's (the Q cache) */
    oc_attn_bt t = { P->lazy == OC_KV_LAZY_GLA ? &c->q_share : &c->q, &c->k_cache, &c->v_cache, &c->att };
    if (!oc_text_compacted(c, il)) {
        oc_text_vla_keys(c, il, &a, 0, 0, NULL, c->n_past, b->n_tokens);
        return c->be->ops->attention(c->be, &a, &t, stats, err);
    }
    /* Compacted: the kept keys are attended densely over the held rows plus the batch's (causal
     * among those: the held count is the batch's offset); patterns are defined on positions the
     * eviction removed. ZipVL alone keeps one set T for the whole layer (zipvl.txt Eq. 6-9), so
     * every kv head holds the same rows and the layer stays one call: one call per kv group cost
     * a thread-pool dispatch each, more at 16 threads than the evicted keys saved in decode. */
    if (c->kvp->layer[P->first].acc_row < 0 && same_rows(c, il)) {
        int32_t held = *oc_kv_book_n(&c->book, il, 0);
        oc_attn_call h = a;
        h.n_kv = held + b->n_tokens;
        h.q_offset = held;
        h.patterns = NULL;
        h.layout = NULL;
        h.mask = OC_ATTN_CAUSAL;
        h.explicit_mask = NULL;
        oc_text_vla_keys(c, il, &h, 0, 0, oc_kv_book_pos(&c->book, il, 0), held, b->n_tokens);
        oc_status st = c->be->ops->attention(c->be, &h, &t, stats, err);
        if (!st && stats && c->n_past > held)   /* the evicted keys count as skipped, as below */
            stats->flops_skipped += (uint64_t)hp->n_head * 4u * (uint64_t)hd * (uint64_t)(c->n_past - held) * (uint64_t)b->n_tokens;
        return st;
    }
    /* Otherwise (SparseMM budgets) each kv head holds its own tokens. The CPU engine takes them in
     * one call (attn_call.h kv_held: one pool dispatch per layer, each kv head over its own held
     * rows, the same results as one call per kv head); elsewhere, and for a Q-Cache VLA layer
     * (its shared-key flags follow each head's positions), one call per kv group. */
    int32_t group = hp->n_head / hp->n_head_kv;
    if (c->kind == OC_BACKEND_KIND_CPU && P->lazy != OC_KV_LAZY_VLA) {
        const int32_t *held = oc_kv_book_n(&c->book, il, 0);
        int32_t most = 0;
        for (int32_t g = 0; g < hp->n_head_kv; g++) most = OC_MAX(most, held[g]);
        oc_attn_call h = a;
        h.n_kv = most + b->n_tokens;
        h.q_offset = 0;
        h.kv_held = held;
        h.patterns = NULL;
        h.layout = NULL;
        h.mask = OC_ATTN_CAUSAL;
        h.explicit_mask = NULL;
        oc_status st = c->be->ops->attention(c->be, &h, &t, stats, err);
        for (int32_t g = 0; !st && stats && g < hp->n_head_kv; g++)   /* the evicted keys, as below */
            if (c->n_past > held[g])
                stats->flops_skipped +=
                    (uint64_t)group * 4u * (uint64_t)hd * (uint64_t)(c->n_past - held[g]) * (uint64_t)b->n_tokens;
        return st;
    }
    for (int32_t g = 0; g < hp->n_head_kv; g++) {
        oc_attn_call h = a;
        int32_t held = *oc_kv_book_n(&c->book, il, g);
        h.n_head = group;
        h.n_head_kv = 1;
        h.n_kv = held + b->n_tokens;
        h.q_offset = held;
        h.q_off = g * group * hd;
        h.out_off = g * group * hd;
        h.k_off += g * hd;
        h.v_off += g * hd;
        h.patterns = NULL;
        h.layout = NULL;
        h.mask = OC_ATTN_CAUSAL;
        h.explicit_mask = NULL;
        oc_text_vla_keys(c, il, &h, g, 1, oc_kv_book_pos(&c->book, il, g), held, b->n_tokens);
        oc_status st = c->be->ops->attention(c->be, &h, &t, stats, err);
        if (st) return st;
        /* the keys the eviction removed count as skipped (attn.h's counters: pairs the causal mask
         * keeps and the plan drops): each of the batch's rows would have seen the n_past earlier
         * positions, and sees the held ones */
        if (stats && c->n_past > held)
            stats->flops_skipped += (uint64_t)group * 4u * (uint64_t)hd * (uint64_t)(c->n_past - held) * (uint64_t)b->n_tokens;
    }
    return OC_OK;
}

/* The layer's attention, timed (oc_text_times). */
static oc_status attention(oc_text_ctx *c, const oc_text_batch *b, int32_t il, oc_attn_stats *stats, oc_error *err) {
    uint64_t t0 = oc_text_clock(c);
    oc_status st = attention_calls(c, b, il, stats, err);
    c->times.attn_ns += oc_text_clock(c) - t0;
    return st;
}

void oc_text_vla_keys(oc_text_ctx *c, int32_t il, oc_attn_call *a, int32_t g, int per_head, const int32_t *pos,
                      int32_t n_held, int32_t n_new) {
    const oc_kv_layer *P = &c->kvp->layer[il];
    if (P->lazy != OC_KV_LAZY_VLA) return;
    a->k_shared_off = oc_text_k_base(c, P->first) + (per_head ? (int64_t)g * c->m->hp.head_dim : 0);
    if (!pos) {   /* rows are positions: the flags as they are */
        a->k_shared = c->tok_visual;
        return;
    }
    for (int32_t j = 0; j < n_held; j++) c->kv_shared[j] = c->tok_visual[pos[j]];
    memcpy(c->kv_shared + n_held, c->tok_visual + c->n_past, (size_t)n_new);
    a->k_shared = c->kv_shared;
}

/* Q-Cache VLA (Eq. 7-8): the batch's visual rows (image embeddings) take the group's first
 * layer's q; their keys are read from its K rows in place (oc_text_vla_keys), text rows keep the
 * layer's own. */
static oc_status vla_share(oc_text_ctx *c, const oc_text_batch *b, oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    oc_backend *be = c->be;
    int64_t d = hp->n_embd;
    oc_status st;
    for (int32_t i = 0; i < b->n_tokens;) {
        if (b->ids && b->ids[i] >= 0) {
            i++;
            continue;
        }
        int32_t j = i;
        while (j < b->n_tokens && !(b->ids && b->ids[j] >= 0)) j++;
        if ((st = be->ops->gather_rows(be, &c->q, i * d, &c->q_share, i * d, &c->iota, j - i, d, 1, err))) return st;
        i = j;
    }
    return OC_OK;
}

/* k (unless the layer reuses its group's keys: all of them, GLA; the visual tokens', VLA) and v of
 * the batch into the cache: contiguous at block_row while the layer's rows are one block; else per
 * kv head after each head's held rows. */
static oc_status store_kv(oc_text_ctx *c, const oc_text_batch *b, int32_t il, int32_t n, oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    const oc_kv_layer *P = &c->kvp->layer[il];
    const oc_backend_ops *op = c->be->ops;
    int64_t hd = hp->head_dim, kvd = (int64_t)hp->n_head_kv * hd;
    int store_k = P->lazy != OC_KV_LAZY_GLA;
    int64_t kb = oc_text_k_base(c, il), vb = oc_text_v_base(c, il);
    oc_status st;
    int vla = P->lazy == OC_KV_LAZY_VLA;
    int32_t row = block_row(c, il);
    if (row >= 0) {
        int64_t at = (int64_t)row * kvd;
        if ((st = op->kv_store(c->be, &c->v, 0, &c->v_cache, vb + at, n * kvd, err))) return st;
        for (int32_t i = 0; store_k && i < n;) {   /* runs of rows that keep their own keys */
            int32_t j = i;
            while (j < n && !(vla && oc_text_visual(b, j))) j++;
            if (j > i && (st = op->kv_store(c->be, &c->k, i * kvd, &c->k_cache, kb + at + i * kvd, (j - i) * kvd, err)))
                return st;
            for (i = j; i < n && vla && oc_text_visual(b, i); i++) {}
        }
        return OC_OK;
    }
    for (int32_t g = 0; g < hp->n_head_kv; g++) {
        int64_t at = (int64_t)*oc_kv_book_n(&c->book, il, g) * kvd + g * hd;
        for (int32_t i = 0; i < n; i++) {
            int64_t src = i * kvd + g * hd, dst = at + i * kvd;
            if ((store_k && !(vla && oc_text_visual(b, i)) &&
                 (st = op->kv_store(c->be, &c->k, src, &c->k_cache, kb + dst, hd, err))) ||
                (st = op->kv_store(c->be, &c->v, src, &c->v_cache, vb + dst, hd, err)))
                return st;
        }
    }
    return OC_OK;
}

/* The observation hook (oc_text_batch.on_attn): q of the batch and the layer's whole f16 cache
 * into the caller's f32 host arrays, one mapped view at a time (a device allows only one). */
static oc_status observe(oc_text_ctx *c, const oc_text_batch *b, int32_t il, oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    oc_backend *be = c->be;
    const oc_backend_ops *op = be->ops;
    int64_t kvd = (int64_t)hp->n_head_kv * hp->head_dim, n_kv = c->n_past + b->n_tokens;
    size_t q_bytes = sizeof(float) * (size_t)b->n_tokens * (size_t)hp->n_embd;
    size_t kv_elems = (size_t)(n_kv * kvd);
    size_t cache_off = sizeof(uint16_t) * (size_t)((int64_t)il * c->lim.max_ctx_tokens * kvd);   /* k_slot == il */
    const void *p = op->map_read(be, &c->q, 0, q_bytes, err);
    if (!p) return err ? err->status : OC_ERR_DEVICE;
    memcpy(b->obs_q, p, q_bytes);
    op->unmap(be, &c->q, p);
    const oc_bt *caches[2] = { &c->k_cache, &c->v_cache };
    float *dst[2] = { b->obs_k, b->obs_v };
    for (int w = 0; w < 2; w++) {
        const uint16_t *h = op->map_read(be, caches[w], cache_off, kv_elems * sizeof(uint16_t), err);
        if (!h) return err ? err->status : OC_ERR_DEVICE;
        for (size_t i = 0; i < kv_elems; i++) dst[w][i] = oc_f16_to_f32(h[i]);
        op->unmap(be, caches[w], h);
    }
    b->on_attn(b->obs_user, il, b->n_tokens, (int32_t)n_kv);
    return OC_OK;
}

/* A device's decode step with the norms inside the products (backend.h version 5): the output
 * projection and the down projection add into x themselves (matmul_acc), so the norms before q/k/v
 * and before gate/up find x whole and read it only (norm_matmul: no launch of their own, 2 of a
 * layer's 9 on the H200, and no residual to add). */
static int folded(const oc_text_ctx *c, int64_t n_tok) {
    const oc_backend_ops *op = c->be->ops;
    return n_tok == 1 && op->version >= 5 && op->matmul_acc && op->norm_matmul;
}

/* q, k, v (want_kv 0: q alone); res (NULL or c->xb: the previous layer's MLP output) is added to x
 * first, in the norm's launch, as mlp() below does with the attention's. *stored (may be NULL: no
 * store here): set when k and v went into the cache too (a device's decode of a layer that keeps
 * its own keys, its cache not compacted: the rotations and stores in one launch). */
static oc_status qkv(oc_text_ctx *c, const oc_text_batch *b, int32_t il, int64_t xo, const oc_bt *res, int want_kv,
                     int *stored, oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    const oc_text_layer_bt *L = &c->layers[il];
    oc_backend *be = c->be;
    const oc_backend_ops *op = be->ops;
    int64_t n = b->n_tokens, d = hp->n_embd, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    const oc_kv_layer *P = &c->kvp->layer[il];
    int32_t pairs = hp->head_dim / 2;
    oc_status st;
    /* x += res; xb = norm(x); q [n][d], k, v [n][kvd] = xb W^T + b; rotate q, k (a GLA lazy layer
     * reuses its group's q and k: Q-Cache Eq. 5-6) */
    int own = P->lazy != OC_KV_LAZY_GLA;
    /* a device's decode step: q, k and v in one launch, then the rotations and the stores in one */
    int fused = own && want_kv && n == 1 && op->matmul_n && L->wq.w.dtype == L->wk.w.dtype &&
                L->wk.w.dtype == L->wv.w.dtype;
    int32_t row = block_row(c, il);
    int store = fused && stored && op->rope_store && P->lazy == OC_KV_OWN && row >= 0;
    oc_mm_out o[3] = { { &L->wq, &c->q, 0, d, oc_bt_opt(&L->bq) }, { &L->wk, &c->k, 0, kvd, oc_bt_opt(&L->bk) },
                       { &L->wv, &c->v, 0, kvd, oc_bt_opt(&L->bv) } };
    int normed = 0;   /* the norm ran inside the products */
    if (fused && !res && folded(c, n)) {
        st = op->norm_matmul(be, &c->x, xo, &L->attn_norm, hp->eps, o, 3, -1, err);
        if (st != OC_OK && st != OC_ERR_UNSUPPORTED) return st;
        normed = st == OC_OK;
    }
    if (!normed &&
        (st = op->norm(be, OC_NORM_RMS, &c->x, xo, res, 0, &c->xb, 0, &L->attn_norm, NULL, n, d, hp->eps, err)))
        return st;
    if (normed) {
        /* q, k and v are done */
    } else if (fused) {
        if ((st = op->matmul_n(be, &c->xb, 0, d, n, o, 3, err))) return st;
    } else if ((own && ((st = op->matmul(be, &L->wq, &c->xb, 0, d, &c->q, 0, d, n, oc_bt_opt(&L->bq), err)) ||
                        (want_kv && (st = op->matmul(be, &L->wk, &c->xb, 0, d, &c->k, 0, kvd, n, oc_bt_opt(&L->bk), err))))) ||
               (want_kv && (st = op->matmul(be, &L->wv, &c->xb, 0, d, &c->v, 0, kvd, n, oc_bt_opt(&L->bv), err)))) {
        return st;   /* a GLA layer computes its own v */
    }
    if (store) {
        int64_t at = (int64_t)row * kvd;
        *stored = 1;
        return op->rope_store(be, &c->q, &c->k, &c->v, n, hp->n_head, hp->n_head_kv, hp->head_dim, pairs, &c->rope_cos,
                              &c->rope_sin, &c->k_cache, oc_text_k_base(c, il) + at, &c->v_cache,
                              oc_text_v_base(c, il) + at, err);
    }
    if (own && ((st = op->rope(be, &c->q, 0, n, hp->n_head, hp->head_dim, pairs, &c->rope_cos, &c->rope_sin, err)) ||
                (want_kv && (st = op->rope(be, &c->k, 0, n, hp->n_head_kv, hp->head_dim, pairs, &c->rope_cos,
                                           &c->rope_sin, err)))))
        return st;
    if (P->lazy == OC_KV_LAZY_FIRST &&   /* the Q cache of the group (its keys are read in the cache) */
        (st = op->gather_rows(be, &c->q_share, 0, &c->q, 0, &c->iota, n, d, 1, err)))
        return st;
    if (P->lazy == OC_KV_LAZY_VLA && (st = vla_share(c, b, err))) return st;
    return OC_OK;
}

oc_status oc_text_layer_qkv(oc_text_ctx *c, const oc_text_batch *b, int32_t il, int64_t xo, oc_error *err) {
    return qkv(c, b, il, xo, NULL, 1, NULL, err);
}

oc_status oc_text_layer_q(oc_text_ctx *c, const oc_text_batch *b, int32_t il, int64_t xo, oc_error *err) {
    return qkv(c, b, il, xo, NULL, 0, NULL, err);
}

/* The MLP; res (NULL or c->xb: the attention's output projection) is added to x first, in the
 * norm's launch (backend.h norm: x += res, then y = norm(x); one launch fewer per layer). defer:
 * leave the MLP's output in xb for the next layer's norm to add (oc_text_layers). */
static oc_status mlp(oc_text_ctx *c, const oc_text_batch *b, int32_t il, int64_t xo, const oc_bt *res, int defer,
                     oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    const oc_text_layer_bt *L = &c->layers[il];
    oc_backend *be = c->be;
    const oc_backend_ops *op = be->ops;
    int64_t n = b->n_tokens, d = hp->n_embd, ff = hp->n_ff;
    oc_status st;
    /* x += res; x += down(silu(gate(norm(x))) * up(norm(x))) */
    int fused = op->matmul_glu && n == 1 && L->gate.w.dtype == L->up.w.dtype;   /* a device's decode: one launch */
    int acc = !defer && !res && folded(c, n);   /* down adds into x itself */
    int normed = 0;                             /* the norm ran inside gate and up's launch */
    if (fused && acc) {
        oc_mm_out o[2] = { { &L->gate, &c->ff_g, 0, ff, NULL }, { &L->up, &c->ff_g, 0, ff, NULL } };
        st = op->norm_matmul(be, &c->x, xo, &L->ffn_norm, hp->eps, o, 2, OC_ACT_SILU, err);
        if (st != OC_OK && st != OC_ERR_UNSUPPORTED) return st;
        normed = st == OC_OK;
    }
    if ((!normed && (st = op->norm(be, OC_NORM_RMS, &c->x, xo, res, 0, &c->xb, 0, &L->ffn_norm, NULL, n, d, hp->eps,
                                   err))) ||
        (fused && !normed && (st = op->matmul_glu(be, &L->gate, &L->up, &c->xb, 0, &c->ff_g, 0, OC_ACT_SILU, err))) ||
        (!fused && (st = op->matmul(be, &L->gate, &c->xb, 0, d, &c->ff_g, 0, ff, n, NULL, err))) ||
        (!fused && (st = op->matmul(be, &L->up, &c->xb, 0, d, &c->ff_u, 0, ff, n, NULL, err))) ||
        (!fused && (st = op->glu(be, &c->ff_g, 0, &c->ff_u, 0, n * ff, OC_ACT_SILU, err))) ||
        (acc && (st = op->matmul_acc(be, &L->down, &c->ff_g, 0, &c->x, xo, NULL, err))) ||
        (!acc && (st = op->matmul(be, &L->down, &c->ff_g, 0, ff, &c->xb, 0, d, n, NULL, err))) ||
        (!acc && !defer && (st = op->add(be, &c->x, xo, &c->xb, 0, n * d, err))))
        return st;
    if (b->on_layer) {   /* tests: the residual stream, through a host view */
        size_t x_bytes = sizeof(float) * (size_t)(n * d);
        const float *x = op->map_read(be, &c->x, (size_t)xo * sizeof(float), x_bytes, err);
        if (!x) return err ? err->status : OC_ERR_DEVICE;
        b->on_layer(b->user, il, x, (int32_t)n, (int32_t)d);
        op->unmap(be, &c->x, x);
    }
    return OC_OK;
}

oc_status oc_text_layer_mlp(oc_text_ctx *c, const oc_text_batch *b, int32_t il, int64_t xo, oc_error *err) {
    return mlp(c, b, il, xo, NULL, 0, err);
}

/* One layer; res and defer as qkv() and mlp() take them. */
static oc_status layer(oc_text_ctx *c, const oc_text_batch *b, int32_t il, int64_t xo, const oc_bt *res, int defer,
                       oc_attn_stats *stats, oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    oc_backend *be = c->be;
    const oc_backend_ops *op = be->ops;
    int64_t n = b->n_tokens, d = hp->n_embd;
    oc_status st;
    /* q, k, v; k, v -> cache as f16 */
    int stored = 0;
    if ((st = qkv(c, b, il, xo, res, 1, &stored, err)) || (!stored && (st = store_kv(c, b, il, (int32_t)n, err))))
        return st;
    /* the calibration hook sees the dense cache: never with KV eviction or shared Q/K */
    if (b->on_attn && !c->kvp->any_evict && c->kvp->layer[il].lazy == OC_KV_OWN && (st = observe(c, b, il, err)))
        return st;
    /* att [n][d] over the cache; xb = att Wo^T; the MLP, which adds xb to x first */
    if ((st = attention(c, b, il, stats, err)) || (st = oc_text_kv_score_timed(c, b, il, err))) return st;
    if (!defer && folded(c, n)) {   /* x += att Wo^T in the product's launch; the MLP's norm reads x whole */
        if ((st = op->matmul_acc(be, &c->layers[il].wo, &c->att, 0, &c->x, xo, NULL, err))) return st;
        return mlp(c, b, il, xo, NULL, 0, err);
    }
    if ((st = op->matmul(be, &c->layers[il].wo, &c->att, 0, d, &c->xb, 0, d, n, NULL, err))) return st;
    return mlp(c, b, il, xo, &c->xb, defer, err);
}

oc_status oc_text_layer_forward(oc_text_ctx *c, const oc_text_batch *b, int32_t il, int64_t xo, oc_attn_stats *stats,
                                oc_error *err) {
    return layer(c, b, il, xo, NULL, 0, stats, err);
}

oc_status oc_text_layers(oc_text_ctx *c, const oc_text_batch *b, oc_attn_stats *stats, oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    /* each layer's MLP output waits in xb for the next layer's first norm, which adds it (one
     * launch fewer per layer); the hook that reads x after every layer sees it whole */
    int defer = !b->on_layer && !folded(c, b->n_tokens);   /* folded: each product adds into x itself */
    oc_status st;
    for (int32_t il = 0; il < hp->n_layers; il++)
        if ((st = layer(c, b, il, 0, il > 0 && defer ? &c->xb : NULL, defer, stats, err))) return st;
    return defer ? c->be->ops->add(c->be, &c->x, 0, &c->xb, 0, (int64_t)b->n_tokens * hp->n_embd, err) : OC_OK;
}

oc_text_batch oc_text_chunk(const oc_text_ctx *c, const oc_text_batch *b, int32_t s, int32_t n) {
    oc_text_batch k = *b;
    k.n_tokens = n;
    k.ids = b->ids ? b->ids + s : NULL;
    k.embd = b->embd && !b->embd_indexed ? b->embd + (size_t)s * (size_t)c->m->hp.n_embd : b->embd;
    k.pos_t = b->pos_t + s;
    k.pos_h = b->pos_h + s;
    k.pos_w = b->pos_w + s;
    return k;
}

oc_status oc_text_tables(oc_text_ctx *c, const oc_text_batch *b, oc_error *err) {
    size_t bytes = sizeof(float) * (size_t)b->n_tokens * (size_t)(c->m->hp.head_dim / 2);
    mrope_tables(c, b, 0);
    oc_backend *be = c->be;
    oc_status st;
    if (c->tables_row && ((st = be->ops->bind(be, &c->rope_cos, c->cos_h, bytes, err)) ||
                          (st = be->ops->bind(be, &c->rope_sin, c->sin_h, bytes, err))))
        return st;
    c->tables_row = 0;
    c->tables_rows_dev = 0;
    st = be->ops->write(be, &c->rope_cos, 0, c->cos_h, bytes, err);
    return st ? st : be->ops->write(be, &c->rope_sin, 0, c->sin_h, bytes, err);
}

oc_status oc_text_tables_prompt(oc_text_ctx *c, const oc_text_batch *b, int32_t row, int compute, oc_error *err) {
    size_t pairs = (size_t)(c->m->hp.head_dim / 2), bytes = sizeof(float) * (size_t)b->n_tokens * pairs;
    const float *cs = c->cos_h + (size_t)row * pairs, *sn = c->sin_h + (size_t)row * pairs;
    oc_backend *be = c->be;
    oc_status st;
    /* a prompt that fits one chunk: every segment after the first finds the same rows in the
     * device's tables (computed once, nothing else wrote them since): no second upload (on an H200,
     * 1 MiB a segment for the long model's 4,096-token chunk) */
    int same = !compute && c->tables_row == row && c->tables_rows_dev == b->n_tokens;
    if (compute) mrope_tables(c, b, row);
    c->tables_row = row;
    /* the buffers name the chunk's rows (the CPU reads them in place); a device copies them in,
     * queued where it can: the rows stay as they are until the prompt's last read */
    if ((st = be->ops->bind(be, &c->rope_cos, cs, bytes, err)) || (st = be->ops->bind(be, &c->rope_sin, sn, bytes, err)))
        return st;
    if (same) return OC_OK;
    c->tables_rows_dev = 0;   /* unknown until both writes are queued */
    oc_status (*put)(oc_backend *, oc_bt *, size_t, const void *, size_t, oc_error *) =
        be->ops->write_queued ? be->ops->write_queued : be->ops->write;
    if ((st = put(be, &c->rope_cos, 0, cs, bytes, err)) || (st = put(be, &c->rope_sin, 0, sn, bytes, err))) return st;
    c->tables_rows_dev = b->n_tokens;
    return OC_OK;
}

oc_status oc_text_head(oc_text_ctx *c, int32_t x_row, int32_t n_out, float *logits, oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    oc_backend *be = c->be;
    const oc_backend_ops *op = be->ops;
    int64_t d = hp->n_embd;
    size_t bytes = sizeof(float) * (size_t)n_out * (size_t)hp->n_vocab;
    oc_status st;
    if ((st = op->bind(be, &c->logits, logits, bytes, err)) ||
        (st = op->norm(be, OC_NORM_RMS, &c->x, x_row * d, NULL, 0, &c->xb, 0, &c->output_norm, NULL, n_out, d,
                       hp->eps, err)) ||
        (st = op->matmul(be, &c->output, &c->xb, 0, d, &c->logits, 0, hp->n_vocab, n_out, oc_bt_opt(&c->output_bias),
                         err)))
        return st;
    return op->read(be, &c->logits, 0, logits, bytes, err);
}
