/* cmd_plan.c: `ocellus plan [show] FILE [--check-shape L,H,KV,D] [--check-vision L,H,D] [--svg OUT]
 * [--kv-budget N -o OUT]`: reads an attention plan, prints what it holds (how it was made, shapes,
 * heads per pattern per stack, budgets, ZipVL layers, lazy groups), how each backend runs each
 * pattern (asked of the backend providers, backend.h), whether the runtime executes
 * each section (it refuses impossible combinations of the KV cache methods on one layer), given a
 * model shape whether the plan fits it, draws it as SVG, or re-budgets its SparseMM kv heads from
 * its visual scores. Exit 1 on a bad plan. */
#include "tools/tools.h"
#include "attention/attn.h"
#include "backend/backend.h"
#include "kvcache/kv_cache.h"
#include "plan/plan.h"
#include "tools/calib.h"
#include "tools/plan_svg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: ocellus plan [show] FILE [--check-shape L,H,KV,D] [--check-vision L,H,D] [--svg OUT.svg]\n"
               "                    [--kv-budget TOKENS -o OUT.plan]\n"
               "  Reads an attention plan and prints a summary; exits 1 on a bad plan.\n"
               "  --svg OUT.svg           draw it: layers x heads coloured by pattern, KV budget bars,\n"
               "                          lazy groups, legend (opens in a browser)\n"
               "  --kv-budget TOKENS      SparseMM budgets for a new mean per kv head (sparsemm.txt Eq. 5-9,\n"
               "                          rho 0.1) from the plan's visual scores: no recalibration; -o OUT\n"
               "                          writes the re-budgeted plan\n"
               "  --check-shape L,H,KV,D  refuse the plan unless it fits a decoder of L layers, H heads,\n"
               "                          KV kv heads and head dim D\n"
               "  --check-vision L,H,D    also check the vision encoder (default: not checked)\n");
}

/* "a,b,c[,d]" with exactly n positive numbers */
static int parse_numbers(const char *s, int32_t *v, int n) {
    for (int i = 0; i < n; i++) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < 1 || x > 1000000) return 0;
        v[i] = (int32_t)x;
        if (i + 1 < n && *end != ',') return 0;
        s = end + (i + 1 < n);
        if (i + 1 == n && *end != '\0') return 0;
    }
    return 1;
}

static const char *exec_name(oc_pattern_exec e) {
    return e == OC_EXEC_SPARSE ? "executes" : e == OC_EXEC_PREFILL ? "executes in prefill (decode runs them dense)"
                                                                   : "runs them dense";
}

/* "; runtime: CPU executes, OpenCL ..." for pattern kind k, asked of each backend provider
 * (backend.h), "not built" for a kind this build lacks. */
static void print_exec(oc_pattern_kind k) {
    static const oc_backend_kind kinds[] = { OC_BACKEND_KIND_CPU, OC_BACKEND_KIND_OPENCL };
    static const char *const names[] = { "CPU", "OpenCL" };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const oc_backend_provider *p = oc_backend_provider_find(kinds[i]);
        printf("%s%s %s", i ? ", " : "; runtime: ", p ? p->name : names[i],
               p ? exec_name(p->pattern_exec(k)) : "not built");
    }
}

static void print_stack(const oc_plan *plan, oc_plan_stack stack) {
    const oc_stack_plan *s = &plan->stacks[stack];
    const char *name = oc_plan_stack_name(stack);
    if (s->shape.n_layers == 0) {
        printf("%s: not covered (runs dense)\n", name);
        return;
    }
    oc_plan_stats st;
    oc_plan_stats_get(plan, stack, &st);
    printf("%s: %d layers x %d heads", name, (int)s->shape.n_layers, (int)s->shape.n_heads);
    if (stack == OC_PLAN_DECODER) printf(", %d kv heads", (int)s->shape.n_kv_heads);
    printf(", head dim %d\n", (int)s->shape.head_dim);
    for (int k = 0; k < OC_PATTERN_COUNT; k++) {
        if (!st.n_per_pattern[k]) continue;
        printf("  %-18s %5d heads  %5.1f%%", oc_plan_pattern_name((oc_pattern_kind)k), (int)st.n_per_pattern[k],
               100.0 * st.n_per_pattern[k] / st.n_heads);
        if (k != OC_PATTERN_DENSE) print_exec((oc_pattern_kind)k);
        printf("\n");
    }
    int32_t n_dyn = st.n_per_pattern[OC_PATTERN_VERTICAL_SLASH] + st.n_per_pattern[OC_PATTERN_GRID], n_on_zipvl = 0;
    int32_t n_composed = 0, n_zipvl_heads = 0;   /* heads on "prefill heads" zipvl layers; those layers */
    for (int32_t l = 0; s->zipvl_tau_ppm && l < s->shape.n_layers; l++) {
        int composes = s->zipvl_tau_ppm[l] && s->zipvl_heads_prefill && s->zipvl_heads_prefill[l];
        n_zipvl_heads += composes;
        for (int32_t h = 0; s->zipvl_tau_ppm[l] && h < s->shape.n_heads; h++) {
            int sparse = s->heads[(size_t)l * (size_t)s->shape.n_heads + (size_t)h].kind != OC_PATTERN_DENSE;
            if (composes) n_composed += sparse;
            else n_on_zipvl += sparse;
        }
    }
    printf("  %-18s %5d heads  %5.1f%%\n", "sparse (not dense)", (int)st.n_sparse, 100.0 * st.n_sparse / st.n_heads);
    if (stack == OC_PLAN_VISION && n_dyn)
        printf("    vertical-slash / grid in the vision encoder: full-attention encoders only (refused for "
               "Qwen2.5-VL's windows)\n");
    if (stack == OC_PLAN_DECODER && n_on_zipvl)
        printf("    %d of them on zipvl-tau layers: not applied there (prefill attends over ZipVL's set densely; "
               "'zipvl-tau T prefill heads' composes them)\n", (int)n_on_zipvl);
    if (stack == OC_PLAN_DECODER && n_composed)
        printf("    %d of them on zipvl-tau 'prefill heads' layers: composed (each pattern runs in prefill, then "
               "ZipVL keeps its set)\n", (int)n_composed);
    if (stack == OC_PLAN_DECODER) {
        int32_t n_kv = s->shape.n_layers * s->shape.n_kv_heads;
        if (st.n_budgeted_kv_heads)
            printf("  kv budgets: %d of %d kv heads, %d..%d tokens (mean %.0f), window %d; runtime: CPU executes, "
                   "OpenCL executes (SparseMM eviction after a dense prefill; the cache is allocated at the largest "
                   "budget + the answer room, oc_context_params.max_answer_tokens)\n",
                   (int)st.n_budgeted_kv_heads, (int)n_kv, (int)st.min_budget_tokens, (int)st.max_budget_tokens,
                   (double)st.sum_budget_tokens / st.n_budgeted_kv_heads, (int)plan->kv_window_tokens);
        else
            printf("  kv budgets: none (full cache)\n");
    }
    if (st.n_zipvl_layers) {
        printf("  zipvl-tau: %d layers:", (int)st.n_zipvl_layers);
        for (int32_t l = 0, e; l < s->shape.n_layers; l = e + 1) {
            for (e = l; e + 1 < s->shape.n_layers && s->zipvl_tau_ppm[e + 1] == s->zipvl_tau_ppm[l] &&
                        s->zipvl_heads_prefill[e + 1] == s->zipvl_heads_prefill[l];)
                e++;
            if (s->zipvl_tau_ppm[l] == 0) continue;
            if (e > l) printf(" %d-%d", (int)l, (int)e);
            else printf(" %d", (int)l);
            printf(" tau %g%s", (double)s->zipvl_tau_ppm[l] / OC_PLAN_PPM,
                   s->zipvl_heads_prefill[l] ? " (prefill heads)" : "");
        }
        if (stack != OC_PLAN_DECODER)
            printf("; runtime: refused on every backend (the vision encoder keeps no KV cache)\n");
        else if (n_zipvl_heads == st.n_zipvl_layers)
            printf("; runtime: CPU executes, OpenCL executes (ours: each layer prefills as its heads say, then ZipVL "
                   "keeps its important set T, Eq. 6-10)\n");
        else
            printf("; runtime: CPU executes, OpenCL executes (zipvl.txt Alg. 1: prefill attention over the important "
                   "set T, only T cached%s)\n", n_zipvl_heads ? "; the '(prefill heads)' layers: their own prefill, "
                   "then T kept (ours)" : "");
    }
    if (stack == OC_PLAN_DECODER) {   /* how the methods meet on a layer (kvcache/kv_cache.h) */
        int32_t H = s->shape.n_heads, G = s->shape.n_kv_heads, n_pat_kv = 0, n_z_kv = 0, n_pat_zh = 0;
        for (int32_t l = 0; l < s->shape.n_layers; l++) {
            int pat = 0, kv = 0;
            for (int32_t h = 0; h < H; h++) pat |= s->heads[(size_t)l * (size_t)H + (size_t)h].kind != OC_PATTERN_DENSE;
            for (int32_t g = 0; s->kv_budget_tokens && g < G; g++)
                kv |= s->kv_budget_tokens[(size_t)l * (size_t)G + (size_t)g] != OC_PLAN_KV_FULL;
            int z = s->zipvl_tau_ppm[l] != 0, zh = z && s->zipvl_heads_prefill[l];
            n_pat_kv += pat && kv && !z;
            n_z_kv += z && kv;
            n_pat_zh += pat && zh;
        }
        if (n_pat_kv || n_z_kv || n_pat_zh) {
            printf("  composes:");
            if (n_pat_kv)
                printf(" %d layer%s head patterns in prefill + kv-budget after it;", (int)n_pat_kv, n_pat_kv > 1 ? "s" : "");
            if (n_pat_zh)
                printf(" %d layer%s head patterns in prefill + ZipVL's set kept after it;", (int)n_pat_zh,
                       n_pat_zh > 1 ? "s" : "");
            if (n_z_kv) printf(" %d layer%s kv-budget within ZipVL's set;", (int)n_z_kv, n_z_kv > 1 ? "s" : "");
            printf(" each keeps its saving\n");
        }
    }
    if (s->n_lazy_groups) {
        printf("  lazy groups: %d (%d layers reuse Q/K):", (int)s->n_lazy_groups, (int)st.n_lazy_layers);
        for (int32_t i = 0; i < s->n_lazy_groups; i++)
            printf(" %d-%d %s", (int)s->lazy_groups[i].first_layer, (int)s->lazy_groups[i].last_layer,
                   oc_plan_lazy_mode_name(s->lazy_groups[i].mode));
        printf(stack == OC_PLAN_DECODER ? "; runtime: CPU executes, OpenCL executes\n"
                                        : "; runtime: refused on every backend (decoder only)\n");
    }
}

/* Do the budgets for a mean of per_head tokens per kv head fit a plan (each head at most
 * OC_PLAN_MAX_TOKENS)? When not, *most is the largest mean that fits (found by bisection: a head's
 * budget grows with the mean); the plan then holds the budgets for per_head again. */
static int budgets_fit(oc_plan *plan, long long per_head, long long *most) {
    const oc_stack_plan *d = &plan->stacks[OC_PLAN_DECODER];
    int64_t n = (int64_t)d->shape.n_layers * d->shape.n_kv_heads;
    oc_error e;
    if (oc_plan_validate(plan, &e) == OC_OK) return 1;
    long long lo = 0, hi = per_head;   /* lo fits (or is 0), hi does not */
    while (hi - lo > 1) {
        long long mid = lo + (hi - lo) / 2;
        if (oc_calib_plan_budgets(plan, mid * n, OC_CALIB_KV_RHO, &e) == OC_OK && oc_plan_validate(plan, &e) == OC_OK)
            lo = mid;
        else
            hi = mid;
    }
    *most = lo;
    oc_calib_plan_budgets(plan, per_head * n, OC_CALIB_KV_RHO, &e);
    return 0;
}

int oc_tool_plan(int argc, char **argv) {
    const char *path = NULL, *svg_path = NULL, *out_path = NULL;
    long long kv_budget = 0;
    oc_plan_model_shape model;
    memset(&model, 0, sizeof model);
    int check = 0, check_vision = 0;
    int first = argc > 1 && !strcmp(argv[1], "show") ? 2 : 1;
    for (int i = first; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        if (!strcmp(argv[i], "--svg") && i + 1 < argc) { svg_path = argv[++i]; continue; }
        if (!strcmp(argv[i], "-o") && i + 1 < argc) { out_path = argv[++i]; continue; }
        if (!strcmp(argv[i], "--kv-budget") && i + 1 < argc) {
            char *end;
            kv_budget = strtoll(argv[++i], &end, 10);
            if (*end || kv_budget < 1 || kv_budget > OC_PLAN_MAX_TOKENS) {
                fprintf(stderr, "ocellus plan: --kv-budget wants a token count 1..%d, got '%s'\n", OC_PLAN_MAX_TOKENS,
                        argv[i]);
                return 2;
            }
            continue;
        }
        if (!strcmp(argv[i], "--check-shape") && i + 1 < argc) {
            int32_t v[4];
            if (!parse_numbers(argv[++i], v, 4)) {
                fprintf(stderr, "ocellus plan: --check-shape wants L,H,KV,D (e.g. 28,12,2,128), got '%s'\n", argv[i]);
                return 2;
            }
            model.decoder = (oc_plan_shape){ v[0], v[1], v[2], v[3] };
            check = 1;
        } else if (!strcmp(argv[i], "--check-vision") && i + 1 < argc) {
            int32_t v[3];
            if (!parse_numbers(argv[++i], v, 3)) {
                fprintf(stderr, "ocellus plan: --check-vision wants L,H,D (e.g. 32,16,80), got '%s'\n", argv[i]);
                return 2;
            }
            model.vision = (oc_plan_shape){ v[0], v[1], v[1], v[2] };
            check_vision = 1;
        } else if (argv[i][0] == '-' || path) {
            fprintf(stderr, "ocellus plan: %s '%s' (ocellus plan --help lists the options)\n",
                    argv[i][0] == '-' ? "unknown option or missing value" : "a second plan file", argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) { usage(stderr); return 2; }
    /* -o writes only the re-budgeted plan: each without the other would do nothing, silently */
    if (!kv_budget != !out_path) {
        fprintf(stderr, "ocellus plan: %s\n", kv_budget ? "--kv-budget needs -o OUT.plan (where to write the "
                "re-budgeted plan)" : "-o writes a re-budgeted plan: give --kv-budget TOKENS too");
        return 2;
    }
    if (!oc_tool_output_ok("plan", "-o", out_path) || !oc_tool_output_ok("plan", "--svg", svg_path)) return 1;
    oc_plan *plan;
    oc_error err;
    if (oc_plan_load_file(&plan, path, NULL, &err) != OC_OK) {
        fprintf(stderr, "ocellus plan: %s\n", err.message);
        return 1;
    }
    printf("plan %s (format version %d)\n", path, oc_plan_format_version(plan));
    if (plan->calibration[0]) printf("calibrated: %s\n", plan->calibration);
    else printf("hand-written (no calibration line)\n");
    print_stack(plan, OC_PLAN_DECODER);
    print_stack(plan, OC_PLAN_VISION);
    printf("sink-fraction %g, kv-window %d\n", (double)plan->sink_fraction_ppm / OC_PLAN_PPM,
           (int)plan->kv_window_tokens);
    int rc = 0;
    const oc_stack_plan *dec = &plan->stacks[OC_PLAN_DECODER];
    if (dec->shape.n_layers > 0) {   /* the rules when methods meet on a layer (kvcache/kv_cache.h) */
        static oc_kv_policy pol;
        if (oc_kv_policy_build(&pol, dec, dec->shape.n_layers, dec->shape.n_kv_heads, plan->kv_window_tokens, path,
                               &err) != OC_OK) {
            fprintf(stderr, "ocellus plan: the runtime refuses it: %s\n", err.message);
            rc = 1;
        }
    }
    if (kv_budget) {
        const oc_stack_plan *d = &plan->stacks[OC_PLAN_DECODER];
        int64_t n = (int64_t)d->shape.n_layers * d->shape.n_kv_heads;
        long long most = 0;
        if (oc_calib_plan_budgets(plan, kv_budget * n, OC_CALIB_KV_RHO, &err)) {
            fprintf(stderr, "ocellus plan: %s: %s\n", path, err.message);
            rc = 1;
        } else if (!budgets_fit(plan, kv_budget, &most)) {
            /* say it in the option's terms, not as the one head's budget that overflowed */
            fprintf(stderr, "ocellus plan: --kv-budget %lld gives some kv head more than the %d tokens a plan may "
                    "hold; the most this plan takes is %lld\n", kv_budget, OC_PLAN_MAX_TOKENS, most);
            rc = 1;
        } else if (out_path && oc_plan_write_file(plan, out_path, &err)) {
            fprintf(stderr, "ocellus plan: %s\n", err.message);
            rc = 1;
        } else {
            printf("re-budgeted: %lld tokens per kv head on average (%lld in all), wrote %s\n", kv_budget,
                   (long long)(kv_budget * n), out_path);
        }
    }
    if (svg_path) {
        FILE *f = fopen(svg_path, "w");
        char title[600];
        snprintf(title, sizeof title, "%s%s%s", path, plan->calibration[0] ? ": " : " (hand-written)",
                 plan->calibration);
        if (!f || oc_plan_svg_write(plan, title, f) || fclose(f)) {
            fprintf(stderr, "ocellus plan: cannot write %s\n", svg_path);
            rc = 1;
        } else {
            printf("wrote %s\n", svg_path);
        }
    }
    if (check || check_vision) {
        if (!check) model.decoder = plan->stacks[OC_PLAN_DECODER].shape;
        /* unchecked vision: compare the plan with itself so only the decoder decides */
        if (!check_vision) model.vision = plan->stacks[OC_PLAN_VISION].shape;
        if (oc_plan_check_fits(plan, &model, &err) != OC_OK) {
            fprintf(stderr, "ocellus plan: %s: %s\n", path, err.message);
            rc = 1;
        } else {
            printf("fits: decoder %d,%d,%d,%d%s\n", (int)model.decoder.n_layers, (int)model.decoder.n_heads,
                   (int)model.decoder.n_kv_heads, (int)model.decoder.head_dim,
                   check_vision ? " and the vision encoder" : " (vision not checked)");
        }
    }
    oc_plan_free(plan);
    return rc;
}
