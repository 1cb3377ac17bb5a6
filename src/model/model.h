/* model.h: what an oc_model (include/ocellus.h) holds: the open GGUF files, the language model,
 * the vision encoder (when an mmproj was given), the tokenizer and the chat special tokens.
 * Everything here is read-only after oc_model_open, so contexts in several threads share it.
 *
 * src/model/ reads top to bottom as llama2.c's run.c does: config, state, one layer, the forward
 * pass; then the same for the vision encoder, then the public objects over both. A file calls
 * only files above it (context.c calls its five job files, which are listed after it).
 *   weights.c, text_model.c     the language model's hyperparameters and weights from its GGUF
 *   graph_ctx.c                 what the text and vision contexts share (CPU spec, closing)
 *   text_ctx.c (text_ctx.h)     its state: buffers on a backend, the KV cache and its regions
 *   text_kv.c                   the KV cache's eviction steps (scores, selection, compaction)
 *   text_layer.c                one decoder layer step (and the steps its callers share)
 *   text_forward.c              a batch through every layer: decode, prompts that keep the cache
 *   text_prefill.c              a whole prompt segment by segment, for plans that evict
 *   vision_model.c, vision_ctx.c, vision_window.c, vision_encoder.c   the same for the encoder
 *   prompt.c, sample.c          the chat prompt and its positions; sampling
 *   model.c                     oc_model: both models, the tokenizer, the chat tokens
 *   context_state.h, context.c  oc_context and oc_ask (the public API), over one file per job:
 *                               context_params.c, context_engines.c, context_image.c,
 *                               context_prefill.c, context_generate.c */
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
