/* calib_frontier.h: `ocellus calibrate --search greedy`: every candidate of every method validated
 * on answers (the frontier), then the combined plan built greedily. OURS, not any paper's: the
 * papers' algorithms generate the candidates (calib.h oc_calib_candidate); this step only chooses
 * among them and combines them, on a validation set of its own (calib_budget.h):
 *  1. dense attention on the validation items;
 *  2. each candidate alone (its method's sections, every other section dense): accuracy, mean
 *     first-answer-token margin, attention FLOPs skipped, KV bytes against dense's. Its saving is
 *     the FLOPs skipped plus the KV saved, in points (search.py's measure). A candidate that is
 *     dense attention (e.g. a Q-Cache epsilon that forms no group) takes dense's numbers unrun;
 *  3. per method the pick: the candidate within the budget (oc_calib_within_budget) with the
 *     largest saving above 0 (ties: the milder, earlier one). A method with none is left out;
 *  4. the picks in order of saving per point of validation loss (the loss floored at one
 *     answer of the validation set: a pick that loses nothing is not infinitely good), each
 *     merged into the plan so far (oc_calib_plan_merge) and validated again with the others on;
 *     kept when the combination stays within the budget, else dropped. Two methods that both
 *     choose head patterns (BlindSight, MMInference) do not stack on the same heads: once one is
 *     kept, a pick of the other with patterns in that stack is not tried.
 * The plan starts dense and every step kept was validated within the budget, so the result is
 * within by construction (on these items). */
#ifndef OC_CALIB_FRONTIER_H
#define OC_CALIB_FRONTIER_H

#include <stdio.h>

#include "tools/calib_budget.h"

#define OC_CALIB_FRONTIER_MAX_CAND 48
#define OC_CALIB_FRONTIER_LABEL_BYTES 48

typedef struct oc_calib_cand {
    unsigned method;               /* calib.h OC_CALIB_* bit */
    char label[OC_CALIB_FRONTIER_LABEL_BYTES];   /* the knob, e.g. "alpha 0.2" */
    const oc_plan *plan;           /* the method's sections only (borrowed) */
    oc_calib_val val;
    int validated;                 /* 0: the plan is dense attention; val is dense's */
    double loss_points;            /* dense's accuracy minus this one's, points */
    double margin_loss_pct;        /* percent of dense's mean margin lost */
    double kv_percent;             /* KV bytes held, percent of dense's */
    double saving_points;          /* 100 * FLOPs skipped + (100 - kv_percent) */
    int within, chosen;            /* within the budget; the method's pick */
} oc_calib_cand;

typedef struct oc_calib_greedy_step {
    int32_t cand;                  /* index into cand[] */
    double ratio;                  /* saving per point of loss (floored at one answer) */
    oc_calib_val val;              /* the plan so far with it (zero when not tried) */
    int kept;
    unsigned conflict;             /* not tried: the method whose head patterns the stack holds */
} oc_calib_greedy_step;

typedef struct oc_calib_frontier {
    oc_calib_val dense;
    int32_t n_cand;
    oc_calib_cand cand[OC_CALIB_FRONTIER_MAX_CAND];
    int32_t n_steps;
    oc_calib_greedy_step step[8];  /* one per method picked, in the greedy order */
    oc_calib_val final;            /* the combined plan (dense's when nothing was kept) */
    int32_t n_validations;
    double max_loss_points;
} oc_calib_frontier;

/* "blindsight", "sparsemm", "qcache", "zipvl", "vision", "mminference" for a calib.h OC_CALIB_* bit;
 * "?" for anything else. */
const char *oc_calib_method_name(unsigned method);

/* Adds a candidate (plan borrowed until the run is done). Returns 0 when the frontier is full. */
int oc_calib_frontier_add(oc_calib_frontier *f, unsigned method, const char *label, const oc_plan *plan);

/* Steps 1-4 on f's candidates; out (a plan of the model's shapes) becomes the combined plan.
 * [alloc: the plan copies of the greedy steps] [errors: OC_ERR_INVALID, OC_ERR_NOMEM, validation's] */
oc_status oc_calib_frontier_run(oc_model *model, const oc_calib_budget_params *p, oc_calib_frontier *f, oc_plan *out,
                                oc_error *err);

/* Merges src's sparse sections into dst (ours; a stack src does not cover is left as it is): head patterns other than dense, kv budgets, ZipVL
 * taus and visual scores, lazy groups that overlap none of dst's. Then the composition rules of
 * kvcache/kv_cache.h: a ZipVL layer that has head patterns keeps them ("zipvl-tau T prefill
 * heads": the pattern keeps its prefill saving, ZipVL its KV saving); a lazy group's later layers
 * take its first layer's kv budgets and tau (a group with a layer without tau gets none).
 * [errors: OC_ERR_INVALID (shapes differ)] */
oc_status oc_calib_plan_merge(oc_plan *dst, const oc_plan *src, oc_error *err);

/* A copy of src. [alloc: yes] [errors: OC_ERR_NOMEM] */
oc_status oc_calib_plan_copy(oc_plan **out, const oc_plan *src, oc_error *err);

/* The frontier as text: per method every candidate tried, the pick marked '*', then the greedy
 * steps. */
void oc_calib_frontier_report(const oc_calib_frontier *f, FILE *out);

/* The frontier drawn: saving (points) on x, validation accuracy (%) on y, one series (colour,
 * line through its candidates in saving order) per method, dense as a grey line, the picks ringed,
 * the combined plan a black star. Returns 0, or -1 when out reported an error. */
int oc_calib_frontier_svg(const oc_calib_frontier *f, const char *title, FILE *out);

/* Q-Cache's adjacent-layer JS divergences s[l] = S(l, l+1), l < n_layers - 1, drawn as bars with
 * the epsilon line. Returns 0, or -1 when out reported an error. */
int oc_calib_js_svg(const double *s, int32_t n_layers, double epsilon, const char *title, FILE *out);

#endif /* OC_CALIB_FRONTIER_H */
