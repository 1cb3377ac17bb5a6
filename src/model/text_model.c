/* text_model.c: loads the language model of a text GGUF (arch "qwen2vl", docs/formats.md §2a) into
 * oc_text_model: hyperparameters from the qwen2vl.* keys, weight views into the mapping, every
 * 1-D tensor (norms, biases) converted once to f32. Widths come from tensor shapes where the
 * keys could disagree (n_ff from ffn_gate, n_vocab from token_embd). */
#include "model/text_model.h"

#include "model/weights.h"

#include <stdio.h>
#include <string.h>

#define ARCH "qwen2vl"

static oc_status read_hparams(const oc_gguf *g, const char *src, oc_text_hparams *hp, oc_error *err) {
    oc_str arch;
    if (oc_gguf_get_str(g, "general.architecture", &arch, NULL) != OC_OK)
        return oc_fail(err, OC_ERR_FORMAT, "%s: no general.architecture key: not a model GGUF", src);
    if (arch.len != strlen(ARCH) || memcmp(arch.ptr, ARCH, arch.len) != 0)
        return oc_fail(err, OC_ERR_UNSUPPORTED, "%s: architecture '%.*s' is not supported (expected a "
                       "Qwen2-VL / Qwen2.5-VL text model, 'qwen2vl')", src, (int)(arch.len > 64 ? 64 : arch.len),
                       arch.ptr);
    int64_t v;
    oc_status st;
    struct { const char *key; int32_t *dst; int64_t lo, hi; } ints[] = {
        { ARCH ".embedding_length", &hp->n_embd, 1, 65536 },
        { ARCH ".block_count", &hp->n_layers, 1, 1024 },
        { ARCH ".attention.head_count", &hp->n_head, 1, 1024 },
        { ARCH ".attention.head_count_kv", &hp->n_head_kv, 1, 1024 },
        { ARCH ".context_length", &hp->n_ctx_train, 1, INT32_MAX },
    };
    for (size_t i = 0; i < OC_ARRAY_LEN(ints); i++) {
        if ((st = oc_weights_key_int(g, src, ints[i].key, &v, err))) return st;
        if (v < ints[i].lo || v > ints[i].hi)
            return oc_fail(err, OC_ERR_FORMAT, "%s: key '%s' = %lld is out of range [%lld, %lld]", src,
                           ints[i].key, (long long)v, (long long)ints[i].lo, (long long)ints[i].hi);
        *ints[i].dst = (int32_t)v;
    }
    if (hp->n_embd % hp->n_head || hp->n_head % hp->n_head_kv)
        return oc_fail(err, OC_ERR_FORMAT, "%s: %d heads do not divide the hidden size %d or are not a "
                       "multiple of the %d kv heads", src, hp->n_head, hp->n_embd, hp->n_head_kv);
    hp->head_dim = hp->n_embd / hp->n_head;
    if (hp->head_dim % 2)
        return oc_fail(err, OC_ERR_FORMAT, "%s: head size %d is odd (rotary needs pairs)", src, hp->head_dim);
    if ((st = oc_weights_key_float(g, src, ARCH ".rope.freq_base", &hp->rope_base, err))) return st;
    if ((st = oc_weights_key_float(g, src, ARCH ".attention.layer_norm_rms_epsilon", &hp->eps, err)))
        return st;
    if (!(hp->rope_base > 1.0f) || !(hp->eps > 0.0f) || hp->eps > 1.0f)
        return oc_fail(err, OC_ERR_FORMAT, "%s: rope.freq_base %g or rms epsilon %g out of range", src,
                       (double)hp->rope_base, (double)hp->eps);
    /* M-RoPE sections are required (llama.cpp refuses a qwen2vl file without them). */
    oc_gguf_type et;
    uint64_t n;
    const char *key = ARCH ".rope.dimension_sections";
    if (oc_gguf_get_arr(g, key, &et, &n, NULL) != OC_OK || n < 3 || n > 4 ||
        (et != OC_GGUF_I32 && et != OC_GGUF_U32))
        return oc_fail(err, OC_ERR_FORMAT, "%s: key '%s' must be an array of 3 or 4 integers", src, key);
    int64_t ki = oc_gguf_find_key(g, key), sum = 0;
    for (uint64_t i = 0; i < 4; i++) {
        int64_t s = i < n ? oc_gguf_arr_int(g, ki, i) : 0;
        if (s < 0 || s > hp->head_dim / 2)
            return oc_fail(err, OC_ERR_FORMAT, "%s: %s[%llu] = %lld is out of range", src, key,
                           (unsigned long long)i, (long long)s);
        hp->rope_sections[i] = (int32_t)s;
        sum += s;
    }
    if (sum == 0)
        return oc_fail(err, OC_ERR_FORMAT, "%s: %s are all zero", src, key);
    return OC_OK;
}

/* Floats of 1-D tensors per layer (norms, q/k/v biases) and globally (output norm and bias). */
static size_t layer_vec_floats(const oc_text_hparams *hp) {
    size_t kv = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    return 2 * (size_t)hp->n_embd + (size_t)hp->n_embd + 2 * kv;
}

static oc_status load_layer(const oc_gguf *g, const char *src, oc_text_model *m, int32_t il, float **vec,
                            oc_error *err) {
    const oc_text_hparams *hp = &m->hp;
    oc_text_layer *L = &m->layers[il];
    int64_t d = hp->n_embd, kv = (int64_t)hp->n_head_kv * hp->head_dim;
    char name[96];
    oc_status st;
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, il), name)
#define VEC(dst, suffix, n) do { \
        (dst) = *vec; \
        if ((st = oc_weights_vector(g, src, NAME(suffix), (n), *vec, err))) return st; \
        *vec += (n); \
    } while (0)
#define VEC_OPT(dst, suffix, n) do { int present_; \
        if ((st = oc_weights_vector_opt(g, src, NAME(suffix), (n), *vec, &present_, err))) return st; \
        (dst) = present_ ? *vec : NULL; *vec += (n); } while (0)
    VEC(L->attn_norm, "attn_norm.weight", d);
    VEC(L->ffn_norm, "ffn_norm.weight", d);
    VEC_OPT(L->bq, "attn_q.bias", d);
    VEC_OPT(L->bk, "attn_k.bias", kv);
    VEC_OPT(L->bv, "attn_v.bias", kv);
    if ((st = oc_weights_matrix(g, src, NAME("attn_q.weight"), d, d, &L->wq, err))) return st;
    if ((st = oc_weights_matrix(g, src, NAME("attn_k.weight"), d, kv, &L->wk, err))) return st;
    if ((st = oc_weights_matrix(g, src, NAME("attn_v.weight"), d, kv, &L->wv, err))) return st;
    if ((st = oc_weights_matrix(g, src, NAME("attn_output.weight"), d, d, &L->wo, err))) return st;
    if ((st = oc_weights_matrix(g, src, NAME("ffn_gate.weight"), d, hp->n_ff, &L->gate, err))) return st;
    if ((st = oc_weights_matrix(g, src, NAME("ffn_up.weight"), d, hp->n_ff, &L->up, err))) return st;
    if ((st = oc_weights_matrix(g, src, NAME("ffn_down.weight"), hp->n_ff, d, &L->down, err))) return st;
#undef VEC_OPT
#undef VEC
#undef NAME
    return OC_OK;
}

oc_status oc_text_model_load(oc_text_model **out, const oc_gguf *g, const char *source,
                             const oc_allocator *alloc, oc_error *err) {
    *out = NULL;
    const char *src = source ? source : "model";
    oc_text_hparams hp;
    memset(&hp, 0, sizeof hp);
    oc_status st = read_hparams(g, src, &hp, err);
    if (st) return st;
    /* Widths from shapes: n_vocab from the embedding, n_ff from the first gate. */
    const oc_gguf_tensor *te = oc_gguf_find_tensor(g, "token_embd.weight");
    const oc_gguf_tensor *tg = oc_gguf_find_tensor(g, "blk.0.ffn_gate.weight");
    if (!te) return oc_fail(err, OC_ERR_FORMAT, "%s: tensor 'token_embd.weight' is missing", src);
    if (!tg) return oc_fail(err, OC_ERR_FORMAT, "%s: tensor 'blk.0.ffn_gate.weight' is missing", src);
    if (te->ne[1] < 1 || te->ne[1] > INT32_MAX || tg->ne[1] < 1 || tg->ne[1] > INT32_MAX)
        return oc_fail(err, OC_ERR_FORMAT, "%s: token_embd / ffn_gate have bad sizes", src);
    hp.n_vocab = (int32_t)te->ne[1];
    hp.n_ff = (int32_t)tg->ne[1];

    oc_text_model *m = oc_mem_calloc(alloc, sizeof *m);
    if (!m) return oc_fail(err, OC_ERR_NOMEM, "%s: out of memory for the model", src);
    m->alloc = alloc ? *alloc : *oc_default_allocator();
    m->hp = hp;
    m->layers_bytes = sizeof(oc_text_layer) * (size_t)hp.n_layers;
    m->vec_arena_bytes = sizeof(float) * (layer_vec_floats(&hp) * (size_t)hp.n_layers + 2 * (size_t)hp.n_vocab +
                                          (size_t)hp.n_embd);
    m->layers = oc_mem_calloc(&m->alloc, m->layers_bytes);
    m->vec_arena = oc_mem_alloc(&m->alloc, m->vec_arena_bytes);
    if (!m->layers || !m->vec_arena) {
        oc_text_model_free(m);
        return oc_fail(err, OC_ERR_NOMEM, "%s: out of memory for the model", src);
    }
    float *vec = m->vec_arena;
    if ((st = oc_weights_matrix(g, src, "token_embd.weight", hp.n_embd, hp.n_vocab, &m->token_embd, err)))
        goto fail;
    if ((st = oc_weights_matrix_opt(g, src, "output.weight", hp.n_embd, hp.n_vocab, &m->output, err)))
        goto fail;
    if (!m->output.data) m->output = m->token_embd;   /* tied embeddings (Qwen2-VL-2B) */
    m->output_norm = vec;
    if ((st = oc_weights_vector(g, src, "output_norm.weight", hp.n_embd, vec, err))) goto fail;
    vec += hp.n_embd;
    int present;
    if ((st = oc_weights_vector_opt(g, src, "output.bias", hp.n_vocab, vec, &present, err))) goto fail;
    m->output_bias = present ? vec : NULL;
    vec += 2 * (size_t)hp.n_vocab;
    for (int32_t il = 0; il < hp.n_layers; il++)
        if ((st = load_layer(g, src, m, il, &vec, err))) goto fail;
    *out = m;
    return OC_OK;
fail:
    oc_text_model_free(m);
    return st;
}

void oc_text_model_free(oc_text_model *m) {
    if (!m) return;
    oc_allocator a = m->alloc;
    oc_mem_free(&a, m->layers, m->layers_bytes);
    oc_mem_free(&a, m->vec_arena, m->vec_arena_bytes);
    oc_mem_free(&a, m, sizeof *m);
}
