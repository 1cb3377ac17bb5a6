/* backend_cpu.c: the CPU backend (backend.h): buffers are host memory from the caller's
 * allocator, weights and imported vectors wrap the model's memory without copying, bound host
 * buffers use the caller's memory in place (so write/read after bind copy nothing), and the
 * compute operations are the library's kernels on the pool: oc_matmul (matmul.h), oc_attn_run
 * (attn.h) and the row operations of backend_cpu_rows.c. It adds no arithmetic of its own: a
 * graph gives the same bits through it as it did calling those kernels directly.
 * Every operand is checked to lie inside its buffer before it is touched. */
#include "backend/backend_cpu.h"
#include "port.h"

#include <string.h>

#define OC_BT_OWNED (1u << 8)    /* storage allocated here: free releases it */

static oc_backend_cpu *cpu(oc_backend *be) { return (oc_backend_cpu *)(void *)be; }

/* ---- sizes, open, close ------------------------------------------------------------------------ */

/* The block for MMInference's per-prompt indices (attention/dyn.h): reserved whenever a call can
 * have 64 queries (a prefill), so a plan with vertical-slash or grid heads needs no other memory;
 * about 12 bytes per head and 28 per thread per cache token (6.5 MB for the 2B decoder at 32K
 * tokens, under 1% of its KV cache). 0 when no call reaches 64 queries. */
static size_t dyn_bytes_for(const oc_backend_limits *lim, int n_threads) {
    return lim->attn.max_n_q >= OC_DYN_LAST_Q ? oc_attn_dyn_bytes(&lim->attn, n_threads) : 0;
}

size_t oc_backend_cpu_bytes(const oc_backend_limits *lim, int n_threads, oc_isa isa) {
    const oc_matmul_kernels *k = oc_matmul_kernels_for(isa);
    if (!k) return 0;
    size_t mm = oc_matmul_ctx_bytes(k, n_threads, lim->max_n_in, lim->max_n_tok);
    size_t attn = oc_attn_scratch_bytes(&lim->attn, n_threads), total = mm;
    size_t dyn = dyn_bytes_for(lim, n_threads);
    /* the blocks oc_backend_cpu_open allocates, each with oc_mem_alloc's header */
    if (!mm || !attn || (lim->attn.max_n_q >= OC_DYN_LAST_Q && !dyn) || !oc_add_block(&total, sizeof(oc_backend_cpu)) ||
        !oc_add_block(&total, attn) || (dyn && !oc_add_block(&total, dyn)))
        return 0;
    return total;
}

static void cpu_close(oc_backend *be) {
    oc_backend_cpu *c = cpu(be);
    oc_allocator a = c->alloc;
    oc_matmul_ctx_close(c->mm);
    if (c->attn_scratch) oc_mem_free(&a, c->attn_scratch, c->attn_scratch_bytes);
    if (c->dyn_mem) oc_mem_free(&a, c->dyn_mem, c->dyn_bytes);
    oc_mem_free(&a, c, sizeof *c);
}

/* ---- memory and transfers ---------------------------------------------------------------------- */

void *oc_bt_cpu_span(const oc_bt *t, int64_t off, int64_t n, size_t elem_bytes, const char *op, oc_error *err) {
    if (!t || off < 0 || n < 0 || (n > 0 && !t->impl) ||
        (uint64_t)(off + n) > (uint64_t)(t->n_bytes / elem_bytes)) {
        oc_fail(err, OC_ERR_INVALID, "backend cpu %s: elements [%lld, +%lld) of %zu bytes do not lie inside a "
                "buffer of %zu bytes", op, (long long)off, (long long)n, elem_bytes, t ? t->n_bytes : (size_t)0);
        return NULL;
    }
    return (char *)t->impl + (size_t)off * elem_bytes;
}

static oc_status cpu_alloc(oc_backend *be, oc_bt *t, size_t n_bytes, uint32_t flags, oc_error *err) {
    memset(t, 0, sizeof *t);
    t->flags = flags;
    t->n_bytes = n_bytes;
    if (flags & OC_BT_HOST) return OC_OK;   /* bound to caller memory later: no storage */
    if (!n_bytes) return OC_OK;
    t->impl = oc_mem_alloc(&cpu(be)->alloc, n_bytes);
    if (!t->impl) {
        t->n_bytes = 0;
        return oc_fail(err, OC_ERR_NOMEM, "backend cpu: out of memory for a buffer of %zu bytes", n_bytes);
    }
    t->flags |= OC_BT_OWNED;
    return OC_OK;
}

static void cpu_free(oc_backend *be, oc_bt *t) {
    if (t->flags & OC_BT_OWNED) oc_mem_free(&cpu(be)->alloc, t->impl, t->n_bytes);
    memset(t, 0, sizeof *t);
}

/* The CPU reads the model's memory where it lies; the const is restored by the ops, which never
 * write an imported buffer or a weight. */
static oc_status cpu_import(oc_backend *be, oc_bt *t, const void *host, size_t n_bytes, oc_error *err) {
    memset(t, 0, sizeof *t);
    if (host && n_bytes) {
        t->impl = (void *)host;
        t->n_bytes = n_bytes;
    }
    return OC_OK;
}

/* The weight's rows stay where they are: w->t wraps them (the BF16 path packs per GEMM task into
 * the matmul context's scratch, so no copy is kept). */
static oc_status cpu_weight(oc_backend *be, oc_bw *w, const oc_weight *src, oc_error *err) {
    memset(w, 0, sizeof *w);
    size_t n_bytes;
    if (!src->data || src->n_out < 1 || !oc_mul_size(src->row_bytes, (size_t)src->n_out, &n_bytes))
        return oc_fail(err, OC_ERR_INVALID, "backend cpu: weight without data or with a bad shape");
    w->w = *src;
    return cpu_import(be, &w->t, src->data, n_bytes, err);
}

static oc_status cpu_bind(oc_backend *be, oc_bt *t, const void *host, size_t n_bytes, oc_error *err) {
    if (!(t->flags & OC_BT_HOST) || !host || n_bytes > t->n_bytes)
        return oc_fail(err, OC_ERR_INVALID, "backend cpu bind: %zu bytes onto a %s buffer of %zu bytes", n_bytes,
                       t->flags & OC_BT_HOST ? "host" : "non-host", t->n_bytes);
    t->impl = (void *)host;   /* written only when an op writes t: the caller gave writable memory then */
    return OC_OK;
}

static oc_status cpu_write(oc_backend *be, oc_bt *t, size_t off_bytes, const void *src, size_t n_bytes,
                           oc_error *err) {
    char *dst = oc_bt_cpu_span(t, (int64_t)off_bytes, (int64_t)n_bytes, 1, "write", err);
    if (!dst) return OC_ERR_INVALID;
    if (dst != src && n_bytes) memmove(dst, src, n_bytes);
    return OC_OK;
}

static oc_status cpu_read(oc_backend *be, const oc_bt *t, size_t off_bytes, void *dst, size_t n_bytes,
                          oc_error *err) {
    const char *src = oc_bt_cpu_span(t, (int64_t)off_bytes, (int64_t)n_bytes, 1, "read", err);
    if (!src) return OC_ERR_INVALID;
    if (dst != src && n_bytes) memmove(dst, src, n_bytes);
    return OC_OK;
}

static const void *cpu_map_read(oc_backend *be, const oc_bt *t, size_t off_bytes, size_t n_bytes, oc_error *err) {
    return oc_bt_cpu_span(t, (int64_t)off_bytes, (int64_t)n_bytes, 1, "map_read", err);
}

static void cpu_unmap(oc_backend *be, const oc_bt *t, const void *p) {}

/* ---- matmul and attention ---------------------------------------------------------------------- */

/* Elements a strided operand reaches: n_rows rows of width, stride apart (0 for no rows). */
static int64_t extent(int64_t n_rows, int64_t stride, int64_t width) {
    return n_rows > 0 ? (n_rows - 1) * stride + width : 0;
}

static oc_status cpu_matmul(oc_backend *be, const oc_bw *w, const oc_bt *x, int64_t x_off, int64_t x_stride,
                            oc_bt *y, int64_t y_off, int64_t y_stride, int64_t n_tok, const oc_bt *bias,
                            oc_error *err) {
    const float *xp = oc_bt_cpu_span(x, x_off, extent(n_tok, x_stride, w->w.n_in), sizeof(float), "matmul x", err);
    float *yp = xp ? oc_bt_cpu_span(y, y_off, extent(n_tok, y_stride, w->w.n_out), sizeof(float), "matmul y", err) : NULL;
    const float *bp = NULL;
    if (!yp || (bias && !(bp = oc_bt_cpu_span(bias, 0, w->w.n_out, sizeof(float), "matmul bias", err))))
        return OC_ERR_INVALID;
    return oc_matmul(cpu(be)->mm, &w->w, xp, (size_t)x_stride, yp, (size_t)y_stride, n_tok, bp, err);
}

/* The engine reads the call as it is; only the buffers become host pointers, each checked to hold
 * its tensor at the call's offset. */
static oc_status cpu_attention(oc_backend *be, const oc_attn_call *a, const oc_attn_bt *t, oc_attn_stats *stats,
                               oc_error *err) {
    oc_backend_cpu *c = cpu(be);
    size_t kv_bytes = a->kv_dtype == OC_DTYPE_F16 ? 2 : 4;
    int64_t q_n = a->q_off + extent(a->n_q, a->q_stride_token, extent(a->n_head, a->q_stride_head, a->head_dim));
    int64_t o_n = a->out_off + extent(a->n_q, a->out_stride_token, extent(a->n_head, a->out_stride_head, a->head_dim));
    int64_t k_n = a->k_off + extent(a->n_kv, a->k_stride_token, extent(a->n_head_kv, a->k_stride_head, a->head_dim));
    int64_t v_n = a->v_off + extent(a->n_kv, a->v_stride_token, extent(a->n_head_kv, a->v_stride_head, a->head_dim));
    int64_t ks_n = a->k_shared_off + (k_n - a->k_off);   /* Q-Cache VLA's shared keys (attn_call.h) */
    oc_attn_host mem;
    if (a->q_off < 0 || a->out_off < 0 || a->k_off < 0 || a->v_off < 0 || (a->k_shared && a->k_shared_off < 0))
        return oc_fail(err, OC_ERR_INVALID, "backend cpu attention: a negative tensor offset");
    if (a->k_shared && !oc_bt_cpu_span(t->k, 0, ks_n, kv_bytes, "attention shared k", err)) return OC_ERR_INVALID;
    if (!(mem.q = oc_bt_cpu_span(t->q, 0, q_n, sizeof(float), "attention q", err)) ||
        !(mem.out = oc_bt_cpu_span(t->out, 0, o_n, sizeof(float), "attention out", err)) ||
        !(mem.k = oc_bt_cpu_span(t->k, 0, k_n, kv_bytes, "attention k", err)) ||
        !(mem.v = oc_bt_cpu_span(t->v, 0, v_n, kv_bytes, "attention v", err)))
        return OC_ERR_INVALID;
    int dynamic = 0;
    for (int32_t h = 0; a->patterns && h < a->n_head && !dynamic; h++)
        dynamic = oc_pattern_needs_index(&a->patterns[h]);
    if (!dynamic || !oc_attn_wants_dyn(a))
        return oc_attn_run(a, &mem, c->isa, c->pool, c->attn_scratch, c->attn_scratch_bytes, stats, err);
    /* a prefill with vertical-slash / grid heads: their index from this prompt first (dyn.h) */
    oc_attn_call with_index = *a;
    uint64_t t0 = a->estimate_ns ? oc_port_now_ns() : 0;
    oc_status st = oc_attn_dyn_build(a, &mem, c->isa, c->pool, c->dyn_mem, c->dyn_bytes, &with_index.dyn, err);
    if (a->estimate_ns) *a->estimate_ns += oc_port_now_ns() - t0;
    if (st != OC_OK) return st;
    return oc_attn_run(&with_index, &mem, c->isa, c->pool, c->attn_scratch, c->attn_scratch_bytes, stats, err);
}

/* ---- the table and open ------------------------------------------------------------------------ */

static const oc_backend_ops cpu_ops = {
    OC_BACKEND_OPS_VERSION, "cpu", cpu_close,
    cpu_alloc, cpu_free, cpu_import, cpu_weight,
    cpu_bind, cpu_write, cpu_read, cpu_map_read, cpu_unmap,
    cpu_matmul, oc_cpu_embed, oc_cpu_norm, oc_cpu_rope, oc_cpu_kv_store, cpu_attention,
    oc_cpu_add, oc_cpu_act, oc_cpu_glu, oc_cpu_gather_rows,
    oc_cpu_kv_keep,
    NULL,   /* kv_dev: the host selects (kvcache/kv_select.c) */
    NULL,   /* write_queued: write() does not wait */
    NULL,   /* matmul_n: one call per product costs nothing more */
    NULL,   /* matmul_glu */
    NULL,   /* rope_store */
    NULL,   /* attn_stats_flush: attention() adds its counts before it returns */
    NULL,   /* matmul_acc: the add costs nothing more */
    NULL,   /* norm_matmul */
};

oc_status oc_backend_cpu_open(oc_backend **out, const oc_backend_spec *spec, const oc_backend_limits *lim,
                              const oc_allocator *alloc, oc_error *err) {
    *out = NULL;
    const oc_matmul_kernels *k = oc_matmul_kernels_for(spec->isa);
    if (!k) return oc_fail(err, OC_ERR_UNSUPPORTED, "backend cpu: ISA %s is not built or does not run here",
                           oc_isa_name(spec->isa));
    int n_threads = oc_pool_n_threads(spec->pool);
    size_t attn_bytes = oc_attn_scratch_bytes(&lim->attn, n_threads);
    if (!attn_bytes) return oc_fail(err, OC_ERR_RANGE, "backend cpu: attention scratch for these limits overflows");
    if (!alloc) alloc = oc_default_allocator();
    oc_backend_cpu *c = oc_mem_calloc(alloc, sizeof *c);
    if (!c) return oc_fail(err, OC_ERR_NOMEM, "backend cpu: out of memory");
    c->base.ops = &cpu_ops;
    c->alloc = *alloc;
    c->pool = spec->pool;
    c->isa = spec->isa;
    c->attn_scratch_bytes = attn_bytes;
    c->attn_scratch = oc_mem_alloc(alloc, attn_bytes);
    if (!c->attn_scratch) {
        cpu_close(&c->base);
        return oc_fail(err, OC_ERR_NOMEM, "backend cpu: out of memory for %zu bytes of attention scratch", attn_bytes);
    }
    size_t dyn_bytes = dyn_bytes_for(lim, n_threads);
    c->dyn_bytes = dyn_bytes;
    if (dyn_bytes && !(c->dyn_mem = oc_mem_alloc(alloc, dyn_bytes))) {
        cpu_close(&c->base);
        return oc_fail(err, OC_ERR_NOMEM, "backend cpu: out of memory for %zu bytes of attention index", dyn_bytes);
    }
    oc_status st = oc_matmul_ctx_open(&c->mm, k, spec->pool, lim->max_n_in, lim->max_n_tok, &c->alloc, err);
    if (st) {
        cpu_close(&c->base);
        return st;
    }
    *out = &c->base;
    return OC_OK;
}

/* ---- the provider ------------------------------------------------------------------------------- */

static size_t cpu_bytes(const oc_backend_spec *spec, const oc_backend_limits *lim, int n_threads) {
    return oc_backend_cpu_bytes(lim, n_threads, spec->isa);
}

/* No shared device: buffers are host memory, so the optional members stay NULL. */
const oc_backend_provider oc_backend_cpu_provider = {
    .kind = OC_BACKEND_KIND_CPU,
    .name = "CPU",
    .bytes = cpu_bytes,
    .open = oc_backend_cpu_open,
    .pattern_exec = oc_attn_pattern_exec,   /* the attention engine's own table (attn.h) */
};
