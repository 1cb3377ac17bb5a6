/* fuzz_calib_data.c: libFuzzer target for a line of the items.jsonl that `ocellus calibrate --data`
 * reads: JSON, then the item checks (image names, question, answer, grid, grounding cells). */
#include "tools/calib_scenes.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    oc_json *j = NULL;
    oc_error e;
    oc_json_limits lim;
    oc_json_limits_default(&lim);
    lim.max_nodes = 1u << 16;
    if (oc_json_parse(&j, (const char *)data, size, &lim, NULL, &e) != OC_OK) return 0;
    static uint8_t cells[OC_SCENE_MAX_IMAGES * 64 * 64];
    oc_calib_data_item it;
    if (oc_calib_data_parse(j, OC_SCENE_MAX_IMAGES, cells, sizeof cells, &it, "fuzz", &e) == OC_OK) {
        size_t n = 0;
        for (int32_t k = 0; k < it.n_images; k++) n += strlen(it.images[k]);
        n += strlen(it.question) + strlen(it.answer);
        (void)n;
    }
    oc_json_free(j);
    return 0;
}
