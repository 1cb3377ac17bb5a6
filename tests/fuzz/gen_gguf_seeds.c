/* gen_gguf_seeds.c: writes the seed files of fuzz_gguf (tests/fuzz/corpus/fuzz_gguf/) with the
 * library's own writer. Not part of the build; rerun by hand when the seeds should change:
 *   make && cc -Iinclude -Isrc -o build/gen_gguf_seeds tests/fuzz/gen_gguf_seeds.c libocellus.a -lm -pthread
 *   ./build/gen_gguf_seeds tests/fuzz/corpus/fuzz_gguf
 * Every seed is a few hundred bytes to a few KB. */
#include "ocellus.h"
#include "ocellus_gguf.h"

#include <stdio.h>
#include <string.h>

static int check(oc_status s, const oc_error *e) {
    if (s != OC_OK) fprintf(stderr, "gen_gguf_seeds: %s\n", e->message);
    return s == OC_OK;
}

/* A tokenizer-like file: string arrays, an i32 array, u32 ids, a bool. */
static int seed_vocab(const char *path, oc_error *e) {
    oc_gguf_writer *w;
    if (!check(oc_gguf_writer_open(&w, NULL, e), e)) return 0;
    const char *toks[] = { "!", "\"", "a", "\xc4\xa0the", "<|endoftext|>", "", "\xe4\xbd\xa0" };
    const char *merges[] = { "\xc4\xa0 t", "h e", "a b" };
    int32_t types[] = { 1, 1, 1, 1, 3, 1, 1 };
    int ok = check(oc_gguf_writer_add_str(w, "general.architecture", "qwen2", e), e) &&
             check(oc_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2", e), e) &&
             check(oc_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, 7, e), e) &&
             check(oc_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", OC_GGUF_I32, types, 7, e), e) &&
             check(oc_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, 3, e), e) &&
             check(oc_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 4, e), e) &&
             check(oc_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", 0, e), e) &&
             check(oc_gguf_writer_write(w, path, e), e);
    oc_gguf_writer_close(w);
    return ok;
}

/* Every scalar and array type, alignment 64, no tensors. */
static int seed_types(const char *path, oc_error *e) {
    oc_gguf_writer *w;
    if (!check(oc_gguf_writer_open(&w, NULL, e), e)) return 0;
    unsigned char raw[64];
    for (int i = 0; i < 64; i++) raw[i] = (unsigned char)(i * 37 + 11);
    int ok = check(oc_gguf_writer_set_alignment(w, 64, e), e);
    for (int t = 0; ok && t <= 12; t++) {
        if (t == OC_GGUF_STRING || t == OC_GGUF_ARRAY) continue;
        char key[16];
        snprintf(key, sizeof key, "s.%d", t);
        ok = check(oc_gguf_writer_add_scalar(w, key, (oc_gguf_type)t, raw, e), e);
        snprintf(key, sizeof key, "a.%d", t);
        if (ok) ok = check(oc_gguf_writer_add_arr(w, key, (oc_gguf_type)t, raw, 3, e), e);
    }
    ok = ok && check(oc_gguf_writer_add_str(w, "s.str", "value", e), e) && check(oc_gguf_writer_write(w, path, e), e);
    oc_gguf_writer_close(w);
    return ok;
}

/* Small tensors of several types and shapes. */
static int seed_tensors(const char *path, oc_error *e) {
    oc_gguf_writer *w;
    if (!check(oc_gguf_writer_open(&w, NULL, e), e)) return 0;
    static unsigned char data[2048];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 13);
    int64_t ne_f32[2] = { 4, 3 }, ne_f16[3] = { 5, 1, 2 }, ne_q8[1] = { 64 }, ne_q4k[2] = { 256, 2 };
    int64_t ne_bf16[4] = { 2, 2, 2, 2 }, ne_zero[2] = { 32, 0 };
    int ok = check(oc_gguf_writer_add_str(w, "general.architecture", "qwen2vl", e), e) &&
             check(oc_gguf_writer_add_u32(w, "qwen2vl.block_count", 1, e), e) &&
             check(oc_gguf_writer_add_f32(w, "qwen2vl.rope.freq_base", 1e6f, e), e) &&
             check(oc_gguf_writer_add_tensor(w, "output_norm.weight", OC_DTYPE_F32, 2, ne_f32, data, e), e) &&
             check(oc_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", OC_DTYPE_F16, 3, ne_f16, data, e), e) &&
             check(oc_gguf_writer_add_tensor(w, "blk.0.ffn_up.weight", OC_DTYPE_Q8_0, 1, ne_q8, data, e), e) &&
             check(oc_gguf_writer_add_tensor(w, "blk.0.ffn_down.weight", OC_DTYPE_Q4_K, 2, ne_q4k, data, e), e) &&
             check(oc_gguf_writer_add_tensor(w, "v.patch_embd.weight", OC_DTYPE_BF16, 4, ne_bf16, data, e), e) &&
             check(oc_gguf_writer_add_tensor(w, "empty", OC_DTYPE_Q8_0, 2, ne_zero, NULL, e), e) &&
             check(oc_gguf_writer_write(w, path, e), e);
    oc_gguf_writer_close(w);
    return ok;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: gen_gguf_seeds DIR\n"); return 2; }
    char path[1024];
    oc_error e;
    int ok = 1;
    snprintf(path, sizeof path, "%s/vocab.gguf", argv[1]);
    ok &= seed_vocab(path, &e);
    snprintf(path, sizeof path, "%s/types.gguf", argv[1]);
    ok &= seed_types(path, &e);
    snprintf(path, sizeof path, "%s/tensors.gguf", argv[1]);
    ok &= seed_tensors(path, &e);
    /* a v2 copy of the tensors seed: only the version field differs */
    FILE *in = fopen(path, "rb");
    static unsigned char b[16384];
    size_t n = in ? fread(b, 1, sizeof b, in) : 0;
    if (in) fclose(in);
    snprintf(path, sizeof path, "%s/tensors-v2.gguf", argv[1]);
    FILE *out = n > 8 ? fopen(path, "wb") : NULL;
    if (out) { b[4] = 2; fwrite(b, 1, n, out); fclose(out); } else ok = 0;
    return ok ? 0 : 1;
}
