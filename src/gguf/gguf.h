/* gguf.h: constants and little helpers shared by the GGUF reader (gguf_read.c) and writer
 * (gguf_write.c). Layout facts: docs/formats.md §1, after ggml/include/gguf.h. */
#ifndef OC_GGUF_INTERNAL_H
#define OC_GGUF_INTERNAL_H

#include "core/core.h"

#define OC_GGUF_MAGIC "GGUF"
#define OC_GGUF_WRITE_VERSION 3u
#define OC_GGUF_DEFAULT_ALIGNMENT 32u
#define OC_GGUF_ALIGNMENT_KEY "general.alignment"
#define OC_GGUF_N_TYPES 13 /* value types 0..12 */

/* Bytes of one fixed-size value of type t; 0 for STRING, ARRAY and unknown types. */
static inline uint32_t oc_gguf_type_size(uint32_t t) {
    static const uint8_t sizes[OC_GGUF_N_TYPES] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
    return t < OC_GGUF_N_TYPES ? sizes[t] : 0;
}

static inline const char *oc_gguf_type_name(uint32_t t) {
    static const char *const names[OC_GGUF_N_TYPES] = { "u8", "i8", "u16", "i16", "u32", "i32",
                                                        "f32", "bool", "string", "array", "u64",
                                                        "i64", "f64" };
    return t < OC_GGUF_N_TYPES ? names[t] : "unknown";
}

static inline int oc_gguf_type_is_int(uint32_t t) {
    return t <= OC_GGUF_I32 || t == OC_GGUF_BOOL || t == OC_GGUF_U64 || t == OC_GGUF_I64;
}

static inline int oc_is_pow2_u32(uint32_t v) { return v && !(v & (v - 1)); }

/* pad(x, align) for a power-of-two align; 0 when the result would overflow. */
static inline int oc_gguf_pad_u64(uint64_t x, uint64_t align, uint64_t *out) {
    if (x > UINT64_MAX - (align - 1)) return 0;
    *out = (x + align - 1) & ~(align - 1);
    return 1;
}

/* Bytes of the file mapped for g (0 for a read copy or bytes given by the caller: those are
 * the caller's or the allocator's memory). */
size_t oc_gguf_mapped_bytes(const oc_gguf *g);

#endif
