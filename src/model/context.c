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
 * (no device, a program that does not build, a model it cannot run), opens the CPU instead. */
#include "image/image.h"
#include "attention/layout.h"
#include "core/arena.h"
#include "model/model.h"
#include "kvcache/kv_cache.h"
#include "plan/plan.h"
#include "port.h"
#include "model/sample.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

struct oc_context {
    const oc_model *m;
    oc_allocator alloc;
    oc_context_params p;
    oc_pool *pool;
    oc_isa isa;
    oc_backend_kind backend;
    oc_backend_device *dev;      /* OpenCL: the device both graphs run on; NULL on the CPU */
    char backend_name[OC_ERROR_MESSAGE_BYTES + 64];
    oc_plan *plan;
    oc_tok_scratch *tok_scratch; /* encode scratch: the model's tokenizer is shared, read-only */
    oc_text_ctx *text;
    oc_vision_ctx *vision;
    oc_prompt prompt;
    oc_sampler sampler;
    float *img_embd;             /* [max_images * max_image_tokens][n_embd] */
    float *batch_embd;           /* [batch_tokens][n_embd] */
    int32_t *batch_ids;          /* [max_context_tokens]: a whole prompt when the plan evicts */
    float *logits, *prompt_logits;   /* [n_vocab] each */
    oc_arena work;               /* oc_ask's memory (work_bytes): one image's decoded pixels and its
                                  * preprocessing, then the prompt's token layout */
    oc_allocator work_alloc;     /* the allocator over work */
    size_t buf_bytes;
    void *buf;
    int has_prompt_logits;
    /* calibration hook (p.on_attention): f32 host copies, allocated at open only when it is set */
    float *obs_q;                /* [batch_tokens][n_embd] */
    float *obs_k, *obs_v;        /* [max_context_tokens][n_head_kv * head_dim] */
    int32_t *obs_images;         /* [max_images][4] */
    int32_t *obs_segments;       /* [max_image_tokens + 1][2]: vision windows */
    size_t context_bytes;        /* oc_context_memory_bytes at open */
    oc_stats stats;
};

static void observe_vision(void *user, int32_t layer, const float *qkv, int32_t n, const oc_token_span *seg,
                           int32_t n_seg);

OC_API void oc_context_params_default(oc_context_params *p) {
    memset(p, 0, sizeof *p);
    p->max_context_tokens = 4096;
    p->max_images = 8;
    p->max_image_tokens = 1280;
    p->min_image_tokens = 4;
    p->batch_tokens = 256;
    p->max_answer_tokens = 256;
}

OC_API void oc_request_default(oc_request *r) {
    memset(r, 0, sizeof *r);
    r->max_new_tokens = 256;
    r->image_labels = -1;
    r->sampling.temperature = 0.0f;
    r->sampling.top_k = 40;
    r->sampling.top_p = 0.95f;
}

static oc_status check_params(const oc_model *m, const oc_context_params *p, oc_error *err) {
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
    if (p->batch_tokens < 1)
        return oc_fail(err, OC_ERR_INVALID, "context: batch_tokens must be >= 1");
    if (p->max_answer_tokens < 0)
        return oc_fail(err, OC_ERR_INVALID, "context: max_answer_tokens %d is negative", p->max_answer_tokens);
    return OC_OK;
}

/* The limits a context really gets: max_context_tokens is clamped to the model's trained context
 * length (qwen2vl.context_length), so "-c 16777216" cannot reserve a KV cache for positions the
 * model was never given. Every size (oc_context_memory_bytes, open) is computed from these. */
static oc_context_params effective_params(const oc_model *m, const oc_context_params *p) {
    oc_context_params q = *p;
    int32_t n_ctx = m->text->hp.n_ctx_train;
    if (n_ctx >= 16 && q.max_context_tokens > n_ctx) q.max_context_tokens = n_ctx;
    return q;
}

static int32_t batch_of(const oc_context_params *p) { return OC_MIN(p->batch_tokens, p->max_context_tokens); }
static int32_t max_images_of(const oc_model *m, const oc_context_params *p) { return m->vision ? p->max_images : 0; }

/* Limits for decoding request.image_paths: the context's pixel budget, and a JPEG decoded at the
 * smallest DCT scale that still has the pixels the model will look at (max_image_tokens). */
static oc_image_limits decode_limits(const oc_model *m, const oc_context_params *p) {
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
static void prep_params(const oc_model *m, const oc_context_params *p, oc_qwen2vl_prep_params *pp) {
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
static size_t work_bytes(const oc_model *m, const oc_context_params *p, const oc_plan *plan) {
    size_t images = 0, layout = 0, payload = 0, blocks = 0;
    if (m->vision && max_images_of(m, p) > 0) {
        oc_qwen2vl_prep_params pp;
        prep_params(m, p, &pp);
        if (!oc_qwen2vl_preprocess_bound(OC_IMAGE_DEFAULT_MAX_SIDE_PX, &pp, &payload, &blocks)) return SIZE_MAX;
        if (p->max_image_pixels > 0) {   /* decoded first, kept while it is preprocessed */
            oc_image_limits lim = decode_limits(m, p);
            size_t decode = oc_image_decode_bytes(&lim);
            if (decode == SIZE_MAX || !oc_add_size(payload, decode, &payload)) return SIZE_MAX;
            blocks += OC_IMAGE_DECODE_BLOCKS;
        }
        images = oc_arena_bytes_for(payload, blocks);
    }
    if (plan && max_images_of(m, p) > 0) {
        size_t n = oc_layout_bytes(p->max_context_tokens, max_images_of(m, p));
        layout = n ? oc_arena_bytes_for(n, 1) : SIZE_MAX;
    }
    return OC_MAX(images, layout);
}

/* The context's own buffers (image embeddings, batch, logits, the work arena) in one block. */
static int own_bytes(const oc_model *m, const oc_context_params *p, const oc_plan *plan, size_t *out) {
    size_t d = (size_t)m->text->hp.n_embd, V = (size_t)m->text->hp.n_vocab, B = (size_t)batch_of(p);
    size_t img_rows, img, total;
    if (!oc_mul_size((size_t)max_images_of(m, p), (size_t)p->max_image_tokens, &img_rows) ||
        !oc_mul_size(img_rows, d * sizeof(float), &img))
        return 0;
    total = img + B * d * sizeof(float) + (size_t)p->max_context_tokens * sizeof(int32_t) + 2 * V * sizeof(float) +
            6 * OC_MEM_ALIGN;
    if (total < img) return 0;
    if (p->on_attention) {   /* the observation copies */
        size_t kvd = (size_t)m->text->hp.n_head_kv * (size_t)m->text->hp.head_dim, kv;
        if (!oc_mul_size((size_t)p->max_context_tokens, kvd * 2 * sizeof(float), &kv) ||
            !oc_add_size(total, kv + B * d * sizeof(float) + (size_t)OC_MAX(1, max_images_of(m, p)) * 16 +
                         ((size_t)p->max_image_tokens + 1) * 8 + 4 * OC_MEM_ALIGN, &total))
            return 0;
    }
    size_t work = work_bytes(m, p, plan);
    if (work == SIZE_MAX || !oc_add_size(total, work, &total)) return 0;
    *out = total;
    return 1;
}

/* plan: its KV cache sections size the cache (NULL: dense). */
static oc_text_limits text_limits(const oc_context_params *p, const oc_plan *plan) {
    oc_text_limits lim = { p->max_context_tokens, batch_of(p), plan, p->max_answer_tokens };
    return lim;
}

/* oc_context_memory_bytes on backend kind, with the plan (or NULL). */
static oc_status memory_bytes(const oc_model *m, const oc_context_params *p, const oc_plan *plan,
                              oc_backend_kind kind, size_t *bytes, oc_error *err) {
    int n_threads = p->n_threads > 0 ? p->n_threads : oc_port_n_cpus();
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    oc_text_limits lim = text_limits(p, plan);
    oc_backend_spec spec = { kind, p->device, NULL, oc_isa_best(&cpu), NULL };
    size_t total = 0, part;
    if (!own_bytes(m, p, plan, &total)) return oc_fail(err, OC_ERR_RANGE, "context: limits too large");
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
           (size_t)OC_MAX(1, max_images_of(m, p)) * sizeof(oc_prompt_image) + OC_MEM_ALIGN +
           (size_t)m->text->hp.n_vocab * 12 + 2 * OC_MEM_ALIGN;
    if (!oc_add_size(total, part, &total)) return oc_fail(err, OC_ERR_RANGE, "context: limits too large");
    *bytes = total;
    return OC_OK;
}

OC_API oc_status oc_context_memory_bytes(const oc_model *m, const oc_context_params *p, size_t *bytes,
                                         oc_error *err) {
    oc_status st = check_params(m, p, err);
    oc_backend_kind kind = OC_BACKEND_KIND_CPU;
    if (st || (st = oc_backend_resolve((int)p->backend, p->device, &kind, err))) return st;
    oc_context_params q = effective_params(m, p);
    oc_plan *plan = NULL;   /* its KV cache sections change the cache's size */
    if (p->plan_path && (st = oc_plan_load_file(&plan, p->plan_path, p->alloc, err))) return st;
    st = memory_bytes(m, &q, plan, p->backend == OC_BACKEND_AUTO ? OC_BACKEND_KIND_CPU : kind, bytes, err);
    oc_plan_free(plan);
    return st;
}

/* The decoder's KV cache sections run (kvcache/kv_cache.h states the rules when they meet on a
 * layer and refuses the impossible combinations); the vision encoder keeps no KV cache, so ZipVL
 * thresholds and lazy groups there are refused rather than silently ignored. */
static oc_status check_plan_features(const oc_model *m, const oc_plan *plan, const char *path, oc_error *err) {
    oc_plan_stats ps;
    oc_plan_stats_get(plan, OC_PLAN_VISION, &ps);
    const char *what = ps.n_zipvl_layers ? "zipvl-tau" : ps.n_lazy_layers ? "lazy-group" : NULL;
    if (what)
        return oc_fail(err, OC_ERR_UNSUPPORTED, "%s: 'vision ... %s' lines are not applied by this version of "
                       "ocellus (the runtime runs them in the decoder)", path, what);
    if (m->vision && oc_vision_model_hparams(m->vision)->kind == OC_VISION_QWEN25VL &&
        ps.n_per_pattern[OC_PATTERN_VERTICAL_SLASH] + ps.n_per_pattern[OC_PATTERN_GRID] > 0)
        /* their index is estimated over one causal or bidirectional sequence (attention/dyn.h);
         * Qwen2.5-VL's window layers attend within windows (segments) */
        return oc_fail(err, OC_ERR_UNSUPPORTED, "%s: vertical-slash and grid vision heads need full-attention "
                       "layers; this Qwen2.5-VL encoder attends within windows", path);
    oc_kv_policy *pol = oc_mem_alloc(&plan->alloc, sizeof *pol);   /* ~10 KB: not on the stack */
    if (!pol) return oc_fail(err, OC_ERR_NOMEM, "context: out of memory");
    const oc_text_hparams *hp = &m->text->hp;
    oc_status st = oc_kv_policy_build(pol, &plan->stacks[OC_PLAN_DECODER], hp->n_layers, hp->n_head_kv,
                                      plan->kv_window_tokens, path, err);
    oc_mem_free(&plan->alloc, pol, sizeof *pol);
    return st;
}

static void close_engines(oc_context *c) {
    oc_vision_ctx_close(c->vision);
    oc_text_ctx_close(c->text);
    oc_backend_device_close(c->dev);
    c->vision = NULL;
    c->text = NULL;
    c->dev = NULL;
}

/* The text and vision graphs on backend kind (OpenCL: on one device opened here). */
static oc_status open_engines(oc_context *c, oc_backend_kind kind, const char *device, oc_error *err) {
    const oc_model *m = c->m;
    oc_text_limits lim = text_limits(&c->p, c->plan);
    oc_status st = oc_backend_device_open(&c->dev, kind, device, &c->alloc, err);
    oc_backend_spec spec = { kind, device, c->pool, c->isa, c->dev };
    if (!st) st = oc_text_ctx_open_backend(&c->text, m->text, &lim, &spec, &c->alloc, err);
    if (!st && m->vision && c->p.max_images > 0)
        st = oc_vision_ctx_open_backend(&c->vision, m->vision, 4 * c->p.max_image_tokens, &spec, &c->alloc, err);
    /* on a device the image embeddings stay there, in the text context's store (the CPU reads
     * the host store c->img_embd in place) */
    if (!st && c->vision && kind != OC_BACKEND_KIND_CPU)
        st = oc_text_ctx_image_store_open(c->text, max_images_of(m, &c->p) * c->p.max_image_tokens, err);
    if (st) {
        close_engines(c);
        return st;
    }
    c->backend = kind;
    if (kind == OC_BACKEND_KIND_CPU)
        snprintf(c->backend_name, sizeof c->backend_name, "CPU (%s, %d thread%s)", oc_isa_name(c->isa),
                 oc_pool_n_threads(c->pool), oc_pool_n_threads(c->pool) == 1 ? "" : "s");
    else
        snprintf(c->backend_name, sizeof c->backend_name, "%s", oc_backend_device_name(c->dev));
    return OC_OK;
}

OC_API oc_status oc_context_open(oc_context **out, const oc_model *m, const oc_context_params *params,
                                 oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "oc_context_open: out is NULL");
    *out = NULL;
    oc_status st = check_params(m, params, err);
    if (st) return st;
    oc_context_params eff = effective_params(m, params);
    const oc_context_params *p = &eff;
    oc_backend_kind kind;
    size_t total_bytes;   /* limits too large for memory arithmetic fail here, before anything opens */
    if ((st = oc_backend_resolve((int)p->backend, p->device, &kind, err)) ||
        (st = memory_bytes(m, p, NULL, kind, &total_bytes, err)))
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
        if ((st = check_plan_features(m, c->plan, p->plan_path, err))) goto fail;
    }
    if ((st = oc_tok_scratch_open(&c->tok_scratch, &c->alloc, err))) goto fail;
    st = open_engines(c, kind, p->device, err);
    if (st && p->backend == OC_BACKEND_AUTO && kind != OC_BACKEND_KIND_CPU) {
        char why[OC_ERROR_MESSAGE_BYTES];
        snprintf(why, sizeof why, "%s", err ? err->message : "it did not open");
        if (!(st = open_engines(c, OC_BACKEND_KIND_CPU, NULL, err))) {
            size_t n = strlen(c->backend_name);
            snprintf(c->backend_name + n, sizeof c->backend_name - n, "; OpenCL not used: %s", why);
        }
    }
    if (st) goto fail;
    if ((st = memory_bytes(m, p, c->plan, c->backend, &c->context_bytes, err))) goto fail;
    c->stats.context_bytes = c->context_bytes;
    c->stats.device_bytes = oc_backend_device_bytes(c->dev);
    if ((st = oc_prompt_init(&c->prompt, p->max_context_tokens, OC_MAX(1, max_images_of(m, p)), &c->alloc, err)))
        goto fail;
    oc_sampling greedy = { 0.0f, 40, 0.95f, 0 };
    if ((st = oc_sampler_init(&c->sampler, m->text->hp.n_vocab, &greedy, &c->alloc, err))) goto fail;
    if (!own_bytes(m, p, c->plan, &c->buf_bytes) || !(c->buf = oc_mem_alloc(&c->alloc, c->buf_bytes))) {
        st = oc_fail(err, OC_ERR_NOMEM, "context: out of memory for %zu bytes of buffers", c->buf_bytes);
        goto fail;
    }
    size_t d = (size_t)m->text->hp.n_embd, V = (size_t)m->text->hp.n_vocab, B = (size_t)batch_of(p);
    char *b = c->buf;
#define TAKE(ptr, n_bytes) do { (ptr) = (void *)b; b += ((n_bytes) + OC_MEM_ALIGN - 1) / OC_MEM_ALIGN * OC_MEM_ALIGN; } while (0)
    TAKE(c->img_embd, (size_t)max_images_of(m, p) * (size_t)p->max_image_tokens * d * sizeof(float));
    TAKE(c->batch_embd, B * d * sizeof(float));
    TAKE(c->batch_ids, (size_t)p->max_context_tokens * sizeof(int32_t));
    TAKE(c->logits, V * sizeof(float));
    TAKE(c->prompt_logits, V * sizeof(float));
    if (p->on_attention && c->vision) oc_vision_ctx_set_observer(c->vision, observe_vision, c);
    if (p->on_attention) {
        size_t kvd = (size_t)m->text->hp.n_head_kv * (size_t)m->text->hp.head_dim;
        TAKE(c->obs_q, B * d * sizeof(float));
        TAKE(c->obs_k, (size_t)p->max_context_tokens * kvd * sizeof(float));
        TAKE(c->obs_v, (size_t)p->max_context_tokens * kvd * sizeof(float));
        TAKE(c->obs_images, (size_t)OC_MAX(1, max_images_of(m, p)) * 16);
        TAKE(c->obs_segments, ((size_t)p->max_image_tokens + 1) * 8);
    }
    size_t n_work = work_bytes(m, p, c->plan);
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
    close_engines(c);
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

static double ms_since(uint64_t t0) { return (double)(oc_port_now_ns() - t0) / 1e6; }

static void progress(const oc_context *c, const char *stage, int32_t done, int32_t total) {
    if (c->p.progress) c->p.progress(c->p.progress_user, stage, done, total);
}

/* Preprocess and encode image i into the embedding store at token row *row; grid out in merged
 * tokens. The preprocessing takes its memory from the work arena, after whatever the image itself
 * holds there (a decoded file); the size is checked before anything is allocated. */
static oc_status encode_image(oc_context *c, const oc_image_rgb *in, int32_t index, int32_t *row,
                              int32_t grid[2], oc_attn_stats *as, oc_error *err) {
    const oc_vision_hparams *vh = oc_vision_model_hparams(c->m->vision);
    oc_image img;
    oc_error e;
    oc_status st = oc_image_wrap_rgb8(&img, in->rgb, in->width_px, in->height_px, in->stride_bytes, NULL, &e);
    if (st) return oc_fail(err, st, "image %d: %s", index + 1, e.message);
    oc_qwen2vl_prep_params pp;
    prep_params(c->m, &c->p, &pp);
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

/* The text forward's observation hook -> the public oc_attn_view. */
static void observe_layer(void *user, int32_t layer, int32_t n_q, int32_t n_kv) {
    oc_context *c = user;
    const oc_text_hparams *hp = &c->m->text->hp;
    oc_attn_view v;
    v.layer = layer;
    v.n_q = n_q;
    v.q_first = n_kv - n_q;
    v.n_kv = n_kv;
    v.n_head = hp->n_head;
    v.n_head_kv = hp->n_head_kv;
    v.head_dim = hp->head_dim;
    v.q = c->obs_q;
    v.k = c->obs_k;
    v.v = c->obs_v;
    v.n_prompt_tokens = c->prompt.n_tokens;
    v.n_images = c->prompt.n_images;
    v.images = c->obs_images;
    v.stack = 0;
    v.n_segments = 0;
    v.segments = NULL;
    c->p.on_attention(c->p.attention_user, &v);
}

/* The vision encoder's observation hook -> the public oc_attn_view (stack 1). */
static void observe_vision(void *user, int32_t layer, const float *qkv, int32_t n, const oc_token_span *seg,
                           int32_t n_seg) {
    oc_context *c = user;
    const oc_vision_hparams *vh = oc_vision_model_hparams(c->m->vision);
    size_t nd = (size_t)n * (size_t)vh->hidden;
    oc_attn_view v;
    memset(&v, 0, sizeof v);
    v.stack = 1;
    v.layer = layer;
    v.n_q = v.n_kv = v.n_prompt_tokens = n;
    v.n_head = v.n_head_kv = vh->n_heads;
    v.head_dim = vh->head_dim;
    v.q = qkv;
    v.k = qkv + nd;
    v.v = qkv + 2 * nd;
    n_seg = OC_MIN(n_seg, c->p.max_image_tokens + 1);   /* windows <= merged tokens of an image */
    for (int32_t i = 0; i < n_seg; i++) {
        c->obs_segments[2 * i] = seg[i].start;
        c->obs_segments[2 * i + 1] = seg[i].end;
    }
    v.n_segments = n_seg;
    v.segments = c->obs_segments;
    c->p.on_attention(c->p.attention_user, &v);
}

/* Wire the observation hook into a batch (nothing when there is no observer). */
static void observe_batch(oc_context *c, oc_text_batch *b) {
    if (!c->p.on_attention) return;
    b->on_attn = observe_layer;
    b->obs_user = c;
    b->obs_q = c->obs_q;
    b->obs_k = c->obs_k;
    b->obs_v = c->obs_v;
}

static int is_stop(const oc_model *m, int32_t id) {
    return id == m->stop_ids[0] || id == m->stop_ids[1] || id == m->stop_ids[2];
}

/* Prefill the prompt in batches; the last batch leaves the last position's logits in c->logits.
 * Image embeddings are taken by the prompt's image spans (oc_prompt_add_image placed them), never
 * by token id: an <|image_pad|> id that text produced (a vocabulary may mark it user-defined, so plain
 * text matches it) must not consume a row; n_image_rows is what encode_image wrote, and a span
 * beyond it is refused rather than read past the store. */
static oc_status prefill(oc_context *c, const oc_token_layout *layout, int32_t n_image_rows, oc_attn_stats *as,
                         oc_error *err) {
    const oc_prompt *pr = &c->prompt;
    size_t d = (size_t)c->m->text->hp.n_embd;
    int32_t B = batch_of(&c->p), img = 0, img_row0 = 0;
    int32_t n_span_rows = 0;
    for (int32_t k = 0; k < pr->n_images; k++) n_span_rows += pr->images[k].n_tokens;
    if (n_span_rows != n_image_rows)
        return oc_fail(err, OC_ERR_INVALID, "prompt: %d image tokens placed for %d encoded", n_span_rows,
                       n_image_rows);
    const oc_stack_plan *dp = c->plan ? &c->plan->stacks[OC_PLAN_DECODER] : NULL;
    int in_store = oc_text_ctx_image_store(c->text) != NULL;
    /* a plan that evicts: the whole prompt in one call (text_model.h), image rows by index */
    int whole = oc_text_ctx_prefills_by_layer(c->text);
    if (whole) B = pr->n_tokens;
    for (int32_t s = 0; s < pr->n_tokens; s += B) {
        int32_t n = OC_MIN(B, pr->n_tokens - s);
        for (int32_t i = 0; i < n; i++) {
            int32_t p = s + i;
            while (img < pr->n_images && p >= pr->images[img].first_token + pr->images[img].n_tokens)
                img_row0 += pr->images[img++].n_tokens;
            if (img < pr->n_images && p >= pr->images[img].first_token) {
                int32_t row = img_row0 + (p - pr->images[img].first_token);
                if (in_store || whole) {   /* text_model.h: ids[i] < 0 names row -1 - ids[i] */
                    c->batch_ids[i] = -1 - row;
                } else {
                    c->batch_ids[i] = -1;
                    memcpy(c->batch_embd + (size_t)i * d, c->img_embd + (size_t)row * d, d * sizeof(float));
                }
            } else {
                c->batch_ids[i] = pr->ids[p];
            }
        }
        oc_text_batch b;
        memset(&b, 0, sizeof b);
        b.n_tokens = n;
        b.ids = c->batch_ids;
        b.embd = whole && !in_store ? c->img_embd : c->batch_embd;
        b.embd_in_store = in_store;
        b.embd_indexed = whole && !in_store;
        b.pos_t = pr->pos_t + s;
        b.pos_h = pr->pos_h + s;
        b.pos_w = pr->pos_w + s;
        b.plan = dp;
        b.layout = layout;
        b.logits = s + n == pr->n_tokens ? c->logits : NULL;
        b.prompt_tokens = pr->n_tokens;   /* the KV cache evicts as the prompt passes */
        observe_batch(c, &b);
        oc_status st = oc_text_forward(c->text, &b, as, err);
        if (st) return st;
        progress(c, "prefill", s + n, pr->n_tokens);
    }
    return OC_OK;
}

static oc_status build_layout(oc_context *c, oc_token_layout **layout, oc_error *err) {
    *layout = NULL;
    if (!c->plan || c->prompt.n_images == 0) return OC_OK;
    oc_token_span spans[1024];
    int32_t n = OC_MIN(c->prompt.n_images, (int32_t)OC_ARRAY_LEN(spans));
    for (int32_t i = 0; i < n; i++) {
        spans[i].start = c->prompt.images[i].first_token;
        spans[i].end = c->prompt.images[i].first_token + c->prompt.images[i].n_tokens;
    }
    oc_arena_reset(&c->work);   /* the images are encoded: the arena holds the layout now */
    return oc_layout_build(layout, c->prompt.n_tokens, spans, n,
                           (float)c->plan->sink_fraction_ppm / (float)OC_PLAN_PPM, &c->work_alloc, err);
}

static oc_status generate(oc_context *c, const oc_request *r, uint64_t t_start, oc_attn_stats *as,
                          oc_error *err) {
    const oc_model *m = c->m;
    int32_t V = m->text->hp.n_vocab;
    oc_tok_decoder dec;
    oc_tok_decoder_init(&dec, 0);
    char piece[OC_TOKENIZER_MAX_PIECE_BYTES + 8];
    int32_t tok = oc_sampler_next(&c->sampler, c->logits, V);
    c->stats.ttft_ms = ms_since(t_start);
    uint64_t t_decode = oc_port_now_ns();
    int32_t next_pos = c->prompt.next_pos;
    oc_status st = OC_OK;
    int stop = 0;
    for (int32_t g = 0; g < r->max_new_tokens && !stop; g++) {
        if (is_stop(m, tok)) break;
        size_t n_out = 0;
        if ((st = oc_tok_decoder_push(&dec, m->tok, tok, piece, sizeof piece, &n_out, err))) break;
        c->stats.n_generated++;
        if (n_out && r->on_text && r->on_text(r->user, piece, n_out)) stop = 1;
        if (g + 1 == r->max_new_tokens || stop) break;
        oc_text_batch b;
        memset(&b, 0, sizeof b);
        int32_t pos = next_pos + g;
        b.n_tokens = 1;
        b.ids = &tok;
        b.pos_t = b.pos_h = b.pos_w = &pos;
        b.plan = c->plan ? &c->plan->stacks[OC_PLAN_DECODER] : NULL;
        b.logits = c->logits;
        observe_batch(c, &b);
        if ((st = oc_text_forward(c->text, &b, as, err))) break;
        tok = oc_sampler_next(&c->sampler, c->logits, V);
    }
    char tail[4];
    size_t n_tail = oc_tok_decoder_flush(&dec, tail);
    if (n_tail && r->on_text && !stop) r->on_text(r->user, tail, n_tail);
    c->stats.decode_ms = ms_since(t_decode);
    return st;
}

/* "context overflow" with what to do about it: a context already at the model's trained length
 * (where -c beyond it was clamped) cannot be raised. */
static oc_status overflow(const oc_context *c, const char *why, oc_error *err) {
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
static oc_status check_prompt_fits(oc_context *c, const oc_request *r, int32_t *grids, oc_error *err) {
    const oc_model *m = c->m;
    oc_qwen2vl_prep_params pp;
    oc_image_limits lim;
    int32_t unit = 1;
    if (r->n_images > 0) {
        const oc_vision_hparams *vh = oc_vision_model_hparams(m->vision);
        unit = vh->patch_size * vh->merge_size;
        prep_params(m, &c->p, &pp);
        lim = decode_limits(m, &c->p);
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
    if (st == OC_ERR_RANGE) return overflow(c, e.message, err);
    return OC_OK;   /* other errors are reported when the prompt is built for real */
}

OC_API oc_status oc_ask(oc_context *c, const oc_request *r, oc_error *err) {
    if (!c || !r) return oc_fail(err, OC_ERR_INVALID, "oc_ask: context or request is NULL");
    const oc_model *m = c->m;
    memset(&c->stats, 0, sizeof c->stats);
    c->stats.context_bytes = c->context_bytes;
    c->stats.device_bytes = oc_backend_device_bytes(c->dev);
    c->has_prompt_logits = 0;
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
    if ((st = check_prompt_fits(c, r, grids, err))) return st;
    for (int32_t i = 0; i < r->n_images; i++) {
        progress(c, "vision", i, r->n_images);
        oc_arena_reset(&c->work);   /* one image at a time */
        if (r->images) {
            if ((st = encode_image(c, &r->images[i], i, &row, grids + 2 * i, &as, err))) return st;
            continue;
        }
        /* decoded now, into the context's image buffer, and gone before the next one */
        oc_image img;
        oc_image_limits lim = decode_limits(m, &c->p);
        if ((st = oc_image_load(&img, r->image_paths[i], &lim, &c->work_alloc, err))) return st;
        oc_image_rgb view = oc_image_view(&img);
        st = encode_image(c, &view, i, &row, grids + 2 * i, &as, err);
        oc_image_free(&img);
        if (st) return st;
    }
    if (r->n_images) progress(c, "vision", r->n_images, r->n_images);
    if (r->n_images && (st = oc_backend_device_finish(c->dev, err))) return st;   /* the last image's kernels too */
    c->stats.vision_ms = ms_since(t0);
    c->stats.n_images = r->n_images;
    c->stats.n_image_tokens = row;

    oc_prompt_reset(&c->prompt);
    oc_text_ctx_reset(c->text);
    oc_error e;
    if ((st = oc_prompt_chat(&c->prompt, m->tok, c->tok_scratch, &m->chat, r->system, grids, r->n_images,
                               r->image_labels < 0 ? m->image_labels : r->image_labels != 0, r->question, &e))) {
        if (st == OC_ERR_RANGE) return overflow(c, e.message, err);
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
    if ((st = build_layout(c, &layout, err))) return st;
    uint64_t t1 = oc_port_now_ns();
    oc_attn_stats after_vision = as, after_prefill;
    st = prefill(c, layout, row, &as, err);
    c->stats.prefill_ms = ms_since(t1);
    after_prefill = as;
    size_t kv_capacity_bytes;
    oc_text_ctx_kv_bytes(c->text, &c->stats.kv_prefill_bytes, &kv_capacity_bytes);
    if (!st) {
        memcpy(c->prompt_logits, c->logits, sizeof(float) * (size_t)m->text->hp.n_vocab);
        c->has_prompt_logits = 1;
        if (r->max_new_tokens > 0) st = generate(c, r, t0, &as, err);
    }
    oc_layout_free(layout);
    c->stats.attn_flops_kept = as.flops_kept;
    c->stats.attn_flops_skipped = as.flops_skipped;
    c->stats.attn_prefill_flops_kept = after_prefill.flops_kept - after_vision.flops_kept;
    c->stats.attn_prefill_flops_skipped = after_prefill.flops_skipped - after_vision.flops_skipped;
    c->stats.attn_decode_flops_kept = as.flops_kept - after_prefill.flops_kept;
    c->stats.attn_decode_flops_skipped = as.flops_skipped - after_prefill.flops_skipped;
    return st;
}
