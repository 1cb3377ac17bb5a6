/* cl_attn.c: the host side of OpenCL attention (cl_attn.h): the query runs, the image table, the
 * stacked / split decisions, argument checks and the launches of opencl/kernels/attn.cl; for
 * MMInference's dynamic heads the estimate (opencl/kernels/dyn.cl), the index choice (the CPU's
 * oc_dyn_choose) and the index tables the kernel reads. */

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

#include <string.h>

#define RUN_INTS 7   /* i0, len, c0, c1, image, step, head (-1: every unit of the launch) */
#define IMG_INTS 3
#define DYN_INTS 5   /* opencl/kernels/attn.cl: kind, then 4 ints per kind */
#define DYN_VS 1
#define DYN_GRID 2
#define DYN_GRID_CLASSES 1024   /* residue classes per grid head the run table holds (Table 3's max stride) */
#define EST_ROWS 64             /* opencl/kernels/dyn.cl: rows and keys per estimate work-group */
#define EST_SUB 32
#define SPLIT_MAX_Q 4
#define SPLIT_MIN_KEYS 256
#define SPLIT_MAX_CHUNKS 64
#define POS_LIMIT 0x3fffffff   /* positions stay below the kernel's "unbounded" window edge */

struct oc_cl_attn {
    oc_cl_device *dev;
    oc_cl_attn_limits lim;
    int32_t bq, bk, wg, cg;          /* rows per work-group, keys per tile, items, key groups */
    int32_t runs_cap, items_cap;
    int32_t *runs, *img;             /* host copies: [runs_cap][RUN_INTS], [max(1, images)][IMG_INTS] */
    oc_token_span *segs;             /* [max(1, max_segments)]: the prepared call's segments */
    oc_cl_buf *runs_buf, *img_buf, *partials_buf, *counts_buf;
    uint32_t *counts;                /* [items_cap][2] host copy for stats */
    int32_t pat_cap, pat_used, pat_next;   /* host pattern sets: slots, slots filled, next to reuse */
    int32_t *pat_host;               /* [pat_cap][n_head][OC_CL_PATTERN_INTS], mirrored in pat_buf */
    oc_cl_buf *pat_buf;
    int32_t force_chunks, forced_for;
    /* MMInference's dynamic heads (lim.max_n_kv > 0 and max_n_q >= 64; else all NULL / 0) */
    int32_t dyn_cap, hruns_cap, n_hruns, part_w;
    int32_t *dyn_host;               /* [dyn_cap]: per head DYN_INTS, then columns and diagonal runs */
    int32_t *hruns;                  /* [hruns_cap][RUN_INTS]: the dynamic heads' runs */
    oc_dyn_head *dyn_heads;          /* [n_head]: the index oc_cl_attn_dyn_build chose */
    int32_t *dyn_idx;                /* [n_head][3 max_n_kv]: its arrays */
    int32_t *est_head_ids;           /* [n_head] */
    float *est_scores;               /* [3 max_n_kv]: one head's downloaded scores */
    int32_t *est_work;               /* [2 max_n_kv] */
    double *est_grid;                /* [2 max_n_kv] */
    oc_attn_dyn dyn;
    oc_cl_buf *dyn_buf, *hruns_buf, *est_heads_buf, *est_part_buf, *est_scores_buf;
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
/* the host arrays of the dynamic heads, in the order dyn_arrays carves them */
static size_t nkv3(const oc_cl_attn *at) { return 3 * (size_t)OC_MAX(1, at->lim.max_n_kv); }
static size_t dyn_bytes(const oc_cl_attn *at) {
    if (!has_dyn(at)) return 0;
    size_t nh = (size_t)at->lim.n_head;
    return (size_t)at->dyn_cap * 4 + (size_t)at->hruns_cap * RUN_INTS * 4 + nh * sizeof(oc_dyn_head) +
           nh * nkv3(at) * 4 + nh * 4 + nkv3(at) * 4 + nkv3(at) / 3 * 2 * (4 + 8);
}

/* The table sizes for limits lim and bq query rows per work-group. */
static void size_tables(oc_cl_attn *at, const oc_cl_attn_limits *lim, int32_t bq) {
    at->lim = *lim;
    /* every run ends at a multiple of bq rows or at one of <= 2 edges per image and segment */
    at->runs_cap = lim->max_n_q / bq + 2 * (lim->max_images + lim->max_segments) + 2;
    at->pat_cap = OC_MAX(1, OC_MIN(OC_CL_ATTN_PATTERN_SETS, 65536 / OC_MAX(1, lim->n_head)));
    at->dyn_cap = at->hruns_cap = 0;
    if (lim->max_n_q >= OC_DYN_LAST_Q && lim->max_n_kv > 0) {
        /* per head: the columns (<= n_kv) and the merged diagonal runs (<= 2 n_kv - 1, 2 ints each) */
        at->dyn_cap = lim->n_head * (DYN_INTS + 5 * lim->max_n_kv);
        /* per head: Vertical-Slash cuts at every block and every bq rows; Grid at every bq rows and
         * every residue class (up to DYN_GRID_CLASSES of them) */
        at->hruns_cap = lim->n_head * (lim->max_n_q / bq + lim->max_n_q / OC_DYN_BLOCK + 2 +
                                       OC_MIN(lim->max_n_q, DYN_GRID_CLASSES));
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
    size_t total = 5 * oc_cl_buf_host_bytes();   /* runs, img, partials, counts, pat on the device */
    oc_add_block(&total, sizeof at);
    oc_add_block(&total, runs_bytes(&at));
    oc_add_block(&total, img_bytes(&at));
    oc_add_block(&total, counts_bytes(&at));
    oc_add_block(&total, segs_bytes(&at));
    oc_add_block(&total, pat_bytes(&at));
    if (has_dyn(&at)) {   /* the dynamic heads' host block and its 5 device buffers */
        total += 5 * oc_cl_buf_host_bytes();
        oc_add_block(&total, dyn_bytes(&at));
    }
    return total;
}

/* Carve the dynamic heads' host arrays from one aligned block of dyn_bytes: doubles and the
 * pointer-holding heads first, then the int32 / float arrays. */
static void dyn_arrays(oc_cl_attn *at, unsigned char *b) {
    size_t nh = (size_t)at->lim.n_head, n3 = nkv3(at);
    at->est_grid = (double *)b;
    b += n3 / 3 * 2 * 8;
    at->dyn_heads = (oc_dyn_head *)b;
    b += nh * sizeof(oc_dyn_head);
    at->dyn_host = (int32_t *)b;
    b += (size_t)at->dyn_cap * 4;
    at->hruns = (int32_t *)b;
    b += (size_t)at->hruns_cap * RUN_INTS * 4;
    at->dyn_idx = (int32_t *)b;
    b += nh * n3 * 4;
    at->est_head_ids = (int32_t *)b;
    b += nh * 4;
    at->est_scores = (float *)b;
    b += n3 * 4;
    at->est_work = (int32_t *)b;
}

/* floats of one local row of Q or K/V: an odd number of float4s, so rows start on other banks */
static size_t local_row_floats(int32_t head_dim) { return (size_t)(((head_dim + 3) / 4) | 1) * 4; }

void oc_cl_attn_close(oc_cl_attn *at) {
    if (!at) return;
    const oc_allocator *alloc = at->dev->alloc;
    oc_cl_buf_free(at->runs_buf);
    oc_cl_buf_free(at->img_buf);
    oc_cl_buf_free(at->partials_buf);
    oc_cl_buf_free(at->counts_buf);
    oc_cl_buf_free(at->pat_buf);
    oc_cl_buf_free(at->dyn_buf);
    oc_cl_buf_free(at->hruns_buf);
    oc_cl_buf_free(at->est_heads_buf);
    oc_cl_buf_free(at->est_part_buf);
    oc_cl_buf_free(at->est_scores_buf);
    oc_mem_free(alloc, at->est_grid, dyn_bytes(at));
    oc_mem_free(alloc, at->pat_host, pat_bytes(at));
    oc_mem_free(alloc, at->runs, runs_bytes(at));
    oc_mem_free(alloc, at->img, img_bytes(at));
    oc_mem_free(alloc, at->counts, counts_bytes(at));
    oc_mem_free(alloc, at->segs, segs_bytes(at));
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
    size_tables(at, lim, OC_MIN(bq, TABLE_BQ));
    at->runs = oc_mem_alloc(dev->alloc, runs_bytes(at));
    at->img = oc_mem_calloc(dev->alloc, img_bytes(at));
    at->counts = oc_mem_alloc(dev->alloc, counts_bytes(at));
    at->segs = oc_mem_alloc(dev->alloc, segs_bytes(at));
    at->pat_host = oc_mem_alloc(dev->alloc, pat_bytes(at));
    oc_status st = OC_OK;
    if (!at->runs || !at->img || !at->counts || !at->segs || !at->pat_host)
        st = oc_fail(err, OC_ERR_NOMEM, "opencl attn: out of memory");
    size_t partials = (size_t)SPLIT_MAX_CHUNKS * lim->n_head * OC_MIN(lim->max_n_q, SPLIT_MAX_Q) * (lim->head_dim + 2) * 4;
    if (st == OC_OK) st = oc_cl_buf_alloc(dev, runs_bytes(at), &at->runs_buf, err);
    if (st == OC_OK) st = oc_cl_buf_alloc(dev, img_bytes(at), &at->img_buf, err);
    if (st == OC_OK) st = oc_cl_buf_alloc(dev, partials, &at->partials_buf, err);
    if (st == OC_OK) st = oc_cl_buf_alloc(dev, counts_bytes(at), &at->counts_buf, err);
    if (st == OC_OK) st = oc_cl_buf_alloc(dev, pat_bytes(at), &at->pat_buf, err);
    if (st == OC_OK && has_dyn(at)) {
        unsigned char *block = oc_mem_alloc(dev->alloc, dyn_bytes(at));
        if (!block) st = oc_fail(err, OC_ERR_NOMEM, "opencl attn: out of memory for the dynamic heads' index");
        else dyn_arrays(at, block);
        size_t nh = (size_t)lim->n_head, n_kv = (size_t)lim->max_n_kv;
        at->part_w = (lim->max_n_kv + EST_ROWS - 1) / EST_ROWS;
        if (st == OC_OK) st = oc_cl_buf_alloc(dev, (size_t)at->dyn_cap * 4, &at->dyn_buf, err);
        if (st == OC_OK) st = oc_cl_buf_alloc(dev, (size_t)at->hruns_cap * RUN_INTS * 4, &at->hruns_buf, err);
        if (st == OC_OK) st = oc_cl_buf_alloc(dev, nh * 4, &at->est_heads_buf, err);
        if (st == OC_OK) st = oc_cl_buf_alloc(dev, nh * (size_t)at->part_w * EST_ROWS * 8, &at->est_part_buf, err);
        if (st == OC_OK) st = oc_cl_buf_alloc(dev, nh * 3 * n_kv * 4, &at->est_scores_buf, err);
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

/* ---- prepare ---------------------------------------------------------------------------------------------- */

/* The mask description (mask.h), then what this context and its kernel can take. */
static oc_status check_shape(const oc_cl_attn *at, const oc_attn_call *s, oc_error *err) {
    oc_status st = oc_mask_check(s, "opencl attn", err);
    if (st != OC_OK) return st;
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
        r[3] = cls.c1;
        r[4] = cls.image;
        r[5] = 1;
        r[6] = -1;
        n++;
        i = end;
    }
    at->n_runs = n;
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
    if (s->n_q <= SPLIT_MAX_Q && s->n_kv >= 2 * SPLIT_MIN_KEYS) {
        const oc_cl_caps *c = oc_cl_device_caps(at->dev);
        int64_t want = 4 * (int64_t)OC_MAX(c->compute_units, 1u);
        if (items < want) chunks = (int32_t)OC_MIN((want + items - 1) / OC_MAX(items, 1), (int64_t)SPLIT_MAX_CHUNKS);
        if (at->force_chunks) chunks = OC_MIN(at->force_chunks, SPLIT_MAX_CHUNKS);
        chunks = OC_MIN(chunks, s->n_kv / SPLIT_MIN_KEYS);
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
    if (at->n_runs > 0) st = oc_cl_upload(at->dev, at->runs_buf, 0, at->runs, (size_t)at->n_runs * RUN_INTS * sizeof(int32_t), err);
    if (st == OC_OK && at->n_images > 0)
        st = oc_cl_upload(at->dev, at->img_buf, 0, at->img, (size_t)at->n_images * IMG_INTS * sizeof(int32_t), err);
    at->prepared = st == OC_OK;
    return st;
}

/* The ints the kernel reads for one head's pattern (a-shape sizes only for a-shape heads).
 * Vertical-Slash and Grid heads are dense in this table: that is what they run in decode, and in
 * prefill the per-call index table (dyn_tables) marks them and the kernel's second launch runs them. */
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

oc_pattern_exec oc_cl_attn_pattern_exec(oc_pattern_kind k) {
    switch (k) {
    case OC_PATTERN_SINK:
    case OC_PATTERN_INTRA_IMAGE:
    case OC_PATTERN_INTRA_IMAGE_SINK:
    case OC_PATTERN_A_SHAPE: return OC_EXEC_SPARSE;
    case OC_PATTERN_VERTICAL_SLASH:
    case OC_PATTERN_GRID: return OC_EXEC_PREFILL;
    default: return OC_EXEC_DENSE;
    }
}

/* ---- dynamic heads ------------------------------------------------------------------------------------- */

/* 1 when the call runs VERTICAL_SLASH / GRID heads sparse (prefill: attn.h). */
static int call_dynamic(const oc_attn_call *a) {
    for (int32_t h = 0; a->patterns && oc_attn_wants_dyn(a) && h < a->n_head; h++)
        if (oc_pattern_is_dynamic(a->patterns[h].kind)) return 1;
    return 0;
}

/* Append run (i0, len, step) of head h, cut into balanced pieces of at most bq rows (no 3-row tail). */
static int add_head_runs(oc_cl_attn *at, const oc_attn_call *a, int32_t h, int32_t i0, int32_t len, int32_t step) {
    int32_t n_pieces = (len + at->bq - 1) / at->bq;
    if (at->n_hruns + n_pieces > at->hruns_cap) return 0;
    for (int32_t p = 0; p < n_pieces; p++) {
        int32_t k0 = (int32_t)((int64_t)len * p / n_pieces), k1 = (int32_t)((int64_t)len * (p + 1) / n_pieces);
        int32_t *r = at->hruns + (size_t)at->n_hruns++ * RUN_INTS;
        r[0] = i0 + k0 * step;
        r[1] = k1 - k0;
        r[2] = 0;
        r[3] = a->n_kv;
        r[4] = -1;
        r[5] = step;
        r[6] = h;
    }
    return 1;
}

/* The index table the kernel reads (cl_attn.c DYN_INTS per head, then the columns and the merged
 * diagonal runs) and the dynamic heads' runs: a Vertical-Slash head's rows per block of
 * OC_DYN_BLOCK positions (they share the block's diagonal runs: dyn.h), a Grid head's rows per
 * residue class (Alg. 1's row permutation, as the CPU's do_grid_head walks them). Uploaded. */
static oc_status dyn_tables(oc_cl_attn *at, const oc_attn_call *a, oc_error *err) {
    int32_t nh = at->lim.n_head, used = nh * DYN_INTS, q0 = a->q_offset;
    at->n_hruns = 0;
    for (int32_t h = 0; h < nh; h++) {
        int32_t *hd = at->dyn_host + (size_t)h * DYN_INTS;
        memset(hd, 0, DYN_INTS * sizeof *hd);
        const oc_head_pattern *pat = &a->patterns[h];
        const oc_dyn_head *dh = &a->dyn->heads[h];
        int ok = 1;
        if (pat->kind == OC_PATTERN_VERTICAL_SLASH) {
            int32_t nv = dh->n_vertical, at_v = used, at_d = used + nv, nd = 0;
            if (nv > a->n_kv || dh->n_slash > 2 * a->n_kv - 1 || (int64_t)at_d + 2 * (int64_t)dh->n_slash > at->dyn_cap)
                return oc_fail(err, OC_ERR_INVALID, "opencl attn: head %d index has %d columns and %d diagonals for "
                               "%d keys", (int)h, (int)nv, (int)dh->n_slash, (int)a->n_kv);
            for (int32_t k = 0; k < nv; k++) {
                if (dh->vertical[k] < 0 || dh->vertical[k] >= a->n_kv || (k && dh->vertical[k] <= dh->vertical[k - 1]))
                    return oc_fail(err, OC_ERR_INVALID, "opencl attn: head %d index columns not ascending in [0, %d)",
                                   (int)h, (int)a->n_kv);
                at->dyn_host[at_v + k] = dh->vertical[k];
            }
            /* the runs [b - o, b + B - o) relative to the block start b, ascending (offsets descending), merged */
            int32_t *dr = at->dyn_host + at_d;
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
            hd[0] = DYN_VS;
            hd[1] = nv;
            hd[2] = at_v;
            hd[3] = nd;
            hd[4] = at_d;
            used = at_d + 2 * nd;
            for (int32_t i = 0; i < a->n_q && ok;) {
                int32_t p = q0 + i, end = OC_MIN(a->n_q, (p / OC_DYN_BLOCK + 1) * OC_DYN_BLOCK - q0);
                ok = add_head_runs(at, a, h, i, end - i, 1);
                i = end;
            }
        } else if (pat->kind == OC_PATTERN_GRID) {
            int32_t s = dh->stride;
            hd[0] = DYN_GRID;
            hd[1] = s;
            hd[2] = dh->phase;
            hd[3] = pat->grid_lines;
            for (int32_t rq = 0; rq < s && ok; rq++) {
                int32_t first = (int32_t)((((int64_t)rq + dh->phase - q0) % s + s) % s);
                if (first < a->n_q) ok = add_head_runs(at, a, h, first, (a->n_q - 1 - first) / s + 1, s);
            }
        }
        if (!ok)
            return oc_fail(err, OC_ERR_RANGE, "opencl attn: the dynamic heads need more than %d runs (a grid stride "
                           "above %d?)", (int)at->hruns_cap, DYN_GRID_CLASSES);
    }
    oc_status st = oc_cl_upload(at->dev, at->dyn_buf, 0, at->dyn_host, (size_t)used * 4, err);
    if (st == OC_OK && at->n_hruns)
        st = oc_cl_upload(at->dev, at->hruns_buf, 0, at->hruns, (size_t)at->n_hruns * RUN_INTS * 4, err);
    return st;
}

/* The dynamic-head checks shared by build and run: enough room for this call. */
static oc_status dyn_room(const oc_cl_attn *at, const oc_attn_call *a, oc_error *err) {
    if (!has_dyn(at) || a->n_kv > at->lim.max_n_kv)
        return oc_fail(err, OC_ERR_RANGE, "opencl attn: vertical-slash / grid heads over %d keys, the context was "
                       "opened for %d (limits max_n_kv)", (int)a->n_kv, has_dyn(at) ? (int)at->lim.max_n_kv : 0);
    if (at->stacked || at->n_chunks > 1)
        return oc_fail(err, OC_ERR_UNSUPPORTED, "opencl attn: vertical-slash / grid heads in a stacked or split call");
    return OC_OK;
}

oc_status oc_cl_attn_dyn_build(oc_cl_attn *at, const oc_attn_call *a, const oc_cl_attn_bufs *io, const oc_attn_dyn **out,
                               oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "opencl attn dyn: out is NULL");
    *out = NULL;
    oc_status st = oc_cl_attn_prepare(at, a, err);
    if (st == OC_OK) st = oc_mask_check_dyn(a, 0, "opencl attn dyn", err);
    if (st != OC_OK) return st;
    int32_t nh = at->lim.n_head, n_dyn = 0, n_kv = a->n_kv, d = at->lim.head_dim;
    for (int32_t h = 0; a->patterns && h < nh; h++)
        if (oc_pattern_is_dynamic(a->patterns[h].kind)) {
            if (!oc_attn_wants_dyn(a))
                return oc_fail(err, OC_ERR_INVALID, "opencl attn dyn: %d queries, the estimate needs at least %d",
                               (int)a->n_q, OC_DYN_LAST_Q);
            at->est_head_ids[n_dyn++] = h;
        }
    if (n_dyn && (st = dyn_room(at, a, err)) != OC_OK) return st;
    size_t kv_bytes = a->kv_dtype == OC_DTYPE_F16 ? 2 : 4;
    if (!io || !tensor_fits(io->q, a->q_off, a->q_stride_token, a->q_stride_head, a->n_q, nh, d, 4) ||
        !tensor_fits(io->k, a->k_off, a->k_stride_token, a->k_stride_head, n_kv, at->lim.n_head_kv, d, kv_bytes))
        return oc_fail(err, OC_ERR_RANGE, "opencl attn dyn: q or k (with its offset and strides) does not fit its buffer");
    for (int32_t h = 0; h < nh && has_dyn(at); h++) {
        memset(&at->dyn_heads[h], 0, sizeof at->dyn_heads[h]);
        at->dyn_heads[h].stride = 1;
    }
    at->dyn.n_head = nh;
    at->dyn.heads = at->dyn_heads;
    if (n_dyn && n_kv > 0) {
        int causal = a->mask == OC_ATTN_CAUSAL;
        int32_t p0 = a->q_offset + a->n_q - EST_ROWS, key_end = causal ? OC_MIN(n_kv, p0 + EST_ROWS) : n_kv;
        int32_t n_w0 = (key_end + EST_ROWS - 1) / EST_ROWS, n_w1 = (key_end + 2 * EST_ROWS - 2) / EST_ROWS;
        size_t n3 = 3 * (size_t)n_kv;
        st = oc_cl_upload(at->dev, at->est_heads_buf, 0, at->est_head_ids, (size_t)n_dyn * 4, err);
        if (st == OC_OK) st = oc_cl_fill32(at->dev, at->est_scores_buf, 0, 0, (size_t)n_dyn * n3 * 4, err);
        for (int pass = 0; pass < 2 && st == OC_OK; pass++) {
            oc_cl_arg args[] = {
                OC_CL_I32(pass), OC_CL_BUF(io->q), OC_CL_I32(a->q_off), OC_CL_I32(a->q_stride_token),
                OC_CL_I32(a->q_stride_head), OC_CL_BUF(io->k), OC_CL_I32(a->k_off), OC_CL_I32(a->k_stride_token),
                OC_CL_I32(a->k_stride_head), OC_CL_I32(a->kv_dtype == OC_DTYPE_F16), OC_CL_BUF(at->est_heads_buf),
                OC_CL_I32(nh / at->lim.n_head_kv), OC_CL_I32(d), OC_CL_I32(a->n_q), OC_CL_I32(n_kv),
                OC_CL_I32(a->q_offset), OC_CL_I32(causal), OC_CL_F32(a->scale * 1.44269504088896340736f),
                OC_CL_BUF(at->est_part_buf), OC_CL_I32(n_w0), OC_CL_BUF(at->est_scores_buf),
                OC_CL_LOCAL((size_t)EST_SUB * (size_t)d * 4), OC_CL_LOCAL((size_t)EST_ROWS * (EST_SUB + 1) * 4),
            };
            size_t local[2] = { EST_ROWS, 1 }, global[2] = { (size_t)(pass ? n_w1 : n_w0) * EST_ROWS, (size_t)n_dyn };
            st = oc_cl_launch(at->dev, OC_CLK_DYN_ESTIMATE, 2, global, local, (int)OC_ARRAY_LEN(args), args, err);
        }
        /* the choice, head by head, with the CPU's code */
        for (int32_t k = 0; k < n_dyn && st == OC_OK; k++) {
            int32_t h = at->est_head_ids[k];
            st = oc_cl_download(at->dev, at->est_scores_buf, (size_t)k * n3 * 4, at->est_scores, (n3 - 1) * 4, err);
            if (st == OC_OK)
                oc_dyn_choose(&a->patterns[h], n_kv, at->est_scores, at->est_scores + n_kv,
                              at->dyn_idx + (size_t)h * nkv3(at), at->est_work, at->est_grid, &at->dyn_heads[h]);
        }
        if (st != OC_OK) return st;
    }
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
    int32_t d = L->head_dim;
    size_t row = local_row_floats(d) * sizeof(float);
    oc_cl_arg a[] = {
        OC_CL_BUF(io->q), OC_CL_I32(call->q_off), OC_CL_I32(call->q_stride_token), OC_CL_I32(call->q_stride_head),
        OC_CL_BUF(io->k), OC_CL_I32(call->k_off), OC_CL_I32(call->k_stride_token), OC_CL_I32(call->k_stride_head),
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
        OC_CL_LOCAL((size_t)at->bq * row), OC_CL_LOCAL((size_t)at->bk * row),
        OC_CL_LOCAL((size_t)at->bq * (size_t)(at->bk + 4) * 4),
        OC_CL_LOCAL((size_t)at->bq * (size_t)at->cg * 4),
        OC_CL_LOCAL((3 * (size_t)at->bk + (size_t)at->wg + 1) * 4),
    };
    /* dimension 0: (run, unit), units fastest, so every head's longest runs start first */
    size_t local[3] = { (size_t)at->wg, 1, 1 };
    size_t global[3] = { (size_t)ln->n_runs * (size_t)ln->n_units * (size_t)at->wg, 1,
                         ln->head_runs ? 1 : (size_t)at->n_chunks };
    return oc_cl_launch(at->dev, OC_CLK_ATTN, 3, global, local, (int)OC_ARRAY_LEN(a), a, err);
}

oc_status oc_cl_attn_run(oc_cl_attn *at, const oc_attn_call *call, const oc_cl_attn_bufs *io, oc_attn_stats *stats,
                         oc_error *err) {
    oc_status st = oc_cl_attn_prepare(at, call, err);
    if (st != OC_OK) return st;
    const oc_cl_attn_limits *L = &at->lim;
    int32_t d = L->head_dim;
    if (!io) return oc_fail(err, OC_ERR_INVALID, "opencl attn: no buffers");
    size_t kv_bytes = call->kv_dtype == OC_DTYPE_F16 ? 2 : 4;
    if (!tensor_fits(io->q, call->q_off, call->q_stride_token, call->q_stride_head, at->n_q, L->n_head, d, 4) ||
        !tensor_fits(io->out, call->out_off, call->out_stride_token, call->out_stride_head, at->n_q, L->n_head, d, 4) ||
        !tensor_fits(io->k, call->k_off, call->k_stride_token, call->k_stride_head, at->n_kv, L->n_head_kv, d, kv_bytes) ||
        !tensor_fits(io->v, call->v_off, call->v_stride_token, call->v_stride_head, at->n_kv, L->n_head_kv, d, kv_bytes))
        return oc_fail(err, OC_ERR_RANGE, "opencl attn: q, k, v or out (with its offset and strides) does not fit its "
                       "buffer");
    if (io->patterns && (io->patterns_head < 0 || io->patterns_head > INT32_MAX / OC_CL_PATTERN_INTS ||
                         (uint64_t)(io->patterns_head + L->n_head) * OC_CL_PATTERN_INTS * 4 > oc_cl_buf_bytes(io->patterns)))
        return oc_fail(err, OC_ERR_RANGE, "opencl attn: patterns of heads %lld.. do not fit their buffer",
                       (long long)io->patterns_head);
    if (at->n_q == 0) return OC_OK;
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
    if (dyn_on) {   /* VERTICAL_SLASH / GRID heads: their index, then a launch of their own */
        if ((st = oc_mask_check_dyn(call, OC_MASK_INDEX_PLAIN, "opencl attn", err)) != OC_OK || (st = dyn_room(at, call, err)) != OC_OK ||
            (st = dyn_tables(at, call, err)) != OC_OK)
            return st;
    }
    int32_t n_units = at->stacked ? L->n_head_kv : L->n_head;
    size_t n_main = (size_t)at->n_runs * (size_t)n_units * (size_t)at->n_chunks;
    size_t n_items = n_main + (dyn_on ? (size_t)at->n_hruns : 0);
    int want_counts = stats != NULL && n_items <= (size_t)at->items_cap;
    launch ln = { pats, at->runs_buf, dyn_on ? at->dyn_buf : NULL, pat_head, at->n_runs, n_units, 0, 0, want_counts };
    st = launch_attn(at, call, io, &ln, err);
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
    st = oc_cl_download(at->dev, at->counts_buf, 0, at->counts, n_items * 2 * sizeof(uint32_t), err);
    if (st != OC_OK) return st;
    uint64_t kept = 0, executed = 0, dense = at->base_pairs * (uint64_t)L->n_head, per_pair = 4 * (uint64_t)d;
    for (size_t i = 0; i < n_items; i++) {
        kept += at->counts[2 * i];
        executed += at->counts[2 * i + 1];
    }
    stats->flops_kept += kept * per_pair;
    stats->flops_skipped += (dense > kept ? dense - kept : 0) * per_pair;
    stats->flops_executed += executed * per_pair;
    return OC_OK;
}
