/* test_demo_check.c: the demo's "outside what it was trained on" warning (examples/tools/
 * demo_check.c). Every question the scene generator writes, the demo's whole training language,
 * is inside; questions off its grammar, naming a missing image, or without a picture, are outside;
 * so is a picture other than the 112 x 112 px scenes it saw. */
#include "check.h"
#include "tools/scene.h"
#include "tools/tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_generated_questions_inside(void) {
    static uint8_t rgb[OC_SCENE_MAX_IMAGES * 112 * 112 * 3];
    char why[512];
    int types[OC_SCENE_N_TYPES] = { 0 };
    for (uint64_t i = 0; i < 2000; i++) {
        oc_scene_item it;
        REQUIRE(oc_scene_make(1000001, i, 1, OC_SCENE_MAX_IMAGES, 112, &it, rgb) == 0);
        CHECKF(oc_tool_demo_question_check(it.question, it.n_images, why, sizeof why),
               "item %llu: '%s' with %d images: %s", (unsigned long long)i, it.question, (int)it.n_images, why);
        if (it.type >= 0 && it.type < OC_SCENE_N_TYPES) types[it.type]++;
    }
    for (int t = 0; t < OC_SCENE_N_TYPES; t++) CHECKF(types[t] > 0, "no question of type %s", oc_scene_type_name(t));
}

static void test_outside_questions(void) {
    char why[512];
    CHECK(oc_tool_demo_question_check("What color is the circle in image 1?", 1, why, sizeof why));
    CHECK(oc_tool_demo_question_check("what color is the  circle in image 1? ", 1, why, sizeof why));
    CHECK(oc_tool_demo_question_check("Which image has an orange diamond?", 3, why, sizeof why));
    CHECK(oc_tool_demo_question_check("Which image has more red shapes, image 2 or image 3?", 3, why, sizeof why));
    /* no "image N": the demo never saw it */
    CHECK(!oc_tool_demo_question_check("What color is the circle?", 1, why, sizeof why));
    CHECK(strstr(why, "training questions") != NULL);
    CHECK(!oc_tool_demo_question_check("What is on the table?", 1, why, sizeof why));
    CHECK(!oc_tool_demo_question_check("What color is the hexagon in image 1?", 1, why, sizeof why));
    CHECK(!oc_tool_demo_question_check("What color is the circle in image 1? And why?", 1, why, sizeof why));
    CHECK(!oc_tool_demo_question_check("Which image has more red shapes, image 1 or image 4?", 3, why, sizeof why));
    CHECK(strstr(why, "image 4") != NULL);
    CHECK(!oc_tool_demo_question_check("How many shapes are in image 0?", 1, why, sizeof why));
    CHECK(!oc_tool_demo_question_check("What color is the circle in image 1?", 0, why, sizeof why));
    CHECK(strstr(why, "-i") != NULL);
    CHECK(!oc_tool_demo_question_check("What color is the circle in image 1?", 9, why, sizeof why));
    CHECK(!oc_tool_demo_question_check("", 1, why, sizeof why));
    CHECK(!oc_tool_demo_question_check(NULL, 1, why, sizeof why));
}

static void write_ppm(const char *path, int w, int h) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fprintf(f, "P6\n%d %d\n255\n", w, h);
    for (long i = 0; i < (long)w * h; i++) fputc(40, f), fputc(60, f), fputc(200, f);
    fclose(f);
}

static void test_pictures(void) {
    char why[512], path[64];
    CHECK(oc_tool_demo_image_check("examples/demo/shapes.ppm", why, sizeof why));
    snprintf(path, sizeof path, "/tmp/oc_demo_check_%ld.ppm", (long)rand());
    write_ppm(path, 640, 480);   /* a user's photo: larger than any training scene */
    CHECK(!oc_tool_demo_image_check(path, why, sizeof why));
    CHECK(strstr(why, "112 x 112") != NULL);
    write_ppm(path, 100, 60);    /* smaller, and not square */
    CHECK(!oc_tool_demo_image_check(path, why, sizeof why));
    CHECK(strstr(why, "100 x 60") != NULL);
    remove(path);
    /* a file that does not load is oc_ask's to report, not a warning */
    CHECK(oc_tool_demo_image_check("/nonexistent/picture.ppm", why, sizeof why));
}

int main(void) {
    CHECK_RUN(test_generated_questions_inside);
    CHECK_RUN(test_outside_questions);
    CHECK_RUN(test_pictures);
    return check_finish();
}
