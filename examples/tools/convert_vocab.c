/* convert_vocab.c: the tokenizer keys of the text GGUF as llama.cpp writes them for a byte-level
 * BPE (convert_hf_to_gguf.py _set_vocab_gpt2 / get_vocab_base, gguf-py vocab.py SpecialVocab;
 * docs/formats.md §4), in that order: model "gpt2", pre "qwen2", tokens (config vocab_size
 * entries, gaps "[PAD{i}]"), token_type (INT32), merges, special ids (u32), add_*_token (bool),
 * tokenizer.chat_template. Token types: UNUSED for gaps, CONTROL for added tokens that are special
 * or look special (<|...|>), USER_DEFINED for other added tokens, NORMAL for the rest.
 * Merges: "a b" strings as stored; ["a", "b"] pairs (transformers >= 4.45) are joined with a space
 * after turning spaces inside a part into U+0120. Special ids: tokenizer_config.json "<t>_token"
 * looked up among tokenizer.json's added_tokens, then config.json "<t>_token_id". Chat template:
 * tokenizer_config.json's, else chat_template.jinja, else chat_template.json's. */
#include "tools/convert_internal.h"

#include "port.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define N_SPECIAL 7
#define PAD_BYTES 28   /* "[PAD%lld]" */
static const char *const special_names[N_SPECIAL] = { "bos", "eos", "unk", "sep", "pad", "cls", "mask" };
static const char *const special_keys[N_SPECIAL] = {
    "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.seperator_token_id" /* sic: llama.cpp's spelling */, "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.cls_token_id", "tokenizer.ggml.mask_token_id" };

typedef struct vocab_state {
    oc_cv_model *m;
    oc_cv_json tj;                 /* tokenizer.json */
    uint32_t added;                /* its added_tokens array or NONE */
    const char **text;             /* [n_vocab] */
    int32_t *type;                 /* [n_vocab] */
    uint8_t *is_added;             /* [n_vocab]: 0 no, 1 added, 2 added + special */
    char *pool;                    /* "[PAD{i}]" texts, rewritten user-defined tokens, joined merges */
    size_t pool_bytes, pool_used;
    const char **merges;
    uint32_t n_merges;
} vocab_state;

static int looks_special(const char *s) {
    size_t n = strlen(s);
    if (!strcmp(s, "<pad>") || !strcmp(s, "<mask>") || !strcmp(s, "<2mass>") || !strcmp(s, "[@BOS@]")) return 1;
    if (n >= 3 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>")) return 1;
    /* fullwidth bars U+FF5C (deepseek-coder) */
    if (n >= 5 && !strncmp(s, "<\xef\xbd\x9c", 4) && !strcmp(s + n - 4, "\xef\xbd\x9c>")) return 1;
    if (n >= 8 && !strncmp(s, "<unused", 7) && s[n - 1] == '>') return 1;
    return 0;
}

static char *pool_take(vocab_state *v, size_t n) {
    if (v->pool_bytes - v->pool_used < n) return NULL;
    char *p = v->pool + v->pool_used;
    v->pool_used += n;
    return p;
}

/* Token ids and texts from tokenizer.json model.vocab and added_tokens. */
static oc_status read_tokens(vocab_state *v, oc_error *err) {
    const oc_json *d = v->tj.doc;
    const char *path = v->tj.path;
    const int64_t n_vocab = v->m->text.n_vocab;
    uint32_t model = oc_json_get(d, oc_json_root(d), "model");
    if (oc_json_type_of(d, model) != OC_JSON_OBJECT) return oc_fail(err, OC_ERR_FORMAT, "%.300s: no \"model\" object", path);
    uint32_t ty = oc_json_get(d, model, "type");
    if (ty != OC_JSON_NONE && !oc_json_str_eq(d, ty, "BPE"))
        return oc_fail(err, OC_ERR_UNSUPPORTED, "%.300s: the tokenizer model is not BPE", path);
    uint32_t vocab = oc_json_get(d, model, "vocab");
    if (oc_json_type_of(d, vocab) != OC_JSON_OBJECT) return oc_fail(err, OC_ERR_FORMAT, "%.300s: no model.vocab object", path);
    for (uint32_t k = oc_json_first(d, vocab); k != OC_JSON_NONE; k = oc_json_next(d, k)) {
        oc_str tok;
        int64_t id;
        (void)oc_json_str(d, k, &tok, NULL);
        if (oc_json_i64(d, oc_json_value(d, k), &id, NULL) != OC_OK || id < 0) {
            char shown[64];
            oc_quote(shown, sizeof shown, tok.ptr, tok.len);
            return oc_fail(err, OC_ERR_FORMAT, "%.300s: the id of token '%s' is not a non-negative integer", path, shown);
        }
        if (id >= n_vocab)
            return oc_fail(err, OC_ERR_FORMAT, "%.300s: token id %lld is not below vocab_size %lld of config.json", path,
                           (long long)id, (long long)n_vocab);
        v->text[id] = tok.ptr;
    }
    v->added = oc_json_get(d, oc_json_root(d), "added_tokens");
    if (v->added != OC_JSON_NONE && oc_json_type_of(d, v->added) != OC_JSON_ARRAY)
        return oc_fail(err, OC_ERR_FORMAT, "%.300s: \"added_tokens\" is not a list", path);
    for (uint32_t a = oc_json_first(d, v->added); a != OC_JSON_NONE; a = oc_json_next(d, a)) {
        int64_t id;
        oc_str content;
        int special = 0;
        if (oc_json_i64(d, oc_json_get(d, a, "id"), &id, NULL) != OC_OK || id < 0 ||
            oc_json_str(d, oc_json_get(d, a, "content"), &content, NULL) != OC_OK)
            return oc_fail(err, OC_ERR_FORMAT, "%.300s: an added token lacks an integer \"id\" or a \"content\" string", path);
        if (id >= n_vocab)
            return oc_fail(err, OC_ERR_FORMAT, "%.300s: added token id %lld is not below vocab_size %lld of config.json",
                           path, (long long)id, (long long)n_vocab);
        uint32_t sp = oc_json_get(d, a, "special");
        if (sp != OC_JSON_NONE && oc_json_bool(d, sp, &special, NULL) != OC_OK)
            return oc_fail(err, OC_ERR_FORMAT, "%.300s: \"special\" of added token %lld is not a boolean", path, (long long)id);
        v->text[id] = content.ptr;
        v->is_added[id] = special ? 2 : 1;
    }
    return OC_OK;
}

/* Types, "[PAD{i}]" fill-ins and user-defined rewrites; sizes the pool first. */
static oc_status finish_tokens(vocab_state *v, size_t merge_pool_bytes, oc_error *err) {
    const int64_t n_vocab = v->m->text.n_vocab;
    size_t bytes = merge_pool_bytes;
    for (int64_t i = 0; i < n_vocab; i++)
        bytes += v->text[i] ? (v->is_added[i] == 1 ? strlen(v->text[i]) + 1 : 0) : PAD_BYTES;
    v->pool_bytes = bytes ? bytes : 1;
    v->pool = oc_mem_alloc(&v->m->alloc, v->pool_bytes);
    if (!v->pool) return oc_fail(err, OC_ERR_NOMEM, "convert: cannot allocate %zu bytes for token texts", v->pool_bytes);
    for (int64_t i = 0; i < n_vocab; i++) {
        const char *t = v->text[i];
        if (!t) {
            char *p = pool_take(v, PAD_BYTES);
            snprintf(p, PAD_BYTES, "[PAD%lld]", (long long)i);
            v->text[i] = p;
            v->type[i] = 5;   /* UNUSED */
        } else if (v->is_added[i] == 2 || (v->is_added[i] == 1 && looks_special(t))) {
            v->type[i] = 3;   /* CONTROL */
        } else if (v->is_added[i] == 1) {
            v->type[i] = 4;   /* USER_DEFINED: "pre-normalize user-defined spaces" (U+2581 -> ' ') */
            char *p = pool_take(v, strlen(t) + 1), *q = p;
            for (const char *s = t; *s;) {
                if (!strncmp(s, "\xe2\x96\x81", 3)) { *q++ = ' '; s += 3; }
                else *q++ = *s++;
            }
            *q = 0;
            v->text[i] = p;
        } else {
            v->type[i] = 1;   /* NORMAL */
        }
    }
    return OC_OK;
}

/* Merges: pointers to the stored strings, or joined pairs in the pool. Returns the pool bytes
 * the pairs need through *pair_bytes when merges is NULL (sizing pass). */
static oc_status read_merges(vocab_state *v, int sizing, size_t *pair_bytes, oc_error *err) {
    const oc_json *d = v->tj.doc;
    uint32_t mg = oc_json_get(d, oc_json_get(d, oc_json_root(d), "model"), "merges");
    if (oc_json_type_of(d, mg) != OC_JSON_ARRAY || oc_json_count(d, mg) == 0)
        return oc_fail(err, OC_ERR_FORMAT, "%.300s: no model.merges list", v->tj.path);
    uint32_t i = 0;
    size_t need = 0;
    for (uint32_t e = oc_json_first(d, mg); e != OC_JSON_NONE; e = oc_json_next(d, e), i++) {
        oc_str s, a, b;
        if (oc_json_type_of(d, e) == OC_JSON_STRING) {
            (void)oc_json_str(d, e, &s, NULL);
            if (!sizing) v->merges[i] = s.ptr;
            continue;
        }
        if (oc_json_type_of(d, e) != OC_JSON_ARRAY || oc_json_count(d, e) != 2 ||
            oc_json_str(d, oc_json_at(d, e, 0), &a, NULL) != OC_OK || oc_json_str(d, oc_json_at(d, e, 1), &b, NULL) != OC_OK)
            return oc_fail(err, OC_ERR_FORMAT, "%.300s: merge %u is neither a string nor a pair of strings", v->tj.path, i);
        if (sizing) {
            need += 2 * (a.len + b.len) + 2;   /* a space becomes the 2-byte U+0120 */
            continue;
        }
        char *p = pool_take(v, 2 * (a.len + b.len) + 2), *q = p;
        const oc_str parts[2] = { a, b };
        for (int k = 0; k < 2; k++) {
            if (k) *q++ = ' ';
            for (size_t c = 0; c < parts[k].len; c++) {
                if (parts[k].ptr[c] == ' ') { *q++ = (char)0xC4; *q++ = (char)0xA0; }
                else *q++ = parts[k].ptr[c];
            }
        }
        *q = 0;
        v->merges[i] = p;
    }
    v->n_merges = i;
    if (pair_bytes) *pair_bytes = need;
    return OC_OK;
}

/* A tokenizer_config "<t>_token" value's text: a string, or an object's "content" string. */
static const char *entry_text(const oc_json *d, uint32_t node) {
    oc_str s;
    if (oc_json_type_of(d, node) == OC_JSON_OBJECT) node = oc_json_get(d, node, "content");
    return oc_json_str(d, node, &s, NULL) == OC_OK ? s.ptr : NULL;
}

/* Python truthiness of a JSON value (None, "", {}, [], false, 0 are false). */
static int truthy(const oc_json *d, uint32_t node) {
    switch (oc_json_type_of(d, node)) {
    case OC_JSON_NULL: case OC_JSON_FALSE: return 0;
    case OC_JSON_STRING: { oc_str s; (void)oc_json_str(d, node, &s, NULL); return s.len > 0; }
    case OC_JSON_ARRAY: case OC_JSON_OBJECT: return oc_json_count(d, node) > 0;
    case OC_JSON_NUMBER: { double x = 0; (void)oc_json_f64(d, node, &x, NULL); return x != 0; }
    default: return 1;
    }
}

static oc_status write_special(vocab_state *v, oc_gguf_writer *w, oc_error *err) {
    oc_cv_model *m = v->m;
    int64_t ids[N_SPECIAL];
    int order[N_SPECIAL], n_set = 0;
    const oc_json *tc = m->tok_config.doc;
    const uint32_t tcr = tc ? oc_json_root(tc) : OC_JSON_NONE;
    const int use_tc = tc && oc_json_count(tc, tcr) > 0;   /* "if not tokenizer_config: return" */
    if (use_tc) {
        for (int t = 0; t < N_SPECIAL; t++) {
            char key[32];
            snprintf(key, sizeof key, "%s_token", special_names[t]);
            uint32_t e = oc_json_get(tc, tcr, key);
            /* no bos_token but a cls_token: the cls token is the bos (and sep for eos) */
            if ((t == 0 || t == 1) && !truthy(tc, e)) {
                uint32_t alt = oc_json_get(tc, tcr, t == 0 ? "cls_token" : "sep_token");
                if (truthy(tc, alt)) e = alt;
            }
            const char *text = entry_text(tc, e);
            if (!text) continue;
            const oc_json *d = v->tj.doc;
            for (uint32_t a = oc_json_first(d, v->added); a != OC_JSON_NONE; a = oc_json_next(d, a)) {
                if (oc_json_str_eq(d, oc_json_get(d, a, "content"), text)) {
                    (void)oc_json_i64(d, oc_json_get(d, a, "id"), &ids[t], NULL);
                    order[n_set++] = t;
                    break;
                }
            }
        }
    }
    const oc_json *cd = m->config.doc;
    for (int t = 0; t < N_SPECIAL; t++) {
        int have = 0;
        for (int k = 0; k < n_set; k++) have |= order[k] == t;
        if (have) continue;
        char key[32];
        snprintf(key, sizeof key, "%s_token_id", special_names[t]);
        uint32_t e = oc_json_get(cd, oc_json_root(cd), key);
        if ((e == OC_JSON_NONE || oc_json_type_of(cd, e) == OC_JSON_NULL) && m->text_cfg != OC_JSON_NONE)
            e = oc_json_get(cd, m->text_cfg, key);
        int64_t id;
        if (oc_json_type_of(cd, e) != OC_JSON_NUMBER || oc_json_i64(cd, e, &id, NULL) != OC_OK) continue;
        if (id < 0 || id > UINT32_MAX)
            return oc_fail(err, OC_ERR_FORMAT, "%.300s: invalid value for special token type %s: %lld", m->config.path,
                           special_names[t], (long long)id);
        ids[t] = id;
        order[n_set++] = t;
    }
    for (int k = 0; k < n_set; k++) {
        oc_status s = oc_gguf_writer_add_u32(w, special_keys[order[k]], (uint32_t)ids[order[k]], err);
        if (s) return s;
    }
    /* add_bos/eos/sep_token from tokenizer_config.json; add_bos_token is false when absent (what
     * published Qwen2-VL GGUFs carry; docs/formats.md §4) */
    static const char *const add_keys[3] = { "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
                                             "tokenizer.ggml.add_sep_token" };
    static const char *const add_src[3] = { "add_bos_token", "add_eos_token", "add_sep_token" };
    for (int k = 0; k < 3; k++) {
        int b = 0, have = use_tc && oc_json_bool(tc, oc_json_get(tc, tcr, add_src[k]), &b, NULL) == OC_OK;
        if (!have && k == 0) have = 1, b = 0;
        if (have) {
            oc_status s = oc_gguf_writer_add_bool(w, add_keys[k], b, err);
            if (s) return s;
        }
    }
    return OC_OK;
}

/* tokenizer_config.json's chat_template, else chat_template.jinja, else chat_template.json's. */
static oc_status write_chat_template(vocab_state *v, oc_gguf_writer *w, oc_error *err) {
    oc_cv_model *m = v->m;
    const oc_json *tc = m->tok_config.doc;
    if (!tc || oc_json_count(tc, oc_json_root(tc)) == 0) return OC_OK;
    uint32_t ct = oc_json_get(tc, oc_json_root(tc), "chat_template");
    if (ct != OC_JSON_NONE) {
        if (oc_json_type_of(tc, ct) == OC_JSON_NULL) return OC_OK;
        oc_str s;
        if (oc_json_str(tc, ct, &s, NULL) != OC_OK)
            return oc_fail(err, OC_ERR_UNSUPPORTED, "%.300s: chat_template is not a string (template lists are not supported)",
                           m->tok_config.path);
        return oc_gguf_writer_add_str(w, "tokenizer.chat_template", s.ptr, err);
    }
    char path[OC_CV_PATH_BYTES];
    int n_chars = snprintf(path, sizeof path, "%s/chat_template.jinja", m->dir);
    if (n_chars < 0 || (size_t)n_chars >= sizeof path) return oc_fail(err, OC_ERR_RANGE, "convert: path too long: %.200s", m->dir);
    oc_port_mapping map;
    char msg[OC_ERROR_MESSAGE_BYTES];
    int rc = oc_port_map_file(path, &map, msg, sizeof msg);
    if (rc == 0) {
        oc_status s = OC_OK;
        char *text = oc_mem_alloc(&m->alloc, map.n_bytes + 1);
        if (!text) s = oc_fail(err, OC_ERR_NOMEM, "convert: cannot allocate the chat template");
        else {
            if (map.n_bytes) memcpy(text, map.data, map.n_bytes);
            text[map.n_bytes] = 0;
            if (strlen(text) != map.n_bytes) s = oc_fail(err, OC_ERR_FORMAT, "%.300s: contains a NUL byte", path);
            else s = oc_gguf_writer_add_str(w, "tokenizer.chat_template", text, err);
            oc_mem_free(&m->alloc, text, map.n_bytes + 1);
        }
        oc_port_unmap_file(&map);
        return s;
    }
    if (rc != ENOENT) return oc_fail(err, OC_ERR_IO, "%s", msg);
    oc_cv_json cj;
    oc_status s = oc_cv_json_load(m, "chat_template.json", 1, &cj, err);
    if (s || !cj.doc) return s;
    ct = oc_json_get(cj.doc, oc_json_root(cj.doc), "chat_template");
    oc_str str;
    if (ct != OC_JSON_NONE && oc_json_type_of(cj.doc, ct) != OC_JSON_NULL) {
        if (oc_json_str(cj.doc, ct, &str, NULL) != OC_OK)
            s = oc_fail(err, OC_ERR_UNSUPPORTED, "%.300s: chat_template is not a string", cj.path);
        else
            s = oc_gguf_writer_add_str(w, "tokenizer.chat_template", str.ptr, err);
    }
    oc_cv_json_free(m, &cj);
    return s;
}

static oc_status check_post_processor(const vocab_state *v, oc_error *err) {
    const oc_json *d = v->tj.doc;
    uint32_t pp = oc_json_get(d, oc_json_root(d), "post_processor");
    if (oc_json_type_of(d, pp) != OC_JSON_OBJECT) return OC_OK;
    uint32_t list = oc_json_get(d, pp, "processors");
    uint32_t first = oc_json_type_of(d, list) == OC_JSON_ARRAY ? oc_json_first(d, list) : pp;
    for (uint32_t p = first; p != OC_JSON_NONE; p = list == OC_JSON_NONE ? OC_JSON_NONE : oc_json_next(d, p)) {
        uint32_t t = oc_json_get(d, p, "type");
        /* these make llama.cpp derive add_bos/add_eos/sep from templates: not Qwen, not done here */
        if (oc_json_str_eq(d, t, "TemplateProcessing") || oc_json_str_eq(d, t, "RobertaProcessing"))
            return oc_fail(err, OC_ERR_UNSUPPORTED, "%.300s: post_processor templates are not supported", v->tj.path);
        if (oc_json_type_of(d, list) != OC_JSON_ARRAY) break;
    }
    return OC_OK;
}

oc_status oc_cv_write_vocab(oc_cv_model *m, oc_gguf_writer *w, oc_error *err) {
    vocab_state v;
    memset(&v, 0, sizeof v);
    v.m = m;
    const size_t n = (size_t)m->text.n_vocab;
    oc_status s = oc_cv_json_load(m, "tokenizer.json", 0, &v.tj, err);
    if (s) return s;
    v.text = oc_mem_calloc(&m->alloc, n * sizeof *v.text);
    v.type = oc_mem_calloc(&m->alloc, n * sizeof *v.type);
    v.is_added = oc_mem_calloc(&m->alloc, n);
    uint32_t n_merges_max = 0;
    if (!v.text || !v.type || !v.is_added) s = oc_fail(err, OC_ERR_NOMEM, "convert: cannot allocate the vocabulary");
    if (!s) s = check_post_processor(&v, err);
    if (!s) s = read_tokens(&v, err);
    size_t pair_bytes = 0;
    if (!s) s = read_merges(&v, 1, &pair_bytes, err);
    if (!s) {
        n_merges_max = v.n_merges;
        v.merges = oc_mem_calloc(&m->alloc, (size_t)n_merges_max * sizeof *v.merges);
        if (!v.merges) s = oc_fail(err, OC_ERR_NOMEM, "convert: cannot allocate the merges");
    }
    if (!s) s = finish_tokens(&v, pair_bytes, err);
    if (!s) s = read_merges(&v, 0, NULL, err);
    if (!s) s = oc_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2", err);
    if (!s) s = oc_gguf_writer_add_str(w, "tokenizer.ggml.pre", "qwen2", err);
    if (!s) s = oc_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", v.text, n, err);
    if (!s) s = oc_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", OC_GGUF_I32, v.type, n, err);
    if (!s) s = oc_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", v.merges, v.n_merges, err);
    if (!s) s = write_special(&v, w, err);
    if (!s) s = write_chat_template(&v, w, err);
    oc_mem_free(&m->alloc, v.pool, v.pool_bytes);
    oc_mem_free(&m->alloc, v.merges, (size_t)n_merges_max * sizeof *v.merges);
    oc_mem_free(&m->alloc, v.is_added, n);
    oc_mem_free(&m->alloc, v.type, n * sizeof *v.type);
    oc_mem_free(&m->alloc, v.text, n * sizeof *v.text);
    oc_cv_json_free(m, &v.tj);
    return s;
}
