/* backend_cpu_rows.c: the CPU backend's operations between the matrix products: embedding rows,
 * norms, rotary, the f16 KV store, residual adds, activations and row gathers. Each is a loop of
 * nn.h / quant.h / f16.h calls over rows (or over fixed chunks of elements) handed to the pool as
 * tasks; every row or element is computed by one task with the same function as a serial loop
 * would use, so results do not depend on the thread count or the chunking. */
#include "backend/backend_cpu.h"

#include "core/f16.h"
#include "kernels/quant.h"
#include "kvcache/kv_cache.h"

#include <string.h>

#define TASK_FLOATS 16384   /* work per task: big enough to amortize the handout, small for balance */

typedef enum row_op { OP_EMBED, OP_NORM, OP_ROPE, OP_KV, OP_ADD, OP_ACT, OP_GLU, OP_GATHER } row_op;

typedef struct job {
    row_op op;
    int64_t n, per_task;         /* rows (or elements for the elementwise ops) and their count per task */
    int64_t dim;                 /* floats per row */
    float *x, *y;
    const float *src, *w, *b;
    uint16_t *h;                 /* OP_KV destination */
    const int32_t *idx;          /* OP_EMBED ids, OP_GATHER row indices */
    oc_norm_kind norm;
    float eps;
    oc_act act;
    oc_act_fn act_fn;            /* OP_ACT / OP_GLU: the backend ISA's loop (nn.h oc_act_kernel) */
    int32_t n_head, head_dim, n_pairs, unit;
    const char *table;           /* OP_EMBED rows, row_bytes apart */
    size_t row_bytes;
    oc_to_f32_fn to_f32;
} job;

static void one_row(const job *j, int64_t r) {
    size_t off = (size_t)r * (size_t)j->dim;
    switch (j->op) {
    case OP_EMBED:
        if (j->idx[r] >= 0) j->to_f32(j->table + (size_t)j->idx[r] * j->row_bytes, j->x + off, j->dim);
        break;
    case OP_NORM: {
        float *x = j->x + off;
        if (j->src) oc_add(x, j->src + off, j->dim);
        if (!j->y) break;
        if (j->norm == OC_NORM_LAYER) oc_layer_norm(j->y + off, x, j->w, j->b, j->dim, j->eps);
        else oc_rms_norm(j->y + off, x, j->w, j->dim, j->eps);
        break;
    }
    case OP_ROPE: {
        const float *c = j->src + (size_t)r * (size_t)j->n_pairs, *s = j->w + (size_t)r * (size_t)j->n_pairs;
        for (int32_t h = 0; h < j->n_head; h++) oc_rope_neox(j->x + off + (size_t)h * (size_t)j->head_dim, j->n_pairs, c, s);
        break;
    }
    case OP_GATHER: {
        size_t s = (size_t)j->idx[r / j->unit] * (size_t)j->unit + (size_t)(r % j->unit);
        memcpy(j->x + off, j->src + s * (size_t)j->dim, (size_t)j->dim * sizeof(float));
        break;
    }
    default: break;
    }
}

/* Elements [i0, i1) of an elementwise op. */
static void elements(const job *j, int64_t i0, int64_t i1) {
    int64_t n = i1 - i0;
    switch (j->op) {
    case OP_KV:
        for (int64_t i = i0; i < i1; i++) j->h[i] = oc_f32_to_f16(j->src[i]);
        break;
    case OP_ADD: oc_add(j->x + i0, j->src + i0, n); break;
    case OP_ACT: j->act_fn(j->x + i0, j->x + i0, NULL, n, j->act); break;
    case OP_GLU: j->act_fn(j->x + i0, j->x + i0, j->src + i0, n, j->act); break;
    default: break;
    }
}

static void task_fn(void *ctx, int64_t task, int thread) {
    (void)thread;
    const job *j = ctx;
    int64_t i0 = task * j->per_task, i1 = OC_MIN(i0 + j->per_task, j->n);
    if (j->op == OP_KV || j->op == OP_ADD || j->op == OP_ACT || j->op == OP_GLU) {
        elements(j, i0, i1);
        return;
    }
    for (int64_t r = i0; r < i1; r++) one_row(j, r);
}

/* Rows of width floats per task: about TASK_FLOATS of work, at least one row. */
static oc_status run(oc_backend *be, job *j, int64_t n, int64_t width) {
    j->n = n;
    j->per_task = OC_MAX((int64_t)1, (int64_t)TASK_FLOATS / OC_MAX((int64_t)1, width));
    oc_pool_run(((oc_backend_cpu *)(void *)be)->pool, (n + j->per_task - 1) / j->per_task, task_fn, j);
    return OC_OK;
}

#define SPAN(var, type, t, off, n, what) \
    do { if (!((var) = (type)oc_bt_cpu_span((t), (off), (n), sizeof *(var), (what), err))) return OC_ERR_INVALID; } while (0)

oc_status oc_cpu_embed(oc_backend *be, const oc_bw *table, const oc_bt *ids, int64_t n, oc_bt *dst,
                       int64_t dst_off, oc_error *err) {
    if (n <= 0) return OC_OK;
    job j = { .op = OP_EMBED, .dim = table->w.n_in, .table = table->w.data, .row_bytes = table->w.row_bytes,
              .to_f32 = oc_dequant_ref(table->w.dtype) };
    if (!j.to_f32 || !j.table) return oc_fail(err, OC_ERR_UNSUPPORTED, "backend cpu embed: table type %d", (int)table->w.dtype);
    SPAN(j.idx, const int32_t *, ids, 0, n, "embed ids");
    SPAN(j.x, float *, dst, dst_off, n * j.dim, "embed dst");
    for (int64_t r = 0; r < n; r++)
        if (j.idx[r] >= table->w.n_out)
            return oc_fail(err, OC_ERR_INVALID, "backend cpu embed: id %d outside the table of %lld rows",
                           (int)j.idx[r], (long long)table->w.n_out);
    return run(be, &j, n, j.dim);
}

oc_status oc_cpu_norm(oc_backend *be, oc_norm_kind kind, oc_bt *x, int64_t x_off, const oc_bt *res,
                      int64_t res_off, oc_bt *y, int64_t y_off, const oc_bt *w, const oc_bt *b,
                      int64_t n_rows, int64_t dim, float eps, oc_error *err) {
    if (n_rows <= 0) return OC_OK;
    job j = { .op = OP_NORM, .dim = dim, .norm = kind, .eps = eps };
    int64_t n = n_rows * dim;
    SPAN(j.x, float *, x, x_off, n, "norm x");
    if (res) SPAN(j.src, const float *, res, res_off, n, "norm residual");
    if (y) SPAN(j.y, float *, y, y_off, n, "norm y");
    if (w) SPAN(j.w, const float *, w, 0, dim, "norm weight");
    if (b) SPAN(j.b, const float *, b, 0, dim, "norm bias");
    return run(be, &j, n_rows, dim);
}

oc_status oc_cpu_rope(oc_backend *be, oc_bt *x, int64_t x_off, int64_t n_tok, int32_t n_head,
                      int32_t head_dim, int32_t n_pairs, const oc_bt *cos, const oc_bt *sin, oc_error *err) {
    if (n_tok <= 0) return OC_OK;
    if (n_pairs < 0 || 2 * n_pairs > head_dim)
        return oc_fail(err, OC_ERR_INVALID, "backend cpu rope: %d pairs in heads of %d", (int)n_pairs, (int)head_dim);
    job j = { .op = OP_ROPE, .dim = (int64_t)n_head * head_dim, .n_head = n_head, .head_dim = head_dim,
              .n_pairs = n_pairs };
    SPAN(j.x, float *, x, x_off, n_tok * j.dim, "rope x");
    SPAN(j.src, const float *, cos, 0, n_tok * n_pairs, "rope cos");
    SPAN(j.w, const float *, sin, 0, n_tok * n_pairs, "rope sin");
    return run(be, &j, n_tok, j.dim);
}

oc_status oc_cpu_kv_store(oc_backend *be, const oc_bt *src, int64_t src_off, oc_bt *dst, int64_t dst_off,
                          int64_t n, oc_error *err) {
    if (n <= 0) return OC_OK;
    job j = { .op = OP_KV };
    SPAN(j.src, const float *, src, src_off, n, "kv_store src");
    SPAN(j.h, uint16_t *, dst, dst_off, n, "kv_store dst");
    return run(be, &j, n, 1);
}

/* Serial: the rows move down in order (kept ascending), which in place is safe only in that order;
 * it runs once per prompt, not per token. */
oc_status oc_cpu_kv_keep(oc_backend *be, oc_bt *t, int64_t off, int64_t stride_elems, int32_t row_elems,
                         const int32_t *kept, int32_t n_kept, oc_error *err) {
    if (n_kept <= 0) return OC_OK;
    uint16_t *base;
    int64_t span_elems = (int64_t)kept[n_kept - 1] * stride_elems + row_elems;
    SPAN(base, uint16_t *, t, off, span_elems, "kv_keep");
    oc_kv_compact_rows(base, stride_elems, row_elems, sizeof *base, kept, n_kept);
    return OC_OK;
}

oc_status oc_cpu_add(oc_backend *be, oc_bt *y, int64_t y_off, const oc_bt *x, int64_t x_off, int64_t n,
                     oc_error *err) {
    if (n <= 0) return OC_OK;
    job j = { .op = OP_ADD };
    SPAN(j.x, float *, y, y_off, n, "add y");
    SPAN(j.src, const float *, x, x_off, n, "add x");
    return run(be, &j, n, 1);
}

oc_status oc_cpu_act(oc_backend *be, oc_bt *x, int64_t x_off, int64_t n, oc_act act, oc_error *err) {
    if (n <= 0) return OC_OK;
    job j = { .op = OP_ACT, .act = act, .act_fn = oc_act_kernel(((oc_backend_cpu *)(void *)be)->isa) };
    SPAN(j.x, float *, x, x_off, n, "act x");
    return run(be, &j, n, 1);
}

oc_status oc_cpu_glu(oc_backend *be, oc_bt *g, int64_t g_off, const oc_bt *u, int64_t u_off, int64_t n,
                     oc_act act, oc_error *err) {
    if (n <= 0) return OC_OK;
    job j = { .op = OP_GLU, .act = act, .act_fn = oc_act_kernel(((oc_backend_cpu *)(void *)be)->isa) };
    SPAN(j.x, float *, g, g_off, n, "glu gate");
    SPAN(j.src, const float *, u, u_off, n, "glu up");
    return run(be, &j, n, 1);
}

oc_status oc_cpu_gather_rows(oc_backend *be, oc_bt *dst, int64_t dst_off, const oc_bt *src, int64_t src_off,
                             const oc_bt *idx, int64_t n_rows, int64_t dim, int32_t unit, oc_error *err) {
    if (n_rows <= 0) return OC_OK;
    if (unit < 1) return oc_fail(err, OC_ERR_INVALID, "backend cpu gather_rows: unit %d", (int)unit);
    job j = { .op = OP_GATHER, .dim = dim, .unit = unit };
    int64_t n_idx = (n_rows + unit - 1) / unit;
    SPAN(j.x, float *, dst, dst_off, n_rows * dim, "gather_rows dst");
    SPAN(j.idx, const int32_t *, idx, 0, n_idx, "gather_rows idx");
    /* every source row must exist: the largest index decides */
    int32_t top = 0;
    for (int64_t i = 0; i < n_idx; i++) {
        if (j.idx[i] < 0) return oc_fail(err, OC_ERR_INVALID, "backend cpu gather_rows: negative index");
        top = OC_MAX(top, j.idx[i]);
    }
    SPAN(j.src, const float *, src, src_off, ((int64_t)top + 1) * unit * dim, "gather_rows src");
    return run(be, &j, n_rows, dim);
}
