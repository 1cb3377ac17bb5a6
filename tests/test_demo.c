/* test_demo.c: the bundled demo model (examples/demo/, trained by examples/demo/train.py) answers
 * three questions with known answers through the public API, on scenes of examples/tools/scene.c: a colour
 * in one image, a position and a count in the second of two images. The items (stream 77, never
 * used in training) were picked among ones the current model answers right with a first-token
 * logit margin above 4 (the model is right on about 56% of fresh items: BENCHMARKS.md), so
 * kernel rounding on any ISA cannot flip them; the margin is printed to show it. The questions
 * are asked again on the OpenCL backend (skipped, saying why, without a device). Also: the
 * README's image (examples/demo/shapes.ppm) is item 9's image, byte for byte. */
#include "check.h"
#include "support/answer.h"
#include "image/image.h"
#include "ocellus.h"
#include "tools/scene.h"
#include "support/opencl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXT "examples/demo/ocellus-demo.gguf"
#define MMPROJ "examples/demo/ocellus-demo-mmproj.gguf"
#define SIDE 112
#define SEED 77



static double top_margin(const float *logits, int32_t n) {
    float best = -1e30f, second = -1e30f;
    for (int32_t i = 0; i < n; i++) {
        if (logits[i] > best) { second = best; best = logits[i]; }
        else if (logits[i] > second) second = logits[i];
    }
    return (double)best - (double)second;
}

/* Opens the demo model and a context for items of up to two images (plan_path may be NULL). */
static void open_demo(oc_model **m, oc_context **ctx, oc_backend_choice backend, const char *plan_path) {
    oc_error e;
    REQUIREF(oc_model_open(m, TEXT, MMPROJ, NULL, &e) == OC_OK, "%s", e.message);
    oc_context_params cp;
    oc_context_params_default(&cp);
    cp.max_context_tokens = 512;
    cp.max_images = 2;
    cp.n_threads = 2;
    cp.backend = backend;
    cp.device = check_opencl_device();
    cp.plan_path = plan_path;
    REQUIREF(oc_context_open(ctx, *m, &cp, &e) == OC_OK, "%s", e.message);
}

/* Asks item `index` of stream SEED (greedy, 8 tokens at most); the normalized answer goes to got,
 * the item to *it. rgb: room for OC_SCENE_MAX_IMAGES images. */
static void ask_item(oc_context *ctx, uint64_t index, uint8_t *rgb, oc_scene_item *it, char *got, size_t got_bytes) {
    oc_error e;
    REQUIRE(oc_scene_make(SEED, index, 1, 2, SIDE, it, rgb) == 0);
    oc_image_rgb images[2];
    for (int32_t i = 0; i < it->n_images; i++)
        images[i] = (oc_image_rgb){ rgb + (size_t)i * SIDE * SIDE * 3, SIDE, SIDE, SIDE * 3 };
    answer a = { "", 0 };
    oc_request r;
    oc_request_default(&r);
    r.question = it->question;
    r.images = images;
    r.n_images = it->n_images;
    r.max_new_tokens = 8;
    r.on_text = collect;
    r.user = &a;
    CHECKF(oc_ask(ctx, &r, &e) == OC_OK, "%s", e.message);
    oc_scene_normalize(a.text, got, got_bytes);
}

static void three_questions(oc_backend_choice backend) {
    const char *why = backend == OC_BACKEND_OPENCL ? check_opencl_missing() : NULL;
    if (why) {
        check_skip("%s", why);
        return;
    }
    static const struct { uint64_t index; const char *expected; } items[] = {
        { 9, "green" },    /* What color is the circle in image 1? */
        { 5, "right" },    /* Is the blue diamond in image 2 on the left or the right? */
        { 28, "4" },       /* How many shapes are in image 2? */
    };
    oc_model *m = NULL;
    oc_context *ctx = NULL;
    open_demo(&m, &ctx, backend, NULL);
    uint8_t *rgb = malloc((size_t)OC_SCENE_MAX_IMAGES * SIDE * SIDE * 3);
    REQUIRE(rgb);
    for (size_t k = 0; k < sizeof items / sizeof items[0]; k++) {
        oc_scene_item it;
        char got[64];
        ask_item(ctx, items[k].index, rgb, &it, got, sizeof got);
        CHECK(!strcmp(it.answer, items[k].expected));
        int32_t n_vocab = 0;
        const float *logits = oc_context_prompt_logits(ctx, &n_vocab);
        REQUIRE(logits && n_vocab > 1);
        CHECKF(!strcmp(got, items[k].expected), "%s -> '%s', expected '%s'", it.question, got,
               items[k].expected);
        printf("  %-60s -> %-6s (first-token logit margin %.2f, %s)\n", it.question, got, top_margin(logits, n_vocab),
               backend == OC_BACKEND_OPENCL ? "OpenCL" : "CPU");
    }
    free(rgb);
    oc_context_close(ctx);
    oc_model_close(m);
}

static void test_three_questions(void) { three_questions(OC_BACKEND_CPU); }
static void test_three_questions_opencl(void) { three_questions(OC_BACKEND_OPENCL); }

/* The demo model's hand-written plans (examples/plans/demo-blindsight.plan: BlindSight categories;
 * demo-mminference.plan: Vertical-Slash decoder heads and a Grid vision head, whose index is built
 * per prompt) fit the model, skip attention work, and leave the two-image position answer as it was. */
static void test_demo_plan(void) {
    static const char *const plans[] = { "examples/plans/demo-blindsight.plan",
                                         "examples/plans/demo-mminference.plan" };
    for (int k = 0; k < 2; k++) {
        oc_model *m = NULL;
        oc_context *ctx = NULL;
        open_demo(&m, &ctx, OC_BACKEND_CPU, plans[k]);
        uint8_t *rgb = malloc((size_t)OC_SCENE_MAX_IMAGES * SIDE * SIDE * 3);
        REQUIRE(rgb);
        oc_scene_item it;
        char got[64];
        ask_item(ctx, 5, rgb, &it, got, sizeof got);
        oc_stats st;
        oc_context_get_stats(ctx, &st);
        CHECKF(!strcmp(got, "right"), "with %s: '%s'", plans[k], got);
        CHECKF(st.attn_flops_skipped > 0, "%s skipped nothing", plans[k]);
        /* the decoder's prefill and decode shares are parts of the whole; these plans' decoder
         * heads skip prompt rows, and the prompt's key/query pairs outnumber the answer's */
        CHECK(st.attn_prefill_flops_kept + st.attn_decode_flops_kept <= st.attn_flops_kept);
        CHECK(st.attn_prefill_flops_skipped + st.attn_decode_flops_skipped <= st.attn_flops_skipped);
        CHECKF(st.attn_prefill_flops_skipped > 0, "%s skipped nothing in the decoder's prefill", plans[k]);
        CHECK(st.attn_prefill_flops_kept > st.attn_decode_flops_kept && st.attn_decode_flops_kept > 0);
        CHECK(st.kv_prefill_bytes > 0 && st.kv_prefill_bytes <= st.kv_bytes);
        free(rgb);
        oc_context_close(ctx);
        oc_model_close(m);
    }
}

static void test_readme_image_is_item_9(void) {
    oc_image img;
    oc_error e;
    REQUIREF(oc_image_load(&img, "examples/demo/shapes.ppm", NULL, NULL, &e) == OC_OK, "%s", e.message);
    uint8_t *rgb = malloc((size_t)OC_SCENE_MAX_IMAGES * SIDE * SIDE * 3);
    REQUIRE(rgb);
    oc_scene_item it;
    REQUIRE(oc_scene_make(SEED, 9, 1, 2, SIDE, &it, rgb) == 0);
    REQUIRE(img.width_px == SIDE && img.height_px == SIDE && img.stride_bytes == SIDE * 3 && it.n_images == 1);
    CHECK(memcmp(img.rgb, rgb, (size_t)SIDE * SIDE * 3) == 0);
    free(rgb);
    oc_image_free(&img);
}

int main(void) {
    CHECK_RUN(test_three_questions);
    CHECK_RUN(test_three_questions_opencl);
    CHECK_RUN(test_demo_plan);
    CHECK_RUN(test_readme_image_is_item_9);
    return check_finish();
}
