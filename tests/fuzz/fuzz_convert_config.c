/* fuzz_convert_config.c: libFuzzer target for what `ocellus convert` reads of a checkpoint's JSON
 * files (issue 40 finding 10): config.json, tokenizer_config.json, preprocessor_config.json (the
 * hyper-parameters, oc_cv_read_hparams) and tokenizer.json with the chat template (the vocabulary,
 * merges and special tokens, oc_cv_write_vocab into a GGUF writer in memory), as the converter
 * reads them before any weight. Every outcome but a crash is fine; a failure must say why in one
 * line.
 * Input: the four files' texts in that order (config, tokenizer_config, preprocessor_config,
 * tokenizer), separated by NUL bytes; a missing part leaves its file out. They are written to a
 * folder under $TMPDIR (or /tmp) named after the process id. */
#define _POSIX_C_SOURCE 200809L
#include "tools/convert_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char DIR_PATH[512];
static const char *const NAMES[4] = { "config.json", "tokenizer_config.json", "preprocessor_config.json",
                                      "tokenizer.json" };

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    snprintf(DIR_PATH, sizeof DIR_PATH, "%s/fuzz_convert_config-%ld", tmp, (long)getpid());
    if (mkdir(DIR_PATH, 0700) != 0) {
        struct stat st;
        if (stat(DIR_PATH, &st) != 0 || !S_ISDIR(st.st_mode)) {
            fprintf(stderr, "fuzz_convert_config: cannot create %s\n", DIR_PATH);
            abort();
        }
    }
    return 0;
}

static void put(const char *name, const uint8_t *b, size_t n, int present) {
    char path[640];
    snprintf(path, sizeof path, "%s/%s", DIR_PATH, name);
    if (!present) {
        remove(path);
        return;
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "fuzz_convert_config: cannot write %s\n", path);
        abort();
    }
}

static void check_message(oc_status st, const oc_error *e) {
    if (st != OC_OK && (e->message[0] == '\0' || strchr(e->message, '\n'))) __builtin_trap();   /* one line */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t at = 0;
    for (int i = 0; i < 4; i++) {
        const uint8_t *nul = at < size ? memchr(data + at, 0, size - at) : NULL;
        size_t end = nul ? (size_t)(nul - data) : size;
        put(NAMES[i], data + at, end - at, at < size || (i == 0));
        at = nul ? end + 1 : size + 1;
    }
    oc_cv_model m;
    memset(&m, 0, sizeof m);
    m.alloc = *oc_default_allocator();
    snprintf(m.dir, sizeof m.dir, "%s", DIR_PATH);
    m.name = "fuzz";
    oc_error e = { OC_OK, "" };
    oc_status st = oc_cv_json_load(&m, "config.json", 0, &m.config, &e);
    if (!st) st = oc_cv_json_load(&m, "tokenizer_config.json", 0, &m.tok_config, &e);
    if (!st) st = oc_cv_json_load(&m, "preprocessor_config.json", 0, &m.preproc, &e);
    if (!st) st = oc_cv_read_hparams(&m, &e);
    if (!st) {
        oc_gguf_writer *w = NULL;
        st = oc_gguf_writer_open(&w, NULL, &e);
        if (!st) st = oc_cv_write_vocab(&m, w, &e);
        oc_gguf_writer_close(w);
    }
    check_message(st, &e);
    oc_cv_json_free(&m, &m.config);
    oc_cv_json_free(&m, &m.tok_config);
    oc_cv_json_free(&m, &m.preproc);
    return 0;
}
