/* text_decoder.c: the language model's forward pass (formats.md §2a graph; Hugging Face
 * Qwen2VLTextModel / Qwen2_5_VLTextModel): per layer RMSNorm -> q/k/v (+bias) -> M-RoPE on q and k
 * -> keys and values appended to the f16 KV cache -> grouped-query attention through the engine
 * (causal, with the plan's per-head patterns) -> output projection -> residual -> RMSNorm ->
 * SwiGLU -> residual; then the final norm and the lm head.
 *
 * Every buffer is sized in oc_text_ctx_open for (max_ctx_tokens, max_batch_tokens) and allocated
 * there in one block; a forward call allocates nothing. Each linear layer is one oc_matmul over the
 * whole batch. Results do not depend on the thread count (matmul and attention guarantee it; the
 * per-row operations here are serial and fixed-order). */
#include "text_model.h"

#include "f16.h"
#include "nn.h"
#include "quant.h"

#include <math.h>
#include <string.h>

struct oc_text_ctx {
    const oc_text_model *m;
    oc_allocator alloc;
    oc_pool *pool;
    oc_isa isa;
    oc_text_limits lim;
    oc_matmul_ctx *mm;
    int32_t n_past;
    /* one block: */
    void *block;
    size_t block_bytes;
    uint16_t *k_cache, *v_cache;   /* [n_layers][max_ctx][kv_dim] f16 */
    float *x, *xb, *q, *k, *v, *att, *ff_g, *ff_u;
    float *rope_cos, *rope_sin;    /* [batch][n_pairs] */
    float *inv_freq;               /* [n_pairs] */
    void *attn_scratch;
    size_t attn_scratch_bytes;
};

typedef struct layout_plan {
    size_t off[16];
    size_t total;
} layout_plan;

/* Offsets of the block's parts (64-byte aligned each), in the order of the fields above. */
static int plan_block(const oc_text_model *m, const oc_text_limits *lim, int n_threads, layout_plan *lp,
                      size_t *attn_bytes) {
    const oc_text_hparams *hp = &m->hp;
    size_t B = (size_t)lim->max_batch_tokens, C = (size_t)lim->max_ctx_tokens;
    size_t d = (size_t)hp->n_embd, kv = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    size_t ff = (size_t)hp->n_ff, pairs = (size_t)hp->head_dim / 2, L = (size_t)hp->n_layers;
    oc_attn_dims dims = { lim->max_batch_tokens, lim->max_ctx_tokens, hp->n_head, hp->n_head_kv,
                          hp->head_dim };
    *attn_bytes = oc_attn_scratch_bytes(&dims, n_threads);
    if (!*attn_bytes) return 0;
    size_t cache_elems;
    if (!oc_mul_size(L * kv, C, &cache_elems)) return 0;
    size_t sizes[] = {
        cache_elems * 2, cache_elems * 2,                      /* k, v caches */
        B * d * 4, B * d * 4, B * d * 4, B * kv * 4, B * kv * 4, B * d * 4,   /* x xb q k v att */
        B * ff * 4, B * ff * 4,                                /* ff_g ff_u */
        B * pairs * 4, B * pairs * 4, pairs * 4,               /* rope tables, inv_freq */
        *attn_bytes,
    };
    size_t total = 0;
    for (size_t i = 0; i < OC_ARRAY_LEN(sizes); i++) {
        lp->off[i] = total;
        size_t padded = (sizes[i] + OC_MEM_ALIGN - 1) / OC_MEM_ALIGN * OC_MEM_ALIGN;
        if (padded < sizes[i] || !oc_add_size(total, padded, &total)) return 0;
    }
    lp->total = total;
    return 1;
}

static int64_t max_n_in(const oc_text_hparams *hp) {
    return OC_MAX((int64_t)hp->n_embd, (int64_t)hp->n_ff);
}

size_t oc_text_ctx_bytes(const oc_text_model *m, const oc_text_limits *lim, int n_threads, oc_isa isa) {
    layout_plan lp;
    size_t attn;
    if (!plan_block(m, lim, n_threads, &lp, &attn)) return 0;
    const oc_matmul_kernels *k = oc_matmul_kernels_for(isa);
    if (!k) return 0;
    size_t mm = oc_matmul_scratch_bytes(k, n_threads, max_n_in(&m->hp), lim->max_batch_tokens);
    size_t total;
    if (!mm || !oc_add_size(lp.total, mm, &total)) return 0;
    return total + sizeof(oc_text_ctx);
}

oc_status oc_text_ctx_open(oc_text_ctx **out, const oc_text_model *m, const oc_text_limits *lim,
                           oc_pool *pool, oc_isa isa, const oc_allocator *alloc, oc_error *err) {
    *out = NULL;
    if (!m || !lim || lim->max_ctx_tokens < 1 || lim->max_batch_tokens < 1 ||
        lim->max_batch_tokens > lim->max_ctx_tokens)
        return oc_fail(err, OC_ERR_INVALID, "text context: need 1 <= max_batch_tokens <= max_ctx_tokens");
    int n_threads = oc_pool_n_threads(pool);
    layout_plan lp;
    size_t attn_bytes;
    if (!plan_block(m, lim, n_threads, &lp, &attn_bytes))
        return oc_fail(err, OC_ERR_RANGE, "text context: %d tokens of context do not fit in memory "
                       "arithmetic", lim->max_ctx_tokens);
    const oc_matmul_kernels *kern = oc_matmul_kernels_for(isa);
    if (!kern) return oc_fail(err, OC_ERR_UNSUPPORTED, "text context: ISA %d is not available", (int)isa);
    oc_text_ctx *c = oc_mem_calloc(alloc, sizeof *c);
    if (!c) return oc_fail(err, OC_ERR_NOMEM, "text context: out of memory");
    c->alloc = alloc ? *alloc : *oc_default_allocator();
    c->m = m;
    c->pool = pool;
    c->isa = isa;
    c->lim = *lim;
    c->block_bytes = lp.total;
    c->block = oc_mem_alloc(&c->alloc, lp.total);
    if (!c->block) {
        oc_text_ctx_close(c);
        return oc_fail(err, OC_ERR_NOMEM, "text context: out of memory for %zu bytes (KV cache of %d "
                       "tokens and scratch)", lp.total, lim->max_ctx_tokens);
    }
    char *b = c->block;
    c->k_cache = (uint16_t *)(b + lp.off[0]);
    c->v_cache = (uint16_t *)(b + lp.off[1]);
    float **f[] = { &c->x, &c->xb, &c->q, &c->k, &c->v, &c->att, &c->ff_g, &c->ff_u,
                    &c->rope_cos, &c->rope_sin, &c->inv_freq };
    for (size_t i = 0; i < OC_ARRAY_LEN(f); i++) *f[i] = (float *)(b + lp.off[2 + i]);
    c->attn_scratch = b + lp.off[13];
    c->attn_scratch_bytes = attn_bytes;
    oc_rope_inv_freq(c->inv_freq, m->hp.head_dim, m->hp.rope_base);
    oc_status st = oc_matmul_ctx_open(&c->mm, kern, pool, max_n_in(&m->hp), lim->max_batch_tokens,
                                      &c->alloc, err);
    if (st) {
        oc_text_ctx_close(c);
        return st;
    }
    *out = c;
    return OC_OK;
}

void oc_text_ctx_close(oc_text_ctx *c) {
    if (!c) return;
    oc_allocator a = c->alloc;
    oc_matmul_ctx_close(c->mm);
    oc_mem_free(&a, c->block, c->block_bytes);
    oc_mem_free(&a, c, sizeof *c);
}

void oc_text_ctx_reset(oc_text_ctx *c) { c->n_past = 0; }
int32_t oc_text_ctx_n_past(const oc_text_ctx *c) { return c->n_past; }

/* M-RoPE tables for the batch (formats.md §3, HF apply_multimodal_rotary_pos_emb): pair k takes
 * its position from the stream its section names (t, h, w, then e = 0), the sections repeating
 * over the pairs as llama.cpp's rope_multi does; angle = pos * inv_freq[k] in f32 as HF computes. */
static void mrope_tables(oc_text_ctx *c, const oc_text_batch *b) {
    const oc_text_hparams *hp = &c->m->hp;
    int32_t pairs = hp->head_dim / 2;
    const int32_t *s = hp->rope_sections;
    int32_t sect_total = s[0] + s[1] + s[2] + s[3];
    for (int32_t i = 0; i < b->n_tokens; i++) {
        float *cs = c->rope_cos + (size_t)i * pairs, *sn = c->rope_sin + (size_t)i * pairs;
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

oc_status oc_text_forward(oc_text_ctx *c, const oc_text_batch *b, oc_attn_stats *stats, oc_error *err) {
    const oc_text_model *m = c->m;
    const oc_text_hparams *hp = &m->hp;
    int32_t n = b->n_tokens;
    if (n < 1 || !b->pos_t || !b->pos_h || !b->pos_w)
        return oc_fail(err, OC_ERR_INVALID, "text forward: empty batch or missing positions");
    if (n > c->lim.max_batch_tokens)
        return oc_fail(err, OC_ERR_RANGE, "text forward: batch of %d tokens exceeds the limit %d", n,
                       c->lim.max_batch_tokens);
    if (n > c->lim.max_ctx_tokens - c->n_past)
        return oc_fail(err, OC_ERR_RANGE, "context full: %d cached + %d new tokens exceed the context "
                       "of %d tokens", c->n_past, n, c->lim.max_ctx_tokens);
    int64_t d = hp->n_embd, hd = hp->head_dim, kvd = (int64_t)hp->n_head_kv * hd, ff = hp->n_ff;
    int32_t pairs = hp->head_dim / 2;
    oc_to_f32_fn embd_row = oc_dequant_ref(m->token_embd.dtype);
    for (int32_t i = 0; i < n; i++) {
        float *xi = c->x + (size_t)i * (size_t)d;
        int32_t id = b->ids ? b->ids[i] : -1;
        if (id >= 0) {
            if (id >= hp->n_vocab)
                return oc_fail(err, OC_ERR_INVALID, "text forward: token id %d is outside the vocabulary "
                               "of %d", id, hp->n_vocab);
            embd_row((const char *)m->token_embd.data + (size_t)id * m->token_embd.row_bytes, xi, d);
        } else {
            if (!b->embd) return oc_fail(err, OC_ERR_INVALID, "text forward: token %d has no id and no embedding", i);
            memcpy(xi, b->embd + (size_t)i * (size_t)d, sizeof(float) * (size_t)d);
        }
    }
    mrope_tables(c, b);
    oc_status st;
    size_t C = (size_t)c->lim.max_ctx_tokens;
    for (int32_t il = 0; il < hp->n_layers; il++) {
        const oc_text_layer *L = &m->layers[il];
        for (int32_t i = 0; i < n; i++)
            oc_rms_norm(c->xb + (size_t)i * d, c->x + (size_t)i * d, L->attn_norm, d, hp->eps);
        if ((st = oc_matmul(c->mm, &L->wq, c->xb, d, c->q, d, n, L->bq, err))) return st;
        if ((st = oc_matmul(c->mm, &L->wk, c->xb, d, c->k, kvd, n, L->bk, err))) return st;
        if ((st = oc_matmul(c->mm, &L->wv, c->xb, d, c->v, kvd, n, L->bv, err))) return st;
        uint16_t *kc = c->k_cache + (size_t)il * C * (size_t)kvd;
        uint16_t *vc = c->v_cache + (size_t)il * C * (size_t)kvd;
        for (int32_t i = 0; i < n; i++) {
            const float *cs = c->rope_cos + (size_t)i * pairs, *sn = c->rope_sin + (size_t)i * pairs;
            for (int32_t h = 0; h < hp->n_head; h++) oc_rope_neox(c->q + (size_t)i * d + h * hd, pairs, cs, sn);
            float *ki = c->k + (size_t)i * kvd, *vi = c->v + (size_t)i * kvd;
            for (int32_t h = 0; h < hp->n_head_kv; h++) oc_rope_neox(ki + h * hd, pairs, cs, sn);
            uint16_t *kdst = kc + (size_t)(c->n_past + i) * (size_t)kvd;
            uint16_t *vdst = vc + (size_t)(c->n_past + i) * (size_t)kvd;
            for (int64_t j = 0; j < kvd; j++) {
                kdst[j] = oc_f32_to_f16(ki[j]);
                vdst[j] = oc_f32_to_f16(vi[j]);
            }
        }
        oc_attn_args a;
        memset(&a, 0, sizeof a);
        a.n_q = n;
        a.n_kv = c->n_past + n;
        a.n_head = hp->n_head;
        a.n_head_kv = hp->n_head_kv;
        a.head_dim = hp->head_dim;
        a.q = c->q;
        a.q_stride_token = d;
        a.q_stride_head = hd;
        a.k = kc;
        a.v = vc;
        a.kv_dtype = OC_DTYPE_F16;
        a.k_stride_token = a.v_stride_token = kvd;
        a.k_stride_head = a.v_stride_head = hd;
        a.out = c->att;
        a.out_stride_token = d;
        a.out_stride_head = hd;
        a.scale = 1.0f / sqrtf((float)hd);
        a.mask = OC_ATTN_CAUSAL;
        a.q_offset = c->n_past;
        a.patterns = b->plan && b->plan->shape.n_layers > 0
                         ? b->plan->heads + (size_t)il * (size_t)b->plan->shape.n_heads : NULL;
        a.layout = b->layout;
        a.isa = c->isa;
        if (b->layer_masks && b->layer_masks[il]) {
            a.mask = OC_ATTN_EXPLICIT;
            a.explicit_mask = b->layer_masks[il];
            a.explicit_stride_q = a.n_kv;
            a.explicit_stride_head = 0;
            a.patterns = NULL;
        }
        if ((st = oc_attn_run(&a, c->pool, c->attn_scratch, c->attn_scratch_bytes, stats, err))) return st;
        if ((st = oc_matmul(c->mm, &L->wo, c->att, d, c->xb, d, n, NULL, err))) return st;
        oc_add(c->x, c->xb, (int64_t)n * d);
        for (int32_t i = 0; i < n; i++)
            oc_rms_norm(c->xb + (size_t)i * d, c->x + (size_t)i * d, L->ffn_norm, d, hp->eps);
        if ((st = oc_matmul(c->mm, &L->gate, c->xb, d, c->ff_g, ff, n, NULL, err))) return st;
        if ((st = oc_matmul(c->mm, &L->up, c->xb, d, c->ff_u, ff, n, NULL, err))) return st;
        oc_glu(c->ff_g, c->ff_g, c->ff_u, (int64_t)n * ff, OC_ACT_SILU);
        if ((st = oc_matmul(c->mm, &L->down, c->ff_g, ff, c->xb, d, n, NULL, err))) return st;
        oc_add(c->x, c->xb, (int64_t)n * d);
        if (b->on_layer) b->on_layer(b->user, il, c->x, n, (int32_t)d);
    }
    c->n_past += n;
    if (!b->logits) return OC_OK;
    int32_t first = b->all_logits ? 0 : n - 1, n_out = n - first;
    for (int32_t i = first; i < n; i++)
        oc_rms_norm(c->xb + (size_t)(i - first) * d, c->x + (size_t)i * d, m->output_norm, d, hp->eps);
    return oc_matmul(c->mm, &m->output, c->xb, d, b->logits, hp->n_vocab, n_out, m->output_bias, err);
}
