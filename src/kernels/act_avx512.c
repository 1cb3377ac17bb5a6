/* act_avx512.c: SiLU and QuickGELU (x sigmoid(a x), a = 1 or 1.702), optionally times up (SwiGLU),
 * on 16 floats at a time: sigmoid(a x) = 1 / (1 + 2^(-a x log2 e)) with exp2_avx512.h. The scalar
 * loops of nn.c (libm expf) stay the reference and serve GELU (erf) and the other ISAs. Error: the
 * exponent's rounding (|a x| 6e-8 relative in e), the polynomial (2e-7) and the division, against
 * expf's one rounding of -a x: within 1e-6 + 1.2e-7 |a x| of the exact value (test_nn). A NaN x
 * gives NaN; where -a x log2 e > 126 the exponential is taken as inf (as expf overflows near there),
 * so the result is -0 as the scalar loop's. */
#include "kernels/nn.h"
#include "kernels/exp2_avx512.h"

#include <immintrin.h>
#include <math.h>

void oc_act_avx512(float *out, const float *x, const float *up, int64_t n, oc_act act) {
    if (act != OC_ACT_SILU && act != OC_ACT_GELU_QUICK) {
        oc_act_scalar(out, x, up, n, act);
        return;
    }
    /* -a log2 e, with a rounded to f32 first as the scalar loop (and HF in f32) multiplies by it */
    const __m512 k = _mm512_set1_ps(-(act == OC_ACT_SILU ? 1.0f : 1.702f) * 1.44269504088896341f);
    const __m512 one = _mm512_set1_ps(1.0f), hi = _mm512_set1_ps(126.0f), inf = _mm512_set1_ps(INFINITY);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = (__mmask16)(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512 t = _mm512_mul_ps(v, k);   /* above 126: e = inf, as expf overflows, so y = x / inf = 0 */
        __m512 e = _mm512_mask_mov_ps(oc_exp2_avx512(_mm512_min_ps(t, hi)), _mm512_cmp_ps_mask(t, hi, _CMP_GT_OQ), inf);
        __m512 y = _mm512_div_ps(v, _mm512_add_ps(one, e));
        if (up) y = _mm512_mul_ps(y, _mm512_maskz_loadu_ps(m, up + i));
        _mm512_mask_storeu_ps(out + i, m, y);
    }
}
