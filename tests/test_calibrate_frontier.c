/* test_calibrate_frontier.c: `ocellus calibrate --search greedy` (examples/tools/calib_frontier.h).
 * - On the demo model, one method with two candidates: a KV cut of harmless layer 4 alone, and the
 *   same cut on layers 2 and 4 (layer 2 essential by construction: its 4-token cache holds no
 *   image token; test_calibrate_budget.c's case). The bigger saving loses answers, so the pick must
 *   be the cut of layer 4 alone: layer 2 stays dense, the combined plan is within the budget, and
 *   a candidate that is dense attention is listed without a validation. Two methods that both set
 *   head patterns (BlindSight, MMInference) are never stacked: at most one of them is tried.
 * - The frontier's report lists every candidate and marks each method's pick once; its SVG is
 *   well formed and holds no NaN coordinate even when a candidate's numbers are NaN.
 * - Merging: ZipVL on a layer with head patterns becomes "prefill heads" (both keep their saving);
 *   a lazy group's later layer takes its first layer's kv budgets and tau; the runtime's KV rules
 *   accept the result. */
#include "check.h"
#include "kvcache/kv_cache.h"
#include "ocellus.h"
#include "plan/plan.h"
#include "tools/calib.h"
#include "tools/calib_frontier.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static oc_plan *parse(const char *text) {
    oc_plan *p = NULL;
    oc_error e;
    if (oc_plan_parse(&p, text, strlen(text), "test", NULL, &e) != OC_OK) {
        check_fail_at(__FILE__, __LINE__, "plan: %s", e.message);
        return NULL;
    }
    return p;
}

static void test_frontier_keeps_essential_layer_dense(void) {
    if (check_emulated()) {
        check_skip("under an emulator this case costs minutes; the native configurations run it");
        return;
    }
    const char *slow = getenv("OC_TEST_SLOW");
    if (slow && slow[0] == '1') {
        check_skip("with scalar kernels this case costs minutes of the 2-core CI; the SIMD configurations run it");
        return;
    }
    oc_error e;
    oc_model *m = NULL;
    if (oc_model_open(&m, "examples/demo/ocellus-demo.gguf", "examples/demo/ocellus-demo-mmproj.gguf", NULL, &e)) {
        check_skip("demo model: %s", e.message);
        return;
    }
    oc_plan *harmless = parse("ocellus-plan 3\nshape decoder layers 6 heads 4 kv-heads 2 head-dim 64\nkv-window 4\n"
                              "decoder default dense\ndecoder layer 4 kv-budget 4 4\n");
    oc_plan *both = parse("ocellus-plan 3\nshape decoder layers 6 heads 4 kv-heads 2 head-dim 64\nkv-window 4\n"
                          "decoder default dense\ndecoder layer 2 kv-budget 4 4\ndecoder layer 4 kv-budget 4 4\n");
    oc_plan *dense = parse("ocellus-plan 3\nshape decoder layers 6 heads 4 kv-heads 2 head-dim 64\nkv-window 4\n"
                           "decoder default dense\n");
    oc_plan *out = parse("ocellus-plan 3\nshape decoder layers 6 heads 4 kv-heads 2 head-dim 64\nkv-window 4\n"
                         "decoder default dense\n");
    /* two methods that both choose head patterns: a sink head each in the last layer */
    oc_plan *bs = parse("ocellus-plan 3\nshape decoder layers 6 heads 4 kv-heads 2 head-dim 64\nkv-window 4\n"
                        "decoder default dense\ndecoder layer 5 heads 0 sink\n");
    oc_plan *mm = parse("ocellus-plan 3\nshape decoder layers 6 heads 4 kv-heads 2 head-dim 64\nkv-window 4\n"
                        "decoder default dense\ndecoder layer 5 heads 1-3 sink\n");
    oc_calib_frontier *f = calloc(1, sizeof *f);
    REQUIRE(harmless && both && dense && out && bs && mm && f);
    CHECK(oc_calib_frontier_add(f, OC_CALIB_SPARSEMM, "cut 4", harmless));
    CHECK(oc_calib_frontier_add(f, OC_CALIB_SPARSEMM, "cut 2+4", both));
    CHECK(oc_calib_frontier_add(f, OC_CALIB_QCACHE, "no group", dense));
    CHECK(oc_calib_frontier_add(f, OC_CALIB_BLINDSIGHT, "one sink head", bs));
    CHECK(oc_calib_frontier_add(f, OC_CALIB_MMINFERENCE, "three sink heads", mm));
    const char *tmp = "build/tests/calibrate_frontier.candidate.plan";
    oc_calib_budget_params p = { 5.0, 40, oc_calib_val_seed(2000002u), 0, 1, 8, 112, 0, 2, tmp, NULL, OC_BACKEND_CPU, NULL, 1 };
    oc_status st = oc_calib_frontier_run(m, &p, f, out, &e);
    remove(tmp);
    CHECKF(st == OC_OK, "%s", e.message);
    if (st == OC_OK) {
        const oc_calib_cand *c = f->cand;
        CHECKF(c[1].loss_points > 5.0, "the cut of layers 2 and 4 lost only %.1f points", c[1].loss_points);
        CHECKF(c[1].saving_points > c[0].saving_points, "savings %.1f and %.1f", c[1].saving_points, c[0].saving_points);
        CHECK(c[0].within && !c[1].within);
        CHECK(c[0].chosen && !c[1].chosen && !c[2].chosen);
        CHECK(c[0].validated && c[1].validated && !c[2].validated);   /* dense attention: not run */
        CHECK(c[2].val.n_correct == f->dense.n_correct && c[2].saving_points == 0.0);
        const oc_stack_plan *d = &out->stacks[OC_PLAN_DECODER];
        CHECKF(d->kv_budget_tokens[2 * 2] == OC_PLAN_KV_FULL && d->kv_budget_tokens[2 * 2 + 1] == OC_PLAN_KV_FULL,
               "layer 2 cut in the combined plan (%d, %d)", (int)d->kv_budget_tokens[4], (int)d->kv_budget_tokens[5]);
        CHECKF(d->kv_budget_tokens[4 * 2] == 4 && d->kv_budget_tokens[4 * 2 + 1] == 4, "layer 4's cut not kept");
        /* the sparsemm pick is kept; of the two head-pattern picks at most one is tried */
        int n_bs = 0, n_conflict = 0, n_kept = 0, sparsemm_kept = 0;
        for (int32_t i = 0; i < f->n_steps; i++) {
            const oc_calib_greedy_step *s = &f->step[i];
            n_bs += s->cand == 3 || s->cand == 4;
            n_conflict += s->conflict != 0;
            n_kept += s->kept;
            sparsemm_kept |= s->cand == 0 && s->kept;
            CHECK(!(s->kept && s->conflict));
        }
        CHECK(sparsemm_kept);
        CHECKF(n_conflict == (n_bs == 2), "%d head-pattern picks, %d not tried", n_bs, n_conflict);
        CHECK(f->n_steps == 1 + n_bs);
        CHECK(oc_calib_within_budget(&f->dense, &f->final, 5.0));
        /* dense, the four candidates that are not dense, one per greedy step after the first tried */
        CHECKF(f->n_validations == 5 + (f->n_steps - n_conflict - 1), "%d validations", (int)f->n_validations);
        if (n_kept == 1) CHECK(f->final.n_correct == c[0].val.n_correct);
    }
    free(f);
    oc_plan_free(harmless);
    oc_plan_free(both);
    oc_plan_free(dense);
    oc_plan_free(bs);
    oc_plan_free(mm);
    oc_plan_free(out);
    oc_model_close(m);
}

/* A frontier filled by hand: three methods, one pick each but the last, one NaN. */
static void fill(oc_calib_frontier *f) {
    memset(f, 0, sizeof *f);
    f->max_loss_points = 1.0;
    f->dense = (oc_calib_val){ 50, 45, 10.0, 0.0, 1000.0 };
    static const unsigned method[] = { OC_CALIB_BLINDSIGHT, OC_CALIB_BLINDSIGHT, OC_CALIB_BLINDSIGHT, OC_CALIB_SPARSEMM,
                                       OC_CALIB_SPARSEMM, OC_CALIB_ZIPVL };
    for (int i = 0; i < 6; i++) {
        oc_calib_cand *c = &f->cand[f->n_cand++];
        c->method = method[i];
        snprintf(c->label, sizeof c->label, "knob <%d> & co", i);
        c->val = (oc_calib_val){ 50, 45 - i, 10.0, 0.05 * i, 1000.0 - 100.0 * i };
        c->validated = 1;
        c->loss_points = 2.0 * i;
        c->saving_points = i == 5 ? NAN : 5.0 * (i + 1);
        c->kv_percent = 100.0 - 10.0 * i;
        c->within = i < 2 || i == 3;
    }
    f->cand[1].chosen = 1;
    f->cand[3].chosen = 1;
    f->n_steps = 3;
    f->step[0] = (oc_calib_greedy_step){ 3, 10.0, f->cand[3].val, 1, 0 };
    f->step[1] = (oc_calib_greedy_step){ 1, 5.0, f->cand[1].val, 0, 0 };
    f->step[2] = (oc_calib_greedy_step){ 0, 4.0, f->cand[0].val, 0, OC_CALIB_MMINFERENCE };
    f->final = f->cand[3].val;
    f->n_validations = 8;
}

static char *slurp(FILE *t, size_t *n) {
    long len = ftell(t);
    rewind(t);
    char *s = calloc((size_t)len + 1, 1);
    if (s && fread(s, 1, (size_t)len, t) != (size_t)len) s[0] = '\0';
    *n = (size_t)len;
    return s;
}

static size_t count(const char *s, const char *w) {
    size_t n = 0;
    for (const char *p = strstr(s, w); p; p = strstr(p + 1, w)) n++;
    return n;
}

/* Tags balance: every "<x" that is not "</", "<?" or self-closed "/>" is closed by a "</x". */
static int well_formed(const char *s) {
    int depth = 0;
    for (const char *p = strchr(s, '<'); p; p = strchr(p + 1, '<')) {
        const char *end = strchr(p, '>');
        if (!end) return 0;
        for (const char *q = p + 1; q < end; q++)
            if (*q == '<') return 0;   /* a raw '<' inside a tag: an unescaped label */
        if (p[1] == '/') depth--;
        else if (end[-1] != '/') depth++;
        if (depth < 0) return 0;
    }
    return depth == 0 && strncmp(s, "<svg", 4) == 0;
}

static void test_frontier_report_and_svg(void) {
    oc_calib_frontier *f = calloc(1, sizeof *f);
    REQUIRE(f);
    fill(f);
    FILE *t = tmpfile();
    REQUIRE(t);
    oc_calib_frontier_report(f, t);
    size_t n;
    char *s = slurp(t, &n);
    fclose(t);
    REQUIRE(s);
    for (int i = 0; i < 6; i++) {
        char w[48];
        snprintf(w, sizeof w, "knob <%d> & co", i);
        CHECKF(strstr(s, w) != NULL, "candidate %d missing from the report", i);
    }
    CHECKF(count(s, "*chosen") == 2, "%zu picks marked", count(s, "*chosen"));
    CHECK(strstr(s, "zipvl: no candidate saves anything within the budget") != NULL);
    CHECK(strstr(s, "2. blindsight knob <1> & co") != NULL && strstr(s, "dropped") != NULL);
    CHECK(strstr(s, "3. blindsight knob <0> & co: 4.0 saving per point -> not tried: its head patterns would replace "
                    "mminference's") != NULL);
    free(s);

    t = tmpfile();
    REQUIRE(t);
    CHECK(oc_calib_frontier_svg(f, "a <title> & more", t) == 0);
    s = slurp(t, &n);
    fclose(t);
    REQUIRE(s);
    CHECK(well_formed(s));
    CHECK(strstr(s, "nan") == NULL && strstr(s, "NaN") == NULL && strstr(s, "inf") == NULL);
    CHECKF(count(s, "<circle") == 6 + 2, "%zu circles (6 candidates, 2 rings)", count(s, "<circle"));
    CHECK(count(s, "class=\"chosen\"") == 2);
    CHECK(count(s, "class=\"combined\"") == 1);
    CHECK(count(s, "<polyline") == 3);   /* one series per method */
    free(s);

    double js[5] = { 0.4, 0.05, NAN, 0.7, 0.3 };
    t = tmpfile();
    REQUIRE(t);
    CHECK(oc_calib_js_svg(js, 6, 0.1, "q", t) == 0);
    s = slurp(t, &n);
    fclose(t);
    REQUIRE(s);
    CHECK(well_formed(s));
    CHECK(strstr(s, "nan") == NULL && strstr(s, "inf") == NULL);
    CHECK(count(s, "<rect") == 1 + 5);   /* the background and one bar per pair */
    CHECK(count(s, "#2ca02c") == 1);     /* S(1,2) alone below epsilon */
    free(s);
    free(f);
}

static void test_merge_composes(void) {
    oc_plan *heads = parse("ocellus-plan 4\nshape decoder layers 6 heads 4 kv-heads 2 head-dim 64\n"
                           "decoder default dense\ndecoder layer 1 heads 0-1 sink\n");
    oc_plan *zipvl = parse("ocellus-plan 4\nshape decoder layers 6 heads 4 kv-heads 2 head-dim 64\n"
                           "decoder default dense\ndecoder layer 1-5 zipvl-tau 0.95\n");
    oc_plan *lazy = parse("ocellus-plan 4\nshape decoder layers 6 heads 4 kv-heads 2 head-dim 64\n"
                          "decoder default dense\ndecoder lazy-group 3-4 mode vla\n");
    oc_plan *budget = parse("ocellus-plan 4\nshape decoder layers 6 heads 4 kv-heads 2 head-dim 64\nkv-window 4\n"
                            "decoder default dense\ndecoder layer 3 kv-budget 40 50\n");
    oc_plan *out = parse("ocellus-plan 4\nshape decoder layers 6 heads 4 kv-heads 2 head-dim 64\ndecoder default dense\n");
    REQUIRE(heads && zipvl && lazy && budget && out);
    oc_error e;
    CHECK(oc_calib_plan_merge(out, heads, &e) == OC_OK);
    CHECK(oc_calib_plan_merge(out, zipvl, &e) == OC_OK);
    CHECK(oc_calib_plan_merge(out, budget, &e) == OC_OK);
    CHECK(oc_calib_plan_merge(out, lazy, &e) == OC_OK);
    const oc_stack_plan *d = &out->stacks[OC_PLAN_DECODER];
    CHECK(oc_plan_head(out, OC_PLAN_DECODER, 1, 0)->kind == OC_PATTERN_SINK);
    CHECK(d->zipvl_tau_ppm[1] == 950000 && d->zipvl_heads_prefill[1] == 1);   /* both keep their saving */
    CHECK(d->zipvl_tau_ppm[2] == 950000 && d->zipvl_heads_prefill[2] == 0);   /* no pattern: Alg. 1 */
    CHECK(d->zipvl_tau_ppm[0] == 0);
    CHECK(d->n_lazy_groups == 1 && d->lazy_groups[0].first_layer == 3 && d->lazy_groups[0].last_layer == 4);
    CHECK(d->kv_budget_tokens[4 * 2] == 40 && d->kv_budget_tokens[4 * 2 + 1] == 50);   /* the first layer's */
    CHECK(oc_plan_validate(out, &e) == OC_OK);
    static oc_kv_policy pol;
    CHECKF(oc_kv_policy_build(&pol, d, 6, 2, out->kv_window_tokens, "merged", &e) == OC_OK, "%s", e.message);
    /* a copy is the same plan */
    oc_plan *copy = NULL;
    CHECK(oc_calib_plan_copy(&copy, out, &e) == OC_OK);
    CHECK(copy && oc_plan_equal(copy, out));
    /* shapes differ: refused */
    oc_plan *other = parse("ocellus-plan 4\nshape decoder layers 4 heads 4 kv-heads 2 head-dim 64\ndecoder default dense\n");
    CHECK(other && oc_calib_plan_merge(out, other, &e) == OC_ERR_INVALID);
    oc_plan_free(other);
    oc_plan_free(copy);
    oc_plan_free(heads);
    oc_plan_free(zipvl);
    oc_plan_free(lazy);
    oc_plan_free(budget);
    oc_plan_free(out);
}

int main(void) {
    CHECK_RUN(test_merge_composes);
    CHECK_RUN(test_frontier_report_and_svg);
    CHECK_RUN(test_frontier_keeps_essential_layer_dense);
    return check_finish();
}
