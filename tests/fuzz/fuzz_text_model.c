/* fuzz_text_model.c: libFuzzer target for the language-model loader on top of the GGUF reader:
 * oc_gguf_open_bytes, oc_text_model_load (keys, shapes, types of every tensor), and, when it loads,
 * one forward pass of 2 tokens through a small context, so ASan sees any weight access the shape
 * checks let through, with the kernels a context would run on this CPU (oc_isa_best). Seeds:
 * tests/fuzz/corpus/fuzz_text_model/ (the fixture text.gguf files). */
#include "core/isa.h"
#include "model/text_model.h"
#include "port.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    oc_gguf *g;
    oc_error e;
    if (oc_gguf_open_bytes(&g, data, size, NULL, &e) != OC_OK) return 0;
    oc_text_model *m;
    if (oc_text_model_load(&m, g, "fuzz", NULL, &e) == OC_OK) {
        /* bound the work: huge (but valid) shapes are skipped, not run */
        const oc_text_hparams *hp = &m->hp;
        if ((int64_t)hp->n_embd * hp->n_ff <= (1 << 22) && (int64_t)hp->n_embd * hp->n_vocab <= (1 << 22) &&
            hp->n_layers <= 8) {
            oc_text_limits lim = { 4, 2, NULL, 0 };
            oc_text_ctx *ctx;
            static oc_isa isa = OC_ISA_COUNT;
            if (isa == OC_ISA_COUNT) {
                oc_cpu_features cpu;
                oc_port_cpu_features(&cpu);
                isa = oc_isa_best(&cpu);
            }
            if (oc_text_ctx_open(&ctx, m, &lim, NULL, isa, NULL, &e) == OC_OK) {
                int32_t ids[2] = { 0, hp->n_vocab - 1 }, pos[2] = { 0, 1 };
                static float logits[1 << 16];
                oc_text_batch b;
                memset(&b, 0, sizeof b);
                b.n_tokens = 2;
                b.ids = ids;
                b.pos_t = b.pos_h = b.pos_w = pos;
                b.logits = hp->n_vocab <= (1 << 16) ? logits : NULL;
                (void)oc_text_forward(ctx, &b, NULL, &e);
                oc_text_ctx_close(ctx);
            }
        }
        oc_text_model_free(m);
    }
    oc_gguf_close(g);
    return 0;
}
