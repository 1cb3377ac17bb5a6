/* context_engines.c: the text and vision graphs of a context opened on one backend (OpenCL: on one
 * device opened here), and the plan features a context refuses before it opens them. */
#include "model/context_state.h"

#include <stdio.h>
#include <string.h>

/* The decoder's KV cache sections run (kvcache/kv_cache.h states the rules when they meet on a
 * layer and refuses the impossible combinations); the vision encoder keeps no KV cache, so ZipVL
 * thresholds and lazy groups there are refused rather than silently ignored. */
oc_status oc_ctx_check_plan_features(const oc_model *m, const oc_plan *plan, const char *path, oc_error *err) {
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

void oc_ctx_close_engines(oc_context *c) {
    oc_vision_ctx_close(c->vision);
    oc_text_ctx_close(c->text);
    oc_backend_device_close(c->dev);
    c->vision = NULL;
    c->text = NULL;
    c->dev = NULL;
}

/* The text and vision graphs on backend kind (OpenCL: on one device opened here). */
oc_status oc_ctx_open_engines(oc_context *c, oc_backend_kind kind, const char *device, oc_error *err) {
    const oc_model *m = c->m;
    oc_text_limits lim = oc_ctx_text_limits(&c->p, c->plan);
    oc_status st = oc_backend_device_open(&c->dev, kind, device, &c->alloc, err);
    oc_backend_spec spec = { kind, device, c->pool, c->isa, c->dev };
    if (!st) st = oc_text_ctx_open_backend(&c->text, m->text, &lim, &spec, &c->alloc, err);
    if (!st && c->p.profile) oc_text_ctx_time_sync(c->text, c->dev);
    if (!st && m->vision && c->p.max_images > 0)
        st = oc_vision_ctx_open_backend(&c->vision, m->vision, 4 * c->p.max_image_tokens, &spec, &c->alloc, err);
    /* on a device the image embeddings stay there, in the text context's store (the CPU reads
     * the host store c->img_embd in place) */
    if (!st && c->vision && kind != OC_BACKEND_KIND_CPU)
        st = oc_text_ctx_image_store_open(c->text, oc_ctx_max_images_of(m, &c->p) * c->p.max_image_tokens, err);
    if (st) {
        oc_ctx_close_engines(c);
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
