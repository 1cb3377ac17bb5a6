/* safetensors.h: read-only views of safetensors files (huggingface/safetensors format: an 8-byte
 * little-endian header length, a JSON header, then the tensor bytes) and of sharded checkpoints
 * described by model.safetensors.index.json.
 *
 * Opening validates everything once: header length against the file size and a 100 MB cap, the
 * JSON, each tensor's dtype, shape and data_offsets [begin, end) (relative to the data section),
 * byte size == product(shape) * dtype size with overflow checks, and, as the format requires,
 * that the tensors tile the data section exactly (no gaps, no overlaps, nothing after). After a
 * successful open every accessor is memory-safe. Tensor data may be unaligned. */
#ifndef OC_SAFETENSORS_H
#define OC_SAFETENSORS_H

#include "core/core.h"

typedef enum oc_st_dtype {
    OC_ST_BOOL, OC_ST_U8, OC_ST_I8, OC_ST_F8_E5M2, OC_ST_F8_E4M3, OC_ST_F8_E8M0,
    OC_ST_I16, OC_ST_U16, OC_ST_F16, OC_ST_BF16,
    OC_ST_I32, OC_ST_U32, OC_ST_F32,
    OC_ST_I64, OC_ST_U64, OC_ST_F64,
    OC_ST_N_DTYPES
} oc_st_dtype;

const char *oc_st_dtype_name(oc_st_dtype dtype);   /* "F32", "BF16", ... as in the file */
size_t oc_st_dtype_size(oc_st_dtype dtype);        /* bytes per element */

#define OC_ST_MAX_DIMS 8
#define OC_ST_MAX_HEADER_BYTES 100000000u          /* the reference implementation's cap */

typedef struct oc_st_tensor {
    oc_str name;                     /* NUL-terminated, owned by the file handle */
    oc_st_dtype dtype;
    uint32_t n_dims;
    int64_t shape[OC_ST_MAX_DIMS];   /* as written: shape[n_dims - 1] varies fastest (unlike GGUF ne) */
    uint64_t n_elements;             /* 1 for a scalar (n_dims == 0) */
    uint64_t begin, end;             /* data_offsets, relative to the data section */
    uint64_t n_bytes;                /* end - begin */
    const void *data;                /* inside the mapping/bytes; may be unaligned */
} oc_st_tensor;

typedef struct oc_safetensors oc_safetensors;

/* [errors: OC_ERR_IO, OC_ERR_FORMAT, OC_ERR_RANGE, OC_ERR_UNSUPPORTED (dtype, rank), OC_ERR_NOMEM] */
oc_status oc_safetensors_open(oc_safetensors **out, const char *path, const oc_allocator *alloc,
                              oc_error *err);
/* bytes are borrowed and must outlive the handle. */
oc_status oc_safetensors_open_bytes(oc_safetensors **out, const void *bytes, size_t n_bytes,
                                    const oc_allocator *alloc, oc_error *err);
void oc_safetensors_close(oc_safetensors *st);

size_t oc_safetensors_n_tensors(const oc_safetensors *st);
const oc_st_tensor *oc_safetensors_tensor_at(const oc_safetensors *st, size_t i);  /* by name order */
const oc_st_tensor *oc_safetensors_find(const oc_safetensors *st, const char *name); /* NULL if absent */
/* A string from the header's "__metadata__" object. [errors: OC_ERR_NOT_FOUND] */
oc_status oc_safetensors_metadata(const oc_safetensors *st, const char *key, oc_str *out, oc_error *err);

/* ---- sharded checkpoints --------------------------------------------------------------------------- */

typedef struct oc_safetensors_set oc_safetensors_set;

/* path is either one .safetensors file or a *.index.json whose "weight_map" maps tensor names to
 * shard file names in the same directory. Every shard is opened and validated; every weight_map
 * entry must be found in the shard it names; a tensor held by two shards is an error. Shard names
 * must be plain file names (no directory separators). */
oc_status oc_safetensors_set_open(oc_safetensors_set **out, const char *path, const oc_allocator *alloc,
                                  oc_error *err);
void oc_safetensors_set_close(oc_safetensors_set *set);
size_t oc_safetensors_set_n_files(const oc_safetensors_set *set);
size_t oc_safetensors_set_n_tensors(const oc_safetensors_set *set);
const oc_st_tensor *oc_safetensors_set_tensor_at(const oc_safetensors_set *set, size_t i);  /* by name */
const oc_st_tensor *oc_safetensors_set_find(const oc_safetensors_set *set, const char *name);

#endif /* OC_SAFETENSORS_H */
