/* test_kv_stats.c: the decoder's decode attention counters with a plan's KV eviction
 * (include/ocellus.h oc_stats: keys the eviction removed count as skipped in decode).
 * On the demo model, one item asked densely and with every layer's cache cut to 8 tokens per kv
 * head: dense skips nothing in decode; the cut plan skips, and its decode kept + skipped equals
 * dense's decode kept when both generate as many tokens (the same causal pairs, counted once). */
#include "check.h"
#include "ocellus.h"
#include "tools/scene.h"

#include <stdio.h>
#include <string.h>

#define SIDE 112

static void ask(oc_model *m, const char *plan_path, oc_stats *out) {
    oc_error e;
    oc_context_params cp;
    oc_context_params_default(&cp);
    cp.max_context_tokens = 512;
    cp.max_images = 2;
    cp.n_threads = 2;
    cp.plan_path = plan_path;
    oc_context *ctx = NULL;
    REQUIREF(oc_context_open(&ctx, m, &cp, &e) == OC_OK, "%s", e.message);
    static uint8_t rgb[OC_SCENE_MAX_IMAGES * SIDE * SIDE * 3];
    oc_scene_item it;
    REQUIRE(oc_scene_make(77, 9, 1, 2, SIDE, &it, rgb) == 0);
    oc_image_rgb images[2];
    for (int32_t i = 0; i < it.n_images; i++)
        images[i] = (oc_image_rgb){ rgb + (size_t)i * SIDE * SIDE * 3, SIDE, SIDE, SIDE * 3 };
    oc_request r;
    oc_request_default(&r);
    r.question = it.question;
    r.images = images;
    r.n_images = it.n_images;
    r.max_new_tokens = 6;
    CHECKF(oc_ask(ctx, &r, &e) == OC_OK, "%s", e.message);
    oc_context_get_stats(ctx, out);
    oc_context_close(ctx);
}

static void test_eviction_counts_as_decode_skipped(void) {
    oc_error e;
    oc_model *m = NULL;
    if (oc_model_open(&m, "examples/demo/ocellus-demo.gguf", "examples/demo/ocellus-demo-mmproj.gguf", NULL, &e)) {
        check_skip("demo model: %s", e.message);
        return;
    }
    const char *path = "build/tests/kv_stats.plan";   /* exists: this program lives there */
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs("ocellus-plan 3\nshape decoder layers 6 heads 4 kv-heads 2 head-dim 64\nkv-window 4\n"
          "decoder default dense\ndecoder layer all kv-budget 8 8\n", f);
    REQUIRE(fclose(f) == 0);
    oc_stats dense, cut;
    memset(&dense, 0, sizeof dense);
    memset(&cut, 0, sizeof cut);
    ask(m, NULL, &dense);
    ask(m, path, &cut);
    remove(path);
    printf("# dense: %d generated, decode kept %llu; cut: %d generated, decode kept %llu skipped %llu\n", (int)dense.n_generated, (unsigned long long)dense.attn_decode_flops_kept, (int)cut.n_generated, (unsigned long long)cut.attn_decode_flops_kept, (unsigned long long)cut.attn_decode_flops_skipped);
    CHECK(dense.n_generated >= 1 && dense.attn_decode_flops_kept > 0);
    CHECKF(dense.attn_decode_flops_skipped == 0, "dense skipped %llu in decode",
           (unsigned long long)dense.attn_decode_flops_skipped);
    CHECK(cut.attn_decode_flops_skipped > 0);
    CHECK(cut.attn_decode_flops_kept < dense.attn_decode_flops_kept);
    if (cut.n_generated == dense.n_generated)
        CHECKF(cut.attn_decode_flops_kept + cut.attn_decode_flops_skipped == dense.attn_decode_flops_kept,
               "kept %llu + skipped %llu vs dense %llu", (unsigned long long)cut.attn_decode_flops_kept,
               (unsigned long long)cut.attn_decode_flops_skipped, (unsigned long long)dense.attn_decode_flops_kept);
    else
        check_fail_at(__FILE__, __LINE__, "the cut plan generated %d tokens, dense %d", (int)cut.n_generated,
                      (int)dense.n_generated);
    oc_model_close(m);
}

int main(void) {
    CHECK_RUN(test_eviction_counts_as_decode_skipped);
    return check_finish();
}
