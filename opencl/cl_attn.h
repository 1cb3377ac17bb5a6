/* cl_attn.h: attention on an OpenCL device with the CPU engine's semantics (src/attention/attn.h): base
 * mask causal / bidirectional / segments AND each head's pattern (dense, the BlindSight
 * categories from the token layout, A-shape, and in prefill MMInference's Vertical-Slash, Grid,
 * Q-Boundary and 2D-Boundary from a per-prompt index: oc_cl_attn_dyn_build), grouped-query heads, f16 or f32 K/V with strides,
 * tiles a pattern drops never loaded (opencl/kernels/attn.cl explains the tiling). The explicit debug
 * mask (OC_ATTN_EXPLICIT) is CPU-only. A call of one query row whose heads are all dense over an
 * f16 cache (a decode step) runs opencl/kernels/decode.cl instead, one launch plus the merge.
 * Results depend only on the shapes and the device (the key split of long decode calls follows
 * its compute-unit count), never on timing. */

/* Use: open one context per model with its limits; then oc_cl_attn_run per layer with the call
 * (attn_call.h, the struct the CPU engine reads too) and that layer's buffers. A run whose geometry
 * (positions, mask, layout: the same for every layer of a forward pass) differs from the last one
 * prepares first: it uploads a few hundred bytes (the query runs and the image table) and waits for
 * that copy; otherwise run only enqueues. oc_cl_attn_prepare does the first half alone. */
#ifndef OC_CL_ATTN_H
#define OC_CL_ATTN_H

#include "attention/attn.h"
#include "core/pool.h"
#include "opencl/cl_device.h"

typedef struct oc_cl_attn oc_cl_attn;

typedef struct oc_cl_attn_limits {
    int32_t max_n_q;             /* query rows per call */
    int32_t n_head, n_head_kv;   /* n_head % n_head_kv == 0 */
    int32_t head_dim;            /* 1 .. OC_CL_ATTN_MAX_HEAD_DIM */
    int32_t max_images;          /* image spans in a layout */
    int32_t max_segments;        /* segments of an OC_ATTN_SEGMENTS call */
    int32_t max_n_kv;            /* keys per call for VERTICAL_SLASH / GRID / Q_BOUNDARY / BOUNDARY_2D
                                    heads in prefill (their index and estimate are sized by it); 0:
                                    such calls are refused */
    int32_t max_shared_keys;     /* keys per call with Q-Cache VLA's k_shared flags (attn_call.h);
                                    0: such calls are refused */
} oc_cl_attn_limits;

/* [alloc: yes, host arrays and device buffers sized by lim] [errors: OC_ERR_INVALID,
 * OC_ERR_UNSUPPORTED (head_dim above OC_CL_ATTN_MAX_HEAD_DIM or too large for the device's local
 * memory), OC_ERR_DEVICE, OC_ERR_NOMEM] */
oc_status oc_cl_attn_open(oc_cl_attn **out, oc_cl_device *dev, const oc_cl_attn_limits *lim, oc_error *err);
void oc_cl_attn_close(oc_cl_attn *at);   /* NULL is a no-op */
/* Host bytes oc_cl_attn_open allocates for lim at most (on any device). [alloc: no] */
size_t oc_cl_attn_host_bytes(const oc_cl_attn_limits *lim);

/* Prepare the geometry of call (attn_call.h: n_q, n_kv, q_offset, mask, segments, layout; the
 * head counts and head_dim must be the context's). [alloc: no] [errors: OC_ERR_INVALID naming the
 * bad field, OC_ERR_RANGE (above the limits), OC_ERR_UNSUPPORTED (explicit mask), OC_ERR_DEVICE] */
oc_status oc_cl_attn_prepare(oc_cl_attn *at, const oc_attn_call *call, oc_error *err);

/* Per-head patterns on the device: OC_CL_PATTERN_INTS ints per head (kind, n_sink, n_local). */
#define OC_CL_PATTERN_INTS 3
/* Write n patterns at head index first_head of buf (OC_CL_PATTERN_INTS ints each), e.g. all of a
 * plan's layers once at load. [errors: OC_ERR_INVALID (a bad pattern: unknown kind, A-shape with
 * n_sink < 0 or n_local < 1), OC_ERR_RANGE, OC_ERR_DEVICE] */
oc_status oc_cl_patterns_write(oc_cl_device *dev, oc_cl_buf *buf, int64_t first_head, const oc_head_pattern *p,
                               int32_t n, oc_error *err);

/* Where a call's tensors are on the device (the call's offsets and strides index these buffers;
 * q and out may not overlap), and optionally its head patterns. */
typedef struct oc_cl_attn_bufs {
    const oc_cl_buf *q, *k, *v;
    oc_cl_buf *out;
    const oc_cl_buf *patterns;    /* per-head patterns on the device (heads at patterns_head..), or */
    int64_t patterns_head;        /* NULL: the call's host patterns (NULL there: every head dense).
                                   The context keeps the last OC_CL_ATTN_PATTERN_SETS distinct host
                                   sets on the device: a model's layers upload theirs once (waiting
                                   for that copy), later calls find them. */
} oc_cl_attn_bufs;

#define OC_CL_ATTN_PATTERN_SETS 64

/* Enqueue call, preparing its geometry first unless it is the one prepared last. stats (may be
 * NULL) gets the kept / skipped / executed FLOPs as oc_attn_run counts them (4 * head_dim per
 * pair); asking for them waits for the device. A prefill call (n_q >= 64) with VERTICAL_SLASH,
 * GRID, Q_BOUNDARY or BOUNDARY_2D heads needs call->dyn when any of them needs an index
 * (oc_cl_attn_dyn_build; pattern.h oc_pattern_needs_index), uploads the tables (waiting for that
 * copy) and runs those heads in a second launch (a causal or bidirectional base only); with fewer
 * queries they run dense, as on the CPU.
 * [alloc: no] [errors: prepare's, OC_ERR_INVALID (heads or head_dim not the context's, bad
 * strides or types, a bad host pattern, prefill heads without an index), OC_ERR_RANGE (a tensor
 * outside its buffer, prefill heads above max_n_kv, or more second-launch runs than the table
 * holds: a grid stride above 1024, or a 2D-Boundary query modality whose two key modalities need
 * different row groups over many rows), OC_ERR_UNSUPPORTED (prefill heads under a segments base),
 * OC_ERR_DEVICE] */
oc_status oc_cl_attn_run(oc_cl_attn *at, const oc_attn_call *call, const oc_cl_attn_bufs *bufs, oc_attn_stats *stats,
                         oc_error *err);

/* MMInference's index of the call's prefill heads (attention/dyn.h), as the CPU's oc_attn_dyn_build
 * makes it: the estimate from the last 64 queries (of the call, or of one modality for Q-Boundary
 * and 2D-Boundary heads) runs on the device (opencl/kernels/dyn.cl), the host downloads each
 * estimate's column and diagonal scores (2D-Boundary: by rank, per key modality) and chooses with
 * the CPU's code (oc_dyn_choose, oc_dyn_choose_pair). *out is owned by at and valid until the next
 * build; set call->dyn to it for oc_cl_attn_run (any index of the right shape works there, e.g. the
 * CPU's). Waits for the device. [alloc: no] [errors: prepare's, OC_ERR_INVALID (as
 * oc_attn_dyn_build), OC_ERR_RANGE (n_kv above max_n_kv, q or k outside its buffer), OC_ERR_DEVICE] */
oc_status oc_cl_attn_dyn_build(oc_cl_attn *at, const oc_attn_call *call, const oc_cl_attn_bufs *bufs,
                               const oc_attn_dyn **out, oc_error *err);

/* oc_cl_attn_run for a call whose prefill heads need an index and that has none (call->dyn NULL):
 * the device estimates it and, when the heads' parts are Vertical-Slash, A-shape or dense (any of
 * the plain, Q-Boundary and 2D-Boundary kinds), chooses it too (opencl/kernels/dyn.cl
 * oc_dyn_choose: the CPU's top-k, ties to the lower index, the same set), writes it into the
 * second launch's tables and runs, all queued: no read-back inside the call. A call with a Grid
 * part takes oc_cl_attn_dyn_build (Alg. 1's stride search on the host, one read-back per
 * estimate batch), then runs. A call that needs no index (or has one) is oc_cl_attn_run.
 * estimate_ns (may be NULL) gets the time the index took on the host (to queue it, or with the
 * Grid search its wait and choice). [alloc: no] [errors: oc_cl_attn_run's and oc_cl_attn_dyn_build's] */
oc_status oc_cl_attn_run_indexed(oc_cl_attn *at, const oc_attn_call *call, const oc_cl_attn_bufs *io,
                                 oc_attn_stats *stats, uint64_t *estimate_ns, oc_error *err);

/* Tests: the prefill heads' parts of the last run as the device holds them, written to
 * out[0..*n_out) in one canonical form (per row list: head, part count, then per part its kind
 * and for Vertical-Slash its columns and merged diagonal runs), so an index the host chose and one
 * the device chose compare int for int. tmp holds oc_cl_attn_parts_ints(at) ints. Waits.
 * [alloc: no] [errors: OC_ERR_RANGE (cap too small), OC_ERR_DEVICE] */
int32_t oc_cl_attn_parts_ints(const oc_cl_attn *at);
oc_status oc_cl_attn_parts(oc_cl_attn *at, int32_t *tmp, int32_t *out, int32_t cap, int32_t *n_out, oc_error *err);

/* Deferred counters (on: 1): a run asked for stats sums its work-groups' counters on the device
 * into the context's running total instead of waiting to read them, and adds nothing to stats;
 * oc_cl_attn_counts_take reads the total (a wait) and adds every deferred call's kept, skipped and
 * executed FLOPs to stats (kept and executed exactly as each call would have; skipped: the sum of
 * each call's dense pairs less its kept, also the same). A sparse prefill then waits once, not
 * once per layer. [alloc: no] */
void oc_cl_attn_defer_counts(oc_cl_attn *at, int on);
/* [alloc: no] [errors: OC_ERR_DEVICE] at NULL, or nothing deferred: OC_OK at once. */
oc_status oc_cl_attn_counts_take(oc_cl_attn *at, oc_attn_stats *stats, oc_error *err);

/* Pairs the base mask of the call prepared last keeps for one head (attention/mask.h). */
uint64_t oc_cl_attn_base_pairs(const oc_cl_attn *at);

/* Query rows per work-group of the prefill heads' launch: 64 when it runs the device's 64-row
 * build (cl_device.h attn_dyn_rows_per_item, and the head dim's local memory fits), else the main
 * tile's rows. */
int32_t oc_cl_attn_dyn_rows(const oc_cl_attn *at);

/* Tests and benchmarks: force the key split of the next prepares into n_chunks chunks (0: the
 * automatic choice). Only calls of at most 4 query rows split. */
void oc_cl_attn_force_split(oc_cl_attn *at, int32_t n_chunks);
/* The host threads that choose the prefill heads' indices from the device's estimate (borrowed,
 * outlives the instance; NULL: serial, the default). The choices are the same for any pool. */
void oc_cl_attn_set_pool(oc_cl_attn *at, oc_pool *pool);

#endif
