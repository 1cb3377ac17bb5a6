/* attn_neon.c: attention micro-kernels for ARM NEON (AArch64, and ARMv7 with VFPv4), attn_kernels.h.
 * The structure of attn_avx2.c with 4-float vectors: GEMM of 6 rows x 8 columns (12 q-register
 * accumulators, so ARMv7's 16 q registers suffice), 4 x 4 transposes for K, the same exp2 split
 * and polynomial. Rounding to nearest uses truncation of x - 1/2 (valid for the x <= 0 that softmax
 * passes), which ARMv7 has. f16 is widened with integer ops and a 2^112 multiply (no FP16
 * extension needed); ARMv7 NEON flushes subnormal values, so halves below 6.1e-5 read as 0 there. */
#include "attn_kernels.h"
#include "f16.h"

#include <arm_neon.h>
#include <math.h>

#define VEC 4
#define PANEL 8
#define MR 6
#define INLINE static inline __attribute__((always_inline))
/* Full unrolling over the (constant) row count keeps the accumulator arrays in registers. */
#define UNROLL_ROWS _Pragma("GCC unroll 16")

/* ---- GEMM ------------------------------------------------------------------------------------- */

INLINE void kernel_2v(int32_t rows, int32_t k, const float *a, int64_t lda, const float *b, float *c,
                      int64_t ldc, int accumulate) {
    float32x4_t c0[MR], c1[MR];
    UNROLL_ROWS
    for (int32_t r = 0; r < rows; r++) {
        c0[r] = accumulate ? vld1q_f32(c + r * ldc) : vdupq_n_f32(0.0f);
        c1[r] = accumulate ? vld1q_f32(c + r * ldc + VEC) : vdupq_n_f32(0.0f);
    }
    for (int32_t kk = 0; kk < k; kk++) {
        float32x4_t b0 = vld1q_f32(b + (int64_t)kk * PANEL), b1 = vld1q_f32(b + (int64_t)kk * PANEL + VEC);
        UNROLL_ROWS
        for (int32_t r = 0; r < rows; r++) {
            float32x4_t av = vdupq_n_f32(a[r * lda + kk]);
            c0[r] = vfmaq_f32(c0[r], av, b0);
            c1[r] = vfmaq_f32(c1[r], av, b1);
        }
    }
    UNROLL_ROWS
    for (int32_t r = 0; r < rows; r++) {
        vst1q_f32(c + r * ldc, c0[r]);
        vst1q_f32(c + r * ldc + VEC, c1[r]);
    }
}

INLINE void kernel_1v(int32_t rows, int32_t k, const float *a, int64_t lda, const float *b, float *c,
                      int64_t ldc, int accumulate) {
    float32x4_t c0[MR];
    UNROLL_ROWS
    for (int32_t r = 0; r < rows; r++) c0[r] = accumulate ? vld1q_f32(c + r * ldc) : vdupq_n_f32(0.0f);
    for (int32_t kk = 0; kk < k; kk++) {
        float32x4_t b0 = vld1q_f32(b + (int64_t)kk * VEC);
        UNROLL_ROWS
        for (int32_t r = 0; r < rows; r++) c0[r] = vfmaq_f32(c0[r], vdupq_n_f32(a[r * lda + kk]), b0);
    }
    UNROLL_ROWS
    for (int32_t r = 0; r < rows; r++) vst1q_f32(c + r * ldc, c0[r]);
}

#define DISPATCH_ROWS(kernel, rows, ...) \
    switch (rows) {                      \
    case 1: kernel(1, __VA_ARGS__); break; \
    case 2: kernel(2, __VA_ARGS__); break; \
    case 3: kernel(3, __VA_ARGS__); break; \
    case 4: kernel(4, __VA_ARGS__); break; \
    case 5: kernel(5, __VA_ARGS__); break; \
    default: kernel(6, __VA_ARGS__); break; \
    }

static void gemm(int32_t m, int32_t n, int32_t k, const float *a, int64_t lda, const float *b,
                 float *c, int64_t ldc, int accumulate) {
    for (int32_t c0 = 0; c0 < n;) {
        int32_t w = n - c0 >= PANEL ? PANEL : VEC;
        const float *bp = b + (int64_t)c0 * k;
        for (int32_t i = 0; i < m; i += MR) {
            int32_t rows = OC_MIN(MR, m - i);
            if (w == PANEL) {
                DISPATCH_ROWS(kernel_2v, rows, k, a + i * lda, lda, bp, c + i * ldc + c0, ldc, accumulate)
            } else {
                DISPATCH_ROWS(kernel_1v, rows, k, a + i * lda, lda, bp, c + i * ldc + c0, ldc, accumulate)
            }
        }
        c0 += w;
    }
}

/* ---- packing ------------------------------------------------------------------------------------ */

INLINE float32x4_t half4_to_f32(uint16x4_t h) {
    uint32x4_t w = vmovl_u16(h);
    uint32x4_t sign = vshlq_n_u32(vandq_u32(w, vdupq_n_u32(0x8000)), 16);
    uint32x4_t em = vshlq_n_u32(vandq_u32(w, vdupq_n_u32(0x7fff)), 13);
    /* exponent rebias 15 -> 127 by a multiply: also normalizes subnormal halves */
    uint32x4_t scaled = vreinterpretq_u32_f32(vmulq_f32(vreinterpretq_f32_u32(em), vdupq_n_f32(0x1p112f)));
    uint32x4_t special = vceqq_u32(vandq_u32(w, vdupq_n_u32(0x7c00)), vdupq_n_u32(0x7c00));   /* inf/nan */
    uint32x4_t bits = vbslq_u32(special, vorrq_u32(em, vdupq_n_u32(0x7f800000)), scaled);
    return vreinterpretq_f32_u32(vorrq_u32(bits, sign));
}

INLINE float32x4_t load4(const void *row, int32_t c, int32_t dtype) {
    if (dtype == OC_DTYPE_F16) return half4_to_f32(vld1_u16((const uint16_t *)row + c));
    return vld1q_f32((const float *)row + c);
}

static float load1(const void *row, int32_t c, int32_t dtype) {
    if (dtype == OC_DTYPE_F16) return oc_f16_to_f32(((const uint16_t *)row)[c]);
    return ((const float *)row)[c];
}

INLINE void transpose4(float32x4_t r[4]) {
    float32x4x2_t t01 = vtrnq_f32(r[0], r[1]), t23 = vtrnq_f32(r[2], r[3]);
    r[0] = vcombine_f32(vget_low_f32(t01.val[0]), vget_low_f32(t23.val[0]));
    r[1] = vcombine_f32(vget_low_f32(t01.val[1]), vget_low_f32(t23.val[1]));
    r[2] = vcombine_f32(vget_high_f32(t01.val[0]), vget_high_f32(t23.val[0]));
    r[3] = vcombine_f32(vget_high_f32(t01.val[1]), vget_high_f32(t23.val[1]));
}

static void pack_kt(float *dst, const void *const *rows, int32_t n_keys, int32_t d, int32_t dtype) {
    for (int32_t t0 = 0; t0 < n_keys; t0 += VEC) {
        int32_t p0 = t0 / PANEL * PANEL, w = n_keys - p0 >= PANEL ? PANEL : VEC;
        float *base = dst + (int64_t)p0 * d + (t0 - p0);
        int full = 1;
        for (int32_t t = 0; t < VEC; t++) full &= rows[t0 + t] != NULL;
        int32_t c = 0;
        if (full) {
            for (; c + VEC <= d; c += VEC) {
                float32x4_t r[4];
                for (int32_t t = 0; t < VEC; t++) r[t] = load4(rows[t0 + t], c, dtype);
                transpose4(r);
                for (int32_t cc = 0; cc < VEC; cc++) vst1q_f32(base + (int64_t)(c + cc) * w, r[cc]);
            }
        }
        for (; c < d; c++)
            for (int32_t t = 0; t < VEC; t++)
                base[(int64_t)c * w + t] = rows[t0 + t] ? load1(rows[t0 + t], c, dtype) : 0.0f;
    }
}

static void pack_v(float *dst, const void *const *rows, int32_t n_keys, int32_t d, int32_t dpad, int32_t dtype) {
    for (int32_t c = 0; c < dpad; c += VEC) {
        int32_t p0 = c / PANEL * PANEL, w = dpad - p0 >= PANEL ? PANEL : VEC;
        float *base = dst + (int64_t)p0 * n_keys + (c - p0);
        if (c + VEC <= d) {
            for (int32_t t = 0; t < n_keys; t++) vst1q_f32(base + (int64_t)t * w, load4(rows[t], c, dtype));
        } else {
            for (int32_t t = 0; t < n_keys; t++)
                for (int32_t cc = 0; cc < VEC; cc++)
                    base[(int64_t)t * w + cc] = c + cc < d ? load1(rows[t], c + cc, dtype) : 0.0f;
        }
    }
}

/* ---- softmax pieces ------------------------------------------------------------------------------- */

INLINE float32x4_t exp2_v(float32x4_t x) {
    const float32x4_t lo = vdupq_n_f32(-125.0f);
    float32x4_t xc = vmaxq_f32(x, lo);
    int32x4_t ni = vcvtq_s32_f32(vsubq_f32(xc, vdupq_n_f32(0.5f)));   /* round(xc) for xc <= 1/2 */
    float32x4_t f = vsubq_f32(xc, vcvtq_f32_s32(ni));
    float32x4_t p = vdupq_n_f32(1.5403530393381608e-4f);   /* ln2^k / k!, k = 6 .. 0 */
    p = vfmaq_f32(vdupq_n_f32(1.3333558146428443e-3f), p, f);
    p = vfmaq_f32(vdupq_n_f32(9.6181291076284772e-3f), p, f);
    p = vfmaq_f32(vdupq_n_f32(5.5504108664821580e-2f), p, f);
    p = vfmaq_f32(vdupq_n_f32(2.4022650695910071e-1f), p, f);
    p = vfmaq_f32(vdupq_n_f32(6.9314718055994531e-1f), p, f);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, f);
    int32x4_t r = vaddq_s32(vreinterpretq_s32_f32(p), vshlq_n_s32(ni, 23));
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_s32(r), vcgeq_f32(x, lo)));
}

INLINE float hsum(float32x4_t v) {
    float32x2_t s = vadd_f32(vget_low_f32(v), vget_high_f32(v));
    return vget_lane_f32(vpadd_f32(s, s), 0);
}

static float exp2_sum(float *s, int32_t n, float m) {
    float32x4_t mv = vdupq_n_f32(m), acc = vdupq_n_f32(0.0f);
    int32_t t = 0;
    for (; t + VEC <= n; t += VEC) {
        float32x4_t e = exp2_v(vsubq_f32(vld1q_f32(s + t), mv));
        vst1q_f32(s + t, e);
        acc = vaddq_f32(acc, e);
    }
    if (t < n) {
        float tmp[VEC] = { -INFINITY, -INFINITY, -INFINITY, -INFINITY };
        for (int32_t k = 0; k < n - t; k++) tmp[k] = s[t + k];
        float32x4_t e = exp2_v(vsubq_f32(vld1q_f32(tmp), mv));   /* -inf lanes give 0 */
        vst1q_f32(tmp, e);
        for (int32_t k = 0; k < n - t; k++) s[t + k] = tmp[k];
        acc = vaddq_f32(acc, e);
    }
    return hsum(acc);
}

static float max_f32(const float *s, int32_t n) {
    float32x4_t mx = vdupq_n_f32(-INFINITY);
    int32_t t = 0;
    for (; t + VEC <= n; t += VEC) mx = vmaxq_f32(mx, vld1q_f32(s + t));
    float32x2_t h = vpmax_f32(vget_low_f32(mx), vget_high_f32(mx));
    float r = vget_lane_f32(vpmax_f32(h, h), 0);
    for (; t < n; t++) r = s[t] > r ? s[t] : r;
    return r;
}

static void scale(float *x, int32_t n, float a) {
    int32_t t = 0;
    for (; t + VEC <= n; t += VEC) vst1q_f32(x + t, vmulq_n_f32(vld1q_f32(x + t), a));
    for (; t < n; t++) x[t] *= a;
}

static const oc_attn_kernels table = { "neon", VEC, PANEL, gemm, pack_kt, pack_v, exp2_sum, max_f32, scale };

const oc_attn_kernels *oc_attn_kernels_neon(void) { return &table; }
