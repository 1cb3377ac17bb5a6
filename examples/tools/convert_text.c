/* convert_text.c: the text GGUF (arch "qwen2vl", docs/formats.md §2a): the keys of
 * llama.cpp's TextModel.set_gguf_parameters in its order (then general.file_type,
 * general.quantization_version and the tokenizer), and the tensors renamed as gguf-py's
 * TensorNameMap does (model.layers.N.self_attn.q_proj -> blk.N.attn_q ...). Both checkpoint
 * layouts are read: the Hub's (model.layers.*) and transformers >= 4.52's save_pretrained
 * (model.language_model.layers.*). Every tensor's shape is checked against config.json. */
#include "tools/convert_internal.h"

#include <stdio.h>
#include <string.h>

oc_status oc_cv_text_keys(oc_cv_out *o, oc_error *err) {
    oc_gguf_writer *w = o->w;
    const oc_cv_text_hp *t = &o->m->text;
    oc_status s = oc_gguf_writer_add_str(w, "general.architecture", "qwen2vl", err);
    if (!s) s = oc_gguf_writer_add_str(w, "general.type", "model", err);
    if (!s) s = oc_gguf_writer_add_str(w, "general.name", o->m->name, err);
    if (!s) s = oc_gguf_writer_add_u32(w, "qwen2vl.block_count", (uint32_t)t->n_layer, err);
    if (!s) s = oc_gguf_writer_add_u32(w, "qwen2vl.context_length", (uint32_t)t->n_ctx, err);
    if (!s) s = oc_gguf_writer_add_u32(w, "qwen2vl.embedding_length", (uint32_t)t->n_embd, err);
    if (!s) s = oc_gguf_writer_add_u32(w, "qwen2vl.feed_forward_length", (uint32_t)t->n_ff, err);
    if (!s) s = oc_gguf_writer_add_u32(w, "qwen2vl.attention.head_count", (uint32_t)t->n_head, err);
    if (!s) s = oc_gguf_writer_add_u32(w, "qwen2vl.attention.head_count_kv", (uint32_t)t->n_head_kv, err);
    /* python ints in a list: an INT32 array */
    if (!s) s = oc_gguf_writer_add_arr(w, "qwen2vl.rope.dimension_sections", OC_GGUF_I32, t->mrope_sections, 4, err);
    if (!s) s = oc_gguf_writer_add_f32(w, "qwen2vl.rope.freq_base", (float)t->rope_theta, err);
    if (!s) s = oc_gguf_writer_add_f32(w, "qwen2vl.attention.layer_norm_rms_epsilon", (float)t->rms_eps, err);
    if (!s && t->head_dim >= 0) {
        s = oc_gguf_writer_add_u32(w, "qwen2vl.attention.key_length", (uint32_t)t->head_dim, err);
        if (!s) s = oc_gguf_writer_add_u32(w, "qwen2vl.attention.value_length", (uint32_t)t->head_dim, err);
    }
    if (!s) s = oc_gguf_writer_add_u32(w, "general.file_type", (uint32_t)o->ftype, err);
    if (!s) s = oc_gguf_writer_add_u32(w, "general.quantization_version", 2, err);   /* GGML_QUANT_VERSION */
    if (!s) s = oc_cv_write_vocab(o->m, w, err);
    return s;
}

/* One tensor copied as a whole: HF name prefix + rel with PyTorch shape {d0[, d1]}. */
static oc_status put(oc_cv_out *o, const char *gguf_name, const char *prefix, const char *rel, uint32_t n_dims,
                     int64_t d0, int64_t d1, oc_error *err) {
    char hf[OC_CV_NAME_BYTES];
    snprintf(hf, sizeof hf, "%s%s", prefix, rel);
    const int64_t shape[2] = { d0, d1 };
    const oc_st_tensor *src;
    oc_status s = oc_cv_source(o->m, hf, n_dims, shape, &src, err);
    return s ? s : oc_cv_add_plain(o, gguf_name, src, err);
}

oc_status oc_cv_text_tensors(oc_cv_out *o, oc_error *err) {
    oc_cv_model *m = o->m;
    const oc_cv_text_hp *t = &m->text;
    const char *p = m->text_prefix;
    const int64_t hd = t->head_dim >= 0 ? t->head_dim : t->n_embd / t->n_head;
    const int64_t E = t->n_embd, q_out = t->n_head * hd, kv_out = t->n_head_kv * hd, F = t->n_ff;
    oc_status s = put(o, "token_embd.weight", p, "embed_tokens.weight", 2, t->n_vocab, E, err);
    for (int64_t i = 0; i < t->n_layer && !s; i++) {
        char b[40], g[64], h[96];
        snprintf(b, sizeof b, "layers.%lld.", (long long)i);
#define T(gguf, hf, nd, a, c)                                                   \
        if (!s) {                                                               \
            snprintf(g, sizeof g, "blk.%lld.%s", (long long)i, gguf);          \
            snprintf(h, sizeof h, "%s%s", b, hf);                              \
            s = put(o, g, p, h, nd, a, c, err);                                 \
        }
        T("attn_norm.weight", "input_layernorm.weight", 1, E, 0)
        T("attn_q.weight", "self_attn.q_proj.weight", 2, q_out, E)
        T("attn_q.bias", "self_attn.q_proj.bias", 1, q_out, 0)
        T("attn_k.weight", "self_attn.k_proj.weight", 2, kv_out, E)
        T("attn_k.bias", "self_attn.k_proj.bias", 1, kv_out, 0)
        T("attn_v.weight", "self_attn.v_proj.weight", 2, kv_out, E)
        T("attn_v.bias", "self_attn.v_proj.bias", 1, kv_out, 0)
        T("attn_output.weight", "self_attn.o_proj.weight", 2, E, q_out)
        T("ffn_norm.weight", "post_attention_layernorm.weight", 1, E, 0)
        T("ffn_gate.weight", "mlp.gate_proj.weight", 2, F, E)
        T("ffn_up.weight", "mlp.up_proj.weight", 2, F, E)
        T("ffn_down.weight", "mlp.down_proj.weight", 2, E, F)
#undef T
    }
    if (!s) s = put(o, "output_norm.weight", p, "norm.weight", 1, E, 0, err);
    /* tied embeddings (Qwen2-VL-2B): no lm_head in the checkpoint, no output.weight in the GGUF */
    if (!s && oc_safetensors_set_find(m->st, "lm_head.weight"))
        s = put(o, "output.weight", "", "lm_head.weight", 2, t->n_vocab, E, err);
    return s;
}
