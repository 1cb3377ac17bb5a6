/* test_convert.c: the HF -> GGUF converter (examples/tools/convert.h).
 *  1. A tiny Qwen2-VL checkpoint written here (F32 text weights, BF16 vision weights, an F16 patch
 *     kernel; a hand-made tokenizer): names, GGUF shapes, types, every key with its value type and
 *     value, and tensor values equal to the safetensors values (qkv split, Conv3d split), for
 *     --type f16; string merges and chat_template.jinja; the type rules for f32, bf16, q8_0 (incl.
 *     the F16 fallback), q4_0.
 *  2. Bad input: missing files, unknown architecture, missing / mis-shaped / unexpected tensors,
 *     an unsupported dtype, a bad preprocessor config: one-line errors naming the file and the
 *     problem, and no output file.
 *  3. The fixtures in tests/data/models/{qwen2vl,qwen25vl}/hf (sharded, BF16, transformers 5
 *     layout for qwen25vl) against the Python-written text.gguf / mmproj.gguf: same tensors, ne,
 *     types, identical bytes, same keys with the same types and values (general.name excepted:
 *     ours is the directory name). q8_0 / q4_0 files load with the GGUF reader, the text-model
 *     loader and the tokenizer, and dequantize within the quantizer's error bound. */
#include "check.h"
#include "tools/convert_internal.h"
#include "core/dtype.h"
#include "core/f16.h"
#include "kernels/quant.h"
#include "model/text_model.h"
#include "tokenizer/tokenizer.h"

#include <stdint.h>
#include <sys/stat.h>

#define TMP "build/test-tmp/convert"

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(text, 1, strlen(text), f) == strlen(text);
    return (fclose(f) == 0) && ok;
}

static int file_exists(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

/* ---- a safetensors writer ------------------------------------------------------------------------ */

enum { ST_F32, ST_F16, ST_BF16, ST_I32 };
typedef struct src_tensor {
    char name[96];
    int dtype;
    int n_dims;
    int64_t shape[5];
    int64_t n;
    float *val;       /* the values (exactly representable in every dtype used) */
} src_tensor;

typedef struct src_model {
    src_tensor t[64];
    int n;
} src_model;

static src_tensor *add_src(src_model *sm, const char *name, int dtype, int n_dims, int64_t a, int64_t b, int64_t c,
                           int64_t d, int64_t e) {
    src_tensor *t = &sm->t[sm->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->n_dims = n_dims;
    int64_t dims[5] = { a, b, c, d, e };
    t->n = 1;
    for (int i = 0; i < n_dims; i++) t->shape[i] = dims[i], t->n *= dims[i];
    t->val = malloc(sizeof(float) * (size_t)t->n);
    /* k/16 with |k| <= 30: exact in f16 and bf16, varied per tensor and element */
    for (int64_t i = 0; i < t->n; i++) t->val[i] = (float)((i * 7 + sm->n * 13) % 61 - 30) / 16.0f;
    sm->n++;
    return t;
}

static void free_src(src_model *sm) {
    for (int i = 0; i < sm->n; i++) free(sm->t[i].val);
    sm->n = 0;
}

static const src_tensor *find_src(const src_model *sm, const char *name) {
    for (int i = 0; i < sm->n; i++)
        if (!strcmp(sm->t[i].name, name)) return &sm->t[i];
    return NULL;
}

static int write_safetensors(const char *path, const src_model *sm) {
    static const char *const dn[] = { "F32", "F16", "BF16", "I32" };
    static const size_t ds[] = { 4, 2, 2, 4 };
    size_t hcap = 65536, h = 0, data_bytes = 0;
    char *hdr = malloc(hcap);
    h += (size_t)snprintf(hdr + h, hcap - h, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < sm->n; i++) {
        const src_tensor *t = &sm->t[i];
        size_t nb = (size_t)t->n * ds[t->dtype];
        h += (size_t)snprintf(hdr + h, hcap - h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t->name, dn[t->dtype]);
        for (int k = 0; k < t->n_dims; k++) h += (size_t)snprintf(hdr + h, hcap - h, k ? ",%lld" : "%lld", (long long)t->shape[k]);
        h += (size_t)snprintf(hdr + h, hcap - h, "],\"data_offsets\":[%zu,%zu]}", data_bytes, data_bytes + nb);
        data_bytes += nb;
    }
    h += (size_t)snprintf(hdr + h, hcap - h, "}");
    FILE *f = fopen(path, "wb");
    if (!f) { free(hdr); return 0; }
    unsigned char len[8];
    for (int k = 0; k < 8; k++) len[k] = (unsigned char)((uint64_t)h >> (8 * k));
    int ok = fwrite(len, 1, 8, f) == 8 && fwrite(hdr, 1, h, f) == h;
    for (int i = 0; i < sm->n && ok; i++) {
        const src_tensor *t = &sm->t[i];
        for (int64_t j = 0; j < t->n && ok; j++) {
            unsigned char b[4];
            if (t->dtype == ST_F32) memcpy(b, &t->val[j], 4);
            else if (t->dtype == ST_I32) { int32_t v = (int32_t)t->val[j]; memcpy(b, &v, 4); }
            else {
                uint16_t u = t->dtype == ST_F16 ? oc_f32_to_f16(t->val[j]) : oc_f32_to_bf16(t->val[j]);
                memcpy(b, &u, 2);
            }
            ok = fwrite(b, 1, ds[t->dtype], f) == ds[t->dtype];
        }
    }
    free(hdr);
    return (fclose(f) == 0) && ok;
}

/* ---- the tiny Qwen2-VL checkpoint ------------------------------------------------------------------ */
/* text: vocab 8, width 64, 2 heads of 32, 1 kv head, FFN 96, 1 layer, tied embeddings.
 * vision: width 16, 2 heads, MLP 64 (fc1 rows of 16: not whole Q8_0 blocks), 1 block, patch 14,
 * merger 64 -> 64. */
enum { V_N = 8, T_E = 64, T_KV = 32, T_F = 96, V_E = 16, V_F = 64, V_P = 14, V_M = 64 };

typedef struct variant {
    const char *arch;           /* architectures[0] */
    const char *drop;           /* leave this tensor out */
    const char *reshape;        /* give this tensor one row too many */
    const char *retype;         /* store this tensor as I32 */
    int extra;                  /* add an unknown tensor */
    int no_tokenizer, no_mean, no_config;
    int alt_tokenizer;          /* "a b" string merges; template only in chat_template.jinja */
    const char *tokenizer_json; /* this text as tokenizer.json instead of the good one */
} variant;

static void build_model(src_model *sm, const variant *v) {
    sm->n = 0;
#define S(name, dt, nd, a, b, c, d, e)                                                          \
    if (!v->drop || strcmp(v->drop, name)) {                                                    \
        int bad = v->reshape && !strcmp(v->reshape, name);                                      \
        src_tensor *t_ = add_src(sm, name, (v->retype && !strcmp(v->retype, name)) ? ST_I32 : dt, nd, \
                                 (a) + bad, b, c, d, e);                                        \
        (void)t_;                                                                               \
    }
    S("model.embed_tokens.weight", ST_F32, 2, V_N, T_E, 0, 0, 0)
    S("model.layers.0.input_layernorm.weight", ST_F32, 1, T_E, 0, 0, 0, 0)
    S("model.layers.0.self_attn.q_proj.weight", ST_F32, 2, T_E, T_E, 0, 0, 0)
    S("model.layers.0.self_attn.q_proj.bias", ST_F32, 1, T_E, 0, 0, 0, 0)
    S("model.layers.0.self_attn.k_proj.weight", ST_F32, 2, T_KV, T_E, 0, 0, 0)
    S("model.layers.0.self_attn.k_proj.bias", ST_F32, 1, T_KV, 0, 0, 0, 0)
    S("model.layers.0.self_attn.v_proj.weight", ST_F32, 2, T_KV, T_E, 0, 0, 0)
    S("model.layers.0.self_attn.v_proj.bias", ST_F32, 1, T_KV, 0, 0, 0, 0)
    S("model.layers.0.self_attn.o_proj.weight", ST_F32, 2, T_E, T_E, 0, 0, 0)
    S("model.layers.0.post_attention_layernorm.weight", ST_F32, 1, T_E, 0, 0, 0, 0)
    S("model.layers.0.mlp.gate_proj.weight", ST_F32, 2, T_F, T_E, 0, 0, 0)
    S("model.layers.0.mlp.up_proj.weight", ST_F32, 2, T_F, T_E, 0, 0, 0)
    S("model.layers.0.mlp.down_proj.weight", ST_F32, 2, T_E, T_F, 0, 0, 0)
    S("model.norm.weight", ST_F32, 1, T_E, 0, 0, 0, 0)
    S("visual.patch_embed.proj.weight", ST_F16, 5, V_E, 3, 2, V_P, V_P)
    S("visual.blocks.0.norm1.weight", ST_BF16, 1, V_E, 0, 0, 0, 0)
    S("visual.blocks.0.norm1.bias", ST_BF16, 1, V_E, 0, 0, 0, 0)
    S("visual.blocks.0.attn.qkv.weight", ST_BF16, 2, 3 * V_E, V_E, 0, 0, 0)
    S("visual.blocks.0.attn.qkv.bias", ST_BF16, 1, 3 * V_E, 0, 0, 0, 0)
    S("visual.blocks.0.attn.proj.weight", ST_BF16, 2, V_E, V_E, 0, 0, 0)
    S("visual.blocks.0.attn.proj.bias", ST_BF16, 1, V_E, 0, 0, 0, 0)
    S("visual.blocks.0.norm2.weight", ST_BF16, 1, V_E, 0, 0, 0, 0)
    S("visual.blocks.0.norm2.bias", ST_BF16, 1, V_E, 0, 0, 0, 0)
    S("visual.blocks.0.mlp.fc1.weight", ST_BF16, 2, V_F, V_E, 0, 0, 0)
    S("visual.blocks.0.mlp.fc1.bias", ST_BF16, 1, V_F, 0, 0, 0, 0)
    S("visual.blocks.0.mlp.fc2.weight", ST_BF16, 2, V_E, V_F, 0, 0, 0)
    S("visual.blocks.0.mlp.fc2.bias", ST_BF16, 1, V_E, 0, 0, 0, 0)
    S("visual.merger.ln_q.weight", ST_BF16, 1, V_E, 0, 0, 0, 0)
    S("visual.merger.ln_q.bias", ST_BF16, 1, V_E, 0, 0, 0, 0)
    S("visual.merger.mlp.0.weight", ST_BF16, 2, V_M, V_M, 0, 0, 0)
    S("visual.merger.mlp.0.bias", ST_BF16, 1, V_M, 0, 0, 0, 0)
    S("visual.merger.mlp.2.weight", ST_BF16, 2, T_E, V_M, 0, 0, 0)
    S("visual.merger.mlp.2.bias", ST_BF16, 1, T_E, 0, 0, 0, 0)
    S("visual.rotary_pos_emb.inv_freq", ST_F32, 1, 4, 0, 0, 0, 0)   /* skipped, as llama.cpp does */
    if (v->extra) { S("visual.blocks.0.attn.extra.weight", ST_F32, 1, 4, 0, 0, 0, 0) }
#undef S
}

static const char *const CHAT = "{{ messages }}";

static int write_checkpoint(const char *dir, const variant *v, src_model *sm) {
    char p[512], cfg[2048];
    mkdir("build", 0777);
    mkdir("build/test-tmp", 0777);
    mkdir(TMP, 0777);
    mkdir(dir, 0777);
    static const char *const files[] = { "config.json", "tokenizer.json", "tokenizer_config.json",
                                         "preprocessor_config.json", "chat_template.json", "model.safetensors" };
    for (size_t i = 0; i < OC_ARRAY_LEN(files); i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        remove(p);
    }
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"hidden_size\": %d, \"intermediate_size\": %d,"
             " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
             " \"max_position_embeddings\": 2048, \"rms_norm_eps\": 1e-06, \"rope_theta\": 500000.0,"
             " \"vocab_size\": %d, \"tie_word_embeddings\": true, \"bos_token_id\": 3, \"eos_token_id\": 4,"
             " \"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": [8, 4, 4]},"
             " \"vision_config\": {\"depth\": 1, \"embed_dim\": %d, \"mlp_ratio\": 4, \"num_heads\": 2,"
             " \"in_chans\": 3, \"hidden_size\": %d, \"patch_size\": 14, \"spatial_merge_size\": 2,"
             " \"temporal_patch_size\": 2}}",
             v->arch, strcmp(v->arch, "Qwen2VLForConditionalGeneration") ? "llama" : "qwen2_vl", T_E, T_F, V_N, V_E, T_E);
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (!v->no_config && !write_text(p, cfg)) return 0;
    /* ids 0..5; 6 and 7 have no token: [PAD6], [PAD7]. <|im_end|> is not marked special but looks
     * special (CONTROL); the non-special <tool\u2581x> is USER_DEFINED with the U+2581 made a space. */
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    if (v->tokenizer_json) {
        if (!write_text(p, v->tokenizer_json)) return 0;
    } else if (v->alt_tokenizer) {
        if (!write_text(p, "{\"added_tokens\": [{\"id\": 3, \"content\": \"<|endoftext|>\", \"special\": true}],"
                           " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2},"
                           " \"merges\": [\"a b\", \"ab b\"]}}"))
            return 0;
    } else if (!v->no_tokenizer &&
        !write_text(p, "{\"version\": \"1.0\", \"added_tokens\": ["
                       "{\"id\": 3, \"content\": \"<|endoftext|>\", \"special\": true, \"normalized\": false},"
                       "{\"id\": 4, \"content\": \"<|im_end|>\", \"special\": false, \"normalized\": false},"
                       "{\"id\": 5, \"content\": \"<tool\\u2581x>\", \"special\": false, \"normalized\": false}],"
                       " \"normalizer\": {\"type\": \"NFC\"}, \"post_processor\": null,"
                       " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2},"
                       " \"merges\": [[\"a\", \"b\"], [\"a b\", \"c\"]]}}"))
        return 0;
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    snprintf(cfg, sizeof cfg, "{\"bos_token\": null, \"eos_token\": \"<|im_end|>\", \"pad_token\": "
                              "{\"content\": \"<|endoftext|>\"}, \"unk_token\": null, \"chat_template\": \"%s\"}", CHAT);
    if (!write_text(p, v->alt_tokenizer ? "{\"eos_token\": {\"content\": \"<|endoftext|>\"}, \"add_eos_token\": true}" : cfg))
        return 0;
    snprintf(p, sizeof p, "%s/chat_template.jinja", dir);
    remove(p);
    if (v->alt_tokenizer && !write_text(p, "{{ jinja }}")) return 0;
    snprintf(p, sizeof p, "%s/chat_template.json", dir);   /* tokenizer_config.json's wins */
    if (!write_text(p, "{\"chat_template\": \"not this one\"}")) return 0;
    snprintf(p, sizeof p, "%s/preprocessor_config.json", dir);
    if (!write_text(p, v->no_mean ? "{\"image_std\": [0.5, 0.25, 0.125]}"
                                  : "{\"image_mean\": [0.5, 0.25, 0.75], \"image_std\": [0.5, 0.25, 0.125]}"))
        return 0;
    build_model(sm, v);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    return write_safetensors(p, sm);
}

/* ---- checks on the written files ------------------------------------------------------------------- */

typedef struct expect_key {
    const char *key;
    oc_gguf_type type;
    double num;          /* numbers and bools */
    const char *str;     /* strings */
} expect_key;

static void check_keys(const oc_gguf *g, const expect_key *ek, size_t n, const char *what) {
    CHECKF(oc_gguf_n_keys(g) == (int64_t)n, "%s: %lld keys, expected %zu", what, (long long)oc_gguf_n_keys(g), n);
    for (size_t i = 0; i < n; i++) {
        int64_t k = oc_gguf_find_key(g, ek[i].key);
        if (k < 0) { CHECKF(0, "%s: key %s missing", what, ek[i].key); continue; }
        CHECKF(oc_gguf_key_type(g, k) == ek[i].type, "%s: %s has type %d, expected %d", what, ek[i].key,
               (int)oc_gguf_key_type(g, k), (int)ek[i].type);
        if (ek[i].type == OC_GGUF_STRING) {
            oc_str s = { 0, 0 };
            oc_gguf_get_str(g, ek[i].key, &s, NULL);
            CHECKF(s.len == strlen(ek[i].str) && !memcmp(s.ptr, ek[i].str, s.len), "%s: %s = '%.*s'", what, ek[i].key,
                   (int)s.len, s.ptr);
        } else if (ek[i].type == OC_GGUF_F32) {
            float f = 0;
            oc_gguf_get_f32(g, ek[i].key, &f, NULL);
            CHECKF(f == (float)ek[i].num, "%s: %s = %g", what, ek[i].key, f);
        } else if (ek[i].type != OC_GGUF_ARRAY) {
            int64_t v = -1;
            oc_gguf_get_int(g, ek[i].key, &v, NULL);
            CHECKF(v == (int64_t)ek[i].num, "%s: %s = %lld", what, ek[i].key, (long long)v);
        }
    }
}

/* The GGUF tensor as floats (F32/F16/BF16/Q8_0/Q4_0). */
static float *tensor_f32(const oc_gguf_tensor *t, int64_t *n_out) {
    int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    float *f = malloc(sizeof(float) * (size_t)n);
    oc_to_f32_fn fn = oc_dequant_ref(t->dtype);
    if (fn) fn(t->data, f, n);
    *n_out = n;
    return f;
}

/* Expected values of a GGUF tensor of the tiny model from the sources (the splits re-derived). */
static float *expected_values(const src_model *sm, const char *gname, int64_t n) {
    static const struct { const char *g, *hf; } plain[] = {
        { "token_embd.weight", "model.embed_tokens.weight" },
        { "blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight" },
        { "blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight" },
        { "blk.0.attn_q.bias", "model.layers.0.self_attn.q_proj.bias" },
        { "blk.0.attn_k.weight", "model.layers.0.self_attn.k_proj.weight" },
        { "blk.0.attn_k.bias", "model.layers.0.self_attn.k_proj.bias" },
        { "blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight" },
        { "blk.0.attn_v.bias", "model.layers.0.self_attn.v_proj.bias" },
        { "blk.0.attn_output.weight", "model.layers.0.self_attn.o_proj.weight" },
        { "blk.0.ffn_norm.weight", "model.layers.0.post_attention_layernorm.weight" },
        { "blk.0.ffn_gate.weight", "model.layers.0.mlp.gate_proj.weight" },
        { "blk.0.ffn_up.weight", "model.layers.0.mlp.up_proj.weight" },
        { "blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight" },
        { "output_norm.weight", "model.norm.weight" },
        { "v.blk.0.ln1.weight", "visual.blocks.0.norm1.weight" },
        { "v.blk.0.ln1.bias", "visual.blocks.0.norm1.bias" },
        { "v.blk.0.attn_out.weight", "visual.blocks.0.attn.proj.weight" },
        { "v.blk.0.attn_out.bias", "visual.blocks.0.attn.proj.bias" },
        { "v.blk.0.ln2.weight", "visual.blocks.0.norm2.weight" },
        { "v.blk.0.ln2.bias", "visual.blocks.0.norm2.bias" },
        { "v.blk.0.ffn_up.weight", "visual.blocks.0.mlp.fc1.weight" },
        { "v.blk.0.ffn_up.bias", "visual.blocks.0.mlp.fc1.bias" },
        { "v.blk.0.ffn_down.weight", "visual.blocks.0.mlp.fc2.weight" },
        { "v.blk.0.ffn_down.bias", "visual.blocks.0.mlp.fc2.bias" },
        { "v.post_ln.weight", "visual.merger.ln_q.weight" },
        { "v.post_ln.bias", "visual.merger.ln_q.bias" },
        { "mm.0.weight", "visual.merger.mlp.0.weight" },
        { "mm.0.bias", "visual.merger.mlp.0.bias" },
        { "mm.2.weight", "visual.merger.mlp.2.weight" },
        { "mm.2.bias", "visual.merger.mlp.2.bias" },
    };
    float *e = malloc(sizeof(float) * (size_t)n);
    for (size_t i = 0; i < OC_ARRAY_LEN(plain); i++) {
        if (strcmp(plain[i].g, gname)) continue;
        const src_tensor *s = find_src(sm, plain[i].hf);
        if (!s || s->n != n) break;
        memcpy(e, s->val, sizeof(float) * (size_t)n);
        return e;
    }
    const char *parts = "qkv";
    for (int p = 0; p < 3; p++) {
        char wn[64], bn[64];
        snprintf(wn, sizeof wn, "v.blk.0.attn_%c.weight", parts[p]);
        snprintf(bn, sizeof bn, "v.blk.0.attn_%c.bias", parts[p]);
        if (!strcmp(gname, wn) && n == V_E * V_E) {
            const src_tensor *s = find_src(sm, "visual.blocks.0.attn.qkv.weight");
            for (int r = 0; r < V_E; r++)
                for (int c = 0; c < V_E; c++) e[r * V_E + c] = s->val[(p * V_E + r) * V_E + c];
            return e;
        }
        if (!strcmp(gname, bn) && n == V_E) {
            const src_tensor *s = find_src(sm, "visual.blocks.0.attn.qkv.bias");
            for (int r = 0; r < V_E; r++) e[r] = s->val[p * V_E + r];
            return e;
        }
    }
    for (int t = 0; t < 2; t++) {
        if (strcmp(gname, t ? "v.patch_embd.weight.1" : "v.patch_embd.weight") || n != V_E * 3 * V_P * V_P) continue;
        const src_tensor *s = find_src(sm, "visual.patch_embed.proj.weight");
        for (int o = 0; o < V_E; o++)
            for (int c = 0; c < 3; c++)
                for (int y = 0; y < V_P; y++)
                    for (int x = 0; x < V_P; x++)
                        e[((o * 3 + c) * V_P + y) * V_P + x] = s->val[(((o * 3 + c) * 2 + t) * V_P + y) * V_P + x];
        return e;
    }
    free(e);
    return NULL;
}

/* Every tensor of g: the expected type for ftype, and values equal to the sources (exactly for
 * float types, within the block quantizer's bound for Q8_0 / Q4_0). */
static void check_values(const oc_gguf *g, const src_model *sm, oc_convert_ftype ftype, int is_mmproj) {
    for (int64_t i = 0; i < oc_gguf_n_tensors(g); i++) {
        const oc_gguf_tensor *t = oc_gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        int32_t want = oc_cv_pick_dtype(ftype, is_mmproj, name, t->n_dims, t->ne[0]);
        CHECKF(t->dtype == want, "%s: type %d, expected %d", name, t->dtype, want);
        int64_t n;
        float *got = tensor_f32(t, &n);
        float *e = expected_values(sm, name, n);
        CHECKF(e != NULL, "%s: unexpected tensor or element count %lld", name, (long long)n);
        if (e) {
            int bad = 0;
            for (int64_t b0 = 0; b0 < n; b0 += 32) {
                float amax = 0;
                int64_t b1 = b0 + 32 < n ? b0 + 32 : n;
                for (int64_t k = b0; k < b1; k++) amax = fmaxf(amax, fabsf(e[k]));
                float tol = t->dtype == OC_DTYPE_Q8_0 ? amax / 127 * 0.6f : t->dtype == OC_DTYPE_Q4_0 ? amax / 8 * 1.01f : 0;
                for (int64_t k = b0; k < b1; k++) bad += !(fabsf(got[k] - e[k]) <= tol);
            }
            CHECKF(bad == 0, "%s (%s): %d values differ from the source", name, oc_dtype_name(t->dtype), bad);
        }
        free(got);
        free(e);
    }
}

static oc_gguf *open_out(const char *prefix, const char *suffix) {
    char p[512];
    snprintf(p, sizeof p, "%s%s", prefix, suffix);
    oc_gguf *g = NULL;
    oc_error e;
    if (oc_gguf_open(&g, p, NULL, &e) != OC_OK) check_fail_at(__FILE__, __LINE__, "%s", e.message);
    return g;
}

static const variant GOOD = { "Qwen2VLForConditionalGeneration", NULL, NULL, NULL, 0, 0, 0, 0, 0, NULL };

static void test_tiny_f16(void) {
    src_model sm;
    const char *dir = TMP "/tiny";
    REQUIRE(write_checkpoint(dir, &GOOD, &sm));
    oc_error e;
    oc_convert_result r;
    oc_status s = oc_convert_hf(dir, TMP "/tiny-out", OC_CONVERT_F16, NULL, &r, &e);
    REQUIREF(s == OC_OK, "%s", e.message);
    CHECK(r.n_tensors_text == 14 && r.n_tensors_mmproj == 24);
    oc_gguf *tg = open_out(TMP "/tiny-out", ".gguf"), *vg = open_out(TMP "/tiny-out", "-mmproj.gguf");
    if (tg) {
        const expect_key tk[] = {
            { "general.architecture", OC_GGUF_STRING, 0, "qwen2vl" }, { "general.type", OC_GGUF_STRING, 0, "model" },
            { "general.name", OC_GGUF_STRING, 0, "tiny" }, { "qwen2vl.block_count", OC_GGUF_U32, 1, 0 },
            { "qwen2vl.context_length", OC_GGUF_U32, 2048, 0 }, { "qwen2vl.embedding_length", OC_GGUF_U32, T_E, 0 },
            { "qwen2vl.feed_forward_length", OC_GGUF_U32, T_F, 0 }, { "qwen2vl.attention.head_count", OC_GGUF_U32, 2, 0 },
            { "qwen2vl.attention.head_count_kv", OC_GGUF_U32, 1, 0 },
            { "qwen2vl.rope.dimension_sections", OC_GGUF_ARRAY, 0, 0 },
            { "qwen2vl.rope.freq_base", OC_GGUF_F32, 500000.0, 0 },
            { "qwen2vl.attention.layer_norm_rms_epsilon", OC_GGUF_F32, 1e-6, 0 },
            { "general.file_type", OC_GGUF_U32, 1, 0 }, { "general.quantization_version", OC_GGUF_U32, 2, 0 },
            { "tokenizer.ggml.model", OC_GGUF_STRING, 0, "gpt2" }, { "tokenizer.ggml.pre", OC_GGUF_STRING, 0, "qwen2" },
            { "tokenizer.ggml.tokens", OC_GGUF_ARRAY, 0, 0 }, { "tokenizer.ggml.token_type", OC_GGUF_ARRAY, 0, 0 },
            { "tokenizer.ggml.merges", OC_GGUF_ARRAY, 0, 0 }, { "tokenizer.ggml.eos_token_id", OC_GGUF_U32, 4, 0 },
            { "tokenizer.ggml.padding_token_id", OC_GGUF_U32, 3, 0 }, { "tokenizer.ggml.bos_token_id", OC_GGUF_U32, 3, 0 },
            { "tokenizer.ggml.add_bos_token", OC_GGUF_BOOL, 0, 0 }, { "tokenizer.chat_template", OC_GGUF_STRING, 0, CHAT },
        };
        check_keys(tg, tk, OC_ARRAY_LEN(tk), "text");
        /* SpecialVocab order: ids from tokenizer_config (eos, pad), then config.json (bos) */
        CHECK(oc_gguf_find_key(tg, "tokenizer.ggml.eos_token_id") < oc_gguf_find_key(tg, "tokenizer.ggml.padding_token_id"));
        CHECK(oc_gguf_find_key(tg, "tokenizer.ggml.padding_token_id") < oc_gguf_find_key(tg, "tokenizer.ggml.bos_token_id"));
        oc_gguf_type et;
        uint64_t cnt;
        int64_t k = oc_gguf_find_key(tg, "qwen2vl.rope.dimension_sections");
        CHECK(oc_gguf_get_arr(tg, "qwen2vl.rope.dimension_sections", &et, &cnt, NULL) == OC_OK && et == OC_GGUF_I32 && cnt == 4);
        CHECK(oc_gguf_arr_int(tg, k, 0) == 8 && oc_gguf_arr_int(tg, k, 1) == 4 && oc_gguf_arr_int(tg, k, 2) == 4 &&
              oc_gguf_arr_int(tg, k, 3) == 0);
        static const char *const toks[V_N] = { "a", "b", "ab", "<|endoftext|>", "<|im_end|>", "<tool x>", "[PAD6]", "[PAD7]" };
        static const int types[V_N] = { 1, 1, 1, 3, 3, 4, 5, 5 };
        k = oc_gguf_find_key(tg, "tokenizer.ggml.tokens");
        CHECK(oc_gguf_get_arr(tg, "tokenizer.ggml.tokens", &et, &cnt, NULL) == OC_OK && et == OC_GGUF_STRING && cnt == V_N);
        int64_t kt = oc_gguf_find_key(tg, "tokenizer.ggml.token_type");
        CHECK(oc_gguf_get_arr(tg, "tokenizer.ggml.token_type", &et, &cnt, NULL) == OC_OK && et == OC_GGUF_I32 && cnt == V_N);
        for (int i = 0; i < V_N; i++) {
            oc_str ts = oc_gguf_arr_str(tg, k, (uint64_t)i);
            CHECKF(ts.len == strlen(toks[i]) && !memcmp(ts.ptr, toks[i], ts.len), "token %d is '%.*s'", i, (int)ts.len, ts.ptr);
            CHECKF(oc_gguf_arr_int(tg, kt, (uint64_t)i) == types[i], "token %d type %lld", i, (long long)oc_gguf_arr_int(tg, kt, (uint64_t)i));
        }
        k = oc_gguf_find_key(tg, "tokenizer.ggml.merges");
        oc_str m0 = oc_gguf_arr_str(tg, k, 0), m1 = oc_gguf_arr_str(tg, k, 1);
        CHECK(m0.len == 3 && !memcmp(m0.ptr, "a b", 3));
        CHECK(m1.len == 6 && !memcmp(m1.ptr, "a\xc4\xa0" "b c", 6));   /* the space in a part became U+0120 */
        CHECK(oc_gguf_find_tensor(tg, "output.weight") == NULL);       /* tied */
        const oc_gguf_tensor *te = oc_gguf_find_tensor(tg, "blk.0.ffn_down.weight");
        CHECK(te && te->n_dims == 2 && te->ne[0] == T_F && te->ne[1] == T_E);
        te = oc_gguf_find_tensor(tg, "blk.0.attn_k.weight");
        CHECK(te && te->ne[0] == T_E && te->ne[1] == T_KV);
        check_values(tg, &sm, OC_CONVERT_F16, 0);
    }
    if (vg) {
        const expect_key vk[] = {
            { "general.architecture", OC_GGUF_STRING, 0, "clip" }, { "general.type", OC_GGUF_STRING, 0, "mmproj" },
            { "general.name", OC_GGUF_STRING, 0, "tiny" }, { "general.file_type", OC_GGUF_U32, 1, 0 },
            { "clip.has_vision_encoder", OC_GGUF_BOOL, 1, 0 }, { "clip.vision.projection_dim", OC_GGUF_U32, T_E, 0 },
            { "clip.vision.image_size", OC_GGUF_U32, 560, 0 }, { "clip.vision.patch_size", OC_GGUF_U32, 14, 0 },
            { "clip.vision.embedding_length", OC_GGUF_U32, V_E, 0 },
            { "clip.vision.feed_forward_length", OC_GGUF_U32, T_E, 0 },   /* HF vision hidden_size, as llama.cpp */
            { "clip.vision.block_count", OC_GGUF_U32, 1, 0 }, { "clip.vision.attention.head_count", OC_GGUF_U32, 2, 0 },
            { "clip.vision.image_mean", OC_GGUF_ARRAY, 0, 0 }, { "clip.vision.image_std", OC_GGUF_ARRAY, 0, 0 },
            { "clip.projector_type", OC_GGUF_STRING, 0, "qwen2vl_merger" },
            { "clip.vision.attention.layer_norm_epsilon", OC_GGUF_F32, 1e-6, 0 },
            { "general.quantization_version", OC_GGUF_U32, 2, 0 },
        };
        check_keys(vg, vk, OC_ARRAY_LEN(vk), "mmproj");
        oc_gguf_type et;
        uint64_t cnt;
        int64_t k = oc_gguf_find_key(vg, "clip.vision.image_mean");
        CHECK(oc_gguf_get_arr(vg, "clip.vision.image_mean", &et, &cnt, NULL) == OC_OK && et == OC_GGUF_F32 && cnt == 3);
        CHECK(oc_gguf_arr_float(vg, k, 0) == 0.5 && oc_gguf_arr_float(vg, k, 2) == 0.75);
        const oc_gguf_tensor *te = oc_gguf_find_tensor(vg, "v.patch_embd.weight.1");
        CHECK(te && te->n_dims == 4 && te->ne[0] == V_P && te->ne[1] == V_P && te->ne[2] == 3 && te->ne[3] == V_E);
        te = oc_gguf_find_tensor(vg, "v.blk.0.attn_v.weight");
        CHECK(te && te->ne[0] == V_E && te->ne[1] == V_E);
        CHECK(oc_gguf_find_tensor(vg, "v.rotary_pos_emb.inv_freq") == NULL);
        check_values(vg, &sm, OC_CONVERT_F16, 1);
    }
    oc_gguf_close(tg);
    oc_gguf_close(vg);
    free_src(&sm);
}

/* String merges, the template from chat_template.jinja (before chat_template.json), add_eos_token. */
static void test_tiny_alt_tokenizer(void) {
    src_model sm;
    variant v = GOOD;
    v.alt_tokenizer = 1;
    REQUIRE(write_checkpoint(TMP "/tiny-alt", &v, &sm));
    free_src(&sm);
    oc_error e;
    REQUIREF(oc_convert_hf(TMP "/tiny-alt", TMP "/tiny-alt-out", OC_CONVERT_F16, NULL, NULL, &e) == OC_OK, "%s", e.message);
    oc_gguf *g = open_out(TMP "/tiny-alt-out", ".gguf");
    REQUIRE(g);
    const expect_key k[] = {
        { "tokenizer.ggml.eos_token_id", OC_GGUF_U32, 3, 0 }, { "tokenizer.ggml.bos_token_id", OC_GGUF_U32, 3, 0 },
        { "tokenizer.ggml.add_bos_token", OC_GGUF_BOOL, 0, 0 }, { "tokenizer.ggml.add_eos_token", OC_GGUF_BOOL, 1, 0 },
        { "tokenizer.chat_template", OC_GGUF_STRING, 0, "{{ jinja }}" },
    };
    for (size_t i = 0; i < OC_ARRAY_LEN(k); i++) {
        int64_t ki = oc_gguf_find_key(g, k[i].key);
        CHECKF(ki >= 0 && oc_gguf_key_type(g, ki) == k[i].type, "%s", k[i].key);
        if (k[i].type == OC_GGUF_STRING) {
            oc_str s = { 0, 0 };
            oc_gguf_get_str(g, k[i].key, &s, NULL);
            CHECK(s.len == strlen(k[i].str) && !memcmp(s.ptr, k[i].str, s.len));
        } else {
            int64_t x = -1;
            oc_gguf_get_int(g, k[i].key, &x, NULL);
            CHECKF(x == (int64_t)k[i].num, "%s = %lld", k[i].key, (long long)x);
        }
    }
    CHECK(oc_gguf_find_key(g, "tokenizer.ggml.padding_token_id") < 0);
    int64_t km = oc_gguf_find_key(g, "tokenizer.ggml.merges");
    oc_str m1 = oc_gguf_arr_str(g, km, 1);
    CHECK(m1.len == 4 && !memcmp(m1.ptr, "ab b", 4));
    int64_t kt = oc_gguf_find_key(g, "tokenizer.ggml.token_type");
    CHECK(oc_gguf_arr_int(g, kt, 3) == 3 && oc_gguf_arr_int(g, kt, 4) == 5);
    oc_gguf_close(g);
}

/* Every output type: the per-tensor type rules and values. */
static void test_tiny_types(void) {
    src_model sm;
    const char *dir = TMP "/tiny";
    REQUIRE(write_checkpoint(dir, &GOOD, &sm));
    static const oc_convert_ftype fts[] = { OC_CONVERT_F32, OC_CONVERT_BF16, OC_CONVERT_Q8_0, OC_CONVERT_Q4_0 };
    for (size_t i = 0; i < OC_ARRAY_LEN(fts); i++) {
        oc_error e;
        oc_status s = oc_convert_hf(dir, TMP "/tiny-t", fts[i], NULL, NULL, &e);
        REQUIREF(s == OC_OK, "%s", e.message);
        oc_gguf *tg = open_out(TMP "/tiny-t", ".gguf"), *vg = open_out(TMP "/tiny-t", "-mmproj.gguf");
        REQUIRE(tg && vg);
        int64_t ft = -1;
        oc_gguf_get_int(tg, "general.file_type", &ft, NULL);
        CHECK(ft == (int64_t)fts[i]);
        check_values(tg, &sm, fts[i], 0);
        check_values(vg, &sm, fts[i], 1);
        oc_gguf_close(tg);
        oc_gguf_close(vg);
    }
    /* the rules themselves, spelled out */
    CHECK(oc_cv_pick_dtype(OC_CONVERT_Q8_0, 1, "v.patch_embd.weight", 4, 14) == OC_DTYPE_F32);
    CHECK(oc_cv_pick_dtype(OC_CONVERT_F16, 1, "v.patch_embd.weight.1", 4, 14) == OC_DTYPE_F16);
    CHECK(oc_cv_pick_dtype(OC_CONVERT_BF16, 1, "v.patch_embd.weight", 4, 14) == OC_DTYPE_F32);
    CHECK(oc_cv_pick_dtype(OC_CONVERT_Q8_0, 1, "v.blk.0.ffn_up.weight", 2, 16) == OC_DTYPE_F16);
    CHECK(oc_cv_pick_dtype(OC_CONVERT_Q4_0, 0, "token_embd.weight", 2, 64) == OC_DTYPE_Q4_0);
    CHECK(oc_cv_pick_dtype(OC_CONVERT_Q8_0, 0, "blk.0.attn_q.bias", 1, 64) == OC_DTYPE_F32);
    CHECK(oc_cv_pick_dtype(OC_CONVERT_F16, 0, "blk.0.attn_norm.weight", 1, 64) == OC_DTYPE_F32);
    CHECK(oc_cv_pick_dtype(OC_CONVERT_BF16, 0, "blk.0.ffn_up.weight", 2, 64) == OC_DTYPE_BF16);
    free_src(&sm);
}

/* ---- bad input --------------------------------------------------------------------------------- */

static void expect_error(const variant *v, oc_status want, const char *needle1, const char *needle2) {
    src_model sm;
    const char *dir = TMP "/bad";
    int ok = write_checkpoint(dir, v, &sm);
    free_src(&sm);
    REQUIRE(ok);
    remove(TMP "/bad-out.gguf");
    remove(TMP "/bad-out-mmproj.gguf");
    oc_error e = { OC_OK, "" };
    oc_status s = oc_convert_hf(dir, TMP "/bad-out", OC_CONVERT_F16, NULL, NULL, &e);
    CHECKF(s == want, "status %d (%s), expected %d", (int)s, e.message, (int)want);
    CHECKF(strstr(e.message, needle1) && (!needle2 || strstr(e.message, needle2)), "message: %s", e.message);
    CHECKF(!strchr(e.message, '\n'), "message has a newline: %s", e.message);
    CHECK(!file_exists(TMP "/bad-out.gguf") && !file_exists(TMP "/bad-out-mmproj.gguf"));
}

static void test_errors(void) {
    variant v = GOOD;
    v.no_config = 1;
    expect_error(&v, OC_ERR_IO, "config.json", NULL);
    v = GOOD;
    v.no_tokenizer = 1;
    expect_error(&v, OC_ERR_IO, "tokenizer.json", NULL);
    v = GOOD;
    v.arch = "LlamaForCausalLM";
    expect_error(&v, OC_ERR_UNSUPPORTED, "config.json", "LlamaForCausalLM");
    v = GOOD;
    v.drop = "model.layers.0.mlp.up_proj.weight";
    expect_error(&v, OC_ERR_FORMAT, "model.safetensors", "'model.layers.0.mlp.up_proj.weight' is missing");
    v = GOOD;
    v.drop = "visual.blocks.0.attn.qkv.bias";
    expect_error(&v, OC_ERR_FORMAT, "model.safetensors", "'visual.blocks.0.attn.qkv.bias' is missing");
    v = GOOD;
    v.reshape = "visual.merger.mlp.2.weight";
    expect_error(&v, OC_ERR_FORMAT, "model.safetensors", "has shape [65, 64], expected [64, 64]");
    v = GOOD;
    v.reshape = "model.embed_tokens.weight";
    expect_error(&v, OC_ERR_FORMAT, "'model.embed_tokens.weight' has shape", NULL);
    v = GOOD;
    v.retype = "model.norm.weight";
    expect_error(&v, OC_ERR_UNSUPPORTED, "'model.norm.weight' has dtype I32", NULL);
    v = GOOD;
    v.extra = 1;
    expect_error(&v, OC_ERR_FORMAT, "'visual.blocks.0.attn.extra.weight' is not part of", NULL);
    v = GOOD;
    v.no_mean = 1;
    expect_error(&v, OC_ERR_FORMAT, "preprocessor_config.json", "image_mean");
    /* A token text with a newline and a control byte, whose id is not a number: the message names
     * the token on one line, control bytes shown as '?' (found by fuzz_convert_config). */
    v = GOOD;
    v.tokenizer_json = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\\nb\\u0001c\": \"x\"}, \"merges\": []}}";
    expect_error(&v, OC_ERR_FORMAT, "tokenizer.json", "token 'a?b?c' is not");
    oc_error e;
    CHECK(oc_convert_hf(TMP "/no-such-dir", TMP "/x", OC_CONVERT_F16, NULL, NULL, &e) == OC_ERR_IO);
    CHECK(strstr(e.message, "no-such-dir/config.json") != NULL);
    CHECK(oc_convert_hf(TMP "/tiny", TMP "/x", (oc_convert_ftype)5, NULL, NULL, &e) == OC_ERR_INVALID);
    oc_convert_ftype ft;
    CHECK(oc_convert_ftype_parse("q8_0", &ft) && ft == OC_CONVERT_Q8_0);
    CHECK(!oc_convert_ftype_parse("q4_k", &ft));
}

/* ---- the fixtures ---------------------------------------------------------------------------------- */

static int same_value(const oc_gguf *a, int64_t ka, const oc_gguf *b, int64_t kb, const char *key) {
    oc_gguf_type t = oc_gguf_key_type(a, ka);
    if (t != oc_gguf_key_type(b, kb)) return 0;
    if (t == OC_GGUF_STRING) {
        oc_str x, y;
        oc_gguf_get_str(a, key, &x, NULL);
        oc_gguf_get_str(b, key, &y, NULL);
        return x.len == y.len && !memcmp(x.ptr, y.ptr, x.len);
    }
    if (t == OC_GGUF_F32 || t == OC_GGUF_F64) {
        double x, y;
        oc_gguf_get_float(a, key, &x, NULL);
        oc_gguf_get_float(b, key, &y, NULL);
        return x == y;
    }
    if (t != OC_GGUF_ARRAY) {
        int64_t x, y;
        oc_gguf_get_int(a, key, &x, NULL);
        oc_gguf_get_int(b, key, &y, NULL);
        return x == y;
    }
    oc_gguf_type ea, eb;
    uint64_t na, nb;
    oc_gguf_get_arr(a, key, &ea, &na, NULL);
    oc_gguf_get_arr(b, key, &eb, &nb, NULL);
    if (ea != eb || na != nb) return 0;
    for (uint64_t i = 0; i < na; i++) {
        if (ea == OC_GGUF_STRING) {
            oc_str x = oc_gguf_arr_str(a, ka, i), y = oc_gguf_arr_str(b, kb, i);
            if (x.len != y.len || memcmp(x.ptr, y.ptr, x.len)) return 0;
        } else if (ea == OC_GGUF_F32 || ea == OC_GGUF_F64) {
            if (oc_gguf_arr_float(a, ka, i) != oc_gguf_arr_float(b, kb, i)) return 0;
        } else if (oc_gguf_arr_int(a, ka, i) != oc_gguf_arr_int(b, kb, i)) {
            return 0;
        }
    }
    return 1;
}

/* ours (f16) vs the Python-written reference: keys (all but general.name) and tensors. */
static void compare_files(const char *ours_path, const char *ref_path) {
    oc_gguf *o = NULL, *r = NULL;
    oc_error e;
    if (oc_gguf_open(&o, ours_path, NULL, &e) != OC_OK) { CHECKF(0, "%s", e.message); return; }
    if (oc_gguf_open(&r, ref_path, NULL, &e) != OC_OK) { CHECKF(0, "%s", e.message); oc_gguf_close(o); return; }
    CHECKF(oc_gguf_n_keys(o) == oc_gguf_n_keys(r), "%s: %lld keys, reference %lld", ours_path,
           (long long)oc_gguf_n_keys(o), (long long)oc_gguf_n_keys(r));
    for (int64_t k = 0; k < oc_gguf_n_keys(r); k++) {
        oc_str kn = oc_gguf_key_name(r, k);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)kn.len, kn.ptr);
        int64_t ko = oc_gguf_find_key(o, key);
        if (ko < 0) { CHECKF(0, "%s: key %s missing", ours_path, key); continue; }
        if (!strcmp(key, "general.name")) continue;   /* intended: ours is the directory name */
        CHECKF(same_value(o, ko, r, k, key), "%s: key %s differs from %s", ours_path, key, ref_path);
    }
    CHECKF(oc_gguf_n_tensors(o) == oc_gguf_n_tensors(r), "%s: %lld tensors, reference %lld", ours_path,
           (long long)oc_gguf_n_tensors(o), (long long)oc_gguf_n_tensors(r));
    for (int64_t i = 0; i < oc_gguf_n_tensors(r); i++) {
        const oc_gguf_tensor *rt = oc_gguf_tensor_at(r, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)rt->name.len, rt->name.ptr);
        const oc_gguf_tensor *ot = oc_gguf_find_tensor(o, name);
        if (!ot) { CHECKF(0, "%s: tensor %s missing", ours_path, name); continue; }
        int same_shape = ot->n_dims == rt->n_dims;
        for (uint32_t d = 0; d < OC_GGUF_MAX_DIMS; d++) same_shape &= ot->ne[d] == rt->ne[d];
        CHECKF(same_shape && ot->dtype == rt->dtype, "%s: %s has another shape or type", ours_path, name);
        CHECKF(ot->size_bytes == rt->size_bytes && !memcmp(ot->data, rt->data, rt->size_bytes),
               "%s: %s bytes differ", ours_path, name);
    }
    oc_gguf_close(o);
    oc_gguf_close(r);
}

/* A quantized conversion: loads as a model and a tokenizer, every tensor close to the f16 reference. */
static void check_quantized(const char *prefix, const char *ref_dir, oc_convert_ftype ft) {
    char p[512];
    snprintf(p, sizeof p, "%s.gguf", prefix);
    oc_gguf *g = NULL;
    oc_error e;
    if (oc_gguf_open(&g, p, NULL, &e) != OC_OK) { CHECKF(0, "%s", e.message); return; }
    oc_text_model *tm = NULL;
    CHECKF(oc_text_model_load(&tm, g, p, NULL, &e) == OC_OK, "text model: %s", e.message);
    oc_text_model_free(tm);
    oc_tokenizer *tok = NULL;
    CHECKF(oc_tokenizer_open_gguf(&tok, g, NULL, &e) == OC_OK, "tokenizer: %s", e.message);
    oc_tokenizer_close(tok);
    oc_gguf_close(g);
    for (int mm = 0; mm < 2; mm++) {
        char ref[512];
        snprintf(p, sizeof p, "%s%s", prefix, mm ? "-mmproj.gguf" : ".gguf");
        snprintf(ref, sizeof ref, "%s/%s", ref_dir, mm ? "mmproj.gguf" : "text.gguf");
        oc_gguf *o = NULL, *r = NULL;
        if (oc_gguf_open(&o, p, NULL, &e) != OC_OK || oc_gguf_open(&r, ref, NULL, &e) != OC_OK) {
            CHECKF(0, "%s", e.message);
            oc_gguf_close(o);
            continue;
        }
        int n_quant = 0;
        for (int64_t i = 0; i < oc_gguf_n_tensors(r); i++) {
            const oc_gguf_tensor *rt = oc_gguf_tensor_at(r, i);
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)rt->name.len, rt->name.ptr);
            const oc_gguf_tensor *ot = oc_gguf_find_tensor(o, name);
            if (!ot) { CHECKF(0, "%s: %s missing", p, name); continue; }
            CHECKF(ot->dtype == oc_cv_pick_dtype(ft, mm, name, ot->n_dims, ot->ne[0]), "%s: %s has type %d", p, name, ot->dtype);
            n_quant += ot->dtype == OC_DTYPE_Q8_0 || ot->dtype == OC_DTYPE_Q4_0;
            int64_t n, nr;
            float *x = tensor_f32(ot, &n), *y = tensor_f32(rt, &nr);
            int bad = n != nr;
            for (int64_t b0 = 0; b0 < n && !bad; b0 += 32) {
                int64_t b1 = b0 + 32 < n ? b0 + 32 : n;
                float amax = 0;
                for (int64_t k = b0; k < b1; k++) amax = fmaxf(amax, fabsf(y[k]));
                float tol = ot->dtype == OC_DTYPE_Q8_0 ? amax / 127 * 0.6f : ot->dtype == OC_DTYPE_Q4_0 ? amax / 8 * 1.01f : 0;
                for (int64_t k = b0; k < b1; k++) bad += !(fabsf(x[k] - y[k]) <= tol);
            }
            CHECKF(!bad, "%s: %s is not within the quantizer's error of the reference", p, name);
            free(x);
            free(y);
        }
        CHECKF(n_quant > 0, "%s: nothing was quantized", p);
        oc_gguf_close(o);
        oc_gguf_close(r);
    }
}

static void fixture_case(const char *kind) {
    char dir[128], hf[256], ours[256], a[400], b[400];
    snprintf(dir, sizeof dir, "tests/data/models/%s", kind);
    snprintf(hf, sizeof hf, "%s/hf", dir);
    snprintf(a, sizeof a, "%s/config.json", hf);
    if (!file_exists(a)) {
        check_fail_at(__FILE__, __LINE__, "committed fixture %s is missing", hf);
        return;
    }
    mkdir("build", 0777);
    mkdir("build/test-tmp", 0777);
    mkdir(TMP, 0777);
    snprintf(ours, sizeof ours, TMP "/%s-f16", kind);
    oc_error e;
    REQUIREF(oc_convert_hf(hf, ours, OC_CONVERT_F16, NULL, NULL, &e) == OC_OK, "%s", e.message);
    snprintf(a, sizeof a, "%s.gguf", ours);
    snprintf(b, sizeof b, "%s/text.gguf", dir);
    compare_files(a, b);
    snprintf(a, sizeof a, "%s-mmproj.gguf", ours);
    snprintf(b, sizeof b, "%s/mmproj.gguf", dir);
    compare_files(a, b);
    static const oc_convert_ftype qs[] = { OC_CONVERT_Q8_0, OC_CONVERT_Q4_0 };
    for (int i = 0; i < 2; i++) {
        snprintf(ours, sizeof ours, TMP "/%s-%s", kind, i ? "q4_0" : "q8_0");
        REQUIREF(oc_convert_hf(hf, ours, qs[i], NULL, NULL, &e) == OC_OK, "%s", e.message);
        check_quantized(ours, dir, qs[i]);
    }
}

static void test_fixture_qwen2vl(void) { fixture_case("qwen2vl"); }
static void test_fixture_qwen25vl(void) { fixture_case("qwen25vl"); }

int main(void) {
    CHECK_RUN(test_tiny_f16);
    CHECK_RUN(test_tiny_alt_tokenizer);
    CHECK_RUN(test_tiny_types);
    CHECK_RUN(test_errors);
    CHECK_RUN(test_fixture_qwen2vl);
    CHECK_RUN(test_fixture_qwen25vl);
    return check_finish();
}
