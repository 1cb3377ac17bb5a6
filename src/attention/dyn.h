/* dyn.h: MMInference's dynamic sparse indices, built from the prompt at prefill time
 * (mminference.txt Sec. 3.1, 4.1, App. C.3, Alg. 1). For every VERTICAL_SLASH or GRID head:
 *  1. Estimate A^ = softmax(Q[-last_q:] K^T + causal mask) with last_q = 64, tile by tile, never
 *     holding more than one key tile of scores: pass 1 finds each row's max and sum (online
 *     softmax), pass 2 recomputes the tile and adds A^ into a column score per key (vertical) and a
 *     diagonal score per offset o = p - j (slash); for a Grid head only over the keys its search
 *     views, and only the columns.
 *  2. Vertical-Slash: keep the n_vertical best columns and the n_slash best diagonals (ties go to
 *     the lower index, so the choice is deterministic). Offset 0 is always among the diagonals, so
 *     every query keeps its own block and no row is left empty (our choice: the paper is silent).
 *  3. Grid (Alg. 1): view the column scores at each candidate stride s (2 .. max stride, or the
 *     plan's fixed stride) as s phases, score each phase and keep the best (stride, phase). Alg. 1
 *     takes the max of view() and leaves its reduction open; a sum always favours the smallest
 *     stride, a mean the largest (a larger stride's lines are a subset of a smaller one's, and the
 *     best of many small samples wins by noise alone). We score a phase by how far its mean stands
 *     above the mean of all viewed columns, in standard errors: (mean_f - mean) sqrt(count_f), so
 *     the stride whose lines stand out most surely wins (ties: the smaller). The view leaves out the
 *     first and the last min(max stride, n / 4) keys (attention sinks at the start and the queries'
 *     local window at the end are not grid lines) and covers at most the 4 periods of the largest
 *     stride before that, so the search costs O(4 max_stride^2), not O(n max_stride). Our choices,
 *     measured by tests/test_dyn.c and bench attention (d).
 *
 * The masks the engine then runs (attn.h restates them; tests check them element by element):
 *  - VERTICAL_SLASH: key j kept for query position p when j is a chosen column, or when some chosen
 *    offset o has b - o <= j <= b + B - 1 - o, where b = p - p % B and B = OC_DYN_BLOCK = 64: the
 *    64 queries of one block share the diagonal runs of their block, as MInference's block-sparse
 *    kernel computes them (C.3: "block-sparse calculations"), so a diagonal costs whole key runs
 *    instead of one key per row.
 *  - GRID (stride s, phase f): kept when (hline and p = f mod s) or (vline and j = f mod s) or
 *    (slash and p = j mod s). Queries of one residue class p mod s keep the same key set: the
 *    engine walks them together (Alg. 1's row permutation, done by loading rows s apart instead of
 *    copying Q).
 * Both AND the base mask (causal or bidirectional). Memory: oc_attn_dyn_bytes, fixed by the call's
 * largest dimensions, nothing else is allocated.
 * Q_BOUNDARY heads (Sec. 3.2, Alg. 2; pattern.h): a query row is vision when its position lies in
 * one of the layout's image spans, else text; each modality's rows keep keys by that modality's
 * pattern exactly as above (positions in the prompt's own coordinates: the keys are not permuted),
 * and a dynamic modality pattern's index is estimated from the last 64 query rows of that modality
 * (Alg. 2's text: "the final segment of each modality's queries"), wherever they lie. A modality
 * with fewer than 64 query rows in the call runs dense (as a short call does). The engine walks
 * the rows modality run by modality run (runs cut at image edges): Alg. 2's row permutation, by
 * loading, as the paper's kernel does.
 * BOUNDARY_2D heads (Sec. 3.2, Alg. 3; pattern.h): queries and keys are permuted by modality (the
 * same rule: a position inside an image span is vision). A token's rank is its index within its
 * modality in prompt order (oc_dyn_modality_perm's permutation); the query at position p (modality
 * mq, rank rq) keeps key j (modality mk, rank rk) when the base mask keeps (p, j) in prompt
 * positions (Alg. 3's boundary mask m_{mi:mj}) and the pair's pattern pair[mq][mk] keeps (rq, rk)
 * as a plain pattern keeps (query position rq, key j = rk) under a bidirectional base: dense keeps
 * every key of mk; A_SHAPE rk < n_sink or rq - n_local < rk <= rq; VERTICAL_SLASH and GRID as above
 * with rq and rk for p and j (blocks of 64 query ranks). So inside one modality (mq = mk) the
 * pattern runs on the modality's own stream with the other modality cut out (App. C.4, Fig. 8:
 * "intra-modality continuity"), and each cross-modality pair gets its own pattern. One softmax per
 * query over the keys of both modalities. A dynamic pair's index is estimated from the last 64
 * queries of mq (as Q_BOUNDARY): the column scores of mk's keys by rank, and diagonal scores by
 * rank offset o = rq - rk (offsets from -(n - 1) to n - 1, n = max(n_mk, n_mq) over the call's
 * keys). An mq with fewer than 64 query rows runs its dynamic pairs dense. The engine runs a
 * query run of one modality against each key modality in turn, the keys gathered through the
 * permutation (Alg. 3's loop over modality pairs, by loading, as Alg. 7 does). */
#ifndef OC_DYN_H
#define OC_DYN_H

#include "core/core.h"
#include "core/pool.h"
#include "attention/pattern.h"

#define OC_DYN_LAST_Q 64    /* mminference.txt Alg. 1, C.3: last_q = 64 */
#define OC_DYN_BLOCK 64     /* queries that share one set of diagonal runs */
#define OC_DYN_GRID_PERIODS 4      /* the search views the last 4 periods of its largest stride */

/* One head's index. Arrays live in the oc_attn_dyn block. */
typedef struct oc_dyn_head {
    int32_t dense;             /* 1: too few queries to estimate from (a Q_BOUNDARY modality with fewer
                                  than 64 queries in the call): its rows run dense */
    int32_t n_vertical, n_slash;
    const int32_t *vertical;   /* ascending key positions */
    const int32_t *slash;      /* ascending offsets o = p - j (negative: keys after the query) */
    int32_t stride, phase;     /* GRID */
} oc_dyn_head;

typedef struct oc_attn_dyn {   /* the struct tag is named in attn_call.h */
    int32_t n_head;
    const oc_dyn_head *heads;  /* [n_head]; heads that are not dynamic have zero counts; a Q_BOUNDARY
                                  head's text modality */
    const oc_dyn_head *heads_vision;   /* [n_head]: a Q_BOUNDARY head's vision modality */
    /* BOUNDARY_2D heads: pairs[(h * 2 + mq) * 2 + mk], in rank coordinates; and the keys'
     * permutation: key_perm[key_start[m] .. key_start[m + 1]) are the positions of modality m
     * ascending, key_rank[j] the rank of position j within its modality (NULL without 2D heads) */
    const oc_dyn_head *pairs;
    const int32_t *key_perm, *key_rank;
    int32_t key_start[OC_N_MODALITIES + 1];
} oc_attn_dyn;

/* ---- the pieces, for tests and calibration ---------------------------------------------------- */

/* Top k of score[0..n) by (score descending, index ascending), written ascending by index to
 * out[0..min(k, n)); work holds n int32. Returns the count. force >= 0 is always included (it
 * replaces the weakest pick). [alloc: no] */
int32_t oc_dyn_top_k(const float *score, int32_t n, int32_t k, int32_t force, int32_t *work, int32_t *out);

/* Alg. 1's stride and phase search over column scores vertical[0..n) (see above). fixed_stride > 0
 * tries that stride only (capped at n: the same mask); else strides 2 .. min(max_stride, n). work
 * holds 2 n doubles.
 * With n < 2 the result is stride 1, phase 0. [alloc: no] */
void oc_dyn_grid_search(const float *vertical, int32_t n, int32_t fixed_stride, int32_t max_stride,
                        double *work, int32_t *stride, int32_t *phase);

/* The keys [*j0, *j1) the grid search views for a prompt of n keys (see above); only their column
 * scores are read, so the estimate computes no others for a Grid head. [alloc: no] */
void oc_dyn_grid_view(int32_t n, int32_t fixed_stride, int32_t max_stride, int32_t *j0, int32_t *j1);

/* One head's index from its raw estimate (oc_attn_dyn_scores' layout: vertical[0..n_kv) column
 * scores, slash[0..2 n_kv - 1) diagonal scores, offset o at o + n_kv - 1; a Grid head reads only the
 * columns of oc_dyn_grid_view): the Vertical-Slash top-k (offset 0 forced) or the Grid search.
 * idx holds 3 n_kv int32 (the head's arrays point into it), work 2 n_kv int32, grid 2 n_kv doubles.
 * The one choice both executors make: the CPU (dyn_build.c) and OpenCL (opencl/cl_attn.c, from
 * the device's estimate). [alloc: no] */
void oc_dyn_choose(const oc_head_pattern *pat, int32_t n_kv, const float *vertical, const float *slash, int32_t *idx,
                   int32_t *work, double *grid, oc_dyn_head *out);

/* One BOUNDARY_2D pair's index (query modality mq, key modality mk; sub: the pair's plain pattern)
 * from its query modality's raw estimate: vertical[] column scores by key position, perm_mk[0..n_mk)
 * the positions of mk's keys ascending, slash[0..2 n_diag - 1) the rank-offset scores (n_diag =
 * max(n_mk, n_mq)); vr holds n_diag floats. The one pair choice of both executors. [alloc: no] */
void oc_dyn_choose_pair(const oc_head_pattern *sub, int32_t n_mk, int32_t n_diag, const float *vertical,
                        const int32_t *perm_mk, const float *slash, float *vr, int32_t *idx, int32_t *work, double *grid,
                        oc_dyn_head *out);

/* Q-Boundary / 2D-Boundary permutation (mminference.txt Sec. 3.2, Alg. 2-3): the tokens grouped by
 * modality, stably: perm[start[m] .. start[m + 1]) lists the positions of modality m in order.
 * modality[i] < n_modalities for every i; start has n_modalities + 1 entries.
 * [alloc: no] [errors: OC_ERR_INVALID naming the first bad token] */
oc_status oc_dyn_modality_perm(const uint8_t *modality, int32_t n, int32_t n_modalities, int32_t *perm,
                               int32_t *start, oc_error *err);

#endif
