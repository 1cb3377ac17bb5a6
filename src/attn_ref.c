/* attn_ref.c: the scalar attention micro-kernels (attn_kernels.h), plain C, always built. They are
 * the portable fallback and the readable statement of what each SIMD table computes; the tests
 * compare every table with a double-precision reference of the whole attention. The panel width
 * here (8) is only a layout choice; nothing in it depends on vector registers. */
#include "attn_kernels.h"
#include "f16.h"

#include <math.h>

#define VEC 4
#define PANEL 8

static void gemm(int32_t m, int32_t n, int32_t k, const float *a, int64_t lda, const float *b,
                 float *c, int64_t ldc, int accumulate) {
    for (int32_t c0 = 0; c0 < n;) {
        int32_t w = n - c0 >= PANEL ? PANEL : VEC;
        const float *bp = b + (int64_t)c0 * k;
        for (int32_t i = 0; i < m; i++) {
            for (int32_t j = 0; j < w; j++) {
                float sum = accumulate ? c[i * ldc + c0 + j] : 0.0f;
                for (int32_t kk = 0; kk < k; kk++) sum += a[i * lda + kk] * bp[(int64_t)kk * w + j];
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

static void pack_kt(float *dst, const void *const *rows, int32_t n_keys, int32_t d, int32_t dtype) {
    for (int32_t t = 0; t < n_keys; t++)
        for (int32_t c = 0; c < d; c++)
            *panel_at(dst, n_keys, d, c, t) = rows[t] ? load_elem(rows[t], c, dtype) : 0.0f;
}

static void pack_v(float *dst, const void *const *rows, int32_t n_keys, int32_t d, int32_t dpad, int32_t dtype) {
    for (int32_t t = 0; t < n_keys; t++)
        for (int32_t c = 0; c < dpad; c++)
            *panel_at(dst, dpad, n_keys, t, c) = c < d ? load_elem(rows[t], c, dtype) : 0.0f;
}

static float exp2_sum(float *s, int32_t n, float m) {
    float sum = 0.0f;
    for (int32_t t = 0; t < n; t++) {
        float x = s[t] - m;
        s[t] = x >= -125.0f ? exp2f(x) : 0.0f;   /* as the SIMD tables: tiny and -inf give 0 */
        sum += s[t];
    }
    return sum;
}

static float max_f32(const float *s, int32_t n) {
    float mx = s[0];
    for (int32_t t = 1; t < n; t++) mx = s[t] > mx ? s[t] : mx;
    return mx;
}

static void scale(float *x, int32_t n, float a) {
    for (int32_t t = 0; t < n; t++) x[t] *= a;
}

static const oc_attn_kernels table = { "scalar", VEC, PANEL, gemm, pack_kt, pack_v, exp2_sum, max_f32, scale };

const oc_attn_kernels *oc_attn_kernels_ref(void) { return &table; }

const oc_attn_kernels *oc_attn_kernels_for(oc_isa isa) {
    switch (isa) {
    case OC_ISA_SCALAR: return oc_attn_kernels_ref();
#if OC_HAVE_AVX2_KERNELS
    case OC_ISA_AVX2: return oc_attn_kernels_avx2();
#endif
#if OC_HAVE_AVX512_KERNELS
    case OC_ISA_AVX512: return oc_attn_kernels_avx512();
#endif
#if OC_HAVE_NEON_KERNELS
    case OC_ISA_NEON: return oc_attn_kernels_neon();
#endif
    default: return NULL;
    }
}
