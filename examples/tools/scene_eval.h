/* scene_eval.h: scores a model on the synthetic scenes of scene.h through the public oc_ask API
 * (greedy decoding, a few new tokens, the answer normalized as oc_scene_normalize does): the
 * core of `ocellus eval`, kept in the library so tests can run it on a fixture model. */
#ifndef OC_SCENE_EVAL_H
#define OC_SCENE_EVAL_H

#include "core/core.h"
#include "tools/scene.h"

/* What on_item sees after each item. Pointers are borrowed for the call. */
typedef struct oc_scene_eval_report {
    int64_t i;                    /* 0-based position in the run (item index first_index + i) */
    const oc_scene_item *item;
    const char *got;              /* the generated text as streamed (at most 127 bytes) */
    int correct;
    const oc_stats *stats;        /* oc_context_get_stats after this item */
} oc_scene_eval_report;

typedef struct oc_scene_eval_params {
    uint64_t seed;                /* default 1000001 (not a training seed of the demo model) */
    uint64_t first_index;         /* items first_index .. first_index + n_items - 1 (default 0) */
    int64_t n_items;              /* default 500 */
    int32_t min_images, max_images;   /* default 1, 8 */
    int32_t side_px;              /* default 112 */
    int32_t max_new_tokens;       /* default 8; oc_scene_eval_context_params allows up to 64 */
    const oc_allocator *alloc;    /* for the pixel buffer; NULL: malloc */
    void (*on_item)(void *user, const oc_scene_eval_report *report);   /* may be NULL */
    void *user;
} oc_scene_eval_params;

typedef struct oc_scene_eval_result {
    int64_t n_items, n_correct;
    int64_t n_items_of[OC_SCENE_N_TYPES], n_correct_of[OC_SCENE_N_TYPES];   /* per oc_scene_type */
    double prompt_tokens_sum, ttft_ms_sum;
    uint64_t attn_flops_kept, attn_flops_skipped;
    double kv_bytes_sum;          /* KV cache bytes held after each item (oc_stats.kv_bytes) */
    size_t kv_capacity_bytes;     /* what the KV cache buffers take */
} oc_scene_eval_result;

void oc_scene_eval_params_default(oc_scene_eval_params *p);
/* Sets the limits of an eval context: images per item, a context long enough for max_images
 * images of side_px plus the chat template, the question and the answer, and image token
 * bounds that take side_px x side_px unscaled. */
void oc_scene_eval_context_params(oc_context_params *cp, int32_t max_images, int32_t side_px);

/* Runs the items through ctx (opened with at least oc_scene_eval_context_params' limits) and
 * fills *out (zeroed first; on an error it holds the items done so far).
 * [errors: OC_ERR_INVALID (bad parameters), OC_ERR_NOMEM, and oc_ask's errors] */
oc_status oc_scene_eval(oc_context *ctx, const oc_scene_eval_params *p, oc_scene_eval_result *out,
                        oc_error *err);

#endif /* OC_SCENE_EVAL_H */
