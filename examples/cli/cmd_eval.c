/* cmd_eval.c: `ocellus eval`: scores a model on fresh synthetic scenes (examples/tools/scene.h): accuracy
 * overall and per question type, mean prompt tokens per item, the attention FLOPs a plan skipped
 * and the mean time to first token. A progress bar goes to stderr when it is a terminal;
 * --verbose prints every item. The scoring loop is oc_scene_eval (examples/tools/scene_eval.c). */
#include "tools/tools.h"
#include "ocellus.h"
#include "tools/scene_eval.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


static void usage(FILE *f) {
    fprintf(f,
            "usage: ocellus eval [-m TEXT.gguf --mmproj VISION.gguf] [options]\n"
            "  -m FILE                text model GGUF (default " OC_DEMO_TEXT ")\n"
            "  --mmproj FILE          vision encoder GGUF (default " OC_DEMO_MMPROJ ")\n"
            "  --no-mmap              read the model files into memory instead of mapping them (a\n"
            "                         mapped file changed or truncated while in use can crash the process)\n"
            "  --items N              number of items (default 500)\n"
            "  --seed S               item stream (default 1000001, not used to train the demo model)\n"
            "  --images-per-item A-B  images per item, uniform in A..B within 1..8 (default 1-8)\n"
            "  --side PX              image side, a multiple of 28 in 56..1792 (default 112)\n"
            "  --plan FILE            attention plan (default: dense attention)\n"
            "  --suite S              demo (these items, default) or long (8-32 images of 224-448 px:\n"
            "                         ocellus eval --suite long --help)\n"
            "  -t N                   threads (default: all CPUs)\n"
            OC_TOOL_BACKEND_HELP("            ")
            "  --verbose              print each item's question, expected and generated answer\n");
}

typedef struct eval_ui {
    int tty, verbose;
    int64_t n_items, n_correct;
} eval_ui;

static void on_item(void *user, const oc_scene_eval_report *r) {
    eval_ui *ui = user;
    ui->n_correct += r->correct;
    if (ui->verbose) {
        char got[64];
        oc_scene_normalize(r->got, got, sizeof got);
        for (char *c = got; *c; c++)   /* a bad model may emit control characters */
            if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
        if (ui->tty) fprintf(stderr, "\r%60s\r", "");
        printf("%5lld %-11s %s | expected %s | got %s%s\n", (long long)r->i, oc_scene_type_name(r->item->type),
               r->item->question, r->item->answer, got, r->correct ? "" : "  (wrong)");
        fflush(stdout);
    }
    if (ui->tty) {
        int64_t done = r->i + 1, width = 30, filled = ui->n_items ? done * width / ui->n_items : width;
        char bar[31];
        for (int64_t k = 0; k < width; k++) bar[k] = k < filled ? '#' : '.';
        bar[width] = '\0';
        fprintf(stderr, "\r[%s] %lld/%lld  accuracy %.1f%%", bar, (long long)done, (long long)ui->n_items,
                100.0 * (double)ui->n_correct / (double)done);
        fflush(stderr);
    }
}

static double pct(int64_t num, int64_t den) { return den ? 100.0 * (double)num / (double)den : 0.0; }

static int fail(const char *msg) {
    fprintf(stderr, "ocellus eval: %s\n", msg);
    return 1;
}

int oc_tool_eval(int argc, char **argv) {
    const char *text_path = NULL, *mmproj = NULL, *plan = NULL, *device = NULL;
    int verbose = 0, n_threads = 0;
    oc_backend_choice backend = OC_BACKEND_CPU;
    oc_scene_eval_params ep;
    oc_scene_eval_params_default(&ep);
    oc_model_params mp;
    oc_model_params_default(&mp);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--suite") && !strcmp(argv[i + 1], "long")) return oc_tool_eval_long(argc, argv);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n;
        unsigned long long seed;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--verbose")) verbose = 1;
        else if (!strcmp(a, "--no-mmap")) mp.load = OC_LOAD_READ;
        else if (a[0] != '-') { fprintf(stderr, "ocellus eval: unexpected argument '%s'\n", a); return 2; }
        else if (!v) { fprintf(stderr, "ocellus eval: option %s needs a value\n", a); return 2; }
        else if (!strcmp(a, "--suite") && !strcmp(v, "demo")) i++;
        else if (!strcmp(a, "-m")) { text_path = v; i++; }
        else if (!strcmp(a, "--mmproj")) { mmproj = v; i++; }
        else if (!strcmp(a, "--plan")) { plan = v; i++; }
        else if (!strcmp(a, "--backend") && oc_tool_parse_backend(v, &backend)) i++;
        else if (!strcmp(a, "--device")) { device = v; i++; }
        else if (!strcmp(a, "--items") && oc_tool_parse_ll(v, 0, 1LL << 40, &n)) { ep.n_items = n; i++; }
        else if (!strcmp(a, "--seed") && oc_tool_parse_ull(v, ~0ULL, &seed)) ep.seed = seed, i++;
        else if (!strcmp(a, "--side") && oc_tool_parse_ll(v, 56, OC_SCENE_MAX_SIDE_PX, &n) && n % OC_SCENE_CELL_PX == 0) { ep.side_px = (int32_t)n; i++; }
        else if (!strcmp(a, "-t") && oc_tool_parse_ll(v, 1, 1024, &n)) { n_threads = (int)n; i++; }
        else if (!strcmp(a, "--images-per-item") && oc_tool_parse_range(v, OC_SCENE_MAX_IMAGES, &ep.min_images, &ep.max_images)) i++;
        else { fprintf(stderr, "ocellus eval: bad option or value: %s %s\n", a, v); return 2; }
    }
    if (!text_path && !mmproj && !oc_tool_demo_model(&text_path, &mmproj))
        return fail("no demo model (looked in " OC_TOOL_MODEL_PLACES "): pass -m TEXT.gguf --mmproj MMPROJ.gguf");
    if (!text_path || !mmproj) return fail("give both -m TEXT.gguf and --mmproj MMPROJ.gguf (the items have images)");
    if (device && backend == OC_BACKEND_CPU) {
        fprintf(stderr, "ocellus eval: --device picks an OpenCL device: give --backend opencl or auto\n");
        return 2;
    }

    oc_context_params cp;
    oc_context_params_default(&cp);
    oc_scene_eval_context_params(&cp, ep.max_images, ep.side_px);
    cp.n_threads = n_threads;
    cp.plan_path = plan;
    cp.backend = backend;
    cp.device = device;
    eval_ui ui = { isatty(2), verbose, ep.n_items, 0 };
    ep.on_item = on_item;
    ep.user = &ui;
    oc_error err;
    oc_model *model = NULL;
    oc_context *ctx = NULL;
    oc_scene_eval_result res;
    int rc = 1;
    mp.text_path = text_path;
    mp.mmproj_path = mmproj;
    if (oc_model_open_params(&model, &mp, &err)) { fail(err.message); goto done; }
    if (oc_context_open(&ctx, model, &cp, &err)) { fail(err.message); goto done; }
    fprintf(stderr, "model: %s + %s\nbackend: %s\n", text_path, mmproj, oc_context_backend_name(ctx));
    oc_status st = oc_scene_eval(ctx, &ep, &res, &err);
    if (ui.tty) fprintf(stderr, "\r%70s\r", "");
    if (st) { fail(err.message); goto done; }

    printf("ocellus eval: %lld items of seed %llu, %d-%d images of %dx%d px, %s attention\n",
           (long long)res.n_items, (unsigned long long)ep.seed, (int)ep.min_images, (int)ep.max_images,
           (int)ep.side_px, (int)ep.side_px, plan ? "planned" : "dense");
    printf("%-12s %8s %6s %9s\n", "type", "correct", "total", "accuracy");
    for (int t = 0; t < OC_SCENE_N_TYPES; t++) {
        printf("%-12s %8lld %6lld ", oc_scene_type_name(t), (long long)res.n_correct_of[t], (long long)res.n_items_of[t]);
        if (res.n_items_of[t]) printf("%8.1f%%\n", pct(res.n_correct_of[t], res.n_items_of[t]));
        else printf("%9s\n", "-");
    }
    printf("%-12s %8lld %6lld %8.1f%%\n", "overall", (long long)res.n_correct, (long long)res.n_items,
           pct(res.n_correct, res.n_items));
    uint64_t flops = res.attn_flops_kept + res.attn_flops_skipped;
    double n = res.n_items ? (double)res.n_items : 1.0;
    printf("mean prompt tokens per item: %.1f\n", res.prompt_tokens_sum / n);
    printf("attention FLOPs skipped: %.1f%% (%.3g of %.3g)\n", flops ? 100.0 * (double)res.attn_flops_skipped / (double)flops : 0.0,
           (double)res.attn_flops_skipped, (double)flops);
    printf("mean TTFT: %.1f ms\n", res.ttft_ms_sum / n);
    printf("mean KV cache held after an item: %.1f KiB of %.1f KiB (%.1f%%)\n", res.kv_bytes_sum / n / 1024.0,
           (double)res.kv_capacity_bytes / 1024.0,
           res.kv_capacity_bytes ? 100.0 * res.kv_bytes_sum / n / (double)res.kv_capacity_bytes : 0.0);
    rc = 0;
done:
    oc_context_close(ctx);
    oc_model_close(model);
    return rc;
}
