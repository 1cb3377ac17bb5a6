/* text_ctx.c: sizing, opening and closing an oc_text_ctx (text_model.h): opens the context's
 * backend instance for its limits, hands it every weight and 1-D tensor once (the CPU backend wraps
 * them in place; a device uploads them), and allocates every buffer the forward pass uses
 * (text_ctx.h), so oc_text_forward (text_forward.c) allocates nothing. oc_text_ctx_bytes adds up the
 * same sizes without allocating. */
#include "model/text_ctx.h"
#include "port.h"
#include "model/graph_ctx.h"

#include <string.h>

/* Backend buffers in the order of text_ctx.h's fields. */
enum { BUF_K_CACHE, BUF_V_CACHE, BUF_X, BUF_XB, BUF_Q, BUF_ATT, BUF_K, BUF_V, BUF_FF_G, BUF_FF_U,
       BUF_ROPE_COS, BUF_ROPE_SIN, BUF_IDS, BUF_LOGITS, BUF_Q_SHARE, BUF_IOTA,
       BUF_IMAGE_STORE, BUF_ZERO, BUF_KVD_ACC, BUF_KVD_STATS, BUF_KVD_PART, BUF_KVD_PROBES, BUF_KVD_FLAGS, BUF_KVD_NORM,
       BUF_KVD_LISTS, BUF_KVD_COUNTS, N_BUF };

typedef struct sizes {
    size_t buf[N_BUF];
    uint32_t flags[N_BUF];
    size_t layers, inv_freq, table;   /* host block parts */
    size_t policy, book, acc, scores, scratch_d, scratch_i, kv_q, kv_k;   /* shrinking KV cache parts (0: none) */
    size_t vla;                       /* Q-Cache VLA's flags, each of tok_visual and kv_shared */
    size_t kvd_n;                     /* the device's set sizes, read back (text_kv_dev.c) */
    size_t host;                      /* host block total */
} sizes;

static size_t pad(size_t n) { return (n + OC_MEM_ALIGN - 1) / OC_MEM_ALIGN * OC_MEM_ALIGN; }

/* The KV cache policy of the limits' plan (kvcache/kv_cache.h). */
static oc_status policy_of(const oc_text_model *m, const oc_text_limits *lim, oc_kv_policy *p, oc_error *err) {
    const oc_plan *plan = lim->kv_plan;
    return oc_kv_policy_build(p, plan ? &plan->stacks[OC_PLAN_DECODER] : NULL, m->hp.n_layers, m->hp.n_head_kv,
                              plan ? plan->kv_window_tokens : OC_PLAN_DEFAULT_KV_WINDOW_TOKENS, "plan", err);
}

/* The regions of the KV cache (kvcache/kv_cache.h "Memory") with `answer` tokens of room after
 * the prompt: K slot regions in layer order, then the K staging slots; V the same. A segment's
 * layers whose region is smaller than the context take staging slots 0, 1, ... (a GLA lazy layer
 * stores no K). 0 on overflow. */
static int layout(const oc_text_model *m, const oc_text_limits *lim, const oc_kv_policy *p, int32_t answer,
                  oc_text_kv_regions *r) {
    const oc_text_hparams *hp = &m->hp;
    int64_t C = lim->max_ctx_tokens, kvd = (int64_t)hp->n_head_kv * hp->head_dim, k = 0, v = 0;
    memset(r, 0, sizeof *r);
    for (int32_t l = 0; l < hp->n_layers; l++) {
        const oc_kv_layer *L = &p->layer[l];
        r->rows[l] = oc_kv_policy_rows(p, l, lim->max_ctx_tokens, answer);
        if (L->lazy == OC_KV_LAZY_GLA) {
            r->k_at[l] = r->k_at[L->first];
        } else {
            r->k_at[l] = k;
            k += r->rows[l] * kvd;
        }
        r->v_at[l] = v;
        v += r->rows[l] * kvd;
        if (k < 0 || v < 0 || k > INT64_MAX / 4 || v > INT64_MAX / 4) return 0;
    }
    for (int32_t l0 = 0; l0 < hp->n_layers;) {
        int32_t l1 = oc_kv_policy_segment_end(p, l0), nk = 0, nv = 0;
        for (int32_t l = l0; l <= l1; l++) {
            int staged = r->rows[l] < C;
            r->k_pre[l] = p->layer[l].lazy == OC_KV_LAZY_GLA ? r->k_pre[p->layer[l].first]
                          : staged ? (int64_t)nk++ : -1;
            r->v_pre[l] = staged ? (int64_t)nv++ : -1;
        }
        r->n_stage_k = OC_MAX(r->n_stage_k, nk);
        r->n_stage_v = OC_MAX(r->n_stage_v, nv);
        l0 = l1 + 1;
    }
    for (int32_t l = 0; l < hp->n_layers; l++) {   /* slot numbers to offsets after the regions */
        if (p->layer[l].lazy != OC_KV_LAZY_GLA) r->k_pre[l] = r->k_pre[l] < 0 ? r->k_at[l] : k + r->k_pre[l] * C * kvd;
        else r->k_pre[l] = r->k_pre[p->layer[l].first];
        r->v_pre[l] = r->v_pre[l] < 0 ? r->v_at[l] : v + r->v_pre[l] * C * kvd;
    }
    if ((double)r->n_stage_k * (double)C * (double)kvd > (double)(INT64_MAX / 4 - k) ||
        (double)r->n_stage_v * (double)C * (double)kvd > (double)(INT64_MAX / 4 - v))
        return 0;
    r->k_elems = k + r->n_stage_k * C * kvd;
    r->v_elems = v + r->n_stage_v * C * kvd;
    r->by_layer = p->any_evict;
    return 1;
}

/* The bounded layout when it takes fewer bytes than the unbounded one (every region the context's
 * size, no staging: a short context with a long answer room gains nothing from bounding). */
static int kv_regions(const oc_text_model *m, const oc_text_limits *lim, const oc_kv_policy *p, oc_text_kv_regions *r) {
    if (!layout(m, lim, p, 0, r)) return 0;
    if (lim->max_answer_tokens <= 0) return 1;
    oc_text_kv_regions bounded;   /* ~9 KB */
    if (layout(m, lim, p, lim->max_answer_tokens, &bounded) && bounded.k_elems + bounded.v_elems < r->k_elems + r->v_elems)
        *r = bounded;
    return 1;
}

/* 0 on overflow. Every size follows from the model, the limits and the policy: the KV cache holds
 * the regions above, the score rows and selection scratch exist when a layer evicts, and a context
 * that prefills by layer keeps the whole prompt's residual stream. */
static int plan_sizes(const oc_text_model *m, const oc_text_limits *lim, const oc_kv_policy *p, oc_backend_kind kind,
                      int n_threads, sizes *s, oc_text_kv_regions *r) {
    const oc_text_hparams *hp = &m->hp;
    size_t B = (size_t)lim->max_batch_tokens, C = (size_t)lim->max_ctx_tokens;
    size_t d = (size_t)hp->n_embd, kv = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    size_t ff = (size_t)hp->n_ff, pairs = (size_t)hp->head_dim / 2, L = (size_t)hp->n_layers;
    size_t k_cache, v_cache, logits, acc, x;
    int lazy = p->any_lazy, evict = p->any_evict;
    if (!kv_regions(m, lim, p, r) || !oc_mul_size((size_t)r->k_elems, 2, &k_cache) ||
        !oc_mul_size((size_t)r->v_elems, 2, &v_cache) ||
        !oc_mul_size(B * 4, (size_t)hp->n_vocab, &logits) || !oc_mul_size((size_t)p->n_acc_rows * 8, C, &acc) ||
        !oc_mul_size((r->by_layer ? C : B) * 4, d, &x))
        return 0;
    (void)L;
    size_t bytes[N_BUF] = { k_cache, v_cache, x, B * d * 4, B * d * 4, B * d * 4, B * kv * 4, B * kv * 4,
                            B * ff * 4, B * ff * 4, B * pairs * 4, B * pairs * 4, B * 4, logits,
                            lazy ? B * d * 4 : 0, lazy ? B * 4 : 0,
                            0, 0 /* the image store: oc_text_ctx_image_store_open */,
                            0, 0, 0, 0, 0, 0, 0, 0 /* the device's selection: below */ };
    /* a device scores and selects where its cache is (text_kv_dev.c): the masses, the observed
     * rows' softmax statistics, the probes, scratch, and every (layer, kv head)'s chosen set plus
     * ZipVL's T, with their sizes */
    size_t slots = L * (size_t)hp->n_head_kv + 2;
    int dev = evict && kind != OC_BACKEND_KIND_CPU;
    s->kvd_n = dev ? pad(slots * 4) : 0;
    if (dev) {
        size_t rows = (size_t)OC_MAX(p->window, OC_KV_ZIPVL_RECENT_PROBES + OC_KV_ZIPVL_RANDOM_PROBES), lists, part;
        if (!oc_mul_size((slots - 1) * 4, C, &lists) || !oc_mul_size(rows * (size_t)hp->n_head_kv * 4, C, &part)) return 0;
        bytes[BUF_KVD_PART] = part;
        bytes[BUF_KVD_ACC] = OC_MAX(acc / 2, (size_t)4);
        bytes[BUF_KVD_STATS] = rows * (size_t)hp->n_head * 8;
        bytes[BUF_KVD_PROBES] = (OC_KV_ZIPVL_RECENT_PROBES + OC_KV_ZIPVL_RANDOM_PROBES) * 4;
        bytes[BUF_KVD_FLAGS] = C * 4;
        bytes[BUF_KVD_NORM] = C * 4;
        bytes[BUF_KVD_LISTS] = lists;
        bytes[BUF_KVD_COUNTS] = slots * 4;
    }
    memcpy(s->buf, bytes, sizeof bytes);
    for (int i = 0; i < N_BUF; i++) s->flags[i] = i >= BUF_ROPE_COS && i <= BUF_LOGITS ? OC_BT_HOST : 0;
    s->layers = pad(sizeof(oc_text_layer_bt) * L);
    s->inv_freq = pad(pairs * 4);
    s->table = pad((r->by_layer ? C : B) * pairs * 4);   /* by layer: the prompt's tables, once */
    s->policy = pad(sizeof(oc_kv_policy));
    s->book = evict ? oc_kv_book_bytes(hp->n_layers, hp->n_head_kv, lim->max_ctx_tokens) : 0;
    s->acc = pad(acc);
    s->scratch_d = evict ? pad(C * 8) : 0;
    /* the scoring's scratch for the pool's threads (oc_text_kv_score); after prefill also the
     * C doubles of SparseMM-within's tmp (oc_text_kv_compact) */
    size_t scores = oc_kv_score_scratch_bytes(hp->n_head, hp->n_head_kv, lim->max_ctx_tokens, hp->head_dim, n_threads);
    s->scores = evict ? pad(OC_MAX(scores, C * 8)) : 0;
    s->scratch_i = evict ? pad(C * 4) : 0;
    /* the batch's observed rows, then the ZipVL probes' (text_kv.c scores them at the prompt's end) */
    s->kv_q = evict ? pad((B + (p->n_acc_rows ? OC_KV_ZIPVL_RECENT_PROBES + OC_KV_ZIPVL_RANDOM_PROBES : 0)) * d * 4) : 0;
    /* a device's keys are read to the host to be scored: reserved here, not mapped per layer */
    s->kv_k = evict && kind != OC_BACKEND_KIND_CPU ? pad(C * kv * 2) : 0;
    s->vla = p->any_vla ? pad(C) : 0;
    if (evict && !s->book) return 0;
    s->host = s->layers + s->inv_freq + 2 * s->table + s->policy + s->book + s->acc + s->scores + s->scratch_d +
              4 * s->scratch_i + s->kv_q + s->kv_k + 2 * s->vla + s->kvd_n;
    return s->host >= s->acc;   /* no wrap */
}

static oc_backend_limits backend_limits(const oc_text_model *m, const oc_text_limits *lim, const oc_kv_policy *p) {
    const oc_text_hparams *hp = &m->hp;
    /* a layout's image spans are disjoint and non-empty inside the context, and an oc_context
     * allows at most 1024 images; an evicting layer attends per kv head once compacted */
    oc_backend_limits bl = { OC_MAX((int64_t)hp->n_embd, (int64_t)hp->n_ff), lim->max_batch_tokens,
                             { lim->max_batch_tokens, lim->max_ctx_tokens, hp->n_head, hp->n_head_kv, hp->head_dim },
                             OC_MIN(lim->max_ctx_tokens, 1024), 0, p->any_evict, p->any_vla ? lim->max_ctx_tokens : 0 };
    return bl;
}

/* The tensors take_weights hands the backend with data (each a buffer on a device). */
static size_t n_tensors(const oc_text_model *m) {
    size_t n = 2 + (m->output.data != m->token_embd.data) + (m->output_bias != NULL);   /* + output_norm */
    for (int32_t il = 0; il < m->hp.n_layers; il++) {
        const oc_text_layer *L = &m->layers[il];
        n += 2 + 7 + (L->bq != NULL) + (L->bk != NULL) + (L->bv != NULL);   /* norms, weights, biases */
    }
    return n;
}

size_t oc_text_ctx_bytes(const oc_text_model *m, const oc_text_limits *lim, const oc_backend_spec *spec,
                         int n_threads) {
    sizes s;
    oc_kv_policy p;
    oc_text_kv_regions r;
    if (policy_of(m, lim, &p, NULL) || !plan_sizes(m, lim, &p, spec->kind, n_threads, &s, &r)) return 0;
    oc_backend_limits bl = backend_limits(m, lim, &p);
    size_t be = oc_backend_bytes(spec, &bl, n_threads), total = be;
    if (spec->kind == OC_BACKEND_KIND_CPU && !be) return 0;
    if (!oc_add_block(&total, sizeof(oc_text_ctx)) || !oc_add_block(&total, s.host) ||
        !oc_add_size(total, n_tensors(m) * oc_backend_tensor_bytes(spec->kind), &total))
        return 0;
    for (int i = 0; i < N_BUF; i++)
        if (!oc_add_size(total, oc_backend_buffer_bytes(spec->kind, s.buf[i], s.flags[i]), &total)) return 0;
    return total;
}

static oc_bt *buffer(oc_text_ctx *c, int i) {
    oc_bt *all[N_BUF] = { &c->k_cache, &c->v_cache, &c->x, &c->xb, &c->q, &c->att, &c->k, &c->v, &c->ff_g,
                          &c->ff_u, &c->rope_cos, &c->rope_sin, &c->ids, &c->logits, &c->q_share,
                          &c->iota, &c->image_store, &c->zero, &c->kvd_acc, &c->kvd_stats, &c->kvd_part, &c->kvd_probes,
                          &c->kvd_flags, &c->kvd_norm, &c->kvd_lists, &c->kvd_counts };
    return all[i];
}

/* Every weight and 1-D tensor to the backend, once. */
static oc_status take_weights(oc_text_ctx *c, oc_error *err) {
    const oc_text_model *m = c->m;
    const oc_text_hparams *hp = &m->hp;
    oc_backend *be = c->be;
    const oc_backend_ops *op = be->ops;
    size_t d = (size_t)hp->n_embd * 4, kv = (size_t)hp->n_head_kv * (size_t)hp->head_dim * 4;
    oc_status st;
    if ((st = op->weight(be, &c->token_embd, &m->token_embd, err))) return st;
    c->output_tied = m->output.data == m->token_embd.data;   /* Qwen2-VL-2B: one copy on a device */
    if (c->output_tied) c->output = c->token_embd;
    else if ((st = op->weight(be, &c->output, &m->output, err))) return st;
    if ((st = op->import(be, &c->output_norm, m->output_norm, d, err)) ||
        (st = op->import(be, &c->output_bias, m->output_bias, (size_t)hp->n_vocab * 4, err)))
        return st;
    for (int32_t il = 0; il < hp->n_layers; il++) {
        const oc_text_layer *L = &m->layers[il];
        oc_text_layer_bt *B = &c->layers[il];
        if ((st = op->import(be, &B->attn_norm, L->attn_norm, d, err)) ||
            (st = op->import(be, &B->ffn_norm, L->ffn_norm, d, err)) ||
            (st = op->import(be, &B->bq, L->bq, d, err)) || (st = op->import(be, &B->bk, L->bk, kv, err)) ||
            (st = op->import(be, &B->bv, L->bv, kv, err)) || (st = op->weight(be, &B->wq, &L->wq, err)) ||
            (st = op->weight(be, &B->wk, &L->wk, err)) || (st = op->weight(be, &B->wv, &L->wv, err)) ||
            (st = op->weight(be, &B->wo, &L->wo, err)) || (st = op->weight(be, &B->gate, &L->gate, err)) ||
            (st = op->weight(be, &B->up, &L->up, err)) || (st = op->weight(be, &B->down, &L->down, err)))
            return st;
    }
    return OC_OK;
}

oc_status oc_text_ctx_open_backend(oc_text_ctx **out, const oc_text_model *m, const oc_text_limits *lim,
                                   const oc_backend_spec *spec, const oc_allocator *alloc, oc_error *err) {
    *out = NULL;
    if (!m || !lim || !spec || lim->max_ctx_tokens < 1 || lim->max_batch_tokens < 1 ||
        lim->max_batch_tokens > lim->max_ctx_tokens)
        return oc_fail(err, OC_ERR_INVALID, "text context: need 1 <= max_batch_tokens <= max_ctx_tokens");
    sizes s;
    oc_kv_policy pol;
    oc_status st = policy_of(m, lim, &pol, err);
    if (st) return st;
    oc_text_kv_regions reg;
    if (!plan_sizes(m, lim, &pol, spec->kind, oc_pool_n_threads(spec->pool), &s, &reg))
        return oc_fail(err, OC_ERR_RANGE, "text context: %d tokens of context do not fit in memory "
                       "arithmetic", lim->max_ctx_tokens);
    oc_text_ctx *c = oc_mem_calloc(alloc, sizeof *c);
    if (!c) return oc_fail(err, OC_ERR_NOMEM, "text context: out of memory");
    c->alloc = alloc ? *alloc : *oc_default_allocator();
    c->m = m;
    c->lim = *lim;
    c->kind = spec->kind;
    c->reg = reg;
    c->pool = spec->pool;
    if (!(c->kv_kern = oc_attn_kernels_for(spec->isa))) c->kv_kern = oc_attn_kernels_scalar();
    oc_backend_limits bl = backend_limits(m, lim, &pol);
    st = oc_backend_open(&c->be, spec, &bl, &c->alloc, err);
    if (st) goto fail;
    c->host_bytes = s.host;
    if (!(c->host = oc_mem_calloc(&c->alloc, s.host))) {
        st = oc_fail(err, OC_ERR_NOMEM, "text context: out of memory");
        goto fail;
    }
    char *h = c->host;
    c->layers = (oc_text_layer_bt *)(void *)h;
    c->inv_freq = (float *)(void *)(h + s.layers);
    c->cos_h = (float *)(void *)(h + s.layers + s.inv_freq);
    c->sin_h = (float *)(void *)(h + s.layers + s.inv_freq + s.table);
    h += s.layers + s.inv_freq + 2 * s.table;
    c->kvp = (oc_kv_policy *)(void *)h;
    *c->kvp = pol;
    h += s.policy;
    if (pol.any_evict) {
        oc_kv_book_init(&c->book, m->hp.n_layers, m->hp.n_head_kv, lim->max_ctx_tokens, h);
        h += s.book;
        c->kv_acc = (double *)(void *)h;
        h += s.acc;
        c->kv_scores = h;
        c->kv_norm = (double *)(void *)(h + s.scores);
        h += s.scores + s.scratch_d;
        c->kv_kept = (int32_t *)(void *)h;
        c->kv_order = (int32_t *)(void *)(h + s.scratch_i);
        c->kv_nnz = (int32_t *)(void *)(h + 2 * s.scratch_i);
        c->kv_move = (int32_t *)(void *)(h + 3 * s.scratch_i);
        h += 4 * s.scratch_i;
        c->kv_q = (float *)(void *)h;
        h += s.kv_q;
        c->kv_k = s.kv_k ? (uint16_t *)(void *)h : NULL;
        h += s.kv_k;
    }
    if (pol.any_vla) {
        c->tok_visual = (uint8_t *)h;
        c->kv_shared = (uint8_t *)h + s.vla;
    }
    h += 2 * s.vla;
    if (s.kvd_n) c->kvd_n = (int32_t *)(void *)h;
    oc_rope_inv_freq(c->inv_freq, m->hp.head_dim, m->hp.rope_base);
    if ((st = take_weights(c, err))) goto fail;
    for (int i = 0; i < N_BUF; i++) {
        if (!s.buf[i]) continue;   /* a part this policy does not use stays a zeroed (absent) buffer */
        if ((st = c->be->ops->alloc(c->be, buffer(c, i), s.buf[i], s.flags[i], err))) {
            if (st == OC_ERR_NOMEM)
                st = oc_fail(err, st, "text context: out of memory for %zu bytes (KV cache of %d tokens and "
                             "scratch)", s.buf[i], lim->max_ctx_tokens);
            goto fail;
        }
    }
    /* the tables stay bound to the host arrays they are computed in */
    size_t table_bytes = s.buf[BUF_ROPE_COS];
    if ((st = c->be->ops->bind(c->be, &c->rope_cos, c->cos_h, table_bytes, err)) ||
        (st = c->be->ops->bind(c->be, &c->rope_sin, c->sin_h, table_bytes, err)))
        goto fail;
    if (pol.any_lazy) {   /* 0..B-1 once: gather_rows copies row runs with it */
        int32_t *iota = (int32_t *)(void *)c->kv_probes, B = lim->max_batch_tokens;
        for (int32_t i0 = 0; i0 < B && !st; i0 += (int32_t)OC_ARRAY_LEN(c->kv_probes)) {
            int32_t n = OC_MIN((int32_t)OC_ARRAY_LEN(c->kv_probes), B - i0);
            for (int32_t i = 0; i < n; i++) iota[i] = i0 + i;
            st = c->be->ops->write(c->be, &c->iota, (size_t)i0 * 4, iota, (size_t)n * 4, err);
        }
        if (st) goto fail;
    }
    *out = c;
    return OC_OK;
fail:
    oc_text_ctx_close(c);
    return st;
}

oc_status oc_text_ctx_open(oc_text_ctx **out, const oc_text_model *m, const oc_text_limits *lim,
                           oc_pool *pool, oc_isa isa, const oc_allocator *alloc, oc_error *err) {
    oc_backend_spec spec = oc_graph_cpu_spec(pool, isa);
    return oc_text_ctx_open_backend(out, m, lim, &spec, alloc, err);
}

/* oc_graph_tensors_fn (graph_ctx.h): the buffers and the weights outside the layers (il -1), or
 * layer il's weights. */
static int tensors(void *ctx, int32_t il, oc_bt **out) {
    oc_text_ctx *c = ctx;
    int n = 0;
    if (il < 0) {
        for (int i = 0; i < N_BUF; i++) out[n++] = buffer(c, i);
        out[n++] = &c->output_norm;
        out[n++] = &c->output_bias;
        if (!c->output_tied) out[n++] = &c->output.t;
        out[n++] = &c->token_embd.t;
        return n;
    }
    oc_text_layer_bt *B = &c->layers[il];
    oc_bt *all[] = { &B->attn_norm, &B->ffn_norm, &B->bq, &B->bk, &B->bv, &B->wq.t, &B->wk.t, &B->wv.t,
                     &B->wo.t, &B->gate.t, &B->up.t, &B->down.t };
    memcpy(out, all, sizeof all);
    return (int)OC_ARRAY_LEN(all);
}

void oc_text_ctx_close(oc_text_ctx *c) {
    if (c) oc_graph_ctx_free(c, sizeof *c, c->be, c->layers ? c->m->hp.n_layers : 0, tensors, c->alloc, c->host,
                             c->host_bytes);
}

int oc_text_ctx_prefills_by_layer(const oc_text_ctx *c) { return c->reg.by_layer; }

void oc_text_ctx_reset(oc_text_ctx *c) {
    c->n_past = 0;
    memset(&c->times, 0, sizeof c->times);
    if (c->kvp->any_evict) oc_kv_book_reset(&c->book);
}

oc_text_times oc_text_ctx_times(const oc_text_ctx *c) { return c->times; }
void oc_text_ctx_time_sync(oc_text_ctx *c, oc_backend_device *sync_dev) { c->sync_dev = sync_dev; }

uint64_t oc_text_clock(const oc_text_ctx *c) {
    if (c->sync_dev) oc_backend_device_finish(c->sync_dev, NULL);   /* a failure shows at the next op */
    return oc_port_now_ns();
}

void oc_text_ctx_kv_bytes(const oc_text_ctx *c, size_t *held, size_t *capacity) {
    const oc_text_hparams *hp = &c->m->hp;
    *capacity = c->k_cache.n_bytes + c->v_cache.n_bytes;
    if (c->kvp->any_evict) {
        *held = oc_kv_book_held_bytes(&c->book, c->kvp, hp->head_dim, c->tok_visual);
        return;
    }
    size_t row = (size_t)hp->n_head_kv * (size_t)hp->head_dim * 2, n_visual = 0, n_vla = 0;
    for (int32_t j = 0; c->tok_visual && j < c->n_past; j++) n_visual += c->tok_visual[j];
    for (int32_t l = 0; l < hp->n_layers; l++) n_vla += c->kvp->layer[l].lazy == OC_KV_LAZY_VLA;
    /* a VLA lazy layer holds no key rows for the visual tokens (its group's first layer's are read) */
    *held = row * ((size_t)c->n_past * ((size_t)c->kvp->n_k_slots + (size_t)hp->n_layers) - n_visual * n_vla);
}

int32_t oc_text_ctx_kv_held(const oc_text_ctx *c, int32_t layer, int32_t kv_head, const int32_t **pos) {
    if (!c->kvp->any_evict || layer >= c->book.n_compacted || c->kvp->layer[layer].evict == OC_KV_KEEP_ALL) {
        *pos = NULL;   /* every token 0..n_past-1 */
        return c->n_past;
    }
    *pos = oc_kv_book_pos(&c->book, layer, kv_head);
    return *oc_kv_book_n(&c->book, layer, kv_head);
}
int32_t oc_text_ctx_n_past(const oc_text_ctx *c) { return c->n_past; }

oc_status oc_text_ctx_image_store_open(oc_text_ctx *ctx, int32_t n_rows, oc_error *err) {
    if (!ctx || n_rows < 1 || ctx->image_store.n_bytes)
        return oc_fail(err, OC_ERR_INVALID, "text context: image store of %d rows (or a second one)", (int)n_rows);
    oc_backend *be = ctx->be;
    size_t bytes;
    int32_t zero = 0;
    if (!oc_mul_size((size_t)n_rows * sizeof(float), (size_t)ctx->m->hp.n_embd, &bytes))
        return oc_fail(err, OC_ERR_NOMEM, "text context: image store of %d rows overflows", (int)n_rows);
    oc_status st;
    if ((st = be->ops->alloc(be, &ctx->image_store, bytes, 0, err)) ||
        (st = be->ops->alloc(be, &ctx->zero, sizeof zero, 0, err)) ||
        (st = be->ops->write(be, &ctx->zero, 0, &zero, sizeof zero, err))) {
        be->ops->free(be, &ctx->image_store);   /* zeroed again, so close frees nothing twice */
        be->ops->free(be, &ctx->zero);
        memset(&ctx->image_store, 0, sizeof ctx->image_store);
        memset(&ctx->zero, 0, sizeof ctx->zero);
    }
    return st;
}

oc_bt *oc_text_ctx_image_store(oc_text_ctx *ctx) { return ctx && ctx->image_store.n_bytes ? &ctx->image_store : NULL; }
