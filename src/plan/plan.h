/* plan.h: the attention plan of one model: per-head sparse patterns for the decoder and the vision
 * encoder, SparseMM per-kv-head KV budgets, ZipVL per-layer thresholds and Q-Cache lazy-layer
 * groups. `ocellus calibrate` writes plans, the runtime loads them; the text format and its grammar
 * are described at the top of plan.c. The data here is plain arrays so the attention engine reads
 * it without calls; every function that can fail returns an oc_status with a one-line message. */
#ifndef OC_PLAN_H
#define OC_PLAN_H

#include "core/core.h"
#include "attention/pattern.h"

#define OC_PLAN_VERSION 3   /* the newest format this build reads (it reads 1 and 2 too) */
/* Limits that bound a plan's memory (a plan never grows past them, whatever the input). */
#define OC_PLAN_MAX_LAYERS 256
#define OC_PLAN_MAX_HEADS 256           /* query heads and kv heads per layer */
#define OC_PLAN_MAX_HEAD_DIM 1024
#define OC_PLAN_MAX_TOKENS 16777216     /* a-shape sizes, kv-window, kv budgets */
#define OC_PLAN_MAX_LINE_BYTES 4096     /* without the line end; the writer stays below it */
/* Fractions (sink-fraction, zipvl-tau) are stored exactly as parts per million, so a plan written
 * and read back is bit-identical; the engine converts with (float)ppm / OC_PLAN_PPM. */
#define OC_PLAN_PPM 1000000
#define OC_PLAN_DEFAULT_SINK_FRACTION_PPM 100000   /* BlindSight Sec. 6.1: first 10% of each image */
#define OC_PLAN_DEFAULT_KV_WINDOW_TOKENS 32        /* SparseMM Sec. 3.3: local window w = 32 */
#define OC_PLAN_KV_FULL 0                          /* kv budget value: keep the whole cache */
/* The calibration line (`calibration key=value ...`): its words joined by single spaces. */
#define OC_PLAN_CALIBRATION_BYTES 512

typedef enum oc_plan_stack {
    OC_PLAN_DECODER = 0,   /* the language model: causal, GQA */
    OC_PLAN_VISION = 1,    /* the vision encoder: bidirectional within each image, no KV cache */
    OC_PLAN_N_STACKS
} oc_plan_stack;

typedef struct oc_plan_shape {
    int32_t n_layers;      /* 0: the plan does not cover this stack (it runs dense) */
    int32_t n_heads;       /* query heads per layer */
    int32_t n_kv_heads;    /* decoder: GQA kv heads; vision: equal to n_heads */
    int32_t head_dim;
} oc_plan_shape;

/* Q-Cache lazy attention (qcache.txt Eq. 5-8): in a group the first layer computes Q and K as usual
 * and keeps them; layers first+1..last reuse them (GLA: for every token; VLA: for visual tokens
 * only, text tokens keep their own Q/K). V is always each layer's own. */
typedef enum oc_lazy_mode { OC_LAZY_GLA = 0, OC_LAZY_VLA = 1 } oc_lazy_mode;

typedef struct oc_lazy_group {
    int32_t first_layer;   /* computes Q/K */
    int32_t last_layer;    /* > first_layer */
    oc_lazy_mode mode;
} oc_lazy_group;

typedef struct oc_stack_plan {
    oc_plan_shape shape;
    oc_head_pattern *heads;        /* [layer * n_heads + head]; NULL when n_layers == 0 */
    int32_t *kv_budget_tokens;     /* decoder only: [layer * n_kv_heads + kv_head], SparseMM budget
                                    * including the local window, or OC_PLAN_KV_FULL; vision: NULL */
    int32_t *zipvl_tau_ppm;        /* [layer]: ZipVL Eq. 7 threshold tau, 0 = ZipVL off */
    uint8_t *zipvl_heads_prefill;  /* [layer]: 1 = "zipvl-tau T prefill heads" (format version 4,
                                    * ours): the layer's prefill runs as its head patterns say and
                                    * ZipVL only chooses the kept set T (Eq. 6-10) afterwards;
                                    * 0 = zipvl.txt Alg. 1 (prefill over T) */
    int32_t *visual_score_ppm;     /* decoder only: [layer * n_kv_heads + kv_head], SparseMM's
                                    * normalised visual score (sparsemm.txt Eq. 3, summed per kv
                                    * group) in parts per million; all 0 when not calibrated. Kept
                                    * so budgets for a new total need no recalibration (Eq. 5-9);
                                    * the runtime does not read it. vision: NULL */
    oc_lazy_group *lazy_groups;    /* sorted by first_layer, disjoint */
    int32_t n_lazy_groups;
    int32_t lazy_groups_cap;       /* n_layers / 2: groups have two or more layers */
} oc_stack_plan;

typedef struct oc_plan {
    oc_allocator alloc;            /* every array above came from it */
    int32_t sink_fraction_ppm;     /* BlindSight: sink tokens = first fraction of each image */
    int32_t kv_window_tokens;      /* SparseMM local window w (Eq. 5-9) */
    char calibration[OC_PLAN_CALIBRATION_BYTES];   /* how `ocellus calibrate` made the plan
                                    * (methods, thresholds, data, model hash); "" when written by hand */
    oc_stack_plan stacks[OC_PLAN_N_STACKS];
} oc_plan;

/* The model a plan must fit; vision.n_layers == 0 means the model has no vision encoder. */
typedef struct oc_plan_model_shape {
    oc_plan_shape decoder;
    oc_plan_shape vision;
} oc_plan_model_shape;

/* Counts for `ocellus plan` and calibration reports. */
typedef struct oc_plan_stats {
    int32_t n_heads;                          /* layers x heads of the stack */
    int32_t n_per_pattern[OC_PATTERN_COUNT];  /* heads of each kind */
    int32_t n_sparse;                         /* heads that are not dense */
    int32_t n_budgeted_kv_heads;              /* kv heads with a budget (not full) */
    int32_t min_budget_tokens, max_budget_tokens;  /* over budgeted kv heads; 0 when none */
    int64_t sum_budget_tokens;
    int32_t n_zipvl_layers;                   /* layers with a ZipVL threshold */
    int32_t n_lazy_layers;                    /* layers that reuse another layer's Q/K */
} oc_plan_stats;

/* ---- building and freeing ---------------------------------------------------------------------- */

/* A plan for the given shapes (vision may be NULL or have n_layers 0): every head dense, every
 * kv budget full, ZipVL off, no lazy groups, default sink fraction and kv window.
 * [alloc: yes] [errors: OC_ERR_INVALID (shape out of the limits above), OC_ERR_NOMEM] */
oc_status oc_plan_create(oc_plan **out, const oc_plan_shape *decoder, const oc_plan_shape *vision,
                         const oc_allocator *alloc, oc_error *err);
void oc_plan_free(oc_plan *plan);   /* NULL is a no-op */
/* What plan holds from its allocator (the struct and its stacks' arrays, oc_mem_alloc's headers
 * included): its share of a context's memory. NULL: 0. */
size_t oc_plan_memory_bytes(const oc_plan *plan);

/* Add a lazy group; checks range, size >= 2, overlap and (vision) mode GLA. Keeps groups sorted.
 * [errors: OC_ERR_INVALID] */
oc_status oc_plan_add_lazy_group(oc_plan *plan, oc_plan_stack stack, int32_t first_layer,
                                 int32_t last_layer, oc_lazy_mode mode, oc_error *err);

static inline oc_head_pattern *oc_plan_head(oc_plan *plan, oc_plan_stack stack, int32_t layer,
                                            int32_t head) {
    oc_stack_plan *s = &plan->stacks[stack];
    return &s->heads[(size_t)layer * (size_t)s->shape.n_heads + (size_t)head];
}
static inline const oc_head_pattern *oc_plan_head_c(const oc_plan *plan, oc_plan_stack stack,
                                                    int32_t layer, int32_t head) {
    const oc_stack_plan *s = &plan->stacks[stack];
    return &s->heads[(size_t)layer * (size_t)s->shape.n_heads + (size_t)head];
}

/* ---- text form ---------------------------------------------------------------------------------- */

/* Parse a plan from text (grammar: plan.c). Strict: any error names its line, e.g.
 *   plan:7: unknown pattern 'sinc' (expected dense, sink, intra-image, intra-image+sink, a-shape)
 * (version-2 files also take vertical-slash, grid and q-boundary, version-3 files 2d-boundary).
 * source names the text in messages (NULL: "plan"). The text need not be NUL-terminated.
 * [alloc: yes, bounded by the limits above] [errors: OC_ERR_FORMAT, OC_ERR_NOMEM] */
oc_status oc_plan_parse(oc_plan **out, const char *text, size_t n_bytes, const char *source,
                        const oc_allocator *alloc, oc_error *err);
/* Read and parse a file; messages start with the path ("dir/x.plan:7: ..."). */
oc_status oc_plan_load_file(oc_plan **out, const char *path, const oc_allocator *alloc,
                            oc_error *err);

/* Write the canonical text of a plan: the same plan data always gives the same bytes, and parsing
 * them gives the same data. With buf == NULL only *n_bytes is set (the text length, without the NUL
 * that is written when buf is given). [alloc: no] [errors: OC_ERR_INVALID (plan fails
 * oc_plan_validate), OC_ERR_RANGE (buf_bytes < *n_bytes + 1)] */
oc_status oc_plan_write(const oc_plan *plan, char *buf, size_t buf_bytes, size_t *n_bytes,
                        oc_error *err);
/* [alloc: yes, the text, through plan->alloc] [errors: as above, OC_ERR_IO, OC_ERR_NOMEM] */
oc_status oc_plan_write_file(const oc_plan *plan, const char *path, oc_error *err);

/* ---- checks and statistics ---------------------------------------------------------------------- */

/* Everything the parser enforces, for plans built in memory (calibrate). [errors: OC_ERR_INVALID] */
oc_status oc_plan_validate(const oc_plan *plan, oc_error *err);
/* Refuse a plan that breaks a rule (oc_plan_validate) or does not fit the model, e.g.
 *   plan is for 28 decoder layers x 12 heads; model has 24 layers
 * A plan without a vision part fits any vision encoder (it runs dense). The one check of a plan:
 * a context runs it at open, and the graphs (text_layer.c, vision_encoder.c) trust the plan afterwards.
 * [errors: OC_ERR_INVALID (a rule), OC_ERR_UNSUPPORTED (the fit)] */
oc_status oc_plan_check_fits(const oc_plan *plan, const oc_plan_model_shape *model, oc_error *err);
/* 1 when a and b hold the same data (shapes, patterns, budgets, thresholds, groups, settings). */
int oc_plan_equal(const oc_plan *a, const oc_plan *b);
/* Counts of one stack (all zero when the plan does not cover it). */
void oc_plan_stats_get(const oc_plan *plan, oc_plan_stack stack, oc_plan_stats *out);

/* Names as the plan file spells them. */
const char *oc_plan_pattern_name(oc_pattern_kind kind);   /* "dense", "sink", ... ; "?" if bad */
const char *oc_plan_stack_name(oc_plan_stack stack);      /* "decoder", "vision" */
const char *oc_plan_lazy_mode_name(oc_lazy_mode mode);    /* "gla", "vla" */
/* 1 when kind may be used in stack: BlindSight kinds need text and image spans, so decoder only. */
int oc_plan_pattern_allowed(oc_plan_stack stack, oc_pattern_kind kind);
/* Pattern equality is pattern.h's oc_pattern_same. */
/* 1 when text is a valid calibration line body: "key=value" words, single spaces (plan.c). */
int oc_plan_calibration_ok(const char *text);
/* NULL when the pattern's sizes are in range for its kind and the other kinds' fields are 0, else a
 * short static description. */
const char *oc_plan_pattern_problem(const oc_head_pattern *p);
/* "h", "v", "s", "h+v", ... for OC_GRID_* bits 1..7; "?" otherwise. */
const char *oc_plan_grid_lines_name(int32_t lines);
/* The format version the writer emits: 3 when a head is 2d-boundary, else 2 when a head uses
 * vertical-slash, grid or q-boundary, else 1. */
int oc_plan_format_version(const oc_plan *plan);

/* ---- shared by plan.c and plan_model.c only ------------------------------------------------------ */
/* An empty plan (no stack covered yet) with the default settings. */
oc_status oc_plan_new_empty(oc_plan **out, const oc_allocator *alloc, oc_error *err);
/* Allocate one stack's arrays (all dense, budgets full, ZipVL off) for a shape that passed
 * oc_plan_shape_problem. On failure the stack is left empty and the plan stays freeable. */
oc_status oc_plan_stack_init(oc_plan *plan, oc_plan_stack stack, const oc_plan_shape *shape, oc_error *err);
/* NULL when the shape is within the limits, else a short static description of the problem. */
const char *oc_plan_shape_problem(oc_plan_stack stack, const oc_plan_shape *shape);

#endif /* OC_PLAN_H */
