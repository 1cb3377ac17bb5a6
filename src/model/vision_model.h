/* vision_model.h: the Qwen2-VL / Qwen2.5-VL vision encoder (HF Qwen2VisionTransformerPretrainedModel /
 * Qwen2_5_VisionTransformerPretrainedModel): an mmproj ("clip") GGUF loader
 * (docs/formats.md §2b) and the forward pass patch embedding -> blocks -> merger, in f32 like HF.
 * The model is read-only after load (share it across threads); each user opens a context that holds
 * all scratch memory, allocated once, so encoding allocates nothing. */
#ifndef OC_VISION_MODEL_H
#define OC_VISION_MODEL_H

#include "attention/attn.h"
#include "backend/backend.h"
#include "core/core.h"
#include "core/isa.h"
#include "plan/plan.h"
#include "core/pool.h"

typedef enum oc_vision_kind { OC_VISION_QWEN2VL, OC_VISION_QWEN25VL } oc_vision_kind;

typedef struct oc_vision_hparams {
    oc_vision_kind kind;
    int32_t n_layers, hidden, n_heads, head_dim, ffn;   /* ffn taken from tensor shapes */
    int32_t patch_size, merge_size, temporal_patch_size; /* 14, 2, 2 */
    int32_t proj_dim;            /* merger output = LLM hidden */
    float eps;
    int32_t n_wa_pattern;        /* 2.5-VL: layer il full attention iff (il+1) % n_wa_pattern == 0 */
    int32_t window_size_px;      /* 2.5-VL: 112 default */
    float image_mean[3], image_std[3];
} oc_vision_hparams;

typedef struct oc_vision_model oc_vision_model;   /* read-only after load: share across threads */

/* gguf must stay open while the model lives (weights point into its mapping). source names the
 * file in messages. Validates every tensor's presence, type (F32/F16/BF16/Q8_0/Q4_0/Q4_K/Q6_K for
 * 2-D, F32 for 1-D) and shape; errors are one line naming file, tensor and problem.
 * [alloc: the layer table and the repacked patch-embedding weight]
 * [errors: OC_ERR_FORMAT, OC_ERR_NOT_FOUND (missing key/tensor), OC_ERR_TYPE, OC_ERR_UNSUPPORTED,
 *  OC_ERR_NOMEM] */
oc_status oc_vision_model_load(oc_vision_model **out, const oc_gguf *gguf, const char *source,
                               const oc_allocator *alloc, oc_error *err);
void oc_vision_model_free(oc_vision_model *m);   /* NULL is a no-op */
const oc_vision_hparams *oc_vision_model_hparams(const oc_vision_model *m);
/* 1 when the file stored fc1/fc2 as ffn_down/ffn_up (legacy qwen2_vl_surgery.py files). */
int oc_vision_model_ffn_swapped(const oc_vision_model *m);

typedef struct oc_vision_ctx oc_vision_ctx;       /* per-user scratch; all memory allocated here once */

/* Bytes oc_vision_ctx_open takes from its allocator for images of up to max_patches patches with
 * a pool of n_threads threads, the most over the ISA tables that run here; 0 on overflow. */
size_t oc_vision_ctx_bytes(const oc_vision_model *m, int32_t max_patches, int n_threads);
/* Exactly what oc_vision_ctx_open_backend takes on spec's backend kind and ISA (pool and device
 * unused): host bytes only (device memory is not counted). */
size_t oc_vision_ctx_bytes_backend(const oc_vision_model *m, int32_t max_patches, const oc_backend_spec *spec,
                                   int n_threads);
/* Opens a backend instance (backend.h) for the context, hands it every weight once and allocates
 * every buffer. spec->pool (borrowed, may be NULL: serial) also runs the host's share of the work.
 * [alloc: yes, once] [errors: OC_ERR_INVALID, OC_ERR_UNSUPPORTED (backend, isa), OC_ERR_RANGE,
 * OC_ERR_NOMEM, OC_ERR_DEVICE] */
oc_status oc_vision_ctx_open_backend(oc_vision_ctx **out, const oc_vision_model *m, int32_t max_patches,
                                     const oc_backend_spec *spec, const oc_allocator *alloc, oc_error *err);
/* The CPU backend: pool borrowed (may be NULL: serial); isa: oc_isa_best() or any that runs here.
 * [alloc: yes, once] [errors: OC_ERR_INVALID, OC_ERR_UNSUPPORTED (isa), OC_ERR_RANGE, OC_ERR_NOMEM] */
oc_status oc_vision_ctx_open(oc_vision_ctx **out, const oc_vision_model *m, int32_t max_patches,
                             oc_pool *pool, oc_isa isa, const oc_allocator *alloc, oc_error *err);
void oc_vision_ctx_close(oc_vision_ctx *ctx);    /* NULL is a no-op */

/* Debug hook (parity tests): called with the residual stream after the patch embedding
 * (layer -1) and after each block (layer 0..n_layers-1): x is [n_tokens][hidden] in processing
 * order, which for Qwen2.5-VL is HF's window order (as HF's hidden states are). NULL disables. */
typedef void (*oc_vision_debug_fn)(void *user, int32_t layer, const float *x, int32_t n_tokens,
                                   int32_t hidden);
void oc_vision_ctx_set_debug(oc_vision_ctx *ctx, oc_vision_debug_fn fn, void *user);
/* Calibration hook: before each layer's attention, q|k|v [3][n_tokens][hidden] (after the rotary
 * embedding, host view) and the attention's segments (windows; one segment for a full-attention
 * layer) as [start, end) pairs. NULL fn: off, nothing is mapped. */
typedef void (*oc_vision_observe_fn)(void *user, int32_t layer, const float *qkv, int32_t n_tokens,
                                     const oc_token_span *segments, int32_t n_segments);
void oc_vision_ctx_set_observer(oc_vision_ctx *ctx, oc_vision_observe_fn fn, void *user);

/* pixels: HF pixel_values of ONE image, [grid_h * grid_w][3 * 2 * 14 * 14] (src/image/image.h's
 * oc_qwen2vl_pixels.data). plan: the vision stack's per-layer heads (may be NULL or cover no layer
 * = dense; A_SHAPE positions are token indices in processing order), checked by the caller
 * (oc_plan_check_fits at context open: shape, and only DENSE and A_SHAPE in the vision stack). out: [grid_h*grid_w/merge^2][proj_dim] in HF's output order (row-major over
 * the merged grid). Allocates nothing. stats may be NULL (else attention FLOPs are added to it).
 * [errors: OC_ERR_INVALID (grid), OC_ERR_RANGE (more than max_patches)] */
oc_status oc_vision_encode(oc_vision_ctx *ctx, const float *pixels, int32_t grid_h, int32_t grid_w,
                           const oc_stack_plan *plan, float *out, oc_attn_stats *stats, oc_error *err);
/* The same, but the merged tokens go to rows dst_row.. of dst (rows of proj_dim floats), a buffer
 * of another backend instance on this context's device (the text context's image store,
 * oc_text_ctx_image_store): on a device nothing comes back to the host. [alloc: no] [errors: as
 * oc_vision_encode; OC_ERR_INVALID when the rows do not fit in dst] */
oc_status oc_vision_encode_to(oc_vision_ctx *ctx, const float *pixels, int32_t grid_h, int32_t grid_w,
                              const oc_stack_plan *plan, oc_bt *dst, int64_t dst_row, oc_attn_stats *stats,
                              oc_error *err);

/* ---- Qwen2.5-VL window order (vision_window.c; HF Qwen2_5_VisionTransformerPretrainedModel.
 * get_window_index) ---------------------------------------------------------------------------- */
/* The merged grid (merged_h x merged_w tokens, row-major) cut into windows of win x win merged
 * tokens (partial at the right and bottom edges), windows row-major, tokens row-major inside.
 * order[k] = merged-token index at processing position k (merged_h * merged_w entries);
 * windows[w] = [start, end) of window w in processing positions, counted in PATCHES
 * (merged tokens * unit). Returns the number of windows (<= merged_h * merged_w). */
int32_t oc_vision_window_order(int32_t merged_h, int32_t merged_w, int32_t win, int32_t unit,
                               int32_t *order, oc_token_span *windows);

#endif
