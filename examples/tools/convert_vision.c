/* convert_vision.c: the mmproj GGUF (arch "clip", docs/formats.md §2b): the keys of
 * llama.cpp's MmprojModel.set_gguf_parameters + Qwen2VLVisionModel.set_gguf_parameters in their
 * order, and the vision tensors: the fused attn.qkv split in thirds along the output dim into
 * attn_q | attn_k | attn_v, the Conv3d patch kernel [E, C, 2, P, P] split along the temporal axis
 * into v.patch_embd.weight ([:, :, 0]) and v.patch_embd.weight.1 ([:, :, 1]), both as strided
 * views of the source (nothing is copied ahead of the write). Qwen2-VL blocks use LayerNorm (with
 * bias) and fc1/fc2 (-> ffn_up/ffn_down); Qwen2.5-VL blocks RMSNorm and a gated MLP. */
#include "tools/convert_internal.h"

#include <stdio.h>
#include <string.h>

oc_status oc_cv_vision_keys(oc_cv_out *o, oc_error *err) {
    oc_gguf_writer *w = o->w;
    const oc_cv_model *m = o->m;
    const oc_cv_vision_hp *v = &m->vis;
    oc_status s = oc_gguf_writer_add_str(w, "general.architecture", "clip", err);
    if (!s) s = oc_gguf_writer_add_str(w, "general.type", "mmproj", err);
    if (!s) s = oc_gguf_writer_add_str(w, "general.name", m->name, err);
    if (!s) s = oc_gguf_writer_add_u32(w, "general.file_type", (uint32_t)o->ftype, err);
    if (!s) s = oc_gguf_writer_add_bool(w, "clip.has_vision_encoder", 1, err);
    if (!s) s = oc_gguf_writer_add_u32(w, "clip.vision.projection_dim", (uint32_t)m->text.n_embd, err);
    if (!s) s = oc_gguf_writer_add_u32(w, "clip.vision.image_size", (uint32_t)v->image_size, err);
    if (!s) s = oc_gguf_writer_add_u32(w, "clip.vision.patch_size", (uint32_t)v->patch_size, err);
    if (!s) s = oc_gguf_writer_add_u32(w, "clip.vision.embedding_length", (uint32_t)v->n_embd, err);
    /* Qwen2-VL: vision_config.hidden_size (the merger's output width), as llama.cpp writes it */
    if (!s) s = oc_gguf_writer_add_u32(w, "clip.vision.feed_forward_length", (uint32_t)v->n_ff_key, err);
    if (!s) s = oc_gguf_writer_add_u32(w, "clip.vision.block_count", (uint32_t)v->n_layer, err);
    if (!s) s = oc_gguf_writer_add_u32(w, "clip.vision.attention.head_count", (uint32_t)v->n_head, err);
    if (!s) s = oc_gguf_writer_add_arr(w, "clip.vision.image_mean", OC_GGUF_F32, v->mean, v->n_mean, err);
    if (!s) s = oc_gguf_writer_add_arr(w, "clip.vision.image_std", OC_GGUF_F32, v->std, v->n_std, err);
    if (!s) s = oc_gguf_writer_add_str(w, "clip.projector_type", m->is_qwen25 ? "qwen2.5vl_merger" : "qwen2vl_merger", err);
    if (!s && m->is_qwen25) {
        s = oc_gguf_writer_add_bool(w, "clip.use_silu", 1, err);
        if (!s) s = oc_gguf_writer_add_u32(w, "clip.vision.n_wa_pattern", (uint32_t)v->n_wa_pattern, err);
    }
    if (!s) s = oc_gguf_writer_add_f32(w, "clip.vision.attention.layer_norm_epsilon", (float)v->eps, err);
    if (!s) s = oc_gguf_writer_add_u32(w, "general.quantization_version", 2, err);
    return s;
}

typedef struct vis_ctx {
    oc_cv_out *o;
    const char *prefix;
    oc_status s;
    oc_error *err;
} vis_ctx;

/* A whole tensor: HF name (after the prefix) with its PyTorch shape (-1: any). */
static const oc_st_tensor *take(vis_ctx *c, const char *gguf_name, const char *rel, uint32_t n_dims, int64_t d0,
                                int64_t d1) {
    if (c->s) return NULL;
    char hf[OC_CV_NAME_BYTES];
    snprintf(hf, sizeof hf, "%s%s", c->prefix, rel);
    const int64_t shape[2] = { d0, d1 };
    const oc_st_tensor *src;
    c->s = oc_cv_source(c->o->m, hf, n_dims, shape, &src, c->err);
    if (!c->s && gguf_name) c->s = oc_cv_add_plain(c->o, gguf_name, src, c->err);
    return c->s ? NULL : src;
}

/* attn.qkv.{weight [3E, E], bias [3E]} -> attn_{q,k,v}.{weight, bias}: row ranges of the source. */
static void split_qkv(vis_ctx *c, const char *blk, const char *b, int64_t E) {
    char rel[96], g[64];
    for (int is_bias = 0; is_bias < 2 && !c->s; is_bias++) {
        snprintf(rel, sizeof rel, "%sattn.qkv.%s", b, is_bias ? "bias" : "weight");
        const oc_st_tensor *src = take(c, NULL, rel, is_bias ? 1 : 2, 3 * E, E);
        for (int part = 0; part < 3 && !c->s; part++) {
            snprintf(g, sizeof g, "%sattn_%c.%s", blk, "qkv"[part], is_bias ? "bias" : "weight");
            const int64_t ne[2] = { E, E };
            const uint64_t per = is_bias ? (uint64_t)E : (uint64_t)(E * E);
            c->s = oc_cv_add(c->o, g, src, is_bias ? 1 : 2, ne, (uint64_t)part * per, is_bias ? 1 : (uint64_t)E, 0, c->err);
        }
    }
}

/* Conv3d [E, C, T, P, P] -> two Conv2d kernels, GGUF ne [P, P, C, E]: row r = (e*C + ch)*P + y
 * starts at t*P*P + (r / P) * T*P*P + (r % P) * P. */
static void split_patch(vis_ctx *c) {
    const oc_cv_vision_hp *v = &c->o->m->vis;
    const int64_t E = v->n_embd, C = v->in_channels, T = v->temporal, P = v->patch_size;
    char hf[OC_CV_NAME_BYTES];
    snprintf(hf, sizeof hf, "%spatch_embed.proj.weight", c->prefix);
    const int64_t shape[5] = { E, C, T, P, P };
    const oc_st_tensor *src;
    c->s = oc_cv_source(c->o->m, hf, 5, shape, &src, c->err);
    for (int64_t t = 0; t < 2 && !c->s; t++) {
        const int64_t ne[4] = { P, P, C, E };
        c->s = oc_cv_add(c->o, t ? "v.patch_embd.weight.1" : "v.patch_embd.weight", src, 4, ne,
                         (uint64_t)(t * P * P), (uint64_t)P, (uint64_t)(T * P * P), c->err);
    }
}

oc_status oc_cv_vision_tensors(oc_cv_out *o, oc_error *err) {
    oc_cv_model *m = o->m;
    const oc_cv_vision_hp *v = &m->vis;
    const int q25 = m->is_qwen25;
    const int64_t E = v->n_embd, M = E * v->merge * v->merge;
    vis_ctx c = { o, m->vis_prefix, OC_OK, err };
    int64_t F = v->n_ff;
    if (!q25) {   /* Qwen2-VL's MLP width is embed_dim * mlp_ratio: read it off the first fc1 */
        const oc_st_tensor *fc1 = take(&c, NULL, "blocks.0.mlp.fc1.weight", 2, -1, E);
        if (!fc1) return c.s;
        F = fc1->shape[0];
    }
    split_patch(&c);
    for (int64_t i = 0; i < v->n_layer && !c.s; i++) {
        char b[40], blk[40], g[64], rel[96];
        snprintf(b, sizeof b, "blocks.%lld.", (long long)i);
        snprintf(blk, sizeof blk, "v.blk.%lld.", (long long)i);
#define V(gguf, hf, nd, a, d)                                   \
        snprintf(g, sizeof g, "%s%s", blk, gguf);              \
        snprintf(rel, sizeof rel, "%s%s", b, hf);              \
        take(&c, g, rel, nd, a, d);
        V("ln1.weight", "norm1.weight", 1, E, 0)
        if (!q25) { V("ln1.bias", "norm1.bias", 1, E, 0) }
        split_qkv(&c, blk, b, E);
        V("attn_out.weight", "attn.proj.weight", 2, E, E)
        V("attn_out.bias", "attn.proj.bias", 1, E, 0)
        V("ln2.weight", "norm2.weight", 1, E, 0)
        if (!q25) {
            V("ln2.bias", "norm2.bias", 1, E, 0)
            V("ffn_up.weight", "mlp.fc1.weight", 2, F, E)
            V("ffn_up.bias", "mlp.fc1.bias", 1, F, 0)
            V("ffn_down.weight", "mlp.fc2.weight", 2, E, F)
            V("ffn_down.bias", "mlp.fc2.bias", 1, E, 0)
        } else {
            V("ffn_gate.weight", "mlp.gate_proj.weight", 2, F, E)
            V("ffn_gate.bias", "mlp.gate_proj.bias", 1, F, 0)
            V("ffn_up.weight", "mlp.up_proj.weight", 2, F, E)
            V("ffn_up.bias", "mlp.up_proj.bias", 1, F, 0)
            V("ffn_down.weight", "mlp.down_proj.weight", 2, E, F)
            V("ffn_down.bias", "mlp.down_proj.bias", 1, E, 0)
        }
#undef V
    }
    take(&c, "v.post_ln.weight", "merger.ln_q.weight", 1, E, 0);
    if (!q25) take(&c, "v.post_ln.bias", "merger.ln_q.bias", 1, E, 0);
    take(&c, "mm.0.weight", "merger.mlp.0.weight", 2, M, M);
    take(&c, "mm.0.bias", "merger.mlp.0.bias", 1, M, 0);
    take(&c, "mm.2.weight", "merger.mlp.2.weight", 2, v->n_out, M);
    take(&c, "mm.2.bias", "merger.mlp.2.bias", 1, v->n_out, 0);
    return c.s;
}
