/* calib_scenes.c: calibration prompts from the synthetic scenes (scene.h), the built-in suite of
 * `ocellus calibrate --suite demo`: for each item the scene is drawn, its answer's grounding cells
 * found (scene_ground.h), the model asked through the public oc_ask with the calibration observer
 * attached to the context, and the item closed with whether the answer was right. */
#include "tools/calib_scenes.h"
#include "tools/scene_ground.h"
#include "image/image.h"
#include "tools/json.h"
#include "port.h"

#include <stdio.h>

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

oc_status oc_calib_ask_item(oc_context *ctx, oc_calib *c, const char *question, const char *expected,
                            const oc_image_rgb *images, const char *const *image_paths, int32_t n_images, const uint8_t *const *cells, int32_t grid,
                            int32_t max_new_tokens, int *right, int32_t *n_prompt_tokens, oc_error *err) {
    answer_buf answer = { { 0 }, 0 };
    oc_request req;
    oc_request_default(&req);
    req.question = question;
    req.images = images;
    req.image_paths = images ? NULL : image_paths;
    req.n_images = n_images;
    req.max_new_tokens = max_new_tokens;
    req.on_text = collect;
    req.user = &answer;
    oc_calib_item_begin(c, cells, grid);
    oc_status st = oc_ask(ctx, &req, err);
    if (st) return st;
    oc_stats stats;
    oc_context_get_stats(ctx, &stats);
    *right = oc_scene_answer_ok(expected, answer.text);
    *n_prompt_tokens = stats.n_prompt_tokens;
    oc_calib_item_end(c, *right, stats.n_generated);
    return OC_OK;
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
        int32_t n_cells = oc_scene_ground(&desc, &item, cells), n_prompt = 0;
        int right = 0;
        if ((st = oc_calib_ask_item(ctx, c, item.question, item.answer, views, NULL, item.n_images, n_cells ? cell_of : NULL,
                                    grid, p->max_new_tokens, &right, &n_prompt, err)))
            break;
        *n_right += right;
        if (p->on_item) p->on_item(p->user, i + 1, p->n_items, n_prompt);
    }
    oc_mem_free(p->alloc, rgb, rgb_bytes);
    oc_mem_free(p->alloc, cells, cell_bytes * OC_SCENE_MAX_IMAGES);
    return st;
}

/* ---- a folder of items (`ocellus scene -o DIR`) ------------------------------------------------- */

#define DATA_LINE_BYTES 65536
#define DATA_PATH_BYTES 4096

oc_status oc_calib_data_parse(const oc_json *j, int32_t max_images, uint8_t *cells, size_t cells_bytes,
                              oc_calib_data_item *out, const char *where, oc_error *err) {
    uint32_t root = oc_json_root(j), imgs = oc_json_get(j, root, "images");
    oc_str q, a;
    oc_error e;
    memset(out, 0, sizeof *out);
    if (oc_json_type_of(j, imgs) != OC_JSON_ARRAY || oc_json_count(j, imgs) < 1 ||
        oc_json_count(j, imgs) > (uint32_t)OC_MIN(max_images, OC_CALIB_DATA_MAX_IMAGES) || oc_json_str(j, oc_json_get(j, root, "question"), &q, &e) ||
        oc_json_str(j, oc_json_get(j, root, "answer"), &a, &e) || !q.ptr[0])
        return oc_fail(err, OC_ERR_FORMAT, "%s: need \"images\" (1..%d names), \"question\" and \"answer\"", where,
                       (int)max_images);
    out->question = q.ptr;
    out->answer = a.ptr;
    out->n_images = (int32_t)oc_json_count(j, imgs);
    int32_t k = 0;
    for (uint32_t n = oc_json_first(j, imgs); n != OC_JSON_NONE; n = oc_json_next(j, n), k++) {
        oc_str name;
        /* a plain file name inside the folder: no separators, no "." or ".." */
        if (oc_json_str(j, n, &name, &e) || !name.ptr[0] || strchr(name.ptr, '/') || strchr(name.ptr, '\\') ||
            !strcmp(name.ptr, ".") || !strcmp(name.ptr, "..") || strlen(name.ptr) != name.len)
            return oc_fail(err, OC_ERR_FORMAT, "%s: image %d is not a file name in the folder", where, (int)k + 1);
        out->images[k] = name.ptr;
    }
    uint32_t ground = oc_json_get(j, root, "grounding");
    if (ground == OC_JSON_NONE) return OC_OK;
    int64_t g64;
    if (oc_json_i64(j, oc_json_get(j, root, "grid"), &g64, &e) || g64 < 1 || g64 > 64 ||
        (size_t)g64 * (size_t)g64 * (size_t)out->n_images > cells_bytes || oc_json_type_of(j, ground) != OC_JSON_ARRAY)
        return oc_fail(err, OC_ERR_FORMAT, "%s: \"grounding\" needs \"grid\" (1..64) and a list of cells", where);
    int32_t grid = (int32_t)g64;
    memset(cells, 0, (size_t)grid * (size_t)grid * (size_t)out->n_images);
    for (uint32_t c = oc_json_first(j, ground); c != OC_JSON_NONE; c = oc_json_next(j, c)) {
        int64_t v[3];
        if (oc_json_type_of(j, c) != OC_JSON_ARRAY || oc_json_count(j, c) != 3 ||
            oc_json_i64(j, oc_json_at(j, c, 0), &v[0], &e) || oc_json_i64(j, oc_json_at(j, c, 1), &v[1], &e) ||
            oc_json_i64(j, oc_json_at(j, c, 2), &v[2], &e) || v[0] < 0 || v[0] >= out->n_images || v[1] < 0 ||
            v[1] >= grid || v[2] < 0 || v[2] >= grid)
            return oc_fail(err, OC_ERR_FORMAT, "%s: a grounding cell is not [image, row, col] inside the grid", where);
        cells[((size_t)v[0] * (size_t)grid + (size_t)v[1]) * (size_t)grid + (size_t)v[2]] = 1;
        out->n_cells++;
    }
    out->grid = out->n_cells ? grid : 0;   /* an empty region grounds nothing */
    return OC_OK;
}

/* One JSONL line's item: check it, name its images, ask. oc_ask decodes the files itself, one at a
 * time into the context's image memory, under the context's limits (a bomb is reduced or refused
 * exactly as `ocellus ask` does); paths holds OC_CALIB_DATA_MAX_IMAGES x DATA_PATH_BYTES. */
static oc_status data_item(oc_context *ctx, oc_calib *c, const char *dir, const oc_json *j, const oc_calib_scene_params *p,
                           uint8_t *cells, size_t cells_bytes, char *paths, int *right, int32_t *n_prompt,
                           const char *where, oc_error *err) {
    oc_calib_data_item it;
    oc_status st = oc_calib_data_parse(j, p->max_images, cells, cells_bytes, &it, where, err);
    if (st) return st;
    const char *path_of[OC_CALIB_DATA_MAX_IMAGES];
    const uint8_t *cell_of[OC_CALIB_DATA_MAX_IMAGES];
    for (int32_t k = 0; k < it.n_images; k++) {
        char *path = paths + (size_t)k * DATA_PATH_BYTES;
        if (snprintf(path, DATA_PATH_BYTES, "%s/%s", dir, it.images[k]) >= DATA_PATH_BYTES)
            return oc_fail(err, OC_ERR_FORMAT, "%s: image %d: path too long", where, (int)k + 1);
        path_of[k] = path;
        cell_of[k] = it.grid ? cells + (size_t)k * (size_t)it.grid * (size_t)it.grid : NULL;
    }
    oc_error e;
    st = oc_calib_ask_item(ctx, c, it.question, it.answer, NULL, path_of, it.n_images, it.grid ? cell_of : NULL,
                           it.grid, p->max_new_tokens, right, n_prompt, &e);
    if (st) return oc_fail(err, st, "%s: %s", where, e.message);
    return OC_OK;
}

oc_status oc_calib_data(oc_context *ctx, oc_calib *c, const char *dir, const oc_calib_scene_params *p,
                        int64_t *n_items, int64_t *n_right, oc_error *err) {
    *n_items = *n_right = 0;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/items.jsonl", dir) >= (int)sizeof path)
        return oc_fail(err, OC_ERR_INVALID, "calibrate: folder name too long");
    char msg[OC_ERROR_MESSAGE_BYTES];
    FILE *f = oc_port_fopen_regular(path, msg, sizeof msg);   /* a FIFO is refused, never waited on */
    if (!f) return oc_fail(err, OC_ERR_IO, "%s (a folder `ocellus scene -o DIR` writes items.jsonl)", msg);
    size_t cells_bytes = (size_t)OC_CALIB_DATA_MAX_IMAGES * 64 * 64;
    if (p->max_images < 1 || p->max_images > OC_CALIB_DATA_MAX_IMAGES) {
        fclose(f);
        return oc_fail(err, OC_ERR_INVALID, "calibrate: images per prompt must be 1..%d", OC_CALIB_DATA_MAX_IMAGES);
    }
    char *line = oc_mem_alloc(p->alloc, DATA_LINE_BYTES);
    uint8_t *cells = oc_mem_alloc(p->alloc, cells_bytes);
    const size_t paths_bytes = (size_t)OC_CALIB_DATA_MAX_IMAGES * DATA_PATH_BYTES;
    char *paths = oc_mem_alloc(p->alloc, paths_bytes);
    oc_status st = OC_OK;
    if (!line || !cells || !paths) st = oc_fail(err, OC_ERR_NOMEM, "calibrate: out of memory");
    for (int64_t line_no = 1; !st && *n_items < p->n_items && fgets(line, DATA_LINE_BYTES, f); line_no++) {
        size_t n = strlen(line);
        char where[4200];
        snprintf(where, sizeof where, "%s:%lld", path, (long long)line_no);
        if (n == DATA_LINE_BYTES - 1 && line[n - 1] != '\n') {
            st = oc_fail(err, OC_ERR_FORMAT, "%s: line longer than %d bytes", where, DATA_LINE_BYTES - 2);
            break;
        }
        if (strspn(line, " \t\r\n") == n) continue;
        oc_json *j = NULL;
        oc_error e;
        if ((st = oc_json_parse(&j, line, n, NULL, p->alloc, &e))) {
            st = oc_fail(err, st, "%s: %s", where, e.message);
            break;
        }
        int right = 0;
        int32_t n_prompt = 0;
        st = data_item(ctx, c, dir, j, p, cells, cells_bytes, paths, &right, &n_prompt, where, err);
        oc_json_free(j);
        if (st) break;
        (*n_items)++;
        *n_right += right;
        if (p->on_item) p->on_item(p->user, *n_items, p->n_items, n_prompt);
    }
    if (!st && ferror(f)) st = oc_fail(err, OC_ERR_IO, "%s: read error", path);
    fclose(f);
    oc_mem_free(p->alloc, line, DATA_LINE_BYTES);
    oc_mem_free(p->alloc, cells, cells_bytes);
    oc_mem_free(p->alloc, paths, paths_bytes);
    if (!st && *n_items == 0) st = oc_fail(err, OC_ERR_FORMAT, "%s: no items", path);
    return st;
}
