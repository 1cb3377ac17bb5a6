/* convert_config.c: the checkpoint's JSON files and the hyper-parameters llama.cpp's converter
 * reads from them. llama.cpp reads config.json through transformers' AutoConfig, which fills in the
 * class defaults that save_pretrained leaves out of nested configs (it writes only values that
 * differ from the defaults), so missing keys here take the defaults of Qwen2VL/Qwen2_5_VL
 * Text/VisionConfig (transformers configuration_qwen2_vl.py, configuration_qwen2_5_vl.py).
 * Text keys: text_config over the root (TextModel merges {**root, **text_config}); vision keys:
 * vision_config, renamed as Qwen2VLVisionModel.__init__ does (depth, num_heads, embed_dim). */
#include "tools/convert_internal.h"

#include "port.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

oc_status oc_cv_json_load(oc_cv_model *m, const char *file, int optional, oc_cv_json *f, oc_error *err) {
    f->doc = NULL;
    int n = snprintf(f->path, sizeof f->path, "%s/%s", m->dir, file);
    if (n < 0 || (size_t)n >= sizeof f->path) return oc_fail(err, OC_ERR_RANGE, "convert: path too long: %.200s", m->dir);
    oc_port_mapping map;
    char msg[OC_ERROR_MESSAGE_BYTES];
    int rc = oc_port_map_file(f->path, &map, msg, sizeof msg);
    if (rc != 0) {
        if (optional && rc == ENOENT) return OC_OK;
        return oc_fail(err, OC_ERR_IO, "%s", msg);
    }
    oc_error je = { OC_OK, "" };
    oc_status s = oc_json_parse(&f->doc, map.data, map.n_bytes, NULL, &m->alloc, &je);
    oc_port_unmap_file(&map);
    if (s) return oc_fail(err, s, "%.300s: %s", f->path, je.message);
    if (oc_json_type_of(f->doc, oc_json_root(f->doc)) != OC_JSON_OBJECT) {
        oc_json_free(f->doc);
        f->doc = NULL;
        return oc_fail(err, OC_ERR_FORMAT, "%.300s: the top level is not an object", f->path);
    }
    return OC_OK;
}

void oc_cv_json_free(oc_cv_model *m, oc_cv_json *f) {
    (void)m;
    oc_json_free(f->doc);
    f->doc = NULL;
}

/* ---- typed lookups with defaults ----------------------------------------------------------------- */

/* The member key of obj, treating null as absent. */
static uint32_t member(const oc_json *d, uint32_t obj, const char *key) {
    uint32_t v = oc_json_get(d, obj, key);
    return oc_json_type_of(d, v) == OC_JSON_NULL ? OC_JSON_NONE : v;
}

/* Text keys: text_config first, then the root. */
static uint32_t text_member(const oc_cv_model *m, const char *key) {
    const oc_json *d = m->config.doc;
    uint32_t v = m->text_cfg != OC_JSON_NONE ? member(d, m->text_cfg, key) : OC_JSON_NONE;
    return v != OC_JSON_NONE ? v : member(d, oc_json_root(d), key);
}

static oc_status get_int(const oc_cv_model *m, uint32_t node, const char *key, int64_t def, int64_t *out,
                         oc_error *err) {
    if (node == OC_JSON_NONE) {
        *out = def;
        return OC_OK;
    }
    if (oc_json_i64(m->config.doc, node, out, NULL) != OC_OK || *out <= 0 || *out > INT32_MAX)
        return oc_fail(err, OC_ERR_FORMAT, "%.300s: '%s' is not a positive integer", m->config.path, key);
    return OC_OK;
}

static oc_status get_num(const oc_cv_model *m, uint32_t node, const char *key, double def, double *out,
                         oc_error *err) {
    if (node == OC_JSON_NONE) {
        *out = def;
        return OC_OK;
    }
    if (oc_json_f64(m->config.doc, node, out, NULL) != OC_OK || !isfinite(*out))
        return oc_fail(err, OC_ERR_FORMAT, "%.300s: '%s' is not a number", m->config.path, key);
    return OC_OK;
}

/* ---- config.json ------------------------------------------------------------------------------------ */

static oc_status read_arch(oc_cv_model *m, oc_error *err) {
    const oc_json *d = m->config.doc;
    const uint32_t root = oc_json_root(d);
    uint32_t archs = oc_json_get(d, root, "architectures");
    oc_str arch;
    if (oc_json_type_of(d, archs) != OC_JSON_ARRAY || oc_json_str(d, oc_json_at(d, archs, 0), &arch, NULL) != OC_OK)
        return oc_fail(err, OC_ERR_FORMAT, "%.300s: no \"architectures\" list", m->config.path);
    if (!strcmp(arch.ptr, "Qwen2VLForConditionalGeneration")) m->is_qwen25 = 0;
    else if (!strcmp(arch.ptr, "Qwen2_5_VLForConditionalGeneration")) m->is_qwen25 = 1;
    else
        return oc_fail(err, OC_ERR_UNSUPPORTED, "%.300s: architecture '%.80s' is not supported "
                       "(Qwen2VLForConditionalGeneration, Qwen2_5_VLForConditionalGeneration)", m->config.path, arch.ptr);
    uint32_t mt = member(d, root, "model_type");
    if (mt != OC_JSON_NONE && !oc_json_str_eq(d, mt, m->is_qwen25 ? "qwen2_5_vl" : "qwen2_vl"))
        return oc_fail(err, OC_ERR_FORMAT, "%.300s: model_type does not match architecture '%.80s'", m->config.path,
                       arch.ptr);
    m->text_cfg = member(d, root, "text_config");
    if (m->text_cfg != OC_JSON_NONE && oc_json_type_of(d, m->text_cfg) != OC_JSON_OBJECT)
        return oc_fail(err, OC_ERR_FORMAT, "%.300s: \"text_config\" is not an object", m->config.path);
    m->vision_cfg = member(d, root, "vision_config");
    if (oc_json_type_of(d, m->vision_cfg) != OC_JSON_OBJECT)
        return oc_fail(err, OC_ERR_FORMAT, "%.300s: no \"vision_config\" object", m->config.path);
    return OC_OK;
}

static oc_status read_rope(oc_cv_model *m, oc_error *err) {
    const oc_json *d = m->config.doc;
    oc_cv_text_hp *t = &m->text;
    /* rope_parameters (transformers >= 5) or rope_scaling; a rope_parameters key wins even if null */
    uint32_t rp = oc_json_get(d, m->text_cfg != OC_JSON_NONE ? m->text_cfg : oc_json_root(d), "rope_parameters");
    if (rp == OC_JSON_NONE && m->text_cfg != OC_JSON_NONE) rp = oc_json_get(d, oc_json_root(d), "rope_parameters");
    if (rp == OC_JSON_NONE) rp = text_member(m, "rope_scaling");
    if (oc_json_type_of(d, rp) != OC_JSON_OBJECT) rp = OC_JSON_NONE;
    uint32_t sec = rp != OC_JSON_NONE ? member(d, rp, "mrope_section") : OC_JSON_NONE;
    if (oc_json_type_of(d, sec) != OC_JSON_ARRAY)
        return oc_fail(err, OC_ERR_FORMAT, "%.300s: no rope_scaling.mrope_section list (M-RoPE sections)", m->config.path);
    memset(t->mrope_sections, 0, sizeof t->mrope_sections);
    uint32_t i = 0;
    for (uint32_t e = oc_json_first(d, sec); e != OC_JSON_NONE && i < 4; e = oc_json_next(d, e), i++) {
        int64_t v;
        if (oc_json_i64(d, e, &v, NULL) != OC_OK || v < 0 || v > INT32_MAX)
            return oc_fail(err, OC_ERR_FORMAT, "%.300s: mrope_section holds a non-integer", m->config.path);
        t->mrope_sections[i] = (int32_t)v;
    }
    uint32_t ty = member(d, rp, "rope_type");
    if (ty == OC_JSON_NONE) ty = member(d, rp, "type");
    if (ty != OC_JSON_NONE && member(d, rp, "factor") != OC_JSON_NONE &&
        (oc_json_str_eq(d, ty, "linear") || oc_json_str_eq(d, ty, "yarn")))
        return oc_fail(err, OC_ERR_UNSUPPORTED, "%.300s: RoPE scaling (linear/yarn) is not supported", m->config.path);
    uint32_t th = member(d, rp, "rope_theta");
    if (th == OC_JSON_NONE) th = text_member(m, "rope_theta");
    return get_num(m, th, "rope_theta", 1000000.0, &t->rope_theta, err);
}

static oc_status read_text(oc_cv_model *m, oc_error *err) {
    oc_cv_text_hp *t = &m->text;
    static const struct { const char *key; int64_t def; size_t at; } ints[] = {
        { "vocab_size", 152064, offsetof(oc_cv_text_hp, n_vocab) },
        { "hidden_size", 8192, offsetof(oc_cv_text_hp, n_embd) },
        { "intermediate_size", 29568, offsetof(oc_cv_text_hp, n_ff) },
        { "num_hidden_layers", 80, offsetof(oc_cv_text_hp, n_layer) },
        { "num_attention_heads", 64, offsetof(oc_cv_text_hp, n_head) },
        { "max_position_embeddings", 32768, offsetof(oc_cv_text_hp, n_ctx) },
    };
    oc_status s = OC_OK;
    for (size_t i = 0; i < OC_ARRAY_LEN(ints) && !s; i++)
        s = get_int(m, text_member(m, ints[i].key), ints[i].key, ints[i].def, (int64_t *)((char *)t + ints[i].at), err);
    /* num_key_value_heads: default 8, null means num_attention_heads */
    if (!s) s = get_int(m, text_member(m, "num_key_value_heads"), "num_key_value_heads", 8, &t->n_head_kv, err);
    if (!s && m->text_cfg != OC_JSON_NONE &&
        oc_json_type_of(m->config.doc, oc_json_get(m->config.doc, m->text_cfg, "num_key_value_heads")) == OC_JSON_NULL)
        t->n_head_kv = t->n_head;
    t->head_dim = -1;
    uint32_t hd = text_member(m, "head_dim");
    if (!s && hd != OC_JSON_NONE) s = get_int(m, hd, "head_dim", 0, &t->head_dim, err);
    if (!s) s = get_num(m, text_member(m, "rms_norm_eps"), "rms_norm_eps", 1e-5, &t->rms_eps, err);
    if (!s) s = read_rope(m, err);
    if (s) return s;
    if (t->n_vocab > (1 << 24) || t->n_embd > (1 << 24) || t->n_ff > (1 << 24) || t->n_layer > 4096)
        return oc_fail(err, OC_ERR_FORMAT, "%.300s: implausible text model sizes", m->config.path);
    if ((t->head_dim < 0 && t->n_embd % t->n_head != 0) || t->n_head % t->n_head_kv != 0)
        return oc_fail(err, OC_ERR_FORMAT, "%.300s: hidden_size %lld, %lld heads, %lld kv heads do not divide",
                       m->config.path, (long long)t->n_embd, (long long)t->n_head, (long long)t->n_head_kv);
    return OC_OK;
}

static oc_status read_vision(oc_cv_model *m, oc_error *err) {
    const oc_json *d = m->config.doc;
    const uint32_t vc = m->vision_cfg;
    oc_cv_vision_hp *v = &m->vis;
    const int q25 = m->is_qwen25;
    /* Qwen2-VL: embed_dim is the width, hidden_size the merger output (written as the FFN length) */
    const int embed = !q25 || member(d, vc, "embed_dim") != OC_JSON_NONE;
    int64_t hidden;
    oc_status s = get_int(m, member(d, vc, "hidden_size"), "vision_config.hidden_size", 3584, &hidden, err);
    if (!s) s = get_int(m, member(d, vc, "depth"), "vision_config.depth", 32, &v->n_layer, err);
    if (!s) s = get_int(m, member(d, vc, "num_heads"), "vision_config.num_heads", 16, &v->n_head, err);
    if (!s) s = get_int(m, member(d, vc, "patch_size"), "vision_config.patch_size", 14, &v->patch_size, err);
    if (!s) s = get_int(m, member(d, vc, "image_size"), "vision_config.image_size", 560, &v->image_size, err);
    if (!s) s = get_int(m, member(d, vc, "spatial_merge_size"), "vision_config.spatial_merge_size", 2, &v->merge, err);
    if (!s) s = get_int(m, member(d, vc, "temporal_patch_size"), "vision_config.temporal_patch_size", 2, &v->temporal, err);
    uint32_t ch = member(d, vc, "in_channels");
    if (ch == OC_JSON_NONE) ch = member(d, vc, "in_chans");
    if (!s) s = get_int(m, ch, "vision_config.in_channels", 3, &v->in_channels, err);
    if (s) return s;
    if (embed) {
        s = get_int(m, member(d, vc, "embed_dim"), "vision_config.embed_dim", 1280, &v->n_embd, err);
        v->n_ff_key = hidden;
    } else {
        v->n_embd = hidden;
        s = get_int(m, member(d, vc, "intermediate_size"), "vision_config.intermediate_size", 3420, &v->n_ff_key, err);
    }
    if (s) return s;
    v->n_ff = q25 ? v->n_ff_key : -1;   /* Qwen2-VL: taken from the fc1 tensor */
    v->n_wa_pattern = 0;
    if (q25) {
        s = get_int(m, member(d, vc, "out_hidden_size"), "vision_config.out_hidden_size", 3584, &v->n_out, err);
        if (s) return s;
        uint32_t fa = member(d, vc, "fullatt_block_indexes");
        int64_t idx[64], n_idx = 0;
        if (fa == OC_JSON_NONE) {
            for (int k = 0; k < 4; k++) idx[n_idx++] = 7 + 8 * k;
        } else {
            if (oc_json_type_of(d, fa) != OC_JSON_ARRAY || oc_json_count(d, fa) == 0 || oc_json_count(d, fa) > 64)
                return oc_fail(err, OC_ERR_FORMAT, "%.300s: vision_config.fullatt_block_indexes is not a list of 1..64 integers", m->config.path);
            for (uint32_t e = oc_json_first(d, fa); e != OC_JSON_NONE; e = oc_json_next(d, e))
                if (oc_json_i64(d, e, &idx[n_idx++], NULL) != OC_OK || idx[n_idx - 1] < 0)
                    return oc_fail(err, OC_ERR_FORMAT, "%.300s: vision_config.fullatt_block_indexes holds a non-integer", m->config.path);
        }
        /* n_wa_pattern = first index + 1, and the others must follow at that period */
        v->n_wa_pattern = idx[0] + 1;
        for (int64_t k = 1; k < n_idx; k++)
            if (idx[k] - idx[k - 1] != v->n_wa_pattern)
                return oc_fail(err, OC_ERR_FORMAT, "%.300s: invalid fullatt_block_indexes (not periodic)", m->config.path);
    } else {
        v->n_out = hidden;
    }
    /* small bounds keep every product of these sizes far from overflow */
    if (v->merge > 64 || v->patch_size > 1024 || v->in_channels > 64 || v->n_embd > (1 << 24))
        return oc_fail(err, OC_ERR_FORMAT, "%.300s: implausible vision_config sizes", m->config.path);
    if (v->temporal != 2)
        return oc_fail(err, OC_ERR_UNSUPPORTED, "%.300s: temporal_patch_size %lld (only 2 is supported, as in llama.cpp)",
                       m->config.path, (long long)v->temporal);
    if (v->n_embd % v->n_head != 0)
        return oc_fail(err, OC_ERR_FORMAT, "%.300s: vision width %lld is not a multiple of %lld heads", m->config.path,
                       (long long)v->n_embd, (long long)v->n_head);
    /* the converter reads the epsilon from the root config only (default 1e-6) */
    return get_num(m, member(d, oc_json_root(d), "rms_norm_eps"), "rms_norm_eps", 1e-6, &v->eps, err);
}

static oc_status read_floats(const oc_cv_model *m, const char *key, float *out, uint32_t *n, oc_error *err) {
    const oc_json *d = m->preproc.doc;
    uint32_t a = oc_json_get(d, oc_json_root(d), key);
    if (oc_json_type_of(d, a) != OC_JSON_ARRAY || oc_json_count(d, a) == 0 || oc_json_count(d, a) > OC_CV_MAX_MEAN)
        return oc_fail(err, OC_ERR_FORMAT, "%.300s: \"%s\" is not a list of 1..%d numbers", m->preproc.path, key, OC_CV_MAX_MEAN);
    *n = 0;
    for (uint32_t e = oc_json_first(d, a); e != OC_JSON_NONE; e = oc_json_next(d, e)) {
        double x;
        if (oc_json_f64(d, e, &x, NULL) != OC_OK)
            return oc_fail(err, OC_ERR_FORMAT, "%.300s: \"%s\" holds a non-number", m->preproc.path, key);
        out[(*n)++] = (float)x;
    }
    return OC_OK;
}

oc_status oc_cv_read_hparams(oc_cv_model *m, oc_error *err) {
    oc_status s = read_arch(m, err);
    if (!s) s = read_text(m, err);
    if (!s) s = read_vision(m, err);
    if (!s) s = read_floats(m, "image_mean", m->vis.mean, &m->vis.n_mean, err);
    if (!s) s = read_floats(m, "image_std", m->vis.std, &m->vis.n_std, err);
    if (!s && m->vis.n_out != m->text.n_embd)
        return oc_fail(err, OC_ERR_FORMAT, "%.300s: the vision merger outputs %lld values but the text model is %lld wide",
                       m->config.path, (long long)m->vis.n_out, (long long)m->text.n_embd);
    return s;
}
