/* cmd_scene.c: `ocellus scene`: writes synthetic scene items (examples/tools/scene.h) to a directory, for
 * looking at them and for training data: DIR/items.jsonl, one JSON object per line
 *   {"index":I,"images":["I_0.ppm",...],"question":"...","answer":"...","type":"count",
 *    "grid":G,"grounding":[[image,row,col],...]}
 * (grounding: the cells of the G x G grid of 28 px cells that hold the answer, scene_ground.h; what
 * `ocellus calibrate --data DIR` scores SparseMM's visual heads with)
 * and the images as binary PPM (P6) files next to it. The same seed and index give the same
 * item as `ocellus eval` and the ctypes interface of the training script.
 * --suite long writes the long suite (examples/tools/scene_long.h) the same way, each line with
 *   "side_px", "grid" and "grounding" as above (each item has one side, so one grid) and
 *   "answer_image" (-1 when the answer is spread over images). */
#include "tools/tools.h"
#include "tools/scene.h"
#include "tools/scene_ground.h"
#include "tools/scene_long.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: ocellus scene -o DIR [options]\n"
            "  -o DIR                 output directory (created if missing)\n"
            "  --items N              number of items (default 100)\n"
            "  --seed S               item stream (default 0; `ocellus eval` uses 1000001)\n"
            "  --start I              first item index (default 0)\n"
            "  --images-per-item A-B  images per item, uniform in A..B within 1..8 (default 1-8)\n"
            "  --side PX              image side, a multiple of 28 in 56..1792 (default 112)\n"
            "  --suite long           the long suite: 8-32 images (--images-per-item within 8..32,\n"
            "                         default 8-32) of 224-448 px drawn per item (not with --side)\n");
}

/* A JSON string; the generator writes printable ASCII, the escapes are for safety. */
static void put_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static int write_ppm(const char *path, const uint8_t *rgb, int32_t w, int32_t h) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    size_t n = (size_t)w * (size_t)h * 3;
    int ok = fprintf(f, "P6\n%d %d\n255\n", (int)w, (int)h) > 0 && fwrite(rgb, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* One long-suite item: its images and its JSONL line. Returns 0 or 1 (said why). */
static int write_long_item(FILE *jsonl, const char *dir, char *path, size_t path_bytes, unsigned long long seed,
                           unsigned long long index, int32_t min_images, int32_t max_images, uint8_t *rgb) {
    oc_long_item item;
    if (oc_long_make(seed, index, min_images, max_images, OC_LONG_MIN_SIDE_PX, OC_LONG_MAX_SIDE_PX, 0, &item, rgb)) {
        fprintf(stderr, "ocellus scene: the generator refused item %llu\n", index);
        return 1;
    }
    size_t image_bytes = (size_t)item.side_px * (size_t)item.side_px * 3;
    fprintf(jsonl, "{\"index\":%llu,\"side_px\":%d,\"images\":[", index, (int)item.side_px);
    for (int32_t k = 0; k < item.n_images; k++) {
        snprintf(path, path_bytes, "%s/%llu_%d.ppm", dir, index, (int)k);
        if (!write_ppm(path, rgb + (size_t)k * image_bytes, item.side_px, item.side_px)) {
            fprintf(stderr, "ocellus scene: cannot write %s: %s\n", path, strerror(errno));
            return 1;
        }
        fprintf(jsonl, "%s\"%llu_%d.ppm\"", k ? "," : "", index, (int)k);
    }
    fprintf(jsonl, "],\"question\":");
    put_json_str(jsonl, item.question);
    fprintf(jsonl, ",\"answer\":");
    put_json_str(jsonl, item.answer);
    fprintf(jsonl, ",\"type\":\"%s\",\"answer_image\":%d,\"grid\":%d,\"grounding\":[", oc_long_type_name(item.type),
            (int)item.answer_image, (int)(item.side_px / OC_SCENE_CELL_PX));
    for (int32_t c = 0; c < item.n_answer_cells; c++)
        fprintf(jsonl, "%s[%d,%d,%d]", c ? "," : "", (int)item.answer_cells[c].image, (int)item.answer_cells[c].row,
                (int)item.answer_cells[c].col);
    fprintf(jsonl, "]}\n");
    return 0;
}

int oc_tool_scene(int argc, char **argv) {
    const char *dir = NULL;
    unsigned long long n_items = 100, seed = 0, start = 0, side = 112;
    int32_t min_images = 1, max_images = OC_SCENE_MAX_IMAGES;
    int long_suite = 0, range_given = 0, side_given = 0;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--suite") && !strcmp(argv[i + 1], "long")) long_suite = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (a[0] != '-') { fprintf(stderr, "ocellus scene: unexpected argument '%s'\n", a); return 2; }
        else if (!v) { fprintf(stderr, "ocellus scene: option %s needs a value\n", a); return 2; }
        else if (!strcmp(a, "-o")) { dir = v; i++; }
        else if (!strcmp(a, "--suite") && (!strcmp(v, "long") || !strcmp(v, "demo"))) i++;
        else if (!strcmp(a, "--items") && oc_tool_parse_ull(v, 1ULL << 40, &n_items)) i++;
        else if (!strcmp(a, "--seed") && oc_tool_parse_ull(v, ~0ULL, &seed)) i++;
        else if (!strcmp(a, "--start") && oc_tool_parse_ull(v, ~0ULL, &start)) i++;
        else if (!strcmp(a, "--side") && oc_tool_parse_ull(v, OC_SCENE_MAX_SIDE_PX, &side) && side >= 56 && side % OC_SCENE_CELL_PX == 0) { side_given = 1; i++; }
        else if (!strcmp(a, "--images-per-item") &&
                 oc_tool_parse_range(v, long_suite ? OC_LONG_MAX_IMAGES : OC_SCENE_MAX_IMAGES, &min_images, &max_images)) {
            range_given = 1;
            i++;
        }
        else { fprintf(stderr, "ocellus scene: bad option or value: %s %s\n", a, v); return 2; }
    }
    if (!dir) { usage(stderr); return 2; }
    if (long_suite && side_given) {   /* the long suite draws each image's side itself */
        fprintf(stderr, "ocellus scene: --side does nothing with --suite long (its images are 224-448 px)\n");
        return 2;
    }
    if (long_suite && !range_given) {
        min_images = OC_LONG_MIN_IMAGES;
        max_images = OC_LONG_MAX_IMAGES;
    }
    if (long_suite && min_images < 2) { fprintf(stderr, "ocellus scene: the long suite needs >= 2 images per item\n"); return 2; }
    if (long_suite) side = OC_LONG_MAX_SIDE_PX;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "ocellus scene: cannot create directory %s: %s\n", dir, strerror(errno));
        return 1;
    }
    size_t image_bytes = (size_t)side * (size_t)side * 3;
    uint8_t *rgb = malloc(image_bytes * (size_t)max_images);
    size_t path_bytes = strlen(dir) + 64;
    char *path = malloc(path_bytes);
    FILE *jsonl = NULL;
    int rc = 1, tty = isatty(2);
    if (!rgb || !path) { fprintf(stderr, "ocellus scene: out of memory\n"); goto done; }
    snprintf(path, path_bytes, "%s/items.jsonl", dir);
    if (!(jsonl = fopen(path, "w"))) {
        fprintf(stderr, "ocellus scene: cannot write %s: %s\n", path, strerror(errno));
        goto done;
    }
    for (unsigned long long i = 0; i < n_items; i++) {
        unsigned long long index = start + i;
        if (long_suite) {
            if (write_long_item(jsonl, dir, path, path_bytes, seed, index, min_images, max_images, rgb)) goto done;
            if (tty && (i % 8 == 7 || i + 1 == n_items)) fprintf(stderr, "\rwriting items %llu/%llu", i + 1, n_items);
            continue;
        }
        oc_scene_item item;
        if (oc_scene_make(seed, index, min_images, max_images, (int32_t)side, &item, rgb)) {
            fprintf(stderr, "ocellus scene: the generator refused item %llu\n", index);
            goto done;
        }
        fprintf(jsonl, "{\"index\":%llu,\"images\":[", index);
        for (int32_t k = 0; k < item.n_images; k++) {
            snprintf(path, path_bytes, "%s/%llu_%d.ppm", dir, index, (int)k);
            if (!write_ppm(path, rgb + (size_t)k * image_bytes, item.width_px, item.height_px)) {
                fprintf(stderr, "ocellus scene: cannot write %s: %s\n", path, strerror(errno));
                goto done;
            }
            fprintf(jsonl, "%s\"%llu_%d.ppm\"", k ? "," : "", index, (int)k);
        }
        fprintf(jsonl, "],\"question\":");
        put_json_str(jsonl, item.question);
        fprintf(jsonl, ",\"answer\":");
        put_json_str(jsonl, item.answer);
        fprintf(jsonl, ",\"type\":\"%s\"", oc_scene_type_name(item.type));
        oc_scene_desc desc;
        oc_scene_item again;
        static uint8_t cells[OC_SCENE_MAX_IMAGES * 64 * 64];   /* grid <= 1792 / 28 = 64 */
        if (oc_scene_describe(seed, index, min_images, max_images, (int32_t)side, &desc, &again) == 0) {
            oc_scene_ground(&desc, &again, cells);
            fprintf(jsonl, ",\"grid\":%d,\"grounding\":[", (int)desc.grid);
            int first = 1;
            for (int32_t g = 0; g < desc.n_images; g++)
                for (int32_t r = 0; r < desc.grid; r++)
                    for (int32_t col = 0; col < desc.grid; col++)
                        if (cells[((size_t)g * desc.grid + r) * desc.grid + col]) {
                            fprintf(jsonl, "%s[%d,%d,%d]", first ? "" : ",", (int)g, (int)r, (int)col);
                            first = 0;
                        }
            fprintf(jsonl, "]");
        }
        fprintf(jsonl, "}\n");
        if (tty && (i % 64 == 63 || i + 1 == n_items)) fprintf(stderr, "\rwriting items %llu/%llu", i + 1, n_items);
    }
    if (tty) fprintf(stderr, "\r%50s\r", "");
    rc = 0;
done:
    if (jsonl && fclose(jsonl) != 0 && rc == 0) {
        snprintf(path, path_bytes, "%s/items.jsonl", dir);
        fprintf(stderr, "ocellus scene: cannot write %s: %s\n", path, strerror(errno));
        rc = 1;
    }
    free(rgb);
    free(path);
    if (rc == 0) printf("wrote %llu items to %s/items.jsonl\n", n_items, dir);
    return rc;
}
