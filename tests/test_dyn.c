/* test_dyn.c: MMInference's dynamic patterns (src/attention/dyn.h, dyn_build.c, dyn_index.c and the
 * engine's VERTICAL_SLASH / GRID paths in attn.c) on every ISA table this CPU runs:
 *  - the online estimate from the last 64 queries equals a naive double-precision computation;
 *  - top-k, the grid stride/phase search and the modality permutation equal naive versions;
 *  - each pattern's output equals dense attention with the same mask given explicitly (the mask
 *    is built here from dyn.h's definitions, sharing no code with the engine) and a double
 *    reference, bitwise the same for 1, 2 and 3 threads, at odd lengths, GQA ratios, head dims
 *    64, 72, 80, 128, causal with a query offset and bidirectional. */
#include "attention/attn.h"
#include "attention/attn_kernels.h"
#include "attention/layout.h"
#include "check.h"
#include "support/dyn_ref.h"
#include "core/f16.h"
#include "core/pool.h"
#include "port.h"

#define LAST_Q OC_DYN_LAST_Q

/* ---- a case and its buffers ---------------------------------------------------------------------- */

typedef struct dcase {
    int n_q, n_kv, n_head, n_head_kv, d, q_offset;
    oc_attn_mask_kind mask;
    int32_t dtype;
    float *q, *kf, *vf;   /* q [n_q][H][d]; kf, vf [n_kv][Hkv][d] as the engine reads them */
    void *k, *v;          /* engine layout: [Hkv][n_kv][d], dtype */
    float *out;           /* [n_q][H][d] */
} dcase;

static void dcase_make(dcase *c, check_rng *rng, float q_mag) {
    size_t nq = (size_t)c->n_q * c->n_head * c->d, nkv = (size_t)c->n_kv * c->n_head_kv * c->d;
    size_t es = c->dtype == OC_DTYPE_F16 ? 2 : 4;
    c->q = malloc(sizeof(float) * nq);
    c->out = malloc(sizeof(float) * nq);
    c->kf = malloc(sizeof(float) * nkv);
    c->vf = malloc(sizeof(float) * nkv);
    c->k = malloc(es * nkv);
    c->v = malloc(es * nkv);
    for (size_t i = 0; i < nq; i++) c->q[i] = check_rng_uniform(rng, -q_mag, q_mag);
    for (int j = 0; j < c->n_kv; j++)
        for (int g = 0; g < c->n_head_kv; g++)
            for (int e = 0; e < c->d; e++)
                for (int which = 0; which < 2; which++) {
                    float x = check_rng_uniform(rng, -1.0f, 1.0f);
                    size_t at = ((size_t)g * c->n_kv + j) * c->d + e;
                    if (c->dtype == OC_DTYPE_F16) {
                        uint16_t h = oc_f32_to_f16(x);
                        x = oc_f16_to_f32(h);
                        ((uint16_t *)(which ? c->v : c->k))[at] = h;
                    } else {
                        ((float *)(which ? c->v : c->k))[at] = x;
                    }
                    (which ? c->vf : c->kf)[((size_t)j * c->n_head_kv + g) * c->d + e] = x;
                }
}

static void dcase_free(dcase *c) {
    free(c->q); free(c->out); free(c->kf); free(c->vf); free(c->k); free(c->v);
}

/* A call on the case's buffers, as the engine and the index builder take it. */
typedef struct dcall {
    oc_attn_call c;
    oc_attn_host mem;
    oc_isa isa;
} dcall;

static dcall dcase_args(const dcase *c, const oc_head_pattern *pat, oc_isa isa) {
    dcall a;
    memset(&a, 0, sizeof a);
    a.c.n_q = c->n_q; a.c.n_kv = c->n_kv; a.c.n_head = c->n_head; a.c.n_head_kv = c->n_head_kv; a.c.head_dim = c->d;
    a.c.q_stride_token = (int64_t)c->n_head * c->d; a.c.q_stride_head = c->d;
    a.c.kv_dtype = c->dtype;
    a.c.k_stride_token = a.c.v_stride_token = c->d;
    a.c.k_stride_head = a.c.v_stride_head = (int64_t)c->n_kv * c->d;
    a.c.out_stride_token = (int64_t)c->n_head * c->d; a.c.out_stride_head = c->d;
    a.c.scale = 1.0f / sqrtf((float)c->d);
    a.c.mask = c->mask; a.c.q_offset = c->q_offset;
    a.c.patterns = pat;
    a.mem.q = c->q; a.mem.k = c->k; a.mem.v = c->v; a.mem.out = c->out;
    a.isa = isa;
    return a;
}

static oc_status run_dcall(const dcall *a, oc_pool *pool, void *scratch, size_t n_bytes, oc_attn_stats *st,
                           oc_error *err) {
    return oc_attn_run(&a->c, &a->mem, a->isa, pool, scratch, n_bytes, st, err);
}

static oc_status build_dcall(const dcall *a, oc_pool *pool, void *mem, size_t n_bytes, const oc_attn_dyn **out,
                             oc_error *err) {
    return oc_attn_dyn_build(&a->c, &a->mem, a->isa, pool, mem, n_bytes, out, err);
}

static void *aligned(size_t n_bytes) { return oc_port_aligned_alloc(OC_MEM_ALIGN, n_bytes ? n_bytes : 64); }

/* ---- references ---------------------------------------------------------------------------------- */

/* Estimate of head h in double: the last 64 queries' softmax rows under the base mask, summed per
 * column and per diagonal (offset o at o + n_kv - 1). */
static void ref_scores(const dcase *c, int h, double *vert, double *slash) {
    int g = h / (c->n_head / c->n_head_kv);
    double *w = malloc(sizeof(double) * (size_t)c->n_kv);
    for (int j = 0; j < c->n_kv; j++) vert[j] = 0;
    for (int o = 0; o < 2 * c->n_kv - 1; o++) slash[o] = 0;
    for (int i = c->n_q - LAST_Q; i < c->n_q; i++) {
        int p = c->q_offset + i;
        const float *qr = c->q + ((size_t)i * c->n_head + h) * c->d;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < c->n_kv; j++) {
            w[j] = NAN;
            if (c->mask == OC_ATTN_CAUSAL && j > p) continue;
            const float *kr = c->kf + ((size_t)j * c->n_head_kv + g) * c->d;
            double s = 0;
            for (int e = 0; e < c->d; e++) s += (double)qr[e] * kr[e];
            w[j] = s / sqrt((double)c->d);
            if (w[j] > mx) mx = w[j];
        }
        for (int j = 0; j < c->n_kv; j++)
            if (!isnan(w[j])) sum += exp(w[j] - mx);
        for (int j = 0; j < c->n_kv; j++) {
            if (isnan(w[j])) continue;
            double a = exp(w[j] - mx) / sum;
            vert[j] += a;
            slash[p - j + c->n_kv - 1] += a;
        }
    }
    free(w);
}

/* dyn.h's masks, written from their definitions (tests/support/dyn_ref.c). */
static int keep_dyn(const dcase *c, const oc_head_pattern *pt, const oc_dyn_head *dh, int p, int j) {
    return ref_dyn_keep(c->mask, pt, dh, p, j);
}

/* out [n_q][H][d] in double under an explicit byte mask [H][n_q][n_kv]; returns kept pairs. */
static uint64_t ref_attention(const dcase *c, const uint8_t *em, double *out) {
    uint64_t kept = 0;
    int rep = c->n_head / c->n_head_kv, d = c->d;
    double *w = malloc(sizeof(double) * (size_t)c->n_kv);
    for (int i = 0; i < c->n_q; i++)
        for (int h = 0; h < c->n_head; h++) {
            const float *qr = c->q + ((size_t)i * c->n_head + h) * d;
            double mx = -INFINITY, sum = 0, *o = out + ((size_t)i * c->n_head + h) * d;
            for (int j = 0; j < c->n_kv; j++) {
                w[j] = NAN;
                if (!em[((size_t)h * c->n_q + i) * c->n_kv + j]) continue;
                const float *kr = c->kf + ((size_t)j * c->n_head_kv + h / rep) * d;
                double s = 0;
                for (int e = 0; e < d; e++) s += (double)qr[e] * kr[e];
                w[j] = s / sqrt((double)d);
                if (w[j] > mx) mx = w[j];
                kept++;
            }
            for (int e = 0; e < d; e++) o[e] = 0;
            for (int j = 0; j < c->n_kv; j++) {
                if (isnan(w[j])) continue;
                double pj = exp(w[j] - mx);
                sum += pj;
                const float *vr = c->vf + ((size_t)j * c->n_head_kv + h / rep) * d;
                for (int e = 0; e < d; e++) o[e] += pj * vr[e];
            }
            for (int e = 0; sum > 0 && e < d; e++) o[e] /= sum;
        }
    free(w);
    return kept;
}

/* A sparse run's output (sparse, counters st) against the double reference of its explicit mask em
 * (ref, kept pairs), then against the engine run densely with em applied as an explicit mask
 * (output poisoned first): same output, same kept FLOPs. Returns the masked run's counters. */
static void check_vs_mask(const char *what, int seed, oc_isa isa, dcase *c, const uint8_t *em, const float *sparse,
                          const double *ref, uint64_t kept, size_t n_out, oc_pool *pool, void *scratch,
                          size_t sc_bytes, const oc_attn_stats *st, oc_attn_stats *st_mask) {
    double e = check_rel_err_f32(sparse, ref, n_out);
    CHECKF(e < 1e-5, "%sseed %d d=%d isa=%s: pattern vs double reference %.3g", what, seed, c->d, oc_isa_name(isa), e);
    CHECKF(st->flops_kept == kept * 4 * (uint64_t)c->d, "%sseed %d isa=%s: kept flops %llu, reference %llu", what, seed,
           oc_isa_name(isa), (unsigned long long)st->flops_kept, (unsigned long long)(kept * 4 * (uint64_t)c->d));
    dcall b = dcase_args(c, NULL, isa);
    b.c.mask = OC_ATTN_EXPLICIT;
    b.c.explicit_mask = em;
    b.c.explicit_stride_q = c->n_kv;
    b.c.explicit_stride_head = (int64_t)c->n_q * c->n_kv;
    check_poison_f32(c->out, n_out);
    REQUIRE(run_dcall(&b, pool, scratch, sc_bytes, st_mask, NULL) == OC_OK);
    double num = 0, den = 0;
    int bad = 0;
    for (size_t x = 0; x < n_out; x++) {
        bad |= !isfinite(sparse[x]) || !isfinite(c->out[x]);
        num += (double)(sparse[x] - c->out[x]) * (sparse[x] - c->out[x]);
        den += (double)c->out[x] * c->out[x];
    }
    CHECKF(!bad && sqrt(num / den) < 2e-6, "%sseed %d isa=%s: pattern vs explicit mask %.3g", what, seed,
           oc_isa_name(isa), bad ? INFINITY : sqrt(num / den));
    CHECK(st_mask->flops_kept == st->flops_kept);
}


/* ---- ISA and thread helpers ---------------------------------------------------------------------- */

typedef struct pools { oc_pool *p[3]; } pools;

static int pools_open(pools *ps) {
    for (int t = 0; t < 3; t++)
        if (oc_pool_open(&ps->p[t], t + 1, NULL, NULL) != OC_OK) return 0;
    return 1;
}
static void pools_close(pools *ps) { for (int t = 0; t < 3; t++) oc_pool_close(ps->p[t]); }

static int isa_usable(int isa) {
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    return oc_isa_runs((oc_isa)isa, &cpu) && oc_attn_kernels_for((oc_isa)isa);
}

/* ---- the estimate ---------------------------------------------------------------------------------- */

static void test_estimate_equals_double(void) {
    static const int dims[] = { 64, 72, 80, 128 };
    for (int k = 0; k < 8; k++) {
        check_rng rng = { 0x5eedULL + (unsigned long long)k };
        dcase c;
        memset(&c, 0, sizeof c);
        c.d = dims[k % 4];
        c.n_head_kv = 1 + k % 2;
        c.n_head = c.n_head_kv * (k % 3 == 0 ? 1 : k % 3 == 1 ? 3 : 6);
        c.n_q = 64 + 37 * k + (k % 2);                  /* odd lengths, 64 and up */
        c.q_offset = k % 3 == 2 ? 29 + 11 * k : 0;      /* a later prefill chunk */
        c.n_kv = c.q_offset + c.n_q + (k % 4 == 3 ? 0 : 0);
        c.mask = k % 4 == 3 ? OC_ATTN_BIDIRECTIONAL : OC_ATTN_CAUSAL;
        c.dtype = k % 2 ? OC_DTYPE_F16 : OC_DTYPE_F32;
        dcase_make(&c, &rng, 3.0f);
        double *rv = malloc(sizeof(double) * (size_t)c.n_kv), *rs = malloc(sizeof(double) * (size_t)(2 * c.n_kv));
        float *ev = malloc(sizeof(float) * (size_t)c.n_kv), *es = malloc(sizeof(float) * (size_t)(2 * c.n_kv));
        oc_attn_dims dm = { c.n_q, c.n_kv, c.n_head, c.n_head_kv, c.d };
        size_t n_bytes = oc_attn_dyn_bytes(&dm, 1);
        void *mem = aligned(n_bytes);
        for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
            if (!isa_usable(isa)) continue;
            dcall a = dcase_args(&c, NULL, (oc_isa)isa);
            for (int h = 0; h < c.n_head; h++) {
                ref_scores(&c, h, rv, rs);
                check_poison_f32(ev, (size_t)c.n_kv);
                check_poison_f32(es, (size_t)(2 * c.n_kv - 1));
                oc_error err = { OC_OK, "" };
                REQUIREF(oc_attn_dyn_scores(&a.c, &a.mem, a.isa, h, mem, n_bytes, ev, es, &err) == OC_OK, "%s",
                         err.message);
                double e1 = check_rel_err_f32(ev, rv, (size_t)c.n_kv);
                double e2 = check_rel_err_f32(es, rs, (size_t)(2 * c.n_kv - 1));
                CHECKF(e1 < 2e-6 && e2 < 2e-6, "k=%d isa=%s head %d: vertical error %.3g, slash error %.3g", k,
                       oc_isa_name((oc_isa)isa), h, e1, e2);
                /* every row is a distribution: the column scores add up to 64 */
                double total = 0;
                for (int j = 0; j < c.n_kv; j++) total += ev[j];
                CHECKF(fabs(total - LAST_Q) < 1e-3, "k=%d: column scores add up to %.6f", k, total);
            }
        }
        oc_port_aligned_free(mem);
        free(rv); free(rs); free(ev); free(es);
        dcase_free(&c);
    }
}

/* The estimate as the build runs it (pass 1's scores of the first 4,096 keys kept for pass 2, 16
 * keys' column sums side by side, a key's diagonals as one loop) gives the plain two-pass loop's
 * floats exactly, bit for bit: the index chosen from them cannot change. Lengths on both sides of
 * the kept keys' end (4,096) and of whole tiles, a later chunk, both masks, f16 and f32. */
static void test_estimate_fast_equals_plain(void) {
    static const int n_kvs[] = { 64, 200, 4096, 4097, 4500, 4224 };
    for (int k = 0; k < 6; k++) {
        check_rng rng = { 0xfa57ULL + (unsigned long long)k };
        dcase c;
        memset(&c, 0, sizeof c);
        c.d = k % 2 ? 64 : 128;
        c.n_head_kv = 1 + k % 2;
        c.n_head = c.n_head_kv * (k % 3 == 0 ? 1 : 4);
        c.n_q = k % 3 == 2 ? 64 + 5 * k : n_kvs[k];
        c.n_kv = n_kvs[k] + (k % 3 == 2 ? c.n_q : 0);
        c.q_offset = c.n_kv - c.n_q;
        c.mask = k == 4 ? OC_ATTN_BIDIRECTIONAL : OC_ATTN_CAUSAL;
        c.dtype = k % 2 ? OC_DTYPE_F16 : OC_DTYPE_F32;
        dcase_make(&c, &rng, 4.0f);
        size_t nv = (size_t)c.n_kv, ns = (size_t)(2 * c.n_kv - 1);
        float *fv = malloc(sizeof(float) * nv), *fs = malloc(sizeof(float) * ns);
        float *pv = malloc(sizeof(float) * nv), *ps = malloc(sizeof(float) * ns);
        oc_attn_dims dm = { c.n_q, c.n_kv, c.n_head, c.n_head_kv, c.d };
        size_t n_bytes = oc_attn_dyn_bytes(&dm, 1);
        void *mem = aligned(n_bytes);
        REQUIRE(fv && fs && pv && ps && mem);
        for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
            if (!isa_usable(isa)) continue;
            dcall a = dcase_args(&c, NULL, (oc_isa)isa);
            for (int h = 0; h < c.n_head; h++) {
                check_poison_f32(fv, nv);
                check_poison_f32(fs, ns);
                check_poison_f32(pv, nv);
                check_poison_f32(ps, ns);
                oc_error err = { OC_OK, "" };
                REQUIREF(oc_attn_dyn_scores(&a.c, &a.mem, a.isa, h, mem, n_bytes, fv, fs, &err) == OC_OK, "%s",
                         err.message);
                REQUIREF(oc_attn_dyn_scores_plain(&a.c, &a.mem, a.isa, h, mem, n_bytes, pv, ps, &err) == OC_OK, "%s",
                         err.message);
                size_t bad = 0;
                while (bad < nv && fv[bad] == pv[bad] && !isnan(fv[bad])) bad++;
                size_t bad_s = 0;
                while (bad_s < ns && !memcmp(&fs[bad_s], &ps[bad_s], sizeof(float)) && !isnan(fs[bad_s])) bad_s++;
                CHECKF(bad == nv && bad_s == ns, "k=%d isa=%s head %d (%d keys): column %zu %.9g vs %.9g, diagonal "
                       "%zu", k, oc_isa_name((oc_isa)isa), h, c.n_kv, bad, bad < nv ? fv[bad] : 0.0,
                       bad < nv ? pv[bad] : 0.0, bad_s);
            }
        }
        oc_port_aligned_free(mem);
        free(fv); free(fs); free(pv); free(ps);
        dcase_free(&c);
    }
}

/* The tolerance has teeth: moving one query's contribution to the wrong column fails it. */
static void test_estimate_tolerance_has_teeth(void) {
    double ref[200];
    float est[200];
    for (int j = 0; j < 200; j++) ref[j] = 64.0 / 200.0;
    for (int j = 0; j < 200; j++) est[j] = (float)ref[j];
    est[3] += 1e-4f;   /* 1/64 of one row's weight on one key, off by a 1e-4 share */
    est[4] -= 1e-4f;
    CHECK(check_rel_err_f32(est, ref, 200) > 2e-6);
}

/* ---- top-k, grid search, modality permutation ------------------------------------------------------ */

static void test_top_k(void) {
    check_rng rng = { 77 };
    for (int trial = 0; trial < 200; trial++) {
        int n = check_rng_int(&rng, 1, 300), k = check_rng_int(&rng, 0, n + 5);
        int force = check_rng_int(&rng, 0, 3) ? -1 : check_rng_int(&rng, 0, n - 1);
        float s[300];
        int32_t work[300], out[300];
        for (int i = 0; i < n; i++) s[i] = (float)check_rng_int(&rng, 0, 20) / 4.0f;   /* many ties */
        if (trial % 7 == 0) s[check_rng_int(&rng, 0, n - 1)] = NAN;
        int32_t m = oc_dyn_top_k(s, n, k, force, work, out);
        int want = k < n ? k : n;
        REQUIREF(m == want, "n=%d k=%d: %d picks", n, k, (int)m);
        /* naive: pick the first in (forced, score descending with NaN last, index ascending) order,
         * want times */
        unsigned char taken[300] = { 0 };
        for (int t = 0; t < want; t++) {
            int best = -1;
            for (int i = 0; i < n; i++) {
                if (taken[i]) continue;
                if (best < 0) { best = i; continue; }
                float si = s[i] == s[i] ? s[i] : -INFINITY, sb = s[best] == s[best] ? s[best] : -INFINITY;
                if (best != force && (i == force || si > sb)) best = i;
            }
            taken[best] = 1;
        }
        for (int t = 0; t < m; t++) {
            CHECKF(taken[out[t]], "n=%d k=%d: picked %d, not in the naive top-k", n, k, (int)out[t]);
            if (t) CHECK(out[t] > out[t - 1]);
        }
    }
}

static void test_grid_search(void) {
    /* exact grids: mass only on columns phase, phase + s, ... (and a strong sink at column 0 that
     * the search must not follow to the largest stride): it finds (s, phase), not a multiple of s */
    int n = 900;
    float v[1000];
    double work[2000];
    int strides[] = { 2, 7, 32, 100 };
    for (int t = 0; t < 4; t++) {
        int s = strides[t], f = (3 * t + 1) % s;
        for (int j = 0; j < n; j++) v[j] = (j % s == f) ? 1.0f : 0.001f;
        v[0] = 50.0f;
        v[n - 1] = 50.0f;   /* and the local window */
        int32_t gs, gp;
        oc_dyn_grid_search(v, n, 0, 256, work, &gs, &gp);
        CHECKF(gs == s && gp == f, "grid at stride %d phase %d found as %d, %d", s, f, (int)gs, (int)gp);
        oc_dyn_grid_search(v, n, s, 256, work, &gs, &gp);   /* fixed stride: phase only */
        CHECK(gs == s && gp == f);
    }
    /* random profiles against a naive search written from dyn.h */
    check_rng rng = { 99 };
    for (int trial = 0; trial < 20; trial++) {
        int m = check_rng_int(&rng, 2, 900), max_s = check_rng_int(&rng, 2, trial % 2 ? 64 : 400);
        for (int j = 0; j < m; j++) v[j] = check_rng_uniform(&rng, 0.0f, 1.0f);
        int bs = 1, bp = 0, s_hi = max_s < m ? max_s : m;
        int edge = s_hi < m / 4 ? s_hi : m / 4, j1 = m - edge;
        int j0 = edge > j1 - OC_DYN_GRID_PERIODS * s_hi ? edge : j1 - OC_DYN_GRID_PERIODS * s_hi;
        double mean = 0, best = -INFINITY;
        for (int j = j0; j < j1; j++) mean += v[j];
        mean /= j1 - j0;
        for (int s = 2; s <= s_hi; s++)
            for (int f = 0; f < s; f++) {
                double sum = 0;
                int cnt = 0;
                for (int j = j0; j < j1; j++)
                    if (j % s == f) { sum += v[j]; cnt++; }
                double score = cnt ? (sum / cnt - mean) * sqrt((double)cnt) : -INFINITY;
                if (score > best) { best = score; bs = s; bp = f; }
            }
        int32_t gs, gp;
        oc_dyn_grid_search(v, m, 0, max_s, work, &gs, &gp);
        CHECKF(gs == bs && gp == bp, "trial %d: (%d, %d), naive (%d, %d)", trial, (int)gs, (int)gp, bs, bp);
    }
}

static void test_modality_perm(void) {
    uint8_t mod[50];
    int32_t perm[50], start[4];
    check_rng rng = { 5 };
    for (int i = 0; i < 50; i++) mod[i] = (uint8_t)check_rng_int(&rng, 0, 2);
    REQUIRE(oc_dyn_modality_perm(mod, 50, 3, perm, start, NULL) == OC_OK);
    CHECK(start[0] == 0 && start[3] == 50);
    int at = 0;
    for (int m = 0; m < 3; m++)
        for (int i = 0; i < 50; i++)
            if (mod[i] == m) CHECKF(perm[at++] == i, "modality %d: position %d out of order", m, i);
    mod[7] = 3;
    oc_error err = { OC_OK, "" };
    CHECK(oc_dyn_modality_perm(mod, 50, 3, perm, start, &err) == OC_ERR_INVALID);
    CHECK(strstr(err.message, "token 7") != NULL);
}

/* ---- patterns against dense attention with the explicit mask --------------------------------------- */

typedef struct pcase { int d, rep, n_kv_heads, n_q, q_offset, bidir; int32_t dtype; int shared; } pcase;

static void make_dyn_patterns(oc_head_pattern *pat, int n_head, int seed) {
    for (int h = 0; h < n_head; h++) {
        memset(&pat[h], 0, sizeof pat[h]);
        switch ((h + seed) % 4) {
        case 0:
            pat[h].kind = OC_PATTERN_VERTICAL_SLASH;
            pat[h].n_vertical = 13 + 29 * h;
            pat[h].n_slash = 3 + h % 3;
            break;
        case 1:
            pat[h].kind = OC_PATTERN_GRID;
            pat[h].grid_max_stride = 40;
            pat[h].grid_lines = 1 + (3 * h + 5 * seed) % 7;   /* every combination over the cases */
            break;
        case 2:
            pat[h].kind = OC_PATTERN_GRID;
            pat[h].grid_stride = 5 + h;   /* fixed stride (Table 3's frame_stride) */
            pat[h].grid_lines = 1 + (h + 2 * seed) % 7;
            break;
        default: pat[h].kind = h % 8 == 3 ? OC_PATTERN_DENSE : OC_PATTERN_VERTICAL_SLASH;
            pat[h].n_vertical = 0; pat[h].n_slash = 1; break;   /* the diagonal block alone */
        }
    }
}

static void run_pattern_case(const pcase *pc, int seed, const pools *ps) {
    check_rng rng = { 0xd15ULL + (unsigned long long)seed };
    dcase c;
    memset(&c, 0, sizeof c);
    c.d = pc->d; c.n_head_kv = pc->n_kv_heads; c.n_head = pc->n_kv_heads * pc->rep;
    c.n_q = pc->n_q; c.q_offset = pc->q_offset; c.n_kv = pc->q_offset + pc->n_q;
    c.mask = pc->bidir ? OC_ATTN_BIDIRECTIONAL : OC_ATTN_CAUSAL;
    c.dtype = pc->dtype;
    dcase_make(&c, &rng, 4.0f);
    oc_head_pattern pat[32];
    make_dyn_patterns(pat, c.n_head, seed);
    if (pc->shared) {   /* the heads of a kv group get one pattern and the same queries, so one index:
                           the engine stacks them (attn.c same_group) */
        for (int h = 0; h < c.n_head; h++) {
            int g = h / pc->rep;
            pat[h] = pat[g * pc->rep];
            memset(&pat[h], 0, sizeof pat[h]);
            if (g % 2 == 0) {
                pat[h].kind = OC_PATTERN_VERTICAL_SLASH; pat[h].n_vertical = 21; pat[h].n_slash = 3;
            } else {
                pat[h].kind = OC_PATTERN_GRID; pat[h].grid_max_stride = 24; pat[h].grid_lines = 7;
            }
            for (int i = 0; i < c.n_q && h % pc->rep; i++)
                memcpy(c.q + ((size_t)i * c.n_head + h) * c.d, c.q + ((size_t)i * c.n_head + g * pc->rep) * c.d,
                       sizeof(float) * (size_t)c.d);
        }
    }
    size_t n_out = (size_t)c.n_q * c.n_head * c.d;
    float *first = malloc(sizeof(float) * n_out), *sparse = malloc(sizeof(float) * n_out);
    double *ref = malloc(sizeof(double) * n_out);
    uint8_t *em = malloc((size_t)c.n_head * c.n_q * c.n_kv);
    oc_attn_dims dm = { c.n_q, c.n_kv, c.n_head, c.n_head_kv, c.d };
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        if (!isa_usable(isa)) continue;
        for (int t = 0; t < 3; t++) {
            size_t dyn_bytes = oc_attn_dyn_bytes(&dm, t + 1), sc_bytes = oc_attn_scratch_bytes(&dm, t + 1);
            void *dmem = aligned(dyn_bytes), *scratch = aligned(sc_bytes);
            dcall a = dcase_args(&c, pat, (oc_isa)isa);
            const oc_attn_dyn *dyn = NULL;
            oc_error err = { OC_OK, "" };
            REQUIREF(build_dcall(&a, ps->p[t], dmem, dyn_bytes, &dyn, &err) == OC_OK, "%s", err.message);
            a.c.dyn = dyn;
            oc_attn_stats st = { 0, 0, 0 }, st_mask = { 0, 0, 0 };
            check_poison_f32(c.out, n_out);
            REQUIREF(run_dcall(&a, ps->p[t], scratch, sc_bytes, &st, &err) == OC_OK, "%s", err.message);
            memcpy(sparse, c.out, sizeof(float) * n_out);
            if (t == 0) {
                memcpy(first, sparse, sizeof(float) * n_out);
                /* the mask from dyn.h's definitions, with this ISA's index */
                for (int h = 0; h < c.n_head; h++)
                    for (int i = 0; i < c.n_q; i++)
                        for (int j = 0; j < c.n_kv; j++)
                            em[((size_t)h * c.n_q + i) * c.n_kv + j] =
                                (uint8_t)keep_dyn(&c, &pat[h], &dyn->heads[h], c.q_offset + i, j);
                uint64_t kept = ref_attention(&c, em, ref);
                /* a Grid head's estimate covers only the keys its search views: the same choice as
                 * the search over the full column scores */
                size_t one_bytes = oc_attn_dyn_bytes(&dm, 1);
                void *one = aligned(one_bytes);
                float *vert = malloc(sizeof(float) * (size_t)c.n_kv);
                float *sl = malloc(sizeof(float) * (size_t)(2 * c.n_kv));
                double *gw = malloc(sizeof(double) * (size_t)(2 * c.n_kv));
                for (int h = 0; h < c.n_head; h++) {
                    if (pat[h].kind != OC_PATTERN_GRID) continue;
                    REQUIRE(oc_attn_dyn_scores(&a.c, &a.mem, a.isa, h, one, one_bytes, vert, sl, NULL) == OC_OK);
                    int32_t gs, gp;
                    oc_dyn_grid_search(vert, c.n_kv, pat[h].grid_stride, pat[h].grid_max_stride, gw, &gs, &gp);
                    CHECKF(gs == dyn->heads[h].stride && gp == dyn->heads[h].phase,
                           "seed %d head %d: grid (%d, %d) from the view, (%d, %d) from all columns", seed, h,
                           (int)dyn->heads[h].stride, (int)dyn->heads[h].phase, (int)gs, (int)gp);
                }
                oc_port_aligned_free(one);
                free(vert); free(sl); free(gw);
                check_vs_mask("", seed, (oc_isa)isa, &c, em, sparse, ref, kept, n_out, ps->p[t], scratch, sc_bytes, &st,
                              &st_mask);
                CHECK(st.flops_executed < st_mask.flops_executed);
            } else {
                CHECKF(memcmp(first, sparse, sizeof(float) * n_out) == 0, "seed %d isa=%s: %d threads differ from 1",
                       seed, oc_isa_name((oc_isa)isa), t + 1);
            }
            oc_port_aligned_free(dmem);
            oc_port_aligned_free(scratch);
        }
    }
    free(first); free(sparse); free(ref); free(em);
    dcase_free(&c);
}

static void test_patterns_equal_explicit_mask(void) {
    pools ps;
    REQUIRE(pools_open(&ps));
    static const pcase cases[] = {
        { 64, 1, 2, 131, 0, 0, OC_DTYPE_F16, 0 },     /* odd length, MHA */
        { 72, 3, 2, 200, 45, 0, OC_DTYPE_F32, 0 },    /* GQA 3, a later chunk (query offset) */
        { 80, 6, 1, 257, 0, 0, OC_DTYPE_F16, 0 },     /* GQA 6, as the 2B decoder */
        { 128, 2, 2, 163, 70, 0, OC_DTYPE_F16, 0 },
        { 80, 1, 3, 150, 0, 1, OC_DTYPE_F32, 0 },     /* bidirectional: vision encoder heads */
        { 128, 4, 1, 97, 0, 1, OC_DTYPE_F16, 0 },
        { 80, 3, 2, 230, 0, 0, OC_DTYPE_F16, 1 },  /* heads sharing an index: stacked */
        { 64, 2, 2, 180, 30, 0, OC_DTYPE_F32, 1 },
        /* the 2B decoder's group (6 heads, d 128) sharing one Vertical-Slash index: 6 x 64 stacked rows
         * exceed the 256 rows of a run's scratch at d 128, so the engine takes the heads in turns */
        { 128, 6, 1, 256, 0, 0, OC_DTYPE_F16, 1 },
    };
    /* emulated (check_emulated): cases 1, 2, 4 and 6, which still hold a query offset, GQA 6, MHA
     * bidirectional, stacked heads, and both key types */
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++)
        if (!check_emulated() || (0x56 >> k) & 1) run_pattern_case(&cases[k], k, &ps);
    pools_close(&ps);
}

/* ---- Q-Boundary heads (dyn.h, Alg. 2) ----------------------------------------------------------- */

typedef struct qcase { int d, rep, n_kv_heads, n_q, q_offset; int32_t dtype; oc_token_span img[3]; int n_img; } qcase;

static oc_modal_pattern modal(oc_pattern_kind kind, int32_t a, int32_t b, int32_t lines) {
    oc_modal_pattern m;
    memset(&m, 0, sizeof m);
    m.kind = kind;
    if (kind == OC_PATTERN_A_SHAPE) { m.n_sink = a; m.n_local = b; }
    if (kind == OC_PATTERN_VERTICAL_SLASH) { m.n_vertical = a; m.n_slash = b; }
    if (kind == OC_PATTERN_GRID) { m.grid_stride = a; m.grid_max_stride = b; m.grid_lines = lines; }
    return m;
}

/* Column scores (double) of head h over the given 64 query rows, and the diagonal scores. */
static void ref_scores_rows(const dcase *c, int h, const int *rows, double *vert, double *slash) {
    int g = h / (c->n_head / c->n_head_kv);
    double *w = malloc(sizeof(double) * (size_t)c->n_kv);
    for (int j = 0; j < c->n_kv; j++) vert[j] = 0;
    for (int o = 0; o < 2 * c->n_kv - 1; o++) slash[o] = 0;
    for (int r = 0; r < LAST_Q; r++) {
        int i = rows[r], p = c->q_offset + i;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < c->n_kv; j++) {
            w[j] = NAN;
            if (j > p) continue;
            double s = 0;
            for (int e = 0; e < c->d; e++)
                s += (double)c->q[((size_t)i * c->n_head + h) * c->d + e] * c->kf[((size_t)j * c->n_head_kv + g) * c->d + e];
            w[j] = s / sqrt((double)c->d);
            if (w[j] > mx) mx = w[j];
        }
        for (int j = 0; j < c->n_kv; j++) if (!isnan(w[j])) sum += exp(w[j] - mx);
        for (int j = 0; j < c->n_kv; j++) {
            if (isnan(w[j])) continue;
            vert[j] += exp(w[j] - mx) / sum;
            slash[p - j + c->n_kv - 1] += exp(w[j] - mx) / sum;
        }
    }
    free(w);
}

/* The chosen ones are a top-k of ref (up to near ties): none is below the k-th best by more than tol. */
static int is_top_k(const double *ref, int n, const int32_t *chosen, int k, int shift, double tol) {
    double *s = malloc(sizeof(double) * (size_t)n);
    memcpy(s, ref, sizeof(double) * (size_t)n);
    for (int a = 0; a < k; a++)   /* partial selection sort: s[k - 1] is the k-th best */
        for (int b = a + 1; b < n; b++)
            if (s[b] > s[a]) { double t = s[a]; s[a] = s[b]; s[b] = t; }
    int ok = 1;
    for (int a = 0; a < k && ok; a++) ok = ref[chosen[a] + shift] >= s[k - 1] - tol || chosen[a] + shift == n / 2;
    free(s);
    return ok;
}

static void run_q_boundary_case(const qcase *qc, int seed, const pools *ps) {
    check_rng rng = { 0x9b0ULL + (unsigned long long)seed };
    dcase c;
    memset(&c, 0, sizeof c);
    c.d = qc->d; c.n_head_kv = qc->n_kv_heads; c.n_head = qc->n_kv_heads * qc->rep;
    c.n_q = qc->n_q; c.q_offset = qc->q_offset; c.n_kv = qc->q_offset + qc->n_q;
    c.mask = OC_ATTN_CAUSAL; c.dtype = qc->dtype;
    dcase_make(&c, &rng, 4.0f);
    oc_token_layout *layout = NULL;
    REQUIRE(oc_layout_build(&layout, c.n_kv, qc->img, qc->n_img, 0.1f, NULL, NULL) == OC_OK);
    oc_head_pattern pat[16];
    memset(pat, 0, sizeof pat);
    for (int h = 0; h < c.n_head; h++) {
        oc_head_pattern *p = &pat[h];
        p->kind = OC_PATTERN_Q_BOUNDARY;
        switch ((h + seed) % 5) {
        case 0: p->modal[0] = modal(OC_PATTERN_VERTICAL_SLASH, 13, 3, 0); p->modal[1] = modal(OC_PATTERN_GRID, 0, 24, 7); break;
        case 1: p->modal[0] = modal(OC_PATTERN_A_SHAPE, 4, 20, 0); p->modal[1] = modal(OC_PATTERN_VERTICAL_SLASH, 30, 2, 0); break;
        case 2: p->modal[0] = modal(OC_PATTERN_GRID, 7, 2, 2 + (seed & 1)); p->modal[1] = modal(OC_PATTERN_DENSE, 0, 0, 0); break;
        case 3: p->modal[0] = modal(OC_PATTERN_DENSE, 0, 0, 0); p->modal[1] = modal(OC_PATTERN_GRID, 0, 40, 1 + seed % 7); break;
        default: memset(p, 0, sizeof *p); p->kind = OC_PATTERN_VERTICAL_SLASH; p->n_vertical = 9; p->n_slash = 2; break;
        }
        REQUIRE(oc_pattern_valid(p));
    }
    size_t n_out = (size_t)c.n_q * c.n_head * c.d;
    float *first = malloc(sizeof(float) * n_out), *sparse = malloc(sizeof(float) * n_out);
    double *ref = malloc(sizeof(double) * n_out);
    uint8_t *em = malloc((size_t)c.n_head * c.n_q * c.n_kv);
    oc_attn_dims dm = { c.n_q, c.n_kv, c.n_head, c.n_head_kv, c.d };
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        if (!isa_usable(isa)) continue;
        for (int t = 0; t < 3; t++) {
            size_t dyn_bytes = oc_attn_dyn_bytes(&dm, t + 1), sc_bytes = oc_attn_scratch_bytes(&dm, t + 1);
            void *dmem = aligned(dyn_bytes), *scratch = aligned(sc_bytes);
            dcall a = dcase_args(&c, pat, (oc_isa)isa);
            a.c.layout = layout;
            const oc_attn_dyn *dyn = NULL;
            oc_error err = { OC_OK, "" };
            REQUIREF(build_dcall(&a, ps->p[t], dmem, dyn_bytes, &dyn, &err) == OC_OK, "%s", err.message);
            a.c.dyn = dyn;
            oc_attn_stats st = { 0, 0, 0 }, st_mask = { 0, 0, 0 };
            check_poison_f32(c.out, n_out);
            REQUIREF(run_dcall(&a, ps->p[t], scratch, sc_bytes, &st, &err) == OC_OK, "%s", err.message);
            memcpy(sparse, c.out, sizeof(float) * n_out);
            if (t == 0) {
                memcpy(first, sparse, sizeof(float) * n_out);
                int n_dense_modalities = 0;
                for (int h = 0; h < c.n_head; h++)
                    for (int i = 0; i < c.n_q; i++) {
                        int p = c.q_offset + i, m = oc_layout_image_at(layout, p) >= 0;
                        oc_head_pattern sub = pat[h];
                        const oc_dyn_head *dh = &dyn->heads[h];
                        if (pat[h].kind == OC_PATTERN_Q_BOUNDARY) {
                            sub = oc_pattern_modal(&pat[h], m);
                            dh = m ? &dyn->heads_vision[h] : &dyn->heads[h];
                            if (oc_pattern_is_dynamic(sub.kind) && dh->dense) {
                                sub.kind = OC_PATTERN_DENSE;
                                n_dense_modalities += i == 0;
                            }
                        }
                        for (int j = 0; j < c.n_kv; j++)
                            em[((size_t)h * c.n_q + i) * c.n_kv + j] = (uint8_t)ref_dyn_keep(c.mask, &sub, dh, p, j);
                    }
                /* each dynamic modality's index comes from that modality's own last 64 rows */
                int rows[2][LAST_Q], n_rows[2] = { 0, 0 };
                for (int i = c.n_q - 1; i >= 0; i--) {
                    int m = oc_layout_image_at(layout, c.q_offset + i) >= 0;
                    if (n_rows[m] < LAST_Q) rows[m][LAST_Q - 1 - n_rows[m]++] = i;
                }
                double *rv = malloc(sizeof(double) * (size_t)c.n_kv), *rs = malloc(sizeof(double) * (size_t)(2 * c.n_kv));
                for (int h = 0; h < c.n_head; h++)
                    for (int m = 0; m < 2 && pat[h].kind == OC_PATTERN_Q_BOUNDARY; m++) {
                        const oc_dyn_head *dh = m ? &dyn->heads_vision[h] : &dyn->heads[h];
                        oc_head_pattern sub = oc_pattern_modal(&pat[h], m);
                        if (!oc_pattern_is_dynamic(sub.kind)) continue;
                        CHECKF(dh->dense == (n_rows[m] < LAST_Q), "seed %d head %d modality %d: dense %d with %d rows",
                               seed, h, m, (int)dh->dense, n_rows[m]);
                        if (dh->dense || sub.kind != OC_PATTERN_VERTICAL_SLASH) continue;
                        ref_scores_rows(&c, h, rows[m], rv, rs);
                        CHECKF(dh->n_vertical == sub.n_vertical && is_top_k(rv, c.n_kv, dh->vertical, dh->n_vertical, 0, 1e-4),
                               "seed %d head %d modality %d: columns are not the modality's top %d", seed, h, m,
                               (int)sub.n_vertical);
                        CHECKF(is_top_k(rs, 2 * c.n_kv - 1, dh->slash, dh->n_slash, c.n_kv - 1, 1e-4),
                               "seed %d head %d modality %d: diagonals are not the modality's top %d", seed, h, m,
                               (int)sub.n_slash);
                    }
                free(rv); free(rs);
                uint64_t kept = ref_attention(&c, em, ref);
                check_vs_mask("q-boundary ", seed, (oc_isa)isa, &c, em, sparse, ref, kept, n_out, ps->p[t], scratch,
                              sc_bytes, &st, &st_mask);
                CHECK(st.flops_executed < st_mask.flops_executed);
                (void)n_dense_modalities;
            } else {
                CHECKF(memcmp(first, sparse, sizeof(float) * n_out) == 0, "q-boundary seed %d: %d threads differ", seed,
                       t + 1);
            }
            oc_port_aligned_free(dmem);
            oc_port_aligned_free(scratch);
        }
    }
    free(first); free(sparse); free(ref); free(em);
    oc_layout_free(layout);
    dcase_free(&c);
}

static void test_q_boundary_equals_explicit_mask(void) {
    pools ps;
    REQUIRE(pools_open(&ps));
    static const qcase cases[] = {
        /* two images with text around and between: both modalities have 64 queries */
        { 64, 2, 2, 301, 0, OC_DTYPE_F16, { { 20, 150 }, { 170, 260 } }, 2 },
        /* a later chunk, GQA 5, d 80: the text after the image has fewer than 64 queries (dense) */
        { 80, 5, 1, 230, 40, OC_DTYPE_F32, { { 45, 250 } }, 1 },
        /* three images, d 128: text queries interleaved, their last 64 span several segments */
        { 128, 3, 2, 290, 0, OC_DTYPE_F16, { { 10, 80 }, { 110, 170 }, { 200, 240 } }, 3 },
        /* d 72 and no image in the call: every query is text */
        { 72, 1, 3, 150, 0, OC_DTYPE_F32, { { 0, 1 } }, 0 },
    };
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) run_q_boundary_case(&cases[k], k, &ps);
    pools_close(&ps);
}

/* ---- 2D-Boundary heads (dyn.h, Alg. 3) -------------------------------------------------------------- */

/* Head h's diagonal scores of pair (mq, mk) in ranks, in double, from the rows `rows` (the last 64 of
 * mq): rank offset o = rq - rk at o + n - 1, n = max(n_mk, n_mq); and the column scores by rank. */
static void ref_scores_2d(const dcase *c, int h, const int *rows, const uint8_t *mod, int mk, int n, double *vert,
                          double *slash) {
    int g = h / (c->n_head / c->n_head_kv);
    double *w = malloc(sizeof(double) * (size_t)c->n_kv);
    for (int r = 0; r < n; r++) vert[r] = 0;
    for (int o = 0; o < 2 * n - 1; o++) slash[o] = 0;
    for (int r = 0; r < LAST_Q; r++) {
        int i = rows[r], p = c->q_offset + i, rq = 0;
        for (int x = 0; x < p; x++) rq += mod[x] == mod[p];
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < c->n_kv; j++) {
            w[j] = NAN;
            if (j > p) continue;
            double s = 0;
            for (int e = 0; e < c->d; e++)
                s += (double)c->q[((size_t)i * c->n_head + h) * c->d + e] * c->kf[((size_t)j * c->n_head_kv + g) * c->d + e];
            w[j] = s / sqrt((double)c->d);
            if (w[j] > mx) mx = w[j];
        }
        for (int j = 0; j < c->n_kv; j++) if (!isnan(w[j])) sum += exp(w[j] - mx);
        for (int j = 0, rk = 0; j < c->n_kv; j++) {
            if (mod[j] != mk) continue;
            if (!isnan(w[j])) {
                vert[rk] += exp(w[j] - mx) / sum;
                slash[rq - rk + n - 1] += exp(w[j] - mx) / sum;
            }
            rk++;
        }
    }
    free(w);
}

static oc_modal_pattern pair_pattern(int which, int seed) {
    switch ((which + seed) % 6) {
    case 0: return modal(OC_PATTERN_VERTICAL_SLASH, 7 + seed, 2 + seed % 3, 0);
    case 1: return modal(OC_PATTERN_GRID, 0, 20, 1 + (which + 3 * seed) % 7);
    case 2: return modal(OC_PATTERN_A_SHAPE, 3, 17 + seed, 0);
    case 3: return modal(OC_PATTERN_GRID, 5 + seed % 3, 2, 1 + (2 * which + seed) % 7);   /* fixed stride */
    case 4: return modal(OC_PATTERN_DENSE, 0, 0, 0);
    default: return modal(OC_PATTERN_VERTICAL_SLASH, 0, 1, 0);   /* the diagonal block alone */
    }
}

static void run_2d_case(const qcase *qc, int seed, const pools *ps) {
    check_rng rng = { 0x2d0ULL + (unsigned long long)seed };
    dcase c;
    memset(&c, 0, sizeof c);
    c.d = qc->d; c.n_head_kv = qc->n_kv_heads; c.n_head = qc->n_kv_heads * qc->rep;
    c.n_q = qc->n_q; c.q_offset = qc->q_offset; c.n_kv = qc->q_offset + qc->n_q;
    c.mask = OC_ATTN_CAUSAL; c.dtype = qc->dtype;
    dcase_make(&c, &rng, 4.0f);
    oc_token_layout *layout = NULL;
    REQUIRE(oc_layout_build(&layout, c.n_kv, qc->img, qc->n_img, 0.1f, NULL, NULL) == OC_OK);
    uint8_t *mod = malloc((size_t)c.n_kv);
    for (int j = 0; j < c.n_kv; j++) mod[j] = oc_layout_image_at(layout, j) >= 0;
    oc_head_pattern pat[16];
    memset(pat, 0, sizeof pat);
    for (int h = 0; h < c.n_head; h++) {   /* every pair kind in every position over the heads and seeds */
        oc_head_pattern *p = &pat[h];
        if ((h + seed) % 5 == 4) {   /* a plain head beside the 2D ones */
            p->kind = OC_PATTERN_VERTICAL_SLASH; p->n_vertical = 9; p->n_slash = 2;
            continue;
        }
        p->kind = OC_PATTERN_BOUNDARY_2D;
        for (int m = 0; m < 4; m++) p->pair[m / 2][m % 2] = pair_pattern(m + h, seed);
        REQUIRE(oc_pattern_valid(p));
    }
    size_t n_out = (size_t)c.n_q * c.n_head * c.d;
    float *first = malloc(sizeof(float) * n_out), *sparse = malloc(sizeof(float) * n_out);
    double *ref = malloc(sizeof(double) * n_out);
    uint8_t *em = malloc((size_t)c.n_head * c.n_q * c.n_kv);
    oc_attn_dims dm = { c.n_q, c.n_kv, c.n_head, c.n_head_kv, c.d };
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        if (!isa_usable(isa)) continue;
        for (int t = 0; t < 3; t++) {
            size_t dyn_bytes = oc_attn_dyn_bytes(&dm, t + 1), sc_bytes = oc_attn_scratch_bytes(&dm, t + 1);
            void *dmem = aligned(dyn_bytes), *scratch = aligned(sc_bytes);
            dcall a = dcase_args(&c, pat, (oc_isa)isa);
            a.c.layout = layout;
            const oc_attn_dyn *dyn = NULL;
            oc_error err = { OC_OK, "" };
            REQUIREF(build_dcall(&a, ps->p[t], dmem, dyn_bytes, &dyn, &err) == OC_OK, "%s", err.message);
            a.c.dyn = dyn;
            oc_attn_stats st = { 0, 0, 0 }, st_mask = { 0, 0, 0 };
            check_poison_f32(c.out, n_out);
            REQUIREF(run_dcall(&a, ps->p[t], scratch, sc_bytes, &st, &err) == OC_OK, "%s", err.message);
            memcpy(sparse, c.out, sizeof(float) * n_out);
            if (t > 0) {
                CHECKF(memcmp(first, sparse, sizeof(float) * n_out) == 0, "2d seed %d: %d threads differ", seed, t + 1);
            } else {
                memcpy(first, sparse, sizeof(float) * n_out);
                for (int h = 0; h < c.n_head; h++)
                    for (int i = 0; i < c.n_q; i++)
                        for (int j = 0; j < c.n_kv; j++)
                            em[((size_t)h * c.n_q + i) * c.n_kv + j] = (uint8_t)(
                                pat[h].kind == OC_PATTERN_BOUNDARY_2D
                                    ? ref_2d_keep(c.mask, &pat[h], &dyn->pairs[h * 4], mod, c.q_offset + i, j)
                                    : ref_dyn_keep(c.mask, &pat[h], &dyn->heads[h], c.q_offset + i, j));
                /* the dynamic pairs' indices: from the query modality's own last 64 rows, in ranks */
                int rows[2][LAST_Q], n_rows[2] = { 0, 0 }, n_m[2] = { 0, 0 };
                for (int i = c.n_q - 1; i >= 0; i--) {
                    int m = mod[c.q_offset + i];
                    if (n_rows[m] < LAST_Q) rows[m][LAST_Q - 1 - n_rows[m]++] = i;
                }
                for (int j = 0; j < c.n_kv; j++) n_m[mod[j]]++;
                double *rv = malloc(sizeof(double) * (size_t)c.n_kv), *rs = malloc(sizeof(double) * (size_t)(2 * c.n_kv));
                for (int h = 0; h < c.n_head; h++)
                    for (int m = 0; m < 4 && pat[h].kind == OC_PATTERN_BOUNDARY_2D; m++) {
                        int mq = m / 2, mk = m % 2, n = n_m[mk] > n_m[mq] ? n_m[mk] : n_m[mq];
                        const oc_dyn_head *dh = &dyn->pairs[h * 4 + m];
                        oc_head_pattern sub = oc_pattern_pair(&pat[h], mq, mk);
                        if (!oc_pattern_is_dynamic(sub.kind)) continue;
                        CHECKF(dh->dense == (n_rows[mq] < LAST_Q), "2d seed %d head %d pair %d: dense %d with %d rows",
                               seed, h, m, (int)dh->dense, n_rows[mq]);
                        if (dh->dense || sub.kind != OC_PATTERN_VERTICAL_SLASH) continue;
                        ref_scores_2d(&c, h, rows[mq], mod, mk, n, rv, rs);
                        int nv = sub.n_vertical < n ? sub.n_vertical : n;
                        CHECKF(dh->n_vertical == nv && is_top_k(rv, n, dh->vertical, dh->n_vertical, 0, 1e-4),
                               "2d seed %d head %d pair %d: columns are not the pair's top %d", seed, h, m, nv);
                        CHECKF(is_top_k(rs, 2 * n - 1, dh->slash, dh->n_slash, n - 1, 1e-4),
                               "2d seed %d head %d pair %d: diagonals are not the pair's top %d", seed, h, m,
                               (int)sub.n_slash);
                    }
                free(rv); free(rs);
                uint64_t kept = ref_attention(&c, em, ref);
                check_vs_mask("2d ", seed, (oc_isa)isa, &c, em, sparse, ref, kept, n_out, ps->p[t], scratch, sc_bytes,
                              &st, &st_mask);
            }
            oc_port_aligned_free(dmem);
            oc_port_aligned_free(scratch);
        }
    }
    free(first); free(sparse); free(ref); free(em); free(mod);
    oc_layout_free(layout);
    dcase_free(&c);
}

static void test_2d_boundary_equals_explicit_mask(void) {
    pools ps;
    REQUIRE(pools_open(&ps));
    static const qcase cases[] = {
        /* two images with text around and between, d 64, GQA 2: both modalities have 64 queries */
        { 64, 2, 2, 301, 0, OC_DTYPE_F16, { { 20, 150 }, { 170, 260 } }, 2 },
        /* a later chunk (the first image before the call), GQA 5, d 80, odd length: the text after
         * the image has fewer than 64 queries (its dynamic pairs run dense) */
        { 80, 5, 1, 229, 40, OC_DTYPE_F32, { { 10, 250 } }, 1 },
        /* three images, d 128, GQA 3: text queries interleaved */
        { 128, 3, 2, 291, 0, OC_DTYPE_F16, { { 10, 80 }, { 110, 170 }, { 200, 275 } }, 3 },
        /* d 72, MHA, an image at the very start and text after */
        { 72, 1, 3, 203, 0, OC_DTYPE_F32, { { 0, 120 } }, 1 },
    };
    for (int seed = 0; seed < (check_emulated() ? 1 : 2); seed++)
        for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) run_2d_case(&cases[k], 4 * seed + k, &ps);
    pools_close(&ps);
}

/* Decode (and any call with fewer than 64 queries) runs dynamic heads dense; a prefill call without
 * an index, or on a segments base, is refused with a message. */
static void test_decode_dense_and_refusals(void) {
    check_rng rng = { 3 };
    dcase c;
    memset(&c, 0, sizeof c);
    c.d = 64; c.n_head_kv = 1; c.n_head = 2; c.n_q = 5; c.q_offset = 300; c.n_kv = 305;
    c.mask = OC_ATTN_CAUSAL; c.dtype = OC_DTYPE_F16;
    dcase_make(&c, &rng, 2.0f);
    oc_head_pattern pat[2], dense[2];
    make_dyn_patterns(pat, 2, 0);
    memset(dense, 0, sizeof dense);
    oc_attn_dims dm = { c.n_q, c.n_kv, c.n_head, c.n_head_kv, c.d };
    size_t sc_bytes = oc_attn_scratch_bytes(&dm, 1);
    void *scratch = aligned(sc_bytes);
    size_t n_out = (size_t)c.n_q * c.n_head * c.d;
    float *want = malloc(sizeof(float) * n_out);
    dcall a = dcase_args(&c, dense, OC_ISA_SCALAR);
    REQUIRE(run_dcall(&a, NULL, scratch, sc_bytes, NULL, NULL) == OC_OK);
    memcpy(want, c.out, sizeof(float) * n_out);
    a.c.patterns = pat;
    check_poison_f32(c.out, n_out);
    REQUIRE(run_dcall(&a, NULL, scratch, sc_bytes, NULL, NULL) == OC_OK);
    CHECK(memcmp(want, c.out, sizeof(float) * n_out) == 0);
    oc_error err = { OC_OK, "" };
    const oc_attn_dyn *dyn = NULL;
    CHECK(build_dcall(&a, NULL, scratch, sc_bytes, &dyn, &err) == OC_ERR_INVALID && !dyn);
    CHECK(strstr(err.message, "at least 64") != NULL);
    oc_port_aligned_free(scratch);
    dcase_free(&c);

    memset(&c, 0, sizeof c);
    c.d = 64; c.n_head_kv = 1; c.n_head = 2; c.n_q = 100; c.n_kv = 100;
    c.mask = OC_ATTN_CAUSAL; c.dtype = OC_DTYPE_F32;
    dcase_make(&c, &rng, 2.0f);
    oc_attn_dims dm2 = { c.n_q, c.n_kv, c.n_head, c.n_head_kv, c.d };
    sc_bytes = oc_attn_scratch_bytes(&dm2, 1);
    scratch = aligned(sc_bytes);
    a = dcase_args(&c, pat, OC_ISA_SCALAR);
    CHECK(run_dcall(&a, NULL, scratch, sc_bytes, NULL, &err) == OC_ERR_INVALID);
    CHECK(strstr(err.message, "oc_attn_dyn_build") != NULL);
    oc_token_span seg = { 0, 100 };
    a.c.mask = OC_ATTN_SEGMENTS; a.c.segments = &seg; a.c.n_segments = 1;
    CHECK(build_dcall(&a, NULL, scratch, sc_bytes, &dyn, &err) == OC_ERR_INVALID);
    CHECK(strstr(err.message, "causal or bidirectional") != NULL);
    a.c.mask = OC_ATTN_CAUSAL;
    pat[0].n_slash = 0;
    CHECK(build_dcall(&a, NULL, scratch, sc_bytes, &dyn, &err) == OC_ERR_INVALID);
    pat[0].n_slash = 2;
    CHECK(build_dcall(&a, NULL, scratch, 64, &dyn, &err) == OC_ERR_INVALID);   /* too little memory */
    oc_port_aligned_free(scratch);
    free(want);
    dcase_free(&c);
}

int main(void) {
    CHECK_RUN(test_estimate_tolerance_has_teeth);
    CHECK_RUN(test_estimate_equals_double);
    CHECK_RUN(test_estimate_fast_equals_plain);
    CHECK_RUN(test_top_k);
    CHECK_RUN(test_grid_search);
    CHECK_RUN(test_modality_perm);
    CHECK_RUN(test_patterns_equal_explicit_mask);
    CHECK_RUN(test_q_boundary_equals_explicit_mask);
    CHECK_RUN(test_2d_boundary_equals_explicit_mask);
    CHECK_RUN(test_decode_dense_and_refusals);
    return check_finish();
}
