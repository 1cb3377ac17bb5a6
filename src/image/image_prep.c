/* image_prep.c: Qwen2-VL image preprocessing, matching HF's Qwen2VLImageProcessor on its PIL path
 * (transformers image_processing_qwen2_vl.py / image_processing_pil_qwen2_vl.py):
 *  1. smart_resize picks a size whose sides are multiples of 28 with min_pixels <= area <=
 *     max_pixels (ocellus notes docs/formats.md §3), then Pillow bicubic (image_resize.c);
 *  2. rescale: float32(double(u8) * (1/255)) — HF upcasts to float64, multiplies, casts down;
 *  3. normalize: (x - mean) / std with x, mean and std all float32 (numpy float32 arithmetic);
 *  4. the frame is repeated temporal_patch_size times and cut into 14x14 patches, each flattened
 *     as (channel, temporal, 14, 14), patches ordered by 2x2 merge groups (docs/formats.md §2b step 2):
 *     token = ((y/2) * (W/2) + x/2) * 4 + (y%2) * 2 + (x%2) for patch row y, column x. */
#include "image/image.h"

#include <math.h>
#include <string.h>

void oc_qwen2vl_prep_defaults(oc_qwen2vl_prep_params *p) {
    memset(p, 0, sizeof *p);
    p->patch_size = 14;
    p->merge_size = 2;
    p->temporal_patch_size = 2;
    p->min_pixels = 56 * 56;               /* 3136 */
    p->max_pixels = 28 * 28 * 16384;       /* 12845056, Qwen2-VL preprocessor_config.json */
    p->do_resize = 1;
    /* OPENAI_CLIP_MEAN / _STD. Python turns the decimal into a double and numpy then rounds that
     * to float32; going through a double literal here rounds the same way twice. */
    p->image_mean[0] = (float)0.48145466;
    p->image_mean[1] = (float)0.4578275;
    p->image_mean[2] = (float)0.40821073;
    p->image_std[0] = (float)0.26862954;
    p->image_std[1] = (float)0.26130258;
    p->image_std[2] = (float)0.27577711;
}

/* Python's round(): to nearest, ties to even. */
static double py_round(double x) {
    double f = floor(x), d = x - f;
    if (d > 0.5) return f + 1.0;
    if (d < 0.5) return f;
    return fmod(f, 2.0) == 0.0 ? f : f + 1.0;
}

oc_status oc_qwen2vl_smart_resize(int64_t height_px, int64_t width_px, int32_t factor,
                                  int64_t min_pixels, int64_t max_pixels, int32_t *out_height_px,
                                  int32_t *out_width_px, oc_error *err) {
    const int64_t side_max = (int64_t)1 << 26;   /* keeps every product below 2^53: exact doubles */
    if (height_px <= 0 || width_px <= 0 || height_px > side_max || width_px > side_max)
        return oc_fail(err, OC_ERR_INVALID, "smart_resize: image size %lldx%lld is out of range",
                       (long long)width_px, (long long)height_px);
    if (factor <= 0 || min_pixels < 0 || max_pixels <= 0 || min_pixels > max_pixels ||
        max_pixels > ((int64_t)1 << 52))
        return oc_fail(err, OC_ERR_INVALID, "smart_resize: bad parameters (factor %d, min_pixels %lld, max_pixels %lld)",
                       factor, (long long)min_pixels, (long long)max_pixels);
    const double h = (double)height_px, w = (double)width_px, f = (double)factor;
    const double aspect = (h > w ? h : w) / (h > w ? w : h);
    if (aspect > 200)   /* HF raises ValueError here */
        return oc_fail(err, OC_ERR_RANGE, "smart_resize: aspect ratio %.1f of %lldx%lld exceeds 200",
                       aspect, (long long)width_px, (long long)height_px);
    double h_bar = py_round(h / f) * f;
    double w_bar = py_round(w / f) * f;
    const double area = (double)(height_px * width_px);    /* exact: below 2^53 */
    if (h_bar * w_bar > (double)max_pixels) {
        const double beta = sqrt(area / (double)max_pixels);
        h_bar = fmax(f, floor(h / beta / f) * f);
        w_bar = fmax(f, floor(w / beta / f) * f);
    } else if (h_bar * w_bar < (double)min_pixels) {
        const double beta = sqrt((double)min_pixels / area);
        h_bar = ceil(h * beta / f) * f;
        w_bar = ceil(w * beta / f) * f;
    }
    /* HF would return 0 for a side below factor/2 when min_pixels is 0; never produce that */
    if (h_bar < f) h_bar = f;
    if (w_bar < f) w_bar = f;
    if (h_bar > (double)INT32_MAX || w_bar > (double)INT32_MAX)
        return oc_fail(err, OC_ERR_RANGE, "smart_resize: result %.0fx%.0f is too large", w_bar, h_bar);
    *out_height_px = (int32_t)h_bar;
    *out_width_px = (int32_t)w_bar;
    return OC_OK;
}

static oc_status check_params(const oc_qwen2vl_prep_params *p, oc_error *err) {
    if (p->patch_size <= 0 || p->patch_size > 1024 || p->merge_size <= 0 || p->merge_size > 64 ||
        p->temporal_patch_size <= 0 || p->temporal_patch_size > 64)
        return oc_fail(err, OC_ERR_INVALID, "preprocess: bad geometry (patch %d, merge %d, temporal %d)",
                       p->patch_size, p->merge_size, p->temporal_patch_size);
    for (int c = 0; c < 3; c++) {
        if (!isfinite(p->image_mean[c]) || !isfinite(p->image_std[c]) || p->image_std[c] == 0.0f)
            return oc_fail(err, OC_ERR_INVALID, "preprocess: bad mean/std for channel %d (%g, %g)", c,
                           (double)p->image_mean[c], (double)p->image_std[c]);
    }
    return OC_OK;
}

/* The arguments both entry points share: *p (NULL: the defaults, written to def) passes
 * check_params and img is a non-empty RGB image whose rows hold its width. */
static oc_status check_input(const oc_qwen2vl_prep_params **p, oc_qwen2vl_prep_params *def, const oc_image *img,
                             const char *who, oc_error *err) {
    if (!*p) {
        oc_qwen2vl_prep_defaults(def);
        *p = def;
    }
    oc_status st = check_params(*p, err);
    if (st) return st;
    if (!img || !img->rgb || img->width_px <= 0 || img->height_px <= 0 || img->stride_bytes / 3 < (size_t)img->width_px)
        return oc_fail(err, OC_ERR_INVALID, "%s: invalid image", who);
    return OC_OK;
}

oc_status oc_qwen2vl_patchify(float *dst, size_t dst_n_floats, const oc_image *img,
                              const oc_qwen2vl_prep_params *p, oc_error *err) {
    oc_qwen2vl_prep_params def;
    if (!dst) return oc_fail(err, OC_ERR_INVALID, "patchify: invalid image or output");
    oc_status st = check_input(&p, &def, img, "patchify", err);
    if (st) return st;
    const int32_t ps = p->patch_size, m = p->merge_size, tp = p->temporal_patch_size;
    const int32_t unit = ps * m;
    if (img->width_px % unit || img->height_px % unit)
        return oc_fail(err, OC_ERR_INVALID, "patchify: image %dx%d is not a multiple of %d on both sides",
                       img->width_px, img->height_px, unit);
    const size_t grid_h = (size_t)(img->height_px / ps), grid_w = (size_t)(img->width_px / ps);
    const size_t patch_dim = (size_t)3 * (size_t)tp * (size_t)ps * (size_t)ps;
    size_t need;
    if (!oc_mul_size(grid_h * grid_w, patch_dim, &need) || need > dst_n_floats)
        return oc_fail(err, OC_ERR_INVALID, "patchify: output holds %zu floats, %zu needed", dst_n_floats,
                       grid_h * grid_w * patch_dim);

    /* every u8 maps to one float per channel: a 3 x 256 table computed with HF's exact ops */
    float lut[3][256];
    for (int c = 0; c < 3; c++) {
        for (int v = 0; v < 256; v++) {
            const float rescaled = (float)((double)v * (1.0 / 255.0));
            const float centered = rescaled - p->image_mean[c];
            lut[c][v] = centered / p->image_std[c];
        }
    }
    const size_t plane = (size_t)ps * (size_t)ps;   /* one channel of one frame of a patch */
    float *out = dst;
    for (size_t by = 0; by < grid_h / (size_t)m; by++)
        for (size_t bx = 0; bx < grid_w / (size_t)m; bx++)
            for (size_t my = 0; my < (size_t)m; my++)
                for (size_t mx = 0; mx < (size_t)m; mx++, out += patch_dim) {
                    const size_t y0 = (by * (size_t)m + my) * (size_t)ps, x0 = (bx * (size_t)m + mx) * (size_t)ps;
                    for (int c = 0; c < 3; c++) {
                        float *frame0 = out + (size_t)c * (size_t)tp * plane;
                        for (size_t py = 0; py < (size_t)ps; py++) {
                            const uint8_t *row = img->rgb + (y0 + py) * img->stride_bytes + x0 * 3 + (size_t)c;
                            for (size_t px = 0; px < (size_t)ps; px++) frame0[py * (size_t)ps + px] = lut[c][row[3 * px]];
                        }
                        for (int t = 1; t < tp; t++)   /* the still image is every temporal frame */
                            memcpy(frame0 + (size_t)t * plane, frame0, plane * sizeof(float));
                    }
                }
    return OC_OK;
}

void oc_qwen2vl_pixels_free(oc_qwen2vl_pixels *px) {
    if (!px) return;
    if (px->alloc_bytes) oc_mem_free(&px->alloc, px->data, px->alloc_bytes);
    memset(px, 0, sizeof *px);
}

/* The size preprocessing resizes img's width x height to (itself without do_resize). */
static oc_status target_size(int32_t width_px, int32_t height_px, const oc_qwen2vl_prep_params *p, int32_t *rw,
                             int32_t *rh, oc_error *err) {
    const int32_t unit = p->patch_size * p->merge_size;
    *rh = height_px;
    *rw = width_px;
    if (p->do_resize) return oc_qwen2vl_smart_resize(height_px, width_px, unit, p->min_pixels, p->max_pixels, rh, rw, err);
    if (*rh % unit || *rw % unit)
        return oc_fail(err, OC_ERR_INVALID, "preprocess: without resizing, the sides must be multiples of %d (image is %dx%d)",
                       unit, *rw, *rh);
    return OC_OK;
}

/* The patches' floats for a resized rw x rh image; 0 on overflow. */
static int patch_floats(int32_t rw, int32_t rh, const oc_qwen2vl_prep_params *p, size_t *n_floats, size_t *n_bytes) {
    const size_t patch_dim = (size_t)3 * (size_t)p->temporal_patch_size * (size_t)p->patch_size * (size_t)p->patch_size;
    const size_t grid = (size_t)(rh / p->patch_size) * (size_t)(rw / p->patch_size);
    return oc_mul_size(grid, patch_dim, n_floats) && oc_mul_size(*n_floats, sizeof(float), n_bytes);
}

oc_status oc_qwen2vl_preprocess_bytes(int32_t width_px, int32_t height_px, const oc_qwen2vl_prep_params *p,
                                      int32_t *out_width_px, int32_t *out_height_px, size_t *payload,
                                      size_t *n_blocks, oc_error *err) {
    oc_qwen2vl_prep_params def;
    oc_status st;
    size_t n_floats, n_bytes;
    *payload = *n_blocks = 0;
    if (!p) {
        oc_qwen2vl_prep_defaults(&def);
        p = &def;
    }
    if ((st = check_params(p, err))) return st;
    if (width_px <= 0 || height_px <= 0) return oc_fail(err, OC_ERR_INVALID, "preprocess: invalid image");
    if ((st = target_size(width_px, height_px, p, out_width_px, out_height_px, err))) return st;
    if ((*out_width_px != width_px || *out_height_px != height_px) &&
        !oc_image_resize_bytes(width_px, height_px, *out_width_px, *out_height_px, payload, n_blocks))
        return oc_fail(err, OC_ERR_RANGE, "preprocess: resizing %dx%d to %dx%d overflows", width_px, height_px,
                       *out_width_px, *out_height_px);
    if (!patch_floats(*out_width_px, *out_height_px, p, &n_floats, &n_bytes) || !oc_add_size(*payload, n_bytes, payload))
        return oc_fail(err, OC_ERR_RANGE, "preprocess: %dx%d gives too many patches", *out_width_px, *out_height_px);
    (*n_blocks)++;
    return OC_OK;
}

/* Why the bound holds (S = max_side_px, T = max_pixels, f = patch * merge: every resized side is
 * at least f, so at most T / f; image_resize.c's allocations):
 *  - the resized image 3 T, the patches 12 * temporal * T, the row accumulator 24 T / f;
 *  - per axis (in -> out): out * taps int32 weights, taps <= 4 max(in / out, 1) + 3, so at most
 *    16 max(S, T / f) + 12 T / f; the bounds 8 T / f; one sample's doubles 32 max(S / f, 1) + 24;
 *  - the ring: 3 * out_width * vertical taps <= 12 max(out_width * H / out_height, T / f) + 9 T / f,
 *    and smart_resize keeps out_width * H / out_height <= 2 S + 2 f: scaled down, out_height >=
 *    H / (2 beta) and out_width <= max(f, W / beta) with f beta <= S; rounded, out_height >= H / 2
 *    and out_width <= W + f / 2; scaled up, out_height >= H. */
int oc_qwen2vl_preprocess_bound(int64_t max_side_px, const oc_qwen2vl_prep_params *p, size_t *payload,
                                size_t *n_blocks) {
    *payload = *n_blocks = 0;
    if (!p || check_params(p, NULL) || max_side_px < 1 || max_side_px > ((int64_t)1 << 26) || p->max_pixels < 1 ||
        p->max_pixels > ((int64_t)1 << 40))
        return 0;
    const uint64_t S = (uint64_t)max_side_px, T = (uint64_t)p->max_pixels;
    const uint64_t f = (uint64_t)p->patch_size * (uint64_t)p->merge_size, Tf = T / f + 1;
    const uint64_t axis = 16 * OC_MAX(S, Tf) + 12 * Tf + 8 * Tf + 32 * OC_MAX(S / f + 1, 1) + 24;
    const uint64_t ring = 12 * OC_MAX(2 * S + 2 * f, Tf) + 9 * Tf;
    const uint64_t total = 3 * T + 12 * (uint64_t)p->temporal_patch_size * T + 24 * Tf + 2 * axis + ring;
    if (total > SIZE_MAX) return 0;
    *payload = (size_t)total;
    *n_blocks = 10;   /* out, 2 x 3 tables, accumulator, ring, patches */
    return 1;
}

oc_status oc_qwen2vl_preprocess(oc_qwen2vl_pixels *out, const oc_image *img,
                                const oc_qwen2vl_prep_params *p, const oc_allocator *alloc,
                                oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "preprocess: NULL output");
    memset(out, 0, sizeof *out);
    oc_qwen2vl_prep_params def;
    oc_status st = check_input(&p, &def, img, "preprocess", err);
    if (st) return st;
    int32_t rh, rw;
    if ((st = target_size(img->width_px, img->height_px, p, &rw, &rh, err))) return st;
    oc_image resized;
    memset(&resized, 0, sizeof resized);
    const oc_image *src = img;
    if (rh != img->height_px || rw != img->width_px) {
        if ((st = oc_image_resize_bicubic(&resized, img, rw, rh, alloc, err))) return st;
        src = &resized;
    }
    const int64_t grid_h = rh / p->patch_size, grid_w = rw / p->patch_size;
    const size_t patch_dim = (size_t)3 * (size_t)p->temporal_patch_size * (size_t)p->patch_size * (size_t)p->patch_size;
    size_t n_floats, n_bytes;
    if (!patch_floats(rw, rh, p, &n_floats, &n_bytes)) {
        oc_image_free(&resized);
        return oc_fail(err, OC_ERR_RANGE, "preprocess: %dx%d gives too many patches", rw, rh);
    }
    float *data = oc_mem_alloc(alloc, n_bytes);
    if (!data) {
        oc_image_free(&resized);
        return oc_fail(err, OC_ERR_NOMEM, "preprocess: cannot allocate %zu bytes of pixel values", n_bytes);
    }
    st = oc_qwen2vl_patchify(data, n_floats, src, p, err);
    oc_image_free(&resized);
    if (st) {
        oc_mem_free(alloc, data, n_bytes);
        return st;
    }
    out->data = data;
    out->n_patches = grid_h * grid_w;
    out->patch_dim = (int32_t)patch_dim;
    out->grid_t = 1;
    out->grid_h = (int32_t)grid_h;
    out->grid_w = (int32_t)grid_w;
    out->resized_height_px = rh;
    out->resized_width_px = rw;
    out->alloc_bytes = n_bytes;
    out->alloc = (alloc && alloc->fn) ? *alloc : *oc_default_allocator();
    return OC_OK;
}
