/* image_png.c: PNG decoding from memory through libpng, when configure found it.
 * libpng's error callback must not return; ours longjmps back into run_decode() below (the only
 * setjmp here), so no jump crosses our API and nothing is printed. The low-level API is used
 * rather than png_image_* because the simplified API applies gamma/linear-light conversions that
 * Pillow does not: here palette, low-bit grey and tRNS are expanded, 16-bit samples keep their
 * high byte (as Pillow does), grey becomes RGB, and alpha is composited onto white with Pillow's
 * integer alpha_composite arithmetic — what HF's convert_to_rgb does before preprocessing.
 * libpng's own working memory comes from its allocator, not from the oc_allocator. Beyond the
 * pixel budget (limits->reduce_to_pixels), a non-interlaced image is averaged down as it streams. */
#include "image/image.h"

#include <string.h>

#if OC_HAVE_LIBPNG

#include <png.h>
#include <stdio.h>

/* Largest block side a non-interlaced PNG may be averaged over (sums of f*f bytes fit 32 bits). */
#define MAX_REDUCE OC_IMAGE_PNG_MAX_REDUCE

typedef struct png_state {
    png_structp png;
    png_infop info;
    oc_status status;                 /* set before every jump and every early return */
    char message[160];
    const uint8_t *bytes;
    size_t n_bytes, pos;
    const oc_image_limits *limits;
    const oc_allocator *alloc;
    oc_image *out;
    uint8_t *rgba;                    /* whole decoded image when it has alpha (freed by the caller) */
    size_t rgba_bytes;
    png_bytep *rows;                  /* row pointers for png_read_image */
    size_t rows_bytes;
} png_state;
_Static_assert(sizeof(png_state) <= OC_IMAGE_STATE_BYTES, "OC_IMAGE_STATE_BYTES too small");

static void on_png_error(png_structp png, png_const_charp msg) {
    png_state *s = png_get_error_ptr(png);
    if (s->status == OC_OK) s->status = OC_ERR_FORMAT;
    snprintf(s->message, sizeof s->message, "png: %s", msg);
    png_longjmp(png, 1);
}

static void on_png_warning(png_structp png, png_const_charp msg) { (void)png; (void)msg; }

static void on_png_read(png_structp png, png_bytep dst, size_t n) {
    png_state *s = png_get_io_ptr(png);
    if (n > s->n_bytes - s->pos) png_error(png, "data ends early (truncated file)");
    memcpy(dst, s->bytes + s->pos, n);
    s->pos += n;
}

/* Pillow's ImagingAlphaComposite with an opaque white destination (Pillow 9-11, 7 fraction bits):
 * coef1 = a * 128, coef2 = (255 - a) * 128, out = div255(c * coef1 + 255 * coef2 + 128 * 128) >> 7,
 * where div255(t) = ((t >> 8) + t) >> 8. a == 0 keeps the destination (white). */
static uint8_t over_white(uint32_t c, uint32_t a) {
    if (a == 0) return 255;
    uint32_t t = c * a * 128u + 255u * (255u - a) * 128u + (0x80u << 7);
    return (uint8_t)((((t >> 8) + t) >> 8) >> 7);
}

/* A decompression bomb (a small file declaring a huge image) within the sides the limits allow
 * but over their pixel budget: each f x f block of composited pixels becomes its mean (rounded),
 * read one row at a time, so memory is the reduced image plus O(width). Called inside run_decode's
 * setjmp; the row and sums live in s (freed by the caller). */
static int read_reduced(png_state *s, png_uint_32 width, png_uint_32 height, int channels, int32_t f) {
    oc_error e = { OC_OK, "" };
    int32_t out_w = (int32_t)((width + (png_uint_32)f - 1) / (png_uint_32)f);
    int32_t out_h = (int32_t)((height + (png_uint_32)f - 1) / (png_uint_32)f);
    s->status = oc_image_alloc(s->out, out_w, out_h, s->limits, s->alloc, &e);
    if (s->status) {
        snprintf(s->message, sizeof s->message, "png: %s", e.message);
        return 1;
    }
    s->rgba_bytes = (size_t)width * (size_t)channels;            /* one source row */
    s->rows_bytes = (size_t)out_w * 3 * sizeof(uint32_t);          /* block sums of one output row */
    s->rgba = oc_mem_alloc(s->alloc, s->rgba_bytes);
    s->rows = oc_mem_calloc(s->alloc, s->rows_bytes);
    if (!s->rgba || !s->rows) {
        s->status = OC_ERR_NOMEM;
        snprintf(s->message, sizeof s->message, "png: cannot allocate %zu bytes of row buffers",
                 s->rgba_bytes + s->rows_bytes);
        return 1;
    }
    uint32_t *sum = (uint32_t *)(void *)s->rows;
    for (png_uint_32 y = 0; y < height; y++) {
        png_read_row(s->png, s->rgba, NULL);
        const uint8_t *src = s->rgba;
        for (png_uint_32 x = 0; x < width; x++, src += channels) {
            uint32_t *acc = sum + 3 * (x / (png_uint_32)f);
            for (int c = 0; c < 3; c++) acc[c] += channels == 4 ? over_white(src[c], src[3]) : src[c];
        }
        if ((y + 1) % (png_uint_32)f && y + 1 < height) continue;
        uint32_t rows_in = (y % (png_uint_32)f) + 1;
        uint8_t *dst = s->out->rgb + (size_t)(y / (png_uint_32)f) * s->out->stride_bytes;
        for (int32_t ox = 0; ox < out_w; ox++) {
            uint32_t cols_in = OC_MIN((png_uint_32)f, width - (png_uint_32)ox * (png_uint_32)f);
            uint32_t n = rows_in * cols_in;
            for (int c = 0; c < 3; c++) dst[3 * ox + c] = (uint8_t)((sum[3 * ox + c] + n / 2) / n);
        }
        memset(sum, 0, s->rows_bytes);
    }
    png_read_end(s->png, NULL);
    return 0;
}

static int run_decode(png_state *s) {
    if (setjmp(png_jmpbuf(s->png))) return 1;
    png_set_read_fn(s->png, s, on_png_read);
    /* libpng's own size limit (1e6 by default) is lifted so our limits report the size */
    png_set_user_limits(s->png, 0x7fffffff, 0x7fffffff);
#ifdef OC_FUZZING
    /* fuzzing only: let mutated data past the checksums so the decoder behind them gets exercised */
    png_set_crc_action(s->png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
#ifdef PNG_IGNORE_ADLER32
    png_set_option(s->png, PNG_IGNORE_ADLER32, PNG_OPTION_ON);
#endif
#endif
    png_read_info(s->png, s->info);
    png_uint_32 width = png_get_image_width(s->png, s->info);
    png_uint_32 height = png_get_image_height(s->png, s->info);
    oc_error e = { OC_OK, "" };
    /* interlaced rows arrive in 7 passes, so only a non-interlaced image can be reduced as it streams */
    int interlaced = png_get_interlace_type(s->png, s->info) != PNG_INTERLACE_NONE;
    int32_t f = 1;
    s->status = oc_image_scale_for(width, height, s->limits, interlaced ? 1 : MAX_REDUCE, 0, 0, &f, &e);
    if (s->status) {
        if (s->status == OC_ERR_INVALID) s->status = OC_ERR_FORMAT;
        snprintf(s->message, sizeof s->message, "png: %s", e.message);
        return 1;
    }
    png_set_expand(s->png);          /* palette -> RGB, grey < 8 bits -> 8 bits, tRNS -> alpha */
    png_set_strip_16(s->png);
    png_set_gray_to_rgb(s->png);
    (void)png_set_interlace_handling(s->png);
    png_read_update_info(s->png, s->info);
    int channels = png_get_channels(s->png, s->info);
    size_t rowbytes = png_get_rowbytes(s->png, s->info);
    if ((channels != 3 && channels != 4) || png_get_bit_depth(s->png, s->info) != 8 ||
        rowbytes != (size_t)width * (size_t)channels) {
        s->status = OC_ERR_FORMAT;
        snprintf(s->message, sizeof s->message, "png: unexpected decoded layout (%d channels, %zu bytes a row)",
                 channels, rowbytes);
        return 1;
    }
    if (f > 1) return read_reduced(s, width, height, channels, f);
    s->status = oc_image_alloc(s->out, (int32_t)width, (int32_t)height, s->limits, s->alloc, &e);
    if (s->status) {
        snprintf(s->message, sizeof s->message, "png: %s", e.message);
        return 1;
    }
    s->rows_bytes = (size_t)height * sizeof(png_bytep);
    s->rows = oc_mem_alloc(s->alloc, s->rows_bytes);
    if (!s->rows) {
        s->status = OC_ERR_NOMEM;
        snprintf(s->message, sizeof s->message, "png: cannot allocate %zu bytes of row pointers", s->rows_bytes);
        return 1;
    }
    if (channels == 4) {
        /* interlaced images are filled in several passes, so the RGBA image is held whole */
        if (!oc_mul_size(rowbytes, height, &s->rgba_bytes) || !(s->rgba = oc_mem_alloc(s->alloc, s->rgba_bytes))) {
            s->status = OC_ERR_NOMEM;
            snprintf(s->message, sizeof s->message, "png: cannot allocate %zu bytes for RGBA pixels", s->rgba_bytes);
            s->rgba_bytes = 0;
            return 1;
        }
        for (size_t y = 0; y < height; y++) s->rows[y] = s->rgba + y * rowbytes;
    } else {
        for (size_t y = 0; y < height; y++) s->rows[y] = s->out->rgb + y * s->out->stride_bytes;
    }
    png_read_image(s->png, s->rows);
    png_read_end(s->png, NULL);
    if (channels == 4) {
        for (size_t y = 0; y < height; y++) {
            const uint8_t *src = s->rgba + y * rowbytes;
            uint8_t *dst = s->out->rgb + y * s->out->stride_bytes;
            for (size_t x = 0; x < width; x++, src += 4, dst += 3) {
                dst[0] = over_white(src[0], src[3]);
                dst[1] = over_white(src[1], src[3]);
                dst[2] = over_white(src[2], src[3]);
            }
        }
    }
    return 0;
}

oc_status oc_image_decode_png(oc_image *out, const void *bytes, size_t n_bytes,
                              const oc_image_limits *limits, const oc_allocator *alloc, oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "png: NULL output");
    memset(out, 0, sizeof *out);
    if (!bytes || n_bytes == 0) return oc_fail(err, OC_ERR_FORMAT, "png: empty input");
    oc_image_limits def;
    if (!limits) {
        oc_image_limits_default(&def);
        limits = &def;
    }
    png_state *s = oc_mem_calloc(alloc, sizeof *s);
    if (!s) return oc_fail(err, OC_ERR_NOMEM, "png: cannot allocate the decoder state");
    s->bytes = bytes;
    s->n_bytes = n_bytes;
    s->limits = limits;
    s->alloc = alloc;
    s->out = out;
    oc_status st = OC_OK;
    s->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, s, on_png_error, on_png_warning);
    if (s->png) s->info = png_create_info_struct(s->png);
    if (!s->png || !s->info) {
        st = oc_fail(err, OC_ERR_NOMEM, "png: cannot create the libpng decoder");
    } else if (run_decode(s)) {
        oc_image_free(out);
        st = oc_fail(err, s->status ? s->status : OC_ERR_FORMAT, "%s", s->message);
    }
    if (s->png) png_destroy_read_struct(&s->png, s->info ? &s->info : NULL, NULL);
    if (s->rows) oc_mem_free(alloc, s->rows, s->rows_bytes);
    if (s->rgba) oc_mem_free(alloc, s->rgba, s->rgba_bytes);
    oc_mem_free(alloc, s, sizeof *s);
    return st;
}

#else /* !OC_HAVE_LIBPNG */

oc_status oc_image_decode_png(oc_image *out, const void *bytes, size_t n_bytes,
                              const oc_image_limits *limits, const oc_allocator *alloc, oc_error *err) {
    (void)bytes; (void)n_bytes; (void)limits; (void)alloc;
    if (out) memset(out, 0, sizeof *out);
    return oc_fail(err, OC_ERR_UNSUPPORTED, "this build has no PNG support (configure found no libpng)");
}

#endif
