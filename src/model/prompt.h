/* prompt.h: the Qwen2-VL chat prompt as the model consumes it: token ids, the M-RoPE position of
 * every token (t, h, w streams) and where each image's tokens sit (for the attention engine's
 * token layout). Facts: docs/formats.md §3 (M-RoPE, chat format); Hugging Face's
 * Qwen2-VL get_rope_index gives the same positions (checked by tests/test_prompt.c against a fixture).
 *
 * Positions: a text token at sequence position p has t = h = w = p. An image of gh x gw merged
 * tokens starting at position s has, for token i (row-major), t = s, h = s + i / gw, w = s + i % gw;
 * the token after the image is at s + max(gh, gw) (not s + gh*gw).
 *
 * Memory is bounded up front: oc_prompt_init takes the maximum number of tokens and images and
 * allocates once; appending never allocates and fails with OC_ERR_RANGE on overflow. */
#ifndef OC_PROMPT_H
#define OC_PROMPT_H

#include "core/core.h"
#include "tokenizer/tokenizer.h"

/* An image's place in the prompt: its first image token, the merged grid (gh x gw tokens). */
typedef struct oc_prompt_image {
    int32_t first_token, n_tokens;
    int32_t grid_h, grid_w;
} oc_prompt_image;

/* The special tokens the chat format uses, looked up by their text in the vocabulary. */
typedef struct oc_chat_tokens {
    int32_t im_start, im_end, vision_start, vision_end, image_pad, endoftext;
} oc_chat_tokens;

typedef struct oc_prompt {
    const oc_allocator *alloc;
    int32_t max_tokens, max_images;
    int32_t n_tokens, n_images;
    int32_t next_pos;        /* M-RoPE position of the next token */
    int32_t *ids;            /* [max_tokens] */
    int32_t *pos_t, *pos_h, *pos_w;   /* [max_tokens] each */
    oc_prompt_image *images; /* [max_images] */
} oc_prompt;

/* [alloc: yes, once] [errors: OC_ERR_INVALID, OC_ERR_NOMEM] */
oc_status oc_prompt_init(oc_prompt *p, int32_t max_tokens, int32_t max_images,
                         const oc_allocator *alloc, oc_error *err);
void oc_prompt_free(oc_prompt *p);   /* zeroes *p; safe on a zeroed or freed prompt */
void oc_prompt_reset(oc_prompt *p);  /* empties it, keeps the memory */

/* Looks up <|im_start|>, <|im_end|>, <|vision_start|>, <|vision_end|>, <|image_pad|> and
 * <|endoftext|> in the vocabulary. [errors: OC_ERR_UNSUPPORTED naming the missing token] */
oc_status oc_chat_tokens_find(oc_chat_tokens *out, const oc_tokenizer *tok, oc_error *err);

/* Append text tokens (positions continue from next_pos). [alloc: no] [errors: OC_ERR_RANGE] */
oc_status oc_prompt_add_ids(oc_prompt *p, const int32_t *ids, int32_t n_ids, oc_error *err);
/* Tokenize and append text; flags as oc_tokenizer_encode (OC_TOK_PARSE_SPECIAL or 0). scratch: the
 * caller's encode scratch (a context's, so contexts share the model's tokenizer), or NULL for the
 * tokenizer's own. [alloc: no] [errors: OC_ERR_RANGE ("prompt too long ..."), tokenizer errors] */
oc_status oc_prompt_add_text(oc_prompt *p, oc_tokenizer *tok, oc_tok_scratch *scratch, const char *text,
                             size_t n_bytes, int flags, oc_error *err);
/* Append <|vision_start|>, grid_h*grid_w <|image_pad|> tokens, <|vision_end|> for an image whose
 * merged token grid is grid_h x grid_w (= the patch grid of image_grid_thw divided by 2).
 * [alloc: no] [errors: OC_ERR_INVALID, OC_ERR_RANGE] */
oc_status oc_prompt_add_image(oc_prompt *p, const oc_chat_tokens *ct, int32_t grid_h, int32_t grid_w,
                              oc_error *err);

/* A whole single-turn chat in Qwen2-VL's template:
 *   <|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{images}{question}<|im_end|>\n
 *   <|im_start|>assistant\n
 * system NULL selects Qwen2-VL's default "You are a helpful assistant.". Images come first, in
 * order, as the template renders a user turn whose content lists the images before the text.
 * The question and system texts are tokenized WITHOUT special-token parsing: a question that
 * contains "<|im_end|>" cannot end the turn (llama.cpp's mtmd-cli parses them; we choose safety
 * for input that may come from outside, e.g. a robot's operator console).
 * grids: n_images pairs (grid_h, grid_w) of merged tokens. label_images: "Picture N: " before
 * image N (Qwen2-VL's template with add_vision_id). scratch as for oc_prompt_add_text. Appends to p
 * (normally empty).
 * [alloc: no] [errors: OC_ERR_RANGE, OC_ERR_INVALID, tokenizer errors] */
oc_status oc_prompt_chat(oc_prompt *p, oc_tokenizer *tok, oc_tok_scratch *scratch, const oc_chat_tokens *ct,
                         const char *system, const int32_t *grids, int32_t n_images,
                         int label_images, const char *question, oc_error *err);

/* The highest N of "image N" / "picture N" (any case, "image #N" too) in text, 0 when none, -1
 * when the text names "image 0" (images are numbered from 1): oc_ask refuses a question about an
 * image that was not given (with no image given too) rather than let the model answer about
 * another one, or about none. [alloc: no] */
int32_t oc_prompt_max_image_reference(const char *text);

#endif
