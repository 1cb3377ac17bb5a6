/* attn_avx512.c: attention micro-kernels for x86-64 AVX-512 F/BW/VL/DQ (attn_kernels.h).
 * The same structure as attn_avx2.c with 16-float vectors: GEMM of 12 rows x 32 columns
 * (24 zmm accumulators), exp2 by the same split and polynomial (about 2e-7 relative), the softmax
 * 16 query columns at a time, and masked loads/stores for every remainder instead of scalar tails. */
#include "attention/attn_kernels.h"
#include "core/f16.h"

#include <immintrin.h>
#include <math.h>

#define VEC 16
#define PANEL 32
#define MR 12
#define INLINE static inline __attribute__((always_inline))
/* Full unrolling over the (constant) row count keeps the accumulator arrays in registers. */
#define UNROLL_ROWS _Pragma("GCC unroll 16")

/* ---- GEMM ------------------------------------------------------------------------------------- */

INLINE void kernel_2v(int32_t rows, int32_t k, const float *a, int64_t a_rs, int64_t a_cs, const float *b,
                      float *c, int64_t ldc, int accumulate) {
    __m512 c0[MR], c1[MR];
    UNROLL_ROWS
    for (int32_t r = 0; r < rows; r++) {
        c0[r] = accumulate ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
        c1[r] = accumulate ? _mm512_loadu_ps(c + r * ldc + VEC) : _mm512_setzero_ps();
    }
    for (int32_t kk = 0; kk < k; kk++) {
        __m512 b0 = _mm512_loadu_ps(b + (int64_t)kk * PANEL), b1 = _mm512_loadu_ps(b + (int64_t)kk * PANEL + VEC);
        const float *ak = a + kk * a_cs;
        UNROLL_ROWS
        for (int32_t r = 0; r < rows; r++) {
            __m512 av = _mm512_set1_ps(ak[r * a_rs]);
            c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
            c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
        }
    }
    UNROLL_ROWS
    for (int32_t r = 0; r < rows; r++) {
        _mm512_storeu_ps(c + r * ldc, c0[r]);
        _mm512_storeu_ps(c + r * ldc + VEC, c1[r]);
    }
}

INLINE void kernel_1v(int32_t rows, int32_t k, const float *a, int64_t a_rs, int64_t a_cs, const float *b,
                      float *c, int64_t ldc, int accumulate) {
    __m512 c0[MR];
    UNROLL_ROWS
    for (int32_t r = 0; r < rows; r++) c0[r] = accumulate ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
    for (int32_t kk = 0; kk < k; kk++) {
        __m512 b0 = _mm512_loadu_ps(b + (int64_t)kk * VEC);
        const float *ak = a + kk * a_cs;
        UNROLL_ROWS
        for (int32_t r = 0; r < rows; r++) c0[r] = _mm512_fmadd_ps(_mm512_set1_ps(ak[r * a_rs]), b0, c0[r]);
    }
    UNROLL_ROWS
    for (int32_t r = 0; r < rows; r++) _mm512_storeu_ps(c + r * ldc, c0[r]);
}

#define DISPATCH_ROWS(kernel, rows, ...) \
    switch (rows) {                      \
    case 1: kernel(1, __VA_ARGS__); break; \
    case 2: kernel(2, __VA_ARGS__); break; \
    case 3: kernel(3, __VA_ARGS__); break; \
    case 4: kernel(4, __VA_ARGS__); break; \
    case 5: kernel(5, __VA_ARGS__); break; \
    case 6: kernel(6, __VA_ARGS__); break; \
    case 7: kernel(7, __VA_ARGS__); break; \
    case 8: kernel(8, __VA_ARGS__); break; \
    case 9: kernel(9, __VA_ARGS__); break; \
    case 10: kernel(10, __VA_ARGS__); break; \
    case 11: kernel(11, __VA_ARGS__); break; \
    default: kernel(12, __VA_ARGS__); break; \
    }

static void gemm(int32_t m, int32_t n, int32_t k, const float *a, int64_t a_rs, int64_t a_cs,
                 const float *b, float *c, int64_t ldc, int accumulate) {
    for (int32_t c0 = 0; c0 < n;) {
        int32_t w = n - c0 >= PANEL ? PANEL : VEC;
        const float *bp = b + (int64_t)c0 * k;
        for (int32_t i = 0; i < m; i += MR) {
            int32_t rows = OC_MIN(MR, m - i);
            if (w == PANEL) {
                DISPATCH_ROWS(kernel_2v, rows, k, a + i * a_rs, a_rs, a_cs, bp, c + i * ldc + c0, ldc, accumulate)
            } else {
                DISPATCH_ROWS(kernel_1v, rows, k, a + i * a_rs, a_rs, a_cs, bp, c + i * ldc + c0, ldc, accumulate)
            }
        }
        c0 += w;
    }
}

/* ---- packing ------------------------------------------------------------------------------------ */

/* Elements c .. c+n-1 (n <= 16) of a row, zeros above n. */
INLINE __m512 load16(const void *row, int32_t c, int32_t n, int32_t dtype) {
    __mmask16 m = (__mmask16)(n >= VEC ? 0xffff : (1u << n) - 1);
    if (dtype == OC_DTYPE_F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + c));
    return _mm512_maskz_loadu_ps(m, (const float *)row + c);
}

static void convert_rows(float *dst, const void *const *rows, int32_t n_rows, int32_t d, int32_t dtype) {
    for (int32_t t = 0; t < n_rows; t++) {
        float *out = dst + (int64_t)t * d;
        for (int32_t c = 0; c < d; c += VEC) {
            int32_t n = OC_MIN(VEC, d - c);
            _mm512_mask_storeu_ps(out + c, (__mmask16)(n >= VEC ? 0xffff : (1u << n) - 1), load16(rows[t], c, n, dtype));
        }
    }
}

static void pack_v(float *dst, const void *const *rows, int32_t n_keys, int32_t d, int32_t dpad, int32_t dtype) {
    for (int32_t c = 0; c < dpad; c += VEC) {
        int32_t p0 = c / PANEL * PANEL, w = dpad - p0 >= PANEL ? PANEL : VEC;
        float *base = dst + (int64_t)p0 * n_keys + (c - p0);
        int32_t n = OC_MAX(0, OC_MIN(VEC, d - c));
        for (int32_t t = 0; t < n_keys; t++) _mm512_storeu_ps(base + (int64_t)t * w, load16(rows[t], c, n, dtype));
    }
}

/* ---- softmax pieces ------------------------------------------------------------------------------- */

INLINE __m512 exp2_v(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-125.0f);
    __m512 xc = _mm512_max_ps(x, lo);
    __m512 n = _mm512_roundscale_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(xc, n);
    __m512 p = _mm512_set1_ps(1.5403530393381608e-4f);   /* ln2^k / k!, k = 6 .. 0 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23);
    __m512 r = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), e));
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ), r);
}

INLINE __mmask16 tail_mask(int32_t n_left) { return (__mmask16)((1u << n_left) - 1); }

static void softmax_cols(float *s, int64_t lds, int32_t n_keys, int32_t n_cols, float *m, float *l, float *alpha) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY), zero = _mm512_setzero_ps();
    for (int32_t c = 0; c < n_cols; c += VEC) {
        __m512 mx = ninf;
        for (int32_t t = 0; t < n_keys; t++) mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + t * lds + c));
        __m512 m_old = _mm512_loadu_ps(m + c), m_new = _mm512_max_ps(m_old, mx);
        __mmask16 old_empty = _mm512_cmp_ps_mask(m_old, ninf, _CMP_EQ_OQ);
        __m512 sub = _mm512_mask_mov_ps(m_new, _mm512_cmp_ps_mask(m_new, ninf, _CMP_EQ_OQ), zero);   /* no -inf - -inf */
        __m512 sum = zero;
        for (int32_t t = 0; t < n_keys; t++) {
            __m512 e = exp2_v(_mm512_sub_ps(_mm512_loadu_ps(s + t * lds + c), sub));
            _mm512_storeu_ps(s + t * lds + c, e);
            sum = _mm512_add_ps(sum, e);
        }
        __m512 a = _mm512_mask_mov_ps(exp2_v(_mm512_sub_ps(m_old, sub)), old_empty, zero);
        _mm512_storeu_ps(alpha + c, a);
        _mm512_storeu_ps(l + c, _mm512_fmadd_ps(_mm512_loadu_ps(l + c), a, sum));
        _mm512_storeu_ps(m + c, m_new);
    }
}

/* Packing Q^T uses 256-bit transposes on every x86 ISA: attn_avx2.c's, with this table's panel width. */
static void pack_qt(float *dst, const float *const *rows, int32_t n_rows, int32_t n_cols, int32_t d, float scale) {
    oc_attn_avx2_pack_qt(dst, rows, n_rows, n_cols, d, scale, PANEL, VEC);
}

static void scale(float *dst, const float *src, int32_t n, float a) {
    __m512 av = _mm512_set1_ps(a);
    int32_t t = 0;
    for (; t + VEC <= n; t += VEC) _mm512_storeu_ps(dst + t, _mm512_mul_ps(_mm512_loadu_ps(src + t), av));
    if (t < n) {
        __mmask16 mask = tail_mask(n - t);
        _mm512_mask_storeu_ps(dst + t, mask, _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, src + t), av));
    }
}

static const oc_attn_kernels table = { "avx512", VEC, PANEL, gemm, convert_rows, pack_v, softmax_cols, pack_qt, scale };

const oc_attn_kernels *oc_attn_kernels_avx512(void) { return &table; }
