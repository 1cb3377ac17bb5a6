/* prompt.c: builds the token ids, M-RoPE positions and image spans of a Qwen2-VL prompt (prompt.h).
 * Depends on the tokenizer only to turn text into ids; no model weights, no allocation after init. */
#include "model/prompt.h"

#include <stdio.h>
#include <string.h>

#define DEFAULT_SYSTEM "You are a helpful assistant."

oc_status oc_prompt_init(oc_prompt *p, int32_t max_tokens, int32_t max_images,
                         const oc_allocator *alloc, oc_error *err) {
    memset(p, 0, sizeof *p);
    if (max_tokens <= 0 || max_images < 0)
        return oc_fail(err, OC_ERR_INVALID, "prompt: max_tokens %d / max_images %d must be positive",
                       (int)max_tokens, (int)max_images);
    p->alloc = alloc;
    p->max_tokens = max_tokens;
    p->max_images = max_images;
    size_t n = (size_t)max_tokens * sizeof(int32_t);
    p->ids = oc_mem_alloc(alloc, n);
    p->pos_t = oc_mem_alloc(alloc, n);
    p->pos_h = oc_mem_alloc(alloc, n);
    p->pos_w = oc_mem_alloc(alloc, n);
    p->images = oc_mem_alloc(alloc, (size_t)(max_images ? max_images : 1) * sizeof(oc_prompt_image));
    if (!p->ids || !p->pos_t || !p->pos_h || !p->pos_w || !p->images) {
        oc_prompt_free(p);
        return oc_fail(err, OC_ERR_NOMEM, "prompt: out of memory for %d tokens", (int)max_tokens);
    }
    return OC_OK;
}

void oc_prompt_free(oc_prompt *p) {
    if (!p) return;
    size_t n = (size_t)p->max_tokens * sizeof(int32_t);
    oc_mem_free(p->alloc, p->ids, n);
    oc_mem_free(p->alloc, p->pos_t, n);
    oc_mem_free(p->alloc, p->pos_h, n);
    oc_mem_free(p->alloc, p->pos_w, n);
    oc_mem_free(p->alloc, p->images, (size_t)(p->max_images ? p->max_images : 1) * sizeof(oc_prompt_image));
    memset(p, 0, sizeof *p);
}

void oc_prompt_reset(oc_prompt *p) {
    p->n_tokens = 0;
    p->n_images = 0;
    p->next_pos = 0;
}

static oc_status overflow(const oc_prompt *p, int64_t n_more, oc_error *err) {
    return oc_fail(err, OC_ERR_RANGE, "prompt too long: %lld tokens needed, the limit is %d",
                   (long long)p->n_tokens + n_more, (int)p->max_tokens);
}

/* Gives positions to the text tokens [first, n_tokens). */
static void place_text(oc_prompt *p, int32_t first) {
    for (int32_t i = first; i < p->n_tokens; i++) {
        p->pos_t[i] = p->pos_h[i] = p->pos_w[i] = p->next_pos;
        p->next_pos++;
    }
}

oc_status oc_prompt_add_ids(oc_prompt *p, const int32_t *ids, int32_t n_ids, oc_error *err) {
    if (n_ids < 0 || (n_ids && !ids)) return oc_fail(err, OC_ERR_INVALID, "prompt: bad id array");
    if (n_ids > p->max_tokens - p->n_tokens) return overflow(p, n_ids, err);
    int32_t first = p->n_tokens;
    memcpy(p->ids + first, ids, (size_t)n_ids * sizeof(int32_t));
    p->n_tokens += n_ids;
    place_text(p, first);
    return OC_OK;
}

oc_status oc_prompt_add_text(oc_prompt *p, oc_tokenizer *tok, oc_tok_scratch *scratch, const char *text,
                             size_t n_bytes, int flags, oc_error *err) {
    int32_t first = p->n_tokens;
    size_t room = (size_t)(p->max_tokens - first), n_ids = 0;
    int32_t *dst = p->ids + first;
    oc_status st = scratch ? oc_tokenizer_encode_with(tok, scratch, text, n_bytes, flags, dst, room, &n_ids, err)
                           : oc_tokenizer_encode(tok, text, n_bytes, flags, dst, room, &n_ids, err);
    if (st == OC_ERR_RANGE) return overflow(p, (int64_t)n_ids, err);
    if (st != OC_OK) return st;
    p->n_tokens += (int32_t)n_ids;
    place_text(p, first);
    return OC_OK;
}

oc_status oc_prompt_add_image(oc_prompt *p, const oc_chat_tokens *ct, int32_t grid_h, int32_t grid_w,
                              oc_error *err) {
    int64_t n_image = (int64_t)grid_h * grid_w;
    if (grid_h <= 0 || grid_w <= 0 || n_image > INT32_MAX / 2)
        return oc_fail(err, OC_ERR_INVALID, "prompt: image grid %dx%d is not valid", (int)grid_h, (int)grid_w);
    if (p->n_images >= p->max_images)
        return oc_fail(err, OC_ERR_RANGE, "prompt: more than %d images", (int)p->max_images);
    if (n_image + 2 > p->max_tokens - p->n_tokens) return overflow(p, n_image + 2, err);

    int32_t one = ct->vision_start;
    oc_prompt_add_ids(p, &one, 1, NULL);
    /* Image tokens: t is the start position, h and w add the token's row and column. */
    int32_t s = p->next_pos, first = p->n_tokens;
    for (int32_t i = 0; i < (int32_t)n_image; i++) {
        int32_t k = first + i;
        p->ids[k] = ct->image_pad;
        p->pos_t[k] = s;
        p->pos_h[k] = s + i / grid_w;
        p->pos_w[k] = s + i % grid_w;
    }
    p->n_tokens += (int32_t)n_image;
    p->next_pos = s + OC_MAX(grid_h, grid_w);
    p->images[p->n_images++] = (oc_prompt_image){ first, (int32_t)n_image, grid_h, grid_w };
    one = ct->vision_end;
    oc_prompt_add_ids(p, &one, 1, NULL);
    return OC_OK;
}

oc_status oc_chat_tokens_find(oc_chat_tokens *out, const oc_tokenizer *tok, oc_error *err) {
    static const char *const names[] = { "<|im_start|>", "<|im_end|>", "<|vision_start|>",
                                         "<|vision_end|>", "<|image_pad|>", "<|endoftext|>" };
    int32_t ids[OC_ARRAY_LEN(names)];
    for (size_t i = 0; i < OC_ARRAY_LEN(names); i++) {
        ids[i] = oc_tokenizer_find(tok, names[i], strlen(names[i]));
        if (ids[i] < 0)
            return oc_fail(err, OC_ERR_UNSUPPORTED, "vocabulary has no %s token: not a Qwen2-VL chat model",
                           names[i]);
    }
    *out = (oc_chat_tokens){ ids[0], ids[1], ids[2], ids[3], ids[4], ids[5] };
    return OC_OK;
}

/* Appends one template token followed by literal template text (no special parsing needed: the
 * template's own specials are appended as ids). */
static oc_status add_special_then_text(oc_prompt *p, oc_tokenizer *tok, oc_tok_scratch *scratch, int32_t special,
                                       const char *text, oc_error *err) {
    oc_status st = oc_prompt_add_ids(p, &special, 1, err);
    if (st == OC_OK && text[0]) st = oc_prompt_add_text(p, tok, scratch, text, strlen(text), 0, err);
    return st;
}

int32_t oc_prompt_max_image_reference(const char *text) {
    static const char *const words[] = { "image", "picture" };
    int32_t max_ref = 0;
    int has_zero = 0;
    for (const char *t = text; *t; t++) {
        for (size_t w = 0; w < OC_ARRAY_LEN(words); w++) {
            size_t n = strlen(words[w]), i = 0;
            while (i < n && (t[i] | 0x20) == words[w][i]) i++;
            /* a whole word: not the tail of "multiimage"; then optional spaces and the number */
            if (i < n || (t > text && (((t[-1] | 0x20) >= 'a' && (t[-1] | 0x20) <= 'z')))) continue;
            const char *d = t + n;
            while (*d == ' ') d++;
            if (*d == '#') d++;
            int64_t v = 0;
            int n_digits = 0;
            while (*d >= '0' && *d <= '9' && n_digits < 10) v = v * 10 + (*d++ - '0'), n_digits++;
            if (n_digits && v == 0) has_zero = 1;
            if (n_digits && v > max_ref) max_ref = v > INT32_MAX ? INT32_MAX : (int32_t)v;
        }
    }
    return has_zero ? -1 : max_ref;
}

/* Every <|image_pad|> must be one oc_prompt_add_image placed. Text can produce the id too when the
 * vocabulary marks it USER_DEFINED (always matched in text, tokenizer.h): such a pad has no image
 * behind it. Hugging Face refuses the same prompt ("Image features and image tokens do not match"). */
static oc_status check_pads_placed(const oc_prompt *p, const oc_chat_tokens *ct, oc_error *err) {
    int32_t img = 0;
    for (int32_t i = 0; i < p->n_tokens; i++) {
        while (img < p->n_images && i >= p->images[img].first_token + p->images[img].n_tokens) img++;
        int in_image = img < p->n_images && i >= p->images[img].first_token;
        if (!in_image && p->ids[i] == ct->image_pad)
            return oc_fail(err, OC_ERR_INVALID, "the text holds the image placeholder token %d "
                           "(<|image_pad|>), which only an image may place", (int)ct->image_pad);
    }
    return OC_OK;
}

oc_status oc_prompt_chat(oc_prompt *p, oc_tokenizer *tok, oc_tok_scratch *scratch, const oc_chat_tokens *ct,
                         const char *system, const int32_t *grids, int32_t n_images,
                         int label_images, const char *question, oc_error *err) {
    if (!question || n_images < 0 || (n_images && !grids))
        return oc_fail(err, OC_ERR_INVALID, "prompt: missing question or image grids");
    if (!system) system = DEFAULT_SYSTEM;
    /* Hugging Face splits the rendered text at special tokens before BPE, so tokenizing each piece
     * between specials separately gives the same ids as tokenizing the rendered string. */
    oc_status st = add_special_then_text(p, tok, scratch, ct->im_start, "system\n", err);
    if (st == OC_OK) st = oc_prompt_add_text(p, tok, scratch, system, strlen(system), 0, err);
    if (st == OC_OK) st = add_special_then_text(p, tok, scratch, ct->im_end, "\n", err);
    if (st == OC_OK) st = add_special_then_text(p, tok, scratch, ct->im_start, "user\n", err);
    for (int32_t i = 0; st == OC_OK && i < n_images; i++) {
        if (label_images) {
            char label[32];
            int n = snprintf(label, sizeof label, "Picture %d: ", (int)i + 1);
            st = oc_prompt_add_text(p, tok, scratch, label, (size_t)n, 0, err);
        }
        if (st == OC_OK) st = oc_prompt_add_image(p, ct, grids[2 * i], grids[2 * i + 1], err);
    }
    if (st == OC_OK) st = oc_prompt_add_text(p, tok, scratch, question, strlen(question), 0, err);
    if (st == OC_OK) st = add_special_then_text(p, tok, scratch, ct->im_end, "\n", err);
    if (st == OC_OK) st = add_special_then_text(p, tok, scratch, ct->im_start, "assistant\n", err);
    if (st == OC_OK) st = check_pads_placed(p, ct, err);
    return st;
}
