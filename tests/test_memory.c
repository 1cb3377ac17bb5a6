/* test_memory.c: the embedded promise of include/ocellus.h, checked through the allocator (issue 21
 * finding 3): oc_context_memory_bytes is what oc_context_open takes, to the byte, and oc_ask then
 * makes no allocator call at all, on every backend this build has, for images of any size the
 * limits allow (tiny, 500 x 500, a file far beyond the pixel budget decoded at reduced scale,
 * extreme aspect ratios), with and without a plan. Under it, the image work is bounded:
 * oc_qwen2vl_preprocess_bytes is what preprocessing allocates, and oc_qwen2vl_preprocess_bound
 * holds for the shapes that stress each term of it. */
#include "check.h"
#include "image/image.h"
#include "ocellus.h"
#include "support/opencl.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEMO "examples/demo/ocellus-demo.gguf"
#define DEMO_MMPROJ "examples/demo/ocellus-demo-mmproj.gguf"

/* Shapes at the edges of the bound: tiny (scaled up), square, aspect 200 both ways at the
 * largest side (the terms of the bound grow with the side, not the area), odd sizes, one
 * exactly on the grid (no resize). Near aspect 200 smart_resize
 * raises the short side to 28 and the result can pass max_pixels: oc_ask refuses those (more
 * tokens than max_image_tokens) before allocating, so the bound need not hold for them. */
static const int32_t shapes[][2] = { { 1, 1 },      { 3, 2 },      { 28, 28 },   { 500, 500 },  { 16384, 82 },
                                     { 82, 16384 },  { 999, 17 },   { 1023, 4097 }, { 56, 16384 }, { 16384, 300 },
                                     { 300, 16384 }, { 16384, 1 } };

/* preprocess_bytes is what preprocessing takes, call for call and byte for byte; the bound holds. */
static void test_preprocess_bytes_exact_and_bounded(void) {
    oc_qwen2vl_prep_params p;
    oc_qwen2vl_prep_defaults(&p);
    p.max_pixels = 64 * 28 * 28;   /* 64 tokens: large inputs scale far down */
    size_t bound, bound_blocks;
    REQUIRE(oc_qwen2vl_preprocess_bound(16384, &p, &bound, &bound_blocks));
    for (size_t i = 0; i < OC_ARRAY_LEN(shapes); i++) {
        int32_t w = shapes[i][0], h = shapes[i][1], rw, rh;
        size_t payload, blocks;
        oc_error e;
        oc_status st = oc_qwen2vl_preprocess_bytes(w, h, &p, &rw, &rh, &payload, &blocks, &e);
        if (w / h > 200 || h / w > 200) {   /* HF refuses these; so do we, before allocating */
            CHECKF(st == OC_ERR_RANGE, "%dx%d: %s", w, h, e.message);
            continue;
        }
        REQUIREF(st == OC_OK, "%dx%d: %s", w, h, e.message);
        CHECKF((int64_t)rw * rh > p.max_pixels || (payload <= bound && blocks <= bound_blocks),
               "%dx%d -> %dx%d needs %zu bytes in %zu blocks, bound %zu in %zu", w, h, rw, rh, payload, blocks, bound,
               bound_blocks);
        uint8_t *px = calloc((size_t)w * (size_t)h, 3);
        REQUIRE(px);
        oc_image img;
        REQUIRE(oc_image_wrap_rgb8(&img, px, w, h, (size_t)w * 3, NULL, &e) == OC_OK);
        check_alloc cnt = { 0 };
        oc_allocator a = { check_alloc_fn, &cnt };
        oc_qwen2vl_pixels out;
        CHECKF(oc_qwen2vl_preprocess(&out, &img, &p, &a, &e) == OC_OK, "%dx%d: %s", w, h, e.message);
        /* every block but the patches was freed; each block carries oc_mem_alloc's 64-byte header */
        CHECKF(cnt.n_allocs == (long)blocks, "%dx%d: %ld allocations, %zu predicted", w, h, cnt.n_allocs, blocks);
        CHECKF(out.resized_width_px == rw && out.resized_height_px == rh, "%dx%d", w, h);
        oc_qwen2vl_pixels_free(&out);
        CHECK(cnt.n_live == 0);
        free(px);
    }
}

/* The bound over random shapes (sides log-uniform in 1..16384) for the default geometry at 1280,
 * 64 and 1 tokens: an exhaustive sweep of every shape up to 16384 x 16384 (TESTING.md) found the
 * true worst case 1.12 to 1.37 times below the bound; this keeps a cheap sample in make check. */
static void test_preprocess_bound_random_shapes(void) {
    static const int32_t tokens[] = { 1280, 64, 1 };
    check_rng rng = { 0x9e3779b97f4a7c15ULL };
    for (size_t t = 0; t < OC_ARRAY_LEN(tokens); t++) {
        oc_qwen2vl_prep_params p;
        oc_qwen2vl_prep_defaults(&p);
        p.max_pixels = (int64_t)tokens[t] * 28 * 28;
        p.min_pixels = OC_MIN(p.min_pixels, p.max_pixels);
        size_t bound, bound_blocks, worst = 0;
        REQUIRE(oc_qwen2vl_preprocess_bound(16384, &p, &bound, &bound_blocks));
        for (int i = 0; i < 200000; i++) {
            int32_t w = (int32_t)exp(check_rng_unit(&rng) * log(16384.0)) + (int32_t)(check_rng_u64(&rng) % 2);
            int32_t h = (int32_t)exp(check_rng_unit(&rng) * log(16384.0)) + (int32_t)(check_rng_u64(&rng) % 2);
            int32_t rw, rh;
            size_t payload, blocks;
            if (w > 16384 || h > 16384 ||
                oc_qwen2vl_preprocess_bytes(w, h, &p, &rw, &rh, &payload, &blocks, NULL) != OC_OK ||
                (int64_t)rw * rh > p.max_pixels)
                continue;
            worst = OC_MAX(worst, payload);
            CHECKF(payload <= bound && blocks <= bound_blocks, "%d tokens: %dx%d -> %dx%d needs %zu bytes, bound %zu",
                   tokens[t], w, h, rw, rh, payload, bound);
        }
        CHECKF(worst > bound / 2, "%d tokens: the worst sampled shape needs %zu bytes, bound %zu: the sample is too "
               "thin or the bound too loose", tokens[t], worst, bound);
    }
}

typedef struct request_case {
    const char *what;
    int32_t width_px, height_px;   /* pixels given; 0: the file */
    oc_status expect;              /* OC_ERR_RANGE: more tokens than the limit after smart_resize */
} request_case;

/* Opens a context on backend (plan_path or NULL) and checks the prediction, then asks about every
 * image size and checks that no call reaches the allocator. */
static void ask_allocates_nothing(oc_backend_choice backend, const char *plan_path) {
    if (backend == OC_BACKEND_OPENCL && check_opencl_missing()) {
        check_skip("%s", check_opencl_missing());
        return;
    }
    const char *bomb = "build/tests/memory_bomb.png";
    int have_bomb = check_write_png_bomb(bomb, 2048, 1536);   /* 9 MiB of pixels in a few KB */
    oc_error e;
    oc_model *m;
    REQUIREF(oc_model_open(&m, DEMO, DEMO_MMPROJ, NULL, &e) == OC_OK, "%s", e.message);
    check_alloc cnt = { 0 };
    oc_allocator a = { check_alloc_fn, &cnt };
    oc_context_params cp;
    oc_context_params_default(&cp);
    cp.max_context_tokens = 512;
    cp.max_images = 2;
    cp.max_image_tokens = 64;
    cp.max_image_pixels = 128 * 128;   /* the file is decoded at 1/16 (a 4 x 4 average) */
    cp.n_threads = 1;
    cp.alloc = &a;
    cp.backend = backend;
    cp.device = check_opencl_device();
    cp.plan_path = plan_path;
    size_t predicted = 0;
    REQUIREF(oc_context_memory_bytes(m, &cp, &predicted, &e) == OC_OK, "%s", e.message);
    oc_context *c;
    REQUIREF(oc_context_open(&c, m, &cp, &e) == OC_OK, "%s", e.message);
    oc_stats st;
    oc_context_get_stats(c, &st);
    CHECKF(cnt.bytes_live == predicted && st.context_bytes == predicted,
           "%s, plan %s: oc_context_memory_bytes %zu, open allocated %zu, stats %zu", oc_context_backend_name(c),
           plan_path ? plan_path : "none", predicted, cnt.bytes_live, st.context_bytes);
    static const request_case cases[] = { { "tiny 3x2", 3, 2, OC_OK },
                                          { "500x500", 500, 500, OC_OK },
                                          { "16384x300", 16384, 300, OC_OK },
                                          { "16384x82 (113 tokens)", 16384, 82, OC_ERR_RANGE },
                                          { "a 2048x1536 PNG file", 0, 0, OC_OK } };
    long before = cnt.n_calls;
    for (size_t i = 0; i < OC_ARRAY_LEN(cases); i++) {
        const request_case *k = &cases[i];
        if (!k->width_px && !have_bomb) continue;   /* no libpng */
        /* emulated (check_emulated): the 5-megapixel resize is left to the native configurations */
        if (check_emulated() && k->width_px == 16384 && k->expect == OC_OK) continue;
        uint8_t *px = k->width_px ? malloc((size_t)k->width_px * (size_t)k->height_px * 3) : NULL;
        if (k->width_px) {
            REQUIRE(px);
            for (size_t j = 0; j < (size_t)k->width_px * (size_t)k->height_px * 3; j++) px[j] = (uint8_t)(j * 7 % 251);
        }
        oc_image_rgb views[2] = { { px, k->width_px, k->height_px, (size_t)k->width_px * 3 },
                                  { px, k->width_px, k->height_px, (size_t)k->width_px * 3 } };
        const char *paths[2] = { bomb, bomb };
        oc_request r;
        oc_request_default(&r);
        r.question = "What color is the circle in image 1? And in image 2?";
        r.images = k->width_px ? views : NULL;
        r.image_paths = k->width_px ? NULL : paths;
        r.n_images = 2;
        r.max_new_tokens = 4;
        oc_status got = oc_ask(c, &r, &e);
        CHECKF(got == k->expect, "%s: status %d: %s", k->what, (int)got, e.message);
        oc_context_get_stats(c, &st);
        CHECKF(got != OC_OK || (st.n_image_tokens > 0 && st.n_image_tokens <= 2 * 64), "%s: %d image tokens", k->what,
               st.n_image_tokens);
        CHECKF(cnt.n_calls == before, "%s (%s, plan %s): oc_ask made %ld allocator calls", k->what,
               oc_context_backend_name(c), plan_path ? plan_path : "none", cnt.n_calls - before);
        before = cnt.n_calls;
        free(px);
    }
    oc_context_close(c);
    CHECK(cnt.n_live == 0);
    oc_model_close(m);
    if (have_bomb) remove(bomb);
}

static void test_ask_allocates_nothing_cpu(void) { ask_allocates_nothing(OC_BACKEND_CPU, NULL); }
static void test_ask_allocates_nothing_cpu_plan(void) {
    ask_allocates_nothing(OC_BACKEND_CPU, "examples/plans/demo-blindsight.plan");
}
/* one OpenCL case (about 4 s under PoCL), with the plan: its token layout is the extra path */
static void test_ask_allocates_nothing_opencl_plan(void) {
    ask_allocates_nothing(OC_BACKEND_OPENCL, "examples/plans/demo-blindsight.plan");
}

static void observe_nothing(void *user, const oc_attn_view *view) {
    (void)user;
    (void)view;
}

/* The prediction is exact for the other shapes of a context too: no vision, the calibration
 * observer's copies, MMInference's plan (index scratch), a context with no images. */
static void test_memory_bytes_exact(void) {
    oc_error e;
    oc_model *text_only, *m;
    REQUIREF(oc_model_open(&m, DEMO, DEMO_MMPROJ, NULL, &e) == OC_OK, "%s", e.message);
    REQUIREF(oc_model_open(&text_only, DEMO, NULL, NULL, &e) == OC_OK, "%s", e.message);
    for (int k = 0; k < 4; k++) {
        check_alloc cnt = { 0 };
        oc_allocator a = { check_alloc_fn, &cnt };
        oc_context_params cp;
        oc_context_params_default(&cp);
        cp.max_context_tokens = 256;
        cp.n_threads = 2;
        cp.alloc = &a;
        if (k == 1) cp.on_attention = observe_nothing;
        if (k == 2) cp.plan_path = "examples/plans/demo-mminference.plan";
        if (k == 3) cp.max_images = 0;
        oc_model *mk = k == 0 ? text_only : m;
        size_t predicted = 0;
        REQUIREF(oc_context_memory_bytes(mk, &cp, &predicted, &e) == OC_OK, "%s", e.message);
        oc_context *c;
        REQUIREF(oc_context_open(&c, mk, &cp, &e) == OC_OK, "%s", e.message);
        CHECKF(cnt.bytes_live == predicted, "case %d: predicted %zu, open allocated %zu", k, predicted, cnt.bytes_live);
        oc_context_close(c);
        CHECK(cnt.n_live == 0);
    }
    oc_model_close(text_only);
    oc_model_close(m);
}

/* batch_tokens 0 (the default) is the backend's chunk (oc_context_params): 256 on the CPU and
 * for OC_BACKEND_AUTO, on OpenCL the largest whose per-token buffers fit 512 MiB, at most 4096
 * tokens and the context (the demo model's are a few KiB: the context); a negative one is
 * refused. The context's host memory grows with the chunk, so its prediction tells the chunk. */
static size_t bytes_with_chunk(const oc_model *m, oc_backend_choice backend, int32_t batch_tokens) {
    oc_context_params cp;
    oc_context_params_default(&cp);
    cp.max_context_tokens = 1024;
    cp.n_threads = 1;
    cp.backend = backend;
    cp.device = check_opencl_device();
    cp.batch_tokens = batch_tokens;
    size_t bytes = 0;
    oc_error e;
    CHECKF(oc_context_memory_bytes(m, &cp, &bytes, &e) == OC_OK, "%s", e.message);
    return bytes;
}

static void test_prefill_chunk_per_backend(void) {
    oc_error e;
    oc_model *m;
    REQUIREF(oc_model_open(&m, DEMO, DEMO_MMPROJ, NULL, &e) == OC_OK, "%s", e.message);
    oc_model_info info;
    oc_model_get_info(m, &info);
    int32_t n_ctx = OC_MIN(1024, info.n_ctx_train >= 16 ? info.n_ctx_train : 1024);
    CHECK(bytes_with_chunk(m, OC_BACKEND_CPU, 0) == bytes_with_chunk(m, OC_BACKEND_CPU, 256));
    CHECK(bytes_with_chunk(m, OC_BACKEND_CPU, 0) != bytes_with_chunk(m, OC_BACKEND_CPU, n_ctx));
    oc_context_params cp;
    oc_context_params_default(&cp);
    CHECK(cp.batch_tokens == 0);
    cp.batch_tokens = -1;
    size_t bytes;
    CHECK(oc_context_memory_bytes(m, &cp, &bytes, &e) == OC_ERR_INVALID && strstr(e.message, "batch_tokens"));
    if (check_opencl_missing()) {
        check_skip("%s", check_opencl_missing());
    } else {
        CHECK(bytes_with_chunk(m, OC_BACKEND_AUTO, 0) == bytes_with_chunk(m, OC_BACKEND_AUTO, 256));
        size_t chosen = bytes_with_chunk(m, OC_BACKEND_OPENCL, 0);
        CHECKF(chosen == bytes_with_chunk(m, OC_BACKEND_OPENCL, n_ctx) &&
               chosen != bytes_with_chunk(m, OC_BACKEND_OPENCL, 256),
               "OpenCL's chunk is not the whole %d-token context", (int)n_ctx);
    }
    oc_model_close(m);
}

int main(void) {
    CHECK_RUN(test_preprocess_bytes_exact_and_bounded);
    CHECK_RUN(test_preprocess_bound_random_shapes);
    CHECK_RUN(test_memory_bytes_exact);
    CHECK_RUN(test_prefill_chunk_per_backend);
    CHECK_RUN(test_ask_allocates_nothing_cpu);
    CHECK_RUN(test_ask_allocates_nothing_cpu_plan);
    CHECK_RUN(test_ask_allocates_nothing_opencl_plan);
    return check_finish();
}
