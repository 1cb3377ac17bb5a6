/* dtype.h: block geometry of the weight types (ggml type ids, layouts in docs/formats.md §1).
 * A row of n elements of a quantized type is n / block_elems consecutive blocks. */
#ifndef OC_DTYPE_H
#define OC_DTYPE_H

#include "core/core.h"

typedef struct oc_dtype_traits {
    const char *name;
    int32_t block_elems;   /* elements per block (1 for F32/F16/BF16) */
    int32_t block_bytes;   /* bytes per block */
} oc_dtype_traits;

/* NULL for type ids this build does not know. Known: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q2_K..Q8_K (geometry only: GGUF files may contain them), of which the weight kernels support
 * F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K (oc_dtype_is_supported). */
const oc_dtype_traits *oc_dtype_get(int32_t dtype);
int oc_dtype_is_supported(int32_t dtype);

/* Bytes of a row of n_elems elements; 0 when n_elems is not a multiple of the block or the type is
 * unknown. Overflow-safe: returns 0 on overflow. */
uint64_t oc_dtype_row_bytes(int32_t dtype, uint64_t n_elems);

#endif
