/* vision_weights.h: the loaded vision encoder's weights, shared by the loader (vision_model.c) and the
 * forward pass (vision_encoder.c) only. Every oc_weight / float pointer points into the GGUF mapping except
 * the patch embedding, which the loader repacks into one [hidden][3*2*p*p] matrix in HF
 * pixel_values order (C, T, kh, kw) so the embedding is a single GEMM. */
#ifndef OC_VISION_WEIGHTS_H
#define OC_VISION_WEIGHTS_H

#include "kernels/matmul.h"
#include "model/vision_model.h"

typedef struct oc_vision_layer {
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;   /* biases NULL for RMSNorm (2.5-VL) */
    oc_weight q, k, v, o;                         /* attn_q/k/v/out: [hidden] -> [hidden] */
    const float *q_b, *k_b, *v_b, *o_b;
    oc_weight up, gate, down;                     /* 2-VL: up = fc1, down = fc2, no gate */
    const float *up_b, *gate_b, *down_b;
} oc_vision_layer;

struct oc_vision_model {
    oc_vision_hparams hp;
    oc_allocator alloc;
    int ffn_swapped;                              /* legacy file: fc1/fc2 stored as down/up */
    oc_weight patch;                              /* [hidden] rows of patch_dim */
    void *patch_data;                             /* owned */
    size_t patch_data_bytes;
    oc_vision_layer *layers;                      /* [n_layers], owned */
    const float *post_ln_w, *post_ln_b;           /* merger ln_q; bias NULL for RMSNorm */
    oc_weight mm0, mm2;                           /* merger mlp.0 [4h]->[4h], mlp.2 [4h]->[proj] */
    const float *mm0_b, *mm2_b;
};

/* 3 * temporal_patch_size * patch_size^2: the length of one pixel_values row. */
static inline int32_t oc_vision_patch_dim(const oc_vision_hparams *hp) {
    return 3 * hp->temporal_patch_size * hp->patch_size * hp->patch_size;
}

#endif
