/* text_ctx.h: what an oc_text_ctx holds, shared by text_ctx.c (sizing, opening: weight handles
 * and buffers on the backend), text_layer.c (one layer step), text_forward.c (a batch through
 * every layer), text_prefill.c (a whole prompt by layer segment) and text_kv.c (eviction) only.
 * Every activation lives in a backend buffer; the host keeps the M-RoPE tables it computes before
 * uploading them. */
#ifndef OC_TEXT_CTX_H
#define OC_TEXT_CTX_H

#include "kvcache/kv_cache.h"
#include "kvcache/kv_select.h"
#include "model/text_model.h"

/* The KV cache's regions (kvcache/kv_cache.h "Memory"), element offsets into k_cache / v_cache:
 * where layer l's K (its k slot's; a GLA lazy layer's is its first layer's) and V rows live
 * (rows[l] per kv head, kv_dim apart), and where its prompt goes while it is prefilled (a staging
 * slot of C rows when rows[l] < C, else its region). */
typedef struct oc_text_kv_regions {
    int64_t k_at[OC_PLAN_MAX_LAYERS], v_at[OC_PLAN_MAX_LAYERS];
    int64_t k_pre[OC_PLAN_MAX_LAYERS], v_pre[OC_PLAN_MAX_LAYERS];
    int32_t rows[OC_PLAN_MAX_LAYERS];
    int64_t k_elems, v_elems;                    /* the buffers' f16 elements */
    int32_t n_stage_k, n_stage_v;                /* staging slots of C rows */
    int by_layer;                                /* oc_text_ctx_prefills_by_layer */
} oc_text_kv_regions;

/* One layer's weights as the backend holds them (text_model.h oc_text_layer). */
typedef struct oc_text_layer_bt {
    oc_bt attn_norm, ffn_norm, bq, bk, bv;       /* absent biases: n_bytes 0 */
    oc_bw wq, wk, wv, wo, gate, up, down;
} oc_text_layer_bt;

struct oc_text_ctx {
    const oc_text_model *m;
    oc_allocator alloc;
    oc_text_limits lim;
    oc_backend *be;
    oc_backend_kind kind;
    int32_t n_past;
    /* weights */
    oc_text_layer_bt *layers;                    /* [n_layers], in the host block */
    oc_bw token_embd, output;
    int output_tied;                             /* output is token_embd's handle (freed once) */
    oc_bt output_norm, output_bias;
    /* backend buffers, B = max_batch_tokens, C = max_ctx_tokens */
    oc_bt k_cache;                               /* f16: per k slot (layers that store keys; GLA
                                                    lazy layers read their group's first layer's)
                                                    [rows[l]][kv_dim], then staging [C][kv_dim] slots */
    oc_bt v_cache;                               /* f16: per layer [rows[l]][kv_dim], then staging */
    oc_bt x;                                     /* [B][n_embd]; [C][n_embd] when prefilling by
                                                    layer: the whole prompt's residual stream */
    oc_bt xb, q, att;                            /* [B][n_embd] */
    oc_bt k, v;                                  /* [B][kv_dim] */
    oc_bt ff_g, ff_u;                            /* [B][n_ff] */
    oc_bt rope_cos, rope_sin;                    /* OC_BT_HOST on cos_h / sin_h */
    oc_bt ids;                                   /* OC_BT_HOST on the batch's ids: int32 [B] */
    oc_bt logits;                                /* OC_BT_HOST on the batch's logits: [B][n_vocab] */
    oc_bt q_share;                               /* lazy groups only: the first layer's q [B][n_embd]
                                                    after RoPE (Q-Cache Eq. 5-8; its keys are read
                                                    in the K cache) */
    oc_bt iota;                                  /* lazy groups only: int32 0..B-1 (row copies) */
    oc_bt image_store;                           /* [n_rows][n_embd] (oc_text_ctx_image_store_open),
                                                    or absent */
    oc_bt zero;                                  /* int32 0 with the image store: gather_rows'
                                                    index to copy a run of rows in order */
    oc_text_kv_regions reg;                      /* where each layer's keys and values live */
    /* the shrinking KV cache (kvcache/kv_cache.h); the arrays below exist only when a layer evicts */
    oc_kv_policy *kvp;                           /* in the host block */
    oc_kv_book book;                             /* which tokens each (layer, kv head) holds */
    double *kv_acc;                              /* [kvp->n_acc_rows][C]: attention mass of the
                                                    prompt's window / probe rows per key */
    void *kv_scores;                             /* oc_kv_score_scratch_bytes: scoring scratch
                                                    for the pool's threads */
    oc_pool *pool;                               /* borrowed (may be NULL): the scoring's threads */
    const oc_attn_kernels *kv_kern;              /* the host's attention kernels, for the scoring */
    double *kv_norm;                             /* [C] selection scratch */
    int32_t *kv_kept, *kv_order, *kv_nnz, *kv_move;   /* [C] selection scratch */
    float *kv_q;                                 /* [B][n_embd] host copy of the rows being scored,
                                                    then [128][n_embd] the ZipVL probes' (text_kv.c) */
    uint16_t *kv_k;                              /* on a device: [C][kv_dim] f16 host copy of the
                                                    keys being scored (NULL on the CPU: read in place) */
    /* Q-Cache VLA (kvcache/kv_cache.h "Memory"), only with a VLA group: */
    uint8_t *tok_visual;                         /* [C] 1: the token at that position is visual
                                                    (an image row: its key is the first layer's) */
    uint8_t *kv_shared;                          /* [C] one attention call's k_shared flags per
                                                    key row of a compacted kv head */
    /* the same on the device when the backend has kv_dev (text_kv_dev.c): the masses, the chosen
     * sets and their sizes stay there while a prompt is prefilled; the host reads the sets into the
     * book once, after it (absent buffers on the CPU) */
    oc_bt kvd_acc;                               /* f32 [kvp->n_acc_rows][C] */
    oc_bt kvd_stats;                             /* f32 [max(window, 128) rows][n_head][2] */
    oc_bt kvd_part;                              /* f32 [max(window, 128) rows][n_head_kv][C] */
    oc_bt kvd_probes;                            /* int32 [128]: kv_probes */
    oc_bt kvd_flags, kvd_norm;                   /* int32 / f32 [C] selection scratch */
    oc_bt kvd_lists;                             /* int32 [n_layers * n_head_kv + 1][C]: the set of
                                                    (layer, kv head), then ZipVL's T */
    oc_bt kvd_counts;                            /* int32 [n_layers * n_head_kv + 2]: their sizes, p */
    int32_t *kvd_n;                              /* [n_layers * n_head_kv + 2] host copy of the sizes */
    int kv_dev;                                  /* this prompt scores and selects on the device */
    int32_t n_kvd_pending;                       /* first layers whose sets the book has not read */
    int32_t kvd_pending[OC_PLAN_MAX_LAYERS];
    oc_text_times times;
    oc_backend_device *sync_dev;                 /* borrowed: times waits for it (may be NULL) */
    int32_t kv_probes[OC_KV_ZIPVL_RECENT_PROBES + OC_KV_ZIPVL_RANDOM_PROBES];
    int32_t n_kv_probes;
    /* host block */
    void *host;
    size_t host_bytes;
    float *inv_freq;                             /* [head_dim / 2] */
    float *cos_h, *sin_h;                        /* [B][head_dim / 2]; [C][...] when prefilling
                                                    by layer (a prompt's tables, computed once) */
    int32_t tables_row;                          /* the row of cos_h the tables are bound at */
    int32_t tables_rows_dev;                     /* rows from tables_row a prompt's upload left in
                                                    the backend's tables (0: none known) */
};

/* The clock for c->times: now, after the device finished what is queued when c->sync_dev is set. */
uint64_t oc_text_clock(const oc_text_ctx *c);

/* A layer attends over a compacted cache once its eviction ran (kvcache/kv_cache.h). */
static inline int oc_text_compacted(const oc_text_ctx *c, int32_t il) {
    return c->kvp->any_evict && il < c->book.n_compacted && c->kvp->layer[il].evict != OC_KV_KEEP_ALL;
}

/* A visual token: an image row (no id). */
static inline int oc_text_visual(const oc_text_batch *b, int32_t i) { return !(b->ids && b->ids[i] >= 0); }

/* text_layer.c: the forward pass's steps, for text_forward.c and text_prefill.c. Rows of x start at
 * element xo. */
oc_status oc_text_inputs(oc_text_ctx *c, const oc_text_batch *b, int64_t xo, oc_error *err);   /* input rows */
oc_status oc_text_tables(oc_text_ctx *c, const oc_text_batch *b, oc_error *err);   /* M-RoPE tables */
/* The same for the chunk b of a prompt prefilled by layer: its tables are rows row.. of the
 * host tables (sized for the context then), computed once (compute: the first segment) and
 * uploaded again for each later segment, queued on a device (backend write_queued). */
oc_status oc_text_tables_prompt(oc_text_ctx *c, const oc_text_batch *b, int32_t row, int compute, oc_error *err);
/* One decoder layer over the batch: x += attn(norm(x)); x += mlp(norm(x)). */
oc_status oc_text_layer_forward(oc_text_ctx *c, const oc_text_batch *b, int32_t il, int64_t xo, oc_attn_stats *stats,
                        oc_error *err);
/* Every decoder layer over the batch (rows from 0), the same sums in fewer launches: each layer's
 * MLP output is added to x by the next layer's first norm. */
oc_status oc_text_layers(oc_text_ctx *c, const oc_text_batch *b, oc_attn_stats *stats, oc_error *err);
/* Its parts: xb = norm(x), q, k, v of the batch (Q-Cache sharing applied); and x += mlp(norm(x)). */
oc_status oc_text_layer_qkv(oc_text_ctx *c, const oc_text_batch *b, int32_t il, int64_t xo, oc_error *err);
/* The same without k and v (their products and rotation): ZipVL's pass B of a segment's first layer,
 * whose keys and values pass A stored (text_prefill.c). */
oc_status oc_text_layer_q(oc_text_ctx *c, const oc_text_batch *b, int32_t il, int64_t xo, oc_error *err);
oc_status oc_text_layer_mlp(oc_text_ctx *c, const oc_text_batch *b, int32_t il, int64_t xo, oc_error *err);
/* The layer's causal attention call for n_q rows after n_past, over where its keys and values are
 * now (oc_text_k_base / v_base: the prompt's rows until its eviction ran, then its region). */
oc_attn_call oc_text_attn_call(const oc_text_ctx *c, int32_t il, int32_t n_q);
int64_t oc_text_k_base(const oc_text_ctx *c, int32_t il);
int64_t oc_text_v_base(const oc_text_ctx *c, int32_t il);
/* A VLA lazy layer's call reads its visual keys from its group's first layer (qcache.txt Eq. 7-8):
 * key j of the call (kv head g's rows when per_head, else every head's) holds the token at
 * position pos[j] (NULL: j itself) for j < n_held, then the batch's n_new tokens after n_past. */
void oc_text_vla_keys(oc_text_ctx *c, int32_t il, oc_attn_call *a, int32_t g, int per_head, const int32_t *pos,
                      int32_t n_held, int32_t n_new);
/* logits [n_out][n_vocab] = norm(x rows from x_row) Wout^T (+ bias), n_out <= max_batch_tokens. */
oc_status oc_text_head(oc_text_ctx *c, int32_t x_row, int32_t n_out, float *logits, oc_error *err);
/* Rows [s, s + n) of a batch as a batch of their own (a chunk of a prompt given whole). */
oc_text_batch oc_text_chunk(const oc_text_ctx *c, const oc_text_batch *b, int32_t s, int32_t n);

/* text_prefill.c: a whole prompt on a context that prefills by layer (text_model.h). */
oc_status oc_text_prefill_by_layer(oc_text_ctx *c, const oc_text_batch *b, oc_attn_stats *stats, oc_error *err);

/* text_kv.c: the eviction steps of the forward pass. Before a prompt's first batch: clear the
 * scores, draw the prompt's ZipVL probes. */
void oc_text_kv_start(oc_text_ctx *c, int32_t prompt_tokens);
/* After layer il ran on a prompt batch: add the observed rows' attention to the layer's scores. */
oc_status oc_text_kv_score(oc_text_ctx *c, const oc_text_batch *b, int32_t il, oc_error *err);
/* The same, its time added to c->times.score_ns. */
oc_status oc_text_kv_score_timed(oc_text_ctx *c, const oc_text_batch *b, int32_t il, oc_error *err);
/* After the segment of layers first..last ran over the whole prompt (n_past counts it): choose
 * and keep, moving kept rows from the prefill rows (staging) to the layers' regions. */
oc_status oc_text_kv_compact(oc_text_ctx *c, int32_t first, int32_t last, oc_error *err);
/* text_kv_dev.c: the device's scoring and selection (c->kv_dev). start: after oc_text_kv_start, for a
 * prompt prefilled by layer (zeroes the masses, uploads the probes; leaves kv_dev 0 without a
 * device). score / compact: as the host's. zipvl_set: T of layer il into c->kv_kept (one wait), also
 * kept on the device for budget_in_t: each kv head's SparseMM budget within T as indices into T,
 * compacted like oc_text_kv_keep. finish: the pending sets into the book (one wait per set). */
oc_status oc_text_kv_dev_start(oc_text_ctx *c, oc_error *err);
oc_status oc_text_kv_dev_score(oc_text_ctx *c, const oc_text_batch *b, int32_t il, oc_error *err);
oc_status oc_text_kv_dev_compact(oc_text_ctx *c, int32_t first, int32_t last, oc_error *err);
oc_status oc_text_kv_dev_zipvl_set(oc_text_ctx *c, int32_t il, int32_t *n_t, oc_error *err);
oc_status oc_text_kv_dev_budget_in_t(oc_text_ctx *c, int32_t il, oc_error *err);
oc_status oc_text_kv_dev_finish(oc_text_ctx *c, oc_error *err);
/* ZipVL's important set T of layer il (zipvl.txt Eq. 6-9) from its probe rows' scores over the
 * n_past prompt tokens: ascending absolute positions into c->kv_kept; returns |T|. */
int32_t oc_text_kv_zipvl_set(oc_text_ctx *c, int32_t il);
/* Keep rows kept[0..n_kept) (indices into the rows the prompt's tokens now take, ascending) of kv
 * head g in every layer that follows layer first, moving them from the prompt's rows to the
 * regions; the book follows. kept must not be c->kv_move. */
oc_status oc_text_kv_keep(oc_text_ctx *c, int32_t first, int32_t g, const int32_t *kept, int32_t n_kept, oc_error *err);

#endif
