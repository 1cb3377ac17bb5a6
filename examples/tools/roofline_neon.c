/* roofline_neon.c: the NEON FMA loop of the FP32 peak measurement (roofline.h). */
#include "tools/roofline.h"

#include <arm_neon.h>

float oc_roofline_fma_neon(int64_t n_iter, int *lanes) {
    /* twelve chains written out (an array of accumulators stays in memory, roofline_avx2.c) */
    const float32x4_t m = vdupq_n_f32(0.999f), a = vdupq_n_f32(1e-3f);
    float32x4_t c0 = vdupq_n_f32(0);
    float32x4_t c1 = vdupq_n_f32(1);
    float32x4_t c2 = vdupq_n_f32(2);
    float32x4_t c3 = vdupq_n_f32(3);
    float32x4_t c4 = vdupq_n_f32(4);
    float32x4_t c5 = vdupq_n_f32(5);
    float32x4_t c6 = vdupq_n_f32(6);
    float32x4_t c7 = vdupq_n_f32(7);
    float32x4_t c8 = vdupq_n_f32(8);
    float32x4_t c9 = vdupq_n_f32(9);
    float32x4_t c10 = vdupq_n_f32(10);
    float32x4_t c11 = vdupq_n_f32(11);
    for (int64_t i = 0; i < n_iter; i++) {
        c0 = vfmaq_f32(a, c0, m);
        c1 = vfmaq_f32(a, c1, m);
        c2 = vfmaq_f32(a, c2, m);
        c3 = vfmaq_f32(a, c3, m);
        c4 = vfmaq_f32(a, c4, m);
        c5 = vfmaq_f32(a, c5, m);
        c6 = vfmaq_f32(a, c6, m);
        c7 = vfmaq_f32(a, c7, m);
        c8 = vfmaq_f32(a, c8, m);
        c9 = vfmaq_f32(a, c9, m);
        c10 = vfmaq_f32(a, c10, m);
        c11 = vfmaq_f32(a, c11, m);
    }
    float32x4_t s = c0;
    s = vaddq_f32(s, c1);
    s = vaddq_f32(s, c2);
    s = vaddq_f32(s, c3);
    s = vaddq_f32(s, c4);
    s = vaddq_f32(s, c5);
    s = vaddq_f32(s, c6);
    s = vaddq_f32(s, c7);
    s = vaddq_f32(s, c8);
    s = vaddq_f32(s, c9);
    s = vaddq_f32(s, c10);
    s = vaddq_f32(s, c11);
    *lanes = 4;
    return vgetq_lane_f32(s, 0) + vgetq_lane_f32(s, 3);
}
