/* bench_llama.c: `ocellus bench vlm ... --compare-llama DIR`: runs llama.cpp's llama-mtmd-cli and
 * llama-bench from DIR on the same GGUF files, images, thread count and token counts as the
 * ocellus cases just measured, parses their timings and prints both columns and the ratios in one
 * table. llama.cpp is not a dependency: nothing runs unless the flag names a directory.
 *   llama-bench -m TEXT -p PP -n 128 -t N -o csv        -> pp tok/s, tg tok/s (avg_ts)
 *   llama-mtmd-cli -m TEXT --mmproj V --image I.. -p Q -n N -t N -c 4096 --temp 0
 *                                                        -> "image slice encoded in X ms" (vision),
 *                                                           llama_perf "prompt eval time", "eval time"
 * The images are written as binary PPM (stb_image reads them) to the current directory and removed
 * afterwards. Lines we cannot parse leave the column empty ("-"), never a made-up number. */
#define _POSIX_C_SOURCE 200809L   /* popen */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Path characters we pass through sh unquoted-safe inside single quotes. */
static int shell_safe(const char *s) { return s && !strchr(s, '\'') && !strchr(s, '\n'); }

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

/* llama-bench -o csv: avg_ts of the row with n_prompt = pp (n_gen 0) and of the row with n_gen > 0. */
static void run_llama_bench(const char *dir, const char *text, int n_threads, int pp, double *pp_ts, double *tg_ts) {
    char cmd[4096];
    *pp_ts = *tg_ts = 0;
    snprintf(cmd, sizeof cmd, "'%s/llama-bench' -m '%s' -p %d -n 128 -t %d -o csv 2>/dev/null", dir, text, pp, n_threads);
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
        if (atoi(fld[i_gen]) > 0) *tg_ts = ts;
        else if (atoi(fld[i_prompt]) == pp) *pp_ts = ts;
    }
    pclose(f);
}

typedef struct mtmd_times { double vision_ms, prompt_ms, eval_ms; int prompt_tok, eval_runs; } mtmd_times;

static void run_mtmd(const char *dir, const char *text, const char *mmproj, int n_threads, int n_images, int n_new,
                     mtmd_times *t) {
    char cmd[8192];
    memset(t, 0, sizeof *t);
    int at = snprintf(cmd, sizeof cmd, "'%s/llama-mtmd-cli' -m '%s' --mmproj '%s' -t %d -c 4096 --temp 0 -n %d "
                      "-p 'Describe these images in detail.'", dir, text, mmproj, n_threads, n_new);
    for (int i = 0; i < n_images && at > 0 && (size_t)at < sizeof cmd; i++)
        at += snprintf(cmd + at, sizeof cmd - (size_t)at, " --image ocellus-bench-image-%d.ppm", i);
    if (at <= 0 || (size_t)at + 16 >= sizeof cmd) return;
    strcat(cmd, " 2>&1");
    FILE *f = popen(cmd, "r");
    if (!f) return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        const char *p;
        double ms;
        int n;
        if ((p = strstr(line, "encoded in ")) && sscanf(p, "encoded in %lf ms", &ms) == 1) t->vision_ms += ms;
        else if ((p = strstr(line, "prompt eval time =")) && sscanf(p, "prompt eval time = %lf ms / %d", &ms, &n) == 2) {
            t->prompt_ms = ms;
            t->prompt_tok = n;
        } else if ((p = strstr(line, " eval time =")) && sscanf(p, " eval time = %lf ms / %d", &ms, &n) == 2) {
            t->eval_ms = ms;
            t->eval_runs = n;
        }
    }
    pclose(f);
}

static int write_ppm(const char *path, const uint8_t *rgb, int px) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fprintf(f, "P6\n%d %d\n255\n", px, px);
    int ok = fwrite(rgb, 3, (size_t)px * (size_t)px, f) == (size_t)px * (size_t)px;
    return fclose(f) == 0 && ok;
}

static void cell(char *buf, size_t n, double v, const char *fmt) {
    if (v > 0) snprintf(buf, n, fmt, v);
    else snprintf(buf, n, "-");
}

int bench_vlm_compare_llama(const char *dir, const char *text, const char *mmproj, int n_threads, int n_new, int pp,
                            const bench_vlm_row *rows, int n_rows, const uint8_t *const *pixels, int n_pixels, int px) {
    if (!shell_safe(dir) || !shell_safe(text) || (mmproj && !shell_safe(mmproj))) {
        fprintf(stderr, "ocellus bench vlm: --compare-llama: paths must not contain ' or a newline\n");
        return 2;
    }
    char name[64];
    for (int i = 0; i < n_pixels; i++) {
        snprintf(name, sizeof name, "ocellus-bench-image-%d.ppm", i);
        if (!write_ppm(name, pixels[i], px)) { fprintf(stderr, "ocellus bench vlm: cannot write %s\n", name); return 1; }
    }
    printf("\nllama.cpp from %s on the same files (%d threads); time ratio = ocellus / llama.cpp, speed ratio = "
           "ocellus / llama.cpp; '-': llama.cpp printed no such timing\n\n", dir, n_threads);
    printf("| case | what | llama.cpp | ocellus | ratio |\n|---|---|---|---|---|\n");
    for (int r = 0; r < n_rows; r++) {
        const bench_vlm_row *o = &rows[r];
        char a[32], b[32], c[32];
        if (o->n_images > 0) {
            mtmd_times t;
            run_mtmd(dir, text, mmproj, n_threads, o->n_images, n_new, &t);
            double ttft = t.vision_ms > 0 && t.prompt_ms > 0 ? t.vision_ms + t.prompt_ms : 0;
            double dec = t.eval_runs > 0 && t.eval_ms > 0 ? 1000.0 * t.eval_runs / t.eval_ms : 0;
            cell(a, sizeof a, t.vision_ms, "%.0f ms"); cell(b, sizeof b, o->vision_ms, "%.0f ms");
            cell(c, sizeof c, t.vision_ms > 0 ? o->vision_ms / t.vision_ms : 0, "time %.2f");
            printf("| %s | vision encode | %s | %s | %s |\n", o->name, a, b, c);
            cell(a, sizeof a, ttft, "%.0f ms"); cell(b, sizeof b, o->ttft_ms, "%.0f ms");
            cell(c, sizeof c, ttft > 0 ? o->ttft_ms / ttft : 0, "time %.2f");
            printf("| %s | time to first token | %s | %s | %s |\n", o->name, a, b, c);
            cell(a, sizeof a, dec, "%.2f tok/s"); cell(b, sizeof b, o->decode_tok_s, "%.2f tok/s");
            cell(c, sizeof c, dec > 0 ? o->decode_tok_s / dec : 0, "speed %.2f");
            printf("| %s | decode | %s | %s | %s |\n", o->name, a, b, c);
        } else {
            double pp_ts, tg_ts;
            run_llama_bench(dir, text, n_threads, pp, &pp_ts, &tg_ts);
            cell(a, sizeof a, pp_ts, "%.1f tok/s"); cell(b, sizeof b, o->prefill_tok_s, "%.1f tok/s");
            cell(c, sizeof c, pp_ts > 0 ? o->prefill_tok_s / pp_ts : 0, "speed %.2f");
            printf("| %s | prefill (llama-bench pp%d) | %s | %s | %s |\n", o->name, pp, a, b, c);
            cell(a, sizeof a, tg_ts, "%.2f tok/s"); cell(b, sizeof b, o->decode_tok_s, "%.2f tok/s");
            cell(c, sizeof c, tg_ts > 0 ? o->decode_tok_s / tg_ts : 0, "speed %.2f");
            printf("| %s | decode (llama-bench tg128) | %s | %s | %s |\n", o->name, a, b, c);
        }
        fflush(stdout);
    }
    for (int i = 0; i < n_pixels; i++) {
        snprintf(name, sizeof name, "ocellus-bench-image-%d.ppm", i);
        remove(name);
    }
    return 0;
}
