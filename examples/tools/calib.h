/* calib.h: `ocellus calibrate`'s algorithms, outside the runtime library (a tool, not firmware).
 * The library's forward pass hands every decoder layer's post-RoPE Q, K and V to an observer
 * (oc_context_params.on_attention, include/ocellus.h); everything here turns those into plan
 * sections:
 *   statistics  calib_stats.c      tiled attention statistics of one head (masked outputs, one
 *                                  row's softmax, argmax, column mass), never an N x N matrix
 *   BlindSight  calib_blindsight.c Alg. 1 (per-prompt NMSE choice) and Alg. 2 (dataset vote)
 *   SparseMM    calib_sparsemm.c   Alg. 1 / Eq. 3-4 visual scores, Eq. 5-9 budgets
 *   Q-Cache     calib_qcache.c     Eq. 3 JS divergence of last rows, Eq. 4 lazy blocks
 *   MMInference calib_mminf.c      App. A Alg. 4 / C.5 Table 3: per head the pattern of the search
 *                                  space whose output is closest to dense attention
 *   the run     calib_run.c        the observer, per-item bookkeeping, the plan and the report
 * Memory is bounded up front by the model shape and the context length (oc_calib_bytes); the
 * statistics cost O(n_kv + head_dim) scratch per head. Results do not depend on the thread count:
 * the observer runs on the calling thread in a fixed order. */
#ifndef OC_CALIB_H
#define OC_CALIB_H

#include "core/core.h"
#include "plan/plan.h"

#include <stdio.h>

/* ---- statistics of one attention head (calib_stats.c) ------------------------------------------ */

/* One head's inputs: query row i is token q_first + i and sees keys 0 .. q_first + i (causal). */
typedef struct oc_calib_head {
    int32_t n_q, q_first, n_kv, head_dim;
    const float *q; int64_t q_stride;     /* row i at q + i * q_stride */
    const float *k, *v; int64_t kv_stride;   /* key j at k + j * kv_stride */
    float scale;                          /* 1 / sqrt(head_dim) */
} oc_calib_head;

/* Where the images sit: image_of[pos] (-1: text) and is_sink[pos] for pos < n_tokens; tokens at or
 * after n_tokens are text. The same rules as the attention engine's layout (attention/layout.h). */
typedef struct oc_calib_tokens {
    int32_t n_tokens;
    const int32_t *image_of;
    const uint8_t *is_sink;
} oc_calib_tokens;

#define OC_CALIB_TILE_KEYS 64      /* keys scored at a time: the scratch is O(tile + head_dim) */
#define OC_CALIB_N_BS_MASKS 3      /* sink, intra-image, intra-image+sink: Alg. 1's order */

/* Scratch for the helpers: (4 * head_dim + OC_CALIB_TILE_KEYS) doubles. */
size_t oc_calib_scratch_doubles(int32_t head_dim);

/* 1 when query position p keeps key j under pattern kind (dense, sink, intra-image,
 * intra-image+sink), the rule of the attention engine (attn.c cand_next; blindsight.txt App. L
 * Alg. 3): causal j <= p; text queries keep everything; image queries keep text keys, the sink
 * tokens of every image (sink kinds) and their own image (intra kinds). */
int oc_calib_keeps(const oc_calib_tokens *t, oc_pattern_kind kind, int32_t p, int32_t j);

/* BlindSight Alg. 1's squared errors over the head's query rows: ref_sq += sum ||O_dense||^2 and
 * err_sq[m] += sum ||O_mask_m - O_dense||^2 for the three masks, O = softmax(scale QK^T + mask) V,
 * each row by an online softmax over key tiles (flash style, double accumulators). */
void oc_calib_mask_errors(const oc_calib_head *h, const oc_calib_tokens *t, double err_sq[3],
                          double *ref_sq, double *scratch);

/* The vision encoder's counterpart (bidirectional, no images): query i keeps the keys of its own
 * segment [seg_start[i], seg_end[i]); candidate m keeps, inside that, keys j < sink[m] or
 * i - local[m] < j <= i (the engine's a-shape under a bidirectional base, attn.c row_window;
 * sink 0 is a pure local window). ref_sq += sum ||O_dense||^2, err_sq[m] += sum ||O_m - O_dense||^2
 * for m < n_cand <= 3. */
void oc_calib_vision_errors(const oc_calib_head *h, const int32_t *seg_start, const int32_t *seg_end, int32_t n_cand,
                            const int32_t *sink, const int32_t *local, double *err_sq, double *ref_sq, double *scratch);

/* Row i's softmax over its causal keys into probs[0 .. n_kv) (zeros after the query): two passes
 * over key tiles, the first for the normaliser. */
void oc_calib_row_probs(const oc_calib_head *h, int32_t i, double *probs, double *scratch);

/* The key with row i's largest score (the lowest index among ties); the argmax of the softmax. */
int32_t oc_calib_row_argmax(const oc_calib_head *h, int32_t i, double *scratch);

/* ZipVL Eq. 8 inputs over all rows: col_sum[j] += sum_i A_ij, col_nnz[j] += rows that see key j;
 * per row a first pass over key tiles for the normaliser, a second adds the probabilities. */
void oc_calib_column_mass(const oc_calib_head *h, double *col_sum, int64_t *col_nnz, double *scratch);

/* The softmax rows rows[0..n_rows) (indices into the head's query rows, ascending) added to
 * col_sum[j]: ZipVL's probe rows (zipvl.txt supplement Eq. A), the runtime's important-token input.
 * Two passes over key tiles per row, as oc_calib_column_mass. */
void oc_calib_rows_mass(const oc_calib_head *h, const int32_t *rows, int32_t n_rows, double *col_sum, double *scratch);

/* ZipVL Alg. 1's prefill attention for one head against dense attention, for up to three important
 * sets at once: bit s of in_set[pos] (pos < n_kv) marks set s's tokens. A row whose position is in
 * set s attends causally over set s's keys only; a row outside it outputs 0 (Sec. 4.2: "Tokens
 * excluded from this computation have their outputs padded"). ref_sq += sum ||O_dense||^2 and
 * err_sq[s] += sum ||O_s - O_dense||^2 over the head's rows, s < n_sets <= 3, each row by an online
 * softmax over key tiles (no N x N matrix). */
void oc_calib_zipvl_errors(const oc_calib_head *h, const uint8_t *in_set, int32_t n_sets, double *err_sq,
                           double *ref_sq, double *scratch);

/* Jensen-Shannon divergence in bits (qcache.txt Eq. 3), in [0, 1]: the base-2 logarithm makes the
 * paper's range 0 < epsilon <= 1 the whole range of the divergence. */
double oc_calib_jsd(const double *p, const double *q, int32_t n);

/* ---- BlindSight (calib_blindsight.c) ----------------------------------------------------------- */

#define OC_CALIB_BS_ALPHA 0.1      /* Sec. 4.1 / App. D: alpha_layer fixed at 0.1 for Qwen models */
#define OC_CALIB_BS_GAMMA_D 0.25   /* Alg. 2 / App. D defaults */
#define OC_CALIB_BS_GAMMA_S 0.6
#define OC_CALIB_BS_GAMMA_I 0.6

/* Alg. 1: the first mask of sink, intra-image, intra-image+sink whose NMSE = err_sq / ref_sq is
 * below alpha, else dense. A head with ref_sq == 0 (all outputs zero) takes the first mask. */
oc_pattern_kind oc_calib_bs_choose(const double err_sq[3], double ref_sq, double alpha);
/* Alg. 2 over n prompts with counts[kind] prompts choosing each kind: dense when its fraction
 * exceeds gamma_d, else sink above gamma_s, else intra-image above gamma_i, else
 * intra-image+sink. n == 0 gives dense. */
oc_pattern_kind oc_calib_bs_aggregate(const int32_t counts[OC_PATTERN_COUNT], int32_t n, double gamma_d,
                                      double gamma_s, double gamma_i);

/* ---- SparseMM (calib_sparsemm.c) --------------------------------------------------------------- */

#define OC_CALIB_KV_RHO 0.1        /* Sec. 3.3 / App. Table 4: uniform share rho = 0.1 */

/* Eq. 3-4 for one generated token and one head: 1 / n_region when argmax lies in the region. */
double oc_calib_hit(int32_t argmax_key, const uint8_t *in_region, int32_t n_region);
/* Visual scores of kv heads from query-head scores (App. A.1: summed over each kv group), then
 * normalised to sum 1 (all zero: left zero). scores [n_layers][n_head] -> out [n_layers][n_kv_heads]. */
void oc_calib_kv_scores(const double *head_scores, int32_t n_layers, int32_t n_head, int32_t n_kv_heads,
                        double *out);
/* Eq. 5-9: budget of each of n kv heads from total_tokens, local window w and ratio rho:
 * w + r + B_remain2 * s / sum(s). Budgets are whole tokens: each gets the floor, then the tokens left
 * go one by one to the largest fractional parts (lower index first), so they sum to total_tokens.
 * All scores zero: the score part is split uniformly. [errors: OC_ERR_INVALID when
 * total_tokens < n * w] */
oc_status oc_calib_kv_budgets(const double *scores, int32_t n, int64_t total_tokens, int32_t w, double rho,
                              int32_t *budgets, oc_error *err);

/* The decoder's kv budgets from the plan's stored visual scores (visual_score_ppm) for a new total
 * with the plan's kv-window: what `ocellus plan FILE --kv-budget N` runs, no calibration needed.
 * [alloc: yes, n doubles, freed] [errors: OC_ERR_INVALID (no scores, total too small), OC_ERR_NOMEM] */
oc_status oc_calib_plan_budgets(oc_plan *plan, int64_t total_tokens, double rho, oc_error *err);

/* ---- Q-Cache (calib_qcache.c) ------------------------------------------------------------------ */

/* epsilon and the block cap are not given in the paper (Sec. 3.2: "a hyper-parameter", "a threshold
 * to limit the size of blocks"); our choice, measured on the demo model (BENCHMARKS.md). */
#define OC_CALIB_QC_EPSILON 0.1
#define OC_CALIB_QC_MAX_GROUP 3

/* Eq. 4: greedy blocks from layer 0 up: a block grows while S(l, l+1) < epsilon and it has fewer
 * than max_group layers; blocks of two or more layers are written to first/last (at most
 * n_layers / 2). s_adjacent[l] = S(l, l+1) for l < n_layers - 1. Returns the number of blocks. */
int32_t oc_calib_qc_groups(const double *s_adjacent, int32_t n_layers, double epsilon, int32_t max_group,
                           int32_t *first, int32_t *last);

/* ---- ZipVL (calib_zipvl.c) --------------------------------------------------------------------- */

#define OC_CALIB_ZIPVL_TAU 0.975       /* Sec. 5.3.2: the paper's setting, just above the knee */
#define OC_CALIB_ZIPVL_TAU_LOW 0.97    /* Sec. 5.3.2 / App. B.3: below 0.97 accuracy falls */
#define OC_CALIB_ZIPVL_MIN_GAIN 0.10   /* lower a layer only when it keeps >= 10% fewer tokens (ours) */
/* OUR ADDITION, not in the paper: the output check. Alg. 1 zeroes the attention output of every
 * row outside the important set T (Sec. 4.2), and Eq. 7 bounds only the mass lost on the key side,
 * so a layer whose rows read a few (text) keys keeps a small T and loses most of its output: the
 * long model's layer 0 (BENCHMARKS.md, "ZipVL's output check"). Calibration runs Alg. 1 on
 * each layer as the runtime would (the runtime's probes and T, kvcache/kv_select.h) and leaves the
 * layer dense (no zipvl-tau line) when the output NMSE, sum ||O_zipvl - O_dense||^2 over
 * sum ||O_dense||^2 of the layer's heads and rows, averaged over the prompts, exceeds this.
 * 0.5: more than half of the layer's attention output energy destroyed. The NMSE is about the
 * share of output energy in the rows outside T; measured (BENCHMARKS.md, "ZipVL's output check"):
 * the long model's layer 0 0.69, its layers 1-11 0.05-0.12, the demo model's layers 0.0001-0.21,
 * so 0.5 has a wide margin either side. BlindSight's alpha = 0.1 would leave most layers dense:
 * any T below 90% of the rows zeroes about 10% of the output. */
#define OC_CALIB_ZIPVL_MAX_NMSE 0.5

/* Eq. 7: the fewest tokens whose column sums (col_sum[0..n), adding up to total) reach tau * total.
 * scratch: n doubles. */
int32_t oc_calib_zipvl_p(const double *col_sum, int32_t n, double total, double tau, double *scratch);
/* The layer's tau from its mean important-token ratios at OC_CALIB_ZIPVL_TAU and _TAU_LOW: the low
 * one only where it saves at least OC_CALIB_ZIPVL_MIN_GAIN of the tokens ("the measured mass curve
 * allows"), else the paper's default. */
double oc_calib_zipvl_tau(double ratio_at_tau, double ratio_at_low);
/* The output check (OC_CALIB_ZIPVL_MAX_NMSE, ours): 1 when a layer with this mean output NMSE keeps
 * its zipvl-tau line (nmse <= max_nmse), 0 when it is left dense. */
int oc_calib_zipvl_keeps_layer(double nmse, double max_nmse);

/* ---- MMInference (calib_mminf.c) ------------------------------------------------------------- */

#define OC_CALIB_MMINF_MAX_CAND 24   /* Table 3: 6 + 6 Grid (fixed / searched stride), 3 A-shape, 9 VS */
#define OC_CALIB_MMINF_MAX_IMAGES 64 /* prompts with more images skip the modality steps */
struct oc_token_layout;

/* The search space of App. C.5 Table 3 into out[0 ..), in its order; returns the count. Sizes are
 * Table 3's times scale (rounded; at least 1, a grid's max stride at least 2): the table is for
 * calibration prompts of about 25K tokens (C.5), and a smaller scale fits short prompts (ours).
 * frame_stride: Table 3's fixed-stride grids stride by one frame; for images, one image's tokens
 * (ours; < 1: those six candidates are left out). */
int32_t oc_calib_mminf_space(double scale, int32_t frame_stride, oc_head_pattern *out);
/* The cross-modality step's space (App. A Alg. 4; ours where the paper is silent): cand[0..n_cand)
 * for one key modality holding share (0, 1] of the keys: A-shape's sink and local and
 * Vertical-Slash's columns and diagonals times share (rounded, at least 1), Grid as it is (a line
 * every stride keys of any stream is already that share). So the pairs of one query row together
 * keep about as many keys as one candidate does over all keys: the 2D-Boundary head competes at
 * the cost of the No-Boundary and Q-Boundary heads (App. A: "comparable real-world FLOPs").
 * Returns n_cand. */
int32_t oc_calib_mminf_pair_space(const oc_head_pattern *cand, int32_t n_cand, double share, oc_head_pattern *out);
/* Bytes of the work block oc_calib_mminf_head needs for prompts of up to max_tokens. */
size_t oc_calib_mminf_work_bytes(int32_t max_tokens, int32_t head_dim);
/* Alg. 4's objective for one head over its causal rows: ref_sq += sum ||O_dense||^2 and
 * err_sq[c] += sum ||O_c - O_dense||^2 for each candidate, every output computed by the runtime's
 * engine with the candidate's per-prompt index (oc_attn_dyn_build, oc_attn_run: what the plan will
 * run); kept_pairs[c] (may be NULL) += the pairs the candidate keeps. With layout (the prompt's
 * images; NULL: skipped) also the intra-modality step: err_modal[2 c + m] += the squared error on
 * the rows of modality m (pattern.h OC_MODALITY_*) with candidate c as modality m's pattern of a
 * Q-Boundary head; and with pair_cand (NULL: skipped; [2][n_cand]: key modality mk's candidates,
 * oc_calib_mminf_pair_space) the cross-modality step: err_pair[(2 c + mq) 2 + mk] += the squared
 * error on the rows of modality mq with pair_cand[mk][c] as pair (mq, mk) of a 2D-Boundary head
 * whose other pair (mq, 1 - mk) is dense. work: oc_calib_mminf_work_bytes. [alloc: no] [errors:
 * OC_ERR_INVALID (above max_tokens), the engine's] */
oc_status oc_calib_mminf_head(const oc_calib_head *h, const oc_head_pattern *cand, int32_t n_cand, int32_t max_tokens,
                              const struct oc_token_layout *layout, const oc_head_pattern *pair_cand, void *work,
                              double *err_sq, double *err_modal, double *err_pair, double *ref_sq,
                              uint64_t *kept_pairs, oc_error *err);
/* Alg. 4's argmin: the candidate with the smallest mean NMSE (ties: the earlier in Table 3). */
int32_t oc_calib_mminf_choose(const double *nmse, int32_t n_cand);

/* ---- a calibration run (calib_run.c) ----------------------------------------------------------- */

enum {
    OC_CALIB_BLINDSIGHT = 1 << 0,
    OC_CALIB_SPARSEMM = 1 << 1,
    OC_CALIB_QCACHE = 1 << 2,
    OC_CALIB_ZIPVL = 1 << 3,
    OC_CALIB_VISION = 1 << 4,
    OC_CALIB_MMINFERENCE = 1 << 5,   /* decoder head patterns, like BlindSight: one of the two */
};

/* Vision encoder heads (beyond the papers, issue 18): per image and head the cheapest of three
 * nested candidates whose output NMSE stays below alpha (BlindSight's criterion, Alg. 1), sizes
 * relative to the calibration images' P patches: a local window of P/4 (sink 0), a-shape with
 * P/16 sinks and a P/4 window, a-shape with P/16 sinks and a P/2 window; then over the images
 * (BlindSight Alg. 2's thresholds, ours for nested candidates): dense when more than gamma_d of
 * the images need dense, else the cheapest candidate that more than gamma_s of the images accept
 * (an image accepts its choice and the costlier candidates). */
#define OC_CALIB_VISION_N_CAND 3
#define OC_CALIB_BS_SWEEP 6          /* BlindSight alpha schedules the frontier tries (calib_run.c) */

typedef struct oc_calib_params {
    unsigned methods;                      /* OC_CALIB_* bits */
    double bs_alpha, bs_gamma_d, bs_gamma_s, bs_gamma_i;
    double bs_alpha_end;                   /* > 0: the Linear alpha_layer scheme up to it */
    int32_t sink_fraction_ppm;             /* BlindSight Sec. 6.1: 10% */
    int32_t kv_window;                     /* SparseMM w = 32 */
    double kv_rho;
    int64_t kv_budget_tokens;              /* per kv head on average (the paper's "budget 256"); 0: */
    double kv_budget_fraction;             /* ... this fraction of the mean prompt length instead */
    double qc_epsilon;
    int32_t qc_max_group;
    oc_lazy_mode qc_mode;                  /* VLA: the paper's recommended mode (Sec. 4) */
    double mminf_scale;                    /* Table 3's sizes times this (1: as written) */
    double zipvl_max_nmse;                 /* ZipVL output check (ours): a layer above it stays dense */
    int32_t n_threads;                     /* heads observed in parallel (<= 1: serial); the plan
                                              is the same for any count */
} oc_calib_params;
void oc_calib_params_default(oc_calib_params *p);
/* BlindSight's alpha_layer of layer `layer` of n_layers: bs_alpha, or with bs_alpha_end > 0 the Linear scheme
 * bs_alpha + (bs_alpha_end - bs_alpha) * layer / n_layers (Sec. 5 "Hyperparameter Selection",
 * App. D.1.2), which keeps the first layers, the most sensitive ones, denser. */
double oc_calib_bs_alpha(const oc_calib_params *p, int32_t layer, int32_t n_layers);

typedef struct oc_calib oc_calib;

/* Bytes oc_calib_open allocates for a decoder of this shape and a context of max_tokens. */
/* vision: the encoder's shape (NULL or n_layers 0: none); max_vision_tokens: patches per image;
 * n_threads: as in the params (each thread's scratch, and the pool's own bytes). */
size_t oc_calib_bytes(const oc_plan_shape *decoder, int32_t max_tokens, const oc_plan_shape *vision,
                      int32_t max_vision_tokens, int32_t n_threads);
/* [alloc: yes, once, oc_calib_bytes] [errors: OC_ERR_INVALID, OC_ERR_NOMEM] */
oc_status oc_calib_open(oc_calib **out, const oc_calib_params *p, const oc_plan_shape *decoder,
                        int32_t max_tokens, const oc_plan_shape *vision, int32_t max_vision_tokens,
                        const oc_allocator *alloc, oc_error *err);
void oc_calib_close(oc_calib *c);

/* Per item: begin with the SparseMM grounding (cells[g][row * grid + col] != 0 marks the scene
 * cells of image g that hold the answer; cells NULL or cells[g] NULL: none), then oc_ask with
 * oc_calib_observe as the context's observer, then end with whether the model's answer was right
 * (SparseMM counts only tokens of right answers: they are the grounded ones) and how many answer
 * tokens were generated. An image token is in the region when the cell under its centre is. */
void oc_calib_item_begin(oc_calib *c, const uint8_t *const *cells, int32_t grid);
void oc_calib_observe(void *calib, const struct oc_attn_view *view);
void oc_calib_item_end(oc_calib *c, int answer_right, int32_t n_answer_tokens);

/* Fills the decoder sections of plan (shape must match) for the methods asked for. */
oc_status oc_calib_to_plan(const oc_calib *c, oc_plan *plan, oc_error *err);
/* A human-readable report: per-head NMSE and choice fractions, scores, JS divergences. */
void oc_calib_report(oc_calib *c, FILE *f);
/* The normalised visual score of each kv head, [n_layers][n_kv_heads] (borrowed). */
const double *oc_calib_visual_scores(oc_calib *c);
/* The number of items seen; the answer tokens SparseMM scored (0: no right answer with a region). */
int64_t oc_calib_n_items(const oc_calib *c);
int64_t oc_calib_n_scored_tokens(const oc_calib *c);
/* ZipVL's output check (ours): the layer's mean output NMSE of Alg. 1 against dense attention at
 * the tau calibration picks for it (negative: no prompt measured). A layer above the params'
 * zipvl_max_nmse gets no zipvl-tau line, nor does a lazy group holding such a layer. */
double oc_calib_zipvl_nmse(const oc_calib *c, int32_t layer);
/* The frontier's candidates (ours; calib_frontier.h): for one method (an OC_CALIB_* bit), the
 * number of candidates this run can generate (0: the method was not calibrated or saw nothing),
 * and candidate k's sections written into plan (fresh from oc_plan_create: every other section
 * stays dense), with a label such as "alpha 0.2" or "budget 0.25x" (x the mean prompt). The
 * papers' algorithms generate them; what is swept is ours: BlindSight Alg. 1-2 at six alpha
 * schedules (votes kept per schedule during the run); SparseMM Eq. 5-9 at 0.75, 0.5, 0.25, 0.1 of the mean prompt per kv head; ZipVL at tau
 * 0.99, 0.975, 0.95, 0.9 on the layers its output check keeps; MMInference's Alg. 4 choice on the
 * heads whose best mean NMSE is <= 0.01, 0.03, 0.1, or all (Table 3's scale needs a calibration
 * run each: --mminf-scale); Q-Cache Eq. 4 at epsilon 0.1, 0.25, 0.5, 0.75; the vision encoder's
 * heads the cheapest candidate of mean NMSE <= 0.01, 0.03, 0.1, 0.3.
 * [alloc: no] [errors: OC_ERR_INVALID (no such candidate, shapes), oc_plan_add_lazy_group's] */
int32_t oc_calib_n_candidates(const oc_calib *c, unsigned method);
oc_status oc_calib_candidate(const oc_calib *c, unsigned method, int32_t k, oc_plan *plan, char *label,
                             size_t label_bytes, oc_error *err);
/* Q-Cache's mean S(l, l+1) in bits (Eq. 3), or -1 when not measured. */
double oc_calib_js_mean(const oc_calib *c, int32_t l);
/* Drop methods from the run's set before oc_calib_to_plan (e.g. SparseMM when nothing was scored). */
void oc_calib_drop_methods(oc_calib *c, unsigned methods);

#endif /* OC_CALIB_H */
