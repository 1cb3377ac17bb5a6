/* cl_attn.h: attention on an OpenCL device with the CPU engine's semantics (src/attention/attn.h): base
 * mask causal / bidirectional / segments AND each head's pattern (dense, the BlindSight
 * categories from the token layout, A-shape), grouped-query heads, f16 or f32 K/V with strides,
 * tiles a pattern drops never loaded (opencl/kernels/attn.cl explains the tiling). The explicit debug
 * mask (OC_ATTN_EXPLICIT) is CPU-only. Results depend only on the shapes and the device (the key
 * split of long decode calls follows its compute-unit count), never on timing. */

/* Use: open one context per model with its limits; per forward pass, oc_cl_attn_prepare once
 * with the call geometry (positions, mask, layout: the same for every layer), then
 * oc_cl_attn_run per layer with that layer's buffers and head patterns. prepare uploads a few
 * hundred bytes (the query runs and the image table) and waits for that copy, unless the geometry
 * is the one prepared last (then it does nothing, so calling it before every run is cheap); run
 * only enqueues. */
#ifndef OC_CL_ATTN_H
#define OC_CL_ATTN_H

#include "attention/attn.h"
#include "opencl/cl_device.h"

typedef struct oc_cl_attn oc_cl_attn;

typedef struct oc_cl_attn_limits {
    int32_t max_n_q;             /* query rows per call */
    int32_t n_head, n_head_kv;   /* n_head % n_head_kv == 0 */
    int32_t head_dim;            /* 1 .. OC_CL_ATTN_MAX_HEAD_DIM */
    int32_t max_images;          /* image spans in a layout */
    int32_t max_segments;        /* segments of an OC_ATTN_SEGMENTS call */
} oc_cl_attn_limits;

/* [alloc: yes, host arrays and device buffers sized by lim] [errors: OC_ERR_INVALID,
 * OC_ERR_UNSUPPORTED (head_dim above OC_CL_ATTN_MAX_HEAD_DIM or too large for the device's local
 * memory), OC_ERR_DEVICE, OC_ERR_NOMEM] */
oc_status oc_cl_attn_open(oc_cl_attn **out, oc_cl_device *dev, const oc_cl_attn_limits *lim, oc_error *err);
void oc_cl_attn_close(oc_cl_attn *at);   /* NULL is a no-op */
/* Host bytes oc_cl_attn_open allocates for lim at most (on any device). [alloc: no] */
size_t oc_cl_attn_host_bytes(const oc_cl_attn_limits *lim);

typedef struct oc_cl_attn_shape {
    int32_t n_q, n_kv;            /* n_q <= max_n_q */
    int32_t q_offset;             /* absolute position of query 0; key j sits at position j */
    oc_attn_mask_kind mask;       /* CAUSAL, BIDIRECTIONAL or SEGMENTS */
    const oc_token_span *segments;   /* SEGMENTS: sorted, disjoint, non-empty */
    int32_t n_segments;
    const oc_token_layout *layout;   /* image spans for the BlindSight patterns; NULL: all text */
} oc_cl_attn_shape;

/* [alloc: no] [errors: OC_ERR_INVALID naming the bad field, OC_ERR_RANGE (above the limits),
 * OC_ERR_UNSUPPORTED (explicit mask), OC_ERR_DEVICE] */
oc_status oc_cl_attn_prepare(oc_cl_attn *at, const oc_cl_attn_shape *shape, oc_error *err);

/* Per-head patterns on the device: OC_CL_PATTERN_INTS ints per head (kind, n_sink, n_local). */
#define OC_CL_PATTERN_INTS 3
/* Write n patterns at head index first_head of buf (OC_CL_PATTERN_INTS ints each), e.g. all of a
 * plan's layers once at load. [errors: OC_ERR_INVALID (a bad pattern: unknown kind, A-shape with
 * n_sink < 0 or n_local < 1), OC_ERR_RANGE, OC_ERR_DEVICE] */
oc_status oc_cl_patterns_write(oc_cl_device *dev, oc_cl_buf *buf, int64_t first_head, const oc_head_pattern *p,
                               int32_t n, oc_error *err);

/* One call's tensors, all on the device. Strides and offsets count elements (f32 for q and out,
 * kv_dtype for k and v): head h of query i is q[q_off + i * q_stride_token + h * q_stride_head].
 * q and out may not overlap. */
typedef struct oc_cl_attn_io {
    const oc_cl_buf *q;
    int64_t q_off, q_stride_token, q_stride_head;
    const oc_cl_buf *k, *v;
    int32_t kv_dtype;             /* OC_DTYPE_F16 or OC_DTYPE_F32 */
    int64_t k_off, k_stride_token, k_stride_head;
    int64_t v_off, v_stride_token, v_stride_head;
    oc_cl_buf *out;
    int64_t out_off, out_stride_token, out_stride_head;
    float scale;                  /* usually 1 / sqrt(head_dim) */
    const oc_cl_buf *patterns;    /* per-head patterns on the device (heads at patterns_head..), or */
    int64_t patterns_head;        /* NULL and then: */
    const oc_head_pattern *host_patterns;   /* [n_head] on the host, or NULL: every head dense. The
                                   context keeps the last OC_CL_ATTN_PATTERN_SETS distinct sets on
                                   the device: a model's layers upload theirs once (waiting for
                                   that copy), later calls find them. */
} oc_cl_attn_io;

#define OC_CL_ATTN_PATTERN_SETS 64

/* Enqueue the call prepared last. stats (may be NULL) gets the kept / skipped / executed FLOPs as
 * oc_attn_run counts them (4 * head_dim per pair); asking for them waits for the device.
 * [alloc: no] [errors: OC_ERR_INVALID (not prepared, bad strides or types, a bad host pattern),
 * OC_ERR_RANGE (a tensor outside its buffer), OC_ERR_DEVICE] */
oc_status oc_cl_attn_run(oc_cl_attn *at, const oc_cl_attn_io *io, oc_attn_stats *stats, oc_error *err);

/* Pairs the base mask of the call prepared last keeps for one head, as src/attention/attn.c counts them (a
 * call whose heads are all dense keeps exactly these: its stats need no wait for the device). */
uint64_t oc_cl_attn_base_pairs(const oc_cl_attn *at);

/* Tests and benchmarks: force the key split of the next prepares into n_chunks chunks (0: the
 * automatic choice). Only calls of at most 4 query rows split. */
void oc_cl_attn_force_split(oc_cl_attn *at, int32_t n_chunks);

#endif
