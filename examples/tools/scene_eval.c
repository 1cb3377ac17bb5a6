/* scene_eval.c: `ocellus eval`'s core (see scene_eval.h): generate an item, ask the model with
 * greedy decoding, score the normalized answer, add up accuracy per question type, prompt
 * tokens, TTFT and the attention FLOPs a plan skipped. Uses the public API only, plus scene.h. */
#include "tools/scene_eval.h"

#include <string.h>

#define ANSWER_BYTES 128

void oc_scene_eval_params_default(oc_scene_eval_params *p) {
    memset(p, 0, sizeof *p);
    p->seed = 1000001;
    p->n_items = 500;
    p->min_images = 1;
    p->max_images = OC_SCENE_MAX_IMAGES;
    p->side_px = 112;
    p->max_new_tokens = 8;
}

void oc_scene_eval_context_params(oc_context_params *cp, int32_t max_images, int32_t side_px) {
    int32_t cells = side_px / OC_SCENE_CELL_PX, image_tokens = cells * cells;
    cp->max_images = max_images;
    /* each image: its tokens plus <|vision_start|> and <|vision_end|>. 256 more cover the chat
     * template with the default system prompt (about 20 tokens), the question (under 160 bytes,
     * so under 160 tokens even with a byte-level vocabulary) and the answer */
    cp->max_context_tokens = max_images * (image_tokens + 2) + 256;
    if (cp->max_image_tokens < image_tokens) cp->max_image_tokens = image_tokens;
    if (cp->min_image_tokens > image_tokens) cp->min_image_tokens = image_tokens;
}

typedef struct answer_buf {
    char text[ANSWER_BYTES];
    size_t n_bytes;
} answer_buf;

static int collect(void *user, const char *text, size_t n_bytes) {
    answer_buf *a = user;
    size_t room = sizeof a->text - 1 - a->n_bytes;
    size_t n = n_bytes < room ? n_bytes : room;
    memcpy(a->text + a->n_bytes, text, n);
    a->n_bytes += n;
    a->text[a->n_bytes] = '\0';
    return n < n_bytes;   /* full: stop generating, the answer is wrong anyway */
}

oc_status oc_scene_eval(oc_context *ctx, const oc_scene_eval_params *p, oc_scene_eval_result *out,
                        oc_error *err) {
    memset(out, 0, sizeof *out);
    if (p->min_images < 1 || p->min_images > p->max_images || p->max_images > OC_SCENE_MAX_IMAGES)
        return oc_fail(err, OC_ERR_INVALID, "eval: images per item must be within 1-%d (got %d-%d)",
                       OC_SCENE_MAX_IMAGES, p->min_images, p->max_images);
    if (p->side_px < 2 * OC_SCENE_CELL_PX || p->side_px > OC_SCENE_MAX_SIDE_PX || p->side_px % OC_SCENE_CELL_PX)
        return oc_fail(err, OC_ERR_INVALID, "eval: image side must be a multiple of %d in %d..%d (got %d)",
                       OC_SCENE_CELL_PX, 2 * OC_SCENE_CELL_PX, OC_SCENE_MAX_SIDE_PX, p->side_px);
    if (p->n_items < 0 || p->max_new_tokens < 1)
        return oc_fail(err, OC_ERR_INVALID, "eval: need items >= 0 and max_new_tokens >= 1");
    size_t image_bytes = (size_t)p->side_px * (size_t)p->side_px * 3;
    size_t rgb_bytes = image_bytes * OC_SCENE_MAX_IMAGES;
    uint8_t *rgb = oc_mem_alloc(p->alloc, rgb_bytes);
    if (!rgb) return oc_fail(err, OC_ERR_NOMEM, "eval: out of memory for %zu bytes of pixels", rgb_bytes);
    oc_status st = OC_OK;
    for (int64_t i = 0; i < p->n_items; i++) {
        oc_scene_item item;
        /* the arguments were checked above, so this cannot fail */
        if (oc_scene_make(p->seed, p->first_index + (uint64_t)i, p->min_images, p->max_images, p->side_px, &item, rgb)) {
            st = oc_fail(err, OC_ERR_INVALID, "eval: the scene generator refused item %lld", (long long)i);
            break;
        }
        oc_image_rgb views[OC_SCENE_MAX_IMAGES];
        for (int32_t k = 0; k < item.n_images; k++) {
            views[k].rgb = rgb + (size_t)k * image_bytes;
            views[k].width_px = item.width_px;
            views[k].height_px = item.height_px;
            views[k].stride_bytes = (size_t)item.width_px * 3;
        }
        answer_buf answer = { { 0 }, 0 };
        oc_request req;
        oc_request_default(&req);
        req.question = item.question;
        req.images = views;
        req.n_images = item.n_images;
        req.max_new_tokens = p->max_new_tokens;
        req.sampling.temperature = 0.0f;   /* greedy */
        req.on_text = collect;
        req.user = &answer;
        if ((st = oc_ask(ctx, &req, err))) break;
        oc_stats s;
        oc_context_get_stats(ctx, &s);
        int correct = oc_scene_answer_ok(item.answer, answer.text);
        out->n_items++;
        out->n_correct += correct;
        out->n_items_of[item.type]++;
        out->n_correct_of[item.type] += correct;
        out->prompt_tokens_sum += s.n_prompt_tokens;
        out->ttft_ms_sum += s.ttft_ms;
        out->attn_flops_kept += s.attn_flops_kept;
        out->attn_flops_skipped += s.attn_flops_skipped;
        out->kv_bytes_sum += (double)s.kv_bytes;
        out->kv_capacity_bytes = s.kv_capacity_bytes;
        if (p->on_item) {
            oc_scene_eval_report r = { i, &item, answer.text, correct, &s };
            p->on_item(p->user, &r);
        }
    }
    oc_mem_free(p->alloc, rgb, rgb_bytes);
    return st;
}
