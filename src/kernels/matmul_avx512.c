/* matmul_avx512.c: the AVX-512 kernel table (F/BW/VL/DQ; VNNI chosen at run time; contract in
 * matmul_kern.h). Same structure as matmul_avx2.c with zmm registers: an 8 tokens x 32 outputs f32
 * tile (16 zmm accumulators) and int8 tiles of 8 tokens x 16 outputs. Dequantizers, the GEMV
 * kernels (float dots but F16's and the 4-row int8 ones: memory bound), the X quantizer and the
 * packers are the AVX2 ones: every AVX-512 CPU runs them, and 512-bit versions would change nothing
 * measurable.
 * Int8 without VNNI: vpmaddubsw as on AVX2; AVX-512 has no vpsignb, so the sign of w is moved onto x
 * with a masked subtract. With VNNI, vpdpbusd (u8 x s8 -> i32, no int16 saturation) takes Q8_0
 * packed as w + 128 and Q4_0 as its nibble; both subtract offset * sum(x) per block.
 * With AVX512_BF16 (chosen at run time): the BF16 path's 8 tokens x 32 outputs tile, vdpbf16ps on
 * weight pairs packed per task, W and X rounded with vcvtne2ps2bf16; AUTO takes it where the CPU's dot products
 * are fast (oc_cpu_features.bf16_fast, opt-in for now: port.h), otherwise only OC_MATMUL_BF16 does. */
#include "kernels/matmul_kern.h"

#include <immintrin.h>
#include <string.h>

#define MR 8
#define NR 32
#define Q8_MR 8
#define Q8_GROUP 16

#define INLINE static inline __attribute__((always_inline))
#define VNNI __attribute__((target("avx512vnni")))
#define BF16 __attribute__((target("avx512bf16")))
#define BF16_MR 8

/* ---- float GEMM --------------------------------------------------------------------------------- */

static void pack_f32(const float *rows, size_t ld, int n_rows, int64_t kc, float *panel) {
    oc_mm_avx2_pack_f32(NR, rows, ld, n_rows, kc, panel);
}

/* Rows written out (ROWS8) for the same reason as in matmul_avx2.c: arrays of vector accumulators
 * are not reliably kept in registers. */
#define ROWS8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

INLINE void gemm_f32_tile(const int mr, int64_t kc, const float *x, size_t xs, const float *p, float *y, size_t ys,
                          int accumulate) {
    const __m512 z = _mm512_setzero_ps();
    __m512 c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z;
    __m512 c40 = z, c41 = z, c50 = z, c51 = z, c60 = z, c61 = z, c70 = z, c71 = z;
#define F32_LOAD(i)                                                 \
    if (mr > i && accumulate) {                                     \
        c##i##0 = _mm512_loadu_ps(y + (size_t)i * ys);              \
        c##i##1 = _mm512_loadu_ps(y + (size_t)i * ys + 16);         \
    }
    ROWS8(F32_LOAD)
    const float *x0 = x, *x1 = x + xs, *x2 = x + 2 * xs, *x3 = x + 3 * xs;
    const float *x4 = x + 4 * xs, *x5 = x + 5 * xs, *x6 = x + 6 * xs, *x7 = x + 7 * xs;
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(p + k * NR), b1 = _mm512_load_ps(p + k * NR + 16);
#define F32_STEP(i)                                                 \
        if (mr > i) {                                               \
            __m512 a = _mm512_set1_ps(x##i[k]);                     \
            c##i##0 = _mm512_fmadd_ps(a, b0, c##i##0);              \
            c##i##1 = _mm512_fmadd_ps(a, b1, c##i##1);              \
        }
        ROWS8(F32_STEP)
    }
#define F32_STORE(i)                                                \
    if (mr > i) {                                                   \
        _mm512_storeu_ps(y + (size_t)i * ys, c##i##0);              \
        _mm512_storeu_ps(y + (size_t)i * ys + 16, c##i##1);         \
    }
    ROWS8(F32_STORE)
    (void)x0; (void)x1; (void)x2; (void)x3; (void)x4; (void)x5; (void)x6; (void)x7;
}

static void gemm_f32(int mr, int64_t kc, const float *x, size_t xs, const float *p, float *y, size_t ys, int acc) {
    switch (mr) {
    case 8: gemm_f32_tile(8, kc, x, xs, p, y, ys, acc); break;
    case 7: gemm_f32_tile(7, kc, x, xs, p, y, ys, acc); break;
    case 6: gemm_f32_tile(6, kc, x, xs, p, y, ys, acc); break;
    case 5: gemm_f32_tile(5, kc, x, xs, p, y, ys, acc); break;
    case 4: gemm_f32_tile(4, kc, x, xs, p, y, ys, acc); break;
    case 3: gemm_f32_tile(3, kc, x, xs, p, y, ys, acc); break;
    case 2: gemm_f32_tile(2, kc, x, xs, p, y, ys, acc); break;
    default: gemm_f32_tile(1, kc, x, xs, p, y, ys, acc); break;
    }
}

/* ---- F16 GEMV dot product ------------------------------------------------------------------------ */

/* Decode (one token) reads each F16 weight once and widens it to f32: the AVX2 dot spends one
 * vcvtph2ps per 8 halves, this one per 16 (zmm), half the conversions per byte streamed, where the
 * conversion's port (Intel: p5, shared with shuffles) rather than DRAM may bind (an Emerald Rapids
 * core ran the AVX2 dot at 1.75x the AVX-512 read-only floor of the same bytes); four 16-wide
 * accumulators (64 halves, two cache lines, per step) hide the FMA latency, and a cache line of
 * weights takes 2 + 2 vector loads (W, x) instead of 4 + 4. On a Zen 4 core, where DRAM binds (both
 * dots stream about 27 GB/s, 1.08x its fastest read-only pass), it measured the same (BENCHMARKS.md
 * "matmul"). The order of the sums depends only on n (independent of threads). */
static float dot_f16(const void *w_row, const float *x, int64_t n) {
    const uint16_t *w = w_row;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
#define F16X16(at) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(w + (at))))
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(F16X16(i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(F16X16(i + 16), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(F16X16(i + 32), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(F16X16(i + 48), _mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(F16X16(i), _mm512_loadu_ps(x + i), a0);
#undef F16X16
    if (i < n) {   /* the last 1..15 halves, masked (never read past the row) */
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 wv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, w + i));
        a1 = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + i), a1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* ---- int8 GEMM ---------------------------------------------------------------------------------- */

static void pack_q8_0(const void *w, size_t row_bytes, int n_rows, int64_t n_blocks, void *panel) {
    oc_mm_avx2_pack_q8(OC_MM_I8_Q8_0, Q8_GROUP, 0, w, row_bytes, n_rows, n_blocks, panel);
}
static void pack_q8_0_biased(const void *w, size_t row_bytes, int n_rows, int64_t n_blocks, void *panel) {
    oc_mm_avx2_pack_q8(OC_MM_I8_Q8_0, Q8_GROUP, 0x80, w, row_bytes, n_rows, n_blocks, panel);   /* w + 128 */
}
static void pack_q4_0(const void *w, size_t row_bytes, int n_rows, int64_t n_blocks, void *panel) {
    oc_mm_avx2_pack_q8(OC_MM_I8_Q4_0, Q8_GROUP, 0, w, row_bytes, n_rows, n_blocks, panel);
}

INLINE __m512i bcast_x4(const oc_q8x *x, int s) {
    int32_t x4;
    memcpy(&x4, x->qs + 4 * s, 4);
    return _mm512_set1_epi32(x4);
}

/* The per-block epilogue shared by both kernels: acc += float(s32) * d_w * d_x. */
INLINE __m512 block_end(__m512 acc, __m512i s32, __m512 dw, const oc_q8x *x) {
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s32), _mm512_mul_ps(dw, _mm512_set1_ps(x->d)), acc);
}

/* Without VNNI: mr tokens x 16 outputs, vpmaddubsw as in matmul_avx2.c gemm_q8_tile. */
INLINE void gemm_q8_tile(const int i8_type, const int mr, int64_t n_blocks, const oc_q8x *x, size_t xs,
                         const unsigned char *panel, float *y, size_t ys, int accumulate) {
    const __m512i ones = _mm512_set1_epi16(1), zero = _mm512_setzero_si512();
    const size_t rec_bytes = OC_MM_Q8_RECORD_BYTES(Q8_GROUP);
    const __m512 z = _mm512_setzero_ps();
    __m512 acc0 = z, acc1 = z, acc2 = z, acc3 = z, acc4 = z, acc5 = z, acc6 = z, acc7 = z;
    const oc_q8x *x0 = x, *x1 = x + xs, *x2 = x + 2 * xs, *x3 = x + 3 * xs;
    const oc_q8x *x4 = x + 4 * xs, *x5 = x + 5 * xs, *x6 = x + 6 * xs, *x7 = x + 7 * xs;
#define Q8_LOAD(i) if (mr > i && accumulate) acc##i = _mm512_loadu_ps(y + (size_t)i * ys);
    ROWS8(Q8_LOAD)
    for (int64_t b = 0; b < n_blocks; b++) {
        const unsigned char *rec = panel + (size_t)b * rec_bytes;
        const __m512i *q = (const __m512i *)(rec + OC_MM_Q8_Q_OFFSET(Q8_GROUP));
        __m512i is0 = zero, is1 = zero, is2 = zero, is3 = zero, is4 = zero, is5 = zero, is6 = zero, is7 = zero;
        for (int s = 0; s < OC_QK / 4; s++) {
            __m512i w = _mm512_load_si512(q + s);
            __m512i aw = i8_type == OC_MM_I8_Q8_0 ? _mm512_abs_epi8(w) : w;
            __mmask64 neg = _mm512_movepi8_mask(w);   /* w < 0 */
#define Q8_STEP(i)                                                                                     \
            if (mr > i) {                                                                              \
                __m512i xb = bcast_x4(&x##i[b], s);                                                    \
                if (i8_type == OC_MM_I8_Q8_0) /* |w| * (x negated where w < 0) = w * x */              \
                    is##i = _mm512_add_epi32(is##i, _mm512_madd_epi16(_mm512_maddubs_epi16(            \
                                                        aw, _mm512_mask_sub_epi8(xb, neg, zero, xb)), ones)); \
                else /* nibble <= 15: 8 steps of pair sums <= 3810 stay in int16 */                    \
                    is##i = _mm512_add_epi16(is##i, _mm512_maddubs_epi16(w, xb));                      \
            }
            ROWS8(Q8_STEP)
        }
        __m512 dw = _mm512_load_ps((const float *)rec);
#define Q8_BLOCK_END(i)                                                                                \
        if (mr > i) {                                                                                  \
            __m512i s32 = is##i;                                                                       \
            if (i8_type == OC_MM_I8_Q4_0)                                                              \
                s32 = _mm512_sub_epi32(_mm512_madd_epi16(s32, ones), _mm512_slli_epi32(_mm512_set1_epi32(x##i[b].sum), 3)); \
            acc##i = block_end(acc##i, s32, dw, &x##i[b]);                                             \
        }
        ROWS8(Q8_BLOCK_END)
    }
#define Q8_STORE(i) if (mr > i) _mm512_storeu_ps(y + (size_t)i * ys, acc##i);
    ROWS8(Q8_STORE)
    (void)x0; (void)x1; (void)x2; (void)x3; (void)x4; (void)x5; (void)x6; (void)x7;
}

/* With VNNI: one vpdpbusd per token and 4-k step. The u8 operand is the packed weight (Q8_0 as
 * w + 128, Q4_0 as its nibble q + 8), the s8 operand x, so each block sums (w + off) x and
 * off * sum(x) is subtracted: off = 128 (shift 7) or 8 (shift 3). int32 cannot overflow:
 * |sum| <= 32 * 255 * 127. */
INLINE VNNI void gemm_q8_tile_vnni(const int i8_type, const int mr, int64_t n_blocks, const oc_q8x *x, size_t xs,
                                   const unsigned char *panel, float *y, size_t ys, int accumulate) {
    const int shift = i8_type == OC_MM_I8_Q8_0 ? 7 : 3;
    const __m512i zero = _mm512_setzero_si512();
    const size_t rec_bytes = OC_MM_Q8_RECORD_BYTES(Q8_GROUP);
    const __m512 z = _mm512_setzero_ps();
    __m512 acc0 = z, acc1 = z, acc2 = z, acc3 = z, acc4 = z, acc5 = z, acc6 = z, acc7 = z;
    const oc_q8x *x0 = x, *x1 = x + xs, *x2 = x + 2 * xs, *x3 = x + 3 * xs;
    const oc_q8x *x4 = x + 4 * xs, *x5 = x + 5 * xs, *x6 = x + 6 * xs, *x7 = x + 7 * xs;
    ROWS8(Q8_LOAD)
    for (int64_t b = 0; b < n_blocks; b++) {
        const unsigned char *rec = panel + (size_t)b * rec_bytes;
        const __m512i *q = (const __m512i *)(rec + OC_MM_Q8_Q_OFFSET(Q8_GROUP));
        __m512i is0 = zero, is1 = zero, is2 = zero, is3 = zero, is4 = zero, is5 = zero, is6 = zero, is7 = zero;
        for (int s = 0; s < OC_QK / 4; s++) {
            __m512i w = _mm512_load_si512(q + s);
#define VNNI_STEP(i) if (mr > i) is##i = _mm512_dpbusd_epi32(is##i, w, bcast_x4(&x##i[b], s));
            ROWS8(VNNI_STEP)
        }
        __m512 dw = _mm512_load_ps((const float *)rec);
#define VNNI_BLOCK_END(i)                                                                              \
        if (mr > i)                                                                                    \
            acc##i = block_end(acc##i, _mm512_sub_epi32(is##i, _mm512_slli_epi32(_mm512_set1_epi32(x##i[b].sum), shift)), \
                               dw, &x##i[b]);
        ROWS8(VNNI_BLOCK_END)
    }
    ROWS8(Q8_STORE)
    (void)x0; (void)x1; (void)x2; (void)x3; (void)x4; (void)x5; (void)x6; (void)x7;
}

#define GEMM_Q8(NAME, TILE, TYPE, ATTR)                                                                        \
    static ATTR void NAME(int mr, int64_t nb, const oc_q8x *x, size_t xs, const void *panel, float *y, size_t ys, \
                          int acc) {                                                                           \
        switch (mr) {                                                                                          \
        case 8: TILE(TYPE, 8, nb, x, xs, panel, y, ys, acc); break;                                            \
        case 7: TILE(TYPE, 7, nb, x, xs, panel, y, ys, acc); break;                                            \
        case 6: TILE(TYPE, 6, nb, x, xs, panel, y, ys, acc); break;                                            \
        case 5: TILE(TYPE, 5, nb, x, xs, panel, y, ys, acc); break;                                            \
        case 4: TILE(TYPE, 4, nb, x, xs, panel, y, ys, acc); break;                                            \
        case 3: TILE(TYPE, 3, nb, x, xs, panel, y, ys, acc); break;                                            \
        case 2: TILE(TYPE, 2, nb, x, xs, panel, y, ys, acc); break;                                            \
        default: TILE(TYPE, 1, nb, x, xs, panel, y, ys, acc); break;                                           \
        }                                                                                                      \
    }
#define NO_ATTR
GEMM_Q8(gemm_q8_0, gemm_q8_tile, OC_MM_I8_Q8_0, NO_ATTR)
GEMM_Q8(gemm_q4_0, gemm_q8_tile, OC_MM_I8_Q4_0, NO_ATTR)
GEMM_Q8(gemm_q8_0_vnni, gemm_q8_tile_vnni, OC_MM_I8_Q8_0, VNNI)
GEMM_Q8(gemm_q4_0_vnni, gemm_q8_tile_vnni, OC_MM_I8_Q4_0, VNNI)

/* ---- BF16 GEMM ---------------------------------------------------------------------------------- */

static BF16 void x_to_bf16(const float *x, int64_t n, uint16_t *out) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)   /* the second operand lands in the low half */
        _mm512_storeu_si512(out + i, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i)));
    for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i *)(out + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
    for (; i < n; i++) out[i] = (uint16_t)_mm_cvtsi128_si32((__m128i)_mm_cvtneps_pbh(_mm_set_ss(x[i])));
}

/* W rows, one row's block of KC inputs per call. (Software prefetch of the row's next block, here or
 * spread over the token tiles, measured no gain in the vision encoder on a Zen 4.) */
static BF16 void f16_to_bf16(const uint16_t *src, int64_t n, uint16_t *out) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 lo = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m512 hi = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i + 16)));
        _mm512_storeu_si512(out + i, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
    for (; i < n; i++)
        out[i] = (uint16_t)_mm_cvtsi128_si32((__m128i)_mm_cvtneps_pbh(_mm_cvtph_ps(_mm_cvtsi32_si128(src[i]))));
}

/* 32 rows of pairs transposed 8 x 8 words at a time with the AVX2 float packer (shuffles only: the
 * bits move unchanged); a partial panel or a tail of pairs takes the portable loop. */
static void pack_bf16(const uint32_t *rows, size_t ld, int n_rows, int64_t n_pairs, uint32_t *panel) {
    if (n_rows < OC_MM_BF16_NR || n_pairs % 8) {
        oc_mm_pack_bf16_generic(rows, ld, n_rows, n_pairs, panel);
        return;
    }
    oc_mm_avx2_pack_f32(OC_MM_BF16_NR, (const float *)(const void *)rows, ld, n_rows, n_pairs, (float *)(void *)panel);
}

/* mr tokens x 32 outputs: per input pair two panel vectors, one broadcast pair per token. */
INLINE BF16 void gemm_bf16_tile(const int mr, int64_t n_pairs, const uint32_t *x, size_t xs, const uint32_t *p, float *y,
                                size_t ys, int accumulate) {
    const __m512 z = _mm512_setzero_ps();
    __m512 c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z;
    __m512 c40 = z, c41 = z, c50 = z, c51 = z, c60 = z, c61 = z, c70 = z, c71 = z;
    ROWS8(F32_LOAD)
    const uint32_t *x0 = x, *x1 = x + xs, *x2 = x + 2 * xs, *x3 = x + 3 * xs;
    const uint32_t *x4 = x + 4 * xs, *x5 = x + 5 * xs, *x6 = x + 6 * xs, *x7 = x + 7 * xs;
    for (int64_t k = 0; k < n_pairs; k++) {
        __m512bh b0 = (__m512bh)_mm512_load_si512(p + k * 32), b1 = (__m512bh)_mm512_load_si512(p + k * 32 + 16);
#define BF16_STEP(i)                                                \
        if (mr > i) {                                               \
            __m512bh a = (__m512bh)_mm512_set1_epi32((int)x##i[k]); \
            c##i##0 = _mm512_dpbf16_ps(c##i##0, a, b0);             \
            c##i##1 = _mm512_dpbf16_ps(c##i##1, a, b1);             \
        }
        ROWS8(BF16_STEP)
    }
    ROWS8(F32_STORE)
    (void)x0; (void)x1; (void)x2; (void)x3; (void)x4; (void)x5; (void)x6; (void)x7;
}

static BF16 void gemm_bf16(int mr, int64_t n_pairs, const uint32_t *x, size_t xs, const uint32_t *p, float *y, size_t ys,
                           int acc) {
    switch (mr) {
    case 8: gemm_bf16_tile(8, n_pairs, x, xs, p, y, ys, acc); break;
    case 7: gemm_bf16_tile(7, n_pairs, x, xs, p, y, ys, acc); break;
    case 6: gemm_bf16_tile(6, n_pairs, x, xs, p, y, ys, acc); break;
    case 5: gemm_bf16_tile(5, n_pairs, x, xs, p, y, ys, acc); break;
    case 4: gemm_bf16_tile(4, n_pairs, x, xs, p, y, ys, acc); break;
    case 3: gemm_bf16_tile(3, n_pairs, x, xs, p, y, ys, acc); break;
    case 2: gemm_bf16_tile(2, n_pairs, x, xs, p, y, ys, acc); break;
    default: gemm_bf16_tile(1, n_pairs, x, xs, p, y, ys, acc); break;
    }
}

/* ---- tables ------------------------------------------------------------------------------------- */

#define COMMON_FIELDS                                                                                  \
    .isa = OC_ISA_AVX512, .mr = MR, .nr = NR,                                                          \
    .to_f32 = OC_MM_AVX2_TO_F32, .gemv_q8x = OC_MM_AVX2_GEMV_Q8X,                                       \
    .dot_f32 = { oc_mm_avx2_dot_f32, dot_f16, oc_mm_avx2_dot_bf16, oc_mm_avx2_dot_f32_q8_0,               \
                 oc_mm_avx2_dot_f32_q4_0, NULL, NULL },                                                \
    .gemv_long = OC_MM_AVX2_GEMV_LONG, .gemv_long_rows = OC_MM_AVX2_LONG_ROWS,                         \
    .pack_f32 = pack_f32, .gemm_f32 = gemm_f32,                                                        \
    .q8_mr = Q8_MR, .q8_nr = Q8_GROUP, .q8_group = Q8_GROUP, .q8_gemv_rows = OC_MM_AVX2_GEMV_ROWS,                                           \
    .quantize_q8x = oc_mm_avx2_quantize_q8x,                                                           \
    .int8_gemm = { 1, 1, 0, 0 }, .int8_gemv = { 1, 1, 1, 1 }

static const oc_matmul_kernels table_bw = {
    COMMON_FIELDS,
    .name = "avx512",
    .pack_q8 = { pack_q8_0, pack_q4_0, NULL, NULL },
    .gemm_q8 = { gemm_q8_0, gemm_q4_0, NULL, NULL },
};

static const oc_matmul_kernels table_vnni = {
    COMMON_FIELDS,
    .name = "avx512+vnni",
    .pack_q8 = { pack_q8_0_biased, pack_q4_0, NULL, NULL },
    .gemm_q8 = { gemm_q8_0_vnni, gemm_q4_0_vnni, NULL, NULL },
};

/* AVX512_BF16 CPUs all have VNNI (Cooper Lake, Sapphire Rapids, Zen 4). */
#define BF16_FIELDS .bf16_mr = BF16_MR, .x_to_bf16 = x_to_bf16, .gemm_bf16 = gemm_bf16, .pack_bf16 = pack_bf16, \
                    .f16_to_bf16 = f16_to_bf16

static const oc_matmul_kernels table_bf16 = {
    COMMON_FIELDS,
    .name = "avx512+vnni+bf16",
    .pack_q8 = { pack_q8_0_biased, pack_q4_0, NULL, NULL },
    .gemm_q8 = { gemm_q8_0_vnni, gemm_q4_0_vnni, NULL, NULL },
    BF16_FIELDS,
    .bf16_gemm = 1,
};

static const oc_matmul_kernels table_bf16_slow = {   /* BF16 kernels for OC_MATMUL_BF16 only */
    COMMON_FIELDS,
    .name = "avx512+vnni",
    .pack_q8 = { pack_q8_0_biased, pack_q4_0, NULL, NULL },
    .gemm_q8 = { gemm_q8_0_vnni, gemm_q4_0_vnni, NULL, NULL },
    BF16_FIELDS,
    .bf16_gemm = 0,
};

const oc_matmul_kernels *oc_matmul_kernels_avx512(const oc_cpu_features *cpu) {
    if (cpu->avx512bf16 && cpu->avx512vnni) return cpu->bf16_fast ? &table_bf16 : &table_bf16_slow;
    return cpu->avx512vnni ? &table_vnni : &table_bw;
}
