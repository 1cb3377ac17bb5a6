/* dtype.c: the table behind dtype.h. Sizes from ggml's block structs (ggml-common.h), restated in
 * docs/formats.md §1. */
#include "core/dtype.h"

typedef struct { int32_t id; oc_dtype_traits t; int supported; } entry;

static const entry table[] = {
    { 0, { "f32", 1, 4 }, 1 },
    { 1, { "f16", 1, 2 }, 1 },
    { 2, { "q4_0", 32, 18 }, 1 },
    { 3, { "q4_1", 32, 20 }, 0 },
    { 6, { "q5_0", 32, 22 }, 0 },
    { 7, { "q5_1", 32, 24 }, 0 },
    { 8, { "q8_0", 32, 34 }, 1 },
    { 9, { "q8_1", 32, 36 }, 0 },
    { 10, { "q2_k", 256, 84 }, 0 },
    { 11, { "q3_k", 256, 110 }, 0 },
    { 12, { "q4_k", 256, 144 }, 1 },
    { 13, { "q5_k", 256, 176 }, 0 },
    { 14, { "q6_k", 256, 210 }, 1 },
    { 15, { "q8_k", 256, 292 }, 0 },
    { 20, { "iq4_nl", 32, 18 }, 0 },
    { 23, { "iq4_xs", 256, 136 }, 0 },
    { 24, { "i8", 1, 1 }, 0 },
    { 25, { "i16", 1, 2 }, 0 },
    { 26, { "i32", 1, 4 }, 0 },
    { 27, { "i64", 1, 8 }, 0 },
    { 28, { "f64", 1, 8 }, 0 },
    { 30, { "bf16", 1, 2 }, 1 },
    { 39, { "mxfp4", 32, 17 }, 0 },
};

static const entry *find(int32_t dtype) {
    for (size_t i = 0; i < OC_ARRAY_LEN(table); i++)
        if (table[i].id == dtype) return &table[i];
    return NULL;
}

const oc_dtype_traits *oc_dtype_get(int32_t dtype) {
    const entry *e = find(dtype);
    return e ? &e->t : NULL;
}

int oc_dtype_is_supported(int32_t dtype) {
    const entry *e = find(dtype);
    return e && e->supported;
}

const char *oc_dtype_name(int32_t dtype) {
    const entry *e = find(dtype);
    return e ? e->t.name : "unknown";
}

uint64_t oc_dtype_row_bytes(int32_t dtype, uint64_t n_elems) {
    const entry *e = find(dtype);
    if (!e || n_elems % (uint64_t)e->t.block_elems) return 0;
    uint64_t n_blocks = n_elems / (uint64_t)e->t.block_elems;
    if (n_blocks > UINT64_MAX / (uint64_t)e->t.block_bytes) return 0;
    return n_blocks * (uint64_t)e->t.block_bytes;
}
