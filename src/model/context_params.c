/* context_params.c: the limits a context really gets (checked, clamped to the model) and its
 * memory, added up before anything opens (context.c's header says what oc_context_open holds):
 * oc_context_params_default, oc_request_default and oc_context_memory_bytes of ocellus.h. */
#include "model/context_state.h"

#include <string.h>

OC_API void oc_context_params_default(oc_context_params *p) {
    memset(p, 0, sizeof *p);
    p->max_context_tokens = 4096;
    p->max_images = 8;
    p->max_image_tokens = 1280;
    p->min_image_tokens = 4;
    p->batch_tokens = 0;   /* chosen per backend: oc_ctx_effective_params */
    p->max_answer_tokens = 256;
    /* Image files work out of the box: 4 Mi pixels (a 2048 x 2048 frame; at most 7 bytes each
     * with a PNG decoder's rows, 28 MiB) holds any image at the default max_image_tokens (1280
     * tokens = about 1 Mi pixels after smart_resize) with room to spare, and a larger JPEG or PNG
     * is decoded at reduced scale into it. A host that passes pixels only sets 0 and saves it. */
    p->max_image_pixels = (int64_t)1 << 22;
}

OC_API void oc_request_default(oc_request *r) {
    memset(r, 0, sizeof *r);
    r->max_new_tokens = 256;
    r->image_labels = -1;
    r->sampling.temperature = 0.0f;
    r->sampling.top_k = 40;
    r->sampling.top_p = 0.95f;
}

oc_status oc_ctx_check_params(const oc_model *m, const oc_context_params *p, oc_error *err) {
    if (!m || !p) return oc_fail(err, OC_ERR_INVALID, "context: model or params is NULL");
    if (p->max_context_tokens < 16 || p->max_context_tokens > (1 << 24))
        return oc_fail(err, OC_ERR_INVALID, "context: max_context_tokens %d is out of range [16, 16777216]",
                       p->max_context_tokens);
    if (p->max_images < 0 || p->max_images > 1024)
        return oc_fail(err, OC_ERR_INVALID, "context: max_images %d is out of range [0, 1024]", p->max_images);
    if (p->min_image_tokens < 1 || p->max_image_tokens < p->min_image_tokens ||
        p->max_image_tokens > (1 << 20))
        return oc_fail(err, OC_ERR_INVALID, "context: image token limits %d..%d are invalid",
                       p->min_image_tokens, p->max_image_tokens);
    if (p->max_image_pixels < 0 || p->max_image_pixels > ((int64_t)1 << 32))
        return oc_fail(err, OC_ERR_INVALID, "context: max_image_pixels %lld is out of range [0, 2^32]",
                       (long long)p->max_image_pixels);
    if (p->batch_tokens < 0)
        return oc_fail(err, OC_ERR_INVALID, "context: batch_tokens %d is negative (0: chosen per backend)",
                       p->batch_tokens);
    if (p->max_answer_tokens < 0)
        return oc_fail(err, OC_ERR_INVALID, "context: max_answer_tokens %d is negative", p->max_answer_tokens);
    return OC_OK;
}

/* The prefill chunk batch_tokens 0 asks for. The CPU (and OC_BACKEND_AUTO, whose memory is the
 * CPU's figure) takes 256 tokens: its matrix kernels are at full speed there and a chunk's
 * activations stay in cache. A device pays a launch per kernel per layer per chunk: at 256 tokens
 * the long model's OpenCL prefill (about 3,200 tokens) ran 13 chunks and was launch-bound (265 ms
 * on an H200 against 42.5 ms in one call), and every chunk repeated MMInference's estimate and the
 * SparseMM / ZipVL scoring over the keys so far. So OpenCL takes the largest chunk whose per-token
 * buffers (the layer activations, the rope tables and a row of logits: text_ctx.c plan_sizes)
 * fit OC_CL_CHUNK_BYTES, between 256 and OC_CL_CHUNK_MAX tokens: the long model 4,096 tokens
 * (23 KiB each, 91 MiB), a Qwen2-VL-2B-shaped one 746 (its 152K-word logits row dominates: 702 KiB
 * each). The attention's tables (opencl/cl_attn.c) grow with the chunk too, by a few ints per row
 * and head. */
#define OC_CL_CHUNK_BYTES ((size_t)512 << 20)
#define OC_CL_CHUNK_MAX 4096
static int32_t auto_batch(const oc_model *m, const oc_context_params *p) {
    if (p->backend != OC_BACKEND_OPENCL) return 256;
    const oc_text_hparams *hp = &m->text->hp;
    size_t kvd = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    size_t per_token = 4 * (6 * (size_t)hp->n_embd + 2 * kvd + 2 * (size_t)hp->n_ff + (size_t)hp->head_dim + 2 +
                            (size_t)hp->n_vocab);
    size_t n = OC_CL_CHUNK_BYTES / OC_MAX(per_token, (size_t)1);
    return (int32_t)OC_MAX((size_t)256, OC_MIN(n, (size_t)OC_CL_CHUNK_MAX));
}

/* The limits a context really gets: max_context_tokens is clamped to the model's trained context
 * length (qwen2vl.context_length), so "-c 16777216" cannot reserve a KV cache for positions the
 * model was never given; batch_tokens 0 becomes the backend's chunk (auto_batch). Every size
 * (oc_context_memory_bytes, open) is computed from these. */
oc_context_params oc_ctx_effective_params(const oc_model *m, const oc_context_params *p) {
    oc_context_params q = *p;
    int32_t n_ctx = m->text->hp.n_ctx_train;
    if (n_ctx >= 16 && q.max_context_tokens > n_ctx) q.max_context_tokens = n_ctx;
    if (q.batch_tokens == 0) q.batch_tokens = auto_batch(m, &q);
    return q;
}

/* Limits for decoding request.image_paths: the context's pixel budget, and a JPEG decoded at the
 * smallest DCT scale that still has the pixels the model will look at (max_image_tokens). */
oc_image_limits oc_ctx_decode_limits(const oc_model *m, const oc_context_params *p) {
    oc_image_limits lim;
    oc_image_limits_default(&lim);
    lim.max_pixels = p->max_image_pixels;
    if (m->vision) {
        const oc_vision_hparams *vh = oc_vision_model_hparams(m->vision);
        int64_t unit = (int64_t)vh->patch_size * vh->merge_size;
        lim.reduce_to_pixels = (int64_t)p->max_image_tokens * unit * unit;
    }
    return lim;
}

/* Preprocessing as the model was trained: patch geometry, normalization, and the token limits as
 * smart_resize's pixel limits. */
void oc_ctx_prep_params(const oc_model *m, const oc_context_params *p, oc_qwen2vl_prep_params *pp) {
    const oc_vision_hparams *vh = oc_vision_model_hparams(m->vision);
    int64_t unit = (int64_t)vh->patch_size * vh->merge_size;
    oc_qwen2vl_prep_defaults(pp);
    pp->patch_size = vh->patch_size;
    pp->merge_size = vh->merge_size;
    pp->temporal_patch_size = vh->temporal_patch_size;
    pp->min_pixels = (int64_t)p->min_image_tokens * unit * unit;
    pp->max_pixels = (int64_t)p->max_image_tokens * unit * unit;
    memcpy(pp->image_mean, vh->image_mean, sizeof pp->image_mean);
    memcpy(pp->image_std, vh->image_std, sizeof pp->image_std);
}

/* The work arena's bytes (SIZE_MAX on overflow): the larger of one image (its decoded pixels
 * when the context decodes files, then its preprocessing, for the worst image the limits let
 * through) and a plan's token layout for a full context. */
size_t oc_ctx_work_bytes(const oc_model *m, const oc_context_params *p, const oc_plan *plan) {
    size_t images = 0, layout = 0, payload = 0, blocks = 0;
    if (m->vision && oc_ctx_max_images_of(m, p) > 0) {
        oc_qwen2vl_prep_params pp;
        oc_ctx_prep_params(m, p, &pp);
        if (!oc_qwen2vl_preprocess_bound(OC_IMAGE_DEFAULT_MAX_SIDE_PX, &pp, &payload, &blocks)) return SIZE_MAX;
        if (p->max_image_pixels > 0) {   /* decoded first, kept while it is preprocessed */
            oc_image_limits lim = oc_ctx_decode_limits(m, p);
            size_t decode = oc_image_decode_bytes(&lim);
            if (decode == SIZE_MAX || !oc_add_size(payload, decode, &payload)) return SIZE_MAX;
            blocks += OC_IMAGE_DECODE_BLOCKS;
        }
        images = oc_arena_bytes_for(payload, blocks);
    }
    if (plan && oc_ctx_max_images_of(m, p) > 0) {
        size_t n = oc_layout_bytes(p->max_context_tokens, oc_ctx_max_images_of(m, p));
        layout = n ? oc_arena_bytes_for(n, 1) : SIZE_MAX;
    }
    return OC_MAX(images, layout);
}

/* The context's own buffers (image embeddings, batch, logits, the work arena) in one block. */
int oc_ctx_own_bytes(const oc_model *m, const oc_context_params *p, const oc_plan *plan, size_t *out) {
    size_t d = (size_t)m->text->hp.n_embd, V = (size_t)m->text->hp.n_vocab, B = (size_t)oc_ctx_batch_of(p);
    size_t img_rows, img, total;
    if (!oc_mul_size((size_t)oc_ctx_max_images_of(m, p), (size_t)p->max_image_tokens, &img_rows) ||
        !oc_mul_size(img_rows, d * sizeof(float), &img))
        return 0;
    total = img + B * d * sizeof(float) + (size_t)p->max_context_tokens * sizeof(int32_t) + 2 * V * sizeof(float) +
            6 * OC_MEM_ALIGN;
    if (total < img) return 0;
    if (p->on_attention) {   /* the observation copies */
        size_t kvd = (size_t)m->text->hp.n_head_kv * (size_t)m->text->hp.head_dim, kv;
        if (!oc_mul_size((size_t)p->max_context_tokens, kvd * 2 * sizeof(float), &kv) ||
            !oc_add_size(total, kv + B * d * sizeof(float) + (size_t)OC_MAX(1, oc_ctx_max_images_of(m, p)) * 16 +
                         ((size_t)p->max_image_tokens + 1) * 8 + 4 * OC_MEM_ALIGN, &total))
            return 0;
    }
    size_t work = oc_ctx_work_bytes(m, p, plan);
    if (work == SIZE_MAX || !oc_add_size(total, work, &total)) return 0;
    *out = total;
    return 1;
}

/* plan: its KV cache sections size the cache (NULL: dense). */
oc_text_limits oc_ctx_text_limits(const oc_context_params *p, const oc_plan *plan) {
    oc_text_limits lim = { p->max_context_tokens, oc_ctx_batch_of(p), plan, p->max_answer_tokens };
    return lim;
}

/* oc_context_memory_bytes on backend kind, with the plan (or NULL). */
oc_status oc_ctx_memory_bytes(const oc_model *m, const oc_context_params *p, const oc_plan *plan,
                              oc_backend_kind kind, size_t *bytes, oc_error *err) {
    int n_threads = p->n_threads > 0 ? p->n_threads : oc_port_n_cpus();
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    oc_text_limits lim = oc_ctx_text_limits(p, plan);
    oc_backend_spec spec = { kind, p->device, NULL, oc_isa_best(&cpu), NULL };
    size_t total = 0, part;
    if (!oc_ctx_own_bytes(m, p, plan, &total)) return oc_fail(err, OC_ERR_RANGE, "context: limits too large");
    total += OC_MEM_ALIGN;   /* oc_mem_alloc's header of that block */
    part = oc_text_ctx_bytes(m->text, &lim, &spec, n_threads);
    if (!part || !oc_add_size(total, part, &total)) return oc_fail(err, OC_ERR_RANGE, "context: limits too large");
    if (m->vision && p->max_images > 0) {
        part = oc_vision_ctx_bytes_backend(m->vision, 4 * p->max_image_tokens, &spec, n_threads);
        if (!part || !oc_add_size(total, part, &total)) return oc_fail(err, OC_ERR_RANGE, "context: limits too large");
        /* on a device, the text context's image store and its zero word (open_engines) */
        part = oc_backend_buffer_bytes(kind, 1, 0) + oc_backend_buffer_bytes(kind, sizeof(int32_t), 0);
        if (kind != OC_BACKEND_KIND_CPU && !oc_add_size(total, part, &total))
            return oc_fail(err, OC_ERR_RANGE, "context: limits too large");
    }
    /* the device both graphs share (none on the CPU) */
    if (!oc_add_size(total, oc_backend_device_host_bytes(kind), &total))
        return oc_fail(err, OC_ERR_RANGE, "context: limits too large");
    /* the context's encode scratch (the model's tokenizer is shared) and its copy of the plan */
    if (!oc_add_size(total, oc_tok_scratch_memory_bytes(), &total) ||
        !oc_add_size(total, oc_plan_memory_bytes(plan), &total))
        return oc_fail(err, OC_ERR_RANGE, "context: limits too large");
    /* the context struct, its thread pool, the prompt arrays (ids + 3 position streams, image
     * spans) and the sampler's arrays, each block as oc_mem_alloc asks for it (+ OC_MEM_ALIGN) */
    part = sizeof(struct oc_context) + OC_MEM_ALIGN + oc_pool_memory_bytes(p->n_threads) +
           (size_t)p->max_context_tokens * 16 + 4 * OC_MEM_ALIGN +
           (size_t)OC_MAX(1, oc_ctx_max_images_of(m, p)) * sizeof(oc_prompt_image) + OC_MEM_ALIGN +
           (size_t)m->text->hp.n_vocab * 12 + 2 * OC_MEM_ALIGN;
    if (!oc_add_size(total, part, &total)) return oc_fail(err, OC_ERR_RANGE, "context: limits too large");
    *bytes = total;
    return OC_OK;
}

OC_API oc_status oc_context_memory_bytes(const oc_model *m, const oc_context_params *p, size_t *bytes,
                                         oc_error *err) {
    oc_status st = oc_ctx_check_params(m, p, err);
    oc_backend_kind kind = OC_BACKEND_KIND_CPU;
    if (st || (st = oc_backend_resolve((int)p->backend, p->device, &kind, err))) return st;
    oc_context_params q = oc_ctx_effective_params(m, p);
    oc_plan *plan = NULL;   /* its KV cache sections change the cache's size */
    if (p->plan_path && (st = oc_plan_load_file(&plan, p->plan_path, p->alloc, err))) return st;
    st = oc_ctx_memory_bytes(m, &q, plan, p->backend == OC_BACKEND_AUTO ? OC_BACKEND_KIND_CPU : kind, bytes, err);
    oc_plan_free(plan);
    return st;
}
