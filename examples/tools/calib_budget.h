/* calib_budget.h: the accuracy budget of `ocellus calibrate --val-items N --max-loss P`.
 *
 * OURS, not any paper's. The papers' algorithms (calib_*.c) still generate the plan; this step
 * only takes sparsity away from it. It validates the plan on answers, on scenes of a seed of its own:
 *  1. dense and the calibrated plan on the validation items: accuracy and the mean margin of the
 *     first answer token (its logit minus the runner-up's, at the last prompt position);
 *  2. within the budget when the plan loses at most P points of accuracy and at most P percent
 *     of dense's mean margin: done;
 *  3. else each decoder layer that the plan makes sparse, alone (every other layer dense): its loss;
 *  4. layers go back to dense, the largest solo loss first (ties: larger margin loss, then lower
 *     layer), re-validating the whole plan after each, until it is within the budget. With every
 *     layer dense the plan is dense attention: the budget holds by construction.
 *  5. with heads set, the head phase: in each layer backed off, each unit the calibration made
 *     sparse (a query head's pattern, a kv head's budget, the layer's ZipVL tau) is restored alone
 *     on top of the plan and kept when the plan stays within the budget (one validation each), so
 *     a layer where only some heads lose keeps the others sparse.
 * A layer "made sparse" is any of: a head pattern other than dense, a SparseMM kv budget, a ZipVL
 * tau, a Q-Cache lazy group over it (dropped whole when one of its layers goes dense). The vision
 * stack is left as calibrated. Why layers: the long model's losses sit in a few layers, and each
 * layer alone carries them (docs/sparsity-findings.md).
 *
 * The validation scenes are the demo suite's (scene.h) or the long suite's (scene_long.h), of the
 * seed oc_calib_val_seed derives:
 * never the calibration seed, nor an `ocellus eval` default, nor an evaluation stream used before. */
#ifndef OC_CALIB_BUDGET_H
#define OC_CALIB_BUDGET_H

#include <stdio.h>

#include "ocellus.h"
#include "plan/plan.h"

/* The validation seed for calibration seed s: a fixed mix of s, in [10^7, 2^31), and never one of
 * the streams listed in calib_budget.c (eval's 1000001, the calibration's 2000002, the validation
 * and evaluation streams 3000003, 4000004) nor s itself. */
uint64_t oc_calib_val_seed(uint64_t calib_seed);

/* The most item workers one validation runs (--val-jobs). */
#define OC_CALIB_MAX_VAL_JOBS 64

typedef struct oc_calib_budget_params {
    double max_loss_points;      /* accuracy points (and % of dense's mean margin) the plan may lose */
    int64_t n_items;             /* validation items */
    uint64_t seed;               /* validation seed (oc_calib_val_seed) */
    int long_suite;              /* 0: the demo suite's scenes (scene.h); 1: the long suite's
                                  * (scene_long.h: 8..max_images images of 224-448 px, every question
                                  * type, the whole prompt in one prefill call as eval --prefill-chunk all) */
    int32_t min_images, max_images, side_px;   /* the validation scenes (demo: as the calibration's;
                                  * long: max_images only, >= 8) */
    int heads;                   /* 1: then the head phase (below) */
    int n_threads;
    const char *tmp_plan_path;   /* where each candidate plan is written for its context */
    FILE *log;                   /* one line per validation; may be NULL */
    oc_backend_choice backend;   /* where the validations run (default 0: the CPU); the calibration
                                  * pass that gathers statistics is not affected */
    const char *device;          /* OpenCL device (index or name substring; NULL: the first GPU) */
    int jobs;                    /* long suite: item workers, each with its own context and
                                  * n_threads / jobs threads (at least 1); 0 or 1: one. Each item's
                                  * result is merged in item order, so the numbers equal one
                                  * worker's (a context's answer depends on nothing but its item) */
} oc_calib_budget_params;

typedef struct oc_calib_val {
    int64_t n_items, n_correct;
    double mean_margin;          /* first answer token, logits */
    double prefill_skipped;      /* attention FLOPs skipped, fraction of all (demo suite: vision and
                                  * decoder; long suite: the decoder's prefill) */
    double kv_bytes;             /* mean KV cache bytes held at the end of an item (oc_stats.kv_bytes) */
} oc_calib_val;

/* Validates plan (NULL: dense attention) on p's items: one eval run of p->n_items.
 * [errors: plan file, context and oc_ask errors] */
oc_status oc_calib_validate(oc_model *model, const oc_plan *plan, const oc_calib_budget_params *p, oc_calib_val *out,
                            oc_error *err);

typedef struct oc_calib_budget_result {
    oc_calib_val dense, calibrated, final;
    int32_t n_validations;
    int32_t n_backed_off;                       /* layers made dense */
    int32_t backed_off[OC_PLAN_MAX_LAYERS];     /* in the order they went dense */
    int32_t n_restored;                         /* units the head phase gave back */
    double solo_loss_points[OC_PLAN_MAX_LAYERS];   /* step 3 (0 where not measured) */
} oc_calib_budget_result;

/* Is v within the budget against dense d? (Accuracy loss <= P points and mean margin >= dense's
 * minus P percent of it.) */
int oc_calib_within_budget(const oc_calib_val *d, const oc_calib_val *v, double max_loss_points);

/* Runs steps 1-4 on plan (changed in place: backed-off layers become dense).
 * [errors: OC_ERR_INVALID, OC_ERR_NOMEM, plan file and oc_ask errors] */
oc_status oc_calib_budget(oc_model *model, oc_plan *plan, const oc_calib_budget_params *p,
                          oc_calib_budget_result *out, oc_error *err);

#endif /* OC_CALIB_BUDGET_H */
