/* quant.h: the block layouts of the weight types the matmul kernels support (ggml's, restated in
 * docs/formats.md §1), their scalar dequantizers (the reference every SIMD path is tested
 * against) and the f32 -> Q8_0 / Q4_0 quantizers of the converter (llama.cpp's reference rounding).
 * Multi-byte fields are little-endian in files; this code assumes a little-endian host. */
#ifndef OC_QUANT_H
#define OC_QUANT_H

#include "core/core.h"

#define OC_QK 32     /* elements per Q8_0 / Q4_0 block */
#define OC_QK_K 256  /* elements per K-quant super-block */

typedef struct oc_block_q8_0 {
    uint16_t d;          /* f16 scale */
    int8_t qs[OC_QK];    /* x[j] = qs[j] * d */
} oc_block_q8_0;

typedef struct oc_block_q4_0 {
    uint16_t d;          /* f16 scale */
    uint8_t qs[OC_QK / 2];   /* j < 16: x[j] = (lo nibble of qs[j] - 8) * d, x[j+16] = (hi nibble - 8) * d */
} oc_block_q4_0;

typedef struct oc_block_q4_k {
    uint16_t d, dmin;    /* f16 super-block scales of the 6-bit sub-block scales and mins */
    uint8_t scales[12];  /* 8 x (6-bit scale, 6-bit min), packed as in oc_q4_k_scale_min */
    uint8_t qs[OC_QK_K / 2]; /* 4 groups of 32 bytes: low nibbles = sub-block 2g, high = 2g+1 */
} oc_block_q4_k;

typedef struct oc_block_q6_k {
    uint8_t ql[OC_QK_K / 2];  /* low 4 bits */
    uint8_t qh[OC_QK_K / 4];  /* high 2 bits */
    int8_t scales[OC_QK_K / 16];  /* one signed 8-bit scale per 16 elements */
    uint16_t d;          /* f16 super-block scale, last */
} oc_block_q6_k;

_Static_assert(sizeof(oc_block_q8_0) == 34, "q8_0 block is 34 bytes");
_Static_assert(sizeof(oc_block_q4_0) == 18, "q4_0 block is 18 bytes");
_Static_assert(sizeof(oc_block_q4_k) == 144, "q4_k block is 144 bytes");
_Static_assert(sizeof(oc_block_q6_k) == 210, "q6_k block is 210 bytes");

/* Sub-block j (0..7) of a Q4_K block: its 6-bit scale and 6-bit min (docs/formats.md §1). */
static inline void oc_q4_k_scale_min(const uint8_t *s, int j, int *scale, int *min) {
    if (j < 4) {
        *scale = s[j] & 63;
        *min = s[j + 4] & 63;
    } else {
        *scale = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Convert n elements (a multiple of the type's block) starting at a block boundary to f32. */
typedef void (*oc_to_f32_fn)(const void *src, float *dst, int64_t n);

void oc_dequant_f32(const void *src, float *dst, int64_t n);
void oc_dequant_f16(const void *src, float *dst, int64_t n);
void oc_dequant_bf16(const void *src, float *dst, int64_t n);
void oc_dequant_q8_0(const void *src, float *dst, int64_t n);
void oc_dequant_q4_0(const void *src, float *dst, int64_t n);
void oc_dequant_q4_k(const void *src, float *dst, int64_t n);
void oc_dequant_q6_k(const void *src, float *dst, int64_t n);
/* The scalar dequantizer of dtype, or NULL when the matmul kernels do not support it. */
oc_to_f32_fn oc_dequant_ref(int32_t dtype);

/* The converter's quantizers; n is a multiple of 32. [alloc: no]
 * Q8_0: d = amax/127, q = round(x/d) (half away from zero).
 * Q4_0: max = the element of largest magnitude (with its sign), d = max/-8,
 *       q = min(15, (int8)(x/d + 8.5)), so max itself maps to q = 0 and the grid is asymmetric. */
void oc_quantize_q8_0(const float *src, void *dst, int64_t n);
void oc_quantize_q4_0(const float *src, void *dst, int64_t n);

#endif
