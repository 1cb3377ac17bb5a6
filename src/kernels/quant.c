/* quant.c: scalar dequantizers for the seven weight types and the f32 -> Q8_0 / Q4_0 quantizers.
 * These loops follow the layouts of docs/formats.md §1 line by line: they are what a reader
 * checks against the format, and the test oracle (a double-precision loop) is built on them. */
#include "kernels/quant.h"

#include "core/f16.h"

#include <math.h>
#include <string.h>

void oc_dequant_f32(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void oc_dequant_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = oc_f16_to_f32(h[i]);
}

void oc_dequant_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = oc_bf16_to_f32(h[i]);
}

void oc_dequant_q8_0(const void *src, float *dst, int64_t n) {
    const oc_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / OC_QK; i++, b++, dst += OC_QK) {
        float d = oc_f16_to_f32(b->d);
        for (int j = 0; j < OC_QK; j++) dst[j] = (float)b->qs[j] * d;
    }
}

void oc_dequant_q4_0(const void *src, float *dst, int64_t n) {
    const oc_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / OC_QK; i++, b++, dst += OC_QK) {
        float d = oc_f16_to_f32(b->d);
        /* low nibbles are the first half of the block, high nibbles the second (not interleaved) */
        for (int j = 0; j < OC_QK / 2; j++) {
            dst[j] = (float)((b->qs[j] & 0xF) - 8) * d;
            dst[j + OC_QK / 2] = (float)((b->qs[j] >> 4) - 8) * d;
        }
    }
}

void oc_dequant_q4_k(const void *src, float *dst, int64_t n) {
    const oc_block_q4_k *b = src;
    for (int64_t i = 0; i < n / OC_QK_K; i++, b++) {
        float d = oc_f16_to_f32(b->d), dmin = oc_f16_to_f32(b->dmin);
        /* 4 groups of 64 elements share 32 bytes: low nibbles -> sub-block 2g, high -> 2g+1 */
        for (int g = 0; g < 4; g++) {
            const uint8_t *q = b->qs + 32 * g;
            int sc0, m0, sc1, m1;
            oc_q4_k_scale_min(b->scales, 2 * g, &sc0, &m0);
            oc_q4_k_scale_min(b->scales, 2 * g + 1, &sc1, &m1);
            float d0 = d * (float)sc0, min0 = dmin * (float)m0;
            float d1 = d * (float)sc1, min1 = dmin * (float)m1;
            for (int l = 0; l < 32; l++) *dst++ = d0 * (float)(q[l] & 0xF) - min0;
            for (int l = 0; l < 32; l++) *dst++ = d1 * (float)(q[l] >> 4) - min1;
        }
    }
}

void oc_dequant_q6_k(const void *src, float *dst, int64_t n) {
    const oc_block_q6_k *b = src;
    for (int64_t i = 0; i < n / OC_QK_K; i++, b++) {
        float d = oc_f16_to_f32(b->d);
        /* two halves of 128 elements; in each, 64 bytes of ql, 32 of qh and 8 scales */
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            const int8_t *sc = b->scales + 8 * h;
            float *y = dst + 128 * h;
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q0 = (ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4);
                int q1 = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
                int q2 = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                int q3 = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                y[l] = d * (float)sc[is + 0] * (float)(q0 - 32);
                y[l + 32] = d * (float)sc[is + 2] * (float)(q1 - 32);
                y[l + 64] = d * (float)sc[is + 4] * (float)(q2 - 32);
                y[l + 96] = d * (float)sc[is + 6] * (float)(q3 - 32);
            }
        }
        dst += OC_QK_K;
    }
}

oc_to_f32_fn oc_dequant_ref(int32_t dtype) {
    switch (dtype) {
    case OC_DTYPE_F32: return oc_dequant_f32;
    case OC_DTYPE_F16: return oc_dequant_f16;
    case OC_DTYPE_BF16: return oc_dequant_bf16;
    case OC_DTYPE_Q8_0: return oc_dequant_q8_0;
    case OC_DTYPE_Q4_0: return oc_dequant_q4_0;
    case OC_DTYPE_Q4_K: return oc_dequant_q4_k;
    case OC_DTYPE_Q6_K: return oc_dequant_q6_k;
    default: return NULL;
    }
}

void oc_quantize_q8_0(const float *src, void *dst, int64_t n) {
    oc_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / OC_QK; i++, b++, src += OC_QK) {
        float amax = 0;
        for (int j = 0; j < OC_QK; j++) amax = fmaxf(amax, fabsf(src[j]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = oc_f32_to_f16(d);
        for (int j = 0; j < OC_QK; j++) b->qs[j] = (int8_t)roundf(src[j] * id);
    }
}

void oc_quantize_q4_0(const float *src, void *dst, int64_t n) {
    oc_block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / OC_QK; i++, b++, src += OC_QK) {
        float amax = 0, max = 0;
        for (int j = 0; j < OC_QK; j++) {
            if (fabsf(src[j]) > amax) { amax = fabsf(src[j]); max = src[j]; }
        }
        float d = max / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = oc_f32_to_f16(d);
        for (int j = 0; j < OC_QK / 2; j++) {
            /* x*id lies in [-8, 8], so x*id + 8.5 is in [0.5, 16.5]: the cast truncates to 0..16 */
            int q0 = (int8_t)(src[j] * id + 8.5f), q1 = (int8_t)(src[j + OC_QK / 2] * id + 8.5f);
            q0 = q0 < 15 ? q0 : 15;
            q1 = q1 < 15 ? q1 : 15;
            b->qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}
