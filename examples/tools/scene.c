/* scene.c: the synthetic scene generator behind `ocellus eval` and the demo model's training
 * data (see scene.h). Self-contained on purpose: the training script compiles this file alone
 * and calls it through ctypes, so it includes its two headers (scene.h, scene_rng.h) and the C
 * standard library only, keeps no state between calls and uses integer arithmetic only
 * (identical bytes on every platform).
 * An item is built in three steps: a random scene (describe), one question whose answer the
 * generator makes unique by editing the scene (e.g. recolouring the other red circles), then
 * the pixels (render). Editing instead of re-drawing keeps the retries bounded. */
#include "tools/scene.h"
#include "tools/scene_rng.h"

#include <stdio.h>
#include <string.h>

/* ---- palette and names --------------------------------------------------------------------------- */

/* Saturated colours, pairwise >= 100 apart in RGB (the closest pair, yellow/orange, is 104), and
 * >= 100 from every background colour: backgrounds have channels in 0..116 and at most 24
 * between their largest and smallest channel (gray or a slight tint), and the palette colour
 * nearest to that set is green, about 102 away from (76,116,76). tests/test_scene.c checks
 * every background pixel against this palette. */
static const uint8_t palette[OC_SCENE_N_COLORS][3] = {
    { 230, 25, 25 },    /* red */
    { 30, 200, 40 },    /* green */
    { 40, 90, 250 },    /* blue */
    { 250, 230, 30 },   /* yellow */
    { 170, 50, 230 },   /* purple */
    { 255, 130, 0 },    /* orange */
    { 250, 250, 250 },  /* white */
};
static const char *const color_names[OC_SCENE_N_COLORS] = {
    "red", "green", "blue", "yellow", "purple", "orange", "white"
};
static const char *const kind_names[OC_SCENE_N_KINDS] = { "circle", "square", "triangle", "diamond" };
static const char *const type_names[OC_SCENE_N_TYPES] = {
    "color", "count", "position", "which_image", "compare"
};

const char *oc_scene_type_name(int32_t type) {
    return type >= 0 && type < OC_SCENE_N_TYPES ? type_names[type] : "?";
}
const char *oc_scene_color_name(int32_t color) {
    return color >= 0 && color < OC_SCENE_N_COLORS ? color_names[color] : "?";
}
const char *oc_scene_kind_name(int32_t kind) {
    return kind >= 0 && kind < OC_SCENE_N_KINDS ? kind_names[kind] : "?";
}
int oc_scene_color_rgb(int32_t color, uint8_t rgb[3]) {
    if (color < 0 || color >= OC_SCENE_N_COLORS) return -1;
    memcpy(rgb, palette[color], 3);
    return 0;
}

/* ---- random numbers ------------------------------------------------------------------------------ */

/* splitmix64, shared with scene_long.c (scene_rng.h); this suite's stream constant. */
typedef oc_scene_rng rng;
#define mix64 oc_scene_mix64
#define next_u64 oc_scene_next_u64
#define below oc_scene_below
static void rng_seed(rng *r, uint64_t seed, uint64_t index) { oc_scene_rng_seed(r, 0x6A09E667F3BCC909ull, seed, index); }

/* ---- the random scene ------------------------------------------------------------------------------ */

static void draw_background(rng *r, oc_scene_image *im) {
    im->background = below(r, 4);
    int tinted = below(r, 2);
    for (int k = 0; k < 2; k++) {
        int32_t gray = 24 + below(r, 69);                       /* 24..92 */
        for (int c = 0; c < 3; c++)
            im->bg_rgb[k][c] = (uint8_t)(gray + (tinted ? below(r, 25) - 12 : 0));   /* +-12 */
    }
    im->noise_seed = next_u64(r);
}

static int cell_taken(const oc_scene_image *im, int32_t n, int32_t col, int32_t row) {
    for (int32_t j = 0; j < n; j++)
        if (im->shapes[j].col == col && im->shapes[j].row == row) return 1;
    return 0;
}

static void draw_shapes(rng *r, oc_scene_image *im, int32_t grid) {
    im->n_shapes = 1 + below(r, OC_SCENE_MAX_SHAPES);
    for (int32_t s = 0; s < im->n_shapes; s++) {
        oc_scene_shape *sh = &im->shapes[s];
        /* the k-th free cell in row-major order: uniform over free cells, no retries */
        int32_t k = below(r, grid * grid - s), cell = 0;
        for (;; cell++) {
            if (cell_taken(im, s, cell % grid, cell / grid)) continue;
            if (k-- == 0) break;
        }
        sh->col = cell % grid;
        sh->row = cell / grid;
        sh->kind = below(r, OC_SCENE_N_KINDS);
        sh->color = below(r, OC_SCENE_N_COLORS);
        sh->size_px = 14 + below(r, 11);                        /* 14..24 */
        sh->x_px = sh->col * OC_SCENE_CELL_PX + below(r, OC_SCENE_CELL_PX - sh->size_px + 1);
        sh->y_px = sh->row * OC_SCENE_CELL_PX + below(r, OC_SCENE_CELL_PX - sh->size_px + 1);
    }
}

/* ---- edits that make an answer unique --------------------------------------------------------------- */

static int32_t other_color(rng *r, int32_t color) { return (color + 1 + below(r, OC_SCENE_N_COLORS - 1)) % OC_SCENE_N_COLORS; }
static int32_t other_kind(rng *r, int32_t kind) { return (kind + 1 + below(r, OC_SCENE_N_KINDS - 1)) % OC_SCENE_N_KINDS; }

/* Gives every shape of im other than `keep` with this colour and kind another colour. */
static void recolor_matches(rng *r, oc_scene_image *im, int32_t keep, int32_t color, int32_t kind) {
    for (int32_t j = 0; j < im->n_shapes; j++) {
        oc_scene_shape *sh = &im->shapes[j];
        if (j != keep && sh->color == color && sh->kind == kind) sh->color = other_color(r, color);
    }
}

/* Makes exactly n shapes of im have this colour (by_kind 0) or kind (by_kind 1): n random
 * shapes get it, the others lose it. */
static void set_exactly(rng *r, oc_scene_image *im, int32_t n, int by_kind, int32_t value) {
    int32_t order[OC_SCENE_MAX_SHAPES];
    for (int32_t j = 0; j < im->n_shapes; j++) order[j] = j;
    for (int32_t j = 0; j < im->n_shapes - 1; j++) {          /* Fisher-Yates */
        int32_t k = j + below(r, im->n_shapes - j), t = order[j];
        order[j] = order[k];
        order[k] = t;
    }
    for (int32_t j = 0; j < im->n_shapes; j++) {
        oc_scene_shape *sh = &im->shapes[order[j]];
        int32_t *attr = by_kind ? &sh->kind : &sh->color;
        if (j < n) *attr = value;
        else if (*attr == value) *attr = by_kind ? other_kind(r, value) : other_color(r, value);
    }
}

/* ---- questions ----------------------------------------------------------------------------------------- */
/* Each builder picks its parameters, edits the scene so the answer is unique, and writes the
 * text. Returns 0 when this scene cannot carry the question (then nothing was changed). */

static const char *article(int32_t color) { return color_names[color][0] == 'o' ? "an" : "a"; }

static int ask_color(rng *r, oc_scene_desc *d, oc_scene_item *it) {
    int32_t k = below(r, d->n_images);
    oc_scene_image *im = &d->images[k];
    int32_t s = below(r, im->n_shapes), kind = im->shapes[s].kind;
    for (int32_t j = 0; j < im->n_shapes; j++)
        if (j != s && im->shapes[j].kind == kind) im->shapes[j].kind = other_kind(r, kind);
    d->q.image_a = k;
    d->q.kind = kind;
    snprintf(it->question, sizeof it->question, "What color is the %s in image %d?", kind_names[kind], (int)k + 1);
    snprintf(it->answer, sizeof it->answer, "%s", color_names[im->shapes[s].color]);
    return 1;
}

static int ask_count(rng *r, oc_scene_desc *d, oc_scene_item *it) {
    int32_t k = below(r, d->n_images), variant = below(r, 3), n;
    oc_scene_image *im = &d->images[k];
    d->q.image_a = k;
    d->q.variant = variant;
    if (variant == 1) {
        n = im->n_shapes;
        snprintf(it->question, sizeof it->question, "How many shapes are in image %d?", (int)k + 1);
    } else {
        /* the answer first (0..n_shapes), then the scene is edited to match it: counts of 2..4
         * would be rare in a scene drawn uniformly */
        n = below(r, im->n_shapes + 1);
        if (variant == 0) {
            d->q.color = below(r, OC_SCENE_N_COLORS);
            set_exactly(r, im, n, 0, d->q.color);
            snprintf(it->question, sizeof it->question, "How many %s shapes are in image %d?",
                     color_names[d->q.color], (int)k + 1);
        } else {
            d->q.kind = below(r, OC_SCENE_N_KINDS);
            set_exactly(r, im, n, 1, d->q.kind);
            snprintf(it->question, sizeof it->question, "How many %ss are in image %d?",
                     kind_names[d->q.kind], (int)k + 1);
        }
    }
    snprintf(it->answer, sizeof it->answer, "%d", (int)n);
    return 1;
}

static int ask_position(rng *r, oc_scene_desc *d, oc_scene_item *it) {
    int32_t k = below(r, d->n_images), vertical = below(r, 2), half = d->grid / 2;
    oc_scene_image *im = &d->images[k];
    int32_t cand[OC_SCENE_MAX_SHAPES], n_cand = 0;
    /* with an odd grid the middle column (row) is neither left nor right: skip its shapes */
    for (int32_t j = 0; j < im->n_shapes; j++) {
        int32_t pos = vertical ? im->shapes[j].row : im->shapes[j].col;
        if (d->grid % 2 == 0 || pos != half) cand[n_cand++] = j;
    }
    if (n_cand == 0) return 0;
    int32_t s = cand[below(r, n_cand)];
    const oc_scene_shape *sh = &im->shapes[s];
    recolor_matches(r, im, s, sh->color, sh->kind);
    int first = (vertical ? sh->row : sh->col) < half;
    d->q.image_a = k;
    d->q.variant = vertical;
    d->q.color = sh->color;
    d->q.kind = sh->kind;
    snprintf(it->question, sizeof it->question, vertical ? "Is the %s %s in image %d at the top or the bottom?"
                                                         : "Is the %s %s in image %d on the left or the right?",
             color_names[sh->color], kind_names[sh->kind], (int)k + 1);
    snprintf(it->answer, sizeof it->answer, "%s", vertical ? (first ? "top" : "bottom") : (first ? "left" : "right"));
    return 1;
}

static int ask_which_image(rng *r, oc_scene_desc *d, oc_scene_item *it) {
    int32_t k = below(r, d->n_images);
    const oc_scene_shape *sh = &d->images[k].shapes[below(r, d->images[k].n_shapes)];
    for (int32_t i = 0; i < d->n_images; i++)
        if (i != k) recolor_matches(r, &d->images[i], -1, sh->color, sh->kind);
    d->q.color = sh->color;
    d->q.kind = sh->kind;
    snprintf(it->question, sizeof it->question, "Which image has %s %s %s?", article(sh->color),
             color_names[sh->color], kind_names[sh->kind]);
    snprintf(it->answer, sizeof it->answer, "%d", (int)k + 1);
    return 1;
}

static int ask_compare(rng *r, oc_scene_desc *d, oc_scene_item *it) {
    if (d->n_images < 2) return 0;
    int32_t a = below(r, d->n_images), b = below(r, d->n_images - 1);
    if (b >= a) b++;
    int32_t color = below(r, OC_SCENE_N_COLORS);
    int32_t na = 0, nb = 0;
    for (int attempt = 0; attempt < 8 && na == nb; attempt++) {
        na = below(r, d->images[a].n_shapes + 1);
        nb = below(r, d->images[b].n_shapes + 1);
    }
    if (na == nb) na = na > 0 ? 0 : 1;                          /* every image has >= 1 shape */
    set_exactly(r, &d->images[a], na, 0, color);
    set_exactly(r, &d->images[b], nb, 0, color);
    d->q.image_a = a;
    d->q.image_b = b;
    d->q.color = color;
    snprintf(it->question, sizeof it->question, "Which image has more %s shapes, image %d or image %d?",
             color_names[color], (int)a + 1, (int)b + 1);
    snprintf(it->answer, sizeof it->answer, "%d", (int)(na > nb ? a : b) + 1);
    return 1;
}

/* ---- public entry points ----------------------------------------------------------------------------------- */

static int bad_args(int32_t min_images, int32_t max_images, int32_t side_px) {
    return min_images < 1 || max_images > OC_SCENE_MAX_IMAGES || min_images > max_images ||
           side_px < 2 * OC_SCENE_CELL_PX || side_px > OC_SCENE_MAX_SIDE_PX || side_px % OC_SCENE_CELL_PX != 0;
}

int oc_scene_describe(uint64_t seed, uint64_t index, int32_t min_images, int32_t max_images,
                      int32_t side_px, oc_scene_desc *desc, oc_scene_item *item) {
    if (!desc || !item || bad_args(min_images, max_images, side_px)) return -1;
    rng r;
    rng_seed(&r, seed, index);
    memset(desc, 0, sizeof *desc);
    memset(item, 0, sizeof *item);
    desc->n_images = min_images + below(&r, max_images - min_images + 1);
    desc->side_px = side_px;
    desc->grid = side_px / OC_SCENE_CELL_PX;
    for (int32_t i = 0; i < desc->n_images; i++) {
        draw_background(&r, &desc->images[i]);
        draw_shapes(&r, &desc->images[i], desc->grid);
    }
    static int (*const ask[OC_SCENE_N_TYPES])(rng *, oc_scene_desc *, oc_scene_item *) = {
        ask_color, ask_count, ask_position, ask_which_image, ask_compare
    };
    /* a type uniform among those this item can carry: compare needs two images; position can
     * fail only on odd grids whose chosen image has every shape on the middle line */
    int32_t n_types = desc->n_images >= 2 ? OC_SCENE_N_TYPES : OC_SCENE_N_TYPES - 1;
    int done = 0;
    for (int attempt = 0; attempt < 8 && !done; attempt++) {
        oc_scene_question q = { below(&r, n_types), 0, -1, -1, -1, -1 };
        desc->q = q;
        done = ask[q.type](&r, desc, item);
    }
    if (!done) {
        oc_scene_question q = { OC_SCENE_COUNT, 1, 0, -1, -1, -1 };
        desc->q = q;
        snprintf(item->question, sizeof item->question, "How many shapes are in image 1?");
        snprintf(item->answer, sizeof item->answer, "%d", (int)desc->images[0].n_shapes);
    }
    item->n_images = desc->n_images;
    item->width_px = side_px;
    item->height_px = side_px;
    item->type = desc->q.type;
    return 0;
}

/* Is pixel (u, v) of a size x size box inside the shape? Doubled coordinates keep pixel centres
 * (u + 1/2) integral. */
static int inside(int32_t kind, int32_t size, int32_t u, int32_t v) {
    int32_t dx = 2 * u + 1 - size, dy = 2 * v + 1 - size;
    int32_t ax = dx < 0 ? -dx : dx, ay = dy < 0 ? -dy : dy;
    switch (kind) {
    case 0: return dx * dx + dy * dy <= size * size;            /* circle of diameter size */
    case 1: return 1;                                           /* square */
    case 2: return 2 * ax <= 2 * v + 1;                         /* apex at the top middle, base at the bottom */
    default: return ax + ay <= size;                            /* diamond */
    }
}

static uint8_t clamp_u8(int32_t v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

int oc_scene_render(const oc_scene_desc *d, int32_t i, uint8_t *rgb) {
    if (!d || !rgb || i < 0 || i >= d->n_images || bad_args(1, d->n_images, d->side_px)) return -1;
    const oc_scene_image *im = &d->images[i];
    int32_t side = d->side_px;
    if (im->n_shapes < 1 || im->n_shapes > OC_SCENE_MAX_SHAPES || im->background < 0 || im->background > 3) return -1;
    for (int32_t s = 0; s < im->n_shapes; s++) {
        const oc_scene_shape *sh = &im->shapes[s];
        if (sh->kind < 0 || sh->kind >= OC_SCENE_N_KINDS || sh->color < 0 || sh->color >= OC_SCENE_N_COLORS ||
            sh->size_px < 1 || sh->x_px < 0 || sh->y_px < 0 || sh->size_px > side - sh->x_px || sh->size_px > side - sh->y_px)
            return -1;
    }
    /* gradients run from bg_rgb[0] at the first row (column) to bg_rgb[1] at the last: one
     * colour per row (column), computed once */
    uint8_t line[OC_SCENE_MAX_SIDE_PX][3];
    int gradient = im->background == 1 || im->background == 2;
    for (int32_t t = 0; t < side; t++)
        for (int c = 0; c < 3; c++) {
            int32_t c0 = im->bg_rgb[0][c], c1 = im->bg_rgb[1][c];
            line[t][c] = clamp_u8(gradient ? c0 + (c1 - c0) * t / (side - 1) : c0);
        }
    size_t row_bytes = (size_t)side * 3;
    for (int32_t y = 0; y < side; y++) {
        uint8_t *row = rgb + (size_t)y * row_bytes;
        if (im->background == 2) {
            memcpy(row, line, row_bytes);
        } else if (im->background == 3) {
            for (int32_t x = 0; x < side; x++) {
                uint64_t h = mix64(im->noise_seed ^ ((uint64_t)y * (uint64_t)side + (uint64_t)x));
                int32_t noise = (int32_t)(((h >> 32) * 25) >> 32) - 12;   /* -12..12, no division */
                for (int c = 0; c < 3; c++) row[3 * x + c] = clamp_u8(line[0][c] + noise);
            }
        } else {
            const uint8_t *color = line[im->background == 1 ? y : 0];
            for (int32_t x = 0; x < side; x++) memcpy(row + 3 * x, color, 3);
        }
    }
    for (int32_t s = 0; s < im->n_shapes; s++) {
        const oc_scene_shape *sh = &im->shapes[s];
        for (int32_t v = 0; v < sh->size_px; v++)
            for (int32_t u = 0; u < sh->size_px; u++)
                if (inside(sh->kind, sh->size_px, u, v))
                    memcpy(rgb + ((size_t)(sh->y_px + v) * (size_t)side + (size_t)(sh->x_px + u)) * 3, palette[sh->color], 3);
    }
    return 0;
}

int oc_scene_make(uint64_t seed, uint64_t index, int32_t min_images, int32_t max_images,
                  int32_t side_px, oc_scene_item *item, uint8_t *rgb) {
    oc_scene_desc d;
    oc_scene_item it;
    if (!rgb || !item || oc_scene_describe(seed, index, min_images, max_images, side_px, &d, &it)) return -1;
    size_t image_bytes = (size_t)side_px * (size_t)side_px * 3;
    for (int32_t i = 0; i < d.n_images; i++)
        if (oc_scene_render(&d, i, rgb + (size_t)i * image_bytes)) return -1;
    *item = it;
    return 0;
}

/* ---- scoring ------------------------------------------------------------------------------------------------- */

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

void oc_scene_normalize(const char *text, char *out, size_t out_bytes) {
    if (!out || out_bytes == 0) return;
    out[0] = '\0';
    if (!text) return;
    size_t start = 0, end = strlen(text);
    while (start < end && is_space(text[start])) start++;
    while (end > start && (is_space(text[end - 1]) || text[end - 1] == '.')) end--;
    size_t n = end - start < out_bytes - 1 ? end - start : out_bytes - 1;
    for (size_t j = 0; j < n; j++) {
        char c = text[start + j];
        out[j] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    out[n] = '\0';
}

int oc_scene_answer_ok(const char *expected, const char *got) {
    /* both sides normalized: the long suite's codes are upper case ("6X7") */
    char norm_got[256], norm_want[256];
    if (!expected || !got) return 0;
    oc_scene_normalize(got, norm_got, sizeof norm_got);
    oc_scene_normalize(expected, norm_want, sizeof norm_want);
    return strcmp(norm_got, norm_want) == 0;
}
