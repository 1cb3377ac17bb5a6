/* test_scene.c: the synthetic scene generator (examples/tools/scene.c) and the eval loop (examples/tools/scene_eval.c):
 *   - oc_scene_item's layout (the training script mirrors it with ctypes) and a pinned hash of a
 *     stream of items, so a change to the generated data is deliberate (a trained demo model
 *     depends on it) and platforms agree byte for byte;
 *   - determinism, bad arguments, 1- and 8-image items, odd grids;
 *   - every answer re-derived from the scene description by code independent of the generator
 *     (uniqueness, counts, halves of the image in pixels), every question's exact text;
 *   - rendering: each shape's centre pixel has its colour, shapes cover most of their box, and
 *     every background pixel is far (RGB distance >= 100) from every palette colour;
 *   - oc_scene_eval on the random-weight fixture model (3 items; its accuracy means nothing),
 *     dense and with a sparse plan. */
#include "check.h"
#include "plan/plan.h"
#include "tools/scene.h"
#include "tools/scene_eval.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIDE 112
#define IMAGE_BYTES (SIDE * SIDE * 3)
#define DIR "tests/data/models/"

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

static void test_item_layout(void) {
    CHECK(sizeof(oc_scene_item) == 192);
    CHECK(offsetof(oc_scene_item, n_images) == 0);
    CHECK(offsetof(oc_scene_item, width_px) == 4);
    CHECK(offsetof(oc_scene_item, height_px) == 8);
    CHECK(offsetof(oc_scene_item, type) == 12);
    CHECK(offsetof(oc_scene_item, question) == 16);
    CHECK(offsetof(oc_scene_item, answer) == 176);
    CHECK(!strcmp(oc_scene_type_name(OC_SCENE_COLOR), "color"));
    CHECK(!strcmp(oc_scene_type_name(OC_SCENE_COUNT), "count"));
    CHECK(!strcmp(oc_scene_type_name(OC_SCENE_POSITION), "position"));
    CHECK(!strcmp(oc_scene_type_name(OC_SCENE_WHICH_IMAGE), "which_image"));
    CHECK(!strcmp(oc_scene_type_name(OC_SCENE_COMPARE), "compare"));
    CHECK(!strcmp(oc_scene_type_name(5), "?") && !strcmp(oc_scene_type_name(-1), "?"));
    CHECK(!strcmp(oc_scene_color_name(5), "orange") && !strcmp(oc_scene_kind_name(3), "diamond"));
    uint8_t rgb[3];
    CHECK(oc_scene_color_rgb(7, rgb) == -1 && oc_scene_color_rgb(0, rgb) == 0 && rgb[0] == 230);
}

/* The first 40 items of seed 12345 with 1-8 images (question, answer, pixels) hash to a pinned
 * value. If you change the generator on purpose, update the value, and retrain the demo model. */
static void test_pinned_stream(void) {
    uint8_t *rgb = malloc((size_t)OC_SCENE_MAX_IMAGES * IMAGE_BYTES);
    REQUIRE(rgb);
    uint64_t h = 0xCBF29CE484222325ull;
    for (uint64_t i = 0; i < 40; i++) {
        oc_scene_item it;
        REQUIRE(oc_scene_make(12345, i, 1, 8, SIDE, &it, rgb) == 0);
        h = fnv1a(h, it.question, strlen(it.question));
        h = fnv1a(h, it.answer, strlen(it.answer));
        h = fnv1a(h, rgb, (size_t)it.n_images * IMAGE_BYTES);
    }
    printf("  stream hash %016llx\n", (unsigned long long)h);
    CHECKF(h == 0x2e084c384b6d2710ull, "stream hash %016llx changed", (unsigned long long)h);
    free(rgb);
}

static void test_determinism(void) {
    size_t n = (size_t)OC_SCENE_MAX_IMAGES * IMAGE_BYTES;
    uint8_t *a = malloc(n), *b = malloc(n);
    REQUIRE(a && b);
    int n_differ = 0;
    for (uint64_t i = 0; i < 20; i++) {
        oc_scene_item x, y, z;
        memset(a, 0x11, n);
        memset(b, 0xEE, n);   /* different poison: every byte the call owns must be written */
        memset(&x, 0x11, sizeof x);
        memset(&y, 0xEE, sizeof y);
        REQUIRE(oc_scene_make(99, i, 1, 8, SIDE, &x, a) == 0);
        REQUIRE(oc_scene_make(99, i, 1, 8, SIDE, &y, b) == 0);
        CHECKF(!memcmp(&x, &y, sizeof x), "item %d: text differs between two calls", (int)i);
        CHECKF(!memcmp(a, b, (size_t)x.n_images * IMAGE_BYTES), "item %d: pixels differ between two calls", (int)i);
        REQUIRE(oc_scene_make(99, i + 1, 1, 8, SIDE, &z, b) == 0);
        n_differ += strcmp(x.question, z.question) != 0 || x.n_images != z.n_images ||
                    memcmp(a, b, (size_t)x.n_images * IMAGE_BYTES) != 0;
        REQUIRE(oc_scene_make(100, i, 1, 8, SIDE, &z, b) == 0);
        n_differ += strcmp(x.question, z.question) != 0 || x.n_images != z.n_images ||
                    memcmp(a, b, (size_t)x.n_images * IMAGE_BYTES) != 0;
    }
    CHECKF(n_differ == 40, "only %d of 40 neighbouring items differ", n_differ);
    free(a);
    free(b);
}

static void test_bad_arguments(void) {
    uint8_t *rgb = malloc((size_t)OC_SCENE_MAX_IMAGES * IMAGE_BYTES);
    REQUIRE(rgb);
    memset(rgb, 0x5A, (size_t)OC_SCENE_MAX_IMAGES * IMAGE_BYTES);
    oc_scene_item it;
    memset(&it, 0x5A, sizeof it);
    static const int32_t bad[][3] = {   /* min, max, side */
        { 0, 8, 112 }, { 1, 9, 112 }, { 5, 4, 112 }, { -1, 2, 112 }, { 1, 8, 28 }, { 1, 8, 0 },
        { 1, 8, 113 }, { 1, 8, 126 }, { 1, 8, OC_SCENE_MAX_SIDE_PX + 28 }, { 1, 8, -112 },
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        CHECKF(oc_scene_make(1, 2, bad[k][0], bad[k][1], bad[k][2], &it, rgb) == -1, "case %d accepted", (int)k);
    CHECK(oc_scene_make(1, 2, 1, 8, SIDE, NULL, rgb) == -1);
    CHECK(oc_scene_make(1, 2, 1, 8, SIDE, &it, NULL) == -1);
    oc_scene_desc d;
    CHECK(oc_scene_describe(1, 2, 1, 8, SIDE, NULL, &it) == -1);
    CHECK(oc_scene_describe(1, 2, 1, 8, SIDE, &d, NULL) == -1);
    int untouched = 1;
    for (size_t j = 0; j < (size_t)OC_SCENE_MAX_IMAGES * IMAGE_BYTES; j++) untouched &= rgb[j] == 0x5A;
    for (size_t j = 0; j < sizeof it; j++) untouched &= ((unsigned char *)&it)[j] == 0x5A;
    CHECK(untouched);
    REQUIRE(oc_scene_describe(1, 2, 1, 8, SIDE, &d, &it) == 0);
    CHECK(oc_scene_render(&d, -1, rgb) == -1 && oc_scene_render(&d, d.n_images, rgb) == -1);
    CHECK(oc_scene_render(NULL, 0, rgb) == -1 && oc_scene_render(&d, 0, NULL) == -1);
    d.images[0].shapes[0].x_px = SIDE - 1;   /* a shape outside the image */
    CHECK(oc_scene_render(&d, 0, rgb) == -1);
    d.images[0].shapes[0].x_px = 0;
    d.images[0].shapes[0].color = OC_SCENE_N_COLORS;
    CHECK(oc_scene_render(&d, 0, rgb) == -1);
    free(rgb);
}

/* ---- independent re-derivation of the answers ----------------------------------------------------- */

static int n_with(const oc_scene_image *im, int32_t color, int32_t kind) {
    int n = 0;
    for (int32_t j = 0; j < im->n_shapes; j++)
        n += (color < 0 || im->shapes[j].color == color) && (kind < 0 || im->shapes[j].kind == kind);
    return n;
}

static const oc_scene_shape *the_one(const oc_scene_image *im, int32_t color, int32_t kind) {
    for (int32_t j = 0; j < im->n_shapes; j++)
        if ((color < 0 || im->shapes[j].color == color) && (kind < 0 || im->shapes[j].kind == kind)) return &im->shapes[j];
    return NULL;
}

/* Checks one item against its description; returns 1 if every check passed. */
static int check_item(const oc_scene_desc *d, const oc_scene_item *it, int32_t min_images, int32_t max_images) {
    int ok = 1;
#define EXPECT(cond, ...) do { if (!(cond)) { check_fail_at(__FILE__, __LINE__, __VA_ARGS__); ok = 0; } } while (0)
    EXPECT(it->n_images == d->n_images && it->n_images >= min_images && it->n_images <= max_images,
           "n_images %d", it->n_images);
    EXPECT(it->width_px == d->side_px && it->height_px == d->side_px && d->grid * 28 == d->side_px, "size");
    EXPECT(it->type == d->q.type && it->type >= 0 && it->type < OC_SCENE_N_TYPES, "type %d", it->type);
    for (int32_t i = 0; i < d->n_images; i++) {
        const oc_scene_image *im = &d->images[i];
        EXPECT(im->n_shapes >= 1 && im->n_shapes <= 4, "image %d has %d shapes", i, im->n_shapes);
        for (int32_t j = 0; j < im->n_shapes; j++) {
            const oc_scene_shape *s = &im->shapes[j];
            EXPECT(s->size_px >= 14 && s->size_px <= 24, "size %d", s->size_px);
            EXPECT(s->x_px >= s->col * 28 && s->x_px + s->size_px <= (s->col + 1) * 28 &&
                   s->y_px >= s->row * 28 && s->y_px + s->size_px <= (s->row + 1) * 28, "shape outside its cell");
            for (int32_t k = 0; k < j; k++)
                EXPECT(im->shapes[k].col != s->col || im->shapes[k].row != s->row, "two shapes in one cell");
        }
    }
    char q[160], a[16];
    const oc_scene_question *p = &d->q;
    int k = p->image_a;
    const char *cn = oc_scene_color_name(p->color), *kn = oc_scene_kind_name(p->kind);
    switch (it->type) {
    case OC_SCENE_COLOR: {
        EXPECT(n_with(&d->images[k], -1, p->kind) == 1, "color: %s not unique", kn);
        snprintf(q, sizeof q, "What color is the %s in image %d?", kn, k + 1);
        const oc_scene_shape *s = the_one(&d->images[k], -1, p->kind);
        snprintf(a, sizeof a, "%s", s ? oc_scene_color_name(s->color) : "");
        break;
    }
    case OC_SCENE_COUNT:
        if (p->variant == 0) snprintf(q, sizeof q, "How many %s shapes are in image %d?", cn, k + 1);
        else if (p->variant == 1) snprintf(q, sizeof q, "How many shapes are in image %d?", k + 1);
        else snprintf(q, sizeof q, "How many %ss are in image %d?", kn, k + 1);
        snprintf(a, sizeof a, "%d", n_with(&d->images[k], p->variant == 0 ? p->color : -1, p->variant == 2 ? p->kind : -1));
        break;
    case OC_SCENE_POSITION: {
        EXPECT(n_with(&d->images[k], p->color, p->kind) == 1, "position: %s %s not unique", cn, kn);
        const oc_scene_shape *s = the_one(&d->images[k], p->color, p->kind);
        int half = d->side_px / 2, lo = p->variant ? s->y_px : s->x_px;
        /* in pixels: the whole shape lies in one half of the image */
        EXPECT(lo + s->size_px <= half || lo >= half, "position: shape straddles the middle");
        if (p->variant) snprintf(q, sizeof q, "Is the %s %s in image %d at the top or the bottom?", cn, kn, k + 1);
        else snprintf(q, sizeof q, "Is the %s %s in image %d on the left or the right?", cn, kn, k + 1);
        snprintf(a, sizeof a, "%s", p->variant ? (lo < half ? "top" : "bottom") : (lo < half ? "left" : "right"));
        break;
    }
    case OC_SCENE_WHICH_IMAGE: {
        int n = 0, which = 0;
        for (int32_t i = 0; i < d->n_images; i++)
            if (n_with(&d->images[i], p->color, p->kind)) { n++; which = i + 1; }
        EXPECT(n == 1, "which_image: %d images have a %s %s", n, cn, kn);
        snprintf(q, sizeof q, "Which image has %s %s %s?", cn[0] == 'o' ? "an" : "a", cn, kn);
        snprintf(a, sizeof a, "%d", which);
        break;
    }
    case OC_SCENE_COMPARE: {
        EXPECT(d->n_images >= 2 && p->image_a != p->image_b, "compare with %d images", d->n_images);
        int na = n_with(&d->images[p->image_a], p->color, -1), nb = n_with(&d->images[p->image_b], p->color, -1);
        EXPECT(na != nb, "compare: equal counts %d", na);
        snprintf(q, sizeof q, "Which image has more %s shapes, image %d or image %d?", cn, p->image_a + 1, p->image_b + 1);
        snprintf(a, sizeof a, "%d", (na > nb ? p->image_a : p->image_b) + 1);
        break;
    }
    default: q[0] = a[0] = '\0';
    }
    EXPECT(!strcmp(q, it->question), "question '%s', expected '%s'", it->question, q);
    EXPECT(!strcmp(a, it->answer), "%s: answer '%s', re-derived '%s'", it->question, it->answer, a);
    if (it->type == OC_SCENE_WHICH_IMAGE || it->type == OC_SCENE_COMPARE)
        EXPECT(atoi(it->answer) >= 1 && atoi(it->answer) <= it->n_images, "image index %s", it->answer);
#undef EXPECT
    return ok;
}

/* Runs check_item over n items; counts types (and per-type answers) into n_of_type. */
static void check_stream(uint64_t seed, int n, int32_t min_images, int32_t max_images, int32_t side,
                         int n_of_type[OC_SCENE_N_TYPES]) {
    for (int i = 0; i < n; i++) {
        oc_scene_desc d;
        oc_scene_item it;
        if (oc_scene_describe(seed, (uint64_t)i, min_images, max_images, side, &d, &it)) {
            check_fail_at(__FILE__, __LINE__, "describe failed (%d-%d images, side %d)", min_images, max_images, side);
            return;
        }
        if (!check_item(&d, &it, min_images, max_images)) return;
        n_of_type[it.type]++;
    }
}

static void test_answers(void) {
    int n_of_type[OC_SCENE_N_TYPES] = { 0 };
    check_stream(7, 600, 1, 8, SIDE, n_of_type);
    for (int t = 0; t < OC_SCENE_N_TYPES; t++)
        CHECKF(n_of_type[t] >= 80, "type %s occurs %d times in 600 items", oc_scene_type_name(t), n_of_type[t]);
    /* one image: no comparison, and "which image" is always image 1 */
    int one[OC_SCENE_N_TYPES] = { 0 };
    check_stream(8, 200, 1, 1, SIDE, one);
    CHECK(one[OC_SCENE_COMPARE] == 0);
    for (int t = 0; t < OC_SCENE_COMPARE; t++) CHECKF(one[t] >= 25, "1 image: type %s %d times", oc_scene_type_name(t), one[t]);
    int eight[OC_SCENE_N_TYPES] = { 0 };
    check_stream(9, 200, 8, 8, SIDE, eight);
    for (int t = 0; t < OC_SCENE_N_TYPES; t++) CHECKF(eight[t] >= 20, "8 images: type %s %d times", oc_scene_type_name(t), eight[t]);
    /* other sides: the smallest grid (2 x 2), odd grids with a middle column and row */
    int other[OC_SCENE_N_TYPES] = { 0 };
    check_stream(10, 100, 1, 8, 56, other);
    check_stream(11, 100, 1, 8, 84, other);
    check_stream(12, 50, 2, 3, 140, other);
    check_stream(13, 20, 1, 2, 448, other);
}

/* Answers are spread out: every colour, count, side and image index shows up. */
static void test_answer_spread(void) {
    int seen[OC_SCENE_N_TYPES][16] = { { 0 } };
    for (int i = 0; i < 2000; i++) {
        oc_scene_desc d;
        oc_scene_item it;
        REQUIRE(oc_scene_describe(21, (uint64_t)i, 1, 8, SIDE, &d, &it) == 0);
        int v = -1;
        if (it.type == OC_SCENE_COLOR) {
            for (int c = 0; c < OC_SCENE_N_COLORS; c++) if (!strcmp(it.answer, oc_scene_color_name(c))) v = c;
        } else if (it.type == OC_SCENE_POSITION) {
            static const char *const pos[4] = { "left", "right", "top", "bottom" };
            for (int c = 0; c < 4; c++) if (!strcmp(it.answer, pos[c])) v = c;
        } else {
            v = atoi(it.answer);
        }
        REQUIREF(v >= 0 && v < 16, "answer '%s'", it.answer);
        seen[it.type][v]++;
    }
    for (int c = 0; c < OC_SCENE_N_COLORS; c++) CHECKF(seen[OC_SCENE_COLOR][c] >= 20, "colour %d: %d", c, seen[OC_SCENE_COLOR][c]);
    for (int c = 0; c < 4; c++) CHECKF(seen[OC_SCENE_POSITION][c] >= 40, "position %d: %d", c, seen[OC_SCENE_POSITION][c]);
    for (int c = 0; c <= 4; c++) CHECKF(seen[OC_SCENE_COUNT][c] >= 20, "count %d: %d", c, seen[OC_SCENE_COUNT][c]);
    for (int c = 1; c <= 8; c++) {
        CHECKF(seen[OC_SCENE_WHICH_IMAGE][c] >= 5, "which_image %d: %d", c, seen[OC_SCENE_WHICH_IMAGE][c]);
        CHECKF(seen[OC_SCENE_COMPARE][c] >= 5, "compare %d: %d", c, seen[OC_SCENE_COMPARE][c]);
    }
}

static int dist2(const uint8_t *p, const uint8_t *q) {
    int dr = p[0] - q[0], dg = p[1] - q[1], db = p[2] - q[2];
    return dr * dr + dg * dg + db * db;
}

static void test_rendering(void) {
    uint8_t *rgb = malloc((size_t)OC_SCENE_MAX_IMAGES * IMAGE_BYTES);
    REQUIRE(rgb);
    uint8_t pal[OC_SCENE_N_COLORS][3];
    for (int c = 0; c < OC_SCENE_N_COLORS; c++) REQUIRE(oc_scene_color_rgb(c, pal[c]) == 0);
    for (int c = 0; c < OC_SCENE_N_COLORS; c++)
        for (int e = 0; e < c; e++) CHECKF(dist2(pal[c], pal[e]) >= 100 * 100, "colours %d and %d are close", c, e);
    int min_bg_dist2 = 1 << 30, backgrounds[4] = { 0 };
    for (int i = 0; i < 120; i++) {
        oc_scene_desc d;
        oc_scene_item it, it2;
        REQUIRE(oc_scene_describe(31, (uint64_t)i, 1, 8, SIDE, &d, &it) == 0);
        REQUIRE(oc_scene_make(31, (uint64_t)i, 1, 8, SIDE, &it2, rgb) == 0);
        REQUIRE(!memcmp(&it, &it2, sizeof it));
        for (int32_t k = 0; k < d.n_images; k++) {
            const oc_scene_image *im = &d.images[k];
            const uint8_t *px = rgb + (size_t)k * IMAGE_BYTES;
            backgrounds[im->background]++;
            for (int32_t j = 0; j < im->n_shapes; j++) {
                const oc_scene_shape *s = &im->shapes[j];
                const uint8_t *c = px + ((size_t)(s->y_px + s->size_px / 2) * SIDE + (size_t)(s->x_px + s->size_px / 2)) * 3;
                CHECKF(!memcmp(c, pal[s->color], 3), "item %d image %d shape %d: centre pixel is not its colour", i, k, j);
                /* the shape's pixels in its box: per row, and in all */
                int32_t z = s->size_px, n_row[24] = { 0 }, n_in = 0;
                for (int32_t v = 0; v < z; v++)
                    for (int32_t u = 0; u < z; u++)
                        n_row[v] += !memcmp(px + ((size_t)(s->y_px + v) * SIDE + (size_t)(s->x_px + u)) * 3, pal[s->color], 3);
                for (int32_t v = 0; v < z; v++) n_in += n_row[v];
                /* a circle fills pi/4 of its box, a triangle or a diamond half of it; the
                 * triangle's widest row is its last, the others' the middle one */
                static const int lo_pct[4] = { 70, 100, 40, 40 }, hi_pct[4] = { 88, 100, 62, 62 };
                int pct = 100 * n_in / (z * z);
                CHECKF(pct >= lo_pct[s->kind] && pct <= hi_pct[s->kind], "%s of %d px covers %d%% of its box",
                       oc_scene_kind_name(s->kind), z, pct);
                int top = n_row[0], mid = n_row[z / 2], bottom = n_row[z - 1];
                int shape_ok = s->kind == 0 ? mid == z && top < z / 2 && bottom < z / 2
                             : s->kind == 1 ? top == z && bottom == z
                             : s->kind == 2 ? bottom == z && top <= 1 && mid < z
                                            : mid >= z - 1 && top <= 2 && bottom <= 2;
                CHECKF(shape_ok, "%s of %d px: rows top %d, middle %d, bottom %d", oc_scene_kind_name(s->kind), z, top, mid, bottom);
            }
            for (int32_t y = 0; y < SIDE; y++)
                for (int32_t x = 0; x < SIDE; x++) {
                    int in_box = 0;
                    for (int32_t j = 0; j < im->n_shapes; j++) {
                        const oc_scene_shape *s = &im->shapes[j];
                        in_box |= x >= s->x_px && x < s->x_px + s->size_px && y >= s->y_px && y < s->y_px + s->size_px;
                    }
                    const uint8_t *p = px + ((size_t)y * SIDE + (size_t)x) * 3;
                    int near = 1 << 30;
                    for (int c = 0; c < OC_SCENE_N_COLORS; c++) near = OC_MIN(near, dist2(p, pal[c]));
                    /* inside a box: a palette colour or background; outside: background only */
                    if (!in_box || near != 0) min_bg_dist2 = OC_MIN(min_bg_dist2, near);
                }
        }
    }
    printf("  closest background pixel to a shape colour: RGB distance %.1f\n", sqrt((double)min_bg_dist2));
    CHECKF(min_bg_dist2 >= 100 * 100, "a background pixel is %.1f from a shape colour", sqrt((double)min_bg_dist2));
    for (int b = 0; b < 4; b++) CHECKF(backgrounds[b] >= 50, "background %d used %d times", b, backgrounds[b]);
    free(rgb);
}

static void test_normalize(void) {
    static const char *const cases[][2] = {
        { "red", "red" }, { " Red.\n", "red" }, { "3", "3" }, { "\t LEFT . ", "left" }, { "", "" },
        { "...", "" }, { "image 2", "image 2" }, { "2.5", "2.5" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char out[32];
        oc_scene_normalize(cases[k][0], out, sizeof out);
        CHECKF(!strcmp(out, cases[k][1]), "'%s' -> '%s'", cases[k][0], out);
    }
    char small[4];
    oc_scene_normalize("  ABCDEF", small, sizeof small);
    CHECK(!strcmp(small, "abc"));
    CHECK(oc_scene_answer_ok("red", " Red."));
    CHECK(oc_scene_answer_ok("6X7", "6X7") && oc_scene_answer_ok("6X7", "6x7"));   /* long suite codes */
    CHECK(!oc_scene_answer_ok("red", "reddish"));
    CHECK(!oc_scene_answer_ok("2", "2 "
                                   "and a long tail of text that does not fit into the normalization buffer at all"));
    CHECK(!oc_scene_answer_ok("2", NULL));
}

typedef struct seen_items { int n; int bad; } seen_items;

static void on_item(void *user, const oc_scene_eval_report *r) {
    seen_items *s = user;
    if (r->i != s->n || r->correct != oc_scene_answer_ok(r->item->answer, r->got) || r->stats->n_images != r->item->n_images)
        s->bad++;
    s->n++;
}

static void run_eval(const char *plan_path, oc_scene_eval_result *res) {
    oc_error e;
    oc_model *m = NULL;
    oc_context *c = NULL;
    memset(res, 0, sizeof *res);
    REQUIRE(oc_model_open(&m, DIR "qwen2vl/text.gguf", DIR "qwen2vl/mmproj.gguf", NULL, &e) == OC_OK);
    oc_scene_eval_params ep;
    oc_scene_eval_params_default(&ep);
    ep.n_items = 3;
    ep.min_images = 2;
    ep.max_images = 3;
    seen_items seen = { 0, 0 };
    ep.on_item = on_item;
    ep.user = &seen;
    oc_context_params cp;
    oc_context_params_default(&cp);
    oc_scene_eval_context_params(&cp, ep.max_images, ep.side_px);
    cp.n_threads = 2;
    cp.plan_path = plan_path;
    oc_status st = oc_context_open(&c, m, &cp, &e);
    if (st == OC_OK) st = oc_scene_eval(c, &ep, res, &e);
    CHECKF(st == OC_OK, "%s", e.message);
    CHECK(seen.n == 3 && seen.bad == 0);
    CHECK(res->n_items == 3 && res->n_correct <= 3 && res->prompt_tokens_sum > 3 * 2 * 16 && res->ttft_ms_sum > 0);
    int64_t n = 0;
    for (int t = 0; t < OC_SCENE_N_TYPES; t++) n += res->n_items_of[t];
    CHECK(n == 3);
    /* bad parameters are refused with a message */
    oc_scene_eval_result scratch;
    ep.max_images = 9;
    CHECK(oc_scene_eval(c, &ep, &scratch, &e) == OC_ERR_INVALID && strstr(e.message, "images per item"));
    ep.max_images = 3;
    ep.side_px = 100;
    CHECK(oc_scene_eval(c, &ep, &scratch, &e) == OC_ERR_INVALID && strstr(e.message, "side"));
    oc_context_close(c);
    oc_model_close(m);
}

static void test_eval_fixture(void) {
    oc_scene_eval_result dense, sparse;
    run_eval(NULL, &dense);
    CHECK(dense.attn_flops_kept > 0 && dense.attn_flops_skipped == 0);
    /* a plan that keeps only intra-image attention in one decoder layer skips some FLOPs */
    oc_error e;
    oc_model *m;
    REQUIRE(oc_model_open(&m, DIR "qwen2vl/text.gguf", NULL, NULL, &e) == OC_OK);
    oc_model_info info;
    oc_model_get_info(m, &info);
    oc_model_close(m);
    oc_plan_shape dec = { info.n_layers, info.n_head, info.n_head_kv, info.head_dim };
    oc_plan *plan;
    REQUIRE(oc_plan_create(&plan, &dec, NULL, NULL, &e) == OC_OK);
    for (int32_t h = 0; h < dec.n_heads; h++) oc_plan_head(plan, OC_PLAN_DECODER, 0, h)->kind = OC_PATTERN_INTRA_IMAGE;
    const char *path = "build/tests/test_scene_sparse.plan";
    oc_status st = oc_plan_write_file(plan, path, &e);
    oc_plan_free(plan);
    REQUIREF(st == OC_OK, "%s", e.message);
    run_eval(path, &sparse);
    CHECKF(sparse.attn_flops_skipped > 0, "the plan skipped nothing");
    remove(path);
}

int main(void) {
    CHECK_RUN(test_item_layout);
    CHECK_RUN(test_pinned_stream);
    CHECK_RUN(test_determinism);
    CHECK_RUN(test_bad_arguments);
    CHECK_RUN(test_answers);
    CHECK_RUN(test_answer_spread);
    CHECK_RUN(test_rendering);
    CHECK_RUN(test_normalize);
    CHECK_RUN(test_eval_fixture);
    return check_finish();
}
