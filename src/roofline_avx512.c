/* roofline_avx512.c: the AVX-512 FMA loop of the FP32 peak measurement (roofline.h). */
#include "roofline.h"

#include <immintrin.h>

float oc_roofline_fma_avx512(int64_t n_iter, int *lanes) {
    /* same recurrence as the AVX2 loop on zmm registers (roofline_avx2.c) */
    __m512 acc[OC_ROOFLINE_CHAINS];
    const __m512 m = _mm512_set1_ps(0.999f), a = _mm512_set1_ps(1e-3f);
    for (int c = 0; c < OC_ROOFLINE_CHAINS; c++) acc[c] = _mm512_set1_ps((float)c);
    for (int64_t i = 0; i < n_iter; i++)
        for (int c = 0; c < OC_ROOFLINE_CHAINS; c++) acc[c] = _mm512_fmadd_ps(acc[c], m, a);
    __m512 s = acc[0];
    for (int c = 1; c < OC_ROOFLINE_CHAINS; c++) s = _mm512_add_ps(s, acc[c]);
    *lanes = 16;
    return _mm512_reduce_add_ps(s);
}
