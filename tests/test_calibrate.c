/* test_calibrate.c: the calibration algorithms (examples/tools/calib*.c). Each tiled statistic
 * against a naive double-precision reference that builds the whole score matrix (fine at test
 * sizes), on random heads with outputs poisoned first; then each method on synthetic attention
 * inputs whose right answer is known by construction (issue 18, must-show 1): a head that only
 * looks inside its image comes out intra-image, two identical layers group, a head whose argmax
 * always hits the grounded region gets the top visual score. */
#include "check.h"
#include "ocellus.h"
#include "attention/attn.h"
#include "attention/layout.h"
#include "port.h"
#include "support/dyn_ref.h"
#include "kvcache/kv_cache.h"
#include "tools/calib.h"
#include "tools/calib_scenes.h"
#include "tools/plan_svg.h"
#include "tools/scene_eval.h"
#include "tools/scene_ground.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- a synthetic prompt: text 0-3, image 0 at 4-13 (2x5), text 14-15, image 1 at 16-25, text 26-29 */
#define N_TOK 30
#define HD 16
static const int32_t images_[2][4] = { { 4, 10, 2, 5 }, { 16, 10, 2, 5 } };

static void tokens_of(int32_t *image_of, uint8_t *is_sink, oc_calib_tokens *t) {
    for (int32_t i = 0; i < N_TOK; i++) {
        image_of[i] = -1;
        is_sink[i] = 0;
    }
    for (int g = 0; g < 2; g++)
        for (int32_t k = 0; k < images_[g][1]; k++) {
            image_of[images_[g][0] + k] = g;
            is_sink[images_[g][0] + k] = k == 0;   /* ceil(10% of 10) = 1 sink token */
        }
    t->n_tokens = N_TOK;
    t->image_of = image_of;
    t->is_sink = is_sink;
}

static void fill(check_rng *r, float *p, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) p[i] = check_rng_uniform(r, lo, hi);
}

/* naive: the scaled score matrix of one head, rows x keys, in double */
static void naive_scores(const oc_calib_head *h, double *s) {
    for (int32_t i = 0; i < h->n_q; i++)
        for (int32_t j = 0; j < h->n_kv; j++) {
            double dot = 0.0;
            for (int32_t d = 0; d < h->head_dim; d++)
                dot += (double)h->q[i * h->q_stride + d] * (double)h->k[j * h->kv_stride + d];
            s[i * h->n_kv + j] = dot * h->scale;
        }
}

/* naive: softmax over the kept keys of row i, then the output row */
static void naive_output(const oc_calib_head *h, const oc_calib_tokens *t, oc_pattern_kind kind, const double *s,
                         int32_t i, double *out) {
    int32_t p = h->q_first + i;
    double m = -INFINITY, l = 0.0;
    for (int32_t j = 0; j < h->n_kv; j++)
        if (oc_calib_keeps(t, kind, p, j)) m = fmax(m, s[i * h->n_kv + j]);
    for (int32_t d = 0; d < h->head_dim; d++) out[d] = 0.0;
    for (int32_t j = 0; j < h->n_kv; j++) {
        if (!oc_calib_keeps(t, kind, p, j)) continue;
        double e = exp(s[i * h->n_kv + j] - m);
        l += e;
        for (int32_t d = 0; d < h->head_dim; d++) out[d] += e * h->v[j * h->kv_stride + d];
    }
    for (int32_t d = 0; d < h->head_dim; d++) out[d] /= l;
}

static double rel(double got, double ref) {
    if (!isfinite(got)) return INFINITY;
    return fabs(got - ref) / fmax(fabs(ref), 1e-300);
}

/* a random head over N_TOK keys, n_q query rows ending at the last token */
typedef struct rhead { float q[N_TOK * HD], k[N_TOK * HD], v[N_TOK * HD]; oc_calib_head h; } rhead;
static void random_head(check_rng *r, rhead *x, int32_t n_q, float spread) {
    fill(r, x->q, N_TOK * HD, -spread, spread);
    fill(r, x->k, N_TOK * HD, -spread, spread);
    fill(r, x->v, N_TOK * HD, -1.0f, 1.0f);
    x->h = (oc_calib_head){ n_q, N_TOK - n_q, N_TOK, HD, x->q, HD, x->k, x->v, HD, 0.25f };
}

static void test_keeps_rule(void) {
    int32_t image_of[N_TOK];
    uint8_t is_sink[N_TOK];
    oc_calib_tokens t;
    tokens_of(image_of, is_sink, &t);
    CHECK(!oc_calib_keeps(&t, OC_PATTERN_DENSE, 5, 6));                /* causal */
    CHECK(oc_calib_keeps(&t, OC_PATTERN_SINK, 20, 2));                 /* image query keeps text */
    CHECK(oc_calib_keeps(&t, OC_PATTERN_SINK, 20, 4));                 /* ... and image 0's sink */
    CHECK(!oc_calib_keeps(&t, OC_PATTERN_SINK, 20, 5));
    CHECK(!oc_calib_keeps(&t, OC_PATTERN_SINK, 20, 18));               /* not its own non-sink */
    CHECK(oc_calib_keeps(&t, OC_PATTERN_INTRA_IMAGE, 20, 18));
    CHECK(!oc_calib_keeps(&t, OC_PATTERN_INTRA_IMAGE, 20, 4));         /* no sinks of image 0 */
    CHECK(oc_calib_keeps(&t, OC_PATTERN_INTRA_IMAGE_SINK, 20, 4));
    CHECK(oc_calib_keeps(&t, OC_PATTERN_INTRA_IMAGE, 27, 5));          /* text queries stay dense */
}

static void test_mask_errors_match_naive(void) {
    check_rng r = { 0x5eed1 };
    int32_t image_of[N_TOK];
    uint8_t is_sink[N_TOK];
    oc_calib_tokens t;
    tokens_of(image_of, is_sink, &t);
    double scratch[4 * HD + OC_CALIB_TILE_KEYS], s[N_TOK * N_TOK], o_ref[HD], o_m[HD];
    static const oc_pattern_kind kinds[3] = { OC_PATTERN_SINK, OC_PATTERN_INTRA_IMAGE, OC_PATTERN_INTRA_IMAGE_SINK };
    for (int trial = 0; trial < 20; trial++) {
        rhead x;
        int32_t n_q = check_rng_int(&r, 1, N_TOK);
        random_head(&r, &x, n_q, trial % 2 ? 3.0f : 0.5f);
        double err[3] = { 0.0, 0.0, 0.0 }, ref = 0.0;   /* the helper adds to these */
        oc_calib_mask_errors(&x.h, &t, err, &ref, scratch);
        double e_ref[3] = { 0, 0, 0 }, r_ref = 0.0;
        naive_scores(&x.h, s);
        for (int32_t i = 0; i < n_q; i++) {
            naive_output(&x.h, &t, OC_PATTERN_DENSE, s, i, o_ref);
            for (int d = 0; d < HD; d++) r_ref += o_ref[d] * o_ref[d];
            for (int m = 0; m < 3; m++) {
                naive_output(&x.h, &t, kinds[m], s, i, o_m);
                for (int d = 0; d < HD; d++) e_ref[m] += (o_m[d] - o_ref[d]) * (o_m[d] - o_ref[d]);
            }
        }
        CHECKF(rel(ref, r_ref) < 1e-9, "trial %d: ref %g vs %g", trial, ref, r_ref);
        for (int m = 0; m < 3; m++)
            CHECKF(e_ref[m] == 0.0 ? err[m] < 1e-20 : rel(err[m], e_ref[m]) < 1e-7,
                   "trial %d mask %d: %g vs %g", trial, m, err[m], e_ref[m]);
    }
}

static void test_row_stats_match_naive(void) {
    check_rng r = { 0x5eed2 };
    double scratch[4 * HD + OC_CALIB_TILE_KEYS], s[N_TOK * N_TOK], probs[N_TOK], col[N_TOK];
    int64_t nnz[N_TOK];
    for (int trial = 0; trial < 20; trial++) {
        rhead x;
        int32_t n_q = check_rng_int(&r, 1, N_TOK);
        random_head(&r, &x, n_q, 2.0f);
        naive_scores(&x.h, s);
        double col_ref[N_TOK] = { 0 };
        int64_t nnz_ref[N_TOK] = { 0 };
        for (int32_t i = 0; i < n_q; i++) {
            int32_t p = x.h.q_first + i, arg = 0;
            double m = -INFINITY, l = 0.0;
            for (int32_t j = 0; j <= p; j++)
                if (s[i * N_TOK + j] > m) { m = s[i * N_TOK + j]; arg = j; }
            for (int32_t j = 0; j <= p; j++) l += exp(s[i * N_TOK + j] - m);
            for (int32_t j = 0; j < N_TOK; j++) probs[j] = NAN;   /* poison */
            oc_calib_row_probs(&x.h, i, probs, scratch);
            for (int32_t j = 0; j < N_TOK; j++) {
                double want = j <= p ? exp(s[i * N_TOK + j] - m) / l : 0.0;
                CHECKF(want == 0.0 ? probs[j] == 0.0 : rel(probs[j], want) < 1e-10, "row %d key %d: %g vs %g", i, j,
                       probs[j], want);
                if (j <= p) { col_ref[j] += want; nnz_ref[j]++; }
            }
            CHECKF(oc_calib_row_argmax(&x.h, i, scratch) == arg, "row %d argmax", i);
        }
        memset(col, 0, sizeof col);
        memset(nnz, 0, sizeof nnz);
        oc_calib_column_mass(&x.h, col, nnz, scratch);
        for (int32_t j = 0; j < N_TOK; j++) {
            CHECK(nnz[j] == nnz_ref[j]);
            CHECKF(col_ref[j] == 0.0 ? col[j] == 0.0 : rel(col[j], col_ref[j]) < 1e-10, "column %d", j);
        }
    }
}

static void test_jsd(void) {
    double p[4] = { 0.5, 0.5, 0, 0 }, q[4] = { 0, 0, 0.5, 0.5 }, u[4] = { 0.25, 0.25, 0.25, 0.25 };
    CHECK(fabs(oc_calib_jsd(p, q, 4) - 1.0) < 1e-12);   /* disjoint supports: 1 bit */
    CHECK(oc_calib_jsd(p, p, 4) == 0.0);
    /* naive: 0.5 KL(p||m) + 0.5 KL(u||m), m = (p+u)/2 */
    double want = 0.0;
    for (int j = 0; j < 4; j++) {
        double m = 0.5 * (p[j] + u[j]);
        if (p[j] > 0) want += 0.5 * p[j] * log2(p[j] / m);
        want += 0.5 * u[j] * log2(u[j] / m);
    }
    CHECK(rel(oc_calib_jsd(p, u, 4), want) < 1e-12);
}

static void test_blindsight_rules(void) {
    double e[3] = { 0.5, 0.05, 0.01 };
    CHECK(oc_calib_bs_choose(e, 1.0, 0.1) == OC_PATTERN_INTRA_IMAGE);   /* the first below alpha */
    e[0] = 0.09;
    CHECK(oc_calib_bs_choose(e, 1.0, 0.1) == OC_PATTERN_SINK);
    e[0] = e[1] = e[2] = 0.2;
    CHECK(oc_calib_bs_choose(e, 1.0, 0.1) == OC_PATTERN_DENSE);
    int32_t c[OC_PATTERN_COUNT] = { 3, 7, 0, 0, 0 };
    CHECK(oc_calib_bs_aggregate(c, 10, 0.25, 0.6, 0.6) == OC_PATTERN_DENSE);   /* 30% dense > 25% */
    int32_t c2[OC_PATTERN_COUNT] = { 2, 7, 1, 0, 0 };
    CHECK(oc_calib_bs_aggregate(c2, 10, 0.25, 0.6, 0.6) == OC_PATTERN_SINK);
    int32_t c3[OC_PATTERN_COUNT] = { 2, 2, 6, 0, 0 };                        /* 60% is not > 60% */
    CHECK(oc_calib_bs_aggregate(c3, 10, 0.25, 0.6, 0.6) == OC_PATTERN_INTRA_IMAGE_SINK);
    int32_t c4[OC_PATTERN_COUNT] = { 1, 1, 8, 0, 0 };
    CHECK(oc_calib_bs_aggregate(c4, 10, 0.25, 0.6, 0.6) == OC_PATTERN_INTRA_IMAGE);
    /* alpha_layer: fixed, or Sec. 5's Linear scheme 0.005 + (0.195 - 0.005) * layer / layers */
    oc_calib_params p;
    oc_calib_params_default(&p);
    CHECK(oc_calib_bs_alpha(&p, 0, 12) == 0.1 && oc_calib_bs_alpha(&p, 11, 12) == 0.1);
    p.bs_alpha = 0.005;
    p.bs_alpha_end = 0.195;
    CHECK(oc_calib_bs_alpha(&p, 0, 12) == 0.005);
    CHECK(rel(oc_calib_bs_alpha(&p, 6, 12), 0.1) < 1e-15);
    CHECK(rel(oc_calib_bs_alpha(&p, 11, 12), 0.005 + 0.19 * 11.0 / 12.0) < 1e-15);   /* never the end value */
}

static void test_kv_budgets(void) {
    double sc[6] = { 0.5, 0.0, 0.25, 0.125, 0.125, 0.0 };
    int32_t b[6];
    int64_t total = 6 * 100;
    REQUIRE(oc_calib_kv_budgets(sc, 6, total, 32, 0.1, b, NULL) == OC_OK);
    int64_t sum = 0;
    for (int i = 0; i < 6; i++) {
        /* Eq. 5-9 in double: w + rho (B - Nw) / N + (1 - rho)(B - Nw) s / sum s */
        double want = 32 + 0.1 * (600 - 192) / 6.0 + 0.9 * (600 - 192) * sc[i];
        CHECKF(fabs(b[i] - want) < 1.0, "kv head %d: %d vs %g", i, b[i], want);
        CHECK(b[i] >= 32);
        sum += b[i];
    }
    CHECK(sum == total);
    CHECK(oc_calib_kv_budgets(sc, 6, 6 * 31, 32, 0.1, b, NULL) == OC_ERR_INVALID);
    double h[2 * 4] = { 1, 0, 3, 0, 0, 0, 0, 4 }, kv[2 * 2];   /* 2 layers x 4 heads, 2 kv heads */
    oc_calib_kv_scores(h, 2, 4, 2, kv);
    CHECK(fabs(kv[0] - 0.125) < 1e-12 && fabs(kv[1] - 0.375) < 1e-12 && kv[2] == 0.0 && fabs(kv[3] - 0.5) < 1e-12);
}

static void test_zipvl(void) {
    double col[6] = { 0.5, 3.0, 0.25, 1.5, 0.5, 0.25 }, scratch[6];   /* sums to 6 = n */
    /* sorted: 3, 1.5, 0.5, 0.5, 0.25, 0.25; prefixes 3, 4.5, 5, 5.5, 5.75, 6 */
    CHECK(oc_calib_zipvl_p(col, 6, 6.0, 0.5, scratch) == 1);
    CHECK(oc_calib_zipvl_p(col, 6, 6.0, 0.75, scratch) == 2);     /* 4.5 >= 4.5 */
    CHECK(oc_calib_zipvl_p(col, 6, 6.0, 0.9, scratch) == 4);      /* 5.4 needs 5.5 */
    CHECK(oc_calib_zipvl_p(col, 6, 6.0, 0.975, scratch) == 6);    /* 5.85 needs 6 */
    CHECK(col[1] == 3.0);                                          /* the input is left alone */
    CHECK(oc_calib_zipvl_tau(0.8, 0.78) == OC_CALIB_ZIPVL_TAU);   /* 2.5% fewer: keep 0.975 */
    CHECK(oc_calib_zipvl_tau(0.8, 0.70) == OC_CALIB_ZIPVL_TAU_LOW);
}

/* ZipVL Alg. 1's output (calib_stats.c oc_calib_zipvl_errors) and the probe rows' mass against a
 * naive reference over the whole score matrix, on a head long enough to span several key tiles. */
#define ZN 150
static void test_zipvl_errors_match_naive(void) {
    check_rng r = { 0x5eed7 };
    static float q[ZN * HD], k[ZN * HD], v[ZN * HD];
    static double s[ZN * ZN];
    double scratch[4 * HD + OC_CALIB_TILE_KEYS], col[ZN], col_ref[ZN];
    uint8_t in_set[ZN];
    for (int trial = 0; trial < 6; trial++) {
        int32_t n_q = trial < 3 ? ZN : check_rng_int(&r, 1, ZN);
        fill(&r, q, ZN * HD, -1.5f, 1.5f);
        fill(&r, k, ZN * HD, -1.5f, 1.5f);
        fill(&r, v, ZN * HD, -1.0f, 1.0f);
        oc_calib_head h = { n_q, ZN - n_q, ZN, HD, q, HD, k, v, HD, 0.25f };
        for (int32_t j = 0; j < ZN; j++) {   /* set 1 inside set 0, as T at the low tau inside T at tau */
            in_set[j] = check_rng_int(&r, 0, 2) ? 1 : 0;
            if ((in_set[j] & 1) && check_rng_int(&r, 0, 1)) in_set[j] |= 2;
        }
        naive_scores(&h, s);
        double err[2] = { 0, 0 }, ref = 0.0, err_ref[2] = { 0, 0 }, ref_ref = 0.0;
        oc_calib_zipvl_errors(&h, in_set, 2, err, &ref, scratch);
        for (int32_t i = 0; i < n_q; i++) {
            int32_t p = h.q_first + i;
            double o[3][HD];
            for (int m = 0; m < 3; m++) {   /* 0: dense; 1, 2: set 0, 1 (0 outside the set) */
                for (int32_t d = 0; d < HD; d++) o[m][d] = 0.0;
                unsigned bit = m ? 1u << (m - 1) : 0u;
                if (m && !(in_set[p] & bit)) continue;
                double mx = -INFINITY, l = 0.0;
                for (int32_t j = 0; j <= p; j++)
                    if (!m || (in_set[j] & bit)) mx = fmax(mx, s[i * ZN + j]);
                for (int32_t j = 0; j <= p; j++) {
                    if (m && !(in_set[j] & bit)) continue;
                    double e = exp(s[i * ZN + j] - mx);
                    l += e;
                    for (int32_t d = 0; d < HD; d++) o[m][d] += e * v[j * HD + d];
                }
                for (int32_t d = 0; d < HD; d++) o[m][d] /= l;
            }
            for (int32_t d = 0; d < HD; d++) {
                ref_ref += o[0][d] * o[0][d];
                for (int m = 1; m < 3; m++) err_ref[m - 1] += (o[m][d] - o[0][d]) * (o[m][d] - o[0][d]);
            }
        }
        CHECKF(rel(ref, ref_ref) < 1e-10, "trial %d ref %g vs %g", trial, ref, ref_ref);
        for (int m = 0; m < 2; m++)
            CHECKF(rel(err[m], err_ref[m]) < 1e-10, "trial %d set %d: %g vs %g", trial, m, err[m], err_ref[m]);
        /* the probe rows' column sums: every fifth row */
        int32_t rows[ZN], n_rows = 0;
        for (int32_t i = 0; i < n_q; i += 5) rows[n_rows++] = i;
        for (int32_t j = 0; j < ZN; j++) col[j] = col_ref[j] = 0.0;
        oc_calib_rows_mass(&h, rows, n_rows, col, scratch);
        for (int32_t t = 0; t < n_rows; t++) {
            int32_t i = rows[t], p = h.q_first + i;
            double mx = -INFINITY, l = 0.0;
            for (int32_t j = 0; j <= p; j++) mx = fmax(mx, s[i * ZN + j]);
            for (int32_t j = 0; j <= p; j++) l += exp(s[i * ZN + j] - mx);
            for (int32_t j = 0; j <= p; j++) col_ref[j] += exp(s[i * ZN + j] - mx) / l;
        }
        for (int32_t j = 0; j < ZN; j++)
            CHECKF(col_ref[j] == 0.0 ? col[j] == 0.0 : rel(col[j], col_ref[j]) < 1e-10, "column %d", j);
    }
    /* every row in one set of every token: Alg. 1 is dense attention, no error */
    memset(in_set, 1, sizeof in_set);
    oc_calib_head h = { ZN, 0, ZN, HD, q, HD, k, v, HD, 0.25f };
    double err[1] = { 0 }, ref = 0.0;
    oc_calib_zipvl_errors(&h, in_set, 1, err, &ref, scratch);
    CHECKF(err[0] <= 1e-20 * ref && ref > 0.0, "T = every token: err %g", err[0]);
}

static void test_qc_groups(void) {
    double s[7] = { 0.01, 0.02, 0.5, 0.01, 0.01, 0.01, 0.3 };   /* 8 layers */
    int32_t f[4], l[4];
    int32_t n = oc_calib_qc_groups(s, 8, 0.1, 3, f, l);
    REQUIRE(n == 2);
    CHECK(f[0] == 0 && l[0] == 2);   /* 0-1-2, stopped by S(2,3) */
    CHECK(f[1] == 3 && l[1] == 5);   /* capped at three layers; 6 alone is no block */
}

/* ---- the whole observer on synthetic layers -------------------------------------------------- */

#define SL 3
#define SH 4
#define SKV 2
typedef struct synth {
    float q[N_TOK * SH * HD], k[N_TOK * SKV * HD], v[N_TOK * SKV * HD];
} synth;

static void unit(float *x, int dim, float len) {
    memset(x, 0, sizeof(float) * HD);
    x[dim] = len;
}

/* Layer where head 1 looks only inside its own image (its kv head 0), head 2 (kv head 1) puts the
 * last row's argmax on image 1 and the others look at text. `variant` changes layer 2's last rows
 * so that it differs from layers 0 and 1. */
static void make_layer(synth *s, check_rng *r, int variant) {
    for (int32_t t = 0; t < N_TOK; t++) {
        int32_t g = t >= 4 && t < 14 ? 0 : t >= 16 && t < 26 ? 1 : -1;
        for (int kv = 0; kv < SKV; kv++) {
            float *k = s->k + ((size_t)t * SKV + kv) * HD, *v = s->v + ((size_t)t * SKV + kv) * HD;
            fill(r, k, HD, -0.05f, 0.05f);
            if (g >= 0) k[g] += 1.0f; else k[4] += 1.0f;   /* image g along axis g, text along axis 4 */
            fill(r, v, HD, -1.0f, 1.0f);
        }
        for (int h = 0; h < SH; h++) {
            float *q = s->q + ((size_t)t * SH + h) * HD;
            if (h == 1 && g >= 0) unit(q, g, 40.0f);                   /* own image only */
            else if (h == 2 && t == N_TOK - 1) unit(q, 1, 40.0f);      /* last row -> image 1 */
            else unit(q, 4, 40.0f);                                    /* text */
            if (variant && t == N_TOK - 1 && h != 2) unit(q, 0, 40.0f);   /* layer 2: last row on image 0 */
        }
    }
}

/* One synthetic layer of a whole prompt (every row a query) shown to the calibration observer. */
static void observe_prompt(oc_calib *c, int32_t layer, int32_t n_tok, int32_t n_head, int32_t n_head_kv,
                           int32_t head_dim, const float *q, const float *k, const float *v, int32_t n_images,
                           const int32_t *images) {
    oc_attn_view view;
    memset(&view, 0, sizeof view);
    view.layer = layer;
    view.n_q = view.n_kv = view.n_prompt_tokens = n_tok;
    view.n_head = n_head;
    view.n_head_kv = n_head_kv;
    view.head_dim = head_dim;
    view.q = q;
    view.k = k;
    view.v = v;
    view.n_images = n_images;
    view.images = images;
    oc_calib_observe(c, &view);
}

static void observe_synth(oc_calib *c, synth *s, int32_t layer) {
    observe_prompt(c, layer, N_TOK, SH, SKV, HD, s->q, s->k, s->v, 2, &images_[0][0]);
}

/* The synthetic run with the observer's heads on n_threads threads; *out: its plan (NULL on a
 * failed REQUIRE). */
/* Heads of the decoder that are not dense. */
static int n_sparse_heads(const oc_plan *p) {
    oc_plan_stats st;
    oc_plan_stats_get(p, OC_PLAN_DECODER, &st);
    return st.n_sparse;
}

static void synthetic_calibration(int32_t n_threads, oc_plan **out) {
    static synth s[SL];
    *out = NULL;
    check_rng r = { 0x5eed3 };
    oc_plan_shape shape = { SL, SH, SKV, HD };
    oc_calib_params p;
    oc_calib_params_default(&p);
    p.kv_budget_tokens = 40;
    p.n_threads = n_threads;
    oc_calib *c;
    check_alloc ca;
    memset(&ca, 0, sizeof ca);
    oc_allocator counting = { check_alloc_fn, &ca };
    REQUIRE(oc_calib_open(&c, &p, &shape, 64, NULL, 0, &counting, NULL) == OC_OK);
    CHECKF(ca.bytes_live <= oc_calib_bytes(&shape, 64, NULL, 0, p.n_threads), "%zu bytes live", ca.bytes_live);   /* the stated bound */
    long calls_after_open = ca.n_calls;
    /* the grounding: every cell of image 1's 5x5 scene grid (the 2x5 token grid maps into it) */
    uint8_t none[25] = { 0 }, all[25];
    memset(all, 1, sizeof all);
    const uint8_t *cells[2] = { none, all };
    for (int item = 0; item < 3; item++) {
        oc_calib_item_begin(c, cells, 5);
        for (int l = 0; l < SL; l++) {
            if (l < 2) {
                if (l == 0) make_layer(&s[0], &r, 0);
                else s[1] = s[0];   /* layer 1 identical to layer 0 */
            } else {
                make_layer(&s[2], &r, 1);
            }
            observe_synth(c, &s[l], l);
        }
        oc_calib_item_end(c, 1, 1);
    }
    CHECKF(ca.n_calls == calls_after_open, "observing called the allocator %ld times", ca.n_calls - calls_after_open);
    oc_plan *plan;
    REQUIRE(oc_plan_create(&plan, &shape, NULL, NULL, NULL) == OC_OK);
    oc_error e;
    oc_status st = oc_calib_to_plan(c, plan, &e);
    CHECKF(st == OC_OK, "%s", e.message);
    for (int l = 0; l < SL; l++) {
        oc_pattern_kind k1 = oc_plan_head(plan, OC_PLAN_DECODER, l, 1)->kind;
        CHECKF(k1 == OC_PATTERN_INTRA_IMAGE, "layer %d head 1: %s, want intra-image", l, oc_plan_pattern_name(k1));
        oc_pattern_kind k0 = oc_plan_head(plan, OC_PLAN_DECODER, l, 0)->kind;
        CHECKF(k0 == OC_PATTERN_SINK, "layer %d head 0 (text only): %s, want sink", l, oc_plan_pattern_name(k0));
    }
    /* visual scores: kv head 1 (holding head 2) tops every layer */
    const double *vs = oc_calib_visual_scores(c);
    for (int l = 0; l < SL; l++) {
        CHECKF(vs[l * SKV + 1] > 0.3 && vs[l * SKV + 0] == 0.0, "layer %d scores %g %g", l, vs[l * SKV],
               vs[l * SKV + 1]);
        const int32_t *b = plan->stacks[OC_PLAN_DECODER].kv_budget_tokens + l * SKV;
        CHECKF(b[1] > b[0] && b[0] >= 32, "layer %d budgets %d %d", l, b[0], b[1]);
    }
    /* Q-Cache: layers 0 and 1 are identical (S = 0), layer 2 differs */
    const oc_stack_plan *dp = &plan->stacks[OC_PLAN_DECODER];
    REQUIRE(dp->n_lazy_groups == 1);
    CHECK(dp->lazy_groups[0].first_layer == 0 && dp->lazy_groups[0].last_layer == 1);
    CHECK(dp->lazy_groups[0].mode == OC_LAZY_VLA);
    /* the lazy layer keeps its first layer's tokens (the runtime's rule) */
    CHECK(!memcmp(dp->kv_budget_tokens + SKV, dp->kv_budget_tokens, sizeof(int32_t) * SKV));
    CHECK(dp->zipvl_tau_ppm[1] == dp->zipvl_tau_ppm[0]);
    static oc_kv_policy pol;   /* and the runtime takes the plan */
    CHECKF(oc_kv_policy_build(&pol, dp, SL, SKV, plan->kv_window_tokens, "t", &e) == OC_OK, "%s", e.message);
    for (int l = 0; l < SL; l++)   /* ZipVL: every layer gets a threshold, the paper's or the knee */
        CHECK(dp->zipvl_tau_ppm[l] == 975000 || dp->zipvl_tau_ppm[l] == 970000);
    CHECK(oc_plan_validate(plan, NULL) == OC_OK);
    /* the frontier's candidates (calib.h oc_calib_candidate): the papers' algorithms at each knob,
     * so the knob the calibration used gives its plan's section, and nothing else is set */
    CHECK(oc_calib_n_candidates(c, OC_CALIB_BLINDSIGHT) == OC_CALIB_BS_SWEEP && oc_calib_n_candidates(c, OC_CALIB_SPARSEMM) == 4 &&
          oc_calib_n_candidates(c, OC_CALIB_ZIPVL) == 4 && oc_calib_n_candidates(c, OC_CALIB_QCACHE) == 4 &&
          oc_calib_n_candidates(c, OC_CALIB_MMINFERENCE) == 0 && oc_calib_n_candidates(c, OC_CALIB_VISION) == 0);
    int64_t prev_total = INT64_MAX;
    for (int32_t k = 0; k < 4; k++) {   /* SparseMM: smaller means, never larger budgets */
        oc_plan *cand = NULL;
        char label[48];
        REQUIRE(oc_plan_create(&cand, &shape, NULL, NULL, NULL) == OC_OK);
        CHECK(oc_calib_candidate(c, OC_CALIB_SPARSEMM, k, cand, label, sizeof label, &e) == OC_OK);
        int64_t total = 0;
        for (int i = 0; i < SL * SKV; i++) total += cand->stacks[OC_PLAN_DECODER].kv_budget_tokens[i];
        CHECKF(total <= prev_total, "candidate %d (%s): %lld tokens after %lld", (int)k, label, (long long)total,
               (long long)prev_total);
        prev_total = total;
        CHECK(n_sparse_heads(cand) == 0);
        oc_plan_free(cand);
    }
    {
        oc_plan *bs = NULL, *qc = NULL;
        char label[48];
        REQUIRE(oc_plan_create(&bs, &shape, NULL, NULL, NULL) == OC_OK && oc_plan_create(&qc, &shape, NULL, NULL, NULL) == OC_OK);
        CHECK(oc_calib_candidate(c, OC_CALIB_BLINDSIGHT, 2, bs, label, sizeof label, &e) == OC_OK);   /* alpha 0.1 */
        CHECKF(!strcmp(label, "alpha 0.1"), "candidate 2 is '%s'", label);
        for (int l = 0; l < SL; l++)
            for (int h = 0; h < SH; h++)
                CHECK(oc_plan_head(bs, OC_PLAN_DECODER, l, h)->kind == oc_plan_head(plan, OC_PLAN_DECODER, l, h)->kind);
        CHECK(bs->stacks[OC_PLAN_DECODER].kv_budget_tokens[0] == OC_PLAN_KV_FULL && bs->stacks[OC_PLAN_DECODER].zipvl_tau_ppm[0] == 0 &&
              bs->stacks[OC_PLAN_DECODER].n_lazy_groups == 0);
        CHECK(oc_calib_candidate(c, OC_CALIB_QCACHE, 0, qc, label, sizeof label, &e) == OC_OK);   /* epsilon 0.1 */
        CHECK(qc->stacks[OC_PLAN_DECODER].n_lazy_groups == 1 && qc->stacks[OC_PLAN_DECODER].lazy_groups[0].first_layer == 0 &&
              qc->stacks[OC_PLAN_DECODER].lazy_groups[0].last_layer == 1);
        CHECK(oc_calib_candidate(c, OC_CALIB_BLINDSIGHT, OC_CALIB_BS_SWEEP, bs, label, sizeof label, &e) == OC_ERR_INVALID);
        CHECK(oc_calib_candidate(c, OC_CALIB_MMINFERENCE, 0, bs, label, sizeof label, &e) == OC_ERR_INVALID);
        oc_plan_free(bs);
        oc_plan_free(qc);
    }
    CHECK(oc_calib_js_mean(c, 0) < 1e-9 && oc_calib_js_mean(c, 0) >= 0.0 && oc_calib_js_mean(c, SL - 1) < 0.0);
    oc_calib_close(c);
    CHECK(ca.n_live == 0);
    /* out of memory at open, at each allocation (the block, then the pool's): a status, nothing leaked */
    for (long k = 1; k <= 64; k++) {
        memset(&ca, 0, sizeof ca);
        ca.fail_at = k;
        oc_calib *x = NULL;
        oc_status st_open = oc_calib_open(&x, &p, &shape, 64, NULL, 0, &counting, NULL);
        if (st_open == OC_OK) {   /* past the last allocation */
            CHECKF(k > 2, "open succeeded with allocation %ld failing", k);
            oc_calib_close(x);
            CHECK(ca.n_live == 0);
            break;
        }
        CHECK(st_open == OC_ERR_NOMEM && x == NULL);
        CHECK(ca.n_live == 0);
    }
    *out = plan;
}

/* Every method on synthetic layers where the answer is known by construction; the plan is the
 * same whether the observer runs its heads on one thread or several. */
static void test_calibration_on_synthetic_layers(void) {
    oc_plan *serial, *threaded;
    synthetic_calibration(1, &serial);
    synthetic_calibration(3, &threaded);
    REQUIRE(serial && threaded);
    CHECK(oc_plan_equal(serial, threaded));
    oc_plan_free(serial);
    oc_plan_free(threaded);
}

/* ---- ZipVL's output check (ours, calib.h OC_CALIB_ZIPVL_MAX_NMSE) on layers known by construction */

/* A 256-token prompt: text 0-7, image 0 at 8-119 (8x14), text 120-123, image 1 at 124-235, text
 * 236-255. Longer than the runtime's 64 recent + 64 random probes, so T is not every token. */
#define ZT 256
#define ZH 4
#define ZKV 2
static const int32_t zimages_[2][4] = { { 8, 112, 8, 14 }, { 124, 112, 8, 14 } };
typedef struct zsynth {
    float q[ZT * ZH * HD], k[ZT * ZKV * HD], v[ZT * ZKV * HD];
} zsynth;

/* Key axes: 4 the text tokens 0-3 ("labels", keys exactly on the axis), 5 the closing text, 0 the
 * sinks (kinds 1-2: the first token of each image and of the prompt); every other key is small noise.
 * kind 0, "labels": every query of every head reads the labels, whose values are as large as any:
 * the image rows' outputs are what the text tells them, as in the long model's layer 0. T holds the
 * labels and the 64 recent tokens, and Alg. 1 zeroes the output of the 188 rows in between: it must
 * be left dense.
 * kind 1, "image sinks": rows before the closing text put their mass on the first token of each
 * image (and the prompt's first token, for the rows before any image), whose values are zero (an
 * attention sink: a no-op), and the closing rows read the closing text (in T as the recent
 * probes). T holds the sinks and the recent tokens; the rows Alg. 1 zeroes had (almost) no output:
 * it keeps its zipvl-tau line.
 * kind 2: kind 1, but the last row reads the labels as kind 0's does (so Q-Cache groups it with a
 * kind-0 layer: the same last row). */
static void make_zlayer(zsynth *s, check_rng *r, int kind) {
    for (int32_t t = 0; t < ZT; t++) {
        int sink = t == 0 || t == 8 || t == 124, label = t < 4, closing = t >= 236;
        for (int kv = 0; kv < ZKV; kv++) {
            float *k = s->k + ((size_t)t * ZKV + kv) * HD, *v = s->v + ((size_t)t * ZKV + kv) * HD;
            fill(r, k, HD, -0.05f, 0.05f);
            fill(r, v, HD, -1.0f, 1.0f);
            if (label) unit(k, 4, 1.0f);
            if (closing) k[5] += 1.0f;
            if (kind != 0 && sink) {
                k[0] += 1.0f;
                memset(v, 0, sizeof(float) * HD);
            }
        }
        for (int h = 0; h < ZH; h++) {
            float *q = s->q + ((size_t)t * ZH + h) * HD;
            int axis = kind == 0 || (kind == 2 && t == ZT - 1) ? 4 : closing ? 5 : 0;
            unit(q, axis, 40.0f);
        }
    }
}

static void observe_z(oc_calib *c, zsynth *s, int32_t layer) {
    observe_prompt(c, layer, ZT, ZH, ZKV, HD, s->q, s->k, s->v, 2, &zimages_[0][0]);
}

/* Two prompts through layers of the given kinds: *plan_out the plan (NULL on a failed REQUIRE),
 * *c_out the run, open. */
static void zipvl_check_run(unsigned methods, const int *kinds, int32_t n_layers, double max_nmse, oc_plan **plan_out,
                            oc_calib **c_out) {
    static zsynth s[2];
    check_rng r = { 0x5eed9 };
    oc_plan_shape shape = { n_layers, ZH, ZKV, HD };
    oc_calib_params p;
    oc_calib_params_default(&p);
    p.methods = methods;
    p.zipvl_max_nmse = max_nmse;
    p.n_threads = 2;
    oc_calib *c = NULL;
    oc_error e;
    *c_out = NULL;
    *plan_out = NULL;
    REQUIREF(oc_calib_open(&c, &p, &shape, ZT, NULL, 0, NULL, &e) == OC_OK, "%s", e.message);
    *c_out = c;
    for (int item = 0; item < 2; item++) {
        oc_calib_item_begin(c, NULL, 0);
        for (int32_t l = 0; l < n_layers; l++) {
            make_zlayer(&s[l % 2], &r, kinds[l]);
            observe_z(c, &s[l % 2], l);
        }
        oc_calib_item_end(c, 1, 1);
    }
    oc_plan *plan = NULL;
    REQUIRE(oc_plan_create(&plan, &shape, NULL, NULL, NULL) == OC_OK);
    CHECKF(oc_calib_to_plan(c, plan, &e) == OC_OK, "%s", e.message);
    *plan_out = plan;
}

/* The plan's text parses back into the same plan, and the runtime's KV rules take it. */
static void check_round_trip(const oc_plan *plan) {
    static char text[16384];
    size_t n;
    oc_error e;
    oc_plan *q = NULL;
    REQUIREF(oc_plan_write(plan, text, sizeof text, &n, &e) == OC_OK, "%s", e.message);
    REQUIREF(oc_plan_parse(&q, text, n, "w", NULL, &e) == OC_OK, "%s", e.message);
    CHECK(oc_plan_equal(plan, q));
    const oc_stack_plan *d = &q->stacks[OC_PLAN_DECODER];
    static oc_kv_policy pol;
    CHECKF(oc_kv_policy_build(&pol, d, d->shape.n_layers, d->shape.n_kv_heads, q->kv_window_tokens, "t", &e) == OC_OK,
           "%s", e.message);
    oc_plan_free(q);
}

static void test_zipvl_output_check(void) {
    oc_calib *c = NULL;
    /* labels (layer 0) and image sinks (layer 1) */
    int kinds[2] = { 0, 1 };
    oc_plan *plan = NULL;
    zipvl_check_run(OC_CALIB_ZIPVL, kinds, 2, OC_CALIB_ZIPVL_MAX_NMSE, &plan, &c);
    REQUIRE(plan && c);
    const int32_t *tau = plan->stacks[OC_PLAN_DECODER].zipvl_tau_ppm;
    double n0 = oc_calib_zipvl_nmse(c, 0), n1 = oc_calib_zipvl_nmse(c, 1);
    CHECKF(n0 > 0.6 && tau[0] == 0, "label layer: NMSE %g, tau %d: want > 0.6 and left dense", n0, (int)tau[0]);
    CHECKF(n1 >= 0.0 && n1 < 0.01 && (tau[1] == 975000 || tau[1] == 970000), "sink layer: NMSE %g, tau %d", n1,
           (int)tau[1]);
    check_round_trip(plan);
    /* the report says which layer was left dense and why */
    FILE *f = tmpfile();
    REQUIRE(f);
    oc_calib_report(c, f);
    static char rep[8192];
    rewind(f);
    size_t got = fread(rep, 1, sizeof rep - 1, f);
    rep[got] = '\0';
    fclose(f);
    CHECKF(strstr(rep, "the check is ours"), "report:\n%s", rep);
    const char *first = strstr(rep, "layer   0:"), *second = strstr(rep, "layer   1:");
    REQUIRE(first && second);
    CHECKF(strstr(first, "LEFT DENSE") && strstr(first, "LEFT DENSE") < second && !strstr(second, "LEFT DENSE"),
           "report:\n%s", rep);
    oc_plan_free(plan);
    oc_calib_close(c);
    /* the check off (a threshold above any NMSE): both keep the paper's tau */
    zipvl_check_run(OC_CALIB_ZIPVL, kinds, 2, 1e9, &plan, &c);
    REQUIRE(plan && c);
    tau = plan->stacks[OC_PLAN_DECODER].zipvl_tau_ppm;
    CHECK(tau[0] != 0 && tau[1] != 0);
    check_round_trip(plan);
    oc_plan_free(plan);
    oc_calib_close(c);
    /* a lazy group (Q-Cache: the same last row) of a label layer and a sink-like layer: the second
     * passes the check alone, but the group's first layer picks T for both, so the group stays dense */
    int grouped[2] = { 0, 2 };
    zipvl_check_run(OC_CALIB_ZIPVL | OC_CALIB_QCACHE, grouped, 2, OC_CALIB_ZIPVL_MAX_NMSE, &plan, &c);
    REQUIRE(plan && c);
    const oc_stack_plan *d = &plan->stacks[OC_PLAN_DECODER];
    REQUIREF(d->n_lazy_groups == 1, "%d lazy groups", (int)d->n_lazy_groups);
    double g1 = oc_calib_zipvl_nmse(c, 1);
    CHECKF(oc_calib_zipvl_keeps_layer(g1, OC_CALIB_ZIPVL_MAX_NMSE), "layer 1 alone: NMSE %g", g1);
    CHECK(d->zipvl_tau_ppm[0] == 0 && d->zipvl_tau_ppm[1] == 0);
    check_round_trip(plan);
    oc_plan_free(plan);
    oc_calib_close(c);
}

/* ---- the library's observation hook on the demo model ----------------------------------------- */

typedef struct hook_log {
    int32_t n_calls, n_prefill_calls, bad, n_vision_calls;
    int32_t last_n_kv[8];
    double q_sum;
    char answer[64];
    size_t n_answer;
} hook_log;

static void on_attention(void *user, const oc_attn_view *v) {
    hook_log *g = user;
    if (v->stack == 1) {   /* one image through one encoder layer: segments cover the patches */
        g->n_vision_calls++;
        int32_t covered = 0;
        for (int32_t s = 0; s < v->n_segments; s++) covered += v->segments[2 * s + 1] - v->segments[2 * s];
        if (v->n_q != v->n_kv || v->q_first != 0 || covered != v->n_kv || v->n_head != v->n_head_kv) g->bad++;
        return;
    }
    g->n_calls++;
    if (v->layer < 0 || v->layer >= 8 || v->n_kv != v->q_first + v->n_q || v->n_head % v->n_head_kv) g->bad++;
    if (v->q_first == 0) g->n_prefill_calls++;
    if (v->layer >= 0 && v->layer < 8) {
        if (g->last_n_kv[v->layer] >= v->n_kv) g->bad++;   /* the cache grows call by call */
        g->last_n_kv[v->layer] = v->n_kv;
    }
    /* the images sit inside the prompt */
    for (int32_t i = 0; i < v->n_images; i++)
        if (v->images[4 * i] < 0 || v->images[4 * i] + v->images[4 * i + 1] > v->n_prompt_tokens ||
            v->images[4 * i + 1] != v->images[4 * i + 2] * v->images[4 * i + 3])
            g->bad++;
    for (size_t i = 0; i < (size_t)v->n_q * (size_t)v->n_head * (size_t)v->head_dim; i++) g->q_sum += v->q[i];
    for (size_t i = 0; i < (size_t)v->n_kv * (size_t)v->n_head_kv * (size_t)v->head_dim; i++)
        if (!isfinite(v->k[i]) || !isfinite(v->v[i])) { g->bad++; break; }
}

static int collect_text(void *user, const char *text, size_t n) {
    hook_log *g = user;
    if (g->n_answer + n < sizeof g->answer) {
        memcpy(g->answer + g->n_answer, text, n);
        g->n_answer += n;
        g->answer[g->n_answer] = '\0';
    }
    return 0;
}

/* Ask test_demo.c's item 9 ("What color is the circle in image 1?" -> green) with and without
 * the observer: the same answer, and the observer sees every layer of every forward call. */
static void test_hook_on_demo_model(void) {
    oc_error e;
    oc_model *m = NULL;
    if (oc_model_open(&m, "examples/demo/ocellus-demo.gguf", "examples/demo/ocellus-demo-mmproj.gguf", NULL, &e)) {
        check_skip("demo model: %s", e.message);
        return;
    }
    static uint8_t rgb[OC_SCENE_MAX_IMAGES * 112 * 112 * 3];
    oc_scene_item it;
    REQUIRE(oc_scene_make(77, 9, 1, 2, 112, &it, rgb) == 0);   /* test_demo.c's item */
    oc_image_rgb img[2];
    for (int32_t i = 0; i < it.n_images; i++) img[i] = (oc_image_rgb){ rgb + (size_t)i * 112 * 112 * 3, 112, 112, 112 * 3 };
    hook_log with, without;
    for (int observe = 0; observe < 2; observe++) {
        hook_log *g = observe ? &with : &without;
        memset(g, 0, sizeof *g);
        oc_context_params cp;
        oc_context_params_default(&cp);
        oc_scene_eval_context_params(&cp, 2, 112);
        cp.n_threads = 2;
        cp.batch_tokens = 16;   /* prefill in several calls */
        if (observe) {
            cp.on_attention = on_attention;
            cp.attention_user = g;
        }
        oc_context *ctx = NULL;
        REQUIREF(oc_context_open(&ctx, m, &cp, &e) == OC_OK, "%s", e.message);
        oc_request r;
        oc_request_default(&r);
        r.question = it.question;
        r.images = img;
        r.n_images = it.n_images;
        r.max_new_tokens = 4;
        r.on_text = collect_text;
        r.user = g;
        CHECKF(oc_ask(ctx, &r, &e) == OC_OK, "%s", e.message);
        oc_stats st;
        oc_context_get_stats(ctx, &st);
        if (observe) {
            int32_t n_prefill_calls = (st.n_prompt_tokens + 15) / 16;
            /* 6 layers per forward call: the prefill calls plus one per generated token but the last */
            CHECKF(g->n_calls == 6 * (n_prefill_calls + st.n_generated - 1 + (st.n_generated < 4 ? 1 : 0)) ||
                   g->n_calls == 6 * (n_prefill_calls + st.n_generated),
                   "%d calls for %d prefill calls and %d tokens", g->n_calls, n_prefill_calls, st.n_generated);
            CHECK(g->n_prefill_calls == 6);
            oc_model_info mi;
            oc_model_get_info(m, &mi);
            CHECKF(g->n_vision_calls == mi.vision_layers * it.n_images, "%d vision calls", g->n_vision_calls);
            CHECK(g->bad == 0);
            CHECK(isfinite(g->q_sum) && g->q_sum != 0.0);
        }
        oc_context_close(ctx);
    }
    CHECKF(!strcmp(with.answer, without.answer), "'%s' vs '%s'", with.answer, without.answer);
    CHECKF(oc_scene_answer_ok("green", with.answer), "answer '%s'", with.answer);
    oc_model_close(m);
}

/* The scene grounding: the named shape's cell for a colour question. */
static void test_scene_grounding(void) {
    oc_scene_desc d;
    oc_scene_item it;
    uint8_t cells[OC_SCENE_MAX_IMAGES * 16];
    int32_t n_checked = 0;
    for (uint64_t i = 0; i < 200; i++) {
        REQUIRE(oc_scene_describe(7, i, 1, 4, 112, &d, &it) == 0);
        int32_t n = oc_scene_ground(&d, &it, cells);
        if (d.q.type != OC_SCENE_COLOR) continue;
        REQUIRE(n == 1);
        const oc_scene_image *im = &d.images[d.q.image_a];
        for (int32_t s2 = 0; s2 < im->n_shapes; s2++)
            if (im->shapes[s2].kind == d.q.kind) {
                CHECK(cells[d.q.image_a * 16 + im->shapes[s2].row * 4 + im->shapes[s2].col] == 1);
                CHECK(!strcmp(it.answer, oc_scene_color_name(im->shapes[s2].color)));
            }
        n_checked++;
    }
    CHECK(n_checked > 10);
}

/* ---- the plan lines calibration adds: calibration, visual-score ------------------------------- */

static const char calibrated_plan[] =
    "ocellus-plan 1\n"
    "calibration tool=ocellus-calibrate methods=blindsight,sparsemm  model=x.gguf fnv1a64=00ff\n"
    "shape decoder layers 3 heads 4 kv-heads 2 head-dim 16\n"
    "decoder default sink\n"
    "decoder layer 0-1 visual-score 0.5 0  # scores of kv heads 0 and 1\n"
    "decoder layer 2 visual-score 0.25 0.25\n";

static void test_plan_calibration_lines(void) {
    oc_plan *p = NULL, *q = NULL;
    oc_error e;
    REQUIREF(oc_plan_parse(&p, calibrated_plan, sizeof calibrated_plan - 1, "t", NULL, &e) == OC_OK, "%s", e.message);
    CHECK(!strcmp(p->calibration, "tool=ocellus-calibrate methods=blindsight,sparsemm model=x.gguf fnv1a64=00ff"));
    const int32_t *vs = p->stacks[OC_PLAN_DECODER].visual_score_ppm;
    CHECK(vs[0] == 500000 && vs[1] == 0 && vs[2] == 500000 && vs[4] == 250000 && vs[5] == 250000);
    /* canonical text reads back into equal data */
    size_t n;
    static char text[8192];
    REQUIRE(oc_plan_write(p, text, sizeof text, &n, &e) == OC_OK);
    REQUIREF(oc_plan_parse(&q, text, n, "w", NULL, &e) == OC_OK, "%s", e.message);
    CHECK(oc_plan_equal(p, q));
    q->stacks[OC_PLAN_DECODER].visual_score_ppm[3] = 1;
    CHECK(!oc_plan_equal(p, q));
    oc_plan_free(q);
    /* re-budgeting from the stored scores (Eq. 5-9): the half-score kv heads get the most */
    REQUIRE(oc_calib_plan_budgets(p, 6 * 100, OC_CALIB_KV_RHO, &e) == OC_OK);
    const int32_t *b = p->stacks[OC_PLAN_DECODER].kv_budget_tokens;
    CHECK(b[0] > b[4] && b[4] > b[1] && b[1] >= 32 && b[0] + b[1] + b[2] + b[3] + b[4] + b[5] == 600);
    /* the SVG names every pattern and draws the bars */
    FILE *f = tmpfile();
    REQUIRE(f);
    CHECK(oc_plan_svg_write(p, "t <&>", f) == 0);
    long size = ftell(f);
    rewind(f);
    static char svg[65536];
    size_t got = fread(svg, 1, sizeof svg - 1, f);
    svg[got] = '\0';
    fclose(f);
    CHECK(size > 1000 && strstr(svg, "</svg>") && strstr(svg, "intra-image+sink") && strstr(svg, "budget 1") &&
          strstr(svg, "t &lt;&amp;&gt;"));
    oc_plan_free(p);
    /* errors name their line */
    static const struct { const char *text, *msg; } bad[] = {
        { "ocellus-plan 1\ncalibration\nshape decoder layers 1 heads 2 kv-heads 1 head-dim 8\n", "t:2: empty calibration" },
        { "ocellus-plan 1\ncalibration a=b\ncalibration c=d\nshape decoder layers 1 heads 2 kv-heads 1 head-dim 8\n",
          "t:3: duplicate calibration" },
        { "ocellus-plan 1\ncalibration novalue\nshape decoder layers 1 heads 2 kv-heads 1 head-dim 8\n",
          "t:2: bad calibration word" },
        { "ocellus-plan 1\nshape decoder layers 1 heads 2 kv-heads 1 head-dim 8\ndecoder layer 0 visual-score 0.5 0.5\n",
          "t:3: decoder layer 0 lists 2 visual-scores" },
        { "ocellus-plan 1\nshape decoder layers 1 heads 2 kv-heads 1 head-dim 8\ndecoder layer 0 visual-score 1.5\n",
          "t:3: visual-score 1.5 out of range" },
        { "ocellus-plan 1\nshape decoder layers 2 heads 2 kv-heads 1 head-dim 8\ndecoder layer 0-1 visual-score 0.5\n"
          "decoder layer 1 visual-score 0.5\n", "t:4: decoder layer 1 kv-head 0 visual-score already set on line 3" },
        { "ocellus-plan 1\nshape decoder layers 1 heads 2 kv-heads 1 head-dim 8\nshape vision layers 1 heads 2 head-dim 8\n"
          "vision layer 0 visual-score 0.5\n", "t:4: visual-score is for decoder layers" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = NULL;
        oc_status st = oc_plan_parse(&p, bad[i].text, strlen(bad[i].text), "t", NULL, &e);
        CHECKF(st == OC_ERR_FORMAT && p == NULL && !strncmp(e.message, bad[i].msg, strlen(bad[i].msg)),
               "case %zu: got '%s', want '%s...'", i, st ? e.message : "OK", bad[i].msg);
        oc_plan_free(p);
    }
    /* validation refuses a calibration text the parser could not read back */
    oc_plan_shape sh = { 1, 2, 1, 8 };
    REQUIRE(oc_plan_create(&p, &sh, NULL, NULL, NULL) == OC_OK);
    snprintf(p->calibration, sizeof p->calibration, "a=b #c");
    CHECK(oc_plan_validate(p, NULL) == OC_ERR_INVALID);
    snprintf(p->calibration, sizeof p->calibration, "a=b c=d");
    CHECK(oc_plan_validate(p, NULL) == OC_OK);
    oc_plan_free(p);
}

/* --data DIR: items.jsonl as `ocellus scene` writes it, read and calibrated; a bad line names itself. */
static void write_file(const char *path, const char *text, const uint8_t *rgb, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (text) fputs(text, f);
    if (rgb) fwrite(rgb, 1, n, f);
    fclose(f);
}

static void test_calibrate_data_folder(void) {
    oc_error e;
    oc_model *m = NULL;
    if (oc_model_open(&m, "examples/demo/ocellus-demo.gguf", "examples/demo/ocellus-demo-mmproj.gguf", NULL, &e)) {
        check_skip("demo model: %s", e.message);
        return;
    }
    const char *dir = "build/tests";   /* exists: this program lives there */
    static uint8_t rgb[112 * 112 * 3 * OC_SCENE_MAX_IMAGES];
    oc_scene_item it;
    REQUIRE(oc_scene_make(77, 9, 1, 1, 112, &it, rgb) == 0);   /* a colour question, one image */
    write_file("build/tests/calib_0.ppm", "P6\n112 112\n255\n", NULL, 0);
    FILE *f = fopen("build/tests/calib_0.ppm", "ab");
    REQUIRE(f);
    fwrite(rgb, 1, 112 * 112 * 3, f);
    fclose(f);
    char jsonl[1024];
    snprintf(jsonl, sizeof jsonl,
             "{\"images\":[\"calib_0.ppm\"],\"question\":\"%s\",\"answer\":\"%s\",\"grid\":4,"
             "\"grounding\":[[0,0,0],[0,1,1],[0,2,2],[0,3,3]]}\n\n"
             "{\"images\":[\"calib_0.ppm\"],\"question\":\"%s\",\"answer\":\"%s\"}\n",
             it.question, it.answer, it.question, it.answer);
    write_file("build/tests/items.jsonl", jsonl, NULL, 0);
    oc_plan_shape shape = { 6, 4, 2, 64 };
    oc_calib_params cp;
    oc_calib_params_default(&cp);
    oc_context_params ctxp;
    oc_context_params_default(&ctxp);
    oc_scene_eval_context_params(&ctxp, 2, 112);
    ctxp.n_threads = 2;
    ctxp.on_attention = oc_calib_observe;
    ctxp.max_image_pixels = 112 * 112;   /* oc_ask decodes the folder's files (calib_scenes.h) */
    oc_calib *c = NULL;
    oc_context *ctx = NULL;
    REQUIRE(oc_calib_open(&c, &cp, &shape, ctxp.max_context_tokens, NULL, 0, NULL, &e) == OC_OK);
    ctxp.attention_user = c;
    REQUIREF(oc_context_open(&ctx, m, &ctxp, &e) == OC_OK, "%s", e.message);
    oc_calib_scene_params sp;
    oc_calib_scene_params_default(&sp);
    int64_t n = 0, right = 0;
    CHECKF(oc_calib_data(ctx, c, dir, &sp, &n, &right, &e) == OC_OK, "%s", e.message);
    CHECK(n == 2 && right == 2 && oc_calib_n_items(c) == 2);
    static const char *const bad[] = {
        "{\"images\":[\"calib_0.ppm\"],\"question\":\"q\"}\n",                       /* no answer */
        "{\"images\":[\"../calib_0.ppm\"],\"question\":\"q\",\"answer\":\"a\"}\n",   /* a path */
        "{\"images\":[\"calib_0.ppm\"],\"question\":\"q\",\"answer\":\"a\",\"grid\":4,\"grounding\":[[0,4,0]]}\n",
        "{\"images\":[\"missing.ppm\"],\"question\":\"q\",\"answer\":\"a\"}\n",
        "{\"images\":[\"calib_0.ppm\"],\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file("build/tests/items.jsonl", bad[i], NULL, 0);
        oc_status st = oc_calib_data(ctx, c, dir, &sp, &n, &right, &e);
        CHECKF(st != OC_OK && strstr(e.message, "items.jsonl:1: "), "case %zu: %s", i, st ? e.message : "OK");
    }
    remove("build/tests/items.jsonl");
    remove("build/tests/calib_0.ppm");
    oc_context_close(ctx);
    oc_calib_close(c);
    oc_model_close(m);
}

/* ---- vision encoder heads ---------------------------------------------------------------------- */

static int vision_keeps(int32_t i, int32_t j, int32_t lo, int32_t hi, int32_t sink, int32_t local, int dense) {
    if (j < lo || j >= hi) return 0;
    return dense || j < sink || (j > i - local && j <= i);
}

static void test_vision_errors_match_naive(void) {
    check_rng r = { 0x5eed4 };
    double scratch[4 * HD + OC_CALIB_TILE_KEYS], s[N_TOK * N_TOK];
    int32_t seg_start[N_TOK], seg_end[N_TOK], sink[3] = { 0, 2, 3 }, local[3] = { 4, 4, 9 };
    for (int32_t i = 0; i < N_TOK; i++) {   /* segments [0,12), [12,30) */
        seg_start[i] = i < 12 ? 0 : 12;
        seg_end[i] = i < 12 ? 12 : N_TOK;
    }
    for (int trial = 0; trial < 10; trial++) {
        rhead x;
        random_head(&r, &x, N_TOK, trial % 2 ? 3.0f : 0.5f);
        double err[3] = { 0, 0, 0 }, ref = 0.0;
        oc_calib_vision_errors(&x.h, seg_start, seg_end, 3, sink, local, err, &ref, scratch);
        naive_scores(&x.h, s);
        double e_ref[3] = { 0, 0, 0 }, r_ref = 0.0;
        for (int32_t i = 0; i < N_TOK; i++) {
            double o[4][HD];
            for (int m = 0; m < 4; m++) {
                double mx = -INFINITY, l = 0.0;
                for (int32_t j = 0; j < N_TOK; j++)
                    if (vision_keeps(i, j, seg_start[i], seg_end[i], m ? sink[m - 1] : 0, m ? local[m - 1] : 0, m == 0))
                        mx = fmax(mx, s[i * N_TOK + j]);
                for (int d = 0; d < HD; d++) o[m][d] = 0.0;
                for (int32_t j = 0; j < N_TOK; j++) {
                    if (!vision_keeps(i, j, seg_start[i], seg_end[i], m ? sink[m - 1] : 0, m ? local[m - 1] : 0, m == 0))
                        continue;
                    double ex = exp(s[i * N_TOK + j] - mx);
                    l += ex;
                    for (int d = 0; d < HD; d++) o[m][d] += ex * x.v[j * HD + d];
                }
                for (int d = 0; d < HD; d++) o[m][d] /= l;
            }
            for (int d = 0; d < HD; d++) {
                r_ref += o[0][d] * o[0][d];
                for (int m = 1; m < 4; m++) e_ref[m - 1] += (o[m][d] - o[0][d]) * (o[m][d] - o[0][d]);
            }
        }
        CHECKF(rel(ref, r_ref) < 1e-9, "trial %d ref", trial);
        for (int m = 0; m < 3; m++) CHECKF(rel(err[m], e_ref[m]) < 1e-7, "trial %d cand %d: %g vs %g", trial, m, err[m], e_ref[m]);
    }
}

/* Head 0 of a 1-layer encoder looks only at its own patch (a local window keeps it); head 1 looks
 * 8 patches away (past the query or beyond every window: only dense has it). 16 patches, one key
 * axis each. */
static void test_vision_heads_on_synthetic_images(void) {
    oc_plan_shape dec = { 1, 2, 1, HD }, vis = { 1, 2, 2, HD };
    oc_calib_params p;
    oc_calib_params_default(&p);
    p.methods = OC_CALIB_VISION;
    oc_calib *c;
    REQUIRE(oc_calib_open(&c, &p, &dec, 64, &vis, 64, NULL, NULL) == OC_OK);
    enum { P = 16 };
    static float q[P * 2 * HD], k[P * 2 * HD], v[P * 2 * HD];
    int32_t seg[2] = { 0, P };
    check_rng r = { 0x5eed5 };
    for (int image = 0; image < 4; image++) {
        fill(&r, v, (size_t)P * 2 * HD, -1.0f, 1.0f);
        fill(&r, k, (size_t)P * 2 * HD, -0.05f, 0.05f);
        for (int32_t t = 0; t < P; t++) {
            float *q0 = q + (size_t)t * 2 * HD, *q1 = q0 + HD, *k0 = k + (size_t)t * 2 * HD, *k1 = k0 + HD;
            k0[t] += 1.0f;                   /* head 0: key t along axis t */
            unit(q0, t, 40.0f);              /* ... and query t looks for itself */
            k1[t] += 1.0f;
            unit(q1, (t + 8) % HD, 40.0f);   /* head 1: the key 8 patches away */
        }
        oc_attn_view view;
        memset(&view, 0, sizeof view);
        view.stack = 1;
        view.n_q = view.n_kv = view.n_prompt_tokens = P;
        view.n_head = view.n_head_kv = 2;
        view.head_dim = HD;
        view.q = q;
        view.k = k;
        view.v = v;
        view.n_segments = 1;
        view.segments = seg;
        oc_calib_observe(c, &view);
    }
    oc_plan *plan;
    REQUIRE(oc_plan_create(&plan, &dec, &vis, NULL, NULL) == OC_OK);
    oc_error e;
    REQUIREF(oc_calib_to_plan(c, plan, &e) == OC_OK, "%s", e.message);
    const oc_head_pattern *h0 = oc_plan_head(plan, OC_PLAN_VISION, 0, 0), *h1 = oc_plan_head(plan, OC_PLAN_VISION, 0, 1);
    CHECKF(h0->kind == OC_PATTERN_A_SHAPE && h0->n_sink == 0 && h0->n_local == P / 4, "head 0: %s sink %d local %d",
           oc_plan_pattern_name(h0->kind), h0->n_sink, h0->n_local);
    CHECKF(h1->kind == OC_PATTERN_DENSE, "head 1: %s", oc_plan_pattern_name(h1->kind));
    CHECK(oc_plan_validate(plan, NULL) == OC_OK);
    oc_plan_free(plan);
    oc_calib_close(c);
}

/* MMInference's search (calib_mminf.c): Table 3 as written; the per-head objective against a
 * double reference (each candidate's output under its mask, written from dyn.h's definitions with
 * the index the engine built, tests/support/dyn_ref.c); the argmin with Table 3's order on ties. */
static void test_mminf_search(void) {
    oc_head_pattern sp[OC_CALIB_MMINF_MAX_CAND];
    REQUIRE(oc_calib_mminf_space(1.0, 256, sp) == 24);
    CHECK(sp[0].kind == OC_PATTERN_GRID && sp[0].grid_stride == 256 && sp[0].grid_lines == OC_GRID_HLINE &&
          sp[0].grid_max_stride == 1024);
    CHECK(sp[11].kind == OC_PATTERN_GRID && sp[11].grid_stride == 0 && sp[11].grid_lines == 7);
    CHECK(sp[12].kind == OC_PATTERN_A_SHAPE && sp[12].n_sink == 128 && sp[12].n_local == 1024);
    CHECK(sp[14].n_local == 4096 && sp[15].kind == OC_PATTERN_VERTICAL_SLASH && sp[15].n_vertical == 1000 &&
          sp[15].n_slash == 1024);
    CHECK(sp[22].n_vertical == 3500 && sp[22].n_slash == 200 && sp[23].n_vertical == 1000 && sp[23].n_slash == 2500);
    REQUIRE(oc_calib_mminf_space(0.001, 0, sp) == 18);   /* no frame stride: no fixed-stride grids */
    CHECK(sp[0].grid_max_stride == 2 && sp[6].n_sink == 1 && sp[6].n_local == 1 && sp[17].n_vertical == 1);
    double tie[3] = { 0.5, 0.2, 0.2 };
    CHECK(oc_calib_mminf_choose(tie, 3) == 1);

    check_rng r = { 77 };
    enum { NQ = 150, D = 32 };
    float *q = malloc(sizeof(float) * NQ * D), *k = malloc(sizeof(float) * NQ * D), *v = malloc(sizeof(float) * NQ * D);
    fill(&r, q, NQ * D, -3.0f, 3.0f);
    fill(&r, k, NQ * D, -1.0f, 1.0f);
    fill(&r, v, NQ * D, -1.0f, 1.0f);
    oc_calib_head h = { NQ, 0, NQ, D, q, D, k, v, D, 1.0f / sqrtf((float)D) };
    oc_head_pattern cand[4];
    memset(cand, 0, sizeof cand);
    cand[0].kind = OC_PATTERN_A_SHAPE; cand[0].n_sink = 4; cand[0].n_local = 16;
    cand[1].kind = OC_PATTERN_VERTICAL_SLASH; cand[1].n_vertical = 8; cand[1].n_slash = 2;
    cand[2].kind = OC_PATTERN_GRID; cand[2].grid_max_stride = 12; cand[2].grid_lines = OC_GRID_VLINE | OC_GRID_SLASH;
    cand[3].kind = OC_PATTERN_A_SHAPE; cand[3].n_sink = NQ; cand[3].n_local = NQ;   /* keeps every key */
    void *work = malloc(oc_calib_mminf_work_bytes(NQ, D));
    double err[4] = { 0, 0, 0, 0 }, err_modal[8] = { 0 }, ref = 0.0;
    uint64_t kept[4] = { 0, 0, 0, 0 };
    oc_error e;
    /* one image at [20, 100): 80 vision and 70 text queries, so both modalities are indexed */
    oc_token_span img = { 20, 100 };
    oc_token_layout *layout = NULL;
    REQUIRE(oc_layout_build(&layout, NQ, &img, 1, 0.1f, NULL, NULL) == OC_OK);
    REQUIREF(oc_calib_mminf_head(&h, cand, 4, NQ, layout, NULL, work, err, err_modal, NULL, &ref, kept, &e) == OC_OK, "%s", e.message);
    /* the indices the engine builds for this head (the same call as the search makes) */
    oc_attn_call a;
    memset(&a, 0, sizeof a);
    a.n_q = a.n_kv = NQ; a.n_head = a.n_head_kv = 1; a.head_dim = D; a.q_stride_token = D; a.kv_dtype = OC_DTYPE_F32;
    a.k_stride_token = a.v_stride_token = D; a.out_stride_token = D; a.scale = h.scale; a.mask = OC_ATTN_CAUSAL;
    oc_attn_dims dims = { NQ, NQ, 1, 1, D };
    size_t db = oc_attn_dyn_bytes(&dims, 1);
    void *dmem = oc_port_aligned_alloc(OC_MEM_ALIGN, db);
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    float *scratch_out = malloc(sizeof(float) * NQ * D);
    oc_attn_host mem = { q, k, v, scratch_out };
    double *s = malloc(sizeof(double) * NQ * NQ), *od = malloc(sizeof(double) * D), *oc = malloc(sizeof(double) * D);
    naive_scores(&h, s);
    for (int c = 0; c < 4; c++) {
        double want = 0.0, want_ref = 0.0, want_modal[2] = { 0.0, 0.0 };
        uint64_t want_kept = 0;
        for (int qb = 0; qb < 2; qb++) {   /* 0: the candidate on every row; 1: as each modality's (Q-Boundary) */
            oc_attn_call ac = a;
            oc_head_pattern qbp;
            memset(&qbp, 0, sizeof qbp);
            qbp.kind = OC_PATTERN_Q_BOUNDARY;
            qbp.modal[0] = qbp.modal[1] = oc_pattern_to_modal(&cand[c]);
            ac.patterns = qb ? &qbp : &cand[c];
            ac.layout = qb ? layout : NULL;
            oc_dyn_head none;
            memset(&none, 0, sizeof none);
            const oc_dyn_head *dhm[2] = { &none, &none };
            if (oc_pattern_is_dynamic(cand[c].kind)) {
                REQUIRE(oc_attn_dyn_build(&ac, &mem, oc_isa_best(&cpu), NULL, dmem, db, &ac.dyn, NULL) == OC_OK);
                dhm[0] = &ac.dyn->heads[0];
                dhm[1] = qb ? &ac.dyn->heads_vision[0] : &ac.dyn->heads[0];
                CHECK(!dhm[0]->dense && !dhm[1]->dense);
            }
            for (int32_t i = 0; i < NQ; i++) {
                int mod = i >= 20 && i < 100;
                const oc_dyn_head *dh = dhm[mod];
                for (int pass = 0; pass < 2; pass++) {   /* 0: dense, 1: the candidate's mask */
                    double m = -INFINITY, l = 0.0, *o = pass ? oc : od;
                    for (int32_t j = 0; j <= i; j++)
                        if (!pass || ref_dyn_keep(OC_ATTN_CAUSAL, &cand[c], dh, i, j)) m = fmax(m, s[i * NQ + j]);
                    for (int x = 0; x < D; x++) o[x] = 0.0;
                    for (int32_t j = 0; j <= i; j++) {
                        if (pass && !ref_dyn_keep(OC_ATTN_CAUSAL, &cand[c], dh, i, j)) continue;
                        double p = exp(s[i * NQ + j] - m);
                        l += p;
                        want_kept += pass && !qb;
                        for (int x = 0; x < D; x++) o[x] += p * v[j * D + x];
                    }
                    for (int x = 0; x < D; x++) o[x] = l > 0 ? o[x] / l : 0.0;
                }
                for (int x = 0; x < D; x++) {
                    double sq = (oc[x] - od[x]) * (oc[x] - od[x]);
                    if (qb) want_modal[mod] += sq;
                    else want += sq;
                    if (!qb) want_ref += od[x] * od[x];
                }
            }
        }
        for (int mod = 0; mod < 2; mod++)
            CHECKF(fabs(err_modal[2 * c + mod] - want_modal[mod]) <= 1e-4 * want_modal[mod] + 1e-9 * want_ref,
                   "candidate %d modality %d: squared error %.9g, naive %.9g", c, mod, err_modal[2 * c + mod],
                   want_modal[mod]);
        CHECKF(rel(ref, want_ref) < 1e-5, "dense reference %.9g, naive %.9g", ref, want_ref);
        CHECKF(fabs(err[c] - want) <= 1e-4 * want + 1e-9 * want_ref, "candidate %d: squared error %.9g, naive %.9g", c,
               err[c], want);
        CHECKF(kept[c] == want_kept, "candidate %d: kept %llu pairs, naive %llu", c, (unsigned long long)kept[c],
               (unsigned long long)want_kept);
    }
    CHECK(err[0] > 0.0 && err[3] < 1e-10 * ref);
    /* the vertical-slash candidate's modality indices differ from its whole-prompt one */
    CHECK(err_modal[2] + err_modal[3] != err[1]);
    oc_layout_free(layout);
    free(s); free(od); free(oc); free(scratch_out); free(work); free(q); free(k); free(v);
    oc_port_aligned_free(dmem);
}

/* ---- MMInference's cross-modality step on heads whose answer is known by construction ----------- */

/* A prompt of text [0, 150), one 15 x 20 image [150, 450), text [450, 600); two heads, each with its
 * own kv head (all scores are dot products, q scaled by sqrt(D) against the observer's 1/sqrt(D)):
 *  head 0 (2D-Boundary by construction): a text query of text rank r looks at text keys only, in a
 *    window of about 10 text ranks before it (B cos(w (r - r')): the window crosses the image in
 *    prompt positions); an image query of rank u looks at image keys only: a window of about 10
 *    ranks plus four vertical columns (image ranks 10, 77, 150, 201). Cross-modality scores are
 *    2M below: no mass. Right answer: 2d-boundary with vision-vision a vertical-slash and
 *    text-text a pattern that keeps the text ranks' window; no No-Boundary or Q-Boundary head of
 *    Table 3's sizes keeps the text keys before the image for the text rows after it.
 *  head 1 (plain Vertical-Slash): every query looks at a window of about 12 positions before it and
 *    at four columns (positions 20, 200, 300, 500), modality-blind. Right answer: vertical-slash
 *    (a 2D head cuts the windows at the image's edges into rank coordinates that do not line up). */
#define MM_N 600
#define MM_D 32
#define MM_IMG0 150
#define MM_IMG1 450
static const int32_t mm_images_[1][4] = { { MM_IMG0, MM_IMG1 - MM_IMG0, 15, 20 } };

typedef struct mm_synth { float q[MM_N * 2 * MM_D], k[MM_N * 2 * MM_D], v[MM_N * 2 * MM_D]; } mm_synth;

static void make_mm_heads(mm_synth *s, check_rng *r) {
    const double w = 6.283185307179586 / 400.0, wp = 6.283185307179586 / 800.0;   /* periods above each stream's length */
    const double bt = 450.0, bv = 450.0, m = 400.0, av = 448.0;      /* windows of sigma ~3 ranks; a column
                                                                        weighs e^-2 of the query's own key */
    const double bp = 1000.0, ap = 998.0;                            /* head 1: sigma ~4 positions */
    const float up = sqrtf((float)MM_D);
    memset(s, 0, sizeof *s);
    for (int32_t t = 0; t < MM_N; t++) {
        int vis = t >= MM_IMG0 && t < MM_IMG1;
        int32_t rank = vis ? t - MM_IMG0 : t < MM_IMG0 ? t : t - (MM_IMG1 - MM_IMG0);
        float *q0 = s->q + (size_t)t * 2 * MM_D, *q1 = q0 + MM_D;
        float *k0 = s->k + (size_t)t * 2 * MM_D, *k1 = k0 + MM_D;
        int vert = rank == 10 || rank == 77 || rank == 150 || rank == 201;
        int c = vis ? 3 : 1;   /* the modality's window channels */
        k0[0] = vis ? -1.0f : 1.0f;
        if (!(vis && vert)) {   /* a column has no window channels: every image row sees it alike */
            k0[c] = (float)cos(w * rank);
            k0[c + 1] = (float)sin(w * rank);
        }
        k0[5] = vis && vert ? 1.0f : 0.0f;
        q0[0] = up * (float)(vis ? -m : m);
        q0[c] = up * (float)((vis ? bv : bt) * cos(w * rank));
        q0[c + 1] = up * (float)((vis ? bv : bt) * sin(w * rank));
        q0[5] = vis ? up * (float)av : 0.0f;
        int vert1 = t == 20 || t == 200 || t == 300 || t == 500;
        if (!vert1) {
            k1[0] = (float)cos(wp * t);
            k1[1] = (float)sin(wp * t);
        }
        k1[2] = vert1 ? 1.0f : 0.0f;
        q1[0] = up * (float)(bp * cos(wp * t));
        q1[1] = up * (float)(bp * sin(wp * t));
        q1[2] = up * (float)ap;
        for (int h = 0; h < 2; h++) fill(r, s->v + ((size_t)t * 2 + h) * MM_D, MM_D, -1.0f, 1.0f);
    }
}

/* NMSE of head h of s under pattern p against dense, run by the engine (the plan's executor). */
static double mm_engine_nmse(const mm_synth *s, int h, const oc_head_pattern *p, const oc_token_layout *layout) {
    oc_attn_call a;
    memset(&a, 0, sizeof a);
    a.n_q = a.n_kv = MM_N; a.n_head = a.n_head_kv = 1; a.head_dim = MM_D; a.q_stride_token = 2 * MM_D;
    a.kv_dtype = OC_DTYPE_F32; a.k_stride_token = a.v_stride_token = 2 * MM_D; a.out_stride_token = MM_D;
    a.scale = 1.0f / sqrtf((float)MM_D); a.mask = OC_ATTN_CAUSAL; a.layout = layout;
    oc_attn_dims dims = { MM_N, MM_N, 1, 1, MM_D };
    size_t sb = oc_attn_scratch_bytes(&dims, 1), db = oc_attn_dyn_bytes(&dims, 1);
    void *scratch = oc_port_aligned_alloc(OC_MEM_ALIGN, sb), *dmem = oc_port_aligned_alloc(OC_MEM_ALIGN, db);
    float *dense = malloc(sizeof(float) * MM_N * MM_D), *sparse = malloc(sizeof(float) * MM_N * MM_D);
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    oc_isa isa = oc_isa_best(&cpu);
    oc_attn_host mem = { s->q + h * MM_D, s->k + h * MM_D, s->v + h * MM_D, dense };
    double e = INFINITY, ref = 0.0, err = 0.0;
    if (oc_attn_run(&a, &mem, isa, NULL, scratch, sb, NULL, NULL) != OC_OK) goto done;
    a.patterns = p;
    mem.out = sparse;
    if (oc_pattern_needs_index(p) && oc_attn_dyn_build(&a, &mem, isa, NULL, dmem, db, &a.dyn, NULL) != OC_OK) goto done;
    if (oc_attn_run(&a, &mem, isa, NULL, scratch, sb, NULL, NULL) != OC_OK) goto done;
    for (size_t i = 0; i < (size_t)MM_N * MM_D; i++) {
        ref += (double)dense[i] * dense[i];
        err += ((double)sparse[i] - dense[i]) * ((double)sparse[i] - dense[i]);
    }
    e = err / ref;
done:
    free(dense); free(sparse);
    oc_port_aligned_free(scratch); oc_port_aligned_free(dmem);
    return e;
}

static void test_mminf_2d_boundary_choice(void) {
    static mm_synth s;
    check_rng r = { 2020 };
    make_mm_heads(&s, &r);
    oc_plan_shape shape = { 1, 2, 2, MM_D };
    oc_calib_params p;
    oc_calib_params_default(&p);
    p.methods = OC_CALIB_MMINFERENCE;
    p.mminf_scale = 0.05;   /* Table 3 for ~25K tokens; this prompt is 600 */
    oc_calib *c;
    check_alloc ca;
    memset(&ca, 0, sizeof ca);
    oc_allocator counting = { check_alloc_fn, &ca };
    REQUIRE(oc_calib_open(&c, &p, &shape, MM_N, NULL, 0, &counting, NULL) == OC_OK);
    long calls_after_open = ca.n_calls;
    oc_calib_item_begin(c, NULL, 0);
    observe_prompt(c, 0, MM_N, 2, 2, MM_D, s.q, s.k, s.v, 1, &mm_images_[0][0]);
    oc_calib_item_end(c, 1, 1);
    CHECKF(ca.n_calls == calls_after_open, "the search called the allocator %ld times", ca.n_calls - calls_after_open);
    oc_plan *plan;
    REQUIRE(oc_plan_create(&plan, &shape, NULL, NULL, NULL) == OC_OK);
    oc_error e;
    REQUIREF(oc_calib_to_plan(c, plan, &e) == OC_OK, "%s", e.message);
    if (getenv("OC_TEST_REPORT")) oc_calib_report(c, stderr);   /* the search's per-head table */
    oc_calib_close(c);
    CHECK(ca.n_live == 0);
    /* the round trip: the plan's text parses back to the same plan */
    size_t n_text = 0;
    REQUIRE(oc_plan_write(plan, NULL, 0, &n_text, NULL) == OC_OK);
    char *text = malloc(n_text + 1);
    REQUIRE(oc_plan_write(plan, text, n_text + 1, &n_text, NULL) == OC_OK);
    oc_plan *back = NULL;
    REQUIREF(oc_plan_parse(&back, text, n_text, "calibrated", NULL, &e) == OC_OK, "%s", e.message);
    CHECK(oc_plan_equal(plan, back));
    CHECKF(strstr(text, "2d-boundary(") != NULL, "no 2d-boundary head in:\n%s", text);
    free(text);
    const oc_head_pattern *h0 = oc_plan_head(back, OC_PLAN_DECODER, 0, 0), *h1 = oc_plan_head(back, OC_PLAN_DECODER, 0, 1);
    CHECKF(h0->kind == OC_PATTERN_BOUNDARY_2D, "head 0: %s, want 2d-boundary", oc_plan_pattern_name(h0->kind));
    CHECKF(h1->kind == OC_PATTERN_VERTICAL_SLASH, "head 1: %s, want vertical-slash", oc_plan_pattern_name(h1->kind));
    oc_token_span img = { MM_IMG0, MM_IMG1 };
    oc_token_layout *layout = NULL;
    REQUIRE(oc_layout_build(&layout, MM_N, &img, 1, 0.1f, NULL, NULL) == OC_OK);
    if (h0->kind == OC_PATTERN_BOUNDARY_2D) {
        oc_head_pattern vv = oc_pattern_pair(h0, OC_MODALITY_VISION, OC_MODALITY_VISION);
        oc_head_pattern tt = oc_pattern_pair(h0, OC_MODALITY_TEXT, OC_MODALITY_TEXT);
        CHECKF(vv.kind == OC_PATTERN_VERTICAL_SLASH, "vision-vision: %s", oc_plan_pattern_name(vv.kind));
        /* the text ranks' window (about 10 ranks back) in the text stream: an a-shape of at least
         * that many ranks is the first such candidate in Table 3's order */
        CHECKF(tt.kind == OC_PATTERN_A_SHAPE && tt.n_local >= 16, "text-text: %s local %d", oc_plan_pattern_name(tt.kind),
               (int)tt.n_local);
        /* the loaded plan runs: head 0 as the plan says it is close to dense, and much closer than
         * the same head as one Vertical-Slash of the space (No-Boundary) */
        double nmse_2d = mm_engine_nmse(&s, 0, h0, layout);
        oc_head_pattern vs;
        memset(&vs, 0, sizeof vs);
        vs.kind = OC_PATTERN_VERTICAL_SLASH; vs.n_vertical = 175; vs.n_slash = 10;   /* 0.05 x (3500, 200) */
        double nmse_vs = mm_engine_nmse(&s, 0, &vs, layout);
        CHECKF(nmse_2d < 1e-4 && nmse_vs > 100 * nmse_2d, "head 0: NMSE as planned %.3g, as vertical-slash %.3g",
               nmse_2d, nmse_vs);
    }
    CHECKF(mm_engine_nmse(&s, 1, h1, layout) < 1e-4, "head 1 as planned: NMSE %.3g", mm_engine_nmse(&s, 1, h1, layout));
    oc_layout_free(layout);
    oc_plan_free(back);
    oc_plan_free(plan);
}

int main(void) {
    CHECK_RUN(test_keeps_rule);
    CHECK_RUN(test_mask_errors_match_naive);
    CHECK_RUN(test_row_stats_match_naive);
    CHECK_RUN(test_jsd);
    CHECK_RUN(test_blindsight_rules);
    CHECK_RUN(test_mminf_search);
    CHECK_RUN(test_mminf_2d_boundary_choice);
    CHECK_RUN(test_kv_budgets);
    CHECK_RUN(test_qc_groups);
    CHECK_RUN(test_zipvl);
    CHECK_RUN(test_zipvl_errors_match_naive);
    CHECK_RUN(test_zipvl_output_check);
    CHECK_RUN(test_vision_errors_match_naive);
    CHECK_RUN(test_vision_heads_on_synthetic_images);
    CHECK_RUN(test_calibration_on_synthetic_layers);
    CHECK_RUN(test_hook_on_demo_model);
    CHECK_RUN(test_scene_grounding);
    CHECK_RUN(test_plan_calibration_lines);
    CHECK_RUN(test_calibrate_data_folder);
    return check_finish();
}
