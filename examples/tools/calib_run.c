/* calib_run.c: one calibration run (calib.h): the observer the forward pass calls for every
 * decoder layer, the per-item bookkeeping of each method, and the plan and report at the end.
 * All memory is allocated at open for the model shape and the context length (oc_calib_bytes):
 * the per-token maps, BlindSight's error sums and votes, SparseMM's hits of the answer rows,
 * Q-Cache's last-row distributions of two layers, and the statistics scratch. Nothing is
 * allocated while observing.
 * Threads: the heads of a layer are independent, so the observer hands one head to each task of
 * its own pool (params n_threads); each thread has its own scratch, and what several heads add
 * up (ZipVL's column mass, Q-Cache's head mean) is kept per head and summed in head order after
 * the tasks, so the plan is bitwise the same for any thread count. MMInference's search keeps one
 * work area and stays serial over heads.
 * Contents: the run's state and its one block | opening | per item: token maps, the vision
 * encoder's layers, the decoder's layers, closing an item | results: the plan, the report. */
#include "tools/calib.h"
#include "attention/dyn.h"
#include "attention/layout.h"
#include "core/pool.h"
#include "kvcache/kv_select.h"
#include "port.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_ANSWER_ROWS 16   /* answer tokens whose rows SparseMM scores (the demo answers in 1-2) */

struct oc_calib {
    oc_allocator alloc;
    oc_calib_params p;
    int32_t L, H, HKV, D, max_tokens;
    int32_t VL, VH, VD, max_vision;  /* the vision encoder (VL 0: not calibrated) */
    void *block;
    size_t block_bytes;
    /* the item */
    const uint8_t *const *cells;     /* grounding cells per image (oc_calib_item_begin), or NULL */
    int32_t cells_grid;
    int32_t n_prompt, tokens_ready;
    int32_t *image_of;               /* [max_tokens] */
    uint8_t *is_sink, *in_region;    /* [max_tokens] */
    int32_t n_region;
    int last_row_seen;
    /* BlindSight */
    double *item_err, *item_ref;     /* [L][H][3], [L][H] for this item */
    double *nmse_sum;                /* [L][H][3] over items, for the report */
    int32_t *votes;                  /* [L][H][OC_PATTERN_COUNT] */
    int32_t *sweep_votes;            /* [OC_CALIB_BS_SWEEP][L][H][OC_PATTERN_COUNT]: the frontier's
                                        alpha schedules (oc_calib_candidate) */
    /* SparseMM */
    double *row_hits;                /* [MAX_ANSWER_ROWS][L][H] for this item */
    double *head_scores;             /* [L][H], summed over right answers' tokens */
    int64_t n_scored_tokens, n_right;
    /* Q-Cache */
    double *last_probs;              /* [2][max_tokens]: a^l of layers l-1 and l (head mean) */
    double *row_probs;               /* [max_tokens]: one head's last row */
    double *js_item;                 /* [L]: this item's S(l, l+1) */
    double *js_sum;                  /* [L] over items */
    int64_t n_js_items, n_zipvl_items;
    /* ZipVL */
    double *col_sum, *col_sorted;    /* [max_tokens]: this layer's column sums (head mean), sort scratch */
    int64_t *col_nnz;                /* [max_tokens] */
    double *zv_ratio;                /* [L][2]: summed p / n at tau and at the low tau */
    /* ZipVL output check (ours, calib.h OC_CALIB_ZIPVL_MAX_NMSE): the runtime's T from its probes */
    double *zv_nmse;                 /* [L][2]: summed per-prompt output NMSE at tau and the low tau */
    int32_t *zv_probes;              /* [OC_KV_ZIPVL_RECENT_PROBES + OC_KV_ZIPVL_RANDOM_PROBES] */
    int32_t n_zv_probes;
    double *zv_mass, *zv_norm;       /* [max_tokens]: the probe rows' column sums (all heads), scratch */
    int32_t *zv_nnz, *zv_kept, *zv_order;   /* [max_tokens] */
    uint8_t *zv_set;                 /* [max_tokens]: bit 0 in T at tau, bit 1 in T at the low tau */
    /* MMInference */
    oc_head_pattern mm_cand[OC_CALIB_MMINF_MAX_CAND];
    int32_t mm_n_cand;               /* 0 until the first searched prompt fixes the space */
    double *mm_nmse;                 /* [L][H][OC_CALIB_MMINF_MAX_CAND] summed over items */
    double *mm_err;                  /* [OC_CALIB_MMINF_MAX_CAND]: one head's squared errors */
    uint64_t *mm_kept;               /* [OC_CALIB_MMINF_MAX_CAND]: pairs kept, every head and item */
    uint64_t mm_pairs;               /* causal pairs of the searched heads */
    void *mm_work;                   /* oc_calib_mminf_work_bytes */
    double *mm_err_modal;            /* [OC_CALIB_MMINF_MAX_CAND][2]: one head's per-modality errors */
    double *mm_qb;                   /* [L][H][OC_CALIB_MMINF_MAX_CAND][2]: NMSE of each candidate as
                                        one modality's pattern (Q-Boundary), summed over prompts */
    double *mm_nb_elig;              /* [L][H][OC_CALIB_MMINF_MAX_CAND]: No-Boundary NMSE on those prompts */
    oc_head_pattern mm_pair_cand[OC_N_MODALITIES * OC_CALIB_MMINF_MAX_CAND];   /* [mk][mm_n_cand]: the
                                        cross-modality space, fixed by the first prompt with a layout */
    int mm_pair_ready;
    int32_t mm_n_vision;             /* this item's image tokens */
    double *mm_pair_err;             /* [OC_CALIB_MMINF_MAX_CAND][2][2]: one head's per-pair errors */
    double *mm_2d;                   /* [L][H][OC_CALIB_MMINF_MAX_CAND][2][2]: NMSE of each candidate as
                                        one pair's pattern (2D-Boundary), summed over prompts */
    int64_t mm_qb_items;             /* prompts with >= 64 text and >= 64 image queries */
    struct oc_token_layout *mm_layout;   /* this item's images, when it takes the modality steps */
    unsigned char *mm_layout_mem;    /* one layout's bytes: the slot allocator's block */
    size_t mm_layout_cap;
    int mm_layout_used;
    oc_allocator mm_layout_alloc;
    int64_t mm_items;
    int mm_seen;                     /* this item was searched */
    oc_status mm_status;             /* the first engine error (the observer cannot return one) */
    char mm_error[OC_ERROR_MESSAGE_BYTES];
    /* vision */
    int32_t *seg_start, *seg_end;    /* [max_vision]: each patch's segment */
    int32_t *vis_votes;              /* [VL][VH][1 + OC_CALIB_VISION_N_CAND]: dense, candidates */
    double *vis_nmse;                /* [VL][VH][OC_CALIB_VISION_N_CAND] summed over images */
    int32_t vis_patches;             /* P of the first image; other sizes are skipped */
    int32_t vis_sink[OC_CALIB_VISION_N_CAND], vis_local[OC_CALIB_VISION_N_CAND];
    int64_t n_vision_images, n_vision_skipped;
    /* counts */
    int64_t n_items, prompt_tokens_sum;
    double *kvs;                     /* [L][HKV]: normalised kv-head visual scores */
    /* threads */
    oc_pool *pool;                   /* NULL: serial */
    int32_t n_threads;
    double *scratch;                 /* [n_threads][scratch_doubles] */
    size_t scratch_doubles;
    double *head_cols;               /* [H][max_tokens]: ZipVL column mass of each head */
    int64_t *head_nnz;               /* [H][max_tokens] */
    double *head_rows;               /* [H][max_tokens]: Q-Cache: each head's last prompt row */
    double *head_probe;              /* [H][max_tokens]: ZipVL: each head's probe-row column sums */
    double *head_zerr;               /* [H][3]: ZipVL check: squared errors at the two taus, ref */
};

/* ---- the run's state and its one block ----------------------------------------------------------- */

void oc_calib_params_default(oc_calib_params *p) {
    memset(p, 0, sizeof *p);
    p->methods = OC_CALIB_BLINDSIGHT | OC_CALIB_SPARSEMM | OC_CALIB_QCACHE | OC_CALIB_ZIPVL | OC_CALIB_VISION;
    p->bs_alpha = OC_CALIB_BS_ALPHA;
    p->bs_gamma_d = OC_CALIB_BS_GAMMA_D;
    p->bs_gamma_s = OC_CALIB_BS_GAMMA_S;
    p->bs_gamma_i = OC_CALIB_BS_GAMMA_I;
    p->sink_fraction_ppm = OC_PLAN_DEFAULT_SINK_FRACTION_PPM;
    p->kv_window = OC_PLAN_DEFAULT_KV_WINDOW_TOKENS;
    p->kv_rho = OC_CALIB_KV_RHO;
    p->kv_budget_fraction = 0.5;
    p->qc_epsilon = OC_CALIB_QC_EPSILON;
    p->qc_max_group = OC_CALIB_QC_MAX_GROUP;
    p->qc_mode = OC_LAZY_VLA;
    p->mminf_scale = 1.0;
    p->zipvl_max_nmse = OC_CALIB_ZIPVL_MAX_NMSE;
}

/* The block's layout; with base NULL only the size. */
static size_t layout_block(oc_calib *c, char *base) {
    size_t off = 0, LH = (size_t)c->L * (size_t)c->H, T = (size_t)c->max_tokens;
#define PART(field, bytes) do { if (base) c->field = (void *)(base + off); off += ((bytes) + 63) / 64 * 64; } while (0)
    PART(image_of, T * sizeof(int32_t));
    PART(is_sink, T);
    PART(in_region, T);
    PART(item_err, LH * 3 * sizeof(double));
    PART(item_ref, LH * sizeof(double));
    PART(nmse_sum, LH * 3 * sizeof(double));
    PART(votes, LH * OC_PATTERN_COUNT * sizeof(int32_t));
    PART(sweep_votes, (size_t)OC_CALIB_BS_SWEEP * LH * OC_PATTERN_COUNT * sizeof(int32_t));
    PART(row_hits, (size_t)MAX_ANSWER_ROWS * LH * sizeof(double));
    PART(head_scores, LH * sizeof(double));
    PART(last_probs, 2 * T * sizeof(double));
    PART(row_probs, T * sizeof(double));
    PART(js_item, (size_t)c->L * sizeof(double));
    PART(js_sum, (size_t)c->L * sizeof(double));
    PART(col_sum, T * sizeof(double));
    PART(col_sorted, T * sizeof(double));
    PART(col_nnz, T * sizeof(int64_t));
    PART(zv_ratio, (size_t)c->L * 2 * sizeof(double));
    PART(zv_nmse, (size_t)c->L * 2 * sizeof(double));
    PART(zv_probes, (OC_KV_ZIPVL_RECENT_PROBES + OC_KV_ZIPVL_RANDOM_PROBES) * sizeof(int32_t));
    PART(zv_mass, T * sizeof(double));
    PART(zv_norm, T * sizeof(double));
    PART(zv_nnz, T * sizeof(int32_t));
    PART(zv_kept, T * sizeof(int32_t));
    PART(zv_order, T * sizeof(int32_t));
    PART(zv_set, T);
    PART(seg_start, (size_t)c->max_vision * sizeof(int32_t));
    PART(seg_end, (size_t)c->max_vision * sizeof(int32_t));
    PART(vis_votes, (size_t)c->VL * (size_t)c->VH * (1 + OC_CALIB_VISION_N_CAND) * sizeof(int32_t));
    PART(vis_nmse, (size_t)c->VL * (size_t)c->VH * OC_CALIB_VISION_N_CAND * sizeof(double));
    PART(kvs, (size_t)c->L * (size_t)c->HKV * sizeof(double));
    c->scratch_doubles = oc_calib_scratch_doubles(OC_MAX(c->D, c->VD));
    PART(scratch, (size_t)c->n_threads * c->scratch_doubles * sizeof(double));
    PART(head_cols, (size_t)c->H * T * sizeof(double));
    PART(head_nnz, (size_t)c->H * T * sizeof(int64_t));
    PART(head_rows, (size_t)c->H * T * sizeof(double));
    PART(head_probe, (size_t)c->H * T * sizeof(double));
    PART(head_zerr, (size_t)c->H * 3 * sizeof(double));
    if (c->p.methods & OC_CALIB_MMINFERENCE) {
        PART(mm_nmse, LH * OC_CALIB_MMINF_MAX_CAND * sizeof(double));
        PART(mm_err, OC_CALIB_MMINF_MAX_CAND * sizeof(double));
        PART(mm_kept, OC_CALIB_MMINF_MAX_CAND * sizeof(uint64_t));
        PART(mm_work, oc_calib_mminf_work_bytes(c->max_tokens, c->D));
        PART(mm_err_modal, OC_CALIB_MMINF_MAX_CAND * 2 * sizeof(double));
        PART(mm_qb, LH * OC_CALIB_MMINF_MAX_CAND * 2 * sizeof(double));
        PART(mm_nb_elig, LH * OC_CALIB_MMINF_MAX_CAND * sizeof(double));
        PART(mm_pair_err, OC_CALIB_MMINF_MAX_CAND * 4 * sizeof(double));
        PART(mm_2d, LH * OC_CALIB_MMINF_MAX_CAND * 4 * sizeof(double));
        c->mm_layout_cap = oc_layout_bytes(c->max_tokens, OC_CALIB_MMINF_MAX_IMAGES) + OC_MEM_ALIGN;
        PART(mm_layout_mem, c->mm_layout_cap);
    }
#undef PART
    return off;
}

static void set_vision(oc_calib *c, const oc_plan_shape *vision, int32_t max_vision_tokens) {
    int on = vision && vision->n_layers > 0 && max_vision_tokens > 0;
    c->VL = on ? vision->n_layers : 0;
    c->VH = on ? vision->n_heads : 0;
    c->VD = on ? vision->head_dim : 0;
    c->max_vision = on ? max_vision_tokens : 0;
}

/* n_threads <= 0: every online CPU, as the context's pool counts them */
static int32_t calib_threads(int32_t n_threads) { return n_threads > 0 ? n_threads : oc_port_n_cpus(); }

size_t oc_calib_bytes(const oc_plan_shape *dec, int32_t max_tokens, const oc_plan_shape *vision,
                      int32_t max_vision_tokens, int32_t n_threads) {
    oc_calib c;
    memset(&c, 0, sizeof c);
    c.L = dec->n_layers;
    c.H = dec->n_heads;
    c.HKV = dec->n_kv_heads;
    c.D = dec->head_dim;
    c.max_tokens = max_tokens;
    c.p.methods = ~0u;   /* the most any set of methods takes */
    c.n_threads = calib_threads(n_threads);
    set_vision(&c, vision, max_vision_tokens);
    size_t pool_bytes = c.n_threads > 1 ? oc_pool_memory_bytes(c.n_threads) : 0;
    return sizeof c + layout_block(&c, NULL) + pool_bytes + 2 * OC_MEM_ALIGN;   /* two blocks, each aligned */
}

/* ---- opening ------------------------------------------------------------------------------------ */

/* The allocator of the item's layout: one block, allocated up front (nothing is allocated while
 * observing). */
static void *layout_slot(void *user, void *ptr, size_t old_bytes, size_t new_bytes) {
    oc_calib *c = user;
    (void)old_bytes;
    if (new_bytes == 0) {
        c->mm_layout_used = 0;
        return NULL;
    }
    if (ptr || c->mm_layout_used || new_bytes > c->mm_layout_cap) return NULL;
    c->mm_layout_used = 1;
    return c->mm_layout_mem;
}

oc_status oc_calib_open(oc_calib **out, const oc_calib_params *p, const oc_plan_shape *dec, int32_t max_tokens,
                        const oc_plan_shape *vision, int32_t max_vision_tokens, const oc_allocator *alloc,
                        oc_error *err) {
    *out = NULL;
    if (dec->n_layers < 1 || dec->n_heads < 1 || dec->n_kv_heads < 1 || dec->n_heads % dec->n_kv_heads ||
        dec->head_dim < 1 || max_tokens < 1 || oc_plan_shape_problem(OC_PLAN_DECODER, dec))
        return oc_fail(err, OC_ERR_INVALID, "calibrate: bad decoder shape");
    if (vision && vision->n_layers > 0 && oc_plan_shape_problem(OC_PLAN_VISION, vision))
        return oc_fail(err, OC_ERR_INVALID, "calibrate: bad vision shape");
    if (!(p->bs_alpha > 0.0) || p->qc_max_group < 2 || !(p->qc_epsilon > 0.0 && p->qc_epsilon <= 1.0) ||
        p->kv_window < 1 || !(p->kv_rho >= 0.0 && p->kv_rho < 1.0))
        return oc_fail(err, OC_ERR_INVALID, "calibrate: need alpha > 0, 0 < epsilon <= 1, group cap >= 2, "
                       "kv window >= 1 and 0 <= rho < 1");
    if ((p->methods & OC_CALIB_MMINFERENCE) && (p->methods & OC_CALIB_BLINDSIGHT))
        return oc_fail(err, OC_ERR_INVALID, "calibrate: blindsight and mminference both choose the decoder's head "
                       "patterns: ask for one of them");
    if ((p->methods & OC_CALIB_MMINFERENCE) && !(p->mminf_scale > 0.0 && p->mminf_scale <= 1.0))
        return oc_fail(err, OC_ERR_INVALID, "calibrate: the mminference scale must be in (0, 1]");
    oc_allocator a = alloc ? *alloc : *oc_default_allocator();
    oc_calib *c = oc_mem_calloc(&a, sizeof *c);
    if (!c) return oc_fail(err, OC_ERR_NOMEM, "calibrate: out of memory");
    c->alloc = a;
    c->p = *p;
    c->L = dec->n_layers;
    c->H = dec->n_heads;
    c->HKV = dec->n_kv_heads;
    c->D = dec->head_dim;
    c->max_tokens = max_tokens;
    c->n_threads = calib_threads(p->n_threads);
    set_vision(c, (p->methods & OC_CALIB_VISION) ? vision : NULL, max_vision_tokens);
    if (!c->VL) c->p.methods &= ~(unsigned)OC_CALIB_VISION;   /* no encoder: nothing to calibrate there */
    c->block_bytes = layout_block(c, NULL);
    if (!(c->block = oc_mem_calloc(&a, c->block_bytes))) {
        size_t n_bytes = c->block_bytes;   /* read before c goes back to the allocator */
        oc_mem_free(&a, c, sizeof *c);
        return oc_fail(err, OC_ERR_NOMEM, "calibrate: out of memory for %zu bytes", n_bytes);
    }
    layout_block(c, c->block);
    if (c->n_threads > 1) {
        oc_status st = oc_pool_open(&c->pool, c->n_threads, &c->alloc, err);
        if (st != OC_OK) {
            oc_mem_free(&a, c->block, c->block_bytes);
            oc_mem_free(&a, c, sizeof *c);
            return st;
        }
    }
    c->mm_layout_alloc.fn = layout_slot;
    c->mm_layout_alloc.user = c;
    *out = c;
    return OC_OK;
}

void oc_calib_close(oc_calib *c) {
    if (!c) return;
    oc_layout_free(c->mm_layout);
    oc_pool_close(c->pool);
    oc_allocator a = c->alloc;
    oc_mem_free(&a, c->block, c->block_bytes);
    oc_mem_free(&a, c, sizeof *c);
}

int64_t oc_calib_n_items(const oc_calib *c) { return c->n_items; }
int64_t oc_calib_n_scored_tokens(const oc_calib *c) { return c->n_scored_tokens; }
void oc_calib_drop_methods(oc_calib *c, unsigned methods) { c->p.methods &= ~methods; }

/* ---- per item ----------------------------------------------------------------------------------- */

void oc_calib_item_begin(oc_calib *c, const uint8_t *const *cells, int32_t grid) {
    size_t LH = (size_t)c->L * (size_t)c->H;
    c->cells = cells;
    c->cells_grid = grid;
    c->tokens_ready = 0;
    c->last_row_seen = 0;
    memset(c->item_err, 0, LH * 3 * sizeof(double));
    memset(c->item_ref, 0, LH * sizeof(double));
    memset(c->row_hits, 0, (size_t)MAX_ANSWER_ROWS * LH * sizeof(double));
    memset(c->js_item, 0, (size_t)c->L * sizeof(double));
    c->mm_seen = 0;
}

/* The item's token maps from the prompt's images (first view of the item). */
static void build_tokens(oc_calib *c, const oc_attn_view *v) {
    int32_t n = OC_MIN(v->n_prompt_tokens, c->max_tokens);
    float frac = (float)c->p.sink_fraction_ppm / (float)OC_PLAN_PPM;
    c->n_prompt = n;
    c->n_region = 0;
    for (int32_t i = 0; i < n; i++) {
        c->image_of[i] = -1;
        c->is_sink[i] = 0;
        c->in_region[i] = 0;
    }
    for (int32_t g = 0; g < v->n_images; g++) {
        const int32_t *im = v->images + 4 * g;
        int32_t first = im[0], n_tok = im[1], gh = im[2], gw = im[3];
        int32_t n_sink = oc_layout_sink_count(n_tok, frac);
        for (int32_t t = 0; t < n_tok && first + t < n; t++) {
            c->image_of[first + t] = g;
            c->is_sink[first + t] = t < n_sink;
            /* a token covers the scene cell under its centre (the grids are equal when the image
             * was not resized) */
            if (c->cells && c->cells[g] && gh > 0 && gw > 0) {
                int32_t row = (int32_t)(((int64_t)(t / gw) * 2 + 1) * c->cells_grid / (2 * gh));
                int32_t col = (int32_t)(((int64_t)(t % gw) * 2 + 1) * c->cells_grid / (2 * gw));
                if (c->cells[g][row * c->cells_grid + col]) {
                    c->in_region[first + t] = 1;
                    c->n_region++;
                }
            }
        }
    }
    c->tokens_ready = 1;
    /* MMInference's modality steps need both modalities' last 64 queries (dyn.h) */
    oc_layout_free(c->mm_layout);
    c->mm_layout = NULL;
    int32_t n_vision = 0;
    for (int32_t i = 0; i < n; i++) n_vision += c->image_of[i] >= 0;
    c->mm_n_vision = n_vision;
    if ((c->p.methods & OC_CALIB_MMINFERENCE) && n_vision >= OC_DYN_LAST_Q && n - n_vision >= OC_DYN_LAST_Q &&
        v->n_images <= OC_CALIB_MMINF_MAX_IMAGES) {
        oc_token_span spans[OC_CALIB_MMINF_MAX_IMAGES];
        int32_t n_spans = 0;
        for (int32_t g = 0; g < v->n_images; g++) {
            int32_t s = v->images[4 * g], e = OC_MIN(n, s + v->images[4 * g + 1]);
            if (s < e) spans[n_spans++] = (oc_token_span){ s, e };
        }
        if (oc_layout_build(&c->mm_layout, n, spans, n_spans, frac, &c->mm_layout_alloc, NULL) != OC_OK) c->mm_layout = NULL;
    }
}

/* What one layer's head tasks share (the observer's arguments). */
typedef struct head_job {
    oc_calib *c;
    const oc_attn_view *v;
    oc_calib_tokens tok;
    int zipvl, has_last;
    int32_t last;
} head_job;

static double *thread_scratch(const oc_calib *c, int thread) { return c->scratch + (size_t)thread * c->scratch_doubles; }

/* One vision head of one image: its cheapest candidate below alpha gets the image's vote. */
static void vision_head(void *ctx, int64_t task, int thread) {
    const head_job *j = ctx;
    oc_calib *c = j->c;
    const oc_attn_view *v = j->v;
    int32_t h = (int32_t)task;
    oc_calib_head hd = { v->n_q, 0, v->n_kv, c->VD, v->q + (size_t)h * c->VD, (int64_t)c->VH * c->VD,
                         v->k + (size_t)h * c->VD, v->v + (size_t)h * c->VD, (int64_t)c->VH * c->VD,
                         (float)pow((double)c->VD, -0.5) };
    double err[OC_CALIB_VISION_N_CAND] = { 0, 0, 0 }, ref = 0.0, alpha = oc_calib_bs_alpha(&c->p, v->layer, c->VL);
    oc_calib_vision_errors(&hd, c->seg_start, c->seg_end, OC_CALIB_VISION_N_CAND, c->vis_sink, c->vis_local, err,
                           &ref, thread_scratch(c, thread));
    size_t lh = (size_t)v->layer * c->VH + h;
    int choice = 0;
    for (int m = 0; m < OC_CALIB_VISION_N_CAND; m++) {
        double nmse = ref > 0.0 ? err[m] / ref : 0.0;
        c->vis_nmse[lh * OC_CALIB_VISION_N_CAND + m] += nmse;
        if (!choice && nmse < alpha) choice = m + 1;
    }
    c->vis_votes[lh * (1 + OC_CALIB_VISION_N_CAND) + choice]++;
}

/* One vision layer of one image: each head's cheapest candidate below alpha gets the image's vote. */
static void observe_vision(oc_calib *c, const oc_attn_view *v) {
    if (!c->VL || v->n_head != c->VH || v->head_dim != c->VD || v->layer < 0 || v->layer >= c->VL || v->n_q != v->n_kv ||
        v->n_kv > c->max_vision || v->n_kv < 1)
        return;
    if (!c->vis_patches) {   /* sizes from the first image (calib.h) */
        int32_t P = v->n_kv, s = OC_MAX(1, P / 16);
        c->vis_patches = P;
        c->vis_sink[0] = 0, c->vis_local[0] = OC_MAX(1, P / 4);
        c->vis_sink[1] = s, c->vis_local[1] = OC_MAX(1, P / 4);
        c->vis_sink[2] = s, c->vis_local[2] = OC_MAX(1, P / 2);
    }
    if (v->n_kv != c->vis_patches) {
        if (v->layer == 0) c->n_vision_skipped++;
        return;
    }
    if (v->layer == 0) c->n_vision_images++;
    for (int32_t i = 0; i < v->n_kv; i++) c->seg_start[i] = c->seg_end[i] = i;   /* no segment: itself */
    for (int32_t s = 0; s < v->n_segments; s++) {
        int32_t lo = OC_MAX(0, v->segments[2 * s]), hi = OC_MIN(v->n_kv, v->segments[2 * s + 1]);
        for (int32_t i = lo; i < hi; i++) {
            c->seg_start[i] = lo;
            c->seg_end[i] = hi;
        }
    }
    for (int32_t i = 0; i < v->n_kv; i++)
        if (c->seg_end[i] == i) c->seg_end[i] = i + 1;   /* a patch in no segment sees itself (never happens) */
    oc_pool_run(c->pool, c->VH, vision_head, &(head_job){ c, v, { 0, NULL, NULL }, 0, 0, 0 });
}

/* The vision aggregation (calib.h): 0 dense, else candidate index + 1. */
static int vision_choice(const oc_calib *c, size_t lh) {
    const int32_t *v = c->vis_votes + lh * (1 + OC_CALIB_VISION_N_CAND);
    double n = (double)c->n_vision_images;
    if (n <= 0 || v[0] / n > c->p.bs_gamma_d) return 0;
    int32_t cum = 0;
    for (int m = 1; m <= OC_CALIB_VISION_N_CAND; m++) {
        cum += v[m];
        if (cum / n > c->p.bs_gamma_s) return m;
    }
    return OC_CALIB_VISION_N_CAND;
}

/* One decoder head of a searched prompt: each candidate's NMSE against dense attention. */
static void observe_mminf(oc_calib *c, const oc_calib_head *hd, size_t lh) {
    double ref = 0.0;
    oc_error e = { OC_OK, "" };
    memset(c->mm_err, 0, sizeof(double) * OC_CALIB_MMINF_MAX_CAND);
    memset(c->mm_err_modal, 0, sizeof(double) * OC_CALIB_MMINF_MAX_CAND * 2);
    memset(c->mm_pair_err, 0, sizeof(double) * OC_CALIB_MMINF_MAX_CAND * 4);
    oc_status st = oc_calib_mminf_head(hd, c->mm_cand, c->mm_n_cand, c->max_tokens, c->mm_layout,
                                       c->mm_pair_ready ? c->mm_pair_cand : NULL, c->mm_work, c->mm_err,
                                       c->mm_err_modal, c->mm_pair_err, &ref, c->mm_kept, &e);
    if (st != OC_OK) {
        c->mm_status = st;
        snprintf(c->mm_error, sizeof c->mm_error, "%s", e.message);
        return;
    }
    c->mm_pairs += (uint64_t)hd->n_q * (uint64_t)(hd->n_q + 1) / 2;
    for (int32_t k = 0; k < c->mm_n_cand; k++) {
        size_t at = lh * OC_CALIB_MMINF_MAX_CAND + (size_t)k;
        c->mm_nmse[at] += ref > 0.0 ? c->mm_err[k] / ref : 0.0;
        if (!c->mm_layout) continue;
        c->mm_nb_elig[at] += ref > 0.0 ? c->mm_err[k] / ref : 0.0;
        for (int m = 0; m < 2; m++) c->mm_qb[2 * at + (size_t)m] += ref > 0.0 ? c->mm_err_modal[2 * k + m] / ref : 0.0;
        for (int m = 0; m < 4; m++) c->mm_2d[4 * at + (size_t)m] += ref > 0.0 ? c->mm_pair_err[4 * k + m] / ref : 0.0;
    }
}

/* Decoder head h of the layer in v, as the statistics see it. */
static oc_calib_head decoder_view_head(const oc_calib *c, const oc_attn_view *v, int32_t h) {
    int32_t rep = c->H / c->HKV;
    oc_calib_head hd;
    hd.n_q = v->n_q;
    hd.q_first = v->q_first;
    hd.n_kv = v->n_kv;
    hd.head_dim = c->D;
    hd.q = v->q + (size_t)h * (size_t)c->D;
    hd.q_stride = (int64_t)c->H * c->D;
    hd.k = v->k + (size_t)(h / rep) * (size_t)c->D;
    hd.v = v->v + (size_t)(h / rep) * (size_t)c->D;
    hd.kv_stride = (int64_t)c->HKV * c->D;
    hd.scale = 1.0f / sqrtf((float)c->D);
    return hd;
}

/* One decoder head of one layer: every statistic but MMInference's search. Writes only this
 * head's slots (and its rows of head_cols / head_rows, summed by the observer afterwards). */
static void decoder_head(void *ctx, int64_t task, int thread) {
    const head_job *j = ctx;
    oc_calib *c = j->c;
    const oc_attn_view *v = j->v;
    int32_t h = (int32_t)task, l = v->layer, last = j->last, q_end = v->q_first + v->n_q;
    double *scratch = thread_scratch(c, thread);
    oc_calib_head hd = decoder_view_head(c, v, h);
    size_t lh = (size_t)l * (size_t)c->H + (size_t)h, T = (size_t)c->max_tokens;
    /* BlindSight Alg. 1 over the prompt's rows (prefill is what the categories sparsify) */
    if ((c->p.methods & OC_CALIB_BLINDSIGHT) && v->q_first < c->n_prompt) {
        oc_calib_head pre = hd;
        pre.n_q = OC_MIN(v->n_q, c->n_prompt - v->q_first);
        oc_calib_mask_errors(&pre, &j->tok, c->item_err + lh * 3, c->item_ref + lh, scratch);
    }
    if (j->zipvl) {
        double *cols = c->head_cols + (size_t)h * T;
        int64_t *nnz = c->head_nnz + (size_t)h * T;
        memset(cols, 0, sizeof(double) * (size_t)v->n_kv);
        memset(nnz, 0, sizeof(int64_t) * (size_t)v->n_kv);
        oc_calib_column_mass(&hd, cols, nnz, scratch);
        double *probe = c->head_probe + (size_t)h * T;   /* the runtime's T comes from its probes */
        memset(probe, 0, sizeof(double) * (size_t)v->n_kv);
        oc_calib_rows_mass(&hd, c->zv_probes, c->n_zv_probes, probe, scratch);
    }
    /* SparseMM Eq. 3-4: the rows that predict answer tokens: the prompt's last row, then each
     * decode row (whether its token belongs to the answer is known at item end) */
    if ((c->p.methods & OC_CALIB_SPARSEMM) && c->n_region > 0)
        for (int32_t p = OC_MAX(v->q_first, last); p < q_end && p - last < MAX_ANSWER_ROWS; p++) {
            int32_t arg = oc_calib_row_argmax(&hd, p - v->q_first, scratch);
            c->row_hits[((size_t)(p - last) * (size_t)c->L + (size_t)l) * (size_t)c->H + (size_t)h] +=
                oc_calib_hit(arg, c->in_region, c->n_region);
        }
    /* Q-Cache Eq. 3: the layer's last prompt row a^l, the mean of its heads' distributions (the
     * paper compares layers, and head h of one layer has no counterpart in the next) */
    if ((c->p.methods & OC_CALIB_QCACHE) && j->has_last)
        oc_calib_row_probs(&hd, last - v->q_first, c->head_rows + (size_t)h * T, scratch);
}

/* The ZipVL output check (ours, calib.h OC_CALIB_ZIPVL_MAX_NMSE) for one head: Alg. 1's output
 * with the runtime's T at both taus against dense. */
static void zipvl_head(void *ctx, int64_t task, int thread) {
    const head_job *j = ctx;
    oc_calib *c = j->c;
    int32_t h = (int32_t)task;
    oc_calib_head hd = decoder_view_head(c, j->v, h);
    double *e = c->head_zerr + (size_t)h * 3;
    e[0] = e[1] = e[2] = 0.0;
    oc_calib_zipvl_errors(&hd, c->zv_set, 2, e, e + 2, thread_scratch(c, thread));
}

/* The check for one layer of one prompt (the prompt is this one forward call): T as the runtime
 * picks it (text_kv.c oc_text_kv_zipvl_set: the probe rows' column sums over every head, Eq. 8's
 * nnz from the probe positions, oc_kv_select_zipvl) at tau and at the low tau, then each head's
 * output errors; the layer's NMSE sums errors and references over its heads, in head order. */
static void zipvl_check(oc_calib *c, const oc_attn_view *v, head_job *job) {
    int32_t n = v->n_kv, l = v->layer;
    size_t T = (size_t)c->max_tokens;
    memset(c->zv_mass, 0, sizeof(double) * (size_t)n);
    for (int32_t h = 0; h < c->H; h++)
        for (int32_t j = 0; j < n; j++) c->zv_mass[j] += c->head_probe[(size_t)h * T + (size_t)j];
    for (int32_t j = 0, t = 0; j < n; j++) {   /* rows of every head see key j when their position is >= j */
        while (t < c->n_zv_probes && c->zv_probes[t] < j) t++;
        c->zv_nnz[j] = (c->n_zv_probes - t) * c->H;
    }
    memset(c->zv_set, 0, (size_t)n);
    static const double taus[2] = { OC_CALIB_ZIPVL_TAU, OC_CALIB_ZIPVL_TAU_LOW };
    for (int s = 0; s < 2; s++) {
        int32_t m = oc_kv_select_zipvl(c->zv_mass, c->zv_nnz, n, (double)c->n_zv_probes * c->H, taus[s], c->zv_kept,
                                       c->zv_order, c->zv_norm);
        for (int32_t r = 0; r < m; r++) c->zv_set[c->zv_kept[r]] |= (uint8_t)(1u << s);
    }
    oc_pool_run(c->pool, c->H, zipvl_head, job);
    double err[2] = { 0.0, 0.0 }, ref = 0.0;
    for (int32_t h = 0; h < c->H; h++) {
        err[0] += c->head_zerr[(size_t)h * 3];
        err[1] += c->head_zerr[(size_t)h * 3 + 1];
        ref += c->head_zerr[(size_t)h * 3 + 2];
    }
    for (int s = 0; s < 2; s++) c->zv_nmse[2 * l + s] += ref > 0.0 ? err[s] / ref : 0.0;
}

void oc_calib_observe(void *user, const struct oc_attn_view *v) {
    oc_calib *c = user;
    if (v->stack == 1) {
        if (c->p.methods & OC_CALIB_VISION) observe_vision(c, v);
        return;
    }
    if (v->stack != 0) return;
    if (v->n_head != c->H || v->n_head_kv != c->HKV || v->head_dim != c->D || v->layer < 0 || v->layer >= c->L ||
        v->n_kv > c->max_tokens)
        return;   /* not the model this run was opened for: oc_calib_item_end reports nothing new */
    if (!c->tokens_ready) build_tokens(c, v);
    oc_calib_tokens tok = { c->n_prompt, c->image_of, c->is_sink };
    int32_t l = v->layer, last = c->n_prompt - 1;
    int has_last = last >= v->q_first && last < v->q_first + v->n_q;
    /* ZipVL Eq. 6-7 over the whole prompt: only when the prompt is one forward call (calibrate opens
     * its context so), since the column sums need every row */
    int zipvl = (c->p.methods & OC_CALIB_ZIPVL) && v->q_first == 0 && v->n_q == c->n_prompt;
    /* MMInference Alg. 4 over the whole prompt in one call: the runtime estimates its index from
     * the prompt's last 64 queries, so the search needs them all at once (calibrate opens its
     * context so), and at least 64 of them */
    int mminf = (c->p.methods & OC_CALIB_MMINFERENCE) && c->mm_status == OC_OK && v->q_first == 0 &&
                v->n_q == c->n_prompt && v->n_q >= OC_DYN_LAST_Q;
    if (mminf && !c->mm_n_cand)   /* the space, fixed by the first searched prompt (calib.h) */
        c->mm_n_cand = oc_calib_mminf_space(c->p.mminf_scale, v->n_images > 0 ? v->images[1] : 0, c->mm_cand);
    if (mminf && c->mm_layout && !c->mm_pair_ready) {   /* the cross-modality space: this prompt's key shares */
        double share_vision = (double)c->mm_n_vision / (double)c->n_prompt;
        oc_calib_mminf_pair_space(c->mm_cand, c->mm_n_cand, 1.0 - share_vision, c->mm_pair_cand);
        oc_calib_mminf_pair_space(c->mm_cand, c->mm_n_cand, share_vision, c->mm_pair_cand + c->mm_n_cand);
        c->mm_pair_ready = 1;
    }
    if (zipvl) {
        memset(c->col_sum, 0, sizeof(double) * (size_t)v->n_kv);
        memset(c->col_nnz, 0, sizeof(int64_t) * (size_t)v->n_kv);
        c->n_zv_probes = oc_kv_zipvl_probes(v->n_kv, c->zv_probes);   /* the runtime's (text_kv.c) */
    }
    head_job job = { c, v, tok, zipvl, has_last, last };
    oc_pool_run(c->pool, c->H, decoder_head, &job);
    if (zipvl)   /* the heads' column mass, added in head order (the same for any thread count) */
        for (int32_t h = 0; h < c->H; h++)
            for (int32_t j = 0; j < v->n_kv; j++) {
                c->col_sum[j] += c->head_cols[(size_t)h * (size_t)c->max_tokens + (size_t)j];
                c->col_nnz[j] += c->head_nnz[(size_t)h * (size_t)c->max_tokens + (size_t)j];
            }
    if ((c->p.methods & OC_CALIB_QCACHE) && has_last) {   /* the head mean of the last rows, in head order */
        double *cur = c->last_probs + (size_t)(l % 2) * (size_t)c->max_tokens;
        memset(cur, 0, sizeof(double) * (size_t)(last + 1));
        for (int32_t h = 0; h < c->H; h++)
            for (int32_t j = 0; j <= last; j++) cur[j] += c->head_rows[(size_t)h * (size_t)c->max_tokens + (size_t)j] / c->H;
    }
    if (mminf)   /* one work area: serial over heads */
        for (int32_t h = 0; h < c->H; h++) {
            oc_calib_head hd = decoder_view_head(c, v, h);
            observe_mminf(c, &hd, (size_t)l * (size_t)c->H + (size_t)h);
        }
    if (mminf && l == c->L - 1) c->mm_seen = 1;
    if (zipvl) {   /* the head mean of A: its column sums add up to n (each row sums to 1) */
        int32_t n = v->n_kv;
        for (int32_t j = 0; j < n; j++) c->col_sum[j] /= c->H;
        c->zv_ratio[2 * l] += (double)oc_calib_zipvl_p(c->col_sum, n, n, OC_CALIB_ZIPVL_TAU, c->col_sorted) / n;
        c->zv_ratio[2 * l + 1] += (double)oc_calib_zipvl_p(c->col_sum, n, n, OC_CALIB_ZIPVL_TAU_LOW, c->col_sorted) / n;
        zipvl_check(c, v, &job);
        if (l == c->L - 1) c->n_zipvl_items++;
    }
    if ((c->p.methods & OC_CALIB_QCACHE) && has_last) {
        if (l > 0)
            c->js_item[l - 1] = oc_calib_jsd(c->last_probs + (size_t)((l - 1) % 2) * (size_t)c->max_tokens,
                                             c->last_probs + (size_t)(l % 2) * (size_t)c->max_tokens, last + 1);
        c->last_row_seen = 1;
    }
}

/* The frontier's BlindSight alpha schedules (alpha, end; end > 0: the Linear alpha_layer scheme of
 * Sec. 5 / App. D.1.2), mildest first: the paper's fixed 0.1 for Qwen (Sec. 4.1) with two milder
 * and two more aggressive constants, and the Linear 0.005-0.195 of the shipped long plan. The set
 * of schedules is ours; each is run through Alg. 1 and Alg. 2 as written. */
static const double bs_sweep[OC_CALIB_BS_SWEEP][2] = {
    { 0.025, 0.0 }, { 0.05, 0.0 }, { 0.1, 0.0 }, { 0.005, 0.195 }, { 0.2, 0.0 }, { 0.4, 0.0 },
};

void oc_calib_item_end(oc_calib *c, int answer_right, int32_t n_answer_tokens) {
    size_t LH = (size_t)c->L * (size_t)c->H;
    if (!c->tokens_ready) return;   /* the forward never ran */
    c->n_items++;
    c->prompt_tokens_sum += c->n_prompt;
    if (c->p.methods & OC_CALIB_BLINDSIGHT)
        for (size_t lh = 0; lh < LH; lh++) {
            double alpha = oc_calib_bs_alpha(&c->p, (int32_t)(lh / (size_t)c->H), c->L);
            oc_pattern_kind k = oc_calib_bs_choose(c->item_err + lh * 3, c->item_ref[lh], alpha);
            c->votes[lh * OC_PATTERN_COUNT + k]++;
            for (int32_t w = 0; w < OC_CALIB_BS_SWEEP; w++) {   /* the frontier's schedules: the same errors */
                double a = bs_sweep[w][1] > 0.0 ? bs_sweep[w][0] + (bs_sweep[w][1] - bs_sweep[w][0]) *
                                                                     (double)(lh / (size_t)c->H) / (double)c->L
                                                 : bs_sweep[w][0];
                oc_pattern_kind kw = oc_calib_bs_choose(c->item_err + lh * 3, c->item_ref[lh], a);
                c->sweep_votes[((size_t)w * LH + lh) * OC_PATTERN_COUNT + kw]++;
            }
            for (int m = 0; m < 3; m++)
                c->nmse_sum[lh * 3 + m] += c->item_ref[lh] > 0.0 ? c->item_err[lh * 3 + m] / c->item_ref[lh] : 0.0;
        }
    if ((c->p.methods & OC_CALIB_SPARSEMM) && answer_right && c->n_region > 0) {
        int32_t n_rows = OC_MIN(n_answer_tokens, MAX_ANSWER_ROWS);
        for (int32_t r = 0; r < n_rows; r++)
            for (size_t lh = 0; lh < LH; lh++) c->head_scores[lh] += c->row_hits[(size_t)r * LH + lh];
        c->n_scored_tokens += n_rows;
        c->n_right++;
    }
    if ((c->p.methods & OC_CALIB_QCACHE) && c->last_row_seen) {
        for (int32_t l = 0; l + 1 < c->L; l++) c->js_sum[l] += c->js_item[l];
        c->n_js_items++;
    }
    c->mm_items += c->mm_seen;
    c->mm_qb_items += c->mm_seen && c->mm_layout;
    oc_layout_free(c->mm_layout);
    c->mm_layout = NULL;
}

/* ---- results ------------------------------------------------------------------------------------ */

static void kv_scores(const oc_calib *c, double *out) {
    oc_calib_kv_scores(c->head_scores, c->L, c->H, c->HKV, out);
}

const double *oc_calib_visual_scores(oc_calib *c) {
    kv_scores(c, c->kvs);
    return c->kvs;
}

/* The 2D-Boundary head of head lh's best pair patterns (Alg. 4's cross-modality step, one argmin
 * per pair, ties in Table 3's order); *total: their summed NMSE on the prompts that took the
 * modality steps (the pairs of one query row measured apart, each with the other dense: our
 * first-order sum where Alg. 4 leaves open how the pairs' searches combine). */
static oc_head_pattern mminf_2d(const oc_calib *c, size_t lh, double *total) {
    oc_head_pattern p;
    memset(&p, 0, sizeof p);
    p.kind = OC_PATTERN_BOUNDARY_2D;
    *total = 0.0;
    const double *e2 = c->mm_2d + lh * OC_CALIB_MMINF_MAX_CAND * 4;
    for (int m = 0; m < 4; m++) {
        double e[OC_CALIB_MMINF_MAX_CAND];
        for (int32_t k = 0; k < c->mm_n_cand; k++) e[k] = e2[4 * k + m];
        int32_t k = oc_calib_mminf_choose(e, c->mm_n_cand);
        *total += e[k];
        p.pair[m / 2][m % 2] = oc_pattern_to_modal(&c->mm_pair_cand[(m % 2) * c->mm_n_cand + k]);
    }
    return p;
}

/* A head kind with more parts replaces a simpler one only when it loses clearly less: by more than
 * 0.1% of the simpler one's summed NMSE and more than 1e-6 per prompt (ours: below that the
 * difference is the engine's rounding, and the simpler head runs faster). */
static int clearly_less(double complex_total, double simple_total, int64_t n_prompts) {
    return simple_total - complex_total > fmax(1e-3 * simple_total, 1e-6 * (double)n_prompts);
}

/* Alg. 4's inter-modality step for head lh over the prompts that took the modality steps: the best
 * No-Boundary candidate; the Q-Boundary head of the two best modality patterns when it loses
 * clearly less (a static pattern chosen for both modalities is that pattern); the 2D-Boundary head
 * of the four best pair patterns when it loses clearly less than both. */
static oc_head_pattern mminf_choice(const oc_calib *c, size_t lh) {
    const double *nb = c->mm_nmse + lh * OC_CALIB_MMINF_MAX_CAND;
    oc_head_pattern best = c->mm_cand[oc_calib_mminf_choose(nb, c->mm_n_cand)];
    if (!c->mm_qb_items) return best;
    double modal_err[2][OC_CALIB_MMINF_MAX_CAND];
    const double *qb = c->mm_qb + lh * OC_CALIB_MMINF_MAX_CAND * 2;
    for (int32_t k = 0; k < c->mm_n_cand; k++)
        for (int m = 0; m < 2; m++) modal_err[m][k] = qb[2 * k + m];
    int32_t kt = oc_calib_mminf_choose(modal_err[0], c->mm_n_cand), kv = oc_calib_mminf_choose(modal_err[1], c->mm_n_cand);
    const double *nb_e = c->mm_nb_elig + lh * OC_CALIB_MMINF_MAX_CAND;
    double qb_total = modal_err[0][kt] + modal_err[1][kv], nb_total = nb_e[oc_calib_mminf_choose(nb_e, c->mm_n_cand)];
    double total_2d = INFINITY;
    oc_head_pattern p2 = c->mm_pair_ready ? mminf_2d(c, lh, &total_2d) : best;
    if (clearly_less(total_2d, nb_total, c->mm_qb_items) && clearly_less(total_2d, qb_total, c->mm_qb_items)) return p2;
    if (!clearly_less(qb_total, nb_total, c->mm_qb_items)) return best;
    if (kt == kv && !oc_pattern_is_dynamic(c->mm_cand[kt].kind)) return c->mm_cand[kt];
    oc_head_pattern q;
    memset(&q, 0, sizeof q);
    q.kind = OC_PATTERN_Q_BOUNDARY;
    q.modal[OC_MODALITY_TEXT] = oc_pattern_to_modal(&c->mm_cand[kt]);
    q.modal[OC_MODALITY_VISION] = oc_pattern_to_modal(&c->mm_cand[kv]);
    return q;
}

oc_status oc_calib_to_plan(const oc_calib *c, oc_plan *plan, oc_error *err) {
    oc_stack_plan *s = &plan->stacks[OC_PLAN_DECODER];
    if (s->shape.n_layers != c->L || s->shape.n_heads != c->H || s->shape.n_kv_heads != c->HKV)
        return oc_fail(err, OC_ERR_INVALID, "calibrate: the plan's decoder shape differs from the model's");
    if (!c->n_items && (c->p.methods & ~(unsigned)OC_CALIB_VISION))
        return oc_fail(err, OC_ERR_INVALID, "calibrate: no item was calibrated");
    plan->sink_fraction_ppm = c->p.sink_fraction_ppm;
    plan->kv_window_tokens = c->p.kv_window;
    if (c->p.methods & OC_CALIB_BLINDSIGHT)
        for (int32_t l = 0; l < c->L; l++)
            for (int32_t h = 0; h < c->H; h++) {
                const int32_t *v = c->votes + ((size_t)l * c->H + h) * OC_PATTERN_COUNT;
                oc_head_pattern *hp = oc_plan_head(plan, OC_PLAN_DECODER, l, h);
                memset(hp, 0, sizeof *hp);
                hp->kind = oc_calib_bs_aggregate(v, (int32_t)c->n_items, c->p.bs_gamma_d, c->p.bs_gamma_s,
                                                 c->p.bs_gamma_i);
            }
    if (c->p.methods & OC_CALIB_SPARSEMM) {
        int32_t n = c->L * c->HKV;
        if (!c->n_scored_tokens)
            return oc_fail(err, OC_ERR_INVALID, "calibrate: SparseMM saw no grounded answer token (no item answered "
                           "right with a grounding region)");
        kv_scores(c, c->kvs);
        for (int32_t i = 0; i < n; i++) s->visual_score_ppm[i] = (int32_t)lround(c->kvs[i] * OC_PLAN_PPM);
        double per_head = c->p.kv_budget_tokens > 0
                              ? (double)c->p.kv_budget_tokens
                              : c->p.kv_budget_fraction * (double)c->prompt_tokens_sum / (double)c->n_items;
        int64_t total = (int64_t)llround(per_head * n);
        if (total < (int64_t)n * c->p.kv_window) total = (int64_t)n * c->p.kv_window;
        /* from the stored (rounded) scores, so the plan's budgets are what re-budgeting it gives */
        oc_status st = oc_calib_plan_budgets(plan, total, c->p.kv_rho, err);
        if (st) return st;
    }
    if (c->p.methods & OC_CALIB_ZIPVL) {
        if (!c->n_zipvl_items)
            return oc_fail(err, OC_ERR_INVALID, "calibrate: ZipVL needs each prompt in one forward call");
        for (int32_t l = 0; l < c->L; l++) {
            double tau = oc_calib_zipvl_tau(c->zv_ratio[2 * l], c->zv_ratio[2 * l + 1]);
            /* the output check (ours, not the paper's): a layer whose Alg. 1 output NMSE exceeds the
             * threshold gets no zipvl-tau line */
            int keep = oc_calib_zipvl_keeps_layer(oc_calib_zipvl_nmse(c, l), c->p.zipvl_max_nmse);
            s->zipvl_tau_ppm[l] = keep ? (int32_t)lround(tau * OC_PLAN_PPM) : 0;
        }
    }
    if (c->p.methods & OC_CALIB_MMINFERENCE) {
        if (c->mm_status != OC_OK) return oc_fail(err, c->mm_status, "calibrate: mminference: %s", c->mm_error);
        if (!c->mm_items)
            return oc_fail(err, OC_ERR_INVALID, "calibrate: the MMInference search saw no prompt of at least %d tokens",
                           OC_DYN_LAST_Q);
        for (int32_t l = 0; l < c->L; l++)
            for (int32_t h = 0; h < c->H; h++) *oc_plan_head(plan, OC_PLAN_DECODER, l, h) = mminf_choice(c, (size_t)l * c->H + h);
    }
    if (c->p.methods & OC_CALIB_VISION) {
        oc_stack_plan *vs = &plan->stacks[OC_PLAN_VISION];
        if (!c->VL || vs->shape.n_layers != c->VL || vs->shape.n_heads != c->VH)
            return oc_fail(err, OC_ERR_INVALID, "calibrate: vision heads asked for, but the plan or model has no "
                           "matching vision encoder");
        if (!c->n_vision_images) return oc_fail(err, OC_ERR_INVALID, "calibrate: no image reached the vision encoder");
        for (int32_t l = 0; l < c->VL; l++)
            for (int32_t h = 0; h < c->VH; h++) {
                int m = vision_choice(c, (size_t)l * c->VH + h);
                oc_head_pattern *hp = oc_plan_head(plan, OC_PLAN_VISION, l, h);
                memset(hp, 0, sizeof *hp);
                if (m) {
                    hp->kind = OC_PATTERN_A_SHAPE;
                    hp->n_sink = c->vis_sink[m - 1];
                    hp->n_local = c->vis_local[m - 1];
                }
            }
    }
    if (c->p.methods & OC_CALIB_QCACHE) {
        if (!c->n_js_items) return oc_fail(err, OC_ERR_INVALID, "calibrate: Q-Cache saw no last prompt row");
        double s_adj[OC_PLAN_MAX_LAYERS];
        int32_t first[OC_PLAN_MAX_LAYERS], last[OC_PLAN_MAX_LAYERS];
        for (int32_t l = 0; l + 1 < c->L; l++) s_adj[l] = c->js_sum[l] / (double)c->n_js_items;
        int32_t n = oc_calib_qc_groups(s_adj, c->L, c->p.qc_epsilon, c->p.qc_max_group, first, last);
        for (int32_t g = 0; g < n; g++) {
            oc_status st = oc_plan_add_lazy_group(plan, OC_PLAN_DECODER, first[g], last[g], c->p.qc_mode, err);
            if (st) return st;
            /* a lazy layer attends with its first layer's Q/K, so it keeps the first layer's tokens:
             * the runtime requires its kv budgets and tau to be the first layer's (kvcache/kv_cache.h) */
            /* ... and a group with a layer the ZipVL output check left dense stays dense (ours) */
            int any_dense = 0;
            for (int32_t l = first[g]; l <= last[g]; l++) any_dense |= s->zipvl_tau_ppm[l] == 0;
            for (int32_t l = first[g]; l <= last[g]; l++) {
                if (l > first[g])
                    memcpy(s->kv_budget_tokens + (size_t)l * c->HKV, s->kv_budget_tokens + (size_t)first[g] * c->HKV,
                           sizeof(int32_t) * (size_t)c->HKV);
                s->zipvl_tau_ppm[l] = any_dense ? 0 : s->zipvl_tau_ppm[first[g]];
            }
        }
    }
    return OC_OK;
}

double oc_calib_zipvl_nmse(const oc_calib *c, int32_t layer) {
    if (!c->n_zipvl_items || layer < 0 || layer >= c->L) return -1.0;
    double tau = oc_calib_zipvl_tau(c->zv_ratio[2 * layer], c->zv_ratio[2 * layer + 1]);
    return c->zv_nmse[2 * layer + (tau < OC_CALIB_ZIPVL_TAU)] / (double)c->n_zipvl_items;
}

/* ---- the frontier's candidates (calib.h oc_calib_candidate; the knobs swept are ours) ----------- */

static const double sparsemm_sweep[] = { 0.75, 0.5, 0.25, 0.1 };   /* budget per kv head, x mean prompt */
static const double zipvl_sweep[] = { 0.99, 0.975, 0.95, 0.9 };    /* tau; 0.975 is the paper's */
static const double mminf_sweep[] = { 0.01, 0.03, 0.1, INFINITY }; /* head kept when its NMSE <= this */
static const double qcache_sweep[] = { 0.1, 0.25, 0.5, 0.75 };     /* epsilon; 0.1 is our default */
static const double vision_sweep[] = { 0.01, 0.03, 0.1, 0.3 };     /* mean NMSE a vision head may lose */
#define N_OF(a) ((int32_t)(sizeof a / sizeof a[0]))

int32_t oc_calib_n_candidates(const oc_calib *c, unsigned method) {
    if (!(c->p.methods & method)) return 0;
    switch (method) {
    case OC_CALIB_BLINDSIGHT: return c->n_items ? OC_CALIB_BS_SWEEP : 0;
    case OC_CALIB_SPARSEMM: return c->n_scored_tokens ? N_OF(sparsemm_sweep) : 0;
    case OC_CALIB_ZIPVL: return c->n_zipvl_items ? N_OF(zipvl_sweep) : 0;
    case OC_CALIB_MMINFERENCE: return c->mm_items && c->mm_status == OC_OK ? N_OF(mminf_sweep) : 0;
    case OC_CALIB_QCACHE: return c->n_js_items ? N_OF(qcache_sweep) : 0;
    case OC_CALIB_VISION: return c->VL && c->n_vision_images ? N_OF(vision_sweep) : 0;
    default: return 0;
    }
}

oc_status oc_calib_candidate(const oc_calib *c, unsigned method, int32_t k, oc_plan *plan, char *label,
                             size_t label_bytes, oc_error *err) {
    if (k < 0 || k >= oc_calib_n_candidates(c, method))
        return oc_fail(err, OC_ERR_INVALID, "calibrate: no candidate %d of method %u", (int)k, method);
    oc_stack_plan *s = &plan->stacks[OC_PLAN_DECODER];
    if (s->shape.n_layers != c->L || s->shape.n_heads != c->H || s->shape.n_kv_heads != c->HKV)
        return oc_fail(err, OC_ERR_INVALID, "calibrate: the plan's decoder shape differs from the model's");
    plan->sink_fraction_ppm = c->p.sink_fraction_ppm;
    plan->kv_window_tokens = c->p.kv_window;
    size_t LH = (size_t)c->L * (size_t)c->H;
    if (method == OC_CALIB_BLINDSIGHT) {   /* Alg. 2 on the schedule's Alg. 1 votes */
        for (size_t lh = 0; lh < LH; lh++) {
            oc_head_pattern *hp = &s->heads[lh];
            memset(hp, 0, sizeof *hp);
            hp->kind = oc_calib_bs_aggregate(c->sweep_votes + ((size_t)k * LH + lh) * OC_PATTERN_COUNT,
                                             (int32_t)c->n_items, c->p.bs_gamma_d, c->p.bs_gamma_s, c->p.bs_gamma_i);
        }
        if (bs_sweep[k][1] > 0.0) snprintf(label, label_bytes, "alpha %g..%g", bs_sweep[k][0], bs_sweep[k][1]);
        else snprintf(label, label_bytes, "alpha %g", bs_sweep[k][0]);
        return OC_OK;
    }
    if (method == OC_CALIB_SPARSEMM) {   /* Eq. 5-9 from the scores for a total of the sweep's size */
        int32_t n = c->L * c->HKV;
        kv_scores(c, c->kvs);
        for (int32_t i = 0; i < n; i++) s->visual_score_ppm[i] = (int32_t)lround(c->kvs[i] * OC_PLAN_PPM);
        double per_head = sparsemm_sweep[k] * (double)c->prompt_tokens_sum / (double)c->n_items;
        int64_t total = (int64_t)llround(per_head * n);
        if (total < (int64_t)n * c->p.kv_window) total = (int64_t)n * c->p.kv_window;
        snprintf(label, label_bytes, "budget %.2gx", sparsemm_sweep[k]);
        return oc_calib_plan_budgets(plan, total, c->p.kv_rho, err);
    }
    if (method == OC_CALIB_ZIPVL) {   /* one tau on every layer the output check keeps */
        for (int32_t l = 0; l < c->L; l++)
            s->zipvl_tau_ppm[l] = oc_calib_zipvl_keeps_layer(oc_calib_zipvl_nmse(c, l), c->p.zipvl_max_nmse)
                                      ? (int32_t)lround(zipvl_sweep[k] * OC_PLAN_PPM) : 0;
        snprintf(label, label_bytes, "tau %g", zipvl_sweep[k]);
        return OC_OK;
    }
    if (method == OC_CALIB_MMINFERENCE) {   /* Alg. 4's choice where the head's best NMSE is small enough */
        double n = (double)c->mm_items;
        for (size_t lh = 0; lh < LH; lh++) {
            const double *e = c->mm_nmse + lh * OC_CALIB_MMINF_MAX_CAND;
            double best = e[oc_calib_mminf_choose(e, c->mm_n_cand)] / n;
            if (best <= mminf_sweep[k]) s->heads[lh] = mminf_choice(c, lh);
            else memset(&s->heads[lh], 0, sizeof s->heads[lh]);
        }
        if (isinf(mminf_sweep[k])) snprintf(label, label_bytes, "all heads");
        else snprintf(label, label_bytes, "NMSE <= %g", mminf_sweep[k]);
        return OC_OK;
    }
    if (method == OC_CALIB_QCACHE) {   /* Eq. 4's blocks at the sweep's epsilon */
        double s_adj[OC_PLAN_MAX_LAYERS];
        int32_t first[OC_PLAN_MAX_LAYERS], last[OC_PLAN_MAX_LAYERS];
        for (int32_t l = 0; l + 1 < c->L; l++) s_adj[l] = c->js_sum[l] / (double)c->n_js_items;
        int32_t n = oc_calib_qc_groups(s_adj, c->L, qcache_sweep[k], c->p.qc_max_group, first, last);
        for (int32_t g = 0; g < n; g++) {
            oc_status st = oc_plan_add_lazy_group(plan, OC_PLAN_DECODER, first[g], last[g], c->p.qc_mode, err);
            if (st) return st;
        }
        snprintf(label, label_bytes, "epsilon %g (%d group%s)", qcache_sweep[k], (int)n, n == 1 ? "" : "s");
        return OC_OK;
    }
    /* the vision encoder: per head the cheapest candidate whose mean NMSE stays within the sweep's */
    oc_stack_plan *vs = &plan->stacks[OC_PLAN_VISION];
    if (vs->shape.n_layers != c->VL || vs->shape.n_heads != c->VH)
        return oc_fail(err, OC_ERR_INVALID, "calibrate: the plan's vision shape differs from the model's");
    double n = (double)c->n_vision_images;
    for (int32_t l = 0; l < c->VL; l++)
        for (int32_t h = 0; h < c->VH; h++) {
            const double *e = c->vis_nmse + ((size_t)l * c->VH + h) * OC_CALIB_VISION_N_CAND;
            oc_head_pattern *hp = oc_plan_head(plan, OC_PLAN_VISION, l, h);
            memset(hp, 0, sizeof *hp);
            for (int m = 0; m < OC_CALIB_VISION_N_CAND; m++)
                if (e[m] / n <= vision_sweep[k]) {
                    hp->kind = OC_PATTERN_A_SHAPE;
                    hp->n_sink = c->vis_sink[m];
                    hp->n_local = c->vis_local[m];
                    break;
                }
        }
    snprintf(label, label_bytes, "NMSE <= %g", vision_sweep[k]);
    return OC_OK;
}

double oc_calib_js_mean(const oc_calib *c, int32_t l) {
    return c->n_js_items && l >= 0 && l + 1 < c->L ? c->js_sum[l] / (double)c->n_js_items : -1.0;
}

/* A candidate as the plan spells it, e.g. "vertical-slash(1000,1024)" (shorter: no key names). */
static void cand_text(const oc_head_pattern *p, char *buf, size_t n) {
    if (p->kind == OC_PATTERN_DENSE)
        snprintf(buf, n, "dense");
    else if (p->kind == OC_PATTERN_A_SHAPE)
        snprintf(buf, n, "a-shape(%d,%d)", (int)p->n_sink, (int)p->n_local);
    else if (p->kind == OC_PATTERN_VERTICAL_SLASH)
        snprintf(buf, n, "vertical-slash(%d,%d)", (int)p->n_vertical, (int)p->n_slash);
    else if (p->grid_stride)
        snprintf(buf, n, "grid(%d,%s,%d)", (int)p->grid_stride, oc_plan_grid_lines_name(p->grid_lines),
                 (int)p->grid_max_stride);
    else
        snprintf(buf, n, "grid(auto,%s,%d)", oc_plan_grid_lines_name(p->grid_lines), (int)p->grid_max_stride);
}

static void report_mminf(const oc_calib *c, FILE *f) {
    double n = c->mm_items ? (double)c->mm_items : 1.0;
    char name[64];
    fprintf(f, "\n## MMInference (App. A Alg. 4, Table 3 x %g): %lld prompts searched\n", c->p.mminf_scale,
            (long long)c->mm_items);
    fprintf(f, "candidate                      kept/causal  heads choosing it\n");
    for (int32_t k = 0; k < c->mm_n_cand; k++) {
        int32_t chosen = 0;
        for (size_t lh = 0; lh < (size_t)c->L * c->H; lh++)
            chosen += oc_calib_mminf_choose(c->mm_nmse + lh * OC_CALIB_MMINF_MAX_CAND, c->mm_n_cand) == k;
        cand_text(&c->mm_cand[k], name, sizeof name);
        fprintf(f, "%-30s %11.3f  %d\n", name, c->mm_pairs ? (double)c->mm_kept[k] / (double)c->mm_pairs : 0.0,
                (int)chosen);
    }
    fprintf(f, "%lld prompts took the modality steps (>= %d text and >= %d image queries)\n", (long long)c->mm_qb_items,
            OC_DYN_LAST_Q, OC_DYN_LAST_Q);
    fprintf(f, "layer head  -> No-Boundary choice (mean NMSE vs dense; the best A-shape, Vertical-Slash, Grid)"
               " [plan: the head's pattern when Q-Boundary or 2D-Boundary wins]\n");
    for (int32_t l = 0; l < c->L; l++)
        for (int32_t h = 0; h < c->H; h++) {
            const double *e = c->mm_nmse + ((size_t)l * c->H + h) * OC_CALIB_MMINF_MAX_CAND;
            int32_t k = oc_calib_mminf_choose(e, c->mm_n_cand);
            double best[3] = { INFINITY, INFINITY, INFINITY };
            for (int32_t j = 0; j < c->mm_n_cand; j++) {
                int kind = c->mm_cand[j].kind == OC_PATTERN_A_SHAPE ? 0 : c->mm_cand[j].kind == OC_PATTERN_VERTICAL_SLASH ? 1 : 2;
                best[kind] = fmin(best[kind], e[j] / n);
            }
            cand_text(&c->mm_cand[k], name, sizeof name);
            fprintf(f, "%5d %4d  -> %-28s %.4f  (%.4f %.4f %.4f)", (int)l, (int)h, name, e[k] / n, best[0], best[1],
                    best[2]);
            oc_head_pattern ch = mminf_choice(c, (size_t)l * c->H + h);
            if (ch.kind == OC_PATTERN_Q_BOUNDARY) {
                oc_head_pattern t = oc_pattern_modal(&ch, OC_MODALITY_TEXT), vi = oc_pattern_modal(&ch, OC_MODALITY_VISION);
                char tn[64], vn[64];
                cand_text(&t, tn, sizeof tn);
                cand_text(&vi, vn, sizeof vn);
                fprintf(f, " [q-boundary text=%s vision=%s]", tn, vn);
            } else if (ch.kind == OC_PATTERN_BOUNDARY_2D) {
                static const char *pn[4] = { "text-text", "text-vision", "vision-text", "vision-vision" };
                fprintf(f, " [2d-boundary");
                for (int m = 0; m < 4; m++) {
                    oc_head_pattern part = oc_pattern_pair(&ch, m / 2, m % 2);
                    char pt[64];
                    cand_text(&part, pt, sizeof pt);
                    fprintf(f, " %s=%s", pn[m], pt);
                }
                fprintf(f, "]");
            }
            fprintf(f, "\n");
        }
}

/* "alpha A" or Sec. 5's Linear "alpha A + (B - A) * layer / N" for a stack of n_layers. */
static void print_alpha(FILE *f, const oc_calib_params *p, int32_t n_layers) {
    fprintf(f, "alpha %.3g", p->bs_alpha);
    if (p->bs_alpha_end > 0.0) fprintf(f, " + (%.3g - %.3g) * layer / %d", p->bs_alpha_end, p->bs_alpha, (int)n_layers);
}

void oc_calib_report(oc_calib *c, FILE *f) {
    static const char *short_name[OC_PATTERN_COUNT] = { "dense", "sink", "intra", "intra+sink", "a-shape" };
    fprintf(f, "# ocellus calibrate report: %lld items, %.1f prompt tokens on average\n", (long long)c->n_items,
            c->n_items ? (double)c->prompt_tokens_sum / (double)c->n_items : 0.0);
    if (c->p.methods & OC_CALIB_BLINDSIGHT) {
        fprintf(f, "\n## BlindSight (");
        print_alpha(f, &c->p, c->L);
        fprintf(f, ", gamma_d %.3g, gamma_s %.3g, gamma_i %.3g)\n", c->p.bs_gamma_d, c->p.bs_gamma_s, c->p.bs_gamma_i);
        fprintf(f, "layer head  mean NMSE: sink  intra  intra+sink | votes: dense sink intra intra+sink -> choice\n");
        for (int32_t l = 0; l < c->L; l++)
            for (int32_t h = 0; h < c->H; h++) {
                size_t lh = (size_t)l * c->H + h;
                const int32_t *v = c->votes + lh * OC_PATTERN_COUNT;
                double n = c->n_items ? (double)c->n_items : 1.0;
                oc_pattern_kind k = oc_calib_bs_aggregate(v, (int32_t)c->n_items, c->p.bs_gamma_d, c->p.bs_gamma_s,
                                                          c->p.bs_gamma_i);
                fprintf(f, "%5d %4d  %10.4f %6.4f %6.4f | %5d %4d %5d %5d -> %s\n", (int)l, (int)h,
                        c->nmse_sum[lh * 3] / n, c->nmse_sum[lh * 3 + 1] / n, c->nmse_sum[lh * 3 + 2] / n,
                        (int)v[0], (int)v[1], (int)v[2], (int)v[3], short_name[k]);
            }
    }
    if (c->p.methods & OC_CALIB_SPARSEMM) {
        fprintf(f, "\n## SparseMM visual scores (%lld grounded answer tokens of %lld right answers), per kv head\n",
                (long long)c->n_scored_tokens, (long long)c->n_right);
        kv_scores(c, c->kvs);
        for (int32_t l = 0; l < c->L; l++) {
            fprintf(f, "layer %3d:", (int)l);
            for (int32_t g = 0; g < c->HKV; g++) fprintf(f, " %.4f", c->kvs[(size_t)l * c->HKV + g]);
            fprintf(f, "\n");
        }
    }
    if (c->p.methods & OC_CALIB_ZIPVL) {
        double n = c->n_zipvl_items ? (double)c->n_zipvl_items : 1.0;
        fprintf(f, "\n## ZipVL: mean important-token ratio p/n (Eq. 7) per layer at tau %.3f and %.3f -> tau;\n"
                   "## output NMSE of Alg. 1 (rows outside T padded with 0) vs dense at that tau: the check is ours,\n"
                   "## not the paper's: above %g the layer is left dense (no zipvl-tau line)\n",
                OC_CALIB_ZIPVL_TAU, OC_CALIB_ZIPVL_TAU_LOW, c->p.zipvl_max_nmse);
        for (int32_t l = 0; l < c->L; l++) {
            double r0 = c->zv_ratio[2 * l] / n, r1 = c->zv_ratio[2 * l + 1] / n;
            double tau = oc_calib_zipvl_tau(c->zv_ratio[2 * l], c->zv_ratio[2 * l + 1]);
            double nmse = oc_calib_zipvl_nmse(c, l);
            int keep = oc_calib_zipvl_keeps_layer(nmse, c->p.zipvl_max_nmse);
            fprintf(f, "layer %3d: %.3f %.3f -> %.3f%s; output NMSE %.4f%s\n", (int)l, r0, r1, tau,
                    tau < OC_CALIB_ZIPVL_TAU ? " (lowered: saves >= 10% of the tokens)" : "", nmse,
                    keep ? "" : " > threshold: LEFT DENSE");
        }
    }
    if ((c->p.methods & OC_CALIB_VISION) && c->VL) {
        fprintf(f, "\n## Vision encoder: %lld images of %d patches (%lld of other sizes skipped); mean NMSE of\n"
                   "## local(%d) | a-shape(%d,%d) | a-shape(%d,%d) | votes: dense, each -> choice (",
                (long long)c->n_vision_images, (int)c->vis_patches, (long long)c->n_vision_skipped, (int)c->vis_local[0],
                (int)c->vis_sink[1], (int)c->vis_local[1], (int)c->vis_sink[2], (int)c->vis_local[2]);
        print_alpha(f, &c->p, c->VL);
        fprintf(f, ")\n");
        double n = c->n_vision_images ? (double)c->n_vision_images : 1.0;
        for (int32_t l = 0; l < c->VL; l++)
            for (int32_t h = 0; h < c->VH; h++) {
                size_t lh = (size_t)l * c->VH + h;
                const double *e = c->vis_nmse + lh * OC_CALIB_VISION_N_CAND;
                const int32_t *v = c->vis_votes + lh * (1 + OC_CALIB_VISION_N_CAND);
                int m = vision_choice(c, lh);
                fprintf(f, "%5d %4d  %7.4f %7.4f %7.4f | %4d %4d %4d %4d -> %s\n", (int)l, (int)h, e[0] / n, e[1] / n,
                        e[2] / n, (int)v[0], (int)v[1], (int)v[2], (int)v[3],
                        m == 0 ? "dense" : m == 1 ? "local" : m == 2 ? "a-shape P/4" : "a-shape P/2");
            }
    }
    if ((c->p.methods & OC_CALIB_MMINFERENCE) && c->mm_n_cand) report_mminf(c, f);
    if (c->p.methods & OC_CALIB_QCACHE) {
        fprintf(f, "\n## Q-Cache: mean JS divergence (bits) of the last prompt row, layer l vs l+1 (epsilon %.3g, "
                "blocks of at most %d)\n", c->p.qc_epsilon, (int)c->p.qc_max_group);
        for (int32_t l = 0; l + 1 < c->L; l++)
            fprintf(f, "S(%d,%d) = %.4f\n", (int)l, (int)l + 1,
                    c->n_js_items ? c->js_sum[l] / (double)c->n_js_items : 0.0);
        if (c->n_js_items && c->L > 1) {   /* why there is a group, or none */
            int32_t lo = 0;
            for (int32_t l = 1; l + 1 < c->L; l++)
                if (c->js_sum[l] < c->js_sum[lo]) lo = l;
            double s_lo = c->js_sum[lo] / (double)c->n_js_items;
            if (s_lo < c->p.qc_epsilon)
                fprintf(f, "pairs below epsilon %g form the lazy groups (Eq. 4); the lowest, S(%d,%d) = %.4f\n",
                        c->p.qc_epsilon, (int)lo, (int)lo + 1, s_lo);
            else
                fprintf(f, "no lazy group: no pair is below epsilon %g; the closest, S(%d,%d) = %.4f, is %.1f times it\n",
                        c->p.qc_epsilon, (int)lo, (int)lo + 1, s_lo, s_lo / c->p.qc_epsilon);
        }
    }
}
