/* tok_decode.c: token ids back to bytes. The GPT-2 byte-level mapping (bytes_to_unicode in OpenAI's
 * gpt-2 encoder.py, used by HF's ByteLevel pre-tokenizer/decoder): the printable bytes 0x21-0x7E,
 * 0xA1-0xAC and 0xAE-0xFF stand for themselves, the other 68 bytes in increasing order for
 * U+0100, U+0101, ... U+0143. Also oc_tokenizer_decode and the streaming decoder, which holds back a
 * UTF-8 sequence until a later token completes it. */
#include "tokenizer/tok_internal.h"
#include "tokenizer/unicode.h"

#include <string.h>

static int byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* The 68 non-printable bytes are 0x00-0x20 (33), 0x7F-0xA0 (34) and 0xAD, mapped in that order. */
uint32_t oc_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    if (b <= 0x20) return 256u + b;
    if (b <= 0xA0) return 256u + 33 + (b - 0x7Fu);
    return 256u + 67;   /* 0xAD */
}

int oc_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t k = cp - 256;
    if (k < 33) return (int)k;
    if (k < 67) return (int)(0x7F + k - 33);
    return 0xAD;
}

size_t oc_tok_text_to_bytes(const char *text, size_t n, uint8_t *out) {
    const uint8_t *s = (const uint8_t *)text;
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        size_t len = oc_utf8_decode(s + i, n - i, &cp);
        int b = cp == OC_UTF8_INVALID ? -1 : oc_cp_to_byte(cp);
        if (b >= 0) {
            out[o++] = (uint8_t)b;
        } else {
            memcpy(out + o, s + i, len);
            o += len;
        }
        i += len;
    }
    return o;
}

/* Bytes the decoder emits for id: none for UNUSED tokens (padding that a model should never emit),
 * none for CONTROL tokens unless asked (llama.cpp's token_to_piece does the same). */
static oc_str decoded_piece(const oc_tokenizer *tok, int32_t id, int flags) {
    oc_str s = oc_tokenizer_token_bytes(tok, id);
    int type = tok->types[id];
    if (type == OC_TOKEN_UNUSED || (type == OC_TOKEN_CONTROL && !(flags & OC_TOK_DECODE_SPECIAL)))
        s.len = 0;
    return s;
}

oc_status oc_tokenizer_decode(const oc_tokenizer *tok, const int32_t *ids, size_t n_ids, int flags,
                              char *out, size_t cap, size_t *n_out, oc_error *err) {
    if (!tok || !n_out || (n_ids && !ids) || (cap && !out))
        return oc_fail(err, OC_ERR_INVALID, "tokenizer: decode: NULL argument");
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= tok->n_vocab) {
            *n_out = total;
            return oc_fail(err, OC_ERR_INVALID, "tokenizer: decode: token id %ld at index %zu is not in "
                           "0..%ld", (long)ids[i], i, (long)tok->n_vocab - 1);
        }
        oc_str p = decoded_piece(tok, ids[i], flags);
        if (total < cap) memcpy(out + total, p.ptr, OC_MIN(p.len, cap - total));
        total += p.len;
    }
    *n_out = total;
    if (total > cap)
        return oc_fail(err, OC_ERR_RANGE, "tokenizer: decode needs %zu bytes, the buffer has %zu", total, cap);
    return OC_OK;
}

void oc_tok_decoder_init(oc_tok_decoder *d, int flags) {
    memset(d, 0, sizeof *d);
    d->flags = flags;
}

/* Length of the UTF-8 sequence that lead byte b starts (2..4), or 0 when b cannot start one. */
static size_t utf8_seq_len(uint8_t b) {
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

/* Can t[0..n) (n < full length, t[0] a lead byte) still grow into a valid sequence? Checks the
 * second byte's range as oc_utf8_decode does (no overlongs, surrogates or > U+10FFFF). */
static int utf8_valid_prefix(const uint8_t *t, size_t n) {
    if (n >= 2) {
        uint8_t lo = 0x80, hi = 0xBF;
        if (t[0] == 0xE0) lo = 0xA0;
        else if (t[0] == 0xED) hi = 0x9F;
        else if (t[0] == 0xF0) lo = 0x90;
        else if (t[0] == 0xF4) hi = 0x8F;
        if (t[1] < lo || t[1] > hi) return 0;
    }
    for (size_t i = 2; i < n; i++)
        if ((t[i] & 0xC0) != 0x80) return 0;
    return 1;
}

oc_status oc_tok_decoder_push(oc_tok_decoder *d, const oc_tokenizer *tok, int32_t id, char *out,
                              size_t cap, size_t *n_out, oc_error *err) {
    if (!d || !tok || !n_out || (cap && !out))
        return oc_fail(err, OC_ERR_INVALID, "tokenizer: decoder: NULL argument");
    if (id < 0 || id >= tok->n_vocab)
        return oc_fail(err, OC_ERR_INVALID, "tokenizer: decoder: token id %ld is not in 0..%ld", (long)id,
                       (long)tok->n_vocab - 1);
    oc_str p = decoded_piece(tok, id, d->flags);
    /* The stream is held || piece; find where its incomplete tail (if any) starts: the last lead byte
     * among the final 3 bytes, if the bytes after it are a valid but unfinished sequence. */
    size_t total = d->n_held + p.len, tail = total;
    const uint8_t *pb = (const uint8_t *)p.ptr;
#define STREAM_AT(k) ((k) < d->n_held ? d->held[k] : pb[(k) - d->n_held])
    for (size_t back = 1; back <= 3 && back <= total; back++) {
        size_t k = total - back;
        uint8_t b = STREAM_AT(k);
        if ((b & 0xC0) == 0x80) continue;   /* a continuation byte: keep looking for its lead */
        size_t need = utf8_seq_len(b);
        if (need > back) {
            uint8_t t[4];
            for (size_t q = 0; q < back; q++) t[q] = STREAM_AT(k + q);
            if (utf8_valid_prefix(t, back)) tail = k;
        }
        break;
    }
    size_t n_emit = tail;
    if (n_emit > cap) {
        *n_out = n_emit;
        return oc_fail(err, OC_ERR_RANGE, "tokenizer: decoder needs %zu bytes, the buffer has %zu", n_emit, cap);
    }
    uint8_t next_held[4];
    size_t n_next = total - tail;
    for (size_t q = 0; q < n_next; q++) next_held[q] = STREAM_AT(tail + q);
    for (size_t q = 0; q < n_emit; q++) out[q] = (char)STREAM_AT(q);
#undef STREAM_AT
    memcpy(d->held, next_held, n_next);
    d->n_held = (uint32_t)n_next;
    *n_out = n_emit;
    return OC_OK;
}

size_t oc_tok_decoder_flush(oc_tok_decoder *d, char out[4]) {
    size_t n = d->n_held;
    memcpy(out, d->held, n);
    d->n_held = 0;
    return n;
}
