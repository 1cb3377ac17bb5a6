/* fuzz_vision.c: libFuzzer target for the mmproj loader (src/model/vision_model.c) and, for models small
 * enough, one forward pass (src/model/vision_encoder.c) on a zero image of 2x2 merged tokens: every hparam the
 * loader accepts (patch and merge sizes, widths, window size) must give an encoder that stays in
 * bounds. Invariants the loader promises are checked with __builtin_trap.
 * Seeds: tests/fuzz/corpus/fuzz_vision/ (made by tests/fuzz/gen_vision_seeds.c). */
#include "model/vision_model.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    oc_gguf *g = NULL;
    oc_error e;
    if (oc_gguf_open_bytes(&g, data, size, NULL, &e) != OC_OK) return 0;
    oc_vision_model *m = NULL;
    if (oc_vision_model_load(&m, g, "fuzz", NULL, &e) == OC_OK) {
        const oc_vision_hparams *hp = oc_vision_model_hparams(m);
        if (hp->hidden != hp->n_heads * hp->head_dim || hp->head_dim % 4 || hp->ffn < 1 || hp->proj_dim < 1)
            __builtin_trap();
        int32_t mg = hp->merge_size, n = 4 * mg * mg;   /* a 2x2 grid of merged tokens */
        int64_t pd = 6LL * hp->patch_size * hp->patch_size;
        int64_t work = (int64_t)hp->n_layers * n * ((int64_t)hp->hidden * (4 * hp->hidden + 3 * hp->ffn) + pd * hp->hidden);
        if (work < 50000000) {
            oc_vision_ctx *ctx = NULL;
            float *pix = calloc((size_t)(n * pd), sizeof(float));
            float *out = malloc((size_t)(n / (mg * mg)) * (size_t)hp->proj_dim * sizeof(float));
            if (pix && out && oc_vision_ctx_open(&ctx, m, n, NULL, OC_ISA_SCALAR, NULL, &e) == OC_OK)
                if (oc_vision_encode(ctx, pix, 2 * mg, 2 * mg, NULL, out, NULL, &e) != OC_OK) __builtin_trap();
            oc_vision_ctx_close(ctx);
            free(pix);
            free(out);
        }
        oc_vision_model_free(m);
    }
    oc_gguf_close(g);
    return 0;
}
