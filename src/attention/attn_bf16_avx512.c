/* attn_bf16_avx512.c: the attention engine's two products on BF16 dot products (AVX512_BF16
 * vdpbf16ps, twice the FP32 FMA rate on a Zen 4: BENCHMARKS.md "attention"). The table is the
 * AVX-512 one (attn_avx512.c) with the GEMM operands in bf16 pairs: K and Q^T for S^T = K Q^T, P and
 * V for O += P V; the scores, the online softmax and the accumulators stay f32. attn.c takes it for
 * calls that set bf16_products where the CPU's BF16 dot products are fast (attn_call.h).
 *
 * Pair layout (attn_kernels.h, pack_p): the products sum over k (head dim for S^T, keys for P V), so
 * an operand holds (element 2kk, element 2kk + 1) in one 32-bit word, the low half first, the word
 * where the f32 layout held element kk of the first half; odd k gets a zero partner. A packed B keeps
 * the f32 layout's panel offsets (panel p at p * k * panel words) with ceil(k / 2) pair rows each;
 * A is read as words, element (i, pair kk) at a[i * a_rs + kk * a_cs].
 * Accuracy: each product rounds its operands to 8 significant bits (round to nearest even), the sums
 * stay f32: |err| <= (2^-8 + 2^-8 + 2^-16) sum |a b| + the f32 bound (test_attn test_bf16_products). */
#include "attention/attn_kernels.h"

#include <immintrin.h>

#define VEC 16
#define PANEL 32
#define MR 12
#define BF16 __attribute__((target("avx512bf16")))
#define INLINE static inline __attribute__((always_inline))
#define UNROLL_ROWS _Pragma("GCC unroll 16")

/* Word i = bf16(lo[i]) | bf16(hi[i]) << 16: one vcvtne2ps2bf16 (hi in the upper 16 halves), then
 * the halves interleaved by one word permute. */
INLINE BF16 __m512i pairs16(__m512 lo, __m512 hi) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                         23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

/* Elements c .. c+n-1 (n <= 16) of a row of dtype, zeros above n. */
INLINE __m512 load16(const void *row, int32_t c, int32_t n, int32_t dtype) {
    __mmask16 m = (__mmask16)(n >= VEC ? 0xffff : n <= 0 ? 0 : (1u << n) - 1);
    if (dtype == OC_DTYPE_F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + c));
    return _mm512_maskz_loadu_ps(m, (const float *)row + c);
}

/* ---- GEMM: rows x (2 vectors of 16 columns) per pair, as attn_avx512.c's kernel_2v ------------- */

INLINE BF16 void kernel_bf16(int32_t rows, int32_t nv, int32_t n_pairs, const uint32_t *a, int64_t a_rs, int64_t a_cs,
                             const uint32_t *b, int32_t w, float *c, int64_t ldc, int accumulate) {
    __m512 c0[MR], c1[MR];
    UNROLL_ROWS
    for (int32_t r = 0; r < rows; r++) {
        c0[r] = accumulate ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
        c1[r] = accumulate && nv == 2 ? _mm512_loadu_ps(c + r * ldc + VEC) : _mm512_setzero_ps();
    }
    for (int32_t kk = 0; kk < n_pairs; kk++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + (int64_t)kk * w);
        __m512bh b1 = nv == 2 ? (__m512bh)_mm512_loadu_si512(b + (int64_t)kk * w + VEC) : b0;
        const uint32_t *ak = a + kk * a_cs;
        UNROLL_ROWS
        for (int32_t r = 0; r < rows; r++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)ak[r * a_rs]);
            c0[r] = _mm512_dpbf16_ps(c0[r], av, b0);
            if (nv == 2) c1[r] = _mm512_dpbf16_ps(c1[r], av, b1);
        }
    }
    UNROLL_ROWS
    for (int32_t r = 0; r < rows; r++) {
        _mm512_storeu_ps(c + r * ldc, c0[r]);
        if (nv == 2) _mm512_storeu_ps(c + r * ldc + VEC, c1[r]);
    }
}

#define KERNEL_2V(rows, ...) kernel_bf16(rows, 2, __VA_ARGS__)
#define KERNEL_1V(rows, ...) kernel_bf16(rows, 1, __VA_ARGS__)
#define DISPATCH_ROWS OC_ATTN_DISPATCH_ROWS_12

/* attn_kernels.h gemm with a and b in pair words (the float pointers' memory), k in elements. */
BF16 void oc_attn_bf16_gemm(int32_t m, int32_t n, int32_t k, const float *a, int64_t a_rs, int64_t a_cs, const float *b,
                      float *c, int64_t ldc, int accumulate) {
    const uint32_t *aw = (const uint32_t *)(const void *)a, *bw = (const uint32_t *)(const void *)b;
    int32_t n_pairs = (k + 1) / 2;
    for (int32_t c0 = 0; c0 < n;) {
        int32_t w = n - c0 >= PANEL ? PANEL : VEC;
        const uint32_t *bp = bw + (int64_t)c0 * k;
        for (int32_t i = 0; i < m; i += MR) {
            int32_t rows = OC_MIN(MR, m - i);
            if (w == PANEL) {
                DISPATCH_ROWS(KERNEL_2V, rows, n_pairs, aw + i * a_rs, a_rs, a_cs, bp, w, c + i * ldc + c0, ldc, accumulate)
            } else {
                DISPATCH_ROWS(KERNEL_1V, rows, n_pairs, aw + i * a_rs, a_rs, a_cs, bp, w, c + i * ldc + c0, ldc, accumulate)
            }
        }
        c0 += w;
    }
}

/* ---- packing ------------------------------------------------------------------------------------ */

/* K rows for S^T = K Q^T (A, a_rs = d words): row t's pairs from word t * d on. Pairs along d are
 * neighbours in a row, so a row is its bf16 elements in order, zero-padded to even length. */
BF16 void oc_attn_bf16_convert_rows(float *dst, const void *const *rows, int32_t n_rows, int32_t d, int32_t dtype) {
    int32_t d2 = (d + 1) / 2 * 2;
    for (int32_t t = 0; t < n_rows; t++) {
        uint16_t *out = (uint16_t *)(void *)(dst + (int64_t)t * d);
        for (int32_t c = 0; c < d2; c += 2 * VEC) {
            __m512 lo = load16(rows[t], c, d - c, dtype), hi = load16(rows[t], c + VEC, d - c - VEC, dtype);
            int32_t n = OC_MIN(2 * VEC, d2 - c);
            _mm512_mask_storeu_epi16(out + c, (__mmask32)(n == 32 ? 0xffffffffu : (1u << n) - 1),
                                     (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    }
}

/* V for O += P V (B, k = n_keys): panel p0's pair row j holds keys 2j and 2j + 1 of its columns. */
BF16 void oc_attn_bf16_pack_v(float *dst, const void *const *rows, int32_t n_keys, int32_t d, int32_t dpad, int32_t dtype) {
    uint32_t *dw = (uint32_t *)(void *)dst;
    for (int32_t c = 0; c < dpad; c += VEC) {
        int32_t p0 = c / PANEL * PANEL, w = dpad - p0 >= PANEL ? PANEL : VEC;
        uint32_t *base = dw + (int64_t)p0 * n_keys + (c - p0);
        int32_t n = OC_MAX(0, OC_MIN(VEC, d - c));
        for (int32_t t = 0; t < n_keys; t += 2) {
            __m512 lo = load16(rows[t], c, n, dtype);
            __m512 hi = t + 1 < n_keys ? load16(rows[t + 1], c, n, dtype) : _mm512_setzero_ps();
            _mm512_storeu_si512(base + (int64_t)(t / 2) * w, pairs16(lo, hi));
        }
    }
}

/* Q^T (B, k = d, n = n_cols): column t of panel p holds rows[t][2kk], rows[t][2kk + 1] (scaled) in
 * pair row kk; columns n_rows.. zero. Once per run of rows (attn.c), so plain loops. */
BF16 void oc_attn_bf16_pack_qt(float *dst, const float *const *rows, int32_t n_rows, int32_t n_cols, int32_t d, float scale) {
    uint32_t *dw = (uint32_t *)(void *)dst;
    int32_t n_pairs = (d + 1) / 2;
    for (int32_t c0 = 0; c0 < n_cols;) {
        int32_t w = n_cols - c0 >= PANEL ? PANEL : VEC;
        uint32_t *panel = dw + (int64_t)c0 * d;
        for (int32_t kk = 0; kk < n_pairs; kk++)
            for (int32_t t = 0; t < w; t += VEC) {
                float lo[VEC], hi[VEC];
                for (int32_t u = 0; u < VEC; u++) {
                    int32_t col = c0 + t + u;
                    lo[u] = col < n_rows ? rows[col][2 * kk] * scale : 0.0f;
                    hi[u] = col < n_rows && 2 * kk + 1 < d ? rows[col][2 * kk + 1] * scale : 0.0f;
                }
                _mm512_storeu_si512(panel + (int64_t)kk * w + t, pairs16(_mm512_loadu_ps(lo), _mm512_loadu_ps(hi)));
            }
        c0 += w;
    }
}

/* P in place (attn_kernels.h pack_p): pair row j (word j * lds) = keys 2j, 2j + 1 of s. Row j is
 * written after rows 2j and 2j + 1 are read, and no later j reads a row below 2j, so in place is safe. */
BF16 void oc_attn_bf16_pack_p(float *s, int64_t lds, int32_t n_keys, int32_t n_cols) {
    for (int32_t j = 0; 2 * j < n_keys; j++) {
        const float *r0 = s + 2 * j * lds, *r1 = r0 + lds;
        int has_hi = 2 * j + 1 < n_keys;
        for (int32_t c = 0; c < n_cols; c += VEC) {
            __m512 lo = _mm512_loadu_ps(r0 + c), hi = has_hi ? _mm512_loadu_ps(r1 + c) : _mm512_setzero_ps();
            _mm512_storeu_si512(s + j * lds + c, pairs16(lo, hi));
        }
    }
}
