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
 * The call is described by oc_attn_call (attn_call.h, shared with the OpenCL backend); the mask's
 * pieces (row classes, windows, key sets, pair counts) are mask.h.
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
 *  - VERTICAL_SLASH / GRID (mminference.txt Sec. 3.1, C.3; masks defined in dyn.h): prefill only.
 *    A call with n_q >= OC_DYN_LAST_Q needs call->dyn from oc_attn_dyn_build on the same call
 *    and a causal or bidirectional base; a call with fewer queries (decode, tiny prompts) runs
 *    these heads dense, since MMInference sparsifies the pre-filling stage only.
 *  - Q_BOUNDARY (mminference.txt Sec. 3.2, Alg. 2; dyn.h): a query inside an image span of the
 *    layout keeps keys by the head's vision pattern, any other by its text pattern (each dense,
 *    A_SHAPE, VERTICAL_SLASH or GRID as above), a dynamic one with that modality's own index
 *    (call->dyn: heads for text, heads_vision for vision); prefill only, like the dynamic kinds.
 *  - BOUNDARY_2D (mminference.txt Sec. 3.2, Alg. 3; dyn.h): queries and keys grouped by modality;
 *    the pair (query modality, key modality) keeps keys by its own pattern (dense, A_SHAPE,
 *    VERTICAL_SLASH or GRID) on the tokens' ranks within their modalities, ANDed with the base
 *    mask in positions; the index (call->dyn: pairs, key_perm, key_rank) is needed in every
 *    prefill call of 64 queries or more; prefill only.
 *  - A query outside every segment (OC_ATTN_SEGMENTS) keeps nothing. */
#ifndef OC_ATTN_H
#define OC_ATTN_H

#include "core/core.h"
#include "core/isa.h"
#include "core/pool.h"
#include "attention/attn_call.h"
#include "attention/dyn.h"

/* Where the CPU engine finds the call's tensors: host memory that the call's offsets and strides
 * (attn_call.h) index, q and out f32, k and v of the call's kv_dtype. */
typedef struct oc_attn_host {
    const float *q;
    const void *k, *v;
    float *out;
} oc_attn_host;

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

/* Run the call on the tensors in mem with the kernels of isa (oc_isa_best() or any that
 * oc_isa_runs()). scratch: OC_MEM_ALIGN-aligned, at least oc_attn_scratch_bytes(dims of this call,
 * oc_pool_n_threads(pool)) bytes. pool may be NULL (serial). stats may be NULL.
 * [alloc: no] [threads: the pool's] [errors: OC_ERR_INVALID naming the bad argument,
 * OC_ERR_UNSUPPORTED when isa is not built or does not run here] */
oc_status oc_attn_run(const oc_attn_call *call, const oc_attn_host *mem, oc_isa isa, oc_pool *pool, void *scratch,
                      size_t scratch_bytes, oc_attn_stats *stats, oc_error *err);

/* ---- dynamic indices (dyn.h) --------------------------------------------------------------------- */

/* 1 when the call runs its VERTICAL_SLASH / GRID heads sparse (n_q >= OC_DYN_LAST_Q), so it needs
 * call->dyn; 0 when they run dense (decode). */
int oc_attn_wants_dyn(const oc_attn_call *call);
/* 1 when head h of the call keeps exactly the keys the base mask keeps: no patterns, a dense head,
 * a prefill pattern in a call too short for its estimate (decode), or a BlindSight category over
 * query rows that are all text (it restricts image queries only). Executors run such heads as
 * dense heads (one sub-group with the group's other dense heads; on a device, no counters). */
int oc_attn_head_is_dense(const oc_attn_call *call, int32_t h);
/* Bytes of the block oc_attn_dyn_build needs for calls up to dims (0 on overflow): per head
 * 12 * max_n_kv for the index, per thread about 28 * max_n_kv plus a few tiles, and pass 1's
 * scores of up to 4,096 keys per head of a GQA group (256 bytes a key, at most 8 heads).
 * [alloc: no] */
size_t oc_attn_dyn_bytes(const oc_attn_dims *dims, int n_threads);
/* Estimate and choose the index of every dynamic head of this call into dyn_mem
 * (OC_MEM_ALIGN-aligned, oc_attn_dyn_bytes(dims of this call, oc_pool_n_threads(pool)) bytes), with
 * the kernels of isa. *out points into dyn_mem; set call->dyn to it for oc_attn_run.
 * [alloc: no] [threads: the pool's] [errors: OC_ERR_INVALID (bad arguments, a dynamic head with
 * n_q < 64, q_offset + n_q > n_kv, a segments or explicit base, memory too small),
 * OC_ERR_UNSUPPORTED (isa)] */
oc_status oc_attn_dyn_build(const oc_attn_call *call, const oc_attn_host *mem, oc_isa isa, oc_pool *pool,
                            void *dyn_mem, size_t dyn_bytes, const oc_attn_dyn **out, oc_error *err);
/* The raw estimate of one head, for tests and calibration: vertical[0..n_kv) column scores and
 * slash[0..2 n_kv - 1) diagonal scores, offset o at o + n_kv - 1. dyn_mem: oc_attn_dyn_bytes for
 * one thread. [alloc: no] [errors: as oc_attn_dyn_build] */
oc_status oc_attn_dyn_scores(const oc_attn_call *call, const oc_attn_host *mem, oc_isa isa, int32_t head,
                             void *dyn_mem, size_t dyn_bytes, float *vertical, float *slash, oc_error *err);
/* The same estimate the plain way, for tests: pass 2 converts K and scores every tile again and
 * sums key by key, where oc_attn_dyn_scores (and the build) keeps pass 1's scores of the first
 * keys and sums several keys at once; the two give the same floats. */
oc_status oc_attn_dyn_scores_plain(const oc_attn_call *call, const oc_attn_host *mem, oc_isa isa, int32_t head,
                                   void *dyn_mem, size_t dyn_bytes, float *vertical, float *slash, oc_error *err);

/* The pieces of the index build both executors share (dyn.h): the modality of query row i (vision
 * inside an image span of the layout); the last 64 query rows of modality m (m < 0: any) into
 * rows[0..64) ascending (0 when there are fewer); the keys' modality permutation and ranks
 * (perm[start[m] .. start[m + 1]) the positions of modality m ascending, rank[j] the index of j
 * within its modality; n_kv entries each, start 3). [alloc: no] */
int oc_dyn_row_modality(const oc_attn_call *call, int32_t i);
int oc_dyn_last_rows(const oc_attn_call *call, int m, int32_t *rows);
void oc_dyn_key_perm(const oc_attn_call *call, int32_t *perm, int32_t *rank, int32_t *start);

/* The argument checks of oc_attn_run (need_index 0: without the dynamic index, as
 * oc_attn_dyn_build needs them). [errors: OC_ERR_INVALID] */
oc_status oc_attn_check_call(const oc_attn_call *call, const oc_attn_host *mem, int need_index, oc_error *err);

/* How this engine runs heads of pattern kind k (pattern.h): the BlindSight kinds and A-shape
 * sparse, Vertical-Slash, Grid, Q-Boundary and 2D-Boundary sparse in prefill. The one table of
 * what runs sparse: each backend provider (backend.h) points at it, OpenCL's too, whose kernels
 * execute the same patterns. [alloc: no] */
oc_pattern_exec oc_attn_pattern_exec(oc_pattern_kind k);

/* Name of the kernels an ISA would use, or NULL when that ISA's kernels are not built. */
const char *oc_attn_kernels_name(oc_isa isa);

#endif
