/* text_prefill.c: a whole prompt through a context whose plan evicts (kvcache/kv_cache.h "Memory"),
 * segment by segment (a lazy group, or one layer): every chunk of max_batch_tokens runs through the
 * segment's layers, its rows of x staying in the prompt-long x, and the segment evicts before the
 * next one reuses the staging slots.
 *
 * A segment whose first layer has a ZipVL threshold runs ZipVL's prefill (zipvl.txt Alg. 1, Sec.
 * 4.2) in two passes over the chunks:
 *  A. the first layer's q, k, v; its keys and values go to the prompt's rows and its probe rows
 *     (64 recent + 64 random, kv_select.h) are scored against the keys they see (Eq. A, 6); then
 *     p from the cumulative mass >= tau (Eq. 7) and T, the top p by normalized mass (Eq. 8-9); K[T]
 *     and V[T] move down in place: the others are evicted (Eq. 10) before any attention ran;
 *  B. every layer of the segment again: q (and the shared q/k of a lazy group) recomputed, the
 *     lazy layers' own K / V stored for the rows in T only, and O = attention(Q[T], K[T], V[T]):
 *     the chunk's rows in T attend causally over T, every other row's attention output is 0 ("padded
 *     to maintain the number of tokens"), so x += (O Wo) only on T's rows; then the MLP on every row.
 * Pass B recomputes the first layer's q rather than keeping the whole prompt's ([context][n_embd]
 * f32): one more q product per chunk against a buffer as large as x (its k and v are in the cache
 * from pass A: not recomputed).
 * A layer with both kv-budget and zipvl-tau then keeps each kv head's budget within T (kv_cache.h).
 * Head patterns on a ZipVL layer are not applied: its prefill attends over T densely. A layer whose
 * zipvl-tau says "prefill heads" (ours, kv_cache.h) takes the ordinary path below instead: its own
 * prefill, then oc_text_kv_compact keeps T. */
#include "model/text_ctx.h"

#include <string.h>

static void notify(const oc_text_ctx *c, const oc_text_batch *b, int32_t l0, int32_t l1) {
    const int32_t *t = oc_kv_book_pos(&c->book, l0, 0);
    int32_t n = *oc_kv_book_n(&c->book, l0, 0);
    if (b->on_zipvl)
        for (int32_t l = l0; l <= l1; l++) b->on_zipvl(b->user, l, t, n);
}

/* The first index of T[0..n) at or after position p (T ascending). */
static int32_t lower_bound(const int32_t *t, int32_t n, int32_t p) {
    int32_t lo = 0, hi = n;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (t[mid] < p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Pass B's part of layer il for the chunk k (rows s..): T's rows of the chunk are T[i0..i0 + m),
 * their chunk rows c->kv_move[0..m) (also in the backend's ids buffer). */
static oc_status sparse_attention(oc_text_ctx *c, const oc_text_batch *k, int32_t il, int32_t l0, int64_t xo,
                                  int32_t i0, int32_t m, oc_attn_stats *stats, oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    const oc_kv_layer *P = &c->kvp->layer[il];
    oc_backend *be = c->be;
    const oc_backend_ops *op = be->ops;
    int64_t d = hp->n_embd, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    const int32_t *rows = c->kv_move;
    oc_status st;
    /* a lazy layer's own K (VLA: of its text rows) and V of T's rows, at T's indices (the first
     * layer's are there); runs of consecutive rows of one kind */
    const uint8_t *vis = P->lazy == OC_KV_LAZY_VLA ? c->tok_visual + c->n_past : NULL;
    for (int32_t r = 0; il != l0 && r < m;) {
        int32_t e = r + 1;
        while (e < m && rows[e] == rows[e - 1] + 1 && !(vis && vis[rows[e]] != vis[rows[r]])) e++;
        int64_t src = (int64_t)rows[r] * kvd, dst = (int64_t)(i0 + r) * kvd, n = (int64_t)(e - r) * kvd;
        if ((P->lazy != OC_KV_LAZY_GLA && !(vis && vis[rows[r]]) &&
             (st = op->kv_store(be, &c->k, src, &c->k_cache, oc_text_k_base(c, il) + dst, n, err))) ||
            (st = op->kv_store(be, &c->v, src, &c->v_cache, oc_text_v_base(c, il) + dst, n, err)))
            return st;
        r = e;
    }
    if (m == 0) return OC_OK;
    /* Q[T] of the chunk -> xb; O = attention(Q[T], K[T], V[T]) -> att rows 0..m-1 (causal in T's
     * order: T ascending, so T index i sees T indices <= i) */
    oc_bt *q = P->lazy == OC_KV_LAZY_GLA ? &c->q_share : &c->q;
    if ((st = op->gather_rows(be, &c->xb, 0, q, 0, &c->ids, m, d, 1, err))) return st;
    oc_attn_call a = oc_text_attn_call(c, il, m);
    a.n_kv = i0 + m;
    a.q_offset = i0;
    oc_text_vla_keys(c, il, &a, 0, 0, oc_kv_book_pos(&c->book, il, 0), i0 + m, 0);   /* key r: token T[r] */
    oc_attn_bt t = { &c->xb, &c->k_cache, &c->v_cache, &c->att };
    uint64_t t0 = oc_text_clock(c);
    st = op->attention(be, &a, &t, stats, err);
    c->times.attn_ns += oc_text_clock(c) - t0;
    if (st || (st = op->matmul(be, &c->layers[il].wo, &c->att, 0, d, &c->xb, 0, d, m, NULL, err)))
        return st;
    /* x += O Wo on T's rows only (the others' output is 0) */
    for (int32_t r = 0; r < m;) {
        int32_t e = r + 1;
        while (e < m && rows[e] == rows[e - 1] + 1) e++;
        if ((st = op->add(be, &c->x, xo + (int64_t)rows[r] * d, &c->xb, (int64_t)r * d, (int64_t)(e - r) * d, err)))
            return st;
        r = e;
    }
    return OC_OK;
}

/* zipvl.txt Alg. 1 for the segment l0..l1 (the file's header). */
static oc_status zipvl_segment(oc_text_ctx *c, const oc_text_batch *b, int32_t l0, int32_t l1, oc_attn_stats *stats,
                               oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    const oc_kv_layer *F = &c->kvp->layer[l0];
    oc_backend *be = c->be;
    int32_t P = b->n_tokens, B = c->lim.max_batch_tokens, hd = hp->head_dim;
    int64_t d = hp->n_embd, kvd = (int64_t)hp->n_head_kv * hd;
    oc_status st;
    /* A: Q, K, V of the first layer; K, V -> the prompt's rows; the probe (and window) rows scored */
    for (int32_t s = 0; s < P; s += B) {
        oc_text_batch k = oc_text_chunk(c, b, s, OC_MIN(B, P - s));
        c->n_past = s;
        if ((st = oc_text_tables_prompt(c, &k, s, l0 == 0, err)) || (l0 == 0 && (st = oc_text_inputs(c, &k, s * d, err))) ||
            (st = oc_text_layer_qkv(c, &k, l0, s * d, err)) ||
            (st = be->ops->kv_store(be, &c->k, 0, &c->k_cache, oc_text_k_base(c, l0) + s * kvd, k.n_tokens * kvd, err)) ||
            (st = be->ops->kv_store(be, &c->v, 0, &c->v_cache, oc_text_v_base(c, l0) + s * kvd, k.n_tokens * kvd, err)) ||
            (st = oc_text_kv_score_timed(c, &k, l0, err)))
            return st;
    }
    c->n_past = P;
    /* T (Eq. 6-9); K[T], V[T] move down in place for every kv head, the book follows */
    uint64_t t_select = oc_text_clock(c);
    int32_t n_t = 0;
    if (!c->kv_dev) n_t = oc_text_kv_zipvl_set(c, l0);
    else if ((st = oc_text_kv_dev_zipvl_set(c, l0, &n_t, err))) return st;
    for (int32_t g = 0; g < hp->n_head_kv; g++) {
        oc_bt *caches[2] = { &c->k_cache, &c->v_cache };
        int64_t at[2] = { oc_text_k_base(c, l0), oc_text_v_base(c, l0) };
        for (int w = 0; w < 2; w++)
            if ((st = be->ops->kv_keep(be, caches[w], at[w] + g * hd, kvd, hd, c->kv_kept, n_t, err))) return st;
        for (int32_t l = l0; l <= l1; l++) oc_kv_book_keep(&c->book, l, g, c->kv_kept, n_t);
    }
    c->times.select_ns += oc_text_clock(c) - t_select;
    notify(c, b, l0, l1);
    /* B: every layer of the segment, attention over T */
    /* the counts a device deferred first (backend.h attn_stats_flush: no wait when none is), so
     * the difference below is this pass's alone */
    if (be->ops->attn_stats_flush && (st = be->ops->attn_stats_flush(be, err))) return st;
    uint64_t kept_before = stats ? stats->flops_kept : 0;
    const int32_t *t = oc_kv_book_pos(&c->book, l0, 0);
    for (int32_t s = 0; s < P; s += B) {
        oc_text_batch k = oc_text_chunk(c, b, s, OC_MIN(B, P - s));
        int32_t i0 = lower_bound(t, n_t, s), m = lower_bound(t, n_t, s + k.n_tokens) - i0;
        for (int32_t r = 0; r < m; r++) c->kv_move[r] = t[i0 + r] - s;
        size_t idx_bytes = (size_t)OC_MAX(m, 1) * sizeof(int32_t);
        c->n_past = s;
        if ((st = oc_text_tables_prompt(c, &k, s, 0, err)) || (st = be->ops->bind(be, &c->ids, c->kv_move, idx_bytes, err)) ||
            (st = be->ops->write(be, &c->ids, 0, c->kv_move, idx_bytes, err)))
            return st;
        for (int32_t il = l0; il <= l1; il++)
            if ((st = il == l0 ? oc_text_layer_q(c, &k, il, s * d, err) : oc_text_layer_qkv(c, &k, il, s * d, err)) ||
                (st = sparse_attention(c, &k, il, l0, s * d, i0, m, stats, err)) ||
                (st = oc_text_layer_mlp(c, &k, il, s * d, err)))
                return st;
    }
    c->n_past = P;
    if (be->ops->attn_stats_flush && (st = be->ops->attn_stats_flush(be, err))) return st;
    /* the causal pairs of the prompt that attention over T left out count as skipped (the counters'
     * definition, attn.h): every row outside T, and the keys outside T of the rows in it */
    uint64_t dense = (uint64_t)(l1 - l0 + 1) * (uint64_t)hp->n_head * 4u * (uint64_t)hd * ((uint64_t)P * (uint64_t)(P + 1) / 2u);
    uint64_t kept = stats ? stats->flops_kept - kept_before : 0;
    if (stats && dense > kept) stats->flops_skipped += dense - kept;
    if (F->acc_row < 0) return OC_OK;   /* ZipVL alone: T stays where it is (the region is the context's) */
    /* kv-budget within T (kv_cache.h): each kv head's SparseMM choice among T, by T's indices */
    t_select = oc_text_clock(c);
    if (c->kv_dev) {   /* T is on the device too: each kv head's budget within it, queued */
        st = oc_text_kv_dev_budget_in_t(c, l0, err);
        c->times.select_ns += oc_text_clock(c) - t_select;
        return st;
    }
    memcpy(c->kv_nnz, t, (size_t)n_t * sizeof(int32_t));
    for (int32_t g = 0; g < hp->n_head_kv; g++) {
        const double *acc = c->kv_acc + ((size_t)F->acc_row + (size_t)g) * (size_t)c->lim.max_ctx_tokens;
        int32_t m = oc_kv_select_sparsemm_within(acc, c->kv_nnz, n_t, oc_kv_policy_budget(c->kvp, l0, g),
                                                 c->kvp->window, c->kv_kept, c->kv_order, c->kv_scores);
        for (int32_t r = 0, i = 0; r < m; r++) {   /* positions -> indices into T (both ascending) */
            while (c->kv_nnz[i] < c->kv_kept[r]) i++;
            c->kv_kept[r] = i;
        }
        if ((st = oc_text_kv_keep(c, l0, g, c->kv_kept, m, err))) return st;
    }
    c->times.select_ns += oc_text_clock(c) - t_select;
    return OC_OK;
}

/* One float read back: returns once every queued operation has run. */
static oc_status be_read_one(oc_text_ctx *c, float *one, oc_error *err) {
    return c->be->ops->read(c->be, &c->rope_cos, 0, one, sizeof *one, err);
}

oc_status oc_text_prefill_by_layer(oc_text_ctx *c, const oc_text_batch *b, oc_attn_stats *stats, oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    int32_t P = b->n_tokens, B = c->lim.max_batch_tokens;
    int64_t d = hp->n_embd;
    oc_status st;
    oc_text_kv_start(c, P);
    if ((st = oc_text_kv_dev_start(c, err))) return st;
    oc_kv_book_append(&c->book, 0, P);
    for (int32_t l0 = 0; l0 < hp->n_layers;) {
        int32_t l1 = oc_kv_policy_segment_end(c->kvp, l0);
        if (c->kvp->layer[l0].zipvl_row >= 0 && !c->kvp->layer[l0].zipvl_heads_prefill) {
            if ((st = zipvl_segment(c, b, l0, l1, stats, err))) return st;
            c->book.n_compacted = l1 + 1;
        } else {
            for (int32_t s = 0; s < P; s += B) {
                oc_text_batch k = oc_text_chunk(c, b, s, OC_MIN(B, P - s));
                c->n_past = s;   /* the chunk's rows follow the prompt's rows before it */
                if ((st = oc_text_tables_prompt(c, &k, s, l0 == 0, err)) ||
                    (l0 == 0 && (st = oc_text_inputs(c, &k, s * d, err))))
                    return st;
                for (int32_t il = l0; il <= l1; il++)
                    if ((st = oc_text_layer_forward(c, &k, il, s * d, stats, err))) return st;
            }
            c->n_past = P;
            uint64_t t0 = oc_text_clock(c);
            st = oc_text_kv_compact(c, l0, l1, err);
            c->times.select_ns += oc_text_clock(c) - t0;
            if (st) return st;
        }
        l0 = l1 + 1;
    }
    if (c->kv_dev) {   /* the sets the device chose, into the book (one wait, after every layer) */
        uint64_t t0 = oc_text_clock(c);
        st = oc_text_kv_dev_finish(c, err);
        c->times.select_ns += oc_text_clock(c) - t0;
        if (st) return st;
    }
    if (!b->logits) {   /* the queued table uploads read the host's tables: done before they change */
        float one;
        return be_read_one(c, &one, err);
    }
    for (int32_t s = b->all_logits ? 0 : P - 1; s < P; s += B)
        if ((st = oc_text_head(c, s, OC_MIN(B, P - s), b->logits + (b->all_logits ? (size_t)s * (size_t)hp->n_vocab : 0),
                               err)))
            return st;
    return OC_OK;
}
