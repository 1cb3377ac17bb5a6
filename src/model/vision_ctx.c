/* vision_ctx.c: sizing, opening and closing an oc_vision_ctx (vision_model.h): opens the context's
 * backend instance for its limits, hands it every weight and 1-D tensor once (the CPU backend wraps
 * them in place; a device uploads them) and allocates every buffer of the forward pass
 * (vision_ctx.h), so oc_vision_encode (vision_encoder.c) allocates nothing. oc_vision_ctx_bytes adds up the
 * same sizes without allocating. */
#include "model/vision_ctx.h"
#include "model/graph_ctx.h"

#include <string.h>

/* Backend buffers in the order of vision_ctx.h's fields. */
enum { BUF_X, BUF_H, BUF_W, BUF_COS, BUF_SIN, BUF_ORDER, BUF_INV, BUF_PIXELS, BUF_OUT, N_BUF };

typedef struct sizes {
    size_t buf[N_BUF];
    uint32_t flags[N_BUF];
    size_t layers, table, inv_freq, order, windows;   /* host block parts */
    size_t host;
} sizes;

static int pad(size_t n, size_t *out) {
    size_t a;
    if (!oc_add_size(n, OC_MEM_ALIGN - 1, &a)) return 0;
    *out = a & ~(size_t)(OC_MEM_ALIGN - 1);
    return 1;
}

static int floats(size_t a, size_t b, size_t c, size_t *out) {
    size_t t;
    return oc_mul_size(a, b, &t) && oc_mul_size(t, c, &t) && oc_mul_size(t, sizeof(float), out);
}

/* 0 on overflow. */
static int plan_sizes(const oc_vision_hparams *hp, int32_t max_patches, sizes *s) {
    size_t n = (size_t)max_patches, d = (size_t)hp->hidden, f = (size_t)hp->ffn;
    size_t unit = (size_t)hp->merge_size * (size_t)hp->merge_size, nm = n / unit + 1;
    size_t n_mlp = hp->kind == OC_VISION_QWEN25VL ? 2 : 1, bx, bh2, bw, bw2, bcs, bpix, bout;
    if (!floats(n, d, 1, &bx) || !floats(nm, (size_t)hp->proj_dim, 1, &bh2) || !floats(n, d, 3, &bw) ||
        !floats(n, f, n_mlp, &bw2) || !floats(n, (size_t)hp->head_dim / 2, 1, &bcs) ||
        !floats(n, (size_t)oc_vision_patch_dim(hp), 1, &bpix) || !floats(nm, (size_t)hp->proj_dim, 1, &bout))
        return 0;
    size_t bytes[N_BUF] = { bx, OC_MAX(bx, bh2), OC_MAX(bw, bw2), bcs, bcs, nm * 4, nm * 4, bpix, bout };
    memcpy(s->buf, bytes, sizeof bytes);
    for (int i = 0; i < N_BUF; i++) s->flags[i] = i >= BUF_COS ? OC_BT_HOST : 0;
    size_t layers;
    if (!oc_mul_size(sizeof(oc_vision_layer_bt), (size_t)hp->n_layers, &layers) || !pad(layers, &s->layers) ||
        !pad(bcs, &s->table) || !pad((size_t)hp->head_dim / 4 * sizeof(float), &s->inv_freq) ||
        !pad(nm * sizeof(int32_t), &s->order) || !pad(nm * sizeof(oc_token_span), &s->windows))
        return 0;
    s->host = s->layers + 2 * s->table + s->inv_freq + 2 * s->order + s->windows;
    return s->host >= s->layers;
}

static int64_t max_n_in(const oc_vision_hparams *hp) {
    int64_t md = (int64_t)hp->hidden * hp->merge_size * hp->merge_size;
    return OC_MAX(OC_MAX((int64_t)oc_vision_patch_dim(hp), (int64_t)hp->hidden), OC_MAX((int64_t)hp->ffn, md));
}

static oc_backend_limits backend_limits(const oc_vision_hparams *hp, int32_t max_patches) {
    /* windows (Qwen2.5-VL) hold whole merged tokens: at most one per merged token */
    int32_t max_windows = max_patches / (hp->merge_size * hp->merge_size) + 1;
    oc_backend_limits bl = { max_n_in(hp), max_patches,
                             { max_patches, max_patches, hp->n_heads, hp->n_heads, hp->head_dim }, 0, max_windows, 0, 0 };
    return bl;
}

/* The tensors take_weights hands the backend with data (each a buffer on a device). */
static size_t n_tensors(const oc_vision_model *m) {
    size_t n = (m->patch.data != NULL) + (m->mm0.data != NULL) + (m->mm2.data != NULL) + (m->post_ln_w != NULL) +
               (m->post_ln_b != NULL) + (m->mm0_b != NULL) + (m->mm2_b != NULL);
    for (int32_t il = 0; il < m->hp.n_layers; il++) {
        const oc_vision_layer *L = &m->layers[il];
        const void *all[] = { L->ln1_w, L->ln1_b, L->ln2_w, L->ln2_b, L->q.data, L->k.data, L->v.data, L->o.data,
                              L->up.data, L->gate.data, L->down.data, L->q_b, L->k_b, L->v_b, L->o_b, L->up_b,
                              L->gate_b, L->down_b };
        for (size_t i = 0; i < OC_ARRAY_LEN(all); i++) n += all[i] != NULL;
    }
    return n;
}

size_t oc_vision_ctx_bytes_backend(const oc_vision_model *m, int32_t max_patches, const oc_backend_spec *spec,
                                   int n_threads) {
    if (!m || !spec || max_patches < 1 || n_threads < 1) return 0;
    sizes s;
    if (!plan_sizes(&m->hp, max_patches, &s)) return 0;
    oc_backend_limits bl = backend_limits(&m->hp, max_patches);
    size_t t = oc_backend_bytes(spec, &bl, n_threads);
    if (spec->kind == OC_BACKEND_KIND_CPU && !t) return 0;
    if (!oc_add_block(&t, sizeof(oc_vision_ctx)) ||
        !oc_add_block(&t, s.host) || !oc_add_size(t, n_tensors(m) * oc_backend_tensor_bytes(spec->kind), &t))
        return 0;
    for (int i = 0; i < N_BUF; i++)
        if (!oc_add_size(t, oc_backend_buffer_bytes(spec->kind, s.buf[i], s.flags[i]), &t)) return 0;
    return t;
}

size_t oc_vision_ctx_bytes(const oc_vision_model *m, int32_t max_patches, int n_threads) {
    size_t most = 0;
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {   /* the hungriest ISA table that runs here */
        oc_backend_spec spec = oc_graph_cpu_spec(NULL, (oc_isa)isa);
        if (!oc_matmul_kernels_for((oc_isa)isa)) continue;
        size_t b = oc_vision_ctx_bytes_backend(m, max_patches, &spec, n_threads);
        if (!b) return 0;
        most = OC_MAX(most, b);
    }
    return most;
}

static oc_bt *buffer(oc_vision_ctx *c, int i) {
    oc_bt *all[N_BUF] = { &c->x, &c->h, &c->w, &c->cos_t, &c->sin_t, &c->order, &c->inv_order, &c->pixels, &c->out };
    return all[i];
}

/* A weight that may be absent (the 2-VL gate). */
static oc_status weight(oc_backend *be, oc_bw *dst, const oc_weight *src, oc_error *err) {
    if (!src->data) return OC_OK;
    return be->ops->weight(be, dst, src, err);
}

static oc_status vec(oc_backend *be, oc_bt *dst, const float *src, int64_t n, oc_error *err) {
    return be->ops->import(be, dst, src, (size_t)n * sizeof(float), err);
}

/* Every weight and 1-D tensor to the backend, once. */
static oc_status take_weights(oc_vision_ctx *c, oc_error *err) {
    const oc_vision_model *m = c->m;
    const oc_vision_hparams *hp = &m->hp;
    oc_backend *be = c->be;
    int64_t d = hp->hidden, f = hp->ffn;
    oc_status s;
    if ((s = weight(be, &c->patch, &m->patch, err)) || (s = weight(be, &c->mm0, &m->mm0, err)) ||
        (s = weight(be, &c->mm2, &m->mm2, err)) || (s = vec(be, &c->post_ln_w, m->post_ln_w, d, err)) ||
        (s = vec(be, &c->post_ln_b, m->post_ln_b, d, err)) || (s = vec(be, &c->mm0_b, m->mm0_b, m->mm0.n_out, err)) ||
        (s = vec(be, &c->mm2_b, m->mm2_b, m->mm2.n_out, err)))
        return s;
    for (int32_t il = 0; il < hp->n_layers; il++) {
        const oc_vision_layer *L = &m->layers[il];
        oc_vision_layer_bt *B = &c->layers[il];
        if ((s = vec(be, &B->ln1_w, L->ln1_w, d, err)) || (s = vec(be, &B->ln1_b, L->ln1_b, d, err)) ||
            (s = vec(be, &B->ln2_w, L->ln2_w, d, err)) || (s = vec(be, &B->ln2_b, L->ln2_b, d, err)) ||
            (s = weight(be, &B->q, &L->q, err)) || (s = weight(be, &B->k, &L->k, err)) ||
            (s = weight(be, &B->v, &L->v, err)) || (s = weight(be, &B->o, &L->o, err)) ||
            (s = weight(be, &B->up, &L->up, err)) || (s = weight(be, &B->gate, &L->gate, err)) ||
            (s = weight(be, &B->down, &L->down, err)) || (s = vec(be, &B->q_b, L->q_b, d, err)) ||
            (s = vec(be, &B->k_b, L->k_b, d, err)) || (s = vec(be, &B->v_b, L->v_b, d, err)) ||
            (s = vec(be, &B->o_b, L->o_b, d, err)) || (s = vec(be, &B->up_b, L->up_b, f, err)) ||
            (s = vec(be, &B->gate_b, L->gate_b, f, err)) || (s = vec(be, &B->down_b, L->down_b, d, err)))
            return s;
    }
    return OC_OK;
}

oc_status oc_vision_ctx_open_backend(oc_vision_ctx **out, const oc_vision_model *m, int32_t max_patches,
                                     const oc_backend_spec *spec, const oc_allocator *alloc, oc_error *err) {
    if (out) *out = NULL;
    if (!out || !m || !spec) return oc_fail(err, OC_ERR_INVALID, "vision: NULL argument");
    if (max_patches < 1) return oc_fail(err, OC_ERR_INVALID, "vision: max_patches %d must be >= 1", (int)max_patches);
    if (spec->kind == OC_BACKEND_KIND_CPU && !oc_matmul_kernels_for(spec->isa))
        return oc_fail(err, OC_ERR_UNSUPPORTED, "vision: ISA %s is not built or does not run here", oc_isa_name(spec->isa));
    if (!alloc) alloc = oc_default_allocator();
    sizes s;
    if (!plan_sizes(&m->hp, max_patches, &s))
        return oc_fail(err, OC_ERR_RANGE, "vision: scratch for %d patches overflows", (int)max_patches);
    oc_vision_ctx *c = oc_mem_calloc(alloc, sizeof *c);
    if (!c) return oc_fail(err, OC_ERR_NOMEM, "vision: out of memory");
    c->m = m;
    c->alloc = *alloc;
    c->pool = spec->pool;
    c->max_patches = max_patches;
    oc_backend_limits bl = backend_limits(&m->hp, max_patches);
    oc_status st = oc_backend_open(&c->be, spec, &bl, &c->alloc, err);
    if (st) goto fail;
    c->host_bytes = s.host;
    if (!(c->host = oc_mem_calloc(&c->alloc, s.host))) {
        st = oc_fail(err, OC_ERR_NOMEM, "vision: out of memory for %zu bytes of scratch", s.host);
        goto fail;
    }
    char *h = c->host;
    c->layers = (oc_vision_layer_bt *)(void *)h;
    h += s.layers;
    c->cos_h = (float *)(void *)h;
    c->sin_h = (float *)(void *)(h + s.table);
    h += 2 * s.table;
    c->inv_freq = (float *)(void *)h;
    h += s.inv_freq;
    c->order_h = (int32_t *)(void *)h;
    c->inv_h = (int32_t *)(void *)(h + s.order);
    c->windows = (oc_token_span *)(void *)(h + 2 * s.order);
    /* HF VisionRotaryEmbedding(dim = head_dim / 2, theta 10000) */
    oc_rope_inv_freq(c->inv_freq, m->hp.head_dim / 2, 10000.0f);
    if ((st = take_weights(c, err))) goto fail;
    const oc_backend_ops *op = c->be->ops;
    for (int i = 0; i < N_BUF; i++) {
        if ((st = op->alloc(c->be, buffer(c, i), s.buf[i], s.flags[i], err))) {
            if (st == OC_ERR_NOMEM)
                st = oc_fail(err, st, "vision: out of memory for %zu bytes of scratch", s.buf[i]);
            goto fail;
        }
    }
    /* the tables stay bound to the host arrays they are computed in */
    if ((st = op->bind(c->be, &c->cos_t, c->cos_h, s.buf[BUF_COS], err)) ||
        (st = op->bind(c->be, &c->sin_t, c->sin_h, s.buf[BUF_SIN], err)) ||
        (st = op->bind(c->be, &c->order, c->order_h, s.buf[BUF_ORDER], err)) ||
        (st = op->bind(c->be, &c->inv_order, c->inv_h, s.buf[BUF_INV], err)))
        goto fail;
    *out = c;
    return OC_OK;
fail:
    oc_vision_ctx_close(c);
    return st;
}

oc_status oc_vision_ctx_open(oc_vision_ctx **out, const oc_vision_model *m, int32_t max_patches, oc_pool *pool,
                             oc_isa isa, const oc_allocator *alloc, oc_error *err) {
    oc_backend_spec spec = oc_graph_cpu_spec(pool, isa);
    return oc_vision_ctx_open_backend(out, m, max_patches, &spec, alloc, err);
}

/* oc_graph_tensors_fn (graph_ctx.h): the buffers and the weights outside the layers (il -1), or
 * layer il's weights. */
static int tensors(void *ctx, int32_t il, oc_bt **out) {
    oc_vision_ctx *c = ctx;
    if (il < 0) {
        oc_bt *own[] = { &c->patch.t, &c->mm0.t, &c->mm2.t, &c->post_ln_w, &c->post_ln_b, &c->mm0_b, &c->mm2_b };
        for (int i = 0; i < N_BUF; i++) out[i] = buffer(c, i);
        memcpy(out + N_BUF, own, sizeof own);
        return N_BUF + (int)OC_ARRAY_LEN(own);
    }
    oc_vision_layer_bt *B = &c->layers[il];
    oc_bt *all[] = { &B->ln1_w, &B->ln1_b, &B->ln2_w, &B->ln2_b, &B->q.t, &B->k.t, &B->v.t, &B->o.t, &B->up.t,
                     &B->gate.t, &B->down.t, &B->q_b, &B->k_b, &B->v_b, &B->o_b, &B->up_b, &B->gate_b,
                     &B->down_b };
    memcpy(out, all, sizeof all);
    return (int)OC_ARRAY_LEN(all);
}

void oc_vision_ctx_close(oc_vision_ctx *c) {
    if (c) oc_graph_ctx_free(c, sizeof *c, c->be, c->layers ? c->m->hp.n_layers : 0, tensors, c->alloc, c->host,
                             c->host_bytes);
}

void oc_vision_ctx_set_debug(oc_vision_ctx *ctx, oc_vision_debug_fn fn, void *user) {
    if (!ctx) return;
    ctx->debug_fn = fn;
    ctx->debug_user = user;
}

void oc_vision_ctx_set_observer(oc_vision_ctx *ctx, oc_vision_observe_fn fn, void *user) {
    ctx->observe_fn = fn;
    ctx->observe_user = user;
}
