/* scene_long.h: the long-prompt suite of synthetic scenes (issue 17): 8-32 images of 224x224 to
 * 448x448 px per item (64-256 merged tokens each, so prompts run 1K-8K tokens) and six question
 * types that need different attention shapes: a detail inside one named image, which image holds
 * a shape (search), a count over all images (global), reading a short code drawn in one image
 * (OCR-like grounding), comparing two named images, and listing image k's shapes (a long answer,
 * 20-60 tokens, so decode-side methods are measured).
 *
 * Like scene.c, scene_long.c depends on the C standard library only and keeps no state: the long
 * model's training script compiles scene.c and scene_long.c alone into a shared object and calls
 * them through ctypes (examples/long/train.py), so training and `ocellus eval --suite long` see
 * the same items. Integer arithmetic only: the same arguments give the same bytes everywhere.
 *
 * Every item also says which image tokens hold its answer (answer_cells: image, row and column
 * of the 28 px cell, i.e. of the merged token): SparseMM's visual-head score needs that. */
#ifndef OC_SCENE_LONG_H
#define OC_SCENE_LONG_H

#include <stddef.h>
#include <stdint.h>

#define OC_LONG_MIN_IMAGES 8
#define OC_LONG_MAX_IMAGES 32
#define OC_LONG_MIN_SIDE_PX 224      /* 8 x 8 cells, 64 merged tokens */
#define OC_LONG_MAX_SIDE_PX 448      /* 16 x 16 cells, 256 merged tokens */
#define OC_LONG_MAX_SHAPES 12        /* per image: 1-5 drawn, 7-12 in an image to be listed */
#define OC_LONG_CODE_CHARS 3         /* a code is 3 glyphs in 3 adjacent cells of one row */
#define OC_LONG_N_GLYPHS 22          /* 0-9 A C E F H K L P R T U X */
#define OC_LONG_MAX_ANSWER_CELLS 16
#define OC_LONG_ANSWER_BYTES 256

typedef enum {
    OC_LONG_DETAIL, OC_LONG_WHICH_IMAGE, OC_LONG_COUNT_ALL, OC_LONG_CODE, OC_LONG_COMPARE, OC_LONG_LIST,
    OC_LONG_N_TYPES
} oc_long_type;

typedef struct oc_long_cell {
    int32_t image, row, col;     /* 0-based image; the merged token at (row, col) of its grid */
} oc_long_cell;

/* What a model sees and must answer. Fixed layout (ctypes mirrors it): 8 int32_t, the cells,
 * then the two strings (NUL-terminated). */
typedef struct oc_long_item {
    int32_t n_images, side_px;   /* every image is side_px x side_px RGB8 */
    int32_t type;                /* oc_long_type */
    int32_t n_answer_cells;      /* 0..OC_LONG_MAX_ANSWER_CELLS (0 for a count of 0) */
    int32_t answer_image;        /* the image that holds the answer, -1 when it is spread (count, compare) */
    int32_t reserved[3];
    oc_long_cell answer_cells[OC_LONG_MAX_ANSWER_CELLS];
    char question[160];
    char answer[OC_LONG_ANSWER_BYTES];
} oc_long_item;

typedef struct oc_long_shape {
    int32_t kind, color;         /* as in scene.h: oc_scene_kind_name, oc_scene_color_name */
    int32_t col, row;            /* grid cell */
    int32_t x_px, y_px, size_px; /* the shape's box, inside its cell; size 14..24 */
} oc_long_shape;

typedef struct oc_long_image {
    int32_t n_shapes;            /* 1..OC_LONG_MAX_SHAPES */
    int32_t background;          /* 0 solid, 1 vertical gradient, 2 horizontal gradient, 3 noise */
    uint8_t bg_rgb[2][3];
    uint8_t pad[2];
    uint64_t noise_seed;
    int32_t has_code;            /* 1: a code of OC_LONG_CODE_CHARS glyphs at (code_row, code_col..+2) */
    int32_t code_row, code_col;
    int32_t code[OC_LONG_CODE_CHARS];   /* glyph indices 0..OC_LONG_N_GLYPHS-1 */
    oc_long_shape shapes[OC_LONG_MAX_SHAPES];
} oc_long_image;

typedef struct oc_long_desc {
    int32_t n_images, side_px, grid;    /* grid = side_px / 28 */
    int32_t image_a, image_b, color, kind;   /* the question's parameters, -1 when unused */
    oc_long_image images[OC_LONG_MAX_IMAGES];
} oc_long_desc;

/* Item `index` of stream `seed`: min_images..max_images images (8..32 within
 * [OC_LONG_MIN_IMAGES, OC_LONG_MAX_IMAGES] is the suite; 1..32 is accepted), one side drawn among
 * the multiples of 28 in min_side_px..max_side_px (56..OC_LONG_MAX_SIDE_PX), and a question type
 * drawn uniformly among the bits set in type_mask (bit t: oc_long_type t; 0 means all).
 * Fills *desc and *item. Returns 0, or -1 on bad arguments. */
int oc_long_describe(uint64_t seed, uint64_t index, int32_t min_images, int32_t max_images, int32_t min_side_px,
                     int32_t max_side_px, uint32_t type_mask, oc_long_desc *desc, oc_long_item *item);
/* Draws image i of desc into rgb (side_px * side_px * 3 bytes, rows side_px * 3 apart). 0 or -1. */
int oc_long_render(const oc_long_desc *desc, int32_t i, uint8_t *rgb);
/* describe + render of every image: rgb needs n_images * side_px * side_px * 3 bytes (at most
 * max_images * max_side_px^2 * 3); image i starts at i * side_px * side_px * 3. 0 or -1. */
int oc_long_make(uint64_t seed, uint64_t index, int32_t min_images, int32_t max_images, int32_t min_side_px,
                 int32_t max_side_px, uint32_t type_mask, oc_long_item *item, uint8_t *rgb);

/* "detail", "which_image", "count_all", "code", "compare", "list"; "?" otherwise. */
const char *oc_long_type_name(int32_t type);
/* The type named `name`, or -1. */
int32_t oc_long_type_from_name(const char *name);
/* The character glyph g draws ('0'..'9', 'A', ...), or '?' out of range. */
char oc_long_glyph_char(int32_t g);

#endif /* OC_SCENE_LONG_H */
