/* layout.c: the prompt's token layout (see layout.h). One allocation holds the struct, the image
 * spans, their sink counts and one int32 code per token: the image index for image tokens, and
 * -(1 + index of the next image) for text tokens, so "which image" and "where is the next
 * boundary" are both one array read. */
#include "attention/layout.h"

#include <math.h>
#include <string.h>

struct oc_token_layout {
    const oc_allocator *alloc;
    size_t n_bytes;
    int32_t n_tokens, n_images;
    oc_token_span *images;   /* [n_images] */
    int32_t *n_sink;         /* [n_images] */
    int32_t *code;           /* [n_tokens] */
};

int32_t oc_layout_sink_count(int32_t n_image_tokens, float sink_fraction) {
    if (n_image_tokens <= 0 || !(sink_fraction > 0.0f)) return 0;
    double x = (double)sink_fraction * (double)n_image_tokens;
    /* sink_fraction is a float: 0.1f is 0.10000000149, so 0.1f * 1000 = 100.0000015; a relative
     * slack far above float precision and far below one token keeps ceil() honest. */
    double k = ceil(x - 1e-6 * (x + 1.0));
    if (k < 1.0) k = 1.0;
    if (k > (double)n_image_tokens) k = (double)n_image_tokens;
    return (int32_t)k;
}

size_t oc_layout_bytes(int32_t n_tokens, int32_t n_images) {
    size_t spans, codes, total;
    if (n_tokens < 0 || n_images < 0 ||
        !oc_mul_size((size_t)n_images, sizeof(oc_token_span) + sizeof(int32_t), &spans) ||
        !oc_mul_size((size_t)n_tokens, sizeof(int32_t), &codes) || !oc_add_size(spans, codes, &total) ||
        !oc_add_size(total, sizeof(oc_token_layout), &total))
        return 0;
    return total;
}

oc_status oc_layout_build(oc_token_layout **out, int32_t n_tokens, const oc_token_span *images,
                          int32_t n_images, float sink_fraction, const oc_allocator *alloc,
                          oc_error *err) {
    *out = NULL;
    if (n_tokens < 0) return oc_fail(err, OC_ERR_INVALID, "layout: n_tokens %d is negative", (int)n_tokens);
    if (n_images < 0 || (n_images > 0 && !images))
        return oc_fail(err, OC_ERR_INVALID, "layout: %d images but no span list", (int)n_images);
    if (!(sink_fraction >= 0.0f && sink_fraction <= 1.0f))
        return oc_fail(err, OC_ERR_INVALID, "layout: sink fraction %g is outside [0, 1]", (double)sink_fraction);
    for (int32_t g = 0; g < n_images; g++) {
        oc_token_span s = images[g];
        if (s.start < 0 || s.end <= s.start || s.end > n_tokens)
            return oc_fail(err, OC_ERR_INVALID, "layout: image %d span [%d, %d) is empty or outside [0, %d)",
                           (int)g, (int)s.start, (int)s.end, (int)n_tokens);
        if (g > 0 && s.start < images[g - 1].end)
            return oc_fail(err, OC_ERR_INVALID, "layout: image %d span [%d, %d) overlaps or precedes image %d",
                           (int)g, (int)s.start, (int)s.end, (int)g - 1);
    }
    size_t n_bytes = oc_layout_bytes(n_tokens, n_images);
    oc_token_layout *l = n_bytes ? oc_mem_alloc(alloc, n_bytes) : NULL;
    if (!l) return oc_fail(err, OC_ERR_NOMEM, "layout: out of memory for %d tokens", (int)n_tokens);
    l->alloc = alloc;
    l->n_bytes = n_bytes;
    l->n_tokens = n_tokens;
    l->n_images = n_images;
    l->images = (oc_token_span *)(l + 1);
    l->n_sink = (int32_t *)(l->images + n_images);
    l->code = l->n_sink + n_images;
    if (n_images) memcpy(l->images, images, (size_t)n_images * sizeof *images);
    int32_t pos = 0;
    for (int32_t g = 0; g <= n_images; g++) {
        int32_t start = g < n_images ? images[g].start : n_tokens;
        for (; pos < start; pos++) l->code[pos] = -(1 + g);
        if (g == n_images) break;
        l->n_sink[g] = oc_layout_sink_count(images[g].end - images[g].start, sink_fraction);
        for (; pos < images[g].end; pos++) l->code[pos] = g;
    }
    *out = l;
    return OC_OK;
}

void oc_layout_free(oc_token_layout *l) {
    if (l) oc_mem_free(l->alloc, l, l->n_bytes);
}

int32_t oc_layout_n_tokens(const oc_token_layout *l) { return l->n_tokens; }
int32_t oc_layout_n_images(const oc_token_layout *l) { return l->n_images; }
oc_token_span oc_layout_image_span(const oc_token_layout *l, int32_t g) { return l->images[g]; }
int32_t oc_layout_image_n_sink(const oc_token_layout *l, int32_t g) { return l->n_sink[g]; }

int32_t oc_layout_image_at(const oc_token_layout *l, int32_t pos) {
    if (pos < 0 || pos >= l->n_tokens) return -1;
    return l->code[pos] >= 0 ? l->code[pos] : -1;
}

int32_t oc_layout_next_image(const oc_token_layout *l, int32_t pos) {
    if (pos < 0) return 0;
    if (pos >= l->n_tokens) return l->n_images;
    int32_t c = l->code[pos];
    return c >= 0 ? c + 1 : -c - 1;
}

int oc_layout_is_sink(const oc_token_layout *l, int32_t pos) {
    int32_t g = oc_layout_image_at(l, pos);
    return g >= 0 && pos - l->images[g].start < l->n_sink[g];
}
