/* fuzz_jpeg.c: libFuzzer target for JPEG decoding through our libjpeg wrapper (error_exit with
 * longjmp, warnings as errors, scan limit), at full and at reduced scale. Without libjpeg it checks
 * the UNSUPPORTED path. */
#include "image/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    oc_image img;
    oc_error e;
    /* progressive JPEGs buffer all coefficients: keep the area modest for the fuzzer's RSS limit */
    oc_image_limits lim = { 4096, 4096, 1 << 22, 0 };
    if (oc_image_decode_jpeg(&img, data, size, &lim, NULL, &e) == OC_OK) oc_image_free(&img);
    /* and at reduced scale (DCT scaling 1/2..1/8), as oc_ask decodes files */
    oc_image_limits small = { 4096, 4096, 1 + (int64_t)(size % 4099), 1 + (int64_t)(size % 61) };
    if (oc_image_decode_jpeg(&img, data, size, &small, NULL, &e) == OC_OK) {
        if ((int64_t)img.width_px * img.height_px > small.max_pixels) __builtin_trap();
        oc_image_free(&img);
    }
    return 0;
}
