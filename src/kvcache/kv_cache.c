/* kv_cache.c: the shrinking KV cache's policy (the plan's sections per layer and the rules when
 * they meet, kv_cache.h) and its book of held tokens, plus the in-place row compaction the CPU
 * backend runs on its cache buffers. No allocation: the book lives in a block the context sized. */
#include "kvcache/kv_cache.h"

#include <stdint.h>
#include <string.h>

/* ---- policy ------------------------------------------------------------------------------------ */

static int layer_budgeted(const oc_stack_plan *s, int32_t l) {
    if (!s->kv_budget_tokens) return 0;
    for (int32_t g = 0; g < s->shape.n_kv_heads; g++)
        if (s->kv_budget_tokens[(size_t)l * (size_t)s->shape.n_kv_heads + (size_t)g] != OC_PLAN_KV_FULL) return 1;
    return 0;
}

/* Layers a and b have the same kv-budget and zipvl-tau lines. */
static int same_eviction(const oc_stack_plan *s, int32_t a, int32_t b) {
    int32_t h = s->shape.n_kv_heads;
    if (s->zipvl_tau_ppm && s->zipvl_tau_ppm[a] != s->zipvl_tau_ppm[b]) return 0;
    if (s->zipvl_heads_prefill && s->zipvl_heads_prefill[a] != s->zipvl_heads_prefill[b]) return 0;
    if (s->kv_budget_tokens)
        for (int32_t g = 0; g < h; g++)
            if (s->kv_budget_tokens[(size_t)a * (size_t)h + (size_t)g] != s->kv_budget_tokens[(size_t)b * (size_t)h + (size_t)g])
                return 0;
    return 1;
}

oc_status oc_kv_policy_build(oc_kv_policy *p, const oc_stack_plan *s, int32_t n_layers, int32_t n_head_kv,
                             int32_t window, const char *source, oc_error *err) {
    memset(p, 0, sizeof *p);
    const char *src = source ? source : "plan";
    if (n_layers < 1 || n_layers > OC_PLAN_MAX_LAYERS || n_head_kv < 1)
        return oc_fail(err, OC_ERR_UNSUPPORTED, "%s: %d decoder layers are outside the KV cache's limits", src, n_layers);
    p->n_layers = n_layers;
    p->n_head_kv = n_head_kv;
    p->window = window;
    for (int32_t l = 0; l < n_layers; l++) {
        p->layer[l].first = l;
        p->layer[l].acc_row = p->layer[l].zipvl_row = -1;
    }
    int covered = s && s->shape.n_layers > 0;
    if (covered && (s->shape.n_layers != n_layers || s->shape.n_kv_heads != n_head_kv))
        return oc_fail(err, OC_ERR_UNSUPPORTED, "%s: plan is for %d decoder layers x %d kv heads; model has %d x %d",
                       src, s->shape.n_layers, s->shape.n_kv_heads, n_layers, n_head_kv);
    if (covered) {
        p->budget = s->kv_budget_tokens;
        for (int32_t l = 0; l < n_layers; l++) {
            int b = layer_budgeted(s, l), z = s->zipvl_tau_ppm && s->zipvl_tau_ppm[l] != 0;
            p->layer[l].evict = b && z ? OC_KV_ZIPVL_SPARSEMM : b ? OC_KV_SPARSEMM : z ? OC_KV_ZIPVL : OC_KV_KEEP_ALL;
            p->layer[l].zipvl_tau = z ? (double)s->zipvl_tau_ppm[l] / OC_PLAN_PPM : 0;
            p->layer[l].zipvl_heads_prefill = z && s->zipvl_heads_prefill && s->zipvl_heads_prefill[l];
        }
        for (int32_t i = 0; i < s->n_lazy_groups; i++) {
            const oc_lazy_group *g = &s->lazy_groups[i];
            int32_t f = g->first_layer;
            p->layer[f].lazy = OC_KV_LAZY_FIRST;
            for (int32_t l = f + 1; l <= g->last_layer; l++) {
                if (p->layer[l].evict != OC_KV_KEEP_ALL && !same_eviction(s, l, f))
                    return oc_fail(err, OC_ERR_UNSUPPORTED, "%s: decoder layer %d is lazy in 'decoder lazy-group %d-%d' "
                                   "but its kv-budget / zipvl-tau lines differ from layer %d's (a lazy layer holds "
                                   "the tokens of the layer whose keys it reuses)", src, l, f, g->last_layer, f);
                p->layer[l].lazy = g->mode == OC_LAZY_VLA ? OC_KV_LAZY_VLA : OC_KV_LAZY_GLA;
                p->layer[l].first = f;
                p->layer[l].evict = p->layer[f].evict;
                p->layer[l].zipvl_tau = p->layer[f].zipvl_tau;
                p->layer[l].zipvl_heads_prefill = p->layer[f].zipvl_heads_prefill;
                p->any_lazy = 1;
                p->any_vla |= g->mode == OC_LAZY_VLA;
            }
        }
    }
    for (int32_t l = 0; l < n_layers; l++) {
        oc_kv_layer *L = &p->layer[l];
        L->k_slot = L->lazy == OC_KV_LAZY_GLA ? p->layer[L->first].k_slot : p->n_k_slots++;
        p->any_evict |= L->evict != OC_KV_KEEP_ALL;
        if (L->first != l) continue;   /* only layers that choose need scores */
        if (L->evict == OC_KV_SPARSEMM || L->evict == OC_KV_ZIPVL_SPARSEMM) {
            L->acc_row = p->n_acc_rows;
            p->n_acc_rows += n_head_kv;
        }
        if (L->evict == OC_KV_ZIPVL || L->evict == OC_KV_ZIPVL_SPARSEMM) L->zipvl_row = p->n_acc_rows++;
    }
    return OC_OK;
}

int32_t oc_kv_policy_budget(const oc_kv_policy *p, int32_t layer, int32_t kv_head) {
    const oc_kv_layer *L = &p->layer[layer];
    if ((L->evict != OC_KV_SPARSEMM && L->evict != OC_KV_ZIPVL_SPARSEMM) || !p->budget) return INT32_MAX;
    int32_t b = p->budget[(size_t)L->first * (size_t)p->n_head_kv + (size_t)kv_head];
    return b == OC_PLAN_KV_FULL ? INT32_MAX : b;
}

int32_t oc_kv_policy_rows(const oc_kv_policy *p, int32_t layer, int32_t ctx_tokens, int32_t answer_tokens) {
    const oc_kv_layer *L = &p->layer[layer];
    if (answer_tokens <= 0 || (L->evict != OC_KV_SPARSEMM && L->evict != OC_KV_ZIPVL_SPARSEMM)) return ctx_tokens;
    int32_t most = 0;
    for (int32_t g = 0; g < p->n_head_kv; g++) most = OC_MAX(most, oc_kv_policy_budget(p, layer, g));
    if (most >= ctx_tokens - answer_tokens) return ctx_tokens;   /* also INT32_MAX: a full head */
    return most + answer_tokens;
}

int32_t oc_kv_policy_segment_end(const oc_kv_policy *p, int32_t layer) {
    int32_t e = layer;
    if (p->layer[layer].lazy == OC_KV_LAZY_FIRST)
        while (e + 1 < p->n_layers && p->layer[e + 1].first == layer) e++;
    return e;
}

/* ---- book -------------------------------------------------------------------------------------- */

static size_t pad(size_t n) { return (n + OC_MEM_ALIGN - 1) / OC_MEM_ALIGN * OC_MEM_ALIGN; }

size_t oc_kv_book_bytes(int32_t n_layers, int32_t n_head_kv, int32_t max_tokens) {
    size_t heads = (size_t)n_layers * (size_t)n_head_kv, pos;
    if (!oc_mul_size(heads * sizeof(int32_t), (size_t)max_tokens, &pos)) return 0;
    return pad(heads * sizeof(int32_t)) + pad(pos);
}

void oc_kv_book_init(oc_kv_book *b, int32_t n_layers, int32_t n_head_kv, int32_t max_tokens, void *block) {
    b->n_layers = n_layers;
    b->n_head_kv = n_head_kv;
    b->max_tokens = max_tokens;
    b->n_held = block;
    b->pos = (int32_t *)(void *)((char *)block + pad((size_t)n_layers * (size_t)n_head_kv * sizeof(int32_t)));
    oc_kv_book_reset(b);
}

void oc_kv_book_reset(oc_kv_book *b) {
    b->n_compacted = 0;
    memset(b->n_held, 0, (size_t)b->n_layers * (size_t)b->n_head_kv * sizeof(int32_t));
}

void oc_kv_book_append(oc_kv_book *b, int32_t first, int32_t n) {
    for (int32_t l = 0; l < b->n_layers; l++)
        for (int32_t g = 0; g < b->n_head_kv; g++) {
            int32_t *cnt = oc_kv_book_n(b, l, g), *pos = oc_kv_book_pos(b, l, g);
            for (int32_t i = 0; i < n; i++) pos[*cnt + i] = first + i;
            *cnt += n;
        }
}

void oc_kv_book_keep(oc_kv_book *b, int32_t layer, int32_t kv_head, const int32_t *kept, int32_t n_kept) {
    int32_t *pos = oc_kv_book_pos(b, layer, kv_head);
    for (int32_t r = 0; r < n_kept; r++) pos[r] = pos[kept[r]];
    *oc_kv_book_n(b, layer, kv_head) = n_kept;
}

void oc_kv_compact_rows(void *base, int64_t stride_elems, int32_t row_elems, size_t elem_bytes, const int32_t *kept,
                        int32_t n_kept) {
    char *p = base;
    size_t row = (size_t)row_elems * elem_bytes, stride = (size_t)stride_elems * elem_bytes;
    for (int32_t r = 0; r < n_kept; r++)
        if (kept[r] != r) memmove(p + (size_t)r * stride, p + (size_t)kept[r] * stride, row);
}

size_t oc_kv_book_held_bytes(const oc_kv_book *b, const oc_kv_policy *p, int32_t head_dim, const uint8_t *visual) {
    size_t total = 0, row = (size_t)head_dim * 2;
    for (int32_t l = 0; l < b->n_layers; l++) {
        oc_kv_lazy lazy = p->layer[l].lazy;
        for (int32_t g = 0; g < b->n_head_kv; g++) {
            size_t n = (size_t)*oc_kv_book_n(b, l, g), k_rows = lazy == OC_KV_LAZY_GLA ? 0 : n;
            const int32_t *pos = oc_kv_book_pos(b, l, g);
            for (size_t s = 0; lazy == OC_KV_LAZY_VLA && visual && s < n; s++) k_rows -= visual[pos[s]];
            total += (n + k_rows) * row;
        }
    }
    return total;
}
