/* calib_frontier.c: the frontier and the greedy combined plan of `ocellus calibrate --search greedy`
 * (calib_frontier.h; ours, not a paper's). */
#include "tools/calib_frontier.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/calib.h"

const char *oc_calib_method_name(unsigned m) {
    switch (m) {
    case OC_CALIB_BLINDSIGHT: return "blindsight";
    case OC_CALIB_SPARSEMM: return "sparsemm";
    case OC_CALIB_QCACHE: return "qcache";
    case OC_CALIB_ZIPVL: return "zipvl";
    case OC_CALIB_VISION: return "vision";
    case OC_CALIB_MMINFERENCE: return "mminference";
    default: return "?";
    }
}

int oc_calib_frontier_add(oc_calib_frontier *f, unsigned method, const char *label, const oc_plan *plan) {
    if (f->n_cand >= OC_CALIB_FRONTIER_MAX_CAND) return 0;
    oc_calib_cand *c = &f->cand[f->n_cand++];
    memset(c, 0, sizeof *c);
    c->method = method;
    snprintf(c->label, sizeof c->label, "%s", label);
    c->plan = plan;
    return 1;
}

/* ---- plans -------------------------------------------------------------------------------------- */

oc_status oc_calib_plan_copy(oc_plan **out, const oc_plan *src, oc_error *err) {
    const oc_stack_plan *d = &src->stacks[OC_PLAN_DECODER], *v = &src->stacks[OC_PLAN_VISION];
    oc_status st = oc_plan_create(out, &d->shape, v->shape.n_layers ? &v->shape : NULL, NULL, err);
    if (st) return st;
    oc_plan *p = *out;
    p->sink_fraction_ppm = src->sink_fraction_ppm;
    p->kv_window_tokens = src->kv_window_tokens;
    memcpy(p->calibration, src->calibration, sizeof p->calibration);
    for (int s = 0; s < OC_PLAN_N_STACKS; s++) {
        const oc_stack_plan *a = &src->stacks[s];
        oc_stack_plan *b = &p->stacks[s];
        size_t L = (size_t)a->shape.n_layers, LH = L * (size_t)a->shape.n_heads, LG = L * (size_t)a->shape.n_kv_heads;
        if (!L) continue;
        memcpy(b->heads, a->heads, LH * sizeof *a->heads);
        if (a->kv_budget_tokens) memcpy(b->kv_budget_tokens, a->kv_budget_tokens, LG * sizeof *a->kv_budget_tokens);
        if (a->visual_score_ppm) memcpy(b->visual_score_ppm, a->visual_score_ppm, LG * sizeof *a->visual_score_ppm);
        if (a->zipvl_tau_ppm) memcpy(b->zipvl_tau_ppm, a->zipvl_tau_ppm, L * sizeof *a->zipvl_tau_ppm);
        if (a->zipvl_heads_prefill) memcpy(b->zipvl_heads_prefill, a->zipvl_heads_prefill, L);
        memcpy(b->lazy_groups, a->lazy_groups, (size_t)a->n_lazy_groups * sizeof *a->lazy_groups);
        b->n_lazy_groups = a->n_lazy_groups;
    }
    return OC_OK;
}

oc_status oc_calib_plan_merge(oc_plan *dst, const oc_plan *src, oc_error *err) {
    for (int s = 0; s < OC_PLAN_N_STACKS; s++) {   /* a stack src does not cover is dense there */
        const oc_plan_shape *a = &dst->stacks[s].shape, *b = &src->stacks[s].shape;
        if (b->n_layers && (a->n_layers != b->n_layers || a->n_heads != b->n_heads || a->n_kv_heads != b->n_kv_heads))
            return oc_fail(err, OC_ERR_INVALID, "calibrate: merging plans of different %s shapes", oc_plan_stack_name(s));
    }
    dst->sink_fraction_ppm = src->sink_fraction_ppm;
    dst->kv_window_tokens = src->kv_window_tokens;
    for (int s = 0; s < OC_PLAN_N_STACKS; s++) {
        const oc_stack_plan *a = &src->stacks[s];
        oc_stack_plan *b = &dst->stacks[s];
        int32_t L = a->shape.n_layers, H = a->shape.n_heads, G = a->shape.n_kv_heads;
        if (!L) continue;
        for (size_t i = 0; i < (size_t)L * (size_t)H; i++)
            if (a->heads[i].kind != OC_PATTERN_DENSE) b->heads[i] = a->heads[i];
        for (size_t i = 0; a->kv_budget_tokens && i < (size_t)L * (size_t)G; i++) {
            if (a->kv_budget_tokens[i] != OC_PLAN_KV_FULL) b->kv_budget_tokens[i] = a->kv_budget_tokens[i];
            if (a->visual_score_ppm[i]) b->visual_score_ppm[i] = a->visual_score_ppm[i];
        }
        for (int32_t l = 0; a->zipvl_tau_ppm && l < L; l++)
            if (a->zipvl_tau_ppm[l]) {
                b->zipvl_tau_ppm[l] = a->zipvl_tau_ppm[l];
                b->zipvl_heads_prefill[l] = a->zipvl_heads_prefill[l];
            }
        for (int32_t k = 0; k < a->n_lazy_groups; k++) {
            const oc_lazy_group *g = &a->lazy_groups[k];
            int overlaps = 0;
            for (int32_t j = 0; j < b->n_lazy_groups; j++)
                overlaps |= b->lazy_groups[j].first_layer <= g->last_layer && g->first_layer <= b->lazy_groups[j].last_layer;
            oc_status st;
            if (!overlaps && (st = oc_plan_add_lazy_group(dst, (oc_plan_stack)s, g->first_layer, g->last_layer, g->mode, err)))
                return st;
        }
        if (s != OC_PLAN_DECODER) continue;
        /* the composition rules (kvcache/kv_cache.h): a ZipVL layer with head patterns prefills as
         * they say and ZipVL keeps its set after it ("prefill heads", ours) */
        for (int32_t l = 0; l < L; l++) {
            int patterned = 0;
            for (int32_t h = 0; h < H; h++) patterned |= b->heads[(size_t)l * (size_t)H + (size_t)h].kind != OC_PATTERN_DENSE;
            if (b->zipvl_tau_ppm[l] && patterned) b->zipvl_heads_prefill[l] = 1;
        }
        /* a lazy layer holds exactly its first layer's tokens: the same budgets and tau */
        for (int32_t k = 0; k < b->n_lazy_groups; k++) {
            const oc_lazy_group *g = &b->lazy_groups[k];
            int any_off = 0;
            for (int32_t l = g->first_layer; l <= g->last_layer; l++) any_off |= b->zipvl_tau_ppm[l] == 0;
            for (int32_t l = g->first_layer; l <= g->last_layer; l++) {
                if (l > g->first_layer)
                    memcpy(b->kv_budget_tokens + (size_t)l * (size_t)G, b->kv_budget_tokens + (size_t)g->first_layer * (size_t)G,
                           sizeof(int32_t) * (size_t)G);
                b->zipvl_tau_ppm[l] = any_off ? 0 : b->zipvl_tau_ppm[g->first_layer];
                b->zipvl_heads_prefill[l] = any_off ? 0 : b->zipvl_heads_prefill[g->first_layer];
            }
        }
    }
    return OC_OK;
}

/* Is the plan dense attention (nothing sparse in either stack)? */
static int plan_is_dense(const oc_plan *p) {
    for (int s = 0; s < OC_PLAN_N_STACKS; s++) {
        const oc_stack_plan *a = &p->stacks[s];
        int32_t L = a->shape.n_layers, H = a->shape.n_heads, G = a->shape.n_kv_heads;
        if (a->n_lazy_groups) return 0;
        for (size_t i = 0; i < (size_t)L * (size_t)H; i++)
            if (a->heads[i].kind != OC_PATTERN_DENSE) return 0;
        for (size_t i = 0; a->kv_budget_tokens && i < (size_t)L * (size_t)G; i++)
            if (a->kv_budget_tokens[i] != OC_PLAN_KV_FULL) return 0;
        for (int32_t l = 0; a->zipvl_tau_ppm && l < L; l++)
            if (a->zipvl_tau_ppm[l]) return 0;
    }
    return 1;
}

/* Does the plan set head patterns in this stack? */
static int has_heads(const oc_plan *p, int s) {
    const oc_stack_plan *a = &p->stacks[s];
    for (size_t i = 0; i < (size_t)a->shape.n_layers * (size_t)a->shape.n_heads; i++)
        if (a->heads[i].kind != OC_PATTERN_DENSE) return 1;
    return 0;
}

/* ---- the search --------------------------------------------------------------------------------- */

static double accuracy(const oc_calib_val *v) {
    return v->n_items ? 100.0 * (double)v->n_correct / (double)v->n_items : 0.0;
}

static void measure(const oc_calib_frontier *f, oc_calib_cand *c) {
    const oc_calib_val *d = &f->dense;
    c->loss_points = accuracy(d) - accuracy(&c->val);
    c->margin_loss_pct = d->mean_margin > 0 ? 100.0 * (d->mean_margin - c->val.mean_margin) / d->mean_margin : 0.0;
    c->kv_percent = d->kv_bytes > 0 ? 100.0 * c->val.kv_bytes / d->kv_bytes : 100.0;
    c->saving_points = 100.0 * c->val.prefill_skipped + (100.0 - c->kv_percent);
    c->within = oc_calib_within_budget(d, &c->val, f->max_loss_points);
}

static void log_line(const oc_calib_budget_params *p, const char *what, const char *label, const oc_calib_val *v,
                     const oc_calib_val *d) {
    if (!p->log) return;
    fprintf(p->log, "frontier: %-12s %-26s %lld/%lld right (%+.1f points vs dense), mean margin %.3f, %.1f%% of "
                    "attention skipped, KV %.1f%% of dense\n",
            what, label, (long long)v->n_correct, (long long)v->n_items,
            v->n_items ? 100.0 * ((double)v->n_correct - (double)d->n_correct) / (double)v->n_items : 0.0,
            v->mean_margin, 100.0 * v->prefill_skipped, d->kv_bytes > 0 ? 100.0 * v->kv_bytes / d->kv_bytes : 100.0);
    fflush(p->log);
}

oc_status oc_calib_frontier_run(oc_model *model, const oc_calib_budget_params *p, oc_calib_frontier *f, oc_plan *out,
                                oc_error *err) {
    if (!p->tmp_plan_path || p->n_items < 1 || !(p->max_loss_points >= 0))
        return oc_fail(err, OC_ERR_INVALID, "calibrate frontier: need >= 1 validation item and a max loss >= 0");
    f->max_loss_points = p->max_loss_points;
    f->n_steps = 0;
    f->n_validations = 0;
    oc_status st;
    /* 1. dense; 2. each candidate alone */
    if ((st = oc_calib_validate(model, NULL, p, &f->dense, err))) return st;
    f->n_validations++;
    log_line(p, "dense", "", &f->dense, &f->dense);
    for (int32_t i = 0; i < f->n_cand; i++) {
        oc_calib_cand *c = &f->cand[i];
        c->chosen = 0;
        if (plan_is_dense(c->plan)) {
            c->val = f->dense;
            c->validated = 0;
        } else {
            if ((st = oc_calib_validate(model, c->plan, p, &c->val, err))) return st;
            c->validated = 1;
            f->n_validations++;
        }
        measure(f, c);
        log_line(p, oc_calib_method_name(c->method), c->label, &c->val, &f->dense);
    }
    /* 3. per method the pick */
    int32_t pick[8], n_pick = 0;
    for (unsigned bit = 1; bit <= OC_CALIB_MMINFERENCE; bit <<= 1) {
        int32_t best = -1;
        for (int32_t i = 0; i < f->n_cand; i++) {
            const oc_calib_cand *c = &f->cand[i];
            if (c->method != bit || !c->within || !(c->saving_points > 0.0)) continue;
            if (best < 0 || c->saving_points > f->cand[best].saving_points) best = i;
        }
        if (best >= 0) {
            f->cand[best].chosen = 1;
            pick[n_pick++] = best;
        }
    }
    /* 4. in order of saving per point of loss; the loss floored at one validation answer */
    double floor_points = 100.0 / (double)p->n_items;
    for (int32_t i = 0; i < n_pick; i++) {
        const oc_calib_cand *c = &f->cand[pick[i]];
        f->step[i].cand = pick[i];
        f->step[i].ratio = c->saving_points / fmax(c->loss_points, floor_points);
        f->step[i].kept = 0;
    }
    for (int32_t i = 1; i < n_pick; i++)   /* insertion sort, stable: ties keep the methods' bit order */
        for (int32_t j = i; j > 0 && f->step[j].ratio > f->step[j - 1].ratio; j--) {
            oc_calib_greedy_step t = f->step[j];
            f->step[j] = f->step[j - 1];
            f->step[j - 1] = t;
        }
    f->n_steps = n_pick;
    oc_plan *trial = NULL;
    if ((st = oc_calib_plan_copy(&trial, out, err))) return st;   /* out as given: the dense start */
    f->final = f->dense;
    int n_kept = 0;
    unsigned owner[OC_PLAN_N_STACKS] = { 0 };   /* the method whose head patterns each stack holds */
    for (int32_t i = 0; i < n_pick && !st; i++) {
        oc_calib_greedy_step *s = &f->step[i];
        const oc_calib_cand *c = &f->cand[s->cand];
        /* two methods that both choose head patterns (BlindSight, MMInference) do not compose on
         * the same heads: the first in the order keeps them, the other is not tried */
        s->conflict = 0;
        for (int k = 0; k < OC_PLAN_N_STACKS; k++)
            if (owner[k] && owner[k] != c->method && has_heads(c->plan, k)) s->conflict = owner[k];
        if (s->conflict) {
            memset(&s->val, 0, sizeof s->val);
            log_line(p, "skipped", "head patterns taken", &f->final, &f->dense);
            continue;
        }
        if ((st = oc_calib_plan_merge(trial, c->plan, err))) break;
        if (!n_kept) {
            s->val = c->val;   /* alone on a dense plan: validated in step 2 */
        } else {
            if ((st = oc_calib_validate(model, trial, p, &s->val, err))) break;
            f->n_validations++;
        }
        s->kept = oc_calib_within_budget(&f->dense, &s->val, p->max_loss_points);
        char what[24];
        snprintf(what, sizeof what, "+%s", oc_calib_method_name(c->method));
        log_line(p, what, s->kept ? "kept" : "dropped (over the budget)", &s->val, &f->dense);
        if (s->kept) {
            n_kept++;
            for (int k = 0; k < OC_PLAN_N_STACKS; k++)
                if (has_heads(c->plan, k)) owner[k] = c->method;
            f->final = s->val;
            if ((st = oc_calib_plan_merge(out, c->plan, err))) break;
        } else {   /* back to the plan so far */
            oc_plan_free(trial);
            trial = NULL;
            if ((st = oc_calib_plan_copy(&trial, out, err))) break;
        }
    }
    oc_plan_free(trial);
    return st;
}

/* ---- the report and the pictures ---------------------------------------------------------------- */

void oc_calib_frontier_report(const oc_calib_frontier *f, FILE *out) {
    const oc_calib_val *d = &f->dense;
    fprintf(out, "\n## Frontier (ours: validation on answers, budget %g points of accuracy and %g%% of the mean margin)\n"
                 "dense: %lld/%lld right (%.1f%%), mean margin %.3f, KV %.0f bytes per item; %d validations\n"
                 "method       candidate                  right  acc%%   dpts  margin  dmargin%%  skipped%%  KV%%  saving"
                 "  within\n",
            f->max_loss_points, f->max_loss_points, (long long)d->n_correct, (long long)d->n_items, accuracy(d),
            d->mean_margin, d->kv_bytes, (int)f->n_validations);
    for (int32_t i = 0; i < f->n_cand; i++) {
        const oc_calib_cand *c = &f->cand[i];
        fprintf(out, "%-12s %-26s %5lld %6.1f %+6.1f %7.3f %8.2f %9.1f %6.1f %7.1f  %s%s%s\n", oc_calib_method_name(c->method),
                c->label, (long long)c->val.n_correct, accuracy(&c->val), 0.0 - c->loss_points + 0.0, c->val.mean_margin,
                0.0 - c->margin_loss_pct + 0.0, 100.0 * c->val.prefill_skipped, c->kv_percent, c->saving_points,
                c->within ? "yes" : "no", c->chosen ? " *chosen" : "", c->validated ? "" : " (dense attention: not run)");
    }
    for (unsigned bit = 1; bit <= OC_CALIB_MMINFERENCE; bit <<= 1) {
        int any = 0, picked = 0;
        for (int32_t i = 0; i < f->n_cand; i++) {
            any |= f->cand[i].method == bit;
            picked |= f->cand[i].method == bit && f->cand[i].chosen;
        }
        if (any && !picked)
            fprintf(out, "%s: no candidate saves anything within the budget; the method is left out\n", oc_calib_method_name(bit));
    }
    fprintf(out, "\n## Greedy combination (ours): the picks in order of saving per point of loss (floored at one "
                 "answer), each validated with the ones kept before it\n");
    for (int32_t i = 0; i < f->n_steps; i++) {
        const oc_calib_greedy_step *s = &f->step[i];
        const oc_calib_cand *c = &f->cand[s->cand];
        if (s->conflict) {
            fprintf(out, "%d. %s %s: %.1f saving per point -> not tried: its head patterns would replace %s's\n",
                    (int)i + 1, oc_calib_method_name(c->method), c->label, s->ratio, oc_calib_method_name(s->conflict));
            continue;
        }
        fprintf(out, "%d. %s %s: %.1f saving per point -> %lld/%lld right, %.1f%% skipped, KV %.1f%% of dense: %s\n",
                (int)i + 1, oc_calib_method_name(c->method), c->label, s->ratio, (long long)s->val.n_correct,
                (long long)s->val.n_items, 100.0 * s->val.prefill_skipped,
                d->kv_bytes > 0 ? 100.0 * s->val.kv_bytes / d->kv_bytes : 100.0, s->kept ? "kept" : "dropped");
    }
    fprintf(out, "combined plan: %lld/%lld right (%+.1f points), %.1f%% of attention skipped, KV %.1f%% of dense\n",
            (long long)f->final.n_correct, (long long)f->final.n_items, accuracy(&f->final) - accuracy(d),
            100.0 * f->final.prefill_skipped, d->kv_bytes > 0 ? 100.0 * f->final.kv_bytes / d->kv_bytes : 100.0);
}

static void put_escaped(FILE *out, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", out);
        else if (*s == '>') fputs("&gt;", out);
        else if (*s == '&') fputs("&amp;", out);
        else if (*s == '"') fputs("&quot;", out);
        else fputc(*s, out);
    }
}

/* A coordinate printed only when finite (0 otherwise): the picture never holds NaN. */
static double fin(double v) { return isfinite(v) ? v : 0.0; }

/* 1, 2 or 5 times a power of ten, at least raw (raw > 0) */
static double nice_step(double raw) {
    if (!(raw > 0.0) || !isfinite(raw)) return 1.0;
    double p = pow(10.0, floor(log10(raw))), m = raw / p;
    return (m <= 1.0 ? 1.0 : m <= 2.0 ? 2.0 : m <= 5.0 ? 5.0 : 10.0) * p;
}

#define W 720.0
#define HT 440.0
#define X0 70.0
#define X1 560.0
#define Y0 50.0
#define Y1 380.0
#define LEGEND_Y 150.0   /* below the dense line's label */

int oc_calib_frontier_svg(const oc_calib_frontier *f, const char *title, FILE *out) {
    static const char *colour[] = { "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b" };
    double xmax = 1.0, ymin = accuracy(&f->dense), ymax = accuracy(&f->dense);
    for (int32_t i = 0; i < f->n_cand; i++) {
        const oc_calib_cand *c = &f->cand[i];
        if (isfinite(c->saving_points)) xmax = fmax(xmax, c->saving_points);
        ymin = fmin(ymin, accuracy(&c->val));
        ymax = fmax(ymax, accuracy(&c->val));
    }
    double xstep = nice_step(xmax * 1.1 / 5.0);
    xmax = ceil(xmax * 1.1 / xstep) * xstep;
    ymin = floor(ymin / 5.0) * 5.0 - 5.0;
    ymax = ceil(ymax / 5.0) * 5.0 + 2.0;   /* points at 100% clear of the frame */
    double ystep = nice_step((ymax - ymin) / 5.0);
#define SX(v) fin(X0 + (X1 - X0) * (fmax(0.0, (v))) / xmax)
#define SY(v) fin(Y1 - (Y1 - Y0) * ((v) - ymin) / (ymax - ymin))
    fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
                 "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" y=\"24\" "
                 "font-size=\"14\">", W, HT, X0);
    put_escaped(out, title);
    fprintf(out, "</text>\n<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#888\"/>\n", X0,
            Y0, X1 - X0, Y1 - Y0);
    for (double xv = 0.0; xv <= xmax + 1e-9; xv += xstep)   /* ticks */
        fprintf(out, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%g</text>\n", SX(xv), Y1 + 16, xv);
    for (double yv = ceil(ymin / ystep) * ystep; yv <= fmin(ymax, 100.0) + 1e-9; yv += ystep)
        fprintf(out, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", X0 - 6, SY(yv) + 4, yv);
    fprintf(out, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">saving: attention FLOPs skipped %% + KV saved %% "
                 "(validation)</text>\n", (X0 + X1) / 2, Y1 + 36);
    fprintf(out, "<text x=\"16\" y=\"%.0f\" transform=\"rotate(-90 16 %.0f)\" text-anchor=\"middle\">validation accuracy "
                 "%%</text>\n", (Y0 + Y1) / 2, (Y0 + Y1) / 2);
    double yd = accuracy(&f->dense), yb = yd - f->max_loss_points;
    fprintf(out, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#999\"/>\n<text x=\"%.0f\" y=\"%.1f\" "
                 "fill=\"#666\">dense %.1f%%</text>\n", X0, X1, SY(yd), SY(yd), X1 + 4, SY(yd) + 4, yd);
    if (yb > ymin)
        fprintf(out, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#999\" stroke-dasharray=\"4 3\"/>\n"
                     "<text x=\"%.0f\" y=\"%.1f\" fill=\"#666\">budget: %g points below dense</text>\n", X0, X1, SY(yb),
                SY(yb), X0 + 4, SY(yb) + 14, f->max_loss_points);   /* under its line, clear of dense's label */
    int series = 0;
    for (unsigned bit = 1; bit <= OC_CALIB_MMINFERENCE; bit <<= 1) {
        int32_t idx[OC_CALIB_FRONTIER_MAX_CAND], n = 0;
        for (int32_t i = 0; i < f->n_cand; i++)
            if (f->cand[i].method == bit) idx[n++] = i;
        if (!n) continue;
        for (int32_t i = 1; i < n; i++)   /* by saving, for the line */
            for (int32_t j = i; j > 0 && f->cand[idx[j]].saving_points < f->cand[idx[j - 1]].saving_points; j--) {
                int32_t t = idx[j];
                idx[j] = idx[j - 1];
                idx[j - 1] = t;
            }
        const char *col = colour[series % 6];
        fprintf(out, "<g id=\"%s\">\n<polyline fill=\"none\" stroke=\"%s\" points=\"", oc_calib_method_name(bit), col);
        for (int32_t i = 0; i < n; i++)
            fprintf(out, "%s%.1f,%.1f", i ? " " : "", SX(f->cand[idx[i]].saving_points), SY(accuracy(&f->cand[idx[i]].val)));
        fprintf(out, "\"/>\n");
        for (int32_t i = 0; i < n; i++) {
            const oc_calib_cand *c = &f->cand[idx[i]];
            double x = SX(c->saving_points), y = SY(accuracy(&c->val));
            fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>%s ", x, y, col, oc_calib_method_name(bit));
            put_escaped(out, c->label);
            fprintf(out, ": %.1f%%, saving %.1f</title></circle>\n", accuracy(&c->val), fin(c->saving_points));
            if (c->chosen)
                fprintf(out, "<circle class=\"chosen\" cx=\"%.1f\" cy=\"%.1f\" r=\"8\" fill=\"none\" stroke=\"%s\" "
                             "stroke-width=\"2\"/>\n", x, y, col);
        }
        fprintf(out, "</g>\n<text x=\"%.0f\" y=\"%.0f\" fill=\"%s\">%s</text>\n", X1 + 12, Y0 + 40 + 16.0 * series, col,
                oc_calib_method_name(bit));
        series++;
    }
    if (f->n_steps) {   /* the combined plan: a star */
        double x = SX(100.0 * f->final.prefill_skipped +
                      (f->dense.kv_bytes > 0 ? 100.0 - 100.0 * f->final.kv_bytes / f->dense.kv_bytes : 0.0));
        double y = SY(accuracy(&f->final));
        fprintf(out, "<path class=\"combined\" d=\"M%.1f %.1f l3 7 l7 0 l-5.5 4.5 l2 7.5 l-6.5 -4.5 l-6.5 4.5 l2 -7.5 "
                     "l-5.5 -4.5 l7 0 z\" fill=\"black\"/>\n<text x=\"%.0f\" y=\"%.0f\">combined plan (star)</text>\n",
                x, y - 10, X1 + 12, LEGEND_Y + 16.0 * series);
    }
    fprintf(out, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#666\">ringed: each method's pick</text>\n</svg>\n", X1 + 12,
            LEGEND_Y - 20);
#undef SX
#undef SY
    return ferror(out) ? -1 : 0;
}

int oc_calib_js_svg(const double *s, int32_t n_layers, double epsilon, const char *title, FILE *out) {
    int32_t n = n_layers - 1;
    double ymax = fmax(epsilon, 0.1);
    for (int32_t l = 0; l < n; l++)
        if (isfinite(s[l])) ymax = fmax(ymax, s[l]);
    ymax = ceil(ymax * 10.0) / 10.0;
    double bw = n > 0 ? (X1 - X0) / (double)n : 1.0;
#define SY(v) fin(Y1 - (Y1 - Y0) * (v) / ymax)
    fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
                 "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" y=\"24\" "
                 "font-size=\"14\">", W, HT, X0);
    put_escaped(out, title);
    fprintf(out, "</text>\n");
    for (int t = 0; t <= 4; t++)
        fprintf(out, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.2f</text>\n", X0 - 6, SY(ymax * t / 4.0) + 4,
                ymax * t / 4.0);
    for (int32_t l = 0; l < n; l++) {
        double v = isfinite(s[l]) && s[l] > 0 ? s[l] : 0.0;
        fprintf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>S(%d,%d) = %.4f bits"
                     "</title></rect>\n<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\" font-size=\"10\">%d-%d</text>\n",
                X0 + bw * l + 2, SY(v), fmax(bw - 4, 1), fin(Y1 - SY(v)),
                !isfinite(s[l]) ? "#bbbbbb" : v < epsilon ? "#2ca02c" : "#1f77b4",   /* grey: not measured */
                (int)l, (int)l + 1, v, X0 + bw * (l + 0.5), Y1 + 14, (int)l, (int)l + 1);
    }
    fprintf(out, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" stroke-dasharray=\"5 3\"/>\n"
                 "<text x=\"%.0f\" y=\"%.1f\" fill=\"#d62728\">epsilon %g</text>\n"
                 "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">adjacent layers l-(l+1): mean JS divergence of the "
                 "last prompt row, bits (Eq. 3); green: below epsilon (a lazy group can form)</text>\n</svg>\n",
            X0, X1, SY(epsilon), SY(epsilon), X1 + 4, SY(epsilon) + 4, epsilon, (X0 + X1) / 2, Y1 + 36);
#undef SY
    return ferror(out) ? -1 : 0;
}
