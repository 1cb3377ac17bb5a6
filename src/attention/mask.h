/* mask.h: what an attention call's mask keeps (attn.h states the semantics), in the pieces both
 * executors build on: the argument check of the mask description, the classes of query rows (runs
 * cut at segment and image edges), each row's window, the key set of a class as intervals, and the
 * pair counts behind the FLOP statistics. The CPU engine (attn.c) tiles with all of them; the OpenCL
 * host (opencl/cl_attn.c) uses the check, the classes and the pair counts, its kernel evaluates the
 * windows itself (opencl/kernels/attn.cl). No allocation, no state. */
#ifndef OC_MASK_H
#define OC_MASK_H

#include "attention/attn_call.h"
#include "attention/dyn.h"

/* ---- checks -------------------------------------------------------------------------------------- */

/* The call's shapes, mask kind, segments, explicit mask and patterns are well formed (not the
 * tensors or executor limits). who prefixes the message ("attn", "opencl attn").
 * [errors: OC_ERR_INVALID naming the bad field] */
oc_status oc_mask_check(const oc_attn_call *a, const char *who, oc_error *err);
/* The conditions of VERTICAL_SLASH / GRID heads in a call with n_q >= OC_DYN_LAST_Q (dyn.h): a
 * causal or bidirectional base and the queries' own keys in the cache; with need_index also a
 * well-formed call->dyn. [errors: OC_ERR_INVALID] */
oc_status oc_mask_check_dyn(const oc_attn_call *a, int need_index, const char *who, oc_error *err);

/* ---- row classes ---------------------------------------------------------------------------------- */

/* The class of a run of query rows: the candidate key range [c0, c1) of the base mask and, for an
 * image row under a BlindSight pattern, which parts of the images it keeps. */
typedef struct oc_mask_class {
    int32_t c0, c1;      /* c0 >= c1: the rows keep nothing */
    int32_t image;       /* the rows' image, or -1 */
    int sinks, intra;    /* keep the sinks of every image / the own image (image rows only) */
} oc_mask_class;

/* Classify query row i (position q_offset + i) for head pattern pat and return the first row after
 * i that may be of another class, capped by i_end: rows are cut at segment edges; for a
 * VERTICAL_SLASH pattern so that a run holds whole 64-query blocks (dyn.h) after its first block
 * edge (a run that starts inside a block ends at that block's edge); and at image edges when pat
 * is a BlindSight, Q_BOUNDARY or BOUNDARY_2D pattern or NULL (NULL: a class for every pattern, as
 * the OpenCL runs need; then sinks and intra are 0; for the boundary kinds image tells the
 * modality, sinks and intra are 0, and the rows of a Q_BOUNDARY modality whose pattern is
 * VERTICAL_SLASH are cut at its blocks the same way; a BOUNDARY_2D head's rank blocks are cut by
 * the engine). */
int32_t oc_mask_classify(const oc_attn_call *a, const oc_head_pattern *pat, int32_t i, int32_t i_end,
                         oc_mask_class *cls);

/* ---- windows --------------------------------------------------------------------------------------- */

/* Row p's window: keys j with j < sk or lo <= j <= hi (before the class's key set applies).
 * Causal base: j <= p. A-shape (mminference.txt Sec. 3, App. C.3): the first n_sink keys plus the
 * n_local keys ending at the query, (p - n_local, p]; with a causal base the sinks are cut at p
 * too. The A-shape window ends at the query also under a bidirectional base, as pattern.h defines
 * it ("keys before and including the query's own"). Inline: the partial-tile mask asks per row. */
typedef struct oc_mask_window { int64_t sk, lo, hi; } oc_mask_window;

static inline oc_mask_window oc_mask_row_window(const oc_attn_call *a, const oc_head_pattern *pat, int64_t p) {
    int causal = a->mask == OC_ATTN_CAUSAL, ashape = pat->kind == OC_PATTERN_A_SHAPE;
    oc_mask_window w;
    w.hi = causal || ashape ? p : INT64_MAX / 4;
    w.lo = ashape ? p - pat->n_local + 1 : 0;
    w.sk = ashape ? (causal ? OC_MIN((int64_t)pat->n_sink, p + 1) : (int64_t)pat->n_sink) : 0;
    return w;
}

/* Up to two sorted, disjoint intervals [lo, hi). */
typedef struct oc_mask_ivals { int n; int64_t lo[2], hi[2]; } oc_mask_ivals;

/* The union of [a0, b0) and [a1, b1), which may overlap or be empty. */
oc_mask_ivals oc_mask_ivals_of(int64_t a0, int64_t b0, int64_t a1, int64_t b1);

/* The keys some row of positions [p_first, p_last] keeps (union of the windows) and the keys every
 * one keeps (intersection): both window bounds grow with the position, so the first and last rows
 * decide; the O(1) tile classification of attn.c. */
void oc_mask_window_span(const oc_attn_call *a, const oc_head_pattern *pat, int64_t p_first, int64_t p_last,
                         oc_mask_ivals *some, oc_mask_ivals *all);

/* ---- key sets -------------------------------------------------------------------------------------- */

/* The class's key set as ascending intervals within [lo, hi). For text rows and non-BlindSight
 * patterns it is [lo, hi). For an image row (blindsight.txt App. L, Alg. 3: mask_kv = istext, or
 * istext | isimsink): every text key, plus the sink keys of every image (Sink kinds), plus the
 * whole own image (Intra kinds); the causal window later cuts what lies after the query. */
typedef struct oc_mask_keys {
    const oc_token_layout *layout;
    oc_mask_class cls;
    int32_t pos, end, img, n_images;
} oc_mask_keys;

void oc_mask_keys_init(oc_mask_keys *it, const oc_attn_call *a, const oc_mask_class *cls, int32_t lo, int32_t hi);
/* The next interval [*lo, *hi); 0 when there is none. */
int oc_mask_keys_next(oc_mask_keys *it, int32_t *lo, int32_t *hi);

/* ---- pair counts ------------------------------------------------------------------------------------ */

/* Pairs the base mask keeps for head h (the dense reference for "FLOPs skipped"). */
uint64_t oc_mask_base_pairs(const oc_attn_call *a, int32_t h);
/* The same summed over every head. */
uint64_t oc_mask_base_pairs_all(const oc_attn_call *a);

#endif
