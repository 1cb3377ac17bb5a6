/* test_kv_runtime.c: the shrinking KV cache inside the language model (demo model, 6 layers,
 * 4 heads over 2 kv heads), against explicit references:
 *  - after a chunked prefill with SparseMM budgets or ZipVL thresholds (and a lazy group following
 *    an evicting layer), decoding over the compacted cache gives the logits of a dense cache with
 *    the dropped keys masked per head (test hook layer_masks); each head keeps what its rule says;
 *  - methods composed on one layer (A-shape heads in prefill, then ZipVL's set and / or a SparseMM
 *    budget kept) equal the dense engine with both methods' masks written out;
 *  - Q-Cache: a GLA lazy layer's own q/k weights change nothing; VLA equals the dense model on text
 *    rows and GLA on visual rows, bitwise;
 *  - KV bytes: held bytes shrink as the rules say, capacity shrinks with GLA (no K of their own);
 *  - an out-of-memory loop over context open with each method: every failure is OC_ERR_NOMEM and
 *    leaks nothing. */
#include "check.h"
#include "core/isa.h"
#include "gguf/gguf.h"
#include "model/text_model.h"
#include "ocellus.h"
#include "plan/plan.h"
#include "port.h"
#include "support/opencl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DEMO "examples/demo/ocellus-demo.gguf"
#define DEMO_MMPROJ "examples/demo/ocellus-demo-mmproj.gguf"
#define N_PROMPT 100
#define N_DECODE 6
#define CTX 112
#define CHUNK 16
#define ANSWER (N_DECODE + 2)   /* the room a budgeted layer keeps after the prompt */

typedef struct demo {
    oc_gguf *g;
    oc_text_model *m;
    int32_t ids[N_PROMPT + N_DECODE];   /* < 0: an image row of embd */
    float *embd;                        /* [N_PROMPT][d] */
    int32_t pos[N_PROMPT + N_DECODE];
} demo;

static int demo_open(demo *t, int visual_from, int visual_to) {
    memset(t, 0, sizeof *t);
    oc_error e;
    if (oc_gguf_open(&t->g, DEMO, NULL, &e) || oc_text_model_load(&t->m, t->g, DEMO, NULL, &e)) {
        check_fail_at(__FILE__, __LINE__, "%s", e.message);
        return 0;
    }
    size_t d = (size_t)t->m->hp.n_embd;
    t->embd = malloc(sizeof(float) * d * N_PROMPT);
    check_rng r = { 0xfeedu };
    for (size_t i = 0; i < d * N_PROMPT; i++) t->embd[i] = check_rng_uniform(&r, -0.5f, 0.5f);
    for (int32_t i = 0; i < N_PROMPT + N_DECODE; i++) {
        t->ids[i] = i >= visual_from && i < visual_to ? -1 : check_rng_int(&r, 0, OC_MIN(t->m->hp.n_vocab, 300) - 1);
        t->pos[i] = i;
    }
    return 1;
}

static void demo_close(demo *t) {
    free(t->embd);
    oc_text_model_free(t->m);
    oc_gguf_close(t->g);
}

static oc_text_ctx *open_ctx(demo *t, const oc_plan *plan, int n_threads, oc_pool **pool) {
    oc_text_limits lim = { CTX, CHUNK, plan, ANSWER };
    oc_text_ctx *ctx = NULL;
    oc_cpu_features cpu;
    oc_error e;
    oc_port_cpu_features(&cpu);
    *pool = NULL;
    if (n_threads > 1 && oc_pool_open(pool, n_threads, NULL, &e)) return NULL;
    if (oc_text_ctx_open(&ctx, t->m, &lim, *pool, oc_isa_best(&cpu), NULL, &e)) {
        check_fail_at(__FILE__, __LINE__, "%s", e.message);
        return NULL;
    }
    return ctx;
}

/* ZipVL's important sets T per layer, as the prefill chose them (oc_text_batch.on_zipvl). */
typedef struct zsets {
    int32_t n[OC_PLAN_MAX_LAYERS];   /* -1: the layer has none */
    int32_t pos[8][N_PROMPT];
} zsets;

static void on_zipvl(void *user, int32_t layer, const int32_t *kept, int32_t n) {
    zsets *z = user;
    if (layer >= 8 || n > N_PROMPT) return;
    z->n[layer] = n;
    memcpy(z->pos[layer], kept, (size_t)n * sizeof(int32_t));
}

/* One forward call over tokens [s, s + n); masks: per-layer per-head masks or NULL; logits of
 * every row when all; z: where ZipVL's sets go, or NULL. */
static oc_status step_rows(demo *t, oc_text_ctx *ctx, int32_t s, int32_t n, const oc_plan *plan, float *logits,
                           const uint8_t *const *masks, int64_t mask_stride_head, int all, zsets *z) {
    oc_text_batch b;
    memset(&b, 0, sizeof b);
    b.n_tokens = n;
    b.ids = t->ids + s;
    b.embd = s < N_PROMPT ? t->embd + (size_t)s * (size_t)t->m->hp.n_embd : NULL;
    b.pos_t = b.pos_h = b.pos_w = t->pos + s;
    b.plan = plan ? &plan->stacks[OC_PLAN_DECODER] : NULL;
    b.logits = logits;
    b.prompt_tokens = s < N_PROMPT ? N_PROMPT : 0;
    b.layer_masks = masks;
    b.layer_mask_stride_head = mask_stride_head;
    b.all_logits = all;
    if (z) {
        b.on_zipvl = on_zipvl;
        b.user = z;
    }
    oc_error e;
    oc_status st = oc_text_forward(ctx, &b, NULL, &e);
    if (st) check_fail_at(__FILE__, __LINE__, "%s", e.message);
    return st;
}

static oc_status step(demo *t, oc_text_ctx *ctx, int32_t s, int32_t n, const oc_plan *plan, float *logits,
                      const uint8_t *const *masks, int64_t mask_stride_head) {
    return step_rows(t, ctx, s, n, plan, logits, masks, mask_stride_head, 0, NULL);
}

/* Tokens the next call takes from s: a context that prefills by layer takes the prompt whole. */
static int32_t next_n(oc_text_ctx *ctx, int32_t s) {
    if (s >= N_PROMPT) return 1;
    return oc_text_ctx_prefills_by_layer(ctx) ? N_PROMPT - s : OC_MIN(CHUNK, N_PROMPT - s);
}

static oc_plan *new_plan(const oc_text_model *m, int32_t window) {
    oc_plan_shape sh = { m->hp.n_layers, m->hp.n_head, m->hp.n_head_kv, m->hp.head_dim };
    oc_plan *p = NULL;
    oc_error e;
    if (oc_plan_create(&p, &sh, NULL, NULL, &e)) return NULL;
    p->kv_window_tokens = window;
    return p;
}

/* Prefill both contexts, then decode N_DECODE tokens: `evict` runs its plan (the prompt whole,
 * segment by segment, into staging and then its bounded regions), `dense` the plan without
 * eviction (the same lazy groups) in chunks, with the sparse parts written out as explicit masks:
 * in prefill, a ZipVL layer's rows in its set T attend causally over T and the other rows attend
 * to nothing (output 0: zipvl.txt Alg. 1, Sec. 4.2); in decode, every dropped key masked per head
 * from evict's book. Without ZipVL the prefill logits of every prompt row must be bitwise equal
 * (by layer computes what by chunk does); otherwise, and in decode, within rounding (the masked
 * dense call tiles the keys differently). */
/* patterns: NULL, or the plan whose A-shape decoder heads evict_plan runs in prefill (on layers
 * that evict, "zipvl-tau T prefill heads" or kv-budget): the reference then writes each of those
 * heads out as its explicit mask (key j < sink or p - local < j <= p, attn.h) on the dense engine,
 * and decode masks only what eviction dropped (a compacted layer attends to every key it kept). */
static void compare_with_masked_dense_ex(const char *what, const oc_plan *evict_plan, const oc_plan *dense_plan,
                                         int32_t visual_from, int32_t visual_to, const oc_plan *patterns) {
    demo t;
    if (!demo_open(&t, visual_from, visual_to)) return;
    const oc_text_hparams *hp = &t.m->hp;
    size_t V = (size_t)hp->n_vocab;
    oc_pool *pa, *pb;
    oc_text_ctx *a = open_ctx(&t, evict_plan, 2, &pa), *b = open_ctx(&t, dense_plan, 1, &pb);
    float *la = malloc(V * 4 * N_PROMPT), *lb = malloc(V * 4 * CHUNK);
    size_t head_rows = patterns ? (size_t)hp->n_head * CHUNK : (size_t)OC_MAX(hp->n_head, CHUNK);
    uint8_t *mask_rows = malloc((size_t)hp->n_layers * head_rows * CTX);
    const uint8_t *masks[OC_PLAN_MAX_LAYERS];
    if (!a || !b || !la || !lb || !mask_rows) goto done;
    CHECKF(oc_text_ctx_prefills_by_layer(a) && !oc_text_ctx_prefills_by_layer(b), "%s: prefill modes", what);
    zsets z;
    for (int32_t l = 0; l < OC_PLAN_MAX_LAYERS; l++) z.n[l] = -1;
    check_poison_f32(la, V * N_PROMPT);
    if (step_rows(&t, a, 0, N_PROMPT, evict_plan, la, NULL, 0, 1, &z)) goto done;
    int any_zipvl = 0, n_dropped = 0;
    for (int32_t l = 0; l < hp->n_layers; l++) {
        any_zipvl |= z.n[l] >= 0;
        n_dropped += z.n[l] >= 0 ? N_PROMPT - z.n[l] : 0;
    }
    CHECKF(!any_zipvl || n_dropped > 0, "%s: ZipVL kept every token", what);
    /* a sparse prefill differs from the masked dense one by rounding (1e-5 here) and that grows
     * through the layers into decode; the same prefill unmasked is 0.4-0.9 away */
    double tol = any_zipvl || patterns ? 1e-4 : 1e-5;
    for (int32_t s = 0; s < N_PROMPT; s += CHUNK) {
        int32_t n = OC_MIN(CHUNK, N_PROMPT - s), n_kv = s + n;
        if (patterns) {   /* the head patterns as explicit per-head masks (A-shape, dense = causal) */
            for (int32_t l = 0; l < hp->n_layers; l++) {
                uint8_t *m = mask_rows + (size_t)l * head_rows * CTX;
                masks[l] = m;
                for (int32_t h = 0; h < hp->n_head; h++) {
                    const oc_head_pattern *hpat = oc_plan_head_c(patterns, OC_PLAN_DECODER, l, h);
                    int ashape = hpat->kind == OC_PATTERN_A_SHAPE;
                    for (int32_t i = 0; i < n; i++)
                        for (int32_t j = 0, p = s + i; j < n_kv; j++)
                            m[(size_t)h * n * n_kv + (size_t)i * n_kv + j] =
                                j <= p && (!ashape || j < hpat->n_sink || j > p - hpat->n_local);
                }
            }
            check_poison_f32(lb, V * CHUNK);
            if (step_rows(&t, b, s, n, dense_plan, lb, masks, (int64_t)n * n_kv, 1, NULL)) goto done;
            double *ref = malloc(V * (size_t)n * sizeof(double));
            for (size_t i = 0; i < V * (size_t)n; i++) ref[i] = lb[i];
            double e = check_rel_err_f32(la + (size_t)s * V, ref, V * (size_t)n);
            free(ref);
            CHECKF(e < tol, "%s: prefill chunk %d: relative error %.3g against the dense prefill with the patterns' "
                   "masks", what, s, e);
            continue;
        }
        for (int32_t l = 0; l < hp->n_layers; l++) {   /* Alg. 1 as a mask on the dense engine */
            masks[l] = NULL;
            if (z.n[l] < 0) continue;
            uint8_t *m = mask_rows + (size_t)l * CHUNK * n_kv;
            memset(m, 0, (size_t)n * (size_t)n_kv);
            for (int32_t i = 0; i < z.n[l]; i++) {
                int32_t p = z.pos[l][i];
                if (p < s || p >= n_kv) continue;
                for (int32_t j = 0; j <= i; j++) m[(size_t)(p - s) * n_kv + z.pos[l][j]] = 1;
            }
            masks[l] = m;
        }
        check_poison_f32(lb, V * CHUNK);
        if (step_rows(&t, b, s, n, dense_plan, lb, any_zipvl ? masks : NULL, 0, 1, NULL)) goto done;
        if (!any_zipvl) {
            CHECKF(!memcmp(la + (size_t)s * V, lb, V * 4 * (size_t)n), "%s: prefill logits differ in chunk %d", what, s);
            continue;
        }
        double *ref = malloc(V * (size_t)n * sizeof(double));
        for (size_t i = 0; i < V * (size_t)n; i++) ref[i] = lb[i];
        double e = check_rel_err_f32(la + (size_t)s * V, ref, V * (size_t)n);
        free(ref);
        CHECKF(e < tol, "%s: prefill chunk %d: relative error %.3g against the masked dense prefill", what, s, e);
    }
    int32_t n_evicted = 0;
    for (int32_t k = 0; k < N_DECODE; k++) {
        int32_t s = N_PROMPT + k, n_kv = s + 1;
        for (int32_t l = 0; l < hp->n_layers; l++) {
            masks[l] = mask_rows + (size_t)l * hp->n_head * n_kv;
            for (int32_t h = 0; h < hp->n_head; h++) {
                uint8_t *row = mask_rows + (size_t)l * hp->n_head * n_kv + (size_t)h * n_kv;
                const int32_t *pos;
                int32_t held = oc_text_ctx_kv_held(a, l, h / (hp->n_head / hp->n_head_kv), &pos);
                memset(row, pos ? 0 : 1, (size_t)n_kv);
                for (int32_t i = 0; pos && i < held; i++) row[pos[i]] = 1;
                row[s] = 1;   /* the query's own key */
                if (k == 0 && h % (hp->n_head / hp->n_head_kv) == 0) n_evicted += s - held;
            }
        }
        check_poison_f32(la, V);
        check_poison_f32(lb, V);
        if (step(&t, a, s, 1, evict_plan, la, NULL, 0) || step(&t, b, s, 1, dense_plan, lb, masks, n_kv)) goto done;
        double *ref = malloc(V * sizeof(double));
        for (size_t i = 0; i < V; i++) ref[i] = lb[i];
        double e = check_rel_err_f32(la, ref, V);
        free(ref);
        CHECKF(e < tol, "%s: decode step %d: relative error %.3g against masked dense", what, k, e);
    }
    CHECKF(n_evicted > 0, "%s: nothing was evicted", what);
done:
    free(la);
    free(lb);
    free(mask_rows);
    oc_text_ctx_close(a);
    oc_text_ctx_close(b);
    oc_pool_close(pa);
    oc_pool_close(pb);
    demo_close(&t);
}

static void compare_with_masked_dense(const char *what, const oc_plan *evict_plan, const oc_plan *dense_plan,
                                      int32_t visual_from, int32_t visual_to) {
    compare_with_masked_dense_ex(what, evict_plan, dense_plan, visual_from, visual_to, NULL);
}

static void test_sparsemm_decode_equals_masked_dense(void) {
    demo t;
    if (!demo_open(&t, 0, 0)) return;
    oc_plan *p = new_plan(t.m, 8), *d = new_plan(t.m, 8);
    REQUIRE(p && d);
    int32_t nkv = t.m->hp.n_head_kv;
    for (int32_t l = 0; l < t.m->hp.n_layers; l++)
        for (int32_t g = 0; g < nkv; g++) p->stacks[OC_PLAN_DECODER].kv_budget_tokens[l * nkv + g] = 12 + 9 * ((l + g) % 3);
    p->stacks[OC_PLAN_DECODER].kv_budget_tokens[3 * nkv] = OC_PLAN_KV_FULL;   /* one head keeps all */
    demo_close(&t);
    compare_with_masked_dense("sparsemm", p, d, 10, 40);
    oc_plan_free(p);
    oc_plan_free(d);
}

static void test_zipvl_decode_equals_masked_dense(void) {
    demo t;
    if (!demo_open(&t, 0, 0)) return;
    oc_plan *p = new_plan(t.m, 32), *d = new_plan(t.m, 32);
    REQUIRE(p && d);
    for (int32_t l = 1; l < t.m->hp.n_layers; l++) p->stacks[OC_PLAN_DECODER].zipvl_tau_ppm[l] = l % 2 ? 900000 : 975000;
    demo_close(&t);
    compare_with_masked_dense("zipvl", p, d, 5, 50);
    oc_plan_free(p);
    oc_plan_free(d);
}

/* A lazy group whose first layer evicts: the lazy layers hold exactly its tokens (their keys are
 * its keys, GLA; or their text keys and its visual keys, VLA), so their V rows follow it. */
/* Under an emulator (tests/run.sh: OC_TEST_SLOW=2) the two longest cases, 2 to 3 minutes each
 * there, are left to the native configurations, which run every case. */
/* Methods composed on one layer (kv_cache.h): head patterns in prefill with ZipVL's set kept after
 * it ("zipvl-tau T prefill heads", plan format 4), with a SparseMM budget within that set, and with
 * a SparseMM budget alone. The reference is the dense engine with both methods' masks written out:
 * each A-shape head's mask in prefill, then every key the eviction dropped masked in decode. So
 * the pattern keeps its prefill saving (its mask, not dense, matches) and the eviction its KV
 * saving (keys were dropped), on the same layer. */
static void test_composition_equals_explicit_masks(void) {
    demo t;
    if (!demo_open(&t, 10, 70)) return;
    oc_plan *p = new_plan(t.m, 8), *d = new_plan(t.m, 8);
    REQUIRE(p && d);
    oc_stack_plan *s = &p->stacks[OC_PLAN_DECODER];
    int32_t nkv = t.m->hp.n_head_kv, H = t.m->hp.n_head;
    demo_close(&t);
    static const int32_t zl[3] = { 1, 2, 4 };   /* pattern + ZipVL; layer 2 with a budget within T */
    for (int i = 0; i < 3; i++) {
        s->zipvl_tau_ppm[zl[i]] = 900000;
        s->zipvl_heads_prefill[zl[i]] = 1;
    }
    for (int32_t g = 0; g < nkv; g++) {
        s->kv_budget_tokens[2 * nkv + g] = 20 + 6 * g;
        s->kv_budget_tokens[3 * nkv + g] = 16 + 10 * g;   /* layer 3: pattern + SparseMM alone */
    }
    for (int32_t l = 1; l <= 4; l++)
        for (int32_t h = 0; h < H; h++) {
            if ((l + h) % 3 == 0) continue;   /* some heads stay dense */
            oc_head_pattern *hp = oc_plan_head(p, OC_PLAN_DECODER, l, h);
            hp->kind = OC_PATTERN_A_SHAPE;
            hp->n_sink = 2 + l;
            hp->n_local = 12 + 5 * h;
        }
    oc_error e;
    CHECKF(oc_plan_validate(p, &e) == OC_OK, "plan: %s", e.message);
    compare_with_masked_dense_ex("patterns + zipvl prefill heads + sparsemm", p, d, 10, 70, p);
    oc_plan_free(p);
    oc_plan_free(d);
}

static int emulated(void) {
    if (!check_emulated()) return 0;
    check_skip("under an emulator this case costs minutes; the native configurations run it");
    return 1;
}

static void test_lazy_layers_follow_their_first_layer(void) {
    if (emulated()) return;
    demo t;
    if (!demo_open(&t, 0, 0)) return;
    for (int mode = 0; mode < 2; mode++) {
        oc_plan *p = new_plan(t.m, 8), *d = new_plan(t.m, 8);
        REQUIRE(p && d);
        oc_error e;
        oc_lazy_mode lm = mode ? OC_LAZY_VLA : OC_LAZY_GLA;
        REQUIRE(oc_plan_add_lazy_group(p, OC_PLAN_DECODER, 1, 3, lm, &e) == OC_OK);
        REQUIRE(oc_plan_add_lazy_group(d, OC_PLAN_DECODER, 1, 3, lm, &e) == OC_OK);
        p->stacks[OC_PLAN_DECODER].kv_budget_tokens[1 * 2 + 0] = 20;
        p->stacks[OC_PLAN_DECODER].kv_budget_tokens[1 * 2 + 1] = 30;
        p->stacks[OC_PLAN_DECODER].zipvl_tau_ppm[4] = 850000;   /* both on layer 4 */
        p->stacks[OC_PLAN_DECODER].kv_budget_tokens[4 * 2 + 1] = 24;
        compare_with_masked_dense(mode ? "vla + sparsemm" : "gla + sparsemm", p, d, 20, 60);
        oc_plan_free(p);
        oc_plan_free(d);
    }
    /* a group whose first layer runs ZipVL's sparse prefill: its lazy layers attend over its T */
    for (int mode = 0; mode < 2; mode++) {
        oc_plan *p = new_plan(t.m, 8), *d = new_plan(t.m, 8);
        REQUIRE(p && d);
        oc_error e;
        oc_lazy_mode lm = mode ? OC_LAZY_VLA : OC_LAZY_GLA;
        REQUIRE(oc_plan_add_lazy_group(p, OC_PLAN_DECODER, 2, 4, lm, &e) == OC_OK);
        REQUIRE(oc_plan_add_lazy_group(d, OC_PLAN_DECODER, 2, 4, lm, &e) == OC_OK);
        for (int32_t l = 2; l <= 4; l++) p->stacks[OC_PLAN_DECODER].zipvl_tau_ppm[l] = 930000;
        compare_with_masked_dense(mode ? "vla + zipvl" : "gla + zipvl", p, d, 20, 60);
        oc_plan_free(p);
        oc_plan_free(d);
    }
    demo_close(&t);
}

/* Prefill logits of the N_PROMPT tokens, one call each, with a plan; rows [N_PROMPT][V]. */
static int run_prompt(demo *t, const oc_plan *plan, float *logits) {
    oc_pool *pool;
    oc_text_ctx *c = open_ctx(t, plan, 1, &pool);
    int ok = c != NULL;
    size_t V = (size_t)t->m->hp.n_vocab;
    for (int32_t s = 0; ok && s < N_PROMPT; s += CHUNK)
        ok = !step(t, c, s, OC_MIN(CHUNK, N_PROMPT - s), plan, logits + (size_t)s / CHUNK * V, NULL, 0);
    oc_text_ctx_close(c);
    oc_pool_close(pool);
    return ok;
}

/* Q-Cache semantics (qcache.txt Eq. 5-8) by their consequences, bitwise: a GLA lazy layer never
 * reads its own q/k weights; VLA on an all-text prompt is the dense model; VLA on an all-visual
 * prompt is GLA. */
static void test_qcache_semantics(void) {
    if (emulated()) return;
    size_t V;
    enum { N_OUT = (N_PROMPT + CHUNK - 1) / CHUNK };
    for (int visual = 0; visual < 2; visual++) {
        demo t;
        if (!demo_open(&t, 0, visual ? N_PROMPT : 0)) return;
        V = (size_t)t.m->hp.n_vocab;
        float *dense = malloc(N_OUT * V * 4), *gla = malloc(N_OUT * V * 4), *vla = malloc(N_OUT * V * 4),
              *gla2 = malloc(N_OUT * V * 4);
        oc_plan *pd = new_plan(t.m, 32), *pg = new_plan(t.m, 32), *pv = new_plan(t.m, 32);
        oc_error e;
        REQUIRE(oc_plan_add_lazy_group(pg, OC_PLAN_DECODER, 2, 4, OC_LAZY_GLA, &e) == OC_OK);
        REQUIRE(oc_plan_add_lazy_group(pv, OC_PLAN_DECODER, 2, 4, OC_LAZY_VLA, &e) == OC_OK);
        REQUIRE(run_prompt(&t, pd, dense) && run_prompt(&t, pg, gla) && run_prompt(&t, pv, vla));
        if (visual) CHECKF(!memcmp(vla, gla, N_OUT * V * 4), "VLA on visual rows differs from GLA");
        else CHECKF(!memcmp(vla, dense, N_OUT * V * 4), "VLA on text rows differs from the dense model");
        CHECKF(memcmp(gla, dense, N_OUT * V * 4), "GLA changed nothing");
        /* layer 3's own q and k weights: scrambled, GLA must not notice */
        oc_text_layer *L = &t.m->layers[3];
        const void *wq = L->wq.data, *wk = L->wk.data;
        void *junk = calloc(1, OC_MAX(L->wq.n_out * L->wq.row_bytes, L->wk.n_out * L->wk.row_bytes));
        L->wq.data = L->wk.data = junk;
        REQUIRE(run_prompt(&t, pg, gla2));
        CHECKF(!memcmp(gla, gla2, N_OUT * V * 4), "a GLA lazy layer read its own q/k weights");
        L->wq.data = wq;
        L->wk.data = wk;
        free(junk);
        oc_plan_free(pd);
        oc_plan_free(pg);
        oc_plan_free(pv);
        free(dense);
        free(gla);
        free(vla);
        free(gla2);
        demo_close(&t);
    }
}

/* Held bytes follow the rules; the buffers are bounded up front (kvcache/kv_cache.h "Memory"):
 * a budgeted layer's region holds its budget + the answer room, its prompt one staging slot of the
 * context; GLA lazy layers hold no K and their K cache is not allocated. */
static void test_kv_bytes(void) {
    demo t;
    if (!demo_open(&t, 0, 0)) return;
    const oc_text_hparams *hp = &t.m->hp;
    size_t row = (size_t)hp->head_dim * 2, L = (size_t)hp->n_layers, H = (size_t)hp->n_head_kv;
    oc_plan *pd = new_plan(t.m, 8), *ps = new_plan(t.m, 8), *pg = new_plan(t.m, 8);
    oc_error e;
    for (size_t i = 0; i < L * H; i++) ps->stacks[OC_PLAN_DECODER].kv_budget_tokens[i] = 16;
    REQUIRE(oc_plan_add_lazy_group(pg, OC_PLAN_DECODER, 0, 3, OC_LAZY_GLA, &e) == OC_OK);
    const oc_plan *plans[3] = { pd, ps, pg };
    size_t held[3], cap[3];
    float *logits = malloc((size_t)hp->n_vocab * 4);
    for (int i = 0; i < 3; i++) {
        oc_pool *pool;
        oc_text_ctx *c = open_ctx(&t, plans[i], 1, &pool);
        REQUIRE(c);
        for (int32_t s = 0, n; s < N_PROMPT; s += n) REQUIRE(!step(&t, c, s, n = next_n(c, s), plans[i], logits, NULL, 0));
        oc_text_ctx_kv_bytes(c, &held[i], &cap[i]);
        oc_text_ctx_close(c);
        oc_pool_close(pool);
    }
    CHECKF(held[0] == N_PROMPT * row * L * H * 2, "dense held %zu", held[0]);
    CHECKF(held[1] == 16 * row * L * H * 2, "sparsemm held %zu", held[1]);
    CHECKF(held[2] == N_PROMPT * row * (L + L - 3) * H, "gla held %zu", held[2]);
    CHECK(cap[0] == CTX * row * L * H * 2);
    CHECKF(cap[1] == ((16 + ANSWER) * L * 2 + 2 * CTX) * row * H, "sparsemm capacity %zu", cap[1]);
    CHECKF(cap[2] == CTX * row * (2 * L - 3) * H, "gla capacity %zu", cap[2]);
    free(logits);
    oc_plan_free(pd);
    oc_plan_free(ps);
    oc_plan_free(pg);
    demo_close(&t);
}

/* Q-Cache VLA holds no key rows of its lazy layers for visual tokens (kvcache/kv_cache.h
 * "Memory"): the held bytes drop by exactly those rows, with a dense cache and with a SparseMM
 * budget on the group (counted here from the tokens each kv head holds); the allocation stays. */
static void test_vla_bytes(void) {
    enum { VIS_FROM = 10, VIS_TO = 45 };
    demo t;
    if (!demo_open(&t, VIS_FROM, VIS_TO)) return;
    const oc_text_hparams *hp = &t.m->hp;
    size_t row = (size_t)hp->head_dim * 2, L = (size_t)hp->n_layers, H = (size_t)hp->n_head_kv;
    oc_plan *pd = new_plan(t.m, 8), *pv = new_plan(t.m, 8), *ps = new_plan(t.m, 8);
    REQUIRE(pd && pv && ps);
    oc_error e;
    REQUIRE(oc_plan_add_lazy_group(pv, OC_PLAN_DECODER, 1, 3, OC_LAZY_VLA, &e) == OC_OK);
    REQUIRE(oc_plan_add_lazy_group(ps, OC_PLAN_DECODER, 1, 3, OC_LAZY_VLA, &e) == OC_OK);
    for (int32_t l = 1; l <= 3; l++) {
        ps->stacks[OC_PLAN_DECODER].kv_budget_tokens[l * 2 + 0] = 24;
        ps->stacks[OC_PLAN_DECODER].kv_budget_tokens[l * 2 + 1] = 40;
    }
    const oc_plan *plans[3] = { pd, pv, ps };
    size_t held[3], cap[3], expect_ps = 0;
    float *logits = malloc((size_t)hp->n_vocab * 4);
    for (int i = 0; i < 3; i++) {
        oc_pool *pool;
        oc_text_ctx *c = open_ctx(&t, plans[i], 1, &pool);
        REQUIRE(c);
        for (int32_t s = 0, n; s < N_PROMPT; s += n) REQUIRE(!step(&t, c, s, n = next_n(c, s), plans[i], logits, NULL, 0));
        oc_text_ctx_kv_bytes(c, &held[i], &cap[i]);
        for (int32_t l = 0; i == 2 && l < hp->n_layers; l++)
            for (int32_t g = 0; g < hp->n_head_kv; g++) {
                const int32_t *pos;
                int32_t n = oc_text_ctx_kv_held(c, l, g, &pos), k_rows = n;
                for (int32_t r = 0; l >= 2 && l <= 3 && r < n; r++) {
                    int32_t p = pos ? pos[r] : r;
                    k_rows -= p >= VIS_FROM && p < VIS_TO;
                }
                expect_ps += (size_t)(n + k_rows) * row;
            }
        oc_text_ctx_close(c);
        oc_pool_close(pool);
    }
    size_t visual_k = (size_t)(VIS_TO - VIS_FROM) * row * H * 2;   /* 2 lazy layers */
    CHECKF(held[0] == N_PROMPT * row * L * H * 2, "dense held %zu", held[0]);
    CHECKF(held[1] == held[0] - visual_k, "vla held %zu, dense %zu - visual keys %zu", held[1], held[0], visual_k);
    CHECKF(held[2] == expect_ps && held[2] < held[0], "vla + sparsemm held %zu, expected %zu", held[2], expect_ps);
    CHECKF(cap[1] == cap[0], "vla capacity %zu, dense %zu", cap[1], cap[0]);
    free(logits);
    oc_plan_free(pd);
    oc_plan_free(pv);
    oc_plan_free(ps);
    demo_close(&t);
}

/* A budgeted layer's region has room for exactly ANSWER tokens after the prompt: the next one is
 * refused with OC_ERR_RANGE, and nothing past the region is written. */
static void test_answer_room(void) {
    demo t;
    if (!demo_open(&t, 0, 0)) return;
    const oc_text_hparams *hp = &t.m->hp;
    oc_plan *p = new_plan(t.m, 8);
    REQUIRE(p);
    for (int32_t i = 0; i < hp->n_layers * hp->n_head_kv; i++) p->stacks[OC_PLAN_DECODER].kv_budget_tokens[i] = 20;
    oc_pool *pool;
    oc_text_ctx *c = open_ctx(&t, p, 1, &pool);
    float *logits = malloc((size_t)hp->n_vocab * 4);
    REQUIRE(c && logits && !step(&t, c, 0, N_PROMPT, p, logits, NULL, 0));
    int32_t tok = 7, pos;
    oc_text_batch b;
    memset(&b, 0, sizeof b);
    b.n_tokens = 1;
    b.ids = &tok;
    b.pos_t = b.pos_h = b.pos_w = &pos;
    b.logits = logits;
    oc_error e;
    for (int32_t k = 0; k <= ANSWER; k++) {
        pos = N_PROMPT + k;
        oc_status st = oc_text_forward(c, &b, NULL, &e);
        if (k < ANSWER) CHECKF(st == OC_OK, "answer token %d: %s", k, e.message);
        else CHECKF(st == OC_ERR_RANGE && strstr(e.message, "KV cache full"), "token past the room: %d %s", st, e.message);
    }
    free(logits);
    oc_text_ctx_close(c);
    oc_pool_close(pool);
    oc_plan_free(p);
    demo_close(&t);
}

/* The compacted cache on the device: OpenCL keeps exactly the tokens the CPU keeps (every layer's
 * every kv head) and decodes to the same logits within the backends' agreement, with every method
 * on: SparseMM, ZipVL, both on one layer (ZipVL alone there without the composition), a VLA and a
 * GLA group. */
/* composed: layer 5 also gets A-shape heads and "prefill heads" (the patterns in prefill, then ZipVL's
 * set with a budget within it), so the composition runs on OpenCL too. chunk: the prefill chunk; one
 * of the whole context makes every segment after the first reuse the device's M-RoPE tables of the
 * prompt's one chunk (not uploaded again). */
static void opencl_keeps_the_cpu_tokens(int composed, int32_t chunk) {
    demo t;
    if (!demo_open(&t, 12, 50)) return;
    const oc_text_hparams *hp = &t.m->hp;
    oc_plan *p = new_plan(t.m, 8);
    oc_error e;
    REQUIRE(p);
    REQUIRE(oc_plan_add_lazy_group(p, OC_PLAN_DECODER, 1, 2, OC_LAZY_VLA, &e) == OC_OK);
    REQUIRE(oc_plan_add_lazy_group(p, OC_PLAN_DECODER, 3, 4, OC_LAZY_GLA, &e) == OC_OK);
    int32_t *budget = p->stacks[OC_PLAN_DECODER].kv_budget_tokens;
    budget[0] = 14, budget[1] = 30;                        /* layer 0: SparseMM */
    for (int32_t l = 1; l <= 2; l++) p->stacks[OC_PLAN_DECODER].zipvl_tau_ppm[l] = 950000;   /* group 1-2: ZipVL */
    for (int32_t l = 3; l <= 4; l++) budget[l * 2] = 20, budget[l * 2 + 1] = 26;         /* group 3-4: SparseMM */
    /* layer 5: both; without the composition ZipVL alone, so every kv head holds as many rows and a
     * decode step of a layer that keeps its own keys rotates and stores them in one launch */
    p->stacks[OC_PLAN_DECODER].zipvl_tau_ppm[5] = 900000, budget[5 * 2 + 1] = composed ? 22 : 0;
    for (int32_t h = 0; composed && h < hp->n_head; h += 2) {
        oc_head_pattern *hpat = oc_plan_head(p, OC_PLAN_DECODER, 5, h);
        hpat->kind = OC_PATTERN_A_SHAPE;
        hpat->n_sink = 3;
        hpat->n_local = 10 + 4 * h;
        p->stacks[OC_PLAN_DECODER].zipvl_heads_prefill[5] = 1;
    }
    oc_text_limits lim = { CTX, chunk, p, ANSWER };
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    oc_backend_spec cl_spec = { OC_BACKEND_KIND_OPENCL, check_opencl_device(), NULL, oc_isa_best(&cpu), NULL };
    oc_text_ctx *a = NULL, *b = NULL;
    REQUIREF(oc_text_ctx_open(&a, t.m, &lim, NULL, oc_isa_best(&cpu), NULL, &e) == OC_OK, "%s", e.message);
    if (oc_text_ctx_open_backend(&b, t.m, &lim, &cl_spec, NULL, &e) != OC_OK) {
        check_fail_at(__FILE__, __LINE__, "%s", e.message);
        oc_text_ctx_close(a);
        goto done;
    }
    size_t V = (size_t)hp->n_vocab;
    float *la = malloc(V * 4), *lb = malloc(V * 4);
    double *ref = malloc(V * sizeof(double));
    for (int32_t s = 0, n; s < N_PROMPT + N_DECODE; s += n) {
        n = next_n(a, s);
        check_poison_f32(la, V);
        check_poison_f32(lb, V);
        if (step(&t, a, s, n, p, la, NULL, 0) || step(&t, b, s, n, p, lb, NULL, 0)) break;
        for (size_t i = 0; i < V; i++) ref[i] = la[i];
        double err = check_rel_err_f32(lb, ref, V);
        CHECKF(err < 2e-3, "token %d: OpenCL logits %.3g from the CPU's", s, err);
        for (int32_t l = 0; l < hp->n_layers; l++)
            for (int32_t g = 0; g < hp->n_head_kv; g++) {
                const int32_t *pa, *pb;
                int32_t na = oc_text_ctx_kv_held(a, l, g, &pa), nb = oc_text_ctx_kv_held(b, l, g, &pb);
                CHECKF(na == nb && (!pa) == (!pb) && (!pa || !memcmp(pa, pb, (size_t)na * 4)),
                       "token %d layer %d kv head %d: CPU holds %d tokens, OpenCL %d (or other ones)", s, l, g, na, nb);
            }
    }
    size_t held_a, held_b, cap_a, cap_b;
    oc_text_ctx_kv_bytes(a, &held_a, &cap_a);
    oc_text_ctx_kv_bytes(b, &held_b, &cap_b);
    CHECK(held_a == held_b && cap_a == cap_b && held_a < cap_a);
    free(la);
    free(lb);
    free(ref);
    oc_text_ctx_close(a);
    oc_text_ctx_close(b);
done:
    oc_plan_free(p);
    demo_close(&t);
}

static void test_opencl_keeps_the_cpu_tokens(void) {
    const char *why = check_opencl_missing();
    if (why) {
        check_skip("%s", why);
        return;
    }
    opencl_keeps_the_cpu_tokens(0, CHUNK);
    opencl_keeps_the_cpu_tokens(1, CHUNK);
    opencl_keeps_the_cpu_tokens(1, CTX);   /* the prompt in one chunk */
}

/* ---- out of memory at every allocation of context open, with each method ---------------------- */
static void test_context_open_out_of_memory(void) {
    static const char *const plans[] = {
        "decoder layer all kv-budget 40 64\n",
        "decoder layer 1-5 zipvl-tau 0.975\n",
        "decoder lazy-group 1-2 mode vla\ndecoder lazy-group 3-5 mode gla\n",
        "decoder lazy-group 1-3 mode gla\ndecoder layer 1 kv-budget 40 50\ndecoder layer 4 zipvl-tau 0.9\ndecoder layer 4-5 kv-budget 36 full\n",
        ("decoder layer 1-3 heads 0 a-shape(sink=2,local=8)\ndecoder layer 1-3 zipvl-tau 0.9 prefill heads\n"
         "decoder layer 2 kv-budget 40 full\n"),
    };
    oc_error e;
    oc_model *m;
    REQUIRE(oc_model_open(&m, DEMO, DEMO_MMPROJ, NULL, &e) == OC_OK);
    for (size_t i = 0; i < OC_ARRAY_LEN(plans); i++) {
        char path[64];
        snprintf(path, sizeof path, "/tmp/ocellus-kv-oom-%d-%zu.plan", (int)oc_port_now_ns() % 100000, i);
        FILE *f = fopen(path, "w");
        REQUIRE(f);
        fprintf(f, "ocellus-plan 4\nshape decoder layers 6 heads 4 kv-heads 2 head-dim 64\n%s", plans[i]);
        fclose(f);
        int opened = 0;
        for (long k = 1; k < 400 && !opened; k++) {
            check_alloc cnt = { 0 };
            cnt.fail_at = k;
            cnt.persistent = 1;
            oc_allocator a = { check_alloc_fn, &cnt };
            oc_context_params cp;
            oc_context_params_default(&cp);
            cp.max_context_tokens = 128;
            cp.n_threads = 1;
            cp.alloc = &a;
            cp.plan_path = path;
            oc_context *c = NULL;
            oc_status st = oc_context_open(&c, m, &cp, &e);
            if (st == OC_OK) {
                opened = 1;
                oc_request r;
                oc_request_default(&r);
                /* no image given: the question names none (oc_ask refuses "image 1" without one) */
                r.question = "What color is the circle?";
                r.max_new_tokens = 4;
                CHECKF(oc_ask(c, &r, &e) == OC_OK, "plan %zu: %s", i, e.message);
                oc_context_close(c);
            } else {
                CHECKF(st == OC_ERR_NOMEM && c == NULL, "plan %zu, failing allocation %ld: %s", i, k, e.message);
            }
            CHECKF(cnt.n_live == 0, "plan %zu, failing allocation %ld: %ld blocks leaked", i, k, cnt.n_live);
        }
        CHECKF(opened, "plan %zu: the context never opened", i);
        remove(path);
    }
    oc_model_close(m);
}

/* The embedded promise holds with every method on: a text question with eviction and lazy layers
 * (scoring, ZipVL's sparse prefill, compaction, per-kv-head decode) makes no allocator call after
 * the context opened, on the CPU and on OpenCL (whose keys are scored from a host copy reserved at
 * open). */
static void no_allocation_while_answering(int opencl) {
    oc_error e;
    oc_model *m;
    REQUIRE(oc_model_open(&m, DEMO, DEMO_MMPROJ, NULL, &e) == OC_OK);
    char path[64];
    snprintf(path, sizeof path, "/tmp/ocellus-kv-noalloc-%d.plan", (int)(oc_port_now_ns() % 100000));
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fprintf(f, "ocellus-plan 4\nshape decoder layers 6 heads 4 kv-heads 2 head-dim 64\nkv-window 4\n"
               "decoder layer 0 kv-budget 8 12\ndecoder layer 0 heads 1 a-shape(sink=2,local=8)\n"
               "decoder layer 0 zipvl-tau 0.9 prefill heads\n"   /* composed: pattern, then T, budgets within */
               "decoder layer 1-2 zipvl-tau 0.9\ndecoder lazy-group 1-2 mode gla\n"
               "decoder layer 3-5 kv-budget 10 10\ndecoder layer 5 zipvl-tau 0.95\ndecoder lazy-group 3-4 mode vla\n");
    fclose(f);
    check_alloc cnt = { 0 };
    oc_allocator a = { check_alloc_fn, &cnt };
    oc_context_params cp;
    oc_context_params_default(&cp);
    cp.max_context_tokens = 128;
    cp.n_threads = 2;
    cp.alloc = &a;
    cp.plan_path = path;
    if (opencl) {
        cp.backend = OC_BACKEND_OPENCL;
        cp.device = check_opencl_device();
    }
    oc_context *c = NULL;
    REQUIREF(oc_context_open(&c, m, &cp, &e) == OC_OK, "%s", e.message);
    long before = cnt.n_calls;
    oc_request r;
    oc_request_default(&r);
    r.question = "Is there a red square in the picture? Answer in many words, please.";
    r.max_new_tokens = 20;
    r.sampling.temperature = 3.0f;   /* the demo model answers in one word; hot sampling keeps it talking */
    r.sampling.top_k = 0;
    r.sampling.top_p = 1.0f;
    int32_t most = 0;
    for (uint64_t seed = 1; seed <= 8 && most < 3; seed++) {   /* a few answers, one long enough */
        r.sampling.seed = seed;
        CHECKF(oc_ask(c, &r, &e) == OC_OK, "%s", e.message);
        oc_stats st;
        oc_context_get_stats(c, &st);
        most = OC_MAX(most, st.n_generated);
        CHECKF(st.kv_bytes > 0 && st.kv_bytes < st.kv_capacity_bytes / 4, "held %zu of %zu", st.kv_bytes,
               st.kv_capacity_bytes);
    }
    CHECKF(cnt.n_calls == before, "answering made %ld allocator calls", cnt.n_calls - before);
    CHECKF(most >= 3, "at most %d tokens generated: decode over the compacted cache hardly ran", most);
    /* the bound stated up front includes the plan: its scores and book, its GLA layers' missing K */
    size_t with_plan = 0, dense = 0;
    oc_context_params dp = cp;
    dp.plan_path = NULL;
    CHECK(oc_context_memory_bytes(m, &cp, &with_plan, &e) == OC_OK && oc_context_memory_bytes(m, &dp, &dense, &e) == OC_OK);
    oc_stats st;
    oc_context_get_stats(c, &st);
    CHECKF(with_plan == st.context_bytes && with_plan != dense, "memory bytes %zu (dense %zu), context %zu", with_plan,
           dense, st.context_bytes);
    oc_context_close(c);
    oc_model_close(m);
    remove(path);
    CHECK(cnt.n_live == 0);
}

static void test_no_allocation_while_answering(void) {
    no_allocation_while_answering(0);
    const char *why = check_opencl_missing();
    if (why) check_skip("OpenCL: %s", why);
    else no_allocation_while_answering(1);
}

int main(void) {
    /* the compacted cache against a masked dense run (1e-5 / 1e-4) and OpenCL against the CPU
     * (2e-3): two computations equal up to f32 rounding, so the exact FP32 GEMMs (on the BF16 path
     * a tiny difference in an activation can flip its bf16 rounding; see test_text_model.c) */
    check_cpu_features("-bf16_fast");
    CHECK_RUN(test_sparsemm_decode_equals_masked_dense);
    CHECK_RUN(test_zipvl_decode_equals_masked_dense);
    CHECK_RUN(test_composition_equals_explicit_masks);
    CHECK_RUN(test_lazy_layers_follow_their_first_layer);
    CHECK_RUN(test_qcache_semantics);
    CHECK_RUN(test_kv_bytes);
    CHECK_RUN(test_vla_bytes);
    CHECK_RUN(test_answer_room);
    CHECK_RUN(test_opencl_keeps_the_cpu_tokens);
    CHECK_RUN(test_context_open_out_of_memory);
    CHECK_RUN(test_no_allocation_while_answering);
    return check_finish();
}
