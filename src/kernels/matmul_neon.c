/* matmul_neon.c: the NEON kernel table (AArch64 Advanced SIMD; the intrinsics used also exist on
 * ARMv7 NEON-VFPv4; contract in matmul_kern.h). Same structure as matmul_avx2.c on 128-bit vectors:
 * a 6 tokens x 16 outputs f32 tile (24 accumulators of the 32 AArch64 vector registers), panels
 * packed with 4x4 transposes, f16 through vcvt_f32_f16. Int8: groups of 4 outputs x 4 k per vector,
 * products with vmull_s8 and pairwise accumulation (vpadalq_s16) in int32, or, on CPUs with the
 * ARMv8.2 dotprod extension (chosen at run time, table "neon+dotprod"), one SDOT per 16 products.
 * Q4_K / Q6_K dequantize with the scalar code (quant.c); their GEMV has int8 kernels like Q8_0 /
 * Q4_0 (4 rows per call, as in matmul_avx2.c). BF16 (ARMv8.6, table "neon+dotprod+bf16", chosen
 * when the CPU reports HWCAP2_BF16 but not HWCAP2_I8MM, or with OCELLUS_CPU_FEATURES=-i8mm): the
 * BF16 path's 3 tokens x 32 outputs tile, one BFDOT per 4
 * outputs x 2 inputs, on the panels every table shares (matmul_kern.h). ARMv8.6 matrix multiply
 * (table "neon+dotprod+bf16+i8mm", chosen when the CPU reports HWCAP2_I8MM and HWCAP2_BF16): SMMLA
 * for the Q8_0 / Q4_0 GEMM and BFMMLA for the BF16 path, 4 tokens (2 pairs) per tile, on panels
 * packed for their 2x2 blocks. */
#include "kernels/matmul_kern.h"

#include "core/f16.h"

#include <arm_neon.h>
#include <string.h>

#define MR 6
#define NR 16
#define Q8_MR 4
#define Q8_GROUP 4
#define Q8_NR 8

#define INLINE static inline __attribute__((always_inline))

INLINE float hsum(float32x4_t v) {
    float32x2_t s = vadd_f32(vget_low_f32(v), vget_high_f32(v));
    return vget_lane_f32(vpadd_f32(s, s), 0);
}

INLINE float32x4_t load_f16(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
INLINE float32x4_t load_bf16(const uint16_t *p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
/* 8 signed bytes -> two vectors of 4 floats */
INLINE void s8x8_to_f32(int8x8_t v, float32x4_t *lo, float32x4_t *hi) {
    int16x8_t w = vmovl_s8(v);
    *lo = vcvtq_f32_s32(vmovl_s16(vget_low_s16(w)));
    *hi = vcvtq_f32_s32(vmovl_s16(vget_high_s16(w)));
}

/* ---- dequantizers (the scalar operations, so bitwise equal to quant.c) ----------------------------- */

static void to_f32_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, load_f16(h + i));
    for (; i < n; i++) dst[i] = oc_f16_to_f32(h[i]);
}

static void to_f32_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, load_bf16(h + i));
    for (; i < n; i++) dst[i] = oc_bf16_to_f32(h[i]);
}

/* 16 signed bytes times d -> 16 floats */
INLINE void store_s8x16(int8x16_t q, float d, float *dst) {
    float32x4_t a, b, c, e;
    s8x8_to_f32(vget_low_s8(q), &a, &b);
    s8x8_to_f32(vget_high_s8(q), &c, &e);
    vst1q_f32(dst, vmulq_n_f32(a, d));
    vst1q_f32(dst + 4, vmulq_n_f32(b, d));
    vst1q_f32(dst + 8, vmulq_n_f32(c, d));
    vst1q_f32(dst + 12, vmulq_n_f32(e, d));
}

static void to_f32_q8_0(const void *src, float *dst, int64_t n) {
    const oc_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / OC_QK; i++, b++, dst += OC_QK) {
        float d = oc_f16_to_f32(b->d);
        store_s8x16(vld1q_s8(b->qs), d, dst);
        store_s8x16(vld1q_s8(b->qs + 16), d, dst + 16);
    }
}

/* Q4_0 block -> elements 0..15 (low nibbles - 8) and 16..31 (high nibbles - 8) */
INLINE void q4_0_signed(const oc_block_q4_0 *b, int8x16_t *lo, int8x16_t *hi) {
    uint8x16_t q = vld1q_u8(b->qs);
    int8x16_t eight = vdupq_n_s8(8);
    *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), eight);
    *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), eight);
}

static void to_f32_q4_0(const void *src, float *dst, int64_t n) {
    const oc_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / OC_QK; i++, b++, dst += OC_QK) {
        int8x16_t lo, hi;
        q4_0_signed(b, &lo, &hi);
        float d = oc_f16_to_f32(b->d);
        store_s8x16(lo, d, dst);
        store_s8x16(hi, d, dst + 16);
    }
}

/* ---- GEMV dot products (float path) ------------------------------------------------------------ */

#define DOT_BODY(LOAD, SCALAR)                                                                  \
    float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;                                 \
    int64_t i = 0;                                                                              \
    for (; i + 16 <= n; i += 16) {                                                              \
        a0 = vfmaq_f32(a0, LOAD(w + i), vld1q_f32(x + i));                                      \
        a1 = vfmaq_f32(a1, LOAD(w + i + 4), vld1q_f32(x + i + 4));                              \
        a2 = vfmaq_f32(a2, LOAD(w + i + 8), vld1q_f32(x + i + 8));                              \
        a3 = vfmaq_f32(a3, LOAD(w + i + 12), vld1q_f32(x + i + 12));                            \
    }                                                                                           \
    for (; i + 4 <= n; i += 4) a0 = vfmaq_f32(a0, LOAD(w + i), vld1q_f32(x + i));               \
    float s = hsum(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));                            \
    for (; i < n; i++) s += SCALAR(w[i]) * x[i];                                                \
    return s;

INLINE float ident(float v) { return v; }

static float dot_f32(const void *w_row, const float *x, int64_t n) {
    const float *w = w_row;
    DOT_BODY(vld1q_f32, ident)
}
static float dot_f16(const void *w_row, const float *x, int64_t n) {
    const uint16_t *w = w_row;
    DOT_BODY(load_f16, oc_f16_to_f32)
}
static float dot_bf16(const void *w_row, const float *x, int64_t n) {
    const uint16_t *w = w_row;
    DOT_BODY(load_bf16, oc_bf16_to_f32)
}

/* ---- float GEMM -------------------------------------------------------------------------------- */

/* rows r0..r3 of 4 floats -> the 4 columns, stored at dst + i * stride */
INLINE void transpose4_store(float32x4_t r0, float32x4_t r1, float32x4_t r2, float32x4_t r3, float *dst, size_t stride) {
    float32x4x2_t t01 = vtrnq_f32(r0, r1), t23 = vtrnq_f32(r2, r3);
    vst1q_f32(dst, vcombine_f32(vget_low_f32(t01.val[0]), vget_low_f32(t23.val[0])));
    vst1q_f32(dst + stride, vcombine_f32(vget_low_f32(t01.val[1]), vget_low_f32(t23.val[1])));
    vst1q_f32(dst + 2 * stride, vcombine_f32(vget_high_f32(t01.val[0]), vget_high_f32(t23.val[0])));
    vst1q_f32(dst + 3 * stride, vcombine_f32(vget_high_f32(t01.val[1]), vget_high_f32(t23.val[1])));
}

static void pack_f32(const float *rows, size_t ld, int n_rows, int64_t kc, float *panel) {
    if (n_rows < NR) {
        oc_mm_pack_f32_generic(NR, rows, ld, n_rows, kc, panel);
        return;
    }
    int64_t k = 0;
    for (; k + 4 <= kc; k += 4)
        for (int h = 0; h < NR / 4; h++) {
            const float *r = rows + (size_t)(4 * h) * ld + (size_t)k;
            transpose4_store(vld1q_f32(r), vld1q_f32(r + ld), vld1q_f32(r + 2 * ld), vld1q_f32(r + 3 * ld),
                             panel + k * NR + 4 * h, NR);
        }
    for (; k < kc; k++)
        for (int j = 0; j < NR; j++) panel[k * NR + j] = rows[(size_t)j * ld + (size_t)k];
}

/* Rows written out per row (ROWS6), as in matmul_avx2.c. */
#define ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)

INLINE void gemm_f32_tile(const int mr, int64_t kc, const float *x, size_t xs, const float *p, float *y, size_t ys,
                          int accumulate) {
    const float32x4_t z = vdupq_n_f32(0);
    float32x4_t c00 = z, c01 = z, c02 = z, c03 = z, c10 = z, c11 = z, c12 = z, c13 = z;
    float32x4_t c20 = z, c21 = z, c22 = z, c23 = z, c30 = z, c31 = z, c32 = z, c33 = z;
    float32x4_t c40 = z, c41 = z, c42 = z, c43 = z, c50 = z, c51 = z, c52 = z, c53 = z;
#define F32_LOAD(i)                                                             \
    if (mr > i && accumulate) {                                                 \
        const float *yi = y + (size_t)i * ys;                                   \
        c##i##0 = vld1q_f32(yi); c##i##1 = vld1q_f32(yi + 4);                   \
        c##i##2 = vld1q_f32(yi + 8); c##i##3 = vld1q_f32(yi + 12);              \
    }
    ROWS6(F32_LOAD)
    const float *x0 = x, *x1 = x + xs, *x2 = x + 2 * xs, *x3 = x + 3 * xs, *x4 = x + 4 * xs, *x5 = x + 5 * xs;
    for (int64_t k = 0; k < kc; k++) {
        const float *pk = p + k * NR;
        float32x4_t b0 = vld1q_f32(pk), b1 = vld1q_f32(pk + 4), b2 = vld1q_f32(pk + 8), b3 = vld1q_f32(pk + 12);
#define F32_STEP(i)                                                             \
        if (mr > i) {                                                           \
            float32x4_t a = vld1q_dup_f32(x##i + k);                            \
            c##i##0 = vfmaq_f32(c##i##0, a, b0); c##i##1 = vfmaq_f32(c##i##1, a, b1); \
            c##i##2 = vfmaq_f32(c##i##2, a, b2); c##i##3 = vfmaq_f32(c##i##3, a, b3); \
        }
        ROWS6(F32_STEP)
    }
#define F32_STORE(i)                                                            \
    if (mr > i) {                                                               \
        float *yi = y + (size_t)i * ys;                                         \
        vst1q_f32(yi, c##i##0); vst1q_f32(yi + 4, c##i##1);                     \
        vst1q_f32(yi + 8, c##i##2); vst1q_f32(yi + 12, c##i##3);                \
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

/* ---- activation quantization (int8 path) ------------------------------------------------------
 * oc_mm_quantize_q8x_scalar's results bit for bit (test_quantize_q8x_bitwise), 4 lanes at a time,
 * with ARMv7 operations only: amax is a max (exact in any order), d and 1/d the same f32 divisions,
 * x * id the same product, roundf's ties away from zero as truncate + 1 where |fraction| >= 1/2.
 * A run whose amax is NaN, Inf, zero or below 2^-100 goes to the scalar code (there x * id could
 * involve subnormals, which ARMv7 NEON flushes to zero, or an id that overflows). The scalar loop
 * cost 0.020 instructions per FLOP of the 256 x 512 x 512 Q8_0 GEMM under qemu, a fifth of it. */
static void quantize_q8x(const float *x, int64_t n, int group, oc_q8x *out) {
    const int64_t run = (int64_t)group * OC_QK;
    for (int64_t g = 0; g < n / run; g++, x += run, out += group) {
        float32x4_t m = vdupq_n_f32(0);
        for (int64_t j = 0; j < run; j += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + j)));   /* NaN: stays NaN */
        float32x2_t m2 = vpmax_f32(vget_low_f32(m), vget_high_f32(m));
        const float amax = vget_lane_f32(vpmax_f32(m2, m2), 0);
        if (!(amax >= 0x1p-100f) || !(amax <= 3.4028235e38f)) {
            oc_mm_quantize_q8x_scalar(x, run, group, out);
            continue;
        }
        const float id = 127.0f / amax;
        for (int b = 0; b < group; b++) {
            oc_q8x *o = out + b;
            const float *xb = x + (size_t)b * OC_QK;
            o->d = amax / 127.0f;
            int32x4_t sum = vdupq_n_s32(0);
            for (int j = 0; j < OC_QK; j += 8) {
                int32x4_t q[2];
                for (int h = 0; h < 2; h++) {
                    float32x4_t v = vmulq_n_f32(vld1q_f32(xb + j + 4 * h), id);
                    int32x4_t t = vcvtq_s32_f32(v);   /* toward zero */
                    uint32x4_t up = vcageq_f32(vsubq_f32(v, vcvtq_f32_s32(t)), vdupq_n_f32(0.5f));
                    int32x4_t sgn = vorrq_s32(vshrq_n_s32(vreinterpretq_s32_f32(v), 31), vdupq_n_s32(1));
                    t = vaddq_s32(t, vandq_s32(sgn, vreinterpretq_s32_u32(up)));
                    q[h] = vmaxq_s32(vminq_s32(t, vdupq_n_s32(127)), vdupq_n_s32(-127));
                    sum = vaddq_s32(sum, q[h]);
                }
                vst1_s8(o->qs + j, vqmovn_s16(vcombine_s16(vqmovn_s32(q[0]), vqmovn_s32(q[1]))));
            }
            int32x2_t s2 = vadd_s32(vget_low_s32(sum), vget_high_s32(sum));
            o->sum = vget_lane_s32(vpadd_s32(s2, s2), 0);
        }
    }
}

/* ---- int8 path --------------------------------------------------------------------------------- */
/* Every int8 kernel takes a constant dp: 0 for any NEON CPU, 1 for the instances that use SDOT,
 * which carry the DOTPROD target attribute and are only called when HWCAP_ASIMDDP is set. */

/* Two int32 vectors of (output, k pair) sums -> one vector of 4 output sums */
INLINE int32x4_t fold_pairs(int32x4_t lo, int32x4_t hi) {
    return vcombine_s32(vpadd_s32(vget_low_s32(lo), vget_high_s32(lo)), vpadd_s32(vget_low_s32(hi), vget_high_s32(hi)));
}

#if OC_HAVE_NEON_DOTPROD
#define DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
/* acc[j] += sum_u w[4j + u] * x[4j + u]. Not always_inline: the dp = 0 instances hold this call in
 * a branch they never take, and forcing it inline into code without the extension is an error. */
static inline DOTPROD int32x4_t sdot(int32x4_t acc, int8x16_t w, int8x16_t x) { return vdotq_s32(acc, w, x); }
#else
#define DOTPROD
/* The same sums without the extension (ARMv7, older compilers); only dp = 0 instances exist here. */
INLINE int32x4_t sdot(int32x4_t acc, int8x16_t w, int8x16_t x) {
    int32x4_t lo = vpaddlq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(x)));
    int32x4_t hi = vpaddlq_s16(vmull_s8(vget_high_s8(w), vget_high_s8(x)));
    return vaddq_s32(acc, fold_pairs(lo, hi));
}
#endif

/* 16 signed bytes of w times 16 of x, summed into 4 int32 lanes (which lanes depends on dp; the
 * callers only use the lanes' total or scale all lanes alike) */
INLINE int32x4_t dot16(const int dp, int32x4_t acc, int8x16_t w, int8x16_t x) {
    if (dp) return sdot(acc, w, x);
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(w), vget_low_s8(x)));
    return vpadalq_s16(acc, vmull_s8(vget_high_s8(w), vget_high_s8(x)));
}

/* ---- GEMV: GEMV_ROWS weight rows per call (the structure of matmul_avx2.c) ------------------------
 * Up to 4 rows walk the blocks of x together: x's 32 bytes and its scale are loaded once per block
 * for all rows, the 4 rows' f16 scales are converted with one vcvt_f32_f16 and multiplied by d_x
 * once; per row and block: the weights (Q4_0: nibble - 8), the integer dot, a convert and one FMA
 * into the row's accumulator, summed horizontally once per row. Software prefetch reads the next
 * call's rows at the same offset (prefetches never fault; the address is formed as an integer). */
#define GEMV_ROWS 4
#define ROWS_GEMV(X) X(0) X(1) X(2) X(3)

INLINE const unsigned char *gemv_row(const void *w, size_t row_bytes, int n_rows, int i) {
    return (const unsigned char *)w + (size_t)(i < n_rows ? i : 0) * row_bytes;
}

INLINE uint16_t load_u16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* The f16 values at p0..p3 (those of rows < nr) as 4 floats. */
INLINE float32x4_t f16x4(const int nr, const unsigned char *p0, const unsigned char *p1, const unsigned char *p2,
                         const unsigned char *p3) {
    uint64_t bits = load_u16(p0);
    if (nr > 1) bits |= (uint64_t)load_u16(p1) << 16;
    if (nr > 2) bits |= (uint64_t)load_u16(p2) << 32;
    if (nr > 3) bits |= (uint64_t)load_u16(p3) << 48;
    return vcvt_f32_f16(vreinterpret_f16_u64(vcreate_u64(bits)));
}

INLINE void store_hsums(const int nr, float *y, float32x4_t a0, float32x4_t a1, float32x4_t a2, float32x4_t a3) {
    y[0] = hsum(a0);
    if (nr > 1) y[1] = hsum(a1);
    if (nr > 2) y[2] = hsum(a2);
    if (nr > 3) y[3] = hsum(a3);
}

INLINE void prefetch_ahead(const unsigned char *row, size_t ahead_bytes) {
    __builtin_prefetch((const void *)((uintptr_t)row + ahead_bytes));
}

INLINE void gemv_q8_rows(const int dp, const int i8_type, const int nr, const void *w, size_t row_bytes, const oc_q8x *x,
                         int64_t n_blocks, float *y) {
    const size_t block_bytes = i8_type == OC_MM_I8_Q8_0 ? sizeof(oc_block_q8_0) : sizeof(oc_block_q4_0);
    const size_t ahead = (size_t)GEMV_ROWS * row_bytes;
    const unsigned char *r0 = gemv_row(w, row_bytes, nr, 0), *r1 = gemv_row(w, row_bytes, nr, 1);
    const unsigned char *r2 = gemv_row(w, row_bytes, nr, 2), *r3 = gemv_row(w, row_bytes, nr, 3);
    float32x4_t acc0 = vdupq_n_f32(0), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    const int64_t pf_every = 64 / (int64_t)block_bytes;   /* one prefetch per <= 64 bytes */
    for (int64_t b = 0; b < n_blocks; b++) {
        const size_t off = (size_t)b * block_bytes;   /* d at off, the quants at off + 2 */
        const int pf = b % pf_every == 0;
        const int8x16_t x0 = vld1q_s8(x[b].qs), x1 = vld1q_s8(x[b].qs + 16);
        const float32x4_t scale = vmulq_n_f32(f16x4(nr, r0 + off, r1 + off, r2 + off, r3 + off), x[b].d);
#define GEMV_Q8_ROW(i)                                                                                    \
        if (nr > i) {                                                                                     \
            if (pf) prefetch_ahead(r##i, ahead + off);                                                    \
            int8x16_t w0, w1;                                                                             \
            if (i8_type == OC_MM_I8_Q8_0) {                                                               \
                w0 = vld1q_s8((const int8_t *)(r##i + off + 2));                                          \
                w1 = vld1q_s8((const int8_t *)(r##i + off + 18));                                         \
            } else {                                                                                      \
                q4_0_signed((const oc_block_q4_0 *)(r##i + off), &w0, &w1);                               \
            }                                                                                             \
            int32x4_t s = dot16(dp, dot16(dp, vdupq_n_s32(0), w0, x0), w1, x1);                           \
            acc##i = vfmaq_f32(acc##i, vcvtq_f32_s32(s), vdupq_n_f32(vgetq_lane_f32(scale, i)));          \
        }
        ROWS_GEMV(GEMV_Q8_ROW)
    }
    store_hsums(nr, y, acc0, acc1, acc2, acc3);
}

/* Q4_K: d dx sum_j sc_j sum(q xq) - dmin dx sum_j m_j sum(xq) over sub-blocks j (= x blocks), as in
 * matmul_avx2.c: X has one dx per super-block (matmul_kern.h), so the sub-block scale multiplies
 * the integer dot and the 8 sub-blocks sum in int32 (|lane| <= 8 * 63 * 8 * 15 * 127), converted
 * and scaled by d dx once; the min terms are two 4-lane products per super-block against
 * dx sum_j (shared by the rows). Scales unpacked with 32-bit word operations (quant.h layout). */
INLINE void q4_k_scales(const uint8_t *s, uint8x8_t *sc, uint8x8_t *mn) {
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
    uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
    uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
    *sc = vcreate_u8((uint64_t)sc_lo | (uint64_t)sc_hi << 32);
    *mn = vcreate_u8((uint64_t)m_lo | (uint64_t)m_hi << 32);
}

INLINE void gemv_q4_k_rows(const int dp, const int nr, const void *w, size_t row_bytes, const oc_q8x *x, int64_t n_blocks, float *y) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const size_t ahead = (size_t)GEMV_ROWS * row_bytes;
    const unsigned char *r0 = gemv_row(w, row_bytes, nr, 0), *r1 = gemv_row(w, row_bytes, nr, 1);
    const unsigned char *r2 = gemv_row(w, row_bytes, nr, 2), *r3 = gemv_row(w, row_bytes, nr, 3);
    float32x4_t acc0 = vdupq_n_f32(0), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    uint8_t sc[GEMV_ROWS][8];
    float d[GEMV_ROWS];
    for (int64_t i = 0; i < n_blocks / 8; i++) {
        const oc_q8x *xb = x + 8 * i;
        const size_t off = (size_t)i * sizeof(oc_block_q4_k);
        float dxs[8];
        for (int j = 0; j < 8; j++) dxs[j] = xb[0].d * (float)xb[j].sum;
        const float32x4_t dx_sum0 = vld1q_f32(dxs), dx_sum1 = vld1q_f32(dxs + 4);
        int32x4_t sb0 = vdupq_n_s32(0), sb1 = sb0, sb2 = sb0, sb3 = sb0;
#define GEMV_Q4_K_HEAD(i)                                                                                 \
        if (nr > i) {                                                                                     \
            const oc_block_q4_k *blk = (const oc_block_q4_k *)(r##i + off);                               \
            uint8x8_t s, m;                                                                               \
            q4_k_scales(blk->scales, &s, &m);                                                             \
            vst1_u8(sc[i], s);                                                                            \
            d[i] = oc_f16_to_f32(blk->d) * xb[0].d;                                                       \
            uint16x8_t m16 = vmovl_u8(m);                                                                 \
            float32x4_t mins = vmulq_f32(vcvtq_f32_u32(vmovl_u16(vget_low_u16(m16))), dx_sum0);           \
            mins = vfmaq_f32(mins, vcvtq_f32_u32(vmovl_u16(vget_high_u16(m16))), dx_sum1);                \
            acc##i = vfmsq_f32(acc##i, mins, vdupq_n_f32(oc_f16_to_f32(blk->dmin)));                      \
        }
        ROWS_GEMV(GEMV_Q4_K_HEAD)
        for (int g = 0; g < 4; g++) {
            const int8x16_t xa0 = vld1q_s8(xb[2 * g].qs), xa1 = vld1q_s8(xb[2 * g].qs + 16);
            const int8x16_t xc0 = vld1q_s8(xb[2 * g + 1].qs), xc1 = vld1q_s8(xb[2 * g + 1].qs + 16);
#define GEMV_Q4_K_STEP(i)                                                                                 \
            if (nr > i) {                                                                                 \
                const uint8_t *q = ((const oc_block_q4_k *)(r##i + off))->qs + 32 * g;                    \
                if (g < 3) prefetch_ahead(r##i, ahead + off + 64 * (size_t)g);   /* 144 bytes */          \
                uint8x16_t qa = vld1q_u8(q), qb = vld1q_u8(q + 16);                                       \
                int32x4_t s0 = dot16(dp, dot16(dp, vdupq_n_s32(0), vreinterpretq_s8_u8(vandq_u8(qa, m4)), xa0), \
                                     vreinterpretq_s8_u8(vandq_u8(qb, m4)), xa1);                         \
                int32x4_t s1 = dot16(dp, dot16(dp, vdupq_n_s32(0), vreinterpretq_s8_u8(vshrq_n_u8(qa, 4)), xc0), \
                                     vreinterpretq_s8_u8(vshrq_n_u8(qb, 4)), xc1);                        \
                sb##i = vmlaq_n_s32(vmlaq_n_s32(sb##i, s0, sc[i][2 * g]), s1, sc[i][2 * g + 1]);          \
            }
            ROWS_GEMV(GEMV_Q4_K_STEP)
        }
#define GEMV_Q4_K_TAIL(i) if (nr > i) acc##i = vfmaq_f32(acc##i, vcvtq_f32_s32(sb##i), vdupq_n_f32(d[i]));
        ROWS_GEMV(GEMV_Q4_K_TAIL)
    }
    store_hsums(nr, y, acc0, acc1, acc2, acc3);
}

/* Q6_K: d sum_k sc_k sum((q - 32) x) over 16-element groups k, as in matmul_avx2.c: per x block the
 * two groups' integer dots are scaled by their 8-bit scales in int32 (|lane| <= 2 * 128 * 16256),
 * the dx FMAs sum a super-block, d scales it once. */
INLINE void gemv_q6_k_rows(const int dp, const int nr, const void *w, size_t row_bytes, const oc_q8x *x, int64_t n_blocks, float *y) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(3);
    const int8x16_t c32 = vdupq_n_s8(32);
    const size_t ahead = (size_t)GEMV_ROWS * row_bytes;
    const unsigned char *r0 = gemv_row(w, row_bytes, nr, 0), *r1 = gemv_row(w, row_bytes, nr, 1);
    const unsigned char *r2 = gemv_row(w, row_bytes, nr, 2), *r3 = gemv_row(w, row_bytes, nr, 3);
    float32x4_t acc0 = vdupq_n_f32(0), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    for (int64_t i = 0; i < n_blocks / 8; i++) {
        const size_t off = (size_t)i * sizeof(oc_block_q6_k);
        float32x4_t sb0 = vdupq_n_f32(0), sb1 = sb0, sb2 = sb0, sb3 = sb0;
        for (int h = 0; h < 2; h++)
            for (int p = 0; p < 4; p++) {
                const oc_q8x *xb = x + 8 * i + 4 * h + p;
                const int8x16_t x0 = vld1q_s8(xb->qs), x1 = vld1q_s8(xb->qs + 16);
                const float32x4_t dx = vdupq_n_f32(xb->d);
                const int8x16_t shift = vdupq_n_s8((int8_t)(-2 * p));
#define GEMV_Q6_K_STEP(i)                                                                                 \
                if (nr > i) {                                                                             \
                    const oc_block_q6_k *blk = (const oc_block_q6_k *)(r##i + off);                       \
                    if (!(p & 1)) prefetch_ahead(r##i, ahead + off + 56 * (size_t)(2 * h + p / 2));       \
                    const uint8_t *ql = blk->ql + 64 * h + 32 * (p & 1), *qh = blk->qh + 32 * h;          \
                    uint8x16_t la = vld1q_u8(ql), lb = vld1q_u8(ql + 16);                                 \
                    la = p < 2 ? vandq_u8(la, m4) : vshrq_n_u8(la, 4);                                    \
                    lb = p < 2 ? vandq_u8(lb, m4) : vshrq_n_u8(lb, 4);                                    \
                    /* bits 2p, 2p+1 of qh are bits 4-5 of q */                                           \
                    uint8x16_t ha = vshlq_n_u8(vandq_u8(vshlq_u8(vld1q_u8(qh), shift), m3), 4);           \
                    uint8x16_t hb = vshlq_n_u8(vandq_u8(vshlq_u8(vld1q_u8(qh + 16), shift), m3), 4);      \
                    int8x16_t wa = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(la, ha)), c32);                  \
                    int8x16_t wb = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lb, hb)), c32);                  \
                    int32x4_t s = vmulq_n_s32(dot16(dp, vdupq_n_s32(0), wa, x0), blk->scales[8 * h + 2 * p]); \
                    s = vmlaq_n_s32(s, dot16(dp, vdupq_n_s32(0), wb, x1), blk->scales[8 * h + 2 * p + 1]); \
                    sb##i = vfmaq_f32(sb##i, vcvtq_f32_s32(s), dx);                                       \
                }
                ROWS_GEMV(GEMV_Q6_K_STEP)
            }
#define GEMV_Q6_K_TAIL(i)                                                                                 \
        if (nr > i) acc##i = vfmaq_f32(acc##i, sb##i, vdupq_n_f32(oc_f16_to_f32(((const oc_block_q6_k *)(r##i + off))->d)));
        ROWS_GEMV(GEMV_Q6_K_TAIL)
    }
    store_hsums(nr, y, acc0, acc1, acc2, acc3);
}

/* One kernel per type and dp: n_rows picks the instance with that many rows. */
#define GEMV_KERNEL(NAME, ATTR, CALL, ...)                                                                 \
    static ATTR void NAME(const void *w, size_t row_bytes, int n_rows, const oc_q8x *x, int64_t n_blocks, float *y) { \
        switch (n_rows) {                                                                                  \
        case 4: CALL(__VA_ARGS__, 4, w, row_bytes, x, n_blocks, y); break;                                 \
        case 3: CALL(__VA_ARGS__, 3, w, row_bytes, x, n_blocks, y); break;                                 \
        case 2: CALL(__VA_ARGS__, 2, w, row_bytes, x, n_blocks, y); break;                                 \
        default: CALL(__VA_ARGS__, 1, w, row_bytes, x, n_blocks, y); break;                                \
        }                                                                                                  \
    }
#define GEMV_KERNELS(SUFFIX, ATTR, DP)                                                                     \
    GEMV_KERNEL(gemv_q8_0##SUFFIX, ATTR, gemv_q8_rows, DP, OC_MM_I8_Q8_0)                                  \
    GEMV_KERNEL(gemv_q4_0##SUFFIX, ATTR, gemv_q8_rows, DP, OC_MM_I8_Q4_0)                                  \
    GEMV_KERNEL(gemv_q4_k##SUFFIX, ATTR, gemv_q4_k_rows, DP)                                               \
    GEMV_KERNEL(gemv_q6_k##SUFFIX, ATTR, gemv_q6_k_rows, DP)
#define NO_ATTR
GEMV_KERNELS(, NO_ATTR, 0)
#if OC_HAVE_NEON_DOTPROD
GEMV_KERNELS(_dp, DOTPROD, 1)
#endif

static void pack_q8_0(const void *w, size_t row_bytes, int n_rows, int64_t n_blocks, void *panel) {
    oc_mm_pack_q8_generic(OC_MM_I8_Q8_0, Q8_GROUP, Q8_NR, 0, w, row_bytes, n_rows, n_blocks, panel);
}
static void pack_q4_0(const void *w, size_t row_bytes, int n_rows, int64_t n_blocks, void *panel) {
    oc_mm_pack_q8_generic(OC_MM_I8_Q4_0, Q8_GROUP, Q8_NR, 0, w, row_bytes, n_rows, n_blocks, panel);
}

#define ROWS4(X) X(0) X(1) X(2) X(3)

/* mr tokens x 8 outputs (2 groups of 4). A 4-k step multiplies 16 bytes of a group (4 outputs x 4 k)
 * by x's 4 bytes repeated. dp = 0: vmull_s8 on each half gives outputs (0,1) and (2,3) as int16
 * products, vpadalq_s16 adds neighbours into (output, k pair) int32 lanes (l: outputs 0-1, h: 2-3),
 * fold_pairs finishes per block. dp = 1: one SDOT sums each output's 4 products into its lane of l. */
INLINE void gemm_q8_tile(const int dp, const int i8_type, const int mr, int64_t n_blocks, const oc_q8x *x, size_t xs,
                         const unsigned char *panel, float *y, size_t ys, int accumulate) {
    const size_t rec_bytes = OC_MM_Q8_RECORD_BYTES(Q8_GROUP), group_stride = (size_t)n_blocks * rec_bytes;
    const float32x4_t z = vdupq_n_f32(0);
    float32x4_t f00 = z, f01 = z, f10 = z, f11 = z, f20 = z, f21 = z, f30 = z, f31 = z;
    const oc_q8x *x0 = x, *x1 = x + xs, *x2 = x + 2 * xs, *x3 = x + 3 * xs;
#define Q8_LOAD(i)                                                                              \
    if (mr > i && accumulate) {                                                                 \
        f##i##0 = vld1q_f32(y + (size_t)i * ys);                                                \
        f##i##1 = vld1q_f32(y + (size_t)i * ys + 4);                                            \
    }
    ROWS4(Q8_LOAD)
    for (int64_t b = 0; b < n_blocks; b++) {
        const unsigned char *r0 = panel + (size_t)b * rec_bytes, *r1 = r0 + group_stride;
        const int8_t *q0 = (const int8_t *)(r0 + OC_MM_Q8_Q_OFFSET(Q8_GROUP)), *q1 = (const int8_t *)(r1 + OC_MM_Q8_Q_OFFSET(Q8_GROUP));
        const int32x4_t zi = vdupq_n_s32(0);
        int32x4_t l00 = zi, h00 = zi, l01 = zi, h01 = zi, l10 = zi, h10 = zi, l11 = zi, h11 = zi;
        int32x4_t l20 = zi, h20 = zi, l21 = zi, h21 = zi, l30 = zi, h30 = zi, l31 = zi, h31 = zi;
        for (int s = 0; s < OC_QK / 4; s++) {
            int8x16_t w0 = vld1q_s8(q0 + 16 * s), w1 = vld1q_s8(q1 + 16 * s);
#define Q8_STEP(i)                                                                              \
            if (mr > i) {                                                                       \
                int32_t x4;                                                                     \
                memcpy(&x4, x##i[b].qs + 4 * s, 4);                                             \
                if (dp) {                                                                       \
                    int8x16_t xq = vreinterpretq_s8_s32(vdupq_n_s32(x4));                       \
                    l##i##0 = sdot(l##i##0, w0, xq);                                            \
                    l##i##1 = sdot(l##i##1, w1, xq);                                            \
                } else {                                                                        \
                    int8x8_t xb = vreinterpret_s8_s32(vdup_n_s32(x4));                          \
                    l##i##0 = vpadalq_s16(l##i##0, vmull_s8(vget_low_s8(w0), xb));              \
                    h##i##0 = vpadalq_s16(h##i##0, vmull_s8(vget_high_s8(w0), xb));             \
                    l##i##1 = vpadalq_s16(l##i##1, vmull_s8(vget_low_s8(w1), xb));              \
                    h##i##1 = vpadalq_s16(h##i##1, vmull_s8(vget_high_s8(w1), xb));             \
                }                                                                               \
            }
            ROWS4(Q8_STEP)
        }
        float32x4_t d0 = vld1q_f32((const float *)r0), d1 = vld1q_f32((const float *)r1);
#define Q8_BLOCK_END(i)                                                                         \
        if (mr > i) {                                                                           \
            int32x4_t s0 = dp ? l##i##0 : fold_pairs(l##i##0, h##i##0);                         \
            int32x4_t s1 = dp ? l##i##1 : fold_pairs(l##i##1, h##i##1);                         \
            if (i8_type == OC_MM_I8_Q4_0) { /* stored nibble = q + 8 */                         \
                int32x4_t off = vdupq_n_s32(8 * x##i[b].sum);                                   \
                s0 = vsubq_s32(s0, off);                                                        \
                s1 = vsubq_s32(s1, off);                                                        \
            }                                                                                   \
            f##i##0 = vfmaq_f32(f##i##0, vcvtq_f32_s32(s0), vmulq_n_f32(d0, x##i[b].d));        \
            f##i##1 = vfmaq_f32(f##i##1, vcvtq_f32_s32(s1), vmulq_n_f32(d1, x##i[b].d));        \
        }
        ROWS4(Q8_BLOCK_END)
    }
#define Q8_STORE(i)                                                                             \
    if (mr > i) {                                                                               \
        vst1q_f32(y + (size_t)i * ys, f##i##0);                                                 \
        vst1q_f32(y + (size_t)i * ys + 4, f##i##1);                                             \
    }
    ROWS4(Q8_STORE)
    (void)x0; (void)x1; (void)x2; (void)x3;
}

#define GEMM_Q8(NAME, ATTR, DP, TYPE)                                                                         \
    static ATTR void NAME(int mr, int64_t nb, const oc_q8x *x, size_t xs, const void *panel, float *y,         \
                          size_t ys, int acc) {                                                                \
        switch (mr) {                                                                                          \
        case 4: gemm_q8_tile(DP, TYPE, 4, nb, x, xs, panel, y, ys, acc); break;                                \
        case 3: gemm_q8_tile(DP, TYPE, 3, nb, x, xs, panel, y, ys, acc); break;                                \
        case 2: gemm_q8_tile(DP, TYPE, 2, nb, x, xs, panel, y, ys, acc); break;                                \
        default: gemm_q8_tile(DP, TYPE, 1, nb, x, xs, panel, y, ys, acc); break;                               \
        }                                                                                                      \
    }
GEMM_Q8(gemm_q8_0, NO_ATTR, 0, OC_MM_I8_Q8_0)
GEMM_Q8(gemm_q4_0, NO_ATTR, 0, OC_MM_I8_Q4_0)
#if OC_HAVE_NEON_DOTPROD
GEMM_Q8(gemm_q8_0_dp, DOTPROD, 1, OC_MM_I8_Q8_0)
GEMM_Q8(gemm_q4_0_dp, DOTPROD, 1, OC_MM_I8_Q4_0)
#endif

/* ---- BF16 path --------------------------------------------------------------------------------- */
#if OC_HAVE_NEON_BF16
/* f32 -> bf16 as oc_f32_to_bf16 rounds (nearest even; NaN kept quiet), 4 lanes in integer ops:
 * bitwise equal to the scalar code (test_bf16_conversions_bitwise). Plain NEON, no extension. */
INLINE uint16x4_t f32x4_to_bf16(float32x4_t v) {
    uint32x4_t u = vreinterpretq_u32_f32(v);
    uint32x4_t rnd = vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7fff)), vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1)));
    uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffffu)), vdupq_n_u32(0x7f800000u));
    return vmovn_u32(vbslq_u32(nan, vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(0x40)), vshrq_n_u32(rnd, 16)));
}

static void x_to_bf16(const float *x, int64_t n, uint16_t *out) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(out + i, f32x4_to_bf16(vld1q_f32(x + i)));
    for (; i < n; i++) out[i] = oc_f32_to_bf16(x[i]);
}

/* f16 -> f32 (exact) -> bf16, one pass: the F16 weights' panels without a row of f32 in between */
static void f16_to_bf16(const uint16_t *src, int64_t n, uint16_t *out) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(out + i, f32x4_to_bf16(load_f16(src + i)));
    for (; i < n; i++) out[i] = oc_f32_to_bf16(oc_f16_to_f32(src[i]));
}

#define BF16_ATTR __attribute__((target("arch=armv8.2-a+dotprod+bf16")))
#define BF16_MR 3

INLINE BF16_ATTR bfloat16x8_t bf16x8(const uint32_t *p) { return vreinterpretq_bf16_u32(vld1q_u32(p)); }

/* mr (1..3) tokens x 32 outputs: 24 accumulators (acc[i][v]: token i, outputs 4v..4v+3), the 8
 * panel vectors of one pair loaded one at a time. BFDOT lane L of an x vector multiplies pair L of
 * the 4 pairs it holds: a step of 4 pairs loads each token's x once. The arrays are indexed only by
 * constants after unrolling, so they live in registers. */
INLINE BF16_ATTR void gemm_bf16_tile(const int mr, int64_t n_pairs, const uint32_t *x, size_t xs, const uint32_t *panel,
                                     float *y, size_t ys, int accumulate) {
    float32x4_t acc[BF16_MR][8];
    _Pragma("GCC unroll 3") for (int i = 0; i < BF16_MR; i++)
        _Pragma("GCC unroll 8") for (int v = 0; v < 8; v++)
            acc[i][v] = i < mr && accumulate ? vld1q_f32(y + (size_t)i * ys + 4 * v) : vdupq_n_f32(0);
    int64_t p = 0;
    for (; p + 4 <= n_pairs; p += 4) {
        bfloat16x8_t xv[BF16_MR];
        _Pragma("GCC unroll 3") for (int i = 0; i < BF16_MR; i++) xv[i] = bf16x8(x + (size_t)(i < mr ? i : 0) * xs + p);
#define BF16_PAIR(L)                                                                                    \
        _Pragma("GCC unroll 8") for (int v = 0; v < 8; v++) {                                           \
            bfloat16x8_t w = bf16x8(panel + (size_t)(p + (L)) * OC_MM_BF16_NR + 4 * v);                 \
            _Pragma("GCC unroll 3") for (int i = 0; i < BF16_MR; i++)                                   \
                if (i < mr) acc[i][v] = vbfdotq_laneq_f32(acc[i][v], w, xv[i], L);                      \
        }
        BF16_PAIR(0) BF16_PAIR(1) BF16_PAIR(2) BF16_PAIR(3)
#undef BF16_PAIR
    }
    for (; p < n_pairs; p++) {   /* the last 1-3 pairs of the block: each x pair broadcast */
        _Pragma("GCC unroll 8") for (int v = 0; v < 8; v++) {
            bfloat16x8_t w = bf16x8(panel + (size_t)p * OC_MM_BF16_NR + 4 * v);
            _Pragma("GCC unroll 3") for (int i = 0; i < BF16_MR; i++)
                if (i < mr) acc[i][v] = vbfdotq_f32(acc[i][v], w, vreinterpretq_bf16_u32(vdupq_n_u32(x[(size_t)i * xs + p])));
        }
    }
    _Pragma("GCC unroll 3") for (int i = 0; i < BF16_MR; i++)
        _Pragma("GCC unroll 8") for (int v = 0; v < 8; v++)
            if (i < mr) vst1q_f32(y + (size_t)i * ys + 4 * v, acc[i][v]);
}

static BF16_ATTR void gemm_bf16(int mr, int64_t n_pairs, const uint32_t *x, size_t xs, const uint32_t *panel, float *y,
                                size_t ys, int acc) {
    switch (mr) {
    case 3: gemm_bf16_tile(3, n_pairs, x, xs, panel, y, ys, acc); break;
    case 2: gemm_bf16_tile(2, n_pairs, x, xs, panel, y, ys, acc); break;
    default: gemm_bf16_tile(1, n_pairs, x, xs, panel, y, ys, acc); break;
    }
}
#endif

/* ---- MMLA kernels (ARMv8.6 I8MM + BF16; table "neon+dotprod+bf16+i8mm") -------------------------
 * SMMLA multiplies a 2x8 int8 matrix (one vector: two rows of 8) by an 8x2 one (one vector: two
 * columns of 8), BFMMLA a 2x4 bf16 matrix by a 4x2 one, into a 2x2 block of 4 int32 / f32 lanes
 * added to the destination: lane 2i + j += row i of the first operand . row j of the second. One
 * instruction does 32 multiply-adds (SMMLA) or 16 (BFMMLA), twice SDOT's 16 and BFDOT's 8 (Arm ARM,
 * "SMMLA", "BFMMLA"). The tiles pair tokens (the first operand: 2 tokens x k) against pairs of
 * outputs (the second: 2 outputs x the same k), so the packing keeps each output's k run contiguous
 * where SDOT / BFDOT want 4 outputs side by side. An odd last token is paired with itself and its
 * copy's half of the result dropped. */
#if OC_HAVE_NEON_I8MM
#define MMLA_ATTR __attribute__((target("arch=armv8.2-a+dotprod+bf16+i8mm")))

/* BF16 panel for BFMMLA: for each quad of inputs (pairs 2q, 2q + 1), 32 outputs x 2 uint32:
 * panel[64 q + 2 j + r] = pair 2q + r of output j, so outputs (j, j + 1) are one 16-byte operand;
 * an odd last pair p keeps the shared layout (panel[32 p + j]). The panel has the shared layout's
 * size; only this table's gemm_bf16 reads it. */
static void pack_bf16_mmla(const uint32_t *rows, size_t ld, int n_rows, int64_t n_pairs, uint32_t *panel) {
    const int64_t n_quads = n_pairs / 2;
    for (int j = 0; j < OC_MM_BF16_NR; j++) {
        const uint32_t *r = rows + (size_t)(j < n_rows ? j : 0) * ld;
        for (int64_t q = 0; q < n_quads; q++) {
            uint32_t *d = panel + (size_t)q * 2 * OC_MM_BF16_NR + 2 * (size_t)j;
            d[0] = j < n_rows ? r[2 * q] : 0;
            d[1] = j < n_rows ? r[2 * q + 1] : 0;
        }
        if (n_pairs % 2) panel[(size_t)(n_pairs - 1) * OC_MM_BF16_NR + (size_t)j] = j < n_rows ? r[n_pairs - 1] : 0;
    }
}

#define BFMMLA_MR 4

/* [lo0, 0, lo1, 0]: a lone pair of two rows as a 2x4 operand whose k = 2, 3 are zero */
INLINE MMLA_ATTR bfloat16x8_t bf16_lone_pairs(uint32_t lo0, uint32_t lo1) {
    uint32x4_t v = vcombine_u32(vcreate_u32((uint64_t)lo0 | (uint64_t)lo1 << 32), vdup_n_u32(0));
    return vreinterpretq_bf16_u32(vzip1q_u32(v, vdupq_n_u32(0)));
}

/* mr (1..4) tokens x 32 outputs, in two halves of 16: 2 token pairs x 8 output pairs of 2x2
 * accumulators (16 registers). Per quad of inputs and half: 2 token-pair operands (two 8-byte loads
 * each), 8 panel loads, 16 BFMMLA: 30 instructions per 512 FLOPs in the loop. 3 token pairs (24
 * accumulators) spilled 4 of them to the stack (gcc 12) and counted 10% more instructions per FLOP
 * under qemu (BENCHMARKS.md "NEON under qemu"). The arrays are indexed by constants after
 * unrolling, so they live in registers. */
INLINE MMLA_ATTR void gemm_bf16_mmla_tile(const int mr, int64_t n_pairs, const uint32_t *x, size_t xs,
                                          const uint32_t *panel, float *y, size_t ys, int accumulate) {
    enum { NP = BFMMLA_MR / 2 };
    const int np = (mr + 1) / 2;
    const uint32_t *xr[BFMMLA_MR];
    _Pragma("GCC unroll 4") for (int i = 0; i < BFMMLA_MR; i++) xr[i] = x + (size_t)(i < mr ? i : mr - 1) * xs;
    const int64_t n_quads = n_pairs / 2;
    for (int h = 0; h < 2; h++) {
        float32x4_t acc[NP][8];
        _Pragma("GCC unroll 2") for (int t = 0; t < NP; t++)
            _Pragma("GCC unroll 8") for (int v = 0; v < 8; v++) {
                acc[t][v] = vdupq_n_f32(0);
                if (t < np && accumulate) {
                    const float *y0 = y + (size_t)(2 * t) * ys + 16 * h + 2 * v;
                    acc[t][v] = vcombine_f32(vld1_f32(y0), 2 * t + 1 < mr ? vld1_f32(y0 + ys) : vdup_n_f32(0));
                }
            }
        const uint32_t *ph = panel + 32 * h;
        for (int64_t q = 0; q < n_quads; q++) {
            bfloat16x8_t a[NP];
            _Pragma("GCC unroll 2") for (int t = 0; t < NP; t++)
                a[t] = vreinterpretq_bf16_u32(vcombine_u32(vld1_u32(xr[2 * t] + 2 * q), vld1_u32(xr[2 * t + 1] + 2 * q)));
            _Pragma("GCC unroll 8") for (int v = 0; v < 8; v++) {
                bfloat16x8_t b = vreinterpretq_bf16_u32(vld1q_u32(ph + (size_t)q * 2 * OC_MM_BF16_NR + 4 * v));
                _Pragma("GCC unroll 2") for (int t = 0; t < NP; t++)
                    if (t < np) acc[t][v] = vbfmmlaq_f32(acc[t][v], a[t], b);
            }
        }
        if (n_pairs % 2) {   /* the last pair alone, k = 2, 3 of both operands zero */
            const int64_t p = n_pairs - 1;
            const uint32_t *pp = panel + (size_t)p * OC_MM_BF16_NR + 16 * h;
            _Pragma("GCC unroll 8") for (int v = 0; v < 8; v++) {
                bfloat16x8_t b = bf16_lone_pairs(pp[2 * v], pp[2 * v + 1]);
                _Pragma("GCC unroll 2") for (int t = 0; t < NP; t++)
                    if (t < np) acc[t][v] = vbfmmlaq_f32(acc[t][v], bf16_lone_pairs(xr[2 * t][p], xr[2 * t + 1][p]), b);
            }
        }
        _Pragma("GCC unroll 2") for (int t = 0; t < NP; t++)
            _Pragma("GCC unroll 8") for (int v = 0; v < 8; v++)
                if (t < np) {
                    float *y0 = y + (size_t)(2 * t) * ys + 16 * h + 2 * v;
                    vst1_f32(y0, vget_low_f32(acc[t][v]));
                    if (2 * t + 1 < mr) vst1_f32(y0 + ys, vget_high_f32(acc[t][v]));
                }
    }
}

static MMLA_ATTR void gemm_bf16_mmla(int mr, int64_t n_pairs, const uint32_t *x, size_t xs, const uint32_t *panel,
                                     float *y, size_t ys, int acc) {
    switch (mr) {
    case 4: gemm_bf16_mmla_tile(4, n_pairs, x, xs, panel, y, ys, acc); break;
    case 3: gemm_bf16_mmla_tile(3, n_pairs, x, xs, panel, y, ys, acc); break;
    case 2: gemm_bf16_mmla_tile(2, n_pairs, x, xs, panel, y, ys, acc); break;
    default: gemm_bf16_mmla_tile(1, n_pairs, x, xs, panel, y, ys, acc); break;
    }
}

/* Int8 records for SMMLA (the record of matmul_kern.h, G = 8 outputs = q8_nr, its q bytes in
 * another order): float d[8]; int8 q[4][4][2][8], q[c][v][r][u] = W[2v + r][8c + u] as a signed
 * value (Q4_0: nibble - 8, so no correction by x's sum is needed): chunk c of 8 inputs of output
 * pair v is one 16-byte SMMLA operand. Padding rows are 0 with d = 0. */
#define SMMLA_GROUP 8
#define SMMLA_MR 4
#define SMMLA_REC OC_MM_Q8_RECORD_BYTES(SMMLA_GROUP)

static void pack_q8_mmla(const int i8_type, const void *w, size_t row_bytes, int n_rows, int64_t n_blocks, void *panel) {
    const size_t block_bytes = i8_type == OC_MM_I8_Q8_0 ? sizeof(oc_block_q8_0) : sizeof(oc_block_q4_0);
    for (int64_t b = 0; b < n_blocks; b++) {
        unsigned char *rec = (unsigned char *)panel + (size_t)b * SMMLA_REC;
        int8_t *q = (int8_t *)(rec + OC_MM_Q8_Q_OFFSET(SMMLA_GROUP));
        for (int j = 0; j < SMMLA_GROUP; j++) {
            float d = 0;
            int8_t v[OC_QK] = { 0 };
            if (j < n_rows) {
                const unsigned char *blk = (const unsigned char *)w + (size_t)j * row_bytes + (size_t)b * block_bytes;
                if (i8_type == OC_MM_I8_Q8_0) {
                    const oc_block_q8_0 *bq = (const oc_block_q8_0 *)(const void *)blk;
                    d = oc_f16_to_f32(bq->d);
                    memcpy(v, bq->qs, OC_QK);
                } else {
                    const oc_block_q4_0 *bq = (const oc_block_q4_0 *)(const void *)blk;
                    d = oc_f16_to_f32(bq->d);
                    for (int u = 0; u < OC_QK / 2; u++) {
                        v[u] = (int8_t)((bq->qs[u] & 0x0F) - 8);
                        v[u + OC_QK / 2] = (int8_t)((bq->qs[u] >> 4) - 8);
                    }
                }
            }
            memcpy(rec + (size_t)j * sizeof(float), &d, sizeof d);
            for (int c = 0; c < OC_QK / 8; c++) memcpy(q + 64 * c + 16 * (j / 2) + 8 * (j % 2), v + 8 * c, 8);
        }
    }
}
static void pack_q8_0_mmla(const void *w, size_t row_bytes, int n_rows, int64_t n_blocks, void *panel) {
    pack_q8_mmla(OC_MM_I8_Q8_0, w, row_bytes, n_rows, n_blocks, panel);
}
static void pack_q4_0_mmla(const void *w, size_t row_bytes, int n_rows, int64_t n_blocks, void *panel) {
    pack_q8_mmla(OC_MM_I8_Q4_0, w, row_bytes, n_rows, n_blocks, panel);
}

/* mr (1..4) tokens x 8 outputs: 2 token pairs x 4 output pairs of int32 2x2 blocks summed over a
 * block of 32 inputs (4 SMMLA each), then scaled by d_w * d_x into as many f32 accumulators (16
 * registers in all). Per block and token pair: 4 operands of 2 x 8 bytes of x (two 8-byte loads
 * each); per block: 16 panel loads, 32 SMMLA, and per accumulator a convert, a scale product and
 * one FMA: 120 instructions per 2048 FLOPs in the loop. With 3 token pairs the f32 accumulators
 * spilled (gcc 12) and the count per FLOP did not improve. */
INLINE MMLA_ATTR void gemm_q8_mmla_tile(const int mr, int64_t n_blocks, const oc_q8x *x, size_t xs,
                                        const unsigned char *panel, float *y, size_t ys, int accumulate) {
    enum { NP = SMMLA_MR / 2 };
    const int np = (mr + 1) / 2;
    const oc_q8x *xr[SMMLA_MR];
    _Pragma("GCC unroll 4") for (int i = 0; i < SMMLA_MR; i++) xr[i] = x + (size_t)(i < mr ? i : mr - 1) * xs;
    float32x4_t f[NP][4];
    _Pragma("GCC unroll 2") for (int t = 0; t < NP; t++)
        _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) {
            f[t][v] = vdupq_n_f32(0);
            if (t < np && accumulate) {
                const float *y0 = y + (size_t)(2 * t) * ys + 2 * v;
                f[t][v] = vcombine_f32(vld1_f32(y0), 2 * t + 1 < mr ? vld1_f32(y0 + ys) : vdup_n_f32(0));
            }
        }
    for (int64_t b = 0; b < n_blocks; b++) {
        const unsigned char *rec = panel + (size_t)b * SMMLA_REC;
        const int8_t *q = (const int8_t *)(rec + OC_MM_Q8_Q_OFFSET(SMMLA_GROUP));
        int32x4_t s[NP][4];
        _Pragma("GCC unroll 2") for (int t = 0; t < NP; t++)
            _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) s[t][v] = vdupq_n_s32(0);
        _Pragma("GCC unroll 4") for (int c = 0; c < OC_QK / 8; c++) {
            int8x16_t a[NP];
            _Pragma("GCC unroll 2") for (int t = 0; t < NP; t++)
                a[t] = vcombine_s8(vld1_s8(xr[2 * t][b].qs + 8 * c), vld1_s8(xr[2 * t + 1][b].qs + 8 * c));
            _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) {
                int8x16_t wv = vld1q_s8(q + 64 * c + 16 * v);
                _Pragma("GCC unroll 2") for (int t = 0; t < NP; t++)
                    if (t < np) s[t][v] = vmmlaq_s32(s[t][v], a[t], wv);
            }
        }
        /* d_w of output pair v, twice: [d(2v), d(2v + 1), d(2v), d(2v + 1)]; d_x of token pair t:
         * [d(2t), d(2t), d(2t + 1), d(2t + 1)] */
        const float32x4_t dlo = vld1q_f32((const float *)(const void *)rec), dhi = vld1q_f32((const float *)(const void *)rec + 4);
        float32x4_t dw[4];
        dw[0] = vreinterpretq_f32_u64(vdupq_laneq_u64(vreinterpretq_u64_f32(dlo), 0));
        dw[1] = vreinterpretq_f32_u64(vdupq_laneq_u64(vreinterpretq_u64_f32(dlo), 1));
        dw[2] = vreinterpretq_f32_u64(vdupq_laneq_u64(vreinterpretq_u64_f32(dhi), 0));
        dw[3] = vreinterpretq_f32_u64(vdupq_laneq_u64(vreinterpretq_u64_f32(dhi), 1));
        _Pragma("GCC unroll 2") for (int t = 0; t < NP; t++)
            if (t < np) {
                float32x4_t dx = vcombine_f32(vdup_n_f32(xr[2 * t][b].d), vdup_n_f32(xr[2 * t + 1][b].d));
                _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)
                    f[t][v] = vfmaq_f32(f[t][v], vcvtq_f32_s32(s[t][v]), vmulq_f32(dw[v], dx));
            }
    }
    _Pragma("GCC unroll 2") for (int t = 0; t < NP; t++)
        _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)
            if (t < np) {
                float *y0 = y + (size_t)(2 * t) * ys + 2 * v;
                vst1_f32(y0, vget_low_f32(f[t][v]));
                if (2 * t + 1 < mr) vst1_f32(y0 + ys, vget_high_f32(f[t][v]));
            }
}

/* One kernel serves Q8_0 and Q4_0: both panels hold signed values (pack_q8_mmla). */
static MMLA_ATTR void gemm_q8_mmla(int mr, int64_t nb, const oc_q8x *x, size_t xs, const void *panel, float *y,
                                   size_t ys, int acc) {
    switch (mr) {
    case 4: gemm_q8_mmla_tile(4, nb, x, xs, panel, y, ys, acc); break;
    case 3: gemm_q8_mmla_tile(3, nb, x, xs, panel, y, ys, acc); break;
    case 2: gemm_q8_mmla_tile(2, nb, x, xs, panel, y, ys, acc); break;
    default: gemm_q8_mmla_tile(1, nb, x, xs, panel, y, ys, acc); break;
    }
}
#endif

/* ---- tables ------------------------------------------------------------------------------------- */

#define FLOAT_FIELDS                                                                                           \
    .isa = OC_ISA_NEON, .mr = MR, .nr = NR,                                                                    \
    .to_f32 = { oc_dequant_f32, to_f32_f16, to_f32_bf16, to_f32_q8_0, to_f32_q4_0, oc_dequant_q4_k,            \
                oc_dequant_q6_k },                                                                             \
    .dot_f32 = { dot_f32, dot_f16, dot_bf16, NULL, NULL, NULL, NULL },                                         \
    .pack_f32 = pack_f32, .gemm_f32 = gemm_f32,                                                                \
    .q8_gemv_rows = GEMV_ROWS, .quantize_q8x = quantize_q8x, .int8_gemv = { 1, 1, 1, 1 }
/* the SDOT-shaped int8 GEMM tile (4 tokens x 8 outputs, groups of 4) */
#define COMMON_FIELDS                                                                                          \
    FLOAT_FIELDS, .q8_mr = Q8_MR, .q8_nr = Q8_NR, .q8_group = Q8_GROUP, .pack_q8 = { pack_q8_0, pack_q4_0, NULL, NULL }

/* Without SDOT the int8 GEMM issues 4 instructions per 16 multiply-adds, no better than 4-lane f32
 * FMA after dequantization, so AUTO keeps GEMM on the float path; the GEMV dot is shorter than
 * dequantize + FMA (for Q4_K / Q6_K the scalar dequantizer) and takes the int8 path. With SDOT the
 * int8 GEMM needs a quarter of the f32 path's multiply instructions (BENCHMARKS.md "NEON under
 * qemu" counts both), so AUTO takes it. None of these choices is timed on hardware yet. */
static const oc_matmul_kernels table = {
    COMMON_FIELDS,
    .name = "neon",
    .gemv_q8x = { gemv_q8_0, gemv_q4_0, gemv_q4_k, gemv_q6_k },
    .gemm_q8 = { gemm_q8_0, gemm_q4_0, NULL, NULL },
    .int8_gemm = { 0, 0, 0, 0 },
};

#if OC_HAVE_NEON_DOTPROD
static const oc_matmul_kernels table_dp = {
    COMMON_FIELDS,
    .name = "neon+dotprod",
    .gemv_q8x = { gemv_q8_0_dp, gemv_q4_0_dp, gemv_q4_k_dp, gemv_q6_k_dp },
    .gemm_q8 = { gemm_q8_0_dp, gemm_q4_0_dp, NULL, NULL },
    .int8_gemm = { 1, 1, 0, 0 },
};
#endif

#if OC_HAVE_NEON_DOTPROD && OC_HAVE_NEON_BF16
/* AUTO does not take the BF16 path here (bf16_gemm 0: OC_MATMUL_BF16 forces it): it rounds W and X
 * to bf16, and no Arm board has yet measured BFDOT against FMLA for this tile. */
static const oc_matmul_kernels table_bf16 = {
    COMMON_FIELDS,
    .name = "neon+dotprod+bf16",
    .gemv_q8x = { gemv_q8_0_dp, gemv_q4_0_dp, gemv_q4_k_dp, gemv_q6_k_dp },
    .gemm_q8 = { gemm_q8_0_dp, gemm_q4_0_dp, NULL, NULL },
    .int8_gemm = { 1, 1, 0, 0 },
    .bf16_mr = BF16_MR,
    .bf16_gemm = 0,
    .x_to_bf16 = x_to_bf16,
    .gemm_bf16 = gemm_bf16,
    .pack_bf16 = oc_mm_pack_bf16_generic,
    .f16_to_bf16 = f16_to_bf16,
};
#endif

#if OC_HAVE_NEON_I8MM
/* ARMv8.6 makes I8MM and BF16 both mandatory; this table needs both reported (HWCAP2_I8MM and
 * HWCAP2_BF16, port/cpu.c). Its GEMVs are neon+dotprod's (a GEMV has one token: nothing to pair).
 * AUTO takes the SMMLA int8 GEMM (half of SDOT's instructions per multiply-add, BENCHMARKS.md "NEON
 * under qemu"), not the BF16 path, for the reason given above table_bf16. With
 * OCELLUS_CPU_FEATURES=-i8mm the same CPU runs neon+dotprod+bf16 (SDOT, BFDOT). */
static const oc_matmul_kernels table_mmla = {
    FLOAT_FIELDS,
    .name = "neon+dotprod+bf16+i8mm",
    .q8_mr = SMMLA_MR, .q8_nr = SMMLA_GROUP, .q8_group = SMMLA_GROUP,
    .pack_q8 = { pack_q8_0_mmla, pack_q4_0_mmla, NULL, NULL },
    .gemv_q8x = { gemv_q8_0_dp, gemv_q4_0_dp, gemv_q4_k_dp, gemv_q6_k_dp },
    .gemm_q8 = { gemm_q8_mmla, gemm_q8_mmla, NULL, NULL },
    .int8_gemm = { 1, 1, 0, 0 },
    .bf16_mr = BFMMLA_MR,
    .bf16_gemm = 0,
    .x_to_bf16 = x_to_bf16,
    .gemm_bf16 = gemm_bf16_mmla,
    .pack_bf16 = pack_bf16_mmla,
    .f16_to_bf16 = f16_to_bf16,
};
#endif

const oc_matmul_kernels *oc_matmul_kernels_neon(const oc_cpu_features *cpu) {
#if OC_HAVE_NEON_I8MM
    if (cpu->dotprod && cpu->bf16 && cpu->i8mm) return &table_mmla;
#endif
#if OC_HAVE_NEON_DOTPROD && OC_HAVE_NEON_BF16
    if (cpu->dotprod && cpu->bf16) return &table_bf16;
#endif
#if OC_HAVE_NEON_DOTPROD
    if (cpu->dotprod) return &table_dp;
#endif
    (void)cpu;
    return &table;
}
