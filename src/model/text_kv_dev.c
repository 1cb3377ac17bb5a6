/* text_kv_dev.c: text_kv.c's scoring, selection and compaction on a backend that runs them where the
 * KV cache is (backend.h kv_dev: OpenCL). The host path reads every observed q row and the
 * prompt's keys back per layer and scores and ranks them on the CPU: on an H200 that was 45 ms of
 * scoring and 23-52 ms of selection per 4,361-token item, more than the whole dense prefill
 * (45 ms). Here each evicting layer queues its steps (score the window / probe rows into masses
 * kept on the device; rank and choose; compact K and V with the chosen rows) and the prefill goes on
 * to the next layer without waiting: the chosen sets' sizes stay on the device and bound the next
 * kernels' loops. The host reads the sets into the book once, after the prompt (finish). The rules
 * are kv_select.h's (the masses in float instead of double: a near tie can rank the other way). */
#include "model/text_ctx.h"

#include <math.h>
#include <string.h>

#define SLOT(c, l, g) ((l) * (c)->m->hp.n_head_kv + (g))   /* the list and count of (layer, kv head) */
#define T_SLOT(c) ((c)->m->hp.n_layers * (c)->m->hp.n_head_kv)
#define P_SLOT(c) (T_SLOT(c) + 1)

static oc_kv_dev_op op_of(oc_text_ctx *c, oc_kv_dev_kind kind) {
    oc_kv_dev_op o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.acc = &c->kvd_acc;
    o.counts = &c->kvd_counts;
    o.flags = &c->kvd_flags;
    o.norm = &c->kvd_norm;
    o.part = &c->kvd_part;   /* scoring's scratch; ZipVL's ranking's too */
    o.list = &c->kvd_lists;
    o.list_stride = c->lim.max_ctx_tokens;
    o.n_copies = 1;
    o.within_idx = -1;
    return o;
}

oc_status oc_text_kv_dev_start(oc_text_ctx *c, oc_error *err) {
    c->kv_dev = 0;
    c->n_kvd_pending = 0;
    if (!c->kvd_acc.n_bytes || !c->be->ops->kv_dev) return OC_OK;
    oc_kv_dev_op o = op_of(c, OC_KV_DEV_ZERO);
    o.n = c->kvp->n_acc_rows * c->lim.max_ctx_tokens;
    oc_status st = c->be->ops->kv_dev(c->be, &o, err);
    if (!st && c->n_kv_probes)
        st = c->be->ops->write(c->be, &c->kvd_probes, 0, c->kv_probes, (size_t)c->n_kv_probes * 4, err);
    c->kv_dev = !st;
    return st;
}

oc_status oc_text_kv_dev_score(oc_text_ctx *c, const oc_text_batch *b, int32_t il, oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    const oc_kv_layer *P = &c->kvp->layer[il];
    int32_t first = c->n_past, end = first + b->n_tokens, C = c->lim.max_ctx_tokens;
    oc_kv_dev_op o = op_of(c, OC_KV_DEV_SCORE);
    o.q = &c->q;
    o.q_stride = hp->n_embd;
    o.q_base = first;
    o.k = &c->k_cache;
    o.k_off = c->reg.k_pre[il];
    o.k_stride = hp->n_head_kv * hp->head_dim;
    o.n_head = hp->n_head;
    o.n_head_kv = hp->n_head_kv;
    o.head_dim = hp->head_dim;
    o.scale = 1.0f / sqrtf((float)hp->head_dim);
    o.stats = &c->kvd_stats;
    o.part = &c->kvd_part;
    o.n = end;   /* the last row sees keys 0..end-1 */
    oc_status st;
    if (P->acc_row >= 0) {   /* SparseMM: the prompt's last w queries (Eq. 11) */
        o.pos0 = OC_MAX(first, b->prompt_tokens - c->kvp->window);
        o.n_rows = end - o.pos0;
        o.acc_off = (int64_t)P->acc_row * C;
        o.acc_stride = C;
        if (o.n_rows > 0 && (st = c->be->ops->kv_dev(c->be, &o, err))) return st;
    }
    if (P->zipvl_row >= 0) {   /* ZipVL: the probe rows in this batch (ascending) */
        int32_t t0 = 0, t1;
        while (t0 < c->n_kv_probes && c->kv_probes[t0] < first) t0++;
        for (t1 = t0; t1 < c->n_kv_probes && c->kv_probes[t1] < end;) t1++;
        o.pos = &c->kvd_probes;
        o.pos_first = t0;
        o.n_rows = t1 - t0;
        o.acc_off = (int64_t)P->zipvl_row * C;
        o.acc_stride = 0;
        if (o.n_rows > 0 && (st = c->be->ops->kv_dev(c->be, &o, err))) return st;
    }
    return OC_OK;
}

/* oc_text_kv_keep with the sets of (first, every kv head) on the device: their rows move in every
 * layer of first's group (each source `shift` rows past its index: the staging slot, or 0 in place),
 * K (but a GLA lazy layer's) and V, one launch per layer. */
static oc_status keep(oc_text_ctx *c, int32_t first, oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    const oc_text_kv_regions *R = &c->reg;
    int64_t hd = hp->head_dim, kvd = (int64_t)hp->n_head_kv * hd;
    oc_kv_dev_op o = op_of(c, OC_KV_DEV_KEEP);
    o.n = c->n_past;
    o.list_off = (int64_t)SLOT(c, first, 0) * c->lim.max_ctx_tokens;
    o.count_idx = SLOT(c, first, 0);
    o.t_stride = kvd;
    o.row_elems = (int32_t)hd;
    o.n_groups = hp->n_head_kv;
    oc_status st;
    for (int32_t l = first; l < hp->n_layers; l++) {
        const oc_kv_layer *L = &c->kvp->layer[l];
        if (L->first != first) continue;
        o.t = L->lazy != OC_KV_LAZY_GLA ? &c->k_cache : NULL;
        o.t_off = R->k_at[l];
        o.shift = (int32_t)((R->k_pre[l] - R->k_at[l]) / kvd);
        o.t2 = &c->v_cache;
        o.t2_off = R->v_at[l];
        o.shift2 = (int32_t)((R->v_pre[l] - R->v_at[l]) / kvd);
        if ((st = c->be->ops->kv_dev(c->be, &o, err))) return st;
    }
    return OC_OK;
}

/* ZipVL's T of layer il (Eq. 6-9) to the lists from slot `slot`, n_copies of them. */
static oc_status zipvl(oc_text_ctx *c, int32_t il, int32_t slot, int32_t n_copies, oc_error *err) {
    const oc_kv_layer *L = &c->kvp->layer[il];
    oc_kv_dev_op o = op_of(c, OC_KV_DEV_ZIPVL);
    o.n = c->n_past;
    o.acc_off = (int64_t)L->zipvl_row * c->lim.max_ctx_tokens;
    o.probes = &c->kvd_probes;
    o.n_probes = c->n_kv_probes;
    o.n_head = c->m->hp.n_head;
    o.recent = OC_KV_ZIPVL_RECENT_PROBES;
    o.p_idx = P_SLOT(c);
    o.target = L->zipvl_tau * (double)c->n_kv_probes * c->m->hp.n_head;   /* Eq. 7: tau of the rows' total */
    o.list_off = (int64_t)slot * c->lim.max_ctx_tokens;
    o.count_idx = slot;
    o.n_copies = n_copies;
    return c->be->ops->kv_dev(c->be, &o, err);
}

/* SparseMM's set of (il, g) (Eq. 13-14), over every key or within T (absolute positions, or T's
 * indices when !absolute). */
static oc_status sparsemm(oc_text_ctx *c, int32_t il, int32_t g, int within, int absolute, oc_error *err) {
    const oc_kv_layer *L = &c->kvp->layer[il];
    int32_t C = c->lim.max_ctx_tokens;
    oc_kv_dev_op o = op_of(c, OC_KV_DEV_SPARSEMM);
    o.n = c->n_past;
    o.acc_off = (int64_t)(L->acc_row + g) * C;
    o.budget = oc_kv_policy_budget(c->kvp, il, g);
    o.window = c->kvp->window;
    if (within) {
        o.within = &c->kvd_lists;
        o.within_off = (int64_t)T_SLOT(c) * C;
        o.within_idx = T_SLOT(c);
        o.map_within = absolute;
    }
    o.list_off = (int64_t)SLOT(c, il, g) * C;
    o.count_idx = SLOT(c, il, g);
    return c->be->ops->kv_dev(c->be, &o, err);
}

oc_status oc_text_kv_dev_compact(oc_text_ctx *c, int32_t first, int32_t last, oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    oc_status st;
    for (int32_t l = first; l <= last; l++) {
        const oc_kv_layer *L = &c->kvp->layer[l];
        if (L->first != l || L->evict == OC_KV_KEEP_ALL || c->n_past <= 0) continue;
        int zip = L->zipvl_row >= 0;
        if (zip && L->acc_row < 0) {   /* ZipVL alone: one set for every kv head */
            if ((st = zipvl(c, l, SLOT(c, l, 0), hp->n_head_kv, err))) return st;
        } else if (zip && (st = zipvl(c, l, T_SLOT(c), 1, err))) {
            return st;
        }
        for (int32_t g = 0; L->acc_row >= 0 && g < hp->n_head_kv; g++)
            if ((st = sparsemm(c, l, g, zip, 1, err))) return st;
        if ((st = keep(c, l, err))) return st;
        c->kvd_pending[c->n_kvd_pending++] = l;
    }
    c->book.n_compacted = last + 1;
    return OC_OK;
}

oc_status oc_text_kv_dev_zipvl_set(oc_text_ctx *c, int32_t il, int32_t *n_t, oc_error *err) {
    oc_backend *be = c->be;
    int32_t C = c->lim.max_ctx_tokens;
    oc_status st;
    if (c->n_past <= 0) {
        *n_t = 0;
        return OC_OK;
    }
    if ((st = zipvl(c, il, T_SLOT(c), 1, err)) ||
        (st = be->ops->read(be, &c->kvd_counts, (size_t)T_SLOT(c) * 4, n_t, 4, err)))
        return st;
    if (*n_t < 0 || *n_t > c->n_past) return oc_fail(err, OC_ERR_DEVICE, "kv cache: the device chose %d of %d tokens", *n_t, c->n_past);
    return *n_t ? be->ops->read(be, &c->kvd_lists, (size_t)T_SLOT(c) * (size_t)C * 4, c->kv_kept, (size_t)*n_t * 4, err)
                : OC_OK;
}

oc_status oc_text_kv_dev_budget_in_t(oc_text_ctx *c, int32_t il, oc_error *err) {
    oc_status st;
    if (c->n_past <= 0) return OC_OK;
    for (int32_t g = 0; g < c->m->hp.n_head_kv; g++)
        if ((st = sparsemm(c, il, g, 1, 0, err))) return st;
    if ((st = keep(c, il, err))) return st;
    c->kvd_pending[c->n_kvd_pending++] = il;
    return OC_OK;
}

oc_status oc_text_kv_dev_finish(oc_text_ctx *c, oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    oc_backend *be = c->be;
    int32_t C = c->lim.max_ctx_tokens, n_slots = P_SLOT(c) + 1, G = hp->n_head_kv;
    oc_status st;
    if (!c->n_kvd_pending) return OC_OK;
    if ((st = be->ops->read(be, &c->kvd_counts, 0, c->kvd_n, (size_t)n_slots * 4, err))) return st;
    /* the pending layers' lists in one read when they fit the host's masses (unused on a device:
     * 8 bytes a key per acc row, at least one row per evicting layer, so two kv heads' lists of
     * every evicting layer fit), else one read per list */
    int32_t lo = c->kvd_pending[0], hi = lo;
    for (int32_t i = 1; i < c->n_kvd_pending; i++) {
        lo = OC_MIN(lo, c->kvd_pending[i]);
        hi = OC_MAX(hi, c->kvd_pending[i]);
    }
    size_t span = (size_t)(hi - lo + 1) * (size_t)G * (size_t)C * 4;
    int32_t *all = span <= (size_t)c->kvp->n_acc_rows * (size_t)C * sizeof(double) ? (int32_t *)(void *)c->kv_acc : NULL;
    if (all && (st = be->ops->read(be, &c->kvd_lists, (size_t)SLOT(c, lo, 0) * (size_t)C * 4, all, span, err))) return st;
    for (int32_t i = 0; i < c->n_kvd_pending; i++) {
        int32_t first = c->kvd_pending[i];
        for (int32_t g = 0; g < G; g++) {
            int32_t n = c->kvd_n[SLOT(c, first, g)];
            const int32_t *list = all ? all + (size_t)(SLOT(c, first, g) - SLOT(c, lo, 0)) * (size_t)C : c->kv_kept;
            if (n < 0 || n > c->n_past)
                return oc_fail(err, OC_ERR_DEVICE, "kv cache: the device chose %d of %d tokens", n, c->n_past);
            if (!all && n &&
                (st = be->ops->read(be, &c->kvd_lists, (size_t)SLOT(c, first, g) * (size_t)C * 4, c->kv_kept, (size_t)n * 4, err)))
                return st;
            for (int32_t l = first; l < hp->n_layers; l++)
                if (c->kvp->layer[l].first == first) oc_kv_book_keep(&c->book, l, g, list, n);
        }
    }
    c->n_kvd_pending = 0;
    return OC_OK;
}
