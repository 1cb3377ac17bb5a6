/* roofline_avx512.c: the AVX-512 FMA loop of the FP32 peak, the vdpbf16ps loop of the BF16 peak and
 * the read-only loop of the read bandwidth (roofline.h). */
#include "tools/roofline.h"

#include <immintrin.h>

float oc_roofline_fma_avx512(int64_t n_iter, int *lanes) {
    /* twelve chains written out (an array of accumulators stays in memory, roofline_avx2.c) */
    const __m512 m = _mm512_set1_ps(0.999f), a = _mm512_set1_ps(1e-3f);
    __m512 c0 = _mm512_set1_ps(0);
    __m512 c1 = _mm512_set1_ps(1);
    __m512 c2 = _mm512_set1_ps(2);
    __m512 c3 = _mm512_set1_ps(3);
    __m512 c4 = _mm512_set1_ps(4);
    __m512 c5 = _mm512_set1_ps(5);
    __m512 c6 = _mm512_set1_ps(6);
    __m512 c7 = _mm512_set1_ps(7);
    __m512 c8 = _mm512_set1_ps(8);
    __m512 c9 = _mm512_set1_ps(9);
    __m512 c10 = _mm512_set1_ps(10);
    __m512 c11 = _mm512_set1_ps(11);
    for (int64_t i = 0; i < n_iter; i++) {
        c0 = _mm512_fmadd_ps(c0, m, a);
        c1 = _mm512_fmadd_ps(c1, m, a);
        c2 = _mm512_fmadd_ps(c2, m, a);
        c3 = _mm512_fmadd_ps(c3, m, a);
        c4 = _mm512_fmadd_ps(c4, m, a);
        c5 = _mm512_fmadd_ps(c5, m, a);
        c6 = _mm512_fmadd_ps(c6, m, a);
        c7 = _mm512_fmadd_ps(c7, m, a);
        c8 = _mm512_fmadd_ps(c8, m, a);
        c9 = _mm512_fmadd_ps(c9, m, a);
        c10 = _mm512_fmadd_ps(c10, m, a);
        c11 = _mm512_fmadd_ps(c11, m, a);
    }
    __m512 s = c0;
    s = _mm512_add_ps(s, c1);
    s = _mm512_add_ps(s, c2);
    s = _mm512_add_ps(s, c3);
    s = _mm512_add_ps(s, c4);
    s = _mm512_add_ps(s, c5);
    s = _mm512_add_ps(s, c6);
    s = _mm512_add_ps(s, c7);
    s = _mm512_add_ps(s, c8);
    s = _mm512_add_ps(s, c9);
    s = _mm512_add_ps(s, c10);
    s = _mm512_add_ps(s, c11);
    *lanes = 16;
    return _mm512_reduce_add_ps(s);
}

/* The BF16 dot-product peak: the same 12 chains on vdpbf16ps (2 products per f32 lane). */
__attribute__((target("avx512bf16"))) float oc_roofline_bf16_avx512(int64_t n_iter, int *lanes) {
    const __m512bh m = (__m512bh)_mm512_set1_epi16(0x3f80), a = (__m512bh)_mm512_set1_epi16(0x3a80);   /* 1, 2^-10 */
    __m512 c0 = _mm512_set1_ps(0), c1 = _mm512_set1_ps(1), c2 = _mm512_set1_ps(2), c3 = _mm512_set1_ps(3);
    __m512 c4 = _mm512_set1_ps(4), c5 = _mm512_set1_ps(5), c6 = _mm512_set1_ps(6), c7 = _mm512_set1_ps(7);
    __m512 c8 = _mm512_set1_ps(8), c9 = _mm512_set1_ps(9), c10 = _mm512_set1_ps(10), c11 = _mm512_set1_ps(11);
    for (int64_t i = 0; i < n_iter; i++) {
        c0 = _mm512_dpbf16_ps(c0, m, a);
        c1 = _mm512_dpbf16_ps(c1, m, a);
        c2 = _mm512_dpbf16_ps(c2, m, a);
        c3 = _mm512_dpbf16_ps(c3, m, a);
        c4 = _mm512_dpbf16_ps(c4, m, a);
        c5 = _mm512_dpbf16_ps(c5, m, a);
        c6 = _mm512_dpbf16_ps(c6, m, a);
        c7 = _mm512_dpbf16_ps(c7, m, a);
        c8 = _mm512_dpbf16_ps(c8, m, a);
        c9 = _mm512_dpbf16_ps(c9, m, a);
        c10 = _mm512_dpbf16_ps(c10, m, a);
        c11 = _mm512_dpbf16_ps(c11, m, a);
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                             _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
    *lanes = 16;
    return _mm512_reduce_add_ps(s);
}

/* Four 64-byte loads per step into four xor chains: nothing is written. */
uint64_t oc_roofline_read_avx512(const void *p, size_t n) {
    const __m512i *v = p;
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0, nv = n / 64;
    for (; i + 4 <= nv; i += 4) {
        a0 = _mm512_xor_si512(a0, _mm512_load_si512(v + i));
        a1 = _mm512_xor_si512(a1, _mm512_load_si512(v + i + 1));
        a2 = _mm512_xor_si512(a2, _mm512_load_si512(v + i + 2));
        a3 = _mm512_xor_si512(a3, _mm512_load_si512(v + i + 3));
    }
    for (; i < nv; i++) a0 = _mm512_xor_si512(a0, _mm512_load_si512(v + i));
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3)));
}
