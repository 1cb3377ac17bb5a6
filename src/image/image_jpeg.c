/* image_jpeg.c: JPEG decoding from memory through libjpeg(-turbo), when configure found it.
 * libjpeg reports errors by calling error_exit, which must not return; ours longjmps back into
 * run_decode() below, the only function here that calls setjmp, so no jump ever crosses our API.
 * Messages are formatted by libjpeg and never printed. Truncated or corrupt entropy data, which
 * libjpeg only warns about (and then fills with grey), is treated as an error here, and
 * progressive files are limited to MAX_SCANS scans (libjpeg-turbo's advice against scan bombs).
 * A progressive (or any multi-scan) file makes libjpeg keep every DCT coefficient of the whole
 * image until the last scan, whatever the output scale: 2 bytes x 64 per 8x8 block of each
 * component, 768 MiB for a 16384 x 16384 4:2:0 file of 3 MB. That buffer is libjpeg's "virtual
 * block array"; we serve it ourselves (the jpeg_memory_mgr methods for block arrays, below) from
 * the oc_allocator, after checking its size against limits before jpeg_start_decompress: at most
 * 4 bytes per max_pixels, the room a full-size PNG decode takes for its RGBA copy, so
 * oc_image_decode_bytes (and a context's stated memory) covers it. Larger files are refused.
 * libjpeg's other working memory (rows, tables: O(width)) comes from its own malloc. With
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
#define MAX_ARRAYS 10   /* libjpeg's MAX_COMPONENTS: one coefficient array per component */
/* The blocks start this aligned: libjpeg-turbo's SIMD IDCTs read a block with aligned loads
 * (movdqa), as its own memory manager aligns them; 8 bytes off, they fault (found by
 * fuzz_ask_files: a progressive file whose arrays held an odd number of row pointers). */
#define BLOCK_ALIGN 64

/* Our definition of libjpeg's opaque virtual block array (jpeglib.h declares the struct tag only;
 * the library reaches an array through the memory manager's methods, which are ours here). The
 * whole array lives in memory: access returns row pointers into it. */
struct jvirt_barray_control {
    JDIMENSION blocks_per_row, n_rows;
    JBLOCKARRAY rows;                 /* [n_rows] row pointers into the block storage */
};

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
    struct jvirt_barray_control arrays[MAX_ARRAYS];
    int n_arrays;
    void *coef;                       /* every array's row pointers and blocks, one allocation */
    size_t coef_bytes;
    void (*libjpeg_realize)(j_common_ptr);   /* the library's own, for its sample arrays */
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

static void fail_jump(jpeg_state *s, oc_status st) {
    s->status = st;
    longjmp(s->jump, 1);
}

/* The bytes of n arrays with our layout (on_realize): every row pointer, rounded up to
 * BLOCK_ALIGN, then every block; *ptr_bytes: where the blocks start. */
static int arrays_bytes(const size_t *blocks_per_row, const size_t *n_rows, int n, size_t *ptr_bytes, size_t *out) {
    size_t ptrs = 0, blocks = 0, b;
    for (int i = 0; i < n; i++) {
        if (!oc_add_size(ptrs, n_rows[i], &ptrs) || !oc_mul_size(blocks_per_row[i], n_rows[i], &b) ||
            !oc_add_size(blocks, b, &blocks))
            return 0;
    }
    if (!oc_mul_size(ptrs, sizeof(JBLOCKROW), &ptrs) || !oc_add_size(ptrs, BLOCK_ALIGN - 1, &ptrs) ||
        !oc_mul_size(blocks, sizeof(JBLOCK), &blocks))
        return 0;
    *ptr_bytes = ptrs / BLOCK_ALIGN * BLOCK_ALIGN;
    return oc_add_size(*ptr_bytes, blocks, out);
}

/* The most coefficient memory a multi-scan file may take under limits: 4 bytes per max_pixels. */
static size_t coef_cap_bytes(const oc_image_limits *limits) {
    oc_image_limits def;
    if (!limits) {
        oc_image_limits_default(&def);
        limits = &def;
    }
    size_t cap;
    if (limits->max_pixels <= 0) return 0;
    return oc_mul_size((size_t)limits->max_pixels, 4, &cap) ? cap : SIZE_MAX;
}

static jvirt_barray_ptr on_request_barray(j_common_ptr c, int pool_id, boolean pre_zero, JDIMENSION blocks_per_row,
                                          JDIMENSION n_rows, JDIMENSION max_access) {
    (void)pool_id; (void)pre_zero; (void)max_access;   /* all rows are in memory, zeroed */
    jpeg_state *s = state_of(c);
    if (s->n_arrays >= MAX_ARRAYS) {
        snprintf(s->message, sizeof s->message, "jpeg: more than %d coefficient arrays", MAX_ARRAYS);
        fail_jump(s, OC_ERR_FORMAT);
    }
    struct jvirt_barray_control *a = &s->arrays[s->n_arrays++];
    a->blocks_per_row = blocks_per_row;
    a->n_rows = n_rows;
    a->rows = NULL;
    return a;
}

/* One allocation for every array, checked against the cap again (the header check used the same
 * sizes; this is where the memory is really taken). */
static void on_realize(j_common_ptr c) {
    jpeg_state *s = state_of(c);
    s->libjpeg_realize(c);
    if (!s->n_arrays || s->coef) return;
    size_t total, ptr_bytes = 0, bpr[MAX_ARRAYS], rows_n[MAX_ARRAYS];
    for (int i = 0; i < s->n_arrays; i++) {
        bpr[i] = s->arrays[i].blocks_per_row;
        rows_n[i] = s->arrays[i].n_rows;
    }
    if (!arrays_bytes(bpr, rows_n, s->n_arrays, &ptr_bytes, &total)) total = SIZE_MAX;
    size_t cap = coef_cap_bytes(s->limits);
    if (total > cap) {
        snprintf(s->message, sizeof s->message, "jpeg: a multi-scan (progressive) image needs %zu bytes of "
                 "coefficients, more than its limit of %zu (4 bytes per max_pixels)", total, cap);
        fail_jump(s, OC_ERR_RANGE);
    }
    uint8_t *p = oc_mem_alloc(s->alloc, total);
    if (!p) {
        snprintf(s->message, sizeof s->message, "jpeg: cannot allocate %zu bytes of coefficients", total);
        fail_jump(s, OC_ERR_NOMEM);
    }
    memset(p, 0, total);   /* libjpeg asks progressive arrays pre-zeroed: absent bands decode as 0 */
    s->coef = p;
    s->coef_bytes = total;
    /* row pointers first, then each array's blocks from ptr_bytes on (BLOCK_ALIGN: oc_mem_alloc
     * returns OC_MEM_ALIGN-aligned memory, and a JBLOCK is 128 bytes, so every block stays aligned) */
    _Static_assert(OC_MEM_ALIGN % BLOCK_ALIGN == 0 && sizeof(JBLOCK) % BLOCK_ALIGN == 0, "blocks must stay aligned");
    JBLOCKROW *rows = (JBLOCKROW *)(void *)p;
    JBLOCKROW blocks = (JBLOCKROW)(void *)(p + ptr_bytes);
    for (int i = 0; i < s->n_arrays; i++) {
        struct jvirt_barray_control *a = &s->arrays[i];
        a->rows = rows;
        for (JDIMENSION r = 0; r < a->n_rows; r++) {
            rows[r] = blocks;
            blocks += a->blocks_per_row;
        }
        rows += a->n_rows;
    }
}

static JBLOCKARRAY on_access_barray(j_common_ptr c, jvirt_barray_ptr a, JDIMENSION start_row, JDIMENSION n_rows,
                                    boolean writable) {
    (void)writable;
    jpeg_state *s = state_of(c);
    if (!a->rows || start_row > a->n_rows || n_rows > a->n_rows - start_row) {
        snprintf(s->message, sizeof s->message, "jpeg: coefficient rows %u+%u outside the array", start_row, n_rows);
        fail_jump(s, OC_ERR_FORMAT);
    }
    return a->rows + start_row;
}

/* The coefficient memory libjpeg will ask for a multi-scan file (jdcoefct.c: each component's
 * blocks rounded up to its sampling factors), known once the header is read. */
static int header_coef_bytes(const struct jpeg_decompress_struct *ci, size_t *out) {
    size_t bpr[MAX_ARRAYS], rows_n[MAX_ARRAYS];
    if (ci->num_components < 1 || ci->num_components > MAX_ARRAYS) return 0;
    for (int i = 0; i < ci->num_components; i++) {
        const jpeg_component_info *k = &ci->comp_info[i];
        size_t h = (size_t)k->h_samp_factor, v = (size_t)k->v_samp_factor;
        if (!h || !v) return 0;
        bpr[i] = ((size_t)k->width_in_blocks + h - 1) / h * h;
        rows_n[i] = ((size_t)k->height_in_blocks + v - 1) / v * v;
    }
    size_t ptr_bytes;
    return arrays_bytes(bpr, rows_n, ci->num_components, &ptr_bytes, out);
}

/* All libjpeg calls happen here. Returns 0 on success; on failure s->status/message say why.
 * No local variable is read after a longjmp, so none needs to be volatile. */
static int run_decode(jpeg_state *s) {
    if (setjmp(s->jump)) return 1;
    jpeg_create_decompress(&s->cinfo);
    s->cinfo.progress = &s->progress;
    s->libjpeg_realize = s->cinfo.mem->realize_virt_arrays;
    s->cinfo.mem->request_virt_barray = on_request_barray;
    s->cinfo.mem->realize_virt_arrays = on_realize;
    s->cinfo.mem->access_virt_barray = on_access_barray;
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
    if (jpeg_has_multiple_scans(&s->cinfo)) {
        /* checked here, before jpeg_start_decompress allocates anything of the image's size */
        size_t need = SIZE_MAX, cap = coef_cap_bytes(s->limits);
        if (!header_coef_bytes(&s->cinfo, &need) || need > cap) {
            s->status = OC_ERR_RANGE;
            snprintf(s->message, sizeof s->message, "jpeg: a %s %ux%u image keeps %zu bytes of coefficients "
                     "while decoding, more than its limit of %zu (4 bytes per max_pixels); re-encode it as "
                     "baseline or make it smaller", s->cinfo.progressive_mode ? "progressive" : "multi-scan",
                     s->cinfo.image_width, s->cinfo.image_height, need, cap);
            return 1;
        }
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
    if (s->coef) oc_mem_free(alloc, s->coef, s->coef_bytes);
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
