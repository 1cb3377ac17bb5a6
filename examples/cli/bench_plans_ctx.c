/* bench_plans_ctx.c: `ocellus bench plans --context LIST`: dense attention and each given plan on the
 * language model alone at long contexts (16K-64K prompt tokens), where sparsity matters most: per
 * context length, prefill time (and its attention, index estimation, scoring and selection), decode
 * tok/s and the KV cache held, each plan against dense, with the ideal speedups of bench_plans.c.
 *
 * The prompt (synthetic, the same for every configuration): images of 16 x 16 merged tokens (a
 * 448 x 448 picture on Qwen2-VL), each after 8 text tokens, then 64 text tokens of question; image
 * rows are random embeddings (4,096 distinct rows, reused), text tokens random ids, M-RoPE positions
 * as the prompt builder gives them (an image's rows share t, h and w follow its grid). No vision
 * encoder runs: it costs the same for every plan, and at 64K tokens it would dominate the run.
 * A random model gives attention no structure, so this measures time and memory, not accuracy;
 * MMInference's index is still chosen per prompt (its cost is the same whatever it chooses).
 *
 * Pairing as in bench_plans.c: every repetition runs every configuration in turn, the order reversed
 * on odd repetitions; each number is the median over repetitions, each ratio the median of the
 * per-repetition ratios. Memory: per context length, one text context per configuration (all open at
 * once), the prompt's arrays and the logits, allocated before the first repetition. */
#include "bench.h"
#include "core/isa.h"
#include "core/pool.h"
#include "gguf/gguf.h"
#include "model/text_model.h"
#include "plan/plan.h"
#include "port.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CTX_MAX_REPS 100
#define IMG_SIDE 16          /* merged tokens per image side: 256 tokens */
#define TEXT_BEFORE_IMAGE 8  /* a "Picture N: " label and the vision markers */
#define QUESTION_TOKENS 64
#define DISTINCT_ROWS 4096   /* image embedding rows held (reused round robin) */

typedef struct ctx_rep {
    double prefill_ms, attn_ms, estimate_ms, score_ms, select_ms;
    double decode_ms, decode_attn_ms;
    double prefill_cpu_s, decode_cpu_s;   /* the process's CPU time (for shared machines, with -t 1) */
    double prefill_kept, prefill_skipped, decode_kept, decode_skipped;
} ctx_rep;

typedef struct ctx_cfg {
    const char *path;   /* NULL: dense */
    char name[64];
    oc_plan *plan;
    oc_text_ctx *tc;
    oc_token_layout *layout;
    size_t kv_held;
    ctx_rep rep[CTX_MAX_REPS];
} ctx_cfg;

typedef struct prompt {
    int32_t n, n_images;
    int32_t *ids, *pos_t, *pos_h, *pos_w;
    oc_token_span *spans;
    float *rows;        /* [DISTINCT_ROWS][n_embd] */
} prompt;

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double med(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double sdiv(double a, double b) { return b > 0.0 ? a / b : 0.0; }

static uint64_t xs(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void prompt_free(prompt *p) {
    free(p->ids);
    free(p->pos_t);
    free(p->pos_h);
    free(p->pos_w);
    free(p->spans);
    free(p->rows);
    memset(p, 0, sizeof *p);
}

/* n tokens: (8 text, 256 image) repeated, then text to the end (at least QUESTION_TOKENS). */
static int prompt_make(prompt *p, int32_t n, const oc_text_hparams *hp) {
    memset(p, 0, sizeof *p);
    int32_t per = TEXT_BEFORE_IMAGE + IMG_SIDE * IMG_SIDE;
    int32_t n_images = n > QUESTION_TOKENS ? (n - QUESTION_TOKENS) / per : 0;
    size_t d = (size_t)hp->n_embd;
    p->n = n;
    p->n_images = n_images;
    p->ids = malloc(sizeof(int32_t) * (size_t)n);
    p->pos_t = malloc(sizeof(int32_t) * (size_t)n);
    p->pos_h = malloc(sizeof(int32_t) * (size_t)n);
    p->pos_w = malloc(sizeof(int32_t) * (size_t)n);
    p->spans = malloc(sizeof(oc_token_span) * (size_t)(n_images + 1));
    p->rows = malloc(sizeof(float) * DISTINCT_ROWS * d);
    if (!p->ids || !p->pos_t || !p->pos_h || !p->pos_w || !p->spans || !p->rows) return 0;
    uint64_t s = 0x2545f4914f6cdd1dULL ^ (uint64_t)n;
    for (size_t i = 0; i < DISTINCT_ROWS * d; i++) p->rows[i] = (float)((double)(xs(&s) >> 11) / 9007199254740992.0 - 0.5) * 0.1f;
    int32_t i = 0, pos = 0, img_tok = 0, vocab = OC_MIN(hp->n_vocab, 100000);
    for (int32_t k = 0; k < n_images; k++) {
        for (int32_t t = 0; t < TEXT_BEFORE_IMAGE; t++, i++, pos++) {
            p->ids[i] = (int32_t)(xs(&s) % (uint64_t)vocab);
            p->pos_t[i] = p->pos_h[i] = p->pos_w[i] = pos;
        }
        p->spans[k].start = i;
        for (int32_t r = 0; r < IMG_SIDE; r++)
            for (int32_t c = 0; c < IMG_SIDE; c++, i++, img_tok++) {
                p->ids[i] = -1 - img_tok % DISTINCT_ROWS;   /* text_model.h: row -1 - id of embd */
                p->pos_t[i] = pos;
                p->pos_h[i] = pos + r;
                p->pos_w[i] = pos + c;
            }
        p->spans[k].end = i;
        pos += IMG_SIDE;
    }
    for (; i < n; i++, pos++) {
        p->ids[i] = (int32_t)(xs(&s) % (uint64_t)vocab);
        p->pos_t[i] = p->pos_h[i] = p->pos_w[i] = pos;
    }
    return 1;
}

static oc_text_batch batch_of(const prompt *p, int32_t s, int32_t n, const ctx_cfg *c, float *logits) {
    oc_text_batch b;
    memset(&b, 0, sizeof b);
    b.n_tokens = n;
    b.ids = p->ids + s;
    b.embd = p->rows;
    b.embd_indexed = 1;
    b.pos_t = p->pos_t + s;
    b.pos_h = p->pos_h + s;
    b.pos_w = p->pos_w + s;
    b.plan = c->plan ? &c->plan->stacks[OC_PLAN_DECODER] : NULL;
    b.layout = c->layout;
    b.logits = s + n == p->n ? logits : NULL;
    b.prompt_tokens = p->n;
    return b;
}

static double ms_of(uint64_t ns) { return (double)ns / 1e6; }

/* One repetition of one configuration: prefill the prompt (in chunks, or whole for a plan that
 * evicts), then n_new greedy decode steps. */
static int run_cfg(ctx_cfg *c, const prompt *p, const oc_text_hparams *hp, int32_t chunk, int n_new, float *logits,
                   ctx_rep *r) {
    oc_error e;
    oc_attn_stats as;
    memset(&as, 0, sizeof as);
    memset(r, 0, sizeof *r);
    oc_text_ctx_reset(c->tc);
    int whole = oc_text_ctx_prefills_by_layer(c->tc);
    int32_t B = whole || chunk <= 0 ? p->n : chunk;
    double c0 = oc_port_self_cpu_s();
    uint64_t t0 = oc_port_now_ns();
    for (int32_t s = 0; s < p->n; s += B) {
        oc_text_batch b = batch_of(p, s, OC_MIN(B, p->n - s), c, logits);
        if (oc_text_forward(c->tc, &b, &as, &e)) {
            fprintf(stderr, "ocellus bench plans: %s, prefill of %d tokens: %s\n", c->name, p->n, e.message);
            return 0;
        }
    }
    uint64_t t1 = oc_port_now_ns();
    double c1 = oc_port_self_cpu_s();
    oc_text_times tp = oc_text_ctx_times(c->tc);
    size_t cap;
    oc_text_ctx_kv_bytes(c->tc, &c->kv_held, &cap);
    oc_attn_stats after = as;
    int32_t tok = 0, pos = p->pos_t[p->n - 1] + 1;
    for (int32_t v = 1; v < hp->n_vocab; v++)
        if (logits[v] > logits[tok]) tok = v;
    oc_text_batch b;
    memset(&b, 0, sizeof b);
    b.n_tokens = 1;
    b.ids = &tok;
    b.pos_t = b.pos_h = b.pos_w = &pos;
    b.plan = c->plan ? &c->plan->stacks[OC_PLAN_DECODER] : NULL;
    b.logits = logits;
    double c2 = oc_port_self_cpu_s();
    uint64_t t2 = oc_port_now_ns();
    for (int k = 0; k < n_new; k++, pos++) {
        if (oc_text_forward(c->tc, &b, &as, &e)) {
            fprintf(stderr, "ocellus bench plans: %s, decode: %s\n", c->name, e.message);
            return 0;
        }
        tok = 0;
        for (int32_t v = 1; v < hp->n_vocab; v++)
            if (logits[v] > logits[tok]) tok = v;
    }
    uint64_t t3 = oc_port_now_ns();
    double c3 = oc_port_self_cpu_s();
    oc_text_times td = oc_text_ctx_times(c->tc);
    r->prefill_ms = ms_of(t1 - t0);
    r->attn_ms = ms_of(tp.attn_ns);
    r->estimate_ms = ms_of(tp.estimate_ns);
    r->score_ms = ms_of(tp.score_ns);
    r->select_ms = ms_of(tp.select_ns);
    r->decode_ms = ms_of(t3 - t2);
    r->decode_attn_ms = ms_of(td.attn_ns - tp.attn_ns);
    r->prefill_cpu_s = c0 >= 0 && c1 >= 0 ? c1 - c0 : 0.0;   /* -1: the OS does not say */
    r->decode_cpu_s = c2 >= 0 && c3 >= 0 ? c3 - c2 : 0.0;
    r->prefill_kept = (double)after.flops_kept;
    r->prefill_skipped = (double)after.flops_skipped;
    r->decode_kept = (double)(as.flops_kept - after.flops_kept);
    r->decode_skipped = (double)(as.flops_skipped - after.flops_skipped);
    return 1;
}

typedef double (*ctx_fn)(const ctx_rep *r, const ctx_rep *d, int n_new);

static double g_prefill(const ctx_rep *r, const ctx_rep *d, int n) { (void)d; (void)n; return r->prefill_ms; }
static double g_tok_s(const ctx_rep *r, const ctx_rep *d, int n) { (void)d; return sdiv(1000.0 * n, r->decode_ms); }
static double g_pkept(const ctx_rep *r, const ctx_rep *d, int n) {
    (void)n;
    return sdiv(r->prefill_kept, d->prefill_kept + d->prefill_skipped);
}
static double g_dkept(const ctx_rep *r, const ctx_rep *d, int n) {
    (void)n;
    return sdiv(r->decode_kept, d->decode_kept + d->decode_skipped);
}
static double g_prefill_x(const ctx_rep *r, const ctx_rep *d, int n) { (void)n; return sdiv(d->prefill_ms, r->prefill_ms); }
static double g_prefill_ideal(const ctx_rep *r, const ctx_rep *d, int n) {
    return sdiv(d->prefill_ms, d->prefill_ms - d->attn_ms * (1.0 - g_pkept(r, d, n)));
}
static double g_attn_x(const ctx_rep *r, const ctx_rep *d, int n) { (void)n; return sdiv(d->attn_ms, r->attn_ms); }
static double g_decode_x(const ctx_rep *r, const ctx_rep *d, int n) { (void)n; return sdiv(d->decode_ms, r->decode_ms); }
static double g_decode_ideal(const ctx_rep *r, const ctx_rep *d, int n) {
    return sdiv(d->decode_ms, d->decode_ms - d->decode_attn_ms * (1.0 - g_dkept(r, d, n)));
}
static double g_est_share(const ctx_rep *r, const ctx_rep *d, int n) { (void)d; (void)n; return sdiv(r->estimate_ms, r->prefill_ms); }
static double g_kv_share(const ctx_rep *r, const ctx_rep *d, int n) {
    (void)d; (void)n;
    return sdiv(r->score_ms + r->select_ms, r->prefill_ms);
}
static double g_pcpu(const ctx_rep *r, const ctx_rep *d, int n) { (void)d; (void)n; return r->prefill_cpu_s; }
static double g_pcpu_x(const ctx_rep *r, const ctx_rep *d, int n) { (void)n; return sdiv(d->prefill_cpu_s, r->prefill_cpu_s); }
static double g_dcpu(const ctx_rep *r, const ctx_rep *d, int n) { (void)d; return sdiv(1000.0 * r->decode_cpu_s, n); }
static double g_dcpu_x(const ctx_rep *r, const ctx_rep *d, int n) { (void)n; return sdiv(d->decode_cpu_s, r->decode_cpu_s); }
static double g_dec_attn(const ctx_rep *r, const ctx_rep *d, int n) { (void)d; return sdiv(r->decode_attn_ms, n); }

static double med_fn(const ctx_cfg *c, const ctx_cfg *dense, int n_reps, int n_new, ctx_fn f) {
    double v[CTX_MAX_REPS];
    for (int r = 0; r < n_reps; r++) v[r] = f(&c->rep[r], &dense->rep[r], n_new);
    return med(v, n_reps);
}

static void report(FILE *js, int first_json, const ctx_cfg *cf, int n_cfg, int32_t n_tokens, int32_t n_images,
                   int n_reps, int n_new) {
    printf("\n%d prompt tokens (%d images of %d tokens):\n\n", n_tokens, n_images, IMG_SIDE * IMG_SIDE);
    printf("| plan | prefill s | x dense | ideal | attn x | estimate | scoring+select | kept | decode tok/s | x dense "
           "| ideal | dec attn ms/tok | dec kept | KV MiB | KV of dense |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n_cfg; i++) {
        const ctx_cfg *c = &cf[i], *d = &cf[0];
        double pf = med_fn(c, d, n_reps, n_new, g_prefill), px = med_fn(c, d, n_reps, n_new, g_prefill_x);
        double pi = med_fn(c, d, n_reps, n_new, g_prefill_ideal), ax = med_fn(c, d, n_reps, n_new, g_attn_x);
        double es = med_fn(c, d, n_reps, n_new, g_est_share), ks = med_fn(c, d, n_reps, n_new, g_kv_share);
        double pk = med_fn(c, d, n_reps, n_new, g_pkept), ts = med_fn(c, d, n_reps, n_new, g_tok_s);
        double dx = med_fn(c, d, n_reps, n_new, g_decode_x), di = med_fn(c, d, n_reps, n_new, g_decode_ideal);
        double da = med_fn(c, d, n_reps, n_new, g_dec_attn), dk = med_fn(c, d, n_reps, n_new, g_dkept);
        double kv = (double)c->kv_held / 1048576.0, kvs = sdiv((double)c->kv_held, (double)d->kv_held);
        printf("| %s | %.2f | %.2fx | %.2fx | %.2fx | %.1f%% | %.1f%% | %.1f%% | %.2f | %.2fx | %.2fx | %.3f | %.1f%% | "
               "%.1f | %.1f%% |\n", c->name, pf / 1000.0, px, pi, ax, 100.0 * es, 100.0 * ks, 100.0 * pk, ts, dx, di, da,
               100.0 * dk, kv, 100.0 * kvs);
        if (js)
            fprintf(js, "%s{\"prompt_tokens\":%d,\"images\":%d,\"plan\":\"%s\",\"prefill_ms\":%.3f,\"prefill_speedup\":%.4f,"
                    "\"prefill_ideal_speedup\":%.4f,\"prefill_attn_speedup\":%.4f,\"prefill_estimate_share\":%.5f,"
                    "\"prefill_score_select_share\":%.5f,\"prefill_flops_kept_share\":%.6f,\"decode_tok_per_s\":%.3f,"
                    "\"decode_speedup\":%.4f,\"decode_ideal_speedup\":%.4f,\"decode_attn_ms_per_token\":%.4f,"
                    "\"decode_flops_kept_share\":%.6f,\"kv_held_mib\":%.3f,\"kv_share_of_dense\":%.6f,"
                    "\"prefill_cpu_s\":%.3f,\"prefill_cpu_speedup\":%.4f,\"decode_cpu_ms_per_token\":%.4f,"
                    "\"decode_cpu_speedup\":%.4f}",
                    first_json && i == 0 ? "" : ",", n_tokens, n_images, c->name, pf, px, pi, ax, es, ks, pk, ts, dx, di,
                    da, dk, kv, kvs, med_fn(c, d, n_reps, n_new, g_pcpu), med_fn(c, d, n_reps, n_new, g_pcpu_x),
                    med_fn(c, d, n_reps, n_new, g_dcpu), med_fn(c, d, n_reps, n_new, g_dcpu_x));
    }
    /* CPU time: on a shared machine the wall times above carry the time other processes held the
     * cores; the process's own CPU time does not (with -t 1; more threads add their brief spins at
     * each barrier), though it still carries what they do to the caches and memory bandwidth */
    printf("\nthe same in this process's CPU time (with -t 1 the time other processes held the core drops out):\n\n"
           "| plan | prefill CPU s | x dense | decode CPU ms/tok | x dense |\n|---|---|---|---|---|\n");
    for (int i = 0; i < n_cfg; i++)
        printf("| %s | %.2f | %.2fx | %.2f | %.2fx |\n", cf[i].name, med_fn(&cf[i], &cf[0], n_reps, n_new, g_pcpu),
               med_fn(&cf[i], &cf[0], n_reps, n_new, g_pcpu_x), med_fn(&cf[i], &cf[0], n_reps, n_new, g_dcpu),
               med_fn(&cf[i], &cf[0], n_reps, n_new, g_dcpu_x));
    fflush(stdout);
}

int bench_plans_context(const char *text_path, const char *const *plan_paths, int n_plans, const char *ctx_list,
                        int n_threads, int n_reps, int32_t chunk, int n_new, const char *json_path) {
    int32_t ctx[8];
    int n_ctx = 0;
    for (const char *p = ctx_list; *p;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (n_ctx == 8 || end == p || errno || v < 1024 || v > (1 << 20) || (*end && *end != ',')) {
            fprintf(stderr, "ocellus bench plans: bad --context list '%s' (up to 8 lengths, each 1024..1048576)\n", ctx_list);
            return 2;
        }
        ctx[n_ctx++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (n_ctx == 0 || n_reps > CTX_MAX_REPS) {
        fprintf(stderr, "ocellus bench plans: --context needs a length, and at most %d --reps\n", CTX_MAX_REPS);
        return 2;
    }
    oc_error e;
    oc_gguf *g = NULL;
    oc_text_model *m = NULL;
    oc_pool *pool = NULL;
    float *logits = NULL;
    FILE *js = NULL;
    int n_cfg = n_plans + 1, rc = 1;
    ctx_cfg *cf = calloc((size_t)n_cfg, sizeof *cf);
    prompt pr;
    memset(&pr, 0, sizeof pr);
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    if (!cf) { fprintf(stderr, "ocellus bench plans: out of memory\n"); return 1; }
    if (n_threads <= 0) n_threads = oc_port_n_cpus();
    if (oc_gguf_open(&g, text_path, NULL, &e) || oc_text_model_load(&m, g, text_path, NULL, &e) ||
        oc_pool_open(&pool, n_threads, NULL, &e)) {
        fprintf(stderr, "ocellus bench plans: %s\n", e.message);
        goto done;
    }
    const oc_text_hparams *hp = &m->hp;
    oc_plan_model_shape shape = { { hp->n_layers, hp->n_head, hp->n_head_kv, hp->head_dim }, { 0, 0, 0, 0 } };
    snprintf(cf[0].name, sizeof cf[0].name, "dense");
    for (int i = 0; i < n_plans; i++) {
        cf[i + 1].path = plan_paths[i];
        bench_plan_short_name(plan_paths[i], cf[i + 1].name, sizeof cf[i + 1].name);
        if (oc_plan_load_file(&cf[i + 1].plan, plan_paths[i], NULL, &e) || oc_plan_check_fits(cf[i + 1].plan, &shape, &e)) {
            fprintf(stderr, "ocellus bench plans: %s\n", e.message);
            goto done;
        }
    }
    if (!(logits = malloc(sizeof(float) * (size_t)hp->n_vocab))) { fprintf(stderr, "ocellus bench plans: out of memory\n"); goto done; }
    if (json_path && !(js = fopen(json_path, "w"))) {
        fprintf(stderr, "ocellus bench plans: cannot write %s: %s\n", json_path, strerror(errno));
        goto done;
    }
    char cpu_name[128], chunk_text[24];
    bench_cpu_name(cpu_name, sizeof cpu_name);
    if (chunk > 0) snprintf(chunk_text, sizeof chunk_text, "%d", (int)chunk);
    else snprintf(chunk_text, sizeof chunk_text, "all the prompt's");
    printf("ocellus bench plans --context %s: %s (%d layers, %d heads, %d kv heads x %d), CPU %s, %d threads, "
           "%d reps, prefill chunks of %s tokens, %d decode steps; medians, ratios paired per rep\n",
           ctx_list, text_path, hp->n_layers, hp->n_head, hp->n_head_kv, hp->head_dim, cpu_name, n_threads, n_reps,
           chunk_text, n_new);
    char model_name[64];
    bench_plan_short_name(text_path, model_name, sizeof model_name);
    for (char *q = cpu_name; *q; q++)
        if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20) *q = '_';
    if (js) fprintf(js, "{\"bench\":\"plans-context\",\"model\":\"%s\",\"cpu\":\"%s\",\"threads\":%d,\"reps\":%d,"
                    "\"prefill_chunk\":%d,\"decode_steps\":%d,\"rows\":[", model_name, cpu_name, n_threads, n_reps, chunk, n_new);
    for (int ci = 0; ci < n_ctx; ci++) {
        int32_t n = ctx[ci];
        if (!prompt_make(&pr, n, hp)) { fprintf(stderr, "ocellus bench plans: out of memory\n"); goto done; }
        for (int i = 0; i < n_cfg; i++) {
            oc_text_limits lim = { n + n_new + 1, chunk > 0 ? OC_MIN(chunk, n) : n, cf[i].plan, n_new + 1 };
            if (oc_text_ctx_open(&cf[i].tc, m, &lim, pool, oc_isa_best(&cpu), NULL, &e) ||
                (cf[i].plan && pr.n_images &&
                 oc_layout_build(&cf[i].layout, n, pr.spans, pr.n_images,
                                 (float)cf[i].plan->sink_fraction_ppm / (float)OC_PLAN_PPM, NULL, &e))) {
                fprintf(stderr, "ocellus bench plans: %s at %d tokens: %s\n", cf[i].name, n, e.message);
                goto done;
            }
        }
        for (int r = 0; r < n_reps; r++) {
            for (int k = 0; k < n_cfg; k++) {
                int i = r % 2 ? n_cfg - 1 - k : k;
                if (!run_cfg(&cf[i], &pr, hp, chunk, n_new, logits, &cf[i].rep[r])) goto done;
                fprintf(stderr, "\r%d tokens: rep %d/%d, %s        ", n, r + 1, n_reps, cf[i].name);
            }
        }
        fprintf(stderr, "\n");
        report(js, ci == 0, cf, n_cfg, n, pr.n_images, n_reps, n_new);
        for (int i = 0; i < n_cfg; i++) {
            oc_text_ctx_close(cf[i].tc);
            oc_layout_free(cf[i].layout);
            cf[i].tc = NULL;
            cf[i].layout = NULL;
        }
        prompt_free(&pr);
    }
    printf("\nx dense: dense time / plan time (paired per rep); ideal: Amdahl's bound from dense's attention share\n"
           "and the plan's kept attention FLOPs; estimate: MMInference's index estimation, scoring+select:\n"
           "SparseMM / ZipVL, as shares of the plan's prefill; kept: attention FLOPs kept of dense's; KV: held\n"
           "after prefill. Synthetic prompt and random embeddings: time and memory only.\n");
    rc = 0;
done:
    if (js) {
        fprintf(js, "]}\n");
        if (fclose(js) != 0 && rc == 0) { fprintf(stderr, "ocellus bench plans: cannot write %s\n", json_path); rc = 1; }
    }
    for (int i = 0; cf && i < n_cfg; i++) {
        oc_text_ctx_close(cf[i].tc);
        oc_layout_free(cf[i].layout);
        oc_plan_free(cf[i].plan);
    }
    free(cf);
    prompt_free(&pr);
    free(logits);
    oc_pool_close(pool);
    oc_text_model_free(m);
    oc_gguf_close(g);
    return rc;
}
