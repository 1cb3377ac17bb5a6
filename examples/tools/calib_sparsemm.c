/* calib_sparsemm.c: SparseMM's visual heads and KV budgets (sparsemm.txt Sec. 3.2-3.3, App. A.1).
 * A head scores a hit for a generated token grounded in an image region when the key it attends
 * to most lies in that region (Eq. 3-4, weighted by 1 / region size: small regions are harder to
 * hit); scores are summed within each kv group (GQA shares one cache per group) and normalised.
 * The budgets of Eq. 5-9 are a pure function of the scores, so the plan stores the scores and a
 * new total needs no recalibration. */
#include "tools/calib.h"

#include <math.h>
#include <string.h>

double oc_calib_hit(int32_t argmax_key, const uint8_t *in_region, int32_t n_region) {
    if (n_region <= 0 || argmax_key < 0 || !in_region[argmax_key]) return 0.0;
    return 1.0 / (double)n_region;
}

void oc_calib_kv_scores(const double *head_scores, int32_t n_layers, int32_t n_head, int32_t n_kv_heads,
                        double *out) {
    int32_t rep = n_head / n_kv_heads;
    double total = 0.0;
    for (int32_t l = 0; l < n_layers; l++)
        for (int32_t g = 0; g < n_kv_heads; g++) {
            double s = 0.0;
            for (int32_t r = 0; r < rep; r++) s += head_scores[(size_t)l * n_head + (size_t)(g * rep + r)];
            out[(size_t)l * n_kv_heads + g] = s;
            total += s;
        }
    if (total > 0.0)
        for (size_t i = 0; i < (size_t)n_layers * (size_t)n_kv_heads; i++) out[i] /= total;
}

oc_status oc_calib_kv_budgets(const double *scores, int32_t n, int64_t total_tokens, int32_t w, double rho,
                              int32_t *budgets, oc_error *err) {
    if (n <= 0 || w < 0 || !(rho >= 0.0 && rho <= 1.0))
        return oc_fail(err, OC_ERR_INVALID, "kv budgets: bad arguments");
    if (total_tokens < (int64_t)n * w || total_tokens / n > OC_PLAN_MAX_TOKENS)
        return oc_fail(err, OC_ERR_INVALID, "kv budget of %lld tokens in all: need %lld..%lld for %d kv heads "
                       "(window %d each)", (long long)total_tokens, (long long)n * w,
                       (long long)n * OC_PLAN_MAX_TOKENS, n, w);
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += scores[i] > 0.0 ? scores[i] : 0.0;
    double remain1 = (double)(total_tokens - (int64_t)n * w);   /* Eq. 5 */
    double r = rho * remain1 / n;                                 /* Eq. 6 */
    double remain2 = remain1 - rho * remain1;                     /* Eq. 7 */
    int64_t given = 0;
    for (int32_t i = 0; i < n; i++) {
        double share = sum > 0.0 ? (scores[i] > 0.0 ? scores[i] : 0.0) / sum : 1.0 / n;
        double b = (double)w + r + remain2 * share;               /* Eq. 8-9 */
        budgets[i] = (int32_t)floor(b);
        given += budgets[i];
    }
    /* whole tokens: hand out what flooring left, largest fractional part first */
    while (given < total_tokens) {
        int32_t best = -1;
        double best_frac = -1.0;
        for (int32_t i = 0; i < n; i++) {
            double share = sum > 0.0 ? (scores[i] > 0.0 ? scores[i] : 0.0) / sum : 1.0 / n;
            double b = (double)w + r + remain2 * share, frac = b - floor(b);
            if (budgets[i] == (int32_t)floor(b) && frac > best_frac) {
                best_frac = frac;
                best = i;
            }
        }
        if (best < 0) best = 0;   /* float rounding left more than n tokens: cannot happen past n */
        budgets[best]++;
        given++;
    }
    return OC_OK;
}

oc_status oc_calib_plan_budgets(oc_plan *plan, int64_t total_tokens, double rho, oc_error *err) {
    oc_stack_plan *s = &plan->stacks[OC_PLAN_DECODER];
    int32_t n = s->shape.n_layers * s->shape.n_kv_heads;
    int any = 0;
    for (int32_t i = 0; i < n; i++) any |= s->visual_score_ppm[i] != 0;
    if (!any) return oc_fail(err, OC_ERR_INVALID, "kv budgets: the plan holds no visual scores (calibrate with sparsemm)");
    size_t bytes = sizeof(double) * (size_t)n;
    double *scores = oc_mem_alloc(&plan->alloc, bytes);
    if (!scores) return oc_fail(err, OC_ERR_NOMEM, "kv budgets: out of memory");
    for (int32_t i = 0; i < n; i++) scores[i] = (double)s->visual_score_ppm[i] / OC_PLAN_PPM;
    oc_status st = oc_calib_kv_budgets(scores, n, total_tokens, plan->kv_window_tokens, rho, s->kv_budget_tokens, err);
    oc_mem_free(&plan->alloc, scores, bytes);
    return st;
}
