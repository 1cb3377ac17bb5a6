/* calib_scenes.h: the synthetic-scene calibration suite (calib_scenes.c). */
#ifndef OC_CALIB_SCENES_H
#define OC_CALIB_SCENES_H

#include "ocellus.h"
#include "tools/calib.h"
#include "tools/scene.h"
#include "tools/json.h"

/* Images per prompt of a --data folder: the long suite's items hold 8-32 (scene_long). */
#define OC_CALIB_DATA_MAX_IMAGES 32

typedef struct oc_calib_scene_params {
    uint64_t seed;                /* default 2000002: neither a training seed nor `ocellus eval`'s */
    uint64_t first_index;
    int64_t n_items;              /* default 100 */
    int32_t min_images, max_images, side_px;   /* default 1, 8, 112 */
    int32_t max_new_tokens;       /* default 8 */
    const oc_allocator *alloc;    /* scene buffers; NULL: malloc */
    void (*on_item)(void *user, int64_t done, int64_t total, int32_t n_prompt_tokens);   /* may be NULL */
    void *user;
} oc_calib_scene_params;

void oc_calib_scene_params_default(oc_calib_scene_params *p);

/* Runs the items through ctx, which must have been opened with on_attention = oc_calib_observe and
 * attention_user = c (and limits from oc_scene_eval_context_params). *n_right: right answers.
 * [alloc: yes, the scene buffers, once] [errors: OC_ERR_INVALID, OC_ERR_NOMEM, oc_ask's errors] */
oc_status oc_calib_scenes(oc_context *ctx, oc_calib *c, const oc_calib_scene_params *p, int64_t *n_right,
                          oc_error *err);

/* One calibration prompt: begin the item with its grounding (cells per image over a grid x grid
 * scene grid, or NULL), ask greedily, end it with whether the answer matched expected (scored as
 * `ocellus eval` does). The images are pixels (images) or files (image_paths, images NULL) that
 * oc_ask decodes within the context's limits, as `ocellus ask` does. [errors: oc_ask's] */
oc_status oc_calib_ask_item(oc_context *ctx, oc_calib *c, const char *question, const char *expected,
                            const oc_image_rgb *images, const char *const *image_paths, int32_t n_images, const uint8_t *const *cells, int32_t grid,
                            int32_t max_new_tokens, int *right, int32_t *n_prompt_tokens, oc_error *err);

/* One line of items.jsonl, checked (the strings are borrowed from the JSON document). */
typedef struct oc_calib_data_item {
    const char *question, *answer;
    const char *images[OC_CALIB_DATA_MAX_IMAGES];   /* plain file names in the folder */
    int32_t n_images;
    int32_t grid, n_cells;                     /* grid 0: no grounding */
} oc_calib_data_item;

/* Check one parsed line: "images" (1..max_images plain file names: no '/', '\\', "." or ".."),
 * non-empty "question", "answer", and with "grounding" a "grid" (1..64) and cells [image, row, col]
 * inside it, written into cells (n_images * grid * grid bytes <= cells_bytes). where names the line
 * in messages. [alloc: no] [errors: OC_ERR_FORMAT] */
oc_status oc_calib_data_parse(const struct oc_json *j, int32_t max_images, uint8_t *cells, size_t cells_bytes,
                              oc_calib_data_item *out, const char *where, oc_error *err);

/* The prompts of a folder `ocellus scene` wrote: DIR/items.jsonl, one object per line with
 * "images" (file names in DIR, at most p->max_images), "question", "answer", and optionally "grid"
 * and "grounding" ([[image, row, col], ...], the cells that hold the answer: SparseMM's region;
 * without them the item gives BlindSight and Q-Cache statistics only). The first p->n_items lines
 * (all when fewer). The images are decoded by oc_ask within ctx's limits (as `ocellus ask` does),
 * so ctx needs max_image_pixels > 0. [alloc: per line, freed] [errors: OC_ERR_IO, OC_ERR_FORMAT
 * naming the line, oc_ask's] */
oc_status oc_calib_data(oc_context *ctx, oc_calib *c, const char *dir, const oc_calib_scene_params *p,
                        int64_t *n_items, int64_t *n_right, oc_error *err);

#endif
