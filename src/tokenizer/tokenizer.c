/* tokenizer.c: opens the byte-level BPE tokenizer from the tokenizer.ggml.* keys of a GGUF file
 * (docs/formats.md §4) and drives encoding: special tokens split the text into fragments, the qwen2
 * pre-tokenizer (tok_pretok.c) splits fragments into pieces, BPE (tok_bpe.c) turns pieces into ids.
 * Everything is allocated at open; encode only uses the scratch allocated here. */
#include "tokenizer/tok_internal.h"
#include "tokenizer/unicode.h"

#include <string.h>

/* ---- text -> id hash ------------------------------------------------------------------------- */

/* FNV-1a, continued from h so that a concatenation can be hashed in parts. */
static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const uint8_t *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001B3ull;
    return h;
}
#define FNV_START 0xCBF29CE484222325ull

/* Id whose stored text is a[0..na) followed by b[0..nb), or -1. */
static int32_t find_concat(const oc_tokenizer *tok, const char *a, size_t na, const char *b, size_t nb) {
    uint64_t h = fnv1a(fnv1a(FNV_START, a, na), b, nb);
    for (uint32_t slot = (uint32_t)h & tok->text_hash_mask;; slot = (slot + 1) & tok->text_hash_mask) {
        int32_t id = tok->text_hash[slot];
        if (id < 0) return -1;
        const char *t = tok->text_pool + tok->text_off[id];
        size_t nt = tok->text_off[id + 1] - tok->text_off[id];
        if (nt == na + nb && !memcmp(t, a, na) && !memcmp(t + na, b, nb)) return id;
    }
}

int32_t oc_tokenizer_find(const oc_tokenizer *tok, const char *text, size_t n_bytes) {
    if (!tok || (!text && n_bytes)) return -1;
    return find_concat(tok, text ? text : "", n_bytes, "", 0);
}

/* ---- small helpers ------------------------------------------------------------------------------- */

/* In-place heapsort of 64-bit keys (no allocation, O(n log n) even for hostile vocabularies). */
static void sift_down(uint64_t *a, size_t i, size_t n) {
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && a[c + 1] > a[c]) c++;
        if (a[i] >= a[c]) return;
        uint64_t t = a[i]; a[i] = a[c]; a[c] = t;
        i = c;
    }
}
static void sort_u64(uint64_t *a, size_t n) {
    for (size_t i = n / 2; i-- > 0;) sift_down(a, i, n);
    for (size_t end = n; end-- > 1;) {
        uint64_t t = a[0]; a[0] = a[end]; a[end] = t;
        sift_down(a, 0, end);
    }
}

static int str_eq(oc_str s, const char *lit) { return s.len == strlen(lit) && !memcmp(s.ptr, lit, s.len); }

/* Optional integer key holding a token id; -1 when absent or not a valid id. */
static int32_t opt_token_id(const oc_gguf *g, const char *key, int32_t n_vocab) {
    int64_t v;
    if (oc_gguf_find_key(g, key) < 0 || oc_gguf_get_int(g, key, &v, NULL) != OC_OK) return -1;
    return v >= 0 && v < n_vocab ? (int32_t)v : -1;
}

/* A string-array key with its count; NOT_FOUND / TYPE errors name the key. */
static oc_status get_str_array(const oc_gguf *g, const char *key, int64_t *key_index, uint64_t *count,
                               oc_error *err) {
    oc_gguf_type et;
    *key_index = oc_gguf_find_key(g, key);
    if (*key_index < 0) return oc_fail(err, OC_ERR_NOT_FOUND, "tokenizer: key '%s' is missing", key);
    if (oc_gguf_get_arr(g, key, &et, count, NULL) != OC_OK || et != OC_GGUF_STRING)
        return oc_fail(err, OC_ERR_TYPE, "tokenizer: key '%s' is not an array of strings", key);
    return OC_OK;
}

/* ---- open / close ------------------------------------------------------------------------------ */

void oc_tokenizer_close(oc_tokenizer *tok) {
    if (!tok) return;
    const oc_allocator *a = &tok->alloc;
    size_t n = tok->n_vocab > 0 ? (size_t)tok->n_vocab : 0;
    oc_mem_free(a, tok->types, n);
    oc_mem_free(a, tok->text_off, (n + 1) * sizeof(uint32_t));
    oc_mem_free(a, tok->text_pool, tok->text_pool_bytes);
    oc_mem_free(a, tok->bytes_off, (n + 1) * sizeof(uint32_t));
    oc_mem_free(a, tok->bytes_pool, tok->bytes_pool_bytes);
    if (tok->text_hash) oc_mem_free(a, tok->text_hash, ((size_t)tok->text_hash_mask + 1) * sizeof(int32_t));
    if (tok->merges) oc_mem_free(a, tok->merges, ((size_t)tok->merge_mask + 1) * sizeof(oc_merge_slot));
    oc_mem_free(a, tok->special, tok->n_special * sizeof(int32_t));
    oc_tok_scratch_close(tok->scratch);
    oc_allocator saved = tok->alloc;
    oc_mem_free(&saved, tok, sizeof *tok);
}

/* Copy token texts, types and decoded bytes; build the text hash. */
static oc_status load_tokens(oc_tokenizer *tok, const oc_gguf *g, int64_t ki_tokens, oc_error *err) {
    size_t n = (size_t)tok->n_vocab;
    const oc_allocator *a = &tok->alloc;

    /* token_type is optional (llama.cpp treats every token as NORMAL without it) */
    int64_t ki_types = oc_gguf_find_key(g, "tokenizer.ggml.token_type");
    tok->types = oc_mem_alloc(a, n);
    tok->text_off = oc_mem_alloc(a, (n + 1) * sizeof(uint32_t));
    tok->bytes_off = oc_mem_alloc(a, (n + 1) * sizeof(uint32_t));
    if (!tok->types || !tok->text_off || !tok->bytes_off)
        return oc_fail(err, OC_ERR_NOMEM, "tokenizer: no memory for %zu tokens", n);
    if (ki_types >= 0) {
        oc_gguf_type et;
        uint64_t count;
        if (oc_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &count, NULL) != OC_OK ||
            et == OC_GGUF_STRING || et == OC_GGUF_ARRAY || et == OC_GGUF_F32 || et == OC_GGUF_F64)
            return oc_fail(err, OC_ERR_TYPE, "tokenizer: key 'tokenizer.ggml.token_type' is not an integer array");
        if (count != n)
            return oc_fail(err, OC_ERR_FORMAT, "tokenizer: %llu token types for %zu tokens",
                           (unsigned long long)count, n);
    }

    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t t = ki_types >= 0 ? oc_gguf_arr_int(g, ki_types, i) : OC_TOKEN_NORMAL;
        if (t < OC_TOKEN_UNDEFINED || t > OC_TOKEN_BYTE)
            return oc_fail(err, OC_ERR_FORMAT, "tokenizer: token %zu has type %lld (valid: 0..6)", i, (long long)t);
        tok->types[i] = (uint8_t)t;
        tok->text_off[i] = (uint32_t)total;
        total += oc_gguf_arr_str(g, ki_tokens, i).len;
        if (total > UINT32_MAX)
            return oc_fail(err, OC_ERR_FORMAT, "tokenizer: token texts exceed 4 GiB");
    }
    tok->text_off[n] = (uint32_t)total;
    tok->text_pool_bytes = total ? total : 1;
    tok->bytes_pool_bytes = tok->text_pool_bytes;
    tok->text_pool = oc_mem_alloc(a, tok->text_pool_bytes);
    tok->bytes_pool = oc_mem_alloc(a, tok->bytes_pool_bytes);
    if (!tok->text_pool || !tok->bytes_pool)
        return oc_fail(err, OC_ERR_NOMEM, "tokenizer: no memory for %zu bytes of token text", total);

    size_t n_dec = 0;
    tok->max_token_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        oc_str s = oc_gguf_arr_str(g, ki_tokens, i);
        char *dst = tok->text_pool + tok->text_off[i];
        if (s.len) memcpy(dst, s.ptr, s.len);
        tok->bytes_off[i] = (uint32_t)n_dec;
        /* CONTROL and USER_DEFINED tokens are stored as plain text (the converter writes added
         * tokens' content as is); the rest is in byte-level form. */
        int raw = tok->types[i] == OC_TOKEN_CONTROL || tok->types[i] == OC_TOKEN_USER_DEFINED;
        size_t nb;
        if (raw) {
            if (s.len) memcpy(tok->bytes_pool + n_dec, s.ptr, s.len);
            nb = s.len;
        } else {
            nb = oc_tok_text_to_bytes(dst, s.len, tok->bytes_pool + n_dec);
        }
        n_dec += nb;
        if (nb > tok->max_token_bytes) tok->max_token_bytes = nb;
    }
    tok->bytes_off[n] = (uint32_t)n_dec;

    /* text -> id: open addressing at <= 2/3 load; the first id wins for duplicate texts */
    size_t n_slots = 16;
    while (n_slots < n + n / 2) n_slots *= 2;
    tok->text_hash = oc_mem_alloc(a, n_slots * sizeof(int32_t));
    if (!tok->text_hash) return oc_fail(err, OC_ERR_NOMEM, "tokenizer: no memory for the vocabulary hash");
    tok->text_hash_mask = (uint32_t)(n_slots - 1);
    memset(tok->text_hash, 0xFF, n_slots * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) {
        const char *t = tok->text_pool + tok->text_off[i];
        size_t nt = tok->text_off[i + 1] - tok->text_off[i];
        uint32_t slot = (uint32_t)fnv1a(FNV_START, t, nt) & tok->text_hash_mask;
        for (;; slot = (slot + 1) & tok->text_hash_mask) {
            int32_t id = tok->text_hash[slot];
            if (id < 0) { tok->text_hash[slot] = (int32_t)i; break; }
            if (tok->text_off[id + 1] - tok->text_off[id] == nt && !memcmp(tok->text_pool + tok->text_off[id], t, nt))
                break;
        }
    }
    return OC_OK;
}

/* Byte tokens and the merge table. Merges naming tokens that do not exist are skipped (llama.cpp
 * accepts them too; they could never produce a token). */
static oc_status load_merges(oc_tokenizer *tok, const oc_gguf *g, oc_error *err) {
    for (int b = 0; b < 256; b++) {
        uint8_t u[4];
        size_t nu = oc_utf8_encode(oc_byte_to_cp((uint8_t)b), u);
        tok->byte_id[b] = find_concat(tok, (const char *)u, nu, "", 0);
        if (tok->byte_id[b] < 0)
            return oc_fail(err, OC_ERR_FORMAT, "tokenizer: the vocabulary has no token for byte 0x%02x", b);
    }
    int64_t ki;
    uint64_t n_merges;
    oc_status st = get_str_array(g, "tokenizer.ggml.merges", &ki, &n_merges, err);
    if (st) return st;
    if (n_merges > UINT32_MAX / 4) return oc_fail(err, OC_ERR_FORMAT, "tokenizer: too many merges");
    st = oc_bpe_table_alloc(tok, (size_t)n_merges, err);
    if (st) return st;
    for (uint64_t r = 0; r < n_merges; r++) {
        oc_str m = oc_gguf_arr_str(g, ki, r);
        /* "left right": split at the first space after the first byte, as llama.cpp does */
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        if (!sp) return oc_fail(err, OC_ERR_FORMAT, "tokenizer: merge %llu is not 'left right'", (unsigned long long)r);
        size_t nl = (size_t)(sp - m.ptr), nr = m.len - nl - 1;
        int32_t left = find_concat(tok, m.ptr, nl, "", 0);
        int32_t right = find_concat(tok, sp + 1, nr, "", 0);
        int32_t merged = find_concat(tok, m.ptr, nl, sp + 1, nr);
        if (left >= 0 && right >= 0 && merged >= 0) oc_bpe_table_insert(tok, left, right, merged, (uint32_t)r);
    }
    return OC_OK;
}

/* CONTROL and USER_DEFINED tokens, bucketed by first byte, longest first in each bucket. */
static oc_status load_special(oc_tokenizer *tok, oc_error *err) {
    uint32_t n = 0;
    for (int32_t i = 0; i < tok->n_vocab; i++)
        if ((tok->types[i] == OC_TOKEN_CONTROL || tok->types[i] == OC_TOKEN_USER_DEFINED) &&
            tok->text_off[i + 1] > tok->text_off[i])
            n++;
    memset(tok->special_start, 0, sizeof tok->special_start);
    memset(tok->special_first, 0, sizeof tok->special_first);
    tok->n_special = 0;
    if (!n) return OC_OK;
    uint64_t *keys = oc_mem_alloc(&tok->alloc, (size_t)n * sizeof(uint64_t));
    tok->special = oc_mem_alloc(&tok->alloc, (size_t)n * sizeof(int32_t));
    if (!keys || !tok->special) {
        oc_mem_free(&tok->alloc, keys, (size_t)n * sizeof(uint64_t));
        oc_mem_free(&tok->alloc, tok->special, (size_t)n * sizeof(int32_t));
        tok->special = NULL;
        return oc_fail(err, OC_ERR_NOMEM, "tokenizer: no memory for %u special tokens", n);
    }
    tok->n_special = n;
    uint32_t k = 0;
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        uint32_t len = tok->text_off[i + 1] - tok->text_off[i];
        if ((tok->types[i] != OC_TOKEN_CONTROL && tok->types[i] != OC_TOKEN_USER_DEFINED) || !len) continue;
        uint8_t first = (uint8_t)tok->text_pool[tok->text_off[i]];
        uint64_t inv_len = len >= 0xFFFFFF ? 0 : 0xFFFFFF - len;   /* longer sorts first */
        keys[k++] = (uint64_t)first << 56 | inv_len << 32 | (uint32_t)i;
        tok->special_first[first >> 5] |= 1u << (first & 31);
        tok->special_start[first + 1]++;
    }
    sort_u64(keys, n);
    for (uint32_t j = 0; j < n; j++) tok->special[j] = (int32_t)(uint32_t)keys[j];
    for (int b = 0; b < 256; b++) tok->special_start[b + 1] += tok->special_start[b];
    oc_mem_free(&tok->alloc, keys, (size_t)n * sizeof(uint64_t));
    return OC_OK;
}

oc_status oc_tokenizer_open_gguf(oc_tokenizer **out, const oc_gguf *g, const oc_allocator *alloc,
                                 oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "tokenizer: out is NULL");
    *out = NULL;
    if (!g) return oc_fail(err, OC_ERR_INVALID, "tokenizer: gguf handle is NULL");
    if (!alloc || !alloc->fn) alloc = oc_default_allocator();

    oc_str model, pre;
    if (oc_gguf_find_key(g, "tokenizer.ggml.model") < 0)
        return oc_fail(err, OC_ERR_NOT_FOUND, "tokenizer: key 'tokenizer.ggml.model' is missing");
    if (oc_gguf_get_str(g, "tokenizer.ggml.model", &model, NULL) != OC_OK)
        return oc_fail(err, OC_ERR_TYPE, "tokenizer: key 'tokenizer.ggml.model' is not a string");
    if (!str_eq(model, "gpt2"))
        return oc_fail(err, OC_ERR_UNSUPPORTED, "tokenizer: model '%.*s' is not supported (only 'gpt2', "
                       "byte-level BPE)", (int)OC_MIN(model.len, 64), model.ptr);
    if (oc_gguf_find_key(g, "tokenizer.ggml.pre") < 0)
        return oc_fail(err, OC_ERR_UNSUPPORTED, "tokenizer: key 'tokenizer.ggml.pre' is missing (llama.cpp "
                       "would use the GPT-2 pre-tokenizer; only 'qwen2' is supported)");
    if (oc_gguf_get_str(g, "tokenizer.ggml.pre", &pre, NULL) != OC_OK)
        return oc_fail(err, OC_ERR_TYPE, "tokenizer: key 'tokenizer.ggml.pre' is not a string");
    if (!str_eq(pre, "qwen2") && !str_eq(pre, "deepseek-r1-qwen"))
        return oc_fail(err, OC_ERR_UNSUPPORTED, "tokenizer: pre-tokenizer '%.*s' is not supported (only "
                       "'qwen2')", (int)OC_MIN(pre.len, 64), pre.ptr);

    int64_t ki_tokens;
    uint64_t n_tokens;
    oc_status st = get_str_array(g, "tokenizer.ggml.tokens", &ki_tokens, &n_tokens, err);
    if (st) return st;
    if (n_tokens < 256 || n_tokens > (uint64_t)INT32_MAX / 2)
        return oc_fail(err, OC_ERR_FORMAT, "tokenizer: %llu tokens (expected 256 .. 2^30)",
                       (unsigned long long)n_tokens);

    oc_tokenizer *tok = oc_mem_calloc(alloc, sizeof *tok);
    if (!tok) return oc_fail(err, OC_ERR_NOMEM, "tokenizer: no memory");
    tok->alloc = *alloc;
    tok->n_vocab = (int32_t)n_tokens;
    /* Hugging Face's tokenizer.json for Qwen2 (and Qwen2-VL, Qwen2.5-VL) normalizes to NFC; the GGUF
     * does not record normalizers, so the pre-tokenizer name stands for it ("deepseek-r1-qwen" names
     * another tokenizer.json, which we do not claim to match). */
    tok->nfc = str_eq(pre, "qwen2");

    st = load_tokens(tok, g, ki_tokens, err);
    if (!st) st = load_merges(tok, g, err);
    if (!st) st = load_special(tok, err);
    if (!st) st = oc_tok_scratch_open(&tok->scratch, alloc, err);
    if (st) {
        oc_tokenizer_close(tok);
        return st;
    }
    int32_t n = tok->n_vocab;
    tok->ids.bos = opt_token_id(g, "tokenizer.ggml.bos_token_id", n);
    tok->ids.eos = opt_token_id(g, "tokenizer.ggml.eos_token_id", n);
    tok->ids.pad = opt_token_id(g, "tokenizer.ggml.padding_token_id", n);
    tok->ids.unk = opt_token_id(g, "tokenizer.ggml.unknown_token_id", n);
    int add_bos = 0;
    if (oc_gguf_find_key(g, "tokenizer.ggml.add_bos_token") >= 0 &&
        oc_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos, NULL) != OC_OK)
        add_bos = 0;
    tok->ids.add_bos = add_bos != 0;
    *out = tok;
    return OC_OK;
}

/* ---- getters ------------------------------------------------------------------------------------ */

int32_t oc_tokenizer_n_vocab(const oc_tokenizer *tok) { return tok ? tok->n_vocab : 0; }

oc_str oc_tokenizer_token_text(const oc_tokenizer *tok, int32_t id) {
    oc_str s = { NULL, 0 };
    if (tok && id >= 0 && id < tok->n_vocab) {
        s.ptr = tok->text_pool + tok->text_off[id];
        s.len = tok->text_off[id + 1] - tok->text_off[id];
    }
    return s;
}

oc_str oc_tokenizer_token_bytes(const oc_tokenizer *tok, int32_t id) {
    oc_str s = { NULL, 0 };
    if (tok && id >= 0 && id < tok->n_vocab) {
        s.ptr = (const char *)tok->bytes_pool + tok->bytes_off[id];
        s.len = tok->bytes_off[id + 1] - tok->bytes_off[id];
    }
    return s;
}

int oc_tokenizer_token_type(const oc_tokenizer *tok, int32_t id) {
    return tok && id >= 0 && id < tok->n_vocab ? tok->types[id] : OC_TOKEN_UNDEFINED;
}

size_t oc_tokenizer_max_token_bytes(const oc_tokenizer *tok) { return tok ? tok->max_token_bytes : 0; }

oc_tokenizer_special oc_tokenizer_special_ids(const oc_tokenizer *tok) {
    oc_tokenizer_special none = { -1, -1, -1, -1, 0 };
    return tok ? tok->ids : none;
}

/* ---- encode --------------------------------------------------------------------------------------- */

void oc_tok_scratch_close(oc_tok_scratch *sc) {
    if (!sc) return;
    oc_allocator a = sc->alloc;
    oc_mem_free(&a, sc->sym_id, OC_TOKENIZER_MAX_PIECE_BYTES * sizeof(int32_t));
    oc_mem_free(&a, sc->sym_prev, OC_TOKENIZER_MAX_PIECE_BYTES * sizeof(int32_t));
    oc_mem_free(&a, sc->sym_next, OC_TOKENIZER_MAX_PIECE_BYTES * sizeof(int32_t));
    oc_mem_free(&a, sc->heap, (size_t)OC_TOK_HEAP_PER_BYTE * OC_TOKENIZER_MAX_PIECE_BYTES * sizeof(uint64_t));
    oc_mem_free(&a, sc->nfc_buf, 3 * (size_t)OC_TOKENIZER_NFC_WINDOW_BYTES);
    oc_mem_free(&a, sc, sizeof *sc);
}

oc_status oc_tok_scratch_open(oc_tok_scratch **out, const oc_allocator *alloc, oc_error *err) {
    *out = NULL;
    if (!alloc || !alloc->fn) alloc = oc_default_allocator();
    oc_tok_scratch *sc = oc_mem_calloc(alloc, sizeof *sc);
    if (!sc) return oc_fail(err, OC_ERR_NOMEM, "tokenizer: no memory for the encode scratch");
    sc->alloc = *alloc;
    sc->sym_id = oc_mem_alloc(alloc, OC_TOKENIZER_MAX_PIECE_BYTES * sizeof(int32_t));
    sc->sym_prev = oc_mem_alloc(alloc, OC_TOKENIZER_MAX_PIECE_BYTES * sizeof(int32_t));
    sc->sym_next = oc_mem_alloc(alloc, OC_TOKENIZER_MAX_PIECE_BYTES * sizeof(int32_t));
    sc->heap = oc_mem_alloc(alloc, (size_t)OC_TOK_HEAP_PER_BYTE * OC_TOKENIZER_MAX_PIECE_BYTES * sizeof(uint64_t));
    sc->nfc_buf = oc_mem_alloc(alloc, 3 * (size_t)OC_TOKENIZER_NFC_WINDOW_BYTES);
    if (!sc->sym_id || !sc->sym_prev || !sc->sym_next || !sc->heap || !sc->nfc_buf) {
        oc_tok_scratch_close(sc);
        return oc_fail(err, OC_ERR_NOMEM, "tokenizer: no memory for the encode scratch");
    }
    *out = sc;
    return OC_OK;
}

size_t oc_tok_scratch_bytes(void) { return OC_TOK_SCRATCH_BYTES; }

/* The struct and its five buffers, each as oc_mem_alloc asks its allocator (+ OC_MEM_ALIGN). */
size_t oc_tok_scratch_memory_bytes(void) { return sizeof(oc_tok_scratch) + OC_TOK_SCRATCH_BYTES + 6 * OC_MEM_ALIGN; }

/* Pre-tokenize one fragment (text between special tokens) and BPE each piece. */
static void encode_fragment(const oc_tokenizer *tok, oc_tok_scratch *sc, const uint8_t *s, size_t n, int32_t *ids, size_t max_ids,
                            size_t *n_ids) {
    size_t i = 0;
    while (i < n) {
        size_t end = oc_pretok_qwen2_next(s, n, i);
        /* an over-long piece is cut into windows at code point boundaries (see tokenizer.h) */
        while (end - i > OC_TOKENIZER_MAX_PIECE_BYTES) {
            size_t cut = OC_TOKENIZER_MAX_PIECE_BYTES;
            for (int back = 0; back < 3 && (s[i + cut] & 0xC0) == 0x80; back++) cut--;
            oc_bpe_piece(tok, sc, s + i, cut, ids, max_ids, n_ids);
            i += cut;
        }
        oc_bpe_piece(tok, sc, s + i, end - i, ids, max_ids, n_ids);
        i = end;
    }
}

/* Where to end the NFC window that starts at s[0] of s[0..n) (n > OC_TOKENIZER_NFC_WINDOW_BYTES):
 * preferably after a run of line breaks before a visible ASCII character (the qwen2 pre-tokenizer
 * always cuts there: no regex branch crosses from [\r\n] to a non-space), else at the last place NFC
 * may restart; 0 when there is none in the window. */
static size_t nfc_window_end(const uint8_t *s, size_t n) {
    size_t max = OC_TOKENIZER_NFC_WINDOW_BYTES;
    for (size_t j = max; j > 0; j--)
        if ((s[j - 1] == '\n' || s[j - 1] == '\r') && s[j] > ' ' && s[j] < 0x7F) return j;
    for (size_t j = max; j > 0; j--)
        if ((s[j] & 0xC0) != 0x80 && oc_utf8_nfc_boundary(s + j, n - j)) return j;
    return 0;
}

/* Encode one fragment (text between special tokens), normalized to NFC in windows when nfc is set. */
static void encode_text(const oc_tokenizer *tok, oc_tok_scratch *sc, const uint8_t *s, size_t n, int nfc, int32_t *ids, size_t max_ids,
                        size_t *n_ids) {
    size_t i = 0;
    while (nfc && i < n && s[i] < 0x80) i++;
    if (!nfc || i == n) {   /* as is, or ASCII (NFC already) */
        encode_fragment(tok, sc, s, n, ids, max_ids, n_ids);
        return;
    }
    for (i = 0; i < n;) {
        size_t len = n - i;
        if (len > OC_TOKENIZER_NFC_WINDOW_BYTES) {
            size_t end = nfc_window_end(s + i, n - i);
            if (!end) {   /* no restart point in 16 KiB (a run of combining marks): cut at a code point */
                end = OC_TOKENIZER_NFC_WINDOW_BYTES;
                while (end > 1 && (s[i + end] & 0xC0) == 0x80) end--;
            }
            len = end;
        }
        size_t n_norm = 0;
        /* cannot fail: 3 bytes of output per byte of input is NFC's bound (unicode.h) */
        oc_utf8_nfc(s + i, len, sc->nfc_buf, 3 * (size_t)OC_TOKENIZER_NFC_WINDOW_BYTES, &n_norm, NULL);
        encode_fragment(tok, sc, sc->nfc_buf, n_norm, ids, max_ids, n_ids);
        i += len;
    }
}

/* Longest allowed special token at s[0..n); its length (0: none) and id. */
static size_t match_special(const oc_tokenizer *tok, const uint8_t *s, size_t n, int parse_control, int32_t *id) {
    for (uint32_t j = tok->special_start[s[0]]; j < tok->special_start[s[0] + 1]; j++) {
        int32_t t = tok->special[j];
        if (tok->types[t] == OC_TOKEN_CONTROL && !parse_control) continue;
        size_t len = tok->text_off[t + 1] - tok->text_off[t];
        if (len <= n && !memcmp(tok->text_pool + tok->text_off[t], s, len)) {
            *id = t;
            return len;
        }
    }
    return 0;
}

oc_status oc_tokenizer_encode(oc_tokenizer *tok, const char *text, size_t n_bytes, int flags,
                              int32_t *ids, size_t max_ids, size_t *n_ids, oc_error *err) {
    return oc_tokenizer_encode_with(tok, tok ? tok->scratch : NULL, text, n_bytes, flags, ids, max_ids, n_ids, err);
}

oc_status oc_tokenizer_encode_with(const oc_tokenizer *tok, oc_tok_scratch *sc, const char *text, size_t n_bytes,
                                   int flags, int32_t *ids, size_t max_ids, size_t *n_ids, oc_error *err) {
    if (!tok || !sc || !n_ids || (n_bytes && !text) || (max_ids && !ids))
        return oc_fail(err, OC_ERR_INVALID, "tokenizer: encode: NULL argument");
    const uint8_t *s = (const uint8_t *)text;
    size_t count = 0, frag = 0;
    int parse_control = (flags & OC_TOK_PARSE_SPECIAL) != 0;
    int nfc = tok->nfc && !(flags & OC_TOK_NO_NFC);
    if (tok->n_special) {
        for (size_t i = 0; i < n_bytes;) {
            int32_t id;
            size_t len;
            if ((tok->special_first[s[i] >> 5] >> (s[i] & 31) & 1) &&
                (len = match_special(tok, s + i, n_bytes - i, parse_control, &id)) != 0) {
                encode_text(tok, sc, s + frag, i - frag, nfc, ids, max_ids, &count);
                if (count < max_ids) ids[count] = id;
                count++;
                i += len;
                frag = i;
            } else {
                i++;
            }
        }
    }
    encode_text(tok, sc, s + frag, n_bytes - frag, nfc, ids, max_ids, &count);
    *n_ids = count;
    if (count > max_ids)
        return oc_fail(err, OC_ERR_RANGE, "tokenizer: %zu tokens do not fit in a buffer of %zu", count, max_ids);
    return OC_OK;
}
