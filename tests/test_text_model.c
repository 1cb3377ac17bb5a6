/* test_text_model.c: the language model against transformers (tests/data/models/NAME: fixtures made by
 * tests/reference/make_model_fixtures.py). Input: the reference input ids and M-RoPE positions,
 * with HF's own image features in the image rows, so this checks the decoder alone:
 *   - every decoder layer's output and the logits at every prompt position: rel. err <= 1e-3,
 *     and the top-1 token equal to HF's at every position;
 *   - the 8-token greedy continuation equal to HF's;
 *   - thread counts 1 and 3 give bitwise identical logits; a plan with every head dense gives
 *     bitwise the logits of no plan; chunked prefill matches one-shot prefill;
 *   - loader errors: wrong architecture, missing tensor, wrong shape name the problem. */
#include "check.h"
#include "attention/layout.h"
#include "plan/plan.h"
#include "core/pool.h"
#include "port.h"
#include "support/ref.h"
#include "model/text_model.h"

#include <stdlib.h>
#include <string.h>

typedef struct fixture {
    oc_gguf *g;
    oc_text_model *m;
    oc_safetensors *ref;
    int32_t *ids, *pos;   /* pos: [3][n] */
    size_t n;
    float *embd;          /* [n][d]: HF image features in image rows, 0 elsewhere */
    int32_t *image_row;   /* 1 where the token is an image token */
} fixture;

static int fixture_open(fixture *f, const char *name) {
    memset(f, 0, sizeof *f);
    char path[256];
    oc_error e;
    snprintf(path, sizeof path, "tests/data/models/%s/text.gguf", name);
    if (oc_gguf_open(&f->g, path, NULL, &e)) { check_fail_at(__FILE__, __LINE__, "%s", e.message); return 0; }
    if (oc_text_model_load(&f->m, f->g, path, NULL, &e)) { check_fail_at(__FILE__, __LINE__, "%s", e.message); return 0; }
    snprintf(path, sizeof path, "tests/data/models/%s/reference.safetensors", name);
    if (oc_safetensors_open(&f->ref, path, NULL, &e)) { check_fail_at(__FILE__, __LINE__, "%s", e.message); return 0; }
    size_t n_pos, n_e0, n_e1;
    f->ids = ref_i32(f->ref, "input_ids", &f->n, NULL);
    f->pos = ref_i32(f->ref, "position_ids", &n_pos, NULL);
    float *e0 = ref_f32(f->ref, "image_embeds.0", &n_e0, NULL);
    float *e1 = ref_f32(f->ref, "image_embeds.1", &n_e1, NULL);
    if (!f->ids || !f->pos || !e0 || !e1 || n_pos != 3 * f->n) { check_fail_at(__FILE__, __LINE__, "reference tensors"); return 0; }
    size_t d = (size_t)f->m->hp.n_embd;
    f->embd = calloc(f->n * d, sizeof(float));
    f->image_row = calloc(f->n, sizeof(int32_t));
    /* The image pad id is the one HF replaced: the rows where text.embeds differs from the
     * token's own embedding. Simpler: the token that occurs n_e0/d + n_e1/d times in a run. */
    size_t k = 0, n_img = (n_e0 + n_e1) / d;
    int32_t pad = -1;
    for (size_t i = 0; i + 1 < f->n && pad < 0; i++)
        if (f->ids[i] == f->ids[i + 1] && f->ids[i] != f->ids[0]) pad = f->ids[i];
    for (size_t i = 0; i < f->n; i++) {
        if (f->ids[i] != pad) continue;
        const float *src = k < n_e0 / d ? e0 + k * d : e1 + (k - n_e0 / d) * d;
        memcpy(f->embd + i * d, src, d * sizeof(float));
        f->image_row[i] = 1;
        k++;
    }
    free(e0);
    free(e1);
    if (k != n_img) { check_fail_at(__FILE__, __LINE__, "image rows %zu != %zu", k, n_img); return 0; }
    return 1;
}

static void fixture_close(fixture *f) {
    oc_text_model_free(f->m);
    oc_gguf_close(f->g);
    oc_safetensors_close(f->ref);
    free(f->ids);
    free(f->pos);
    free(f->embd);
    free(f->image_row);
}

typedef struct layer_capture {
    float *out;      /* [n_layers][n][d] */
    int32_t n, d, offset;
} layer_capture;

static void on_layer(void *user, int32_t layer, const float *x, int32_t n_tokens, int32_t n_embd) {
    layer_capture *c = user;
    memcpy(c->out + ((size_t)layer * (size_t)c->n + (size_t)c->offset) * (size_t)n_embd, x,
           sizeof(float) * (size_t)n_tokens * (size_t)n_embd);
}

/* Prefill the prompt in chunks of `chunk` tokens with all logits; returns logits [n][V]. */
static float *prefill(fixture *f, oc_text_ctx *ctx, int32_t chunk, const oc_stack_plan *plan,
                      layer_capture *cap, oc_error *e) {
    size_t V = (size_t)f->m->hp.n_vocab, d = (size_t)f->m->hp.n_embd;
    float *logits = malloc(sizeof(float) * V * f->n);
    int32_t *ids = malloc(sizeof(int32_t) * f->n);
    for (size_t i = 0; i < f->n; i++) ids[i] = f->image_row[i] ? -1 : f->ids[i];
    check_poison_f32(logits, V * f->n);
    for (int32_t s = 0; s < (int32_t)f->n; s += chunk) {
        int32_t cnt = OC_MIN(chunk, (int32_t)f->n - s);
        oc_text_batch b;
        memset(&b, 0, sizeof b);
        b.n_tokens = cnt;
        b.ids = ids + s;
        b.embd = f->embd + (size_t)s * d;
        b.pos_t = f->pos + s;
        b.pos_h = f->pos + f->n + s;
        b.pos_w = f->pos + 2 * f->n + s;
        b.plan = plan;
        b.logits = logits + (size_t)s * V;
        b.all_logits = 1;
        if (cap) {
            cap->offset = s;
            b.on_layer = on_layer;
            b.user = cap;
        }
        if (oc_text_forward(ctx, &b, NULL, e)) {
            free(logits);
            free(ids);
            return NULL;
        }
    }
    free(ids);
    return logits;
}

static oc_text_ctx *open_ctx(fixture *f, oc_pool *pool, int32_t batch, oc_error *e) {
    oc_text_limits lim = { 160, batch, NULL, 0 };
    oc_text_ctx *ctx = NULL;
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    if (oc_text_ctx_open(&ctx, f->m, &lim, pool, oc_isa_best(&cpu), NULL, e)) return NULL;
    return ctx;
}

static void parity(const char *name) {
    fixture f;
    if (!fixture_open(&f, name)) { fixture_close(&f); return; }
    oc_error e;
    size_t V = (size_t)f.m->hp.n_vocab, d = (size_t)f.m->hp.n_embd, n = f.n;
    int32_t L = f.m->hp.n_layers;
    oc_pool *pool;
    REQUIRE(oc_pool_open(&pool, 2, NULL, &e) == OC_OK);
    oc_text_ctx *ctx = open_ctx(&f, pool, 128, &e);
    REQUIREF(ctx, "%s", e.message);
    layer_capture cap = { malloc(sizeof(float) * (size_t)L * n * d), (int32_t)n, (int32_t)d, 0 };
    float *logits = prefill(&f, ctx, (int32_t)n, NULL, &cap, &e);
    REQUIREF(logits, "%s", e.message);
    for (int32_t l = 0; l < L; l++) {
        char nm[64];
        size_t cnt;
        snprintf(nm, sizeof nm, "text.layer.%d", l);
        float *want = ref_f32(f.ref, nm, &cnt, NULL);
        REQUIRE(want && cnt == n * d);
        double err = ref_rel_err(cap.out + (size_t)l * n * d, want, cnt);
        printf("  %s layer %d rel err %.2e\n", name, l, err);
        CHECKF(err <= 1e-3, "%s layer %d rel err %.3e", name, l, err);
        free(want);
    }
    size_t cnt;
    float *want = ref_f32(f.ref, "logits", &cnt, NULL);
    REQUIRE(want && cnt == n * V);
    double worst = 0;
    int top1_bad = 0;
    for (size_t i = 0; i < n; i++) {
        double err = ref_rel_err(logits + i * V, want + i * V, V);
        if (err > worst) worst = err;
        if (ref_argmax(logits + i * V, V) != ref_argmax(want + i * V, V)) top1_bad++;
    }
    printf("  %s logits: worst rel err over %zu positions %.2e, top-1 mismatches %d\n", name, n, worst, top1_bad);
    CHECKF(worst <= 1e-3, "%s logits rel err %.3e", name, worst);
    CHECKF(top1_bad == 0, "%s: %d positions with a different top-1 token", name, top1_bad);
    free(want);

    /* Greedy continuation: positions continue after the largest prompt position. */
    size_t n_gen;
    int32_t *gen = ref_i32(f.ref, "generated", &n_gen, NULL);
    REQUIRE(gen);
    int32_t next_pos = 0;
    for (size_t i = 0; i < 3 * n; i++) next_pos = OC_MAX(next_pos, f.pos[i] + 1);
    int32_t tok = (int32_t)ref_argmax(logits + (n - 1) * V, V);
    float *step = malloc(sizeof(float) * V);
    for (size_t s = 0; s < n_gen; s++) {
        CHECKF(tok == gen[s], "%s: generated token %zu is %d, HF %d", name, s, tok, gen[s]);
        oc_text_batch b;
        memset(&b, 0, sizeof b);
        int32_t p = next_pos + (int32_t)s;
        b.n_tokens = 1;
        b.ids = &tok;
        b.pos_t = b.pos_h = b.pos_w = &p;
        b.logits = step;
        REQUIREF(oc_text_forward(ctx, &b, NULL, &e) == OC_OK, "%s", e.message);
        tok = (int32_t)ref_argmax(step, V);
    }
    free(step);
    free(gen);

    /* Threads: a serial context gives the same bits. */
    oc_text_ctx *serial = open_ctx(&f, NULL, 128, &e);
    REQUIRE(serial);
    float *l1 = prefill(&f, serial, (int32_t)n, NULL, NULL, &e);
    REQUIRE(l1);
    CHECKF(memcmp(l1, logits, sizeof(float) * n * V) == 0, "%s: 1 thread and 2 threads differ", name);
    /* A plan with every head dense: bitwise the same as no plan. */
    oc_plan_shape dec = { L, f.m->hp.n_head, f.m->hp.n_head_kv, f.m->hp.head_dim };
    oc_plan *plan;
    REQUIRE(oc_plan_create(&plan, &dec, NULL, NULL, &e) == OC_OK);
    oc_text_ctx_reset(serial);
    float *l2 = prefill(&f, serial, (int32_t)n, &plan->stacks[OC_PLAN_DECODER], NULL, &e);
    REQUIRE(l2);
    CHECKF(memcmp(l2, logits, sizeof(float) * n * V) == 0, "%s: dense plan differs from no plan", name);
    /* Chunked prefill (odd chunks through the KV cache) stays within the tolerance. */
    oc_text_ctx *chunked = open_ctx(&f, pool, 13, &e);
    REQUIRE(chunked);
    float *l3 = prefill(&f, chunked, 13, NULL, NULL, &e);
    REQUIRE(l3);
    double cerr = ref_rel_err(l3, logits, n * V);
    CHECKF(cerr <= 1e-5, "%s: chunked prefill rel err %.3e", name, cerr);
    /* A sparse plan (every head of layer 1 Intra-Image, BlindSight Sec. 3.2) against the dense
     * engine with that mask written out by hand: image query -> text keys + its own image, text
     * query -> everything, all under the causal base. */
    for (int32_t h = 0; h < f.m->hp.n_head; h++) oc_plan_head(plan, OC_PLAN_DECODER, 1, h)->kind = OC_PATTERN_INTRA_IMAGE;
    oc_token_span spans[2];
    int32_t n_sp = 0;
    for (size_t i = 0; i < n; i++) {
        if (!f.image_row[i]) continue;
        if (n_sp == 0 || spans[n_sp - 1].end != (int32_t)i) spans[n_sp++] = (oc_token_span){ (int32_t)i, (int32_t)i + 1 };
        else spans[n_sp - 1].end++;
    }
    REQUIRE(n_sp == 2);
    oc_token_layout *layout;
    REQUIRE(oc_layout_build(&layout, (int32_t)n, spans, 2, 0.1f, NULL, &e) == OC_OK);
    uint8_t *mask = calloc(n * n, 1);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j <= i; j++) {
            int32_t gi = oc_layout_image_at(layout, (int32_t)i), gj = oc_layout_image_at(layout, (int32_t)j);
            mask[i * n + j] = gi < 0 || gj < 0 || gi == gj;
        }
    const uint8_t *masks[8] = { NULL, mask, NULL, NULL, NULL, NULL, NULL, NULL };
    REQUIRE(L <= 8);
    float *l4 = malloc(sizeof(float) * n * V), *l5 = malloc(sizeof(float) * n * V);
    for (int pass = 0; pass < 2; pass++) {
        oc_text_ctx_reset(serial);
        int32_t *ids = malloc(sizeof(int32_t) * n);
        for (size_t i = 0; i < n; i++) ids[i] = f.image_row[i] ? -1 : f.ids[i];
        oc_text_batch b;
        memset(&b, 0, sizeof b);
        b.n_tokens = (int32_t)n;
        b.ids = ids;
        b.embd = f.embd;
        b.pos_t = f.pos;
        b.pos_h = f.pos + n;
        b.pos_w = f.pos + 2 * n;
        b.logits = pass ? l5 : l4;
        b.all_logits = 1;
        if (pass) b.layer_masks = masks;
        else {
            b.plan = &plan->stacks[OC_PLAN_DECODER];
            b.layout = layout;
        }
        oc_attn_stats as = { 0, 0, 0 };
        REQUIREF(oc_text_forward(serial, &b, &as, &e) == OC_OK, "%s", e.message);
        if (!pass) CHECK(as.flops_skipped > 0);
        free(ids);
    }
    double serr = ref_rel_err(l4, l5, n * V), sd = ref_rel_err(l4, logits, n * V);
    printf("  %s intra-image plan on layer 1 vs explicit mask: rel err %.2e (vs dense: %.2e)\n", name, serr, sd);
    CHECKF(serr <= 1e-6, "%s: sparse plan and explicit mask differ (rel err %.3e)", name, serr);
    CHECKF(sd > 1e-4, "%s: the sparse plan changed almost nothing (%.3e)", name, sd);
    free(l4);
    free(l5);
    free(mask);
    oc_layout_free(layout);
    oc_plan_free(plan);
    free(l1);
    free(l2);
    free(l3);
    oc_text_ctx_close(chunked);
    oc_text_ctx_close(serial);
    free(logits);
    free(cap.out);
    oc_text_ctx_close(ctx);
    oc_pool_close(pool);
    fixture_close(&f);
}

static void test_qwen2vl(void) { parity("qwen2vl"); }
static void test_qwen25vl(void) { parity("qwen25vl"); }

/* A mmproj file given as the text model, and a context that overflows. */
static void test_errors(void) {
    oc_gguf *g;
    oc_error e;
    oc_text_model *m;
    REQUIRE(oc_gguf_open(&g, "tests/data/models/qwen2vl/mmproj.gguf", NULL, &e) == OC_OK);
    CHECK(oc_text_model_load(&m, g, "mmproj.gguf", NULL, &e) == OC_ERR_UNSUPPORTED);
    CHECKF(strstr(e.message, "mmproj.gguf: architecture 'clip' is not supported"), "%s", e.message);
    oc_gguf_close(g);
    REQUIRE(oc_gguf_open(&g, "tests/data/models/qwen2vl/text.gguf", NULL, &e) == OC_OK);
    REQUIRE(oc_text_model_load(&m, g, "text.gguf", NULL, &e) == OC_OK);
    oc_text_limits lim = { 4, 4, NULL, 0 };
    oc_text_ctx *ctx;
    REQUIRE(oc_text_ctx_open(&ctx, m, &lim, NULL, OC_ISA_SCALAR, NULL, &e) == OC_OK);
    int32_t ids[5] = { 1, 2, 3, 4, 5 }, pos[5] = { 0, 1, 2, 3, 4 };
    oc_text_batch b;
    memset(&b, 0, sizeof b);
    b.n_tokens = 3;
    b.ids = ids;
    b.pos_t = b.pos_h = b.pos_w = pos;
    CHECK(oc_text_forward(ctx, &b, NULL, &e) == OC_OK);
    CHECK(oc_text_forward(ctx, &b, NULL, &e) == OC_ERR_RANGE);
    CHECKF(strstr(e.message, "context full: 3 cached + 3 new tokens exceed the context of 4 tokens"), "%s", e.message);
    oc_text_ctx_reset(ctx);
    ids[0] = 100000;
    CHECK(oc_text_forward(ctx, &b, NULL, &e) == OC_ERR_INVALID);
    CHECKF(strstr(e.message, "token id 100000 is outside the vocabulary"), "%s", e.message);
    oc_text_ctx_close(ctx);
    oc_text_model_free(m);
    oc_gguf_close(g);
}

int main(void) {
    /* f32 bounds against transformers and bitwise/1e-5 comparisons between two runs: the exact FP32
     * GEMMs. On the BF16 path (bf16_fast, matmul.h) each product's operands are rounded to 8 bits,
     * and a 1e-7 change of an activation can flip a rounding (2^-8): test_model's test_bf16_path
     * checks that path end to end with its own bound. */
    check_cpu_features("-bf16_fast");
    CHECK_RUN(test_qwen2vl);
    CHECK_RUN(test_qwen25vl);
    CHECK_RUN(test_errors);
    return check_finish();
}
