/* dyn_build.c: builds the per-prompt indices of the VERTICAL_SLASH and GRID heads (dyn.h) before
 * oc_attn_run: the online estimate of A^ from the last 64 queries (mminference.txt Sec. 4.1, C.3),
 * computed tile by tile with the same ISA micro-kernels as the engine (attn_kernels.h), then the
 * Vertical-Slash top-k or the Grid search (dyn_index.c). Tasks: (kv group, share of its heads),
 * as many shares as it takes to give every thread a task; the plain dynamic heads of one task are
 * estimated together, each K tile converted once for all of them (the rows are the same 64 queries
 * for every head; BENCHMARKS.md "Dynamic patterns"), and each head runs the same operations
 * whatever its share, so the result does not depend on the thread count. A Q_BOUNDARY head gets
 * one index per modality, each from that modality's last 64 query rows, a BOUNDARY_2D head one per
 * modality pair, in rank coordinates (dyn.h). Nothing is allocated: everything lives in the
 * caller's block of oc_attn_dyn_bytes bytes:
 *   header | heads[n_head] | heads_vision[n_head] | pairs[4 n_head] | key_perm[n_kv] |
 *   key_rank[n_kv] | per head and slot (modality or pair): vertical[n_kv], slash[2 n_kv] (int32) |
 *   per thread: work */
#include "attention/attn.h"
#include "attention/attn_kernels.h"
#include "attention/mask.h"

#include <math.h>
#include <string.h>

#define EST_TILE 128        /* keys per score tile: S^T is EST_TILE x 64 floats (32 KiB) */
#define EST_BATCH 8         /* heads estimated together at most (their Q^T: 8 x 64 x d floats) */
#define EST_CACHE_KEYS 4096 /* keys whose pass-1 scores a thread keeps for pass 2, per head of a batch
                               (64 floats a key: 1 MiB a head): pass 2 then reads them instead of
                               converting K and running the GEMM again, the same floats */
#define EST_LANES 16        /* keys whose column sums pass 2 runs side by side */
#define N_SLOTS (OC_N_MODALITIES * OC_N_MODALITIES)   /* index slots per head: modalities or pairs */
#define LOG2E 1.44269504088896340736f
#define ALIGN_UP(x, a) (((x) + (a) - 1) / (a) * (a))

/* ---- memory layout ------------------------------------------------------------------------------ */

typedef struct dyn_geom {
    size_t off_heads, off_heads_vision, off_pairs, off_perm, off_rank, off_idx, off_threads, thread_bytes, total;
    size_t idx_per_head;   /* int32 per head and slot: n_kv vertical + 2 n_kv slash */
    int32_t batch;         /* heads per estimate: min(GQA ratio, EST_BATCH) */
    size_t t_qt, t_qptr, t_kt, t_kptr, t_s, t_m, t_l, t_m2, t_l2, t_alpha, t_vs, t_ss, t_vr, t_work, t_grid, t_rows;
    size_t t_cache;
    int32_t cache_keys;    /* keys of pass-1 scores kept per head (whole tiles; 0: none) */
} dyn_geom;

static size_t take(size_t *off, size_t n_bytes) {
    size_t at = *off;
    *off = ALIGN_UP(at + n_bytes, OC_MEM_ALIGN);
    return at;
}

static int dyn_geom_init(dyn_geom *g, const oc_attn_dims *dims, int n_threads) {
    if (!dims || dims->n_head < 1 || dims->n_head > (1 << 16) || dims->head_dim < 1 || dims->head_dim > (1 << 16) ||
        dims->max_n_kv < 0 || dims->max_n_kv > (1 << 28) || n_threads < 1 || n_threads > 1024)
        return 0;
    memset(g, 0, sizeof *g);
    size_t nkv = (size_t)OC_MAX(dims->max_n_kv, 1), d = (size_t)dims->head_dim;
    size_t off = 0;
    take(&off, sizeof(oc_attn_dyn));
    g->off_heads = take(&off, (size_t)dims->n_head * sizeof(oc_dyn_head));
    g->off_heads_vision = take(&off, (size_t)dims->n_head * sizeof(oc_dyn_head));
    g->off_pairs = take(&off, (size_t)dims->n_head * N_SLOTS * sizeof(oc_dyn_head));
    g->off_perm = take(&off, nkv * sizeof(int32_t));
    g->off_rank = take(&off, nkv * sizeof(int32_t));
    g->idx_per_head = 3 * nkv;
    g->off_idx = take(&off, (size_t)dims->n_head * N_SLOTS * g->idx_per_head * sizeof(int32_t));
    g->off_threads = off;
    size_t t = 0;
    g->batch = dims->n_head_kv >= 1 && dims->n_head % dims->n_head_kv == 0
                   ? OC_MIN(dims->n_head / dims->n_head_kv, EST_BATCH) : EST_BATCH;
    size_t nb = (size_t)g->batch;
    g->t_qt = take(&t, nb * OC_DYN_LAST_Q * d * sizeof(float));
    g->t_qptr = take(&t, OC_DYN_LAST_Q * sizeof(float *));
    g->t_kt = take(&t, EST_TILE * d * sizeof(float));
    g->t_kptr = take(&t, EST_TILE * sizeof(void *));
    g->t_s = take(&t, EST_TILE * OC_DYN_LAST_Q * sizeof(float));
    g->t_m = take(&t, nb * OC_DYN_LAST_Q * sizeof(float));
    g->t_l = take(&t, 2 * nb * OC_DYN_LAST_Q * sizeof(float));   /* l, then 1 / l, per head */
    g->t_m2 = take(&t, OC_DYN_LAST_Q * sizeof(float));
    g->t_l2 = take(&t, OC_DYN_LAST_Q * sizeof(float));
    g->t_alpha = take(&t, OC_DYN_LAST_Q * sizeof(float));
    g->t_vs = take(&t, nkv * sizeof(float));
    g->t_ss = take(&t, 4 * nkv * sizeof(float));   /* 2D: two slash arrays of up to 2 n_kv */
    g->t_vr = take(&t, nkv * sizeof(float));
    g->t_work = take(&t, 2 * nkv * sizeof(int32_t));
    g->t_grid = take(&t, 2 * nkv * sizeof(double));
    g->t_rows = take(&t, 3 * OC_DYN_LAST_Q * sizeof(int32_t));
    g->cache_keys = (int32_t)OC_MIN((size_t)EST_CACHE_KEYS, ALIGN_UP(nkv, EST_TILE));
    g->t_cache = take(&t, nb * (size_t)g->cache_keys * OC_DYN_LAST_Q * sizeof(float));
    g->thread_bytes = t;
    size_t threads;
    if (!oc_mul_size(t, (size_t)n_threads, &threads) || !oc_add_size(off, threads, &g->total)) return 0;
    return 1;
}

size_t oc_attn_dyn_bytes(const oc_attn_dims *dims, int n_threads) {
    dyn_geom g;
    return dyn_geom_init(&g, dims, n_threads) ? g.total : 0;
}

/* ---- the estimate ------------------------------------------------------------------------------ */

typedef struct est_work {
    float *qt, *kt, *s, *m, *l, *m2, *l2, *alpha, *vs, *ss, *vr;   /* qt, m, l: batch heads' */
    const float **qptr;
    const void **kptr;
    int32_t *work;
    double *grid;
    int32_t *rows, *pos, *rq;   /* [64] each: the estimate's query rows, their positions and 2D ranks */
    float *cache;               /* [batch][cache_keys][64]: pass 1's scores (S^T rows) per head */
    int32_t cache_keys;
} est_work;

static est_work est_work_at(const dyn_geom *g, unsigned char *base, int thread) {
    unsigned char *b = base + g->off_threads + (size_t)thread * g->thread_bytes;
    est_work w;
    w.qt = (float *)(b + g->t_qt);
    w.qptr = (const float **)(b + g->t_qptr);
    w.kt = (float *)(b + g->t_kt);
    w.kptr = (const void **)(b + g->t_kptr);
    w.s = (float *)(b + g->t_s);
    w.m = (float *)(b + g->t_m);
    w.l = (float *)(b + g->t_l);
    w.m2 = (float *)(b + g->t_m2);
    w.l2 = (float *)(b + g->t_l2);
    w.alpha = (float *)(b + g->t_alpha);
    w.vs = (float *)(b + g->t_vs);
    w.ss = (float *)(b + g->t_ss);
    w.vr = (float *)(b + g->t_vr);
    w.work = (int32_t *)(b + g->t_work);
    w.grid = (double *)(b + g->t_grid);
    w.rows = (int32_t *)(b + g->t_rows);
    w.pos = w.rows + OC_DYN_LAST_Q;
    w.rq = w.pos + OC_DYN_LAST_Q;
    w.cache = (float *)(b + g->t_cache);
    w.cache_keys = g->cache_keys;
    return w;
}

/* Keys [j0, j0 + nk) of the kv group as f32 rows into w->kt (once for every head of the batch). */
static void load_tile(const oc_attn_call *a, const oc_attn_kernels *kn, est_work *w, const unsigned char *const kbase[2],
                      int64_t ks, int32_t j0, int32_t nk) {
    for (int32_t t = 0; t < nk; t++)   /* kbase[1]: Q-Cache VLA's shared keys (attn_call.h k_shared) */
        w->kptr[t] = kbase[a->k_shared && a->k_shared[j0 + t]] + (int64_t)(j0 + t) * ks;
    kn->convert_rows(w->kt, w->kptr, nk, a->head_dim, a->kv_dtype);
}

/* The loaded keys [j0, j0 + nk) against one head's estimate rows (qt): S^T (nk x 64, base-2 scaled
 * scores), causal cut (row c sits at position pos[c], ascending). */
static void score_tile(const oc_attn_call *a, const oc_attn_kernels *kn, est_work *w, const float *qt, int32_t j0,
                       int32_t nk) {
    kn->gemm(nk, OC_DYN_LAST_Q, a->head_dim, w->kt, a->head_dim, 1, qt, w->s, OC_DYN_LAST_Q, 0);
    if (a->mask != OC_ATTN_CAUSAL) return;
    for (int32_t t = 0; t < nk; t++)
        for (int32_t c = 0; c < OC_DYN_LAST_Q && j0 + t > w->pos[c]; c++) w->s[t * OC_DYN_LAST_Q + c] = -INFINITY;
}

/* The diagonal scores of a BOUNDARY_2D head (dyn.h) in rank coordinates: per key modality mk an
 * array of 2 n[mk] - 1 floats, rank offset o = rq - rk at ss[mk][o + n[mk] - 1]. */
typedef struct rank_slash {
    const oc_attn_dyn *dyn;
    float *ss[OC_N_MODALITIES];
    int32_t n[OC_N_MODALITIES];
} rank_slash;

static int key_modality(const oc_attn_dyn *dyn, int32_t j) {
    int32_t r = dyn->key_rank[j];
    return r < dyn->key_start[1] && dyn->key_perm[r] == j ? 0 : 1;
}

/* One head of an estimate: its query head h, the keys [lo2, hi2) of pass 2, whether it wants the
 * diagonal scores, and where its column (vs[n_kv]) and diagonal (ss[2 n_kv - 1]) scores go. */
typedef struct est_head {
    int32_t h, lo2, hi2;
    int slash;
    float *vs, *ss;
} est_head;

/* Head e's kept pass-1 scores of the tile at key j0 (j0 + its keys <= cache_keys). */
static float *cached(const est_work *w, int32_t e, int32_t j0) {
    return w->cache + ((size_t)e * (size_t)w->cache_keys + (size_t)j0) * OC_DYN_LAST_Q;
}

/* dst[c] += row[c] * inv_l[c], c in 0..64: one key's diagonals on consecutive slots. */
static void add_scaled_row(float *restrict dst, const float *restrict row, const float *restrict inv_l) {
    for (int32_t c = 0; c < OC_DYN_LAST_Q; c++) dst[c] += row[c] * inv_l[c];
}

/* Pass 2's sums over one tile (s: nk x 64, 2^(score - max) per key and row) with the plain loop's
 * operations in its order, so the scores are the same floats: each key's column sum over the rows
 * in ascending order from 0 (vs[t] = 0 + sum), each diagonal's over the keys in ascending order.
 * EST_LANES keys' column sums run side by side (independent chains, not one dependent chain of 64
 * adds a key), and where the diagonals of one key lie on consecutive slots (diag: key 0's first
 * slot, one slot lower per key; NULL: no diagonals here) one key's 64 adds are one loop over
 * consecutive floats. Products are rounded before each sum, as in the plain loop (C11 contracts
 * nothing into an FMA here). */
static void sum_tile(const oc_attn_kernels *kn, const float *s, int32_t nk, const float *restrict inv_l,
                     float *restrict vs, float *diag) {
    int32_t t0 = 0;
    if (kn->col_sums) {   /* the same sums, a vector lane per key (attn_kernels.h) */
        kn->col_sums(s, OC_DYN_LAST_Q, nk, OC_DYN_LAST_Q, inv_l, vs);
        t0 = nk;
    }
    for (; t0 + EST_LANES <= nk; t0 += EST_LANES) {
        float acc[EST_LANES];
        for (int32_t u = 0; u < EST_LANES; u++) acc[u] = 0.0f;
        const float *blk = s + (int64_t)t0 * OC_DYN_LAST_Q;
        for (int32_t c = 0; c < OC_DYN_LAST_Q; c++) {
            float il = inv_l[c];
            for (int32_t u = 0; u < EST_LANES; u++) {
                float p = blk[u * OC_DYN_LAST_Q + c] * il;
                acc[u] += p;
            }
        }
        for (int32_t u = 0; u < EST_LANES; u++) vs[t0 + u] += acc[u];
    }
    for (int32_t t = t0; t < nk; t++) {
        const float *row = s + (int64_t)t * OC_DYN_LAST_Q;
        float col = 0.0f;
        for (int32_t c = 0; c < OC_DYN_LAST_Q; c++) {
            float p = row[c] * inv_l[c];
            col += p;
        }
        vs[t] += col;
    }
    for (int32_t t = 0; diag && t < nk; t++) add_scaled_row(diag - t, s + (int64_t)t * OC_DYN_LAST_Q, inv_l);
}

/* Column and diagonal scores of the heads eh[0..n) (one kv group, n <= the geometry's batch):
 * vs[j] = sum_r A^[r, j], ss[o + n_kv - 1] = sum_r A^[r, p_r - o]. The rows are w->rows[0..64)
 * (ascending; the last 64 queries of the call, or of one modality), at positions w->pos, the same
 * for every head, so each K tile is converted once for all of them; every head runs the operations
 * it would run alone. Pass 2 (the scores) covers the head's keys [lo2, hi2) only (whole tiles, so
 * pass 1's maxima hold exactly); the rest of vs is 0, and ss is computed only when slash is set (a
 * Grid head reads the columns of its view alone). With rs (BOUNDARY_2D, n = 1) the diagonal scores
 * go to rs's rank arrays instead of ss. */
static void estimate(const oc_attn_call *a, const oc_attn_host *mem, const oc_attn_kernels *kn, est_work *w,
                     const est_head *eh, int32_t n, const rank_slash *rs, int fast) {
    int32_t n_kv = a->n_kv, d = a->head_dim, g = eh[0].h / (a->n_head / a->n_head_kv);
    int64_t eb = a->kv_dtype == OC_DTYPE_F16 ? 2 : 4;
    const unsigned char *kbase[2] = {
        (const unsigned char *)mem->k + (a->k_off + (int64_t)g * a->k_stride_head) * eb,
        (const unsigned char *)mem->k + (a->k_shared_off + (int64_t)g * a->k_stride_head) * eb };
    int64_t ks = a->k_stride_token * eb;
    for (int32_t c = 0; c < OC_DYN_LAST_Q; c++) {
        w->pos[c] = a->q_offset + w->rows[c];
        w->rq[c] = rs ? rs->dyn->key_rank[w->pos[c]] : w->pos[c];   /* the row's coordinate for diagonals */
    }
    int32_t key_end = a->mask == OC_ATTN_CAUSAL ? OC_MIN(n_kv, w->pos[OC_DYN_LAST_Q - 1] + 1) : n_kv;
    int32_t t_lo = INT32_MAX, t_hi = 0;   /* pass 2's tiles: the union of the heads' */
    for (int32_t e = 0; e < n; e++) {
        float *qt = w->qt + (int64_t)e * OC_DYN_LAST_Q * d, *m = w->m + e * OC_DYN_LAST_Q, *l = w->l + e * OC_DYN_LAST_Q;
        for (int32_t c = 0; c < OC_DYN_LAST_Q; c++)
            w->qptr[c] = mem->q + a->q_off + (int64_t)w->rows[c] * a->q_stride_token + (int64_t)eh[e].h * a->q_stride_head;
        kn->pack_qt(qt, w->qptr, OC_DYN_LAST_Q, OC_DYN_LAST_Q, d, a->scale * LOG2E);
        for (int32_t c = 0; c < OC_DYN_LAST_Q; c++) {
            m[c] = -INFINITY;
            l[c] = 0.0f;
        }
        t_lo = OC_MIN(t_lo, eh[e].lo2 - eh[e].lo2 % EST_TILE);
        t_hi = OC_MAX(t_hi, OC_MIN(key_end, eh[e].hi2));
    }
    /* pass 1: each row's max and sum, online; the scores of the first cache_keys keys are kept
     * (fast) for pass 2, which needs them again under the final max */
    for (int32_t j0 = 0; j0 < key_end; j0 += EST_TILE) {
        int32_t nk = OC_MIN(EST_TILE, key_end - j0);
        load_tile(a, kn, w, kbase, ks, j0, nk);
        for (int32_t e = 0; e < n; e++) {
            score_tile(a, kn, w, w->qt + (int64_t)e * OC_DYN_LAST_Q * d, j0, nk);
            if (fast && j0 + nk <= w->cache_keys)
                memcpy(cached(w, e, j0), w->s, sizeof(float) * (size_t)nk * OC_DYN_LAST_Q);
            kn->softmax_cols(w->s, OC_DYN_LAST_Q, nk, OC_DYN_LAST_Q, w->m + e * OC_DYN_LAST_Q, w->l + e * OC_DYN_LAST_Q,
                             w->alpha);
        }
    }
    /* pass 2: the same tiles again; softmax_cols with the final max gives 2^(s - m) exactly (the
     * max cannot grow), and 1 / l normalizes the row */
    for (int32_t e = 0; e < n; e++) {
        float *l = w->l + e * OC_DYN_LAST_Q, *inv_l = w->l + (n + e) * OC_DYN_LAST_Q;
        for (int32_t c = 0; c < OC_DYN_LAST_Q; c++) inv_l[c] = l[c] > 0.0f ? 1.0f / l[c] : 0.0f;
        for (int32_t j = 0; j < n_kv; j++) eh[e].vs[j] = 0.0f;
        for (int32_t o = 0; eh[e].slash && !rs && o < 2 * n_kv - 1; o++) eh[e].ss[o] = 0.0f;
    }
    for (int m = 0; n && eh[0].slash && rs && m < OC_N_MODALITIES; m++)
        for (int32_t o = 0; o < 2 * rs->n[m] - 1; o++) rs->ss[m][o] = 0.0f;
    /* the diagonal of row c and key j is slot rq[c] - j: on consecutive slots for consecutive rows
     * (the call's last 64 rows, one run of positions) */
    int contig = !rs;
    for (int32_t c = 1; contig && c < OC_DYN_LAST_Q; c++) contig = w->rq[c] == w->rq[0] + c;
    for (int32_t j0 = t_lo; j0 < t_hi; j0 += EST_TILE) {
        int32_t nk = OC_MIN(EST_TILE, key_end - j0);
        int hit = fast && j0 + nk <= w->cache_keys;
        if (!hit) load_tile(a, kn, w, kbase, ks, j0, nk);
        for (int32_t e = 0; e < n; e++) {
            if (j0 < eh[e].lo2 - eh[e].lo2 % EST_TILE || j0 >= OC_MIN(key_end, eh[e].hi2)) continue;
            const float *inv_l = w->l + (n + e) * OC_DYN_LAST_Q;
            float *s = hit ? cached(w, e, j0) : w->s;   /* S^T of the tile, as score_tile leaves it */
            if (!hit) score_tile(a, kn, w, w->qt + (int64_t)e * OC_DYN_LAST_Q * d, j0, nk);
            for (int32_t c = 0; c < OC_DYN_LAST_Q; c++) {
                w->m2[c] = w->m[e * OC_DYN_LAST_Q + c];
                w->l2[c] = 0.0f;
            }
            kn->softmax_cols(s, OC_DYN_LAST_Q, nk, OC_DYN_LAST_Q, w->m2, w->l2, w->alpha);
            if (fast) {
                sum_tile(kn, s, nk, inv_l, eh[e].vs + j0,
                         eh[e].slash && contig ? eh[e].ss + n_kv - 1 - j0 + w->rq[0] : NULL);
                if (eh[e].slash && !contig)   /* the diagonals one by one, in the plain loop's order */
                    for (int32_t t = 0; t < nk; t++) {
                        int32_t j = j0 + t;
                        const float *row = s + (int64_t)t * OC_DYN_LAST_Q;
                        float *diag = eh[e].ss + n_kv - 1 - j;
                        if (rs) {
                            int mk = key_modality(rs->dyn, j);
                            diag = rs->ss[mk] + rs->n[mk] - 1 - rs->dyn->key_rank[j];
                        }
                        for (int32_t c = 0; c < OC_DYN_LAST_Q; c++) diag[w->rq[c]] += row[c] * inv_l[c];
                    }
                continue;
            }
            const float *srow = s;
            for (int32_t t = 0; t < nk; t++) {
                int32_t j = j0 + t;
                const float *row = srow + (int64_t)t * OC_DYN_LAST_Q;
                float col = 0.0f;
                if (eh[e].slash) {
                    float *diag = eh[e].ss + n_kv - 1 - j;   /* diag[rq[c]]: offset rq - key coordinate */
                    if (rs) {
                        int mk = key_modality(rs->dyn, j);
                        diag = rs->ss[mk] + rs->n[mk] - 1 - rs->dyn->key_rank[j];
                    }
                    for (int32_t c = 0; c < OC_DYN_LAST_Q; c++) {
                        float p = row[c] * inv_l[c];
                        col += p;
                        diag[w->rq[c]] += p;
                    }
                } else {
                    for (int32_t c = 0; c < OC_DYN_LAST_Q; c++) col += row[c] * inv_l[c];
                }
                eh[e].vs[j] += col;
            }
        }
    }
}

/* ---- build ------------------------------------------------------------------------------------- */

typedef struct build_ctx {
    const oc_attn_call *a;
    const oc_attn_host *mem;
    const oc_attn_kernels *kern;
    dyn_geom g;
    unsigned char *base;
    oc_dyn_head *heads, *heads_vision, *pairs;
    const oc_attn_dyn *dyn;
    int32_t n_shares;   /* tasks per kv group */
} build_ctx;

int oc_dyn_row_modality(const oc_attn_call *a, int32_t i) {
    int64_t p = (int64_t)a->q_offset + i;
    return a->layout && p < oc_layout_n_tokens(a->layout) && oc_layout_image_at(a->layout, (int32_t)p) >= 0
               ? OC_MODALITY_VISION
               : OC_MODALITY_TEXT;
}

int oc_dyn_last_rows(const oc_attn_call *a, int m, int32_t *rows) {
    int32_t n = 0;
    for (int32_t i = a->n_q - 1; i >= 0 && n < OC_DYN_LAST_Q; i--)
        if (m < 0 || oc_dyn_row_modality(a, i) == m) rows[OC_DYN_LAST_Q - 1 - n++] = i;
    return n == OC_DYN_LAST_Q;
}

static int last_rows(const oc_attn_call *a, int m, est_work *w) { return oc_dyn_last_rows(a, m, w->rows); }

/* The estimate's part of head h with plain pattern pat (VERTICAL_SLASH or GRID), its scores into
 * vs and ss. */
static est_head est_head_of(const oc_attn_call *a, int32_t h, const oc_head_pattern *pat, float *vs, float *ss) {
    est_head e = { h, 0, a->n_kv, pat->kind == OC_PATTERN_VERTICAL_SLASH, vs, ss };
    if (pat->kind == OC_PATTERN_GRID) oc_dyn_grid_view(a->n_kv, pat->grid_stride, pat->grid_max_stride, &e.lo2, &e.hi2);
    return e;
}

/* Plain pattern pat's index into out from the rows in w->rows; idx: 3 n_kv int32. */
static void build_one(build_ctx *x, est_work *w, int32_t h, const oc_head_pattern *pat, int32_t *idx, oc_dyn_head *out) {
    est_head e = est_head_of(x->a, h, pat, w->vs, w->ss);
    estimate(x->a, x->mem, x->kern, w, &e, 1, NULL, 1);
    oc_dyn_choose(pat, x->a->n_kv, w->vs, w->ss, idx, w->work, w->grid, out);
}

/* The plain VERTICAL_SLASH and GRID heads hs[0..n) of one kv group (n <= the batch), estimated
 * together from the call's last 64 queries. Each head's scores wait in its own index slot 1
 * (3 n_kv int32, unused by a plain head: n_kv column and 2 n_kv - 1 diagonal scores) until its
 * choice fills slot 0. */
static void build_batch(build_ctx *x, est_work *w, const int32_t *hs, int32_t n) {
    const oc_attn_call *a = x->a;
    est_head eh[EST_BATCH] = { { 0 } };
    for (int32_t e = 0; e < n; e++) {
        float *vs = (float *)((int32_t *)(x->base + x->g.off_idx) + ((size_t)hs[e] * N_SLOTS + 1) * x->g.idx_per_head);
        eh[e] = est_head_of(a, hs[e], &a->patterns[hs[e]], vs, vs + a->n_kv);
    }
    last_rows(a, -1, w);
    estimate(a, x->mem, x->kern, w, eh, n, NULL, 1);
    for (int32_t e = 0; e < n; e++) {
        int32_t *idx = (int32_t *)(x->base + x->g.off_idx) + (size_t)hs[e] * N_SLOTS * x->g.idx_per_head;
        oc_dyn_choose(&a->patterns[hs[e]], a->n_kv, eh[e].vs, eh[e].ss, idx, w->work, w->grid, &x->heads[hs[e]]);
    }
}

/* A BOUNDARY_2D head's dynamic pairs (dyn.h): per query modality one estimate from its last 64
 * queries over every key, then per key modality the column scores gathered by rank and the rank
 * diagonals, and the pair's choice in rank coordinates. idx: N_SLOTS slots. */
static void build_2d(build_ctx *x, est_work *w, int32_t h, int32_t *idx, oc_dyn_head *out) {
    const oc_attn_call *a = x->a;
    const oc_head_pattern *pat = &a->patterns[h];
    const oc_attn_dyn *dyn = x->dyn;
    int32_t n_m[OC_N_MODALITIES];
    for (int m = 0; m < OC_N_MODALITIES; m++) n_m[m] = dyn->key_start[m + 1] - dyn->key_start[m];
    for (int mq = 0; mq < OC_N_MODALITIES; mq++) {
        int any = 0, slash = 0;
        for (int mk = 0; mk < OC_N_MODALITIES; mk++) {
            any |= oc_pattern_is_dynamic(pat->pair[mq][mk].kind);
            slash |= pat->pair[mq][mk].kind == OC_PATTERN_VERTICAL_SLASH;
        }
        if (!any) continue;
        if (!last_rows(a, mq, w)) {   /* too few queries of mq: its dynamic pairs run dense */
            for (int mk = 0; mk < OC_N_MODALITIES; mk++) out[mq * OC_N_MODALITIES + mk].dense = 1;
            continue;
        }
        rank_slash rs = { dyn, { w->ss, w->ss + 2 * (size_t)OC_MAX(n_m[0], n_m[mq]) }, { 0, 0 } };
        for (int mk = 0; mk < OC_N_MODALITIES; mk++) rs.n[mk] = OC_MAX(n_m[mk], n_m[mq]);
        est_head e = { h, 0, a->n_kv, slash, w->vs, w->ss };
        estimate(a, x->mem, x->kern, w, &e, 1, &rs, 1);
        for (int mk = 0; mk < OC_N_MODALITIES; mk++) {
            oc_head_pattern sub = oc_pattern_pair(pat, mq, mk);
            if (!oc_pattern_is_dynamic(sub.kind)) continue;
            int slot = mq * OC_N_MODALITIES + mk;
            oc_dyn_choose_pair(&sub, n_m[mk], rs.n[mk], w->vs, dyn->key_perm + dyn->key_start[mk], rs.ss[mk], w->vr,
                               idx + (size_t)slot * x->g.idx_per_head, w->work, w->grid, &out[slot]);
        }
    }
}

void oc_dyn_key_perm(const oc_attn_call *a, int32_t *perm, int32_t *rank, int32_t *start) {
    int32_t n[OC_N_MODALITIES] = { 0, 0 };
    for (int32_t j = 0; j < a->n_kv; j++) {
        int m = a->layout && j < oc_layout_n_tokens(a->layout) && oc_layout_image_at(a->layout, j) >= 0;
        rank[j] = n[m]++;
    }
    start[0] = 0;
    start[1] = n[0];
    start[2] = n[0] + n[1];
    for (int32_t j = 0; j < a->n_kv; j++) {
        int m = a->layout && j < oc_layout_n_tokens(a->layout) && oc_layout_image_at(a->layout, j) >= 0;
        perm[start[m] + rank[j]] = j;
    }
}

/* A head's outputs before its build: no index (dense, stride 1). */
static void clear_head(build_ctx *x, int32_t h) {
    oc_dyn_head *out[OC_N_MODALITIES] = { &x->heads[h], &x->heads_vision[h] };
    for (int m = 0; m < OC_N_MODALITIES; m++) {
        memset(out[m], 0, sizeof *out[m]);
        out[m]->stride = 1;
    }
    for (int k = 0; k < N_SLOTS; k++) {
        memset(&x->pairs[h * N_SLOTS + k], 0, sizeof(oc_dyn_head));
        x->pairs[h * N_SLOTS + k].stride = 1;
    }
}

/* A Q_BOUNDARY or BOUNDARY_2D head h: its estimates alone (each from its own rows). */
static void build_boundary(build_ctx *x, est_work *w, int32_t h) {
    const oc_attn_call *a = x->a;
    const oc_head_pattern *pat = &a->patterns[h];
    oc_dyn_head *out[OC_N_MODALITIES] = { &x->heads[h], &x->heads_vision[h] };
    int32_t *idx = (int32_t *)(x->base + x->g.off_idx) + (size_t)h * N_SLOTS * x->g.idx_per_head;
    if (pat->kind == OC_PATTERN_BOUNDARY_2D) {
        build_2d(x, w, h, idx, &x->pairs[h * N_SLOTS]);
        return;
    }
    for (int m = 0; m < OC_N_MODALITIES; m++) {   /* Alg. 2: each modality from its own last queries */
        oc_head_pattern sub = oc_pattern_modal(pat, m);
        if (!oc_pattern_is_dynamic(sub.kind)) continue;
        if (!last_rows(a, m, w)) {
            out[m]->dense = 1;
            continue;
        }
        build_one(x, w, h, &sub, idx + (size_t)m * x->g.idx_per_head, out[m]);
    }
}

/* Task (kv group g, share c): the group's heads whose index within the group is c modulo n_shares;
 * the plain ones in batches of at most x->g.batch, the boundary ones alone. */
static void build_task(void *ctx, int64_t task, int thread) {
    build_ctx *x = ctx;
    const oc_attn_call *a = x->a;
    int32_t n_rep = a->n_head / a->n_head_kv, g = (int32_t)(task / x->n_shares), c = (int32_t)(task % x->n_shares);
    est_work w = est_work_at(&x->g, x->base, thread);
    int32_t batch[EST_BATCH], n = 0;
    for (int32_t k = c; k < n_rep; k += x->n_shares) {
        int32_t h = g * n_rep + k;
        clear_head(x, h);
        if (!a->patterns || !oc_pattern_needs_index(&a->patterns[h]) || a->n_kv == 0) continue;
        if (oc_pattern_is_boundary(a->patterns[h].kind)) {
            build_boundary(x, &w, h);
            continue;
        }
        batch[n++] = h;
        if (n == x->g.batch) {
            build_batch(x, &w, batch, n);
            n = 0;
        }
    }
    if (n) build_batch(x, &w, batch, n);
}

/* The checks of oc_attn_run (without the index) plus: the call has enough queries to estimate. */
static oc_status check_build(const oc_attn_call *a, const oc_attn_host *mem, oc_isa isa, const oc_attn_kernels **kern,
                             oc_error *err) {
    oc_status st = oc_attn_check_call(a, mem, 0, err);
    if (st != OC_OK) return st;
    for (int32_t h = 0; a->patterns && h < a->n_head; h++)
        if (oc_pattern_needs_index(&a->patterns[h]) && !oc_attn_wants_dyn(a))
            return oc_fail(err, OC_ERR_INVALID, "attn dyn: %d queries, the estimate needs at least %d", (int)a->n_q,
                           OC_DYN_LAST_Q);
    *kern = oc_attn_kernels_for(isa);
    if (!*kern) return oc_fail(err, OC_ERR_UNSUPPORTED, "attn dyn: no %s kernels in this build", oc_isa_name(isa));
    return OC_OK;
}

oc_status oc_attn_dyn_build(const oc_attn_call *a, const oc_attn_host *mem, oc_isa isa, oc_pool *pool,
                            void *dyn_mem, size_t dyn_bytes, const oc_attn_dyn **out, oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "attn dyn: out is NULL");
    *out = NULL;
    const oc_attn_kernels *kern = NULL;
    oc_status st = check_build(a, mem, isa, &kern, err);
    if (st != OC_OK) return st;
    int n_threads = oc_pool_n_threads(pool);
    oc_attn_dims dims = { a->n_q, a->n_kv, a->n_head, a->n_head_kv, a->head_dim };
    build_ctx x;
    memset(&x, 0, sizeof x);
    if (!dyn_geom_init(&x.g, &dims, n_threads))
        return oc_fail(err, OC_ERR_INVALID, "attn dyn: memory size overflows for these dimensions");
    if (!dyn_mem || dyn_bytes < x.g.total || (uintptr_t)dyn_mem % OC_MEM_ALIGN)
        return oc_fail(err, OC_ERR_INVALID, "attn dyn: %zu bytes given, this call needs %zu aligned bytes", dyn_bytes,
                       x.g.total);
    x.a = a;
    x.mem = mem;
    x.kern = kern;
    x.base = dyn_mem;
    x.heads = (oc_dyn_head *)(x.base + x.g.off_heads);
    x.heads_vision = (oc_dyn_head *)(x.base + x.g.off_heads_vision);
    x.pairs = (oc_dyn_head *)(x.base + x.g.off_pairs);
    oc_attn_dyn *dyn = dyn_mem;
    memset(dyn, 0, sizeof *dyn);
    dyn->n_head = a->n_head;
    dyn->heads = x.heads;
    dyn->heads_vision = x.heads_vision;
    int any_2d = 0;
    for (int32_t h = 0; a->patterns && h < a->n_head; h++) any_2d |= a->patterns[h].kind == OC_PATTERN_BOUNDARY_2D;
    if (any_2d) {
        int32_t *perm = (int32_t *)(x.base + x.g.off_perm), *rank = (int32_t *)(x.base + x.g.off_rank);
        oc_dyn_key_perm(a, perm, rank, dyn->key_start);
        dyn->pairs = x.pairs;
        dyn->key_perm = perm;
        dyn->key_rank = rank;
    }
    x.dyn = dyn;
    /* every thread a task where the groups are fewer than the threads (a share's heads are built
     * alike whatever the share count) */
    int32_t n_rep = a->n_head / a->n_head_kv;
    x.n_shares = OC_MIN(n_rep, OC_MAX(1, (n_threads + a->n_head_kv - 1) / a->n_head_kv));
    oc_pool_run(pool, (int64_t)a->n_head_kv * x.n_shares, build_task, &x);
    *out = dyn;
    return OC_OK;
}

static oc_status dyn_scores(const oc_attn_call *a, const oc_attn_host *mem, oc_isa isa, int32_t head, void *dyn_mem,
                            size_t dyn_bytes, float *vertical, float *slash, int fast, oc_error *err) {
    const oc_attn_kernels *kern = NULL;
    oc_status st = check_build(a, mem, isa, &kern, err);
    if (st != OC_OK) return st;
    if (a->n_q < OC_DYN_LAST_Q)
        return oc_fail(err, OC_ERR_INVALID, "attn dyn: %d queries, the estimate needs at least %d", (int)a->n_q,
                       OC_DYN_LAST_Q);
    if (head < 0 || head >= a->n_head)
        return oc_fail(err, OC_ERR_INVALID, "attn dyn: head %d of %d", (int)head, (int)a->n_head);
    oc_attn_dims dims = { a->n_q, a->n_kv, a->n_head, a->n_head_kv, a->head_dim };
    dyn_geom g;
    if (!dyn_geom_init(&g, &dims, 1) || !dyn_mem || dyn_bytes < g.total || (uintptr_t)dyn_mem % OC_MEM_ALIGN)
        return oc_fail(err, OC_ERR_INVALID, "attn dyn: memory too small for these dimensions");
    est_work w = est_work_at(&g, dyn_mem, 0);
    last_rows(a, -1, &w);
    est_head e = { head, 0, a->n_kv, 1, w.vs, w.ss };
    estimate(a, mem, kern, &w, &e, 1, NULL, fast);
    memcpy(vertical, w.vs, (size_t)a->n_kv * sizeof(float));
    memcpy(slash, w.ss, (size_t)(2 * a->n_kv - 1) * sizeof(float));
    return OC_OK;
}

oc_status oc_attn_dyn_scores(const oc_attn_call *a, const oc_attn_host *mem, oc_isa isa, int32_t head,
                             void *dyn_mem, size_t dyn_bytes, float *vertical, float *slash, oc_error *err) {
    return dyn_scores(a, mem, isa, head, dyn_mem, dyn_bytes, vertical, slash, 1, err);
}

oc_status oc_attn_dyn_scores_plain(const oc_attn_call *a, const oc_attn_host *mem, oc_isa isa, int32_t head,
                                   void *dyn_mem, size_t dyn_bytes, float *vertical, float *slash, oc_error *err) {
    return dyn_scores(a, mem, isa, head, dyn_mem, dyn_bytes, vertical, slash, 0, err);
}
