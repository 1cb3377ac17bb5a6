/* fuzz_ask.c: libFuzzer target for the whole ask path through the public API: a prompt (bytes as
 * they come: invalid UTF-8, special-token text, "image N" references), an optional system prompt
 * and up to two tiny images of any shape, answered by the fixture's Qwen2-VL model (two tokens).
 * Half the inputs go to a copy whose vocabulary marks <|image_pad|>, <|vision_start|>,
 * <|vision_end|> and <|im_end|> USER_DEFINED, so plain text can produce them (issue 21 finding 1:
 * a crafted tokenizer). The contexts stay open across inputs, as a long-running host keeps them.
 * Every outcome but a crash is fine; a failure must say why in one line.
 * Input: byte 0 flags (bit 0 crafted vocabulary, bits 1-2 images, bit 3 system prompt, bit 4
 * labels), then per image 2 size bytes (1..48 px a side), then the text (system prompt first,
 * split at the first NUL). Pixels are the input bytes, cycled. Run from the repository root. */
#define _POSIX_C_SOURCE 200809L
#include "ocellus.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXT "tests/data/models/qwen2vl/text.gguf"
#define MMPROJ "tests/data/models/qwen2vl/mmproj.gguf"
#define CRAFTED "build/fuzz/fuzz_ask-crafted.gguf"

static oc_model *models[2];
static oc_context *contexts[2];

/* The fixture's text GGUF with the chat's special tokens marked USER_DEFINED (4). */
static int write_crafted(void) {
    FILE *f = fopen(TEXT, "rb");
    if (!f) return 0;
    static unsigned char b[1 << 20];
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    oc_gguf *g;
    if (oc_gguf_open_bytes(&g, b, n, NULL, NULL) != OC_OK) return 0;
    int64_t key = oc_gguf_find_key(g, "tokenizer.ggml.tokens");
    oc_gguf_type et;
    uint64_t n_tok = 0;
    oc_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_tok, NULL);
    static const char *const names[] = { "<|image_pad|>", "<|vision_start|>", "<|vision_end|>", "<|im_end|>" };
    int64_t ids[4] = { -1, -1, -1, -1 };
    for (uint64_t i = 0; i < n_tok; i++) {
        oc_str s = oc_gguf_arr_str(g, key, i);
        for (int k = 0; k < 4; k++)
            if (s.len == strlen(names[k]) && !memcmp(s.ptr, names[k], s.len)) ids[k] = (int64_t)i;
    }
    oc_gguf_close(g);
    static const char type_key[] = "tokenizer.ggml.token_type";
    size_t k = sizeof type_key - 1;
    for (size_t i = 8; i + k + 16 <= n; i++) {
        uint64_t len;
        memcpy(&len, b + i - 8, 8);
        if (len != k || memcmp(b + i, type_key, k)) continue;
        uint64_t count;
        memcpy(&count, b + i + k + 8, 8);
        int32_t user_defined = 4;
        for (int t = 0; t < 4; t++)
            if (ids[t] >= 0 && (uint64_t)ids[t] < count) memcpy(b + i + k + 16 + 4 * (size_t)ids[t], &user_defined, 4);
        break;
    }
    f = fopen(CRAFTED, "wb");
    if (!f) return 0;
    int ok = fwrite(b, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    oc_error e;
    if (!write_crafted()) {
        fprintf(stderr, "fuzz_ask: cannot write %s (run from the repository root)\n", CRAFTED);
        abort();
    }
    const char *texts[2] = { TEXT, CRAFTED };
    for (int i = 0; i < 2; i++) {
        oc_context_params cp;
        oc_context_params_default(&cp);
        cp.max_context_tokens = 256;
        cp.max_images = 2;
        cp.max_image_tokens = 16;
        cp.n_threads = 1;
        if (oc_model_open(&models[i], texts[i], MMPROJ, NULL, &e) != OC_OK ||
            oc_context_open(&contexts[i], models[i], &cp, &e) != OC_OK) {
            fprintf(stderr, "fuzz_ask: %s\n", e.message);
            abort();
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t flags = data[0];
    int n_images = (flags >> 1) & 3;
    if (n_images == 3) n_images = 2;
    size_t at = 1;
    static uint8_t pixels[2][48 * 48 * 3];
    oc_image_rgb images[2];
    for (int i = 0; i < n_images; i++) {
        int w = 1 + (at < size ? data[at] : 0) % 48, h = 1 + (at + 1 < size ? data[at + 1] : 0) % 48;
        at += 2;
        for (int j = 0; j < w * h * 3; j++) pixels[i][j] = data[(size_t)j % size];
        images[i] = (oc_image_rgb){ pixels[i], w, h, (size_t)w * 3 };
    }
    if (at > size) at = size;
    /* the text, NUL-terminated; with bit 3 the part before the first NUL is the system prompt */
    char *text = malloc(size - at + 1);
    if (!text) return 0;
    memcpy(text, data + at, size - at);
    text[size - at] = '\0';
    const char *system = NULL, *question = text;
    size_t first = strlen(text);
    if ((flags & 8) && first < size - at) {
        system = text;
        question = text + first + 1;
    }
    oc_request r;
    oc_request_default(&r);
    r.system = system;
    r.question = question;
    r.images = n_images ? images : NULL;
    r.n_images = n_images;
    r.image_labels = (flags & 16) ? 1 : -1;
    r.max_new_tokens = 2;
    oc_error e = { OC_OK, "" };
    oc_status st = oc_ask(contexts[flags & 1], &r, &e);
    if (st != OC_OK && (e.message[0] == '\0' || strchr(e.message, '\n'))) __builtin_trap();   /* one line, always */
    free(text);
    return 0;
}
