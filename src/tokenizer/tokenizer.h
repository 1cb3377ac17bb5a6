/* tokenizer.h: the byte-level BPE tokenizer of Qwen2 / Qwen2-VL / Qwen2.5-VL, loaded from the
 * tokenizer.ggml.* keys of a GGUF file (docs/formats.md §4), and its streaming decoder.
 *
 * Behaviour is llama.cpp's (tokenizer.ggml.model "gpt2", pre "qwen2"):
 *  - Text is normalized to NFC first, as Hugging Face's Qwen2 tokenizer does (its tokenizer.json has
 *    an NFC normalizer; llama.cpp does not normalize, so for non-NFC input such as decomposed accents
 *    our ids are HF's, not llama.cpp's). Special tokens are matched before normalizing, as HF does.
 *    OC_TOK_NO_NFC takes the text as is (llama.cpp's ids); then decode(encode(x)) == x for every byte
 *    string x, valid UTF-8 or not, and with NFC decode(encode(x)) == NFC(x). Normalizing needs no
 *    memory beyond the scratch: text that is not ASCII is normalized in windows of at most
 *    OC_TOKENIZER_NFC_WINDOW_BYTES, cut where NFC may restart and, where the window allows, after a
 *    line break before a visible ASCII character, where the pre-tokenizer always cuts too (so only
 *    non-ASCII text with no such line break in 16 KiB can tokenize differently at a window's end).
 *  - Invalid UTF-8 bytes are kept: each one is a "code point" of class other for the pre-tokenizer and
 *    is byte-encoded like any byte (llama.cpp would replace it with U+FFFD first).
 *  - USER_DEFINED tokens (token_type 4, e.g. <tool_call>, <think>) are always matched in the text;
 *    CONTROL tokens (token_type 3, e.g. <|im_start|>) only with OC_TOK_PARSE_SPECIAL. This is what
 *    llama.cpp does, and Hugging Face too for added tokens that are not special.
 *  - Special tokens are matched leftmost-longest.
 *
 * Threads: everything but oc_tokenizer_encode is read-only and may be called from any thread.
 * oc_tokenizer_encode uses the tokenizer's own scratch memory: one encode at a time per tokenizer.
 * oc_tokenizer_encode_with takes the caller's scratch instead, so one tokenizer serves several
 * users at once (a model's contexts share its tokenizer, each with its own oc_tok_scratch).
 * Memory, all allocated at open (Qwen2, 151,936 tokens, 151,387 merges): about 10 MB: the merge
 * table 4 MiB, the text hash 1 MiB, token texts in stored and decoded form 2 x 1.3 MB, offsets
 * 1.2 MB, encode scratch 624 KiB (OC_TOK_SCRATCH_BYTES, fixed whatever the text length).
 */
#ifndef OC_TOKENIZER_H
#define OC_TOKENIZER_H

#include "core/core.h"

#include <stddef.h>
#include <stdint.h>

typedef struct oc_tokenizer oc_tokenizer;

/* token_type values of tokenizer.ggml.token_type (llama.cpp's llama_token_type). */
typedef enum oc_token_type {
    OC_TOKEN_UNDEFINED = 0,
    OC_TOKEN_NORMAL = 1,
    OC_TOKEN_UNKNOWN = 2,
    OC_TOKEN_CONTROL = 3,
    OC_TOKEN_USER_DEFINED = 4,
    OC_TOKEN_UNUSED = 5,
    OC_TOKEN_BYTE = 6
} oc_token_type;

/* Pre-tokens (pieces the regex splits text into) longer than this are split into consecutive
 * windows of at most this many bytes (at code point boundaries) before BPE: encode's scratch is
 * sized for it at open (about 36 bytes per piece byte, ~590 KB). Only text with more than 16 KiB of
 * letters, of punctuation or of white space in a row is affected: there the ids can differ from
 * llama.cpp's (decoding still gives the text back). */
#define OC_TOKENIZER_MAX_PIECE_BYTES 16384
/* Input bytes normalized at a time (the output buffer is 3x this: NFC at most triples UTF-8). */
#define OC_TOKENIZER_NFC_WINDOW_BYTES 16384

/* Open from a GGUF handle (which may be closed afterwards: everything needed is copied). Requires
 * tokenizer.ggml.model == "gpt2", tokenizer.ggml.pre == "qwen2" (or "deepseek-r1-qwen", which
 * llama.cpp maps to the same pre-tokenizer), and the tokens, token_type and merges arrays. All
 * memory is allocated here.
 * [errors: OC_ERR_NOT_FOUND (a required key is missing), OC_ERR_TYPE, OC_ERR_UNSUPPORTED (another
 *  model or pre-tokenizer), OC_ERR_FORMAT (inconsistent arrays, ids out of range), OC_ERR_NOMEM] */
oc_status oc_tokenizer_open_gguf(oc_tokenizer **out, const oc_gguf *g, const oc_allocator *alloc,
                                 oc_error *err);
void oc_tokenizer_close(oc_tokenizer *tok);

/* Flags for oc_tokenizer_encode (1 == "parse special", so a C boolean works too). */
#define OC_TOK_PARSE_SPECIAL 1
#define OC_TOK_NO_NFC 2        /* take the text as is (llama.cpp's behaviour), see above */

/* Tokenize text[0..n_bytes) into ids[0..max_ids). Writes the number of tokens to *n_ids. When they do
 * not all fit, the first max_ids are written, *n_ids is the full count, and OC_ERR_RANGE is returned
 * (so a call with max_ids == 0 measures; 3 * n_bytes is always an upper bound, n_bytes with
 * OC_TOK_NO_NFC or for NFC text). No BOS/EOS is added.
 * [alloc: no] [thread: one encode at a time per tokenizer] [errors: OC_ERR_INVALID, OC_ERR_RANGE] */
oc_status oc_tokenizer_encode(oc_tokenizer *tok, const char *text, size_t n_bytes, int flags,
                              int32_t *ids, size_t max_ids, size_t *n_ids, oc_error *err);

/* Encode scratch of one user (OC_TOK_SCRATCH_BYTES, fixed): what oc_tokenizer_encode_with
 * writes. [alloc: yes, once] [errors: OC_ERR_NOMEM] */
typedef struct oc_tok_scratch oc_tok_scratch;
oc_status oc_tok_scratch_open(oc_tok_scratch **out, const oc_allocator *alloc, oc_error *err);
void oc_tok_scratch_close(oc_tok_scratch *sc);   /* NULL is a no-op */
size_t oc_tok_scratch_bytes(void);               /* its buffers' bytes, not the small header */
size_t oc_tok_scratch_memory_bytes(void);        /* all oc_tok_scratch_open takes from its allocator */
/* oc_tokenizer_encode with the caller's scratch: tok is only read.
 * [alloc: no] [thread: one encode at a time per scratch] [errors: as oc_tokenizer_encode] */
oc_status oc_tokenizer_encode_with(const oc_tokenizer *tok, oc_tok_scratch *scratch, const char *text,
                                   size_t n_bytes, int flags, int32_t *ids, size_t max_ids, size_t *n_ids,
                                   oc_error *err);

int32_t oc_tokenizer_n_vocab(const oc_tokenizer *tok);
/* The token's text as stored in the GGUF (byte-level form: "Ġthe" for " the"); {NULL, 0} when id is
 * out of range. Borrowed. */
oc_str oc_tokenizer_token_text(const oc_tokenizer *tok, int32_t id);
/* The bytes the token stands for (" the"); for CONTROL / USER_DEFINED tokens their text
 * ("<|im_end|>"). {NULL, 0} when id is out of range. Borrowed. */
oc_str oc_tokenizer_token_bytes(const oc_tokenizer *tok, int32_t id);
/* token_type of id (an oc_token_type), OC_TOKEN_UNDEFINED when out of range. */
int oc_tokenizer_token_type(const oc_tokenizer *tok, int32_t id);
/* Longest oc_tokenizer_token_bytes of any token: bounds one decoder push (plus 3 held bytes). */
size_t oc_tokenizer_max_token_bytes(const oc_tokenizer *tok);
/* Id of the token whose stored text is exactly text[0..n_bytes) (e.g. "<|im_start|>"), or -1. */
int32_t oc_tokenizer_find(const oc_tokenizer *tok, const char *text, size_t n_bytes);

/* Ids from tokenizer.ggml.*_token_id keys, -1 when absent. */
typedef struct oc_tokenizer_special {
    int32_t bos, eos, pad, unk;
    int add_bos;  /* tokenizer.ggml.add_bos_token (0 when absent; false for Qwen) */
} oc_tokenizer_special;
oc_tokenizer_special oc_tokenizer_special_ids(const oc_tokenizer *tok);

/* ---- decoding ---------------------------------------------------------------------------------- */

/* All tokens' bytes concatenated into out[0..cap); *n_out = the full length; OC_ERR_RANGE when it
 * does not fit (the first cap bytes are written). CONTROL tokens are included only with
 * OC_TOK_DECODE_SPECIAL; ids out of range give OC_ERR_INVALID. */
#define OC_TOK_DECODE_SPECIAL 1
oc_status oc_tokenizer_decode(const oc_tokenizer *tok, const int32_t *ids, size_t n_ids, int flags,
                              char *out, size_t cap, size_t *n_out, oc_error *err);

/* Streaming decoder for printing tokens as they are generated: it holds back the bytes of a UTF-8
 * sequence that a later token may complete, and passes everything else through unchanged (bytes
 * that can never become valid UTF-8 are not held). The concatenation of all pushes and the final
 * flush equals oc_tokenizer_decode of the same ids. Plain struct, no allocation. */
typedef struct oc_tok_decoder {
    uint8_t held[4];
    uint32_t n_held;
    int flags;       /* OC_TOK_DECODE_SPECIAL or 0 */
} oc_tok_decoder;

void oc_tok_decoder_init(oc_tok_decoder *d, int flags);
/* Append token id; the bytes ready to print go to out[0..cap), count in *n_out. A buffer of
 * oc_tokenizer_max_token_bytes(tok) + 3 bytes is always enough; with less, OC_ERR_RANGE reports the
 * needed size in *n_out and the state is unchanged. [errors: OC_ERR_INVALID, OC_ERR_RANGE] */
oc_status oc_tok_decoder_push(oc_tok_decoder *d, const oc_tokenizer *tok, int32_t id, char *out,
                              size_t cap, size_t *n_out, oc_error *err);
/* Emit whatever is held (an incomplete sequence at the end of the stream) into out[0..4). */
size_t oc_tok_decoder_flush(oc_tok_decoder *d, char out[4]);

#endif /* OC_TOKENIZER_H */
