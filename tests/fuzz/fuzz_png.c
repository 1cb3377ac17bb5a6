/* fuzz_png.c: libFuzzer target for PNG decoding through our libpng wrapper (palette, grey, 16-bit,
 * alpha compositing, interlacing). Every input is decoded twice: within a plain pixel limit, and
 * with reduce_to_pixels and a small budget, so the streaming block average (decompression bombs)
 * sees the same files. Without libpng it checks the UNSUPPORTED path. */
#include "image/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    oc_image img;
    oc_error e;
    oc_image_limits lim = { 4096, 4096, 1 << 22, 0 };
    if (oc_image_decode_png(&img, data, size, &lim, NULL, &e) == OC_OK) oc_image_free(&img);
    oc_image_limits small = { 4096, 4096, 1 + (int64_t)(size % 97), 1 };
    if (oc_image_decode_png(&img, data, size, &small, NULL, &e) == OC_OK) {
        if ((int64_t)img.width_px * img.height_px > small.max_pixels) __builtin_trap();
        oc_image_free(&img);
    }
    return 0;
}
