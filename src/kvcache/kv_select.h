/* kv_select.h: which keys a shrinking KV cache keeps, by the papers' rules, on host arrays:
 *  - attention mass of chosen query rows accumulated per key (oc_kv_score_rows): the SparseMM
 *    observation window (sparsemm.txt Eq. 10-13) and the ZipVL probe rows (zipvl.txt Eq. A, 6, 8);
 *  - SparseMM: the local window plus the top keys by that mass, up to the head's budget (Eq. 14);
 *  - ZipVL: p from the cumulative mass >= tau (Eq. 7), then the top p by mass / nnz (Eq. 8-9);
 *  - the ZipVL probe rows: 64 recent + 64 random positions (zipvl.txt supplement B.1, Table A).
 * Selection runs once per prompt, after prefill, on scratch the caller sized up front
 * (oc_kv_select_scratch_bytes); nothing here allocates. Ties between equal scores keep the earlier
 * token, so the choice is a pure function of the scores. Kept indices are returned ascending. */
#ifndef OC_KV_SELECT_H
#define OC_KV_SELECT_H

#include "attention/attn_kernels.h"
#include "core/core.h"
#include "core/pool.h"

#define OC_KV_SPARSEMM_WINDOW_QUERIES 32   /* sparsemm.txt Eq. 11: the last w = 32 queries */
#define OC_KV_ZIPVL_RECENT_PROBES 64       /* zipvl.txt supplement: 64 recent ... */
#define OC_KV_ZIPVL_RANDOM_PROBES 64       /* ... and 64 randomly positioned probe tokens */
#define OC_KV_ZIPVL_SEED 0x5a17b0e5u       /* fixed: the same prompt always gets the same probes */

/* Query rows whose softmax rows are accumulated, by absolute position. */
typedef struct oc_kv_rows {
    const float *q;              /* f32, row of query head h of token t at q[t * stride_token + h * stride_head] */
    int64_t q_stride_token, q_stride_head;
    const int32_t *q_pos;        /* [n_q] absolute position of each query row (keys 0..pos are visible) */
    int32_t n_q;
    const uint16_t *k_f16;       /* keys as the cache holds them: f16 ... */
    const float *k_f32;          /* ... or f32 (exactly one of the two is set) */
    int64_t k_stride_token, k_stride_head;   /* key j of kv head g at k[j * stride_token + g * stride_head] */
    int32_t n_head, n_head_kv, head_dim;
    float scale;
} oc_kv_rows;

/* acc[g * acc_stride_head + j] += softmax row of every query head of kv group g over keys
 * 0..q_pos[i] (causal, Eq. 12), for j <= q_pos[i]; acc_stride_head 0 sums every head into one row
 * (ZipVL's layer-wide column sums). Rows are ascending by position.
 * Precision: logits and exp in float through the attention micro-kernels kn (attn_kernels.h: the
 * table of the ISA the caller runs, oc_attn_kernels_for). With s the logit in base 2 and M its
 * row's max, each probability's relative error is at most about
 *   ln 2 * 2^-24 * ((head_dim + 1) * log2(e) * scale * sum_d |q_d k_d| + |s - M|)   (the logit)
 *   + 2^-22 (the table's exp2) + 128 * 2^-24 (a 128-key block's float sum; the blocks in double),
 * so at most about 1e-5 for moderate logits, typically far less (tests/test_kvcache.c observes
 * 4e-7); probabilities below 2^-125 of the row's largest count as 0. acc, and each key's sum over
 * the rows and heads of a call, in double, so the order of query rows (the batches of a chunked
 * prefill) changes nothing beyond rounding. The key blocks run as pool tasks (pool may be NULL:
 * serial); the result is bitwise the same for any thread count.
 * scratch: OC_MEM_ALIGN-aligned, oc_kv_score_scratch_bytes(n_head, n_head_kv, keys of the last
 * row or more, head_dim, oc_pool_n_threads(pool) or more) bytes: with group <= 128, at most
 * 520 * n_head_kv bytes per key (block partials, and the logits kept from the first pass for the
 * second, so the K Q^T product runs once) plus n_head_kv * head_dim * 512 bytes (packed
 * queries) shared, and 512 * (head_dim + 128) bytes per thread (a key block and its logits), plus
 * a few KiB. [alloc: no] */
size_t oc_kv_score_scratch_bytes(int32_t n_head, int32_t n_head_kv, int32_t max_keys, int32_t head_dim,
                                 int n_threads);
void oc_kv_score_rows(const oc_kv_rows *r, double *acc, int64_t acc_stride_head, void *scratch,
                      const oc_attn_kernels *kn, oc_pool *pool);

/* SparseMM token choice for one kv head over n keys (Eq. 13-14): the last `window` keys, plus the
 * budget - window keys of highest mass among the others. budget >= n keeps all. Writes the kept
 * indices ascending to kept and returns how many. order: n int32 of scratch. */
int32_t oc_kv_select_sparsemm(const double *mass, int32_t n, int32_t budget, int32_t window,
                              int32_t *kept, int32_t *order);

/* SparseMM over a subset: the keys within[0..n_within) (ascending; ZipVL's important set when a
 * layer has both, kv_cache.h) stand for the whole sequence: the window is their last `window`,
 * the rest compete by mass[within[t]]. Kept absolute indices, ascending. tmp: n_within doubles of
 * scratch; kept must not alias within. */
int32_t oc_kv_select_sparsemm_within(const double *mass, const int32_t *within, int32_t n_within, int32_t budget,
                                     int32_t window, int32_t *kept, int32_t *order, double *tmp);

/* ZipVL important tokens (Eq. 6-9) from column sums mass[j] of n_rows softmax rows over n keys:
 * p = the fewest keys whose largest masses sum to >= tau * n_rows (Eq. 7), then the p keys with
 * the largest mass[j] / nnz[j] (Eq. 8), nnz[j] = how many of the rows see key j, and the last
 * min(n, OC_KV_ZIPVL_RECENT_PROBES) tokens (the recent probes: kv_select.c says why). Writes the
 * kept indices ascending; returns their count. order: n int32 of scratch; norm: n doubles of scratch. */
int32_t oc_kv_select_zipvl(const double *mass, const int32_t *nnz, int32_t n, double n_rows, double tau,
                           int32_t *kept, int32_t *order, double *norm);

/* The ZipVL probe positions of a prompt of n tokens: the last min(n, 64), plus min(64, rest)
 * distinct positions drawn from the earlier ones with a fixed-seed generator. Ascending; returns
 * the count (<= 128). */
int32_t oc_kv_zipvl_probes(int32_t n, int32_t *out);

#endif
