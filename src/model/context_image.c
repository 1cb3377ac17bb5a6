/* context_image.c: one image of a question: preprocessed as the model was trained (in the context's
 * work arena), then encoded by the vision graph into the embedding store; and, before any image is
 * decoded, whether the prompt the images' sizes make fits the context. */
#include "model/context_state.h"

/* Preprocess and encode image i into the embedding store at token row *row; grid out in merged
 * tokens. The preprocessing takes its memory from the work arena, after whatever the image itself
 * holds there (a decoded file); the size is checked before anything is allocated. */
oc_status oc_ctx_encode_image(oc_context *c, const oc_image_rgb *in, int32_t index, int32_t *row,
                              int32_t grid[2], oc_attn_stats *as, oc_error *err) {
    const oc_vision_hparams *vh = oc_vision_model_hparams(c->m->vision);
    oc_image img;
    oc_error e;
    oc_status st = oc_image_wrap_rgb8(&img, in->rgb, in->width_px, in->height_px, in->stride_bytes, NULL, &e);
    if (st) return oc_fail(err, st, "image %d: %s", index + 1, e.message);
    oc_qwen2vl_prep_params pp;
    oc_ctx_prep_params(c->m, &c->p, &pp);
    int32_t rw, rh;
    size_t payload, blocks;
    if ((st = oc_qwen2vl_preprocess_bytes(in->width_px, in->height_px, &pp, &rw, &rh, &payload, &blocks, &e)))
        return oc_fail(err, st, "image %d (%dx%d): %s", index + 1, in->width_px, in->height_px, e.message);
    int32_t unit = vh->patch_size * vh->merge_size, n_tok = (rh / unit) * (rw / unit);
    if (n_tok > c->p.max_image_tokens)   /* smart_resize scaling up to min_image_tokens can pass the max */
        return oc_fail(err, OC_ERR_RANGE, "image %d: %d tokens exceed the limit of %d", index + 1, n_tok,
                       c->p.max_image_tokens);
    if (oc_arena_bytes_for(payload, blocks) > c->work.cap_bytes - c->work.used_bytes)   /* work_bytes bounds it */
        return oc_fail(err, OC_ERR_RANGE, "image %d (%dx%d): preprocessing needs %zu bytes, the context reserved %zu",
                       index + 1, in->width_px, in->height_px, oc_arena_bytes_for(payload, blocks),
                       c->work.cap_bytes - c->work.used_bytes);
    oc_qwen2vl_pixels px;
    if ((st = oc_qwen2vl_preprocess(&px, &img, &pp, &c->work_alloc, &e)))
        return oc_fail(err, st, "image %d (%dx%d): %s", index + 1, in->width_px, in->height_px, e.message);
    grid[0] = px.grid_h / vh->merge_size;
    grid[1] = px.grid_w / vh->merge_size;
    float *dst = c->img_embd + (size_t)*row * (size_t)c->m->text->hp.n_embd;
    const oc_stack_plan *vp = c->plan ? &c->plan->stacks[OC_PLAN_VISION] : NULL;
    oc_bt *store = oc_text_ctx_image_store(c->text);
    if (store)
        st = oc_vision_encode_to(c->vision, px.data, px.grid_h, px.grid_w, vp, store, *row, as, err);
    else
        st = oc_vision_encode(c->vision, px.data, px.grid_h, px.grid_w, vp, dst, as, err);
    oc_qwen2vl_pixels_free(&px);
    if (st) return st;
    *row += n_tok;
    return OC_OK;
}

/* "context overflow" with what to do about it: a context already at the model's trained length
 * (where -c beyond it was clamped) cannot be raised. */
oc_status oc_ctx_overflow(const oc_context *c, const char *why, oc_error *err) {
    int32_t n_ctx = c->m->text->hp.n_ctx_train;
    if (n_ctx >= 16 && c->p.max_context_tokens >= n_ctx)
        return oc_fail(err, OC_ERR_RANGE, "context overflow: the prompt does not fit in %d tokens, the model's "
                       "context length (%s); use fewer / smaller images or a shorter question",
                       c->p.max_context_tokens, why);
    return oc_fail(err, OC_ERR_RANGE, "context overflow: the prompt does not fit in %d tokens (%s); raise the "
                   "context size (at most %d for this model) or use fewer / smaller images", c->p.max_context_tokens,
                   why, n_ctx >= 16 ? n_ctx : c->p.max_context_tokens);
}

/* The prompt built from the images' sizes alone (a file's header: oc_image_probe), before any image
 * is decoded or encoded, so an overflow is found at once rather than after minutes of encoding.
 * An image whose size cannot be known here counts as one token; decoding it then says why. */
oc_status oc_ctx_check_prompt_fits(oc_context *c, const oc_request *r, int32_t *grids, oc_error *err) {
    const oc_model *m = c->m;
    oc_qwen2vl_prep_params pp;
    oc_image_limits lim;
    int32_t unit = 1;
    if (r->n_images > 0) {
        const oc_vision_hparams *vh = oc_vision_model_hparams(m->vision);
        unit = vh->patch_size * vh->merge_size;
        oc_ctx_prep_params(m, &c->p, &pp);
        lim = oc_ctx_decode_limits(m, &c->p);
    }
    for (int32_t i = 0; i < r->n_images; i++) {
        int32_t w = 0, h = 0, rw, rh;
        grids[2 * i] = grids[2 * i + 1] = 1;
        if (r->images) {
            w = r->images[i].width_px;
            h = r->images[i].height_px;
        } else {
            oc_port_mapping map;
            char msg[OC_ERROR_MESSAGE_BYTES];
            if (!r->image_paths[i] || oc_port_map_file(r->image_paths[i], &map, msg, sizeof msg) != 0) continue;
            if (!oc_image_probe(map.data, map.n_bytes, &lim, &w, &h)) w = h = 0;
            oc_port_unmap_file(&map);
        }
        size_t payload, blocks;
        oc_error e;
        if (w > 0 && h > 0 && !oc_qwen2vl_preprocess_bytes(w, h, &pp, &rw, &rh, &payload, &blocks, &e)) {
            grids[2 * i] = rh / unit;
            grids[2 * i + 1] = rw / unit;
        }
    }
    oc_prompt_reset(&c->prompt);
    oc_error e;
    oc_status st = oc_prompt_chat(&c->prompt, m->tok, c->tok_scratch, &m->chat, r->system, grids, r->n_images,
                                  r->image_labels < 0 ? m->image_labels : r->image_labels != 0, r->question, &e);
    if (st == OC_ERR_RANGE) return oc_ctx_overflow(c, e.message, err);
    return OC_OK;   /* other errors are reported when the prompt is built for real */
}

