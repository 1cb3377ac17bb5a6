/* image.h: RGB8 images for the vision encoder: decoding (our PNM reader, JPEG through libjpeg,
 * PNG through libpng), a borrowed view over an embedder's RGB8 buffer, Pillow-compatible bicubic
 * resampling and the Qwen2-VL preprocessing that turns an image into HF's `pixel_values`.
 *
 * Pixels are always 8-bit R,G,B interleaved, rows `stride_bytes` apart (stride >= 3 * width).
 * Every decoder checks the declared size against oc_image_limits before it allocates anything,
 * and reports malformed input as OC_ERR_FORMAT with a one-line message naming the problem. */
#ifndef OC_IMAGE_H
#define OC_IMAGE_H

#include "core/core.h"

/* ---- images ----------------------------------------------------------------------------------- */

/* oc_image, oc_image_limits and OC_IMAGE_DEFAULT_MAX_SIDE_PX are public (include/ocellus.h). */

/* The scale a decoder that can reduce uses for a declared w x h image: *factor = 1 when it fits
 * limits->max_pixels (or reducing is off: limits->reduce_to_pixels == 0, then a larger image is
 * OC_ERR_RANGE as before). Otherwise the smallest factor f <= max_factor (a power of two when
 * pow2: libjpeg's DCT scaling) whose ceil(w/f) x ceil(h/f) fits; with toward_target, then the
 * largest f that still keeps reduce_to_pixels pixels. Sides are checked against the limits first.
 * [errors: OC_ERR_INVALID (empty), OC_ERR_RANGE] */
oc_status oc_image_scale_for(int64_t width_px, int64_t height_px, const oc_image_limits *limits,
                             int32_t max_factor, int pow2, int toward_target, int32_t *factor,
                             oc_error *err);

typedef enum oc_image_format {
    OC_IMAGE_FORMAT_UNKNOWN = 0,
    OC_IMAGE_FORMAT_PNM,       /* P2, P3, P5, P6 (Netpbm PGM/PPM, plain and raw) */
    OC_IMAGE_FORMAT_JPEG,
    OC_IMAGE_FORMAT_PNG
} oc_image_format;

/* Format from the first bytes (magic numbers); never reads past n_bytes. */
oc_image_format oc_image_detect(const void *bytes, size_t n_bytes);
const char *oc_image_format_name(oc_image_format format);

/* oc_image_decode, oc_image_load, oc_image_free, oc_image_limits_default: include/ocellus.h. */

/* The decoders' state structs fit in this many bytes (each decoder checks at compile time). */
#define OC_IMAGE_STATE_BYTES 8192
/* The most memory oc_image_decode takes from its allocator under these limits (limits NULL:
 * defaults), whatever the input: the pixels (3 bytes each), a PNG's RGBA copy or row buffers, the
 * row pointers and the decoder's state, in at most OC_IMAGE_DECODE_BLOCKS allocations of
 * oc_mem_alloc. SIZE_MAX when it overflows. A progressive JPEG's coefficient arrays are in it
 * (taken through alloc, at most 4 bytes per max_pixels); libjpeg/libpng's other working memory
 * (rows, tables: O(width)) is not. */
#define OC_IMAGE_DECODE_BLOCKS 4
size_t oc_image_decode_bytes(const oc_image_limits *limits);

/* The size an image file declares, read from its header alone (PNG IHDR, JPEG SOF, PNM header),
 * and the size oc_image_decode will give it under limits (after a reduced decode: ceil(w/f)), so
 * a caller can count an image's tokens before decoding anything. 0 when the header cannot be read
 * (the decoder then reports why). [alloc: no] */
int oc_image_probe(const void *bytes, size_t n_bytes, const oc_image_limits *limits, int32_t *width_px,
                   int32_t *height_px);

/* The largest f x f block a reduced PNG decode averages (image_png.c). */
#define OC_IMAGE_PNG_MAX_REDUCE 256

/* One decoder each (oc_image_decode dispatches to them). */
oc_status oc_image_decode_pnm(oc_image *out, const void *bytes, size_t n_bytes,
                              const oc_image_limits *limits, const oc_allocator *alloc, oc_error *err);
oc_status oc_image_decode_jpeg(oc_image *out, const void *bytes, size_t n_bytes,
                               const oc_image_limits *limits, const oc_allocator *alloc, oc_error *err);
oc_status oc_image_decode_png(oc_image *out, const void *bytes, size_t n_bytes,
                              const oc_image_limits *limits, const oc_allocator *alloc, oc_error *err);

/* Entry point for embedders that already hold RGB8 pixels (a camera frame): a borrowed view,
 * no copy. rgb must stay valid while the view is used. stride_bytes >= 3 * width_px.
 * [alloc: no] [errors: OC_ERR_INVALID (NULL, zero or negative size, short stride), OC_ERR_RANGE] */
oc_status oc_image_wrap_rgb8(oc_image *out, const uint8_t *rgb, int32_t width_px, int32_t height_px,
                             size_t stride_bytes, const oc_image_limits *limits, oc_error *err);

/* The size check every decoder runs before allocating: OC_ERR_INVALID for an empty size,
 * OC_ERR_RANGE past the limits (limits NULL: defaults). */
oc_status oc_image_check_size(int64_t width_px, int64_t height_px, const oc_image_limits *limits,
                              oc_error *err);

/* Allocate a width x height image with a tight stride (3 * width), contents undefined.
 * [errors: OC_ERR_INVALID, OC_ERR_RANGE, OC_ERR_NOMEM] */
oc_status oc_image_alloc(oc_image *out, int32_t width_px, int32_t height_px,
                         const oc_image_limits *limits, const oc_allocator *alloc, oc_error *err);


/* ---- resampling -------------------------------------------------------------------------------- */

/* Resize like Pillow's Image.resize(size, Image.BICUBIC) on an RGB image (see image_resize.c for
 * the exact arithmetic); equal sizes copy. out gets a new tight image.
 * [alloc: out's pixels, coefficient tables, a row accumulator and a ring of one output row's taps
 * of intermediate rows: oc_image_resize_bytes] */
oc_status oc_image_resize_bicubic(oc_image *out, const oc_image *in, int32_t out_width_px,
                                  int32_t out_height_px, const oc_allocator *alloc, oc_error *err);
/* What oc_image_resize_bicubic takes from its allocator for these sizes, exactly: *n_blocks
 * oc_mem_alloc calls of *payload bytes in all (out's pixels among them; headers not included).
 * 0 when the sizes are not positive or the arithmetic overflows. */
int oc_image_resize_bytes(int32_t in_width_px, int32_t in_height_px, int32_t out_width_px, int32_t out_height_px,
                          size_t *payload, size_t *n_blocks);

/* ---- Qwen2-VL preprocessing (HF Qwen2VLImageProcessor, PIL path) -------------------------------- */

typedef struct oc_qwen2vl_prep_params {
    int32_t patch_size;            /* 14 */
    int32_t merge_size;            /* 2: one LLM token per merge_size x merge_size patches */
    int32_t temporal_patch_size;   /* 2: a still image is repeated temporal_patch_size times */
    int64_t min_pixels;            /* 3136 (preprocessor_config.json "min_pixels") */
    int64_t max_pixels;            /* 12845056 (preprocessor_config.json "max_pixels") */
    int do_resize;                 /* 1; 0 requires sides that are multiples of patch*merge */
    float image_mean[3];           /* OPENAI CLIP mean by default */
    float image_std[3];            /* OPENAI CLIP std by default */
} oc_qwen2vl_prep_params;

void oc_qwen2vl_prep_defaults(oc_qwen2vl_prep_params *p);

/* HF smart_resize, computed in double exactly as Python does (round half to even, floor, ceil,
 * sqrt). factor = patch_size * merge_size. [errors: OC_ERR_INVALID (non-positive sizes, factor,
 * min > max), OC_ERR_RANGE (aspect ratio > 200, as HF refuses)] */
oc_status oc_qwen2vl_smart_resize(int64_t height_px, int64_t width_px, int32_t factor,
                                  int64_t min_pixels, int64_t max_pixels, int32_t *out_height_px,
                                  int32_t *out_width_px, oc_error *err);

/* HF's `pixel_values` and `image_grid_thw` for one image. */
typedef struct oc_qwen2vl_pixels {
    float *data;                   /* [n_patches][patch_dim] */
    int64_t n_patches;             /* grid_t * grid_h * grid_w */
    int32_t patch_dim;             /* 3 * temporal_patch_size * patch_size^2 = 1176 */
    int32_t grid_t, grid_h, grid_w;/* grid_t = 1 for one image; grid_h = resized_height / 14 */
    int32_t resized_height_px, resized_width_px;
    size_t alloc_bytes;
    oc_allocator alloc;
} oc_qwen2vl_pixels;

/* Resize (smart_resize + bicubic), rescale by 1/255, normalize with mean/std, and cut into patches
 * in the 2x2 merge order. p may be NULL (defaults). On failure *out is zeroed.
 * [alloc: the output + a resized copy of the image when resizing] */
oc_status oc_qwen2vl_preprocess(oc_qwen2vl_pixels *out, const oc_image *img,
                                const oc_qwen2vl_prep_params *p, const oc_allocator *alloc,
                                oc_error *err);
/* What oc_qwen2vl_preprocess does with a width x height image before it allocates: the resized
 * size (*out_width_px x *out_height_px) and what it will take from its allocator, exactly
 * (*n_blocks oc_mem_alloc calls of *payload bytes, the output's patches included; headers not).
 * p may be NULL (defaults). [alloc: no] [errors: as oc_qwen2vl_preprocess's, without NOMEM] */
oc_status oc_qwen2vl_preprocess_bytes(int32_t width_px, int32_t height_px, const oc_qwen2vl_prep_params *p,
                                      int32_t *out_width_px, int32_t *out_height_px, size_t *payload,
                                      size_t *n_blocks, oc_error *err);
/* A bound on oc_qwen2vl_preprocess_bytes over every image whose sides are at most max_side_px
 * and whose resized area is at most p->max_pixels (larger results are refused by callers that
 * reserve this much: oc_ask). 0 on overflow or bad parameters. */
int oc_qwen2vl_preprocess_bound(int64_t max_side_px, const oc_qwen2vl_prep_params *p, size_t *payload,
                                size_t *n_blocks);
/* The normalize + patchify step alone, from an image whose sides are multiples of
 * patch_size * merge_size, into caller memory of n_patches * patch_dim floats.
 * [alloc: no] [errors: OC_ERR_INVALID] */
oc_status oc_qwen2vl_patchify(float *dst, size_t dst_n_floats, const oc_image *img,
                              const oc_qwen2vl_prep_params *p, oc_error *err);
void oc_qwen2vl_pixels_free(oc_qwen2vl_pixels *px);

#endif /* OC_IMAGE_H */
