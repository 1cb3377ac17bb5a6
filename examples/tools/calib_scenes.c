/* calib_scenes.c: calibration prompts from the synthetic scenes (scene.h), the built-in suite of
 * `ocellus calibrate --suite demo`: for each item the scene is drawn, its answer's grounding cells
 * found (scene_ground.h), the model asked through the public oc_ask with the calibration observer
 * attached to the context, and the item closed with whether the answer was right. */
#include "tools/calib_scenes.h"
#include "tools/scene_ground.h"

#include <string.h>

#define ANSWER_BYTES 128

typedef struct answer_buf { char text[ANSWER_BYTES]; size_t n_bytes; } answer_buf;

static int collect(void *user, const char *text, size_t n_bytes) {
    answer_buf *a = user;
    size_t room = sizeof a->text - 1 - a->n_bytes, n = n_bytes < room ? n_bytes : room;
    memcpy(a->text + a->n_bytes, text, n);
    a->n_bytes += n;
    a->text[a->n_bytes] = '\0';
    return n < n_bytes;
}

void oc_calib_scene_params_default(oc_calib_scene_params *p) {
    memset(p, 0, sizeof *p);
    p->seed = 2000002;
    p->n_items = 100;
    p->min_images = 1;
    p->max_images = OC_SCENE_MAX_IMAGES;
    p->side_px = 112;
    p->max_new_tokens = 8;
}

oc_status oc_calib_scenes(oc_context *ctx, oc_calib *c, const oc_calib_scene_params *p, int64_t *n_right,
                          oc_error *err) {
    *n_right = 0;
    if (p->min_images < 1 || p->min_images > p->max_images || p->max_images > OC_SCENE_MAX_IMAGES ||
        p->side_px < 2 * OC_SCENE_CELL_PX || p->side_px > OC_SCENE_MAX_SIDE_PX || p->side_px % OC_SCENE_CELL_PX ||
        p->n_items < 0 || p->max_new_tokens < 1)
        return oc_fail(err, OC_ERR_INVALID, "calibrate: bad scene parameters");
    int32_t grid = p->side_px / OC_SCENE_CELL_PX;
    size_t image_bytes = (size_t)p->side_px * (size_t)p->side_px * 3;
    size_t rgb_bytes = image_bytes * OC_SCENE_MAX_IMAGES, cell_bytes = (size_t)grid * (size_t)grid;
    uint8_t *rgb = oc_mem_alloc(p->alloc, rgb_bytes);
    uint8_t *cells = oc_mem_alloc(p->alloc, cell_bytes * OC_SCENE_MAX_IMAGES);
    if (!rgb || !cells) {
        oc_mem_free(p->alloc, rgb, rgb_bytes);
        oc_mem_free(p->alloc, cells, cell_bytes * OC_SCENE_MAX_IMAGES);
        return oc_fail(err, OC_ERR_NOMEM, "calibrate: out of memory for the scene buffers");
    }
    oc_status st = OC_OK;
    for (int64_t i = 0; i < p->n_items && !st; i++) {
        oc_scene_desc desc;
        oc_scene_item item;
        uint64_t index = p->first_index + (uint64_t)i;
        if (oc_scene_describe(p->seed, index, p->min_images, p->max_images, p->side_px, &desc, &item)) {
            st = oc_fail(err, OC_ERR_INVALID, "calibrate: the scene generator refused item %llu",
                         (unsigned long long)index);
            break;
        }
        oc_image_rgb views[OC_SCENE_MAX_IMAGES];
        const uint8_t *cell_of[OC_SCENE_MAX_IMAGES];
        for (int32_t k = 0; k < item.n_images; k++) {
            oc_scene_render(&desc, k, rgb + (size_t)k * image_bytes);
            views[k] = (oc_image_rgb){ rgb + (size_t)k * image_bytes, item.width_px, item.height_px,
                                       (size_t)item.width_px * 3 };
            cell_of[k] = cells + (size_t)k * cell_bytes;
        }
        int32_t n_cells = oc_scene_ground(&desc, &item, cells);
        answer_buf answer = { { 0 }, 0 };
        oc_request req;
        oc_request_default(&req);
        req.question = item.question;
        req.images = views;
        req.n_images = item.n_images;
        req.max_new_tokens = p->max_new_tokens;
        req.on_text = collect;
        req.user = &answer;
        oc_calib_item_begin(c, n_cells ? cell_of : NULL, grid);
        if ((st = oc_ask(ctx, &req, err))) break;
        oc_stats stats;
        oc_context_get_stats(ctx, &stats);
        int right = oc_scene_answer_ok(item.answer, answer.text);
        oc_calib_item_end(c, right, stats.n_generated);
        *n_right += right;
        if (p->on_item) p->on_item(p->user, i + 1, p->n_items, stats.n_prompt_tokens);
    }
    oc_mem_free(p->alloc, rgb, rgb_bytes);
    oc_mem_free(p->alloc, cells, cell_bytes * OC_SCENE_MAX_IMAGES);
    return st;
}
