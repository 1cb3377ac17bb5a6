/* attn_avx512.c: attention micro-kernels for x86-64 AVX-512 F/BW/VL/DQ (attn_kernels.h).
 * The same structure as attn_avx2.c with 16-float vectors: GEMM of 12 rows x 32 columns
 * (24 zmm accumulators), exp2 by the same split and polynomial (about 2e-7 relative), the softmax
 * 16 query columns at a time, and masked loads/stores for every remainder instead of scalar tails. */
#include "attention/attn_kernels.h"
#include "core/f16.h"
#include "kernels/exp2_avx512.h"

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

#define DISPATCH_ROWS OC_ATTN_DISPATCH_ROWS_12

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
INLINE __m512 load16m(const void *row, int32_t c, __mmask16 m, int32_t dtype) {
    if (dtype == OC_DTYPE_F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + c));
    return _mm512_maskz_loadu_ps(m, (const float *)row + c);
}

INLINE __m512 load16f(const void *row, int32_t c, int32_t dtype) {
    if (dtype == OC_DTYPE_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + c)));
    return _mm512_loadu_ps((const float *)row + c);
}

INLINE __m512 load16(const void *row, int32_t c, int32_t n, int32_t dtype) {
    return load16m(row, c, (__mmask16)(n >= VEC ? 0xffff : (1u << n) - 1), dtype);
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
            __m512 e = oc_exp2_avx512(_mm512_sub_ps(_mm512_loadu_ps(s + t * lds + c), sub));
            _mm512_storeu_ps(s + t * lds + c, e);
            sum = _mm512_add_ps(sum, e);
        }
        __m512 a = _mm512_mask_mov_ps(oc_exp2_avx512(_mm512_sub_ps(m_old, sub)), old_empty, zero);
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

/* ---- direct path (decode): K and V rows read in place ---------------------------------------------- */

/* UBSan's checks are left out of these kernels: with ASan and UBSan together clang did not finish
 * compiling them in 20 minutes (either alone: 9-23 s). ASan still checks every access, and
 * test_attn compares them with double sums. */
#define NO_UBSAN __attribute__((no_sanitize("undefined")))
#define DIRECT INLINE NO_UBSAN

/* Lane i of the result = the sum of the 16 lanes of a[i]: a transposing reduction of 15 combines
 * (two shuffles and an add each) instead of 16 separate reductions of 4 shuffles and 4 adds. Each
 * level halves the vectors and doubles the sums a vector holds; the inputs are taken in 4 x 4
 * transposed order (a[4 (i % 4) + i / 4] as input i), which puts the results in natural order. */
DIRECT __m512 hsum16(const __m512 a[16]) {
    __m512 b[8], c[4], e[2];
    UNROLL_ROWS
    for (int j = 0; j < 8; j++) {   /* 256-bit halves: quarters 0-1 sum input 2j, 2-3 input 2j + 1 */
        __m512 x = a[(2 * j) % 4 * 4 + (2 * j) / 4], y = a[(2 * j + 1) % 4 * 4 + (2 * j + 1) / 4];
        b[j] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
    }
    UNROLL_ROWS
    for (int j = 0; j < 4; j++)     /* quarter k sums input 4j + k */
        c[j] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * j], b[2 * j + 1], 0x88),
                             _mm512_shuffle_f32x4(b[2 * j], b[2 * j + 1], 0xDD));
    UNROLL_ROWS
    for (int j = 0; j < 2; j++)     /* quarter k: elements 0-1 input 8j + k, 2-3 input 8j + 4 + k */
        e[j] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * j], c[2 * j + 1], 0x44),
                             _mm512_shuffle_ps(c[2 * j], c[2 * j + 1], 0xEE));
    /* lane 4k + m: input 4m + k, which is a[4k + m] */
    return _mm512_add_ps(_mm512_shuffle_ps(e[0], e[1], 0x88), _mm512_shuffle_ps(e[0], e[1], 0xDD));
}

/* The rows [t0, t1) of a tile into L1 ahead of use: K a few keys ahead, and the tile's V rows while
 * its K rows are dotted (a sparse head's rows are gathered, and a decode tile is 72 keys, so the
 * hardware prefetchers see little of a stream; measured from DRAM on Zen 4: 5-10% less time). */
#define PREFETCH_KEYS 8
DIRECT void prefetch_rows(const void *const *rows, int32_t t0, int32_t t1, int64_t row_bytes) {
    for (int32_t t = t0; t < t1; t++)   /* addresses formed as integers, as in matmul_avx2.c */
        for (uintptr_t a = (uintptr_t)rows[t], end = a + (uintptr_t)row_bytes; a < end; a += 64)
            _mm_prefetch((const char *)a, _MM_HINT_T0);
}

/* Rows q[0..R) against KB = 16 / RB keys (R <= RB): lane kb * RB + r = q_r . k_kb; keys past nk
 * repeat the last one (their lanes are not stored). Each K chunk is loaded and converted once for
 * all R rows; the query chunks come from L1. */
DIRECT __m512 dot_block(int RB, int R, const float *q, int32_t d, const void *const *krows, int32_t nk, int32_t dtype) {
    const int KB = VEC / RB;
    __m512 acc[16];
    UNROLL_ROWS
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    const void *kr[16];
    UNROLL_ROWS
    for (int kb = 0; kb < KB; kb++) kr[kb] = krows[kb < nk ? kb : nk - 1];
    int32_t c = 0;
    for (; c + VEC <= d; c += VEC) {   /* whole chunks: plain loads (a masked 16-bit load costs more) */
        __m512 kv[16];
        UNROLL_ROWS
        for (int kb = 0; kb < KB; kb++) kv[kb] = load16f(kr[kb], c, dtype);
        UNROLL_ROWS
        for (int r = 0; r < R; r++) {
            __m512 qv = _mm512_loadu_ps(q + (int64_t)r * d + c);
            UNROLL_ROWS
            for (int kb = 0; kb < KB; kb++) acc[kb * RB + r] = _mm512_fmadd_ps(qv, kv[kb], acc[kb * RB + r]);
        }
    }
    if (c < d) {
        __mmask16 m = tail_mask(d - c);
        __m512 kv[16];
        UNROLL_ROWS
        for (int kb = 0; kb < KB; kb++) kv[kb] = load16m(kr[kb], c, m, dtype);
        UNROLL_ROWS
        for (int r = 0; r < R; r++) {
            __m512 qv = _mm512_maskz_loadu_ps(m, q + (int64_t)r * d + c);
            UNROLL_ROWS
            for (int kb = 0; kb < KB; kb++) acc[kb * RB + r] = _mm512_fmadd_ps(qv, kv[kb], acc[kb * RB + r]);
        }
    }
    return hsum16(acc);
}

DIRECT void dot_run(int RB, int R, float *s, int64_t lds, const float *q, const void *const *krows, int32_t n_keys,
                    int32_t d, int32_t dtype, const void *const *vpf) {
    const int KB = VEC / RB;
    const __mmask16 rows = (__mmask16)((1u << R) - 1);
    int64_t row_bytes = (int64_t)d * (dtype == OC_DTYPE_F16 ? 2 : 4);
    for (int32_t t = 0; t < n_keys; t += KB) {
        int32_t nk = OC_MIN(KB, n_keys - t);
        prefetch_rows(krows, t + PREFETCH_KEYS, OC_MIN(n_keys, t + PREFETCH_KEYS + KB), row_bytes);
        if (vpf) prefetch_rows(vpf, t, t + nk, row_bytes);   /* V of the same keys, for acc_rows */
        __m512 v = dot_block(RB, R, q, d, krows + t, nk, dtype);
        _mm512_mask_storeu_ps(s + t * lds, rows, v);
        for (int32_t kb = 1; kb < nk; kb++)   /* key kb's lanes down to lane 0 */
            _mm512_mask_storeu_ps(s + (t + kb) * lds, rows,
                                  _mm512_permutexvar_ps(_mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8,
                                                                                          7, 6, 5, 4, 3, 2, 1, 0),
                                                                         _mm512_set1_epi32(kb * RB)),
                                                        v));
    }
}

/* One function per row count, not inlined into one switch: a single function holding every copy
 * took clang with ASan over 20 minutes to compile (each copy alone: seconds). */
typedef void (*dot_fn)(float *s, int64_t lds, const float *q, const void *const *krows, int32_t n_keys, int32_t d,
                       int32_t dtype, const void *const *vpf);
#define DOT_FN(RB, R)                                                                                     \
    static __attribute__((noinline)) NO_UBSAN void dot_##R(float *s, int64_t lds, const float *q, const void *const *krows, \
                                                  int32_t n_keys, int32_t d, int32_t dtype, const void *const *vpf) { \
        dot_run(RB, R, s, lds, q, krows, n_keys, d, dtype, vpf);                                          \
    }
DOT_FN(1, 1) DOT_FN(2, 2) DOT_FN(4, 4) DOT_FN(8, 6) DOT_FN(8, 8)
/* Row counts without a copy of their own take the next larger one: the extra rows read scratch
 * beyond the last query row (inside the q block, scratch.c: cols x d floats) and their lanes are
 * never stored. Five copies, not eight: with ASan and UBSan together clang compiles each for a
 * long time. */
static const dot_fn dot_for_rows[8] = { dot_1, dot_2, dot_4, dot_4, dot_6, dot_6, dot_8, dot_8 };

static void dot_rows(float *s, int64_t lds, const float *q, int32_t n_rows, int32_t n_cols, const void *const *krows,
                     const void *const *vpf, int32_t n_keys, int32_t d, int32_t dtype) {
    for (int32_t r0 = 0; r0 < n_rows; r0 += 8)
        dot_for_rows[OC_MIN(8, n_rows - r0) - 1](s + r0, lds, q + (int64_t)r0 * d, krows, n_keys, d, dtype,
                                                 r0 ? NULL : vpf);
    for (int32_t c = n_rows; c < n_cols; c += VEC) {   /* the padding columns */
        __mmask16 m = tail_mask(OC_MIN(VEC, n_cols - c));
        for (int32_t t = 0; t < n_keys; t++) _mm512_mask_storeu_ps(s + t * lds + c, m, _mm512_setzero_ps());
    }
}

/* o[r][c0 .. c0 + 16 NV) += sum_t p[t][r] v_t[..] for R rows: R x NV accumulators (at most 24),
 * each V chunk converted once for the R rows, p broadcast from memory. NV is 4 (64 columns inside
 * d, plain loads) or 1 (16 columns, `m` masks those inside d). */
DIRECT void acc_block(int R, int NV, float *o, int64_t ldo, const float *p, int64_t ldp, const void *const *vrows,
                      int32_t n_keys, int32_t c0, __mmask16 m, int32_t dtype) {
    __m512 acc[6][4];
    UNROLL_ROWS
    for (int r = 0; r < R; r++) {
        UNROLL_ROWS
        for (int v = 0; v < NV; v++)
            acc[r][v] = NV == 4 ? _mm512_loadu_ps(o + r * ldo + c0 + v * VEC) : _mm512_maskz_loadu_ps(m, o + r * ldo + c0);
    }
    for (int32_t t = 0; t < n_keys; t++) {
        __m512 x[4];
        UNROLL_ROWS
        for (int v = 0; v < NV; v++) x[v] = NV == 4 ? load16f(vrows[t], c0 + v * VEC, dtype) : load16m(vrows[t], c0, m, dtype);
        const float *pt = p + t * ldp;
        UNROLL_ROWS
        for (int r = 0; r < R; r++) {
            __m512 pb = _mm512_set1_ps(pt[r]);
            UNROLL_ROWS
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(pb, x[v], acc[r][v]);
        }
    }
    UNROLL_ROWS
    for (int r = 0; r < R; r++) {
        UNROLL_ROWS
        for (int v = 0; v < NV; v++) {
            if (NV == 4) _mm512_storeu_ps(o + r * ldo + c0 + v * VEC, acc[r][v]);
            else _mm512_mask_storeu_ps(o + r * ldo + c0, m, acc[r][v]);
        }
    }
}

typedef void (*acc_fn)(float *o, int64_t ldo, const float *p, int64_t ldp, const void *const *vrows, int32_t n_keys,
                       int32_t c0, __mmask16 m, int32_t dtype);
#define ACC_FN(R, NV)                                                                                     \
    static __attribute__((noinline)) NO_UBSAN void acc_##R##_##NV(float *o, int64_t ldo, const float *p, int64_t ldp, \
                                                         const void *const *vrows, int32_t n_keys, int32_t c0, \
                                                         __mmask16 m, int32_t dtype) {                   \
        acc_block(R, NV, o, ldo, p, ldp, vrows, n_keys, c0, m, dtype);                                    \
    }
ACC_FN(1, 1) ACC_FN(2, 1) ACC_FN(3, 1) ACC_FN(4, 1) ACC_FN(5, 1) ACC_FN(6, 1)
ACC_FN(1, 4) ACC_FN(2, 4) ACC_FN(3, 4) ACC_FN(4, 4) ACC_FN(5, 4) ACC_FN(6, 4)
static const acc_fn acc_for_rows[2][6] = { { acc_1_1, acc_2_1, acc_3_1, acc_4_1, acc_5_1, acc_6_1 },
                                           { acc_1_4, acc_2_4, acc_3_4, acc_4_4, acc_5_4, acc_6_4 } };

static void acc_rows(float *o, int64_t ldo, const float *p, int64_t ldp, int32_t n_rows, const void *const *vrows,
                     int32_t n_keys, int32_t d, int32_t dtype) {
    for (int32_t c0 = 0; c0 < d;) {   /* 64 columns at a time while they last (V read once per 6 rows), then 16 */
        int32_t nv = d - c0 >= 4 * VEC ? 4 : 1;
        __mmask16 m = tail_mask(OC_MIN(VEC, d - c0));
        for (int32_t r0 = 0; r0 < n_rows; r0 += 6)
            acc_for_rows[nv == 4][OC_MIN(6, n_rows - r0) - 1](o + r0 * ldo, ldo, p + r0, ldp, vrows, n_keys, c0, m, dtype);
        c0 += nv * VEC;
    }
}

/* 16 rows of 16 floats transposed: r[k] holds element k of rows 0..15. */
INLINE void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
        __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
        t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xdd);
        t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
        t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
        r[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
        r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xdd);
    }
}

/* attn_kernels.h col_sums: 16 keys a vector, each lane one key's sum over the columns in order
 * (mul, then add: the plain loop's roundings; C11 contracts nothing into an FMA). */
static void col_sums(const float *s, int64_t lds, int32_t n_keys, int32_t n_cols, const float *w, float *out) {
    int32_t t0 = 0;
    for (; t0 + VEC <= n_keys; t0 += VEC) {
        __m512 acc = _mm512_setzero_ps();
        for (int32_t c0 = 0; c0 < n_cols; c0 += VEC) {
            __m512 r[VEC];
            for (int u = 0; u < VEC; u++) r[u] = _mm512_loadu_ps(s + (t0 + u) * lds + c0);
            transpose16(r);
            for (int k = 0; k < VEC; k++) acc = _mm512_add_ps(acc, _mm512_mul_ps(r[k], _mm512_set1_ps(w[c0 + k])));
        }
        _mm512_storeu_ps(out + t0, _mm512_add_ps(_mm512_loadu_ps(out + t0), acc));
    }
    for (int32_t t = t0; t < n_keys; t++) {
        float col = 0.0f;
        for (int32_t c = 0; c < n_cols; c++) {
            float p = s[t * lds + c] * w[c];
            col += p;
        }
        out[t] += col;
    }
}

static const oc_attn_kernels table = { "avx512", VEC, PANEL, gemm, convert_rows, pack_v, softmax_cols, pack_qt, scale,
                                       dot_rows, acc_rows, NULL, col_sums };   /* pack_p: f32 products */

const oc_attn_kernels *oc_attn_kernels_avx512(void) { return &table; }

/* The products on BF16 (attn_bf16_avx512.c); softmax, scaling and the direct path as above. */
static const oc_attn_kernels table_bf16 = { "avx512+bf16", VEC, PANEL, oc_attn_bf16_gemm, oc_attn_bf16_convert_rows,
                                            oc_attn_bf16_pack_v, softmax_cols, oc_attn_bf16_pack_qt, scale, dot_rows,
                                            acc_rows, oc_attn_bf16_pack_p, col_sums };

const oc_attn_kernels *oc_attn_kernels_avx512_bf16(void) { return &table_bf16; }
