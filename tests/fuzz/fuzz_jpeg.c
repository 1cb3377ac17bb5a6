/* fuzz_jpeg.c: libFuzzer target for JPEG decoding through our libjpeg wrapper (error_exit with
 * longjmp, warnings as errors, scan limit). Without libjpeg it checks the UNSUPPORTED path. */
#include "image/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    oc_image img;
    oc_error e;
    /* progressive JPEGs buffer all coefficients: keep the area modest for the fuzzer's RSS limit */
    oc_image_limits lim = { 4096, 4096, 1 << 22, 0 };
    if (oc_image_decode_jpeg(&img, data, size, &lim, NULL, &e) == OC_OK) oc_image_free(&img);
    return 0;
}
