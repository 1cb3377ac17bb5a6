/* text_forward.c: a batch through the language model (text_model.h oc_text_forward): checks it,
 * then either hands a whole prompt to text_prefill.c (plans that evict prefill segment by segment)
 * or runs every layer of text_layer.c over it and the lm head: decode, and prompts of plans that
 * keep the whole cache. */
#include "model/text_ctx.h"

/* A compacted layer's kv heads have rows for n more tokens (kvcache/kv_cache.h "Memory"). */
static oc_status check_room(const oc_text_ctx *c, int32_t n, oc_error *err) {
    const oc_text_hparams *hp = &c->m->hp;
    for (int32_t il = 0; il < c->book.n_compacted; il++) {
        if (!oc_text_compacted(c, il)) continue;
        for (int32_t g = 0; g < hp->n_head_kv; g++) {
            int32_t held = *oc_kv_book_n(&c->book, il, g);
            if (held + n > c->reg.rows[il])
                return oc_fail(err, OC_ERR_RANGE, "KV cache full: decoder layer %d kv head %d holds %d of its %d rows "
                               "(the plan's budget + %d answer tokens)", il, g, held, c->reg.rows[il],
                               c->lim.max_answer_tokens);
        }
    }
    return OC_OK;
}

static oc_status forward(oc_text_ctx *c, const oc_text_batch *b, oc_attn_stats *stats, oc_error *err);

/* The pass, then the attention counts a device deferred (backend.h attn_stats_flush): stats are
 * whole when the call returns. */
oc_status oc_text_forward(oc_text_ctx *c, const oc_text_batch *b, oc_attn_stats *stats, oc_error *err) {
    oc_status st = forward(c, b, stats, err);
    oc_error e2;
    oc_status fs = c->be->ops->attn_stats_flush ? c->be->ops->attn_stats_flush(c->be, st ? &e2 : err) : OC_OK;
    return st ? st : fs;
}

static oc_status forward(oc_text_ctx *c, const oc_text_batch *b, oc_attn_stats *stats, oc_error *err) {
    const oc_text_model *m = c->m;
    const oc_text_hparams *hp = &m->hp;
    int32_t n = b->n_tokens;
    if (n < 1 || !b->pos_t || !b->pos_h || !b->pos_w)
        return oc_fail(err, OC_ERR_INVALID, "text forward: empty batch or missing positions");
    int whole_prompt = c->reg.by_layer && b->prompt_tokens > 0;
    if (whole_prompt && (c->n_past != 0 || n != b->prompt_tokens || b->layer_masks))
        return oc_fail(err, OC_ERR_INVALID, "text forward: this context's plan evicts, so its prompt of %d tokens "
                       "goes in one call from an empty cache (got %d tokens after %d)", b->prompt_tokens, n, c->n_past);
    if (c->reg.by_layer && !whole_prompt && c->book.n_compacted < hp->n_layers)
        return oc_fail(err, OC_ERR_INVALID, "text forward: this context's plan evicts: give the prompt first "
                       "(prompt_tokens)");
    if (n > c->lim.max_batch_tokens && !whole_prompt)
        return oc_fail(err, OC_ERR_RANGE, "text forward: batch of %d tokens exceeds the limit %d", n,
                       c->lim.max_batch_tokens);
    if (n > c->lim.max_ctx_tokens - c->n_past)
        return oc_fail(err, OC_ERR_RANGE, "context full: %d cached + %d new tokens exceed the context "
                       "of %d tokens", c->n_past, n, c->lim.max_ctx_tokens);
    for (int32_t i = 0; i < n; i++) {
        int32_t id = b->ids ? b->ids[i] : -1;
        if (id >= hp->n_vocab)
            return oc_fail(err, OC_ERR_INVALID, "text forward: token id %d is outside the vocabulary "
                           "of %d", id, hp->n_vocab);
        if (id < 0 && !b->embd && !b->embd_in_store)
            return oc_fail(err, OC_ERR_INVALID, "text forward: token %d has no id and no embedding", i);
    }
    oc_status st;
    for (int32_t i = 0; c->tok_visual && i < n; i++) c->tok_visual[c->n_past + i] = (uint8_t)oc_text_visual(b, i);
    if (whole_prompt) return oc_text_prefill_by_layer(c, b, stats, err);
    if ((st = check_room(c, n, err)) || (st = oc_text_tables(c, b, err)) || (st = oc_text_inputs(c, b, 0, err))) return st;
    if ((st = oc_text_layers(c, b, stats, err))) return st;
    if (c->kvp->any_evict) oc_kv_book_append(&c->book, c->n_past, n);
    c->n_past += n;
    if (!b->logits) return OC_OK;
    int32_t first = b->all_logits ? 0 : n - 1;
    return oc_text_head(c, first, n - first, b->logits, err);
}
