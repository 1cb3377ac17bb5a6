/* exp2_avx512.h: 2^x on 16 floats for the AVX-512 kernels (include only from *_avx512.c files):
 * x = n + f with n the nearest integer, 2^f by its Taylor polynomial of degree 6 in f ln 2 (about
 * 2e-7 relative), 2^n added to the exponent bits. Below -125 the result is 0 (and for NaN); the
 * caller keeps x <= 127. Used by the attention softmax and the activations (act_avx512.c). */
#ifndef OC_EXP2_AVX512_H
#define OC_EXP2_AVX512_H

#include <immintrin.h>

static inline __attribute__((always_inline)) __m512 oc_exp2_avx512(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-125.0f);
    __m512 xc = _mm512_max_ps(x, lo);
    __m512 n = _mm512_roundscale_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(xc, n);
    __m512 p = _mm512_set1_ps(1.5403530393381608e-4f);   /* ln2^k / k!, k = 6 .. 0 */
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23);
    __m512 r = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), e));
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ), r);
}

#endif
