/* ocellus_gguf.h: the GGUF reader and writer of ocellus, apart from the model/context/ask API of
 * ocellus.h, as ggml keeps gguf.h apart and Lua keeps lauxlib.h apart from lua.h: the runtime
 * opens models through ocellus.h alone; this header is for programs that inspect, convert or write
 * GGUF files themselves (the converter, `ocellus info`, tests). It includes ocellus.h (status,
 * errors, the allocator, strings), and the rules block there holds for every function here.
 * Anything declared in neither header is not API.
 *
 * Contents: element types (the GGUF/ggml tensor type ids), reading a file, writing one. */
#ifndef OCELLUS_GGUF_H
#define OCELLUS_GGUF_H

#include "ocellus.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- element types (the GGUF/ggml type ids) ---------------------------------------------------- */

typedef enum oc_dtype {
    OC_DTYPE_F32 = 0,
    OC_DTYPE_F16 = 1,
    OC_DTYPE_Q4_0 = 2,
    OC_DTYPE_Q8_0 = 8,
    OC_DTYPE_Q4_K = 12,
    OC_DTYPE_Q6_K = 14,
    OC_DTYPE_BF16 = 30
} oc_dtype;

/* Name of a GGUF/ggml tensor type id ("f16", "q8_0" ...), or "unknown". */
OC_API const char *oc_dtype_name(int32_t dtype);

/* ---- GGUF files ------------------------------------------------------------------------------- */
/* A read-only view of a GGUF file (v2 or v3). Opening validates the whole header: counts, string
 * and array lengths, value types, tensor shapes and types, alignment, and every tensor's byte range
 * against the file size. After a successful open every getter is memory-safe. */

typedef struct oc_gguf oc_gguf;

typedef enum oc_gguf_type {
    OC_GGUF_U8 = 0, OC_GGUF_I8 = 1, OC_GGUF_U16 = 2, OC_GGUF_I16 = 3, OC_GGUF_U32 = 4,
    OC_GGUF_I32 = 5, OC_GGUF_F32 = 6, OC_GGUF_BOOL = 7, OC_GGUF_STRING = 8, OC_GGUF_ARRAY = 9,
    OC_GGUF_U64 = 10, OC_GGUF_I64 = 11, OC_GGUF_F64 = 12,
    OC_GGUF_NONE = 13   /* not a stored type: oc_gguf_key_type of an out-of-range index */
} oc_gguf_type;

/* A string inside the file: not NUL-terminated. */
typedef struct oc_str {
    const char *ptr;
    size_t len;
} oc_str;

#define OC_GGUF_MAX_DIMS 4
typedef struct oc_gguf_tensor {
    oc_str name;
    int32_t dtype;                   /* oc_dtype value (ggml type id) */
    uint32_t n_dims;
    int64_t ne[OC_GGUF_MAX_DIMS];    /* ne[0] is the fastest-varying (row length); unused dims are 1 */
    uint64_t offset_bytes;           /* from the start of the data section */
    uint64_t size_bytes;
    const void *data;                /* inside the mapping; aligned to the file's alignment */
} oc_gguf_tensor;

/* Map (or read) the file at path. [errors: OC_ERR_IO, OC_ERR_FORMAT, OC_ERR_NOMEM]
 * Accepted layouts: any tensor offset that is a multiple of the alignment and whose bytes lie
 * inside the file (gaps, any order and overlapping tensors are allowed). Memory: an index of
 * keys and tensors plus 4 bytes per element of every string array (O(1) oc_gguf_arr_str). */
OC_API oc_status oc_gguf_open(oc_gguf **out, const char *path, const oc_allocator *alloc,
                              oc_error *err);
/* Read the whole file into memory from alloc instead of mapping it: costs the file's size in
 * memory and the time to read it, but a file truncated or rewritten while open cannot crash the
 * process (a mapped one raises SIGBUS on the next access to a page that is gone) or change under
 * it. [errors: OC_ERR_IO, OC_ERR_FORMAT, OC_ERR_NOMEM] */
OC_API oc_status oc_gguf_open_read(oc_gguf **out, const char *path, const oc_allocator *alloc,
                                   oc_error *err);
/* Parse a GGUF image held in memory; bytes are borrowed and must outlive the handle. */
OC_API oc_status oc_gguf_open_bytes(oc_gguf **out, const void *bytes, size_t n_bytes,
                                    const oc_allocator *alloc, oc_error *err);
OC_API void oc_gguf_close(oc_gguf *g);

OC_API uint32_t oc_gguf_version(const oc_gguf *g);
OC_API uint32_t oc_gguf_alignment(const oc_gguf *g);

OC_API int64_t oc_gguf_n_keys(const oc_gguf *g);
OC_API oc_str oc_gguf_key_name(const oc_gguf *g, int64_t key_index);
/* Index of key, or -1 when absent. */
OC_API int64_t oc_gguf_find_key(const oc_gguf *g, const char *key);
OC_API oc_gguf_type oc_gguf_key_type(const oc_gguf *g, int64_t key_index);

/* Typed getters: OC_ERR_NOT_FOUND when the key is absent, OC_ERR_TYPE (message naming the key,
 * the stored type and the asked type) when the stored type differs. Never abort. */
OC_API oc_status oc_gguf_get_u32(const oc_gguf *g, const char *key, uint32_t *out, oc_error *err);
OC_API oc_status oc_gguf_get_i32(const oc_gguf *g, const char *key, int32_t *out, oc_error *err);
OC_API oc_status oc_gguf_get_u64(const oc_gguf *g, const char *key, uint64_t *out, oc_error *err);
OC_API oc_status oc_gguf_get_f32(const oc_gguf *g, const char *key, float *out, oc_error *err);
OC_API oc_status oc_gguf_get_bool(const oc_gguf *g, const char *key, int *out, oc_error *err);
OC_API oc_status oc_gguf_get_str(const oc_gguf *g, const char *key, oc_str *out, oc_error *err);
/* Any integer type (U8..I64, BOOL) whose value fits in int64_t: for keys that converters write
 * as either U32 or I32. */
OC_API oc_status oc_gguf_get_int(const oc_gguf *g, const char *key, int64_t *out, oc_error *err);
/* F32 or F64. */
OC_API oc_status oc_gguf_get_float(const oc_gguf *g, const char *key, double *out, oc_error *err);

/* Arrays: element type and count; fixed-size elements are little-endian and may be unaligned,
 * so read them with oc_gguf_arr_* accessors. The accessors never fail: an out-of-range key index
 * or element index, a key that is no array, or an element type that does not fit gives an empty
 * string ("" with len 0) or 0. oc_gguf_arr_int reads integer and bool elements (u64 values above
 * INT64_MAX read as INT64_MAX); oc_gguf_arr_float reads float and integer elements. All O(1). */
OC_API oc_status oc_gguf_get_arr(const oc_gguf *g, const char *key, oc_gguf_type *elem_type,
                                 uint64_t *count, oc_error *err);
OC_API oc_str oc_gguf_arr_str(const oc_gguf *g, int64_t key_index, uint64_t i);
OC_API int64_t oc_gguf_arr_int(const oc_gguf *g, int64_t key_index, uint64_t i);
OC_API double oc_gguf_arr_float(const oc_gguf *g, int64_t key_index, uint64_t i);

OC_API int64_t oc_gguf_n_tensors(const oc_gguf *g);
OC_API const oc_gguf_tensor *oc_gguf_tensor_at(const oc_gguf *g, int64_t tensor_index);
/* NULL when absent. */
OC_API const oc_gguf_tensor *oc_gguf_find_tensor(const oc_gguf *g, const char *name);

/* ---- GGUF writer ------------------------------------------------------------------------------ */
/* Builds a GGUF v3 file: add keys and tensor infos, then oc_gguf_writer_write() streams the header
 * and the tensor data (borrowed pointers, read at write time) to a file. */

typedef struct oc_gguf_writer oc_gguf_writer;

OC_API oc_status oc_gguf_writer_open(oc_gguf_writer **out, const oc_allocator *alloc,
                                     oc_error *err);
OC_API void oc_gguf_writer_close(oc_gguf_writer *w);
OC_API oc_status oc_gguf_writer_set_alignment(oc_gguf_writer *w, uint32_t alignment, oc_error *err);

OC_API oc_status oc_gguf_writer_add_u32(oc_gguf_writer *w, const char *key, uint32_t v, oc_error *err);
OC_API oc_status oc_gguf_writer_add_i32(oc_gguf_writer *w, const char *key, int32_t v, oc_error *err);
OC_API oc_status oc_gguf_writer_add_u64(oc_gguf_writer *w, const char *key, uint64_t v, oc_error *err);
OC_API oc_status oc_gguf_writer_add_f32(oc_gguf_writer *w, const char *key, float v, oc_error *err);
OC_API oc_status oc_gguf_writer_add_bool(oc_gguf_writer *w, const char *key, int v, oc_error *err);
OC_API oc_status oc_gguf_writer_add_str(oc_gguf_writer *w, const char *key, const char *v, oc_error *err);
/* Any fixed-size scalar type (U8..F64 except STRING/ARRAY); *value in host order, copied. */
OC_API oc_status oc_gguf_writer_add_scalar(oc_gguf_writer *w, const char *key, oc_gguf_type type,
                                           const void *value, oc_error *err);
/* Array of fixed-size elements (elem_type not STRING/ARRAY); values in host order, copied. */
OC_API oc_status oc_gguf_writer_add_arr(oc_gguf_writer *w, const char *key, oc_gguf_type elem_type,
                                        const void *values, uint64_t count, oc_error *err);
OC_API oc_status oc_gguf_writer_add_arr_str(oc_gguf_writer *w, const char *key,
                                            const char *const *values, uint64_t count, oc_error *err);
/* Tensor with n_dims dims (ne[0] fastest); data must hold the exact byte size for dtype and stay
 * valid until oc_gguf_writer_write() returns. */
OC_API oc_status oc_gguf_writer_add_tensor(oc_gguf_writer *w, const char *name, int32_t dtype,
                                           uint32_t n_dims, const int64_t *ne, const void *data,
                                           oc_error *err);
/* Streaming variant for converters: the bytes are produced at write time, a chunk of whole rows
 * at a time (a row is ne[0] elements in dtype's encoding; rows are numbered over ne[1..3]).
 * fill writes n_rows rows starting at first_row into dst and returns OC_OK, or a status (with a
 * message in err) that makes oc_gguf_writer_write fail. The writer holds one chunk buffer of at
 * most max(4 MiB, one row) while writing. */
typedef oc_status (*oc_gguf_fill_fn)(void *user, void *dst, uint64_t first_row, uint64_t n_rows,
                                     oc_error *err);
OC_API oc_status oc_gguf_writer_add_tensor_fn(oc_gguf_writer *w, const char *name, int32_t dtype,
                                              uint32_t n_dims, const int64_t *ne,
                                              oc_gguf_fill_fn fill, void *user, oc_error *err);
/* Writes the file (keys in the order added, then tensor infos, then the data, each tensor padded
 * to the alignment as llama.cpp's writer does). set_alignment or a u32 "general.alignment" key
 * changes the alignment (default 32). On failure the partial file is removed.
 * [errors: OC_ERR_IO (message names the path and the system's reason), OC_ERR_NOMEM, or what a
 * fill function returned] */
OC_API oc_status oc_gguf_writer_write(oc_gguf_writer *w, const char *path, oc_error *err);

#ifdef __cplusplus
}
#endif
#endif /* OCELLUS_GGUF_H */
