/* unicode.h: the little Unicode the tokenizer needs: strict UTF-8 decoding, the character classes
 * of the pre-tokenizer regex (\p{L}, \p{N}, \s) and NFC normalization. The tables are generated into
 * src/tokenizer/unicode_tables.c by src/tokenizer/unicode_tables.py (Unicode version in oc_unicode_version). */
#ifndef OC_UNICODE_H
#define OC_UNICODE_H

#include "core/core.h"

#include <stddef.h>
#include <stdint.h>

/* Character classes as the qwen2 / GPT-2 pre-tokenizer regex sees them (mutually exclusive). */
typedef enum oc_uclass {
    OC_UCLASS_OTHER = 0,   /* punctuation, symbols, marks, controls, unassigned, invalid UTF-8 */
    OC_UCLASS_LETTER = 1,  /* \p{L}: Lu Ll Lt Lm Lo */
    OC_UCLASS_NUMBER = 2,  /* \p{N}: Nd Nl No */
    OC_UCLASS_SPACE = 3    /* \s: the White_Space property */
} oc_uclass;

/* Code point value that stands for one byte that is not part of valid UTF-8. */
#define OC_UTF8_INVALID 0xFFFFFFFFu

/* Decode the code point at s[0..n) (n >= 1). Returns its byte length (1..4) and writes the code point
 * to *cp; a byte that does not start a valid, complete, shortest-form, non-surrogate sequence of at
 * most U+10FFFF counts as one byte with *cp = OC_UTF8_INVALID. */
static inline size_t oc_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t b0 = s[0];
    if (b0 < 0x80) { *cp = b0; return 1; }
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        if (n >= 2 && (s[1] & 0xC0) == 0x80) { *cp = ((uint32_t)(b0 & 0x1F) << 6) | (s[1] & 0x3F); return 2; }
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        /* E0 needs A0..BF (no overlongs), ED needs 80..9F (no surrogates) */
        uint8_t lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
        if (n >= 3 && s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80) {
            *cp = ((uint32_t)(b0 & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
            return 3;
        }
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        /* F0 needs 90..BF (no overlongs), F4 needs 80..8F (<= U+10FFFF) */
        uint8_t lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
        if (n >= 4 && s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 && (s[3] & 0xC0) == 0x80) {
            *cp = ((uint32_t)(b0 & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
                  ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
            return 4;
        }
    }
    *cp = OC_UTF8_INVALID;
    return 1;
}

/* Encode cp (<= U+10FFFF, not a surrogate) into out[0..4); returns the byte count. */
static inline size_t oc_utf8_encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) { out[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { out[0] = (uint8_t)(0xC0 | (cp >> 6)); out[1] = (uint8_t)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12)); out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18)); out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Generated tables (src/tokenizer/unicode_tables.c; layouts in src/tokenizer/unicode_tables.py). */
extern const char oc_unicode_version[];
extern const uint8_t oc_uclass_stage1[0x110000 >> 8];
extern const uint8_t oc_uclass_blocks[];
extern const uint8_t oc_ccc_stage1[0x110000 >> 8];
extern const uint8_t oc_ccc_blocks[];
extern const uint32_t oc_decomp_count;
extern const uint32_t oc_decomp_cps[], oc_decomp_off[], oc_decomp_pool[];
extern const uint32_t oc_compose_count;
extern const uint64_t oc_compose_keys[];
extern const uint32_t oc_compose_vals[];
extern const uint32_t oc_compose_second_starter_count;
extern const uint32_t oc_compose_second_starters[];

/* Class of a code point; OC_UTF8_INVALID (and anything above U+10FFFF) is OTHER. */
static inline oc_uclass oc_unicode_class(uint32_t cp) {
    if (cp >= 0x110000) return OC_UCLASS_OTHER;
    uint32_t blk = oc_uclass_stage1[cp >> 8];
    return (oc_uclass)((oc_uclass_blocks[blk * 64 + ((cp & 255) >> 2)] >> ((cp & 3) * 2)) & 3);
}

/* NFC (Unicode canonical composition, UAX #15) of the UTF-8 text src[0..n_src) into dst[0..cap).
 * Invalid UTF-8 bytes are copied through unchanged and act as starters that compose with nothing.
 * The output is at most 3 * n_src bytes (the bound UAX #15 gives for NFC in UTF-8). Writes the
 * output length to *n_out; returns OC_ERR_RANGE (with *n_out = the needed length) when cap is too
 * small. Uses only the stack (a combining sequence longer than OC_NFC_MAX_SEQ code points is
 * normalized in pieces of that length, as the Stream-Safe Text Format of UAX #15 does). */
#define OC_NFC_MAX_SEQ 32
oc_status oc_utf8_nfc(const uint8_t *src, size_t n_src, uint8_t *dst, size_t cap, size_t *n_out,
                      oc_error *err);

/* 1 when NFC may restart at s[0] (n >= 1): the code point there begins with a starter that cannot
 * combine with anything before it (or is an invalid byte), so NFC(a + b) == NFC(a) + NFC(b) for any a
 * when b starts at s. Lets a caller normalize long text in windows through a fixed buffer. */
int oc_utf8_nfc_boundary(const uint8_t *s, size_t n);

#endif /* OC_UNICODE_H */
