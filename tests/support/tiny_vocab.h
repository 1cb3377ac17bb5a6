/* tiny_vocab.h: builds a small byte-level BPE vocabulary as a GGUF v3 image in memory (no tensors),
 * for tokenizer tests and the tokenizer fuzz target when ../shared is absent. The 256 byte tokens
 * (GPT-2 byte-to-unicode form), a few merged tokens and merges, one CONTROL, one USER_DEFINED and one
 * UNUSED token. Header-only (static functions) so the fuzz target can include it too. */
#ifndef OC_TINY_VOCAB_H
#define OC_TINY_VOCAB_H

#include <stdint.h>
#include <string.h>

typedef struct tiny_buf {
    unsigned char *b;
    size_t n, cap;   /* n counts past cap too: the caller checks n <= cap */
} tiny_buf;

static void tiny_put(tiny_buf *f, const void *p, size_t n) {
    if (f->n + n <= f->cap) memcpy(f->b + f->n, p, n);
    f->n += n;
}
static void tiny_u32(tiny_buf *f, uint32_t v) {
    unsigned char b[4];
    for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (8 * i));
    tiny_put(f, b, 4);
}
static void tiny_u64(tiny_buf *f, uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
    tiny_put(f, b, 8);
}
static void tiny_strn(tiny_buf *f, const char *s, size_t n) { tiny_u64(f, n); tiny_put(f, s, n); }
static void tiny_str(tiny_buf *f, const char *s) { tiny_strn(f, s, strlen(s)); }
static void tiny_key_str(tiny_buf *f, const char *key, const char *v) { tiny_str(f, key); tiny_u32(f, 8); tiny_str(f, v); }

/* GPT-2 byte -> code point, UTF-8 encoded into out; returns the length. */
static size_t tiny_byte_text(unsigned b, char out[4]) {
    unsigned cp;
    int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    if (printable) cp = b;
    else if (b <= 0x20) cp = 256 + b;
    else if (b <= 0xA0) cp = 256 + 33 + (b - 0x7F);
    else cp = 256 + 67;
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* Merged tokens after the 256 byte tokens ("\xC4\xA0" is 'Ġ', the form of a space), their merges
 * in rank order, and the special tokens. */
static const char *const tiny_merged[] = { "\xC4\xA0t", "he", "\xC4\xA0the", "in", "\xC4\xA0\xC4\xA0", "ing",
                                           "\xC4\xA0\x61" /* "Ġa" */,
                                           "\xC3\x83\xC2\xA4" /* bytes C3 A4 ('ä') */ };
static const char *const tiny_merges[] = { "\xC4\xA0 t", "h e", "\xC4\xA0t he", "i n", "\xC4\xA0 \xC4\xA0",
                                           "in g", "\xC4\xA0 a", "\xC3\x83 \xC2\xA4" };
#define TINY_N_MERGED 8
#define TINY_ID_IM_START (256 + TINY_N_MERGED)      /* CONTROL "<|im_start|>" */
#define TINY_ID_THINK (TINY_ID_IM_START + 1)        /* USER_DEFINED "<think>" */
#define TINY_ID_PAD (TINY_ID_IM_START + 2)          /* UNUSED "[PAD0]" */
#define TINY_N_TOKENS (TINY_ID_IM_START + 3)

/* Writes the file into out[0..cap) and returns its size (> cap means it did not fit).
 * model / pre override the tokenizer.ggml.model / .pre values (NULL: "gpt2" / "qwen2"). */
static size_t tiny_vocab_gguf(unsigned char *out, size_t cap, const char *model, const char *pre) {
    tiny_buf f = { out, 0, cap };
    tiny_put(&f, "GGUF", 4);
    tiny_u32(&f, 3);
    tiny_u64(&f, 0);   /* tensors */
    tiny_u64(&f, 6);   /* keys */
    tiny_key_str(&f, "tokenizer.ggml.model", model ? model : "gpt2");
    tiny_key_str(&f, "tokenizer.ggml.pre", pre ? pre : "qwen2");

    tiny_str(&f, "tokenizer.ggml.tokens");
    tiny_u32(&f, 9); tiny_u32(&f, 8); tiny_u64(&f, TINY_N_TOKENS);
    for (unsigned b = 0; b < 256; b++) {
        char t[4];
        tiny_strn(&f, t, tiny_byte_text(b, t));
    }
    for (int i = 0; i < TINY_N_MERGED; i++) tiny_str(&f, tiny_merged[i]);
    tiny_str(&f, "<|im_start|>");
    tiny_str(&f, "<think>");
    tiny_str(&f, "[PAD0]");

    tiny_str(&f, "tokenizer.ggml.token_type");
    tiny_u32(&f, 9); tiny_u32(&f, 5); tiny_u64(&f, TINY_N_TOKENS);
    for (int i = 0; i < TINY_N_TOKENS; i++)
        tiny_u32(&f, i == TINY_ID_IM_START ? 3u : i == TINY_ID_THINK ? 4u : i == TINY_ID_PAD ? 5u : 1u);

    tiny_str(&f, "tokenizer.ggml.merges");
    tiny_u32(&f, 9); tiny_u32(&f, 8); tiny_u64(&f, TINY_N_MERGED);
    for (int i = 0; i < TINY_N_MERGED; i++) tiny_str(&f, tiny_merges[i]);

    tiny_str(&f, "tokenizer.ggml.eos_token_id");
    tiny_u32(&f, 4); tiny_u32(&f, TINY_ID_IM_START);
    return f.n;
}

#endif /* OC_TINY_VOCAB_H */
