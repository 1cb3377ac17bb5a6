/* test_plan.c: the attention-plan text format: the example plan, canonical round trips (fixed and
 * random plans), every class of malformed input with its exact message, the model-fit refusal,
 * statistics, and allocation failure at every allocation (no leaks on any error path). */
#include "check.h"
#include "plan/plan.h"

#include <stdint.h>

#define EXAMPLE_PATH "examples/plans/qwen2vl-2b-example.plan"
#define HDR "ocellus-plan 1\nshape decoder layers 4 heads 4 kv-heads 2 head-dim 64\n"
#define HDR_V HDR "shape vision layers 4 heads 2 head-dim 32\n"
#define HDR2 "ocellus-plan 2\nshape decoder layers 4 heads 4 kv-heads 2 head-dim 64\n"
#define HDR3 "ocellus-plan 3\nshape decoder layers 4 heads 4 kv-heads 2 head-dim 64\n"
#define HDR3_V HDR3 "shape vision layers 4 heads 2 head-dim 32\n"
#define HDR4 "ocellus-plan 4\nshape decoder layers 4 heads 4 kv-heads 2 head-dim 64\n"


static char *read_text(const char *path, size_t *n_bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (buf) buf[n] = '\0';
    *n_bytes = n;
    return buf;
}

static oc_status parse_str(oc_plan **out, const char *text, oc_error *err) {
    return oc_plan_parse(out, text, strlen(text), NULL, NULL, err);
}

/* write -> text (malloc'd); NULL on failure */
static char *write_text(const oc_plan *plan, size_t *n_bytes) {
    oc_error err;
    size_t n;
    if (oc_plan_write(plan, NULL, 0, &n, &err) != OC_OK) return NULL;
    char *buf = malloc(n + 1);
    if (buf && oc_plan_write(plan, buf, n + 1, n_bytes, &err) != OC_OK) { free(buf); return NULL; }
    return buf;
}

/* parse -> write -> parse gives equal data, and the second write gives the same bytes */
static void check_round_trip(const oc_plan *plan, const char *what) {
    size_t n1, n2;
    char *t1 = write_text(plan, &n1);
    REQUIREF(t1, "%s: write failed", what);
    oc_plan *back = NULL;
    oc_error err;
    oc_status st = oc_plan_parse(&back, t1, n1, NULL, NULL, &err);
    CHECKF(st == OC_OK, "%s: written text does not parse: %s", what, st == OC_OK ? "" : err.message);
    if (st == OC_OK) {
        CHECKF(oc_plan_equal(plan, back), "%s: data differs after the round trip", what);
        char *t2 = write_text(back, &n2);
        CHECKF(t2 && n1 == n2 && memcmp(t1, t2, n1) == 0, "%s: write is not canonical", what);
        free(t2);
    }
    /* every written line is within the limit */
    size_t line_len = 0;
    for (size_t i = 0; i < n1; i++) {
        if (t1[i] == '\n') { CHECKF(line_len <= OC_PLAN_MAX_LINE_BYTES, "%s: line of %zu bytes", what, line_len); line_len = 0; }
        else line_len++;
    }
    oc_plan_free(back);
    free(t1);
}

/* ---- the example plan --------------------------------------------------------------------------- */

static void test_example_plan(void) {
    oc_plan *plan = NULL;
    oc_error err;
    oc_status st = oc_plan_load_file(&plan, EXAMPLE_PATH, NULL, &err);
    REQUIREF(st == OC_OK, "%s", err.message);
    const oc_stack_plan *d = &plan->stacks[OC_PLAN_DECODER], *v = &plan->stacks[OC_PLAN_VISION];
    CHECK(d->shape.n_layers == 28 && d->shape.n_heads == 12 && d->shape.n_kv_heads == 2 && d->shape.head_dim == 128);
    CHECK(v->shape.n_layers == 32 && v->shape.n_heads == 16 && v->shape.n_kv_heads == 16 && v->shape.head_dim == 80);
    CHECK(plan->sink_fraction_ppm == 100000 && plan->kv_window_tokens == 32);
    /* spot checks of the three assignment forms and the default */
    CHECK(oc_plan_head(plan, OC_PLAN_DECODER, 0, 7)->kind == OC_PATTERN_DENSE);
    CHECK(oc_plan_head(plan, OC_PLAN_DECODER, 2, 2)->kind == OC_PATTERN_SINK);
    CHECK(oc_plan_head(plan, OC_PLAN_DECODER, 2, 10)->kind == OC_PATTERN_INTRA_IMAGE_SINK);
    CHECK(oc_plan_head(plan, OC_PLAN_DECODER, 3, 11)->kind == OC_PATTERN_INTRA_IMAGE);
    CHECK(oc_plan_head(plan, OC_PLAN_DECODER, 12, 7)->kind == OC_PATTERN_SINK);
    CHECK(oc_plan_head(plan, OC_PLAN_DECODER, 12, 8)->kind == OC_PATTERN_INTRA_IMAGE_SINK);
    CHECK(oc_plan_head(plan, OC_PLAN_DECODER, 5, 9)->kind == OC_PATTERN_DENSE);
    const oc_head_pattern *a = oc_plan_head(plan, OC_PLAN_VISION, 8, 5);
    CHECK(a->kind == OC_PATTERN_A_SHAPE && a->n_sink == 64 && a->n_local == 512);
    CHECK(oc_plan_head(plan, OC_PLAN_VISION, 24, 0)->kind == OC_PATTERN_DENSE);
    CHECK(d->kv_budget_tokens[0] == OC_PLAN_KV_FULL && d->kv_budget_tokens[2 * 2] == 512 &&
          d->kv_budget_tokens[2 * 10 + 1] == 1024 && d->kv_budget_tokens[2 * 27 + 1] == 128);
    CHECK(d->zipvl_tau_ppm[1] == 0 && d->zipvl_tau_ppm[26] == 0 && d->zipvl_tau_ppm[27] == 975000);
    /* the showcase plan is consistent: a ZipVL layer's prefill attends over its important set
     * densely, so no sparse head may sit on one (`ocellus plan` would report it not applied) */
    for (int32_t l = 0; l < 28; l++)
        for (int32_t h = 0; d->zipvl_tau_ppm[l] != 0 && h < 12; h++)
            CHECK(oc_plan_head(plan, OC_PLAN_DECODER, l, h)->kind == OC_PATTERN_DENSE);
    REQUIRE(d->n_lazy_groups == 3);
    CHECK(d->lazy_groups[0].first_layer == 4 && d->lazy_groups[0].last_layer == 6 && d->lazy_groups[0].mode == OC_LAZY_VLA);
    CHECK(d->lazy_groups[2].first_layer == 15 && d->lazy_groups[2].last_layer == 17);
    CHECK(v->kv_budget_tokens == NULL && v->n_lazy_groups == 0);
    /* BlindSight reports ~60% sparse heads in Qwen models; the example is built to match */
    oc_plan_stats s;
    oc_plan_stats_get(plan, OC_PLAN_DECODER, &s);
    CHECK(s.n_heads == 336 && s.n_sparse == 202 && s.n_per_pattern[OC_PATTERN_DENSE] == 134);
    CHECK(s.n_per_pattern[OC_PATTERN_SINK] + s.n_per_pattern[OC_PATTERN_INTRA_IMAGE] +
          s.n_per_pattern[OC_PATTERN_INTRA_IMAGE_SINK] == 202);
    CHECK(s.n_budgeted_kv_heads == 52 && s.min_budget_tokens == 128 && s.max_budget_tokens == 1024);
    CHECK(s.n_zipvl_layers == 1 && s.n_lazy_layers == 6);
    oc_plan_stats_get(plan, OC_PLAN_VISION, &s);
    CHECK(s.n_heads == 512 && s.n_per_pattern[OC_PATTERN_A_SHAPE] == 96 && s.n_sparse == 96);
    check_round_trip(plan, "example");
    oc_plan_free(plan);
}

/* The file as written with CRLF line ends reads as the same plan. */
static void test_crlf(void) {
    size_t n;
    char *lf = read_text(EXAMPLE_PATH, &n);
    REQUIRE(lf);
    char *crlf = malloc(2 * n + 1);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (lf[i] == '\n') crlf[m++] = '\r';
        crlf[m++] = lf[i];
    }
    oc_plan *a = NULL, *b = NULL;
    oc_error err;
    CHECK(oc_plan_parse(&a, lf, n, NULL, NULL, &err) == OC_OK);
    oc_status st = oc_plan_parse(&b, crlf, m, NULL, NULL, &err);
    CHECKF(st == OC_OK, "%s", err.message);
    CHECK(a && b && oc_plan_equal(a, b));
    oc_plan_free(a);
    oc_plan_free(b);
    /* a final CRLF-less CR is dropped too; no final newline is fine */
    const char *t = HDR "decoder default sink\r";
    CHECK(parse_str(&a, t, &err) == OC_OK && oc_plan_head(a, OC_PLAN_DECODER, 3, 3)->kind == OC_PATTERN_SINK);
    oc_plan_free(a);
    free(lf);
    free(crlf);
}

/* ---- round trips --------------------------------------------------------------------------------- */

static void test_round_trip_small(void) {
    const char *texts[] = {
        HDR,
        HDR "decoder default sink\n",
        HDR_V "sink-fraction 0.25\nkv-window 0\ndecoder layer all kv-heads 1 kv-budget 7\n"
              "vision layer 1-2 heads 1 a-shape(sink=0,local=1)\nvision lazy-group 0-3 mode gla\n",
        HDR "decoder layer 0 dense sink intra-image intra-image+sink\n"
            "decoder layer 1-3 heads 0-1,3 a-shape(sink=128,local=1024)\n"
            "decoder layer 2 zipvl-tau 1\ndecoder layer 3 zipvl-tau 0.000001\n"
            "decoder lazy-group 2-3 mode gla\ndecoder lazy-group 0-1 mode vla\n",
    };
    for (size_t i = 0; i < OC_ARRAY_LEN(texts); i++) {
        oc_plan *plan = NULL;
        oc_error err;
        oc_status st = parse_str(&plan, texts[i], &err);
        CHECKF(st == OC_OK, "text %zu: %s", i, err.message);
        if (st == OC_OK) check_round_trip(plan, texts[i]);
        oc_plan_free(plan);
    }
    /* 2d-boundary (version 3): the pairs in their order, written back as version 3; a version-2
     * plan still writes version 2 */
    static const char v3[] = HDR3 "decoder layer 1 heads 0,2 2d-boundary(text-text=vertical-slash(vertical=1000,"
                             "slash=1024),text-vision=dense,vision-text=a-shape(sink=4,local=64),vision-vision=grid("
                             "stride=auto,lines=v+s,max-stride=1024))\n";
    oc_plan *p3 = NULL;
    oc_error e3;
    REQUIREF(parse_str(&p3, v3, &e3) == OC_OK, "%s", e3.message);
    const oc_head_pattern *hp = oc_plan_head(p3, OC_PLAN_DECODER, 1, 2);
    CHECK(hp->kind == OC_PATTERN_BOUNDARY_2D && hp->pair[0][0].kind == OC_PATTERN_VERTICAL_SLASH &&
          hp->pair[0][0].n_vertical == 1000 && hp->pair[0][1].kind == OC_PATTERN_DENSE &&
          hp->pair[1][0].kind == OC_PATTERN_A_SHAPE && hp->pair[1][0].n_local == 64 &&
          hp->pair[1][1].kind == OC_PATTERN_GRID && hp->pair[1][1].grid_lines == (OC_GRID_VLINE | OC_GRID_SLASH));
    CHECK(oc_plan_format_version(p3) == 3);
    check_round_trip(p3, "2d-boundary");
    size_t n3;
    char *t3 = write_text(p3, &n3);
    CHECK(t3 && strncmp(t3, "ocellus-plan 3\n", 15) == 0 && strstr(t3, "2d-boundary(text-text=vertical-slash"));
    free(t3);
    oc_plan_free(p3);
    REQUIRE(parse_str(&p3, HDR2 "decoder default q-boundary(text=dense,vision=dense)\n", &e3) == OC_OK);
    CHECK(oc_plan_format_version(p3) == 2);
    oc_plan_free(p3);
    /* zipvl-tau's prefill word (version 4): "heads" kept per layer and written back as version 4,
     * "set" is the default (Alg. 1) and writes no word, so such a plan stays version 1 */
    REQUIRE(parse_str(&p3, HDR4 "decoder layer 1 heads 0 a-shape(sink=4,local=64)\n"
                           "decoder layer 1-2 zipvl-tau 0.975 prefill heads\ndecoder layer 3 zipvl-tau 0.9 prefill set\n",
                      &e3) == OC_OK);
    CHECK(p3->stacks[0].zipvl_heads_prefill[1] == 1 && p3->stacks[0].zipvl_heads_prefill[2] == 1 &&
          p3->stacks[0].zipvl_heads_prefill[3] == 0 && p3->stacks[0].zipvl_tau_ppm[3] == 900000);
    CHECK(oc_plan_format_version(p3) == 4);
    check_round_trip(p3, "zipvl prefill heads");
    t3 = write_text(p3, &n3);
    CHECK(t3 && strncmp(t3, "ocellus-plan 4\n", 15) == 0 && strstr(t3, "decoder layer 1-2 zipvl-tau 0.975 prefill heads\n") &&
          strstr(t3, "decoder layer 3 zipvl-tau 0.9\n"));
    free(t3);
    p3->stacks[0].zipvl_heads_prefill[1] = p3->stacks[0].zipvl_heads_prefill[2] = 0;
    CHECK(oc_plan_format_version(p3) == 1);
    p3->stacks[0].zipvl_heads_prefill[0] = 1;   /* without a tau: refused */
    CHECK(oc_plan_validate(p3, &e3) == OC_ERR_INVALID && strstr(e3.message, "'prefill heads' without a zipvl-tau"));
    oc_plan_free(p3);
    /* lazy groups come out sorted whatever the input order */
    oc_plan *plan = NULL;
    oc_error err;
    REQUIRE(parse_str(&plan, texts[3], &err) == OC_OK);
    CHECK(plan->stacks[0].lazy_groups[0].first_layer == 0 && plan->stacks[0].lazy_groups[1].first_layer == 2);
    oc_plan_free(plan);
}

/* The exact canonical text of a small plan: what calibrate's output will look like. */
static void test_canonical_text(void) {
    oc_plan *plan = NULL;
    oc_error err;
    REQUIRE(parse_str(&plan, HDR "decoder default sink\n  decoder\tlayer 1 heads all dense # c\n"
                               "decoder layer 2 heads 1 intra-image\ndecoder layer 3 sink dense intra-image dense\n"
                               "decoder layer 0-3 kv-budget 64 full\ndecoder layer 1-2 zipvl-tau 0.975\n", &err) == OC_OK);
    size_t n;
    char *t = write_text(plan, &n);
    REQUIRE(t);
    const char *body = strstr(t, "shape decoder");
    const char *want =
        "shape decoder layers 4 heads 4 kv-heads 2 head-dim 64\n"
        "sink-fraction 0.1\n"
        "kv-window 32\n"
        "\n"
        "decoder default sink\n"
        "decoder layer 1 heads all dense\n"
        "decoder layer 2 heads 1 intra-image\n"
        "decoder layer 3 sink dense intra-image dense\n"
        "decoder layer all kv-budget 64 full\n"
        "decoder layer 1-2 zipvl-tau 0.975\n";
    CHECKF(body && strcmp(body, want) == 0, "canonical text:\n%s", t);
    CHECK(strncmp(t, "ocellus-plan 1\n# ", 17) == 0);
    free(t);
    oc_plan_free(plan);
}

/* A random part of a boundary head: dense, a-shape, vertical-slash or grid. */
static void random_part(check_rng *rng, oc_modal_pattern *mp) {
    static const oc_pattern_kind kinds[4] = { OC_PATTERN_DENSE, OC_PATTERN_A_SHAPE, OC_PATTERN_VERTICAL_SLASH,
                                              OC_PATTERN_GRID };
    mp->kind = kinds[check_rng_int(rng, 0, 3)];
    if (mp->kind == OC_PATTERN_A_SHAPE) { mp->n_sink = check_rng_int(rng, 0, 512); mp->n_local = check_rng_int(rng, 1, 8192); }
    if (mp->kind == OC_PATTERN_VERTICAL_SLASH) { mp->n_vertical = check_rng_int(rng, 0, 4096); mp->n_slash = check_rng_int(rng, 1, 4096); }
    if (mp->kind == OC_PATTERN_GRID) {
        mp->grid_stride = check_rng_int(rng, 0, 300);
        mp->grid_max_stride = check_rng_int(rng, 2, 1024);
        mp->grid_lines = check_rng_int(rng, 1, 7);
    }
}

/* Random plans built in memory, including very wide layers with many distinct a-shapes (the writer
 * must fall back from the row form to per-pattern lines to stay under the line limit). */
static void test_round_trip_random(void) {
    check_rng rng = { 0x9e3779b97f4a7c15ull };
    for (int iter = 0; iter < 200; iter++) {
        int wide = iter % 20 == 0;
        oc_plan_shape dec = { check_rng_int(&rng, 1, wide ? 8 : 40), 0, check_rng_int(&rng, 1, 8), check_rng_int(&rng, 1, 256) };
        dec.n_heads = dec.n_kv_heads * (wide ? OC_PLAN_MAX_HEADS / dec.n_kv_heads : check_rng_int(&rng, 1, 8));
        oc_plan_shape vis = { iter % 3 ? check_rng_int(&rng, 1, 40) : 0, 0, 0, check_rng_int(&rng, 1, 128) };
        vis.n_heads = vis.n_kv_heads = check_rng_int(&rng, 1, 24);
        oc_plan *plan = NULL;
        oc_error err;
        REQUIREF(oc_plan_create(&plan, &dec, &vis, NULL, &err) == OC_OK, "%s", err.message);
        plan->sink_fraction_ppm = check_rng_int(&rng, 1, OC_PLAN_PPM);
        plan->kv_window_tokens = check_rng_int(&rng, 0, 64);
        for (int s = 0; s < OC_PLAN_N_STACKS; s++) {
            oc_stack_plan *sp = &plan->stacks[s];
            int32_t n = sp->shape.n_layers * sp->shape.n_heads;
            int style = check_rng_int(&rng, 0, 3);   /* mostly-one-pattern vs. noisy layers */
            for (int32_t i = 0; i < n; i++) {
                oc_head_pattern *p = &sp->heads[i];
                int k = style == 0 && check_rng_int(&rng, 0, 9) ? 0 : check_rng_int(&rng, 0, OC_PATTERN_COUNT - 1);
                if (!oc_plan_pattern_allowed((oc_plan_stack)s, (oc_pattern_kind)k)) k = OC_PATTERN_A_SHAPE;
                p->kind = (oc_pattern_kind)k;
                if (k == OC_PATTERN_A_SHAPE) {
                    p->n_sink = wide ? check_rng_int(&rng, 0, OC_PLAN_MAX_TOKENS) : 128;
                    p->n_local = wide ? check_rng_int(&rng, 1, OC_PLAN_MAX_TOKENS) : 1024 << check_rng_int(&rng, 0, 2);
                } else if (k == OC_PATTERN_VERTICAL_SLASH) {   /* Table 3 sizes, or anything in range */
                    p->n_vertical = wide ? check_rng_int(&rng, 0, OC_PLAN_MAX_TOKENS) : 1000 * check_rng_int(&rng, 1, 2);
                    p->n_slash = wide ? check_rng_int(&rng, 1, OC_PLAN_MAX_TOKENS) : 1024 << check_rng_int(&rng, 0, 2);
                } else if (k == OC_PATTERN_GRID) {
                    p->grid_stride = check_rng_int(&rng, 0, 1) ? 0 : check_rng_int(&rng, 1, wide ? OC_PLAN_MAX_TOKENS : 1024);
                    p->grid_max_stride = wide ? check_rng_int(&rng, 2, OC_PLAN_MAX_TOKENS) : 1024;
                    p->grid_lines = check_rng_int(&rng, 1, 7);
                } else if (k == OC_PATTERN_Q_BOUNDARY) {   /* each modality: dense, a-shape, vertical-slash or grid */
                    for (int m = 0; m < OC_N_MODALITIES; m++) random_part(&rng, &p->modal[m]);
                } else if (k == OC_PATTERN_BOUNDARY_2D) {   /* each modality pair: the same kinds */
                    for (int m = 0; m < OC_N_MODALITIES * OC_N_MODALITIES; m++)
                        random_part(&rng, &p->pair[m / OC_N_MODALITIES][m % OC_N_MODALITIES]);
                }
            }
            for (int32_t l = 0; l < sp->shape.n_layers; l++) {
                if (check_rng_int(&rng, 0, 1)) sp->zipvl_tau_ppm[l] = check_rng_int(&rng, 1, OC_PLAN_PPM);
                if (sp->zipvl_tau_ppm[l] && check_rng_int(&rng, 0, 3) == 0) sp->zipvl_heads_prefill[l] = 1;
                for (int32_t k = 0; sp->kv_budget_tokens && k < sp->shape.n_kv_heads; k++)
                    if (check_rng_int(&rng, 0, 2))
                        sp->kv_budget_tokens[l * sp->shape.n_kv_heads + k] =
                            check_rng_int(&rng, plan->kv_window_tokens ? plan->kv_window_tokens : 1, OC_PLAN_MAX_TOKENS);
            }
            for (int g = 0; sp->shape.n_layers && g < 6; g++) {
                int32_t a = check_rng_int(&rng, 0, sp->shape.n_layers - 1);
                int32_t b = a + check_rng_int(&rng, 0, 3);
                /* may be refused (overlap, range, size 1): that is part of the test */
                oc_plan_add_lazy_group(plan, (oc_plan_stack)s, a, b,
                                       s == OC_PLAN_VISION ? OC_LAZY_GLA : (oc_lazy_mode)check_rng_int(&rng, 0, 1), NULL);
            }
        }
        CHECKF(oc_plan_validate(plan, &err) == OC_OK, "iter %d: %s", iter, err.message);
        char what[32];
        snprintf(what, sizeof what, "random plan %d", iter);
        check_round_trip(plan, what);
        oc_plan_free(plan);
    }
}

/* ---- malformed plans: exact messages -------------------------------------------------------------- */

typedef struct bad_case {
    const char *text;
    size_t n_bytes;     /* 0: strlen(text) */
    const char *message;
} bad_case;

static char long_line[OC_PLAN_MAX_LINE_BYTES + 200];

static void test_bad_plans(void) {
    static const bad_case cases[] = {
        /* header and file level */
        { "", 0, "plan: empty file (a plan starts with the line 'ocellus-plan 1')" },
        { "shape decoder layers 4 heads 4 kv-heads 2 head-dim 64\n", 0,
          "plan:1: missing header: a plan starts with the line 'ocellus-plan 1'" },
        { "\nocellus-plan 1\n", 0, "plan:1: missing header: a plan starts with the line 'ocellus-plan 1'" },
        { "\xef\xbb\xbfocellus-plan 1\n", 0, "plan:1: non-ASCII byte 0xef in column 1 (only comments may hold UTF-8)" },
        { "ocellus-plan 5\n", 0, "plan:1: unsupported plan version '5' (this build reads versions 1 to 4)" },
        { "ocellus-plan 2\n", 0, "plan: missing 'shape decoder ...' line (a plan states the decoder it fits)" },
        { "ocellus-plan 1.0\n", 0, "plan:1: unsupported plan version '1.0' (this build reads versions 1 to 4)" },
        { "ocellus-plan\n", 0, "plan:1: missing version after 'ocellus-plan'" },
        { "ocellus-plan 1 extra\n", 0, "plan:1: unexpected 'extra' at end of statement" },
        { "ocellus-plan 1\n", 0, "plan: missing 'shape decoder ...' line (a plan states the decoder it fits)" },
        { "ocellus-plan 1\n# only settings\nsink-fraction 0.2\n", 0,
          "plan: missing 'shape decoder ...' line (a plan states the decoder it fits)" },
        { HDR "ocellus-plan 1\n", 0, "plan:3: header 'ocellus-plan' repeated (it belongs on line 1 only)" },
        { HDR "foo bar\n", 0,
          "plan:3: unknown statement 'foo' (expected shape, sink-fraction, kv-window, calibration, decoder, vision)" },
        /* the brief's example message, on line 7 */
        { "ocellus-plan 1\n# c\nshape decoder layers 28 heads 12 kv-heads 2 head-dim 128\n\n"
          "decoder default dense\n   # c\ndecoder layer 5 heads 0-3,7 sinc\n", 0,
          "plan:7: unknown pattern 'sinc' (expected dense, sink, intra-image, intra-image+sink, a-shape)" },
        { HDR "decoder layer 0 dense sink Dense sink\n", 0,
          "plan:3: unknown pattern 'Dense' (expected dense, sink, intra-image, intra-image+sink, a-shape)" },
        { HDR "decoder default sink-with-a-very-long-name-that-goes-on-and-on-and-on\n", 0,
          "plan:3: unknown pattern 'sink-with-a-very-long-name-that-goes-...' (expected dense, sink, "
          "intra-image, intra-image+sink, a-shape)" },
        { HDR "decoder layers 0 dense\n", 0,
          "plan:3: unknown decoder statement 'layers' (expected layer, default, lazy-group)" },
        { HDR "decoder\n", 0, "plan:3: missing statement after 'decoder' (expected layer, default, lazy-group)" },
        /* shape lines */
        { "ocellus-plan 1\nshape decoder layers x4 heads 4 kv-heads 2 head-dim 64\n", 0,
          "plan:2: bad number 'x4' for layers (expected a whole number 1..256)" },
        { "ocellus-plan 1\nshape decoder layers -4 heads 4 kv-heads 2 head-dim 64\n", 0,
          "plan:2: bad number '-4' for layers (expected a whole number 1..256)" },
        { "ocellus-plan 1\nshape decoder layers +4 heads 4 kv-heads 2 head-dim 64\n", 0,
          "plan:2: bad number '+4' for layers (expected a whole number 1..256)" },
        { "ocellus-plan 1\nshape decoder layers 99999999999999999999999 heads 4 kv-heads 2 head-dim 64\n", 0,
          "plan:2: layers 99999999999999999999999 out of range (1..256)" },
        { "ocellus-plan 1\nshape decoder layers 0 heads 4 kv-heads 2 head-dim 64\n", 0,
          "plan:2: layers 0 out of range (1..256)" },
        { "ocellus-plan 1\nshape decoder layers 4 heads 4 kv-heads 2 head-dim 4096\n", 0,
          "plan:2: head-dim 4096 out of range (1..1024)" },
        { "ocellus-plan 1\nshape decoder layers 4 heads 12 kv-heads 5 head-dim 64\n", 0,
          "plan:2: 12 heads cannot share 5 kv-heads (heads must be a multiple of kv-heads)" },
        { "ocellus-plan 1\nshape decoder layers 4 heads 2 kv-heads 4 head-dim 64\n", 0,
          "plan:2: 2 heads cannot share 4 kv-heads (heads must be a multiple of kv-heads)" },
        { "ocellus-plan 1\nshape decoder layers 4 head 4 kv-heads 2 head-dim 64\n", 0,
          "plan:2: expected 'heads', got 'head'" },
        { "ocellus-plan 1\nshape decoder layers 4 heads 4\n", 0, "plan:2: missing 'kv-heads' at end of line" },
        { "ocellus-plan 1\nshape decoder layers 4 heads 4 kv-heads\n", 0, "plan:2: missing kv-heads at end of line" },
        { "ocellus-plan 1\nshape decoder layers 4 heads 4 kv-heads 2 head-dim 64 64\n", 0,
          "plan:2: unexpected '64' at end of statement" },
        { "ocellus-plan 1\nshape encoder layers 4\n", 0,
          "plan:2: unknown stack 'encoder' after 'shape' (expected decoder or vision)" },
        { HDR "shape vision layers 4 heads 2 kv-heads 2 head-dim 32\n", 0, "plan:3: expected 'head-dim', got 'kv-heads'" },
        { HDR "shape decoder layers 4 heads 4 kv-heads 2 head-dim 64\n", 0,
          "plan:3: duplicate 'shape decoder' (first on line 2)" },
        { "ocellus-plan 1\ndecoder default sink\nshape decoder layers 4 heads 4 kv-heads 2 head-dim 64\n", 0,
          "plan:2: decoder statement before the 'shape decoder' line (a stack's shape comes first)" },
        { HDR "vision default dense\n", 0,
          "plan:3: vision statement before the 'shape vision' line (a stack's shape comes first)" },
        /* settings */
        { HDR "sink-fraction 0.1 0.2\n", 0, "plan:3: unexpected '0.2' at end of statement" },
        { HDR "sink-fraction 0\n", 0, "plan:3: sink-fraction 0 out of range (0 < value <= 1)" },
        { HDR "sink-fraction 1.5\n", 0, "plan:3: sink-fraction 1.5 out of range (0 < value <= 1)" },
        { HDR "sink-fraction 100000000000000000000.5\n", 0,
          "plan:3: sink-fraction 100000000000000000000.5 out of range (0 < value <= 1)" },
        { HDR "sink-fraction -0.1\n", 0,
          "plan:3: bad number '-0.1' for sink-fraction (expected a decimal such as 0.975)" },
        { HDR "sink-fraction 1e-1\n", 0,
          "plan:3: bad number '1e-1' for sink-fraction (expected a decimal such as 0.975)" },
        { HDR "sink-fraction .5\n", 0, "plan:3: bad number '.5' for sink-fraction (expected a decimal such as 0.975)" },
        { HDR "sink-fraction 1.\n", 0, "plan:3: bad number '1.' for sink-fraction (expected a decimal such as 0.975)" },
        { HDR "sink-fraction 0.1234567\n", 0, "plan:3: too many decimals in '0.1234567' for sink-fraction (at most 6)" },
        { HDR "sink-fraction\n", 0, "plan:3: missing sink-fraction value at end of line" },
        { HDR "sink-fraction 0.1\nsink-fraction 0.2\n", 0, "plan:4: duplicate sink-fraction (first on line 3)" },
        { HDR "kv-window -1\n", 0, "plan:3: bad number '-1' for kv-window (expected a whole number 0..16777216)" },
        { HDR "kv-window 16777217\n", 0, "plan:3: kv-window 16777217 out of range (0..16777216)" },
        { HDR "kv-window 8\nkv-window 8\n", 0, "plan:4: duplicate kv-window (first on line 3)" },
        /* head assignments */
        { HDR "decoder layer 1 heads 4 sink\n", 0, "plan:3: head 4 out of range (the decoder has 4 heads: 0..3)" },
        { HDR "decoder layer 1 heads 0,2-9 sink\n", 0, "plan:3: head 9 out of range (the decoder has 4 heads: 0..3)" },
        { HDR "decoder layer 4 heads all sink\n", 0, "plan:3: layer 4 out of range (the decoder has 4 layers: 0..3)" },
        { HDR "decoder layer 2-9 heads all sink\n", 0, "plan:3: layer 9 out of range (the decoder has 4 layers: 0..3)" },
        { HDR "decoder layer 3-1 heads all sink\n", 0, "plan:3: bad layer range '3-1' (first layer after last)" },
        { HDR "decoder layer 1-2-3 heads all sink\n", 0, "plan:3: bad layer range '1-2-3' (expected N, N-M or all)" },
        { HDR "decoder layer -1 heads all sink\n", 0, "plan:3: bad layer range '-1' (expected N, N-M or all)" },
        { HDR "decoder layer\n", 0, "plan:3: missing layer range at end of line" },
        { HDR "decoder layer 1 heads 0-2 sink\ndecoder layer 0-1 heads 2 dense\n", 0,
          "plan:4: decoder layer 1 head 2 already set on line 3" },
        { HDR "decoder layer 1 dense dense sink sink\ndecoder layer 1 heads 3 sink\n", 0,
          "plan:4: decoder layer 1 head 3 already set on line 3" },
        { HDR "decoder layer 1 heads 0-2,1 sink\n", 0, "plan:3: head 1 listed twice in '0-2,1'" },
        { HDR "decoder layer 1 heads 0- sink\n", 0, "plan:3: bad head list '0-' (expected e.g. 0-3,7 or all)" },
        { HDR "decoder layer 1 heads 0,,1 sink\n", 0, "plan:3: bad head list '0,,1' (expected e.g. 0-3,7 or all)" },
        { HDR "decoder layer 1 heads 3-1 sink\n", 0, "plan:3: bad head list '3-1' (range 3-1 runs backwards)" },
        { HDR "decoder layer 1 heads 1\n", 0, "plan:3: missing pattern at end of line" },
        { HDR "decoder layer 1 heads 1 sink dense\n", 0, "plan:3: unexpected 'dense' at end of statement" },
        { HDR "decoder layer 0 dense sink\n", 0, "plan:3: decoder layer 0 lists 2 head patterns; the decoder has 4 heads" },
        { HDR "decoder layer 0-1 dense sink dense sink dense\n", 0,
          "plan:3: decoder layer 0-1 lists 5 head patterns; the decoder has 4 heads" },
        { HDR "decoder default sink\ndecoder default dense\n", 0, "plan:4: duplicate 'decoder default' (first on line 3)" },
        { HDR "decoder default a-shape\n", 0,
          "plan:3: a-shape needs its sizes: a-shape(sink=N,local=N), e.g. a-shape(sink=128,local=1024)" },
        { HDR "decoder default a-shape(128,1024)\n", 0,
          "plan:3: bad a-shape 'a-shape(128,1024)' (expected a-shape(sink=N,local=N))" },
        { HDR "decoder default a-shape(sink=,local=4)\n", 0,
          "plan:3: bad a-shape 'a-shape(sink=,local=4)' (expected a-shape(sink=N,local=N))" },
        { HDR "decoder default a-shape(sink=4,local=)\n", 0,
          "plan:3: bad a-shape 'a-shape(sink=4,local=)' (expected a-shape(sink=N,local=N))" },
        { HDR "decoder default a-shape(sink=1,local=0)\n", 0, "plan:3: a-shape local 0 out of range (1..16777216)" },
        { HDR "decoder default a-shape(sink=99999999999,local=8)\n", 0,
          "plan:3: a-shape sink 99999999999 out of range (0..16777216)" },
        { HDR "decoder default a-shape(sink=-1,local=8)\n", 0,
          "plan:3: bad number '-1' for a-shape sink (expected a whole number 0..16777216)" },
        /* vision restrictions */
        { HDR_V "vision layer 0 heads 0 sink\n", 0,
          "plan:4: pattern 'sink' is for decoder heads only (BlindSight masks need text and image spans); "
          "vision heads take dense, a-shape, vertical-slash or grid" },
        /* version 2: MMInference's dynamic patterns (mminference.txt Table 3) */
        { HDR "decoder default vertical-slash(vertical=1000,slash=1024)\n", 0,
          "plan:3: pattern 'vertical-slash' needs format version 2 (the header 'ocellus-plan 2')" },
        { HDR "decoder default grid(stride=auto,lines=h,max-stride=1024)\n", 0,
          "plan:3: pattern 'grid' needs format version 2 (the header 'ocellus-plan 2')" },
        { HDR2 "decoder default vertical-slash\n", 0,
          "plan:3: vertical-slash needs its parameters: vertical-slash(vertical=N,slash=N)" },
        { HDR2 "decoder default vertical-slash(slash=1,vertical=2)\n", 0,
          "plan:3: bad vertical-slash 'vertical-slash(slash=1,vertical=2)' (expected "
          "vertical-slash(vertical=N,slash=N))" },
        { HDR2 "decoder default vertical-slash(vertical=1,slash=0)\n", 0,
          "plan:3: vertical-slash slash 0 out of range (1..16777216)" },
        { HDR2 "decoder default vertical-slash(vertical=1,slash=2,x=3)\n", 0,
          "plan:3: bad vertical-slash 'vertical-slash(vertical=1,slash=2,x=3)' (expected "
          "vertical-slash(vertical=N,slash=N))" },
        { HDR2 "decoder default vertical-slash(vertical=,slash=2)\n", 0,
          "plan:3: bad vertical-slash 'vertical-slash(vertical=,slash=2)' (expected vertical-slash(vertical=N,slash=N))" },
        { HDR2 "decoder default vertical-slashes(vertical=1,slash=2)\n", 0,
          "plan:3: unknown pattern 'vertical-slashes(vertical=1,slash=2)' (expected dense, sink, intra-image, "
          "intra-image+sink, a-shape, vertical-slash, grid, q-boundary)" },
        /* q-boundary (MMInference Alg. 2): a text and a vision pattern, dense, a-shape, VS or grid */
        { HDR "decoder default q-boundary(text=dense,vision=dense)\n", 0,
          "plan:3: pattern 'q-boundary' needs format version 2 (the header 'ocellus-plan 2')" },
        { HDR2 "decoder default q-boundary\n", 0,
          "plan:3: q-boundary needs its patterns: q-boundary(text=P,vision=P), P dense, a-shape(..), "
          "vertical-slash(..) or grid(..)" },
        { HDR2 "decoder default q-boundary(text=dense)\n", 0,
          "plan:3: bad q-boundary 'q-boundary(text=dense)' (expected q-boundary(text=P,vision=P), P dense, "
          "a-shape(..), vertical-slash(..) or grid(..))" },
        { HDR2 "decoder default q-boundary(vision=dense,text=dense)\n", 0,
          "plan:3: bad q-boundary 'q-boundary(vision=dense,text=dense)' (expected q-boundary(text=P,vision=P), P "
          "dense, a-shape(..), vertical-slash(..) or grid(..))" },
        { HDR2 "decoder default q-boundary(text=sink,vision=dense)\n", 0,
          "plan:3: q-boundary's text pattern is sink (expected dense, a-shape, vertical-slash or grid)" },
        { HDR2 "decoder default q-boundary(text=dense,vision=q-boundary(text=dense,vision=dense))\n", 0,
          "plan:3: q-boundary's vision pattern is q-boundary (expected dense, a-shape, vertical-slash or grid)" },
        { HDR2 "decoder default q-boundary(text=vertical-slash(vertical=1,slash=0),vision=dense)\n", 0,
          "plan:3: vertical-slash slash 0 out of range (1..16777216)" },
        /* zipvl-tau's prefill word: version 4, "set" or "heads" */
        { HDR3 "decoder layer 1 zipvl-tau 0.9 prefill heads\n", 0,
          "plan:3: zipvl-tau's 'prefill' word needs format version 4 (the header 'ocellus-plan 4')" },
        { HDR4 "decoder layer 1 zipvl-tau 0.9 prefill dense\n", 0,
          "plan:3: zipvl-tau prefill 'dense': expected set (attention over ZipVL's set, Alg. 1) or heads (the "
          "layer's head patterns, then ZipVL keeps its set)" },
        { HDR4 "decoder layer 1 zipvl-tau 0.9 heads\n", 0,
          "plan:3: unexpected 'heads' after zipvl-tau's threshold (expected 'prefill set' or 'prefill heads')" },
        { HDR4 "decoder layer 1 zipvl-tau 0.9 prefill heads x\n", 0, "plan:3: unexpected 'x' at end of statement" },
        { HDR4 "decoder layer 1 zipvl-tau 0.9 prefill\n", 0,
          "plan:3: zipvl-tau prefill needs set (attention over ZipVL's set, Alg. 1) or heads (the layer's head "
          "patterns, then ZipVL keeps its set)" },
        /* 2d-boundary (MMInference Alg. 3): one pattern per (query, key) modality pair, version 3 */
        { HDR2 "decoder default 2d-boundary(text-text=dense,text-vision=dense,vision-text=dense,vision-vision=dense)\n", 0,
          "plan:3: pattern '2d-boundary' needs format version 3 (the header 'ocellus-plan 3')" },
        { HDR3 "decoder default 2d-boundary\n", 0,
          "plan:3: 2d-boundary needs its patterns: 2d-boundary(text-text=P,text-vision=P,vision-text=P,vision-vision=P), "
          "P dense, a-shape(..), vertical-slash(..) or grid(..)" },
        { HDR3 "decoder default 2d-boundary(text-text=dense,text-vision=dense,vision-text=dense)\n", 0,
          "plan:3: bad 2d-boundary '2d-boundary(text-text=dense,text-visi...' (expected "
          "2d-boundary(text-text=P,text-vision=P,vision-text=P,vision-vision=P), P dense, a-shape(..), "
          "vertical-slash(..) or grid(..))" },
        { HDR3 "decoder default 2d-boundary(text-text=dense,vision-text=dense,text-vision=dense,vision-vision=dense)\n", 0,
          "plan:3: bad 2d-boundary '2d-boundary(text-text=dense,vision-te...' "
          "(expected 2d-boundary(text-text=P,text-vision=P,vision-text=P,vision-vision=P), P dense, a-shape(..), "
          "vertical-slash(..) or grid(..))" },
        { HDR3 "decoder default 2d-boundary(text-text=dense,text-vision=sink,vision-text=dense,vision-vision=dense)\n", 0,
          "plan:3: 2d-boundary's text-vision pattern is sink (expected dense, a-shape, vertical-slash or grid)" },
        { HDR3 "decoder default 2d-boundary(text-text=dense,text-vision=dense,vision-text=q-boundary(text=dense,"
               "vision=dense),vision-vision=dense)\n", 0,
          "plan:3: 2d-boundary's vision-text pattern is q-boundary (expected dense, a-shape, vertical-slash or grid)" },
        { HDR3 "decoder default 2d-boundary(text-text=grid(stride=auto,lines=h,max-stride=1),text-vision=dense,"
               "vision-text=dense,vision-vision=dense)\n", 0,
          "plan:3: grid max-stride 1 out of range (2..16777216)" },
        { HDR3_V "vision default 2d-boundary(text-text=dense,text-vision=dense,vision-text=dense,vision-vision=dense)\n",
          0, "plan:4: pattern '2d-boundary' is for decoder heads only (it groups tokens by the prompt's text and image "
          "spans)" },
        { HDR2 "decoder default q-boundary(text=dense,vision=dense,x=1)\n", 0,
          "plan:3: bad q-boundary 'q-boundary(text=dense,vision=dense,x=1)' (expected q-boundary(text=P,vision=P), P "
          "dense, a-shape(..), vertical-slash(..) or grid(..))" },
        { HDR2 "decoder default grid(stride=auto,lines=s+v,max-stride=1024)\n", 0,
          "plan:3: bad grid lines 's+v' (expected h, v, s or a combination in that order such as v+s)" },
        { HDR2 "decoder default grid(stride=auto,lines=,max-stride=1024)\n", 0,
          "plan:3: bad grid 'grid(stride=auto,lines=,max-stride=1024)' (expected "
          "grid(stride=N|auto,lines=h+v+s,max-stride=N))" },
        { HDR2 "decoder default grid(stride=0,lines=h,max-stride=1024)\n", 0,
          "plan:3: grid stride 0 out of range (1..16777216)" },
        { HDR2 "decoder default grid(stride=auto,lines=h+v,max-stride=1)\n", 0,
          "plan:3: grid max-stride 1 out of range (2..16777216)" },
        { HDR2 "decoder default grid(stride=auto,lines=h+h,max-stride=8)\n", 0,
          "plan:3: bad grid lines 'h+h' (expected h, v, s or a combination in that order such as v+s)" },
        { HDR_V "vision layer 0 kv-budget 64 64\n", 0,
          "plan:4: kv-budget is for decoder layers (the vision encoder keeps no KV cache)" },
        { HDR_V "vision lazy-group 0-1 mode vla\n", 0,
          "plan:4: vision lazy-group must use mode gla (every vision token is visual, so vla would equal gla)" },
        /* budgets */
        { HDR "decoder layer 0 kv-budget 16 64\n", 0,
          "plan:3: kv-budget 16 is below kv-window 32 (a SparseMM budget includes the local window)" },
        { HDR "decoder layer 0 kv-budget 64\n", 0, "plan:3: decoder layer 0 lists 1 kv-budgets; the decoder has 2 kv-heads" },
        { HDR "decoder layer 0 kv-budget 64 64 64\n", 0,
          "plan:3: decoder layer 0 lists 3 kv-budgets; the decoder has 2 kv-heads" },
        { HDR "decoder layer 0 kv-budget 0 64\n", 0, "plan:3: bad kv-budget '0' (expected a token count 1..16777216 or full)" },
        { HDR "decoder layer 0 kv-budget 64 99999999999\n", 0,
          "plan:3: bad kv-budget '99999999999' (expected a token count 1..16777216 or full)" },
        { HDR "decoder layer 0 kv-budget 64 64\ndecoder layer 0 kv-heads 1 kv-budget 128\n", 0,
          "plan:4: decoder layer 0 kv-head 1 kv-budget already set on line 3" },
        { HDR "decoder layer 0 kv-heads 2 kv-budget 64\n", 0, "plan:3: kv-head 2 out of range (the decoder has 2 kv-heads: 0..1)" },
        { HDR "decoder layer 0 kv-heads 1 budget 64\n", 0, "plan:3: expected 'kv-budget', got 'budget'" },
        /* zipvl */
        { HDR "decoder layer 0-1 zipvl-tau 0.9\ndecoder layer 1 zipvl-tau 0.95\n", 0,
          "plan:4: decoder layer 1 zipvl-tau already set on line 3" },
        { HDR "decoder layer 0 zipvl-tau 0\n", 0, "plan:3: zipvl-tau 0 out of range (0 < value <= 1)" },
        /* lazy groups */
        { HDR "decoder lazy-group 2-4 mode vla\n", 0, "plan:3: layer 4 out of range (the decoder has 4 layers: 0..3)" },
        { HDR "decoder lazy-group 2 mode vla\n", 0,
          "plan:3: lazy-group '2' needs two or more layers (the first computes Q/K, the rest reuse them)" },
        { HDR "decoder lazy-group 0-1 mode vla\ndecoder lazy-group 1-2 mode gla\n", 0,
          "plan:4: decoder lazy-group 1-2 overlaps the lazy-group on line 3" },
        { HDR "decoder lazy-group 0-1 mode xla\n", 0, "plan:3: unknown lazy mode 'xla' (expected gla or vla)" },
        { HDR "decoder lazy-group 0-1 mode\n", 0, "plan:3: missing lazy mode at end of line (expected gla or vla)" },
        { HDR "decoder lazy-group 0-1 vla\n", 0, "plan:3: expected 'mode', got 'vla'" },
        { HDR "decoder lazy-group 0-1 mode vla extra\n", 0, "plan:3: unexpected 'extra' at end of statement" },
        /* bytes */
        { HDR "decoder default s\0ink\n", sizeof(HDR) - 1 + 22, "plan:3: NUL byte in column 18" },
        { HDR "# comment \0 too\n", sizeof(HDR) - 1 + 16, "plan:3: NUL byte in column 11" },
        { HDR "decoder default\rsink\n", 0, "plan:3: carriage return in column 16 (only CRLF line ends are accepted)" },
        { HDR "decoder default sink\r\r\n", 0, "plan:3: carriage return in column 21 (only CRLF line ends are accepted)" },
        { HDR "\x01\n", 0, "plan:3: control byte 0x01 in column 1" },
        { HDR "decoder default sink\x7f\n", 0, "plan:3: control byte 0x7f in column 21" },
        { HDR "d\xc3\xa9" "coder default sink\n", 0,
          "plan:3: non-ASCII byte 0xc3 in column 2 (only comments may hold UTF-8)" },
    };
    for (size_t i = 0; i < OC_ARRAY_LEN(cases); i++) {
        const bad_case *c = &cases[i];
        size_t n = c->n_bytes ? c->n_bytes : strlen(c->text);
        oc_plan *plan = (oc_plan *)&cases;   /* must be reset to NULL */
        oc_error err = { OC_OK, "" };
        oc_status st = oc_plan_parse(&plan, c->text, n, NULL, NULL, &err);
        CHECKF(st == OC_ERR_FORMAT && plan == NULL, "case %zu: status %d", i, (int)st);
        CHECKF(strcmp(err.message, c->message) == 0, "case %zu:\n   got  '%s'\n   want '%s'", i, err.message,
               c->message);
        CHECKF(!strchr(err.message, '\n'), "case %zu: message has a newline", i);
        if (st == OC_OK) oc_plan_free(plan);
    }
    /* line length: exactly the limit is fine, one more byte is not (counted without the line end) */
    for (int extra = 0; extra <= 1; extra++) {
        size_t n = strlen(HDR);
        memcpy(long_line, HDR, n);
        long_line[n] = '#';
        memset(long_line + n + 1, 'x', OC_PLAN_MAX_LINE_BYTES - 1 + (size_t)extra);
        size_t total = n + OC_PLAN_MAX_LINE_BYTES + (size_t)extra;
        long_line[total++] = '\r';   /* a CRLF end does not count towards the limit */
        long_line[total++] = '\n';
        oc_plan *plan = NULL;
        oc_error err;
        oc_status st = oc_plan_parse(&plan, long_line, total, NULL, NULL, &err);
        if (extra) CHECKF(st == OC_ERR_FORMAT && strcmp(err.message, "plan:3: line longer than 4096 bytes") == 0,
                          "%s", err.message);
        else CHECKF(st == OC_OK, "%s", err.message);
        oc_plan_free(plan);
    }
}

/* Things that are accepted: tabs, comments with UTF-8, budgets resolved against a later kv-window,
 * "all" ranges, 'full' budgets, no final newline. */
static void test_accepted_forms(void) {
    oc_plan *plan = NULL;
    oc_error err;
    oc_status st = parse_str(&plan, HDR "\tdecoder  layer\t0 kv-budget 16 full   # caf\xc3\xa9 \xe2\x9c\x93\n"
                                        "kv-window 8\ndecoder layer all heads 3 a-shape(sink=0,local=1)", &err);
    REQUIREF(st == OC_OK, "%s", err.message);
    CHECK(plan->kv_window_tokens == 8 && plan->stacks[0].kv_budget_tokens[0] == 16 &&
          plan->stacks[0].kv_budget_tokens[1] == OC_PLAN_KV_FULL);
    CHECK(oc_plan_head(plan, OC_PLAN_DECODER, 3, 3)->kind == OC_PATTERN_A_SHAPE);
    CHECK(oc_plan_head(plan, OC_PLAN_DECODER, 3, 2)->kind == OC_PATTERN_DENSE);
    oc_plan_free(plan);
    /* a custom source name prefixes messages */
    st = oc_plan_parse(&plan, "ocellus-plan 9\n", 15, "x.plan", NULL, &err);
    CHECK(st == OC_ERR_FORMAT &&
          strcmp(err.message, "x.plan:1: unsupported plan version '9' (this build reads versions 1 to 4)") == 0);
    /* version 2: the dynamic patterns, in both stacks; the writer says version 2 only when needed */
    st = parse_str(&plan, HDR2 "shape vision layers 2 heads 2 head-dim 32\n"
                              "decoder default vertical-slash(vertical=1000,slash=1024)\n"
                              "decoder layer 1 heads 0-1 grid(stride=32,lines=v+s,max-stride=1024)\n"
                              "vision layer 0 heads 1 grid(stride=auto,lines=h+v+s,max-stride=1024)\n", &err);
    REQUIREF(st == OC_OK, "%s", err.message);
    const oc_head_pattern *vs = oc_plan_head(plan, OC_PLAN_DECODER, 0, 0), *gd = oc_plan_head(plan, OC_PLAN_DECODER, 1, 1);
    const oc_head_pattern *gv = oc_plan_head(plan, OC_PLAN_VISION, 0, 1);
    CHECK(vs->kind == OC_PATTERN_VERTICAL_SLASH && vs->n_vertical == 1000 && vs->n_slash == 1024);
    CHECK(gd->kind == OC_PATTERN_GRID && gd->grid_stride == 32 && gd->grid_lines == (OC_GRID_VLINE | OC_GRID_SLASH) &&
          gd->grid_max_stride == 1024);
    CHECK(gv->kind == OC_PATTERN_GRID && gv->grid_stride == 0 && gv->grid_lines == 7);
    CHECK(oc_plan_format_version(plan) == 2);
    size_t n_text;
    char text[4096];
    REQUIRE(oc_plan_write(plan, text, sizeof text, &n_text, &err) == OC_OK);
    CHECK(strncmp(text, "ocellus-plan 2\n", 15) == 0);
    CHECK(strstr(text, "grid(stride=auto,lines=h+v+s,max-stride=1024)") != NULL);
    oc_plan_free(plan);
    st = parse_str(&plan, HDR2, &err);   /* a version-2 header on a plan that needs only version 1 */
    REQUIREF(st == OC_OK, "%s", err.message);
    REQUIRE(oc_plan_write(plan, text, sizeof text, &n_text, &err) == OC_OK);
    CHECK(oc_plan_format_version(plan) == 1 && strncmp(text, "ocellus-plan 1\n", 15) == 0);
    oc_plan_free(plan);
    st = oc_plan_load_file(&plan, "tests/no-such.plan", NULL, &err);
    CHECK(st == OC_ERR_IO && plan == NULL && strstr(err.message, "tests/no-such.plan"));
}

/* ---- fit check ----------------------------------------------------------------------------------------- */

static void test_check_fits(void) {
    oc_plan *plan = NULL;
    oc_error err;
    REQUIRE(oc_plan_load_file(&plan, EXAMPLE_PATH, NULL, &err) == OC_OK);
    oc_plan_model_shape m = { { 28, 12, 2, 128 }, { 32, 16, 16, 80 } };
    CHECK(oc_plan_check_fits(plan, &m, &err) == OC_OK);
    static const struct { oc_plan_model_shape m; const char *message; } cases[] = {
        { { { 24, 12, 2, 128 }, { 32, 16, 16, 80 } }, "plan is for 28 decoder layers x 12 heads; model has 24 layers" },
        { { { 28, 16, 2, 128 }, { 32, 16, 16, 80 } }, "plan is for 28 decoder layers x 12 heads; model has 16 heads" },
        { { { 28, 12, 4, 128 }, { 32, 16, 16, 80 } },
          "plan is for 28 decoder layers x 12 heads, 2 kv heads; model has 4 kv heads" },
        { { { 28, 12, 2, 64 }, { 32, 16, 16, 80 } },
          "plan is for 28 decoder layers x 12 heads, head dim 128; model has head dim 64" },
        { { { 36, 16, 2, 128 }, { 32, 16, 16, 80 } },
          "plan is for 28 decoder layers x 12 heads; model has 36 layers, 16 heads" },
        { { { 28, 12, 2, 128 }, { 32, 16, 16, 64 } },
          "plan is for 32 vision layers x 16 heads, head dim 80; model has head dim 64" },
        { { { 28, 12, 2, 128 }, { 0, 0, 0, 0 } }, "plan is for 32 vision layers x 16 heads; model has no vision encoder" },
    };
    for (size_t i = 0; i < OC_ARRAY_LEN(cases); i++) {
        oc_status st = oc_plan_check_fits(plan, &cases[i].m, &err);
        CHECKF(st == OC_ERR_UNSUPPORTED && strcmp(err.message, cases[i].message) == 0, "case %zu: '%s'", i, err.message);
    }
    oc_plan_free(plan);
    /* a plan without a vision part fits a model with any vision encoder */
    REQUIRE(parse_str(&plan, HDR, &err) == OC_OK);
    oc_plan_model_shape m2 = { { 4, 4, 2, 64 }, { 32, 16, 16, 80 } };
    CHECK(oc_plan_check_fits(plan, &m2, &err) == OC_OK);
    oc_plan_free(plan);
    /* the rules too: a plan built in memory with a BlindSight kind in the vision stack (it needs
     * text) is refused at the fit check, the one check a context runs */
    oc_plan_shape dec = { 4, 4, 2, 64 }, vis = { 2, 4, 4, 64 };
    REQUIRE(oc_plan_create(&plan, &dec, &vis, NULL, &err) == OC_OK);
    oc_plan_model_shape m3 = { dec, vis };
    CHECK(oc_plan_check_fits(plan, &m3, &err) == OC_OK);
    oc_plan_head(plan, OC_PLAN_VISION, 1, 2)->kind = OC_PATTERN_SINK;
    CHECKF(oc_plan_check_fits(plan, &m3, &err) == OC_ERR_INVALID && strstr(err.message, "not allowed"), "%s",
           err.message);
    oc_plan_free(plan);
}

/* ---- building in memory, validation, writing ------------------------------------------------------------ */

static void test_create_and_validate(void) {
    oc_plan_shape dec = { 6, 4, 2, 64 }, vis = { 4, 2, 2, 32 }, bad = { 6, 4, 3, 64 };
    oc_plan *plan = (oc_plan *)&dec;
    oc_error err;
    CHECK(oc_plan_create(&plan, &bad, NULL, NULL, &err) == OC_ERR_INVALID && plan == NULL);
    REQUIRE(oc_plan_create(&plan, &dec, &vis, NULL, &err) == OC_OK);
    CHECK(oc_plan_validate(plan, &err) == OC_OK);
    CHECK(oc_plan_add_lazy_group(plan, OC_PLAN_DECODER, 3, 5, OC_LAZY_VLA, &err) == OC_OK);
    CHECK(oc_plan_add_lazy_group(plan, OC_PLAN_DECODER, 0, 1, OC_LAZY_GLA, &err) == OC_OK);
    CHECK(oc_plan_add_lazy_group(plan, OC_PLAN_DECODER, 1, 2, OC_LAZY_GLA, &err) == OC_ERR_INVALID);
    CHECK(strcmp(err.message, "plan: decoder lazy-group 1-2 overlaps lazy-group 0-1") == 0);
    CHECK(oc_plan_add_lazy_group(plan, OC_PLAN_DECODER, 2, 2, OC_LAZY_GLA, &err) == OC_ERR_INVALID);
    CHECK(oc_plan_add_lazy_group(plan, OC_PLAN_VISION, 0, 1, OC_LAZY_VLA, &err) == OC_ERR_INVALID);
    CHECK(plan->stacks[0].n_lazy_groups == 2 && plan->stacks[0].lazy_groups[0].first_layer == 0);
    /* each kind of invalid data is refused by validate and therefore by write */
    size_t n;
    oc_plan_head(plan, OC_PLAN_VISION, 1, 1)->kind = OC_PATTERN_SINK;
    CHECK(oc_plan_write(plan, NULL, 0, &n, &err) == OC_ERR_INVALID);
    oc_plan_head(plan, OC_PLAN_VISION, 1, 1)->kind = OC_PATTERN_DENSE;
    oc_plan_head(plan, OC_PLAN_DECODER, 0, 0)->n_local = 5;   /* sizes on a dense head */
    CHECK(oc_plan_validate(plan, &err) == OC_ERR_INVALID);
    oc_plan_head(plan, OC_PLAN_DECODER, 0, 0)->kind = OC_PATTERN_A_SHAPE;   /* now a valid a-shape */
    CHECK(oc_plan_validate(plan, &err) == OC_OK);
    plan->stacks[0].kv_budget_tokens[3] = 5;   /* below the window */
    CHECK(oc_plan_validate(plan, &err) == OC_ERR_INVALID);
    plan->stacks[0].kv_budget_tokens[3] = 40;
    plan->stacks[1].zipvl_tau_ppm[0] = OC_PLAN_PPM + 1;
    CHECK(oc_plan_validate(plan, &err) == OC_ERR_INVALID);
    plan->stacks[1].zipvl_tau_ppm[0] = 0;
    plan->sink_fraction_ppm = 0;
    CHECK(oc_plan_validate(plan, &err) == OC_ERR_INVALID);
    plan->sink_fraction_ppm = 50000;
    CHECK(oc_plan_validate(plan, &err) == OC_OK);
    /* buffer too small: OC_ERR_RANGE, still NUL-terminated */
    REQUIRE(oc_plan_write(plan, NULL, 0, &n, &err) == OC_OK);
    char small[32];
    CHECK(oc_plan_write(plan, small, sizeof small, &n, &err) == OC_ERR_RANGE && small[31] == '\0');
    check_round_trip(plan, "created");
    /* file round trip */
    const char *path = "build/tests/test_plan_out.plan";
    REQUIREF(oc_plan_write_file(plan, path, &err) == OC_OK, "%s", err.message);
    oc_plan *back = NULL;
    REQUIREF(oc_plan_load_file(&back, path, NULL, &err) == OC_OK, "%s", err.message);
    CHECK(oc_plan_equal(plan, back));
    oc_plan_free(back);
    remove(path);
    CHECK(oc_plan_write_file(plan, "build/no-such-dir/x.plan", &err) == OC_ERR_IO);
    oc_plan_free(plan);
    oc_plan_free(NULL);
}

/* ---- allocation failures -------------------------------------------------------------------------------- */

/* Fail the k-th allocation (once, then persistently) for k = 1.. until the call succeeds: every
 * failing run returns OC_ERR_NOMEM and leaves nothing allocated. */
static void test_alloc_failures(void) {
    size_t n_text;
    char *text = read_text(EXAMPLE_PATH, &n_text);
    REQUIRE(text);
    for (int persistent = 0; persistent <= 1; persistent++) {
        long n_needed = -1;
        for (long k = 1; k < 100 && n_needed < 0; k++) {
            check_alloc c = { .fail_at = k, .persistent = persistent };
            oc_allocator a = { check_alloc_fn, &c };
            oc_plan *plan = NULL;
            oc_error err;
            oc_status st = oc_plan_parse(&plan, text, n_text, NULL, &a, &err);
            if (st == OC_OK) {
                n_needed = k - 1;
                /* writing a file allocates once more: fail that one too */
                c.fail_at = c.n_allocs + 1;
                CHECK(oc_plan_write_file(plan, "build/tests/test_plan_nomem.plan", &err) == OC_ERR_NOMEM);
                oc_plan_free(plan);
            } else {
                CHECKF(st == OC_ERR_NOMEM && plan == NULL, "k=%ld: status %d (%s)", k, (int)st, err.message);
            }
            CHECKF(c.n_live == 0 && c.bytes_live == 0, "k=%ld persistent=%d: %ld blocks leaked", k, persistent, c.n_live);
        }
        CHECKF(n_needed >= 8, "parse made only %ld allocations", n_needed);
        /* creating in memory, too */
        oc_plan_shape dec = { 28, 12, 2, 128 }, vis = { 32, 16, 16, 80 };
        for (long k = 1; k < 20; k++) {
            check_alloc c = { .fail_at = k, .persistent = persistent };
            oc_allocator a = { check_alloc_fn, &c };
            oc_plan *plan = NULL;
            oc_status st = oc_plan_create(&plan, &dec, &vis, &a, NULL);
            CHECK(st == OC_OK || (st == OC_ERR_NOMEM && plan == NULL));
            oc_plan_free(plan);
            CHECKF(c.n_live == 0, "create k=%ld: %ld blocks leaked", k, c.n_live);
            if (st == OC_OK) break;
        }
    }
    /* and on a parse that fails late (after every allocation was made) nothing leaks */
    check_alloc c = { 0 };
    oc_allocator a = { check_alloc_fn, &c };
    oc_plan *plan = NULL;
    text[n_text - 2] = '\x01';
    CHECK(oc_plan_parse(&plan, text, n_text, NULL, &a, NULL) == OC_ERR_FORMAT && c.n_live == 0 && c.n_allocs > 0);
    free(text);
}

/* The fuzz seeds stay meaningful: bad-* seeds fail, the others parse. */
static void test_fuzz_seeds(void) {
    static const char *const seeds[] = { "minimal.plan", "small.plan", "all-statements-crlf.plan",
                                         "qwen2vl-2b-example.plan", "bad-pattern.plan",
                                         "zipvl-prefill-heads.plan" };
    for (size_t i = 0; i < OC_ARRAY_LEN(seeds); i++) {
        char path[128];
        snprintf(path, sizeof path, "tests/fuzz/corpus/fuzz_plan/%s", seeds[i]);
        oc_plan *plan = NULL;
        oc_error err;
        oc_status st = oc_plan_load_file(&plan, path, NULL, &err);
        int want_ok = strncmp(seeds[i], "bad-", 4) != 0;
        CHECKF(want_ok ? st == OC_OK : st == OC_ERR_FORMAT, "%s: %s", path, st == OC_OK ? "parsed" : err.message);
        oc_plan_free(plan);
    }
}

int main(void) {
    CHECK_RUN(test_example_plan);
    CHECK_RUN(test_crlf);
    CHECK_RUN(test_round_trip_small);
    CHECK_RUN(test_canonical_text);
    CHECK_RUN(test_round_trip_random);
    CHECK_RUN(test_bad_plans);
    CHECK_RUN(test_accepted_forms);
    CHECK_RUN(test_check_fits);
    CHECK_RUN(test_create_and_validate);
    CHECK_RUN(test_alloc_failures);
    CHECK_RUN(test_fuzz_seeds);
    return check_finish();
}
