/* layout.h: where the images sit in a prompt, as the attention engine needs it for BlindSight's
 * template masks (blindsight.txt Sec. 3.2, App. L.2 "imgid", "istext", "isimsink").
 * Built once per prompt from the list of image spans (token positions, [start, end)); every lookup
 * afterwards is O(1). Tokens at or beyond n_tokens (generated later) count as text.
 * Sink tokens of an image: its first ceil(sink_fraction * n_image_tokens) tokens (Sec. 6.1: 10% for
 * the Qwen family), at least 1 when sink_fraction > 0. */
#ifndef OC_LAYOUT_H
#define OC_LAYOUT_H

#include "core/core.h"

/* A half-open range of token positions [start, end). */
typedef struct oc_token_span {
    int32_t start, end;
} oc_token_span;

#define OC_LAYOUT_DEFAULT_SINK_FRACTION 0.1f

typedef struct oc_token_layout oc_token_layout;

/* images: n_images spans, sorted, disjoint, non-empty, inside [0, n_tokens). sink_fraction in
 * [0, 1]. [alloc: yes, one block] [errors: OC_ERR_INVALID naming the bad span, OC_ERR_NOMEM] */
oc_status oc_layout_build(oc_token_layout **out, int32_t n_tokens, const oc_token_span *images,
                          int32_t n_images, float sink_fraction, const oc_allocator *alloc,
                          oc_error *err);
void oc_layout_free(oc_token_layout *layout);   /* NULL is a no-op */
/* The one block oc_layout_build allocates for n_tokens and n_images (grows with both); 0 when
 * negative or on overflow. */
size_t oc_layout_bytes(int32_t n_tokens, int32_t n_images);

int32_t oc_layout_n_tokens(const oc_token_layout *layout);
int32_t oc_layout_n_images(const oc_token_layout *layout);
/* Image g's span and its sink count (the sinks are [span.start, span.start + n_sink)). */
oc_token_span oc_layout_image_span(const oc_token_layout *layout, int32_t image);
int32_t oc_layout_image_n_sink(const oc_token_layout *layout, int32_t image);
/* The image holding token pos, or -1 for a text token (also for pos outside [0, n_tokens)). */
int32_t oc_layout_image_at(const oc_token_layout *layout, int32_t pos);
/* The first image whose span starts after pos (n_images if none): the next text/image boundary
 * for a text token. */
int32_t oc_layout_next_image(const oc_token_layout *layout, int32_t pos);
/* 1 when pos is a sink token of its image. */
int oc_layout_is_sink(const oc_token_layout *layout, int32_t pos);

/* The sink count rule, exposed for tests and plan tools: ceil(fraction * n_tokens) computed so that
 * 0.1 * 1000 gives 100 (not 101 from float rounding), clamped to [1, n_tokens] when fraction > 0. */
int32_t oc_layout_sink_count(int32_t n_image_tokens, float sink_fraction);

#endif
