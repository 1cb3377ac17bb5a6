/* mask.c: the mask of an attention call (mask.h): argument checks, row classes, window spans, key
 * sets and pair counts. Shared by the CPU engine (attn.c) and the OpenCL host (opencl/cl_attn.c),
 * so the two cannot disagree on which rows form a class or how many pairs the base mask keeps. */
#include "attention/mask.h"

/* ---- checks ------------------------------------------------------------------------------------------- */

oc_status oc_mask_check(const oc_attn_call *a, const char *who, oc_error *err) {
    if (!a) return oc_fail(err, OC_ERR_INVALID, "%s: no arguments", who);
    if (a->n_q < 0 || a->n_kv < 0)
        return oc_fail(err, OC_ERR_INVALID, "%s: n_q %d / n_kv %d negative", who, (int)a->n_q, (int)a->n_kv);
    if (a->n_head < 1 || a->n_head_kv < 1 || a->n_head % a->n_head_kv)
        return oc_fail(err, OC_ERR_INVALID, "%s: %d query heads are not a multiple of %d kv heads", who,
                       (int)a->n_head, (int)a->n_head_kv);
    if (a->head_dim < 1 || a->head_dim > (1 << 16))
        return oc_fail(err, OC_ERR_INVALID, "%s: head_dim %d outside [1, 65536]", who, (int)a->head_dim);
    if (a->kv_dtype != OC_DTYPE_F16 && a->kv_dtype != OC_DTYPE_F32)
        return oc_fail(err, OC_ERR_INVALID, "%s: K/V type %d is neither f16 nor f32", who, (int)a->kv_dtype);
    if (a->q_offset < 0 || (int64_t)a->q_offset + a->n_q > INT32_MAX)
        return oc_fail(err, OC_ERR_INVALID, "%s: q_offset %d out of range", who, (int)a->q_offset);
    switch (a->mask) {
    case OC_ATTN_CAUSAL:
    case OC_ATTN_BIDIRECTIONAL: break;
    case OC_ATTN_SEGMENTS:
        if (a->n_segments < 0 || (a->n_segments > 0 && !a->segments))
            return oc_fail(err, OC_ERR_INVALID, "%s: %d segments but no list", who, (int)a->n_segments);
        for (int32_t s = 0; s < a->n_segments; s++) {
            oc_token_span sp = a->segments[s];
            if (sp.start < 0 || sp.end <= sp.start || (s > 0 && sp.start < a->segments[s - 1].end))
                return oc_fail(err, OC_ERR_INVALID,
                               "%s: segment %d [%d, %d) is empty, negative or not after segment %d", who,
                               (int)s, (int)sp.start, (int)sp.end, (int)s - 1);
        }
        break;
    case OC_ATTN_EXPLICIT:
        if (!a->explicit_mask) return oc_fail(err, OC_ERR_INVALID, "%s: explicit mask is NULL", who);
        break;
    default: return oc_fail(err, OC_ERR_INVALID, "%s: unknown mask kind %d", who, (int)a->mask);
    }
    if (a->kv_held) {   /* attn_call.h: a plain causal call per kv head, each within n_kv */
        if (a->mask != OC_ATTN_CAUSAL || a->patterns || a->k_shared || a->dyn)
            return oc_fail(err, OC_ERR_INVALID, "%s: per-kv-head held keys need a causal call without patterns "
                           "or shared keys", who);
        for (int32_t g = 0; g < a->n_head_kv; g++)
            if (a->kv_held[g] < 0 || (int64_t)a->kv_held[g] + a->n_q > a->n_kv)
                return oc_fail(err, OC_ERR_INVALID, "%s: kv head %d holds %d keys: outside [0, n_kv %d - n_q %d]",
                               who, (int)g, (int)a->kv_held[g], (int)a->n_kv, (int)a->n_q);
    }
    for (int32_t h = 0; a->patterns && h < a->n_head; h++) {
        const oc_head_pattern *p = &a->patterns[h];
        if (!oc_pattern_valid(p))
            return oc_fail(err, OC_ERR_INVALID,
                           "%s: head %d has a bad pattern (kind %d; A-shape needs n_sink >= 0 and n_local >= 1, "
                           "got %d, %d; vertical-slash vertical >= 0 and slash >= 1, got %d, %d; grid a stride or "
                           "max stride and lines 1..7, got %d, %d, %d)", who, (int)h, (int)p->kind, (int)p->n_sink,
                           (int)p->n_local, (int)p->n_vertical, (int)p->n_slash, (int)p->grid_stride,
                           (int)p->grid_max_stride, (int)p->grid_lines);
    }
    return OC_OK;
}

/* A plain dynamic pattern's index is well formed (dense: a Q_BOUNDARY modality that runs dense). */
static int index_ok(oc_pattern_kind kind, const oc_dyn_head *dh) {
    if (dh->dense) return 1;
    if (kind == OC_PATTERN_GRID) return dh->stride >= 1 && dh->phase >= 0 && dh->phase < dh->stride;
    if (kind == OC_PATTERN_VERTICAL_SLASH)
        return dh->n_vertical >= 0 && dh->n_slash >= 0 && (!dh->n_vertical || dh->vertical) && (!dh->n_slash || dh->slash);
    return 1;
}

oc_status oc_mask_check_dyn(const oc_attn_call *a, int need_index, const char *who, oc_error *err) {
    int n_dynamic = 0;
    for (int32_t h = 0; a->patterns && h < a->n_head; h++) n_dynamic += oc_pattern_needs_index(&a->patterns[h]);
    if (!n_dynamic || a->n_q < OC_DYN_LAST_Q) return OC_OK;   /* none, or all run dense (decode) */
    if (a->mask != OC_ATTN_CAUSAL && a->mask != OC_ATTN_BIDIRECTIONAL)
        return oc_fail(err, OC_ERR_INVALID, "%s: vertical-slash, grid, q-boundary heads with them and 2d-boundary "
                       "heads need a causal or bidirectional base", who);
    if ((int64_t)a->q_offset + a->n_q > a->n_kv)
        return oc_fail(err, OC_ERR_INVALID, "%s: vertical-slash and grid heads need the queries' own keys "
                       "(q_offset %d + n_q %d > n_kv %d)", who, (int)a->q_offset, (int)a->n_q, (int)a->n_kv);
    if (!need_index) return OC_OK;
    if (!a->dyn || a->dyn->n_head != a->n_head || !a->dyn->heads)
        return oc_fail(err, OC_ERR_INVALID, "%s: vertical-slash or grid heads but no index for this call "
                       "(oc_attn_dyn_build)", who);
    for (int32_t h = 0; h < a->n_head; h++) {
        const oc_head_pattern *p = &a->patterns[h];
        int ok = 1;
        if (p->kind == OC_PATTERN_Q_BOUNDARY && oc_pattern_needs_index(p)) {
            ok = a->dyn->heads_vision != NULL && index_ok(p->modal[OC_MODALITY_TEXT].kind, &a->dyn->heads[h]) &&
                 index_ok(p->modal[OC_MODALITY_VISION].kind, &a->dyn->heads_vision[h]);
        } else if (p->kind == OC_PATTERN_BOUNDARY_2D) {
            const oc_attn_dyn *d = a->dyn;
            ok = d->pairs && d->key_perm && d->key_rank && d->key_start[0] == 0 &&
                 d->key_start[1] >= 0 && d->key_start[1] <= d->key_start[2] && d->key_start[2] == a->n_kv;
            for (int k = 0; ok && k < OC_N_MODALITIES * OC_N_MODALITIES; k++)
                ok = index_ok(p->pair[k / OC_N_MODALITIES][k % OC_N_MODALITIES].kind,
                              &d->pairs[h * OC_N_MODALITIES * OC_N_MODALITIES + k]);
        } else {
            ok = index_ok(p->kind, &a->dyn->heads[h]);
        }
        if (!ok) return oc_fail(err, OC_ERR_INVALID, "%s: head %d has a broken dynamic index", who, (int)h);
    }
    return OC_OK;
}

/* ---- row classes -------------------------------------------------------------------------------------- */

static int is_blindsight(oc_pattern_kind k) {
    return k == OC_PATTERN_SINK || k == OC_PATTERN_INTRA_IMAGE || k == OC_PATTERN_INTRA_IMAGE_SINK;
}

/* The first segment whose end lies after p (n_segments if none). */
static int32_t segment_find(const oc_token_span *seg, int32_t n, int32_t p) {
    int32_t lo = 0, hi = n;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (seg[mid].end <= p) lo = mid + 1; else hi = mid;
    }
    return lo;
}

int32_t oc_mask_classify(const oc_attn_call *a, const oc_head_pattern *pat, int32_t i, int32_t i_end,
                         oc_mask_class *cls) {
    int64_t p = (int64_t)a->q_offset + i;
    int64_t end = (int64_t)a->q_offset + i_end;   /* exclusive, in positions */
    cls->c0 = 0;
    cls->c1 = a->n_kv;
    cls->image = -1;
    cls->sinks = cls->intra = 0;
    int vs = pat && pat->kind == OC_PATTERN_VERTICAL_SLASH;
    if (pat && pat->kind == OC_PATTERN_Q_BOUNDARY) {   /* runs of one modality (dyn.h) */
        int m = a->layout && p < oc_layout_n_tokens(a->layout) && oc_layout_image_at(a->layout, (int32_t)p) >= 0;
        vs = pat->modal[m].kind == OC_PATTERN_VERTICAL_SLASH;
    }
    if (vs) {   /* whole query blocks (their rows share the diagonal runs), the first up to a block edge */
        if (p % OC_DYN_BLOCK) end = OC_MIN(end, (p / OC_DYN_BLOCK + 1) * OC_DYN_BLOCK);
        else if (end - p > OC_DYN_BLOCK) end = p + (end - p) / OC_DYN_BLOCK * OC_DYN_BLOCK;
    }
    if (a->mask == OC_ATTN_SEGMENTS) {
        int32_t s = segment_find(a->segments, a->n_segments, (int32_t)p);
        if (s < a->n_segments && a->segments[s].start <= p) {
            cls->c0 = a->segments[s].start;
            cls->c1 = OC_MIN(cls->c1, a->segments[s].end);
            end = OC_MIN(end, (int64_t)a->segments[s].end);
        } else {
            cls->c0 = cls->c1 = 0;   /* in no segment: nothing to attend to */
            if (s < a->n_segments) end = OC_MIN(end, (int64_t)a->segments[s].start);
        }
    }
    if ((!pat || is_blindsight(pat->kind) || oc_pattern_is_boundary(pat->kind)) && a->layout) {
        int32_t img = oc_layout_image_at(a->layout, (int32_t)p);
        if (img >= 0) {
            cls->image = img;
            cls->sinks = pat && is_blindsight(pat->kind) && pat->kind != OC_PATTERN_INTRA_IMAGE;
            cls->intra = pat && is_blindsight(pat->kind) && pat->kind != OC_PATTERN_SINK;
            end = OC_MIN(end, (int64_t)oc_layout_image_span(a->layout, img).end);
        } else {
            int32_t next = oc_layout_next_image(a->layout, (int32_t)p);
            if (next < oc_layout_n_images(a->layout))
                end = OC_MIN(end, (int64_t)oc_layout_image_span(a->layout, next).start);
        }
    }
    return (int32_t)(end - a->q_offset);
}

/* ---- windows ---------------------------------------------------------------------------------------- */

oc_mask_ivals oc_mask_ivals_of(int64_t a0, int64_t b0, int64_t a1, int64_t b1) {
    oc_mask_ivals r = { 0, { 0, 0 }, { 0, 0 } };
    if (a0 < b0) { r.lo[r.n] = a0; r.hi[r.n] = b0; r.n++; }
    if (a1 < b1) { r.lo[r.n] = a1; r.hi[r.n] = b1; r.n++; }
    if (r.n == 2) {
        if (r.lo[1] < r.lo[0]) {
            int64_t t = r.lo[0]; r.lo[0] = r.lo[1]; r.lo[1] = t;
            t = r.hi[0]; r.hi[0] = r.hi[1]; r.hi[1] = t;
        }
        if (r.lo[1] <= r.hi[0]) { r.hi[0] = OC_MAX(r.hi[0], r.hi[1]); r.n = 1; }
    }
    return r;
}

void oc_mask_window_span(const oc_attn_call *a, const oc_head_pattern *pat, int64_t p_first, int64_t p_last,
                         oc_mask_ivals *some, oc_mask_ivals *all) {
    oc_mask_window wa = oc_mask_row_window(a, pat, p_first), wb = oc_mask_row_window(a, pat, p_last);
    if (some) *some = oc_mask_ivals_of(0, wb.sk, wa.lo, wb.hi + 1);
    if (all) *all = oc_mask_ivals_of(0, wa.sk, wb.lo, wa.hi + 1);
}

/* ---- key sets ---------------------------------------------------------------------------------------- */

void oc_mask_keys_init(oc_mask_keys *it, const oc_attn_call *a, const oc_mask_class *cls, int32_t lo, int32_t hi) {
    it->layout = cls->image >= 0 ? a->layout : NULL;
    it->cls = *cls;
    it->pos = lo;
    it->end = hi;
    it->img = it->n_images = 0;
    if (it->layout) {
        it->n_images = oc_layout_n_images(it->layout);
        int32_t g = oc_layout_image_at(it->layout, lo);
        it->img = g >= 0 ? g : oc_layout_next_image(it->layout, lo);
    }
}

int oc_mask_keys_next(oc_mask_keys *it, int32_t *lo, int32_t *hi) {
    while (it->pos < it->end) {
        if (!it->layout || it->img >= it->n_images) {   /* all of the rest */
            *lo = it->pos;
            *hi = it->end;
            it->pos = it->end;
            return 1;
        }
        oc_token_span s = oc_layout_image_span(it->layout, it->img);
        if (it->pos < s.start) {                           /* text before image img */
            *lo = it->pos;
            *hi = OC_MIN(s.start, it->end);
            it->pos = s.start;
            return 1;
        }
        int32_t keep_end = s.start;
        if (it->cls.intra && it->img == it->cls.image) keep_end = s.end;
        else if (it->cls.sinks) keep_end = s.start + oc_layout_image_n_sink(it->layout, it->img);
        int32_t x = it->pos, y = OC_MIN(keep_end, it->end);
        it->pos = s.end;
        it->img++;
        if (x < y) {
            *lo = x;
            *hi = y;
            return 1;
        }
    }
    return 0;
}

/* ---- pair counts ------------------------------------------------------------------------------------- */

uint64_t oc_mask_base_pairs(const oc_attn_call *a, int32_t h) {
    uint64_t n = 0;
    int64_t p0 = a->q_offset, p1 = (int64_t)a->q_offset + a->n_q, nkv = a->n_kv;
    switch (a->mask) {
    case OC_ATTN_CAUSAL: {
        /* row at position p keeps min(p + 1, n_kv) keys */
        int64_t lo = p0 + 1, hi = OC_MIN(p1, nkv);   /* rows whose count is p + 1 */
        if (hi >= lo) n += (uint64_t)((lo + hi) * (hi - lo + 1) / 2);
        int64_t rest = p1 - OC_MAX(p0, hi);
        if (rest > 0) n += (uint64_t)rest * (uint64_t)nkv;
        break;
    }
    case OC_ATTN_BIDIRECTIONAL: n = (uint64_t)a->n_q * (uint64_t)a->n_kv; break;
    case OC_ATTN_SEGMENTS:
        for (int32_t s = 0; s < a->n_segments; s++) {
            int64_t rows = OC_MIN(p1, (int64_t)a->segments[s].end) - OC_MAX(p0, (int64_t)a->segments[s].start);
            int64_t keys = OC_MIN(nkv, (int64_t)a->segments[s].end) - a->segments[s].start;
            if (rows > 0 && keys > 0) n += (uint64_t)rows * (uint64_t)keys;
        }
        break;
    case OC_ATTN_EXPLICIT:
        for (int32_t i = 0; i < a->n_q; i++) {
            const uint8_t *row =
                a->explicit_mask + (int64_t)h * a->explicit_stride_head + (int64_t)i * a->explicit_stride_q;
            for (int32_t j = 0; j < a->n_kv; j++) n += row[j] != 0;
        }
        break;
    }
    return n;
}

uint64_t oc_mask_base_pairs_all(const oc_attn_call *a) {
    if (a->mask != OC_ATTN_EXPLICIT || a->explicit_stride_head == 0)
        return oc_mask_base_pairs(a, 0) * (uint64_t)a->n_head;   /* every head has the same base mask */
    uint64_t n = 0;
    for (int32_t h = 0; h < a->n_head; h++) n += oc_mask_base_pairs(a, h);
    return n;
}
