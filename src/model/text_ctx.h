/* text_ctx.h: what an oc_text_ctx holds, shared by text_ctx.c (sizing, opening: weight handles
 * and buffers on the backend) and text_decoder.c (the forward pass) only. Every activation lives in
 * a backend buffer; the host keeps the M-RoPE tables it computes before uploading them. */
#ifndef OC_TEXT_CTX_H
#define OC_TEXT_CTX_H

#include "model/text_model.h"

/* One layer's weights as the backend holds them (text_model.h oc_text_layer). */
typedef struct oc_text_layer_bt {
    oc_bt attn_norm, ffn_norm, bq, bk, bv;       /* absent biases: n_bytes 0 */
    oc_bw wq, wk, wv, wo, gate, up, down;
} oc_text_layer_bt;

struct oc_text_ctx {
    const oc_text_model *m;
    oc_allocator alloc;
    oc_text_limits lim;
    oc_backend *be;
    oc_backend_kind kind;
    int32_t n_past;
    /* weights */
    oc_text_layer_bt *layers;                    /* [n_layers], in the host block */
    oc_bw token_embd, output;
    int output_tied;                             /* output is token_embd's handle (freed once) */
    oc_bt output_norm, output_bias;
    /* backend buffers, B = max_batch_tokens, C = max_ctx_tokens */
    oc_bt k_cache, v_cache;                      /* f16 [n_layers][C][kv_dim] */
    oc_bt x, xb, q, att;                         /* [B][n_embd] */
    oc_bt k, v;                                  /* [B][kv_dim] */
    oc_bt ff_g, ff_u;                            /* [B][n_ff] */
    oc_bt rope_cos, rope_sin;                    /* OC_BT_HOST on cos_h / sin_h */
    oc_bt ids;                                   /* OC_BT_HOST on the batch's ids: int32 [B] */
    oc_bt logits;                                /* OC_BT_HOST on the batch's logits: [B][n_vocab] */
    /* host block */
    void *host;
    size_t host_bytes;
    float *inv_freq;                             /* [head_dim / 2] */
    float *cos_h, *sin_h;                        /* [B][head_dim / 2] */
};

#endif
