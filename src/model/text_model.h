/* text_model.h: the Qwen2-VL / Qwen2.5-VL language model as a text GGUF (arch "qwen2vl") holds it,
 * and its forward pass (text_forward.c over text_layer.c): RMSNorm, q/k/v with bias, M-RoPE,
 * grouped-query attention through the engine over an f16 KV cache, SwiGLU, tied or separate output
 * head.
 * Names, keys and orientation: docs/formats.md §2a (llama.cpp's converter output).
 *
 * The model is read-only after loading (share it between threads and contexts); all mutable state
 * (KV cache, activations, matmul and attention scratch) lives in an oc_text_ctx sized once for
 * stated limits, so a forward pass allocates nothing. */
#ifndef OC_TEXT_MODEL_H
#define OC_TEXT_MODEL_H

#include "attention/attn.h"
#include "backend/backend.h"
#include "core/core.h"
#include "kernels/matmul.h"
#include "plan/plan.h"

typedef struct oc_text_hparams {
    int32_t n_vocab;         /* rows of token_embd (may exceed the tokenizer's size) */
    int32_t n_embd;          /* hidden size */
    int32_t n_layers;
    int32_t n_ff;            /* from the ffn_gate shape */
    int32_t n_head, n_head_kv, head_dim;
    int32_t n_ctx_train;     /* qwen2vl.context_length */
    float rope_base;         /* qwen2vl.rope.freq_base */
    float eps;               /* qwen2vl.attention.layer_norm_rms_epsilon */
    int32_t rope_sections[4];/* qwen2vl.rope.dimension_sections: pairs rotated by t, h, w, (e) */
} oc_text_hparams;

typedef struct oc_text_layer {
    const float *attn_norm;
    oc_weight wq, wk, wv, wo;
    const float *bq, *bk, *bv;   /* biases (Qwen2 has them on q/k/v; NULL when absent) */
    const float *ffn_norm;
    oc_weight gate, up, down;
} oc_text_layer;

typedef struct oc_text_model {
    oc_text_hparams hp;
    oc_weight token_embd;        /* [n_vocab rows of n_embd] */
    oc_weight output;            /* the lm head: output.weight, or token_embd when tied */
    const float *output_bias;    /* optional output.bias */
    const float *output_norm;
    oc_text_layer *layers;       /* [n_layers] */
    float *vec_arena;            /* every 1-D tensor converted to f32 (norms, biases) */
    size_t vec_arena_bytes, layers_bytes;
    oc_allocator alloc;
} oc_text_model;

/* Load from an open text GGUF (it must outlive the model: 2-D weights point into its mapping).
 * source names the file in messages. Checks the architecture, every key and every tensor's
 * presence, type and shape. [alloc: layers + 1-D tensors] [errors: OC_ERR_FORMAT, OC_ERR_TYPE,
 * OC_ERR_UNSUPPORTED (architecture, weight type), OC_ERR_NOMEM] */
oc_status oc_text_model_load(oc_text_model **out, const oc_gguf *g, const char *source,
                             const oc_allocator *alloc, oc_error *err);
void oc_text_model_free(oc_text_model *m);

/* ---- forward pass ------------------------------------------------------------------------------ */
typedef struct oc_text_limits {
    int32_t max_ctx_tokens;      /* KV cache length */
    int32_t max_batch_tokens;    /* tokens per forward call */
    /* The plan whose SparseMM kv budgets, ZipVL thresholds and Q-Cache lazy groups shape the KV
     * cache (kvcache/kv_cache.h), or NULL: a dense cache. Borrowed: must outlive the context. */
    const oc_plan *kv_plan;
    /* Tokens that may follow the prompt (its answer): with it a SparseMM layer's cache holds its
     * budget plus these rows instead of the whole context (kvcache/kv_cache.h "Memory"); a forward
     * call past it fails with OC_ERR_RANGE. 0: the rest of the context (no bound). */
    int32_t max_answer_tokens;
} oc_text_limits;

typedef struct oc_text_ctx oc_text_ctx;

/* Where the decoder's time went, summed since oc_text_ctx_reset (bench plans, oc_stats): wall
 * nanoseconds on the host. On a device the steps are queued, so a step's time is its own only when
 * sync_dev is set: each timed step then waits for the device before and after (slower). */
typedef struct oc_text_times {
    uint64_t attn_ns;        /* the attention calls (their index estimation included) */
    uint64_t estimate_ns;    /* ... of which MMInference's index estimation and choice (dyn.h) */
    uint64_t score_ns;       /* SparseMM / ZipVL: scoring the window / probe rows (text_kv.c) */
    uint64_t select_ns;      /* SparseMM / ZipVL: choosing the kept tokens, compacting the cache */
} oc_text_times;

/* Host bytes oc_text_ctx_open_backend allocates for these limits on that backend with n_threads
 * pool threads (on CPU: KV cache, activations, scratch, handles); 0 on overflow. */
size_t oc_text_ctx_bytes(const oc_text_model *m, const oc_text_limits *lim, const oc_backend_spec *spec,
                         int n_threads);
/* Opens a backend instance (backend.h) for the context, hands it every weight once and allocates
 * every buffer. [alloc: yes, once] [errors: OC_ERR_INVALID, OC_ERR_RANGE, OC_ERR_UNSUPPORTED
 * (backend, isa), OC_ERR_NOMEM, OC_ERR_DEVICE] */
oc_status oc_text_ctx_open_backend(oc_text_ctx **out, const oc_text_model *m, const oc_text_limits *lim,
                                   const oc_backend_spec *spec, const oc_allocator *alloc, oc_error *err);
/* The CPU backend on pool (borrowed, may be NULL) with isa's kernels. */
oc_status oc_text_ctx_open(oc_text_ctx **out, const oc_text_model *m, const oc_text_limits *lim,
                           oc_pool *pool, oc_isa isa, const oc_allocator *alloc, oc_error *err);
void oc_text_ctx_close(oc_text_ctx *ctx);
/* Forget the cached tokens (the next forward starts at sequence index 0). */
void oc_text_ctx_reset(oc_text_ctx *ctx);
int32_t oc_text_ctx_n_past(const oc_text_ctx *ctx);
/* KV cache bytes: held = f16 keys and values of the tokens held now (after eviction), capacity =
 * what the cache buffers take (fixed at open). */
void oc_text_ctx_kv_bytes(const oc_text_ctx *ctx, size_t *held, size_t *capacity);
/* Where the time went since the last reset (oc_text_times); sync_dev (borrowed, may be NULL): the
 * device whose queue each timed step waits for, so that on OpenCL the times are the steps' own. */
oc_text_times oc_text_ctx_times(const oc_text_ctx *ctx);
void oc_text_ctx_time_sync(oc_text_ctx *ctx, oc_backend_device *sync_dev);
/* Benchmarks: stand a prompt of n_tokens in the cache without computing it (a 16K-token prefill
 * takes minutes on a small CPU): every layer's keys and values become rows_f16 ([n_tokens][kv_dim]
 * f16, the same rows in every layer), each evicting layer's attention mass of key j becomes mass[j]
 * (scaled to the rows the rule observes), and eviction runs as at the end of a real prompt. Then
 * decode steps run as usual. [alloc: no] [errors: OC_ERR_RANGE (context), backend errors] */
oc_status oc_text_ctx_bench_fill(oc_text_ctx *ctx, const uint16_t *rows_f16, const double *mass, int32_t n_tokens,
                                 oc_error *err);
/* The image store: n_rows rows of n_embd floats on the context's backend, which the vision encoder
 * on the same device fills (oc_vision_encode_to) and batches with embd_in_store read, so image
 * embeddings go from encoder to decoder without the host. oc_context makes one on a device, right
 * after open (on the CPU the host store costs no copy). [alloc: yes, once] [errors: OC_ERR_INVALID
 * (twice, n_rows < 1), OC_ERR_NOMEM, OC_ERR_DEVICE] */
oc_status oc_text_ctx_image_store_open(oc_text_ctx *ctx, int32_t n_rows, oc_error *err);
oc_bt *oc_text_ctx_image_store(oc_text_ctx *ctx);   /* NULL when none was opened */
/* 1 when a prompt goes in one oc_text_forward call (n_tokens == prompt_tokens, it may exceed
 * max_batch_tokens), prefilled segment by segment (kvcache/kv_cache.h "Memory"): every context
 * whose plan evicts. */
int oc_text_ctx_prefills_by_layer(const oc_text_ctx *ctx);
/* Tests: which tokens (absolute indices, ascending) (layer, kv head) holds; returns the count. */
int32_t oc_text_ctx_kv_held(const oc_text_ctx *ctx, int32_t layer, int32_t kv_head, const int32_t **pos);

/* One forward call over n tokens that follow the cached ones.
 *   ids[i] >= 0: a text token; ids[i] < 0 (or ids NULL): row i of embd (n_embd floats) is the
 *   token's input embedding (an image feature); with embd_in_store, row -1 - ids[i] of the image
 *   store is (copied on the backend; embd unused).
 *   pos_t/h/w: M-RoPE positions of the n tokens.
 *   plan: the decoder patterns (NULL: dense); layout: where the images are (for BlindSight).
 *   logits: NULL (none), or [n_vocab] for the last token, or [n][n_vocab] when all_logits.
 * [alloc: no] [errors: OC_ERR_RANGE (batch or context full), OC_ERR_INVALID] */
typedef struct oc_text_batch {
    int32_t n_tokens;
    const int32_t *ids;
    const float *embd;
    int embd_in_store;
    int embd_indexed;                 /* ids[i] < 0 names row -1 - ids[i] of embd (host), not row i */
    const int32_t *pos_t, *pos_h, *pos_w;
    const oc_stack_plan *plan;
    const oc_token_layout *layout;
    float *logits;
    int all_logits;
    /* The prompt this batch belongs to has prompt_tokens tokens (0: not a prompt batch). On a
     * context that prefills by layer (oc_text_ctx_prefills_by_layer) the whole prompt is one
     * batch: each segment of layers runs over it in chunks of max_batch_tokens, scores the
     * prompt's window / probe rows (SparseMM, ZipVL) and evicts before the next segment. */
    int32_t prompt_tokens;
    /* tests only: layer_masks[L] != NULL replaces layer L's attention mask (causal base and plan
     * patterns) by an explicit byte mask [n_tokens][n_past + n_tokens] shared by all heads, so a
     * sparse plan can be compared with the dense engine under the same mask written out */
    const uint8_t *const *layer_masks;
    int64_t layer_mask_stride_head;   /* 0: one mask for all heads; else per head, this far apart */
    /* optional (tests): when a ZipVL segment chose its important set T (zipvl.txt Eq. 9), called
     * for each layer of the segment with T's absolute positions, ascending */
    void (*on_zipvl)(void *user, int32_t layer, const int32_t *kept, int32_t n_kept);
    /* optional: after layer L, called with the [n][n_embd] residual stream (parity tests) */
    void (*on_layer)(void *user, int32_t layer, const float *x, int32_t n_tokens, int32_t n_embd);
    void *user;
    /* optional observation hook for calibration (oc_context_params.on_attention): before layer L's
     * attention the forward copies into these host arrays the batch's post-RoPE queries
     * obs_q [n_tokens][n_head * head_dim] and every cached key and value so far, k after RoPE,
     * as f32: obs_k, obs_v [n_past + n_tokens][n_head_kv * head_dim]; then calls on_attn. NULL:
     * nothing is copied (the hook costs one pointer test per layer). */
    void (*on_attn)(void *obs_user, int32_t layer, int32_t n_q, int32_t n_kv);
    void *obs_user;
    float *obs_q, *obs_k, *obs_v;
} oc_text_batch;
oc_status oc_text_forward(oc_text_ctx *ctx, const oc_text_batch *b, oc_attn_stats *stats,
                          oc_error *err);

#endif
