/* test_matmul.c: dequantizers, quantizers and matmul (every weight type x every ISA path this CPU
 * runs x float / int8 path) against a naive double-precision oracle built on the scalar dequantizers
 * (src/kernels/quant.c), plus thread-count determinism, strides, bias and argument errors. */
#include "check.h"
#include "core/dtype.h"
#include "core/f16.h"
#include "kernels/matmul_kern.h"
#include "core/pool.h"
#include "kernels/quant.h"

#include <stdint.h>

static const int32_t all_types[] = { OC_DTYPE_F32, OC_DTYPE_F16, OC_DTYPE_BF16, OC_DTYPE_Q8_0,
                                     OC_DTYPE_Q4_0, OC_DTYPE_Q4_K, OC_DTYPE_Q6_K };

/* ---- hand-checked blocks (layouts of docs/formats.md §1) ------------------------------- */

static void check_values(const char *what, const float *got, const int *idx, const float *want, int n) {
    for (int i = 0; i < n; i++)
        CHECKF(got[idx[i]] == want[i], "%s: x[%d] = %g, want %g", what, idx[i], (double)got[idx[i]], (double)want[i]);
}

static void test_dequant_by_hand(void) {
    float out[256];
    { /* f16: 1, -2, 1/3 rounded to half; bf16: 1, -3 */
        uint16_t h[3] = { 0x3c00, 0xc000, 0x3555 }, b[2] = { 0x3f80, 0xc040 };
        oc_dequant_f16(h, out, 3);
        CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0.333251953125f);
        oc_dequant_bf16(b, out, 2);
        CHECK(out[0] == 1.0f && out[1] == -3.0f);
    }
    { /* Q8_0: d = 0.5 */
        oc_block_q8_0 blk = { 0x3800, { 0 } };
        blk.qs[0] = -128; blk.qs[1] = 127; blk.qs[31] = -3;
        oc_dequant_q8_0(&blk, out, 32);
        int idx[] = { 0, 1, 2, 31 };
        float want[] = { -64.0f, 63.5f, 0.0f, -1.5f };
        check_values("q8_0", out, idx, want, 4);
    }
    { /* Q4_0: d = 2; qs[j] low nibble -> x[j], high nibble -> x[j+16]; value (nibble - 8) * d */
        oc_block_q4_0 blk = { 0x4000, { 0 } };
        memset(blk.qs, 0x88, sizeof blk.qs);
        blk.qs[0] = 0x3A;    /* x[0] = (10-8)*2 = 4, x[16] = (3-8)*2 = -10 */
        blk.qs[15] = 0xF0;   /* x[15] = (0-8)*2 = -16, x[31] = (15-8)*2 = 14 */
        oc_dequant_q4_0(&blk, out, 32);
        int idx[] = { 0, 16, 15, 31, 1, 17 };
        float want[] = { 4.0f, -10.0f, -16.0f, 14.0f, 0.0f, 0.0f };
        check_values("q4_0", out, idx, want, 6);
    }
    { /* Q4_K: d = 1, dmin = 0.5. Sub-block (scale, min): 0:(1,2) 1:(3,0) 4:(37,19) 7:(63,40), others 0.
       * scales bytes: j<4 keep 6 bits in s[j] (scale) and s[j+4] (min); j>=4 keep the low 4 bits in
       * s[j+4] (scale low nibble, min high nibble) and the high 2 bits in the top of s[j-4] / s[j]. */
        oc_block_q4_k blk;
        memset(&blk, 0, sizeof blk);
        blk.d = 0x3c00;
        blk.dmin = 0x3800;
        const uint8_t s[12] = { 0x81, 0x03, 0x00, 0xC0, 0x42, 0x00, 0x00, 0x80, 0x35, 0x00, 0x00, 0x8F };
        memcpy(blk.scales, s, 12);
        for (int j = 0; j < 8; j++) {
            int sc, m;
            oc_q4_k_scale_min(blk.scales, j, &sc, &m);
            static const int want_sc[8] = { 1, 3, 0, 0, 37, 0, 0, 63 }, want_m[8] = { 2, 0, 0, 0, 19, 0, 0, 40 };
            CHECKF(sc == want_sc[j] && m == want_m[j], "q4_k sub-block %d: (%d, %d)", j, sc, m);
        }
        blk.qs[0] = 0x7A;        /* group 0: x[0] = 1*1*10 - 0.5*2 = 9; x[32] = 1*3*7 - 0 = 21 */
        blk.qs[64 + 5] = 0x0C;   /* group 2: x[133] = 37*12 - 0.5*19 = 434.5; x[165] (sub-block 5) = 0 */
        blk.qs[127] = 0xF0;      /* group 3: x[223] (sub-block 6) = 0; x[255] = 63*15 - 0.5*40 = 925 */
        oc_dequant_q4_k(&blk, out, 256);
        int idx[] = { 0, 32, 133, 165, 223, 255, 1, 129, 254 };
        float want[] = { 9.0f, 21.0f, 434.5f, 0.0f, 0.0f, 925.0f, -1.0f, -9.5f, -20.0f };
        check_values("q4_k", out, idx, want, 9);
    }
    { /* Q6_K: d = 0.5 (last). y[l] uses ql[l] low | qh[l] bits 0-1, y[l+32] ql[l+32] low | bits 2-3,
       * y[l+64] ql[l] high | bits 4-5, y[l+96] ql[l+32] high | bits 6-7; scale sc[l/16 + 0,2,4,6];
       * the second 128 use ql+64, qh+32, sc+8. */
        oc_block_q6_k blk;
        memset(&blk, 0, sizeof blk);
        blk.d = 0x3800;
        blk.scales[0] = 2; blk.scales[1] = 1; blk.scales[2] = -3; blk.scales[4] = 5; blk.scales[6] = 7;
        blk.scales[8] = -1; blk.scales[15] = 4;
        blk.ql[0] = 0x21;
        blk.qh[0] = 0xE4;        /* 11 10 01 00 */
        blk.ql[127] = 0xF0;
        blk.qh[63] = 0xC0;
        oc_dequant_q6_k(&blk, out, 256);
        /* y[0]: q=1 -> 0.5*2*(1-32) = -31; y[32]: q=16 -> 0.5*-3*(16-32) = 24; y[64]: q=2|32=34 -> 0.5*5*2 = 5;
         * y[96]: q=48 -> 0.5*7*16 = 56; y[1]: 0.5*2*-32 = -32; y[16]: 0.5*1*-32 = -16;
         * y[128]: 0.5*-1*-32 = 16; y[255]: q = 15|48 = 63 -> 0.5*sc[15]=4 *31 = 62; y[191]: sc[11]=0 -> 0 */
        int idx[] = { 0, 32, 64, 96, 1, 16, 128, 255, 191 };
        float want[] = { -31.0f, 24.0f, 5.0f, 56.0f, -32.0f, -16.0f, 16.0f, 62.0f, 0.0f };
        check_values("q6_k", out, idx, want, 9);
    }
}

/* ---- quantizers ------------------------------------------------------------------------------- */

static void test_quantize_roundtrip(void) {
    check_rng r = { 0x9e3779b97f4a7c15ULL };
    enum { N = 32 * 64 };
    static float x[N], back[N];
    static oc_block_q8_0 q8[N / 32];
    static oc_block_q4_0 q4[N / 32];
    for (int i = 0; i < N; i++) x[i] = check_rng_uniform(&r, -1, 1) * (i % 96 < 32 ? 100.0f : 1.0f);
    x[5] = 0;
    for (int i = 32; i < 64; i++) x[i] = 0;   /* an all-zero block: d = 0, no division by zero */
    oc_quantize_q8_0(x, q8, N);
    oc_dequant_q8_0(q8, back, N);
    for (int b = 0; b < N / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        /* q = round(x/d) is within d/2 of x/d; storing d as f16 moves q*d by at most 127*d*2^-11 */
        double bound = amax / 127.0 * (0.5 + 127.0 / 2048.0) + 1e-30;
        for (int j = 0; j < 32; j++)
            CHECKF(fabs((double)back[b * 32 + j] - x[b * 32 + j]) <= bound, "q8_0 block %d elem %d: %g -> %g", b, j,
                   (double)x[b * 32 + j], (double)back[b * 32 + j]);
    }
    oc_quantize_q4_0(x, q4, N);
    oc_dequant_q4_0(q4, back, N);
    for (int b = 0; b < N / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        /* |d| = amax/8. Values round to the nearest grid point (error <= |d|/2) except those at x/d in
         * (7.5, 8], clamped to 7 (error <= |d|); f16 storage of d adds at most 8*|d|*2^-11. */
        double d = amax / 8.0, bound = d * (1.0 + 8.0 / 2048.0) + 1e-30;
        for (int j = 0; j < 32; j++)
            CHECKF(fabs((double)back[b * 32 + j] - x[b * 32 + j]) <= bound, "q4_0 block %d elem %d: %g -> %g", b, j,
                   (double)x[b * 32 + j], (double)back[b * 32 + j]);
    }
    /* llama.cpp's reference rounding on a hand-made block: x = j - 16, amax 16 at j = 0 (value -16).
     * Q8_0: d = 16/127, q = round((j-16) * 127/16), e.g. j=1: round(-119.0625) = -119, j=31: 119.0625 -> 119.
     * Q4_0: max = -16, d = 2, q = min(15, (int)((j-16)/2 + 8.5)): j=0 -> 0, j=1 -> 1 (0.5+... = 1.0),
     *       j=17 -> (int)9.0 = 9, j=31 -> (int)16.0 = 16 -> 15. */
    float h[32];
    for (int j = 0; j < 32; j++) h[j] = (float)(j - 16);
    oc_quantize_q8_0(h, q8, 32);
    CHECK(q8[0].qs[0] == -127 && q8[0].qs[1] == -119 && q8[0].qs[16] == 0 && q8[0].qs[31] == 119);
    CHECK(q8[0].d == oc_f32_to_f16(16.0f / 127.0f));
    oc_quantize_q4_0(h, q4, 32);
    CHECK(q4[0].d == oc_f32_to_f16(2.0f));
    CHECK((q4[0].qs[0] & 0xF) == 0 && (q4[0].qs[1] & 0xF) == 1 && (q4[0].qs[1] >> 4) == 9 && (q4[0].qs[15] >> 4) == 15);
}

/* ---- random weights and the oracle ------------------------------------------------------------ */

typedef struct test_w {
    oc_weight w;
    unsigned char *bytes;
    size_t n_bytes;
    double *deq;      /* n_out x n_in, from the scalar dequantizer */
} test_w;

static uint16_t small_f16(check_rng *r) {
    float v = check_rng_uniform(r, 0.002f, 0.05f);
    return oc_f32_to_f16(check_rng_u64(r) & 1 ? -v : v);
}

/* Random rows: float types uniform in [-1, 1]; quantized types random bytes for qs and scales, with
 * small finite f16 d / dmin. row_pad extra bytes (a multiple of 4, keeping every type aligned)
 * between rows test row_bytes > the packed size.
 * The buffer is exactly n_out * row_bytes long, so ASan catches reads past the last row. */
static int make_weight(test_w *t, int32_t dtype, int64_t n_in, int64_t n_out, size_t row_pad, check_rng *r) {
    memset(t, 0, sizeof *t);
    size_t rb = (size_t)oc_dtype_row_bytes(dtype, (uint64_t)n_in) + row_pad;
    t->n_bytes = rb * (size_t)n_out;
    t->bytes = malloc(t->n_bytes);
    t->deq = malloc(sizeof(double) * (size_t)(n_in * n_out));
    float *tmp = malloc(sizeof(float) * (size_t)n_in);
    if (!t->bytes || !t->deq || !tmp) { free(tmp); return 0; }
    for (size_t i = 0; i < t->n_bytes; i++) t->bytes[i] = (unsigned char)check_rng_u64(r);
    for (int64_t o = 0; o < n_out; o++) {
        unsigned char *row = t->bytes + (size_t)o * rb;
        switch (dtype) {
        case OC_DTYPE_F32:
            for (int64_t i = 0; i < n_in; i++) { float v = check_rng_uniform(r, -1, 1); memcpy(row + 4 * i, &v, 4); }
            break;
        case OC_DTYPE_F16:
            for (int64_t i = 0; i < n_in; i++) ((uint16_t *)row)[i] = oc_f32_to_f16(check_rng_uniform(r, -1, 1));
            break;
        case OC_DTYPE_BF16:
            for (int64_t i = 0; i < n_in; i++) ((uint16_t *)row)[i] = oc_f32_to_bf16(check_rng_uniform(r, -1, 1));
            break;
        case OC_DTYPE_Q8_0:
            for (int64_t b = 0; b < n_in / 32; b++) ((oc_block_q8_0 *)row)[b].d = small_f16(r);
            break;
        case OC_DTYPE_Q4_0:
            for (int64_t b = 0; b < n_in / 32; b++) ((oc_block_q4_0 *)row)[b].d = small_f16(r);
            break;
        case OC_DTYPE_Q4_K:
            for (int64_t b = 0; b < n_in / 256; b++) {
                ((oc_block_q4_k *)row)[b].d = small_f16(r);
                ((oc_block_q4_k *)row)[b].dmin = small_f16(r);
            }
            break;
        case OC_DTYPE_Q6_K:
            for (int64_t b = 0; b < n_in / 256; b++) ((oc_block_q6_k *)row)[b].d = small_f16(r);
            break;
        }
        oc_dequant_ref(dtype)(row, tmp, n_in);
        for (int64_t i = 0; i < n_in; i++) t->deq[o * n_in + i] = tmp[i];
    }
    free(tmp);
    t->w = (oc_weight){ dtype, n_in, n_out, t->bytes, rb };
    return 1;
}

static void free_weight(test_w *t) {
    free(t->bytes);
    free(t->deq);
}

static float *make_x(int64_t n_tok, int64_t n_in, size_t x_stride, check_rng *r) {
    size_t n = n_tok ? (size_t)(n_tok - 1) * x_stride + (size_t)n_in : 1;   /* exact: ASan sees over-reads */
    float *x = malloc(n * sizeof(float));
    if (!x) return NULL;
    for (size_t i = 0; i < n; i++) {
        /* a few large values make the int8 path's per-block scales differ */
        x[i] = check_rng_uniform(r, -1, 1) * (check_rng_u64(r) % 23 == 0 ? 20.0f : 1.0f);
    }
    return x;
}

/* Checks y against the oracle with the per-element bound
 *   |y - y_ref| <= 2 (n_in + 2) 2^-24 S  +  Q
 * where S = sum_i |w_i| (|x_i| + e_i) + |bias|. Justification: every path forms the same products of
 * f32 values (the SIMD dequantizers are bitwise equal to the scalar ones, checked below) and sums
 * them in some order in f32 (with or without FMA); any order of n additions has error at most
 * gamma_n sum |terms| with gamma_n = n u / (1 - n u), u = 2^-24, plus one rounding per product when
 * not fused (+1) and the bias add (+1); the factor 2 covers 1/(1 - n u) and the int8 path's rounding
 * of d_w * d_x. The int8 path replaces x_i by xq_i = d q_i with |x_i - xq_i| <= d/2 (d = amax/127
 * over the xgroup elements that share d: 32, or a Q4_K super-block of 256; 0.51 d leaves room for
 * the f32 rounding of d and 127/amax), so there e_i = 0.51 d and Q = sum_i |w_i| 0.51 d; on the
 * float path (xgroup 0) e_i = 0 and Q = 0. NaN or Inf never passes. */
static int check_y(const char *what, const test_w *t, const float *x, size_t x_stride, const float *y,
                   size_t y_stride, int64_t n_tok, const float *bias, int64_t xgroup) {
    int64_t n_in = t->w.n_in, n_out = t->w.n_out;
    int bad = 0;
    double worst = 0;
    for (int64_t tt = 0; tt < n_tok; tt++) {
        const float *xt = x + (size_t)tt * x_stride;
        for (int64_t o = 0; o < n_out; o++) {
            const double *wr = t->deq + o * n_in;
            double ref = bias ? bias[o] : 0.0, s = bias ? fabs(bias[o]) : 0.0, q = 0;
            const int64_t step = xgroup ? xgroup : 32;
            for (int64_t b = 0; b < n_in; b += step) {
                int64_t e = OC_MIN(b + step, n_in);
                double amax = 0, wabs = 0;
                for (int64_t i = b; i < e; i++) {
                    ref += wr[i] * (double)xt[i];
                    s += fabs(wr[i]) * fabs((double)xt[i]);
                    amax = fmax(amax, fabs((double)xt[i]));
                    wabs += fabs(wr[i]);
                }
                if (xgroup) { q += wabs * 0.51 * amax / 127.0; s += wabs * 0.51 * amax / 127.0; }
            }
            double bound = 2.0 * (double)(n_in + 2) * 0x1p-24 * s + q + 1e-30;
            float got = y[(size_t)tt * y_stride + (size_t)o];
            double err = fabs((double)got - ref);
            if (!isfinite(got) || !(err <= bound)) {
                if (bad++ < 3)
                    check_fail_at(__FILE__, __LINE__, "%s: y[%lld][%lld] = %.9g, ref %.9g, err %.3g > bound %.3g", what,
                                  (long long)tt, (long long)o, (double)got, ref, err, bound);
            }
            if (bound > 0) worst = fmax(worst, err / bound);
        }
    }
    (void)worst;
    return bad == 0;
}

/* ---- matmul against the oracle ------------------------------------------------------------------ */

static const oc_matmul_kernels *tables[OC_ISA_COUNT];
static int n_tables_run;

static void load_tables(void) {
    for (int i = 0; i < OC_ISA_COUNT; i++) tables[i] = oc_matmul_kernels_for((oc_isa)i);
}

static int64_t pick(check_rng *r, const int64_t *v, int n) { return v[check_rng_int(r, 0, n - 1)]; }

static int64_t pick_n_in(check_rng *r, int32_t dtype) {
    static const int64_t any[] = { 1, 3, 8, 17, 37, 64, 273, 600 };
    static const int64_t b32[] = { 32, 96, 288, 544 };
    static const int64_t b256[] = { 256, 512, 768 };
    int be = oc_dtype_get(dtype)->block_elems;
    if (be == 1) return pick(r, any, 8);
    if (be == 32) return pick(r, b32, 4);
    return pick(r, b256, 3);
}

/* Whether a forced path must use the int8 kernels: Q8_0 / Q4_0 always (every table has them), Q4_K /
 * Q6_K for GEMV (n_tok < 4) where the table has their dot products. */
static int expect_int8(const oc_matmul_kernels *k, oc_matmul_path path, int32_t dtype, int64_t n_tok) {
    if (path != OC_MATMUL_INT8) return 0;
    if (dtype == OC_DTYPE_Q8_0 || dtype == OC_DTYPE_Q4_0) return 1;
    if (dtype == OC_DTYPE_Q4_K) return n_tok < 4 && k->gemv_q8x[OC_MM_I8_Q4_K] != NULL;
    if (dtype == OC_DTYPE_Q6_K) return n_tok < 4 && k->gemv_q8x[OC_MM_I8_Q6_K] != NULL;
    return 0;
}

static int check_y_bf16(const char *what, const test_w *t, const float *x, size_t xs, const float *y, size_t ys,
                        int64_t n_tok, const float *bias);

/* One random case: returns 0 on failure (already reported). */
static int run_case(const oc_matmul_kernels *k, oc_pool *pool, oc_matmul_path path, int32_t dtype, int64_t n_in,
                    int64_t n_out, int64_t n_tok, int use_bias, size_t x_pad, size_t y_pad, size_t row_pad, check_rng *r) {
    test_w t;
    char what[160];
    snprintf(what, sizeof what, "%s %s path %d n_in %lld n_out %lld n_tok %lld", oc_matmul_kernels_name(k),
             oc_dtype_name(dtype), (int)path, (long long)n_in, (long long)n_out, (long long)n_tok);
    if (!make_weight(&t, dtype, n_in, n_out, row_pad, r)) { check_fail_at(__FILE__, __LINE__, "out of memory"); return 0; }
    size_t xs = (size_t)n_in + x_pad, ys = (size_t)n_out + y_pad;
    float *x = make_x(n_tok, n_in, xs, r);
    size_t ny = (size_t)n_tok * ys;
    float *y = malloc(ny * sizeof(float)), *bias = malloc((size_t)n_out * sizeof(float));
    oc_matmul_ctx *ctx = NULL;
    oc_error err;
    int ok = 0;
    if (!x || !y || !bias) { check_fail_at(__FILE__, __LINE__, "out of memory"); goto done; }
    for (int64_t o = 0; o < n_out; o++) bias[o] = check_rng_uniform(r, -2, 2);
    check_poison_f32(y, ny);
    if (oc_matmul_ctx_open(&ctx, k, pool, n_in, n_tok, NULL, &err) != OC_OK) {
        check_fail_at(__FILE__, __LINE__, "%s: ctx_open: %s", what, err.message);
        goto done;
    }
    oc_matmul_ctx_set_path(ctx, path);
    if (oc_matmul(ctx, &t.w, x, xs, y, ys, n_tok, use_bias ? bias : NULL, &err) != OC_OK) {
        check_fail_at(__FILE__, __LINE__, "%s: %s", what, err.message);
        goto done;
    }
    int int8 = oc_matmul_uses_int8(ctx, &t.w, n_tok);
    if (path != OC_MATMUL_AUTO) CHECKF(int8 == expect_int8(k, path, dtype, n_tok), "%s: int8 path %d", what, int8);
    /* the int8 path rounds X with one scale per oc_mm_i8_x_group blocks of 32 */
    int i8_type = dtype == OC_DTYPE_Q8_0 ? OC_MM_I8_Q8_0 : dtype == OC_DTYPE_Q4_0 ? OC_MM_I8_Q4_0
                : dtype == OC_DTYPE_Q4_K ? OC_MM_I8_Q4_K : OC_MM_I8_Q6_K;
    /* AUTO takes the BF16 path for F16 / BF16 GEMMs where the CPU's BF16 dot products are fast:
     * its own stated bound (check_y_bf16) */
    if (oc_matmul_uses_bf16(ctx, &t.w, n_tok))
        ok = check_y_bf16(what, &t, x, xs, y, ys, n_tok, use_bias ? bias : NULL);
    else
        ok = check_y(what, &t, x, xs, y, ys, n_tok, use_bias ? bias : NULL, int8 ? 32 * oc_mm_i8_x_group(i8_type) : 0);
    /* the padding between Y rows is not ours: it must still hold the poison */
    for (int64_t tt = 0; tt < n_tok && ok; tt++)
        for (size_t j = (size_t)n_out; j < ys; j++)
            if (!isnan(y[(size_t)tt * ys + j])) { check_fail_at(__FILE__, __LINE__, "%s: wrote Y padding", what); ok = 0; break; }
done:
    oc_matmul_ctx_close(ctx);
    free(x); free(y); free(bias);
    free_weight(&t);
    return ok;
}

static void test_matmul_random(void) {
    check_rng r = { 12345 };
    static const int64_t outs[] = { 1, 7, 8, 33, 64, 65, 130 };
    static const int64_t toks[] = { 1, 2, 3, 5, 13, 70 };
    n_tables_run = 0;
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        const oc_matmul_kernels *k = tables[isa];
        if (!k) continue;
        n_tables_run++;
        for (size_t ti = 0; ti < OC_ARRAY_LEN(all_types); ti++) {
            int32_t dtype = all_types[ti];
            int has_int8 = oc_dtype_get(dtype)->block_elems > 1;   /* every quantized type */
            for (int p = 0; p < (has_int8 ? 2 : 1); p++) {
                oc_matmul_path path = p ? OC_MATMUL_INT8 : OC_MATMUL_FLOAT;
                int n_fail = 0;
                for (int c = 0; c < 14 && n_fail == 0; c++) {
                    int64_t n_in = pick_n_in(&r, dtype), n_out = pick(&r, outs, 7), n_tok = pick(&r, toks, 6);
                    int pad = c % 3 == 2;
                    if (!run_case(k, NULL, path, dtype, n_in, n_out, n_tok, c % 2, pad ? 5 : 0, pad ? 3 : 0, pad ? 4 : 0, &r))
                        n_fail++;
                }
                /* more tokens than one GEMM task holds, more outputs than one task; and a GEMV */
                if (!n_fail) run_case(k, NULL, path, dtype, pick_n_in(&r, dtype), 70, 300, 1, 0, 0, 0, &r);
                if (!n_fail) run_case(k, NULL, path, dtype, pick_n_in(&r, dtype), 33, 1, 1, 0, 0, 0, &r);
                /* float rows longer than OC_MM_GEMV_LONG_N_IN: the long-row GEMV (several rows per
                 * call, a tail of n_in % 16 and of the rows), with and without padding */
                for (int c = 0; !has_int8 && !n_fail && c < 3; c++)
                    run_case(k, NULL, path, dtype, OC_MM_GEMV_LONG_N_IN + 1 + 4867 * c, 13 - 6 * c, 1 + c, c % 2, c ? 5 : 0,
                             c ? 3 : 0, c ? 4 : 0, &r);
            }
        }
    }
    CHECK(n_tables_run >= 1);
}

/* Every ISA's dequantizers equal the scalar reference bit for bit (the oracle and the tolerance above
 * rely on it). */
static void test_dequant_isa_bitwise(void) {
    check_rng r = { 777 };
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        const oc_matmul_kernels *k = tables[isa];
        if (!k) continue;
        for (size_t ti = 0; ti < OC_ARRAY_LEN(all_types); ti++) {
            int32_t dtype = all_types[ti];
            test_w t;
            int64_t n_in = oc_dtype_get(dtype)->block_elems == 1 ? 1000 : 768;
            REQUIRE(make_weight(&t, dtype, n_in, 1, 0, &r));
            float *a = malloc(sizeof(float) * (size_t)n_in), *b = malloc(sizeof(float) * (size_t)n_in);
            if (a && b) {
                oc_dequant_ref(dtype)(t.bytes, a, n_in);
                int idx = dtype == OC_DTYPE_F32 ? OC_MM_F32 : dtype == OC_DTYPE_F16 ? OC_MM_F16 : dtype == OC_DTYPE_BF16 ? OC_MM_BF16
                        : dtype == OC_DTYPE_Q8_0 ? OC_MM_Q8_0 : dtype == OC_DTYPE_Q4_0 ? OC_MM_Q4_0 : dtype == OC_DTYPE_Q4_K ? OC_MM_Q4_K : OC_MM_Q6_K;
                check_poison_f32(b, (size_t)n_in);
                k->to_f32[idx](t.bytes, b, n_in);
                CHECKF(memcmp(a, b, sizeof(float) * (size_t)n_in) == 0, "%s %s dequant differs from scalar", k->name, oc_dtype_name(dtype));
            }
            free(a); free(b);
            free_weight(&t);
        }
    }
}

/* GEMV kernels take several rows per call; a row's result must not depend on which rows share its
 * call (that is what makes Y independent of the task split): Y of W's rows s.. equals Y of all of W
 * from row s on, bit for bit, for every shift s of the row grouping. */
static void test_gemv_row_grouping(void) {
    check_rng r = { 99 };
    oc_error err;
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        const oc_matmul_kernels *k = tables[isa];
        if (!k) continue;
        for (size_t ti = 0; ti < OC_ARRAY_LEN(all_types); ti++) {
            int32_t dtype = all_types[ti];
            int has_int8 = oc_dtype_get(dtype)->block_elems > 1;
            for (int p = 0; p < (has_int8 ? 2 : 1); p++) {
                int64_t n_in = oc_dtype_get(dtype)->block_elems == 256 ? 512 : 96, n_out = 11, n_tok = 2;
                if (p == 0 && !has_int8 && (ti & 1)) n_in = OC_MM_GEMV_LONG_N_IN + 7;   /* long rows, some types */
                test_w t;
                REQUIRE(make_weight(&t, dtype, n_in, n_out, 0, &r));
                float *x = make_x(n_tok, n_in, (size_t)n_in, &r);
                float *y = malloc(sizeof(float) * (size_t)(n_tok * n_out)), *ys = malloc(sizeof(float) * (size_t)(n_tok * n_out));
                oc_matmul_ctx *ctx = NULL;
                if (x && y && ys && oc_matmul_ctx_open(&ctx, k, NULL, n_in, n_tok, NULL, &err) == OC_OK) {
                    oc_matmul_ctx_set_path(ctx, p ? OC_MATMUL_INT8 : OC_MATMUL_FLOAT);
                    CHECK(oc_matmul(ctx, &t.w, x, (size_t)n_in, y, (size_t)n_out, n_tok, NULL, &err) == OC_OK);
                    for (int64_t sh = 1; sh < 4; sh++) {
                        oc_weight w = t.w;
                        w.data = t.bytes + (size_t)sh * t.w.row_bytes;
                        w.n_out = n_out - sh;
                        check_poison_f32(ys, (size_t)(n_tok * n_out));
                        CHECK(oc_matmul(ctx, &w, x, (size_t)n_in, ys, (size_t)n_out, n_tok, NULL, &err) == OC_OK);
                        for (int64_t tt = 0; tt < n_tok; tt++)
                            CHECKF(memcmp(y + tt * n_out + sh, ys + tt * n_out, sizeof(float) * (size_t)(n_out - sh)) == 0,
                                   "%s %s path %d: GEMV rows shifted by %lld differ", k->name, oc_dtype_name(dtype), p,
                                   (long long)sh);
                    }
                } else {
                    CHECK(!"setup failed");
                }
                oc_matmul_ctx_close(ctx);
                free(x); free(y); free(ys);
                free_weight(&t);
            }
        }
    }
}

/* 1, 2 and 3 pool threads give bitwise identical Y, for GEMM and GEMV, on every path. */
static void test_thread_determinism(void) {
    check_rng r = { 4242 };
    oc_pool *pools[3] = { NULL, NULL, NULL };
    oc_error err;
    for (int i = 0; i < 3; i++) REQUIRE(oc_pool_open(&pools[i], i + 1, NULL, &err) == OC_OK);
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        const oc_matmul_kernels *k = tables[isa];
        if (!k) continue;
        for (size_t ti = 0; ti < OC_ARRAY_LEN(all_types); ti++) {
            int32_t dtype = all_types[ti];
            int has_int8 = oc_dtype_get(dtype)->block_elems > 1;   /* every quantized type */
            for (int p = 0; p < (has_int8 ? 2 : 1); p++) {
                static const int64_t toks[] = { 1, 3, 70, 300 };
                for (int c = 0; c < 4; c++) {
                    int64_t n_in = oc_dtype_get(dtype)->block_elems == 256 ? 512 : oc_dtype_get(dtype)->block_elems == 32 ? 544 : 600;
                    int64_t n_out = 200, n_tok = toks[c];
                    test_w t;
                    REQUIRE(make_weight(&t, dtype, n_in, n_out, 0, &r));
                    float *x = make_x(n_tok, n_in, (size_t)n_in, &r);
                    float *y[3] = { NULL, NULL, NULL };
                    size_t ny = (size_t)(n_tok * n_out);
                    for (int i = 0; i < 3; i++) {
                        y[i] = malloc(ny * sizeof(float));
                        oc_matmul_ctx *ctx = NULL;
                        if (!x || !y[i] || oc_matmul_ctx_open(&ctx, k, pools[i], n_in, n_tok, NULL, &err) != OC_OK) {
                            check_fail_at(__FILE__, __LINE__, "setup failed");
                            break;
                        }
                        oc_matmul_ctx_set_path(ctx, p ? OC_MATMUL_INT8 : OC_MATMUL_FLOAT);
                        check_poison_f32(y[i], ny);
                        CHECK(oc_matmul(ctx, &t.w, x, (size_t)n_in, y[i], (size_t)n_out, n_tok, NULL, &err) == OC_OK);
                        oc_matmul_ctx_close(ctx);
                        if (i > 0)
                            CHECKF(memcmp(y[0], y[i], ny * sizeof(float)) == 0, "%s %s path %d n_tok %lld: %d threads differ from 1",
                                   k->name, oc_dtype_name(dtype), p, (long long)n_tok, i + 1);
                    }
                    for (int i = 0; i < 3; i++) free(y[i]);
                    free(x);
                    free_weight(&t);
                }
            }
        }
    }
    for (int i = 0; i < 3; i++) oc_pool_close(pools[i]);
}

/* A pool of threads gives correct results too (not only identical ones). */
static void test_matmul_threaded(void) {
    check_rng r = { 99 };
    oc_pool *pool = NULL;
    oc_error err;
    REQUIRE(oc_pool_open(&pool, 2, NULL, &err) == OC_OK);
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        if (!tables[isa]) continue;
        run_case(tables[isa], pool, OC_MATMUL_AUTO, OC_DTYPE_Q8_0, 544, 130, 70, 1, 0, 0, 0, &r);
        run_case(tables[isa], pool, OC_MATMUL_AUTO, OC_DTYPE_F16, 600, 130, 70, 1, 0, 0, 0, &r);
        run_case(tables[isa], pool, OC_MATMUL_AUTO, OC_DTYPE_Q4_0, 288, 65, 1, 0, 0, 0, 0, &r);
    }
    oc_pool_close(pool);
}

static void test_matmul_errors(void) {
    const oc_matmul_kernels *k = tables[OC_ISA_SCALAR];
    REQUIRE(k);
    oc_matmul_ctx *ctx = NULL;
    oc_error err;
    CHECK(oc_matmul_ctx_open(&ctx, NULL, NULL, 64, 4, NULL, &err) == OC_ERR_INVALID && ctx == NULL);
    CHECK(oc_matmul_ctx_open(&ctx, k, NULL, 0, 4, NULL, &err) == OC_ERR_INVALID);
    REQUIRE(oc_matmul_ctx_open(&ctx, k, NULL, 64, 4, NULL, &err) == OC_OK);
    static uint16_t data[64 * 4];
    float x[4 * 64] = { 0 }, y[4 * 4];
    oc_weight w = { OC_DTYPE_F16, 64, 4, data, 128 };
    CHECK(oc_matmul(ctx, &w, x, 64, y, 4, 4, NULL, &err) == OC_OK);
    CHECK(oc_matmul(ctx, &w, x, 64, y, 4, 0, NULL, &err) == OC_OK);   /* no tokens: nothing to do */
    oc_weight bad = w;
    bad.dtype = 3;   /* Q4_1: known, not supported */
    CHECK(oc_matmul(ctx, &bad, x, 64, y, 4, 4, NULL, &err) == OC_ERR_UNSUPPORTED && strstr(err.message, "q4_1"));
    bad = w; bad.dtype = OC_DTYPE_Q8_0; bad.n_in = 48;
    CHECK(oc_matmul(ctx, &bad, x, 64, y, 4, 4, NULL, &err) == OC_ERR_INVALID && strstr(err.message, "multiple"));
    bad = w; bad.n_in = 128; bad.row_bytes = 256;
    CHECK(oc_matmul(ctx, &bad, x, 128, y, 4, 4, NULL, &err) == OC_ERR_RANGE);
    CHECK(oc_matmul(ctx, &w, x, 64, y, 4, 5, NULL, &err) == OC_ERR_RANGE);
    bad = w; bad.row_bytes = 100;
    CHECK(oc_matmul(ctx, &bad, x, 64, y, 4, 4, NULL, &err) == OC_ERR_INVALID && strstr(err.message, "row_bytes"));
    bad = w; bad.data = (const unsigned char *)data + 1;
    CHECK(oc_matmul(ctx, &bad, x, 64, y, 4, 4, NULL, &err) == OC_ERR_INVALID && strstr(err.message, "aligned"));
    CHECK(oc_matmul(ctx, &w, x, 63, y, 4, 4, NULL, &err) == OC_ERR_INVALID);
    CHECK(oc_matmul(ctx, &w, NULL, 64, y, 4, 4, NULL, &err) == OC_ERR_INVALID);
    bad = w; bad.n_out = 0;
    CHECK(oc_matmul(ctx, &bad, x, 64, y, 4, 4, NULL, &err) == OC_ERR_INVALID);
    oc_matmul_ctx_close(ctx);
    oc_matmul_ctx_close(NULL);
    CHECK(oc_matmul_scratch_bytes(k, 1, INT64_MAX / 2, INT64_MAX / 2) == 0);   /* overflow is refused */
}

/* NaN in X reaches Y on every path (the int8 quantizer must not turn it into a number). */
static void test_nan_propagates(void) {
    check_rng r = { 5 };
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        const oc_matmul_kernels *k = tables[isa];
        if (!k) continue;
        for (int p = 0; p < 2; p++) {
            for (int n_tok = 1; n_tok <= 8; n_tok += 7) {
                test_w t;
                REQUIRE(make_weight(&t, OC_DTYPE_Q8_0, 64, 9, 0, &r));
                float *x = make_x(n_tok, 64, 64, &r), y[8 * 9];
                oc_matmul_ctx *ctx = NULL;
                oc_error err;
                if (x && oc_matmul_ctx_open(&ctx, k, NULL, 64, n_tok, NULL, &err) == OC_OK) {
                    oc_matmul_ctx_set_path(ctx, p ? OC_MATMUL_INT8 : OC_MATMUL_FLOAT);
                    x[40] = NAN;   /* token 0, second block */
                    CHECK(oc_matmul(ctx, &t.w, x, 64, y, 9, n_tok, NULL, &err) == OC_OK);
                    for (int o = 0; o < 9; o++) CHECKF(isnan(y[o]), "%s path %d n_tok %d: y[0][%d] = %g", k->name, p, n_tok, o, (double)y[o]);
                    if (n_tok > 1) CHECK(!isnan(y[9]));
                }
                oc_matmul_ctx_close(ctx);
                free(x);
                free_weight(&t);
            }
        }
    }
}

/* Weights whose every value is exactly zero, stored at the type's zero point with nonzero scales
 * (Q8_0 q = 0; Q4_0 nibble 8; Q4_K q = 0 with all mins 0; Q6_K q = 32), give exactly 0 on every
 * path: the offsets of the unsigned encodings must cancel in integers, never as two rounded floats
 * (the oracle bound is 0 here). */
static void test_zero_weights_exact(void) {
    enum { N_IN = 512, N_OUT = 9, N_TOK_MAX = 5 };
    static const int32_t types[] = { OC_DTYPE_Q8_0, OC_DTYPE_Q4_0, OC_DTYPE_Q4_K, OC_DTYPE_Q6_K };
    check_rng r = { 11 };
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        int32_t dtype = types[ti];
        size_t row_bytes = (size_t)oc_dtype_row_bytes(dtype, N_IN);
        unsigned char *w = malloc(row_bytes * N_OUT);
        float *x = make_x(N_TOK_MAX, N_IN, N_IN, &r), y[N_TOK_MAX * N_OUT];
        REQUIRE(w && x);
        for (int o = 0; o < N_OUT; o++) {
            unsigned char *row = w + (size_t)o * row_bytes;
            uint16_t d = small_f16(&r);   /* random scales: products that round differently per block */
            for (int b = 0; b < N_IN / 32 && dtype == OC_DTYPE_Q8_0; b++, d = small_f16(&r)) {
                oc_block_q8_0 *blk = (oc_block_q8_0 *)row + b;
                blk->d = d;
                memset(blk->qs, 0, sizeof blk->qs);
            }
            for (int b = 0; b < N_IN / 32 && dtype == OC_DTYPE_Q4_0; b++, d = small_f16(&r)) {
                oc_block_q4_0 *blk = (oc_block_q4_0 *)row + b;
                blk->d = d;
                memset(blk->qs, 0x88, sizeof blk->qs);
            }
            for (int b = 0; b < N_IN / 256 && dtype == OC_DTYPE_Q4_K; b++, d = small_f16(&r)) {
                oc_block_q4_k *blk = (oc_block_q4_k *)row + b;
                static const uint8_t sc[12] = { 0x3f, 0x21, 0x05, 0x3f, 0, 0, 0, 0, 0x0f, 0x07, 0x0f, 0x01 };   /* mins 0 */
                blk->d = blk->dmin = d;
                memcpy(blk->scales, sc, sizeof sc);
                memset(blk->qs, 0, sizeof blk->qs);
            }
            for (int b = 0; b < N_IN / 256 && dtype == OC_DTYPE_Q6_K; b++, d = small_f16(&r)) {
                oc_block_q6_k *blk = (oc_block_q6_k *)row + b;
                memset(blk->ql, 0, sizeof blk->ql);
                memset(blk->qh, 0xaa, sizeof blk->qh);   /* high bits 2: q = 32 */
                for (int k = 0; k < 16; k++) blk->scales[k] = (int8_t)(k % 2 ? -128 + 9 * k : 127 - 5 * k);
                blk->d = d;
            }
        }
        oc_weight wt = { dtype, N_IN, N_OUT, w, row_bytes };
        for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
            const oc_matmul_kernels *k = tables[isa];
            for (int p = 0; k && p < 2; p++) {
                for (int n_tok = 1; n_tok <= N_TOK_MAX; n_tok += N_TOK_MAX - 1) {
                    oc_matmul_ctx *ctx = NULL;
                    oc_error err;
                    REQUIRE(oc_matmul_ctx_open(&ctx, k, NULL, N_IN, n_tok, NULL, &err) == OC_OK);
                    oc_matmul_ctx_set_path(ctx, p ? OC_MATMUL_INT8 : OC_MATMUL_FLOAT);
                    for (int i = 0; i < n_tok * N_OUT; i++) y[i] = NAN;   /* poisoned */
                    CHECK(oc_matmul(ctx, &wt, x, N_IN, y, N_OUT, n_tok, NULL, &err) == OC_OK);
                    for (int i = 0; i < n_tok * N_OUT; i++)
                        CHECKF(y[i] == 0.0f, "%s %s path %d n_tok %d: y[%d] = %g, want exactly 0", k->name,
                               oc_dtype_name(dtype), p, n_tok, i, (double)y[i]);
                    oc_matmul_ctx_close(ctx);
                }
            }
        }
        free(w);
        free(x);
    }
}

/* ---- the BF16 path ------------------------------------------------------------------------------ */

static double bf16_round(double v) { return oc_bf16_to_f32(oc_f32_to_bf16((float)v)); }

/* A BF16-path result against two references:
 *  - the operands rounded to bf16 as the path rounds them (W and X per tile), products
 *    and sums in double: the bound is check_y's f32 summation bound (each bf16 x bf16 product is
 *    exact in f32), so this checks the packing, the tiling and the micro-kernel;
 *  - the exact operands: the stated accuracy of the path. Rounding w and x to bf16 (8 significant
 *    bits, unit roundoff 2^-8 each) moves every product by at most (2^-7 + 2^-16) |w x|, so
 *    |y - y_exact| <= (2^-7 + 2^-16) sum |w x| + the summation bound.
 * NaN or Inf never passes. */
static int check_y_bf16(const char *what, const test_w *t, const float *x, size_t xs, const float *y, size_t ys,
                        int64_t n_tok, const float *bias) {
    int64_t n_in = t->w.n_in, n_out = t->w.n_out;
    test_w tb = *t;
    size_t nx = (size_t)(n_tok - 1) * xs + (size_t)n_in;
    float *xr = malloc(nx * sizeof(float));
    tb.deq = malloc(sizeof(double) * (size_t)(n_in * n_out));
    if (!xr || !tb.deq) { free(xr); free(tb.deq); check_fail_at(__FILE__, __LINE__, "out of memory"); return 0; }
    for (size_t i = 0; i < nx; i++) xr[i] = (float)bf16_round(x[i]);
    for (int64_t i = 0; i < n_in * n_out; i++) tb.deq[i] = bf16_round(t->deq[i]);
    char w2[200];
    snprintf(w2, sizeof w2, "%s (bf16-rounded operands)", what);
    int ok = check_y(w2, &tb, xr, xs, y, ys, n_tok, bias, 0);
    int bad = 0;
    for (int64_t tt = 0; tt < n_tok && ok; tt++)
        for (int64_t o = 0; o < n_out; o++) {
            const float *xt = x + (size_t)tt * xs;
            double ref = bias ? bias[o] : 0.0, s = bias ? fabs(bias[o]) : 0.0;
            for (int64_t i = 0; i < n_in; i++) {
                ref += t->deq[o * n_in + i] * (double)xt[i];
                s += fabs(t->deq[o * n_in + i] * (double)xt[i]);
            }
            double bound = (0x1p-7 + 0x1p-16) * s + 2.0 * (double)(n_in + 2) * 0x1p-24 * s + 1e-30;
            float got = y[(size_t)tt * ys + (size_t)o];
            if (!isfinite(got) || !(fabs((double)got - ref) <= bound)) {
                if (bad++ < 3)
                    check_fail_at(__FILE__, __LINE__, "%s: y[%lld][%lld] = %.9g, exact %.9g, beyond the bf16 bound %.3g", what,
                                  (long long)tt, (long long)o, (double)got, ref, bound);
            }
        }
    free(xr);
    free(tb.deq);
    return ok && !bad;
}

/* Random shapes on every table with BF16 kernels (the scalar reference always; AVX-512 where the CPU
 * reports AVX512_BF16), F16 and BF16 weights, forced onto the path; 1 and 3 threads bitwise equal. */
static void test_bf16_random(void) {
    check_rng r = { 2024 };
    static const int64_t ins[] = { 2, 8, 64, 258, 600, 1030 };   /* 1030: a KC block and a remainder */
    static const int64_t outs[] = { 1, 7, 33, 64, 65, 130 };
    static const int64_t toks[] = { 4, 5, 13, 70, 300 };
    oc_pool *pool3 = NULL;
    oc_error err;
    REQUIRE(oc_pool_open(&pool3, 3, NULL, &err) == OC_OK);
    int n_run = 0;
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        const oc_matmul_kernels *k = tables[isa];
        if (!k || !k->gemm_bf16) continue;
        n_run++;
        printf("  bf16 kernels: %s (AUTO %s)\n", k->name, k->bf16_gemm ? "takes them" : "does not");
        for (int c = 0; c < 24; c++) {
            int32_t dtype = c % 2 ? OC_DTYPE_BF16 : OC_DTYPE_F16;
            int64_t n_in = pick(&r, ins, 6), n_out = pick(&r, outs, 6), n_tok = pick(&r, toks, 5);
            int pad = c % 3 == 2, use_bias = c % 4 < 2;
            size_t xs = (size_t)n_in + (pad ? 5 : 0), ys = (size_t)n_out + (pad ? 3 : 0);
            char what[160];
            snprintf(what, sizeof what, "%s bf16 path %s n_in %lld n_out %lld n_tok %lld", k->name, oc_dtype_name(dtype),
                     (long long)n_in, (long long)n_out, (long long)n_tok);
            test_w t;
            REQUIRE(make_weight(&t, dtype, n_in, n_out, pad ? 4 : 0, &r));
            float *x = make_x(n_tok, n_in, xs, &r), *bias = malloc((size_t)n_out * sizeof(float));
            size_t ny = (size_t)n_tok * ys;
            float *y1 = malloc(ny * sizeof(float)), *y3 = malloc(ny * sizeof(float));
            oc_matmul_ctx *c1 = NULL, *c3 = NULL;
            if (!x || !bias || !y1 || !y3 || oc_matmul_ctx_open(&c1, k, NULL, n_in, n_tok, NULL, &err) ||
                oc_matmul_ctx_open(&c3, k, pool3, n_in, n_tok, NULL, &err)) {
                check_fail_at(__FILE__, __LINE__, "%s: setup failed", what);
            } else {
                for (int64_t o = 0; o < n_out; o++) bias[o] = check_rng_uniform(&r, -2, 2);
                check_poison_f32(y1, ny);
                check_poison_f32(y3, ny);
                oc_matmul_ctx_set_path(c1, OC_MATMUL_BF16);
                oc_matmul_ctx_set_path(c3, OC_MATMUL_BF16);
                CHECK(oc_matmul_uses_bf16(c1, &t.w, n_tok) && oc_matmul_uses_bf16(c3, &t.w, n_tok));
                CHECK(oc_matmul(c1, &t.w, x, xs, y1, ys, n_tok, use_bias ? bias : NULL, &err) == OC_OK);
                CHECK(oc_matmul(c3, &t.w, x, xs, y3, ys, n_tok, use_bias ? bias : NULL, &err) == OC_OK);
                check_y_bf16(what, &t, x, xs, y1, ys, n_tok, use_bias ? bias : NULL);
                CHECKF(memcmp(y1, y3, ny * sizeof(float)) == 0, "%s: 1 and 3 threads differ", what);
                for (int64_t tt = 0; tt < n_tok; tt++)
                    for (size_t j = (size_t)n_out; j < ys; j++)
                        CHECKF(isnan(y1[(size_t)tt * ys + j]), "%s: wrote Y padding", what);
                /* NaN in X reaches its row of Y and no other */
                x[n_in / 2] = NAN;
                CHECK(oc_matmul(c1, &t.w, x, xs, y1, ys, n_tok, NULL, &err) == OC_OK);
                for (int64_t o = 0; o < n_out; o++) CHECKF(isnan(y1[o]), "%s: NaN lost in y[0][%lld]", what, (long long)o);
                CHECK(!isnan(y1[ys]));
            }
            oc_matmul_ctx_close(c1);
            oc_matmul_ctx_close(c3);
            free(x); free(bias); free(y1); free(y3);
            free_weight(&t);
        }
    }
    CHECK(n_run >= 1);
    oc_pool_close(pool3);
}

/* Which calls take the BF16 path: GEMMs of F16 / BF16 weights with an even n_in, forced or (AUTO)
 * where the table says its BF16 dot products are fast; the rest (other types, odd n_in, GEMVs) run
 * the float path and stay exact. A panel rounds W to nearest even and zero-fills the outputs past
 * n_out (40 outputs: the second panel has 8 real rows). */
static void test_bf16_rules(void) {
    const oc_matmul_kernels *k = tables[OC_ISA_SCALAR];
    REQUIRE(k);
    oc_error err;
    oc_matmul_ctx *ctx = NULL;
    REQUIRE(oc_matmul_ctx_open(&ctx, k, NULL, 66, 5, NULL, &err) == OC_OK);
    static uint16_t data[66 * 40];
    oc_weight w = { OC_DTYPE_F16, 66, 40, data, 132 };
    oc_weight odd = w; odd.n_in = 65;
    oc_weight q = w; q.dtype = OC_DTYPE_Q8_0; q.n_in = 64;
    oc_weight f = w; f.dtype = OC_DTYPE_F32; f.n_in = 33;
    CHECK(!oc_matmul_uses_bf16(ctx, &w, 5));   /* AUTO: the scalar table never takes it */
    oc_matmul_ctx_set_path(ctx, OC_MATMUL_BF16);
    CHECK(oc_matmul_uses_bf16(ctx, &w, 5) && !oc_matmul_uses_bf16(ctx, &w, 1));
    CHECK(!oc_matmul_uses_bf16(ctx, &odd, 5) && !oc_matmul_uses_bf16(ctx, &q, 5) && !oc_matmul_uses_bf16(ctx, &f, 5));
    /* W rounded to nearest even per panel: W[o][i] = 1 + 2^-8 for even i (a tie between 1 and
     * 1 + 2^-7 in bf16: to even, 1) and 1 + 2^-8 + 2^-10 for odd i (above it: 1 + 2^-7); with
     * X[t] = e_t, Y[t][o] = the rounded W[o][t] */
    for (int i = 0; i < 66 * 40; i++) data[i] = oc_f32_to_f16(1.0f + 0x1p-8f + (float)(i % 2) * 0x1p-10f);
    float x[5 * 66], y[5 * 40];
    for (int t = 0; t < 5; t++)
        for (int i = 0; i < 66; i++) x[t * 66 + i] = i == t ? 1.0f : 0.0f;
    check_poison_f32(y, 5 * 40);
    REQUIRE(oc_matmul(ctx, &w, x, 66, y, 40, 5, NULL, &err) == OC_OK);
    for (int t = 0; t < 5; t++)
        for (int o = 0; o < 40; o++)
            CHECKF(y[t * 40 + o] == (t % 2 ? 1.0f + 0x1p-7f : 1.0f), "y[%d][%d] = %.9g", t, o, (double)y[t * 40 + o]);
    oc_matmul_ctx_close(ctx);
    check_rng r = { 77 };
    for (int n_tok = 1; n_tok <= 5; n_tok += 4)   /* a GEMV, and an odd n_in: the float path, exact */
        for (int64_t n_in = 64; n_in <= 65; n_in++) {
            if (n_tok > 4 && n_in == 64) continue;
            test_w t;
            REQUIRE(make_weight(&t, OC_DTYPE_F16, n_in, 40, 0, &r));
            float *xr = make_x(n_tok, n_in, (size_t)n_in, &r);
            REQUIRE(xr && oc_matmul_ctx_open(&ctx, k, NULL, n_in, n_tok, NULL, &err) == OC_OK);
            oc_matmul_ctx_set_path(ctx, OC_MATMUL_BF16);
            CHECK(oc_matmul(ctx, &t.w, xr, (size_t)n_in, y, 40, n_tok, NULL, &err) == OC_OK);
            CHECK(check_y("bf16 forced, float path taken", &t, xr, (size_t)n_in, y, 40, n_tok, NULL, 0));
            oc_matmul_ctx_close(ctx);
            free(xr);
            free_weight(&t);
        }
}

/* Every table's x_to_bf16 and f16_to_bf16 round exactly as oc_f32_to_bf16 (nearest even, NaN kept
 * quiet): random values, ties, the largest values that round to Inf, Inf, NaN, signed zeros and
 * subnormals (and every f16 value), at every offset from the start of the SIMD blocks. The one
 * allowed difference (matmul_kern.h): an f32 subnormal may become the zero of its sign, as x86's
 * vcvtneps2bf16 does (its dot product, like Arm's BFDOT, reads bf16 subnormals as zero anyway). */
static int bf16_same(float x, uint16_t got) {
    uint32_t u = oc_f32_bits(x);
    int subnormal = (u & 0x7f800000u) == 0 && (u & 0x007fffffu) != 0;
    return got == oc_f32_to_bf16(x) || (subnormal && got == (uint16_t)((u >> 16) & 0x8000u));
}

static void test_bf16_conversions_bitwise(void) {
    enum { N = 4099 };
    static float x[N];
    static uint16_t got[N], h[65536], got16[65536];
    check_rng r = { 31 };
    for (int i = 0; i < N; i++) {
        uint32_t u;
        switch (i % 8) {
        case 0: u = (uint32_t)check_rng_u64(&r); break;   /* any bits, NaNs included */
        case 1: u = ((uint32_t)check_rng_u64(&r) & 0xffff0000u) | 0x8000u; break;   /* a tie */
        case 2: u = ((uint32_t)check_rng_u64(&r) & 0x807f0000u) | 0x7f00ffffu; break;   /* near the largest */
        case 3: u = ((uint32_t)check_rng_u64(&r) & 0x807fffffu); break;   /* subnormal or zero */
        default: { float v = check_rng_uniform(&r, -4, 4); memcpy(&u, &v, 4); } break;
        }
        if (i == 5) u = 0x7f800000u;
        if (i == 6) u = 0xff800000u;
        if (i == 7) u = 0x7fc00001u;
        if (i == 9) u = 0x7f800001u;   /* signalling NaN */
        if (i == 10) u = 0x80000000u;
        if (i == 11) u = 0x7f7fffffu;  /* rounds to Inf */
        memcpy(&x[i], &u, 4);
    }
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    int n_run = 0;
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        const oc_matmul_kernels *k = tables[isa];
        if (!k || !k->x_to_bf16) continue;
        n_run++;
        for (int off = 0; off < 9; off++) {
            memset(got, 0xAB, sizeof got);
            k->x_to_bf16(x + off, N - off, got);
            int bad = 0;
            for (int i = 0; i < N - off; i++)
                if (!bf16_same(x[off + i], got[i]) && bad++ < 3)
                    CHECKF(0, "%s x_to_bf16(0x%08x) = 0x%04x, want 0x%04x", k->name, (unsigned)oc_f32_bits(x[off + i]),
                           got[i], oc_f32_to_bf16(x[off + i]));
        }
        if (k->f16_to_bf16) {
            memset(got16, 0xAB, sizeof got16);
            k->f16_to_bf16(h, 65536, got16);
            int bad = 0;
            for (int i = 0; i < 65536; i++)
                if (!bf16_same(oc_f16_to_f32(h[i]), got16[i]) && bad++ < 3)
                    CHECKF(0, "%s f16_to_bf16(0x%04x) = 0x%04x, want 0x%04x", k->name, (unsigned)h[i], got16[i],
                           oc_f32_to_bf16(oc_f16_to_f32(h[i])));
        }
    }
    CHECK(n_run >= 1);
}

/* The NEON table's activation quantizer equals the scalar one bit for bit (d, sum and every q), on
 * random runs, exact ties (amax 127: id 1, x = k + 1/2 rounds away from zero), zero, tiny, huge and
 * subnormal runs, NaN and Inf, for groups of 1 and 8 blocks. The x86 tables round ties to even
 * (vcvtps2dq) and are left out. */
static void test_quantize_q8x_bitwise(void) {
    check_rng r = { 31337 };
    enum { N = 6 * 8 * OC_QK };
    static float x[N];
    static oc_q8x want[N / OC_QK], got[N / OC_QK];
    int n_run = 0;
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        const oc_matmul_kernels *k = tables[isa];
        if (!k || k->isa == OC_ISA_AVX2 || k->isa == OC_ISA_AVX512) continue;
        n_run++;
        for (int trial = 0; trial < 16; trial++) {
            for (int i = 0; i < N; i++) x[i] = check_rng_uniform(&r, -3, 3);
            const int kind = trial % 8;
            float *run = x + (size_t)(trial % 6) * 8 * OC_QK;   /* one run of 256 gets the special values */
            for (int i = 0; i < 8 * OC_QK; i++) {
                if (kind == 1) run[i] = i % 32 == 0 ? 127.0f : (float)(i % 64) - 31.5f;   /* ties */
                if (kind == 2) run[i] = 0.0f;
                if (kind == 3) run[i] *= 1e-33f;   /* amax below 2^-100 */
                if (kind == 4) run[i] *= 1e38f;
                if (kind == 5) run[i] = i % 7 ? 1e-39f * (float)(i % 5) : 1e-30f;   /* subnormals next to a tiny amax */
            }
            if (kind == 6) run[17] = NAN;
            if (kind == 7) run[200] = -INFINITY;
            const int group = trial % 2 ? 8 : 1;
            memset(want, 0x55, sizeof want);
            memset(got, 0xaa, sizeof got);
            oc_mm_quantize_q8x_scalar(x, N, group, want);
            k->quantize_q8x(x, N, group, got);
            int bad = 0;
            for (int b = 0; b < N / OC_QK && bad < 3; b++) {
                const int same = (isnan(want[b].d) ? isnan(got[b].d) : memcmp(&want[b].d, &got[b].d, sizeof(float)) == 0) &&
                                 want[b].sum == got[b].sum && memcmp(want[b].qs, got[b].qs, OC_QK) == 0;
                if (!same) {
                    bad++;
                    check_fail_at(__FILE__, __LINE__, "%s quantize_q8x trial %d (kind %d, group %d) block %d: d %.9g sum %d, scalar d %.9g sum %d",
                                  k->name, trial, kind, group, b, (double)got[b].d, (int)got[b].sum, (double)want[b].d, (int)want[b].sum);
                }
            }
        }
    }
    CHECK(n_run >= 1);
}

/* ---- the micro-kernels alone --------------------------------------------------------------------- */

/* Every table's GEMM micro-kernels of the BF16 and int8 paths, called directly on panels made by the
 * same table's pack function: every mr from 1 to the table's, partial panels (n_rows < nr, the rest
 * zero-padded by the packing), odd and even k (n_pairs 1, 3, 5...; 1 to 9 blocks), with and without
 * accumulation, against a double-precision sum of the operands as the kernel sees them (bf16-rounded;
 * int8: the dequantized weights times d_x q_x). The panel is poisoned before packing and Y before
 * the call (NaN: never passes), and the kernel must leave Y beyond its mr x nr tile untouched. This
 * pins each table's own panel layout (the NEON +i8mm table reorders it for SMMLA / BFMMLA) to its
 * kernel, for tile edges the driver's random shapes may reach only by chance. */
static int check_tile(const char *what, int mr, int nr, const float *y, size_t ys, const double *ref, const double *mag,
                      int64_t n_terms) {
    int bad = 0;
    for (int i = 0; i <= mr; i++)
        for (size_t j = 0; j < ys; j++) {
            float got = y[(size_t)i * ys + j];
            if (i == mr || j >= (size_t)nr) {
                if (!isnan(got) && bad++ < 3) check_fail_at(__FILE__, __LINE__, "%s: wrote y[%d][%zu] outside the tile", what, i, j);
                continue;
            }
            double want = ref[i * nr + (int)j], bound = 2.0 * (double)(n_terms + 2) * 0x1p-24 * mag[i * nr + (int)j] + 1e-30;
            if ((!isfinite(got) || !(fabs((double)got - want) <= bound)) && bad++ < 3)
                check_fail_at(__FILE__, __LINE__, "%s: y[%d][%zu] = %.9g, want %.9g (bound %.3g)", what, i, j, (double)got, want, bound);
        }
    return bad == 0;
}

static void test_microkernels_direct(void) {
    check_rng r = { 4242 };
    enum { YPAD = 4 };
    static const int64_t pairs[] = { 1, 2, 3, 5, 8, 13, 128 };
    int n_run = 0;
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        const oc_matmul_kernels *k = tables[isa];
        if (!k) continue;
        /* BF16 path: x rows and W rows of bf16 pairs */
        for (int c = 0; k->gemm_bf16 && c < 4 * k->bf16_mr; c++) {
            const int mr = 1 + c % k->bf16_mr, nr = OC_MM_BF16_NR, acc = c / k->bf16_mr % 2;
            const int n_rows = c % 3 == 0 ? nr : check_rng_int(&r, 1, nr - 1);
            const int64_t n_pairs = pairs[check_rng_int(&r, 0, 6)];
            const size_t ld = (size_t)n_pairs + 2, xs = (size_t)n_pairs + 3, ys = (size_t)nr + YPAD;
            uint32_t *w = malloc(sizeof(uint32_t) * ld * (size_t)n_rows), *x = malloc(sizeof(uint32_t) * xs * (size_t)mr);
            /* panels 64-byte aligned, as the driver's scratch is (a kernel may use aligned loads) */
            uint32_t *panel = aligned_alloc(64, (sizeof(uint32_t) * (size_t)n_pairs * nr + 63) / 64 * 64);
            float *y = malloc(sizeof(float) * ys * (size_t)(mr + 1));
            double *ref = calloc((size_t)(mr * nr), sizeof(double)), *mag = calloc((size_t)(mr * nr), sizeof(double));
            REQUIRE(w && x && panel && y && ref && mag);
            uint16_t *w16 = (uint16_t *)(void *)w, *x16 = (uint16_t *)(void *)x;
            for (size_t i = 0; i < 2 * ld * (size_t)n_rows; i++) w16[i] = oc_f32_to_bf16(check_rng_uniform(&r, -1, 1));
            for (size_t i = 0; i < 2 * xs * (size_t)mr; i++) x16[i] = oc_f32_to_bf16(check_rng_uniform(&r, -1, 1));
            check_poison_f32((float *)(void *)panel, (size_t)n_pairs * nr);
            check_poison_f32(y, ys * (size_t)(mr + 1));
            k->pack_bf16(w, ld, n_rows, n_pairs, panel);
            for (int i = 0; i < mr; i++)
                for (int j = 0; j < nr; j++) {
                    if (acc) y[(size_t)i * ys + (size_t)j] = check_rng_uniform(&r, -4, 4);
                    double s = acc ? y[(size_t)i * ys + (size_t)j] : 0, m = fabs(s);
                    for (int64_t e = 0; j < n_rows && e < 2 * n_pairs; e++) {
                        double p = (double)oc_bf16_to_f32(x16[(size_t)i * 2 * xs + (size_t)e]) *
                                   (double)oc_bf16_to_f32(w16[(size_t)j * 2 * ld + (size_t)e]);
                        s += p;
                        m += fabs(p);
                    }
                    ref[i * nr + j] = s;
                    mag[i * nr + j] = m;
                }
            k->gemm_bf16(mr, n_pairs, x, xs, panel, y, ys, acc);
            char what[160];
            snprintf(what, sizeof what, "%s gemm_bf16 mr %d n_rows %d n_pairs %lld acc %d", k->name, mr, n_rows, (long long)n_pairs, acc);
            check_tile(what, mr, nr, y, ys, ref, mag, 2 * n_pairs);
            free(w); free(x); free(panel); free(y); free(ref); free(mag);
        }
        /* int8 path: Q8_0 and Q4_0 rows against quantized x (one d per block) */
        for (int c = 0; c < 8 * k->q8_mr; c++) {
            const int i8 = c % 2 ? OC_MM_I8_Q4_0 : OC_MM_I8_Q8_0;
            if (!k->gemm_q8[i8] || !k->pack_q8[i8]) continue;
            const int32_t dtype = i8 == OC_MM_I8_Q8_0 ? OC_DTYPE_Q8_0 : OC_DTYPE_Q4_0;
            const int mr = 1 + c / 2 % k->q8_mr, nr = k->q8_nr, acc = c / (2 * k->q8_mr) % 2;
            const int n_rows = c % 3 == 0 ? nr : check_rng_int(&r, 1, nr - 1);
            const int64_t nb = check_rng_int(&r, 1, 9), n_in = nb * OC_QK;
            const size_t row_bytes = (size_t)oc_dtype_row_bytes(dtype, (uint64_t)n_in) + 6, ys = (size_t)nr + YPAD;
            const size_t panel_bytes = (size_t)(nr / k->q8_group) * (size_t)nb * OC_MM_Q8_RECORD_BYTES(k->q8_group);
            unsigned char *w = malloc(row_bytes * (size_t)n_rows), *panel = aligned_alloc(64, (panel_bytes + 63) / 64 * 64);
            float *xf = malloc(sizeof(float) * (size_t)n_in), *wf = malloc(sizeof(float) * (size_t)(n_in * n_rows));
            oc_q8x *xq = malloc(sizeof(oc_q8x) * (size_t)(nb * mr));
            float *y = malloc(sizeof(float) * ys * (size_t)(mr + 1));
            double *ref = calloc((size_t)(mr * nr), sizeof(double)), *mag = calloc((size_t)(mr * nr), sizeof(double));
            REQUIRE(w && panel && xf && wf && xq && y && ref && mag);
            for (int j = 0; j < n_rows; j++) {
                for (int64_t e = 0; e < n_in; e++) xf[e] = check_rng_uniform(&r, -1, 1);
                (dtype == OC_DTYPE_Q8_0 ? oc_quantize_q8_0 : oc_quantize_q4_0)(xf, w + (size_t)j * row_bytes, n_in);
                oc_dequant_ref(dtype)(w + (size_t)j * row_bytes, wf + (size_t)j * n_in, n_in);
            }
            for (int i = 0; i < mr; i++) {
                for (int64_t e = 0; e < n_in; e++) xf[e] = check_rng_uniform(&r, -1, 1);
                k->quantize_q8x(xf, n_in, 1, xq + (size_t)i * (size_t)nb);
            }
            memset(panel, 0xff, panel_bytes);   /* d = NaN, q = -1 (or 255) wherever the packing skips */
            check_poison_f32(y, ys * (size_t)(mr + 1));
            k->pack_q8[i8](w, row_bytes, n_rows, nb, panel);
            for (int i = 0; i < mr; i++)
                for (int j = 0; j < nr; j++) {
                    if (acc) y[(size_t)i * ys + (size_t)j] = check_rng_uniform(&r, -4, 4);
                    double s = acc ? y[(size_t)i * ys + (size_t)j] : 0, m = fabs(s);
                    for (int64_t e = 0; j < n_rows && e < n_in; e++) {
                        const oc_q8x *xb = xq + (size_t)i * (size_t)nb + (size_t)(e / OC_QK);
                        double p = (double)wf[(size_t)j * (size_t)n_in + (size_t)e] * (double)xb->d * (double)xb->qs[e % OC_QK];
                        s += p;
                        m += fabs(p);
                    }
                    ref[i * nr + j] = s;
                    mag[i * nr + j] = m;
                }
            k->gemm_q8[i8](mr, nb, xq, (size_t)nb, panel, y, ys, acc);
            char what[160];
            snprintf(what, sizeof what, "%s gemm_q8 %s mr %d n_rows %d n_blocks %lld acc %d", k->name, oc_dtype_name(dtype), mr,
                     n_rows, (long long)nb, acc);
            check_tile(what, mr, nr, y, ys, ref, mag, n_in);
            free(w); free(panel); free(xf); free(wf); free(xq); free(y); free(ref); free(mag);
        }
        n_run++;
    }
    CHECK(n_run >= 1);
}

/* `test_matmul --bf16-probe`: runs one AVX512_BF16 micro-kernel call and exits 0; dies with SIGILL
 * where the CPU lacks the instructions (tests/test_matmul_bf16.sh asks before forcing them on). */
static int bf16_probe(void) {
    const oc_matmul_kernels *k = tables[OC_ISA_AVX512];
    if (!k || !k->gemm_bf16) return 2;
    static _Alignas(64) uint32_t panel[32];
    uint32_t x = 0x3f803f80u;   /* (1, 1) */
    float y[32];
    for (int j = 0; j < 32; j++) panel[j] = 0x40003f80u;   /* (1, 2) */
    k->gemm_bf16(1, 1, &x, 1, panel, y, 32, 0);
    return y[0] == 3.0f ? 0 : 1;
}

int main(int argc, char **argv) {
    load_tables();
    if (argc > 1 && strcmp(argv[1], "--bf16-probe") == 0) return bf16_probe();
    for (int i = 0; i < OC_ISA_COUNT; i++)
        printf("# isa %s: %s\n", oc_isa_name((oc_isa)i), tables[i] ? oc_matmul_kernels_name(tables[i]) : "not run here");
    CHECK_RUN(test_dequant_by_hand);
    CHECK_RUN(test_quantize_roundtrip);
    CHECK_RUN(test_dequant_isa_bitwise);
    CHECK_RUN(test_matmul_random);
    CHECK_RUN(test_thread_determinism);
    CHECK_RUN(test_gemv_row_grouping);
    CHECK_RUN(test_matmul_threaded);
    CHECK_RUN(test_matmul_errors);
    CHECK_RUN(test_nan_propagates);
    CHECK_RUN(test_zero_weights_exact);
    CHECK_RUN(test_bf16_random);
    CHECK_RUN(test_bf16_rules);
    CHECK_RUN(test_bf16_conversions_bitwise);
    CHECK_RUN(test_microkernels_direct);
    CHECK_RUN(test_quantize_q8x_bitwise);
    return check_finish();
}
