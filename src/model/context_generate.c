/* context_generate.c: the answer, one decode step per token: sample, stream the text, feed the
 * token back, until a stop token, the limit, or the caller stops it. */
#include "model/context_state.h"

#include <string.h>

static int is_stop(const oc_model *m, int32_t id) {
    return id == m->stop_ids[0] || id == m->stop_ids[1] || id == m->stop_ids[2];
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
    for (int32_t g = 0; g < r->max_new_tokens && !stop; g++) {
        if (is_stop(m, tok)) break;
        size_t n_out = 0;
        if ((st = oc_tok_decoder_push(&dec, m->tok, tok, piece, sizeof piece, &n_out, err))) break;
        c->stats.n_generated++;
        if (n_out && r->on_text && r->on_text(r->user, piece, n_out)) stop = 1;
        if (g + 1 == r->max_new_tokens || stop) break;
        oc_text_batch b;
        memset(&b, 0, sizeof b);
        int32_t pos = next_pos + g;
        b.n_tokens = 1;
        b.ids = &tok;
        b.pos_t = b.pos_h = b.pos_w = &pos;
        b.plan = c->plan ? &c->plan->stacks[OC_PLAN_DECODER] : NULL;
        b.logits = c->logits;
        oc_ctx_observe_batch(c, &b);
        if ((st = oc_text_forward(c->text, &b, as, err))) break;
        tok = oc_sampler_next(&c->sampler, c->logits, V);
    }
    char tail[4];
    size_t n_tail = oc_tok_decoder_flush(&dec, tail);
    if (n_tail && r->on_text && !stop) r->on_text(r->user, tail, n_tail);
    c->stats.decode_ms = oc_ctx_ms_since(t_decode);
    return st;
}
