/* context_image.c: one image of a question: preprocessed as the model was trained (in the context's
 * work arena), then encoded by the vision graph into the embedding store. */
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
