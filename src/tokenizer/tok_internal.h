/* tok_internal.h: the tokenizer's internal layout and the functions its files share
 * (tokenizer.c: open and encode driver; tok_pretok.c: the qwen2 pre-tokenizer; tok_bpe.c: merge
 * table and merge loop; tok_decode.c: byte mapping and decoding). Not API. */
#ifndef OC_TOK_INTERNAL_H
#define OC_TOK_INTERNAL_H

#include "tokenizer/tokenizer.h"

/* One slot of the open-addressing merge table: (left id, right id) -> (rank, merged id).
 * key == OC_MERGE_EMPTY marks a free slot (ids are < 2^31, so no real key has all bits set). */
#define OC_MERGE_EMPTY UINT64_MAX
typedef struct oc_merge_slot {
    uint64_t key;     /* (uint64_t)left << 32 | right */
    uint32_t rank;    /* index in tokenizer.ggml.merges: lower merges first */
    int32_t merged;   /* id of the token left+right */
} oc_merge_slot;

struct oc_tokenizer {
    oc_allocator alloc;
    int32_t n_vocab;
    uint8_t *types;                  /* [n_vocab] oc_token_type */
    uint32_t *text_off;              /* [n_vocab + 1] stored text of id i: text_pool[off[i]..off[i+1]) */
    char *text_pool;
    size_t text_pool_bytes;
    uint32_t *bytes_off;             /* [n_vocab + 1] the same for the decoded bytes */
    uint8_t *bytes_pool;
    size_t bytes_pool_bytes;
    size_t max_token_bytes;

    int32_t *text_hash;              /* [text_hash_mask + 1] ids by stored text, -1 = free */
    uint32_t text_hash_mask;

    oc_merge_slot *merges;           /* [merge_mask + 1] */
    uint32_t merge_mask;
    uint32_t merge_shift;            /* 64 - log2(merge_mask + 1): multiplicative hashing */
    uint32_t n_merges;               /* merges actually in the table */

    int32_t byte_id[256];            /* id of the token for each single byte */

    /* CONTROL and USER_DEFINED tokens, grouped by first byte and longest first within a group:
     * special[special_start[b] .. special_start[b + 1]) start with byte b. */
    int32_t *special;
    uint32_t n_special;
    uint32_t special_start[257];
    uint32_t special_first[8];       /* bit b: some special token starts with byte b */

    oc_tokenizer_special ids;

    int nfc;                                 /* normalize text to NFC before encoding (Qwen2's default) */
    oc_tok_scratch *scratch;                 /* its own, for oc_tokenizer_encode */
};

/* Encode scratch for one piece of up to OC_TOKENIZER_MAX_PIECE_BYTES bytes and one NFC window:
 * the only memory an encode writes, so a tokenizer shared by several users stays read-only. */
struct oc_tok_scratch {
    oc_allocator alloc;
    int32_t *sym_id, *sym_prev, *sym_next;   /* [MAX_PIECE] linked list of symbols */
    uint64_t *heap;                          /* [3 * MAX_PIECE] candidate merges (rank << 32 | left) */
    uint8_t *nfc_buf;                        /* [3 * OC_TOKENIZER_NFC_WINDOW_BYTES] one normalized window */
};

/* Scratch bytes of encode (documented in tokenizer.h). */
#define OC_TOK_HEAP_PER_BYTE 3
#define OC_TOK_SCRATCH_BYTES \
    ((size_t)OC_TOKENIZER_MAX_PIECE_BYTES * (3 * sizeof(int32_t) + OC_TOK_HEAP_PER_BYTE * sizeof(uint64_t)) + \
     3 * (size_t)OC_TOKENIZER_NFC_WINDOW_BYTES)

/* ---- tok_pretok.c ---- */
/* End (exclusive byte offset) of the qwen2 regex piece that starts at s[i], i < n. */
size_t oc_pretok_qwen2_next(const uint8_t *s, size_t n, size_t i);

/* ---- tok_bpe.c ---- */
/* Merge table with room for n_merges entries at <= 2/3 load. */
oc_status oc_bpe_table_alloc(oc_tokenizer *tok, size_t n_merges, oc_error *err);
/* Insert (left, right) -> merged at rank unless the pair is already present (first rank wins). */
void oc_bpe_table_insert(oc_tokenizer *tok, int32_t left, int32_t right, int32_t merged, uint32_t rank);
/* BPE of one piece s[0..n) (1 <= n <= OC_TOKENIZER_MAX_PIECE_BYTES): appends its ids to
 * ids[*n_ids ..] while they fit in max_ids, and always advances *n_ids. */
void oc_bpe_piece(const oc_tokenizer *tok, oc_tok_scratch *sc, const uint8_t *s, size_t n, int32_t *ids,
                  size_t max_ids, size_t *n_ids);

/* ---- tok_decode.c ---- */
/* GPT-2 byte-level mapping: the code point that stands for byte b in token texts ... */
uint32_t oc_byte_to_cp(uint8_t b);
/* ... and back: the byte for cp, or -1 when cp is not one of the 256. */
int oc_cp_to_byte(uint32_t cp);
/* Decoded bytes of a stored NORMAL token text: each mapped code point becomes its byte; anything else
 * (never in a well-formed vocabulary) is copied as is. out needs n bytes; returns the length. */
size_t oc_tok_text_to_bytes(const char *text, size_t n, uint8_t *out);

#endif /* OC_TOK_INTERNAL_H */
