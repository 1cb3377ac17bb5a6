/* vision_model.c: mmproj ("clip") GGUF -> oc_vision_model (keys and tensor names:
 * docs/formats.md §2b, after llama.cpp tools/mtmd/clip.cpp and convert_hf_to_gguf.py
 * Qwen2VLVisionModel). Widths come from tensor shapes, never from clip.vision.feed_forward_length
 * (bogus in current Qwen2-VL files, 0 in legacy ones); legacy files that stored fc1/fc2 as
 * ffn_down/ffn_up are recognised by shape as clip.cpp does; v.position_embd.weight is ignored.
 * The two Conv2d patch kernels (temporal slices 0 and 1 of HF's Conv3d) are repacked into one
 * [hidden][C*T*p*p] matrix in pixel_values order, keeping the file's dtype (exact). */
#include "model/vision_weights.h"
#include "model/weights.h"

#include <stdio.h>
#include <string.h>

#include "core/dtype.h"
#include "core/f16.h"

#define MAX_LAYERS 4096
#define MAX_DIM (1 << 20)

typedef struct loader {
    const oc_gguf *g;
    const char *src;
    oc_error *err;
} loader;

/* ---- keys --------------------------------------------------------------------------------------- */

static oc_status key_int(loader *L, const char *key, int required, int64_t def, int64_t lo, int64_t hi,
                         int32_t *out) {
    int64_t v = def;
    oc_status s = oc_gguf_get_int(L->g, key, &v, NULL);
    if (s == OC_ERR_NOT_FOUND && !required) v = def;
    else if (s == OC_ERR_NOT_FOUND) return oc_fail(L->err, OC_ERR_NOT_FOUND, "%s: missing key '%s'", L->src, key);
    else if (s) return oc_fail(L->err, OC_ERR_TYPE, "%s: key '%s' is not an integer", L->src, key);
    if (v < lo || v > hi)
        return oc_fail(L->err, OC_ERR_FORMAT, "%s: key '%s' is %lld, expected %lld..%lld", L->src, key,
                       (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return OC_OK;
}

static oc_status key_f32_array3(loader *L, const char *key, const float *def, float *out) {
    oc_gguf_type et;
    uint64_t n;
    oc_status s = oc_gguf_get_arr(L->g, key, &et, &n, NULL);
    if (s == OC_ERR_NOT_FOUND) {
        memcpy(out, def, 3 * sizeof(float));
        return OC_OK;
    }
    if (s || (et != OC_GGUF_F32 && et != OC_GGUF_F64) || n != 3)
        return oc_fail(L->err, OC_ERR_FORMAT, "%s: key '%s' must be an array of 3 floats", L->src, key);
    int64_t ki = oc_gguf_find_key(L->g, key);
    for (uint64_t i = 0; i < 3; i++) out[i] = (float)oc_gguf_arr_float(L->g, ki, i);
    return OC_OK;
}

static int str_is(oc_str s, const char *lit) { return s.len == strlen(lit) && memcmp(s.ptr, lit, s.len) == 0; }

static oc_status read_hparams(loader *L, oc_vision_hparams *hp) {
    oc_str s;
    oc_status st;
    if (oc_gguf_get_str(L->g, "general.architecture", &s, NULL) == OC_OK && !str_is(s, "clip"))
        return oc_fail(L->err, OC_ERR_FORMAT, "%s: general.architecture is '%.*s', expected 'clip' (an mmproj file)",
                       L->src, (int)OC_MIN(s.len, 40), s.ptr);
    int has_vision = 1;
    if (oc_gguf_get_bool(L->g, "clip.has_vision_encoder", &has_vision, NULL) == OC_OK && !has_vision)
        return oc_fail(L->err, OC_ERR_UNSUPPORTED, "%s: clip.has_vision_encoder is false", L->src);
    st = oc_gguf_get_str(L->g, "clip.projector_type", &s, NULL);
    if (st == OC_ERR_NOT_FOUND) return oc_fail(L->err, OC_ERR_NOT_FOUND, "%s: missing key 'clip.projector_type'", L->src);
    if (st) return oc_fail(L->err, OC_ERR_TYPE, "%s: key 'clip.projector_type' is not a string", L->src);
    if (str_is(s, "qwen2vl_merger")) hp->kind = OC_VISION_QWEN2VL;
    else if (str_is(s, "qwen2.5vl_merger") || str_is(s, "qwen2.5o")) hp->kind = OC_VISION_QWEN25VL;
    else
        return oc_fail(L->err, OC_ERR_UNSUPPORTED,
                       "%s: clip.projector_type '%.*s' is not supported (expected qwen2vl_merger or qwen2.5vl_merger)",
                       L->src, (int)OC_MIN(s.len, 40), s.ptr);
    if ((st = key_int(L, "clip.vision.block_count", 1, 0, 1, MAX_LAYERS, &hp->n_layers)) ||
        (st = key_int(L, "clip.vision.embedding_length", 1, 0, 1, MAX_DIM, &hp->hidden)) ||
        (st = key_int(L, "clip.vision.attention.head_count", 1, 0, 1, MAX_DIM, &hp->n_heads)) ||
        (st = key_int(L, "clip.vision.patch_size", 1, 0, 1, 64, &hp->patch_size)) ||
        (st = key_int(L, "clip.vision.spatial_merge_size", 0, 2, 1, 8, &hp->merge_size)))
        return st;
    hp->temporal_patch_size = 2;   /* two patch kernels: v.patch_embd.weight and .weight.1 */
    if (hp->hidden % hp->n_heads)
        return oc_fail(L->err, OC_ERR_FORMAT, "%s: embedding_length %d is not a multiple of head_count %d", L->src,
                       (int)hp->hidden, (int)hp->n_heads);
    hp->head_dim = hp->hidden / hp->n_heads;
    /* HF VisionRotaryEmbedding(head_dim / 2): head_dim / 4 frequencies each for rows and columns */
    if (hp->head_dim % 4)
        return oc_fail(L->err, OC_ERR_UNSUPPORTED, "%s: head_dim %d is not a multiple of 4 (2-D rotary embedding)",
                       L->src, (int)hp->head_dim);
    double eps = 1e-6;
    st = oc_gguf_get_float(L->g, "clip.vision.attention.layer_norm_epsilon", &eps, NULL);
    if (st && st != OC_ERR_NOT_FOUND)
        return oc_fail(L->err, OC_ERR_TYPE, "%s: key 'clip.vision.attention.layer_norm_epsilon' is not a float", L->src);
    if (!(eps >= 0.0 && eps < 1.0))
        return oc_fail(L->err, OC_ERR_FORMAT, "%s: layer_norm_epsilon %g is out of range", L->src, eps);
    hp->eps = (float)eps;
    hp->n_wa_pattern = 0;
    hp->window_size_px = 0;
    if (hp->kind == OC_VISION_QWEN25VL) {
        if ((st = key_int(L, "clip.vision.n_wa_pattern", 1, 0, 1, MAX_LAYERS, &hp->n_wa_pattern)) ||
            (st = key_int(L, "clip.vision.window_size", 0, 112, 1, 1 << 16, &hp->window_size_px)))
            return st;
        if (hp->window_size_px / hp->merge_size / hp->patch_size < 1)
            return oc_fail(L->err, OC_ERR_FORMAT, "%s: window_size %d px is smaller than one merged patch (%d px)",
                           L->src, (int)hp->window_size_px, (int)(hp->merge_size * hp->patch_size));
    }
    static const float clip_mean[3] = { 0.48145466f, 0.4578275f, 0.40821073f };
    static const float clip_std[3] = { 0.26862954f, 0.26130258f, 0.27577711f };
    if ((st = key_f32_array3(L, "clip.vision.image_mean", clip_mean, hp->image_mean)) ||
        (st = key_f32_array3(L, "clip.vision.image_std", clip_std, hp->image_std)))
        return st;
    for (int c = 0; c < 3; c++)
        if (!(hp->image_std[c] > 0.0f))
            return oc_fail(L->err, OC_ERR_FORMAT, "%s: clip.vision.image_std[%d] is not positive", L->src, c);
    return OC_OK;
}

/* ---- tensors ------------------------------------------------------------------------------------ */

static oc_status find(loader *L, const char *name, const oc_gguf_tensor **out) {
    *out = oc_gguf_find_tensor(L->g, name);
    if (!*out) return oc_fail(L->err, OC_ERR_NOT_FOUND, "%s: tensor '%s' is missing", L->src, name);
    return OC_OK;
}

static oc_status shape_error(loader *L, const char *name, const oc_gguf_tensor *t, const char *expected) {
    return oc_fail(L->err, OC_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected %s", L->src,
                   name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], expected);
}

/* A 1-D F32 vector of n elements. */
static oc_status vec(loader *L, const char *name, int64_t n, const float **out) {
    const oc_gguf_tensor *t;
    oc_status s = find(L, name, &t);
    if (s) return s;
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1) {
        char e[32];
        snprintf(e, sizeof e, "[%lld]", (long long)n);
        return shape_error(L, name, t, e);
    }
    if (t->dtype != OC_DTYPE_F32)
        return oc_fail(L->err, OC_ERR_TYPE, "%s: tensor '%s' has type %s, expected f32", L->src, name,
                       oc_dtype_name(t->dtype));
    if ((uintptr_t)t->data % sizeof(float))
        return oc_fail(L->err, OC_ERR_FORMAT, "%s: tensor '%s' data is not 4-byte aligned", L->src, name);
    *out = (const float *)t->data;
    return OC_OK;
}

/* A 2-D weight GGUF ne [n_in, n_out]; n_in/n_out < 0 accept any size (read back from *w). Shape,
 * type, block and alignment checks are weights.c's, shared with the text loader; the size cap on
 * each axis is the encoder's own. */
static oc_status mat(loader *L, const char *name, int64_t n_in, int64_t n_out, oc_weight *w) {
    oc_status s = oc_weights_matrix(L->g, L->src, name, n_in >= 0 ? n_in : 0, n_out >= 0 ? n_out : 0, w, L->err);
    if (s) return s;
    if (w->n_in > MAX_DIM * 4 || w->n_out > MAX_DIM * 4)
        return oc_fail(L->err, OC_ERR_FORMAT, "%s: tensor '%s' is [%lld, %lld], above the %d limit per axis", L->src,
                       name, (long long)w->n_in, (long long)w->n_out, MAX_DIM * 4);
    return OC_OK;
}

/* HF Conv3d [hidden, 3, T, p, p] arrives as T Conv2d kernels ne [p, p, 3, hidden]; pixel_values rows
 * are (C, T, p, p), so row o of the packed matrix is, for each channel c and slice t, the p*p
 * values kernel_t[o][c]. */
static oc_status load_patch(loader *L, oc_vision_model *m) {
    const oc_vision_hparams *hp = &m->hp;
    const char *names[2] = { "v.patch_embd.weight", "v.patch_embd.weight.1" };
    const oc_gguf_tensor *t[2];
    int64_t pp = (int64_t)hp->patch_size * hp->patch_size;
    for (int i = 0; i < 2; i++) {
        oc_status s = find(L, names[i], &t[i]);
        if (s) return s;
        if (t[i]->ne[0] != hp->patch_size || t[i]->ne[1] != hp->patch_size || t[i]->ne[2] != 3 ||
            t[i]->ne[3] != hp->hidden) {
            char e[64];
            snprintf(e, sizeof e, "[%d, %d, 3, %d]", (int)hp->patch_size, (int)hp->patch_size, (int)hp->hidden);
            return shape_error(L, names[i], t[i], e);
        }
        if (t[i]->dtype != OC_DTYPE_F32 && t[i]->dtype != OC_DTYPE_F16 && t[i]->dtype != OC_DTYPE_BF16)
            return oc_fail(L->err, OC_ERR_TYPE, "%s: tensor '%s' has type %s, expected f32, f16 or bf16", L->src,
                           names[i], oc_dtype_name(t[i]->dtype));
    }
    int32_t dt = t[0]->dtype == t[1]->dtype ? t[0]->dtype : OC_DTYPE_F32;   /* mixed: widen, still exact */
    size_t es = dt == OC_DTYPE_F32 ? 4 : 2, n_in = (size_t)oc_vision_patch_dim(hp), bytes;
    if (!oc_mul_size(n_in * es, (size_t)hp->hidden, &bytes))
        return oc_fail(L->err, OC_ERR_RANGE, "%s: patch embedding too large", L->src);
    uint8_t *dst = oc_mem_alloc(&m->alloc, bytes);
    if (!dst) return oc_fail(L->err, OC_ERR_NOMEM, "%s: out of memory for the patch embedding (%zu bytes)", L->src, bytes);
    m->patch_data = dst;
    m->patch_data_bytes = bytes;
    for (int64_t o = 0; o < hp->hidden; o++)
        for (int c = 0; c < 3; c++)
            for (int ts = 0; ts < 2; ts++) {
                size_t src_es = t[ts]->dtype == OC_DTYPE_F32 ? 4 : 2;
                const uint8_t *src = (const uint8_t *)t[ts]->data + (size_t)((o * 3 + c) * pp) * src_es;
                uint8_t *d = dst + ((size_t)o * n_in + (size_t)((c * 2 + ts) * pp)) * es;
                if (t[ts]->dtype == dt) {
                    memcpy(d, src, (size_t)pp * es);
                    continue;
                }
                for (int64_t i = 0; i < pp; i++) {   /* widen one kernel to f32 */
                    uint16_t h;
                    memcpy(&h, src + i * 2, 2);
                    float f = t[ts]->dtype == OC_DTYPE_F16 ? oc_f16_to_f32(h) : oc_bf16_to_f32(h);
                    memcpy(d + i * 4, &f, 4);
                }
            }
    m->patch.dtype = dt;
    m->patch.n_in = (int64_t)n_in;
    m->patch.n_out = hp->hidden;
    m->patch.data = dst;
    m->patch.row_bytes = n_in * es;
    return OC_OK;
}

/* fc1 maps hidden -> ffn, fc2 ffn -> hidden. Legacy surgery files swapped the names; decide from the
 * shapes (clip.cpp: ffn_down.ne[0] == hidden), and when ffn == hidden makes shapes ambiguous, from
 * the legacy file's markers (dummy v.position_embd.weight, clip.has_qwen2vl_merger). */
static int detect_swap(loader *L, int64_t hidden) {
    const oc_gguf_tensor *up = oc_gguf_find_tensor(L->g, "v.blk.0.ffn_up.weight");
    const oc_gguf_tensor *down = oc_gguf_find_tensor(L->g, "v.blk.0.ffn_down.weight");
    if (!up || !down) return 0;
    if (down->ne[0] == hidden && up->ne[0] != hidden) return 1;
    if (down->ne[0] == hidden && up->ne[0] == hidden)
        return oc_gguf_find_tensor(L->g, "v.position_embd.weight") != NULL ||
               oc_gguf_find_key(L->g, "clip.has_qwen2vl_merger") >= 0;
    return 0;
}

static oc_status load_layer(loader *L, oc_vision_model *m, int32_t il, int64_t *ffn) {
    const oc_vision_hparams *hp = &m->hp;
    oc_vision_layer *ly = &m->layers[il];
    int64_t d = hp->hidden;
    int rms = hp->kind == OC_VISION_QWEN25VL;
    char n[96];
    oc_status s;
#define NAME(suffix) (snprintf(n, sizeof n, "v.blk.%d.%s", (int)il, suffix), n)
    if ((s = vec(L, NAME("ln1.weight"), d, &ly->ln1_w)) || (s = vec(L, NAME("ln2.weight"), d, &ly->ln2_w))) return s;
    if (!rms && ((s = vec(L, NAME("ln1.bias"), d, &ly->ln1_b)) || (s = vec(L, NAME("ln2.bias"), d, &ly->ln2_b))))
        return s;
    if ((s = mat(L, NAME("attn_q.weight"), d, d, &ly->q)) || (s = vec(L, NAME("attn_q.bias"), d, &ly->q_b)) ||
        (s = mat(L, NAME("attn_k.weight"), d, d, &ly->k)) || (s = vec(L, NAME("attn_k.bias"), d, &ly->k_b)) ||
        (s = mat(L, NAME("attn_v.weight"), d, d, &ly->v)) || (s = vec(L, NAME("attn_v.bias"), d, &ly->v_b)) ||
        (s = mat(L, NAME("attn_out.weight"), d, d, &ly->o)) || (s = vec(L, NAME("attn_out.bias"), d, &ly->o_b)))
        return s;
    const char *fc1 = m->ffn_swapped ? "ffn_down" : "ffn_up", *fc2 = m->ffn_swapped ? "ffn_up" : "ffn_down";
    char w1[32], b1[32], w2[32], b2[32];
    snprintf(w1, sizeof w1, "%s.weight", fc1);
    snprintf(b1, sizeof b1, "%s.bias", fc1);
    snprintf(w2, sizeof w2, "%s.weight", fc2);
    snprintf(b2, sizeof b2, "%s.bias", fc2);
    if ((s = mat(L, NAME(w1), d, *ffn, &ly->up))) return s;
    *ffn = ly->up.n_out;   /* the first layer's fc1 fixes the width for all */
    if ((s = vec(L, NAME(b1), *ffn, &ly->up_b)) || (s = mat(L, NAME(w2), *ffn, d, &ly->down)) ||
        (s = vec(L, NAME(b2), d, &ly->down_b)))
        return s;
    if (rms && ((s = mat(L, NAME("ffn_gate.weight"), d, *ffn, &ly->gate)) ||
                (s = vec(L, NAME("ffn_gate.bias"), *ffn, &ly->gate_b))))
        return s;
#undef NAME
    return OC_OK;
}

oc_status oc_vision_model_load(oc_vision_model **out, const oc_gguf *gguf, const char *source,
                               const oc_allocator *alloc, oc_error *err) {
    if (out) *out = NULL;
    if (!out || !gguf) return oc_fail(err, OC_ERR_INVALID, "vision: NULL argument");
    loader L = { gguf, source ? source : "mmproj", err };
    if (!alloc) alloc = oc_default_allocator();
    oc_vision_hparams hp;
    memset(&hp, 0, sizeof hp);
    oc_status s = read_hparams(&L, &hp);
    if (s) return s;
    oc_vision_model *m = oc_mem_calloc(alloc, sizeof *m);
    if (!m) return oc_fail(err, OC_ERR_NOMEM, "%s: out of memory", L.src);
    m->hp = hp;
    m->alloc = *alloc;
    m->layers = oc_mem_calloc(alloc, (size_t)hp.n_layers * sizeof *m->layers);
    if (!m->layers) {
        oc_vision_model_free(m);
        return oc_fail(err, OC_ERR_NOMEM, "%s: out of memory", L.src);
    }
    m->ffn_swapped = detect_swap(&L, hp.hidden);
    int64_t ffn = -1, d = hp.hidden, md = d * hp.merge_size * hp.merge_size;
    if ((s = load_patch(&L, m))) goto fail;
    for (int32_t il = 0; il < hp.n_layers; il++)
        if ((s = load_layer(&L, m, il, &ffn))) goto fail;
    if ((s = vec(&L, "v.post_ln.weight", d, &m->post_ln_w))) goto fail;
    if (hp.kind == OC_VISION_QWEN2VL && (s = vec(&L, "v.post_ln.bias", d, &m->post_ln_b))) goto fail;
    if ((s = mat(&L, "mm.0.weight", md, md, &m->mm0)) || (s = vec(&L, "mm.0.bias", md, &m->mm0_b)) ||
        (s = mat(&L, "mm.2.weight", md, -1, &m->mm2)) || (s = vec(&L, "mm.2.bias", m->mm2.n_out, &m->mm2_b)))
        goto fail;
    m->hp.ffn = (int32_t)ffn;
    m->hp.proj_dim = (int32_t)m->mm2.n_out;
    *out = m;
    return OC_OK;
fail:
    oc_vision_model_free(m);
    return s;
}

void oc_vision_model_free(oc_vision_model *m) {
    if (!m) return;
    oc_allocator a = m->alloc;
    if (m->patch_data) oc_mem_free(&a, m->patch_data, m->patch_data_bytes);
    if (m->layers) oc_mem_free(&a, m->layers, (size_t)m->hp.n_layers * sizeof *m->layers);
    oc_mem_free(&a, m, sizeof *m);
}

const oc_vision_hparams *oc_vision_model_hparams(const oc_vision_model *m) { return m ? &m->hp : NULL; }
int oc_vision_model_ffn_swapped(const oc_vision_model *m) { return m ? m->ffn_swapped : 0; }
