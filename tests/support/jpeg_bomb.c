/* jpeg_bomb.c: check_write_jpeg_bomb (check.h): a progressive JPEG decompression bomb for the tests
 * that prove image memory stays in its budget (test_image, test_harden, the CLI scripts). A flat
 * grey image compresses to almost nothing (EOB runs), yet a decoder keeps every DCT coefficient
 * of a progressive file until its last scan: 16384 x 16384 4:2:0 is a 3 MB file and 768 MiB of
 * coefficients. Written by libjpeg at run time (jpeg_simple_progression), never committed. */
#include "check.h"
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#if OC_HAVE_LIBJPEG
#include <jpeglib.h>
#endif

int check_write_jpeg_bomb(const char *path, unsigned width_px, unsigned height_px, int progressive) {
#if !OC_HAVE_LIBJPEG
    (void)path;
    (void)width_px;
    (void)height_px;
    (void)progressive;
    return 0;
#else
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    uint8_t *row = malloc((size_t)width_px * 3);
    if (!row) {
        fclose(f);
        return 0;
    }
    for (size_t i = 0; i < (size_t)width_px * 3; i++) row[i] = 128;
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr em;
    ci.err = jpeg_std_error(&em);   /* libjpeg's default error_exit ends a test that cannot write it */
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = width_px;
    ci.image_height = height_px;
    ci.input_components = 3;
    ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&ci);   /* YCbCr 4:2:0 */
    jpeg_set_quality(&ci, 75, TRUE);
    if (progressive) jpeg_simple_progression(&ci);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW r = row;
        jpeg_write_scanlines(&ci, &r, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    free(row);
    return fclose(f) == 0;
#endif
}
