/* plan_model.c: the in-memory attention plan: creation and freeing, validation (the rules the
 * parser enforces, for plans calibrate builds in memory), the model-fit check, equality and the
 * per-stack statistics. Text reading is plan.c, text writing plan_write.c. */
#include "plan/plan.h"

#include <stdio.h>
#include <string.h>

static const char *const pattern_names[OC_PATTERN_COUNT] = {
    "dense", "sink", "intra-image", "intra-image+sink", "a-shape", "vertical-slash", "grid", "q-boundary",
    "2d-boundary",
};

/* Indexed by OC_GRID_* bits: h = horizontal, v = vertical, s = slash lines. */
static const char *const grid_lines_names[8] = { "?", "h", "v", "h+v", "s", "h+s", "v+s", "h+v+s" };

const char *oc_plan_grid_lines_name(int32_t lines) {
    return lines >= 1 && lines <= 7 ? grid_lines_names[lines] : "?";
}

int oc_plan_format_version(const oc_plan *plan) {
    int version = 1;
    for (int s = 0; s < OC_PLAN_N_STACKS; s++) {
        const oc_stack_plan *sp = &plan->stacks[s];
        for (int32_t l = 0; sp->zipvl_heads_prefill && l < sp->shape.n_layers; l++)
            if (sp->zipvl_heads_prefill[l]) return 4;
        for (size_t i = 0; i < (size_t)sp->shape.n_layers * (size_t)sp->shape.n_heads; i++) {
            if (sp->heads[i].kind == OC_PATTERN_BOUNDARY_2D) version = 3;
            else if (oc_pattern_is_prefill(sp->heads[i].kind) && version < 2) version = 2;
        }
    }
    return version;
}

const char *oc_plan_pattern_name(oc_pattern_kind kind) {
    return (unsigned)kind < OC_PATTERN_COUNT ? pattern_names[kind] : "?";
}

const char *oc_plan_stack_name(oc_plan_stack stack) {
    return stack == OC_PLAN_VISION ? "vision" : "decoder";
}

const char *oc_plan_lazy_mode_name(oc_lazy_mode mode) { return mode == OC_LAZY_VLA ? "vla" : "gla"; }

/* BlindSight masks (blindsight.txt Sec. 3.2, App. L) are built from text and image spans of the
 * decoder prompt; inside the vision encoder every token belongs to one image and there is no text,
 * so only the model's own mask, the position-only A-shape and MMInference's dynamic patterns (built
 * from the heads' own scores, bidirectional there) make sense there. */
int oc_plan_pattern_allowed(oc_plan_stack stack, oc_pattern_kind kind) {
    if ((unsigned)kind >= OC_PATTERN_COUNT) return 0;
    return stack == OC_PLAN_DECODER || kind == OC_PATTERN_DENSE || kind == OC_PATTERN_A_SHAPE ||
           oc_pattern_is_dynamic(kind);   /* q- and 2d-boundary: text and image spans, decoder only */
}

/* NULL when a pattern's sizes fit its kind (and every field another kind owns is 0); a q-boundary
 * or 2d-boundary head's own sizes are 0 and its parts are checked as patterns of their kinds. */
static const char *plain_problem(const oc_head_pattern *p);

static const char *part_problem(const oc_modal_pattern *s, const char *what) {
    oc_head_pattern q = oc_pattern_of_modal(s);
    if (!(q.kind == OC_PATTERN_DENSE || q.kind == OC_PATTERN_A_SHAPE || oc_pattern_is_dynamic(q.kind))) return what;
    return plain_problem(&q);
}

const char *oc_plan_pattern_problem(const oc_head_pattern *p) {
    static const oc_modal_pattern zero;
    const char *why = plain_problem(p);
    for (int m = 0; m < OC_N_MODALITIES && !why; m++) {
        if (p->kind != OC_PATTERN_Q_BOUNDARY && memcmp(&p->modal[m], &zero, sizeof zero))
            return "modal patterns on a head that is not q-boundary";
        if (p->kind == OC_PATTERN_Q_BOUNDARY)
            why = part_problem(&p->modal[m], "a q-boundary modality pattern that is not dense, a-shape, "
                                             "vertical-slash or grid");
        for (int k = 0; k < OC_N_MODALITIES && !why; k++) {
            if (p->kind != OC_PATTERN_BOUNDARY_2D && memcmp(&p->pair[m][k], &zero, sizeof zero))
                return "modality-pair patterns on a head that is not 2d-boundary";
            if (p->kind == OC_PATTERN_BOUNDARY_2D)
                why = part_problem(&p->pair[m][k], "a 2d-boundary pair pattern that is not dense, a-shape, "
                                                   "vertical-slash or grid");
        }
    }
    return why;
}

static const char *plain_problem(const oc_head_pattern *p) {
    int ashape = p->kind == OC_PATTERN_A_SHAPE, vs = p->kind == OC_PATTERN_VERTICAL_SLASH, grid = p->kind == OC_PATTERN_GRID;
    if (ashape ? p->n_sink < 0 || p->n_sink > OC_PLAN_MAX_TOKENS || p->n_local < 1 || p->n_local > OC_PLAN_MAX_TOKENS
               : p->n_sink != 0 || p->n_local != 0)
        return "bad a-shape sizes";
    if (vs ? p->n_vertical < 0 || p->n_vertical > OC_PLAN_MAX_TOKENS || p->n_slash < 1 || p->n_slash > OC_PLAN_MAX_TOKENS
           : p->n_vertical != 0 || p->n_slash != 0)
        return "bad vertical-slash sizes";
    if (grid ? p->grid_stride < 0 || p->grid_stride > OC_PLAN_MAX_TOKENS || p->grid_max_stride < 2 ||
                   p->grid_max_stride > OC_PLAN_MAX_TOKENS || p->grid_lines < 1 || p->grid_lines > 7
             : p->grid_stride != 0 || p->grid_max_stride != 0 || p->grid_lines != 0)
        return "bad grid sizes";
    return NULL;
}

/* A calibration text: words "key=value" separated by single spaces, key of [a-z0-9_-], value of
 * printable ASCII without '#' (it would start a comment) and without spaces; "" is fine. */
int oc_plan_calibration_ok(const char *text) {
    const char *p = text;
    while (*p) {
        const char *w = p;
        while (*p && ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-')) p++;
        if (p == w || *p != '=') return 0;
        p++;
        const char *v = p;
        while (*p > ' ' && *p < 0x7f && *p != '#') p++;
        if (p == v) return 0;
        if (*p == ' ' && p[1] != '\0' && p[1] != ' ') p++;
        else if (*p) return 0;
    }
    return 1;
}

/* ---- create / free ------------------------------------------------------------------------------ */

static size_t heads_bytes(const oc_plan_shape *s) {
    return (size_t)s->n_layers * (size_t)s->n_heads * sizeof(oc_head_pattern);
}
static size_t budget_bytes(const oc_plan_shape *s) {
    return (size_t)s->n_layers * (size_t)s->n_kv_heads * sizeof(int32_t);
}

static void stack_free(const oc_allocator *alloc, oc_stack_plan *s) {
    oc_mem_free(alloc, s->heads, heads_bytes(&s->shape));
    oc_mem_free(alloc, s->kv_budget_tokens, budget_bytes(&s->shape));
    oc_mem_free(alloc, s->zipvl_tau_ppm, (size_t)s->shape.n_layers * sizeof(int32_t));
    oc_mem_free(alloc, s->zipvl_heads_prefill, (size_t)s->shape.n_layers);
    oc_mem_free(alloc, s->visual_score_ppm, budget_bytes(&s->shape));
    oc_mem_free(alloc, s->lazy_groups, (size_t)s->lazy_groups_cap * sizeof(oc_lazy_group));
    memset(s, 0, sizeof *s);
}

size_t oc_plan_memory_bytes(const oc_plan *plan) {
    size_t total = 0;
    if (!plan) return 0;
    oc_add_block(&total, sizeof *plan);
    for (int i = 0; i < OC_PLAN_N_STACKS; i++) {   /* the blocks oc_plan_stack_init allocated */
        const oc_stack_plan *s = &plan->stacks[i];
        if (!s->heads) continue;
        oc_add_block(&total, heads_bytes(&s->shape));
        oc_add_block(&total, (size_t)s->shape.n_layers * sizeof(int32_t));
        oc_add_block(&total, (size_t)s->shape.n_layers);
        if (s->kv_budget_tokens) oc_add_block(&total, budget_bytes(&s->shape));
        if (s->visual_score_ppm) oc_add_block(&total, budget_bytes(&s->shape));
        if (s->lazy_groups) oc_add_block(&total, (size_t)s->lazy_groups_cap * sizeof(oc_lazy_group));
    }
    return total;
}

void oc_plan_free(oc_plan *plan) {
    if (!plan) return;
    oc_allocator alloc = plan->alloc;
    for (int i = 0; i < OC_PLAN_N_STACKS; i++) stack_free(&alloc, &plan->stacks[i]);
    oc_mem_free(&alloc, plan, sizeof *plan);
}

const char *oc_plan_shape_problem(oc_plan_stack stack, const oc_plan_shape *s) {
    if (s->n_layers < 1 || s->n_layers > OC_PLAN_MAX_LAYERS) return "layers out of range";
    if (s->n_heads < 1 || s->n_heads > OC_PLAN_MAX_HEADS) return "heads out of range";
    if (s->n_kv_heads < 1 || s->n_kv_heads > s->n_heads) return "kv-heads out of range";
    if (s->n_heads % s->n_kv_heads) return "heads not a multiple of kv-heads";
    if (stack == OC_PLAN_VISION && s->n_kv_heads != s->n_heads) return "vision kv-heads differ from heads";
    if (s->head_dim < 1 || s->head_dim > OC_PLAN_MAX_HEAD_DIM) return "head-dim out of range";
    return NULL;
}

/* The shape must have passed oc_plan_shape_problem. */
oc_status oc_plan_stack_init(oc_plan *plan, oc_plan_stack stack, const oc_plan_shape *shape,
                             oc_error *err) {
    oc_stack_plan *s = &plan->stacks[stack];
    s->shape = *shape;
    s->lazy_groups_cap = shape->n_layers / 2;
    s->heads = oc_mem_calloc(&plan->alloc, heads_bytes(shape));   /* zero = dense, no sizes */
    s->zipvl_tau_ppm = oc_mem_calloc(&plan->alloc, (size_t)shape->n_layers * sizeof(int32_t));
    s->zipvl_heads_prefill = oc_mem_calloc(&plan->alloc, (size_t)shape->n_layers);
    if (stack == OC_PLAN_DECODER) {
        s->kv_budget_tokens = oc_mem_calloc(&plan->alloc, budget_bytes(shape));  /* 0 = full */
        s->visual_score_ppm = oc_mem_calloc(&plan->alloc, budget_bytes(shape));
    }
    if (s->lazy_groups_cap)
        s->lazy_groups = oc_mem_calloc(&plan->alloc, (size_t)s->lazy_groups_cap * sizeof(oc_lazy_group));
    if (!s->heads || !s->zipvl_tau_ppm || !s->zipvl_heads_prefill ||
        (stack == OC_PLAN_DECODER && (!s->kv_budget_tokens || !s->visual_score_ppm)) ||
        (s->lazy_groups_cap && !s->lazy_groups)) {
        stack_free(&plan->alloc, s);
        return oc_fail(err, OC_ERR_NOMEM, "plan: out of memory for the %s arrays", oc_plan_stack_name(stack));
    }
    return OC_OK;
}

oc_status oc_plan_new_empty(oc_plan **out, const oc_allocator *alloc, oc_error *err) {
    *out = NULL;
    if (!alloc || !alloc->fn) alloc = oc_default_allocator();
    oc_plan *plan = oc_mem_calloc(alloc, sizeof *plan);
    if (!plan) return oc_fail(err, OC_ERR_NOMEM, "plan: out of memory");
    plan->alloc = *alloc;
    plan->sink_fraction_ppm = OC_PLAN_DEFAULT_SINK_FRACTION_PPM;
    plan->kv_window_tokens = OC_PLAN_DEFAULT_KV_WINDOW_TOKENS;
    *out = plan;
    return OC_OK;
}

oc_status oc_plan_create(oc_plan **out, const oc_plan_shape *decoder, const oc_plan_shape *vision,
                         const oc_allocator *alloc, oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "plan: out is NULL");
    *out = NULL;
    if (!decoder) return oc_fail(err, OC_ERR_INVALID, "plan: a plan needs a decoder shape");
    const char *why = oc_plan_shape_problem(OC_PLAN_DECODER, decoder);
    if (why) return oc_fail(err, OC_ERR_INVALID, "plan: decoder shape: %s", why);
    if (vision && vision->n_layers != 0 && (why = oc_plan_shape_problem(OC_PLAN_VISION, vision)))
        return oc_fail(err, OC_ERR_INVALID, "plan: vision shape: %s", why);
    oc_plan *plan;
    oc_status st = oc_plan_new_empty(&plan, alloc, err);
    if (st != OC_OK) return st;
    st = oc_plan_stack_init(plan, OC_PLAN_DECODER, decoder, err);
    if (st == OC_OK && vision && vision->n_layers != 0)
        st = oc_plan_stack_init(plan, OC_PLAN_VISION, vision, err);
    if (st != OC_OK) { oc_plan_free(plan); return st; }
    *out = plan;
    return OC_OK;
}

oc_status oc_plan_add_lazy_group(oc_plan *plan, oc_plan_stack stack, int32_t first_layer,
                                 int32_t last_layer, oc_lazy_mode mode, oc_error *err) {
    if (!plan || (unsigned)stack >= OC_PLAN_N_STACKS)
        return oc_fail(err, OC_ERR_INVALID, "plan: bad arguments to oc_plan_add_lazy_group");
    oc_stack_plan *s = &plan->stacks[stack];
    const char *name = oc_plan_stack_name(stack);
    if (s->shape.n_layers == 0)
        return oc_fail(err, OC_ERR_INVALID, "plan: lazy-group for the %s, which the plan does not cover", name);
    if (first_layer < 0 || last_layer >= s->shape.n_layers || first_layer >= last_layer)
        return oc_fail(err, OC_ERR_INVALID, "plan: %s lazy-group %d-%d is not two or more of layers 0..%d",
                       name, (int)first_layer, (int)last_layer, (int)s->shape.n_layers - 1);
    if (mode != OC_LAZY_GLA && mode != OC_LAZY_VLA)
        return oc_fail(err, OC_ERR_INVALID, "plan: bad lazy mode %d", (int)mode);
    if (stack == OC_PLAN_VISION && mode != OC_LAZY_GLA)
        return oc_fail(err, OC_ERR_INVALID, "plan: vision lazy-group %d-%d must use mode gla "
                       "(every vision token is visual)", (int)first_layer, (int)last_layer);
    int32_t at = 0;   /* insertion point keeping groups sorted */
    for (int32_t i = 0; i < s->n_lazy_groups; i++) {
        const oc_lazy_group *g = &s->lazy_groups[i];
        if (g->first_layer <= last_layer && first_layer <= g->last_layer)
            return oc_fail(err, OC_ERR_INVALID, "plan: %s lazy-group %d-%d overlaps lazy-group %d-%d", name,
                           (int)first_layer, (int)last_layer, (int)g->first_layer, (int)g->last_layer);
        if (g->first_layer < first_layer) at = i + 1;
    }
    if (s->n_lazy_groups >= s->lazy_groups_cap)   /* cannot happen for disjoint groups of >= 2 */
        return oc_fail(err, OC_ERR_INVALID, "plan: too many %s lazy groups", name);
    memmove(&s->lazy_groups[at + 1], &s->lazy_groups[at],
            (size_t)(s->n_lazy_groups - at) * sizeof(oc_lazy_group));
    s->lazy_groups[at] = (oc_lazy_group){ first_layer, last_layer, mode };
    s->n_lazy_groups++;
    return OC_OK;
}

/* ---- validation --------------------------------------------------------------------------------- */

static oc_status validate_stack(const oc_plan *plan, oc_plan_stack stack, oc_error *err) {
    const oc_stack_plan *s = &plan->stacks[stack];
    const char *name = oc_plan_stack_name(stack);
    if (s->shape.n_layers == 0) {
        if (stack == OC_PLAN_DECODER) return oc_fail(err, OC_ERR_INVALID, "plan: no decoder shape");
        return OC_OK;
    }
    const char *why = oc_plan_shape_problem(stack, &s->shape);
    if (why) return oc_fail(err, OC_ERR_INVALID, "plan: %s shape: %s", name, why);
    if (!s->heads || !s->zipvl_tau_ppm || !s->zipvl_heads_prefill ||
        (stack == OC_PLAN_DECODER && (!s->kv_budget_tokens || !s->visual_score_ppm)))
        return oc_fail(err, OC_ERR_INVALID, "plan: %s arrays missing", name);
    for (int32_t l = 0; l < s->shape.n_layers; l++) {
        for (int32_t h = 0; h < s->shape.n_heads; h++) {
            const oc_head_pattern *p = oc_plan_head_c(plan, stack, l, h);
            if (!oc_plan_pattern_allowed(stack, p->kind))
                return oc_fail(err, OC_ERR_INVALID, "plan: %s layer %d head %d: pattern '%s' not allowed here",
                               name, (int)l, (int)h, oc_plan_pattern_name(p->kind));
            const char *bad = oc_plan_pattern_problem(p);
            if (bad)
                return oc_fail(err, OC_ERR_INVALID, "plan: %s layer %d head %d: %s for %s", name, (int)l, (int)h, bad,
                               oc_plan_pattern_name(p->kind));
        }
        int32_t tau = s->zipvl_tau_ppm[l];
        if (tau < 0 || tau > OC_PLAN_PPM)
            return oc_fail(err, OC_ERR_INVALID, "plan: %s layer %d: zipvl-tau %d ppm out of range",
                           name, (int)l, (int)tau);
        if (s->zipvl_heads_prefill[l] > 1 || (s->zipvl_heads_prefill[l] && tau == 0))
            return oc_fail(err, OC_ERR_INVALID, "plan: %s layer %d: 'prefill heads' without a zipvl-tau", name, (int)l);
        for (int32_t k = 0; stack == OC_PLAN_DECODER && k < s->shape.n_kv_heads; k++) {
            int32_t b = s->kv_budget_tokens[(size_t)l * (size_t)s->shape.n_kv_heads + (size_t)k];
            int32_t vs = s->visual_score_ppm[(size_t)l * (size_t)s->shape.n_kv_heads + (size_t)k];
            if (vs < 0 || vs > OC_PLAN_PPM)
                return oc_fail(err, OC_ERR_INVALID, "plan: decoder layer %d kv-head %d: visual-score %d ppm "
                               "out of range", (int)l, (int)k, (int)vs);
            if (b != OC_PLAN_KV_FULL && (b < 1 || b > OC_PLAN_MAX_TOKENS || b < plan->kv_window_tokens))
                return oc_fail(err, OC_ERR_INVALID, "plan: decoder layer %d kv-head %d: kv-budget %d "
                               "out of range (kv-window %d..%d)", (int)l, (int)k, (int)b,
                               (int)plan->kv_window_tokens, OC_PLAN_MAX_TOKENS);
        }
    }
    if (stack == OC_PLAN_VISION && (s->kv_budget_tokens || s->visual_score_ppm))
        return oc_fail(err, OC_ERR_INVALID, "plan: vision kv budgets set (the vision encoder keeps no KV cache)");
    if (s->n_lazy_groups < 0 || s->n_lazy_groups > s->lazy_groups_cap || (s->n_lazy_groups && !s->lazy_groups))
        return oc_fail(err, OC_ERR_INVALID, "plan: %s lazy group count %d out of range", name,
                       (int)s->n_lazy_groups);
    for (int32_t i = 0; i < s->n_lazy_groups; i++) {
        const oc_lazy_group *g = &s->lazy_groups[i];
        int prev_last = i ? s->lazy_groups[i - 1].last_layer : -1;
        if (g->first_layer <= prev_last || g->first_layer >= g->last_layer ||
            g->last_layer >= s->shape.n_layers || (g->mode != OC_LAZY_GLA && g->mode != OC_LAZY_VLA) ||
            (stack == OC_PLAN_VISION && g->mode != OC_LAZY_GLA))
            return oc_fail(err, OC_ERR_INVALID, "plan: %s lazy-group %d-%d invalid (unsorted, "
                           "overlapping, out of range or wrong mode)", name, (int)g->first_layer,
                           (int)g->last_layer);
    }
    return OC_OK;
}

oc_status oc_plan_validate(const oc_plan *plan, oc_error *err) {
    if (!plan) return oc_fail(err, OC_ERR_INVALID, "plan: NULL plan");
    if (plan->sink_fraction_ppm < 1 || plan->sink_fraction_ppm > OC_PLAN_PPM)
        return oc_fail(err, OC_ERR_INVALID, "plan: sink-fraction %d ppm out of range", (int)plan->sink_fraction_ppm);
    if (plan->kv_window_tokens < 0 || plan->kv_window_tokens > OC_PLAN_MAX_TOKENS)
        return oc_fail(err, OC_ERR_INVALID, "plan: kv-window %d out of range", (int)plan->kv_window_tokens);
    if (!memchr(plan->calibration, '\0', sizeof plan->calibration) || !oc_plan_calibration_ok(plan->calibration))
        return oc_fail(err, OC_ERR_INVALID, "plan: calibration text is not 'key=value ...' words of printable ASCII");
    for (int i = 0; i < OC_PLAN_N_STACKS; i++) {
        oc_status st = validate_stack(plan, (oc_plan_stack)i, err);
        if (st != OC_OK) return st;
    }
    return OC_OK;
}

/* ---- fit check ------------------------------------------------------------------------------------ */

/* Append a formatted number to a message part; lead_sep: put ", " first even when buf is empty. */
static void add_part(char *buf, size_t n_bytes, int lead_sep, const char *fmt, int value) {
    size_t used = strlen(buf);
    char part[48];
    snprintf(part, sizeof part, fmt, value);
    snprintf(buf + used, n_bytes - used, "%s%s", used || lead_sep ? ", " : "", part);
}

static oc_status check_stack_fits(const oc_plan_shape *plan, const oc_plan_shape *model,
                                  oc_plan_stack stack, oc_error *err) {
    const char *name = oc_plan_stack_name(stack);
    if (plan->n_layers == 0) return OC_OK;   /* not covered: the stack runs dense */
    if (model->n_layers == 0)
        return oc_fail(err, OC_ERR_UNSUPPORTED, "plan is for %d %s layers x %d heads; model has no %s",
                       (int)plan->n_layers, name, (int)plan->n_heads,
                       stack == OC_PLAN_VISION ? "vision encoder" : "decoder");
    int kv_differs = stack == OC_PLAN_DECODER && plan->n_kv_heads != model->n_kv_heads;
    int dim_differs = plan->head_dim != model->head_dim;
    if (plan->n_layers == model->n_layers && plan->n_heads == model->n_heads && !kv_differs && !dim_differs)
        return OC_OK;
    char extra[64] = "", has[128] = "";   /* the plan's differing fields, the model's */
    if (kv_differs) add_part(extra, sizeof extra, 1, "%d kv heads", (int)plan->n_kv_heads);
    if (dim_differs) add_part(extra, sizeof extra, 1, "head dim %d", (int)plan->head_dim);
    if (plan->n_layers != model->n_layers) add_part(has, sizeof has, 0, "%d layers", (int)model->n_layers);
    if (plan->n_heads != model->n_heads) add_part(has, sizeof has, 0, "%d heads", (int)model->n_heads);
    if (kv_differs) add_part(has, sizeof has, 0, "%d kv heads", (int)model->n_kv_heads);
    if (dim_differs) add_part(has, sizeof has, 0, "head dim %d", (int)model->head_dim);
    return oc_fail(err, OC_ERR_UNSUPPORTED, "plan is for %d %s layers x %d heads%s; model has %s",
                   (int)plan->n_layers, name, (int)plan->n_heads, extra, has);
}

oc_status oc_plan_check_fits(const oc_plan *plan, const oc_plan_model_shape *model, oc_error *err) {
    if (!plan || !model) return oc_fail(err, OC_ERR_INVALID, "plan: NULL argument to oc_plan_check_fits");
    oc_status st = oc_plan_validate(plan, err);   /* a plan built in memory has not met the parser */
    if (st != OC_OK) return st;
    st = check_stack_fits(&plan->stacks[OC_PLAN_DECODER].shape, &model->decoder, OC_PLAN_DECODER, err);
    if (st != OC_OK) return st;
    return check_stack_fits(&plan->stacks[OC_PLAN_VISION].shape, &model->vision, OC_PLAN_VISION, err);
}

/* ---- equality and statistics ---------------------------------------------------------------------- */

static int stack_equal(const oc_stack_plan *a, const oc_stack_plan *b, oc_plan_stack stack) {
    if (memcmp(&a->shape, &b->shape, sizeof a->shape) != 0) return 0;
    if (a->shape.n_layers == 0) return 1;
    size_t n_heads = (size_t)a->shape.n_layers * (size_t)a->shape.n_heads;
    for (size_t i = 0; i < n_heads; i++)
        if (!oc_pattern_same(&a->heads[i], &b->heads[i])) return 0;
    if (stack == OC_PLAN_DECODER &&
        (memcmp(a->kv_budget_tokens, b->kv_budget_tokens, budget_bytes(&a->shape)) != 0 ||
         memcmp(a->visual_score_ppm, b->visual_score_ppm, budget_bytes(&a->shape)) != 0)) return 0;
    if (memcmp(a->zipvl_tau_ppm, b->zipvl_tau_ppm, (size_t)a->shape.n_layers * sizeof(int32_t)) != 0 ||
        memcmp(a->zipvl_heads_prefill, b->zipvl_heads_prefill, (size_t)a->shape.n_layers) != 0) return 0;
    if (a->n_lazy_groups != b->n_lazy_groups) return 0;
    for (int32_t i = 0; i < a->n_lazy_groups; i++) {
        const oc_lazy_group *x = &a->lazy_groups[i], *y = &b->lazy_groups[i];
        if (x->first_layer != y->first_layer || x->last_layer != y->last_layer || x->mode != y->mode) return 0;
    }
    return 1;
}

int oc_plan_equal(const oc_plan *a, const oc_plan *b) {
    if (!a || !b) return a == b;
    if (a->sink_fraction_ppm != b->sink_fraction_ppm || a->kv_window_tokens != b->kv_window_tokens ||
        strcmp(a->calibration, b->calibration) != 0) return 0;
    for (int i = 0; i < OC_PLAN_N_STACKS; i++)
        if (!stack_equal(&a->stacks[i], &b->stacks[i], (oc_plan_stack)i)) return 0;
    return 1;
}

void oc_plan_stats_get(const oc_plan *plan, oc_plan_stack stack, oc_plan_stats *out) {
    memset(out, 0, sizeof *out);
    if (!plan || (unsigned)stack >= OC_PLAN_N_STACKS) return;
    const oc_stack_plan *s = &plan->stacks[stack];
    if (s->shape.n_layers == 0) return;
    out->n_heads = s->shape.n_layers * s->shape.n_heads;
    for (int32_t i = 0; i < out->n_heads; i++) {
        oc_pattern_kind k = s->heads[i].kind;
        if ((unsigned)k < OC_PATTERN_COUNT) out->n_per_pattern[k]++;
        if (k != OC_PATTERN_DENSE) out->n_sparse++;
    }
    if (s->kv_budget_tokens) {
        int32_t n = s->shape.n_layers * s->shape.n_kv_heads;
        for (int32_t i = 0; i < n; i++) {
            int32_t b = s->kv_budget_tokens[i];
            if (b == OC_PLAN_KV_FULL) continue;
            if (out->n_budgeted_kv_heads == 0 || b < out->min_budget_tokens) out->min_budget_tokens = b;
            if (b > out->max_budget_tokens) out->max_budget_tokens = b;
            out->sum_budget_tokens += b;
            out->n_budgeted_kv_heads++;
        }
    }
    for (int32_t l = 0; l < s->shape.n_layers; l++) out->n_zipvl_layers += s->zipvl_tau_ppm[l] != 0;
    for (int32_t i = 0; i < s->n_lazy_groups; i++)
        out->n_lazy_layers += s->lazy_groups[i].last_layer - s->lazy_groups[i].first_layer;
}
