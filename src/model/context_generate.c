/* context_generate.c: the answer, one decode step per token: sample, stream the text, feed the
 * token back, until a stop token, the limit, or the caller stops it. */
#include "model/context_state.h"

#include <string.h>

static int is_stop(const oc_model *m, int32_t id) {
    return id == m->stop_ids[0] || id == m->stop_ids[1] || id == m->stop_ids[2];
}

/* One token through the decoder at position pos, its logits into c->logits. */
static oc_status forward_one(oc_context *c, int32_t tok, int32_t pos, oc_attn_stats *as, oc_error *err) {
    oc_text_batch b;
    memset(&b, 0, sizeof b);
    b.n_tokens = 1;
    b.ids = &tok;
    b.pos_t = b.pos_h = b.pos_w = &pos;
    b.plan = c->plan ? &c->plan->stacks[OC_PLAN_DECODER] : NULL;
    b.logits = c->logits;
    oc_ctx_observe_batch(c, &b);
    return oc_text_forward(c->text, &b, as, err);
}

oc_status oc_ctx_generate(oc_context *c, const oc_request *r, uint64_t t_start, oc_attn_stats *as,
                          oc_error *err) {
    const oc_model *m = c->m;
    int32_t V = m->text->hp.n_vocab;
    oc_tok_decoder dec;
    oc_tok_decoder_init(&dec, 0);
    char piece[OC_TOKENIZER_MAX_PIECE_BYTES + 8];
    int32_t tok = oc_sampler_next(&c->sampler, c->logits, V);
    c->stats.ttft_ms = oc_ctx_ms_since(t_start);
    uint64_t t_decode = oc_port_now_ns();
    int32_t next_pos = c->prompt.next_pos;
    oc_status st = OC_OK;
    int stop = 0;
    int32_t fed = 0;   /* tokens fed back: the next one goes at next_pos + fed */
    for (int32_t g = 0; g < r->max_new_tokens && !stop; g++) {
        if (is_stop(m, tok)) break;
        size_t n_out = 0;
        if ((st = oc_tok_decoder_push(&dec, m->tok, tok, piece, sizeof piece, &n_out, err))) break;
        c->stats.n_generated++;
        if (n_out && r->on_text && r->on_text(r->user, piece, n_out)) stop = 1;
        if (g + 1 == r->max_new_tokens || stop) break;
        if ((st = forward_one(c, tok, next_pos + g, as, err))) break;
        fed++;
        tok = oc_sampler_next(&c->sampler, c->logits, V);
    }
    c->has_pending = st == OC_OK;
    c->pending_tok = tok;
    c->pending_pos = next_pos + fed;
    char tail[4];
    size_t n_tail = oc_tok_decoder_flush(&dec, tail);
    if (n_tail && r->on_text && !stop) r->on_text(r->user, tail, n_tail);
    c->stats.decode_ms = oc_ctx_ms_since(t_decode);
    return st;
}

oc_status oc_ctx_decode_more(oc_context *c, int32_t n, oc_attn_stats *as, double *ms, double *attn_ms,
                             oc_error *err) {
    *ms = *attn_ms = 0.0;
    if (n < 0) return oc_fail(err, OC_ERR_INVALID, "decode more: %d steps", n);
    if (n == 0) return OC_OK;
    if (!c->has_pending) return oc_fail(err, OC_ERR_INVALID, "decode more: no answer to continue");
    int32_t V = c->m->text->hp.n_vocab;
    uint64_t t0 = oc_port_now_ns(), a0 = oc_text_ctx_times(c->text).attn_ns;
    oc_status st = OC_OK;
    for (int32_t g = 0; g < n; g++) {
        if ((st = forward_one(c, c->pending_tok, c->pending_pos, as, err))) {
            c->has_pending = 0;   /* the cache may hold part of the step */
            break;
        }
        /* greedy whatever the request sampled with: the steps' tokens only need to be the same
         * for every repetition */
        c->pending_tok = oc_sample_greedy(c->logits, V);
        c->pending_pos++;
    }
    *ms = oc_ctx_ms_since(t0);
    *attn_ms = (double)(oc_text_ctx_times(c->text).attn_ns - a0) / 1e6;
    return st;
}
