/* calib_budget.c: the accuracy budget of `ocellus calibrate` (calib_budget.h; ours, not a paper's). */
#include "tools/calib_budget.h"
#include "port.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/scene_eval.h"
#include "tools/long_run.h"
#include "tools/scene_long.h"

/* Streams the validation seed must never be: `ocellus eval`'s default (1000001), the calibration
 * default (2000002), and the validation and evaluation streams earlier measurements used (3000003,
 * 4000004: examples/plans/README.md, docs/sparsity-findings.md). */
static const uint64_t taken_seeds[] = { 1000001u, 2000002u, 3000003u, 4000004u };

static uint64_t mix64(uint64_t x) {   /* splitmix64's finalizer */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t oc_calib_val_seed(uint64_t calib_seed) {
    uint64_t x = calib_seed ^ 0x76616c6964617465ull;   /* "validate" */
    for (;;) {
        x = mix64(x);
        uint64_t s = 10000000u + x % (2147483648u - 10000000u);
        int taken = s == calib_seed;
        for (size_t i = 0; i < sizeof taken_seeds / sizeof taken_seeds[0]; i++) taken |= s == taken_seeds[i];
        if (!taken) return s;
    }
}

int oc_calib_within_budget(const oc_calib_val *d, const oc_calib_val *v, double max_loss_points) {
    double acc_d = d->n_items ? 100.0 * (double)d->n_correct / (double)d->n_items : 0.0;
    double acc_v = v->n_items ? 100.0 * (double)v->n_correct / (double)v->n_items : 0.0;
    /* a margin budget in percent of dense's mean margin; a dense mean <= 0 puts no bound on it */
    double margin_floor = d->mean_margin > 0 ? d->mean_margin * (1.0 - max_loss_points / 100.0) : -INFINITY;
    return acc_d - acc_v <= max_loss_points + 1e-9 && v->mean_margin >= margin_floor - 1e-9;
}

/* ---- one validation ----------------------------------------------------------------------------- */

static double first_token_margin(const oc_context *ctx);

typedef struct margin_sum {
    const oc_context *ctx;
    double sum;
} margin_sum;

static void on_item(void *user, const oc_scene_eval_report *r) {
    (void)r;
    margin_sum *m = user;
    m->sum += first_token_margin(m->ctx);
}

/* The first answer token's margin: the largest logit at the last prompt position minus the
 * runner-up (0 when the context kept no logits). */
static double first_token_margin(const oc_context *ctx) {
    int32_t n = 0;
    const float *lg = oc_context_prompt_logits(ctx, &n);
    float a = -INFINITY, b = -INFINITY;
    for (int32_t t = 0; lg && t < n; t++) {
        if (lg[t] > a) { b = a; a = lg[t]; }
        else if (lg[t] > b) b = lg[t];
    }
    return lg && n >= 2 ? (double)a - (double)b : 0.0;
}

/* One long item's result, kept per item so that workers' results merge in item order. */
typedef struct long_item_result {
    double margin;
    uint64_t kept, skipped;
    double kv_bytes;
    int correct;
} long_item_result;

/* One worker of the long suite's validation: its own context, items first, first + stride, ...
 * (cmd_eval_long.c's loop, without its reporting). */
typedef struct long_worker {
    oc_model *model;
    const oc_context_params *cp;
    const oc_calib_budget_params *p;
    int64_t first, stride;
    long_item_result *res;   /* [p->n_items], this worker's items written */
    oc_status st;
    oc_error err;
} long_worker;

static void *long_worker_run(void *arg) {
    long_worker *w = arg;
    const oc_calib_budget_params *p = w->p;
    int32_t max_images = p->max_images < OC_LONG_MIN_IMAGES ? OC_LONG_MIN_IMAGES : p->max_images;
    size_t rgb_bytes = oc_long_run_rgb_bytes(max_images);
    oc_context *ctx = NULL;
    uint8_t *rgb = malloc(rgb_bytes);
    if (!rgb) {
        w->st = oc_fail(&w->err, OC_ERR_NOMEM, "calibrate budget: out of memory for %zu bytes of pixels", rgb_bytes);
        return NULL;
    }
    if ((w->st = oc_context_open(&ctx, w->model, w->cp, &w->err))) {
        free(rgb);
        return NULL;
    }
    /* oc_long_run_item: eval --suite long's own item (its answer length, its check) */
    oc_long_run *run = malloc(sizeof *run);
    if (!run) w->st = oc_fail(&w->err, OC_ERR_NOMEM, "calibrate budget: out of memory for an item");
    for (int64_t i = w->first; i < p->n_items && !w->st; i += w->stride) {
        if ((w->st = oc_long_run_item(ctx, p->seed, (uint64_t)i, max_images, 0, rgb, run, &w->err))) break;
        const oc_stats *s = &run->stats;
        w->res[i] = (long_item_result){ first_token_margin(ctx), s->attn_prefill_flops_kept, s->attn_prefill_flops_skipped,
                                        (double)s->kv_bytes, run->correct };
    }
    free(run);
    oc_context_close(ctx);
    free(rgb);
    return NULL;
}

/* The long suite's items on p->jobs workers (one in the calling thread when jobs <= 1), merged in
 * item order: the sums are the same whatever the number of workers. */
static oc_status validate_long(oc_model *model, const oc_context_params *cp, const oc_calib_budget_params *p,
                               oc_calib_val *out, oc_error *err) {
    int jobs = p->jobs > 1 ? p->jobs : 1;
    if (jobs > p->n_items) jobs = p->n_items > 0 ? (int)p->n_items : 1;
    if (jobs > OC_CALIB_MAX_VAL_JOBS) jobs = OC_CALIB_MAX_VAL_JOBS;
    long_item_result *res = calloc(p->n_items > 0 ? (size_t)p->n_items : 1, sizeof *res);
    long_worker w[OC_CALIB_MAX_VAL_JOBS];
    oc_port_thread th[OC_CALIB_MAX_VAL_JOBS];
    int started[OC_CALIB_MAX_VAL_JOBS] = { 0 };
    if (!res) return oc_fail(err, OC_ERR_NOMEM, "calibrate budget: out of memory for %lld item results", (long long)p->n_items);
    oc_context_params wcp = *cp;
    if (jobs > 1) wcp.n_threads = cp->n_threads / jobs > 1 ? cp->n_threads / jobs : 1;
    for (int j = 0; j < jobs; j++) {
        w[j] = (long_worker){ model, &wcp, p, j, jobs, res, OC_OK, { 0 } };
        if (j > 0) started[j] = !oc_port_thread_start(&th[j], long_worker_run, &w[j]);
        if (j > 0 && !started[j]) w[j].st = oc_fail(&w[j].err, OC_ERR_NOMEM, "calibrate budget: cannot start a worker thread");
    }
    long_worker_run(&w[0]);
    oc_status st = OC_OK;
    for (int j = 0; j < jobs; j++) {
        if (started[j]) oc_port_thread_join(&th[j]);
        if (w[j].st && !st) {   /* the lowest worker's error: the same message however the threads ran */
            st = w[j].st;
            if (err) *err = w[j].err;
        }
    }
    double margin = 0.0;
    uint64_t kept = 0, skipped = 0;
    for (int64_t i = 0; i < p->n_items && !st; i++) {
        out->n_items++;
        out->n_correct += res[i].correct;
        margin += res[i].margin;
        kept += res[i].kept;
        skipped += res[i].skipped;
        out->kv_bytes += res[i].kv_bytes;
    }
    free(res);
    out->mean_margin = out->n_items ? margin / (double)out->n_items : 0.0;
    if (out->n_items) out->kv_bytes /= (double)out->n_items;
    out->prefill_skipped = kept + skipped ? (double)skipped / (double)(kept + skipped) : 0.0;
    return st;
}

oc_status oc_calib_validate(oc_model *model, const oc_plan *plan, const oc_calib_budget_params *p, oc_calib_val *out,
                            oc_error *err) {
    memset(out, 0, sizeof *out);
    oc_status st;
    if (plan && (st = oc_plan_write_file(plan, p->tmp_plan_path, err))) return st;
    oc_context_params cp;
    oc_context_params_default(&cp);
    if (p->long_suite) {   /* as cmd_eval_long.c sizes it, the whole prompt in one prefill call */
        int32_t max_images = p->max_images < OC_LONG_MIN_IMAGES ? OC_LONG_MIN_IMAGES : p->max_images;
        int32_t per_image = (OC_LONG_MAX_SIDE_PX / OC_SCENE_CELL_PX) * (OC_LONG_MAX_SIDE_PX / OC_SCENE_CELL_PX);
        cp.max_images = max_images;
        cp.max_context_tokens = max_images * (per_image + 10) + 512;
        if (cp.max_image_tokens < per_image) cp.max_image_tokens = per_image;
        if (cp.min_image_tokens > 64) cp.min_image_tokens = 64;
        cp.batch_tokens = cp.max_context_tokens;
    } else {
        oc_scene_eval_context_params(&cp, p->max_images, p->side_px);
    }
    cp.n_threads = p->n_threads;
    cp.plan_path = plan ? p->tmp_plan_path : NULL;
    cp.backend = p->backend;
    cp.device = p->device;
    if (p->long_suite) return validate_long(model, &cp, p, out, err);
    oc_context *ctx = NULL;
    if ((st = oc_context_open(&ctx, model, &cp, err))) return st;
    oc_scene_eval_params ep;
    oc_scene_eval_params_default(&ep);
    ep.seed = p->seed;
    ep.n_items = p->n_items;
    ep.min_images = p->min_images;
    ep.max_images = p->max_images;
    ep.side_px = p->side_px;
    margin_sum m = { ctx, 0.0 };
    ep.on_item = on_item;
    ep.user = &m;
    oc_scene_eval_result r;
    st = oc_scene_eval(ctx, &ep, &r, err);
    oc_context_close(ctx);
    if (st) return st;
    out->n_items = r.n_items;
    out->n_correct = r.n_correct;
    out->mean_margin = r.n_items ? m.sum / (double)r.n_items : 0.0;
    out->kv_bytes = r.n_items ? r.kv_bytes_sum / (double)r.n_items : 0.0;
    uint64_t all = r.attn_flops_kept + r.attn_flops_skipped;
    out->prefill_skipped = all ? (double)r.attn_flops_skipped / (double)all : 0.0;
    return OC_OK;
}

static void log_val(const oc_calib_budget_params *p, const char *what, const oc_calib_val *v, const oc_calib_val *d) {
    if (!p->log) return;
    fprintf(p->log, "budget: %-28s %lld/%lld right (%+.1f points vs dense), mean margin %.3f, %.1f%% of attention skipped\n",
            what, (long long)v->n_correct, (long long)v->n_items,
            d && v->n_items ? 100.0 * ((double)v->n_correct - (double)d->n_correct) / (double)v->n_items : 0.0,
            v->mean_margin, 100.0 * v->prefill_skipped);
}

/* ---- the decoder's layers: kept as calibrated, or dense ----------------------------------------- */

typedef struct saved_stack {
    oc_head_pattern *heads;
    int32_t *kv, *tau;
    oc_lazy_group *groups;
    int32_t n_groups;
} saved_stack;

static void saved_free(saved_stack *s) {
    free(s->heads);
    free(s->kv);
    free(s->tau);
    free(s->groups);
}

static oc_status save(const oc_stack_plan *d, saved_stack *s, oc_error *err) {
    int32_t L = d->shape.n_layers, H = d->shape.n_heads, G = d->shape.n_kv_heads;
    memset(s, 0, sizeof *s);
    s->heads = malloc((size_t)L * (size_t)H * sizeof *s->heads);
    s->kv = malloc((size_t)L * (size_t)G * sizeof *s->kv);
    s->tau = malloc((size_t)L * sizeof *s->tau);
    s->groups = malloc((size_t)(d->n_lazy_groups > 0 ? d->n_lazy_groups : 1) * sizeof *s->groups);
    if (!s->heads || !s->kv || !s->tau || !s->groups) {
        saved_free(s);
        return oc_fail(err, OC_ERR_NOMEM, "calibrate budget: out of memory for a copy of the plan");
    }
    memcpy(s->heads, d->heads, (size_t)L * (size_t)H * sizeof *s->heads);
    memcpy(s->kv, d->kv_budget_tokens, (size_t)L * (size_t)G * sizeof *s->kv);
    memcpy(s->tau, d->zipvl_tau_ppm, (size_t)L * sizeof *s->tau);
    memcpy(s->groups, d->lazy_groups, (size_t)d->n_lazy_groups * sizeof *s->groups);
    s->n_groups = d->n_lazy_groups;
    return OC_OK;
}

/* Units of a layer for the head phase: its H query heads' patterns, its G kv heads' budgets, its
 * ZipVL tau (in that order). */
static int32_t units_per_layer(const oc_stack_plan *d) { return d->shape.n_heads + d->shape.n_kv_heads + 1; }

/* Layer l as calibrated (keep[l]) or dense, except the units restored in a dense layer (unit,
 * [layer][units_per_layer], may be NULL); a lazy group stays only when all its layers are kept. */
static void apply(oc_stack_plan *d, const saved_stack *s, const unsigned char *keep, const unsigned char *unit) {
    int32_t L = d->shape.n_layers, H = d->shape.n_heads, G = d->shape.n_kv_heads, U = units_per_layer(d);
    for (int32_t l = 0; l < L; l++) {
        const unsigned char *u = unit ? unit + (size_t)l * (size_t)U : NULL;
        for (int32_t h = 0; h < H; h++) {
            size_t i = (size_t)l * (size_t)H + (size_t)h;
            if (keep[l] || (u && u[h])) d->heads[i] = s->heads[i];
            else memset(&d->heads[i], 0, sizeof d->heads[i]);   /* OC_PATTERN_DENSE = 0 */
        }
        for (int32_t g = 0; g < G; g++) {
            size_t i = (size_t)l * (size_t)G + (size_t)g;
            d->kv_budget_tokens[i] = keep[l] || (u && u[H + g]) ? s->kv[i] : OC_PLAN_KV_FULL;
        }
        d->zipvl_tau_ppm[l] = keep[l] || (u && u[H + G]) ? s->tau[l] : 0;
    }
    d->n_lazy_groups = 0;
    for (int32_t k = 0; k < s->n_groups; k++) {
        int all = 1;
        for (int32_t l = s->groups[k].first_layer; l <= s->groups[k].last_layer; l++) all &= keep[l] != 0;
        if (all) d->lazy_groups[d->n_lazy_groups++] = s->groups[k];
    }
}

/* Is unit j of layer l (units_per_layer's order) sparse as calibrated? */
static int unit_sparse(const oc_stack_plan *d, const saved_stack *s, int32_t l, int32_t j) {
    int32_t H = d->shape.n_heads, G = d->shape.n_kv_heads;
    if (j < H) return s->heads[(size_t)l * (size_t)H + (size_t)j].kind != OC_PATTERN_DENSE;
    if (j < H + G) return s->kv[(size_t)l * (size_t)G + (size_t)(j - H)] != OC_PLAN_KV_FULL;
    return s->tau[l] != 0;
}

/* Does the calibrated plan make layer l sparse? */
static int layer_sparse(const oc_stack_plan *d, const saved_stack *s, int32_t l) {
    int32_t H = d->shape.n_heads, G = d->shape.n_kv_heads;
    for (int32_t h = 0; h < H; h++)
        if (s->heads[(size_t)l * (size_t)H + (size_t)h].kind != OC_PATTERN_DENSE) return 1;
    for (int32_t g = 0; g < G; g++)
        if (s->kv[(size_t)l * (size_t)G + (size_t)g] != OC_PLAN_KV_FULL) return 1;
    if (s->tau[l]) return 1;
    for (int32_t k = 0; k < s->n_groups; k++)
        if (l >= s->groups[k].first_layer && l <= s->groups[k].last_layer) return 1;
    return 0;
}

oc_status oc_calib_budget(oc_model *model, oc_plan *plan, const oc_calib_budget_params *p,
                          oc_calib_budget_result *out, oc_error *err) {
    memset(out, 0, sizeof *out);
    if (!p->tmp_plan_path || p->n_items < 1 || !(p->max_loss_points >= 0))
        return oc_fail(err, OC_ERR_INVALID, "calibrate budget: need >= 1 validation item and a max loss >= 0");
    oc_stack_plan *d = &plan->stacks[OC_PLAN_DECODER];
    int32_t L = d->shape.n_layers;
    if (L < 1 || L > OC_PLAN_MAX_LAYERS) return oc_fail(err, OC_ERR_INVALID, "calibrate budget: %d decoder layers", (int)L);
    oc_status st;
    if ((st = oc_calib_validate(model, NULL, p, &out->dense, err))) return st;
    log_val(p, "dense", &out->dense, NULL);
    if ((st = oc_calib_validate(model, plan, p, &out->calibrated, err))) return st;
    out->n_validations = 2;
    log_val(p, "calibrated plan", &out->calibrated, &out->dense);
    out->final = out->calibrated;
    if (oc_calib_within_budget(&out->dense, &out->calibrated, p->max_loss_points)) return OC_OK;

    saved_stack s;
    if ((st = save(d, &s, err))) return st;
    unsigned char keep[OC_PLAN_MAX_LAYERS];
    int32_t order[OC_PLAN_MAX_LAYERS], n_sparse = 0;
    double margin_loss[OC_PLAN_MAX_LAYERS] = { 0 };
    /* step 3: each sparse layer alone */
    for (int32_t l = 0; l < L && !st; l++) {
        if (!layer_sparse(d, &s, l)) continue;
        memset(keep, 0, (size_t)L);
        keep[l] = 1;
        apply(d, &s, keep, NULL);
        oc_calib_val v;
        if ((st = oc_calib_validate(model, plan, p, &v, err))) break;
        out->n_validations++;
        out->solo_loss_points[l] = v.n_items ? 100.0 * ((double)out->dense.n_correct - (double)v.n_correct) / (double)v.n_items : 0.0;
        margin_loss[l] = out->dense.mean_margin - v.mean_margin;
        char what[48];
        snprintf(what, sizeof what, "layer %d alone", (int)l);
        log_val(p, what, &v, &out->dense);
        order[n_sparse++] = l;
    }
    /* step 4: largest solo loss first (insertion sort: at most OC_PLAN_MAX_LAYERS) */
    for (int32_t i = 1; i < n_sparse; i++)
        for (int32_t j = i; j > 0; j--) {
            int32_t a = order[j - 1], b = order[j];
            int later = out->solo_loss_points[b] > out->solo_loss_points[a] ||
                        (out->solo_loss_points[b] == out->solo_loss_points[a] && margin_loss[b] > margin_loss[a]);
            if (!later) break;
            order[j - 1] = b;
            order[j] = a;
        }
    for (int32_t l = 0; l < L; l++) keep[l] = 1;
    for (int32_t i = 0; i < n_sparse && !st; i++) {
        keep[order[i]] = 0;
        out->backed_off[out->n_backed_off++] = order[i];
        apply(d, &s, keep, NULL);
        /* with every decoder layer dense the decoder is dense attention; only a calibrated vision
         * stack can then still lose (it is not backed off: calib_budget.h) */
        if ((st = oc_calib_validate(model, plan, p, &out->final, err))) break;
        out->n_validations++;
        char what[48];
        snprintf(what, sizeof what, "layer %d dense", (int)order[i]);
        log_val(p, what, &out->final, &out->dense);
        if (oc_calib_within_budget(&out->dense, &out->final, p->max_loss_points)) break;
    }
    /* the head phase: in each layer backed off, each sparse unit (a head's pattern, a kv head's
     * budget, the layer's tau) restored alone on top of the plan, kept when it stays within */
    unsigned char *unit = NULL;
    int32_t U = units_per_layer(d);
    if (!st && p->heads && out->n_backed_off > 0 && oc_calib_within_budget(&out->dense, &out->final, p->max_loss_points)) {
        unit = calloc((size_t)L * (size_t)U, 1);
        if (!unit) st = oc_fail(err, OC_ERR_NOMEM, "calibrate budget: out of memory for the head phase");
        for (int32_t i = 0; i < out->n_backed_off && !st; i++) {
            int32_t l = out->backed_off[i];
            for (int32_t j = 0; j < U && !st; j++) {
                if (!unit_sparse(d, &s, l, j)) continue;
                unit[(size_t)l * (size_t)U + (size_t)j] = 1;
                apply(d, &s, keep, unit);
                oc_calib_val v;
                if ((st = oc_calib_validate(model, plan, p, &v, err))) break;
                out->n_validations++;
                int ok = oc_calib_within_budget(&out->dense, &v, p->max_loss_points);
                char what[48];
                snprintf(what, sizeof what, "layer %d %s %d %s", (int)l,
                         j < d->shape.n_heads ? "head" : j < U - 1 ? "kv head" : "tau",
                         (int)(j < d->shape.n_heads ? j : j < U - 1 ? j - d->shape.n_heads : 0), ok ? "kept" : "dense");
                log_val(p, what, &v, &out->dense);
                if (ok) {
                    out->final = v;
                    out->n_restored++;
                } else {
                    unit[(size_t)l * (size_t)U + (size_t)j] = 0;
                }
            }
        }
        apply(d, &s, keep, unit);
    }
    free(unit);
    if (st) {   /* leave the plan as calibrated */
        for (int32_t l = 0; l < L; l++) keep[l] = 1;
        apply(d, &s, keep, NULL);
    }
    saved_free(&s);
    return st;
}
