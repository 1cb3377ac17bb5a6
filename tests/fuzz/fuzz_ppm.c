/* fuzz_ppm.c: libFuzzer target for our PNM reader, followed by the Qwen2-VL preprocessing of
 * whatever decodes (small pixel budgets keep each run fast), so resize and patchify see odd sizes. */
#include "image/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    oc_image img;
    oc_error e;
    oc_image_limits lim = { 4096, 4096, 1 << 20, 0 };
    if (oc_image_decode_pnm(&img, data, size, &lim, NULL, &e) != OC_OK) return 0;
    oc_qwen2vl_prep_params p;
    oc_qwen2vl_prep_defaults(&p);
    p.min_pixels = 28 * 28;
    p.max_pixels = 28 * 28 * 16;
    oc_qwen2vl_pixels px;
    if (oc_qwen2vl_preprocess(&px, &img, &p, NULL, &e) == OC_OK) oc_qwen2vl_pixels_free(&px);
    oc_image_free(&img);
    return 0;
}
