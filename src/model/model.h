/* model.h: what an oc_model (include/ocellus.h) holds: the open GGUF files, the language model,
 * the vision encoder (when an mmproj was given), the tokenizer and the chat special tokens.
 * Everything here is read-only after oc_model_open, so contexts in several threads share it. */
#ifndef OC_MODEL_H
#define OC_MODEL_H

#include "core/core.h"
#include "model/prompt.h"
#include "model/text_model.h"
#include "tokenizer/tokenizer.h"
#include "model/vision_model.h"

struct oc_model {
    oc_allocator alloc;          /* counts what open allocates (heap_bytes), then passes through */
    oc_allocator user_alloc;
    size_t heap_bytes;           /* allocated while opening, this struct included */
    int counting;                /* only during oc_model_open: the model is read-only after it */
    oc_gguf *text_file, *vision_file;
    oc_text_model *text;
    oc_vision_model *vision;     /* NULL: text only */
    oc_tokenizer *tok;           /* read once per model; contexts share it, each with its own
                                    oc_tok_scratch (oc_tokenizer_encode_with) */
    oc_chat_tokens chat;
    int image_labels;            /* the chat template labels images "Picture N: " unconditionally */
    int32_t stop_ids[3];         /* <|im_end|>, <|endoftext|>, the file's eos (may repeat) */
    char projector[32];
};

#endif
