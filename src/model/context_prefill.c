/* context_prefill.c: the chat prompt through the language model in batches, image rows taken from
 * the embedding store by the prompt's image spans, and the observation hooks (ocellus.h
 * on_attention) that calibration reads. */
#include "model/context_state.h"

#include <string.h>

/* The text forward's observation hook -> the public oc_attn_view. */
static void observe_layer(void *user, int32_t layer, int32_t n_q, int32_t n_kv) {
    oc_context *c = user;
    const oc_text_hparams *hp = &c->m->text->hp;
    oc_attn_view v;
    v.layer = layer;
    v.n_q = n_q;
    v.q_first = n_kv - n_q;
    v.n_kv = n_kv;
    v.n_head = hp->n_head;
    v.n_head_kv = hp->n_head_kv;
    v.head_dim = hp->head_dim;
    v.q = c->obs_q;
    v.k = c->obs_k;
    v.v = c->obs_v;
    v.n_prompt_tokens = c->prompt.n_tokens;
    v.n_images = c->prompt.n_images;
    v.images = c->obs_images;
    v.stack = 0;
    v.n_segments = 0;
    v.segments = NULL;
    c->p.on_attention(c->p.attention_user, &v);
}

/* The vision encoder's observation hook -> the public oc_attn_view (stack 1). */
void oc_ctx_observe_vision(void *user, int32_t layer, const float *qkv, int32_t n, const oc_token_span *seg,
                           int32_t n_seg) {
    oc_context *c = user;
    const oc_vision_hparams *vh = oc_vision_model_hparams(c->m->vision);
    size_t nd = (size_t)n * (size_t)vh->hidden;
    oc_attn_view v;
    memset(&v, 0, sizeof v);
    v.stack = 1;
    v.layer = layer;
    v.n_q = v.n_kv = v.n_prompt_tokens = n;
    v.n_head = v.n_head_kv = vh->n_heads;
    v.head_dim = vh->head_dim;
    v.q = qkv;
    v.k = qkv + nd;
    v.v = qkv + 2 * nd;
    n_seg = OC_MIN(n_seg, c->p.max_image_tokens + 1);   /* windows <= merged tokens of an image */
    for (int32_t i = 0; i < n_seg; i++) {
        c->obs_segments[2 * i] = seg[i].start;
        c->obs_segments[2 * i + 1] = seg[i].end;
    }
    v.n_segments = n_seg;
    v.segments = c->obs_segments;
    c->p.on_attention(c->p.attention_user, &v);
}

/* Wire the observation hook into a batch (nothing when there is no observer). */
void oc_ctx_observe_batch(oc_context *c, oc_text_batch *b) {
    if (!c->p.on_attention) return;
    b->on_attn = observe_layer;
    b->obs_user = c;
    b->obs_q = c->obs_q;
    b->obs_k = c->obs_k;
    b->obs_v = c->obs_v;
}

/* Prefill the prompt in batches; the last batch leaves the last position's logits in c->logits.
 * Image embeddings are taken by the prompt's image spans (oc_prompt_add_image placed them), never
 * by token id: an <|image_pad|> id that text produced (a vocabulary may mark it user-defined, so plain
 * text matches it) must not consume a row; n_image_rows is what encode_image wrote, and a span
 * beyond it is refused rather than read past the store. */
oc_status oc_ctx_prefill(oc_context *c, const oc_token_layout *layout, int32_t n_image_rows, oc_attn_stats *as,
                         oc_error *err) {
    const oc_prompt *pr = &c->prompt;
    size_t d = (size_t)c->m->text->hp.n_embd;
    int32_t B = oc_ctx_batch_of(&c->p), img = 0, img_row0 = 0;
    int32_t n_span_rows = 0;
    for (int32_t k = 0; k < pr->n_images; k++) n_span_rows += pr->images[k].n_tokens;
    if (n_span_rows != n_image_rows)
        return oc_fail(err, OC_ERR_INVALID, "prompt: %d image tokens placed for %d encoded", n_span_rows,
                       n_image_rows);
    const oc_stack_plan *dp = c->plan ? &c->plan->stacks[OC_PLAN_DECODER] : NULL;
    int in_store = oc_text_ctx_image_store(c->text) != NULL;
    /* a plan that evicts: the whole prompt in one call (text_model.h), image rows by index */
    int whole = oc_text_ctx_prefills_by_layer(c->text);
    if (whole) B = pr->n_tokens;
    for (int32_t s = 0; s < pr->n_tokens; s += B) {
        int32_t n = OC_MIN(B, pr->n_tokens - s);
        for (int32_t i = 0; i < n; i++) {
            int32_t p = s + i;
            while (img < pr->n_images && p >= pr->images[img].first_token + pr->images[img].n_tokens)
                img_row0 += pr->images[img++].n_tokens;
            if (img < pr->n_images && p >= pr->images[img].first_token) {
                int32_t row = img_row0 + (p - pr->images[img].first_token);
                if (in_store || whole) {   /* text_model.h: ids[i] < 0 names row -1 - ids[i] */
                    c->batch_ids[i] = -1 - row;
                } else {
                    c->batch_ids[i] = -1;
                    memcpy(c->batch_embd + (size_t)i * d, c->img_embd + (size_t)row * d, d * sizeof(float));
                }
            } else {
                c->batch_ids[i] = pr->ids[p];
            }
        }
        oc_text_batch b;
        memset(&b, 0, sizeof b);
        b.n_tokens = n;
        b.ids = c->batch_ids;
        b.embd = whole && !in_store ? c->img_embd : c->batch_embd;
        b.embd_in_store = in_store;
        b.embd_indexed = whole && !in_store;
        b.pos_t = pr->pos_t + s;
        b.pos_h = pr->pos_h + s;
        b.pos_w = pr->pos_w + s;
        b.plan = dp;
        b.layout = layout;
        b.logits = s + n == pr->n_tokens ? c->logits : NULL;
        b.prompt_tokens = pr->n_tokens;   /* the KV cache evicts as the prompt passes */
        oc_ctx_observe_batch(c, &b);
        oc_status st = oc_text_forward(c->text, &b, as, err);
        if (st) return st;
        oc_ctx_progress(c, "prefill", s + n, pr->n_tokens);
    }
    return OC_OK;
}

oc_status oc_ctx_build_layout(oc_context *c, oc_token_layout **layout, oc_error *err) {
    *layout = NULL;
    if (!c->plan || c->prompt.n_images == 0) return OC_OK;
    oc_token_span spans[1024];
    int32_t n = OC_MIN(c->prompt.n_images, (int32_t)OC_ARRAY_LEN(spans));
    for (int32_t i = 0; i < n; i++) {
        spans[i].start = c->prompt.images[i].first_token;
        spans[i].end = c->prompt.images[i].first_token + c->prompt.images[i].n_tokens;
    }
    oc_arena_reset(&c->work);   /* the images are encoded: the arena holds the layout now */
    return oc_layout_build(layout, c->prompt.n_tokens, spans, n,
                           (float)c->plan->sink_fraction_ppm / (float)OC_PLAN_PPM, &c->work_alloc, err);
}
