/* cl_ops.c: the element-wise and per-row operations of cl_ops.h (norms, activations, rotary,
 * residual adds, embedding lookup, KV-cache store, argmax) and the FMA roof. Each function checks
 * its views against the buffers, then makes one oc_cl_launch. Matrix products: cl_matmul.c. */
#include "opencl/cl_ops.h"
#include "port.h"

#include <string.h>

#define ROW_WG 256   /* work-group of the per-row kernels (norms, argmax), capped by the kernel */
#define ELEM_WG 256  /* work-group of the element-wise kernels */

/* 1 when n_elems elements of elem_bytes from element off lie inside buf and every index fits an
 * int32 (the kernels' arguments). */
static int span_ok(const oc_cl_buf *buf, int64_t off, int64_t n_elems, size_t elem_bytes) {
    if (!buf || !oc_cl_fits_i32(off, n_elems)) return 0;
    return (uint64_t)(off + n_elems) <= oc_cl_buf_bytes(buf) / elem_bytes;
}

/* A view of n_rows rows of n floats. */
static oc_status mat_check(oc_cl_mat m, int64_t n_rows, int64_t n, const char *op, const char *what, oc_error *err) {
    int ok = n_rows >= 1 && n >= 1 && m.off >= 0 && (n_rows == 1 || m.stride >= n) && m.stride <= INT32_MAX;
    if (ok) {
        int64_t last = (n_rows - 1) * m.stride;   /* n_rows <= INT32_MAX and stride <= INT32_MAX: no overflow */
        ok = last <= INT32_MAX && span_ok(m.buf, m.off, last + n, sizeof(float));
    }
    if (!ok)
        return oc_fail(err, OC_ERR_RANGE, "opencl %s: %s (%lld rows of %lld floats from %lld, stride %lld) does "
                       "not fit its buffer", op, what, (long long)n_rows, (long long)n, (long long)m.off,
                       (long long)m.stride);
    return OC_OK;
}

static oc_status vec_check(const oc_cl_buf *b, int64_t off, int64_t n, const char *op, const char *what, oc_error *err) {
    if (!span_ok(b, off, n, sizeof(float)))
        return oc_fail(err, OC_ERR_RANGE, "opencl %s: %s (%lld floats from %lld) does not fit its buffer", op, what,
                       (long long)n, (long long)off);
    return OC_OK;
}

static oc_status row_count_check(int64_t n_rows, int64_t n, const char *op, oc_error *err) {
    if (n_rows < 1 || n_rows > INT32_MAX || n < 1 || n > INT32_MAX)
        return oc_fail(err, OC_ERR_INVALID, "opencl %s: %lld rows of %lld", op, (long long)n_rows, (long long)n);
    return OC_OK;
}

/* ---- norms --------------------------------------------------------------------------------------------- */

oc_status oc_cl_norm(oc_cl_device *dev, oc_cl_norm_kind kind, oc_cl_mat y, oc_cl_mat x, oc_cl_mat res,
                     const oc_cl_buf *w, const oc_cl_buf *b, int64_t n_rows, int64_t n, float eps, oc_error *err) {
    oc_status st;
    if (kind != OC_CL_NORM_RMS && kind != OC_CL_NORM_LAYER)
        return oc_fail(err, OC_ERR_INVALID, "opencl norm: unknown kind %d", (int)kind);
    if ((st = row_count_check(n_rows, n, "norm", err)) || (st = mat_check(x, n_rows, n, "norm", "x", err)) ||
        (y.buf && (st = mat_check(y, n_rows, n, "norm", "y", err))) ||
        (res.buf && (st = mat_check(res, n_rows, n, "norm", "residual", err))) ||
        (w && (st = vec_check(w, 0, n, "norm", "weight", err))) || (b && (st = vec_check(b, 0, n, "norm", "bias", err))))
        return st;
    size_t wg = oc_cl_pow2_wg(dev, OC_CLK_NORM, ROW_WG), global = wg * (size_t)n_rows;
    oc_cl_arg a[] = { OC_CL_I32(kind == OC_CL_NORM_LAYER), OC_CL_BUF(y.buf), OC_CL_I32(y.off), OC_CL_I32(y.stride),
                      OC_CL_I32(y.buf != NULL), OC_CL_BUF(x.buf), OC_CL_I32(x.off), OC_CL_I32(x.stride),
                      OC_CL_BUF(res.buf), OC_CL_I32(res.off), OC_CL_I32(res.stride), OC_CL_I32(res.buf != NULL),
                      OC_CL_BUF(w), OC_CL_I32(w != NULL), OC_CL_BUF(b), OC_CL_I32(b != NULL), OC_CL_I32(n),
                      OC_CL_F32(eps), OC_CL_LOCAL(wg * sizeof(float)) };
    return oc_cl_launch(dev, OC_CLK_NORM, 1, &global, &wg, (int)OC_ARRAY_LEN(a), a, err);
}

/* ---- element-wise ------------------------------------------------------------------------------------------ */

static oc_status elem_launch(oc_cl_device *dev, oc_cl_kernel_id id, int64_t n, int n_args, const oc_cl_arg *a,
                             oc_error *err) {
    size_t wg = oc_cl_pow2_wg(dev, id, ELEM_WG), global = (size_t)n;
    return oc_cl_launch(dev, id, 1, &global, &wg, n_args, a, err);
}

oc_status oc_cl_act(oc_cl_device *dev, oc_cl_buf *x, int64_t off, int64_t n, oc_act act, oc_error *err) {
    oc_status st = vec_check(x, off, n, "act", "x", err);
    if (st != OC_OK) return st;
    oc_cl_arg a[] = { OC_CL_BUF(x), OC_CL_I32(off), OC_CL_I32(n), OC_CL_I32(act) };
    return elem_launch(dev, OC_CLK_ACT, n, (int)OC_ARRAY_LEN(a), a, err);
}

oc_status oc_cl_glu(oc_cl_device *dev, oc_cl_buf *out, int64_t out_off, const oc_cl_buf *gate, int64_t gate_off,
                    const oc_cl_buf *up, int64_t up_off, int64_t n, oc_act act, oc_error *err) {
    oc_status st;
    if ((st = vec_check(out, out_off, n, "glu", "out", err)) || (st = vec_check(gate, gate_off, n, "glu", "gate", err)) ||
        (st = vec_check(up, up_off, n, "glu", "up", err)))
        return st;
    oc_cl_arg a[] = { OC_CL_BUF(out), OC_CL_I32(out_off), OC_CL_BUF(gate), OC_CL_I32(gate_off), OC_CL_BUF(up),
                      OC_CL_I32(up_off), OC_CL_I32(n), OC_CL_I32(act) };
    return elem_launch(dev, OC_CLK_GLU, n, (int)OC_ARRAY_LEN(a), a, err);
}

oc_status oc_cl_add(oc_cl_device *dev, oc_cl_buf *y, int64_t y_off, const oc_cl_buf *x, int64_t x_off, int64_t n,
                    oc_error *err) {
    oc_status st;
    if ((st = vec_check(y, y_off, n, "add", "y", err)) || (st = vec_check(x, x_off, n, "add", "x", err))) return st;
    oc_cl_arg a[] = { OC_CL_BUF(y), OC_CL_I32(y_off), OC_CL_BUF(x), OC_CL_I32(x_off), OC_CL_I32(n) };
    return elem_launch(dev, OC_CLK_ADD, n, (int)OC_ARRAY_LEN(a), a, err);
}

oc_status oc_cl_rope_neox(oc_cl_device *dev, oc_cl_buf *x, int64_t off, int64_t stride_token, int64_t stride_head,
                          int32_t n_tokens, int32_t n_heads, int32_t n_pairs, oc_cl_mat cos_t, oc_cl_mat sin_t,
                          oc_error *err) {
    oc_status st;
    if (n_tokens < 1 || n_heads < 1 || n_pairs < 1 || stride_head < 2 * (int64_t)n_pairs || stride_token < 0)
        return oc_fail(err, OC_ERR_INVALID, "opencl rope: %d tokens x %d heads of %d pairs, head stride %lld",
                       (int)n_tokens, (int)n_heads, (int)n_pairs, (long long)stride_head);
    /* the last element touched: token n_tokens-1, head n_heads-1, element 2 n_pairs - 1 */
    oc_cl_mat xm = oc_cl_mat_of(x, off, stride_token);
    int64_t head_span = (int64_t)(n_heads - 1) * stride_head + 2 * (int64_t)n_pairs;
    if ((n_tokens > 1 && stride_token < head_span) || stride_head > INT32_MAX)
        return oc_fail(err, OC_ERR_INVALID, "opencl rope: token stride %lld below the %lld floats of its heads",
                       (long long)stride_token, (long long)head_span);
    if ((st = mat_check(xm, n_tokens, head_span, "rope", "x", err)) ||
        (st = mat_check(cos_t, n_tokens, n_pairs, "rope", "cos table", err)) ||
        (st = mat_check(sin_t, n_tokens, n_pairs, "rope", "sin table", err)))
        return st;
    if (cos_t.stride != sin_t.stride && n_tokens > 1)
        return oc_fail(err, OC_ERR_INVALID, "opencl rope: the cos and sin tables need one row stride");
    size_t global[3] = { (size_t)n_pairs, (size_t)n_heads, (size_t)n_tokens };
    oc_cl_arg a[] = { OC_CL_BUF(x), OC_CL_I32(off), OC_CL_I32(stride_token), OC_CL_I32(stride_head), OC_CL_I32(n_heads),
                      OC_CL_I32(n_pairs), OC_CL_I32(n_tokens), OC_CL_BUF(cos_t.buf), OC_CL_I32(cos_t.off),
                      OC_CL_BUF(sin_t.buf), OC_CL_I32(sin_t.off), OC_CL_I32(cos_t.stride) };
    return oc_cl_launch(dev, OC_CLK_ROPE_NEOX, 3, global, NULL, (int)OC_ARRAY_LEN(a), a, err);
}

oc_status oc_cl_rope_store(oc_cl_device *dev, oc_cl_mat q, oc_cl_buf *k, int64_t k_off, const oc_cl_buf *v,
                           int64_t v_off, int64_t kv_stride, int32_t n_tokens, int32_t n_head, int32_t n_head_kv,
                           int32_t head_dim, int32_t n_pairs, oc_cl_mat cos_t, oc_cl_mat sin_t, oc_cl_buf *k_cache,
                           int64_t k_dst, oc_cl_buf *v_cache, int64_t v_dst, oc_error *err) {
    oc_status st;
    int64_t qd = (int64_t)n_head * head_dim, kvd = (int64_t)n_head_kv * head_dim;
    if (n_tokens < 1 || n_head < 1 || n_head_kv < 1 || n_pairs < 1 || 2 * (int64_t)n_pairs > head_dim ||
        (n_tokens > 1 && (q.stride < qd || kv_stride < kvd)) || kv_stride > INT32_MAX ||
        (cos_t.stride != sin_t.stride && n_tokens > 1))
        return oc_fail(err, OC_ERR_INVALID, "opencl rope_store: %d tokens x %d + %d heads of %d pairs in %d, row strides "
                       "%lld, %lld", (int)n_tokens, (int)n_head, (int)n_head_kv, (int)n_pairs, (int)head_dim,
                       (long long)q.stride, (long long)kv_stride);
    if ((st = mat_check(q, n_tokens, qd, "rope_store", "q", err)) ||
        (st = mat_check(oc_cl_mat_of(k, k_off, kv_stride), n_tokens, kvd, "rope_store", "k", err)) ||
        (st = mat_check(oc_cl_mat_of((oc_cl_buf *)v, v_off, kv_stride), n_tokens, kvd, "rope_store", "v", err)) ||
        (st = mat_check(cos_t, n_tokens, n_pairs, "rope_store", "cos table", err)) ||
        (st = mat_check(sin_t, n_tokens, n_pairs, "rope_store", "sin table", err)))
        return st;
    int64_t span = (int64_t)n_tokens * kvd;
    if (k_dst < 0 || v_dst < 0 || !span_ok(k_cache, k_dst, span, 2) || !span_ok(v_cache, v_dst, span, 2))
        return oc_fail(err, OC_ERR_RANGE, "opencl rope_store: %d rows of %lld at %lld / %lld outside the caches",
                       (int)n_tokens, (long long)kvd, (long long)k_dst, (long long)v_dst);
    size_t global[3] = { (size_t)n_pairs, (size_t)(n_head + 2 * n_head_kv), (size_t)n_tokens };
    oc_cl_arg a[] = { OC_CL_BUF(q.buf), OC_CL_I32(q.off), OC_CL_I32(q.stride), OC_CL_I32(n_head), OC_CL_BUF(k),
                      OC_CL_I32(k_off), OC_CL_BUF(v), OC_CL_I32(v_off), OC_CL_I32(kv_stride), OC_CL_I32(n_head_kv),
                      OC_CL_I32(head_dim), OC_CL_I32(n_pairs), OC_CL_I32(n_tokens), OC_CL_BUF(cos_t.buf),
                      OC_CL_I32(cos_t.off), OC_CL_BUF(sin_t.buf), OC_CL_I32(sin_t.off), OC_CL_I32(cos_t.stride),
                      OC_CL_BUF(k_cache), OC_CL_I32(k_dst), OC_CL_BUF(v_cache), OC_CL_I32(v_dst) };
    return oc_cl_launch(dev, OC_CLK_ROPE_STORE, 3, global, NULL, (int)OC_ARRAY_LEN(a), a, err);
}

oc_status oc_cl_gather_rows(oc_cl_device *dev, oc_cl_buf *dst, int64_t dst_off, const oc_cl_buf *src, int64_t src_off,
                            int64_t n_src_rows, const oc_cl_buf *idx, int64_t idx_off, int64_t n_rows, int64_t dim,
                            int32_t unit, oc_error *err) {
    oc_status st;
    if (unit < 1 || n_src_rows < 1 || n_src_rows > INT32_MAX ||
        (st = row_count_check(n_rows, dim, "gather_rows", err)) != OC_OK)
        return oc_fail(err, OC_ERR_INVALID, "opencl gather_rows: %lld rows of %lld in units of %d from %lld rows",
                       (long long)n_rows, (long long)dim, (int)unit, (long long)n_src_rows);
    if ((st = mat_check(oc_cl_mat_of(dst, dst_off, dim), n_rows, dim, "gather_rows", "dst", err)) ||
        (st = mat_check(oc_cl_mat_of((oc_cl_buf *)src, src_off, dim), n_src_rows, dim, "gather_rows", "src", err)))
        return st;
    int64_t n_idx = (n_rows + unit - 1) / unit;   /* a last unit may be partial */
    if (!span_ok(idx, idx_off, n_idx, sizeof(int32_t)))
        return oc_fail(err, OC_ERR_RANGE, "opencl gather_rows: %lld indices from %lld do not fit their buffer",
                       (long long)n_idx, (long long)idx_off);
    size_t global[2] = { (size_t)dim, (size_t)n_rows };
    oc_cl_arg a[] = { OC_CL_BUF(dst), OC_CL_I32(dst_off), OC_CL_BUF(src), OC_CL_I32(src_off), OC_CL_I32(n_src_rows),
                      OC_CL_BUF(idx), OC_CL_I32(idx_off), OC_CL_I32(n_rows), OC_CL_I32(dim), OC_CL_I32(unit) };
    return oc_cl_launch(dev, OC_CLK_GATHER_ROWS, 2, global, NULL, (int)OC_ARRAY_LEN(a), a, err);
}

/* ---- embedding, KV cache, argmax ------------------------------------------------------------------------------ */

oc_status oc_cl_embed(oc_cl_device *dev, const oc_cl_weight *table, const oc_cl_buf *ids, int64_t ids_off,
                      int32_t n_tokens, oc_cl_mat out, oc_error *err) {
    oc_status st;
    if (!table || !table->buf || !oc_cl_weight_type_ok(table->dtype) || table->row_bytes > INT32_MAX ||
        table->n_out > INT32_MAX || table->n_in > INT32_MAX)
        return oc_fail(err, OC_ERR_INVALID, "opencl embed: no table, or a table the kernels do not take");
    if ((st = row_count_check(n_tokens, table->n_in, "embed", err)) ||
        (st = mat_check(out, n_tokens, table->n_in, "embed", "out", err)))
        return st;
    if (!span_ok(ids, ids_off, n_tokens, sizeof(int32_t)))
        return oc_fail(err, OC_ERR_RANGE, "opencl embed: %d ids from %lld do not fit their buffer", (int)n_tokens,
                       (long long)ids_off);
    size_t global[2] = { (size_t)(table->n_in + 7) / 8, (size_t)n_tokens };
    oc_cl_arg a[] = { OC_CL_BUF(out.buf), OC_CL_I32(out.off), OC_CL_I32(out.stride), OC_CL_BUF(table->buf),
                      OC_CL_I32(table->dtype), OC_CL_I32(table->row_bytes), OC_CL_I32(table->n_out),
                      OC_CL_I32(table->n_in), OC_CL_BUF(ids), OC_CL_I32(ids_off), OC_CL_I32(n_tokens) };
    return oc_cl_launch(dev, OC_CLK_EMBED, 2, global, NULL, (int)OC_ARRAY_LEN(a), a, err);
}

oc_status oc_cl_kv_store(oc_cl_device *dev, oc_cl_mat src, int32_t n_rows, int64_t n_cols, oc_cl_buf *dst,
                         int32_t dst_dtype, int64_t dst_off, int64_t dst_stride, oc_error *err) {
    oc_status st;
    if (dst_dtype != OC_DTYPE_F16 && dst_dtype != OC_DTYPE_F32)
        return oc_fail(err, OC_ERR_INVALID, "opencl kv_store: cache type %d is neither f16 nor f32", (int)dst_dtype);
    if ((st = row_count_check(n_rows, n_cols, "kv_store", err)) ||
        (st = mat_check(src, n_rows, n_cols, "kv_store", "src", err)))
        return st;
    size_t elem = dst_dtype == OC_DTYPE_F16 ? 2 : 4;
    int ok = dst_off >= 0 && (n_rows == 1 || dst_stride >= n_cols) && dst_stride <= INT32_MAX;
    int64_t span = ok ? (int64_t)(n_rows - 1) * dst_stride + n_cols : 0;
    if (!ok || !span_ok(dst, dst_off, span, elem))
        return oc_fail(err, OC_ERR_RANGE, "opencl kv_store: %d rows of %lld at %lld (stride %lld) outside the cache",
                       (int)n_rows, (long long)n_cols, (long long)dst_off, (long long)dst_stride);
    size_t global[2] = { (size_t)n_cols, (size_t)n_rows };
    oc_cl_arg a[] = { OC_CL_BUF(dst), OC_CL_I32(dst_dtype == OC_DTYPE_F16), OC_CL_I32(dst_off), OC_CL_I32(dst_stride),
                      OC_CL_BUF(src.buf), OC_CL_I32(src.off), OC_CL_I32(src.stride), OC_CL_I32(n_cols),
                      OC_CL_I32(n_rows) };
    return oc_cl_launch(dev, OC_CLK_KV_STORE, 2, global, NULL, (int)OC_ARRAY_LEN(a), a, err);
}

oc_status oc_cl_argmax(oc_cl_device *dev, oc_cl_mat x, int32_t n_rows, int64_t n, oc_cl_buf *out_ids,
                       int64_t out_off, oc_error *err) {
    oc_status st;
    if ((st = row_count_check(n_rows, n, "argmax", err)) || (st = mat_check(x, n_rows, n, "argmax", "x", err)))
        return st;
    if (!span_ok(out_ids, out_off, n_rows, sizeof(int32_t)))
        return oc_fail(err, OC_ERR_RANGE, "opencl argmax: %d ids from %lld do not fit their buffer", (int)n_rows,
                       (long long)out_off);
    size_t wg = oc_cl_pow2_wg(dev, OC_CLK_ARGMAX, ROW_WG), global = wg * (size_t)n_rows;
    oc_cl_arg a[] = { OC_CL_BUF(out_ids), OC_CL_I32(out_off), OC_CL_BUF(x.buf), OC_CL_I32(x.off), OC_CL_I32(x.stride),
                      OC_CL_I32(n), OC_CL_LOCAL(wg * sizeof(float)), OC_CL_LOCAL(wg * sizeof(int32_t)) };
    return oc_cl_launch(dev, OC_CLK_ARGMAX, 1, &global, &wg, (int)OC_ARRAY_LEN(a), a, err);
}

/* ---- FMA roof ---------------------------------------------------------------------------------------------------- */

oc_status oc_cl_fma_peak(oc_cl_device *dev, double *gflops, oc_error *err) {
    const oc_cl_caps *c = oc_cl_device_caps(dev);
    /* enough items to fill every compute unit many times over (GPUs: thousands of lanes each) */
    size_t wg = oc_cl_pow2_wg(dev, OC_CLK_FMA_PEAK, 256);
    size_t items = (size_t)OC_MAX(c->compute_units, 1u) * (c->is_gpu ? 4096 : 64);
    items = (items + wg - 1) / wg * wg;
    oc_cl_buf *out = NULL;
    oc_status st = oc_cl_buf_alloc(dev, items * sizeof(float), &out, err);
    if (st != OC_OK) return st;
    int n_iter = 64;
    double best = 0.0;
    for (int rep = 0; rep < 12 && st == OC_OK; rep++) {
        oc_cl_arg a[] = { OC_CL_BUF(out), OC_CL_F32(0.999f), OC_CL_F32(0.001f), OC_CL_I32(n_iter) };
        uint64_t t0 = oc_port_now_ns();
        st = oc_cl_launch(dev, OC_CLK_FMA_PEAK, 1, &items, &wg, (int)OC_ARRAY_LEN(a), a, err);
        if (st == OC_OK) st = oc_cl_finish(dev, err);
        double s = (double)(oc_port_now_ns() - t0) * 1e-9;
        double flops = 2.0 * 32 * 4 * (double)n_iter * (double)items;
        if (s > 0 && flops / s / 1e9 > best) best = flops / s / 1e9;
        /* grow the run until one takes ~50 ms, so launch overhead does not count */
        if (s < 0.05 && n_iter < (1 << 24)) n_iter *= s < 0.005 ? 8 : 2;
    }
    oc_cl_buf_free(out);
    *gflops = best;
    return st;
}

oc_status oc_cl_read_peak(oc_cl_device *dev, size_t n_bytes, double *gbps, oc_error *err) {
    const oc_cl_caps *c = oc_cl_device_caps(dev);
    *gbps = 0;
    n_bytes = OC_MIN(n_bytes, (size_t)OC_MIN(c->max_alloc_bytes, (uint64_t)INT32_MAX * 16));
    n_bytes &= ~(size_t)15;
    if (n_bytes < ((size_t)1 << 20)) return oc_fail(err, OC_ERR_INVALID, "opencl read peak: %zu bytes", n_bytes);
    oc_cl_buf *x = NULL, *out = NULL;
    oc_status st = oc_cl_buf_alloc(dev, n_bytes, &x, err);
    if (st == OC_OK) st = oc_cl_buf_alloc(dev, sizeof(float), &out, err);
    if (st == OC_OK) st = oc_cl_fill32(dev, x, 0, 0, n_bytes, err);
    /* enough items to keep every compute unit's loads in flight (a GPU: thousands per unit) */
    size_t wg = oc_cl_pow2_wg(dev, OC_CLK_READ_PEAK, 256);
    size_t items = (size_t)OC_MAX(c->compute_units, 1u) * (c->is_gpu ? 2048 : 16);
    items = OC_MIN((items + wg - 1) / wg * wg, (n_bytes / 16 + wg - 1) / wg * wg);
    enum { PASSES = 4 };   /* back to back, so a launch's overhead hides behind the one before */
    for (int rep = 0; rep < 6 && st == OC_OK; rep++) {
        oc_cl_arg a[] = { OC_CL_BUF(out), OC_CL_BUF(x), OC_CL_I32(n_bytes / 16) };
        if ((st = oc_cl_finish(dev, err))) break;
        uint64_t t0 = oc_port_now_ns();
        for (int p = 0; p < PASSES && st == OC_OK; p++)
            st = oc_cl_launch(dev, OC_CLK_READ_PEAK, 1, &items, &wg, (int)OC_ARRAY_LEN(a), a, err);
        if (st == OC_OK) st = oc_cl_finish(dev, err);
        double s = (double)(oc_port_now_ns() - t0) * 1e-9;
        if (st == OC_OK && s > 0 && PASSES * (double)n_bytes / s / 1e9 > *gbps) *gbps = PASSES * (double)n_bytes / s / 1e9;
    }
    oc_cl_buf_free(x);
    oc_cl_buf_free(out);
    return st;
}
