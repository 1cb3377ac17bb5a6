/* attn_scalar.c: the scalar attention micro-kernels (attn_kernels.h), plain C, always built. They are
 * the portable fallback and the readable statement of what each SIMD table computes; the tests
 * compare every table with a double-precision reference of the whole attention. The panel width
 * here (8) is only a layout choice; nothing in it depends on vector registers. */
#include "attention/attn_kernels.h"
#include "core/f16.h"

#include <math.h>

#define VEC 4
#define PANEL 8

static void gemm(int32_t m, int32_t n, int32_t k, const float *a, int64_t a_rs, int64_t a_cs,
                 const float *b, float *c, int64_t ldc, int accumulate) {
    for (int32_t c0 = 0; c0 < n;) {
        int32_t w = n - c0 >= PANEL ? PANEL : VEC;
        const float *bp = b + (int64_t)c0 * k;
        for (int32_t i = 0; i < m; i++) {
            for (int32_t j = 0; j < w; j++) {
                float sum = accumulate ? c[i * ldc + c0 + j] : 0.0f;
                for (int32_t kk = 0; kk < k; kk++) sum += a[i * a_rs + kk * a_cs] * bp[(int64_t)kk * w + j];
                c[i * ldc + c0 + j] = sum;
            }
        }
        c0 += w;
    }
}

static float load_elem(const void *row, int32_t c, int32_t dtype) {
    if (dtype == OC_DTYPE_F16) return oc_f16_to_f32(((const uint16_t *)row)[c]);
    return ((const float *)row)[c];
}

/* Column col of a packed B with k rows and n columns (see attn_kernels.h). */
static float *panel_at(float *dst, int32_t n, int32_t k, int32_t row, int32_t col) {
    int32_t c0 = col / PANEL * PANEL;
    int32_t w = n - c0 >= PANEL ? PANEL : VEC;
    return dst + (int64_t)c0 * k + (int64_t)row * w + (col - c0);
}

static void convert_rows(float *dst, const void *const *rows, int32_t n_rows, int32_t d, int32_t dtype) {
    for (int32_t t = 0; t < n_rows; t++)
        for (int32_t c = 0; c < d; c++) dst[(int64_t)t * d + c] = load_elem(rows[t], c, dtype);
}

static void pack_v(float *dst, const void *const *rows, int32_t n_keys, int32_t d, int32_t dpad, int32_t dtype) {
    for (int32_t t = 0; t < n_keys; t++)
        for (int32_t c = 0; c < dpad; c++)
            *panel_at(dst, dpad, n_keys, t, c) = c < d ? load_elem(rows[t], c, dtype) : 0.0f;
}

static void softmax_cols(float *s, int64_t lds, int32_t n_keys, int32_t n_cols, float *m, float *l, float *alpha) {
    for (int32_t c = 0; c < n_cols; c++) {
        float mx = -INFINITY;
        for (int32_t t = 0; t < n_keys; t++) mx = s[t * lds + c] > mx ? s[t * lds + c] : mx;
        float m_new = mx > m[c] ? mx : m[c];
        float sub = m_new == -INFINITY ? 0.0f : m_new;   /* keeps -inf - -inf out */
        float sum = 0.0f;
        for (int32_t t = 0; t < n_keys; t++) {
            float x = s[t * lds + c] - sub;
            s[t * lds + c] = x >= -125.0f ? exp2f(x) : 0.0f;   /* as the SIMD tables: tiny and -inf give 0 */
            sum += s[t * lds + c];
        }
        alpha[c] = m[c] == -INFINITY ? 0.0f : exp2f(m[c] - m_new);
        l[c] = l[c] * alpha[c] + sum;
        m[c] = m_new;
    }
}

static void pack_qt(float *dst, const float *const *rows, int32_t n_rows, int32_t n_cols, int32_t d, float scale) {
    for (int32_t t = 0; t < n_cols; t++)
        for (int32_t c = 0; c < d; c++) *panel_at(dst, n_cols, d, c, t) = t < n_rows ? rows[t][c] * scale : 0.0f;
}

static void scale(float *dst, const float *src, int32_t n, float a) {
    for (int32_t t = 0; t < n; t++) dst[t] = src[t] * a;
}

static void dot_rows(float *s, int64_t lds, const float *q, int32_t n_rows, int32_t n_cols, const void *const *krows,
                     const void *const *vrows, int32_t n_keys, int32_t d, int32_t dtype) {
    (void)vrows;
    for (int32_t t = 0; t < n_keys; t++) {
        for (int32_t r = 0; r < n_rows; r++) {
            float sum = 0.0f;
            for (int32_t c = 0; c < d; c++) sum += q[(int64_t)r * d + c] * load_elem(krows[t], c, dtype);
            s[t * lds + r] = sum;
        }
        for (int32_t r = n_rows; r < n_cols; r++) s[t * lds + r] = 0.0f;
    }
}

static void acc_rows(float *o, int64_t ldo, const float *p, int64_t ldp, int32_t n_rows, const void *const *vrows,
                     int32_t n_keys, int32_t d, int32_t dtype) {
    for (int32_t t = 0; t < n_keys; t++)
        for (int32_t r = 0; r < n_rows; r++)
            for (int32_t c = 0; c < d; c++) o[r * ldo + c] += p[t * ldp + r] * load_elem(vrows[t], c, dtype);
}

static const oc_attn_kernels table = { "scalar", VEC, PANEL, gemm, convert_rows, pack_v, softmax_cols, pack_qt, scale,
                                       dot_rows, acc_rows, NULL, NULL };   /* pack_p: f32 products; col_sums: none */

const oc_attn_kernels *oc_attn_kernels_scalar(void) { return &table; }
