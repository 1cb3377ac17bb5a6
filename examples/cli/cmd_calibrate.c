/* cmd_calibrate.c: `ocellus calibrate`: computes an attention plan from a model and calibration
 * prompts (examples/tools/calib.h): BlindSight head categories, SparseMM visual scores and KV
 * budgets, Q-Cache lazy layer groups. The prompts are the built-in synthetic scene suite; the
 * model runs dense through the public API with the calibration observer attached. Writes the plan
 * (its calibration line names methods, thresholds, data and the model file's hash; its
 * visual-score lines let `ocellus plan --kv-budget` re-budget without calibrating) and a report. */
#include "tools/tools.h"
#include "kvcache/kv_cache.h"
#include "ocellus.h"
#include "port.h"
#include "tools/calib.h"
#include "tools/calib_budget.h"
#include "tools/calib_frontier.h"
#include "tools/calib_scenes.h"
#include "tools/scene_eval.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: ocellus calibrate [-m TEXT.gguf --mmproj VISION.gguf] --data DIR|--suite demo -o OUT.plan [options]\n"
            "  -m FILE                text model GGUF (default " OC_DEMO_TEXT ")\n"
            "  --mmproj FILE          vision encoder GGUF (default " OC_DEMO_MMPROJ ")\n"
            "  --suite demo           calibration prompts: synthetic scenes (ocellus scene), with the\n"
            "                         answer's image region known from the scene (SparseMM grounding)\n"
            "  --data DIR             calibration prompts from a folder `ocellus scene -o DIR` wrote (items.jsonl\n"
            "                         + images; its \"grounding\" cells give SparseMM's regions); size the\n"
            "                         context for it with --max-images N (<= 32, default 8) and --side PX (the\n"
            "                         largest image side; `ocellus scene --suite long`: --max-images 32 --side 448)\n"
            "  --items N              prompts (default 100); --seed S item stream (default 2000002,\n"
            "                         neither a training seed of the demo model nor eval's 1000001)\n"
            "  --images-per-item A-B  images per prompt within 1..8 (default 1-8); --side PX (default 112)\n"
            "  --methods LIST         comma list of blindsight, sparsemm, qcache, zipvl, vision, mminference\n"
            "                         (default: all but mminference; blindsight and mminference both choose the\n"
            "                         decoder's head patterns, so at most one of them)\n"
            "  -o FILE                the plan to write\n"
            "  --report FILE          per-head statistics: NMSE and votes, visual scores, JS divergences\n"
            "  -t N                   threads for the model (default: all CPUs; the plan does not depend on it)\n"
            "BlindSight (blindsight.txt Alg. 1-2): --alpha A (0.1), --gamma-d G (0.25), --gamma-s G (0.6),\n"
            "  --gamma-i G (0.6); sinks = first 10%% of each image's tokens (Sec. 6.1); --alpha A:B is Sec. 5's\n"
            "  Linear scheme, alpha = A + (B - A) * layer / layers (e.g. 0.005:0.195), in the vision encoder too\n"
            "SparseMM (sparsemm.txt Eq. 3-9): --kv-budget TOKENS|FRACTION mean budget per kv head, in tokens\n"
            "  or as a fraction of the mean calibration prompt length (default 0.5); window w = 32, rho = 0.1\n"
            "Q-Cache (qcache.txt Eq. 3-4): --epsilon E JS divergence in bits (default 0.1), --max-group N\n"
            "  layers per lazy block (default 3); mode vla (the paper's recommendation)\n"
            "ZipVL (zipvl.txt Eq. 6-7, Sec. 5.3.2): tau 0.975 per layer, lowered to 0.97 (the knee) only in\n"
            "  layers where that keeps >= 10%% fewer important tokens on the calibration prompts. Ours, not the\n"
            "  paper's: --zipvl-max-nmse X (default %g) leaves a layer dense (no zipvl-tau line) when Alg. 1\n"
            "  as the runtime runs it (its probes and T; rows outside T output 0) changes the layer's attention\n"
            "  output by more than X (NMSE vs dense, mean over the prompts; a lazy group with such a layer\n"
            "  stays dense too); the layers left dense are printed. 1e9 turns the check off\n"
            "MMInference (mminference.txt App. A Alg. 4, C.5 Table 3): per decoder head the candidate of\n"
            "  Table 3 (grid with a fixed stride of one image's tokens or searched up to 1024, a-shape (128,\n"
            "  1024..4096), vertical-slash (1000..3500, 200..4096)) whose attention output is closest to dense\n"
            "  (mean NMSE over the prompts, each run by the engine with its per-prompt index); the prompt must\n"
            "  be one forward call of >= 64 tokens. --mminf-scale F multiplies Table 3's sizes (default 1:\n"
            "  the table is for ~25K-token prompts; e.g. 0.01 for the demo's ~150). On prompts with >= 64\n"
            "  text and >= 64 image queries also Alg. 4's modality steps: each candidate as one modality's\n"
            "  pattern (Q-Boundary) and as one modality pair's, sizes scaled by the key modality's share\n"
            "  (2D-Boundary); a boundary head wins when it loses clearly less than the simpler ones\n"
            "Vision encoder (ours): per head the cheapest of local(P/4), a-shape(P/16,P/4), a-shape(P/16,P/2)\n"
            "  for the calibration images' P patches with output NMSE < alpha, dense when > gamma_d of the\n"
            "  images need it; the sizes fit images of the calibration size\n"
            "Accuracy budget (ours, not a paper's): --val-items N (default 0: off) validates the calibrated\n"
            "  plan against dense on N scenes of a seed derived from --seed (printed; never the calibration's\n"
            "  nor an eval default), of --val-suite demo|long (default demo; needed with --data; long: 8 to\n"
            "  --max-images images of 224-448 px, the prompt in one prefill call); --max-loss P (default 1)\n"
            "  points of accuracy and percent of dense's mean first-answer-token margin the plan may lose.\n"
            "  Over budget, decoder layers go back to dense, the one that loses most alone first, until\n"
            "  the plan is within it (docs/sparsity-findings.md: the long model's losses sit in a few layers);\n"
            "  --backoff heads then gives each backed-off layer's heads (patterns, kv budgets, tau) back one by\n"
            "  one where the plan stays within (one validation each; default --backoff layers)\n"
            "  --search backoff|greedy (ours; default backoff: the above): greedy instead validates every candidate\n"
            "  the papers' algorithms give for each method (BlindSight alpha schedules, SparseMM budgets,\n"
            "  ZipVL tau, MMInference heads by NMSE, Q-Cache epsilon, vision NMSE), picks per method the one\n"
            "  that saves most within the budget, and adds the picks in order of saving per point of loss,\n"
            "  each validated with the others on; --report R then lists the frontier and draws it in\n"
            "  R.frontier.svg (and Q-Cache's divergences in R.qcache.svg); --candidate METHOD=FILE (repeatable)\n"
            "  adds a plan file to METHOD's candidates (e.g. MMInference at other --mminf-scale values)\n"
            "  --candidates-dir DIR (greedy) writes every candidate plan there as METHOD-KNOB.plan, before\n"
            "  they are validated (to measure or ship a method's pick alone)\n"
            "  --backend cpu|opencl|auto and --device D (an OpenCL device index or name substring) run the\n"
            "  validations there; the calibration pass that gathers the statistics always runs on the CPU\n"
            "  --val-jobs N (--val-suite long; default 1): N item workers per validation, each with its own\n"
            "  context and -t / N threads (at least 1); the numbers are the same for every N\n"
            "Memory, allocated before the first prompt and printed: the model context (as `ocellus ask`,\n"
            "  plus f32 copies of one layer's KV cache and one batch of queries) and the statistics: about\n"
            "  90 bytes per context token, 32 per context token and decoder query head, 340 per decoder\n"
            "  head, 8 per vision patch, 40 per vision head. Never an N x N attention matrix: statistics\n"
            "  are reduced over tiles of 64 keys, with a second pass over the tiles where a softmax\n"
            "  normaliser is needed.\n", OC_CALIB_ZIPVL_MAX_NMSE);
}

typedef struct calib_ui {
    int tty;
    uint64_t t0_ns;
    int64_t tokens;
} calib_ui;

/* A progress bar with the time spent and an estimate of what is left (from the mean per item). */
static void on_item(void *user, int64_t done, int64_t total, int32_t n_prompt_tokens) {
    calib_ui *ui = user;
    ui->tokens += n_prompt_tokens;
    if (!ui->tty && done != total && done % 10) return;
    double s = (double)(oc_port_now_ns() - ui->t0_ns) / 1e9, left = done ? s / (double)done * (double)(total - done) : 0;
    int width = 30, fill = total ? (int)(width * done / total) : width;
    char bar[32];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "%s[%s] %lld/%lld prompts, %.1f s, about %.0f s left   %s", ui->tty ? "\r" : "", bar,
            (long long)done, (long long)total, s, left, ui->tty ? "" : "\n");
    if (ui->tty && done == total) fprintf(stderr, "\n");
}

/* The prompts a --data folder holds (lines of its items.jsonl), so the progress bar counts to
 * what will run; 0 when it cannot be read (the run itself then says why). */
static int64_t data_items(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/items.jsonl", dir) >= (int)sizeof path) return 0;
    char msg[64];
    FILE *f = oc_port_fopen_regular(path, msg, sizeof msg);   /* never waits on a FIFO */
    if (!f) return 0;
    int64_t n = 0;
    int ch, last = '\n';
    while ((ch = getc(f)) != EOF) {
        n += ch == '\n';
        last = ch;
    }
    fclose(f);
    return n + (last != '\n');
}

static int parse_methods(const char *s, unsigned *out) {
    unsigned m = 0;
    while (*s) {
        size_t n = strcspn(s, ",");
        if (n == 10 && !strncmp(s, "blindsight", n)) m |= OC_CALIB_BLINDSIGHT;
        else if (n == 8 && !strncmp(s, "sparsemm", n)) m |= OC_CALIB_SPARSEMM;
        else if (n == 6 && !strncmp(s, "qcache", n)) m |= OC_CALIB_QCACHE;
        else if (n == 5 && !strncmp(s, "zipvl", n)) m |= OC_CALIB_ZIPVL;
        else if (n == 6 && !strncmp(s, "vision", n)) m |= OC_CALIB_VISION;
        else if (n == 11 && !strncmp(s, "mminference", n)) m |= OC_CALIB_MMINFERENCE;
        else return 0;
        s += n + (s[n] == ',');
    }
    *out = m;
    return m != 0;
}

/* --candidate METHOD=FILE: one method's name, and a plan file that can be opened. */
static int parse_candidate(const char *s, unsigned *method, const char **path) {
    const char *eq = strchr(s, '=');
    char name[16];
    if (!eq || eq == s || (size_t)(eq - s) >= sizeof name || !eq[1]) return 0;
    memcpy(name, s, (size_t)(eq - s));
    name[eq - s] = '\0';
    unsigned m;
    if (!parse_methods(name, &m) || (m & (m - 1))) return 0;   /* exactly one method */
    FILE *f = fopen(eq + 1, "rb");
    if (!f) return 0;
    fclose(f);
    *method = m;
    *path = eq + 1;
    return 1;
}

static int parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || errno || !(v >= lo && v <= hi)) return 0;
    *out = v;
    return 1;
}

/* --alpha A (fixed) or A:B (the Linear alpha_layer scheme from A towards B), each in (0, 1e9]. */
static int parse_alpha(const char *s, double *alpha, double *alpha_end) {
    const char *colon = strchr(s, ':');
    char buf[64];
    if (!colon) return parse_double(s, 1e-9, 1e9, alpha) && (*alpha_end = 0.0, 1);
    if ((size_t)(colon - s) >= sizeof buf) return 0;
    memcpy(buf, s, (size_t)(colon - s));
    buf[colon - s] = '\0';
    return parse_double(buf, 1e-9, 1e9, alpha) && parse_double(colon + 1, 1e-9, 1e9, alpha_end);
}

static int parse_range(const char *s, int32_t *lo, int32_t *hi) {
    long long a, b;
    const char *dash = strchr(s, '-');
    char buf[32];
    if (!dash) return oc_tool_parse_ll(s, 1, OC_SCENE_MAX_IMAGES, &a) && (*lo = *hi = (int32_t)a, 1);
    if ((size_t)(dash - s) >= sizeof buf) return 0;
    memcpy(buf, s, (size_t)(dash - s));
    buf[dash - s] = '\0';
    if (!oc_tool_parse_ll(buf, 1, OC_SCENE_MAX_IMAGES, &a) || !oc_tool_parse_ll(dash + 1, a, OC_SCENE_MAX_IMAGES, &b)) return 0;
    *lo = (int32_t)a;
    *hi = (int32_t)b;
    return 1;
}

/* FNV-1a 64 of the whole file: names the model in the plan (any change to the weights changes it). */
static int file_hash(const char *path, uint64_t *out) {
    char msg[64];
    FILE *f = oc_port_fopen_regular(path, msg, sizeof msg);
    if (!f) return 0;
    uint64_t h = 1469598103934665603ULL;
    unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        for (size_t i = 0; i < n; i++) h = (h ^ buf[i]) * 1099511628211ULL;
    int ok = !ferror(f);
    fclose(f);
    *out = h;
    return ok;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Append " key=value" to the calibration text; characters the plan's words cannot hold (space,
 * '#', non-ASCII: e.g. in a file name) become '_'. */
static void add_word(char *buf, size_t n_bytes, const char *key, const char *value) {
    size_t len = strlen(buf);
    int n = snprintf(buf + len, n_bytes - len, "%s%s=", len ? " " : "", key);
    if (n < 0 || (size_t)n >= n_bytes - len) return;
    len += (size_t)n;
    for (const char *v = value; *v && len + 1 < n_bytes; v++)
        buf[len++] = (*v > ' ' && *v < 0x7f && *v != '#') ? *v : '_';
    buf[len] = '\0';
}

/* The plan's calibration line: methods, thresholds, data and model, so a plan says how it was made. */
static void calibration_text(char *buf, size_t n_bytes, const oc_calib_params *cp, const oc_calib_scene_params *sp,
                             const char *data_dir, const char *text_path, uint64_t hash, const char *methods) {
    char v[128];
    buf[0] = '\0';
    add_word(buf, n_bytes, "tool", "ocellus-calibrate");
    add_word(buf, n_bytes, "methods", methods);
    add_word(buf, n_bytes, "model", base_name(text_path));
    snprintf(v, sizeof v, "%016llx", (unsigned long long)hash);
    add_word(buf, n_bytes, "fnv1a64", v);
    if (data_dir) {
        add_word(buf, n_bytes, "data", data_dir);
        snprintf(v, sizeof v, "%lld", (long long)sp->n_items);
        add_word(buf, n_bytes, "items", v);
    } else {
        snprintf(v, sizeof v, "suite:demo:seed=%llu:items=%lld:images=%d-%d:side=%d", (unsigned long long)sp->seed,
                 (long long)sp->n_items, (int)sp->min_images, (int)sp->max_images, (int)sp->side_px);
        add_word(buf, n_bytes, "data", v);
    }
    if (cp->methods & OC_CALIB_BLINDSIGHT) {
        if (cp->bs_alpha_end > 0.0)
            snprintf(v, sizeof v, "%g:%g,%g,%g,%g", cp->bs_alpha, cp->bs_alpha_end, cp->bs_gamma_d, cp->bs_gamma_s,
                     cp->bs_gamma_i);
        else snprintf(v, sizeof v, "%g,%g,%g,%g", cp->bs_alpha, cp->bs_gamma_d, cp->bs_gamma_s, cp->bs_gamma_i);
        add_word(buf, n_bytes, "alpha_gd_gs_gi", v);
    }
    if (cp->methods & OC_CALIB_SPARSEMM) {
        if (cp->kv_budget_tokens > 0) snprintf(v, sizeof v, "%lld", (long long)cp->kv_budget_tokens);
        else snprintf(v, sizeof v, "%g", cp->kv_budget_fraction);
        add_word(buf, n_bytes, "kv_budget", v);
        snprintf(v, sizeof v, "%g", cp->kv_rho);
        add_word(buf, n_bytes, "rho", v);
    }
    if (cp->methods & OC_CALIB_ZIPVL) {
        snprintf(v, sizeof v, "%g,%g,%g", OC_CALIB_ZIPVL_TAU, OC_CALIB_ZIPVL_TAU_LOW, OC_CALIB_ZIPVL_MIN_GAIN);
        add_word(buf, n_bytes, "zipvl_tau_low_gain", v);
        snprintf(v, sizeof v, "%g", cp->zipvl_max_nmse);
        add_word(buf, n_bytes, "zipvl_max_nmse", v);
    }
    if (cp->methods & OC_CALIB_VISION) add_word(buf, n_bytes, "vision", "nested-a-shape");
    if (cp->methods & OC_CALIB_MMINFERENCE) {
        snprintf(v, sizeof v, "table3:scale=%g", cp->mminf_scale);
        add_word(buf, n_bytes, "mminference", v);
    }
    if (cp->methods & OC_CALIB_QCACHE) {
        snprintf(v, sizeof v, "%g", cp->qc_epsilon);
        add_word(buf, n_bytes, "epsilon", v);
        snprintf(v, sizeof v, "%d", (int)cp->qc_max_group);
        add_word(buf, n_bytes, "max_group", v);
    }
}

/* --search greedy: what the combined plan holds and why, as comment lines after the plan (ours). */
static int greedy_comments(const char *path, const oc_calib_frontier *fr) {
    FILE *f = fopen(path, "a");
    if (!f) return 0;
    const oc_calib_val *d = &fr->dense;
    fprintf(f, "# Greedy combined plan (ocellus calibrate --search greedy; ours, not a paper's): the papers' algorithms\n"
               "# gave %d candidates; each was validated alone on %lld items (dense: %lld right), each method's pick is\n"
               "# the one that saves most within %g points, and the picks were added in order of saving per point\n"
               "# of loss, each validated with the ones before it:\n",
            (int)fr->n_cand, (long long)d->n_items, (long long)d->n_correct, fr->max_loss_points);
    for (int32_t i = 0; i < fr->n_steps; i++) {
        const oc_calib_greedy_step *s = &fr->step[i];
        const oc_calib_cand *c = &fr->cand[s->cand];
        const char *name = oc_calib_method_name(c->method);
        if (s->conflict) {
            fprintf(f, "#   %d. %s %s (alone %lld right, saving %.1f, %.1f per point): not tried, the head patterns are "
                       "taken\n", (int)i + 1, name, c->label, (long long)c->val.n_correct, c->saving_points, s->ratio);
            continue;
        }
        fprintf(f, "#   %d. %s %s (alone %lld right, saving %.1f, %.1f per point): with the others %lld right: %s\n",
                (int)i + 1, name, c->label, (long long)c->val.n_correct, c->saving_points, s->ratio,
                (long long)s->val.n_correct, s->kept ? "kept" : "dropped, over the budget");
    }
    if (!fr->n_steps) fprintf(f, "#   no candidate saved anything within the budget: the plan is dense attention\n");
    fprintf(f, "# Result on the validation items: %lld of %lld right, %.1f%% of attention FLOPs skipped, KV %.1f%% of dense.\n",
            (long long)fr->final.n_correct, (long long)fr->final.n_items, 100.0 * fr->final.prefill_skipped,
            d->kv_bytes > 0 ? 100.0 * fr->final.kv_bytes / d->kv_bytes : 100.0);
    return fclose(f) == 0;
}

/* Beside the report R: R.frontier.svg (--search greedy) and R.qcache.svg (Q-Cache calibrated). */
static int report_pictures(const char *report_path, oc_calib *c, const oc_calib_params *cp, const oc_calib_frontier *fr,
                           const char *model_name) {
    char path[4096], title[256];
    if (fr) {
        snprintf(path, sizeof path, "%s.frontier.svg", report_path);
        snprintf(title, sizeof title, "ocellus calibrate: every candidate on %lld validation items (%s)",
                 (long long)fr->dense.n_items, model_name);
        FILE *f = fopen(path, "w");
        int bad = !f || oc_calib_frontier_svg(fr, title, f) != 0;
        if (f && fclose(f)) bad = 1;
        if (bad) { fprintf(stderr, "ocellus calibrate: cannot write %s\n", path); return 0; }
    }
    if ((cp->methods & OC_CALIB_QCACHE) && oc_calib_js_mean(c, 0) >= 0.0) {
        double s[OC_PLAN_MAX_LAYERS];
        int32_t L = 0;
        while (L + 1 < OC_PLAN_MAX_LAYERS && oc_calib_js_mean(c, L) >= 0.0) { s[L] = oc_calib_js_mean(c, L); L++; }
        snprintf(path, sizeof path, "%s.qcache.svg", report_path);
        snprintf(title, sizeof title, "Q-Cache: JS divergence of adjacent layers (%s)", model_name);
        FILE *f = fopen(path, "w");
        int bad = !f || oc_calib_js_svg(s, L + 1, cp->qc_epsilon, title, f) != 0;
        if (f && fclose(f)) bad = 1;
        if (bad) { fprintf(stderr, "ocellus calibrate: cannot write %s\n", path); return 0; }
    }
    return 1;
}

int oc_tool_calibrate(int argc, char **argv) {
    const char *text_path = NULL, *mmproj_path = NULL, *out_path = NULL, *report_path = NULL, *suite = NULL;
    const char *data_dir = NULL;
    const char *methods = "blindsight,sparsemm,qcache,zipvl,vision";
    oc_calib_params cp;
    oc_calib_params_default(&cp);
    oc_calib_scene_params sp;
    oc_calib_scene_params_default(&sp);
    long long n_threads = 0, ll;
    int32_t max_images = 0;   /* --max-images, for --data */
    long long val_items = 0;  /* --val-items: the accuracy budget's validation items (0: off) */
    double max_loss = 1.0;    /* --max-loss: points (and % of dense's mean margin) the plan may lose */
    const char *val_suite = NULL;   /* --val-suite demo|long: the validation scenes */
    int backoff_heads = 0;    /* --backoff heads: then the budget's head phase (calib_budget.h) */
    const char *backoff_given = NULL;
    int search_greedy = 0;    /* --search greedy: the frontier and the greedy combination (calib_frontier.h) */
    unsigned extra_method[16];   /* --candidate METHOD=FILE, in the order given */
    const char *extra_path[16];
    int n_extra = 0;
    const char *suite_only = NULL;   /* an option the synthetic suite reads and --data does not */
    oc_backend_choice val_backend = OC_BACKEND_CPU;   /* --backend: where the validations run */
    const char *val_device = NULL, *backend_given = NULL;
    const char *cand_dir = NULL;    /* --candidates-dir: every greedy candidate written there */
    long long val_jobs = 1;         /* --val-jobs: item workers per long-suite validation */
    const char *val_jobs_given = NULL;
    char methods_buf[64];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (a[0] != '-') { fprintf(stderr, "ocellus calibrate: unexpected argument '%s'\n", a); return 2; }
        if (!v) { fprintf(stderr, "ocellus calibrate: option %s needs a value\n", a); return 2; }
        i++;
        int ok = 1;
        if (!strcmp(a, "-m")) text_path = v;
        else if (!strcmp(a, "--mmproj")) mmproj_path = v;
        else if (!strcmp(a, "-o")) out_path = v;
        else if (!strcmp(a, "--report")) report_path = v;
        else if (!strcmp(a, "--suite")) suite = v;
        else if (!strcmp(a, "--data")) data_dir = v;
        else if (!strcmp(a, "--methods")) ok = parse_methods(v, &cp.methods) && (methods = v);
        else if (!strcmp(a, "--items")) ok = oc_tool_parse_ll(v, 1, 1000000, &ll) && (sp.n_items = ll, 1);
        else if (!strcmp(a, "--seed") && (suite_only = a)) ok = oc_tool_parse_ll(v, 0, 0x7fffffffffffffffLL, &ll) && (sp.seed = (uint64_t)ll, 1);
        else if (!strcmp(a, "--images-per-item") && (suite_only = a)) ok = parse_range(v, &sp.min_images, &sp.max_images);
        else if (!strcmp(a, "--max-images")) ok = oc_tool_parse_ll(v, 1, OC_CALIB_DATA_MAX_IMAGES, &ll) && (max_images = (int32_t)ll, 1);
        else if (!strcmp(a, "--side"))
            ok = oc_tool_parse_ll(v, 56, OC_SCENE_MAX_SIDE_PX, &ll) && ll % OC_SCENE_CELL_PX == 0 && (sp.side_px = (int32_t)ll, 1);
        else if (!strcmp(a, "-t")) ok = oc_tool_parse_ll(v, 1, 1024, &n_threads);
        else if (!strcmp(a, "--alpha")) ok = parse_alpha(v, &cp.bs_alpha, &cp.bs_alpha_end);
        else if (!strcmp(a, "--gamma-d")) ok = parse_double(v, 0, 1, &cp.bs_gamma_d);
        else if (!strcmp(a, "--gamma-s")) ok = parse_double(v, 0, 1, &cp.bs_gamma_s);
        else if (!strcmp(a, "--gamma-i")) ok = parse_double(v, 0, 1, &cp.bs_gamma_i);
        else if (!strcmp(a, "--mminf-scale")) ok = parse_double(v, 1e-6, 1, &cp.mminf_scale);
        else if (!strcmp(a, "--zipvl-max-nmse")) ok = parse_double(v, 0, 1e9, &cp.zipvl_max_nmse);
        else if (!strcmp(a, "--epsilon")) ok = parse_double(v, 1e-9, 1, &cp.qc_epsilon);
        else if (!strcmp(a, "--max-group")) ok = oc_tool_parse_ll(v, 2, OC_PLAN_MAX_LAYERS, &ll) && (cp.qc_max_group = (int32_t)ll, 1);
        else if (!strcmp(a, "--val-items")) ok = oc_tool_parse_ll(v, 0, 1000000, &ll) && (val_items = ll, 1);
        else if (!strcmp(a, "--max-loss")) ok = parse_double(v, 0, 100, &max_loss);
        else if (!strcmp(a, "--backoff"))
            ok = (!strcmp(v, "layers") || !strcmp(v, "heads")) && ((backoff_heads = !strcmp(v, "heads")), 1) && (backoff_given = a);
        else if (!strcmp(a, "--candidate"))
            ok = n_extra < 16 && parse_candidate(v, &extra_method[n_extra], &extra_path[n_extra]) && (n_extra++, 1);
        else if (!strcmp(a, "--search")) ok = (!strcmp(v, "backoff") || !strcmp(v, "greedy")) && ((search_greedy = !strcmp(v, "greedy")), 1);
        else if (!strcmp(a, "--val-suite")) ok = (!strcmp(v, "demo") || !strcmp(v, "long")) && (val_suite = v);
        else if (!strcmp(a, "--backend")) ok = oc_tool_parse_backend(v, &val_backend) && (backend_given = a);
        else if (!strcmp(a, "--device")) val_device = v;
        else if (!strcmp(a, "--candidates-dir")) cand_dir = v;
        else if (!strcmp(a, "--val-jobs")) ok = oc_tool_parse_ll(v, 1, OC_CALIB_MAX_VAL_JOBS, &val_jobs) && (val_jobs_given = a);
        else if (!strcmp(a, "--kv-budget")) {
            if (strchr(v, '.')) ok = parse_double(v, 1e-6, 1, &cp.kv_budget_fraction) && (cp.kv_budget_tokens = 0, 1);
            else ok = oc_tool_parse_ll(v, 1, OC_PLAN_MAX_TOKENS, &ll) && (cp.kv_budget_tokens = ll, 1);
        } else {
            fprintf(stderr, "ocellus calibrate: unknown option %s\n", a);
            return 2;
        }
        if (!ok) { fprintf(stderr, "ocellus calibrate: bad value for %s: %s\n", a, v); return 2; }
    }
    if (suite && data_dir) {
        fprintf(stderr, "ocellus calibrate: give --suite demo or --data DIR, not both\n");
        return 2;
    }
    if (!out_path || !suite == !data_dir) { usage(stderr); return 2; }
    if (!oc_tool_output_ok("calibrate", "-o", out_path) || !oc_tool_output_ok("calibrate", "--report", report_path))
        return 1;   /* before the calibration, not after it */
    if ((cp.methods & OC_CALIB_BLINDSIGHT) && (cp.methods & OC_CALIB_MMINFERENCE)) {
        fprintf(stderr, "ocellus calibrate: blindsight and mminference both choose the decoder's head patterns: "
                        "ask for one of them\n");
        return 2;
    }
    if (search_greedy && !val_items) {
        fprintf(stderr, "ocellus calibrate: --search greedy needs --val-items N (the candidates are chosen on answers)\n");
        return 2;
    }
    if (n_extra && !search_greedy) {
        fprintf(stderr, "ocellus calibrate: --candidate is for --search greedy (the candidates it validates)\n");
        return 2;
    }
    if (cand_dir && !search_greedy) {
        fprintf(stderr, "ocellus calibrate: --candidates-dir is for --search greedy (the candidates it validates)\n");
        return 2;
    }
    if (cand_dir) {   /* a folder that takes files, checked before the calibration */
        char probe[4096];
        if (snprintf(probe, sizeof probe, "%s/.ocellus-write-check", cand_dir) >= (int)sizeof probe ||
            !oc_tool_output_ok("calibrate", "--candidates-dir", probe))
            return 1;
    }
    if (search_greedy && backoff_given) {
        fprintf(stderr, "ocellus calibrate: --backoff is for --search backoff (greedy keeps only what validated)\n");
        return 2;
    }
    if (val_items && data_dir && !val_suite) {
        fprintf(stderr, "ocellus calibrate: with --data, --val-items needs --val-suite demo|long: the scenes to "
                        "validate on (the suite the folder's prompts come from)\n");
        return 2;
    }
    if (val_device && val_backend == OC_BACKEND_CPU) {
        fprintf(stderr, "ocellus calibrate: --device picks an OpenCL device: give --backend opencl or auto\n");
        return 2;
    }
    if (backend_given && !val_items) {
        fprintf(stderr, "ocellus calibrate: --backend is for the validations (--val-items N); the calibration pass "
                        "runs on the CPU\n");
        return 2;
    }
    int val_long = val_suite && !strcmp(val_suite, "long");
    if (val_jobs_given && !(val_items && val_long)) {
        fprintf(stderr, "ocellus calibrate: --val-jobs is for the long suite's validations (--val-items N --val-suite long)\n");
        return 2;
    }
    if (val_long && sp.max_images < 8) {
        fprintf(stderr, "ocellus calibrate: --val-suite long needs --max-images >= 8 (its items have 8 or more images)\n");
        return 2;
    }
    if (max_images && !data_dir) {
        fprintf(stderr, "ocellus calibrate: --max-images is for --data (the suite's is --images-per-item)\n");
        return 2;
    }
    if (data_dir && suite_only) {
        fprintf(stderr, "ocellus calibrate: %s does nothing with --data (it picks the synthetic suite's scenes)\n",
                suite_only);
        return 2;
    }
    if (data_dir && max_images) sp.max_images = max_images;
    if (suite && strcmp(suite, "demo")) {
        fprintf(stderr, "ocellus calibrate: unknown suite '%s' (this version has: demo)\n", suite);
        return 2;
    }
    if (!text_path && !mmproj_path && !oc_tool_demo_model(&text_path, &mmproj_path)) {
        fprintf(stderr, "ocellus calibrate: give -m and --mmproj (no demo model in " OC_TOOL_MODEL_PLACES ")\n");
        return 2;
    }
    if (!text_path || !mmproj_path) { fprintf(stderr, "ocellus calibrate: give both -m and --mmproj\n"); return 2; }
    uint64_t hash;
    if (!file_hash(text_path, &hash)) {
        fprintf(stderr, "ocellus calibrate: cannot read %s: %s\n", text_path, strerror(errno));
        return 1;
    }
    oc_error e;
    oc_model *model = NULL;
    oc_context *ctx = NULL;
    oc_calib *c = NULL;
    oc_plan *plan = NULL;
    oc_plan *cand_plans[OC_CALIB_FRONTIER_MAX_CAND] = { NULL };   /* --search greedy's candidates */
    int32_t n_cand_plans = 0;
    oc_calib_frontier *fr = NULL;
    int rc = 1;
    if (oc_model_open(&model, text_path, mmproj_path, NULL, &e)) {
        fprintf(stderr, "ocellus calibrate: %s\n", e.message);
        return 1;
    }
    oc_model_info mi;
    oc_model_get_info(model, &mi);
    oc_plan_shape shape = { mi.n_layers, mi.n_head, mi.n_head_kv, mi.head_dim };
    oc_plan_shape mvshape = { 0, 0, 0, 0 };   /* the model's vision encoder, whatever is calibrated */
    if (mi.has_vision && mi.vision_heads > 0)
        mvshape = (oc_plan_shape){ mi.vision_layers, mi.vision_heads, mi.vision_heads, mi.vision_hidden / mi.vision_heads };
    for (int i = 0; i < n_extra; i++) {   /* --candidate plans: read and checked before the calibration */
        oc_plan_model_shape ms = { shape, mvshape };
        if (oc_plan_load_file(&cand_plans[n_cand_plans], extra_path[i], NULL, &e) ||
            (n_cand_plans++, oc_plan_check_fits(cand_plans[n_cand_plans - 1], &ms, &e))) {
            fprintf(stderr, "ocellus calibrate: --candidate: %s\n", e.message);
            goto done;
        }
    }
    oc_context_params ctxp;
    oc_context_params_default(&ctxp);
    oc_scene_eval_context_params(&ctxp, sp.max_images, sp.side_px);
    ctxp.batch_tokens = ctxp.max_context_tokens;   /* one prefill call per prompt */
    ctxp.n_threads = (int)n_threads;
    ctxp.on_attention = oc_calib_observe;
    if (data_dir) ctxp.max_image_pixels = OC_TOOL_MAX_IMAGE_PIXELS;   /* the folder's files: decoded by oc_ask */
    oc_plan_shape vshape = { 0, 0, 0, 0 };
    if (mi.has_vision && mi.vision_heads > 0 && (cp.methods & OC_CALIB_VISION))
        vshape = (oc_plan_shape){ mi.vision_layers, mi.vision_heads, mi.vision_heads, mi.vision_hidden / mi.vision_heads };
    else
        cp.methods &= ~(unsigned)OC_CALIB_VISION;
    int32_t max_patches = 4 * ctxp.max_image_tokens;   /* a merged token is 2x2 patches */
    cp.n_threads = (int32_t)n_threads;
    size_t ctx_bytes = 0, calib_bytes = oc_calib_bytes(&shape, ctxp.max_context_tokens, &vshape, max_patches, cp.n_threads);
    if (oc_context_memory_bytes(model, &ctxp, &ctx_bytes, &e) ||
        oc_calib_open(&c, &cp, &shape, ctxp.max_context_tokens, &vshape, max_patches, NULL, &e)) {
        fprintf(stderr, "ocellus calibrate: %s\n", e.message);
        goto done;
    }
    ctxp.attention_user = c;
    if (oc_context_open(&ctx, model, &ctxp, &e)) {
        fprintf(stderr, "ocellus calibrate: %s\n", e.message);
        goto done;
    }
    if (data_dir) {
        int64_t n_data = data_items(data_dir);
        if (n_data > 0 && n_data < sp.n_items) sp.n_items = n_data;
    }
    fprintf(stderr, "calibrating %s (%d layers x %d heads, %d kv heads) on %lld scene prompts, %s\n"
                    "memory: model %.1f MiB + context %.1f MiB + statistics %.1f KiB, allocated up front\n",
            base_name(text_path), (int)mi.n_layers, (int)mi.n_head, (int)mi.n_head_kv, (long long)sp.n_items,
            oc_context_backend_name(ctx), (double)mi.memory_bytes / 1048576.0, (double)ctx_bytes / 1048576.0,
            (double)calib_bytes / 1024.0);
    calib_ui ui = { isatty(2), oc_port_now_ns(), 0 };
    sp.on_item = on_item;
    sp.user = &ui;
    int64_t n_right = 0, n_done = 0;
    if (data_dir ? oc_calib_data(ctx, c, data_dir, &sp, &n_done, &n_right, &e)
                 : oc_calib_scenes(ctx, c, &sp, &n_right, &e)) {
        fprintf(stderr, "\nocellus calibrate: %s\n", e.message);
        goto done;
    }
    if (data_dir) sp.n_items = n_done;   /* the folder may hold fewer than --items */
    /* what the process really held, next to the bound stated above (images included: oc_ask
     * decodes a --data folder's files within the context) */
    fprintf(stderr, "memory: peak RSS %.1f MiB (stated: %.1f MiB)\n", (double)oc_port_peak_rss_bytes() / 1048576.0,
            (double)(mi.memory_bytes + ctx_bytes + calib_bytes) / 1048576.0);
    if ((cp.methods & OC_CALIB_SPARSEMM) && !oc_calib_n_scored_tokens(c)) {
        /* a model that answers nothing right (e.g. random weights) grounds no token: say so and
         * write the other sections rather than budgets from no evidence */
        fprintf(stderr, "ocellus calibrate: SparseMM skipped: no answer was right (%lld of %lld), so no answer token "
                        "is grounded (sparsemm.txt Alg. 1); the plan has no kv budgets\n",
                (long long)n_right, (long long)sp.n_items);
        oc_calib_drop_methods(c, OC_CALIB_SPARSEMM);
        cp.methods &= ~(unsigned)OC_CALIB_SPARSEMM;
        methods_buf[0] = '\0';
        static const char *const names[] = { "blindsight", "sparsemm", "qcache", "zipvl", "vision" };
        for (int b = 0; b < 5; b++)
            if (cp.methods & (1u << b))
                snprintf(methods_buf + strlen(methods_buf), sizeof methods_buf - strlen(methods_buf), "%s%s",
                         methods_buf[0] ? "," : "", names[b]);
        methods = methods_buf;
    }
    double seconds = (double)(oc_port_now_ns() - ui.t0_ns) / 1e9;
    if (oc_plan_create(&plan, &shape, &vshape, NULL, &e) || oc_calib_to_plan(c, plan, &e) ||
        oc_plan_validate(plan, &e)) {
        fprintf(stderr, "ocellus calibrate: %s\n", e.message);
        goto done;
    }
    {   /* the runtime's rules for the KV sections together (kvcache/kv_cache.h): a plan it refuses is a bug here */
        static oc_kv_policy pol;
        const oc_stack_plan *d = &plan->stacks[OC_PLAN_DECODER];
        if (oc_kv_policy_build(&pol, d, d->shape.n_layers, d->shape.n_kv_heads, plan->kv_window_tokens, out_path, &e)) {
            fprintf(stderr, "ocellus calibrate: the runtime would refuse the plan: %s\n", e.message);
            goto done;
        }
    }
    oc_calib_budget_result bres;
    uint64_t val_seed = oc_calib_val_seed(sp.seed);
    if (val_items) {   /* the accuracy budget (calib_budget.h; ours, not a paper's) */
        char tmp_path[4096];
        snprintf(tmp_path, sizeof tmp_path, "%s.candidate", out_path);
        printf("budget: validation on %lld %s scenes of seed %llu (derived from the calibration seed %llu), max loss %g "
               "points (ours, not a paper's)\n",
               val_items, val_long ? "long-suite" : "demo-suite", (unsigned long long)val_seed, (unsigned long long)sp.seed,
               max_loss);
        if (backend_given || val_jobs > 1)
            printf("budget: validations on %s%s%s, %lld item worker%s (the calibration pass ran on the CPU)\n",
                   val_backend == OC_BACKEND_OPENCL ? "OpenCL" : val_backend == OC_BACKEND_AUTO ? "auto" : "the CPU",
                   val_device ? ", device " : "", val_device ? val_device : "", val_jobs, val_jobs == 1 ? "" : "s");
        fflush(stdout);
        oc_calib_budget_params bp = { max_loss, val_items, val_seed, val_long, sp.min_images, sp.max_images, sp.side_px,
                                      backoff_heads,
                                      (int)n_threads, tmp_path, stdout, val_backend, val_device, (int)val_jobs };
        oc_status bst;
        if (search_greedy) {   /* the frontier, then the greedy combination (calib_frontier.h; ours) */
            bst = (fr = calloc(1, sizeof *fr)) ? OC_OK : oc_fail(&e, OC_ERR_NOMEM, "out of memory for the frontier");
            static const unsigned order[] = { OC_CALIB_BLINDSIGHT, OC_CALIB_MMINFERENCE, OC_CALIB_SPARSEMM, OC_CALIB_ZIPVL,
                                              OC_CALIB_QCACHE, OC_CALIB_VISION };
            for (size_t m = 0; m < sizeof order / sizeof order[0] && !bst; m++)
                for (int32_t k = 0; k < oc_calib_n_candidates(c, order[m]) && !bst; k++) {
                    char label[OC_CALIB_FRONTIER_LABEL_BYTES];
                    if (n_cand_plans >= OC_CALIB_FRONTIER_MAX_CAND) break;
                    if ((bst = oc_plan_create(&cand_plans[n_cand_plans], &shape, &vshape, NULL, &e))) break;
                    oc_plan *cp_k = cand_plans[n_cand_plans++];
                    if (!(bst = oc_calib_candidate(c, order[m], k, cp_k, label, sizeof label, &e)))
                        oc_calib_frontier_add(fr, order[m], label, cp_k);
                }
            /* --candidate plans (cand_plans[0 .. n_extra), read at the start): listed under their
             * method, validated like the generated ones */
            for (int i = 0; i < n_extra && !bst; i++)
                oc_calib_frontier_add(fr, extra_method[i], base_name(extra_path[i]), cand_plans[i]);
            for (int32_t k = 0; cand_dir && k < fr->n_cand && !bst; k++) {   /* METHOD-KNOB.plan, the knob's
                                                                                  * characters outside [A-Za-z0-9.-] as '_' */
                char path[4096], knob[OC_CALIB_FRONTIER_LABEL_BYTES];
                snprintf(knob, sizeof knob, "%s", fr->cand[k].label);
                for (char *q = knob; *q; q++)
                    if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '.' || *q == '-'))
                        *q = '_';
                if (snprintf(path, sizeof path, "%s/%s-%s%s", cand_dir, oc_calib_method_name(fr->cand[k].method), knob,
                             strstr(knob, ".plan") ? "" : ".plan") >= (int)sizeof path)
                    bst = oc_fail(&e, OC_ERR_INVALID, "--candidates-dir: path too long");
                else
                    bst = oc_plan_write_file(fr->cand[k].plan, path, &e);
            }
            oc_plan *dense = NULL;   /* the combination starts from dense attention, over every stack a candidate may set */
            if (!bst && !(bst = oc_plan_create(&dense, &shape, mvshape.n_layers ? &mvshape : NULL, NULL, &e))) {
                dense->sink_fraction_ppm = plan->sink_fraction_ppm;
                dense->kv_window_tokens = plan->kv_window_tokens;
                oc_plan_free(plan);
                plan = dense;
                bst = oc_calib_frontier_run(model, &bp, fr, plan, &e);
            }
        } else {
            bst = oc_calib_budget(model, plan, &bp, &bres, &e);
        }
        remove(tmp_path);
        if (bst) {
            fprintf(stderr, "ocellus calibrate: budget: %s\n", e.message);
            goto done;
        }
        if (search_greedy) {
            int32_t n_kept = 0;
            printf("greedy: %lld/%lld right against dense's %lld (%d candidates, %d validations); kept:", (long long)fr->final.n_correct,
                   (long long)fr->final.n_items, (long long)fr->dense.n_correct, (int)fr->n_cand, (int)fr->n_validations);
            for (int32_t i = 0; i < fr->n_steps; i++)
                if (fr->step[i].kept) printf("%s %s", n_kept++ ? "," : "", fr->cand[fr->step[i].cand].label);
            printf("%s\n", n_kept ? "" : " nothing (dense attention: no candidate saves within the budget)");
        } else {
        printf("budget: %s: %lld/%lld right against dense's %lld, %d layer%s backed off to dense", 
               oc_calib_within_budget(&bres.dense, &bres.final, max_loss) ? "within" : "OVER (the vision stack is not backed off)",
               (long long)bres.final.n_correct, (long long)bres.final.n_items, (long long)bres.dense.n_correct,
               (int)bres.n_backed_off, bres.n_backed_off == 1 ? "" : "s");
        for (int32_t i = 0; i < bres.n_backed_off; i++) printf("%s%d", i ? "," : " (", (int)bres.backed_off[i]);
        printf("%s, %d head%s given back, %d validations\n", bres.n_backed_off ? ")" : "", (int)bres.n_restored,
               bres.n_restored == 1 ? "" : "s", (int)bres.n_validations);
        }
    }
    calibration_text(plan->calibration, sizeof plan->calibration, &cp, &sp, data_dir, text_path, hash, methods);
    if (val_items && search_greedy) {
        char v[300];
        int n = snprintf(v, sizeof v, "max_loss=%g:val_items=%lld:val_seed=%llu:search=greedy:kept=", max_loss, val_items,
                         (unsigned long long)val_seed);
        int n_kept = 0;
        for (int32_t i = 0; i < fr->n_steps && n > 0 && (size_t)n < sizeof v; i++) {
            const oc_calib_cand *k = &fr->cand[fr->step[i].cand];
            if (fr->step[i].kept)   /* method:knob (add_word turns the label's spaces into '_') */
                n += snprintf(v + n, sizeof v - (size_t)n, "%s%s:%s", n_kept++ ? "," : "", oc_calib_method_name(k->method),
                              k->label);
        }
        if (!n_kept && n > 0 && (size_t)n < sizeof v) snprintf(v + n, sizeof v - (size_t)n, "none");
        add_word(plan->calibration, sizeof plan->calibration, "budget", v);
    } else if (val_items) {
        char v[160];
        int n = snprintf(v, sizeof v, "max_loss=%g:val_items=%lld:val_seed=%llu:backoff=%s:backed_off_layers=", max_loss,
                         val_items, (unsigned long long)val_seed, backoff_heads ? "heads" : "layers");
        for (int32_t i = 0; i < bres.n_backed_off && n > 0 && (size_t)n < sizeof v; i++)
            n += snprintf(v + n, sizeof v - (size_t)n, "%s%d", i ? "," : "", (int)bres.backed_off[i]);
        if (!bres.n_backed_off && n > 0 && (size_t)n < sizeof v) snprintf(v + n, sizeof v - (size_t)n, "none");
        add_word(plan->calibration, sizeof plan->calibration, "budget", v);
    }
    if (oc_plan_write_file(plan, out_path, &e)) {
        fprintf(stderr, "ocellus calibrate: %s\n", e.message);
        goto done;
    }
    if (fr && !greedy_comments(out_path, fr)) {
        fprintf(stderr, "ocellus calibrate: cannot append to %s: %s\n", out_path, strerror(errno));
        goto done;
    }
    if (report_path) {
        FILE *f = fopen(report_path, "w");
        if (!f) {
            fprintf(stderr, "ocellus calibrate: cannot write %s: %s\n", report_path, strerror(errno));
            goto done;
        }
        fprintf(f, "# model %s fnv1a64=%016llx, %lld of %lld answers right, %.1f s\n", text_path,
                (unsigned long long)hash, (long long)n_right, (long long)sp.n_items, seconds);
        oc_calib_report(c, f);
        if (fr) oc_calib_frontier_report(fr, f);
        if (fclose(f)) { fprintf(stderr, "ocellus calibrate: cannot write %s\n", report_path); goto done; }
        if (!report_pictures(report_path, c, &cp, fr, base_name(text_path))) goto done;
    }
    oc_plan_stats st;
    oc_plan_stats_get(plan, OC_PLAN_DECODER, &st);
    printf("wrote %s: %lld prompts (%.0f tokens on average, %lld answered right) in %.1f s; %d of %d decoder heads "
           "sparse, %d kv budgets, %d lazy groups\n",
           out_path, (long long)sp.n_items, (double)ui.tokens / (double)sp.n_items, (long long)n_right, seconds,
           (int)st.n_sparse, (int)st.n_heads, (int)st.n_budgeted_kv_heads,
           (int)plan->stacks[OC_PLAN_DECODER].n_lazy_groups);
    if ((cp.methods & OC_CALIB_ZIPVL) && !search_greedy) {   /* the output check (ours): which layers it left dense, and why */
        const oc_stack_plan *d = &plan->stacks[OC_PLAN_DECODER];
        int n_dense = 0;
        for (int32_t l = 0; l < d->shape.n_layers; l++) {
            if (d->zipvl_tau_ppm[l]) continue;
            double nmse = oc_calib_zipvl_nmse(c, l);
            printf("ZipVL: layer %d left dense: %s (output NMSE %.3f of Alg. 1 vs dense; threshold %g, "
                   "--zipvl-max-nmse; our check, not the paper's)\n", (int)l,
                   oc_calib_zipvl_keeps_layer(nmse, cp.zipvl_max_nmse) ? "its lazy group holds a layer above the threshold"
                                                                    : "above the threshold",
                   nmse, cp.zipvl_max_nmse);
            n_dense++;
        }
        if (!n_dense)
            printf("ZipVL: every layer keeps its zipvl-tau line (output NMSE <= %g on each)\n", cp.zipvl_max_nmse);
    }
    rc = 0;
done:
    for (int32_t i = 0; i < n_cand_plans; i++) oc_plan_free(cand_plans[i]);
    free(fr);
    oc_plan_free(plan);
    oc_context_close(ctx);
    oc_calib_close(c);
    oc_model_close(model);
    return rc;
}
