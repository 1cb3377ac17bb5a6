/* bench_llama.c: `ocellus bench vlm ... --compare-llama DIR`: right after each ocellus case, runs
 * llama.cpp's llama-mtmd-cli or llama-bench from DIR on the same GGUF files, images, thread count and
 * token counts, parses their timings, and at the end prints both columns and the ratios in one table.
 * A ratio is printed only where both programs did the same work: the same image tokens (and prompt
 * tokens up to the marker lines' newlines, run_mtmd) for the image cases, decode after the same
 * context length for the text case; elsewhere the row says why not. Each row carries the other load
 * (what other processes took of the machine's CPUs, from /proc/stat) during both runs and is marked
 * busy above 2%. llama.cpp is not a dependency: nothing runs unless the flag names a directory.
 *   llama-bench -m TEXT -p PP -n 0 -t N -o csv              -> pp tok/s (avg_ts)
 *   llama-bench -m TEXT -p 0 -n TG -d DEPTH -t N -o csv     -> tg tok/s after DEPTH tokens of context
 *   llama-mtmd-cli -m TEXT --mmproj V --image I.. -sys SYS -p '<__media__>\n..Q' -n N -t N -c C --temp 0 -lv 4
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

void bench_span_now(bench_span *s, double own_s) {
    s->ns = oc_port_now_ns();
    s->busy_s = oc_port_machine_busy_cpu_s();
    s->own_s = own_s;
}

double bench_other_share(const bench_span *a, const bench_span *b) {
    double wall_s = (double)(b->ns - a->ns) * 1e-9, cpus = oc_port_n_cpus();
    if (a->busy_s < 0 || b->busy_s < 0 || a->own_s < 0 || b->own_s < 0 || wall_s <= 0 || cpus < 1) return -1;
    /* /proc/stat moves in 10 ms ticks per CPU: below 2 CPU-seconds of capacity a tick or two either
     * way is more than the 2% that marks a row busy, so say nothing rather than a wrong number */
    if (wall_s * cpus < 2.0) return -2;
    double other = (b->busy_s - a->busy_s) - (b->own_s - a->own_s);
    return other <= 0 ? 0 : other >= wall_s * cpus ? 1 : other / (wall_s * cpus);
}

/* popen + pclose with the children's CPU time, the wall time and the machine's busy time around them. */
typedef struct child_clock { bench_span span; } child_clock;
static void clock_start(child_clock *c) { bench_span_now(&c->span, oc_port_children_cpu_s()); }
/* Its CPU share (of n_threads over the wall time) and the other load, once the child was waited for. */
static void clock_stop(const child_clock *c, int n_threads, double *share, double *other) {
    bench_span end;
    bench_span_now(&end, oc_port_children_cpu_s());
    double wall_s = (double)(end.ns - c->span.ns) * 1e-9, cpu = end.own_s - c->span.own_s;
    *share = c->span.own_s >= 0 && end.own_s >= 0 && wall_s > 0 ? cpu / (wall_s * n_threads) : 0;
    *other = bench_other_share(&c->span, &end);
}

/* One llama-bench -o csv run: avg_ts of the row with these n_prompt, n_gen and (where the csv has the
 * column) n_depth; 0 when no such row came. A row whose depth cannot be checked is not taken for a
 * depth > 0. */
static double llama_bench_csv(const char *cmd, int n_prompt, int n_gen, int n_depth, int n_threads,
                              double *share, double *other) {
    child_clock cc;
    clock_start(&cc);
    FILE *f = popen(cmd, "r");
    if (!f) return 0;
    char line[8192], *fld[96];
    int i_prompt = -1, i_gen = -1, i_ts = -1, i_depth = -1;
    double ts = 0;
    while (fgets(line, sizeof line, f)) {
        int n = csv_split(line, fld, 96);
        if (i_ts < 0) {   /* the header */
            for (int i = 0; i < n; i++) {
                if (!strcmp(fld[i], "n_prompt")) i_prompt = i;
                if (!strcmp(fld[i], "n_gen")) i_gen = i;
                if (!strcmp(fld[i], "n_depth")) i_depth = i;
                if (!strcmp(fld[i], "avg_ts")) i_ts = i;
            }
            continue;
        }
        if (i_prompt >= n || i_gen >= n || i_ts >= n || i_depth >= n || i_prompt < 0 || i_gen < 0) continue;
        int depth = i_depth >= 0 ? atoi(fld[i_depth]) : n_depth > 0 ? -1 : 0;
        if (atoi(fld[i_prompt]) == n_prompt && atoi(fld[i_gen]) == n_gen && depth == n_depth) ts = atof(fld[i_ts]);
    }
    pclose(f);
    clock_stop(&cc, n_threads, share, other);
    return ts;
}

/* The text case: llama-bench's pp of the same prompt length (-p PP -n 0), then its tg of as many
 * tokens as ocellus decoded after as many tokens of context as ocellus's prompt held (-d, llama-bench's
 * n_depth: the KV cache filled first), so both decode rows read the same cache length. A llama-bench
 * without -d prints nothing for that run; then tg from an empty context, labelled so, with no ratio. */
static void run_llama_bench(const char *dir, const bench_vlm_row *row, int n_threads, int pp, bench_llama_run *out) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s/llama-bench' -m '%s' -p %d -n 0 -t %d -o csv 2>/dev/null", dir, row->text, pp, n_threads);
    out->pp_tok_s = llama_bench_csv(cmd, pp, 0, 0, n_threads, &out->cpu_share, &out->other);
    if (row->n_decoded < 1) return;
    out->tg_n = row->n_decoded;
    out->tg_depth = row->prompt_tokens;
    snprintf(cmd, sizeof cmd, "'%s/llama-bench' -m '%s' -p 0 -n %d -d %d -t %d -o csv 2>/dev/null", dir, row->text,
             out->tg_n, out->tg_depth, n_threads);
    out->tg_tok_s = llama_bench_csv(cmd, 0, out->tg_n, out->tg_depth, n_threads, &out->cpu_share_tg, &out->other_tg);
    if (out->tg_tok_s > 0) return;
    out->tg_depth = -1;
    snprintf(cmd, sizeof cmd, "'%s/llama-bench' -m '%s' -p 0 -n %d -t %d -o csv 2>/dev/null", dir, row->text, out->tg_n,
             n_threads);
    out->tg_tok_s = llama_bench_csv(cmd, 0, out->tg_n, 0, n_threads, &out->cpu_share_tg, &out->other_tg);
}

/* llama-mtmd-cli places each image where its prompt has a <__media__> marker. Without markers it
 * appends them back to back, and for Qwen2-VL consecutive images of one size then go through the
 * encoder as the two temporal frames of one video patch (half the image tokens of separate images);
 * so one marker per image, each on its own line, then the question. ocellus's question starts with
 * the same newline (BENCH_VLM_QUESTION), so one image gives both programs the same prompt tokens and
 * n images give llama.cpp n - 1 more (the newlines between the marker lines), and one more after its
 * -sys system message (below). */
static void run_mtmd(const char *dir, const bench_vlm_row *row, int n_threads, int n_new, bench_llama_run *out) {
    char cmd[8192];
    int n_ctx = row->image_tokens + 1024;   /* as ocellus's context: the images' tokens and the question */
    /* -sys: ocellus's prompt holds Qwen2-VL's default system message (prompt.c); llama-mtmd-cli of
     * 2026-08 formats with its built-in ChatML, which adds none unless asked (11 tokens fewer) */
    int at = snprintf(cmd, sizeof cmd, "'%s/llama-mtmd-cli' -m '%s' --mmproj '%s' -t %d -c %d --temp 0 -n %d -lv 4 "
                      "-sys '%s' -p '", dir, row->text, row->mmproj, n_threads, n_ctx > 4096 ? n_ctx : 4096, n_new,
                      BENCH_VLM_SYSTEM);
    for (int i = 0; i < row->n_images && at > 0 && (size_t)at < sizeof cmd; i++)
        at += snprintf(cmd + at, sizeof cmd - (size_t)at, "<__media__>\n");   /* a newline inside '': sh keeps it */
    if (at > 0 && (size_t)at < sizeof cmd) at += snprintf(cmd + at, sizeof cmd - (size_t)at, "%s'", &BENCH_VLM_QUESTION[1]);   /* without its newline */
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
    clock_stop(&cc, n_threads, &out->cpu_share, &out->other);
    out->vision_ms = batch_ms > 0 ? batch_ms : slice_ms;
    out->prompt_tokens = prompt_tok;
    out->decode_runs = eval_runs;
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
        run_llama_bench(dir, row, n_threads, pp, out);
    }
    fprintf(stderr, "%.1f s\n", (double)(oc_port_now_ns() - t0) * 1e-9);
}

static void cell(char *buf, size_t n, double v, const char *fmt) {
    if (v > 0) snprintf(buf, n, fmt, v);
    else snprintf(buf, n, "-");
}

/* "1.2%", "?" where the OS does not say, "short" for a span too short to tell. */
static void share_cell(char *buf, size_t n, double share) {
    if (share == -2) snprintf(buf, n, "short");
    else if (share < 0) snprintf(buf, n, "?");
    else snprintf(buf, n, "%.1f%%", 100 * share);
}

/* One table row; ratio = ocellus / llama.cpp of times (is_time) or of speeds, unless why_not says
 * why the two numbers measure different work (then no ratio, the reason instead). other_o / other_l:
 * the other load during ocellus's phase and during llama.cpp's run; above BENCH_BUSY_SHARE in either,
 * the row is marked busy, its ratio not one to quote. */
static void line(const bench_vlm_row *o, const char *what, double llama, double ours, const char *fmt, int is_time,
                 const char *why_not, double other_o, double other_l, double llama_cpu) {
    char a[32], b[32], c[160], so[16], sl[16];
    cell(a, sizeof a, llama, fmt);
    cell(b, sizeof b, ours, fmt);
    if (why_not && llama > 0 && ours > 0) snprintf(c, sizeof c, "none: %s", why_not);
    else cell(c, sizeof c, llama > 0 && ours > 0 ? ours / llama : 0, is_time ? "time %.2f" : "speed %.2f");
    int busy = other_o > BENCH_BUSY_SHARE || other_l > BENCH_BUSY_SHARE;
    share_cell(so, sizeof so, other_o);
    share_cell(sl, sizeof sl, other_l);
    printf("| %s | %s | %s | %s | %s | %s%s | %s / %s%s | %.0f%% |\n", o->files, o->name, what, a, b, c,
           busy ? ", busy" : "", so, sl, busy ? " **busy**" : "", 100 * llama_cpu);
}

void bench_llama_print(const char *dir, int n_threads, int pp, const bench_vlm_row *rows, const bench_llama_run *runs, int n) {
    printf("\nllama.cpp from %s on the same files (%d threads), each case run right after ocellus's; time ratio "
           "= ocellus / llama.cpp (below 1: ocellus faster), speed ratio = ocellus / llama.cpp (above 1: ocellus "
           "faster); '-': llama.cpp printed no such timing; 'none: why': the two programs did different work (token "
           "counts or context differ), so no ratio. Wall clock for both. Token counts are each program's own: the "
           "prompt's include the images' and the chat template's; llama.cpp's prompt has one <__media__> line per "
           "image and its system message (-sys) ends in a newline of its own, so up to images more newline tokens. other load = CPU time of other processes over the "
           "machine's (/proc/stat less the measured program's own), during ocellus's phase / llama.cpp's whole run; "
           "busy: either above %.0f%% (not a clean row); llama.cpp cpu = its CPU share of %d threads over its run "
           "(model loading included)\n\n", dir, n_threads, 100 * BENCH_BUSY_SHARE, n_threads);
    printf("| files | case | what | llama.cpp | ocellus | ratio | other load, ocellus / llama.cpp | llama.cpp cpu |\n"
           "|---|---|---|---|---|---|---|---|\n");
    for (int r = 0; r < n; r++) {
        const bench_vlm_row *o = &rows[r];
        const bench_llama_run *t = &runs[r];
        char what[160], why_img[64] = "", why_prompt[96] = "";
        if (o->n_images > 0) {
            /* the image tokens decide whether the encoders did the same work; the prompt's, the text
             * model's: llama.cpp's prompt holds n - 1 more newlines (run_mtmd) and one more where its
             * -sys message ends (it formats the next message starting with a newline of its own) */
            int img_same = t->image_tokens == o->image_tokens, extra = t->prompt_tokens - o->prompt_tokens;
            int prompt_same = img_same && extra >= 0 && extra <= o->n_images;
            if (!img_same)
                snprintf(why_img, sizeof why_img, "image tokens %d vs %d", t->image_tokens, o->image_tokens);
            if (!img_same) snprintf(why_prompt, sizeof why_prompt, "%s", why_img);
            else if (!prompt_same)
                snprintf(why_prompt, sizeof why_prompt, "prompt tokens %d vs %d", t->prompt_tokens, o->prompt_tokens);
            if (img_same) snprintf(what, sizeof what, "vision encode (%d tok)", o->image_tokens);
            else snprintf(what, sizeof what, "vision encode (llama.cpp %d tok, ocellus %d)", t->image_tokens, o->image_tokens);
            line(o, what, t->vision_ms, o->vision_ms, "%.0f ms", 1, img_same ? NULL : why_img, o->other[BENCH_PH_VISION],
                 t->other, t->cpu_share);
            char toks[64];
            if (t->prompt_tokens == o->prompt_tokens) snprintf(toks, sizeof toks, "%d tok", o->prompt_tokens);
            else snprintf(toks, sizeof toks, "llama.cpp %d tok, ocellus %d", t->prompt_tokens, o->prompt_tokens);
            const char *why = prompt_same ? NULL : why_prompt;
            snprintf(what, sizeof what, "prefill after the encode (%s)", toks);
            line(o, what, t->prefill_tok_s, o->prefill_tok_s, "%.1f tok/s", 0, why, o->other[BENCH_PH_PREFILL], t->other,
                 t->cpu_share);
            snprintf(what, sizeof what, "time to first token (%s)", toks);
            line(o, what, t->ttft_ms, o->ttft_ms, "%.0f ms", 1, why, o->other[BENCH_PH_TTFT], t->other, t->cpu_share);
            if (t->decode_runs == o->n_decoded) snprintf(what, sizeof what, "decode (%d tok)", o->n_decoded);
            else snprintf(what, sizeof what, "decode (llama.cpp %d tok, ocellus %d)", t->decode_runs, o->n_decoded);
            line(o, what, t->decode_tok_s, o->decode_tok_s, "%.2f tok/s", 0, why, o->other[BENCH_PH_DECODE], t->other,
                 t->cpu_share);
        } else {
            if (o->prompt_tokens != pp) snprintf(why_prompt, sizeof why_prompt, "prompt tokens %d vs %d", pp, o->prompt_tokens);
            snprintf(what, sizeof what, "prefill (llama-bench pp%d; ocellus %d tok)", pp, o->prompt_tokens);
            line(o, what, t->pp_tok_s, o->prefill_tok_s, "%.1f tok/s", 0, o->prompt_tokens == pp ? NULL : why_prompt,
                 o->other[BENCH_PH_PREFILL], t->other, t->cpu_share);
            const char *why = NULL;
            if (t->tg_n == 0) {
                snprintf(what, sizeof what, "decode: not run (ocellus stopped after the first token)");
            } else if (t->tg_depth >= 0) {
                snprintf(what, sizeof what, "decode after %d tok (llama-bench tg%d -d %d; ocellus %d tok)", t->tg_depth,
                         t->tg_n, t->tg_depth, o->n_decoded);
                if (t->tg_depth != o->prompt_tokens || t->tg_n != o->n_decoded) why = "different context or length";
            } else {
                snprintf(what, sizeof what, "decode: llama.cpp from an empty context (llama-bench tg%d, no -d), ocellus "
                         "after %d tok", t->tg_n, o->prompt_tokens);
                why = "llama.cpp's context was empty";
            }
            line(o, what, t->tg_tok_s, o->decode_tok_s, "%.2f tok/s", 0, why, o->other[BENCH_PH_DECODE], t->other_tg,
                 t->cpu_share_tg);
        }
    }
    fflush(stdout);
}
