/* attn.h: the attention engine (CPU), one entry point for the vision encoder and the decoder.
 *   out[i, h, :] = sum_j softmax_j(scale * q[i, h, :] . k[j, h / (H / H_kv), :]) v[j, h / .., :]
 * over the keys j that the mask keeps for (query i, head h). The mask is
 *   base mask (causal / bidirectional / block-diagonal segments / explicit debug mask)
 *   AND the head's sparse pattern (pattern.h: BlindSight categories from a token layout, A-shape).
 * Query i sits at absolute token position q_offset + i; key j at position j.
 * Work is tiled (query rows x key tiles); tiles a pattern drops are never loaded, tiles it keeps
 * whole pay no mask cost (attn.c explains how). Online softmax in fp32, no n_q x n_kv buffer.
 * A row whose every key is masked gets output 0.
 * Results are bitwise identical for any thread count. No allocation: the caller passes scratch
 * memory of oc_attn_scratch_bytes() bytes.
 *
 * Mask semantics (kept(h, p, j) = base(p, j) AND pattern_h(p, j); tests/test_attn.c restates them)
 *  - DENSE: the base mask alone.
 *  - SINK / INTRA_IMAGE / INTRA_IMAGE_SINK (blindsight.txt Sec. 3.2, App. L Alg. 3): a text query
 *    (or any query when layout is NULL) keeps every key; an image query keeps every text key, plus
 *    for the Sink kinds every sink token of every image (Alg. 3's mask_kv = istext | isimsink has
 *    no image-id test, so the query's own image's sinks count too: with the causal base that is
 *    its own first sinks up to itself, and an image query never ends up with nothing to attend to
 *    when the prompt starts with an image), plus for the Intra kinds its own whole image.
 *    The causal base then cuts everything after the query. Positions at or beyond the layout's
 *    n_tokens are text.
 *  - A_SHAPE (mminference.txt C.2-C.3): key j < n_sink or p - n_local < j <= p, for text and image
 *    queries alike; the window ends at the query under every base mask.
 *  - A query outside every segment (OC_ATTN_SEGMENTS) keeps nothing. */
#ifndef OC_ATTN_H
#define OC_ATTN_H

#include "core/core.h"
#include "core/isa.h"
#include "attention/layout.h"
#include "plan/pattern.h"
#include "core/pool.h"

typedef enum oc_attn_mask_kind {
    OC_ATTN_CAUSAL = 0,      /* query at position p sees keys 0..p */
    OC_ATTN_BIDIRECTIONAL,   /* every query sees every key */
    OC_ATTN_SEGMENTS,        /* block diagonal: a query sees the keys of the segment holding its
                                position (per-image vision attention, Qwen2.5-VL windows); a query
                                in no segment sees nothing (output 0) */
    OC_ATTN_EXPLICIT         /* debug/test path: a byte mask per (head,) query and key; every tile
                                is treated as partial. Combined with the patterns like the others. */
} oc_attn_mask_kind;

typedef struct oc_attn_args {
    int32_t n_q, n_kv;
    int32_t n_head, n_head_kv;   /* n_head % n_head_kv == 0: grouped-query attention */
    int32_t head_dim;            /* any value >= 1 */
    /* Element strides (not bytes). q, out: f32. k, v: kv_dtype (OC_DTYPE_F16 or OC_DTYPE_F32). */
    const float *q;
    int64_t q_stride_token, q_stride_head;
    const void *k, *v;
    int32_t kv_dtype;
    int64_t k_stride_token, k_stride_head, v_stride_token, v_stride_head;
    float *out;
    int64_t out_stride_token, out_stride_head;
    float scale;                 /* usually 1/sqrt(head_dim) */
    oc_attn_mask_kind mask;
    int32_t q_offset;            /* absolute position of query 0 (>= 0) */
    const oc_token_span *segments;   /* OC_ATTN_SEGMENTS: sorted, disjoint, non-empty spans */
    int32_t n_segments;
    /* OC_ATTN_EXPLICIT: mask[h * stride_head + i * stride_q + j] != 0 keeps key j for query i of
     * head h; stride_head 0 shares one mask across heads. */
    const uint8_t *explicit_mask;
    int64_t explicit_stride_q, explicit_stride_head;
    const oc_head_pattern *patterns;   /* [n_head], or NULL: every head dense */
    const oc_token_layout *layout;     /* for the BlindSight patterns; NULL: every token is text */
    oc_isa isa;                        /* kernels to use: oc_isa_best() or any that oc_isa_runs() */
} oc_attn_args;

/* Useful work, counted in FLOPs = 4 * head_dim per kept (query, key) pair per head (QK^T and PV):
 * kept: pairs the mask (base AND pattern) keeps; skipped: pairs the base mask keeps but the
 * pattern drops; executed: pairs actually run through the kernels (kept + masked lanes of
 * partial tiles). oc_attn_run adds to the counters, so one struct can sum a whole forward pass. */
typedef struct oc_attn_stats {
    uint64_t flops_kept, flops_skipped, flops_executed;
} oc_attn_stats;

/* The largest call the scratch must serve. */
typedef struct oc_attn_dims {
    int32_t max_n_q, max_n_kv;
    int32_t n_head, n_head_kv, head_dim;
} oc_attn_dims;

/* Bytes of scratch oc_attn_run needs for calls up to dims with a pool of n_threads threads
 * (0 on overflow or invalid dims). The same number for every ISA. [alloc: no] */
size_t oc_attn_scratch_bytes(const oc_attn_dims *dims, int n_threads);

/* Run attention. scratch: OC_MEM_ALIGN-aligned, at least oc_attn_scratch_bytes(dims of this call,
 * oc_pool_n_threads(pool)) bytes. pool may be NULL (serial). stats may be NULL.
 * [alloc: no] [threads: the pool's] [errors: OC_ERR_INVALID naming the bad argument,
 * OC_ERR_UNSUPPORTED when args->isa is not built or does not run here] */
oc_status oc_attn_run(const oc_attn_args *args, oc_pool *pool, void *scratch, size_t scratch_bytes,
                      oc_attn_stats *stats, oc_error *err);

/* Name of the kernels an ISA would use, or NULL when that ISA's kernels are not built. */
const char *oc_attn_kernels_name(oc_isa isa);

#endif
