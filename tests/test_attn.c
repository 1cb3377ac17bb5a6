/* test_attn.c: the attention engine (src/attention/attn.c + every ISA table this CPU runs) and the token
 * layout (src/attention/layout.c) against a naive double-precision reference.
 * The reference builds the mask element by element from the definitions (methods.md, pattern.h,
 * attn.h), with its own image/sink bookkeeping: it shares no code with the tile classifier.
 * f16 K/V: the reference reads the same f16-rounded values (converted exactly), so the only
 * difference left is fp32 arithmetic and the exp2 polynomial, and one tolerance (1e-4 relative per
 * output row) holds for f32 and f16 alike. That is deliberate: comparing against unrounded values
 * would need about 2e-3, and test_tolerance_catches_dropped_key shows that dropping one key out of
 * ~1000 changes a row by less than that but far more than 1e-4. */
#include "attention/attn.h"
#include "attention/attn_kernels.h"
#include "check.h"
#include "core/f16.h"
#include "attention/layout.h"
#include "core/isa_built.h"
#include "core/pool.h"
#include "port.h"

#define TOL 1e-4
/* The BF16 products (attn_call.h bf16_products): q, k, p and v rounded to 8 significant bits. Per
 * score the error is at most 2^-7 sum |q k| (a few 1e-2 for these q of size 4: the probabilities
 * move by that, relatively), per output about 2^-8 of the mixed values. Measured (2026-11-26, Zen 4)
 * row errors of test_bf16_products: 5.6e-3 to 9.4e-3 for head dims 17-128, so 2e-2; head dim 1
 * (the output is one sum of +-1 values that cancels, and row_error's floor of rms / 10 lets the
 * relative error grow up to 10x) up to 4.9e-2, so 1e-1 there. */
#define TOL_BF16 2e-2
#define TOL_BF16_D1 1e-1
static int g_bf16_products;        /* set in the calls args_for builds */
static double g_tol = TOL;         /* run_all's bound */
#define MAX_IMAGES 16

/* ---- the reference ------------------------------------------------------------------------------ */

typedef struct ref_layout {
    int n_images;
    oc_token_span img[MAX_IMAGES];
    int n_sink[MAX_IMAGES];
} ref_layout;

static int ref_image_of(const ref_layout *L, int p) {
    for (int g = 0; L && g < L->n_images; g++)
        if (p >= L->img[g].start && p < L->img[g].end) return g;
    return -1;
}

static int ref_is_sink(const ref_layout *L, int p) {
    int g = ref_image_of(L, p);
    return g >= 0 && p < L->img[g].start + L->n_sink[g];
}

typedef struct ref_case {
    int n_q, n_kv, n_head, n_head_kv, d, q_offset;
    oc_attn_mask_kind mask;
    const oc_token_span *seg;
    int n_seg;
    const uint8_t *explicit_mask;   /* [n_head][n_q][n_kv] */
    const oc_head_pattern *pat;     /* [n_head] or NULL */
    const ref_layout *layout;       /* NULL: all text */
} ref_case;

/* Written from the definitions, independent of attn.c. */
static int ref_keep(const ref_case *c, int h, int i, int j) {
    int p = c->q_offset + i;
    int base = 1;
    switch (c->mask) {
    case OC_ATTN_CAUSAL: base = j <= p; break;
    case OC_ATTN_BIDIRECTIONAL: base = 1; break;
    case OC_ATTN_SEGMENTS:
        base = 0;
        for (int s = 0; s < c->n_seg; s++)
            if (p >= c->seg[s].start && p < c->seg[s].end) base = j >= c->seg[s].start && j < c->seg[s].end;
        break;
    case OC_ATTN_EXPLICIT: base = c->explicit_mask[((size_t)h * c->n_q + i) * c->n_kv + j] != 0; break;
    }
    if (!base || !c->pat) return base;
    const oc_head_pattern *pt = &c->pat[h];
    switch (pt->kind) {
    case OC_PATTERN_DENSE: return 1;
    case OC_PATTERN_A_SHAPE: return j < pt->n_sink || (j <= p && j > p - pt->n_local);
    case OC_PATTERN_SINK:
    case OC_PATTERN_INTRA_IMAGE:
    case OC_PATTERN_INTRA_IMAGE_SINK: {
        int gq = ref_image_of(c->layout, p);
        if (gq < 0) return 1;   /* text queries stay dense */
        int gk = ref_image_of(c->layout, j);
        if (gk < 0) return 1;   /* image queries keep every text key */
        int sinks = pt->kind != OC_PATTERN_INTRA_IMAGE, intra = pt->kind != OC_PATTERN_SINK;
        return (sinks && ref_is_sink(c->layout, j)) || (intra && gk == gq);
    }
    default: return 0;
    }
}

/* out [n_q][n_head][d] in double; kvf: K/V as the engine will read them (f16-rounded or not),
 * [n_kv][n_head_kv][d]. rms (may be NULL): per row sqrt(sum_j p_j |v_j|^2), the size of what the
 * row mixes. Returns the number of kept pairs. */
static uint64_t ref_attention(const ref_case *c, const float *q, const float *kf, const float *vf, float scale,
                              double *out, double *rms) {
    uint64_t n_kept = 0;
    int d = c->d, rep = c->n_head / c->n_head_kv;
    double *w = malloc(sizeof(double) * (size_t)(c->n_kv > 0 ? c->n_kv : 1));
    for (int i = 0; i < c->n_q; i++) {
        for (int h = 0; h < c->n_head; h++) {
            int g = h / rep;
            const float *qr = q + ((size_t)i * c->n_head + h) * d;
            double mx = -INFINITY;
            for (int j = 0; j < c->n_kv; j++) {
                w[j] = NAN;
                if (!ref_keep(c, h, i, j)) continue;
                const float *kr = kf + ((size_t)j * c->n_head_kv + g) * d;
                double s = 0;
                for (int e = 0; e < d; e++) s += (double)qr[e] * kr[e];
                w[j] = s * scale;
                if (w[j] > mx) mx = w[j];
                n_kept++;
            }
            double *o = out + ((size_t)i * c->n_head + h) * d, sum = 0, sq = 0;
            for (int e = 0; e < d; e++) o[e] = 0;
            for (int j = 0; j < c->n_kv; j++) {
                if (isnan(w[j])) continue;
                double p = exp(w[j] - mx);
                sum += p;
                const float *vr = vf + ((size_t)j * c->n_head_kv + g) * d;
                for (int e = 0; e < d; e++) { o[e] += p * vr[e]; sq += p * vr[e] * vr[e]; }
            }
            for (int e = 0; sum > 0 && e < d; e++) o[e] /= sum;
            if (rms) rms[(size_t)i * c->n_head + h] = sum > 0 ? sqrt(sq / sum) : 0;
        }
    }
    free(w);
    return n_kept;
}

/* ---- engine harness -------------------------------------------------------------------------------- */

/* Buffers in the engine's layout, with padded strides so strides are exercised:
 * q [n_q][n_head][d] with token stride n_head*d + 3; k, v head-major [n_head_kv][n_kv][d + 5]
 * (like a per-head KV cache); out [n_q][n_head][d] with token stride n_head*d + 1. */
typedef struct bufs {
    float *q, *kf, *vf;          /* compact [n][H][d] copies (kf, vf f16-rounded when f16) */
    void *k, *v;                 /* engine layout, dtype */
    float *out;
    size_t out_floats;
    int32_t dtype;
    int64_t kv_row;              /* d + 5 */
    const uint8_t *k_shared;     /* Q-Cache VLA (attn_call.h): NULL, or key j's flag; k_shared_off */
    int64_t k_shared_off;        /* elements into k */
} bufs;

static void bufs_make(bufs *b, const ref_case *c, int32_t dtype, check_rng *rng, float q_mag) {
    int d = c->d;
    size_t nq = (size_t)c->n_q, nkv = (size_t)(c->n_kv > 0 ? c->n_kv : 1);
    b->dtype = dtype;
    b->kv_row = d + 5;
    b->k_shared = NULL;
    b->k_shared_off = 0;
    b->q = malloc(sizeof(float) * (nq * (c->n_head * d + 3) + 1));
    b->kf = malloc(sizeof(float) * nkv * c->n_head_kv * d);
    b->vf = malloc(sizeof(float) * nkv * c->n_head_kv * d);
    size_t es = dtype == OC_DTYPE_F16 ? 2 : 4, n_kv_elems = (size_t)c->n_head_kv * nkv * b->kv_row;
    b->k = malloc(es * n_kv_elems);
    b->v = malloc(es * n_kv_elems);
    b->out_floats = nq * (c->n_head * d + 1) + 1;
    b->out = malloc(sizeof(float) * b->out_floats);
    for (size_t i = 0; i < nq * (c->n_head * d + 3) + 1; i++) b->q[i] = check_rng_uniform(rng, -q_mag, q_mag);
    for (int j = 0; j < c->n_kv; j++)
        for (int g = 0; g < c->n_head_kv; g++)
            for (int e = 0; e < d; e++) {
                for (int which = 0; which < 2; which++) {
                    float x = check_rng_uniform(rng, -1.0f, 1.0f);
                    size_t at = ((size_t)g * c->n_kv + j) * b->kv_row + e;
                    if (dtype == OC_DTYPE_F16) {
                        uint16_t h = oc_f32_to_f16(x);
                        x = oc_f16_to_f32(h);
                        ((uint16_t *)(which ? b->v : b->k))[at] = h;
                    } else {
                        ((float *)(which ? b->v : b->k))[at] = x;
                    }
                    (which ? b->vf : b->kf)[((size_t)j * c->n_head_kv + g) * d + e] = x;
                }
            }
}

static void bufs_free(bufs *b) {
    free(b->q); free(b->kf); free(b->vf); free(b->k); free(b->v); free(b->out);
}

/* The compact query copy the reference reads. */
static float *compact_q(const bufs *b, const ref_case *c) {
    float *q = malloc(sizeof(float) * ((size_t)c->n_q * c->n_head * c->d + 1));
    for (int i = 0; i < c->n_q; i++)
        for (int h = 0; h < c->n_head; h++)
            memcpy(q + ((size_t)i * c->n_head + h) * c->d, b->q + (size_t)i * (c->n_head * c->d + 3) + (size_t)h * c->d,
                   sizeof(float) * c->d);
    return q;
}

/* A call with its host tensors and kernels: what oc_attn_run takes, in one value for the tests. */
typedef struct run_args {
    oc_attn_call c;
    oc_attn_host mem;
    oc_isa isa;
} run_args;

static oc_status run_call(const run_args *a, oc_pool *pool, void *scratch, size_t n_bytes, oc_attn_stats *st,
                          oc_error *err) {
    return oc_attn_run(&a->c, &a->mem, a->isa, pool, scratch, n_bytes, st, err);
}

static run_args args_for(const ref_case *c, const bufs *b, const oc_token_layout *layout, oc_isa isa) {
    run_args a;
    memset(&a, 0, sizeof a);
    a.c.n_q = c->n_q; a.c.n_kv = c->n_kv; a.c.n_head = c->n_head; a.c.n_head_kv = c->n_head_kv; a.c.head_dim = c->d;
    a.mem.q = b->q; a.c.q_stride_token = c->n_head * c->d + 3; a.c.q_stride_head = c->d;
    a.mem.k = b->k; a.mem.v = b->v; a.c.kv_dtype = b->dtype;
    a.c.k_stride_token = a.c.v_stride_token = b->kv_row;
    a.c.k_stride_head = a.c.v_stride_head = (int64_t)c->n_kv * b->kv_row;
    a.mem.out = b->out; a.c.out_stride_token = c->n_head * c->d + 1; a.c.out_stride_head = c->d;
    a.c.scale = 1.0f / sqrtf((float)c->d);
    a.c.mask = c->mask; a.c.q_offset = c->q_offset;
    a.c.segments = c->seg; a.c.n_segments = c->n_seg;
    a.c.explicit_mask = c->explicit_mask;
    a.c.explicit_stride_q = c->n_kv; a.c.explicit_stride_head = (int64_t)c->n_q * c->n_kv;
    a.c.patterns = c->pat; a.c.layout = layout; a.isa = isa;
    a.c.k_shared = b->k_shared; a.c.k_shared_off = b->k_shared_off;
    a.c.bf16_products = g_bf16_products;
    return a;
}

/* Largest per-row relative error of out against ref: |o - r| / max(|r|, rms / 10). The floor only
 * matters when the mixed values cancel (tiny head dims), where fp32 rounding of terms of size rms
 * dominates; for the usual rows it is the plain relative error. Rows the reference leaves empty
 * (all keys masked) must be exactly 0. Returns INFINITY for any NaN/Inf or a non-zero empty row. */
static double row_error(const ref_case *c, const bufs *b, const double *ref, const double *rms) {
    double worst = 0;
    for (int i = 0; i < c->n_q; i++)
        for (int h = 0; h < c->n_head; h++) {
            const float *o = b->out + (size_t)i * (c->n_head * c->d + 1) + (size_t)h * c->d;
            const double *r = ref + ((size_t)i * c->n_head + h) * c->d;
            double num = 0, den = 0;
            for (int e = 0; e < c->d; e++) {
                if (!isfinite(o[e])) return INFINITY;
                num += (o[e] - r[e]) * (o[e] - r[e]);
                den += r[e] * r[e];
            }
            if (den == 0 && rms[(size_t)i * c->n_head + h] == 0) { if (num != 0) return INFINITY; continue; }
            double floor_ = rms[(size_t)i * c->n_head + h] / 10;
            double err = sqrt(num) / fmax(sqrt(den), floor_);
            if (err > worst) worst = err;
        }
    return worst;
}

typedef struct pools { oc_pool *p[3]; } pools;

static int pools_open(pools *ps) {
    for (int t = 0; t < 3; t++)
        if (oc_pool_open(&ps->p[t], t + 1, NULL, NULL) != OC_OK) return 0;
    return 1;
}
static void pools_close(pools *ps) { for (int t = 0; t < 3; t++) oc_pool_close(ps->p[t]); }

static void *scratch_for(const ref_case *c, int n_threads, size_t *n_bytes) {
    oc_attn_dims dims = { c->n_q, c->n_kv, c->n_head, c->n_head_kv, c->d };
    *n_bytes = oc_attn_scratch_bytes(&dims, n_threads);
    return oc_port_aligned_alloc(OC_MEM_ALIGN, *n_bytes ? *n_bytes : 64);
}

/* Runs the case on every ISA this CPU runs with 1, 2 and 3 threads; checks against ref, bitwise
 * equality across thread counts, and the FLOP counters. Returns the worst error seen. */
static double run_all(const ref_case *c, bufs *b, const oc_token_layout *layout, const double *ref,
                      const double *rms, uint64_t ref_kept, const pools *ps, const char *what) {
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    double worst = 0;
    float *first = malloc(sizeof(float) * b->out_floats);
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        if (!oc_isa_runs((oc_isa)isa, &cpu) || !oc_attn_kernels_for((oc_isa)isa)) continue;
        for (int t = 0; t < 3; t++) {
            size_t n_bytes;
            void *scratch = scratch_for(c, t + 1, &n_bytes);
            run_args a = args_for(c, b, layout, (oc_isa)isa);
            oc_attn_stats st = { 0, 0, 0 };
            oc_error err = { OC_OK, "" };
            check_poison_f32(b->out, b->out_floats);
            oc_status s = run_call(&a, ps->p[t], scratch, n_bytes, &st, &err);
            oc_port_aligned_free(scratch);
            CHECKF(s == OC_OK, "%s: %s", what, err.message);
            if (s != OC_OK) { free(first); return INFINITY; }
            double e = row_error(c, b, ref, rms);
            CHECKF(e <= g_tol, "%s isa=%s threads=%d: row error %.3g", what, oc_isa_name((oc_isa)isa), t + 1, e);
            if (e > worst) worst = e;
            CHECKF(st.flops_kept == ref_kept * 4 * (uint64_t)c->d, "%s isa=%s: kept flops %llu, reference %llu", what,
                   oc_isa_name((oc_isa)isa), (unsigned long long)st.flops_kept,
                   (unsigned long long)(ref_kept * 4 * (uint64_t)c->d));
            CHECK(st.flops_executed >= st.flops_kept);
            if (t == 0) memcpy(first, b->out, sizeof(float) * b->out_floats);
            else CHECKF(memcmp(first, b->out, sizeof(float) * b->out_floats) == 0,
                        "%s isa=%s: %d threads differ from 1 thread", what, oc_isa_name((oc_isa)isa), t + 1);
        }
    }
    free(first);
    return worst;
}

/* ---- random cases ---------------------------------------------------------------------------------- */

/* Images at random places with text between (sometimes none, sometimes at position 0); n_images
 * 0, 1 or several, some of them 1 token long. */
static void make_layout(ref_layout *L, int n_tokens, int n_images, int permille, check_rng *rng) {
    L->n_images = 0;
    int pos = check_rng_int(rng, 0, 1) ? 0 : check_rng_int(rng, 1, 12);
    for (int g = 0; g < n_images && pos < n_tokens; g++) {
        int len = check_rng_int(rng, 0, 4) == 0 ? 1 : check_rng_int(rng, 2, n_tokens / (n_images + 1) + 2);
        if (pos + len > n_tokens) len = n_tokens - pos;
        L->img[L->n_images].start = pos;
        L->img[L->n_images].end = pos + len;
        L->n_sink[L->n_images] = (len * permille + 999) / 1000;   /* ceil, in integers */
        L->n_images++;
        pos += len + (check_rng_int(rng, 0, 3) == 0 ? 0 : check_rng_int(rng, 1, 15));
    }
}

static void make_patterns(oc_head_pattern *pat, int n_head, int shift, check_rng *rng) {
    for (int h = 0; h < n_head; h++) {
        pat[h].kind = (oc_pattern_kind)((h + shift) % (OC_PATTERN_A_SHAPE + 1));   /* the static kinds (test_dyn.c: the rest) */
        pat[h].n_sink = check_rng_int(rng, 0, 20);
        pat[h].n_local = check_rng_int(rng, 1, 70);
    }
    if (n_head >= 4) pat[n_head - 1] = pat[0];   /* two heads of one pattern share tiles */
}

static int not_tile_multiple(int n) { return n % 64 == 0 ? n + 1 : n; }

/* One random case: base mask x GQA ratio x head dim, with a layout and mixed patterns. */
static double random_case_sized(oc_attn_mask_kind mask, int rep, int d, int32_t dtype, int n_images, int seed,
                                const pools *ps, int n_q_min, int n_q_max) {
    check_rng rng = { 0x9e3779b97f4a7c15ULL ^ (unsigned long long)seed * 7919 };
    ref_case c;
    memset(&c, 0, sizeof c);
    c.n_head_kv = rep <= 2 ? 2 : 1;
    c.n_head = rep * c.n_head_kv;
    c.d = d;
    c.mask = mask;
    c.n_q = not_tile_multiple(check_rng_int(&rng, n_q_min, n_q_max));
    c.n_kv = c.n_q;
    if (mask == OC_ATTN_CAUSAL && seed % 3 == 1) {   /* a later prefill chunk */
        c.q_offset = check_rng_int(&rng, 1, 90);
        c.n_kv = c.q_offset + c.n_q;
    }
    if (mask == OC_ATTN_BIDIRECTIONAL && seed % 3 == 2) c.n_kv = c.n_q + check_rng_int(&rng, 1, 40);   /* more keys */
    oc_token_span seg[8];
    if (mask == OC_ATTN_SEGMENTS) {   /* spans with gaps; rows in a gap see nothing */
        int pos = check_rng_int(&rng, 0, 3);
        while (c.n_seg < 8 && pos < c.n_kv) {
            int len = check_rng_int(&rng, 1, 50);
            seg[c.n_seg].start = pos;
            seg[c.n_seg].end = OC_MIN(pos + len, c.n_kv);
            c.n_seg++;
            pos += len + check_rng_int(&rng, 0, 4);
        }
        c.seg = seg;
    }
    ref_layout L;
    int permille = seed % 2 ? 100 : 250;
    make_layout(&L, c.q_offset + c.n_q, n_images, permille, &rng);
    c.layout = &L;
    oc_head_pattern pat[16];
    make_patterns(pat, c.n_head, seed, &rng);
    c.pat = pat;

    oc_token_layout *layout = NULL;
    oc_error err;
    if (oc_layout_build(&layout, c.q_offset + c.n_q, L.img, L.n_images, (float)permille / 1000.0f, NULL, &err) != OC_OK) {
        CHECKF(0, "layout: %s", err.message);
        return INFINITY;
    }
    bufs b;
    bufs_make(&b, &c, dtype, &rng, 4.0f);
    float *q = compact_q(&b, &c);
    double *ref = malloc(sizeof(double) * ((size_t)c.n_q * c.n_head * c.d + 1));
    double *rms = malloc(sizeof(double) * ((size_t)c.n_q * c.n_head + 1));
    uint64_t kept = ref_attention(&c, q, b.kf, b.vf, 1.0f / sqrtf((float)d), ref, rms);
    char what[128];
    snprintf(what, sizeof what, "mask=%d rep=%d d=%d %s n_q=%d n_kv=%d off=%d images=%d seed=%d", (int)mask, rep, d,
             dtype == OC_DTYPE_F16 ? "f16" : "f32", c.n_q, c.n_kv, c.q_offset, L.n_images, seed);
    double e = run_all(&c, &b, layout, ref, rms, kept, ps, what);
    free(rms);
    free(ref);
    free(q);
    bufs_free(&b);
    oc_layout_free(layout);
    return e;
}

static double random_case(oc_attn_mask_kind mask, int rep, int d, int32_t dtype, int n_images, int seed,
                          const pools *ps) {
    return random_case_sized(mask, rep, d, dtype, n_images, seed, ps, 65, 150);
}

/* Under an emulator (check_emulated) the mask x GQA x head-dim grids run half their cells: every
 * (GQA, head dim) pair still runs, with one of the masks. */
static int emulated_skip(size_t m, size_t r, size_t di) { return check_emulated() && (m + r + di) % 2; }

static void test_random_prefill(void) {
    static const oc_attn_mask_kind masks[] = { OC_ATTN_CAUSAL, OC_ATTN_BIDIRECTIONAL, OC_ATTN_SEGMENTS };
    static const int reps[] = { 1, 2, 6, 7 }, dims[] = { 64, 72, 80, 128 }, images[] = { 0, 1, 5 };
    pools ps;
    REQUIRE(pools_open(&ps));
    double worst = 0;
    int seed = 0;
    for (size_t m = 0; m < OC_ARRAY_LEN(masks); m++)
        for (size_t r = 0; r < OC_ARRAY_LEN(reps); r++)
            for (size_t di = 0; di < OC_ARRAY_LEN(dims); di++, seed++) {
                if (emulated_skip(m, r, di)) continue;
                int32_t dtype = (seed + (int)r) % 2 ? OC_DTYPE_F16 : OC_DTYPE_F32;
                double e = random_case(masks[m], reps[r], dims[di], dtype, images[(seed + (int)m) % 3], seed, &ps);
                if (e > worst) worst = e;
            }
    printf("# random prefill: worst row error %.3g (tolerance %.0e)\n", worst, TOL);
    pools_close(&ps);
}

/* Odd head dims and tiny shapes: every remainder path of the micro-kernels. */
static void test_odd_shapes(void) {
    pools ps;
    REQUIRE(pools_open(&ps));
    static const int dims[] = { 1, 3, 8, 17, 33, 96 };
    for (size_t di = 0; di < OC_ARRAY_LEN(dims); di++)
        random_case(di % 2 ? OC_ATTN_CAUSAL : OC_ATTN_BIDIRECTIONAL, 1 + (int)di % 3, dims[di],
                    di % 2 ? OC_DTYPE_F16 : OC_DTYPE_F32, (int)di % 3 * 2, 100 + (int)di, &ps);
    pools_close(&ps);
}

/* Longer sequences with small head dims (cheap references): several query blocks per KV head
 * (tasks start at i0 > 0, handed out last block first), images longer than a run, and
 * flash-decoding over more than 32 x 256 keys (chunks longer than the minimum). */
static void test_long_sequences(void) {
    pools ps;
    REQUIRE(pools_open(&ps));
    static const oc_attn_mask_kind masks[] = { OC_ATTN_CAUSAL, OC_ATTN_BIDIRECTIONAL, OC_ATTN_SEGMENTS };
    for (int k = 0; k < (check_emulated() ? 3 : 6); k++)   /* 3: every mask, both key types */
        random_case_sized(masks[k % 3], 1 + k % 3, k % 2 ? 8 : 24, k % 2 ? OC_DTYPE_F16 : OC_DTYPE_F32, k % 2 ? 3 : 1,
                          200 + k, &ps, 520, 800);
    for (int k = 0; k < 2; k++) {
        check_rng rng = { 0x5151ULL + (unsigned long long)k };
        ref_case c;
        memset(&c, 0, sizeof c);
        c.n_head_kv = 2; c.n_head = 4 + 2 * k; c.d = 16;
        c.n_q = 1 + k; c.n_kv = 9001 + 777 * k; c.q_offset = c.n_kv - c.n_q;
        c.mask = OC_ATTN_CAUSAL;
        ref_layout L;
        make_layout(&L, c.n_kv, 6, 100, &rng);
        c.layout = &L;
        oc_head_pattern pat[16];
        make_patterns(pat, c.n_head, k, &rng);
        c.pat = pat;
        oc_token_layout *layout = NULL;
        REQUIRE(oc_layout_build(&layout, c.n_kv, L.img, L.n_images, 0.1f, NULL, NULL) == OC_OK);
        bufs b;
        bufs_make(&b, &c, OC_DTYPE_F16, &rng, 4.0f);
        float *q = compact_q(&b, &c);
        double *ref = malloc(sizeof(double) * (size_t)c.n_q * c.n_head * c.d);
        double *rms = malloc(sizeof(double) * (size_t)c.n_q * c.n_head);
        uint64_t kept = ref_attention(&c, q, b.kf, b.vf, 1.0f / sqrtf((float)c.d), ref, rms);
        run_all(&c, &b, layout, ref, rms, kept, &ps, "long decode");
        free(rms); free(ref); free(q); bufs_free(&b); oc_layout_free(layout);
    }
    pools_close(&ps);
}

/* Decode (n_q <= 4, >= 512 keys): the flash-decoding split and its merge. */
static void test_decode(void) {
    pools ps;
    REQUIRE(pools_open(&ps));
    for (int k = 0; k < 8; k++) {
        check_rng rng = { 0x1234567ULL + (unsigned long long)k * 1000003ULL };
        ref_case c;
        memset(&c, 0, sizeof c);
        static const int reps[] = { 1, 2, 6, 7 }, dims[] = { 64, 72, 80, 128 };
        int rep = reps[k % 4];
        c.n_head_kv = rep <= 2 ? 2 : 1;
        c.n_head = rep * c.n_head_kv;
        c.d = dims[(k + k / 4) % 4];
        c.n_q = 1 + k % 4;
        c.n_kv = check_rng_int(&rng, 520, 1400);
        c.mask = OC_ATTN_CAUSAL;
        c.q_offset = c.n_kv - c.n_q;
        ref_layout L;
        /* images end before the decoded tokens, or the last query sits inside the last image */
        make_layout(&L, c.n_kv - (k % 2 ? 0 : 3), 1 + k % 6, 100, &rng);
        c.layout = &L;
        oc_head_pattern pat[16];
        make_patterns(pat, c.n_head, k, &rng);
        for (int h = 0; h < c.n_head; h++)
            if (pat[h].kind == OC_PATTERN_A_SHAPE) { pat[h].n_sink = 16; pat[h].n_local = 300; }
        c.pat = pat;
        oc_token_layout *layout = NULL;
        REQUIRE(oc_layout_build(&layout, c.n_kv, L.img, L.n_images, 0.1f, NULL, NULL) == OC_OK);
        bufs b;
        bufs_make(&b, &c, k % 2 ? OC_DTYPE_F16 : OC_DTYPE_F32, &rng, 4.0f);
        float *q = compact_q(&b, &c);
        double *ref = malloc(sizeof(double) * (size_t)c.n_q * c.n_head * c.d);
        double *rms = malloc(sizeof(double) * (size_t)c.n_q * c.n_head);
        uint64_t kept = ref_attention(&c, q, b.kf, b.vf, 1.0f / sqrtf((float)c.d), ref, rms);
        char what[96];
        snprintf(what, sizeof what, "decode k=%d n_q=%d n_kv=%d rep=%d d=%d", k, c.n_q, c.n_kv, rep, c.d);
        run_all(&c, &b, layout, ref, rms, kept, &ps, what);
        free(rms);
        free(ref); free(q); bufs_free(&b); oc_layout_free(layout);
    }
    pools_close(&ps);
}

/* BlindSight categories over text query rows (decode after the prompt, or a prefill chunk between
 * two images, or no layout at all): the categories restrict image queries only, so the call keeps
 * what dense keeps; attn.c runs such heads as dense, in one sub-group with the group's other heads.
 * Checked against the double reference (run_all: every ISA, 1-3 threads, the counters) and bitwise
 * against the same call with every head dense (patterns NULL). Random GQA ratios, head dims, key
 * types, and categories mixed inside each kv group. */
static void test_blindsight_text_rows(void) {
    pools ps;
    REQUIRE(pools_open(&ps));
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    for (int k = 0; k < 9; k++) {
        check_rng rng = { 0xb115ULL + (unsigned long long)k * 104729ULL };
        ref_case c;
        memset(&c, 0, sizeof c);
        static const int reps[] = { 2, 6, 7 }, dims[] = { 16, 64, 80 };
        int rep = reps[k % 3], kind = k / 3;   /* 0: decode after the prompt, 1: no layout, 2: prefill between images */
        c.n_head_kv = rep <= 2 ? 2 : 1;
        c.n_head = rep * c.n_head_kv;
        c.d = dims[(k + 1) % 3];
        c.mask = OC_ATTN_CAUSAL;
        ref_layout L;
        L.n_images = 0;
        if (kind == 2) {   /* image [5, 205), text rows [205, 205 + n_q), image after them */
            c.n_q = check_rng_int(&rng, 1, 90);
            c.q_offset = 205;
            c.n_kv = c.q_offset + c.n_q;
            L.n_images = 2;
            L.img[0].start = 5; L.img[0].end = 205;
            L.img[1].start = c.n_kv; L.img[1].end = c.n_kv + 40;
            L.n_sink[0] = 20; L.n_sink[1] = 4;
        } else {
            c.n_q = 1 + k % 4;
            c.n_kv = check_rng_int(&rng, 520, 1400);
            c.q_offset = c.n_kv - c.n_q;
            if (kind == 0) make_layout(&L, c.q_offset, 1 + k % 5, 100, &rng);
        }
        c.layout = kind == 1 ? NULL : &L;
        oc_head_pattern pat[16];
        memset(pat, 0, sizeof pat);
        for (int h = 0; h < c.n_head; h++)
            pat[h].kind = (oc_pattern_kind)(OC_PATTERN_SINK + (h + k) % 3);   /* Sink, Intra-Image, Intra-Image+Sink */
        c.pat = pat;
        int n_layout_tokens = kind == 2 ? L.img[1].end : c.q_offset;
        oc_token_layout *layout = NULL;
        if (kind != 1)
            REQUIRE(oc_layout_build(&layout, n_layout_tokens, L.img, L.n_images, 0.1f, NULL, NULL) == OC_OK);
        if (kind == 2)   /* the layout's sinks are what the reference reads */
            for (int g = 0; g < L.n_images; g++) L.n_sink[g] = oc_layout_image_n_sink(layout, g);
        bufs b;
        bufs_make(&b, &c, k % 2 ? OC_DTYPE_F16 : OC_DTYPE_F32, &rng, 4.0f);
        float *q = compact_q(&b, &c);
        double *ref = malloc(sizeof(double) * (size_t)c.n_q * c.n_head * c.d);
        double *rms = malloc(sizeof(double) * (size_t)c.n_q * c.n_head);
        uint64_t kept = ref_attention(&c, q, b.kf, b.vf, 1.0f / sqrtf((float)c.d), ref, rms);
        char what[96];
        snprintf(what, sizeof what, "blindsight text rows k=%d n_q=%d n_kv=%d rep=%d d=%d", k, c.n_q, c.n_kv, rep, c.d);
        run_all(&c, &b, layout, ref, rms, kept, &ps, what);
        float *sparse = malloc(sizeof(float) * b.out_floats);
        for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
            if (!oc_isa_runs((oc_isa)isa, &cpu) || !oc_attn_kernels_for((oc_isa)isa)) continue;
            size_t n_bytes;
            void *scratch = scratch_for(&c, 2, &n_bytes);
            run_args a = args_for(&c, &b, layout, (oc_isa)isa);
            CHECK(run_call(&a, ps.p[1], scratch, n_bytes, NULL, NULL) == OC_OK);
            memcpy(sparse, b.out, sizeof(float) * b.out_floats);
            a.c.patterns = NULL;
            CHECK(run_call(&a, ps.p[1], scratch, n_bytes, NULL, NULL) == OC_OK);
            CHECKF(memcmp(sparse, b.out, sizeof(float) * b.out_floats) == 0, "%s isa=%s: differs from dense", what,
                   oc_isa_name((oc_isa)isa));
            oc_port_aligned_free(scratch);
        }
        free(sparse); free(rms); free(ref); free(q); bufs_free(&b); oc_layout_free(layout);
    }
    pools_close(&ps);
}

/* Q-Cache VLA (qcache.txt Eq. 7-8; attn_call.h k_shared): the visual keys come from a second K
 * array (the group's first layer's) at the same rows, the text keys from the layer's own; the
 * layer's own rows of visual keys are NaN, so reading one fails. Reference: dense attention over
 * the merged keys (first layer's visual keys, own text keys). Prefill and decode, f32 and f16,
 * with and without head patterns. */
static void test_shared_keys(void) {
    pools ps;
    REQUIRE(pools_open(&ps));
    double worst = 0;
    for (int k = 0; k < 8; k++) {
        /* emulated: prefill and decode, f32 and f16, with and without patterns */
        if (check_emulated() && k % 4 < 2) continue;   /* k = 2, 3, 6, 7: GQA 1-3 too */
        check_rng rng = { 0xb1a5edULL + (unsigned long long)k * 7919ULL };
        ref_case c;
        memset(&c, 0, sizeof c);
        int rep = 1 + k % 3;
        c.n_head_kv = 2;
        c.n_head = rep * c.n_head_kv;
        c.d = k % 2 ? 64 : 80;
        c.n_kv = check_rng_int(&rng, 200, 700);
        c.n_q = k < 4 ? c.n_kv : 1 + k % 3;   /* prefill, then decode */
        c.mask = OC_ATTN_CAUSAL;
        c.q_offset = c.n_kv - c.n_q;
        ref_layout L;
        make_layout(&L, c.n_kv - 2, 1 + k % 4, 100, &rng);
        c.layout = &L;
        oc_head_pattern pat[16];
        if (k % 4 == 3) {
            make_patterns(pat, c.n_head, k, &rng);
            c.pat = pat;
        }
        oc_token_layout *layout = NULL;
        REQUIRE(oc_layout_build(&layout, c.n_kv, L.img, L.n_images, 0.1f, NULL, NULL) == OC_OK);
        bufs b;
        int32_t dtype = k % 2 ? OC_DTYPE_F16 : OC_DTYPE_F32;
        bufs_make(&b, &c, dtype, &rng, 4.0f);
        /* the first layer's keys after the own ones in the same allocation */
        size_t es = dtype == OC_DTYPE_F16 ? 2 : 4, half = (size_t)c.n_head_kv * (size_t)c.n_kv * (size_t)b.kv_row;
        unsigned char *k2 = realloc(b.k, 2 * half * es);
        REQUIRE(k2);
        b.k = k2;
        uint8_t *flags = malloc((size_t)c.n_kv);
        int n_visual = 0;
        for (int j = 0; j < c.n_kv; j++) n_visual += flags[j] = (uint8_t)(ref_image_of(&L, j) >= 0);
        for (int j = 0; j < c.n_kv; j++)
            for (int g = 0; g < c.n_head_kv; g++)
                for (int e = 0; e < c.d; e++) {
                    size_t at = ((size_t)g * c.n_kv + j) * b.kv_row + e;
                    float x = check_rng_uniform(&rng, -1.0f, 1.0f);
                    if (dtype == OC_DTYPE_F16) {
                        x = oc_f16_to_f32(oc_f32_to_f16(x));
                        ((uint16_t *)(void *)k2)[half + at] = oc_f32_to_f16(x);
                        if (flags[j]) ((uint16_t *)(void *)k2)[at] = 0x7e00;   /* NaN */
                    } else {
                        ((float *)(void *)k2)[half + at] = x;
                        if (flags[j]) ((float *)(void *)k2)[at] = NAN;
                    }
                    if (flags[j]) b.kf[((size_t)j * c.n_head_kv + g) * c.d + e] = x;
                }
        b.k_shared = flags;
        b.k_shared_off = (int64_t)half;
        float *q = compact_q(&b, &c);
        double *ref = malloc(sizeof(double) * (size_t)c.n_q * c.n_head * c.d);
        double *rms = malloc(sizeof(double) * (size_t)c.n_q * c.n_head);
        uint64_t kept = ref_attention(&c, q, b.kf, b.vf, 1.0f / sqrtf((float)c.d), ref, rms);
        char what[96];
        snprintf(what, sizeof what, "shared keys k=%d n_q=%d n_kv=%d visual=%d", k, c.n_q, c.n_kv, n_visual);
        double e = run_all(&c, &b, layout, ref, rms, kept, &ps, what);
        if (e > worst) worst = e;
        free(rms); free(ref); free(q); free(flags); bufs_free(&b); oc_layout_free(layout);
    }
    printf("# shared keys: worst row error %.3g (tolerance %.0e)\n", worst, TOL);
    pools_close(&ps);
}

/* Per-kv-head held keys (attn_call.h kv_held: SparseMM's per-head budgets after compaction): one call
 * over every kv head, each with its own key count, against (1) the reference fed the explicit mask
 * those counts mean (query i of kv head g keeps keys 0..held[g] + i), (2) the engine's generic
 * explicit-mask path fed the same mask, and (3) bit for bit the n_head_kv calls of one kv head each
 * that it replaces (text_layer.c made those before); on every ISA, 1-3 threads bitwise equal, outputs
 * poisoned before each run. Decode (1-3 queries: flash-decoding splits the heads with >= 512 keys and
 * not the others) and prefill rows, f32 and f16, a head holding nothing among them. */
static void test_kv_held(void) {
    pools ps;
    REQUIRE(pools_open(&ps));
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    double worst = 0;
    for (int k = 0; k < 8; k++) {
        if (check_emulated() && k % 2) continue;
        check_rng rng = { 0x6e1dULL + (unsigned long long)k * 104729ULL };
        ref_case c;
        memset(&c, 0, sizeof c);
        int rep = 1 + k % 3;
        c.n_head_kv = 2 + k % 2;
        c.n_head = rep * c.n_head_kv;
        c.d = k % 4 == 1 ? 128 : k % 2 ? 64 : 80;
        c.n_q = k < 5 ? 1 + k % 3 : check_rng_int(&rng, 65, 150);
        int32_t held[3];
        for (int g = 0; g < c.n_head_kv; g++) held[g] = check_rng_int(&rng, 1, 1300);
        held[k % c.n_head_kv] = k == 2 ? 0 : held[k % c.n_head_kv] % 500;   /* one short head: not split */
        int32_t most = 0;
        for (int g = 0; g < c.n_head_kv; g++) most = OC_MAX(most, held[g]);
        c.n_kv = most + c.n_q;
        uint8_t *mask = malloc((size_t)c.n_head * (size_t)c.n_q * (size_t)c.n_kv);
        for (int h = 0; h < c.n_head; h++)
            for (int i = 0; i < c.n_q; i++)
                for (int j = 0; j < c.n_kv; j++)
                    mask[((size_t)h * c.n_q + i) * c.n_kv + j] = (uint8_t)(j <= held[h / rep] + i);
        c.mask = OC_ATTN_EXPLICIT;
        c.explicit_mask = mask;
        bufs b;
        int32_t dtype = k % 2 ? OC_DTYPE_F16 : OC_DTYPE_F32;
        bufs_make(&b, &c, dtype, &rng, 4.0f);
        float *q = compact_q(&b, &c);
        double *ref = malloc(sizeof(double) * (size_t)c.n_q * c.n_head * c.d);
        double *rms = malloc(sizeof(double) * (size_t)c.n_q * c.n_head);
        uint64_t kept = ref_attention(&c, q, b.kf, b.vf, 1.0f / sqrtf((float)c.d), ref, rms);
        char what[96];
        snprintf(what, sizeof what, "kv_held k=%d n_q=%d held=%d,%d,%d", k, c.n_q, (int)held[0], (int)held[1],
                 c.n_head_kv > 2 ? (int)held[2] : -1);
        double e = run_all(&c, &b, NULL, ref, rms, kept, &ps, what);   /* (2): the explicit mask */
        if (e > worst) worst = e;
        float *apart = malloc(sizeof(float) * b.out_floats);
        for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
            if (!oc_isa_runs((oc_isa)isa, &cpu) || !oc_attn_kernels_for((oc_isa)isa)) continue;
            ref_case causal = c;
            causal.mask = OC_ATTN_CAUSAL;
            causal.explicit_mask = NULL;
            size_t n_bytes;
            void *scratch = scratch_for(&causal, 3, &n_bytes);
            run_args one = args_for(&causal, &b, NULL, (oc_isa)isa);
            oc_error err = { OC_OK, "" };
            /* (3) kv head by kv head, as n_head_kv calls */
            check_poison_f32(b.out, b.out_floats);
            for (int g = 0; g < c.n_head_kv; g++) {
                run_args a = one;
                a.c.n_head = rep;
                a.c.n_head_kv = 1;
                a.c.n_kv = held[g] + c.n_q;
                a.c.q_offset = held[g];
                a.c.q_off = a.c.out_off = (int64_t)g * rep * c.d;
                a.c.k_off = g * a.c.k_stride_head;
                a.c.v_off = g * a.c.v_stride_head;
                CHECKF(run_call(&a, ps.p[1], scratch, n_bytes, NULL, &err) == OC_OK, "%s: %s", what, err.message);
            }
            memcpy(apart, b.out, sizeof(float) * b.out_floats);
            one.c.kv_held = held;
            for (int t = 0; t < 3; t++) {
                oc_attn_stats st = { 0, 0, 0 };
                check_poison_f32(b.out, b.out_floats);
                oc_status s = run_call(&one, ps.p[t], scratch, n_bytes, &st, &err);
                CHECKF(s == OC_OK, "%s: %s", what, err.message);
                double e1 = row_error(&c, &b, ref, rms);   /* (1) */
                CHECKF(e1 <= g_tol, "%s isa=%s threads=%d: row error %.3g", what, oc_isa_name((oc_isa)isa), t + 1, e1);
                if (e1 > worst) worst = e1;
                CHECKF(memcmp(apart, b.out, sizeof(float) * b.out_floats) == 0,
                       "%s isa=%s threads=%d: one call differs from one call per kv head", what,
                       oc_isa_name((oc_isa)isa), t + 1);
                CHECKF(st.flops_kept == kept * 4 * (uint64_t)c.d && st.flops_skipped == 0,
                       "%s: kept flops %llu, reference %llu", what, (unsigned long long)st.flops_kept,
                       (unsigned long long)(kept * 4 * (uint64_t)c.d));
            }
            /* refused: a head holding more than n_kv leaves room for, a pattern, a non-causal mask */
            run_args bad = one;
            bad.c.n_kv = most + c.n_q - 1;
            CHECK(run_call(&bad, ps.p[0], scratch, n_bytes, NULL, &err) == OC_ERR_INVALID && strstr(err.message, "holds"));
            bad = one;
            oc_head_pattern pat[9];
            for (int h = 0; h < c.n_head; h++) pat[h] = (oc_head_pattern){ .kind = OC_PATTERN_DENSE };
            bad.c.patterns = pat;
            CHECK(run_call(&bad, ps.p[0], scratch, n_bytes, NULL, &err) == OC_ERR_INVALID && strstr(err.message, "held"));
            bad = one;
            bad.c.mask = OC_ATTN_BIDIRECTIONAL;
            CHECK(run_call(&bad, ps.p[0], scratch, n_bytes, NULL, &err) == OC_ERR_INVALID);
            oc_port_aligned_free(scratch);
        }
        free(apart); free(rms); free(ref); free(q); free(mask); bufs_free(&b);
    }
    printf("# kv_held: worst row error %.3g (tolerance %.0e)\n", worst, TOL);
    pools_close(&ps);
}

/* A sparse pattern gives the same result as the generic explicit-mask path fed the same mask
 * (built here from the reference's element-wise definition): tiles, gathering and skipping
 * change nothing but the summation order. */
static void test_pattern_equals_explicit_mask(void) {
    pools ps;
    REQUIRE(pools_open(&ps));
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    for (int k = 0; k < 4; k++) {
        check_rng rng = { 0xabcdefULL + (unsigned long long)k };
        ref_case c;
        memset(&c, 0, sizeof c);
        c.n_head_kv = 2; c.n_head = 2 * (k + 1); c.d = k % 2 ? 80 : 64;
        c.n_q = c.n_kv = 200 + 37 * k;
        c.mask = k == 3 ? OC_ATTN_BIDIRECTIONAL : OC_ATTN_CAUSAL;
        ref_layout L;
        make_layout(&L, c.n_q, 2 + 2 * k, 100, &rng);
        c.layout = &L;
        oc_head_pattern pat[16];
        make_patterns(pat, c.n_head, k, &rng);
        c.pat = pat;
        uint8_t *em = malloc((size_t)c.n_head * c.n_q * c.n_kv);
        for (int h = 0; h < c.n_head; h++)
            for (int i = 0; i < c.n_q; i++)
                for (int j = 0; j < c.n_kv; j++) em[((size_t)h * c.n_q + i) * c.n_kv + j] = (uint8_t)ref_keep(&c, h, i, j);
        oc_token_layout *layout = NULL;
        REQUIRE(oc_layout_build(&layout, c.n_q, L.img, L.n_images, 0.1f, NULL, NULL) == OC_OK);
        bufs b;
        bufs_make(&b, &c, OC_DTYPE_F16, &rng, 4.0f);
        float *sparse = malloc(sizeof(float) * b.out_floats);
        for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
            if (!oc_isa_runs((oc_isa)isa, &cpu) || !oc_attn_kernels_for((oc_isa)isa)) continue;
            size_t n_bytes;
            void *scratch = scratch_for(&c, 2, &n_bytes);
            run_args a = args_for(&c, &b, layout, (oc_isa)isa);
            oc_attn_stats st_sparse = { 0, 0, 0 }, st_mask = { 0, 0, 0 };
            check_poison_f32(b.out, b.out_floats);
            CHECK(run_call(&a, ps.p[1], scratch, n_bytes, &st_sparse, NULL) == OC_OK);
            memcpy(sparse, b.out, sizeof(float) * b.out_floats);
            a.c.mask = OC_ATTN_EXPLICIT;
            a.c.explicit_mask = em;
            a.c.patterns = NULL;
            check_poison_f32(b.out, b.out_floats);
            CHECK(run_call(&a, ps.p[1], scratch, n_bytes, &st_mask, NULL) == OC_OK);
            oc_port_aligned_free(scratch);
            double num = 0, den = 0;
            int nan = 0;
            for (int i = 0; i < c.n_q; i++)
                for (int h = 0; h < c.n_head; h++)
                    for (int e = 0; e < c.d; e++) {
                        size_t at = (size_t)i * (c.n_head * c.d + 1) + (size_t)h * c.d + e;
                        nan |= !isfinite(sparse[at]) || !isfinite(b.out[at]);
                        num += (double)(sparse[at] - b.out[at]) * (sparse[at] - b.out[at]);
                        den += (double)b.out[at] * b.out[at];
                    }
            CHECKF(!nan && sqrt(num / den) < 2e-6, "k=%d isa=%s: sparse vs explicit mask differ by %.3g", k,
                   oc_isa_name((oc_isa)isa), nan ? INFINITY : sqrt(num / den));
            CHECK(st_sparse.flops_kept == st_mask.flops_kept);
            /* the sparse run skips tiles: it executes less than the explicit run, which scans all */
            CHECK(st_sparse.flops_executed < st_mask.flops_executed);
        }
        free(sparse); free(em); bufs_free(&b); oc_layout_free(layout);
    }
    pools_close(&ps);
}

/* Rows with no key at all are defined as 0: rows outside every segment, an explicit mask with
 * empty rows (prefill and flash-decoding), an A-shape window that lies beyond the cache, and
 * n_kv == 0. */
static void test_fully_masked_rows(void) {
    pools ps;
    REQUIRE(pools_open(&ps));
    check_rng rng = { 77 };
    for (int k = 0; k < 5; k++) {
        ref_case c;
        memset(&c, 0, sizeof c);
        c.n_head_kv = 1; c.n_head = 2; c.d = 72;
        c.n_q = 90; c.n_kv = 90;
        if (k == 4) { c.n_q = 3; c.n_kv = 700; }   /* the flash-decoding path */
        oc_token_span seg[2] = { { 10, 30 }, { 50, 60 } };
        uint8_t *em = NULL;
        oc_head_pattern pat[2] = { { .kind = OC_PATTERN_A_SHAPE, .n_sink = 0, .n_local = 5 }, { .kind = OC_PATTERN_DENSE, .n_sink = 0, .n_local = 0 } };
        if (k == 0) { c.mask = OC_ATTN_SEGMENTS; c.seg = seg; c.n_seg = 2; }
        if (k == 1 || k == 4) {
            c.mask = OC_ATTN_EXPLICIT;
            em = calloc((size_t)c.n_head * c.n_q * c.n_kv, 1);
            for (size_t x = 0; x < (size_t)c.n_head * c.n_q * c.n_kv; x++) em[x] = (x / c.n_kv) % 3 ? check_rng_int(&rng, 0, 1) : 0;
            c.explicit_mask = em;
        }
        if (k == 2) { c.mask = OC_ATTN_CAUSAL; c.q_offset = 100; c.n_kv = 40; c.pat = pat; }   /* head 0: nothing in reach */
        if (k == 3) { c.mask = OC_ATTN_BIDIRECTIONAL; c.n_kv = 0; }
        bufs b;
        bufs_make(&b, &c, OC_DTYPE_F16, &rng, 4.0f);
        float *q = compact_q(&b, &c);
        double *ref = malloc(sizeof(double) * (size_t)c.n_q * c.n_head * c.d);
        double *rms = malloc(sizeof(double) * (size_t)c.n_q * c.n_head);
        uint64_t kept = ref_attention(&c, q, b.kf, b.vf, 1.0f / sqrtf((float)c.d), ref, rms);
        int empty_rows = 0;
        for (size_t r = 0; r < (size_t)c.n_q * c.n_head; r++) {
            int z = 1;
            for (int e = 0; e < c.d; e++) z &= ref[r * c.d + e] == 0;
            empty_rows += z;
        }
        CHECKF(empty_rows > 0, "case %d has no empty row", k);
        char what[32];
        snprintf(what, sizeof what, "masked rows k=%d", k);
        run_all(&c, &b, NULL, ref, rms, kept, &ps, what);
        free(rms);
        free(ref); free(q); bufs_free(&b); free(em);
    }
    pools_close(&ps);
}

/* The tolerance has teeth: against a reference that drops one kept key per row (~1000 keys),
 * nearly every row fails 1e-4, although the change is below 2e-3 for most rows. */
static void test_tolerance_catches_dropped_key(void) {
    check_rng rng = { 4242 };
    ref_case c;
    memset(&c, 0, sizeof c);
    c.n_head_kv = 2; c.n_head = 12; c.d = 128; c.n_q = 1; c.n_kv = 1000; c.q_offset = 999;
    c.mask = OC_ATTN_EXPLICIT;
    uint8_t *em = malloc((size_t)c.n_head * c.n_kv);
    memset(em, 1, (size_t)c.n_head * c.n_kv);
    c.explicit_mask = em;
    bufs b;
    bufs_make(&b, &c, OC_DTYPE_F16, &rng, 4.0f);
    float *q = compact_q(&b, &c);
    double *ref = malloc(sizeof(double) * (size_t)c.n_head * c.d);
    for (int h = 0; h < c.n_head; h++) em[(size_t)h * c.n_kv + check_rng_int(&rng, 0, c.n_kv - 1)] = 0;
    ref_attention(&c, q, b.kf, b.vf, 1.0f / sqrtf((float)c.d), ref, NULL);   /* the mutated reference */
    memset(em, 1, (size_t)c.n_head * c.n_kv);
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    size_t n_bytes;
    void *scratch = scratch_for(&c, 1, &n_bytes);
    run_args a = args_for(&c, &b, NULL, oc_isa_best(&cpu));
    REQUIRE(run_call(&a, NULL, scratch, n_bytes, NULL, NULL) == OC_OK);
    int caught = 0, under_2e3 = 0;
    for (int h = 0; h < c.n_head; h++) {
        double num = 0, den = 0;
        for (int e = 0; e < c.d; e++) {
            double diff = b.out[(size_t)h * c.d + e] - ref[(size_t)h * c.d + e];
            num += diff * diff;
            den += ref[(size_t)h * c.d + e] * ref[(size_t)h * c.d + e];
        }
        caught += sqrt(num / den) > TOL;
        under_2e3 += sqrt(num / den) < 2e-3;
    }
    printf("# one dropped key of 1000: %d/12 rows fail 1e-4, %d/12 would pass 2e-3\n", caught, under_2e3);
    CHECKF(caught >= 11, "only %d of 12 rows notice a dropped key", caught);
    oc_port_aligned_free(scratch);
    free(ref); free(q); bufs_free(&b); free(em);
}

/* ---- kernels, layout, arguments ----------------------------------------------------------------------- */

/* The softmax kernel's exp2 against exp2() in double: one column of scores x + 2 with a running
 * max of 2, so the kernel writes 2^x; plus the -inf / fully-masked column rules. */
static void test_softmax_kernel(void) {
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    enum { N = 4099, COLS = 16 };
    float *s = malloc(sizeof(float) * N * COLS), *x = malloc(sizeof(float) * N);
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        const oc_attn_kernels *k = oc_attn_kernels_for((oc_isa)isa);
        if (!oc_isa_runs((oc_isa)isa, &cpu) || !k) continue;
        for (int i = 0; i < N; i++) x[i] = -125.0f * (float)i / (N - 1) + (i % 7) * 1e-3f - 3e-3f;
        x[0] = 0.0f; x[1] = -INFINITY; x[2] = -126.5f; x[3] = -0.5f; x[4] = -0.49999997f;
        float m[COLS], l[COLS], alpha[COLS];
        for (int c = 0; c < COLS; c++) {
            m[c] = c == 0 ? 2.0f : c == 1 ? -INFINITY : c == 2 ? 10.0f : 1.0f;
            l[c] = c == 1 ? 0.0f : 3.0f;
        }
        for (int i = 0; i < N; i++)
            for (int c = 0; c < COLS; c++)
                s[(size_t)i * COLS + c] = c == 0 ? x[i] + 2.0f : c == 1 ? -INFINITY : c == 2 ? x[i] : (float)(i % 5) - 2.0f;
        k->softmax_cols(s, COLS, N, COLS, m, l, alpha);
        double ref_sum = 0, worst = 0;
        for (int i = 0; i < N; i++) {
            double r = x[i] < -125.0f ? 0.0 : exp2((double)x[i]);
            float got = s[(size_t)i * COLS];
            ref_sum += r;
            if (r == 0) { CHECKF(got == 0.0f, "%s: 2^%g gave %g, not 0", k->name, (double)x[i], (double)got); continue; }
            double e = fabs(got - r) / r;
            if (e > worst) worst = e;
        }
        printf("# %s exp2: worst relative error %.3g over [-125, 0]\n", k->name, worst);
        CHECKF(worst < 1e-6, "%s exp2 error %.3g", k->name, worst);
        CHECKF(m[0] == 2.0f && alpha[0] == 1.0f, "%s: column 0 max %g alpha %g", k->name, (double)m[0], (double)alpha[0]);
        CHECKF(fabs(l[0] - 3.0 - ref_sum) / ref_sum < 1e-5, "%s sum %.9g vs %.9g", k->name, (double)l[0] - 3.0, ref_sum);
        /* column 1: every key masked and nothing kept yet: P = 0, alpha = 0, l stays 0, m stays -inf */
        int zero = 1;
        for (int i = 0; i < N; i++) zero &= s[(size_t)i * COLS + 1] == 0.0f;
        CHECKF(zero && alpha[1] == 0.0f && l[1] == 0.0f && m[1] == -INFINITY, "%s: empty column", k->name);
        /* column 2: the running max 10 stays, alpha 1 */
        CHECKF(m[2] == 10.0f && alpha[2] == 1.0f, "%s: column 2", k->name);
        /* columns 3..: the max grows from 1 to 2: alpha = 1/2, l = 3/2 + sum */
        double sum3 = 0;
        for (int i = 0; i < N; i++) sum3 += exp2((double)((i % 5) - 2) - 2.0);
        CHECKF(m[3] == 2.0f && fabs(alpha[3] - 0.5) < 1e-6 && fabs(l[3] - (1.5 + sum3)) / (1.5 + sum3) < 1e-5,
               "%s: column 3 m %g alpha %g l %g", k->name, (double)m[3], (double)alpha[3], (double)l[3]);
    }
    free(s);
    free(x);
}

/* The direct-path kernels (dot_rows, acc_rows) of every table against double sums: random rows,
 * keys gathered from a row pool in random order (as a sparse tile is), every head dim shape the
 * vector loops care about (tails of 1..15 elements, one chunk, several), f16 and f32, outputs
 * poisoned first; the bound is relative to sum |terms| (fp32 summation of d terms), and a NaN
 * never passes it. A NaN in one query row reaches that row's scores and no other. */
static void test_direct_kernels(void) {
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    static const int dims[] = { 1, 5, 8, 15, 16, 33, 64, 72, 80, 128, 136 };
    enum { POOL = 97, MAX_D = 136, MAX_KEYS = 75, LDS = 64, LDO = MAX_D + 3 };
    check_rng rng = { 0xd1ec7ULL };
    float *pool_f = malloc(sizeof(float) * POOL * MAX_D);
    uint16_t *pool_h = malloc(sizeof(uint16_t) * POOL * MAX_D);
    float *q = malloc(sizeof(float) * OC_ATTN_DIRECT_ROWS * MAX_D), *s = malloc(sizeof(float) * MAX_KEYS * LDS);
    float *o = malloc(sizeof(float) * OC_ATTN_DIRECT_ROWS * LDO), *o0 = malloc(sizeof(float) * OC_ATTN_DIRECT_ROWS * LDO);
    const void *rows[MAX_KEYS];
    int32_t pick[MAX_KEYS];
    for (int i = 0; i < POOL * MAX_D; i++) {
        pool_h[i] = oc_f32_to_f16(check_rng_uniform(&rng, -1.0f, 1.0f));
        pool_f[i] = oc_f16_to_f32(pool_h[i]);
    }
    int n_cases = 0;
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        const oc_attn_kernels *k = oc_attn_kernels_for((oc_isa)isa);
        if (!oc_isa_runs((oc_isa)isa, &cpu) || !k) continue;
        double worst_dot = 0, worst_acc = 0;
        for (int di = 0; di < (int)(sizeof dims / sizeof dims[0]); di++)
            for (int rep = 0; rep < 6; rep++) {
                int d = dims[di], n_rows = check_rng_int(&rng, 1, OC_ATTN_DIRECT_ROWS);
                int n_keys = rep == 0 ? 1 : rep == 1 ? MAX_KEYS : check_rng_int(&rng, 2, MAX_KEYS);
                int32_t dtype = rep % 2 ? OC_DTYPE_F16 : OC_DTYPE_F32;
                int n_cols = (n_rows + k->vec - 1) / k->vec * k->vec;
                for (int t = 0; t < n_keys; t++) {
                    pick[t] = check_rng_int(&rng, 0, POOL - 1);
                    rows[t] = dtype == OC_DTYPE_F16 ? (const void *)(pool_h + (size_t)pick[t] * MAX_D)
                                                    : (const void *)(pool_f + (size_t)pick[t] * MAX_D);
                }
                for (int i = 0; i < n_rows * d; i++) q[i] = check_rng_uniform(&rng, -2.0f, 2.0f);
                check_poison_f32(s, (size_t)MAX_KEYS * LDS);
                k->dot_rows(s, LDS, q, n_rows, n_cols, rows, rows, n_keys, d, dtype);
                for (int t = 0; t < n_keys; t++) {
                    const float *kr = pool_f + (size_t)pick[t] * MAX_D;
                    for (int r = 0; r < n_cols; r++) {
                        double ref = 0, mag = 0;
                        for (int c = 0; r < n_rows && c < d; c++) {
                            ref += (double)q[r * d + c] * kr[c];
                            mag += fabs((double)q[r * d + c] * kr[c]);
                        }
                        double e = fabs(s[t * LDS + r] - ref) / (mag > 0 ? mag : 1);
                        CHECKF(e <= 1e-6 * d + 1e-7, "%s dot_rows d=%d rows=%d keys=%d key %d row %d: %g vs %g", k->name, d,
                               n_rows, n_keys, t, r, (double)s[t * LDS + r], ref);
                        if (e > worst_dot) worst_dot = e;
                    }
                }
                /* P as dot_rows leaves it (scores, any sign), o starting from random values */
                for (int i = 0; i < OC_ATTN_DIRECT_ROWS * LDO; i++) o[i] = o0[i] = check_rng_uniform(&rng, -1.0f, 1.0f);
                for (int r = 0; r < n_rows; r++)
                    for (int c = d; c < LDO; c++) o[r * LDO + c] = o0[r * LDO + c] = NAN;   /* not touched */
                k->acc_rows(o, LDO, s, LDS, n_rows, rows, n_keys, d, dtype);
                for (int r = 0; r < n_rows; r++) {
                    for (int c = 0; c < d; c++) {
                        double ref = o0[r * LDO + c], mag = fabs(ref);
                        for (int t = 0; t < n_keys; t++) {
                            double term = (double)s[t * LDS + r] * pool_f[(size_t)pick[t] * MAX_D + c];
                            ref += term;
                            mag += fabs(term);
                        }
                        double e = fabs(o[r * LDO + c] - ref) / (mag > 0 ? mag : 1);
                        CHECKF(e <= 1e-6 * n_keys + 1e-7, "%s acc_rows d=%d rows=%d keys=%d row %d col %d: %g vs %g", k->name,
                               d, n_rows, n_keys, r, c, (double)o[r * LDO + c], ref);
                        if (e > worst_acc) worst_acc = e;
                    }
                    for (int c = d; c < LDO; c++) CHECK(isnan(o[r * LDO + c]));
                }
                n_cases++;
            }
        /* a NaN query element: its row's scores are NaN, the other rows' are not */
        int d = 72, n_rows = 6;
        for (int t = 0; t < 5; t++) rows[t] = pool_f + (size_t)t * MAX_D;
        for (int i = 0; i < n_rows * d; i++) q[i] = 0.5f;
        q[2 * d + 37] = NAN;
        check_poison_f32(s, (size_t)MAX_KEYS * LDS);
        k->dot_rows(s, LDS, q, n_rows, k->vec, rows, rows, 5, d, OC_DTYPE_F32);
        for (int t = 0; t < 5; t++)
            for (int r = 0; r < n_rows; r++)
                CHECKF(r == 2 ? isnan(s[t * LDS + r]) : isfinite(s[t * LDS + r]), "%s: NaN of row 2, key %d row %d: %g",
                       k->name, t, r, (double)s[t * LDS + r]);
        printf("# %s direct kernels: worst relative error dot %.3g, acc %.3g\n", k->name, worst_dot, worst_acc);
    }
    CHECK(n_cases > 0);
    free(pool_f); free(pool_h); free(q); free(s); free(o); free(o0);
}

/* The BF16 table's products (attn_bf16_avx512.c) against double sums: S^T = K Q^T through
 * convert_rows / pack_qt / gemm, and O += P V through pack_v / pack_p / gemm (whole tiles and the
 * first nb keys of a panel, as attn.c's pv_rows). Two bounds per element: against the operands
 * rounded to bf16 (the f32 summation bound alone, k 2^-23 sum |a b|), and against the unrounded ones
 * (plus (2^-7 + 2^-16) sum |a b|, each operand within 2^-8 relatively). Odd head dims and key counts
 * (zero partners), padding columns 0, outputs poisoned, a NaN key element reaches only its scores. */
#if OC_BUILT_AVX512
static float bf16_round(float x) { return oc_bf16_to_f32(oc_f32_to_bf16(x)); }
#endif

static void test_bf16_kernels(void) {
#if OC_BUILT_AVX512
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    if (!cpu.avx512bf16 || !oc_isa_runs(OC_ISA_AVX512, &cpu)) {
        check_skip("bf16 attention kernels: the CPU does not report AVX512_BF16");
        return;
    }
    const oc_attn_kernels *k = oc_attn_kernels_avx512_bf16();
    static const int dims[] = { 1, 3, 8, 17, 33, 64, 80, 128 };
    enum { MAX_D = 128, MAX_KEYS = 72, LDS = 64, MAX_DP = 128 };
    check_rng rng = { 0xbf16ULL };
    float *kf = malloc(sizeof(float) * MAX_KEYS * MAX_D), *vf = malloc(sizeof(float) * MAX_KEYS * MAX_D);
    uint16_t *kh = malloc(sizeof(uint16_t) * MAX_KEYS * MAX_D), *vh = malloc(sizeof(uint16_t) * MAX_KEYS * MAX_D);
    float *q = malloc(sizeof(float) * LDS * MAX_D), *kt = malloc(sizeof(float) * MAX_KEYS * MAX_D);
    float *qt = malloc(sizeof(float) * LDS * MAX_D), *vp = malloc(sizeof(float) * MAX_KEYS * MAX_DP);
    float *s = malloc(sizeof(float) * MAX_KEYS * LDS), *p = malloc(sizeof(float) * MAX_KEYS * LDS);
    float *o = malloc(sizeof(float) * LDS * MAX_DP), *o0 = malloc(sizeof(float) * LDS * MAX_DP);
    const void *krows[MAX_KEYS], *vrows[MAX_KEYS];
    const float *qrows[LDS];
    double worst_s = 0, worst_o = 0;
    for (int di = 0; di < (int)OC_ARRAY_LEN(dims); di++)
        for (int rep = 0; rep < 4; rep++) {
            int d = dims[di], dpad = (d + k->vec - 1) / k->vec * k->vec;
            int n_rows = check_rng_int(&rng, 1, LDS), cols = (n_rows + k->vec - 1) / k->vec * k->vec;
            int nk = rep == 0 ? 1 : rep == 1 ? MAX_KEYS : check_rng_int(&rng, 2, MAX_KEYS - 1);
            int32_t dtype = rep % 2 ? OC_DTYPE_F16 : OC_DTYPE_F32;
            float scale = 1.0f / sqrtf((float)d);
            for (int i = 0; i < nk * d; i++) {
                kh[i] = oc_f32_to_f16(check_rng_uniform(&rng, -1.0f, 1.0f));
                vh[i] = oc_f32_to_f16(check_rng_uniform(&rng, -1.0f, 1.0f));
                kf[i] = oc_f16_to_f32(kh[i]);
                vf[i] = oc_f16_to_f32(vh[i]);
            }
            for (int t = 0; t < nk; t++) {
                krows[t] = dtype == OC_DTYPE_F16 ? (const void *)(kh + t * d) : (const void *)(kf + t * d);
                vrows[t] = dtype == OC_DTYPE_F16 ? (const void *)(vh + t * d) : (const void *)(vf + t * d);
            }
            for (int i = 0; i < n_rows * d; i++) q[i] = check_rng_uniform(&rng, -4.0f, 4.0f);
            for (int r = 0; r < n_rows; r++) qrows[r] = q + r * d;
            /* S^T = K Q^T */
            check_poison_f32(kt, (size_t)MAX_KEYS * MAX_D);
            check_poison_f32(qt, (size_t)LDS * MAX_D);
            check_poison_f32(s, (size_t)MAX_KEYS * LDS);
            k->convert_rows(kt, krows, nk, d, dtype);
            k->pack_qt(qt, qrows, n_rows, cols, d, scale);
            k->gemm(nk, cols, d, kt, d, 1, qt, s, LDS, 0);
            for (int t = 0; t < nk; t++)
                for (int r = 0; r < cols; r++) {
                    double exact = 0, rounded = 0, mag = 0;
                    for (int c = 0; r < n_rows && c < d; c++) {
                        float qs = q[r * d + c] * scale;
                        exact += (double)qs * kf[t * d + c];
                        rounded += (double)bf16_round(qs) * bf16_round(kf[t * d + c]);
                        mag += fabs((double)qs * kf[t * d + c]);
                    }
                    double got = s[t * LDS + r], f32_bound = d * 0x1p-23 * 1.02 * mag + 1e-30;
                    CHECKF(fabs(got - rounded) <= f32_bound, "bf16 S d=%d key %d/%d row %d/%d: %.9g vs rounded %.9g", d, t,
                           nk, r, n_rows, got, rounded);
                    double e = fabs(got - exact) / (mag > 0 ? mag : 1);
                    CHECKF(fabs(got - exact) <= (0x1p-7 + 0x1p-16) * 1.02 * mag + f32_bound, "bf16 S d=%d key %d row %d: "
                           "%.9g vs %.9g", d, t, r, got, exact);
                    if (e > worst_s) worst_s = e;
                }
            /* O += P V over nb keys (all of them, or the first nb of each panel) */
            int nb = rep >= 2 ? check_rng_int(&rng, 1, nk) : nk;
            for (int t = 0; t < nk; t++)
                for (int r = 0; r < cols; r++) p[t * LDS + r] = s[t * LDS + r] = check_rng_uniform(&rng, 0.0f, 1.0f);
            for (int i = 0; i < LDS * MAX_DP; i++) o[i] = o0[i] = check_rng_uniform(&rng, -1.0f, 1.0f);
            check_poison_f32(vp, (size_t)MAX_KEYS * MAX_DP);
            k->pack_v(vp, vrows, nk, d, dpad, dtype);
            k->pack_p(s, LDS, nb, cols);
            if (nb == nk) {
                k->gemm(n_rows, dpad, nk, s, 1, LDS, vp, o, MAX_DP, 1);
            } else {
                for (int p0 = 0; p0 < dpad; p0 += k->panel)
                    k->gemm(n_rows, OC_MIN(k->panel, dpad - p0), nb, s, 1, LDS, vp + (int64_t)p0 * nk, o + p0, MAX_DP, 1);
            }
            for (int r = 0; r < n_rows; r++)
                for (int c = 0; c < dpad; c++) {
                    double exact = o0[r * MAX_DP + c], rounded = exact, mag = fabs(exact);
                    for (int t = 0; t < nb && c < d; t++) {
                        exact += (double)p[t * LDS + r] * vf[t * d + c];
                        rounded += (double)bf16_round(p[t * LDS + r]) * bf16_round(vf[t * d + c]);
                        mag += fabs((double)p[t * LDS + r] * vf[t * d + c]);
                    }
                    double got = o[r * MAX_DP + c], f32_bound = (nb + 1) * 0x1p-23 * 1.02 * mag;
                    CHECKF(fabs(got - rounded) <= f32_bound, "bf16 O d=%d nb=%d/%d row %d col %d: %.9g vs rounded %.9g", d,
                           nb, nk, r, c, got, rounded);
                    CHECKF(fabs(got - exact) <= (0x1p-7 + 0x1p-16) * 1.02 * mag + f32_bound, "bf16 O d=%d row %d col %d", d,
                           r, c);
                    double e = fabs(got - exact) / (mag > 0 ? mag : 1);
                    if (e > worst_o) worst_o = e;
                }
            for (int r = n_rows; r < LDS; r++)   /* rows beyond m untouched */
                for (int c = 0; c < dpad; c++) CHECK(o[r * MAX_DP + c] == o0[r * MAX_DP + c]);
        }
    /* a NaN key element: only that key's scores are NaN */
    int d = 80, nk = 5, n_rows = 20, cols = 32;
    for (int i = 0; i < nk * d; i++) kf[i] = 0.25f;
    kf[3 * d + 41] = NAN;
    for (int t = 0; t < nk; t++) krows[t] = kf + t * d;
    for (int i = 0; i < n_rows * d; i++) q[i] = 0.5f;
    for (int r = 0; r < n_rows; r++) qrows[r] = q + r * d;
    check_poison_f32(s, (size_t)MAX_KEYS * LDS);
    k->convert_rows(kt, krows, nk, d, OC_DTYPE_F32);
    k->pack_qt(qt, qrows, n_rows, cols, d, 1.0f);
    k->gemm(nk, cols, d, kt, d, 1, qt, s, LDS, 0);
    for (int t = 0; t < nk; t++)
        for (int r = 0; r < n_rows; r++)
            CHECKF(t == 3 ? isnan(s[t * LDS + r]) : s[t * LDS + r] == 10.0f, "bf16 NaN key: key %d row %d: %g", t, r,
                   (double)s[t * LDS + r]);
    printf("# %s products: worst relative error S %.3g, O %.3g (bound %.3g)\n", k->name, worst_s, worst_o,
           (0x1p-7 + 0x1p-16) * 1.02);
    free(kf); free(vf); free(kh); free(vh); free(q); free(kt); free(qt); free(vp); free(s); free(p); free(o); free(o0);
#else
    check_skip("bf16 attention kernels: no AVX-512 kernels in this build");
#endif
}

/* The engine with bf16_products on (the vision encoder's calls): random prefill cases of every
 * base mask, GQA ratio and head dim, f16 and f32, against the double reference at TOL_BF16, and
 * bitwise equal across thread counts. Runs the BF16 table where attn.c takes it (AVX512_BF16 and
 * bf16_fast: a Zen 4 by default; OCELLUS_CPU_FEATURES=+bf16_fast elsewhere), else the f32 tables
 * at the same bound. */
static void test_bf16_products(void) {
    static const oc_attn_mask_kind masks[] = { OC_ATTN_CAUSAL, OC_ATTN_BIDIRECTIONAL, OC_ATTN_SEGMENTS };
    static const int reps[] = { 1, 2, 6 }, dims[] = { 1, 17, 64, 80, 128 };
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    printf("# bf16 products on the engine: %s\n", cpu.avx512bf16 && cpu.bf16_fast ? "avx512+bf16 table"
                                                                                 : "f32 tables (no bf16_fast here)");
    pools ps;
    REQUIRE(pools_open(&ps));
    g_bf16_products = 1;
    double worst = 0;
    int seed = 500;
    for (size_t m = 0; m < OC_ARRAY_LEN(masks); m++)
        for (size_t r = 0; r < OC_ARRAY_LEN(reps); r++)
            for (size_t di = 0; di < OC_ARRAY_LEN(dims); di++, seed++) {
                if (emulated_skip(m, r, di)) continue;
                g_tol = dims[di] < 8 ? TOL_BF16_D1 : TOL_BF16;
                double e = random_case(masks[m], reps[r], dims[di], seed % 2 ? OC_DTYPE_F16 : OC_DTYPE_F32, seed % 3,
                                       seed, &ps);
                if (e > worst) worst = e;
            }
    g_bf16_products = 0;
    g_tol = TOL;   /* the other tests' bound */
    printf("# bf16 products: worst row error %.3g (tolerance %.0e, head dim 1: %.0e)\n", worst, TOL_BF16, TOL_BF16_D1);
    pools_close(&ps);
}

static void test_layout(void) {
    oc_token_span img[3] = { { 0, 10 }, { 15, 16 }, { 20, 1020 } };
    oc_token_layout *L = NULL;
    oc_error err;
    REQUIRE(oc_layout_build(&L, 1030, img, 3, OC_LAYOUT_DEFAULT_SINK_FRACTION, NULL, &err) == OC_OK);
    CHECK(oc_layout_n_images(L) == 3 && oc_layout_n_tokens(L) == 1030);
    CHECK(oc_layout_image_n_sink(L, 0) == 1 && oc_layout_image_n_sink(L, 1) == 1 && oc_layout_image_n_sink(L, 2) == 100);
    CHECK(oc_layout_image_at(L, 0) == 0 && oc_layout_image_at(L, 9) == 0 && oc_layout_image_at(L, 10) == -1);
    CHECK(oc_layout_image_at(L, 15) == 1 && oc_layout_image_at(L, 16) == -1 && oc_layout_image_at(L, 1019) == 2);
    CHECK(oc_layout_image_at(L, 1020) == -1 && oc_layout_image_at(L, 5000) == -1 && oc_layout_image_at(L, -1) == -1);
    CHECK(oc_layout_next_image(L, 0) == 1 && oc_layout_next_image(L, 12) == 1 && oc_layout_next_image(L, 17) == 2);
    CHECK(oc_layout_next_image(L, 1025) == 3 && oc_layout_next_image(L, 99999) == 3);
    CHECK(oc_layout_is_sink(L, 0) && !oc_layout_is_sink(L, 1) && oc_layout_is_sink(L, 15));
    CHECK(oc_layout_is_sink(L, 119) && !oc_layout_is_sink(L, 120) && !oc_layout_is_sink(L, 12));
    oc_layout_free(L);
    /* the sink rule: ceil without float surprises */
    CHECK(oc_layout_sink_count(1000, 0.1f) == 100 && oc_layout_sink_count(1001, 0.1f) == 101);
    CHECK(oc_layout_sink_count(1024, 0.1f) == 103 && oc_layout_sink_count(1, 0.1f) == 1);
    CHECK(oc_layout_sink_count(10, 0.0f) == 0 && oc_layout_sink_count(10, 1.0f) == 10);
    CHECK(oc_layout_sink_count(7, 0.25f) == 2 && oc_layout_sink_count(8, 0.25f) == 2);
    for (int n = 1; n < 5000; n += 7) CHECKF(oc_layout_sink_count(n, 0.1f) == (n + 9) / 10, "n=%d", n);
    /* bad spans are refused with a message */
    oc_token_span bad[2] = { { 5, 10 }, { 8, 12 } };
    CHECK(oc_layout_build(&L, 20, bad, 2, 0.1f, NULL, &err) == OC_ERR_INVALID && L == NULL);
    CHECK(strstr(err.message, "image 1") != NULL);
    bad[1].start = 12;
    bad[1].end = 25;
    CHECK(oc_layout_build(&L, 20, bad, 2, 0.1f, NULL, &err) == OC_ERR_INVALID);
    CHECK(oc_layout_build(&L, 20, bad, 1, 1.5f, NULL, &err) == OC_ERR_INVALID);
    CHECK(oc_layout_build(&L, 0, NULL, 0, 0.1f, NULL, &err) == OC_OK && L != NULL);
    CHECK(oc_layout_image_at(L, 0) == -1 && oc_layout_next_image(L, 0) == 0);
    oc_layout_free(L);
    oc_layout_free(NULL);
}

static void test_bad_arguments(void) {
    float q[64] = { 0 }, out[64];
    uint16_t kv[64] = { 0 };
    run_args a;
    memset(&a, 0, sizeof a);
    a.c.n_q = 1; a.c.n_kv = 1; a.c.n_head = 2; a.c.n_head_kv = 1; a.c.head_dim = 16;
    a.mem.q = q; a.mem.k = kv; a.mem.v = kv; a.mem.out = out; a.c.kv_dtype = OC_DTYPE_F16;
    a.c.q_stride_token = 32; a.c.q_stride_head = 16; a.c.k_stride_token = a.c.v_stride_token = 16;
    a.c.out_stride_token = 32; a.c.out_stride_head = 16; a.c.scale = 0.25f; a.isa = OC_ISA_SCALAR;
    oc_attn_dims dims = { 1, 1, 2, 1, 16 };
    size_t n_bytes = oc_attn_scratch_bytes(&dims, 1);
    void *scratch = oc_port_aligned_alloc(OC_MEM_ALIGN, n_bytes);
    oc_error err;
    check_poison_f32(out, 64);
    CHECK(run_call(&a, NULL, scratch, n_bytes, NULL, &err) == OC_OK);
    CHECK(out[0] == 0.0f && out[31] == 0.0f);   /* all-zero K and V: uniform average of zero rows */
    CHECK(run_call(&a, NULL, scratch, n_bytes - 1, NULL, &err) == OC_ERR_INVALID && strstr(err.message, "scratch"));
    CHECK(run_call(&a, NULL, (char *)scratch + 4, n_bytes, NULL, &err) == OC_ERR_INVALID);
    a.c.n_head_kv = 2;
    a.c.n_head = 3;
    CHECK(run_call(&a, NULL, scratch, n_bytes, NULL, &err) == OC_ERR_INVALID && strstr(err.message, "kv heads"));
    a.c.n_head = 2;
    a.c.n_head_kv = 1;
    a.c.kv_dtype = OC_DTYPE_Q8_0;
    CHECK(run_call(&a, NULL, scratch, n_bytes, NULL, &err) == OC_ERR_INVALID);
    a.c.kv_dtype = OC_DTYPE_F16;
    a.c.mask = OC_ATTN_SEGMENTS;
    oc_token_span seg[2] = { { 0, 4 }, { 3, 6 } };
    a.c.segments = seg; a.c.n_segments = 2;
    CHECK(run_call(&a, NULL, scratch, n_bytes, NULL, &err) == OC_ERR_INVALID && strstr(err.message, "segment 1"));
    a.c.mask = OC_ATTN_EXPLICIT;
    CHECK(run_call(&a, NULL, scratch, n_bytes, NULL, &err) == OC_ERR_INVALID);
    a.c.mask = (oc_attn_mask_kind)9;
    CHECK(run_call(&a, NULL, scratch, n_bytes, NULL, &err) == OC_ERR_INVALID);
    a.c.mask = OC_ATTN_CAUSAL;
    oc_head_pattern pat[2] = { { .kind = OC_PATTERN_A_SHAPE, .n_sink = 4, .n_local = 0 }, { .kind = OC_PATTERN_DENSE } };
    a.c.patterns = pat;
    CHECK(run_call(&a, NULL, scratch, n_bytes, NULL, &err) == OC_ERR_INVALID && strstr(err.message, "head 0"));
    pat[0].kind = (oc_pattern_kind)OC_PATTERN_COUNT;
    CHECK(run_call(&a, NULL, scratch, n_bytes, NULL, &err) == OC_ERR_INVALID);
    a.c.patterns = NULL;
    a.c.q_offset = -1;
    CHECK(run_call(&a, NULL, scratch, n_bytes, NULL, &err) == OC_ERR_INVALID);
    a.c.q_offset = 0;
    a.isa = OC_ISA_COUNT;
    CHECK(run_call(&a, NULL, scratch, n_bytes, NULL, &err) == OC_ERR_UNSUPPORTED);
    CHECK(oc_attn_run(NULL, &a.mem, a.isa, NULL, scratch, n_bytes, NULL, &err) == OC_ERR_INVALID);
    CHECK(oc_attn_run(&a.c, NULL, a.isa, NULL, scratch, n_bytes, NULL, &err) == OC_ERR_INVALID);
    oc_attn_dims bad = { 1, 1, 3, 2, 16 };
    CHECK(oc_attn_scratch_bytes(&bad, 1) == 0);
    CHECK(oc_attn_scratch_bytes(&dims, 0) == 0);
    /* scratch grows with the thread count and is the same for every ISA */
    CHECK(oc_attn_scratch_bytes(&dims, 2) > n_bytes);
    oc_port_aligned_free(scratch);
}

/* FLOP accounting on a known case: causal, 2 heads, one dense and one A-shape. */
static void test_flop_counts(void) {
    ref_case c;
    memset(&c, 0, sizeof c);
    c.n_head_kv = 1; c.n_head = 2; c.d = 64; c.n_q = c.n_kv = 300; c.mask = OC_ATTN_CAUSAL;
    oc_head_pattern pat[2] = { { .kind = OC_PATTERN_DENSE, .n_sink = 0, .n_local = 0 }, { .kind = OC_PATTERN_A_SHAPE, .n_sink = 4, .n_local = 16 } };
    c.pat = pat;
    check_rng rng = { 99 };
    bufs b;
    bufs_make(&b, &c, OC_DTYPE_F32, &rng, 1.0f);
    size_t n_bytes;
    void *scratch = scratch_for(&c, 1, &n_bytes);
    run_args a = args_for(&c, &b, NULL, OC_ISA_SCALAR);
    oc_attn_stats st = { 0, 0, 0 };
    REQUIRE(run_call(&a, NULL, scratch, n_bytes, &st, NULL) == OC_OK);
    uint64_t dense = 300ull * 301 / 2, ashape = 0;
    for (int p = 0; p < 300; p++) ashape += (uint64_t)OC_MIN(p + 1, 16 + OC_MAX(0, OC_MIN(4, p + 1 - 16)));
    CHECKF(st.flops_kept == 4 * 64 * (dense + ashape), "kept %llu", (unsigned long long)st.flops_kept);
    CHECKF(st.flops_skipped == 4 * 64 * (dense - ashape), "skipped %llu", (unsigned long long)st.flops_skipped);
    oc_port_aligned_free(scratch);
    bufs_free(&b);
}

int main(void) {
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    printf("# attention kernels on this CPU:");
    for (int isa = 0; isa < OC_ISA_COUNT; isa++)
        if (oc_isa_runs((oc_isa)isa, &cpu) && oc_attn_kernels_for((oc_isa)isa)) printf(" %s", oc_isa_name((oc_isa)isa));
    printf("\n");
    CHECK_RUN(test_layout);
    CHECK_RUN(test_bad_arguments);
    CHECK_RUN(test_softmax_kernel);
    CHECK_RUN(test_direct_kernels);
    CHECK_RUN(test_bf16_kernels);
    CHECK_RUN(test_bf16_products);
    CHECK_RUN(test_flop_counts);
    CHECK_RUN(test_random_prefill);
    CHECK_RUN(test_odd_shapes);
    CHECK_RUN(test_decode);
    CHECK_RUN(test_blindsight_text_rows);
    CHECK_RUN(test_shared_keys);
    CHECK_RUN(test_kv_held);
    CHECK_RUN(test_long_sequences);
    CHECK_RUN(test_pattern_equals_explicit_mask);
    CHECK_RUN(test_fully_masked_rows);
    CHECK_RUN(test_tolerance_catches_dropped_key);
    return check_finish();
}
