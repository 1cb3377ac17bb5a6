/* test_scene_long.c: the long suite's generator (examples/tools/scene_long.h): the item layout
 * that examples/long/train.py mirrors through ctypes, determinism, argument checks, that every
 * answer is true of the scene drawn (re-derived here from the description) and that the answer
 * cells point at what answers, and that shapes and code glyphs reach the pixels. */
#include "check.h"
#include "tools/scene.h"
#include "tools/scene_long.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEED 1000001
#define N_ITEMS 300

static void test_layout(void) {
    CHECK(offsetof(oc_long_item, answer_cells) == 32);
    CHECK(offsetof(oc_long_item, question) == 32 + 16 * 12);
    CHECK(offsetof(oc_long_item, answer) == 32 + 16 * 12 + 160);
    CHECK(sizeof(oc_long_item) == 32 + 16 * 12 + 160 + 256);
    CHECK(!strcmp(oc_long_type_name(OC_LONG_CODE), "code") && !strcmp(oc_long_type_name(6), "?"));
    CHECK(oc_long_type_from_name("list") == OC_LONG_LIST && oc_long_type_from_name("x") == -1);
    CHECK(oc_long_glyph_char(0) == '0' && oc_long_glyph_char(10) == 'A' && oc_long_glyph_char(22) == '?');
}

static void test_determinism(void) {
    oc_long_desc a, b;
    oc_long_item ia, ib;
    for (uint64_t i = 0; i < 20; i++) {
        CHECK(oc_long_describe(SEED, i, 8, 32, 224, 448, 0, &a, &ia) == 0);
        CHECK(oc_long_describe(SEED, i, 8, 32, 224, 448, 0, &b, &ib) == 0);
        CHECK(memcmp(&ia, &ib, sizeof ia) == 0);
    }
    CHECK(oc_long_describe(SEED + 1, 0, 8, 32, 224, 448, 0, &b, &ib) == 0);
    CHECK(memcmp(&ia, &ib, sizeof ia) != 0);
}

static void test_bad_arguments(void) {
    oc_long_desc d;
    oc_long_item it;
    CHECK(oc_long_describe(1, 0, 8, 33, 224, 448, 0, &d, &it) == -1);
    CHECK(oc_long_describe(1, 0, 1, 8, 224, 448, 0, &d, &it) == -1);
    CHECK(oc_long_describe(1, 0, 9, 8, 224, 448, 0, &d, &it) == -1);
    CHECK(oc_long_describe(1, 0, 8, 8, 196, 448, 0, &d, &it) == -1);
    CHECK(oc_long_describe(1, 0, 8, 8, 224, 450, 0, &d, &it) == -1);
    CHECK(oc_long_describe(1, 0, 8, 8, 224, 476, 0, &d, &it) == -1);
    CHECK(oc_long_describe(1, 0, 8, 8, 224, 448, 1u << 6, &d, &it) == -1);
    CHECK(oc_long_describe(1, 0, 8, 8, 224, 448, 0, NULL, &it) == -1);
    CHECK(oc_long_make(1, 0, 8, 8, 224, 224, 0, &it, NULL) == -1);
}

static int count_matches(const oc_long_image *im, int32_t color, int32_t kind) {
    int n = 0;
    for (int32_t j = 0; j < im->n_shapes; j++)
        n += im->shapes[j].color == color && (kind < 0 || im->shapes[j].kind == kind);
    return n;
}

static const oc_long_shape *shape_at(const oc_long_image *im, int32_t row, int32_t col) {
    for (int32_t j = 0; j < im->n_shapes; j++)
        if (im->shapes[j].row == row && im->shapes[j].col == col) return &im->shapes[j];
    return NULL;
}

/* Every answer re-derived from the final scene; every answer cell holds what answers. */
static void test_answers(void) {
    int n_of[OC_LONG_N_TYPES] = { 0 };
    for (uint64_t i = 0; i < N_ITEMS; i++) {
        oc_long_desc d;
        oc_long_item it;
        CHECK(oc_long_describe(SEED, i, 8, 32, 224, 448, 0, &d, &it) == 0);
        CHECK(it.n_images >= 8 && it.n_images <= 32 && it.side_px % 28 == 0 && it.side_px >= 224 && it.side_px <= 448);
        CHECK(it.type >= 0 && it.type < OC_LONG_N_TYPES);
        n_of[it.type]++;
        for (int32_t c = 0; c < it.n_answer_cells; c++) {
            const oc_long_cell *cell = &it.answer_cells[c];
            CHECK(cell->image >= 0 && cell->image < it.n_images && cell->row >= 0 && cell->row < d.grid &&
                  cell->col >= 0 && cell->col < d.grid);
        }
        char want[OC_LONG_ANSWER_BYTES];
        if (it.type == OC_LONG_DETAIL) {
            const oc_long_image *im = &d.images[d.image_a];
            int n_kind = 0;
            const oc_long_shape *hit = NULL;
            for (int32_t j = 0; j < im->n_shapes; j++)
                if (im->shapes[j].kind == d.kind) { n_kind++; hit = &im->shapes[j]; }
            CHECK(n_kind == 1 && hit && !strcmp(it.answer, oc_scene_color_name(hit->color)));
            CHECK(it.n_answer_cells == 1 && shape_at(im, it.answer_cells[0].row, it.answer_cells[0].col) == hit);
        } else if (it.type == OC_LONG_WHICH_IMAGE) {
            int total = 0, where = -1;
            for (int32_t k = 0; k < d.n_images; k++) {
                int n = count_matches(&d.images[k], d.color, d.kind);
                total += n;
                if (n) where = k;
            }
            snprintf(want, sizeof want, "%d", where + 1);
            CHECK(total == 1 && !strcmp(it.answer, want));
        } else if (it.type == OC_LONG_COUNT_ALL) {
            int total = 0;
            for (int32_t k = 0; k < d.n_images; k++) total += count_matches(&d.images[k], d.color, d.kind);
            snprintf(want, sizeof want, "%d", total);
            CHECK(!strcmp(it.answer, want) && total <= 6 && it.n_answer_cells == total);
        } else if (it.type == OC_LONG_CODE) {
            const oc_long_image *im = &d.images[d.image_a];
            CHECK(im->has_code && it.n_answer_cells == OC_LONG_CODE_CHARS && (int)strlen(it.answer) == OC_LONG_CODE_CHARS);
            for (int32_t j = 0; j < OC_LONG_CODE_CHARS && im->has_code; j++) {
                CHECK(it.answer[j] == oc_long_glyph_char(im->code[j]));
                CHECK(it.answer_cells[j].row == im->code_row && it.answer_cells[j].col == im->code_col + j);
                CHECK(shape_at(im, im->code_row, im->code_col + j) == NULL);
            }
        } else if (it.type == OC_LONG_COMPARE) {
            int na = count_matches(&d.images[d.image_a], d.color, -1), nb = count_matches(&d.images[d.image_b], d.color, -1);
            snprintf(want, sizeof want, "%d", (na > nb ? d.image_a : d.image_b) + 1);
            CHECK(na != nb && d.image_a != d.image_b && !strcmp(it.answer, want));
        } else {
            /* 7-12 shapes, "colour kind" each, in reading order of their cells (answer_cells) */
            const oc_long_image *im = &d.images[d.image_a];
            CHECK(im->n_shapes >= 7 && im->n_shapes <= 12 && it.n_answer_cells == im->n_shapes);
            char built[OC_LONG_ANSWER_BYTES] = "";
            size_t used = 0;
            for (int32_t j = 0; j < it.n_answer_cells && used < sizeof built; j++) {
                const oc_long_cell *c = &it.answer_cells[j];
                const oc_long_shape *sh = shape_at(im, c->row, c->col);
                CHECK(sh != NULL && c->image == d.image_a);
                if (j) CHECK(c->row > it.answer_cells[j - 1].row ||
                             (c->row == it.answer_cells[j - 1].row && c->col > it.answer_cells[j - 1].col));
                if (!sh) break;
                used += (size_t)snprintf(built + used, sizeof built - used, "%s%s %s", j ? ", " : "",
                                         oc_scene_color_name(sh->color), oc_scene_kind_name(sh->kind));
            }
            CHECK(!strcmp(built, it.answer));
        }
    }
    for (int t = 0; t < OC_LONG_N_TYPES; t++) CHECK(n_of[t] > N_ITEMS / 12);   /* ~50 each */
    /* a type mask gives that type only */
    for (uint64_t i = 0; i < 20; i++) {
        oc_long_desc d;
        oc_long_item it;
        CHECK(oc_long_describe(SEED, i, 8, 8, 224, 224, 1u << OC_LONG_CODE, &d, &it) == 0 && it.type == OC_LONG_CODE);
    }
}

/* The pixels: a shape's colour at its box centre; a code cell has glyph-white pixels; a list
 * image of an item made by oc_long_make equals oc_long_render of its description. */
static void test_rendering(void) {
    int32_t side = 448;
    size_t image_bytes = (size_t)side * side * 3;
    uint8_t *rgb = malloc(image_bytes * OC_LONG_MAX_IMAGES), *one = malloc(image_bytes);
    CHECK(rgb && one);
    if (!rgb || !one) { free(rgb); free(one); return; }
    for (uint64_t i = 0; i < 12; i++) {
        oc_long_desc d;
        oc_long_item it, it2;
        uint32_t mask = 1u << (i % OC_LONG_N_TYPES);
        memset(rgb, 0xAB, image_bytes * OC_LONG_MAX_IMAGES);   /* poisoned first */
        CHECK(oc_long_make(7, i, 8, 12, 224, 448, mask, &it, rgb) == 0);
        CHECK(oc_long_describe(7, i, 8, 12, 224, 448, mask, &d, &it2) == 0 && !memcmp(&it, &it2, sizeof it));
        size_t ib = (size_t)d.side_px * d.side_px * 3;
        for (int32_t k = 0; k < d.n_images; k++) {
            CHECK(oc_long_render(&d, k, one) == 0 && !memcmp(one, rgb + (size_t)k * ib, ib));
            const oc_long_image *im = &d.images[k];
            for (int32_t j = 0; j < im->n_shapes; j++) {
                const oc_long_shape *sh = &im->shapes[j];
                uint8_t want[3];
                oc_scene_color_rgb(sh->color, want);
                const uint8_t *px = one + ((size_t)(sh->y_px + sh->size_px / 2) * d.side_px + (size_t)(sh->x_px + sh->size_px / 2)) * 3;
                CHECK(!memcmp(px, want, 3));
            }
            if (im->has_code)
                for (int32_t j = 0; j < OC_LONG_CODE_CHARS; j++) {
                    int white = 0;
                    for (int32_t y = 0; y < 28; y++)
                        for (int32_t x = 0; x < 28; x++) {
                            const uint8_t *px = one + ((size_t)(im->code_row * 28 + y) * d.side_px + (size_t)((im->code_col + j) * 28 + x)) * 3;
                            white += px[0] == 250 && px[1] == 250 && px[2] == 250;
                        }
                    CHECK(white >= 9 * 9 && white <= 15 * 21 - 9);   /* a glyph: some but not all of its box */
                }
        }
    }
    free(rgb);
    free(one);
}

int main(void) {
    CHECK_RUN(test_layout);
    CHECK_RUN(test_determinism);
    CHECK_RUN(test_bad_arguments);
    CHECK_RUN(test_answers);
    CHECK_RUN(test_rendering);
    return check_finish();
}
