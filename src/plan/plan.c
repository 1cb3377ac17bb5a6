/* plan.c: reads the attention-plan text format (grammar below) into an oc_plan (plan.h). Strict:
 * the first problem stops the parse with one line "SOURCE:LINE: what is wrong". Memory is bounded
 * by the OC_PLAN_MAX_* limits whatever the input, and every allocation is freed on every error
 * path. The canonical writer is plan_write.c, the data model and checks plan_model.c.
 * Contents: the format and its grammar; tokens; numbers; layer ranges and head lists; patterns;
 * statements; the line loop (oc_plan_parse) and file loading. */

/* ==== The plan text format, versions 1 to 4 ======================================================
 *
 * Version 2 is version 1 plus the MMInference dynamic patterns (vertical-slash, grid, q-boundary);
 * version 3 is version 2 plus 2d-boundary; version 4 is version 3 plus zipvl-tau's "prefill" word
 * (how ZipVL composes with the layer's head patterns, ours). An older file keeps its meaning and still loads, a
 * pattern of a newer version in it is an error naming that version, and the writer emits the
 * oldest version that holds the plan, so older readers keep reading what they can run.
 *
 * Lines of ASCII text. '#' starts a comment that runs to the end of the line (comments may hold
 * UTF-8); blank lines are ignored; words are separated by spaces or tabs. Lines end with LF; a
 * CRLF line end is accepted (its CR is dropped; a CR anywhere else is an error) and the writer
 * always emits LF. A line holds at most 4096 bytes; NUL and other control bytes except tab are
 * errors.
 *
 *   plan       = header { line }
 *   header     = "ocellus-plan" ( "1" | "2" | "3" | "4" )    on line 1: the format version
 *   line       = [ statement ] [ "#" comment ]
 *   statement  = "shape" "decoder" "layers" N "heads" N "kv-heads" N "head-dim" N
 *              | "shape" "vision" "layers" N "heads" N "head-dim" N
 *              | "sink-fraction" FRACTION        BlindSight sink tokens of an image (default 0.1)
 *              | "kv-window" N                   SparseMM local window w, tokens (default 32)
 *              | "calibration" WORD { WORD }     how `ocellus calibrate` made the plan (at most once)
 *              | STACK "default" PATTERN                     pattern of every head not set below
 *              | STACK "layer" LAYERS PATTERN ...            one pattern per head, head 0 first
 *              | STACK "layer" LAYERS "heads" HEADS PATTERN  the same pattern for some heads
 *              | "decoder" "layer" LAYERS "kv-budget" BUDGET ...    one per kv head, kv head 0 first
 *              | "decoder" "layer" LAYERS "kv-heads" HEADS "kv-budget" BUDGET
 *              | "decoder" "layer" LAYERS "visual-score" SCORE ...  one per kv head (SparseMM Eq. 3)
 *              | STACK "layer" LAYERS "zipvl-tau" FRACTION [ "prefill" ( "set" | "heads" ) ]
 *                                                ZipVL Eq. 7 threshold for the layers; the
 *                                                prefill word is version 4 (below)
 *              | STACK "lazy-group" LAYERS "mode" ( "gla" | "vla" )   Q-Cache lazy block
 *   STACK      = "decoder" | "vision"
 *   LAYERS     = "all" | N | N "-" N                          inclusive range, no spaces
 *   HEADS      = "all" | ITEM { "," ITEM },   ITEM = N | N "-" N     e.g. 0-3,7
 *   PATTERN    = "dense" | "sink" | "intra-image" | "intra-image+sink"
 *              | "a-shape(sink=" N ",local=" N ")"              e.g. a-shape(sink=128,local=1024)
 *              | "vertical-slash(vertical=" N ",slash=" N ")"   version 2, e.g. (1000, 1024) of Table 3
 *              | "grid(stride=" ( N | "auto" ) ",lines=" LINES ",max-stride=" N ")"      version 2
 *              | "q-boundary(text=" MODAL ",vision=" MODAL ")"   version 2, decoder only
 *              | "2d-boundary(text-text=" MODAL ",text-vision=" MODAL ",vision-text=" MODAL
 *                ",vision-vision=" MODAL ")"   version 3, decoder only: [query modality]-[key modality]
 *   MODAL      = "dense" | an a-shape, vertical-slash or grid PATTERN
 *   LINES      = "h" | "v" | "s" | "h+v" | "h+s" | "v+s" | "h+v+s"  horizontal, vertical, slash lines
 *   BUDGET     = N | "full"                                   tokens kept, or the whole cache
 *   N          = decimal digits, no sign;   FRACTION = digits [ "." 1 to 6 digits ]
 *   SCORE      = FRACTION or 0;   WORD = KEY "=" VALUE, KEY of a-z 0-9 _ -, VALUE printable ASCII
 *                (no space, no '#'); the words of a calibration line are kept in order
 *
 * Rules (each breach is an error naming its line):
 *  - Line 1 is the header. Exactly one "shape decoder" line, at most one "shape vision" line; a
 *    stack's shape line comes before the other lines of that stack. Settings appear at most once.
 *  - Every (stack, layer, head) pattern, (layer, kv head) budget and layer zipvl-tau is set at most
 *    once, so statement order never changes the meaning; heads not set take the stack's default
 *    (dense when there is no default line). The row form lists exactly n_heads patterns.
 *  - Patterns: dense = the model's own mask; sink, intra-image, intra-image+sink = BlindSight
 *    categories (blindsight.txt Sec. 3.2, App. L), decoder only, since they need text and image
 *    spans; a-shape = MMInference/StreamingLLM (mminference.txt Table 3): the first `sink` keys plus
 *    a window of `local` keys up to the query; sink 0..16777216, local 1..16777216.
 *  - vertical-slash and grid (mminference.txt Sec. 3.1, C.3, Alg. 1, Table 3; attention/dyn.h) choose
 *    their keys per prompt from the last 64 queries, in prefill only (decode runs them dense):
 *    vertical-slash keeps `vertical` key columns (0..16777216) and `slash` diagonals (1..16777216);
 *    grid keeps lines every `stride` tokens (1..16777216, or auto: searched over 2..max-stride, with
 *    max-stride 2..16777216; Table 3 uses 1024). Both are allowed in the decoder and vision stacks.
 *  - q-boundary and 2d-boundary (mminference.txt Sec. 3.2, Alg. 2-3; attention/dyn.h), decoder only:
 *    one part pattern per query modality (q-boundary) or per (query, key) modality pair
 *    (2d-boundary, the pair's pattern in its permuted coordinates: a token's rank within its
 *    modality), each dense, a-shape, vertical-slash or grid, a dynamic one indexed from the query
 *    modality's last 64 queries.
 *  - kv-budget (SparseMM Eq. 5-9) is per decoder kv head (GQA heads share a cache, sparsemm.txt
 *    App. A.1) and includes the local window: kv-window <= budget <= 16777216; the vision encoder
 *    keeps no KV cache. FRACTION values satisfy 0 < value <= 1.
 *  - visual-score (SparseMM Eq. 3-4, sparsemm.txt Sec. 3.2) is the normalised score of each decoder
 *    kv head, 0 <= value <= 1, set at most once per (layer, kv head); budgets for any total follow
 *    from it (Eq. 5-9), so `ocellus plan FILE --kv-budget N -o OUT` re-budgets without calibrating.
 *    The calibration line (at most 511 bytes of words) names methods, thresholds, data and model.
 *    Both are information: the attention engine does not read them.
 *  - A lazy group (qcache.txt Eq. 3-8) has two or more layers and overlaps no other group; its
 *    first layer computes Q/K, the others reuse them: gla for all tokens, vla for visual tokens
 *    only (text keeps its own Q/K). Vision groups must be gla (every vision token is visual).
 * How the runtime applies the KV cache sections (src/kvcache/kv_cache.h; `ocellus plan` says it):
 *  - kv-budget: after a dense prefill each decoder kv head keeps the last kv-window tokens plus the
 *    keys the prompt's last kv-window queries attend to most (sparsemm.txt Eq. 10-14); its cache
 *    is allocated at the largest budget + the context's answer room (max_answer_tokens).
 *  - zipvl-tau: the layer's important tokens T, p of them from the probe rows' (64 recent + 64
 *    random queries) cumulative mass >= tau (zipvl.txt Eq. 6-9), are chosen before its attention;
 *    prefill attention runs over T alone (rows outside T get 0, Alg. 1) and only T is cached.
 *    "prefill heads" (version 4, ours, not the paper's): the layer's prefill runs as its head
 *    patterns say (dense, BlindSight, MMInference), the same probe rows score the layer's keys as
 *    it runs, and T (Eq. 6-9) is kept once its prefill is done (Eq. 10). So a head pattern and
 *    ZipVL compose on one layer: the pattern keeps its prefill saving, ZipVL its KV saving; ZipVL's
 *    own prefill saving (Alg. 1's attention over T) is given up. "prefill set" is Alg. 1.
 *  - Both on one layer: ZipVL's set first (prefill over T), then each kv head's budget within it.
 *  - lazy-group: a lazy layer holds exactly its group's first layer's tokens, so its own
 *    kv-budget / zipvl-tau lines must equal that layer's (else the runtime refuses the plan,
 *    naming both lines' layers); decoder only (vision lazy-group and zipvl-tau lines are refused).
 *  - Head patterns shape the prefill, except on "prefill set" zipvl-tau layers (attention over T is
 *    dense);
 *    once a layer's cache is compacted its queries attend to every key it kept.
 * Example:
 *   ocellus-plan 1
 *   shape decoder layers 28 heads 12 kv-heads 2 head-dim 128
 *   decoder default sink
 *   decoder layer 0-1 heads all dense
 *   decoder layer 5 heads 0-3,7 intra-image+sink
 *   decoder lazy-group 4-6 mode vla
 * ================================================================================================ */
#include "plan/plan.h"
#include "port.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct tok {
    const char *p;
    size_t n;      /* 0: no token (end of statement) */
} tok;

/* Per-stack parse bookkeeping: on which line each value was set (0 = not set), for duplicate and
 * overlap messages. One allocation per stack, freed before parse returns. */
typedef struct stack_scratch {
    void *block;
    size_t block_bytes;
    uint32_t *head_line;     /* [layer * n_heads + head] */
    uint32_t *budget_line;   /* [layer * n_kv_heads + kv_head], decoder only */
    uint32_t *tau_line;      /* [layer] */
    uint32_t *lazy_line;     /* [layer]: line of the lazy group holding the layer */
    uint32_t *score_line;    /* [layer * n_kv_heads + kv_head], decoder only */
    uint32_t shape_line, default_line;
    oc_head_pattern default_pattern;
} stack_scratch;

typedef struct parser {
    oc_plan *plan;
    oc_error *err;
    const char *source;
    uint32_t line;             /* 1-based; 0 for whole-file problems */
    int version;               /* the header's format version */
    const char *cur, *end;     /* unread part of this line's statement */
    uint32_t sink_fraction_line, kv_window_line, calibration_line;
    stack_scratch st[OC_PLAN_N_STACKS];
} parser;

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static oc_status fail(parser *ps, const char *fmt, ...) {
    char msg[OC_ERROR_MESSAGE_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ps->line) return oc_fail(ps->err, OC_ERR_FORMAT, "%s:%u: %s", ps->source, (unsigned)ps->line, msg);
    return oc_fail(ps->err, OC_ERR_FORMAT, "%s: %s", ps->source, msg);
}

/* A token as messages show it: at most 40 bytes (the line checks already made it printable). */
typedef struct shown { char s[48]; } shown;
static shown show(tok t) {
    shown out;
    if (t.n <= 40) snprintf(out.s, sizeof out.s, "%.*s", (int)t.n, t.p);
    else snprintf(out.s, sizeof out.s, "%.37s...", t.p);
    return out;
}

static tok next(parser *ps) {
    while (ps->cur < ps->end && (*ps->cur == ' ' || *ps->cur == '\t')) ps->cur++;
    tok t = { ps->cur, 0 };
    while (ps->cur < ps->end && *ps->cur != ' ' && *ps->cur != '\t') ps->cur++;
    t.n = (size_t)(ps->cur - t.p);
    return t;
}

static int is(tok t, const char *word) { return t.n == strlen(word) && memcmp(t.p, word, t.n) == 0; }

static oc_status expect(parser *ps, const char *word) {
    tok t = next(ps);
    if (!t.n) return fail(ps, "missing '%s' at end of line", word);
    if (!is(t, word)) return fail(ps, "expected '%s', got '%s'", word, show(t).s);
    return OC_OK;
}

static oc_status expect_end(parser *ps) {
    tok t = next(ps);
    if (t.n) return fail(ps, "unexpected '%s' at end of statement", show(t).s);
    return OC_OK;
}

/* ---- numbers ---------------------------------------------------------------------------------- */

/* All digits? Value saturates just above limit so huge numbers are reported, never wrapped. */
static int digits_value(const char *p, size_t n, int64_t limit, int64_t *out) {
    if (n == 0) return 0;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        if (v <= limit) v = v * 10 + (p[i] - '0');
    }
    *out = v;
    return 1;
}

static oc_status parse_int(parser *ps, tok t, const char *what, int32_t lo, int32_t hi, int32_t *out) {
    int64_t v;
    if (!t.n) return fail(ps, "missing %s at end of line", what);
    if (!digits_value(t.p, t.n, hi, &v))
        return fail(ps, "bad number '%s' for %s (expected a whole number %d..%d)", show(t).s, what,
                    (int)lo, (int)hi);
    if (v < lo || v > hi) return fail(ps, "%s %s out of range (%d..%d)", what, show(t).s, (int)lo, (int)hi);
    *out = (int32_t)v;
    return OC_OK;
}

/* FRACTION = digits [ "." 1..6 digits ], 0 < value <= 1, returned in parts per million. Parsed by
 * hand: strtod depends on the C locale's decimal point. */
static oc_status parse_fraction(parser *ps, tok t, const char *what, int32_t *out_ppm) {
    if (!t.n) return fail(ps, "missing %s value at end of line", what);
    const char *dot = memchr(t.p, '.', t.n);
    size_t n_int = dot ? (size_t)(dot - t.p) : t.n;
    size_t n_frac = dot ? t.n - n_int - 1 : 0;
    int64_t int_part, frac_part = 0;
    if (!digits_value(t.p, n_int, OC_PLAN_PPM, &int_part) ||
        (dot && !digits_value(dot + 1, n_frac, OC_PLAN_PPM, &frac_part)))
        return fail(ps, "bad number '%s' for %s (expected a decimal such as 0.975)", show(t).s, what);
    if (n_frac > 6) return fail(ps, "too many decimals in '%s' for %s (at most 6)", show(t).s, what);
    for (size_t i = n_frac; i < 6; i++) frac_part *= 10;
    int64_t ppm = int_part > 1 ? OC_PLAN_PPM + 1 : int_part * OC_PLAN_PPM + frac_part;
    if (ppm <= 0 || ppm > OC_PLAN_PPM)
        return fail(ps, "%s %s out of range (0 < value <= 1)", what, show(t).s);
    *out_ppm = (int32_t)ppm;
    return OC_OK;
}

/* ---- layer ranges and head lists ------------------------------------------------------------------- */

static oc_status parse_layers(parser *ps, oc_plan_stack stack, tok t, int32_t *first, int32_t *last) {
    int32_t n_layers = ps->plan->stacks[stack].shape.n_layers;
    const char *name = oc_plan_stack_name(stack);
    if (!t.n) return fail(ps, "missing layer range at end of line");
    if (is(t, "all")) { *first = 0; *last = n_layers - 1; return OC_OK; }
    const char *dash = memchr(t.p, '-', t.n);
    size_t n_a = dash ? (size_t)(dash - t.p) : t.n;
    int64_t a, b;
    if (!digits_value(t.p, n_a, OC_PLAN_MAX_LAYERS, &a) ||
        (dash && !digits_value(dash + 1, t.n - n_a - 1, OC_PLAN_MAX_LAYERS, &b)))
        return fail(ps, "bad layer range '%s' (expected N, N-M or all)", show(t).s);
    if (!dash) b = a;
    tok bad = dash && b >= n_layers ? (tok){ dash + 1, t.n - n_a - 1 } : (tok){ t.p, n_a };
    if (a >= n_layers || b >= n_layers)
        return fail(ps, "layer %s out of range (the %s has %d layers: 0..%d)", show(bad).s, name,
                    (int)n_layers, (int)n_layers - 1);
    if (a > b) return fail(ps, "bad layer range '%s' (first layer after last)", show(t).s);
    *first = (int32_t)a;
    *last = (int32_t)b;
    return OC_OK;
}

typedef struct head_set {
    uint64_t bits[OC_PLAN_MAX_HEADS / 64];
} head_set;

static int set_has(const head_set *s, int32_t i) { return (int)((s->bits[i / 64] >> (i % 64)) & 1u); }

/* HEADS over n heads; what = "head" or "kv-head" for messages. */
static oc_status parse_heads(parser *ps, oc_plan_stack stack, tok t, int32_t n, const char *what,
                             head_set *out) {
    memset(out, 0, sizeof *out);
    if (!t.n) return fail(ps, "missing %s list at end of line", what);
    if (is(t, "all")) {
        for (int32_t i = 0; i < n; i++) out->bits[i / 64] |= 1ull << (i % 64);
        return OC_OK;
    }
    const char *p = t.p, *end = t.p + t.n;
    while (p <= end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *item_end = comma ? comma : end;
        const char *dash = memchr(p, '-', (size_t)(item_end - p));
        const char *a_end = dash ? dash : item_end;
        int64_t a, b;
        if (!digits_value(p, (size_t)(a_end - p), OC_PLAN_MAX_HEADS, &a) ||
            (dash && !digits_value(dash + 1, (size_t)(item_end - dash - 1), OC_PLAN_MAX_HEADS, &b)))
            return fail(ps, "bad %s list '%s' (expected e.g. 0-3,7 or all)", what, show(t).s);
        if (!dash) b = a;
        if (a >= n || b >= n) {
            tok num = a >= n ? (tok){ p, (size_t)(a_end - p) } : (tok){ dash + 1, (size_t)(item_end - dash - 1) };
            return fail(ps, "%s %s out of range (the %s has %d %ss: 0..%d)", what, show(num).s,
                        oc_plan_stack_name(stack), (int)n, what, (int)n - 1);
        }
        if (a > b) return fail(ps, "bad %s list '%s' (range %d-%d runs backwards)", what, show(t).s, (int)a, (int)b);
        for (int64_t i = a; i <= b; i++) {
            if (set_has(out, (int32_t)i))
                return fail(ps, "%s %d listed twice in '%s'", what, (int)i, show(t).s);
            out->bits[i / 64] |= 1ull << (i % 64);
        }
        if (!comma) break;
        p = comma + 1;
    }
    return OC_OK;
}

/* ---- patterns ---------------------------------------------------------------------------------------- */

/* a-shape(sink=N,local=N) */
static oc_status parse_a_shape(parser *ps, tok t, oc_head_pattern *out) {
    static const char pre[] = "a-shape(sink=", mid[] = ",local=";
    const char *end = t.p + t.n;
    if (t.n == 7)
        return fail(ps, "a-shape needs its sizes: a-shape(sink=N,local=N), e.g. a-shape(sink=128,local=1024)");
    const char *p = t.p + sizeof pre - 1;
    const char *comma = t.n > sizeof pre - 1 ? memchr(p, ',', (size_t)(end - p)) : NULL;
    if (t.n < sizeof pre - 1 || memcmp(t.p, pre, sizeof pre - 1) != 0 || !comma || comma == p ||
        end[-1] != ')' || (size_t)(end - comma) < sizeof mid + 1 || memcmp(comma, mid, sizeof mid - 1) != 0)
        return fail(ps, "bad a-shape '%s' (expected a-shape(sink=N,local=N))", show(t).s);
    tok sink = { p, (size_t)(comma - p) };
    tok local = { comma + sizeof mid - 1, (size_t)(end - 1 - (comma + sizeof mid - 1)) };
    oc_status st = parse_int(ps, sink, "a-shape sink", 0, OC_PLAN_MAX_TOKENS, &out->n_sink);
    if (st == OC_OK) st = parse_int(ps, local, "a-shape local", 1, OC_PLAN_MAX_TOKENS, &out->n_local);
    return st;
}

/* NAME(k1=v1,k2=v2,...) with exactly the n keys given, in that order: the values as tokens. */
static oc_status parse_params(parser *ps, tok t, const char *name, const char *const *keys, int n, tok *vals,
                              const char *usage) {
    size_t n_name = strlen(name);
    const char *p = t.p + n_name + 1, *end = t.p + t.n;
    if (t.n == n_name) return fail(ps, "%s needs its parameters: %s", name, usage);
    if (t.n < n_name + 2 || t.p[n_name] != '(' || end[-1] != ')')
        return fail(ps, "bad %s '%s' (expected %s)", name, show(t).s, usage);
    end--;   /* at the ')' */
    for (int k = 0; k < n; k++) {
        size_t n_key = strlen(keys[k]);
        if ((size_t)(end - p) < n_key + 1 || memcmp(p, keys[k], n_key) != 0 || p[n_key] != '=')
            return fail(ps, "bad %s '%s' (expected %s)", name, show(t).s, usage);
        p += n_key + 1;
        const char *stop = k + 1 < n ? memchr(p, ',', (size_t)(end - p)) : end;
        /* a value is non-empty, and only the last runs to the ')' (no further comma) */
        if (!stop || stop == p || memchr(p, ',', (size_t)(stop - p)) ||
            (k + 1 == n && memchr(p, ',', (size_t)(end - p))))
            return fail(ps, "bad %s '%s' (expected %s)", name, show(t).s, usage);
        vals[k] = (tok){ p, (size_t)(stop - p) };
        p = stop + (k + 1 < n);
    }
    return OC_OK;
}

static oc_status parse_vertical_slash(parser *ps, tok t, oc_head_pattern *out) {
    static const char *const keys[] = { "vertical", "slash" };
    tok v[2];
    oc_status st = parse_params(ps, t, "vertical-slash", keys, 2, v, "vertical-slash(vertical=N,slash=N)");
    if (st == OC_OK) st = parse_int(ps, v[0], "vertical-slash vertical", 0, OC_PLAN_MAX_TOKENS, &out->n_vertical);
    if (st == OC_OK) st = parse_int(ps, v[1], "vertical-slash slash", 1, OC_PLAN_MAX_TOKENS, &out->n_slash);
    return st;
}

static oc_status parse_grid(parser *ps, tok t, oc_head_pattern *out) {
    static const char *const keys[] = { "stride", "lines", "max-stride" };
    static const char usage[] = "grid(stride=N|auto,lines=h+v+s,max-stride=N)";
    tok v[3];
    oc_status st = parse_params(ps, t, "grid", keys, 3, v, usage);
    if (st != OC_OK) return st;
    if (is(v[0], "auto")) out->grid_stride = 0;
    else if ((st = parse_int(ps, v[0], "grid stride", 1, OC_PLAN_MAX_TOKENS, &out->grid_stride))) return st;
    /* LINES: h, v, s in this order, each at most once, joined by '+': bit k of the index is line k */
    int32_t lines = 0;
    for (int32_t k = 1; k <= 7 && !lines; k++)
        if (is(v[1], oc_plan_grid_lines_name(k))) lines = k;
    if (!lines)
        return fail(ps, "bad grid lines '%s' (expected h, v, s or a combination in that order such as v+s)",
                    show(v[1]).s);
    out->grid_lines = lines;
    return parse_int(ps, v[2], "grid max-stride", 2, OC_PLAN_MAX_TOKENS, &out->grid_max_stride);
}

static oc_status parse_pattern(parser *ps, oc_plan_stack stack, tok t, oc_head_pattern *out);

/* NAME(k0=P,k1=P,..): each P is a pattern token with parentheses of its own, so the parts split at
 * the commas outside them; the parts are dense, a-shape, vertical-slash or grid. q-boundary:
 * (text, vision) into modal[]; 2d-boundary: (text-text, text-vision, vision-text, vision-vision)
 * into pair[][]. */
static oc_status parse_parts(parser *ps, oc_plan_stack stack, tok t, oc_head_pattern *out) {
    static const char *const q_keys[] = { "text=", "vision=" };
    static const char *const d2_keys[] = { "text-text=", "text-vision=", "vision-text=", "vision-vision=" };
    static const char q_usage[] = "q-boundary(text=P,vision=P), P dense, a-shape(..), vertical-slash(..) or grid(..)";
    static const char d2_usage[] = "2d-boundary(text-text=P,text-vision=P,vision-text=P,vision-vision=P), P dense, "
                                   "a-shape(..), vertical-slash(..) or grid(..)";
    int q = out->kind == OC_PATTERN_Q_BOUNDARY, n = q ? 2 : 4;
    const char *const *keys = q ? q_keys : d2_keys, *usage = q ? q_usage : d2_usage, *name = q ? "q-boundary" : "2d-boundary";
    size_t n_name = strlen(name);
    const char *p = t.p + n_name + 1, *end = t.p + t.n;   /* after "NAME(" */
    if (t.n == n_name) return fail(ps, "%s needs its patterns: %s", name, usage);
    if (t.n < n_name + 2 || t.p[n_name] != '(' || end[-1] != ')')
        return fail(ps, "bad %s '%s' (expected %s)", name, show(t).s, usage);
    end--;
    for (int m = 0; m < n; m++) {
        size_t n_key = strlen(keys[m]);
        if ((size_t)(end - p) < n_key || memcmp(p, keys[m], n_key) != 0)
            return fail(ps, "bad %s '%s' (expected %s)", name, show(t).s, usage);
        p += n_key;
        const char *stop = p;
        int depth = 0;
        while (stop < end && (depth > 0 || *stop != ',')) {
            depth += *stop == '(' ? 1 : *stop == ')' ? -1 : 0;
            stop++;
        }
        if (stop == p || (m + 1 < n) != (stop < end)) return fail(ps, "bad %s '%s' (expected %s)", name, show(t).s, usage);
        oc_head_pattern sub;
        oc_status st = parse_pattern(ps, stack, (tok){ p, (size_t)(stop - p) }, &sub);
        if (st != OC_OK) return st;
        if (!(sub.kind == OC_PATTERN_DENSE || sub.kind == OC_PATTERN_A_SHAPE || oc_pattern_is_dynamic(sub.kind)))
            return fail(ps, "%s's %.*s pattern is %s (expected dense, a-shape, vertical-slash or grid)", name,
                        (int)(n_key - 1), keys[m], oc_plan_pattern_name(sub.kind));
        if (q) out->modal[m] = oc_pattern_to_modal(&sub);
        else out->pair[m / OC_N_MODALITIES][m % OC_N_MODALITIES] = oc_pattern_to_modal(&sub);
        p = stop + 1;
    }
    return OC_OK;
}

static int starts(tok t, const char *word) {
    size_t n = strlen(word);
    return t.n >= n && memcmp(t.p, word, n) == 0 && (t.n == n || t.p[n] == '(');
}

static oc_status parse_pattern(parser *ps, oc_plan_stack stack, tok t, oc_head_pattern *out) {
    memset(out, 0, sizeof *out);
    if (!t.n) return fail(ps, "missing pattern at end of line");
    oc_pattern_kind kind = OC_PATTERN_COUNT;
    oc_status st = OC_OK;
    for (int k = 0; k < OC_PATTERN_A_SHAPE; k++)
        if (is(t, oc_plan_pattern_name((oc_pattern_kind)k))) kind = (oc_pattern_kind)k;
    if (kind == OC_PATTERN_COUNT && t.n >= 7 && memcmp(t.p, "a-shape", 7) == 0) {
        st = parse_a_shape(ps, t, out);
        kind = OC_PATTERN_A_SHAPE;
    } else if (kind == OC_PATTERN_COUNT && (starts(t, "vertical-slash") || starts(t, "grid") ||
                                            starts(t, "q-boundary") || starts(t, "2d-boundary"))) {
        kind = starts(t, "grid") ? OC_PATTERN_GRID
             : starts(t, "q-boundary") ? OC_PATTERN_Q_BOUNDARY
             : starts(t, "2d-boundary") ? OC_PATTERN_BOUNDARY_2D : OC_PATTERN_VERTICAL_SLASH;
        int need = kind == OC_PATTERN_BOUNDARY_2D ? 3 : 2;
        if (ps->version < need)
            return fail(ps, "pattern '%s' needs format version %d (the header 'ocellus-plan %d')",
                        oc_plan_pattern_name(kind), need, need);
        if (oc_pattern_is_boundary(kind) && !oc_plan_pattern_allowed(stack, kind))
            return fail(ps, "pattern '%s' is for decoder heads only (it groups tokens by the prompt's "
                        "text and image spans)", oc_plan_pattern_name(kind));
        out->kind = kind;
        st = kind == OC_PATTERN_GRID ? parse_grid(ps, t, out)
           : oc_pattern_is_boundary(kind) ? parse_parts(ps, stack, t, out) : parse_vertical_slash(ps, t, out);
    }
    if (st != OC_OK) return st;
    if (kind == OC_PATTERN_COUNT)
        return fail(ps, "unknown pattern '%s' (expected dense, sink, intra-image, intra-image+sink, a-shape%s)",
                    show(t).s, ps->version >= 3 ? ", vertical-slash, grid, q-boundary, 2d-boundary"
                             : ps->version >= 2 ? ", vertical-slash, grid, q-boundary" : "");
    if (!oc_plan_pattern_allowed(stack, kind))
        return fail(ps, "pattern '%s' is for decoder heads only (BlindSight masks need text and image "
                    "spans); vision heads take dense, a-shape, vertical-slash or grid", show(t).s);
    out->kind = kind;
    return OC_OK;
}

/* ---- statements ------------------------------------------------------------------------------------------ */

static oc_status stmt_shape(parser *ps) {
    tok t = next(ps);
    oc_plan_stack stack;
    if (is(t, "decoder")) stack = OC_PLAN_DECODER;
    else if (is(t, "vision")) stack = OC_PLAN_VISION;
    else if (!t.n) return fail(ps, "missing stack after 'shape' (expected decoder or vision)");
    else return fail(ps, "unknown stack '%s' after 'shape' (expected decoder or vision)", show(t).s);
    stack_scratch *sc = &ps->st[stack];
    if (sc->shape_line)
        return fail(ps, "duplicate 'shape %s' (first on line %u)", oc_plan_stack_name(stack), (unsigned)sc->shape_line);
    oc_plan_shape s;
    oc_status st;
    if ((st = expect(ps, "layers")) || (st = parse_int(ps, next(ps), "layers", 1, OC_PLAN_MAX_LAYERS, &s.n_layers)) ||
        (st = expect(ps, "heads")) || (st = parse_int(ps, next(ps), "heads", 1, OC_PLAN_MAX_HEADS, &s.n_heads)))
        return st;
    if (stack == OC_PLAN_DECODER) {
        if ((st = expect(ps, "kv-heads")) ||
            (st = parse_int(ps, next(ps), "kv-heads", 1, OC_PLAN_MAX_HEADS, &s.n_kv_heads)))
            return st;
    } else {
        s.n_kv_heads = s.n_heads;   /* the vision encoder is plain multi-head attention */
    }
    if ((st = expect(ps, "head-dim")) ||
        (st = parse_int(ps, next(ps), "head-dim", 1, OC_PLAN_MAX_HEAD_DIM, &s.head_dim)) ||
        (st = expect_end(ps)))
        return st;
    if (s.n_kv_heads > s.n_heads || s.n_heads % s.n_kv_heads)
        return fail(ps, "%d heads cannot share %d kv-heads (heads must be a multiple of kv-heads)",
                    (int)s.n_heads, (int)s.n_kv_heads);
    st = oc_plan_stack_init(ps->plan, stack, &s, ps->err);
    if (st != OC_OK) return st;
    /* bookkeeping: which line set each value */
    size_t n_heads = (size_t)s.n_layers * (size_t)s.n_heads;
    size_t n_budgets = stack == OC_PLAN_DECODER ? (size_t)s.n_layers * (size_t)s.n_kv_heads : 0;
    size_t n_words = n_heads + 2 * n_budgets + 2 * (size_t)s.n_layers;
    sc->block_bytes = n_words * sizeof(uint32_t);
    sc->block = oc_mem_calloc(&ps->plan->alloc, sc->block_bytes);
    if (!sc->block) return oc_fail(ps->err, OC_ERR_NOMEM, "plan: out of memory");
    sc->head_line = sc->block;
    sc->budget_line = sc->head_line + n_heads;
    sc->tau_line = sc->budget_line + n_budgets;
    sc->lazy_line = sc->tau_line + s.n_layers;
    sc->score_line = sc->lazy_line + s.n_layers;
    sc->shape_line = ps->line;
    return OC_OK;
}

static oc_status set_head(parser *ps, oc_plan_stack stack, int32_t layer, int32_t head, const oc_head_pattern *p) {
    stack_scratch *sc = &ps->st[stack];
    oc_plan_shape *s = &ps->plan->stacks[stack].shape;
    size_t i = (size_t)layer * (size_t)s->n_heads + (size_t)head;
    if (sc->head_line[i])
        return fail(ps, "%s layer %d head %d already set on line %u", oc_plan_stack_name(stack), (int)layer,
                    (int)head, (unsigned)sc->head_line[i]);
    sc->head_line[i] = ps->line;
    ps->plan->stacks[stack].heads[i] = *p;
    return OC_OK;
}

static oc_status set_budget(parser *ps, int32_t layer, int32_t kv_head, int32_t budget) {
    stack_scratch *sc = &ps->st[OC_PLAN_DECODER];
    oc_stack_plan *s = &ps->plan->stacks[OC_PLAN_DECODER];
    size_t i = (size_t)layer * (size_t)s->shape.n_kv_heads + (size_t)kv_head;
    if (sc->budget_line[i])
        return fail(ps, "decoder layer %d kv-head %d kv-budget already set on line %u", (int)layer,
                    (int)kv_head, (unsigned)sc->budget_line[i]);
    sc->budget_line[i] = ps->line;
    s->kv_budget_tokens[i] = budget;
    return OC_OK;
}

static oc_status parse_budget(parser *ps, tok t, int32_t *out) {
    int64_t v;
    if (!t.n) return fail(ps, "missing kv-budget at end of line");
    if (is(t, "full")) { *out = OC_PLAN_KV_FULL; return OC_OK; }
    if (!digits_value(t.p, t.n, OC_PLAN_MAX_TOKENS, &v) || v < 1 || v > OC_PLAN_MAX_TOKENS)
        return fail(ps, "bad kv-budget '%s' (expected a token count 1..%d or full)", show(t).s, OC_PLAN_MAX_TOKENS);
    *out = (int32_t)v;
    return OC_OK;
}

/* After "STACK layer LAYERS": heads / kv-heads / kv-budget / zipvl-tau / a row of patterns. */
static oc_status stmt_layer(parser *ps, oc_plan_stack stack) {
    const char *name = oc_plan_stack_name(stack);
    const oc_plan_shape *s = &ps->plan->stacks[stack].shape;
    tok range = next(ps);
    int32_t first, last;
    oc_status st = parse_layers(ps, stack, range, &first, &last);
    if (st != OC_OK) return st;
    tok t = next(ps);
    head_set set;
    oc_head_pattern p;
    if (is(t, "heads")) {
        if ((st = parse_heads(ps, stack, next(ps), s->n_heads, "head", &set)) ||
            (st = parse_pattern(ps, stack, next(ps), &p)) || (st = expect_end(ps)))
            return st;
        for (int32_t l = first; l <= last; l++)
            for (int32_t h = 0; h < s->n_heads; h++)
                if (set_has(&set, h) && (st = set_head(ps, stack, l, h, &p))) return st;
        return OC_OK;
    }
    if (is(t, "kv-heads") || is(t, "kv-budget")) {
        if (stack != OC_PLAN_DECODER)
            return fail(ps, "%s is for decoder layers (the vision encoder keeps no KV cache)", show(t).s);
        int32_t b;
        if (is(t, "kv-heads")) {
            if ((st = parse_heads(ps, stack, next(ps), s->n_kv_heads, "kv-head", &set)) ||
                (st = expect(ps, "kv-budget")) || (st = parse_budget(ps, next(ps), &b)) || (st = expect_end(ps)))
                return st;
            for (int32_t l = first; l <= last; l++)
                for (int32_t k = 0; k < s->n_kv_heads; k++)
                    if (set_has(&set, k) && (st = set_budget(ps, l, k, b))) return st;
            return OC_OK;
        }
        int32_t row[OC_PLAN_MAX_HEADS];
        int32_t n = 0;
        for (tok v = next(ps); v.n; v = next(ps), n++) {
            if (n == s->n_kv_heads) {   /* count the rest for the message */
                while (next(ps).n) n++;
                return fail(ps, "decoder layer %s lists %d kv-budgets; the decoder has %d kv-heads",
                            show(range).s, (int)n + 1, (int)s->n_kv_heads);
            }
            if ((st = parse_budget(ps, v, &row[n]))) return st;
        }
        if (n != s->n_kv_heads)
            return fail(ps, "decoder layer %s lists %d kv-budgets; the decoder has %d kv-heads",
                        show(range).s, (int)n, (int)s->n_kv_heads);
        for (int32_t l = first; l <= last; l++)
            for (int32_t k = 0; k < n; k++)
                if ((st = set_budget(ps, l, k, row[k]))) return st;
        return OC_OK;
    }
    if (is(t, "visual-score")) {
        if (stack != OC_PLAN_DECODER) return fail(ps, "visual-score is for decoder layers (SparseMM kv heads)");
        int32_t row[OC_PLAN_MAX_HEADS];
        int32_t n = 0;
        for (tok v = next(ps); v.n; v = next(ps), n++) {
            if (n == s->n_kv_heads) {   /* count the rest for the message */
                while (next(ps).n) n++;
                n++;
                break;
            }
            if (is(v, "0")) row[n] = 0;
            else if ((st = parse_fraction(ps, v, "visual-score", &row[n]))) return st;
        }
        if (n != s->n_kv_heads)
            return fail(ps, "decoder layer %s lists %d visual-scores; the decoder has %d kv-heads", show(range).s,
                        (int)n, (int)s->n_kv_heads);
        stack_scratch *sc = &ps->st[OC_PLAN_DECODER];
        for (int32_t l = first; l <= last; l++)
            for (int32_t k = 0; k < n; k++) {
                size_t i = (size_t)l * (size_t)s->n_kv_heads + (size_t)k;
                if (sc->score_line[i])
                    return fail(ps, "decoder layer %d kv-head %d visual-score already set on line %u", (int)l, (int)k,
                                (unsigned)sc->score_line[i]);
                sc->score_line[i] = ps->line;
                ps->plan->stacks[OC_PLAN_DECODER].visual_score_ppm[i] = row[k];
            }
        return OC_OK;
    }
    if (is(t, "zipvl-tau")) {
        int32_t tau;
        uint8_t heads_prefill = 0;
        if ((st = parse_fraction(ps, next(ps), "zipvl-tau", &tau))) return st;
        tok w = next(ps);
        if (w.n) {   /* version 4: "prefill set" (Alg. 1, the default) or "prefill heads" (ours) */
            if (!is(w, "prefill"))
                return fail(ps, "unexpected '%s' after zipvl-tau's threshold (expected 'prefill set' or "
                            "'prefill heads')", show(w).s);
            if (ps->version < 4)
                return fail(ps, "zipvl-tau's 'prefill' word needs format version 4 (the header 'ocellus-plan 4')");
            w = next(ps);
            if (!w.n)
                return fail(ps, "zipvl-tau prefill needs set (attention over ZipVL's set, Alg. 1) or heads (the "
                            "layer's head patterns, then ZipVL keeps its set)");
            if (is(w, "heads")) heads_prefill = 1;
            else if (!is(w, "set"))
                return fail(ps, "zipvl-tau prefill '%s': expected set (attention over ZipVL's set, Alg. 1) or "
                            "heads (the layer's head patterns, then ZipVL keeps its set)", show(w).s);
        }
        if ((st = expect_end(ps))) return st;
        for (int32_t l = first; l <= last; l++) {
            if (ps->st[stack].tau_line[l])
                return fail(ps, "%s layer %d zipvl-tau already set on line %u", name, (int)l,
                            (unsigned)ps->st[stack].tau_line[l]);
            ps->st[stack].tau_line[l] = ps->line;
            ps->plan->stacks[stack].zipvl_tau_ppm[l] = tau;
            ps->plan->stacks[stack].zipvl_heads_prefill[l] = heads_prefill;
        }
        return OC_OK;
    }
    /* Row form: count first so a short or long row is reported as such. */
    const char *row_start = t.p;
    int32_t n = 0;
    for (tok v = t; v.n; v = next(ps)) n++;
    if (n != s->n_heads)
        return fail(ps, "%s layer %s lists %d head patterns; the %s has %d heads", name, show(range).s,
                    (int)n, name, (int)s->n_heads);
    oc_head_pattern row[OC_PLAN_MAX_HEADS];
    ps->cur = row_start;
    for (int32_t h = 0; h < n; h++)
        if ((st = parse_pattern(ps, stack, next(ps), &row[h]))) return st;
    for (int32_t l = first; l <= last; l++)
        for (int32_t h = 0; h < n; h++)
            if ((st = set_head(ps, stack, l, h, &row[h]))) return st;
    return OC_OK;
}

static oc_status stmt_lazy_group(parser *ps, oc_plan_stack stack) {
    const char *name = oc_plan_stack_name(stack);
    tok range = next(ps);
    int32_t first, last;
    oc_status st = parse_layers(ps, stack, range, &first, &last);
    if (st != OC_OK) return st;
    if (first == last)
        return fail(ps, "lazy-group '%s' needs two or more layers (the first computes Q/K, the rest reuse them)",
                    show(range).s);
    if ((st = expect(ps, "mode"))) return st;
    tok m = next(ps);
    oc_lazy_mode mode;
    if (is(m, "gla")) mode = OC_LAZY_GLA;
    else if (is(m, "vla")) mode = OC_LAZY_VLA;
    else if (!m.n) return fail(ps, "missing lazy mode at end of line (expected gla or vla)");
    else return fail(ps, "unknown lazy mode '%s' (expected gla or vla)", show(m).s);
    if ((st = expect_end(ps))) return st;
    if (stack == OC_PLAN_VISION && mode != OC_LAZY_GLA)
        return fail(ps, "vision lazy-group must use mode gla (every vision token is visual, so vla would equal gla)");
    uint32_t *lazy_line = ps->st[stack].lazy_line;
    for (int32_t l = first; l <= last; l++)
        if (lazy_line[l])
            return fail(ps, "%s lazy-group %s overlaps the lazy-group on line %u", name, show(range).s,
                        (unsigned)lazy_line[l]);
    for (int32_t l = first; l <= last; l++) lazy_line[l] = ps->line;
    return oc_plan_add_lazy_group(ps->plan, stack, first, last, mode, ps->err);
}

static oc_status stmt_stack(parser *ps, oc_plan_stack stack) {
    const char *name = oc_plan_stack_name(stack);
    stack_scratch *sc = &ps->st[stack];
    if (!sc->shape_line)
        return fail(ps, "%s statement before the 'shape %s' line (a stack's shape comes first)", name, name);
    tok t = next(ps);
    if (is(t, "layer")) return stmt_layer(ps, stack);
    if (is(t, "lazy-group")) return stmt_lazy_group(ps, stack);
    if (is(t, "default")) {
        if (sc->default_line)
            return fail(ps, "duplicate '%s default' (first on line %u)", name, (unsigned)sc->default_line);
        oc_status st = parse_pattern(ps, stack, next(ps), &sc->default_pattern);
        if (st == OC_OK) st = expect_end(ps);
        if (st == OC_OK) sc->default_line = ps->line;
        return st;
    }
    if (!t.n) return fail(ps, "missing statement after '%s' (expected layer, default, lazy-group)", name);
    return fail(ps, "unknown %s statement '%s' (expected layer, default, lazy-group)", name, show(t).s);
}

/* "calibration" WORD ...: kept as the words joined by single spaces. */
static oc_status stmt_calibration(parser *ps) {
    if (ps->calibration_line)
        return fail(ps, "duplicate calibration line (first on line %u)", (unsigned)ps->calibration_line);
    char *dst = ps->plan->calibration;
    size_t len = 0;
    for (tok w = next(ps); w.n; w = next(ps)) {
        if (len + (len > 0) + w.n >= OC_PLAN_CALIBRATION_BYTES)
            return fail(ps, "calibration line longer than %d bytes", OC_PLAN_CALIBRATION_BYTES - 1);
        char word[OC_PLAN_CALIBRATION_BYTES];
        memcpy(word, w.p, w.n);
        word[w.n] = '\0';
        if (!oc_plan_calibration_ok(word))
            return fail(ps, "bad calibration word '%s' (expected key=value)", show(w).s);
        if (len) dst[len++] = ' ';
        memcpy(dst + len, w.p, w.n);
        len += w.n;
        dst[len] = '\0';
    }
    if (!len) return fail(ps, "empty calibration line (expected key=value words)");
    ps->calibration_line = ps->line;
    return OC_OK;
}

static oc_status statement(parser *ps) {
    tok t = next(ps);
    oc_status st;
    if (!t.n) return OC_OK;   /* blank or comment-only line */
    if (is(t, "shape")) return stmt_shape(ps);
    if (is(t, "decoder")) return stmt_stack(ps, OC_PLAN_DECODER);
    if (is(t, "vision")) return stmt_stack(ps, OC_PLAN_VISION);
    if (is(t, "sink-fraction")) {
        if (ps->sink_fraction_line)
            return fail(ps, "duplicate sink-fraction (first on line %u)", (unsigned)ps->sink_fraction_line);
        if ((st = parse_fraction(ps, next(ps), "sink-fraction", &ps->plan->sink_fraction_ppm)) ||
            (st = expect_end(ps)))
            return st;
        ps->sink_fraction_line = ps->line;
        return OC_OK;
    }
    if (is(t, "kv-window")) {
        if (ps->kv_window_line)
            return fail(ps, "duplicate kv-window (first on line %u)", (unsigned)ps->kv_window_line);
        if ((st = parse_int(ps, next(ps), "kv-window", 0, OC_PLAN_MAX_TOKENS, &ps->plan->kv_window_tokens)) ||
            (st = expect_end(ps)))
            return st;
        ps->kv_window_line = ps->line;
        return OC_OK;
    }
    if (is(t, "calibration")) return stmt_calibration(ps);
    if (is(t, "ocellus-plan")) return fail(ps, "header 'ocellus-plan' repeated (it belongs on line 1 only)");
    return fail(ps, "unknown statement '%s' (expected shape, sink-fraction, kv-window, calibration, decoder, vision)",
                show(t).s);
}

static oc_status header(parser *ps) {
    tok t = next(ps);
    if (!is(t, "ocellus-plan")) return fail(ps, "missing header: a plan starts with the line 'ocellus-plan 1'");
    t = next(ps);
    if (!t.n) return fail(ps, "missing version after 'ocellus-plan'");
    if (is(t, "1")) ps->version = 1;
    else if (is(t, "2")) ps->version = 2;
    else if (is(t, "3")) ps->version = 3;
    else if (is(t, "4")) ps->version = 4;
    else return fail(ps, "unsupported plan version '%s' (this build reads versions 1 to 4)", show(t).s);
    return expect_end(ps);
}

/* Check one line's bytes and set ps->cur/end to its statement part (before any comment, without
 * the CR of a CRLF end). */
static oc_status scan_line(parser *ps, const char *line, size_t n) {
    if (n > 0 && line[n - 1] == '\r') n--;   /* CRLF (or a final CR without LF) */
    if (n > OC_PLAN_MAX_LINE_BYTES) return fail(ps, "line longer than %d bytes", OC_PLAN_MAX_LINE_BYTES);
    const char *comment = NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)line[i];
        if (c == 0) return fail(ps, "NUL byte in column %zu", i + 1);
        if (c == '\r') return fail(ps, "carriage return in column %zu (only CRLF line ends are accepted)", i + 1);
        if ((c < 0x20 && c != '\t') || c == 0x7f) return fail(ps, "control byte 0x%02x in column %zu", c, i + 1);
        if (c == '#' && !comment) comment = line + i;
        if (c >= 0x80 && !comment)
            return fail(ps, "non-ASCII byte 0x%02x in column %zu (only comments may hold UTF-8)", c, i + 1);
    }
    ps->cur = line;
    ps->end = comment ? comment : line + n;
    return OC_OK;
}

/* After the last line: the decoder shape exists, unset heads take the default, budgets hold the
 * window (checked here because kv-window may come after the budgets). */
static oc_status finish(parser *ps) {
    oc_plan *plan = ps->plan;
    ps->line = 0;
    if (!ps->st[OC_PLAN_DECODER].shape_line)
        return fail(ps, "missing 'shape decoder ...' line (a plan states the decoder it fits)");
    for (int i = 0; i < OC_PLAN_N_STACKS; i++) {
        oc_stack_plan *s = &plan->stacks[i];
        stack_scratch *sc = &ps->st[i];
        size_t n = (size_t)s->shape.n_layers * (size_t)s->shape.n_heads;
        for (size_t j = 0; j < n; j++)
            if (!sc->head_line[j]) s->heads[j] = sc->default_pattern;
    }
    const oc_stack_plan *dec = &plan->stacks[OC_PLAN_DECODER];
    size_t n_budgets = (size_t)dec->shape.n_layers * (size_t)dec->shape.n_kv_heads;
    for (size_t j = 0; j < n_budgets; j++) {
        int32_t b = dec->kv_budget_tokens[j];
        if (b != OC_PLAN_KV_FULL && b < plan->kv_window_tokens) {
            ps->line = ps->st[OC_PLAN_DECODER].budget_line[j];
            return fail(ps, "kv-budget %d is below kv-window %d (a SparseMM budget includes the local window)",
                        (int)b, (int)plan->kv_window_tokens);
        }
    }
    return OC_OK;
}

oc_status oc_plan_parse(oc_plan **out, const char *text, size_t n_bytes, const char *source,
                        const oc_allocator *alloc, oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "plan: out is NULL");
    *out = NULL;
    parser ps;
    memset(&ps, 0, sizeof ps);
    ps.err = err;
    ps.source = source ? source : "plan";
    if (!text && n_bytes) return oc_fail(err, OC_ERR_INVALID, "plan: text is NULL");
    if (n_bytes == 0) return fail(&ps, "empty file (a plan starts with the line 'ocellus-plan 1')");
    oc_status st = oc_plan_new_empty(&ps.plan, alloc, err);
    if (st != OC_OK) return st;
    size_t pos = 0;
    while (st == OC_OK && pos < n_bytes) {
        const char *line = text + pos;
        const char *lf = memchr(line, '\n', n_bytes - pos);
        size_t n = lf ? (size_t)(lf - line) : n_bytes - pos;
        pos += n + (lf ? 1 : 0);
        if (ps.line == UINT32_MAX) { st = fail(&ps, "too many lines"); break; }
        ps.line++;
        st = scan_line(&ps, line, n);
        if (st == OC_OK) st = ps.line == 1 ? header(&ps) : statement(&ps);
    }
    if (st == OC_OK) st = finish(&ps);
    for (int i = 0; i < OC_PLAN_N_STACKS; i++) oc_mem_free(&ps.plan->alloc, ps.st[i].block, ps.st[i].block_bytes);
    if (st != OC_OK) {
        oc_plan_free(ps.plan);
        return st;
    }
    *out = ps.plan;
    return OC_OK;
}

oc_status oc_plan_load_file(oc_plan **out, const char *path, const oc_allocator *alloc, oc_error *err) {
    if (!out || !path) return oc_fail(err, OC_ERR_INVALID, "plan: NULL argument to oc_plan_load_file");
    *out = NULL;
    oc_port_mapping m;
    char msg[OC_ERROR_MESSAGE_BYTES];
    if (oc_port_map_file(path, &m, msg, sizeof msg) != 0) return oc_fail(err, OC_ERR_IO, "%s", msg);
    oc_status st = oc_plan_parse(out, m.data, m.n_bytes, path, alloc, err);
    oc_port_unmap_file(&m);
    return st;
}
