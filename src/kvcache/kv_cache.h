/* kv_cache.h: the decoder's KV cache when it can shrink: what each layer does with its cache
 * (oc_kv_policy, from the plan's SparseMM budgets, ZipVL thresholds and Q-Cache lazy groups, with
 * the rules for when they meet on one layer), and which tokens each (layer, kv head) holds
 * (oc_kv_book: counts and positions; the keys and values themselves stay in the backend's cache
 * buffers). Bytes are fixed when the context opens (oc_kv_book_bytes); compaction moves kept rows
 * down, so nothing is allocated after open.
 *
 * Memory (what the context allocates, text_ctx.c): each layer's cache is a region of
 * oc_kv_policy_rows rows per kv head, bounded up front from the plan and the context:
 *  - a SparseMM layer (kv-budget, alone or within ZipVL's set) holds at most its largest kv head
 *    budget of the prompt's tokens plus the answer_tokens that follow the prompt: that many rows
 *    (the context's size when smaller, or when answer_tokens is 0: no bound asked for);
 *  - a ZipVL-only layer holds the context's size: Eq. 7's p adapts to the prompt and may keep every
 *    token, so no smaller bound follows from tau;
 *  - a GLA lazy layer stores no K rows (its group's first layer's are read); a VLA lazy layer
 *    stores K rows for its text tokens only: a visual token's key is read from the first layer's
 *    K rows at the same row (the rules below keep every layer of a group at the same tokens in the
 *    same rows), so its own rows there stay unwritten. Its region is still the context's size: a
 *    text-only prompt may fill the context, so no smaller allocation follows. What VLA saves is
 *    the bytes held (oc_kv_book_held_bytes, oc_stats.kv_bytes) and the key bytes read per step:
 *    the visual tokens' key rows of every VLA lazy layer;
 *  - every other layer: the context's size.
 * A layer whose region is smaller than the context cannot hold its whole prompt, which SparseMM
 * scores and ZipVL selects over before anything is evicted: its prompt goes to a staging slot of
 * the context's size (one per such layer of a segment, shared by the segments one after the
 * other), and the prompt is prefilled segment by segment (oc_kv_policy_segment_end: a lazy group,
 * or one layer), every chunk through the segment's layers, then the segment's eviction copies the
 * kept rows from staging into the regions. Layer-major prefill computes exactly what chunk-major
 * does (a layer's chunk depends on the previous layer's rows of that chunk and its own keys so far)
 * and needs the residual stream of the whole prompt ([context][n_embd] f32) instead of a batch's.
 *
 * When the methods meet on one decoder layer (also stated with the plan grammar, src/plan/plan.c):
 *  - kv-budget and zipvl-tau on the same layer: applied in that order of scope: ZipVL first keeps
 *    the layer's important set T (Eq. 6-9), then each kv head keeps its SparseMM budget within T
 *    (the window is T's last w tokens; the rest of T competes by the window's attention, Eq. 13-14;
 *    a full budget keeps all of T).
 *  - A lazy layer (Q-Cache, a group's layers after the first) keeps no eviction of its own: it
 *    holds exactly the tokens its group's first layer keeps (its K is that layer's, Eq. 5-8, so its
 *    V rows must match them). Its own kv-budget / zipvl-tau lines must therefore say the same as
 *    the first layer's (a range covering both is fine); lines that differ are refused.
 *  - Head patterns (BlindSight, A-shape) shape the dense prefill; once a layer is compacted its
 *    queries attend over every kept key (causal among new tokens): the positions a pattern is
 *    defined on are gone, and the eviction already chose the keys that matter. A ZipVL layer's
 *    prefill attends over its set T densely (its head patterns are not applied), unless its
 *    zipvl-tau line says "prefill heads" (plan format 4, ours): then the layer prefills as any
 *    layer does (its head patterns: BlindSight, MMInference, or dense), its probe rows are scored
 *    as that prefill runs, and T (with any kv-budget within T) is kept after it (text_kv.c's
 *    compaction). The pattern keeps its prefill saving and ZipVL its KV saving; Alg. 1's prefill
 *    saving is given up (on the long model that prefill is where ZipVL loses answers,
 *    docs/sparsity-findings.md).
 *  - Prefill: SparseMM as written (dense, then each kv head keeps its budget); ZipVL Alg. 1 (T
 *    chosen from the probe rows before the layer's attention, which then runs on T alone; rows
 *    outside T get output 0; model/text_prefill.c). A lazy group whose first layer has ZipVL runs
 *    its lazy layers' prefill over the same T. Decoding over kept keys is SparseMM Sec. 3.3 and
 *    ZipVL Alg. 2. */
#ifndef OC_KV_CACHE_H
#define OC_KV_CACHE_H

#include "plan/plan.h"

typedef enum oc_kv_evict {
    OC_KV_KEEP_ALL = 0,   /* dense cache */
    OC_KV_SPARSEMM,       /* per kv head budgets (sparsemm.txt Eq. 10-14) */
    OC_KV_ZIPVL,          /* one important set per layer (zipvl.txt Eq. 6-9) */
    OC_KV_ZIPVL_SPARSEMM  /* both: SparseMM budgets within ZipVL's set */
} oc_kv_evict;

typedef enum oc_kv_lazy {
    OC_KV_OWN = 0,        /* computes its own Q and K */
    OC_KV_LAZY_FIRST,     /* first layer of a lazy group: its Q and K are shared */
    OC_KV_LAZY_GLA,       /* reuses the first layer's Q and K for every token (Eq. 5-6): no K stored */
    OC_KV_LAZY_VLA        /* reuses them for visual tokens only (Eq. 7-8) */
} oc_kv_lazy;

typedef struct oc_kv_layer {
    oc_kv_evict evict;        /* for a lazy layer: its first layer's */
    oc_kv_lazy lazy;
    int32_t first;            /* the layer whose eviction (and shared Q/K) this one follows; itself if own */
    int32_t k_slot;           /* which layer slot of the K cache holds its keys (GLA: the first's) */
    int32_t acc_row;          /* SparseMM: first of n_head_kv rows of the score accumulator, -1: none */
    int32_t zipvl_row;        /* ZipVL: its row of the score accumulator, -1: none */
    double zipvl_tau;
    int32_t zipvl_heads_prefill;  /* 1: "prefill heads" (ours): the layer's own prefill (its head
                               * patterns), then T kept; 0: Alg. 1, prefill over T */
} oc_kv_layer;

typedef struct oc_kv_policy {
    int32_t n_layers, n_head_kv;
    int32_t window;           /* SparseMM local window w */
    int32_t n_k_slots;        /* layers that store keys (every layer but GLA lazy ones) */
    int32_t n_acc_rows;       /* rows of max_tokens doubles the scores need (SparseMM: one per kv head,
                                 ZipVL: one per layer) */
    int any_evict, any_lazy, any_vla;
    oc_kv_layer layer[OC_PLAN_MAX_LAYERS];
    const int32_t *budget;    /* plan's [layer * n_head_kv + kv_head], borrowed (OC_PLAN_KV_FULL: all) */
} oc_kv_policy;

/* The policy of a decoder plan (NULL or uncovered: everything dense). Refusals name the plan
 * lines, e.g. "plan: decoder layer 5 has both kv-budget and zipvl-tau (choose one per layer)".
 * The plan must outlive the policy (budgets are borrowed). [alloc: no] [errors: OC_ERR_UNSUPPORTED] */
oc_status oc_kv_policy_build(oc_kv_policy *out, const oc_stack_plan *plan, int32_t n_layers, int32_t n_head_kv,
                             int32_t window, const char *source, oc_error *err);

/* Budget of (layer, kv head) in tokens for a SparseMM layer; INT32_MAX for a full one. */
int32_t oc_kv_policy_budget(const oc_kv_policy *p, int32_t layer, int32_t kv_head);

/* Rows per kv head layer's region holds in a context of ctx_tokens with answer_tokens after the
 * prompt (0: unbounded), by the rules under "Memory" above; in 1..ctx_tokens. */
int32_t oc_kv_policy_rows(const oc_kv_policy *p, int32_t layer, int32_t ctx_tokens, int32_t answer_tokens);

/* The last layer of the segment that starts at layer: its lazy group's last layer, or itself. */
int32_t oc_kv_policy_segment_end(const oc_kv_policy *p, int32_t layer);

/* Which tokens every (layer, kv head) holds: n_held[layer][kv_head] and pos[...][slot], slot
 * < n_held, the absolute token index held in that cache slot (ascending). Lazy layers have their
 * own entries (equal to their first layer's). Before any compaction every entry is the identity. */
typedef struct oc_kv_book {
    int32_t n_layers, n_head_kv, max_tokens;
    int32_t n_compacted;      /* layers 0..n_compacted-1 ran their eviction (segments compact in
                                 order): attention goes per kv head there */
    int32_t *n_held;          /* [n_layers * n_head_kv] */
    int32_t *pos;             /* [n_layers * n_head_kv * max_tokens] */
} oc_kv_book;

/* Bytes of the book's arrays for these sizes (0 on overflow); they come from one block the caller
 * owns and passes to oc_kv_book_init. */
size_t oc_kv_book_bytes(int32_t n_layers, int32_t n_head_kv, int32_t max_tokens);
void oc_kv_book_init(oc_kv_book *b, int32_t n_layers, int32_t n_head_kv, int32_t max_tokens, void *block);
void oc_kv_book_reset(oc_kv_book *b);   /* empty, not compacted */

static inline int32_t *oc_kv_book_pos(const oc_kv_book *b, int32_t layer, int32_t kv_head) {
    return b->pos + ((size_t)layer * (size_t)b->n_head_kv + (size_t)kv_head) * (size_t)b->max_tokens;
}
static inline int32_t *oc_kv_book_n(const oc_kv_book *b, int32_t layer, int32_t kv_head) {
    return &b->n_held[(size_t)layer * (size_t)b->n_head_kv + (size_t)kv_head];
}

/* Append n tokens at absolute index first..first+n-1 to every (layer, kv head). */
void oc_kv_book_append(oc_kv_book *b, int32_t first, int32_t n);

/* Keep slots kept[0..n_kept) (ascending) of (layer, kv head): positions move down in place. */
void oc_kv_book_keep(oc_kv_book *b, int32_t layer, int32_t kv_head, const int32_t *kept, int32_t n_kept);

/* In-place compaction of one head's rows of a cache: row kept[r] moves to row r (rows are row_elems
 * elements of elem_bytes, stride_elems apart). Kept ascending, so kept[r] >= r and moving in
 * increasing r never overwrites a row still to be read. [alloc: no] */
void oc_kv_compact_rows(void *base, int64_t stride_elems, int32_t row_elems, size_t elem_bytes, const int32_t *kept,
                        int32_t n_kept);

/* KV bytes the held tokens take in f16 with the policy: K rows of layers that store keys (a VLA
 * lazy layer: of its text tokens only, visual[pos] == 0; visual NULL: every token is text) plus V
 * rows of every layer. */
size_t oc_kv_book_held_bytes(const oc_kv_book *b, const oc_kv_policy *p, int32_t head_dim, const uint8_t *visual);

#endif
