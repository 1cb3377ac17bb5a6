/* fuzz_ask.c: libFuzzer target for the whole ask path through the public API: a prompt (bytes as
 * they come: invalid UTF-8, special-token text, "image N" references), an optional system prompt
 * and up to two tiny images of any shape, answered (two tokens) by a tiny Qwen2-VL model this
 * target builds itself: a 1-layer decoder 8 wide over a byte-level vocabulary of 256 bytes, 3
 * merges and the 6 chat specials, and a 1-layer vision tower 8 wide with 2x2 patches (a few
 * thousand parameters: thousands of inputs a second, where the 64-wide fixture model ran about
 * 11). Half the inputs go to a copy whose vocabulary marks <|image_pad|>, <|vision_start|>,
 * <|vision_end|> and <|im_end|> USER_DEFINED, so plain text can produce them (issue 21 finding 1:
 * a crafted tokenizer). The contexts stay open across inputs, as a long-running host keeps them.
 * Every outcome but a crash is fine; a failure must say why in one line.
 * Input: byte 0 flags (bit 0 crafted vocabulary, bits 1-2 images, bit 3 system prompt, bit 4
 * labels), then per image 2 size bytes (1..48 px a side), then the text (system prompt first,
 * split at the first NUL). Pixels are the input bytes, cycled. The model files are written to
 * $TMPDIR (or /tmp) under names holding the process id, read into memory (OC_LOAD_READ) and
 * removed, so any number of workers can start at once from any directory. */
#define _POSIX_C_SOURCE 200809L
#include "ocellus.h"
#include "tests/fuzz/tiny_vlm.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static oc_model *models[2];
static oc_context *contexts[2];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    tiny_vlm_open("fuzz_ask", 0, models, contexts);
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
