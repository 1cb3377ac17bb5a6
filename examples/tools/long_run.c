/* long_run.c: one long-suite item through a context (long_run.h). Memory: the caller's pixel
 * buffer; nothing is allocated here. */
#include "tools/long_run.h"
#include "tools/scene.h"
#include "core/core.h"
#include "model/context_state.h"
#include "port.h"

#include <string.h>

void oc_long_run_context_params(oc_context_params *cp, int32_t max_images, int32_t chunk) {
    int32_t max_tokens_per_image = (OC_LONG_MAX_SIDE_PX / OC_SCENE_CELL_PX) * (OC_LONG_MAX_SIDE_PX / OC_SCENE_CELL_PX);
    cp->max_images = max_images;
    /* each image: its tokens, <|vision_start|>, <|vision_end|> and its "Picture N: " label (< 8
     * tokens); 512 more for the template, the question and a long answer */
    cp->max_context_tokens = max_images * (max_tokens_per_image + 10) + 512;
    if (cp->max_image_tokens < max_tokens_per_image) cp->max_image_tokens = max_tokens_per_image;
    if (cp->min_image_tokens > 64) cp->min_image_tokens = 64;
    cp->batch_tokens = chunk < 0 ? 0 : chunk > 0 && chunk < cp->max_context_tokens ? chunk : cp->max_context_tokens;
}

size_t oc_long_run_rgb_bytes(int32_t max_images) {
    return (size_t)max_images * OC_LONG_MAX_SIDE_PX * OC_LONG_MAX_SIDE_PX * 3;
}

static int collect(void *user, const char *text, size_t n_bytes) {
    oc_long_run *r = user;
    size_t room = sizeof r->answer - 1 - r->n_answer_bytes, n = n_bytes < room ? n_bytes : room;
    memcpy(r->answer + r->n_answer_bytes, text, n);
    r->n_answer_bytes += n;
    r->answer[r->n_answer_bytes] = '\0';
    r->stopped |= n < n_bytes;
    return n < n_bytes;
}

/* The one-token forward passes of an answer of n_generated tokens (oc_ask's loop, context.c
 * generate()): the first token comes from prefill; each generated token is fed back, except the last
 * when generation ended by the token limit or by on_text asking to stop; when it ended on a stop
 * token, the pass after the last text token produced it. */
static int64_t decode_passes(int32_t n_generated, int truncated) {
    if (n_generated <= 0) return 0;
    return n_generated - (n_generated >= OC_LONG_RUN_MAX_NEW_TOKENS || truncated ? 1 : 0);
}

oc_status oc_long_run_item(oc_context *ctx, uint64_t seed, uint64_t index, int32_t max_images, uint32_t types,
                           uint8_t *rgb, oc_long_run *out, oc_error *err) {
    return oc_long_run_item_steps(ctx, seed, index, max_images, types, 0, rgb, out, err);
}

oc_status oc_long_run_item_steps(oc_context *ctx, uint64_t seed, uint64_t index, int32_t max_images, uint32_t types,
                                 int32_t steps, uint8_t *rgb, oc_long_run *out, oc_error *err) {
    memset(out, 0, sizeof *out);
    if (steps < 0 || steps > OC_LONG_RUN_MAX_STEPS)
        return oc_fail(err, OC_ERR_INVALID, "decode steps %d outside 0..%d", steps, OC_LONG_RUN_MAX_STEPS);
    if (oc_long_make(seed, index, OC_LONG_MIN_IMAGES, max_images, OC_LONG_MIN_SIDE_PX, OC_LONG_MAX_SIDE_PX, types,
                     &out->item, rgb))
        return oc_fail(err, OC_ERR_INVALID, "the long scene generator refused item %llu", (unsigned long long)index);
    const oc_long_item *item = &out->item;
    oc_image_rgb views[OC_LONG_MAX_IMAGES];
    size_t image_bytes = (size_t)item->side_px * (size_t)item->side_px * 3;
    for (int32_t k = 0; k < item->n_images; k++) {
        views[k].rgb = rgb + (size_t)k * image_bytes;
        views[k].width_px = item->side_px;
        views[k].height_px = item->side_px;
        views[k].stride_bytes = (size_t)item->side_px * 3;
    }
    oc_request req;
    oc_request_default(&req);
    req.question = item->question;
    req.images = views;
    req.n_images = item->n_images;
    req.max_new_tokens = OC_LONG_RUN_MAX_NEW_TOKENS;
    req.sampling.temperature = 0.0f;
    req.on_text = collect;
    req.user = out;
    oc_status st = oc_ask(ctx, &req, err);
    if (st) return st;
    oc_context_get_stats(ctx, &out->stats);
    out->correct = oc_scene_answer_ok(item->answer, out->answer);   /* both sides normalized */
    out->decode_passes = decode_passes(out->stats.n_generated, out->stopped);
    if (steps > 0) {
        oc_attn_stats as = { 0, 0, 0 };
        double c0 = oc_port_self_cpu_s();
        if ((st = oc_ctx_decode_more(ctx, steps, &as, &out->steps_ms, &out->steps_attn_ms, err))) return st;
        double c1 = oc_port_self_cpu_s();
        out->steps_cpu_s = c0 >= 0 && c1 >= 0 ? c1 - c0 : 0.0;   /* -1: the OS does not say */
        out->steps = steps;
        out->steps_flops_kept = as.flops_kept;
        out->steps_flops_skipped = as.flops_skipped;
    }
    return OC_OK;
}
