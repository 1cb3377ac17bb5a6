/* cl_backend.c: the OpenCL backend (backend.h) over cl_device.h, cl_ops.h and cl_attn.h. Buffers
 * are device buffers (impl: the oc_cl_buf); OC_BT_HOST ones get device storage too (write uploads,
 * read downloads, bind only checks). Weights and vectors are uploaded once, weights in their own
 * type when the kernels take it (F32, F16, Q8_0, Q4_0), else dequantized to F32 (exact). Operations
 * are only enqueued: a forward pass waits for nothing but what the graph reads back (logits; an
 * oc_context keeps image embeddings on the device, in the text graph's image store). Operands
 * outside their buffer are OC_ERR_INVALID, as on the CPU. Differences from the CPU backend are
 * noted at the op: embed, gather_rows, attention (head counts fixed at open, no explicit mask,
 * stats). */
#include "opencl/cl_backend.h"

#include "opencl/cl_attn.h"
#include "opencl/cl_kvsel.h"
#include "opencl/cl_ops.h"
#include "core/dtype.h"
#include "kernels/quant.h"
#include "port.h"

#include <stdio.h>
#include <string.h>

#define OC_BT_CL_F32 (1u << 8)   /* a weight stored dequantized to f32 */
/* The staging ring of small writes (cl_write): a decode step writes its token ids and M-RoPE
 * tables (a few hundred bytes) before its kernels, and a waiting upload there was a host wait per
 * write, three per token besides the logits' read-back. */
#define STAGE_BYTES (64 * 1024)
#define STAGE_MAX_WRITE (STAGE_BYTES / 4)

struct oc_backend_device {
    oc_backend_device_head head; /* first: the provider (backend.h) */
    oc_allocator alloc;          /* the oc_cl_device keeps a pointer to this copy */
    oc_cl_device *cl;
    size_t device_bytes;         /* buffers its instances hold now */
    char name[2 * OC_CL_NAME_BYTES + 16];
};

typedef struct cl_backend {
    oc_backend base;             /* first: the ops table */
    oc_allocator alloc;
    oc_backend_device *dev;
    int own_dev;                 /* opened for this instance alone (spec->dev NULL) */
    oc_cl_attn *attn;            /* NULL when the limits have no attention */
    oc_attn_dims attn_dims;
    oc_cl_attn *attn_kv;         /* limits.per_kv_head: calls of one kv head's query group, else NULL */
    oc_attn_dims attn_kv_dims;
    int32_t *idx;                /* gather_rows: the indices on the host, idx_cap of them */
    int64_t idx_cap;
    oc_cl_buf *keep_idx;         /* kv_keep's kept rows on the device (limits.per_kv_head: a KV
                                    cache that evicts; max_n_kv of them), else NULL */
    void *view;                  /* map_read's host copy, view_bytes */
    size_t view_bytes;
    unsigned char *stage;        /* STAGE_BYTES: copies of small writes until the queue has read them */
    size_t stage_at;             /* bytes of it in use since stage_waits */
    uint64_t stage_waits;        /* the device's wait count when the ring was last (re)started */
    oc_attn_stats *pend_stats;   /* the stats the deferred attention counts go to (backend.h
                                    attn_stats_flush), or NULL */
} cl_backend;

static cl_backend *clb(oc_backend *be) { return (cl_backend *)(void *)be; }
static oc_cl_buf *buf_of(const oc_bt *t) { return t ? (oc_cl_buf *)t->impl : NULL; }

/* ---- the shared device ------------------------------------------------------------------------- */

oc_status oc_cl_backend_device_open(oc_backend_device **out, const char *selector, const oc_allocator *alloc,
                                    oc_error *err) {
    *out = NULL;
    if (!alloc) alloc = oc_default_allocator();
    oc_backend_device *d = oc_mem_calloc(alloc, sizeof *d);
    if (!d) return oc_fail(err, OC_ERR_NOMEM, "opencl: out of memory");
    d->head.provider = &oc_backend_opencl_provider;
    d->alloc = *alloc;
    oc_status st = oc_cl_open(&d->cl, selector, NULL, &d->alloc, err);
    if (st != OC_OK) {
        oc_mem_free(alloc, d, sizeof *d);
        return st;
    }
    const oc_cl_caps *c = oc_cl_device_caps(d->cl);
    snprintf(d->name, sizeof d->name, "OpenCL, %s (%s)", c->device, c->platform);
    *out = d;
    return OC_OK;
}

void oc_cl_backend_device_close(oc_backend_device *d) {
    if (!d) return;
    oc_allocator a = d->alloc;
    oc_cl_close(d->cl);
    oc_mem_free(&a, d, sizeof *d);
}

const char *oc_cl_backend_device_name(const oc_backend_device *d) { return d->name; }
size_t oc_cl_backend_device_bytes(const oc_backend_device *d) { return d->device_bytes; }
oc_status oc_cl_backend_device_finish(oc_backend_device *d, oc_error *err) { return oc_cl_finish(d->cl, err); }

size_t oc_cl_backend_buffer_host_bytes(void) { return oc_cl_buf_host_bytes(); }

size_t oc_cl_backend_device_host_bytes(void) {
    size_t total = oc_cl_device_host_bytes();
    oc_add_block(&total, sizeof(oc_backend_device));
    return total;
}

/* ---- memory ------------------------------------------------------------------------------------ */

/* [off, off + n) elements of elem_bytes lie inside t (n may be 0). */
static oc_status span(const oc_bt *t, int64_t off, int64_t n, size_t elem_bytes, const char *op, oc_error *err) {
    if (!t || off < 0 || n < 0 || (n > 0 && !t->impl) || (uint64_t)(off + n) > (uint64_t)(t->n_bytes / elem_bytes))
        return oc_fail(err, OC_ERR_INVALID, "backend opencl %s: elements [%lld, +%lld) of %zu bytes do not lie inside "
                       "a buffer of %zu bytes", op, (long long)off, (long long)n, elem_bytes, t ? t->n_bytes : (size_t)0);
    return OC_OK;
}

/* Elements a strided operand reaches: n_rows rows of width, stride apart (0 for no rows). */
static int64_t extent(int64_t n_rows, int64_t stride, int64_t width) {
    return n_rows > 0 ? (n_rows - 1) * stride + width : 0;
}

/* Device storage of n_bytes (> 0) for t. */
static oc_status new_storage(cl_backend *b, oc_bt *t, size_t n_bytes, oc_error *err) {
    oc_cl_buf *buf = NULL;
    oc_status st = oc_cl_buf_alloc(b->dev->cl, n_bytes, &buf, err);
    if (st != OC_OK) return st;
    t->impl = buf;
    t->n_bytes = n_bytes;
    b->dev->device_bytes += n_bytes;
    return OC_OK;
}

static void cl_free(oc_backend *be, oc_bt *t) {
    if (t->impl) {
        oc_cl_buf_free(t->impl);
        clb(be)->dev->device_bytes -= t->n_bytes;
    }
    memset(t, 0, sizeof *t);
}

static oc_status cl_alloc(oc_backend *be, oc_bt *t, size_t n_bytes, uint32_t flags, oc_error *err) {
    memset(t, 0, sizeof *t);
    oc_status st = n_bytes ? new_storage(clb(be), t, n_bytes, err) : OC_OK;
    t->flags = flags;
    t->n_bytes = st == OC_OK ? n_bytes : 0;
    return st;
}

static oc_status cl_import(oc_backend *be, oc_bt *t, const void *host, size_t n_bytes, oc_error *err) {
    memset(t, 0, sizeof *t);
    if (!host || !n_bytes) return OC_OK;
    oc_status st = new_storage(clb(be), t, n_bytes, err);
    if (st == OC_OK) st = oc_cl_upload(clb(be)->dev->cl, t->impl, 0, host, n_bytes, err);
    if (st != OC_OK) cl_free(be, t);
    return st;
}

static oc_status cl_weight(oc_backend *be, oc_bw *w, const oc_weight *src, oc_error *err) {
    cl_backend *b = clb(be);
    memset(w, 0, sizeof *w);
    int to_f32 = !oc_cl_weight_type_ok(src->dtype);
    if (to_f32 && !oc_dequant_ref(src->dtype))
        return oc_fail(err, OC_ERR_UNSUPPORTED, "backend opencl: %s weights (%lld x %lld) have no kernel and no "
                       "dequantizer", oc_dtype_name(src->dtype), (long long)src->n_out, (long long)src->n_in);
    oc_cl_weight cw;
    oc_status st = oc_cl_weight_upload(b->dev->cl, src, to_f32, &cw, err);
    if (st != OC_OK) return st;
    w->w = *src;
    w->t.impl = cw.buf;
    w->t.n_bytes = oc_cl_buf_bytes(cw.buf);   /* n_out rows of the device's row_bytes */
    w->t.flags = to_f32 ? OC_BT_CL_F32 : 0;
    b->dev->device_bytes += w->t.n_bytes;
    return OC_OK;
}

/* The device weight behind w (cl_weight stored its type in the flags, its rows in n_bytes). */
static oc_cl_weight weight_of(const oc_bw *w) {
    oc_cl_weight c = { buf_of(&w->t), (w->t.flags & OC_BT_CL_F32) ? OC_DTYPE_F32 : w->w.dtype, w->w.n_in, w->w.n_out,
                       w->w.n_out > 0 ? (int64_t)(w->t.n_bytes / (size_t)w->w.n_out) : 0 };
    return c;
}

/* ---- transfers --------------------------------------------------------------------------------- */

static oc_status cl_bind(oc_backend *be, oc_bt *t, const void *host, size_t n_bytes, oc_error *err) {
    if (!(t->flags & OC_BT_HOST) || !host || n_bytes > t->n_bytes)
        return oc_fail(err, OC_ERR_INVALID, "backend opencl bind: %zu bytes onto a %s buffer of %zu bytes", n_bytes,
                       t->flags & OC_BT_HOST ? "host" : "non-host", t->n_bytes);
    return OC_OK;   /* the device copy is written by write() and read by read() */
}

/* A small write is copied into the staging ring and queued without a wait (the caller may change
 * src at once, backend.h); the ring restarts once the host has waited for the queue since it was
 * filled (every queued write has then read its copy), else after an oc_cl_finish when full. */
static oc_status cl_write(oc_backend *be, oc_bt *t, size_t off_bytes, const void *src, size_t n_bytes,
                          oc_error *err) {
    cl_backend *b = clb(be);
    oc_cl_device *dev = b->dev->cl;
    oc_status st = span(t, (int64_t)off_bytes, (int64_t)n_bytes, 1, "write", err);
    if (st != OC_OK || !n_bytes) return st;
    if (!b->stage || n_bytes > STAGE_MAX_WRITE) return oc_cl_upload(dev, t->impl, off_bytes, src, n_bytes, err);
    if (oc_cl_wait_count(dev) != b->stage_waits) b->stage_at = 0;
    if (b->stage_at + n_bytes > STAGE_BYTES) {
        if ((st = oc_cl_finish(dev, err)) != OC_OK) return st;
        b->stage_at = 0;
    }
    b->stage_waits = oc_cl_wait_count(dev);
    unsigned char *p = b->stage + b->stage_at;
    memcpy(p, src, n_bytes);
    b->stage_at += (n_bytes + 63) / 64 * 64;
    return oc_cl_upload_nowait(dev, t->impl, off_bytes, p, n_bytes, err);
}

/* The deferred attention counts (cl_attn.h oc_cl_attn_defer_counts) into the stats they belong to. */
static oc_status cl_attn_stats_flush(oc_backend *be, oc_error *err) {
    cl_backend *b = clb(be);
    oc_status st = OC_OK;
    if (b->pend_stats) {
        st = oc_cl_attn_counts_take(b->attn, b->pend_stats, err);
        if (st == OC_OK) st = oc_cl_attn_counts_take(b->attn_kv, b->pend_stats, err);
    }
    b->pend_stats = NULL;
    return st;
}

static oc_status cl_read(oc_backend *be, const oc_bt *t, size_t off_bytes, void *dst, size_t n_bytes,
                         oc_error *err) {
    oc_status st = cl_attn_stats_flush(be, err);   /* a read waits anyway */
    if (st != OC_OK) return st;
    st = span(t, (int64_t)off_bytes, (int64_t)n_bytes, 1, "read", err);
    return st != OC_OK || !n_bytes ? st : oc_cl_download(clb(be)->dev->cl, t->impl, off_bytes, dst, n_bytes, err);
}

static void cl_unmap(oc_backend *be, const oc_bt *t, const void *p) {
    cl_backend *b = clb(be);
    if (!b->view || (p && p != b->view)) return;
    oc_mem_free(&b->alloc, b->view, b->view_bytes);
    b->view = NULL;
    b->view_bytes = 0;
}

static const void *cl_map_read(oc_backend *be, const oc_bt *t, size_t off_bytes, size_t n_bytes, oc_error *err) {
    cl_backend *b = clb(be);
    cl_unmap(be, t, NULL);   /* one view at a time */
    if (span(t, (int64_t)off_bytes, (int64_t)n_bytes, 1, "map_read", err) != OC_OK) return NULL;
    if (!(b->view = oc_mem_alloc(&b->alloc, n_bytes ? n_bytes : 1))) {
        oc_fail(err, OC_ERR_NOMEM, "backend opencl map_read: out of memory for %zu bytes", n_bytes);
        return NULL;
    }
    b->view_bytes = n_bytes ? n_bytes : 1;
    if (cl_read(be, t, off_bytes, b->view, n_bytes, err) != OC_OK) {
        cl_unmap(be, t, NULL);
        return NULL;
    }
    return b->view;
}

/* ---- compute ----------------------------------------------------------------------------------- */

static oc_status cl_matmul(oc_backend *be, const oc_bw *w, const oc_bt *x, int64_t x_off, int64_t x_stride,
                           oc_bt *y, int64_t y_off, int64_t y_stride, int64_t n_tok, const oc_bt *bias,
                           oc_error *err) {
    oc_status st;
    if ((st = span(x, x_off, extent(n_tok, x_stride, w->w.n_in), sizeof(float), "matmul x", err)) ||
        (st = span(y, y_off, extent(n_tok, y_stride, w->w.n_out), sizeof(float), "matmul y", err)) ||
        (bias && (st = span(bias, 0, w->w.n_out, sizeof(float), "matmul bias", err))))
        return st;
    if (n_tok <= 0) return OC_OK;
    oc_cl_weight cw = weight_of(w);
    return oc_cl_matmul(clb(be)->dev->cl, &cw, oc_cl_mat_of(buf_of(x), x_off, x_stride),
                        oc_cl_mat_of(buf_of(y), y_off, y_stride), n_tok, buf_of(bias), err);
}

/* One token: one launch (cl_matmul.c oc_cl_matmul_fused); more: a product per launch. */
static oc_status cl_matmul_n(oc_backend *be, const oc_bt *x, int64_t x_off, int64_t x_stride, int64_t n_tok,
                             const oc_mm_out *out, int32_t n, oc_error *err) {
    oc_status st;
    if (n < 1 || n > OC_CL_FUSED_MAX) return oc_fail(err, OC_ERR_INVALID, "backend opencl matmul_n: %d products", (int)n);
    for (int32_t j = 0; j < n; j++)
        if (n_tok != 1 && (st = cl_matmul(be, out[j].w, x, x_off, x_stride, out[j].y, out[j].y_off, out[j].y_stride,
                                          n_tok, out[j].bias, err)))
            return st;
    if (n_tok != 1) return OC_OK;
    oc_cl_weight cw[OC_CL_FUSED_MAX];
    const oc_cl_weight *wp[OC_CL_FUSED_MAX];
    oc_cl_mat ym[OC_CL_FUSED_MAX];
    const oc_cl_buf *bp[OC_CL_FUSED_MAX];
    for (int32_t j = 0; j < n; j++) {
        const oc_mm_out *o = &out[j];
        if ((st = span(x, x_off, o->w->w.n_in, sizeof(float), "matmul_n x", err)) ||
            (st = span(o->y, o->y_off, o->w->w.n_out, sizeof(float), "matmul_n y", err)) ||
            (o->bias && (st = span(o->bias, 0, o->w->w.n_out, sizeof(float), "matmul_n bias", err))))
            return st;
        cw[j] = weight_of(o->w);
        wp[j] = &cw[j];
        ym[j] = oc_cl_mat_of(buf_of(o->y), o->y_off, o->w->w.n_out);
        bp[j] = buf_of(o->bias);
    }
    return oc_cl_matmul_fused(clb(be)->dev->cl, n, wp, oc_cl_mat_of(buf_of(x), x_off, x_stride), ym, bp, 0, OC_ACT_SILU,
                              NULL, 0.0f, err);
}

/* SwiGLU in the product's epilogue: one launch. */
static oc_status cl_matmul_glu(oc_backend *be, const oc_bw *gate, const oc_bw *up, const oc_bt *x, int64_t x_off,
                               oc_bt *y, int64_t y_off, oc_act act, oc_error *err) {
    oc_status st;
    if (gate->w.n_out != up->w.n_out || gate->w.n_in != up->w.n_in)
        return oc_fail(err, OC_ERR_INVALID, "backend opencl matmul_glu: gate %lld x %lld, up %lld x %lld",
                       (long long)gate->w.n_out, (long long)gate->w.n_in, (long long)up->w.n_out, (long long)up->w.n_in);
    if ((st = span(x, x_off, gate->w.n_in, sizeof(float), "matmul_glu x", err)) ||
        (st = span(y, y_off, gate->w.n_out, sizeof(float), "matmul_glu y", err)))
        return st;
    oc_cl_weight cg = weight_of(gate), cu = weight_of(up);
    const oc_cl_weight *wp[2] = { &cg, &cu };
    oc_cl_mat ym[2] = { oc_cl_mat_of(buf_of(y), y_off, gate->w.n_out), oc_cl_mat_of(buf_of(y), y_off, gate->w.n_out) };
    const oc_cl_buf *bp[2] = { NULL, NULL };
    return oc_cl_matmul_fused(clb(be)->dev->cl, 2, wp, oc_cl_mat_of(buf_of(x), x_off, gate->w.n_in), ym, bp, 1, act,
                              NULL, 0.0f, err);
}

/* The residual add in the product's epilogue (cl_matmul.c oc_cl_matmul_acc). */
static oc_status cl_matmul_acc(oc_backend *be, const oc_bw *w, const oc_bt *x, int64_t x_off, oc_bt *y, int64_t y_off,
                               const oc_bt *bias, oc_error *err) {
    oc_status st;
    if ((st = span(x, x_off, w->w.n_in, sizeof(float), "matmul_acc x", err)) ||
        (st = span(y, y_off, w->w.n_out, sizeof(float), "matmul_acc y", err)) ||
        (bias && (st = span(bias, 0, w->w.n_out, sizeof(float), "matmul_acc bias", err))))
        return st;
    oc_cl_weight cw = weight_of(w);
    return oc_cl_matmul_acc(clb(be)->dev->cl, &cw, oc_cl_mat_of(buf_of(x), x_off, w->w.n_in),
                            oc_cl_mat_of(buf_of(y), y_off, w->w.n_out), buf_of(bias), err);
}

/* The norm in every work-group of the products' launch (oc_cl_matmul_fused with norm_w). */
static oc_status cl_norm_matmul(oc_backend *be, const oc_bt *x, int64_t x_off, const oc_bt *norm_w, float eps,
                                const oc_mm_out *out, int32_t n, int glu, oc_error *err) {
    oc_status st;
    if (n < 1 || n > OC_CL_FUSED_MAX || (glu >= 0 && n != 2))
        return oc_fail(err, OC_ERR_INVALID, "backend opencl norm_matmul: %d products%s", (int)n,
                       glu >= 0 ? " for a gated unit" : "");
    int64_t n_in = out[0].w->w.n_in;
    if ((st = span(x, x_off, n_in, sizeof(float), "norm_matmul x", err)) ||
        (st = span(norm_w, 0, n_in, sizeof(float), "norm_matmul weight", err)))
        return st;
    oc_cl_weight cw[OC_CL_FUSED_MAX];
    const oc_cl_weight *wp[OC_CL_FUSED_MAX];
    oc_cl_mat ym[OC_CL_FUSED_MAX];
    const oc_cl_buf *bp[OC_CL_FUSED_MAX];
    for (int32_t j = 0; j < n; j++) {
        const oc_mm_out *o = &out[j];
        const oc_bt *y = glu >= 0 ? out[0].y : o->y;
        int64_t y_off = glu >= 0 ? out[0].y_off : o->y_off;
        if (o->w->w.n_in != n_in)
            return oc_fail(err, OC_ERR_INVALID, "backend opencl norm_matmul: product %d takes %lld floats, not %lld",
                           (int)j, (long long)o->w->w.n_in, (long long)n_in);
        if ((st = span(y, y_off, o->w->w.n_out, sizeof(float), "norm_matmul y", err)) ||
            (o->bias && (st = span(o->bias, 0, o->w->w.n_out, sizeof(float), "norm_matmul bias", err))))
            return st;
        cw[j] = weight_of(o->w);
        wp[j] = &cw[j];
        ym[j] = oc_cl_mat_of(buf_of(y), y_off, o->w->w.n_out);
        bp[j] = buf_of(o->bias);
    }
    return oc_cl_matmul_fused(clb(be)->dev->cl, n, wp, oc_cl_mat_of(buf_of(x), x_off, n_in), ym, bp, glu >= 0,
                              glu >= 0 ? (oc_act)glu : OC_ACT_SILU, buf_of(norm_w), eps, err);
}

/* One launch for the rotations and both stores (cl_ops.c oc_cl_rope_store). */
static oc_status cl_rope_store(oc_backend *be, oc_bt *q, oc_bt *k, const oc_bt *v, int64_t n_tok, int32_t n_head,
                               int32_t n_head_kv, int32_t head_dim, int32_t n_pairs, const oc_bt *cos, const oc_bt *sin,
                               oc_bt *k_cache, int64_t k_dst, oc_bt *v_cache, int64_t v_dst, oc_error *err) {
    oc_status st;
    if (n_tok <= 0) return OC_OK;
    if (n_tok > INT32_MAX || n_pairs < 1 || n_head < 1 || n_head_kv < 1)
        return oc_fail(err, OC_ERR_INVALID, "backend opencl rope_store: %lld tokens, %d + %d heads, %d pairs",
                       (long long)n_tok, (int)n_head, (int)n_head_kv, (int)n_pairs);
    int64_t qd = (int64_t)n_head * head_dim, kvd = (int64_t)n_head_kv * head_dim;
    if ((st = span(q, 0, n_tok * qd, sizeof(float), "rope_store q", err)) ||
        (st = span(k, 0, n_tok * kvd, sizeof(float), "rope_store k", err)) ||
        (st = span(v, 0, n_tok * kvd, sizeof(float), "rope_store v", err)) ||
        (st = span(cos, 0, n_tok * n_pairs, sizeof(float), "rope_store cos", err)) ||
        (st = span(sin, 0, n_tok * n_pairs, sizeof(float), "rope_store sin", err)) ||
        (st = span(k_cache, k_dst, n_tok * kvd, sizeof(uint16_t), "rope_store k cache", err)) ||
        (st = span(v_cache, v_dst, n_tok * kvd, sizeof(uint16_t), "rope_store v cache", err)))
        return st;
    return oc_cl_rope_store(clb(be)->dev->cl, oc_cl_mat_of(buf_of(q), 0, qd), buf_of(k), 0, buf_of(v), 0, kvd,
                            (int32_t)n_tok, n_head, n_head_kv, head_dim, n_pairs, oc_cl_mat_of(buf_of(cos), 0, n_pairs),
                            oc_cl_mat_of(buf_of(sin), 0, n_pairs), buf_of(k_cache), k_dst, buf_of(v_cache), v_dst, err);
}

/* Rows whose id is past the table are left alone (the caller checks ids, backend.h). */
static oc_status cl_embed(oc_backend *be, const oc_bw *table, const oc_bt *ids, int64_t n, oc_bt *dst,
                          int64_t dst_off, oc_error *err) {
    oc_status st;
    if (n <= 0) return OC_OK;
    if ((st = span(ids, 0, n, sizeof(int32_t), "embed ids", err)) ||
        (st = span(dst, dst_off, n * table->w.n_in, sizeof(float), "embed dst", err)))
        return st;
    if (n > INT32_MAX) return oc_fail(err, OC_ERR_INVALID, "backend opencl embed: %lld rows", (long long)n);
    oc_cl_weight cw = weight_of(table);
    return oc_cl_embed(clb(be)->dev->cl, &cw, buf_of(ids), 0, (int32_t)n,
                       oc_cl_mat_of(buf_of(dst), dst_off, table->w.n_in), err);
}

static oc_status cl_norm(oc_backend *be, oc_norm_kind kind, oc_bt *x, int64_t x_off, const oc_bt *res,
                         int64_t res_off, oc_bt *y, int64_t y_off, const oc_bt *w, const oc_bt *b,
                         int64_t n_rows, int64_t dim, float eps, oc_error *err) {
    oc_status st;
    if (n_rows <= 0) return OC_OK;
    int64_t n = n_rows * dim;
    if ((st = span(x, x_off, n, sizeof(float), "norm x", err)) ||
        (res && (st = span(res, res_off, n, sizeof(float), "norm residual", err))) ||
        (y && (st = span(y, y_off, n, sizeof(float), "norm y", err))) ||
        (w && (st = span(w, 0, dim, sizeof(float), "norm weight", err))) ||
        (b && (st = span(b, 0, dim, sizeof(float), "norm bias", err))))
        return st;
    oc_cl_norm_kind k = kind == OC_NORM_LAYER ? OC_CL_NORM_LAYER : OC_CL_NORM_RMS;
    return oc_cl_norm(clb(be)->dev->cl, k, oc_cl_mat_of(buf_of(y), y_off, dim), oc_cl_mat_of(buf_of(x), x_off, dim),
                      oc_cl_mat_of(buf_of(res), res_off, dim), buf_of(w), buf_of(b), n_rows, dim, eps, err);
}

static oc_status cl_rope(oc_backend *be, oc_bt *x, int64_t x_off, int64_t n_tok, int32_t n_head, int32_t head_dim,
                         int32_t n_pairs, const oc_bt *cos, const oc_bt *sin, oc_error *err) {
    oc_status st;
    if (n_tok <= 0) return OC_OK;
    if (n_pairs < 0 || 2 * n_pairs > head_dim)
        return oc_fail(err, OC_ERR_INVALID, "backend opencl rope: %d pairs in heads of %d", (int)n_pairs, (int)head_dim);
    int64_t row = (int64_t)n_head * head_dim;
    if ((st = span(x, x_off, n_tok * row, sizeof(float), "rope x", err)) ||
        (st = span(cos, 0, n_tok * n_pairs, sizeof(float), "rope cos", err)) ||
        (st = span(sin, 0, n_tok * n_pairs, sizeof(float), "rope sin", err)))
        return st;
    if (n_pairs == 0 || n_head <= 0) return OC_OK;
    if (n_tok > INT32_MAX) return oc_fail(err, OC_ERR_INVALID, "backend opencl rope: %lld tokens", (long long)n_tok);
    return oc_cl_rope_neox(clb(be)->dev->cl, buf_of(x), x_off, row, head_dim, (int32_t)n_tok, n_head, n_pairs,
                           oc_cl_mat_of(buf_of(cos), 0, n_pairs), oc_cl_mat_of(buf_of(sin), 0, n_pairs), err);
}

static oc_status cl_kv_store(oc_backend *be, const oc_bt *src, int64_t src_off, oc_bt *dst, int64_t dst_off, int64_t n,
                             oc_error *err) {
    oc_status st;
    if (n <= 0) return OC_OK;
    if ((st = span(src, src_off, n, sizeof(float), "kv_store src", err)) ||
        (st = span(dst, dst_off, n, sizeof(uint16_t), "kv_store dst", err)))
        return st;
    return oc_cl_kv_store(clb(be)->dev->cl, oc_cl_mat_of(buf_of(src), src_off, n), 1, n, buf_of(dst), OC_DTYPE_F16,
                          dst_off, n, err);
}

/* The head counts and head_dim are the ones the instance was opened for; the explicit debug mask
 * is the CPU's alone. Stats come from the host when every head is dense (kept = the base mask's
 * pairs, skipped 0, executed counted as kept), so a forward pass does not wait per layer; else
 * from the device's counters (exact, a wait per call). */
static oc_status cl_attention(oc_backend *be, const oc_attn_call *a, const oc_attn_bt *t, oc_attn_stats *stats,
                             oc_error *err) {
    cl_backend *b = clb(be);
    size_t kv_bytes = a->kv_dtype == OC_DTYPE_F16 ? 2 : 4;
    int64_t q_n = extent(a->n_q, a->q_stride_token, extent(a->n_head, a->q_stride_head, a->head_dim));
    int64_t o_n = extent(a->n_q, a->out_stride_token, extent(a->n_head, a->out_stride_head, a->head_dim));
    int64_t k_n = extent(a->n_kv, a->k_stride_token, extent(a->n_head_kv, a->k_stride_head, a->head_dim));
    int64_t v_n = extent(a->n_kv, a->v_stride_token, extent(a->n_head_kv, a->v_stride_head, a->head_dim));
    oc_status st;
    if ((st = span(t->q, a->q_off, q_n, sizeof(float), "attention q", err)) ||
        (st = span(t->out, a->out_off, o_n, sizeof(float), "attention out", err)) ||
        (st = span(t->k, a->k_off, k_n, kv_bytes, "attention k", err)) ||
        (a->k_shared && (st = span(t->k, a->k_shared_off, k_n, kv_bytes, "attention shared k", err))) ||
        (st = span(t->v, a->v_off, v_n, kv_bytes, "attention v", err)))
        return st;
    if (a->mask == OC_ATTN_EXPLICIT)
        return oc_fail(err, OC_ERR_UNSUPPORTED, "backend opencl attention: the explicit debug mask runs on the CPU only");
    if (!b->attn) return oc_fail(err, OC_ERR_INVALID, "backend opencl attention: the instance was opened without heads");
    const oc_attn_dims *dk = &b->attn_kv_dims;
    oc_cl_attn *at = b->attn;
    if (b->attn_kv && a->n_head == dk->n_head && a->n_head_kv == 1 && a->head_dim == dk->head_dim)
        at = b->attn_kv;   /* one kv head of a compacted cache */
    oc_cl_attn_bufs bufs = { buf_of(t->q), buf_of(t->k), buf_of(t->v), buf_of(t->out), NULL, 0 };
    int dense = 1, dynamic = 0;
    for (int32_t h = 0; a->patterns && h < a->n_head; h++) {
        dense &= oc_attn_head_is_dense(a, h);
        dynamic |= oc_pattern_needs_index(&a->patterns[h]);
    }
    if (stats && !dense && b->pend_stats != stats) {   /* counts deferred (cl_attn.h), to these stats */
        if ((st = cl_attn_stats_flush(be, err)) != OC_OK) return st;
        b->pend_stats = stats;
    }
    oc_attn_call with_index = *a;
    if (dense && a->patterns) {   /* decode with a plan: its heads keep what dense keeps (attn.h), so no
                                     counters to wait for and no pattern table */
        with_index.patterns = NULL;
        dynamic = 0;
        a = &with_index;
    }
    if (dynamic && oc_attn_wants_dyn(a)) {   /* a prefill with heads that need an index (dyn.h): estimated,
                                                chosen and run on the device, queued (a Grid part's search:
                                                the host's, after a read-back) */
        return oc_cl_attn_run_indexed(at, a, &bufs, stats, a->estimate_ns, err);
    }
    if ((st = oc_cl_attn_run(at, a, &bufs, dense ? NULL : stats, err)) || !stats || !dense) return st;
    uint64_t kept = oc_cl_attn_base_pairs(at) * (uint64_t)a->n_head * 4 * (uint64_t)a->head_dim;
    stats->flops_kept += kept;
    stats->flops_executed += kept;
    return OC_OK;
}

static oc_status cl_add(oc_backend *be, oc_bt *y, int64_t y_off, const oc_bt *x, int64_t x_off, int64_t n,
                        oc_error *err) {
    oc_status st;
    if (n <= 0) return OC_OK;
    if ((st = span(y, y_off, n, sizeof(float), "add y", err)) || (st = span(x, x_off, n, sizeof(float), "add x", err)))
        return st;
    return oc_cl_add(clb(be)->dev->cl, buf_of(y), y_off, buf_of(x), x_off, n, err);
}

static oc_status cl_act(oc_backend *be, oc_bt *x, int64_t x_off, int64_t n, oc_act act, oc_error *err) {
    oc_status st;
    if (n <= 0) return OC_OK;
    if ((st = span(x, x_off, n, sizeof(float), "act x", err))) return st;
    return oc_cl_act(clb(be)->dev->cl, buf_of(x), x_off, n, act, err);
}

static oc_status cl_glu(oc_backend *be, oc_bt *g, int64_t g_off, const oc_bt *u, int64_t u_off, int64_t n, oc_act act,
                        oc_error *err) {
    oc_status st;
    if (n <= 0) return OC_OK;
    if ((st = span(g, g_off, n, sizeof(float), "glu gate", err)) || (st = span(u, u_off, n, sizeof(float), "glu up", err)))
        return st;
    return oc_cl_glu(clb(be)->dev->cl, buf_of(g), g_off, buf_of(g), g_off, buf_of(u), u_off, n, act, err);
}

/* The indices come back to the host to be checked as the CPU backend checks them: a source row
 * outside src is a graph bug, not something to skip silently. */
static oc_status cl_gather_rows(oc_backend *be, oc_bt *dst, int64_t dst_off, const oc_bt *src, int64_t src_off,
                                const oc_bt *idx, int64_t n_rows, int64_t dim, int32_t unit, oc_error *err) {
    cl_backend *b = clb(be);
    oc_status st;
    if (n_rows <= 0) return OC_OK;
    if (unit < 1) return oc_fail(err, OC_ERR_INVALID, "backend opencl gather_rows: unit %d", (int)unit);
    int64_t n_idx = (n_rows + unit - 1) / unit;
    if ((st = span(dst, dst_off, n_rows * dim, sizeof(float), "gather_rows dst", err)) ||
        (st = span(idx, 0, n_idx, sizeof(int32_t), "gather_rows idx", err)))
        return st;
    if (n_idx > b->idx_cap)
        return oc_fail(err, OC_ERR_INVALID, "backend opencl gather_rows: %lld indices, opened for %lld",
                       (long long)n_idx, (long long)b->idx_cap);
    if ((st = oc_cl_download(b->dev->cl, buf_of(idx), 0, b->idx, (size_t)n_idx * sizeof(int32_t), err))) return st;
    int32_t top = 0;
    for (int64_t i = 0; i < n_idx; i++) {
        if (b->idx[i] < 0) return oc_fail(err, OC_ERR_INVALID, "backend opencl gather_rows: negative index");
        top = OC_MAX(top, b->idx[i]);
    }
    int64_t n_src_rows = ((int64_t)top + 1) * unit;
    if ((st = span(src, src_off, n_src_rows * dim, sizeof(float), "gather_rows src", err))) return st;
    return oc_cl_gather_rows(b->dev->cl, buf_of(dst), dst_off, buf_of(src), src_off, n_src_rows, buf_of(idx), 0, n_rows,
                             dim, unit, err);
}

/* ---- the table, open, close -------------------------------------------------------------------- */

static oc_status cl_kv_keep(oc_backend *be, oc_bt *t, int64_t off, int64_t stride_elems, int32_t row_elems,
                             const int32_t *kept, int32_t n_kept, oc_error *err) {
    if (n_kept <= 0) return OC_OK;
    oc_status st = span(t, off, (int64_t)kept[n_kept - 1] * stride_elems + row_elems, sizeof(uint16_t), "kv_keep", err);
    if (st) return st;
    return oc_cl_keep_rows(clb(be)->dev->cl, buf_of(t), (size_t)off * 2, (size_t)stride_elems * 2, (size_t)row_elems * 2,
                           kept, n_kept, clb(be)->keep_idx, err);
}

static oc_status cl_write_queued(oc_backend *be, oc_bt *t, size_t off_bytes, const void *src, size_t n_bytes,
                                 oc_error *err) {
    oc_status st = span(t, (int64_t)off_bytes, (int64_t)n_bytes, 1, "write", err);
    return st != OC_OK || !n_bytes ? st : oc_cl_upload_nowait(clb(be)->dev->cl, t->impl, off_bytes, src, n_bytes, err);
}

static oc_status cl_kv_dev(oc_backend *be, const oc_kv_dev_op *op, oc_error *err) {
    return oc_cl_kv_dev(clb(be)->dev->cl, op, err);
}

static void cl_close(oc_backend *be) {
    cl_backend *b = clb(be);
    oc_allocator a = b->alloc;
    cl_unmap(be, NULL, NULL);
    oc_cl_attn_close(b->attn);
    oc_cl_attn_close(b->attn_kv);
    oc_cl_buf_free(b->keep_idx);
    if (b->idx) oc_mem_free(&a, b->idx, (size_t)b->idx_cap * sizeof(int32_t));
    if (b->stage) oc_mem_free(&a, b->stage, STAGE_BYTES);
    if (b->own_dev) oc_cl_backend_device_close(b->dev);
    oc_mem_free(&a, b, sizeof *b);
}

static const oc_backend_ops cl_ops = {
    OC_BACKEND_OPS_VERSION, "opencl", cl_close,
    cl_alloc, cl_free, cl_import, cl_weight,
    cl_bind, cl_write, cl_read, cl_map_read, cl_unmap,
    cl_matmul, cl_embed, cl_norm, cl_rope, cl_kv_store, cl_attention,
    cl_add, cl_act, cl_glu, cl_gather_rows,
    cl_kv_keep, cl_kv_dev, cl_write_queued,
    cl_matmul_n, cl_matmul_glu, cl_rope_store, cl_attn_stats_flush,
    cl_matmul_acc, cl_norm_matmul,
};

static oc_cl_attn_limits attn_limits(const oc_backend_limits *lim) {
    oc_cl_attn_limits al = { lim->attn.max_n_q, lim->attn.n_head, lim->attn.n_head_kv, lim->attn.head_dim,
                             lim->max_images, lim->max_segments, lim->attn.max_n_kv, lim->max_shared_keys };
    return al;
}

/* The limits of the per-kv-head instance: one kv head and its query group. */
static oc_backend_limits kv_head_limits(const oc_backend_limits *lim) {
    oc_backend_limits k = *lim;
    k.attn.n_head = lim->attn.n_head / OC_MAX(1, lim->attn.n_head_kv);
    k.attn.n_head_kv = 1;
    /* only a model with one kv head sends prefill calls (with dynamic heads) to this instance */
    if (lim->attn.n_head_kv != 1) k.attn.max_n_kv = 0;
    return k;
}

size_t oc_cl_backend_bytes(const oc_backend_limits *lim) {
    oc_cl_attn_limits al = attn_limits(lim);
    size_t n = 0;   /* the instance and its index array, each an oc_mem_alloc block */
    oc_add_block(&n, sizeof(cl_backend));
    oc_add_block(&n, (size_t)OC_MAX((int64_t)1, lim->max_n_tok) * sizeof(int32_t));
    oc_add_block(&n, STAGE_BYTES);
    if (lim->attn.n_head > 0 && lim->per_kv_head) {
        oc_backend_limits k = kv_head_limits(lim);
        oc_cl_attn_limits akl = attn_limits(&k);
        n += oc_cl_attn_host_bytes(&akl);
    }
    if (lim->per_kv_head) n += oc_cl_buf_host_bytes();   /* keep_idx */
    return lim->attn.n_head > 0 ? n + oc_cl_attn_host_bytes(&al) : n;
}

oc_status oc_cl_backend_open(oc_backend **out, const oc_backend_spec *spec, const oc_backend_limits *lim,
                             const oc_allocator *alloc, oc_error *err) {
    *out = NULL;
    if (lim->max_n_tok < 0 || lim->max_n_tok > INT32_MAX || lim->max_images < 0 || lim->max_segments < 0)
        return oc_fail(err, OC_ERR_INVALID, "backend opencl: bad limits");
    if (!alloc) alloc = oc_default_allocator();
    cl_backend *b = oc_mem_calloc(alloc, sizeof *b);
    if (!b) return oc_fail(err, OC_ERR_NOMEM, "backend opencl: out of memory");
    b->base.ops = &cl_ops;
    b->alloc = *alloc;
    b->dev = spec->dev;
    oc_status st = OC_OK;
    if (!b->dev) {
        st = oc_cl_backend_device_open(&b->dev, spec->device, &b->alloc, err);
        b->own_dev = st == OC_OK;
    }
    b->idx_cap = OC_MAX((int64_t)1, lim->max_n_tok);
    if (st == OC_OK && (!(b->idx = oc_mem_alloc(&b->alloc, (size_t)b->idx_cap * sizeof(int32_t))) ||
                        !(b->stage = oc_mem_alloc(&b->alloc, STAGE_BYTES))))
        st = oc_fail(err, OC_ERR_NOMEM, "backend opencl: out of memory");
    if (st == OC_OK && lim->attn.n_head > 0) {
        oc_cl_attn_limits al = attn_limits(lim);
        b->attn_dims = lim->attn;
        st = oc_cl_attn_open(&b->attn, b->dev->cl, &al, err);
    }
    if (st == OC_OK && lim->attn.n_head > 0 && lim->per_kv_head) {
        oc_backend_limits k = kv_head_limits(lim);
        oc_cl_attn_limits akl = attn_limits(&k);
        b->attn_kv_dims = k.attn;
        st = oc_cl_attn_open(&b->attn_kv, b->dev->cl, &akl, err);
    }
    if (b->attn) oc_cl_attn_set_pool(b->attn, spec->pool);   /* the index choices (cl_attn.c est_choose) */
    if (b->attn_kv) oc_cl_attn_set_pool(b->attn_kv, spec->pool);
    if (b->attn) oc_cl_attn_defer_counts(b->attn, 1);   /* a sparse prefill waits once (attn_stats_flush) */
    if (b->attn_kv) oc_cl_attn_defer_counts(b->attn_kv, 1);
    if (st == OC_OK && lim->per_kv_head)
        st = oc_cl_buf_alloc(b->dev->cl, (size_t)OC_MAX(1, lim->attn.max_n_kv) * sizeof(int32_t), &b->keep_idx, err);
    if (st != OC_OK) {
        if (!b->idx) b->idx_cap = 0;
        cl_close(&b->base);
        return st;
    }
    *out = &b->base;
    return OC_OK;
}

/* ---- the provider ------------------------------------------------------------------------------ */

static size_t cl_bytes(const oc_backend_spec *spec, const oc_backend_limits *lim, int n_threads) {
    (void)spec;
    (void)n_threads;   /* the device runs the threads */
    return oc_cl_backend_bytes(lim);
}

const oc_backend_provider oc_backend_opencl_provider = {
    .kind = OC_BACKEND_KIND_OPENCL,
    .name = "OpenCL",
    .bytes = cl_bytes,
    .open = oc_cl_backend_open,
    /* cl_attn.c executes the same patterns as the CPU engine (the kernels mirror attn.c's tile
     * classes), so it shares the engine's one table; a pattern the device cannot run yet would get
     * a table of its own here. */
    .pattern_exec = oc_attn_pattern_exec,
    .buffer_host_bytes = oc_cl_backend_buffer_host_bytes,
    .device_open = oc_cl_backend_device_open,
    .device_close = oc_cl_backend_device_close,
    .device_name = oc_cl_backend_device_name,
    .device_bytes = oc_cl_backend_device_bytes,
    .device_finish = oc_cl_backend_device_finish,
    .device_host_bytes = oc_cl_backend_device_host_bytes,
};
