/* fuzz_ask_files.c: libFuzzer target for image FILES through oc_ask (oc_request.image_paths), the
 * path `ocellus ask -i` and `calibrate --data` take: the input becomes one or two files that oc_ask
 * maps, probes for their size (the prompt's fit before decoding), decodes within the context's
 * limits (PNM, JPEG including progressive files and their coefficient memory, PNG, reduced
 * decoding of large ones) and encodes, answered (two tokens) by the tiny model of tiny_vlm.h.
 * fuzz_ask feeds pixel buffers only (issue 40 finding 10). The context is small (64 x 64 decoded
 * pixels, 16 tokens an image) so a declared size beyond it takes the reduced or refused paths.
 * Every outcome but a crash is fine; a failure must say why in one line.
 * Input: byte 0 flags (bit 0: two files, bit 1 crafted vocabulary, bit 2 labels, bits 3-4 the
 * question), then with two files byte 1 the first file's share of the rest (in 256ths); each file
 * is written to $TMPDIR (or /tmp) under a name holding the process id. */
#define _POSIX_C_SOURCE 200809L
#include "ocellus.h"
#include "tests/fuzz/tiny_vlm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static oc_model *models[2];
static oc_context *contexts[2];
static char FILES[2][512];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    tiny_vlm_open("fuzz_ask_files", 64 * 64, models, contexts);
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    for (int i = 0; i < 2; i++)
        snprintf(FILES[i], sizeof FILES[i], "%s/fuzz_ask_files-%ld-%d.img", tmp, (long)getpid(), i);
    return 0;
}

static int write_file(const char *path, const uint8_t *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(b, 1, n, f) == n;
    return (fclose(f) == 0) & ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    static const char *const questions[4] = { "What color is the square?", "Describe image 1.",
                                              "Compare image 1 and image 2.", "What is in picture 3?" };
    uint8_t flags = data[0];
    int n_files = 1 + (flags & 1);
    const uint8_t *rest = data + 1 + (n_files == 2);
    size_t n_rest = size - 1 - (n_files == 2);
    size_t first = n_files == 2 ? n_rest * data[1] / 256 : n_rest;
    const char *paths[2] = { FILES[0], FILES[1] };
    if (!write_file(FILES[0], rest, first) || (n_files == 2 && !write_file(FILES[1], rest + first, n_rest - first))) {
        fprintf(stderr, "fuzz_ask_files: cannot write %s\n", FILES[0]);
        abort();
    }
    oc_request r;
    oc_request_default(&r);
    r.question = questions[(flags >> 3) & 3];
    r.image_paths = paths;
    r.n_images = n_files;
    r.image_labels = (flags & 4) ? 1 : -1;
    r.max_new_tokens = 2;
    oc_error e = { OC_OK, "" };
    oc_status st = oc_ask(contexts[(flags >> 1) & 1], &r, &e);
    if (st != OC_OK && (e.message[0] == '\0' || strchr(e.message, '\n'))) __builtin_trap();   /* one line, always */
    return 0;
}
