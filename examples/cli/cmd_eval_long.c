/* cmd_eval_long.c: `ocellus eval --suite long`: scores a model on the long-prompt suite
 * (examples/tools/scene_long.h: 8-32 images of 224-448 px, prompts of 1K-8K tokens) with greedy
 * decoding: accuracy per question type, mean prompt tokens, the attention FLOPs kept and skipped,
 * vision / prefill / decode time, decode tokens per second, the KV cache held at the end of prefill
 * and of decode, and the context's memory, as text and (--json) for scripts
 * (examples/plans/measure_long.sh merges the JSON of several processes).
 * A progress bar goes to stderr when it is a terminal. Memory: one pixel buffer for the largest
 * item (32 x 448 x 448 x 3 bytes, 18.4 MiB), allocated once. */
#include "tools/tools.h"
#include "ocellus.h"
#include "port/port.h"
#include "tools/scene.h"
#include "tools/scene_long.h"
#include "tools/long_run.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GOT_BYTES OC_LONG_RUN_ANSWER_BYTES

static void usage(FILE *f) {
    fprintf(f,
            "usage: ocellus eval --suite long [-m TEXT.gguf --mmproj VISION.gguf] [options]\n"
            "  -m FILE                text model GGUF (default " OC_LONG_TEXT ")\n"
            "  --mmproj FILE          vision encoder GGUF (default " OC_LONG_MMPROJ ")\n"
            "  --items N              number of items (default 500)\n"
            "  --seed S               item stream (default 1000001, never used in training)\n"
            "  --first I              index of the first item in the stream (default 0): items\n"
            "                         I..I+N-1, so several processes can share one stream\n"
            "  --types A,B,...        question types (detail, which_image, count_all, code, compare,\n"
            "                         list; default all)\n"
            "  --max-images N         images per item 8..N, N in 8..32 (default 32)\n"
            "  --plan FILE            attention plan (default: dense attention)\n"
            "  --prefill-chunk N|all|auto  prompt tokens per prefill call (default auto: 256 on the CPU,\n"
            "                         up to 4096 on OpenCL); all: the whole prompt in one call, so MMInference's vertical-slash / grid / q-boundary\n"
            "                         heads index the prompt once from its last 64 queries, as in the\n"
            "                         paper and in ocellus calibrate (each chunk of N >= 64 rows indexes\n"
            "                         itself from its own last 64 queries)\n"
            "  --json FILE            also write the numbers as JSON\n"
            "  -t N                   threads (default: all CPUs)\n"
            OC_TOOL_BACKEND_HELP("            ")
            "  --verbose              print each item's question, expected and generated answer, and the\n"
            "                         first answer token's logit margin over the runner-up\n");
}

typedef struct long_result {
    int64_t n_items, n_correct, n_items_of[OC_LONG_N_TYPES], n_correct_of[OC_LONG_N_TYPES];
    double prompt_tokens, generated_tokens, vision_ms, prefill_ms, decode_ms, ttft_ms;
    int64_t decode_tokens;           /* one-token forward passes after prefill (decode_ms is their time) */
    uint64_t flops_kept, flops_skipped;
    uint64_t prefill_kept, prefill_skipped, decode_kept, decode_skipped;   /* the decoder's share */
    double kv_bytes;                 /* sum over items of the KV cache held at the end of the request */
    double kv_prefill_bytes;         /* ... and at the end of prefill */
    size_t context_bytes, device_bytes, kv_capacity_bytes;
    uint64_t peak_rss_bytes;
} long_result;

/* "detail,code" -> a bit mask; 0 on an unknown name */
static uint32_t parse_types(const char *s) {
    uint32_t mask = 0;
    char name[32];
    while (*s) {
        size_t n = strcspn(s, ",");
        if (n == 0 || n >= sizeof name) return 0;
        memcpy(name, s, n);
        name[n] = '\0';
        int32_t t = oc_long_type_from_name(name);
        if (t < 0) return 0;
        mask |= 1u << t;
        s += n + (s[n] == ',');
    }
    return mask;
}

static void progress(int64_t done, int64_t total, int64_t correct) {
    int64_t width = 30, filled = total ? done * width / total : width;
    char bar[31];
    for (int64_t k = 0; k < width; k++) bar[k] = k < filled ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\r[%s] %lld/%lld  accuracy %.1f%%", bar, (long long)done, (long long)total,
            done ? 100.0 * (double)correct / (double)done : 0.0);
    fflush(stderr);
}

static double pct(int64_t num, int64_t den) { return den ? 100.0 * (double)num / (double)den : 0.0; }
static double skipped_pct(uint64_t kept, uint64_t skipped) {
    return kept + skipped ? 100.0 * (double)skipped / (double)(kept + skipped) : 0.0;
}

/* Decode speed over every item: one-token forward passes over their time (the first token is
 * prefill's: TTFT). */
static double decode_tok_per_s(const long_result *r) {
    return r->decode_ms > 0.0 ? 1000.0 * (double)r->decode_tokens / r->decode_ms : 0.0;
}

/* How near the first answer token was to a tie: the largest logit at the last prompt position minus
 * the second largest. Answers on different backends or ISAs (whose sums round differently) can
 * differ only where some step's margin is about as small as those rounding differences. */
static void print_first_token_margin(const oc_context *ctx) {
    int32_t n = 0;
    const float *lg = oc_context_prompt_logits(ctx, &n);
    if (!lg || n < 2) {   /* no logits kept: say so rather than print a tie */
        printf(" | margin -\n");
        return;
    }
    float a = -INFINITY, b = -INFINITY;
    for (int32_t t = 0; t < n; t++) {
        if (lg[t] > a) { b = a; a = lg[t]; }
        else if (lg[t] > b) b = lg[t];
    }
    printf(" | margin %.3f\n", (double)a - (double)b);
}

static void print_result(FILE *f, const long_result *r, int json, unsigned long long seed, long long first, int max_images,
                         const char *plan, double wall_s) {
    double n = r->n_items ? (double)r->n_items : 1.0;
    uint64_t flops = r->flops_kept + r->flops_skipped;
    if (json) {
        fprintf(f, "{\"suite\":\"long\",\"seed\":%llu,\"first\":%lld,\"max_images\":%d,\"attention\":\"%s\",\"items\":%lld,"
                "\"correct\":%lld,\"accuracy\":%.6f,\"types\":{", seed, first, max_images, plan ? "planned" : "dense",
                (long long)r->n_items, (long long)r->n_correct, pct(r->n_correct, r->n_items) / 100.0);
        for (int t = 0; t < OC_LONG_N_TYPES; t++)
            fprintf(f, "%s\"%s\":{\"correct\":%lld,\"total\":%lld}", t ? "," : "", oc_long_type_name(t),
                    (long long)r->n_correct_of[t], (long long)r->n_items_of[t]);
        fprintf(f, "},\"mean_prompt_tokens\":%.2f,\"mean_generated_tokens\":%.2f,\"attn_flops_kept\":%llu,"
                "\"attn_flops_skipped\":%llu,\"prefill_attn_flops_kept\":%llu,\"prefill_attn_flops_skipped\":%llu,"
                "\"decode_attn_flops_kept\":%llu,\"decode_attn_flops_skipped\":%llu,\"mean_kv_bytes_prefill\":%.0f,"
                "\"mean_vision_ms\":%.3f,\"mean_prefill_ms\":%.3f,\"mean_decode_ms\":%.3f,"
                "\"mean_ttft_ms\":%.3f,\"mean_kv_bytes_end\":%.0f,\"kv_capacity_bytes\":%zu,\"context_bytes\":%zu,"
                "\"device_bytes\":%zu,\"peak_rss_bytes\":%llu,\"decode_tokens\":%lld,\"decode_ms\":%.3f,"
                "\"decode_tok_per_s\":%.3f,\"wall_s\":%.3f}\n",
                r->prompt_tokens / n, r->generated_tokens / n, (unsigned long long)r->flops_kept,
                (unsigned long long)r->flops_skipped, (unsigned long long)r->prefill_kept,
                (unsigned long long)r->prefill_skipped, (unsigned long long)r->decode_kept,
                (unsigned long long)r->decode_skipped, r->kv_prefill_bytes / n, r->vision_ms / n, r->prefill_ms / n, r->decode_ms / n,
                r->ttft_ms / n, r->kv_bytes / n, r->kv_capacity_bytes, r->context_bytes, r->device_bytes,
                (unsigned long long)r->peak_rss_bytes, (long long)r->decode_tokens, r->decode_ms, decode_tok_per_s(r),
                wall_s);
        return;
    }
    fprintf(f, "ocellus eval --suite long: %lld items (from %lld) of seed %llu, 8-%d images of 224-448 px, %s attention\n",
            (long long)r->n_items, first, seed, max_images, plan ? "planned" : "dense");
    fprintf(f, "%-12s %8s %6s %9s\n", "type", "correct", "total", "accuracy");
    for (int t = 0; t < OC_LONG_N_TYPES; t++) {
        fprintf(f, "%-12s %8lld %6lld ", oc_long_type_name(t), (long long)r->n_correct_of[t], (long long)r->n_items_of[t]);
        if (r->n_items_of[t]) fprintf(f, "%8.1f%%\n", pct(r->n_correct_of[t], r->n_items_of[t]));
        else fprintf(f, "%9s\n", "-");
    }
    fprintf(f, "%-12s %8lld %6lld %8.1f%%\n", "overall", (long long)r->n_correct, (long long)r->n_items,
            pct(r->n_correct, r->n_items));
    fprintf(f, "mean prompt tokens per item: %.1f, generated: %.1f\n", r->prompt_tokens / n, r->generated_tokens / n);
    fprintf(f, "attention FLOPs (vision + prefill + decode): kept %.4g, skipped %.4g (%.1f%%)\n",
            (double)r->flops_kept, (double)r->flops_skipped, flops ? 100.0 * (double)r->flops_skipped / (double)flops : 0.0);
    uint64_t vision_kept = r->flops_kept - r->prefill_kept - r->decode_kept;
    uint64_t vision_skipped = r->flops_skipped - r->prefill_skipped - r->decode_skipped;
    fprintf(f, "  skipped: vision %.1f%% of %.4g, decoder prefill %.1f%% of %.4g, decode %.1f%% of %.4g\n",
            skipped_pct(vision_kept, vision_skipped), (double)(vision_kept + vision_skipped),
            skipped_pct(r->prefill_kept, r->prefill_skipped), (double)(r->prefill_kept + r->prefill_skipped),
            skipped_pct(r->decode_kept, r->decode_skipped), (double)(r->decode_kept + r->decode_skipped));
    fprintf(f, "mean per item: vision %.1f ms, prefill %.1f ms, decode %.1f ms, TTFT %.1f ms\n",
            r->vision_ms / n, r->prefill_ms / n, r->decode_ms / n, r->ttft_ms / n);
    fprintf(f, "decode: %.2f tok/s (%lld one-token passes after prefill, in %.1f ms)\n", decode_tok_per_s(r),
            (long long)r->decode_tokens, r->decode_ms);
    fprintf(f, "KV cache per item: %.2f MiB at the end of prefill, %.2f MiB at the end of decode (buffers %.1f MiB)\n",
            r->kv_prefill_bytes / n / 1048576.0, r->kv_bytes / n / 1048576.0, (double)r->kv_capacity_bytes / 1048576.0);
    fprintf(f, "context memory (allocated up front, KV cache included): %.1f MiB host, %.1f MiB device; peak RSS %.1f MiB\n",
            (double)r->context_bytes / 1048576.0, (double)r->device_bytes / 1048576.0, (double)r->peak_rss_bytes / 1048576.0);
    fprintf(f, "wall time: %.1f s\n", wall_s);
}

static int fail(const char *msg) {
    fprintf(stderr, "ocellus eval: %s\n", msg);
    return 1;
}

int oc_tool_eval_long(int argc, char **argv) {
    const char *text_path = NULL, *mmproj = NULL, *plan = NULL, *device = NULL, *json_path = NULL;
    int verbose = 0, n_threads = 0;
    long long n_items = 500, first = 0, max_images = OC_LONG_MAX_IMAGES, v_ll;
    unsigned long long seed = 1000001;
    long long chunk = -1;   /* --prefill-chunk; 0: all, -1: auto (the backend's) */
    uint32_t types = 0;
    oc_backend_choice backend = OC_BACKEND_CPU;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--verbose")) verbose = 1;
        else if (a[0] != '-') { fprintf(stderr, "ocellus eval: unexpected argument '%s'\n", a); return 2; }
        else if (!v) { fprintf(stderr, "ocellus eval: option %s needs a value\n", a); return 2; }
        else if (!strcmp(a, "--suite") && !strcmp(v, "long")) i++;
        else if (!strcmp(a, "-m")) { text_path = v; i++; }
        else if (!strcmp(a, "--mmproj")) { mmproj = v; i++; }
        else if (!strcmp(a, "--plan")) { plan = v; i++; }
        else if (!strcmp(a, "--json")) { json_path = v; i++; }
        else if (!strcmp(a, "--backend") && oc_tool_parse_backend(v, &backend)) i++;
        else if (!strcmp(a, "--device")) { device = v; i++; }
        else if (!strcmp(a, "--items") && oc_tool_parse_ll(v, 0, 1LL << 40, &n_items)) i++;
        else if (!strcmp(a, "--first") && oc_tool_parse_ll(v, 0, 1LL << 40, &first)) i++;
        else if (!strcmp(a, "--seed") && oc_tool_parse_ll(v, 0, 1LL << 62, &v_ll)) { seed = (unsigned long long)v_ll; i++; }
        else if (!strcmp(a, "--max-images") && oc_tool_parse_ll(v, OC_LONG_MIN_IMAGES, OC_LONG_MAX_IMAGES, &max_images)) i++;
        else if (!strcmp(a, "--types") && (types = parse_types(v)) != 0) i++;
        else if (!strcmp(a, "-t") && oc_tool_parse_ll(v, 1, 1024, &v_ll)) { n_threads = (int)v_ll; i++; }
        else if (!strcmp(a, "--prefill-chunk") && !strcmp(v, "all")) { chunk = 0; i++; }
        else if (!strcmp(a, "--prefill-chunk") && !strcmp(v, "auto")) { chunk = -1; i++; }
        else if (!strcmp(a, "--prefill-chunk") && oc_tool_parse_ll(v, 1, 1 << 20, &v_ll)) { chunk = v_ll; i++; }
        else { fprintf(stderr, "ocellus eval: bad option or value: %s %s\n", a, v); return 2; }
    }
    if (!text_path && !mmproj && !oc_tool_bundled_model(OC_TOOL_MODEL_LONG, &text_path, &mmproj))
        return fail("no long model (looked in " OC_TOOL_MODEL_PLACES "): pass -m TEXT.gguf --mmproj MMPROJ.gguf");
    if (!text_path || !mmproj) return fail("the long suite needs both -m TEXT.gguf and --mmproj MMPROJ.gguf");
    if (!oc_tool_output_ok("eval", "--json", json_path)) return 1;   /* before the run, not after it */
    if (device && backend == OC_BACKEND_CPU) {
        fprintf(stderr, "ocellus eval: --device picks an OpenCL device: give --backend opencl or auto\n");
        return 2;
    }
    oc_context_params cp;
    oc_context_params_default(&cp);
    oc_long_run_context_params(&cp, (int32_t)max_images, (int32_t)chunk);
    cp.n_threads = n_threads;
    cp.plan_path = plan;
    cp.backend = backend;
    cp.device = device;
    size_t rgb_bytes = oc_long_run_rgb_bytes((int32_t)max_images);
    uint8_t *rgb = malloc(rgb_bytes);
    oc_error err;
    oc_model *model = NULL;
    oc_context *ctx = NULL;
    long_result res;
    memset(&res, 0, sizeof res);
    int rc = 1, tty = isatty(2);
    if (!rgb) { fail("out of memory for the pixel buffer"); goto done; }
    if (oc_model_open(&model, text_path, mmproj, NULL, &err)) { fail(err.message); goto done; }
    if (oc_context_open(&ctx, model, &cp, &err)) { fail(err.message); goto done; }
    fprintf(stderr, "model: %s + %s\nbackend: %s\n", text_path, mmproj, oc_context_backend_name(ctx));
    double t0 = (double)oc_port_now_ns() / 1e6;
    for (long long i = first; i < first + n_items; i++) {
        oc_long_run run;
        if (oc_long_run_item(ctx, seed, (uint64_t)i, (int32_t)max_images, types, rgb, &run, &err)) {
            fail(err.message);
            goto done;
        }
        const oc_long_item item = run.item;
        const oc_stats s = run.stats;
        int correct = run.correct;
        char got[GOT_BYTES];
        oc_scene_normalize(run.answer, got, sizeof got);
        res.n_items++;
        res.n_correct += correct;
        res.n_items_of[item.type]++;
        res.n_correct_of[item.type] += correct;
        res.prompt_tokens += s.n_prompt_tokens;
        res.generated_tokens += s.n_generated;
        res.vision_ms += s.vision_ms;
        res.prefill_ms += s.prefill_ms;
        res.decode_ms += s.decode_ms;
        res.decode_tokens += run.decode_passes;
        res.ttft_ms += s.ttft_ms;
        res.flops_kept += s.attn_flops_kept;
        res.flops_skipped += s.attn_flops_skipped;
        res.prefill_kept += s.attn_prefill_flops_kept;
        res.prefill_skipped += s.attn_prefill_flops_skipped;
        res.decode_kept += s.attn_decode_flops_kept;
        res.decode_skipped += s.attn_decode_flops_skipped;
        res.kv_prefill_bytes += (double)s.kv_prefill_bytes;
        res.context_bytes = s.context_bytes;
        res.device_bytes = s.device_bytes;
        res.kv_bytes += (double)s.kv_bytes;
        res.kv_capacity_bytes = s.kv_capacity_bytes;
        res.peak_rss_bytes = s.peak_rss_bytes;
        if (verbose) {
            for (char *c = got; *c; c++)
                if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
            if (tty) fprintf(stderr, "\r%70s\r", "");
            printf("%5lld %-11s %2d x %3d px %s | expected %s | got %s%s", i, oc_long_type_name(item.type),
                   (int)item.n_images, (int)item.side_px, item.question, item.answer, got, correct ? "" : "  (wrong)");
            print_first_token_margin(ctx);
            fflush(stdout);
        }
        if (tty) progress(i + 1 - first, n_items, res.n_correct);
    }
    double wall_s = ((double)oc_port_now_ns() / 1e6 - t0) / 1000.0;
    if (tty) fprintf(stderr, "\r%70s\r", "");
    print_result(stdout, &res, 0, seed, first, (int)max_images, plan, wall_s);
    if (json_path) {
        FILE *f = fopen(json_path, "w");
        if (!f) { fprintf(stderr, "ocellus eval: cannot write %s: %s\n", json_path, strerror(errno)); goto done; }
        print_result(f, &res, 1, seed, first, (int)max_images, plan, wall_s);
        if (fclose(f) != 0) { fprintf(stderr, "ocellus eval: cannot write %s\n", json_path); goto done; }
    }
    rc = 0;
done:
    oc_context_close(ctx);
    oc_model_close(model);
    free(rgb);
    return rc;
}
