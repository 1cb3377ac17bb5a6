/* convert_internal.h: what the converter's files share: the checkpoint (JSON documents, tensors,
 * hyper-parameters read with transformers' defaults) and the output (a GGUF writer plus the
 * streaming jobs that turn safetensors rows into GGUF rows of the chosen type).
 * Files: convert.c (driver), convert_config.c (JSON files, hparams), convert_vocab.c (tokenizer
 * keys), convert_text.c / convert_vision.c (each model's keys and tensors), convert_tensor.c (type
 * choice, shape checks, row conversion). */
#ifndef OC_CONVERT_INTERNAL_H
#define OC_CONVERT_INTERNAL_H

#include "tools/convert.h"
#include "tools/json.h"
#include "tools/safetensors.h"

#define OC_CV_PATH_BYTES 1024
#define OC_CV_NAME_BYTES 128
#define OC_CV_MAX_MEAN 8

/* A JSON file of the checkpoint; doc == NULL when an optional file is absent. */
typedef struct oc_cv_json {
    oc_json *doc;
    char path[OC_CV_PATH_BYTES];
} oc_cv_json;

/* Text model hyper-parameters as llama.cpp's TextModel finds them (text_config over the root). */
typedef struct oc_cv_text_hp {
    int64_t n_layer, n_ctx, n_embd, n_ff, n_head, n_head_kv, n_vocab;
    int64_t head_dim;           /* config "head_dim", or -1 when absent (then n_embd / n_head) */
    double rope_theta, rms_eps;
    int32_t mrope_sections[4];  /* HF mrope_section padded with zeros to 4 */
} oc_cv_text_hp;

typedef struct oc_cv_vision_hp {
    int64_t n_embd, n_ff_key;   /* n_ff_key: what the converter writes as feed_forward_length */
    int64_t n_layer, n_head, patch_size, image_size, merge, temporal, in_channels;
    int64_t n_ff;               /* Qwen2.5-VL intermediate_size; Qwen2-VL: from the fc1 shape */
    int64_t n_out;              /* merger output width (= text n_embd) */
    int64_t n_wa_pattern;       /* Qwen2.5-VL only, else 0 */
    double eps;
    float mean[OC_CV_MAX_MEAN], std[OC_CV_MAX_MEAN];
    uint32_t n_mean, n_std;
} oc_cv_vision_hp;

typedef struct oc_cv_model {
    oc_allocator alloc;
    char dir[OC_CV_PATH_BYTES];         /* without trailing '/' */
    const char *name;                   /* general.name: the directory's base name */
    int is_qwen25;                      /* model_type qwen2_5_vl */
    oc_cv_json config, tok_config, preproc;
    uint32_t text_cfg;                  /* config.json "text_config" object, or OC_JSON_NONE */
    uint32_t vision_cfg;                /* config.json "vision_config" object */
    oc_cv_text_hp text;
    oc_cv_vision_hp vis;
    oc_safetensors_set *st;
    char st_path[OC_CV_PATH_BYTES];
    const char *text_prefix;            /* "model." or "model.language_model." */
    const char *vis_prefix;             /* "visual." or "model.visual." */
    const oc_st_tensor **used;          /* source tensors consumed so far */
    size_t n_used;
} oc_cv_model;

/* One output tensor: row r of it (ne[0] elements) comes from source elements starting at
 * base + (r / rows_per_group) * group_stride + (r % rows_per_group) * ne[0]. */
struct oc_cv_out;
typedef struct oc_cv_job {
    struct oc_cv_out *out;              /* for its row scratch buffer */
    const oc_st_tensor *src;
    int32_t dtype;
    int64_t row_elems;
    uint64_t base, rows_per_group, group_stride;
    char name[OC_CV_NAME_BYTES];
} oc_cv_job;

typedef struct oc_cv_out {
    oc_cv_model *m;
    oc_gguf_writer *w;
    oc_convert_ftype ftype;
    int is_mmproj;
    oc_cv_job *jobs;
    size_t n_jobs, cap_jobs;
    float *scratch;                     /* one row of the widest tensor, allocated before writing */
    size_t scratch_elems;
    uint64_t n_bytes;
} oc_cv_out;

/* ---- convert_config.c ---- */
/* Read and parse dir/file. optional: a missing file leaves f->doc NULL and returns OC_OK. */
oc_status oc_cv_json_load(oc_cv_model *m, const char *file, int optional, oc_cv_json *f, oc_error *err);
void oc_cv_json_free(oc_cv_model *m, oc_cv_json *f);
/* config.json + preprocessor_config.json -> m->text, m->vis, m->is_qwen25. */
oc_status oc_cv_read_hparams(oc_cv_model *m, oc_error *err);

/* ---- convert_vocab.c ---- */
/* tokenizer.ggml.* and tokenizer.chat_template from tokenizer.json, tokenizer_config.json,
 * config.json and the chat template files, as llama.cpp's _set_vocab_gpt2 + SpecialVocab. */
oc_status oc_cv_write_vocab(oc_cv_model *m, oc_gguf_writer *w, oc_error *err);

/* ---- convert_text.c / convert_vision.c ---- */
oc_status oc_cv_text_keys(oc_cv_out *o, oc_error *err);
oc_status oc_cv_text_tensors(oc_cv_out *o, oc_error *err);
oc_status oc_cv_vision_keys(oc_cv_out *o, oc_error *err);
oc_status oc_cv_vision_tensors(oc_cv_out *o, oc_error *err);

/* ---- convert_tensor.c ---- */
/* The source tensor hf_name (full name); checks it exists, has a supported dtype and the given
 * PyTorch shape (dims < 0 are not checked), and records it as used. */
oc_status oc_cv_source(oc_cv_model *m, const char *hf_name, uint32_t n_dims, const int64_t *shape,
                       const oc_st_tensor **out, oc_error *err);
/* Add an output tensor (GGUF ne order) fed from src as described for oc_cv_job. The type follows
 * llama.cpp's rules for o->ftype (see convert_tensor.c). */
oc_status oc_cv_add(oc_cv_out *o, const char *name, const oc_st_tensor *src, uint32_t n_dims,
                    const int64_t *ne, uint64_t base, uint64_t rows_per_group, uint64_t group_stride,
                    oc_error *err);
/* Add src whole, its GGUF ne being the reverse of its shape. */
oc_status oc_cv_add_plain(oc_cv_out *o, const char *name, const oc_st_tensor *src, oc_error *err);
/* The output type llama.cpp's converter picks (prepare_tensors + tensor_force_quant). */
int32_t oc_cv_pick_dtype(oc_convert_ftype ftype, int is_mmproj, const char *name, uint32_t n_dims,
                         int64_t ne0);
/* Fill callback of oc_gguf_writer_add_tensor_fn for an oc_cv_job. */
oc_status oc_cv_fill(void *user, void *dst, uint64_t first_row, uint64_t n_rows, oc_error *err);

#endif /* OC_CONVERT_INTERNAL_H */
