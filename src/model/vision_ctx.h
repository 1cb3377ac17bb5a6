/* vision_ctx.h: what an oc_vision_ctx holds, shared by vision_ctx.c (sizing, opening: weight
 * handles and buffers on the backend) and vision_encoder.c (the forward pass) only. Activations live in
 * backend buffers; the host keeps what it computes itself (window order, rotary tables) and the
 * window list the attention mask reads. n = max_patches, nm = n / merge^2 + 1 merged tokens. */
#ifndef OC_VISION_CTX_H
#define OC_VISION_CTX_H

#include "backend/backend.h"
#include "model/vision_weights.h"

/* One block's weights as the backend holds them (vision_weights.h oc_vision_layer). */
typedef struct oc_vision_layer_bt {
    oc_bt ln1_w, ln1_b, ln2_w, ln2_b;            /* biases absent for RMSNorm (2.5-VL) */
    oc_bw q, k, v, o, up, gate, down;            /* gate absent for 2-VL */
    oc_bt q_b, k_b, v_b, o_b, up_b, gate_b, down_b;
} oc_vision_layer_bt;

struct oc_vision_ctx {
    const oc_vision_model *m;
    oc_allocator alloc;
    oc_pool *pool;                /* borrowed: host work (rotary tables) and the CPU backend */
    oc_backend *be;
    int32_t max_patches;
    /* weights */
    oc_vision_layer_bt *layers;   /* [n_layers], in the host block */
    oc_bw patch, mm0, mm2;
    oc_bt post_ln_w, post_ln_b, mm0_b, mm2_b;
    /* backend buffers */
    oc_bt x;                      /* [n][hidden] residual stream */
    oc_bt h;                      /* [n][hidden] normed input / attention output / fc2 output;
                                     also [nm][proj] merger output (2.5-VL) */
    oc_bt w;                      /* q|k|v [3][n][hidden]; or MLP [n][ffn] (x2 for 2.5-VL) */
    oc_bt cos_t, sin_t;           /* OC_BT_HOST on cos_h / sin_h */
    oc_bt order, inv_order;       /* OC_BT_HOST on order_h / inv_h (int32) */
    oc_bt pixels;                 /* OC_BT_HOST on the caller's pixels [n][patch_dim] */
    oc_bt out;                    /* OC_BT_HOST on the caller's output [nm][proj] */
    /* host block */
    void *host;
    size_t host_bytes;
    float *cos_h, *sin_h;         /* [n][head_dim / 2] rotary tables, processing order */
    float *inv_freq;              /* [head_dim / 4] */
    int32_t *order_h;             /* [nm] merged-token index per processing position */
    int32_t *inv_h;               /* [nm] processing position per merged-token index */
    oc_token_span *windows;       /* [nm] */
    oc_vision_debug_fn debug_fn;
    void *debug_user;
    oc_vision_observe_fn observe_fn;   /* calibration hook (oc_vision_ctx_set_observer) */
    void *observe_user;
};

#endif
