/* plan_write.c: writes the canonical text of an oc_plan (grammar: plan.c). Canonical means the
 * text is a function of the data alone: a fixed explanatory comment block, then shapes, settings
 * and per stack its default (the most common pattern), pattern lines, budgets, ZipVL thresholds and
 * lazy groups, with runs of identical layers merged into ranges. Lines never exceed the parser's
 * limit, so anything written here reads back into equal data. No allocation except for files. */
#include "plan/plan.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Output that counts every byte but stores only what fits, so one pass measures and writes. */
typedef struct out {
    char *buf;
    size_t cap;
    size_t len;
} out;

static void put_n(out *o, const char *s, size_t n) {
    if (o->buf && o->len < o->cap) memcpy(o->buf + o->len, s, OC_MIN(n, o->cap - o->len));
    o->len += n;
}
static void put(out *o, const char *s) { put_n(o, s, strlen(s)); }
static void put_int(out *o, int64_t v) {
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%lld", (long long)v);
    put_n(o, tmp, (size_t)n);
}
/* ppm as the shortest decimal that reads back exactly: 975000 -> "0.975", 1000000 -> "1". */
static void put_ppm(out *o, int32_t ppm) {
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%d.%06d", (int)(ppm / OC_PLAN_PPM), (int)(ppm % OC_PLAN_PPM));
    while (n > 0 && tmp[n - 1] == '0') n--;
    if (n > 0 && tmp[n - 1] == '.') n--;
    put_n(o, tmp, (size_t)n);
}

static void put_pattern(out *o, const oc_head_pattern *p) {
    put(o, oc_plan_pattern_name(p->kind));
    if (p->kind == OC_PATTERN_Q_BOUNDARY) {
        for (int m = 0; m < OC_N_MODALITIES; m++) {
            oc_head_pattern q = oc_pattern_modal(p, m);
            put(o, m ? ",vision=" : "(text=");
            put_pattern(o, &q);
        }
        put(o, ")");
    } else if (p->kind == OC_PATTERN_BOUNDARY_2D) {
        static const char *const keys[OC_N_MODALITIES * OC_N_MODALITIES] = { "(text-text=", ",text-vision=",
                                                                            ",vision-text=", ",vision-vision=" };
        for (int m = 0; m < OC_N_MODALITIES * OC_N_MODALITIES; m++) {
            oc_head_pattern q = oc_pattern_pair(p, m / OC_N_MODALITIES, m % OC_N_MODALITIES);
            put(o, keys[m]);
            put_pattern(o, &q);
        }
        put(o, ")");
    } else if (p->kind == OC_PATTERN_A_SHAPE) {
        put(o, "(sink=");
        put_int(o, p->n_sink);
        put(o, ",local=");
        put_int(o, p->n_local);
        put(o, ")");
    } else if (p->kind == OC_PATTERN_VERTICAL_SLASH) {
        put(o, "(vertical=");
        put_int(o, p->n_vertical);
        put(o, ",slash=");
        put_int(o, p->n_slash);
        put(o, ")");
    } else if (p->kind == OC_PATTERN_GRID) {
        put(o, "(stride=");
        if (p->grid_stride) put_int(o, p->grid_stride);
        else put(o, "auto");
        put(o, ",lines=");
        put(o, oc_plan_grid_lines_name(p->grid_lines));
        put(o, ",max-stride=");
        put_int(o, p->grid_max_stride);
        put(o, ")");
    }
}
static size_t pattern_len(const oc_head_pattern *p) {
    out o = { NULL, 0, 0 };
    put_pattern(&o, p);
    return o.len;
}

/* "N", "N-M" or "all" */
static void put_layers(out *o, int32_t first, int32_t last, int32_t n_layers) {
    if (first == last) { put_int(o, first); return; }
    if (first == 0 && last == n_layers - 1) { put(o, "all"); return; }
    put_int(o, first);
    put(o, "-");
    put_int(o, last);
}

static void put_line_start(out *o, oc_plan_stack stack, int32_t first, int32_t last, int32_t n_layers) {
    put(o, oc_plan_stack_name(stack));
    put(o, " layer ");
    put_layers(o, first, last, n_layers);
}

/* ---- patterns --------------------------------------------------------------------------------- */

static const oc_head_pattern *row_of(const oc_stack_plan *s, int32_t layer) {
    return &s->heads[(size_t)layer * (size_t)s->shape.n_heads];
}

static int rows_same(const oc_stack_plan *s, int32_t a, int32_t b) {
    const oc_head_pattern *x = row_of(s, a), *y = row_of(s, b);
    for (int32_t h = 0; h < s->shape.n_heads; h++)
        if (!oc_pattern_same(&x[h], &y[h])) return 0;
    return 1;
}

/* The stack default: the most common pattern among the first 64 distinct ones met in layer/head
 * order, ties to the one met first. Real plans hold a handful of distinct patterns; the cap keeps
 * the writer linear on odd ones while the choice stays a function of the data. */
#define MAX_DEFAULT_CANDIDATES 64
static oc_head_pattern most_common(const oc_stack_plan *s) {
    size_t n = (size_t)s->shape.n_layers * (size_t)s->shape.n_heads;
    oc_head_pattern cand[MAX_DEFAULT_CANDIDATES];
    size_t count[MAX_DEFAULT_CANDIDATES];
    int n_cand = 0;
    for (size_t i = 0; i < n; i++) {
        int c = 0;
        while (c < n_cand && !oc_pattern_same(&cand[c], &s->heads[i])) c++;
        if (c == n_cand) {
            if (n_cand == MAX_DEFAULT_CANDIDATES) continue;
            cand[n_cand] = s->heads[i];
            count[n_cand++] = 0;
        }
        count[c]++;
    }
    int best = 0;
    for (int c = 1; c < n_cand; c++)
        if (count[c] > count[best]) best = c;
    return cand[best];
}

/* "heads 0-3,7" for the heads of row equal to p */
static void put_head_set(out *o, const oc_head_pattern *row, int32_t n_heads, const oc_head_pattern *p) {
    int32_t n_match = 0;
    for (int32_t h = 0; h < n_heads; h++) n_match += oc_pattern_same(&row[h], p);
    if (n_match == n_heads) { put(o, "all"); return; }
    int first_item = 1;
    for (int32_t h = 0; h < n_heads;) {
        if (!oc_pattern_same(&row[h], p)) { h++; continue; }
        int32_t e = h;
        while (e + 1 < n_heads && oc_pattern_same(&row[e + 1], p)) e++;
        if (!first_item) put(o, ",");
        first_item = 0;
        put_int(o, h);
        if (e > h) { put(o, "-"); put_int(o, e); }
        h = e + 1;
    }
}

/* One layer range whose rows are equal and not all default. One line "heads SET P" when the row
 * differs from the default by a single pattern (easiest to read); else the row form when it fits
 * the line limit; else one "heads SET P" line per distinct non-default pattern. */
static void put_pattern_lines(out *o, const oc_stack_plan *s, oc_plan_stack stack, int32_t first,
                              int32_t last, const oc_head_pattern *def) {
    const oc_head_pattern *row = row_of(s, first);
    int32_t n_heads = s->shape.n_heads;
    int32_t n_distinct = 0;
    size_t row_len = 48;   /* "vision layer NNN-NNN" and spaces, generously */
    for (int32_t h = 0; h < n_heads; h++) {
        row_len += pattern_len(&row[h]) + 1;
        if (oc_pattern_same(&row[h], def)) continue;
        int seen = 0;
        for (int32_t g = 0; g < h && !seen; g++) seen = oc_pattern_same(&row[g], &row[h]);
        n_distinct += !seen;
    }
    if (n_distinct > 1 && row_len <= OC_PLAN_MAX_LINE_BYTES) {
        put_line_start(o, stack, first, last, s->shape.n_layers);
        for (int32_t h = 0; h < n_heads; h++) { put(o, " "); put_pattern(o, &row[h]); }
        put(o, "\n");
        return;
    }
    for (int32_t h = 0; h < n_heads; h++) {
        if (oc_pattern_same(&row[h], def)) continue;
        int seen = 0;
        for (int32_t g = 0; g < h && !seen; g++) seen = oc_pattern_same(&row[g], &row[h]);
        if (seen) continue;
        put_line_start(o, stack, first, last, s->shape.n_layers);
        put(o, " heads ");
        put_head_set(o, row, n_heads, &row[h]);
        put(o, " ");
        put_pattern(o, &row[h]);
        put(o, "\n");
    }
}

static int row_all_default(const oc_stack_plan *s, int32_t layer, const oc_head_pattern *def) {
    const oc_head_pattern *row = row_of(s, layer);
    for (int32_t h = 0; h < s->shape.n_heads; h++)
        if (!oc_pattern_same(&row[h], def)) return 0;
    return 1;
}

/* ---- budgets and thresholds ------------------------------------------------------------------------ */

static int budgets_same(const oc_stack_plan *s, int32_t a, int32_t b) {
    size_t kv = (size_t)s->shape.n_kv_heads;
    return memcmp(&s->kv_budget_tokens[(size_t)a * kv], &s->kv_budget_tokens[(size_t)b * kv],
                  kv * sizeof(int32_t)) == 0;
}
static int budgets_full(const oc_stack_plan *s, int32_t layer) {
    for (int32_t k = 0; k < s->shape.n_kv_heads; k++)
        if (s->kv_budget_tokens[(size_t)layer * (size_t)s->shape.n_kv_heads + (size_t)k] != OC_PLAN_KV_FULL) return 0;
    return 1;
}

static void put_stack(out *o, const oc_stack_plan *s, oc_plan_stack stack) {
    int32_t n_layers = s->shape.n_layers;
    oc_head_pattern def = most_common(s);
    put(o, "\n");
    put(o, oc_plan_stack_name(stack));
    put(o, " default ");
    put_pattern(o, &def);
    put(o, "\n");
    for (int32_t l = 0; l < n_layers;) {
        int32_t e = l;
        while (e + 1 < n_layers && rows_same(s, l, e + 1)) e++;
        if (!row_all_default(s, l, &def)) put_pattern_lines(o, s, stack, l, e, &def);
        l = e + 1;
    }
    for (int32_t l = 0; s->kv_budget_tokens && l < n_layers;) {
        int32_t e = l;
        while (e + 1 < n_layers && budgets_same(s, l, e + 1)) e++;
        if (!budgets_full(s, l)) {
            put_line_start(o, stack, l, e, n_layers);
            put(o, " kv-budget");
            for (int32_t k = 0; k < s->shape.n_kv_heads; k++) {
                int32_t b = s->kv_budget_tokens[(size_t)l * (size_t)s->shape.n_kv_heads + (size_t)k];
                put(o, " ");
                if (b == OC_PLAN_KV_FULL) put(o, "full");
                else put_int(o, b);
            }
            put(o, "\n");
        }
        l = e + 1;
    }
    for (int32_t l = 0; s->visual_score_ppm && l < n_layers;) {
        int32_t e = l, kv = s->shape.n_kv_heads;
        while (e + 1 < n_layers && !memcmp(&s->visual_score_ppm[(size_t)l * kv], &s->visual_score_ppm[(size_t)(e + 1) * kv],
                                           sizeof(int32_t) * (size_t)kv))
            e++;
        int any = 0;
        for (int32_t k = 0; k < kv; k++) any |= s->visual_score_ppm[(size_t)l * kv + k] != 0;
        if (any) {
            put_line_start(o, stack, l, e, n_layers);
            put(o, " visual-score");
            for (int32_t k = 0; k < kv; k++) {
                put(o, " ");
                put_ppm(o, s->visual_score_ppm[(size_t)l * kv + k]);
            }
            put(o, "\n");
        }
        l = e + 1;
    }
    for (int32_t l = 0; l < n_layers;) {
        int32_t e = l;
        while (e + 1 < n_layers && s->zipvl_tau_ppm[e + 1] == s->zipvl_tau_ppm[l] &&
               s->zipvl_heads_prefill[e + 1] == s->zipvl_heads_prefill[l])
            e++;
        if (s->zipvl_tau_ppm[l] != 0) {
            put_line_start(o, stack, l, e, n_layers);
            put(o, " zipvl-tau ");
            put_ppm(o, s->zipvl_tau_ppm[l]);
            put(o, s->zipvl_heads_prefill[l] ? " prefill heads\n" : "\n");
        }
        l = e + 1;
    }
    for (int32_t i = 0; i < s->n_lazy_groups; i++) {
        const oc_lazy_group *g = &s->lazy_groups[i];
        put(o, oc_plan_stack_name(stack));
        put(o, " lazy-group ");
        put_layers(o, g->first_layer, g->last_layer, n_layers);
        put(o, " mode ");
        put(o, oc_plan_lazy_mode_name(g->mode));
        put(o, "\n");
    }
}

/* Version 2 adds MMInference's dynamic patterns; its text says so first (version-1 text is unchanged). */
static const char *const header_comment_v2 =
    "# version 2: vertical-slash(vertical=V,slash=S) and grid(stride=N|auto,lines=h+v+s,max-stride=M)\n"
    "#   (MMInference, prefill only: V key columns and S diagonals, or lines every N tokens, chosen\n"
    "#   per prompt from the last 64 queries; decode runs these heads dense);\n"
    "#   q-boundary(text=P,vision=P): one such pattern (or dense, a-shape) per query modality, each\n"
    "#   indexed from that modality's last 64 queries (decoder only)\n";

/* Version 3 adds 2d-boundary heads (after version 2's text, which still holds). */
static const char *const header_comment_v3 =
    "# version 3: 2d-boundary(text-text=P,text-vision=P,vision-text=P,vision-vision=P): one such\n"
    "#   pattern per (query modality, key modality) pair, in the pair's permuted coordinates (a\n"
    "#   token's rank within its modality), indexed from the query modality's last 64 queries\n";

/* Version 4 adds how ZipVL meets a layer's head patterns. */
static const char *const header_comment_v4 =
    "# version 4: zipvl-tau T prefill heads: the layer's prefill runs its head patterns (or dense),\n"
    "#   then ZipVL keeps its set T (ours: the pattern keeps its prefill saving, ZipVL its KV saving);\n"
    "#   without the word (or with 'prefill set') the prefill attends over T only (ZipVL Alg. 1)\n";

/* The fixed comment block: enough for a reader without the docs. */
static const char *const header_comment =
    "# ocellus attention plan. '#' starts a comment; the full grammar is at the top of src/plan/plan.c.\n"
    "# shape STACK ...           the model this plan fits (STACK is decoder or vision)\n"
    "# STACK default P           pattern of every head no other line sets\n"
    "# STACK layer L P P ...     one pattern per head of layers L (N, N-M or all), head 0 first\n"
    "# STACK layer L heads H P   pattern P for heads H (e.g. 0-3,7 or all)\n"
    "# patterns: dense (the model's own mask); sink, intra-image, intra-image+sink (BlindSight,\n"
    "#   decoder only: image queries keep text keys plus earlier images' sink tokens and/or their\n"
    "#   own image); a-shape(sink=S,local=W) (first S keys plus the W keys up to the query)\n"
    "# sink-fraction F           BlindSight: an image's sink tokens are its first F of tokens\n"
    "# kv-budget B ...           SparseMM: KV tokens kept per decoder kv head (full = all), incl.\n"
    "#                           the kv-window most recent tokens\n"
    "# visual-score S ...        SparseMM: visual score per decoder kv head (budgets follow from it)\n"
    "# zipvl-tau T               ZipVL: keep the fewest tokens holding T of the attention mass\n"
    "# lazy-group A-B mode M     Q-Cache: layer A computes Q/K, A+1..B reuse them (gla: all\n"
    "#                           tokens, vla: visual tokens only)\n"
    "\n";

oc_status oc_plan_write(const oc_plan *plan, char *buf, size_t buf_bytes, size_t *n_bytes, oc_error *err) {
    oc_status st = oc_plan_validate(plan, err);
    if (st != OC_OK) return st;
    out o = { buf, buf ? buf_bytes : 0, 0 };
    int version = oc_plan_format_version(plan);
    put(&o, version == 4 ? "ocellus-plan 4\n" : version == 3 ? "ocellus-plan 3\n"
          : version == 2 ? "ocellus-plan 2\n" : "ocellus-plan 1\n");
    if (plan->calibration[0]) {
        put(&o, "calibration ");
        put(&o, plan->calibration);
        put(&o, "\n");
    }
    if (version >= 2) put(&o, header_comment_v2);
    if (version >= 3) put(&o, header_comment_v3);
    if (version >= 4) put(&o, header_comment_v4);
    put(&o, header_comment);
    for (int i = 0; i < OC_PLAN_N_STACKS; i++) {
        const oc_plan_shape *s = &plan->stacks[i].shape;
        if (s->n_layers == 0) continue;
        put(&o, "shape ");
        put(&o, oc_plan_stack_name((oc_plan_stack)i));
        put(&o, " layers ");
        put_int(&o, s->n_layers);
        put(&o, " heads ");
        put_int(&o, s->n_heads);
        if (i == OC_PLAN_DECODER) { put(&o, " kv-heads "); put_int(&o, s->n_kv_heads); }
        put(&o, " head-dim ");
        put_int(&o, s->head_dim);
        put(&o, "\n");
    }
    put(&o, "sink-fraction ");
    put_ppm(&o, plan->sink_fraction_ppm);
    put(&o, "\nkv-window ");
    put_int(&o, plan->kv_window_tokens);
    put(&o, "\n");
    for (int i = 0; i < OC_PLAN_N_STACKS; i++)
        if (plan->stacks[i].shape.n_layers) put_stack(&o, &plan->stacks[i], (oc_plan_stack)i);
    if (n_bytes) *n_bytes = o.len;
    if (!buf) return OC_OK;
    if (buf_bytes < o.len + 1) {
        if (buf_bytes) buf[buf_bytes - 1] = '\0';
        return oc_fail(err, OC_ERR_RANGE, "plan: text needs %zu bytes, the buffer holds %zu", o.len + 1, buf_bytes);
    }
    buf[o.len] = '\0';
    return OC_OK;
}

oc_status oc_plan_write_file(const oc_plan *plan, const char *path, oc_error *err) {
    if (!plan || !path) return oc_fail(err, OC_ERR_INVALID, "plan: NULL argument to oc_plan_write_file");
    size_t n;
    oc_status st = oc_plan_write(plan, NULL, 0, &n, err);
    if (st != OC_OK) return st;
    char *text = oc_mem_alloc(&plan->alloc, n + 1);
    if (!text) return oc_fail(err, OC_ERR_NOMEM, "plan: out of memory for %zu bytes of text", n + 1);
    st = oc_plan_write(plan, text, n + 1, &n, err);
    if (st == OC_OK) {
        FILE *f = fopen(path, "wb");
        if (!f) {
            st = oc_fail(err, OC_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        } else {
            size_t n_written = fwrite(text, 1, n, f);
            int close_failed = fclose(f) != 0;
            if (n_written != n || close_failed)
                st = oc_fail(err, OC_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        }
    }
    oc_mem_free(&plan->alloc, text, n + 1);
    return st;
}
