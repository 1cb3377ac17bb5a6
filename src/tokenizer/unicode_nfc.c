/* unicode_nfc.c: NFC normalization (UAX #15: canonical decomposition, canonical ordering, canonical
 * composition), which oc_tokenizer_encode applies by default to match Hugging Face's Qwen2 tokenizer
 * (its tokenizer.json has an NFC normalizer; llama.cpp takes text as is). Streams over the input:
 * code points are decomposed into a small stack buffer that is ordered and composed whenever the next
 * starter cannot combine with what precedes it. Tables: src/tokenizer/unicode_tables.c. */
#include "tokenizer/unicode.h"

#include <string.h>

/* Hangul syllable arithmetic (Unicode §3.12). */
enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7,
       L_COUNT = 19, V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT, S_COUNT = L_COUNT * N_COUNT };

static uint8_t ccc(uint32_t cp) {
    if (cp < 0x300 || cp >= 0x110000) return 0;
    return oc_ccc_blocks[oc_ccc_stage1[cp >> 8] * 256 + (cp & 255)];
}

/* Index of cp in a sorted uint32 table, or -1. */
static long find_u32(const uint32_t *t, uint32_t n, uint32_t cp) {
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (t[mid] < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && t[lo] == cp ? (long)lo : -1;
}

/* Full canonical decomposition of cp into out[0..4); returns the count (1: cp itself). */
static size_t decompose(uint32_t cp, uint32_t out[4]) {
    if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
        uint32_t s = cp - S_BASE, t = s % T_COUNT;
        out[0] = L_BASE + s / N_COUNT;
        out[1] = V_BASE + (s % N_COUNT) / T_COUNT;
        if (!t) return 2;
        out[2] = T_BASE + t;
        return 3;
    }
    long i = cp < 0xC0 ? -1 : find_u32(oc_decomp_cps, oc_decomp_count, cp);
    if (i < 0) {
        out[0] = cp;
        return 1;
    }
    uint32_t off = oc_decomp_off[i], n = off >> 24;
    memcpy(out, oc_decomp_pool + (off & 0xFFFFFF), n * sizeof(uint32_t));
    return n;
}

/* Primary composite of (a, b), or 0. */
static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE && b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    if (a >= 0x200000 || b >= 0x200000) return 0;
    uint64_t key = (uint64_t)a << 21 | b;
    uint32_t lo = 0, hi = oc_compose_count;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (oc_compose_keys[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    return lo < oc_compose_count && oc_compose_keys[lo] == key ? oc_compose_vals[lo] : 0;
}

/* May a normalization segment end right before cp? Only before a starter that cannot combine with
 * a preceding code point. */
static int is_boundary(uint32_t cp) {
    if (cp < 0x300) return 1;
    if (ccc(cp)) return 0;
    if (cp >= V_BASE && cp < T_BASE + T_COUNT) return 0;   /* Hangul V and T jamo */
    return find_u32(oc_compose_second_starters, oc_compose_second_starter_count, cp) < 0;
}

int oc_utf8_nfc_boundary(const uint8_t *s, size_t n) {
    uint32_t cp, d[4];
    oc_utf8_decode(s, n, &cp);
    if (cp == OC_UTF8_INVALID) return 1;   /* copied through after a flush, see oc_utf8_nfc */
    decompose(cp, d);
    return is_boundary(d[0]);
}

typedef struct nfc_out {
    uint8_t *dst;
    size_t cap, n;   /* n counts every byte, also those past cap */
} nfc_out;

static void put_bytes(nfc_out *o, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++, o->n++)
        if (o->n < o->cap) o->dst[o->n] = b[i];
}

/* Order, compose and write buf[0..n). */
static void flush(uint32_t *buf, size_t n, nfc_out *o) {
    if (!n) return;
    /* canonical ordering: stable insertion sort of each run of non-starters by ccc */
    for (size_t i = 1; i < n; i++) {
        uint32_t c = buf[i];
        uint8_t k = ccc(c);
        if (!k) continue;
        size_t j = i;
        while (j > 0 && ccc(buf[j - 1]) > k) { buf[j] = buf[j - 1]; j--; }
        buf[j] = c;
    }
    /* canonical composition: a code point composes with the last starter unless blocked by a
     * code point in between with ccc 0 or ccc >= its own (UAX #15 §1.3, D117) */
    size_t starter = 0, kept = 1;
    int last_class = ccc(buf[0]) ? 256 : 0;
    for (size_t i = 1; i < n; i++) {
        uint32_t c = buf[i];
        int k = ccc(c);
        uint32_t comp = last_class == 256 ? 0 : compose(buf[starter], c);
        if (comp && (last_class < k || last_class == 0)) {
            buf[starter] = comp;
        } else {
            if (k == 0) starter = kept;
            last_class = k;
            buf[kept++] = c;
        }
    }
    for (size_t i = 0; i < kept; i++) {
        uint8_t u[4];
        put_bytes(o, u, oc_utf8_encode(buf[i], u));
    }
}

oc_status oc_utf8_nfc(const uint8_t *src, size_t n_src, uint8_t *dst, size_t cap, size_t *n_out,
                      oc_error *err) {
    if (!n_out || (n_src && !src) || (cap && !dst))
        return oc_fail(err, OC_ERR_INVALID, "nfc: NULL argument");
    nfc_out o = { dst, cap, 0 };
    uint32_t buf[OC_NFC_MAX_SEQ];
    size_t n_buf = 0;
    for (size_t i = 0; i < n_src;) {
        uint32_t cp;
        size_t len = oc_utf8_decode(src + i, n_src - i, &cp);
        if (cp == OC_UTF8_INVALID) {   /* copied through; composes with nothing */
            flush(buf, n_buf, &o);
            n_buf = 0;
            put_bytes(&o, src + i, 1);
            i += 1;
            continue;
        }
        i += len;
        uint32_t d[4];
        size_t nd = decompose(cp, d);
        for (size_t k = 0; k < nd; k++) {
            if (n_buf == OC_NFC_MAX_SEQ || (n_buf && is_boundary(d[k]))) {
                flush(buf, n_buf, &o);
                n_buf = 0;
            }
            buf[n_buf++] = d[k];
        }
    }
    flush(buf, n_buf, &o);
    *n_out = o.n;
    if (o.n > cap) return oc_fail(err, OC_ERR_RANGE, "nfc: needs %zu bytes, the buffer has %zu", o.n, cap);
    return OC_OK;
}
