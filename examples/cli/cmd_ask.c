/* cmd_ask.c: `ocellus ask`: answer a question about images with a Qwen2-VL / Qwen2.5-VL model,
 * streaming the answer to stdout. Progress goes to stderr when stderr is a terminal; --stats
 * prints the timings (vision, time to first token, prefill and decode speed), the attention
 * FLOPs the plan skipped and the peak memory against the bound printed up front. Images are
 * decoded by oc_ask, one at a time, into the context's image buffer (--max-image-pixels).
 * Every error is one line and exit status 1. */
#include "cli.h"
#include "ocellus.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_IMAGES 64

static void usage(FILE *f) {
    fprintf(f,
            "usage: ocellus ask [-m TEXT.gguf --mmproj VISION.gguf] [-i IMAGE]... [-p] PROMPT [options]\n"
            "  -m FILE              text model GGUF (arch qwen2vl); without -m and --mmproj: the demo\n"
            "                       model (examples/demo/, or PREFIX/share/ocellus/demo/ after make install)\n"
            "  --mmproj FILE        vision encoder GGUF (needed for images)\n"
            "  --no-mmap            read the model files into memory instead of mapping them (a mapped\n"
            "                       file changed or truncated while in use can crash the process)\n"
            "  -i FILE              an image (PPM/PGM; JPEG and PNG when built with libjpeg/libpng);\n"
            "                       repeat for several images, shown in order before the question\n"
            "  -p TEXT              the question (or give it as the last argument)\n"
            "  --system TEXT        system prompt (default: You are a helpful assistant.)\n"
            "  --plan FILE          attention plan (ocellus plan checks one)\n"
            "  -n N                 at most N new tokens (default 256)\n"
            "  --temp T             temperature; 0 = greedy (default 0)\n"
            "  --top-k K            (default 40)    --top-p P   (default 0.95)    --seed S (default 0)\n"
            "  -t N                 threads (default: all CPUs)\n"
            "  -c N                 context size in tokens (default 4096)\n"
            "  --max-image-tokens N tokens per image at most (default 1280); larger images are scaled down\n"
            "  --max-image-pixels N the image buffer, in pixels (default 16777216 = 48 MiB of RGB); a\n"
            "                       larger JPEG or PNG is decoded at reduced scale, other images refused\n"
            OC_TOOL_BACKEND_HELP("          ")
            "  --stats              print the memory bound (model + context) first, then timings and the\n"
            "                       peak memory at the end, to stderr\n"
            "  --dump-logits FILE   write the last prompt position's logits (raw little-endian f32)\n");
}

typedef struct progress_state { int tty; int shown; int printed; } progress_state;

static void on_progress(void *user, const char *stage, int32_t done, int32_t total) {
    progress_state *ps = user;
    if (!ps->tty) return;
    fprintf(stderr, "\r%s %d/%d   ", stage, done, total);
    ps->shown = 1;
}

static int on_text(void *user, const char *text, size_t n_bytes) {
    progress_state *ps = user;
    if (ps->shown) {
        fprintf(stderr, "\r%30s\r", "");
        ps->shown = 0;
    }
    fwrite(text, 1, n_bytes, stdout);
    fflush(stdout);
    ps->printed = 1;
    return 0;
}

static int parse_int(const char *s, long lo, long hi, long *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static int parse_float(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0') return 0;
    *out = v;
    return 1;
}

static int fail(const char *msg) {
    fprintf(stderr, "ocellus ask: %s\n", msg);
    return 1;
}

int cmd_ask(int argc, char **argv) {
    const char *text_path = NULL, *mmproj = NULL, *prompt = NULL, *system = NULL, *dump = NULL;
    const char *images[MAX_IMAGES];
    int n_images = 0, stats = 0;
    oc_context_params cp;
    oc_context_params_default(&cp);
    oc_model_params mp;
    oc_model_params_default(&mp);
    cp.max_image_pixels = OC_TOOL_MAX_IMAGE_PIXELS;
    oc_request req;
    oc_request_default(&req);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        double x;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--stats")) stats = 1;
        else if (!strcmp(a, "--no-mmap")) mp.load = OC_LOAD_READ;
        else if (a[0] == '-' && a[1] != '\0' && !v) { fprintf(stderr, "ocellus ask: option %s needs a value\n", a); return 2; }
        else if (!strcmp(a, "-m")) { text_path = v; i++; }
        else if (!strcmp(a, "--mmproj")) { mmproj = v; i++; }
        else if (!strcmp(a, "-p")) { prompt = v; i++; }
        else if (!strcmp(a, "--system")) { system = v; i++; }
        else if (!strcmp(a, "--plan")) { cp.plan_path = v; i++; }
        else if (!strcmp(a, "--dump-logits")) { dump = v; i++; }
        else if (!strcmp(a, "--backend") && oc_tool_parse_backend(v, &cp.backend)) i++;
        else if (!strcmp(a, "--device")) { cp.device = v; i++; }
        else if (!strcmp(a, "-i")) {
            if (n_images == MAX_IMAGES) { fprintf(stderr, "ocellus ask: at most %d images\n", MAX_IMAGES); return 2; }
            images[n_images++] = v;
            i++;
        } else if (!strcmp(a, "-n") && parse_int(v, 0, 1 << 24, &n)) { req.max_new_tokens = (int32_t)n; i++; }
        else if (!strcmp(a, "-t") && parse_int(v, 1, 1024, &n)) { cp.n_threads = (int)n; i++; }
        else if (!strcmp(a, "-c") && parse_int(v, 16, 1 << 24, &n)) { cp.max_context_tokens = (int32_t)n; i++; }
        else if (!strcmp(a, "--max-image-tokens") && parse_int(v, 4, 1 << 20, &n)) { cp.max_image_tokens = (int32_t)n; i++; }
        else if (!strcmp(a, "--max-image-pixels") && parse_int(v, 784, 0x7fffffffL, &n)) { cp.max_image_pixels = n; i++; }
        else if (!strcmp(a, "--top-k") && parse_int(v, 0, 1 << 24, &n)) { req.sampling.top_k = (int32_t)n; i++; }
        else if (!strcmp(a, "--seed") && parse_int(v, 0, 0x7fffffffL, &n)) { req.sampling.seed = (uint64_t)n; i++; }
        else if (!strcmp(a, "--temp") && parse_float(v, &x)) { req.sampling.temperature = (float)x; i++; }
        else if (!strcmp(a, "--top-p") && parse_float(v, &x)) { req.sampling.top_p = (float)x; i++; }
        else if (a[0] == '-' && a[1] != '\0') { fprintf(stderr, "ocellus ask: bad option or value: %s %s\n", a, v); return 2; }
        else if (!prompt) prompt = a;
        else { fprintf(stderr, "ocellus ask: unexpected argument '%s' (quote the question)\n", a); return 2; }
    }
    int demo = 0;
    if (!text_path && !mmproj) {
        if (!oc_tool_demo_model(&text_path, &mmproj))
            return fail("no model: pass -m TEXT.gguf [--mmproj VISION.gguf] (no demo model in "
                        OC_TOOL_MODEL_PLACES ")");
        demo = 1;
    }
    if (!text_path) {
        fprintf(stderr, "ocellus ask: --mmproj needs the text model too: give -m TEXT.gguf\n");
        return 2;
    }
    if (!prompt) return fail("no question given (use -p TEXT or a last argument)");
    if (n_images > 0 && !mmproj) return fail("images need the vision encoder: add --mmproj FILE");
    if (cp.device && cp.backend == OC_BACKEND_CPU) {
        fprintf(stderr, "ocellus ask: --device picks an OpenCL device: give --backend opencl or auto\n");
        return 2;
    }
    if (!oc_tool_output_ok("ask", "--dump-logits", dump)) return 1;   /* before the answer, not after it */
    for (int k = 0; k < n_images; k++)   /* a missing image is said before the model loads */
        if (!oc_tool_input_ok("ask", "-i", images[k])) return 1;
    if (cp.plan_path && !oc_tool_input_ok("ask", "--plan", cp.plan_path)) return 1;
    if (demo) {   /* it still answers outside its world, with a confident guess: say so once the arguments are known good */
        char why[512];
        int inside = oc_tool_demo_question_check(prompt, n_images, why, sizeof why);
        for (int k = 0; inside && k < n_images; k++) inside = oc_tool_demo_image_check(images[k], why, sizeof why);
        if (!inside)
            fprintf(stderr, "ocellus ask: warning: %s; outside its synthetic world the demo model guesses "
                            "(give a real model with -m and --mmproj)\n", why);
    }
    cp.max_images = n_images > 0 ? n_images : 1;
    /* room after the prompt in a plan's budgeted KV cache (ocellus.h): the answer asked for */
    cp.max_answer_tokens = req.max_new_tokens > 0 ? req.max_new_tokens : 1;

    progress_state ps = { isatty(2), 0, 0 };
    cp.progress = on_progress;
    cp.progress_user = &ps;
    oc_error err;
    oc_model *model = NULL;
    oc_context *ctx = NULL;
    int rc = 1;
    mp.text_path = text_path;
    mp.mmproj_path = mmproj;
    if (oc_model_open_params(&model, &mp, &err)) { fail(err.message); goto done; }
    {   /* the context clamps -c to the model's trained length (oc_context_params): say so */
        oc_model_info mi;
        oc_model_get_info(model, &mi);
        if (mi.n_ctx_train >= 16 && cp.max_context_tokens > mi.n_ctx_train)
            fprintf(stderr, "ocellus ask: -c %d is above the model's context length: using %d\n",
                    (int)cp.max_context_tokens, (int)mi.n_ctx_train);
    }
    if (oc_context_open(&ctx, model, &cp, &err)) { fail(err.message); goto done; }
    fprintf(stderr, "backend: %s\n", oc_context_backend_name(ctx));
    if (stats) {
        oc_model_info mi;
        oc_stats s0;
        oc_model_get_info(model, &mi);
        oc_context_get_stats(ctx, &s0);
        fprintf(stderr, "memory bound: model %.1f MiB + context %.1f MiB = %.1f MiB (host)\n",
                (double)mi.memory_bytes / 1048576.0, (double)s0.context_bytes / 1048576.0,
                (double)(mi.memory_bytes + s0.context_bytes) / 1048576.0);
    }
    req.system = system;
    req.question = prompt;
    req.image_paths = images;
    req.n_images = n_images;
    req.on_text = on_text;
    req.user = &ps;
    oc_status st = oc_ask(ctx, &req, &err);
    if (ps.shown) fprintf(stderr, "\r%30s\r", "");
    if (ps.printed) fputc('\n', stdout);
    fflush(stdout);
    if (st) { fail(err.message); goto done; }
    if (dump) {
        int32_t nv;
        const float *lg = oc_context_prompt_logits(ctx, &nv);
        FILE *f = fopen(dump, "wb");
        if (!lg || !f || fwrite(lg, sizeof(float), (size_t)nv, f) != (size_t)nv) {
            if (f) fclose(f);
            fprintf(stderr, "ocellus ask: cannot write %s\n", dump);
            goto done;
        }
        if (fclose(f)) { fprintf(stderr, "ocellus ask: cannot write %s\n", dump); goto done; }
    }
    if (stats) {
        oc_stats s;
        oc_context_get_stats(ctx, &s);
        double skipped = s.attn_flops_kept + s.attn_flops_skipped
                             ? 100.0 * (double)s.attn_flops_skipped / (double)(s.attn_flops_kept + s.attn_flops_skipped)
                             : 0.0;
        fprintf(stderr,
                "images %d (%d tokens), prompt %d tokens, generated %d\n"
                "vision %.1f ms, prefill %.1f ms (%.1f tok/s), TTFT %.1f ms, decode %.1f tok/s\n"
                "attention FLOPs skipped by the plan: %.1f%%\n"
                "memory: context %.1f MiB allocated up front, device %.1f MiB, peak RSS %.1f MiB\n"
                "KV cache: %.2f MiB held of %.2f MiB (%.1f%%)\n",
                s.n_images, s.n_image_tokens, s.n_prompt_tokens, s.n_generated, s.vision_ms, s.prefill_ms,
                s.prefill_ms > 0 ? 1000.0 * s.n_prompt_tokens / s.prefill_ms : 0.0, s.ttft_ms,
                s.n_generated > 1 && s.decode_ms > 0 ? 1000.0 * (s.n_generated - 1) / s.decode_ms : 0.0,
                skipped, (double)s.context_bytes / 1048576.0, (double)s.device_bytes / 1048576.0,
                (double)s.peak_rss_bytes / 1048576.0, (double)s.kv_bytes / 1048576.0,
                (double)s.kv_capacity_bytes / 1048576.0,
                s.kv_capacity_bytes ? 100.0 * (double)s.kv_bytes / (double)s.kv_capacity_bytes : 0.0);
    }
    rc = 0;
done:
    oc_context_close(ctx);
    oc_model_close(model);
    return rc;
}
