/* fuzz_tokenizer.c: libFuzzer target for the tokenizer. The vocabulary is the shared Qwen2 one
 * (../shared/data/qwen2-tokenizer/vocab-qwen2.gguf, or $OC_FUZZ_VOCAB) when present, else the tiny
 * in-memory vocabulary of tests/support/tiny_vocab.h. Input: one flags byte, then arbitrary bytes.
 * Invariants (any bytes, valid UTF-8 or not: byte-level BPE maps every byte, and invalid bytes are
 * kept as they are): decode(encode(x)) == x, with and without special-token parsing; the streaming
 * decoder's output concatenated with its flush == x; a short id buffer gives OC_ERR_RANGE with the
 * full count and the same leading ids; NFC never exceeds 3x its input and never fails. */
#include "ocellus.h"
#include "tests/support/tiny_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static oc_tokenizer *tok;
static unsigned char tiny[16384];

#define CHECK_OR_TRAP(c) do { if (!(c)) { fprintf(stderr, "invariant failed: %s (line %d)\n", #c, __LINE__); abort(); } } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    const char *path = getenv("OC_FUZZ_VOCAB");
    if (!path) path = "../shared/data/qwen2-tokenizer/vocab-qwen2.gguf";
    oc_gguf *g = NULL;
    oc_error err;
    if (oc_gguf_open(&g, path, NULL, &err) == OC_OK) {
        if (oc_tokenizer_open_gguf(&tok, g, NULL, &err) != OC_OK) tok = NULL;
        oc_gguf_close(g);
    }
    if (!tok) {
        size_t n = tiny_vocab_gguf(tiny, sizeof tiny, NULL, NULL);
        CHECK_OR_TRAP(n <= sizeof tiny);
        CHECK_OR_TRAP(oc_gguf_open_bytes(&g, tiny, n, NULL, &err) == OC_OK);
        CHECK_OR_TRAP(oc_tokenizer_open_gguf(&tok, g, NULL, &err) == OC_OK);
        oc_gguf_close(g);
        fprintf(stderr, "fuzz_tokenizer: using the tiny in-memory vocabulary (%s absent)\n", path);
    } else {
        fprintf(stderr, "fuzz_tokenizer: using %s\n", path);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    /* data[0]: bit 0 parse special tokens, bit 1 take the text as is (OC_TOK_NO_NFC); otherwise the
     * tokenizer normalizes to NFC (its default for qwen2) and decoding gives NFC(text) back */
    int raw = (data[0] >> 1) & 1, flags = (data[0] & 1) | (raw ? OC_TOK_NO_NFC : 0);
    size_t short_cap = (size_t)(data[0] >> 2) % 8;
    const char *text = (const char *)data + 1;
    size_t n = size - 1;

    const char *want = text;
    size_t n_want = n;
    uint8_t *norm = malloc(3 * n + 1);
    CHECK_OR_TRAP(norm);
    if (!raw) {
        size_t n_out;
        CHECK_OR_TRAP(oc_utf8_nfc((const uint8_t *)text, n, norm, 3 * n, &n_out, NULL) == OC_OK);
        CHECK_OR_TRAP(n_out <= 3 * n);
        want = (const char *)norm;
        n_want = n_out;
    }

    int32_t *ids = malloc((3 * n + 1) * sizeof *ids);
    char *out = malloc(3 * n + 1);
    uint8_t *renorm = malloc(9 * n + 1);
    size_t max_piece = oc_tokenizer_max_token_bytes(tok) + 3;
    char *piece = malloc(max_piece);
    CHECK_OR_TRAP(ids && out && renorm && piece);
    size_t n_ids = 0, n_out = 0;
    oc_error err;
    CHECK_OR_TRAP(oc_tokenizer_encode(tok, text, n, flags, ids, 3 * n + 1, &n_ids, &err) == OC_OK);
    CHECK_OR_TRAP(n_ids <= 3 * n);
    CHECK_OR_TRAP(oc_tokenizer_decode(tok, ids, n_ids, OC_TOK_DECODE_SPECIAL, out, 3 * n + 1, &n_out, &err) == OC_OK);
    if (raw) {
        CHECK_OR_TRAP(n_out == n && !memcmp(out, text, n));
    } else {
        /* special tokens are matched before normalizing (as HF does), so the text between them is
         * normalized piece by piece: "<think>" + U+0338 keeps its '>' where NFC of the whole text
         * composes it to U+226F. What holds: the result is canonically equivalent to the input. */
        size_t n_re;
        CHECK_OR_TRAP(oc_utf8_nfc((const uint8_t *)out, n_out, renorm, 9 * n + 1, &n_re, NULL) == OC_OK);
        CHECK_OR_TRAP(n_re == n_want && !memcmp(renorm, want, n_want));
    }

    /* streaming gives exactly the decoded bytes */
    oc_tok_decoder d;
    oc_tok_decoder_init(&d, OC_TOK_DECODE_SPECIAL);
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        size_t got;
        CHECK_OR_TRAP(oc_tok_decoder_push(&d, tok, ids[i], piece, max_piece, &got, &err) == OC_OK);
        CHECK_OR_TRAP(total + got <= n_out && !memcmp(piece, out + total, got));
        total += got;
    }
    char tail[4];
    size_t nt = oc_tok_decoder_flush(&d, tail);
    CHECK_OR_TRAP(total + nt == n_out && !memcmp(tail, out + total, nt));

    /* a short buffer */
    if (short_cap < n_ids) {
        int32_t few[8];
        size_t n_few = 0;
        CHECK_OR_TRAP(oc_tokenizer_encode(tok, text, n, flags, few, short_cap, &n_few, &err) == OC_ERR_RANGE);
        CHECK_OR_TRAP(n_few == n_ids && !memcmp(few, ids, short_cap * sizeof *ids));
    }
    free(ids);
    free(out);
    free(piece);
    free(norm);
    free(renorm);
    return 0;
}
