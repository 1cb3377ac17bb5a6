/* test_image.c: image input: format detection, our PNM reader (valid variants, every corruption we
 * can think of, truncation at every byte, limits), the RGB8 view for embedders, and JPEG/PNG
 * decoding of images this test encodes itself with libjpeg/libpng (when configured).
 * A counting allocator checks that every failure path frees what it took. */
#include "check.h"
#include "image/image.h"

#if OC_HAVE_LIBJPEG
#include <stdio.h>
#include <jpeglib.h>
#endif
#if OC_HAVE_LIBPNG
#include <png.h>
#endif

/* ---- helpers ------------------------------------------------------------------------------------ */


static oc_status decode_str(oc_image *img, const char *s, size_t n, oc_error *e) {
    return oc_image_decode(img, s, n, NULL, NULL, e);
}
#define DECODE(img, lit, e) decode_str(img, lit, sizeof(lit) - 1, e)

static int pixel_is(const oc_image *img, int x, int y, int r, int g, int b) {
    const uint8_t *p = img->rgb + (size_t)y * img->stride_bytes + (size_t)x * 3;
    return p[0] == r && p[1] == g && p[2] == b;
}

/* ---- detection ------------------------------------------------------------------------------------ */

static void test_detect(void) {
    static const uint8_t jpg[] = { 0xff, 0xd8, 0xff, 0xe0 };
    static const uint8_t png[] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
    CHECK(oc_image_detect(jpg, sizeof jpg) == OC_IMAGE_FORMAT_JPEG);
    CHECK(oc_image_detect(jpg, 2) == OC_IMAGE_FORMAT_UNKNOWN);
    CHECK(oc_image_detect(png, sizeof png) == OC_IMAGE_FORMAT_PNG);
    CHECK(oc_image_detect(png, 7) == OC_IMAGE_FORMAT_UNKNOWN);
    CHECK(oc_image_detect("P6", 2) == OC_IMAGE_FORMAT_PNM);
    CHECK(oc_image_detect("P8", 2) == OC_IMAGE_FORMAT_UNKNOWN);
    CHECK(oc_image_detect("GIF89a", 6) == OC_IMAGE_FORMAT_UNKNOWN);
    CHECK(oc_image_detect(NULL, 0) == OC_IMAGE_FORMAT_UNKNOWN);
    CHECK(strcmp(oc_image_format_name(OC_IMAGE_FORMAT_PNG), "PNG") == 0);

    oc_image img;
    oc_error e;
    CHECK(oc_image_decode(&img, "GIF89a", 6, NULL, NULL, &e) == OC_ERR_FORMAT);
    /* issue 40, finding 9: the message names the expected formats and never echoes the bytes */
    CHECKF(strcmp(e.message, "image: not an image file of a known format (expected PNM, JPEG or PNG)") == 0,
           "%s", e.message);
    CHECK(oc_image_decode(&img, "root:x:0:0", 10, NULL, NULL, &e) == OC_ERR_FORMAT && !strstr(e.message, "72 6f") &&
          !strstr(e.message, "root"));
    CHECK(oc_image_decode(&img, "", 0, NULL, NULL, &e) == OC_ERR_FORMAT);
    CHECK(strcmp(e.message, "image: empty input") == 0);
    CHECK(img.rgb == NULL && img.alloc_bytes == 0);
}

/* ---- PNM: valid ------------------------------------------------------------------------------------- */

static void test_pnm_p6_basic(void) {
    oc_image img;
    oc_error e;
    REQUIRE(DECODE(&img, "P6\n2 1\n255\n\x01\x02\x03\xfd\xfe\xff", &e) == OC_OK);
    CHECK(img.width_px == 2 && img.height_px == 1 && img.stride_bytes == 6);
    CHECK(pixel_is(&img, 0, 0, 1, 2, 3) && pixel_is(&img, 1, 0, 253, 254, 255));
    oc_image_free(&img);
    CHECK(img.rgb == NULL);
    oc_image_free(&img);   /* twice is harmless */
    oc_image_free(NULL);
}

static void test_pnm_whitespace_and_comments(void) {
    /* comments between every token, a comment glued to a number, CRLF and TAB separators, and a
     * comment right after maxval whose line end is the single delimiter */
    static const char *const variants[] = {
        "P6 2 1 255 ABCDEF",
        "P6\r\n2\t1\r\n255\nABCDEF",
        "P6#magic\n# full line\n2 # width\n1#height\n255\nABCDEF",
        "P6\n2 1\n255#comment after maxval\nABCDEF",
        "P6\n2 1\n255#comment ended by CR\rABCDEF",
        "P6\v2\f1 255\tABCDEF",
        "P6\n0002 001\n00255\nABCDEF",
    };
    for (size_t i = 0; i < OC_ARRAY_LEN(variants); i++) {
        oc_image img;
        oc_error e;
        oc_status st = oc_image_decode(&img, variants[i], strlen(variants[i]), NULL, NULL, &e);
        CHECKF(st == OC_OK, "variant %zu: %s", i, e.message);
        if (st) continue;
        CHECKF(img.width_px == 2 && img.height_px == 1 && pixel_is(&img, 0, 0, 'A', 'B', 'C') &&
               pixel_is(&img, 1, 0, 'D', 'E', 'F'), "variant %zu pixels", i);
        oc_image_free(&img);
    }
    /* the raster starts right after the single whitespace: here it starts with a space byte */
    oc_image img;
    oc_error e;
    REQUIRE(DECODE(&img, "P6 1 1 255  AB", &e) == OC_OK);
    CHECK(pixel_is(&img, 0, 0, ' ', 'A', 'B'));
    oc_image_free(&img);
}

static void test_pnm_plain_and_grey(void) {
    oc_image img;
    oc_error e;
    REQUIRE(DECODE(&img, "P3\n# plain\n3 2\n255\n 0 1 2  3 4 5\n6 7 8\n9 10 11 12 13 14\n255 254 253", &e) == OC_OK);
    CHECK(img.width_px == 3 && img.height_px == 2);
    CHECK(pixel_is(&img, 0, 0, 0, 1, 2) && pixel_is(&img, 2, 0, 6, 7, 8));
    CHECK(pixel_is(&img, 0, 1, 9, 10, 11) && pixel_is(&img, 2, 1, 255, 254, 253));
    oc_image_free(&img);

    REQUIRE(DECODE(&img, "P5 3 1 255\n\x00\x80\xff", &e) == OC_OK);
    CHECK(pixel_is(&img, 0, 0, 0, 0, 0) && pixel_is(&img, 1, 0, 128, 128, 128) && pixel_is(&img, 2, 0, 255, 255, 255));
    oc_image_free(&img);

    REQUIRE(DECODE(&img, "P2 2 2 255 7 8\n9 10\n", &e) == OC_OK);
    CHECK(pixel_is(&img, 0, 0, 7, 7, 7) && pixel_is(&img, 1, 1, 10, 10, 10));
    oc_image_free(&img);
}

static void test_pnm_maxval_scaling(void) {
    oc_image img;
    oc_error e;
    /* maxval 1: 0 -> 0, 1 -> 255 */
    REQUIRE(DECODE(&img, "P3 2 1 1 0 1 0 1 1 1", &e) == OC_OK);
    CHECK(pixel_is(&img, 0, 0, 0, 255, 0) && pixel_is(&img, 1, 0, 255, 255, 255));
    oc_image_free(&img);
    /* maxval 100: v * 255 / 100 rounded: 50 -> 128 (127.5 rounds up), 1 -> 3 (2.55), 99 -> 252 (252.45) */
    REQUIRE(DECODE(&img, "P6 1 1 100\n\x32\x01\x63", &e) == OC_OK);
    CHECK(pixel_is(&img, 0, 0, 128, 3, 252));
    oc_image_free(&img);
    /* 16-bit big-endian samples: 0x8000 of 65535 -> round(128.498) = 128; 0xffff -> 255; 0x0101 -> 1 */
    REQUIRE(DECODE(&img, "P6 1 1 65535\n\x80\x00\xff\xff\x01\x01", &e) == OC_OK);
    CHECK(pixel_is(&img, 0, 0, 128, 255, 1));
    oc_image_free(&img);
    /* 16-bit plain */
    REQUIRE(DECODE(&img, "P3 1 1 65535 65535 0 32768", &e) == OC_OK);
    CHECK(pixel_is(&img, 0, 0, 255, 0, 128));
    oc_image_free(&img);
    /* maxval 256 switches raw samples to two bytes */
    REQUIRE(DECODE(&img, "P5 1 1 256\n\x01\x00", &e) == OC_OK);
    CHECK(pixel_is(&img, 0, 0, 255, 255, 255));
    oc_image_free(&img);
    /* trailing bytes after the image (a second image in the stream) are ignored */
    REQUIRE(DECODE(&img, "P5 1 1 255\n\x05P5 1 1 255\n\x06", &e) == OC_OK);
    CHECK(pixel_is(&img, 0, 0, 5, 5, 5));
    oc_image_free(&img);
}

/* ---- PNM: invalid ------------------------------------------------------------------------------------ */

typedef struct { const char *data; size_t n; oc_status st; const char *msg; } bad_case;
#define BAD(lit, st, msg) { lit, sizeof(lit) - 1, st, msg }

static void test_pnm_errors(void) {
    static const bad_case cases[] = {
        BAD("P", OC_ERR_FORMAT, "image: not an image file of a known format (expected PNM, JPEG or PNG)"),
        BAD("P6", OC_ERR_FORMAT, "pnm: file ends before the width"),
        BAD("P63 2 255\n", OC_ERR_FORMAT, "pnm: expected whitespace after the magic number P6"),
        BAD("P6 3 2 255", OC_ERR_FORMAT, "pnm: file ends before the raster"),
        BAD("P6 3 2 255X", OC_ERR_FORMAT, "pnm: expected whitespace after maxval at byte 10, found 0x58"),
        BAD("P6 3 2", OC_ERR_FORMAT, "pnm: file ends before the maxval"),
        BAD("P6 3 x 255\n", OC_ERR_FORMAT, "pnm: expected a decimal height at byte 5, found 0x78"),
        BAD("P6 -3 2 255\n", OC_ERR_FORMAT, "pnm: expected a decimal width at byte 3, found 0x2d"),
        BAD("P6 +3 2 255\n", OC_ERR_FORMAT, "pnm: expected a decimal width at byte 3, found 0x2b"),
        BAD("P6 0 2 255\n", OC_ERR_FORMAT, "pnm: image size 0x2 is empty"),
        BAD("P6 2 0 255\n", OC_ERR_FORMAT, "pnm: image size 2x0 is empty"),
        BAD("P6 1 1 0\n\x00\x00\x00", OC_ERR_FORMAT, "pnm: maxval 0 is out of range 1..65535"),
        BAD("P6 1 1 65536\n\x00\x00\x00", OC_ERR_FORMAT, "pnm: maxval is out of range 1..65535"),
        BAD("P6 1 1 -1\n\x00\x00\x00", OC_ERR_FORMAT, "pnm: expected a decimal maxval at byte 7, found 0x2d"),
        BAD("P6 1 1 2.5\n\x00\x00\x00", OC_ERR_FORMAT, "pnm: expected whitespace after maxval at byte 8, found 0x2e"),
        BAD("P6 2 2 255\nABCDEFGHIJK", OC_ERR_FORMAT, "pnm: raster truncated: 2x2 needs 12 bytes, 11 present"),
        BAD("P6 1 1 65535\n\x00\x00\x00\x00\x00", OC_ERR_FORMAT, "pnm: raster truncated: 1x1 needs 6 bytes, 5 present"),
        BAD("P6 1 1 100\n\x65\x00\x00", OC_ERR_FORMAT, "pnm: sample 101 at pixel (0, 0) exceeds maxval 100"),
        BAD("P3 1 1 255 1 2 256", OC_ERR_FORMAT, "pnm: sample 256 at pixel (0, 0) exceeds maxval 255"),
        BAD("P3 1 1 255 1 2 99999999999999999999", OC_ERR_FORMAT, "pnm: sample at pixel (0, 0) is larger than 65535"),
        BAD("P3 2 1 255 1 2 3 4 5", OC_ERR_FORMAT, "pnm: raster truncated: 2x1 needs 6 samples, 9 bytes present"),
        BAD("P3 2 1 255 1 2 3 4 5   ", OC_ERR_FORMAT, "pnm: raster truncated at pixel (1, 0)"),
        BAD("P3 1 1 255 1 2 x", OC_ERR_FORMAT, "pnm: expected a decimal sample at byte 15, found 0x78"),
        BAD("P3 1 1 255 1 2 3x", OC_ERR_FORMAT, "pnm: expected whitespace after a sample at byte 16, found 0x78"),
        BAD("P3 1 1 255 1 #c\n 2 3", OC_ERR_FORMAT, "pnm: expected a decimal sample at byte 13, found 0x23"),
        BAD("P4 1 1\n\x00", OC_ERR_UNSUPPORTED, "pnm: P4 (PBM bitmap) is not supported; use PPM (P6/P3) or PGM (P5/P2)"),
        BAD("P1 1 1 0", OC_ERR_UNSUPPORTED, "pnm: P1 (PBM bitmap) is not supported; use PPM (P6/P3) or PGM (P5/P2)"),
        BAD("P7\nWIDTH 1\n", OC_ERR_UNSUPPORTED, "pnm: P7 (PAM) is not supported; use PPM (P6/P3) or PGM (P5/P2)"),
        BAD("P6 100000 1 255\n", OC_ERR_RANGE, "pnm: width 100000 at byte 3 is too large (limit 16384)"),
        BAD("P6 1 99999999999999999999999 255\n", OC_ERR_RANGE, "pnm: height 99999999999999999999999 at byte 5 is too large (limit 16384)"),
        BAD("P6 16384 16384 255\n", OC_ERR_FORMAT, "pnm: raster truncated: 16384x16384 needs 805306368 bytes, 0 present"),
    };
    for (size_t i = 0; i < OC_ARRAY_LEN(cases); i++) {
        check_alloc c = { 0 };
        oc_allocator a = { check_alloc_fn, &c };
        oc_image img;
        oc_error e = { OC_OK, "" };
        oc_status st = oc_image_decode(&img, cases[i].data, cases[i].n, NULL, &a, &e);
        CHECKF(st == cases[i].st, "case %zu: status %d, want %d (%s)", i, st, cases[i].st, e.message);
        CHECKF(strcmp(e.message, cases[i].msg) == 0, "case %zu: message '%s'\n      want '%s'", i, e.message, cases[i].msg);
        CHECKF(img.rgb == NULL && img.alloc_bytes == 0, "case %zu: output not cleared", i);
        CHECKF(c.n_live == 0, "case %zu: %ld blocks leaked", i, c.n_live);
    }
}

static void test_pnm_limits(void) {
    oc_image_limits lim = { 4, 3, 8, 0 };
    oc_image img;
    oc_error e;
    CHECK(oc_image_decode(&img, "P5 4 3 255\n", 11, &lim, NULL, &e) == OC_ERR_RANGE);
    CHECKF(strcmp(e.message, "image: size 4x3 exceeds the limit of 8 pixels") == 0, "%s", e.message);
    CHECK(oc_image_decode(&img, "P5 5 1 255\n", 11, &lim, NULL, &e) == OC_ERR_RANGE);
    CHECKF(strcmp(e.message, "pnm: width 5 at byte 3 is too large (limit 4)") == 0, "%s", e.message);
    CHECK(oc_image_decode(&img, "P5 1 4 255\n", 11, &lim, NULL, &e) == OC_ERR_RANGE);
    REQUIRE(oc_image_decode(&img, "P5 4 2 255\nABCDEFGH", 19, &lim, NULL, &e) == OC_OK);
    oc_image_free(&img);
}

/* Every proper prefix of a raw file is refused and leaks nothing; for plain files a prefix may
 * still parse (a shortened last number), but must never crash or leak. */
static void test_pnm_truncation_every_byte(void) {
    static const char raw[] = "P6\n# c\n3 2\n255\nABCDEFGHIJKLMNOPQR";
    static const char plain[] = "P3\n3 1\n# c\n255\n1 22 255\n0 0 0\n7 8 9\n";
    check_alloc c = { 0 };
    oc_allocator a = { check_alloc_fn, &c };
    for (size_t n = 0; n < sizeof raw - 1; n++) {
        oc_image img;
        oc_error e;
        CHECKF(oc_image_decode(&img, raw, n, NULL, &a, &e) != OC_OK, "raw prefix %zu accepted", n);
        CHECKF(c.n_live == 0, "raw prefix %zu leaked", n);
    }
    oc_image img;
    oc_error e;
    REQUIRE(oc_image_decode(&img, raw, sizeof raw - 1, NULL, &a, &e) == OC_OK);
    oc_image_free(&img);
    for (size_t n = 0; n <= sizeof plain - 1; n++) {
        oc_status st = oc_image_decode(&img, plain, n, NULL, &a, &e);
        if (st == OC_OK) {
            CHECK(img.width_px == 3 && img.height_px == 1);
            oc_image_free(&img);
        }
        CHECKF(c.n_live == 0, "plain prefix %zu leaked", n);
    }
    CHECK(c.n_live == 0 && c.bytes_live == 0);
}

/* Flip every byte of a small file to a few values: only statuses, never crashes or leaks. */
static void test_pnm_mutations(void) {
    char buf[64];
    static const char base[] = "P6 2 2 255\nABCDEFGHIJKL";
    static const uint8_t values[] = { 0, ' ', '#', '\n', '9', 'P', 0xff };
    check_alloc c = { 0 };
    oc_allocator a = { check_alloc_fn, &c };
    for (size_t i = 0; i < sizeof base - 1; i++)
        for (size_t v = 0; v < sizeof values; v++) {
            memcpy(buf, base, sizeof base);
            buf[i] = (char)values[v];
            oc_image img;
            oc_error e;
            if (oc_image_decode(&img, buf, sizeof base - 1, NULL, &a, &e) == OC_OK) oc_image_free(&img);
            CHECKF(c.n_live == 0, "mutation %zu/%zu leaked", i, v);
        }
}

static void test_load_file(void) {
    oc_image img;
    oc_error e;
    CHECK(oc_image_load(&img, "tests/data/no-such-file.ppm", NULL, NULL, &e) == OC_ERR_IO);
    CHECKF(strstr(e.message, "no-such-file.ppm") != NULL, "%s", e.message);
    if (oc_image_load(&img, "tests/data/resize/a.in.ppm", NULL, NULL, &e) != OC_OK) {
        check_fail_at(__FILE__, __LINE__, "committed fixture tests/data/resize/a.in.ppm: %s", e.message);
        return;
    }
    CHECK(img.width_px == 37 && img.height_px == 23);
    oc_image_free(&img);
}

/* ---- the embedder's view ---------------------------------------------------------------------------- */

static void test_wrap_rgb8(void) {
    uint8_t px[2 * 16];
    for (int i = 0; i < 32; i++) px[i] = (uint8_t)i;
    oc_image v;
    oc_error e;
    REQUIRE(oc_image_wrap_rgb8(&v, px, 4, 2, 16, NULL, &e) == OC_OK);
    CHECK(v.rgb == px && v.alloc_bytes == 0 && v.stride_bytes == 16);
    CHECK(pixel_is(&v, 1, 1, 19, 20, 21));
    oc_image_free(&v);   /* a view frees nothing */
    CHECK(px[0] == 0);
    CHECK(oc_image_wrap_rgb8(&v, px, 6, 2, 16, NULL, &e) == OC_ERR_INVALID);
    CHECKF(strcmp(e.message, "image: stride 16 bytes is shorter than a row of 6 RGB pixels") == 0, "%s", e.message);
    CHECK(oc_image_wrap_rgb8(&v, px, 0, 2, 16, NULL, &e) == OC_ERR_INVALID);
    CHECK(oc_image_wrap_rgb8(&v, px, 2, -1, 16, NULL, &e) == OC_ERR_INVALID);
    CHECK(oc_image_wrap_rgb8(&v, NULL, 2, 2, 16, NULL, &e) == OC_ERR_INVALID);
    CHECK(oc_image_wrap_rgb8(&v, px, 20000, 1, 60000, NULL, &e) == OC_ERR_RANGE);
    CHECK(oc_image_wrap_rgb8(&v, px, 5, 1, 15, NULL, &e) == OC_OK);   /* tight stride */
    CHECK(oc_image_wrap_rgb8(&v, px, 1, 2, SIZE_MAX, NULL, &e) == OC_ERR_RANGE);
}

/* ---- JPEG ------------------------------------------------------------------------------------------- */

#if OC_HAVE_LIBJPEG
/* Encode w x h pixels with libjpeg (quality 100, no chroma subsampling) into a malloc'ed buffer. */
static unsigned char *encode_jpeg(const uint8_t *px, int w, int h, int components, J_COLOR_SPACE cs,
                                  int progressive, unsigned long *n_out) {
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr em;
    unsigned char *buf = NULL;
    ci.err = jpeg_std_error(&em);
    jpeg_create_compress(&ci);
    jpeg_mem_dest(&ci, &buf, n_out);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = components;
    ci.in_color_space = cs;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 100, TRUE);
    for (int i = 0; i < ci.num_components; i++) ci.comp_info[i].h_samp_factor = ci.comp_info[i].v_samp_factor = 1;
    if (progressive) jpeg_simple_progression(&ci);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)ci.next_scanline * (size_t)w * (size_t)components);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    return buf;
}

static void smooth_pattern(uint8_t *px, int w, int h, int components) {
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < components; c++)
                px[((size_t)y * w + x) * components + c] = (uint8_t)(40 + 4 * x + 3 * y + 30 * c);
}
#endif

static void test_jpeg(void) {
#if !OC_HAVE_LIBJPEG
    oc_image img;
    oc_error e;
    static const uint8_t soi[] = { 0xff, 0xd8, 0xff, 0xe0, 0, 0 };
    CHECK(oc_image_decode(&img, soi, sizeof soi, NULL, NULL, &e) == OC_ERR_UNSUPPORTED);
    CHECK(strcmp(e.message, "this build has no JPEG support (configure found no libjpeg)") == 0);
    check_skip("built without libjpeg (the OC_ERR_UNSUPPORTED path was checked)");
#else
    enum { W = 24, H = 16 };
    uint8_t px[W * H * 3];
    smooth_pattern(px, W, H, 3);
    for (int progressive = 0; progressive <= 1; progressive++) {
        unsigned long n = 0;
        unsigned char *jpg = encode_jpeg(px, W, H, 3, JCS_RGB, progressive, &n);
        REQUIRE(jpg && n > 100);
        check_alloc c = { 0 };
        oc_allocator a = { check_alloc_fn, &c };
        oc_image img;
        oc_error e;
        REQUIRE(oc_image_decode(&img, jpg, n, NULL, &a, &e) == OC_OK);
        CHECK(img.width_px == W && img.height_px == H);
        int max_diff = 0;
        for (int i = 0; i < W * H * 3; i++) {
            int d = abs((int)img.rgb[i] - (int)px[i]);
            if (d > max_diff) max_diff = d;
        }
        CHECKF(max_diff <= 3, "quality-100 4:4:4 JPEG differs by %d", max_diff);
        oc_image_free(&img);

        /* every truncation is refused (or, for cuts inside trailing bytes, decodes) without leaks */
        int n_refused = 0;
        for (unsigned long cut = 0; cut < n; cut++) {
            oc_status st = oc_image_decode(&img, jpg, cut, NULL, &a, &e);
            if (st == OC_OK) oc_image_free(&img);
            else n_refused++;
            CHECKF(c.n_live == 0, "cut %lu leaked", cut);
        }
        CHECKF(n_refused >= (int)n - 2, "only %d of %lu truncations refused", n_refused, n);
        REQUIRE(oc_image_decode(&img, jpg, n - 200, NULL, &a, &e) != OC_OK);
        CHECKF(strcmp(e.message, "jpeg: data ends early (truncated file)") == 0, "%s", e.message);

        /* limits are checked from the header, before decoding */
        oc_image_limits lim = { 16, 16, 1000, 0 };
        CHECK(oc_image_decode(&img, jpg, n, &lim, &a, &e) == OC_ERR_RANGE);
        CHECKF(strcmp(e.message, "jpeg: image: size 24x16 exceeds the limit 16x16") == 0, "%s", e.message);
        /* damage the entropy-coded data: an error or a decoded image, never a crash or leak */
        for (unsigned long i = n / 2; i < n - 2; i += 7) {
            unsigned char saved = jpg[i];
            jpg[i] ^= 0x5a;
            if (oc_image_decode(&img, jpg, n, NULL, &a, &e) == OC_OK) oc_image_free(&img);
            jpg[i] = saved;
        }
        CHECK(c.n_live == 0);
        free(jpg);
    }

    /* greyscale becomes RGB with equal channels */
    uint8_t grey[W * H];
    smooth_pattern(grey, W, H, 1);
    unsigned long n = 0;
    unsigned char *jpg = encode_jpeg(grey, W, H, 1, JCS_GRAYSCALE, 0, &n);
    oc_image img;
    oc_error e;
    REQUIRE(oc_image_decode(&img, jpg, n, NULL, NULL, &e) == OC_OK);
    int ok = 1;
    for (int i = 0; i < W * H; i++)
        ok &= img.rgb[3 * i] == img.rgb[3 * i + 1] && img.rgb[3 * i] == img.rgb[3 * i + 2] &&
              abs((int)img.rgb[3 * i] - (int)grey[i]) <= 2;
    CHECK(ok);
    oc_image_free(&img);
    free(jpg);

    /* CMYK is refused with its own message */
    uint8_t cmyk[W * H * 4];
    smooth_pattern(cmyk, W, H, 4);
    jpg = encode_jpeg(cmyk, W, H, 4, JCS_CMYK, 0, &n);
    CHECK(oc_image_decode(&img, jpg, n, NULL, NULL, &e) == OC_ERR_UNSUPPORTED);
    CHECKF(strcmp(e.message, "jpeg: CMYK images are not supported") == 0, "%s", e.message);
    free(jpg);

    /* a bare SOI followed by garbage */
    static const uint8_t junk[] = { 0xff, 0xd8, 0xff, 0x00, 1, 2, 3, 4, 5, 6, 7, 8 };
    CHECK(oc_image_decode(&img, junk, sizeof junk, NULL, NULL, &e) == OC_ERR_FORMAT);
    CHECKF(strncmp(e.message, "jpeg: ", 6) == 0, "%s", e.message);
#endif
}

/* ---- PNG -------------------------------------------------------------------------------------------- */

#if OC_HAVE_LIBPNG
/* Encode with libpng's simplified writer into a malloc'ed buffer. */
static void *encode_png(const void *px, int w, int h, png_uint_32 format, size_t *n_out) {
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = format;
    png_alloc_size_t n = 0;
    if (!png_image_write_to_memory(&im, NULL, &n, 0, px, 0, NULL)) return NULL;
    void *buf = malloc(n);
    if (!buf || !png_image_write_to_memory(&im, buf, &n, 0, px, 0, NULL)) {
        free(buf);
        return NULL;
    }
    *n_out = n;
    return buf;
}
#endif

static void test_png(void) {
#if !OC_HAVE_LIBPNG
    oc_image img;
    oc_error e;
    static const uint8_t sig[] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
    CHECK(oc_image_decode(&img, sig, sizeof sig, NULL, NULL, &e) == OC_ERR_UNSUPPORTED);
    CHECK(strcmp(e.message, "this build has no PNG support (configure found no libpng)") == 0);
    check_skip("built without libpng (the OC_ERR_UNSUPPORTED path was checked)");
#else
    enum { W = 13, H = 7 };
    uint8_t px[W * H * 4];
    for (int i = 0; i < W * H * 4; i++) px[i] = (uint8_t)(i * 37 + 11);
    check_alloc c = { 0 };
    oc_allocator a = { check_alloc_fn, &c };
    oc_image img;
    oc_error e;

    /* RGB: lossless */
    size_t n = 0;
    uint8_t *png = encode_png(px, W, H, PNG_FORMAT_RGB, &n);
    REQUIRE(png);
    REQUIRE(oc_image_decode(&img, png, n, NULL, &a, &e) == OC_OK);
    CHECK(img.width_px == W && img.height_px == H);
    CHECK(memcmp(img.rgb, px, W * H * 3) == 0);
    oc_image_free(&img);
    int n_refused = 0;
    for (size_t cut = 0; cut < n; cut++) {
        if (oc_image_decode(&img, png, cut, NULL, &a, &e) == OC_OK) oc_image_free(&img);
        else n_refused++;
        CHECKF(c.n_live == 0, "cut %zu leaked", cut);
    }
    CHECKF(n_refused == (int)n, "%d of %zu truncations refused", n_refused, n);
    CHECK(oc_image_decode(&img, png, n - 1, NULL, &a, &e) == OC_ERR_FORMAT);
    CHECKF(strcmp(e.message, "png: data ends early (truncated file)") == 0, "%s", e.message);
    size_t idat = 8;
    while (idat + 8 < n && memcmp(png + idat + 4, "IDAT", 4) != 0) idat += 12 + ((size_t)png[idat] << 24 | (size_t)png[idat + 1] << 16 | (size_t)png[idat + 2] << 8 | png[idat + 3]);
    REQUIRE(idat + 12 < n);
    png[idat + 10] ^= 1;   /* a byte of compressed pixels */
    CHECK(oc_image_decode(&img, png, n, NULL, &a, &e) == OC_ERR_FORMAT);
    CHECKF(strncmp(e.message, "png: IDAT: ", 11) == 0, "%s", e.message);   /* zlib or CRC complaint */
    png[idat + 10] ^= 1;
    oc_image_limits lim = { 100, 100, 50, 0 };
    CHECK(oc_image_decode(&img, png, n, &lim, &a, &e) == OC_ERR_RANGE);
    CHECKF(strcmp(e.message, "png: image: size 13x7 exceeds the limit of 50 pixels") == 0, "%s", e.message);
    free(png);

    /* RGBA: composited onto white exactly as Pillow's alpha_composite does (values checked
     * against Pillow 9.4 alpha_composite on these very pixels) */
    static const uint8_t rgba[] = { 0, 200, 10, 128, 200, 10, 0, 77, 10, 0, 200, 1, 1, 2, 3, 0, 9, 8, 7, 255 };
    png = encode_png(rgba, 5, 1, PNG_FORMAT_RGBA, &n);
    REQUIRE(png);
    REQUIRE(oc_image_decode(&img, png, n, NULL, &a, &e) == OC_OK);
    CHECK(pixel_is(&img, 0, 0, 127, 227, 132));
    CHECK(pixel_is(&img, 1, 0, 238, 181, 178));
    CHECK(pixel_is(&img, 2, 0, 254, 254, 255));
    CHECK(pixel_is(&img, 3, 0, 255, 255, 255));
    CHECK(pixel_is(&img, 4, 0, 9, 8, 7));
    oc_image_free(&img);
    free(png);

    /* grey (8 and 16 bit): replicated to RGB; 16-bit keeps the high byte as Pillow does */
    static const uint8_t g8[] = { 0, 17, 255 };
    png = encode_png(g8, 3, 1, PNG_FORMAT_GRAY, &n);
    REQUIRE(png && oc_image_decode(&img, png, n, NULL, &a, &e) == OC_OK);
    CHECK(pixel_is(&img, 0, 0, 0, 0, 0) && pixel_is(&img, 1, 0, 17, 17, 17) && pixel_is(&img, 2, 0, 255, 255, 255));
    oc_image_free(&img);
    free(png);
    static const uint16_t g16[] = { 0, 0x1234, 0xffff };
    png = encode_png(g16, 3, 1, PNG_FORMAT_LINEAR_Y, &n);
    REQUIRE(png && oc_image_decode(&img, png, n, NULL, &a, &e) == OC_OK);
    CHECK(pixel_is(&img, 0, 0, 0, 0, 0) && pixel_is(&img, 1, 0, 0x12, 0x12, 0x12) && pixel_is(&img, 2, 0, 255, 255, 255));
    oc_image_free(&img);
    free(png);
    CHECK(c.n_live == 0);
#endif
}

/* Issue 21 finding 2 (decompression bombs): with reduce_to_pixels, a JPEG over the pixel budget is
 * decoded by libjpeg's DCT scaling, and toward the target size even when it fits; a PNG over the
 * budget is averaged over f x f blocks as its rows stream in (the pixels of the full decode, block
 * means rounded). Without reduce_to_pixels both are refused as before. */
static void test_reduced_decoding(void) {
#if OC_HAVE_LIBJPEG
    {
        enum { W = 64, H = 48 };
        static uint8_t px[W * H * 3];
        smooth_pattern(px, W, H, 3);
        unsigned long n = 0;
        unsigned char *jpg = encode_jpeg(px, W, H, 3, JCS_RGB, 0, &n);
        REQUIRE(jpg);
        check_alloc c = { 0 };
        oc_allocator a = { check_alloc_fn, &c };
        oc_image full, img;
        oc_error e;
        REQUIRE(oc_image_decode(&full, jpg, n, NULL, &a, &e) == OC_OK);
        oc_image_limits lim = { 4096, 4096, 1000, 1 };   /* 3072 px: 1/2 fits, 1/8 keeps 1 px */
        REQUIREF(oc_image_decode(&img, jpg, n, &lim, &a, &e) == OC_OK, "%s", e.message);
        CHECKF(img.width_px == 8 && img.height_px == 6, "%dx%d", img.width_px, img.height_px);
        oc_image_free(&img);
        lim.reduce_to_pixels = 700;   /* 1/2 (768 px) keeps 700, 1/4 (192) would not */
        REQUIRE(oc_image_decode(&img, jpg, n, &lim, &a, &e) == OC_OK);
        CHECKF(img.width_px == 32 && img.height_px == 24, "%dx%d", img.width_px, img.height_px);
        /* each pixel is about the mean of its 2 x 2 block (an IDCT of the low frequencies) */
        int worst = 0;
        for (int y = 0; y < 24; y++)
            for (int x = 0; x < 32; x++)
                for (int ch = 0; ch < 3; ch++) {
                    int sum = 0;
                    for (int k = 0; k < 4; k++)
                        sum += full.rgb[(size_t)(2 * y + k / 2) * full.stride_bytes + 3 * (size_t)(2 * x + k % 2) + (size_t)ch];
                    int d = abs(img.rgb[(size_t)y * img.stride_bytes + 3 * (size_t)x + (size_t)ch] - (sum + 2) / 4);
                    if (d > worst) worst = d;
                }
        CHECKF(worst <= 3, "DCT-scaled pixels differ from the block means by up to %d", worst);
        oc_image_free(&img);
        lim.reduce_to_pixels = 0;
        CHECK(oc_image_decode(&img, jpg, n, &lim, &a, &e) == OC_ERR_RANGE);
        lim.reduce_to_pixels = 1;
        lim.max_pixels = 5;   /* even 1/8 (8 x 6) is too many */
        CHECK(oc_image_decode(&img, jpg, n, &lim, &a, &e) == OC_ERR_RANGE);
        CHECKF(strstr(e.message, "even at 1/8 scale") != NULL, "%s", e.message);
        oc_image_free(&full);
        CHECK(c.n_live == 0);
        free(jpg);
    }
#endif
#if OC_HAVE_LIBPNG
    for (int alpha = 0; alpha <= 1; alpha++) {
        enum { W = 13, H = 7 };
        uint8_t px[W * H * 4];
        for (int i = 0; i < W * H * 4; i++) px[i] = (uint8_t)(i * 37 + 11);
        size_t n = 0;
        void *png = encode_png(px, W, H, alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB, &n);
        REQUIRE(png);
        check_alloc c = { 0 };
        oc_allocator a = { check_alloc_fn, &c };
        oc_image full, img;
        oc_error e;
        REQUIRE(oc_image_decode(&full, png, n, NULL, &a, &e) == OC_OK);
        oc_image_limits lim = { 100, 100, 20, 1 };   /* 91 px: 2 x 2 gives 28, 3 x 3 gives 15 */
        REQUIREF(oc_image_decode(&img, png, n, &lim, &a, &e) == OC_OK, "%s", e.message);
        REQUIRE(img.width_px == 5 && img.height_px == 3);
        int bad = 0;
        for (int y = 0; y < 3; y++)
            for (int x = 0; x < 5; x++)
                for (int ch = 0; ch < 3; ch++) {
                    int sum = 0, cnt = 0;
                    for (int yy = 3 * y; yy < OC_MIN(3 * y + 3, H); yy++)
                        for (int xx = 3 * x; xx < OC_MIN(3 * x + 3, W); xx++, cnt++)
                            sum += full.rgb[(size_t)yy * full.stride_bytes + 3 * (size_t)xx + (size_t)ch];
                    bad += img.rgb[(size_t)y * img.stride_bytes + 3 * (size_t)x + (size_t)ch] != (sum + cnt / 2) / cnt;
                }
        CHECKF(bad == 0, "alpha %d: %d reduced samples are not the block means", alpha, bad);
        oc_image_free(&img);
        oc_image_free(&full);
        lim.reduce_to_pixels = 0;
        CHECK(oc_image_decode(&img, png, n, &lim, &a, &e) == OC_ERR_RANGE);
        CHECK(c.n_live == 0);
        free(png);
    }
#endif
}

/* ---- progressive JPEG: the coefficient buffer ------------------------------------------------------ */

#if OC_HAVE_LIBJPEG
typedef struct peak_alloc { size_t live, peak; long n_live; } peak_alloc;
static void *peak_fn(void *user, void *ptr, size_t old_bytes, size_t new_bytes) {
    peak_alloc *c = user;
    c->live = c->live - old_bytes + new_bytes;
    c->n_live += (old_bytes == 0 && new_bytes > 0) - (old_bytes > 0 && new_bytes == 0);
    if (c->live > c->peak) c->peak = c->live;
    if (!new_bytes) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, new_bytes);
}
#endif

/* A progressive file keeps every DCT coefficient of the whole image while it decodes, whatever the
 * output scale. Before: a 2048 x 2048 progressive file (12 MiB of coefficients through libjpeg's
 * malloc) was decoded at 1/8 under a 256 x 256 budget whose stated bound is 1.3 MiB; now it is
 * refused from its header, and a small progressive file takes its coefficients through our
 * allocator, within oc_image_decode_bytes. */
static void test_progressive_coefficients(void) {
#if !OC_HAVE_LIBJPEG
    check_skip("built without libjpeg");
#else
    const char *bomb = "build/tests/image_bomb.jpg", *small = "build/tests/image_prog.jpg",
               *base = "build/tests/image_base.jpg";
    REQUIRE(check_write_jpeg_bomb(bomb, 2048, 2048, 1));
    REQUIRE(check_write_jpeg_bomb(small, 320, 240, 1));
    REQUIRE(check_write_jpeg_bomb(base, 2048, 2048, 0));
    oc_image_limits lim = { 16384, 16384, 256 * 256, 128 * 128 };
    peak_alloc c = { 0, 0, 0 };
    oc_allocator a = { peak_fn, &c };
    oc_image img;
    oc_error e;
    oc_status st = oc_image_load(&img, bomb, &lim, &a, &e);
    CHECKF(st == OC_ERR_RANGE && strstr(e.message, "progressive 2048x2048") && strstr(e.message, "coefficients"),
           "status %d: %s", (int)st, e.message);
    if (st == OC_OK) oc_image_free(&img);
    CHECKF(c.peak < 65536, "the refused bomb took %zu bytes", c.peak);
    /* the same pixels, baseline: decoded at 1/8 by DCT scaling, no coefficient buffer */
    REQUIREF(oc_image_load(&img, base, &lim, &a, &e) == OC_OK, "%s", e.message);
    CHECK(img.width_px == 256 && img.height_px == 256);
    oc_image_free(&img);
    /* 320 x 240 4:2:0: 60 row pointers (480 bytes, 512 with the blocks' alignment) + 1800 blocks of
     * 128 bytes = 230912 bytes <= 4 x 65536 */
    c.peak = 0;
    REQUIREF(oc_image_load(&img, small, &lim, &a, &e) == OC_OK, "%s", e.message);
    CHECKF(img.width_px == 160 && img.height_px == 120 && pixel_is(&img, 17, 33, 128, 128, 128), "%dx%d",
           img.width_px, img.height_px);   /* 76800 pixels: decoded at 1/2 */
    oc_image_free(&img);
    CHECKF(c.peak >= 230912 && c.peak <= oc_image_decode_bytes(&lim), "peak %zu, bound %zu", c.peak,
           oc_image_decode_bytes(&lim));
    CHECK(c.n_live == 0 && c.live == 0);
    /* every allocation failure on that path is reported and frees what it took */
    for (long k = 1; k <= 4; k++) {
        check_alloc f = { 0 };
        f.fail_at = k;
        oc_allocator fa = { check_alloc_fn, &f };
        st = oc_image_load(&img, small, &lim, &fa, &e);
        if (st == OC_OK) oc_image_free(&img);
        else CHECKF(st == OC_ERR_NOMEM, "fail at %ld: %d %s", k, (int)st, e.message);
        CHECKF(f.n_live == 0, "fail at %ld leaked", k);
    }
    /* a budget one block too small refuses the same file */
    lim.max_pixels = 230912 / 4 - 1;
    st = oc_image_load(&img, small, &lim, &a, &e);
    CHECKF(st == OC_ERR_RANGE && strstr(e.message, "230912 bytes of coefficients"), "status %d: %s", (int)st,
           e.message);
    /* 8 x 24 4:4:4: 3 block rows a component, 9 row pointers: the blocks must still start aligned
     * (libjpeg-turbo's SIMD IDCT loads them with movdqa; fuzz_ask_files found the fault) */
    static uint8_t tall[8 * 24 * 3];
    smooth_pattern(tall, 8, 24, 3);
    unsigned long n_tall = 0;
    unsigned char *jt = encode_jpeg(tall, 8, 24, 3, JCS_RGB, 1, &n_tall);
    REQUIRE(jt);
    REQUIREF(oc_image_decode(&img, jt, n_tall, NULL, &a, &e) == OC_OK, "%s", e.message);
    int worst = 0;
    for (int i = 0; i < 8 * 24 * 3; i++) worst = OC_MAX(worst, abs((int)img.rgb[i] - (int)tall[i]));
    CHECKF(img.width_px == 8 && img.height_px == 24 && worst <= 3, "%dx%d, differs by %d", img.width_px,
           img.height_px, worst);
    oc_image_free(&img);
    /* the file fuzz_ask_files found: 16x16 progressive, Y sampled 2x3; with the blocks 8 bytes off
     * their alignment, libjpeg-turbo's IDCT faulted (SIGSEGV) on it */
    REQUIREF(oc_image_load(&img, "tests/fuzz/corpus/fuzz_jpeg/regress-align-2x3.jpg", NULL, NULL, &e) == OC_OK, "%s",
             e.message);
    CHECK(img.width_px == 16 && img.height_px == 16);
    oc_image_free(&img);
    oc_image_limits half = { 16384, 16384, 1000, 48 };   /* decoded at 1/2: libjpeg's 4x4 IDCT */
    REQUIREF(oc_image_decode(&img, jt, n_tall, &half, &a, &e) == OC_OK, "%s", e.message);
    CHECKF(img.width_px == 4 && img.height_px == 12, "%dx%d", img.width_px, img.height_px);
    oc_image_free(&img);
    free(jt);
    remove(bomb);
    remove(small);
    remove(base);
#endif
}

int main(void) {
    CHECK_RUN(test_detect);
    CHECK_RUN(test_pnm_p6_basic);
    CHECK_RUN(test_pnm_whitespace_and_comments);
    CHECK_RUN(test_pnm_plain_and_grey);
    CHECK_RUN(test_pnm_maxval_scaling);
    CHECK_RUN(test_pnm_errors);
    CHECK_RUN(test_pnm_limits);
    CHECK_RUN(test_pnm_truncation_every_byte);
    CHECK_RUN(test_pnm_mutations);
    CHECK_RUN(test_load_file);
    CHECK_RUN(test_wrap_rgb8);
    CHECK_RUN(test_jpeg);
    CHECK_RUN(test_png);
    CHECK_RUN(test_reduced_decoding);
    CHECK_RUN(test_progressive_coefficients);
    return check_finish();
}
