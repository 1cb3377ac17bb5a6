/* convert.h: Hugging Face Qwen2-VL / Qwen2.5-VL checkpoint directory -> the two GGUF files
 * llama.cpp's convert_hf_to_gguf.py writes for it (docs/formats.md §2a, §2b, §4, §5):
 * OUT_PREFIX.gguf (arch "qwen2vl", text model + tokenizer) and OUT_PREFIX-mmproj.gguf (arch "clip",
 * projector qwen2vl_merger / qwen2.5vl_merger). Same tensor names, GGUF shapes, per-tensor types and
 * metadata keys with the same value types; differences are listed in convert.c's header.
 * Tensors are streamed row chunk by row chunk from the memory-mapped safetensors into the writer,
 * so memory stays at about one 4 MiB chunk plus the JSON documents, whatever the model size. */
#ifndef OC_CONVERT_H
#define OC_CONVERT_H

#include "core/core.h"

/* Output types (the values are llama.cpp's llama_ftype, written as general.file_type). */
typedef enum oc_convert_ftype {
    OC_CONVERT_F32 = 0,
    OC_CONVERT_F16 = 1,
    OC_CONVERT_Q4_0 = 2,
    OC_CONVERT_Q8_0 = 7,
    OC_CONVERT_BF16 = 32
} oc_convert_ftype;

/* "f32", "f16", "bf16", "q8_0", "q4_0" -> ftype; returns 0 for an unknown name. */
int oc_convert_ftype_parse(const char *name, oc_convert_ftype *out);

typedef struct oc_convert_result {
    int64_t n_tensors_text, n_tensors_mmproj;
    uint64_t n_bytes_text, n_bytes_mmproj;   /* tensor data bytes written */
} oc_convert_result;

/* Convert the checkpoint in hf_dir. Writes out_prefix + ".gguf" and out_prefix + "-mmproj.gguf".
 * result may be NULL. On failure no output file is left behind for the model that failed.
 * [errors: OC_ERR_IO (missing or unreadable file, named), OC_ERR_FORMAT (bad JSON, missing or
 *  mis-shaped tensor, bad config value: the message names the file and the problem),
 *  OC_ERR_UNSUPPORTED (architecture, source dtype), OC_ERR_NOMEM] */
oc_status oc_convert_hf(const char *hf_dir, const char *out_prefix, oc_convert_ftype ftype,
                        const oc_allocator *alloc, oc_convert_result *result, oc_error *err);

#endif /* OC_CONVERT_H */
