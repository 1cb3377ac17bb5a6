/* test_vision.c: the vision encoder (src/vision*.c) against a naive double-precision reference.
 * Small random mmproj GGUFs of both kinds are written with oc_gguf_writer (weights rounded to
 * their stored type; the reference reads the same rounded values). The reference follows HF's
 * modules directly and runs in grid (merge) order for both kinds: Qwen2.5-VL window attention is
 * a mask "same 4x4 window of merged tokens" there, so the encoder's token permutation, window
 * spans and un-permutation are checked against an order-free definition. Also: legacy files,
 * quantized weights, A-shape plans, bad files and arguments, thread-count determinism, and (when
 * tests/data/models exists) parity with transformers' outputs. The forward cases and the
 * transformers parity run again on the OpenCL backend, with the same tolerances (skipped, saying
 * why, without a device). */
#include "check.h"
#include "core/dtype.h"
#include "core/f16.h"
#include "core/pool.h"
#include "port.h"
#include "kernels/quant.h"
#include "tools/safetensors.h"
#include "support/opencl.h"
#include "model/vision_model.h"

#define TOL 1e-4
/* The BF16 path (matmul.h OC_MATMUL_BF16: F16 / BF16 matrices as bf16 x bf16 products, taken where
 * oc_cpu_features.bf16_fast is set: by default on AMD Zen 4 / Zen 5, port.h) rounds both operands of
 * every product to 8 significant bits (unit roundoff 2^-8 = 3.9e-3; test_matmul checks each product
 * against that bound). Through a whole encoder this measured 2e-3 to 8.4e-3 relative error on these
 * fixtures (Emerald Rapids, forced with OCELLUS_CPU_FEATURES=+avx512bf16,+bf16_fast), so its bounds are
 * 2e-2 for the random models (against 1e-4) and 1e-2 for transformers' outputs (against 1e-3): of
 * the order of the int8 path's 3e-2, and what a bf16 transformers run of the same model gives. */
#define BF16_TOL 2e-2
#define BF16_PARITY_TOL 1e-2
#define MAX_T 128
#define TMP "build/tests/test_vision.tmp.gguf"

/* ---- random model files -------------------------------------------------------------------------- */

typedef struct tt {
    char name[64];
    int32_t dtype;
    uint32_t n_dims;
    int64_t ne[4];
    float *val;      /* the stored values, decoded */
    void *bytes;     /* encoded */
} tt;

typedef struct spec {
    oc_vision_kind kind;
    int layers, hidden, heads, ffn, proj, n_wa, window_px;
    int32_t wdtype, pdtype0, pdtype1;   /* 2-D weights; the two patch kernels */
    int legacy;                         /* qwen2_vl_surgery.py quirks */
} spec;

typedef struct tmodel {
    spec s;
    tt t[MAX_T];
    int n;
} tmodel;

static tt *find_t(tmodel *m, const char *name) {
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->t[i].name, name)) return &m->t[i];
    return NULL;
}

static const float *tv(const tmodel *m, const char *name) {
    tt *t = find_t((tmodel *)m, name);
    if (!t) {
        fprintf(stderr, "test_vision: no tensor %s\n", name);
        exit(2);
    }
    return t->val;
}

static void add_t(tmodel *m, const char *name, int32_t dtype, uint32_t n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                  int64_t ne3, float center, float scale, check_rng *r) {
    tt *t = &m->t[m->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->n_dims = n_dims;
    t->ne[0] = ne0; t->ne[1] = ne1; t->ne[2] = ne2; t->ne[3] = ne3;
    size_t n = (size_t)(ne0 * ne1 * ne2 * ne3);
    t->val = malloc(n * sizeof(float));
    t->bytes = malloc(n * sizeof(float) + 64);
    for (size_t i = 0; i < n; i++) t->val[i] = center + check_rng_uniform(r, -scale, scale);
    uint16_t *h = t->bytes;
    switch (dtype) {
    case OC_DTYPE_F32: memcpy(t->bytes, t->val, n * sizeof(float)); break;
    case OC_DTYPE_F16:
        for (size_t i = 0; i < n; i++) { h[i] = oc_f32_to_f16(t->val[i]); t->val[i] = oc_f16_to_f32(h[i]); }
        break;
    case OC_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) { h[i] = oc_f32_to_bf16(t->val[i]); t->val[i] = oc_bf16_to_f32(h[i]); }
        break;
    case OC_DTYPE_Q8_0:
        oc_quantize_q8_0(t->val, t->bytes, (int64_t)n);
        oc_dequant_q8_0(t->bytes, t->val, (int64_t)n);
        break;
    default: fprintf(stderr, "test_vision: dtype %d\n", (int)dtype); exit(2);
    }
}

static void mat_t(tmodel *m, const char *name, int64_t n_in, int64_t n_out, check_rng *r) {
    add_t(m, name, m->s.wdtype, 2, n_in, n_out, 1, 1, 0.0f, 1.7f / sqrtf((float)n_in), r);
}
static void vec_t(tmodel *m, const char *name, int64_t n, float center, float scale, check_rng *r) {
    add_t(m, name, OC_DTYPE_F32, 1, n, 1, 1, 1, center, scale, r);
}

static void build_model(tmodel *m, const spec *s, unsigned long long seed) {
    memset(m, 0, sizeof *m);
    m->s = *s;
    check_rng r = { seed };
    int d = s->hidden, f = s->ffn, rms = s->kind == OC_VISION_QWEN25VL;
    float ps = 1.7f / sqrtf(1176.0f);
    add_t(m, "v.patch_embd.weight", s->pdtype0, 4, 14, 14, 3, d, 0.0f, ps, &r);
    add_t(m, "v.patch_embd.weight.1", s->pdtype1, 4, 14, 14, 3, d, 0.0f, ps, &r);
    if (s->legacy) add_t(m, "v.position_embd.weight", OC_DTYPE_F32, 2, 10, 10, 1, 1, 0.0f, 0.0f, &r);
    char n[96];
    for (int il = 0; il < s->layers; il++) {
#define NM(x) (snprintf(n, sizeof n, "v.blk.%d.%s", il, x), n)
        vec_t(m, NM("ln1.weight"), d, 1.0f, 0.2f, &r);
        if (!rms) vec_t(m, NM("ln1.bias"), d, 0.0f, 0.1f, &r);
        static const char *qkvo[4] = { "attn_q", "attn_k", "attn_v", "attn_out" };
        for (int i = 0; i < 4; i++) {
            char w[32], b[32];
            snprintf(w, sizeof w, "%s.weight", qkvo[i]);
            snprintf(b, sizeof b, "%s.bias", qkvo[i]);
            mat_t(m, NM(w), d, d, &r);
            vec_t(m, NM(b), d, 0.0f, 0.1f, &r);
        }
        vec_t(m, NM("ln2.weight"), d, 1.0f, 0.2f, &r);
        if (!rms) vec_t(m, NM("ln2.bias"), d, 0.0f, 0.1f, &r);
        const char *fc1 = s->legacy ? "ffn_down" : "ffn_up", *fc2 = s->legacy ? "ffn_up" : "ffn_down";
        char w1[32], b1[32], w2[32], b2[32];
        snprintf(w1, sizeof w1, "%s.weight", fc1); snprintf(b1, sizeof b1, "%s.bias", fc1);
        snprintf(w2, sizeof w2, "%s.weight", fc2); snprintf(b2, sizeof b2, "%s.bias", fc2);
        if (rms) {
            mat_t(m, NM("ffn_gate.weight"), d, f, &r);
            vec_t(m, NM("ffn_gate.bias"), f, 0.0f, 0.1f, &r);
        }
        mat_t(m, NM(w1), d, f, &r);
        vec_t(m, NM(b1), f, 0.0f, 0.1f, &r);
        mat_t(m, NM(w2), f, d, &r);
        vec_t(m, NM(b2), d, 0.0f, 0.1f, &r);
#undef NM
    }
    vec_t(m, "v.post_ln.weight", d, 1.0f, 0.2f, &r);
    if (!rms) vec_t(m, "v.post_ln.bias", d, 0.0f, 0.1f, &r);
    mat_t(m, "mm.0.weight", 4 * d, 4 * d, &r);
    vec_t(m, "mm.0.bias", 4 * d, 0.0f, 0.1f, &r);
    mat_t(m, "mm.2.weight", 4 * d, s->proj, &r);
    vec_t(m, "mm.2.bias", s->proj, 0.0f, 0.1f, &r);
}

static void free_model(tmodel *m) {
    for (int i = 0; i < m->n; i++) { free(m->t[i].val); free(m->t[i].bytes); }
    m->n = 0;
}

/* Key overrides for bad-file tests. */
typedef struct keys {
    const char *projector;   /* NULL: by kind */
    int no_wa;               /* leave out n_wa_pattern */
    int heads;               /* 0: spec's */
} keys;

static int write_model(const tmodel *m, const keys *k, const char *skip_tensor) {
    oc_gguf_writer *w = NULL;
    oc_error e;
    const spec *s = &m->s;
    if (oc_gguf_writer_open(&w, NULL, &e)) return 0;
    const char *proj = k && k->projector ? k->projector : s->kind == OC_VISION_QWEN2VL ? "qwen2vl_merger" : "qwen2.5vl_merger";
    static const float mean[3] = { 0.48145466f, 0.4578275f, 0.40821073f }, stdv[3] = { 0.26862954f, 0.26130258f, 0.27577711f };
    int ok = !oc_gguf_writer_add_str(w, "general.architecture", "clip", &e) &&
             !oc_gguf_writer_add_str(w, "general.type", "mmproj", &e) &&
             !oc_gguf_writer_add_bool(w, "clip.has_vision_encoder", 1, &e) &&
             !oc_gguf_writer_add_str(w, "clip.projector_type", proj, &e) &&
             !oc_gguf_writer_add_u32(w, "clip.vision.image_size", 560, &e) &&
             !oc_gguf_writer_add_u32(w, "clip.vision.patch_size", 14, &e) &&
             !oc_gguf_writer_add_u32(w, "clip.vision.embedding_length", (uint32_t)s->hidden, &e) &&
             !oc_gguf_writer_add_u32(w, "clip.vision.feed_forward_length", s->legacy ? 0u : 1536u, &e) &&
             !oc_gguf_writer_add_u32(w, "clip.vision.block_count", (uint32_t)s->layers, &e) &&
             !oc_gguf_writer_add_u32(w, "clip.vision.attention.head_count", (uint32_t)(k && k->heads ? k->heads : s->heads), &e) &&
             !oc_gguf_writer_add_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-6f, &e) &&
             !oc_gguf_writer_add_u32(w, "clip.vision.projection_dim", (uint32_t)s->proj, &e) &&
             !oc_gguf_writer_add_arr(w, "clip.vision.image_mean", OC_GGUF_F32, mean, 3, &e) &&
             !oc_gguf_writer_add_arr(w, "clip.vision.image_std", OC_GGUF_F32, stdv, 3, &e);
    if (ok && s->legacy) ok = !oc_gguf_writer_add_bool(w, "clip.has_qwen2vl_merger", 1, &e);
    if (ok && s->kind == OC_VISION_QWEN25VL && !(k && k->no_wa)) {
        ok = !oc_gguf_writer_add_u32(w, "clip.vision.n_wa_pattern", (uint32_t)s->n_wa, &e);
        if (ok && s->window_px != 112) ok = !oc_gguf_writer_add_u32(w, "clip.vision.window_size", (uint32_t)s->window_px, &e);
    }
    for (int i = 0; ok && i < m->n; i++) {
        const tt *t = &m->t[i];
        if (skip_tensor && !strcmp(skip_tensor, t->name)) continue;
        ok = !oc_gguf_writer_add_tensor(w, t->name, t->dtype, t->n_dims, t->ne, t->bytes, &e);
    }
    if (ok) ok = !oc_gguf_writer_write(w, TMP, &e);
    if (!ok) fprintf(stderr, "write_model: %s\n", e.message);
    oc_gguf_writer_close(w);
    return ok;
}

/* ---- the reference (double precision, grid order) ------------------------------------------------ */

static void ref_norm(double *y, const double *x, const float *w, const float *b, int d, double eps) {
    double mean = 0.0, var = 0.0;
    if (b) {
        for (int i = 0; i < d; i++) mean += x[i];
        mean /= d;
    }
    for (int i = 0; i < d; i++) var += (x[i] - mean) * (x[i] - mean);
    double r = 1.0 / sqrt(var / d + eps);
    for (int i = 0; i < d; i++) y[i] = (x[i] - mean) * r * w[i] + (b ? b[i] : 0.0);
}

static void ref_linear(double *y, const double *x, int n_tok, const float *w, const float *b, int n_in, int n_out) {
    for (int t = 0; t < n_tok; t++)
        for (int o = 0; o < n_out; o++) {
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < n_in; i++) s += (double)w[(size_t)o * n_in + i] * x[(size_t)t * n_in + i];
            y[(size_t)t * n_out + o] = s;
        }
}

/* (row, col) of merge-order patch p, and its Qwen2.5-VL window id */
static void ref_pos(int p, int gw, int *y, int *x) {
    int mw = gw / 2, mb = p / 4, sub = p % 4;
    *y = (mb / mw) * 2 + sub / 2;
    *x = (mb % mw) * 2 + sub % 2;
}

/* pat: [layers][heads] or NULL. Output [n/4][proj] row-major over the merged grid. */
static void ref_forward(const tmodel *m, const float *pix, int gh, int gw, const oc_head_pattern *pat, double *out,
                        double *embed /* [n][d] or NULL */) {
    const spec *s = &m->s;
    int n = gh * gw, d = s->hidden, f = s->ffn, H = s->heads, hd = d / H, rms = s->kind == OC_VISION_QWEN25VL;
    double *X = calloc((size_t)n * d, sizeof(double)), *Hn = calloc((size_t)n * d, sizeof(double));
    double *Q = calloc((size_t)n * d, sizeof(double)), *K = calloc((size_t)n * d, sizeof(double));
    double *V = calloc((size_t)n * d, sizeof(double)), *A = calloc((size_t)n * d, sizeof(double));
    double *F1 = calloc((size_t)n * f, sizeof(double)), *F2 = calloc((size_t)n * f, sizeof(double));
    double *P = calloc((size_t)n * 1176, sizeof(double)), *sc = calloc((size_t)n, sizeof(double));
    /* patch embedding: Conv3d over (C, T, 14, 14) = the two kernels' slices */
    const float *k0 = tv(m, "v.patch_embd.weight"), *k1 = tv(m, "v.patch_embd.weight.1");
    for (int p = 0; p < n; p++)
        for (int o = 0; o < d; o++) {
            double acc = 0.0;
            for (int c = 0; c < 3; c++)
                for (int t = 0; t < 2; t++)
                    for (int i = 0; i < 196; i++)
                        acc += (double)(t ? k1 : k0)[((size_t)o * 3 + c) * 196 + i] * pix[(size_t)p * 1176 + c * 392 + t * 196 + i];
            X[(size_t)p * d + o] = acc;
        }
    if (embed) memcpy(embed, X, (size_t)n * d * sizeof(double));
    int ws = s->kind == OC_VISION_QWEN25VL ? s->window_px / 28 : 1;
    char nm[96];
#define T(x) (snprintf(nm, sizeof nm, "v.blk.%d.%s", il, x), tv(m, nm))
    for (int il = 0; il < s->layers; il++) {
        int full = !rms || (il + 1) % s->n_wa == 0;
        for (int p = 0; p < n; p++) ref_norm(Hn + (size_t)p * d, X + (size_t)p * d, T("ln1.weight"), rms ? NULL : T("ln1.bias"), d, 1e-6);
        ref_linear(Q, Hn, n, T("attn_q.weight"), T("attn_q.bias"), d, d);
        ref_linear(K, Hn, n, T("attn_k.weight"), T("attn_k.bias"), d, d);
        ref_linear(V, Hn, n, T("attn_v.weight"), T("attn_v.bias"), d, d);
        /* rotary: pair (i, i + hd/2); i < hd/4 turns with the row, the rest with the column */
        for (int p = 0; p < n; p++) {
            int py, px;
            ref_pos(p, gw, &py, &px);
            for (int h = 0; h < H; h++)
                for (int i = 0; i < hd / 2; i++) {
                    int fi = i % (hd / 4);
                    double inv = 1.0 / pow(10000.0, 2.0 * fi / (hd / 2.0));
                    double ang = (i < hd / 4 ? py : px) * inv, c = cos(ang), sn = sin(ang);
                    double *vs[2] = { Q, K };
                    for (int w = 0; w < 2; w++) {
                        double *a = vs[w] + (size_t)p * d + h * hd + i, *b = a + hd / 2;
                        double a0 = *a, b0 = *b;
                        *a = a0 * c - b0 * sn;
                        *b = b0 * c + a0 * sn;
                    }
                }
        }
        for (int h = 0; h < H; h++)
            for (int i = 0; i < n; i++) {
                int yi, xi;
                ref_pos(i, gw, &yi, &xi);
                double mx = -INFINITY;
                for (int j = 0; j < n; j++) {
                    int yj, xj;
                    ref_pos(j, gw, &yj, &xj);
                    int keep = full || (yi / 2 / ws == yj / 2 / ws && xi / 2 / ws == xj / 2 / ws);
                    const oc_head_pattern *pt = pat ? &pat[il * H + h] : NULL;
                    if (pt && pt->kind == OC_PATTERN_A_SHAPE) keep = keep && (j < pt->n_sink || (j <= i && j > i - pt->n_local));
                    if (!keep) { sc[j] = -INFINITY; continue; }
                    double dot = 0.0;
                    for (int e = 0; e < hd; e++) dot += Q[(size_t)i * d + h * hd + e] * K[(size_t)j * d + h * hd + e];
                    sc[j] = dot / sqrt((double)hd);
                    if (sc[j] > mx) mx = sc[j];
                }
                double sum = 0.0;
                for (int j = 0; j < n; j++) { sc[j] = sc[j] == -INFINITY ? 0.0 : exp(sc[j] - mx); sum += sc[j]; }
                for (int e = 0; e < hd; e++) {
                    double acc = 0.0;
                    for (int j = 0; j < n; j++) acc += sc[j] * V[(size_t)j * d + h * hd + e];
                    A[(size_t)i * d + h * hd + e] = acc / sum;
                }
            }
        ref_linear(Q, A, n, T("attn_out.weight"), T("attn_out.bias"), d, d);
        for (size_t i = 0; i < (size_t)n * d; i++) X[i] += Q[i];
        for (int p = 0; p < n; p++) ref_norm(Hn + (size_t)p * d, X + (size_t)p * d, T("ln2.weight"), rms ? NULL : T("ln2.bias"), d, 1e-6);
        const char *fc1 = s->legacy ? "ffn_down" : "ffn_up", *fc2 = s->legacy ? "ffn_up" : "ffn_down";
        char a1[32], a2[32], b1[32], b2[32];
        snprintf(a1, sizeof a1, "%s.weight", fc1); snprintf(b1, sizeof b1, "%s.bias", fc1);
        snprintf(a2, sizeof a2, "%s.weight", fc2); snprintf(b2, sizeof b2, "%s.bias", fc2);
        ref_linear(F1, Hn, n, T(a1), T(b1), d, f);
        if (rms) {
            ref_linear(F2, Hn, n, T("ffn_gate.weight"), T("ffn_gate.bias"), d, f);
            for (size_t i = 0; i < (size_t)n * f; i++) F1[i] *= F2[i] / (1.0 + exp(-F2[i]));
        } else {
            for (size_t i = 0; i < (size_t)n * f; i++) F1[i] = F1[i] / (1.0 + exp(-1.702 * F1[i]));
        }
        ref_linear(Q, F1, n, T(a2), T(b2), f, d);
        for (size_t i = 0; i < (size_t)n * d; i++) X[i] += Q[i];
    }
#undef T
    for (int p = 0; p < n; p++)
        ref_norm(Hn + (size_t)p * d, X + (size_t)p * d, tv(m, "v.post_ln.weight"), rms ? NULL : tv(m, "v.post_ln.bias"), d, 1e-6);
    ref_linear(P, Hn, n / 4, tv(m, "mm.0.weight"), tv(m, "mm.0.bias"), 4 * d, 4 * d);
    for (size_t i = 0; i < (size_t)n * d; i++) P[i] = 0.5 * P[i] * (1.0 + erf(P[i] / sqrt(2.0)));
    ref_linear(out, P, n / 4, tv(m, "mm.2.weight"), tv(m, "mm.2.bias"), 4 * d, s->proj);
    free(X); free(Hn); free(Q); free(K); free(V); free(A); free(F1); free(F2); free(P); free(sc);
}

/* ---- running the encoder ------------------------------------------------------------------------- */

typedef struct loaded {
    oc_gguf *g;
    oc_vision_model *m;
} loaded;

static oc_status load_tmp(loaded *L, oc_error *e) {
    memset(L, 0, sizeof *L);
    oc_status s = oc_gguf_open(&L->g, TMP, NULL, e);
    if (s) return s;
    return oc_vision_model_load(&L->m, L->g, TMP, NULL, e);
}

static void unload(loaded *L) {
    oc_vision_model_free(L->m);
    oc_gguf_close(L->g);
    remove(TMP);
}

static float *random_pixels(int n, unsigned long long seed) {
    check_rng r = { seed };
    float *p = malloc((size_t)n * 1176 * sizeof(float));
    for (size_t i = 0; i < (size_t)n * 1176; i++) p[i] = check_rng_uniform(&r, -1.8f, 2.1f);
    return p;
}

static oc_isa best_isa(void) {
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    return oc_isa_best(&cpu);
}

/* Where an encode runs: engine < OC_ISA_COUNT is the CPU with that ISA, OC_ISA_COUNT is OpenCL.
 * g_opencl: the cases run on OpenCL alone (test_opencl_forward), else on every ISA that runs. */
#define ENGINE_OPENCL OC_ISA_COUNT
static int g_opencl;
static oc_backend_device *g_dev;   /* the one OpenCL device of test_opencl_forward */

static int engine_runs(int engine) {
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    return g_opencl ? engine == ENGINE_OPENCL : engine < OC_ISA_COUNT && oc_isa_runs((oc_isa)engine, &cpu);
}

/* 1 when the CPU engine's matmul table takes the BF16 path for matrices of dtype (F16 or BF16). */
static int engine_bf16(int engine, int32_t dtype) {
    if (engine >= OC_ISA_COUNT || (dtype != OC_DTYPE_F16 && dtype != OC_DTYPE_BF16)) return 0;
    const oc_matmul_kernels *k = oc_matmul_kernels_for((oc_isa)engine);
    return k && oc_matmul_kernels_bf16(k) == 2;
}

static const char *engine_name(int engine) { return engine == ENGINE_OPENCL ? "opencl" : oc_isa_name((oc_isa)engine); }

static oc_backend_spec engine_spec(int engine, oc_pool *pool) {
    oc_backend_spec bs = { engine == ENGINE_OPENCL ? OC_BACKEND_KIND_OPENCL : OC_BACKEND_KIND_CPU, check_opencl_device(),
                           pool, engine == ENGINE_OPENCL ? OC_ISA_SCALAR : (oc_isa)engine,
                           engine == ENGINE_OPENCL ? g_dev : NULL };
    return bs;
}

typedef struct embed_capture {
    float *x;   /* [n][d] after the patch embedding */
    int got;
} embed_capture;

static void capture_embed(void *user, int32_t layer, const float *x, int32_t n_tokens, int32_t hidden) {
    embed_capture *c = user;
    if (layer == -1 && c->x) {
        memcpy(c->x, x, (size_t)n_tokens * (size_t)hidden * sizeof(float));
        c->got = 1;
    }
}

/* The encode again, into a buffer of another backend instance on the same device (as an oc_context
 * on a device hands the image embeddings to its text graph, never through the host), 2 rows in:
 * read back, the rows equal out bit for bit; 3 rows in they do not fit and the encode refuses. */
static oc_status encode_to_other(oc_vision_ctx *ctx, const oc_vision_hparams *hp, const float *pix, int gh, int gw,
                                 const oc_stack_plan *plan, const oc_backend_spec *bs, const float *out, oc_error *e) {
    size_t n_out = (size_t)(gh * gw / 4) * (size_t)hp->proj_dim, skip = 2 * (size_t)hp->proj_dim;
    oc_backend_limits lim = { 128, 8, { 8, 16, 4, 2, 8 }, 0, 0, 0 };   /* small: alloc and read only */
    oc_backend *be = NULL;
    oc_bt t;
    memset(&t, 0, sizeof t);
    float *back = malloc(n_out * sizeof(float));
    oc_status s = back ? oc_backend_open(&be, bs, &lim, NULL, e) : OC_ERR_NOMEM;
    if (!s) s = be->ops->alloc(be, &t, (skip + n_out) * sizeof(float), 0, e);
    if (!s) s = oc_vision_encode_to(ctx, pix, gh, gw, plan, &t, 2, NULL, e);
    if (!s) s = be->ops->read(be, &t, skip * sizeof(float), back, n_out * sizeof(float), e);
    if (!s) {
        CHECKF(!memcmp(back, out, n_out * sizeof(float)), "encode_to %dx%d: rows differ from encode", gh, gw);
        oc_error e3;
        CHECK(oc_vision_encode_to(ctx, pix, gh, gw, plan, &t, 3, NULL, &e3) == OC_ERR_INVALID);
    }
    if (be) be->ops->free(be, &t);
    oc_backend_close(be);
    free(back);
    return s;
}

/* Encode with a pool of n_threads threads into out (poisoned first); then encode_to_other. */
static oc_status encode(const oc_vision_model *m, const float *pix, int gh, int gw, const oc_stack_plan *plan, int n_threads,
                        int engine, float *out, embed_capture *cap, oc_error *e) {
    oc_pool *pool = NULL;
    oc_vision_ctx *ctx = NULL;
    const oc_vision_hparams *hp = oc_vision_model_hparams(m);
    oc_status s = oc_pool_open(&pool, n_threads, NULL, e);
    oc_backend_spec bs = engine_spec(engine, pool);
    if (!s) s = oc_vision_ctx_open_backend(&ctx, m, gh * gw, &bs, NULL, e);
    if (!s) {
        if (cap) oc_vision_ctx_set_debug(ctx, capture_embed, cap);
        check_poison_f32(out, (size_t)(gh * gw / 4) * (size_t)hp->proj_dim);
        s = oc_vision_encode(ctx, pix, gh, gw, plan, out, NULL, e);
        if (!s) s = encode_to_other(ctx, hp, pix, gh, gw, plan, &bs, out, e);
    }
    oc_vision_ctx_close(ctx);
    oc_pool_close(pool);
    return s;
}

/* Build, write, load, encode with 1 and 3 threads on every ISA that runs (or on OpenCL); compare
 * with the reference. Returns the worst relative error. */
static double run_forward_case(const spec *sp, int gh, int gw, const oc_head_pattern *pat, double tol, const char *what) {
    tmodel tm;
    build_model(&tm, sp, 1000u + (unsigned)gh * 31u + (unsigned)gw);
    double worst = 0.0;
    if (!write_model(&tm, NULL, NULL)) { check_fail_at(__FILE__, __LINE__, "%s: write failed", what); free_model(&tm); return INFINITY; }
    loaded L;
    oc_error e;
    if (load_tmp(&L, &e)) { check_fail_at(__FILE__, __LINE__, "%s: load: %s", what, e.message); unload(&L); free_model(&tm); return INFINITY; }
    const oc_vision_hparams *hp = oc_vision_model_hparams(L.m);
    CHECK(hp->ffn == sp->ffn && hp->proj_dim == sp->proj && hp->head_dim == sp->hidden / sp->heads);
    CHECK(oc_vision_model_ffn_swapped(L.m) == sp->legacy);
    int n = gh * gw, no = n / 4 * sp->proj;
    float *pix = random_pixels(n, 77u + (unsigned)n);
    double *ref = malloc((size_t)no * sizeof(double)), *ref_embed = malloc((size_t)n * sp->hidden * sizeof(double));
    ref_forward(&tm, pix, gh, gw, pat, ref, ref_embed);
    oc_stack_plan plan;
    memset(&plan, 0, sizeof plan);
    if (pat) {
        plan.shape.n_layers = sp->layers;
        plan.shape.n_heads = plan.shape.n_kv_heads = sp->heads;
        plan.shape.head_dim = sp->hidden / sp->heads;
        plan.heads = (oc_head_pattern *)pat;
    }
    float *out1 = malloc((size_t)no * sizeof(float)), *out3 = malloc((size_t)no * sizeof(float));
    float *emb = malloc((size_t)n * sp->hidden * sizeof(float));
    for (int eng = 0; eng <= ENGINE_OPENCL; eng++) {
        if (!engine_runs(eng)) continue;
        embed_capture cap = { emb, 0 };
        oc_status s1 = encode(L.m, pix, gh, gw, pat ? &plan : NULL, 1, eng, out1, &cap, &e);
        CHECKF(s1 == OC_OK, "%s %s: %s", what, engine_name(eng), e.message);
        oc_status s3 = encode(L.m, pix, gh, gw, pat ? &plan : NULL, 3, eng, out3, NULL, &e);
        CHECKF(s3 == OC_OK, "%s %s: %s", what, engine_name(eng), e.message);
        if (s1 || s3) continue;
        double rel = check_rel_err_f32(out1, ref, (size_t)no), etol = tol;
        if (engine_bf16(eng, sp->wdtype)) etol = OC_MAX(tol, BF16_TOL);
        CHECKF(rel <= etol, "%s %s: rel err %.3g > %.3g", what, engine_name(eng), rel, etol);
        CHECKF(memcmp(out1, out3, (size_t)no * sizeof(float)) == 0, "%s %s: 1 and 3 threads differ", what,
               engine_name(eng));
        if (sp->kind == OC_VISION_QWEN2VL) {   /* grid order: the embedding can be compared directly */
            CHECK(cap.got);
            double re = check_rel_err_f32(emb, ref_embed, (size_t)n * sp->hidden);
            CHECKF(re <= etol, "%s %s: patch embedding rel err %.3g", what, engine_name(eng), re);
        }
        if (rel > worst) worst = rel;
    }
    free(out1); free(out3); free(emb); free(ref); free(ref_embed); free(pix);
    unload(&L);
    free_model(&tm);
    return worst;
}

static const spec S2 = { OC_VISION_QWEN2VL, 3, 32, 2, 80, 24, 0, 112, OC_DTYPE_F16, OC_DTYPE_F16, OC_DTYPE_F16, 0 };
static const spec S25 = { OC_VISION_QWEN25VL, 3, 32, 2, 56, 40, 2, 112, OC_DTYPE_F32, OC_DTYPE_F32, OC_DTYPE_F32, 0 };

static void test_qwen2vl_forward(void) {
    double r = run_forward_case(&S2, 6, 8, NULL, TOL, "qwen2vl f16");
    printf("  qwen2vl 6x8 f16: rel err %.3g\n", r);
    spec s = S2;
    s.wdtype = OC_DTYPE_BF16;
    s.pdtype0 = OC_DTYPE_F16;   /* mixed patch kernel types: widened to f32 */
    s.pdtype1 = OC_DTYPE_BF16;
    s.heads = 4;                /* head_dim 8: 2 rotary frequencies per axis */
    run_forward_case(&s, 4, 10, NULL, TOL, "qwen2vl bf16");
}

static void test_qwen25vl_forward(void) {
    /* 5x6 merged tokens, 4x4 windows: partial windows at the right and bottom */
    double r = run_forward_case(&S25, 10, 12, NULL, TOL, "qwen25vl 112px");
    printf("  qwen25vl 10x12 window 112px: rel err %.3g\n", r);
    spec s = S25;
    s.window_px = 56;   /* 2x2 merged windows, from the optional key */
    s.n_wa = 3;
    s.layers = 4;
    s.wdtype = OC_DTYPE_F16;
    s.pdtype0 = s.pdtype1 = OC_DTYPE_BF16;
    run_forward_case(&s, 6, 10, NULL, TOL, "qwen25vl 56px");
    run_forward_case(&s, 2, 2, NULL, TOL, "qwen25vl one token");
}

static void test_legacy_file(void) {
    spec s = S2;
    s.legacy = 1;   /* fc1/fc2 under swapped names, dummy position_embd, feed_forward_length 0 */
    run_forward_case(&s, 4, 6, NULL, TOL, "qwen2vl legacy");
    s.ffn = s.hidden;   /* square MLP: shapes cannot tell; the legacy markers must */
    run_forward_case(&s, 4, 4, NULL, TOL, "qwen2vl legacy square");
    s = S2;
    s.ffn = s.hidden;
    run_forward_case(&s, 4, 4, NULL, TOL, "qwen2vl square");
}

static void test_quantized_weights(void) {
    spec s = S2;
    s.wdtype = OC_DTYPE_Q8_0;
    s.ffn = 64;   /* Q8_0 rows: multiples of 32 */
    /* the int8 path rounds activations to 8 bits per block of 32 */
    double r = run_forward_case(&s, 4, 4, NULL, 3e-2, "qwen2vl q8_0");
    printf("  qwen2vl q8_0: rel err %.3g\n", r);
}

static void test_plan_a_shape(void) {
    oc_head_pattern pat[3 * 2];
    memset(pat, 0, sizeof pat);
    pat[1 * 2 + 0] = (oc_head_pattern){ .kind = OC_PATTERN_A_SHAPE, .n_sink = 3, .n_local = 10 };
    pat[2 * 2 + 1] = (oc_head_pattern){ .kind = OC_PATTERN_A_SHAPE, .n_sink = 1, .n_local = 4 };
    run_forward_case(&S2, 6, 8, pat, TOL, "qwen2vl a-shape");
}

static void test_window_order(void) {
    /* HF get_window_index literally: pad to whole windows with -100, read windows, drop padding,
     * unique_consecutive on the cumulative lengths */
    for (int mh = 1; mh <= 9; mh++)
        for (int mw = 1; mw <= 9; mw++)
            for (int win = 1; win <= 5; win++) {
                int ph = win - mh % win, pw = win - mw % win, H = mh + ph, W = mw + pw;
                int idx[14 * 14], ord[81], cu[200], n_cu = 1, k = 0;
                cu[0] = 0;
                for (int y = 0; y < H; y++)
                    for (int x = 0; x < W; x++) idx[y * W + x] = y < mh && x < mw ? y * mw + x : -100;
                for (int wy = 0; wy < H / win; wy++)
                    for (int wx = 0; wx < W / win; wx++) {
                        int cnt = 0;
                        for (int iy = 0; iy < win; iy++)
                            for (int ix = 0; ix < win; ix++) {
                                int v = idx[(wy * win + iy) * W + wx * win + ix];
                                if (v != -100) { ord[k++] = v; cnt++; }
                            }
                        int c = cu[n_cu - 1] + cnt * 4;
                        if (c != cu[n_cu - 1]) cu[n_cu++] = c;
                    }
                int32_t order[81];
                oc_token_span win_spans[81];
                int32_t nw = oc_vision_window_order(mh, mw, win, 4, order, win_spans);
                CHECKF(nw == n_cu - 1, "%dx%d win %d: %d windows, HF %d", mh, mw, win, (int)nw, n_cu - 1);
                for (int i = 0; i < mh * mw; i++) CHECKF(order[i] == ord[i], "%dx%d win %d: order[%d]", mh, mw, win, i);
                for (int i = 0; i < nw && i < n_cu - 1; i++)
                    CHECK(win_spans[i].start == cu[i] && win_spans[i].end == cu[i + 1]);
            }
}

/* ---- bad files and arguments --------------------------------------------------------------------- */

static void expect_load_error(tmodel *tm, const keys *k, const char *skip, oc_status want, const char *needle) {
    REQUIRE(write_model(tm, k, skip));
    loaded L;
    oc_error e;
    memset(&e, 0, sizeof e);
    oc_status s = load_tmp(&L, &e);
    CHECKF(s == want, "want %s, got %s: %s", oc_status_str(want), oc_status_str(s), e.message);
    CHECKF(L.m == NULL, "model returned on failure");
    CHECKF(strstr(e.message, needle) != NULL, "message '%s' lacks '%s'", e.message, needle);
    CHECKF(strstr(e.message, TMP) != NULL, "message '%s' lacks the file name", e.message);
    CHECK(strchr(e.message, '\n') == NULL);
    unload(&L);
}

static void test_bad_files(void) {
    tmodel tm;
    build_model(&tm, &S2, 5);
    expect_load_error(&tm, NULL, "v.blk.1.attn_k.weight", OC_ERR_NOT_FOUND, "v.blk.1.attn_k.weight");
    expect_load_error(&tm, NULL, "v.patch_embd.weight.1", OC_ERR_NOT_FOUND, "v.patch_embd.weight.1");
    expect_load_error(&tm, NULL, "mm.2.bias", OC_ERR_NOT_FOUND, "mm.2.bias");
    expect_load_error(&tm, NULL, "v.post_ln.bias", OC_ERR_NOT_FOUND, "v.post_ln.bias");
    keys k = { "llava", 0, 0 };
    expect_load_error(&tm, &k, NULL, OC_ERR_UNSUPPORTED, "llava");
    k = (keys){ NULL, 0, 3 };   /* 32 / 3 */
    expect_load_error(&tm, &k, NULL, OC_ERR_FORMAT, "head_count");
    k = (keys){ NULL, 0, 16 };  /* head_dim 2 */
    expect_load_error(&tm, &k, NULL, OC_ERR_UNSUPPORTED, "head_dim");
    tt *t = find_t(&tm, "v.blk.2.attn_q.weight");
    t->ne[1] -= 1;
    expect_load_error(&tm, NULL, NULL, OC_ERR_FORMAT, "v.blk.2.attn_q.weight");
    t->ne[1] += 1;
    t = find_t(&tm, "v.blk.0.ln2.bias");
    t->dtype = OC_DTYPE_F16;
    expect_load_error(&tm, NULL, NULL, OC_ERR_TYPE, "v.blk.0.ln2.bias");
    t->dtype = OC_DTYPE_F32;
    t = find_t(&tm, "mm.0.weight");
    t->dtype = 3;   /* Q4_1: a real type the kernels do not take */
    expect_load_error(&tm, NULL, NULL, OC_ERR_TYPE, "mm.0.weight");
    t->dtype = OC_DTYPE_F16;
    t = find_t(&tm, "v.patch_embd.weight");
    t->ne[3] -= 1;
    expect_load_error(&tm, NULL, NULL, OC_ERR_FORMAT, "v.patch_embd.weight");
    t->ne[3] += 1;
    t = find_t(&tm, "v.blk.1.ffn_down.weight");   /* fc2 width disagrees with fc1 */
    t->ne[0] -= 2;
    expect_load_error(&tm, NULL, NULL, OC_ERR_FORMAT, "v.blk.1.ffn_down.weight");
    t->ne[0] += 2;
    free_model(&tm);
    build_model(&tm, &S25, 6);
    k = (keys){ NULL, 1, 0 };
    expect_load_error(&tm, &k, NULL, OC_ERR_NOT_FOUND, "n_wa_pattern");
    expect_load_error(&tm, NULL, "v.blk.0.ffn_gate.bias", OC_ERR_NOT_FOUND, "v.blk.0.ffn_gate.bias");
    free_model(&tm);
}

static void test_bad_arguments(void) {
    tmodel tm;
    build_model(&tm, &S25, 8);
    REQUIRE(write_model(&tm, NULL, NULL));
    loaded L;
    oc_error e;
    REQUIRE(load_tmp(&L, &e) == OC_OK);
    oc_vision_ctx *ctx = NULL;
    CHECK(oc_vision_ctx_bytes(L.m, 64, 2) > 0);
    CHECK(oc_vision_ctx_open(&ctx, L.m, 0, NULL, OC_ISA_SCALAR, NULL, &e) == OC_ERR_INVALID && !ctx);
    REQUIRE(oc_vision_ctx_open(&ctx, L.m, 64, NULL, best_isa(), NULL, &e) == OC_OK);
    float *pix = random_pixels(80, 1), out[20 * 40];
    CHECK(oc_vision_encode(ctx, pix, 3, 4, NULL, out, NULL, &e) == OC_ERR_INVALID);
    CHECK(oc_vision_encode(ctx, pix, 0, 4, NULL, out, NULL, &e) == OC_ERR_INVALID);
    CHECK(oc_vision_encode(ctx, pix, 8, 10, NULL, out, NULL, &e) == OC_ERR_RANGE);
    CHECK(oc_vision_encode(ctx, NULL, 4, 4, NULL, out, NULL, &e) == OC_ERR_INVALID);
    oc_head_pattern pat[3 * 2];
    memset(pat, 0, sizeof pat);
    oc_stack_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.shape = (oc_plan_shape){ 3, 2, 2, 16 };
    plan.heads = pat;
    /* the plan's rules and fit are checked once, at context open (test_plan.c test_check_fits) */
    oc_attn_stats st = { 0, 0, 0 };
    CHECK(oc_vision_encode(ctx, pix, 4, 4, &plan, out, &st, &e) == OC_OK);
    CHECK(st.flops_kept > 0);
    oc_vision_ctx_close(ctx);
    free(pix);
    unload(&L);
    free_model(&tm);
}

/* ---- parity with transformers (tests/data/models, when present) ---------------------------------- */

typedef struct block_capture {
    const oc_safetensors *st;
    const oc_vision_hparams *hp;
    int32_t grid_w;
    double worst;
    int n_checked;
    double tol;
} block_capture;

static void capture_blocks(void *user, int32_t layer, const float *x, int32_t n_tokens, int32_t hidden) {
    block_capture *c = user;
    char name[64];
    if (layer < 0) snprintf(name, sizeof name, "vision.patch_embed.0");
    else snprintf(name, sizeof name, "vision.block.0.%d", (int)layer);
    const oc_st_tensor *t = oc_safetensors_find(c->st, name);
    if (!t || t->dtype != OC_ST_F32 || t->n_elements != (uint64_t)n_tokens * (uint64_t)hidden) return;
    size_t n = (size_t)t->n_elements;
    double *ref = malloc(n * sizeof(double));
    int32_t *order = malloc((size_t)n_tokens * sizeof(int32_t));
    oc_token_span *spans = malloc((size_t)n_tokens * sizeof(oc_token_span));
    int32_t mw = c->grid_w / 2, mh = n_tokens / 4 / mw;
    /* HF records the embedding before its window permutation, the blocks after it */
    int permute = layer < 0 && c->hp->kind == OC_VISION_QWEN25VL;
    if (permute) oc_vision_window_order(mh, mw, c->hp->window_size_px / 28, 4, order, spans);
    for (size_t i = 0; i < n; i++) {
        size_t row = i / (size_t)hidden, col = i % (size_t)hidden;
        size_t src = permute ? ((size_t)order[row / 4] * 4 + row % 4) * (size_t)hidden + col : i;
        float v;
        memcpy(&v, (const char *)t->data + src * 4, 4);
        ref[i] = v;
    }
    double r = check_rel_err_f32(x, ref, n);
    CHECKF(r <= c->tol, "%s: rel err %.3g > %.3g", name, r, c->tol);
    if (r > c->worst) c->worst = r;
    c->n_checked++;
    free(ref); free(order); free(spans);
}

static void parity_one(const char *dir, const char *file) {
    char path[256], refp[256];
    snprintf(path, sizeof path, "tests/data/models/%s/%s", dir, file);
    snprintf(refp, sizeof refp, "tests/data/models/%s/reference.safetensors", dir);
    oc_gguf *g = NULL;
    oc_safetensors *st = NULL;
    oc_vision_model *m = NULL;
    oc_error e;
    if (oc_gguf_open(&g, path, NULL, &e) || oc_safetensors_open(&st, refp, NULL, &e) ||
        oc_vision_model_load(&m, g, path, NULL, &e)) {
        check_fail_at(__FILE__, __LINE__, "%s", e.message);
        goto done;
    }
    CHECKF(oc_vision_model_ffn_swapped(m) == (strstr(file, "legacy") != NULL), "%s: ffn swap detection", path);
    const oc_st_tensor *thw = oc_safetensors_find(st, "image_grid_thw");
    REQUIREF(thw && thw->n_elements == 6 && (thw->dtype == OC_ST_I32 || thw->dtype == OC_ST_I64), "image_grid_thw");
    for (int img = 0; img < 2; img++) {
        int64_t gt = 0, gh = 0, gw = 0;
        for (int c = 0; c < 3; c++) {
            int64_t v = 0;
            if (thw->dtype == OC_ST_I32) { int32_t v32; memcpy(&v32, (const char *)thw->data + (img * 3 + c) * 4, 4); v = v32; }
            else memcpy(&v, (const char *)thw->data + (img * 3 + c) * 8, 8);
            if (c == 0) gt = v; else if (c == 1) gh = v; else gw = v;
        }
        char pn[32], en[32];
        snprintf(pn, sizeof pn, "pixel_values.%d", img);
        snprintf(en, sizeof en, "image_embeds.%d", img);
        const oc_st_tensor *pv = oc_safetensors_find(st, pn), *ie = oc_safetensors_find(st, en);
        REQUIREF(gt == 1 && pv && ie && pv->dtype == OC_ST_F32 && ie->dtype == OC_ST_F32, "%s: %s/%s", dir, pn, en);
        int64_t n = gh * gw;
        const oc_vision_hparams *hp = oc_vision_model_hparams(m);
        REQUIREF(pv->n_elements == (uint64_t)(n * 1176) && ie->n_elements == (uint64_t)(n / 4 * hp->proj_dim), "%s: shapes", dir);
        float *pix = malloc((size_t)pv->n_elements * sizeof(float)), *out = malloc((size_t)ie->n_elements * sizeof(float));
        double *ref = malloc((size_t)ie->n_elements * sizeof(double));
        memcpy(pix, pv->data, (size_t)pv->n_elements * sizeof(float));
        for (size_t i = 0; i < (size_t)ie->n_elements; i++) {
            float v;
            memcpy(&v, (const char *)ie->data + i * 4, 4);
            ref[i] = v;
        }
        oc_pool *pool = NULL;
        oc_vision_ctx *ctx = NULL;
        /* the fixtures' matrices are F16 */
        int bf16 = !g_opencl && engine_bf16((int)best_isa(), OC_DTYPE_F16);
        double tol = bf16 ? BF16_PARITY_TOL : 1e-3;
        block_capture cap = { st, oc_vision_model_hparams(m), (int32_t)gw, 0.0, 0, tol };
        oc_backend_spec bs = engine_spec(g_opencl ? ENGINE_OPENCL : (int)best_isa(), NULL);
        oc_status so = oc_pool_open(&pool, 2, NULL, &e);
        bs.pool = pool;
        if (so || oc_vision_ctx_open_backend(&ctx, m, (int32_t)n, &bs, NULL, &e)) {
            check_fail_at(__FILE__, __LINE__, "%s", e.message);
        } else {
            if (img == 0) oc_vision_ctx_set_debug(ctx, capture_blocks, &cap);
            check_poison_f32(out, (size_t)ie->n_elements);
            oc_status s = oc_vision_encode(ctx, pix, (int32_t)gh, (int32_t)gw, NULL, out, NULL, &e);
            CHECKF(s == OC_OK, "%s: %s", dir, e.message);
            double rel = check_rel_err_f32(out, ref, (size_t)ie->n_elements);
            printf("  parity %s/%s image %d (%lldx%lld patches, %s%s): rel err %.3g", dir, file, img, (long long)gh,
                   (long long)gw, g_opencl ? "opencl" : oc_isa_name(best_isa()), bf16 ? ", bf16 path" : "", rel);
            if (img == 0) printf(", worst of embedding + blocks %.3g over %d captures", cap.worst, cap.n_checked);
            printf("\n");
            CHECKF(rel <= tol, "%s/%s image %d: rel err %.3g > %.3g", dir, file, img, rel, tol);
        }
        oc_vision_ctx_close(ctx);
        oc_pool_close(pool);
        free(pix); free(out); free(ref);
    }
done:
    oc_vision_model_free(m);
    oc_safetensors_close(st);
    oc_gguf_close(g);
}

static void test_parity_hf(void) {
    FILE *f = fopen("tests/data/models/qwen2vl/mmproj.gguf", "rb");
    if (!f) { check_fail_at(__FILE__, __LINE__, "committed fixture tests/data/models/qwen2vl/mmproj.gguf is missing"); return; }
    fclose(f);
    parity_one("qwen2vl", "mmproj.gguf");
    parity_one("qwen2vl", "mmproj-legacy.gguf");
    parity_one("qwen25vl", "mmproj.gguf");
}

/* The forward cases and the transformers parity again, on OpenCL. */
static void test_opencl_forward(void) {
    const char *why = check_opencl_missing();
    if (why) {
        check_skip("%s", why);
        return;
    }
    oc_error e;
    REQUIREF(oc_backend_device_open(&g_dev, OC_BACKEND_KIND_OPENCL, check_opencl_device(), NULL, &e) == OC_OK, "%s",
             e.message);
    g_opencl = 1;
    test_qwen2vl_forward();
    test_qwen25vl_forward();
    test_legacy_file();
    test_quantized_weights();
    test_plan_a_shape();
    test_parity_hf();
    g_opencl = 0;
    oc_backend_device_close(g_dev);
    g_dev = NULL;
}

int main(void) {
    CHECK_RUN(test_window_order);
    CHECK_RUN(test_qwen2vl_forward);
    CHECK_RUN(test_qwen25vl_forward);
    CHECK_RUN(test_legacy_file);
    CHECK_RUN(test_quantized_weights);
    CHECK_RUN(test_plan_a_shape);
    CHECK_RUN(test_bad_files);
    CHECK_RUN(test_bad_arguments);
    CHECK_RUN(test_parity_hf);
    CHECK_RUN(test_opencl_forward);
    return check_finish();
}
