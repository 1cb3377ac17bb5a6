/* tok_pretok.c: the qwen2 pre-tokenizer, written out by hand as a state machine over code points
 * instead of a regex engine. The regex (llama.cpp src/llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_QWEN2;
 * docs/formats.md §4) is, alternative by alternative, tried leftmost-first at each position:
 *   R1 (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])
 *   R2 [^\r\n\p{L}\p{N}]?\p{L}+
 *   R3 \p{N}
 *   R4  ?[^\s\p{L}\p{N}]+[\r\n]*
 *   R5 \s*[\r\n]+       R6 \s+(?!\S)       R7 \s+
 * Invalid UTF-8 bytes are single "code points" of class other. Pure function; no tables but unicode.h. */
#include "tokenizer/tok_internal.h"
#include "tokenizer/unicode.h"

/* Class and length of the code point at s[p] (p < n). */
static inline oc_uclass peek(const uint8_t *s, size_t n, size_t p, uint32_t *cp, size_t *len) {
    if (s[p] < 0x80) {
        *cp = s[p];
        *len = 1;
    } else {
        *len = oc_utf8_decode(s + p, n - p, cp);
    }
    return oc_unicode_class(*cp);
}

/* First offset >= p whose code point is not of class k. */
static size_t skip_class(const uint8_t *s, size_t n, size_t p, oc_uclass k) {
    while (p < n) {
        uint32_t cp;
        size_t len;
        if (peek(s, n, p, &cp, &len) != k) break;
        p += len;
    }
    return p;
}

static size_t skip_crlf(const uint8_t *s, size_t n, size_t p) {
    while (p < n && (s[p] == '\r' || s[p] == '\n')) p++;
    return p;
}

static int ascii_lower(uint8_t b) { return (b >= 'A' && b <= 'Z') ? b + 32 : b; }

size_t oc_pretok_qwen2_next(const uint8_t *s, size_t n, size_t i) {
    uint32_t c, c2 = 0;
    size_t len, len2 = 0;
    oc_uclass k = peek(s, n, i, &c, &len), k2 = OC_UCLASS_OTHER;
    size_t j = i + len;
    int have_next = j < n;
    if (have_next) k2 = peek(s, n, j, &c2, &len2);

    /* R1: English contractions, ASCII case-insensitive. */
    if (c == '\'' && have_next) {
        int a = ascii_lower(s[j]);
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return j + 1;
        if (j + 1 < n) {
            int b = ascii_lower(s[j + 1]);
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return j + 2;
        }
    }
    /* R2: a letter run, optionally led by one code point that is not CR, LF, letter or number.
     * (\p{L}+ is greedy and nothing follows it in the alternative, so no backtracking.) */
    if (k == OC_UCLASS_LETTER) return skip_class(s, n, j, OC_UCLASS_LETTER);
    if (k != OC_UCLASS_NUMBER && c != '\r' && c != '\n' && have_next && k2 == OC_UCLASS_LETTER)
        return skip_class(s, n, j + len2, OC_UCLASS_LETTER);
    /* R3: one number code point (no grouping of digits in qwen2). */
    if (k == OC_UCLASS_NUMBER) return j;
    /* R4: punctuation/symbol run, optionally led by one U+0020, then any CR/LF. */
    if (k == OC_UCLASS_OTHER) return skip_crlf(s, n, skip_class(s, n, j, OC_UCLASS_OTHER));
    if (c == ' ' && have_next && k2 == OC_UCLASS_OTHER)
        return skip_crlf(s, n, skip_class(s, n, j + len2, OC_UCLASS_OTHER));

    /* Only white space is left (k == SPACE). Scan its whole run, remembering where the last code
     * point starts and where the last CR/LF ends. */
    size_t p = i, last_start = i, crlf_end = 0;
    while (p < n) {
        uint32_t cp;
        size_t l;
        if (peek(s, n, p, &cp, &l) != OC_UCLASS_SPACE) break;
        last_start = p;
        p += l;
        if (cp == '\r' || cp == '\n') crlf_end = p;
    }
    /* R5: \s* backtracks to the last CR/LF of the run; [\r\n]+ takes it (the next is not CR/LF). */
    if (crlf_end) return crlf_end;
    /* R6: at the end of the text the whole run; before a non-space, all but its last code point
     * (which then leads the next piece, e.g. " Hello"), when that leaves at least one. */
    if (p == n) return p;
    if (last_start > i) return last_start;
    /* R7: a single white-space code point before a non-space that R2/R4 did not take. */
    return p;
}
