/* roofline_neon.c: the NEON FMA loop of the FP32 peak measurement (roofline.h). */
#include "roofline.h"

#include <arm_neon.h>

float oc_roofline_fma_neon(int64_t n_iter, int *lanes) {
    /* same recurrence as the AVX2 loop on 128-bit registers (roofline_avx2.c) */
    float32x4_t acc[OC_ROOFLINE_CHAINS];
    const float32x4_t m = vdupq_n_f32(0.999f), a = vdupq_n_f32(1e-3f);
    for (int c = 0; c < OC_ROOFLINE_CHAINS; c++) acc[c] = vdupq_n_f32((float)c);
    for (int64_t i = 0; i < n_iter; i++)
        for (int c = 0; c < OC_ROOFLINE_CHAINS; c++) acc[c] = vfmaq_f32(a, acc[c], m);
    float32x4_t s = acc[0];
    for (int c = 1; c < OC_ROOFLINE_CHAINS; c++) s = vaddq_f32(s, acc[c]);
    *lanes = 4;
    return vgetq_lane_f32(s, 0) + vgetq_lane_f32(s, 3);
}
