/* long_run.h: one item of the long-prompt suite (scene_long.h) through an oc_context, as
 * `ocellus eval --suite long` and `ocellus bench plans` both run it: the context's limits for the
 * suite, the item's pixels into the caller's buffer, a greedy answer of at most
 * OC_LONG_RUN_MAX_NEW_TOKENS tokens, whether it is right, and the request's oc_stats. */
#ifndef OC_LONG_RUN_H
#define OC_LONG_RUN_H

#include "ocellus.h"
#include "tools/scene_long.h"

#define OC_LONG_RUN_MAX_NEW_TOKENS 96   /* a list answer is at most ~60 tokens */
#define OC_LONG_RUN_ANSWER_BYTES 256

typedef struct oc_long_run {
    oc_long_item item;
    char answer[OC_LONG_RUN_ANSWER_BYTES];   /* as generated (NUL-terminated, may be cut) */
    size_t n_answer_bytes;
    int stopped;                 /* the answer filled the buffer: generation was asked to stop */
    int correct;                 /* oc_scene_answer_ok(item.answer, answer) */
    int64_t decode_passes;       /* one-token forward passes after prefill (stats.decode_ms's) */
    oc_stats stats;
    /* oc_long_run_item_steps: the forced decode steps after the answer (none: all 0) */
    int32_t steps;
    double steps_ms, steps_attn_ms;
    double steps_cpu_s;          /* the process's CPU time over those steps (0: the OS does not say) */
    uint64_t steps_flops_kept, steps_flops_skipped;   /* decoder attention FLOPs of those steps */
} oc_long_run;

/* The context the suite needs for items of up to max_images images (8..32): context length,
 * image limits, and the prefill chunk (0: the whole prompt in one call; < 0: the backend's choice,
 * oc_context_params.batch_tokens 0). Sets those fields only. */
void oc_long_run_context_params(oc_context_params *cp, int32_t max_images, int32_t chunk);
/* Bytes of the pixel buffer for items of up to max_images images. */
size_t oc_long_run_rgb_bytes(int32_t max_images);
/* Item `index` of stream `seed` (8..max_images images, question types `types`, 0: all) through
 * ctx; rgb: oc_long_run_rgb_bytes(max_images) bytes. [errors: OC_ERR_INVALID (the generator
 * refused the item), what oc_ask returns] */
oc_status oc_long_run_item(oc_context *ctx, uint64_t seed, uint64_t index, int32_t max_images, uint32_t types,
                           uint8_t *rgb, oc_long_run *out, oc_error *err);
/* The same, then `steps` (0..OC_LONG_RUN_MAX_STEPS) more greedy decode steps past the answer, the
 * same number for every plan (ocellus bench plans --decode-steps): decode time that does not hang
 * on the answer's length, 1-2 tokens on most items. The answer and its score are oc_ask's. */
#define OC_LONG_RUN_MAX_STEPS 128   /* with the answer's 96, inside max_answer_tokens' default 256 */
oc_status oc_long_run_item_steps(oc_context *ctx, uint64_t seed, uint64_t index, int32_t max_images, uint32_t types,
                                 int32_t steps, uint8_t *rgb, oc_long_run *out, oc_error *err);

#endif
