/* context_state.h: what an oc_context holds and how its files share the work, for context*.c
 * only. The public API is context.c (open, close, stats, oc_ask); each job oc_ask and open do has
 * a file named for it, in the order a question passes them:
 *   context_params.c    the limits a context gets and its memory, added up before anything opens
 *   context_engines.c   opening the text and vision graphs on a backend (and the plan's checks)
 *   context_image.c     one image: preprocessing, then the vision encoder into the embedding store
 *   context_prefill.c   the prompt through the language model in batches (and the observers)
 *   context_generate.c  sampling and streaming the answer, one token per decode step */
#ifndef OC_CONTEXT_STATE_H
#define OC_CONTEXT_STATE_H

#include "image/image.h"
#include "attention/layout.h"
#include "core/arena.h"
#include "model/model.h"
#include "kvcache/kv_cache.h"
#include "plan/plan.h"
#include "port.h"
#include "model/sample.h"

struct oc_context {
    const oc_model *m;
    oc_allocator alloc;
    oc_context_params p;
    oc_pool *pool;
    oc_isa isa;
    oc_backend_kind backend;
    oc_backend_device *dev;      /* OpenCL: the device both graphs run on; NULL on the CPU */
    char backend_name[OC_ERROR_MESSAGE_BYTES + 64];
    oc_plan *plan;
    oc_tok_scratch *tok_scratch; /* encode scratch: the model's tokenizer is shared, read-only */
    oc_text_ctx *text;
    oc_vision_ctx *vision;
    oc_prompt prompt;
    oc_sampler sampler;
    float *img_embd;             /* [max_images * max_image_tokens][n_embd] */
    float *batch_embd;           /* [batch_tokens][n_embd] */
    int32_t *batch_ids;          /* [max_context_tokens]: a whole prompt when the plan evicts */
    float *logits, *prompt_logits;   /* [n_vocab] each */
    oc_arena work;               /* oc_ask's memory (work_bytes): one image's decoded pixels and its
                                  * preprocessing, then the prompt's token layout */
    oc_allocator work_alloc;     /* the allocator over work */
    size_t buf_bytes;
    void *buf;
    int has_prompt_logits;
    /* after oc_ask's answer: the greedy token it sampled and did not feed back, and its position
     * (oc_ctx_decode_more continues from there); has_pending 0 when there is none */
    int has_pending;
    int32_t pending_tok, pending_pos;
    /* calibration hook (p.on_attention): f32 host copies, allocated at open only when it is set */
    float *obs_q;                /* [batch_tokens][n_embd] */
    float *obs_k, *obs_v;        /* [max_context_tokens][n_head_kv * head_dim] */
    int32_t *obs_images;         /* [max_images][4] */
    int32_t *obs_segments;       /* [max_image_tokens + 1][2]: vision windows */
    size_t context_bytes;        /* oc_context_memory_bytes at open */
    oc_stats stats;
};

static inline int32_t oc_ctx_batch_of(const oc_context_params *p) {
    return OC_MIN(p->batch_tokens, p->max_context_tokens);
}
static inline int32_t oc_ctx_max_images_of(const oc_model *m, const oc_context_params *p) {
    return m->vision ? p->max_images : 0;
}
static inline double oc_ctx_ms_since(uint64_t t0) { return (double)(oc_port_now_ns() - t0) / 1e6; }
static inline void oc_ctx_progress(const oc_context *c, const char *stage, int32_t done, int32_t total) {
    if (c->p.progress) c->p.progress(c->p.progress_user, stage, done, total);
}

/* context_params.c */
oc_status oc_ctx_check_params(const oc_model *m, const oc_context_params *p, oc_error *err);
oc_context_params oc_ctx_effective_params(const oc_model *m, const oc_context_params *p);
oc_image_limits oc_ctx_decode_limits(const oc_model *m, const oc_context_params *p);
void oc_ctx_prep_params(const oc_model *m, const oc_context_params *p, oc_qwen2vl_prep_params *pp);
size_t oc_ctx_work_bytes(const oc_model *m, const oc_context_params *p, const oc_plan *plan);
int oc_ctx_own_bytes(const oc_model *m, const oc_context_params *p, const oc_plan *plan, size_t *out);
oc_text_limits oc_ctx_text_limits(const oc_context_params *p, const oc_plan *plan);
oc_status oc_ctx_memory_bytes(const oc_model *m, const oc_context_params *p, const oc_plan *plan,
                              oc_backend_kind kind, size_t *bytes, oc_error *err);

/* context_engines.c */
oc_status oc_ctx_check_plan_features(const oc_model *m, const oc_plan *plan, const char *path, oc_error *err);
void oc_ctx_close_engines(oc_context *c);
oc_status oc_ctx_open_engines(oc_context *c, oc_backend_kind kind, const char *device, oc_error *err);

/* context_image.c */
oc_status oc_ctx_encode_image(oc_context *c, const oc_image_rgb *in, int32_t index, int32_t *row,
                              int32_t grid[2], oc_attn_stats *as, oc_error *err);
/* The prompt built from the images' sizes alone (their headers), before any image is decoded:
 * an overflow is found at once. grids: [2 * n_images], the merged-token grids it assumed. */
oc_status oc_ctx_check_prompt_fits(oc_context *c, const oc_request *r, int32_t *grids, oc_error *err);
/* "context overflow" with what to do about it (why: the prompt builder's message). */
oc_status oc_ctx_overflow(const oc_context *c, const char *why, oc_error *err);

/* context_prefill.c */
void oc_ctx_observe_vision(void *user, int32_t layer, const float *qkv, int32_t n, const oc_token_span *seg,
                           int32_t n_seg);
void oc_ctx_observe_batch(oc_context *c, oc_text_batch *b);
oc_status oc_ctx_prefill(oc_context *c, const oc_token_layout *layout, int32_t n_image_rows, oc_attn_stats *as,
                         oc_error *err);
oc_status oc_ctx_build_layout(oc_context *c, oc_token_layout **layout, oc_error *err);

/* context_generate.c */
oc_status oc_ctx_generate(oc_context *c, const oc_request *r, uint64_t t_start, oc_attn_stats *as,
                          oc_error *err);
/* Benchmarks (ocellus bench plans --decode-steps): n more greedy one-token passes after the latest
 * oc_ask's answer, past its stop token, nothing streamed, so that dense and a plan can be timed
 * over the same number of decode steps whatever their answers' lengths. Adds to *as; ms and
 * attn_ms: the steps' wall time and their attention calls' time. Leaves stats and the answer as
 * oc_ask left them. [alloc: no] [errors: OC_ERR_INVALID (no answer to continue), OC_ERR_RANGE
 * (context full; a SparseMM budget's answer room spent), what oc_text_forward returns] */
oc_status oc_ctx_decode_more(oc_context *c, int32_t n, oc_attn_stats *as, double *ms, double *attn_ms,
                             oc_error *err);

#endif
