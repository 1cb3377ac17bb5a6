/* attn_avx2.c: attention micro-kernels for x86-64 AVX2 + FMA + F16C (attn_kernels.h).
 * GEMM: 6 rows x 16 columns of accumulators (12 ymm) per step, B from a packed panel, A broadcast
 * one element at a time; a 6 x 8 variant covers a last panel one vector wide. f16 K/V rows are
 * widened with vcvtph2ps. The softmax runs 8 query columns at a time down the key rows.
 * exp2: Cody-Waite split x = n + f, |f| <= 1/2, degree-6 Taylor polynomial of 2^f (truncation
 * error (ln2/2)^7/7! = 1.2e-7, so about 2e-7 relative with rounding; the test checks it over
 * [-125, 0]); inputs below -125 (and -inf) give exactly 0.
 * attn_avx512.c mirrors this file line for line with 16-float vectors. */
#include "attention/attn_kernels.h"
#include "core/f16.h"

#include <immintrin.h>
#include <math.h>

#define VEC 8
#define PANEL 16
#define MR 6
#define INLINE static inline __attribute__((always_inline))
/* Full unrolling over the (constant) row count keeps the accumulator arrays in registers. */
#define UNROLL_ROWS _Pragma("GCC unroll 16")

/* ---- GEMM ------------------------------------------------------------------------------------- */

/* rows x 2 vectors; rows is a constant after inlining, so acc[] lives in registers. */
INLINE void kernel_2v(int32_t rows, int32_t k, const float *a, int64_t a_rs, int64_t a_cs, const float *b,
                      float *c, int64_t ldc, int accumulate) {
    __m256 c0[MR], c1[MR];
    UNROLL_ROWS
    for (int32_t r = 0; r < rows; r++) {
        c0[r] = accumulate ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
        c1[r] = accumulate ? _mm256_loadu_ps(c + r * ldc + VEC) : _mm256_setzero_ps();
    }
    for (int32_t kk = 0; kk < k; kk++) {
        __m256 b0 = _mm256_loadu_ps(b + (int64_t)kk * PANEL), b1 = _mm256_loadu_ps(b + (int64_t)kk * PANEL + VEC);
        const float *ak = a + kk * a_cs;
        UNROLL_ROWS
        for (int32_t r = 0; r < rows; r++) {
            __m256 av = _mm256_broadcast_ss(ak + r * a_rs);
            c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
            c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
        }
    }
    UNROLL_ROWS
    for (int32_t r = 0; r < rows; r++) {
        _mm256_storeu_ps(c + r * ldc, c0[r]);
        _mm256_storeu_ps(c + r * ldc + VEC, c1[r]);
    }
}

INLINE void kernel_1v(int32_t rows, int32_t k, const float *a, int64_t a_rs, int64_t a_cs, const float *b,
                      float *c, int64_t ldc, int accumulate) {
    __m256 c0[MR];
    UNROLL_ROWS
    for (int32_t r = 0; r < rows; r++) c0[r] = accumulate ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
    for (int32_t kk = 0; kk < k; kk++) {
        __m256 b0 = _mm256_loadu_ps(b + (int64_t)kk * VEC);
        const float *ak = a + kk * a_cs;
        UNROLL_ROWS
        for (int32_t r = 0; r < rows; r++) c0[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(ak + r * a_rs), b0, c0[r]);
    }
    UNROLL_ROWS
    for (int32_t r = 0; r < rows; r++) _mm256_storeu_ps(c + r * ldc, c0[r]);
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

INLINE __m256 load8(const void *row, int32_t c, int32_t dtype) {
    if (dtype == OC_DTYPE_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + c)));
    return _mm256_loadu_ps((const float *)row + c);
}

static float load1(const void *row, int32_t c, int32_t dtype) {
    if (dtype == OC_DTYPE_F16) return oc_f16_to_f32(((const uint16_t *)row)[c]);
    return ((const float *)row)[c];
}

static void convert_rows(float *dst, const void *const *rows, int32_t n_rows, int32_t d, int32_t dtype) {
    for (int32_t t = 0; t < n_rows; t++) {
        float *out = dst + (int64_t)t * d;
        int32_t c = 0;
        for (; c + VEC <= d; c += VEC) _mm256_storeu_ps(out + c, load8(rows[t], c, dtype));
        for (; c < d; c++) out[c] = load1(rows[t], c, dtype);
    }
}

static void pack_v(float *dst, const void *const *rows, int32_t n_keys, int32_t d, int32_t dpad, int32_t dtype) {
    for (int32_t c = 0; c < dpad; c += VEC) {
        int32_t p0 = c / PANEL * PANEL, w = dpad - p0 >= PANEL ? PANEL : VEC;
        float *base = dst + (int64_t)p0 * n_keys + (c - p0);
        if (c + VEC <= d) {
            for (int32_t t = 0; t < n_keys; t++) _mm256_storeu_ps(base + (int64_t)t * w, load8(rows[t], c, dtype));
        } else {
            for (int32_t t = 0; t < n_keys; t++) {
                float tmp[VEC];
                for (int32_t cc = 0; cc < VEC; cc++) tmp[cc] = c + cc < d ? load1(rows[t], c + cc, dtype) : 0.0f;
                _mm256_storeu_ps(base + (int64_t)t * w, _mm256_loadu_ps(tmp));
            }
        }
    }
}

/* ---- softmax pieces ------------------------------------------------------------------------------- */

INLINE __m256 exp2_v(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-125.0f);
    __m256 xc = _mm256_max_ps(x, lo);
    __m256 n = _mm256_round_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(xc, n);
    __m256 p = _mm256_set1_ps(1.5403530393381608e-4f);   /* ln2^k / k!, k = 6 .. 0 */
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291076284772e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504108664821580e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022650695910071e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718055994531e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    __m256 r = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
    return _mm256_and_ps(r, _mm256_cmp_ps(x, lo, _CMP_GE_OQ));
}

static void softmax_cols(float *s, int64_t lds, int32_t n_keys, int32_t n_cols, float *m, float *l, float *alpha) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY), zero = _mm256_setzero_ps();
    for (int32_t c = 0; c < n_cols; c += VEC) {
        __m256 mx = ninf;
        for (int32_t t = 0; t < n_keys; t++) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + t * lds + c));
        __m256 m_old = _mm256_loadu_ps(m + c), m_new = _mm256_max_ps(m_old, mx);
        __m256 old_empty = _mm256_cmp_ps(m_old, ninf, _CMP_EQ_OQ);
        __m256 sub = _mm256_blendv_ps(m_new, zero, _mm256_cmp_ps(m_new, ninf, _CMP_EQ_OQ));   /* no -inf - -inf */
        __m256 sum = zero;
        for (int32_t t = 0; t < n_keys; t++) {
            __m256 e = exp2_v(_mm256_sub_ps(_mm256_loadu_ps(s + t * lds + c), sub));
            _mm256_storeu_ps(s + t * lds + c, e);
            sum = _mm256_add_ps(sum, e);
        }
        __m256 a = _mm256_blendv_ps(exp2_v(_mm256_sub_ps(m_old, sub)), zero, old_empty);
        _mm256_storeu_ps(alpha + c, a);
        _mm256_storeu_ps(l + c, _mm256_fmadd_ps(_mm256_loadu_ps(l + c), a, sum));
        _mm256_storeu_ps(m + c, m_new);
    }
}

INLINE void transpose8(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* Query rows in groups of 8: each group fills 8 adjacent columns of one panel, so every
 * transposed register is one contiguous store. */
void oc_attn_avx2_pack_qt(float *dst, const float *const *rows, int32_t n_rows, int32_t n_cols, int32_t d,
                          float scale, int32_t panel, int32_t vec) {
    const __m256 sv = _mm256_set1_ps(scale);
    for (int32_t k0 = 0; k0 < n_cols; k0 += 8) {
        int32_t p0 = k0 / panel * panel, w = n_cols - p0 >= panel ? panel : vec;
        float *base = dst + (int64_t)p0 * d + (k0 - p0);
        int32_t c = 0;
        if (k0 + 8 <= n_rows) {
            for (; c + 8 <= d; c += 8) {
                __m256 r[8];
                for (int32_t t = 0; t < 8; t++) r[t] = _mm256_mul_ps(_mm256_loadu_ps(rows[k0 + t] + c), sv);
                transpose8(r);
                for (int32_t cc = 0; cc < 8; cc++) _mm256_storeu_ps(base + (int64_t)(c + cc) * w, r[cc]);
            }
        }
        for (; c < d; c++)
            for (int32_t t = 0; t < 8; t++) base[(int64_t)c * w + t] = k0 + t < n_rows ? rows[k0 + t][c] * scale : 0.0f;
    }
}

static void pack_qt(float *dst, const float *const *rows, int32_t n_rows, int32_t n_cols, int32_t d, float scale) {
    oc_attn_avx2_pack_qt(dst, rows, n_rows, n_cols, d, scale, PANEL, VEC);
}

static void scale(float *dst, const float *src, int32_t n, float a) {
    __m256 av = _mm256_set1_ps(a);
    int32_t t = 0;
    for (; t + VEC <= n; t += VEC) _mm256_storeu_ps(dst + t, _mm256_mul_ps(_mm256_loadu_ps(src + t), av));
    for (; t < n; t++) dst[t] = src[t] * a;
}

/* ---- direct path (decode): K and V rows read in place ---------------------------------------------- */

/* Lane i of the result = the sum of the 8 lanes of a[i] (two levels of hadd, then the 128-bit halves
 * added: 7 instructions for 8 sums). */
INLINE __m256 hsum8(const __m256 a[8]) {
    __m256 g0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    __m256 g1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(g0, g1, 0x20), _mm256_permute2f128_ps(g0, g1, 0x31));
}

/* Rows q[0..R) against KB = 8 / RB keys (R <= RB): lane kb * RB + r = q_r . k_kb over the first
 * d - d % 8 elements; keys past nk repeat the last one (their lanes are not stored). */
INLINE __m256 dot_block(int RB, int R, const float *q, int32_t d8, int32_t d, const void *const *krows, int32_t nk,
                        int32_t dtype) {
    const int KB = VEC / RB;
    __m256 acc[8];
    UNROLL_ROWS
    for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
    const void *kr[8];
    UNROLL_ROWS
    for (int kb = 0; kb < KB; kb++) kr[kb] = krows[kb < nk ? kb : nk - 1];
    for (int32_t c = 0; c < d8; c += VEC) {
        __m256 kv[8];
        UNROLL_ROWS
        for (int kb = 0; kb < KB; kb++) kv[kb] = load8(kr[kb], c, dtype);
        UNROLL_ROWS
        for (int r = 0; r < R; r++) {
            __m256 qv = _mm256_loadu_ps(q + (int64_t)r * d + c);
            UNROLL_ROWS
            for (int kb = 0; kb < KB; kb++) acc[kb * RB + r] = _mm256_fmadd_ps(qv, kv[kb], acc[kb * RB + r]);
        }
    }
    return hsum8(acc);
}

INLINE void dot_run(int RB, int R, float *s, int64_t lds, const float *q, const void *const *krows, int32_t n_keys,
                    int32_t d, int32_t dtype) {
    const int KB = VEC / RB;
    int32_t d8 = d / VEC * VEC;
    for (int32_t t = 0; t < n_keys; t += KB) {
        int32_t nk = OC_MIN(KB, n_keys - t);
        float v[VEC];
        _mm256_storeu_ps(v, dot_block(RB, R, q, d8, d, krows + t, nk, dtype));
        for (int32_t kb = 0; kb < nk; kb++)
            for (int r = 0; r < R; r++) {
                float sum = v[kb * RB + r];
                for (int32_t c = d8; c < d; c++) sum += q[(int64_t)r * d + c] * load1(krows[t + kb], c, dtype);
                s[(t + kb) * lds + r] = sum;
            }
    }
}

/* dtype is a constant in each copy, so the conversion branch leaves the inner loops. */
INLINE void dot_rows_t(float *s, int64_t lds, const float *q, int32_t n_rows, const void *const *krows, int32_t n_keys,
                       int32_t d, int32_t dtype) {
    for (int32_t r0 = 0; r0 < n_rows; r0 += 8) {
        const float *qr = q + (int64_t)r0 * d;
        float *sr = s + r0;
        switch (OC_MIN(8, n_rows - r0)) {
        case 1: dot_run(1, 1, sr, lds, qr, krows, n_keys, d, dtype); break;
        case 2: dot_run(2, 2, sr, lds, qr, krows, n_keys, d, dtype); break;
        case 3: dot_run(4, 3, sr, lds, qr, krows, n_keys, d, dtype); break;
        case 4: dot_run(4, 4, sr, lds, qr, krows, n_keys, d, dtype); break;
        case 5: dot_run(8, 5, sr, lds, qr, krows, n_keys, d, dtype); break;
        case 6: dot_run(8, 6, sr, lds, qr, krows, n_keys, d, dtype); break;
        case 7: dot_run(8, 7, sr, lds, qr, krows, n_keys, d, dtype); break;
        default: dot_run(8, 8, sr, lds, qr, krows, n_keys, d, dtype); break;
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

/* o[r][c0 .. c0 + 8 NV) += sum_t p[t][r] v_t[..] for R rows (R x NV <= 12 accumulators of the 16
 * registers), each V chunk converted once for the R rows. */
INLINE void acc_block(int R, int NV, float *o, int64_t ldo, const float *p, int64_t ldp, const void *const *vrows,
                      int32_t n_keys, int32_t c0, int32_t dtype) {
    __m256 acc[6][2];
    UNROLL_ROWS
    for (int r = 0; r < R; r++) {
        UNROLL_ROWS
        for (int v = 0; v < NV; v++) acc[r][v] = _mm256_loadu_ps(o + r * ldo + c0 + v * VEC);
    }
    for (int32_t t = 0; t < n_keys; t++) {
        __m256 x[2];
        UNROLL_ROWS
        for (int v = 0; v < NV; v++) x[v] = load8(vrows[t], c0 + v * VEC, dtype);
        const float *pt = p + t * ldp;
        UNROLL_ROWS
        for (int r = 0; r < R; r++) {
            __m256 pb = _mm256_broadcast_ss(pt + r);
            UNROLL_ROWS
            for (int v = 0; v < NV; v++) acc[r][v] = _mm256_fmadd_ps(pb, x[v], acc[r][v]);
        }
    }
    UNROLL_ROWS
    for (int r = 0; r < R; r++) {
        UNROLL_ROWS
        for (int v = 0; v < NV; v++) _mm256_storeu_ps(o + r * ldo + c0 + v * VEC, acc[r][v]);
    }
}

#define ACC_ROWS(R, ...)                           \
    if (nv == 1) acc_block(R, 1, __VA_ARGS__);     \
    else acc_block(R, 2, __VA_ARGS__);

INLINE void acc_rows_t(float *o, int64_t ldo, const float *p, int64_t ldp, int32_t n_rows, const void *const *vrows,
                       int32_t n_keys, int32_t d, int32_t dtype) {
    int32_t d8 = d / VEC * VEC;
    for (int32_t c0 = 0; c0 < d8; c0 += 2 * VEC) {
        int32_t nv = OC_MIN(2, (d8 - c0) / VEC);
        for (int32_t r0 = 0; r0 < n_rows; r0 += 6) {
            float *orow = o + r0 * ldo;
            const float *pr = p + r0;
            switch (OC_MIN(6, n_rows - r0)) {
            case 1: ACC_ROWS(1, orow, ldo, pr, ldp, vrows, n_keys, c0, dtype) break;
            case 2: ACC_ROWS(2, orow, ldo, pr, ldp, vrows, n_keys, c0, dtype) break;
            case 3: ACC_ROWS(3, orow, ldo, pr, ldp, vrows, n_keys, c0, dtype) break;
            case 4: ACC_ROWS(4, orow, ldo, pr, ldp, vrows, n_keys, c0, dtype) break;
            case 5: ACC_ROWS(5, orow, ldo, pr, ldp, vrows, n_keys, c0, dtype) break;
            default: ACC_ROWS(6, orow, ldo, pr, ldp, vrows, n_keys, c0, dtype) break;
            }
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

/* attn_kernels.h col_sums: 8 keys a vector (transpose8 above), each lane one key's sum over the
 * columns in order (mul, then add: the plain loop's roundings; C11 contracts nothing into an FMA). */
static void col_sums(const float *s, int64_t lds, int32_t n_keys, int32_t n_cols, const float *w, float *out) {
    int32_t t0 = 0;
    for (; t0 + VEC <= n_keys; t0 += VEC) {
        __m256 acc = _mm256_setzero_ps();
        for (int32_t c0 = 0; c0 < n_cols; c0 += VEC) {
            __m256 r[VEC];
            for (int u = 0; u < VEC; u++) r[u] = _mm256_loadu_ps(s + (t0 + u) * lds + c0);
            transpose8(r);
            for (int k = 0; k < VEC; k++) acc = _mm256_add_ps(acc, _mm256_mul_ps(r[k], _mm256_set1_ps(w[c0 + k])));
        }
        _mm256_storeu_ps(out + t0, _mm256_add_ps(_mm256_loadu_ps(out + t0), acc));
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

static const oc_attn_kernels table = { "avx2", VEC, PANEL, gemm, convert_rows, pack_v, softmax_cols, pack_qt, scale,
                                       dot_rows, acc_rows, NULL, col_sums };   /* pack_p: f32 products */

const oc_attn_kernels *oc_attn_kernels_avx2(void) { return &table; }
