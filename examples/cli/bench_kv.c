/* bench_kv.c: `ocellus bench vlm -m TEXT --kv-context 4096,16384`: KV cache bytes and decode speed
 * of the language model at long contexts with each KV cache method of the plan format, against the
 * dense cache, in one run:
 *   dense          no plan
 *   sparsemm-10%   every kv head's budget 10% of the context (window 32 included; uniform, since a
 *                  random model has no visual-head scores to split it by, sparsemm.txt Eq. 5-9)
 *   zipvl          tau 0.975 on every layer (zipvl.txt Sec. 5.3.2)
 *   lazy-half      Q-Cache GLA groups (0-1), (2-3), ...: half the layers reuse their group's Q/K
 * Each context is opened with room for the decode steps after the prompt (max_answer_tokens), so a
 * SparseMM layer's cache is allocated at its budget + that room plus one staging slot of the
 * context for the layer being prefilled (kvcache/kv_cache.h "Memory"); the table gives the bytes
 * held, the KV buffers allocated and the whole text context (weights excluded: mapped).
 * The context is stood in the cache by oc_text_ctx_bench_fill (random f16 keys and values; key
 * importance heavy-tailed, Zipf exponent 1.1 over a random order of the tokens) instead of a prefill:
 * a 16K-token prefill of the 2B model takes about ten minutes on two cores. So this measures what
 * the cache's size does to decoding, not accuracy. Rounds run every method in turn, so a slow
 * moment of a shared machine hits all of them (after one untimed warm-up, each round starts with
 * the next method); the table gives medians over rounds, the speed-up the median of the per-round
 * ratios to dense. */
#include "bench.h"
#include "core/f16.h"
#include "core/isa.h"
#include "core/pool.h"
#include "gguf/gguf.h"
#include "model/text_model.h"
#include "plan/plan.h"
#include "port.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_METHODS 4
#define MAX_CTX 8
#define MAX_ROUNDS 15

static const char *const method_names[N_METHODS] = { "dense", "sparsemm-10%", "zipvl tau 0.975", "lazy-half gla" };

static oc_plan *method_plan(int method, const oc_text_hparams *hp, int32_t n_ctx) {
    if (method == 0) return NULL;
    oc_plan_shape sh = { hp->n_layers, hp->n_head, hp->n_head_kv, hp->head_dim };
    oc_plan *p = NULL;
    oc_error e;
    if (oc_plan_create(&p, &sh, NULL, NULL, &e)) return NULL;
    oc_stack_plan *s = &p->stacks[OC_PLAN_DECODER];
    for (int32_t l = 0; l < hp->n_layers; l++) {
        if (method == 1)
            for (int32_t g = 0; g < hp->n_head_kv; g++)
                s->kv_budget_tokens[l * hp->n_head_kv + g] = OC_MAX(p->kv_window_tokens, n_ctx / 10);
        if (method == 2) s->zipvl_tau_ppm[l] = 975000;
        if (method == 3 && l % 2 == 0 && l + 1 < hp->n_layers &&
            oc_plan_add_lazy_group(p, OC_PLAN_DECODER, l, l + 1, OC_LAZY_GLA, &e)) {
            oc_plan_free(p);
            return NULL;
        }
    }
    return p;
}

static double median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct kv_result {
    double tok_s[MAX_ROUNDS];
    size_t held, capacity, context;   /* KV held, KV buffers (allocated), the whole text context */
} kv_result;

/* One context length, one method, one round: fill, then n_new greedy decode steps, timed. */
static int run_one(const oc_text_model *m, oc_pool *pool, oc_isa isa, int method, int32_t n_ctx, const uint16_t *rows,
                   const double *mass, int n_new, float *logits, kv_result *out, int round) {
    const oc_text_hparams *hp = &m->hp;
    oc_plan *plan = method_plan(method, hp, n_ctx);
    oc_text_limits lim = { n_ctx + n_new + 1, 1, plan, n_new + 1 };
    oc_text_ctx *c = NULL;
    oc_error e;
    int ok = 0;
    if (method && !plan) { fprintf(stderr, "ocellus bench vlm: cannot build the %s plan\n", method_names[method]); return 0; }
    if (oc_text_ctx_open(&c, m, &lim, pool, isa, NULL, &e) || oc_text_ctx_bench_fill(c, rows, mass, n_ctx, &e)) {
        fprintf(stderr, "ocellus bench vlm: %s at %d tokens: %s\n", method_names[method], n_ctx, e.message);
        goto done;
    }
    int32_t tok = hp->n_vocab / 2, pos;   /* any id: the model is random */
    oc_text_batch b;
    memset(&b, 0, sizeof b);
    b.n_tokens = 1;
    b.ids = &tok;
    b.pos_t = b.pos_h = b.pos_w = &pos;
    b.logits = logits;
    uint64_t t0 = oc_port_now_ns();
    for (int k = 0; k < n_new; k++) {
        pos = n_ctx + k;
        if (oc_text_forward(c, &b, NULL, &e)) {
            fprintf(stderr, "ocellus bench vlm: %s decode: %s\n", method_names[method], e.message);
            goto done;
        }
        int32_t best = 0;
        for (int32_t v = 1; v < hp->n_vocab; v++)
            if (logits[v] > logits[best]) best = v;
        tok = best;
    }
    out->tok_s[round] = n_new / ((double)(oc_port_now_ns() - t0) * 1e-9);
    oc_text_ctx_kv_bytes(c, &out->held, &out->capacity);
    oc_backend_spec spec = { OC_BACKEND_KIND_CPU, NULL, pool, isa, NULL };
    out->context = oc_text_ctx_bytes(m, &lim, &spec, pool ? oc_pool_n_threads(pool) : 1);
    ok = 1;
done:
    oc_text_ctx_close(c);
    oc_plan_free(plan);
    return ok;
}

int bench_vlm_kv(const char *text_path, int n_threads, const char *ctx_list, int n_new, int n_rounds) {
    int32_t ctx[MAX_CTX];
    int n_ctx = 0;
    for (const char *p = ctx_list; *p && n_ctx < MAX_CTX;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 64 || v > 1 << 20 || (*end && *end != ',')) {
            fprintf(stderr, "ocellus bench vlm: bad --kv-context list '%s'\n", ctx_list);
            return 2;
        }
        ctx[n_ctx++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (n_rounds < 1 || n_rounds > MAX_ROUNDS || n_new < 1) {
        fprintf(stderr, "ocellus bench vlm: --rounds 1..%d and -n >= 1\n", MAX_ROUNDS);
        return 2;
    }
    oc_error e;
    oc_gguf *g = NULL;
    oc_text_model *m = NULL;
    oc_pool *pool = NULL;
    float *logits = NULL;
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    int rc = 1;
    if (oc_gguf_open(&g, text_path, NULL, &e) || oc_text_model_load(&m, g, text_path, NULL, &e) ||
        oc_pool_open(&pool, n_threads, NULL, &e)) {
        fprintf(stderr, "ocellus bench vlm: %s\n", e.message);
        goto done;
    }
    const oc_text_hparams *hp = &m->hp;
    char cpu_name[128];
    bench_cpu_name(cpu_name, sizeof cpu_name);
    printf("ocellus bench vlm --kv-context %s: %s, %d layers, %d kv heads x %d, %d threads, CPU %s\n"
           "%d decode steps per method and round, %d rounds; cache stood in by bench fill (no prefill)\n",
           ctx_list, text_path, hp->n_layers, hp->n_head_kv, hp->head_dim, n_threads, cpu_name, n_new, n_rounds);
    size_t kvd = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
    for (int ci = 0; ci < n_ctx; ci++) {
        int32_t n = ctx[ci];
        uint16_t *rows = malloc((size_t)n * kvd * 2);
        double *mass = malloc(sizeof(double) * (size_t)n);
        int32_t *order = malloc(sizeof(int32_t) * (size_t)n);
        kv_result res[N_METHODS];
        memset(res, 0, sizeof res);
        if (!rows || !mass || !order || !logits) { free(rows); free(mass); free(order); fprintf(stderr, "out of memory\n"); goto done; }
        uint64_t s = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n;
        for (size_t i = 0; i < (size_t)n * kvd; i++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            rows[i] = oc_f32_to_f16((float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1));
        }
        for (int32_t j = 0; j < n; j++) order[j] = j;
        for (int32_t j = n - 1; j > 0; j--) {   /* random order, then Zipf(1.1) mass by rank */
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            int32_t k = (int32_t)(s % (uint64_t)(j + 1)), t = order[j];
            order[j] = order[k];
            order[k] = t;
        }
        for (int32_t r = 0; r < n; r++) mass[order[r]] = pow((double)r + 1, -1.1);
        /* warm-up (weights paged in, caches of this length touched once), not counted; then each
         * round starts with another method so none always runs first */
        if (!run_one(m, pool, oc_isa_best(&cpu), 0, n, rows, mass, OC_MIN(n_new, 4), logits, &res[0], 0)) {
            free(rows); free(mass); free(order);
            goto done;
        }
        for (int round = 0; round < n_rounds; round++)
            for (int i = 0, k; i < N_METHODS; i++)
                if (k = (i + round) % N_METHODS,
                    !run_one(m, pool, oc_isa_best(&cpu), k, n, rows, mass, n_new, logits, &res[k], round)) {
                    free(rows); free(mass); free(order);
                    goto done;
                }
        printf("\n%d tokens of context:\n\n| method | KV held MiB | of dense | KV buffers MiB | of dense | text context MiB | "
               "decode tok/s (median) | speed-up vs dense (median of rounds) | rounds tok/s |\n"
               "|---|---|---|---|---|---|---|---|---|\n", n);
        for (int k = 0; k < N_METHODS; k++) {
            double ratio[MAX_ROUNDS], t[MAX_ROUNDS];
            char all[256];
            size_t used = 0;
            all[0] = 0;
            for (int r = 0; r < n_rounds; r++) {
                ratio[r] = res[k].tok_s[r] / res[0].tok_s[r];
                t[r] = res[k].tok_s[r];
                used += (size_t)snprintf(all + used, used < sizeof all ? sizeof all - used : 0, "%s%.2f", r ? " " : "", t[r]);
            }
            printf("| %s | %.1f | %.1f%% | %.1f | %.1f%% | %.1f | %.2f | %.2fx | %s |\n", method_names[k],
                   (double)res[k].held / 1048576.0, 100.0 * (double)res[k].held / (double)res[0].held,
                   (double)res[k].capacity / 1048576.0, 100.0 * (double)res[k].capacity / (double)res[0].capacity,
                   (double)res[k].context / 1048576.0,
                   median(t, n_rounds), median(ratio, n_rounds), all);
        }
        fflush(stdout);
        free(rows);
        free(mass);
        free(order);
    }
    rc = 0;
done:
    free(logits);
    oc_pool_close(pool);
    oc_text_model_free(m);
    oc_gguf_close(g);
    return rc;
}
