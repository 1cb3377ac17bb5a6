/* bench_vlm.c: `ocellus bench vlm`: the whole question -> answer path through the public API
 * (oc_model_open, oc_context_open, oc_ask, oc_context_get_stats) on a Qwen2-VL-2B-shaped model:
 *  --synth DIR [--type f16|q8_0|q4_0]  writes such a model with random weights (synth_qwen2vl.c);
 *  -m TEXT --mmproj VISION         asks a fixed question about 1 and 4 synthetic 448x448 images
 *                                  (256 tokens each) and a text-only ~512-token prompt (prefill
 *                                  comparable to llama-bench pp512); greedy, 32 new tokens.
 * Per case: vision ms and GFLOP/s, prefill tok/s and GFLOP/s, TTFT, decode tok/s, the CPU share the
 * process got in each phase (from the progress callback; below ~95% other processes took the
 * cores), peak RSS (process, so far); and the FP32 FMA peak
 * (examples/tools/roofline.h; on OpenCL the device's, opencl/kernels/peak.cl) measured in the same run, before and
 * after the cases. --backend / --device choose where the model runs (examples/tools/tools.h). FLOPs are counted from the
 * shapes (2 per multiply-add; attention 4 d per query-key pair, halved when causal, as anchors.md).
 * Several -m/--mmproj pairs (F16 and Q8_0 files, say) run one after another with the same cases, and
 * --images 1,4,1@896 mixes image sizes, so that one invocation gives a whole comparison table.
 * --compare-llama DIR runs llama.cpp on the same files after each case (bench_llama.c). */
#include "bench.h"
#include "tools/tools.h"
#include "core/isa.h"
#include "ocellus.h"
#include "core/pool.h"
#include "port.h"
#include "tools/roofline.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_CASES 16
#define MAX_PAIRS 4   /* -m / --mmproj pairs of one invocation */
static int g_image_px = 448;   /* --image-px: the side of the square test images */

static void usage(FILE *f) {
    fprintf(f,
            "usage: ocellus bench vlm --synth DIR [--type f16|q8_0|q4_0] [--tokenizer GGUF] [--seed N] [--layers N]\n"
            "       ocellus bench vlm -m TEXT.gguf --mmproj VISION.gguf [-m TEXT2 --mmproj VISION2 ...] [-t N]\n"
            "                        [--images 1,4] [--image-px 448] [-n N] [--pp N] [--compare-llama DIR]\n"
            "  --synth DIR      write DIR/qwen2vl-2b-TYPE.gguf and DIR/mmproj-qwen2vl-2b-TYPE.gguf: random\n"
            "                   weights, Qwen2-VL-2B shapes (kept when present; ~4.5 GB f16, ~2.5 GB q8_0,\n"
            "                   ~1.3 GB q4_0: every matrix Q4_0, as llama-quantize --pure)\n"
            "  --layers N       --synth: N text and N vision layers instead of 28 and 32 (small files\n"
            "                   for tests; '-Nl' in the names)\n"
            "  --tokenizer GGUF copy its tokenizer.* keys (default tests/data/models/qwen2vl/text.gguf)\n"
            "  -t N             threads (default 2)\n"
            "  -m, --mmproj     up to 4 pairs (the i-th --mmproj goes with the i-th -m), measured one after\n"
            "                   another with the same cases\n"
            "  --images LIST    image counts, one case each (default 1,4); 0 or '' for none; N@PX: N images\n"
            "                   of PX x PX (e.g. 1,4,1@896)\n"
            "  --image-px N     side of the square test images, a multiple of 28 (default 448: 256 tokens\n"
            "                   each; 896: 1024 tokens, 4096 patches through the encoder)\n"
            "  -n N             new tokens per case, greedy (default 32)\n"
            "  --compare-llama DIR  after each case run llama.cpp's llama-mtmd-cli (image cases) or llama-bench\n"
            "                   (text case) from DIR on the same files; at the end both columns and the ratios\n"
            "                   (bench_llama.c)\n"
            "  --pp N           prompt tokens of the text-only case (default 512; 0 skips it)\n"
            "  --no-mmap        read the model files into memory instead of mapping them\n"
            "  --profile FILE   OpenCL: every launch timed on the device; per interval between waits (a\n"
            "                   decode token) launches, kernel busy time, device span, host wall and waits,\n"
            "                   and per kernel, written to FILE and printed at the end (slower: read the\n"
            "                   speed from a run without it)\n"
            "  --kv-context LIST  instead: KV bytes and decode tok/s at these context lengths (e.g.\n"
            "                   4096,16384) with a dense cache, SparseMM 10%% budgets, ZipVL and Q-Cache\n"
            "                   lazy groups over half the layers (bench_kv.c; the cache is filled\n"
            "                   synthetically, no prefill); -n decode steps (default 32), --rounds N (5)\n"
            OC_TOOL_BACKEND_HELP("      "));
}

/* A deterministic px x px RGB test card: gradients, a checkerboard and noise, different per index. */
static uint8_t *make_image(int index, int px_side) {
    uint8_t *p = malloc((size_t)px_side * px_side * 3);
    if (!p) return NULL;
    uint64_t s = 0x9e3779b97f4a7c15ULL * (uint64_t)(index + 1);
    for (int y = 0; y < px_side; y++)
        for (int x = 0; x < px_side; x++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            uint8_t *px = p + ((size_t)y * px_side + (size_t)x) * 3;
            int check = ((x / (16 + 8 * index)) + (y / 24)) & 1;
            px[0] = (uint8_t)((x * 255 / px_side + 40 * index) & 255);
            px[1] = (uint8_t)(y * 255 / px_side);
            px[2] = (uint8_t)((check ? 200 : 40) + (int)(s & 31));
        }
    return p;
}

/* Wall and process CPU time at the phase boundaries of one oc_ask: start, vision done, prefill
 * done, end; the progress callback marks the middle two. */
typedef struct phase_clock {
    uint64_t ns[4];
    clock_t cpu[4];
    bench_span span[4];   /* the same boundaries with the machine's busy time (other load) */
} phase_clock;

static void on_progress(void *user, const char *stage, int32_t done, int32_t total) {
    phase_clock *pc = user;
    if (done != total) return;
    int i = !strcmp(stage, "vision") ? 1 : !strcmp(stage, "prefill") ? 2 : 0;
    if (!i) return;
    pc->ns[i] = oc_port_now_ns();
    pc->cpu[i] = clock();
    bench_span_now(&pc->span[i], oc_port_self_cpu_s());   /* once per phase: a read of /proc/stat */
    if (i == 1) { pc->ns[2] = pc->ns[1]; pc->cpu[2] = pc->cpu[1]; pc->span[2] = pc->span[1]; }
}

typedef struct vlm_case {
    char name[32];
    oc_stats st;
    double wall_ms, vision_gflop, prefill_gflop;
    double share[3];   /* CPU time / (wall x threads) of vision, prefill, decode: 1 = both cores all along */
    double other[BENCH_PH_N];   /* other processes' load in each phase (bench_other_share) */
    uint64_t peak_rss;
} vlm_case;

/* Multiply-add FLOPs x2 of the vision encoder for one image of n_tok merged tokens (Qwen2-VL:
 * fc1 is 4x hidden wide, 2x2 merge, 3x2x14x14 patches), attention counted as 4 d per pair. */
static double vision_gflop(const oc_model_info *mi, double n_tok) {
    double h = mi->vision_hidden, P = 4 * n_tok, L = mi->vision_layers, ff = 4 * h;
    double per_layer = 2 * P * (4 * h * h + 2 * h * ff) + 4 * P * P * h;
    double patch = 2 * P * (3 * 2 * 14 * 14) * h, merger = 2 * n_tok * (16 * h * h + 4 * h * mi->n_embd);
    return (L * per_layer + patch + merger) / 1e9;
}

/* Prefill of n tokens starting at position 0: the layers' matrices (embedding lookup and the
 * last position's lm head left out, as anchors.md counts) and causal attention. */
static double prefill_gflop(const oc_model_info *mi, double n) {
    double d = mi->n_embd, kv = (double)mi->n_head_kv * mi->head_dim, ff = mi->n_ff;
    double params = mi->n_layers * (d * (2 * d + 2 * kv) + 3 * d * ff);
    return (2 * n * params + mi->n_layers * 2.0 * n * n * d) / 1e9;
}

static int run_case(oc_context *ctx, phase_clock *pc, const oc_request *req, const oc_model_info *mi,
                    const char *name, int n_threads, vlm_case *out) {
    oc_error err;
    pc->cpu[0] = pc->cpu[1] = pc->cpu[2] = clock();
    pc->ns[0] = pc->ns[1] = pc->ns[2] = oc_port_now_ns();
    bench_span_now(&pc->span[0], oc_port_self_cpu_s());
    pc->span[1] = pc->span[2] = pc->span[0];
    if (oc_ask(ctx, req, &err) != OC_OK) {
        fprintf(stderr, "ocellus bench vlm: %s: %s\n", name, err.message);
        return 0;
    }
    pc->ns[3] = oc_port_now_ns();
    pc->cpu[3] = clock();
    bench_span_now(&pc->span[3], oc_port_self_cpu_s());
    out->other[BENCH_PH_VISION] = bench_other_share(&pc->span[0], &pc->span[1]);
    out->other[BENCH_PH_PREFILL] = bench_other_share(&pc->span[1], &pc->span[2]);
    out->other[BENCH_PH_TTFT] = bench_other_share(&pc->span[0], &pc->span[2]);
    out->other[BENCH_PH_DECODE] = bench_other_share(&pc->span[2], &pc->span[3]);
    out->wall_ms = (double)(pc->ns[3] - pc->ns[0]) * 1e-6;
    for (int i = 0; i < 3; i++) {
        double wall_s = (double)(pc->ns[i + 1] - pc->ns[i]) * 1e-9;
        out->share[i] = wall_s > 0 ? (double)(pc->cpu[i + 1] - pc->cpu[i]) / CLOCKS_PER_SEC / (wall_s * n_threads) : 0;
    }
    snprintf(out->name, sizeof out->name, "%s", name);
    oc_context_get_stats(ctx, &out->st);
    out->vision_gflop = out->st.n_images ? out->st.n_images * vision_gflop(mi, (double)out->st.n_image_tokens / out->st.n_images) : 0;
    out->prefill_gflop = prefill_gflop(mi, out->st.n_prompt_tokens);
    out->peak_rss = oc_port_peak_rss_bytes();
    fprintf(stderr, "  %s: %.1f s\n", name, out->wall_ms / 1000);
    return 1;
}

static int count_tokens(oc_tokenizer *tok, const char *s) {
    size_t n = 0;
    oc_tokenizer_encode(tok, s, strlen(s), 0, NULL, 0, &n, NULL);
    return (int)n;
}

/* A question of about target tokens: words from a fixed list, then single letters to get close. */
static char *long_question(oc_tokenizer *tok, int target) {
    static const char *words[] = { "Please", " describe", " the", " picture", " in", " great", " detail,", " with",
                                   " every", " object", " and", " its", " colour,", " position", " or", " size." };
    size_t cap = (size_t)target * 16 + 64, len = 0;
    char *q = malloc(cap);
    if (!q) return NULL;
    q[0] = 0;
    for (size_t i = 0; count_tokens(tok, q) < target && len + 32 < cap; i++) {
        const char *w = words[i % (sizeof words / sizeof words[0])];
        size_t keep = len;
        memcpy(q + len, w, strlen(w) + 1);
        len += strlen(w);
        if (count_tokens(tok, q) > target) {   /* overshot: back off and pad with " a" */
            len = keep;
            q[len] = 0;
            while (count_tokens(tok, q) < target && len + 3 < cap) {
                memcpy(q + len, " a", 3);
                len += 2;
            }
            break;
        }
    }
    return q;
}

/* "cpu v/p/d": the CPU share of vision, prefill and decode. On a shared machine a share below ~95%
 * means other processes took the cores; the second table divides each phase's time by its share
 * (an estimate of the run with both cores: exact only for compute-bound phases). */
static void print_table(const vlm_case *c, int n, double peak, int on_device) {
    printf("\n| case | images | prompt tok | vision ms | vision GFLOP/s | prefill ms | prefill tok/s | prefill GFLOP/s "
           "| TTFT ms | decode tok/s | generated | cpu v/p/d | peak RSS MiB |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        const oc_stats *s = &c[i].st;
        double vg = s->vision_ms > 0 ? c[i].vision_gflop / (s->vision_ms * 1e-3) : 0;
        double pg = s->prefill_ms > 0 ? c[i].prefill_gflop / (s->prefill_ms * 1e-3) : 0;
        char vis[48] = "-", vshare[16] = "-";
        if (s->n_images) {
            snprintf(vis, sizeof vis, "%.0f (%.0f%%)", vg, 100 * vg / peak);
            snprintf(vshare, sizeof vshare, "%.0f", 100 * c[i].share[0]);
        }
        printf("| %s | %d (%d tok) | %d | %.0f | %s | %.0f | %.1f | %.0f (%.0f%%) | %.0f | %.2f | %d | %s/%.0f/%.0f%% | %.0f |\n",
               c[i].name, s->n_images, s->n_image_tokens, s->n_prompt_tokens, s->vision_ms, vis, s->prefill_ms,
               s->prefill_ms > 0 ? 1000.0 * s->n_prompt_tokens / s->prefill_ms : 0.0, pg, 100 * pg / peak,
               s->ttft_ms, s->n_generated > 1 && s->decode_ms > 0 ? 1000.0 * (s->n_generated - 1) / s->decode_ms : 0.0,
               s->n_generated, vshare, 100 * c[i].share[1], 100 * c[i].share[2], (double)c[i].peak_rss / 1048576.0);
    }
    if (on_device) return;   /* the host's CPU share says nothing about a device's time */
    printf("\nDivided by the CPU share (estimate for both cores to ourselves):\n\n"
           "| case | vision ms | vision GFLOP/s | prefill tok/s | prefill GFLOP/s | TTFT ms | decode tok/s |\n"
           "|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        const oc_stats *s = &c[i].st;
        double v_ms = s->vision_ms * c[i].share[0], p_ms = s->prefill_ms * c[i].share[1];
        double d_ms = s->decode_ms * c[i].share[2];
        printf("| %s | %.0f | %.0f | %.1f | %.0f | %.0f | %.2f |\n", c[i].name, v_ms,
               v_ms > 0 ? c[i].vision_gflop / (v_ms * 1e-3) : 0.0, p_ms > 0 ? 1000.0 * s->n_prompt_tokens / p_ms : 0.0,
               p_ms > 0 ? c[i].prefill_gflop / (p_ms * 1e-3) : 0.0, v_ms + p_ms,
               s->n_generated > 1 && d_ms > 0 ? 1000.0 * (s->n_generated - 1) / d_ms : 0.0);
    }
}

#if OC_HAVE_OPENCL
#include "opencl/cl_ops.h"
#endif

/* The FP32 FMA peak of the device the context runs on (device NULL: the CPU with n_threads). */
static double fma_peak(int n_threads, const char *device) {
#if OC_HAVE_OPENCL
    if (device) {
        oc_cl_device *dev = NULL;
        double g = 0;
        if (oc_cl_open(&dev, device, NULL, NULL, NULL) == OC_OK) oc_cl_fma_peak(dev, &g, NULL);
        oc_cl_close(dev);
        return g;
    }
#endif
    oc_pool *pool = NULL;
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    if (oc_pool_open(&pool, n_threads, NULL, NULL) != OC_OK) return 0;
    double g = oc_roofline_fma_gflops(pool, oc_isa_best(&cpu));
    oc_pool_close(pool);
    return g;
}

/* The read-only bandwidth of the CPU with n_threads (roofline.h: a reduction over 512 MiB that
 * writes nothing, as a GEMV reads its weights). */
static double read_floor_gbps(int n_threads) {
    oc_pool *pool = NULL;
    if (oc_pool_open(&pool, n_threads, NULL, NULL) != OC_OK) return 0;
    double g = oc_roofline_read_gbps(pool, NULL);
    oc_pool_close(pool);
    return g;
}

/* Bytes of weights one decode step reads: every tensor of the text model but the token embedding,
 * of which a step reads one row, unless the lm head is tied to it (no output.weight). */
static double step_weight_bytes(const oc_gguf *g) {
    double total = 0;
    int tied = !oc_gguf_find_tensor(g, "output.weight");
    for (int64_t i = 0; i < oc_gguf_n_tensors(g); i++) {
        const oc_gguf_tensor *t = oc_gguf_tensor_at(g, i);
        if (!tied && t->name.len == 17 && !memcmp(t->name.ptr, "token_embd.weight", 17)) continue;
        total += (double)t->size_bytes;
    }
    return total;
}

/* --images LIST: counts, each optionally @PX (the side of that case's images; default --image-px),
 * e.g. "1,4,1@896". 0 entries are skipped. Returns the number of cases, -1 on a bad list. */
static int parse_images(const char *list, int *counts, int *sides, int max_cases) {
    int n = 0;
    for (const char *p = list; *p;) {
        char *end;
        long v = strtol(p, &end, 10), side = g_image_px;
        if (end == p || v < 0 || v > 64) return -1;
        if (*end == '@') {
            const char *q = end + 1;
            side = strtol(q, &end, 10);
            if (end == q || side < 28 || side > 1792 || side % 28) return -1;
        }
        if (*end && *end != ',') return -1;
        if (v > 0) {
            if (n == max_cases) return -1;
            counts[n] = (int)v;
            sides[n++] = (int)side;
        }
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* llama.cpp's rows of every model pair of one invocation, printed together at the end. */
typedef struct llama_table {
    const char *dir;
    bench_vlm_row rows[MAX_PAIRS * MAX_CASES];
    bench_llama_run runs[MAX_PAIRS * MAX_CASES];
    int n;
} llama_table;

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Runs llama.cpp on the case just measured (bench_llama.c), so both programs see the same load. */
static void compare_case(llama_table *t, const vlm_case *c, int side, const char *text,
                         const char *mmproj, int n_threads, int n_new, int pp, const uint8_t *const *pixels) {
    if (t->n == (int)(sizeof t->rows / sizeof t->rows[0])) return;
    const oc_stats *s = &c->st;
    bench_vlm_row *r = &t->rows[t->n];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", c->name);
    snprintf(r->files, sizeof r->files, "%s", base_name(text));
    r->text = text;
    r->mmproj = mmproj;
    r->n_images = s->n_images;
    r->image_px = side;
    r->image_tokens = s->n_image_tokens;
    r->vision_ms = s->vision_ms;
    r->ttft_ms = s->ttft_ms;
    r->prefill_tok_s = s->prefill_ms > 0 ? 1000.0 * s->n_prompt_tokens / s->prefill_ms : 0;
    r->decode_tok_s = s->n_generated > 1 && s->decode_ms > 0 ? 1000.0 * (s->n_generated - 1) / s->decode_ms : 0;
    r->prompt_tokens = s->n_prompt_tokens;
    r->n_decoded = s->n_generated > 1 ? s->n_generated - 1 : 0;
    memcpy(r->other, c->other, sizeof r->other);
    bench_llama_case(t->dir, n_threads, n_new, pp, r, pixels, &t->runs[t->n]);
    t->n++;
}

/* The read-only bandwidth of the OpenCL device (opencl/kernels/peak.cl: 1 GiB, far above any cache). */
static double device_read_gbps(const char *device) {
    double g = 0;
#if OC_HAVE_OPENCL
    oc_cl_device *dev = NULL;
    if (oc_cl_open(&dev, device, NULL, NULL, NULL) == OC_OK) oc_cl_read_peak(dev, (size_t)1 << 30, &g, NULL);
    oc_cl_close(dev);
#endif
    return g;
}

static int run_bench(const char *text_path, const char *mmproj, int n_threads, oc_backend_choice backend,
                     const char *device, const char *images_list,
                     int n_new, int pp_tokens, llama_table *llama, oc_load_mode load, const char *profile) {
    int counts[MAX_CASES], sides[MAX_CASES], max_images = 0, max_image_tokens = 0, max_case_tokens = 0;
    int n_counts = parse_images(images_list, counts, sides, MAX_CASES - 2);
    if (n_counts < 0) {
        fprintf(stderr, "ocellus bench vlm: bad --images list '%s' (counts 0-64, each optionally @PX, PX a multiple "
                "of 28 from 28 to 1792)\n", images_list);
        return 2;
    }
    for (int k = 0; k < n_counts; k++) {
        int tokens = (sides[k] / 28) * (sides[k] / 28);   /* 448x448 stays 448x448: 256 tokens */
        max_images = OC_MAX(max_images, counts[k]);
        max_image_tokens = OC_MAX(max_image_tokens, tokens);
        max_case_tokens = OC_MAX(max_case_tokens, counts[k] * tokens);
    }
    if (llama && bench_llama_check_paths(llama->dir, text_path, mmproj)) return 2;
    if (max_images && !mmproj) {
        fprintf(stderr, "ocellus bench vlm: image cases need --mmproj\n");
        return 2;
    }
    char cpu_name[128];
    bench_cpu_name(cpu_name, sizeof cpu_name);
    printf("ocellus bench vlm: %s + %s, %d threads, CPU %s, %d logical CPUs\n", text_path, mmproj ? mmproj : "(no mmproj)",
           n_threads, cpu_name, oc_port_n_cpus());

    oc_error err;
    oc_model *model = NULL;
    oc_context *ctx = NULL;
    oc_gguf *g = NULL;
    oc_tokenizer *tok = NULL;
    uint8_t *pixels[64] = { 0 };
    oc_image_rgb views[64];
    vlm_case cases[MAX_CASES];
    int n_cases = 0, rc = 1, n_pix = 0;
    char *question = NULL;
    uint64_t t0 = oc_port_now_ns();
    oc_model_params mp;
    oc_model_params_default(&mp);
    mp.text_path = text_path;
    mp.mmproj_path = max_images ? mmproj : NULL;
    mp.load = load;
    if (oc_model_open_params(&model, &mp, &err)) goto fail;
    double open_ms = (double)(oc_port_now_ns() - t0) * 1e-6;
    oc_model_info mi;
    oc_model_get_info(model, &mi);
    oc_context_params cp;
    oc_context_params_default(&cp);
    cp.n_threads = n_threads;
    cp.max_images = max_images;
    if (max_images) cp.max_image_tokens = max_image_tokens;   /* --images '': the default limits stand */
    /* as llama-mtmd-cli -c 4096, or room for the images and the question where they need more */
    cp.max_context_tokens = OC_MAX(4096, max_case_tokens + 1024);
    cp.backend = backend;
    cp.device = device;
    phase_clock pc;
    memset(&pc, 0, sizeof pc);
    cp.progress = on_progress;
    cp.progress_user = &pc;
    t0 = oc_port_now_ns();
    if (profile) {   /* the context's device alone (cl_device.h), which appends to the emptied file */
        FILE *pf = fopen(profile, "w");
        if (pf) fclose(pf);
        oc_port_setenv("OCELLUS_CL_PROFILE", profile);
    }
    oc_status ost = oc_context_open(&ctx, model, &cp, &err);
    if (profile) oc_port_setenv("OCELLUS_CL_PROFILE", "");
    if (ost) goto fail;
    size_t ctx_bytes = 0;
    oc_context_memory_bytes(model, &cp, &ctx_bytes, NULL);
    printf("model: %d layers, hidden %d, vocab %d; vision %d blocks, hidden %d (%s); opened in %.0f ms, context "
           "%.0f MiB in %.0f ms\n", mi.n_layers, mi.n_embd, mi.n_vocab, mi.vision_layers, mi.vision_hidden,
           mi.has_vision ? mi.projector : "none", open_ms, (double)ctx_bytes / 1048576.0,
           (double)(oc_port_now_ns() - t0) * 1e-6);
    const char *where = oc_context_backend_name(ctx);
    const char *peak_dev = !strncmp(where, "OpenCL", 6) ? (device ? device : "") : NULL;
    double peak0 = fma_peak(n_threads, peak_dev), read0 = 0;
    printf("backend: %s\nFP32 FMA peak before: %.1f GFLOP/s%s\n", where, peak0,
           peak_dev ? " (the device's; the cpu share columns are the host's)" : "");
    if (peak_dev) {
        read0 = device_read_gbps(peak_dev);
        printf("device read-only bandwidth before: %.1f GB/s\n", read0);
    } else {   /* the roof of the BF16 path (matmul.h), where the CPU has one */
        oc_pool *bp = NULL;
        double bf16 = oc_pool_open(&bp, n_threads, NULL, NULL) == OC_OK ? oc_roofline_bf16_gflops(bp) : 0;
        oc_pool_close(bp);
        if (bf16 > 0) printf("BF16 dot-product peak: %.1f GFLOP/s (%.2f x the FMA peak)\n", bf16, bf16 / peak0);
        read0 = read_floor_gbps(n_threads);
        printf("read-only bandwidth before: %.1f GB/s\n", read0);
    }
    fflush(stdout);

    /* Warm-up (text weights paged in) that also measures the chat template's tokens around a question. */
    if (oc_gguf_open(&g, text_path, NULL, &err) || oc_tokenizer_open_gguf(&tok, g, NULL, &err)) goto fail;
    oc_request req;
    oc_request_default(&req);
    req.question = "Hello.";
    req.max_new_tokens = 2;
    if (!run_case(ctx, &pc, &req, &mi, "warm-up", n_threads, &cases[0])) goto done;
    int overhead = cases[0].st.n_prompt_tokens - count_tokens(tok, req.question);

    req.max_new_tokens = n_new;
    /* no "Picture N: " labels, whatever the template says: llama-mtmd-cli's images are markers in the
     * prompt's text, which its template does not label (--compare-llama compares the two prompts) */
    req.image_labels = 0;
    for (int k = 0; k < n_counts; k++) {
        char name[32];
        int side = sides[k];
        for (int i = 0; i < n_pix; i++) { free(pixels[i]); pixels[i] = NULL; }
        for (n_pix = 0; n_pix < counts[k]; n_pix++) {
            if (!(pixels[n_pix] = make_image(n_pix, side))) { fprintf(stderr, "ocellus bench vlm: out of memory\n"); goto done; }
            views[n_pix] = (oc_image_rgb){ pixels[n_pix], side, side, (size_t)side * 3 };
        }
        snprintf(name, sizeof name, "%d image%s %dx%d", counts[k], counts[k] > 1 ? "s" : "", side, side);
        req.question = BENCH_VLM_QUESTION;
        req.images = views;
        req.n_images = counts[k];
        if (!run_case(ctx, &pc, &req, &mi, name, n_threads, &cases[n_cases++])) goto done;
        if (llama) compare_case(llama, &cases[n_cases - 1], side, text_path, mmproj, n_threads, n_new,
                                pp_tokens, (const uint8_t *const *)pixels);
    }
    if (pp_tokens > 0) {
        if (pp_tokens <= overhead) {
            fprintf(stderr, "ocellus bench vlm: --pp %d: the chat template alone takes %d tokens\n", pp_tokens, overhead);
            goto done;
        }
        if (!(question = long_question(tok, pp_tokens - overhead))) {
            fprintf(stderr, "ocellus bench vlm: out of memory\n");
            goto done;
        }
        char name[32];
        snprintf(name, sizeof name, "text pp%d", pp_tokens);
        req.question = question;
        req.images = NULL;
        req.n_images = 0;
        if (!run_case(ctx, &pc, &req, &mi, name, n_threads, &cases[n_cases++])) goto done;
        if (llama) compare_case(llama, &cases[n_cases - 1], 0, text_path, mmproj, n_threads, n_new, pp_tokens, NULL);
    }
    double peak1 = fma_peak(n_threads, peak_dev);
    double read1 = peak_dev ? device_read_gbps(peak_dev) : read_floor_gbps(n_threads);
    printf("FP32 FMA peak after: %.1f GFLOP/s (%% of peak below: of the larger, %.1f)\n", peak1,
           peak0 > peak1 ? peak0 : peak1);
    print_table(cases, n_cases, peak0 > peak1 ? peak0 : peak1, peak_dev != NULL);
    {   /* decode is bound by reading the weights and the KV cache: GB/s of them against the floor */
        double floor_gbps = read0 > read1 ? read0 : read1, step_gb = step_weight_bytes(g) / 1e9;
        printf("\nDecode reads %.2f GB of weights per token, plus the KV cache (f16 keys and values held at the "
               "end, read once per token); %sread-only bandwidth after: %.1f GB/s (floor below: the larger, %.1f GB/s "
               "= %.1f tok/s without the cache)\n\n| case | decode tok/s | weights + KV GB/s | of the floor | %s |\n"
               "|---|---|---|---|---|\n", step_gb, peak_dev ? "the device's " : "", read1, floor_gbps,
               floor_gbps / step_gb, peak_dev ? "KV MB" : "cpu d");
        for (int i = 0; i < n_cases; i++) {
            const oc_stats *s = &cases[i].st;
            if (s->n_generated < 2 || s->decode_ms <= 0 || floor_gbps <= 0) continue;
            double tok_s = 1000.0 * (s->n_generated - 1) / s->decode_ms, gb = step_gb + (double)s->kv_bytes / 1e9;
            printf("| %s | %.2f | %.1f | %.2f | %.0f%s |\n", cases[i].name, tok_s, tok_s * gb, tok_s * gb / floor_gbps,
                   peak_dev ? (double)s->kv_bytes / 1e6 : 100 * cases[i].share[2], peak_dev ? "" : "%");
        }
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "ocellus bench vlm: %s\n", err.message);
done:
    free(question);
    for (int i = 0; i < n_pix; i++) free(pixels[i]);
    oc_tokenizer_close(tok);
    oc_gguf_close(g);
    oc_context_close(ctx);   /* the device writes the profile as it closes */
    oc_model_close(model);
    if (profile && rc == 0) {
        char line[512];
        FILE *f = fopen(profile, "r");
        if (!f) fprintf(stderr, "ocellus bench vlm: --profile %s: nothing was written (not an OpenCL run?)\n", profile);
        printf("\n");
        while (f && fgets(line, sizeof line, f)) fputs(line, stdout);
        if (f) fclose(f);
    }
    return rc;
}

int bench_vlm(int argc, char **argv) {
    const char *synth = NULL, *type = "f16", *tok_path = "tests/data/models/qwen2vl/text.gguf";
    const char *text[MAX_PAIRS] = { 0 }, *mmproj[MAX_PAIRS] = { 0 }, *images = "1,4";
    int n_text = 0, n_mmproj = 0;
    int n_threads = 2, n_new = 32, pp = 512, rounds = 5, synth_layers = 0;
    const char *kv_context = NULL;
    unsigned long long seed = 1;
    const char *device = NULL, *llama_dir = NULL, *profile = NULL;
    oc_backend_choice backend = OC_BACKEND_CPU;
    oc_load_mode load = OC_LOAD_MAP;
    /* The three modes take different options; one given to a mode that does not read it is refused
     * rather than ignored (e.g. --type outside --synth). */
    const char *synth_only = NULL, *run_only = NULL, *kv_only = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--type") || !strcmp(a, "--tokenizer") || !strcmp(a, "--seed") || !strcmp(a, "--layers"))
            synth_only = a;
        if (!strcmp(a, "--images") || !strcmp(a, "--image-px") || !strcmp(a, "--pp") || !strcmp(a, "--compare-llama") ||
            !strcmp(a, "--no-mmap") || !strcmp(a, "--backend") || !strcmp(a, "--device") || !strcmp(a, "--mmproj") ||
            !strcmp(a, "--profile"))
            run_only = a;
        if (!strcmp(a, "--rounds")) kv_only = a;
        static const char *const known[] = { "--synth", "--type", "--tokenizer", "--seed", "-m", "--mmproj", "--images", "-t",
                                             "-n", "--no-mmap", "--image-px", "--pp", "--kv-context", "--rounds",
                                             "--device", "--compare-llama", "--backend", "--layers", "--profile" };
        int is_known = 0;
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) is_known |= !strcmp(a, known[k]);
        if (!is_known) {
            fprintf(stderr, "ocellus bench vlm: unknown option '%s' (ocellus bench vlm --help lists them)\n", a);
            return 2;
        }
        if (!v && strcmp(a, "--no-mmap")) { fprintf(stderr, "ocellus bench vlm: %s needs a value\n", a); return 2; }
        i++;
        if (!strcmp(a, "--synth")) synth = v;
        else if (!strcmp(a, "--type")) type = v;
        else if (!strcmp(a, "--tokenizer")) tok_path = v;
        else if (!strcmp(a, "--seed")) {
            int s32;
            if (!oc_tool_int_arg("bench vlm", a, v, 0, 0x7fffffffL, &s32)) return 2;
            seed = (uint64_t)s32;
        }
        else if (!strcmp(a, "-m") || !strcmp(a, "--mmproj")) {   /* the i-th --mmproj goes with the i-th -m */
            int is_text = a[1] == 'm';
            int *n = is_text ? &n_text : &n_mmproj;
            if (*n == MAX_PAIRS) { fprintf(stderr, "ocellus bench vlm: at most %d %s\n", MAX_PAIRS, a); return 2; }
            (is_text ? text : mmproj)[(*n)++] = v;
        }
        else if (!strcmp(a, "--images")) images = v;
        else if (!strcmp(a, "--layers")) { if (!oc_tool_int_arg("bench vlm", a, v, 1, 64, &synth_layers)) return 2; }
        else if (!strcmp(a, "-t")) { if (!oc_tool_int_arg("bench vlm", a, v, 1, 1024, &n_threads)) return 2; }
        else if (!strcmp(a, "-n")) { if (!oc_tool_int_arg("bench vlm", a, v, 0, 16777216, &n_new)) return 2; }
        else if (!strcmp(a, "--no-mmap")) { i--; load = OC_LOAD_READ; }
        else if (!strcmp(a, "--image-px")) {
            if (!oc_tool_int_arg("bench vlm", a, v, 28, 1792, &g_image_px)) return 2;
            if (g_image_px % 28) { fprintf(stderr, "ocellus bench vlm: --image-px %d is not a multiple of 28\n", g_image_px); return 2; }
        }
        else if (!strcmp(a, "--pp")) { if (!oc_tool_int_arg("bench vlm", a, v, 0, 16777216, &pp)) return 2; }
        else if (!strcmp(a, "--kv-context")) kv_context = v;
        else if (!strcmp(a, "--rounds")) { if (!oc_tool_int_arg("bench vlm", a, v, 1, 15, &rounds)) return 2; }
        else if (!strcmp(a, "--device")) device = v;
        else if (!strcmp(a, "--compare-llama")) llama_dir = v;
        else if (!strcmp(a, "--profile")) profile = v;
        else if (!strcmp(a, "--backend") && oc_tool_parse_backend(v, &backend)) continue;
        else { fprintf(stderr, "ocellus bench vlm: --backend wants cpu, opencl or auto, not '%s'\n", v); return 2; }
    }
    const char *stray = synth ? (n_text ? "-m" : run_only ? run_only : kv_context ? "--kv-context" : kv_only)
                              : synth_only ? synth_only : kv_context ? run_only : kv_only;
    if (!stray && kv_context && n_text > 1) stray = "a second -m";
    if (stray) {
        fprintf(stderr, "ocellus bench vlm: %s does nothing %s\n", stray,
                synth ? "with --synth" : kv_context ? "with --kv-context" : synth_only ? "without --synth" : "without --kv-context");
        return 2;
    }
    if (synth) return synth_qwen2vl(synth, type, tok_path, seed, synth_layers);
    if (!n_text || n_threads < 1 || n_new < 0 || pp < 0) {
        fprintf(stderr, "ocellus bench vlm: give -m TEXT.gguf [--mmproj VISION.gguf] or --synth DIR (--help lists the options)\n");
        return 2;
    }
    if (device && backend == OC_BACKEND_CPU) {
        fprintf(stderr, "ocellus bench vlm: --device picks an OpenCL device: give --backend opencl or auto\n");
        return 2;
    }
    if (profile && backend == OC_BACKEND_CPU) {
        fprintf(stderr, "ocellus bench vlm: --profile times OpenCL launches: give --backend opencl\n");
        return 2;
    }
    if (profile) {   /* checked now, and emptied: the device appends to it */
        FILE *f = profile[0] ? fopen(profile, "w") : NULL;
        if (!f) { fprintf(stderr, "ocellus bench vlm: --profile %s: cannot write there\n", profile); return 2; }
        fclose(f);
    }
    if (kv_context && (!kv_context[0] || strspn(kv_context, "0123456789,") != strlen(kv_context))) {
        fprintf(stderr, "ocellus bench vlm: --kv-context wants context lengths such as 4096,16384, not '%s'\n", kv_context);
        return 2;
    }
    if (llama_dir) {   /* the programs it runs, checked now rather than after the first case */
        char path[4200];
        snprintf(path, sizeof path, "%s/llama-bench", llama_dir);
        if (!oc_port_is_regular_file(path)) {
            fprintf(stderr, "ocellus bench vlm: --compare-llama %s: no llama-bench there (a llama.cpp build/bin folder)\n",
                    llama_dir);
            return 2;
        }
    }
    if (n_mmproj && n_mmproj != n_text) {
        fprintf(stderr, "ocellus bench vlm: %d -m but %d --mmproj: give one --mmproj per -m, or none\n", n_text, n_mmproj);
        return 2;
    }
    if (kv_context) return bench_vlm_kv(text[0], n_threads, kv_context, n_new, rounds);
    llama_table *llama = NULL;
    if (llama_dir) {
        if (!(llama = calloc(1, sizeof *llama))) { fprintf(stderr, "ocellus bench vlm: out of memory\n"); return 1; }
        llama->dir = llama_dir;
    }
    int rc = 0;
    for (int i = 0; i < n_text && !rc; i++) {
        if (i) printf("\n");
        int first = llama ? llama->n : 0;
        rc = run_bench(text[i], mmproj[i], n_threads, backend, device, images, n_new, pp, llama, load, profile);
        if (llama && llama->n > first)   /* this pair's rows now; all pairs in one table at the end */
            bench_llama_print(llama_dir, n_threads, pp, llama->rows + first, llama->runs + first, llama->n - first);
    }
    if (llama && n_text > 1 && llama->n) {
        printf("\nAll pairs:\n");
        bench_llama_print(llama_dir, n_threads, pp, llama->rows, llama->runs, llama->n);
    }
    free(llama);
    return rc;
}
