/* matmul_avx2.c: the AVX2 + FMA + F16C kernel table (x86-64; contract in matmul_kern.h).
 * Float path: 6 tokens x 16 outputs register tile (12 ymm accumulators; each k step loads two panel
 * vectors and broadcasts 6 X values), panels packed with 8x8 transposes.
 * Int8 path: groups of 8 outputs x 4 k per ymm; vpmaddubsw needs one unsigned operand, so Q8_0 uses
 * the sign trick (|w| * sign(x, w)) and Q4_0 feeds its unsigned nibbles directly (the -8 offset is
 * taken out with the block's sum of x), which also lets Q4_0 sum 8 steps in int16 without overflow.
 * Dequantizers compute exactly the scalar operations (no FMA) so they are bitwise equal to quant.c. */
#include "kernels/matmul_kern.h"

#include "core/f16.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* Sections: dequantizers (to_f32_*), GEMV dot products (float path), float GEMM (packing, 6x16 tile),
 * int8 path (X quantizer, dot products incl. Q4_K / Q6_K, packer, 4x8 tile), the table. */

#define MR 6
#define NR 16
#define Q8_MR 4
#define Q8_GROUP 8

#define INLINE static inline __attribute__((always_inline))

INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INLINE float f16(uint16_t h) { return _cvtsh_ss(h); }

INLINE __m256 load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
INLINE __m256 load_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
/* 8 signed bytes -> 8 floats */
INLINE __m256 i8_to_ps(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
INLINE __m256 i8x8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

/* ---- dequantizers --------------------------------------------------------------------------------- */

void oc_mm_avx2_to_f32_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_f16(h + i));
    for (; i < n; i++) dst[i] = f16(h[i]);
}

void oc_mm_avx2_to_f32_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_bf16(h + i));
    for (; i < n; i++) dst[i] = oc_bf16_to_f32(h[i]);
}

void oc_mm_avx2_to_f32_q8_0(const void *src, float *dst, int64_t n) {
    const oc_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / OC_QK; i++, b++, dst += OC_QK) {
        __m256 d = _mm256_set1_ps(f16(b->d));
        for (int j = 0; j < 4; j++) _mm256_storeu_ps(dst + 8 * j, _mm256_mul_ps(i8_to_ps(b->qs + 8 * j), d));
    }
}

/* 16 packed bytes -> 32 nibbles in element order: low nibbles first, then high nibbles */
INLINE __m256i unpack_nibbles(const uint8_t *qs) {
    __m128i q = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

void oc_mm_avx2_to_f32_q4_0(const void *src, float *dst, int64_t n) {
    const oc_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / OC_QK; i++, b++, dst += OC_QK) {
        __m256 d = _mm256_set1_ps(f16(b->d));
        __m256i q = _mm256_sub_epi8(unpack_nibbles(b->qs), _mm256_set1_epi8(8));
        __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
        _mm256_storeu_ps(dst + 0, _mm256_mul_ps(i8x8_to_ps(lo), d));
        _mm256_storeu_ps(dst + 8, _mm256_mul_ps(i8x8_to_ps(_mm_srli_si128(lo, 8)), d));
        _mm256_storeu_ps(dst + 16, _mm256_mul_ps(i8x8_to_ps(hi), d));
        _mm256_storeu_ps(dst + 24, _mm256_mul_ps(i8x8_to_ps(_mm_srli_si128(hi, 8)), d));
    }
}

/* 32 unsigned nibbles (one per byte) -> 32 floats d*q - m, in the scalar order of operations */
INLINE void store_dq_u8(__m256i q, float d, float m, float *dst) {
    __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    __m128i parts[4] = { lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8) };
    for (int j = 0; j < 4; j++) {
        __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[j]));
        _mm256_storeu_ps(dst + 8 * j, _mm256_sub_ps(_mm256_mul_ps(vd, v), vm));
    }
}

void oc_mm_avx2_to_f32_q4_k(const void *src, float *dst, int64_t n) {
    const oc_block_q4_k *b = src;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t i = 0; i < n / OC_QK_K; i++, b++) {
        float d = f16(b->d), dmin = f16(b->dmin);
        for (int g = 0; g < 4; g++) {
            int sc0, m0, sc1, m1;
            oc_q4_k_scale_min(b->scales, 2 * g, &sc0, &m0);
            oc_q4_k_scale_min(b->scales, 2 * g + 1, &sc1, &m1);
            __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * g));
            store_dq_u8(_mm256_and_si256(q, m4), d * (float)sc0, dmin * (float)m0, dst);
            store_dq_u8(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), d * (float)sc1, dmin * (float)m1, dst + 32);
            dst += 64;
        }
    }
}

/* 32 signed 6-bit-minus-32 values -> floats, 16 per scale: y = (d*sc) * q as quant.c computes it */
INLINE void store_q6(__m256i q, float d, int sc_lo, int sc_hi, float *dst) {
    __m256 s0 = _mm256_set1_ps(d * (float)sc_lo), s1 = _mm256_set1_ps(d * (float)sc_hi);
    __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    _mm256_storeu_ps(dst + 0, _mm256_mul_ps(s0, i8x8_to_ps(lo)));
    _mm256_storeu_ps(dst + 8, _mm256_mul_ps(s0, i8x8_to_ps(_mm_srli_si128(lo, 8))));
    _mm256_storeu_ps(dst + 16, _mm256_mul_ps(s1, i8x8_to_ps(hi)));
    _mm256_storeu_ps(dst + 24, _mm256_mul_ps(s1, i8x8_to_ps(_mm_srli_si128(hi, 8))));
}

void oc_mm_avx2_to_f32_q6_k(const void *src, float *dst, int64_t n) {
    const oc_block_q6_k *b = src;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), c32 = _mm256_set1_epi8(32);
    for (int64_t i = 0; i < n / OC_QK_K; i++, b++) {
        float d = f16(b->d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            const int8_t *sc = b->scales + 8 * h;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
            /* bits 0-1 of qh go to element l, 2-3 to l+32, 4-5 to l+64, 6-7 to l+96, as bits 4-5 of q */
            __m256i q0 = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
            __m256i q1 = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
            __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30));
            __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                         _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
            float *y = dst + 128 * h;
            store_q6(_mm256_sub_epi8(q0, c32), d, sc[0], sc[1], y);
            store_q6(_mm256_sub_epi8(q1, c32), d, sc[2], sc[3], y + 32);
            store_q6(_mm256_sub_epi8(q2, c32), d, sc[4], sc[5], y + 64);
            store_q6(_mm256_sub_epi8(q3, c32), d, sc[6], sc[7], y + 96);
        }
        dst += OC_QK_K;
    }
}

/* ---- GEMV dot products (float path) ------------------------------------------------------------- */

/* Four independent accumulators hide the FMA latency; the order depends only on n. */
#define DOT_BODY(LOAD, SCALAR)                                                                      \
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                     \
    int64_t i = 0;                                                                                  \
    for (; i + 32 <= n; i += 32) {                                                                  \
        a0 = _mm256_fmadd_ps(LOAD(w + i), _mm256_loadu_ps(x + i), a0);                              \
        a1 = _mm256_fmadd_ps(LOAD(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);                      \
        a2 = _mm256_fmadd_ps(LOAD(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);                    \
        a3 = _mm256_fmadd_ps(LOAD(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);                    \
    }                                                                                               \
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(LOAD(w + i), _mm256_loadu_ps(x + i), a0);       \
    float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));                    \
    for (; i < n; i++) s += SCALAR(w[i]) * x[i];                                                    \
    return s;

INLINE float ident(float v) { return v; }

float oc_mm_avx2_dot_f32(const void *w_row, const float *x, int64_t n) {
    const float *w = w_row;
    DOT_BODY(_mm256_loadu_ps, ident)
}
float oc_mm_avx2_dot_f16(const void *w_row, const float *x, int64_t n) {
    const uint16_t *w = w_row;
    DOT_BODY(load_f16, f16)
}
float oc_mm_avx2_dot_bf16(const void *w_row, const float *x, int64_t n) {
    const uint16_t *w = w_row;
    DOT_BODY(load_bf16, oc_bf16_to_f32)
}

/* Software prefetch of a later kernel call's weights (the GEMV_ROWS rows GEMV_PREFETCH_ROWS rows
 * ahead: one contiguous range, as rows are row_bytes apart), walked linearly over the call's steps,
 * one prefetch per 64-byte line: with 4 rows read side by side the hardware prefetchers alone
 * streamed W from DRAM at ~60% of the single-row kernel's rate. Prefetching each row at the offset
 * being read (4 strided streams) kept the Q4_0 kernel at ~1.5x the bandwidth floor even with its
 * arithmetic removed; one linear stream brought that to ~1.0-1.2x, and the full Q4_0 / Q4_K / Q6_K
 * kernels ran 15-25% faster (BENCHMARKS.md "matmul"). Two calls ahead (8 rows) rather than one:
 * the Q8_0 GEMV of the 2B up projection took 0.95-0.97x the time of a read-only pass over the same
 * bytes against 1.08-1.15x (Zen 4, one thread, AVX2 table, medians of 9 paired calls, two rounds in
 * a quieter hour); Q4_0 and Q4_K 8-10% faster; 12 rows ahead and the L2 hint were slower. Under
 * heavier load (8 rounds) the two were within the run-to-run spread (about 10%, seen between two
 * builds of identical code). Q6_K showed no gain and stays at one call ahead. The addresses may lie
 * past the end of W: a prefetch never faults, and they are formed as integers. */
#define GEMV_PREFETCH_ROWS (2 * OC_MM_AVX2_GEMV_ROWS)
typedef struct gemv_pf { uintptr_t next, upto; size_t step; } gemv_pf;

/* Spreads the next n_rows rows from ahead_rows rows past r0 over n_steps calls of gemv_pf_step. */
INLINE gemv_pf gemv_pf_init(const unsigned char *r0, size_t row_bytes, int64_t n_steps, int n_rows, int ahead_rows) {
    gemv_pf p;
    p.next = p.upto = (uintptr_t)r0 + (size_t)ahead_rows * row_bytes;
    p.step = ((size_t)n_rows * row_bytes + (size_t)n_steps - 1) / (size_t)n_steps;
    return p;
}

INLINE void gemv_pf_step(gemv_pf *p) {
    p->upto += p->step;
    for (; p->next < p->upto; p->next += 64) _mm_prefetch((const char *)p->next, _MM_HINT_T0);
}

/* Long rows (matmul_kern.h oc_gemv_rows_fn): R rows (up to 10) against each pair of x vectors, one
 * accumulator per row (R + 2 of the 16 registers; 2 R FMAs per step keep R chains of two busy).
 * x (8960 floats: 35 KiB) does not stay in L1 next to the weight stream, so each call reads it from
 * L2 once: 10 rows a call rather than 6 (two accumulators each) read it 40% less often; 2B down
 * projection, read paired (GEMV time / read-only pass), F32 0.93-1.01 -> 0.88-0.90, F16 1.32-1.38 ->
 * 1.25-1.34 (Zen 4, one thread, AVX2 table, 3 alternating runs, load 10-12: a small gain, seen in
 * every run). No software prefetch: with 6 rows a call the 2-byte types prefetched the next call's
 * rows as one linear range (as above) and F16 gained (median 1.02 against 1.04 of the read-only
 * pass); with 10 rows, F16 read paired 1.17-1.25 (median 1.22) without it against 1.24-1.43 (1.36)
 * with it, faster in 5 of 6 alternating runs, BF16 1.25-1.27 against 1.33-1.36 in 3 of 3 (same
 * conditions); F32 rows were always faster without it. The sums of a row are the same whatever R. */
#define LONG_BODY(T, LOAD, SCALAR)                                                                 \
    for (int r = 0; r < R; r++) {                                                                   \
        a[r] = _mm256_setzero_ps();                                                                 \
    }                                                                                               \
    int64_t i = 0;                                                                                  \
    for (; i + 16 <= n; i += 16) {                                                                  \
        __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);                        \
        _Pragma("GCC unroll 10") for (int r = 0; r < R; r++) {                                       \
            const T *wr = (const T *)((const unsigned char *)w + (size_t)r * row_bytes);            \
            a[r] = _mm256_fmadd_ps(LOAD(wr + i), x0, a[r]);                                         \
            a[r] = _mm256_fmadd_ps(LOAD(wr + i + 8), x1, a[r]);                                     \
        }                                                                                           \
    }                                                                                               \
    for (int r = 0; r < R; r++) {                                                                  \
        const T *wr = (const T *)((const unsigned char *)w + (size_t)r * row_bytes);                \
        float s = hsum(a[r]);                                                                        \
        for (int64_t e = i; e < n; e++) s += SCALAR(wr[e]) * x[e];                                  \
        y[r] = s;                                                                                   \
    }

INLINE void long_f32(int R, const void *w, size_t row_bytes, const float *x, int64_t n, float *y) {
    __m256 a[OC_MM_AVX2_LONG_ROWS];
    LONG_BODY(float, _mm256_loadu_ps, ident)
}
INLINE void long_f16(int R, const void *w, size_t row_bytes, const float *x, int64_t n, float *y) {
    __m256 a[OC_MM_AVX2_LONG_ROWS];
    LONG_BODY(uint16_t, load_f16, f16)
}
INLINE void long_bf16(int R, const void *w, size_t row_bytes, const float *x, int64_t n, float *y) {
    __m256 a[OC_MM_AVX2_LONG_ROWS];
    LONG_BODY(uint16_t, load_bf16, oc_bf16_to_f32)
}

#define LONG_DISPATCH(fn)                                                                            \
    switch (n_rows) {                                                                               \
    case 1: fn(1, w, row_bytes, x, n, y); break;                                                    \
    case 2: fn(2, w, row_bytes, x, n, y); break;                                                    \
    case 3: fn(3, w, row_bytes, x, n, y); break;                                                    \
    case 4: fn(4, w, row_bytes, x, n, y); break;                                                    \
    case 5: fn(5, w, row_bytes, x, n, y); break;                                                    \
    case 6: fn(6, w, row_bytes, x, n, y); break;                                                    \
    case 7: fn(7, w, row_bytes, x, n, y); break;                                                    \
    case 8: fn(8, w, row_bytes, x, n, y); break;                                                    \
    case 9: fn(9, w, row_bytes, x, n, y); break;                                                    \
    default: fn(10, w, row_bytes, x, n, y); break;                                                  \
    }

void oc_mm_avx2_gemv_long_f32(const void *w, size_t row_bytes, int n_rows, const float *x, int64_t n, float *y) {
    LONG_DISPATCH(long_f32)
}
void oc_mm_avx2_gemv_long_f16(const void *w, size_t row_bytes, int n_rows, const float *x, int64_t n, float *y) {
    LONG_DISPATCH(long_f16)
}
void oc_mm_avx2_gemv_long_bf16(const void *w, size_t row_bytes, int n_rows, const float *x, int64_t n, float *y) {
    LONG_DISPATCH(long_bf16)
}

float oc_mm_avx2_dot_f32_q8_0(const void *w_row, const float *x, int64_t n) {
    const oc_block_q8_0 *b = w_row;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    for (int64_t i = 0; i < n / OC_QK; i++, b++, x += OC_QK) {
        __m256 s0 = _mm256_mul_ps(i8_to_ps(b->qs), _mm256_loadu_ps(x));
        __m256 s1 = _mm256_mul_ps(i8_to_ps(b->qs + 8), _mm256_loadu_ps(x + 8));
        s0 = _mm256_fmadd_ps(i8_to_ps(b->qs + 16), _mm256_loadu_ps(x + 16), s0);
        s1 = _mm256_fmadd_ps(i8_to_ps(b->qs + 24), _mm256_loadu_ps(x + 24), s1);
        __m256 d = _mm256_set1_ps(f16(b->d));
        if (i & 1) acc1 = _mm256_fmadd_ps(_mm256_add_ps(s0, s1), d, acc1);
        else acc0 = _mm256_fmadd_ps(_mm256_add_ps(s0, s1), d, acc0);
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

float oc_mm_avx2_dot_f32_q4_0(const void *w_row, const float *x, int64_t n) {
    const oc_block_q4_0 *b = w_row;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    for (int64_t i = 0; i < n / OC_QK; i++, b++, x += OC_QK) {
        __m256i q = _mm256_sub_epi8(unpack_nibbles(b->qs), _mm256_set1_epi8(8));
        __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
        __m256 s0 = _mm256_mul_ps(i8x8_to_ps(lo), _mm256_loadu_ps(x));
        __m256 s1 = _mm256_mul_ps(i8x8_to_ps(_mm_srli_si128(lo, 8)), _mm256_loadu_ps(x + 8));
        s0 = _mm256_fmadd_ps(i8x8_to_ps(hi), _mm256_loadu_ps(x + 16), s0);
        s1 = _mm256_fmadd_ps(i8x8_to_ps(_mm_srli_si128(hi, 8)), _mm256_loadu_ps(x + 24), s1);
        __m256 d = _mm256_set1_ps(f16(b->d));
        if (i & 1) acc1 = _mm256_fmadd_ps(_mm256_add_ps(s0, s1), d, acc1);
        else acc0 = _mm256_fmadd_ps(_mm256_add_ps(s0, s1), d, acc0);
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

/* ---- float GEMM: packing and the 6x16 micro-kernel ----------------------------------------------- */

/* 8 rows of 8 floats (k .. k+7 of rows r0..r7) -> 8 vectors of one k each, at dst + i * stride */
INLINE void transpose8_store(__m256 r0, __m256 r1, __m256 r2, __m256 r3, __m256 r4, __m256 r5, __m256 r6, __m256 r7,
                             float *dst, const size_t stride) {
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_store_ps(dst + 0 * stride, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_store_ps(dst + 1 * stride, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_store_ps(dst + 2 * stride, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_store_ps(dst + 3 * stride, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_store_ps(dst + 4 * stride, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_store_ps(dst + 5 * stride, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_store_ps(dst + 6 * stride, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_store_ps(dst + 7 * stride, _mm256_permute2f128_ps(u3, u7, 0x31));
}

void oc_mm_avx2_pack_f32(int nr, const float *rows, size_t ld, int n_rows, int64_t kc, float *panel) {
    if (n_rows < nr) {   /* the last, partial micro-panel of a matrix: rare, keep it simple */
        oc_mm_pack_f32_generic(nr, rows, ld, n_rows, kc, panel);
        return;
    }
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8) {
        for (int h = 0; h < nr / 8; h++) {
            const float *r = rows + (size_t)(8 * h) * ld + (size_t)k;
            transpose8_store(_mm256_loadu_ps(r), _mm256_loadu_ps(r + ld), _mm256_loadu_ps(r + 2 * ld),
                             _mm256_loadu_ps(r + 3 * ld), _mm256_loadu_ps(r + 4 * ld), _mm256_loadu_ps(r + 5 * ld),
                             _mm256_loadu_ps(r + 6 * ld), _mm256_loadu_ps(r + 7 * ld), panel + k * nr + 8 * h, (size_t)nr);
        }
    }
    for (; k < kc; k++)
        for (int j = 0; j < nr; j++) panel[k * nr + j] = rows[(size_t)j * ld + (size_t)k];
}

static void pack_f32(const float *rows, size_t ld, int n_rows, int64_t kc, float *panel) {
    oc_mm_avx2_pack_f32(NR, rows, ld, n_rows, kc, panel);
}

/* The register tile is written out per row (ROWS expands a macro for rows 0..5) because compilers
 * do not reliably keep an array of vector accumulators in registers; with mr a constant after
 * inlining, the `mr > i` tests fold away. */
#define ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)

INLINE void gemm_f32_tile(const int mr, int64_t kc, const float *x, size_t xs, const float *p, float *y, size_t ys,
                          int accumulate) {
    const __m256 z = _mm256_setzero_ps();
    __m256 c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z, c40 = z, c41 = z, c50 = z, c51 = z;
#define F32_LOAD(i)                                                 \
    if (mr > i && accumulate) {                                     \
        c##i##0 = _mm256_loadu_ps(y + (size_t)i * ys);              \
        c##i##1 = _mm256_loadu_ps(y + (size_t)i * ys + 8);          \
    }
    ROWS6(F32_LOAD)
    const float *x0 = x, *x1 = x + xs, *x2 = x + 2 * xs, *x3 = x + 3 * xs, *x4 = x + 4 * xs, *x5 = x + 5 * xs;
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(p + k * NR), b1 = _mm256_load_ps(p + k * NR + 8);
#define F32_STEP(i)                                                 \
        if (mr > i) {                                               \
            __m256 a = _mm256_broadcast_ss(x##i + k);               \
            c##i##0 = _mm256_fmadd_ps(a, b0, c##i##0);              \
            c##i##1 = _mm256_fmadd_ps(a, b1, c##i##1);              \
        }
        ROWS6(F32_STEP)
    }
#define F32_STORE(i)                                                \
    if (mr > i) {                                                   \
        _mm256_storeu_ps(y + (size_t)i * ys, c##i##0);              \
        _mm256_storeu_ps(y + (size_t)i * ys + 8, c##i##1);          \
    }
    ROWS6(F32_STORE)
    (void)x0; (void)x1; (void)x2; (void)x3; (void)x4; (void)x5;
}

static void gemm_f32(int mr, int64_t kc, const float *x, size_t xs, const float *p, float *y, size_t ys, int acc) {
    switch (mr) {
    case 6: gemm_f32_tile(6, kc, x, xs, p, y, ys, acc); break;
    case 5: gemm_f32_tile(5, kc, x, xs, p, y, ys, acc); break;
    case 4: gemm_f32_tile(4, kc, x, xs, p, y, ys, acc); break;
    case 3: gemm_f32_tile(3, kc, x, xs, p, y, ys, acc); break;
    case 2: gemm_f32_tile(2, kc, x, xs, p, y, ys, acc); break;
    default: gemm_f32_tile(1, kc, x, xs, p, y, ys, acc); break;
    }
}

/* ---- int8 path ----------------------------------------------------------------------------------- */

void oc_mm_avx2_quantize_q8x(const float *x, int64_t n, int group, oc_q8x *out) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const int64_t run = (int64_t)group * OC_QK;
    for (int64_t g = 0; g < n / run; g++, x += run) {
        __m256 amax = _mm256_setzero_ps(), unord = _mm256_setzero_ps();
        for (int64_t j = 0; j < run; j += 8) {
            __m256 v = _mm256_loadu_ps(x + j);
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v));
            unord = _mm256_or_ps(unord, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        }
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        float a = _mm_cvtss_f32(m);
        int bad = _mm256_movemask_ps(unord) || a == INFINITY;   /* NaN / Inf: make Y NaN */
        __m256 id = _mm256_set1_ps(a > 0 ? 127.0f / a : 0.0f);
        for (int b = 0; b < group; b++, out++) {
            out->sum = 0;
            if (bad) {
                out->d = NAN;
                memset(out->qs, 0, sizeof out->qs);
                continue;
            }
            out->d = a / 127.0f;
            __m256i q[4];
            for (int j = 0; j < 4; j++)   /* nearest-even */
                q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + (size_t)b * OC_QK + 8 * j), id));
            __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
            out->sum = _mm_cvtsi128_si32(s4);
            /* packs interleave 128-bit lanes: fix the order with one cross-lane permute */
            __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)out->qs, p);
        }
    }
}

INLINE __m256i load_x32(const oc_q8x *x) { return _mm256_loadu_si256((const __m256i *)x->qs); }

/* ---- GEMV: GEMV_ROWS weight rows per call ---------------------------------------------------------
 * Every kernel walks the blocks of x once for up to 4 rows (row i written out as in gemm_f32_tile):
 * the x vector, its block scale and the offset terms of x are loaded or computed once per block and
 * shared. Per row and block of 32 the work is: unpack the weights, one vpmaddubsw (unsigned weights
 * x signed x where the format allows, so no sign trick), one vpmaddwd (which applies the 6/8-bit
 * sub-block scale of the K formats for free); then a convert and an FMA into an f32 accumulator per
 * block (Q8_0; Q4_0 for the 4 rows at once) or per super-block (Q4_K, Q6_K: the int32 sums of its 8
 * blocks), summed horizontally at the end. The scale products d_w * d_x of Q8_0 / Q4_0 are formed
 * for the 4 rows at once (their f16 d's gathered in a general register, one vcvtph2ps). Each row's
 * operations do not depend on n_rows. */
#define GEMV_ROWS OC_MM_AVX2_GEMV_ROWS
#define ROWS_GEMV(X) X(0) X(1) X(2) X(3)

/* Row i of the call, or row 0 when i >= n_rows (never read then; keeps the pointer in bounds). */
INLINE const unsigned char *gemv_row(const void *w, size_t row_bytes, int n_rows, int i) {
    return (const unsigned char *)w + (size_t)(i < n_rows ? i : 0) * row_bytes;
}

INLINE uint16_t load_u16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* The f16 values at p0..p3 (those of rows < nr) as 4 floats. */
INLINE __m128 f16x4(const int nr, const unsigned char *p0, const unsigned char *p1, const unsigned char *p2,
                    const unsigned char *p3) {
    uint64_t bits = load_u16(p0);
    if (nr > 1) bits |= (uint64_t)load_u16(p1) << 16;
    if (nr > 2) bits |= (uint64_t)load_u16(p2) << 32;
    if (nr > 3) bits |= (uint64_t)load_u16(p3) << 48;
    return _mm_cvtph_ps(_mm_set_epi64x(0, (long long)bits));
}

INLINE void store_hsums(const int nr, float *y, __m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    y[0] = hsum(a0);
    if (nr > 1) y[1] = hsum(a1);
    if (nr > 2) y[2] = hsum(a2);
    if (nr > 3) y[3] = hsum(a3);
}

/* The 4 rows' block scales d_w times dx: f16 d's at p0..p3 (those of rows < nr) gathered in a general
 * register, one vcvtph2ps. */
INLINE __m128 block_scales(const int nr, const unsigned char *p0, const unsigned char *p1, const unsigned char *p2,
                           const unsigned char *p3, float dx) {
    return _mm_mul_ps(f16x4(nr, p0, p1, p2, p3), _mm_set1_ps(dx));
}

/* Q8_0: signed weights, sign trick (|w| * sign(x, w) = w x; pair sums <= 2 * 128 * 127 fit int16),
 * per row one vpmaddwd to int32; then, as for Q4_0 below, three vphaddd fold the 4 rows' sums into
 * one vector (lane j of each half = row j; |sums| <= 4 * 2 * 32512, exact in f32), so each block
 * needs one conversion and one FMA against the 4 scales instead of one of each (and a broadcast)
 * per row (on weights in L2, Zen 4: 39 GB/s against 35-37 before). A row past nr contributes zeros
 * to its own lanes only: each row's sum does not depend on nr. */
INLINE void gemv_q8_0_rows(const int nr, const void *w, size_t row_bytes, const oc_q8x *x, int64_t n_blocks, float *y) {
    const __m256i ones = _mm256_set1_epi16(1);
    const unsigned char *r0 = gemv_row(w, row_bytes, nr, 0), *r1 = gemv_row(w, row_bytes, nr, 1);
    const unsigned char *r2 = gemv_row(w, row_bytes, nr, 2), *r3 = gemv_row(w, row_bytes, nr, 3);
    __m256 acc = _mm256_setzero_ps();     /* lanes j and 4 + j: row j, the two 128-bit halves of x */
    gemv_pf pfl = gemv_pf_init(r0, row_bytes, n_blocks, GEMV_ROWS, GEMV_PREFETCH_ROWS);
    for (int64_t b = 0; b < n_blocks; b++) {
        gemv_pf_step(&pfl);
        const size_t off = (size_t)b * sizeof(oc_block_q8_0);   /* d at off, the quants at off + 2 */
        const __m256i xv = load_x32(x + b);
        const __m128 s4 = block_scales(nr, r0 + off, r1 + off, r2 + off, r3 + off, x[b].d);
        __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
#define GEMV_Q8_0_ROW(i)                                                                                  \
        if (nr > i) {                                                                                     \
            __m256i wv = _mm256_loadu_si256((const __m256i *)(r##i + off + 2));                           \
            m##i = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv)), ones); \
        }
        ROWS_GEMV(GEMV_Q8_0_ROW)
        const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(m0, m1), _mm256_hadd_epi32(m2, m3));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h), _mm256_set_m128(s4, s4), acc);
    }
    _Alignas(16) float sum[GEMV_ROWS];
    _mm_store_ps(sum, _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1)));
    for (int i = 0; i < nr; i++) y[i] = sum[i];
}

/* Q4_0: the unsigned nibbles times x (|pair sums| <= 2 * 15 * 127 = 3810), per row and block one
 * vpmaddubsw; the 16 packed bytes are loaded into both 128-bit lanes and the high lane shifted by 4,
 * so lane 0 holds elements 0-15 and lane 1 elements 16-31, the order of x. Three vphaddw fold the 4
 * rows' products into one vector (lane j of each half = row j, |sums| <= 4 * 3810 fits int16), so
 * the block needs one vpmaddwd, conversion and FMA against the 4 scales instead of one per row (8%
 * faster in cache on this Zen 3-class core; a tree over 8 rows was slower). The -8 offset, 8 sum x,
 * comes off in int32 after the vpmaddwd, once for the 4 rows (in the lo half; the halves are summed
 * at the end under the same scale): exact, where taking it out in f32 would round two large terms
 * that can cancel (test_zero_weights_exact). A row past nr multiplies zeros, so each row's sum does
 * not depend on nr. */
INLINE void gemv_q4_0_rows(const int nr, const void *w, size_t row_bytes, const oc_q8x *x, int64_t n_blocks, float *y) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    const __m256i hi_shift = _mm256_setr_epi64x(0, 0, 4, 4);
    const unsigned char *r0 = gemv_row(w, row_bytes, nr, 0), *r1 = gemv_row(w, row_bytes, nr, 1);
    const unsigned char *r2 = gemv_row(w, row_bytes, nr, 2), *r3 = gemv_row(w, row_bytes, nr, 3);
    __m256 acc = _mm256_setzero_ps();     /* lanes j and 4 + j: row j, elements 0-15 and 16-31 */
    gemv_pf pfl = gemv_pf_init(r0, row_bytes, n_blocks, GEMV_ROWS, GEMV_PREFETCH_ROWS);
    for (int64_t b = 0; b < n_blocks; b++) {
        gemv_pf_step(&pfl);
        const size_t off = (size_t)b * sizeof(oc_block_q4_0);   /* d at off, the quants at off + 2 */
        const __m256i xv = load_x32(x + b);
        const __m128 s4 = block_scales(nr, r0 + off, r1 + off, r2 + off, r3 + off, x[b].d);
        __m256i p0 = _mm256_setzero_si256(), p1 = p0, p2 = p0, p3 = p0;
#define GEMV_Q4_0_ROW(i)                                                                                  \
        if (nr > i) {                                                                                     \
            __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(r##i + off + 2)));  \
            q = _mm256_and_si256(_mm256_srlv_epi64(q, hi_shift), m4);                                     \
            p##i = _mm256_maddubs_epi16(q, xv);                                                           \
        }
        ROWS_GEMV(GEMV_Q4_0_ROW)
        const __m256i h = _mm256_hadd_epi16(_mm256_hadd_epi16(p0, p1), _mm256_hadd_epi16(p2, p3));
        const int32_t x8 = 8 * x[b].sum;
        const __m256i s32 = _mm256_sub_epi32(_mm256_madd_epi16(h, ones), _mm256_setr_epi32(x8, x8, x8, x8, 0, 0, 0, 0));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_set_m128(s4, s4), acc);
    }
    _Alignas(16) float sum[GEMV_ROWS];
    _mm_store_ps(sum, _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1)));
    for (int i = 0; i < nr; i++) y[i] = sum[i];
}

/* The 8 (scale, min) pairs of a Q4_K block (packing in quant.h oc_q4_k_scale_min) as int32 lanes,
 * with 32-bit word operations: sub-blocks 0-3 keep 6 bits in bytes 0-3 / 4-7; 4-7 take the low 4 bits
 * from bytes 8-11 and the top 2 bits of bytes 0-3 / 4-7. */
INLINE void q4_k_scales(const uint8_t *s, __m256i *sc, __m256i *mn) {
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
    uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
    uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
    __m128i v = _mm_set_epi32((int)m_hi, (int)m_lo, (int)sc_hi, (int)sc_lo);
    *sc = _mm256_cvtepu8_epi32(v);
    *mn = _mm256_cvtepu8_epi32(_mm_srli_si128(v, 8));
}

/* Q4_K: sum_j (d sc_j q - dmin m_j) x_j over sub-blocks j (= x blocks) is
 *   d dx sum_j sc_j sum(q xq) - dmin dx sum_j m_j sum(xq),
 * as the driver quantizes X for Q4_K with one dx per super-block (group 8, matmul_kern.h): the
 * nibbles go straight into vpmaddubsw, vpmaddwd multiplies by sc_j (<= 63: |lane| <= 480060 per
 * sub-block, <= 3.9e6 for 8), the 8 sub-blocks sum in int32 and one conversion and FMA per
 * super-block scale by d dx (per sub-block dx, the conversion and FMA were 4 of each sub-block's 8
 * vector operations); the min terms are one 8-lane product per super-block against dx sum_j,
 * which is shared by the rows. */
INLINE void gemv_q4_k_rows(const int nr, const void *w, size_t row_bytes, const oc_q8x *x, int64_t n_blocks, float *y) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const unsigned char *r0 = gemv_row(w, row_bytes, nr, 0), *r1 = gemv_row(w, row_bytes, nr, 1);
    const unsigned char *r2 = gemv_row(w, row_bytes, nr, 2), *r3 = gemv_row(w, row_bytes, nr, 3);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    _Alignas(32) int32_t sc[GEMV_ROWS][8];   /* sc_j in both int16 halves: the vpmaddwd operand */
    _Alignas(16) float d[GEMV_ROWS];
    gemv_pf pfl = gemv_pf_init(r0, row_bytes, n_blocks / 2, GEMV_ROWS, GEMV_PREFETCH_ROWS);
    for (int64_t i = 0; i < n_blocks / 8; i++) {
        const oc_q8x *xb = x + 8 * i;
        const size_t off = (size_t)i * sizeof(oc_block_q4_k);
        const __m256 dx_sum = _mm256_mul_ps(_mm256_set1_ps(xb[0].d), _mm256_cvtepi32_ps(_mm256_setr_epi32(
            xb[0].sum, xb[1].sum, xb[2].sum, xb[3].sum, xb[4].sum, xb[5].sum, xb[6].sum, xb[7].sum)));
        __m256i sb0 = _mm256_setzero_si256(), sb1 = sb0, sb2 = sb0, sb3 = sb0;
#define GEMV_Q4_K_HEAD(i)                                                                                 \
        if (nr > i) {                                                                                     \
            const oc_block_q4_k *blk = (const oc_block_q4_k *)(r##i + off);                               \
            __m256i s, m;                                                                                 \
            q4_k_scales(blk->scales, &s, &m);                                                             \
            _mm256_store_si256((__m256i *)sc[i], _mm256_or_si256(s, _mm256_slli_epi32(s, 16)));          \
            uint32_t dd;                                                                                  \
            memcpy(&dd, &blk->d, 4);   /* d, dmin */                                                      \
            __m128 dv = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dd));                                         \
            d[i] = _mm_cvtss_f32(dv) * xb[0].d;                                                           \
            acc##i = _mm256_fnmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(m), dx_sum),                       \
                                      _mm256_broadcastss_ps(_mm_movehdup_ps(dv)), acc##i);                \
        }
        ROWS_GEMV(GEMV_Q4_K_HEAD)
        for (int g = 0; g < 4; g++) {
            const __m256i x0 = load_x32(&xb[2 * g]), x1 = load_x32(&xb[2 * g + 1]);
            gemv_pf_step(&pfl);
#define GEMV_Q4_K_STEP(i)                                                                                 \
            if (nr > i) {                                                                                 \
                __m256i q = _mm256_loadu_si256((const __m256i *)(((const oc_block_q4_k *)(r##i + off))->qs + 32 * g)); \
                __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_and_si256(q, m4), x0),         \
                                               _mm256_set1_epi32(sc[i][2 * g]));                          \
                __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), x1), \
                                               _mm256_set1_epi32(sc[i][2 * g + 1]));                      \
                sb##i = _mm256_add_epi32(sb##i, _mm256_add_epi32(p0, p1));                                \
            }
            ROWS_GEMV(GEMV_Q4_K_STEP)
        }
#define GEMV_Q4_K_TAIL(i) if (nr > i) acc##i = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sb##i), _mm256_broadcast_ss(&d[i]), acc##i);
        ROWS_GEMV(GEMV_Q4_K_TAIL)
    }
    store_hsums(nr, y, acc0, acc1, acc2, acc3);
}

/* vpshufb controls for x block p of a Q6_K half, applied to the half's 8 scales as int16 in both
 * 128-bit lanes: lane 0 (elements 0-15 of the x block) takes scale 2p, lane 1 (16-31) scale 2p+1. */
#define Q6_K_WORD(k) (uint8_t)(2 * (k)), (uint8_t)(2 * (k) + 1)
#define Q6_K_WORD8(k) Q6_K_WORD(k), Q6_K_WORD(k), Q6_K_WORD(k), Q6_K_WORD(k), Q6_K_WORD(k), Q6_K_WORD(k), Q6_K_WORD(k), Q6_K_WORD(k)
static const _Alignas(32) uint8_t q6_k_scale_shuffle[4][32] = {
    { Q6_K_WORD8(0), Q6_K_WORD8(1) }, { Q6_K_WORD8(2), Q6_K_WORD8(3) },
    { Q6_K_WORD8(4), Q6_K_WORD8(5) }, { Q6_K_WORD8(6), Q6_K_WORD8(7) },
};

/* The unsigned 6-bit values (0..63) of x block p of a Q6_K half (ql: its 64 low-bit bytes, qh: its 32
 * high-bit bytes): bits 0-1 of qh go to element l, 2-3 to l+32, 4-5 to l+64, 6-7 to l+96. */
INLINE __m256i q6_k_part(const int p, const uint8_t *ql, const uint8_t *qh) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256i l = _mm256_loadu_si256((const __m256i *)(ql + 32 * (p & 1))), h = _mm256_loadu_si256((const __m256i *)qh);
    if (p >= 2) l = _mm256_srli_epi16(l, 4);
    h = p == 0 ? _mm256_slli_epi16(h, 4) : p == 1 ? _mm256_slli_epi16(h, 2) : p == 2 ? h : _mm256_srli_epi16(h, 2);
    return _mm256_or_si256(_mm256_and_si256(l, m4), _mm256_and_si256(h, m30));
}

/* Q6_K: y = d dx sum sc_k (q - 32) xq over 16-element groups k, as the driver quantizes X for Q6_K
 * with one dx per super-block (group 8, matmul_kern.h). The unsigned q go into vpmaddubsw and
 * 32 * (pair sums of x), shared by the rows, is subtracted in int16 (|(q - 32) pair sums| <= 8128);
 * vpmaddwd multiplies by the signed 8-bit scale of each half of the x block (|lane| <= 2.1e6),
 * spread from the half's scales (int16, set once per half and row) by one vpshufb; the 8 x blocks
 * sum in int32 (<= 1.7e7) and one conversion and FMA per super-block scale by d dx (per x block,
 * those were 2 of each row's 10 vector operations). */
INLINE void gemv_q6_k_rows(const int nr, const void *w, size_t row_bytes, const oc_q8x *x, int64_t n_blocks, float *y) {
    const __m256i c32 = _mm256_set1_epi8(32);
    const unsigned char *r0 = gemv_row(w, row_bytes, nr, 0), *r1 = gemv_row(w, row_bytes, nr, 1);
    const unsigned char *r2 = gemv_row(w, row_bytes, nr, 2), *r3 = gemv_row(w, row_bytes, nr, 3);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    _Alignas(32) int16_t sc[GEMV_ROWS][16];   /* the current half's 8 scales, in both lanes */
    gemv_pf pfl = gemv_pf_init(r0, row_bytes, n_blocks / 2, GEMV_ROWS, GEMV_ROWS);
    for (int64_t i = 0; i < n_blocks / 8; i++) {
        const size_t off = (size_t)i * sizeof(oc_block_q6_k);
        const oc_q8x *xb = x + 8 * i;
        __m256i sb0 = _mm256_setzero_si256(), sb1 = sb0, sb2 = sb0, sb3 = sb0;
#define Q6_K_SCALES(i)                                                                                    \
        if (nr > i) {                                                                                     \
            const int8_t *s8 = ((const oc_block_q6_k *)(r##i + off))->scales + 8 * h_;                    \
            _mm256_store_si256((__m256i *)sc[i],                                                          \
                               _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)s8)))); \
        }
#define Q6_K_ROW(i)                                                                                       \
        if (nr > i) {                                                                                     \
            const oc_block_q6_k *blk = (const oc_block_q6_k *)(r##i + off);                               \
            __m256i sv = _mm256_shuffle_epi8(_mm256_load_si256((const __m256i *)sc[i]), shuf);            \
            __m256i q = q6_k_part(p_, blk->ql + 64 * h_, blk->qh + 32 * h_);                              \
            __m256i s = _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(q, xv), x32), sv);        \
            sb##i = _mm256_add_epi32(sb##i, s);                                                           \
        }
/* x block p of half h (constants: the unpacking in q6_k_part folds) */
#define Q6_K_STEP(h, p)                                                                                   \
        {                                                                                                 \
            const int h_ = (h), p_ = (p);                                                                 \
            if (!(p_ & 1)) gemv_pf_step(&pfl);                                                            \
            const __m256i xv = load_x32(xb + 4 * h_ + p_), x32 = _mm256_maddubs_epi16(c32, xv);           \
            const __m256i shuf = _mm256_load_si256((const __m256i *)q6_k_scale_shuffle[p_]);              \
            if (p_ == 0) { ROWS_GEMV(Q6_K_SCALES) }                                                       \
            ROWS_GEMV(Q6_K_ROW)                                                                           \
        }
        Q6_K_STEP(0, 0) Q6_K_STEP(0, 1) Q6_K_STEP(0, 2) Q6_K_STEP(0, 3)
        Q6_K_STEP(1, 0) Q6_K_STEP(1, 1) Q6_K_STEP(1, 2) Q6_K_STEP(1, 3)
#define GEMV_Q6_K_TAIL(i)                                                                                 \
        if (nr > i) acc##i = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sb##i),                                   \
                                             _mm256_set1_ps(f16(((const oc_block_q6_k *)(r##i + off))->d) * xb[0].d), acc##i);
        ROWS_GEMV(GEMV_Q6_K_TAIL)
    }
    store_hsums(nr, y, acc0, acc1, acc2, acc3);
}

/* One exported kernel per type: n_rows picks the instance with that many rows. */
#define GEMV_KERNEL(NAME, CALL)                                                                            \
    void NAME(const void *w, size_t row_bytes, int n_rows, const oc_q8x *x, int64_t n_blocks, float *y) { \
        switch (n_rows) {                                                                                  \
        case 4: CALL(4, w, row_bytes, x, n_blocks, y); break;                                              \
        case 3: CALL(3, w, row_bytes, x, n_blocks, y); break;                                              \
        case 2: CALL(2, w, row_bytes, x, n_blocks, y); break;                                              \
        default: CALL(1, w, row_bytes, x, n_blocks, y); break;                                             \
        }                                                                                                  \
    }
GEMV_KERNEL(oc_mm_avx2_gemv_q8_0, gemv_q8_0_rows)
GEMV_KERNEL(oc_mm_avx2_gemv_q4_0, gemv_q4_0_rows)
GEMV_KERNEL(oc_mm_avx2_gemv_q4_k, gemv_q4_k_rows)
GEMV_KERNEL(oc_mm_avx2_gemv_q6_k, gemv_q6_k_rows)

/* One micro-panel of `group` rows (a multiple of 8): per block and 8 rows, the rows' 32 stored bytes
 * are an 8x8 matrix of 4-byte units; its transpose is the record's q[s][j][u] layout (the float
 * transpose on the bit patterns). */
void oc_mm_avx2_pack_q8(int i8_type, int group, unsigned xor_q, const void *w, size_t row_bytes, int n_rows,
                        int64_t n_blocks, void *panel) {
    if (n_rows < group) {
        oc_mm_pack_q8_generic(i8_type, group, group, xor_q, w, row_bytes, n_rows, n_blocks, panel);
        return;
    }
    const size_t block_bytes = i8_type == OC_MM_I8_Q8_0 ? sizeof(oc_block_q8_0) : sizeof(oc_block_q4_0);
    const __m256i flip = _mm256_set1_epi8((char)xor_q);
    for (int64_t b = 0; b < n_blocks; b++) {
        unsigned char *rec = (unsigned char *)panel + (size_t)b * OC_MM_Q8_RECORD_BYTES(group);
        for (int h = 0; h < group / 8; h++) {
            __m256 r[8];
            for (int j = 0; j < 8; j++) {
                const unsigned char *blk = (const unsigned char *)w + (size_t)(8 * h + j) * row_bytes + (size_t)b * block_bytes;
                uint16_t dh;
                memcpy(&dh, blk, 2);
                ((float *)rec)[8 * h + j] = f16(dh);
                __m256i q = i8_type == OC_MM_I8_Q8_0 ? _mm256_loadu_si256((const __m256i *)(blk + 2)) : unpack_nibbles(blk + 2);
                r[j] = _mm256_castsi256_ps(_mm256_xor_si256(q, flip));
            }
            transpose8_store(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], (float *)(rec + OC_MM_Q8_Q_OFFSET(group)) + 8 * h,
                             (size_t)group);
        }
    }
}

static void pack_q8_0(const void *w, size_t row_bytes, int n_rows, int64_t n_blocks, void *panel) {
    oc_mm_avx2_pack_q8(OC_MM_I8_Q8_0, Q8_GROUP, 0, w, row_bytes, n_rows, n_blocks, panel);
}
static void pack_q4_0(const void *w, size_t row_bytes, int n_rows, int64_t n_blocks, void *panel) {
    oc_mm_avx2_pack_q8(OC_MM_I8_Q4_0, Q8_GROUP, 0, w, row_bytes, n_rows, n_blocks, panel);
}

/* mr tokens x 8 outputs. Per 4-k step: one panel load, mr broadcasts of 4 x bytes, mr byte dots.
 * Rows written out as in gemm_f32_tile. */
#define ROWS4(X) X(0) X(1) X(2) X(3)

INLINE void gemm_q8_tile(const int i8_type, const int mr, int64_t n_blocks, const oc_q8x *x, size_t xs,
                         const unsigned char *panel, float *y, size_t ys, int accumulate) {
    const __m256i ones = _mm256_set1_epi16(1);
    const size_t rec_bytes = OC_MM_Q8_RECORD_BYTES(Q8_GROUP);
    const __m256 z = _mm256_setzero_ps();
    __m256 acc0 = z, acc1 = z, acc2 = z, acc3 = z;
    const oc_q8x *x0 = x, *x1 = x + xs, *x2 = x + 2 * xs, *x3 = x + 3 * xs;
#define Q8_LOAD(i) if (mr > i && accumulate) acc##i = _mm256_loadu_ps(y + (size_t)i * ys);
    ROWS4(Q8_LOAD)
    for (int64_t b = 0; b < n_blocks; b++) {
        const unsigned char *rec = panel + (size_t)b * rec_bytes;
        const __m256i *q = (const __m256i *)(rec + OC_MM_Q8_Q_OFFSET(Q8_GROUP));
        __m256i is0 = _mm256_setzero_si256(), is1 = is0, is2 = is0, is3 = is0;
        for (int s = 0; s < OC_QK / 4; s++) {
            __m256i w = _mm256_load_si256(q + s);
            __m256i aw = i8_type == OC_MM_I8_Q8_0 ? _mm256_abs_epi8(w) : w;
#define Q8_STEP(i)                                                                                  \
            if (mr > i) {                                                                           \
                int32_t x4;                                                                         \
                memcpy(&x4, x##i[b].qs + 4 * s, 4);                                                 \
                __m256i xb = _mm256_set1_epi32(x4);                                                 \
                if (i8_type == OC_MM_I8_Q8_0) /* |w| sign(x, w) = w x; pair sums <= 2*128*127 */    \
                    is##i = _mm256_add_epi32(is##i, _mm256_madd_epi16(                              \
                                                        _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xb, w)), ones)); \
                else /* nibble <= 15: pair sums <= 3810, 8 steps stay below 32767 in int16 */       \
                    is##i = _mm256_add_epi16(is##i, _mm256_maddubs_epi16(w, xb));                   \
            }
            ROWS4(Q8_STEP)
        }
        __m256 dw = _mm256_load_ps((const float *)rec);
#define Q8_BLOCK_END(i)                                                                             \
        if (mr > i) {                                                                               \
            __m256i s32 = is##i;                                                                    \
            if (i8_type == OC_MM_I8_Q4_0)                                                           \
                s32 = _mm256_sub_epi32(_mm256_madd_epi16(s32, ones), _mm256_slli_epi32(_mm256_set1_epi32(x##i[b].sum), 3)); \
            acc##i = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_mul_ps(dw, _mm256_set1_ps(x##i[b].d)), acc##i); \
        }
        ROWS4(Q8_BLOCK_END)
    }
#define Q8_STORE(i) if (mr > i) _mm256_storeu_ps(y + (size_t)i * ys, acc##i);
    ROWS4(Q8_STORE)
    (void)x0; (void)x1; (void)x2; (void)x3;
}

#define GEMM_Q8(NAME, TYPE)                                                                                   \
    static void NAME(int mr, int64_t nb, const oc_q8x *x, size_t xs, const void *panel, float *y, size_t ys,   \
                     int acc) {                                                                                \
        switch (mr) {                                                                                          \
        case 4: gemm_q8_tile(TYPE, 4, nb, x, xs, panel, y, ys, acc); break;                                    \
        case 3: gemm_q8_tile(TYPE, 3, nb, x, xs, panel, y, ys, acc); break;                                    \
        case 2: gemm_q8_tile(TYPE, 2, nb, x, xs, panel, y, ys, acc); break;                                    \
        default: gemm_q8_tile(TYPE, 1, nb, x, xs, panel, y, ys, acc); break;                                   \
        }                                                                                                      \
    }
GEMM_Q8(gemm_q8_0, OC_MM_I8_Q8_0)
GEMM_Q8(gemm_q4_0, OC_MM_I8_Q4_0)

static const oc_matmul_kernels table = {
    .isa = OC_ISA_AVX2,
    .name = "avx2",
    .mr = MR,
    .nr = NR,
    .to_f32 = OC_MM_AVX2_TO_F32,
    .dot_f32 = OC_MM_AVX2_DOT_F32,
    .gemv_long = OC_MM_AVX2_GEMV_LONG,
    .gemv_long_rows = OC_MM_AVX2_LONG_ROWS,
    .pack_f32 = pack_f32,
    .gemm_f32 = gemm_f32,
    .q8_mr = Q8_MR,
    .q8_nr = Q8_GROUP,
    .q8_group = Q8_GROUP,
    .q8_gemv_rows = GEMV_ROWS,
    .quantize_q8x = oc_mm_avx2_quantize_q8x,
    .gemv_q8x = OC_MM_AVX2_GEMV_Q8X,
    .pack_q8 = { pack_q8_0, pack_q4_0, NULL, NULL },
    .gemm_q8 = { gemm_q8_0, gemm_q4_0, NULL, NULL },
    .int8_gemm = { 1, 1, 0, 0 },
    .int8_gemv = { 1, 1, 1, 1 },
};

const oc_matmul_kernels *oc_matmul_kernels_avx2(void) { return &table; }
