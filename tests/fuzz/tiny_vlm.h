/* tiny_vlm.h: the tiny Qwen2-VL model the ask fuzz targets build themselves (fuzz_ask.c,
 * fuzz_ask_files.c): a 1-layer decoder 8 wide over a byte-level vocabulary of 256 bytes, 3 merges
 * and the 6 chat specials, and a 1-layer vision tower 8 wide with 2x2 patches. Static functions:
 * each target includes it once. tiny_vlm_write writes the three files under $TMPDIR (or /tmp)
 * with the process id in their names. */
#ifndef OC_FUZZ_TINY_VLM_H
#define OC_FUZZ_TINY_VLM_H

#include "ocellus.h"
#include "ocellus_gguf.h"
#include "tests/support/tiny_vocab.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char TEXT[512], CRAFTED[512], MMPROJ[512];

enum { D = 8, HEADS = 2, FF = 16, PATCH = 2, VFF = 12 };   /* one layer each; head size 4 */
#define N_SPECIAL 6
static const char *const specials[N_SPECIAL] = { "<|endoftext|>", "<|im_start|>", "<|im_end|>",
                                                 "<|vision_start|>", "<|vision_end|>", "<|image_pad|>" };
static const char *const merges[] = { "\xC4\xA0 t", "h e", "i n" };   /* "Ġ t": a space before t */
#define N_VOCAB (256 + 3 + N_SPECIAL)

static float values[4 * D * 4 * D + N_VOCAB * D];   /* every tensor reads its values from here */

static int ok(oc_status st, const oc_error *e) {
    if (st) fprintf(stderr, "tiny_vlm: %s\n", e->message);
    return st == OC_OK;
}

static int tensor(oc_gguf_writer *w, const char *name, int64_t ne0, int64_t ne1, oc_error *e) {
    int64_t ne[4] = { ne0, ne1, 1, 1 };
    return ok(oc_gguf_writer_add_tensor(w, name, OC_DTYPE_F32, ne1 > 1 ? 2 : 1, ne, values, e), e);
}

/* The decoder and its vocabulary; crafted: the specials the prompt builder places are
 * USER_DEFINED, so the tokenizer also matches them in plain text. */
static int write_text(const char *path, int crafted, oc_error *e) {
    static char bytes[256][4];
    const char *tokens[N_VOCAB];
    int32_t types[N_VOCAB];
    for (unsigned b = 0; b < 256; b++) {
        bytes[b][tiny_byte_text(b, bytes[b])] = '\0';
        tokens[b] = bytes[b];
        types[b] = 1;
    }
    tokens[256] = "\xC4\xA0t";
    tokens[257] = "he";
    tokens[258] = "in";
    for (int i = 256; i < 259; i++) types[i] = 1;
    for (int i = 0; i < N_SPECIAL; i++) {
        tokens[259 + i] = specials[i];
        types[259 + i] = crafted && i >= 2 ? 4 : 3;   /* USER_DEFINED : CONTROL */
    }
    int32_t sections[4] = { 1, 1, 0, 0 };   /* M-RoPE over the 2 rotary pairs of a 4-wide head */
    oc_gguf_writer *w;
    if (!ok(oc_gguf_writer_open(&w, NULL, e), e)) return 0;
    int r = ok(oc_gguf_writer_add_str(w, "general.architecture", "qwen2vl", e), e) &&
            ok(oc_gguf_writer_add_u32(w, "qwen2vl.context_length", 512, e), e) &&
            ok(oc_gguf_writer_add_u32(w, "qwen2vl.embedding_length", D, e), e) &&
            ok(oc_gguf_writer_add_u32(w, "qwen2vl.block_count", 1, e), e) &&
            ok(oc_gguf_writer_add_u32(w, "qwen2vl.feed_forward_length", FF, e), e) &&
            ok(oc_gguf_writer_add_u32(w, "qwen2vl.attention.head_count", HEADS, e), e) &&
            ok(oc_gguf_writer_add_u32(w, "qwen2vl.attention.head_count_kv", 1, e), e) &&
            ok(oc_gguf_writer_add_f32(w, "qwen2vl.rope.freq_base", 10000.0f, e), e) &&
            ok(oc_gguf_writer_add_f32(w, "qwen2vl.attention.layer_norm_rms_epsilon", 1e-6f, e), e) &&
            ok(oc_gguf_writer_add_arr(w, "qwen2vl.rope.dimension_sections", OC_GGUF_I32, sections, 4, e), e) &&
            ok(oc_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2", e), e) &&
            ok(oc_gguf_writer_add_str(w, "tokenizer.ggml.pre", "qwen2", e), e) &&
            ok(oc_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tokens, N_VOCAB, e), e) &&
            ok(oc_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", OC_GGUF_I32, types, N_VOCAB, e), e) &&
            ok(oc_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, 3, e), e) &&
            ok(oc_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 259, e), e) &&
            ok(oc_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", 0, e), e) &&
            tensor(w, "token_embd.weight", D, N_VOCAB, e) && tensor(w, "blk.0.attn_norm.weight", D, 1, e) &&
            tensor(w, "blk.0.attn_q.weight", D, D, e) && tensor(w, "blk.0.attn_q.bias", D, 1, e) &&
            tensor(w, "blk.0.attn_k.weight", D, D / HEADS, e) && tensor(w, "blk.0.attn_k.bias", D / HEADS, 1, e) &&
            tensor(w, "blk.0.attn_v.weight", D, D / HEADS, e) && tensor(w, "blk.0.attn_v.bias", D / HEADS, 1, e) &&
            tensor(w, "blk.0.attn_output.weight", D, D, e) && tensor(w, "blk.0.ffn_norm.weight", D, 1, e) &&
            tensor(w, "blk.0.ffn_gate.weight", D, FF, e) && tensor(w, "blk.0.ffn_up.weight", D, FF, e) &&
            tensor(w, "blk.0.ffn_down.weight", FF, D, e) && tensor(w, "output_norm.weight", D, 1, e) &&
            ok(oc_gguf_writer_write(w, path, e), e);
    oc_gguf_writer_close(w);
    return r;
}

/* The Qwen2-VL vision tower (docs/formats.md §2b names and keys), projecting to the decoder's D. */
static int write_mmproj(const char *path, oc_error *e) {
    oc_gguf_writer *w;
    if (!ok(oc_gguf_writer_open(&w, NULL, e), e)) return 0;
    int64_t pne[4] = { PATCH, PATCH, 3, D };
    int r = ok(oc_gguf_writer_add_str(w, "general.architecture", "clip", e), e) &&
            ok(oc_gguf_writer_add_str(w, "clip.projector_type", "qwen2vl_merger", e), e) &&
            ok(oc_gguf_writer_add_u32(w, "clip.vision.patch_size", PATCH, e), e) &&
            ok(oc_gguf_writer_add_u32(w, "clip.vision.embedding_length", D, e), e) &&
            ok(oc_gguf_writer_add_u32(w, "clip.vision.block_count", 1, e), e) &&
            ok(oc_gguf_writer_add_u32(w, "clip.vision.attention.head_count", HEADS, e), e) &&
            ok(oc_gguf_writer_add_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-6f, e), e) &&
            ok(oc_gguf_writer_add_tensor(w, "v.patch_embd.weight", OC_DTYPE_F32, 4, pne, values, e), e) &&
            ok(oc_gguf_writer_add_tensor(w, "v.patch_embd.weight.1", OC_DTYPE_F32, 4, pne, values, e), e) &&
            tensor(w, "v.blk.0.ln1.weight", D, 1, e) && tensor(w, "v.blk.0.ln1.bias", D, 1, e) &&
            tensor(w, "v.blk.0.ln2.weight", D, 1, e) && tensor(w, "v.blk.0.ln2.bias", D, 1, e) &&
            tensor(w, "v.blk.0.attn_q.weight", D, D, e) && tensor(w, "v.blk.0.attn_q.bias", D, 1, e) &&
            tensor(w, "v.blk.0.attn_k.weight", D, D, e) && tensor(w, "v.blk.0.attn_k.bias", D, 1, e) &&
            tensor(w, "v.blk.0.attn_v.weight", D, D, e) && tensor(w, "v.blk.0.attn_v.bias", D, 1, e) &&
            tensor(w, "v.blk.0.attn_out.weight", D, D, e) && tensor(w, "v.blk.0.attn_out.bias", D, 1, e) &&
            tensor(w, "v.blk.0.ffn_up.weight", D, VFF, e) && tensor(w, "v.blk.0.ffn_up.bias", VFF, 1, e) &&
            tensor(w, "v.blk.0.ffn_down.weight", VFF, D, e) && tensor(w, "v.blk.0.ffn_down.bias", D, 1, e) &&
            tensor(w, "v.post_ln.weight", D, 1, e) && tensor(w, "v.post_ln.bias", D, 1, e) &&
            tensor(w, "mm.0.weight", 4 * D, 4 * D, e) && tensor(w, "mm.0.bias", 4 * D, 1, e) &&
            tensor(w, "mm.2.weight", 4 * D, D, e) && tensor(w, "mm.2.bias", D, 1, e) &&
            ok(oc_gguf_writer_write(w, path, e), e);
    oc_gguf_writer_close(w);
    return r;
}

/* Writes TEXT, CRAFTED and MMPROJ (paths named after tag and the process id); aborts on failure. */
static void tiny_vlm_write(const char *tag) {
    oc_error e;
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++)   /* O(1) activations, varied */
        values[i] = 0.4f * sinf((float)i * 0.37f) + (i % 7 == 0 ? 0.8f : 0.0f);
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    long pid = (long)getpid();
    snprintf(TEXT, sizeof TEXT, "%s/%s-%ld-text.gguf", tmp, tag, pid);
    snprintf(CRAFTED, sizeof CRAFTED, "%s/%s-%ld-crafted.gguf", tmp, tag, pid);
    snprintf(MMPROJ, sizeof MMPROJ, "%s/%s-%ld-mmproj.gguf", tmp, tag, pid);
    if (!write_text(TEXT, 0, &e) || !write_text(CRAFTED, 1, &e) || !write_mmproj(MMPROJ, &e)) {
        fprintf(stderr, "%s: cannot write the model files under %s\n", tag, tmp);
        abort();
    }
}

/* Writes the three files, opens the plain and the crafted model with a context each (the limits of
 * the fuzzers: 256 context tokens, 2 images of 16 tokens, one thread, max_image_pixels for files),
 * then removes the files (the models were read, not mapped); aborts on failure. */
static void tiny_vlm_open(const char *tag, int64_t max_image_pixels, oc_model *models[2], oc_context *contexts[2]) {
    oc_error e;
    tiny_vlm_write(tag);
    const char *texts[2] = { TEXT, CRAFTED };
    for (int i = 0; i < 2; i++) {
        oc_context_params cp;
        oc_context_params_default(&cp);
        cp.max_context_tokens = 256;
        cp.max_images = 2;
        cp.max_image_tokens = 16;
        cp.max_image_pixels = max_image_pixels;
        cp.n_threads = 1;
        oc_model_params mp;
        oc_model_params_default(&mp);
        mp.text_path = texts[i];
        mp.mmproj_path = MMPROJ;
        mp.load = OC_LOAD_READ;   /* the files go away below */
        if (oc_model_open_params(&models[i], &mp, &e) != OC_OK ||
            oc_context_open(&contexts[i], models[i], &cp, &e) != OC_OK) {
            fprintf(stderr, "%s: %s\n", tag, e.message);
            abort();
        }
    }
    remove(TEXT);
    remove(CRAFTED);
    remove(MMPROJ);
}

#endif
