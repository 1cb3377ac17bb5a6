/* convert.c: the converter's driver: opens the checkpoint (config.json, tokenizer_config.json,
 * preprocessor_config.json, model.safetensors or model.safetensors.index.json), declares both GGUF
 * files (keys, then streamed tensors), checks every checkpoint tensor found a place, writes them.
 * Intended differences from llama.cpp's convert_hf_to_gguf.py (all else is meant to match):
 * general.name is the directory's base name (gguf-py metadata.py's README/model-id heuristics:
 * basename, size_label, license ... are not reproduced); tokenizer.ggml.pre is "qwen2" without the
 * probe-tokenization hash; add_bos_token=false when tokenizer_config.json is silent; normalized=false
 * added tokens are not re-normalized by an HF round trip; q4_0 (a llama-quantize type, not a
 * converter outtype) quantizes every quantizable weight, with the converter's F16 fallback.
 * Memory: JSON documents, vocabulary tables and one 4 MiB row chunk (docs/formats.md §5). */
#include "tools/convert_internal.h"
#include "port.h"

#include <stdio.h>
#include <string.h>

int oc_convert_ftype_parse(const char *name, oc_convert_ftype *out) {
    static const struct { const char *name; oc_convert_ftype t; } names[] = {
        { "f32", OC_CONVERT_F32 }, { "f16", OC_CONVERT_F16 }, { "bf16", OC_CONVERT_BF16 },
        { "q8_0", OC_CONVERT_Q8_0 }, { "q4_0", OC_CONVERT_Q4_0 } };
    for (size_t i = 0; name && i < OC_ARRAY_LEN(names); i++)
        if (!strcmp(name, names[i].name)) {
            *out = names[i].t;
            return 1;
        }
    return 0;
}


static oc_status open_weights(oc_cv_model *m, oc_error *err) {
    int n_chars = snprintf(m->st_path, sizeof m->st_path, "%s/model.safetensors.index.json", m->dir);
    if (n_chars < 0 || (size_t)n_chars >= sizeof m->st_path)
        return oc_fail(err, OC_ERR_RANGE, "convert: path too long: %.200s", m->dir);
    if (!oc_port_is_regular_file(m->st_path)) {   /* a FIFO is not opened: it would hang */
        const size_t at = strlen(m->st_path) - strlen(".index.json");
        m->st_path[at] = 0;   /* model.safetensors */
    }
    oc_status s = oc_safetensors_set_open(&m->st, m->st_path, &m->alloc, err);
    if (s) return s;
    const size_t n = oc_safetensors_set_n_tensors(m->st);
    m->used = oc_mem_calloc(&m->alloc, (n ? n : 1) * sizeof *m->used);
    if (!m->used) return oc_fail(err, OC_ERR_NOMEM, "convert: cannot allocate the tensor table");
    /* Hub layout (model.layers.*, visual.*) or transformers >= 4.52 (model.language_model.*, model.visual.*) */
    m->text_prefix = oc_safetensors_set_find(m->st, "model.language_model.embed_tokens.weight") ? "model.language_model."
                                                                                                : "model.";
    m->vis_prefix = oc_safetensors_set_find(m->st, "model.visual.patch_embed.proj.weight") ? "model.visual." : "visual.";
    return OC_OK;
}

/* Every checkpoint tensor must have been mapped (llama.cpp fails on an unknown name too); rotary
 * inv_freq buffers are skipped as the converter does. */
static oc_status check_all_used(const oc_cv_model *m, oc_error *err) {
    const size_t n = oc_safetensors_set_n_tensors(m->st);
    for (size_t i = 0; i < n; i++) {
        const oc_st_tensor *t = oc_safetensors_set_tensor_at(m->st, i);
        const size_t len = t->name.len;
        if (len >= 9 && !strcmp(t->name.ptr + len - 9, ".inv_freq")) continue;
        size_t k = 0;
        while (k < m->n_used && m->used[k] != t) k++;
        if (k == m->n_used)
            return oc_fail(err, OC_ERR_FORMAT, "%.300s: tensor '%.100s' is not part of a %s model", m->st_path,
                           t->name.ptr, m->is_qwen25 ? "Qwen2.5-VL" : "Qwen2-VL");
    }
    return OC_OK;
}

static void out_free(oc_cv_out *o) {
    oc_gguf_writer_close(o->w);
    oc_mem_free(&o->m->alloc, o->jobs, o->cap_jobs * sizeof *o->jobs);
    oc_mem_free(&o->m->alloc, o->scratch, o->scratch_elems * sizeof(float));
    memset(o, 0, sizeof *o);
}

static oc_status out_declare(oc_cv_out *o, oc_cv_model *m, oc_convert_ftype ftype, int is_mmproj, oc_error *err) {
    memset(o, 0, sizeof *o);
    o->m = m;
    o->ftype = ftype;
    o->is_mmproj = is_mmproj;
    o->cap_jobs = 3 * oc_safetensors_set_n_tensors(m->st) + 8;   /* qkv: one source, three outputs */
    o->jobs = oc_mem_calloc(&m->alloc, o->cap_jobs * sizeof *o->jobs);
    if (!o->jobs) return oc_fail(err, OC_ERR_NOMEM, "convert: cannot allocate the tensor jobs");
    oc_status s = oc_gguf_writer_open(&o->w, &m->alloc, err);
    if (!s) s = is_mmproj ? oc_cv_vision_keys(o, err) : oc_cv_text_keys(o, err);
    if (!s) s = is_mmproj ? oc_cv_vision_tensors(o, err) : oc_cv_text_tensors(o, err);
    return s;
}

static oc_status out_write(oc_cv_out *o, const char *path, oc_error *err) {
    o->scratch = oc_mem_alloc(&o->m->alloc, (o->scratch_elems ? o->scratch_elems : 1) * sizeof(float));
    if (!o->scratch) return oc_fail(err, OC_ERR_NOMEM, "convert: cannot allocate a row buffer");
    if (!o->scratch_elems) o->scratch_elems = 1;
    return oc_gguf_writer_write(o->w, path, err);
}

oc_status oc_convert_hf(const char *hf_dir, const char *out_prefix, oc_convert_ftype ftype,
                        const oc_allocator *alloc, oc_convert_result *result, oc_error *err) {
    if (result) memset(result, 0, sizeof *result);
    if (!hf_dir || !out_prefix || !*hf_dir || !*out_prefix) return oc_fail(err, OC_ERR_INVALID, "convert: empty path");
    oc_convert_ftype check;
    static const char *const ft_names[] = { "f32", "f16", "bf16", "q8_0", "q4_0" };
    int known = 0;
    for (size_t i = 0; i < OC_ARRAY_LEN(ft_names); i++) known |= oc_convert_ftype_parse(ft_names[i], &check) && check == ftype;
    if (!known) return oc_fail(err, OC_ERR_INVALID, "convert: unknown output type %d", (int)ftype);
    oc_cv_model m;
    memset(&m, 0, sizeof m);
    m.alloc = (alloc && alloc->fn) ? *alloc : *oc_default_allocator();
    size_t dl = strlen(hf_dir);
    while (dl > 1 && hf_dir[dl - 1] == '/') dl--;
    if (dl >= sizeof m.dir) return oc_fail(err, OC_ERR_RANGE, "convert: path too long: %.200s", hf_dir);
    memcpy(m.dir, hf_dir, dl);
    m.dir[dl] = 0;
    const char *slash = strrchr(m.dir, '/');
    m.name = slash && slash[1] ? slash + 1 : m.dir;
    char text_path[OC_CV_PATH_BYTES], mmproj_path[OC_CV_PATH_BYTES];
    if ((size_t)snprintf(text_path, sizeof text_path, "%s.gguf", out_prefix) >= sizeof text_path ||
        (size_t)snprintf(mmproj_path, sizeof mmproj_path, "%s-mmproj.gguf", out_prefix) >= sizeof mmproj_path)
        return oc_fail(err, OC_ERR_RANGE, "convert: output prefix too long: %.200s", out_prefix);

    oc_cv_out text, mmproj;
    memset(&text, 0, sizeof text);
    memset(&mmproj, 0, sizeof mmproj);
    text.m = mmproj.m = &m;
    oc_status s = oc_cv_json_load(&m, "config.json", 0, &m.config, err);
    if (!s) s = oc_cv_json_load(&m, "tokenizer_config.json", 0, &m.tok_config, err);
    if (!s) s = oc_cv_json_load(&m, "preprocessor_config.json", 0, &m.preproc, err);
    if (!s) s = oc_cv_read_hparams(&m, err);
    if (!s) s = open_weights(&m, err);
    if (!s) s = out_declare(&text, &m, ftype, 0, err);
    if (!s) s = out_declare(&mmproj, &m, ftype, 1, err);
    if (!s) s = check_all_used(&m, err);
    if (!s) s = out_write(&text, text_path, err);
    if (!s) s = out_write(&mmproj, mmproj_path, err);
    if (!s && result) {
        result->n_tensors_text = (int64_t)text.n_jobs;
        result->n_tensors_mmproj = (int64_t)mmproj.n_jobs;
        result->n_bytes_text = text.n_bytes;
        result->n_bytes_mmproj = mmproj.n_bytes;
    }
    out_free(&text);
    out_free(&mmproj);
    oc_mem_free(&m.alloc, m.used, (oc_safetensors_set_n_tensors(m.st) ? oc_safetensors_set_n_tensors(m.st) : 1) * sizeof *m.used);
    oc_safetensors_set_close(m.st);
    oc_cv_json_free(&m, &m.config);
    oc_cv_json_free(&m, &m.tok_config);
    oc_cv_json_free(&m, &m.preproc);
    return s;
}
