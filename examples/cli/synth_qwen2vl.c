/* synth_qwen2vl.c: writes a random-weight model with the exact Qwen2-VL-2B shapes, tensor names and
 * keys (docs/formats.md §2a text GGUF, §2b mmproj), for benchmarks: timings depend only on
 * shapes and types, so no 4.5 GB download is needed. Tensors stream through
 * oc_gguf_writer_add_tensor_fn one chunk of rows at a time (never a whole model in memory); every row
 * is a pure function of (tensor name, row index), so chunking does not change the bytes.
 * Values: weights ~ N(0, 1/fan_in) (sum of 4 uniforms), norm weights 1 +- 0.05, biases std 0.02,
 * the embedding std 1, so activations stay O(1) through all layers. 2-D weights F16, Q8_0 or Q4_0,
 * patch kernels always F16 (as llama.cpp's converter writes them), 1-D tensors F32. Q4_0 is every
 * matrix in Q4_0, the token embedding included, as llama-quantize --pure Q4_0 writes it (without
 * --pure it would take Q6_K for the tied embedding, which has no quantizer here); both programs of a
 * comparison read the same file either way. A layer count other than the 2B's (tests) goes into the
 * file names, so that such a file is never kept in place of a whole model.
 * The tokenizer keys are copied from a given GGUF; its vocabulary is padded with "[PADn]" UNUSED
 * tokens up to the 151936 embedding rows, as llama.cpp's converter pads Qwen2's, so every id the
 * random model generates decodes (to nothing). */
#define _POSIX_C_SOURCE 200809L   /* mkdir, rename */
#include "bench.h"
#include "core/dtype.h"
#include "core/f16.h"
#include "kernels/quant.h"
#include "ocellus.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

/* Qwen2-VL-2B (HF config.json of Qwen/Qwen2-VL-2B-Instruct). */
#define T_EMBD 1536
#define T_LAYERS 28
#define T_HEADS 12
#define T_HEADS_KV 2
#define T_FF 8960
#define T_VOCAB 151936
#define T_KV (T_EMBD / T_HEADS * T_HEADS_KV)
#define V_HIDDEN 1280
#define V_LAYERS 32
#define V_HEADS 16
#define V_FF 5120
#define V_PATCH 14
#define V_MERGED (V_HIDDEN * 4)
#define MAX_ROW 8960   /* longest ne[0] of any tensor (ffn_down) */

#define OC_TOKEN_TYPE_UNUSED 5   /* llama.cpp's LLAMA_TOKEN_TYPE_UNUSED */

typedef enum init_kind { INIT_WEIGHT, INIT_NORM, INIT_BIAS } init_kind;

typedef struct synth_tensor {
    char name[64];
    int32_t dtype;
    uint32_t n_dims;
    int64_t ne[4];
    float std;          /* INIT_WEIGHT: standard deviation */
    init_kind kind;
    uint64_t seed;
    float *row;         /* shared scratch [MAX_ROW] (the writer fills one tensor at a time) */
} synth_tensor;

typedef struct synth_set {
    synth_tensor *t;
    size_t n, cap;
    float *row;
    uint64_t seed;
    int text_layers, vision_layers;
} synth_set;

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t hash_name(const char *s, uint64_t seed) {
    uint64_t h = 0xcbf29ce484222325ULL ^ seed;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

/* n values with mean 0 and variance 1: a sum of four 16-bit uniforms (Irwin-Hall, close to normal). */
static void normal_row(uint64_t *s, float *dst, int64_t n) {
    const float k = 1.7320508f / 65536.0f;   /* sqrt(3): 4 x U(0,1) has variance 1/3 */
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = splitmix(s);
        uint32_t sum = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) + (uint32_t)((r >> 32) & 0xffff) +
                       (uint32_t)(r >> 48);
        dst[i] = ((float)sum - 131070.0f) * k;
    }
}

static oc_status fill_rows(void *user, void *dst, uint64_t first_row, uint64_t n_rows, oc_error *err) {
    synth_tensor *t = user;
    int64_t n = t->ne[0];
    size_t rb = (size_t)oc_dtype_row_bytes(t->dtype, (uint64_t)n);
    if (n > MAX_ROW || !rb) return oc_fail(err, OC_ERR_INVALID, "synth: bad row of %s", t->name);
    for (uint64_t r = 0; r < n_rows; r++) {
        uint64_t s = t->seed ^ ((first_row + r) * 0xd1342543de82ef95ULL);
        float *x = t->row;
        normal_row(&s, x, n);
        float scale = t->kind == INIT_WEIGHT ? t->std : t->kind == INIT_NORM ? 0.05f : 0.02f;
        float shift = t->kind == INIT_NORM ? 1.0f : 0.0f;
        for (int64_t i = 0; i < n; i++) x[i] = shift + scale * x[i];
        unsigned char *out = (unsigned char *)dst + r * rb;
        if (t->dtype == OC_DTYPE_F32) {
            memcpy(out, x, (size_t)n * sizeof(float));
        } else if (t->dtype == OC_DTYPE_F16) {
            for (int64_t i = 0; i < n; i++) {
                uint16_t h = oc_f32_to_f16(x[i]);
                memcpy(out + 2 * i, &h, 2);
            }
        } else if (t->dtype == OC_DTYPE_Q4_0) {
            oc_quantize_q4_0(x, out, n);
        } else {
            oc_quantize_q8_0(x, out, n);
        }
    }
    return OC_OK;
}

static int set_add(synth_set *set, const char *name, int32_t dtype, uint32_t n_dims, int64_t ne0, int64_t ne1,
                   int64_t ne2, int64_t ne3, init_kind kind, float std) {
    if (set->n == set->cap) {
        size_t cap = set->cap ? 2 * set->cap : 256;
        synth_tensor *t = realloc(set->t, cap * sizeof *t);
        if (!t) return 0;
        set->t = t;
        set->cap = cap;
    }
    synth_tensor *t = &set->t[set->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = n_dims == 1 ? OC_DTYPE_F32 : dtype;
    t->n_dims = n_dims;
    t->ne[0] = ne0; t->ne[1] = ne1; t->ne[2] = ne2; t->ne[3] = ne3;
    t->kind = kind;
    t->std = std;
    t->seed = hash_name(name, set->seed);
    t->row = set->row;
    return 1;
}

/* Shorthands: a matrix GGUF ne [n_in, n_out] with std 1/sqrt(n_in), a norm weight, a bias. */
#define MAT(nm, n_in, n_out) ok &= set_add(set, nm, dtype, 2, n_in, n_out, 1, 1, INIT_WEIGHT, 1.0f / sqrtf((float)(n_in)))
#define NORM(nm, n) ok &= set_add(set, nm, dtype, 1, n, 1, 1, 1, INIT_NORM, 0)
#define BIAS(nm, n) ok &= set_add(set, nm, dtype, 1, n, 1, 1, 1, INIT_BIAS, 0)

static int text_tensors(synth_set *set, int32_t dtype) {
    int ok = set_add(set, "token_embd.weight", dtype, 2, T_EMBD, T_VOCAB, 1, 1, INIT_WEIGHT, 1.0f);
    char n[64];
    for (int il = 0; il < set->text_layers; il++) {
#define NM(suffix) (snprintf(n, sizeof n, "blk.%d." suffix, il), n)
        NORM(NM("attn_norm.weight"), T_EMBD);
        MAT(NM("attn_q.weight"), T_EMBD, T_EMBD);
        BIAS(NM("attn_q.bias"), T_EMBD);
        MAT(NM("attn_k.weight"), T_EMBD, T_KV);
        BIAS(NM("attn_k.bias"), T_KV);
        MAT(NM("attn_v.weight"), T_EMBD, T_KV);
        BIAS(NM("attn_v.bias"), T_KV);
        MAT(NM("attn_output.weight"), T_EMBD, T_EMBD);
        NORM(NM("ffn_norm.weight"), T_EMBD);
        MAT(NM("ffn_gate.weight"), T_EMBD, T_FF);
        MAT(NM("ffn_up.weight"), T_EMBD, T_FF);
        MAT(NM("ffn_down.weight"), T_FF, T_EMBD);
#undef NM
    }
    NORM("output_norm.weight", T_EMBD);   /* no output.weight: tied embeddings */
    return ok;
}

static int vision_tensors(synth_set *set, int32_t dtype) {
    /* The two temporal slices of the Conv3d, F16 whatever the type (convert_hf_to_gguf.py). */
    float patch_std = 1.0f / sqrtf(3.0f * 2 * V_PATCH * V_PATCH);
    int ok = set_add(set, "v.patch_embd.weight", OC_DTYPE_F16, 4, V_PATCH, V_PATCH, 3, V_HIDDEN, INIT_WEIGHT, patch_std);
    ok &= set_add(set, "v.patch_embd.weight.1", OC_DTYPE_F16, 4, V_PATCH, V_PATCH, 3, V_HIDDEN, INIT_WEIGHT, patch_std);
    char n[64];
    for (int il = 0; il < set->vision_layers; il++) {
#define NM(suffix) (snprintf(n, sizeof n, "v.blk.%d." suffix, il), n)
        NORM(NM("ln1.weight"), V_HIDDEN);
        BIAS(NM("ln1.bias"), V_HIDDEN);
        MAT(NM("attn_q.weight"), V_HIDDEN, V_HIDDEN);
        BIAS(NM("attn_q.bias"), V_HIDDEN);
        MAT(NM("attn_k.weight"), V_HIDDEN, V_HIDDEN);
        BIAS(NM("attn_k.bias"), V_HIDDEN);
        MAT(NM("attn_v.weight"), V_HIDDEN, V_HIDDEN);
        BIAS(NM("attn_v.bias"), V_HIDDEN);
        MAT(NM("attn_out.weight"), V_HIDDEN, V_HIDDEN);
        BIAS(NM("attn_out.bias"), V_HIDDEN);
        NORM(NM("ln2.weight"), V_HIDDEN);
        BIAS(NM("ln2.bias"), V_HIDDEN);
        MAT(NM("ffn_up.weight"), V_HIDDEN, V_FF);
        BIAS(NM("ffn_up.bias"), V_FF);
        MAT(NM("ffn_down.weight"), V_FF, V_HIDDEN);
        BIAS(NM("ffn_down.bias"), V_HIDDEN);
#undef NM
    }
    NORM("v.post_ln.weight", V_HIDDEN);
    BIAS("v.post_ln.bias", V_HIDDEN);
    MAT("mm.0.weight", V_MERGED, V_MERGED);
    BIAS("mm.0.bias", V_MERGED);
    MAT("mm.2.weight", V_MERGED, T_EMBD);
    BIAS("mm.2.bias", T_EMBD);
    return ok;
}
#undef MAT
#undef NORM
#undef BIAS

/* ---- tokenizer keys ---------------------------------------------------------------------------- */

static int key_is(oc_str s, const char *lit) { return s.len == strlen(lit) && !memcmp(s.ptr, lit, s.len); }

static char *str_dup(oc_str s) {
    char *p = malloc(s.len + 1);
    if (p) {
        memcpy(p, s.ptr, s.len);
        p[s.len] = 0;
    }
    return p;
}

static oc_status copy_array(oc_gguf_writer *w, const oc_gguf *g, int64_t ki, const char *key, oc_error *err) {
    oc_gguf_type et;
    uint64_t n;
    oc_status st = oc_gguf_get_arr(g, key, &et, &n, err);
    if (st) return st;
    oc_str kname = oc_gguf_key_name(g, ki);
    int is_tokens = key_is(kname, "tokenizer.ggml.tokens"), is_types = key_is(kname, "tokenizer.ggml.token_type"),
        is_scores = key_is(kname, "tokenizer.ggml.scores");
    uint64_t n_out = (is_tokens || is_types || is_scores) && n < T_VOCAB ? T_VOCAB : n;
    if (et == OC_GGUF_STRING) {
        char **v = calloc(n_out ? n_out : 1, sizeof *v);
        st = v ? OC_OK : oc_fail(err, OC_ERR_NOMEM, "synth: out of memory copying %s", key);
        for (uint64_t i = 0; i < n_out && !st; i++) {
            char pad[32];
            snprintf(pad, sizeof pad, "[PAD%llu]", (unsigned long long)i);
            v[i] = i < n ? str_dup(oc_gguf_arr_str(g, ki, i)) : str_dup((oc_str){ pad, strlen(pad) });
            if (!v[i]) st = oc_fail(err, OC_ERR_NOMEM, "synth: out of memory copying %s", key);
        }
        if (!st) st = oc_gguf_writer_add_arr_str(w, key, (const char *const *)v, n_out, err);
        for (uint64_t i = 0; v && i < n_out; i++) free(v[i]);
        free(v);
        return st;
    }
    size_t es = et == OC_GGUF_U8 || et == OC_GGUF_I8 || et == OC_GGUF_BOOL ? 1
                : et == OC_GGUF_U16 || et == OC_GGUF_I16 ? 2
                : et == OC_GGUF_U64 || et == OC_GGUF_I64 || et == OC_GGUF_F64 ? 8 : 4;
    unsigned char *v = calloc(n_out ? n_out : 1, es);
    if (!v) return oc_fail(err, OC_ERR_NOMEM, "synth: out of memory copying %s", key);
    for (uint64_t i = 0; i < n_out; i++) {
        int64_t iv = i < n ? oc_gguf_arr_int(g, ki, i) : (is_types ? OC_TOKEN_TYPE_UNUSED : 0);
        double fv = i < n ? oc_gguf_arr_float(g, ki, i) : 0.0;
        unsigned char *p = v + i * es;
        if (et == OC_GGUF_F32) { float f = (float)fv; memcpy(p, &f, 4); }
        else if (et == OC_GGUF_F64) memcpy(p, &fv, 8);
        else if (es == 1) { uint8_t x = (uint8_t)iv; memcpy(p, &x, 1); }
        else if (es == 2) { uint16_t x = (uint16_t)iv; memcpy(p, &x, 2); }
        else if (es == 4) { uint32_t x = (uint32_t)iv; memcpy(p, &x, 4); }
        else { uint64_t x = (uint64_t)iv; memcpy(p, &x, 8); }
    }
    st = oc_gguf_writer_add_arr(w, key, et, v, n_out, err);
    free(v);
    return st;
}

/* Every "tokenizer.*" key of src (tokenizer.ggml.* and the chat template). */
static oc_status copy_tokenizer(oc_gguf_writer *w, const char *src_path, oc_error *err) {
    oc_gguf *g;
    oc_status st = oc_gguf_open(&g, src_path, NULL, err);
    if (st) return st;
    int n_copied = 0;
    for (int64_t ki = 0; ki < oc_gguf_n_keys(g) && !st; ki++) {
        oc_str name = oc_gguf_key_name(g, ki);
        if (name.len < 10 || memcmp(name.ptr, "tokenizer.", 10) != 0 || name.len > 200) continue;
        char key[256];
        memcpy(key, name.ptr, name.len);
        key[name.len] = 0;
        oc_gguf_type t = oc_gguf_key_type(g, ki);
        n_copied++;
        if (t == OC_GGUF_ARRAY) {
            st = copy_array(w, g, ki, key, err);
        } else if (t == OC_GGUF_STRING) {
            oc_str s;
            char *v = NULL;
            if (!(st = oc_gguf_get_str(g, key, &s, err))) {
                v = str_dup(s);
                st = v ? oc_gguf_writer_add_str(w, key, v, err) : oc_fail(err, OC_ERR_NOMEM, "synth: out of memory");
            }
            free(v);
        } else if (t == OC_GGUF_F32 || t == OC_GGUF_F64) {
            double d;
            if (!(st = oc_gguf_get_float(g, key, &d, err))) {
                float f = (float)d;
                st = t == OC_GGUF_F32 ? oc_gguf_writer_add_scalar(w, key, t, &f, err)
                                      : oc_gguf_writer_add_scalar(w, key, t, &d, err);
            }
        } else {
            int64_t v;
            if (!(st = oc_gguf_get_int(g, key, &v, err))) {
                uint64_t u = (uint64_t)v;
                unsigned char b[8];
                /* little-endian host assumed (quant.h): the low bytes hold the narrow value */
                memcpy(b, &u, 8);
                st = oc_gguf_writer_add_scalar(w, key, t, b, err);
            }
        }
    }
    if (!st && n_copied == 0) st = oc_fail(err, OC_ERR_FORMAT, "%s: no tokenizer.* keys to copy", src_path);
    oc_gguf_close(g);
    return st;
}

/* ---- files ------------------------------------------------------------------------------------- */

static oc_status common_keys(oc_gguf_writer *w, const char *arch, const char *type, int32_t dtype, oc_error *err) {
    oc_status st;
    /* llama.cpp's file_type: 1 = MOSTLY_F16, 2 = MOSTLY_Q4_0, 7 = MOSTLY_Q8_0 */
    if ((st = oc_gguf_writer_add_str(w, "general.architecture", arch, err)) ||
        (st = oc_gguf_writer_add_str(w, "general.type", type, err)) ||
        (st = oc_gguf_writer_add_str(w, "general.name", "ocellus synthetic Qwen2-VL-2B shapes (random weights)", err)) ||
        (st = oc_gguf_writer_add_u32(w, "general.file_type", dtype == OC_DTYPE_Q8_0 ? 7 : dtype == OC_DTYPE_Q4_0 ? 2 : 1, err)) ||
        (st = oc_gguf_writer_add_u32(w, "general.quantization_version", 2, err)))
        return st;
    return OC_OK;
}

static oc_status text_keys(oc_gguf_writer *w, int32_t dtype, const char *tok_path, int n_layers, oc_error *err) {
    static const int32_t sections[4] = { 16, 24, 24, 0 };
    oc_status st;
    if ((st = common_keys(w, "qwen2vl", "model", dtype, err)) ||
        (st = oc_gguf_writer_add_u32(w, "qwen2vl.context_length", 32768, err)) ||
        (st = oc_gguf_writer_add_u32(w, "qwen2vl.embedding_length", T_EMBD, err)) ||
        (st = oc_gguf_writer_add_u32(w, "qwen2vl.block_count", (uint32_t)n_layers, err)) ||
        (st = oc_gguf_writer_add_u32(w, "qwen2vl.feed_forward_length", T_FF, err)) ||
        (st = oc_gguf_writer_add_u32(w, "qwen2vl.attention.head_count", T_HEADS, err)) ||
        (st = oc_gguf_writer_add_u32(w, "qwen2vl.attention.head_count_kv", T_HEADS_KV, err)) ||
        (st = oc_gguf_writer_add_f32(w, "qwen2vl.rope.freq_base", 1000000.0f, err)) ||
        (st = oc_gguf_writer_add_f32(w, "qwen2vl.attention.layer_norm_rms_epsilon", 1e-6f, err)) ||
        (st = oc_gguf_writer_add_arr(w, "qwen2vl.rope.dimension_sections", OC_GGUF_I32, sections, 4, err)))
        return st;
    return copy_tokenizer(w, tok_path, err);
}

static oc_status vision_keys(oc_gguf_writer *w, int32_t dtype, int n_layers, oc_error *err) {
    static const float mean[3] = { 0.48145466f, 0.4578275f, 0.40821073f };
    static const float std[3] = { 0.26862954f, 0.26130258f, 0.27577711f };
    oc_status st;
    if ((st = common_keys(w, "clip", "mmproj", dtype, err)) ||
        (st = oc_gguf_writer_add_bool(w, "clip.has_vision_encoder", 1, err)) ||
        (st = oc_gguf_writer_add_str(w, "clip.projector_type", "qwen2vl_merger", err)) ||
        (st = oc_gguf_writer_add_u32(w, "clip.vision.image_size", 560, err)) ||
        (st = oc_gguf_writer_add_u32(w, "clip.vision.patch_size", V_PATCH, err)) ||
        (st = oc_gguf_writer_add_u32(w, "clip.vision.embedding_length", V_HIDDEN, err)) ||
        /* 1536, not 5120: current converters copy the merger's output width here (docs/formats.md §2b) */
        (st = oc_gguf_writer_add_u32(w, "clip.vision.feed_forward_length", T_EMBD, err)) ||
        (st = oc_gguf_writer_add_u32(w, "clip.vision.block_count", (uint32_t)n_layers, err)) ||
        (st = oc_gguf_writer_add_u32(w, "clip.vision.attention.head_count", V_HEADS, err)) ||
        (st = oc_gguf_writer_add_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-6f, err)) ||
        (st = oc_gguf_writer_add_u32(w, "clip.vision.projection_dim", T_EMBD, err)) ||
        (st = oc_gguf_writer_add_arr(w, "clip.vision.image_mean", OC_GGUF_F32, mean, 3, err)) ||
        (st = oc_gguf_writer_add_arr(w, "clip.vision.image_std", OC_GGUF_F32, std, 3, err)))
        return st;
    return OC_OK;
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Writes path (through path.tmp, renamed at the end, so an interrupted run leaves no file that a
 * later run would take as complete). */
static int write_model(const char *path, int vision, int32_t dtype, const char *tok_path, uint64_t seed, int n_layers) {
    if (file_exists(path)) {
        printf("%s exists: kept\n", path);
        return 0;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    synth_set set;
    memset(&set, 0, sizeof set);
    set.seed = seed + (uint64_t)vision;
    set.row = malloc(MAX_ROW * sizeof(float));
    set.text_layers = n_layers ? n_layers : T_LAYERS;
    set.vision_layers = n_layers ? n_layers : V_LAYERS;
    oc_gguf_writer *w = NULL;
    oc_error err;
    oc_status st = OC_OK;
    int ok = set.row && (vision ? vision_tensors(&set, dtype) : text_tensors(&set, dtype));
    if (!ok) st = oc_fail(&err, OC_ERR_NOMEM, "out of memory");
    if (!st) st = oc_gguf_writer_open(&w, NULL, &err);
    if (!st) st = vision ? vision_keys(w, dtype, set.vision_layers, &err) : text_keys(w, dtype, tok_path, set.text_layers, &err);
    uint64_t n_bytes = 0;
    for (size_t i = 0; i < set.n && !st; i++) {
        synth_tensor *t = &set.t[i];
        st = oc_gguf_writer_add_tensor_fn(w, t->name, t->dtype, t->n_dims, t->ne, fill_rows, t, &err);
        n_bytes += oc_dtype_row_bytes(t->dtype, (uint64_t)t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
    }
    if (!st) {
        printf("writing %s (%zu tensors, %.2f GB) ...\n", path, set.n, (double)n_bytes / 1e9);
        fflush(stdout);
        st = oc_gguf_writer_write(w, tmp, &err);
    }
    if (!st && rename(tmp, path) != 0) st = oc_fail(&err, OC_ERR_IO, "cannot rename %s to %s", tmp, path);
    oc_gguf_writer_close(w);
    free(set.t);
    free(set.row);
    if (st) {
        fprintf(stderr, "ocellus bench vlm --synth: %s\n", err.message);
        return 1;
    }
    return 0;
}

int synth_qwen2vl(const char *dir, const char *type, const char *tok_path, uint64_t seed, int n_layers) {
    int32_t dtype;
    if (!strcmp(type, "f16")) dtype = OC_DTYPE_F16;
    else if (!strcmp(type, "q8_0")) dtype = OC_DTYPE_Q8_0;
    else if (!strcmp(type, "q4_0")) dtype = OC_DTYPE_Q4_0;
    else {
        fprintf(stderr, "ocellus bench vlm: --type must be f16, q8_0 or q4_0, not '%s'\n", type);
        return 2;
    }
    if (!file_exists(dir) && mkdir(dir, 0777) != 0) {
        fprintf(stderr, "ocellus bench vlm: cannot create directory %s\n", dir);
        return 1;
    }
    char text[4096], mmproj[4096];
    char layers[16] = "";
    if (n_layers) snprintf(layers, sizeof layers, "-%dl", n_layers);
    snprintf(text, sizeof text, "%s/qwen2vl-2b-%s%s.gguf", dir, type, layers);
    snprintf(mmproj, sizeof mmproj, "%s/mmproj-qwen2vl-2b-%s%s.gguf", dir, type, layers);
    int rc = write_model(text, 0, dtype, tok_path, seed, n_layers);
    if (!rc) rc = write_model(mmproj, 1, dtype, tok_path, seed, n_layers);
    return rc;
}
