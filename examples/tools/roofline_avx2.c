/* roofline_avx2.c: the AVX2 FMA loop of the FP32 peak measurement and the read-only loop of the
 * read bandwidth (roofline.h). */
#include "tools/roofline.h"

#include <immintrin.h>

float oc_roofline_fma_avx2(int64_t n_iter, int *lanes) {
    /* acc = acc * m + a converges to a / (1 - m): no overflow, no subnormals, FMA latency bound per
     * chain, so 12 chains keep two FMA pipes of latency 4-5 busy */
    /* twelve chains written out: compilers keep an array of accumulators in memory */
    const __m256 m = _mm256_set1_ps(0.999f), a = _mm256_set1_ps(1e-3f);
    __m256 c0 = _mm256_set1_ps(0), c1 = _mm256_set1_ps(1), c2 = _mm256_set1_ps(2), c3 = _mm256_set1_ps(3);
    __m256 c4 = _mm256_set1_ps(4), c5 = _mm256_set1_ps(5), c6 = _mm256_set1_ps(6), c7 = _mm256_set1_ps(7);
    __m256 c8 = _mm256_set1_ps(8), c9 = _mm256_set1_ps(9), c10 = _mm256_set1_ps(10), c11 = _mm256_set1_ps(11);
    for (int64_t i = 0; i < n_iter; i++) {
        c0 = _mm256_fmadd_ps(c0, m, a); c1 = _mm256_fmadd_ps(c1, m, a); c2 = _mm256_fmadd_ps(c2, m, a);
        c3 = _mm256_fmadd_ps(c3, m, a); c4 = _mm256_fmadd_ps(c4, m, a); c5 = _mm256_fmadd_ps(c5, m, a);
        c6 = _mm256_fmadd_ps(c6, m, a); c7 = _mm256_fmadd_ps(c7, m, a); c8 = _mm256_fmadd_ps(c8, m, a);
        c9 = _mm256_fmadd_ps(c9, m, a); c10 = _mm256_fmadd_ps(c10, m, a); c11 = _mm256_fmadd_ps(c11, m, a);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                             _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
    *lanes = 8;
    return _mm_cvtss_f32(_mm256_castps256_ps128(s));
}

/* Four 32-byte loads per step into four xor chains: nothing is written. */
uint64_t oc_roofline_read_avx2(const void *p, size_t n) {
    const __m256i *v = p;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0, nv = n / 32;
    for (; i + 4 <= nv; i += 4) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256(v + i));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256(v + i + 1));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256(v + i + 2));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256(v + i + 3));
    }
    for (; i < nv; i++) a0 = _mm256_xor_si256(a0, _mm256_load_si256(v + i));
    __m256i s = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    uint64_t out[4];
    _mm256_storeu_si256((__m256i *)out, s);
    return out[0] ^ out[1] ^ out[2] ^ out[3];
}
