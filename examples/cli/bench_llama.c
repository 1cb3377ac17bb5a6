/* bench_llama.c: `ocellus bench vlm ... --compare-llama DIR`: right after each ocellus case, runs
 * llama.cpp's llama-mtmd-cli or llama-bench from DIR on the same GGUF files, images, thread count and
 * token counts, parses their timings, and at the end prints both columns and the ratios in one table,
 * with the load average around each pair of runs (a shared machine shows there). llama.cpp is not a
 * dependency: nothing runs unless the flag names a directory.
 *   llama-bench -m TEXT -p PP -n 128 -t N -o csv        -> pp tok/s, tg tok/s (avg_ts)
 *   llama-mtmd-cli -m TEXT --mmproj V --image I.. -p Q -n N -t N -c C --temp 0 -lv 4
 * What llama-mtmd-cli prints (its version of 2026-11, tools/mtmd/mtmd-cli.cpp; older ones differ):
 *   "mtmd batch encoding done in X ms"          the vision encoder, one line per batch of images
 *   "image slice encoded in X ms"               the same from mtmd-helper (older CLIs): used only
 *                                               where no batch line came, never added to them
 *   "decoding image batch i/n, n_tokens_batch = K"  the image tokens the text model receives
 *   llama_perf_context_print "prompt eval time = X ms / T tokens", "eval time = X ms / R runs":
 *                                               libllama's INFO lines, which the CLI's logger shows
 *                                               only at verbosity 4 (-lv 4), hence the flag.
 * libllama adds prompt time from the first prompt batch it is given to the next synchronisation,
 * the sampling of the first token; the CLI encodes the images between its prompt batches, so that
 * "prompt eval time" already holds the encodes (measured: 14.3 s = 9.9 s encode + 3.9 s image
 * tokens + the text, one 448x448 image), and it is the time to first token. With an older CLI (slice
 * lines only, not measured here) the encodes are added to it, as this parser did before. Prefill
 * tok/s = T / (time to first token - encodes): the prompt's tokens, the images' included, over the
 * text model's share of that time.
 * The images are written as binary PPM (stb_image reads them) to the current directory and removed
 * afterwards. Lines we cannot parse leave the column empty ("-"), never a made-up number. */
#define _POSIX_C_SOURCE 200809L   /* popen */
#include "bench.h"
#include "port.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Path characters we pass through sh unquoted-safe inside single quotes. */
static int shell_safe(const char *s) { return s && !strchr(s, '\'') && !strchr(s, '\n'); }

int bench_llama_check_paths(const char *dir, const char *text, const char *mmproj) {
    if (shell_safe(dir) && shell_safe(text) && (!mmproj || shell_safe(mmproj))) return 0;
    fprintf(stderr, "ocellus bench vlm: --compare-llama: paths must not contain ' or a newline\n");
    return 2;
}

/* Splits one CSV line honoring double quotes: fields[i] points into line (modified). */
static int csv_split(char *line, char **fields, int max) {
    int n = 0;
    char *p = line;
    while (n < max) {
        char *f = p, *w = p;
        int q = 0;
        for (; *p && (q || *p != ','); p++) {
            if (*p == '"') { q = !q; continue; }
            if (*p != '\r' && *p != '\n') *w++ = *p;
        }
        int end = !*p;
        *w = 0;
        fields[n++] = f;
        if (end) break;
        p++;
    }
    return n;
}

/* popen + pclose with the children's CPU time and the wall time around them. */
typedef struct child_clock { double cpu_s, wall_ns; } child_clock;
static void clock_start(child_clock *c) { c->cpu_s = oc_port_children_cpu_s(); c->wall_ns = (double)oc_port_now_ns(); }
static double clock_share(const child_clock *c, int n_threads) {
    double cpu = oc_port_children_cpu_s(), wall_s = ((double)oc_port_now_ns() - c->wall_ns) * 1e-9;
    return c->cpu_s >= 0 && cpu >= 0 && wall_s > 0 ? (cpu - c->cpu_s) / (wall_s * n_threads) : 0;
}

/* llama-bench -o csv: avg_ts of the row with n_prompt = pp (n_gen 0) and of the row with n_gen > 0. */
static void run_llama_bench(const char *dir, const char *text, int n_threads, int pp, bench_llama_run *out) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s/llama-bench' -m '%s' -p %d -n 128 -t %d -o csv 2>/dev/null", dir, text, pp, n_threads);
    child_clock cc;
    clock_start(&cc);
    FILE *f = popen(cmd, "r");
    if (!f) return;
    char line[8192], *fld[96];
    int i_prompt = -1, i_gen = -1, i_ts = -1;
    while (fgets(line, sizeof line, f)) {
        int n = csv_split(line, fld, 96);
        if (i_ts < 0) {   /* the header */
            for (int i = 0; i < n; i++) {
                if (!strcmp(fld[i], "n_prompt")) i_prompt = i;
                if (!strcmp(fld[i], "n_gen")) i_gen = i;
                if (!strcmp(fld[i], "avg_ts")) i_ts = i;
            }
            continue;
        }
        if (i_prompt >= n || i_gen >= n || i_ts >= n || i_prompt < 0 || i_gen < 0) continue;
        double ts = atof(fld[i_ts]);
        if (atoi(fld[i_gen]) > 0) out->tg_tok_s = ts;
        else if (atoi(fld[i_prompt]) == pp) out->pp_tok_s = ts;
    }
    pclose(f);
    out->cpu_share = clock_share(&cc, n_threads);
}

static void run_mtmd(const char *dir, const bench_vlm_row *row, int n_threads, int n_new, bench_llama_run *out) {
    char cmd[8192];
    int n_ctx = row->image_tokens + 1024;   /* as ocellus's context: the images' tokens and the question */
    int at = snprintf(cmd, sizeof cmd, "'%s/llama-mtmd-cli' -m '%s' --mmproj '%s' -t %d -c %d --temp 0 -n %d -lv 4 "
                      "-p 'Describe these images in detail.'", dir, row->text, row->mmproj, n_threads,
                      n_ctx > 4096 ? n_ctx : 4096, n_new);
    for (int i = 0; i < row->n_images && at > 0 && (size_t)at < sizeof cmd; i++)
        at += snprintf(cmd + at, sizeof cmd - (size_t)at, " --image ocellus-bench-image-%d.ppm", i);
    if (at <= 0 || (size_t)at + 16 >= sizeof cmd) return;
    strcat(cmd, " 2>&1");
    child_clock cc;
    clock_start(&cc);
    FILE *f = popen(cmd, "r");
    if (!f) return;
    char line[4096];
    double batch_ms = 0, slice_ms = 0, prompt_ms = 0, eval_ms = 0;
    int prompt_tok = 0, eval_runs = 0;
    while (fgets(line, sizeof line, f)) {
        const char *p;
        double ms;
        int n;
        if ((p = strstr(line, "batch encoding done in ")) && sscanf(p, "batch encoding done in %lf ms", &ms) == 1) batch_ms += ms;
        else if ((p = strstr(line, "slice encoded in ")) && sscanf(p, "slice encoded in %lf ms", &ms) == 1) slice_ms += ms;
        else if ((p = strstr(line, "n_tokens_batch = ")) && sscanf(p, "n_tokens_batch = %d", &n) == 1) out->image_tokens += n;
        else if ((p = strstr(line, "prompt eval time =")) && sscanf(p, "prompt eval time = %lf ms / %d", &ms, &n) == 2) {
            prompt_ms = ms;
            prompt_tok = n;
        } else if ((p = strstr(line, " eval time =")) && sscanf(p, " eval time = %lf ms / %d", &ms, &n) == 2) {
            eval_ms = ms;
            eval_runs = n;
        }
    }
    pclose(f);
    out->cpu_share = clock_share(&cc, n_threads);
    out->vision_ms = batch_ms > 0 ? batch_ms : slice_ms;
    if (prompt_ms > 0 && out->vision_ms > 0) {   /* see the file comment: the batch CLI's prompt time holds the encodes */
        out->ttft_ms = batch_ms > 0 ? prompt_ms : prompt_ms + out->vision_ms;
        out->prefill_tok_s = 1000.0 * prompt_tok / (out->ttft_ms - out->vision_ms);
    }
    if (eval_runs > 0 && eval_ms > 0) out->decode_tok_s = 1000.0 * eval_runs / eval_ms;
}

static int write_ppm(const char *path, const uint8_t *rgb, int px) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fprintf(f, "P6\n%d %d\n255\n", px, px);
    int ok = fwrite(rgb, 3, (size_t)px * (size_t)px, f) == (size_t)px * (size_t)px;
    return fclose(f) == 0 && ok;
}

void bench_llama_case(const char *dir, int n_threads, int n_new, int pp, const bench_vlm_row *row,
                      const uint8_t *const *pixels, bench_llama_run *out) {
    memset(out, 0, sizeof *out);
    fprintf(stderr, "  llama.cpp, %s: ", row->name);
    uint64_t t0 = oc_port_now_ns();
    if (row->n_images > 0) {
        char name[64];
        int ok = 1;
        for (int i = 0; i < row->n_images && ok; i++) {
            snprintf(name, sizeof name, "ocellus-bench-image-%d.ppm", i);
            if (!(ok = write_ppm(name, pixels[i], row->image_px))) fprintf(stderr, "cannot write %s ", name);
        }
        if (ok) run_mtmd(dir, row, n_threads, n_new, out);
        for (int i = 0; i < row->n_images; i++) {
            snprintf(name, sizeof name, "ocellus-bench-image-%d.ppm", i);
            remove(name);
        }
    } else {
        run_llama_bench(dir, row->text, n_threads, pp, out);
    }
    out->load_end = oc_port_load_average();
    fprintf(stderr, "%.1f s\n", (double)(oc_port_now_ns() - t0) * 1e-9);
}

static void cell(char *buf, size_t n, double v, const char *fmt) {
    if (v > 0) snprintf(buf, n, fmt, v);
    else snprintf(buf, n, "-");
}

/* One table row; ratio = ocellus / llama.cpp of times (is_time) or of speeds. */
static void line(const bench_vlm_row *o, const char *what, double llama, double ours, const char *fmt, int is_time,
                 const char *load) {
    char a[32], b[32], c[32];
    cell(a, sizeof a, llama, fmt);
    cell(b, sizeof b, ours, fmt);
    cell(c, sizeof c, llama > 0 && ours > 0 ? ours / llama : 0, is_time ? "time %.2f" : "speed %.2f");
    printf("| %s | %s | %s | %s | %s | %s | %s |\n", o->files, o->name, what, a, b, c, load);
}

void bench_llama_print(const char *dir, int n_threads, int pp, const bench_vlm_row *rows, const bench_llama_run *runs, int n) {
    printf("\nllama.cpp from %s on the same files (%d threads), each case run right after ocellus's; time ratio "
           "= ocellus / llama.cpp (below 1: ocellus faster), speed ratio = ocellus / llama.cpp (above 1: ocellus "
           "faster); '-': llama.cpp printed no such timing. Wall clock for both; load = the 1-minute load average "
           "when ocellus's case started and when llama.cpp's ended, cpu = llama.cpp's CPU share over its whole run "
           "(model loading included)\n\n", dir, n_threads);
    printf("| files | case | what | llama.cpp | ocellus | ratio | load, llama.cpp cpu |\n|---|---|---|---|---|---|---|\n");
    for (int r = 0; r < n; r++) {
        const bench_vlm_row *o = &rows[r];
        const bench_llama_run *t = &runs[r];
        char load[64];
        snprintf(load, sizeof load, "%.1f-%.1f, %.0f%%", o->load_start, t->load_end, 100 * t->cpu_share);
        if (o->n_images > 0) {
            char what[64];
            if (t->image_tokens == o->image_tokens) snprintf(what, sizeof what, "vision encode (%d tok)", o->image_tokens);
            else snprintf(what, sizeof what, "vision encode (llama.cpp %d tok, ocellus %d)", t->image_tokens, o->image_tokens);
            line(o, what, t->vision_ms, o->vision_ms, "%.0f ms", 1, load);
            line(o, "prefill after the encode", t->prefill_tok_s, o->prefill_tok_s, "%.1f tok/s", 0, load);
            line(o, "time to first token", t->ttft_ms, o->ttft_ms, "%.0f ms", 1, load);
            line(o, "decode", t->decode_tok_s, o->decode_tok_s, "%.2f tok/s", 0, load);
        } else {
            char what[48];
            snprintf(what, sizeof what, "prefill (llama-bench pp%d)", pp);
            line(o, what, t->pp_tok_s, o->prefill_tok_s, "%.1f tok/s", 0, load);
            line(o, "decode (llama-bench tg128)", t->tg_tok_s, o->decode_tok_s, "%.2f tok/s", 0, load);
        }
    }
    fflush(stdout);
}
