/* image_jpeg.c: JPEG decoding from memory through libjpeg(-turbo), when configure found it.
 * libjpeg reports errors by calling error_exit, which must not return; ours longjmps back into
 * run_decode() below, the only function here that calls setjmp, so no jump ever crosses our API.
 * Messages are formatted by libjpeg and never printed. Truncated or corrupt entropy data, which
 * libjpeg only warns about (and then fills with grey), is treated as an error here, and
 * progressive files are limited to MAX_SCANS scans (libjpeg-turbo's advice against scan bombs).
 * libjpeg's own working memory comes from its allocator, not from the oc_allocator. With
 * limits->reduce_to_pixels, a large JPEG is decoded at 1/2, 1/4 or 1/8 scale by libjpeg's DCT
 * scaling (the IDCT of fewer coefficients: no full-size image ever exists). */
#include "image/image.h"

#include <string.h>

#if OC_HAVE_LIBJPEG

#include <setjmp.h>
#include <stdio.h>      /* jpeglib.h uses FILE and size_t without including their headers */
#include <jpeglib.h>
#include <jerror.h>

#define MAX_SCANS 500

typedef struct jpeg_state {
    struct jpeg_decompress_struct cinfo;
    struct jpeg_error_mgr mgr;
    struct jpeg_progress_mgr progress;
    jmp_buf jump;
    oc_status status;                 /* set before every jump and every early return */
    char message[JMSG_LENGTH_MAX + 64];
    const uint8_t *bytes;
    size_t n_bytes;
    const oc_image_limits *limits;
    const oc_allocator *alloc;
    oc_image *out;
} jpeg_state;
_Static_assert(sizeof(jpeg_state) <= OC_IMAGE_STATE_BYTES, "OC_IMAGE_STATE_BYTES too small");

/* cinfo is the first member, so libjpeg's j_common_ptr leads back to the state. */
static jpeg_state *state_of(j_common_ptr c) { return (jpeg_state *)(void *)c; }

static void on_error_exit(j_common_ptr c) {
    jpeg_state *s = state_of(c);
    char text[JMSG_LENGTH_MAX];
    c->err->format_message(c, text);
    s->status = c->err->msg_code == JERR_OUT_OF_MEMORY ? OC_ERR_NOMEM : OC_ERR_FORMAT;
    snprintf(s->message, sizeof s->message, "jpeg: %s", text);
    longjmp(s->jump, 1);
}

static void on_output_message(j_common_ptr c) { (void)c; }   /* a library never prints */

/* Warnings (level -1) about damaged data become errors; trace messages (level >= 0) are dropped. */
static void on_emit_message(j_common_ptr c, int level) {
    if (level >= 0) return;
    c->err->num_warnings++;
    switch (c->err->msg_code) {
    case JWRN_JPEG_EOF:
        state_of(c)->status = OC_ERR_FORMAT;
        snprintf(state_of(c)->message, sizeof state_of(c)->message, "jpeg: data ends early (truncated file)");
        longjmp(state_of(c)->jump, 1);
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
        on_error_exit(c);   /* formats libjpeg's own text and jumps */
        break;
    default:
        break;              /* harmless (e.g. extraneous bytes before a marker) */
    }
}

static void on_progress(j_common_ptr c) {
    jpeg_state *s = state_of(c);
    if (s->cinfo.input_scan_number > MAX_SCANS) {
        s->status = OC_ERR_FORMAT;
        snprintf(s->message, sizeof s->message, "jpeg: more than %d scans (refusing a progressive scan bomb)",
                 MAX_SCANS);
        longjmp(s->jump, 1);
    }
}

/* All libjpeg calls happen here. Returns 0 on success; on failure s->status/message say why.
 * No local variable is read after a longjmp, so none needs to be volatile. */
static int run_decode(jpeg_state *s) {
    if (setjmp(s->jump)) return 1;
    jpeg_create_decompress(&s->cinfo);
    s->cinfo.progress = &s->progress;
    jpeg_mem_src(&s->cinfo, s->bytes, (unsigned long)s->n_bytes);
    if (jpeg_read_header(&s->cinfo, TRUE) != JPEG_HEADER_OK) {
        s->status = OC_ERR_FORMAT;
        snprintf(s->message, sizeof s->message, "jpeg: the stream holds tables but no image");
        return 1;
    }
    switch (s->cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE: case JCS_YCbCr: case JCS_RGB: break;
    case JCS_CMYK: case JCS_YCCK:
        s->status = OC_ERR_UNSUPPORTED;
        snprintf(s->message, sizeof s->message, "jpeg: CMYK images are not supported");
        return 1;
    default:
        s->status = OC_ERR_UNSUPPORTED;
        snprintf(s->message, sizeof s->message, "jpeg: color space %d with %d components is not supported",
                 (int)s->cinfo.jpeg_color_space, s->cinfo.num_components);
        return 1;
    }
    oc_error e = { OC_OK, "" };
    int32_t f = 1;   /* libjpeg's DCT scaling: 1/f of each side, computed while decoding */
    s->status = oc_image_scale_for(s->cinfo.image_width, s->cinfo.image_height, s->limits, 8, 1, 1, &f, &e);
    if (s->status) {
        if (s->status == OC_ERR_INVALID) s->status = OC_ERR_FORMAT;
        snprintf(s->message, sizeof s->message, "jpeg: %s", e.message);
        return 1;
    }
    s->cinfo.scale_num = 1;
    s->cinfo.scale_denom = (unsigned)f;
    s->cinfo.out_color_space = JCS_RGB;   /* grey is expanded to RGB by libjpeg */
    jpeg_start_decompress(&s->cinfo);
    unsigned want_w = (s->cinfo.image_width + (unsigned)f - 1) / (unsigned)f;
    unsigned want_h = (s->cinfo.image_height + (unsigned)f - 1) / (unsigned)f;
    if (s->cinfo.output_components != 3 || s->cinfo.output_width != want_w || s->cinfo.output_height != want_h) {
        s->status = OC_ERR_FORMAT;
        snprintf(s->message, sizeof s->message, "jpeg: unexpected output geometry %ux%u with %d components",
                 s->cinfo.output_width, s->cinfo.output_height, s->cinfo.output_components);
        return 1;
    }
    s->status = oc_image_alloc(s->out, (int32_t)s->cinfo.output_width, (int32_t)s->cinfo.output_height,
                               s->limits, s->alloc, &e);
    if (s->status) {
        snprintf(s->message, sizeof s->message, "jpeg: %s", e.message);
        return 1;
    }
    while (s->cinfo.output_scanline < s->cinfo.output_height) {
        JSAMPROW row = s->out->rgb + (size_t)s->cinfo.output_scanline * s->out->stride_bytes;
        if (jpeg_read_scanlines(&s->cinfo, &row, 1) != 1) {
            s->status = OC_ERR_FORMAT;
            snprintf(s->message, sizeof s->message, "jpeg: decoding stopped at row %u", s->cinfo.output_scanline);
            return 1;
        }
    }
    jpeg_finish_decompress(&s->cinfo);
    return 0;
}

oc_status oc_image_decode_jpeg(oc_image *out, const void *bytes, size_t n_bytes,
                               const oc_image_limits *limits, const oc_allocator *alloc, oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "jpeg: NULL output");
    memset(out, 0, sizeof *out);
    if (!bytes || n_bytes == 0) return oc_fail(err, OC_ERR_FORMAT, "jpeg: empty input");
    if ((unsigned long)n_bytes != n_bytes)   /* jpeg_mem_src takes an unsigned long */
        return oc_fail(err, OC_ERR_RANGE, "jpeg: input of %zu bytes is too large", n_bytes);
    jpeg_state *s = oc_mem_calloc(alloc, sizeof *s);   /* jmp_buf and libjpeg structs: off the stack */
    if (!s) return oc_fail(err, OC_ERR_NOMEM, "jpeg: cannot allocate the decoder state");
    s->bytes = bytes;
    s->n_bytes = n_bytes;
    s->limits = limits;
    s->alloc = alloc;
    s->out = out;
    s->cinfo.err = jpeg_std_error(&s->mgr);
    s->mgr.error_exit = on_error_exit;
    s->mgr.output_message = on_output_message;
    s->mgr.emit_message = on_emit_message;
    s->progress.progress_monitor = on_progress;
    int failed = run_decode(s);
    jpeg_destroy_decompress(&s->cinfo);   /* safe after any failure: cinfo started zeroed */
    oc_status st = OC_OK;
    if (failed) {
        oc_image_free(out);
        st = oc_fail(err, s->status ? s->status : OC_ERR_FORMAT, "%s", s->message);
    }
    oc_mem_free(alloc, s, sizeof *s);
    return st;
}

#else /* !OC_HAVE_LIBJPEG */

oc_status oc_image_decode_jpeg(oc_image *out, const void *bytes, size_t n_bytes,
                               const oc_image_limits *limits, const oc_allocator *alloc, oc_error *err) {
    (void)bytes; (void)n_bytes; (void)limits; (void)alloc;
    if (out) memset(out, 0, sizeof *out);
    return oc_fail(err, OC_ERR_UNSUPPORTED, "this build has no JPEG support (configure found no libjpeg)");
}

#endif
