/* png_bomb.c: check_write_png_bomb (check.h): a decompression bomb for the tests that prove image
 * memory stays in its budget (test_harden, test_memory). */
#include "check.h"
#include "config.h"

#include <stdint.h>
#if OC_HAVE_LIBPNG
#include <png.h>
#endif

int check_write_png_bomb(const char *path, unsigned width_px, unsigned height_px) {
#if !OC_HAVE_LIBPNG
    (void)path;
    (void)width_px;
    (void)height_px;
    return 0;
#else
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    uint8_t *row = calloc(width_px, 3);
    int ok = png && info && row && !setjmp(png_jmpbuf(png));
    if (ok) {
        png_init_io(png, f);
        png_set_IHDR(png, info, width_px, height_px, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                     PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
        png_write_info(png, info);
        for (unsigned y = 0; y < height_px; y++) png_write_row(png, row);
        png_write_end(png, NULL);
    }
    png_destroy_write_struct(&png, info ? &info : NULL);
    free(row);
    return fclose(f) == 0 && ok;
#endif
}
