/* cl_attn.c: the host side of OpenCL attention (cl_attn.h): the query runs, the image table, the
 * stacked / split decisions, argument checks and the launches of opencl/kernels/attn.cl; for
 * MMInference's prefill heads (Vertical-Slash, Grid, Q-Boundary, 2D-Boundary) the estimate
 * (opencl/kernels/dyn.cl), the index choice (Vertical-Slash parts on the device: dyn.cl
 * oc_dyn_choose, oc_cl_attn_run_indexed; Grid on the host: the CPU's oc_dyn_choose) and the tables
 * the kernel's second launch reads: per head a flag, the parts, the row lists grouped by shared
 * key sets. */

/* Query runs (prepare): rows are cut wherever the class of a row changes (a segment or image
 * edge: attention/mask.h oc_mask_classify, the CPU engine's classes), and after BQ rows (plain mode) or BQ / heads-per-kv-head
 * rows (stacked mode), so every work-group sees rows of one class. A run is RUN_INTS ints:
 * i0, len, c0, c1 (the base mask's key range of the class: the segment, or [0, n_kv)), image (the
 * rows' image or -1). The cuts do not depend on the head patterns, so one prepare serves every
 * layer of a forward pass; a prepare that repeats the last geometry uploads nothing.
 * Stacked mode (n_q x heads per kv head <= BQ, i.e. decode): one work-group per (run, kv head)
 * takes every query head of the group, so each K/V tile is read once for the group.
 * Split (flash-decoding, at most SPLIT_MAX_Q rows): when the work-groups would not fill the
 * device, the keys are cut into chunks of whole tiles and oc_attn_merge combines them.
 * Launch: dimension 0 is (run, unit) with the unit fastest and the longest runs first (a model of
 * the H100's in-order hand-out of 660 work-group slots put the old head-major order's tail at a
 * time/FLOP ratio of 1.32 for the 8 x 1024 sparse plan, 1.18 at 16 x 2048 as measured; this
 * order ~1.0); dimension 2 is the key chunk. The tile shape is the device's (cl_device.h). */
#include "opencl/cl_attn.h"
#include "opencl/cl_internal.h"
#include "attention/mask.h"
#include "port/port.h"

#include <stdlib.h>
#include <string.h>

#define RUN_INTS 7   /* i0, len, c0, c1, image, step, head (-1: every unit of the launch) */
#define IMG_INTS 3
#define PART_INTS 8  /* opencl/kernels/attn.cl: kind, 4 ints per kind, the stream (perm at, n_coord), 0 */
#define DYN_VS 1
#define DYN_GRID 2
#define DYN_ALL 3
#define DYN_ASHAPE 4
#define N_SLOTS (OC_N_MODALITIES * OC_N_MODALITIES)   /* index slots per head: modalities or pairs */
#define DYN_GRID_CLASSES 1024   /* residue classes per grid head the run table holds (Table 3's max stride) */
#define EST_ROWS 64             /* opencl/kernels/dyn.cl: rows and keys per estimate work-group */
#define EST_SUB 32
#define EST_TAB_INTS (2 * EST_ROWS + 1 + 2 * DIAG_INTS)   /* per job: its rows, its head, 2 diagonal entries */
#define DIAG_INTS 6             /* dyn.cl oc_dyn_diag: job, perm offset, has perm, n_coord, n_diag, score offset */
/* The device memory one job of a batched estimate may take (its 64 x n_kv probabilities
 * dominate): a batch holds every job of a layer (n_head x 2 modalities at most) unless that passes
 * this, then it runs in several batches, each one read-back. 64 MiB holds 16 jobs at 16K keys. */
#define EST_BATCH_BYTES ((size_t)64 << 20)
#define SPLIT_MAX_Q 4
#define SPLIT_MIN_KEYS 256
/* A GPU's shortest chunk. With 256 a decode over a few hundred keys ran on one work-group per kv
 * head (2 on the 2B model) while the H100's 132 compute units waited: its decode fell from 131 to
 * 90 tok/s between 64 and 420 keys. A CPU device (PoCL) has a few compute units and keeps 256. */
#define SPLIT_MIN_KEYS_GPU 64
#define SPLIT_MAX_CHUNKS 64
#define DECODE_WG 64   /* opencl/kernels/decode.cl DEC_WG */
/* The host staging ring of the per-call tables' uploads (stage_table): 64 KiB, about 2,300 decode
 * run tables between two waits for the queue. */
#define STAGE_BYTES (64 * 1024)
#define POS_LIMIT 0x3fffffff   /* positions stay below the kernel's "unbounded" window edge */
#define CH_INTS 12              /* opencl/kernels/dyn.cl oc_dyn_choose: one entry */
#define CH_WG 256               /* ... and its work-group */
#define CH_SLOT_INTS 3          /* a device-chosen part's place in the tables: part, columns, runs */
#define CH_CACHE (9 * 1024)     /* ... and the keys of a round it keeps in local memory (36 KiB) */

struct oc_cl_attn {
    oc_cl_device *dev;
    oc_cl_attn_limits lim;
    int32_t bq, bk, wg, cg;          /* rows per work-group, keys per tile, items, key groups */
    int32_t dyn_bq;                  /* rows per work-group of the prefill heads' launch: 64 with its own
                                        build (OC_CLK_ATTN_DYN) where the device has one and the head
                                        dim's local memory fits, else bq */
    int32_t runs_cap, items_cap;
    int32_t *runs, *img;             /* host copies: [runs_cap][RUN_INTS], [max(1, images)][IMG_INTS] */
    int32_t *runs_up, *img_up;       /* what runs_buf / img_buf hold, as runs and img */
    int32_t n_runs_up, n_images_up;  /* their counts; -1: unknown (upload them) */
    oc_token_span *segs;             /* [max(1, max_segments)]: the prepared call's segments */
    oc_cl_buf *runs_buf, *img_buf, *partials_buf, *counts_buf;
    uint32_t *counts;                /* [items_cap][2] host copy for stats */
    int32_t pat_cap, pat_used, pat_next;   /* host pattern sets: slots, slots filled, next to reuse */
    int32_t *pat_host;               /* [pat_cap][n_head][OC_CL_PATTERN_INTS], mirrored in pat_buf */
    oc_cl_buf *pat_buf;
    int32_t force_chunks, forced_for;
    /* MMInference's prefill heads (lim.max_n_kv > 0 and max_n_q >= 64; else all NULL / 0) */
    int32_t dyn_cap, hruns_cap, n_hruns, part_w;
    int32_t *dyn_host;               /* [dyn_cap]: per head a flag, the key permutation, then parts,
                                        columns, diagonal runs and row lists */
    int32_t *hruns;                  /* [hruns_cap][RUN_INTS]: the second launch's runs */
    oc_dyn_head *dyn_heads;          /* [n_head][2 + N_SLOTS]: heads, heads_vision, pairs of the index
                                        oc_cl_attn_dyn_build chose */
    int32_t *dyn_idx;                /* [n_head][N_SLOTS][3 max_n_kv]: its arrays */
    int32_t *key_perm, *key_rank;    /* [max_n_kv] each: the 2D-Boundary keys' permutation */
    int32_t *est_tab;                /* [est_jobs][EST_TAB_INTS]: a batch's rows (query index, coordinate),
                                        then its heads, then its diagonal entries (dyn.cl) */
    float *est_scores;               /* [est_jobs][5 max_n_kv]: per job its columns, then 2 diagonal arrays */
    int32_t est_jobs, n_est;         /* jobs per batch (est_batch_jobs), jobs queued */
    int32_t *est_job;                /* [est_jobs][4]: head, kind of choice (EST_*), modality, slash */
    float *est_vr;                   /* [est_jobs][max_n_kv]: a 2D pair's columns by rank */
    int32_t *est_work;               /* [est_jobs][2 max_n_kv] */
    double *est_grid;                /* [est_jobs][2 max_n_kv]: each job's choice its own scratch */
    oc_pool *pool;                   /* borrowed, may be NULL: the jobs' choices (est_choose) */
    int32_t *ch_slot;                /* [n_head][N_SLOTS][CH_SLOT_INTS]: where the device writes each
                                        Vertical-Slash part's index (-1: no such part) */
    int32_t *ch_tab;                 /* [2 est_jobs][CH_INTS]: a batch's choice entries (dyn.cl) */
    unsigned char *tring;            /* [tring_bytes]: copies of the tables whose upload is in flight */
    size_t tring_bytes, tring_at;
    struct row_key *row_keys;        /* [max_n_q]: one row group's sort */
    oc_attn_dyn dyn;
    oc_cl_buf *dyn_buf, *hruns_buf, *est_rows_buf, *est_part_buf, *est_scores_buf, *est_prob_buf, *est_perm_buf;
    oc_cl_buf *ch_tab_buf, *ch_scratch_buf;   /* the choice entries; [2 est_jobs][2 max_n_kv] chosen offsets */
    oc_cl_buf *shared_buf;           /* [lim.max_shared_keys] a call's k_shared flags, or NULL */
    oc_cl_buf *acc_buf;              /* [2] ulong: deferred calls' kept and executed pairs */
    int defer_counts, pend;          /* oc_cl_attn_defer_counts; a deferred call since the last take */
    uint64_t pend_dense;             /* the base mask's pairs of the deferred calls, all heads */
    unsigned char *stage;            /* [STAGE_BYTES]: copies of tables whose upload is in flight */
    size_t stage_at;                 /* next free byte of stage */
    /* the prepared call */
    int prepared, causal, stacked;
    oc_attn_mask_kind mask;
    int32_t n_q, n_kv, q_offset, n_segments, n_runs, n_images, n_chunks, chunk_keys;
    uint64_t base_pairs;             /* pairs the base mask keeps, per head */
};

static size_t runs_bytes(const oc_cl_attn *at) { return (size_t)at->runs_cap * RUN_INTS * sizeof(int32_t); }
static size_t img_bytes(const oc_cl_attn *at) { return (size_t)OC_MAX(1, at->lim.max_images) * IMG_INTS * sizeof(int32_t); }
static size_t counts_bytes(const oc_cl_attn *at) { return (size_t)at->items_cap * 2 * sizeof(uint32_t); }
static size_t pat_bytes(const oc_cl_attn *at) { return (size_t)at->pat_cap * at->lim.n_head * OC_CL_PATTERN_INTS * 4; }
static size_t segs_bytes(const oc_cl_attn *at) { return (size_t)OC_MAX(1, at->lim.max_segments) * sizeof(oc_token_span); }
static int has_dyn(const oc_cl_attn *at) { return at->dyn_cap > 0; }

/* Jobs per estimate batch for the limits: a layer's worth, or what EST_BATCH_BYTES holds. */
static int32_t est_batch_jobs(const oc_cl_attn_limits *lim) {
    size_t per = (size_t)EST_ROWS * (size_t)OC_MAX(1, lim->max_n_kv) * 4 * 2;   /* probabilities + the rest, at most */
    size_t fit = EST_BATCH_BYTES / per;
    return (int32_t)OC_MAX(1, OC_MIN((size_t)lim->n_head * N_SLOTS / 2, fit));
}

/* One query row of a second-launch group: the key of the key sets it shares (row_group), then
 * its coordinate. */
typedef struct row_key {
    int64_t key;
    int32_t i, c;
} row_key;

/* the host arrays of the prefill heads, in the order dyn_arrays carves them */
static size_t nkv1(const oc_cl_attn *at) { return (size_t)OC_MAX(1, at->lim.max_n_kv); }
static size_t nkv3(const oc_cl_attn *at) { return 3 * nkv1(at); }
static size_t dyn_bytes(const oc_cl_attn *at) {
    if (!has_dyn(at)) return 0;
    size_t nh = (size_t)at->lim.n_head, n = nkv1(at), J = (size_t)est_batch_jobs(&at->lim);
    return J * n * 2 * 8 + (size_t)at->lim.max_n_q * sizeof(row_key) + nh * (2 + N_SLOTS) * sizeof(oc_dyn_head) +
           (size_t)at->dyn_cap * 4 + (size_t)at->hruns_cap * RUN_INTS * 4 + nh * N_SLOTS * nkv3(at) * 4 +
           2 * n * 4 + J * (EST_TAB_INTS + 4) * 4 + J * 5 * n * 4 + J * n * 4 + J * 2 * n * 4 +
           nh * N_SLOTS * CH_SLOT_INTS * 4 + 2 * J * CH_INTS * 4;
}

/* The table ring (ring_table): two of the largest tables a call can have. A call fills a small
 * part of its room (0.3 of 1.8 MiB on the long model at 4,361 tokens), so a forward pass waits
 * about once every six layers. Four (no wait in the long model's 12 layers) made the host figure
 * of a small model's OpenCL context larger than its CPU context's. */
static size_t tring_bytes_of(const oc_cl_attn *at) {
    return has_dyn(at) ? 2 * ((size_t)at->dyn_cap * 4 + (size_t)at->hruns_cap * RUN_INTS * 4) : 0;
}

/* The table sizes for limits lim and bq query rows per work-group. */
static void size_tables(oc_cl_attn *at, const oc_cl_attn_limits *lim, int32_t bq) {
    at->lim = *lim;
    /* every run ends at a multiple of bq rows or at one of <= 2 edges per image and segment */
    at->runs_cap = lim->max_n_q / bq + 2 * (lim->max_images + lim->max_segments) + 2;
    at->pat_cap = OC_MAX(1, OC_MIN(OC_CL_ATTN_PATTERN_SETS, 65536 / OC_MAX(1, lim->n_head)));
    at->dyn_cap = at->hruns_cap = 0;
    if (lim->max_n_q >= OC_DYN_LAST_Q && lim->max_n_kv > 0) {
        /* per head: a flag, up to N_SLOTS parts, a row list (2 ints per query row), the columns
         * (<= n_kv per query modality: a 2D-Boundary row's key modalities share the keys) and the
         * merged diagonal runs (each at least 64 coordinates long: <= 2 n_kv / 65 + 2 per part, 2 ints
         * each); once: the key permutation */
        at->dyn_cap = lim->n_head * (1 + N_SLOTS * PART_INTS + 2 * lim->max_n_q + 2 * lim->max_n_kv +
                                     lim->max_n_kv / 4 + 32) + lim->max_n_kv;
        /* per head: runs of at most bq rows of one group; groups: per modality a Vertical-Slash block
         * (64 coordinates), a Grid residue class (up to DYN_GRID_CLASSES of them), an A-shape
         * stretch between images */
        at->hruns_cap = lim->n_head * (lim->max_n_q / bq + 2 * (lim->max_n_q / OC_DYN_BLOCK + 2) +
                                       2 * OC_MIN(lim->max_n_q, DYN_GRID_CLASSES) + 2 * lim->max_images + 8);
    }
    at->items_cap = OC_MAX(at->runs_cap, SPLIT_MAX_Q * SPLIT_MAX_CHUNKS) * lim->n_head + at->hruns_cap;
}

/* The tables are sized for tiles of TABLE_BQ query rows (the smallest any device gets: the most
 * runs) whatever the device's tile, so their host bytes follow from the limits alone and
 * oc_cl_attn_host_bytes is exact before a device is open. */
#define TABLE_BQ 16

size_t oc_cl_attn_host_bytes(const oc_cl_attn_limits *lim) {
    oc_cl_attn at;
    memset(&at, 0, sizeof at);
    size_tables(&at, lim, TABLE_BQ);
    size_t total = 6 * oc_cl_buf_host_bytes();   /* runs, img, partials, counts, pat, acc on the device */
    oc_add_block(&total, sizeof at);
    oc_add_block(&total, runs_bytes(&at));
    oc_add_block(&total, img_bytes(&at));
    oc_add_block(&total, runs_bytes(&at));   /* runs_up, img_up */
    oc_add_block(&total, img_bytes(&at));
    oc_add_block(&total, counts_bytes(&at));
    oc_add_block(&total, segs_bytes(&at));
    oc_add_block(&total, pat_bytes(&at));
    oc_add_block(&total, STAGE_BYTES);
    if (lim->max_shared_keys > 0) total += oc_cl_buf_host_bytes();   /* the k_shared flags */
    if (has_dyn(&at)) {   /* the prefill heads' host block, the table ring and 9 device buffers */
        total += 9 * oc_cl_buf_host_bytes();
        oc_add_block(&total, dyn_bytes(&at));
        oc_add_block(&total, tring_bytes_of(&at));
    }
    return total;
}

/* Carve the dynamic heads' host arrays from one aligned block of dyn_bytes: doubles and the
 * pointer-holding heads first, then the int32 / float arrays. */
static void dyn_arrays(oc_cl_attn *at, unsigned char *b) {
    size_t nh = (size_t)at->lim.n_head, n = nkv1(at), J = (size_t)est_batch_jobs(&at->lim);
    at->est_grid = (double *)b;
    b += J * n * 2 * 8;
    at->row_keys = (row_key *)b;
    b += (size_t)at->lim.max_n_q * sizeof(row_key);
    at->dyn_heads = (oc_dyn_head *)b;
    b += nh * (2 + N_SLOTS) * sizeof(oc_dyn_head);
    at->dyn_host = (int32_t *)b;
    b += (size_t)at->dyn_cap * 4;
    at->hruns = (int32_t *)b;
    b += (size_t)at->hruns_cap * RUN_INTS * 4;
    at->dyn_idx = (int32_t *)b;
    b += nh * N_SLOTS * nkv3(at) * 4;
    at->key_perm = (int32_t *)b;
    at->key_rank = at->key_perm + n;
    b += 2 * n * 4;
    at->est_jobs = est_batch_jobs(&at->lim);
    at->est_tab = (int32_t *)b;
    b += (size_t)at->est_jobs * EST_TAB_INTS * 4;
    at->est_job = (int32_t *)b;
    b += (size_t)at->est_jobs * 4 * 4;
    at->est_scores = (float *)b;
    b += (size_t)at->est_jobs * 5 * n * 4;
    at->est_vr = (float *)b;
    b += J * n * 4;
    at->est_work = (int32_t *)b;
    b += J * 2 * n * 4;
    at->ch_slot = (int32_t *)b;
    b += nh * N_SLOTS * CH_SLOT_INTS * 4;
    at->ch_tab = (int32_t *)b;
}

/* floats of one local row of Q or K/V: an odd number of float4s, so rows start on other banks */
static size_t local_row_floats(int32_t head_dim) { return (size_t)(((head_dim + 3) / 4) | 1) * 4; }

void oc_cl_attn_close(oc_cl_attn *at) {
    if (!at) return;
    const oc_allocator *alloc = at->dev->alloc;
    if (at->stage) oc_cl_finish(at->dev, NULL);   /* no upload may still read the ring or the tables */
    oc_cl_buf_free(at->runs_buf);
    oc_cl_buf_free(at->img_buf);
    oc_cl_buf_free(at->partials_buf);
    oc_cl_buf_free(at->counts_buf);
    oc_cl_buf_free(at->pat_buf);
    oc_cl_buf_free(at->dyn_buf);
    oc_cl_buf_free(at->hruns_buf);
    oc_cl_buf_free(at->est_rows_buf);
    oc_cl_buf_free(at->est_part_buf);
    oc_cl_buf_free(at->est_scores_buf);
    oc_cl_buf_free(at->est_prob_buf);
    oc_cl_buf_free(at->est_perm_buf);
    oc_cl_buf_free(at->ch_tab_buf);
    oc_cl_buf_free(at->ch_scratch_buf);
    oc_cl_buf_free(at->shared_buf);
    oc_cl_buf_free(at->acc_buf);
    oc_mem_free(alloc, at->est_grid, dyn_bytes(at));
    oc_mem_free(alloc, at->tring, at->tring_bytes);
    oc_mem_free(alloc, at->pat_host, pat_bytes(at));
    oc_mem_free(alloc, at->runs, runs_bytes(at));
    oc_mem_free(alloc, at->img, img_bytes(at));
    oc_mem_free(alloc, at->runs_up, runs_bytes(at));
    oc_mem_free(alloc, at->img_up, img_bytes(at));
    oc_mem_free(alloc, at->counts, counts_bytes(at));
    oc_mem_free(alloc, at->segs, segs_bytes(at));
    if (at->stage) oc_mem_free(alloc, at->stage, STAGE_BYTES);
    oc_mem_free(alloc, at, sizeof *at);
}

oc_status oc_cl_attn_open(oc_cl_attn **out, oc_cl_device *dev, const oc_cl_attn_limits *lim, oc_error *err) {
    *out = NULL;
    if (!lim || lim->max_n_q < 1 || lim->max_n_q > POS_LIMIT || lim->n_head < 1 || lim->n_head_kv < 1 ||
        lim->n_head % lim->n_head_kv || lim->head_dim < 1 || lim->max_images < 0 || lim->max_segments < 0 ||
        lim->max_images > (1 << 20) || lim->max_segments > (1 << 20) || lim->n_head > (1 << 16) ||
        lim->max_n_kv < 0 || lim->max_n_kv > POS_LIMIT / 4)
        return oc_fail(err, OC_ERR_INVALID, "opencl attn: bad limits (rows >= 1, heads a multiple of kv heads, "
                       "head_dim >= 1, images and segments >= 0)");
    if (lim->head_dim > OC_CL_ATTN_MAX_HEAD_DIM)
        return oc_fail(err, OC_ERR_UNSUPPORTED, "opencl attn: head_dim %d above the kernel's %d", (int)lim->head_dim,
                       OC_CL_ATTN_MAX_HEAD_DIM);
    const oc_cl_caps *c = oc_cl_device_caps(dev);
    int32_t bq = c->attn_row_groups * c->attn_rows_per_item, bk = c->attn_key_groups * c->attn_keys_per_item;
    int32_t wg = c->attn_row_groups * c->attn_key_groups;
    size_t local = oc_cl_attn_local_bytes(c, lim->head_dim);
    if (local > c->local_mem_bytes)
        return oc_fail(err, OC_ERR_UNSUPPORTED, "opencl attn: head_dim %d needs %zu bytes of local memory (tile %d x %d); "
                       "%s has %llu", (int)lim->head_dim, local, (int)bq, (int)bk, c->device,
                       (unsigned long long)c->local_mem_bytes);
    if (oc_cl_kernel_wg_size(dev, OC_CLK_ATTN) < (size_t)wg)
        return oc_fail(err, OC_ERR_UNSUPPORTED, "opencl attn: %s runs the attention kernel with at most %zu items "
                       "per work-group; it needs %d", c->device, oc_cl_kernel_wg_size(dev, OC_CLK_ATTN), (int)wg);
    oc_cl_attn *at = oc_mem_calloc(dev->alloc, sizeof *at);
    if (!at) return oc_fail(err, OC_ERR_NOMEM, "opencl attn: out of memory");
    at->dev = dev;
    at->bq = bq;
    at->bk = bk;
    at->wg = wg;
    at->cg = c->attn_key_groups;
    at->dyn_bq = bq;
    if (c->attn_dyn_rows_per_item && oc_cl_kernel_wg_size(dev, OC_CLK_ATTN_DYN) >= (size_t)wg) {
        oc_cl_caps dc = *c;
        dc.attn_rows_per_item = c->attn_dyn_rows_per_item;
        if (oc_cl_attn_local_bytes(&dc, lim->head_dim) <= c->local_mem_bytes)
            at->dyn_bq = c->attn_row_groups * c->attn_dyn_rows_per_item;
    }
    size_tables(at, lim, OC_MIN(bq, TABLE_BQ));
    at->runs = oc_mem_alloc(dev->alloc, runs_bytes(at));
    at->img = oc_mem_calloc(dev->alloc, img_bytes(at));
    at->runs_up = oc_mem_alloc(dev->alloc, runs_bytes(at));
    at->img_up = oc_mem_alloc(dev->alloc, img_bytes(at));
    at->n_runs_up = at->n_images_up = -1;
    at->counts = oc_mem_alloc(dev->alloc, counts_bytes(at));
    at->segs = oc_mem_alloc(dev->alloc, segs_bytes(at));
    at->pat_host = oc_mem_alloc(dev->alloc, pat_bytes(at));
    at->stage = oc_mem_alloc(dev->alloc, STAGE_BYTES);
    oc_status st = OC_OK;
    if (!at->runs || !at->img || !at->runs_up || !at->img_up || !at->counts || !at->segs || !at->pat_host || !at->stage)
        st = oc_fail(err, OC_ERR_NOMEM, "opencl attn: out of memory");
    size_t partials = (size_t)SPLIT_MAX_CHUNKS * lim->n_head * OC_MIN(lim->max_n_q, SPLIT_MAX_Q) * (lim->head_dim + 2) * 4;
    if (st == OC_OK) st = oc_cl_buf_alloc(dev, runs_bytes(at), &at->runs_buf, err);
    if (st == OC_OK) st = oc_cl_buf_alloc(dev, img_bytes(at), &at->img_buf, err);
    if (st == OC_OK) st = oc_cl_buf_alloc(dev, partials, &at->partials_buf, err);
    if (st == OC_OK) st = oc_cl_buf_alloc(dev, counts_bytes(at), &at->counts_buf, err);
    if (st == OC_OK) st = oc_cl_buf_alloc(dev, pat_bytes(at), &at->pat_buf, err);
    if (st == OC_OK) st = oc_cl_buf_alloc(dev, 16, &at->acc_buf, err);
    if (st == OC_OK) st = oc_cl_fill32(dev, at->acc_buf, 0, 0, 16, err);
    if (st == OC_OK && lim->max_shared_keys > 0)
        st = oc_cl_buf_alloc(dev, (size_t)lim->max_shared_keys, &at->shared_buf, err);
    if (st == OC_OK && has_dyn(at)) {
        unsigned char *block = oc_mem_alloc(dev->alloc, dyn_bytes(at));
        if (!block) st = oc_fail(err, OC_ERR_NOMEM, "opencl attn: out of memory for the dynamic heads' index");
        else dyn_arrays(at, block);
        size_t nh = (size_t)lim->n_head, n_kv = (size_t)lim->max_n_kv;
        at->part_w = (lim->max_n_kv + EST_ROWS - 1) / EST_ROWS;
        if (st == OC_OK) st = oc_cl_buf_alloc(dev, (size_t)at->dyn_cap * 4, &at->dyn_buf, err);
        if (st == OC_OK) st = oc_cl_buf_alloc(dev, (size_t)at->hruns_cap * RUN_INTS * 4, &at->hruns_buf, err);
        (void)nh;
        size_t J = (size_t)est_batch_jobs(lim);   /* a batch of estimate jobs (est_tab) */
        if (st == OC_OK) st = oc_cl_buf_alloc(dev, J * EST_TAB_INTS * 4, &at->est_rows_buf, err);
        if (st == OC_OK) st = oc_cl_buf_alloc(dev, J * (size_t)at->part_w * EST_ROWS * 8, &at->est_part_buf, err);
        if (st == OC_OK) st = oc_cl_buf_alloc(dev, J * 5 * n_kv * 4, &at->est_scores_buf, err);
        if (st == OC_OK) st = oc_cl_buf_alloc(dev, J * EST_ROWS * n_kv * 4, &at->est_prob_buf, err);
        if (st == OC_OK) st = oc_cl_buf_alloc(dev, n_kv * 4, &at->est_perm_buf, err);
        if (st == OC_OK) st = oc_cl_buf_alloc(dev, 2 * J * CH_INTS * 4, &at->ch_tab_buf, err);
        if (st == OC_OK) st = oc_cl_buf_alloc(dev, 2 * J * 2 * n_kv * 4, &at->ch_scratch_buf, err);
        if (st == OC_OK) {
            at->tring_bytes = tring_bytes_of(at);
            if (!(at->tring = oc_mem_alloc(dev->alloc, at->tring_bytes)))
                st = oc_fail(err, OC_ERR_NOMEM, "opencl attn: out of memory for the tables' ring");
        }
    }
    if (st != OC_OK) {
        oc_cl_attn_close(at);
        return st;
    }
    *out = at;
    return OC_OK;
}

void oc_cl_attn_force_split(oc_cl_attn *at, int32_t n_chunks) { at->force_chunks = OC_MAX(0, n_chunks); }

uint64_t oc_cl_attn_base_pairs(const oc_cl_attn *at) { return at->prepared ? at->base_pairs : 0; }

int32_t oc_cl_attn_dyn_rows(const oc_cl_attn *at) { return at->dyn_bq; }

/* ---- prepare ---------------------------------------------------------------------------------------------- */

/* The mask description (mask.h), then what this context and its kernel can take. */
static oc_status check_shape(const oc_cl_attn *at, const oc_attn_call *s, oc_error *err) {
    oc_status st = oc_mask_check(s, "opencl attn", err);
    if (st != OC_OK) return st;
    if (s->kv_held)   /* per-kv-head held keys (attn_call.h): the CPU engine's; the text model sends them only there */
        return oc_fail(err, OC_ERR_UNSUPPORTED, "opencl attn: per-kv-head held keys (kv_held) run on the CPU");
    if (s->n_kv >= POS_LIMIT || (int64_t)s->q_offset + s->n_q >= POS_LIMIT)
        return oc_fail(err, OC_ERR_INVALID, "opencl attn: n_q %d, n_kv %d, q_offset %d out of range", (int)s->n_q,
                       (int)s->n_kv, (int)s->q_offset);
    if (s->n_head != at->lim.n_head || s->n_head_kv != at->lim.n_head_kv || s->head_dim != at->lim.head_dim)
        return oc_fail(err, OC_ERR_INVALID, "opencl attn: %d heads (%d kv) of %d, opened for %d (%d) of %d",
                       (int)s->n_head, (int)s->n_head_kv, (int)s->head_dim, (int)at->lim.n_head,
                       (int)at->lim.n_head_kv, (int)at->lim.head_dim);
    if (s->n_q > at->lim.max_n_q)
        return oc_fail(err, OC_ERR_RANGE, "opencl attn: %d query rows above the limit %d", (int)s->n_q, (int)at->lim.max_n_q);
    if (s->mask == OC_ATTN_EXPLICIT)
        return oc_fail(err, OC_ERR_UNSUPPORTED, "opencl attn: the explicit debug mask runs on the CPU only");
    if (s->mask == OC_ATTN_SEGMENTS) {
        if (s->n_segments > at->lim.max_segments)
            return oc_fail(err, OC_ERR_RANGE, "opencl attn: %d segments above the limit %d", (int)s->n_segments,
                           (int)at->lim.max_segments);
        if (s->n_segments > 0 && s->segments[s->n_segments - 1].end >= POS_LIMIT)
            return oc_fail(err, OC_ERR_INVALID, "opencl attn: segment %d ends at %d, beyond the kernel's positions",
                           (int)s->n_segments - 1, (int)s->segments[s->n_segments - 1].end);
    }
    if (s->layout && oc_layout_n_images(s->layout) > at->lim.max_images)
        return oc_fail(err, OC_ERR_RANGE, "opencl attn: %d images above the limit %d",
                       (int)oc_layout_n_images(s->layout), (int)at->lim.max_images);
    return OC_OK;
}

/* Cut [0, n_q) into runs of one class (mask.h, for every pattern at once) and at most max_len rows. */
static void build_runs(oc_cl_attn *at, const oc_attn_call *s, int32_t max_len) {
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_q;) {
        oc_mask_class cls;
        int32_t end = oc_mask_classify(s, NULL, i, (int32_t)OC_MIN((int64_t)s->n_q, (int64_t)i + max_len), &cls);
        int32_t *r = at->runs + (size_t)n * RUN_INTS;
        r[0] = i;
        r[1] = end - i;
        r[2] = cls.c0;
        /* a class that reaches the last key: unbounded (the kernel stops at n_kv anyway), so a
         * decode step's table does not change with the key count and stays on the device */
        r[3] = cls.c1 >= s->n_kv ? POS_LIMIT : cls.c1;
        r[4] = cls.image;
        r[5] = 1;
        r[6] = -1;
        n++;
        i = end;
    }
    at->n_runs = n;
}

/* Upload n bytes without waiting for the queue: a copy goes into ring (ring_bytes, *ring_at bytes
 * used) and the write reads it from there, so the host's array can change at once. The ring is
 * reused from its start only after the queue finished (every earlier write has read its copy). */
static oc_status upload_via_ring(oc_cl_attn *at, unsigned char *ring, size_t ring_bytes, size_t *ring_at,
                                 oc_cl_buf *buf, const void *src, size_t n, oc_error *err) {
    if (n > ring_bytes) return oc_cl_upload(at->dev, buf, 0, src, n, err);
    if (*ring_at + n > ring_bytes) {
        oc_status st = oc_cl_finish(at->dev, err);
        if (st != OC_OK) return st;
        *ring_at = 0;
    }
    unsigned char *p = ring + *ring_at;
    memcpy(p, src, n);
    *ring_at += (n + 63) / 64 * 64;
    return oc_cl_upload_nowait(at->dev, buf, 0, p, n, err);
}

/* A per-call table through the staging ring. Decode re-prepares at every call whose key count
 * differs (every token; with a compacted KV cache every kv head of every layer), and a waiting
 * upload drained the GPU's queue each time. */
static oc_status stage_table(oc_cl_attn *at, oc_cl_buf *buf, const void *src, size_t n, oc_error *err) {
    return upload_via_ring(at, at->stage, STAGE_BYTES, &at->stage_at, buf, src, n, err);
}

/* The prefill heads' tables (dyn_host, hruns, the estimate's rows and choice entries, the 2D keys'
 * permutation) through a ring of their own, large enough for a forward pass's layers, so a layer
 * whose index the device chooses queues with no wait. Through stage_table's 64 KiB a layer's
 * estimate tables (about 27 KiB on the long model) drained the queue every other layer. */
static oc_status ring_table(oc_cl_attn *at, oc_cl_buf *buf, const void *src, size_t n, oc_error *err) {
    return upload_via_ring(at, at->tring, at->tring_bytes, &at->tring_at, buf, src, n, err);
}

/* 1 when s is the geometry prepared last (every layer of a forward pass asks for the same one). */
static int same_geometry(const oc_cl_attn *at, const oc_attn_call *s) {
    if (!at->prepared || s->n_q != at->n_q || s->n_kv != at->n_kv || s->q_offset != at->q_offset ||
        s->mask != at->mask || (s->layout ? oc_layout_n_images(s->layout) : 0) != at->n_images)
        return 0;
    if (s->mask == OC_ATTN_SEGMENTS &&
        (s->n_segments != at->n_segments ||
         (s->n_segments && memcmp(s->segments, at->segs, (size_t)s->n_segments * sizeof *s->segments))))
        return 0;
    for (int32_t g = 0; g < at->n_images; g++) {
        oc_token_span sp = oc_layout_image_span(s->layout, g);
        if (at->img[g * IMG_INTS] != sp.start || at->img[g * IMG_INTS + 1] != sp.end ||
            at->img[g * IMG_INTS + 2] != oc_layout_image_n_sink(s->layout, g))
            return 0;
    }
    return at->force_chunks == at->forced_for;
}

oc_status oc_cl_attn_prepare(oc_cl_attn *at, const oc_attn_call *s, oc_error *err) {
    oc_status st = check_shape(at, s, err);
    if (st != OC_OK) {
        at->prepared = 0;
        return st;
    }
    if (same_geometry(at, s)) return OC_OK;   /* runs and image table are on the device already */
    at->prepared = 0;
    int32_t n_rep = at->lim.n_head / at->lim.n_head_kv;
    at->stacked = n_rep > 1 && s->n_q >= 1 && s->n_q <= at->bq / n_rep;
    build_runs(at, s, at->stacked ? at->bq / n_rep : at->bq);
    at->n_images = s->layout ? oc_layout_n_images(s->layout) : 0;
    for (int32_t g = 0; g < at->n_images; g++) {
        oc_token_span sp = oc_layout_image_span(s->layout, g);
        at->img[g * IMG_INTS] = sp.start;
        at->img[g * IMG_INTS + 1] = sp.end;
        at->img[g * IMG_INTS + 2] = oc_layout_image_n_sink(s->layout, g);
    }
    /* the key split: only short calls over long caches, and only when the work-groups are few */
    int32_t n_units = at->stacked ? at->lim.n_head_kv : at->lim.n_head;
    int64_t items = (int64_t)at->n_runs * n_units;
    int32_t chunks = 1;
    const oc_cl_caps *caps = oc_cl_device_caps(at->dev);
    int32_t min_keys = caps->is_gpu ? SPLIT_MIN_KEYS_GPU : SPLIT_MIN_KEYS;
    if (s->n_q <= SPLIT_MAX_Q && s->n_kv >= 2 * min_keys) {
        int64_t want = 4 * (int64_t)OC_MAX(caps->compute_units, 1u);
        if (items < want) chunks = (int32_t)OC_MIN((want + items - 1) / OC_MAX(items, 1), (int64_t)SPLIT_MAX_CHUNKS);
        if (at->force_chunks) chunks = OC_MIN(at->force_chunks, SPLIT_MAX_CHUNKS);
        chunks = OC_MIN(chunks, s->n_kv / min_keys);
    } else if (at->force_chunks > 1 && s->n_q <= SPLIT_MAX_Q && s->n_kv >= 2 * at->bk) {
        chunks = OC_MIN(OC_MIN(at->force_chunks, SPLIT_MAX_CHUNKS), s->n_kv / at->bk);
    }
    chunks = OC_MAX(chunks, 1);
    /* whole tiles per chunk */
    int32_t per = (s->n_kv + chunks - 1) / chunks;
    at->chunk_keys = chunks > 1 ? (per + at->bk - 1) / at->bk * at->bk : OC_MAX(s->n_kv, 1);
    at->n_chunks = chunks > 1 ? (s->n_kv + at->chunk_keys - 1) / at->chunk_keys : 1;
    if (at->n_chunks > 1 && at->chunk_keys >= s->n_kv) at->n_chunks = 1;
    at->n_q = s->n_q;
    at->n_kv = s->n_kv;
    at->q_offset = s->q_offset;
    at->mask = s->mask;
    at->n_segments = s->mask == OC_ATTN_SEGMENTS ? s->n_segments : 0;
    if (at->n_segments) memcpy(at->segs, s->segments, (size_t)at->n_segments * sizeof *s->segments);
    at->forced_for = at->force_chunks;
    at->causal = s->mask == OC_ATTN_CAUSAL;
    at->base_pairs = oc_mask_base_pairs(s, 0);
    /* upload what changed: a decode step re-prepares at every call (its key count changes, and a
     * compacted cache's kv heads each have their own), and its tables mostly do not */
    size_t rb = (size_t)at->n_runs * RUN_INTS * sizeof(int32_t), ib = (size_t)at->n_images * IMG_INTS * sizeof(int32_t);
    if (at->n_runs > 0 && (at->n_runs != at->n_runs_up || memcmp(at->runs, at->runs_up, rb))) {
        at->n_runs_up = -1;
        if ((st = stage_table(at, at->runs_buf, at->runs, rb, err)) == OC_OK) {
            memcpy(at->runs_up, at->runs, rb);
            at->n_runs_up = at->n_runs;
        }
    }
    if (st == OC_OK && at->n_images > 0 && (at->n_images != at->n_images_up || memcmp(at->img, at->img_up, ib))) {
        at->n_images_up = -1;
        if ((st = stage_table(at, at->img_buf, at->img, ib, err)) == OC_OK) {
            memcpy(at->img_up, at->img, ib);
            at->n_images_up = at->n_images;
        }
    }
    at->prepared = st == OC_OK;
    return st;
}

/* The ints the kernel reads for one head's pattern (a-shape sizes only for a-shape heads).
 * Prefill heads (Vertical-Slash, Grid, the boundary kinds) are dense in this table: that is what
 * they run in decode, and in prefill the per-call tables (dyn_tables) mark them and the kernel's
 * second launch runs them. */
static void pattern_ints(const oc_head_pattern *q, int32_t *out) {
    out[0] = oc_pattern_is_prefill(q->kind) ? (int32_t)OC_PATTERN_DENSE : (int32_t)q->kind;
    out[1] = q->kind == OC_PATTERN_A_SHAPE ? q->n_sink : 0;
    out[2] = q->kind == OC_PATTERN_A_SHAPE ? q->n_local : 1;
}

oc_status oc_cl_patterns_write(oc_cl_device *dev, oc_cl_buf *buf, int64_t first_head, const oc_head_pattern *p,
                               int32_t n, oc_error *err) {
    int32_t ints[OC_CL_PATTERN_INTS * 64];
    for (int32_t h0 = 0; h0 < n; h0 += 64) {
        int32_t m = OC_MIN(64, n - h0);
        for (int32_t k = 0; k < m; k++) {
            const oc_head_pattern *q = &p[h0 + k];
            if (!oc_pattern_valid(q))
                return oc_fail(err, OC_ERR_INVALID, "opencl attn: head %d has a bad pattern (kind %d, n_sink %d, n_local %d)",
                               (int)(h0 + k), (int)q->kind, (int)q->n_sink, (int)q->n_local);
            pattern_ints(q, ints + k * OC_CL_PATTERN_INTS);
        }
        if (first_head < 0 || first_head > INT32_MAX)
            return oc_fail(err, OC_ERR_RANGE, "opencl attn: pattern head index %lld", (long long)first_head);
        oc_status st = oc_cl_upload(dev, buf, (size_t)(first_head + h0) * OC_CL_PATTERN_INTS * sizeof(int32_t), ints,
                                    (size_t)m * OC_CL_PATTERN_INTS * sizeof(int32_t), err);
        if (st != OC_OK) return st;
    }
    return OC_OK;
}

/* The slot of pattern set p on the device, uploading it (and waiting for that copy) when no slot
 * holds it; -1 when every head is dense. */
static oc_status pattern_slot(oc_cl_attn *at, const oc_head_pattern *p, int32_t *slot, oc_error *err) {
    int32_t nh = at->lim.n_head, ints[OC_CL_PATTERN_INTS];
    *slot = -1;
    int dense = 1;
    for (int32_t h = 0; h < nh && dense; h++) dense = p[h].kind == OC_PATTERN_DENSE || oc_pattern_is_prefill(p[h].kind);
    if (dense) return OC_OK;
    for (int32_t s = 0; s < at->pat_used; s++) {
        const int32_t *have = at->pat_host + (size_t)s * nh * OC_CL_PATTERN_INTS;
        int32_t h = 0;
        for (; h < nh; h++) {
            pattern_ints(&p[h], ints);
            if (memcmp(ints, have + h * OC_CL_PATTERN_INTS, sizeof ints)) break;
        }
        if (h == nh) {
            *slot = s;
            return OC_OK;
        }
    }
    int32_t s = at->pat_used < at->pat_cap ? at->pat_used : at->pat_next++ % at->pat_cap;
    oc_status st = oc_cl_patterns_write(at->dev, at->pat_buf, (int64_t)s * nh, p, nh, err);
    if (st != OC_OK) return st;
    for (int32_t h = 0; h < nh; h++) pattern_ints(&p[h], at->pat_host + ((size_t)s * nh + h) * OC_CL_PATTERN_INTS);
    if (at->pat_used < at->pat_cap) at->pat_used++;
    *slot = s;
    return OC_OK;
}

/* ---- run ---------------------------------------------------------------------------------------------------- */

/* The tensor [off, off + (n_tok - 1) st + (n_head - 1) sh + d) lies in buf (elem_bytes each) and
 * every index fits an int32. */
static int tensor_fits(const oc_cl_buf *buf, int64_t off, int64_t st, int64_t sh, int32_t n_tok, int32_t n_head,
                       int32_t d, size_t elem_bytes) {
    if (!buf || off < 0 || st < 0 || sh < 0 || st > INT32_MAX || sh > INT32_MAX) return 0;
    if (n_tok == 0) return 1;
    int64_t last = (int64_t)(n_tok - 1) * st + (int64_t)(n_head - 1) * sh + d;   /* < 2^63: all factors < 2^31 */
    return oc_cl_fits_i32(off, last) && (uint64_t)(off + last) <= oc_cl_buf_bytes(buf) / elem_bytes;
}

/* ---- prefill heads ------------------------------------------------------------------------------------ */

/* 1 when the call runs prefill heads (VERTICAL_SLASH, GRID, Q_BOUNDARY, BOUNDARY_2D) sparse: attn.h. */
static int call_dynamic(const oc_attn_call *a) {
    for (int32_t h = 0; a->patterns && oc_attn_wants_dyn(a) && h < a->n_head; h++)
        if (oc_pattern_is_prefill(a->patterns[h].kind)) return 1;
    return 0;
}

/* Writes a part at pt_at (its arrays from *used): plain pattern sub (its index dh: NULL or dense:
 * every key) over a stream (perm_at -1: keys by position; n_coord coordinates). A Vertical-Slash
 * part's columns past the stream select nothing and are dropped; its diagonals become runs
 * [b - o, b + B - o) relative to the block start b, ascending (offsets descending), merged.
 * slot >= 0: the device chooses a Vertical-Slash part's index (dyn.cl oc_dyn_choose over n_choice
 * coordinates): the part gets room for its columns and runs, and ch_slot[slot] says where. */
static oc_status add_part(oc_cl_attn *at, const oc_attn_call *a, int32_t h, const oc_head_pattern *sub,
                          const oc_dyn_head *dh, int32_t pt_at, int32_t perm_at, int32_t n_coord, int32_t slot,
                          int32_t n_choice, int32_t *used, oc_error *err) {
    int32_t *pt = at->dyn_host + pt_at, at_v = *used;
    memset(pt, 0, PART_INTS * sizeof *pt);
    pt[5] = perm_at;
    pt[6] = n_coord;
    if (sub->kind == OC_PATTERN_A_SHAPE) {
        pt[0] = DYN_ASHAPE;
        pt[1] = sub->n_sink;
        pt[2] = sub->n_local;
    } else if (!oc_pattern_is_dynamic(sub->kind) || !dh || dh->dense) {
        pt[0] = DYN_ALL;
    } else if (slot >= 0 && sub->kind == OC_PATTERN_VERTICAL_SLASH) {
        /* room: the columns below n_coord, and the runs: offsets in runs are >= 65 apart, so at
         * most (2 n - 2) / 65 + 1 of them */
        int32_t nv = OC_MIN(OC_MAX(sub->n_vertical, 0), n_coord);
        int32_t nd = OC_MIN(OC_MAX(sub->n_slash, 0), (2 * n_choice - 2) / (OC_DYN_BLOCK + 1) + 1);
        if ((int64_t)at_v + nv + 2 * (int64_t)nd > at->dyn_cap) goto full;
        int32_t *cs = at->ch_slot + (size_t)slot * CH_SLOT_INTS;
        cs[0] = pt_at;
        cs[1] = at_v;
        cs[2] = at_v + nv;
        pt[0] = DYN_VS;   /* the counts and places: the device's */
        *used = at_v + nv + 2 * nd;
    } else if (sub->kind == OC_PATTERN_GRID) {
        if (dh->stride < 1 || dh->phase < 0 || dh->phase >= dh->stride)
            return oc_fail(err, OC_ERR_INVALID, "opencl attn: head %d grid stride %d phase %d", (int)h, (int)dh->stride,
                           (int)dh->phase);
        pt[0] = DYN_GRID;
        pt[1] = dh->stride;
        pt[2] = dh->phase;
        pt[3] = sub->grid_lines;
    } else {
        int32_t nv = 0, nd = 0;
        if (dh->n_vertical > a->n_kv || dh->n_slash > 2 * a->n_kv - 1 ||
            (int64_t)at_v + dh->n_vertical + 2 * (int64_t)dh->n_slash > at->dyn_cap)
            return oc_fail(err, OC_ERR_INVALID, "opencl attn: head %d index has %d columns and %d diagonals for "
                           "%d keys", (int)h, (int)dh->n_vertical, (int)dh->n_slash, (int)a->n_kv);
        for (int32_t k = 0; k < dh->n_vertical; k++) {
            if (dh->vertical[k] < 0 || dh->vertical[k] >= a->n_kv || (k && dh->vertical[k] <= dh->vertical[k - 1]))
                return oc_fail(err, OC_ERR_INVALID, "opencl attn: head %d index columns not ascending in [0, %d)",
                               (int)h, (int)a->n_kv);
            if (dh->vertical[k] < n_coord) at->dyn_host[at_v + nv++] = dh->vertical[k];
        }
        int32_t at_d = at_v + nv, *dr = at->dyn_host + at_d;
        for (int32_t k = dh->n_slash - 1; k >= 0; k--) {
            int32_t o = dh->slash[k];
            if (o <= -a->n_kv || o >= a->n_kv || (k + 1 < dh->n_slash && o >= dh->slash[k + 1]))
                return oc_fail(err, OC_ERR_INVALID, "opencl attn: head %d index offsets not ascending in (-%d, %d)",
                               (int)h, (int)a->n_kv, (int)a->n_kv);
            int32_t lo = -o, hi = OC_DYN_BLOCK - o;
            if (nd && lo <= dr[2 * nd - 1]) {
                dr[2 * nd - 1] = OC_MAX(dr[2 * nd - 1], hi);
            } else {
                dr[2 * nd] = lo;
                dr[2 * nd + 1] = hi;
                nd++;
            }
        }
        pt[0] = DYN_VS;
        pt[1] = nv;
        pt[2] = at_v;
        pt[3] = nd;
        pt[4] = at_d;
        *used = at_d + 2 * nd;
    }
    return OC_OK;
full:
    return oc_fail(err, OC_ERR_RANGE, "opencl attn: the prefill heads' tables need more than %d ints", (int)at->dyn_cap);
}

/* Room for n parts at *used: their place (the kernel reads a head's parts one after another). */
static oc_status add_headers(oc_cl_attn *at, int32_t n, int32_t *parts_at, int32_t *used, oc_error *err) {
    if ((int64_t)*used + (int64_t)n * PART_INTS > at->dyn_cap)
        return oc_fail(err, OC_ERR_RANGE, "opencl attn: the prefill heads' tables need more than %d ints",
                       (int)at->dyn_cap);
    *parts_at = *used;
    *used += n * PART_INTS;
    return OC_OK;
}

/* The class of coordinate c under part pt (rows of one class keep the same coordinates of it). */
static int64_t part_class(const int32_t *pt, int32_t c, int32_t c_prev) {
    if (pt[0] == DYN_VS) return c / OC_DYN_BLOCK;
    if (pt[0] == DYN_GRID) return ((c - pt[2]) % pt[1] + pt[1]) % pt[1];
    return pt[0] == DYN_ASHAPE && c_prev >= 0 && c != c_prev + 1;   /* an A-shape: a gap starts a stretch */
}

static int row_key_cmp(const void *x, const void *y) {
    const row_key *a = x, *b = y;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return (a->c > b->c) - (a->c < b->c);
}

/* The rows of modality m (m < 0: every row) of head h run parts [parts_at, + n_parts PART_INTS):
 * grouped by the classes of every part (stable: ascending coordinates within a group), each
 * group's rows into the table's row list (query index, coordinate; by_rank: the coordinate is the
 * rank within its modality, dyn.h) and cut into balanced runs of at most bq rows. */
static oc_status add_rows(oc_cl_attn *at, const oc_attn_call *a, int32_t h, int m, int by_rank, int32_t parts_at,
                          int32_t n_parts, int32_t *used, oc_error *err) {
    row_key *rk = at->row_keys;
    int32_t n = 0;
    int64_t stretch = 0;
    for (int32_t i = 0; i < a->n_q; i++) {
        if (m >= 0 && oc_dyn_row_modality(a, i) != m) continue;
        int32_t c = by_rank ? at->key_rank[a->q_offset + i] : a->q_offset + i;
        int64_t key = 0;
        for (int32_t k = 0; k < n_parts; k++) {
            const int32_t *pt = at->dyn_host + parts_at + k * PART_INTS;
            int64_t v = part_class(pt, c, n ? rk[n - 1].c : -1);
            if (pt[0] == DYN_ASHAPE) v = stretch += v;
            key = key * ((int64_t)1 << 31) + v;
        }
        rk[n].key = key;
        rk[n].i = i;
        rk[n].c = c;
        n++;
    }
    if (!n) return OC_OK;
    if ((int64_t)*used + 2 * (int64_t)n > at->dyn_cap)
        return oc_fail(err, OC_ERR_RANGE, "opencl attn: the prefill heads' tables need more than %d ints",
                       (int)at->dyn_cap);
    /* rows come in ascending order, and so do their classes for Vertical-Slash blocks, A-shape
     * stretches and 2D ranks: the sort is needed only by a Grid part (residue classes) */
    int32_t k_unsorted = 1;
    while (k_unsorted < n && row_key_cmp(&rk[k_unsorted - 1], &rk[k_unsorted]) <= 0) k_unsorted++;
    if (k_unsorted < n) qsort(rk, (size_t)n, sizeof *rk, row_key_cmp);
    int32_t rows_at = *used;
    for (int32_t k = 0; k < n; k++) {
        at->dyn_host[rows_at + 2 * k] = rk[k].i;
        at->dyn_host[rows_at + 2 * k + 1] = rk[k].c;
    }
    *used += 2 * n;
    for (int32_t g0 = 0; g0 < n;) {
        int32_t g1 = g0 + 1;
        while (g1 < n && rk[g1].key == rk[g0].key) g1++;
        int32_t len = g1 - g0, n_pieces = (len + at->dyn_bq - 1) / at->dyn_bq;
        if (at->n_hruns + n_pieces > at->hruns_cap)
            return oc_fail(err, OC_ERR_RANGE, "opencl attn: the prefill heads need more than %d runs (a grid stride "
                           "above %d, or one 2D-Boundary query modality with grids of two strides or a grid beside "
                           "vertical-slash over many rows?)", (int)at->hruns_cap, DYN_GRID_CLASSES);
        for (int32_t p = 0; p < n_pieces; p++) {   /* balanced: no 3-row tail */
            int32_t k0 = (int32_t)((int64_t)len * p / n_pieces), k1 = (int32_t)((int64_t)len * (p + 1) / n_pieces);
            int32_t *r = at->hruns + (size_t)at->n_hruns++ * RUN_INTS;
            r[0] = rows_at + 2 * (g0 + k0);
            r[1] = k1 - k0;
            r[2] = parts_at;
            r[3] = n_parts;
            r[4] = -1;
            r[5] = 0;
            r[6] = h;
        }
        g0 = g1;
    }
    return OC_OK;
}

/* Second-launch runs, the most work first: (sort key in r[5], the step a head run does not use),
 * then head and row list, so the order is the same on every call. */
static int hrun_cmp(const void *x, const void *y) {
    const int32_t *a = x, *b = y;
    if (a[5] != b[5]) return a[5] > b[5] ? -1 : 1;
    if (a[6] != b[6]) return a[6] < b[6] ? -1 : 1;
    return (a[0] > b[0]) - (a[0] < b[0]);
}

/* The second launch's work-groups start in run order and a GPU hands them out in that order, so
 * the longest go first (the first launch's order, prepare): a causal run's keys grow with its last
 * row, a bidirectional one's with its rows. add_rows appends a head's runs in ascending rows: the
 * longest came last and ran alone at the tail of the launch. */
static void sort_hruns(oc_cl_attn *at, const oc_attn_call *a) {
    int causal = a->mask == OC_ATTN_CAUSAL;
    for (int32_t k = 0; k < at->n_hruns; k++) {
        int32_t *r = at->hruns + (size_t)k * RUN_INTS;
        r[5] = causal ? at->dyn_host[r[0] + 2 * (r[1] - 1)] : r[1];
    }
    qsort(at->hruns, (size_t)at->n_hruns, RUN_INTS * sizeof(int32_t), hrun_cmp);
    for (int32_t k = 0; k < at->n_hruns; k++) at->hruns[(size_t)k * RUN_INTS + 5] = 0;
}

/* The tables the kernel's second launch reads (attn.cl): a flag per head, the key permutation
 * (2D-Boundary), and per prefill head its parts and row groups: a Vertical-Slash or Grid head one
 * part for every row; a Q-Boundary head per modality its modality's part for that modality's rows
 * (Alg. 2); a 2D-Boundary head per query modality mq the parts (mq, text) and (mq, vision) over the
 * key modalities' streams for mq's rows by rank (Alg. 3). Uploaded through the ring, no wait.
 * dev: the Vertical-Slash parts' indices are the device's to choose (a->dyn holds only the dense
 * flags and the permutation): each gets its room and its ch_slot; the row groups do not depend on
 * them (a Vertical-Slash part's class is the row's block). */
static oc_status dyn_tables(oc_cl_attn *at, const oc_attn_call *a, int dev, oc_error *err) {
    int32_t nh = at->lim.n_head, used = nh, perm_at = -1;
    const oc_attn_dyn *dyn = a->dyn;
    oc_status st = OC_OK;
    at->n_hruns = 0;
    if (dev)
        for (size_t k = 0; k < (size_t)nh * N_SLOTS * CH_SLOT_INTS; k++) at->ch_slot[k] = -1;
    for (int32_t h = 0; h < nh; h++) at->dyn_host[h] = oc_pattern_is_prefill(a->patterns[h].kind);
    for (int32_t h = 0; h < nh && perm_at < 0; h++)
        if (a->patterns[h].kind == OC_PATTERN_BOUNDARY_2D) {   /* mask.c checked dyn's permutation */
            if ((int64_t)used + a->n_kv > at->dyn_cap) return oc_fail(err, OC_ERR_RANGE, "opencl attn: tables full");
            perm_at = used;
            memcpy(at->dyn_host + used, dyn->key_perm, (size_t)a->n_kv * 4);
            if (dyn->key_rank != at->key_rank) memcpy(at->key_rank, dyn->key_rank, (size_t)a->n_kv * 4);
            used += a->n_kv;
        }
    for (int32_t h = 0; h < nh && st == OC_OK; h++) {
        const oc_head_pattern *pat = &a->patterns[h];
        int32_t slot0 = dev ? h * N_SLOTS : -1, parts_at = 0;
        if (oc_pattern_is_dynamic(pat->kind)) {
            st = add_headers(at, 1, &parts_at, &used, err);
            if (st == OC_OK)
                st = add_part(at, a, h, pat, &dyn->heads[h], parts_at, -1, a->n_kv, slot0, a->n_kv, &used, err);
            if (st == OC_OK) st = add_rows(at, a, h, -1, 0, parts_at, 1, &used, err);
        } else if (pat->kind == OC_PATTERN_Q_BOUNDARY) {
            for (int m = 0; m < OC_N_MODALITIES && st == OC_OK; m++) {
                oc_head_pattern sub = oc_pattern_modal(pat, m);
                const oc_dyn_head *dh = dyn ? (m ? &dyn->heads_vision[h] : &dyn->heads[h]) : NULL;
                st = add_headers(at, 1, &parts_at, &used, err);
                if (st == OC_OK)
                    st = add_part(at, a, h, &sub, dh, parts_at, -1, a->n_kv, dev ? slot0 + m : -1, a->n_kv, &used, err);
                if (st == OC_OK) st = add_rows(at, a, h, m, 0, parts_at, 1, &used, err);
            }
        } else if (pat->kind == OC_PATTERN_BOUNDARY_2D) {
            for (int mq = 0; mq < OC_N_MODALITIES && st == OC_OK; mq++) {
                int32_t n_parts = 0, n_mq = dyn->key_start[mq + 1] - dyn->key_start[mq];
                for (int mk = 0; mk < OC_N_MODALITIES; mk++) n_parts += dyn->key_start[mk + 1] > dyn->key_start[mk];
                if (!n_parts) continue;
                st = add_headers(at, n_parts, &parts_at, &used, err);
                for (int mk = 0, k = 0; mk < OC_N_MODALITIES && st == OC_OK; mk++) {
                    int32_t n_mk = dyn->key_start[mk + 1] - dyn->key_start[mk];
                    if (n_mk == 0) continue;
                    oc_head_pattern sub = oc_pattern_pair(pat, mq, mk);
                    int32_t slot = dev ? slot0 + mq * OC_N_MODALITIES + mk : -1;
                    st = add_part(at, a, h, &sub, &dyn->pairs[(size_t)h * N_SLOTS + mq * OC_N_MODALITIES + mk],
                                  parts_at + PART_INTS * k++, perm_at + dyn->key_start[mk], n_mk, slot,
                                  OC_MAX(n_mk, n_mq), &used, err);
                }
                if (st == OC_OK) st = add_rows(at, a, h, mq, 1, parts_at, n_parts, &used, err);
            }
        }
    }
    if (st == OC_OK) sort_hruns(at, a);
    if (st == OC_OK) st = ring_table(at, at->dyn_buf, at->dyn_host, (size_t)used * 4, err);
    if (st == OC_OK && at->n_hruns)
        st = ring_table(at, at->hruns_buf, at->hruns, (size_t)at->n_hruns * RUN_INTS * 4, err);
    return st;
}

/* The prefill-head checks shared by build and run: enough room for this call. */
static oc_status dyn_room(const oc_cl_attn *at, const oc_attn_call *a, oc_error *err) {
    if (!has_dyn(at) || a->n_kv > at->lim.max_n_kv)
        return oc_fail(err, OC_ERR_RANGE, "opencl attn: vertical-slash / grid / boundary heads over %d keys, the "
                       "context was opened for %d (limits max_n_kv)", (int)a->n_kv,
                       has_dyn(at) ? (int)at->lim.max_n_kv : 0);
    if (at->stacked || at->n_chunks > 1)
        return oc_fail(err, OC_ERR_UNSUPPORTED, "opencl attn: prefill heads in a stacked or split call");
    return OC_OK;
}

/* The kinds of choice an estimate job feeds (est_job[1]). */
#define EST_HEAD 0   /* a Vertical-Slash or Grid head: its index from the call's last 64 rows */
#define EST_QB 1     /* a Q-Boundary head's modality m (Alg. 2) */
#define EST_2D 2     /* a 2D-Boundary head's query modality m, each key modality's pair (Alg. 3) */

/* Runs the queued jobs (dyn.cl): the table upload (staged, no wait), both estimate passes and the
 * diagonals of every job in one launch each, then one read of every job's scores into est_scores
 * (job b at 5 n_kv b: its columns, then its diagonals: of the positions at n_kv, or of key
 * modality mk by rank at n_kv + 2 mk n_kv, 2 max(n_mk, n_mq) - 1 each). */
static oc_status est_launch(oc_cl_attn *at, const oc_attn_call *a, const oc_cl_attn_bufs *io, const int32_t *n_m,
                            int read_back, oc_error *err) {
    int32_t n_kv = a->n_kv, d = at->lim.head_dim, causal = a->mask == OC_ATTN_CAUSAL, J = at->est_jobs;
    int32_t jobs_at = J * 2 * EST_ROWS, entries_at = jobs_at + J, n_ent = 0, max_diag = 0, S = 5 * n_kv;
    int32_t *ent = at->est_tab + entries_at;
    for (int32_t b = 0; b < at->n_est; b++) {
        const int32_t *job = at->est_job + 4 * b;
        at->est_tab[jobs_at + b] = job[0];
        for (int mk = 0; job[3] && mk < (job[1] == EST_2D ? OC_N_MODALITIES : 1); mk++) {
            int by_rank = job[1] == EST_2D;
            int32_t n_coord = by_rank ? n_m[mk] : n_kv, n_diag = by_rank ? OC_MAX(n_m[mk], n_m[job[2]]) : n_kv;
            if (n_diag < 1) continue;
            int32_t *e = ent + DIAG_INTS * n_ent++;
            e[0] = b;
            e[1] = by_rank && mk ? n_m[0] : 0;
            e[2] = by_rank;
            e[3] = n_coord;
            e[4] = n_diag;
            e[5] = b * S + n_kv + 2 * mk * n_kv;
            max_diag = OC_MAX(max_diag, n_diag);
        }
    }
    oc_status st = ring_table(at, at->est_rows_buf, at->est_tab, (size_t)(entries_at + DIAG_INTS * n_ent) * 4, err);
    int32_t n_w = (n_kv + EST_ROWS - 1) / EST_ROWS;
    for (int pass = 0; pass < 2 && st == OC_OK; pass++) {
        oc_cl_arg args[] = {
            OC_CL_I32(pass), OC_CL_BUF(io->q), OC_CL_I32(a->q_off), OC_CL_I32(a->q_stride_token),
            OC_CL_I32(a->q_stride_head), OC_CL_BUF(io->k), OC_CL_I32(a->k_off), OC_CL_I32(a->k_stride_token),
            OC_CL_I32(a->k_stride_head), OC_CL_I32(a->kv_dtype == OC_DTYPE_F16), OC_CL_BUF(at->est_rows_buf),
            OC_CL_I32(jobs_at), OC_CL_I32(at->lim.n_head / at->lim.n_head_kv), OC_CL_I32(d), OC_CL_I32(n_kv),
            OC_CL_I32(a->q_offset), OC_CL_I32(causal), OC_CL_F32(a->scale * 1.44269504088896340736f),
            OC_CL_BUF(at->est_part_buf), OC_CL_I32(at->part_w), OC_CL_BUF(at->est_prob_buf),
            OC_CL_BUF(at->est_scores_buf), OC_CL_I32(S),
            OC_CL_LOCAL((size_t)EST_SUB * (size_t)d * 4), OC_CL_LOCAL((size_t)EST_ROWS * (EST_SUB + 1) * 4),
        };
        size_t local[2] = { EST_ROWS, 1 }, global[2] = { (size_t)n_w * EST_ROWS, (size_t)at->n_est };
        st = oc_cl_launch(at->dev, OC_CLK_DYN_ESTIMATE, 2, global, local, (int)OC_ARRAY_LEN(args), args, err);
    }
    if (st == OC_OK && n_ent) {
        oc_cl_arg args[] = {
            OC_CL_BUF(at->est_prob_buf), OC_CL_I32(n_kv), OC_CL_BUF(at->est_rows_buf), OC_CL_BUF(at->est_perm_buf),
            OC_CL_I32(entries_at), OC_CL_BUF(at->est_scores_buf),
        };
        /* work-groups of 64 items, the diagonals padded to them (items past an entry's return): left to
         * the driver, an odd count such as 2 n - 1 can get work-groups of a few items (the launch took
         * about 110 us on an H200) */
        size_t global[2] = { (size_t)(2 * max_diag - 1 + 63) / 64 * 64, (size_t)n_ent }, local[2] = { 64, 1 };
        st = oc_cl_launch(at->dev, OC_CLK_DYN_DIAG, 2, global, local, (int)OC_ARRAY_LEN(args), args, err);
    }
    if (st == OC_OK && read_back)
        st = oc_cl_download(at->dev, at->est_scores_buf, 0, at->est_scores, (size_t)at->n_est * S * 4, err);
    return st;
}

/* Queues a job (head h, kind, modality m, slash: its diagonals too) with the last 64 rows of
 * modality m (m < 0: any; by_rank for EST_2D: the coordinate is the rank); 0 when fewer rows. */
static int est_queue(oc_cl_attn *at, const oc_attn_call *a, int32_t h, int kind, int m, int slash) {
    int32_t rows[OC_DYN_LAST_Q], *r = at->est_tab + (size_t)at->n_est * 2 * EST_ROWS;
    if (!oc_dyn_last_rows(a, kind == EST_HEAD ? -1 : m, rows)) return 0;
    for (int c = 0; c < OC_DYN_LAST_Q; c++) {
        r[2 * c] = rows[c];
        r[2 * c + 1] = kind == EST_2D ? at->key_rank[a->q_offset + rows[c]] : a->q_offset + rows[c];
    }
    int32_t *job = at->est_job + 4 * at->n_est++;
    job[0] = h;
    job[1] = kind;
    job[2] = m;
    job[3] = slash;
    return 1;
}

/* The choice of queued job b from its scores (est_launch), the CPU's code (dyn.h), with the job's
 * own scratch: a job writes only its head's index slots and dyn_heads entries. */
typedef struct choose_ctx {
    oc_cl_attn *at;
    const oc_attn_call *a;
    const int32_t *n_m;
} choose_ctx;

static void choose_job(void *ctx, int64_t task, int thread) {
    (void)thread;   /* the job's scratch is its own: the same choice on any thread */
    const choose_ctx *x = ctx;
    oc_cl_attn *at = x->at;
    const oc_attn_call *a = x->a;
    const int32_t *n_m = x->n_m;
    int32_t nh = at->lim.n_head, n_kv = a->n_kv, b = (int32_t)task;
    oc_dyn_head *heads = at->dyn_heads, *vision = heads + nh, *pairs = vision + nh;
    const int32_t *job = at->est_job + 4 * b;
    int32_t h = job[0], m = job[2];
    const oc_head_pattern *pat = &a->patterns[h];
    const float *vs = at->est_scores + (size_t)b * 5 * n_kv;
    int32_t *idx = at->dyn_idx + (size_t)h * N_SLOTS * nkv3(at), *work = at->est_work + (size_t)b * 2 * nkv1(at);
    double *grid = at->est_grid + (size_t)b * 2 * nkv1(at);
    if (job[1] == EST_HEAD) {
        oc_dyn_choose(pat, n_kv, vs, vs + n_kv, idx, work, grid, &heads[h]);
    } else if (job[1] == EST_QB) {
        oc_head_pattern sub = oc_pattern_modal(pat, m);
        oc_dyn_choose(&sub, n_kv, vs, vs + n_kv, idx + (size_t)m * nkv3(at), work, grid, m ? &vision[h] : &heads[h]);
    } else {
        oc_dyn_head *ph = pairs + (size_t)h * N_SLOTS + m * OC_N_MODALITIES;
        for (int mk = 0; mk < OC_N_MODALITIES; mk++) {
            oc_head_pattern sub = oc_pattern_pair(pat, m, mk);
            if (!oc_pattern_is_dynamic(sub.kind)) continue;
            oc_dyn_choose_pair(&sub, n_m[mk], OC_MAX(n_m[mk], n_m[m]), vs, at->key_perm + at->dyn.key_start[mk],
                               vs + n_kv + 2 * (size_t)mk * n_kv, at->est_vr + (size_t)b * nkv1(at),
                               idx + (size_t)(m * OC_N_MODALITIES + mk) * nkv3(at), work, grid, &ph[mk]);
        }
    }
}

/* The queued jobs' choices, as pool tasks: the top-k selections of a long prompt's heads (about
 * 50-90 us each at 4,361 keys) were most of the host's part of a layer's estimate, the device
 * idle meanwhile. */
static void est_choose(oc_cl_attn *at, const oc_attn_call *a, const int32_t *n_m) {
    choose_ctx x = { at, a, n_m };
    oc_pool_run(at->pool, at->n_est, choose_job, &x);
    at->n_est = 0;
}

void oc_cl_attn_set_pool(oc_cl_attn *at, oc_pool *pool) { at->pool = pool; }

/* Runs and chooses the queued jobs when the batch is full (flush: whenever any is queued). */
static oc_status est_flush(oc_cl_attn *at, const oc_attn_call *a, const oc_cl_attn_bufs *io, const int32_t *n_m,
                           int flush, oc_error *err) {
    if (!at->n_est || (!flush && at->n_est < at->est_jobs)) return OC_OK;
    oc_status st = est_launch(at, a, io, n_m, 1, err);
    if (st != OC_OK) {
        at->n_est = 0;
        return st;
    }
    est_choose(at, a, n_m);
    return OC_OK;
}

/* The start of an index build (the host's, oc_cl_attn_dyn_build, or the device's, dyn_device): q
 * and k checked against their buffers (the estimate reads them), every head's index cleared. */
static oc_status dyn_begin(oc_cl_attn *at, const oc_attn_call *a, const oc_cl_attn_bufs *io, const char *what,
                           oc_error *err) {
    int32_t nh = at->lim.n_head, d = at->lim.head_dim;
    size_t kv_bytes = a->kv_dtype == OC_DTYPE_F16 ? 2 : 4;
    if (!io || !tensor_fits(io->q, a->q_off, a->q_stride_token, a->q_stride_head, a->n_q, nh, d, 4) ||
        !tensor_fits(io->k, a->k_off, a->k_stride_token, a->k_stride_head, a->n_kv, at->lim.n_head_kv, d, kv_bytes))
        return oc_fail(err, OC_ERR_RANGE, "%s: q or k (with its offset and strides) does not fit its buffer", what);
    oc_dyn_head *heads = at->dyn_heads;
    for (int32_t k = 0; k < nh * (2 + N_SLOTS) && has_dyn(at); k++) {
        memset(&heads[k], 0, sizeof heads[k]);
        heads[k].stride = 1;
    }
    memset(&at->dyn, 0, sizeof at->dyn);
    at->dyn.n_head = nh;
    at->dyn.heads = heads;
    at->dyn.heads_vision = heads + nh;
    at->n_est = 0;
    return OC_OK;
}

/* A 2D-Boundary head's keys in modality order, the CPU's permutation (dyn.h): the host tables, the
 * keys per modality into n_m, and the permutation queued for the estimate (no wait: it reads it). */
static oc_status dyn_key_perm(oc_cl_attn *at, const oc_attn_call *a, oc_dyn_head *pairs,
                              int32_t n_m[OC_N_MODALITIES], oc_error *err) {
    oc_dyn_key_perm(a, at->key_perm, at->key_rank, at->dyn.key_start);
    at->dyn.pairs = pairs;
    at->dyn.key_perm = at->key_perm;
    at->dyn.key_rank = at->key_rank;
    for (int m = 0; m < OC_N_MODALITIES; m++) n_m[m] = at->dyn.key_start[m + 1] - at->dyn.key_start[m];
    return ring_table(at, at->est_perm_buf, at->key_perm, (size_t)a->n_kv * 4, err);
}


oc_status oc_cl_attn_dyn_build(oc_cl_attn *at, const oc_attn_call *a, const oc_cl_attn_bufs *io, const oc_attn_dyn **out,
                               oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "opencl attn dyn: out is NULL");
    *out = NULL;
    oc_status st = oc_cl_attn_prepare(at, a, err);
    if (st == OC_OK) st = oc_mask_check_dyn(a, 0, "opencl attn dyn", err);
    if (st != OC_OK) return st;
    int32_t nh = at->lim.n_head, n_dyn = 0, n_kv = a->n_kv, any_2d = 0;
    for (int32_t h = 0; a->patterns && h < nh; h++)
        if (oc_pattern_needs_index(&a->patterns[h])) {
            if (!oc_attn_wants_dyn(a))
                return oc_fail(err, OC_ERR_INVALID, "opencl attn dyn: %d queries, the estimate needs at least %d",
                               (int)a->n_q, OC_DYN_LAST_Q);
            n_dyn++;
            any_2d |= a->patterns[h].kind == OC_PATTERN_BOUNDARY_2D;
        }
    if (n_dyn && (st = dyn_room(at, a, err)) != OC_OK) return st;
    if ((st = dyn_begin(at, a, io, "opencl attn dyn", err)) != OC_OK) return st;
    oc_dyn_head *heads = at->dyn_heads, *vision = heads + nh, *pairs = vision + nh;
    int32_t n_m[OC_N_MODALITIES] = { 0, 0 };
    if (any_2d && n_kv > 0) st = dyn_key_perm(at, a, pairs, n_m, err);
    /* every head's estimates queued, run in batches (one read-back each), then chosen */
    for (int32_t h = 0; h < nh && n_dyn && n_kv > 0 && st == OC_OK; h++) {
        const oc_head_pattern *pat = &a->patterns[h];
        if (!oc_pattern_needs_index(pat)) continue;
        if (oc_pattern_is_dynamic(pat->kind)) {
            est_queue(at, a, h, EST_HEAD, -1, pat->kind == OC_PATTERN_VERTICAL_SLASH);
            st = est_flush(at, a, io, n_m, 0, err);
        } else if (pat->kind == OC_PATTERN_Q_BOUNDARY) {   /* Alg. 2: each modality from its own last queries */
            for (int m = 0; m < OC_N_MODALITIES && st == OC_OK; m++) {
                oc_head_pattern sub = oc_pattern_modal(pat, m);
                if (!oc_pattern_is_dynamic(sub.kind)) continue;
                if (!est_queue(at, a, h, EST_QB, m, sub.kind == OC_PATTERN_VERTICAL_SLASH))
                    (m ? &vision[h] : &heads[h])->dense = 1;
                else
                    st = est_flush(at, a, io, n_m, 0, err);
            }
        } else {   /* BOUNDARY_2D, Alg. 3: per query modality one estimate, then each pair's choice by rank */
            for (int mq = 0; mq < OC_N_MODALITIES && st == OC_OK; mq++) {
                int any = 0, slash = 0;
                for (int mk = 0; mk < OC_N_MODALITIES; mk++) {
                    any |= oc_pattern_is_dynamic(pat->pair[mq][mk].kind);
                    slash |= pat->pair[mq][mk].kind == OC_PATTERN_VERTICAL_SLASH;
                }
                if (!any) continue;
                oc_dyn_head *ph = pairs + (size_t)h * N_SLOTS + mq * OC_N_MODALITIES;
                if (!est_queue(at, a, h, EST_2D, mq, slash))
                    for (int mk = 0; mk < OC_N_MODALITIES; mk++) ph[mk].dense = 1;
                else
                    st = est_flush(at, a, io, n_m, 0, err);
            }
        }
    }
    if (st == OC_OK) st = est_flush(at, a, io, n_m, 1, err);
    at->n_est = 0;
    if (st != OC_OK) return st;
    *out = &at->dyn;
    return OC_OK;
}

/* ---- the launch ------------------------------------------------------------------------------------------- */

/* One launch of the kernel over runs[0..n_runs) x n_units (head_runs: the runs name their head). */
typedef struct launch {
    const oc_cl_buf *pats, *runs, *dyn;
    int64_t pat_head;
    int32_t n_runs, n_units, head_runs, count_base, want_counts;
} launch;

static oc_status launch_attn(oc_cl_attn *at, const oc_attn_call *call, const oc_cl_attn_bufs *io, const launch *ln,
                             oc_error *err) {
    const oc_cl_attn_limits *L = &at->lim;
    int32_t d = L->head_dim, bq = ln->head_runs ? at->dyn_bq : at->bq;
    size_t row = local_row_floats(d) * sizeof(float);
    oc_cl_kernel_id kernel = bq != at->bq ? OC_CLK_ATTN_DYN : OC_CLK_ATTN;
    oc_cl_arg a[] = {
        OC_CL_BUF(io->q), OC_CL_I32(call->q_off), OC_CL_I32(call->q_stride_token), OC_CL_I32(call->q_stride_head),
        OC_CL_BUF(io->k), OC_CL_I32(call->k_off), OC_CL_I32(call->k_stride_token), OC_CL_I32(call->k_stride_head),
        OC_CL_BUF(call->k_shared ? at->shared_buf : NULL), OC_CL_I32(call->k_shared_off), OC_CL_I32(call->k_shared != NULL),
        OC_CL_BUF(io->v), OC_CL_I32(call->v_off), OC_CL_I32(call->v_stride_token), OC_CL_I32(call->v_stride_head),
        OC_CL_I32(call->kv_dtype == OC_DTYPE_F16),
        OC_CL_BUF(io->out), OC_CL_I32(call->out_off), OC_CL_I32(call->out_stride_token), OC_CL_I32(call->out_stride_head),
        OC_CL_BUF(at->partials_buf), OC_CL_BUF(ln->runs), OC_CL_I32(ln->n_runs), OC_CL_BUF(at->img_buf),
        OC_CL_I32(at->n_images), OC_CL_BUF(ln->pats), OC_CL_I32(ln->pats ? ln->pat_head * OC_CL_PATTERN_INTS : 0),
        OC_CL_I32(ln->pats != NULL), OC_CL_BUF(ln->dyn), OC_CL_I32(ln->dyn != NULL), OC_CL_I32(ln->head_runs),
        OC_CL_BUF(at->counts_buf), OC_CL_I32(ln->count_base), OC_CL_I32(ln->want_counts),
        OC_CL_I32(L->n_head), OC_CL_I32(L->n_head / L->n_head_kv), OC_CL_I32(d), OC_CL_I32(at->n_q), OC_CL_I32(at->n_kv),
        OC_CL_I32(at->q_offset), OC_CL_I32(at->causal), OC_CL_I32(at->stacked), OC_CL_I32(at->chunk_keys),
        OC_CL_F32(call->scale * 1.44269504088896340736f),
        OC_CL_LOCAL((size_t)bq * row), OC_CL_LOCAL((size_t)at->bk * row),
        OC_CL_LOCAL((size_t)bq * (size_t)(at->bk + 4) * 4),
        OC_CL_LOCAL((size_t)bq * (size_t)at->cg * 4),
        OC_CL_LOCAL((3 * (size_t)at->bk + (size_t)at->wg + 8) * 4),
    };
    /* dimension 0: (run, unit), units fastest, so every head's longest runs start first */
    size_t local[3] = { (size_t)at->wg, 1, 1 };
    size_t global[3] = { (size_t)ln->n_runs * (size_t)ln->n_units * (size_t)at->wg, 1,
                         ln->head_runs ? 1 : (size_t)at->n_chunks };
    return oc_cl_launch(at->dev, kernel, 3, global, local, (int)OC_ARRAY_LEN(a), a, err);
}

/* Keys the one query row of call keeps when every one of its heads is dense and its base mask keeps
 * a prefix of the keys (causal, bidirectional), with an f16 cache and no shared keys: the case
 * decode.cl's kernel takes; else 0 (the tiled kernel runs). */
static int32_t decode_keys(const oc_cl_attn *at, const oc_attn_call *call, const oc_cl_attn_bufs *io) {
    if (at->n_q != 1 || io->patterns || call->k_shared || call->kv_dtype != OC_DTYPE_F16 ||
        oc_cl_kernel_wg_size(at->dev, OC_CLK_ATTN_DECODE) < DECODE_WG)
        return 0;
    for (int32_t h = 0; call->patterns && h < call->n_head; h++)
        if (!oc_attn_head_is_dense(call, h)) return 0;
    if (call->mask == OC_ATTN_BIDIRECTIONAL) return at->n_kv;
    if (call->mask != OC_ATTN_CAUSAL || call->q_offset < 0) return 0;
    return (int32_t)OC_MIN((int64_t)at->n_kv, (int64_t)call->q_offset + 1);
}

/* decode.cl: one launch of (query head, key chunk) work-groups, then oc_attn_merge when the keys were
 * split. Chunks: about 4 work-groups per compute unit over all heads (a decode over 512 keys of
 * the 2B model: 8 chunks x 12 heads on an H200's 132 units), in whole blocks of DECODE_WG keys. */
static oc_status run_decode(oc_cl_attn *at, const oc_attn_call *call, const oc_cl_attn_bufs *io, int32_t n_keys,
                            oc_error *err) {
    const oc_cl_attn_limits *L = &at->lim;
    const oc_cl_caps *caps = oc_cl_device_caps(at->dev);
    int32_t d = L->head_dim, chunks, per;
    if (at->force_chunks > 0) {
        chunks = OC_MIN(OC_MIN(at->force_chunks, SPLIT_MAX_CHUNKS), n_keys);
        per = (n_keys + chunks - 1) / chunks;
    } else {
        int64_t want = 4 * (int64_t)OC_MAX(caps->compute_units, 1u);
        chunks = (int32_t)OC_MIN((want + L->n_head - 1) / L->n_head, (int64_t)SPLIT_MAX_CHUNKS);
        chunks = OC_MAX(1, OC_MIN(chunks, (n_keys + DECODE_WG - 1) / DECODE_WG));
        per = (n_keys + chunks - 1) / chunks;
        per = (per + DECODE_WG - 1) / DECODE_WG * DECODE_WG;
    }
    chunks = (n_keys + per - 1) / per;
    int k_al = d % 8 == 0 && call->k_off % 8 == 0 && call->k_stride_token % 8 == 0 && call->k_stride_head % 8 == 0;
    int v_al = call->v_off % 8 == 0 && call->v_stride_token % 8 == 0 && call->v_stride_head % 8 == 0;
    oc_cl_arg a[] = {
        OC_CL_BUF(io->q), OC_CL_I32(call->q_off), OC_CL_I32(call->q_stride_head), OC_CL_BUF(io->k),
        OC_CL_I32(call->k_off), OC_CL_I32(call->k_stride_token), OC_CL_I32(call->k_stride_head), OC_CL_BUF(io->v),
        OC_CL_I32(call->v_off), OC_CL_I32(call->v_stride_token), OC_CL_I32(call->v_stride_head), OC_CL_BUF(io->out),
        OC_CL_I32(call->out_off), OC_CL_I32(call->out_stride_head), OC_CL_BUF(at->partials_buf),
        OC_CL_I32(L->n_head / L->n_head_kv), OC_CL_I32(d), OC_CL_I32(n_keys), OC_CL_I32(chunks > 1 ? per : n_keys),
        OC_CL_I32(k_al), OC_CL_I32(v_al), OC_CL_F32(call->scale * 1.44269504088896340736f),
    };
    size_t local[2] = { DECODE_WG, 1 }, global[2] = { (size_t)L->n_head * DECODE_WG, (size_t)chunks };
    oc_status st = oc_cl_launch(at->dev, OC_CLK_ATTN_DECODE, 2, global, local, (int)OC_ARRAY_LEN(a), a, err);
    if (st != OC_OK || chunks == 1) return st;
    size_t mg[2] = { (size_t)d, (size_t)L->n_head };
    oc_cl_arg m[] = { OC_CL_BUF(io->out), OC_CL_I32(call->out_off), OC_CL_I32(call->out_stride_token),
                      OC_CL_I32(call->out_stride_head), OC_CL_BUF(at->partials_buf), OC_CL_I32(chunks),
                      OC_CL_I32(L->n_head), OC_CL_I32(1), OC_CL_I32(d) };
    return oc_cl_launch(at->dev, OC_CLK_ATTN_MERGE, 2, mg, NULL, (int)OC_ARRAY_LEN(m), m, err);
}

/* oc_cl_attn_run; dev_tables: the prefill heads' tables are queued already (dyn_device). */
static oc_status run_call(oc_cl_attn *at, const oc_attn_call *call, const oc_cl_attn_bufs *io, oc_attn_stats *stats,
                          int dev_tables, oc_error *err) {
    oc_status st = oc_cl_attn_prepare(at, call, err);
    if (st != OC_OK) return st;
    const oc_cl_attn_limits *L = &at->lim;
    int32_t d = L->head_dim;
    if (!io) return oc_fail(err, OC_ERR_INVALID, "opencl attn: no buffers");
    size_t kv_bytes = call->kv_dtype == OC_DTYPE_F16 ? 2 : 4;
    if (!tensor_fits(io->q, call->q_off, call->q_stride_token, call->q_stride_head, at->n_q, L->n_head, d, 4) ||
        !tensor_fits(io->out, call->out_off, call->out_stride_token, call->out_stride_head, at->n_q, L->n_head, d, 4) ||
        !tensor_fits(io->k, call->k_off, call->k_stride_token, call->k_stride_head, at->n_kv, L->n_head_kv, d, kv_bytes) ||
        !tensor_fits(io->v, call->v_off, call->v_stride_token, call->v_stride_head, at->n_kv, L->n_head_kv, d, kv_bytes) ||
        (call->k_shared && !tensor_fits(io->k, call->k_shared_off, call->k_stride_token, call->k_stride_head, at->n_kv,
                                        L->n_head_kv, d, kv_bytes)))
        return oc_fail(err, OC_ERR_RANGE, "opencl attn: q, k, v or out (with its offset and strides) does not fit its "
                       "buffer");
    if (io->patterns && (io->patterns_head < 0 || io->patterns_head > INT32_MAX / OC_CL_PATTERN_INTS ||
                         (uint64_t)(io->patterns_head + L->n_head) * OC_CL_PATTERN_INTS * 4 > oc_cl_buf_bytes(io->patterns)))
        return oc_fail(err, OC_ERR_RANGE, "opencl attn: patterns of heads %lld.. do not fit their buffer",
                       (long long)io->patterns_head);
    if (at->n_q == 0) return OC_OK;
    int32_t n_dec = decode_keys(at, call, io);
    if (n_dec > 0) {   /* every kept pair is executed: the stats come from the host, no wait */
        if ((st = run_decode(at, call, io, n_dec, err)) != OC_OK || !stats) return st;
        uint64_t kept = (uint64_t)n_dec * (uint64_t)L->n_head * 4 * (uint64_t)d;
        stats->flops_kept += kept;
        stats->flops_executed += kept;
        return OC_OK;
    }
    const oc_cl_buf *pats = io->patterns;
    int64_t pat_head = io->patterns_head;
    if (!pats && call->patterns) {
        int32_t slot;
        oc_status ps = pattern_slot(at, call->patterns, &slot, err);
        if (ps != OC_OK) return ps;
        if (slot >= 0) {
            pats = at->pat_buf;
            pat_head = (int64_t)slot * L->n_head;
        }
    }
    int dyn_on = call_dynamic(call);
    if (call->k_shared) {   /* Q-Cache VLA: the call's flags, read by the kernel's key loads */
        if (dyn_on || at->n_kv > at->lim.max_shared_keys)
            return oc_fail(err, OC_ERR_UNSUPPORTED, "opencl attn: shared keys (Q-Cache VLA) for %d keys%s: opened for "
                           "%d, without dynamic heads", at->n_kv, dyn_on ? " with dynamic heads" : "",
                           at->lim.max_shared_keys);
        if (at->n_kv > 0 && (st = oc_cl_upload(at->dev, at->shared_buf, 0, call->k_shared, (size_t)at->n_kv, err)))
            return st;
    }
    if (dyn_on && call->mask != OC_ATTN_CAUSAL && call->mask != OC_ATTN_BIDIRECTIONAL)
        return oc_fail(err, OC_ERR_UNSUPPORTED, "opencl attn: vertical-slash, grid and boundary heads need a causal or "
                       "bidirectional base (segments run on the CPU)");
    if (dyn_on && !dev_tables) {   /* prefill heads: their index, then a launch of their own */
        if ((st = oc_mask_check_dyn(call, 1, "opencl attn", err)) != OC_OK || (st = dyn_room(at, call, err)) != OC_OK ||
            (st = dyn_tables(at, call, 0, err)) != OC_OK)
            return st;
    }
    /* every head a prefill head (attn.cl: each would leave the first launch at once, as its flag
     * says): no first launch, its hundreds of empty work-groups and its slot in the queue */
    int main_on = !dyn_on || at->stacked || at->n_chunks > 1;
    for (int32_t h = 0; !main_on && h < L->n_head; h++) main_on = !oc_pattern_is_prefill(call->patterns[h].kind);
    int32_t n_units = at->stacked ? L->n_head_kv : L->n_head;
    size_t n_main = main_on ? (size_t)at->n_runs * (size_t)n_units * (size_t)at->n_chunks : 0;
    size_t n_items = n_main + (dyn_on ? (size_t)at->n_hruns : 0);
    int want_counts = stats != NULL && n_items <= (size_t)at->items_cap;
    launch ln = { pats, at->runs_buf, dyn_on ? at->dyn_buf : NULL, pat_head, at->n_runs, n_units, 0, 0, want_counts };
    if (main_on) st = launch_attn(at, call, io, &ln, err);
    if (st == OC_OK && dyn_on && at->n_hruns) {
        launch lh = { pats, at->hruns_buf, at->dyn_buf, pat_head, at->n_hruns, 1, 1, (int32_t)n_main, want_counts };
        st = launch_attn(at, call, io, &lh, err);
    }
    if (st == OC_OK && at->n_chunks > 1) {
        size_t mg[2] = { (size_t)d, (size_t)L->n_head * (size_t)at->n_q };
        oc_cl_arg m[] = { OC_CL_BUF(io->out), OC_CL_I32(call->out_off), OC_CL_I32(call->out_stride_token),
                          OC_CL_I32(call->out_stride_head), OC_CL_BUF(at->partials_buf), OC_CL_I32(at->n_chunks),
                          OC_CL_I32(L->n_head), OC_CL_I32(at->n_q), OC_CL_I32(d) };
        st = oc_cl_launch(at->dev, OC_CLK_ATTN_MERGE, 2, mg, NULL, (int)OC_ARRAY_LEN(m), m, err);
    }
    if (st != OC_OK || !stats) return st;
    if (!want_counts) return oc_fail(err, OC_ERR_RANGE, "opencl attn: %zu work-groups: too many to count", n_items);
    uint64_t dense = at->base_pairs * (uint64_t)L->n_head, per_pair = 4 * (uint64_t)d;
    if (at->defer_counts) {   /* summed on the device, taken later: no wait */
        oc_cl_arg c[] = { OC_CL_BUF(at->counts_buf), OC_CL_I32((int32_t)n_items), OC_CL_BUF(at->acc_buf) };
        size_t one[1] = { 256 };
        st = oc_cl_launch(at->dev, OC_CLK_ATTN_COUNT, 1, one, one, (int)OC_ARRAY_LEN(c), c, err);
        if (st == OC_OK) {
            at->pend = 1;
            at->pend_dense += dense;
        }
        return st;
    }
    st = oc_cl_download(at->dev, at->counts_buf, 0, at->counts, n_items * 2 * sizeof(uint32_t), err);
    if (st != OC_OK) return st;
    uint64_t kept = 0, executed = 0;
    for (size_t i = 0; i < n_items; i++) {
        kept += at->counts[2 * i];
        executed += at->counts[2 * i + 1];
    }
    stats->flops_kept += kept * per_pair;
    stats->flops_skipped += (dense > kept ? dense - kept : 0) * per_pair;
    stats->flops_executed += executed * per_pair;
    return OC_OK;
}

oc_status oc_cl_attn_run(oc_cl_attn *at, const oc_attn_call *call, const oc_cl_attn_bufs *io, oc_attn_stats *stats,
                         oc_error *err) {
    return run_call(at, call, io, stats, 0, err);
}

/* ---- the index chosen on the device ------------------------------------------------------------------- */

/* The choice entries (dyn.cl oc_dyn_choose) of the queued jobs: each Vertical-Slash part a job's
 * scores feed (a plain head's, a Q-Boundary modality's, a 2D-Boundary pair's by rank, as
 * choose_job reads them), at the room dyn_tables gave it. Returns the count. */
static int32_t ch_entries(oc_cl_attn *at, const oc_attn_call *a, const int32_t *n_m) {
    int32_t n_kv = a->n_kv, S = 5 * n_kv, n = 0, scratch = 2 * (int32_t)nkv1(at);
    for (int32_t b = 0; b < at->n_est; b++) {
        const int32_t *job = at->est_job + 4 * b;
        int32_t h = job[0], m = job[2];
        int by_rank = job[1] == EST_2D;
        for (int mk = 0; mk < (by_rank ? OC_N_MODALITIES : 1); mk++) {
            const oc_head_pattern *pat = &a->patterns[h];
            oc_head_pattern sub = job[1] == EST_HEAD ? *pat : by_rank ? oc_pattern_pair(pat, m, mk) : oc_pattern_modal(pat, m);
            int32_t slot = h * N_SLOTS + (job[1] == EST_HEAD ? 0 : by_rank ? m * OC_N_MODALITIES + mk : m);
            const int32_t *cs = at->ch_slot + (size_t)slot * CH_SLOT_INTS;
            if (sub.kind != OC_PATTERN_VERTICAL_SLASH || cs[0] < 0) continue;
            int32_t *e = at->ch_tab + (size_t)n * CH_INTS;
            e[0] = b * S;
            e[1] = by_rank ? at->dyn.key_start[mk] : -1;
            e[2] = by_rank ? n_m[mk] : n_kv;
            e[3] = by_rank ? OC_MAX(n_m[mk], n_m[m]) : n_kv;
            e[4] = sub.n_vertical;
            e[5] = sub.n_slash;
            e[6] = b * S + n_kv + (by_rank ? 2 * mk * n_kv : 0);
            e[7] = cs[0];
            e[8] = cs[1];
            e[9] = cs[2];
            e[10] = by_rank ? n_m[mk] : n_kv;
            e[11] = n * scratch;
            n++;
        }
    }
    return n;
}

/* Runs the queued jobs' estimate and their choices on the device, no read-back (the batch full,
 * or flush: whenever any is queued). */
static oc_status est_flush_dev(oc_cl_attn *at, const oc_attn_call *a, const oc_cl_attn_bufs *io, const int32_t *n_m,
                               int flush, oc_error *err) {
    if (!at->n_est || (!flush && at->n_est < at->est_jobs)) return OC_OK;
    oc_status st = est_launch(at, a, io, n_m, 0, err);
    int32_t n = st == OC_OK ? ch_entries(at, a, n_m) : 0;
    if (st == OC_OK && n) st = ring_table(at, at->ch_tab_buf, at->ch_tab, (size_t)n * CH_INTS * 4, err);
    if (st == OC_OK && n) {
        /* a round's keys in local memory: up to 2 x 4,096 + 1,024 of them (the long model's
         * diagonals at 4,361 keys), within the device's local memory less the kernel's own 2 KiB */
        const oc_cl_caps *c = oc_cl_device_caps(at->dev);
        size_t n_cache = OC_MIN((size_t)CH_CACHE, c->local_mem_bytes > 4096 ? (c->local_mem_bytes - 4096) / 4 : 0);
        oc_cl_arg args[] = { OC_CL_BUF(at->est_scores_buf), OC_CL_BUF(at->est_perm_buf), OC_CL_BUF(at->ch_tab_buf),
                             OC_CL_I32(0), OC_CL_BUF(at->dyn_buf), OC_CL_BUF(at->ch_scratch_buf),
                             OC_CL_LOCAL(OC_MAX(n_cache, (size_t)1) * 4), OC_CL_I32((int32_t)n_cache) };
        size_t local[1] = { CH_WG }, global[1] = { (size_t)n * CH_WG };
        st = oc_cl_launch(at->dev, OC_CLK_DYN_CHOOSE, 1, global, local, (int)OC_ARRAY_LEN(args), args, err);
    }
    at->n_est = 0;
    return st;
}

/* 1 when no head of the call has a Grid part: Alg. 1's stride search stays the host's. */
static int device_choosable(const oc_attn_call *a) {
    for (int32_t h = 0; h < a->n_head; h++) {
        const oc_head_pattern *p = &a->patterns[h];
        if (p->kind == OC_PATTERN_GRID) return 0;
        for (int m = 0; m < OC_N_MODALITIES; m++) {
            if (p->kind == OC_PATTERN_Q_BOUNDARY && p->modal[m].kind == OC_PATTERN_GRID) return 0;
            for (int k = 0; k < OC_N_MODALITIES && p->kind == OC_PATTERN_BOUNDARY_2D; k++)
                if (p->pair[m][k].kind == OC_PATTERN_GRID) return 0;
        }
    }
    return 1;
}

/* The call's index estimated and chosen on the device, its tables queued (dyn_tables dev): what
 * oc_cl_attn_dyn_build and the run's tables do, with the choice where the scores are. The host
 * decides only what the geometry decides: which modality has 64 rows to estimate from, the 2D
 * keys' permutation, the row groups. */
static oc_status dyn_device(oc_cl_attn *at, const oc_attn_call *a, const oc_cl_attn_bufs *io, oc_error *err) {
    oc_status st = oc_cl_attn_prepare(at, a, err);
    if (st == OC_OK) st = oc_mask_check_dyn(a, 0, "opencl attn", err);
    if (st == OC_OK && a->mask != OC_ATTN_CAUSAL && a->mask != OC_ATTN_BIDIRECTIONAL)
        st = oc_fail(err, OC_ERR_UNSUPPORTED, "opencl attn: vertical-slash, grid and boundary heads need a causal or "
                     "bidirectional base (segments run on the CPU)");
    if (st == OC_OK) st = dyn_room(at, a, err);
    if (st != OC_OK) return st;
    int32_t nh = at->lim.n_head, n_kv = a->n_kv, rows[OC_DYN_LAST_Q];
    if ((st = dyn_begin(at, a, io, "opencl attn", err)) != OC_OK) return st;
    oc_dyn_head *heads = at->dyn_heads, *vision = heads + nh, *pairs = vision + nh;
    int32_t n_m[OC_N_MODALITIES] = { 0, 0 }, any_2d = 0;
    for (int32_t h = 0; h < nh; h++) any_2d |= a->patterns[h].kind == OC_PATTERN_BOUNDARY_2D;
    if (any_2d && n_kv > 0) st = dyn_key_perm(at, a, pairs, n_m, err);
    /* a modality with fewer than 64 query rows runs its dynamic parts dense (dyn.h) */
    for (int32_t h = 0; h < nh && n_kv > 0; h++) {
        const oc_head_pattern *pat = &a->patterns[h];
        for (int m = 0; m < OC_N_MODALITIES; m++) {
            if (pat->kind == OC_PATTERN_Q_BOUNDARY && oc_pattern_is_dynamic(pat->modal[m].kind) &&
                !oc_dyn_last_rows(a, m, rows))
                (m ? &vision[h] : &heads[h])->dense = 1;
            if (pat->kind == OC_PATTERN_BOUNDARY_2D && !oc_dyn_last_rows(a, m, rows))
                for (int mk = 0; mk < OC_N_MODALITIES; mk++) pairs[(size_t)h * N_SLOTS + m * OC_N_MODALITIES + mk].dense = 1;
        }
    }
    oc_attn_call c = *a;
    c.dyn = &at->dyn;
    if (st == OC_OK) st = dyn_tables(at, &c, 1, err);
    for (int32_t h = 0; h < nh && n_kv > 0 && st == OC_OK; h++) {
        const oc_head_pattern *pat = &a->patterns[h];
        if (!oc_pattern_needs_index(pat)) continue;
        if (pat->kind == OC_PATTERN_VERTICAL_SLASH) {
            est_queue(at, a, h, EST_HEAD, -1, 1);
            st = est_flush_dev(at, a, io, n_m, 0, err);
        } else if (pat->kind == OC_PATTERN_Q_BOUNDARY) {
            for (int m = 0; m < OC_N_MODALITIES && st == OC_OK; m++)
                if (pat->modal[m].kind == OC_PATTERN_VERTICAL_SLASH && est_queue(at, a, h, EST_QB, m, 1))
                    st = est_flush_dev(at, a, io, n_m, 0, err);
        } else if (pat->kind == OC_PATTERN_BOUNDARY_2D) {
            for (int mq = 0; mq < OC_N_MODALITIES && st == OC_OK; mq++) {
                int any = 0;
                for (int mk = 0; mk < OC_N_MODALITIES; mk++) any |= pat->pair[mq][mk].kind == OC_PATTERN_VERTICAL_SLASH;
                if (any && est_queue(at, a, h, EST_2D, mq, 1)) st = est_flush_dev(at, a, io, n_m, 0, err);
            }
        }
    }
    if (st == OC_OK) st = est_flush_dev(at, a, io, n_m, 1, err);
    at->n_est = 0;
    return st;
}

oc_status oc_cl_attn_run_indexed(oc_cl_attn *at, const oc_attn_call *call, const oc_cl_attn_bufs *io,
                                 oc_attn_stats *stats, uint64_t *estimate_ns, oc_error *err) {
    int needs = 0;
    for (int32_t h = 0; call && call->patterns && !call->dyn && oc_attn_wants_dyn(call) && h < call->n_head; h++)
        needs |= oc_pattern_needs_index(&call->patterns[h]);
    if (!needs) return run_call(at, call, io, stats, 0, err);
    uint64_t t0 = estimate_ns ? oc_port_now_ns() : 0;
    oc_attn_call c = *call;
    int dev = device_choosable(call);
    oc_status st = dev ? dyn_device(at, call, io, err) : oc_cl_attn_dyn_build(at, call, io, &c.dyn, err);
    if (estimate_ns) *estimate_ns += oc_port_now_ns() - t0;
    return st != OC_OK ? st : run_call(at, &c, io, stats, dev, err);
}

int32_t oc_cl_attn_parts_ints(const oc_cl_attn *at) { return at->dyn_cap; }

oc_status oc_cl_attn_parts(oc_cl_attn *at, int32_t *tmp, int32_t *out, int32_t cap, int32_t *n_out, oc_error *err) {
    *n_out = 0;
    if (!has_dyn(at)) return OC_OK;
    oc_status st = oc_cl_download(at->dev, at->dyn_buf, 0, tmp, (size_t)at->dyn_cap * 4, err);
    if (st != OC_OK) return st;
    int32_t n = 0, last = -1;
#define PUT(x) do { if (n >= cap) return oc_fail(err, OC_ERR_RANGE, "opencl attn parts: more than %d ints", (int)cap); out[n++] = (x); } while (0)
    for (int32_t r = 0; r < at->n_hruns; r++) {
        const int32_t *run = at->hruns + (size_t)r * RUN_INTS;
        if (run[2] == last) continue;   /* the runs of one row list share its parts */
        last = run[2];
        PUT(run[6]);
        PUT(run[3]);
        for (int32_t k = 0; k < run[3]; k++) {
            const int32_t *pt = tmp + run[2] + k * PART_INTS;
            PUT(pt[0]);
            if (pt[0] != DYN_VS) {
                for (int i = 1; i < PART_INTS; i++) PUT(pt[i]);
                continue;
            }
            PUT(pt[1]);
            for (int32_t i = 0; i < pt[1]; i++) PUT(tmp[pt[2] + i]);
            PUT(pt[3]);
            for (int32_t i = 0; i < 2 * pt[3]; i++) PUT(tmp[pt[4] + i]);
            PUT(pt[5] >= 0);
            PUT(pt[6]);
        }
    }
#undef PUT
    *n_out = n;
    return OC_OK;
}

void oc_cl_attn_defer_counts(oc_cl_attn *at, int on) { at->defer_counts = on != 0; }

oc_status oc_cl_attn_counts_take(oc_cl_attn *at, oc_attn_stats *stats, oc_error *err) {
    if (!at || !at->pend) return OC_OK;
    uint64_t acc[2], per_pair = 4 * (uint64_t)at->lim.head_dim;
    oc_status st = oc_cl_download(at->dev, at->acc_buf, 0, acc, sizeof acc, err);
    if (st == OC_OK) st = oc_cl_fill32(at->dev, at->acc_buf, 0, 0, sizeof acc, err);
    if (st == OC_OK && stats) {
        stats->flops_kept += acc[0] * per_pair;
        stats->flops_skipped += (at->pend_dense > acc[0] ? at->pend_dense - acc[0] : 0) * per_pair;
        stats->flops_executed += acc[1] * per_pair;
    }
    at->pend = 0;
    at->pend_dense = 0;
    return st;
}
