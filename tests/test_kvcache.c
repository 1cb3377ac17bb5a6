/* test_kvcache.c: the shrinking KV cache against explicit references. Each paper's token rule is
 * written here a second time, naively (the whole attention matrix in double, a full sort), and the
 * runtime's choice (kv_select.c: scores accumulated per query row, a heap ranking) must keep
 * exactly the same tokens; compaction must move exactly those rows; decoding over the compacted
 * cache must equal dense attention over the whole cache with the dropped keys masked; the policy
 * must apply the rules of kv_cache.h and refuse the impossible combinations with their lines. */
#include "check.h"
#include "attention/attn.h"
#include "core/f16.h"
#include "core/isa.h"
#include "core/pool.h"
#include "kvcache/kv_cache.h"
#include "kvcache/kv_select.h"
#include "port.h"

#include <stdint.h>
#include <stdlib.h>

#define MAXN 700
#define HD 16

/* A random problem: n tokens, n_head query heads over n_kv kv heads, q and k post-RoPE as f32,
 * the cache's keys as f16 (what the runtime scores). Keys get a per-token scale so attention is
 * peaked, the regime where eviction is meaningful, and scores are well apart. */
typedef struct problem {
    int32_t n, n_head, n_kv;
    float q[MAXN * 4 * HD];
    uint16_t k[MAXN * 2 * HD];
    float v[MAXN * 2 * HD];
} problem;

static void make_problem(problem *p, check_rng *r, int32_t n, int32_t n_head, int32_t n_kv) {
    p->n = n;
    p->n_head = n_head;
    p->n_kv = n_kv;
    for (int32_t i = 0; i < n * n_head * HD; i++) p->q[i] = check_rng_uniform(r, -1, 1);
    for (int32_t j = 0; j < n; j++) {
        float s = check_rng_uniform(r, 0.2f, 2.5f);
        for (int32_t e = 0; e < n_kv * HD; e++) {
            p->k[j * n_kv * HD + e] = oc_f32_to_f16(s * check_rng_uniform(r, -1, 1));
            p->v[j * n_kv * HD + e] = check_rng_uniform(r, -1, 1);
        }
    }
}

/* Naive softmax row of query i (head h) over keys 0..n-1 with the causal mask of Eq. 12 as -inf
 * logits, in double: A[j], zero where masked. */
static void naive_row(const problem *p, int32_t i, int32_t h, double *A) {
    int32_t g = h / (p->n_head / p->n_kv);
    double mx = -INFINITY, sum = 0;
    for (int32_t j = 0; j < p->n; j++) {
        double s = -INFINITY;
        if (j <= i) {
            s = 0;
            for (int32_t d = 0; d < HD; d++)
                s += (double)p->q[(i * p->n_head + h) * HD + d] * (double)oc_f16_to_f32(p->k[(j * p->n_kv + g) * HD + d]);
            s /= sqrt((double)HD);
        }
        A[j] = s;
        if (s > mx) mx = s;
    }
    for (int32_t j = 0; j < p->n; j++) sum += A[j] = A[j] == -INFINITY ? 0.0 : exp(A[j] - mx);
    for (int32_t j = 0; j < p->n; j++) A[j] /= sum;
}

/* The top t of key[0..m) by value, ties to the lower index, by repeated full scans (no heap). */
static void naive_top(const double *key, int32_t m, int32_t t, uint8_t *mark) {
    for (int32_t k = 0; k < t; k++) {
        int32_t best = -1;
        for (int32_t j = 0; j < m; j++)
            if (!mark[j] && (best < 0 || key[j] > key[best])) best = j;
        mark[best] = 1;
    }
}

static oc_kv_rows rows_of(const problem *p, const int32_t *pos, int32_t n_q, const float *q_rows) {
    oc_kv_rows r;
    memset(&r, 0, sizeof r);
    r.q = q_rows;
    r.q_stride_token = (int64_t)p->n_head * HD;
    r.q_stride_head = HD;
    r.q_pos = pos;
    r.n_q = n_q;
    r.k_f16 = p->k;
    r.k_stride_token = (int64_t)p->n_kv * HD;
    r.k_stride_head = HD;
    r.n_head = p->n_head;
    r.n_head_kv = p->n_kv;
    r.head_dim = HD;
    r.scale = 1.0f / sqrtf((float)HD);
    return r;
}

/* Scoring scratch for every test here (checked against oc_kv_score_scratch_bytes), and the
 * attention kernels of the best ISA this CPU runs. */
static _Alignas(64) unsigned char score_scratch[1 << 22];   /* the kept logits: 520 bytes per key and kv head */

static const oc_attn_kernels *best_kernels(void) {
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    return oc_attn_kernels_for(oc_isa_best(&cpu));
}

static void score(const oc_kv_rows *rows, double *acc, int64_t stride) {
    if (oc_kv_score_scratch_bytes(rows->n_head, rows->n_head_kv, rows->q_pos[rows->n_q - 1] + 1, rows->head_dim, 1) >
        sizeof score_scratch) {
        CHECKF(0, "score scratch too small");
        return;
    }
    oc_kv_score_rows(rows, acc, stride, score_scratch, best_kernels(), NULL);
}

/* oc_kv_score_rows against the softmax rows in double, directly: f16 and f32 keys, per kv head
 * and summed (stride 0), group sizes 1-4, head dims that are and are not multiples of 8, key
 * counts over several blocks, the window's rows and spread-out probe rows, on every ISA table that
 * runs here and on pools of 1-3 threads. acc starts at random values (the call adds), the scratch
 * is poisoned with NaN bytes first. Float logits and exp: each entry within SCORE_REL of the
 * double sum (observed at most 4e-7 here, scalar and AVX2 tables; the bound in kv_select.h), and
 * NaN never passes. */
#define SCORE_MAXN 700
#define SCORE_HD 64
#define SCORE_REL 2e-6

typedef struct score_case {
    int32_t n, n_head, n_kv, hd, f32_keys;
    float q[SCORE_MAXN * 8 * SCORE_HD], k32[SCORE_MAXN * 2 * SCORE_HD];
    uint16_t k16[SCORE_MAXN * 2 * SCORE_HD];
} score_case;

static oc_kv_rows score_rows(const score_case *t, const int32_t *pos, int32_t n_q) {
    oc_kv_rows r;
    memset(&r, 0, sizeof r);
    r.q_stride_head = t->hd;
    r.q_pos = pos;
    r.n_q = n_q;
    if (t->f32_keys) r.k_f32 = t->k32;
    else r.k_f16 = t->k16;
    r.k_stride_token = (int64_t)t->n_kv * t->hd;
    r.k_stride_head = t->hd;
    r.n_head = t->n_head;
    r.n_head_kv = t->n_kv;
    r.head_dim = t->hd;
    r.scale = 1.0f / sqrtf((float)t->hd);
    return r;
}

/* Row i of a call is the q of the token at pos[i], copied out as the runtime does (text_kv.c). */
static void run_score(const score_case *t, const int32_t *pos, int32_t n_q, double *acc, int64_t stride,
                      const oc_attn_kernels *kn, oc_pool *pool) {
    static float rows_q[128 * 8 * SCORE_HD];
    size_t d = (size_t)t->n_head * t->hd;
    for (int32_t i = 0; i < n_q; i++) memcpy(rows_q + i * d, t->q + (size_t)pos[i] * d, d * sizeof(float));
    oc_kv_rows r = score_rows(t, pos, n_q);
    r.q = rows_q;
    r.q_stride_token = (int64_t)d;
    size_t need = oc_kv_score_scratch_bytes(t->n_head, t->n_kv, pos[n_q - 1] + 1, t->hd, oc_pool_n_threads(pool));
    if (need > sizeof score_scratch) {
        CHECKF(0, "score scratch %zu > %zu", need, sizeof score_scratch);
        return;
    }
    memset(score_scratch, 0xff, need);
    oc_kv_score_rows(&r, acc, stride, score_scratch, kn, pool);
}

/* contrib[g * stride + j] += the softmax rows of pos[0..n_q) in double (rows consecutive tokens). */
static void naive_score(const score_case *t, const int32_t *pos, int32_t n_q, double *contrib, int64_t stride) {
    static double s[SCORE_MAXN];
    int32_t group = t->n_head / t->n_kv;
    for (int32_t i = 0; i < n_q; i++)
        for (int32_t h = 0; h < t->n_head; h++) {
            int32_t g = h / group, n = pos[i] + 1;
            double mx = -INFINITY, sum = 0;
            for (int32_t j = 0; j < n; j++) {
                double d = 0;
                for (int32_t e = 0; e < t->hd; e++) {
                    size_t at = ((size_t)j * t->n_kv + g) * t->hd + e;
                    double kv = t->f32_keys ? (double)t->k32[at] : (double)oc_f16_to_f32(t->k16[at]);
                    d += (double)t->q[((size_t)pos[i] * t->n_head + h) * t->hd + e] * kv;
                }
                s[j] = d / sqrt((double)t->hd);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int32_t j = 0; j < n; j++) sum += s[j] = exp(s[j] - mx);
            for (int32_t j = 0; j < n; j++) contrib[g * stride + j] += s[j] / sum;
        }
}

static void test_score_rows_match_naive(void) {
    static score_case t;
    static double base[2 * SCORE_MAXN], contrib[2 * SCORE_MAXN], acc[2 * SCORE_MAXN], acc1[2 * SCORE_MAXN];
    static int32_t pos[128];
    static const int32_t heads[][2] = { { 2, 2 }, { 4, 2 }, { 6, 2 }, { 8, 2 } }, hds[] = { 16, 20, 64 };
    check_rng r = { 0x5c0e5u };
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    oc_pool *pools[3] = { NULL, NULL, NULL };
    for (int i = 0; i < 3; i++) REQUIRE(oc_pool_open(&pools[i], i + 1, NULL, NULL) == OC_OK);
    double worst = 0;
    int n_runs = 0;
    /* under an emulator (check_emulated) fewer trials: the scorer's NEON micro-kernels, one probe row
     * per call, cost about 5 s a trial under qemu-aarch64; 4 still cover every head grouping, both
     * key types and row kinds */
    int n_trials = check_emulated() ? 4 : 16;
    for (int trial = 0; trial < n_trials; trial++) {
        t.n = check_rng_int(&r, trial < 4 ? 2 : 40, SCORE_MAXN);
        t.n_head = heads[trial % 4][0];
        t.n_kv = heads[trial % 4][1];
        t.hd = hds[trial % 3];
        t.f32_keys = trial / 2 % 2;
        for (int32_t i = 0; i < t.n * t.n_head * t.hd; i++) t.q[i] = check_rng_uniform(&r, -1, 1);
        for (int32_t j = 0; j < t.n; j++) {
            float sc = check_rng_uniform(&r, 0.2f, 2.5f);
            for (int32_t e = 0; e < t.n_kv * t.hd; e++) {
                float v = sc * check_rng_uniform(&r, -1, 1);
                t.k16[j * t.n_kv * t.hd + e] = oc_f32_to_f16(v);
                t.k32[j * t.n_kv * t.hd + e] = v;
            }
        }
        /* the window (its last up to 32 tokens) or every third token from a random start (probes) */
        int32_t n_q = 0, probes = trial % 2;
        if (probes)
            for (int32_t p = check_rng_int(&r, 0, t.n - 1); p < t.n && n_q < 128; p += 3) pos[n_q++] = p;
        else
            for (int32_t p = OC_MAX(0, t.n - 32); p < t.n; p++) pos[n_q++] = p;
        int64_t stride = probes ? 0 : SCORE_MAXN;
        for (int32_t j = 0; j < 2 * SCORE_MAXN; j++) base[j] = check_rng_uniform(&r, 0, 1), contrib[j] = 0;
        naive_score(&t, pos, n_q, contrib, stride);
        for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
            if (!oc_isa_runs((oc_isa)isa, &cpu) || !oc_attn_kernels_for((oc_isa)isa)) continue;
            const oc_attn_kernels *kn = oc_attn_kernels_for((oc_isa)isa);
            for (int pi = -1; pi < 3; pi++) {   /* no pool, then 1, 2, 3 threads */
                memcpy(acc, base, sizeof acc);
                if (pi != 1 || n_q < 2) {   /* one call; with 2 threads the rows split in two calls */
                    run_score(&t, pos, n_q, acc, stride, kn, pi < 0 ? NULL : pools[pi]);
                } else {
                    int32_t split = check_rng_int(&r, 1, n_q - 1);
                    run_score(&t, pos, split, acc, stride, kn, pools[pi]);
                    run_score(&t, pos + split, n_q - split, acc, stride, kn, pools[pi]);
                }
                for (int32_t j = 0; j < 2 * SCORE_MAXN; j++) {
                    double want = base[j] + contrib[j], err = fabs(acc[j] - want);
                    REQUIREF(err <= SCORE_REL * contrib[j] + 1e-15, "trial %d %s threads %d key %d: %.17g vs %.17g",
                             trial, kn->name, pi + 1, j, acc[j], want);
                    if (contrib[j] > 1e-300) worst = OC_MAX(worst, err / contrib[j]);
                }
                n_runs++;
                if (pi < 0) {
                    memcpy(acc1, acc, sizeof acc);
                } else if (pi == 0 || pi == 2 || n_q < 2) {
                    /* bitwise the same result for any thread count (one call each) */
                    REQUIREF(!memcmp(acc, acc1, sizeof acc), "trial %d %s: %d threads differ from serial", trial,
                             kn->name, pi + 1);
                } else {
                    /* two calls: the same up to double rounding of each key's sum */
                    for (int32_t j = 0; j < 2 * SCORE_MAXN; j++)
                        REQUIREF(fabs(acc[j] - acc1[j]) <= 1e-13 * fabs(acc1[j]), "trial %d %s: split rows: key %d",
                                 trial, kn->name, j);
                }
            }
        }
    }
    CHECKF(worst < SCORE_REL, "worst relative error %g", worst);
    CHECKF(n_runs >= 4 * n_trials, "only %d runs", n_runs);   /* every trial on 4 pools, one ISA at least */
    printf("  score rows: worst relative error %.3g over %d runs\n", worst, n_runs);
    for (int i = 0; i < 3; i++) oc_pool_close(pools[i]);
}

/* SparseMM Eq. 10-14, naively, for kv head g: mean over the window of the last w queries of the
 * full causal softmax, summed over the group's query heads (App. A.1); top budget - w of keys
 * 0..n-w-1, plus the window. */
static int32_t naive_sparsemm(const problem *p, int32_t g, int32_t w, int32_t budget, int32_t *kept) {
    static double A[MAXN], mean[MAXN];
    uint8_t mark[MAXN] = { 0 };
    int32_t n = p->n, group = p->n_head / p->n_kv;
    if (budget >= n) {
        for (int32_t j = 0; j < n; j++) kept[j] = j;
        return n;
    }
    for (int32_t j = 0; j < n; j++) mean[j] = 0;
    for (int32_t i = n - w; i < n; i++)
        for (int32_t h = g * group; h < (g + 1) * group; h++) {
            naive_row(p, i, h, A);
            for (int32_t j = 0; j < n; j++) mean[j] += A[j] / w;
        }
    naive_top(mean, n - w, budget - w, mark);
    int32_t m = 0;
    for (int32_t j = 0; j < n; j++)
        if (mark[j] || j >= n - w) kept[m++] = j;
    return m;
}

/* The choices from masses full of ties (a few distinct values, as a short prompt's rounded scores
 * or a zero tail give): the selection takes the set only (quickselect and a partial heap, not a
 * ranking), and ties go to the earlier token, as naive_top picks them. */
static void test_selection_with_ties(void) {
    static double mass[MAXN], norm[MAXN];
    static int32_t kept[MAXN], order[MAXN], nnz[MAXN];
    static uint8_t mark[MAXN];
    check_rng r = { 0x71e5u };
    for (int trial = 0; trial < 40; trial++) {
        int32_t n = check_rng_int(&r, 1, MAXN), levels = 1 + trial % 5, w = trial % 3 ? 32 : 0;
        for (int32_t j = 0; j < n; j++) mass[j] = (double)check_rng_int(&r, 0, levels) / 4.0;
        /* SparseMM: the last w tokens plus the budget - w best of the others */
        int32_t budget = check_rng_int(&r, 0, n + 2), m = oc_kv_select_sparsemm(mass, n, budget, w, kept, order);
        memset(mark, 0, sizeof mark);
        int32_t ww = OC_MIN(w, budget);
        if (budget < n) naive_top(mass, n - ww, budget - ww, mark);
        int32_t t = 0;
        for (int32_t j = 0; j < n; j++)
            if (budget >= n || mark[j] || j >= n - ww) {
                REQUIREF(t < m && kept[t] == j, "sparsemm trial %d (n %d budget %d): slot %d", trial, n, budget, t);
                t++;
            }
        REQUIREF(t == m, "sparsemm trial %d: %d kept, naive %d", trial, m, t);
        /* ZipVL: p from the masses best first (Eq. 7), then the p best by mass / nnz, plus the recent */
        double tau = trial % 2 ? 0.5 : 0.9, total = 0;
        for (int32_t j = 0; j < n; j++) {
            nnz[j] = 1 + (n - j) % 7;
            total += mass[j];
        }
        m = oc_kv_select_zipvl(mass, nnz, n, total, tau, kept, order, norm);
        memset(mark, 0, sizeof mark);
        double sum = 0;
        int32_t p = n;
        for (int32_t k = 0; k < n; k++) {   /* naive: pick the best unmarked one at a time */
            naive_top(mass, n, 1, mark);
            int32_t best = -1;
            for (int32_t j = 0; j < n && best < 0; j++)
                if (mark[j] == 1) best = j;
            mark[best] = 2;
            sum += mass[best];
            if (sum >= tau * total) {
                p = k + 1;
                break;
            }
        }
        for (int32_t j = 0; j < n; j++) norm[j] = mass[j] / (double)nnz[j];
        memset(mark, 0, sizeof mark);
        naive_top(norm, n, p, mark);
        t = 0;
        for (int32_t j = 0; j < n; j++)
            if (mark[j] || j >= n - OC_KV_ZIPVL_RECENT_PROBES) {
                REQUIREF(t < m && kept[t] == j, "zipvl trial %d (n %d p %d): slot %d", trial, n, p, t);
                t++;
            }
        REQUIREF(t == m, "zipvl trial %d: %d kept, naive %d", trial, m, t);
    }
}

static void test_sparsemm_keeps_the_naive_tokens(void) {
    static problem p;
    static double acc[2 * MAXN];
    static int32_t kept[MAXN], ref[MAXN], order[MAXN], pos[64];
    check_rng r = { 0x5ba5e11u };
    for (int trial = 0; trial < 12; trial++) {
        int32_t n = check_rng_int(&r, 40, MAXN), w = 32, n_kv = 2, n_head = trial % 2 ? 4 : 2;
        make_problem(&p, &r, n, n_head, n_kv);
        /* the window arrives in two batches, as a chunked prefill delivers it */
        memset(acc, 0, sizeof acc);
        int32_t split = check_rng_int(&r, 1, w - 1);
        for (int32_t part = 0; part < 2; part++) {
            int32_t first = part ? n - w + split : n - w, cnt = part ? w - split : split;
            for (int32_t i = 0; i < cnt; i++) pos[i] = first + i;
            oc_kv_rows rows = rows_of(&p, pos, cnt, p.q + (size_t)first * n_head * HD);
            score(&rows, acc, MAXN);
        }
        for (int32_t g = 0; g < n_kv; g++) {
            int32_t budget = check_rng_int(&r, w, n + 5);
            int32_t m = oc_kv_select_sparsemm(acc + g * MAXN, n, budget, w, kept, order);
            int32_t m_ref = naive_sparsemm(&p, g, w, budget, ref);
            REQUIREF(m == m_ref, "trial %d head %d: kept %d, naive %d", trial, g, m, m_ref);
            REQUIREF(m == OC_MIN(budget, n), "kept %d for budget %d of %d", m, budget, n);
            for (int32_t t = 0; t < m; t++) REQUIREF(kept[t] == ref[t], "trial %d head %d: slot %d: %d vs %d", trial, g, t, kept[t], ref[t]);
        }
    }
}

/* ZipVL Eq. 6-9 naively on the probe rows: column sums over every head, p from the sorted
 * cumulative sum >= tau * (rows x heads), importance = column sum / nonzero entries counted in
 * the matrix itself, top p. */
static int32_t naive_zipvl(const problem *p, const int32_t *probes, int32_t n_probe, double tau, int32_t *kept) {
    static double A[MAXN], col[MAXN], sorted[MAXN], imp[MAXN];
    static int32_t nnz[MAXN];
    uint8_t mark[MAXN] = { 0 };
    int32_t n = p->n;
    for (int32_t j = 0; j < n; j++) col[j] = 0, nnz[j] = 0;
    for (int32_t c = 0; c < n_probe; c++)
        for (int32_t h = 0; h < p->n_head; h++) {
            naive_row(p, probes[c], h, A);
            for (int32_t j = 0; j < n; j++) {
                col[j] += A[j];
                nnz[j] += A[j] != 0;
            }
        }
    for (int32_t j = 0; j < n; j++) sorted[j] = col[j];
    for (int32_t i = 1; i < n; i++)   /* descending insertion sort */
        for (int32_t t = i; t > 0 && sorted[t - 1] < sorted[t]; t--) {
            double x = sorted[t];
            sorted[t] = sorted[t - 1];
            sorted[t - 1] = x;
        }
    double sum = 0;
    int32_t pk = n;
    for (int32_t t = 0; t < n; t++)
        if ((sum += sorted[t]) >= tau * n_probe * p->n_head) {
            pk = t + 1;
            break;
        }
    for (int32_t j = 0; j < n; j++) imp[j] = nnz[j] ? col[j] / nnz[j] : 0;
    naive_top(imp, n, pk, mark);
    for (int32_t j = n > OC_KV_ZIPVL_RECENT_PROBES ? n - OC_KV_ZIPVL_RECENT_PROBES : 0; j < n; j++) mark[j] = 1;
    int32_t m = 0;
    for (int32_t j = 0; j < n; j++)
        if (mark[j]) kept[m++] = j;
    return m;
}

static void test_zipvl_keeps_the_naive_tokens(void) {
    static problem p;
    static double acc[MAXN], norm[MAXN];
    static int32_t kept[MAXN], ref[MAXN], order[MAXN], probes[128], nnz[MAXN];
    check_rng r = { 0x21b71u };
    int32_t n_evicting = 0;   /* the test has teeth only if some trials drop tokens */
    int n_trials = check_emulated() ? 4 : 10;
    for (int trial = 0; trial < n_trials; trial++) {
        int32_t n = check_rng_int(&r, trial ? 120 : 20, MAXN), n_head = trial % 2 ? 4 : 2;
        double tau = trial % 3 == 0 ? 0.975 : check_rng_uniform(&r, 0.5f, 0.99f);
        make_problem(&p, &r, n, n_head, 2);
        int32_t n_probe = oc_kv_zipvl_probes(n, probes);
        memset(acc, 0, sizeof acc);
        /* probes scored one at a time, as the batches of a prefill reach them */
        for (int32_t c = 0; c < n_probe; c++) {
            oc_kv_rows rows = rows_of(&p, probes + c, 1, p.q + (size_t)probes[c] * n_head * HD);
            score(&rows, acc, 0);
        }
        for (int32_t j = 0, c = 0; j < n; j++) {   /* rows that see key j: probes at or after it */
            while (c < n_probe && probes[c] < j) c++;
            nnz[j] = (n_probe - c) * n_head;
        }
        int32_t m = oc_kv_select_zipvl(acc, nnz, n, (double)n_probe * n_head, tau, kept, order, norm);
        int32_t m_ref = naive_zipvl(&p, probes, n_probe, tau, ref);
        REQUIREF(m == m_ref, "trial %d (n %d tau %.3f): p = %d, naive %d", trial, n, tau, m, m_ref);
        REQUIRE(m >= 1 && m <= n);
        n_evicting += m < n;
        for (int32_t t = 0; t < m; t++) REQUIREF(kept[t] == ref[t], "trial %d slot %d: %d vs %d", trial, t, kept[t], ref[t]);
    }
    CHECKF(n_evicting >= n_trials - 2, "only %d of %d trials evicted anything", n_evicting, n_trials);
}

/* Both on one layer (kv_cache.h): ZipVL's set T first, then SparseMM per kv head inside T, naively:
 * window = T's last w, the rest of T ranked by the window's mean attention. */
static void test_zipvl_then_sparsemm_keeps_the_naive_tokens(void) {
    static problem p;
    static double acc_z[MAXN], acc_s[2 * MAXN], norm[MAXN], tmp[MAXN], mean[MAXN], A[MAXN];
    static int32_t T[MAXN], kept[MAXN], order[MAXN], probes[128], nnz[MAXN], pos[32], T_ref[MAXN];
    check_rng r = { 0xb0745u };
    for (int trial = 0, n_trials = check_emulated() ? 3 : 8; trial < n_trials; trial++) {
        int32_t n = check_rng_int(&r, 150, MAXN), w = 16, group = 2;
        make_problem(&p, &r, n, 4, 2);
        int32_t n_probe = oc_kv_zipvl_probes(n, probes);
        memset(acc_z, 0, sizeof acc_z);
        memset(acc_s, 0, sizeof acc_s);
        for (int32_t c = 0; c < n_probe; c++) {
            oc_kv_rows rows = rows_of(&p, probes + c, 1, p.q + (size_t)probes[c] * 4 * HD);
            score(&rows, acc_z, 0);
        }
        for (int32_t i = 0; i < w; i++) pos[i] = n - w + i;
        oc_kv_rows rows = rows_of(&p, pos, w, p.q + (size_t)(n - w) * 4 * HD);
        score(&rows, acc_s, MAXN);
        for (int32_t j = 0, c = 0; j < n; j++) {
            while (c < n_probe && probes[c] < j) c++;
            nnz[j] = (n_probe - c) * 4;
        }
        int32_t n_t = oc_kv_select_zipvl(acc_z, nnz, n, (double)n_probe * 4, 0.9, T, order, norm);
        REQUIRE(naive_zipvl(&p, probes, n_probe, 0.9, T_ref) == n_t && !memcmp(T, T_ref, (size_t)n_t * 4));
        for (int32_t g = 0; g < 2; g++) {
            int32_t budget = check_rng_int(&r, w, n_t + 3);
            int32_t m = oc_kv_select_sparsemm_within(acc_s + g * MAXN, T, n_t, budget, w, kept, order, tmp);
            /* naive: mean window attention (full softmax rows), top of T minus its window */
            for (int32_t j = 0; j < n; j++) mean[j] = 0;
            for (int32_t i = n - w; i < n; i++)
                for (int32_t h = g * group; h < (g + 1) * group; h++) {
                    naive_row(&p, i, h, A);
                    for (int32_t j = 0; j < n; j++) mean[j] += A[j] / w;
                }
            uint8_t in_t[MAXN] = { 0 }, mark[MAXN] = { 0 };
            int32_t n_keep = OC_MIN(budget, n_t), win = OC_MIN(w, n_keep);
            for (int32_t t = 0; t < n_t - (budget >= n_t ? 0 : win); t++) in_t[T[t]] = 1;
            if (budget >= n_t) {
                for (int32_t t = 0; t < n_t; t++) mark[T[t]] = 1;
            } else {
                for (int32_t t = n_t - win; t < n_t; t++) mark[T[t]] = 1;
                for (int32_t k = 0; k < budget - win; k++) {
                    int32_t best = -1;
                    for (int32_t j = 0; j < n; j++)
                        if (in_t[j] && !mark[j] && (best < 0 || mean[j] > mean[best])) best = j;
                    mark[best] = 1;
                }
            }
            int32_t m_ref = 0;
            for (int32_t j = 0; j < n; j++)
                if (mark[j]) T_ref[m_ref++] = j;
            REQUIREF(m == m_ref && m == n_keep, "trial %d head %d: %d kept, naive %d", trial, g, m, m_ref);
            for (int32_t t = 0; t < m; t++) REQUIREF(kept[t] == T_ref[t], "trial %d head %d slot %d", trial, g, t);
        }
    }
}

static void test_zipvl_probes_recent_and_random(void) {
    int32_t a[128], b[128];
    int32_t m = oc_kv_zipvl_probes(10, a);
    CHECK(m == 10);
    for (int32_t i = 0; i < m; i++) CHECK(a[i] == i);
    m = oc_kv_zipvl_probes(100, a);   /* 64 recent + the 36 before them */
    CHECK(m == 100);
    m = oc_kv_zipvl_probes(5000, a);
    REQUIRE(m == 128);
    CHECK(oc_kv_zipvl_probes(5000, b) == 128 && !memcmp(a, b, sizeof a));   /* fixed seed */
    for (int32_t i = 1; i < m; i++) CHECK(a[i] > a[i - 1]);
    for (int32_t i = 0; i < 64; i++) CHECK(a[64 + i] == 5000 - 64 + i);
    CHECK(a[63] < 5000 - 64 && a[0] >= 0);
    int32_t spread = a[63] - a[0];
    CHECKF(spread > 2500, "random probes span only %d of 4936 positions", spread);
}

/* Compaction moves exactly the kept rows, per head of a token-major cache, and the book follows;
 * then decoding (one query, every kv group) over the compacted rows equals dense attention over
 * the whole cache with the dropped keys masked explicitly (same engine, same keys). */
static void test_compacted_decode_equals_masked_dense(void) {
    enum { N = 300, NKV = 2, NH = 4, G = NH / NKV, KVD = NKV * HD };
    static uint16_t cache[N * KVD], orig[N * KVD], vcache[N * KVD];
    static float q[NH * HD], out_dense[NH * HD], out_comp[NH * HD];
    static uint8_t mask[NH * N];
    static int32_t kept[NKV][N], n_kept[NKV], book_block[8192];
    check_rng r = { 0xdec0de };
    for (int32_t i = 0; i < N * KVD; i++) {
        orig[i] = cache[i] = oc_f32_to_f16(check_rng_uniform(&r, -2, 2));
        vcache[i] = oc_f32_to_f16(check_rng_uniform(&r, -1, 1));
    }
    for (int32_t i = 0; i < NH * HD; i++) q[i] = check_rng_uniform(&r, -1, 1);
    static uint16_t vorig[N * KVD];
    memcpy(vorig, vcache, sizeof vcache);
    /* each kv head keeps its own random subset (the last token always: the query's own) */
    for (int32_t g = 0; g < NKV; g++) {
        n_kept[g] = 0;
        for (int32_t j = 0; j < N; j++)
            if (j == N - 1 || check_rng_int(&r, 0, 9) < 2 + 5 * g) kept[g][n_kept[g]++] = j;
        for (int32_t h = g * G; h < (g + 1) * G; h++)
            for (int32_t j = 0, t = 0; j < N; j++) {
                int keep = t < n_kept[g] && kept[g][t] == j;
                mask[h * N + j] = (uint8_t)keep;
                t += keep;
            }
    }
    oc_kv_book book;
    REQUIRE(oc_kv_book_bytes(1, NKV, N) <= sizeof book_block);
    oc_kv_book_init(&book, 1, NKV, N, book_block);
    oc_kv_book_append(&book, 0, N);
    for (int32_t g = 0; g < NKV; g++) {
        oc_kv_compact_rows(cache + g * HD, KVD, HD, 2, kept[g], n_kept[g]);
        oc_kv_compact_rows(vcache + g * HD, KVD, HD, 2, kept[g], n_kept[g]);
        oc_kv_book_keep(&book, 0, g, kept[g], n_kept[g]);
        REQUIRE(*oc_kv_book_n(&book, 0, g) == n_kept[g]);
        for (int32_t t = 0; t < n_kept[g]; t++) {
            REQUIRE(oc_kv_book_pos(&book, 0, g)[t] == kept[g][t]);
            REQUIRE(!memcmp(cache + t * KVD + g * HD, orig + kept[g][t] * KVD + g * HD, HD * 2));
            REQUIRE(!memcmp(vcache + t * KVD + g * HD, vorig + kept[g][t] * KVD + g * HD, HD * 2));
        }
    }
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    oc_attn_dims dims = { 1, N, NH, NKV, HD };
    size_t n_bytes = oc_attn_scratch_bytes(&dims, 1);
    void *scratch = aligned_alloc(OC_MEM_ALIGN, (n_bytes + OC_MEM_ALIGN - 1) / OC_MEM_ALIGN * OC_MEM_ALIGN);
    REQUIRE(scratch);
    oc_attn_call a;
    memset(&a, 0, sizeof a);
    a.n_q = 1; a.n_kv = N; a.n_head = NH; a.n_head_kv = NKV; a.head_dim = HD;
    a.q_stride_token = NH * HD; a.q_stride_head = HD;
    a.kv_dtype = OC_DTYPE_F16;
    a.k_stride_token = a.v_stride_token = KVD; a.k_stride_head = a.v_stride_head = HD;
    a.out_stride_token = NH * HD; a.out_stride_head = HD;
    a.scale = 1.0f / sqrtf((float)HD);
    a.mask = OC_ATTN_EXPLICIT; a.explicit_mask = mask; a.explicit_stride_q = N; a.explicit_stride_head = N;
    a.q_offset = N - 1;
    oc_attn_host dense_mem = { q, orig, vorig, out_dense };
    check_poison_f32(out_dense, NH * HD);
    check_poison_f32(out_comp, NH * HD);
    CHECK(oc_attn_run(&a, &dense_mem, oc_isa_best(&cpu), NULL, scratch, n_bytes, NULL, NULL) == OC_OK);
    for (int32_t g = 0; g < NKV; g++) {   /* the runtime's decode call: one kv group, its kept rows */
        oc_attn_call c = a;
        c.n_kv = n_kept[g]; c.n_head = G; c.n_head_kv = 1;
        c.q_off = g * G * HD; c.k_off = c.v_off = g * HD; c.out_off = g * G * HD;
        c.mask = OC_ATTN_CAUSAL; c.q_offset = n_kept[g] - 1; c.explicit_mask = NULL;
        oc_attn_host comp_mem = { q, cache, vcache, out_comp };
        CHECK(oc_attn_run(&c, &comp_mem, oc_isa_best(&cpu), NULL, scratch, n_bytes, NULL, NULL) == OC_OK);
    }
    static double ref[NH * HD];
    for (int32_t i = 0; i < NH * HD; i++) ref[i] = out_dense[i];
    double e = check_rel_err_f32(out_comp, ref, NH * HD);
    CHECKF(e < 1e-5, "compacted vs masked dense: relative error %.3g", e);
    free(scratch);
}

static oc_status policy_of(const char *text, oc_kv_policy *pol, oc_plan **plan, oc_error *err) {
    oc_status st = oc_plan_parse(plan, text, strlen(text), NULL, NULL, err);
    if (st) return st;
    return oc_kv_policy_build(pol, &(*plan)->stacks[OC_PLAN_DECODER], 6, 2, (*plan)->kv_window_tokens, "p.plan", err);
}

#define HDR "ocellus-plan 1\nshape decoder layers 6 heads 4 kv-heads 2 head-dim 64\n"

static void test_policy_rules(void) {
    static oc_kv_policy pol;
    oc_plan *plan = NULL;
    oc_error err;
    REQUIRE(policy_of(HDR "decoder layer 1 kv-budget 64 full\ndecoder layer 2 zipvl-tau 0.975\n"
                      "decoder lazy-group 2-4 mode gla\n", &pol, &plan, &err) == OC_OK);
    CHECK(pol.layer[1].evict == OC_KV_SPARSEMM && pol.layer[2].evict == OC_KV_ZIPVL);
    CHECK(pol.layer[3].evict == OC_KV_ZIPVL && pol.layer[3].first == 2 && pol.layer[4].first == 2);
    CHECK(pol.layer[3].lazy == OC_KV_LAZY_GLA && pol.layer[2].lazy == OC_KV_LAZY_FIRST);
    CHECK(pol.layer[3].k_slot == pol.layer[2].k_slot && pol.layer[4].k_slot == pol.layer[2].k_slot);
    CHECK(pol.n_k_slots == 4 && pol.layer[5].k_slot == 3);
    CHECK(pol.n_acc_rows == 3 && pol.layer[1].acc_row == 0 && pol.layer[2].zipvl_row == 2 && pol.layer[2].acc_row == -1);
    CHECK(pol.layer[3].acc_row == -1 && pol.layer[3].zipvl_row == -1);
    CHECK(oc_kv_policy_budget(&pol, 1, 0) == 64 && oc_kv_policy_budget(&pol, 1, 1) == INT32_MAX);
    CHECK(oc_kv_policy_budget(&pol, 0, 0) == INT32_MAX);
    /* rows a region holds ("Memory"): a full head, ZipVL and dense layers take the context */
    CHECK(oc_kv_policy_rows(&pol, 1, 1000, 50) == 1000 && oc_kv_policy_rows(&pol, 2, 1000, 50) == 1000);
    CHECK(oc_kv_policy_segment_end(&pol, 2) == 4 && oc_kv_policy_segment_end(&pol, 1) == 1);
    oc_plan_free(plan);
    plan = NULL;
    REQUIRE(policy_of(HDR "decoder layer 1 kv-budget 64 32\n", &pol, &plan, &err) == OC_OK);
    CHECK(oc_kv_policy_rows(&pol, 1, 1000, 50) == 114 && oc_kv_policy_rows(&pol, 1, 1000, 0) == 1000);
    CHECK(oc_kv_policy_rows(&pol, 1, 100, 50) == 100 && oc_kv_policy_rows(&pol, 0, 1000, 50) == 1000);
    oc_plan_free(plan);
    plan = NULL;
    /* both on one layer: ZipVL's set, then the budgets within it */
    REQUIRE(policy_of(HDR "decoder layer 3 kv-budget 40 40\ndecoder layer 3 zipvl-tau 0.9\n", &pol, &plan, &err) == OC_OK);
    CHECK(pol.layer[3].evict == OC_KV_ZIPVL_SPARSEMM && pol.layer[3].acc_row == 0 && pol.layer[3].zipvl_row == 2);
    CHECK(pol.n_acc_rows == 3 && oc_kv_policy_budget(&pol, 3, 1) == 40);
    CHECK(oc_kv_policy_rows(&pol, 3, 1000, 10) == 50);   /* within ZipVL's set: still the budget */
    oc_plan_free(plan);
    plan = NULL;
    /* a lazy layer's own lines must say what its first layer's say */
    CHECK(policy_of(HDR "decoder layer 4 kv-budget 40 40\ndecoder lazy-group 3-5 mode vla\n", &pol, &plan, &err) ==
          OC_ERR_UNSUPPORTED);
    CHECKF(strstr(err.message, "p.plan: decoder layer 4 is lazy in 'decoder lazy-group 3-5' but its kv-budget / "
                  "zipvl-tau lines differ from layer 3's"), "%s", err.message);
    oc_plan_free(plan);
    plan = NULL;
    REQUIRE(policy_of(HDR "decoder layer 2-5 kv-budget 40 48\ndecoder layer 2-5 zipvl-tau 0.9\n"
                      "decoder lazy-group 3-5 mode vla\n", &pol, &plan, &err) == OC_OK);
    CHECK(pol.layer[4].first == 3 && pol.layer[4].evict == OC_KV_ZIPVL_SPARSEMM && pol.layer[4].acc_row == -1);
    CHECK(oc_kv_policy_budget(&pol, 5, 1) == 48);
    oc_plan_free(plan);
    plan = NULL;
    REQUIRE(policy_of(HDR "decoder lazy-group 0-1 mode vla\n", &pol, &plan, &err) == OC_OK);
    CHECK(pol.any_vla && pol.n_k_slots == 6 && !pol.any_evict && pol.n_acc_rows == 0);
    oc_plan_free(plan);
}

int main(void) {
    CHECK_RUN(test_score_rows_match_naive);
    CHECK_RUN(test_sparsemm_keeps_the_naive_tokens);
    CHECK_RUN(test_selection_with_ties);
    CHECK_RUN(test_zipvl_keeps_the_naive_tokens);
    CHECK_RUN(test_zipvl_then_sparsemm_keeps_the_naive_tokens);
    CHECK_RUN(test_zipvl_probes_recent_and_random);
    CHECK_RUN(test_compacted_decode_equals_masked_dense);
    CHECK_RUN(test_policy_rules);
    return check_finish();
}
