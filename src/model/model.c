/* model.c: oc_model_open / close / info: opens the text GGUF (language model + tokenizer) and the
 * optional mmproj GGUF (vision encoder), and checks that the two belong together (the merger's
 * output width is the language model's hidden size). */
#include "model/model.h"
#include "gguf/gguf.h"

#include <stdio.h>
#include <string.h>

static int span_has(oc_str s, const char *needle) {
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= s.len; i++)
        if (memcmp(s.ptr + i, needle, n) == 0) return 1;
    return 0;
}

/* Whether the file's chat template writes "Picture N: " before every image. Qwen2-VL's template
 * does so only when the caller passes add_vision_id; a template that has the label but not that
 * switch (the demo model's) always labels. Detecting a template by substrings is what llama.cpp's
 * llm_chat_detect_template does too: we do not run Jinja. */
static int template_labels_images(const oc_gguf *g) {
    oc_str t;
    oc_error e;
    if (oc_gguf_get_str(g, "tokenizer.chat_template", &t, &e) != OC_OK) return 0;
    return span_has(t, "Picture ") && !span_has(t, "add_vision_id");
}

/* The model's allocator: counts the bytes open takes (oc_model_info.memory_bytes) and passes every
 * call to the user's. After open the count is frozen, so threads sharing the model never write it. */
static void *counting_fn(void *user, void *ptr, size_t old_bytes, size_t new_bytes) {
    oc_model *m = user;
    if (m->counting) m->heap_bytes = m->heap_bytes - old_bytes + new_bytes;
    return m->user_alloc.fn(m->user_alloc.user, ptr, old_bytes, new_bytes);
}

OC_API void oc_model_params_default(oc_model_params *p) { memset(p, 0, sizeof *p); }

static oc_status open_file(oc_gguf **g, const char *path, oc_load_mode load, const oc_allocator *alloc,
                           oc_error *err) {
    return load == OC_LOAD_READ ? oc_gguf_open_read(g, path, alloc, err) : oc_gguf_open(g, path, alloc, err);
}

OC_API oc_status oc_model_open(oc_model **out, const char *text_path, const char *mmproj_path,
                               const oc_allocator *alloc, oc_error *err) {
    oc_model_params p = { text_path, mmproj_path, alloc, OC_LOAD_MAP };
    return oc_model_open_params(out, &p, err);
}

OC_API oc_status oc_model_open_params(oc_model **out, const oc_model_params *p, oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "oc_model_open: out is NULL");
    if (!p || (p->load != OC_LOAD_MAP && p->load != OC_LOAD_READ)) {
        *out = NULL;
        return oc_fail(err, OC_ERR_INVALID, "oc_model_open: params NULL or load mode unknown");
    }
    const char *text_path = p->text_path, *mmproj_path = p->mmproj_path;
    const oc_allocator *alloc = p->alloc;
    *out = NULL;
    if (!text_path || !*text_path) return oc_fail(err, OC_ERR_INVALID, "no model file given");
    oc_model *m = oc_mem_calloc(alloc, sizeof *m);
    if (!m) return oc_fail(err, OC_ERR_NOMEM, "out of memory");
    m->user_alloc = alloc && alloc->fn ? *alloc : *oc_default_allocator();
    m->alloc = (oc_allocator){ counting_fn, m };
    m->heap_bytes = sizeof *m + OC_MEM_ALIGN;
    m->counting = 1;
    oc_status st;
    if ((st = open_file(&m->text_file, text_path, p->load, &m->alloc, err))) goto fail;
    if ((st = oc_text_model_load(&m->text, m->text_file, text_path, &m->alloc, err))) goto fail;
    oc_error e;
    if ((st = oc_tokenizer_open_gguf(&m->tok, m->text_file, &m->alloc, &e))) {
        st = oc_fail(err, st, "%s: %s", text_path, e.message);
        goto fail;
    }
    if ((st = oc_chat_tokens_find(&m->chat, m->tok, &e))) {
        st = oc_fail(err, st, "%s: %s", text_path, e.message);
        goto fail;
    }
    if (oc_tokenizer_n_vocab(m->tok) > m->text->hp.n_vocab) {
        st = oc_fail(err, OC_ERR_FORMAT, "%s: the vocabulary has %d tokens but the embedding only %d rows",
                     text_path, oc_tokenizer_n_vocab(m->tok), m->text->hp.n_vocab);
        goto fail;
    }
    m->image_labels = template_labels_images(m->text_file);
    oc_tokenizer_special sp = oc_tokenizer_special_ids(m->tok);
    m->stop_ids[0] = m->chat.im_end;
    m->stop_ids[1] = m->chat.endoftext;
    m->stop_ids[2] = sp.eos >= 0 ? sp.eos : m->chat.im_end;
    if (mmproj_path && *mmproj_path) {
        if ((st = open_file(&m->vision_file, mmproj_path, p->load, &m->alloc, err))) goto fail;
        if ((st = oc_vision_model_load(&m->vision, m->vision_file, mmproj_path, &m->alloc, err))) goto fail;
        const oc_vision_hparams *vh = oc_vision_model_hparams(m->vision);
        if (vh->proj_dim != m->text->hp.n_embd) {
            st = oc_fail(err, OC_ERR_FORMAT, "%s: the vision encoder produces %d-wide embeddings but the "
                         "language model in %s is %d wide: the files do not belong together",
                         mmproj_path, vh->proj_dim, text_path, m->text->hp.n_embd);
            goto fail;
        }
        snprintf(m->projector, sizeof m->projector, "%s",
                 vh->kind == OC_VISION_QWEN25VL ? "qwen2.5vl_merger" : "qwen2vl_merger");
    }
    m->counting = 0;
    *out = m;
    return OC_OK;
fail:
    oc_model_close(m);
    return st;
}

OC_API void oc_model_close(oc_model *m) {
    if (!m) return;
    oc_allocator a = m->user_alloc;
    oc_vision_model_free(m->vision);
    oc_text_model_free(m->text);
    oc_tokenizer_close(m->tok);
    oc_gguf_close(m->vision_file);
    oc_gguf_close(m->text_file);
    oc_mem_free(&a, m, sizeof *m);
}

OC_API void oc_model_get_info(const oc_model *m, oc_model_info *out) {
    memset(out, 0, sizeof *out);
    const oc_text_hparams *hp = &m->text->hp;
    out->n_vocab = hp->n_vocab;
    out->n_embd = hp->n_embd;
    out->n_layers = hp->n_layers;
    out->n_head = hp->n_head;
    out->n_head_kv = hp->n_head_kv;
    out->head_dim = hp->head_dim;
    out->n_ff = hp->n_ff;
    out->n_ctx_train = hp->n_ctx_train;
    out->memory_bytes = m->heap_bytes + oc_gguf_mapped_bytes(m->text_file) + oc_gguf_mapped_bytes(m->vision_file);
    out->projector = m->projector;
    if (m->vision) {
        const oc_vision_hparams *vh = oc_vision_model_hparams(m->vision);
        out->has_vision = 1;
        out->vision_layers = vh->n_layers;
        out->vision_hidden = vh->hidden;
        out->vision_heads = vh->n_heads;
    }
}
