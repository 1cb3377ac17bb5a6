/* scene.h: a deterministic generator of synthetic visual question-answering items: 1-8 images of
 * coloured shapes on plain, gradient, tinted or noisy backgrounds, and one question about them
 * (a colour, a count, a position, which image holds something, or a comparison across images)
 * with a short answer (a word, a number or an image index). `ocellus eval` scores a model on
 * these items; `ocellus scene` writes them to disk; the demo model's training script compiles
 * scene.c alone (cc -O2 -shared -fPIC -o scene.so examples/tools/scene.c -lm) and calls it through ctypes,
 * so this header and scene.c depend on the C standard library only.
 *
 * The world: an image of side_px x side_px is a grid of 28 px cells (the area of one language
 * token after Qwen2-VL's 14 px patches are merged 2x2). Each image holds 1-4 shapes, each inside
 * its own cell; so "left" means the cell is in the left half of the grid, and so on. */
#ifndef OC_SCENE_H
#define OC_SCENE_H

#include <stddef.h>
#include <stdint.h>

#define OC_SCENE_MAX_IMAGES 8
#define OC_SCENE_MAX_SHAPES 4        /* per image */
#define OC_SCENE_CELL_PX 28
#define OC_SCENE_MAX_SIDE_PX 1792    /* 64 x 64 cells */
#define OC_SCENE_N_COLORS 7          /* red green blue yellow purple orange white */
#define OC_SCENE_N_KINDS 4           /* circle square triangle diamond */

typedef enum {
    OC_SCENE_COLOR, OC_SCENE_COUNT, OC_SCENE_POSITION, OC_SCENE_WHICH_IMAGE, OC_SCENE_COMPARE,
    OC_SCENE_N_TYPES
} oc_scene_type;

/* What a model sees and must answer. 192 bytes, no padding: four int32_t, then the two strings
 * (NUL-terminated). */
typedef struct oc_scene_item {
    int32_t n_images, width_px, height_px;   /* every image is width_px x height_px RGB8 */
    int32_t type;                            /* oc_scene_type */
    char question[160];
    char answer[16];
} oc_scene_item;

/* Item `index` of stream `seed`, with min_images..max_images images (1..8) of side_px x side_px
 * (a multiple of 28, 56..OC_SCENE_MAX_SIDE_PX): fills *item and writes n_images*side*side*3
 * bytes to rgb (room for OC_SCENE_MAX_IMAGES*side*side*3; image i starts at i*side*side*3, rows
 * side*3 bytes apart). A pure function of its arguments: the same arguments give the same bytes
 * on every platform (integer arithmetic only). Returns 0, or -1 on bad arguments (then nothing
 * is written). */
int oc_scene_make(uint64_t seed, uint64_t index, int32_t min_images, int32_t max_images,
                  int32_t side_px, oc_scene_item *item, uint8_t *rgb);

/* "color", "count", "position", "which_image", "compare"; "?" for anything else. */
const char *oc_scene_type_name(int32_t type);

/* ---- the scene description behind an item (for tests and tools) ------------------------------ */

typedef struct oc_scene_shape {
    int32_t kind;                 /* 0 circle, 1 square, 2 triangle (apex up), 3 diamond */
    int32_t color;                /* index into the palette, 0..OC_SCENE_N_COLORS-1 */
    int32_t col, row;             /* grid cell */
    int32_t x_px, y_px;           /* top-left corner of the shape's box, inside the cell */
    int32_t size_px;              /* side of the box, 14..24 */
} oc_scene_shape;

typedef struct oc_scene_image {
    int32_t n_shapes;             /* 1..OC_SCENE_MAX_SHAPES */
    int32_t background;           /* 0 solid, 1 vertical gradient, 2 horizontal gradient, 3 noise */
    uint8_t bg_rgb[2][3];         /* solid: [0]; gradients: from [0] (top/left) to [1] */
    uint64_t noise_seed;          /* per-pixel noise of background 3 */
    oc_scene_shape shapes[OC_SCENE_MAX_SHAPES];
} oc_scene_image;

/* The question's parameters (what the generator asked); unused fields are -1. */
typedef struct oc_scene_question {
    int32_t type;                 /* oc_scene_type */
    int32_t variant;              /* count: 0 by colour, 1 all shapes, 2 by kind;
                                     position: 0 left/right, 1 top/bottom; otherwise 0 */
    int32_t image_a, image_b;     /* 0-based; compare uses both, the others image_a (not
                                     which_image) */
    int32_t color, kind;          /* the colour / kind named in the question */
} oc_scene_question;

typedef struct oc_scene_desc {
    int32_t n_images, side_px, grid;   /* grid = side_px / 28 cells per row and column */
    oc_scene_image images[OC_SCENE_MAX_IMAGES];
    oc_scene_question q;
} oc_scene_desc;

/* The description and the text of an item, without pixels: oc_scene_make is oc_scene_describe
 * followed by oc_scene_render of each image. Returns 0 or -1 on bad arguments. */
int oc_scene_describe(uint64_t seed, uint64_t index, int32_t min_images, int32_t max_images,
                      int32_t side_px, oc_scene_desc *desc, oc_scene_item *item);
/* Draws image i of desc into rgb (side_px * side_px * 3 bytes). Returns 0 or -1. */
int oc_scene_render(const oc_scene_desc *desc, int32_t i, uint8_t *rgb);

/* Names ("red", "circle"), or "?" out of range. The plural of a kind is its name + "s". */
const char *oc_scene_color_name(int32_t color);
const char *oc_scene_kind_name(int32_t kind);
/* The palette colour's RGB8 value in rgb[0..2]; returns 0, or -1 out of range. */
int oc_scene_color_rgb(int32_t color, uint8_t rgb[3]);

/* ---- scoring ----------------------------------------------------------------------------------- */
/* A model's answer as it is scored: leading and trailing white space and trailing '.' removed,
 * ASCII lower-cased, truncated to out_bytes - 1 bytes. */
void oc_scene_normalize(const char *text, char *out, size_t out_bytes);
/* 1 if normalize(got) equals normalize(expected) (an item's answer; up to 255 bytes), else 0. */
int oc_scene_answer_ok(const char *expected, const char *got);

#endif /* OC_SCENE_H */
