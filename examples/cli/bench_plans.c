/* bench_plans.c: `ocellus bench plans`: dense attention and each given plan on the same items of
 * the long-prompt suite (long_run.h, the items `ocellus eval --suite long` runs), in one process on
 * one backend, so that what a plan's skipped FLOPs buy in time is a ratio measured under the same
 * load. Per phase (vision, prefill, decode): time, attention FLOPs kept, the speedup over dense
 * and the ideal one, and where the time went (attention kernels, MMInference's index
 * estimation, SparseMM / ZipVL scoring and token selection, the rest of the layer).
 *
 * Pairing: one context per configuration, all open at once; every repetition runs every item
 * through every configuration before the next item (the order of the configurations alternates
 * from one repetition to the next), so a burst of load from another process hits them alike.
 * Each number is the median over repetitions of that repetition's mean per item; each ratio is the
 * median over repetitions of that repetition's ratio (paired), not a ratio of medians.
 *
 * Ideal speedups: attention, dense attention FLOPs / kept FLOPs (the phase's, decoder only); the
 * phase, Amdahl's bound from dense's own time split: dense time / (dense time - dense attention
 * time x the skipped share of the FLOPs). The decode rows count a SparseMM budget's skipped keys
 * the same way. Memory: one context per configuration, one pixel buffer, the per-repetition sums
 * ([configurations][reps]), all allocated before the first item. */
#include "bench.h"
#include "tools/tools.h"
#include "tools/long_run.h"
#include "ocellus.h"
#include "port.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PLANS 15
#define MAX_REPS 1000
/* Decode steps per item after its answer: the suite's answers are 1-2 tokens, whose time is
 * noise; 32 steps cost well under a tenth of an item's prefill. */
#define DEFAULT_STEPS 32

/* The long model's shipped plans (examples/plans/README.md), then the papers' calibrations alone
 * (examples/plans/paper-only/: they lose answers, kept to compare speed), the default --plan list. */
static const char *const shipped[] = {
    "examples/plans/long-calibrated-blindsight-linear.plan",
    "examples/plans/long-budget-blindsight-zipvl.plan",
    "examples/plans/paper-only/long-calibrated-mminference.plan",
    "examples/plans/paper-only/long-calibrated-all.plan",
};

/* One configuration's sums over the items of one repetition. */
typedef struct rep_sums {
    double vision_ms, prefill_ms, decode_ms, ttft_ms;
    double attn_ms, estimate_ms, score_ms, select_ms;   /* prefill */
    double decode_attn_ms;
    double decode_cpu_s;   /* --decode-steps: the process's CPU time over the steps (shared machines) */
    double decode_passes, prompt_tokens, kv_prefill_bytes;
    double prefill_kept, prefill_skipped, decode_kept, decode_skipped;   /* decoder attention FLOPs */
    int64_t correct, items;
} rep_sums;

typedef struct config {
    const char *plan;            /* NULL: dense */
    char name[64];
    oc_context *ctx;
    rep_sums *reps;              /* [n_reps] */
    int answers_differ;          /* an item's answer changed between repetitions */
} config;

static void usage(FILE *f) {
    fprintf(f,
            "usage: ocellus bench plans [options]\n"
            "Dense attention and each plan on the same long-suite items, in one run: per phase (vision,\n"
            "prefill, decode) the time, the attention FLOPs kept, the speedup over dense and the ideal\n"
            "one, and where the time went (medians over --reps, ratios paired per repetition).\n"
            "  -m TEXT.gguf           default examples/long/ocellus-long.gguf\n"
            "  --mmproj VISION.gguf   default examples/long/ocellus-long-mmproj.gguf\n"
            "  --plan FILE            a plan to compare with dense (repeat for several, up to %d); default:\n"
            "                         the long model's shipped plans and two of examples/plans/paper-only/\n"
            "  --items N              items per repetition (default 4)\n"
            "  --reps N               repetitions (default 3)\n"
            "  --seed S               item stream (default 1000001, ocellus eval --suite long's)\n"
            "  --first I              index of the first item (default 0)\n"
            "  --max-images N         images per item 8..N, N in 8..32 (default 32)\n"
            "  --prefill-chunk N|all|auto  prompt tokens per prefill call (default auto: 256 on the\n"
            "                         CPU, up to 4096 on OpenCL, where 256 is launch-bound)\n"
            "  --profile              OpenCL: each timed step waits for the device, so the breakdown\n"
            "                         is the steps' own time (slower); the CPU ignores it\n"
            "  --decode-steps N       decode columns from N greedy steps per item after its answer, the same\n"
            "                         for every plan (0..%d, default %d; 0: the answers' own 1-2 tokens)\n"
            "  --json FILE            also write the numbers as JSON\n"
            "  --context LIST         instead: the language model alone at these prompt lengths (e.g.\n"
            "                         16384,32768,65536; a synthetic prompt of 256-token images, no vision\n"
            "                         encoder): prefill, decode and KV cache per plan (-m TEXT.gguf; CPU)\n"
            "  -n N                   --context: decode steps per run (default 32)\n"
            "  -t N                   threads (default: all CPUs)\n"
            OC_TOOL_BACKEND_HELP("            "),
            MAX_PLANS, OC_LONG_RUN_MAX_STEPS, DEFAULT_STEPS);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (v is sorted in place); 0 for n == 0. */
static double median(double *v, int n) {
    if (n <= 0) return 0.0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double safe_div(double a, double b) { return b > 0.0 ? a / b : 0.0; }

/* What one configuration's row of the report holds: medians over the repetitions. */
typedef struct row {
    double vision_ms, prefill_ms, decode_ms, ttft_ms, tok_s;   /* per item; tok/s over every pass */
    double attn_ms, kernel_ms, estimate_ms, score_ms, select_ms, rest_ms;   /* prefill, per item */
    double decode_attn_ms_tok;          /* decode attention per one-token pass */
    double decode_cpu_ms_tok, decode_cpu_speedup;   /* --decode-steps: process CPU time per step; dense's over the plan's */
    double prefill_kept_share, decode_kept_share;   /* kept / (kept + skipped) */
    double prefill_speedup, prefill_ideal_phase, attn_speedup, attn_ideal;   /* vs dense, paired */
    double decode_speedup, decode_ideal_phase, vision_ratio;
    double accuracy, prompt_tokens, kv_prefill_mib;
} row;

typedef double (*rep_fn)(const rep_sums *r, const rep_sums *dense);

static double f_vision(const rep_sums *r, const rep_sums *d) { (void)d; return r->vision_ms / (double)r->items; }
static double f_prefill(const rep_sums *r, const rep_sums *d) { (void)d; return r->prefill_ms / (double)r->items; }
static double f_decode(const rep_sums *r, const rep_sums *d) { (void)d; return r->decode_ms / (double)r->items; }
static double f_ttft(const rep_sums *r, const rep_sums *d) { (void)d; return r->ttft_ms / (double)r->items; }
static double f_tok_s(const rep_sums *r, const rep_sums *d) { (void)d; return safe_div(1000.0 * r->decode_passes, r->decode_ms); }
static double f_attn(const rep_sums *r, const rep_sums *d) { (void)d; return r->attn_ms / (double)r->items; }
static double f_kernel(const rep_sums *r, const rep_sums *d) { (void)d; return (r->attn_ms - r->estimate_ms) / (double)r->items; }
static double f_estimate(const rep_sums *r, const rep_sums *d) { (void)d; return r->estimate_ms / (double)r->items; }
static double f_score(const rep_sums *r, const rep_sums *d) { (void)d; return r->score_ms / (double)r->items; }
static double f_select(const rep_sums *r, const rep_sums *d) { (void)d; return r->select_ms / (double)r->items; }
static double f_rest(const rep_sums *r, const rep_sums *d) {
    (void)d;
    return (r->prefill_ms - r->attn_ms - r->score_ms - r->select_ms) / (double)r->items;
}
static double f_dec_attn(const rep_sums *r, const rep_sums *d) { (void)d; return safe_div(r->decode_attn_ms, r->decode_passes); }
static double f_dec_cpu(const rep_sums *r, const rep_sums *d) { (void)d; return safe_div(1000.0 * r->decode_cpu_s, r->decode_passes); }
static double f_dec_cpu_x(const rep_sums *r, const rep_sums *d) { return safe_div(f_dec_cpu(d, d), f_dec_cpu(r, d)); }
/* The plan's kept attention FLOPs as a share of dense's: prefill on the same prompts; decode per
 * one-token pass (the answers' lengths may differ), capped at 1. A SparseMM budget's evicted keys
 * are never in a decode call, so only this comparison shows them. */
static double cap1(double x) { return x > 1.0 ? 1.0 : x; }
static double f_pkept(const rep_sums *r, const rep_sums *d) {
    return cap1(safe_div(r->prefill_kept, d->prefill_kept + d->prefill_skipped));
}
static double f_dkept(const rep_sums *r, const rep_sums *d) {
    return cap1(safe_div(safe_div(r->decode_kept, r->decode_passes), safe_div(d->decode_kept + d->decode_skipped, d->decode_passes)));
}
static double f_prefill_x(const rep_sums *r, const rep_sums *d) { return safe_div(d->prefill_ms, r->prefill_ms); }
static double f_attn_x(const rep_sums *r, const rep_sums *d) { return safe_div(d->attn_ms, r->attn_ms); }
static double f_vision_x(const rep_sums *r, const rep_sums *d) { return safe_div(d->vision_ms, r->vision_ms); }
static double f_decode_x(const rep_sums *r, const rep_sums *d) { return safe_div(f_tok_s(r, d), f_tok_s(d, d)); }
/* dense's FLOPs over the plan's kept ones: the dense configuration's total, so that ZipVL's
 * skipped pairs (counted by text_prefill.c) and the patterns' are on one footing */
static double f_attn_ideal(const rep_sums *r, const rep_sums *d) {
    return safe_div(d->prefill_kept + d->prefill_skipped, r->prefill_kept);
}
/* Amdahl: dense's prefill with its attention cut to the plan's kept share */
static double f_prefill_ideal(const rep_sums *r, const rep_sums *d) {
    return safe_div(d->prefill_ms, d->prefill_ms - d->attn_ms * (1.0 - f_pkept(r, d)));
}
static double f_decode_ideal(const rep_sums *r, const rep_sums *d) {
    return safe_div(d->decode_ms, d->decode_ms - d->decode_attn_ms * (1.0 - f_dkept(r, d)));
}
static double f_accuracy(const rep_sums *r, const rep_sums *d) { (void)d; return safe_div((double)r->correct, (double)r->items); }
static double f_tokens(const rep_sums *r, const rep_sums *d) { (void)d; return r->prompt_tokens / (double)r->items; }
static double f_kv(const rep_sums *r, const rep_sums *d) { (void)d; return r->kv_prefill_bytes / (double)r->items / 1048576.0; }

static double med_of(const config *c, const config *dense, int n_reps, rep_fn f, double *scratch) {
    for (int r = 0; r < n_reps; r++) scratch[r] = f(&c->reps[r], &dense->reps[r]);
    return median(scratch, n_reps);
}

static row make_row(const config *c, const config *dense, int n_reps, double *s) {
    row w;
    w.vision_ms = med_of(c, dense, n_reps, f_vision, s);
    w.prefill_ms = med_of(c, dense, n_reps, f_prefill, s);
    w.decode_ms = med_of(c, dense, n_reps, f_decode, s);
    w.ttft_ms = med_of(c, dense, n_reps, f_ttft, s);
    w.tok_s = med_of(c, dense, n_reps, f_tok_s, s);
    w.attn_ms = med_of(c, dense, n_reps, f_attn, s);
    w.kernel_ms = med_of(c, dense, n_reps, f_kernel, s);
    w.estimate_ms = med_of(c, dense, n_reps, f_estimate, s);
    w.score_ms = med_of(c, dense, n_reps, f_score, s);
    w.select_ms = med_of(c, dense, n_reps, f_select, s);
    w.rest_ms = med_of(c, dense, n_reps, f_rest, s);
    w.decode_attn_ms_tok = med_of(c, dense, n_reps, f_dec_attn, s);
    w.decode_cpu_ms_tok = med_of(c, dense, n_reps, f_dec_cpu, s);
    w.decode_cpu_speedup = med_of(c, dense, n_reps, f_dec_cpu_x, s);
    w.prefill_kept_share = med_of(c, dense, n_reps, f_pkept, s);
    w.decode_kept_share = med_of(c, dense, n_reps, f_dkept, s);
    w.prefill_speedup = med_of(c, dense, n_reps, f_prefill_x, s);
    w.prefill_ideal_phase = med_of(c, dense, n_reps, f_prefill_ideal, s);
    w.attn_speedup = med_of(c, dense, n_reps, f_attn_x, s);
    w.attn_ideal = med_of(c, dense, n_reps, f_attn_ideal, s);
    w.decode_speedup = med_of(c, dense, n_reps, f_decode_x, s);
    w.decode_ideal_phase = med_of(c, dense, n_reps, f_decode_ideal, s);
    w.vision_ratio = med_of(c, dense, n_reps, f_vision_x, s);
    w.accuracy = med_of(c, dense, n_reps, f_accuracy, s);
    w.prompt_tokens = med_of(c, dense, n_reps, f_tokens, s);
    w.kv_prefill_mib = med_of(c, dense, n_reps, f_kv, s);
    return w;
}

static void print_text(const config *cf, const row *rows, int n_cfg, const char *backend, const char *cpu, int n_items,
                       int n_reps, int n_threads, int profile, int n_steps) {
    printf("ocellus bench plans: %d items x %d reps on %s (%s, %d threads%s); medians, ratios paired per rep\n", n_items,
           n_reps, backend, cpu, n_threads, profile ? ", profiled" : "");
    if (n_steps) printf("decode: %d greedy steps per item after its answer\n", n_steps);
    else printf("decode: the answers' own tokens\n");
    printf("mean prompt tokens per item: %.0f\n\n", rows[0].prompt_tokens);
    printf("%-44s %6s %9s %7s %7s %7s %9s %7s %7s %7s %7s\n", "plan", "acc", "prefill", "speedup", "ideal", "attn x",
           "attn ideal", "decode", "tok/s x", "ideal", "KV MiB");
    for (int i = 0; i < n_cfg; i++) {
        const row *w = &rows[i];
        printf("%-44s %5.1f%% %7.1fms %6.2fx %6.2fx %6.2fx %9.2fx %5.1ft/s %6.2fx %6.2fx %7.2f%s\n", cf[i].name,
               100.0 * w->accuracy, w->prefill_ms, w->prefill_speedup, w->prefill_ideal_phase, w->attn_speedup,
               w->attn_ideal, w->tok_s, w->decode_speedup, w->decode_ideal_phase, w->kv_prefill_mib,
               cf[i].answers_differ ? "  (answers differ across reps)" : "");
    }
    printf("\nwhere the time went, ms per item (prefill) and per token (decode attention):\n");
    printf("%-44s %8s %8s %8s %8s %8s %8s %8s %7s %7s %8s %8s %7s\n", "plan", "vision", "prefill", "kernels", "estimate",
           "scoring", "select", "rest", "kept%", "dec kept%", "dec attn", "dec cpu", "cpu x");
    for (int i = 0; i < n_cfg; i++) {
        const row *w = &rows[i];
        printf("%-44s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %6.1f%% %8.1f%% %8.3f %8.3f %6.2fx\n", cf[i].name,
               w->vision_ms, w->prefill_ms, w->kernel_ms, w->estimate_ms, w->score_ms, w->select_ms, w->rest_ms,
               100.0 * w->prefill_kept_share, 100.0 * w->decode_kept_share, w->decode_attn_ms_tok, w->decode_cpu_ms_tok,
               w->decode_cpu_speedup);
    }
    printf("\nkernels: the attention calls less the index estimation; rest: prefill less attention, scoring and\n"
           "selection (projections, MLP, transfers). speedup: dense time / plan time; ideal: Amdahl's bound\n"
           "from dense's attention share and the plan's kept FLOPs; attn x / attn ideal: the attention calls\n"
           "alone and dense FLOPs / kept FLOPs; kept%%: attention FLOPs kept of dense's (decode: per token).\n"
           "dec cpu, cpu x: the process's CPU ms per decode step and dense's over the plan's (--decode-steps;\n"
           "on a shared machine the time others held the cores drops out of it).%s\n",
           profile || !strncmp(backend, "CPU", 3) ? "" : " OpenCL without --profile: the breakdown is host time of queued work.");
}

/* s as a JSON string (quotes, backslashes and control characters escaped). */
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static int write_json(const char *path, const config *cf, const row *rows, int n_cfg, const char *backend, const char *cpu,
                      int n_items, int n_reps, int n_threads, int profile, unsigned long long seed, long long first,
                      int max_images, int n_steps) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "ocellus bench plans: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f, "{\"bench\":\"plans\",\"backend\":");
    json_str(f, backend);
    fprintf(f, ",\"cpu\":");
    json_str(f, cpu);
    fprintf(f, ",\"threads\":%d,\"profile\":%d,\"items\":%d,\"reps\":%d,\"seed\":%llu,\"first\":%lld,"
            "\"max_images\":%d,\"decode_steps\":%d,\"configs\":[", n_threads, profile, n_items, n_reps, seed, first,
            max_images, n_steps);
    for (int i = 0; i < n_cfg; i++) {
        const row *w = &rows[i];
        fprintf(f, "%s{\"plan\":", i ? "," : "");
        json_str(f, cf[i].plan ? cf[i].plan : "dense");
        fprintf(f, ",\"accuracy\":%.6f,\"mean_prompt_tokens\":%.1f,\"vision_ms\":%.3f,"
                "\"prefill_ms\":%.3f,\"decode_ms\":%.3f,\"ttft_ms\":%.3f,\"decode_tok_per_s\":%.3f,"
                "\"prefill_attn_ms\":%.3f,\"prefill_kernel_ms\":%.3f,\"prefill_estimate_ms\":%.3f,"
                "\"prefill_score_ms\":%.3f,\"prefill_select_ms\":%.3f,\"prefill_rest_ms\":%.3f,"
                "\"decode_attn_ms_per_token\":%.4f,\"prefill_flops_kept_share\":%.6f,\"decode_flops_kept_share\":%.6f,"
                "\"vision_speedup\":%.4f,\"prefill_speedup\":%.4f,\"prefill_ideal_speedup\":%.4f,"
                "\"prefill_attn_speedup\":%.4f,\"prefill_attn_ideal_speedup\":%.4f,\"decode_speedup\":%.4f,"
                "\"decode_ideal_speedup\":%.4f,\"decode_cpu_ms_per_token\":%.4f,\"decode_cpu_speedup\":%.4f,"
                "\"kv_prefill_mib\":%.3f,\"answers_differ_across_reps\":%d}",
                w->accuracy, w->prompt_tokens, w->vision_ms,
                w->prefill_ms, w->decode_ms, w->ttft_ms, w->tok_s, w->attn_ms, w->kernel_ms, w->estimate_ms,
                w->score_ms, w->select_ms, w->rest_ms, w->decode_attn_ms_tok, w->prefill_kept_share,
                w->decode_kept_share, w->vision_ratio, w->prefill_speedup, w->prefill_ideal_phase, w->attn_speedup,
                w->attn_ideal, w->decode_speedup, w->decode_ideal_phase, w->decode_cpu_ms_tok, w->decode_cpu_speedup,
                w->kv_prefill_mib, cf[i].answers_differ);
    }
    fprintf(f, "]}\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "ocellus bench plans: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

/* The decode columns: the forced steps when there were any, else the answer's own passes. */
static void add_run(rep_sums *s, const oc_long_run *run) {
    const oc_stats *st = &run->stats;
    s->items++;
    s->correct += run->correct;
    s->vision_ms += st->vision_ms;
    s->prefill_ms += st->prefill_ms;
    s->decode_ms += run->steps ? run->steps_ms : st->decode_ms;
    s->ttft_ms += st->ttft_ms;
    s->attn_ms += st->prefill_attn_ms;
    s->estimate_ms += st->prefill_estimate_ms;
    s->score_ms += st->prefill_kv_score_ms;
    s->select_ms += st->prefill_kv_select_ms;
    s->decode_attn_ms += run->steps ? run->steps_attn_ms : st->decode_attn_ms;
    s->decode_cpu_s += run->steps_cpu_s;
    s->decode_passes += run->steps ? (double)run->steps : (double)run->decode_passes;
    s->prompt_tokens += st->n_prompt_tokens;
    s->kv_prefill_bytes += (double)st->kv_prefill_bytes;
    s->prefill_kept += (double)st->attn_prefill_flops_kept;
    s->prefill_skipped += (double)st->attn_prefill_flops_skipped;
    s->decode_kept += run->steps ? (double)run->steps_flops_kept : (double)st->attn_decode_flops_kept;
    s->decode_skipped += run->steps ? (double)run->steps_flops_skipped : (double)st->attn_decode_flops_skipped;
}

/* A short name for a plan (or model) path: its file name without ".plan"; the name goes into the
 * JSON as it is, so quotes, backslashes and control bytes become '_'. */
void bench_plan_short_name(const char *path, char *out, size_t n) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t len = strlen(b);
    if (len > 5 && !strcmp(b + len - 5, ".plan")) len -= 5;
    if (len >= n) len = n - 1;
    for (size_t i = 0; i < len; i++)
        out[i] = b[i] == '"' || b[i] == '\\' || (unsigned char)b[i] < 0x20 ? '_' : b[i];
    out[len] = '\0';
}

int bench_plans(int argc, char **argv) {
    const char *text_path = NULL, *mmproj = NULL;
    const char *plans[MAX_PLANS], *device = NULL, *json_path = NULL, *ctx_list = NULL;
    int n_plans = 0, n_threads = 0, profile = 0, n_given = 0;
    long long n_items = 4, n_reps = 3, first = 0, max_images = OC_LONG_MAX_IMAGES, chunk = -1, n_new = 32, v_ll;
    long long n_steps = DEFAULT_STEPS;
    int steps_given = 0;
    unsigned long long seed = 1000001;
    oc_backend_choice backend = OC_BACKEND_CPU;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--profile")) profile = 1;
        else if (a[0] != '-') { fprintf(stderr, "ocellus bench plans: unexpected argument '%s'\n", a); return 2; }
        else if (!v) { fprintf(stderr, "ocellus bench plans: option %s needs a value\n", a); return 2; }
        else if (!strcmp(a, "-m")) { text_path = v; i++; }
        else if (!strcmp(a, "--mmproj")) { mmproj = v; i++; }
        else if (!strcmp(a, "--plan")) {
            if (n_plans == MAX_PLANS) { fprintf(stderr, "ocellus bench plans: at most %d plans\n", MAX_PLANS); return 2; }
            plans[n_plans++] = v;
            i++;
        }
        else if (!strcmp(a, "--json")) { json_path = v; i++; }
        else if (!strcmp(a, "--decode-steps") && oc_tool_parse_ll(v, 0, OC_LONG_RUN_MAX_STEPS, &n_steps)) {
            steps_given = 1;
            i++;
        }
        else if (!strcmp(a, "--context")) { ctx_list = v; i++; }
        else if (!strcmp(a, "-n") && oc_tool_parse_ll(v, 1, 4096, &n_new)) { n_given = 1; i++; }
        else if (!strcmp(a, "--backend") && oc_tool_parse_backend(v, &backend)) i++;
        else if (!strcmp(a, "--device")) { device = v; i++; }
        else if (!strcmp(a, "--items") && oc_tool_parse_ll(v, 1, 100000, &n_items)) i++;
        else if (!strcmp(a, "--reps") && oc_tool_parse_ll(v, 1, MAX_REPS, &n_reps)) i++;
        else if (!strcmp(a, "--first") && oc_tool_parse_ll(v, 0, 1LL << 40, &first)) i++;
        else if (!strcmp(a, "--seed") && oc_tool_parse_ll(v, 0, 1LL << 62, &v_ll)) { seed = (unsigned long long)v_ll; i++; }
        else if (!strcmp(a, "--max-images") && oc_tool_parse_ll(v, OC_LONG_MIN_IMAGES, OC_LONG_MAX_IMAGES, &max_images)) i++;
        else if (!strcmp(a, "-t") && oc_tool_parse_ll(v, 1, 1024, &v_ll)) { n_threads = (int)v_ll; i++; }
        else if (!strcmp(a, "--prefill-chunk") && !strcmp(v, "all")) { chunk = 0; i++; }
        else if (!strcmp(a, "--prefill-chunk") && !strcmp(v, "auto")) { chunk = -1; i++; }
        else if (!strcmp(a, "--prefill-chunk") && oc_tool_parse_ll(v, 1, 1 << 20, &chunk)) i++;
        else { fprintf(stderr, "ocellus bench plans: bad option or value: %s %s\n", a, v); return 2; }
    }
    if (n_given && !ctx_list) {   /* the long-suite items decode their answers, as many tokens as those take */
        fprintf(stderr, "ocellus bench plans: -n (decode steps) needs --context\n");
        return 2;
    }
    if (steps_given && ctx_list) {
        fprintf(stderr, "ocellus bench plans: --decode-steps is for the suite's items; with --context give -n\n");
        return 2;
    }
    if (ctx_list) {   /* the language model alone at long contexts (bench_plans_ctx.c) */
        if (!text_path) { fprintf(stderr, "ocellus bench plans: --context needs -m TEXT.gguf\n"); return 2; }
        if (backend != OC_BACKEND_CPU) { fprintf(stderr, "ocellus bench plans: --context runs on the CPU only\n"); return 2; }
        if (!oc_tool_output_ok("bench plans", "--json", json_path)) return 1;
        for (int i = 0; i < n_plans; i++)
            if (!oc_tool_input_ok("bench plans", "--plan", plans[i])) return 1;
        if (chunk < 0) chunk = 256;   /* auto: the CPU's chunk, as oc_context_params' batch_tokens 0 picks */
        return bench_plans_context(text_path, plans, n_plans, ctx_list, n_threads, (int)n_reps, (int32_t)chunk, (int)n_new,
                                   json_path);
    }
    if (!text_path && !mmproj && !oc_tool_bundled_model(OC_TOOL_MODEL_LONG, &text_path, &mmproj)) {
        fprintf(stderr, "ocellus bench plans: no long model (looked in " OC_TOOL_MODEL_PLACES "): pass -m TEXT.gguf --mmproj MMPROJ.gguf\n");
        return 1;
    }
    if (!text_path || !mmproj) {
        fprintf(stderr, "ocellus bench plans: give both -m TEXT.gguf and --mmproj MMPROJ.gguf\n");
        return 2;
    }
    if (device && backend == OC_BACKEND_CPU) {
        fprintf(stderr, "ocellus bench plans: --device picks an OpenCL device: give --backend opencl or auto\n");
        return 2;
    }
    if (!oc_tool_output_ok("bench plans", "--json", json_path)) return 1;   /* before the run, not after it */
    for (int i = 0; i < n_plans; i++)
        if (!oc_tool_input_ok("bench plans", "--plan", plans[i])) return 1;
    if (n_plans == 0)
        for (size_t k = 0; k < sizeof shipped / sizeof shipped[0]; k++) plans[n_plans++] = shipped[k];
    int n_cfg = n_plans + 1;
    config cf[MAX_PLANS + 1];
    memset(cf, 0, sizeof cf);
    snprintf(cf[0].name, sizeof cf[0].name, "dense");
    for (int i = 0; i < n_plans; i++) {
        cf[i + 1].plan = plans[i];
        bench_plan_short_name(plans[i], cf[i + 1].name, sizeof cf[i + 1].name);
    }
    /* the first repetition's answers, to see that repetitions agree: [n_cfg][n_items] */
    size_t n_answers = (size_t)n_cfg * (size_t)n_items;
    char (*answers)[OC_LONG_RUN_ANSWER_BYTES] = calloc(n_answers, sizeof *answers);
    rep_sums *sums = calloc((size_t)n_cfg * (size_t)n_reps, sizeof *sums);
    double *scratch = calloc((size_t)n_reps, sizeof *scratch);
    row *rows = calloc((size_t)n_cfg, sizeof *rows);
    uint8_t *rgb = malloc(oc_long_run_rgb_bytes((int32_t)max_images));
    oc_model *model = NULL;
    oc_error err;
    int rc = 1;
    char backend_name[128] = "", cpu[128];
    bench_cpu_name(cpu, sizeof cpu);
    if (!answers || !sums || !scratch || !rows || !rgb) {
        fprintf(stderr, "ocellus bench plans: out of memory\n");
        goto done;
    }
    if (oc_model_open(&model, text_path, mmproj, NULL, &err)) {
        fprintf(stderr, "ocellus bench plans: %s\n", err.message);
        goto done;
    }
    for (int i = 0; i < n_cfg; i++) {
        oc_context_params cp;
        oc_context_params_default(&cp);
        oc_long_run_context_params(&cp, (int32_t)max_images, (int32_t)chunk);
        cp.n_threads = n_threads;
        cp.plan_path = cf[i].plan;
        cp.backend = backend;
        cp.device = device;
        cp.profile = profile;
        cf[i].reps = sums + (size_t)i * (size_t)n_reps;
        if (oc_context_open(&cf[i].ctx, model, &cp, &err)) {
            fprintf(stderr, "ocellus bench plans: %s: %s\n", cf[i].plan ? cf[i].plan : "dense", err.message);
            goto done;
        }
    }
    snprintf(backend_name, sizeof backend_name, "%s", oc_context_backend_name(cf[0].ctx));
    if (n_threads == 0) n_threads = oc_port_n_cpus();
    fprintf(stderr, "backend: %s\n", backend_name);
    for (long long r = 0; r < n_reps; r++) {
        for (long long it = 0; it < n_items; it++) {
            for (int k = 0; k < n_cfg; k++) {
                int i = r % 2 ? n_cfg - 1 - k : k;   /* alternate the order from one rep to the next */
                oc_long_run run;
                if (oc_long_run_item_steps(cf[i].ctx, seed, (uint64_t)(first + it), (int32_t)max_images, 0, (int32_t)n_steps,
                                           rgb, &run, &err)) {
                    fprintf(stderr, "ocellus bench plans: %s, item %lld: %s\n", cf[i].name, first + it, err.message);
                    goto done;
                }
                add_run(&cf[i].reps[r], &run);
                char *a = answers[(size_t)i * (size_t)n_items + (size_t)it];
                if (r == 0) memcpy(a, run.answer, sizeof run.answer);
                else if (strcmp(a, run.answer)) cf[i].answers_differ = 1;
            }
            fprintf(stderr, "\rrep %lld/%lld item %lld/%lld", r + 1, n_reps, it + 1, n_items);
        }
    }
    fprintf(stderr, "\n");
    for (int i = 0; i < n_cfg; i++) rows[i] = make_row(&cf[i], &cf[0], (int)n_reps, scratch);
    print_text(cf, rows, n_cfg, backend_name, cpu, (int)n_items, (int)n_reps, n_threads, profile, (int)n_steps);
    rc = json_path ? write_json(json_path, cf, rows, n_cfg, backend_name, cpu, (int)n_items, (int)n_reps, n_threads,
                                profile, seed, first, (int)max_images, (int)n_steps)
                   : 0;
done:
    for (int i = 0; i < n_cfg; i++) oc_context_close(cf[i].ctx);
    oc_model_close(model);
    free(answers);
    free(sums);
    free(scratch);
    free(rows);
    free(rgb);
    return rc;
}
