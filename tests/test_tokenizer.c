/* test_tokenizer.c: the byte-level BPE tokenizer.
 *  - Without ../shared: a tiny in-memory vocabulary (tests/support/tiny_vocab.h): merges, special
 *    tokens, open errors and allocation-failure injection, the pre-tokenizer on hand-made cases,
 *    byte round trips, the streaming decoder, NFC.
 *  - With ../shared/data/qwen2-tokenizer: llama.cpp's 46 test cases and the 19,539-id long sample
 *    reproduced exactly, decode(encode(x)) == x on all of them and on random bytes, the chat special
 *    tokens with and without parse_special, an emoji split across tokens in the streaming decoder.
 * Speed is measured with `ocellus tokenize --time`, not here. */
#include "check.h"
#include "port.h"
#include "support/tiny_vocab.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

#include <stdio.h>

/* ---- helpers ------------------------------------------------------------------------------------- */


static unsigned char tiny_file[16384];

/* Open the tiny vocabulary (model/pre overrides as in tiny_vocab_gguf). */
static oc_status open_tiny(oc_tokenizer **tok, const char *model, const char *pre, const oc_allocator *a,
                           oc_error *err) {
    size_t n = tiny_vocab_gguf(tiny_file, sizeof tiny_file, model, pre);
    if (n > sizeof tiny_file) return OC_ERR_RANGE;
    oc_gguf *g = NULL;
    oc_status st = oc_gguf_open_bytes(&g, tiny_file, n, NULL, err);
    if (st) return st;
    st = oc_tokenizer_open_gguf(tok, g, a, err);
    oc_gguf_close(g);
    return st;
}

static char shared_path[1024];
static const char *shared_file(const char *name) {
    const char *dir = check_shared_data_dir();
    if (!dir) return NULL;
    snprintf(shared_path, sizeof shared_path, "%s/qwen2-tokenizer/%s", dir, name);
    return shared_path;
}

static oc_tokenizer *qwen_tok;   /* opened once from the shared vocab, NULL when absent */

static int need_qwen(void) {
    if (!qwen_tok) { check_skip("../shared/data/qwen2-tokenizer is absent"); return 0; }
    return 1;
}

/* Encode text into a fresh array (3 * n_bytes + 1 ids always suffice: NFC at most triples text). */
static int32_t *encode_all(oc_tokenizer *tok, const char *text, size_t n, int flags, size_t *n_ids) {
    int32_t *ids = malloc((3 * n + 1) * sizeof *ids);
    oc_error err;
    if (!ids) return NULL;
    if (oc_tokenizer_encode(tok, text, n, flags, ids, 3 * n + 1, n_ids, &err) != OC_OK) {
        check_fail_at(__FILE__, __LINE__, "encode: %s", err.message);
        free(ids);
        return NULL;
    }
    return ids;
}

/* decode(ids) == text, with and without rendering CONTROL tokens as asked. */
static int decodes_to(const oc_tokenizer *tok, const int32_t *ids, size_t n_ids, int flags, const char *text,
                      size_t n) {
    size_t n_out = 0;
    char *out = malloc(n + 64);
    if (!out) return 0;
    oc_status st = oc_tokenizer_decode(tok, ids, n_ids, flags, out, n + 64, &n_out, NULL);
    int ok = st == OC_OK && n_out == n && !memcmp(out, text, n);
    free(out);
    return ok;
}

/* Streaming decode of ids, one push at a time, concatenated with the flush == text. */
static int streams_to(const oc_tokenizer *tok, const int32_t *ids, size_t n_ids, const char *text, size_t n) {
    oc_tok_decoder d;
    oc_tok_decoder_init(&d, OC_TOK_DECODE_SPECIAL);
    size_t cap = oc_tokenizer_max_token_bytes(tok) + 3, total = 0;
    char *buf = malloc(cap);
    int ok = buf != NULL;
    for (size_t i = 0; ok && i < n_ids; i++) {
        size_t got;
        if (oc_tok_decoder_push(&d, tok, ids[i], buf, cap, &got, NULL) != OC_OK) ok = 0;
        else if (total + got > n || memcmp(buf, text + total, got)) ok = 0;
        else total += got;
    }
    char tail[4];
    size_t nt = ok ? oc_tok_decoder_flush(&d, tail) : 0;
    if (ok && (total + nt != n || memcmp(tail, text + total, nt))) ok = 0;
    free(buf);
    return ok;
}

/* ---- pre-tokenizer ------------------------------------------------------------------------------ */

/* Pieces joined by '|' must equal want (pieces never contain '|' in these cases). */
static void check_pieces(const char *text, const char *want, int line) {
    char got[512];
    size_t n = strlen(text), o = 0;
    for (size_t i = 0; i < n;) {
        size_t e = oc_pretok_qwen2_next((const uint8_t *)text, n, i);
        if (e <= i || e > n) { check_fail_at(__FILE__, line, "piece end %zu at %zu", e, i); return; }
        if (i && o < sizeof got - 1) got[o++] = '|';
        for (; i < e && o < sizeof got - 1; i++) got[o++] = text[i];
    }
    got[o] = 0;
    if (strcmp(got, want)) check_fail_at(__FILE__, line, "pieces of \"%s\": got \"%s\", want \"%s\"", text, got, want);
}
#define PIECES(text, want) check_pieces(text, want, __LINE__)

/* Expected splits follow from the regex alternatives (tok_pretok.c); the C state machine also
 * matched Python's `regex` module on random strings and on every assigned code point. */
static void test_pretokenizer_cases(void) {
    PIECES("Hello world", "Hello| world");
    PIECES("   Hello", "  | Hello");                  /* R6 leaves the last space to R2 */
    PIECES("a  ", "a|  ");                            /* trailing run: R6 at the end takes all */
    PIECES("x \ny", "x| \n|y");                       /* R5: white space up to the last newline */
    PIECES("x\n\n  \n  y", "x|\n\n  \n| | y");        /* R5, then R6, then R2 */
    PIECES("it's 'S 'LL 'll've", "it|'s| '|S| '|LL| '|ll|'ve");
    PIECES("12345", "1|2|3|4|5");                     /* \p{N} is a single digit */
    PIECES("a!!\n\nb", "a|!!\n\n|b");                 /* R4 takes trailing newlines */
    PIECES(" !?x", " !?|x");
    PIECES("!x", "!x");                               /* R2 with a punctuation lead */
    PIECES("\tx", "\tx");                             /* R2 with a tab lead */
    PIECES("\nx", "\n|x");                            /* ... but never CR/LF */
    PIECES("x\r\n", "x|\r\n");
    PIECES("\xe4\xb8\xad\xe6\x96\x87 \xc2\xbd", "\xe4\xb8\xad\xe6\x96\x87| |\xc2\xbd");   /* 中文 ½ */
    PIECES("a\xe3\x80\x80\xe3\x80\x80" "b", "a|\xe3\x80\x80|\xe3\x80\x80" "b");          /* U+3000 is \s */
    PIECES("e\xcc\x81t\xc3\xa9", "e|\xcc\x81t\xc3\xa9");   /* a combining mark is not \p{L} */
    PIECES("a\xff\xfe" "b", "a|\xff\xfe|b");              /* invalid bytes are class other */
    PIECES("\xe4\xb8", "\xe4\xb8");                        /* truncated sequence: two invalid bytes */
}

/* ---- tiny vocabulary ------------------------------------------------------------------------------ */

static void test_tiny_encode(void) {
    oc_tokenizer *tok = NULL;
    oc_error err;
    REQUIREF(open_tiny(&tok, NULL, NULL, NULL, &err) == OC_OK, "%s", err.message);
    CHECK(oc_tokenizer_n_vocab(tok) == TINY_N_TOKENS);
    CHECK(oc_tokenizer_special_ids(tok).eos == TINY_ID_IM_START);
    CHECK(oc_tokenizer_special_ids(tok).bos == -1);
    CHECK(oc_tokenizer_find(tok, "<think>", 7) == TINY_ID_THINK);
    CHECK(oc_tokenizer_find(tok, "\xC4\xA0the", 5) == 258);
    CHECK(oc_tokenizer_find(tok, "nope", 4) == -1);
    CHECK(oc_tokenizer_token_type(tok, TINY_ID_IM_START) == OC_TOKEN_CONTROL);
    CHECK(oc_tokenizer_token_type(tok, -1) == OC_TOKEN_UNDEFINED);
    CHECK(oc_tokenizer_token_text(tok, TINY_N_TOKENS).ptr == NULL);
    oc_str b = oc_tokenizer_token_bytes(tok, 258);
    CHECK(b.len == 4 && !memcmp(b.ptr, " the", 4));

    /* " the thing ä": Ġ t -> Ġt (rank 0), h e -> he (1), Ġt he -> Ġthe (2); " thing": Ġt, h, i n -> in,
     * in g -> ing; " ä": Ġ then C3 A4 -> the merged token */
    const char *text = " the thing \xC3\xA4";
    int32_t want[] = { 258, 256, 'h', 261, ' ', 263 };
    int32_t ids[16];
    size_t n_ids = 0;
    REQUIRE(oc_tokenizer_encode(tok, text, strlen(text), 0, ids, 16, &n_ids, &err) == OC_OK);
    REQUIREF(n_ids == 6, "%zu ids", n_ids);
    CHECK(!memcmp(ids, want, sizeof want));
    CHECK(decodes_to(tok, ids, n_ids, 0, text, strlen(text)));

    /* special tokens: CONTROL only with parse_special, USER_DEFINED always (llama.cpp) */
    const char *chat = "<|im_start|>x<think>";
    REQUIRE(oc_tokenizer_encode(tok, chat, strlen(chat), OC_TOK_PARSE_SPECIAL, ids, 16, &n_ids, &err) == OC_OK);
    CHECK(n_ids == 3 && ids[0] == TINY_ID_IM_START && ids[1] == 'x' && ids[2] == TINY_ID_THINK);
    CHECK(decodes_to(tok, ids, n_ids, OC_TOK_DECODE_SPECIAL, chat, strlen(chat)));
    CHECK(decodes_to(tok, ids, n_ids, 0, "x<think>", 8));      /* CONTROL not rendered by default */
    REQUIRE(oc_tokenizer_encode(tok, chat, strlen(chat), 0, ids, 16, &n_ids, &err) == OC_OK);
    CHECK(n_ids == 12 + 1 + 1 && ids[0] == '<' && ids[13] == TINY_ID_THINK);
    CHECK(decodes_to(tok, ids, n_ids, 0, chat, strlen(chat)));

    /* too small a buffer: OC_ERR_RANGE with the needed count; max_ids 0 measures */
    REQUIRE(oc_tokenizer_encode(tok, text, strlen(text), 0, ids, 4, &n_ids, &err) == OC_ERR_RANGE);
    CHECK(n_ids == 6 && ids[0] == 258 && ids[3] == 261);
    CHECK(oc_tokenizer_encode(tok, text, strlen(text), 0, NULL, 0, &n_ids, NULL) == OC_ERR_RANGE && n_ids == 6);
    CHECK(oc_tokenizer_encode(tok, "", 0, 0, NULL, 0, &n_ids, NULL) == OC_OK && n_ids == 0);
    CHECK(oc_tokenizer_encode(tok, NULL, 3, 0, ids, 16, &n_ids, NULL) == OC_ERR_INVALID);

    /* the caller's scratch: the same ids, the tokenizer only read (a model's contexts share it) */
    check_alloc sa = { 0 };
    oc_allocator salloc = { check_alloc_fn, &sa };
    oc_tok_scratch *s1 = NULL, *s2 = NULL;
    REQUIRE(oc_tok_scratch_open(&s1, &salloc, &err) == OC_OK && oc_tok_scratch_open(&s2, &salloc, &err) == OC_OK);
    int32_t ids1[16], ids2[16];
    size_t n1 = 0, n2 = 0;
    CHECK(oc_tokenizer_encode_with(tok, s1, text, strlen(text), 0, ids1, 16, &n1, &err) == OC_OK);
    CHECK(oc_tokenizer_encode_with(tok, s2, chat, strlen(chat), OC_TOK_PARSE_SPECIAL, ids2, 16, &n2, &err) == OC_OK);
    CHECK(n1 == 6 && !memcmp(ids1, want, sizeof want) && n2 == 3 && ids2[2] == TINY_ID_THINK);
    CHECK(oc_tokenizer_encode_with(tok, NULL, text, strlen(text), 0, ids1, 16, &n1, NULL) == OC_ERR_INVALID);
    oc_tok_scratch_close(s1);
    oc_tok_scratch_close(s2);
    oc_tok_scratch_close(NULL);
    CHECK(sa.n_live == 0 && sa.bytes_live == 0);
    for (long k = 1; k <= 6; k++) {   /* every allocation of a scratch fails cleanly */
        check_alloc fa = { .fail_at = k };
        oc_allocator falloc = { check_alloc_fn, &fa };
        oc_tok_scratch *sf = NULL;
        oc_status st = oc_tok_scratch_open(&sf, &falloc, &err);
        CHECKF(st == OC_ERR_NOMEM && !sf && fa.n_live == 0, "fail_at %ld: %d, %ld live", k, (int)st, fa.n_live);
    }

    /* decode errors */
    int32_t bad = TINY_N_TOKENS;
    char out[8];
    size_t n_out;
    CHECK(oc_tokenizer_decode(tok, &bad, 1, 0, out, sizeof out, &n_out, &err) == OC_ERR_INVALID);
    int32_t pad = TINY_ID_PAD;
    CHECK(oc_tokenizer_decode(tok, &pad, 1, 0, out, sizeof out, &n_out, NULL) == OC_OK && n_out == 0);
    CHECK(oc_tokenizer_decode(tok, want, 6, 0, out, 4, &n_out, NULL) == OC_ERR_RANGE && n_out == strlen(text));
    CHECK(!memcmp(out, " the", 4));
    oc_tokenizer_close(tok);
}

/* Any byte string survives encode/decode, invalid UTF-8 included; also through the streaming
 * decoder, and also when a piece is longer than OC_TOKENIZER_MAX_PIECE_BYTES. */
static void test_tiny_roundtrip_random(void) {
    oc_tokenizer *tok = NULL;
    REQUIRE(open_tiny(&tok, NULL, NULL, NULL, NULL) == OC_OK);
    check_rng rng = { 0x70C0FFEEull };
    static const char *const frags[] = { " the", "ing", "\xC3\xA4", "<|im_start|>", "<think>", "  ", "\n",
                                         "\xF0\x9F\x98\x80", "\xE4\xB8\xAD", "'s", "9", "\xFF", "\xC3", "\x80" };
    char text[256];
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = 0;
        int n_parts = check_rng_int(&rng, 0, 12);
        for (int p = 0; p < n_parts && n < sizeof text - 16; p++) {
            if (check_rng_int(&rng, 0, 1)) {
                const char *f = frags[check_rng_int(&rng, 0, (int)OC_ARRAY_LEN(frags) - 1)];
                memcpy(text + n, f, strlen(f));
                n += strlen(f);
            } else {
                text[n++] = (char)check_rng_int(&rng, 0, 255);
            }
        }
        for (int flags = 0; flags <= 1; flags++) {
            size_t n_ids;
            int32_t *ids = encode_all(tok, text, n, flags | OC_TOK_NO_NFC, &n_ids);
            REQUIRE(ids);
            CHECKF(decodes_to(tok, ids, n_ids, OC_TOK_DECODE_SPECIAL, text, n), "iteration %d", iter);
            CHECKF(streams_to(tok, ids, n_ids, text, n), "iteration %d (stream)", iter);
            free(ids);
        }
    }
    /* pieces beyond the scratch size are cut into windows; the bytes still come back */
    size_t n_long = 3 * OC_TOKENIZER_MAX_PIECE_BYTES + 5;
    char *big = malloc(n_long);
    REQUIRE(big);
    for (size_t i = 0; i < n_long; i++) big[i] = "ab\xC3\xA4"[i % 4];   /* one long letter run */
    size_t n_ids;
    int32_t *ids = encode_all(tok, big, n_long, 0, &n_ids);
    CHECK(ids && decodes_to(tok, ids, n_ids, 0, big, n_long));
    free(ids);
    memset(big, ' ', n_long);
    ids = encode_all(tok, big, n_long, 0, &n_ids);
    CHECK(ids && decodes_to(tok, ids, n_ids, 0, big, n_long) && n_ids < n_long);   /* ĠĠ merges */
    free(ids);
    free(big);
    oc_tokenizer_close(tok);
}

/* The decoder holds back an unfinished UTF-8 sequence and nothing else. */
static void test_tiny_stream_decoder(void) {
    oc_tokenizer *tok = NULL;
    REQUIRE(open_tiny(&tok, NULL, NULL, NULL, NULL) == OC_OK);
    oc_tok_decoder d;
    oc_tok_decoder_init(&d, 0);
    char out[64];
    size_t n;
    /* the tiny vocabulary has only byte tokens for this emoji (F0 9F 98 80): one byte per push */
    CHECK(oc_tok_decoder_push(&d, tok, 0xF0, out, sizeof out, &n, NULL) == OC_OK && n == 0);
    CHECK(oc_tok_decoder_push(&d, tok, 0x9F, out, sizeof out, &n, NULL) == OC_OK && n == 0);
    CHECK(oc_tok_decoder_push(&d, tok, 0x98, out, sizeof out, &n, NULL) == OC_OK && n == 0);
    /* a buffer too small for what is ready: RANGE with the size, state unchanged */
    CHECK(oc_tok_decoder_push(&d, tok, 0x80, out, 3, &n, NULL) == OC_ERR_RANGE && n == 4);
    CHECK(oc_tok_decoder_push(&d, tok, 0x80, out, sizeof out, &n, NULL) == OC_OK && n == 4);
    CHECK(!memcmp(out, "\xF0\x9F\x98\x80", 4));
    /* a lead byte followed by a non-continuation is not held: both pass through */
    CHECK(oc_tok_decoder_push(&d, tok, 0xE4, out, sizeof out, &n, NULL) == OC_OK && n == 0);
    CHECK(oc_tok_decoder_push(&d, tok, 'a', out, sizeof out, &n, NULL) == OC_OK && n == 2 && !memcmp(out, "\xE4" "a", 2));
    /* bytes that can never start a sequence are not held */
    CHECK(oc_tok_decoder_push(&d, tok, 0xFF, out, sizeof out, &n, NULL) == OC_OK && n == 1);
    CHECK(oc_tok_decoder_push(&d, tok, 0x80, out, sizeof out, &n, NULL) == OC_OK && n == 1);
    /* E0 80 is an overlong start: not held */
    CHECK(oc_tok_decoder_push(&d, tok, 0xE0, out, sizeof out, &n, NULL) == OC_OK && n == 0);
    CHECK(oc_tok_decoder_push(&d, tok, 0x80, out, sizeof out, &n, NULL) == OC_OK && n == 2);
    /* an unfinished sequence at the end comes out of flush */
    CHECK(oc_tok_decoder_push(&d, tok, 0xC3, out, sizeof out, &n, NULL) == OC_OK && n == 0);
    CHECK(oc_tok_decoder_flush(&d, out) == 1 && (uint8_t)out[0] == 0xC3);
    CHECK(oc_tok_decoder_flush(&d, out) == 0);
    /* CONTROL tokens: silent unless asked */
    CHECK(oc_tok_decoder_push(&d, tok, TINY_ID_IM_START, out, sizeof out, &n, NULL) == OC_OK && n == 0);
    oc_tok_decoder_init(&d, OC_TOK_DECODE_SPECIAL);
    CHECK(oc_tok_decoder_push(&d, tok, TINY_ID_IM_START, out, sizeof out, &n, NULL) == OC_OK && n == 12);
    CHECK(oc_tok_decoder_push(&d, tok, -1, out, sizeof out, &n, NULL) == OC_ERR_INVALID);
    oc_tokenizer_close(tok);
}

static void test_open_errors(void) {
    oc_tokenizer *tok = (oc_tokenizer *)&tok;
    oc_error err;
    CHECK(open_tiny(&tok, "llama", NULL, NULL, &err) == OC_ERR_UNSUPPORTED && tok == NULL);
    CHECKF(strstr(err.message, "'llama'") != NULL, "%s", err.message);
    CHECK(open_tiny(&tok, NULL, "llama-bpe", NULL, &err) == OC_ERR_UNSUPPORTED && tok == NULL);
    CHECKF(strstr(err.message, "'llama-bpe'") != NULL, "%s", err.message);
    CHECK(open_tiny(&tok, NULL, "deepseek-r1-qwen", NULL, &err) == OC_OK);
    oc_tokenizer_close(tok);
    CHECK(oc_tokenizer_open_gguf(&tok, NULL, NULL, &err) == OC_ERR_INVALID);
    CHECK(oc_tokenizer_open_gguf(NULL, NULL, NULL, &err) == OC_ERR_INVALID);
    oc_tokenizer_close(NULL);

    /* a GGUF without tokenizer keys */
    unsigned char empty[24] = { 'G', 'G', 'U', 'F', 3 };
    oc_gguf *g = NULL;
    REQUIRE(oc_gguf_open_bytes(&g, empty, sizeof empty, NULL, &err) == OC_OK);
    CHECK(oc_tokenizer_open_gguf(&tok, g, NULL, &err) == OC_ERR_NOT_FOUND);
    CHECKF(strstr(err.message, "tokenizer.ggml.model") != NULL, "%s", err.message);
    oc_gguf_close(g);

    /* every allocation failing in turn: NOMEM, nothing left behind */
    int n_fail = 0;
    for (long k = 1; k < 64; k++) {
        check_alloc c = { .fail_at = k };
        oc_allocator a = { check_alloc_fn, &c };
        oc_status st = open_tiny(&tok, NULL, NULL, &a, &err);
        if (st == OC_OK) { oc_tokenizer_close(tok); CHECK(c.n_live == 0 && c.bytes_live == 0); break; }
        n_fail++;
        CHECKF(st == OC_ERR_NOMEM && tok == NULL, "k=%ld: %s", k, err.message);
        CHECKF(c.n_live == 0 && c.bytes_live == 0, "k=%ld leaks %ld blocks", k, c.n_live);
    }
    CHECK(n_fail >= 10);
}

static void test_nfc(void) {
    static const char *const cases[][2] = {   /* input, NFC (from Python's unicodedata.normalize) */
        { "\x65\xcc\x81", "\xc3\xa9" },
        { "\x61\xcc\xa3\xcc\x87", "\xe1\xba\xa1\xcc\x87" },
        { "\x61\xcc\x87\xcc\xa3", "\xe1\xba\xa1\xcc\x87" },
        { "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81" },
        { "\xea\xb0\x80\xe1\x86\xa8", "\xea\xb0\x81" },
        { "\xe0\xa5\x98", "\xe0\xa4\x95\xe0\xa4\xbc" },
        { "\xe2\x84\xa6", "\xce\xa9" },
        { "\xe0\xa7\x87\xe0\xa6\xbe", "\xe0\xa7\x8b" },
        { "\x41\xcc\x8a\xcc\x81", "\xc7\xba" },
        { "\xe1\xb8\x8b\xcc\xa3", "\xe1\xb8\x8d\xcc\x87" },
        { "\x71\xcc\x87\xcc\xa3", "\x71\xcc\xa3\xcc\x87" },
        { "\xcd\x84", "\xcc\x88\xcc\x81" },
        { "\xc3\xa9\xcc\x81", "\xc3\xa9\xcc\x81" },
        { "\x41\xcc\x80\xcc\x96", "\xc3\x80\xcc\x96" },
        { "\xe1\x85\xa1", "\xe1\x85\xa1" },
        { "\xcc\x81\x61", "\xcc\x81\x61" },
        { "x\xff" "e\xcc\x81\xe4\xb8", "x\xff\xc3\xa9\xe4\xb8" },   /* invalid bytes pass through */
    };
    for (size_t i = 0; i < OC_ARRAY_LEN(cases); i++) {
        uint8_t out[64];
        size_t n_in = strlen(cases[i][0]), n_out;
        CHECKF(oc_utf8_nfc((const uint8_t *)cases[i][0], n_in, out, sizeof out, &n_out, NULL) == OC_OK, "case %zu", i);
        CHECKF(n_out == strlen(cases[i][1]) && !memcmp(out, cases[i][1], n_out), "case %zu", i);
        CHECK(n_out <= 3 * n_in);
    }
    uint8_t out[2];
    size_t n_out;
    CHECK(oc_utf8_nfc((const uint8_t *)"\xe0\xa5\x98", 3, out, 2, &n_out, NULL) == OC_ERR_RANGE && n_out == 6);
    CHECK(oc_utf8_nfc(NULL, 0, NULL, 0, &n_out, NULL) == OC_OK && n_out == 0);
}

/* ---- the shared Qwen2 vocabulary ------------------------------------------------------------------- */

static int map_shared(const char *name, oc_port_mapping *m) {
    const char *path = shared_file(name);
    char msg[256];
    if (!path || oc_port_map_file(path, m, msg, sizeof msg)) {
        check_fail_at(__FILE__, __LINE__, "cannot map %s", name);
        return 0;
    }
    return 1;
}

/* llama.cpp's test-tokenizer-0 cases: parse_special off, every id exact, and the round trip. */
static void test_qwen_cases(void) {
    if (!need_qwen()) return;
    oc_port_mapping inp, outp;
    if (!map_shared("tokenizer-cases.inp", &inp)) return;
    if (!map_shared("tokenizer-cases.out", &outp)) { oc_port_unmap_file(&inp); return; }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const char *p = inp.data, *end = p + inp.n_bytes;
    const char *line = outp.data, *lend = line + outp.n_bytes;
    int n_cases = 0;
    while (p < end) {
        const char *q = p;
        while (q + sizeof sep - 1 <= end && memcmp(q, sep, sizeof sep - 1)) q++;
        if (q + sizeof sep - 1 > end) { check_fail_at(__FILE__, __LINE__, "case %d has no separator", n_cases); break; }
        size_t n = (size_t)(q - p), n_ids;
        int32_t *ids = encode_all(qwen_tok, p, n, 0, &n_ids);
        REQUIRE(ids);
        /* expected: the matching line of the .out file */
        const char *le = memchr(line, '\n', (size_t)(lend - line));
        if (!le) le = lend;
        size_t k = 0;
        int ok = 1;
        for (const char *s = line; s < le;) {
            while (s < le && *s == ' ') s++;
            if (s >= le) break;
            long v = strtol(s, (char **)&s, 10);
            if (k >= n_ids || ids[k] != v) ok = 0;
            k++;
        }
        CHECKF(ok && k == n_ids, "case %d (\"%.*s\"): ids differ (%zu vs %zu expected)", n_cases, (int)OC_MIN(n, 40), p, n_ids, k);
        CHECKF(decodes_to(qwen_tok, ids, n_ids, 0, p, n), "case %d round trip", n_cases);
        CHECKF(streams_to(qwen_tok, ids, n_ids, p, n), "case %d stream", n_cases);
        free(ids);
        line = le < lend ? le + 1 : lend;
        p = q + sizeof sep - 1;
        n_cases++;
    }
    CHECKF(n_cases == 46, "%d cases", n_cases);
    oc_port_unmap_file(&inp);
    oc_port_unmap_file(&outp);
}

static void test_qwen_long_sample(void) {
    if (!need_qwen()) return;
    oc_port_mapping txt, ref;
    if (!map_shared("long-sample.txt", &txt)) return;
    if (!map_shared("long-sample.ids", &ref)) { oc_port_unmap_file(&txt); return; }
    size_t n_ids;
    int32_t *ids = encode_all(qwen_tok, txt.data, txt.n_bytes, 0, &n_ids);
    REQUIRE(ids);
    const char *s = ref.data, *e = s + ref.n_bytes;
    size_t k = 0, first_diff = SIZE_MAX;
    while (s < e) {
        char *next;
        long v = strtol(s, &next, 10);
        if (next == s) break;
        if ((k >= n_ids || ids[k] != v) && first_diff == SIZE_MAX) first_diff = k;
        k++;
        s = next;
    }
    CHECKF(k == 19539 && n_ids == k && first_diff == SIZE_MAX, "%zu ids, %zu expected, first difference at %zu",
           n_ids, k, first_diff);
    CHECK(decodes_to(qwen_tok, ids, n_ids, 0, txt.data, txt.n_bytes));
    CHECK(streams_to(qwen_tok, ids, n_ids, txt.data, txt.n_bytes));
    free(ids);
    oc_port_unmap_file(&txt);
    oc_port_unmap_file(&ref);
}

static void test_qwen_special(void) {
    if (!need_qwen()) return;
    const char *chat = "<|im_start|>user\nhi<|im_end|>";
    int32_t ids[32];
    size_t n;
    /* expected ids checked against the vocabulary's texts below, and against an independent Python
     * BPE over tokenizer.json for the plain-text case */
    static const int32_t want_special[] = { 151644, 872, 198, 6023, 151645 };
    static const int32_t want_plain[] = { 27, 91, 318, 4906, 91, 29, 872, 198, 6023, 27, 91, 318, 6213, 91, 29 };
    REQUIRE(oc_tokenizer_encode(qwen_tok, chat, strlen(chat), OC_TOK_PARSE_SPECIAL, ids, 32, &n, NULL) == OC_OK);
    CHECK(n == OC_ARRAY_LEN(want_special) && !memcmp(ids, want_special, sizeof want_special));
    CHECK(decodes_to(qwen_tok, ids, n, OC_TOK_DECODE_SPECIAL, chat, strlen(chat)));
    REQUIRE(oc_tokenizer_encode(qwen_tok, chat, strlen(chat), 0, ids, 32, &n, NULL) == OC_OK);
    CHECK(n == OC_ARRAY_LEN(want_plain) && !memcmp(ids, want_plain, sizeof want_plain));
    CHECK(decodes_to(qwen_tok, ids, n, 0, chat, strlen(chat)));

    static const struct { int32_t id; const char *text; } vocab[] = {
        { 151644, "<|im_start|>" }, { 151645, "<|im_end|>" }, { 872, "user" }, { 198, "\xC4\x8A" /* Ċ = \n */ },
        { 6023, "hi" }, { 27, "<" }, { 91, "|" }, { 318, "im" }, { 4906, "_start" }, { 6213, "_end" }, { 29, ">" },
        { 151652, "<|vision_start|>" }, { 151653, "<|vision_end|>" }, { 151655, "<|image_pad|>" },
    };
    for (size_t i = 0; i < OC_ARRAY_LEN(vocab); i++) {
        oc_str t = oc_tokenizer_token_text(qwen_tok, vocab[i].id);
        CHECKF(t.len == strlen(vocab[i].text) && !memcmp(t.ptr, vocab[i].text, t.len), "token %ld", (long)vocab[i].id);
        CHECK(oc_tokenizer_find(qwen_tok, vocab[i].text, strlen(vocab[i].text)) == vocab[i].id);
    }
    CHECK(oc_tokenizer_token_type(qwen_tok, 151644) == OC_TOKEN_CONTROL);
    CHECK(oc_tokenizer_token_type(qwen_tok, 151657) == OC_TOKEN_USER_DEFINED);
    oc_tokenizer_special sp = oc_tokenizer_special_ids(qwen_tok);
    CHECK(sp.bos == 151643 && sp.eos == 151643 && sp.pad == 151643 && sp.unk == -1 && !sp.add_bos);

    /* a USER_DEFINED token is matched even without parse_special, as llama.cpp does */
    const char *tool = "a<tool_call>b";
    REQUIRE(oc_tokenizer_encode(qwen_tok, tool, strlen(tool), 0, ids, 32, &n, NULL) == OC_OK);
    CHECK(n == 3 && ids[1] == 151657);
    /* longest match: "<|im_start|>" rather than a shorter special prefix; adjacent specials */
    const char *two = "<|vision_start|><|image_pad|><|image_pad|><|vision_end|>";
    REQUIRE(oc_tokenizer_encode(qwen_tok, two, strlen(two), 1, ids, 32, &n, NULL) == OC_OK);
    CHECK(n == 4 && ids[0] == 151652 && ids[1] == 151655 && ids[2] == 151655 && ids[3] == 151653);
}

/* 🫠 (F0 9F AB A0) is three tokens, "ðŁ" + "«" + " " in byte-level form: the decoder must print
 * nothing until the third. */
static void test_qwen_stream_emoji(void) {
    if (!need_qwen()) return;
    const char *text = "\xF0\x9F\xAB\xA0 ok";
    int32_t ids[16];
    size_t n;
    REQUIRE(oc_tokenizer_encode(qwen_tok, text, strlen(text), 0, ids, 16, &n, NULL) == OC_OK);
    static const int32_t want[] = { 9284, 104, 254, 5394 };
    REQUIRE(n == 4 && !memcmp(ids, want, sizeof want));
    oc_tok_decoder d;
    oc_tok_decoder_init(&d, 0);
    char out[300];
    size_t got;
    CHECK(oc_tok_decoder_push(&d, qwen_tok, ids[0], out, sizeof out, &got, NULL) == OC_OK && got == 0);
    CHECK(oc_tok_decoder_push(&d, qwen_tok, ids[1], out, sizeof out, &got, NULL) == OC_OK && got == 0);
    CHECK(oc_tok_decoder_push(&d, qwen_tok, ids[2], out, sizeof out, &got, NULL) == OC_OK && got == 4);
    CHECK(!memcmp(out, "\xF0\x9F\xAB\xA0", 4));
    CHECK(oc_tok_decoder_push(&d, qwen_tok, ids[3], out, sizeof out, &got, NULL) == OC_OK && got == 3);
    CHECK(oc_tok_decoder_flush(&d, out) == 0);
    CHECK(oc_tokenizer_max_token_bytes(qwen_tok) >= 16);
}

/* Random bytes (invalid UTF-8 included) and random mixes of multi-byte text round-trip exactly. */
static void test_qwen_roundtrip_random(void) {
    if (!need_qwen()) return;
    check_rng rng = { 0xB1E55EDull };
    static const char *const frags[] = { " the", "\xE4\xB8\xAD\xE6\x96\x87", "\xF0\x9F\x98\x80", "<|im_end|>", "\n\n",
                                         "  ", "'ll", "123", "\xC3\xA9", "e\xCC\x81", "\t", "\xE3\x80\x80" };
    char text[512];
    for (int iter = 0; iter < 2000; iter++) {
        size_t n = 0;
        int n_parts = check_rng_int(&rng, 0, 24);
        for (int p = 0; p < n_parts && n < sizeof text - 16; p++) {
            if (check_rng_int(&rng, 0, 2)) {
                const char *f = frags[check_rng_int(&rng, 0, (int)OC_ARRAY_LEN(frags) - 1)];
                memcpy(text + n, f, strlen(f));
                n += strlen(f);
            } else {
                text[n++] = (char)check_rng_int(&rng, 0, 255);
            }
        }
        size_t n_ids;
        int32_t *ids = encode_all(qwen_tok, text, n, (iter & 1) | OC_TOK_NO_NFC, &n_ids);
        REQUIRE(ids);
        CHECKF(decodes_to(qwen_tok, ids, n_ids, OC_TOK_DECODE_SPECIAL, text, n), "iteration %d", iter);
        CHECKF(streams_to(qwen_tok, ids, n_ids, text, n), "iteration %d (stream)", iter);
        free(ids);
    }
}

/* Issue 21 finding 7: Hugging Face's Qwen2 tokenizer normalizes to NFC, so decomposed text (NFD: "a"
 * + U+0308) gets the ids of the composed text ("\xC3\xA4"); before, only oc_utf8_nfc by hand did.
 * OC_TOK_NO_NFC keeps llama.cpp's ids. Long text is normalized in windows: the ids equal those of
 * the whole text normalized at once (the windows end after a line break). */
static int same_ids(oc_tokenizer *tok, const char *a, size_t n_a, int flags_a, const char *b, size_t n_b, int flags_b) {
    size_t n1, n2;
    int32_t *x = encode_all(tok, a, n_a, flags_a, &n1), *y = encode_all(tok, b, n_b, flags_b, &n2);
    int same = x && y && n1 == n2 && !memcmp(x, y, n1 * sizeof *x);
    free(x);
    free(y);
    return same;
}

static void test_nfc_by_default(void) {
    oc_tokenizer *tok = NULL;
    REQUIRE(open_tiny(&tok, NULL, NULL, NULL, NULL) == OC_OK);
    const char *nfd = "a\xCC\x88 the a\xCC\x88", *nfc = "\xC3\xA4 the \xC3\xA4";
    CHECK(same_ids(tok, nfd, strlen(nfd), 0, nfc, strlen(nfc), 0));
    CHECK(!same_ids(tok, nfd, strlen(nfd), OC_TOK_NO_NFC, nfc, strlen(nfc), 0));
    size_t n_ids;
    int32_t *ids = encode_all(tok, nfd, 3, 0, &n_ids);
    CHECK(ids && n_ids == 1 && ids[0] == 256 + 7);   /* the merged token for bytes C3 A4 */
    free(ids);
    oc_tokenizer_close(tok);
    /* deepseek-r1-qwen shares the pre-tokenizer, not HF's normalizer: no NFC */
    REQUIRE(open_tiny(&tok, NULL, "deepseek-r1-qwen", NULL, NULL) == OC_OK);
    CHECK(same_ids(tok, nfd, strlen(nfd), 0, nfd, strlen(nfd), OC_TOK_NO_NFC));
    oc_tokenizer_close(tok);

    if (!need_qwen()) return;
    CHECK(same_ids(qwen_tok, "Cafe\xCC\x81 na\xC3\xAFve", 13, 0, "Caf\xC3\xA9 na\xC3\xAFve", 12, 0));
    /* 80 KiB of lines with decomposed accents and Hangul jamo, normalized in windows */
    static const char *const parts[] = { "re\xCC\x81sume\xCC\x81 ", "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB ",
                                         "o\xCC\x88\xCC\xA3", "\n", "  ", "\xC3\xA5", "x" };
    size_t cap = 80 * 1024, n = 0;
    char *text = malloc(cap + 16);
    uint8_t *norm = malloc(3 * cap + 48);
    REQUIRE(text && norm);
    check_rng rng = { 0xACCE27ull };
    while (n < cap) {
        const char *p = parts[check_rng_int(&rng, 0, (int)OC_ARRAY_LEN(parts) - 1)];
        memcpy(text + n, p, strlen(p));
        n += strlen(p);
    }
    size_t n_norm;
    REQUIRE(oc_utf8_nfc((const uint8_t *)text, n, norm, 3 * cap + 48, &n_norm, NULL) == OC_OK);
    CHECK(n_norm < n && same_ids(qwen_tok, text, n, 0, (const char *)norm, n_norm, OC_TOK_NO_NFC));
    free(text);
    free(norm);
}

int main(void) {
    const char *vocab = shared_file("vocab-qwen2.gguf");
    oc_gguf *g = NULL;
    oc_error err;
    if (vocab && oc_gguf_open(&g, vocab, NULL, &err) == OC_OK) {
        if (oc_tokenizer_open_gguf(&qwen_tok, g, NULL, &err) != OC_OK)
            fprintf(stderr, "cannot open the shared vocabulary: %s\n", err.message);
        oc_gguf_close(g);
    }
    CHECK_RUN(test_pretokenizer_cases);
    CHECK_RUN(test_tiny_encode);
    CHECK_RUN(test_tiny_roundtrip_random);
    CHECK_RUN(test_tiny_stream_decoder);
    CHECK_RUN(test_open_errors);
    CHECK_RUN(test_nfc);
    CHECK_RUN(test_qwen_cases);
    CHECK_RUN(test_qwen_long_sample);
    CHECK_RUN(test_qwen_special);
    CHECK_RUN(test_qwen_stream_emoji);
    CHECK_RUN(test_qwen_roundtrip_random);
    CHECK_RUN(test_nfc_by_default);
    oc_tokenizer_close(qwen_tok);
    return check_finish();
}
