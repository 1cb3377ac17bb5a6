/* attn.c: the attention engine's driver (see attn.h): argument checks, scratch layout, the tiling
 * and mask classification, the online softmax bookkeeping, flash-decoding and the thread split.
 * The inner loops are the ISA micro-kernels of attn_kernels.h; nothing here uses intrinsics.
 *
 * How a call runs
 *  1. Tasks: (kv head g, block of task_q query rows), largest causal blocks first; or, for decode
 *     (n_q <= SPLIT_MAX_Q and a long cache), (kv head g, key chunk) with a fixed chunk count that
 *     depends on n_kv only, followed by a merge in chunk order (flash-decoding). Each task owns
 *     its outputs and runs a fixed sequence of operations, so results do not depend on which
 *     thread ran it or how many there are.
 *  2. Inside a task the query heads of group g are split into sub-groups with the same pattern;
 *     a sub-group's heads are stacked as rows of one matrix, so every K/V tile is converted once
 *     for the whole sub-group (grouped-query sharing).
 *  3. The query rows are cut into runs at every boundary the mask cares about (segment edges,
 *     and image edges for the BlindSight patterns), so all rows of a run are of one class (text,
 *     image g, segment s). For one class the kept keys are
 *         C (the class's key set: a short list of intervals) AND W(p) (the window of row p:
 *         causal bound and A-shape local window, both monotone in p),
 *     so the keys every row keeps (full) and the keys some row keeps (partial) follow from the
 *     windows of the run's first and last rows, without looking at single elements: the O(1)
 *     tile classification. Keys outside both are skipped and never loaded.
 *  4. Kept keys are gathered into tiles of TILE_K keys, full and partial ones apart (and, in a
 *     Vertical-Slash run of several query blocks, by the set of blocks that keep them); only partial
 *     tiles evaluate the exact per-element mask. Gathering while converting K/V into scratch is
 *     free, so this plays the role of BlindSight's key permutation (App. L.3.3: text and sink keys
 *     packed first so sink tiles are dense) without a permuted copy of the cache: an image query
 *     block of a Sink head reads text keys and the sinks of every image, packed back to back.
 *  5. Scores are computed transposed (S^T = K Q^T, attn_kernels.h) so K tiles need no transpose;
 *     the softmax runs in base 2 with the scale and log2(e) folded into Q once.
 *  6. A run of at most OC_ATTN_DIRECT_ROWS stacked rows (decode: the GQA group's heads of one or a
 *     few queries) takes the direct kernels instead of steps 4-5's GEMMs: they dot the K rows and
 *     accumulate the V rows where they lie, converting each element in registers once for all the
 *     rows. The GEMM path would convert the tile into scratch and pad 6 query rows to 16 columns;
 *     for decode that made the engine compute-bound at 4-6x the bandwidth floor (BENCHMARKS.md
 *     "Kernels against the silicon's peak"). Which path a run takes depends on the call only, not on threads.
 *
 * Contents: geometry and scratch | per-call context | one run of query rows (the mask pieces: mask.c)
 * | tasks | entry point.
 */
#include "attention/attn.h"
#include "core/isa_built.h"
#include "attention/attn_kernels.h"
#include "attention/mask.h"
#include "port.h"

#include <math.h>
#include <string.h>

#define TILE_K 72           /* keys per tile: a multiple of the GEMM row blocks (6 and 12) */
#define ROW_BLOCK 64        /* query rows per S^T block (S^T stays in L1); a multiple of every panel, and
                               OC_DYN_BLOCK: a Vertical-Slash row block is one query block of dyn.h */
#define N_SLOTS 6           /* tile builders: (VS query blocks, full / partial) key classes of a run */
#define VS_MAX_BLOCKS 16    /* query blocks of one Vertical-Slash run (bits of a slot's block set) */
#define L2_FLOATS 65536     /* a task's queries and accumulators should fit in 256 KiB of L2 */
#define SPLIT_MAX_Q 4       /* flash-decoding for at most this many query rows ... */
#define SPLIT_MIN_KEYS 256  /* ... when there are at least 2 chunks of this many keys */
#define SPLIT_MAX_CHUNKS 32
#define LOG2E 1.44269504088896340736f
#define ALIGN_UP(x, a) (((x) + (a) - 1) / (a) * (a))

/* ---- geometry and scratch ------------------------------------------------------------------ */

typedef struct geom {
    int32_t n_rep, task_q, rows_target, rows_max, d, dpad_max, split_q;
    size_t partial_bytes, thread_bytes;
    size_t off_q, off_o, off_m, off_l, off_alpha, off_kt, off_v, off_s;   /* byte offsets in a thread block */
    size_t off_idx, off_ptr, off_heads, off_qptr, off_count;
} geom;

/* Stacked rows (heads x positions) per run: as many as fit Q^T and O in L2, so each converted K/V
 * tile serves many rows; 64 to 256. A task covers this many positions; a sub-group of n heads
 * walks them in pieces of rows_target / n positions, so sparse heads that sit alone in their
 * sub-group still amortize a tile over as many rows as a dense group does. */
static int32_t rows_target_for(int32_t head_dim) {
    int32_t t = L2_FLOATS / (2 * ALIGN_UP(head_dim, 16)) / 8 * 8;
    return t < 64 ? 64 : t > 256 ? 256 : t;
}

static size_t take(size_t *off, size_t n_bytes) {
    size_t at = *off;
    *off = ALIGN_UP(at + n_bytes, OC_MEM_ALIGN);
    return at;
}

/* 0 when dims are invalid or the sizes overflow (all limits are far below SIZE_MAX on 64-bit). */
static int geom_init(geom *g, const oc_attn_dims *dims, int n_threads) {
    if (!dims || dims->n_head < 1 || dims->n_head_kv < 1 || dims->n_head % dims->n_head_kv ||
        dims->head_dim < 1 || dims->head_dim > (1 << 16) || dims->max_n_q < 0 || dims->max_n_kv < 0 ||
        n_threads < 1 || n_threads > 1024 || dims->n_head > (1 << 16))
        return 0;
    memset(g, 0, sizeof *g);
    g->n_rep = dims->n_head / dims->n_head_kv;
    g->rows_target = rows_target_for(dims->head_dim);
    g->task_q = g->rows_target;
    /* a piece holds at most max(rows_target, n_rep) rows, and never more positions than the call */
    g->rows_max = OC_MIN(OC_MAX(g->rows_target, g->n_rep), g->n_rep * OC_MAX(dims->max_n_q, 1));
    g->d = dims->head_dim;
    g->dpad_max = ALIGN_UP(dims->head_dim, 16);
    /* query columns are padded to a multiple of 16, the widest vector */
    size_t rows = (size_t)g->rows_max, cols = ALIGN_UP(rows, 16), d = (size_t)g->d, dp = (size_t)g->dpad_max;
    size_t off = 0;
    g->off_q = take(&off, cols * d * sizeof(float));
    g->off_o = take(&off, rows * dp * sizeof(float));
    g->off_m = take(&off, cols * sizeof(float));
    g->off_l = take(&off, cols * sizeof(float));
    g->off_alpha = take(&off, ROW_BLOCK * sizeof(float));
    g->off_kt = take(&off, (size_t)TILE_K * d * sizeof(float));
    g->off_v = take(&off, (size_t)TILE_K * dp * sizeof(float));
    g->off_s = take(&off, (size_t)TILE_K * ROW_BLOCK * sizeof(float));
    g->off_idx = take(&off, N_SLOTS * TILE_K * sizeof(int32_t));
    g->off_ptr = take(&off, 2 * TILE_K * sizeof(void *));
    g->off_heads = take(&off, (size_t)g->n_rep * sizeof(int32_t));
    g->off_qptr = take(&off, rows * sizeof(float *));
    g->off_count = take(&off, 2 * sizeof(uint64_t));
    g->thread_bytes = off;
    g->split_q = OC_MIN(dims->max_n_q, SPLIT_MAX_Q);
    if (dims->max_n_kv >= 2 * SPLIT_MIN_KEYS && g->split_q > 0) {
        size_t slots = (size_t)SPLIT_MAX_CHUNKS * (size_t)dims->n_head * (size_t)g->split_q;
        g->partial_bytes = ALIGN_UP(slots * (dp + 2) * sizeof(float), OC_MEM_ALIGN);
    }
    return 1;
}

size_t oc_attn_scratch_bytes(const oc_attn_dims *dims, int n_threads) {
    geom g;
    if (!geom_init(&g, dims, n_threads)) return 0;
    size_t total;
    if (!oc_mul_size(g.thread_bytes, (size_t)n_threads, &total) || !oc_add_size(total, g.partial_bytes, &total))
        return 0;
    return total;
}

/* ---- per-call context ------------------------------------------------------------------------ */

typedef struct run_ctx {
    const oc_attn_call *a;
    const float *q;             /* the tensors, at the call's offsets */
    const unsigned char *k, *v;
    const unsigned char *k_shared;   /* attn_call.h k_shared_off, or NULL */
    float *out;
    const oc_attn_kernels *kern;
    geom g;
    int32_t dpad, n_q_tiles;
    int64_t elem_bytes;
    float qscale;               /* scale * log2(e): scores live in the base-2 domain */
    int split;                  /* flash-decoding */
    int32_t chunk_keys, n_chunks;
    float *partials;            /* [chunk][head][query] x (m, l, o[dpad]) */
    unsigned char *threads;     /* per-thread blocks */
} run_ctx;

/* Per-thread working set, pointers into that thread's block. */
typedef struct work {
    float *qt, *o, *m, *l, *alpha, *kt, *v, *s;   /* kt: the K tile as f32 rows (not transposed) */
    int32_t *idx, *heads;                         /* idx: N_SLOTS tile builders of TILE_K keys */
    const void **kptr, **vptr;
    const float **qptr;                           /* [rows_max] stacked query rows */
    uint64_t *count;            /* [0] kept pairs, [1] executed pairs */
} work;

static work work_at(const run_ctx *x, int thread) {
    unsigned char *b = x->threads + (size_t)thread * x->g.thread_bytes;
    work w;
    w.qt = (float *)(b + x->g.off_q);
    w.o = (float *)(b + x->g.off_o);
    w.m = (float *)(b + x->g.off_m);
    w.l = (float *)(b + x->g.off_l);
    w.alpha = (float *)(b + x->g.off_alpha);
    w.kt = (float *)(b + x->g.off_kt);
    w.v = (float *)(b + x->g.off_v);
    w.s = (float *)(b + x->g.off_s);
    w.idx = (int32_t *)(b + x->g.off_idx);
    w.kptr = (const void **)(b + x->g.off_ptr);
    w.vptr = w.kptr + TILE_K;
    w.heads = (int32_t *)(b + x->g.off_heads);
    w.qptr = (const float **)(b + x->g.off_qptr);
    w.count = (uint64_t *)(b + x->g.off_count);
    return w;
}

/* ---- one run of query rows ----------------------------------------------------------------------- */

/* A run: rows i0, i0 + step, .., i0 + (len-1) step of one class, for the stacked heads
 * w->heads[0..n_heads) of kv head g. Stacked row r is head w->heads[r / len], query row
 * i0 + (r % len) step. step is 1 except for a Grid head, whose runs are one residue class (Alg. 1's
 * row permutation, done by loading rows step apart); there the heads are interleaved instead:
 * stacked row r is head w->heads[r % n_heads], query row i0 + (r / n_heads) step, so a block of
 * stacked rows spans block / n_heads rows of the class, not block rows: its causal band (keys some
 * of its rows keep and others do not) is n_heads times narrower, and so are the masked lanes. */
typedef struct run {
    const run_ctx *x;
    work *w;
    const oc_head_pattern *pat;
    const oc_dyn_head *dyn;               /* the head's index (dynamic patterns) */
    int32_t n_heads, i0, len, rows, step;
    int inter;                            /* heads interleaved (step > 1) */
    int direct;                           /* rows <= OC_ATTN_DIRECT_ROWS: K/V read in place */
    const unsigned char *kbase, *vbase;   /* kv head g's rows */
    const unsigned char *kbase_shared;    /* k_shared's rows of kv head g (attn_call.h), or NULL */
    /* Tile builders: keys wait in the slot of their class, (blocks, full), and run as a tile when
     * TILE_K of them wait. blocks is the set of the run's 64-row blocks that keep the keys: all of
     * them (1 bit per block) except for a Vertical-Slash run of several query blocks (dyn.h), whose
     * diagonal runs differ per block; full: every row of those blocks keeps them (window). */
    struct slot { uint32_t blocks; int full; int32_t n; } slot[N_SLOTS];
    uint32_t all_blocks, cur_blocks;      /* cur_blocks: the class of the keys being emitted */
    /* BOUNDARY_2D (dyn.h): keys are ranks within the key modality, loaded through key_map (NULL:
     * keys are positions); a row's coordinate is its rank, q_offset + i - row_shift; the base mask
     * in ranks: key rank <= the row's own rank (causal_own, same modality) or <= causal_const (the
     * last key of the other modality before the run); grid_exact: a Grid pair, its lines tested
     * per element (the run's rows are consecutive, not one residue class). */
    const int32_t *key_map;
    int64_t row_shift, causal_const;
    int causal_own, grid_exact;
    uint64_t kept, executed;
} run;

static int32_t run_row(const run *r, int32_t row) {
    return r->i0 + (r->inter ? row / r->n_heads : row % r->len) * r->step;
}

/* The head of stacked row `row` (its index into w->heads). */
static int32_t run_head(const run *r, int32_t row) { return r->inter ? row % r->n_heads : row / r->len; }

/* 1 when the stacked rows r0 .. r0 + rb - 1 lie in ascending positions (one head, or interleaved). */
static int run_ascends(const run *r, int32_t r0, int32_t rb) { return r->inter || r0 / r->len == (r0 + rb - 1) / r->len; }

/* Row i's window in the run's key coordinates (mask.h oc_mask_row_window; for a 2D run the pair's
 * pattern in ranks, cut by the base mask in ranks). */
static oc_mask_window run_window(const run *r, int32_t i) {
    const oc_attn_call *a = r->x->a;
    int64_t p = (int64_t)a->q_offset + i;
    if (!r->key_map) return oc_mask_row_window(a, r->pat, p);
    int64_t rq = p - r->row_shift;
    int ashape = r->pat->kind == OC_PATTERN_A_SHAPE;
    oc_mask_window w;
    w.hi = ashape ? rq : INT64_MAX / 4;
    w.lo = ashape ? rq - r->pat->n_local + 1 : 0;
    w.sk = ashape ? r->pat->n_sink : 0;
    if (a->mask == OC_ATTN_CAUSAL) {
        int64_t c = r->causal_own ? rq : r->causal_const;
        w.hi = OC_MIN(w.hi, c);
        w.sk = OC_MIN(w.sk, c + 1);
    }
    return w;
}

/* The union and intersection of the windows of rows first .. last (both bounds grow with the row:
 * mask.h oc_mask_window_span). */
static void run_window_span(const run *r, int32_t first, int32_t last, oc_mask_ivals *some, oc_mask_ivals *all) {
    oc_mask_window wa = run_window(r, first), wb = run_window(r, last);
    *some = oc_mask_ivals_of(0, wb.sk, wa.lo, wb.hi + 1);
    *all = oc_mask_ivals_of(0, wa.sk, wb.lo, wa.hi + 1);
}

/* A 2D Grid pair keeps key coordinate j for row coordinate p (dyn.h GRID, in ranks). */
static int grid_keeps(const run *r, int64_t p, int64_t j) {
    int64_t s = r->dyn->stride, f = r->dyn->phase;
    int lines = r->pat->grid_lines;
    return ((lines & OC_GRID_HLINE) && ((p - f) % s + s) % s == 0) ||
           ((lines & OC_GRID_VLINE) && ((j - f) % s + s) % s == 0) || ((lines & OC_GRID_SLASH) && ((p - j) % s + s) % s == 0);
}

/* The first t in [0, n) with idx[t] >= v (n when none); idx[0..n) ascending. */
static int32_t lower_bound(const int32_t *idx, int32_t n, int64_t v) {
    int32_t lo = 0, hi = n;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (idx[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The exact mask over a partial tile for stacked rows r0 .. r0+n_cols-1 (columns of the S^T block):
 * keys were drawn from the class's key set, so only each row's window (and an explicit mask)
 * remains to check; idx[0..n_asc) ascend. Returns the kept count. */
static uint64_t mask_cols(const run *r, int32_t r0, int32_t n_cols, const int32_t *idx, int32_t nk, int32_t n_asc,
                          float *s, int32_t k_min, int32_t k_max) {
    const oc_attn_call *a = r->x->a;
    uint64_t n_kept = 0;
    int per_key = a->mask == OC_ATTN_EXPLICIT || r->grid_exact;
    for (int32_t k = 0; k < n_cols; k++) {
        int32_t row = r0 + k, i = run_row(r, row);
        oc_mask_window win = run_window(r, i);
        if (!per_key && ((win.lo <= k_min && k_max <= win.hi) || k_max < win.sk)) {   /* the row keeps them all */
            n_kept += (uint64_t)nk;
            continue;
        }
        int32_t t0 = 0;
        if (!per_key) {
            /* The window alone decides: on the ascending keys idx[0..n_asc) the row drops the keys in
             * [sk, lo) and after hi, two runs found by binary search, and only those lanes are written
             * (the per-element test below was ~4% of a Grid call at 8K, BENCHMARKS.md
             * "Dynamic patterns"); the rest of the tile (a topped-up tail that does not precede the
             * partial keys, flush_keys) is tested per element. */
            int32_t a_sk = lower_bound(idx, n_asc, win.sk), a_lo = OC_MAX(a_sk, lower_bound(idx, n_asc, win.lo));
            int32_t a_hi = OC_MAX(a_sk, lower_bound(idx, n_asc, win.hi + 1));
            for (int32_t t = a_sk; t < a_lo; t++) s[(int64_t)t * ROW_BLOCK + k] = -INFINITY;
            for (int32_t t = a_hi; t < n_asc; t++) s[(int64_t)t * ROW_BLOCK + k] = -INFINITY;
            n_kept += (uint64_t)(n_asc - (a_lo - a_sk) - (n_asc - a_hi));
            t0 = n_asc;
        }
        int64_t pc = (int64_t)a->q_offset + i - r->row_shift;   /* the row's coordinate */
        const uint8_t *em = NULL;
        if (a->mask == OC_ATTN_EXPLICIT)
            em = a->explicit_mask + (int64_t)r->w->heads[run_head(r, row)] * a->explicit_stride_head +
                 (int64_t)i * a->explicit_stride_q;
        for (int32_t t = t0; t < nk; t++) {
            int64_t j = idx[t];
            int keep = (j < win.sk || (j >= win.lo && j <= win.hi)) && (!em || em[j]) &&
                       (!r->grid_exact || grid_keeps(r, pc, j));
            if (keep) n_kept++;
            else s[(int64_t)t * ROW_BLOCK + k] = -INFINITY;
        }
    }
    return n_kept;
}

/* What the rows of the block [r0, r0 + rb) keep of a partial tile's keys [k_min, k_max] (the keys
 * came from the class's key set, so only the rows' windows decide): BLOCK_MISSES when no row keeps
 * any (along a causal diagonal or an A-shape window edge a partial tile matters to some row blocks
 * only, and skipping the others keeps long single-head runs cheap there), BLOCK_KEEPS when every
 * row keeps all of them (no per-element mask: a Grid run's rows lie stride apart, so most of its
 * keys are partial for the run but whole for each block), else BLOCK_PARTIAL. */
enum { BLOCK_MISSES, BLOCK_PARTIAL, BLOCK_KEEPS };

static int block_class(const run *r, int32_t r0, int32_t rb, int32_t k_min, int32_t k_max) {
    int32_t first = r->i0, last = run_row(r, r->rows - 1);   /* rows of the block */
    if (run_ascends(r, r0, rb)) {
        first = run_row(r, r0);
        last = run_row(r, r0 + rb - 1);
    }
    oc_mask_ivals some, all;
    run_window_span(r, first, last, &some, &all);
    for (int k = 0; k < all.n; k++)
        if (all.lo[k] <= k_min && k_max < all.hi[k]) return BLOCK_KEEPS;
    for (int k = 0; k < some.n; k++)
        if (some.lo[k] <= k_max && k_min < some.hi[k]) return BLOCK_PARTIAL;
    return BLOCK_MISSES;
}

/* O += P V for the stacked rows r0 .. r0 + n_rows - 1 (block column c0 of S^T on) over the first nb
 * keys of a tile of nk. */
static void pv_rows(run *r, int32_t r0, int32_t c0, int32_t n_rows, int32_t nb, int32_t nk) {
    const oc_attn_kernels *kn = r->x->kern;
    work *w = r->w;
    int32_t dpad = r->x->dpad;
    if (nb == nk) {
        kn->gemm(n_rows, dpad, nk, w->s + c0, 1, ROW_BLOCK, w->v, w->o + (int64_t)r0 * dpad, dpad, 1);
    } else if (nb > 0) {   /* V's panels hold nk rows each (attn_kernels.h): the first nb of each panel */
        for (int32_t p0 = 0; p0 < dpad; p0 += kn->panel) {
            int32_t n = OC_MIN(kn->panel, dpad - p0);
            kn->gemm(n_rows, n, nb, w->s + c0, 1, ROW_BLOCK, w->v + (int64_t)p0 * nk, w->o + (int64_t)r0 * dpad + p0,
                     dpad, 1);
        }
    }
}

/* One key tile for all stacked rows: S^T = K Q^T per block of ROW_BLOCK rows, mask (partial tiles
 * only), online softmax down the columns, rescale the rows whose max grew, O += P V. */
static void process_tile(run *r, const int32_t *idx, int32_t nk, int partial, uint32_t blocks) {
    const run_ctx *x = r->x;
    const oc_attn_call *a = x->a;
    const oc_attn_kernels *kn = x->kern;
    work *w = r->w;
    int32_t d = a->head_dim, dpad = x->dpad;
    int64_t ks = a->k_stride_token * x->elem_bytes, vs = a->v_stride_token * x->elem_bytes;
    int32_t k_min = INT32_MAX, k_max = -1, n_asc = nk > 0;   /* idx[0..n_asc) ascend */
    while (n_asc < nk && idx[n_asc] > idx[n_asc - 1]) n_asc++;
    for (int32_t t = 0; t < nk; t++) {
        int64_t j = r->key_map ? r->key_map[idx[t]] : idx[t];
        w->kptr[t] = (a->k_shared && a->k_shared[j] ? r->kbase_shared : r->kbase) + j * ks;
        w->vptr[t] = r->vbase + j * vs;
        k_min = OC_MIN(k_min, idx[t]);
        k_max = OC_MAX(k_max, idx[t]);
    }
    if (!r->direct) {
        kn->convert_rows(w->kt, w->kptr, nk, d, a->kv_dtype);
        kn->pack_v(w->v, w->vptr, nk, d, dpad, a->kv_dtype);
    }
    /* A Grid run's rows lie stride apart, so a block's causal band spans block / n_heads x stride
     * positions (heads interleaved: struct run): blocks of half the rows halve the masked lanes
     * there. (Not a quarter: a block must start on a packed panel of Q^T, 32 columns with AVX-512;
     * attn_kernels.h.) */
    int32_t block_rows = r->step > 1 ? ROW_BLOCK / 2 : ROW_BLOCK;
    for (int32_t r0 = 0; r0 < r->rows; r0 += block_rows) {
        int32_t rb = OC_MIN(block_rows, r->rows - r0), cols = ALIGN_UP(rb, kn->vec), nb = nk;
        int exact = partial;   /* evaluate the mask per element */
        if (!(blocks >> (r0 / ROW_BLOCK) & 1)) continue;   /* a Vertical-Slash block without these keys */
        if (partial && a->mask != OC_ATTN_EXPLICIT) {
            int bc = block_class(r, r0, rb, k_min, k_max);
            if (bc == BLOCK_MISSES) continue;
            exact = bc == BLOCK_PARTIAL || r->grid_exact;
            /* Keys after the last one the block's last row can keep are masked for every row of
             * the block: the block runs only the tile's keys up to the last such key (the tile is
             * in ascending order except a topped-up tail, if any (flush_keys), so this cuts the causal band's empty
             * triangle: a Grid run's blocks span block_rows x stride positions). Dropping keys
             * whose probabilities are 0 changes no sum. */
            int32_t last = run_ascends(r, r0, rb) ? run_row(r, r0 + rb - 1) : run_row(r, r->rows - 1);
            oc_mask_window lw = run_window(r, last);
            int64_t hi = OC_MAX(lw.hi, lw.sk - 1);
            while (exact && nb > 0 && idx[nb - 1] > hi) nb--;
        }
        if (r->direct)   /* q rows as they are, not packed (run setup): block r0's rows from r0 * d */
            kn->dot_rows(w->s, ROW_BLOCK, w->qt + (int64_t)r0 * d, rb, cols, w->kptr, w->vptr, nb, d, a->kv_dtype);
        else
            kn->gemm(nb, cols, d, w->kt, d, 1, w->qt + (int64_t)r0 * d, w->s, ROW_BLOCK, 0);   /* S^T = K Q^T */
        r->kept += exact ? mask_cols(r, r0, rb, idx, nb, OC_MIN(n_asc, nb), w->s, k_min, k_max) : (uint64_t)nb * (uint64_t)rb;
        kn->softmax_cols(w->s, ROW_BLOCK, nb, cols, w->m + r0, w->l + r0, w->alpha);
        for (int32_t k = 0; k < rb; k++) {
            float *o = w->o + (int64_t)(r0 + k) * dpad;
            if (w->alpha[k] != 1.0f) kn->scale(o, o, dpad, w->alpha[k]);
        }
        if (r->direct) {
            kn->acc_rows(w->o + (int64_t)r0 * dpad, dpad, w->s, ROW_BLOCK, rb, w->vptr, nb, d, a->kv_dtype);
        } else {
            if (kn->pack_p) kn->pack_p(w->s, ROW_BLOCK, nb, cols);   /* a BF16 table: P into pairs of keys */
            pv_rows(r, r0, 0, rb, nb, nk);   /* O += P V */
        }
        r->executed += (uint64_t)rb * (uint64_t)nb;
    }
}

/* The slot of class (r->cur_blocks, full): the one holding it, else an empty one, else the fullest
 * slot runs as a (short) tile and is reused. */
static int32_t slot_for(run *r, int full) {
    int32_t empty = -1, fullest = 0;
    for (int32_t k = 0; k < N_SLOTS; k++) {
        struct slot *t = &r->slot[k];
        if (t->n && t->blocks == r->cur_blocks && t->full == full) return k;
        if (!t->n && empty < 0) empty = k;
        if (t->n > r->slot[fullest].n) fullest = k;
    }
    int32_t k = empty;
    if (k < 0) {
        k = fullest;
        struct slot *t = &r->slot[k];
        process_tile(r, r->w->idx + k * TILE_K, t->n, !t->full, t->blocks);
        t->n = 0;
    }
    r->slot[k].blocks = r->cur_blocks;
    r->slot[k].full = full;
    return k;
}

/* Keys [lo, hi) of class (r->cur_blocks, full) into their builder; each tile runs when TILE_K keys
 * wait. */
static void add_keys(run *r, int64_t lo, int64_t hi, int full) {
    if (!r->cur_blocks) return;
    while (lo < hi) {
        int32_t k = slot_for(r, full);
        struct slot *t = &r->slot[k];
        int32_t *idx = r->w->idx + k * TILE_K;
        while (lo < hi && t->n < TILE_K) idx[t->n++] = (int32_t)lo++;
        if (t->n == TILE_K) {
            process_tile(r, idx, TILE_K, !full, t->blocks);
            t->n = 0;
        }
    }
}

/* Leftover full keys top up the last partial tile of their block set (they pass its exact mask
 * unchanged), so a class ends with at most one short tile instead of two. */
static void flush_keys(run *r) {
    for (int32_t k = 0; k < N_SLOTS; k++) {
        struct slot *t = &r->slot[k];
        if (!t->n || t->full) continue;
        int32_t *idx = r->w->idx + k * TILE_K;
        for (int32_t f = 0; f < N_SLOTS; f++) {
            struct slot *u = &r->slot[f];
            if (!u->n || !u->full || u->blocks != t->blocks) continue;
            const int32_t *from = r->w->idx + f * TILE_K;
            int32_t m = OC_MIN(TILE_K - t->n, u->n);
            if (m && from[u->n - 1] < idx[0]) {
                /* the full keys all come before the partial ones (a causal band): they go first, so
                 * the tile ascends and mask_cols finds each row's cut by binary search */
                memmove(idx + m, idx, (size_t)t->n * sizeof *idx);
                memcpy(idx, from + u->n - m, (size_t)m * sizeof *idx);
                t->n += m;
                u->n -= m;
            }
            while (t->n < TILE_K && u->n) idx[t->n++] = from[--u->n];
        }
        process_tile(r, idx, t->n, 1, t->blocks);
        t->n = 0;
    }
    for (int32_t k = 0; k < N_SLOTS; k++) {
        struct slot *t = &r->slot[k];
        if (t->n) process_tile(r, r->w->idx + k * TILE_K, t->n, 0, t->blocks);
        t->n = 0;
    }
}

/* Candidate keys [lo, hi) all lie in the class's key set; those in the window intersection `all`
 * are kept by every row of the run (full), the rest by some rows (partial). */
static void emit_keys(run *r, int64_t lo, int64_t hi, const oc_mask_ivals *all, int exact_only) {
    int64_t pos = lo;
    for (int k = 0; k < all->n && !exact_only; k++) {
        int64_t s = OC_MAX(all->lo[k], pos), e = OC_MIN(all->hi[k], hi);
        if (s >= e) continue;
        if (s > pos) add_keys(r, pos, s, 0);
        add_keys(r, s, e, 1);
        pos = e;
    }
    if (pos < hi) add_keys(r, pos, hi, 0);
}

/* One query block's Vertical-Slash diagonal runs (dyn.h), merged, in ascending key order: block b
 * keeps [b - o, b + B - 1 - o] for every chosen offset o; offsets ascend, so walking them backwards
 * gives the runs in ascending order. k: offsets not walked yet (n_slash at the start). */
typedef struct vs_iter { int64_t b; int32_t k; int64_t s, e; } vs_iter;   /* [s, e): the current run */

static void vs_next(const oc_dyn_head *dh, vs_iter *it, int64_t lo, int64_t hi) {
    int64_t cs = 0, ce = 0;
    while (it->k > 0) {
        int64_t o = dh->slash[it->k - 1], s = OC_MAX(it->b - o, lo), e = OC_MIN(it->b + OC_DYN_BLOCK - o, hi);
        if (s < e) {
            if (cs < ce && s > ce) break;   /* a gap: the current run is complete */
            if (cs < ce) ce = OC_MAX(ce, e);
            else { cs = s; ce = e; }
        }
        it->k--;
    }
    it->s = cs < ce ? cs : INT64_MAX;
    it->e = cs < ce ? ce : INT64_MAX;
}

/* Keys [s, e) that the query blocks `blocks` keep by their diagonals, with the chosen columns among
 * them kept by every block: each key once, ascending. *vi: the next column not emitted. */
static void emit_vs_segment(run *r, int64_t s, int64_t e, uint32_t blocks, int32_t *vi, const oc_mask_ivals *all) {
    const oc_dyn_head *dh = r->dyn;
    int64_t pos = s;
    for (; *vi < dh->n_vertical && dh->vertical[*vi] < e; (*vi)++) {
        int64_t j = dh->vertical[*vi];
        if (j < pos || blocks == r->all_blocks) continue;
        r->cur_blocks = blocks;
        emit_keys(r, pos, j, all, 0);
        r->cur_blocks = r->all_blocks;
        emit_keys(r, j, j + 1, all, 0);
        pos = j + 1;
    }
    r->cur_blocks = blocks;
    emit_keys(r, pos, e, all, 0);
}

/* Vertical-Slash keys of the run's query blocks (dyn.h) within [lo, hi): a sweep over the blocks'
 * diagonal runs, cut where the set of blocks keeping a key changes, so each key goes to the tile
 * builder of exactly the blocks that keep it (a run of several blocks converts the shared keys,
 * the columns above all, once for all of them: the conversion of a K/V tile is the cost that a
 * 64-row block cannot amortize), plus the chosen columns, kept by every block. */
static void emit_vertical_slash(run *r, int64_t lo, int64_t hi, const oc_mask_ivals *all) {
    const oc_dyn_head *dh = r->dyn;
    int64_t p0 = (int64_t)r->x->a->q_offset + r->i0 - r->row_shift;
    int32_t nb = 0, vi = 0;
    vs_iter it[VS_MAX_BLOCKS];
    for (int64_t b = p0 - p0 % OC_DYN_BLOCK; b < p0 + r->len; b += OC_DYN_BLOCK, nb++) {
        it[nb].b = b;
        it[nb].k = dh->n_slash;
        vs_next(dh, &it[nb], lo, hi);
    }
    while (vi < dh->n_vertical && dh->vertical[vi] < lo) vi++;
    for (int64_t x = lo; x < hi;) {
        uint32_t blocks = 0;
        int64_t next = hi;
        for (int32_t k = 0; k < nb; k++) {
            if (it[k].s <= x) blocks |= 1u << k;
            next = OC_MIN(next, it[k].s > x ? it[k].s : it[k].e);
        }
        /* one block (stacked heads run one block at a time): its bit means every row block */
        if (blocks == (1u << nb) - 1) blocks = r->all_blocks;
        emit_vs_segment(r, x, next, blocks, &vi, all);
        x = next;
        for (int32_t k = 0; k < nb; k++)
            if (it[k].e <= x) vs_next(dh, &it[k], lo, hi);
    }
    r->cur_blocks = r->all_blocks;
}

/* Grid keys of the run's residue class within [lo, hi) (dyn.h): every key on a horizontal line's
 * row; else the vertical lines j = phase and the diagonals j = p (mod stride), merged. */
static void emit_grid(run *r, int64_t lo, int64_t hi, const oc_mask_ivals *all) {
    const oc_dyn_head *dh = r->dyn;
    int lines = r->pat->grid_lines;
    int64_t s = dh->stride, p = (int64_t)r->x->a->q_offset + r->i0 - r->row_shift;
    int64_t rq = ((p - dh->phase) % s + s) % s;   /* the rows' residue, relative to the phase */
    if ((lines & OC_GRID_HLINE) && rq == 0) {
        emit_keys(r, lo, hi, all, 0);
        return;
    }
    int64_t fv = INT64_MAX, fs = INT64_MAX;   /* the next vertical-line key and diagonal key >= lo */
    if (lines & OC_GRID_VLINE) fv = lo + ((dh->phase - lo) % s + s) % s;
    if (lines & OC_GRID_SLASH) fs = lo + ((p - lo) % s + s) % s;
    while (fv < hi || fs < hi) {
        int64_t j = OC_MIN(fv, fs);
        emit_keys(r, j, j + 1, all, 0);
        if (fv == j) fv += s;
        if (fs == j) fs += s;
    }
}


/* pack_qt for rows that lie far apart in Q (Grid runs: `stride` positions, a new page per row
 * group, which the hardware prefetchers do not follow): one panel at a time, the next panel's
 * rows requested before this one is packed, so their loads overlap the transposes (measured:
 * BENCHMARKS.md, "Dynamic patterns"). The same packed bytes as one pack_qt call. */
static void pack_qt_strided(const oc_attn_kernels *kn, float *qt, const float *const *rows, int32_t n_rows, int32_t cols,
                            int32_t d, float qscale) {
    int32_t pw = kn->panel;
    for (int32_t r = 0; r < OC_MIN(pw, n_rows); r++)
        for (int32_t c = 0; c < d; c += 16) OC_PREFETCH(rows[r] + c);
    for (int32_t p0 = 0; p0 < cols; p0 += pw) {
        for (int32_t r = p0 + pw; r < OC_MIN(p0 + 2 * pw, n_rows); r++)
            for (int32_t c = 0; c < d; c += 16) OC_PREFETCH(rows[r] + c);
        kn->pack_qt(qt + (int64_t)p0 * d, rows + p0, OC_MIN(pw, n_rows - p0), OC_MIN(pw, cols - p0), d, qscale);
    }
}

/* Start a run: rows i0, i0 + step, .., i0 + (len-1) step of one class (see struct run) for the
 * stacked heads w->heads[0..n_heads) of kv head g: Q^T packed, the accumulators reset. */
static void run_begin(run *r, const run_ctx *x, work *w, int32_t n_heads, int32_t g, int32_t i0, int32_t len,
                      int32_t step) {
    const oc_attn_call *a = x->a;
    memset(r, 0, sizeof *r);
    r->x = x;
    r->w = w;
    r->n_heads = n_heads;
    r->i0 = i0;
    r->len = len;
    r->step = step;
    r->rows = n_heads * r->len;
    r->inter = step > 1;
    r->all_blocks = r->cur_blocks = ~0u;
    r->kbase = x->k + g * a->k_stride_head * x->elem_bytes;
    r->kbase_shared = x->k_shared ? x->k_shared + g * a->k_stride_head * x->elem_bytes : NULL;
    r->vbase = x->v + g * a->v_stride_head * x->elem_bytes;
    /* Q^T, scaled (attn_kernels.h pack_qt): column = stacked row; on the direct path the scaled
     * rows as they are (dot_rows) */
    int32_t d = a->head_dim, cols = ALIGN_UP(r->rows, x->kern->vec);
    r->direct = r->rows <= OC_ATTN_DIRECT_ROWS;
    for (int32_t row = 0; row < r->rows; row++)
        w->qptr[row] = x->q + (int64_t)run_row(r, row) * a->q_stride_token +
                       (int64_t)w->heads[run_head(r, row)] * a->q_stride_head;
    if (r->direct)
        for (int32_t row = 0; row < r->rows; row++) x->kern->scale(w->qt + (int64_t)row * d, w->qptr[row], d, x->qscale);
    else if (!r->inter)
        x->kern->pack_qt(w->qt, w->qptr, r->rows, cols, d, x->qscale);
    else   /* rows `step` positions apart: panel by panel, the next panel's rows prefetched */
        pack_qt_strided(x->kern, w->qt, w->qptr, r->rows, cols, d, x->qscale);
    for (int32_t k = 0; k < cols; k++) {
        w->m[k] = -INFINITY;
        w->l[k] = 0.0f;
    }
    memset(w->o, 0, (size_t)r->rows * (size_t)x->dpad * sizeof(float));
}

/* The run's keys of pattern pat (dh: its dynamic index when pat is VERTICAL_SLASH or GRID), of the
 * class's key set cls within [kw0, kw1), through the tiles into the accumulators. */
static void run_keys(run *r, const oc_head_pattern *pat, const oc_dyn_head *dh, const oc_mask_class *cls, int32_t kw0,
                     int32_t kw1) {
    const oc_attn_call *a = r->x->a;
    r->pat = pat;
    r->dyn = dh;
    /* Window union (some row keeps) and intersection (every row keeps) from the first and last
     * rows: both window bounds grow with the position. */
    oc_mask_ivals some, all;
    run_window_span(r, r->i0, run_row(r, r->rows - 1), &some, &all);
    int64_t lo = OC_MAX(kw0, cls->c0), hi = OC_MIN(kw1, cls->c1);
    if (some.n) {
        lo = OC_MAX(lo, some.lo[0]);
        hi = OC_MIN(hi, some.hi[some.n - 1]);
    }
    if (some.n && lo < hi && dh && !r->grid_exact) {
        /* dynamic patterns have one window interval (no A-shape sinks), so [lo, hi) is all of it */
        if (pat->kind == OC_PATTERN_VERTICAL_SLASH) emit_vertical_slash(r, lo, hi, &all);
        else emit_grid(r, lo, hi, &all);
        flush_keys(r);
    } else if (some.n && lo < hi) {
        oc_mask_keys it;
        oc_mask_keys_init(&it, a, cls, (int32_t)lo, (int32_t)hi);
        int32_t ca, cb;
        while (oc_mask_keys_next(&it, &ca, &cb)) {
            for (int k = 0; k < some.n; k++) {
                int64_t s = OC_MAX((int64_t)ca, some.lo[k]), e = OC_MIN((int64_t)cb, some.hi[k]);
                if (s < e) emit_keys(r, s, e, &all, a->mask == OC_ATTN_EXPLICIT || r->grid_exact);
            }
        }
        flush_keys(r);
    }
}

/* End a run: outputs normalized (or, for a key chunk of flash-decoding, its partial state). */
static void run_end(run *r, int32_t chunk) {
    const run_ctx *x = r->x;
    const oc_attn_call *a = x->a;
    work *w = r->w;
    int32_t d = a->head_dim, dpad = x->dpad;
    for (int32_t row = 0; row < r->rows; row++) {
        int32_t h = w->heads[run_head(r, row)], i = run_row(r, row);
        const float *o = w->o + (int64_t)row * dpad;
        if (chunk < 0) {
            float *dst = x->out + (int64_t)i * a->out_stride_token + (int64_t)h * a->out_stride_head;
            if (w->l[row] > 0.0f) {
                x->kern->scale(dst, o, d, 1.0f / w->l[row]);
            } else {
                for (int32_t c = 0; c < d; c++) dst[c] = 0.0f;   /* every key masked: defined as 0 */
            }
        } else {
            float *slot = x->partials + (((int64_t)chunk * a->n_head + h) * a->n_q + i) * (dpad + 2);
            slot[0] = w->m[row];
            slot[1] = w->l[row];
            memcpy(slot + 2, o, (size_t)d * sizeof(float));
        }
    }
    w->count[0] += r->kept;
    w->count[1] += r->executed;
}

/* Rows i0, i0 + step, .., i0 + (len-1) step of one class (see struct run); dh: the head's dynamic
 * index when pat is VERTICAL_SLASH or GRID (then n_heads is 1). */
static void process_run(const run_ctx *x, work *w, const oc_head_pattern *pat, const oc_dyn_head *dh,
                        int32_t n_heads, int32_t g, int32_t i0, int32_t len, int32_t step, const oc_mask_class *cls,
                        int32_t kw0, int32_t kw1, int32_t chunk) {
    run r;
    run_begin(&r, x, w, n_heads, g, i0, len, step);
    run_keys(&r, pat, dh, cls, kw0, kw1);
    run_end(&r, chunk);
}

/* ---- tasks ------------------------------------------------------------------------------------------ */

static const oc_head_pattern dense_pattern = { .kind = OC_PATTERN_DENSE };

int oc_attn_wants_dyn(const oc_attn_call *a) { return a->n_q >= OC_DYN_LAST_Q; }

/* 1 when every query row of the call is a text token: no layout (every token is text: decode),
 * rows past the prompt's, or rows between two images. */
static int rows_all_text(const oc_attn_call *a) {
    const oc_token_layout *l = a->layout;
    if (!l || a->q_offset >= oc_layout_n_tokens(l)) return 1;
    if (oc_layout_image_at(l, a->q_offset) >= 0) return 0;
    int32_t next = oc_layout_next_image(l, a->q_offset);
    return next >= oc_layout_n_images(l) || oc_layout_image_span(l, next).start >= (int64_t)a->q_offset + a->n_q;
}

/* A prefill pattern runs dense in a call too short for its estimate (decode; pattern.h). A
 * BlindSight category restricts image queries only (blindsight.txt Sec. 3.2: text queries keep
 * every key the causal mask keeps), so over text rows it is dense: taken as dense there, the heads
 * of a kv group with different categories form one sub-group and read each K/V tile once, as dense
 * heads do, instead of once per category (decode was slower than dense for that alone). The keys
 * kept, and so the counters, are the same. */
int oc_attn_head_is_dense(const oc_attn_call *a, int32_t h) {
    if (!a->patterns) return 1;
    oc_pattern_kind k = a->patterns[h].kind;
    if (k == OC_PATTERN_DENSE || (oc_pattern_is_prefill(k) && !oc_attn_wants_dyn(a))) return 1;
    return (k == OC_PATTERN_SINK || k == OC_PATTERN_INTRA_IMAGE || k == OC_PATTERN_INTRA_IMAGE_SINK) && rows_all_text(a);
}

static const oc_head_pattern *pattern_of(const oc_attn_call *a, int32_t h) {
    return oc_attn_head_is_dense(a, h) ? &dense_pattern : &a->patterns[h];
}

/* Heads h and e (of one kv group) that keep the same keys for every query share K/V tiles: the
 * same static pattern, or the same dynamic pattern with the same per-prompt index (a Grid stride
 * and phase come from the input's geometry, so the heads of a group often agree: they then load
 * each K/V tile once, as grouped-query heads of one static pattern do). */
static int same_group(const oc_attn_call *a, int32_t h, int32_t e) {
    const oc_head_pattern *p = pattern_of(a, h), *q = pattern_of(a, e);
    if (!oc_pattern_same(p, q)) return 0;
    if (oc_pattern_is_boundary(p->kind)) return h == e;   /* walked modality run by modality run, alone */
    if (!oc_pattern_is_dynamic(p->kind)) return 1;
    const oc_dyn_head *x = &a->dyn->heads[h], *y = &a->dyn->heads[e];
    if (p->kind == OC_PATTERN_GRID) return x->stride == y->stride && x->phase == y->phase;
    return x->n_vertical == y->n_vertical && x->n_slash == y->n_slash &&
           (!x->n_vertical || !memcmp(x->vertical, y->vertical, sizeof(int32_t) * (size_t)x->n_vertical)) &&
           (!x->n_slash || !memcmp(x->slash, y->slash, sizeof(int32_t) * (size_t)x->n_slash));
}

/* The Grid heads w->heads[0..n_heads) (one index: same_group) over their slice [i0, i1) of the
 * query rows in permuted order (Alg. 1): residue class by residue class ((p - phase) mod stride),
 * positions ascending within a class. Each class keeps one key set, so its rows run together,
 * loaded `stride` apart, the heads stacked. */
static void do_grid_heads(const run_ctx *x, work *w, int32_t g, int32_t n_heads, int32_t i0, int32_t i1) {
    const oc_attn_call *a = x->a;
    int32_t h = w->heads[0];
    const oc_head_pattern *pat = &a->patterns[h];
    const oc_dyn_head *dh = &a->dyn->heads[h];
    /* A class's rows lie `stride` positions apart, so a run spans many positions and most of its keys
     * are partial for the run; block_class finds them whole for each 64-row block, and only the
     * causal band of each block is masked per element. Runs are as long as for dense heads, so each
     * converted K/V tile serves as many rows. */
    int32_t s = dh->stride;
    oc_mask_class cls = { 0, a->n_kv, -1, 0, 0 };
    /* The tasks take row blocks from the end (the longest causal rows first); mirrored, the first
     * tasks take the permuted order's start, where the dense rows of the horizontal lines are. */
    int64_t lo = (int64_t)a->n_q - i1, hi = (int64_t)a->n_q - i0;
    int64_t base = 0;
    for (int32_t rq = 0; rq < s && base < hi; rq++) {
        int64_t first = (((int64_t)rq + dh->phase - a->q_offset) % s + s) % s;   /* first row of the class */
        int64_t count = first < a->n_q ? (a->n_q - 1 - first) / s + 1 : 0;
        int64_t ka = OC_MAX(lo, base) - base, kb = OC_MIN(hi, base + count) - base;
        int64_t piece = OC_MAX(1, x->g.rows_max / n_heads);
        int64_t n_pieces = kb > ka ? (kb - ka + piece - 1) / piece : 0;   /* balanced: no 3-row tail run */
        for (int64_t p = 0; p < n_pieces; p++) {
            int64_t k0 = ka + (kb - ka) * p / n_pieces, k1 = ka + (kb - ka) * (p + 1) / n_pieces;
            process_run(x, w, pat, dh, n_heads, g, (int32_t)(first + k0 * s), (int32_t)(k1 - k0), s, &cls, 0, a->n_kv,
                        -1);
        }
        base += count;
    }
}

/* Grid rows of one segment [i0, i1) (one class of the base mask, keys cls): residue class by residue
 * class, rows `stride` apart, in pieces of at most rows_max rows (Alg. 1's row permutation). */
static void grid_segment(const run_ctx *x, work *w, const oc_head_pattern *pat, const oc_dyn_head *dh, int32_t g,
                         int32_t i0, int32_t i1, const oc_mask_class *cls) {
    const oc_attn_call *a = x->a;
    int32_t s = dh->stride;
    for (int32_t rq = 0; rq < s; rq++) {
        int64_t first = i0 + ((((int64_t)rq + dh->phase - a->q_offset - i0) % s) + s) % s;
        if (first >= i1) continue;
        int64_t count = (i1 - 1 - first) / s + 1, piece = x->g.rows_max;
        int64_t n_pieces = (count + piece - 1) / piece;
        for (int64_t p = 0; p < n_pieces; p++) {
            int64_t k0 = count * p / n_pieces, k1 = count * (p + 1) / n_pieces;
            process_run(x, w, pat, dh, 1, g, (int32_t)(first + k0 * s), (int32_t)(k1 - k0), s, cls, 0, a->n_kv, -1);
        }
    }
}

/* A Q_BOUNDARY head h over rows [i0, i1) (dyn.h; Alg. 2): the rows in runs of one modality, each
 * with that modality's pattern and index (dense when the modality had too few queries). */
static void do_q_boundary_head(const run_ctx *x, work *w, int32_t g, int32_t h, int32_t i0, int32_t i1) {
    const oc_attn_call *a = x->a;
    const oc_head_pattern *pat = &a->patterns[h];
    w->heads[0] = h;
    for (int32_t i = i0; i < i1;) {
        oc_mask_class cls;
        int32_t end = oc_mask_classify(a, pat, i, OC_MIN(i1, i + OC_MIN(x->g.rows_max, VS_MAX_BLOCKS * OC_DYN_BLOCK)), &cls);
        int m = cls.image >= 0 ? OC_MODALITY_VISION : OC_MODALITY_TEXT;
        oc_head_pattern sub = oc_pattern_modal(pat, m);
        const oc_dyn_head *dh = NULL;
        if (oc_pattern_is_dynamic(sub.kind)) {
            dh = m == OC_MODALITY_VISION ? &a->dyn->heads_vision[h] : &a->dyn->heads[h];
            if (dh->dense) {
                sub = dense_pattern;
                dh = NULL;
            }
        }
        cls.image = -1;   /* the modality's pattern keeps keys of every modality */
        if (sub.kind == OC_PATTERN_GRID) grid_segment(x, w, &sub, dh, g, i, end, &cls);
        else process_run(x, w, &sub, dh, 1, g, i, end - i, 1, &cls, 0, a->n_kv, -1);
        i = end;
    }
}

/* A BOUNDARY_2D head h over rows [i0, i1) (dyn.h; Alg. 3): runs of one query modality mq (cut at
 * image edges, and into whole blocks of 64 query ranks when a pair of mq is Vertical-Slash), each
 * run against the keys of each key modality mk in turn, in rank coordinates, with the pattern and
 * index of pair (mq, mk): the keys gathered through the modality permutation while the tiles are
 * converted, one softmax over both. */
static void do_boundary_2d_head(const run_ctx *x, work *w, int32_t g, int32_t h, int32_t i0, int32_t i1) {
    const oc_attn_call *a = x->a;
    const oc_head_pattern *pat = &a->patterns[h];
    const oc_attn_dyn *dyn = a->dyn;
    w->heads[0] = h;
    for (int32_t i = i0; i < i1;) {
        oc_mask_class cls;
        int32_t end = oc_mask_classify(a, pat, i, OC_MIN(i1, i + OC_MIN(x->g.rows_max, VS_MAX_BLOCKS * OC_DYN_BLOCK)), &cls);
        int mq = cls.image >= 0 ? OC_MODALITY_VISION : OC_MODALITY_TEXT;
        int64_t p = (int64_t)a->q_offset + i, rq = dyn->key_rank[p], shift = p - rq;
        int vs = 0;
        for (int mk = 0; mk < OC_N_MODALITIES; mk++) vs |= pat->pair[mq][mk].kind == OC_PATTERN_VERTICAL_SLASH;
        if (vs && rq % OC_DYN_BLOCK) end = (int32_t)OC_MIN(end, i + OC_DYN_BLOCK - rq % OC_DYN_BLOCK);
        else if (vs && end - i > OC_DYN_BLOCK) end = i + (end - i) / OC_DYN_BLOCK * OC_DYN_BLOCK;
        run r;
        run_begin(&r, x, w, 1, g, i, end - i, 1);
        for (int mk = 0; mk < OC_N_MODALITIES; mk++) {
            int32_t n_mk = dyn->key_start[mk + 1] - dyn->key_start[mk];
            oc_head_pattern sub = oc_pattern_pair(pat, mq, mk);
            const oc_dyn_head *dh = NULL;
            if (oc_pattern_is_dynamic(sub.kind)) {
                dh = &dyn->pairs[(h * OC_N_MODALITIES + mq) * OC_N_MODALITIES + mk];
                if (dh->dense) {
                    sub = dense_pattern;
                    dh = NULL;
                }
            }
            oc_mask_class keys = { 0, n_mk, -1, 0, 0 };
            r.key_map = dyn->key_perm + dyn->key_start[mk];
            r.row_shift = shift;
            r.causal_own = mk == mq;
            r.causal_const = shift - 1;   /* keys of the other modality before the run: p - rq of them */
            r.grid_exact = sub.kind == OC_PATTERN_GRID;
            run_keys(&r, &sub, dh, &keys, 0, n_mk);
        }
        run_end(&r, -1);
        i = end;
    }
}

/* Query rows [i0, i1) and keys [kw0, kw1) for every query head of kv head g. */
static void do_group(const run_ctx *x, work *w, int32_t g, int32_t i0, int32_t i1, int32_t kw0, int32_t kw1,
                     int32_t chunk) {
    const oc_attn_call *a = x->a;
    int32_t n_rep = x->g.n_rep, h_first = g * n_rep;
    for (int32_t lead = 0; lead < n_rep; lead++) {
        const oc_head_pattern *pat = pattern_of(a, h_first + lead);
        const oc_dyn_head *dh = oc_pattern_is_dynamic(pat->kind) ? &a->dyn->heads[h_first + lead] : NULL;
        if (pat->kind == OC_PATTERN_Q_BOUNDARY) {   /* prefill only: no key chunks */
            do_q_boundary_head(x, w, g, h_first + lead, i0, i1);
            continue;
        }
        if (pat->kind == OC_PATTERN_BOUNDARY_2D) {
            do_boundary_2d_head(x, w, g, h_first + lead, i0, i1);
            continue;
        }
        int seen = 0;
        for (int32_t e = 0; e < lead && !seen; e++) seen = same_group(a, h_first + e, h_first + lead);
        if (seen) continue;
        int32_t n_heads = 0;
        for (int32_t e = lead; e < n_rep; e++)
            if (same_group(a, h_first + lead, h_first + e)) w->heads[n_heads++] = h_first + e;
        if (pat->kind == OC_PATTERN_GRID) {
            do_grid_heads(x, w, g, n_heads, i0, i1);
            continue;
        }
        /* Stacked Vertical-Slash heads run a whole query block each, so at most rows_max / 64 of them
         * fit a run's scratch (a 2B group: 6 heads x 64 rows, 256 rows at d 128): more take turns. */
        int32_t turn = n_heads;
        if (pat->kind == OC_PATTERN_VERTICAL_SLASH) turn = OC_MAX(1, OC_MIN(n_heads, x->g.rows_max / OC_DYN_BLOCK));
        for (int32_t h0 = 0; h0 < n_heads; h0 += turn) {
            int32_t m = OC_MIN(turn, n_heads - h0);
            if (h0) memmove(w->heads, w->heads + turn, sizeof(int32_t) * (size_t)(n_heads - h0));   /* next turn first */
            int32_t piece = OC_MAX(1, x->g.rows_max / m);
            if (pat->kind == OC_PATTERN_VERTICAL_SLASH)   /* runs of several query blocks: one head alone */
                piece = m > 1 ? OC_DYN_BLOCK : OC_MIN(piece, VS_MAX_BLOCKS * OC_DYN_BLOCK);
            for (int32_t i = i0; i < i1;) {
                oc_mask_class cls;
                int32_t end = oc_mask_classify(a, pat, i, OC_MIN(i1, i + piece), &cls);
                process_run(x, w, pat, dh, m, g, i, end - i, 1, &cls, kw0, kw1, chunk);
                i = end;
            }
        }
    }
}

/* Flash-decoding's split of a call: on when the call has at most SPLIT_MAX_Q query rows and 2 chunks
 * of keys; chunks of a fixed key count that depends on n_kv only (so on the call, not the threads). */
static void split_setup(run_ctx *x) {
    const oc_attn_call *a = x->a;
    x->split = a->n_q <= SPLIT_MAX_Q && a->n_kv >= 2 * SPLIT_MIN_KEYS;
    x->chunk_keys = x->n_chunks = 0;
    if (x->split) {
        int32_t per_chunk = (a->n_kv + SPLIT_MAX_CHUNKS - 1) / SPLIT_MAX_CHUNKS;
        x->chunk_keys = OC_MAX(SPLIT_MIN_KEYS, ALIGN_UP(per_chunk, TILE_K));
        x->n_chunks = (a->n_kv + x->chunk_keys - 1) / x->chunk_keys;
    }
}

/* Kv head g's own call of a call with per-kv-head held keys (attn_call.h kv_held): its key range and
 * query positions, and its own split, exactly those of the call of that kv head alone, so the
 * results are that call's bit for bit. *xg refers to *ag. */
static void held_view(const run_ctx *x, int32_t g, oc_attn_call *ag, run_ctx *xg) {
    *ag = *x->a;
    ag->n_kv = x->a->kv_held[g] + x->a->n_q;
    ag->q_offset = x->a->kv_held[g];
    ag->kv_held = NULL;
    *xg = *x;
    xg->a = ag;
    split_setup(xg);
}

/* Tasks of one kv head (or of each kv head, without held keys): its key chunks, or its query tiles. */
static int64_t group_tasks(const run_ctx *x) { return x->split ? x->n_chunks : x->n_q_tiles; }

static void task_run(const run_ctx *x, work *w, int32_t g, int32_t step) {
    const oc_attn_call *a = x->a;
    if (x->split) {
        int32_t kw0 = step * x->chunk_keys;
        do_group(x, w, g, 0, a->n_q, kw0, OC_MIN(a->n_kv, kw0 + x->chunk_keys), step);
    } else {
        int32_t i0 = (x->n_q_tiles - 1 - step) * x->g.task_q;   /* last (largest causal) blocks first */
        do_group(x, w, g, i0, OC_MIN(a->n_q, i0 + x->g.task_q), 0, a->n_kv, -1);
    }
}

static void task_fn(void *ctx, int64_t task, int thread) {
    const run_ctx *x = ctx;
    const oc_attn_call *a = x->a;
    work w = work_at(x, thread);
    if (a->kv_held) {   /* kv head by kv head, each its own tasks (a few copies of the call per task) */
        for (int32_t g = 0; g < a->n_head_kv; g++) {
            oc_attn_call ag;
            run_ctx xg;
            held_view(x, g, &ag, &xg);
            if (task < group_tasks(&xg)) {
                task_run(&xg, &w, g, (int32_t)task);
                return;
            }
            task -= group_tasks(&xg);
        }
        return;
    }
    int32_t g = (int32_t)(task % a->n_head_kv), step = (int32_t)(task / a->n_head_kv);
    task_run(x, &w, g, step);
}

/* Flash-decoding merge for head `task`: combine the chunks' (m, l, o) in chunk order. */
static void merge_fn(void *ctx, int64_t task, int thread) {
    (void)thread;
    const run_ctx *x = ctx;
    const oc_attn_call *a = x->a;
    int32_t h = (int32_t)task, d = a->head_dim;
    int64_t slot_floats = x->dpad + 2, chunk_stride = (int64_t)a->n_head * a->n_q * slot_floats;
    int32_t n_chunks = x->n_chunks;
    if (a->kv_held) {   /* the head's kv head split its own keys, or wrote its outputs itself */
        oc_attn_call ag;
        run_ctx xg;
        held_view(x, h / x->g.n_rep, &ag, &xg);
        if (!xg.split) return;
        n_chunks = xg.n_chunks;
    }
    for (int32_t i = 0; i < a->n_q; i++) {
        const float *first = x->partials + ((int64_t)h * a->n_q + i) * slot_floats;
        float *dst = x->out + (int64_t)i * a->out_stride_token + (int64_t)h * a->out_stride_head;
        float mx = -INFINITY;
        for (int32_t c = 0; c < n_chunks; c++) {
            const float *s = first + c * chunk_stride;
            if (s[1] > 0.0f && s[0] > mx) mx = s[0];
        }
        for (int32_t k = 0; k < d; k++) dst[k] = 0.0f;
        if (mx == -INFINITY) continue;   /* every key masked */
        float sum = 0.0f;
        for (int32_t c = 0; c < n_chunks; c++) {
            const float *s = first + c * chunk_stride;
            if (!(s[1] > 0.0f)) continue;
            float f = exp2f(s[0] - mx);
            sum += s[1] * f;
            for (int32_t k = 0; k < d; k++) dst[k] += f * s[2 + k];
        }
        float inv = 1.0f / sum;
        for (int32_t k = 0; k < d; k++) dst[k] *= inv;
    }
}

/* ---- entry point -------------------------------------------------------------------------------------- */

oc_status oc_attn_check_call(const oc_attn_call *a, const oc_attn_host *mem, int need_index, oc_error *err) {
    oc_status st = oc_mask_check(a, "attn", err);
    if (st == OC_OK) st = oc_mask_check_dyn(a, need_index, "attn", err);
    if (st != OC_OK) return st;
    if (!mem) return oc_fail(err, OC_ERR_INVALID, "attn: no tensors");
    if (a->n_q > 0 && (!mem->q || !mem->out)) return oc_fail(err, OC_ERR_INVALID, "attn: q or out is NULL");
    if (a->n_kv > 0 && (!mem->k || !mem->v)) return oc_fail(err, OC_ERR_INVALID, "attn: k or v is NULL");
    if (a->q_off < 0 || a->k_off < 0 || a->v_off < 0 || a->out_off < 0 || (a->k_shared && a->k_shared_off < 0))
        return oc_fail(err, OC_ERR_INVALID, "attn: a negative tensor offset");
    return OC_OK;
}

oc_status oc_attn_run(const oc_attn_call *a, const oc_attn_host *mem, oc_isa isa, oc_pool *pool, void *scratch,
                      size_t scratch_bytes, oc_attn_stats *stats, oc_error *err) {
    oc_status st = oc_attn_check_call(a, mem, 1, err);
    if (st != OC_OK) return st;
    const oc_attn_kernels *kern = oc_attn_kernels_for(isa);
    if (!kern) return oc_fail(err, OC_ERR_UNSUPPORTED, "attn: no %s kernels in this build", oc_isa_name(isa));
#if OC_BUILT_AVX512
    if (a->bf16_products && isa == OC_ISA_AVX512) {   /* the products on vdpbf16ps where it is fast (attn_call.h) */
        oc_cpu_features cpu;
        oc_port_cpu_features(&cpu);
        if (cpu.avx512bf16 && cpu.bf16_fast) kern = oc_attn_kernels_avx512_bf16();
    }
#endif
    int n_threads = oc_pool_n_threads(pool);
    oc_attn_dims dims = { a->n_q, a->n_kv, a->n_head, a->n_head_kv, a->head_dim };
    run_ctx x;
    memset(&x, 0, sizeof x);
    size_t need = oc_attn_scratch_bytes(&dims, n_threads);
    if (!need || !geom_init(&x.g, &dims, n_threads))
        return oc_fail(err, OC_ERR_INVALID, "attn: scratch size overflows for these dimensions");
    if (!scratch || scratch_bytes < need || (uintptr_t)scratch % OC_MEM_ALIGN)
        return oc_fail(err, OC_ERR_INVALID,
                       "attn: scratch of %zu bytes (aligned: %d) but this call needs %zu aligned bytes",
                       scratch_bytes, scratch ? (int)((uintptr_t)scratch % OC_MEM_ALIGN == 0) : 0, need);
    if (a->n_q == 0) return OC_OK;

    x.a = a;
    x.kern = kern;
    x.elem_bytes = a->kv_dtype == OC_DTYPE_F16 ? 2 : 4;
    x.q = mem->q + a->q_off;
    x.out = mem->out + a->out_off;
    x.k = (const unsigned char *)mem->k + a->k_off * x.elem_bytes;
    x.k_shared = a->k_shared ? (const unsigned char *)mem->k + a->k_shared_off * x.elem_bytes : NULL;
    x.v = (const unsigned char *)mem->v + a->v_off * x.elem_bytes;
    x.dpad = ALIGN_UP(a->head_dim, kern->vec);
    x.n_q_tiles = (a->n_q + x.g.task_q - 1) / x.g.task_q;
    x.qscale = a->scale * LOG2E;
    x.partials = (float *)scratch;
    x.threads = (unsigned char *)scratch + x.g.partial_bytes;
    split_setup(&x);
    for (int t = 0; t < n_threads; t++) {
        uint64_t *count = (uint64_t *)(x.threads + (size_t)t * x.g.thread_bytes + x.g.off_count);
        count[0] = count[1] = 0;
    }

    int64_t n_tasks = (int64_t)a->n_head_kv * group_tasks(&x);
    uint64_t dense = 0;
    int any_split = x.split;
    if (a->kv_held) {   /* each kv head its own tasks and base mask (attn_call.h) */
        n_tasks = 0;
        any_split = 0;
        for (int32_t g = 0; g < a->n_head_kv; g++) {
            oc_attn_call ag;
            run_ctx xg;
            held_view(&x, g, &ag, &xg);
            n_tasks += group_tasks(&xg);
            any_split |= xg.split;
            dense += oc_mask_base_pairs(&ag, 0) * (uint64_t)x.g.n_rep;
        }
    } else if (stats) {
        dense = oc_mask_base_pairs_all(a);
    }
    oc_pool_run(pool, n_tasks, task_fn, &x);
    if (any_split) oc_pool_run(pool, a->n_head, merge_fn, &x);

    if (stats) {
        uint64_t kept = 0, executed = 0;
        for (int t = 0; t < n_threads; t++) {
            const uint64_t *count = (const uint64_t *)(x.threads + (size_t)t * x.g.thread_bytes + x.g.off_count);
            kept += count[0];
            executed += count[1];
        }
        uint64_t per_pair = 4 * (uint64_t)a->head_dim;
        stats->flops_kept += kept * per_pair;
        stats->flops_skipped += (dense > kept ? dense - kept : 0) * per_pair;
        stats->flops_executed += executed * per_pair;
    }
    return OC_OK;
}

/* Only the ISA files this build links (isa_built.h) are referenced. */
const oc_attn_kernels *oc_attn_kernels_for(oc_isa isa) {
    switch (isa) {
    case OC_ISA_SCALAR: return oc_attn_kernels_scalar();
#if OC_BUILT_AVX2
    case OC_ISA_AVX2: return oc_attn_kernels_avx2();
#endif
#if OC_BUILT_AVX512
    case OC_ISA_AVX512: return oc_attn_kernels_avx512();
#endif
#if OC_BUILT_NEON
    case OC_ISA_NEON: return oc_attn_kernels_neon();
#endif
    default: return NULL;
    }
}

oc_pattern_exec oc_attn_pattern_exec(oc_pattern_kind k) {
    switch (k) {
    case OC_PATTERN_SINK:
    case OC_PATTERN_INTRA_IMAGE:
    case OC_PATTERN_INTRA_IMAGE_SINK:
    case OC_PATTERN_A_SHAPE: return OC_EXEC_SPARSE;
    case OC_PATTERN_VERTICAL_SLASH:
    case OC_PATTERN_GRID:
    case OC_PATTERN_Q_BOUNDARY:
    case OC_PATTERN_BOUNDARY_2D: return OC_EXEC_PREFILL;
    default: return OC_EXEC_DENSE;
    }
}

const char *oc_attn_kernels_name(oc_isa isa) {
    const oc_attn_kernels *k = oc_attn_kernels_for(isa);
    return k ? k->name : NULL;
}
