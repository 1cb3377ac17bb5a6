/* text_ctx.h: what an oc_text_ctx holds, shared by text_ctx.c (sizing, opening: weight handles
 * and buffers on the backend) and text_decoder.c (the forward pass) only. Every activation lives in
 * a backend buffer; the host keeps the M-RoPE tables it computes before uploading them. */
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
    oc_bt q_share, k_share;                      /* lazy groups only: the first layer's q [B][n_embd]
                                                    and k [B][kv_dim] after RoPE (Q-Cache Eq. 5-8) */
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
    double *kv_scores;                           /* oc_kv_score_scratch_bytes: scoring scratch */
    double *kv_norm;                             /* [C] selection scratch */
    int32_t *kv_kept, *kv_order, *kv_nnz, *kv_move;   /* [C] selection scratch */
    float *kv_q;                                 /* [B][n_embd] host copy of the rows being scored */
    int32_t kv_probes[OC_KV_ZIPVL_RECENT_PROBES + OC_KV_ZIPVL_RANDOM_PROBES];
    int32_t n_kv_probes;
    /* host block */
    void *host;
    size_t host_bytes;
    float *inv_freq;                             /* [head_dim / 2] */
    float *cos_h, *sin_h;                        /* [B][head_dim / 2] */
};

/* text_kv.c: the eviction steps of the forward pass. Before a prompt's first batch: clear the
 * scores, draw the prompt's ZipVL probes. */
void oc_text_kv_start(oc_text_ctx *c, int32_t prompt_tokens);
/* After layer il ran on a prompt batch: add the observed rows' attention to the layer's scores. */
oc_status oc_text_kv_score(oc_text_ctx *c, const oc_text_batch *b, int32_t il, oc_error *err);
/* After the segment of layers first..last ran over the whole prompt (n_past counts it): choose
 * and keep, moving kept rows from the prefill rows (staging) to the layers' regions. */
oc_status oc_text_kv_compact(oc_text_ctx *c, int32_t first, int32_t last, oc_error *err);

#endif
