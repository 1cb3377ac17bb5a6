/* text_kv.c: the language model's KV cache eviction (kvcache/kv_cache.h) as the forward pass
 * (text_layer.c, text_prefill.c) drives it: while a prompt is prefilled, each evicting layer scores the rows
 * that the papers observe (SparseMM: the last w queries, sparsemm.txt Eq. 10-13; ZipVL: the probe
 * rows, zipvl.txt supplement Eq. A) against the keys they see; when the batch that ends the prompt
 * is done, every evicting layer picks its tokens (Eq. 14; Eq. 6-9) and the backend compacts its
 * rows in place, together with the rows of the lazy layers that follow it. The scores read q and
 * the K cache through the backend's transfer operations (on a device a copy into host memory
 * reserved at open, so prefill allocates nothing there either). */
#include "model/text_ctx.h"

#include <math.h>
#include <string.h>

void oc_text_kv_start(oc_text_ctx *c, int32_t prompt_tokens) {
    memset(c->kv_acc, 0, (size_t)c->kvp->n_acc_rows * (size_t)c->lim.max_ctx_tokens * sizeof(double));
    c->n_kv_probes = oc_kv_zipvl_probes(prompt_tokens, c->kv_probes);
    c->kv_dev = 0;   /* the host's arrays, until oc_text_kv_dev_start */
    c->n_kvd_pending = 0;
}

/* The batch's q rows at positions pos[0..n_rows) to host rows dst[0..n_rows): runs of consecutive
 * positions in one read each (on a device every read waits for the queue: one per row made the
 * 128 probe rows 128 round trips). */
static oc_status read_q(oc_text_ctx *c, const int32_t *pos, int32_t n_rows, float *dst, oc_error *err) {
    oc_backend *be = c->be;
    size_t d = (size_t)c->m->hp.n_embd;
    for (int32_t r = 0; r < n_rows;) {
        int32_t e = r + 1;
        while (e < n_rows && pos[e] == pos[e - 1] + 1) e++;
        oc_status st = be->ops->read(be, &c->q, (size_t)(pos[r] - c->n_past) * d * 4, dst + (size_t)r * d,
                                     (size_t)(e - r) * d * 4, err);
        if (st) return st;
        r = e;
    }
    return OC_OK;
}

/* Adds the attention of the host q rows q[0..n_rows) at positions pos[0..n_rows) to acc
 * (stride_head: 0 sums every head into one row, C gives one row per kv head), over layer il's
 * prompt keys in the cache. */
static oc_status score(oc_text_ctx *c, int32_t il, const float *q, const int32_t *pos, int32_t n_rows, double *acc,
                       int64_t acc_stride_head, oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    oc_backend *be = c->be;
    int32_t end = pos[n_rows - 1] + 1;
    size_t d = (size_t)hp->n_embd, kvd = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    oc_status st;
    size_t k_at = (size_t)c->reg.k_pre[il] * 2, k_bytes = (size_t)end * kvd * 2;   /* the prompt's keys */
    /* the CPU's cache is host memory, read in place; a device's is read into the reserved copy */
    const uint16_t *k = c->kv_k;
    if (!k && !(k = be->ops->map_read(be, &c->k_cache, k_at, k_bytes, err))) return err ? err->status : OC_ERR_DEVICE;
    if (k == c->kv_k && (st = be->ops->read(be, &c->k_cache, k_at, c->kv_k, k_bytes, err))) return st;
    oc_kv_rows rows = { q, (int64_t)d, hp->head_dim, pos, n_rows, k, NULL, (int64_t)kvd, hp->head_dim,
                        hp->n_head, hp->n_head_kv, hp->head_dim, 1.0f / sqrtf((float)hp->head_dim) };
    oc_kv_score_rows(&rows, acc, acc_stride_head, c->kv_scores, c->kv_kern, c->pool);
    if (k != c->kv_k) be->ops->unmap(be, &c->k_cache, k);
    return OC_OK;
}

oc_status oc_text_kv_score(oc_text_ctx *c, const oc_text_batch *b, int32_t il, oc_error *err) {
    const oc_kv_layer *P = &c->kvp->layer[il];
    if ((P->acc_row < 0 && P->zipvl_row < 0) || b->prompt_tokens <= 0 || il < c->book.n_compacted) return OC_OK;
    if (c->kv_dev) return oc_text_kv_dev_score(c, b, il, err);
    int32_t first = c->n_past, end = first + b->n_tokens, C = c->lim.max_ctx_tokens, n_rows = 0;
    int32_t *pos = c->kv_order;
    oc_status st;
    if (P->acc_row >= 0) {   /* SparseMM: the prompt's last w queries (Eq. 11) */
        for (int32_t p = OC_MAX(first, b->prompt_tokens - c->kvp->window); p < end; p++) pos[n_rows++] = p;
        if (n_rows && ((st = read_q(c, pos, n_rows, c->kv_q, err)) ||
                       (st = score(c, il, c->kv_q, pos, n_rows, c->kv_acc + (size_t)P->acc_row * (size_t)C, C, err))))
            return st;
    }
    if (P->zipvl_row >= 0 && c->n_kv_probes > 0) {
        /* ZipVL: the probe rows of this batch wait in their rows of the probes' q (kv_q after the
         * batch's B rows), and the last batch of the prompt scores all of them in one call, when every
         * key they see is in the cache. Scored batch by batch instead, the probes a batch held (a few
         * random ones in most 256-token chunks) cost two pool dispatches and a pass over every key
         * before them each: per layer about 17 scorings of a 4,400-token prompt instead of one. A probe
         * sees the keys up to its own position either way (Eq. A's causal mask), so the scores are
         * the same; only the order in which acc adds the rows' shares changes (in double). */
        float *stash = c->kv_q + (size_t)c->lim.max_batch_tokens * (size_t)c->m->hp.n_embd;
        int32_t t0 = 0;
        while (t0 < c->n_kv_probes && c->kv_probes[t0] < first) t0++;
        int32_t t1 = t0;
        while (t1 < c->n_kv_probes && c->kv_probes[t1] < end) t1++;
        if (t1 > t0 && (st = read_q(c, c->kv_probes + t0, t1 - t0, stash + (size_t)t0 * (size_t)c->m->hp.n_embd, err)))
            return st;
        if (c->kv_probes[c->n_kv_probes - 1] < end && c->kv_probes[c->n_kv_probes - 1] >= first &&
            (st = score(c, il, stash, c->kv_probes, c->n_kv_probes, c->kv_acc + (size_t)P->zipvl_row * (size_t)C, 0, err)))
            return st;
    }
    return OC_OK;
}

oc_status oc_text_kv_score_timed(oc_text_ctx *c, const oc_text_batch *b, int32_t il, oc_error *err) {
    const oc_kv_layer *P = &c->kvp->layer[il];
    if ((P->acc_row < 0 && P->zipvl_row < 0) || b->prompt_tokens <= 0) return OC_OK;   /* no clock for nothing */
    uint64_t t0 = oc_text_clock(c);
    oc_status st = oc_text_kv_score(c, b, il, err);
    c->times.score_ns += oc_text_clock(c) - t0;
    return st;
}

/* Keep kept[0..n_kept) of kv head g in every layer that follows layer `first` (itself included):
 * their V rows, their own K rows (GLA lazy layers read the first layer's), the book. Row kept[r]
 * of the prompt's rows (staging, or the region itself) moves to row r of the region: staging lies
 * after every region, so each source row is at or after its destination (kv_keep's order). */
oc_status oc_text_kv_keep(oc_text_ctx *c, int32_t first, int32_t g, const int32_t *kept, int32_t n_kept, oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    const oc_text_kv_regions *R = &c->reg;
    oc_backend *be = c->be;
    int64_t hd = hp->head_dim, kvd = (int64_t)hp->n_head_kv * hd;
    oc_status st;
    for (int32_t l = first; l < hp->n_layers; l++) {
        const oc_kv_layer *L = &c->kvp->layer[l];
        if (L->first != first) continue;
        if (L->lazy != OC_KV_LAZY_GLA) {
            int32_t shift = (int32_t)((R->k_pre[l] - R->k_at[l]) / kvd);
            for (int32_t r = 0; r < n_kept; r++) c->kv_move[r] = kept[r] + shift;
            if ((st = be->ops->kv_keep(be, &c->k_cache, R->k_at[l] + g * hd, kvd, (int32_t)hd, c->kv_move, n_kept, err)))
                return st;
        }
        int32_t shift = (int32_t)((R->v_pre[l] - R->v_at[l]) / kvd);
        for (int32_t r = 0; r < n_kept; r++) c->kv_move[r] = kept[r] + shift;
        if ((st = be->ops->kv_keep(be, &c->v_cache, R->v_at[l] + g * hd, kvd, (int32_t)hd, c->kv_move, n_kept, err)))
            return st;
        oc_kv_book_keep(&c->book, l, g, kept, n_kept);
    }
    return OC_OK;
}

int32_t oc_text_kv_zipvl_set(oc_text_ctx *c, int32_t il) {
    const oc_text_hparams *hp = &c->m->hp;
    const oc_kv_layer *L = &c->kvp->layer[il];
    int32_t n = c->n_past;
    /* rows of every head see key j when their probe position is >= j (Eq. 8's nnz) */
    for (int32_t j = 0, t = 0; j < n; j++) {
        while (t < c->n_kv_probes && c->kv_probes[t] < j) t++;
        c->kv_nnz[j] = (c->n_kv_probes - t) * hp->n_head;
    }
    return oc_kv_select_zipvl(c->kv_acc + (size_t)L->zipvl_row * (size_t)c->lim.max_ctx_tokens, c->kv_nnz, n,
                              (double)c->n_kv_probes * hp->n_head, L->zipvl_tau, c->kv_kept, c->kv_order, c->kv_norm);
}

oc_status oc_text_kv_compact(oc_text_ctx *c, int32_t first, int32_t last, oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    const oc_kv_policy *p = c->kvp;
    int32_t n = c->n_past, C = c->lim.max_ctx_tokens;
    oc_status st;
    if (c->kv_dev) return oc_text_kv_dev_compact(c, first, last, err);
    for (int32_t l = first; l <= last; l++) {
        const oc_kv_layer *L = &p->layer[l];
        if (L->first != l || L->evict == OC_KV_KEEP_ALL) continue;
        int32_t n_t = n;
        const int32_t *within = NULL;
        if (L->zipvl_row >= 0) {   /* ZipVL: one important set T for the layer */
            n_t = oc_text_kv_zipvl_set(c, l);
            if (L->acc_row < 0) {
                for (int32_t g = 0; g < hp->n_head_kv; g++)
                    if ((st = oc_text_kv_keep(c, l, g, c->kv_kept, n_t, err))) return st;
                continue;
            }
            memcpy(c->kv_nnz, c->kv_kept, (size_t)n_t * sizeof(int32_t));   /* T, for the budgets below */
            within = c->kv_nnz;
        }
        for (int32_t g = 0; g < hp->n_head_kv; g++) {   /* SparseMM: each kv head its own budget */
            const double *acc = c->kv_acc + ((size_t)L->acc_row + (size_t)g) * (size_t)C;
            int32_t budget = oc_kv_policy_budget(p, l, g), m;
            if (within)
                m = oc_kv_select_sparsemm_within(acc, within, n_t, budget, p->window, c->kv_kept, c->kv_order,
                                                 c->kv_scores);
            else
                m = oc_kv_select_sparsemm(acc, n, budget, p->window, c->kv_kept, c->kv_order);
            if ((st = oc_text_kv_keep(c, l, g, c->kv_kept, m, err))) return st;
        }
    }
    c->book.n_compacted = last + 1;
    return OC_OK;
}

oc_status oc_text_ctx_bench_fill(oc_text_ctx *c, const uint16_t *rows_f16, const double *mass, int32_t n, oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    const oc_kv_policy *p = c->kvp;
    const oc_text_kv_regions *R = &c->reg;
    int32_t C = c->lim.max_ctx_tokens;
    if (n < 1 || n >= C) return oc_fail(err, OC_ERR_RANGE, "bench fill: %d tokens do not fit a context of %d", n, C);
    oc_text_ctx_reset(c);
    size_t kvd = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    oc_status st;
    if (p->any_evict) {
        oc_kv_book_append(&c->book, 0, n);
        oc_text_kv_start(c, n);
        double sum = 0;
        for (int32_t j = 0; j < n; j++) sum += mass[j];
        for (int32_t r = 0; r < p->n_acc_rows; r++) {
            /* SparseMM rows: mean over the window (any scale ranks the same); the ZipVL row: the
             * probe rows' total, n_probes x n_head, as real softmax rows would sum to (Eq. 7) */
            double scale = (double)c->n_kv_probes * hp->n_head / sum;
            for (int32_t j = 0; j < n; j++) c->kv_acc[(size_t)r * (size_t)C + (size_t)j] = mass[j] * scale;
        }
    }
    c->n_past = n;
    /* every token text: a VLA lazy layer holds (and the fill writes) its own keys for all of them */
    if (c->tok_visual) memset(c->tok_visual, 0, (size_t)n);
    /* segment by segment, as a prefill by layer stages and evicts them */
    for (int32_t l0 = 0; l0 < hp->n_layers;) {
        int32_t l1 = oc_kv_policy_segment_end(p, l0);
        for (int32_t l = l0; l <= l1; l++)
            if ((p->layer[l].lazy != OC_KV_LAZY_GLA &&
                 (st = c->be->ops->write(c->be, &c->k_cache, (size_t)R->k_pre[l] * 2, rows_f16, (size_t)n * kvd * 2, err))) ||
                (st = c->be->ops->write(c->be, &c->v_cache, (size_t)R->v_pre[l] * 2, rows_f16, (size_t)n * kvd * 2, err)))
                return st;
        if (p->any_evict && (st = oc_text_kv_compact(c, l0, l1, err))) return st;
        l0 = l1 + 1;
    }
    return OC_OK;
}
