/* image.c: what every image path shares: size limits, format detection by magic bytes, pixel
 * buffer allocation, the borrowed RGB8 view for embedders, and the decode/load dispatchers.
 * The decoders themselves live in image_pnm.c, image_jpeg.c and image_png.c. */
#include "image/image.h"

#include "port.h"

#include <string.h>

OC_API void oc_image_limits_default(oc_image_limits *limits) {
    limits->max_width_px = OC_IMAGE_DEFAULT_MAX_SIDE_PX;
    limits->max_height_px = OC_IMAGE_DEFAULT_MAX_SIDE_PX;
    limits->max_pixels = (int64_t)OC_IMAGE_DEFAULT_MAX_SIDE_PX * OC_IMAGE_DEFAULT_MAX_SIDE_PX;
    limits->reduce_to_pixels = 0;
}

oc_image_format oc_image_detect(const void *bytes, size_t n_bytes) {
    static const uint8_t png_magic[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
    const uint8_t *b = bytes;
    if (!b) return OC_IMAGE_FORMAT_UNKNOWN;
    if (n_bytes >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return OC_IMAGE_FORMAT_JPEG;
    if (n_bytes >= 8 && memcmp(b, png_magic, 8) == 0) return OC_IMAGE_FORMAT_PNG;
    if (n_bytes >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '7') return OC_IMAGE_FORMAT_PNM;
    return OC_IMAGE_FORMAT_UNKNOWN;
}

const char *oc_image_format_name(oc_image_format format) {
    switch (format) {
    case OC_IMAGE_FORMAT_PNM: return "PNM";
    case OC_IMAGE_FORMAT_JPEG: return "JPEG";
    case OC_IMAGE_FORMAT_PNG: return "PNG";
    case OC_IMAGE_FORMAT_UNKNOWN: break;
    }
    return "unknown";
}

/* The one size check every path goes through, so the messages read the same everywhere. With
 * check_pixels 0 only the sides are checked (a decoder that may reduce checks the pixels after). */
static oc_status check_dims(int64_t width_px, int64_t height_px, const oc_image_limits *limits,
                            int check_pixels, oc_error *err) {
    oc_image_limits def;
    if (!limits) {
        oc_image_limits_default(&def);
        limits = &def;
    }
    if (width_px <= 0 || height_px <= 0)
        return oc_fail(err, OC_ERR_INVALID, "image: size %lldx%lld is empty",
                       (long long)width_px, (long long)height_px);
    if (width_px > limits->max_width_px || height_px > limits->max_height_px)
        return oc_fail(err, OC_ERR_RANGE, "image: size %lldx%lld exceeds the limit %lldx%lld",
                       (long long)width_px, (long long)height_px, (long long)limits->max_width_px,
                       (long long)limits->max_height_px);
    /* both sides are <= INT32_MAX here only if the limits are; guard the product explicitly */
    if (width_px > INT32_MAX || height_px > INT32_MAX || width_px > INT64_MAX / height_px ||
        (check_pixels && width_px * height_px > limits->max_pixels))
        return oc_fail(err, OC_ERR_RANGE, "image: size %lldx%lld exceeds the limit of %lld pixels",
                       (long long)width_px, (long long)height_px, (long long)limits->max_pixels);
    return OC_OK;
}

static oc_status check_size(int64_t width_px, int64_t height_px, const oc_image_limits *limits,
                            oc_error *err) {
    return check_dims(width_px, height_px, limits, 1, err);
}

static int64_t reduced_pixels(int64_t width_px, int64_t height_px, int64_t f) {
    return ((width_px + f - 1) / f) * ((height_px + f - 1) / f);
}

oc_status oc_image_scale_for(int64_t width_px, int64_t height_px, const oc_image_limits *limits,
                             int32_t max_factor, int pow2, int toward_target, int32_t *factor,
                             oc_error *err) {
    oc_image_limits def;
    if (!limits) {
        oc_image_limits_default(&def);
        limits = &def;
    }
    *factor = 1;
    if (limits->reduce_to_pixels <= 0) return check_size(width_px, height_px, limits, err);
    oc_status st = check_dims(width_px, height_px, limits, 0, err);
    if (st) return st;
    int32_t f = 1;
    while (reduced_pixels(width_px, height_px, f) > limits->max_pixels) {
        if (f >= max_factor)
            return oc_fail(err, OC_ERR_RANGE, "image: size %lldx%lld exceeds the limit of %lld pixels even "
                           "at 1/%d scale", (long long)width_px, (long long)height_px,
                           (long long)limits->max_pixels, (int)max_factor);
        f = pow2 ? 2 * f : f + 1;
    }
    /* a smaller scale costs less to decode and to resize; keep what the model will look at */
    while (toward_target && f < max_factor) {
        int32_t g = pow2 ? 2 * f : f + 1;
        if (reduced_pixels(width_px, height_px, g) < limits->reduce_to_pixels) break;
        f = g;
    }
    *factor = f;
    return OC_OK;
}

oc_status oc_image_check_size(int64_t width_px, int64_t height_px, const oc_image_limits *limits,
                              oc_error *err) {
    return check_size(width_px, height_px, limits, err);
}

oc_status oc_image_alloc(oc_image *out, int32_t width_px, int32_t height_px,
                         const oc_image_limits *limits, const oc_allocator *alloc, oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "image: NULL output");
    memset(out, 0, sizeof *out);
    oc_status st = check_size(width_px, height_px, limits, err);
    if (st) return st;
    size_t stride, n_bytes;
    if (!oc_mul_size((size_t)width_px, 3, &stride) || !oc_mul_size(stride, (size_t)height_px, &n_bytes))
        return oc_fail(err, OC_ERR_RANGE, "image: %dx%d does not fit in memory", width_px, height_px);
    uint8_t *p = oc_mem_alloc(alloc, n_bytes);
    if (!p)
        return oc_fail(err, OC_ERR_NOMEM, "image: cannot allocate %zu bytes for %dx%d pixels",
                       n_bytes, width_px, height_px);
    out->rgb = p;
    out->width_px = width_px;
    out->height_px = height_px;
    out->stride_bytes = stride;
    out->alloc_bytes = n_bytes;
    out->alloc = (alloc && alloc->fn) ? *alloc : *oc_default_allocator();
    return OC_OK;
}

oc_status oc_image_wrap_rgb8(oc_image *out, const uint8_t *rgb, int32_t width_px, int32_t height_px,
                             size_t stride_bytes, const oc_image_limits *limits, oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "image: NULL output");
    memset(out, 0, sizeof *out);
    if (!rgb) return oc_fail(err, OC_ERR_INVALID, "image: NULL pixel buffer");
    oc_status st = check_size(width_px, height_px, limits, err);
    if (st) return st;
    if (stride_bytes / 3 < (size_t)width_px)
        return oc_fail(err, OC_ERR_INVALID, "image: stride %zu bytes is shorter than a row of %d RGB pixels",
                       stride_bytes, width_px);
    size_t span;   /* the caller's buffer must be addressable for height-1 strides + one row */
    if (!oc_mul_size(stride_bytes, (size_t)height_px - 1, &span) ||
        !oc_add_size(span, (size_t)width_px * 3, &span))
        return oc_fail(err, OC_ERR_RANGE, "image: stride %zu x %d rows overflows", stride_bytes, height_px);
    out->rgb = (uint8_t *)(uintptr_t)rgb;   /* a view: never written through, never freed */
    out->width_px = width_px;
    out->height_px = height_px;
    out->stride_bytes = stride_bytes;
    return OC_OK;
}

size_t oc_image_decode_bytes(const oc_image_limits *limits) {
    oc_image_limits def;
    if (!limits) {
        oc_image_limits_default(&def);
        limits = &def;
    }
    if (limits->max_pixels <= 0 || limits->max_width_px <= 0 || limits->max_height_px <= 0) return 0;
    size_t px = (size_t)limits->max_pixels, w = (size_t)limits->max_width_px, h = (size_t)limits->max_height_px;
    size_t out, full, reduced, total;
    /* PNG at full size: RGBA copy (4 bytes a pixel) + row pointers; reduced: a source row
     * (4 bytes a pixel) + block sums (3 x uint32 per output pixel, at most one per source pixel).
     * A multi-scan JPEG's coefficient arrays are capped at 4 bytes a pixel (image_jpeg.c), within
     * the full-size PNG term. */
    if (!oc_mul_size(px, 3, &out) || !oc_mul_size(px, 4, &full) || !oc_mul_size(w, 16, &reduced) ||
        !oc_add_size(full, h * sizeof(void *), &full) || !oc_add_size(out, OC_MAX(full, reduced), &total) ||
        !oc_add_size(total, OC_IMAGE_STATE_BYTES, &total))
        return SIZE_MAX;
    return total;
}

static uint32_t be16(const uint8_t *b) { return (uint32_t)b[0] << 8 | b[1]; }
static uint32_t be32(const uint8_t *b) { return be16(b) << 16 | be16(b + 2); }

/* JPEG: walk the marker segments to the first SOFn (C0-CF but C4 DHT, C8 JPG, CC DAC). */
static int probe_jpeg(const uint8_t *b, size_t n, int64_t *w, int64_t *h) {
    size_t i = 2;
    while (i + 4 <= n) {
        if (b[i] != 0xff) return 0;
        uint8_t m = b[i + 1];
        if (m == 0xff) { i++; continue; }   /* fill bytes */
        size_t len = be16(b + i + 2);
        if (len < 2) return 0;
        if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) {
            if (len < 7 || i + 9 > n) return 0;
            *h = be16(b + i + 5);
            *w = be16(b + i + 7);
            return 1;
        }
        if (m == 0xda || m == 0xd9) return 0;   /* a scan or the end before any frame header */
        i += 2 + len;
    }
    return 0;
}

/* PNM: magic, then width and height as decimal numbers between whitespace and # comments. */
static int probe_pnm(const uint8_t *b, size_t n, int64_t *w, int64_t *h) {
    size_t i = 2;
    int64_t v[2];
    for (int k = 0; k < 2; k++) {
        for (;;) {
            while (i < n && (b[i] == ' ' || (b[i] >= '\t' && b[i] <= '\r'))) i++;
            if (i < n && b[i] == '#') {
                while (i < n && b[i] != '\n' && b[i] != '\r') i++;
                continue;
            }
            break;
        }
        int digits = 0;
        v[k] = 0;
        while (i < n && b[i] >= '0' && b[i] <= '9' && digits < 10) v[k] = v[k] * 10 + (b[i++] - '0'), digits++;
        if (!digits) return 0;
    }
    *w = v[0];
    *h = v[1];
    return 1;
}

int oc_image_probe(const void *bytes, size_t n_bytes, const oc_image_limits *limits, int32_t *width_px,
                   int32_t *height_px) {
    const uint8_t *b = bytes;
    int64_t w = 0, h = 0;
    int32_t max_factor = 1, pow2 = 0;
    switch (oc_image_detect(bytes, n_bytes)) {
    case OC_IMAGE_FORMAT_PNG:
        /* IHDR is the first chunk: length, "IHDR", width, height, depth, color, ..., interlace */
        if (n_bytes < 29 || memcmp(b + 12, "IHDR", 4)) return 0;
        w = be32(b + 16);
        h = be32(b + 20);
        max_factor = b[28] ? 1 : OC_IMAGE_PNG_MAX_REDUCE;   /* non-interlaced only (image_png.c) */
        break;
    case OC_IMAGE_FORMAT_JPEG:
        if (!probe_jpeg(b, n_bytes, &w, &h)) return 0;
        max_factor = 8;
        pow2 = 1;
        break;
    case OC_IMAGE_FORMAT_PNM:
        if (!probe_pnm(b, n_bytes, &w, &h)) return 0;
        break;
    case OC_IMAGE_FORMAT_UNKNOWN:
        return 0;
    }
    int32_t f = 1;
    oc_error e;
    if (oc_image_scale_for(w, h, limits, max_factor, pow2, pow2, &f, &e)) return 0;
    *width_px = (int32_t)((w + f - 1) / f);
    *height_px = (int32_t)((h + f - 1) / f);
    return 1;
}

OC_API oc_image_rgb oc_image_view(const oc_image *img) {
    oc_image_rgb v;
    memset(&v, 0, sizeof v);
    if (img) {
        v.rgb = img->rgb;
        v.width_px = img->width_px;
        v.height_px = img->height_px;
        v.stride_bytes = img->stride_bytes;
    }
    return v;
}

OC_API void oc_image_free(oc_image *img) {
    if (!img) return;
    if (img->alloc_bytes) oc_mem_free(&img->alloc, img->rgb, img->alloc_bytes);
    memset(img, 0, sizeof *img);
}

OC_API oc_status oc_image_decode(oc_image *out, const void *bytes, size_t n_bytes,
                          const oc_image_limits *limits, const oc_allocator *alloc, oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "image: NULL output");
    memset(out, 0, sizeof *out);
    if (!bytes && n_bytes) return oc_fail(err, OC_ERR_INVALID, "image: NULL input");
    switch (oc_image_detect(bytes, n_bytes)) {
    case OC_IMAGE_FORMAT_PNM: return oc_image_decode_pnm(out, bytes, n_bytes, limits, alloc, err);
    case OC_IMAGE_FORMAT_JPEG: return oc_image_decode_jpeg(out, bytes, n_bytes, limits, alloc, err);
    case OC_IMAGE_FORMAT_PNG: return oc_image_decode_png(out, bytes, n_bytes, limits, alloc, err);
    case OC_IMAGE_FORMAT_UNKNOWN: break;
    }
    if (n_bytes == 0) return oc_fail(err, OC_ERR_FORMAT, "image: empty input");
    /* the file's bytes are never echoed: a path may lead (through a symlink) to a file the user
     * may not read otherwise; oc_image_load names the path */
    return oc_fail(err, OC_ERR_FORMAT, "image: not an image file of a known format (expected PNM, JPEG or PNG)");
}

OC_API oc_status oc_image_load(oc_image *out, const char *path, const oc_image_limits *limits,
                        const oc_allocator *alloc, oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "image: NULL output");
    memset(out, 0, sizeof *out);
    if (!path) return oc_fail(err, OC_ERR_INVALID, "image: NULL path");
    oc_port_mapping map;
    char msg[OC_ERROR_MESSAGE_BYTES];
    if (oc_port_map_file(path, &map, msg, sizeof msg) != 0)
        return oc_fail(err, OC_ERR_IO, "%s", msg);
    oc_error inner = { OC_OK, "" };
    oc_status st = oc_image_decode(out, map.data, map.n_bytes, limits, alloc, &inner);
    oc_port_unmap_file(&map);
    if (st) {
        /* prefix the path, keeping the decoder's message (truncated if the path is long) */
        return oc_fail(err, st, "%.100s: %s", path, inner.message);
    }
    return OC_OK;
}
