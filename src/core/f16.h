/* f16.h: IEEE binary16 and bfloat16 <-> float conversions in portable C (the scalar reference;
 * SIMD kernels use F16C / NEON instructions). Round-to-nearest-even, NaN and Inf preserved. */
#ifndef OC_F16_H
#define OC_F16_H

#include <stdint.h>
#include <string.h>

static inline float oc_f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t oc_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float oc_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f) return oc_f32_from_bits(sign | 0x7f800000u | (mant << 13));   /* inf/nan */
    if (exp == 0) {
        if (mant == 0) return oc_f32_from_bits(sign);
        /* subnormal: value = mant * 2^-24 */
        float v = (float)mant * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return oc_f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

static inline uint16_t oc_f32_to_f16(float f) {
    uint32_t u = oc_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t abs = u & 0x7fffffffu;
    if (abs >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0));
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);          /* rounds to >= 65520: inf */
    if (abs < 0x38800000u) {                                            /* below 2^-14: subnormal */
        if (abs < 0x33000000u) return sign;                             /* < 2^-25 rounds to 0 */
        uint32_t e = abs >> 23, m = (abs & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e;                                       /* 14..24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = abs - 0x38000000u;                                     /* rebias 127 -> 15 */
    uint32_t q = r >> 13, rem = r & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

static inline float oc_bf16_to_f32(uint16_t h) { return oc_f32_from_bits((uint32_t)h << 16); }

static inline uint16_t oc_f32_to_bf16(float f) {
    uint32_t u = oc_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);   /* quiet NaN */
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

#endif
