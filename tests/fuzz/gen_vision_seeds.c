/* gen_vision_seeds.c: writes the seed files of fuzz_vision (tests/fuzz/corpus/fuzz_vision/): tiny
 * mmproj files of each kind (docs/formats.md §2b names and keys; patch size 2 keeps them a few KB).
 * Not part of the build; rerun by hand when the seeds should change:
 *   make && cc -Iinclude -Isrc -o build/gen_vision_seeds tests/fuzz/gen_vision_seeds.c libocellus.a -lm -pthread
 *   ./build/gen_vision_seeds tests/fuzz/corpus/fuzz_vision */
#include "ocellus.h"
#include "ocellus_gguf.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { D = 8, HEADS = 2, FFN = 12, PROJ = 8, PATCH = 2 };
static float f32buf[4 * D * 4 * D];
static uint16_t f16buf[4 * D * 4 * D];

static int ok(oc_status s, const oc_error *e) {
    if (s) fprintf(stderr, "gen_vision_seeds: %s\n", e->message);
    return s == OC_OK;
}

static int tensor(oc_gguf_writer *w, const char *name, int n_dims, int64_t ne0, int64_t ne1, oc_error *e) {
    int64_t ne[4] = { ne0, ne1, 1, 1 };
    return ok(oc_gguf_writer_add_tensor(w, name, n_dims == 1 ? OC_DTYPE_F32 : OC_DTYPE_F16, (uint32_t)n_dims, ne,
                                        n_dims == 1 ? (const void *)f32buf : (const void *)f16buf, e), e);
}

/* kind 0: qwen2vl, 1: qwen2.5vl, 2: legacy qwen2vl (swapped fc1/fc2 names, dummy position_embd) */
static int seed(const char *path, int kind, int n_layers, oc_error *e) {
    oc_gguf_writer *w;
    if (!ok(oc_gguf_writer_open(&w, NULL, e), e)) return 0;
    int rms = kind == 1, r = 1;
    char n[64];
    r = r && ok(oc_gguf_writer_add_str(w, "general.architecture", "clip", e), e);
    r = r && ok(oc_gguf_writer_add_str(w, "clip.projector_type", rms ? "qwen2.5vl_merger" : "qwen2vl_merger", e), e);
    r = r && ok(oc_gguf_writer_add_u32(w, "clip.vision.patch_size", PATCH, e), e);
    r = r && ok(oc_gguf_writer_add_u32(w, "clip.vision.embedding_length", D, e), e);
    r = r && ok(oc_gguf_writer_add_u32(w, "clip.vision.block_count", (uint32_t)n_layers, e), e);
    r = r && ok(oc_gguf_writer_add_u32(w, "clip.vision.attention.head_count", HEADS, e), e);
    r = r && ok(oc_gguf_writer_add_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-6f, e), e);
    if (rms) {
        r = r && ok(oc_gguf_writer_add_u32(w, "clip.vision.n_wa_pattern", 2, e), e);
        r = r && ok(oc_gguf_writer_add_u32(w, "clip.vision.window_size", 8, e), e);
    }
    int64_t pne[4] = { PATCH, PATCH, 3, D };
    r = r && ok(oc_gguf_writer_add_tensor(w, "v.patch_embd.weight", OC_DTYPE_F16, 4, pne, f16buf, e), e);
    r = r && ok(oc_gguf_writer_add_tensor(w, "v.patch_embd.weight.1", OC_DTYPE_F16, 4, pne, f16buf, e), e);
    if (kind == 2) r = r && tensor(w, "v.position_embd.weight", 2, 10, 10, e);
    for (int il = 0; r && il < n_layers; il++) {
#define T(suffix, nd, a, b) (snprintf(n, sizeof n, "v.blk.%d.%s", il, suffix), tensor(w, n, nd, a, b, e))
        r = T("ln1.weight", 1, D, 1) && T("ln2.weight", 1, D, 1) && (rms || (T("ln1.bias", 1, D, 1) && T("ln2.bias", 1, D, 1))) &&
            T("attn_q.weight", 2, D, D) && T("attn_q.bias", 1, D, 1) && T("attn_k.weight", 2, D, D) && T("attn_k.bias", 1, D, 1) &&
            T("attn_v.weight", 2, D, D) && T("attn_v.bias", 1, D, 1) && T("attn_out.weight", 2, D, D) && T("attn_out.bias", 1, D, 1);
        const char *w1 = kind == 2 ? "ffn_down.weight" : "ffn_up.weight", *b1 = kind == 2 ? "ffn_down.bias" : "ffn_up.bias";
        const char *w2 = kind == 2 ? "ffn_up.weight" : "ffn_down.weight", *b2 = kind == 2 ? "ffn_up.bias" : "ffn_down.bias";
        r = r && T(w1, 2, D, FFN) && T(b1, 1, FFN, 1) && T(w2, 2, FFN, D) && T(b2, 1, D, 1);
        if (rms) r = r && T("ffn_gate.weight", 2, D, FFN) && T("ffn_gate.bias", 1, FFN, 1);
#undef T
    }
    r = r && tensor(w, "v.post_ln.weight", 1, D, 1, e) && (rms || tensor(w, "v.post_ln.bias", 1, D, 1, e));
    r = r && tensor(w, "mm.0.weight", 2, 4 * D, 4 * D, e) && tensor(w, "mm.0.bias", 1, 4 * D, 1, e);
    r = r && tensor(w, "mm.2.weight", 2, 4 * D, PROJ, e) && tensor(w, "mm.2.bias", 1, PROJ, 1, e);
    r = r && ok(oc_gguf_writer_write(w, path, e), e);
    oc_gguf_writer_close(w);
    return r;
}

static uint16_t to_f16(float f) {   /* small normal values only: enough for seeds */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) < 0x38800000u) return (uint16_t)((u >> 16) & 0x8000);
    return (uint16_t)(((u >> 16) & 0x8000) | ((((u >> 23) & 0xff) - 112) << 10) | ((u >> 13) & 0x3ff));
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: gen_vision_seeds DIR\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof f32buf / sizeof f32buf[0]; i++) {
        f32buf[i] = 0.5f * sinf((float)i * 0.37f) + (i % 7 == 0 ? 1.0f : 0.0f);
        f16buf[i] = to_f16(0.3f * cosf((float)i * 0.71f));
    }
    char p[512];
    oc_error e;
    static const char *names[3] = { "qwen2vl.gguf", "qwen25vl.gguf", "qwen2vl-legacy.gguf" };
    for (int k = 0; k < 3; k++) {
        snprintf(p, sizeof p, "%s/%s", argv[1], names[k]);
        if (!seed(p, k, k == 1 ? 2 : 1, &e)) return 1;
    }
    return 0;
}
