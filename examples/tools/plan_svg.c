/* plan_svg.c: a plan as an SVG picture (`ocellus plan show FILE --svg OUT`): per stack a heatmap of
 * layers (rows) x heads (columns) coloured by pattern, the SparseMM KV budget of each kv head as a
 * bar beside its row, Q-Cache lazy groups as brackets on the left, ZipVL thresholds as text, and a
 * legend. Plain SVG 1.1 that any browser shows; written through a FILE* only. */
#include "tools/plan_svg.h"

#include <string.h>

#define CELL 14          /* px per head cell */
#define LEFT 70          /* room for layer labels and lazy brackets */
#define BAR_MAX 120      /* px of the longest budget bar */

static const char *const fill_of[OC_PATTERN_COUNT] = {
    "#6b6b6b",   /* dense */
    "#4e9a06",   /* sink */
    "#3465a4",   /* intra-image */
    "#75507b",   /* intra-image+sink */
    "#c4a000",   /* a-shape */
    "#8f5902",   /* vertical-slash */
    "#f57900",   /* grid */
    "#06989a",   /* q-boundary */
};

static int stack_height(const oc_stack_plan *s) { return s->shape.n_layers ? 40 + s->shape.n_layers * CELL + 20 : 0; }

static int stack_width(const oc_stack_plan *s) {
    return LEFT + s->shape.n_heads * CELL + 20 + (s->kv_budget_tokens ? s->shape.n_kv_heads * (BAR_MAX + 8) : 0) + 90;
}

static void put_stack(FILE *f, const oc_plan *plan, oc_plan_stack stack, int y0) {
    const oc_stack_plan *s = &plan->stacks[stack];
    int32_t L = s->shape.n_layers, H = s->shape.n_heads, KV = s->shape.n_kv_heads;
    int y = y0 + 40, bars_x = LEFT + H * CELL + 20;
    fprintf(f, "<text x=\"4\" y=\"%d\" font-size=\"14\" font-weight=\"bold\">%s: %d layers x %d heads%s</text>\n",
            y0 + 18, oc_plan_stack_name(stack), (int)L, (int)H, stack == OC_PLAN_DECODER ? " (rows: layers)" : "");
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\">heads 0..%d</text>\n", LEFT, y - 4, (int)H - 1);
    int32_t max_budget = 0;
    for (int32_t i = 0; s->kv_budget_tokens && i < L * KV; i++)
        if (s->kv_budget_tokens[i] > max_budget) max_budget = s->kv_budget_tokens[i];
    if (max_budget)
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\">KV budget per kv head (tokens; max %d)</text>\n", bars_x,
                y - 4, (int)max_budget);
    for (int32_t l = 0; l < L; l++) {
        int ry = y + l * CELL;
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\">%d</text>\n", LEFT - 4, ry + CELL - 3,
                (int)l);
        for (int32_t h = 0; h < H; h++) {
            const oc_head_pattern *p = &s->heads[(size_t)l * H + h];
            int k = (unsigned)p->kind < OC_PATTERN_COUNT ? (int)p->kind : 0;
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\" stroke=\"#fff\">"
                       "<title>layer %d head %d: %s</title></rect>\n",
                    LEFT + h * CELL, ry, CELL, CELL, fill_of[k], (int)l, (int)h, oc_plan_pattern_name(p->kind));
        }
        for (int32_t g = 0; max_budget && g < KV; g++) {
            int32_t b = s->kv_budget_tokens[(size_t)l * KV + g];
            int w = b == OC_PLAN_KV_FULL ? BAR_MAX : (int)((int64_t)BAR_MAX * b / max_budget);
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"><title>layer %d kv head %d: %s%d"
                       "</title></rect>\n",
                    bars_x + g * (BAR_MAX + 8), ry + 2, w < 1 ? 1 : w, CELL - 4, b ? "#cc0000" : "#e0b0b0", (int)l,
                    (int)g, b ? "budget " : "full cache", (int)b);
        }
        if (s->zipvl_tau_ppm[l])
            fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\">tau %.3f</text>\n",
                    bars_x + (max_budget ? KV * (BAR_MAX + 8) : 0), ry + CELL - 3,
                    (double)s->zipvl_tau_ppm[l] / OC_PLAN_PPM);
    }
    for (int32_t i = 0; i < s->n_lazy_groups; i++) {
        const oc_lazy_group *g = &s->lazy_groups[i];
        int top = y + g->first_layer * CELL + 2, bottom = y + (g->last_layer + 1) * CELL - 2, x = 30;
        fprintf(f, "<path d=\"M%d %d H%d V%d H%d\" fill=\"none\" stroke=\"#ce5c00\" stroke-width=\"2\">"
                   "<title>lazy group %d-%d (%s): layer %d computes Q/K</title></path>\n",
                x + 8, top, x, bottom, x + 8, (int)g->first_layer, (int)g->last_layer, oc_plan_lazy_mode_name(g->mode),
                (int)g->first_layer);
        fprintf(f, "<text x=\"4\" y=\"%d\" font-size=\"9\" fill=\"#ce5c00\">%s</text>\n", (top + bottom) / 2 + 3,
                oc_plan_lazy_mode_name(g->mode));
    }
}

int oc_plan_svg_write(const oc_plan *plan, const char *title, FILE *f) {
    int width = 420, height = 30;
    for (int i = 0; i < OC_PLAN_N_STACKS; i++) {
        int w = plan->stacks[i].shape.n_layers ? stack_width(&plan->stacks[i]) : 0;
        if (w > width) width = w;
        height += stack_height(&plan->stacks[i]);
    }
    int legend_y = height;
    height += 5 * 16 + 30;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n",
            width, height);
    fprintf(f, "<text x=\"4\" y=\"18\" font-size=\"13\">");
    for (const char *c = title; *c; c++) {   /* escape for XML */
        if (*c == '<') fputs("&lt;", f);
        else if (*c == '>') fputs("&gt;", f);
        else if (*c == '&') fputs("&amp;", f);
        else if ((unsigned char)*c >= 0x20) fputc(*c, f);
    }
    fprintf(f, "</text>\n");
    int y = 30;
    for (int i = 0; i < OC_PLAN_N_STACKS; i++) {
        if (!plan->stacks[i].shape.n_layers) continue;
        put_stack(f, plan, (oc_plan_stack)i, y);
        y += stack_height(&plan->stacks[i]);
    }
    /* legend */
    for (int k = 0; k < OC_PATTERN_COUNT; k++) {
        int lx = 4 + (k % 3) * 140, ly = legend_y + (k / 3) * 16;
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" "
                   "font-size=\"11\">%s</text>\n",
                lx, ly, fill_of[k], lx + 16, ly + 10, oc_plan_pattern_name((oc_pattern_kind)k));
    }
    fprintf(f, "<rect x=\"4\" y=\"%d\" width=\"24\" height=\"10\" fill=\"#cc0000\"/><text x=\"32\" y=\"%d\" "
               "font-size=\"11\">SparseMM KV budget of a kv head (pale: full cache)</text>\n",
            legend_y + 52, legend_y + 61);
    fprintf(f, "<path d=\"M12 %d H4 V%d H12\" fill=\"none\" stroke=\"#ce5c00\" stroke-width=\"2\"/><text x=\"32\" y=\"%d\" "
               "font-size=\"11\">Q-Cache lazy group: the first layer computes Q/K, the others reuse them</text>\n",
            legend_y + 68, legend_y + 80, legend_y + 77);
    fprintf(f, "</svg>\n");
    return ferror(f) ? -1 : 0;
}
