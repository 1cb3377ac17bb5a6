/* context.c: oc_context (include/ocellus.h): the per-conversation state over a shared oc_model and
 * oc_ask, the whole question -> answer path: image preprocessing and encoding, the chat prompt,
 * prefill in chunks through the language model, sampling and streaming the answer.
 *
 * Memory: oc_context_open allocates everything oc_ask will use, for the stated limits, and
 * oc_context_memory_bytes says beforehand exactly how much (every oc_mem_alloc block with its
 * header): the KV cache, every activation and scratch buffer, the image embedding store, the
 * prompt, and the work arena. oc_ask allocates nothing: each image is decoded (image_paths, at
 * most max_image_pixels) and preprocessed (resized copy, resampling tables, patches) in the work
 * arena, one image at a time, and a plan's token layout is built there after the images; the
 * arena is sized for the worst image the limits allow (oc_qwen2vl_preprocess_bound: sides up to
 * OC_IMAGE_DEFAULT_MAX_SIDE_PX, max_image_tokens after resizing).
 * Backend: the text and vision graphs run on one backend; on OpenCL both instances share the one
 * device this context opens. OC_BACKEND_AUTO tries OpenCL and, when anything of it fails to open
 * (no device, a program that does not build, a model it cannot run), opens the CPU instead.
 * This file is the public API (open, close, stats, oc_ask's order of steps); each step's work is in
 * a file named for its job (context_state.h lists them in the order a question passes them). */
#include "model/context_state.h"

#include <stdio.h>
#include <string.h>

OC_API oc_status oc_context_open(oc_context **out, const oc_model *m, const oc_context_params *params,
                                 oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "oc_context_open: out is NULL");
    *out = NULL;
    oc_status st = oc_ctx_check_params(m, params, err);
    if (st) return st;
    oc_context_params eff = oc_ctx_effective_params(m, params);
    const oc_context_params *p = &eff;
    oc_backend_kind kind;
    size_t total_bytes;   /* limits too large for memory arithmetic fail here, before anything opens */
    if ((st = oc_backend_resolve((int)p->backend, p->device, &kind, err)) ||
        (st = oc_ctx_memory_bytes(m, p, NULL, kind, &total_bytes, err)))
        return st;
    oc_context *c = oc_mem_calloc(p->alloc, sizeof *c);
    if (!c) return oc_fail(err, OC_ERR_NOMEM, "context: out of memory");
    c->alloc = p->alloc ? *p->alloc : *oc_default_allocator();
    c->m = m;
    c->p = *p;
    c->p.alloc = NULL;
    c->p.plan_path = NULL;
    c->p.device = NULL;           /* read at open only */
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    c->isa = oc_isa_best(&cpu);
    if ((st = oc_pool_open(&c->pool, p->n_threads, &c->alloc, err))) goto fail;
    if (p->plan_path) {
        if ((st = oc_plan_load_file(&c->plan, p->plan_path, &c->alloc, err))) goto fail;
        oc_plan_model_shape shape;
        memset(&shape, 0, sizeof shape);
        const oc_text_hparams *hp = &m->text->hp;
        shape.decoder = (oc_plan_shape){ hp->n_layers, hp->n_head, hp->n_head_kv, hp->head_dim };
        if (m->vision) {
            const oc_vision_hparams *vh = oc_vision_model_hparams(m->vision);
            shape.vision = (oc_plan_shape){ vh->n_layers, vh->n_heads, vh->n_heads, vh->head_dim };
        }
        oc_error e;
        if ((st = oc_plan_check_fits(c->plan, &shape, &e))) {
            st = oc_fail(err, st, "%s: %s", p->plan_path, e.message);
            goto fail;
        }
        if ((st = oc_ctx_check_plan_features(m, c->plan, p->plan_path, err))) goto fail;
    }
    if ((st = oc_tok_scratch_open(&c->tok_scratch, &c->alloc, err))) goto fail;
    st = oc_ctx_open_engines(c, kind, p->device, err);
    if (st && p->backend == OC_BACKEND_AUTO && kind != OC_BACKEND_KIND_CPU) {
        char why[OC_ERROR_MESSAGE_BYTES];
        snprintf(why, sizeof why, "%s", err ? err->message : "it did not open");
        if (!(st = oc_ctx_open_engines(c, OC_BACKEND_KIND_CPU, NULL, err))) {
            size_t n = strlen(c->backend_name);
            snprintf(c->backend_name + n, sizeof c->backend_name - n, "; OpenCL not used: %s", why);
        }
    }
    if (st) goto fail;
    if ((st = oc_ctx_memory_bytes(m, p, c->plan, c->backend, &c->context_bytes, err))) goto fail;
    c->stats.context_bytes = c->context_bytes;
    c->stats.device_bytes = oc_backend_device_bytes(c->dev);
    if ((st = oc_prompt_init(&c->prompt, p->max_context_tokens, OC_MAX(1, oc_ctx_max_images_of(m, p)), &c->alloc, err)))
        goto fail;
    oc_sampling greedy = { 0.0f, 40, 0.95f, 0 };
    if ((st = oc_sampler_init(&c->sampler, m->text->hp.n_vocab, &greedy, &c->alloc, err))) goto fail;
    if (!oc_ctx_own_bytes(m, p, c->plan, &c->buf_bytes) || !(c->buf = oc_mem_alloc(&c->alloc, c->buf_bytes))) {
        st = oc_fail(err, OC_ERR_NOMEM, "context: out of memory for %zu bytes of buffers", c->buf_bytes);
        goto fail;
    }
    size_t d = (size_t)m->text->hp.n_embd, V = (size_t)m->text->hp.n_vocab, B = (size_t)oc_ctx_batch_of(p);
    char *b = c->buf;
#define TAKE(ptr, n_bytes) do { (ptr) = (void *)b; b += ((n_bytes) + OC_MEM_ALIGN - 1) / OC_MEM_ALIGN * OC_MEM_ALIGN; } while (0)
    TAKE(c->img_embd, (size_t)oc_ctx_max_images_of(m, p) * (size_t)p->max_image_tokens * d * sizeof(float));
    TAKE(c->batch_embd, B * d * sizeof(float));
    TAKE(c->batch_ids, (size_t)p->max_context_tokens * sizeof(int32_t));
    TAKE(c->logits, V * sizeof(float));
    TAKE(c->prompt_logits, V * sizeof(float));
    if (p->on_attention && c->vision) oc_vision_ctx_set_observer(c->vision, oc_ctx_observe_vision, c);
    if (p->on_attention) {
        size_t kvd = (size_t)m->text->hp.n_head_kv * (size_t)m->text->hp.head_dim;
        TAKE(c->obs_q, B * d * sizeof(float));
        TAKE(c->obs_k, (size_t)p->max_context_tokens * kvd * sizeof(float));
        TAKE(c->obs_v, (size_t)p->max_context_tokens * kvd * sizeof(float));
        TAKE(c->obs_images, (size_t)OC_MAX(1, oc_ctx_max_images_of(m, p)) * 16);
        TAKE(c->obs_segments, ((size_t)p->max_image_tokens + 1) * 8);
    }
    size_t n_work = oc_ctx_work_bytes(m, p, c->plan);
    void *work_base;
    TAKE(work_base, n_work);
    oc_arena_init(&c->work, work_base, n_work);
    c->work_alloc = oc_arena_allocator(&c->work);
#undef TAKE
    *out = c;
    return OC_OK;
fail:
    oc_context_close(c);
    return st;
}

OC_API void oc_context_close(oc_context *c) {
    if (!c) return;
    oc_allocator a = c->alloc;
    oc_mem_free(&a, c->buf, c->buf_bytes);
    oc_sampler_free(&c->sampler);
    oc_prompt_free(&c->prompt);
    oc_ctx_close_engines(c);
    oc_tok_scratch_close(c->tok_scratch);
    oc_plan_free(c->plan);
    oc_pool_close(c->pool);
    oc_mem_free(&a, c, sizeof *c);
}

OC_API void oc_context_get_stats(const oc_context *c, oc_stats *out) {
    *out = c->stats;
    oc_text_ctx_kv_bytes(c->text, &out->kv_bytes, &out->kv_capacity_bytes);
    out->peak_rss_bytes = oc_port_peak_rss_bytes();
}

OC_API const char *oc_context_backend_name(const oc_context *c) { return c->backend_name; }

OC_API const float *oc_context_prompt_logits(const oc_context *c, int32_t *n_vocab) {
    if (n_vocab) *n_vocab = c->m->text->hp.n_vocab;
    return c->has_prompt_logits ? c->prompt_logits : NULL;
}

OC_API oc_status oc_ask(oc_context *c, const oc_request *r, oc_error *err) {
    if (!c || !r) return oc_fail(err, OC_ERR_INVALID, "oc_ask: context or request is NULL");
    const oc_model *m = c->m;
    memset(&c->stats, 0, sizeof c->stats);
    c->stats.context_bytes = c->context_bytes;
    c->stats.device_bytes = oc_backend_device_bytes(c->dev);
    c->has_prompt_logits = 0;
    c->has_pending = 0;
    if (!r->question || !r->question[strspn(r->question, " \t\r\n")])
        return oc_fail(err, OC_ERR_INVALID, "the prompt is empty: ask a question");
    if (r->n_images < 0 || (r->n_images > 0 && !r->images && !r->image_paths))
        return oc_fail(err, OC_ERR_INVALID, "oc_ask: bad image list");
    if (r->n_images > 0 && !r->images && c->p.max_image_pixels <= 0)
        return oc_fail(err, OC_ERR_INVALID, "image files need a context with max_image_pixels > 0");
    if (r->n_images > 0 && !m->vision)
        return oc_fail(err, OC_ERR_UNSUPPORTED, "images need the vision encoder: give the mmproj file too");
    if (r->n_images > c->p.max_images)
        return oc_fail(err, OC_ERR_RANGE, "%d images given, the context allows %d", r->n_images, c->p.max_images);
    if (r->max_new_tokens < 0) return oc_fail(err, OC_ERR_INVALID, "max_new_tokens is negative");
    /* checked with no image given too: "image 1" then names an image the model never sees */
    int32_t ref = oc_prompt_max_image_reference(r->question);
    if (ref < 0)
        return oc_fail(err, OC_ERR_INVALID, "the question refers to image 0, but images are numbered from 1");
    if (ref > r->n_images && r->n_images == 0)
        return oc_fail(err, OC_ERR_INVALID, "the question refers to image %d, but no image was given", ref);
    if (ref > r->n_images)
        return oc_fail(err, OC_ERR_INVALID, "the question refers to image %d, but %d image%s given", ref,
                       r->n_images, r->n_images == 1 ? " was" : "s were");
    oc_status st;
    if (!(r->sampling.temperature >= 0.0f) || r->sampling.top_k < 0 || !(r->sampling.top_p > 0.0f) ||
        r->sampling.top_p > 1.0f)
        return oc_fail(err, OC_ERR_INVALID, "sampling: need temperature >= 0, top-k >= 0 and 0 < top-p <= 1");
    c->sampler.params = r->sampling;
    oc_sampler_reset(&c->sampler);

    uint64_t t0 = oc_port_now_ns();
    oc_attn_stats as = { 0, 0, 0 };
    int32_t grids[2 * 1024], row = 0;
    if ((st = oc_ctx_check_prompt_fits(c, r, grids, err))) return st;
    for (int32_t i = 0; i < r->n_images; i++) {
        oc_ctx_progress(c, "vision", i, r->n_images);
        oc_arena_reset(&c->work);   /* one image at a time */
        if (r->images) {
            if ((st = oc_ctx_encode_image(c, &r->images[i], i, &row, grids + 2 * i, &as, err))) return st;
            continue;
        }
        /* decoded now, into the context's image buffer, and gone before the next one */
        oc_image img;
        oc_image_limits lim = oc_ctx_decode_limits(m, &c->p);
        if ((st = oc_image_load(&img, r->image_paths[i], &lim, &c->work_alloc, err))) return st;
        oc_image_rgb view = oc_image_view(&img);
        st = oc_ctx_encode_image(c, &view, i, &row, grids + 2 * i, &as, err);
        oc_image_free(&img);
        if (st) return st;
    }
    if (r->n_images) oc_ctx_progress(c, "vision", r->n_images, r->n_images);
    if (r->n_images && (st = oc_backend_device_finish(c->dev, err))) return st;   /* the last image's kernels too */
    c->stats.vision_ms = oc_ctx_ms_since(t0);
    c->stats.n_images = r->n_images;
    c->stats.n_image_tokens = row;

    oc_prompt_reset(&c->prompt);
    oc_text_ctx_reset(c->text);
    oc_error e;
    if ((st = oc_prompt_chat(&c->prompt, m->tok, c->tok_scratch, &m->chat, r->system, grids, r->n_images,
                               r->image_labels < 0 ? m->image_labels : r->image_labels != 0, r->question, &e))) {
        if (st == OC_ERR_RANGE) return oc_ctx_overflow(c, e.message, err);
        return oc_fail(err, st, "prompt: %s", e.message);
    }
    c->stats.n_prompt_tokens = c->prompt.n_tokens;
    if (c->obs_images)
        for (int32_t i = 0; i < c->prompt.n_images; i++) {
            const oc_prompt_image *im = &c->prompt.images[i];
            int32_t *o = c->obs_images + 4 * i;
            o[0] = im->first_token;
            o[1] = im->n_tokens;
            o[2] = im->grid_h;
            o[3] = im->grid_w;
        }
    oc_token_layout *layout = NULL;
    if ((st = oc_ctx_build_layout(c, &layout, err))) return st;
    uint64_t t1 = oc_port_now_ns();
    oc_attn_stats after_vision = as, after_prefill;
    st = oc_ctx_prefill(c, layout, row, &as, err);
    c->stats.prefill_ms = oc_ctx_ms_since(t1);
    oc_text_times tp = oc_text_ctx_times(c->text);
    c->stats.prefill_attn_ms = (double)tp.attn_ns / 1e6;
    c->stats.prefill_estimate_ms = (double)tp.estimate_ns / 1e6;
    c->stats.prefill_kv_score_ms = (double)tp.score_ns / 1e6;
    c->stats.prefill_kv_select_ms = (double)tp.select_ns / 1e6;
    after_prefill = as;
    size_t kv_capacity_bytes;
    oc_text_ctx_kv_bytes(c->text, &c->stats.kv_prefill_bytes, &kv_capacity_bytes);
    if (!st) {
        memcpy(c->prompt_logits, c->logits, sizeof(float) * (size_t)m->text->hp.n_vocab);
        c->has_prompt_logits = 1;
        if (r->max_new_tokens > 0) st = oc_ctx_generate(c, r, t0, &as, err);
    }
    oc_layout_free(layout);
    c->stats.decode_attn_ms = (double)(oc_text_ctx_times(c->text).attn_ns - tp.attn_ns) / 1e6;
    c->stats.attn_flops_kept = as.flops_kept;
    c->stats.attn_flops_skipped = as.flops_skipped;
    c->stats.attn_prefill_flops_kept = after_prefill.flops_kept - after_vision.flops_kept;
    c->stats.attn_prefill_flops_skipped = after_prefill.flops_skipped - after_vision.flops_skipped;
    c->stats.attn_decode_flops_kept = as.flops_kept - after_prefill.flops_kept;
    c->stats.attn_decode_flops_skipped = as.flops_skipped - after_prefill.flops_skipped;
    return st;
}
