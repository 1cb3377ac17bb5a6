/* attn_neon.c: attention micro-kernels for ARM NEON (AArch64, and ARMv7 with VFPv4), attn_kernels.h.
 * The structure of attn_avx2.c with 4-float vectors: GEMM of 6 rows x 8 columns (12 q-register
 * accumulators, so ARMv7's 16 q registers suffice), the same exp2 split and polynomial. Rounding
 * to nearest uses truncation of x - 1/2 (valid for the x <= 0 that softmax passes), which ARMv7
 * has. f16 is widened with integer ops and a 2^112 multiply (no FP16 extension needed); ARMv7
 * NEON flushes subnormal values, so halves below 6.1e-5 read as 0 there. */
#include "attention/attn_kernels.h"
#include "core/f16.h"

#include <arm_neon.h>
#include <math.h>

#define VEC 4
#define PANEL 8
#define MR 6
#define INLINE static inline __attribute__((always_inline))
/* Full unrolling over the (constant) row count keeps the accumulator arrays in registers. */
#define UNROLL_ROWS _Pragma("GCC unroll 16")

/* ---- GEMM ------------------------------------------------------------------------------------- */

INLINE void kernel_2v(int32_t rows, int32_t k, const float *a, int64_t a_rs, int64_t a_cs, const float *b,
                      float *c, int64_t ldc, int accumulate) {
    float32x4_t c0[MR], c1[MR];
    UNROLL_ROWS
    for (int32_t r = 0; r < rows; r++) {
        c0[r] = accumulate ? vld1q_f32(c + r * ldc) : vdupq_n_f32(0.0f);
        c1[r] = accumulate ? vld1q_f32(c + r * ldc + VEC) : vdupq_n_f32(0.0f);
    }
    for (int32_t kk = 0; kk < k; kk++) {
        float32x4_t b0 = vld1q_f32(b + (int64_t)kk * PANEL), b1 = vld1q_f32(b + (int64_t)kk * PANEL + VEC);
        const float *ak = a + kk * a_cs;
        UNROLL_ROWS
        for (int32_t r = 0; r < rows; r++) {
            float32x4_t av = vdupq_n_f32(ak[r * a_rs]);
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

INLINE void kernel_1v(int32_t rows, int32_t k, const float *a, int64_t a_rs, int64_t a_cs, const float *b,
                      float *c, int64_t ldc, int accumulate) {
    float32x4_t c0[MR];
    UNROLL_ROWS
    for (int32_t r = 0; r < rows; r++) c0[r] = accumulate ? vld1q_f32(c + r * ldc) : vdupq_n_f32(0.0f);
    for (int32_t kk = 0; kk < k; kk++) {
        float32x4_t b0 = vld1q_f32(b + (int64_t)kk * VEC);
        const float *ak = a + kk * a_cs;
        UNROLL_ROWS
        for (int32_t r = 0; r < rows; r++) c0[r] = vfmaq_f32(c0[r], vdupq_n_f32(ak[r * a_rs]), b0);
    }
    UNROLL_ROWS
    for (int32_t r = 0; r < rows; r++) vst1q_f32(c + r * ldc, c0[r]);
}

#define DISPATCH_ROWS OC_ATTN_DISPATCH_ROWS_6

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

static void convert_rows(float *dst, const void *const *rows, int32_t n_rows, int32_t d, int32_t dtype) {
    for (int32_t t = 0; t < n_rows; t++) {
        float *out = dst + (int64_t)t * d;
        int32_t c = 0;
        for (; c + VEC <= d; c += VEC) vst1q_f32(out + c, load4(rows[t], c, dtype));
        for (; c < d; c++) out[c] = load1(rows[t], c, dtype);
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

static void softmax_cols(float *s, int64_t lds, int32_t n_keys, int32_t n_cols, float *m, float *l, float *alpha) {
    const float32x4_t ninf = vdupq_n_f32(-INFINITY), zero = vdupq_n_f32(0.0f);
    for (int32_t c = 0; c < n_cols; c += VEC) {
        float32x4_t mx = ninf;
        for (int32_t t = 0; t < n_keys; t++) mx = vmaxq_f32(mx, vld1q_f32(s + t * lds + c));
        float32x4_t m_old = vld1q_f32(m + c), m_new = vmaxq_f32(m_old, mx);
        uint32x4_t old_empty = vceqq_f32(m_old, ninf);
        float32x4_t sub = vbslq_f32(vceqq_f32(m_new, ninf), zero, m_new);   /* no -inf - -inf */
        float32x4_t sum = zero;
        for (int32_t t = 0; t < n_keys; t++) {
            float32x4_t e = exp2_v(vsubq_f32(vld1q_f32(s + t * lds + c), sub));
            vst1q_f32(s + t * lds + c, e);
            sum = vaddq_f32(sum, e);
        }
        float32x4_t a = vbslq_f32(old_empty, zero, exp2_v(vsubq_f32(m_old, sub)));
        vst1q_f32(alpha + c, a);
        vst1q_f32(l + c, vfmaq_f32(sum, vld1q_f32(l + c), a));
        vst1q_f32(m + c, m_new);
    }
}

INLINE void transpose4(float32x4_t r[4]) {
    float32x4x2_t t01 = vtrnq_f32(r[0], r[1]), t23 = vtrnq_f32(r[2], r[3]);
    r[0] = vcombine_f32(vget_low_f32(t01.val[0]), vget_low_f32(t23.val[0]));
    r[1] = vcombine_f32(vget_low_f32(t01.val[1]), vget_low_f32(t23.val[1]));
    r[2] = vcombine_f32(vget_high_f32(t01.val[0]), vget_high_f32(t23.val[0]));
    r[3] = vcombine_f32(vget_high_f32(t01.val[1]), vget_high_f32(t23.val[1]));
}

/* Query rows in groups of 4: each transposed register is one contiguous store into a panel. */
static void pack_qt(float *dst, const float *const *rows, int32_t n_rows, int32_t n_cols, int32_t d, float scale) {
    for (int32_t k0 = 0; k0 < n_cols; k0 += VEC) {
        int32_t p0 = k0 / PANEL * PANEL, w = n_cols - p0 >= PANEL ? PANEL : VEC;
        float *base = dst + (int64_t)p0 * d + (k0 - p0);
        int32_t c = 0;
        if (k0 + VEC <= n_rows) {
            for (; c + VEC <= d; c += VEC) {
                float32x4_t r[4];
                for (int32_t t = 0; t < VEC; t++) r[t] = vmulq_n_f32(vld1q_f32(rows[k0 + t] + c), scale);
                transpose4(r);
                for (int32_t cc = 0; cc < VEC; cc++) vst1q_f32(base + (int64_t)(c + cc) * w, r[cc]);
            }
        }
        for (; c < d; c++)
            for (int32_t t = 0; t < VEC; t++) base[(int64_t)c * w + t] = k0 + t < n_rows ? rows[k0 + t][c] * scale : 0.0f;
    }
}

static void scale(float *dst, const float *src, int32_t n, float a) {
    int32_t t = 0;
    for (; t + VEC <= n; t += VEC) vst1q_f32(dst + t, vmulq_n_f32(vld1q_f32(src + t), a));
    for (; t < n; t++) dst[t] = src[t] * a;
}

/* ---- direct path (decode): K and V rows read in place ---------------------------------------------- */

INLINE float hsum4(float32x4_t a) {
    float32x2_t t = vadd_f32(vget_low_f32(a), vget_high_f32(a));
    return vget_lane_f32(vpadd_f32(t, t), 0);
}

/* One key against rows q[0..R) (R <= 8: R accumulators, the key and a query chunk fit ARMv7's 16 q
 * registers); each K chunk is converted once for the R rows. */
INLINE void dot_key(int R, float *s, const float *q, int32_t d, const void *krow, int32_t dtype) {
    float32x4_t acc[8];
    UNROLL_ROWS
    for (int r = 0; r < R; r++) acc[r] = vdupq_n_f32(0.0f);
    int32_t c = 0;
    for (; c + VEC <= d; c += VEC) {
        float32x4_t kv = load4(krow, c, dtype);
        UNROLL_ROWS
        for (int r = 0; r < R; r++) acc[r] = vfmaq_f32(acc[r], vld1q_f32(q + (int64_t)r * d + c), kv);
    }
    UNROLL_ROWS
    for (int r = 0; r < R; r++) {
        float sum = hsum4(acc[r]);
        for (int32_t e = c; e < d; e++) sum += q[(int64_t)r * d + e] * load1(krow, e, dtype);
        s[r] = sum;
    }
}

INLINE void dot_rows_t(float *s, int64_t lds, const float *q, int32_t n_rows, const void *const *krows, int32_t n_keys,
                       int32_t d, int32_t dtype) {
    for (int32_t r0 = 0; r0 < n_rows; r0 += 8) {
        const float *qr = q + (int64_t)r0 * d;
        for (int32_t t = 0; t < n_keys; t++) {
            float *st = s + t * lds + r0;
            switch (OC_MIN(8, n_rows - r0)) {
            case 1: dot_key(1, st, qr, d, krows[t], dtype); break;
            case 2: dot_key(2, st, qr, d, krows[t], dtype); break;
            case 3: dot_key(3, st, qr, d, krows[t], dtype); break;
            case 4: dot_key(4, st, qr, d, krows[t], dtype); break;
            case 5: dot_key(5, st, qr, d, krows[t], dtype); break;
            case 6: dot_key(6, st, qr, d, krows[t], dtype); break;
            case 7: dot_key(7, st, qr, d, krows[t], dtype); break;
            default: dot_key(8, st, qr, d, krows[t], dtype); break;
            }
        }
    }
}

static void dot_rows(float *s, int64_t lds, const float *q, int32_t n_rows, int32_t n_cols, const void *const *krows,
                     const void *const *vrows, int32_t n_keys, int32_t d, int32_t dtype) {
    (void)vrows;
    if (dtype == OC_DTYPE_F16) dot_rows_t(s, lds, q, n_rows, krows, n_keys, d, OC_DTYPE_F16);
    else dot_rows_t(s, lds, q, n_rows, krows, n_keys, d, OC_DTYPE_F32);
    for (int32_t t = 0; t < n_keys; t++)
        for (int32_t c = n_rows; c < n_cols; c++) s[t * lds + c] = 0.0f;   /* the padding columns */
}

/* o[r][c0 .. c0 + 8) += sum_t p[t][r] v_t[..] for R <= 4 rows (8 accumulators). */
INLINE void acc_block(int R, float *o, int64_t ldo, const float *p, int64_t ldp, const void *const *vrows,
                      int32_t n_keys, int32_t c0, int32_t dtype) {
    float32x4_t a0[4], a1[4];
    UNROLL_ROWS
    for (int r = 0; r < R; r++) {
        a0[r] = vld1q_f32(o + r * ldo + c0);
        a1[r] = vld1q_f32(o + r * ldo + c0 + VEC);
    }
    for (int32_t t = 0; t < n_keys; t++) {
        float32x4_t x0 = load4(vrows[t], c0, dtype), x1 = load4(vrows[t], c0 + VEC, dtype);
        const float *pt = p + t * ldp;
        UNROLL_ROWS
        for (int r = 0; r < R; r++) {
            float32x4_t pb = vdupq_n_f32(pt[r]);   /* vfmaq_n_f32 is AArch64 only */
            a0[r] = vfmaq_f32(a0[r], x0, pb);
            a1[r] = vfmaq_f32(a1[r], x1, pb);
        }
    }
    UNROLL_ROWS
    for (int r = 0; r < R; r++) {
        vst1q_f32(o + r * ldo + c0, a0[r]);
        vst1q_f32(o + r * ldo + c0 + VEC, a1[r]);
    }
}

INLINE void acc_rows_t(float *o, int64_t ldo, const float *p, int64_t ldp, int32_t n_rows, const void *const *vrows,
                       int32_t n_keys, int32_t d, int32_t dtype) {
    int32_t d8 = d / 8 * 8;
    for (int32_t c0 = 0; c0 < d8; c0 += 8)
        for (int32_t r0 = 0; r0 < n_rows; r0 += 4) {
            float *orow = o + r0 * ldo;
            const float *pr = p + r0;
            switch (OC_MIN(4, n_rows - r0)) {
            case 1: acc_block(1, orow, ldo, pr, ldp, vrows, n_keys, c0, dtype); break;
            case 2: acc_block(2, orow, ldo, pr, ldp, vrows, n_keys, c0, dtype); break;
            case 3: acc_block(3, orow, ldo, pr, ldp, vrows, n_keys, c0, dtype); break;
            default: acc_block(4, orow, ldo, pr, ldp, vrows, n_keys, c0, dtype); break;
            }
        }
    for (int32_t t = 0; t < n_keys && d8 < d; t++)   /* the last d % 8 columns */
        for (int32_t r = 0; r < n_rows; r++)
            for (int32_t c = d8; c < d; c++) o[r * ldo + c] += p[t * ldp + r] * load1(vrows[t], c, dtype);
}

static void acc_rows(float *o, int64_t ldo, const float *p, int64_t ldp, int32_t n_rows, const void *const *vrows,
                     int32_t n_keys, int32_t d, int32_t dtype) {
    if (dtype == OC_DTYPE_F16) acc_rows_t(o, ldo, p, ldp, n_rows, vrows, n_keys, d, OC_DTYPE_F16);
    else acc_rows_t(o, ldo, p, ldp, n_rows, vrows, n_keys, d, OC_DTYPE_F32);
}

static const oc_attn_kernels table = { "neon", VEC, PANEL, gemm, convert_rows, pack_v, softmax_cols, pack_qt, scale,
                                       dot_rows, acc_rows, NULL, NULL };   /* pack_p: f32 products; col_sums: none */

const oc_attn_kernels *oc_attn_kernels_neon(void) { return &table; }
